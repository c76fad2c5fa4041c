//! `wool_connection`: `wool_connect`, `wool_idle`, `wool_stop`, `wool_free`.

use std::ffi::c_char;
use std::sync::Arc;

use super::credentials::wool_credentials;
use super::{
    ffi_panic_boundary, free_boxed, runtime, set_boxed, try_grace, try_mut, try_ref, try_str,
    try_timeout, wool_status,
};
use libwool::connection::{ChannelOptions, Error, WorkerConnection};

/// A lazy handle to one worker, like Wool's WorkerConnection. Opaque; made by wool_connect,
/// released by wool_free. One handle may be used by many threads at once.
#[allow(non_camel_case_types)]
pub struct wool_connection {
    /// Shared with the calls in flight on the library's runtime.
    inner: Arc<WorkerConnection>,
}

impl wool_connection {
    pub(crate) fn new(inner: WorkerConnection) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The connection, shared with a call that may outlive this handle.
    pub(crate) fn shared(&self) -> Arc<WorkerConnection> {
        Arc::clone(&self.inner)
    }
}

/// Makes a handle to the worker at `target` and writes it to `*out`, with Wool's default
/// channel options (see wool_channel_options_new; wool_connect_with_options takes others). No
/// I/O happens here: a worker that cannot be reached shows up on the first wool_idle or
/// wool_stop as WOOL_STATUS_TRANSIENT. Handles with equal (target, credentials, options) share
/// one pooled HTTP/2 channel.
///
/// - `target`: NUL-terminated UTF-8: `host:port`, `dns:host:port`, `dns:///host:port`,
///   `ipv4:address:port`, `ipv6:[address]:port`, `[v6address]:port` or `unix:path`.
///   Ports are 1-65535.
/// - `credentials`: TLS credentials (the handle keeps its own copy); NULL means plaintext.
/// - `out`: receives the handle on WOOL_STATUS_OK; release it with wool_free.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `target` or `out` is NULL, or `target` is not
/// UTF-8 or not a valid target (empty, no port, port out of range, unknown scheme).
///
/// # Safety
/// `target` must be NULL or NUL-terminated; `credentials` NULL or a live wool_credentials;
/// `out` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_connect(
    target: *const c_char,
    credentials: *const wool_credentials,
    out: *mut *mut wool_connection,
) -> wool_status {
    ffi_panic_boundary!("wool_connect", {
        // SAFETY: the caller's contract above.
        unsafe { connect(target, credentials, None, out) }
    })
}

/// The body of wool_connect and wool_connect_with_options (`options` None = Wool's defaults).
///
/// # Safety
/// As wool_connect.
pub(crate) unsafe fn connect(
    target: *const c_char,
    credentials: *const wool_credentials,
    options: Option<ChannelOptions>,
    out: *mut *mut wool_connection,
) -> Result<(), Error> {
    // SAFETY (all three): the caller's contract.
    let target = unsafe { try_str(target, "target") }?;
    let credentials = unsafe { credentials.as_ref() }.map(|c| c.inner.clone());
    let out = unsafe { try_mut(out, "out") }?;
    let inner = WorkerConnection::with_options(target, credentials, options.unwrap_or_default())?;
    set_boxed(out, wool_connection::new(inner));
    Ok(())
}

/// Asks the worker how many seconds it has been continuously idle (exactly 0.0 while any task
/// is in flight) and writes them to `*out_seconds` on WOOL_STATUS_OK. Blocks the calling thread.
///
/// `timeout_seconds`: positive finite = the call's deadline; INFINITY = no deadline;
/// 0, negative or NaN = WOOL_STATUS_INVALID_ARGUMENT.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT (NULL `conn` or `out_seconds`, bad timeout),
/// WOOL_STATUS_IDLE_UNAVAILABLE (the worker predates the idle RPC; gRPC code 12),
/// WOOL_STATUS_TRANSIENT (unreachable, shutting down, or the deadline passed),
/// WOOL_STATUS_HANDSHAKE (TLS failure) or WOOL_STATUS_RPC_ERROR (any other gRPC failure).
///
/// # Safety
/// `conn` must be NULL or a live handle from wool_connect; `out_seconds` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_idle(
    conn: *const wool_connection,
    timeout_seconds: f64,
    out_seconds: *mut f64,
) -> wool_status {
    ffi_panic_boundary!("wool_idle", {
        // SAFETY (both): the caller's contract above.
        let conn = Arc::clone(&unsafe { try_ref(conn, "conn") }?.inner);
        let out = unsafe { try_mut(out_seconds, "out_seconds") }?;
        let timeout = try_timeout(timeout_seconds)?;
        *out = runtime::block_on_call(async move { conn.idle(timeout).await })??;
        Ok(())
    })
}

/// Stops (retires) the worker: it refuses new tasks, lets in-flight ones run for the grace,
/// cancels the rest, and answers once drained. Blocks the calling thread until that answer.
///
/// `grace_seconds`: 0 = cancel in-flight work at once; positive finite = let it run that long
/// first; negative or INFINITY = wait for it however long; NaN = WOOL_STATUS_INVALID_ARGUMENT.
/// `timeout_seconds`: as for wool_idle; to see the answer it must exceed the grace.
///
/// Returns as wool_idle, except that a worker without the stop RPC gives WOOL_STATUS_RPC_ERROR.
///
/// # Safety
/// `conn` must be NULL or a live handle from wool_connect.
#[no_mangle]
pub unsafe extern "C" fn wool_stop(
    conn: *const wool_connection,
    grace_seconds: f64,
    timeout_seconds: f64,
) -> wool_status {
    ffi_panic_boundary!("wool_stop", {
        // SAFETY: the caller's contract above.
        let conn = Arc::clone(&unsafe { try_ref(conn, "conn") }?.inner);
        let grace = try_grace(grace_seconds)?;
        let timeout = try_timeout(timeout_seconds)?;
        runtime::block_on_call(async move { conn.stop(grace, timeout).await })??;
        Ok(())
    })
}

/// Releases the handle (its share of the pooled channel). NULL is a no-op. Call it once, after
/// every other call on the handle has returned.
///
/// # Safety
/// `conn` must be NULL or a handle from wool_connect not yet freed; it is invalid afterwards.
#[no_mangle]
pub unsafe extern "C" fn wool_free(conn: *mut wool_connection) {
    ffi_panic_boundary!("wool_free", {
        // Inside the runtime's context the pool can schedule the eviction of a channel nobody
        // uses any more; without a runtime (no call was ever made) there is nothing to evict.
        let _context = runtime::existing_runtime().map(|runtime| runtime.enter());
        // SAFETY: the caller's contract above.
        unsafe { free_boxed(conn) }
    })
}
