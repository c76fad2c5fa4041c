//! A census: one sweep's poll outcomes, counted by a ScaledObject's rules into busy, idle,
//! unreachable and idle-unavailable workers and the metric.

use std::time::{Duration, Instant};

use crate::connection::Error;
use crate::fleet::Reason;
use crate::scaler::metadata::{CountAs, TriggerSpec};

/// One sweep of a fleet: each member's poll outcome, in a stable order (by address).
#[derive(Debug)]
pub(crate) struct Census {
    /// When the sweep finished.
    pub(crate) at: Instant,
    /// How long it took (listing the members included).
    pub(crate) took: Duration,
    /// `(address, idle seconds or the poll's error)` per member.
    pub(crate) polls: Vec<(String, Result<f64, Error>)>,
}

/// A census counted by one ScaledObject's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Count {
    /// In flight, or idle for less than the threshold.
    pub(crate) busy: usize,
    /// Idle at least the threshold.
    pub(crate) idle: usize,
    /// Not reached (transient or handshake failure, or another failed poll).
    pub(crate) unreachable: usize,
    /// Predates the `idle` RPC.
    pub(crate) idle_unavailable: usize,
    /// Tasks waiting for a worker, as the ScaledObject's clients reported them (the scaler's
    /// demand input).
    pub(crate) waiting: usize,
    /// The metric: `busy`, plus the unreachable and idle-unavailable ones where the metadata
    /// counts them as busy, plus `waiting`.
    pub(crate) metric: usize,
}

impl Count {
    /// `IsActive`: while any worker counts as busy or any task waits.
    pub(crate) fn active(&self) -> bool {
        self.metric > 0
    }

    /// This count with `waiting` tasks waiting (in place of any it had): the metric is then
    /// what the workers count plus `waiting`, so that one waiting task at zero workers is one
    /// replica's worth.
    pub(crate) fn with_waiting(mut self, waiting: u64) -> Self {
        let waiting = usize::try_from(waiting).unwrap_or(usize::MAX);
        self.metric -= self.waiting;
        self.waiting = waiting;
        self.metric = self.metric.saturating_add(waiting);
        self
    }
}

impl Census {
    /// Counts the census by `spec`'s threshold and its rules for workers it could not read
    /// (each poll judged by [`Reason::of_poll`], as the retire policy judges it).
    pub(crate) fn count(&self, spec: &TriggerSpec) -> Count {
        let mut count = Count::default();
        for (_, poll) in &self.polls {
            match Reason::of_poll(poll, spec.idle_threshold) {
                Reason::Busy | Reason::BelowThreshold => count.busy += 1,
                Reason::IdleUnavailable => count.idle_unavailable += 1,
                Reason::Unreachable | Reason::PollFailed => count.unreachable += 1,
                // `of_poll` gives none of the round limits; whatever else it says is idle.
                _ => count.idle += 1,
            }
        }
        let counted = |n: usize, rule: CountAs| if rule == CountAs::Busy { n } else { 0 };
        count.metric = count.busy
            + counted(count.unreachable, spec.unreachable_as)
            + counted(count.idle_unavailable, spec.idle_unavailable_as);
        count
    }
}

/// Whether an answer came from a sweep made for it or from the cached one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    Swept,
    Cached,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::ErrorKind;
    use crate::scaler::target_group::tests::spec;

    #[test]
    fn a_census_counts_by_each_scaled_objects_rules() {
        let failed = |kind| Err(Error::new(kind, None, "test"));
        let census = Census {
            at: Instant::now(),
            took: Duration::ZERO,
            polls: vec![
                ("a".into(), Ok(0.0)),                      // in flight
                ("b".into(), Ok(30.0)),                     // below a 60 s threshold
                ("c".into(), Ok(90.0)),                     // idle past it
                ("d".into(), failed(ErrorKind::Transient)), // unreachable
                ("e".into(), failed(ErrorKind::Handshake)), // unreachable
                ("f".into(), failed(ErrorKind::Rpc)),       // answered nonsense: unreadable
                ("g".into(), failed(ErrorKind::IdleUnavailable)),
            ],
        };
        let by_default = census.count(&spec(&[("targets", "h:1"), ("idleThreshold", "60")]));
        assert_eq!(
            by_default,
            Count {
                busy: 2,
                idle: 1,
                unreachable: 3,
                idle_unavailable: 1,
                waiting: 0,
                metric: 6,
            }
        );
        assert!(by_default.active());
        let demanded = by_default.with_waiting(4);
        assert_eq!((demanded.waiting, demanded.metric), (4, 10));
        assert_eq!(demanded.with_waiting(1).metric, 7);
        let lenient = census.count(&spec(&[
            ("targets", "h:1"),
            ("idleThreshold", "60"),
            ("unreachableAs", "idle"),
            ("idleUnavailableAs", "idle"),
        ]));
        assert_eq!(lenient.metric, 2);
        let short = census.count(&spec(&[
            ("targets", "h:1"),
            ("idleThreshold", "10"),
            ("unreachableAs", "idle"),
            ("idleUnavailableAs", "idle"),
        ]));
        assert_eq!((short.busy, short.idle, short.metric), (1, 2, 1));
        let none = Census {
            polls: Vec::new(),
            ..census
        };
        let nobody = none.count(&spec(&[("targets", "h:1")]));
        assert!(!nobody.active());
        // One waiting task at zero workers: active, a metric of 1.
        let demanded = nobody.with_waiting(1);
        assert!(demanded.active());
        assert_eq!(demanded.metric, 1);
    }
}
