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
    "podSelector",
    "deletionCost",
];

/// The longest `podSelector` (bytes): far longer than any label selector a person writes.
pub(crate) const MAX_SELECTOR_BYTES: usize = 4096;

/// Where a fleet's workers come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Source {
    /// A Wool discovery namespace: this host's shared-memory registry, or DNS-SD on the LAN.
    Namespace { name: String, lan: bool },
    /// A DNS name whose A/AAAA records are the workers (a headless Service), each at `port`.
    Dns { name: String, port: u16 },
    /// A fixed list of targets.
    Targets(Vec<String>),
    /// The pods a label selector picks in the ScaledObject's namespace, watched through the
    /// Kubernetes API; each Ready pod with an IP is a worker at `podIP:port`.
    Pods {
        namespace: String,
        selector: String,
        port: u16,
    },
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Namespace { name, lan: false } => write!(f, "namespace {name}"),
            Source::Namespace { name, lan: true } => write!(f, "namespace {name} (LAN)"),
            Source::Dns { name, port } => write!(f, "DNS {name} port {port}"),
            Source::Targets(targets) => write!(f, "{} listed targets", targets.len()),
            Source::Pods {
                namespace,
                selector,
                port,
            } => write!(f, "pods {selector} in {namespace} port {port}"),
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
pub(crate) struct TriggerSpec {
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
    /// Whether the idlest pods of a pod group get a low pod deletion cost when the metric
    /// means fewer replicas (`deletionCost: "true"`; default false).
    pub(crate) deletion_cost: bool,
}

impl TriggerSpec {
    /// Reads `metadata`. A key ending in `FromEnv` (KEDA resolves its value from the workload's
    /// environment) counts as the key without that suffix. Each setting is read by its own
    /// parser below ([`Keys`], [`source`], [`target_value`], [`sweep_timeout`], [`count_as`],
    /// [`tls_files`]).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument), naming the
    /// key, for an unknown key, a bad value, none or more than one of `namespace`, `dnsName`,
    /// `targets` and `podSelector`, or half of a client certificate and key.
    #[cfg(test)]
    pub(crate) fn from_metadata(metadata: &HashMap<String, String>) -> Result<Self, Error> {
        Self::from_metadata_in(metadata, "")
    }

    /// Reads `metadata` of a ScaledObject in Kubernetes namespace `namespace` (where a
    /// `podSelector` picks pods), as [`from_metadata`](Self::from_metadata) says.
    pub(crate) fn from_metadata_in(
        metadata: &HashMap<String, String>,
        namespace: &str,
    ) -> Result<Self, Error> {
        let keys = Keys::read(metadata)?;
        let source = source(&keys, namespace)?;
        Ok(Self {
            deletion_cost: deletion_cost(&keys, &source)?,
            source,
            idle_threshold: keys.duration(
                "idleThreshold",
                Duration::from_secs(300),
                MAX_IDLE_THRESHOLD,
            )?,
            target_value: target_value(keys.get("targetValue"))?,
            max_sweep_age: keys.duration("maxSweepAge", Duration::from_secs(5), MAX_SWEEP_AGE)?,
            sweep_timeout: sweep_timeout(&keys)?,
            unreachable_as: count_as(&keys, "unreachableAs")?,
            idle_unavailable_as: count_as(&keys, "idleUnavailableAs")?,
            tls: tls_files(&keys)?,
        })
    }

    /// What identifies the fleet: ScaledObjects whose metadata agree on the workers, on how to
    /// reach them and on the sweep's deadline share one fleet, and so one sweep.
    pub(crate) fn group_key(&self) -> GroupKey {
        GroupKey {
            source: self.source.clone(),
            tls: self.tls.clone(),
            sweep_timeout: self.sweep_timeout,
        }
    }
}

/// The part of a [`TriggerSpec`] that names a fleet (see [`TriggerSpec::group_key`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct GroupKey {
    pub(crate) source: Source,
    pub(crate) tls: Option<TlsFiles>,
    /// Part of the key: a sweep made under one ScaledObject's deadline is no answer for one
    /// that allows another.
    pub(crate) sweep_timeout: Duration,
}

/// A metadata map's values by the key this scaler knows them as (a `FromEnv` key as the key
/// without the suffix; KEDA's own keys left out), trimmed; an empty value counts as absent.
#[derive(Debug, Default)]
pub(crate) struct Keys<'a> {
    values: BTreeMap<&'static str, &'a str>,
}

impl<'a> Keys<'a> {
    /// Reads which keys `metadata` gives.
    ///
    /// Errors: an unknown key (the message lists the known ones), or a key given both
    /// directly and as `…FromEnv`.
    pub(crate) fn read(metadata: &'a HashMap<String, String>) -> Result<Self, Error> {
        let mut values = BTreeMap::new();
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
            if values.insert(*known, value.trim()).is_some() {
                return Err(invalid(format!(
                    "{name:?} is given twice (also as {name}FromEnv)"
                )));
            }
        }
        Ok(Self { values })
    }

    /// `key`'s value, if given and not empty.
    pub(crate) fn get(&self, key: &str) -> Option<&'a str> {
        self.values.get(key).copied().filter(|v| !v.is_empty())
    }

    /// `key` as a duration ([`parse_duration`]: `90`, `1.5s`, `5m`, ...), `default` when
    /// absent. Every duration has an upper bound, `max`, so that no arithmetic on it (an
    /// `Instant` plus it, a timer) can overflow, whatever the text says.
    ///
    /// Errors: not a duration, or longer than `max`.
    pub(crate) fn duration(
        &self,
        key: &str,
        default: Duration,
        max: Duration,
    ) -> Result<Duration, Error> {
        let Some(text) = self.get(key) else {
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
    }
}

/// Where the workers come from: exactly one of `namespace` (with `discovery`), `dnsName` (with
/// `port`), `targets` and `podSelector` (with `port`; its pods in `namespace`, the
/// ScaledObject's).
///
/// Errors: none or more than one source, a setting given for a source it does not apply to,
/// or a bad value of the source's own keys.
pub(crate) fn source(keys: &Keys, namespace: &str) -> Result<Source, Error> {
    if let Some(selector) = keys.get("podSelector") {
        if keys.get("namespace").is_some()
            || keys.get("dnsName").is_some()
            || keys.get("targets").is_some()
        {
            return Err(invalid(
                "give only one of namespace, dnsName, targets and podSelector",
            ));
        }
        if keys.get("discovery").is_some() {
            return Err(invalid("discovery applies to namespace only"));
        }
        if selector.len() > MAX_SELECTOR_BYTES {
            return Err(invalid(format!(
                "podSelector is {} bytes long, more than {MAX_SELECTOR_BYTES}",
                selector.len()
            )));
        }
        if namespace.is_empty() {
            return Err(invalid(
                "podSelector needs the ScaledObject's namespace (KEDA sends it with each call)",
            ));
        }
        return Ok(Source::Pods {
            namespace: namespace.to_owned(),
            selector: selector.to_owned(),
            port: port(keys.get("port"), "podSelector")?,
        });
    }
    let source = match (
        keys.get("namespace"),
        keys.get("dnsName"),
        keys.get("targets"),
    ) {
        (Some(name), None, None) => {
            if name.len() > MAX_NAMESPACE_BYTES {
                return Err(invalid(format!(
                    "namespace is {} bytes long, more than {MAX_NAMESPACE_BYTES}",
                    name.len()
                )));
            }
            let lan = match keys.get("discovery").unwrap_or("local") {
                "local" => false,
                "lan" => true,
                other => {
                    return Err(invalid(format!(
                        "discovery must be \"local\" or \"lan\", got {other:?}"
                    )))
                }
            };
            Source::Namespace {
                name: name.to_owned(),
                lan,
            }
        }
        (None, Some(name), None) => {
            check_dns_name(name)?;
            let port = port(keys.get("port"), "dnsName")?;
            Source::Dns {
                name: name.to_owned(),
                port,
            }
        }
        (None, None, Some(list)) => Source::Targets(targets(list)?),
        (None, None, None) => {
            return Err(invalid(
                "say which workers: one of namespace (a Wool discovery namespace), \
                 dnsName with port (e.g. a headless Service), targets (comma-separated), or podSelector with port (pods in the ScaledObject's namespace)",
            ))
        }
        _ => {
            return Err(invalid(
                "give only one of namespace, dnsName, targets and podSelector",
            ))
        }
    };
    if keys.get("discovery").is_some() && !matches!(source, Source::Namespace { .. }) {
        return Err(invalid("discovery applies to namespace only"));
    }
    if keys.get("port").is_some() && !matches!(source, Source::Dns { .. }) {
        return Err(invalid("port applies to dnsName and podSelector only"));
    }
    Ok(source)
}

/// A comma-separated `targets` list: empty entries skipped, at most [`MAX_TARGETS`] of at
/// most [`MAX_TARGET_BYTES`] each, every one a target
/// [`Target::parse`](crate::connection::Target::parse) reads.
///
/// Errors: no target, too many, one too long, or one that is no target.
pub(crate) fn targets(list: &str) -> Result<Vec<String>, Error> {
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
            "targets lists {} targets, more than {MAX_TARGETS}: name a fleet this large by \
             dnsName or namespace",
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
    Ok(targets)
}

/// The workers' `port`, which the source named `needed_by` requires: 1 to 65535.
///
/// Errors: absent, or not a port.
pub(crate) fn port(text: Option<&str>, needed_by: &str) -> Result<u16, Error> {
    let text =
        text.ok_or_else(|| invalid(format!("{needed_by} needs a port (the workers' port)")))?;
    text.parse::<u16>()
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| invalid(format!("port must be 1 to 65535, got {text:?}")))
}

/// `deletionCost`: `"true"` or `"false"` (the default); true for a `podSelector` source only.
///
/// Errors: another value, or true for another source.
pub(crate) fn deletion_cost(keys: &Keys, source: &Source) -> Result<bool, Error> {
    let on = match keys.get("deletionCost").unwrap_or("false") {
        "true" => true,
        "false" => false,
        other => {
            return Err(invalid(format!(
                "deletionCost must be \"true\" or \"false\", got {other:?}"
            )))
        }
    };
    if on && !matches!(source, Source::Pods { .. }) {
        return Err(invalid(
            "deletionCost applies to podSelector only (the scaler annotates the pods it watches)",
        ));
    }
    Ok(on)
}

/// `targetValue`: busy workers per replica, within [`TARGET_VALUE_RANGE`]; 1 when absent.
///
/// Errors: not a number, or out of the range.
pub(crate) fn target_value(text: Option<&str>) -> Result<f64, Error> {
    let Some(text) = text else {
        return Ok(1.0);
    };
    text.parse::<f64>()
        .ok()
        .filter(|v| TARGET_VALUE_RANGE.contains(v))
        .ok_or_else(|| {
            invalid(format!(
                "targetValue must be a number of busy workers per replica from {} to {}, got \
                 {text:?}",
                TARGET_VALUE_RANGE.start(),
                TARGET_VALUE_RANGE.end()
            ))
        })
}

/// `sweepTimeout`: from [`MIN_SWEEP_TIMEOUT`] to [`MAX_SWEEP_TIMEOUT`], 5 s when absent.
///
/// Errors: not a duration, or out of that range.
pub(crate) fn sweep_timeout(keys: &Keys) -> Result<Duration, Error> {
    let timeout = keys.duration("sweepTimeout", Duration::from_secs(5), MAX_SWEEP_TIMEOUT)?;
    if timeout.is_zero() {
        return Err(invalid("sweepTimeout must be positive"));
    }
    if timeout < MIN_SWEEP_TIMEOUT {
        return Err(invalid(format!(
            "sweepTimeout must be at least {} ms",
            MIN_SWEEP_TIMEOUT.as_millis()
        )));
    }
    Ok(timeout)
}

/// How `key` (`unreachableAs`, `idleUnavailableAs`) says to count a worker whose state could
/// not be read: `busy` (the default) or `idle`.
///
/// Errors: any other value.
pub(crate) fn count_as(keys: &Keys, key: &str) -> Result<CountAs, Error> {
    match keys.get(key).unwrap_or("busy") {
        "busy" => Ok(CountAs::Busy),
        "idle" => Ok(CountAs::Idle),
        other => Err(invalid(format!(
            "{key} must be \"busy\" or \"idle\", got {other:?}"
        ))),
    }
}

/// The TLS files to reach the workers with: `workerTlsCa`, optionally `workerTlsCert` with
/// `workerTlsKey`, and `workerTlsServerName`; `None` when none is given. Paths are checked
/// for length only here (the target group reads them).
///
/// Errors: a certificate, key or server name without a CA, half of a client pair, or a path
/// or name past its length bound.
pub(crate) fn tls_files(keys: &Keys) -> Result<Option<TlsFiles>, Error> {
    let server_name = keys.get("workerTlsServerName");
    let (ca, cert, key) =
        match (
            keys.get("workerTlsCa"),
            keys.get("workerTlsCert"),
            keys.get("workerTlsKey"),
        ) {
            (None, None, None) if server_name.is_some() => {
                return Err(invalid("workerTlsServerName needs workerTlsCa"))
            }
            (None, None, None) => return Ok(None),
            (None, _, _) => return Err(invalid(
                "workerTlsCert and workerTlsKey need workerTlsCa (the CA to verify workers with)",
            )),
            (Some(ca), cert, key) => (ca, cert, key),
        };
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
    if server_name.is_some_and(|n| n.len() > MAX_SERVER_NAME_BYTES) {
        return Err(invalid(format!(
            "workerTlsServerName is longer than {MAX_SERVER_NAME_BYTES} bytes"
        )));
    }
    let client = match (cert, key) {
        (Some(cert), Some(key)) => Some((cert.into(), key.into())),
        (None, None) => None,
        _ => {
            return Err(invalid(
                "give workerTlsCert and workerTlsKey together (mutual TLS), or neither",
            ))
        }
    };
    Ok(Some(TlsFiles {
        ca: ca.into(),
        client,
        server_name: server_name.map(str::to_owned),
    }))
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

    fn read(pairs: &[(&str, &str)]) -> Result<TriggerSpec, Error> {
        TriggerSpec::from_metadata(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    fn keys(map: &HashMap<String, String>) -> Keys<'_> {
        Keys::read(map).unwrap()
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn keys_read_known_names_from_env_and_skip_kedas() {
        let given = map(&[
            ("namespace", " batch "),
            ("idleThresholdFromEnv", "IDLE"),
            ("scalerAddress", "scaler:9090"),
            ("port", ""),
        ]);
        let keys = keys(&given);
        assert_eq!(keys.get("namespace"), Some("batch"));
        assert_eq!(keys.get("idleThreshold"), Some("IDLE"));
        assert_eq!(keys.get("scalerAddress"), None);
        assert_eq!(keys.get("port"), None, "an empty value is absent");
        let unknown = Keys::read(&map(&[("idleTreshold", "1")])).unwrap_err();
        assert!(unknown.message().contains("known: namespace"), "{unknown}");
        let twice = map(&[("port", "1"), ("portFromEnv", "P")]);
        assert!(Keys::read(&twice).unwrap_err().message().contains("twice"));
    }

    #[test]
    fn a_duration_has_a_default_and_a_bound() {
        let given = map(&[("maxSweepAge", "90"), ("idleThreshold", "2h")]);
        let keys = keys(&given);
        let max = Duration::from_secs(3600);
        let read = |key| keys.duration(key, Duration::from_secs(7), max);
        assert_eq!(read("maxSweepAge").unwrap(), Duration::from_secs(90));
        assert_eq!(read("sweepTimeout").unwrap(), Duration::from_secs(7));
        let past = read("idleThreshold").unwrap_err();
        assert!(past.message().contains("at most 3600 s"), "{past}");
    }

    #[test]
    fn the_source_parsers_read_and_refuse_alone() {
        assert_eq!(port(Some("50051"), "dnsName").unwrap(), 50051);
        assert!(port(None, "dnsName")
            .unwrap_err()
            .message()
            .contains("dnsName needs a port"));
        assert!(port(Some("0"), "dnsName").is_err());
        assert_eq!(targets("a:1, ,b:2").unwrap(), vec!["a:1", "b:2"]);
        assert!(targets(",").unwrap_err().message().contains("no target"));
        let lan = map(&[("namespace", "n"), ("discovery", "lan")]);
        assert_eq!(
            source(&keys(&lan), "").unwrap(),
            Source::Namespace {
                name: "n".into(),
                lan: true
            }
        );
        let stray = map(&[("targets", "a:1"), ("discovery", "lan")]);
        let error = source(&keys(&stray), "").unwrap_err();
        assert!(error.message().contains("discovery applies"), "{error}");
        let pods = map(&[("podSelector", "app=wool"), ("port", "50051")]);
        assert_eq!(
            source(&keys(&pods), "batch").unwrap(),
            Source::Pods {
                namespace: "batch".into(),
                selector: "app=wool".into(),
                port: 50051
            }
        );
        let error = source(&keys(&pods), "").unwrap_err();
        assert!(error.message().contains("namespace"), "{error}");
        let no_port = map(&[("podSelector", "app=wool")]);
        let error = source(&keys(&no_port), "batch").unwrap_err();
        assert!(
            error.message().contains("podSelector needs a port"),
            "{error}"
        );
        let long = "a".repeat(MAX_SELECTOR_BYTES + 1);
        let long = map(&[("podSelector", &long), ("port", "1")]);
        let error = source(&keys(&long), "batch").unwrap_err();
        assert!(error.message().contains("more than 4096"), "{error}");
        let two = map(&[("podSelector", "a=b"), ("targets", "h:1"), ("port", "1")]);
        assert!(source(&keys(&two), "batch").is_err());
    }

    #[test]
    fn deletion_cost_is_for_pods_only() {
        let pods = Source::Pods {
            namespace: "n".into(),
            selector: "a=b".into(),
            port: 1,
        };
        let on = map(&[("deletionCost", "true")]);
        assert!(deletion_cost(&keys(&on), &pods).unwrap());
        assert!(!deletion_cost(&keys(&map(&[])), &pods).unwrap());
        let targets = Source::Targets(vec!["h:1".into()]);
        let error = deletion_cost(&keys(&on), &targets).unwrap_err();
        assert!(error.message().contains("podSelector only"), "{error}");
        let bad = map(&[("deletionCost", "yes")]);
        assert!(deletion_cost(&keys(&bad), &pods).is_err());
    }

    #[test]
    fn the_counting_parsers_read_and_refuse_alone() {
        assert_eq!(target_value(None).unwrap(), 1.0);
        assert_eq!(target_value(Some("2.5")).unwrap(), 2.5);
        assert!(target_value(Some("0")).is_err());
        let given = map(&[("unreachableAs", "idle"), ("idleUnavailableAs", "x")]);
        let keys = keys(&given);
        assert_eq!(count_as(&keys, "unreachableAs").unwrap(), CountAs::Idle);
        assert!(count_as(&keys, "idleUnavailableAs").is_err());
        assert_eq!(sweep_timeout(&keys).unwrap(), Duration::from_secs(5));
        let short = map(&[("sweepTimeout", "50ms")]);
        assert!(sweep_timeout(&self::keys(&short)).is_err());
    }

    #[test]
    fn the_tls_files_parser_reads_and_refuses_alone() {
        assert_eq!(tls_files(&keys(&map(&[]))).unwrap(), None);
        let server_only = map(&[("workerTlsServerName", "w")]);
        assert!(tls_files(&keys(&server_only)).is_err());
        let full = map(&[
            ("workerTlsCa", "/ca"),
            ("workerTlsCert", "/c"),
            ("workerTlsKey", "/k"),
        ]);
        let tls = tls_files(&keys(&full)).unwrap().unwrap();
        assert_eq!(tls.ca, PathBuf::from("/ca"));
        assert!(tls.client.is_some());
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
