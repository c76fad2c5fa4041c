//! A fleet as the scaler sees it: its members (listed, resolved or discovered afresh at each
//! sweep), its pooled connections, and its latest census. One sweep runs at a time per fleet;
//! calls arriving meanwhile wait for it and share its result, so KEDA's polling never
//! stampedes the workers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hickory_resolver::TokioResolver;
use tokio::sync::watch;

use super::metadata::{CountAs, FleetKey, FleetSpec, Source};
use crate::connection::{ChannelOptions, Error, ErrorKind, WorkerConnection, WorkerCredentials};
use crate::fleet::discovery::{Discovery, LanDiscovery, LocalDiscovery};
use crate::fleet::{sweep, Reason, SweepOptions};

/// How long a fleet no call has asked about is kept (its connections, its census).
const UNUSED_FLEET_TTL: Duration = Duration::from_secs(600);

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
    /// The metric: `busy`, plus the unreachable and idle-unavailable ones where the metadata
    /// counts them as busy.
    pub(crate) metric: usize,
}

impl Count {
    /// `IsActive`: while any worker counts as busy.
    pub(crate) fn active(&self) -> bool {
        self.metric > 0
    }
}

impl Census {
    /// Counts the census by `spec`'s threshold and its rules for workers it could not read
    /// (each poll judged by [`Reason::of_poll`], as the retire policy judges it).
    pub(crate) fn count(&self, spec: &FleetSpec) -> Count {
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

/// One fleet: shared by every ScaledObject whose metadata names the same workers reached the
/// same way ([`FleetSpec::fleet_key`]).
pub(crate) struct Fleet {
    key: FleetKey,
    /// Where the members come from, as logs and the metrics' `fleet` label say it.
    label: String,
    credentials: Option<WorkerCredentials>,
    /// For a namespace: its discovery, kept (on this host, so that the registry's segments stay
    /// open between listings).
    discovery: Option<Discovery>,
    /// For a DNS name: made on first use (it reads /etc/resolv.conf).
    resolver: tokio::sync::OnceCell<TokioResolver>,
    /// Held for the length of a sweep: one at a time.
    sweeping: tokio::sync::Mutex<Members>,
    latest: watch::Sender<Option<Arc<Census>>>,
    last_used: Mutex<Instant>,
}

/// A member's address (as shown) and its connection, or why none could be made.
struct Connected {
    address: String,
    connection: Result<Arc<WorkerConnection>, Error>,
}

/// The connections of the members seen by the last sweep, by member key, and which of them
/// were unreachable (to log changes, not every sweep).
#[derive(Default)]
struct Members {
    connections: HashMap<String, Connected>,
    unreachable: HashSet<String>,
    /// Whether the last listing found nobody (to log the change to none once).
    listed_none: bool,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("source", &self.key.source)
            .finish()
    }
}

impl Fleet {
    /// A fleet for `spec`, no I/O but reading its TLS files.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] naming a TLS file that cannot be read or does
    /// not hold what it should, or a bad namespace.
    pub(crate) fn new(spec: &FleetSpec) -> Result<Self, Error> {
        let key = spec.fleet_key();
        let credentials = match &key.tls {
            None => None,
            Some(tls) => {
                let (cert, key) = match &tls.client {
                    Some((cert, key)) => (Some(cert.as_path()), Some(key.as_path())),
                    None => (None, None),
                };
                Some(WorkerCredentials::from_files_reloadable(
                    &tls.ca,
                    key,
                    cert,
                    tls.client.is_some(),
                    tls.server_name.as_deref(),
                )?)
            }
        };
        let discovery = match &key.source {
            Source::Namespace { name, lan: false } => {
                Some(Discovery::Local(LocalDiscovery::new(name)?))
            }
            Source::Namespace { name, lan: true } => Some(Discovery::Lan(LanDiscovery::new(name)?)),
            _ => None,
        };
        Ok(Self {
            label: key.source.to_string(),
            key,
            credentials,
            discovery,
            resolver: tokio::sync::OnceCell::new(),
            sweeping: tokio::sync::Mutex::new(Members::default()),
            latest: watch::Sender::new(None),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Where the fleet's members come from, for logs and the metrics' `fleet` label.
    pub(crate) fn source(&self) -> &str {
        &self.label
    }

    /// The latest census and each one after it, for streams.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Arc<Census>>> {
        self.latest.subscribe()
    }

    /// A census that finished at most `max_age` before this call arrived: the cached one, or
    /// a new sweep. A call that finds a sweep running waits for it and takes its result when
    /// that is fresh enough by the same rule (with `max_age` 0: any sweep that finished after
    /// the call arrived), so concurrent calls share one sweep.
    ///
    /// Errors: the members could not be listed ([`ErrorKind::Transient`]: DNS or discovery
    /// failing, or the sweep's deadline passing first); a failed poll is in the census, never
    /// here.
    pub(crate) async fn census(
        &self,
        spec: &FleetSpec,
        max_age: Duration,
    ) -> Result<(Arc<Census>, Freshness), Error> {
        let arrived = Instant::now();
        *self.last_used.lock().expect("not poisoned") = arrived;
        let fresh = || {
            self.latest
                .borrow()
                .as_ref()
                .filter(|census| census.at + max_age >= arrived)
                .cloned()
        };
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        let mut members = self.sweeping.lock().await;
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        let census = Arc::new(self.sweep(&mut members, spec).await?);
        self.latest.send_replace(Some(Arc::clone(&census)));
        Ok((census, Freshness::Swept))
    }

    /// The latest census, if any (for a stream woken by another call's sweep).
    pub(crate) fn latest(&self) -> Option<Arc<Census>> {
        self.latest.borrow().clone()
    }

    /// Whether no call has asked about this fleet for a long while.
    pub(crate) fn unused(&self) -> bool {
        self.last_used.lock().expect("not poisoned").elapsed() > UNUSED_FLEET_TTL
    }

    async fn sweep(&self, members: &mut Members, spec: &FleetSpec) -> Result<Census, Error> {
        let started = Instant::now();
        // The sweep's one deadline covers the listing too (a DNS server that does not answer,
        // a LAN browse): the polls get what is left of it.
        let listed = tokio::time::timeout(spec.sweep_timeout, self.list())
            .await
            .map_err(|_| {
                transient(format!(
                    "listing the fleet's members took longer than the sweep's timeout ({:.3} s)",
                    spec.sweep_timeout.as_secs_f64()
                ))
            })??;
        let left = spec
            .sweep_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        if listed.is_empty() && !members.listed_none {
            // A misspelt name or namespace reads like a fleet scaled to zero: say which.
            tracing::warn!(source = %self.label,
                "the listing found no workers: the metric is 0 and the fleet inactive");
        }
        members.listed_none = listed.is_empty();
        let mut connections = HashMap::with_capacity(listed.len());
        for member in listed {
            let entry = match members.connections.remove(&member.key) {
                Some(entry) => entry,
                None => Connected {
                    address: member.address.clone(),
                    connection: (member.connect)(self).map(Arc::new),
                },
            };
            connections.insert(member.key, entry);
        }
        members.connections = connections;
        let mut order: Vec<(&String, &Connected)> = members.connections.iter().collect();
        order.sort_by(|a, b| (&a.1.address, a.0).cmp(&(&b.1.address, b.0)));
        // Owned handles: the sweep's future must not borrow from this guard's lifetime.
        let reachable: Vec<Arc<WorkerConnection>> = order
            .iter()
            .filter_map(|(_, member)| member.connection.as_ref().ok().cloned())
            .collect();
        let options = SweepOptions {
            timeout: Some(left),
            ..SweepOptions::default()
        };
        let mut outcomes = sweep(reachable, &options).await?.into_iter();
        let polls: Vec<(String, Result<f64, Error>)> = order
            .iter()
            .map(|(_, member)| {
                let outcome = match &member.connection {
                    Ok(_) => outcomes.next().expect("one outcome per connection"),
                    Err(error) => Err(error.clone()),
                };
                (member.address.clone(), outcome)
            })
            .collect();
        self.log_changes(members, &polls);
        Ok(Census {
            at: Instant::now(),
            took: started.elapsed(),
            polls,
        })
    }

    /// Logs a member that became unreachable (with why) or reachable again, once per change.
    fn log_changes(&self, members: &mut Members, polls: &[(String, Result<f64, Error>)]) {
        let mut now = HashSet::new();
        for (address, poll) in polls {
            if let Err(error) = poll {
                let idle_unavailable = error.kind() == ErrorKind::IdleUnavailable;
                if !members.unreachable.contains(address) {
                    if idle_unavailable {
                        tracing::warn!(source = %self.label, worker = %address,
                            "worker predates the idle RPC: counted as the metadata's idleUnavailableAs says");
                    } else {
                        tracing::warn!(source = %self.label, worker = %address, %error,
                            "worker unreachable: counted as the metadata's unreachableAs says");
                    }
                }
                now.insert(address.clone());
            }
        }
        for address in members.unreachable.difference(&now) {
            if polls.iter().any(|(a, _)| a == address) {
                tracing::info!(source = %self.label, worker = %address, "worker answering again");
            }
        }
        members.unreachable = now;
    }

    /// The members now: listed, resolved or discovered.
    async fn list(&self) -> Result<Vec<Member>, Error> {
        match &self.key.source {
            Source::Targets(targets) => Ok(targets
                .iter()
                .map(|target| Member::target(target.clone(), None))
                .collect()),
            Source::Dns { name, port } => {
                let resolver = self
                    .resolver
                    .get_or_try_init(|| async {
                        TokioResolver::builder_tokio()
                            .map(|builder| builder.build())
                            .map_err(|e| {
                                transient(format!("cannot read the resolver configuration: {e}"))
                            })?
                            .map_err(|e| transient(format!("cannot make a DNS resolver: {e}")))
                    })
                    .await?;
                let ips = match resolver.lookup_ip(name.as_str()).await {
                    Ok(lookup) => lookup.iter().collect::<Vec<_>>(),
                    // A headless Service with no ready pods has no records: no workers.
                    Err(error) if error.is_no_records_found() => Vec::new(),
                    Err(error) => return Err(transient(format!("resolving {name}: {error}"))),
                };
                let mut addresses: Vec<String> = ips
                    .into_iter()
                    .map(|ip| std::net::SocketAddr::new(ip, *port).to_string())
                    .collect();
                addresses.sort();
                addresses.dedup();
                Ok(addresses
                    .into_iter()
                    .map(|address| Member::target(address, Some(name.clone())))
                    .collect())
            }
            Source::Namespace { .. } => {
                let discovery = self.discovery.clone().expect("made with the fleet");
                let listing = tokio::task::spawn_blocking(move || discovery.list())
                    .await
                    .map_err(|e| transient(format!("listing the namespace: {e}")))??;
                Ok(listing
                    .into_iter()
                    .map(|worker| Member {
                        key: format!(
                            "{}@{} secure={} identity={:?}",
                            worker.uid, worker.address, worker.secure, worker.identity
                        ),
                        address: worker.address.clone(),
                        connect: Box::new(move |fleet: &Fleet| {
                            worker.connect(fleet.credentials.as_ref(), ChannelOptions::default())
                        }),
                    })
                    .collect())
            }
        }
    }
}

/// A member as a listing gives it: a key that changes when how to reach it changes, the
/// address it is shown by, and how to connect to it.
struct Member {
    key: String,
    address: String,
    connect: Connect,
}

/// How a listed member is connected to, once, when first seen.
type Connect = Box<dyn FnOnce(&Fleet) -> Result<WorkerConnection, Error> + Send>;

impl Member {
    /// A listed or resolved target; over TLS (when the fleet has credentials) verified against
    /// the metadata's `workerTlsServerName`, else `default_identity` (the DNS name), else the host.
    fn target(address: String, default_identity: Option<String>) -> Self {
        let target = address.clone();
        Member {
            key: address.clone(),
            address,
            connect: Box::new(move |fleet: &Fleet| {
                let credentials = match (&fleet.credentials, default_identity) {
                    (Some(credentials), Some(name)) if credentials.identity().is_none() => {
                        Some(credentials.with_identity(&name)?)
                    }
                    (credentials, _) => credentials.clone(),
                };
                WorkerConnection::with_options(&target, credentials, ChannelOptions::default())
            }),
        }
    }
}

fn transient(message: String) -> Error {
    Error::new(ErrorKind::Transient, None, message)
}

/// Most metadata maps whose reading is kept (see [`Fleets::for_metadata`]).
const MAX_READINGS: usize = 1024;

/// The largest metadata map whose reading is kept (keys and values together): larger ones
/// (a list of thousands of targets) are read again at each call rather than held.
const MAX_KEPT_METADATA_BYTES: usize = 64 * 1024;

/// Most fleets kept at once; past it the least recently asked about, unless a stream holds it,
/// makes way.
const MAX_FLEETS: usize = 1024;

/// The fleets the scaler is answering for, by [`FleetKey`], and the readings of the metadata
/// maps calls came with, by the map's hash.
#[derive(Debug, Default)]
pub(crate) struct Fleets {
    fleets: Mutex<HashMap<FleetKey, Arc<Fleet>>>,
    readings: Mutex<HashMap<u64, Reading>>,
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
    /// Fleets no call asked about for [`UNUSED_FLEET_TTL`] and no stream holds are dropped
    /// when a new one is made; past [`MAX_FLEETS`], the least recently asked about that no
    /// stream holds.
    ///
    /// Errors: as [`Fleet::new`] (a fleet that cannot be made is not kept);
    /// [`ErrorKind::Transient`] when [`MAX_FLEETS`] fleets are all held by streams.
    pub(crate) fn get(&self, spec: &FleetSpec) -> Result<Arc<Fleet>, Error> {
        let key = spec.fleet_key();
        if let Some(fleet) = self.fleets.lock().expect("not poisoned").get(&key) {
            return Ok(Arc::clone(fleet));
        }
        let made = Arc::new(Fleet::new(spec)?);
        let mut fleets = self.fleets.lock().expect("not poisoned");
        if let Some(fleet) = fleets.get(&key) {
            return Ok(Arc::clone(fleet)); // made meanwhile by another call
        }
        let held = |fleet: &Arc<Fleet>| Arc::strong_count(fleet) > 1;
        fleets.retain(|_, fleet| held(fleet) || !fleet.unused());
        while fleets.len() >= MAX_FLEETS {
            let oldest = fleets
                .iter()
                .filter(|(_, fleet)| !held(fleet))
                .min_by_key(|(_, fleet)| *fleet.last_used.lock().expect("not poisoned"))
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => fleets.remove(&key),
                None => {
                    return Err(transient(format!(
                        "the scaler already watches {MAX_FLEETS} fleets, each held by a stream"
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
    use super::*;

    fn spec(pairs: &[(&str, &str)]) -> FleetSpec {
        FleetSpec::from_metadata(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
    }

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
                metric: 6,
            }
        );
        assert!(by_default.active());
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
        assert!(!none.count(&spec(&[("targets", "h:1")])).active());
    }

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
