//! A Wool worker in Rust: serves Wool's `Worker` gRPC service (`dispatch`, `stop`, `idle`), runs
//! Rust routines, and reports how long it has been continuously idle.
//!
//! ```no_run
//! # async fn demo() -> Result<(), libwool::worker::WorkerError> {
//! use libwool::worker::{Grace, Worker};
//! let handle = Worker::builder()
//!     .listen("127.0.0.1:0".parse()?)
//!     .routine("double", |args: Vec<u8>| async move { Ok([args.clone(), args].concat()) })
//!     .serve()
//!     .await?;
//! println!("{}", handle.address());
//! handle.stop(Grace::None).await;
//! handle.wait().await?;
//! # Ok(()) }
//! ```

pub(crate) mod authority;
pub(crate) mod health;
pub mod idle;
pub(crate) mod listen;
pub mod metrics;
mod reflection;
pub mod routine;
pub(crate) mod service;
mod socket_file;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;

use crate::protocol::worker_server::WorkerServer;
use crate::server::accept::accept_connections;
use crate::server::eviction::ConnectionLimits;
use crate::server::handshake::Plaintext;
use crate::server::listen::bind_side_port;
use crate::server::tls::ServerTls;
use crate::server::{bounded_server, DEFAULT_KEEPALIVE};
pub use crate::server::{CredentialReload, ServerCredentialFiles, ServerCredentials, ServerError};
pub use crate::Grace;
use health::Health;
pub use listen::ListenAddress;
use reflection::{reflection_v1, reflection_v1alpha};
pub use routine::{Routine, RoutineFuture, RoutineRegistry};
use service::{IdleFastPath, WorkerService, WorkerState};
use socket_file::{file_identity, remove_stale_socket, BoundSocket};

/// Errors of building or running a worker: [`ServerError`] under the worker's name.
pub type WorkerError = ServerError;

pub use crate::protocol::MAX_MESSAGE_BYTES;

/// Streams one client connection may have open at once. Generous, so that bursts of polls from
/// clients that do not throttle themselves are served rather than refused.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// How long a stopped worker waits for its connections to close before it ends anyway.
const SHUTDOWN_LINGER: Duration = Duration::from_secs(5);

/// Entry point: `Worker::builder()`.
#[derive(Debug)]
pub struct Worker;

impl Worker {
    /// A builder listening on `127.0.0.1:0`, plaintext, with no routines.
    pub fn builder() -> WorkerBuilder {
        WorkerBuilder {
            listen: ListenAddress::Tcp("127.0.0.1:0".into()),
            health_listen: None,
            metrics_listen: None,
            credentials: None,
            routines: RoutineRegistry::default(),
            keepalive_interval: Some(DEFAULT_KEEPALIVE),
            keepalive_timeout: DEFAULT_KEEPALIVE,
            max_connections: None,
        }
    }
}

/// Configures a worker: listen address, optional TLS, routines, keepalive.
#[derive(Debug)]
pub struct WorkerBuilder {
    listen: ListenAddress,
    health_listen: Option<String>,
    metrics_listen: Option<String>,
    credentials: Option<CredentialSource>,
    routines: RoutineRegistry,
    keepalive_interval: Option<Duration>,
    keepalive_timeout: Duration,
    max_connections: Option<usize>,
}

/// Where a worker's TLS material comes from.
#[derive(Debug)]
enum CredentialSource {
    Pem(ServerCredentials),
    Files(ServerCredentialFiles),
}

impl WorkerBuilder {
    /// Where to listen (default `127.0.0.1:0`).
    pub fn listen(mut self, address: ListenAddress) -> Self {
        self.listen = address;
        self
    }

    /// Also serve `grpc.health.v1.Health` alone, in plaintext, on this TCP address (`host:port`,
    /// port 0 picks one): for Kubernetes gRPC probes, which cannot speak TLS. The main address
    /// serves health too, with the worker's own credentials.
    pub fn health_listen(mut self, address: impl Into<String>) -> Self {
        self.health_listen = Some(address.into());
        self
    }

    /// Serve Prometheus metrics (text exposition, see [`WorkerHandle::metrics_text`]) over
    /// plaintext HTTP on this TCP address (`host:port`, port 0 picks one).
    pub fn metrics_listen(mut self, address: impl Into<String>) -> Self {
        self.metrics_listen = Some(address.into());
        self
    }

    /// Serve over TLS with these credentials (default: plaintext). Replaces
    /// [`credentials_from_files`](Self::credentials_from_files).
    pub fn credentials(mut self, credentials: ServerCredentials) -> Self {
        self.credentials = Some(CredentialSource::Pem(credentials));
        self
    }

    /// Serve over TLS with the material in these files, read when the worker starts and again
    /// whenever one of them changes (the directories holding them are watched) or
    /// [`WorkerHandle::reload_credentials`] is called. New material applies to connections
    /// accepted from then on; established connections and the work in flight on them carry
    /// on. Material that fails the checks (a half-written file, a key that does not match its
    /// certificate) is refused with a `tracing`
    /// warning and the previous material kept. Replaces [`credentials`](Self::credentials).
    pub fn credentials_from_files(mut self, files: ServerCredentialFiles) -> Self {
        self.credentials = Some(CredentialSource::Files(files));
        self
    }

    /// Registers `routine` under `name` (what callers put in `Task.callable`).
    pub fn routine(mut self, name: impl Into<String>, routine: impl Routine) -> Self {
        self.routines.insert(name, routine);
        self
    }

    /// HTTP/2 keepalive toward callers (default: a PING every 30 s, 30 s to answer; `interval`
    /// `None` turns it off). A caller that stops answering — its process frozen, its link cut —
    /// has its connection closed after `interval + timeout`, and the dispatches it had in flight
    /// are cancelled, so they leave the in-flight set and the idle clock can run again.
    pub fn keepalive(mut self, interval: Option<Duration>, timeout: Duration) -> Self {
        self.keepalive_interval = interval;
        self.keepalive_timeout = timeout;
        self
    }

    /// Most connections open at once on the main address, those still opening (TLS handshake,
    /// HTTP/2 preface) included; one more is closed at once. Default
    /// [`default_max_connections`](crate::server::default_max_connections): 10,000, fewer under a lower descriptor limit.
    /// At least 1. The other bounds on connections are fixed (the [`server`](crate::server) module lists them).
    pub fn max_connections(mut self, max: usize) -> Self {
        self.max_connections = Some(max.max(1));
        self
    }

    /// Uses `routines` as the worker's routine table, replacing any registered so far.
    pub fn routines(mut self, routines: RoutineRegistry) -> Self {
        self.routines = routines;
        self
    }

    /// Binds the listener and starts serving on the current tokio runtime.
    ///
    /// Errors: [`WorkerError::Bind`] when the address cannot be bound, [`WorkerError::Tls`] when
    /// the credentials are unusable (or their files cannot be read or watched). The idle clock
    /// starts here.
    pub async fn serve(self) -> Result<WorkerHandle, WorkerError> {
        let state = Arc::new(WorkerState::new(self.routines));
        let accepted = Arc::new(AtomicU64::new(0));
        let mut server = bounded_server(
            MAX_CONCURRENT_STREAMS,
            self.keepalive_interval,
            self.keepalive_timeout,
        );
        let limits = ConnectionLimits {
            max_connections: self
                .max_connections
                .unwrap_or_else(crate::server::default_max_connections),
            evict_established: false,
        };
        let tls = match self.credentials {
            Some(CredentialSource::Pem(credentials)) => Some(ServerTls::new(credentials, None)?),
            Some(CredentialSource::Files(files)) => {
                Some(ServerTls::new(files.read()?, Some(files))?)
            }
            None => None,
        };
        let service = IdleFastPath {
            inner: WorkerServer::new(WorkerService {
                state: Arc::clone(&state),
            })
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES),
            tracker: Arc::clone(&state.tracker),
            polls: state.metrics.idle_polls(),
        };
        let health = Health::start(&state).await;
        let router = server
            .add_service(service)
            .add_service(health.service.clone())
            .add_service(reflection_v1()?)
            .add_service(reflection_v1alpha()?);
        // Until the worker is running, a failure stops what has been started (the side ports).
        let started = state.shutdown.clone().drop_guard();
        let health_address = match &self.health_listen {
            Some(address) => Some(health.serve_alone(address, state.shutdown.clone()).await?),
            None => None,
        };
        let metrics_address = match &self.metrics_listen {
            Some(address) => Some(serve_metrics(address, &state).await?),
            None => None,
        };
        let (address, unix_path, server_task) = listen_and_serve(
            &self.listen,
            router,
            tls.as_ref(),
            limits,
            Arc::clone(&accepted),
            state.shutdown.clone(),
        )
        .await?;
        // The server just started ends with the error (the guard cancels the shutdown token).
        tls.as_ref()
            .map_or(Ok(()), |tls| tls.watch(state.shutdown.clone()))?;
        started.disarm();
        tracing::info!(
            %address,
            tls = tls.is_some(),
            health = health_address.as_deref(),
            metrics = metrics_address.as_deref(),
            "worker listening"
        );
        Ok(WorkerHandle {
            address,
            health_address,
            metrics_address,
            unix_path,
            state,
            accepted,
            tls,
            server: tokio::sync::Mutex::new(Some(server_task)),
        })
    }
}

/// Binds `listen` and serves `router` there (TLS first when `tls` is given; for a Unix socket,
/// the `:authority` rewrite inside it), accepting connections under `limits` (see
/// [`server`](crate::server)), until `shutdown`, counting accepted connections in `accepted`:
/// the dialable address, the socket file bound (Unix), and the serving task.
async fn listen_and_serve(
    listen: &ListenAddress,
    router: tonic::transport::server::Router,
    tls: Option<&Arc<ServerTls>>,
    limits: ConnectionLimits,
    accepted: Arc<AtomicU64>,
    shutdown: tokio_util::sync::CancellationToken,
) -> Result<(String, Option<BoundSocket>, ServerTask), WorkerError> {
    let accepted = Some(accepted);
    let served = match listen {
        ListenAddress::Tcp(spec) => {
            let bind_error = |source| WorkerError::Bind {
                address: spec.clone(),
                source,
            };
            let listener = TcpListener::bind(spec.as_str()).await.map_err(bind_error)?;
            let local: SocketAddr = listener.local_addr().map_err(bind_error)?;
            let task = match tls {
                Some(tls) => spawn_server(
                    router,
                    accept_connections(listener, Arc::clone(tls), limits, accepted, "worker"),
                    shutdown,
                ),
                None => spawn_server(
                    router,
                    accept_connections(listener, Plaintext, limits, accepted, "worker"),
                    shutdown,
                ),
            };
            (local.to_string(), None, task)
        }
        ListenAddress::Unix(path) => {
            remove_stale_socket(path);
            let listener = UnixListener::bind(path).map_err(|source| WorkerError::Bind {
                address: format!("unix:{}", path.display()),
                source,
            })?;
            // The `:authority` rewrite reads HTTP/2 frames: inside TLS, when there is one.
            let task = match tls {
                Some(tls) => spawn_server(
                    router,
                    accept_connections(listener, Arc::clone(tls), limits, accepted, "worker")
                        .map(|stream| stream.map(authority::LenientAuthority::new)),
                    shutdown,
                ),
                None => spawn_server(
                    router,
                    accept_connections(listener, Plaintext, limits, accepted, "worker")
                        .map(|stream| stream.map(authority::LenientAuthority::new)),
                    shutdown,
                ),
            };
            let bound = file_identity(path).map(|identity| (path.clone(), identity));
            (format!("unix:{}", path.display()), bound, task)
        }
    };
    Ok(served)
}

/// Serves `router` on `incoming` (connections ready for HTTP/2) until `shutdown`.
fn spawn_server<IO>(
    router: tonic::transport::server::Router,
    incoming: impl futures_util::Stream<Item = std::io::Result<IO>> + Send + 'static,
    shutdown: tokio_util::sync::CancellationToken,
) -> ServerTask
where
    IO: tokio::io::AsyncRead
        + tokio::io::AsyncWrite
        + tonic::transport::server::Connected
        + Unpin
        + Send
        + 'static,
{
    tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned()))
}

/// Serves the worker's metrics over HTTP on `address` until the worker shuts down; the bound
/// address.
async fn serve_metrics(address: &str, state: &Arc<WorkerState>) -> Result<String, WorkerError> {
    let (listener, local) = bind_side_port(address).await?;
    let scrape = Arc::clone(state);
    crate::server::metrics::serve(
        listener,
        Arc::new(move || scrape.metrics_text()),
        state.shutdown.clone(),
    );
    Ok(local.to_string())
}

/// The task serving the gRPC server.
type ServerTask = JoinHandle<Result<(), tonic::transport::Error>>;

/// A serving worker: its address, idle reading, and stop.
#[derive(Debug)]
pub struct WorkerHandle {
    address: String,
    health_address: Option<String>,
    metrics_address: Option<String>,
    /// The Unix socket this worker bound, and its file identity (see [`file_identity`]).
    unix_path: Option<(PathBuf, (u64, u64))>,
    state: Arc<WorkerState>,
    accepted: Arc<AtomicU64>,
    tls: Option<Arc<ServerTls>>,
    server: tokio::sync::Mutex<Option<JoinHandle<Result<(), tonic::transport::Error>>>>,
}

impl WorkerHandle {
    /// The dialable address: `127.0.0.1:40123`, `[::1]:40123` or `unix:/path/w.sock`.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Where health alone is served in plaintext (`host:port`), when
    /// [`WorkerBuilder::health_listen`] asked for it.
    pub fn health_address(&self) -> Option<&str> {
        self.health_address.as_deref()
    }

    /// Where metrics are served over HTTP (`host:port`), when
    /// [`WorkerBuilder::metrics_listen`] asked for it.
    pub fn metrics_address(&self) -> Option<&str> {
        self.metrics_address.as_deref()
    }

    /// The worker's Prometheus metrics now, in the text exposition format: tasks in flight,
    /// seconds idle, stop state, tasks started / finished / failed / cancelled, idle polls
    /// answered (the `metrics` module of this crate lists them).
    pub fn metrics_text(&self) -> String {
        self.state.metrics_text()
    }

    /// Seconds continuously idle now (exactly `0.0` while anything is in flight), as the `idle`
    /// RPC would answer.
    pub fn idle_seconds(&self) -> f64 {
        self.state.tracker.idle_seconds()
    }

    /// Number of dispatches in flight now.
    pub fn in_flight(&self) -> u64 {
        self.state.tracker.in_flight()
    }

    /// Reads the credential files given to
    /// [`WorkerBuilder::credentials_from_files`] again (as a change to them does; `wool-worker`
    /// calls this on SIGHUP). New material that passes the checks applies to connections
    /// accepted from now on; established connections and their in-flight work are untouched.
    /// Blocks on file reads (small PEM files).
    ///
    /// Errors: [`WorkerError::Tls`] when the worker is plaintext or was given PEM rather than
    /// files, or the new material is refused (logged; the previous material stays in force).
    pub fn reload_credentials(&self) -> Result<CredentialReload, WorkerError> {
        // (A plaintext worker has nothing to reload: the error says so; see `serves_tls`.)
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Err(WorkerError::Tls(
                "the worker serves plaintext: no credentials to reload".into(),
            )),
        }
    }

    /// Whether the worker serves TLS (with credentials given as PEM or as files).
    pub fn serves_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Transport connections accepted so far (TCP or Unix), counted before any TLS handshake.
    pub fn accepted_connections(&self) -> u64 {
        self.accepted.load(Ordering::Relaxed)
    }

    /// Stops the worker as a `stop` RPC with this grace would; returns after the drain.
    /// The server then shuts down; [`wait`](Self::wait) observes the end.
    pub async fn stop(&self, grace: Grace) {
        self.state.stop(grace).await;
    }

    /// Resolves once a stop has completed (by RPC or [`stop`](Self::stop)) and the server has
    /// shut down. Connections that stay open longer than a few seconds after the stop are cut.
    /// Cancel-safe: dropping the future and calling again later waits for the same end; once it
    /// has returned, later calls return `Ok(())` at once.
    pub async fn wait(&self) -> Result<(), WorkerError> {
        let mut server = self.server.lock().await;
        let Some(task) = server.as_mut() else {
            return Ok(());
        };
        let linger = async {
            self.state.shutdown.cancelled().await;
            tokio::time::sleep(SHUTDOWN_LINGER).await;
        };
        let result = tokio::select! {
            joined = &mut *task => joined.map_err(WorkerError::from).and_then(|served| served.map_err(WorkerError::from)),
            () = linger => {
                task.abort();
                tracing::warn!("connections still open {SHUTDOWN_LINGER:?} after stop; closing them");
                Ok(())
            }
        };
        *server = None;
        self.cleanup(result)
    }

    fn cleanup(&self, result: Result<(), WorkerError>) -> Result<(), WorkerError> {
        if let Some((path, identity)) = &self.unix_path {
            if file_identity(path).as_ref() == Some(identity) {
                let _ = std::fs::remove_file(path);
            }
        }
        result
    }
}
