//! A fleet as the scaler sees it: its members (listed, resolved or discovered afresh at each
//! sweep), its pooled connections, and its latest census. One sweep runs at a time per fleet;
//! calls arriving meanwhile wait for it and share its result, so KEDA's polling never
//! stampedes the workers.
//!
//! The files, one job each: this one (a fleet and its census on demand), `sweep` (listing the
//! members, connecting to them and polling them), `census` (a sweep's outcome and how a
//! ScaledObject counts it), `registry` (the fleets the scaler answers for, and the metadata
//! readings that name them), `holds` (the bounds on the streams and calls holding fleets) and
//! `tls_files` (the TLS files metadata names, checked and read).

mod census;
mod holds;
mod registry;
mod sweep;
mod tls_files;

pub use sweep::POLLS_PER_SECOND_PER_FLEET;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tonic::Code;

pub(crate) use census::{Census, Count, Freshness};
pub(crate) use holds::{HoldFor, MAX_CALLS, MAX_STREAMS};
pub(crate) use registry::Fleets;
use sweep::{lan_listen, Members};
use tls_files::tls_credentials;

use super::metadata::{FleetKey, FleetSpec, Source, MAX_TARGETS};
use crate::connection::{Error, ErrorKind, WorkerCredentials};
use crate::fleet::discovery::{Discovery, DnsDiscovery, LanDiscovery, LocalDiscovery};

/// How long a fleet no call has asked about is kept (its connections, its census).
const UNUSED_FLEET_TTL: Duration = Duration::from_secs(600);

/// A failure that is the scaler's bound, not the caller's mistake: `RESOURCE_EXHAUSTED`.
pub(crate) fn exhausted(message: String) -> Error {
    Error::new(ErrorKind::Transient, Some(Code::ResourceExhausted), message)
}

/// One fleet: shared by every ScaledObject whose metadata names the same workers reached the
/// same way ([`FleetSpec::fleet_key`]).
pub(crate) struct Fleet {
    pub(super) key: FleetKey,
    /// Where the members come from, as logs and the metrics' `fleet` label say it.
    pub(super) label: String,
    pub(super) credentials: Option<WorkerCredentials>,
    /// For a namespace or a DNS name: its discovery, kept (on this host, so that the registry's
    /// segments stay open between listings).
    pub(super) discovery: Option<Discovery>,
    /// Held for the length of a sweep: one at a time.
    sweeping: tokio::sync::Mutex<Members>,
    latest: watch::Sender<Option<Arc<Census>>>,
    pub(super) last_used: Mutex<Instant>,
}

impl std::fmt::Debug for Fleet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fleet")
            .field("source", &self.key.source)
            .finish()
    }
}

impl Fleet {
    /// A fleet for `spec`, no I/O but reading its TLS files, which must be in `tls_files_dir`
    /// (canonical; `None`: metadata may name no TLS files).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a TLS file that cannot be used (one message
    /// whether it is missing, unreadable, not a regular file, outside the directory or not
    /// TLS material: the log says which), or a bad namespace.
    pub(crate) fn new(spec: &FleetSpec, tls_files_dir: Option<&Path>) -> Result<Self, Error> {
        let key = spec.fleet_key();
        let credentials = match &key.tls {
            None => None,
            Some(tls) => Some(tls_credentials(tls, tls_files_dir)?),
        };
        let discovery = match &key.source {
            Source::Namespace { name, lan: false } => {
                Some(Discovery::Local(LocalDiscovery::new(name)?))
            }
            Source::Namespace { name, lan: true } => Some(Discovery::Lan(
                LanDiscovery::new(name)?.listen_for(lan_listen(spec.sweep_timeout)),
            )),
            // The sweep's deadline bounds the lookup too; as many addresses as targets.
            Source::Dns { name, port } => Some(Discovery::Dns(
                DnsDiscovery::new(name, *port)?
                    .timeout(spec.sweep_timeout)
                    .max_addresses(MAX_TARGETS),
            )),
            Source::Targets(_) => None,
        };
        Ok(Self {
            label: key.source.to_string(),
            key,
            credentials,
            discovery,
            sweeping: tokio::sync::Mutex::new(Members::default()),
            latest: watch::Sender::new(None),
            last_used: Mutex::new(Instant::now()),
        })
    }

    /// Where the fleet's members come from, for logs and the metrics' `fleet` label.
    pub(crate) fn source(&self) -> &str {
        &self.label
    }

    /// How many targets the metadata lists (1 for a DNS name or a namespace, whose members are
    /// known only when listed): its weight in [`MAX_TOTAL_TARGETS`](registry::MAX_TOTAL_TARGETS).
    pub(crate) fn listed_targets(&self) -> usize {
        match &self.key.source {
            Source::Targets(targets) => targets.len(),
            _ => 1,
        }
    }

    /// The latest census and each one after it, for streams.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Arc<Census>>> {
        self.latest.subscribe()
    }

    /// A census that finished at most `max_age` before this call arrived: the cached one, or
    /// a new sweep. A call that finds a sweep running waits for it and takes its result when
    /// that is fresh enough by the same rule (with `max_age` 0: any sweep that finished after
    /// the call arrived), so concurrent calls share one sweep.
    ///
    /// Errors: the members could not be listed ([`ErrorKind::Transient`]: DNS or discovery
    /// failing, or the sweep's deadline passing first); a failed poll is in the census, never
    /// here.
    pub(crate) async fn census(
        &self,
        spec: &FleetSpec,
        max_age: Duration,
    ) -> Result<(Arc<Census>, Freshness), Error> {
        let arrived = Instant::now();
        *self.last_used.lock().expect("not poisoned") = arrived;
        // Checked: an age past what an `Instant` can hold means any census will do.
        let fresh = || {
            self.latest
                .borrow()
                .as_ref()
                .filter(|census| census.at.checked_add(max_age).is_none_or(|t| t >= arrived))
                .cloned()
        };
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        let mut members = self.sweeping.lock().await;
        if let Some(census) = fresh() {
            return Ok((census, Freshness::Cached));
        }
        if let Some(at) = members.next_sweep {
            tokio::time::sleep_until(at.into()).await;
        }
        let census = Arc::new(self.sweep(&mut members, spec).await?);
        self.latest.send_replace(Some(Arc::clone(&census)));
        Ok((census, Freshness::Swept))
    }

    /// The latest census, if any (for a stream woken by another call's sweep).
    pub(crate) fn latest(&self) -> Option<Arc<Census>> {
        self.latest.borrow().clone()
    }

    /// Whether no call has asked about this fleet for a long while.
    pub(crate) fn unused(&self) -> bool {
        self.last_used.lock().expect("not poisoned").elapsed() > UNUSED_FLEET_TTL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec `pairs` of metadata read as (for the tests of this folder).
    pub(super) fn spec(pairs: &[(&str, &str)]) -> FleetSpec {
        FleetSpec::from_metadata(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_census_of_any_age_bound_answers_without_overflow() {
        let fleet = Fleet::new(&spec(&[("targets", "127.0.0.1:1")]), None).unwrap();
        fleet.latest.send_replace(Some(Arc::new(Census {
            at: Instant::now(),
            took: Duration::ZERO,
            polls: Vec::new(),
        })));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let spec = spec(&[("targets", "127.0.0.1:1")]);
        let (_, freshness) = runtime
            .block_on(fleet.census(&spec, Duration::MAX))
            .unwrap();
        assert_eq!(freshness, Freshness::Cached);
    }
}
