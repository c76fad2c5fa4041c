//! The cases of a Wool application on Kubernetes: the chart's `workers.kind: wool` Deployment
//! whose pods run Wool 0.15.7's own worker through `wool-pod-worker` (started by the suite's
//! kubelet, `kubelet.rs`, from the pod's own command), scaled by KEDA and the HPA from
//! wool-scaler's answers, and a Wool client (`tests/kubernetes/wool/client.py`: a `WorkerPool`
//! with `KubernetesDiscovery` and `DemandLoadBalancer`, `quorum=0`, reading the API with the
//! chart's client Role) dispatching `e2e_app.nap` to them.
//!
//! - `wool_cycle`: 0 → N → 0, WOOL_RUNS times (default 5): from zero the first task's demand
//!   activates the Deployment and the task completes on a pod the client's discovery found; a
//!   burst scales it to N (`targetValue` 0.5: two replicas a busy worker, at most 3); the burst
//!   drains and the Deployment returns to zero, no pod stopped while its worker has a task in
//!   flight after the last dispatch (deletionCost marks the idlest), no task lost.
//! - `wool_delete`: a busy worker's pod deleted through the API (the pod's grace): the kubelet's
//!   SIGTERM drains it, the task's result reaches the client from that pod, then the pod goes.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use serde_json::Value;

use crate::api::{self, sleep, wait_until};
use crate::chart::{self, set, set_json, show_only, COOL, IDLE, POLL};
use crate::engine::{self, Engine};
use crate::fleet::{self, Scaler, POD_PORT};
use crate::kubelet::{Kubelet, Running, Runtime};
use crate::processes::{self, Process};
use crate::timeline::{now, Checks, Timeline};
use crate::{result, Verdict};

/// The namespace of these cases' objects.
const NS: &str = "e2e-wool";
/// The most replicas (the burst's N).
const MOST: i32 = 3;
/// The pods' `terminationGracePeriodSeconds` (the entrypoint's grace is 10 s less).
const POD_GRACE: u64 = 60;
/// The Wool application's venv, made by `scripts/e2e-kubernetes.sh`.
const VENV: &str = "target/venvs/wool-app-e2e";

/// Everything a Wool case runs on: its Deployment and ScaledObject `name`, the scaler, the
/// kubelet of its pods and the client's kubeconfig.
struct App {
    engine: &'static Engine,
    name: &'static str,
    selector: String,
    scaler: Scaler,
    kubelet: Kubelet,
    venv: PathBuf,
    kubeconfig: PathBuf,
}

/// One line the client printed.
#[derive(Debug, Clone)]
struct Said {
    t: f64,
    event: String,
    task: Option<u64>,
    pod: String,
    address: String,
    error: String,
}

fn said(text: &str) -> Vec<Said> {
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .map(|v| Said {
            t: v["t"].as_f64().unwrap_or(0.0),
            event: v["event"].as_str().unwrap_or_default().to_owned(),
            task: v["task"].as_u64(),
            pod: v["pod"].as_str().unwrap_or_default().to_owned(),
            address: v["address"].as_str().unwrap_or_default().to_owned(),
            error: v["error"].as_str().unwrap_or_default().to_owned(),
        })
        .collect()
}

/// Seconds from `from` to `to`, or `-` when one is missing.
fn after(to: Option<f64>, from: Option<f64>) -> String {
    match (to, from) {
        (Some(to), Some(from)) => format!("+{:.1} s", to - from),
        _ => "-".into(),
    }
}

impl App {
    /// The case's objects from the chart (kind `wool`, the pods fleet with deletionCost, the
    /// clients' Role, the scaler's Role), the kubelet of their pods, and a kubeconfig of the
    /// clients' ServiceAccount.
    async fn arrange(engine: &'static Engine, name: &'static str) -> Result<App, String> {
        let setup = &engine.setup;
        let venv = setup.repo(VENV);
        if !venv.join("bin/wool-pod-worker").is_file() {
            return Err(format!(
                "precondition not met: the Wool application's venv ({}) has no wool-pod-worker; \
                 ./scripts/e2e-kubernetes.sh makes it",
                venv.display()
            ));
        }
        let client = &engine.client;
        api::ensure_namespace(client, NS).await?;
        api::ensure_service_account(client, NS, "default").await?;
        api::ensure_service_account(client, NS, "wool-client").await?;
        let scaler = fleet::plain_scaler(engine).await?;
        let selector =
            format!("app.kubernetes.io/name=wool-worker,app.kubernetes.io/instance={name}");
        let values = chart::args([
            &["-f".into(), setup.e2e_values().display().to_string()],
            &set("workers.name", name),
            &set("workers.kind", "wool"),
            &set("workers.image.repository", "registry.invalid/wool-e2e-app"),
            &set("workers.wool.version", "0.15.7"),
            &set_json("workers.wool.imports", r#"["e2e_app"]"#),
            &set("workers.terminationGracePeriodSeconds", POD_GRACE),
            &set("rbac.pods", true),
            &set("rbac.deletionCost", true),
            &set("client.rbac.create", true),
            &set("client.serviceAccountName", "wool-client"),
            &set("scaledObject.triggerType", "external-push"),
            &set("scaledObject.fleet.source", "pods"),
            &set("scaledObject.fleet.port", POD_PORT),
            &set("scaledObject.deletionCost", true),
            &set("scaledObject.scalerAddress", &scaler.address),
            &set("scaledObject.minReplicaCount", 0),
            &set("scaledObject.maxReplicaCount", MOST),
            &set("scaledObject.targetValue", 0.5),
            &set("scaledObject.pollingInterval", POLL),
            &set("scaledObject.cooldownPeriod", COOL),
            &set("scaledObject.idleThreshold", format!("{IDLE}s")),
            &set("scaledObject.maxSweepAge", "1s"),
            &set_json(
                "scaledObject.advanced",
                r#"{"horizontalPodAutoscalerConfig":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":4}}}}"#,
            ),
            &show_only(&[
                "templates/workers.yaml",
                "templates/scaledobject.yaml",
                "templates/rbac.yaml",
            ]),
        ]);
        let applied = chart::render_apply(engine, name, NS, &values).await?;
        println!("    applied: {}", applied.join(" "));
        let token = api::token(client, NS, "wool-client").await?;
        let kubeconfig = engine.tmp.join(format!("{name}-client.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            engine::kubeconfig_text(engine.api_port, "wool-client", &token, Some(NS)),
        )
        .map_err(|e| format!("{}: {e}", kubeconfig.display()))?;
        let kubelet = Kubelet::start(
            client,
            NS,
            &selector,
            Runtime {
                venv: venv.clone(),
                env: vec![("PYTHONPATH".into(), app_path(engine))],
                namespace: engine.aggregation_ip.is_some(),
            },
        );
        let ready = api::wait_ready(client, NS, name, Duration::from_secs(60.max(10 * POLL))).await;
        if !ready {
            return Err(format!(
                "precondition not met: ScaledObject {NS}/{name} not Ready within {} s",
                60.max(10 * POLL)
            ));
        }
        Ok(App {
            engine,
            name,
            selector,
            scaler,
            kubelet,
            venv,
            kubeconfig,
        })
    }

    /// Starts the client as process `wool-client-LABEL` with `plan`'s flags.
    fn client(&self, label: &str, plan: &[String]) -> Result<Process, String> {
        processes::start(
            &format!("wool-client-{label}"),
            Command::new(self.venv.join("bin/python"))
                .arg(self.engine.setup.repo("tests/kubernetes/wool/client.py"))
                .args(["--scaler", &self.scaler.address])
                .args(["--namespace", NS, "--name", self.name])
                .args(["--selector", &self.selector])
                .args(plan)
                .env("KUBECONFIG", &self.kubeconfig)
                .env("PYTHONPATH", app_path(self.engine))
                .current_dir(&self.engine.tmp),
        )
    }

    /// Waits for the Deployment at 0 with none of its pods left and every worker exited;
    /// whether that came within `limit`.
    async fn wait_zero(&self, limit: Duration) -> bool {
        let client = &self.engine.client;
        wait_until(limit, || async {
            api::replicas(client, NS, self.name).await == Some(0)
                && api::pod_count(client, NS, &self.selector).await == 0
                && self.kubelet.pods().iter().all(|p| p.exited.is_some())
        })
        .await
    }
}

/// The Wool application's folder, on the workers' and the client's `PYTHONPATH`.
fn app_path(engine: &Engine) -> String {
    engine
        .setup
        .repo("tests/kubernetes/wool")
        .display()
        .to_string()
}

/// Waits for `process` to exit, up to `limit`; its exit status, or `None`.
async fn wait_exit(process: &Process, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = now() + limit.as_secs_f64();
    loop {
        if let Some(status) = processes::status(process.pid) {
            return Some(status);
        }
        if now() >= deadline {
            return None;
        }
        sleep(0.2).await;
    }
}

/// What a stopping worker said at its SIGTERM: the tasks it had in flight (its entrypoint logs
/// "stop begun by SIGTERM: grace G s, K in flight").
fn in_flight_at_stop(pod: &Running) -> Option<u64> {
    let line = processes::first_logged(&[&pod.process.log], &["stop begun by", "in flight"])?;
    let before = line.split(" in flight").next()?;
    before.rsplit(", ").next()?.trim().parse().ok()
}

/// How long a run may take to return to 0 after its last result: the workers turn idle after
/// `IDLE`, KEDA sees it within a poll (or ten, on a busy machine), waits `COOL`, then each
/// worker stops (Wool's stop: up to 10 s beyond its empty drain).
fn zero_limit() -> Duration {
    Duration::from_secs(IDLE + COOL + 10 * POLL + 60)
}

/// How long the fleet may take to grow to N during the burst: each pod's worker is a Python
/// process that imports Wool (seconds on a busy machine) after the HPA's sync.
fn grow_limit() -> Duration {
    Duration::from_secs(180)
}

/// 0 → N → 0 with Wool's own workers, WOOL_RUNS times.
pub async fn cycle(engine: &'static Engine) -> Verdict {
    let name = "woolcycle";
    let runs: u64 = std::env::var("WOOL_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    println!("\n== a Wool application 0 -> {MOST} -> 0 ({runs} runs): Wool 0.15.7's workers through wool-pod-worker, its client with KubernetesDiscovery and DemandLoadBalancer");
    let app = App::arrange(engine, name).await?;
    let mut checks = Checks::new("wool_cycle", format!("{NS}/{name}"));
    if !app.wait_zero(zero_limit()).await {
        return Err(format!(
            "case wool_cycle: precondition not met: {NS}/{name} not at 0 before the first run"
        ));
    }
    let mut lost = 0;
    let mut summary = Vec::new();
    for n in 1..=runs {
        let line = run_cycle(&app, n, &mut checks, &mut lost).await?;
        result(format!("wool_cycle run {n}: {line}"));
        summary.push(line);
    }
    checks.check(
        lost == 0,
        format!("0 tasks lost in {runs} runs ({lost} lost)"),
    );
    for (n, line) in summary.iter().enumerate() {
        checks.evidence(&format!("run {}: {line}", n + 1));
    }
    api::delete_scaled_object(&engine.client, NS, name, true).await;
    checks.verdict()
}

/// One 0 → N → 0 run; its summary line.
async fn run_cycle(
    app: &App,
    n: u64,
    checks: &mut Checks,
    lost: &mut usize,
) -> Result<String, String> {
    let engine = app.engine;
    let t0 = now();
    let mut timeline = Timeline::start(&engine.client, NS, app.name, &app.scaler.metrics, t0);
    let grown = engine.tmp.join(format!("{}-grown-{n}", app.name));
    let plan: Vec<String> = [
        "--first", "3", "--burst", "40", "--task", "12", "--every", "2", "--until",
    ]
    .iter()
    .map(|s| s.to_string())
    .chain([grown.display().to_string()])
    .collect();
    let client = app.client(&format!("{n}"), &plan)?;
    timeline.mark(format!(
        "run {n}: client started (a task of 3 s, then a burst of 12 s tasks, one every 2 s)"
    ));
    // The burst goes on until the fleet has grown to N and the client found every pod, plus
    // three more dispatches so that each new worker gets work.
    let found_all = wait_until(grow_limit(), || async {
        let seen = said(&std::fs::read_to_string(&client.out).unwrap_or_default());
        let ready = app
            .kubelet
            .pods()
            .iter()
            .filter(|p| p.ready_at.is_some() && p.sigterm_at.is_none())
            .filter(|p| {
                seen.iter()
                    .any(|s| s.event == "discovered" && s.address == format!("{}:{POD_PORT}", p.ip))
            })
            .count();
        ready >= MOST as usize || processes::status(client.pid).is_some()
    })
    .await;
    sleep(6.0).await;
    let _ = std::fs::write(&grown, b"");
    // The burst's last tasks (12 s) end after at most one more dispatch.
    let status = wait_exit(&client, grow_limit()).await;
    let events = said(&std::fs::read_to_string(&client.out).unwrap_or_default());
    let dispatches: Vec<&Said> = events.iter().filter(|s| s.event == "dispatch").collect();
    let results: Vec<&Said> = events.iter().filter(|s| s.event == "result").collect();
    let errors: Vec<&Said> = events.iter().filter(|s| s.event == "error").collect();
    let last_dispatch = dispatches.iter().map(|s| s.t).fold(0.0, f64::max);
    let last_result = results.iter().map(|s| s.t).fold(0.0, f64::max);
    let at_zero = app.wait_zero(zero_limit()).await;
    // One more sample, at 0.
    sleep(1.5).await;
    timeline.stop();
    let mut text = timeline.render();
    text.push_str(&app.kubelet.render(t0));
    for s in &events {
        text.push_str(&format!(
            "    {:7.1} client {} {}{}{}{}\n",
            s.t - t0,
            s.event,
            s.task.map(|t| format!("task {t} ")).unwrap_or_default(),
            s.pod,
            s.address,
            s.error
        ));
    }
    print!("{text}");
    // The timeline: dispatch -> activation -> pod Ready -> discovered -> first result.
    let first_dispatch = dispatches.iter().find(|s| s.task == Some(0)).map(|s| s.t);
    let first = results.iter().find(|s| s.task == Some(0));
    // Activation: the first sample of replicas above 0, or the first pod's binding if that came
    // first (the samples are a second apart).
    let bound = first_dispatch.and_then(|d| {
        app.kubelet
            .events()
            .iter()
            .filter(|e| e.at >= d && e.what.starts_with("bound"))
            .map(|e| e.at)
            .reduce(f64::min)
    });
    let activation = first_dispatch
        .and_then(|d| timeline.first_time(d, |r| r > 0))
        .into_iter()
        .chain(bound)
        .reduce(f64::min);
    let pod_ready = first_dispatch.and_then(|d| {
        app.kubelet
            .pods()
            .iter()
            .filter_map(|p| p.ready_at)
            .filter(|t| *t >= d)
            .reduce(f64::min)
    });
    let discovered = first_dispatch.and_then(|d| {
        events
            .iter()
            .filter(|s| s.event == "discovered" && s.t >= d)
            .map(|s| s.t)
            .reduce(f64::min)
    });
    let zero = timeline.first_time(last_result, |r| r == 0);
    let run_pods: Vec<Running> = app
        .kubelet
        .pods()
        .into_iter()
        .filter(|p| p.ready_at.is_some_and(|t| t >= t0))
        .collect();
    let gone = app
        .kubelet
        .events()
        .iter()
        .filter(|e| e.at >= t0 && e.what.starts_with("removed from the API"))
        .map(|e| e.at)
        .reduce(f64::max);
    let most = timeline.max_between(t0, last_result);
    let used: std::collections::BTreeSet<&str> = results.iter().map(|s| s.pod.as_str()).collect();
    let line = format!(
        "dispatch -> activation {} -> pod Ready {} -> discovered {} -> first result {}; \
         {} tasks on {} pods, most replicas {most}; last result -> 0 replicas {}, pods gone {}; \
         {} results, {} errors",
        after(activation, first_dispatch),
        after(pod_ready, first_dispatch),
        after(discovered, first_dispatch),
        after(first.map(|s| s.t), first_dispatch),
        dispatches.len(),
        used.len(),
        after(zero, Some(last_result)),
        after(gone, Some(last_result)),
        results.len(),
        errors.len(),
    );
    println!("    run {n}: {line}");
    checks.evidence(&text);
    *lost += dispatches.len().saturating_sub(results.len());
    checks.check(
        status.is_some_and(|s| s.success())
            && errors.is_empty()
            && results.len() == dispatches.len(),
        format!(
            "run {n}: every task returned its result ({} of {}; client {status:?}{})",
            results.len(),
            dispatches.len(),
            errors
                .first()
                .map(|e| format!("; {}", e.error))
                .unwrap_or_default()
        ),
    );
    checks.check(
        activation.is_some_and(|a| Some(a) >= first_dispatch),
        format!(
            "run {n}: the first task's demand activated the Deployment from 0 ({})",
            after(activation, first_dispatch)
        ),
    );
    let first_pod_ip = first.and_then(|f| app.kubelet.pod(&f.pod)).map(|p| p.ip);
    checks.check(
        first.is_some_and(|f| {
            first_pod_ip.as_ref().is_some_and(|ip| {
                events.iter().any(|s| {
                    s.event == "discovered" && s.address == format!("{ip}:{POD_PORT}") && s.t <= f.t
                })
            })
        }),
        format!(
            "run {n}: the first task completed on a pod the client's discovery found ({} at {})",
            first.map_or("-", |f| f.pod.as_str()),
            first_pod_ip.as_deref().unwrap_or("-")
        ),
    );
    if !found_all {
        checks.precondition(format!(
            "run {n}: {MOST} worker pods were not Ready and discovered within {} s of the run's start",
            grow_limit().as_secs()
        ));
    }
    checks.check(
        most == MOST && used.len() == MOST as usize,
        format!("run {n}: the burst scaled the Deployment to {MOST} and its tasks ran on {MOST} pods (most replicas {most}, {} pods)", used.len()),
    );
    // Busy workers kept to the end: after the last dispatch no worker was stopped with a task
    // in flight.
    let mut stopped_busy = Vec::new();
    for pod in &run_pods {
        let Some(term) = pod.sigterm_at else { continue };
        let in_flight = in_flight_at_stop(pod);
        if term >= last_dispatch && in_flight != Some(0) {
            stopped_busy.push(format!("{} ({in_flight:?} in flight)", pod.name));
        }
    }
    checks.check(
        stopped_busy.is_empty(),
        format!(
            "run {n}: no worker stopped with a task in flight after the last dispatch (stopped busy: {})",
            if stopped_busy.is_empty() { "none".into() } else { stopped_busy.join(", ") }
        ),
    );
    let exits: Vec<String> = run_pods
        .iter()
        .filter(|p| !p.exited.is_some_and(|(_, s)| s.success()))
        .map(|p| format!("{} {:?}", p.name, p.exited.map(|(_, s)| s)))
        .collect();
    checks.check(
        at_zero && exits.is_empty(),
        format!(
            "run {n}: back to 0 replicas, every pod gone and every worker exited 0 within {} s of the last result (not exited 0: {})",
            zero_limit().as_secs(),
            if exits.is_empty() { "none".into() } else { exits.join(", ") }
        ),
    );
    Ok(line)
}

/// A busy worker's pod deleted through the API drains its task.
pub async fn delete(engine: &'static Engine) -> Verdict {
    let name = "wooldelete";
    let task = 15.0;
    println!(
        "\n== a busy Wool worker's pod deleted (grace {POD_GRACE} s): SIGTERM drains its task"
    );
    let app = App::arrange(engine, name).await?;
    let mut checks = Checks::new("wool_delete", format!("{NS}/{name}"));
    if !app.wait_zero(zero_limit()).await {
        return Err(format!(
            "case wool_delete: precondition not met: {NS}/{name} not at 0 at the start"
        ));
    }
    let t0 = now();
    let client = app.client("delete", &["--first".into(), task.to_string()])?;
    // The pod whose worker runs the task (from zero: the first pod).
    let mut busy: Option<Running> = None;
    wait_until(grow_limit(), || {
        let found = app
            .kubelet
            .pods()
            .into_iter()
            .find(|p| processes::logged(&[&p.process.log], &["nap started"]));
        let done = found.is_some();
        busy = found;
        async move { done }
    })
    .await;
    let Some(pod) = busy else {
        return Err(format!(
            "case wool_delete: precondition not met: no worker started the task within {} s",
            grow_limit().as_secs()
        ));
    };
    let pods: kube::Api<Pod> = kube::Api::namespaced(engine.client.clone(), NS);
    let deleted_at = now();
    pods.delete(&pod.name, &DeleteParams::default())
        .await
        .map_err(|e| format!("case wool_delete: deleting pod {NS}/{}: {e}", pod.name))?;
    println!(
        "    {} pod {} deleted while its task runs",
        crate::clock(),
        pod.name
    );
    let status = wait_exit(&client, Duration::from_secs(POD_GRACE + 60)).await;
    let events = said(&std::fs::read_to_string(&client.out).unwrap_or_default());
    let answer = events
        .iter()
        .find(|s| s.event == "result" && s.task == Some(0));
    let error = events.iter().find(|s| s.event == "error");
    wait_until(Duration::from_secs(30), || async {
        app.kubelet.pod(&pod.name).is_some_and(|p| p.removed)
    })
    .await;
    let stopped = app.kubelet.pod(&pod.name).unwrap_or(pod.clone());
    let log = std::fs::read_to_string(&stopped.process.log).unwrap_or_default();
    let mut text = app.kubelet.render(t0);
    for line in log.lines() {
        text.push_str(&format!("    worker {}: {line}\n", pod.name));
    }
    print!("{text}");
    checks.evidence(&text);
    checks.check(
        stopped.sigterm_at.is_some_and(|t| t >= deleted_at),
        "the deletion sent the worker SIGTERM",
    );
    checks.check(
        in_flight_at_stop(&stopped) == Some(1),
        format!(
            "with its task in flight (the worker said {:?} in flight)",
            in_flight_at_stop(&stopped)
        ),
    );
    checks.check(
        status.is_some_and(|s| s.success())
            && error.is_none()
            && answer.is_some_and(|a| a.pod == pod.name),
        format!(
            "the task's result reached the client from pod {} ({}; client {status:?})",
            pod.name,
            answer.map_or_else(
                || error.map_or("no answer".into(), |e| e.error.clone()),
                |a| format!("from {}", a.pod)
            )
        ),
    );
    checks.check(
        processes::holds_in_order(
            &log.replace('\n', " "),
            &["stop begun by SIGTERM", "nap ended", "drained in"],
        ),
        "the worker's log: stop begun by SIGTERM, then the task's end, then drained",
    );
    checks.check(
        stopped
            .exited
            .is_some_and(|(at, s)| s.success() && answer.is_some_and(|a| at >= a.t - 1.0))
            && stopped.removed,
        format!(
            "the worker exited 0 after the result and the pod was removed then ({:?})",
            stopped.exited.map(|(_, s)| s)
        ),
    );
    result(format!(
        "wool_delete: pod {} deleted {:.1} s into its task of {task} s; result from {}; worker {:?}",
        pod.name,
        deleted_at - t0,
        answer.map_or("-", |a| a.pod.as_str()),
        stopped.exited.map(|(_, s)| s)
    ));
    api::delete_scaled_object(&engine.client, NS, name, true).await;
    let _ = api::scale(&engine.client, NS, name, 0).await;
    checks.verdict()
}
