//! The retire helper: a policy turns a sweep into decisions with reasons, and applies them.
//!
//! It runs in the host that calls it (a fleet manager, `woolctl reap`), never on a worker, and
//! never on a schedule of its own unless asked for one ([`reap_every`]).

use std::borrow::Borrow;
use std::time::Duration;

use futures_util::StreamExt;
use serde::Serialize;

use super::sweep::{sweep, SweepOptions};
use crate::connection::{Error, ErrorKind, WorkerConnection};
use crate::Grace;

/// When to retire a worker, and how.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct RetirePolicy {
    /// Retire a worker once it has been idle at least this long.
    pub idle_threshold: Duration,
    /// The grace each stop gives the worker's in-flight work (as `WorkerConnection::stop`):
    /// positive, a task that reached the worker between the poll and the stop finishes.
    /// Default 30 s.
    pub grace: Grace,
    /// Each stop call's own deadline; it must outlast a bounded grace. Default 60 s; `None`
    /// waits as long as the worker takes.
    pub stop_timeout: Option<Duration>,
    /// Never leave fewer than this many reachable workers running (default 0).
    pub keep_min: usize,
    /// Most stops in one round; `None` = no limit (default).
    pub max_stops: Option<usize>,
    /// Decide, but stop nothing (default false).
    pub dry_run: bool,
}

impl RetirePolicy {
    /// Retire workers idle for `idle_threshold` or longer, with the defaults above.
    pub fn new(idle_threshold: Duration) -> Self {
        Self {
            idle_threshold,
            grace: Grace::Within(Duration::from_secs(30)),
            stop_timeout: Some(Duration::from_secs(60)),
            keep_min: 0,
            max_stops: None,
            dry_run: false,
        }
    }

    /// Checks the policy.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a zero stop timeout, or one that does not
    /// outlast a bounded grace (the stop would report a deadline while the worker drains).
    pub fn validate(&self) -> Result<(), Error> {
        match (self.stop_timeout, self.grace) {
            (Some(Duration::ZERO), _) => {
                Err(Error::invalid_argument("the stop timeout must be positive"))
            }
            (Some(limit), Grace::Within(grace)) if limit <= grace => {
                Err(Error::invalid_argument(format!(
                    "the stop timeout ({:.3} s) must exceed the grace ({:.3} s)",
                    limit.as_secs_f64(),
                    grace.as_secs_f64()
                )))
            }
            (Some(_), Grace::Unbounded) => Err(Error::invalid_argument(
                "an unbounded grace needs no stop timeout (it may drain for ever)",
            )),
            _ => Ok(()),
        }
    }
}

/// Why a worker is retired or kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Retire: idle at least the threshold.
    Idle,
    /// Keep: work in flight (idle reads exactly 0).
    Busy,
    /// Keep: idle, but for less than the threshold.
    BelowThreshold,
    /// Keep: retiring it would leave fewer than the policy's minimum.
    Minimum,
    /// Keep: this round already has the policy's most stops.
    RoundLimit,
    /// Keep: the worker predates the `idle` RPC, so it cannot say (as Wool's client treats it).
    IdleUnavailable,
    /// Keep: it could not be reached, or refused the handshake (transient: try next round).
    Unreachable,
    /// Keep: the poll failed otherwise (an RPC error or an answer that makes no sense).
    PollFailed,
}

impl Reason {
    /// What one poll's outcome says of its worker, before any limit of a round applies:
    /// [`Busy`](Reason::Busy) (idle reads exactly 0), [`BelowThreshold`](Reason::BelowThreshold),
    /// [`Idle`](Reason::Idle) (idle at least `idle_threshold`), or from the error's kind
    /// [`IdleUnavailable`](Reason::IdleUnavailable), [`Unreachable`](Reason::Unreachable)
    /// (transient or handshake) or [`PollFailed`](Reason::PollFailed). The one place a poll is
    /// judged: the retire policy and `wool-scaler` both read polls through it.
    pub fn of_poll(outcome: &Result<f64, Error>, idle_threshold: Duration) -> Reason {
        match outcome {
            Ok(seconds) if *seconds == 0.0 => Reason::Busy,
            Ok(seconds) if *seconds < idle_threshold.as_secs_f64() => Reason::BelowThreshold,
            Ok(_) => Reason::Idle,
            Err(error) => match error.kind() {
                ErrorKind::IdleUnavailable => Reason::IdleUnavailable,
                ErrorKind::Transient | ErrorKind::Handshake => Reason::Unreachable,
                _ => Reason::PollFailed,
            },
        }
    }

    /// Whether this reason retires the worker.
    pub fn retires(self) -> bool {
        self == Reason::Idle
    }

    /// A short name: `idle`, `busy`, `below-threshold`, `minimum`, `round-limit`,
    /// `idle-unavailable`, `unreachable`, `poll-failed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Idle => "idle",
            Reason::Busy => "busy",
            Reason::BelowThreshold => "below-threshold",
            Reason::Minimum => "minimum",
            Reason::RoundLimit => "round-limit",
            Reason::IdleUnavailable => "idle-unavailable",
            Reason::Unreachable => "unreachable",
            Reason::PollFailed => "poll-failed",
        }
    }
}

impl std::fmt::Display for Reason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the policy made of one worker's poll, and, once applied, how its stop went.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The poll's outcome: idle seconds, or its error.
    pub idle: Result<f64, Error>,
    /// Why it is retired or kept.
    pub reason: Reason,
    /// The stop's outcome: `None` when kept or in a dry run.
    pub stop: Option<Result<(), Error>>,
}

impl Decision {
    /// Whether the policy retires this worker.
    pub fn retires(&self) -> bool {
        self.reason.retires()
    }
}

/// Turns a sweep's outcomes (in worker order) into decisions, in the same order. Pure: no I/O.
///
/// The most idle candidates are retired first. `keep_min` counts workers that answered a poll
/// (a worker that cannot be reached may be gone already and keeps no capacity up); `max_stops`
/// caps the retirements of this round.
pub fn decide(polls: Vec<Result<f64, Error>>, policy: &RetirePolicy) -> Vec<Decision> {
    let threshold = policy.idle_threshold;
    let mut decisions: Vec<Decision> = polls
        .into_iter()
        .map(|idle| {
            let reason = Reason::of_poll(&idle, threshold);
            Decision {
                idle,
                reason,
                stop: None,
            }
        })
        .collect();
    let answered = decisions.iter().filter(|d| d.idle.is_ok()).count();
    let mut candidates: Vec<usize> = (0..decisions.len())
        .filter(|&i| decisions[i].retires())
        .collect();
    let idle_of = |i: usize| *decisions[i].idle.as_ref().expect("candidates answered");
    candidates.sort_by(|&a, &b| idle_of(b).total_cmp(&idle_of(a)).then(a.cmp(&b)));
    let mut retiring = 0usize;
    for index in candidates {
        let reason = if answered - retiring <= policy.keep_min {
            Reason::Minimum
        } else if policy.max_stops.is_some_and(|most| retiring >= most) {
            Reason::RoundLimit
        } else {
            retiring += 1;
            continue;
        };
        decisions[index].reason = reason;
    }
    decisions
}

/// Stops the workers the decisions retire (at most `max_in_flight` stops at once), each with
/// the policy's grace and stop timeout, and records each stop's outcome; in a dry run, stops
/// nothing. `workers` and `decisions` are in the same order; `None` stands for a worker no
/// connection could be made to (its poll failed, so it is never retired).
///
/// A task that reaches a worker between its poll and its stop loses nothing when the grace is
/// positive: the worker drains it before it exits.
///
/// Errors: [`ErrorKind::InvalidArgument`] for a bad policy, or when the two lists differ in
/// length.
pub async fn apply(
    workers: &[Option<&WorkerConnection>],
    decisions: &mut [Decision],
    policy: &RetirePolicy,
    max_in_flight: usize,
) -> Result<(), Error> {
    policy.validate()?;
    if workers.len() != decisions.len() {
        return Err(Error::invalid_argument(format!(
            "{} workers but {} decisions",
            workers.len(),
            decisions.len()
        )));
    }
    if policy.dry_run {
        return Ok(());
    }
    let retiring: Vec<usize> = (0..decisions.len())
        .filter(|&index| decisions[index].retires())
        .collect();
    let stops = retiring.into_iter().map(|index| async move {
        let outcome = match workers[index] {
            Some(worker) => worker.stop(policy.grace, policy.stop_timeout).await,
            None => Err(Error::invalid_argument("no connection to this worker")),
        };
        (index, outcome)
    });
    let mut stops = futures_util::stream::iter(stops).buffer_unordered(max_in_flight.max(1));
    while let Some((index, outcome)) = stops.next().await {
        decisions[index].stop = Some(outcome);
    }
    Ok(())
}

/// One round: sweeps `workers`, decides by `policy` and applies the decisions (stops run with
/// the sweep's `max_in_flight`). Returns the decisions in worker order.
///
/// Errors: [`ErrorKind::InvalidArgument`] for bad options or a bad policy; worker failures are
/// in the decisions, never here.
pub async fn reap<C>(
    workers: &[C],
    policy: &RetirePolicy,
    options: &SweepOptions,
) -> Result<Vec<Decision>, Error>
where
    C: Borrow<WorkerConnection>,
{
    policy.validate()?;
    let polls = sweep(workers.iter().map(Borrow::borrow), options).await?;
    let mut decisions = decide(polls, policy);
    let workers: Vec<Option<&WorkerConnection>> =
        workers.iter().map(|w| Some(w.borrow())).collect();
    apply(&workers, &mut decisions, policy, options.max_in_flight).await?;
    Ok(decisions)
}

/// Runs [`reap`] every `interval` until `round` returns false: `fleet` gives each round's
/// workers (e.g. a fresh discovery listing), `round` sees each round's workers and decisions.
///
/// Errors: as [`reap`], ending the loop.
pub async fn reap_every<F, R>(
    interval: Duration,
    policy: &RetirePolicy,
    options: &SweepOptions,
    mut fleet: F,
    mut round: R,
) -> Result<(), Error>
where
    F: FnMut() -> Vec<WorkerConnection>,
    R: FnMut(&[WorkerConnection], &[Decision]) -> bool,
{
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let workers = fleet();
        let decisions = reap(&workers, policy, options).await?;
        if !round(&workers, &decisions) {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unreachable() -> Error {
        Error::new(ErrorKind::Transient, Some(tonic::Code::Unavailable), "gone")
    }

    fn reasons(polls: Vec<Result<f64, Error>>, policy: &RetirePolicy) -> Vec<Reason> {
        decide(polls, policy)
            .into_iter()
            .map(|d| d.reason)
            .collect()
    }

    #[test]
    fn each_poll_outcome_gets_its_reason() {
        let policy = RetirePolicy::new(Duration::from_secs(60));
        let polls = vec![
            Ok(0.0),
            Ok(10.0),
            Ok(60.0),
            Err(Error::new(
                ErrorKind::IdleUnavailable,
                Some(tonic::Code::Unimplemented),
                "old",
            )),
            Err(unreachable()),
            Err(Error::new(
                ErrorKind::Handshake,
                Some(tonic::Code::Unauthenticated),
                "tls",
            )),
            Err(Error::new(
                ErrorKind::Rpc,
                Some(tonic::Code::Internal),
                "nonsense",
            )),
        ];
        use Reason::*;
        assert_eq!(
            reasons(polls, &policy),
            vec![
                Busy,
                BelowThreshold,
                Idle,
                IdleUnavailable,
                Unreachable,
                Unreachable,
                PollFailed
            ]
        );
    }

    #[test]
    fn the_minimum_keeps_the_least_idle_and_counts_only_answering_workers() {
        let mut policy = RetirePolicy::new(Duration::from_secs(1));
        policy.keep_min = 2;
        let polls = vec![Ok(5.0), Ok(50.0), Err(unreachable()), Ok(20.0), Ok(0.0)];
        use Reason::*;
        // 4 answered, keep 2: the two most idle (50, 20) go, the least idle candidate stays.
        assert_eq!(
            reasons(polls, &policy),
            vec![Minimum, Idle, Unreachable, Idle, Busy]
        );
        policy.keep_min = 10;
        assert_eq!(
            reasons(vec![Ok(9.0), Ok(9.0)], &policy),
            vec![Minimum, Minimum]
        );
    }

    #[test]
    fn the_round_limit_caps_stops() {
        let mut policy = RetirePolicy::new(Duration::from_secs(1));
        policy.max_stops = Some(1);
        use Reason::*;
        assert_eq!(
            reasons(vec![Ok(2.0), Ok(3.0), Ok(4.0)], &policy),
            vec![RoundLimit, RoundLimit, Idle]
        );
        policy.max_stops = Some(0);
        assert_eq!(reasons(vec![Ok(2.0)], &policy), vec![RoundLimit]);
    }

    #[test]
    fn a_stop_timeout_must_outlast_the_grace() {
        let mut policy = RetirePolicy::new(Duration::from_secs(1));
        policy.grace = Grace::Within(Duration::from_secs(30));
        policy.stop_timeout = Some(Duration::from_secs(30));
        assert_eq!(
            policy.validate().unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
        policy.stop_timeout = Some(Duration::from_secs(31));
        assert!(policy.validate().is_ok());
        policy.grace = Grace::Unbounded;
        assert!(policy.validate().is_err());
        policy.stop_timeout = None;
        assert!(policy.validate().is_ok());
    }
}
