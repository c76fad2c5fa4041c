//! `woolctl`: the fleet job from a shell — poll, stop, discover, sweep and reap Wool workers.
//!
//! Results go to stdout (a table, or with `--output json` one JSON object per worker per
//! line), diagnostics to stderr. Exit status: 0 when every worker succeeded, 1 when any failed,
//! 2 on usage errors. TLS flags are named as grpc_health_probe names them.
//!
//! This file parses the command line and dispatches: each command lives in the module of its
//! name and hands its rows to the one output path, [`output`].

mod args;
mod context;
mod discover;
mod idle;
mod output;
mod progress;
mod reap;
mod stop;
mod sweep;

use std::process::ExitCode;
use std::time::Instant;

use wool_cli as cli;

use args::{Cli, Command};
use context::{Context, Failure};

/// Runs the command; `Ok` when every worker succeeded.
async fn run(cli: Cli) -> Result<(), Failure> {
    let context = Context::new(&cli.global)?;
    let all_ok = match cli.command {
        Command::Idle { addresses } => idle::run(&context, &addresses).await?,
        Command::Sweep { fleet } => sweep::run(&context, &fleet).await?,
        Command::Stop { grace, addresses } => stop::run(&context, grace, &addresses).await?,
        Command::Discover {
            namespace,
            dns,
            lan,
            watch,
            listen,
        } => {
            let args = discover::Discover {
                namespace,
                dns,
                lan,
                watch,
                listen,
            };
            discover::run(&context, args).await?
        }
        Command::Reap(args) => reap::run(&context, &args).await?,
    };
    if all_ok {
        Ok(())
    } else {
        Err(Failure::Some)
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse_checked(); // usage errors exit 2 here
                                    // Text logs on stderr at RUST_LOG's level, else warn: the rows are the output.
    if let Err(message) = cli::init_logs(cli::LogFormat::Text, None, "warn") {
        eprintln!("woolctl: {message}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let started = Instant::now();
    let outcome = runtime.block_on(run(cli));
    tracing::debug!(seconds = started.elapsed().as_secs_f64(), "done");
    let code = if output::output_failed() {
        1
    } else {
        match outcome {
            Ok(()) => 0,
            Err(Failure::Some) => 1,
            Err(Failure::Usage(message)) => {
                eprintln!("woolctl: {message}");
                2
            }
        }
    };
    // Exits without dropping the runtime: its tasks hold every worker's connection (10,000 for
    // a sweep of 10,000), and tearing each down on the way out is work the kernel does anyway
    // when the process ends. Everything the run owes its caller is done by now: every call was
    // awaited, and each write of the results was flushed as it was made.
    std::process::exit(code)
}
