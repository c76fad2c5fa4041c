//! The bounds on the streams and calls holding fleets: in all, and per ScaledObject namespace
//! (holds, distinct fleets, listed targets); a [`Hold`] counts against them until dropped.

use std::collections::HashMap;
use std::sync::Arc;

use super::registry::{Fleets, MAX_FLEETS};
use super::{exhausted, Fleet};
use crate::connection::Error;

/// Most streams (`StreamIsActive`, `StreamMetricSpec`) open at once, all callers together.
pub(crate) const MAX_STREAMS: usize = 1024;

/// Most unary calls in progress (each holding its fleet while it sweeps) at once.
pub(crate) const MAX_CALLS: usize = 512;

/// Most streams and calls in progress at once for the ScaledObjects of one namespace.
pub(crate) const MAX_HOLDS_PER_NAMESPACE: usize = 128;

/// Most distinct fleets the streams and calls in progress of one namespace's ScaledObjects
/// hold at once.
pub(crate) const MAX_FLEETS_PER_NAMESPACE: usize = 64;

/// Most targets listed by the fleets one namespace's streams and calls in progress hold.
pub(crate) const MAX_TARGETS_PER_NAMESPACE: usize = 20_000;

// Streams and calls together never hold every fleet slot: a new fleet always finds room.
const _: () = assert!(MAX_STREAMS + MAX_CALLS < MAX_FLEETS);

/// What a [`Hold`] is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HoldFor {
    Stream,
    Call,
}

/// The holds in force: streams and calls, and per ScaledObject namespace its holds and the
/// fleets they hold.
#[derive(Debug, Default)]
pub(super) struct Holders {
    streams: usize,
    calls: usize,
    namespaces: HashMap<String, Tenant>,
}

/// One namespace's holds: how many, and per fleet (by address) how many hold it and the
/// targets it lists.
#[derive(Debug, Default)]
struct Tenant {
    holds: usize,
    fleets: HashMap<usize, (usize, usize)>,
}

/// A stream's or a call's claim on a fleet (or, for a `StreamMetricSpec`, on a stream slot
/// only), counted against the bounds above; released on drop.
#[derive(Debug)]
pub(crate) struct Hold {
    fleets: Arc<Fleets>,
    namespace: String,
    /// Kept alive by the hold: a held fleet is never dropped from [`Fleets`].
    fleet: Option<Arc<Fleet>>,
    what: HoldFor,
}

fn fleet_id(fleet: &Arc<Fleet>) -> usize {
    Arc::as_ptr(fleet) as usize
}

impl Drop for Hold {
    fn drop(&mut self) {
        let mut holders = self.fleets.holders.lock().expect("not poisoned");
        match self.what {
            HoldFor::Stream => holders.streams -= 1,
            HoldFor::Call => holders.calls -= 1,
        }
        let Some(tenant) = holders.namespaces.get_mut(&self.namespace) else {
            return;
        };
        tenant.holds -= 1;
        if let Some(fleet) = &self.fleet {
            let id = fleet_id(fleet);
            if let Some((count, _)) = tenant.fleets.get_mut(&id) {
                *count -= 1;
                if *count == 0 {
                    tenant.fleets.remove(&id);
                }
            }
        }
        if tenant.holds == 0 {
            holders.namespaces.remove(&self.namespace);
        }
    }
}

impl Fleets {
    /// A hold on `fleet` for a stream or a call of a ScaledObject in `namespace` (the tenant:
    /// in Kubernetes, who may create ScaledObjects there), while the bounds allow it:
    /// [`MAX_STREAMS`], [`MAX_CALLS`], and per namespace [`MAX_HOLDS_PER_NAMESPACE`],
    /// [`MAX_FLEETS_PER_NAMESPACE`] and [`MAX_TARGETS_PER_NAMESPACE`].
    ///
    /// Errors: [`ErrorKind::Transient`](crate::connection::ErrorKind::Transient) with `RESOURCE_EXHAUSTED`, naming the bound.
    pub(crate) fn hold(
        self: &Arc<Self>,
        namespace: &str,
        fleet: Option<&Arc<Fleet>>,
        what: HoldFor,
    ) -> Result<Hold, Error> {
        let mut holders = self.holders.lock().expect("not poisoned");
        let holders = &mut *holders;
        match what {
            HoldFor::Stream if holders.streams >= MAX_STREAMS => {
                return Err(exhausted(format!(
                    "the scaler already serves {MAX_STREAMS} streams, its most"
                )))
            }
            HoldFor::Call if holders.calls >= MAX_CALLS => {
                return Err(exhausted(format!(
                    "the scaler already has {MAX_CALLS} calls in progress, its most"
                )))
            }
            _ => {}
        }
        let tenant = holders.namespaces.get(namespace);
        let holds = tenant.map_or(0, |t| t.holds);
        if holds >= MAX_HOLDS_PER_NAMESPACE {
            return Err(exhausted(format!(
                "namespace {namespace:?} already has {MAX_HOLDS_PER_NAMESPACE} streams and calls \
                 in progress, the most for one namespace"
            )));
        }
        if let Some(fleet) = fleet {
            let fleets = tenant.map_or(0, |t| t.fleets.len());
            let new = !tenant.is_some_and(|t| t.fleets.contains_key(&fleet_id(fleet)));
            if new && fleets >= MAX_FLEETS_PER_NAMESPACE {
                return Err(exhausted(format!(
                    "namespace {namespace:?}'s streams and calls already use \
                     {MAX_FLEETS_PER_NAMESPACE} fleets, the most for one namespace"
                )));
            }
            let targets: usize = tenant.map_or(0, |t| t.fleets.values().map(|f| f.1).sum());
            if new && targets + fleet.listed_targets() > MAX_TARGETS_PER_NAMESPACE {
                return Err(exhausted(format!(
                    "namespace {namespace:?}'s streams and calls already use fleets of {targets} \
                     listed targets; this one's {} would pass {MAX_TARGETS_PER_NAMESPACE}, the \
                     most for one namespace",
                    fleet.listed_targets()
                )));
            }
        }
        match what {
            HoldFor::Stream => holders.streams += 1,
            HoldFor::Call => holders.calls += 1,
        }
        let tenant = holders.namespaces.entry(namespace.to_owned()).or_default();
        tenant.holds += 1;
        if let Some(fleet) = fleet {
            tenant
                .fleets
                .entry(fleet_id(fleet))
                .or_insert((0, fleet.listed_targets()))
                .0 += 1;
        }
        Ok(Hold {
            fleets: Arc::clone(self),
            namespace: namespace.to_owned(),
            fleet: fleet.cloned(),
            what,
        })
    }
}
