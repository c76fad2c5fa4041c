//! The cases whose fleet is pods (`podSelector`): the scale-down that keeps the busy worker
//! (`scaledown`, deletionCost), the pod source's bounds (`podbounds`) and the deletion-cost
//! patch rate under churn (`churn`, a measurement). No kubelet runs: the cases play its part
//! for the pods' status, each pod given the address of a real wool-worker.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;

use crate::api::{self, sleep, wait_until, MARKED};
use crate::chart::{self, set, set_json, show_only, targets, IDLE, POLL};
use crate::engine::{self, Engine};
use crate::fleet::{self, POD_PORT};
use crate::processes;
use crate::timeline::{now, served, Checks};
use crate::{result, Verdict};

/// A small random source for the runs' choices (which pod gets the busy worker, which workers
/// the others).
struct Dice(u64);

impl Dice {
    fn new() -> Self {
        Dice((now() * 1e6) as u64 ^ u64::from(std::process::id()) << 32 | 1)
    }

    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            items.swap(i, self.below(i + 1));
        }
    }
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// How long the busy worker's task lasts in each run (s).
fn task_seconds() -> u64 {
    env_number("SD_TASK", 15)
}

/// The HPA's scale-down stabilization window in each run (s).
fn window_seconds() -> u64 {
    env_number("SD_WINDOW", 8)
}

/// What one scale-down run saw.
#[derive(Debug, Default)]
struct Run {
    /// The pods left, deleted and marked (deletion cost -2147483648 seen), by name.
    kept: Vec<String>,
    deleted: Vec<String>,
    marked: Vec<String>,
    /// The busy worker's pod.
    busy: String,
    /// Seconds from the ScaledObject to the scale-down's end.
    took: f64,
    /// The unmark run: the pod that turned busy, its cost when marked and then.
    unmark: Option<(String, String, String)>,
}

impl Run {
    fn busy_kept(&self) -> bool {
        self.kept.contains(&self.busy)
    }
}

fn names(pods: &[String]) -> String {
    if pods.is_empty() {
        "none".into()
    } else {
        pods.join(" ")
    }
}

/// The arrangement of the scaledown runs.
struct ScaleDown<'a> {
    engine: &'a Engine,
    ns: &'a str,
    name: &'a str,
    /// The scaler's address (KEDA calls it).
    scaler: String,
    /// Every pod worker's address, and the busy one's.
    workers: Vec<String>,
    busy: String,
    dice: Dice,
    /// The pods the last run kept.
    last_kept: Vec<String>,
    /// Each run's lines: its pods, marks, deletions and the busy pod.
    lines: String,
    /// When the last run's HPA was gone.
    hpa_gone_at: f64,
}

impl ScaleDown<'_> {
    /// A run that could not be made: the case, the object and the runs so far.
    fn failed(&self, error: String) -> String {
        format!(
            "case scaledown on {}/{}: {error}\nthe runs so far:\n{}",
            self.ns, self.name, self.lines
        )
    }

    /// Deletes the ScaledObject and the HPA KEDA made for it (no garbage collector runs here),
    /// waiting until both are gone; notes when the HPA went.
    async fn retire_scaled_object(&mut self) {
        let (client, ns, name) = (&self.engine.client, self.ns, self.name);
        api::delete_scaled_object(client, ns, name, true).await;
        let hpas: kube::Api<k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler> =
            kube::Api::namespaced(client.clone(), ns);
        let hpa = format!("keda-hpa-{name}");
        if hpas.delete(&hpa, &Default::default()).await.is_ok() {
            wait_until(Duration::from_secs(60), || async {
                hpas.get_opt(&hpa).await.is_ok_and(|h| h.is_none())
            })
            .await;
            self.hpa_gone_at = now();
        }
    }

    fn say(&mut self, line: String) {
        println!("    {line}");
        let _ = writeln!(self.lines, "    {line}");
    }

    /// One run: the Deployment at 3 pods, each given a worker (the busy one a pod just made,
    /// never one the last run kept), one long task on the busy worker, then the ScaledObject
    /// (podSelector, deletionCost as asked) and KEDA + the HPA take it to 1. With `unmark`
    /// (a worker's address), a marked pod's worker is made busy too: it must be unmarked, and
    /// the HPA holds 3 (minReplicaCount 3) until the unmark is seen.
    async fn run(&mut self, label: &str, cost: bool, unmark: Option<&str>) -> Result<Run, String> {
        let (client, ns, name) = (&self.engine.client, self.ns, self.name);
        let selector = format!("app.kubernetes.io/instance={name}");
        self.retire_scaled_object().await;
        api::scale(client, ns, name, 3).await?;
        // The ReplicaSet controller makes them within a sync or two.
        let made = wait_until(Duration::from_secs(60), || async {
            api::pod_count(client, ns, &selector).await >= 3
        })
        .await;
        if !made {
            return Err(format!(
                "precondition not met: 3 pods of {ns}/{name} were not made within 60 s"
            ));
        }
        let pods = api::pods(client, ns, &selector).await;
        if pods.len() < 3 {
            return Err(format!(
                "precondition not met: 3 live pods of {ns}/{name} expected, found {pods:?}"
            ));
        }
        let pods = pods[..3].to_vec();
        // The busy worker goes to one of the pods just made (never the pod kept by the last
        // run): Kubernetes' own ranking deletes the newest first, so only the marks can keep it.
        let mut fresh: Vec<&String> = pods
            .iter()
            .filter(|p| !self.last_kept.contains(p))
            .collect();
        if fresh.is_empty() {
            fresh = pods.iter().collect();
        }
        let busy_pod = fresh[self.dice.below(fresh.len())].clone();
        let mut others: Vec<String> = self
            .workers
            .iter()
            .filter(|w| **w != self.busy)
            .cloned()
            .collect();
        self.dice.shuffle(&mut others);
        let mut line = format!("run {label} (deletionCost {cost}):");
        let mut run = Run::default();
        for pod in &pods {
            let ip = if *pod == busy_pod {
                self.busy.clone()
            } else {
                others.remove(0)
            };
            api::play_kubelet(client, ns, pod, &ip).await?;
            let _ = write!(line, " {pod}={ip}");
            if ip == self.busy {
                run.busy = pod.clone();
                line.push_str("(busy)");
            }
        }
        self.say(line);
        // The unmark run's tasks last twice as long: the HPA controller may keep an earlier
        // run's recommendations for the same HPA name and scale down within a second of the
        // ScaledObject, before a task could be dispatched on the marked pod.
        let (task, min) = if unmark.is_some() {
            (2 * task_seconds(), 3)
        } else {
            (task_seconds(), 1)
        };
        let busy_target = format!("{}:{POD_PORT}", self.busy);
        let burst = fleet::burst(
            self.engine,
            &format!("{name}-{label}"),
            &busy_target,
            1,
            task as f64,
        )?;
        sleep(1.0).await;
        let values = chart::args([
            &[
                "-f".into(),
                self.engine.setup.e2e_values().display().to_string(),
            ],
            &set("workers.name", name),
            &set("rbac.pods", true),
            &set("rbac.deletionCost", true),
            &set("scaledObject.fleet.source", "pods"),
            &set("scaledObject.fleet.podSelector", &selector),
            &set("scaledObject.fleet.port", POD_PORT),
            &set("scaledObject.deletionCost", cost),
            &set("scaledObject.scalerAddress", &self.scaler),
            &set("scaledObject.minReplicaCount", min),
            &set("scaledObject.maxReplicaCount", 3),
            &set("scaledObject.pollingInterval", POLL),
            &set("scaledObject.idleThreshold", format!("{IDLE}s")),
            &set("scaledObject.maxSweepAge", "1s"),
            &set_json(
                "scaledObject.advanced",
                format!(
                    r#"{{"horizontalPodAutoscalerConfig":{{"behavior":{{"scaleDown":{{"stabilizationWindowSeconds":{}}}}}}}}}"#,
                    window_seconds()
                ),
            ),
            &show_only(&["templates/scaledobject.yaml"]),
        ]);
        // The HPA controller keeps a deleted HPA's recommendations until it next syncs that
        // name: a new HPA of the same name made before then may scale down at once, on the last
        // run's recommendation, before any mark could matter. Two sync periods after the old
        // one was gone, it has forgotten them.
        let forgotten = self.hpa_gone_at + (2 * engine::HPA_SYNC_SECONDS + 1) as f64;
        if now() < forgotten {
            sleep(forgotten - now()).await;
        }
        chart::render_apply(self.engine, name, ns, &values).await?;
        let applied = now();
        let mut second_burst = None;
        if let Some(unmark_ip) = unmark {
            let mut marked_pod = String::new();
            for pod in &pods {
                if api::pod_ip(client, ns, pod).await == unmark_ip {
                    marked_pod = pod.clone();
                }
            }
            // Marks come with the scaler's sweeps: within a few polls.
            let limit = Duration::from_secs(30.max(10 * POLL));
            wait_until(limit, || async {
                api::cost_of(client, ns, &marked_pod).await == MARKED
            })
            .await;
            let seen = api::cost_of(client, ns, &marked_pod).await;
            self.say(format!(
                "+{:.1} s: {marked_pod} marked ({seen}); a task dispatched on its worker",
                now() - applied
            ));
            let target = format!("{unmark_ip}:{POD_PORT}");
            second_burst = Some(fleet::burst(
                self.engine,
                &format!("{name}-{label}-unmark"),
                &target,
                1,
                task as f64,
            )?);
            wait_until(limit, || async {
                api::cost_of(client, ns, &marked_pod).await == "-"
            })
            .await;
            let after = api::cost_of(client, ns, &marked_pod).await;
            self.say(format!(
                "+{:.1} s: {marked_pod}'s annotation now: {after}; minReplicaCount 3 -> 1",
                now() - applied
            ));
            api::patch_scaled_object(
                client,
                ns,
                name,
                serde_json::json!({"spec": {"minReplicaCount": 1}}),
            )
            .await?;
            run.unmark = Some((marked_pod, seen, after));
        }
        // Sample the marks until the scale-down is done (the HPA's window, then the ReplicaSet).
        let want = if unmark.is_some() { 2 } else { 1 };
        let deadline = now() + (window_seconds() + 40) as f64;
        while now() < deadline {
            for pod in &pods {
                if !run.marked.contains(pod) && api::cost_of(client, ns, pod).await == MARKED {
                    run.marked.push(pod.clone());
                }
            }
            let replicas = api::replicas(client, ns, name).await;
            if replicas == Some(want)
                && api::pods(client, ns, &selector).await.len() == want as usize
            {
                break;
            }
            sleep(0.5).await;
        }
        let done = now();
        run.took = done - applied;
        run.kept = api::pods(client, ns, &selector).await;
        run.deleted = pods
            .iter()
            .filter(|p| !run.kept.contains(p))
            .cloned()
            .collect();
        let replicas = api::replicas(client, ns, name).await;
        self.say(format!(
            "+{:.1} s after the ScaledObject: replicas {}; marked: {}; deleted: {}; kept: {} (busy pod {} {})",
            done - applied,
            replicas.map_or("?".into(), |r| r.to_string()),
            names(&run.marked),
            names(&run.deleted),
            names(&run.kept),
            run.busy,
            if run.busy_kept() { "kept" } else { "DELETED" }
        ));
        // Gone while the tasks finish, so the next run's HPA is a new one.
        self.retire_scaled_object().await;
        burst.wait().await;
        if let Some(second) = second_burst {
            second.wait().await;
        }
        self.last_kept = run.kept.clone();
        Ok(run)
    }
}

/// Scale-down that keeps the busy worker: pods as the fleet (podSelector), deletionCost on. A
/// Deployment of 3 pods, one worker busy with a long task, two idle; KEDA and the HPA take it
/// to one. The pods deleted must be the idle workers' and the busy one kept, in each of
/// SCALEDOWN_RUNS runs (default 5); the same with the option off reports what Kubernetes' own
/// ranking chose. Then a marked pod that turns busy is unmarked, and the busy worker, sent
/// SIGTERM, drains its task.
pub async fn scaledown(engine: &'static Engine) -> Verdict {
    let (ns, name) = ("e2e-pods", "scaledown");
    let runs = env_number("SCALEDOWN_RUNS", 5);
    println!("\n== scale-down keeps the busy worker (podSelector + deletionCost; {runs} runs, then {runs} with the option off)");
    api::ensure_namespace(&engine.client, ns).await?;
    api::ensure_service_account(&engine.client, ns, "default").await?;
    let values = chart::args([
        &["-f".into(), engine.setup.e2e_values().display().to_string()],
        &set("workers.name", name),
        &set("workers.replicas", 0),
        &set("rbac.pods", true),
        &set("scaledObject.fleet.source", "pods"),
        &set("scaledObject.fleet.podSelector", "x=y"),
        &show_only(&["templates/workers.yaml"]),
    ]);
    chart::render_apply(engine, name, ns, &values).await?;
    let scaler = fleet::plain_scaler(engine).await?;
    let workers = fleet::pod_workers(engine, 3)?[..3].to_vec();
    let busy = workers[0].clone();
    sleep((IDLE + 1) as f64).await;
    let mut arrangement = ScaleDown {
        engine,
        ns,
        name,
        scaler: scaler.address.clone(),
        workers: workers.clone(),
        busy: busy.clone(),
        dice: Dice::new(),
        last_kept: Vec::new(),
        lines: String::new(),
        hpa_gone_at: 0.0,
    };
    let mut checks = Checks::new("scaledown", format!("{ns}/{name}"));
    let mut ok = 0;
    for n in 1..=runs {
        let run = match arrangement.run(&n.to_string(), true, None).await {
            Ok(run) => run,
            Err(e) => return Err(arrangement.failed(e)),
        };
        if run.kept.len() == 1 && run.busy_kept() && run.deleted.len() == 2 {
            ok += 1;
        }
        if run.marked.is_empty() {
            checks.precondition(format!(
                "run {n}: no pod was seen marked before the scale-down (+{:.1} s after the \
                 ScaledObject): the HPA scaled down before the marks could decide",
                run.took
            ));
        }
        result(format!(
            "scaledown run {n} (deletionCost on): marked {}; deleted {}; busy pod {} {}",
            names(&run.marked),
            names(&run.deleted),
            run.busy,
            if run.busy_kept() { "kept" } else { "DELETED" }
        ));
    }
    checks.check(
        ok == runs,
        format!(
            "the idle workers' pods deleted and the busy worker's pod kept, {ok} of {runs} runs"
        ),
    );
    let mut off_kept = 0;
    for n in 1..=runs {
        let run = match arrangement.run(&format!("off-{n}"), false, None).await {
            Ok(run) => run,
            Err(e) => return Err(arrangement.failed(e)),
        };
        if run.busy_kept() {
            off_kept += 1;
        }
        result(format!(
            "scaledown run off-{n} (deletionCost off): Kubernetes deleted {}; busy pod {} {}",
            names(&run.deleted),
            run.busy,
            if run.busy_kept() { "kept" } else { "deleted" }
        ));
    }
    println!("    with the option off, Kubernetes' ranking kept the busy pod in {off_kept} of {runs} runs (reported, not asserted)");
    result(format!(
        "scaledown: option off kept the busy pod in {off_kept} of {runs} runs"
    ));
    // A marked pod that turns busy is unmarked before the scale-down (it then stays: 2 busy).
    let run = match arrangement.run("unmark", true, Some(&workers[1])).await {
        Ok(run) => run,
        Err(e) => return Err(arrangement.failed(e)),
    };
    let (pod, before, after) = run.unmark.clone().unwrap_or_default();
    checks.check(
        before == MARKED && after == "-",
        format!("a marked pod that turns busy is unmarked (annotation {before}, then {after})"),
    );
    checks.check(
        run.kept.contains(&pod),
        format!("and kept at the scale-down (kept: {})", names(&run.kept)),
    );
    // The race marking cannot close is closed by the drain: SIGTERM to the busy worker while
    // its task runs; the task finishes, then the worker exits.
    let drain_task = 6.0;
    let burst = fleet::burst(
        engine,
        &format!("{name}-drain"),
        &format!("{busy}:{POD_PORT}"),
        1,
        drain_task,
    )?;
    sleep(2.0).await;
    let worker = fleet::pod_worker_process(&busy).ok_or("the busy pod worker's process")?;
    processes::signal(worker.pid, libc::SIGTERM);
    let status = burst.wait().await;
    checks.check(
        status.success(),
        format!(
            "the busy worker sent SIGTERM drains: its task completes (burst {status}: {})",
            burst.last_line()
        ),
    );
    // It exits once drained: within a few task lengths.
    let exited = processes::wait_exit(
        worker.pid,
        Duration::from_secs_f64(20f64.max(3.0 * drain_task)),
    );
    checks.check(exited, "and then it exits");
    let patches = std::fs::read_to_string(&scaler.process.log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains("pod deletion cost written"))
        .count();
    println!("    the scaler wrote {patches} deletion-cost patches in this case");
    checks.evidence(&arrangement.lines);
    checks.verdict()
}

/// A Deployment NAME of its own (replicas 0) and a ScaledObject scaling it, rendered from the
/// chart with `extra`, served by the scaler at `scaler`.
async fn scaled_deployment(
    engine: &Engine,
    ns: &str,
    name: &str,
    scaler: &str,
    extra: &[String],
) -> Result<(), String> {
    api::create::<Deployment>(
        &engine.client,
        ns,
        serde_json::json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "labels": {"app": name}},
            "spec": {"replicas": 0, "selector": {"matchLabels": {"app": name}},
                     "template": {"metadata": {"labels": {"app": name}},
                                  "spec": {"containers": [{"name": "none", "image": "none"}]}}}
        }),
    )
    .await?;
    let values = chart::args([
        &["-f".into(), engine.setup.e2e_values().display().to_string()],
        &set("workers.name", name),
        &set("rbac.pods", true),
        &set("scaledObject.scalerAddress", scaler),
        &set("scaledObject.pollingInterval", POLL),
        &set("scaledObject.scaleTargetName", name),
        extra,
        &show_only(&["templates/scaledobject.yaml"]),
    ]);
    chart::render_apply(engine, name, ns, &values)
        .await
        .map(|_| ())
}

/// A bare pod `ns/name` labelled `fleet=FLEET` whose status says it runs at `ip`.
async fn fleet_pod(
    engine: &Engine,
    ns: &str,
    name: &str,
    fleet: &str,
    ip: &str,
) -> Result<(), String> {
    api::create::<Pod>(
        &engine.client,
        ns,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"fleet": fleet}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": name, "image": "none"}]}
        }),
    )
    .await?;
    api::play_kubelet(&engine.client, ns, name, ip).await
}

/// The pod source's bounds, each past its limit on one scaler while another fleet of the same
/// scaler keeps serving, each error naming its cause in the scaler's answer (its log shows it):
/// a watch that fails (the scaler's ServiceAccount has no Role yet: forbidden) and is started
/// again with a backoff, serving once the chart's Role is bound; a selector picking more pods
/// than --max-pods-per-fleet (2 here); an API server that is gone (a second scaler whose
/// kubeconfig names a port nothing listens on).
pub async fn podbounds(engine: &'static Engine) -> Verdict {
    let (ns, account) = ("e2e-bounds", "bounds-scaler");
    println!(
        "\n== pod source bounds (a failing watch restarted, too many pods, the API server gone)"
    );
    let client = &engine.client;
    api::ensure_namespace(client, ns).await?;
    api::ensure_service_account(client, ns, "default").await?;
    api::ensure_service_account(client, ns, account).await?;
    let token = api::token(client, ns, account).await?;
    let bounds_config = engine.tmp.join("bounds.kubeconfig");
    let gone_config = engine.tmp.join("gone.kubeconfig");
    let write = |path: &std::path::Path, port: u16| {
        std::fs::write(path, engine::kubeconfig_text(port, "sa", &token, Some(ns)))
            .map_err(|e| e.to_string())
    };
    write(&bounds_config, engine.api_port)?;
    write(&gone_config, processes::free_port())?;
    let max_pods = ["--max-pods-per-fleet".to_string(), "2".to_string()];
    let bounds = fleet::start_scaler(
        engine,
        "bounds",
        &max_pods,
        &[("KUBECONFIG", &bounds_config)],
    )
    .await?;
    let gone = fleet::start_scaler(engine, "gone", &[], &[("KUBECONFIG", &gone_config)]).await?;
    let workers = fleet::pod_workers(engine, 3)?;
    // Pods without a Deployment: 2 for a small fleet, 3 for a big one.
    for (i, pod) in ["small-0", "small-1", "big-0", "big-1", "big-2"]
        .iter()
        .enumerate()
    {
        let fleet = pod.split('-').next().unwrap();
        fleet_pod(engine, ns, pod, fleet, &workers[1 + i % 2]).await?;
    }
    let pods_of = |selector: &str| {
        chart::args([
            &set("scaledObject.fleet.source", "pods"),
            &set("scaledObject.fleet.podSelector", selector),
        ])
    };
    let target = |ip: &str| targets(&[&format!("{ip}:{POD_PORT}")]).to_vec();
    scaled_deployment(
        engine,
        ns,
        "targets-b",
        &bounds.address,
        &target(&workers[1]),
    )
    .await?;
    scaled_deployment(
        engine,
        ns,
        "small",
        &bounds.address,
        &pods_of("fleet=small"),
    )
    .await?;
    scaled_deployment(engine, ns, "targets-g", &gone.address, &target(&workers[2])).await?;
    scaled_deployment(engine, ns, "gone", &gone.address, &pods_of("fleet=small")).await?;
    let mut checks = Checks::new("podbounds", format!("{ns}/small, {ns}/big, {ns}/gone"));
    let (blog, glog) = (&bounds.process.log, &gone.process.log);
    let forbidden = [
        "watching the pods of selector",
        "fleet=small",
        " fails",
        "forbidden",
    ];
    // KEDA asks within a poll or two; the watch fails at once.
    wait_until(Duration::from_secs(40), || async {
        processes::logged(&[blog], &["forbidden"])
    })
    .await;
    check_failure_logged(
        &mut checks,
        blog,
        &forbidden,
        "a watch that fails names its cause",
    );
    // The chart's Role, bound: the failed watch is started again (after its backoff, at most
    // 30 s) and serves.
    let rbac = chart::args([
        &set("rbac.pods", true),
        &set("serviceAccount.name", account),
        &show_only(&["templates/rbac.yaml"]),
    ]);
    chart::render_apply(engine, "wool", ns, &rbac).await?;
    let bound = now();
    let small = format!("{ns}/small");
    wait_until(Duration::from_secs(60), || served(&bounds.metrics, &small)).await;
    checks.check(
        served(&bounds.metrics, &small).await,
        format!(
            "once the chart's Role is bound, the restarted watch serves (after {:.1} s)",
            now() - bound
        ),
    );
    scaled_deployment(engine, ns, "big", &bounds.address, &pods_of("fleet=big")).await?;
    wait_until(Duration::from_secs(30), || async {
        processes::logged(&[blog], &["max-pods-per-fleet"])
    })
    .await;
    let over = ["picks at least 3 pods, more than --max-pods-per-fleet (2)"];
    checks.check(
        processes::logged(&[blog], &over),
        format!(
            "too many pods names the bound ({})",
            if processes::logged(&[blog], &over) {
                over[0]
            } else {
                ""
            }
        ),
    );
    let gone_parts = ["watching the pods of selector", "fleet=small", " fails"];
    wait_until(Duration::from_secs(30), || async {
        processes::logged(&[glog], &gone_parts)
    })
    .await;
    check_failure_logged(
        &mut checks,
        glog,
        &gone_parts,
        "an API server that is gone names the cause",
    );
    checks.check(
        served(&bounds.metrics, &format!("{ns}/targets-b")).await
            && served(&gone.metrics, &format!("{ns}/targets-g")).await,
        "meanwhile the same scalers' other fleets are served (targets-b, targets-g)",
    );
    checks.check(
        !served(&bounds.metrics, &format!("{ns}/big")).await
            && !served(&gone.metrics, &format!("{ns}/gone")).await,
        "and no answer for the fleets past a bound (big, gone)",
    );
    api::delete_namespace(client, ns).await;
    result(
        "podbounds: a forbidden watch restarted and served once the chart's Role was bound; 3 pods \
         past --max-pods-per-fleet 2 refused; an API server gone refused; the other fleets served",
    );
    checks.evidence(&format!(
        "    the scalers' logs: {} and {}\n",
        blog.display(),
        glog.display()
    ));
    checks.verdict()
}

/// Checks that `log` holds a line with every one of `parts`, in that order (a failed watch's),
/// saying `what` and the cause the line gives after "fails (restarted" (at most 160 characters).
fn check_failure_logged(checks: &mut Checks, log: &Path, parts: &[&str], what: &str) {
    let line = processes::first_logged(&[log], parts).unwrap_or_default();
    let cause: String = line
        .split("fails (restarted")
        .nth(1)
        .unwrap_or("")
        .chars()
        .take(160)
        .collect();
    checks.check(
        processes::logged(&[log], parts),
        format!("{what} (fails (restarted{cause})"),
    );
}

/// A measurement, not a test (run only when named): 50 pods (their status played here, each a
/// real wool-worker), deletionCost on, a steady mix of busy and idle (a task of CHURN_TASK_MIN
/// to CHURN_TASK_MAX s, default 5 to 24, dispatched to a random worker every CHURN_EVERY s,
/// default 1) for CHURN_MINUTES (default 10); reports the scaler's deletion-cost patches per
/// minute by outcome.
pub async fn churn(engine: &'static Engine) -> Verdict {
    let (ns, name, n) = ("e2e-churn", "churn", 50);
    let minutes = env_number("CHURN_MINUTES", 10);
    let every = env_number("CHURN_EVERY", 1);
    let (task_min, task_max) = (
        env_number("CHURN_TASK_MIN", 5),
        env_number("CHURN_TASK_MAX", 24),
    );
    println!(
        "\n== churn: {n} pods, deletionCost on, a task of {task_min}-{task_max} s on a random worker every {every} s, for {minutes} min"
    );
    let client = &engine.client;
    api::ensure_namespace(client, ns).await?;
    api::ensure_service_account(client, ns, "default").await?;
    let scaler = fleet::plain_scaler(engine).await?;
    let ips = fleet::more_pod_workers(engine, n)?;
    for (i, ip) in ips.iter().enumerate() {
        fleet_pod(engine, ns, &format!("churn-{i}"), "churn", ip).await?;
    }
    sleep((IDLE + 1) as f64).await;
    let values = chart::args([
        &set("scaledObject.fleet.source", "pods"),
        &set("scaledObject.fleet.podSelector", "fleet=churn"),
        &set("scaledObject.deletionCost", true),
        &set("rbac.deletionCost", true),
        &set("scaledObject.idleThreshold", format!("{IDLE}s")),
        &set("scaledObject.maxSweepAge", "1s"),
        &set("scaledObject.minReplicaCount", 1),
        &set("scaledObject.maxReplicaCount", 1),
    ]);
    scaled_deployment(engine, ns, name, &scaler.address, &values).await?;
    let mut dice = Dice::new();
    let started = now();
    let end = started + (minutes * 60) as f64;
    let mut bursts = 0;
    while now() < end {
        let ip = &ips[dice.below(n)];
        let seconds = task_min + dice.below((task_max - task_min + 1) as usize) as u64;
        fleet::burst(
            engine,
            &format!("churn-{bursts}"),
            &format!("{ip}:{POD_PORT}"),
            1,
            seconds as f64,
        )?;
        bursts += 1;
        sleep(every as f64).await;
    }
    sleep(task_max as f64).await; // the last tasks end
    let took = now() - started;
    let series = crate::timeline::scrape(&scaler.metrics).await;
    // Counters: whole numbers, summed over the fleets.
    let patches = |outcome: &str| -> u64 {
        series
            .iter()
            .filter(|s| {
                s.name == "wool_scaler_deletion_cost_patches_total"
                    && s.label("outcome") == Some(outcome)
            })
            .map(|s| s.value as u64)
            .sum()
    };
    let (made, refused, errors) = (patches("made"), patches("refused"), patches("error"));
    let rate = made as f64 * 60.0 / took;
    println!("    {n} pods for {took:.0} s: {made} patches made ({rate:.1}/min), {refused} refused by the bound, {errors} errors");
    result(format!(
        "churn: {n} pods, {took:.0} s: {rate:.1} patches/min ({made} made, {refused} refused, {errors} errors)"
    ));
    api::delete_namespace(client, ns).await;
    Ok(())
}
