//! The TLS files a fleet's metadata names: each checked to be a readable regular file inside
//! the scaler's TLS files directory, then read as reloadable credentials; every refusal gives
//! the caller one message, the log the cause.

use std::path::Path;

use crate::connection::{Error, WorkerCredentials};
use crate::scaler::metadata::TlsFiles;

/// Credentials from the files `tls` names, each checked first by [`check_tls_file`].
pub(super) fn tls_credentials(
    tls: &TlsFiles,
    dir: Option<&Path>,
) -> Result<WorkerCredentials, Error> {
    check_tls_file("workerTlsCa", &tls.ca, dir)?;
    if let Some((cert, key)) = &tls.client {
        check_tls_file("workerTlsCert", cert, dir)?;
        check_tls_file("workerTlsKey", key, dir)?;
    }
    let (cert, key) = match &tls.client {
        Some((cert, key)) => (Some(cert.as_path()), Some(key.as_path())),
        None => (None, None),
    };
    // Read by the paths as given (not their canonical forms), so that a Secret volume's
    // symbolic links swapped at a rotation are followed afresh.
    WorkerCredentials::from_files_reloadable(
        &tls.ca,
        key,
        cert,
        tls.client.is_some(),
        tls.server_name.as_deref(),
    )
    .map_err(|error| {
        tracing::warn!(ca = %tls.ca.display(), %error,
            "refusing TLS files named by scalerMetadata");
        unusable_tls_files(dir)
    })
}

/// The one answer to metadata naming TLS files that cannot be used, whichever file and
/// whatever the cause (missing, unreadable, not a regular file, outside `dir`, not PEM TLS
/// material): it names neither the key nor the path, so that it tells no one which files exist.
fn unusable_tls_files(dir: Option<&Path>) -> Error {
    let dir = dir.map_or_else(String::new, |dir| format!(" in {}", dir.display()));
    Error::invalid_argument(format!(
        "workerTlsCa, workerTlsCert, workerTlsKey cannot be used: each must name a readable \
         regular file of PEM TLS material{dir} (the scaler's log says which and why)"
    ))
}

/// Checks that `path` (named by metadata `key`) is a regular file the scaler can open, inside
/// `dir` once symbolic links and `..` are resolved. Every refusal gives the caller the same
/// message ([`unusable_tls_files`]), whatever the cause; the log says the cause.
fn check_tls_file(key: &str, path: &Path, dir: Option<&Path>) -> Result<(), Error> {
    let Some(dir) = dir else {
        return Err(Error::invalid_argument(format!(
            "{key}: this scaler takes no TLS files from scalerMetadata (it was started without \
             a TLS files directory, wool-scaler's --tls-files-dir)"
        )));
    };
    let refuse = |why: &dyn std::fmt::Display| {
        tracing::warn!(key, path = %path.display(), dir = %dir.display(),
            "refusing a TLS file named by scalerMetadata: {why}");
        unusable_tls_files(Some(dir))
    };
    let canonical = std::fs::canonicalize(path).map_err(|e| refuse(&e))?;
    if !canonical.starts_with(dir) {
        return Err(refuse(&format_args!(
            "it resolves to {}, outside the directory",
            canonical.display()
        )));
    }
    let metadata = std::fs::metadata(&canonical).map_err(|e| refuse(&e))?;
    if !metadata.is_file() {
        return Err(refuse(&"not a regular file"));
    }
    // Opened (not read: a regular file cannot block) to learn whether it is readable.
    std::fs::File::open(&canonical).map_err(|e| refuse(&e))?;
    Ok(())
}
