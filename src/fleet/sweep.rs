//! Sweeps: poll many workers' idle time with a bound on calls in flight and one deadline.

use std::borrow::Borrow;
use std::time::{Duration, Instant};

use futures_util::StreamExt;

use crate::connection::{Error, WorkerConnection};

/// How a sweep polls.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepOptions {
    /// Most polls in flight at once, at least 1 (default 100, a worker's stream limit: more
    /// would only queue on a shared channel).
    pub max_in_flight: usize,
    /// One deadline for the whole sweep, from its start (default 5 s); `None` = none. A poll
    /// not started before it passes fails as [`ErrorKind::Transient`](crate::ErrorKind)
    /// (`DEADLINE_EXCEEDED`) without being sent.
    pub timeout: Option<Duration>,
}

impl Default for SweepOptions {
    fn default() -> Self {
        Self {
            max_in_flight: 100,
            timeout: Some(Duration::from_secs(5)),
        }
    }
}

impl SweepOptions {
    /// Checks the fields.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](crate::ErrorKind) for `max_in_flight` 0 or a zero
    /// timeout.
    pub fn validate(&self) -> Result<(), Error> {
        if self.max_in_flight == 0 {
            return Err(Error::invalid_argument("max_in_flight must be at least 1"));
        }
        if self.timeout == Some(Duration::ZERO) {
            return Err(Error::invalid_argument(
                "the sweep's timeout must be positive",
            ));
        }
        Ok(())
    }
}

/// Polls every worker's idle time (as [`WorkerConnection::idle`]), at most
/// `options.max_in_flight` at once, all within `options.timeout`; returns one outcome per
/// worker, in the order given: idle seconds, or the error (its kind says what to do). Runs on
/// the caller's runtime and the pooled channels every [`WorkerConnection`] uses.
///
/// Errors: the whole sweep fails only on bad options ([`SweepOptions::validate`]).
pub async fn sweep<C>(
    workers: impl IntoIterator<Item = C>,
    options: &SweepOptions,
) -> Result<Vec<Result<f64, Error>>, Error>
where
    C: Borrow<WorkerConnection>,
{
    sweep_observed(workers, options, |_, _| {}).await
}

/// As [`sweep`], calling `observe(index, outcome)` as each poll finishes (in completion order),
/// e.g. to show progress.
///
/// Errors: as [`sweep`].
pub async fn sweep_observed<C>(
    workers: impl IntoIterator<Item = C>,
    options: &SweepOptions,
    mut observe: impl FnMut(usize, &Result<f64, Error>),
) -> Result<Vec<Result<f64, Error>>, Error>
where
    C: Borrow<WorkerConnection>,
{
    options.validate()?;
    let started = Instant::now();
    let deadline = options.timeout.and_then(|limit| started.checked_add(limit));
    let timeout = options.timeout;
    let mut outcomes: Vec<Option<Result<f64, Error>>> = Vec::new();
    let polls = workers
        .into_iter()
        .enumerate()
        .map(|(index, worker)| async move {
            let left = match deadline {
                None => None,
                Some(deadline) => match deadline.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => Some(left),
                    _ => {
                        return (
                            index,
                            Err(sweep_deadline(timeout, Some("before this poll was sent"))),
                        )
                    }
                },
            };
            let outcome = worker.borrow().idle(left).await;
            // The local deadline is the sweep's: say so, rather than the time that was left.
            let outcome = match outcome {
                Err(error)
                    if error.code() == Some(tonic::Code::DeadlineExceeded)
                        && deadline.is_some_and(|d| Instant::now() >= d) =>
                {
                    Err(sweep_deadline(timeout, None))
                }
                other => other,
            };
            (index, outcome)
        });
    let mut polls = futures_util::stream::iter(polls).buffer_unordered(options.max_in_flight);
    while let Some((index, outcome)) = polls.next().await {
        observe(index, &outcome);
        if outcomes.len() <= index {
            outcomes.resize(index + 1, None);
        }
        outcomes[index] = Some(outcome);
    }
    Ok(outcomes
        .into_iter()
        .map(|outcome| outcome.expect("every poll reports"))
        .collect())
}

/// A poll cut short by the sweep's deadline (`DEADLINE_EXCEEDED`, transient, as a call's own).
/// The message speaks of the timeout the caller gave (a CLI's `--rpc-timeout`, an `idle_many`'s
/// `timeout`): "no answer within the timeout of 5.000 s", or when the deadline passed first,
/// "the timeout of 5.000 s passed `before`".
fn sweep_deadline(timeout: Option<Duration>, before: Option<&str>) -> Error {
    let seconds = timeout.unwrap_or_default().as_secs_f64();
    let message = match before {
        None => format!("deadline exceeded: no answer within the timeout of {seconds:.3} s"),
        Some(before) => {
            format!("deadline exceeded: the timeout of {seconds:.3} s passed {before}")
        }
    };
    Error::new(
        crate::ErrorKind::Transient,
        Some(tonic::Code::DeadlineExceeded),
        message,
    )
}
