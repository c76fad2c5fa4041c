//! Client credentials for TLS workers (Wool's `WorkerCredentials`).

use std::path::Path;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use std::sync::Arc;

use rustls_pki_types::ServerName;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

use super::Error;

/// How this client proves itself to and verifies a TLS worker: the CA the worker's certificate
/// must chain to, for mutual TLS a client certificate and key, and optionally the name to verify
/// the worker's certificate against instead of the dialed host.
///
/// PEM text is checked when the credentials are made, so a bad PEM fails here, not on the first
/// call. Credentials are compared by content: connections with equal credentials share channels.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkerCredentials {
    ca_pem: Vec<u8>,
    /// (certificate chain, private key) for mutual TLS.
    client: Option<(Vec<u8>, Vec<u8>)>,
    identity: Option<String>,
}

impl std::fmt::Debug for WorkerCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerCredentials")
            .field("mutual", &self.client.is_some())
            .field("identity", &self.identity)
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
        check_certificates("CA", ca_pem)?;
        let client = if mutual {
            let key =
                key_pem.ok_or_else(|| Error::invalid_argument("mutual TLS needs a client key"))?;
            let cert = cert_pem
                .ok_or_else(|| Error::invalid_argument("mutual TLS needs a client certificate"))?;
            check_certificates("client certificate", cert)?;
            check_key(key)?;
            Some((cert.to_vec(), key.to_vec()))
        } else {
            None
        };
        let identity = checked_identity(identity)?;
        let credentials = Self {
            ca_pem: ca_pem.to_vec(),
            client,
            identity,
        };
        // Build the TLS configuration once now, so that anything rustls would refuse later (a
        // certificate that does not parse, a key that does not match its certificate) fails here.
        credentials.client_config("localhost")?;
        Ok(credentials)
    }

    /// Credentials from PEM files; as [`from_pem`](Self::from_pem), plus an
    /// [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) naming any file that
    /// cannot be read. Matches Wool's `WorkerCredentials.from_files`.
    pub fn from_files(
        ca_path: &Path,
        key_path: Option<&Path>,
        cert_path: Option<&Path>,
        mutual: bool,
        identity: Option<&str>,
    ) -> Result<Self, Error> {
        let read = |path: &Path| {
            std::fs::read(path).map_err(|e| {
                Error::invalid_argument(format!("cannot read {}: {e}", path.display()))
            })
        };
        let ca = read(ca_path)?;
        let (key, cert) = if mutual {
            (
                key_path.map(read).transpose()?,
                cert_path.map(read).transpose()?,
            )
        } else {
            (None, None)
        };
        Self::from_pem(&ca, key.as_deref(), cert.as_deref(), mutual, identity)
    }

    /// The same credentials, verifying the worker against `identity` instead (as Wool does
    /// with a discovered worker's advertised identity); `""` means the dialed host.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](super::ErrorKind::InvalidArgument) when
    /// `identity` is not a valid DNS name or IP address.
    pub fn with_identity(&self, identity: &str) -> Result<Self, Error> {
        Ok(Self {
            identity: checked_identity(Some(identity))?,
            ..self.clone()
        })
    }

    /// Whether the client presents a certificate (mutual TLS).
    pub fn is_mutual(&self) -> bool {
        self.client.is_some()
    }

    /// The name the worker's certificate is verified against instead of the dialed host, if set.
    pub fn identity(&self) -> Option<&str> {
        self.identity.as_deref()
    }

    /// The rustls client configuration (roots = the CA, client certificate when mutual, ALPN
    /// `h2`) and the name to verify the worker against: the identity, else `default_name` (the
    /// dialed host; an IP address is checked against the certificate's IP SANs).
    pub(crate) fn client_config(
        &self,
        default_name: &str,
    ) -> Result<(Arc<ClientConfig>, ServerName<'static>), Error> {
        let invalid =
            |what: &str, e: &dyn std::fmt::Display| Error::invalid_argument(format!("{what}: {e}"));
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(&self.ca_pem) {
            roots
                .add(cert.map_err(|e| invalid("CA PEM is malformed", &e))?)
                .map_err(|e| invalid("unusable CA certificate", &e))?;
        }
        let builder = ClientConfig::builder_with_provider(Arc::new(
            tokio_rustls::rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| invalid("TLS setup", &e))?
        .with_root_certificates(roots);
        let mut config = match &self.client {
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| invalid("client certificate PEM is malformed", &e))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|e| invalid("client key PEM is malformed", &e))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| invalid("unusable client certificate or key", &e))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"h2".to_vec()];
        let name = self.identity.as_deref().unwrap_or(default_name);
        let name = ServerName::try_from(name.to_string()).map_err(|_| {
            Error::invalid_argument(format!(
                "{name:?} is not a DNS name or IP address to verify the worker against"
            ))
        })?;
        Ok((Arc::new(config), name))
    }
}

fn check_certificates(what: &str, pem: &[u8]) -> Result<(), Error> {
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(pem) {
        cert.map_err(|e| Error::invalid_argument(format!("{what} PEM is malformed: {e}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(Error::invalid_argument(format!(
            "{what} PEM holds no certificate"
        )));
    }
    Ok(())
}

fn check_key(pem: &[u8]) -> Result<(), Error> {
    PrivateKeyDer::from_pem_slice(pem).map(drop).map_err(|e| {
        Error::invalid_argument(format!("client key PEM holds no usable private key: {e}"))
    })
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
