//! A fleet's sweep: listing its members (listed, resolved or discovered, within the sweep's
//! deadline and the process's bound on listings), connecting to new ones, polling them all,
//! and logging who became unreachable.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

use super::pods::{address, PodWatch};
use super::{Census, TargetGroup};
use crate::connection::{ChannelOptions, Error, ErrorKind, WorkerConnection};
use crate::fleet::discovery::{admit, DiscoveredWorker, DEFAULT_LISTEN};
use crate::fleet::{sweep, SweepOptions};
use crate::scaler::metadata::{Source, TriggerSpec, MAX_TARGETS};

/// The shortest time between the starts of two sweeps of one fleet, however small it is.
pub(crate) const MIN_SWEEP_INTERVAL: Duration = Duration::from_millis(100);

/// The most polls a second one fleet's sweeps make: a fleet of `n` members sweeps at most once
/// every `n / 2000` seconds (10,000 targets: every 5 s), a call asking for a fresher answer
/// waits for the next allowed sweep. Re-exported as `scaler::POLLS_PER_SECOND_PER_FLEET`.
pub const POLLS_PER_SECOND_PER_FLEET: u32 = 2000;

/// The most discovery listings (a LAN browse, a registry scan) running at once in the process,
/// across fleets; a fleet runs at most one at a time.
pub(crate) const MAX_LISTINGS: usize = 16;

/// Held by each discovery listing while it runs (released when the listing's thread ends, not
/// when the sweep waiting for it gives up).
static LISTINGS: Semaphore = Semaphore::const_new(MAX_LISTINGS);

/// How often a fleet of `members` may sweep (see [`POLLS_PER_SECOND_PER_FLEET`]).
fn sweep_interval(members: usize) -> Duration {
    let budget = Duration::from_secs_f64(members as f64 / f64::from(POLLS_PER_SECOND_PER_FLEET));
    budget.max(MIN_SWEEP_INTERVAL)
}

/// How long a LAN listing listens: [`DEFAULT_LISTEN`], or half the sweep's deadline when that
/// is shorter, so that the listing ends within the sweep that started it.
pub(super) fn lan_listen(sweep_timeout: Duration) -> Duration {
    DEFAULT_LISTEN.min(sweep_timeout / 2)
}

/// A member's address (as shown) and its connection, or why none could be made.
struct Connected {
    address: String,
    connection: Result<Arc<WorkerConnection>, Error>,
}

/// The connections of the members seen by the last sweep, by member key, and which of them
/// were unreachable (to log changes, not every sweep).
#[derive(Default)]
pub(super) struct Members {
    connections: HashMap<String, Connected>,
    unreachable: HashSet<String>,
    /// Whether the last listing found nobody (to log the change to none once).
    listed_none: bool,
    /// When the next sweep may start ([`sweep_interval`] after the last one started).
    pub(super) next_sweep: Option<Instant>,
    /// A discovery listing still running (a sweep whose deadline passed left it): the next
    /// sweep waits for it rather than starting another.
    listing: Option<JoinHandle<Result<Vec<DiscoveredWorker>, Error>>>,
}

impl TargetGroup {
    pub(super) async fn sweep(
        &self,
        members: &mut Members,
        spec: &TriggerSpec,
    ) -> Result<Census, Error> {
        let started = Instant::now();
        // Set before anything can fail: a failing sweep is rate-limited too.
        members.next_sweep = Some(started + MIN_SWEEP_INTERVAL);
        // The sweep's one deadline covers the listing too (a DNS server that does not answer,
        // a LAN browse): the polls get what is left of it.
        let listed = tokio::time::timeout(spec.sweep_timeout, self.list(&mut members.listing))
            .await
            .map_err(|_| {
                transient(format!(
                    "listing the fleet's members took longer than the sweep's timeout ({:.3} s)",
                    spec.sweep_timeout.as_secs_f64()
                ))
            })??;
        let left = spec
            .sweep_timeout
            .saturating_sub(started.elapsed())
            .max(Duration::from_millis(1));
        if listed.len() > MAX_TARGETS {
            return Err(transient(format!(
                "the listing gave {} workers, more than {MAX_TARGETS}",
                listed.len()
            )));
        }
        members.next_sweep = Some(started + sweep_interval(listed.len()));
        if listed.is_empty() && !members.listed_none {
            // A misspelt name or namespace reads like a fleet scaled to zero: say which.
            tracing::warn!(source = %self.label,
                "the listing found no workers: the metric is 0 and the fleet inactive");
        }
        members.listed_none = listed.is_empty();
        let mut connections = HashMap::with_capacity(listed.len());
        for member in listed {
            let entry = match members.connections.remove(&member.key) {
                Some(entry) => entry,
                None => Connected {
                    address: member.address.clone(),
                    connection: (member.connect)(self).map(Arc::new),
                },
            };
            connections.insert(member.key, entry);
        }
        members.connections = connections;
        let mut order: Vec<(&String, &Connected)> = members.connections.iter().collect();
        order.sort_by(|a, b| (&a.1.address, a.0).cmp(&(&b.1.address, b.0)));
        // Owned handles: the sweep's future must not borrow from this guard's lifetime.
        let reachable: Vec<Arc<WorkerConnection>> = order
            .iter()
            .filter_map(|(_, member)| member.connection.as_ref().ok().cloned())
            .collect();
        let options = SweepOptions {
            timeout: Some(left),
            ..SweepOptions::default()
        };
        let mut outcomes = sweep(reachable, &options).await?.into_iter();
        let polls: Vec<(String, Result<f64, Error>)> = order
            .iter()
            .map(|(_, member)| {
                let outcome = match &member.connection {
                    Ok(_) => outcomes.next().expect("one outcome per connection"),
                    Err(error) => Err(error.clone()),
                };
                (member.address.clone(), outcome)
            })
            .collect();
        self.log_changes(members, &polls);
        Ok(Census {
            at: Instant::now(),
            took: started.elapsed(),
            polls,
        })
    }

    /// Logs a member that became unreachable (with why) or reachable again, once per change.
    fn log_changes(&self, members: &mut Members, polls: &[(String, Result<f64, Error>)]) {
        let mut now = HashSet::new();
        for (address, poll) in polls {
            if let Err(error) = poll {
                let idle_unavailable = error.kind() == ErrorKind::IdleUnavailable;
                if !members.unreachable.contains(address) {
                    if idle_unavailable {
                        tracing::warn!(source = %self.label, worker = %address,
                            "worker predates the idle RPC: counted as the metadata's idleUnavailableAs says");
                    } else {
                        tracing::warn!(source = %self.label, worker = %address, %error,
                            "worker unreachable: counted as the metadata's unreachableAs says");
                    }
                }
                now.insert(address.clone());
            }
        }
        for address in members.unreachable.difference(&now) {
            if polls.iter().any(|(a, _)| a == address) {
                tracing::info!(source = %self.label, worker = %address, "worker answering again");
            }
        }
        members.unreachable = now;
    }

    /// The members now: listed, resolved or discovered. A discovery listing runs on a thread
    /// of its own, parked in `listing` while it runs, so that a sweep that gives up on it
    /// leaves it for the next sweep to wait for instead of starting a second one.
    async fn list(
        &self,
        listing: &mut Option<JoinHandle<Result<Vec<DiscoveredWorker>, Error>>>,
    ) -> Result<Vec<Member>, Error> {
        match &self.key.source {
            Source::Targets(targets) => Ok(targets
                .iter()
                .map(|target| Member::target(target.clone()))
                .collect()),
            Source::Pods {
                namespace,
                selector,
                port,
            } => {
                let watch = self.pods.get_or_init(|| {
                    PodWatch::start(namespace.clone(), selector.clone(), self.max_pods)
                });
                // A new group's first listing: wait for it (the sweep's deadline bounds this).
                while watch.state.lock().expect("not poisoned").awaiting_listing() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let state = watch.state.lock().expect("not poisoned");
                Ok(state
                    .pods(selector, self.max_pods)?
                    .iter()
                    .filter_map(|(name, pod)| {
                        let address = address(pod.ip.as_ref()?, *port);
                        let mut member = Member::target(address.clone());
                        member.key = format!("{name}@{address}");
                        Some(member)
                    })
                    .collect())
            }
            Source::Namespace { .. } | Source::Dns { .. } => {
                let running = match listing.take() {
                    Some(running) if !running.is_finished() => running,
                    _ => {
                        let permit = LISTINGS.acquire().await.expect("never closed");
                        let discovery = self.discovery.clone().expect("made with the fleet");
                        tokio::task::spawn_blocking(move || {
                            let _permit = permit;
                            discovery.list()
                        })
                    }
                };
                let running = listing.insert(running);
                let outcome = running.await;
                *listing = None;
                let listing =
                    outcome.map_err(|e| transient(format!("listing the fleet: {e}")))??;
                // Wool's WorkerProxy gate: a worker it refuses (a plaintext record while the
                // fleet has credentials, an incompatible version, ...) is no member at all, so a
                // forged record cannot keep the fleet busy by being unreachable.
                let admission = admit(listing, self.credentials.as_ref());
                if !admission.refused.is_empty() {
                    tracing::debug!(source = %self.label, refused = admission.refused.len(),
                        "discovered workers refused by the admission gate are not members");
                }
                Ok(admission
                    .admitted
                    .into_iter()
                    .map(|worker| Member {
                        key: format!(
                            "{}@{} secure={} identity={:?}",
                            worker.uid, worker.address, worker.secure, worker.identity
                        ),
                        address: worker.address.clone(),
                        connect: Box::new(move |fleet: &TargetGroup| {
                            worker.connect(fleet.credentials.as_ref(), ChannelOptions::default())
                        }),
                    })
                    .collect())
            }
        }
    }
}

/// A member as a listing gives it: a key that changes when how to reach it changes, the
/// address it is shown by, and how to connect to it.
struct Member {
    key: String,
    address: String,
    connect: Connect,
}

/// How a listed member is connected to, once, when first seen.
type Connect = Box<dyn FnOnce(&TargetGroup) -> Result<WorkerConnection, Error> + Send>;

impl Member {
    /// A listed target; over TLS (when the fleet has credentials) verified against the
    /// metadata's `workerTlsServerName`, else the host.
    fn target(address: String) -> Self {
        let target = address.clone();
        Member {
            key: address.clone(),
            address,
            connect: Box::new(move |fleet: &TargetGroup| {
                WorkerConnection::with_options(
                    &target,
                    fleet.credentials.clone(),
                    ChannelOptions::default(),
                )
            }),
        }
    }
}

fn transient(message: String) -> Error {
    Error::new(ErrorKind::Transient, None, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaler::target_group::tests::spec;

    /// Given a LAN fleet whose sweep deadline (200 ms) is shorter than the default listening
    /// window (1.5 s), when eight calls ask for fresh answers one after another, then at most
    /// one listing runs at any time and none outlives its sweep by much (each listens 100 ms).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lan_listing_runs_once_per_fleet_within_the_sweeps_deadline() {
        let namespace = format!("scaler-lan-{}", std::process::id());
        let spec = spec(&[
            ("namespace", &namespace),
            ("discovery", "lan"),
            ("sweepTimeout", "200ms"),
        ]);
        let fleet =
            TargetGroup::new(&spec, None, super::super::pods::PodBounds::default()).unwrap();
        let running = || MAX_LISTINGS - LISTINGS.available_permits();
        let mut most = 0;
        let started = Instant::now();
        for _ in 0..8 {
            let census = fleet.census(&spec, Duration::ZERO).await;
            most = most.max(running());
            if let Err(error) = census {
                // No multicast here: the listing fails at once, and nothing is left running.
                eprintln!("LAN listing: {error}");
            }
        }
        let took = started.elapsed();
        tokio::time::sleep(Duration::from_millis(300)).await;
        eprintln!("8 LAN sweeps in {took:?}; most listings running after a sweep: {most}");
        assert!(most <= 1, "{most} listings running at once");
        assert_eq!(running(), 0, "a listing outlived its sweep by 300 ms");
    }
}
