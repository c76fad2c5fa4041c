//! Pod deletion cost from idle time (metadata `deletionCost: "true"`, pod groups only): when
//! the metric means fewer replicas than there are pods, the idlest pods get the annotation
//! [`ANNOTATION`] at [`MARK`], below every other pod's, so that the ReplicaSet controller deletes
//! them first at the next scale-down.
//!
//! Which pods are the idlest is decided by [`crate::fleet::decide`], the same rule woolctl
//! reap, `wool_retire_idle` and the bindings' retire helpers apply: idle at least the threshold,
//! the longest idle first, at most as many as are to go. Writes happen only when the chosen set
//! changes, never on every sweep, and at most [`MAX_PATCHES_PER_WINDOW`] per group per
//! [`PATCH_WINDOW`] (counted in `wool_scaler_deletion_cost_patches_total`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use crate::connection::Error;
use crate::fleet::retire::decide;
use crate::fleet::RetirePolicy;

/// The annotation the ReplicaSet controller ranks pods by before deleting some.
pub(crate) const ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

/// The value a marked pod gets: the lowest an `int32` deletion cost can be, so below (or equal
/// to) every other pod's; an unannotated pod counts as 0.
pub(crate) const MARK: &str = "-2147483648";

/// The window the patch bound counts over.
pub(crate) const PATCH_WINDOW: Duration = Duration::from_secs(60);

/// Most patches one group makes per [`PATCH_WINDOW`]; a change past it waits (the patch is
/// refused and counted) and is made by a later sweep.
pub(crate) const MAX_PATCHES_PER_WINDOW: usize = 60;

/// How many pods the metric means: `ceil(metric / target_value)`, as the HPA computes it from
/// the value the scaler reports.
pub(crate) fn desired_replicas(metric: usize, target_value: f64) -> usize {
    (metric as f64 / target_value).ceil() as usize
}

/// The pods to mark: of `polls` (each pod's name and its poll, in the census's order), the
/// `current - desired` idlest that [`decide`] retires under `idle_threshold`; none when the
/// metric means no fewer pods than there are.
pub(crate) fn choose(
    polls: Vec<(String, Result<f64, Error>)>,
    current: usize,
    desired: usize,
    idle_threshold: Duration,
) -> BTreeSet<String> {
    let surplus = current.saturating_sub(desired);
    if surplus == 0 {
        return BTreeSet::new();
    }
    let mut policy = RetirePolicy::new(idle_threshold);
    policy.max_stops = Some(surplus);
    let (names, outcomes): (Vec<String>, Vec<Result<f64, Error>>) = polls.into_iter().unzip();
    names
        .into_iter()
        .zip(decide(outcomes, &policy))
        .filter(|(_, decision)| decision.retires())
        .map(|(name, _)| name)
        .collect()
}

/// One patch to make: the pod, and whether it is to be marked (else unmarked).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Patch {
    pub(crate) pod: String,
    pub(crate) mark: bool,
}

/// What a group has written: per pod, whether its last patch marked it. Its diff against a new
/// choice is the only thing ever written.
#[derive(Debug, Default)]
pub(crate) struct Marks {
    written: BTreeMap<String, bool>,
    patches: VecDeque<Instant>,
}

impl Marks {
    /// The patches that take the pods from what is written to `chosen`: mark each chosen pod
    /// not marked, unmark each marked pod not chosen. `annotated` are the pods the watch sees
    /// with [`MARK`]; one this scaler has not written (a mark left by an earlier run) is
    /// unmarked too, when not chosen. Pods no longer present (`present`) are forgotten.
    pub(crate) fn diff(
        &mut self,
        chosen: &BTreeSet<String>,
        annotated: &BTreeSet<String>,
        present: &BTreeSet<String>,
    ) -> Vec<Patch> {
        self.written.retain(|pod, _| present.contains(pod));
        let marked = |pod: &String| match self.written.get(pod) {
            Some(mark) => *mark,
            None => annotated.contains(pod),
        };
        let mut patches: Vec<Patch> = chosen
            .iter()
            .filter(|pod| !marked(pod))
            .map(|pod| Patch {
                pod: pod.clone(),
                mark: true,
            })
            .collect();
        let unmark = self
            .written
            .iter()
            .filter(|(_, mark)| **mark)
            .map(|(pod, _)| pod)
            .chain(
                annotated
                    .iter()
                    .filter(|pod| !self.written.contains_key(*pod)),
            )
            .filter(|pod| !chosen.contains(*pod) && present.contains(*pod));
        patches.extend(unmark.map(|pod| Patch {
            pod: pod.clone(),
            mark: false,
        }));
        patches.sort();
        patches.dedup();
        patches
    }

    /// Whether one more patch is within the bound at `now` (counting it if so).
    pub(crate) fn allow(&mut self, now: Instant) -> bool {
        while self
            .patches
            .front()
            .is_some_and(|at| now.duration_since(*at) >= PATCH_WINDOW)
        {
            self.patches.pop_front();
        }
        if self.patches.len() >= MAX_PATCHES_PER_WINDOW {
            return false;
        }
        self.patches.push_back(now);
        true
    }

    /// Records a patch made.
    pub(crate) fn wrote(&mut self, patch: &Patch) {
        self.written.insert(patch.pod.clone(), patch.mark);
    }
}

/// The JSON merge patch body for `patch`: the annotation at [`MARK`], or removed.
pub(crate) fn patch_body(patch: &Patch) -> serde_json::Value {
    let value = if patch.mark {
        serde_json::Value::from(MARK)
    } else {
        serde_json::Value::Null
    };
    serde_json::json!({ "metadata": { "annotations": { ANNOTATION: value } } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::connection::ErrorKind;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    fn polls(list: &[(&str, f64)]) -> Vec<(String, Result<f64, Error>)> {
        list.iter().map(|(n, s)| (n.to_string(), Ok(*s))).collect()
    }

    #[test]
    fn desired_is_the_hpas_ceiling() {
        assert_eq!(desired_replicas(1, 1.0), 1);
        assert_eq!(desired_replicas(3, 2.0), 2);
        assert_eq!(desired_replicas(0, 1.0), 0);
        assert_eq!(desired_replicas(5, 0.5), 10);
    }

    #[test]
    fn the_idlest_surplus_is_chosen_never_a_busy_pod() {
        let polls = polls(&[("a", 0.0), ("b", 400.0), ("c", 900.0), ("d", 350.0)]);
        let threshold = Duration::from_secs(300);
        // 4 pods, 1 wanted: the 3 idle ones; 2 wanted: the 2 idlest.
        assert_eq!(
            choose(polls.clone(), 4, 1, threshold),
            names(&["b", "c", "d"])
        );
        assert_eq!(choose(polls.clone(), 4, 2, threshold), names(&["b", "c"]));
        assert!(choose(polls.clone(), 4, 4, threshold).is_empty());
        assert!(choose(polls.clone(), 4, 9, threshold).is_empty());
        // Below the threshold, or unreadable: not idle, not chosen.
        let mut mixed = polls.clone();
        mixed.push((
            "e".into(),
            Err(Error::new(ErrorKind::Transient, None, "gone")),
        ));
        assert_eq!(
            choose(mixed, 5, 1, Duration::from_secs(380)),
            names(&["b", "c"])
        );
    }

    #[test]
    fn the_choice_is_the_retire_helpers_order() {
        let polls = polls(&[("a", 500.0), ("b", 700.0), ("c", 600.0)]);
        let mut policy = RetirePolicy::new(Duration::from_secs(1));
        policy.max_stops = Some(2);
        let decisions = decide(polls.iter().map(|p| p.1.clone()).collect(), &policy);
        let retired: BTreeSet<String> = polls
            .iter()
            .zip(&decisions)
            .filter(|(_, d)| d.retires())
            .map(|(p, _)| p.0.clone())
            .collect();
        assert_eq!(choose(polls, 3, 1, Duration::from_secs(1)), retired);
    }

    #[test]
    fn writes_only_the_changes() {
        let mut marks = Marks::default();
        let present = names(&["a", "b", "c"]);
        let none = BTreeSet::new();
        let first = marks.diff(&names(&["b", "c"]), &none, &present);
        assert_eq!(
            first,
            vec![
                Patch {
                    pod: "b".into(),
                    mark: true
                },
                Patch {
                    pod: "c".into(),
                    mark: true
                }
            ]
        );
        first.iter().for_each(|p| marks.wrote(p));
        // The same choice again, whatever the watch shows yet: nothing to write.
        assert!(marks.diff(&names(&["b", "c"]), &none, &present).is_empty());
        assert!(marks
            .diff(&names(&["b", "c"]), &names(&["b", "c"]), &present)
            .is_empty());
        // c turned busy: unmarked, and only it.
        let second = marks.diff(&names(&["b"]), &names(&["b", "c"]), &present);
        assert_eq!(
            second,
            vec![Patch {
                pod: "c".into(),
                mark: false
            }]
        );
        second.iter().for_each(|p| marks.wrote(p));
        // The watch still shows c's old mark: not written again.
        assert!(marks
            .diff(&names(&["b"]), &names(&["b", "c"]), &present)
            .is_empty());
        // A mark left by an earlier run, on a pod not chosen: removed; a deleted pod forgotten.
        let mut fresh = Marks::default();
        let leftover = fresh.diff(&none, &names(&["a", "gone"]), &present);
        assert_eq!(
            leftover,
            vec![Patch {
                pod: "a".into(),
                mark: false
            }]
        );
    }

    #[test]
    fn patches_past_the_bound_are_refused_until_the_window_moves() {
        let mut marks = Marks::default();
        let start = Instant::now();
        for _ in 0..MAX_PATCHES_PER_WINDOW {
            assert!(marks.allow(start));
        }
        assert!(!marks.allow(start + Duration::from_secs(59)));
        assert!(marks.allow(start + PATCH_WINDOW));
    }

    #[test]
    fn the_patch_body_sets_or_removes_the_annotation() {
        let mark = patch_body(&Patch {
            pod: "a".into(),
            mark: true,
        });
        assert_eq!(mark["metadata"]["annotations"][ANNOTATION], MARK);
        let unmark = patch_body(&Patch {
            pod: "a".into(),
            mark: false,
        });
        assert!(unmark["metadata"]["annotations"][ANNOTATION].is_null());
    }
}
