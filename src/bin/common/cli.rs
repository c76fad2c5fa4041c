//! What the long-running binaries (`wool-worker`, `wool-scaler`) share: logs (tracing to
//! stderr, as text or one JSON object per line) and how `main` runs and exits.

use std::future::Future;
use std::process::ExitCode;

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Logs to stderr at `level` (a tracing filter), else RUST_LOG's, else info; text or JSON lines.
pub fn init(format: LogFormat, level: Option<&str>) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match level {
        Some(level) => {
            EnvFilter::try_new(level).map_err(|e| format!("--log-level {level:?}: {e}"))?
        }
        None => EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
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
