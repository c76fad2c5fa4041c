//! `woolctl reap`: retire the workers idle longer than a threshold — one round (discover or
//! take the targets, sweep, decide, stop, print a row per worker), or a round every
//! `--interval` until SIGINT or SIGTERM.

use libwool::fleet::{retire, Decision, RetirePolicy};
use libwool::{Error, WorkerConnection};
use serde::Serialize;

use crate::args::{Fleet, Reap};
use crate::context::{signals, Context, Failure, Member};
use crate::output::{micros, print_rows, seconds_cell, Column, ErrorFields, Named, Row};
use crate::sweep;

/// Runs the rounds; whether every worker of every round succeeded (its poll, and its stop if
/// it was stopped). With an interval, SIGINT and SIGTERM end the loop, also in the middle of a
/// round (that round prints nothing).
///
/// Errors: a policy out of range or a bad fleet (usage); a pool that cannot be listed
/// (exit 1).
pub async fn run(context: &Context, args: &Reap) -> Result<bool, Failure> {
    let mut policy = RetirePolicy::new(args.idle_over);
    policy.grace = args.grace;
    policy.stop_timeout = context.stop_timeout(args.grace);
    policy.keep_min = args.keep;
    policy.max_stops = args.max_stops;
    policy.dry_run = args.dry_run;
    policy.validate()?;
    let mut signals = args.interval.map(|_| signals()).transpose()?;
    let mut all_ok = true;
    loop {
        let round = round(context, &args.fleet, &policy);
        all_ok &= match signals.as_mut() {
            None => round.await?,
            Some(signals) => tokio::select! {
                ok = round => ok?,
                () = signals.next_stop() => break,
            },
        };
        let (Some(interval), Some(signals)) = (args.interval, signals.as_mut()) else {
            break;
        };
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            () = signals.next_stop() => break,
        }
    }
    Ok(all_ok)
}

/// One round: discover (or take the targets), sweep, decide, stop, print; whether every
/// worker succeeded.
async fn round(context: &Context, fleet: &Fleet, policy: &RetirePolicy) -> Result<bool, Failure> {
    let members = context.members(fleet)?;
    let polls = sweep::poll(context, &members).await;
    let mut decisions = retire::decide(polls, policy);
    // Workers that could not be made into connections failed their poll: never stopped.
    let workers: Vec<Option<&WorkerConnection>> =
        members.iter().map(|m| m.connection.as_ref().ok()).collect();
    retire::apply(&workers, &mut decisions, policy, context.max_in_flight).await?;
    let rows = members
        .iter()
        .zip(&decisions)
        .map(|(member, decision)| DecisionRow::new(member, decision, policy.dry_run));
    Ok(print_rows(context.output, rows))
}

/// One worker's decision. JSON: `{"target", "uid"?, "action", "reason", "idle_seconds"
/// (seconds rounded to the microsecond, or null), "ok", "error"?}`, the error being the poll's
/// or the stop's. Table: `TARGET  IDLE_SECONDS  ACTION  REASON  DETAIL` (DETAIL: the error, if
/// any; no trailing blanks when there is none). `action` is
/// `keep`, `would-retire` (a dry run), `retired` or `stop-failed`; `reason` is the policy's
/// (`idle`, `busy`, `below-threshold`, `unreachable`, ...).
#[derive(Serialize)]
pub struct DecisionRow<'a> {
    #[serde(flatten)]
    member: Named<'a>,
    action: &'static str,
    reason: &'static str,
    #[serde(serialize_with = "micros")]
    idle_seconds: Option<f64>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorFields<'a>>,
}

impl<'a> DecisionRow<'a> {
    /// The row of `member`'s decision (`dry_run`: nothing was stopped).
    pub fn new(member: &'a Member, decision: &'a Decision, dry_run: bool) -> Self {
        let action = match (decision.retires(), &decision.stop, dry_run) {
            (false, _, _) => "keep",
            (true, _, true) => "would-retire",
            (true, Some(Ok(())), _) => "retired",
            (true, _, _) => "stop-failed",
        };
        let error: Option<&Error> = match (&decision.idle, &decision.stop) {
            (Err(error), _) | (_, Some(Err(error))) => Some(error),
            _ => None,
        };
        Self {
            member: Named(member),
            action,
            reason: decision.reason.as_str(),
            idle_seconds: decision.idle.as_ref().ok().copied(),
            ok: error.is_none(),
            error: error.map(ErrorFields),
        }
    }
}

impl Row for DecisionRow<'_> {
    fn columns() -> Vec<Column> {
        vec![
            Column::left("TARGET", 36),
            Column::right("IDLE_SECONDS", 12),
            Column::left("ACTION", 12),
            Column::left("REASON", 17),
            Column::left("DETAIL", 0),
        ]
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.member.target().to_owned(),
            seconds_cell(self.idle_seconds),
            self.action.to_string(),
            self.reason.to_string(),
            self.error
                .as_ref()
                .map(ToString::to_string)
                .unwrap_or_default(),
        ]
    }

    fn ok(&self) -> bool {
        self.ok
    }
}
