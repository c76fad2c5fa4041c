//! `wool_channel_options`: channel settings as Wool's `ChannelOptions`, and
//! `wool_connect_with_options`.
//!
//! Each setter checks its value and changes nothing when it is refused, so an options object is
//! always valid: a refused value leaves the previous one (a default, or what was set before).

use std::ffi::c_char;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use super::connection::wool_connection;
use super::credentials::wool_credentials;
use super::handles::{self, Handle};
use super::{ffi_panic_boundary, free_handle, try_mut, wool_status};
use libwool::connection::{ChannelOptions, Error};

/// Channel settings for wool_connect_with_options, as Wool's ChannelOptions. Opaque; made by
/// wool_channel_options_new with Wool's defaults, released by wool_channel_options_free. A
/// connection copies them, so they may be freed or changed right after. Connections share a
/// pooled channel only when their options are equal. Threads may change and read one at once:
/// each change is whole (a lock inside), and a connection copies the options as they are.
#[allow(non_camel_case_types)]
pub struct wool_channel_options {
    inner: Mutex<ChannelOptions>,
}

impl Handle for wool_channel_options {
    const NAME: &'static str = "channel options";
}

impl wool_channel_options {
    /// A copy of the options as they are now.
    pub(crate) fn get(&self) -> ChannelOptions {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The options behind the optional handle `options` (NULL: none), copied.
    ///
    /// Errors: InvalidArgument for a freed handle or one of another type.
    pub(crate) fn copy_of(options: *const Self) -> Result<Option<ChannelOptions>, Error> {
        Ok(handles::get_optional(options, "options")?.map(|options| options.get()))
    }
}

/// Makes channel options holding Wool's defaults: 100 MiB message limits each way, keepalive
/// PINGs every 30 s with 30 s to answer, also while no call is open, at most 2 PINGs without a
/// call in between, 100 concurrent streams, a 20 s connect timeout.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `out` is NULL.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_new(
    out: *mut *mut wool_channel_options,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_new", {
        // SAFETY: the caller's contract above.
        let out = unsafe { try_mut(out, "out") }?;
        handles::set_handle(
            out,
            wool_channel_options {
                inner: Mutex::new(ChannelOptions::default()),
            },
        )
    })
}

/// Releases channel options. NULL is a no-op; a second free (or a handle of another type) does
/// nothing but set the thread's last error.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_free(options: *mut wool_channel_options) {
    ffi_panic_boundary!("wool_channel_options_free", {
        free_handle("wool_channel_options_free", options, "options");
    })
}

/// Applies `change` to a copy of the options, checks the copy, and keeps it only if valid.
///
/// # Safety
/// None beyond the handle rules: `options` is looked up, never read.
unsafe fn change(
    options: *mut wool_channel_options,
    change: impl FnOnce(&mut ChannelOptions) -> Result<(), Error>,
) -> Result<(), Error> {
    let options = handles::get(options.cast_const(), "options")?;
    let mut current = options.inner.lock().unwrap_or_else(PoisonError::into_inner);
    let mut changed = current.clone();
    change(&mut changed)?;
    changed.validate()?;
    *current = changed;
    Ok(())
}

/// Seconds as a duration: positive finite = that long, INFINITY = `None` when `infinity_means`
/// says what it means; 0, negative and NaN are refused naming `option`.
fn seconds(
    option: &str,
    value: f64,
    infinity_means: Option<&str>,
) -> Result<Option<Duration>, Error> {
    if value == f64::INFINITY {
        if infinity_means.is_some() {
            return Ok(None);
        }
    } else if value > 0.0 {
        if let Ok(duration) = Duration::try_from_secs_f64(value) {
            return Ok(Some(duration));
        }
    }
    let infinity = infinity_means.map_or(String::new(), |meaning| {
        format!(", or INFINITY for {meaning}")
    });
    Err(Error::invalid_argument(format!(
        "channel option {option} must be positive finite seconds{infinity}, got {value}"
    )))
}

/// Sets the largest message received, in bytes (Wool's max_receive_message_length; default
/// 100 MiB). 1 to 4294967295; a larger answer fails its call with WOOL_STATUS_TRANSIENT
/// (gRPC RESOURCE_EXHAUSTED).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options` or a value out of range.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_max_receive_message_bytes(
    options: *mut wool_channel_options,
    bytes: usize,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_max_receive_message_bytes", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.max_receive_message_bytes = bytes;
                Ok(())
            })
        }
    })
}

/// Sets the largest message sent, in bytes (Wool's max_send_message_length; default 100 MiB).
/// 1 to 4294967295.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options` or a value out of range.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_max_send_message_bytes(
    options: *mut wool_channel_options,
    bytes: usize,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_max_send_message_bytes", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.max_send_message_bytes = bytes;
                Ok(())
            })
        }
    })
}

/// Sets how long after the previous keepalive PING was answered the next one goes out (Wool's
/// keepalive_time_ms; default 30 s). At least 0.001; INFINITY turns keepalive off (a call with
/// no deadline to a frozen worker then blocks for ever).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options`, 0, negative, NaN or below 1 ms.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_keepalive_interval(
    options: *mut wool_channel_options,
    seconds_between_pings: f64,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_keepalive_interval", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.keepalive_interval = seconds(
                    "keepalive_interval",
                    seconds_between_pings,
                    Some("no keepalive"),
                )?;
                Ok(())
            })
        }
    })
}

/// Sets how long a keepalive PING may go unanswered before the connection is declared dead
/// (Wool's keepalive_timeout_ms; default 30 s): its calls, including ones with no deadline,
/// then end with WOOL_STATUS_TRANSIENT. At least 0.001, finite.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options`, 0, negative, NaN, INFINITY or
/// below 1 ms.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_keepalive_timeout(
    options: *mut wool_channel_options,
    seconds_to_answer: f64,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_keepalive_timeout", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.keepalive_timeout = seconds("keepalive_timeout", seconds_to_answer, None)?
                    .expect("finite seconds give a duration");
                Ok(())
            })
        }
    })
}

/// Sets whether keepalive PINGs go out while no call is open (Wool's
/// keepalive_permit_without_calls; default true).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options`.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_keepalive_without_calls(
    options: *mut wool_channel_options,
    permit: bool,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_keepalive_without_calls", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.keepalive_without_calls = permit;
                Ok(())
            })
        }
    })
}

/// Sets the most keepalive PINGs sent with no call started in between (Wool's
/// max_pings_without_data; default 2); 0 = no limit.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options`.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_max_pings_without_data(
    options: *mut wool_channel_options,
    pings: u32,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_max_pings_without_data", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.max_pings_without_data = pings;
                Ok(())
            })
        }
    })
}

/// Sets the most calls opening streams on the channel at once (Wool's max_concurrent_streams;
/// default 100), 1 to 2147483647. More calls wait their turn rather than fail.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options` or a value out of range.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_max_concurrent_streams(
    options: *mut wool_channel_options,
    streams: usize,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_max_concurrent_streams", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.max_concurrent_streams = streams;
                Ok(())
            })
        }
    })
}

/// Sets the limit on establishing a connection (TCP, TLS, and the HTTP/2 handshake up to the
/// worker's first SETTINGS; default 20 s): a worker that accepts the connection and never
/// speaks HTTP/2 fails the call at this limit with WOOL_STATUS_TRANSIENT (code 14).
/// At least 0.001; INFINITY = only the call's deadline.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `options`, 0, negative, NaN or below 1 ms.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_channel_options_set_connect_timeout(
    options: *mut wool_channel_options,
    seconds_to_connect: f64,
) -> wool_status {
    ffi_panic_boundary!("wool_channel_options_set_connect_timeout", {
        // SAFETY: the caller's contract above.
        unsafe {
            change(options, |o| {
                o.connect_timeout =
                    seconds("connect_timeout", seconds_to_connect, Some("no limit"))?;
                Ok(())
            })
        }
    })
}

/// As wool_connect, with channel options (copied; NULL = Wool's defaults, as wool_connect).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT as wool_connect does.
///
/// # Safety
/// As wool_connect; `options` is NULL or a wool_channel_options handle.
#[no_mangle]
pub unsafe extern "C" fn wool_connect_with_options(
    target: *const c_char,
    credentials: *const wool_credentials,
    options: *const wool_channel_options,
    out: *mut *mut wool_connection,
) -> wool_status {
    ffi_panic_boundary!("wool_connect_with_options", {
        let options = wool_channel_options::copy_of(options)?;
        // SAFETY: the caller's contract above.
        unsafe { super::connection::connect(target, credentials, options, out) }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_value_leaves_the_options_as_they_were() {
        let mut options = std::ptr::null_mut();
        // SAFETY: valid pointers; freed once at the end.
        unsafe {
            assert_eq!(wool_channel_options_new(&mut options), wool_status::Ok);
            assert_eq!(
                wool_channel_options_set_keepalive_interval(options, 2.5),
                wool_status::Ok
            );
            assert_eq!(
                wool_channel_options_set_keepalive_interval(options, f64::NAN),
                wool_status::InvalidArgument
            );
            assert_eq!(
                wool_channel_options_set_max_concurrent_streams(options, 0),
                wool_status::InvalidArgument
            );
            let kept = handles::get(options, "options").unwrap().get();
            assert_eq!(kept.keepalive_interval, Some(Duration::from_millis(2500)));
            assert_eq!(kept.max_concurrent_streams, 100);
            assert_eq!(
                wool_channel_options_set_keepalive_interval(options, f64::INFINITY),
                wool_status::Ok
            );
            assert_eq!(
                handles::get(options, "options")
                    .unwrap()
                    .get()
                    .keepalive_interval,
                None
            );
            wool_channel_options_free(options);
        }
    }
}
