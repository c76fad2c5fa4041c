//! `wool_connection`: `wool_connect`, `wool_idle`, `wool_stop`, `wool_free`.

use std::ffi::c_char;
use std::sync::Arc;

use super::credentials::wool_credentials;
use super::handles::{self, Handle};
use super::{
    ffi_panic_boundary, free_handle, runtime, try_grace, try_mut, try_str, try_timeout, wool_status,
};
use libwool::connection::{ChannelOptions, Error, WorkerConnection};

/// A lazy handle to one worker, like Wool's WorkerConnection. Opaque; made by wool_connect,
/// released by wool_free. One handle may be used by many threads at once, and freed while they
/// are in calls on it (see docs/C-API.md, "Handles").
#[allow(non_camel_case_types)]
pub struct wool_connection {
    /// Shared with the calls in flight on the library's runtime.
    inner: Arc<WorkerConnection>,
}

impl Handle for wool_connection {
    const NAME: &'static str = "connection";
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
/// `target` must be NULL or NUL-terminated; `out` NULL or writable. `credentials` is NULL or a
/// wool_credentials handle (a freed one is refused).
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
    let credentials = wool_credentials::copy_of(credentials)?;
    let out = unsafe { try_mut(out, "out") }?;
    let inner = WorkerConnection::with_options(target, credentials, options.unwrap_or_default())?;
    handles::set_handle(out, wool_connection::new(inner))
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
/// A freed `conn`, or a handle of another type, is refused (WOOL_STATUS_INVALID_ARGUMENT);
/// freeing `conn` while this call runs lets it finish.
///
/// # Safety
/// `out_seconds` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_idle(
    conn: *const wool_connection,
    timeout_seconds: f64,
    out_seconds: *mut f64,
) -> wool_status {
    ffi_panic_boundary!("wool_idle", {
        let conn = handles::get(conn, "conn")?.shared();
        // SAFETY: the caller's contract above.
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
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_stop(
    conn: *const wool_connection,
    grace_seconds: f64,
    timeout_seconds: f64,
) -> wool_status {
    ffi_panic_boundary!("wool_stop", {
        let conn = handles::get(conn, "conn")?.shared();
        let grace = try_grace(grace_seconds)?;
        let timeout = try_timeout(timeout_seconds)?;
        runtime::block_on_call(async move { conn.stop(grace, timeout).await })??;
        Ok(())
    })
}

/// Releases the handle (its share of the pooled channel). NULL is a no-op. Any thread may free
/// it at any time: calls running on it on other threads finish normally, and the connection
/// goes away after the last of them. Afterwards the handle is refused by every call
/// (WOOL_STATUS_INVALID_ARGUMENT, "connection handle already freed"); a second wool_free does
/// nothing but set the thread's last error, as does a handle of another type.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles"): `conn` is looked up, never read.
#[no_mangle]
pub unsafe extern "C" fn wool_free(conn: *mut wool_connection) {
    ffi_panic_boundary!("wool_free", {
        // Inside the runtime's context the pool can schedule the eviction of a channel nobody
        // uses any more; without a runtime (no call was ever made) there is nothing to evict.
        let _context = runtime::existing_runtime().map(|runtime| runtime.enter());
        free_handle("wool_free", conn, "conn");
    })
}
