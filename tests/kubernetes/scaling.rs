//! The cases of KEDA scaling a Deployment from wool-scaler's answers: activation and scale to
//! zero (`activation`, `pool`, `stream`, `tls`), the scaler unreachable (`unreachable`, with a
//! `fallback` in `unreachable_fallback`) and the HPA above 1 (`hpa`). Each checks order and
//! generous bounds (never exact times) on its timeline.

use std::time::Duration;

use crate::api::{self, sleep, wait_until};
use crate::chart::{self, set, set_json, targets, COOL, IDLE, POLL};
use crate::engine::Engine;
use crate::fleet;
use crate::processes;
use crate::timeline::{now, Checks, Timeline};
use crate::{result, Verdict};

/// The namespace of these cases' objects.
const NS: &str = "e2e";

/// How long a ScaledObject may take to be Ready: KEDA's first reconcile and first poll.
fn ready_limit() -> Duration {
    Duration::from_secs(60.max(10 * POLL))
}

/// How long the Deployment may take to return to 0 after a task's end: the worker turns idle
/// after `IDLE`, KEDA sees it within a poll (or ten, on a busy machine), then waits `COOL`.
fn back_to_zero_limit() -> Duration {
    Duration::from_secs(IDLE + COOL + 10 * POLL + 20)
}

/// Waits up to `limit` for Deployment `ns/name`'s replicas to satisfy `condition`.
async fn wait_replicas(
    engine: &Engine,
    ns: &str,
    name: &str,
    limit: Duration,
    condition: impl Fn(i32) -> bool,
) -> bool {
    wait_until(limit, || async {
        api::replicas(&engine.client, ns, name)
            .await
            .is_some_and(&condition)
    })
    .await
}

fn seconds(later: f64, earlier: f64) -> String {
    format!("{:.1}", later - earlier)
}

/// One cycle of a case, once its ScaledObject is applied: waits for it to be Ready, lets it
/// settle, dispatches one task of `task` seconds on `worker`, waits for the Deployment to return
/// to 0, stops the sampler and prints the timeline.
struct Cycle {
    /// The task's start and end.
    work: f64,
    end: f64,
    /// The first sample above 0 since the case's start, and at 0 since the task's end.
    up: Option<f64>,
    down: Option<f64>,
}

async fn dispatch_cycle(
    engine: &Engine,
    timeline: &mut Timeline,
    name: &str,
    worker: &str,
    task: f64,
    settle: u64,
) -> Result<Cycle, String> {
    api::wait_ready(&engine.client, NS, name, ready_limit()).await;
    sleep(settle as f64).await;
    let work = now();
    timeline.mark(format!("dispatch: 1 task of {task} s on {worker}"));
    fleet::burst(engine, name, worker, 1, task)?.wait().await;
    let end = now();
    timeline.mark("task ended");
    let cycle = back_to_zero(engine, timeline, name, work, end).await;
    print!("{}", timeline.render());
    Ok(cycle)
}

/// The end of a cycle whose task ran from `work` to `end`: waits for the Deployment to return
/// to 0, stops the sampler and reads the cycle off the timeline.
async fn back_to_zero(
    engine: &Engine,
    timeline: &mut Timeline,
    name: &str,
    work: f64,
    end: f64,
) -> Cycle {
    wait_replicas(engine, NS, name, back_to_zero_limit(), |r| r == 0).await;
    sleep(2.0).await;
    timeline.stop();
    Cycle {
        work,
        end,
        up: timeline.first_time(timeline.t0, |r| r > 0),
        down: timeline.first_time(end, |r| r == 0),
    }
}

/// The checks every 0 → 1 → 0 cycle makes: the scaler saw the task (else the checks that follow
/// cannot be made), replicas left 0 after the dispatch and while the task was in flight, stayed
/// above 0 until the task's end plus idleThreshold, and were back at 0 within idleThreshold +
/// cooldownPeriod + 6 polling intervals + 3 s of its end. The 1 → 0 seconds.
fn check_cycle(
    checks: &mut Checks,
    timeline: &Timeline,
    cycle: &Cycle,
    what: &str,
) -> Option<String> {
    if !timeline.active_between(cycle.work, cycle.end + IDLE as f64) {
        checks.precondition(format!(
            "the scaler never answered active between {what} and its end + idleThreshold: KEDA's \
             polls did not reach it while the work lasted"
        ));
    }
    checks.check(cycle.up.is_some(), "replicas leave 0 at all");
    if let Some(up) = cycle.up {
        checks.check(
            up > cycle.work,
            format!(
                "replicas stay 0 until {what} and leave 0 after it ({} s after it)",
                seconds(up, cycle.work)
            ),
        );
        checks.check(
            up <= cycle.end,
            "and while the task is in flight (before its end)",
        );
    }
    checks.check(
        cycle.down.is_some(),
        "scaled back to 0 after the task's end",
    );
    let down = cycle.down?;
    let d = down - cycle.end;
    checks.check(
        d > IDLE as f64,
        format!("replicas stay above 0 until task end + idleThreshold (0 at +{d:.1} s)"),
    );
    checks.check(
        d <= (IDLE + COOL + 6 * POLL + 3) as f64,
        format!("0 within idleThreshold + cooldownPeriod + 6 polling intervals + 3 s of the end (+{d:.1} s)"),
    );
    Some(format!("{d:.1}"))
}

/// What a case on idle workers starts from: starts `n` wool-workers and gives them
/// idleThreshold + 1 s (a just-started worker counts as busy for idleThreshold), then starts
/// the timeline of Deployment `name` sampled from `scaler` and the checks of case `name` about
/// `object`. The workers, the timeline, the checks and the chart values every such case sets
/// (the scaler's address, the workers as targets).
async fn on_idle_workers(
    engine: &Engine,
    scaler: &fleet::Scaler,
    n: usize,
    name: &'static str,
    object: String,
) -> Result<(Vec<String>, Timeline, Checks, Vec<String>), String> {
    let workers = fleet::workers(engine, n)?;
    sleep((IDLE + 1) as f64).await;
    let timeline = Timeline::start(&engine.client, NS, name, &scaler.metrics, now());
    let checks = Checks::new(name, object);
    let all: Vec<&str> = workers.iter().map(String::as_str).collect();
    let values = chart::args([
        &set("scaledObject.scalerAddress", &scaler.address),
        &targets(&all),
    ]);
    Ok((workers, timeline, checks, values))
}

/// Activation and scale to zero through an `external` trigger polling IsActive: two
/// wool-workers listed as targets, a 12-second task on one.
pub async fn activation(engine: &'static Engine) -> Verdict {
    let name = "activation";
    println!(
        "\n== activation and scale to zero (external trigger, targets, idleThreshold {IDLE}s, \
         pollingInterval {POLL}, cooldownPeriod {COOL})"
    );
    let scaler = fleet::plain_scaler(engine).await?;
    let (workers, mut timeline, mut checks, values) =
        on_idle_workers(engine, &scaler, 2, name, format!("{NS}/{name}")).await?;
    chart::apply_case(engine, NS, name, &values).await?;
    timeline.mark("ScaledObject applied (workers idle)");
    let cycle =
        dispatch_cycle(engine, &mut timeline, name, &workers[0], 12.0, 3 * POLL + 1).await?;
    checks.evidence(&timeline.render());
    checks.check(
        api::ready(&engine.client, NS, name).await,
        "ScaledObject Ready",
    );
    if let Some(down) = check_cycle(&mut checks, &timeline, &cycle, "the dispatch") {
        let up = cycle.up.map_or("-".into(), |up| seconds(up, cycle.work));
        result(format!(
            "activation: 0->1 {up} s after dispatch; 1->0 {down} s after the task ended"
        ));
    }
    checks.verdict()
}

/// A real Wool 0.15.7 pool of two found by its discovery namespace, running one 12-second task.
pub async fn pool(engine: &'static Engine) -> Verdict {
    let name = "pool";
    let pool_namespace = format!("wool-e2e-{}", std::process::id());
    println!("\n== a real Wool 0.15.7 pool found by namespace (external trigger, namespace: {pool_namespace})");
    let scaler = fleet::plain_scaler(engine).await?;
    let mut timeline = Timeline::start(&engine.client, NS, name, &scaler.metrics, now());
    let mut checks = Checks::new(name, format!("{NS}/{name}"));
    let values = chart::args([
        &set("scaledObject.scalerAddress", &scaler.address),
        &set("scaledObject.fleet.source", "namespace"),
        &set("scaledObject.fleet.namespace", &pool_namespace),
    ]);
    chart::apply_case(engine, NS, name, &values).await?;
    timeline.mark("ScaledObject applied (no pool yet: a fleet of none)");
    sleep((3 * POLL + 2) as f64).await;
    let work = now();
    timeline.mark("pool started: 2 workers, 1 task of 12 s dispatched through it");
    let task = 12.0;
    let pool = fleet::wool_pool(
        engine,
        &pool_namespace,
        2,
        &["--busy", "12", "--busy-count", "1"],
    )?;
    // The pool's start (Python, two worker processes) and its task: five times the task.
    let done = wait_until(Duration::from_secs_f64(5.0 * task), || async {
        processes::logged(&[&pool.out], &["busy-done"])
    })
    .await;
    let end = now();
    let printed = std::fs::read_to_string(&pool.out).unwrap_or_default();
    let lines: String = printed
        .lines()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(80)
        .collect();
    timeline.mark(format!(
        "pool's task ended ({} pool lines: {lines})",
        printed.lines().count()
    ));
    let cycle = back_to_zero(engine, &mut timeline, name, work, end).await;
    processes::stop(pool.pid, Duration::from_secs(10));
    // Wool's local discovery keeps its namespace's folder in the temporary folder.
    let _ = std::fs::remove_dir_all(std::env::temp_dir().join(format!("wool-{pool_namespace}")));
    print!("{}", timeline.render());
    checks.evidence(&timeline.render());
    if !checks.check(done, "the pool's task ran (busy-done)") {
        checks.precondition(format!(
            "the pool's task did not end within {} s",
            5.0 * task
        ));
    }
    if let Some(down) = check_cycle(&mut checks, &timeline, &cycle, "the pool works") {
        let up = cycle.up.map_or("-".into(), |up| seconds(up, work));
        result(format!(
            "pool: 0->1 {up} s after the pool started working; 1->0 {down} s after its task ended"
        ));
    }
    checks.verdict()
}

/// StreamIsActive: an `external-push` trigger with a 300 s pollingInterval: activation must come
/// from the stream, long before the next poll.
pub async fn stream(engine: &'static Engine) -> Verdict {
    let name = "stream";
    println!("\n== StreamIsActive (external-push, pollingInterval 300)");
    let scaler = fleet::plain_scaler(engine).await?;
    let (workers, mut timeline, mut checks, values) =
        on_idle_workers(engine, &scaler, 1, name, format!("{NS}/{name}")).await?;
    let worker = &workers[0];
    let values = chart::args([
        &values,
        &set("scaledObject.triggerType", "external-push"),
        &set("scaledObject.pollingInterval", 300),
    ]);
    chart::apply_case(engine, NS, name, &values).await?;
    timeline.mark("ScaledObject applied");
    let ready = api::wait_ready(&engine.client, NS, name, ready_limit()).await;
    sleep(6.0).await;
    let work = now();
    let task = 15.0;
    timeline.mark(format!("dispatch: 1 task of {task} s"));
    let burst = fleet::burst(engine, name, worker, 1, task)?;
    // Activation from the stream: within the task's length.
    wait_replicas(engine, NS, name, Duration::from_secs_f64(2.0 * task), |r| {
        r > 0
    })
    .await;
    burst.wait().await;
    let end = now();
    timeline.mark("task ended");
    sleep((IDLE + COOL + 3 * POLL) as f64).await;
    timeline.stop();
    let up = timeline.first_time(timeline.t0, |r| r > 0);
    print!("{}", timeline.render());
    checks.evidence(&timeline.render());
    if !ready {
        checks.precondition(format!(
            "the ScaledObject was not Ready within {} s",
            ready_limit().as_secs()
        ));
    }
    checks.check(up.is_some(), "replicas leave 0 at all");
    if let Some(up) = up {
        let d = up - work;
        checks.check(
            up > work,
            "replicas stay 0 before work and leave 0 after the dispatch",
        );
        checks.check(
            d <= 20.0,
            format!(
                "within 20 s of it, long before the next poll (300 s): from the stream (+{d:.1} s)"
            ),
        );
        let late = api::replicas(&engine.client, NS, name).await.unwrap_or(-1);
        checks.check(
            late > 0,
            format!(
                "KEDA ignores the stream's inactive answer: still {late} replica(s) idleThreshold + \
                 cooldownPeriod + 6 s after the end (scale to zero waits for a poll)"
            ),
        );
        result(format!(
            "stream: 0->1 {d:.1} s after dispatch with pollingInterval 300; replicas {late} {:.0} s \
             after the end (scale-down waits for the next poll)",
            now() - end
        ));
    }
    api::delete_scaled_object(&engine.client, NS, name, false).await;
    checks.verdict()
}

/// TLS from KEDA to wool-scaler: the scaler serves mutual TLS; KEDA takes caCert,
/// tlsClientCert and tlsClientKey from Secrets through the TriggerAuthentication the chart
/// renders with scaler.tls. The same without KEDA's client certificate must be refused.
pub async fn tls(engine: &'static Engine) -> Verdict {
    let name = "tls";
    let noauth = "tls-noauth";
    println!(
        "\n== TLS from KEDA to the scaler (mutual; the chart's TriggerAuthentication, scaler.tls)"
    );
    api::ensure_namespace(&engine.client, NS).await?;
    let pki = &engine.pki;
    let read = |p: &std::path::PathBuf| {
        std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))
    };
    api::create::<k8s_openapi::api::core::v1::Secret>(
        &engine.client,
        NS,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "wool-scaler-serving-tls"},
            "stringData": {"ca.crt": read(&pki.scaler_ca)?, "tls.crt": read(&pki.scaler.cert)?,
                           "tls.key": read(&pki.scaler.key)?}
        }),
    )
    .await?;
    api::create::<k8s_openapi::api::core::v1::Secret>(
        &engine.client,
        NS,
        serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "keda-to-scaler-tls"},
            "stringData": {"tls.crt": read(&pki.keda_to_scaler.cert)?,
                           "tls.key": read(&pki.keda_to_scaler.key)?}
        }),
    )
    .await?;
    let scaler = fleet::tls_scaler(engine).await?;
    let object = format!("{NS}/{name} and {NS}/{noauth}");
    let (workers, mut timeline, mut checks, values) =
        on_idle_workers(engine, &scaler, 1, name, object).await?;
    let worker = &workers[0];
    let tls_values = chart::args([
        &values,
        &set("scaler.tls.enabled", true),
        &set("scaler.tls.secretName", "wool-scaler-serving-tls"),
    ]);
    let with_client = chart::args([
        &tls_values,
        &set("scaler.tls.kedaClientSecretName", "keda-to-scaler-tls"),
    ]);
    chart::apply_case(engine, NS, name, &with_client).await?;
    // Without KEDA's client certificate (its TriggerAuthentication gives caCert only): the
    // scaler serves mutual TLS, so it must refuse KEDA.
    chart::apply_case(engine, NS, noauth, &tls_values).await?;
    timeline.mark("ScaledObjects applied (with and without KEDA's client certificate)");
    let cycle = dispatch_cycle(engine, &mut timeline, name, worker, 10.0, 2 * POLL).await?;
    checks.evidence(&timeline.render());
    let ready = api::condition(&engine.client, NS, name, "Ready").await;
    let ready_noauth = api::condition(&engine.client, NS, noauth, "Ready").await;
    checks.check(ready == "True", "ScaledObject Ready over mutual TLS");
    checks.check(
        cycle
            .up
            .is_some_and(|up| up > cycle.work && up <= cycle.end),
        "replicas leave 0 during the task",
    );
    checks.check(cycle.down.is_some(), "and return to 0 after it");
    checks.check(
        ready_noauth != "True",
        "without KEDA's client certificate the ScaledObject is not Ready (the scaler refuses KEDA)",
    );
    let replicas_noauth = api::replicas(&engine.client, NS, noauth).await;
    checks.check(
        replicas_noauth == Some(0),
        format!("and its Deployment stays at 0 ({replicas_noauth:?})"),
    );
    result(format!(
        "tls: Ready={ready} with KEDA's client certificate, Ready={ready_noauth} without; 0->1->0 through mutual TLS"
    ));
    api::delete_scaled_object(&engine.client, NS, noauth, false).await;
    checks.verdict()
}

/// The scaler unreachable while its fleet is busy: KEDA keeps the replica count (no fallback:
/// Ready False). With `fallback` (failureThreshold 2, replicas 3; the HPA controller runs) KEDA
/// v2.21.0 still keeps the count: it asks the external scaler for GetMetricSpec again after an
/// error and, unreachable, has no metric to give the fallback (docs/kubernetes.md says so).
pub async fn unreachable(engine: &'static Engine, fallback: bool) -> Verdict {
    let name = "unreachable";
    let case = if fallback {
        "unreachable_fallback"
    } else {
        "unreachable"
    };
    println!(
        "\n== the scaler unreachable (while its fleet is busy){}",
        if fallback {
            ", with fallback: failureThreshold 2, replicas 3"
        } else {
            ""
        }
    );
    let scaler = fleet::start_scaler(engine, "down", &[], &[]).await?;
    let worker = fleet::workers(engine, 1)?.remove(0);
    let mut timeline = Timeline::start(&engine.client, NS, name, &scaler.metrics, now());
    let mut checks = Checks::new(case, format!("{NS}/{name}"));
    // The worker just started: busy for the idleThreshold of 30 s.
    let busy_for = 30;
    let mut values = chart::args([
        &set("scaledObject.scalerAddress", &scaler.address),
        &targets(&[&worker]),
        &set("scaledObject.maxReplicaCount", 5),
        &set("scaledObject.metricType", "AverageValue"),
        &set("scaledObject.idleThreshold", format!("{busy_for}s")),
    ]);
    if fallback {
        values.extend(set_json(
            "scaledObject.fallback",
            r#"{"failureThreshold":2,"replicas":3}"#,
        ));
    }
    chart::apply_case(engine, NS, name, &values).await?;
    timeline.mark(format!(
        "ScaledObject applied (the worker just started: busy for {busy_for} s)"
    ));
    wait_replicas(engine, NS, name, Duration::from_secs(busy_for), |r| r > 0).await;
    let before = api::replicas(&engine.client, NS, name).await.unwrap_or(0);
    sleep(2.0).await;
    timeline.mark("wool-scaler stopped");
    processes::stop(scaler.process.pid, Duration::from_secs(10));
    let without = IDLE + COOL + 6 * POLL;
    sleep(without as f64).await;
    let after = api::replicas(&engine.client, NS, name).await.unwrap_or(-1);
    let ready = api::condition(&engine.client, NS, name, "Ready").await;
    let fallback_condition = api::condition(&engine.client, NS, name, "Fallback").await;
    let shown = |s: &str| {
        if s.is_empty() {
            "none".to_string()
        } else {
            s.to_string()
        }
    };
    timeline.mark(format!(
        "Ready={ready} Fallback={} replicas={after}",
        shown(&fallback_condition)
    ));
    timeline.stop();
    print!("{}", timeline.render());
    checks.evidence(&timeline.render());
    if !checks.check(
        before > 0,
        "replicas left 0 while the scaler answered (busy)",
    ) {
        checks.precondition(format!(
            "KEDA did not activate within the worker's {busy_for} s of busy: the rest says nothing"
        ));
    }
    if fallback {
        checks.check(
            after == before,
            format!("with a fallback configured KEDA still keeps the count ({before} -> {after}): the fallback does not engage"),
        );
        checks.check(
            fallback_condition != "True",
            format!(
                "and the Fallback condition is not True ({})",
                shown(&fallback_condition)
            ),
        );
    } else {
        checks.check(
            after == before,
            format!("with the scaler gone (longer than cooldownPeriod) KEDA keeps the count ({before} -> {after})"),
        );
        checks.check(ready != "True", "and the ScaledObject is not Ready");
    }
    result(format!(
        "{case}: replicas {before} -> {after} over {without} s without the scaler; Ready={ready} Fallback={}",
        shown(&fallback_condition)
    ));
    // Gone before the next variant applies the same names.
    api::delete_scaled_object(&engine.client, NS, name, true).await;
    api::delete_deployment(&engine.client, NS, name).await;
    sleep(2.0).await;
    checks.verdict()
}

/// The HPA half: 4 workers listed, targetValue 1; three of them busy at once: KEDA activates
/// (0 -> 1), the HPA follows the busy-worker metric above 1, and back down; then KEDA to 0.
pub async fn hpa(engine: &'static Engine) -> Verdict {
    let name = "hpa";
    println!(
        "\n== the HPA half (kube-controller-manager's HPA controller + KEDA's metrics adapter)"
    );
    let scaler = fleet::plain_scaler(engine).await?;
    let (workers, mut timeline, mut checks, values) =
        on_idle_workers(engine, &scaler, 4, name, format!("{NS}/{name}")).await?;
    let values = chart::args([
        &values,
        &set("scaledObject.maxReplicaCount", 4),
        &set("scaledObject.targetValue", 1),
        &set_json(
            "scaledObject.advanced",
            r#"{"horizontalPodAutoscalerConfig":{"behavior":{"scaleDown":{"stabilizationWindowSeconds":0},"scaleUp":{"stabilizationWindowSeconds":0}}}}"#,
        ),
    ]);
    chart::apply_case(engine, NS, name, &values).await?;
    timeline.mark("ScaledObject applied (4 workers idle, targetValue 1)");
    sleep((3 * POLL) as f64).await;
    let task = 30.0;
    let work = now();
    timeline.mark(format!(
        "dispatch: 3 tasks of {task} s, one on each of 3 workers"
    ));
    let mut bursts = Vec::new();
    for worker in &workers[..3] {
        bursts.push(fleet::burst(engine, name, worker, 1, task)?);
    }
    for burst in &bursts {
        burst.wait().await;
    }
    let end = now();
    timeline.mark("tasks ended");
    wait_replicas(
        engine,
        NS,
        name,
        Duration::from_secs(IDLE + COOL + 15 * POLL + 40),
        |r| r == 0,
    )
    .await;
    sleep(2.0).await;
    timeline.stop();
    let peak = timeline.max_between(work, end);
    let down = timeline.first_time(end, |r| r == 0);
    print!("{}", timeline.render());
    checks.evidence(&timeline.render());
    let hpa_line = hpa_summary(engine, &format!("keda-hpa-{name}")).await;
    println!("    the HPA: {hpa_line}");
    if !timeline.active_between(work, end) {
        checks.precondition("the scaler never answered active while the 3 tasks ran");
    }
    checks.check(
        peak >= 2,
        format!(
            "the HPA follows the busy-worker metric above 1 while 3 workers are busy (peak {peak})"
        ),
    );
    checks.check(down.is_some(), "and back: 0 after the tasks end");
    result(format!(
        "hpa: peak {peak} replicas with 3 busy workers (targetValue 1); back to 0 {} s after the end",
        down.map_or("-".into(), |d| seconds(d, end))
    ));
    checks.verdict()
}

/// The HPA's bounds and its desired count now.
async fn hpa_summary(engine: &Engine, name: &str) -> String {
    use k8s_openapi::api::autoscaling::v2::HorizontalPodAutoscaler;
    let hpas: kube::Api<HorizontalPodAutoscaler> = kube::Api::namespaced(engine.client.clone(), NS);
    match hpas.get(name).await {
        Ok(hpa) => {
            let spec = hpa.spec;
            let desired = hpa.status.map(|s| s.desired_replicas);
            format!(
                "min {} max {}, desired now {}",
                spec.min_replicas.map_or("-".into(), |m| m.to_string()),
                spec.max_replicas,
                desired.map_or("-".into(), |d| d.to_string())
            )
        }
        Err(e) => format!("cannot be read: {e}"),
    }
}
