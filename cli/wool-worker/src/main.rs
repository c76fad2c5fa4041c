//! `wool-worker`: the reference Wool worker.
//!
//! `wool-worker [--listen ADDR] [--tls-ca PATH --tls-cert PATH --tls-key PATH [--one-way]] [--threads N]
//!  [--keepalive-interval SECONDS] [--keepalive-timeout SECONDS] [--health-listen ADDR]
//!  [--metrics-listen ADDR] [--log-format text|json] [--log-level LEVEL]`
//!
//! It serves grpc.health.v1 (SERVING until a stop begins, then NOT_SERVING) and server
//! reflection (v1 and v1alpha) beside Wool's `Worker` service.
//!
//! Prints its dialable address as the first stdout line (flushed at once), serves the `echo` and
//! `sleep` routines, and exits 0 once a `stop` has completed. SIGTERM and SIGINT stop it
//! gracefully (in-flight tasks may finish); a second one cancels what is still in flight. Logs go
//! to stderr: start and listen address, stop (with its grace), drain, each task's failure.
//!
//! With TLS, the certificate, key and CA files are read again on SIGHUP and whenever they change:
//! new connections use the new material, established ones carry on; material that fails the
//! checks is refused with a log line and the previous material kept.

use wool_cli as cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use libwool::worker::{Grace, ListenAddress, RoutineRegistry, Worker};

/// The reference Wool worker: serves `echo` and `sleep`, reports idle time, obeys `stop`.
#[derive(Debug, Parser)]
#[command(name = "wool-worker", version)]
struct Args {
    /// Where to listen: `host:port` (port 0 picks one) or `unix:PATH`.
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: ListenAddress,
    /// Also serve grpc.health.v1 alone, in plaintext, on this TCP `host:port` (for Kubernetes
    /// gRPC probes, which cannot speak TLS). Health turns NOT_SERVING as soon as a stop begins.
    #[arg(long, value_name = "ADDR")]
    health_listen: Option<String>,
    /// Serve Prometheus metrics (tasks in flight, seconds idle, tasks started / finished /
    /// failed / cancelled, idle polls answered, stop state) over plaintext HTTP on this TCP
    /// `host:port`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    #[command(flatten)]
    logs: cli::LogArgs,
    #[command(flatten)]
    tls: cli::TlsArgs,
    /// Threads serving requests and running routines. 1 (the default) keeps each request on
    /// one thread from socket to answer, the lowest latency; more serve CPU-bound routines in
    /// parallel.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
    /// Seconds between HTTP/2 keepalive PINGs to each caller; 0 turns them off. A caller that
    /// stops answering (frozen, or its link cut) is disconnected after interval + timeout, and
    /// the tasks it had in flight are cancelled.
    #[arg(long, default_value_t = 30.0, value_parser = seconds)]
    keepalive_interval: f64,
    /// Seconds a keepalive PING may go unanswered.
    #[arg(long, default_value_t = 30.0, value_parser = positive_seconds)]
    keepalive_timeout: f64,
}

/// Seconds: a finite number >= 0.
fn seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && (0.0..1e9).contains(&value) => Ok(value),
        _ => Err(format!("{text:?} is not a number of seconds >= 0")),
    }
}

/// Seconds: a finite number > 0.
fn positive_seconds(text: &str) -> Result<f64, String> {
    seconds(text)
        .ok()
        .filter(|value| *value > 0.0)
        .ok_or_else(|| format!("{text:?} is not a number of seconds > 0"))
}

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(message) = args.logs.init() {
        eprintln!("wool-worker: {message}");
        return ExitCode::from(2);
    }
    let runtime = match args.threads {
        1 => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
        n => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(usize::from(n))
            .enable_all()
            .build(),
    };
    cli::run_to_exit("wool-worker", runtime, run(args))
}

async fn run(args: Args) -> Result<(), String> {
    // Listen for SIGTERM/SIGINT before the address is printed: a supervisor may signal as soon
    // as it has read the address, and the default action would kill the worker ungracefully.
    let mut signals = cli::Signals::take()?;
    let keepalive_interval =
        (args.keepalive_interval > 0.0).then(|| Duration::from_secs_f64(args.keepalive_interval));
    let mut builder = Worker::builder()
        .listen(args.listen.clone())
        .routines(RoutineRegistry::default().with_reference_routines())
        .keepalive(
            keepalive_interval,
            Duration::from_secs_f64(args.keepalive_timeout),
        );
    if let Some(credentials) = args.tls.files()? {
        builder = builder.credentials_from_files(credentials);
    }
    if let Some(health) = &args.health_listen {
        builder = builder.health_listen(health.clone());
    }
    if let Some(metrics) = &args.metrics_listen {
        builder = builder.metrics_listen(metrics.clone());
    }
    let worker = builder.serve().await.map_err(|e| e.to_string())?;
    cli::print_address(worker.address())?;

    let stop_asked = cli::serve_until_stop(
        "worker",
        &mut signals,
        worker.serves_tls(),
        worker.wait(),
        || worker.reload_credentials(),
    )
    .await?;
    if !stop_asked {
        return Ok(());
    }
    tracing::info!(
        "signal received: stopping; in-flight tasks may finish (a second signal cancels them)"
    );
    let graceful = worker.stop(Grace::Unbounded);
    tokio::pin!(graceful);
    tokio::select! {
        () = &mut graceful => {}
        () = signals.next_stop() => {
            eprintln!("wool-worker: second signal: cancelling in-flight tasks");
            worker.stop(Grace::None).await;
        }
    }
    worker.wait().await.map_err(|e| e.to_string())
}
