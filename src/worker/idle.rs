//! The in-flight tracker and the idle clock.
//!
//! The worker's idle reading is the number of seconds since its set of in-flight dispatches last
//! became empty (start-up counts as the first empty moment), and exactly `0.0` while anything is in
//! flight — matching the `idle` RPC of Wool's Python worker. The count and the instant it last
//! reached zero live behind one lock and change together at the 0→1 and 1→0 edges, so no
//! interleaving of readers and writers can observe a stale pair. Time is `std::time::Instant`
//! (monotonic). Reading the clock never touches the in-flight set.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The in-flight count and the instant the worker last became idle.
#[derive(Debug, Clone, Copy)]
struct InFlightState {
    /// Number of dispatches currently in flight.
    in_flight: u64,
    /// When `in_flight` last went from 1 to 0 (or the tracker's creation).
    idle_since: Instant,
}

/// Tracks in-flight dispatches and answers how long the worker has been idle.
///
/// Cheap to share (`Arc`); every operation takes one short lock. Dropping an [`InFlightGuard`]
/// ends its dispatch, so a cancelled or panicking dispatch can never leave the clock stuck at 0.
#[derive(Debug)]
pub struct InFlightTracker {
    state: watch::Sender<InFlightState>,
}

impl Default for InFlightTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl InFlightTracker {
    /// A tracker with nothing in flight; the idle clock starts now.
    pub fn new() -> Self {
        let (state, _) = watch::channel(InFlightState {
            in_flight: 0,
            idle_since: Instant::now(),
        });
        Self { state }
    }

    /// Marks one dispatch as in flight until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>) -> InFlightGuard {
        self.state.send_if_modified(|s| {
            s.in_flight += 1;
            false // nobody waits for a count going up
        });
        InFlightGuard {
            tracker: Arc::clone(self),
        }
    }

    fn end(&self) {
        self.state.send_if_modified(|s| {
            s.in_flight -= 1;
            if s.in_flight == 0 {
                s.idle_since = Instant::now();
                true // wake drain waiters
            } else {
                false
            }
        });
    }

    /// Number of dispatches in flight now.
    pub fn in_flight(&self) -> u64 {
        self.state.borrow().in_flight
    }

    /// How long the worker has been continuously idle: `Duration::ZERO` while anything is in
    /// flight, else the time since the in-flight set last became empty.
    pub fn idle(&self) -> Duration {
        let state = *self.state.borrow();
        if state.in_flight > 0 {
            Duration::ZERO
        } else {
            state.idle_since.elapsed()
        }
    }

    /// [`idle`](Self::idle) in seconds, as the `idle` RPC reports it (exactly `0.0` while busy).
    pub fn idle_seconds(&self) -> f64 {
        self.idle().as_secs_f64()
    }

    /// Resolves once nothing is in flight (at once if nothing is).
    pub async fn drained(&self) {
        let mut rx = self.state.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail with a closed channel.
        let _ = rx.wait_for(|s| s.in_flight == 0).await;
    }
}

/// One in-flight dispatch; dropping it ends the dispatch (see [`InFlightTracker::begin`]).
#[derive(Debug)]
pub struct InFlightGuard {
    tracker: Arc<InFlightTracker>,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.tracker.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_accrues_from_creation_when_nothing_ran() {
        let tracker = InFlightTracker::new();
        std::thread::sleep(Duration::from_millis(30));
        let first = tracker.idle();
        assert!(first >= Duration::from_millis(30), "{first:?}");
        std::thread::sleep(Duration::from_millis(10));
        assert!(tracker.idle() > first);
    }

    #[test]
    fn idle_is_exactly_zero_while_in_flight_and_restarts_at_drain() {
        let tracker = Arc::new(InFlightTracker::new());
        std::thread::sleep(Duration::from_millis(50));
        let a = tracker.begin();
        let b = tracker.begin();
        assert_eq!(tracker.idle_seconds(), 0.0);
        assert_eq!(tracker.in_flight(), 2);
        drop(a);
        // One still in flight: still exactly zero.
        assert_eq!(tracker.idle_seconds(), 0.0);
        drop(b);
        assert_eq!(tracker.in_flight(), 0);
        // Restarted from the drain, not from creation (which was >= 50 ms ago).
        assert!(
            tracker.idle() < Duration::from_millis(40),
            "{:?}",
            tracker.idle()
        );
    }

    #[test]
    fn concurrent_begin_end_never_leaves_count_behind() {
        let tracker = Arc::new(InFlightTracker::new());
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let t = Arc::clone(&tracker);
                std::thread::spawn(move || {
                    // Under miri (scripts/sanitizers.sh) every step is interpreted: fewer rounds
                    // still interleave the threads through every edge.
                    let rounds = if cfg!(miri) { 50 } else { 10_000 };
                    for _ in 0..rounds {
                        let g = t.begin();
                        assert_eq!(t.idle_seconds(), 0.0);
                        drop(g);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(tracker.in_flight(), 0);
        assert!(tracker.idle() < Duration::from_secs(5));
    }

    #[tokio::test]
    async fn drained_waits_for_the_last_guard() {
        let tracker = Arc::new(InFlightTracker::new());
        tracker.drained().await; // nothing in flight: immediate
        let guard = tracker.begin();
        let waiter = {
            let t = Arc::clone(&tracker);
            tokio::spawn(async move { t.drained().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiter.is_finished());
        drop(guard);
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("drained resolves after the last guard drops")
            .unwrap();
    }
}
