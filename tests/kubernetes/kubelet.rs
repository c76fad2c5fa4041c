//! A kubelet for the Wool cases: it runs each pod a label selector picks as a real process, the
//! pod's own container command (Wool's worker through `wool-pod-worker`, from the Wool
//! application's venv) at an address of its own, and plays the kubelet's part in the API:
//!
//! - binds the pod to a node (`pods/binding`), so that deleting it is graceful as on a cluster
//!   (the API server removes an unscheduled pod at once);
//! - starts the container's command and arguments with its plain `env` values, `--host` the
//!   pod's address; reports the pod Running and Ready (status subresource) once the worker's
//!   `/readyz` answers 200;
//! - on the pod's deletion (`deletionTimestamp`): SIGTERM, the pod reported not Ready, SIGKILL
//!   when its `deletionGracePeriodSeconds` is over, and once the process is gone the pod removed
//!   (a delete with grace 0, as the kubelet's last step); a pod removed from the API at once
//!   (a forced delete) gets SIGTERM and the kubelet's minimum grace of 2 s.
//!
//! Every step is an [`Event`] with its time; a worker's log is its process's stderr file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, PostParams, Preconditions};
use kube::{Api, Client};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::processes::{self, Process};
use crate::timeline::now;

/// The node every pod is bound to (no Node object is needed for a binding).
const NODE: &str = "e2e-kubelet";
/// The grace a pod removed from the API at once gets (the kubelet's minimum).
const FORCED_GRACE_SECONDS: f64 = 2.0;
/// The workers' probe port, as the chart's `workers.healthPort`.
const HEALTH_PORT: u16 = 8081;

/// One step the kubelet took, at `at` (seconds since the epoch).
#[derive(Debug, Clone)]
pub struct Event {
    pub at: f64,
    pub pod: String,
    pub what: String,
}

/// A pod the kubelet runs.
#[derive(Debug, Clone)]
pub struct Running {
    pub name: String,
    pub uid: String,
    pub ip: String,
    pub process: Process,
    /// When it was reported Ready, and when its stop began (SIGTERM).
    pub ready_at: Option<f64>,
    pub sigterm_at: Option<f64>,
    /// When SIGKILL is due, once stopping.
    kill_at: Option<f64>,
    /// When the process exited, and how.
    pub exited: Option<(f64, ExitStatus)>,
    /// Whether the pod is gone from the API.
    pub removed: bool,
}

#[derive(Default)]
struct State {
    pods: BTreeMap<String, Running>,
    events: Vec<Event>,
    addresses: usize,
}

impl State {
    fn event(&mut self, pod: &str, what: String) {
        self.events.push(Event {
            at: now(),
            pod: pod.to_owned(),
            what,
        });
    }
}

/// The kubelet of one selector's pods, running until dropped.
pub struct Kubelet {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

/// What the kubelet needs to run a pod's container.
#[derive(Clone)]
pub struct Runtime {
    /// The Wool application's venv: a container command `wool-pod-worker` runs its `bin/` copy.
    pub venv: PathBuf,
    /// Put before the container's own environment (e.g. `PYTHONPATH` to the application).
    pub env: Vec<(String, String)>,
    /// The addresses' prefix: `10.251.3.` inside the suite's network namespace (added to its
    /// loopback), `127.0.3.` on the host.
    pub namespace: bool,
}

impl Kubelet {
    /// Starts running the pods of `selector` in `ns`.
    pub fn start(client: &Client, ns: &str, selector: &str, runtime: Runtime) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let (shared, selector) = (Arc::clone(&state), selector.to_owned());
        let task = tokio::spawn(async move {
            loop {
                sync(&pods, &selector, &runtime, &shared).await;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        Self { state, task }
    }

    /// Every step so far.
    pub fn events(&self) -> Vec<Event> {
        self.state.lock().unwrap().events.clone()
    }

    /// Every pod it ran or runs, by name.
    pub fn pods(&self) -> Vec<Running> {
        self.state.lock().unwrap().pods.values().cloned().collect()
    }

    /// The pod named `name`.
    pub fn pod(&self, name: &str) -> Option<Running> {
        self.state.lock().unwrap().pods.get(name).cloned()
    }

    /// The events as lines, times in seconds from `t0`.
    pub fn render(&self, t0: f64) -> String {
        self.events()
            .iter()
            .map(|e| format!("    {:7.1} kubelet {}: {}\n", e.at - t0, e.pod, e.what))
            .collect()
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        self.task.abort();
        for pod in self.state.lock().unwrap().pods.values() {
            if pod.exited.is_none() {
                processes::stop(pod.process.pid, Duration::from_secs(5));
            }
        }
    }
}

/// One look at the pods: each step that is due.
async fn sync(pods: &Api<Pod>, selector: &str, runtime: &Runtime, state: &Mutex<State>) {
    let Ok(list) = pods.list(&ListParams::default().labels(selector)).await else {
        return;
    };
    let listed: Vec<String> = list
        .items
        .iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    for pod in &list.items {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_ref())
            .is_some();
        let deleting = pod.metadata.deletion_timestamp.is_some();
        let known = state.lock().unwrap().pods.get(&name).cloned();
        match known {
            None if deleting => {
                // Never run here: nothing to stop.
                remove(pods, &name, &uid).await;
            }
            None if !bound => {
                let binding = serde_json::json!({
                    "apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                    "target": {"apiVersion": "v1", "kind": "Node", "name": NODE}
                });
                match pods
                    .create_subresource::<_, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &binding,
                    )
                    .await
                {
                    Ok(_) => state
                        .lock()
                        .unwrap()
                        .event(&name, format!("bound to node {NODE}")),
                    Err(e) => state
                        .lock()
                        .unwrap()
                        .event(&name, format!("binding refused: {e}")),
                }
            }
            None => run(pod, &name, &uid, runtime, state),
            Some(running) if running.exited.is_none() && deleting => {
                if running.sigterm_at.is_none() {
                    let grace = pod
                        .metadata
                        .deletion_grace_period_seconds
                        .unwrap_or(30)
                        .max(0) as f64;
                    terminate(state, &name, grace, "deleted");
                    not_ready(pods, &name, &running.ip).await;
                }
            }
            Some(running) if running.ready_at.is_none() && running.exited.is_none() => {
                if ready(&running.ip).await {
                    let reported = crate::api::pod_status(pods, &name, &running.ip, true).await;
                    let mut state = state.lock().unwrap();
                    match reported {
                        Ok(()) => {
                            if let Some(p) = state.pods.get_mut(&name) {
                                p.ready_at = Some(now());
                            }
                            state.event(&name, "/readyz 200: reported Running and Ready".into());
                        }
                        Err(e) => state.event(&name, format!("status refused: {e}")),
                    }
                }
            }
            Some(_) => {}
        }
    }
    // Pods removed from the API while their worker runs (a forced delete): the kubelet's
    // minimum grace.
    let forced: Vec<(String, bool)> = {
        let mut state = state.lock().unwrap();
        let mut forced = Vec::new();
        for p in state.pods.values_mut() {
            if !p.removed && !listed.contains(&p.name) {
                p.removed = true;
                forced.push((p.name.clone(), p.sigterm_at.is_none() && p.exited.is_none()));
            }
        }
        forced
    };
    for (name, running) in forced {
        if running {
            terminate(
                state,
                &name,
                FORCED_GRACE_SECONDS,
                "removed from the API at once",
            );
        }
    }
    reap(pods, state).await;
}

/// Begins pod `name`'s stop: SIGTERM now, SIGKILL after `grace` seconds.
fn terminate(state: &Mutex<State>, name: &str, grace: f64, why: &str) {
    let mut state = state.lock().unwrap();
    let Some(pod) = state.pods.get_mut(name) else {
        return;
    };
    processes::signal(pod.process.pid, libc::SIGTERM);
    let at = now();
    pod.sigterm_at = Some(at);
    pod.kill_at = Some(at + grace);
    state.event(name, format!("{why}: SIGTERM, SIGKILL after {grace:.0} s"));
}

/// Reports a stopping pod not Ready (its readiness probe fails once the worker drains).
async fn not_ready(pods: &Api<Pod>, name: &str, ip: &str) {
    let _ = crate::api::pod_status(pods, name, ip, false).await;
}

/// Removes pod `name` (uid `uid`) from the API: the kubelet's last step, grace 0.
async fn remove(pods: &Api<Pod>, name: &str, uid: &str) -> bool {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..Default::default()
    };
    pods.delete(name, &params).await.is_ok()
}

/// The stopping pods: SIGKILL when their grace is over; once exited, removed from the API. A
/// worker that exits while its pod is not being deleted is reported not Ready.
async fn reap(pods: &Api<Pod>, state: &Mutex<State>) {
    let serving: Vec<Running> = state
        .lock()
        .unwrap()
        .pods
        .values()
        .filter(|p| p.sigterm_at.is_none() && p.exited.is_none())
        .cloned()
        .collect();
    for pod in serving {
        if let Some(status) = processes::status(pod.process.pid) {
            {
                let mut state = state.lock().unwrap();
                if let Some(p) = state.pods.get_mut(&pod.name) {
                    p.exited = Some((now(), status));
                }
                state.event(&pod.name, format!("worker exited by itself: {status}"));
            }
            if !pod.removed {
                not_ready(pods, &pod.name, &pod.ip).await;
            }
        }
    }
    let stopping: Vec<Running> = state
        .lock()
        .unwrap()
        .pods
        .values()
        .filter(|p| p.sigterm_at.is_some() && !(p.exited.is_some() && p.removed))
        .cloned()
        .collect();
    for pod in stopping {
        if pod.exited.is_none() {
            match processes::status(pod.process.pid) {
                Some(status) => {
                    let mut state = state.lock().unwrap();
                    if let Some(p) = state.pods.get_mut(&pod.name) {
                        p.exited = Some((now(), status));
                    }
                    state.event(&pod.name, format!("worker exited: {status}"));
                }
                None => {
                    if pod.kill_at.is_some_and(|t| now() >= t) {
                        processes::signal(pod.process.pid, libc::SIGKILL);
                        let mut state = state.lock().unwrap();
                        if let Some(p) = state.pods.get_mut(&pod.name) {
                            p.kill_at = None;
                        }
                        state.event(&pod.name, "grace over: SIGKILL".into());
                    }
                    continue;
                }
            }
        }
        if !pod.removed && remove(pods, &pod.name, &pod.uid).await {
            let mut state = state.lock().unwrap();
            if let Some(p) = state.pods.get_mut(&pod.name) {
                p.removed = true;
            }
            state.event(&pod.name, "removed from the API (grace 0)".into());
        }
    }
}

/// Starts pod `name`'s container: its command (a bare `wool-pod-worker` from the venv), its
/// arguments and `--host` its address, its plain `env` values after the runtime's.
fn run(pod: &Pod, name: &str, uid: &str, runtime: &Runtime, state: &Mutex<State>) {
    let Some(container) = pod.spec.as_ref().and_then(|s| s.containers.first()) else {
        return;
    };
    let mut state = state.lock().unwrap();
    state.addresses += 1;
    let n = state.addresses;
    let ip = if runtime.namespace {
        let ip = format!("10.251.3.{}", 9 + n);
        if let Err(e) = crate::netns::ip(&["addr", "add", &format!("{ip}/32"), "dev", "lo"]) {
            state.event(name, format!("cannot add address {ip}: {e}"));
            return;
        }
        ip
    } else {
        format!("127.0.3.{}", 9 + n)
    };
    let mut argv: Vec<String> = container.command.clone().unwrap_or_default();
    argv.extend(container.args.clone().unwrap_or_default());
    argv.extend(["--host".into(), ip.clone()]);
    let program = match argv.first() {
        Some(first) if !first.contains('/') => runtime.venv.join("bin").join(first),
        Some(first) => PathBuf::from(first),
        None => {
            state.event(name, "the container has no command".into());
            return;
        }
    };
    let mut command = Command::new(&program);
    command.args(&argv[1..]);
    for (key, value) in &runtime.env {
        command.env(key, value);
    }
    for var in container.env.iter().flatten() {
        if let Some(value) = &var.value {
            command.env(&var.name, value);
        }
    }
    command.env("WOOL_E2E_POD", name);
    match processes::start(&format!("pod-{name}"), &mut command) {
        Ok(process) => {
            let line = format!(
                "started {} {} at {ip} (pid {})",
                shown(&program),
                argv[1..].join(" "),
                process.pid
            );
            state.pods.insert(
                name.to_owned(),
                Running {
                    name: name.to_owned(),
                    uid: uid.to_owned(),
                    ip,
                    process,
                    ready_at: None,
                    sigterm_at: None,
                    kill_at: None,
                    exited: None,
                    removed: false,
                },
            );
            state.event(name, line);
        }
        Err(e) => state.event(name, format!("cannot start: {e}")),
    }
}

fn shown(program: &Path) -> String {
    program.file_name().map_or_else(
        || program.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Whether the worker at `ip` answers `GET /readyz` with 200 (its probe port).
async fn ready(ip: &str) -> bool {
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((ip, HEALTH_PORT))
            .await
            .ok()?;
        stream
            .write_all(b"GET /readyz HTTP/1.0\r\nHost: kubelet\r\n\r\n")
            .await
            .ok()?;
        let mut head = [0u8; 32];
        let n = stream.read(&mut head).await.ok()?;
        let line = String::from_utf8_lossy(&head[..n]).into_owned();
        Some(line.split_whitespace().nth(1) == Some("200"))
    };
    tokio::time::timeout(Duration::from_secs(2), probe)
        .await
        .ok()
        .flatten()
        .unwrap_or(false)
}
