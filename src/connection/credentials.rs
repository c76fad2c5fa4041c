//! Client credentials for TLS workers (Wool's `WorkerCredentials`), fixed or reloaded from
//! files as they change (Wool's `WorkerCredentialsProvider(reloadable=True)`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use rustls_pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use super::Error;
use crate::tls::{self, FileStamp};

/// How long reloadable credentials serve what they last read before they look at their files
/// again (Wool's provider default `fresh_for`: one second). Looking is a `stat` of each file;
/// they are read again only when that changed.
pub const CREDENTIAL_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// How this client proves itself to and verifies a TLS worker: the CA the worker's certificate
/// must chain to, for mutual TLS a client certificate and key, and optionally the name to verify
/// the worker's certificate against instead of the dialed host.
///
/// PEM text is checked when the credentials are made, so a bad PEM fails here, not on the first
/// call. Fixed credentials ([`from_pem`](Self::from_pem), [`from_files`](Self::from_files)) are
/// compared by content: connections with equal credentials share channels. Reloadable ones
/// ([`from_files_reloadable`](Self::from_files_reloadable)) share channels while they read
/// the same material.
#[derive(Clone)]
pub struct WorkerCredentials {
    source: Source,
    identity: Option<String>,
    /// Which advertised worker names discovery admits ([`with_peers`](Self::with_peers)).
    peers: Option<Peers>,
}

/// The worker names a client accepts from the workers discovery finds: Wool's `peers`
/// parameter of `WorkerCredentialsProvider` (`wool/runtime/worker/auth.py`), set with
/// [`WorkerCredentials::with_peers`].
///
/// The policy is consulted only by discovery's admission gate
/// ([`DiscoveredWorker::refusal`](crate::fleet::DiscoveredWorker::refusal)): with one, a
/// discovered worker is admitted only when it advertises a name the policy accepts, and that
/// name is the one its certificate is verified against (unless the credentials carry an
/// explicit identity, which always wins). A worker advertising no name is refused whatever the
/// policy. It never widens what is accepted: a worker claiming a name it holds no certificate
/// for fails the TLS handshake. It plays no part in a connection made to a named target.
///
/// Names are compared after trimming surrounding whitespace, as Wool's `normalize_peer`.
/// Unlike Wool, which warns and leaves the policy unconfigured (admitting every worker) when
/// given a blank name or an empty collection, these constructors refuse them, so that a typo
/// never widens admission.
#[derive(Clone)]
pub struct Peers(PeerPolicy);

#[derive(Clone)]
enum PeerPolicy {
    Names(std::collections::BTreeSet<String>),
    Predicate(Arc<dyn Fn(&str) -> bool + Send + Sync>),
}

/// The most names a policy may list, and the longest name (a DNS name is at most 253 bytes):
/// bounds on what a C or Go caller's arguments can make a policy hold.
const MAX_PEERS: usize = 4096;
const MAX_PEER_NAME_BYTES: usize = 253;

impl Peers {
    /// A policy accepting exactly `name` (Wool's `peers="name"`).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) for a blank
    /// name or one longer than 253 bytes.
    pub fn name(name: &str) -> Result<Self, Error> {
        Self::names([name])
    }

    /// A policy accepting any of `names` (Wool's `peers=[...]`); duplicates are merged.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) when there
    /// is no name, more than 4,096, or one is blank or longer than 253 bytes.
    pub fn names<I, S>(names: I) -> Result<Self, Error>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut set = std::collections::BTreeSet::new();
        for name in names {
            let name = name.as_ref().trim();
            if name.is_empty() {
                return Err(Error::invalid_argument(
                    "a peer name must not be blank (it would name no worker)",
                ));
            }
            if name.len() > MAX_PEER_NAME_BYTES {
                return Err(Error::invalid_argument(format!(
                    "a peer name is at most {MAX_PEER_NAME_BYTES} bytes, got {}",
                    name.len()
                )));
            }
            set.insert(name.to_owned());
            if set.len() > MAX_PEERS {
                return Err(Error::invalid_argument(format!(
                    "a peers policy lists at most {MAX_PEERS} names"
                )));
            }
        }
        if set.is_empty() {
            return Err(Error::invalid_argument(
                "a peers policy needs at least one name",
            ));
        }
        Ok(Self(PeerPolicy::Names(set)))
    }

    /// A policy deciding by `accepts` over the advertised name (trimmed, never blank), Wool's
    /// predicate form. It should be cheap and must not block: it runs inside each listing. A
    /// predicate that panics is taken as having refused the worker (with a `tracing` warning),
    /// as Wool takes one that raises.
    pub fn predicate(accepts: impl Fn(&str) -> bool + Send + Sync + 'static) -> Self {
        Self(PeerPolicy::Predicate(Arc::new(accepts)))
    }

    /// Whether a worker advertising `advertised` is admitted (Wool's `accepts_peer`): false
    /// for `None` or a blank name, whatever the policy.
    pub fn accepts(&self, advertised: Option<&str>) -> bool {
        let Some(name) = advertised.map(str::trim).filter(|name| !name.is_empty()) else {
            return false;
        };
        match &self.0 {
            PeerPolicy::Names(names) => names.contains(name),
            PeerPolicy::Predicate(accepts) => {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| accepts(name)))
                    .unwrap_or_else(|_| {
                        tracing::warn!(
                            peer = name,
                            "the peer-name predicate panicked; treating the worker as refused"
                        );
                        false
                    })
            }
        }
    }

    /// The accepted names for a diagnostic (Wool's `describe_peers`): the names sorted and
    /// joined by `", "`, or `"a peer-name predicate"`.
    pub fn describe(&self) -> String {
        match &self.0 {
            PeerPolicy::Names(names) => names.iter().cloned().collect::<Vec<_>>().join(", "),
            PeerPolicy::Predicate(_) => "a peer-name predicate".into(),
        }
    }

    /// The accepted names, or `None` for a predicate.
    pub fn list(&self) -> Option<Vec<&str>> {
        match &self.0 {
            PeerPolicy::Names(names) => Some(names.iter().map(String::as_str).collect()),
            PeerPolicy::Predicate(_) => None,
        }
    }
}

impl std::fmt::Debug for Peers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Peers").field(&self.describe()).finish()
    }
}

#[derive(Clone)]
enum Source {
    Fixed(Arc<TlsMaterial>),
    Files(Arc<CredentialFiles>),
}

/// The PEM a TLS connection is made with, compared by content: part of the pool key, so that a
/// connection whose material changed gets a new channel. Its `Debug` shows sizes only, never
/// the PEM: a connection's `{:?}` (and so any `tracing` field or `dbg!` of one) reaches it.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(crate) struct TlsMaterial {
    ca_pem: Vec<u8>,
    /// (certificate chain, private key) for mutual TLS.
    client: Option<(Vec<u8>, Vec<u8>)>,
}

/// The TLS half of a pool key: the material and the name the worker is verified against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TlsKey {
    pub(crate) material: Arc<TlsMaterial>,
    pub(crate) identity: Option<String>,
}

impl PartialEq for WorkerCredentials {
    /// Fixed credentials are equal when their material and identity are; reloadable ones when
    /// they are the same set of files (clones of one value) with the same identity.
    fn eq(&self, other: &Self) -> bool {
        self.identity == other.identity
            && match (&self.source, &other.source) {
                (Source::Fixed(a), Source::Fixed(b)) => a == b,
                (Source::Files(a), Source::Files(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}

impl Eq for WorkerCredentials {}

impl std::hash::Hash for WorkerCredentials {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.identity.hash(state);
        match &self.source {
            Source::Fixed(material) => material.hash(state),
            Source::Files(files) => Arc::as_ptr(files).hash(state),
        }
    }
}

impl std::fmt::Debug for WorkerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCredentials")
            .field("mutual", &self.is_mutual())
            .field("identity", &self.identity)
            .field("reloadable", &self.is_reloadable())
            .finish_non_exhaustive()
    }
}

impl WorkerCredentials {
    /// Credentials from PEM text.
    ///
    /// - `ca_pem`: one or more CA certificates.
    /// - `key_pem`, `cert_pem`: the client's key and certificate chain; required when `mutual`,
    ///   ignored otherwise (one-way TLS: the client only verifies the worker).
    /// - `identity`: the subject-alternative name to verify the worker against; `None` or `""`
    ///   means the dialed host.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) when a PEM holds
    /// no certificate or key, a certificate does not parse, the key does not match the client
    /// certificate, mutual TLS lacks the key or certificate, or `identity` is not a valid DNS
    /// name or IP address.
    pub fn from_pem(
        ca_pem: &[u8],
        key_pem: Option<&[u8]>,
        cert_pem: Option<&[u8]>,
        mutual: bool,
        identity: Option<&str>,
    ) -> Result<Self, Error> {
        let material = TlsMaterial::from_pem(ca_pem, key_pem, cert_pem, mutual)
            .map_err(Error::invalid_argument)?;
        Ok(Self {
            source: Source::Fixed(Arc::new(material)),
            identity: checked_identity(identity)?,
            peers: None,
        })
    }

    /// Credentials from PEM files, read once; as [`from_pem`](Self::from_pem), plus an
    /// [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) naming any file that
    /// cannot be read. Matches Wool's `WorkerCredentials.from_files`.
    pub fn from_files(
        ca_path: &Path,
        key_path: Option<&Path>,
        cert_path: Option<&Path>,
        mutual: bool,
        identity: Option<&str>,
    ) -> Result<Self, Error> {
        let files = CredentialPaths::new(ca_path, key_path, cert_path, mutual)?;
        Ok(Self {
            source: Source::Fixed(Arc::new(files.read().map_err(Error::invalid_argument)?)),
            identity: checked_identity(identity)?,
            peers: None,
        })
    }

    /// Credentials from PEM files that are read again when they change, as Wool's
    /// `WorkerCredentialsProvider(reloadable=True)` over a factory reading files.
    ///
    /// The files are read and checked now (errors as [`from_files`](Self::from_files)). Then,
    /// at most once per [`CREDENTIAL_RELOAD_INTERVAL`], a call looks at them (`stat`); when one
    /// changed they are read again. New material is used by the connections dialed from then
    /// on: each [`WorkerConnection`](super::WorkerConnection) moves to a new pooled channel on
    /// its next call, and the channel made with the old material is retired once the calls
    /// still running on it end (its connection closes then, rather than lingering in the pool).
    /// Material that does not pass the checks (a half-written file, a key that does not match
    /// its certificate) is refused with a `tracing` warning and the previous material kept;
    /// it is tried again at the next interval. The TLS mode (mutual or one-way) stays as made.
    pub fn from_files_reloadable(
        ca_path: &Path,
        key_path: Option<&Path>,
        cert_path: Option<&Path>,
        mutual: bool,
        identity: Option<&str>,
    ) -> Result<Self, Error> {
        let paths = CredentialPaths::new(ca_path, key_path, cert_path, mutual)?;
        let identity = checked_identity(identity)?;
        let stamps = paths.stamps();
        let material = paths.read().map_err(Error::invalid_argument)?;
        Ok(Self {
            source: Source::Files(Arc::new(CredentialFiles {
                current: ArcSwap::from_pointee(material),
                epoch: Instant::now(),
                next_look_ms: AtomicU64::new(CREDENTIAL_RELOAD_INTERVAL.as_millis() as u64),
                stamps: Mutex::new(stamps),
                paths,
            })),
            identity,
            peers: None,
        })
    }

    /// The same credentials, verifying the worker against `identity` instead (as Wool does
    /// with a discovered worker's advertised identity); `""` means the dialed host.
    /// Reloadable credentials stay reloadable (the clone reads the same files).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) when
    /// `identity` is not a valid DNS name or IP address.
    pub fn with_identity(&self, identity: &str) -> Result<Self, Error> {
        Ok(Self {
            identity: checked_identity(Some(identity))?,
            ..self.clone()
        })
    }

    /// The same credentials with a peers policy: discovery then admits only workers advertising
    /// a name `peers` accepts, and verifies each against that name unless these credentials
    /// carry an explicit identity ([`Peers`]). The policy lives on the credentials as Wool's
    /// lives on its `WorkerCredentialsProvider`: it goes wherever they go (a sweep, `woolctl`,
    /// the scaler, the C and binding handles), and it only means something over TLS (a caller
    /// without credentials admits only plaintext workers, whose names nothing verifies). It is
    /// not part of equality or of the pool key: it decides admission, not the channel.
    pub fn with_peers(&self, peers: Peers) -> Self {
        Self {
            peers: Some(peers),
            ..self.clone()
        }
    }

    /// The peers policy, if set ([`with_peers`](Self::with_peers)).
    pub fn peers(&self) -> Option<&Peers> {
        self.peers.as_ref()
    }

    /// Whether the client presents a certificate (mutual TLS).
    pub fn is_mutual(&self) -> bool {
        match &self.source {
            Source::Fixed(material) => material.client.is_some(),
            Source::Files(files) => files.paths.client.is_some(),
        }
    }

    /// Whether the credentials are read again when their files change
    /// ([`from_files_reloadable`](Self::from_files_reloadable)).
    pub fn is_reloadable(&self) -> bool {
        matches!(self.source, Source::Files(_))
    }

    /// The name the worker's certificate is verified against instead of the dialed host, if set.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// The material to dial with now (for reloadable credentials: after looking at the files,
    /// when that is due) and the identity.
    pub(crate) fn current(&self) -> TlsKey {
        let material = match &self.source {
            Source::Fixed(material) => Arc::clone(material),
            Source::Files(files) => files.current(),
        };
        TlsKey {
            material,
            identity: self.identity.clone(),
        }
    }

    /// For reloadable credentials, whether `material` is what they serve now (looking at the
    /// files when that is due); fixed credentials never change.
    pub(crate) fn still_serves(&self, material: &Arc<TlsMaterial>) -> bool {
        match &self.source {
            Source::Fixed(_) => true,
            Source::Files(files) => files.serves(material),
        }
    }
}

/// The files of reloadable credentials.
#[derive(Debug)]
struct CredentialPaths {
    ca: PathBuf,
    /// (certificate chain, key) for mutual TLS.
    client: Option<(PathBuf, PathBuf)>,
}

impl CredentialPaths {
    fn new(
        ca: &Path,
        key: Option<&Path>,
        cert: Option<&Path>,
        mutual: bool,
    ) -> Result<Self, Error> {
        let client = if mutual {
            let key =
                key.ok_or_else(|| Error::invalid_argument("mutual TLS needs a client key"))?;
            let cert = cert
                .ok_or_else(|| Error::invalid_argument("mutual TLS needs a client certificate"))?;
            Some((cert.to_path_buf(), key.to_path_buf()))
        } else {
            None
        };
        Ok(Self {
            ca: ca.to_path_buf(),
            client,
        })
    }

    fn read(&self) -> Result<TlsMaterial, String> {
        let ca = tls::read_pem_file(&self.ca)?;
        let client = match &self.client {
            Some((cert, key)) => Some((tls::read_pem_file(cert)?, tls::read_pem_file(key)?)),
            None => None,
        };
        TlsMaterial::from_pem(
            &ca,
            client.as_ref().map(|(_, key)| key.as_slice()),
            client.as_ref().map(|(cert, _)| cert.as_slice()),
            client.is_some(),
        )
    }

    fn stamps(&self) -> Vec<FileStamp> {
        let mut stamps = vec![FileStamp::of(&self.ca)];
        if let Some((cert, key)) = &self.client {
            stamps.extend([FileStamp::of(cert), FileStamp::of(key)]);
        }
        stamps
    }
}

/// Reloadable credentials' state: what they serve, and when to look at the files next.
struct CredentialFiles {
    paths: CredentialPaths,
    current: ArcSwap<TlsMaterial>,
    /// The clock `next_look_ms` counts from.
    epoch: Instant,
    /// When the files are next looked at, in milliseconds after `epoch`.
    next_look_ms: AtomicU64,
    /// The files' stamps when last read; held by the one call that looks (others go on with
    /// the current material meanwhile).
    stamps: Mutex<Vec<FileStamp>>,
}

impl CredentialFiles {
    /// The material to use now, looking at the files first when that is due.
    fn current(&self) -> Arc<TlsMaterial> {
        self.look_if_due();
        self.current.load_full()
    }

    /// Whether `material` is what these credentials serve now (looking at the files first when
    /// that is due). Every call of a connection with reloadable credentials asks this: it only
    /// compares pointers, taking no reference.
    fn serves(&self, material: &Arc<TlsMaterial>) -> bool {
        self.look_if_due();
        Arc::ptr_eq(&self.current.load(), material)
    }

    fn look_if_due(&self) {
        let now_ms = self.epoch.elapsed().as_millis() as u64;
        if now_ms >= self.next_look_ms.load(Ordering::Relaxed) {
            self.look(now_ms);
        }
    }

    /// Reads the files again if their stamps changed; refuses (keeping the current material)
    /// what does not pass the checks.
    fn look(&self, now_ms: u64) {
        let Ok(mut stamps) = self.stamps.try_lock() else {
            return; // another call is looking
        };
        self.next_look_ms.store(
            now_ms + CREDENTIAL_RELOAD_INTERVAL.as_millis() as u64,
            Ordering::Relaxed,
        );
        let now = self.paths.stamps();
        if now == *stamps {
            return;
        }
        match self.paths.read() {
            Ok(material) => {
                *stamps = now;
                if *self.current.load_full() != material {
                    self.current.store(Arc::new(material));
                    tracing::info!(
                        ca = %self.paths.ca.display(),
                        "TLS credentials reloaded: new connections use the new material"
                    );
                }
            }
            Err(error) => tracing::warn!(
                ca = %self.paths.ca.display(),
                %error,
                "refusing the TLS credentials read from the files; keeping the previous ones"
            ),
        }
    }
}

impl std::fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("mutual", &self.client.is_some())
            .finish_non_exhaustive()
    }
}

impl TlsMaterial {
    /// Checks PEM text (as [`WorkerCredentials::from_pem`] documents) into material.
    fn from_pem(
        ca_pem: &[u8],
        key_pem: Option<&[u8]>,
        cert_pem: Option<&[u8]>,
        mutual: bool,
    ) -> Result<Self, String> {
        tls::certificates("CA", ca_pem)?;
        let client = if mutual {
            let key = key_pem.ok_or("mutual TLS needs a client key")?;
            let cert = cert_pem.ok_or("mutual TLS needs a client certificate")?;
            tls::certificates("client certificate", cert)?;
            tls::private_key("client key", key)?;
            Some((cert.to_vec(), key.to_vec()))
        } else {
            None
        };
        let material = Self {
            ca_pem: ca_pem.to_vec(),
            client,
        };
        // Build the TLS configuration once now, so that anything rustls would refuse later (a
        // certificate that does not parse, a key that does not match its certificate) fails here.
        material.client_config()?;
        Ok(material)
    }

    /// The rustls client configuration: roots = the CA, the client certificate when mutual,
    /// ALPN `h2`.
    fn client_config(&self) -> Result<ClientConfig, String> {
        let roots = tls::root_store("CA", &self.ca_pem)?;
        let builder = ClientConfig::builder_with_provider(tls::provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS setup: {e}"))?
            .with_root_certificates(roots);
        let mut config = match &self.client {
            Some((cert, key)) => builder
                .with_client_auth_cert(
                    tls::certificates("client certificate", cert)?,
                    tls::private_key("client key", key)?,
                )
                .map_err(|e| format!("unusable client certificate or key: {e}"))?,
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }
}

impl TlsKey {
    /// The rustls client configuration for this material and the name to verify the worker
    /// against: the identity, else `default_name` (the dialed host; an IP address is checked
    /// against the certificate's IP SANs).
    pub(crate) fn client_config(
        &self,
        default_name: &str,
    ) -> Result<(Arc<ClientConfig>, ServerName<'static>), Error> {
        let config = self
            .material
            .client_config()
            .map_err(Error::invalid_argument)?;
        let name = self.identity.as_deref().unwrap_or(default_name);
        let name = ServerName::try_from(name.to_string()).map_err(|_| {
            Error::invalid_argument(format!(
                "{name:?} is not a DNS name or IP address to verify the worker against"
            ))
        })?;
        Ok((Arc::new(config), name))
    }
}

/// An identity to verify the worker against: `None` for none or `""`, else a DNS name or IP.
fn checked_identity(identity: Option<&str>) -> Result<Option<String>, Error> {
    let Some(name) = identity.filter(|name| !name.is_empty()) else {
        return Ok(None);
    };
    rustls_pki_types::ServerName::try_from(name).map_err(|_| {
        Error::invalid_argument(format!("identity {name:?} is not a DNS name or IP address"))
    })?;
    Ok(Some(name.to_owned()))
}
