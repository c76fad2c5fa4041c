//! The eviction table: which connections a server holds, by stage (opening, established), and
//! which one it closes to make room for a newcomer. Its rules are plain data and counts, tested
//! here without sockets; the accept loop ([`accept`](super::accept)) applies them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

/// Connections from one peer address (an IPv4 address, or an IPv6 /64) still opening (TLS
/// handshake, HTTP/2 preface) at once; one more displaces one of them (see the module
/// documentation).
pub const OPENING_PER_PEER: usize = 32;

/// Connections still opening at once, all peers together; one more displaces one of them.
pub const OPENING_AT_ONCE: usize = 1024;

/// The connection cap of a worker's or scaler's main address by default, at most: 10,000.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Descriptors kept back from the default connection cap, for files, side ports and the
/// connections' own start-up.
const RESERVED_DESCRIPTORS: usize = 256;

/// The connection cap of a side port (plaintext health): probes, a few at a time.
pub const SIDE_PORT_MAX_CONNECTIONS: usize = 64;

/// The default connection cap: [`DEFAULT_MAX_CONNECTIONS`], or fewer when the process's soft
/// `RLIMIT_NOFILE` is lower (the limit less 256 kept back, at least 16).
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let descriptors = if known && limit.rlim_cur != libc::RLIM_INFINITY {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    DEFAULT_MAX_CONNECTIONS.min(descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(16))
}

/// The limits a server accepts connections under.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLimits {
    /// Connections open at once (opening ones included); see [`Connections::take`] for what
    /// one more does.
    pub(crate) max_connections: usize,
    /// Whether connections past their opening may be closed to make room for new ones: for
    /// side ports (health probes, metrics scrapes), whose connections carry nothing that is
    /// lost by it; never for a main address, whose connections carry dispatches.
    pub(crate) evict_established: bool,
}

/// The key a peer's opening connections are counted under: its IPv4 address, or its IPv6 /64
/// (one host's usual share of addresses); an IPv4-mapped IPv6 address counts as IPv4.
fn peer_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

/// The order in which connections were last heard from: each read that brings bytes takes the
/// next value. Zero means "never heard from".
static HEARD: AtomicU64 = AtomicU64::new(1);

/// What the table knows of one connection, shared with the connection itself.
#[derive(Debug)]
pub(super) struct Tracked {
    /// When its peer last sent bytes (a [`HEARD`] value), 0 if never.
    heard: AtomicU64,
    /// Whether reads still mark `heard` (not once it can no longer be closed to make room).
    watched: AtomicBool,
    /// Cancelled when the connection is closed to make room for a newer one.
    evicted: CancellationToken,
}

impl Tracked {
    /// Marks the connection heard from now (while it may still be closed to make room).
    pub(super) fn hear(&self) {
        if self.watched.load(Ordering::Relaxed) {
            self.heard
                .store(HEARD.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The order of eviction: never heard from first (oldest first), then least recently
    /// heard from.
    fn eviction_key(&self, id: u64) -> (u64, u64) {
        (self.heard.load(Ordering::Relaxed), id)
    }
}

/// One connection in the table.
#[derive(Debug)]
struct Entry {
    peer: Option<IpAddr>,
    tracked: Arc<Tracked>,
}

/// The connections of one server, by stage.
#[derive(Debug, Default)]
struct Table {
    /// The next connection's number (so lower is older).
    next: u64,
    /// Connections still opening (TLS handshake, HTTP/2 preface).
    opening: HashMap<u64, Entry>,
    /// Opening connections per peer key.
    per_peer: HashMap<IpAddr, usize>,
    /// Connections past their opening that may be closed to make room (side ports only).
    evictable: HashMap<u64, Entry>,
    /// Connections past their opening, all of them.
    established: usize,
}

impl Table {
    /// The connection to close to make room: the least recently heard from of `candidates`.
    fn least_recently_heard<'a>(
        candidates: impl Iterator<Item = (&'a u64, &'a Entry)>,
    ) -> Option<u64> {
        candidates
            .min_by_key(|(id, entry)| entry.tracked.eviction_key(**id))
            .map(|(id, _)| *id)
    }

    /// Takes connection `id` out of the table (its counts given back) and closes it.
    fn evict(&mut self, id: u64) {
        let entry = if let Some(entry) = self.opening.remove(&id) {
            self.release_peer(entry.peer);
            entry
        } else if let Some(entry) = self.evictable.remove(&id) {
            self.established -= 1;
            entry
        } else {
            return;
        };
        entry.tracked.evicted.cancel();
    }

    fn release_peer(&mut self, peer: Option<IpAddr>) {
        if let Some(key) = peer {
            if let Some(count) = self.per_peer.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    self.per_peer.remove(&key);
                }
            }
        }
    }
}

/// The connections a server holds, and the rules that make room for new ones (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct Connections {
    limits: ConnectionLimits,
    table: Mutex<Table>,
}

/// A connection's place in its server's [`Connections`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    connections: Arc<Connections>,
    id: u64,
    tracked: Arc<Tracked>,
    established: bool,
}

impl Connections {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection from `peer`, still opening, made by closing others as the
    /// module documentation says; `None` when the server is at its cap and no connection may
    /// be closed to make room.
    pub(crate) fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Slot> {
        let mut table = self.lock();
        let max = self.limits.max_connections.max(1);
        if table.opening.len() + table.established >= max {
            let candidates = table.opening.iter().chain(table.evictable.iter());
            let victim = Table::least_recently_heard(candidates)?;
            table.evict(victim);
        }
        let key = peer.map(peer_key);
        if let Some(key) = key {
            if table.per_peer.get(&key).copied().unwrap_or(0) >= OPENING_PER_PEER {
                let from_peer = table.opening.iter().filter(|(_, e)| e.peer == Some(key));
                if let Some(victim) = Table::least_recently_heard(from_peer) {
                    table.evict(victim);
                }
            }
        }
        if table.opening.len() >= OPENING_AT_ONCE {
            if let Some(victim) = Table::least_recently_heard(table.opening.iter()) {
                table.evict(victim);
            }
        }
        let id = table.next;
        table.next += 1;
        let tracked = Arc::new(Tracked {
            heard: AtomicU64::new(0),
            watched: AtomicBool::new(true),
            evicted: CancellationToken::new(),
        });
        if let Some(key) = key {
            *table.per_peer.entry(key).or_insert(0) += 1;
        }
        let entry = Entry {
            peer: key,
            tracked: Arc::clone(&tracked),
        };
        table.opening.insert(id, entry);
        Some(Slot {
            connections: Arc::clone(self),
            id,
            tracked,
            established: false,
        })
    }
}

impl Slot {
    /// Moves the connection past its opening: it no longer counts against its peer's opening
    /// slots, and from now on may be closed to make room only on a side port. `false` when it
    /// has been closed to make room meanwhile.
    pub(crate) fn establish(&mut self) -> bool {
        let mut table = self.connections.lock();
        let Some(entry) = table.opening.remove(&self.id) else {
            return false;
        };
        table.release_peer(entry.peer);
        table.established += 1;
        if self.connections.limits.evict_established {
            table.evictable.insert(self.id, entry);
        } else {
            self.tracked.watched.store(false, Ordering::Relaxed);
        }
        self.established = true;
        true
    }

    /// What this connection's reads update (see [`Heard`](super::io::Heard)).
    pub(super) fn tracked(&self) -> Arc<Tracked> {
        Arc::clone(&self.tracked)
    }

    /// Whether the connection may be closed to make room once past its opening (a side port's).
    pub(crate) fn evicts_established(&self) -> bool {
        self.connections.limits.evict_established
    }

    /// Resolves when the connection has been closed to make room for a newer one.
    pub(crate) fn evicted(&self) -> WaitForCancellationFutureOwned {
        self.tracked.evicted.clone().cancelled_owned()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.connections.lock();
        if let Some(entry) = table.opening.remove(&self.id) {
            table.release_peer(entry.peer);
        } else if self.established {
            let counted = if self.connections.limits.evict_established {
                table.evictable.remove(&self.id).is_some()
            } else {
                true
            };
            if counted {
                table.established -= 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_count_by_ipv4_address_or_ipv6_64() {
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(peer_key(v6("192.0.2.7")), v6("192.0.2.7"));
        assert_eq!(peer_key(v6("::ffff:192.0.2.7")), v6("192.0.2.7"));
        assert_eq!(peer_key(v6("2001:db8:1:2:aaaa::1")), v6("2001:db8:1:2::"));
        assert_eq!(
            peer_key(v6("2001:db8:1:2:ffff::9")),
            peer_key(v6("2001:db8:1:2::1"))
        );
    }

    fn connections(max_connections: usize, evict_established: bool) -> Arc<Connections> {
        Connections::new(ConnectionLimits {
            max_connections,
            evict_established,
        })
    }

    fn open_ids(connections: &Connections) -> Vec<u64> {
        let mut ids: Vec<u64> = connections.lock().opening.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_peer_past_its_share_of_opening_slots_displaces_its_longest_silent_one() {
        let table = connections(10_000, false);
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        let peer = Some(address);
        let held: Vec<_> = (0..OPENING_PER_PEER)
            .map(|_| table.take(peer).expect("within the share"))
            .collect();
        // The oldest has spoken; the second oldest is then the longest silent.
        held[0].tracked.hear();
        let newcomer = table.take(peer).expect("a newcomer displaces a silent one");
        assert!(held[1].tracked.evicted.is_cancelled(), "the longest silent");
        assert!(!held[0].tracked.evicted.is_cancelled(), "one that spoke");
        assert_eq!(table.lock().per_peer[&address], OPENING_PER_PEER);
        assert!(table.take(Some("192.0.2.2".parse().unwrap())).is_some());
        assert!(table.take(None).is_some(), "Unix peers count only globally");
        drop(held);
        drop(newcomer);
        assert!(table.lock().per_peer.is_empty());
        assert!(table.lock().opening.is_empty());
    }

    #[test]
    fn among_peers_that_spoke_the_least_recently_heard_goes_first() {
        let table = connections(3, false);
        let held: Vec<_> = (0..3).map(|_| table.take(None).unwrap()).collect();
        held[2].tracked.hear();
        held[0].tracked.hear();
        held[1].tracked.hear();
        let _newcomer = table.take(None).unwrap();
        assert!(held[2].tracked.evicted.is_cancelled());
        assert_eq!(open_ids(&table), vec![0, 1, 3]);
    }

    #[test]
    fn established_connections_of_a_main_address_are_never_displaced() {
        let table = connections(2, false);
        let mut first = table.take(None).unwrap();
        let mut second = table.take(None).unwrap();
        assert!(first.establish() && second.establish());
        assert!(table.take(None).is_none(), "at the cap, all established");
        drop(first);
        let third = table.take(None).expect("room again");
        assert!(!second.tracked.evicted.is_cancelled());
        drop((second, third));
        let left = table.lock();
        assert_eq!((left.established, left.opening.len()), (0, 0));
    }

    #[test]
    fn a_side_port_at_its_cap_displaces_its_quietest_connection() {
        let table = connections(2, true);
        let mut probe = table.take(None).unwrap();
        let mut idle = table.take(None).unwrap();
        assert!(probe.establish() && idle.establish());
        probe.tracked.hear();
        let _newcomer = table.take(None).expect("a side port makes room");
        assert!(idle.tracked.evicted.is_cancelled(), "never heard from");
        assert!(!probe.tracked.evicted.is_cancelled());
        drop(idle);
        assert_eq!(table.lock().established, 1, "counted once");
    }

    #[test]
    fn past_the_servers_opening_slots_the_longest_silent_of_any_peer_goes() {
        let table = connections(10_000, false);
        // Distinct peers, each well within its own share: only the server-wide bound binds.
        let peer = |i: usize| Some(IpAddr::from([10, 0, (i / 256) as u8, (i % 256) as u8]));
        let held: Vec<_> = (0..OPENING_AT_ONCE)
            .map(|i| table.take(peer(i)).expect("within the server's slots"))
            .collect();
        held[0].tracked.hear();
        let _newcomer = table.take(peer(OPENING_AT_ONCE)).unwrap();
        assert!(held[1].tracked.evicted.is_cancelled(), "the longest silent");
        assert!(!held[0].tracked.evicted.is_cancelled(), "one that spoke");
        assert_eq!(table.lock().opening.len(), OPENING_AT_ONCE);
        assert!(!table.lock().per_peer.contains_key(&peer(1).unwrap()));
    }

    #[test]
    fn a_connection_closed_while_opening_is_never_established_and_gives_its_place_back() {
        let table = connections(1, false);
        let mut displaced = table.take(None).unwrap();
        let mut newcomer = table.take(None).expect("displaces the silent one");
        assert!(displaced.tracked.evicted.is_cancelled());
        assert!(
            !displaced.establish(),
            "closed to make room: not established"
        );
        drop(displaced);
        assert!(newcomer.establish());
        let left = table.lock();
        assert_eq!(
            (left.established, left.opening.len()),
            (1, 0),
            "counted once"
        );
    }

    #[test]
    fn the_default_cap_stays_within_the_descriptor_limit() {
        let cap = default_max_connections();
        assert!((16..=DEFAULT_MAX_CONNECTIONS).contains(&cap), "{cap}");
    }
}
