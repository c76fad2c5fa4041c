//! The C ABI: `include/wool.h`, generated from this module by cbindgen (see `cbindgen.toml` and
//! `tests/integration/header.rs`). The contract is docs/C-API.md; every name here is part of it.
//!
//! One file per C-visible type or family of calls:
//! - [`status`]: `wool_status`, what every fallible call returns, and `wool_status_name`.
//! - [`connection`]: `wool_connection` (`wool_connect`, `wool_idle`, `wool_stop`, `wool_free`).
//! - [`credentials`]: `wool_credentials` (from PEM, from files, reloadable, with peers).
//! - [`options`]: `wool_channel_options` and `wool_connect_with_options`.
//! - [`queue`]: `wool_queue`, the calls started without blocking (`wool_idle_start`,
//!   `wool_stop_start`), `wool_cancel`, `wool_queue_next`, `wool_queue_next_sized`.
//! - [`batch`]: `wool_idle_start_batch`, many idle polls started into a queue in one call.
//! - [`discovery`]: `wool_discover`, `wool_discover_admitted`, `wool_discover_dns`,
//!   `wool_watch_*`, `wool_connect_worker`, `wool_worker_list_*`.
//! - [`sweep`]: `wool_idle_many` (a sweep) and `wool_idle_many_start` (a sweep started without
//!   blocking), on `libwool::fleet::sweep`.
//! - [`retire`]: `wool_retire_idle` and its policy and decision types, on
//!   `libwool::fleet::retire`.
//! - [`last_error`]: the calling thread's most recent failure (like `errno`):
//!   `wool_last_error`, `wool_last_rpc_code`.
//! - `runtime`: the one library-wide tokio runtime that blocking calls run on (not C-visible).
//! - `handles`: the handle table behind every opaque pointer (not C-visible): a freed handle
//!   or one of another type is an invalid argument, never a wild pointer.
//!
//! Plus the boundary itself, written once in this file:
//! - `ffi_panic_boundary!` wraps every exported body: it catches panics and turns the body's
//!   outcome into the C return value (a failed `Result` also becomes the thread's last error).
//! - the `try_*` helpers below check pointers, text and numbers the same way everywhere.

pub mod batch;
pub mod connection;
pub mod credentials;
pub mod discovery;
mod handles;
pub mod last_error;
pub mod options;
pub mod queue;
pub mod retire;
mod runtime;
pub mod status;
pub mod sweep;

use std::any::Any;
use std::ffi::{c_char, CStr};
use std::time::Duration;

pub use batch::{wool_idle_start_batch, wool_idle_start_entry, WOOL_IDLE_START_BATCH_MAX};
pub use connection::{wool_connect, wool_connection, wool_free, wool_idle, wool_stop};
pub use credentials::{
    wool_credentials, wool_credentials_free, wool_credentials_from_files,
    wool_credentials_from_files_reloadable, wool_credentials_from_pem,
};
pub use discovery::{
    wool_connect_worker, wool_discover, wool_discover_dns, wool_watch, wool_watch_free,
    wool_watch_new, wool_watch_next, wool_worker_info, wool_worker_list, wool_worker_list_count,
    wool_worker_list_free, wool_worker_list_get, WOOL_DISCOVERY_DNS, WOOL_DISCOVERY_LAN,
    WOOL_DISCOVERY_LOCAL,
};
pub use last_error::{wool_last_error, wool_last_rpc_code};
use libwool::connection::Error;
use libwool::Grace;
pub use options::{
    wool_channel_options, wool_channel_options_free, wool_channel_options_new,
    wool_channel_options_set_connect_timeout, wool_channel_options_set_keepalive_interval,
    wool_channel_options_set_keepalive_timeout, wool_channel_options_set_keepalive_without_calls,
    wool_channel_options_set_max_concurrent_streams,
    wool_channel_options_set_max_pings_without_data,
    wool_channel_options_set_max_receive_message_bytes,
    wool_channel_options_set_max_send_message_bytes, wool_connect_with_options,
};
pub use queue::{
    wool_cancel, wool_completion, wool_completion_ex, wool_idle_start, wool_queue, wool_queue_fd,
    wool_queue_free, wool_queue_new, wool_queue_next, wool_queue_next_sized, wool_stop_start,
    WOOL_COMPLETION_KIND_IDLE, WOOL_COMPLETION_KIND_STOP, WOOL_COMPLETION_KIND_SWEEP,
    WOOL_COMPLETION_MESSAGE_BYTES,
};
pub use retire::{
    wool_retire_decision, wool_retire_idle, wool_retire_policy, wool_retire_reason_name,
};
pub use status::{wool_status, wool_status_name};
pub use sweep::{wool_idle_many, wool_idle_many_start, wool_poll_result};

/// Turns a timeout in seconds (as C, Go and Python hosts pass it) into a call deadline:
/// positive finite → that long; `+∞` → no deadline (`None`).
///
/// Errors: [`ErrorKind::InvalidArgument`](libwool::ErrorKind::InvalidArgument) for 0, negative or NaN.
pub fn timeout_from_seconds(seconds: f64) -> Result<Option<Duration>, Error> {
    if seconds.is_nan() || seconds <= 0.0 {
        return Err(Error::invalid_argument(format!(
            "timeout must be positive seconds or infinity, got {seconds}"
        )));
    }
    if seconds == f64::INFINITY {
        return Ok(None);
    }
    Duration::try_from_secs_f64(seconds).map(Some).map_err(|_| {
        Error::invalid_argument(format!(
            "timeout of {seconds:.3e} s is too large; use infinity"
        ))
    })
}

/// Runs an exported function's body, catching any panic so that no unwinding crosses into C.
///
/// `ffi_panic_boundary! { "wool_name", { body } }`: the body's value is turned into the
/// function's C return value by [`Boundary`], chosen by that return type. A body of a function
/// returning [`wool_status`] is a `Result<(), Error>`, so `?` works inside it.
macro_rules! ffi_panic_boundary {
    ($function:expr, $body:block) => {
        $crate::run_boundary($function, || $body)
    };
}
pub(crate) use ffi_panic_boundary;

/// What an exported function returns to C, given its body's outcome or a caught panic.
pub(crate) trait Boundary: Sized {
    /// What the body of a function returning `Self` evaluates to.
    type Body;
    /// The C value for a body that returned; `function` names the entry point in messages.
    fn from_body(function: &'static str, body: Self::Body) -> Self;
    /// The C value after a caught panic (already recorded as the last error).
    fn after_panic() -> Self;
}

impl Boundary for wool_status {
    type Body = Result<(), Error>;

    fn from_body(function: &'static str, body: Self::Body) -> Self {
        match body {
            Ok(()) => wool_status::Ok,
            Err(error) => {
                last_error::record(function, &error);
                wool_status::from(error.kind())
            }
        }
    }

    fn after_panic() -> Self {
        wool_status::Panic
    }
}

/// `void` functions: nothing to report.
impl Boundary for () {
    type Body = ();

    fn from_body(_: &'static str, (): ()) -> Self {}

    fn after_panic() -> Self {}
}

/// Functions returning static text, which must never be NULL (after a panic: "").
impl Boundary for *const c_char {
    type Body = &'static CStr;

    fn from_body(_: &'static str, text: &'static CStr) -> Self {
        text.as_ptr()
    }

    fn after_panic() -> Self {
        c"".as_ptr()
    }
}

/// `wool_last_error`: a length.
impl Boundary for usize {
    type Body = usize;

    fn from_body(_: &'static str, length: usize) -> Self {
        length
    }

    fn after_panic() -> Self {
        0
    }
}

/// Functions returning a borrowed pointer into a handle (NULL after a panic).
impl<T> Boundary for *const T
where
    T: BorrowedFromHandle,
{
    type Body = *const T;

    fn from_body(_: &'static str, pointer: *const T) -> Self {
        pointer
    }

    fn after_panic() -> Self {
        std::ptr::null()
    }
}

/// Types handed to C as pointers into a handle that owns them (not text: that has its own rule).
pub(crate) trait BorrowedFromHandle {}
impl BorrowedFromHandle for discovery::wool_worker_info {}

/// `wool_last_rpc_code`: a code, or -1.
impl Boundary for i32 {
    type Body = i32;

    fn from_body(_: &'static str, code: i32) -> Self {
        code
    }

    fn after_panic() -> Self {
        -1
    }
}

/// The body of [`ffi_panic_boundary!`]. The closure's signature is inferred from the exported
/// function's return type `R`, which is why one macro serves every function.
pub(crate) fn run_boundary<R: Boundary>(
    function: &'static str,
    body: impl FnOnce() -> R::Body,
) -> R {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(body) => R::from_body(function, body),
        Err(payload) => {
            last_error::record_panic(function, &panic_message(payload.as_ref()));
            R::after_panic()
        }
    }
}

pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|text| text.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic with no message".to_string())
}

/// `ptr` as a shared reference; `what` names the parameter in the error.
///
/// # Safety
/// A non-NULL `ptr` must point to a live, properly aligned `T` for `'a`.
pub(crate) unsafe fn try_ref<'a, T>(ptr: *const T, what: &str) -> Result<&'a T, Error> {
    // SAFETY: the caller's contract; NULL is refused by `as_ref`.
    unsafe { ptr.as_ref() }.ok_or_else(|| null(what))
}

/// `ptr` as an exclusive reference, for out-parameters; `what` names the parameter.
///
/// # Safety
/// A non-NULL `ptr` must point to writable memory for a `T` that nothing else uses during `'a`.
pub(crate) unsafe fn try_mut<'a, T>(ptr: *mut T, what: &str) -> Result<&'a mut T, Error> {
    // SAFETY: the caller's contract; NULL is refused by `as_mut`.
    unsafe { ptr.as_mut() }.ok_or_else(|| null(what))
}

/// NUL-terminated UTF-8 text; NULL and non-UTF-8 are invalid arguments.
///
/// # Safety
/// A non-NULL `ptr` must point to a NUL-terminated string that lives for `'a`.
pub(crate) unsafe fn try_str<'a>(ptr: *const c_char, what: &str) -> Result<&'a str, Error> {
    // SAFETY: the caller's contract.
    unsafe { try_optional_str(ptr, what) }?.ok_or_else(|| null(what))
}

/// As [`try_str`], but NULL is allowed and gives `None`.
///
/// # Safety
/// As [`try_str`].
pub(crate) unsafe fn try_optional_str<'a>(
    ptr: *const c_char,
    what: &str,
) -> Result<Option<&'a str>, Error> {
    if ptr.is_null() {
        return Ok(None);
    }
    // SAFETY: non-NULL and NUL-terminated by the caller's contract.
    let text = unsafe { CStr::from_ptr(ptr) };
    text.to_str()
        .map(Some)
        .map_err(|e| Error::invalid_argument(format!("{what} is not valid UTF-8: {e}")))
}

/// A call deadline from seconds: positive finite = that long, `INFINITY` = none; 0, negative
/// and NaN are invalid arguments.
pub(crate) fn try_timeout(seconds: f64) -> Result<Option<Duration>, Error> {
    timeout_from_seconds(seconds)
}

/// A stop's grace from seconds: 0 = none, positive finite = that long, negative or `INFINITY`
/// = unbounded; NaN is an invalid argument (Wool's worker would read it as 0, cancelling work
/// the caller may have meant to keep).
pub(crate) fn try_grace(seconds: f64) -> Result<Grace, Error> {
    if seconds.is_nan() {
        return Err(Error::invalid_argument(
            "grace must be seconds (0, positive, negative or infinity), got NaN",
        ));
    }
    Ok(Grace::from_seconds(seconds))
}

/// Frees `handle` for the `void` free function `function` (the handle parameter named `what`):
/// a handle already freed, or of another type, is left alone and only sets the thread's last
/// error.
pub(crate) fn free_handle<T: handles::Handle>(function: &'static str, handle: *mut T, what: &str) {
    if let Err(error) = handles::free(handle, what) {
        last_error::record(function, &error);
    }
}

fn null(what: &str) -> Error {
    Error::invalid_argument(format!("{what} is NULL"))
}

/// The library's version as static NUL-terminated text, e.g. `"0.1.0"`. Never NULL.
#[no_mangle]
pub extern "C" fn wool_version() -> *const c_char {
    ffi_panic_boundary!("wool_version", {
        const VERSION: &CStr =
            match CStr::from_bytes_with_nul(concat!(env!("CARGO_PKG_VERSION"), "\0").as_bytes()) {
                Ok(version) => version,
                Err(_) => panic!("the package version holds a NUL"),
            };
        VERSION
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use libwool::ErrorKind;

    #[test]
    fn timeouts_in_seconds_follow_the_c_contract() {
        assert_eq!(
            timeout_from_seconds(1.5).unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(timeout_from_seconds(f64::INFINITY).unwrap(), None);
        for bad in [0.0, -0.0, -1.0, f64::NAN, f64::NEG_INFINITY] {
            assert_eq!(
                timeout_from_seconds(bad).unwrap_err().kind(),
                ErrorKind::InvalidArgument,
                "{bad}"
            );
        }
        assert_eq!(
            timeout_from_seconds(1e300).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }

    fn last_error() -> (String, i32) {
        let mut buf = [0 as c_char; 256];
        // SAFETY: `buf` has `buf.len()` writable bytes.
        unsafe { wool_last_error(buf.as_mut_ptr(), buf.len()) };
        // SAFETY: NUL-terminated by wool_last_error.
        let message = unsafe { CStr::from_ptr(buf.as_ptr()) };
        (message.to_string_lossy().into_owned(), wool_last_rpc_code())
    }

    #[test]
    fn a_panic_becomes_wool_status_panic_with_its_message() {
        std::thread::spawn(|| {
            let status: wool_status = run_boundary("wool_test", || panic!("boom"));
            assert_eq!(status, wool_status::Panic);
            let (message, code) = last_error();
            assert!(
                message.starts_with("wool_test: internal error"),
                "{message}"
            );
            assert!(message.ends_with("boom"), "{message}");
            assert_eq!(code, -1);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_panic_in_a_blocking_call_becomes_wool_status_panic_and_the_runtime_lives_on() {
        std::thread::spawn(|| {
            let status: wool_status = run_boundary("wool_test", || {
                runtime::block_on(async { panic!("inside the call") })?;
                Ok(())
            });
            assert_eq!(status, wool_status::Panic);
            assert!(
                last_error().0.contains("inside the call"),
                "{}",
                last_error().0
            );
            assert_eq!(
                runtime::block_on(async { 5 }).unwrap(),
                5,
                "the runtime still serves calls"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn void_and_text_functions_survive_panics_too() {
        run_boundary::<()>("wool_test", || panic!("void"));
        let text: *const c_char = run_boundary("wool_test", || panic!("text"));
        assert!(!text.is_null());
        let length: usize = run_boundary("wool_test", || panic!("length"));
        assert_eq!(length, 0);
        let code: i32 = run_boundary("wool_test", || panic!("code"));
        assert_eq!(code, -1);
    }

    #[test]
    fn failures_record_the_function_message_and_code() {
        std::thread::spawn(|| {
            let status: wool_status = run_boundary("wool_test", || {
                Err(Error::invalid_argument("what went wrong"))
            });
            assert_eq!(status, wool_status::InvalidArgument);
            assert_eq!(last_error(), ("wool_test: what went wrong".to_string(), -1));
            let ok: wool_status = run_boundary("wool_test", || Ok(()));
            assert_eq!(ok, wool_status::Ok);
            assert_eq!(
                last_error().0,
                "wool_test: what went wrong",
                "success keeps it"
            );
        })
        .join()
        .unwrap();
    }

    #[test]
    fn numbers_follow_the_c_contract() {
        assert!(try_timeout(0.0).is_err());
        assert!(try_timeout(-1.0).is_err());
        assert!(try_timeout(f64::NAN).is_err());
        assert_eq!(try_timeout(f64::INFINITY).unwrap(), None);
        assert_eq!(try_timeout(0.5).unwrap(), Some(Duration::from_millis(500)));
        assert!(try_grace(f64::NAN).is_err());
        assert_eq!(try_grace(0.0).unwrap(), Grace::None);
        assert_eq!(try_grace(-1.0).unwrap(), Grace::Unbounded);
        assert_eq!(try_grace(f64::INFINITY).unwrap(), Grace::Unbounded);
        assert_eq!(
            try_grace(2.5).unwrap(),
            Grace::Within(Duration::from_millis(2500))
        );
    }
}
