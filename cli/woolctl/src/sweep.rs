//! `woolctl sweep`: poll every worker of a pool (or of a list) with one deadline, a row per
//! worker with its idle seconds. Also the poll itself ([`poll`]) and its row ([`PollRow`]),
//! which `idle` prints too and `reap` decides on.

use libwool::fleet::sweep_observed;
use libwool::{Error, WorkerConnection};
use serde::Serialize;

use crate::args::Fleet;
use crate::context::{Context, Failure, Member};
use crate::output::{micros, print_rows, seconds_cell, Column, ErrorFields, Named, Row};
use crate::progress::Progress;

/// Sweeps the workers `fleet` names; whether every poll succeeded.
///
/// Errors: as [`Context::members`].
pub async fn run(context: &Context, fleet: &Fleet) -> Result<bool, Failure> {
    let members = context.members(fleet)?;
    let outcomes = poll(context, &members).await;
    Ok(print_polls(context, &members, &outcomes))
}

/// Prints a [`PollRow`] per member; whether every poll succeeded.
pub fn print_polls(context: &Context, members: &[Member], outcomes: &[Result<f64, Error>]) -> bool {
    let rows = members
        .iter()
        .zip(outcomes)
        .map(|(member, outcome)| PollRow::new(member, outcome));
    print_rows(context.output, rows)
}

/// Polls the members' idle seconds, one outcome per member in their order (those that could
/// not be made into connections report why), all within `--rpc-timeout`; shows a progress
/// line on a terminal's stderr once the sweep has taken a second.
pub async fn poll(context: &Context, members: &[Member]) -> Vec<Result<f64, Error>> {
    let live: Vec<&WorkerConnection> = members
        .iter()
        .filter_map(|m| m.connection.as_ref().ok())
        .collect();
    let progress = Progress::start("sweeping", live.len());
    let outcomes = sweep_observed(live, &context.sweep_options(), |_, _| progress.answered())
        .await
        .expect("the sweep options are valid");
    progress.finish();
    let mut outcomes = outcomes.into_iter();
    members
        .iter()
        .map(|member| match &member.connection {
            Ok(_) => outcomes.next().expect("one outcome per connection"),
            Err(error) => Err(error.clone()),
        })
        .collect()
}

/// One worker's poll. JSON: `{"target", "uid"?, "ok": true, "idle_seconds"}` (seconds, a
/// float rounded to the microsecond) or `{"target", "uid"?, "ok": false, "error": {"kind",
/// "code", "message"}}`. Table: `TARGET  IDLE_SECONDS  STATUS` (`ok` or the error).
#[derive(Serialize)]
pub struct PollRow<'a> {
    #[serde(flatten)]
    member: Named<'a>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none", serialize_with = "micros")]
    idle_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorFields<'a>>,
}

impl<'a> PollRow<'a> {
    /// The row of `member`'s poll.
    pub fn new(member: &'a Member, outcome: &'a Result<f64, Error>) -> Self {
        Self {
            member: Named(member),
            ok: outcome.is_ok(),
            idle_seconds: outcome.as_ref().ok().copied(),
            error: outcome.as_ref().err().map(ErrorFields),
        }
    }
}

impl Row for PollRow<'_> {
    fn columns() -> Vec<Column> {
        vec![
            Column::left("TARGET", 36),
            Column::right("IDLE_SECONDS", 12),
            Column::left("STATUS", 0),
        ]
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.member.target().to_owned(),
            seconds_cell(self.idle_seconds),
            match &self.error {
                None => "ok".to_string(),
                Some(error) => error.to_string(),
            },
        ]
    }

    fn ok(&self) -> bool {
        self.ok
    }
}
