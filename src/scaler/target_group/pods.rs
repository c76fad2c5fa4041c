//! Pods as a target group's source: the pods a label selector picks in the ScaledObject's
//! namespace, listed and watched through the Kubernetes API (`kube`'s watcher), each a worker at
//! `podIP:port` once Ready.
//!
//! What the API can make the scaler hold is bounded: at most [`PodBounds::max_pods_per_group`]
//! pods per group (past it the group's listing fails, naming the bound, and the pods are not
//! kept), at most [`PodBounds::max_pod_groups_per_namespace`] pod groups per namespace (checked
//! by the registry), and a failing watch is restarted after a backoff from [`MIN_BACKOFF`]
//! doubling to [`MAX_BACKOFF`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube::{Api, Client};

use crate::connection::{Error, ErrorKind};

/// The first wait before a failed watch is started again.
pub(crate) const MIN_BACKOFF: Duration = Duration::from_secs(1);

/// The longest wait before a failed watch is started again (the wait doubles from
/// [`MIN_BACKOFF`] while the watch keeps failing).
pub(crate) const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The default of `--max-pods-per-fleet`.
pub const DEFAULT_MAX_PODS_PER_GROUP: usize = 10_000;

/// The default of `--max-pod-fleets-per-namespace`.
pub const DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE: usize = 16;

/// The bounds on what pod sources may make the scaler hold (the scaler's flags
/// `--max-pods-per-fleet` and `--max-pod-fleets-per-namespace`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodBounds {
    /// Most pods one selector may pick; past it the group's metric request fails, naming the
    /// bound, while other groups keep serving. Default [`DEFAULT_MAX_PODS_PER_GROUP`].
    pub max_pods_per_group: usize,
    /// Most pod groups (distinct selector, port, TLS and sweep deadline) the ScaledObjects of
    /// one namespace may have at once. Default [`DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE`].
    pub max_pod_groups_per_namespace: usize,
}

impl Default for PodBounds {
    fn default() -> Self {
        Self {
            max_pods_per_group: DEFAULT_MAX_PODS_PER_GROUP,
            max_pod_groups_per_namespace: DEFAULT_MAX_POD_GROUPS_PER_NAMESPACE,
        }
    }
}

/// One pod as the group needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WatchedPod {
    /// Its IP when it is Ready and has one that parses as an IP address: only then is it polled.
    pub(crate) ip: Option<String>,
    /// Whether it is being deleted (no longer one of the Deployment's current replicas).
    pub(crate) terminating: bool,
    /// Its `controller.kubernetes.io/pod-deletion-cost` annotation, if any.
    pub(crate) deletion_cost: Option<String>,
}

impl WatchedPod {
    fn of(pod: &Pod) -> (String, Self) {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.as_ref();
        let ready = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|conditions| {
                conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            });
        // The status is a claim (whoever may write pod status writes it): only an IP address is
        // dialed, never a name the scaler would resolve.
        let ip = status
            .and_then(|s| s.pod_ip.clone())
            .filter(|ip| ready && ip.parse::<std::net::IpAddr>().is_ok());
        let deletion_cost = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(super::deletion_cost::ANNOTATION).cloned());
        (
            name,
            Self {
                ip,
                terminating: pod.metadata.deletion_timestamp.is_some(),
                deletion_cost,
            },
        )
    }
}

/// What the watch has seen: the pods by name once listed, or why there are none to give.
#[derive(Debug, Default)]
pub(crate) struct PodState {
    pods: BTreeMap<String, WatchedPod>,
    /// The pods of a listing in progress (after a watch (re)start), swapped in when complete.
    listing: Option<BTreeMap<String, WatchedPod>>,
    /// Whether a complete listing has been seen.
    listed: bool,
    /// Why the watch is failing now (cleared by its next event).
    failing: Option<String>,
    /// How many pods the selector picked when that passed the bound (the pods are dropped).
    over_bound: Option<usize>,
    /// The same for the listing in progress (taken as `over_bound` when it completes).
    listing_over_bound: Option<usize>,
    /// How often the watch failed and was started again.
    pub(crate) restarts: u64,
}

impl PodState {
    /// Applies one watch event, holding at most `max_pods` pods.
    pub(crate) fn apply(&mut self, event: watcher::Event<Pod>, max_pods: usize) {
        self.failing = None;
        match event {
            watcher::Event::Init => {
                self.listing = Some(BTreeMap::new());
                self.listing_over_bound = None;
            }
            watcher::Event::InitApply(pod) => {
                if let Some(listing) = &mut self.listing {
                    let (name, watched) = WatchedPod::of(&pod);
                    if listing.len() < max_pods || listing.contains_key(&name) {
                        listing.insert(name, watched);
                    } else {
                        self.listing_over_bound = Some(listing.len() + 1);
                    }
                }
            }
            watcher::Event::InitDone => {
                if let Some(listing) = self.listing.take() {
                    self.over_bound = self.listing_over_bound.take();
                    self.pods = if self.over_bound.is_some() {
                        BTreeMap::new()
                    } else {
                        listing
                    };
                    self.listed = true;
                }
            }
            watcher::Event::Apply(pod) => {
                let (name, watched) = WatchedPod::of(&pod);
                if self.pods.len() < max_pods || self.pods.contains_key(&name) {
                    self.pods.insert(name, watched);
                } else {
                    self.over_bound = Some(self.pods.len() + 1);
                }
            }
            watcher::Event::Delete(pod) => {
                let (name, _) = WatchedPod::of(&pod);
                self.pods.remove(&name);
            }
        }
    }

    /// Whether pods past the bound were dropped (the watch lists again, after a backoff, to
    /// learn whether the selector is back within it).
    pub(crate) fn over_bound(&self) -> bool {
        self.over_bound.is_some()
    }

    /// Records a watch failure (the watch is started again after a backoff).
    pub(crate) fn failed(&mut self, cause: String) {
        self.failing = Some(cause);
        self.restarts += 1;
    }

    /// Whether a first listing is still awaited (the watch neither listed nor failed yet).
    pub(crate) fn awaiting_listing(&self) -> bool {
        !self.listed && self.failing.is_none() && self.over_bound.is_none()
    }

    /// The pods now, by name.
    ///
    /// Errors ([`ErrorKind::Transient`]): the watch is failing (the cause), has not listed the
    /// pods yet, or the selector picks more than `max_pods` pods.
    pub(crate) fn pods(
        &self,
        selector: &str,
        max_pods: usize,
    ) -> Result<&BTreeMap<String, WatchedPod>, Error> {
        if let Some(count) = self.over_bound {
            return Err(transient(format!(
                "pod selector {selector:?} picks at least {count} pods, more than \
                 --max-pods-per-fleet ({max_pods}): the scaler does not hold them"
            )));
        }
        if let Some(cause) = &self.failing {
            return Err(transient(format!(
                "watching the pods of selector {selector:?} fails (restarted with a backoff of \
                 {} s to {} s): {cause}",
                MIN_BACKOFF.as_secs(),
                MAX_BACKOFF.as_secs()
            )));
        }
        if !self.listed {
            return Err(transient(format!(
                "the pods of selector {selector:?} are not listed yet"
            )));
        }
        Ok(&self.pods)
    }
}

/// A running watch of one group's pods; stopped on drop.
pub(crate) struct PodWatch {
    pub(crate) state: Arc<Mutex<PodState>>,
    /// The API client, once the configuration has been read (for the deletion cost's patches).
    pub(crate) client: Arc<Mutex<Option<Client>>>,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for PodWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PodWatch")
            .field("state", &self.state)
            .finish_non_exhaustive()
    }
}

impl Drop for PodWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl PodWatch {
    /// Starts watching the pods `selector` picks in `namespace`, on the current runtime, with
    /// the in-cluster configuration or `$KUBECONFIG` (kube's `Client::try_default`).
    pub(crate) fn start(namespace: String, selector: String, max_pods: usize) -> Self {
        let state = Arc::new(Mutex::new(PodState::default()));
        let client = Arc::new(Mutex::new(None));
        let task = tokio::spawn(watch(
            namespace,
            selector,
            max_pods,
            Arc::clone(&state),
            Arc::clone(&client),
        ));
        Self {
            state,
            client,
            task,
        }
    }
}

/// The watch loop: a client, then the watcher's events into `state`; a failure is recorded and
/// the next attempt waits the backoff.
async fn watch(
    namespace: String,
    selector: String,
    max_pods: usize,
    state: Arc<Mutex<PodState>>,
    shared_client: Arc<Mutex<Option<Client>>>,
) {
    let mut backoff = MIN_BACKOFF;
    let client = loop {
        match Client::try_default().await {
            Ok(client) => break client,
            Err(error) => {
                state
                    .lock()
                    .expect("not poisoned")
                    .failed(format!("no Kubernetes API configuration: {error}"));
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    };
    *shared_client.lock().expect("not poisoned") = Some(client.clone());
    let pods: Api<Pod> = Api::namespaced(client, &namespace);
    backoff = MIN_BACKOFF;
    loop {
        let config = watcher::Config::default().labels(&selector);
        let mut events = std::pin::pin!(watcher(pods.clone(), config));
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => {
                    let mut state = state.lock().expect("not poisoned");
                    state.apply(event, max_pods);
                    if state.over_bound() {
                        break;
                    }
                    backoff = MIN_BACKOFF;
                }
                Err(error) => {
                    tracing::warn!(%namespace, %selector, %error, retry_in = ?backoff,
                        "watching pods failed");
                    state
                        .lock()
                        .expect("not poisoned")
                        .failed(error.to_string());
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        // Past the bound (or the stream ended): list afresh after the backoff.
        tracing::warn!(%namespace, %selector, max_pods, retry_in = ?backoff,
            "the pod selector picks more pods than the bound: listing again later");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// A pod's worker address: `ip:port`, an IPv6 address in brackets.
pub(crate) fn address(ip: &str, port: u16) -> String {
    if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

fn transient(message: String) -> Error {
    Error::new(ErrorKind::Transient, None, message)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use kube::api::ObjectMeta;

    use super::*;

    fn pod(name: &str, ip: Option<&str>, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            status: Some(PodStatus {
                pod_ip: ip.map(str::to_owned),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: if ready { "True" } else { "False" }.into(),
                    ..PodCondition::default()
                }]),
                ..PodStatus::default()
            }),
            ..Pod::default()
        }
    }

    #[test]
    fn only_ready_pods_with_an_ip_are_polled() {
        assert_eq!(
            WatchedPod::of(&pod("a", Some("10.0.0.1"), true)).1.ip,
            Some("10.0.0.1".into())
        );
        assert_eq!(
            WatchedPod::of(&pod("b", Some("10.0.0.2"), false)).1.ip,
            None
        );
        assert_eq!(WatchedPod::of(&pod("c", None, true)).1.ip, None);
    }

    #[test]
    fn a_pod_ip_that_is_no_ip_address_is_not_polled() {
        for claim in [
            "",
            "worker.example.com",
            "10.0.0.1:80",
            "10.0.0.256",
            "::1]",
        ] {
            assert_eq!(
                WatchedPod::of(&pod("d", Some(claim), true)).1.ip,
                None,
                "{claim:?}"
            );
        }
        assert_eq!(
            WatchedPod::of(&pod("e", Some("fd00::1"), true)).1.ip,
            Some("fd00::1".into())
        );
    }

    #[test]
    fn a_listing_past_the_bound_is_dropped_and_names_the_bound() {
        let mut state = PodState::default();
        assert!(state.pods("app=w", 2).is_err(), "not listed yet");
        state.apply(watcher::Event::Init, 2);
        for name in ["a", "b", "c"] {
            state.apply(
                watcher::Event::InitApply(pod(name, Some("10.0.0.1"), true)),
                2,
            );
        }
        state.apply(watcher::Event::InitDone, 2);
        let error = state.pods("app=w", 2).unwrap_err();
        assert!(
            error.message().contains("--max-pods-per-fleet (2)"),
            "{error}"
        );
        // A new listing within the bound serves again.
        state.apply(watcher::Event::Init, 2);
        state.apply(
            watcher::Event::InitApply(pod("a", Some("10.0.0.1"), true)),
            2,
        );
        state.apply(watcher::Event::InitDone, 2);
        assert_eq!(state.pods("app=w", 2).unwrap().len(), 1);
        // A pod added past the bound by the watch fails the listing too.
        state.apply(watcher::Event::Apply(pod("b", None, false)), 2);
        state.apply(watcher::Event::Apply(pod("c", None, false)), 2);
        assert!(state.pods("app=w", 2).is_err());
    }

    #[test]
    fn a_failing_watch_names_its_cause_until_its_next_event() {
        let mut state = PodState::default();
        state.apply(watcher::Event::Init, 10);
        state.apply(watcher::Event::InitDone, 10);
        state.failed("connection refused".into());
        let error = state.pods("app=w", 10).unwrap_err();
        assert!(error.message().contains("connection refused"), "{error}");
        assert_eq!(state.restarts, 1);
        state.apply(watcher::Event::Init, 10);
        state.apply(watcher::Event::InitDone, 10);
        assert!(state.pods("app=w", 10).unwrap().is_empty());
    }
}
