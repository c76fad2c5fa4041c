//! Demand input: Wool clients tell the scaler how many tasks wait for a worker.
//!
//! A fleet at zero workers has nobody busy to count, so the busy-worker count alone can only
//! say "inactive" there, and a client whose fleet is at zero waits. Demand closes that gap:
//! libwool's own gRPC service `libwool.scaler.v1.Demand` (`proto/libwool/demand.proto`),
//! served on the scaler's KEDA address (the same server, the same TLS), takes `Report`s of
//! `(ScaledObject, client id, waiting)`:
//!
//! - each report replaces that client's figure for that ScaledObject; `waiting: 0` withdraws
//!   it; a figure not reported again within the TTL ([`DemandOptions::ttl`], 30 s by default)
//!   expires. The ack says the TTL and when to report again (a third of it);
//! - a ScaledObject's demand is the sum of its clients' live figures, its own: two
//!   ScaledObjects naming the same fleet do not share it;
//! - `IsActive` is true while the fleet counts a busy worker **or** the ScaledObject has
//!   demand; `StreamIsActive` sends the change as soon as demand appears or expires (the
//!   stream is woken, it does not wait for its next sweep); the metric `wool-busy-workers` is
//!   **busy + waiting** (workers the fleet counts as busy, plus the waiting tasks), so that one
//!   waiting task at zero workers means one replica at `targetValue: 1`.
//!
//! A fleet that cannot be listed (`UNAVAILABLE`) while its ScaledObject has demand is active
//! all the same (`IsActive` true; a stream says true): a headless Service with no pods may not
//! resolve at all, and demand is exactly what should start one. `GetMetrics` still fails then,
//! so that KEDA keeps the replica count rather than scale on a figure that leaves out the busy
//! workers it could not see.
//!
//! # Bounds
//!
//! Demand is input from clients, so everything it can make the scaler hold is bounded, each
//! refusal a gRPC status with a message saying which bound, nothing else lost:
//!
//! | bound | default | past it |
//! |---|---|---|
//! | ScaledObjects with demand ([`DemandOptions::max_scaled_objects`]) | 1,024 | `RESOURCE_EXHAUSTED` for a new one |
//! | clients per ScaledObject ([`DemandOptions::max_clients_per_scaled_object`]) | 256 | `RESOURCE_EXHAUSTED` for a new one |
//! | `waiting` in one report ([`DemandOptions::max_waiting`]) | 100,000 | `INVALID_ARGUMENT`: refused, not clamped |
//! | reports a second, per client per ScaledObject ([`DemandOptions::reports_per_second`]) | 10 | `RESOURCE_EXHAUSTED` |
//! | a report's size ([`MAX_REPORT_BYTES`]) | 1 KiB | `OUT_OF_RANGE` (tonic's decoding limit) |
//! | ScaledObject name ([`MAX_NAME_BYTES`]), namespace ([`MAX_NAMESPACE_BYTES`]) | 253, 63 bytes, as Kubernetes spells them | `INVALID_ARGUMENT` |
//! | client id ([`MAX_CLIENT_ID_BYTES`]) | 1 to 128 bytes | `INVALID_ARGUMENT` |
//!
//! The rate is a token bucket per client and ScaledObject: `reports_per_second` reports at
//! once, refilled at `reports_per_second` a second. A withdrawn client's entry is kept until
//! its bucket is full again (at most a second), so withdrawing and reporting again cannot
//! outrun the rate; it holds its place among the ScaledObject's clients meanwhile. The table
//! holds at most `max_scaled_objects × max_clients_per_scaled_object` client entries (262,144
//! at the defaults: about 200 MB if every name and id is as long as allowed, under 100 MB
//! with ordinary ones); lower the two bounds to hold less.
//!
//! # Who may report
//!
//! Under mutual TLS (`--tls-ca` with the certificate and key) every connection has presented a
//! certificate signed by the client CA (the handshake refuses others), and reports are
//! accepted. Under one-way TLS nobody is known, and `Report` answers `UNAUTHENTICATED`. In
//! plaintext reports are accepted from anyone who reaches the port: the NetworkPolicy in front
//! of the scaler (the Helm chart's) then decides who can report, as it decides who can ask for
//! metrics. [`DemandOptions::enabled`] `false` (`--no-demand`) serves no demand at all
//! (`UNIMPLEMENTED`).
//!
//! One table (`table.rs`, plain data behind one lock, time passed in) and the service
//! (`service.rs`) that checks a report and answers it; the generated code in `wire.rs`.

mod service;
mod table;
#[cfg(feature = "protocol")]
pub mod wire;
#[cfg(not(feature = "protocol"))]
pub(crate) mod wire;

use std::time::Duration;

pub(crate) use service::DemandService;
pub(crate) use table::{DemandTable, ObjectKey};

/// The default [`DemandOptions::ttl`]: 30 s.
pub const DEFAULT_DEMAND_TTL: Duration = Duration::from_secs(30);

/// The default [`DemandOptions::max_scaled_objects`]: 1,024.
pub const DEFAULT_MAX_DEMAND_SCALED_OBJECTS: usize = 1024;

/// The default [`DemandOptions::max_clients_per_scaled_object`]: 256.
pub const DEFAULT_MAX_DEMAND_CLIENTS: usize = 256;

/// The default [`DemandOptions::max_waiting`]: 100,000 tasks.
pub const DEFAULT_MAX_WAITING: u32 = 100_000;

/// The default [`DemandOptions::reports_per_second`]: 10.
pub const DEFAULT_DEMAND_REPORTS_PER_SECOND: u32 = 10;

/// The shortest [`DemandOptions::ttl`] taken: 1 s (a client then reports every third of it,
/// within the default rate).
pub const MIN_DEMAND_TTL: Duration = Duration::from_secs(1);

/// The longest [`DemandOptions::ttl`] taken: 1 h.
pub const MAX_DEMAND_TTL: Duration = Duration::from_secs(3600);

/// The largest `DemandReport` the service decodes (bytes): 1 KiB. A report holds two names and
/// a client id (at most 253 + 63 + 128 bytes) and a number; a larger message is refused by
/// tonic before it is decoded (`OUT_OF_RANGE`).
pub const MAX_REPORT_BYTES: usize = 1024;

/// The longest ScaledObject name taken (bytes): a Kubernetes object name's limit.
pub const MAX_NAME_BYTES: usize = 253;

/// The longest ScaledObject namespace taken (bytes): a Kubernetes namespace name's limit.
pub const MAX_NAMESPACE_BYTES: usize = 63;

/// The longest client id taken (bytes).
pub const MAX_CLIENT_ID_BYTES: usize = 128;

/// How the scaler takes demand (`wool-scaler`'s flags `--demand-ttl`,
/// `--max-demand-scaled-objects`, `--max-demand-clients-per-scaled-object`,
/// `--max-demand-waiting`, `--demand-reports-per-second`, `--no-demand`). See the
/// [module docs](self) for what each bound refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DemandOptions {
    /// Whether the scaler serves `libwool.scaler.v1.Demand` at all. Default `true`.
    pub enabled: bool,
    /// How long a client's figure counts after the report that set it. Default
    /// [`DEFAULT_DEMAND_TTL`]; [`MIN_DEMAND_TTL`] to [`MAX_DEMAND_TTL`].
    pub ttl: Duration,
    /// Most ScaledObjects with demand at once. Default [`DEFAULT_MAX_DEMAND_SCALED_OBJECTS`].
    pub max_scaled_objects: usize,
    /// Most clients with a figure for one ScaledObject. Default [`DEFAULT_MAX_DEMAND_CLIENTS`].
    pub max_clients_per_scaled_object: usize,
    /// Largest `waiting` one report may carry; a larger one is refused. Default
    /// [`DEFAULT_MAX_WAITING`].
    pub max_waiting: u32,
    /// Most reports a second from one client for one ScaledObject (also the burst taken at
    /// once). Default [`DEFAULT_DEMAND_REPORTS_PER_SECOND`].
    pub reports_per_second: u32,
}

impl Default for DemandOptions {
    fn default() -> Self {
        Self {
            enabled: true,
            ttl: DEFAULT_DEMAND_TTL,
            max_scaled_objects: DEFAULT_MAX_DEMAND_SCALED_OBJECTS,
            max_clients_per_scaled_object: DEFAULT_MAX_DEMAND_CLIENTS,
            max_waiting: DEFAULT_MAX_WAITING,
            reports_per_second: DEFAULT_DEMAND_REPORTS_PER_SECOND,
        }
    }
}

impl DemandOptions {
    /// Checks that every option is in range (what `wool-scaler`'s flags refuse otherwise).
    ///
    /// Errors: a message naming the option out of range (the TTL outside
    /// [`MIN_DEMAND_TTL`]..=[`MAX_DEMAND_TTL`], a bound or the rate of 0).
    pub fn check(&self) -> Result<(), String> {
        if !(MIN_DEMAND_TTL..=MAX_DEMAND_TTL).contains(&self.ttl) {
            return Err(format!(
                "the demand TTL is {:?}: it must be {MIN_DEMAND_TTL:?} to {MAX_DEMAND_TTL:?}",
                self.ttl
            ));
        }
        for (what, value) in [
            ("most ScaledObjects with demand", self.max_scaled_objects),
            (
                "most demand clients per ScaledObject",
                self.max_clients_per_scaled_object,
            ),
            ("largest waiting figure", self.max_waiting as usize),
            ("demand reports a second", self.reports_per_second as usize),
        ] {
            if value == 0 {
                return Err(format!("the {what} is 0: it must be at least 1"));
            }
        }
        Ok(())
    }

    /// These options with each one out of range taken as the nearest in range (the TTL
    /// within [`MIN_DEMAND_TTL`]..=[`MAX_DEMAND_TTL`], a bound or the rate of 0 as 1): what
    /// [`ScalerBuilder::serve`](super::ScalerBuilder::serve) serves.
    pub fn clamped(self) -> Self {
        Self {
            enabled: self.enabled,
            ttl: self.ttl.clamp(MIN_DEMAND_TTL, MAX_DEMAND_TTL),
            max_scaled_objects: self.max_scaled_objects.max(1),
            max_clients_per_scaled_object: self.max_clients_per_scaled_object.max(1),
            max_waiting: self.max_waiting.max(1),
            reports_per_second: self.reports_per_second.max(1),
        }
    }

    /// When a client should report again while tasks wait: a third of the TTL, so that two
    /// reports may be lost before its figure expires.
    pub fn report_interval(&self) -> Duration {
        self.ttl / 3
    }
}

/// Who may report demand, decided once when the scaler starts from its TLS (the client CA is
/// fixed for the scaler's life; reloads change the material, never whether there is one).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Authentication {
    /// No TLS: whoever reaches the port (the NetworkPolicy decides who can).
    Plaintext,
    /// Mutual TLS: every connection presented a certificate the client CA signed.
    MutualTls,
    /// One-way TLS: nobody is known, nobody may report.
    OneWayTls,
}

/// Why a report was refused: each refusal's gRPC code and metrics outcome are decided here,
/// from the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Refusal {
    /// The scaler serves one-way TLS: the client is not known.
    #[error(
        "demand needs a verified client certificate, and this scaler serves one-way TLS: \
         serve mutual TLS (--tls-ca) to take demand"
    )]
    Unauthenticated,
    /// `scaled_object` is missing.
    #[error("the report names no ScaledObject (scaled_object is missing)")]
    NoScaledObject,
    /// A name, namespace or client id that is empty, too long or badly spelled.
    #[error("{what} {problem}")]
    BadName {
        /// What it is: "the ScaledObject's name", "… namespace", "the client id".
        what: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// `waiting` above [`DemandOptions::max_waiting`].
    #[error(
        "waiting is {waiting}, more than {max}, the most one report may carry \
         (--max-demand-waiting): report at most {max}"
    )]
    TooManyWaiting {
        /// What the report said.
        waiting: u32,
        /// The bound.
        max: u32,
    },
    /// More reports than [`DemandOptions::reports_per_second`] from one client for one
    /// ScaledObject.
    #[error(
        "more than {rate} reports a second from this client for this ScaledObject \
         (--demand-reports-per-second): report on change, at most that often, and every \
         report interval"
    )]
    Rate {
        /// The bound (reports a second).
        rate: u32,
    },
    /// A new ScaledObject past [`DemandOptions::max_scaled_objects`].
    #[error(
        "{max} ScaledObjects already have demand, the most the scaler holds \
         (--max-demand-scaled-objects)"
    )]
    ScaledObjects {
        /// The bound.
        max: usize,
    },
    /// A new client past [`DemandOptions::max_clients_per_scaled_object`].
    #[error(
        "this ScaledObject already has demand from {max} clients, the most it may have \
         (--max-demand-clients-per-scaled-object)"
    )]
    Clients {
        /// The bound.
        max: usize,
    },
}

impl Refusal {
    /// The gRPC code the client gets.
    pub(crate) fn code(&self) -> tonic::Code {
        match self {
            Self::Unauthenticated => tonic::Code::Unauthenticated,
            Self::NoScaledObject | Self::BadName { .. } | Self::TooManyWaiting { .. } => {
                tonic::Code::InvalidArgument
            }
            Self::Rate { .. } | Self::ScaledObjects { .. } | Self::Clients { .. } => {
                tonic::Code::ResourceExhausted
            }
        }
    }

    /// The `outcome` label of `wool_scaler_demand_reports_total`.
    pub(crate) fn outcome(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "unauthenticated",
            Self::NoScaledObject | Self::BadName { .. } => "invalid_name",
            Self::TooManyWaiting { .. } => "too_many_waiting",
            Self::Rate { .. } => "rate_limited",
            Self::ScaledObjects { .. } => "too_many_scaled_objects",
            Self::Clients { .. } => "too_many_clients",
        }
    }
}

/// Checks `value` as a Kubernetes name of at most `max` bytes: lowercase letters, digits and
/// `-`, with `.` too when `dots` (an object name, RFC 1123 subdomain; without, a namespace,
/// RFC 1123 label), each dot-separated part starting and ending with a letter or digit.
fn check_kubernetes_name(
    what: &'static str,
    value: &str,
    max: usize,
    dots: bool,
) -> Result<(), Refusal> {
    let refuse = |problem: String| Refusal::BadName { what, problem };
    if value.is_empty() {
        return Err(refuse("is empty".into()));
    }
    if value.len() > max {
        return Err(refuse(format!(
            "is {} bytes long, more than {max}",
            value.len()
        )));
    }
    let alphanumeric = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    let part_ok = |part: &str| {
        part.starts_with(alphanumeric)
            && part.ends_with(alphanumeric)
            && part.chars().all(|c| alphanumeric(c) || c == '-')
    };
    let spelled = if dots {
        value.split('.').all(part_ok)
    } else {
        part_ok(value)
    };
    if !spelled {
        let allowed = if dots {
            "lowercase letters, digits, '-' and '.'"
        } else {
            "lowercase letters, digits and '-'"
        };
        return Err(refuse(format!(
            "{value:?} is not a Kubernetes name ({allowed}, starting and ending with a letter \
             or digit)"
        )));
    }
    Ok(())
}

/// Checks a client id: 1 to [`MAX_CLIENT_ID_BYTES`] bytes.
fn check_client_id(value: &str) -> Result<(), Refusal> {
    let refuse = |problem: String| Refusal::BadName {
        what: "the client id",
        problem,
    };
    if value.is_empty() {
        return Err(refuse("is empty".into()));
    }
    if value.len() > MAX_CLIENT_ID_BYTES {
        return Err(refuse(format!(
            "is {} bytes long, more than {MAX_CLIENT_ID_BYTES}",
            value.len()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_names_are_checked_as_kubernetes_spells_them() {
        let name = |v: &str| check_kubernetes_name("name", v, MAX_NAME_BYTES, true);
        let namespace = |v: &str| check_kubernetes_name("ns", v, MAX_NAMESPACE_BYTES, false);
        assert!(name("workers").is_ok());
        assert!(name("wool.workers-2").is_ok());
        assert!(namespace("team-a").is_ok());
        for bad in ["", "Workers", "-w", "w-", "a..b", "a_b", "é"] {
            assert!(name(bad).is_err(), "{bad:?}");
        }
        assert!(namespace("a.b").is_err());
        assert!(name(&"a".repeat(MAX_NAME_BYTES)).is_ok());
        let long = name(&"a".repeat(MAX_NAME_BYTES + 1)).unwrap_err();
        assert!(long.to_string().contains("254 bytes long"), "{long}");
        assert!(namespace(&"a".repeat(MAX_NAMESPACE_BYTES + 1)).is_err());
        assert!(check_client_id(&"c".repeat(MAX_CLIENT_ID_BYTES)).is_ok());
        assert!(check_client_id(&"c".repeat(MAX_CLIENT_ID_BYTES + 1)).is_err());
        assert!(check_client_id("").is_err());
    }

    #[test]
    fn options_out_of_range_are_named() {
        assert!(DemandOptions::default().check().is_ok());
        let short = DemandOptions {
            ttl: Duration::from_millis(10),
            ..DemandOptions::default()
        };
        assert!(short.check().unwrap_err().contains("TTL"));
        let none = DemandOptions {
            reports_per_second: 0,
            ..DemandOptions::default()
        };
        assert!(none.check().unwrap_err().contains("reports a second"));
        let clamped = DemandOptions {
            ttl: Duration::ZERO,
            ..none
        }
        .clamped();
        assert_eq!(
            (clamped.ttl, clamped.reports_per_second),
            (MIN_DEMAND_TTL, 1)
        );
        assert_eq!(
            DemandOptions::default().report_interval(),
            Duration::from_secs(10)
        );
    }
}
