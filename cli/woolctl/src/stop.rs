//! `woolctl stop`: stop (retire) the workers named on the command line, letting in-flight work
//! run for the grace; a row per worker.

use futures_util::StreamExt;
use libwool::{Error, Grace};
use serde::Serialize;

use crate::context::{Context, Failure, Member};
use crate::output::{print_rows, Column, ErrorFields, Named, Row};
use crate::progress::Progress;

/// Stops `addresses` with `grace` (at most `--max-in-flight` at once, each within the grace
/// plus `--rpc-timeout`, and a worker that cannot be reached within `--connect-timeout`);
/// whether every stop succeeded. Shows a progress line on a terminal's stderr once the stops
/// have taken a second (`stopping: N/M answered`).
///
/// Errors (usage): a malformed target.
pub async fn run(context: &Context, grace: Grace, addresses: &[String]) -> Result<bool, Failure> {
    let members = context.members_of_targets(addresses)?;
    let timeout = context.stop_timeout(grace);
    let progress = Progress::start("stopping", members.len());
    let stops: Vec<Result<(), Error>> = futures_util::stream::iter(members.iter())
        .map(|member| {
            let progress = &progress;
            async move {
                let stop = match &member.connection {
                    Ok(connection) => connection.stop(grace, timeout).await,
                    Err(error) => Err(error.clone()),
                };
                progress.answered();
                stop
            }
        })
        .buffered(context.max_in_flight)
        .collect()
        .await;
    progress.finish();
    let rows = members
        .iter()
        .zip(&stops)
        .map(|(member, stop)| StopRow::new(member, stop));
    Ok(print_rows(context.output, rows))
}

/// One worker's stop. JSON: `{"target", "uid"?, "ok": true, "stopped": true}` or
/// `{"target", "uid"?, "ok": false, "error": {"kind", "code", "message"}}`. Table:
/// `TARGET  STATUS` (`stopped` or the error).
#[derive(Serialize)]
pub struct StopRow<'a> {
    #[serde(flatten)]
    member: Named<'a>,
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<ErrorFields<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<bool>,
}

impl<'a> StopRow<'a> {
    /// The row of `member`'s stop.
    pub fn new(member: &'a Member, stop: &'a Result<(), Error>) -> Self {
        Self {
            member: Named(member),
            ok: stop.is_ok(),
            error: stop.as_ref().err().map(ErrorFields),
            stopped: stop.is_ok().then_some(true),
        }
    }
}

impl Row for StopRow<'_> {
    fn columns() -> Vec<Column> {
        vec![Column::left("TARGET", 36), Column::left("STATUS", 0)]
    }

    fn cells(&self) -> Vec<String> {
        vec![
            self.member.target().to_owned(),
            match &self.error {
                None => "stopped".to_string(),
                Some(error) => error.to_string(),
            },
        ]
    }

    fn ok(&self) -> bool {
        self.ok
    }
}
