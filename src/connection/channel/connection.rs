//! An open HTTP/2 connection: the handle calls start streams on, what its task, keepalive and
//! calls share, what an h2 error on it is reported as, the check that the worker has not hung
//! up, and the task that drives it.

use std::future::Future;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::runtime::RuntimeFlavor;

use super::config::Keepalive;
use super::failure::{io_failure, tls_rejection};
use crate::connection::error::{Cause, TransportFailure};
use crate::connection::transport::LastHeard;

/// The connection future, boxed: it is the same type whatever the socket.
pub(super) type Connection = Pin<Box<dyn Future<Output = Result<(), h2::Error>> + Send>>;

/// An open HTTP/2 connection: the handle to start streams on, what the connection task and the
/// calls know about it, and the task itself.
#[derive(Clone)]
pub(super) struct Open {
    pub(super) send: SendRequest<Bytes>,
    pub(super) state: Arc<ConnectionState>,
    /// The socket's descriptor, for [`Open::peer_hung_up`].
    pub(super) fd: RawFd,
    /// When the worker was last heard from on this connection (see [`Open::peer_hung_up`]).
    pub(super) heard: Arc<LastHeard>,
    /// The connection task, to see whether it has finished (see [`Http2Channel::close`](super::Http2Channel::close)).
    pub(super) task: Arc<tokio::task::AbortHandle>,
}

/// What the connection task, the keepalive and the calls on one connection share.
pub(super) struct ConnectionState {
    /// The target, for messages.
    pub(super) target: String,
    /// The connection task has ended (the connection broke, or the worker or we closed it).
    pub(super) ended: AtomicBool,
    /// The keepalive ended the connection: a PING went unanswered.
    pub(super) keepalive_expired: AtomicBool,
    /// Set by the socket of a plaintext connection when the worker's first bytes are a TLS
    /// record: the worker expects TLS.
    pub(super) peer_spoke_tls: Arc<AtomicBool>,
    /// For a TLS connection: the TLS failure its socket met after the handshake (the worker
    /// rejected this client's certificate), if any.
    pub(super) tls_failure: Arc<OnceLock<String>>,
    /// Calls between starting their stream and dropping their response (counted only when
    /// keepalive waits for calls: `without_calls` false).
    pub(super) calls: AtomicUsize,
    /// Keepalive PINGs sent since a call last started (gRPC's "pings without data").
    pub(super) pings_without_data: AtomicU32,
    /// The keepalive settings in force, if any (what the timeout message reports).
    pub(super) keepalive: Option<Keepalive>,
    /// The keepalive task, if there is one: the connection task aborts it as it ends.
    pub(super) keepalive_task: OnceLock<tokio::task::AbortHandle>,
    /// The connection future, polled by the connection task or, while it waits for its answer,
    /// by a call (see [`ConnectionState::drive_while`]).
    pub(super) driven: Mutex<Driven>,
}

/// The connection future and who polls it.
///
/// The connection task polls it, except while a call on a current-thread runtime waits for its
/// response head: then that call polls it itself, inside its own future
/// ([`ConnectionState::drive_while`]). On a runtime driven by the caller's `block_on` (the C
/// ABI's blocking calls) this is what saves a system call a call: when the connection task reads the answer and wakes the call, tokio's
/// current-thread scheduler makes one more `epoll_wait` (zero timeout) before it polls the
/// woken `block_on` future again; read inside that future, the answer is there at once. One
/// call at a time polls the connection; the others wait for their answers as before, read by
/// whoever polls it. Both poll it with one waker ([`Forward`]) that hands a wake-up to the call
/// polling it, if there is one, else to the connection task; so when the call stops, the
/// socket's and h2's wake-ups go to the connection task again without another poll, and the
/// task is woken then only if a wake-up reached the call after its last poll.
pub(super) struct Driven {
    connection: Option<Connection>,
    /// How the connection ended, when a call saw it end: for the connection task to report.
    ended: Option<Result<(), h2::Error>>,
    forward: Arc<Forward>,
    /// `forward` as a waker.
    waker: Waker,
}

/// The waker the connection is polled with on the connection task's behalf: it wakes the
/// task, or, while a call polls the connection, that call. A wake-up registered with the
/// socket or h2 before the call took over thus reaches whoever polls the connection now.
struct Forward {
    /// A call polls the connection now.
    by_call: AtomicBool,
    /// A wake-up came since the call polling the connection last polled it (set before
    /// `by_call` is read, so a wake-up racing the call's end is never lost).
    woken: AtomicBool,
    /// The connection task's waker (from its last poll).
    task: Mutex<Option<Waker>>,
    /// The waker of the call polling the connection (from its last poll).
    call: Mutex<Option<Waker>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Keeps `waker` in `slot` unless what is there wakes the same task.
fn keep_waker(slot: &Mutex<Option<Waker>>, waker: &Waker) {
    let mut slot = locked(slot);
    if !slot.as_ref().is_some_and(|kept| kept.will_wake(waker)) {
        *slot = Some(waker.clone());
    }
}

impl std::task::Wake for Forward {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        let to = if self.by_call.load(Ordering::SeqCst) {
            &self.call
        } else {
            &self.task
        };
        let waker = locked(to).clone();
        if let Some(waker) = waker {
            waker.wake();
        }
    }
}

impl Driven {
    pub(super) fn new(connection: Connection) -> Self {
        let forward = Arc::new(Forward {
            by_call: AtomicBool::new(false),
            woken: AtomicBool::new(false),
            task: Mutex::new(None),
            call: Mutex::new(None),
        });
        Self {
            connection: Some(connection),
            ended: None,
            waker: Waker::from(Arc::clone(&forward)),
            forward,
        }
    }

    /// Polls the connection with `cx`; once it ends, keeps how for the connection task (woken).
    fn poll_connection(&mut self, cx: &mut Context<'_>) {
        let Some(connection) = self.connection.as_mut() else {
            return;
        };
        if let Poll::Ready(ended) = connection.as_mut().poll(cx) {
            self.connection = None;
            self.ended = Some(ended);
            let task = locked(&self.forward.task).clone();
            if let Some(task) = task {
                task.wake();
            }
        }
    }

    /// Polls the connection with the [`Forward`] waker, for the connection task or for the
    /// call polling it.
    fn poll_forwarded(&mut self) {
        let waker = self.waker.clone();
        self.poll_connection(&mut Context::from_waker(&waker));
    }
}

impl ConnectionState {
    fn driven(&self) -> MutexGuard<'_, Driven> {
        locked(&self.driven)
    }

    /// The connection task's poll: `Ready` with how the connection ended; `Pending` while it
    /// runs, or while a call polls it.
    fn poll_by_task(&self, cx: &mut Context<'_>) -> Poll<Result<(), h2::Error>> {
        let mut driven = self.driven();
        if let Some(ended) = driven.ended.take() {
            return Poll::Ready(ended);
        }
        if driven.connection.is_none() {
            return Poll::Ready(Ok(()));
        }
        keep_waker(&driven.forward.task, cx.waker());
        if !driven.forward.by_call.load(Ordering::SeqCst) {
            driven.poll_forwarded();
            if let Some(ended) = driven.ended.take() {
                return Poll::Ready(ended);
            }
        }
        Poll::Pending
    }

    /// Awaits `future` (a call's response head), polling the connection inside it meanwhile
    /// unless another call does (see [`Driven`]).
    pub(super) async fn drive_while<F: Future>(&self, future: F) -> F::Output {
        // Only a current-thread runtime has the extra wait to save; on a multi-thread one the
        // connection task, run by another worker thread, reads the answers of every call at
        // once (a sweep of 1,000 workers, 100 in flight: 22 ms, against 33–41 ms with each
        // call driving its connection).
        let current_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|handle| handle.runtime_flavor() == RuntimeFlavor::CurrentThread);
        let driving = if current_thread {
            CallDriving::begin(self)
        } else {
            None
        };
        let Some(_driving) = driving else {
            return future.await;
        };
        let mut future = std::pin::pin!(future);
        std::future::poll_fn(|cx| {
            {
                let mut driven = self.driven();
                keep_waker(&driven.forward.call, cx.waker());
                driven.forward.woken.store(false, Ordering::SeqCst);
                driven.poll_forwarded();
            }
            future.as_mut().poll(cx)
        })
        .await
    }
}

/// A call's turn at polling the connection (see [`Driven`]); ending it hands the connection's
/// wake-ups back to the connection task.
struct CallDriving<'a>(&'a ConnectionState);

impl<'a> CallDriving<'a> {
    fn begin(state: &'a ConnectionState) -> Option<Self> {
        let driven = state.driven();
        if driven.forward.by_call.load(Ordering::SeqCst) || driven.connection.is_none() {
            return None;
        }
        driven.forward.by_call.store(true, Ordering::SeqCst);
        Some(Self(state))
    }
}

impl Drop for CallDriving<'_> {
    fn drop(&mut self) {
        let driven = self.0.driven();
        driven.forward.by_call.store(false, Ordering::SeqCst);
        *locked(&driven.forward.call) = None;
        // The connection's wake-ups reach the task from now on; one that reached this call
        // after its last poll is handed on.
        if driven.forward.woken.swap(false, Ordering::SeqCst) {
            let task = locked(&driven.forward.task).clone();
            if let Some(task) = task {
                task.wake();
            }
        }
    }
}

impl ConnectionState {
    /// The [`TransportFailure`] for an h2 error on this connection, sorted by the error's type.
    pub(super) fn failure(&self, error: &h2::Error) -> TransportFailure {
        let target = &self.target;
        if self.keepalive_expired.load(Ordering::Acquire) {
            let timeout = self.keepalive.map(|k| k.timeout).unwrap_or_default();
            return TransportFailure::new(
                Cause::KeepaliveTimeout,
                format!(
                    "the worker at {target} stopped answering keepalive pings (no PING ack \
                     within {:.3} s): it is frozen or its network path is cut",
                    timeout.as_secs_f64()
                ),
            );
        }
        if let Some(reason) = self.tls_failure.get() {
            return tls_rejection(target, reason);
        }
        if self.peer_spoke_tls.load(Ordering::Acquire) {
            return TransportFailure::new(
                Cause::Tls,
                format!(
                    "TLS mismatch: the worker at {target} answered with TLS, but this \
                     connection is plaintext (give the connection TLS credentials)"
                ),
            );
        }
        if let Some(io) = error.get_io() {
            return io_failure(target, "connection", io);
        }
        let reason = error.reason().unwrap_or(h2::Reason::INTERNAL_ERROR);
        let cause = if error.is_go_away() && error.is_remote() {
            Cause::GoingAway
        } else if error.is_reset() && error.is_remote() {
            match reason {
                h2::Reason::REFUSED_STREAM => Cause::GoingAway,
                h2::Reason::CANCEL => Cause::Cancelled,
                h2::Reason::ENHANCE_YOUR_CALM => Cause::Exhausted,
                _ => Cause::Protocol,
            }
        } else {
            Cause::Protocol
        };
        TransportFailure::new(
            cause,
            format!("HTTP/2 with the worker at {target}: {error}"),
        )
    }
}

/// How recently the worker must have been heard from on a connection (a read that gave bytes)
/// for a call to go ahead on it without asking the socket whether the worker hung up: 10 ms.
///
/// The question costs a system call a call, and it is there for a host whose runtime sits idle
/// between calls (see [`Http2Channel::connection`](super::Http2Channel::connection)), which
/// then polls seconds or minutes apart: such a call always asks. A host calling back to back
/// (a poll loop, a sweep) is heard from microseconds before its next call and skips it. What
/// the skip can miss is a worker that closed the connection within these 10 ms of its last
/// answer. That is the race every call already runs between the question and its write (a
/// worker dying in between): h2 fails the call on the closed connection as a
/// [`TransportFailure`] (a transient error), the connection task sees the hang-up as it does
/// so, and the next call dials anew. A worker that hung up longer ago is caught by the question
/// as before, and a worker that stops gracefully says GOAWAY first, which h2 turns into a
/// refused call whatever this bound. Workers close connections that have been quiet (grpcio's
/// idle and keepalive limits, a full eviction table's least recently heard from), never one
/// answered moments ago.
pub(super) const RECENTLY_HEARD: Duration = Duration::from_millis(10);

impl Open {
    pub(super) fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
    }

    /// Whether the worker hung up without the connection task having seen it: not asked of the
    /// socket when the worker was heard from less than [`RECENTLY_HEARD`] ago (then `false`),
    /// else [`peer_hung_up`](Self::peer_hung_up).
    pub(super) fn hung_up_unseen(&self) -> bool {
        !self.heard.within(RECENTLY_HEARD) && self.peer_hung_up()
    }

    /// Whether the worker closed or reset the connection (`poll` reports RDHUP, HUP or ERR on
    /// its socket) without the connection task having seen it yet.
    pub(super) fn peer_hung_up(&self) -> bool {
        let mut socket = libc::pollfd {
            fd: self.fd,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: `poll` is given a valid pointer to one initialised `pollfd` on this stack
        // frame, a count of 1 and a zero timeout, and only reports on the descriptor: it does not
        // read, write or close it, so it disturbs no file, whoever owns the number. That the
        // number is still this connection's socket is not guaranteed: the connection task owns
        // the socket and may close it right after the `is_ended` check (the check and this call
        // are not atomic), and the number may then be reused by any file the process opens.
        // Neither is undefined behaviour: on a closed number the kernel answers POLLNVAL, on a
        // reused one it reports on the other file. And the answer is only a hint. The socket is
        // closed only when its connection has ended, so a wrong answer concerns a dead
        // connection: "no hang-up" (POLLNVAL is not among the bits tested) lets the call go
        // ahead on it, and h2 fails the call as it would have without this check; a hang-up
        // read off another file makes the channel dial afresh in place of the dead connection.
        let ready = unsafe { libc::poll(&mut socket, 1, 0) };
        ready > 0 && socket.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

/// The connection task: drives the HTTP/2 connection until it ends, then stops its keepalive
/// task. A PING that goes unanswered aborts this task (see
/// [`keepalive_task`](super::keepalive::keepalive_task)): the connection is dropped, which fails
/// every call on it.
pub(super) async fn drive(state: Arc<ConnectionState>, interval_ms: Arc<AtomicU64>) {
    // Marks the connection ended however this task ends, also when it is dropped unfinished
    // (aborted by the keepalive, or the runtime it was spawned on shut down), and drops the
    // connection then, which fails every call on it: the next call dials anew. The keepalive
    // task ends with it.
    struct Ended(Arc<ConnectionState>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.ended.store(true, Ordering::Release);
            drop(self.0.driven().connection.take());
            if let Some(keepalive) = self.0.keepalive_task.get() {
                keepalive.abort();
            }
        }
    }
    let _ended = Ended(Arc::clone(&state));
    let ended = std::future::poll_fn(|cx| state.poll_by_task(cx)).await;
    if let Err(error) = ended {
        tracing::debug!(target = %state.target, "worker connection ended: {error}");
        if error.is_go_away()
            && error.is_remote()
            && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
        {
            // The worker's ping policy refused our PINGs as too frequent: ping half as often
            // from now on (gRPC's client does the same on `too_many_pings`).
            let doubled = interval_ms.load(Ordering::Relaxed).saturating_mul(2);
            interval_ms.store(doubled, Ordering::Relaxed);
            tracing::warn!(target = %state.target, interval_ms = doubled,
                "the worker refused our keepalive pings as too many (ENHANCE_YOUR_CALM): pinging less often");
        }
    }
}
