//! HTTP/2 keepalive as gRPC's client does it: the PING loop, and the bookkeeping of the calls
//! on a connection that it depends on.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::config::Keepalive;
use super::connection::ConnectionState;

/// One call on a connection, from its stream's start until its response is dropped: what
/// keepalive needs to know of it (gRPC's "pings without data" start again; calls are counted
/// only where PINGs wait for one). Shared counters are written only when they change, so
/// concurrent calls on many threads do not bounce their cache line.
pub(super) struct CallOnConnection {
    pub(super) state: Arc<ConnectionState>,
    counted: bool,
}

impl CallOnConnection {
    pub(super) fn begin(state: &Arc<ConnectionState>) -> Self {
        if state.pings_without_data.load(Ordering::Relaxed) != 0 {
            state.pings_without_data.store(0, Ordering::Relaxed);
        }
        let counted = state.keepalive.is_some_and(|k| !k.without_calls);
        if counted {
            state.calls.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            state: Arc::clone(state),
            counted,
        }
    }
}

impl Drop for CallOnConnection {
    fn drop(&mut self) {
        if self.counted {
            self.state.calls.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// The keepalive task of one connection: sends a PING every interval and waits up to the
/// timeout for its ack. When one goes unanswered it marks the connection's keepalive expired
/// and ends the connection task (`connection`), which fails every call on it (as
/// [`Cause::KeepaliveTimeout`](crate::connection::error::Cause::KeepaliveTimeout)). Returns
/// once the connection has ended otherwise; the connection task also aborts it as it ends.
///
/// A task of its own rather than a branch beside the connection future: the connection task
/// runs several times a call, and a branch there would poll the PING timer each time; this
/// task only wakes when the timer fires.
pub(super) async fn keepalive_task(
    ping_pong: h2::PingPong,
    settings: Keepalive,
    state: Arc<ConnectionState>,
    interval_ms: Arc<AtomicU64>,
    connection: tokio::task::AbortHandle,
) {
    if keep_alive(ping_pong, settings, &state, &interval_ms).await {
        state.keepalive_expired.store(true, Ordering::Release);
        tracing::debug!(target = %state.target, "keepalive PING unanswered: closing the connection");
        connection.abort();
    }
}

/// Sends a PING every interval and waits up to the timeout for its ack: `true` when one goes
/// unanswered, `false` when the connection ended first. Respects `without_calls` and
/// `max_pings_without_data` as gRPC's client does.
async fn keep_alive(
    mut ping_pong: h2::PingPong,
    settings: Keepalive,
    state: &ConnectionState,
    interval_ms: &AtomicU64,
) -> bool {
    loop {
        tokio::time::sleep(Duration::from_millis(interval_ms.load(Ordering::Relaxed))).await;
        if state.ended.load(Ordering::Acquire) {
            return false;
        }
        if !settings.without_calls && state.calls.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let sent = state.pings_without_data.fetch_add(1, Ordering::Relaxed);
        if settings.max_pings_without_data > 0 && sent >= settings.max_pings_without_data {
            continue;
        }
        match tokio::time::timeout(settings.timeout, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is ending anyway; the connection task reports why.
            Ok(Err(_)) => return false,
            Err(_elapsed) => return true,
        }
    }
}
