//! The sweep calls: `wool_idle_many` (many workers polled with one deadline and a bound on
//! calls in flight, blocking) and `wool_idle_many_start` (the same sweep started without
//! blocking, completing into a `wool_queue`), both on `libwool::fleet::sweep`, the one
//! implementation Rust, `woolctl` and the bindings share; and what the retire round
//! (`retire`) shares with them: the checks of a fleet call and the handles' connections.

use std::ffi::c_char;
use std::sync::Arc;

use super::connection::wool_connection;
use super::handles;
use super::queue::{
    self, wool_completion, wool_completion_ex, wool_queue, WOOL_COMPLETION_KIND_SWEEP,
    WOOL_COMPLETION_MESSAGE_BYTES,
};
use super::{ffi_panic_boundary, runtime, try_mut, try_timeout, wool_status};
use libwool::connection::{Error, WorkerConnection};
use libwool::fleet::SweepOptions;

/// Polls the workers behind `conns[0..count]` (as wool_idle), at most `max_in_flight` at once,
/// all within one deadline of `timeout_seconds` (INFINITY = none), blocking the calling thread
/// until every poll has finished. Writes per handle, in `conns` order: `out_statuses[i]` (the
/// status wool_idle would have given; a NULL, freed or other type's handle gives
/// WOOL_STATUS_INVALID_ARGUMENT),
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
/// `conns` must be NULL or `count` readable handle values; `out_seconds` and
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
        let arrays = !(conns.is_null() || out_seconds.is_null() || out_statuses.is_null());
        let options = check_sweep_arguments(
            count == 0 || arrays,
            "conns, out_seconds and out_statuses",
            max_in_flight,
            timeout_seconds,
        )?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `count` handle values, by the caller's contract.
        let handles = unsafe { shared_handles(conns, count) };
        let outcomes = sweep_handles(handles, &options)?;
        for (index, outcome) in outcomes.iter().enumerate() {
            let (status, code) = outcome_fields(outcome);
            // SAFETY: `count` writable elements each, by the caller's contract.
            unsafe {
                *out_statuses.add(index) = status;
                *out_seconds.add(index) = outcome.as_ref().copied().unwrap_or(f64::NAN);
                if !out_codes.is_null() {
                    *out_codes.add(index) = code;
                }
            }
        }
        Ok(())
    })
}

/// One worker's outcome in a sweep started with wool_idle_many_start.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_poll_result {
    /// The status wool_idle would have given (a NULL handle: WOOL_STATUS_INVALID_ARGUMENT).
    pub status: wool_status,
    /// The gRPC code of a failure (as wool_last_rpc_code), -1 when none.
    pub rpc_code: i32,
    /// The worker's idle seconds on WOOL_STATUS_OK; NAN otherwise.
    pub seconds: f64,
    /// The failure's message as wool_last_error would give it after that wool_idle,
    /// NUL-terminated, truncated to fit; "" on success.
    pub message: [c_char; WOOL_COMPLETION_MESSAGE_BYTES],
}

impl From<&Result<f64, Error>> for wool_poll_result {
    fn from(outcome: &Result<f64, Error>) -> Self {
        let mut result = wool_poll_result {
            status: wool_status::Ok,
            rpc_code: -1,
            seconds: f64::NAN,
            message: [0; WOOL_COMPLETION_MESSAGE_BYTES],
        };
        match outcome {
            Ok(seconds) => result.seconds = *seconds,
            Err(error) => {
                (result.status, result.rpc_code) = outcome_fields(outcome);
                let text = format!("wool_idle: {}", error.message());
                super::last_error::fill_message(&mut result.message, &text);
            }
        }
        result
    }
}

/// The host's array of a started sweep's results.
struct HostResults {
    results: *mut wool_poll_result,
    count: usize,
}

// SAFETY: only a pointer to host memory, written by one thread at a time (inside the queue's
// finish step, under its lock); the host's contract keeps it valid until then.
unsafe impl Send for HostResults {}

impl HostResults {
    /// Writes one result per outcome, in order.
    ///
    /// # Safety
    /// `results` must be `count` writable elements, and `outcomes` hold `count` outcomes.
    unsafe fn write(&self, outcomes: &[Result<f64, Error>]) {
        debug_assert_eq!(outcomes.len(), self.count);
        for (index, outcome) in outcomes.iter().take(self.count).enumerate() {
            // SAFETY: `index < count` writable elements, by this function's contract.
            unsafe {
                self.results
                    .add(index)
                    .write(wool_poll_result::from(outcome))
            };
        }
    }
}

/// Starts, without blocking, the sweep wool_idle_many runs: polls the workers behind
/// `conns[0..count]` (as wool_idle), at most `max_in_flight` at once, all within one deadline
/// of `timeout_seconds` (INFINITY = none), on the runtime and pooled connections the other
/// calls use. Returns at once with the call's id in `*out_call` (for wool_cancel). When every
/// poll has finished, the sweep writes one result per handle to `out_results[0..count]`, in
/// `conns` order (a NULL, freed or other type's handle: WOOL_STATUS_INVALID_ARGUMENT in its
/// slot; polls not started
/// before the deadline: WOOL_STATUS_TRANSIENT, DEADLINE_EXCEEDED), and then posts ONE
/// completion, tagged `tag`, to `queue`: WOOL_STATUS_OK, seconds 0, and (through
/// wool_queue_next_sized) kind WOOL_COMPLETION_KIND_SWEEP and count `count`. `count` 0 starts
/// a sweep of nothing, which completes at once.
///
/// `out_results` is written only at the sweep's completion, all at once, and only if the call
/// is still in flight then: once wool_cancel(queue, call) has returned (its one completion is
/// then WOOL_STATUS_CANCELLED, count 0, the polls in flight cancelled) or wool_queue_free has,
/// nothing is ever written to it again. So `out_results` must stay valid until the call's
/// completion has been collected, or wool_cancel / wool_queue_free has returned; then the host
/// may free it. The handles may be freed as soon as this returns: the sweep keeps what it
/// needs. The same handle may appear several times.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `conns` or `out_results` with a non-zero
/// count, max_in_flight 0, a bad timeout (as wool_idle), or NULL `queue` or `out_call`;
/// nothing is started or written then.
///
/// # Safety
/// `conns` must be NULL or `count` readable handle values; `out_results` NULL or `count` writable elements, valid as said above; `out_call` NULL or
/// writable.
#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn wool_idle_many_start(
    conns: *const *const wool_connection,
    count: usize,
    timeout_seconds: f64,
    max_in_flight: usize,
    queue: *const wool_queue,
    tag: u64,
    out_results: *mut wool_poll_result,
    out_call: *mut u64,
) -> wool_status {
    ffi_panic_boundary!("wool_idle_many_start", {
        let options = check_sweep_arguments(
            count == 0 || !(conns.is_null() || out_results.is_null()),
            "conns and out_results",
            max_in_flight,
            timeout_seconds,
        )?;
        let queue = handles::get(queue, "queue")?;
        // SAFETY: the caller's contract above.
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let handles = if count == 0 {
            Vec::new()
        } else {
            // SAFETY: `count` handle values, by the caller's contract.
            unsafe { shared_handles(conns, count) }
        };
        let results = HostResults {
            results: out_results,
            count,
        };
        queue::start(
            &queue,
            tag,
            WOOL_COMPLETION_KIND_SWEEP,
            out_call,
            async move {
                let outcomes = sweep_connections(handles, &options).await;
                move |tag, id| {
                    let (completion, written) = match outcomes {
                        Ok(outcomes) => {
                            // SAFETY: the call is still registered (this runs inside the
                            // queue's finish step, under its lock), so by the host's contract
                            // `out_results` still holds `count` writable elements; the sweep
                            // gave one outcome per handle.
                            unsafe { results.write(&outcomes) };
                            (Ok(0.0), results.count as u64)
                        }
                        Err(error) => (Err(error), 0),
                    };
                    wool_completion_ex::new(
                        wool_completion::new(tag, id, completion, "wool_idle_many_start"),
                        WOOL_COMPLETION_KIND_SWEEP,
                        written,
                    )
                }
            },
        )
    })
}

/// The checks every sweep and retire call makes before anything runs: their arrays are present
/// (`arrays_given`, named by `arrays`), the timeout is valid, and the sweep's options are (as
/// `SweepOptions::validate` says: `max_in_flight` at least 1).
pub(crate) fn check_sweep_arguments(
    arrays_given: bool,
    arrays: &str,
    max_in_flight: usize,
    timeout_seconds: f64,
) -> Result<SweepOptions, Error> {
    if !arrays_given {
        return Err(Error::invalid_argument(format!(
            "{arrays} must not be NULL when count > 0"
        )));
    }
    let mut options = SweepOptions::default();
    options.max_in_flight = max_in_flight;
    options.timeout = try_timeout(timeout_seconds)?;
    options.validate()?;
    Ok(options)
}

/// The connections behind `conns[0..count]`, shared with the calls that use them, or why a
/// handle has none (NULL, freed, another type).
///
/// # Safety
/// `conns` must point to `count` readable handle values.
pub(crate) unsafe fn shared_handles(
    conns: *const *const wool_connection,
    count: usize,
) -> Vec<Result<Arc<WorkerConnection>, Error>> {
    // SAFETY: the caller's contract.
    let handles = unsafe { std::slice::from_raw_parts(conns, count) };
    handles
        .iter()
        .enumerate()
        .map(|(index, &handle)| {
            handles::get(handle, &format!("conns[{index}]")).map(|conn| conn.shared())
        })
        .collect()
}

/// Sweeps the connections on the library's runtime, blocking the calling thread (see
/// [`sweep_connections`]).
pub(crate) fn sweep_handles(
    connections: Vec<Result<Arc<WorkerConnection>, Error>>,
    options: &SweepOptions,
) -> Result<Vec<Result<f64, Error>>, Error> {
    runtime::block_on(sweep_connections(connections, options))?
}

/// The sweep of every fleet call (`libwool::fleet::sweep`): one outcome per connection, in
/// order; a handle that had no connection reports why in its slot.
///
/// Errors: as `libwool::fleet::sweep` (bad options, which the callers have checked).
async fn sweep_connections(
    connections: Vec<Result<Arc<WorkerConnection>, Error>>,
    options: &SweepOptions,
) -> Result<Vec<Result<f64, Error>>, Error> {
    let live: Vec<Arc<WorkerConnection>> = connections
        .iter()
        .filter_map(|connection| connection.as_ref().ok().cloned())
        .collect();
    let mut polls = libwool::fleet::sweep(live, options).await?.into_iter();
    Ok(connections
        .into_iter()
        .map(|connection| match connection {
            Ok(_) => polls.next().unwrap_or_else(|| {
                Err(Error::invalid_argument(
                    "the sweep gave no outcome for this handle",
                ))
            }),
            Err(why) => Err(why),
        })
        .collect())
}

/// A call's outcome as C sees it: its status and gRPC code (-1 when none).
pub(crate) fn outcome_fields(outcome: &Result<impl Sized, Error>) -> (wool_status, i32) {
    match outcome {
        Ok(_) => (wool_status::Ok, -1),
        Err(error) => (
            wool_status::from(error.kind()),
            error.code().map_or(-1, |code| code as i32),
        ),
    }
}
