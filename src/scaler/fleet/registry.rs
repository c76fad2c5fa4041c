//! The registry of fleets: the fleets the scaler answers for, made on first use and dropped
//! when unused or past the bounds, and the kept readings of the metadata maps calls came with.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::holds::Holders;
use super::{exhausted, Fleet};
use crate::connection::Error;
use crate::scaler::metadata::{FleetKey, FleetSpec};

/// Most metadata maps whose reading is kept (see [`Fleets::for_metadata`]).
const MAX_READINGS: usize = 1024;

/// The largest metadata map whose reading is kept (keys and values together): larger ones
/// (a list of thousands of targets) are read again at each call rather than held.
const MAX_KEPT_METADATA_BYTES: usize = 64 * 1024;

/// Most fleets kept at once; past it the least recently asked about, unless a stream or a
/// call in progress holds it, makes way. Larger than the streams and calls in progress
/// together may hold ([`crate::scaler::service`]'s bounds), so a new fleet always finds room.
pub(crate) const MAX_FLEETS: usize = 2048;

/// Most targets listed by all the kept fleets' metadata together; past it the least recently
/// asked about fleets no stream or call holds make way.
pub(crate) const MAX_TOTAL_TARGETS: usize = 100_000;

/// The fleets the scaler is answering for, by [`FleetKey`], and the readings of the metadata
/// maps calls came with, by the map's hash.
#[derive(Debug, Default)]
pub(crate) struct Fleets {
    fleets: Mutex<HashMap<FleetKey, Arc<Fleet>>>,
    readings: Mutex<HashMap<u64, Reading>>,
    /// The directory TLS files named by metadata must be in, canonical (`None`: none may be
    /// named).
    tls_files_dir: Option<PathBuf>,
    /// Who holds which fleets now (see [`Fleets::hold`]).
    pub(super) holders: Mutex<Holders>,
}

/// A metadata map as a call sent it, what it reads as, and its fleet (not kept alive by this).
#[derive(Debug)]
struct Reading {
    metadata: HashMap<String, String>,
    spec: Arc<FleetSpec>,
    fleet: std::sync::Weak<Fleet>,
}

/// A hash of a metadata map that does not depend on the map's order.
fn metadata_hash(metadata: &HashMap<String, String>) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut entries: Vec<(&String, &String)> = metadata.iter().collect();
    entries.sort_unstable();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    entries.hash(&mut hasher);
    hasher.finish()
}

impl Fleets {
    /// Fleets whose metadata may name TLS files in `tls_files_dir` only (resolved now:
    /// symbolic links and `..` followed); `None`, or a directory that cannot be resolved
    /// (logged), refuses every TLS file named by metadata.
    pub(crate) fn new(tls_files_dir: Option<&Path>) -> Self {
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
            ..Self::default()
        }
    }

    /// The kept reading of `metadata` and its fleet, when there is one: a hash and a comparison,
    /// no parse and no I/O (KEDA repeats the same map at every poll).
    pub(crate) fn kept(
        &self,
        metadata: &HashMap<String, String>,
    ) -> Option<(Arc<FleetSpec>, Arc<Fleet>)> {
        let hash = metadata_hash(metadata);
        let readings = self.readings.lock().expect("not poisoned");
        let reading = readings.get(&hash).filter(|r| r.metadata == *metadata)?;
        let fleet = reading.fleet.upgrade()?;
        Some((Arc::clone(&reading.spec), fleet))
    }

    /// What `metadata` reads as ([`FleetSpec::from_metadata`]) and its fleet ([`get`](Self::get)),
    /// the reading kept for [`kept`](Self::kept) when the map is not large. May read TLS files:
    /// call it off the runtime's threads.
    ///
    /// Errors: as [`FleetSpec::from_metadata`] and [`get`](Self::get); nothing is kept then.
    pub(crate) fn for_metadata(
        &self,
        metadata: &HashMap<String, String>,
    ) -> Result<(Arc<FleetSpec>, Arc<Fleet>), Error> {
        if let Some(kept) = self.kept(metadata) {
            return Ok(kept);
        }
        let spec = Arc::new(FleetSpec::from_metadata(metadata)?);
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
                metadata_hash(metadata),
                Reading {
                    metadata: metadata.clone(),
                    spec: Arc::clone(&spec),
                    fleet: Arc::downgrade(&fleet),
                },
            );
        }
        Ok((spec, fleet))
    }

    /// The fleet `spec` names, made on first use (reading its TLS files, with no lock held).
    /// Fleets no call asked about for [`UNUSED_FLEET_TTL`](super::UNUSED_FLEET_TTL) and no stream holds are dropped
    /// when a new one is made; past [`MAX_FLEETS`], the least recently asked about that no
    /// stream holds.
    ///
    /// Errors: as [`Fleet::new`] (a fleet that cannot be made is not kept);
    /// [`ErrorKind::Transient`](crate::connection::ErrorKind::Transient) with `RESOURCE_EXHAUSTED` when the fleets holding
    /// [`MAX_FLEETS`] slots or [`MAX_TOTAL_TARGETS`] targets are all held.
    pub(crate) fn get(&self, spec: &FleetSpec) -> Result<Arc<Fleet>, Error> {
        let key = spec.fleet_key();
        if let Some(fleet) = self.fleets.lock().expect("not poisoned").get(&key) {
            return Ok(Arc::clone(fleet));
        }
        let made = Arc::new(Fleet::new(spec, self.tls_files_dir.as_deref())?);
        let mut fleets = self.fleets.lock().expect("not poisoned");
        if let Some(fleet) = fleets.get(&key) {
            return Ok(Arc::clone(fleet)); // made meanwhile by another call
        }
        let held = |fleet: &Arc<Fleet>| Arc::strong_count(fleet) > 1;
        fleets.retain(|_, fleet| held(fleet) || !fleet.unused());
        let targets = |fleets: &HashMap<FleetKey, Arc<Fleet>>| -> usize {
            fleets.values().map(|fleet| fleet.listed_targets()).sum()
        };
        while fleets.len() >= MAX_FLEETS
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
                        "the scaler's fleets ({} of at most {MAX_FLEETS}, listing {} of at most \
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
        let fleets = Fleets::default();
        let first = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("idleThreshold", "1m"),
        ]);
        let (spec, fleet) = fleets.for_metadata(&first).unwrap();
        let (again, same_fleet) = fleets.for_metadata(&first.clone()).unwrap();
        assert!(Arc::ptr_eq(&spec, &again), "an equal map is read again");
        assert!(Arc::ptr_eq(&fleet, &same_fleet));
        // Another threshold: another reading, the same fleet (the same workers, reached alike).
        let other = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("idleThreshold", "2m"),
        ]);
        let (other_spec, other_fleet) = fleets.for_metadata(&other).unwrap();
        assert_eq!(other_spec.idle_threshold, Duration::from_secs(120));
        assert!(Arc::ptr_eq(&fleet, &other_fleet));
        // Another sweep deadline: another fleet (a sweep under one deadline is no answer for
        // a ScaledObject allowing another).
        let other_deadline = map(&[
            ("targets", "127.0.0.1:1,127.0.0.1:2"),
            ("sweepTimeout", "1s"),
        ]);
        let (_, deadline_fleet) = fleets.for_metadata(&other_deadline).unwrap();
        assert!(!Arc::ptr_eq(&fleet, &deadline_fleet));
        // A bad map is an error each time, and nothing is kept for it.
        let bad = map(&[("targets", "127.0.0.1:1"), ("idleThreshold", "soon")]);
        assert!(fleets.for_metadata(&bad).is_err());
        assert!(fleets.for_metadata(&bad).is_err());
        assert_eq!(fleets.readings.lock().unwrap().len(), 3);
        // A large map is read each time rather than kept.
        let many: Vec<String> = (0..5000)
            .map(|i| format!("127.0.0.1:{}", 1000 + i))
            .collect();
        let large = map(&[("targets", &many.join(","))]);
        let (first_reading, _) = fleets.for_metadata(&large).unwrap();
        let (second_reading, _) = fleets.for_metadata(&large).unwrap();
        assert!(!Arc::ptr_eq(&first_reading, &second_reading));
        assert_eq!(fleets.readings.lock().unwrap().len(), 3);
    }
}
