//! `LanDiscovery`: DNS-SD over multicast DNS, as Wool 0.15.7's `LanDiscovery`
//! (`wool/runtime/discovery/lan.py`) publishes workers, browsed with the `mdns-sd` crate.
//!
//! - Service type `_wool-<first 6 hex digits of md5(namespace)>._tcp.local.`; instance name
//!   `<uuid>.<service type>`.
//! - The address is an IPv4 address of the service and its SRV port. Wool takes the first
//!   IPv4 address its resolver lists; `mdns-sd` gives an unordered set, so this takes the
//!   lowest routable one (then, when allowed, the lowest local one), which is deterministic. Loopback (127.0.0.0/8), unspecified (0.0.0.0), link-local
//!   (169.254.0.0/16), multicast and broadcast addresses are never chosen unless the caller
//!   asks for the first three ([`LanDiscovery::allow_local_addresses`]; multicast and
//!   broadcast never): a record from anyone on the link could otherwise point the caller at
//!   a service on its own host. A record with no acceptable IPv4 address is skipped with a
//!   warning.
//! - LAN records carry no channel options: workers found here are reached with the caller's.
//! - TXT properties: `pid` and `version` (required), `tags` (a JSON list), `extra` (a JSON
//!   object), `secure` (`"true"`/`"false"`, absent = insecure), `identity` (absent = none).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use md5::Digest;
use mdns_sd::{ResolvedService, ServiceDaemon, ServiceEvent};
use uuid::Uuid;

use super::{sorted, start_watch, DiscoveredWorker, Roster, Watch};
use crate::connection::{Error, ErrorKind};

/// How long a one-shot listing listens for answers by default: mDNS responders answer a query
/// within about 120 ms, and a second query goes out after 1 s.
pub const DEFAULT_LISTEN: Duration = Duration::from_millis(1500);

/// Discovery through DNS-SD over multicast DNS on the local network (Wool's
/// `LanDiscovery(namespace)`): sees the workers that pools on any host of the link publish under
/// that namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LanDiscovery {
    namespace: String,
    service_type: String,
    listen: Duration,
    allow_local: bool,
}

impl LanDiscovery {
    /// The pool published under `namespace`. No I/O.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for an empty namespace.
    pub fn new(namespace: &str) -> Result<Self, Error> {
        if namespace.is_empty() {
            return Err(Error::invalid_argument("namespace must not be empty"));
        }
        Ok(Self {
            namespace: namespace.to_owned(),
            service_type: service_type(namespace),
            listen: DEFAULT_LISTEN,
            allow_local: false,
        })
    }

    /// How long [`list`](Self::list) listens for answers (default [`DEFAULT_LISTEN`]).
    pub fn listen_for(mut self, listen: Duration) -> Self {
        self.listen = listen;
        self
    }

    /// Whether records whose addresses are loopback, unspecified or link-local may be listed
    /// (default false: such records are skipped). For a pool on this host published over
    /// multicast DNS (e.g. tests, or a workstation); a record from any host of the link may
    /// then point at this host's own services.
    pub fn allow_local_addresses(mut self, allow: bool) -> Self {
        self.allow_local = allow;
        self
    }

    /// The namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// The DNS-SD service type browsed, e.g. `_wool-d265ae._tcp.local.` for `"batch"`.
    pub fn service_type(&self) -> &str {
        &self.service_type
    }

    /// The workers that answered within the listening window, sorted by address.
    ///
    /// Errors: [`ErrorKind::Transient`] when the mDNS responder cannot start (no usable
    /// network interface, sockets refused).
    pub fn list(&self) -> Result<Vec<DiscoveredWorker>, Error> {
        let daemon = daemon()?;
        let events = daemon.browse(&self.service_type).map_err(mdns_error)?;
        let mut roster = Roster::default();
        let until = Instant::now() + self.listen;
        while let Some(left) = until.checked_duration_since(Instant::now()) {
            match events.recv_timeout(left) {
                Ok(event) => {
                    self.apply(&mut roster, event);
                }
                Err(_) => break,
            }
        }
        let _ = daemon.shutdown();
        Ok(sorted(roster.workers.into_values().collect()))
    }

    /// Watches the network: reports each worker as it is resolved, then changes and leaves
    /// (goodbye packets, or records expiring).
    ///
    /// Errors: as [`list`](Self::list).
    pub fn watch(&self) -> Result<Watch, Error> {
        let daemon = daemon()?;
        let events = daemon.browse(&self.service_type).map_err(mdns_error)?;
        let discovery = self.clone();
        start_watch(move |feed| {
            let mut roster = Roster::default();
            loop {
                let next = flume::Selector::new()
                    .recv(&events, |event| event.ok())
                    .recv(&feed.stop, |_| None)
                    .wait();
                let Some(event) = next else { break };
                if let Some(change) = discovery.apply(&mut roster, event) {
                    if !feed.send(change) {
                        break;
                    }
                }
            }
            let _ = daemon.shutdown();
        })
    }

    /// Brings the roster up to date with one browse event.
    fn apply(&self, roster: &mut Roster, event: ServiceEvent) -> Option<super::DiscoveryEvent> {
        match event {
            ServiceEvent::ServiceResolved(service) => {
                match from_service(&service, self.allow_local) {
                    Ok(worker) => roster.upsert(worker),
                    Err(why) => {
                        tracing::warn!(namespace = %self.namespace, service = %service.fullname, "skipping a DNS-SD record: {why}");
                        None
                    }
                }
            }
            ServiceEvent::ServiceRemoved(_, fullname) => {
                let uid = instance_uid(&fullname).ok()?;
                roster.remove(&uid)
            }
            _ => None,
        }
    }
}

fn daemon() -> Result<ServiceDaemon, Error> {
    ServiceDaemon::new().map_err(mdns_error)
}

fn mdns_error(error: mdns_sd::Error) -> Error {
    Error::new(
        ErrorKind::Transient,
        None,
        format!("multicast DNS unavailable: {error}"),
    )
}

/// Wool's `_namespaced_service_type`.
fn service_type(namespace: &str) -> String {
    let digest = md5::Md5::digest(namespace.as_bytes());
    let hex: String = digest.iter().take(3).map(|b| format!("{b:02x}")).collect();
    format!("_wool-{hex}._tcp.local.")
}

/// The uid in an instance name `<uuid>.<service type>`.
fn instance_uid(fullname: &str) -> Result<Uuid, String> {
    let label = fullname.split('.').next().unwrap_or_default();
    Uuid::parse_str(label)
        .map_err(|_| format!("instance name {fullname:?} does not start with a UUID"))
}

/// Whether an IPv4 address may be a worker's: never multicast or broadcast; loopback,
/// unspecified and link-local only when `allow_local`.
fn acceptable(ip: &std::net::Ipv4Addr, allow_local: bool) -> bool {
    if ip.is_multicast() || ip.is_broadcast() {
        return false;
    }
    allow_local || !(ip.is_loopback() || ip.is_unspecified() || ip.is_link_local())
}

/// Wool's `_deserialize_metadata` for a resolved service; the error says why it was refused.
fn from_service(service: &ResolvedService, allow_local: bool) -> Result<DiscoveredWorker, String> {
    let property = |key: &str| {
        service
            .get_property_val_str(key)
            .filter(|value| !value.is_empty())
    };
    let uid = instance_uid(&service.fullname)?;
    let pid = property("pid").ok_or("no pid property")?;
    let pid: i32 = pid
        .parse()
        .map_err(|_| format!("pid {pid:?} is not a number"))?;
    let version = property("version").ok_or("no version property")?.to_owned();
    let tags: BTreeSet<String> = match property("tags") {
        Some(json) => serde_json::from_str(json)
            .map_err(|e| format!("tags are not a JSON list of strings: {e}"))?,
        None => BTreeSet::new(),
    };
    let extra: BTreeMap<String, String> = match property("extra") {
        Some(json) => serde_json::from_str(json)
            .map_err(|e| format!("extra is not a JSON object of strings: {e}"))?,
        None => BTreeMap::new(),
    };
    let secure = property("secure").is_some_and(|s| s.eq_ignore_ascii_case("true"));
    let identity = property("identity").map(str::to_owned);
    let ipv4: Vec<std::net::Ipv4Addr> = service
        .get_addresses()
        .iter()
        .filter_map(|scoped| match scoped.to_ip_addr() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        })
        .collect();
    if ipv4.is_empty() {
        return Err("no IPv4 address".into());
    }
    // A routable address first; a local one only when allowed and nothing else is listed.
    let ip = ipv4
        .iter()
        .filter(|ip| acceptable(ip, false))
        .min()
        .or_else(|| ipv4.iter().filter(|ip| acceptable(ip, allow_local)).min())
        .ok_or_else(|| {
            let mut listed: Vec<_> = ipv4.iter().map(ToString::to_string).collect();
            listed.sort();
            format!(
                "its IPv4 addresses ({}) are loopback, unspecified, link-local, multicast or \
                 broadcast (refused unless local addresses are allowed)",
                listed.join(", ")
            )
        })?;
    Ok(DiscoveredWorker {
        uid,
        address: format!("{ip}:{}", service.port),
        pid,
        version,
        tags,
        extra,
        secure,
        identity,
        options: None,
        origin: Default::default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_type_matches_wools() {
        // python3 -c 'import wool.runtime.discovery.lan as l; print(l._namespaced_service_type("batch"))'
        assert_eq!(service_type("batch"), "_wool-d265ae._tcp.local.");
    }

    fn resolved(addresses: &[&str]) -> ResolvedService {
        let uid = Uuid::new_v4();
        let properties = std::collections::HashMap::from([
            ("pid".to_string(), "7".to_string()),
            ("version".to_string(), "0.15.7".to_string()),
        ]);
        let ips: Vec<IpAddr> = addresses.iter().map(|a| a.parse().unwrap()).collect();
        mdns_sd::ServiceInfo::new(
            "_wool-d265ae._tcp.local.",
            &uid.to_string(),
            "worker.local.",
            &ips[..],
            4000,
            properties,
        )
        .unwrap()
        .as_resolved_service()
    }

    /// Given DNS-SD records whose IPv4 addresses are loopback, unspecified or link-local, when
    /// they are read, then they are refused unless local addresses are allowed; among several,
    /// a routable address is chosen, the lowest, whatever the record's order.
    #[test]
    fn local_addresses_in_lan_records_are_refused_unless_asked_for() {
        for local in ["127.0.0.1", "0.0.0.0", "169.254.1.2"] {
            let service = resolved(&[local]);
            let why = from_service(&service, false).unwrap_err();
            assert!(why.contains("loopback, unspecified, link-local"), "{why}");
            assert_eq!(
                from_service(&service, true).unwrap().address,
                format!("{local}:4000")
            );
        }
        let multicast = resolved(&["224.0.0.251"]);
        assert!(from_service(&multicast, true).is_err(), "never multicast");
        let mixed = resolved(&["127.0.0.1", "10.0.0.9", "10.0.0.7", "169.254.0.1"]);
        assert_eq!(
            from_service(&mixed, false).unwrap().address,
            "10.0.0.7:4000"
        );
        assert_eq!(from_service(&mixed, true).unwrap().address, "10.0.0.7:4000");
    }

    #[test]
    fn instance_names_carry_the_uid() {
        let uid = Uuid::new_v4();
        assert_eq!(
            instance_uid(&format!("{uid}._wool-d265ae._tcp.local.")).unwrap(),
            uid
        );
        assert!(instance_uid("printer._ipp._tcp.local.").is_err());
    }
}
