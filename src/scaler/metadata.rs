//! A ScaledObject's `scalerMetadata`, read into what a sweep needs: which workers, how to
//! count them, how to reach them, how fresh an answer must be.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;

use crate::connection::Error;
use crate::fleet::parse_duration;

/// Keys of KEDA's own about how KEDA reaches the scaler (its address, and its TLS settings,
/// which KEDA reads from the trigger or, for the certificates, a TriggerAuthentication): passed
/// through by KEDA with the trigger's metadata, accepted, and not ours to read.
const KEDA_KEYS: &[&str] = &[
    "scalerAddress",
    "enableTLS",
    "unsafeSsl",
    "caCert",
    "tlsClientCert",
    "tlsClientKey",
    "tlsCertFile",
];

/// The most targets a `targets` list may name: a larger fleet is named by a DNS name or a
/// discovery namespace.
pub(crate) const MAX_TARGETS: usize = 10_000;

/// The longest a single target may be (bytes): longer than any `host:port` (a DNS name is at
/// most 253 bytes) or Unix socket path (107).
pub(crate) const MAX_TARGET_BYTES: usize = 1024;

/// The shortest `sweepTimeout`: below it no poll could be answered.
const MIN_SWEEP_TIMEOUT: Duration = Duration::from_millis(100);

/// The longest `sweepTimeout`: a call waits at most about twice this for its answer, and a
/// fleet is held that long by it.
pub(crate) const MAX_SWEEP_TIMEOUT: Duration = Duration::from_secs(60);

/// The longest `idleThreshold`: seven days.
pub(crate) const MAX_IDLE_THRESHOLD: Duration = Duration::from_secs(7 * 24 * 3600);

/// The longest `maxSweepAge`: one hour.
pub(crate) const MAX_SWEEP_AGE: Duration = Duration::from_secs(3600);

/// The longest `namespace` (bytes), as a Wool discovery namespace.
pub(crate) const MAX_NAMESPACE_BYTES: usize = 255;

/// The longest `workerTlsServerName` (bytes): a DNS name's longest.
pub(crate) const MAX_SERVER_NAME_BYTES: usize = 253;

/// The longest TLS file path (bytes): Linux's `PATH_MAX`.
pub(crate) const MAX_PATH_BYTES: usize = 4096;

/// `targetValue`'s range: KEDA passes targets to the HPA in thousandths, so a smaller one reads
/// as 0; a larger one would never scale past one replica.
const TARGET_VALUE_RANGE: std::ops::RangeInclusive<f64> = 0.001..=1_000_000.0;

/// Every key this scaler reads, for the message about an unknown one.
const KEYS: &[&str] = &[
    "namespace",
    "discovery",
    "dnsName",
    "port",
    "targets",
    "idleThreshold",
    "targetValue",
    "maxSweepAge",
    "sweepTimeout",
    "unreachableAs",
    "idleUnavailableAs",
    "workerTlsCa",
    "workerTlsCert",
    "workerTlsKey",
    "workerTlsServerName",
];

/// Where a fleet's workers come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// A Wool discovery namespace: this host's shared-memory registry, or DNS-SD on the LAN.
    Namespace { name: String, lan: bool },
    /// A DNS name whose A/AAAA records are the workers (a headless Service), each at `port`.
    Dns { name: String, port: u16 },
    /// A fixed list of targets.
    Targets(Vec<String>),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Namespace { name, lan: false } => write!(f, "namespace {name}"),
            Source::Namespace { name, lan: true } => write!(f, "namespace {name} (LAN)"),
            Source::Dns { name, port } => write!(f, "DNS {name} port {port}"),
            Source::Targets(targets) => write!(f, "{} listed targets", targets.len()),
        }
    }
}

/// How a worker whose state the sweep could not read is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum CountAs {
    /// As busy: the scaler never scales away work it cannot see (the default).
    Busy,
    /// As idle: not counted.
    Idle,
}

/// TLS material for reaching the workers, by file path (read again when the files change).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct TlsFiles {
    pub(crate) ca: PathBuf,
    pub(crate) client: Option<(PathBuf, PathBuf)>,
    pub(crate) server_name: Option<String>,
}

/// One ScaledObject's fleet, as its `scalerMetadata` describes it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct FleetSpec {
    pub(crate) source: Source,
    /// A worker idle for less than this is busy (default 5 min).
    pub(crate) idle_threshold: Duration,
    /// The HPA's target: busy workers per replica (default 1).
    pub(crate) target_value: f64,
    /// An answer comes from a sweep at most this old (default 5 s); also how often a
    /// `StreamIsActive` stream sweeps.
    pub(crate) max_sweep_age: Duration,
    /// One deadline for a whole sweep (default 5 s).
    pub(crate) sweep_timeout: Duration,
    pub(crate) unreachable_as: CountAs,
    pub(crate) idle_unavailable_as: CountAs,
    pub(crate) tls: Option<TlsFiles>,
}

impl FleetSpec {
    /// Reads `metadata`. A key ending in `FromEnv` (KEDA resolves its value from the workload's
    /// environment) counts as the key without that suffix.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming the
    /// key, for an unknown key, a bad value, none or more than one of `namespace`, `dnsName`
    /// and `targets`, or half of a client certificate and key.
    pub(crate) fn from_metadata(metadata: &HashMap<String, String>) -> Result<Self, Error> {
        let mut values: BTreeMap<&str, &str> = BTreeMap::new();
        for (key, value) in metadata {
            if KEDA_KEYS.contains(&key.as_str()) {
                continue;
            }
            let name = key.strip_suffix("FromEnv").unwrap_or(key);
            let Some(known) = KEYS.iter().find(|k| **k == name) else {
                return Err(invalid(format!(
                    "unknown scalerMetadata key {key:?} (known: {})",
                    KEYS.join(", ")
                )));
            };
            if values.insert(known, value.trim()).is_some() {
                return Err(invalid(format!(
                    "{name:?} is given twice (also as {name}FromEnv)"
                )));
            }
        }
        let get = |key: &str| values.get(key).copied().filter(|v| !v.is_empty());
        // Every duration has an upper bound, so that no arithmetic on it (an `Instant` plus
        // it, a timer) can overflow, whatever the text says.
        let duration = |key: &str, default: Duration, max: Duration| -> Result<Duration, Error> {
            let Some(text) = get(key) else {
                return Ok(default);
            };
            let value = parse_duration(text).map_err(|e| invalid(format!("{key}: {e}")))?;
            if value > max {
                return Err(invalid(format!(
                    "{key} must be at most {} s, got {text:?}",
                    max.as_secs()
                )));
            }
            Ok(value)
        };
        let positive = |key: &str, default: Duration, max: Duration| -> Result<Duration, Error> {
            let value = duration(key, default, max)?;
            if value.is_zero() {
                return Err(invalid(format!("{key} must be positive")));
            }
            Ok(value)
        };
        let source = match (get("namespace"), get("dnsName"), get("targets")) {
            (Some(name), None, None) => Source::Namespace {
                name: {
                    if name.len() > MAX_NAMESPACE_BYTES {
                        return Err(invalid(format!(
                            "namespace is {} bytes long, more than {MAX_NAMESPACE_BYTES}",
                            name.len()
                        )));
                    }
                    name.to_owned()
                },
                lan: match get("discovery").unwrap_or("local") {
                    "local" => false,
                    "lan" => true,
                    other => {
                        return Err(invalid(format!(
                            "discovery must be \"local\" or \"lan\", got {other:?}"
                        )))
                    }
                },
            },
            (None, Some(name), None) => {
                check_dns_name(name)?;
                let port = get("port")
                    .ok_or_else(|| invalid("dnsName needs a port (the workers' port)"))?;
                let port = port
                    .parse::<u16>()
                    .ok()
                    .filter(|p| *p != 0)
                    .ok_or_else(|| invalid(format!("port must be 1 to 65535, got {port:?}")))?;
                Source::Dns {
                    name: name.to_owned(),
                    port,
                }
            }
            (None, None, Some(list)) => {
                let targets: Vec<String> = list
                    .split(',')
                    .map(str::trim)
                    .filter(|t| !t.is_empty())
                    .map(str::to_owned)
                    .collect();
                if targets.is_empty() {
                    return Err(invalid("targets lists no target"));
                }
                if targets.len() > MAX_TARGETS {
                    return Err(invalid(format!(
                        "targets lists {} targets, more than {MAX_TARGETS}: name a fleet this \
                         large by dnsName or namespace",
                        targets.len()
                    )));
                }
                for target in &targets {
                    if target.len() > MAX_TARGET_BYTES {
                        return Err(invalid(format!(
                            "targets: a target of {} bytes, more than {MAX_TARGET_BYTES}",
                            target.len()
                        )));
                    }
                    crate::connection::Target::parse(target)
                        .map_err(|e| invalid(format!("targets: {target:?}: {}", e.message())))?;
                }
                Source::Targets(targets)
            }
            (None, None, None) => {
                return Err(invalid(
                    "say which workers: one of namespace (a Wool discovery namespace), \
                     dnsName with port (e.g. a headless Service), or targets (comma-separated)",
                ))
            }
            _ => return Err(invalid("give only one of namespace, dnsName and targets")),
        };
        if get("discovery").is_some() && !matches!(source, Source::Namespace { .. }) {
            return Err(invalid("discovery applies to namespace only"));
        }
        if get("port").is_some() && !matches!(source, Source::Dns { .. }) {
            return Err(invalid("port applies to dnsName only"));
        }
        let target_value = match get("targetValue") {
            None => 1.0,
            Some(text) => text
                .parse::<f64>()
                .ok()
                .filter(|v| TARGET_VALUE_RANGE.contains(v))
                .ok_or_else(|| {
                    invalid(format!(
                        "targetValue must be a number of busy workers per replica from {} to {}, \
                         got {text:?}",
                        TARGET_VALUE_RANGE.start(),
                        TARGET_VALUE_RANGE.end()
                    ))
                })?,
        };
        let count_as = |key: &str| match get(key).unwrap_or("busy") {
            "busy" => Ok(CountAs::Busy),
            "idle" => Ok(CountAs::Idle),
            other => Err(invalid(format!(
                "{key} must be \"busy\" or \"idle\", got {other:?}"
            ))),
        };
        let tls = match (
            get("workerTlsCa"),
            get("workerTlsCert"),
            get("workerTlsKey"),
        ) {
            (None, None, None) => {
                if get("workerTlsServerName").is_some() {
                    return Err(invalid("workerTlsServerName needs workerTlsCa"));
                }
                None
            }
            (None, _, _) => return Err(invalid(
                "workerTlsCert and workerTlsKey need workerTlsCa (the CA to verify workers with)",
            )),
            (Some(ca), cert, key) => {
                for (name, path) in [
                    ("workerTlsCa", Some(ca)),
                    ("workerTlsCert", cert),
                    ("workerTlsKey", key),
                ] {
                    if path.is_some_and(|p| p.len() > MAX_PATH_BYTES) {
                        return Err(invalid(format!(
                            "{name} is longer than {MAX_PATH_BYTES} bytes"
                        )));
                    }
                }
                if get("workerTlsServerName").is_some_and(|n| n.len() > MAX_SERVER_NAME_BYTES) {
                    return Err(invalid(format!(
                        "workerTlsServerName is longer than {MAX_SERVER_NAME_BYTES} bytes"
                    )));
                }
                Some(TlsFiles {
                    ca: ca.into(),
                    client: match (cert, key) {
                        (Some(cert), Some(key)) => Some((cert.into(), key.into())),
                        (None, None) => None,
                        _ => return Err(invalid(
                            "give workerTlsCert and workerTlsKey together (mutual TLS), or neither",
                        )),
                    },
                    server_name: get("workerTlsServerName").map(str::to_owned),
                })
            }
        };
        Ok(Self {
            source,
            idle_threshold: duration(
                "idleThreshold",
                Duration::from_secs(300),
                MAX_IDLE_THRESHOLD,
            )?,
            target_value,
            max_sweep_age: duration("maxSweepAge", Duration::from_secs(5), MAX_SWEEP_AGE)?,
            sweep_timeout: {
                let timeout = positive("sweepTimeout", Duration::from_secs(5), MAX_SWEEP_TIMEOUT)?;
                if timeout < MIN_SWEEP_TIMEOUT {
                    return Err(invalid(format!(
                        "sweepTimeout must be at least {} ms",
                        MIN_SWEEP_TIMEOUT.as_millis()
                    )));
                }
                timeout
            },
            unreachable_as: count_as("unreachableAs")?,
            idle_unavailable_as: count_as("idleUnavailableAs")?,
            tls,
        })
    }

    /// What identifies the fleet: ScaledObjects whose metadata agree on the workers, on how to
    /// reach them and on the sweep's deadline share one fleet, and so one sweep.
    pub(crate) fn fleet_key(&self) -> FleetKey {
        FleetKey {
            source: self.source.clone(),
            tls: self.tls.clone(),
            sweep_timeout: self.sweep_timeout,
        }
    }
}

/// The part of a [`FleetSpec`] that names a fleet (see [`FleetSpec::fleet_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct FleetKey {
    pub(crate) source: Source,
    pub(crate) tls: Option<TlsFiles>,
    /// Part of the key: a sweep made under one ScaledObject's deadline is no answer for one
    /// that allows another.
    pub(crate) sweep_timeout: Duration,
}

/// A `dnsName` must be a DNS name (the port goes in `port`).
fn check_dns_name(name: &str) -> Result<(), Error> {
    crate::fleet::discovery::check_dns_name(name)
        .map_err(|e| invalid(format!("dnsName: {}", e.message())))
}

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid_argument(message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<FleetSpec, Error> {
        FleetSpec::from_metadata(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn defaults_and_kedas_own_keys() {
        let spec = read(&[("namespace", "batch"), ("scalerAddress", "scaler:9090")]).unwrap();
        assert_eq!(
            spec.source,
            Source::Namespace {
                name: "batch".into(),
                lan: false
            }
        );
        assert_eq!(spec.idle_threshold, Duration::from_secs(300));
        assert_eq!(spec.target_value, 1.0);
        assert_eq!(spec.max_sweep_age, Duration::from_secs(5));
        assert_eq!(spec.unreachable_as, CountAs::Busy);
        assert_eq!(spec.idle_unavailable_as, CountAs::Busy);
        assert!(spec.tls.is_none());
    }

    #[test]
    fn every_source_and_setting_reads() {
        let spec = read(&[
            ("dnsName", "wool-workers.default.svc"),
            ("port", "50051"),
            ("idleThreshold", "2m"),
            ("targetValue", "0.5"),
            ("maxSweepAge", "0"),
            ("unreachableAs", "idle"),
            ("idleUnavailableAsFromEnv", "idle"),
            ("workerTlsCa", "/tls/ca.pem"),
            ("workerTlsCert", "/tls/tls.crt"),
            ("workerTlsKey", "/tls/tls.key"),
            ("workerTlsServerName", "wool-workers"),
            ("caCert", "KEDA's, from a TriggerAuthentication: not ours"),
        ])
        .unwrap();
        assert_eq!(
            spec.source,
            Source::Dns {
                name: "wool-workers.default.svc".into(),
                port: 50051
            }
        );
        assert_eq!(spec.idle_threshold, Duration::from_secs(120));
        assert_eq!(spec.target_value, 0.5);
        assert_eq!(spec.max_sweep_age, Duration::ZERO);
        assert_eq!(spec.unreachable_as, CountAs::Idle);
        assert_eq!(spec.idle_unavailable_as, CountAs::Idle);
        let tls = spec.tls.unwrap();
        assert!(tls.client.is_some());
        assert_eq!(tls.server_name.as_deref(), Some("wool-workers"));
        let listed = read(&[("targets", "127.0.0.1:1, unix:/run/w.sock,")]).unwrap();
        assert_eq!(
            listed.source,
            Source::Targets(vec!["127.0.0.1:1".into(), "unix:/run/w.sock".into()])
        );
    }

    #[test]
    fn bad_metadata_says_which_key() {
        for (pairs, says) in [
            (vec![], "say which workers"),
            (vec![("namespace", "a"), ("targets", "h:1")], "only one"),
            (
                vec![("namespace", "a"), ("idleTreshold", "5m")],
                "idleTreshold",
            ),
            (
                vec![("namespace", "a"), ("idleThreshold", "soon")],
                "idleThreshold",
            ),
            (
                vec![("namespace", "a"), ("idleThreshold", "NaN")],
                "idleThreshold",
            ),
            (
                vec![("namespace", "a"), ("targetValue", "0")],
                "targetValue",
            ),
            (
                vec![("namespace", "a"), ("sweepTimeout", "0s")],
                "sweepTimeout",
            ),
            (
                vec![("namespace", "a"), ("unreachableAs", "gone")],
                "unreachableAs",
            ),
            (vec![("namespace", "a"), ("discovery", "k8s")], "discovery"),
            (vec![("dnsName", "w")], "port"),
            (vec![("dnsName", "w"), ("port", "70000")], "port"),
            (vec![("targets", "h:1"), ("port", "1")], "port applies"),
            (vec![("targets", "h:notaport")], "targets"),
            (vec![("targets", " , ")], "no target"),
            (
                vec![("targets", &["h:1"; MAX_TARGETS + 1].join(","))],
                "more than 10000",
            ),
            (
                vec![("targets", "h:1"), ("workerTlsCert", "/c")],
                "workerTlsCa",
            ),
            (
                vec![
                    ("targets", "h:1"),
                    ("workerTlsCa", "/a"),
                    ("workerTlsKey", "/k"),
                ],
                "together",
            ),
            (
                vec![("targets", "h:1"), ("targetValue", "1e-300")],
                "targetValue",
            ),
            (
                vec![("targets", "h:1"), ("targetValue", "1e300")],
                "targetValue",
            ),
            (
                vec![("targets", "h:1"), ("sweepTimeout", "1ms")],
                "at least 100 ms",
            ),
            (vec![("dnsName", "w:50051"), ("port", "1")], "give the port"),
            (
                vec![("dnsName", "bad name!"), ("port", "1")],
                "not a DNS name",
            ),
            (vec![("namespace", "a"), ("namespaceFromEnv", "b")], "twice"),
            // Durations and numbers past their bounds: never an overflow further on.
            (
                vec![("namespace", "a"), ("idleThreshold", "1e30s")],
                "idleThreshold",
            ),
            (
                vec![("namespace", "a"), ("idleThreshold", "1e30")],
                "idleThreshold",
            ),
            (
                vec![
                    ("namespace", "a"),
                    ("idleThreshold", "18446744073709551615s"),
                ],
                "idleThreshold",
            ),
            (
                vec![("namespace", "a"), ("idleThreshold", "8d")],
                "idleThreshold must be at most 604800 s",
            ),
            (
                vec![("namespace", "a"), ("maxSweepAge", "18446744073709551615s")],
                "maxSweepAge",
            ),
            (
                vec![("namespace", "a"), ("maxSweepAge", "2h")],
                "maxSweepAge must be at most 3600 s",
            ),
            (
                vec![("namespace", "a"), ("sweepTimeout", "1e30")],
                "sweepTimeout",
            ),
            (
                vec![("namespace", "a"), ("sweepTimeout", "61s")],
                "sweepTimeout must be at most 60 s",
            ),
            (vec![("dnsName", "w"), ("port", "99999")], "port"),
            (vec![("namespace", &"n".repeat(256))], "more than 255"),
            (
                vec![("targets", &format!("{}:1", "h".repeat(1100)))],
                "more than 1024",
            ),
            (
                vec![("targets", "h:1"), ("workerTlsCa", &"/".repeat(4097))],
                "longer than 4096",
            ),
        ] {
            let error = read(&pairs).unwrap_err();
            assert_eq!(error.kind(), crate::ErrorKind::InvalidArgument, "{pairs:?}");
            assert!(error.message().contains(says), "{pairs:?}: {error}");
        }
    }
}
