//! Finding the workers of a Wool pool by its namespace, as Wool's own discovery subscribers do.
//!
//! Three backends, one per file; the first two agree with Wool 0.15.7's subscriber of the same
//! name:
//!
//! - [`LocalDiscovery`] (`local.rs`): the pool's shared-memory registry on this host;
//! - [`LanDiscovery`] (`lan.rs`, feature `lan`): DNS-SD over multicast DNS on the local network;
//! - [`DnsDiscovery`] (`dns.rs`, feature `dns`): every address a DNS name resolves to, at a
//!   given port (a Kubernetes headless Service). It has no counterpart in Wool.
//!
//! Each gives a one-shot listing (`list`); the first two also a [`Watch`] that reports joins,
//! leaves and changes as they happen (a DNS answer tells of no changes: list it again). A record that cannot be read (half-written, foreign, malformed) is skipped
//! with a `tracing` warning, never an error: Wool's readers do the same, since writers change
//! the registry while readers scan it.
//!
//! A listing is what records claim, and records are written by whoever can write the registry
//! or answer on the LAN. Before a discovered worker is connected, polled or stopped it passes
//! the admission gate of Wool's `WorkerProxy` ([`DiscoveredWorker::refusal`], [`admit`],
//! `admission.rs`), for the caller's credentials and their [`Peers`](crate::connection::Peers)
//! policy; [`DiscoveredWorker::connect`] refuses a worker the gate refuses.

mod admission;
#[cfg(feature = "dns")]
mod dns;
#[cfg(feature = "lan")]
mod lan;
mod local;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

pub use admission::Refusal;
#[cfg(feature = "scaler")]
pub(crate) use dns::check_name as check_dns_name;
#[cfg(feature = "dns")]
pub use dns::{DnsDiscovery, DEFAULT_DNS_TIMEOUT, MAX_DNS_ADDRESSES};
#[cfg(feature = "lan")]
pub use lan::{LanDiscovery, DEFAULT_LISTEN};
pub use local::{LocalDiscovery, MAX_REGISTRY_SLOTS};

use crate::connection::{ChannelOptions, Error, WorkerConnection, WorkerCredentials};

/// A worker as its pool publishes it (Wool's `WorkerMetadata`). Every field is what the record
/// claims: reach it through [`connect`](Self::connect), which runs the admission gate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiscoveredWorker {
    /// The worker's id (Wool's `WorkerMetadata.uid`).
    pub uid: Uuid,
    /// Where it listens, `host:port` as published (dial it as a target).
    pub address: String,
    /// Its process id on its host.
    pub pid: i32,
    /// The Wool version it runs.
    pub version: String,
    /// Its tags, sorted.
    pub tags: BTreeSet<String>,
    /// Free-form key/value metadata.
    pub extra: BTreeMap<String, String>,
    /// Whether it serves TLS: reach it with credentials ([`DiscoveredWorker::connect`]).
    pub secure: bool,
    /// The name its certificate is issued for, when it advertises one. Used only under a
    /// [`Peers`](crate::connection::Peers) policy that accepts it (see
    /// [`connect`](Self::connect)); otherwise ignored, as Wool ignores it.
    pub identity: Option<String>,
    /// The channel options it advertises (Wool's `WorkerMetadata.options`): carried by local
    /// registry records, not by LAN records; `None` when absent or out of range (the record's
    /// options are then ignored, with a log line, and the caller's are used).
    #[serde(skip)]
    pub options: Option<ChannelOptions>,
    /// Where the record comes from, which decides the admission gate's rules for it.
    #[serde(skip)]
    pub origin: Origin,
}

/// Where a [`DiscoveredWorker`] record comes from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Origin {
    /// Published by the worker's pool (a local registry or a LAN record, or a record the
    /// caller built): an advertisement, passed through every rule of the admission gate.
    #[default]
    Advertised,
    /// One address a DNS name resolved to ([`DnsDiscovery`], feature `dns`). Not an
    /// advertisement but the caller's naming, as a target is: the gate skips its security and
    /// version rules (the record can tell neither; the caller's credentials decide TLS), applies
    /// a peers policy to the DNS name, and verifies the certificate against the DNS name unless
    /// the caller's credentials name another.
    Dns,
}

impl DiscoveredWorker {
    /// Why the admission gate refuses this worker for a caller holding `credentials`, or
    /// `None` when it is admitted (Wool's `WorkerProxy._incompatibility_reason`): security,
    /// then version, then identity; see [`Refusal`].
    pub fn refusal(&self, credentials: Option<&WorkerCredentials>) -> Option<Refusal> {
        admission::check(self, credentials).err()
    }

    /// A connection to this worker, as Wool's `WorkerProxy` makes one for a worker it admitted.
    /// No I/O.
    ///
    /// - The worker must pass the admission gate ([`refusal`](Self::refusal)) for
    ///   `credentials`: a caller with credentials reaches only workers advertising `secure`,
    ///   over TLS with those credentials (they are never dropped because a record says so),
    ///   one without reaches only plaintext workers.
    /// - The certificate is verified against the name the caller set in `credentials`, else,
    ///   under a [`Peers`](crate::connection::Peers) policy, the advertised name the policy
    ///   accepted, else the dialed address. With no policy the advertised identity is ignored.
    /// - Channel options: `options`, tightened by the worker's advertised ones where it has
    ///   them; an advertised value never loosens the caller's (the receive limit is never
    ///   raised, see `admission.rs`).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) when the
    /// gate refuses the worker (the message gives the [`Refusal`]), or its address or the name
    /// to verify is malformed.
    pub fn connect(
        &self,
        credentials: Option<&WorkerCredentials>,
        options: ChannelOptions,
    ) -> Result<WorkerConnection, Error> {
        // A malformed address is the caller's error whatever the record says.
        crate::connection::Target::parse(&self.address)?;
        let admitted = admission::check(self, credentials).map_err(|refusal| {
            admission::log_refusal(self, &refusal);
            refusal.to_error(self)
        })?;
        let credentials = match (credentials, admitted.pin) {
            (Some(given), Some(name)) => Some(given.with_identity(&name)?),
            (given, _) => given.cloned(),
        };
        let options = admission::channel_options(self.options.as_ref(), options);
        WorkerConnection::with_options(&self.address, credentials, options)
    }

    /// "worker <uid> at <address>" (or "the worker at <address>" without a uid).
    fn describe(&self) -> String {
        if self.uid.is_nil() {
            format!("the worker at {}", self.address)
        } else {
            format!("worker {} at {}", self.uid, self.address)
        }
    }
}

/// A listing passed through the admission gate ([`admit`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    /// The workers the gate admitted, in listing order: the ones to connect, poll or stop.
    pub admitted: Vec<DiscoveredWorker>,
    /// The workers it refused, each with why, in listing order.
    pub refused: Vec<(DiscoveredWorker, Refusal)>,
}

/// Sorts `workers` into those the admission gate admits for a caller holding `credentials` and
/// those it refuses (each refusal logged at `debug`, as Wool's gate logs them).
pub fn admit(workers: Vec<DiscoveredWorker>, credentials: Option<&WorkerCredentials>) -> Admission {
    let mut admission = Admission::default();
    for worker in workers {
        match worker.refusal(credentials) {
            None => admission.admitted.push(worker),
            Some(refusal) => {
                admission::log_refusal(&worker, &refusal);
                admission.refused.push((worker, refusal));
            }
        }
    }
    admission
}

/// What a [`Watch`] saw happen to one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "event", content = "worker", rename_all = "kebab-case")]
pub enum DiscoveryEvent {
    /// The worker joined the pool (Wool's `worker-added`); also reported for every worker
    /// present when the watch starts.
    #[serde(rename = "worker-added")]
    Added(DiscoveredWorker),
    /// The worker's published metadata changed (Wool's `worker-updated`).
    #[serde(rename = "worker-updated")]
    Updated(DiscoveredWorker),
    /// The worker left the pool (Wool's `worker-dropped`): its last known metadata.
    #[serde(rename = "worker-dropped")]
    Dropped(DiscoveredWorker),
}

impl DiscoveryEvent {
    /// The worker the event is about.
    pub fn worker(&self) -> &DiscoveredWorker {
        match self {
            DiscoveryEvent::Added(w) | DiscoveryEvent::Updated(w) | DiscoveryEvent::Dropped(w) => w,
        }
    }
}

/// Any backend, chosen at run time (as a command-line flag or a C argument chooses it).
///
/// Which variants exist depends on the crate's features (`lan`, `dns`), so matches need a `_` arm.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Discovery {
    /// The shared-memory registry on this host.
    Local(LocalDiscovery),
    /// DNS-SD over multicast DNS (feature `lan`).
    #[cfg(feature = "lan")]
    Lan(LanDiscovery),
    /// Every address a DNS name resolves to (feature `dns`).
    #[cfg(feature = "dns")]
    Dns(DnsDiscovery),
}

impl Discovery {
    /// The workers published now. For [`Discovery::Lan`] this browses the network for the
    /// backend's listening window first; for [`Discovery::Dns`] it resolves the name.
    ///
    /// Errors: as the backend's `list`.
    pub fn list(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        match self {
            Discovery::Local(local) => local.list(),
            #[cfg(feature = "lan")]
            Discovery::Lan(lan) => lan.list(),
            #[cfg(feature = "dns")]
            Discovery::Dns(dns) => dns.list(),
        }
    }

    /// The workers published now, passed through the admission gate for a caller holding
    /// `credentials` ([`admit`]).
    ///
    /// Errors: as [`list`](Self::list).
    pub fn list_admitted(
        &self,
        credentials: Option<&WorkerCredentials>,
    ) -> Result<Admission, Error> {
        Ok(admit(self.list()?, credentials))
    }

    /// Starts watching: the watch first reports every worker present, then each change.
    ///
    /// Errors: as the backend's `watch` ([`Discovery::Dns`] cannot watch:
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)).
    pub fn watch(&self) -> Result<Watch, Error> {
        match self {
            Discovery::Local(local) => local.watch(),
            #[cfg(feature = "lan")]
            Discovery::Lan(lan) => lan.watch(),
            #[cfg(feature = "dns")]
            Discovery::Dns(dns) => dns.watch(),
        }
    }

    /// The namespace watched; for [`Discovery::Dns`], the DNS name.
    pub fn namespace(&self) -> &str {
        match self {
            Discovery::Local(local) => local.namespace(),
            #[cfg(feature = "lan")]
            Discovery::Lan(lan) => lan.namespace(),
            #[cfg(feature = "dns")]
            Discovery::Dns(dns) => dns.name(),
        }
    }
}

/// A running watch over a pool: its events arrive in order on a library thread and wait here
/// until taken. Dropping the watch stops it.
pub struct Watch {
    events: flume::Receiver<DiscoveryEvent>,
    /// Dropped with the watch: the backend's thread sees its sender side disconnect and ends.
    _stop: flume::Sender<()>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("pending", &self.events.len())
            .finish()
    }
}

impl Watch {
    /// The next event, waiting at most `timeout` (`None` = as long as it takes); `Ok(None)`
    /// when nothing happened in that time.
    ///
    /// Errors: [`ErrorKind::Transient`](crate::ErrorKind::Transient) once the watch has ended
    /// (its backend stopped, e.g. the mDNS responder failed) and every event was taken.
    pub fn next_timeout(&self, timeout: Option<Duration>) -> Result<Option<DiscoveryEvent>, Error> {
        let event = match timeout {
            None => self.events.recv().map_err(|_| ()),
            Some(limit) => match self.events.recv_timeout(limit) {
                Ok(event) => Ok(event),
                Err(flume::RecvTimeoutError::Timeout) => return Ok(None),
                Err(flume::RecvTimeoutError::Disconnected) => Err(()),
            },
        };
        event.map(Some).map_err(|()| ended())
    }

    /// The next event, for async code.
    ///
    /// Errors: as [`next_timeout`](Self::next_timeout), once the watch has ended.
    pub async fn next(&self) -> Result<DiscoveryEvent, Error> {
        self.events.recv_async().await.map_err(|_| ended())
    }
}

fn ended() -> Error {
    Error::new(
        crate::ErrorKind::Transient,
        None,
        "the watch has ended: its discovery backend stopped",
    )
}

/// The sending half a backend's thread holds: where events go, and whether the watch is still
/// wanted.
struct WatchFeed {
    events: flume::Sender<DiscoveryEvent>,
    stop: flume::Receiver<()>,
}

/// Starts a backend's watch thread running `body` with the feed of a new watch.
///
/// Errors: [`ErrorKind::Transient`](crate::ErrorKind::Transient) when the thread cannot start.
fn start_watch(body: impl FnOnce(WatchFeed) + Send + 'static) -> Result<Watch, Error> {
    let (watch, feed) = WatchFeed::channel();
    std::thread::Builder::new()
        .name("wool-discovery".into())
        .spawn(move || body(feed))
        .map_err(|e| {
            Error::new(
                crate::ErrorKind::Transient,
                None,
                format!("cannot start the watch thread: {e}"),
            )
        })?;
    Ok(watch)
}

impl WatchFeed {
    /// A new watch and the feed its backend thread writes.
    fn channel() -> (Watch, WatchFeed) {
        let (events_tx, events_rx) = flume::unbounded();
        let (stop_tx, stop_rx) = flume::bounded(1);
        (
            Watch {
                events: events_rx,
                _stop: stop_tx,
            },
            WatchFeed {
                events: events_tx,
                stop: stop_rx,
            },
        )
    }

    /// Sends `event`; false once the watch is gone.
    fn send(&self, event: DiscoveryEvent) -> bool {
        self.events.send(event).is_ok()
    }

    /// Waits up to `limit` for the watch to be dropped; true if it was.
    fn stopped_within(&self, limit: Duration) -> bool {
        matches!(
            self.stop.recv_timeout(limit),
            Err(flume::RecvTimeoutError::Disconnected)
        )
    }
}

/// The workers a watch has seen, by uid, and the events that bring it up to a new state.
#[derive(Default)]
struct Roster {
    workers: HashMap<Uuid, DiscoveredWorker>,
}

impl Roster {
    /// Replaces the roster with a full scan; returns the joins, changes and leaves.
    fn replace(&mut self, scan: Vec<DiscoveredWorker>) -> Vec<DiscoveryEvent> {
        let mut events = Vec::new();
        let mut seen = HashMap::with_capacity(scan.len());
        for worker in scan {
            seen.insert(worker.uid, ());
            events.extend(self.upsert(worker));
        }
        let gone: Vec<Uuid> = self
            .workers
            .keys()
            .filter(|uid| !seen.contains_key(uid))
            .copied()
            .collect();
        events.extend(gone.into_iter().filter_map(|uid| self.remove(&uid)));
        events
    }

    /// Records one worker; an event when it is new or changed.
    fn upsert(&mut self, worker: DiscoveredWorker) -> Option<DiscoveryEvent> {
        match self.workers.insert(worker.uid, worker.clone()) {
            None => Some(DiscoveryEvent::Added(worker)),
            Some(previous) if previous != worker => Some(DiscoveryEvent::Updated(worker)),
            Some(_) => None,
        }
    }

    /// Forgets one worker; the leave event when it was known.
    fn remove(&mut self, uid: &Uuid) -> Option<DiscoveryEvent> {
        self.workers.remove(uid).map(DiscoveryEvent::Dropped)
    }
}

/// Sorts a listing by address then uid, so listings compare and print stably.
fn sorted(mut workers: Vec<DiscoveredWorker>) -> Vec<DiscoveredWorker> {
    workers.sort_by(|a, b| (&a.address, a.uid).cmp(&(&b.address, b.uid)));
    workers
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worker(n: u8, address: &str) -> DiscoveredWorker {
        DiscoveredWorker {
            uid: Uuid::from_bytes([n; 16]),
            address: address.into(),
            pid: n.into(),
            version: "0.15.7".into(),
            tags: BTreeSet::new(),
            extra: BTreeMap::new(),
            secure: false,
            identity: None,
            options: None,
            origin: Origin::Advertised,
        }
    }

    #[test]
    fn a_roster_reports_joins_changes_and_leaves_once() {
        let mut roster = Roster::default();
        let events = roster.replace(vec![worker(1, "a:1"), worker(2, "b:2")]);
        assert_eq!(events.len(), 2);
        assert!(events.iter().all(|e| matches!(e, DiscoveryEvent::Added(_))));
        assert!(roster
            .replace(vec![worker(1, "a:1"), worker(2, "b:2")])
            .is_empty());
        let events = roster.replace(vec![worker(1, "a:9")]);
        assert_eq!(
            events,
            vec![
                DiscoveryEvent::Updated(worker(1, "a:9")),
                DiscoveryEvent::Dropped(worker(2, "b:2"))
            ]
        );
    }

    #[test]
    fn a_secure_worker_needs_credentials_and_a_plain_one_ignores_them() {
        let mut secure = worker(3, "127.0.0.1:1");
        secure.secure = true;
        let error = secure.connect(None, ChannelOptions::default()).unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument);
        assert!(error.message().contains("credentials"), "{error}");
        let plain = worker(4, "127.0.0.1:1");
        assert!(plain.connect(None, ChannelOptions::default()).is_ok());
    }

    #[test]
    fn a_watch_whose_backend_stopped_says_so_after_its_last_event() {
        let (watch, feed) = WatchFeed::channel();
        assert!(feed.send(DiscoveryEvent::Added(worker(6, "h:1"))));
        assert_eq!(
            watch.next_timeout(Some(Duration::ZERO)).unwrap(),
            Some(DiscoveryEvent::Added(worker(6, "h:1")))
        );
        assert_eq!(watch.next_timeout(Some(Duration::ZERO)).unwrap(), None);
        drop(feed);
        let error = watch.next_timeout(None).unwrap_err();
        assert_eq!(error.kind(), crate::ErrorKind::Transient);
        assert!(error.message().contains("ended"), "{error}");
    }

    #[test]
    fn events_serialize_with_wools_event_names() {
        let json = serde_json::to_string(&DiscoveryEvent::Dropped(worker(5, "h:1"))).unwrap();
        assert!(
            json.starts_with(r#"{"event":"worker-dropped","worker":{"uid":"05050505-"#),
            "{json}"
        );
    }
}
