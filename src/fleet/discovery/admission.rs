//! The admission gate every discovered worker passes before it is connected, polled or stopped,
//! as Wool 0.15.7's `WorkerProxy` admits workers (`wool/runtime/worker/proxy.py`:
//! `_create_security_filter`, `_create_version_filter`, `_create_identity_filter`,
//! `_incompatibility_reason`), and the channel options a discovered worker is reached with.
//!
//! The three arms, in Wool's order (the first that refuses is the reason):
//!
//! 1. **security**: a caller with credentials admits only workers advertising `secure`, one
//!    without only plaintext ones. A record never makes the caller drop its credentials.
//! 2. **version**: the advertised version must parse as PEP 440 and be compatible with
//!    [`PROTOCOL_VERSION`](crate::protocol::PROTOCOL_VERSION), the version libwool sends as a
//!    client: same major version, and the client's no newer than the worker's (Wool's
//!    `is_version_compatible`).
//! 3. **identity**: with no [`Peers`] policy on the credentials the advertised identity is
//!    ignored, and the worker is verified against the dialed address (or the name the caller
//!    set in its credentials); with one, only a worker advertising a name the policy accepts is
//!    admitted, and that name is verified, unless the caller set a name explicitly, which wins.
//!
//! The gate fails closed: anything it cannot decide is a refusal.

use std::sync::LazyLock;
use std::time::Duration;

use pep440_rs::Version;
use serde::Serialize;

use super::{DiscoveredWorker, Origin};
use crate::connection::{ChannelOptions, Error, Peers, WorkerCredentials};

/// Why the gate refused a discovered worker (Wool's `_incompatibility_reason`), checked in this
/// order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "arm", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum Refusal {
    /// The worker's `secure` flag does not match the caller: it serves TLS and the caller has
    /// no credentials (`worker_secure` true), or it serves plaintext and the caller has
    /// credentials, which are never dropped because a record says so (`worker_secure` false).
    Security {
        /// What the worker advertised.
        worker_secure: bool,
    },
    /// The worker's advertised version does not parse as PEP 440 (`parsable` false), or is not
    /// compatible with this client's protocol version (another major version, or older).
    Version {
        /// What the worker advertised.
        advertised: String,
        /// Whether it parsed.
        parsable: bool,
    },
    /// The caller has a peers policy and the worker advertises no name, or one the policy does
    /// not accept.
    Identity {
        /// The advertised name, if any.
        advertised: Option<String>,
        /// The policy's accepted names ([`Peers::describe`]).
        accepted: String,
    },
}

impl Refusal {
    /// The arm that refused: `"security"`, `"version"` or `"identity"` (Wool's reason words).
    pub fn arm(&self) -> &'static str {
        match self {
            Refusal::Security { .. } => "security",
            Refusal::Version { .. } => "version",
            Refusal::Identity { .. } => "identity",
        }
    }

    /// The refusal as an error for a caller that asked to connect anyway:
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) (nothing was sent).
    pub fn to_error(&self, worker: &DiscoveredWorker) -> Error {
        Error::invalid_argument(format!(
            "{} is not admitted: incompatible {self}",
            worker.describe()
        ))
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Security {
                worker_secure: true,
            } => f.write_str("security (the worker serves TLS and no credentials were given)"),
            Refusal::Security {
                worker_secure: false,
            } => {
                f.write_str("security (the worker advertises plaintext and credentials were given)")
            }
            Refusal::Version {
                advertised,
                parsable: false,
            } => write!(f, "version ({advertised:?} is not a PEP 440 version)"),
            Refusal::Version { advertised, .. } => write!(
                f,
                "version ({advertised:?} cannot serve a {} client)",
                crate::protocol::PROTOCOL_VERSION
            ),
            Refusal::Identity {
                advertised,
                accepted,
            } => {
                match advertised {
                    Some(name) => write!(f, "identity {name:?}")?,
                    None => f.write_str("identity (none advertised)")?,
                }
                write!(f, " (accepted peers: {accepted})")
            }
        }
    }
}

/// What the gate admitted a worker with: the name to verify its certificate against, when the
/// advertisement is pinned (a peers policy and no explicit name from the caller).
pub(super) struct Admitted {
    pub(super) pin: Option<String>,
}

/// This client's protocol version, parsed once; `None` (every worker refused) if it did not
/// parse, as Wool's gate refuses all when its own version is unresolvable.
static LOCAL_VERSION: LazyLock<Option<Version>> =
    LazyLock::new(|| crate::protocol::PROTOCOL_VERSION.parse().ok());

/// Wool's `is_version_compatible(client, server)`: same major release number (the release
/// segment's first component, as `packaging`'s `Version.major`) and client <= server in PEP
/// 440 order.
fn version_compatible(client: &Version, server: &Version) -> bool {
    let major = |v: &Version| v.release().first().copied().unwrap_or(0);
    major(client) == major(server) && client <= server
}

/// The longest advertised version parsed (PEP 440 versions are short; a record may say more).
const MAX_VERSION_BYTES: usize = 256;

/// Runs the gate on `worker` for a caller holding `credentials`. A DNS record
/// ([`Origin::Dns`]) skips the security and version rules, which it cannot speak to.
pub(super) fn check(
    worker: &DiscoveredWorker,
    credentials: Option<&WorkerCredentials>,
) -> Result<Admitted, Refusal> {
    let advertisement = worker.origin == Origin::Advertised;
    if advertisement && worker.secure != credentials.is_some() {
        return Err(Refusal::Security {
            worker_secure: worker.secure,
        });
    }
    if advertisement {
        check_version(worker)?;
    }
    let Some(credentials) = credentials else {
        return Ok(Admitted { pin: None });
    };
    // A DNS record's name is the caller's own, verified against unless the caller names another.
    let named = (!advertisement && credentials.identity().is_none())
        .then(|| {
            worker
                .identity
                .as_deref()
                .map(|name| name.trim().to_owned())
        })
        .flatten();
    let Some(peers) = credentials.peers() else {
        // No policy: an advertisement is ignored, as in Wool.
        return Ok(Admitted { pin: named });
    };
    let advertised = worker.identity.as_deref();
    if !peers.accepts(advertised) {
        return Err(identity_refusal(advertised, peers));
    }
    let pin = match credentials.identity() {
        Some(_) => None, // the caller's explicit name wins
        None => advertised.map(|name| name.trim().to_owned()),
    };
    Ok(Admitted { pin })
}

/// The version rule: the advertised version must parse and be compatible with this client's.
fn check_version(worker: &DiscoveredWorker) -> Result<(), Refusal> {
    let parsed = Some(worker.version.trim())
        .filter(|v| v.len() <= MAX_VERSION_BYTES)
        .and_then(|v| v.parse::<Version>().ok());
    let compatible = match (LOCAL_VERSION.as_ref(), parsed.as_ref()) {
        (Some(local), Some(server)) => version_compatible(local, server),
        _ => false,
    };
    if !compatible {
        return Err(Refusal::Version {
            advertised: worker.version.clone(),
            parsable: parsed.is_some(),
        });
    }
    Ok(())
}

fn identity_refusal(advertised: Option<&str>, peers: &Peers) -> Refusal {
    Refusal::Identity {
        advertised: advertised.map(str::to_owned),
        accepted: peers.describe(),
    }
}

/// Logs a refusal at `debug` level, as Wool's gate does ("rejected worker ...: incompatible
/// ..."): a listing repeats it for every standing refused record, and callers that show
/// listings (`woolctl`) print refusals themselves.
pub(super) fn log_refusal(worker: &DiscoveredWorker, refusal: &Refusal) {
    tracing::debug!(
        worker = %worker.uid,
        address = %worker.address,
        reason = refusal.arm(),
        "admission gate refused a discovered worker: incompatible {refusal}"
    );
}

/// The shortest and longest keepalive interval taken from a worker's advertisement.
const MIN_ADVERTISED_KEEPALIVE: Duration = Duration::from_secs(1);
const MAX_ADVERTISED_KEEPALIVE: Duration = Duration::from_secs(3600);

/// The options a discovered worker is reached with: the caller's `own`, tightened by what the
/// worker advertised (Wool connects with the advertised options; every advertised value is
/// the peer's to choose, so none may loosen a limit of the caller's):
///
/// - message limits and concurrent streams: the smaller of the two (a worker can never raise
///   the caller's receive limit);
/// - keepalive interval: the advertised one (the worker's ping policy expects it), held within
///   1 s to 1 h; none if the caller turned keepalive off;
/// - keepalive timeout: the smaller of the two;
/// - pings without calls and pings without data: the advertised values (Wool's);
/// - connect timeout: the caller's (not advertised).
pub(super) fn channel_options(
    advertised: Option<&ChannelOptions>,
    own: ChannelOptions,
) -> ChannelOptions {
    let Some(advertised) = advertised else {
        return own;
    };
    let mut options = own.clone();
    options.max_receive_message_bytes = own
        .max_receive_message_bytes
        .min(advertised.max_receive_message_bytes);
    options.max_send_message_bytes = own
        .max_send_message_bytes
        .min(advertised.max_send_message_bytes);
    options.max_concurrent_streams = own
        .max_concurrent_streams
        .min(advertised.max_concurrent_streams);
    options.keepalive_interval = own.keepalive_interval.and(
        advertised
            .keepalive_interval
            .map(|i| i.clamp(MIN_ADVERTISED_KEEPALIVE, MAX_ADVERTISED_KEEPALIVE)),
    );
    options.keepalive_timeout = own.keepalive_timeout.min(advertised.keepalive_timeout);
    options.keepalive_without_calls = advertised.keepalive_without_calls;
    options.max_pings_without_data = advertised.max_pings_without_data;
    if options.validate().is_err() {
        // Unreachable for validated inputs; the caller's own options are the safe fallback.
        return own;
    }
    options
}

/// A worker's advertised options (Wool's `WorkerMetadata.options`, the record's `connection`)
/// as [`ChannelOptions`], or why they are out of range: each must be positive (the pings
/// limit may be 0, "no limit") and pass [`ChannelOptions::validate`].
// Set field by field, as code outside the crate must (ChannelOptions is non_exhaustive).
#[allow(clippy::field_reassign_with_default)]
pub(super) fn advertised_options(
    wire: &crate::protocol::ChannelOptions,
) -> Result<ChannelOptions, String> {
    let positive = |name: &str, value: i32| {
        usize::try_from(value)
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| format!("advertised {name} {value} is not positive"))
    };
    let millis =
        |name: &str, value: i32| positive(name, value).map(|ms| Duration::from_millis(ms as u64));
    let mut options = ChannelOptions::default();
    options.max_receive_message_bytes = positive(
        "max_receive_message_length",
        wire.max_receive_message_length,
    )?;
    options.max_send_message_bytes =
        positive("max_send_message_length", wire.max_send_message_length)?;
    options.keepalive_interval = Some(millis("keepalive_time_ms", wire.keepalive_time_ms)?);
    options.keepalive_timeout = millis("keepalive_timeout_ms", wire.keepalive_timeout_ms)?;
    options.keepalive_without_calls = wire.keepalive_permit_without_calls;
    options.max_pings_without_data = u32::try_from(wire.max_pings_without_data).map_err(|_| {
        format!(
            "advertised max_pings_without_data {} is negative",
            wire.max_pings_without_data
        )
    })?;
    options.max_concurrent_streams =
        positive("max_concurrent_streams", wire.max_concurrent_streams)?;
    options.validate().map_err(|e| e.message().to_owned())?;
    Ok(options)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(text: &str) -> Version {
        text.parse().unwrap()
    }

    #[test]
    fn versions_are_compared_as_wools_is_version_compatible() {
        assert!(version_compatible(&v("0.4.0"), &v("0.15.7")));
        assert!(version_compatible(&v("0.4.0"), &v("0.4.0")));
        assert!(version_compatible(&v("0.4.0"), &v("0.4.0.post1")));
        assert!(
            !version_compatible(&v("0.4.0"), &v("0.4.0rc1")),
            "pre-release is older"
        );
        assert!(!version_compatible(&v("0.4.0"), &v("0.3.9")));
        assert!(!version_compatible(&v("0.4.0"), &v("1.0.0")));
        assert!(version_compatible(&v("1.2"), &v("1.10")));
        // packaging's `major` ignores the epoch; the order does not.
        assert!(version_compatible(&v("1.2"), &v("2!1.2")));
        assert!(!version_compatible(&v("2!1.2"), &v("1.2")));
    }

    #[test]
    fn advertised_options_are_range_checked_and_never_loosen_the_callers() {
        let mut wire = crate::protocol::ChannelOptions {
            max_receive_message_length: i32::MAX,
            max_send_message_length: 1 << 20,
            keepalive_time_ms: 1,
            keepalive_timeout_ms: i32::MAX,
            keepalive_permit_without_calls: false,
            max_pings_without_data: 0,
            max_concurrent_streams: i32::MAX,
            compression: 0,
        };
        let advertised = advertised_options(&wire).unwrap();
        let own = ChannelOptions {
            max_receive_message_bytes: 64 << 10,
            ..ChannelOptions::default()
        };
        let merged = channel_options(Some(&advertised), own.clone());
        assert_eq!(merged.max_receive_message_bytes, 64 << 10);
        assert_eq!(merged.max_send_message_bytes, 1 << 20);
        assert_eq!(merged.max_concurrent_streams, own.max_concurrent_streams);
        assert_eq!(merged.keepalive_interval, Some(MIN_ADVERTISED_KEEPALIVE));
        assert_eq!(merged.keepalive_timeout, own.keepalive_timeout);
        assert!(!merged.keepalive_without_calls);
        assert_eq!(merged.connect_timeout, own.connect_timeout);
        wire.max_receive_message_length = -1;
        assert!(advertised_options(&wire)
            .unwrap_err()
            .contains("max_receive"));
        wire.max_receive_message_length = 1;
        wire.max_pings_without_data = -3;
        assert!(advertised_options(&wire).unwrap_err().contains("max_pings"));
    }
}
