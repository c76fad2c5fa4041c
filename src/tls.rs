//! PEM material both sides read: the client's [`WorkerCredentials`](crate::WorkerCredentials)
//! and the worker's [`ServerCredentials`](crate::worker::ServerCredentials). One parser, one
//! set of messages; each side wraps the message in its own error type.

use std::path::Path;
use std::sync::Arc;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::crypto::CryptoProvider;
use tokio_rustls::rustls::RootCertStore;

/// The certificates in `pem` (at least one), `what` naming them in messages ("CA", "worker
/// certificate"…).
pub(crate) fn certificates(what: &str, pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certificates = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("the {what} PEM is malformed: {e}"))?;
    if certificates.is_empty() {
        return Err(format!("the {what} PEM holds no certificate"));
    }
    Ok(certificates)
}

/// The private key in `pem` (PKCS#8, PKCS#1 or SEC1), `what` naming it in messages.
pub(crate) fn private_key(what: &str, pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| format!("the {what} PEM holds no usable private key: {e}"))
}

/// A root store of the CA certificates in `pem` (at least one), `what` naming them.
pub(crate) fn root_store(what: &str, pem: &[u8]) -> Result<RootCertStore, String> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(what, pem)? {
        roots
            .add(certificate)
            .map_err(|e| format!("unusable {what} certificate: {e}"))?;
    }
    Ok(roots)
}

/// The cryptography both sides use (ring, as tonic's `tls-ring`).
pub(crate) fn provider() -> Arc<CryptoProvider> {
    Arc::new(tokio_rustls::rustls::crypto::ring::default_provider())
}

/// Reads a PEM file whole; the message names the file.
pub(crate) fn read_pem_file(path: &Path) -> Result<Vec<u8>, String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let fail = |e: std::io::Error| format!("cannot read {}: {e}", path.display());
    // Non-blocking open: a FIFO (or a device) named as a PEM file must not hang the caller; it
    // is then refused as not a regular file.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(fail)?;
    if !file.metadata().map_err(fail)?.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    let mut pem = Vec::new();
    file.take(MAX_PEM_FILE_BYTES + 1)
        .read_to_end(&mut pem)
        .map_err(fail)?;
    if pem.len() as u64 > MAX_PEM_FILE_BYTES {
        return Err(format!(
            "{} is larger than {} MiB: not a PEM file of certificates or a key",
            path.display(),
            MAX_PEM_FILE_BYTES >> 20
        ));
    }
    Ok(pem)
}

/// The largest PEM file read (16 MiB: a system's whole CA bundle is well under 1 MiB).
const MAX_PEM_FILE_BYTES: u64 = 16 << 20;

/// What a file looks like from outside (device, inode, size, modification and change times),
/// to tell cheaply whether it may have changed since it was last read. A rename over it (as
/// Kubernetes does when it updates a mounted secret) changes the inode; an edit in place, the
/// times or size. `None`: the file cannot be examined now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp(Option<(u64, u64, u64, i64, i64, i64, i64)>);

impl FileStamp {
    /// The stamp of `path` now (following symbolic links, as reading it does).
    pub(crate) fn of(path: &Path) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self(std::fs::metadata(path).ok().map(|m| {
            (
                m.dev(),
                m.ino(),
                m.size(),
                m.mtime(),
                m.mtime_nsec(),
                m.ctime(),
                m.ctime_nsec(),
            )
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_files_that_are_no_regular_files_or_huge_are_refused_at_once() {
        let error = read_pem_file(Path::new("/dev/zero")).unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
        let error = read_pem_file(&fifo).unwrap_err();
        assert!(error.contains("not a regular file"), "{error}");
        let huge = dir.path().join("huge.pem");
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(MAX_PEM_FILE_BYTES + 1)
            .unwrap();
        let error = read_pem_file(&huge).unwrap_err();
        assert!(error.contains("larger than 16 MiB"), "{error}");
        let missing = read_pem_file(&dir.path().join("none.pem")).unwrap_err();
        assert!(missing.contains("none.pem"), "{missing}");
    }
}
