//! `DnsDiscovery`: a fleet listed by DNS name, every A/AAAA address the name resolves to being
//! one worker at a given port (a Kubernetes headless Service names its ready pods this way).
//!
//! - The lookup goes through the system's resolver configuration (`/etc/resolv.conf`, and the
//!   hosts file), read afresh at each listing, with `hickory-resolver`.
//! - A name that does not exist (the answer is NXDOMAIN) is an error, "NAME does not resolve":
//!   a mistyped name must not read as an empty fleet. A name that exists but has no A/AAAA
//!   records (NOERROR with no answer, "NODATA") is a fleet of none, not an error: callers that
//!   show it say it resolves to no addresses. The two are told apart by hickory's typed answer
//!   (the `NoRecords` error's response code), never by its message. (Kubernetes' DNS answers
//!   NXDOMAIN for a headless Service with no ready pods, so there it lists as the error.)
//! - Names in the special-use `.invalid` zone (RFC 6761) are answered NXDOMAIN by the resolver
//!   itself, and `localhost` names by the loopback addresses, without a query to any server.
//! - Bounded: a listing gives up after [`DnsDiscovery::timeout`] (default
//!   [`DEFAULT_DNS_TIMEOUT`]) and fails when the answer holds more than
//!   [`DnsDiscovery::max_addresses`] distinct addresses (default [`MAX_DNS_ADDRESSES`]).
//! - What a DNS record cannot tell: no uid (nil), pid (0), version (empty), tags, extra,
//!   channel options, nor whether the worker serves TLS (`secure` false). Its records are not
//!   advertisements but the caller's own naming, as a list of targets is: they carry
//!   [`Origin::Dns`](super::Origin::Dns), which the admission gate admits without the security
//!   and version checks (the caller's credentials decide TLS), and whose certificate is
//!   verified against the DNS name unless the caller's credentials name another.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use hickory_resolver::proto::rr::Name;
use hickory_resolver::TokioResolver;
use uuid::Uuid;

use super::{DiscoveredWorker, Origin, Watch};
use crate::connection::{Error, ErrorKind};

/// How long a listing waits for the DNS answer by default.
pub const DEFAULT_DNS_TIMEOUT: Duration = Duration::from_secs(5);

/// The most distinct addresses a listing takes by default (the scaler's most members of one
/// fleet): an answer with more fails the listing.
pub const MAX_DNS_ADDRESSES: usize = 10_000;

/// Discovery by DNS name: each address `name` resolves to is a worker at `port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DnsDiscovery {
    name: String,
    port: u16,
    timeout: Duration,
    max_addresses: usize,
    /// The name server this module's tests run, instead of the system's configuration.
    #[cfg(test)]
    name_server: Option<SocketAddr>,
}

impl DnsDiscovery {
    /// The workers at every address `name` resolves to, each at `port`. No I/O.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] when `name` is not a DNS name (empty, a `:` in it
    /// — the port goes in `port` —, a label over 63 bytes, over 255 bytes in all) or `port` is 0.
    pub fn new(name: &str, port: u16) -> Result<Self, Error> {
        check_name(name)?;
        if port == 0 {
            return Err(Error::invalid_argument("port must be 1 to 65535, got 0"));
        }
        Ok(Self {
            name: name.to_owned(),
            port,
            timeout: DEFAULT_DNS_TIMEOUT,
            max_addresses: MAX_DNS_ADDRESSES,
            #[cfg(test)]
            name_server: None,
        })
    }

    /// The longest a listing waits for the DNS answer (default [`DEFAULT_DNS_TIMEOUT`]); a
    /// zero timeout fails every listing.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The most distinct addresses a listing takes (default [`MAX_DNS_ADDRESSES`]): an answer
    /// with more fails the listing rather than polling part of the fleet.
    pub fn max_addresses(mut self, max: usize) -> Self {
        self.max_addresses = max;
        self
    }

    /// The DNS name looked up.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The workers' port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The workers now: one per distinct address, sorted by address (`ip:port`, `[ip]:port` for
    /// IPv6). Blocks the calling thread for the lookup (at most the timeout); the lookup runs
    /// on a thread of its own, so this may be called from async code too (prefer
    /// [`list_async`](Self::list_async) there).
    ///
    /// An empty list means the name exists but has no A/AAAA records (DNS "NODATA").
    ///
    /// Errors: [`ErrorKind::Transient`] when the name does not exist (NXDOMAIN: the message is
    /// "NAME does not resolve …"), the resolver configuration cannot be read, the lookup fails
    /// otherwise or takes longer than the timeout, or the answer holds more addresses than
    /// [`max_addresses`](Self::max_addresses).
    pub fn list(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        let this = self.clone();
        std::thread::Builder::new()
            .name("wool-dns".into())
            .spawn(move || {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| transient(format!("cannot start the DNS lookup: {e}")))?
                    .block_on(this.list_async())
            })
            .map_err(|e| transient(format!("cannot start the DNS lookup thread: {e}")))?
            .join()
            .map_err(|_| transient("the DNS lookup thread panicked"))?
    }

    /// As [`list`](Self::list), for async code (a Tokio runtime).
    ///
    /// Errors: as [`list`](Self::list).
    pub async fn list_async(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        let timed_out = || {
            transient(format!(
                "resolving {} took longer than {:.3} s",
                self.name,
                self.timeout.as_secs_f64()
            ))
        };
        if self.timeout.is_zero() {
            return Err(timed_out());
        }
        let ips = tokio::time::timeout(self.timeout, self.lookup())
            .await
            .map_err(|_| timed_out())??;
        let mut addresses: Vec<SocketAddr> = ips
            .into_iter()
            .map(|ip| SocketAddr::new(ip, self.port))
            .collect();
        addresses.sort();
        addresses.dedup();
        if addresses.len() > self.max_addresses {
            return Err(transient(format!(
                "{} resolves to {} addresses, more than {}",
                self.name,
                addresses.len(),
                self.max_addresses
            )));
        }
        Ok(addresses
            .into_iter()
            .map(|address| self.record(address))
            .collect())
    }

    /// DNS discovery cannot watch: a DNS answer says nothing of changes.
    ///
    /// Errors: always [`ErrorKind::InvalidArgument`] ("DNS discovery cannot watch"); list
    /// again instead, e.g. every sweep.
    pub fn watch(&self) -> Result<Watch, Error> {
        Err(Error::invalid_argument(format!(
            "DNS discovery cannot watch ({}): list it again instead",
            self.name
        )))
    }

    async fn lookup(&self) -> Result<Vec<IpAddr>, Error> {
        let resolver = self.resolver()?;
        match resolver.lookup_ip(self.name.as_str()).await {
            Ok(lookup) => Ok(lookup.iter().collect()),
            // No such name: a mistyped name, a Service that does not exist (or, in Kubernetes,
            // a headless Service with no ready pods).
            Err(error) if error.is_nx_domain() => Err(transient(format!(
                "{} does not resolve (the DNS answered NXDOMAIN: no such name)",
                self.name
            ))),
            // The name exists with no A/AAAA records: no workers.
            Err(error) if error.is_no_records_found() => Ok(Vec::new()),
            Err(error) => Err(transient(format!("resolving {}: {error}", self.name))),
        }
    }

    /// The resolver: the system's configuration, read afresh (in this module's tests, the
    /// name server they run instead).
    fn resolver(&self) -> Result<TokioResolver, Error> {
        #[cfg(test)]
        if let Some(server) = self.name_server {
            use hickory_resolver::config::{ConnectionConfig, NameServerConfig, ResolverConfig};
            let mut udp = ConnectionConfig::udp();
            udp.port = server.port();
            let config = ResolverConfig::from_parts(
                None,
                Vec::new(),
                vec![NameServerConfig::new(server.ip(), true, vec![udp])],
            );
            return TokioResolver::builder_with_config(config, Default::default())
                .build()
                .map_err(|e| transient(format!("cannot make a DNS resolver: {e}")));
        }
        TokioResolver::builder_tokio()
            .map_err(|e| transient(format!("cannot read the resolver configuration: {e}")))?
            .build()
            .map_err(|e| transient(format!("cannot make a DNS resolver: {e}")))
    }

    /// What a DNS answer tells of the worker at `address`.
    fn record(&self, address: SocketAddr) -> DiscoveredWorker {
        DiscoveredWorker {
            uid: Uuid::nil(),
            address: address.to_string(),
            pid: 0,
            version: String::new(),
            tags: Default::default(),
            extra: Default::default(),
            secure: false,
            identity: Some(self.name.clone()),
            options: None,
            origin: Origin::Dns,
        }
    }
}

/// Checks that `name` is a DNS name (no port in it).
///
/// Errors: [`ErrorKind::InvalidArgument`], the message saying why.
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid_argument("the DNS name must not be empty"));
    }
    if name.contains(':') {
        return Err(Error::invalid_argument(format!(
            "{name:?} is not a DNS name: give the port as port"
        )));
    }
    Name::from_utf8(name)
        .map(drop)
        .map_err(|e| Error::invalid_argument(format!("{name:?} is not a DNS name: {e}")))
}

fn transient(message: impl Into<String>) -> Error {
    Error::new(ErrorKind::Transient, None, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ports_are_checked() {
        for (name, port, says) in [
            ("", 1, "empty"),
            ("w:50051", 1, "give the port"),
            ("bad name!", 1, "not a DNS name"),
            ("localhost", 0, "port"),
        ] {
            let error = DnsDiscovery::new(name, port).unwrap_err();
            assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{name:?}");
            assert!(error.message().contains(says), "{name:?}: {error}");
        }
        let long = "a".repeat(64);
        let error = DnsDiscovery::new(&long, 1).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn localhost_lists_its_addresses_as_dns_records() {
        let workers = DnsDiscovery::new("localhost", 4321)
            .unwrap()
            .list()
            .unwrap();
        assert!(!workers.is_empty());
        for worker in &workers {
            assert!(
                worker.address == "127.0.0.1:4321" || worker.address == "[::1]:4321",
                "{worker:?}"
            );
            assert_eq!(worker.origin, Origin::Dns);
            assert_eq!(worker.identity.as_deref(), Some("localhost"));
            assert!(worker.version.is_empty() && worker.uid.is_nil());
            assert!(worker.refusal(None).is_none(), "DNS records pass the gate");
        }
    }

    #[test]
    fn more_addresses_than_the_bound_fail_the_listing() {
        let error = DnsDiscovery::new("localhost", 1)
            .unwrap()
            .max_addresses(0)
            .list()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient);
        assert!(error.message().contains("more than 0"), "{error}");
    }

    #[test]
    fn a_lookup_past_its_timeout_fails() {
        let error = DnsDiscovery::new("localhost", 1)
            .unwrap()
            .timeout(Duration::ZERO)
            .list()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient);
        assert!(error.message().contains("longer than"), "{error}");
    }

    /// A name server on 127.0.0.1 for these tests, answering every query for a name whose first
    /// label is `gone` with NXDOMAIN and every other with NOERROR and no answer (NODATA).
    struct NameServer {
        address: SocketAddr,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
        thread: Option<std::thread::JoinHandle<()>>,
    }

    impl NameServer {
        fn start() -> Self {
            let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_millis(50)))
                .unwrap();
            let address = socket.local_addr().unwrap();
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stopped = std::sync::Arc::clone(&stop);
            let thread = std::thread::spawn(move || {
                let mut query = [0u8; 512];
                while !stopped.load(std::sync::atomic::Ordering::Relaxed) {
                    let Ok((length, from)) = socket.recv_from(&mut query) else {
                        continue;
                    };
                    if let Some(answer) = Self::answer(&query[..length]) {
                        let _ = socket.send_to(&answer, from);
                    }
                }
            });
            Self {
                address,
                stop,
                thread: Some(thread),
            }
        }

        /// The header (same id, a response, RD copied, RA, the rcode), the question copied,
        /// no records.
        fn answer(query: &[u8]) -> Option<Vec<u8>> {
            let mut end = 12;
            let first_label = query.get(13..13 + usize::from(*query.get(12)?))?.to_vec();
            while *query.get(end)? != 0 {
                end += 1 + usize::from(query[end]);
            }
            end += 1 + 4; // the root label, QTYPE and QCLASS
            let question = query.get(12..end)?;
            let rcode: u8 = if first_label == b"gone" { 3 } else { 0 };
            let mut answer = vec![query[0], query[1], 0x80 | (query[2] & 0x01), 0x80 | rcode];
            answer.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
            answer.extend_from_slice(question);
            Some(answer)
        }
    }

    impl Drop for NameServer {
        fn drop(&mut self) {
            self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
            if let Some(thread) = self.thread.take() {
                let _ = thread.join();
            }
        }
    }

    /// Given a name server that answers NXDOMAIN for one name and NOERROR with no records for
    /// another, when each is listed, then the first is a TRANSIENT error "… does not resolve"
    /// and the second an empty fleet.
    #[test]
    fn a_name_that_does_not_exist_is_an_error_and_one_without_addresses_is_empty() {
        let server = NameServer::start();
        let at_server = |name: &str| {
            let mut discovery = DnsDiscovery::new(name, 50051).unwrap();
            discovery.name_server = Some(server.address);
            discovery.list()
        };
        let error = at_server("gone.wool.test").unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
        assert!(
            error
                .message()
                .starts_with("gone.wool.test does not resolve"),
            "{error}"
        );
        assert!(at_server("empty.wool.test").unwrap().is_empty());
    }

    /// Given a name in the special-use `.invalid` zone, which the resolver answers NXDOMAIN
    /// itself (RFC 6761; the final dot keeps it from resolv.conf's search list, so no query
    /// leaves this machine), when it is listed with the system's configuration, then it does not
    /// resolve.
    #[test]
    fn an_invalid_name_does_not_resolve() {
        let error = DnsDiscovery::new("nosuchhost.invalid.", 50051)
            .unwrap()
            .list()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient);
        assert!(
            error
                .message()
                .starts_with("nosuchhost.invalid. does not resolve"),
            "{error}"
        );
    }

    #[test]
    fn dns_discovery_cannot_watch() {
        let error = DnsDiscovery::new("localhost", 1)
            .unwrap()
            .watch()
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument);
        assert!(error.message().contains("cannot watch"), "{error}");
    }
}
