//! Ownership of a Unix socket file: a restarted worker may take over a dead worker's socket
//! path, never a live one's, and at exit removes only the socket file it made itself.

use std::path::{Path, PathBuf};

/// The Unix socket a worker bound and its file identity (see [`file_identity`]).
pub(super) type BoundSocket = (PathBuf, (u64, u64));

/// Removes a leftover socket file so a restarted worker can bind the same path: only a socket
/// (never another kind of file) and only a dead one (nobody accepts on it). A live worker's
/// socket is left alone, and binding then fails with "address in use", as TCP does.
pub(super) fn remove_stale_socket(path: &Path) {
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
pub(super) fn file_identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path)
        .ok()
        .map(|m| (m.dev(), m.ino()))
}
