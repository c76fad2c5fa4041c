//! `wool_status`: what every fallible C call returns, and `wool_status_name`.

use std::ffi::{c_char, c_int, CStr};

use super::ffi_panic_boundary;
use libwool::connection::ErrorKind;

/// The outcome of a call. Values are stable: C programs and other bindings compare against them.
/// On any failure the calling thread's last error holds the message and the gRPC code (see
/// wool_last_error and wool_last_rpc_code).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum wool_status {
    /// The call succeeded.
    Ok = 0,
    /// The caller's mistake, detected before any I/O: NULL where not allowed, non-UTF-8 text,
    /// a bad target, bad PEM, an unreadable file, or a bad number (timeout, grace, a channel
    /// option out of range).
    InvalidArgument = 1,
    /// The worker predates the idle RPC (gRPC UNIMPLEMENTED): not a health fault.
    IdleUnavailable = 2,
    /// The worker could not be reached in time or is shutting down: UNAVAILABLE,
    /// DEADLINE_EXCEEDED (including the local deadline) or RESOURCE_EXHAUSTED. Skip it, keep it.
    Transient = 3,
    /// A TLS, mutual-TLS or identity failure seen by this client.
    Handshake = 4,
    /// Any other gRPC failure.
    RpcError = 5,
    /// A bug inside the library, caught at the boundary; the last error holds the panic message.
    Panic = 6,
    /// The call was cancelled by the caller (wool_cancel) before it completed; its HTTP/2
    /// stream was reset.
    Cancelled = 7,
}

impl wool_status {
    /// The C name, e.g. `"WOOL_STATUS_TRANSIENT"`.
    pub fn name(self) -> &'static CStr {
        match self {
            wool_status::Ok => c"WOOL_STATUS_OK",
            wool_status::InvalidArgument => c"WOOL_STATUS_INVALID_ARGUMENT",
            wool_status::IdleUnavailable => c"WOOL_STATUS_IDLE_UNAVAILABLE",
            wool_status::Transient => c"WOOL_STATUS_TRANSIENT",
            wool_status::Handshake => c"WOOL_STATUS_HANDSHAKE",
            wool_status::RpcError => c"WOOL_STATUS_RPC_ERROR",
            wool_status::Panic => c"WOOL_STATUS_PANIC",
            wool_status::Cancelled => c"WOOL_STATUS_CANCELLED",
        }
    }

    /// The status with this value, if there is one.
    pub fn from_value(value: c_int) -> Option<Self> {
        Some(match value {
            0 => wool_status::Ok,
            1 => wool_status::InvalidArgument,
            2 => wool_status::IdleUnavailable,
            3 => wool_status::Transient,
            4 => wool_status::Handshake,
            5 => wool_status::RpcError,
            6 => wool_status::Panic,
            7 => wool_status::Cancelled,
            _ => return None,
        })
    }
}

impl From<ErrorKind> for wool_status {
    fn from(kind: ErrorKind) -> Self {
        match kind {
            ErrorKind::InvalidArgument => wool_status::InvalidArgument,
            ErrorKind::IdleUnavailable => wool_status::IdleUnavailable,
            ErrorKind::Transient => wool_status::Transient,
            ErrorKind::Handshake => wool_status::Handshake,
            ErrorKind::Cancelled => wool_status::Cancelled,
            // No C call dispatches routines; should one ever fail that way, it is an RPC error.
            ErrorKind::Rpc | ErrorKind::Routine => wool_status::RpcError,
            // `ErrorKind` is non-exhaustive: a kind this ABI has no status for yet is an RPC
            // error to C until it gets one.
            _ => wool_status::RpcError,
        }
    }
}

/// Stands for `wool_status` in the prototype of wool_status_name: the header shows
/// `wool_status` (cbindgen.toml renames this type and does not emit it), while Rust receives a
/// plain integer, because C may pass any value and an out-of-range value in a Rust enum is
/// undefined behaviour.
#[allow(non_camel_case_types)]
pub type wool_status_value = c_int;

/// The name of `status` as static NUL-terminated text, e.g. "WOOL_STATUS_TRANSIENT"; never
/// NULL. A value that is no wool_status gives "WOOL_STATUS_UNKNOWN".
#[no_mangle]
pub extern "C" fn wool_status_name(status: wool_status_value) -> *const c_char {
    ffi_panic_boundary!("wool_status_name", {
        wool_status::from_value(status).map_or(c"WOOL_STATUS_UNKNOWN", wool_status::name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_the_contracts() {
        for value in 0..=7 {
            let status = wool_status::from_value(value).unwrap();
            assert_eq!(status as c_int, value);
        }
        assert_eq!(wool_status::from_value(8), None);
        assert_eq!(wool_status::from_value(-1), None);
    }

    #[test]
    fn names_are_static_and_never_null() {
        let name = |value| unsafe { CStr::from_ptr(wool_status_name(value)) };
        assert_eq!(name(3).to_str().unwrap(), "WOOL_STATUS_TRANSIENT");
        assert_eq!(name(99).to_str().unwrap(), "WOOL_STATUS_UNKNOWN");
        assert_eq!(name(c_int::MIN).to_str().unwrap(), "WOOL_STATUS_UNKNOWN");
    }
}
