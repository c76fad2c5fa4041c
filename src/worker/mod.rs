//! A Wool worker in Rust: serves Wool's `Worker` gRPC service (`dispatch`, `stop`, `idle`), runs
//! Rust routines, and reports how long it has been continuously idle.
//!
//! ```no_run
//! # async fn demo() -> Result<(), wool::worker::WorkerError> {
//! use wool::worker::{Grace, Worker};
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
pub mod idle;
pub mod metrics;
pub mod routine;
pub(crate) mod service;
mod tls;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::net::{TcpListener, UnixListener};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::{TcpListenerStream, UnixListenerStream};
use tonic::transport::Server;

use crate::protocol::worker_server::WorkerServer;
pub use crate::Grace;
pub use routine::{Routine, RoutineFuture, RoutineRegistry};
use service::{IdleFastPath, WorkerService, WorkerState};
use tls::ServerTls;
pub use tls::{CredentialReload, ServerCredentialFiles, ServerCredentials};

pub use crate::protocol::MAX_MESSAGE_BYTES;

/// Streams one client connection may have open at once. Generous, so that bursts of polls from
/// clients that do not throttle themselves are served rather than refused.
pub const MAX_CONCURRENT_STREAMS: u32 = 1024;

/// How long a stopped worker waits for its connections to close before it ends anyway.
const SHUTDOWN_LINGER: Duration = Duration::from_secs(5);

/// Errors of building or running a worker.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The listen address could not be parsed (`host:port` or `unix:PATH`).
    #[error("invalid listen address {0:?}: expected host:port or unix:PATH")]
    InvalidAddress(String),
    /// Binding the listener failed.
    #[error("cannot listen on {address}: {source}")]
    Bind {
        /// The address as given.
        address: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The TLS material could not be used.
    #[error("invalid TLS configuration: {0}")]
    Tls(String),
    /// The server-reflection service could not be built from the protocol's descriptors.
    #[error("cannot build server reflection: {0}")]
    Reflection(String),
    /// The gRPC server failed while serving.
    #[error("worker server failed: {0}")]
    Serve(#[from] tonic::transport::Error),
    /// The server task panicked or was aborted.
    #[error("worker server task ended abnormally: {0}")]
    Join(#[from] tokio::task::JoinError),
}

/// Where a worker listens: a TCP `host:port` (port 0 picks a free port) or a Unix socket path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// TCP, e.g. `127.0.0.1:0` or `[::1]:50051`.
    Tcp(String),
    /// A Unix domain socket at this path (given as `unix:PATH` or `unix:///abs/path`).
    Unix(PathBuf),
}

impl FromStr for ListenAddress {
    type Err = WorkerError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = || WorkerError::InvalidAddress(s.to_string());
        if let Some(rest) = s.strip_prefix("unix:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if path.is_empty() {
                return Err(invalid());
            }
            return Ok(ListenAddress::Unix(PathBuf::from(path)));
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok() => {
                Ok(ListenAddress::Tcp(s.to_string()))
            }
            _ => Err(invalid()),
        }
    }
}

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
}

/// Where a worker's TLS material comes from.
#[derive(Debug)]
enum CredentialSource {
    Pem(ServerCredentials),
    Files(ServerCredentialFiles),
}

/// The worker's keepalive by default: a PING every 30 s, 30 s to answer (Wool's worker pings its
/// clients with these values too).
const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);

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
        let mut server = Server::builder()
            .tcp_nodelay(true)
            .max_concurrent_streams(Some(MAX_CONCURRENT_STREAMS))
            .http2_keepalive_interval(self.keepalive_interval)
            .http2_keepalive_timeout(Some(self.keepalive_timeout));
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
        let health_address = match &self.health_listen {
            Some(address) => Some(health.serve_alone(address, state.shutdown.clone()).await?),
            None => None,
        };
        let metrics_address = match &self.metrics_listen {
            Some(address) => Some(serve_metrics(address, &state).await?),
            None => None,
        };
        let shutdown = state.shutdown.clone();
        let count = Arc::clone(&accepted);
        let (address, unix_path, server_task): (String, Option<BoundSocket>, ServerTask) =
            match &self.listen {
                ListenAddress::Tcp(spec) => {
                    let bind_error = |source| WorkerError::Bind {
                        address: spec.clone(),
                        source,
                    };
                    let listener = TcpListener::bind(spec.as_str()).await.map_err(bind_error)?;
                    let local: SocketAddr = listener.local_addr().map_err(bind_error)?;
                    let incoming = TcpListenerStream::new(listener).map(move |stream| {
                        let stream = stream?;
                        count.fetch_add(1, Ordering::Relaxed);
                        stream.set_nodelay(true)?;
                        Ok::<_, std::io::Error>(stream)
                    });
                    let task = match &tls {
                        Some(tls) => spawn_server(router, tls.accept(incoming), shutdown),
                        None => spawn_server(router, incoming, shutdown),
                    };
                    (local.to_string(), None, task)
                }
                ListenAddress::Unix(path) => {
                    remove_stale_socket(path);
                    let listener =
                        UnixListener::bind(path).map_err(|source| WorkerError::Bind {
                            address: format!("unix:{}", path.display()),
                            source,
                        })?;
                    let incoming = UnixListenerStream::new(listener).inspect(move |_| {
                        count.fetch_add(1, Ordering::Relaxed);
                    });
                    // The `:authority` rewrite reads HTTP/2 frames: inside TLS, when there is one.
                    let task = match &tls {
                        Some(tls) => spawn_server(
                            router,
                            tls.accept(incoming)
                                .map(|stream| stream.map(authority::LenientAuthority::new)),
                            shutdown,
                        ),
                        None => spawn_server(
                            router,
                            incoming.map(|stream| stream.map(authority::LenientAuthority::new)),
                            shutdown,
                        ),
                    };
                    let bound = file_identity(path).map(|identity| (path.clone(), identity));
                    (format!("unix:{}", path.display()), bound, task)
                }
            };
        if let Err(error) = tls
            .as_ref()
            .map_or(Ok(()), |tls| tls.watch(state.shutdown.clone()))
        {
            state.shutdown.cancel(); // the server just started ends with the error
            return Err(error);
        }
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

/// The worker's `grpc.health.v1.Health` (tonic-health): SERVING from start-up, for the whole
/// server (`""`) and for the `Worker` service; NOT_SERVING for both as soon as a stop begins, so
/// that load balancers and probes drain the worker while it finishes its in-flight work.
struct Health {
    service: tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>,
}

impl Health {
    async fn start(state: &Arc<WorkerState>) -> Self {
        let reporter = tonic_health::server::HealthReporter::new();
        let service = tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(reporter.clone()),
        );
        reporter.set_serving::<WorkerServer<WorkerService>>().await;
        let begun = state.stop_begun.clone();
        tokio::spawn(async move {
            begun.cancelled().await;
            reporter
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            reporter
                .set_not_serving::<WorkerServer<WorkerService>>()
                .await;
        });
        Self { service }
    }

    /// Serves health alone on `address` (plaintext TCP) until `shutdown`; its bound address.
    async fn serve_alone(
        &self,
        address: &str,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<String, WorkerError> {
        let (listener, local) = bind_side_port(address).await?;
        let router = Server::builder().add_service(self.service.clone());
        tokio::spawn(router.serve_with_incoming_shutdown(
            TcpListenerStream::new(listener),
            shutdown.cancelled_owned(),
        ));
        Ok(local.to_string())
    }
}

/// Binds a plaintext side port (health, metrics) on a TCP `host:port`; the listener and its
/// address.
async fn bind_side_port(address: &str) -> Result<(TcpListener, SocketAddr), WorkerError> {
    let bind_error = |source| WorkerError::Bind {
        address: address.to_owned(),
        source,
    };
    let listener = TcpListener::bind(address).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}

/// Serves the worker's metrics over HTTP on `address` until the worker shuts down; the bound
/// address.
async fn serve_metrics(address: &str, state: &Arc<WorkerState>) -> Result<String, WorkerError> {
    let (listener, local) = bind_side_port(address).await?;
    let scrape = Arc::clone(state);
    metrics::serve(
        listener,
        Arc::new(move || scrape.metrics_text()),
        state.shutdown.clone(),
    );
    Ok(local.to_string())
}

/// Server reflection (tonic-reflection), v1: the worker describes its services, so grpcurl
/// and other tools work without the .proto files.
fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    WorkerError,
> {
    reflection()
        .build_v1()
        .map_err(|e| WorkerError::Reflection(e.to_string()))
}

/// Server reflection, v1alpha (what older grpcurl and grpc_cli versions ask for).
fn reflection_v1alpha() -> Result<
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
    WorkerError,
> {
    reflection()
        .build_v1alpha()
        .map_err(|e| WorkerError::Reflection(e.to_string()))
}

fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::protocol::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// The Unix socket a worker bound and its file identity (see [`file_identity`]).
type BoundSocket = (PathBuf, (u64, u64));

/// The task serving the gRPC server.
type ServerTask = JoinHandle<Result<(), tonic::transport::Error>>;

/// Removes a leftover socket file so a restarted worker can bind the same path: only a socket
/// (never another kind of file) and only a dead one (nobody accepts on it). A live worker's
/// socket is left alone, and binding then fails with "address in use", as TCP does.
fn remove_stale_socket(path: &std::path::Path) {
    use std::os::unix::fs::FileTypeExt;
    let is_socket = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket());
    let refused = || {
        std::os::unix::net::UnixStream::connect(path)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionRefused)
    };
    if is_socket && refused() {
        let _ = std::fs::remove_file(path);
    }
}

/// The identity (device, inode) of the socket file this worker bound, so that at exit it removes
/// its own socket and never one that another process has put at the same path since.
fn file_identity(path: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}

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
        match &self.tls {
            Some(tls) => tls.reload(),
            None => Err(WorkerError::Tls(
                "the worker serves plaintext: no credentials to reload".into(),
            )),
        }
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
