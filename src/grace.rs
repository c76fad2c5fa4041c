//! [`Grace`]: how long a stop lets in-flight work run, as Wool's `StopRequest.timeout` means it.

/// How long a stop lets in-flight dispatches run before cancelling them: the meaning of
/// `StopRequest.timeout` (seconds of grace) in Wool's protocol.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Grace {
    /// Cancel in-flight dispatches at once (wire value `0`, the default).
    None,
    /// Let them run up to this long, then cancel the rest (positive wire value).
    Within(std::time::Duration),
    /// Wait for them however long they take (negative wire value).
    Unbounded,
}

impl Grace {
    /// Reads a grace period in seconds as Wool's worker does: `0` (and NaN) = none, positive =
    /// that long (too large to represent, e.g. infinity = unbounded), negative = unbounded.
    pub fn from_seconds(seconds: f64) -> Self {
        if seconds.is_nan() || seconds == 0.0 {
            Grace::None
        } else if seconds < 0.0 {
            Grace::Unbounded
        } else {
            std::time::Duration::try_from_secs_f64(seconds).map_or(Grace::Unbounded, Grace::Within)
        }
    }

    /// The `StopRequest.timeout` value (seconds, `f32`) that asks for this grace.
    pub fn to_wire(self) -> f32 {
        match self {
            Grace::None => 0.0,
            // A positive grace too small for f32 must not turn into "cancel at once".
            Grace::Within(limit) => limit.as_secs_f32().max(f32::MIN_POSITIVE),
            Grace::Unbounded => -1.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn grace_follows_wools_stop_semantics() {
        assert_eq!(Grace::from_seconds(0.0), Grace::None);
        assert_eq!(Grace::from_seconds(f64::NAN), Grace::None);
        assert_eq!(Grace::from_seconds(-1.0), Grace::Unbounded);
        assert_eq!(Grace::from_seconds(f64::INFINITY), Grace::Unbounded);
        assert_eq!(
            Grace::from_seconds(1.5),
            Grace::Within(Duration::from_millis(1500))
        );
    }

    #[test]
    fn grace_round_trips_through_the_wire_value() {
        for grace in [
            Grace::None,
            Grace::Unbounded,
            Grace::Within(Duration::from_millis(250)),
        ] {
            assert_eq!(Grace::from_seconds(f64::from(grace.to_wire())), grace);
        }
        assert!(Grace::Within(Duration::from_nanos(1)).to_wire() > 0.0);
    }
}
