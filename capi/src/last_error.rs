//! The calling thread's most recent failure, like `errno`: `wool_last_error`,
//! `wool_last_rpc_code`.
//!
//! Only failures write it; a success leaves the previous failure in place, so a host may read it
//! after a later successful call (`errno` works the same way).

use std::cell::RefCell;
use std::ffi::c_char;

use super::ffi_panic_boundary;
use libwool::connection::Error;

/// One failure: its message and its gRPC code (`-1` when no RPC status was involved).
struct LastError {
    message: String,
    rpc_code: i32,
}

thread_local! {
    static LAST_ERROR: RefCell<Option<LastError>> = const { RefCell::new(None) };
}

/// Records `error`, raised by the entry point `function`, as this thread's last error.
pub(crate) fn record(function: &str, error: &Error) {
    let rpc_code = error.code().map_or(-1, |code| code as i32);
    store(format!("{function}: {}", error.message()), rpc_code);
}

/// Records a panic caught at the boundary of `function`.
pub(crate) fn record_panic(function: &str, message: &str) {
    store(panic_text(function, message), -1);
}

/// The message of a panic caught in `function` (or a started call), as wool_last_error and a
/// WOOL_STATUS_PANIC completion give it.
pub(crate) fn panic_text(function: &str, message: &str) -> String {
    format!("{function}: internal error (a bug in libwool): {message}")
}

fn store(message: String, rpc_code: i32) {
    // `try_with`: a thread being torn down has no last error to keep; never panic for that.
    let _ = LAST_ERROR.try_with(|last| *last.borrow_mut() = Some(LastError { message, rpc_code }));
}

/// Copies the message of the calling thread's most recent failure into `buf`: at most `len`
/// bytes including a terminating NUL, truncated to fit (on a UTF-8 character boundary).
/// Returns the message's full length in bytes without the NUL, so a return value >= `len`
/// means it was truncated; 0 when this thread has had no failure. `buf` may be NULL when `len`
/// is 0 (to ask for the length alone).
///
/// # Safety
/// `buf` must point to `len` writable bytes (or be NULL with `len` 0).
#[no_mangle]
pub unsafe extern "C" fn wool_last_error(buf: *mut c_char, len: usize) -> usize {
    ffi_panic_boundary!("wool_last_error", {
        let message = LAST_ERROR
            .try_with(|last| last.borrow().as_ref().map(|error| error.message.clone()))
            .ok()
            .flatten()
            .unwrap_or_default();
        if len > 0 && !buf.is_null() {
            let copied = floor_char_boundary(&message, len - 1);
            // SAFETY: `buf` has `len` writable bytes (the caller's contract) and
            // `copied + 1 <= len`; `message` is our own allocation, so they cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(message.as_ptr(), buf.cast::<u8>(), copied);
                *buf.add(copied) = 0;
            }
        }
        message.len()
    })
}

/// The gRPC status code (0..16) of the calling thread's most recent failure; -1 when there was
/// none, or when that failure involved no RPC status (an invalid argument, a caught panic).
#[no_mangle]
pub extern "C" fn wool_last_rpc_code() -> i32 {
    ffi_panic_boundary!("wool_last_rpc_code", {
        LAST_ERROR
            .try_with(|last| last.borrow().as_ref().map_or(-1, |error| error.rpc_code))
            .unwrap_or(-1)
    })
}

/// Copies `text` into a fixed C buffer, NUL-terminated, truncated at a character boundary
/// (the `message` fields of wool_completion and wool_retire_decision). The buffer must hold
/// at least one byte.
pub(crate) fn fill_message(buffer: &mut [c_char], text: &str) {
    let length = floor_char_boundary(text, buffer.len() - 1);
    for (slot, byte) in buffer.iter_mut().zip(&text.as_bytes()[..length]) {
        *slot = *byte as c_char;
    }
    buffer[length] = 0;
}

/// The largest `n <= limit` at which `text` can be cut without splitting a character.
pub(crate) fn floor_char_boundary(text: &str, limit: usize) -> usize {
    if limit >= text.len() {
        return text.len();
    }
    (0..=limit)
        .rev()
        .find(|&n| text.is_char_boundary(n))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_never_splits_a_character() {
        let text = "ab\u{e9}c"; // é is two bytes: a b [c3 a9] c
        assert_eq!(floor_char_boundary(text, 0), 0);
        assert_eq!(floor_char_boundary(text, 2), 2);
        assert_eq!(floor_char_boundary(text, 3), 2);
        assert_eq!(floor_char_boundary(text, 4), 4);
        assert_eq!(floor_char_boundary(text, 99), 5);
    }

    #[test]
    fn messages_copy_truncated_and_report_their_full_length() {
        std::thread::spawn(|| {
            assert_eq!(unsafe { wool_last_error(std::ptr::null_mut(), 0) }, 0);
            assert_eq!(wool_last_rpc_code(), -1);
            record("wool_test", &Error::invalid_argument("bad"));
            let full = "wool_test: bad";
            assert_eq!(
                unsafe { wool_last_error(std::ptr::null_mut(), 0) },
                full.len()
            );
            let mut buf = [0x7f as c_char; 6];
            assert_eq!(unsafe { wool_last_error(buf.as_mut_ptr(), 6) }, full.len());
            let copied: Vec<u8> = buf.iter().map(|&b| b as u8).collect();
            assert_eq!(&copied, b"wool_\0");
            assert_eq!(wool_last_rpc_code(), -1);
        })
        .join()
        .unwrap();
    }
}
