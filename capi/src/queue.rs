//! `wool_queue`: calls that start without blocking and complete into a queue the host collects
//! from — blocking with a timeout, without blocking, or when the queue's file descriptor
//! becomes readable in the host's own event loop (epoll, `select`, libuv, asyncio's
//! `add_reader`). `wool_idle_start`, `wool_stop_start`, `wool_cancel`, `wool_queue_next`.
//!
//! Started calls run on the library's one runtime, driven by the library's driver thread while
//! any are in flight (see `runtime`); the blocking calls share that runtime and its pooled
//! connections. Nothing calls back into the host: completions wait in the queue.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_char;
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::connection::wool_connection;
use super::{
    ffi_panic_boundary, free_boxed, runtime, set_boxed, try_grace, try_mut, try_ref, try_timeout,
    wool_status,
};
use libwool::connection::{Error, ErrorKind};

/// Bytes of a completion's message, the terminating NUL included (longer ones are truncated on
/// a UTF-8 character boundary).
pub const WOOL_COMPLETION_MESSAGE_BYTES: usize = 256;

/// One finished call, as wool_queue_next hands it out.
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_completion {
    /// The value the caller gave when starting the call.
    pub tag: u64,
    /// The call's id (as written by wool_idle_start / wool_stop_start).
    pub call: u64,
    /// The call's outcome: WOOL_STATUS_OK, WOOL_STATUS_CANCELLED (wool_cancel), or a failure as
    /// the blocking call would have given.
    pub status: wool_status,
    /// The gRPC code of a failure (as wool_last_rpc_code), -1 when none.
    pub rpc_code: i32,
    /// For an idle call that succeeded: the worker's idle seconds; otherwise 0.
    pub seconds: f64,
    /// The failure's message (as wool_last_error would give it), NUL-terminated; "" on success.
    pub message: [c_char; WOOL_COMPLETION_MESSAGE_BYTES],
}

impl wool_completion {
    fn new(tag: u64, call: u64, outcome: Result<f64, Error>, function: &str) -> Self {
        let mut completion = wool_completion {
            tag,
            call,
            status: wool_status::Ok,
            rpc_code: -1,
            seconds: 0.0,
            message: [0; WOOL_COMPLETION_MESSAGE_BYTES],
        };
        match outcome {
            Ok(seconds) => completion.seconds = seconds,
            Err(error) => {
                completion.status = wool_status::from(error.kind());
                completion.rpc_code = error.code().map_or(-1, |code| code as i32);
                let text = format!("{function}: {}", error.message());
                super::last_error::fill_message(&mut completion.message, &text);
            }
        }
        completion
    }
}

/// A completion queue. Opaque; made by wool_queue_new, released by wool_queue_free. Any thread
/// may start calls on it and collect from it.
#[allow(non_camel_case_types)]
pub struct wool_queue {
    inner: Arc<Queue>,
}

struct Queue {
    state: Mutex<State>,
    /// Signalled when a completion is pushed.
    ready: Condvar,
    next_call: AtomicU64,
}

struct State {
    completions: VecDeque<wool_completion>,
    /// Calls in flight: id → (tag, its task once spawned).
    calls: HashMap<u64, (u64, Option<tokio::task::AbortHandle>)>,
    /// An eventfd, readable exactly while completions wait; `None` once the queue is freed.
    fd: Option<OwnedFd>,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The queue's state once a completion waits, or once `timeout_seconds` (0, positive, or
    /// INFINITY; checked by the caller) have passed without one.
    fn wait_ready(&self, timeout_seconds: f64) -> MutexGuard<'_, State> {
        let deadline = Duration::try_from_secs_f64(timeout_seconds)
            .ok()
            .and_then(|wait| Instant::now().checked_add(wait));
        let mut state = self.lock();
        while state.completions.is_empty() && timeout_seconds > 0.0 {
            state = match deadline {
                None => self.ready.wait(state).unwrap_or_else(|p| p.into_inner()),
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    self.ready
                        .wait_timeout(state, left)
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
            };
        }
        state
    }

    /// Finishes call `id` with `completion`, unless it was cancelled or the queue freed.
    fn finish(&self, id: u64, completion: impl FnOnce(u64) -> wool_completion) {
        let mut state = self.lock();
        if let Some((tag, _)) = state.calls.remove(&id) {
            state.push(completion(tag));
            self.ready.notify_all();
        }
    }
}

impl State {
    fn push(&mut self, completion: wool_completion) {
        if self.completions.is_empty() {
            if let Some(fd) = &self.fd {
                // SAFETY: an 8-byte write to our eventfd.
                let one: u64 = 1;
                unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            }
        }
        self.completions.push_back(completion);
    }

    fn pop(&mut self, out: &mut [wool_completion]) -> usize {
        let count = out.len().min(self.completions.len());
        for (slot, completion) in out.iter_mut().zip(self.completions.drain(..count)) {
            *slot = completion;
        }
        if self.completions.is_empty() && count > 0 {
            if let Some(fd) = &self.fd {
                // SAFETY: an 8-byte read from our non-blocking eventfd (resets it to unreadable).
                let mut value: u64 = 0;
                unsafe { libc::read(fd.as_raw_fd(), (&mut value as *mut u64).cast(), 8) };
            }
        }
        count
    }
}

/// Makes a completion queue and writes it to `*out`.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT when `out` is NULL, WOOL_STATUS_TRANSIENT when the
/// process is out of file descriptors.
///
/// # Safety
/// `out` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_queue_new(out: *mut *mut wool_queue) -> wool_status {
    ffi_panic_boundary!("wool_queue_new", {
        // SAFETY: the caller's contract above.
        let out = unsafe { try_mut(out, "out") }?;
        // SAFETY: eventfd with flags; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(Error::new(
                ErrorKind::Transient,
                Some(tonic::Code::ResourceExhausted),
                format!(
                    "cannot make the queue's eventfd: {}",
                    std::io::Error::last_os_error()
                ),
            ));
        }
        set_boxed(
            out,
            wool_queue {
                inner: Arc::new(Queue {
                    state: Mutex::new(State {
                        completions: VecDeque::new(),
                        calls: HashMap::new(),
                        // SAFETY: a descriptor we just opened and own.
                        fd: Some(unsafe { OwnedFd::from_raw_fd(fd) }),
                    }),
                    ready: Condvar::new(),
                    next_call: AtomicU64::new(1),
                }),
            },
        );
        Ok(())
    })
}

/// Releases the queue: calls still in flight on it are cancelled (their HTTP/2 streams reset)
/// and their completions discarded; completions not collected are discarded; its file
/// descriptor is closed (remove it from an epoll set first). NULL is a no-op. Call it once,
/// after every other call on the queue has returned.
///
/// # Safety
/// `queue` must be NULL or from wool_queue_new and not yet freed.
#[no_mangle]
pub unsafe extern "C" fn wool_queue_free(queue: *mut wool_queue) {
    ffi_panic_boundary!("wool_queue_free", {
        // SAFETY: the caller's contract above.
        if let Some(queue) = unsafe { queue.as_ref() } {
            let mut state = queue.inner.lock();
            for (_, (_, task)) in state.calls.drain() {
                if let Some(task) = task {
                    task.abort();
                }
            }
            state.completions.clear();
            state.fd = None;
        }
        // SAFETY: the caller's contract above.
        unsafe { free_boxed(queue) }
    })
}

/// The queue's file descriptor: readable while completions wait to be collected (level
/// triggered: it stays readable until wool_queue_next has taken them all). Watch it with epoll,
/// poll(2), select(2), libuv or asyncio's add_reader; do not read, write or close it. -1 when
/// `queue` is NULL.
///
/// # Safety
/// `queue` must be NULL or a live wool_queue.
#[no_mangle]
pub unsafe extern "C" fn wool_queue_fd(queue: *const wool_queue) -> i32 {
    ffi_panic_boundary!("wool_queue_fd", {
        // SAFETY: the caller's contract above.
        unsafe { queue.as_ref() }
            .and_then(|queue| queue.inner.lock().fd.as_ref().map(|fd| fd.as_raw_fd()))
            .unwrap_or(-1)
    })
}

/// Starts `call` on the runtime for `queue`, tagged `tag`; its id goes to `*out_call`.
fn start<F>(
    queue: &wool_queue,
    tag: u64,
    out_call: &mut u64,
    function: &'static str,
    call: F,
) -> Result<(), Error>
where
    F: Future<Output = Result<f64, Error>> + Send + 'static,
{
    let inner = Arc::clone(&queue.inner);
    let id = inner.next_call.fetch_add(1, Ordering::Relaxed);
    {
        let mut state = inner.lock();
        if state.fd.is_none() {
            return Err(Error::invalid_argument("the queue has been freed"));
        }
        state.calls.insert(id, (tag, None));
    }
    let finisher = Arc::clone(&inner);
    let task = runtime::spawn(async move {
        let outcome = call.await;
        finisher.finish(id, |tag| wool_completion::new(tag, id, outcome, function));
    });
    let task = match task {
        Ok(task) => task,
        Err(error) => {
            inner.lock().calls.remove(&id);
            return Err(error);
        }
    };
    let mut state = inner.lock();
    match state.calls.get_mut(&id) {
        Some((_, slot)) => *slot = Some(task),
        None => task.abort(), // cancelled (or finished) before its task was recorded
    }
    *out_call = id;
    Ok(())
}

/// Starts an idle poll of the worker behind `conn` without blocking (as wool_idle, which it
/// shares the runtime and pooled connections with). Its completion, tagged `tag`, arrives in
/// `queue`: WOOL_STATUS_OK with the idle seconds, or the status wool_idle would have returned.
/// The call's id is written to `*out_call` (for wool_cancel). Freeing `conn` while the call is
/// in flight is allowed: the call keeps what it needs.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `conn`, `queue` or `out_call`, or a bad
/// timeout (as wool_idle); nothing is started then.
///
/// # Safety
/// `conn` and `queue` must be NULL or live; `out_call` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_idle_start(
    conn: *const wool_connection,
    queue: *const wool_queue,
    timeout_seconds: f64,
    tag: u64,
    out_call: *mut u64,
) -> wool_status {
    ffi_panic_boundary!("wool_idle_start", {
        // SAFETY (all three): the caller's contract above.
        let conn = unsafe { try_ref(conn, "conn") }?.shared();
        let queue = unsafe { try_ref(queue, "queue") }?;
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let timeout = try_timeout(timeout_seconds)?;
        start(queue, tag, out_call, "wool_idle_start", async move {
            conn.idle(timeout).await
        })
    })
}

/// Starts a stop (retirement) of the worker behind `conn` without blocking (as wool_stop).
/// Its completion, tagged `tag`, arrives in `queue` (seconds 0). The call's id goes to
/// `*out_call`.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `conn`, `queue` or `out_call`, a NaN grace or
/// a bad timeout; nothing is started then.
///
/// # Safety
/// `conn` and `queue` must be NULL or live; `out_call` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_stop_start(
    conn: *const wool_connection,
    queue: *const wool_queue,
    grace_seconds: f64,
    timeout_seconds: f64,
    tag: u64,
    out_call: *mut u64,
) -> wool_status {
    ffi_panic_boundary!("wool_stop_start", {
        // SAFETY (all three): the caller's contract above.
        let conn = unsafe { try_ref(conn, "conn") }?.shared();
        let queue = unsafe { try_ref(queue, "queue") }?;
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let grace = try_grace(grace_seconds)?;
        let timeout = try_timeout(timeout_seconds)?;
        start(queue, tag, out_call, "wool_stop_start", async move {
            conn.stop(grace, timeout).await.map(|()| 0.0)
        })
    })
}

/// Cancels call `call` of `queue`: if it is still in flight, its HTTP/2 stream is reset (the
/// worker sees the cancellation) and it completes at once with WOOL_STATUS_CANCELLED (its
/// completion is in the queue when this returns). A call that already completed, or an
/// unknown id, is left alone: WOOL_STATUS_OK either way, since the race between a completion
/// and a cancel is the host's to lose.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `queue`.
///
/// # Safety
/// `queue` must be NULL or live.
#[no_mangle]
pub unsafe extern "C" fn wool_cancel(queue: *const wool_queue, call: u64) -> wool_status {
    ffi_panic_boundary!("wool_cancel", {
        // SAFETY: the caller's contract above.
        let queue = unsafe { try_ref(queue, "queue") }?;
        let inner = &queue.inner;
        let mut state = inner.lock();
        if let Some((tag, task)) = state.calls.remove(&call) {
            if let Some(task) = task {
                task.abort();
            }
            let cancelled = Error::new(
                ErrorKind::Cancelled,
                Some(tonic::Code::Cancelled),
                "the call was cancelled by wool_cancel",
            );
            state.push(wool_completion::new(
                tag,
                call,
                Err(cancelled),
                "wool_cancel",
            ));
            inner.ready.notify_all();
        }
        Ok(())
    })
}

/// Collects up to `capacity` completions into `out` (oldest first) and writes how many to
/// `*out_count`. Waits up to `timeout_seconds` for the first one: 0 = do not wait, positive =
/// that long, INFINITY = until one arrives. Returns WOOL_STATUS_OK also when none arrived in
/// time (`*out_count` = 0).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `queue`, `out_count`, or `out` with a
/// non-zero capacity, or a negative or NaN timeout.
///
/// # Safety
/// `queue` must be NULL or live; `out` NULL or `capacity` writable completions; `out_count`
/// NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_queue_next(
    queue: *const wool_queue,
    out: *mut wool_completion,
    capacity: usize,
    timeout_seconds: f64,
    out_count: *mut usize,
) -> wool_status {
    ffi_panic_boundary!("wool_queue_next", {
        // SAFETY (all): the caller's contract above.
        let queue = unsafe { try_ref(queue, "queue") }?;
        let out_count = unsafe { try_mut(out_count, "out_count") }?;
        if capacity > 0 && out.is_null() {
            return Err(Error::invalid_argument("out is NULL"));
        }
        if timeout_seconds.is_nan() || timeout_seconds < 0.0 {
            return Err(Error::invalid_argument(format!(
                "timeout must be 0, positive seconds or infinity, got {timeout_seconds}"
            )));
        }
        let out = if capacity == 0 {
            &mut [][..]
        } else {
            unsafe { std::slice::from_raw_parts_mut(out, capacity) }
        };
        let mut state = queue.inner.wait_ready(timeout_seconds);
        *out_count = state.pop(out);
        Ok(())
    })
}
