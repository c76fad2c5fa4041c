//! The fleet job: find a Wool pool's workers ([`discovery`]), poll them all ([`sweep`]) and
//! retire the idle ones by policy ([`retire`]). Thin and optional: it runs in the host that
//! calls it (a fleet manager, `woolctl`, the C ABI's `wool_discover` / `wool_retire_idle`),
//! never on a worker, and on no schedule of its own unless asked ([`retire::reap_every`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), libwool::Error> {
//! use std::time::Duration;
//! use libwool::connection::ChannelOptions;
//! use libwool::fleet::{discovery::LocalDiscovery, retire, RetirePolicy, SweepOptions};
//!
//! let pool = LocalDiscovery::new("batch")?.list()?;
//! let workers = pool
//!     .iter()
//!     .map(|w| w.connect(None, ChannelOptions::default()))
//!     .collect::<Result<Vec<_>, _>>()?;
//! let mut policy = RetirePolicy::new(Duration::from_secs(300));
//! policy.keep_min = 1;
//! for (worker, decision) in pool.iter().zip(retire::reap(&workers, &policy, &SweepOptions::default()).await?) {
//!     println!("{} {}", worker.address, decision.reason);
//! }
//! # Ok(()) }
//! ```

pub mod discovery;
pub mod retire;
mod sweep;

#[cfg(feature = "dns")]
pub use discovery::DnsDiscovery;
#[cfg(feature = "lan")]
pub use discovery::LanDiscovery;
pub use discovery::{DiscoveredWorker, Discovery, DiscoveryEvent, LocalDiscovery, Watch};
pub use retire::{Decision, Reason, RetirePolicy};
pub use sweep::{sweep, sweep_observed, SweepOptions};

use std::time::Duration;

/// Reads a duration as the fleet tools take one (`woolctl` flags, `wool-scaler` metadata): a
/// plain number is seconds (`300`, `0.5`), else a `humantime` duration (`300s`, `5m`, `500ms`,
/// `1h 30m`).
///
/// Errors: a message saying what was wrong, for a negative, NaN, infinite or too large number
/// of seconds, or text that is neither.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if let Ok(seconds) = text.parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| {
            if seconds.is_finite() && seconds > 0.0 {
                format!("{text:?} seconds is too large")
            } else {
                format!("{text:?} is not a non-negative number of seconds")
            }
        });
    }
    if let Some(magnitude) = text.strip_prefix('-') {
        if humantime::parse_duration(magnitude.trim()).is_ok() {
            return Err(format!("{text:?} is negative: a duration is 0 or more"));
        }
    }
    humantime::parse_duration(text)
        .map_err(|e| format!("{text:?}: {e} (e.g. 300, 300s, 5m, 500ms)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_seconds_or_humantime_and_bad_ones_say_why() {
        for (text, want) in [
            ("300", Duration::from_secs(300)),
            ("0.5", Duration::from_millis(500)),
            (" 5m ", Duration::from_secs(300)),
            ("500ms", Duration::from_millis(500)),
            ("1h 30m", Duration::from_secs(5400)),
            ("0", Duration::ZERO),
        ] {
            assert_eq!(parse_duration(text), Ok(want), "{text:?}");
        }
        for (text, says) in [
            ("-1", "non-negative"),
            ("NaN", "non-negative"),
            ("inf", "non-negative"),
            ("1e300", "too large"),
            ("soon", "e.g. 300"),
            ("-5s", "\"-5s\" is negative"),
            ("-1m 30s", "is negative"),
        ] {
            let error = parse_duration(text).unwrap_err();
            assert!(error.contains(says), "{text:?}: {error}");
        }
    }
}
