//! `woolctl idle`: poll the workers named on the command line, a row per worker with its idle
//! seconds (as Wool's `WorkerConnection.idle`); the rows are `sweep`'s ([`PollRow`]).
//!
//! [`PollRow`]: crate::sweep::PollRow

use crate::context::{Context, Failure};
use crate::sweep;

/// Polls `addresses`; whether every poll succeeded.
///
/// Errors (usage): a malformed target.
pub async fn run(context: &Context, addresses: &[String]) -> Result<bool, Failure> {
    let members = context.members_of_targets(addresses)?;
    let outcomes = sweep::poll(context, &members).await;
    Ok(sweep::print_polls(context, &members, &outcomes))
}
