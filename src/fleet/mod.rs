//! The fleet job: find a Wool pool's workers ([`discovery`]), poll them all ([`sweep`]) and
//! retire the idle ones by policy ([`retire`]). Thin and optional: it runs in the host that
//! calls it (a fleet manager, `woolctl`, the C ABI's `wool_discover` / `wool_retire_idle`),
//! never on a worker, and on no schedule of its own unless asked ([`retire::reap_every`]).
//!
//! ```no_run
//! # async fn demo() -> Result<(), wool::Error> {
//! use std::time::Duration;
//! use wool::connection::ChannelOptions;
//! use wool::fleet::{discovery::LocalDiscovery, retire, RetirePolicy, SweepOptions};
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

pub use discovery::{
    DiscoveredWorker, Discovery, DiscoveryEvent, LanDiscovery, LocalDiscovery, Watch,
};
pub use retire::{Decision, Reason, RetirePolicy};
pub use sweep::{sweep, sweep_observed, SweepOptions};
