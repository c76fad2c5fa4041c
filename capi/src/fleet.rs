//! The fleet calls: `wool_idle_many` (a sweep: many workers polled with one deadline and a
//! bound on calls in flight), `wool_idle_many_start` (the same sweep started without blocking,
//! completing into a `wool_queue`) and `wool_retire_idle` (a sweep, decisions by policy, the
//! stops), all on `libwool::fleet`, the one implementation Rust, `woolctl` and the bindings
//! share.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;
use std::time::Duration;

use super::connection::wool_connection;
use super::queue::{
    self, wool_completion, wool_completion_ex, wool_queue, WOOL_COMPLETION_KIND_SWEEP,
    WOOL_COMPLETION_MESSAGE_BYTES,
};
use super::{ffi_panic_boundary, runtime, try_grace, try_mut, try_ref, try_timeout, wool_status};
use libwool::connection::{Error, WorkerConnection};
use libwool::fleet::{retire, Decision, Reason, RetirePolicy, SweepOptions};

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
        let arrays = !(conns.is_null() || out_seconds.is_null() || out_statuses.is_null());
        let timeout = check_fleet_call(
            count == 0 || arrays,
            "conns, out_seconds and out_statuses",
            max_in_flight,
            timeout_seconds,
        )?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `count` handle pointers, each NULL or live, by the caller's contract.
        let handles = unsafe { shared_handles(conns, count) };
        let outcomes = sweep_handles(&handles, timeout, max_in_flight)?;
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
/// `conns` order (a NULL handle: WOOL_STATUS_INVALID_ARGUMENT in its slot; polls not started
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
/// `conns` must be NULL or `count` pointers, each NULL or a live handle; `queue` NULL or live;
/// `out_results` NULL or `count` writable elements, valid as said above; `out_call` NULL or
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
        let timeout = check_fleet_call(
            count == 0 || !(conns.is_null() || out_results.is_null()),
            "conns and out_results",
            max_in_flight,
            timeout_seconds,
        )?;
        // SAFETY (both): the caller's contract above.
        let queue = unsafe { try_ref(queue, "queue") }?;
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let handles = if count == 0 {
            Vec::new()
        } else {
            // SAFETY: `count` handle pointers, each NULL or live, by the caller's contract.
            unsafe { shared_handles(conns, count) }
        };
        let results = HostResults {
            results: out_results,
            count,
        };
        queue::start(
            queue,
            tag,
            WOOL_COMPLETION_KIND_SWEEP,
            out_call,
            async move {
                let outcomes = sweep_connections(&handles, timeout, max_in_flight).await;
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

/// The checks both fleet calls make before anything runs: their arrays are present
/// (`arrays_given`, named by `arrays`), `max_in_flight` is at least 1, the timeout is valid.
fn check_fleet_call(
    arrays_given: bool,
    arrays: &str,
    max_in_flight: usize,
    timeout_seconds: f64,
) -> Result<Option<Duration>, Error> {
    if !arrays_given {
        return Err(Error::invalid_argument(format!(
            "{arrays} must not be NULL when count > 0"
        )));
    }
    if max_in_flight == 0 {
        return Err(Error::invalid_argument("max_in_flight must be at least 1"));
    }
    try_timeout(timeout_seconds)
}

/// The connections behind `conns[0..count]`, shared with the calls that use them (`None` for
/// a NULL handle).
///
/// # Safety
/// `conns` must point to `count` pointers, each NULL or a live handle.
unsafe fn shared_handles(
    conns: *const *const wool_connection,
    count: usize,
) -> Vec<Option<Arc<WorkerConnection>>> {
    // SAFETY: the caller's contract.
    let handles = unsafe { std::slice::from_raw_parts(conns, count) };
    handles
        .iter()
        // SAFETY: each NULL or live, by the caller's contract.
        .map(|&handle| unsafe { handle.as_ref() }.map(wool_connection::shared))
        .collect()
}

/// Sweeps the connections on the library's runtime, blocking the calling thread (see
/// [`sweep_connections`]).
fn sweep_handles(
    connections: &[Option<Arc<WorkerConnection>>],
    timeout: Option<Duration>,
    max_in_flight: usize,
) -> Result<Vec<Result<f64, Error>>, Error> {
    runtime::block_on(sweep_connections(connections, timeout, max_in_flight))?
}

/// The sweep of every fleet call (`libwool::fleet::sweep`): one outcome per connection, in
/// order; a NULL handle reports an invalid argument in its slot.
///
/// Errors: as `libwool::fleet::sweep` (bad options, which the callers have checked).
async fn sweep_connections(
    connections: &[Option<Arc<WorkerConnection>>],
    timeout: Option<Duration>,
    max_in_flight: usize,
) -> Result<Vec<Result<f64, Error>>, Error> {
    let live: Vec<Arc<WorkerConnection>> = connections.iter().flatten().cloned().collect();
    let mut options = SweepOptions::default();
    options.max_in_flight = max_in_flight;
    options.timeout = timeout;
    let mut polls = libwool::fleet::sweep(live, &options).await?.into_iter();
    Ok(connections
        .iter()
        .enumerate()
        .map(|(index, connection)| match connection {
            Some(_) => polls.next().unwrap_or_else(|| {
                Err(Error::invalid_argument(
                    "the sweep gave no outcome for this handle",
                ))
            }),
            None => Err(Error::invalid_argument(format!("conns[{index}] is NULL"))),
        })
        .collect())
}

/// A retire policy for wool_retire_idle (as the Rust `RetirePolicy`). Fill every field.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_retire_policy {
    /// Retire a worker idle at least this many seconds (finite, >= 0).
    pub idle_threshold: f64,
    /// Each stop's grace, as wool_stop's `grace_seconds` (0 = cancel in-flight work, positive =
    /// let it run that long, negative or INFINITY = however long; NaN is refused). Positive, a
    /// task that reached the worker between the poll and the stop finishes.
    pub grace: f64,
    /// Each stop's deadline, as wool_stop's `timeout_seconds`; it must exceed a bounded grace,
    /// and be INFINITY for an unbounded one.
    pub stop_timeout: f64,
    /// Never leave fewer than this many workers that answered the poll running.
    pub keep_min: usize,
    /// Most stops in this call; SIZE_MAX = no limit.
    pub max_stops: usize,
    /// Decide, but stop nothing.
    pub dry_run: bool,
}

/// What wool_retire_idle decided for one worker and how its stop went.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_retire_decision {
    /// Why it was retired or kept: WOOL_RETIRE_REASON_* (wool_retire_reason_name names it).
    pub reason: c_int,
    /// Whether the policy retires it (reason WOOL_RETIRE_REASON_IDLE).
    pub retire: bool,
    /// The poll's status (as wool_idle would give it).
    pub poll_status: wool_status,
    /// The poll's gRPC code on failure, -1 when none.
    pub poll_rpc_code: i32,
    /// The idle seconds on a successful poll, NAN otherwise.
    pub idle_seconds: f64,
    /// Whether a stop was made (false when kept, or in a dry run).
    pub stopped: bool,
    /// The stop's status (as wool_stop would give it); WOOL_STATUS_OK when none was made.
    pub stop_status: wool_status,
    /// The stop's gRPC code on failure, -1 when none.
    pub stop_rpc_code: i32,
    /// The failure's message (the poll's, else the stop's), NUL-terminated, truncated to fit;
    /// "" when nothing failed.
    pub message: [c_char; WOOL_COMPLETION_MESSAGE_BYTES],
}

/// wool_retire_decision.reason: retired, idle at least the threshold.
pub const WOOL_RETIRE_REASON_IDLE: c_int = 0;
/// Kept: work in flight (idle read exactly 0).
pub const WOOL_RETIRE_REASON_BUSY: c_int = 1;
/// Kept: idle for less than the threshold.
pub const WOOL_RETIRE_REASON_BELOW_THRESHOLD: c_int = 2;
/// Kept: retiring it would leave fewer than keep_min.
pub const WOOL_RETIRE_REASON_MINIMUM: c_int = 3;
/// Kept: max_stops reached.
pub const WOOL_RETIRE_REASON_ROUND_LIMIT: c_int = 4;
/// Kept: the worker predates the idle RPC.
pub const WOOL_RETIRE_REASON_IDLE_UNAVAILABLE: c_int = 5;
/// Kept: unreachable or refused the handshake.
pub const WOOL_RETIRE_REASON_UNREACHABLE: c_int = 6;
/// Kept: the poll failed otherwise.
pub const WOOL_RETIRE_REASON_POLL_FAILED: c_int = 7;

const REASONS: [(Reason, c_int); 8] = [
    (Reason::Idle, WOOL_RETIRE_REASON_IDLE),
    (Reason::Busy, WOOL_RETIRE_REASON_BUSY),
    (Reason::BelowThreshold, WOOL_RETIRE_REASON_BELOW_THRESHOLD),
    (Reason::Minimum, WOOL_RETIRE_REASON_MINIMUM),
    (Reason::RoundLimit, WOOL_RETIRE_REASON_ROUND_LIMIT),
    (Reason::IdleUnavailable, WOOL_RETIRE_REASON_IDLE_UNAVAILABLE),
    (Reason::Unreachable, WOOL_RETIRE_REASON_UNREACHABLE),
    (Reason::PollFailed, WOOL_RETIRE_REASON_POLL_FAILED),
];

/// The name of a retire reason (`"idle"`, `"busy"`, `"below-threshold"`, `"minimum"`,
/// `"round-limit"`, `"idle-unavailable"`, `"unreachable"`, `"poll-failed"`); `"unknown"` for
/// any other value. Static, never NULL.
#[no_mangle]
pub extern "C" fn wool_retire_reason_name(reason: c_int) -> *const c_char {
    ffi_panic_boundary!("wool_retire_reason_name", {
        const NAMES: [&CStr; 8] = [
            c"idle",
            c"busy",
            c"below-threshold",
            c"minimum",
            c"round-limit",
            c"idle-unavailable",
            c"unreachable",
            c"poll-failed",
        ];
        usize::try_from(reason)
            .ok()
            .and_then(|index| NAMES.get(index).copied())
            .unwrap_or(c"unknown")
    })
}

impl wool_retire_policy {
    /// The Rust policy, every field checked.
    fn to_policy(self) -> Result<RetirePolicy, Error> {
        // `try_from_secs_f64` refuses NaN, negative values and ones too large for a Duration.
        let threshold = Duration::try_from_secs_f64(self.idle_threshold)
            .ok()
            .filter(|_| self.idle_threshold.is_finite())
            .ok_or_else(|| {
                Error::invalid_argument(format!(
                    "policy->idle_threshold must be finite seconds >= 0 (at most about 1.8e19), \
                     got {}",
                    self.idle_threshold
                ))
            })?;
        let mut policy = RetirePolicy::new(threshold);
        policy.grace = try_grace(self.grace)?;
        policy.stop_timeout = try_timeout(self.stop_timeout)?;
        policy.keep_min = self.keep_min;
        policy.max_stops = Some(self.max_stops).filter(|&most| most != usize::MAX);
        policy.dry_run = self.dry_run;
        policy.validate()?;
        Ok(policy)
    }
}

fn outcome_fields(outcome: &Result<impl Sized, Error>) -> (wool_status, i32) {
    match outcome {
        Ok(_) => (wool_status::Ok, -1),
        Err(error) => (
            wool_status::from(error.kind()),
            error.code().map_or(-1, |code| code as i32),
        ),
    }
}

impl From<&Decision> for wool_retire_decision {
    fn from(decision: &Decision) -> Self {
        let (poll_status, poll_rpc_code) = outcome_fields(&decision.idle);
        let (stop_status, stop_rpc_code) = decision
            .stop
            .as_ref()
            .map_or((wool_status::Ok, -1), outcome_fields);
        let reason = REASONS
            .iter()
            .find(|(r, _)| *r == decision.reason)
            .map_or(-1, |(_, value)| *value);
        let mut message = [0; WOOL_COMPLETION_MESSAGE_BYTES];
        let failure = match (&decision.idle, &decision.stop) {
            (Err(error), _) => Some(format!("wool_idle: {}", error.message())),
            (_, Some(Err(error))) => Some(format!("wool_stop: {}", error.message())),
            _ => None,
        };
        if let Some(text) = failure {
            super::last_error::fill_message(&mut message, &text);
        }
        wool_retire_decision {
            reason,
            retire: decision.retires(),
            poll_status,
            poll_rpc_code,
            idle_seconds: decision.idle.as_ref().copied().unwrap_or(f64::NAN),
            stopped: decision.stop.is_some(),
            stop_status,
            stop_rpc_code,
            message,
        }
    }
}

/// One retire round over the handles `conns[0..count]`: polls them all (as wool_idle_many,
/// within `poll_timeout_seconds`, at most `max_in_flight` at once), decides by `policy` (the
/// most idle retired first, never leaving fewer than `keep_min` answering workers, at most
/// `max_stops`), stops the retired ones (as wool_stop with the policy's grace and stop
/// timeout, at most `max_in_flight` at once) unless `dry_run`, and writes one decision per
/// handle to `out[0..count]`, in `conns` order. Blocks the calling thread; every handle must
/// stay live until the call returns. A NULL handle is
/// kept with reason WOOL_RETIRE_REASON_POLL_FAILED and poll status INVALID_ARGUMENT.
///
/// Returns WOOL_STATUS_OK when the round ran (whatever each worker gave), or
/// WOOL_STATUS_INVALID_ARGUMENT for a NULL array with a non-zero count, a NULL policy,
/// max_in_flight 0, a bad timeout or a bad policy field (the message names it); nothing is
/// written or stopped then.
///
/// # Safety
/// `conns` must be NULL or `count` pointers, each NULL or a live handle; `policy` NULL or
/// readable; `out` NULL or `count` writable elements.
#[no_mangle]
pub unsafe extern "C" fn wool_retire_idle(
    conns: *const *const wool_connection,
    count: usize,
    policy: *const wool_retire_policy,
    poll_timeout_seconds: f64,
    max_in_flight: usize,
    out: *mut wool_retire_decision,
) -> wool_status {
    ffi_panic_boundary!("wool_retire_idle", {
        // SAFETY: the caller's contract above.
        let policy = unsafe { try_ref(policy, "policy") }?.to_policy()?;
        let timeout = check_fleet_call(
            count == 0 || !(conns.is_null() || out.is_null()),
            "conns and out",
            max_in_flight,
            poll_timeout_seconds,
        )?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `count` handle pointers, each NULL or live, by the caller's contract.
        let workers = unsafe { shared_handles(conns, count) };
        let polls = sweep_handles(&workers, timeout, max_in_flight)?;
        let mut decisions = retire::decide(polls, &policy);
        let decisions = runtime::block_on(async move {
            let workers: Vec<Option<&WorkerConnection>> =
                workers.iter().map(Option::as_deref).collect();
            retire::apply(&workers, &mut decisions, &policy, max_in_flight)
                .await
                .map(|()| decisions)
        })??;
        // SAFETY: `count` writable elements, by the caller's contract.
        let out = unsafe { std::slice::from_raw_parts_mut(out, count) };
        for (slot, decision) in out.iter_mut().zip(&decisions) {
            *slot = wool_retire_decision::from(decision);
        }
        Ok(())
    })
}
