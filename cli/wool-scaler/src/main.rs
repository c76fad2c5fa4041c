//! `wool-scaler`: a KEDA external scaler fed by Wool workers' idle time.
//!
//! `wool-scaler [--listen ADDR] [--tls-ca PATH --tls-cert PATH --tls-key PATH [--one-way]]
//!  [--health-listen ADDR] [--metrics-listen ADDR] [--tls-files-dir DIR]
//!  [--log-format text|json] [--log-level LEVEL]`
//!
//! Serves KEDA's `externalscaler.ExternalScaler` (and grpc.health.v1, server reflection) on
//! `--listen`; each ScaledObject's `scalerMetadata` says which workers and how to count them
//! (see `libwool::scaler`). Prints its address as the first stdout line (flushed at once).
//! SIGTERM or SIGINT stops it cleanly: health turns NOT_SERVING, open streams end, calls in
//! progress finish (for at most 10 s; a second signal exits at once), and it exits 0. With TLS, the files are read again on SIGHUP and whenever
//! they change.

use wool_cli as cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use libwool::scaler::{PodBounds, Scaler};

/// A KEDA external scaler: its metric is the number of busy Wool workers; it is active while any worker is busy
#[derive(Debug, Parser)]
#[command(name = "wool-scaler", version)]
struct Args {
    /// Where KEDA calls it (`host:port`; port 0 picks one): the ScaledObject's
    /// `scalerAddress`. Plaintext gRPC unless the TLS flags are given (then the trigger sets
    /// `enableTLS` and KEDA's `caCert`, and for mutual TLS `tlsClientCert`/`tlsClientKey`).
    #[arg(long, default_value = "0.0.0.0:9090", value_name = "ADDR")]
    listen: String,
    /// Also serve grpc.health.v1 alone, in plaintext, on this TCP `host:port` (for Kubernetes
    /// gRPC probes, which cannot speak TLS).
    #[arg(long, value_name = "ADDR")]
    health_listen: Option<String>,
    #[command(flatten)]
    tls: cli::TlsArgs,
    /// Serve Prometheus metrics (workers by state per ScaledObject, the metric and activity
    /// given, calls, sweeps and their durations) over plaintext HTTP on this `host:port`.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<String>,
    /// The directory the TLS files a ScaledObject's metadata names (`workerTlsCa`,
    /// `workerTlsCert`, `workerTlsKey`) must be in, once symbolic links and `..` are resolved
    /// (e.g. the mounted Secret, `/tls`). Without it, metadata may name no TLS files.
    #[arg(long, value_name = "DIR")]
    tls_files_dir: Option<std::path::PathBuf>,
    /// The most pods one `podSelector` fleet may pick: past it that fleet's metric requests
    /// fail, naming this bound, while other fleets keep serving.
    #[arg(long, value_name = "N", default_value_t = libwool::scaler::DEFAULT_MAX_PODS_PER_GROUP,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_pods_per_fleet: usize,
    /// The most `podSelector` fleets (distinct selector, port, TLS and sweep deadline) the
    /// ScaledObjects of one namespace may have at once.
    #[arg(long, value_name = "N",
          default_value_t = libwool::scaler::DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_pod_fleets_per_namespace: usize,
    #[command(flatten)]
    logs: cli::LogArgs,
}

/// How long a stop waits for calls in progress before the process exits anyway.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

fn main() -> ExitCode {
    let args = Args::parse();
    if let Err(message) = args.logs.init() {
        eprintln!("wool-scaler: {message}");
        return ExitCode::from(2);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    cli::run_to_exit("wool-scaler", runtime, run(args))
}

async fn run(args: Args) -> Result<(), String> {
    // Signals are taken before the address is printed: a supervisor may signal as soon as it
    // has read it.
    let mut signals = cli::Signals::take()?;
    let mut builder = Scaler::builder()
        .listen(args.listen.clone())
        .pod_bounds(PodBounds {
            max_pods_per_group: args.max_pods_per_fleet,
            max_pod_groups_per_namespace: args.max_pod_fleets_per_namespace,
        });
    if let Some(files) = args.tls.files()? {
        builder = builder.credentials_from_files(files);
    }
    if let Some(health) = &args.health_listen {
        builder = builder.health_listen(health.clone());
    }
    if let Some(metrics) = &args.metrics_listen {
        builder = builder.metrics_listen(metrics.clone());
    }
    if let Some(dir) = &args.tls_files_dir {
        if !dir.is_dir() {
            return Err(format!(
                "--tls-files-dir {}: not a directory the scaler can read",
                dir.display()
            ));
        }
        builder = builder.tls_files_dir(dir.clone());
    }
    let scaler = builder.serve().await.map_err(|e| e.to_string())?;
    cli::print_address(scaler.address())?;
    let stop_asked = cli::serve_until_stop(
        "scaler",
        &mut signals,
        scaler.serves_tls(),
        scaler.wait(),
        || scaler.reload_credentials(),
    )
    .await?;
    if !stop_asked {
        return Ok(());
    }
    tracing::info!("signal received: stopping (streams end, calls in progress finish)");
    scaler.shutdown();
    tokio::select! {
        waited = tokio::time::timeout(SHUTDOWN_LIMIT, scaler.wait()) => match waited {
            Ok(result) => result.map_err(|e| e.to_string())?,
            Err(_) => tracing::warn!(
                limit_s = SHUTDOWN_LIMIT.as_secs(),
                "calls still open after the limit: exiting anyway"
            ),
        },
        () = signals.next_stop() => tracing::warn!("second signal: exiting without waiting"),
    }
    tracing::info!("stopped");
    Ok(())
}
