//! The worker's Prometheus metrics (prometheus-client), in the text exposition format: what a
//! scrape of `--metrics-listen` returns and [`WorkerHandle::metrics_text`](super::WorkerHandle)
//! gives a Rust program that embeds the worker.
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `wool_worker_tasks_in_flight` | gauge | dispatches running now |
//! | `wool_worker_idle_seconds` | gauge | seconds continuously idle (0 while anything runs), as `idle` answers |
//! | `wool_worker_stopping` | gauge | 1 once a stop has begun |
//! | `wool_worker_tasks_started_total` | counter | dispatches accepted (a routine started) |
//! | `wool_worker_tasks_finished_total` | counter | routines that returned a result |
//! | `wool_worker_tasks_failed_total` | counter | routines that failed (an exception), or a value thrown in |
//! | `wool_worker_tasks_cancelled_total` | counter | routines cancelled: by a stop, or their caller went away |
//! | `wool_worker_idle_polls_total` | counter | `idle` calls answered |

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::idle::InFlightTracker;

/// How a dispatched routine ended, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskEnd {
    Finished,
    Failed,
    Cancelled,
}

/// The counters the service updates and the gauges read at each scrape.
#[derive(Debug)]
pub(crate) struct WorkerMetrics {
    registry: Registry,
    in_flight: Gauge,
    idle_seconds: Gauge<f64, AtomicU64>,
    stopping: Gauge,
    started: Counter,
    finished: Counter,
    failed: Counter,
    cancelled: Counter,
    idle_polls: Counter,
}

impl WorkerMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("wool_worker");
        let metrics = Self {
            registry: Registry::default(),
            in_flight: Gauge::default(),
            idle_seconds: Gauge::default(),
            stopping: Gauge::default(),
            started: Counter::default(),
            finished: Counter::default(),
            failed: Counter::default(),
            cancelled: Counter::default(),
            idle_polls: Counter::default(),
        };
        registry.register(
            "tasks_in_flight",
            "Dispatches running now",
            metrics.in_flight.clone(),
        );
        registry.register(
            "idle_seconds",
            "Seconds continuously idle (0 while anything runs), as the idle RPC answers",
            metrics.idle_seconds.clone(),
        );
        registry.register(
            "stopping",
            "1 once a stop has begun",
            metrics.stopping.clone(),
        );
        registry.register(
            "tasks_started",
            "Dispatches accepted (a routine started)",
            metrics.started.clone(),
        );
        registry.register(
            "tasks_finished",
            "Routines that returned a result",
            metrics.finished.clone(),
        );
        registry.register(
            "tasks_failed",
            "Routines that failed, or had a value thrown in",
            metrics.failed.clone(),
        );
        registry.register(
            "tasks_cancelled",
            "Routines cancelled by a stop, or whose caller went away",
            metrics.cancelled.clone(),
        );
        registry.register(
            "idle_polls",
            "idle calls answered",
            metrics.idle_polls.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    pub(crate) fn task_started(&self) {
        self.started.inc();
    }

    pub(crate) fn task_ended(&self, end: TaskEnd) {
        match end {
            TaskEnd::Finished => self.finished.inc(),
            TaskEnd::Failed => self.failed.inc(),
            TaskEnd::Cancelled => self.cancelled.inc(),
        };
    }

    /// The `idle` counter, for the fast path that answers `idle` ahead of the service.
    pub(crate) fn idle_polls(&self) -> Counter {
        self.idle_polls.clone()
    }

    /// The text exposition now, the gauges read from `tracker` and `stopping`.
    pub(crate) fn encode(&self, tracker: &InFlightTracker, stopping: bool) -> String {
        self.in_flight
            .set(i64::try_from(tracker.in_flight()).unwrap_or(i64::MAX));
        self.idle_seconds.set(tracker.idle_seconds());
        self.stopping.set(i64::from(stopping));
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}
