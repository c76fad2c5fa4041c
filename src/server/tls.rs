//! The servers' TLS (the worker's, the scaler's): their credentials, the handshake on each
//! accepted connection, and reloading the certificate, key and CA from their files without
//! dropping a connection.
//!
//! Each connection is handshaken with the server configuration current when it was accepted,
//! so new material applies to new connections while established ones carry on with theirs (as
//! Wool's worker with a reloadable provider: grpc's `dynamic_ssl_server_credentials`).

use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use std::future::Future;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::ServerConfig;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::Connected;

use super::handshake::{within_handshake_deadlines, Opening};
use super::io::Readable;
use super::ServerError;
use crate::tls;

/// How long the file watcher lets a burst of changes settle before reading the files (a
/// rotation writes several files, often by rename).
const SETTLE: Duration = Duration::from_millis(100);

/// A server's TLS identity (a worker's or the scaler's): its certificate chain and key (PEM),
/// and for mutual TLS the CA that client certificates must chain to.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerCredentials {
    cert_pem: Vec<u8>,
    key_pem: Vec<u8>,
    client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ServerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerCredentials")
            .field("mutual", &self.client_ca_pem.is_some())
            .finish_non_exhaustive()
    }
}

impl ServerCredentials {
    /// Mutual TLS (Wool's default for secure workers): clients must present a certificate
    /// signed by `ca_pem`. The PEM is checked when the worker starts
    /// (`libwool::worker::WorkerBuilder::serve`).
    pub fn mutual(
        ca_pem: impl Into<Vec<u8>>,
        cert_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            client_ca_pem: Some(ca_pem.into()),
        }
    }

    /// One-way TLS: the worker proves itself; clients present no certificate.
    pub fn one_way(cert_pem: impl Into<Vec<u8>>, key_pem: impl Into<Vec<u8>>) -> Self {
        Self {
            cert_pem: cert_pem.into(),
            key_pem: key_pem.into(),
            client_ca_pem: None,
        }
    }

    /// Whether clients must present a certificate.
    pub fn is_mutual(&self) -> bool {
        self.client_ca_pem.is_some()
    }

    /// Checks the material as the worker does before serving it (see [`Self::server_config`]).
    #[cfg(feature = "fuzzing")]
    pub(crate) fn check(&self) -> Result<(), ServerError> {
        self.server_config().map(drop)
    }

    /// The rustls configuration (ALPN `h2`), checking every PEM: a bad one is named.
    fn server_config(&self) -> Result<ServerConfig, ServerError> {
        let chain =
            tls::certificates("worker certificate", &self.cert_pem).map_err(ServerError::Tls)?;
        let key = tls::private_key("worker key", &self.key_pem).map_err(ServerError::Tls)?;
        let provider = tls::provider();
        let builder = ServerConfig::builder_with_provider(Arc::clone(&provider))
            .with_safe_default_protocol_versions()
            .map_err(|e| ServerError::Tls(format!("TLS setup: {e}")))?;
        let builder = match &self.client_ca_pem {
            Some(ca) => {
                let roots = tls::root_store("client CA", ca).map_err(ServerError::Tls)?;
                let verifier = WebPkiClientVerifier::builder_with_provider(roots.into(), provider)
                    .build()
                    .map_err(|e| ServerError::Tls(format!("unusable client CA: {e}")))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder
            .with_single_cert(chain, key)
            .map_err(|e| ServerError::Tls(format!("unusable worker certificate or key: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

/// Where a server's TLS material is read from, to be read again on a reload
/// (`libwool::worker::WorkerHandle::reload_credentials`,
/// `ScalerHandle::reload_credentials`; SIGHUP for `wool-worker` and `wool-scaler`) and whenever
/// one of the files changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerCredentialFiles {
    /// The worker's certificate chain (PEM).
    pub cert: PathBuf,
    /// The worker's private key (PEM).
    pub key: PathBuf,
    /// For mutual TLS, the CA certificates (PEM) that client certificates must chain to;
    /// `None` for one-way TLS.
    pub client_ca: Option<PathBuf>,
}

impl ServerCredentialFiles {
    /// Reads the files into credentials (checked when the worker uses them).
    ///
    /// Errors: [`ServerError::Tls`] naming a file that cannot be read.
    pub fn read(&self) -> Result<ServerCredentials, ServerError> {
        let read = |path: &Path| tls::read_pem_file(path).map_err(ServerError::Tls);
        Ok(ServerCredentials {
            cert_pem: read(&self.cert)?,
            key_pem: read(&self.key)?,
            client_ca_pem: self.client_ca.as_deref().map(read).transpose()?,
        })
    }

    /// The directories holding the files, once each (what the watcher watches: a rename over
    /// a file, as Kubernetes does for a mounted secret, is an event of its directory).
    fn directories(&self) -> Vec<PathBuf> {
        let mut directories: Vec<PathBuf> =
            [Some(&self.cert), Some(&self.key), self.client_ca.as_ref()]
                .into_iter()
                .flatten()
                .map(|path| match path.parent() {
                    Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
                    _ => PathBuf::from("."),
                })
                .collect();
        directories.sort();
        directories.dedup();
        directories
    }
}

/// What a reload of a server's credentials did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialReload {
    /// New material was read and checked: connections accepted from now on use it.
    Reloaded,
    /// The files hold what the worker already serves.
    Unchanged,
}

/// A server's TLS state: the configuration new connections are handshaken with, the
/// material it came from, and the files to reload it from (if any). Its `Debug` names the
/// files, never the key (rustls' configuration would print its certified key).
pub(crate) struct ServerTls {
    config: ArcSwap<ServerConfig>,
    /// The material in force; locked for the length of a reload.
    material: Mutex<ServerCredentials>,
    files: Option<ServerCredentialFiles>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl ServerTls {
    /// Checks `credentials` and makes the state; `files` are where to reload them from.
    pub(crate) fn new(
        credentials: ServerCredentials,
        files: Option<ServerCredentialFiles>,
    ) -> Result<Arc<Self>, ServerError> {
        let config = credentials.server_config()?;
        Ok(Arc::new(Self {
            config: ArcSwap::from_pointee(config),
            material: Mutex::new(credentials),
            files,
        }))
    }

    /// Reads the files again and, when they hold new material that passes the checks, serves it to connections accepted from now on.
    /// Material that fails is refused with a log line; the previous material stays in force.
    ///
    /// Errors: [`ServerError::Tls`] when the credentials were not given as files, or the new
    /// material is refused (the message says why).
    pub(crate) fn reload(&self) -> Result<CredentialReload, ServerError> {
        let Some(files) = &self.files else {
            return Err(ServerError::Tls(
                "the worker's credentials were given as PEM, not files: nothing to reload".into(),
            ));
        };
        let mut material = self.material.lock().unwrap_or_else(|p| p.into_inner());
        let client_ca = files.client_ca.as_ref().map(|ca| ca.display().to_string());
        let refuse = |error: ServerError| {
            tracing::warn!(
                cert = %files.cert.display(),
                key = %files.key.display(),
                client_ca = client_ca.as_deref(),
                %error,
                "refusing the TLS credentials read from the files; keeping the previous ones"
            );
            error
        };
        let fresh = files.read().map_err(refuse)?;
        if fresh == *material {
            return Ok(CredentialReload::Unchanged);
        }
        // Material equal to what is served is not checked again: a file put back after a
        // refusal reads as unchanged (and the log says nothing new).
        let config = fresh.server_config().map_err(refuse)?;
        self.config.store(Arc::new(config));
        *material = fresh;
        tracing::info!(
            cert = %files.cert.display(),
            key = %files.key.display(),
            client_ca = client_ca.as_deref(),
            "TLS credentials reloaded: new connections use the new material"
        );
        Ok(CredentialReload::Reloaded)
    }

    /// Watches the credential files' directories and reloads (as [`reload`](Self::reload))
    /// after each burst of changes, until `shutdown`.
    ///
    /// Errors: [`ServerError::Tls`] when the directories cannot be watched.
    pub(crate) fn watch(
        self: &Arc<Self>,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<(), ServerError> {
        let Some(files) = &self.files else {
            return Ok(());
        };
        use notify::Watcher;
        let (changed, mut changes) = tokio::sync::mpsc::channel::<()>(1);
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                if event.is_ok_and(|e| !e.kind.is_access()) {
                    let _ = changed.try_send(());
                }
            })
            .map_err(|e| ServerError::Tls(format!("cannot watch the credential files: {e}")))?;
        for directory in files.directories() {
            watcher
                .watch(&directory, notify::RecursiveMode::NonRecursive)
                .map_err(|e| {
                    ServerError::Tls(format!("cannot watch {}: {e}", directory.display()))
                })?;
        }
        let tls = Arc::clone(self);
        tokio::spawn(async move {
            let _watcher = watcher;
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => return,
                    change = changes.recv() => if change.is_none() { return },
                }
                tokio::time::sleep(SETTLE).await;
                while changes.try_recv().is_ok() {}
                let tls = Arc::clone(&tls);
                // File reads and certificate parsing: off the runtime's worker threads. The
                // outcome is logged by `reload`.
                let _ = tokio::task::spawn_blocking(move || tls.reload()).await;
            }
        });
        Ok(())
    }
}

/// The TLS handshake on each accepted connection, with the configuration in force when it was
/// accepted, within the acceptor's deadlines
/// ([`FIRST_BYTES_TIMEOUT`](super::FIRST_BYTES_TIMEOUT) for the ClientHello to start,
/// [`HANDSHAKE_TIMEOUT`](super::HANDSHAKE_TIMEOUT) for the whole). Each connection opens in a
/// task of its own ([`accept_connections`](super::accept::accept_connections)), so a slow or
/// silent one holds up no other; a failed handshake drops that connection only.
impl<IO> Opening<IO> for Arc<ServerTls>
where
    IO: AsyncRead + AsyncWrite + Connected + Readable + Unpin + Send + 'static,
{
    type Output = TlsConnection<IO>;

    const SERVER_SPEAKS_FIRST: bool = true;

    fn open(&self, io: IO) -> impl Future<Output = io::Result<TlsConnection<IO>>> + Send {
        let acceptor = tokio_rustls::TlsAcceptor::from(self.config.load_full());
        async move {
            within_handshake_deadlines(io, |io| acceptor.accept(io))
                .await
                .map(|stream| TlsConnection(Box::new(stream)))
        }
    }
}

/// A client connection after its TLS handshake.
pub(crate) struct TlsConnection<IO>(Box<TlsStream<IO>>);

impl<IO: Connected> Connected for TlsConnection<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.0.get_ref().0.connect_info()
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsConnection<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_read(cx, buf)
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsConnection<IO> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().0).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.get_mut().0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.get_mut().0).poll_shutdown(cx)
    }
}
