//! What libwool's programs share, written once: logs (tracing to stderr, as text or one JSON
//! object per line), signals, the address line and how `main` runs and exits (all three
//! programs); the server-side TLS flags and SIGHUP reloads (feature `server`: `wool-worker`
//! and `wool-scaler`, so that `woolctl` builds without the worker).

use std::future::Future;
#[cfg(feature = "server")]
use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(feature = "server")]
use libwool::worker::{CredentialReload, ServerCredentialFiles};

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

/// Logs to stderr at `level` (a tracing filter), else RUST_LOG's, else info; text or JSON lines.
/// What the servers use; errors as [`init_logs`].
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    init_logs(format, level, "info")
}

/// Logs to stderr at `level` (a tracing filter), else RUST_LOG's, else `default`; text (coloured
/// only on a terminal) or JSON lines.
///
/// Errors: `level` is no valid filter (the message names the `--log-level` flag).
pub fn init_logs(format: LogFormat, level: Option<&str>, default: &str) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).map_err(|e| format!("--log-level {level:?}: {e}"))?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default)),
    };
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
