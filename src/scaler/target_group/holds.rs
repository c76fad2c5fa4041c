//! The bounds on the streams and calls holding target groups: in all, and per ScaledObject
//! namespace (holds, distinct groups, listed targets), counted by [`Holders`] without sockets
//! or groups (a registry's `Hold` claims on its creation and releases on drop).

use std::collections::HashMap;

use tonic::Code;

use crate::connection::{Error, ErrorKind};

/// A failure that is the scaler's bound, not the caller's mistake: `RESOURCE_EXHAUSTED`.
pub(crate) fn exhausted(message: String) -> Error {
    Error::new(ErrorKind::Transient, Some(Code::ResourceExhausted), message)
}

/// Most streams (`StreamIsActive`, `StreamMetricSpec`) open at once, all callers together.
pub(crate) const MAX_STREAMS: usize = 1024;

/// Most unary calls in progress (each holding its fleet while it sweeps) at once.
pub(crate) const MAX_CALLS: usize = 512;

/// Most streams and calls in progress at once for the ScaledObjects of one namespace.
pub(crate) const MAX_HOLDS_PER_NAMESPACE: usize = 128;

/// Most distinct fleets the streams and calls in progress of one namespace's ScaledObjects
/// hold at once.
pub(crate) const MAX_GROUPS_PER_NAMESPACE: usize = 64;

/// Most targets listed by the fleets one namespace's streams and calls in progress hold.
pub(crate) const MAX_TARGETS_PER_NAMESPACE: usize = 20_000;

/// What a [`Hold`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldFor {
    Stream,
    Call,
}

/// The holds in force: streams and calls, and per ScaledObject namespace its holds and the
/// fleets they hold.
#[derive(Debug, Default)]
pub(crate) struct Holders {
    streams: usize,
    calls: usize,
    namespaces: HashMap<String, Tenant>,
}

/// One namespace's holds: how many, and per target group (by [`GroupId`]) how many hold it and
/// the targets it lists.
#[derive(Debug, Default)]
struct Tenant {
    holds: usize,
    groups: HashMap<GroupId, (usize, usize)>,
}

/// A held target group as [`Holders`] counts it: its identity (the address of its shared
/// allocation) and how many targets its metadata lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Held {
    pub(crate) id: GroupId,
    pub(crate) listed_targets: usize,
}

/// A target group's identity while it is held: the address of its `Arc`, stable while any hold
/// keeps it alive.
pub(crate) type GroupId = usize;

impl Holders {
    /// Counts a hold for a stream or a call of a ScaledObject in `namespace` (the tenant: in
    /// Kubernetes, who may create ScaledObjects there) on `group` (none for a
    /// `StreamMetricSpec`, which holds a stream slot only), while the bounds allow it:
    /// [`MAX_STREAMS`], [`MAX_CALLS`], and per namespace [`MAX_HOLDS_PER_NAMESPACE`],
    /// [`MAX_GROUPS_PER_NAMESPACE`] and [`MAX_TARGETS_PER_NAMESPACE`]. Every claim is undone
    /// by one [`release`](Self::release) with the same arguments.
    ///
    /// Errors: [`ErrorKind::Transient`] with `RESOURCE_EXHAUSTED`, naming the bound; nothing is
    /// counted then.
    pub(crate) fn claim(
        &mut self,
        namespace: &str,
        group: Option<Held>,
        what: HoldFor,
    ) -> Result<(), Error> {
        match what {
            HoldFor::Stream if self.streams >= MAX_STREAMS => {
                return Err(exhausted(format!(
                    "the scaler already serves {MAX_STREAMS} streams, its most"
                )))
            }
            HoldFor::Call if self.calls >= MAX_CALLS => {
                return Err(exhausted(format!(
                    "the scaler already has {MAX_CALLS} calls in progress, its most"
                )))
            }
            _ => {}
        }
        let tenant = self.namespaces.get(namespace);
        let holds = tenant.map_or(0, |t| t.holds);
        if holds >= MAX_HOLDS_PER_NAMESPACE {
            return Err(exhausted(format!(
                "namespace {namespace:?} already has {MAX_HOLDS_PER_NAMESPACE} streams and calls \
                 in progress, the most for one namespace"
            )));
        }
        if let Some(group) = group {
            let groups = tenant.map_or(0, |t| t.groups.len());
            let new = !tenant.is_some_and(|t| t.groups.contains_key(&group.id));
            if new && groups >= MAX_GROUPS_PER_NAMESPACE {
                return Err(exhausted(format!(
                    "namespace {namespace:?}'s streams and calls already use \
                     {MAX_GROUPS_PER_NAMESPACE} fleets, the most for one namespace"
                )));
            }
            let targets: usize = tenant.map_or(0, |t| t.groups.values().map(|f| f.1).sum());
            if new && targets + group.listed_targets > MAX_TARGETS_PER_NAMESPACE {
                return Err(exhausted(format!(
                    "namespace {namespace:?}'s streams and calls already use fleets of {targets} \
                     listed targets; this one's {} would pass {MAX_TARGETS_PER_NAMESPACE}, the \
                     most for one namespace",
                    group.listed_targets
                )));
            }
        }
        match what {
            HoldFor::Stream => self.streams += 1,
            HoldFor::Call => self.calls += 1,
        }
        let tenant = self.namespaces.entry(namespace.to_owned()).or_default();
        tenant.holds += 1;
        if let Some(group) = group {
            tenant
                .groups
                .entry(group.id)
                .or_insert((0, group.listed_targets))
                .0 += 1;
        }
        Ok(())
    }

    /// Undoes one [`claim`](Self::claim) made with the same arguments.
    pub(crate) fn release(&mut self, namespace: &str, group: Option<GroupId>, what: HoldFor) {
        match what {
            HoldFor::Stream => self.streams -= 1,
            HoldFor::Call => self.calls -= 1,
        }
        let Some(tenant) = self.namespaces.get_mut(namespace) else {
            return;
        };
        tenant.holds -= 1;
        if let Some(id) = group {
            if let Some((count, _)) = tenant.groups.get_mut(&id) {
                *count -= 1;
                if *count == 0 {
                    tenant.groups.remove(&id);
                }
            }
        }
        if tenant.holds == 0 {
            self.namespaces.remove(namespace);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: Option<Held> = Some(Held {
        id: 1,
        listed_targets: 1,
    });

    #[test]
    fn claims_past_a_namespaces_bound_are_refused_and_releases_make_room() {
        let mut holders = Holders::default();
        for id in 0..MAX_GROUPS_PER_NAMESPACE {
            let group = Some(Held {
                id,
                listed_targets: 1,
            });
            holders.claim("a", group, HoldFor::Call).unwrap();
        }
        let past = Some(Held {
            id: MAX_GROUPS_PER_NAMESPACE,
            listed_targets: 1,
        });
        let error = holders.claim("a", past, HoldFor::Call).unwrap_err();
        assert_eq!(error.code(), Some(Code::ResourceExhausted));
        assert!(error.message().contains("fleets, the most"), "{error}");
        // A group already held by the namespace, and another namespace, are not refused.
        holders.claim("a", ONE, HoldFor::Stream).unwrap();
        holders.claim("b", past, HoldFor::Call).unwrap();
        holders.release("a", Some(0), HoldFor::Call);
        holders.claim("a", past, HoldFor::Call).unwrap();
    }

    #[test]
    fn a_namespaces_listed_targets_are_bounded() {
        let mut holders = Holders::default();
        let big = |id| {
            Some(Held {
                id,
                listed_targets: MAX_TARGETS_PER_NAMESPACE / 2,
            })
        };
        holders.claim("a", big(1), HoldFor::Call).unwrap();
        holders.claim("a", big(2), HoldFor::Call).unwrap();
        let error = holders.claim("a", big(3), HoldFor::Call).unwrap_err();
        assert!(error.message().contains("listed targets"), "{error}");
        holders.release("a", Some(2), HoldFor::Call);
        holders.claim("a", big(3), HoldFor::Call).unwrap();
    }
}
