//! The retire round: `wool_retire_idle` (a sweep, decisions by policy, the stops) and its C
//! types (`wool_retire_policy`, `wool_retire_decision`, the `WOOL_RETIRE_REASON_*` values and
//! `wool_retire_reason_name`), on `libwool::fleet::retire`, the one implementation Rust,
//! `woolctl` and the bindings share.

use std::ffi::{c_char, c_int, CStr};
use std::sync::Arc;
use std::time::Duration;

use super::connection::wool_connection;
use super::queue::WOOL_COMPLETION_MESSAGE_BYTES;
use super::sweep::{check_sweep_arguments, outcome_fields, shared_handles, sweep_handles};
use super::{ffi_panic_boundary, runtime, try_grace, try_ref, try_timeout, wool_status};
use libwool::connection::{Error, WorkerConnection};
use libwool::fleet::{retire, Decision, Reason, RetirePolicy};

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
/// handle to `out[0..count]`, in `conns` order. Blocks the calling thread; a handle freed
/// meanwhile by another thread is still polled and stopped (the call holds its connection).
/// A NULL, freed or other type's handle is kept with reason WOOL_RETIRE_REASON_POLL_FAILED
/// and poll status INVALID_ARGUMENT.
///
/// Returns WOOL_STATUS_OK when the round ran (whatever each worker gave), or
/// WOOL_STATUS_INVALID_ARGUMENT for a NULL array with a non-zero count, a NULL policy,
/// max_in_flight 0, a bad timeout or a bad policy field (the message names it); nothing is
/// written or stopped then.
///
/// # Safety
/// `conns` must be NULL or `count` readable handle values; `policy` NULL or readable; `out` NULL or `count` writable elements.
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
        let options = check_sweep_arguments(
            count == 0 || !(conns.is_null() || out.is_null()),
            "conns and out",
            max_in_flight,
            poll_timeout_seconds,
        )?;
        if count == 0 {
            return Ok(());
        }
        // SAFETY: `count` handle values, by the caller's contract.
        let handles = unsafe { shared_handles(conns, count) };
        let workers: Vec<Option<Arc<WorkerConnection>>> =
            handles.iter().map(|h| h.as_ref().ok().cloned()).collect();
        let polls = sweep_handles(handles, &options)?;
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
