//! An open HTTP/2 connection: the handle calls start streams on, what its task, keepalive and
//! calls share, the check that the worker has not hung up, and the task that drives it.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use h2::client::SendRequest;

use super::config::Keepalive;
use super::dial::Connection;

/// An open HTTP/2 connection: the handle to start streams on, what the connection task and the
/// calls know about it, and the task itself.
#[derive(Clone)]
pub(super) struct Open {
    pub(super) send: SendRequest<Bytes>,
    pub(super) state: Arc<ConnectionState>,
    /// The socket's descriptor, for [`Open::peer_hung_up`].
    pub(super) fd: RawFd,
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
}

impl Open {
    pub(super) fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
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
pub(super) async fn drive(
    mut connection: Connection,
    state: Arc<ConnectionState>,
    interval_ms: Arc<AtomicU64>,
) {
    // Marks the connection ended however this task ends, also when it is dropped unfinished
    // (aborted by the keepalive, or the runtime it was spawned on shut down): the next call
    // then dials anew. The keepalive task ends with it.
    struct Ended(Arc<ConnectionState>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.ended.store(true, Ordering::Release);
            if let Some(keepalive) = self.0.keepalive_task.get() {
                keepalive.abort();
            }
        }
    }
    let _ended = Ended(Arc::clone(&state));
    let ended = (&mut connection).await;
    drop(connection);
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
