//! `wool_queue`: calls that start without blocking and complete into a queue the host collects
//! from — blocking with a timeout, without blocking, or when the queue's file descriptor
//! becomes readable in the host's own event loop (epoll, `select`, libuv, asyncio's
//! `add_reader`). `wool_idle_start`, `wool_stop_start`, `wool_cancel`, `wool_queue_next`,
//! `wool_queue_next_sized` (the growable `wool_completion_ex`); the started sweep
//! `wool_idle_many_start` (in `sweep`) completes into the same queue.
//!
//! Started calls run on the library's one runtime, driven by the library's driver thread while
//! any are in flight (see `runtime`); the blocking calls share that runtime and its pooled
//! connections. Nothing calls back into the host: completions wait in the queue.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::ffi::{c_char, c_void};
use std::future::Future;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::connection::wool_connection;
use futures_util::FutureExt;

use super::handles::{self, Handle};
use super::{
    ffi_panic_boundary, free_handle, panic_message, runtime, try_grace, try_mut, try_timeout,
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
    /// The call's outcome: WOOL_STATUS_OK, WOOL_STATUS_CANCELLED (wool_cancel), a failure as
    /// the blocking call would have given, or WOOL_STATUS_PANIC when the call hit a bug in
    /// libwool (caught; the message says where): every started call completes.
    pub status: wool_status,
    /// The gRPC code of a failure (as wool_last_rpc_code), -1 when none.
    pub rpc_code: i32,
    /// For an idle call that succeeded: the worker's idle seconds; otherwise 0.
    pub seconds: f64,
    /// The failure's message (as wool_last_error would give it), NUL-terminated; "" on success.
    pub message: [c_char; WOOL_COMPLETION_MESSAGE_BYTES],
}

/// `wool_completion_ex.kind` of an idle poll (wool_idle_start).
pub const WOOL_COMPLETION_KIND_IDLE: u32 = 1;
/// `wool_completion_ex.kind` of a stop (wool_stop_start).
pub const WOOL_COMPLETION_KIND_STOP: u32 = 2;
/// `wool_completion_ex.kind` of a sweep (wool_idle_many_start).
pub const WOOL_COMPLETION_KIND_SWEEP: u32 = 3;

/// One finished call as wool_queue_next_sized hands it out: the 0.4 `wool_completion` first
/// (its fields are a prefix of this struct), then fields that `wool_completion` has no room
/// for. Fields are only ever appended: a host passes `sizeof(wool_completion_ex)` as it was
/// compiled, and gets that many bytes per completion (see wool_queue_next_sized).
#[allow(non_camel_case_types)]
#[repr(C)]
#[derive(Clone, Copy)]
pub struct wool_completion_ex {
    /// The completion as wool_queue_next gives it.
    pub completion: wool_completion,
    /// What the call was: WOOL_COMPLETION_KIND_IDLE, _STOP or _SWEEP. A call cancelled by
    /// wool_cancel keeps its kind (its status is WOOL_STATUS_CANCELLED).
    pub kind: u32,
    /// Always 0.
    pub reserved: u32,
    /// For a sweep that completed WOOL_STATUS_OK: the number of results written to its
    /// `out_results` (its `count`); 0 otherwise (a cancelled sweep wrote none).
    pub count: u64,
}

impl wool_completion {
    pub(crate) fn new(tag: u64, call: u64, outcome: Result<f64, Error>, function: &str) -> Self {
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

impl wool_completion_ex {
    /// A completion of a call of `kind`, with `count` results written (a sweep's).
    pub(crate) fn new(completion: wool_completion, kind: u32, count: u64) -> Self {
        wool_completion_ex {
            completion,
            kind,
            reserved: 0,
            count,
        }
    }

    /// The completion of an idle poll or stop, or of a sweep that wrote nothing.
    fn of_call(
        kind: u32,
        tag: u64,
        call: u64,
        outcome: Result<f64, Error>,
        function: &str,
    ) -> Self {
        Self::new(wool_completion::new(tag, call, outcome, function), kind, 0)
    }
}

/// A completion queue. Opaque; made by wool_queue_new, released by wool_queue_free. Any thread
/// may start calls on it and collect from it, and free it while others wait on it.
#[allow(non_camel_case_types)]
pub struct wool_queue {
    inner: Arc<Queue>,
}

impl Handle for wool_queue {
    const NAME: &'static str = "queue";

    /// Cancels the calls in flight (their HTTP/2 streams reset), discards their completions and
    /// those not collected, closes the descriptor, and ends the waits of wool_queue_next calls
    /// running on other threads (they return no completion, as at a timeout).
    fn freed(&self) {
        let mut state = self.inner.lock();
        for (_, call) in state.calls.drain() {
            if let Some(task) = call.task {
                task.abort();
            }
        }
        state.completions.clear();
        state.fd = None;
        self.inner.announce(&state);
    }
}

struct Queue {
    state: Mutex<State>,
    /// Signalled when a completion is pushed, for threads waiting without driving the runtime
    /// (inside a host's own tokio runtime), counted in `State::condvar_waiters`.
    ready: Condvar,
    /// Notified when a completion is pushed, for the thread driving the runtime in
    /// wool_queue_next.
    arrived: tokio::sync::Notify,
    next_call: AtomicU64,
}

struct State {
    /// Completions not yet collected, in the order they came; each converts to what the
    /// collecting function hands out (a `wool_completion` or a prefix of a
    /// `wool_completion_ex`).
    completions: VecDeque<wool_completion_ex>,
    /// Calls in flight: id → the call.
    calls: HashMap<u64, Call>,
    /// An eventfd, readable exactly while completions wait once `fd_handed_out`; `None` once
    /// the queue is freed.
    fd: Option<OwnedFd>,
    /// Whether wool_queue_fd has handed the descriptor out. Until then no host can watch it,
    /// so it is left unsignalled: a host collecting with wool_queue_next alone (the Go
    /// binding, C thread pools) saves a write and a read of it each time completions arrive
    /// in an empty queue.
    fd_handed_out: bool,
    /// Threads waiting on `Queue::ready`.
    condvar_waiters: usize,
}

/// A call in flight on a queue.
struct Call {
    /// The host's value given at the start.
    tag: u64,
    /// WOOL_COMPLETION_KIND_*: kept by its cancellation's completion.
    kind: u32,
    /// Its task, once spawned (`None` for the moment between its registration and its spawn).
    task: Option<tokio::task::AbortHandle>,
}

impl Queue {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the threads waiting for a completion (one was just pushed onto `state`, or the
    /// queue was freed).
    fn announce(&self, state: &State) {
        self.arrived.notify_waiters();
        if state.condvar_waiters > 0 {
            self.ready.notify_all();
        }
    }

    /// The queue's state once a completion waits, or once `timeout_seconds` (0, positive, or
    /// INFINITY; checked by the caller) have passed without one. The waiting thread drives the
    /// library's runtime meanwhile (see `runtime::drive_until`): the calls' I/O and their
    /// completions happen on it, with no other thread in between.
    fn wait_ready(&self, timeout_seconds: f64) -> MutexGuard<'_, State> {
        let deadline = Duration::try_from_secs_f64(timeout_seconds)
            .ok()
            .and_then(|wait| Instant::now().checked_add(wait));
        if !self.lock().completions.is_empty() {
            return self.lock();
        }
        if timeout_seconds == 0.0 {
            return self.lock();
        }
        let driven =
            runtime::drive_until(self.until_ready(deadline.map(tokio::time::Instant::from_std)));
        let mut state = self.lock();
        if let Ok(Some(())) = driven {
            return state;
        }
        // Inside a host's own tokio runtime (or with no runtime at all): wait without driving.
        state.condvar_waiters += 1;
        while state.completions.is_empty() && !state.freed() {
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
        state.condvar_waiters -= 1;
        state
    }

    /// Resolves once a completion waits in the queue, the queue is freed, or at `deadline`
    /// (`None`: never).
    async fn until_ready(&self, deadline: Option<tokio::time::Instant>) {
        loop {
            let notified = self.arrived.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let ready = {
                let state = self.lock();
                !state.completions.is_empty() || state.freed()
            };
            if ready {
                return;
            }
            match deadline {
                None => notified.await,
                Some(deadline) => {
                    if tokio::time::timeout_at(deadline, notified).await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Finishes call `id` with `completion(tag)`, unless it was cancelled or the queue freed.
    /// `completion` runs only in the first case, under the queue's lock: what it writes to
    /// host memory (a sweep's results) is therefore never written once wool_cancel or
    /// wool_queue_free, which take the same lock, has removed the call.
    ///
    /// A panic inside `completion` (a bug) still completes the call, as WOOL_STATUS_PANIC.
    fn finish(&self, id: u64, completion: impl FnOnce(u64) -> wool_completion_ex) {
        let mut state = self.lock();
        if let Some(call) = state.calls.remove(&id) {
            let finished = std::panic::catch_unwind(AssertUnwindSafe(|| completion(call.tag)))
                .unwrap_or_else(|payload| panicked(call.kind, call.tag, id, payload.as_ref()));
            state.push(finished);
            self.announce(&state);
        }
    }
}

impl State {
    /// Whether wool_queue_free has run: its descriptor is closed then.
    fn freed(&self) -> bool {
        self.fd.is_none()
    }

    fn push(&mut self, completion: wool_completion_ex) {
        if self.completions.is_empty() {
            self.signal_fd();
        }
        self.completions.push_back(completion);
    }

    /// Makes the descriptor readable, if it has been handed out.
    fn signal_fd(&self) {
        if let (Some(fd), true) = (&self.fd, self.fd_handed_out) {
            // SAFETY: an 8-byte write to our eventfd.
            let one: u64 = 1;
            unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
        }
    }

    /// The descriptor, noting that it is handed out: from now on it is readable exactly while
    /// completions wait (made so at once if some wait already). `None` once freed.
    fn hand_out_fd(&mut self) -> Option<i32> {
        let fd = self.fd.as_ref()?.as_raw_fd();
        if !self.fd_handed_out {
            self.fd_handed_out = true;
            if !self.completions.is_empty() {
                self.signal_fd();
            }
        }
        Some(fd)
    }

    /// Takes up to `most` completions, oldest first, handing each to `write` with its index;
    /// returns how many.
    fn pop(&mut self, most: usize, mut write: impl FnMut(usize, &wool_completion_ex)) -> usize {
        let count = most.min(self.completions.len());
        for (index, completion) in self.completions.drain(..count).enumerate() {
            write(index, &completion);
        }
        if self.completions.is_empty() && count > 0 && self.fd_handed_out {
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
        handles::set_handle(
            out,
            wool_queue {
                inner: Arc::new(Queue {
                    state: Mutex::new(State {
                        completions: VecDeque::new(),
                        calls: HashMap::new(),
                        // SAFETY: a descriptor we just opened and own.
                        fd: Some(unsafe { OwnedFd::from_raw_fd(fd) }),
                        fd_handed_out: false,
                        condvar_waiters: 0,
                    }),
                    ready: Condvar::new(),
                    arrived: tokio::sync::Notify::new(),
                    next_call: AtomicU64::new(1),
                }),
            },
        )
    })
}

/// Releases the queue: calls still in flight on it are cancelled (their HTTP/2 streams reset)
/// and their completions discarded; completions not collected are discarded; its file
/// descriptor is closed (remove it from an epoll set first). NULL is a no-op. Any thread may
/// free it at any time: a wool_queue_next or wool_queue_next_sized waiting on it in another
/// thread returns at once with no completion (WOOL_STATUS_OK, count 0, as at a timeout), and
/// the queue goes away after the last call on it returns. A second free (or a handle of
/// another type) does nothing but set the thread's last error.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_queue_free(queue: *mut wool_queue) {
    ffi_panic_boundary!("wool_queue_free", {
        free_handle("wool_queue_free", queue, "queue");
    })
}

/// The queue's file descriptor: readable while completions wait to be collected (level
/// triggered: it stays readable until wool_queue_next has taken them all). Watch it with epoll,
/// poll(2), select(2), libuv or asyncio's add_reader; do not read, write or close it. -1 when
/// `queue` is NULL.
///
/// A host that waits on the descriptor rather than in wool_queue_next leaves the started calls
/// to the library's driver thread; asking for a descriptor tells the library so, and from then
/// on a start wakes that thread at once. A freed queue, or a handle of another type, gives -1
/// and sets the thread's last error.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_queue_fd(queue: *const wool_queue) -> i32 {
    ffi_panic_boundary!("wool_queue_fd", {
        if queue.is_null() {
            return -1;
        }
        let queue = match handles::get(queue, "queue") {
            Ok(queue) => queue,
            Err(error) => {
                super::last_error::record("wool_queue_fd", &error);
                return -1;
            }
        };
        let Some(fd) = queue.inner.lock().hand_out_fd() else {
            return -1;
        };
        if let Err(error) = runtime::descriptor_watched() {
            // No runtime, so no call can have started on the queue: nothing to drive.
            tracing::warn!("libwool: wool_queue_fd: {}", error.message());
        }
        fd
    })
}

/// Starts `call` on the runtime for `queue`, tagged `tag`, as a call of `kind`
/// (WOOL_COMPLETION_KIND_*); its id goes to `*out_call`. The call's output makes its
/// completion from the tag and the id: it runs inside [`Queue::finish`], so only while the call
/// is still registered and under the queue's lock (where a sweep writes its results).
///
/// Errors: INVALID_ARGUMENT for a freed queue; the runtime's start failure.
pub(crate) fn start<F, D>(
    queue: &wool_queue,
    tag: u64,
    kind: u32,
    out_call: &mut u64,
    call: F,
) -> Result<(), Error>
where
    F: Future<Output = D> + Send + 'static,
    D: FnOnce(u64, u64) -> wool_completion_ex + Send + 'static,
{
    let inner = Arc::clone(&queue.inner);
    let id = inner.next_call.fetch_add(1, Ordering::Relaxed);
    {
        let mut state = inner.lock();
        if state.freed() {
            return Err(Error::invalid_argument("queue: queue handle already freed"));
        }
        state.calls.insert(
            id,
            Call {
                tag,
                kind,
                task: None,
            },
        );
    }
    let task = runtime::spawn(completing(Arc::clone(&inner), id, kind, call));
    let task = match task {
        Ok(task) => task,
        Err(error) => {
            inner.lock().calls.remove(&id);
            return Err(error);
        }
    };
    let mut state = inner.lock();
    match state.calls.get_mut(&id) {
        Some(call) => call.task = Some(task),
        None => task.abort(), // cancelled (or finished) before its task was recorded
    }
    *out_call = id;
    Ok(())
}

/// Call `id`'s task: runs `call`, then finishes the call in `queue` with the completion its
/// output makes. A call that panics (a bug) still completes, so the host never waits for it
/// forever.
async fn completing<F, D>(queue: Arc<Queue>, id: u64, kind: u32, call: F)
where
    F: Future<Output = D>,
    D: FnOnce(u64, u64) -> wool_completion_ex,
{
    match AssertUnwindSafe(call).catch_unwind().await {
        Ok(complete) => queue.finish(id, |tag| complete(tag, id)),
        Err(payload) => queue.finish(id, |tag| panicked(kind, tag, id, payload.as_ref())),
    }
}

/// Starts each of `calls` (a tag and what makes the call's future, or the error that refuses
/// it) for
/// `queue` as calls of `kind` whose outcome is one worker's, completing as `function`, sharing
/// the queue's lock and the runtime's start across the batch (see `runtime::spawn_batch`). A
/// refused call is not started: it completes at once with its error, as a started call that
/// failed would. Every call gets an id, refused or not; returns, in the order of `calls`, each
/// one's id and status (WOOL_STATUS_OK when started).
///
/// Errors: INVALID_ARGUMENT for a freed queue; the runtime's start failure. Nothing is started
/// and nothing completes then.
pub(crate) fn start_each<M, F>(
    queue: &wool_queue,
    kind: u32,
    function: &'static str,
    calls: Vec<(u64, Result<M, Error>)>,
) -> Result<Vec<(u64, wool_status)>, Error>
where
    M: FnOnce() -> F + Send + 'static,
    F: Future<Output = Result<f64, Error>> + Send + 'static,
{
    let inner = &queue.inner;
    let count = calls.len() as u64;
    let first = inner.next_call.fetch_add(count, Ordering::Relaxed);
    let mut outcomes = Vec::with_capacity(calls.len());
    let mut started = Vec::with_capacity(calls.len());
    let mut refused = Vec::new();
    for ((tag, call), id) in calls.into_iter().zip(first..) {
        match call {
            Ok(call) => {
                outcomes.push((id, wool_status::Ok));
                started.push((id, tag, call));
            }
            Err(error) => {
                outcomes.push((id, wool_status::from(error.kind())));
                refused.push((tag, id, error));
            }
        }
    }
    {
        let mut state = inner.lock();
        if state.freed() {
            return Err(Error::invalid_argument("queue: queue handle already freed"));
        }
        for (id, tag, _) in &started {
            state.calls.insert(
                *id,
                Call {
                    tag: *tag,
                    kind,
                    task: None,
                },
            );
        }
    }
    let ids: Vec<u64> = started.iter().map(|(id, _, _)| *id).collect();
    let tasks = started
        .into_iter()
        .map(|(id, _, make)| {
            let call = async move {
                let outcome = make().await;
                move |tag, id| wool_completion_ex::of_call(kind, tag, id, outcome, function)
            };
            // Boxed once here: a call's future is kilobytes, and the batch moves it several
            // times on its way into its task.
            Box::pin(completing(Arc::clone(inner), id, kind, call))
        })
        .collect();
    let recorder = Arc::clone(inner);
    let spawned = runtime::spawn_batch(tasks, move |tasks| {
        let mut state = recorder.lock();
        for (id, task) in ids.iter().zip(tasks) {
            match state.calls.get_mut(id) {
                Some(call) => call.task = Some(task),
                None => task.abort(), // cancelled (or the queue freed) before it was recorded
            }
        }
    });
    if let Err(error) = spawned {
        let mut state = inner.lock();
        for id in first..first + count {
            state.calls.remove(&id);
        }
        return Err(error);
    }
    if !refused.is_empty() {
        let mut state = inner.lock();
        if !state.freed() {
            for (tag, id, error) in refused {
                state.push(wool_completion_ex::of_call(
                    kind,
                    tag,
                    id,
                    Err(error),
                    function,
                ));
            }
            inner.announce(&state);
        }
    }
    Ok(outcomes)
}

/// The completion of call `id` (of `kind`, tagged `tag`) that panicked: WOOL_STATUS_PANIC,
/// with the panic's message as a panic at the boundary records it.
fn panicked(kind: u32, tag: u64, id: u64, payload: &(dyn Any + Send)) -> wool_completion_ex {
    let mut completion = wool_completion::new(tag, id, Ok(0.0), "");
    completion.status = wool_status::Panic;
    let text = super::last_error::panic_text("a started call", &panic_message(payload));
    super::last_error::fill_message(&mut completion.message, &text);
    wool_completion_ex::new(completion, kind, 0)
}

/// Starts a call whose outcome is one worker's (an idle poll or a stop), completing as
/// `function` (named in a failure's message).
fn start_call<F>(
    queue: &wool_queue,
    tag: u64,
    kind: u32,
    out_call: &mut u64,
    function: &'static str,
    call: F,
) -> Result<(), Error>
where
    F: Future<Output = Result<f64, Error>> + Send + 'static,
{
    // On the heap before it moves further: a worker call's future is large, and each move
    // into a wrapper (here, `start`, the runtime's task) would copy all of it.
    let call = Box::pin(call);
    start(queue, tag, kind, out_call, async move {
        let outcome = call.await;
        move |tag, id| wool_completion_ex::of_call(kind, tag, id, outcome, function)
    })
}

/// Starts an idle poll of the worker behind `conn` without blocking (as wool_idle, which it
/// shares the runtime and pooled connections with). Its completion, tagged `tag`, arrives in
/// `queue`: WOOL_STATUS_OK with the idle seconds, or the status wool_idle would have returned.
/// The call's id is written to `*out_call` (for wool_cancel). Freeing `conn` while the call is
/// in flight is allowed: the call keeps what it needs.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `conn`, `queue` or `out_call`, a freed handle
/// or one of another type, or a bad timeout (as wool_idle); nothing is started then.
///
/// # Safety
/// `out_call` must be NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_idle_start(
    conn: *const wool_connection,
    queue: *const wool_queue,
    timeout_seconds: f64,
    tag: u64,
    out_call: *mut u64,
) -> wool_status {
    ffi_panic_boundary!("wool_idle_start", {
        let conn = handles::get(conn, "conn")?.shared();
        let queue = handles::get(queue, "queue")?;
        // SAFETY: the caller's contract above.
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let timeout = try_timeout(timeout_seconds)?;
        start_call(
            &queue,
            tag,
            WOOL_COMPLETION_KIND_IDLE,
            out_call,
            "wool_idle_start",
            async move { conn.idle(timeout).await },
        )
    })
}

/// Starts a stop (retirement) of the worker behind `conn` without blocking (as wool_stop).
/// Its completion, tagged `tag`, arrives in `queue` (seconds 0). The call's id goes to
/// `*out_call`.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `conn`, `queue` or `out_call`, a freed handle
/// or one of another type, a NaN grace or a bad timeout; nothing is started then.
///
/// # Safety
/// `out_call` must be NULL or writable.
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
        let conn = handles::get(conn, "conn")?.shared();
        let queue = handles::get(queue, "queue")?;
        // SAFETY: the caller's contract above.
        let out_call = unsafe { try_mut(out_call, "out_call") }?;
        let grace = try_grace(grace_seconds)?;
        let timeout = try_timeout(timeout_seconds)?;
        start_call(
            &queue,
            tag,
            WOOL_COMPLETION_KIND_STOP,
            out_call,
            "wool_stop_start",
            async move { conn.stop(grace, timeout).await.map(|()| 0.0) },
        )
    })
}

/// Cancels call `call` of `queue`: if it is still in flight, its HTTP/2 stream is reset (the
/// worker sees the cancellation) and it completes at once with WOOL_STATUS_CANCELLED (its
/// completion is in the queue when this returns). A call that already completed, or an
/// unknown id, is left alone: WOOL_STATUS_OK either way, since the race between a completion
/// and a cancel is the host's to lose. A sweep (wool_idle_many_start) cancelled here has its
/// polls in flight cancelled and writes nothing more to its `out_results` once this returns:
/// the host may free that array then (a sweep that completed first has written all of it).
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `queue`, a freed queue or a handle of
/// another type.
///
/// # Safety
/// None beyond the handle rules (docs/C-API.md, "Handles").
#[no_mangle]
pub unsafe extern "C" fn wool_cancel(queue: *const wool_queue, call: u64) -> wool_status {
    ffi_panic_boundary!("wool_cancel", {
        let queue = handles::get(queue, "queue")?;
        let inner = &queue.inner;
        let mut state = inner.lock();
        if let Some(Call { tag, kind, task }) = state.calls.remove(&call) {
            if let Some(task) = task {
                task.abort();
            }
            let cancelled = Error::new(
                ErrorKind::Cancelled,
                Some(tonic::Code::Cancelled),
                "the call was cancelled by wool_cancel",
            );
            state.push(wool_completion_ex::of_call(
                kind,
                tag,
                call,
                Err(cancelled),
                "wool_cancel",
            ));
            inner.announce(&state);
        }
        Ok(())
    })
}

/// Collects up to `capacity` completions into `out` (oldest first) and writes how many to
/// `*out_count`. Waits up to `timeout_seconds` for the first one: 0 = do not wait, positive =
/// that long, INFINITY = until one arrives. Returns WOOL_STATUS_OK also when none arrived in
/// time (`*out_count` = 0), and at once, with none, when another thread frees the queue during
/// the wait. A completion's kind and a sweep's result count are left out here:
/// wool_queue_next_sized gives them.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `queue`, `out_count`, or `out` with a
/// non-zero capacity, a freed queue or a handle of another type, or a negative or NaN timeout.
///
/// # Safety
/// `out` must be NULL or `capacity` writable completions; `out_count`
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
        let write = |index: usize, completion: &wool_completion_ex| {
            // SAFETY: `index < capacity`, and `out` has `capacity` writable completions (the
            // caller's contract).
            unsafe { out.add(index).write(completion.completion) }
        };
        // SAFETY: the caller's contract above.
        unsafe {
            collect(
                queue,
                out.is_null(),
                capacity,
                timeout_seconds,
                out_count,
                write,
            )
        }
    })
}

/// As wool_queue_next, writing each completion as a `wool_completion_ex` of
/// `completion_size` bytes: the host passes `sizeof(wool_completion_ex)` as it was compiled,
/// and `out` holds `capacity` elements that many bytes apart. Each element gets the first
/// `min(completion_size, sizeof(wool_completion_ex))` bytes of the library's completion; bytes
/// beyond the library's (a host compiled against a later header) are zeroed. So a host built
/// against an older header reads the fields it knows, and a newer one reads zeros in the
/// fields this library does not have. `completion_size == sizeof(wool_completion)` gives
/// exactly what wool_queue_next gives. The elements need no particular alignment.
///
/// Returns WOOL_STATUS_INVALID_ARGUMENT for NULL `queue`, `out_count`, or `out` with a
/// non-zero capacity, a `completion_size` below `sizeof(wool_completion)` (288), a
/// `capacity * completion_size` that overflows, or a negative or NaN timeout; nothing is
/// collected then.
///
/// # Safety
/// `out` must be NULL or `capacity * completion_size` writable bytes;
/// `out_count` NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn wool_queue_next_sized(
    queue: *const wool_queue,
    out: *mut c_void,
    capacity: usize,
    completion_size: usize,
    timeout_seconds: f64,
    out_count: *mut usize,
) -> wool_status {
    ffi_panic_boundary!("wool_queue_next_sized", {
        const OURS: usize = std::mem::size_of::<wool_completion_ex>();
        if completion_size < std::mem::size_of::<wool_completion>() {
            return Err(Error::invalid_argument(format!(
                "completion_size must be at least sizeof(wool_completion) ({}), got \
                 {completion_size}",
                std::mem::size_of::<wool_completion>()
            )));
        }
        if capacity.checked_mul(completion_size).is_none() {
            return Err(Error::invalid_argument(format!(
                "capacity ({capacity}) * completion_size ({completion_size}) overflows"
            )));
        }
        let out = out.cast::<u8>();
        let copied = completion_size.min(OURS);
        let write = |index: usize, completion: &wool_completion_ex| {
            // SAFETY: `index < capacity`; element `index` is `completion_size` writable bytes at
            // `index * completion_size` (no overflow: checked above); `completion` is a
            // `wool_completion_ex`, which has no padding, so its first `copied <= OURS` bytes
            // are initialized. Byte copies need no alignment.
            unsafe {
                let element = out.add(index * completion_size);
                std::ptr::copy_nonoverlapping(
                    (completion as *const wool_completion_ex).cast::<u8>(),
                    element,
                    copied,
                );
                std::ptr::write_bytes(element.add(copied), 0, completion_size - copied);
            }
        };
        // SAFETY: the caller's contract above.
        unsafe {
            collect(
                queue,
                out.is_null(),
                capacity,
                timeout_seconds,
                out_count,
                write,
            )
        }
    })
}

/// The body of wool_queue_next and wool_queue_next_sized: checks the arguments, waits as
/// `timeout_seconds` says, and hands up to `capacity` completions to `write` with their index.
///
/// # Safety
/// `out_count` must be NULL or writable; `write` must be sound for every
/// index below `capacity` (`out_null` says whether the host's array is NULL).
unsafe fn collect(
    queue: *const wool_queue,
    out_null: bool,
    capacity: usize,
    timeout_seconds: f64,
    out_count: *mut usize,
    write: impl FnMut(usize, &wool_completion_ex),
) -> Result<(), Error> {
    let queue = handles::get(queue, "queue")?;
    // SAFETY: the caller's contract above.
    let out_count = unsafe { try_mut(out_count, "out_count") }?;
    if capacity > 0 && out_null {
        return Err(Error::invalid_argument("out is NULL"));
    }
    if timeout_seconds.is_nan() || timeout_seconds < 0.0 {
        return Err(Error::invalid_argument(format!(
            "timeout must be 0, positive seconds or infinity, got {timeout_seconds}"
        )));
    }
    let mut state = queue.inner.wait_ready(timeout_seconds);
    *out_count = state.pop(capacity, write);
    Ok(())
}

/// The layout the header promises: `wool_completion` is 0.4's, 288 bytes, and
/// `wool_completion_ex` starts with it and has no padding (wool_queue_next_sized copies its
/// bytes).
const _: () = {
    assert!(std::mem::size_of::<wool_completion>() == 288);
    assert!(std::mem::size_of::<wool_completion_ex>() == 288 + 16);
    assert!(std::mem::offset_of!(wool_completion_ex, kind) == 288);
    assert!(std::mem::offset_of!(wool_completion_ex, count) == 296);
};

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects one completion from `queue`, waiting at most 10 s.
    fn next_completion(queue: *mut wool_queue) -> wool_completion_ex {
        let mut out = std::mem::MaybeUninit::<wool_completion_ex>::zeroed();
        let mut count = 0usize;
        // SAFETY: a live queue, room for one completion of this size, a writable count.
        let status = unsafe {
            wool_queue_next_sized(
                queue,
                out.as_mut_ptr().cast(),
                1,
                std::mem::size_of::<wool_completion_ex>(),
                10.0,
                &mut count,
            )
        };
        assert_eq!(status, wool_status::Ok);
        assert_eq!(count, 1, "no completion within 10 s");
        // SAFETY: one completion was written.
        unsafe { out.assume_init() }
    }

    fn message(completion: &wool_completion_ex) -> String {
        // SAFETY: the message is NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(completion.completion.message.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_started_call_that_panics_still_completes_with_the_panic_status() {
        let mut queue = std::ptr::null_mut();
        // SAFETY: a writable out-pointer.
        assert_eq!(unsafe { wool_queue_new(&mut queue) }, wool_status::Ok);
        let live = handles::get(queue.cast_const(), "queue").unwrap();
        let live = &*live;

        // The call's future panics.
        let mut call = 0;
        start(live, 7, WOOL_COMPLETION_KIND_IDLE, &mut call, async {
            if call_panics() {
                panic!("inside the started call");
            }
            |tag, id| wool_completion_ex::of_call(WOOL_COMPLETION_KIND_IDLE, tag, id, Ok(1.0), "")
        })
        .unwrap();
        let completion = next_completion(queue);
        assert_eq!(completion.completion.status, wool_status::Panic);
        assert_eq!(
            (completion.completion.tag, completion.completion.call),
            (7, call)
        );
        assert_eq!(completion.kind, WOOL_COMPLETION_KIND_IDLE);
        assert!(
            message(&completion).contains("inside the started call"),
            "{}",
            message(&completion)
        );

        // The completion it makes panics (where a sweep writes its results).
        start(live, 8, WOOL_COMPLETION_KIND_SWEEP, &mut call, async {
            |_: u64, _: u64| -> wool_completion_ex {
                if call_panics() {
                    panic!("while completing");
                }
                unreachable!()
            }
        })
        .unwrap();
        let completion = next_completion(queue);
        assert_eq!(completion.completion.status, wool_status::Panic);
        assert_eq!(
            (completion.completion.tag, completion.kind),
            (8, WOOL_COMPLETION_KIND_SWEEP)
        );
        assert!(message(&completion).contains("while completing"));

        // The queue still works afterwards.
        start(live, 9, WOOL_COMPLETION_KIND_IDLE, &mut call, async {
            |tag, id| wool_completion_ex::of_call(WOOL_COMPLETION_KIND_IDLE, tag, id, Ok(2.5), "")
        })
        .unwrap();
        let completion = next_completion(queue);
        assert_eq!(completion.completion.status, wool_status::Ok);
        assert_eq!(completion.completion.seconds, 2.5);
        // SAFETY: from wool_queue_new, freed once.
        unsafe { wool_queue_free(queue) };
    }

    /// True, opaquely to the compiler (so the code after a panic is not unreachable).
    fn call_panics() -> bool {
        std::hint::black_box(true)
    }
}
