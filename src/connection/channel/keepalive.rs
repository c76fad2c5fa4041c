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

/// Sends a PING every interval and waits up to the timeout for its ack; returns when one goes
/// unanswered. Respects `without_calls` and `max_pings_without_data` as gRPC's client does.
pub(super) async fn keep_alive(
    mut ping_pong: h2::PingPong,
    settings: Keepalive,
    state: &ConnectionState,
    interval_ms: &AtomicU64,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(interval_ms.load(Ordering::Relaxed))).await;
        if !settings.without_calls && state.calls.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let sent = state.pings_without_data.fetch_add(1, Ordering::Relaxed);
        if settings.max_pings_without_data > 0 && sent >= settings.max_pings_without_data {
            continue;
        }
        match tokio::time::timeout(settings.timeout, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is ending anyway; the connection future reports why.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_elapsed) => return,
        }
    }
}
