//! The scaler's Prometheus metrics (prometheus-client, text exposition), served on
//! `--metrics-listen` and given by [`ScalerHandle::metrics_text`](super::ScalerHandle).
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `wool_scaler_workers` | gauge | `scaledobject`, `fleet`, `state` | the last answer's workers by state: `busy`, `idle`, `unreachable`, `idle_unavailable` |
//! | `wool_scaler_busy_workers` | gauge | `scaledobject`, `fleet` | the metric last given (busy, plus what the metadata counts as busy, plus the ScaledObject's waiting tasks) |
//! | `wool_scaler_active` | gauge | `scaledobject`, `fleet` | the last `IsActive` answer, 1 or 0 |
//! | `wool_scaler_calls_total` | counter | `rpc`, `answer` | calls answered: `swept` (a sweep was made for it), `cached`, or `failed` |
//! | `wool_scaler_sweeps_total` | counter | `outcome` | sweeps made: `ok`, or `failed` (the members could not be listed) |
//! | `wool_scaler_sweep_duration_seconds` | histogram | | how long each sweep took, listing included |
//! | `wool_scaler_series_refused_total` | counter | | answers not recorded because [`MAX_OBJECTS`] (ScaledObject, fleet) pairs already have series |
//! | `wool_scaler_demand_reports_total` | counter | `outcome` | demand reports: `accepted`, or refused: `unauthenticated`, `invalid_name`, `too_many_waiting`, `rate_limited`, `too_many_scaled_objects`, `too_many_clients` |
//! | `wool_scaler_demand_waiting` | gauge | `scaledobject` | the ScaledObject's waiting tasks, summed over its clients; a series only while it has demand (so at most `--max-demand-scaled-objects` of them) |
//! | `wool_scaler_demand_clients` | gauge | | clients with live demand (a figure above 0), over every ScaledObject |
//! | `wool_scaler_demand_expired_total` | counter | | figures that ended at their TTL, not renewed or withdrawn |
//!
//! `scaledobject` is the ScaledObject's `namespace/name`, `fleet` where its workers come from
//! (`namespace batch`, `DNS workers.default.svc port 50051`, `3 listed targets`); a value longer
//! than [`MAX_LABEL_BYTES`] is cut, and ends with `~` and 16 hex digits of a hash of the whole,
//! so that two long values stay apart. The series of a ScaledObject and fleet no call has asked
//! about for 10 minutes are removed; at most [`MAX_OBJECTS`] pairs have series at once.

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

use super::target_group::{Count, PatchOutcome};

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

/// The longest label value (bytes) a series gets; a longer one is cut (see the module's docs).
pub(crate) const MAX_LABEL_BYTES: usize = 128;

/// Most (ScaledObject, fleet) pairs with series at once (each has six).
pub(crate) const MAX_OBJECTS: usize = 4096;

/// `value`, or when longer than [`MAX_LABEL_BYTES`] its start (cut at a character boundary)
/// followed by `~` and 16 hex digits of a hash of the whole: [`MAX_LABEL_BYTES`] at most.
pub(crate) fn bounded_label(value: &str) -> String {
    use std::hash::{Hash, Hasher};
    if value.len() <= MAX_LABEL_BYTES {
        return value.to_owned();
    }
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.hash(&mut hasher);
    let suffix = format!("~{:016x}", hasher.finish());
    let mut end = MAX_LABEL_BYTES - suffix.len();
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{suffix}", &value[..end])
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct CallLabels {
    rpc: &'static str,
    answer: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct PatchLabels {
    fleet: String,
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct SweepLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct ReportLabels {
    outcome: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
struct DemandLabels {
    scaledobject: String,
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
    patches: Family<PatchLabels, Counter>,
    sweep_seconds: Histogram,
    series_refused: Counter,
    demand_reports: Family<ReportLabels, Counter>,
    demand_waiting: Family<DemandLabels, Gauge>,
    demand_clients: Gauge,
    demand_expired: Counter,
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
            patches: Family::default(),
            // 1 ms to about 16 s.
            sweep_seconds: Histogram::new(exponential_buckets(0.001, 2.0, 15)),
            series_refused: Counter::default(),
            demand_reports: Family::default(),
            demand_waiting: Family::default(),
            demand_clients: Gauge::default(),
            demand_expired: Counter::default(),
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
            "deletion_cost_patches",
            "Pod deletion cost patches, by fleet and outcome (made, refused: past the fleet's \
             bound on patches, error)",
            metrics.patches.clone(),
        );
        registry.register(
            "sweep_duration_seconds",
            "How long each sweep took, listing the members included",
            metrics.sweep_seconds.clone(),
        );
        registry.register(
            "series_refused",
            "Answers not recorded in series: the most (ScaledObject, fleet) pairs already have them",
            metrics.series_refused.clone(),
        );
        registry.register(
            "demand_reports",
            "Demand reports, by outcome (accepted, or why refused: unauthenticated, \
             invalid_name, too_many_waiting, rate_limited, too_many_scaled_objects, \
             too_many_clients)",
            metrics.demand_reports.clone(),
        );
        registry.register(
            "demand_waiting",
            "Tasks waiting for a worker, reported by clients, per ScaledObject with demand",
            metrics.demand_waiting.clone(),
        );
        registry.register(
            "demand_clients",
            "Clients with live demand (a figure above 0), over every ScaledObject",
            metrics.demand_clients.clone(),
        );
        registry.register(
            "demand_expired",
            "Demand figures that ended at their TTL, neither renewed nor withdrawn",
            metrics.demand_expired.clone(),
        );
        Self {
            registry,
            ..metrics
        }
    }

    /// Records what the last answer for `scaledobject` about `fleet` counted (the labels cut
    /// by [`bounded_label`]); removes the series nothing was recorded for in [`STALE_AFTER`]
    /// (looked at once a minute, and whenever [`MAX_OBJECTS`] pairs have series). A new pair
    /// past [`MAX_OBJECTS`] is not recorded (counted in `wool_scaler_series_refused_total`).
    pub(crate) fn record(&self, scaledobject: &str, fleet: &str, count: &Count) {
        let labels = ObjectLabels {
            scaledobject: bounded_label(scaledobject),
            fleet: bounded_label(fleet),
        };
        let mut seen = self.seen.lock().expect("not poisoned");
        let (last, pruned) = &mut *seen;
        let full = !last.contains_key(&labels) && last.len() >= MAX_OBJECTS;
        if full || pruned.elapsed() >= Duration::from_secs(60) {
            *pruned = Instant::now();
            self.prune(last);
        }
        if !last.contains_key(&labels) && last.len() >= MAX_OBJECTS {
            self.series_refused.inc();
            return;
        }
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
        last.insert(labels, Instant::now());
    }

    /// Removes the series of the pairs nothing was recorded for in [`STALE_AFTER`].
    fn prune(&self, last: &mut HashMap<ObjectLabels, Instant>) {
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

    /// Counts one pod deletion cost patch of `fleet` (its label cut by [`bounded_label`]).
    pub(crate) fn deletion_cost_patch(&self, fleet: &str, outcome: PatchOutcome) {
        let outcome = match outcome {
            PatchOutcome::Made => "made",
            PatchOutcome::Refused => "refused",
            PatchOutcome::Error => "error",
        };
        self.patches
            .get_or_create(&PatchLabels {
                fleet: bounded_label(fleet),
                outcome,
            })
            .inc();
    }

    pub(crate) fn sweep_failed(&self) {
        self.sweeps
            .get_or_create(&SweepLabels { outcome: "failed" })
            .inc();
    }

    /// Counts one demand report by its outcome (`accepted`, or a refusal's).
    pub(crate) fn demand_report(&self, outcome: &'static str) {
        self.demand_reports
            .get_or_create(&ReportLabels { outcome })
            .inc();
    }

    /// Sets `scaledobject`'s waiting tasks (its label cut by [`bounded_label`]).
    pub(crate) fn demand_waiting(&self, scaledobject: &str, waiting: u64) {
        self.demand_waiting
            .get_or_create(&DemandLabels {
                scaledobject: bounded_label(scaledobject),
            })
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
    }

    /// Removes `scaledobject`'s waiting series: it has no demand left.
    pub(crate) fn demand_gone(&self, scaledobject: &str) {
        self.demand_waiting.remove(&DemandLabels {
            scaledobject: bounded_label(scaledobject),
        });
    }

    /// Sets the number of clients with live demand.
    pub(crate) fn demand_clients(&self, clients: usize) {
        self.demand_clients
            .set(i64::try_from(clients).unwrap_or(i64::MAX));
    }

    /// Counts one figure ended at its TTL.
    pub(crate) fn demand_expired(&self) {
        self.demand_expired.inc();
    }

    /// The text exposition now.
    pub(crate) fn encode(&self) -> String {
        let mut text = String::new();
        encode(&mut text, &self.registry).expect("writing to a String cannot fail");
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_label_values_are_cut_and_stay_apart() {
        let short = "default/workers";
        assert_eq!(bounded_label(short), short);
        let exact = "x".repeat(MAX_LABEL_BYTES);
        assert_eq!(bounded_label(&exact), exact);
        let a = format!("{}a", "é".repeat(5000));
        let b = format!("{}b", "é".repeat(5000));
        let (cut_a, cut_b) = (bounded_label(&a), bounded_label(&b));
        assert!(cut_a.len() <= MAX_LABEL_BYTES, "{}", cut_a.len());
        assert!(cut_a.starts_with("éé"));
        assert_ne!(cut_a, cut_b);
    }

    #[test]
    fn series_stop_at_the_most_pairs_and_count_the_refused() {
        let metrics = ScalerMetrics::new();
        let count = Count::default();
        for i in 0..MAX_OBJECTS + 10 {
            metrics.record(&format!("ns/so-{i}"), "fleet", &count);
        }
        // A pair already recorded is still updated.
        metrics.record("ns/so-0", "fleet", &count);
        let text = metrics.encode();
        let series = text
            .lines()
            .filter(|l| l.starts_with("wool_scaler_busy_workers{"))
            .count();
        assert_eq!(series, MAX_OBJECTS);
        assert!(
            text.contains("wool_scaler_series_refused_total 10"),
            "{text}"
        );
    }
}
