//! A fleet as the scaler sees it: its members (listed, resolved or discovered afresh at each
//! sweep), its pooled connections, and its latest census. One sweep runs at a time per fleet;
//! calls arriving meanwhile wait for it and share its result, so KEDA's polling never
//! stampedes the workers.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch, Semaphore};
use tokio::task::JoinHandle;
use tonic::Code;

use super::metadata::{CountAs, FleetKey, FleetSpec, Source, TlsFiles, MAX_TARGETS};
use crate::connection::{ChannelOptions, Error, ErrorKind, WorkerConnection, WorkerCredentials};
use crate::fleet::discovery::{
    admit, DiscoveredWorker, Discovery, DnsDiscovery, LanDiscovery, LocalDiscovery, DEFAULT_LISTEN,
};
use crate::fleet::{sweep, Reason, SweepOptions};

/// How long a fleet no call has asked about is kept (its connections, its census).
const UNUSED_FLEET_TTL: Duration = Duration::from_secs(600);

/// The shortest time between the starts of two sweeps of one fleet, however small it is.
pub(crate) const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// The most polls a second one fleet's sweeps make: a fleet of `n` members sweeps at most once
/// every `n / 2000` seconds (10,000 targets: every 5 s), a call asking for a fresher answer
/// waits for the next allowed sweep.
pub(crate) const POLLS_PER_SECOND_PER_FLEET: u32 = 2000;

/// The most discovery listings (a LAN browse, a registry scan) running at once in the process,
/// across fleets; a fleet runs at most one at a time.
pub(crate) const MAX_LISTINGS: usize = 16;

/// Held by each discovery listing while it runs (released when the listing's thread ends, not
/// when the sweep waiting for it gives up).
static LISTINGS: Semaphore = Semaphore::const_new(MAX_LISTINGS);

/// How often a fleet of `members` may sweep (see [`POLLS_PER_SECOND_PER_FLEET`]).
fn sweep_interval(members: usize) -> Duration {
    let budget = Duration::from_secs_f64(members as f64 / f64::from(POLLS_PER_SECOND_PER_FLEET));
    budget.max(MIN_SWEEP_INTERVAL)
}

/// How long a LAN listing listens: [`DEFAULT_LISTEN`], or half the sweep's deadline when that
/// is shorter, so that the listing ends within the sweep that started it.
fn lan_listen(sweep_timeout: Duration) -> Duration {
    DEFAULT_LISTEN.min(sweep_timeout / 2)
}

/// A failure that is the scaler's bound, not the caller's mistake: `RESOURCE_EXHAUSTED`.
pub(crate) fn exhausted(message: String) -> Error {
    Error::new(ErrorKind::Transient, Some(Code::ResourceExhausted), message)
}

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
    /// For a namespace or a DNS name: its discovery, kept (on this host, so that the registry's
    /// segments stay open between listings).
    discovery: Option<Discovery>,
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
    /// When the next sweep may start ([`sweep_interval`] after the last one started).
    next_sweep: Option<Instant>,
    /// A discovery listing still running (a sweep whose deadline passed left it): the next
    /// sweep waits for it rather than starting another.
    listing: Option<JoinHandle<Result<Vec<DiscoveredWorker>, Error>>>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("source", &self.key.source)
            .finish()
    }
}

impl Fleet {
    /// A fleet for `spec`, no I/O but reading its TLS files, which must be in `tls_files_dir`
    /// (canonical; `None`: metadata may name no TLS files).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a TLS file that cannot be used (one message
    /// whether it is missing, unreadable, not a regular file, outside the directory or not
    /// TLS material: the log says which), or a bad namespace.
    pub(crate) fn new(spec: &FleetSpec, tls_files_dir: Option<&Path>) -> Result<Self, Error> {
        let key = spec.fleet_key();
        let credentials = match &key.tls {
            None => None,
            Some(tls) => Some(tls_credentials(tls, tls_files_dir)?),
        };
        let discovery = match &key.source {
            Source::Namespace { name, lan: false } => {
                Some(Discovery::Local(LocalDiscovery::new(name)?))
            }
            Source::Namespace { name, lan: true } => Some(Discovery::Lan(
                LanDiscovery::new(name)?.listen_for(lan_listen(spec.sweep_timeout)),
            )),
            // The sweep's deadline bounds the lookup too; as many addresses as targets.
            Source::Dns { name, port } => Some(Discovery::Dns(
                DnsDiscovery::new(name, *port)?
                    .timeout(spec.sweep_timeout)
                    .max_addresses(MAX_TARGETS),
            )),
            Source::Targets(_) => None,
        };
        Ok(Self {
            label: key.source.to_string(),
            key,
            credentials,
            discovery,
            sweeping: tokio::sync::Mutex::new(Members::default()),
            latest: watch::Sender::new(None),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Where the fleet's members come from, for logs and the metrics' `fleet` label.
    pub(crate) fn source(&self) -> &str {
        &self.label
    }

    /// How many targets the metadata lists (1 for a DNS name or a namespace, whose members are
    /// known only when listed): its weight in [`MAX_TOTAL_TARGETS`].
    pub(crate) fn listed_targets(&self) -> usize {
        match &self.key.source {
            Source::Targets(targets) => targets.len(),
            _ => 1,
        }
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
        // Checked: an age past what an `Instant` can hold means any census will do.
        let fresh = || {
            self.latest
                .borrow()
                .as_ref()
                .filter(|census| census.at.checked_add(max_age).is_none_or(|t| t >= arrived))
                .cloned()
        };
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        let mut members = self.sweeping.lock().await;
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        if let Some(at) = members.next_sweep {
            tokio::time::sleep_until(at.into()).await;
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
        // Set before anything can fail: a failing sweep is rate-limited too.
        members.next_sweep = Some(started + MIN_SWEEP_INTERVAL);
        // The sweep's one deadline covers the listing too (a DNS server that does not answer,
        // a LAN browse): the polls get what is left of it.
        let listed = tokio::time::timeout(spec.sweep_timeout, self.list(&mut members.listing))
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
        if listed.len() > MAX_TARGETS {
            return Err(transient(format!(
                "the listing gave {} workers, more than {MAX_TARGETS}",
                listed.len()
            )));
        }
        members.next_sweep = Some(started + sweep_interval(listed.len()));
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

    /// The members now: listed, resolved or discovered. A discovery listing runs on a thread
    /// of its own, parked in `listing` while it runs, so that a sweep that gives up on it
    /// leaves it for the next sweep to wait for instead of starting a second one.
    async fn list(
        &self,
        listing: &mut Option<JoinHandle<Result<Vec<DiscoveredWorker>, Error>>>,
    ) -> Result<Vec<Member>, Error> {
        match &self.key.source {
            Source::Targets(targets) => Ok(targets
                .iter()
                .map(|target| Member::target(target.clone()))
                .collect()),
            Source::Namespace { .. } | Source::Dns { .. } => {
                let running = match listing.take() {
                    Some(running) if !running.is_finished() => running,
                    _ => {
                        let permit = LISTINGS.acquire().await.expect("never closed");
                        let discovery = self.discovery.clone().expect("made with the fleet");
                        tokio::task::spawn_blocking(move || {
                            let _permit = permit;
                            discovery.list()
                        })
                    }
                };
                let running = listing.insert(running);
                let outcome = running.await;
                *listing = None;
                let listing =
                    outcome.map_err(|e| transient(format!("listing the fleet: {e}")))??;
                // Wool's WorkerProxy gate: a worker it refuses (a plaintext record while the
                // fleet has credentials, an incompatible version, ...) is no member at all, so a
                // forged record cannot keep the fleet busy by being unreachable.
                let admission = admit(listing, self.credentials.as_ref());
                if !admission.refused.is_empty() {
                    tracing::debug!(source = %self.label, refused = admission.refused.len(),
                        "discovered workers refused by the admission gate are not members");
                }
                Ok(admission
                    .admitted
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
    /// A listed target; over TLS (when the fleet has credentials) verified against the
    /// metadata's `workerTlsServerName`, else the host.
    fn target(address: String) -> Self {
        let target = address.clone();
        Member {
            key: address.clone(),
            address,
            connect: Box::new(move |fleet: &Fleet| {
                WorkerConnection::with_options(
                    &target,
                    fleet.credentials.clone(),
                    ChannelOptions::default(),
                )
            }),
        }
    }
}

/// Credentials from the files `tls` names, each checked first by [`check_tls_file`].
fn tls_credentials(tls: &TlsFiles, dir: Option<&Path>) -> Result<WorkerCredentials, Error> {
    check_tls_file("workerTlsCa", &tls.ca, dir)?;
    if let Some((cert, key)) = &tls.client {
        check_tls_file("workerTlsCert", cert, dir)?;
        check_tls_file("workerTlsKey", key, dir)?;
    }
    let (cert, key) = match &tls.client {
        Some((cert, key)) => (Some(cert.as_path()), Some(key.as_path())),
        None => (None, None),
    };
    // Read by the paths as given (not their canonical forms), so that a Secret volume's
    // symbolic links swapped at a rotation are followed afresh.
    WorkerCredentials::from_files_reloadable(
        &tls.ca,
        key,
        cert,
        tls.client.is_some(),
        tls.server_name.as_deref(),
    )
    .map_err(|error| {
        tracing::warn!(ca = %tls.ca.display(), %error,
            "refusing TLS files named by scalerMetadata");
        unusable_tls_files(dir)
    })
}

/// The one answer to metadata naming TLS files that cannot be used, whichever file and
/// whatever the cause (missing, unreadable, not a regular file, outside `dir`, not PEM TLS
/// material): it names neither the key nor the path, so that it tells no one which files exist.
fn unusable_tls_files(dir: Option<&Path>) -> Error {
    let dir = dir.map_or_else(String::new, |dir| format!(" in {}", dir.display()));
    Error::invalid_argument(format!(
        "workerTlsCa, workerTlsCert, workerTlsKey cannot be used: each must name a readable \
         regular file of PEM TLS material{dir} (the scaler's log says which and why)"
    ))
}

/// Checks that `path` (named by metadata `key`) is a regular file the scaler can open, inside
/// `dir` once symbolic links and `..` are resolved. Every refusal gives the caller the same
/// message ([`unusable_tls_files`]), whatever the cause; the log says the cause.
fn check_tls_file(key: &str, path: &Path, dir: Option<&Path>) -> Result<(), Error> {
    let Some(dir) = dir else {
        return Err(Error::invalid_argument(format!(
            "{key}: this scaler takes no TLS files from scalerMetadata (it was started without \
             a TLS files directory, wool-scaler's --tls-files-dir)"
        )));
    };
    let refuse = |why: &dyn std::fmt::Display| {
        tracing::warn!(key, path = %path.display(), dir = %dir.display(),
            "refusing a TLS file named by scalerMetadata: {why}");
        unusable_tls_files(Some(dir))
    };
    let canonical = std::fs::canonicalize(path).map_err(|e| refuse(&e))?;
    if !canonical.starts_with(dir) {
        return Err(refuse(&format_args!(
            "it resolves to {}, outside the directory",
            canonical.display()
        )));
    }
    let metadata = std::fs::metadata(&canonical).map_err(|e| refuse(&e))?;
    if !metadata.is_file() {
        return Err(refuse(&"not a regular file"));
    }
    // Opened (not read: a regular file cannot block) to learn whether it is readable.
    std::fs::File::open(&canonical).map_err(|e| refuse(&e))?;
    Ok(())
}

fn transient(message: String) -> Error {
    Error::new(ErrorKind::Transient, None, message)
}

/// Most metadata maps whose reading is kept (see [`Fleets::for_metadata`]).
const MAX_READINGS: usize = 1024;

/// The largest metadata map whose reading is kept (keys and values together): larger ones
/// (a list of thousands of targets) are read again at each call rather than held.
const MAX_KEPT_METADATA_BYTES: usize = 64 * 1024;

/// Most fleets kept at once; past it the least recently asked about, unless a stream or a
/// call in progress holds it, makes way. Larger than the streams and calls in progress
/// together may hold ([`super::service`]'s bounds), so a new fleet always finds room.
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
    holders: Mutex<Holders>,
}

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
struct Holders {
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

    /// A hold on `fleet` for a stream or a call of a ScaledObject in `namespace` (the tenant:
    /// in Kubernetes, who may create ScaledObjects there), while the bounds allow it:
    /// [`MAX_STREAMS`], [`MAX_CALLS`], and per namespace [`MAX_HOLDS_PER_NAMESPACE`],
    /// [`MAX_FLEETS_PER_NAMESPACE`] and [`MAX_TARGETS_PER_NAMESPACE`].
    ///
    /// Errors: [`ErrorKind::Transient`] with `RESOURCE_EXHAUSTED`, naming the bound.
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
    /// [`ErrorKind::Transient`] with `RESOURCE_EXHAUSTED` when the fleets holding
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

    /// Given a LAN fleet whose sweep deadline (200 ms) is shorter than the default listening
    /// window (1.5 s), when eight calls ask for fresh answers one after another, then at most
    /// one listing runs at any time and none outlives its sweep by much (each listens 100 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lan_listing_runs_once_per_fleet_within_the_sweeps_deadline() {
        let namespace = format!("scaler-lan-{}", std::process::id());
        let spec = spec(&[
            ("namespace", &namespace),
            ("discovery", "lan"),
            ("sweepTimeout", "200ms"),
        ]);
        let fleet = Fleet::new(&spec, None).unwrap();
        let running = || MAX_LISTINGS - LISTINGS.available_permits();
        let mut most = 0;
        let started = Instant::now();
        for _ in 0..8 {
            let census = fleet.census(&spec, Duration::ZERO).await;
            most = most.max(running());
            if let Err(error) = census {
                // No multicast here: the listing fails at once, and nothing is left running.
                eprintln!("LAN listing: {error}");
            }
        }
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        eprintln!("8 LAN sweeps in {took:?}; most listings running after a sweep: {most}");
        assert!(most <= 1, "{most} listings running at once");
        assert_eq!(running(), 0, "a listing outlived its sweep by 300 ms");
    }

    #[test]
    fn a_census_of_any_age_bound_answers_without_overflow() {
        let fleet = Fleet::new(&spec(&[("targets", "127.0.0.1:1")]), None).unwrap();
        fleet.latest.send_replace(Some(Arc::new(Census {
            at: Instant::now(),
            took: Duration::ZERO,
            polls: Vec::new(),
        })));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let spec = spec(&[("targets", "127.0.0.1:1")]);
        let (_, freshness) = runtime
            .block_on(fleet.census(&spec, Duration::MAX))
            .unwrap();
        assert_eq!(freshness, Freshness::Cached);
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
