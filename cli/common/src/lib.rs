//! What libwool's programs share, written once: logs (tracing to stderr, as text or one JSON
//! object per line), signals, the address line and how `main` runs and exits (all three
//! programs); the server-side TLS flags and SIGHUP reloads (feature `server`: `wool-worker`
//! and `wool-scaler`, so that `woolctl` builds without the worker).

use std::future::Future;
#[cfg(feature = "server")]
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(feature = "server")]
use libwool::server::{CredentialReload, ServerCredentialFiles};

#[cfg(feature = "server")]
/// The server-side TLS flags (the files are read again when one of them changes and on SIGHUP:
/// new connections get the new material; bad material is refused).
#[derive(Debug, Clone, clap::Args)]
pub struct TlsArgs {
    /// CA certificate (PEM) that client certificates must chain to (mutual TLS).
    #[arg(long, requires_all = ["tls_cert", "tls_key"])]
    pub tls_ca: Option<PathBuf>,
    /// This server's certificate chain (PEM). The three TLS files are read again when one of
    /// them changes and on SIGHUP: new connections get the new material; bad material is
    /// refused.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// This server's private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// One-way TLS: do not ask clients for certificates.
    #[arg(long, requires = "tls_cert")]
    pub one_way: bool,
}

#[cfg(feature = "server")]
impl TlsArgs {
    /// The credential files the flags name; `None` for plaintext.
    ///
    /// Errors: mutual TLS (the default with a certificate) without `--tls-ca`.
    pub fn files(&self) -> Result<Option<ServerCredentialFiles>, String> {
        let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) else {
            return Ok(None);
        };
        let client_ca = match (&self.tls_ca, self.one_way) {
            (_, true) => None,
            (Some(ca), false) => Some(ca.clone()),
            (None, false) => {
                return Err("--tls-ca is required for mutual TLS (or pass --one-way)".into())
            }
        };
        Ok(Some(ServerCredentialFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca,
        }))
    }
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The servers' log flags, `--log-format` and `--log-level` (a filter checked by [`log_filter`]
/// as the command line is parsed: a bad one is a usage error, exit 2, naming it).
#[derive(Debug, Clone, clap::Args)]
pub struct LogArgs {
    /// How log lines on stderr look: human text, or one JSON object per line for machines.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// The log level: error, warn, info, debug, trace or off; or comma-separated
    /// TARGET=LEVEL filters after an optional level, such as `info,libwool=debug` (everything
    /// at info, the library's own lines, `libwool::…`, at debug). By default RUST_LOG's
    /// (checked the same way), else info.
    #[arg(long, value_name = "LEVEL", value_parser = log_filter)]
    pub log_level: Option<String>,
}

impl LogArgs {
    /// Starts the logs as [`init`] does with these flags.
    pub fn init(&self) -> Result<(), String> {
        init(self.log_format, self.log_level.as_deref())
    }
}

/// A log filter, checked: comma-separated directives, each a level (`error`, `warn`, `info`,
/// `debug`, `trace`, `off`, any case) or `TARGET=LEVEL` (tracing's directive syntax, spans and
/// fields included). A bare word that is no level is refused rather than read as tracing does,
/// as a target to log at trace: written as a level (`--log-level shouty`), that reading would
/// turn every other line off without a word. Returns the filter unchanged.
///
/// Errors: the first directive that is neither, named, with the forms that are accepted.
pub fn log_filter(text: &str) -> Result<String, String> {
    use tracing_subscriber::filter::{Directive, LevelFilter};
    const FORMS: &str = "a level (error, warn, info, debug, trace, off) or TARGET=LEVEL \
                         (e.g. libwool=debug)";
    for directive in text.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let valid = if directive.contains('=') {
            directive.parse::<Directive>().is_ok()
        } else {
            directive.parse::<LevelFilter>().is_ok()
        };
        if !valid {
            return Err(format!("{directive:?} is no log directive: give {FORMS}"));
        }
    }
    Ok(text.to_string())
}

/// Logs to stderr at `level` (a tracing filter), else RUST_LOG's, else info; text or JSON lines.
/// What the servers use; errors as [`init_logs`].
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    init_logs(format, level, "info")
}

/// Logs to stderr at `level` (a tracing filter), else RUST_LOG's, else `default`; text (coloured
/// only on a terminal) or JSON lines. `level` and a non-empty RUST_LOG are checked by
/// [`log_filter`].
///
/// Errors: `level` or RUST_LOG is no valid filter (the message names the flag or the variable
/// and the directive): the programs exit 2 on it.
pub fn init_logs(format: LogFormat, level: Option<&str>, default: &str) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let from_env = match std::env::var("RUST_LOG") {
        Ok(env) if !env.trim().is_empty() => Some(env),
        Ok(_) | Err(std::env::VarError::NotPresent) => None,
        Err(std::env::VarError::NotUnicode(_)) => return Err("RUST_LOG is not UTF-8".into()),
    };
    let (text, source) = match (level, &from_env) {
        (Some(level), _) => (level, "--log-level"),
        (None, Some(env)) => (env.as_str(), "RUST_LOG"),
        (None, None) => (default, "the default"),
    };
    let filter = log_filter(text)
        .and_then(|text| EnvFilter::try_new(text).map_err(|e| e.to_string()))
        .map_err(|e| format!("{source} {text:?}: {e}"))?;
    let logs = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(filter);
    match format {
        LogFormat::Json => logs.json().flatten_event(true).init(),
        LogFormat::Text => logs
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init(),
    }
    Ok(())
}

/// Runs `run` on `runtime` and turns its outcome into the exit status: 0, or 1 with the message
/// on stderr after `program: `.
pub fn run_to_exit(
    program: &str,
    runtime: std::io::Result<tokio::runtime::Runtime>,
    run: impl Future<Output = Result<(), String>>,
) -> ExitCode {
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(run),
        Err(e) => Err(format!("cannot start the runtime: {e}")),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("{program}: {message}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(feature = "server")]
/// SIGHUP: reads the TLS files again through `reload` and logs what came of it (a refusal keeps
/// the old material and was logged, with the files, by the reload itself). `server` names the
/// program in the log line ("worker", "scaler").
pub fn reload_on_sighup<E>(
    server: &str,
    serves_tls: bool,
    reload: impl FnOnce() -> Result<CredentialReload, E>,
) {
    if !serves_tls {
        tracing::info!("SIGHUP: the {server} serves plaintext: no credentials to reload");
        return;
    }
    match reload() {
        Ok(CredentialReload::Unchanged) => {
            tracing::info!("SIGHUP: the TLS files hold the material already in use")
        }
        Ok(CredentialReload::Reloaded) => {}
        Err(_) => tracing::info!("SIGHUP: the new material was refused (see the warning)"),
    }
}

#[cfg(feature = "server")]
/// Runs a started server until it ends on its own or a stop signal (SIGTERM, SIGINT) comes,
/// reading its TLS files again on each SIGHUP (as [`reload_on_sighup`]): the loop both programs
/// serve in. `wait` is the server's own end (`Worker::wait`, `Scaler::wait`), `reload` its
/// `reload_credentials`.
///
/// Returns `Ok(true)` when a stop signal came (the caller then stops the server its own way),
/// `Ok(false)` when the server ended by itself; errors: the server ended with an error (its
/// message).
pub async fn serve_until_stop<E: std::fmt::Display>(
    server: &str,
    signals: &mut Signals,
    serves_tls: bool,
    wait: impl Future<Output = Result<(), E>>,
    reload: impl Fn() -> Result<CredentialReload, E>,
) -> Result<bool, String> {
    tokio::pin!(wait);
    loop {
        tokio::select! {
            result = &mut wait => return result.map(|()| false).map_err(|e| e.to_string()),
            signal = signals.next() => match signal {
                Signal::Stop => return Ok(true),
                Signal::Hangup => reload_on_sighup(server, serves_tls, &reload),
            },
        }
    }
}

/// What a signal asks of a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// SIGTERM or SIGINT: stop.
    Stop,
    /// SIGHUP: read the TLS files again.
    Hangup,
}

/// The signals a server handles, taken before it prints its address: a supervisor may signal
/// as soon as it has read it, and the default action would kill the server ungracefully.
pub struct Signals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
}

impl Signals {
    /// Starts handling SIGTERM, SIGINT and SIGHUP.
    ///
    /// Errors: a handler cannot be installed.
    pub fn take() -> Result<Self, String> {
        use tokio::signal::unix::{signal, SignalKind};
        let handle = |kind: SignalKind, name: &str| {
            signal(kind).map_err(|e| format!("cannot handle {name}: {e}"))
        };
        Ok(Self {
            terminate: handle(SignalKind::terminate(), "SIGTERM")?,
            interrupt: handle(SignalKind::interrupt(), "SIGINT")?,
            hangup: handle(SignalKind::hangup(), "SIGHUP")?,
        })
    }

    /// The next signal.
    pub async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.terminate.recv() => Signal::Stop,
            _ = self.interrupt.recv() => Signal::Stop,
            _ = self.hangup.recv() => Signal::Hangup,
        }
    }

    /// The next SIGTERM or SIGINT (a SIGHUP meanwhile is ignored).
    pub async fn next_stop(&mut self) {
        while self.next().await != Signal::Stop {}
    }
}

/// Prints the server's dialable address as the first stdout line, flushed at once (supervisors
/// and tests read it).
///
/// Errors: stdout cannot be written.
pub fn print_address(address: impl std::fmt::Display) -> Result<(), String> {
    use std::io::Write;
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{address}")
        .and_then(|()| stdout.flush())
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::log_filter;

    #[test]
    fn log_filter_takes_levels_and_target_directives_and_names_the_first_bad_one() {
        for good in [
            "info",
            "DEBUG",
            "off",
            "info,libwool=debug",
            "libwool::worker=trace",
            "warn,libwool[task]=debug",
        ] {
            assert_eq!(log_filter(good).as_deref(), Ok(good), "{good}");
        }
        for (bad, named) in [
            ("shouty", "\"shouty\""),
            ("info,wool", "\"wool\""),
            ("libwool=loud", "\"libwool=loud\""),
        ] {
            let message = log_filter(bad).unwrap_err();
            assert!(message.contains(named), "{bad}: {message}");
            assert!(message.contains("TARGET=LEVEL"), "{bad}: {message}");
        }
    }
}
