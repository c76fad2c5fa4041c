//! A KEDA external scaler fed by the workers' idle time (what the `wool-scaler` binary serves).
//!
//! KEDA scales a Deployment, to zero included, on what an *external scaler* tells it. This one
//! serves KEDA's `externalscaler.ExternalScaler` (`IsActive`, `StreamIsActive`,
//! `GetMetricSpec`, `GetMetrics`, and the optional `StreamMetricSpec`;
//! `proto/externalscaler/externalscaler.proto`) over the [`fleet`](crate::fleet) layer: each
//! ScaledObject's `scalerMetadata` names a fleet of workers, the scaler sweeps their idle time,
//! and answers:
//!
//! - the metric `wool-busy-workers`: workers with work in flight or idle for less than
//!   `idleThreshold`, plus the unreachable and idle-unavailable ones where the metadata counts
//!   them as busy (the default, so that nothing it cannot see is scaled away), plus the tasks
//!   Wool clients report waiting for a worker (busy + waiting: see [`demand`]); the metric
//!   spec's target is `targetValue` busy workers per replica;
//! - `IsActive`: true while that count is above zero; `StreamIsActive` sends it, then each
//!   change as soon as a sweep sees one, or at once when demand appears or expires.
//!
//! Beside KEDA's service, on the same address and under the same TLS, the scaler serves
//! libwool's own `libwool.scaler.v1.Demand` (`proto/libwool/demand.proto`; [`demand`]): Wool
//! clients report how many tasks wait for a worker, per ScaledObject, so that a fleet at zero
//! workers is started by the work waiting for it. Under TLS it needs mutual TLS.
//!
//! Every answer comes from a sweep no older than `maxSweepAge`; one sweep runs at a time per
//! fleet and the calls arriving meanwhile share it. ScaledObjects whose metadata name the same
//! workers, reached the same way, share the sweeps. The scaler also serves `grpc.health.v1`
//! (SERVING until it stops; also alone in plaintext with [`ScalerBuilder::health_listen`]) and
//! server reflection; TLS, reloaded from files, with [`ScalerBuilder::credentials_from_files`].
//!
//! # `scalerMetadata`
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `namespace` | a Wool discovery namespace (as given to Wool's `LocalDiscovery`/`LanDiscovery`) | — |
//! | `discovery` | with `namespace`: `local` (this host's registry) or `lan` (DNS-SD: each sweep browses for [`DEFAULT_LISTEN`](crate::fleet::discovery::DEFAULT_LISTEN) first) | `local` |
//! | `dnsName`, `port` | a DNS name whose A/AAAA records are the workers (a headless Service; each address a member), and their port | — |
//! | `targets` | comma-separated worker targets (`host:port`, `unix:/path`), at most 10,000 | — |
//! | `podSelector`, `port` | a label selector picking pods in the ScaledObject's namespace, watched through the Kubernetes API (in-cluster configuration, else `$KUBECONFIG`; needs `get`/`list`/`watch` on pods there); each Ready pod with an IP is a worker at `podIP:port`; at most `--max-pods-per-fleet` pods (10,000) and `--max-pod-fleets-per-namespace` such fleets (16) | — |
//! | `deletionCost` | with `podSelector`: `true` marks the idlest pods, as many as the metric means fewer replicas than there are pods, with `controller.kubernetes.io/pod-deletion-cost` below every other pod's, so that a scale-down deletes them first; written only when the choice changes, at most 60 patches a minute per fleet (needs `patch` on pods) | `false` |
//! | `idleThreshold` | a worker idle for less is busy, a just-started one included (`300`, `5m`, `90s`) | `5m` |
//! | `targetValue` | the HPA's target: busy workers per replica, 0.001 to 10⁶ | `1` |
//! | `maxSweepAge` | answers come from a sweep that finished at most this long before the call arrived (0: any finishing after it); a stream asks this often (at most every 250 ms) | `5s` |
//! | `sweepTimeout` | one deadline for a whole sweep, listing the members included; at least 100 ms | `5s` |
//! | `unreachableAs` | how a worker that cannot be reached counts: `busy` or `idle` | `busy` |
//! | `idleUnavailableAs` | how a worker that predates the `idle` RPC counts: `busy` or `idle` | `busy` |
//! | `workerTlsCa`, `workerTlsCert`, `workerTlsKey` | PEM files (paths in the scaler's container) to reach the workers over TLS, mutual with the cert and key; read again when they change | plaintext |
//! | `workerTlsServerName` | the name to verify workers' certificates against | the `dnsName`, else each target's host |
//!
//! Exactly one of `namespace`, `dnsName`, `targets` and `podSelector` is given. A key ending in `FromEnv`
//! counts as the key without it (KEDA resolves its value from the workload's environment);
//! KEDA's own keys (`scalerAddress`, `enableTLS`, `unsafeSsl`, `caCert`, `tlsClientCert`,
//! `tlsClientKey`, `tlsCertFile`: how KEDA reaches the scaler) are ignored; any other key is an
//! error (`INVALID_ARGUMENT`, naming it), as is a bad value. A fleet that cannot be listed
//! (DNS failing, say) answers `UNAVAILABLE`, as does a `dnsName` that does not exist (NXDOMAIN:
//! "NAME does not resolve"); a name that exists with no A/AAAA records is a fleet of none.
//!
//! ```no_run
//! # async fn demo() -> Result<(), libwool::scaler::ScalerError> {
//! let scaler = libwool::scaler::Scaler::builder()
//!     .listen("0.0.0.0:9090")
//!     .metrics_listen("0.0.0.0:9100")
//!     .serve()
//!     .await?;
//! println!("KEDA's scalerAddress: {}", scaler.address());
//! scaler.wait().await // until shutdown() (wool-scaler calls it on SIGTERM)
//! # }
//! ```

pub mod demand;
pub(crate) mod metadata;
mod metrics;
mod service;
mod target_group;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use demand::DemandOptions;
pub use service::METRIC_NAME;
pub use target_group::POLLS_PER_SECOND_PER_FLEET;
pub use target_group::{
    PodBounds, DEFAULT_MAX_PODS_PER_GROUP, DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE,
};

use crate::protocol::externalscaler::external_scaler_server::ExternalScalerServer;
use crate::server::accept::accept_connections;
use crate::server::eviction::ConnectionLimits;
use crate::server::handshake::Plaintext;
use crate::server::health::{health_port_server, serve_health_alone};
use crate::server::listen::bind_side_port;
use crate::server::tls::ServerTls;
use crate::server::{
    bounded_server, default_max_connections, CredentialReload, ServerCredentialFiles, ServerError,
    DEFAULT_KEEPALIVE,
};
use demand::wire::demand_server::DemandServer;

/// Streams (HTTP/2 streams: gRPC streams and unary calls alike) one connection to the scaler
/// may have open at once: 2,048. KEDA's operator is one peer for every tenant, holding one
/// `StreamIsActive` per ScaledObject on one connection, so one connection must have room for
/// all the streams the scaler serves ([`target_group::MAX_STREAMS`]) and all its calls in progress
/// ([`target_group::MAX_CALLS`]) at once, and for those refused past them: streams that fill their
/// own bound then leave calls room, never queued behind them in the client.
const MAX_STREAMS_PER_CONNECTION: u32 = 2048;

const _: () = assert!(
    target_group::MAX_STREAMS + target_group::MAX_CALLS < MAX_STREAMS_PER_CONNECTION as usize,
    "one connection must have room for every stream and every call at once"
);

/// Errors of starting or running a scaler: the worker's [`ServerError`] (one scaffold, one
/// error type), under the scaler's name.
pub type ScalerError = ServerError;

/// Builds a [`ScalerHandle`]: a serving scaler.
#[derive(Debug)]
pub struct Scaler;

impl Scaler {
    /// A builder listening on `127.0.0.1:9090` unless told otherwise.
    pub fn builder() -> ScalerBuilder {
        ScalerBuilder {
            listen: "127.0.0.1:9090".into(),
            metrics_listen: None,
            health_listen: None,
            credentials: None,
            tls_files_dir: None,
            pod_bounds: PodBounds::default(),
            demand: DemandOptions::default(),
        }
    }
}

/// How a scaler listens.
#[derive(Debug, Clone)]
pub struct ScalerBuilder {
    listen: String,
    metrics_listen: Option<String>,
    health_listen: Option<String>,
    credentials: Option<ServerCredentialFiles>,
    tls_files_dir: Option<std::path::PathBuf>,
    pod_bounds: PodBounds,
    demand: DemandOptions,
}

impl ScalerBuilder {
    /// The gRPC address KEDA calls (`host:port`; port 0 picks a free one).
    pub fn listen(mut self, address: impl Into<String>) -> Self {
        self.listen = address.into();
        self
    }

    /// Also serve Prometheus metrics over HTTP on `address` (`host:port`).
    pub fn metrics_listen(mut self, address: impl Into<String>) -> Self {
        self.metrics_listen = Some(address.into());
        self
    }

    /// Also serve grpc.health.v1 alone, in plaintext, on `address` (`host:port`): for
    /// Kubernetes gRPC probes, which cannot speak TLS, when the main address does.
    pub fn health_listen(mut self, address: impl Into<String>) -> Self {
        self.health_listen = Some(address.into());
        self
    }

    /// Serve TLS on the main address with the certificate and key in these files, asking
    /// clients for certificates signed by `client_ca` when given (KEDA's `enableTLS` with
    /// `caCert`, and `tlsClientCert`/`tlsClientKey` for mutual TLS). The files are read again
    /// when they change and on [`ScalerHandle::reload_credentials`], as a worker's are (the
    /// server scaffold's [`CredentialReload`], which both use).
    pub fn credentials_from_files(mut self, files: ServerCredentialFiles) -> Self {
        self.credentials = Some(files);
        self
    }

    /// Let `scalerMetadata` name TLS files (`workerTlsCa`, `workerTlsCert`, `workerTlsKey`)
    /// in `dir` only: each path must resolve (symbolic links and `..` followed) to a regular
    /// file inside it. Without this, metadata may name no TLS files (`INVALID_ARGUMENT`): a
    /// tenant could otherwise make the scaler use any file it can read, its own key included.
    pub fn tls_files_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.tls_files_dir = Some(dir.into());
        self
    }

    /// The bounds on pod fleets (`podSelector` metadata): pods per fleet and pod fleets per
    /// namespace. Default [`PodBounds::default`].
    pub fn pod_bounds(mut self, bounds: PodBounds) -> Self {
        self.pod_bounds = bounds;
        self
    }

    /// How the scaler takes demand from Wool clients (`libwool.scaler.v1.Demand`; see
    /// [`demand`]): its TTL and bounds, or off. Default [`DemandOptions::default`]: on. Values
    /// out of range are taken as the nearest in range ([`DemandOptions::clamped`]); check them
    /// first with [`DemandOptions::check`] to refuse them instead, as `wool-scaler` does.
    pub fn demand(mut self, options: DemandOptions) -> Self {
        self.demand = options;
        self
    }

    /// Binds and starts serving on the current tokio runtime.
    ///
    /// Errors: [`ScalerError::Bind`] when an address cannot be bound, [`ScalerError::Tls`]
    /// when the credentials cannot be read, are unusable or their directories cannot be
    /// watched, [`ScalerError::Reflection`] if the reflection service cannot be built.
    pub async fn serve(self) -> Result<ScalerHandle, ScalerError> {
        let shutdown = CancellationToken::new();
        let metrics = Arc::new(metrics::ScalerMetrics::new());
        let demand_table = Arc::new(demand::DemandTable::new(
            self.demand.clamped(),
            Arc::clone(&metrics),
        ));
        let service = ExternalScalerServer::new(service::ScalerService {
            fleets: Arc::new(target_group::TargetGroups::new(
                self.tls_files_dir.as_deref(),
                self.pod_bounds,
            )),
            demand: Arc::clone(&demand_table),
            metrics: Arc::clone(&metrics),
            shutdown: shutdown.clone(),
        });
        let authentication = match &self.credentials {
            None => demand::Authentication::Plaintext,
            Some(files) if files.client_ca.is_some() => demand::Authentication::MutualTls,
            Some(_) => demand::Authentication::OneWayTls,
        };
        let demand_service = self.demand.enabled.then(|| {
            DemandServer::new(demand::DemandService {
                table: Arc::clone(&demand_table),
                metrics: Arc::clone(&metrics),
                authentication,
            })
            .max_decoding_message_size(demand::MAX_REPORT_BYTES)
        });
        let (reporter, health) = tonic_health::server::health_reporter();
        reporter
            .set_serving::<ExternalScalerServer<service::ScalerService>>()
            .await;
        let mut reflection = tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(
                crate::protocol::externalscaler::FILE_DESCRIPTOR_SET,
            )
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET);
        if demand_service.is_some() {
            reporter
                .set_serving::<DemandServer<demand::DemandService>>()
                .await;
            reflection =
                reflection.register_encoded_file_descriptor_set(demand::wire::FILE_DESCRIPTOR_SET);
        }
        let reflection = reflection
            .build_v1()
            .map_err(|e| ScalerError::Reflection(e.to_string()))?;
        let tls = match self.credentials {
            Some(files) => {
                let material = files.read()?;
                Some(ServerTls::new(material, Some(files))?)
            }
            None => None,
        };
        let (listener, address) = bind_side_port(&self.listen).await?;
        // Until the scaler is running, a failure stops what has been started (the side ports).
        let started = shutdown.clone().drop_guard();
        let health_address = match &self.health_listen {
            Some(spec) => {
                let (listener, local) = bind_side_port(spec).await?;
                let router = health_port_server().add_service(health.clone());
                serve_health_alone(listener, router, shutdown.clone());
                Some(local)
            }
            None => None,
        };
        let metrics_address = match &self.metrics_listen {
            Some(spec) => {
                let (listener, local) = bind_side_port(spec).await?;
                let scrape = Arc::clone(&metrics);
                crate::server::metrics::serve(
                    listener,
                    Arc::new(move || scrape.encode()),
                    shutdown.clone(),
                );
                Some(local)
            }
            None => None,
        };
        let router = bounded_server(
            MAX_STREAMS_PER_CONNECTION,
            Some(DEFAULT_KEEPALIVE),
            DEFAULT_KEEPALIVE,
        )
        .add_service(service)
        .add_optional_service(demand_service)
        .add_service(health)
        .add_service(reflection);
        if self.demand.enabled {
            demand_table.expire_until(shutdown.clone());
        }
        let stopped = shutdown.clone();
        let demand_served = self.demand.enabled;
        let stop = async move {
            stopped.cancelled().await;
            reporter
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            reporter
                .set_not_serving::<ExternalScalerServer<service::ScalerService>>()
                .await;
            if demand_served {
                reporter
                    .set_not_serving::<DemandServer<demand::DemandService>>()
                    .await;
            }
        };
        let limits = ConnectionLimits {
            max_connections: default_max_connections(),
            evict_established: false,
        };
        let server = match &tls {
            Some(tls) => {
                tls.watch(shutdown.clone())?;
                let incoming =
                    accept_connections(listener, Arc::clone(tls), limits, None, "scaler");
                tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
            }
            None => {
                let incoming = accept_connections(listener, Plaintext, limits, None, "scaler");
                tokio::spawn(router.serve_with_incoming_shutdown(incoming, stop))
            }
        };
        started.disarm();
        tracing::info!(
            %address,
            tls = tls.is_some(),
            health = ?health_address,
            metrics = ?metrics_address,
            "scaler listening"
        );
        Ok(ScalerHandle {
            address,
            health_address,
            metrics_address,
            tls,
            metrics,
            shutdown,
            server: tokio::sync::Mutex::new(Some(server)),
        })
    }
}

/// A serving scaler.
#[derive(Debug)]
pub struct ScalerHandle {
    address: SocketAddr,
    health_address: Option<SocketAddr>,
    metrics_address: Option<SocketAddr>,
    tls: Option<Arc<ServerTls>>,
    metrics: Arc<metrics::ScalerMetrics>,
    shutdown: CancellationToken,
    server: tokio::sync::Mutex<Option<JoinHandle<Result<(), tonic::transport::Error>>>>,
}

impl ScalerHandle {
    /// Where KEDA reaches it (the bound address: a port 0 resolved).
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Where health is served alone, when asked for.
    pub fn health_address(&self) -> Option<SocketAddr> {
        self.health_address
    }

    /// Whether the main address serves TLS.
    pub fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Reads the TLS files again now (as when they change); connections accepted from then on
    /// use new material, established ones carry on.
    ///
    /// Errors: [`ScalerError::Tls`] when the scaler serves plaintext or the new material is
    /// refused (the previous stays in force; the log names the files).
    pub fn reload_credentials(&self) -> Result<CredentialReload, ScalerError> {
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Err(ScalerError::Tls(
                "the scaler serves plaintext: no credentials to reload".into(),
            )),
        }
    }

    /// Where its metrics are served, when asked for.
    pub fn metrics_address(&self) -> Option<SocketAddr> {
        self.metrics_address
    }

    /// The metrics' text exposition now (what a scrape returns).
    pub fn metrics_text(&self) -> String {
        self.metrics.encode()
    }

    /// Begins a clean stop: health turns NOT_SERVING, open streams end (KEDA reopens them on
    /// another replica or after a restart), calls in progress finish, new connections are
    /// refused. [`wait`](Self::wait) returns once done.
    pub fn shutdown(&self) {
        self.shutdown.cancel();
    }

    /// Waits until the scaler has stopped (after [`shutdown`](Self::shutdown)).
    ///
    /// Errors: [`ScalerError::Serve`] or [`ScalerError::Join`] if the server failed.
    pub async fn wait(&self) -> Result<(), ScalerError> {
        // The task stays in place until it has ended: a wait given up (a `select!` that took
        // another branch) leaves it for the next one.
        let mut server = self.server.lock().await;
        let Some(task) = server.as_mut() else {
            return Ok(());
        };
        let joined = (&mut *task).await;
        *server = None;
        Ok(joined??)
    }
}

impl Drop for ScalerHandle {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}
