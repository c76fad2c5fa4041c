//! `wool_idle_many`: one blocking call that polls many workers, with one deadline and a bound
//! on calls in flight, for C hosts that want a sweep in one line.

use std::time::Instant;

use futures_util::StreamExt;

use super::connection::wool_connection;
use super::{ffi_panic_boundary, runtime, try_timeout, wool_status};
use crate::connection::Error;

/// Polls the workers behind `conns[0..count]` (as wool_idle), at most `max_in_flight` at once,
/// all within one deadline of `timeout_seconds` (INFINITY = none), blocking the calling thread
/// until every poll has finished. Writes per handle, in `conns` order: `out_statuses[i]` (the
/// status wool_idle would have given; a NULL handle gives WOOL_STATUS_INVALID_ARGUMENT),
/// `out_seconds[i]` (the idle seconds on WOOL_STATUS_OK, NAN otherwise) and, when `out_codes`
/// is not NULL, `out_codes[i]` (the gRPC code of a failure, -1 when none). Polls not started
/// before the deadline fail as WOOL_STATUS_TRANSIENT (DEADLINE_EXCEEDED). The same handle may
/// appear several times. Runs on the runtime and pooled connections the other calls use.
///
/// Returns WOOL_STATUS_OK when the sweep ran (whatever each poll gave), or
/// WOOL_STATUS_INVALID_ARGUMENT for a NULL array with a non-zero count, max_in_flight 0, or a
/// bad timeout; nothing is written then.
///
/// # Safety
/// `conns` must be NULL or `count` pointers, each NULL or a live handle; `out_seconds` and
/// `out_statuses` NULL or `count` writable elements; `out_codes` NULL or `count` writable.
#[no_mangle]
pub unsafe extern "C" fn wool_idle_many(
    conns: *const *const wool_connection,
    count: usize,
    timeout_seconds: f64,
    max_in_flight: usize,
    out_seconds: *mut f64,
    out_statuses: *mut wool_status,
    out_codes: *mut i32,
) -> wool_status {
    ffi_panic_boundary!("wool_idle_many", {
        if count > 0 && (conns.is_null() || out_seconds.is_null() || out_statuses.is_null()) {
            return Err(Error::invalid_argument(
                "conns, out_seconds and out_statuses must not be NULL when count > 0",
            ));
        }
        if max_in_flight == 0 {
            return Err(Error::invalid_argument("max_in_flight must be at least 1"));
        }
        let timeout = try_timeout(timeout_seconds)?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `count` handle pointers, by the caller's contract.
        let handles = unsafe { std::slice::from_raw_parts(conns, count) };
        let connections: Vec<_> = handles
            .iter()
            // SAFETY: each NULL or live, by the caller's contract.
            .map(|&handle| unsafe { handle.as_ref() }.map(wool_connection::shared))
            .collect();
        let deadline = timeout.and_then(|limit| Instant::now().checked_add(limit));
        let outcomes: Vec<Result<f64, Error>> = runtime::block_on(async move {
            let mut outcomes: Vec<Option<Result<f64, Error>>> = vec![None; connections.len()];
            let mut polls = futures_util::stream::iter(connections.into_iter().enumerate())
                .map(|(index, connection)| async move {
                    let Some(connection) = connection else {
                        return (index, Err(Error::invalid_argument("conns[i] is NULL")));
                    };
                    let left = match deadline {
                        None => None,
                        Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                            Some(left) if !left.is_zero() => Some(left),
                            _ => {
                                return (
                                    index,
                                    Err(Error::deadline_exceeded(timeout.unwrap_or_default())),
                                )
                            }
                        },
                    };
                    (index, connection.idle(left).await)
                })
                .buffer_unordered(max_in_flight);
            while let Some((index, outcome)) = polls.next().await {
                outcomes[index] = Some(outcome);
            }
            outcomes
                .into_iter()
                .map(|outcome| outcome.expect("every poll reports"))
                .collect()
        })?;
        for (index, outcome) in outcomes.into_iter().enumerate() {
            let (status, seconds, code) = match outcome {
                Ok(seconds) => (wool_status::Ok, seconds, -1),
                Err(error) => (
                    wool_status::from(error.kind()),
                    f64::NAN,
                    error.code().map_or(-1, |code| code as i32),
                ),
            };
            // SAFETY: `count` writable elements each, by the caller's contract.
            unsafe {
                *out_statuses.add(index) = status;
                *out_seconds.add(index) = seconds;
                if !out_codes.is_null() {
                    *out_codes.add(index) = code;
                }
            }
        }
        Ok(())
    })
}
