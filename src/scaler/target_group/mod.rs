//! A fleet as the scaler sees it: its members (listed, resolved or discovered afresh at each
//! sweep), its pooled connections, and its latest census. One sweep runs at a time per fleet;
//! calls arriving meanwhile wait for it and share its result, so KEDA's polling never
//! stampedes the workers.
//!
//! The files, one job each: this one (a fleet and its census on demand), `sweep` (listing the
//! members, connecting to them and polling them), `census` (a sweep's outcome and how a
//! ScaledObject counts it), `registry` (the fleets the scaler answers for, and the metadata
//! readings that name them), `holds` (the bounds on the streams and calls holding fleets),
//! `tls_files` (the TLS files metadata names, checked and read), `pods` (pods as a source,
//! watched through the Kubernetes API) and `deletion_cost` (the idlest pods marked for the
//! ReplicaSet controller to delete first).

mod census;
pub(crate) mod deletion_cost;
mod holds;
pub(crate) mod pods;
mod registry;
mod sweep;
mod tls_files;

pub use sweep::POLLS_PER_SECOND_PER_FLEET;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::watch;

pub(crate) use census::{Census, Count, Freshness};
use deletion_cost::{Marks, Patch};
pub(crate) use holds::{HoldFor, MAX_CALLS, MAX_STREAMS};
use pods::PodWatch;
pub use pods::{PodBounds, DEFAULT_MAX_PODS_PER_GROUP, DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE};
pub(crate) use registry::TargetGroups;
use sweep::{lan_listen, Members};
use tls_files::tls_credentials;

use super::metadata::{GroupKey, Source, TriggerSpec, MAX_TARGETS};
use crate::connection::{Error, WorkerCredentials};
use crate::fleet::discovery::{Discovery, DnsDiscovery, LanDiscovery, LocalDiscovery};

/// How long a fleet no call has asked about is kept (its connections, its census).
const UNUSED_GROUP_TTL: Duration = Duration::from_secs(600);

/// One fleet: shared by every ScaledObject whose metadata names the same workers reached the
/// same way ([`TriggerSpec::group_key`]).
pub(crate) struct TargetGroup {
    pub(super) key: GroupKey,
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
    /// For pods: the bound on how many one selector may pick.
    pub(super) max_pods: usize,
    /// For pods: their watch, started by the first listing (on the runtime).
    pub(super) pods: OnceLock<PodWatch>,
    /// For pods with a deletion cost: what has been written. Held while patching: one
    /// marking at a time per group.
    marks: tokio::sync::Mutex<Marks>,
}

/// How one deletion-cost patch went, as `wool_scaler_deletion_cost_patches_total` counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PatchOutcome {
    Made,
    /// Past the group's bound on patches: left for a later sweep.
    Refused,
    Error,
}

impl std::fmt::Debug for TargetGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TargetGroup")
            .field("source", &self.key.source)
            .finish()
    }
}

impl TargetGroup {
    /// A fleet for `spec`, no I/O but reading its TLS files, which must be in `tls_files_dir`
    /// (canonical; `None`: metadata may name no TLS files).
    ///
    /// Errors: [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a TLS file that cannot be used (one message
    /// whether it is missing, unreadable, not a regular file, outside the directory or not
    /// TLS material: the log says which), or a bad namespace.
    pub(crate) fn new(
        spec: &TriggerSpec,
        tls_files_dir: Option<&Path>,
        pod_bounds: PodBounds,
    ) -> Result<Self, Error> {
        let key = spec.group_key();
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
            Source::Targets(_) | Source::Pods { .. } => None,
        };
        Ok(Self {
            label: key.source.to_string(),
            key,
            credentials,
            discovery,
            sweeping: tokio::sync::Mutex::new(Members::default()),
            latest: watch::Sender::new(None),
            last_used: Mutex::new(Instant::now()),
            max_pods: pod_bounds.max_pods_per_group,
            pods: OnceLock::new(),
            marks: tokio::sync::Mutex::new(Marks::default()),
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
    /// Errors: the members could not be listed ([`ErrorKind::Transient`](crate::ErrorKind::Transient): DNS or discovery
    /// failing, or the sweep's deadline passing first); a failed poll is in the census, never
    /// here.
    pub(crate) async fn census(
        &self,
        spec: &TriggerSpec,
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

    /// Marks the idlest pods for deletion, as [`deletion_cost`] says, from `census` counted to
    /// `metric` under `spec`: patches only the changes, within the group's bound. Does nothing
    /// for a group that is not pods or whose watch has no client yet, or while another marking
    /// of this group runs.
    ///
    /// Returns each patch's outcome.
    pub(crate) async fn mark_idlest(
        &self,
        spec: &TriggerSpec,
        census: &Census,
        metric: usize,
    ) -> Vec<PatchOutcome> {
        let Source::Pods { namespace, .. } = &self.key.source else {
            return Vec::new();
        };
        let Some(watch) = self.pods.get() else {
            return Vec::new();
        };
        let Some(client) = watch.client.lock().expect("not poisoned").clone() else {
            return Vec::new();
        };
        let Ok(mut marks) = self.marks.try_lock() else {
            return Vec::new();
        };
        let (patches, current) = {
            let state = watch.state.lock().expect("not poisoned");
            let Ok(pods) = state.pods("", self.max_pods) else {
                return Vec::new();
            };
            let live = pods.iter().filter(|(_, pod)| !pod.terminating);
            let present: BTreeSet<String> = live.clone().map(|(name, _)| name.clone()).collect();
            let annotated: BTreeSet<String> = live
                .clone()
                .filter(|(_, pod)| pod.deletion_cost.as_deref() == Some(deletion_cost::MARK))
                .map(|(name, _)| name.clone())
                .collect();
            let by_address: std::collections::HashMap<String, &String> = live
                .filter_map(|(name, pod)| {
                    pod.ip
                        .as_ref()
                        .map(|ip| (pods::address(ip, self.port()), name))
                })
                .collect();
            let polls = census
                .polls
                .iter()
                .filter_map(|(address, poll)| {
                    by_address
                        .get(address)
                        .map(|name| ((*name).clone(), poll.clone()))
                })
                .collect();
            let desired = deletion_cost::desired_replicas(metric, spec.target_value);
            let chosen = deletion_cost::choose(polls, present.len(), desired, spec.idle_threshold);
            (marks.diff(&chosen, &annotated, &present), present.len())
        };
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
            kube::Api::namespaced(client, namespace);
        let mut outcomes = Vec::with_capacity(patches.len());
        for patch in patches {
            if !marks.allow(Instant::now()) {
                outcomes.push(PatchOutcome::Refused);
                continue;
            }
            outcomes.push(self.write(&api, &mut marks, &patch, current).await);
        }
        outcomes
    }

    /// Writes one deletion-cost patch (a JSON merge patch through the `patch` verb).
    async fn write(
        &self,
        api: &kube::Api<k8s_openapi::api::core::v1::Pod>,
        marks: &mut Marks,
        patch: &Patch,
        current: usize,
    ) -> PatchOutcome {
        let body = kube::api::Patch::Merge(deletion_cost::patch_body(patch));
        match api
            .patch(&patch.pod, &kube::api::PatchParams::default(), &body)
            .await
        {
            Ok(_) => {
                marks.wrote(patch);
                tracing::info!(source = %self.label, pod = %patch.pod, mark = patch.mark,
                    pods = current, "pod deletion cost written");
                PatchOutcome::Made
            }
            Err(error) => {
                tracing::warn!(source = %self.label, pod = %patch.pod, %error,
                    "writing the pod deletion cost failed");
                PatchOutcome::Error
            }
        }
    }

    /// The workers' port of a pod group (0 for other sources).
    fn port(&self) -> u16 {
        match &self.key.source {
            Source::Pods { port, .. } => *port,
            _ => 0,
        }
    }

    /// Whether no call has asked about this fleet for a long while.
    pub(crate) fn unused(&self) -> bool {
        self.last_used.lock().expect("not poisoned").elapsed() > UNUSED_GROUP_TTL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The spec `pairs` of metadata read as (for the tests of this folder).
    pub(super) fn spec(pairs: &[(&str, &str)]) -> TriggerSpec {
        TriggerSpec::from_metadata(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
        .unwrap()
    }

    #[test]
    fn a_census_of_any_age_bound_answers_without_overflow() {
        let fleet = TargetGroup::new(
            &spec(&[("targets", "127.0.0.1:1")]),
            None,
            PodBounds::default(),
        )
        .unwrap();
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
