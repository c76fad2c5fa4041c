//! `LanDiscovery`: DNS-SD over multicast DNS, as Wool 0.15.7's `LanDiscovery`
//! (`wool/runtime/discovery/lan.py`) publishes workers, browsed with the `mdns-sd` crate.
//!
//! - Service type `_wool-<first 6 hex digits of md5(namespace)>._tcp.local.`; instance name
//!   `<uuid>.<service type>`.
//! - The address is the first IPv4 address of the service and its SRV port.
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
        })
    }

    /// How long [`list`](Self::list) listens for answers (default [`DEFAULT_LISTEN`]).
    pub fn listen_for(mut self, listen: Duration) -> Self {
        self.listen = listen;
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
            ServiceEvent::ServiceResolved(service) => match from_service(&service) {
                Ok(worker) => roster.upsert(worker),
                Err(why) => {
                    tracing::warn!(namespace = %self.namespace, service = %service.fullname, "skipping a DNS-SD record: {why}");
                    None
                }
            },
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

/// Wool's `_deserialize_metadata` for a resolved service; the error says why it was refused.
fn from_service(service: &ResolvedService) -> Result<DiscoveredWorker, String> {
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
    let ip = service
        .get_addresses()
        .iter()
        .map(|scoped| scoped.to_ip_addr())
        .filter(IpAddr::is_ipv4)
        .min()
        .ok_or("no IPv4 address")?;
    Ok(DiscoveredWorker {
        uid,
        address: format!("{ip}:{}", service.port),
        pid,
        version,
        tags,
        extra,
        secure,
        identity,
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
