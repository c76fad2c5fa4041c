//! The registry of fleets: the fleets the scaler answers for, made on first use and dropped
//! when unused or past the bounds, and the kept readings of the metadata maps calls came with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::holds::{exhausted, GroupId, Held, HoldFor, Holders, MAX_CALLS, MAX_STREAMS};
use super::pods::PodBounds;
use super::TargetGroup;
use crate::connection::Error;
use crate::scaler::metadata::{GroupKey, Source, TriggerSpec};

/// Most metadata maps whose reading is kept (see [`TargetGroups::for_metadata`]).
const MAX_READINGS: usize = 1024;

/// The largest metadata map whose reading is kept (keys and values together): larger ones
/// (a list of thousands of targets) are read again at each call rather than held.
const MAX_KEPT_METADATA_BYTES: usize = 64 * 1024;

/// Most fleets kept at once; past it the least recently asked about, unless a stream or a
/// call in progress holds it, makes way. Larger than the streams and calls in progress
/// together may hold ([`crate::scaler::service`]'s bounds), so a new fleet always finds room.
pub(crate) const MAX_GROUPS: usize = 2048;

/// Most targets listed by all the kept fleets' metadata together; past it the least recently
/// asked about fleets no stream or call holds make way.
pub(crate) const MAX_TOTAL_TARGETS: usize = 100_000;

// Streams and calls together never hold every group slot: a new group always finds room.
const _: () = assert!(MAX_STREAMS + MAX_CALLS < MAX_GROUPS);

/// The fleets the scaler is answering for, by [`GroupKey`], and the readings of the metadata
/// maps calls came with, by the map's hash.
#[derive(Debug, Default)]
pub(crate) struct TargetGroups {
    fleets: Mutex<HashMap<GroupKey, Arc<TargetGroup>>>,
    readings: Mutex<HashMap<u64, Reading>>,
    /// The directory TLS files named by metadata must be in, canonical (`None`: none may be
    /// named).
    tls_files_dir: Option<PathBuf>,
    /// The bounds on pod groups.
    pod_bounds: PodBounds,
    /// Who holds which fleets now (see [`TargetGroups::hold`]).
    holders: Mutex<Holders>,
}

/// A metadata map as a call sent it (with its ScaledObject's namespace), what it reads as, and its fleet (not kept alive by this).
#[derive(Debug)]
struct Reading {
    namespace: String,
    metadata: HashMap<String, String>,
    spec: Arc<TriggerSpec>,
    fleet: std::sync::Weak<TargetGroup>,
}

/// A hash of a ScaledObject namespace and metadata map that does not depend on the map's order.
fn metadata_hash(namespace: &str, metadata: &HashMap<String, String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut entries: Vec<(&String, &String)> = metadata.iter().collect();
    entries.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    namespace.hash(&mut hasher);
    entries.hash(&mut hasher);
    hasher.finish()
}

impl TargetGroups {
    /// TargetGroups whose metadata may name TLS files in `tls_files_dir` only (resolved now:
    /// symbolic links and `..` followed); `None`, or a directory that cannot be resolved
    /// (logged), refuses every TLS file named by metadata.
    pub(crate) fn new(tls_files_dir: Option<&Path>, pod_bounds: PodBounds) -> Self {
        let tls_files_dir = tls_files_dir.and_then(|dir| match std::fs::canonicalize(dir) {
            Ok(dir) => Some(dir),
            Err(error) => {
                tracing::error!(dir = %dir.display(), %error,
                    "the TLS files directory cannot be resolved: metadata may name no TLS files");
                None
            }
        });
        Self {
            tls_files_dir,
            pod_bounds,
            ..Self::default()
        }
    }

    /// The kept reading of `metadata` and its fleet, when there is one: a hash and a comparison,
    /// no parse and no I/O (KEDA repeats the same map at every poll).
    pub(crate) fn kept(
        &self,
        namespace: &str,
        metadata: &HashMap<String, String>,
    ) -> Option<(Arc<TriggerSpec>, Arc<TargetGroup>)> {
        let hash = metadata_hash(namespace, metadata);
        let readings = self.readings.lock().expect("not poisoned");
        let reading = readings
            .get(&hash)
            .filter(|r| r.metadata == *metadata && r.namespace == namespace)?;
        let fleet = reading.fleet.upgrade()?;
        Some((Arc::clone(&reading.spec), fleet))
    }

    /// What `metadata` of a ScaledObject in `namespace` reads as
    /// ([`TriggerSpec::from_metadata_in`]) and its fleet ([`get`](Self::get)),
    /// the reading kept for [`kept`](Self::kept) when the map is not large. May read TLS files:
    /// call it off the runtime's threads.
    ///
    /// Errors: as [`TriggerSpec::from_metadata_in`] and [`get`](Self::get); nothing is kept
    /// then.
    pub(crate) fn for_metadata(
        &self,
        namespace: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<(Arc<TriggerSpec>, Arc<TargetGroup>), Error> {
        if let Some(kept) = self.kept(namespace, metadata) {
            return Ok(kept);
        }
        let spec = Arc::new(TriggerSpec::from_metadata_in(metadata, namespace)?);
        let fleet = self.get(&spec)?;
        let size: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size <= MAX_KEPT_METADATA_BYTES {
            let mut readings = self.readings.lock().expect("not poisoned");
            if readings.len() >= MAX_READINGS {
                readings.retain(|_, reading| reading.fleet.strong_count() > 0);
                if readings.len() >= MAX_READINGS {
                    readings.clear();
                }
            }
            readings.insert(
                metadata_hash(namespace, metadata),
                Reading {
                    namespace: namespace.to_owned(),
                    metadata: metadata.clone(),
                    spec: Arc::clone(&spec),
                    fleet: Arc::downgrade(&fleet),
                },
            );
        }
        Ok((spec, fleet))
    }

    /// The fleet `spec` names, made on first use (reading its TLS files, with no lock held).
    /// TargetGroups no call asked about for [`UNUSED_GROUP_TTL`](super::UNUSED_GROUP_TTL) and no stream holds are dropped
    /// when a new one is made; past [`MAX_GROUPS`], the least recently asked about that no
    /// stream holds.
    ///
    /// Errors: as [`TargetGroup::new`] (a fleet that cannot be made is not kept);
    /// [`ErrorKind::Transient`](crate::connection::ErrorKind::Transient) with `RESOURCE_EXHAUSTED` when the fleets holding
    /// [`MAX_GROUPS`] slots or [`MAX_TOTAL_TARGETS`] targets are all held, or when a new pod
    /// group would pass [`PodBounds::max_pod_groups_per_namespace`] in its namespace.
    pub(crate) fn get(&self, spec: &TriggerSpec) -> Result<Arc<TargetGroup>, Error> {
        let key = spec.group_key();
        if let Some(fleet) = self.fleets.lock().expect("not poisoned").get(&key) {
            return Ok(Arc::clone(fleet));
        }
        let made = Arc::new(TargetGroup::new(
            spec,
            self.tls_files_dir.as_deref(),
            self.pod_bounds,
        )?);
        let mut fleets = self.fleets.lock().expect("not poisoned");
        if let Some(fleet) = fleets.get(&key) {
            return Ok(Arc::clone(fleet)); // made meanwhile by another call
        }
        let held = |fleet: &Arc<TargetGroup>| Arc::strong_count(fleet) > 1;
        fleets.retain(|_, fleet| held(fleet) || !fleet.unused());
        if let Source::Pods { namespace, .. } = &key.source {
            let most = self.pod_bounds.max_pod_groups_per_namespace;
            let in_namespace = fleets
                .keys()
                .filter(
                    |k| matches!(&k.source, Source::Pods { namespace: n, .. } if n == namespace),
                )
                .count();
            if in_namespace >= most {
                return Err(exhausted(format!(
                    "namespace {namespace:?} already has {in_namespace} pod fleets, the most \
                     --max-pod-fleets-per-namespace allows ({most})"
                )));
            }
        }
        let targets = |fleets: &HashMap<GroupKey, Arc<TargetGroup>>| -> usize {
            fleets.values().map(|fleet| fleet.listed_targets()).sum()
        };
        while fleets.len() >= MAX_GROUPS
            || targets(&fleets) + made.listed_targets() > MAX_TOTAL_TARGETS
        {
            let oldest = fleets
                .iter()
                .filter(|(_, fleet)| !held(fleet))
                .min_by_key(|(_, fleet)| *fleet.last_used.lock().expect("not poisoned"))
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => fleets.remove(&key),
                None => {
                    return Err(exhausted(format!(
                        "the scaler's fleets ({} of at most {MAX_GROUPS}, listing {} of at most \
                         {MAX_TOTAL_TARGETS} targets) are all held by streams or calls",
                        fleets.len(),
                        targets(&fleets)
                    )))
                }
            };
        }
        tracing::info!(source = %made.source(), "watching a new fleet");
        fleets.insert(key, Arc::clone(&made));
        Ok(made)
    }
}

/// A stream's or a call's claim on a target group (or, for a `StreamMetricSpec`, on a stream
/// slot only), counted by [`Holders`] against its bounds; released on drop.
#[derive(Debug)]
pub(crate) struct Hold {
    groups: Arc<TargetGroups>,
    namespace: String,
    /// Kept alive by the hold: a held group is never dropped from [`TargetGroups`].
    group: Option<Arc<TargetGroup>>,
    what: HoldFor,
}

fn group_id(group: &Arc<TargetGroup>) -> GroupId {
    Arc::as_ptr(group) as GroupId
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.groups.holders.lock().expect("not poisoned").release(
            &self.namespace,
            self.group.as_ref().map(group_id),
            self.what,
        );
    }
}

impl TargetGroups {
    /// A hold on `group` for a stream or a call of a ScaledObject in `namespace`, while the
    /// bounds of [`Holders::claim`] allow it.
    ///
    /// Errors: [`ErrorKind::Transient`](crate::connection::ErrorKind::Transient) with
    /// `RESOURCE_EXHAUSTED`, naming the bound.
    pub(crate) fn hold(
        self: &Arc<Self>,
        namespace: &str,
        group: Option<&Arc<TargetGroup>>,
        what: HoldFor,
    ) -> Result<Hold, Error> {
        let held = group.map(|group| Held {
            id: group_id(group),
            listed_targets: group.listed_targets(),
        });
        self.holders
            .lock()
            .expect("not poisoned")
            .claim(namespace, held, what)?;
        Ok(Hold {
            groups: Arc::clone(self),
            namespace: namespace.to_owned(),
            group: group.cloned(),
            what,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_metadata_maps_reading_is_kept_and_shared_by_equal_maps_only() {
        let map = |pairs: &[(&str, &str)]| -> HashMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let fleets = TargetGroups::default();
        let first = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("idleThreshold", "1m"),
        ]);
        let (spec, fleet) = fleets.for_metadata("a", &first).unwrap();
        let (again, same_fleet) = fleets.for_metadata("a", &first.clone()).unwrap();
        assert!(Arc::ptr_eq(&spec, &again), "an equal map is read again");
        assert!(Arc::ptr_eq(&fleet, &same_fleet));
        // Another threshold: another reading, the same fleet (the same workers, reached alike).
        let other = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("idleThreshold", "2m"),
        ]);
        let (other_spec, other_fleet) = fleets.for_metadata("a", &other).unwrap();
        assert_eq!(other_spec.idle_threshold, Duration::from_secs(120));
        assert!(Arc::ptr_eq(&fleet, &other_fleet));
        // Another sweep deadline: another fleet (a sweep under one deadline is no answer for
        // a ScaledObject allowing another).
        let other_deadline = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("sweepTimeout", "1s"),
        ]);
        let (_, deadline_fleet) = fleets.for_metadata("a", &other_deadline).unwrap();
        assert!(!Arc::ptr_eq(&fleet, &deadline_fleet));
        // A bad map is an error each time, and nothing is kept for it.
        let bad = map(&[("targets", "127.0.0.1:1"), ("idleThreshold", "soon")]);
        assert!(fleets.for_metadata("a", &bad).is_err());
        assert!(fleets.for_metadata("a", &bad).is_err());
        assert_eq!(fleets.readings.lock().unwrap().len(), 3);
        // A large map is read each time rather than kept.
        let many: Vec<String> = (0..5000)
            .map(|i| format!("127.0.0.1:{}", 1000 + i))
            .collect();
        let large = map(&[("targets", &many.join(","))]);
        let (first_reading, _) = fleets.for_metadata("a", &large).unwrap();
        let (second_reading, _) = fleets.for_metadata("a", &large).unwrap();
        assert!(!Arc::ptr_eq(&first_reading, &second_reading));
        assert_eq!(fleets.readings.lock().unwrap().len(), 3);
    }

    #[test]
    fn pod_fleets_past_a_namespaces_bound_are_refused_naming_it() {
        let bounds = PodBounds {
            max_pods_per_group: 10,
            max_pod_groups_per_namespace: 2,
        };
        let fleets = TargetGroups::new(None, bounds);
        let metadata = |selector: &str| -> HashMap<String, String> {
            [("podSelector", selector), ("port", "50051")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        // Held as a stream or call would hold them (no watch starts: nothing is listed).
        let _a = fleets.for_metadata("batch", &metadata("app=a")).unwrap();
        let _b = fleets.for_metadata("batch", &metadata("app=b")).unwrap();
        let error = fleets
            .for_metadata("batch", &metadata("app=c"))
            .unwrap_err();
        assert_eq!(error.code(), Some(tonic::Code::ResourceExhausted));
        assert!(
            error
                .message()
                .contains("--max-pod-fleets-per-namespace allows (2)"),
            "{error}"
        );
        // Another namespace, and a fleet already made, are served.
        fleets.for_metadata("other", &metadata("app=c")).unwrap();
        fleets.for_metadata("batch", &metadata("app=a")).unwrap();
    }
}
