//! The scaler's Prometheus metrics (prometheus-client, text exposition), served on
//! `--metrics-listen` and given by [`ScalerHandle::metrics_text`](super::ScalerHandle).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `wool_scaler_workers` | gauge | `scaledobject`, `fleet`, `state` | the last answer's workers by state: `busy`, `idle`, `unreachable`, `idle_unavailable` |
//! | `wool_scaler_busy_workers` | gauge | `scaledobject`, `fleet` | the metric last given (busy, plus what the metadata counts as busy) |
//! | `wool_scaler_active` | gauge | `scaledobject`, `fleet` | the last `IsActive` answer, 1 or 0 |
//! | `wool_scaler_calls_total` | counter | `rpc`, `answer` | calls answered: `swept` (a sweep was made for it), `cached`, or `failed` |
//! | `wool_scaler_sweeps_total` | counter | `outcome` | sweeps made: `ok`, or `failed` (the members could not be listed) |
//! | `wool_scaler_sweep_duration_seconds` | histogram | | how long each sweep took, listing included |
//!
//! `scaledobject` is the ScaledObject's `namespace/name`, `fleet` where its workers come from
//! (`namespace batch`, `DNS workers.default.svc port 50051`, `3 listed targets`). The series of a
//! ScaledObject and fleet no call has asked about for 10 minutes are removed.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::fleet::Count;

/// How a call was answered, for `wool_scaler_calls_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    Swept,
    Cached,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ObjectLabels {
    scaledobject: String,
    fleet: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct StateLabels {
    scaledobject: String,
    fleet: String,
    state: &'static str,
}

/// The states `wool_scaler_workers` counts.
const STATES: [&str; 4] = ["busy", "idle", "unreachable", "idle_unavailable"];

/// How long a ScaledObject's series stay after the last call for it.
const STALE_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    rpc: &'static str,
    answer: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SweepLabels {
    outcome: &'static str,
}

/// The scaler's metrics and their registry.
#[derive(Debug)]
pub(crate) struct ScalerMetrics {
    registry: Registry,
    workers: Family<StateLabels, Gauge>,
    busy: Family<ObjectLabels, Gauge>,
    active: Family<ObjectLabels, Gauge>,
    calls: Family<CallLabels, Counter>,
    sweeps: Family<SweepLabels, Counter>,
    sweep_seconds: Histogram,
    /// When each (ScaledObject, fleet) was last recorded, and when stale ones were last removed.
    seen: Mutex<(HashMap<ObjectLabels, Instant>, Instant)>,
}

fn state_labels(labels: &ObjectLabels, state: &'static str) -> StateLabels {
    StateLabels {
        scaledobject: labels.scaledobject.clone(),
        fleet: labels.fleet.clone(),
        state,
    }
}

impl ScalerMetrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("wool_scaler");
        let metrics = Self {
            registry: Registry::default(),
            workers: Family::default(),
            busy: Family::default(),
            active: Family::default(),
            calls: Family::default(),
            sweeps: Family::default(),
            // 1 ms to about 16 s.
            sweep_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            seen: Mutex::new((HashMap::new(), Instant::now())),
        };
        registry.register(
            "workers",
            "Workers of the last answer, by state (busy, idle, unreachable, idle_unavailable)",
            metrics.workers.clone(),
        );
        registry.register(
            "busy_workers",
            "The metric last given: busy workers, plus those the metadata counts as busy",
            metrics.busy.clone(),
        );
        registry.register(
            "active",
            "The last IsActive answer (1 or 0)",
            metrics.active.clone(),
        );
        registry.register(
            "calls",
            "Calls answered, by RPC and how (swept, cached, failed)",
            metrics.calls.clone(),
        );
        registry.register(
            "sweeps",
            "Sweeps made, by outcome (ok, failed: the members could not be listed)",
            metrics.sweeps.clone(),
        );
        registry.register(
            "sweep_duration_seconds",
            "How long each sweep took, listing the members included",
            metrics.sweep_seconds.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// Records what the last answer for `scaledobject` about `fleet` counted; removes the
    /// series nothing was recorded for in [`STALE_AFTER`] (looked at once a minute).
    pub(crate) fn record(&self, scaledobject: &str, fleet: &str, count: &Count) {
        let labels = ObjectLabels {
            scaledobject: scaledobject.to_owned(),
            fleet: fleet.to_owned(),
        };
        let counts = [
            count.busy,
            count.idle,
            count.unreachable,
            count.idle_unavailable,
        ];
        for (state, n) in STATES.into_iter().zip(counts) {
            self.workers
                .get_or_create(&state_labels(&labels, state))
                .set(n as i64);
        }
        self.busy.get_or_create(&labels).set(count.metric as i64);
        self.active
            .get_or_create(&labels)
            .set(i64::from(count.active()));
        let mut seen = self.seen.lock().expect("not poisoned");
        let (last, pruned) = &mut *seen;
        last.insert(labels, Instant::now());
        if pruned.elapsed() >= Duration::from_secs(60) {
            *pruned = Instant::now();
            last.retain(|labels, at| {
                let keep = at.elapsed() < STALE_AFTER;
                if !keep {
                    for state in STATES {
                        self.workers.remove(&state_labels(labels, state));
                    }
                    self.busy.remove(labels);
                    self.active.remove(labels);
                }
                keep
            });
        }
    }

    pub(crate) fn call(&self, rpc: &'static str, answer: Answer) {
        let answer = match answer {
            Answer::Swept => "swept",
            Answer::Cached => "cached",
            Answer::Failed => "failed",
        };
        self.calls.get_or_create(&CallLabels { rpc, answer }).inc();
    }

    pub(crate) fn swept(&self, took: Duration) {
        self.sweeps
            .get_or_create(&SweepLabels { outcome: "ok" })
            .inc();
        self.sweep_seconds.observe(took.as_secs_f64());
    }

    pub(crate) fn sweep_failed(&self) {
        self.sweeps
            .get_or_create(&SweepLabels { outcome: "failed" })
            .inc();
    }

    /// The text exposition now.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}
