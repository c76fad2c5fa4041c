//! `wool-scaler`: a KEDA external scaler fed by Wool workers' idle time.
//!
//! `wool-scaler [--listen ADDR] [--tls-ca PATH --tls-cert PATH --tls-key PATH [--one-way]]
//!  [--health-listen ADDR] [--metrics-listen ADDR] [--tls-files-dir DIR]
//!  [--demand-ttl DURATION] [--max-demand-scaled-objects N]
//!  [--max-demand-clients-per-scaled-object N] [--max-demand-waiting N]
//!  [--demand-reports-per-second N] [--no-demand]
//!  [--log-format text|json] [--log-level LEVEL]`
//!
//! Serves KEDA's `externalscaler.ExternalScaler` (and grpc.health.v1, server reflection) on
//! `--listen`; each ScaledObject's `scalerMetadata` says which workers and how to count them
//! (see `libwool::scaler`). Beside it, libwool's `libwool.scaler.v1.Demand`: Wool clients
//! report tasks waiting for a worker (see `libwool::scaler::demand`). Prints its address as the first stdout line (flushed at once).
//! SIGTERM or SIGINT stops it cleanly: health turns NOT_SERVING, open streams end, calls in
//! progress finish (for at most 10 s; a second signal exits at once), and it exits 0. With TLS, the files are read again on SIGHUP and whenever
//! they change.

use wool_cli as cli;

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use libwool::scaler::demand::{
    DEFAULT_DEMAND_REPORTS_PER_SECOND, DEFAULT_MAX_DEMAND_CLIENTS,
    DEFAULT_MAX_DEMAND_SCALED_OBJECTS, DEFAULT_MAX_WAITING, MAX_DEMAND_TTL, MIN_DEMAND_TTL,
};
use libwool::scaler::{DemandOptions, PodBounds, Scaler};

/// A KEDA external scaler: its metric is the number of busy Wool workers plus the tasks Wool clients report waiting; it is active while any worker is busy or any task waits
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
    /// given, calls, sweeps and their durations, demand reports and waiting tasks) over
    /// plaintext HTTP on this `host:port`.
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
    /// How long a client's demand figure (tasks waiting for a worker) counts after the report
    /// that set it (`30s`, `1m`; 1 s to 1 h). Clients are told to report again every third of
    /// it.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = demand_ttl)]
    demand_ttl: Duration,
    /// The most ScaledObjects with demand at once: a report for one more is
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DEMAND_SCALED_OBJECTS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_demand_scaled_objects: usize,
    /// The most clients with demand for one ScaledObject: a report from one more is
    /// RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_DEMAND_CLIENTS,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    max_demand_clients_per_scaled_object: usize,
    /// The largest number of waiting tasks one report may carry: a larger one is refused
    /// (INVALID_ARGUMENT), not clamped.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_WAITING,
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..))]
    max_demand_waiting: u32,
    /// The most demand reports a second from one client for one ScaledObject (also the burst
    /// taken at once): more are RESOURCE_EXHAUSTED.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_DEMAND_REPORTS_PER_SECOND,
          value_parser = clap::builder::RangedU64ValueParser::<u32>::new().range(1..=1000))]
    demand_reports_per_second: u32,
    /// Serve no demand input (`libwool.scaler.v1.Demand` answers UNIMPLEMENTED): only busy
    /// workers count.
    #[arg(long)]
    no_demand: bool,
    #[command(flatten)]
    logs: cli::LogArgs,
}

/// `--demand-ttl`: a duration as the fleet tools read one, from 1 s to 1 h.
fn demand_ttl(text: &str) -> Result<Duration, String> {
    let ttl = libwool::fleet::parse_duration(text)?;
    if !(MIN_DEMAND_TTL..=MAX_DEMAND_TTL).contains(&ttl) {
        return Err(format!("{text:?}: the demand TTL must be 1s to 1h"));
    }
    Ok(ttl)
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
        })
        .demand(DemandOptions {
            enabled: !args.no_demand,
            ttl: args.demand_ttl,
            max_scaled_objects: args.max_demand_scaled_objects,
            max_clients_per_scaled_object: args.max_demand_clients_per_scaled_object,
            max_waiting: args.max_demand_waiting,
            reports_per_second: args.demand_reports_per_second,
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
