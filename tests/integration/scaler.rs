//! `wool-scaler` driven by KEDA's own client: `tests/keda` (KEDA's generated
//! `externalscaler` package, github.com/kedacore/keda/v2 v2.21.0, over grpc-go), built by
//! `scripts/ensure-keda-client.sh`, making the calls KEDA makes. Against real workers: ours
//! (`wool-worker` processes, listed, resolved from DNS, over mutual TLS) and a real Wool 0.15.7
//! pool found by its discovery namespace.

use crate::common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use common::{WoolPool, WorkerProcess};
use libwool::WorkerConnection;
use serde_json::Value;

/// A `wool-scaler` process, SIGKILLed on drop if still running.
struct ScalerProcess {
    child: Child,
    address: String,
    metrics: String,
    log: Receiver<String>,
    /// Flags every keda-client run gets (TLS toward the scaler).
    client_args: Vec<String>,
}

impl ScalerProcess {
    fn start() -> Self {
        Self::start_with(&[], &[])
    }

    /// Started with `args`; KEDA's client then runs with `client_args`.
    fn start_with(args: &[String], client_args: &[String]) -> Self {
        let metrics = common::unused_local_address();
        let mut child = Command::new(common::program("wool-scaler"))
            .args(["--listen", "127.0.0.1:0", "--metrics-listen", &metrics])
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("wool-scaler starts");
        let address = common::printed_address(&mut child, "wool-scaler");
        let log = common::log_lines(&mut child, "scaler: ");
        Self {
            child,
            address,
            metrics,
            log,
            client_args: client_args.to_vec(),
        }
    }

    /// One KEDA polling cycle (GetMetricSpec, GetMetrics, IsActive) for a ScaledObject with
    /// this metadata: KEDA's client's JSON.
    fn poll(&self, name: &str, meta: &[(&str, &str)]) -> Value {
        let output = keda_client("poll", &self.address, name, meta)
            .args(&self.client_args)
            .stdout(Stdio::piped())
            .output()
            .expect("keda-client runs");
        serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "keda-client printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stdout)
            )
        })
    }

    /// The metric KEDA read for `name` (from the float field; the integer one must agree).
    fn busy(&self, name: &str, meta: &[(&str, &str)]) -> (f64, bool) {
        let answer = self.poll(name, meta);
        let value = &answer["values"][0];
        assert!(answer.get("error").is_none(), "{answer}");
        let float = value["metricValueFloat"]
            .as_f64()
            .expect("metricValueFloat");
        let int = value["metricValue"].as_i64().expect("metricValue");
        assert_eq!(
            float, int as f64,
            "the two metric fields disagree: {answer}"
        );
        (float, answer["active"].as_bool().unwrap_or(false))
    }

    /// Polls until the metric and activity read `want`, within `limit`.
    fn busy_until(&self, name: &str, meta: &[(&str, &str)], want: (f64, bool), limit: Duration) {
        let deadline = Instant::now() + limit;
        let mut seen = self.busy(name, meta);
        while seen != want && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
            seen = self.busy(name, meta);
        }
        assert_eq!(seen, want, "(metric, active) never became {want:?}");
    }

    /// StreamIsActive, opened by KEDA's client.
    fn stream(&self, name: &str, meta: &[(&str, &str)]) -> ActiveStream {
        let mut child = keda_client("stream", &self.address, name, meta)
            .args(&self.client_args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("keda-client runs");
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = tx.send(serde_json::from_str::<Value>(&line).unwrap());
            }
        });
        ActiveStream { child, lines }
    }
}

impl Drop for ScalerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A StreamIsActive stream as KEDA's client prints it.
struct ActiveStream {
    child: Child,
    lines: Receiver<Value>,
}

impl ActiveStream {
    /// The next answer within `limit`: whether active, and when it came.
    fn next(&self, limit: Duration) -> (bool, Instant) {
        let line = self
            .lines
            .recv_timeout(limit)
            .unwrap_or_else(|_| panic!("StreamIsActive sent nothing within {limit:?}"));
        let active = line["active"]
            .as_bool()
            .unwrap_or_else(|| panic!("the stream ended: {line}"));
        (active, Instant::now())
    }
}

impl Drop for ActiveStream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `wool_scaler_workers` of ScaledObject `default/name` in `state`, from a scrape (whatever its
/// `fleet` label).
fn workers_in(metrics: &std::collections::HashMap<String, f64>, name: &str, state: &str) -> f64 {
    let prefix = format!("wool_scaler_workers{{scaledobject=\"default/{name}\",fleet=");
    let suffix = format!(",state=\"{state}\"}}");
    let found: Vec<f64> = metrics
        .iter()
        .filter(|(key, _)| key.starts_with(&prefix) && key.ends_with(&suffix))
        .map(|(_, value)| *value)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "no single series for {name} {state}: {metrics:?}"
    );
    found[0]
}

/// The pinned KEDA client (built once per test process).
fn keda_client(mode: &str, address: &str, name: &str, meta: &[(&str, &str)]) -> Command {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| {
        let output = Command::new(common::repo().join("scripts/ensure-keda-client.sh"))
            .stderr(Stdio::inherit())
            .output()
            .expect("scripts/ensure-keda-client.sh runs");
        assert!(output.status.success(), "building the KEDA client failed");
        std::path::PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
    });
    let mut command = Command::new(bin);
    command.args([mode, "--address", address, "--name", name]);
    for (key, value) in meta {
        command.args(["--meta", &format!("{key}={value}")]);
    }
    command.stdin(Stdio::null()).stderr(Stdio::inherit());
    command
}

/// Dispatches `sleep seconds` to the worker at `address` in the background and waits until it
/// is in flight there (the worker's idle reads 0).
fn occupy(
    runtime: &tokio::runtime::Runtime,
    address: &str,
    seconds: u32,
) -> tokio::task::JoinHandle<()> {
    let connection = WorkerConnection::new(address).unwrap();
    let task = runtime.spawn(async move {
        let args = seconds.to_string().into_bytes();
        connection.dispatch("sleep", args, None).await.unwrap();
    });
    let probe = WorkerConnection::new(address).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while runtime
        .block_on(probe.idle(Some(Duration::from_secs(2))))
        .unwrap()
        != 0.0
    {
        assert!(
            Instant::now() < deadline,
            "the task never reached {address}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    task
}

/// Given three of our workers idle past the threshold, when two take work and it drains, then
/// KEDA's client reads metric 0 and inactive, then metric 2 and active (StreamIsActive pushes
/// it within one sweep period), then metric 0 and inactive again once the work drained and the
/// threshold passed; the integer and float metric fields agree, the spec's target is
/// `targetValue`.
#[test]
fn our_workers_go_active_under_load_and_inactive_once_drained() {
    let workers: Vec<WorkerProcess> = (0..3).map(|_| WorkerProcess::plaintext()).collect();
    let targets = workers
        .iter()
        .map(|w| w.address.as_str())
        .collect::<Vec<_>>()
        .join(",");
    let meta = [
        ("targets", targets.as_str()),
        ("idleThreshold", "1s"),
        ("maxSweepAge", "200ms"),
        ("targetValue", "2"),
    ];
    let scaler = ScalerProcess::start();
    std::thread::sleep(Duration::from_millis(1100));
    let answer = scaler.poll("ours", &meta);
    assert_eq!(
        answer["specs"][0]["metricName"], "wool-busy-workers",
        "{answer}"
    );
    assert_eq!(answer["specs"][0]["targetSizeFloat"], 2.0, "{answer}");
    assert_eq!(answer["specs"][0]["targetSize"], 2, "{answer}");
    scaler.busy_until("ours", &meta, (0.0, false), Duration::from_secs(5));
    let stream = scaler.stream("ours", &meta);
    assert!(
        !stream.next(Duration::from_secs(10)).0,
        "idle fleet streamed as active"
    );

    let runtime = common::runtime();
    let started = Instant::now();
    let tasks = [
        occupy(&runtime, &workers[0].address, 3),
        occupy(&runtime, &workers[1].address, 3),
    ];
    let in_flight = Instant::now();
    let (active, at) = stream.next(Duration::from_secs(10));
    assert!(
        active,
        "the stream's next answer after the load is not active"
    );
    // One sweep period (maxSweepAge, 200 ms) plus the sweep itself: generous bound.
    let after = at.saturating_duration_since(in_flight);
    eprintln!(
        "StreamIsActive: active {} ms after both tasks were in flight ({} ms after dispatch)",
        after.as_millis(),
        at.duration_since(started).as_millis()
    );
    assert!(
        after < Duration::from_secs(3),
        "active only after {after:?}"
    );
    assert_eq!(scaler.busy("ours", &meta), (2.0, true));

    for task in tasks {
        runtime.block_on(task).unwrap();
    }
    let drained = Instant::now();
    let (active, at) = stream.next(Duration::from_secs(15));
    assert!(
        !active,
        "the stream's next answer after the drain is not inactive"
    );
    let after = at.duration_since(drained);
    eprintln!(
        "StreamIsActive: inactive {} ms after the work drained (threshold 1 s)",
        after.as_millis()
    );
    assert!(
        after >= Duration::from_millis(900),
        "inactive before the threshold: {after:?}"
    );
    assert_eq!(scaler.busy("ours", &meta), (0.0, false));

    let metrics = common::scrape(&scaler.metrics);
    assert_eq!(workers_in(&metrics, "ours", "idle"), 3.0);
    assert!(metrics[r#"wool_scaler_calls_total{rpc="GetMetrics",answer="swept"}"#] >= 1.0);
    drop(stream);
}

/// Given two idle workers, when one vanishes (SIGKILL), then by default it counts as busy (the
/// scaler never scales away work it cannot see: metric 1, active), with
/// `unreachableAs: idle` it does not (metric 0, inactive); the log names it once and the
/// metrics count it unreachable. A worker that predates the `idle` RPC counts by
/// `idleUnavailableAs` the same way.
#[test]
fn a_vanished_or_legacy_worker_counts_as_the_metadata_says() {
    let mut workers: Vec<WorkerProcess> = (0..2).map(|_| WorkerProcess::plaintext()).collect();
    let runtime = common::runtime();
    let (legacy, legacy_task) = runtime.block_on(common::serve_legacy_worker());
    let targets = format!("{},{}", workers[0].address, workers[1].address);
    let scaler = ScalerProcess::start();
    let by_default = [
        ("targets", targets.as_str()),
        ("idleThreshold", "0"),
        ("maxSweepAge", "0"),
    ];
    assert_eq!(scaler.busy("default-rule", &by_default), (0.0, false));
    let _ = workers[1].child.kill();
    let _ = workers[1].child.wait();
    assert_eq!(scaler.busy("default-rule", &by_default), (1.0, true));
    common::expect_log_line(&scaler.log, "worker unreachable", Duration::from_secs(5));
    let metrics = common::scrape(&scaler.metrics);
    assert_eq!(workers_in(&metrics, "default-rule", "unreachable"), 1.0);
    let as_idle = [
        ("targets", targets.as_str()),
        ("idleThreshold", "0"),
        ("maxSweepAge", "0"),
        ("unreachableAs", "idle"),
    ];
    assert_eq!(scaler.busy("idle-rule", &as_idle), (0.0, false));

    let with_legacy = format!("{},{legacy}", workers[0].address);
    let legacy_default = [("targets", with_legacy.as_str()), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("legacy", &legacy_default), (1.0, true));
    let legacy_idle = [
        ("targets", with_legacy.as_str()),
        ("idleThreshold", "0"),
        ("idleUnavailableAs", "idle"),
    ];
    assert_eq!(scaler.busy("legacy-idle", &legacy_idle), (0.0, false));
    let metrics = common::scrape(&scaler.metrics);
    assert_eq!(workers_in(&metrics, "legacy", "idle_unavailable"), 1.0);
    legacy_task.abort();
}

/// Given a real Wool 0.15.7 pool of three published under a namespace, when it runs two tasks,
/// then KEDA's client, naming only the namespace, reads metric 2 and active, and the stream
/// goes inactive (metric 0) once they return and the threshold passes.
#[test]
fn a_wool_pool_by_namespace_goes_active_under_load_and_inactive_once_drained() {
    let namespace = common::unique_namespace("scaler");
    let scaler = ScalerProcess::start();
    let meta = [
        ("namespace", namespace.as_str()),
        ("idleThreshold", "1s"),
        ("maxSweepAge", "200ms"),
    ];
    let mut pool = WoolPool::start(&namespace, 3, &["--busy", "5", "--busy-count", "2"], None);
    pool.expect_line("busy-dispatched", Duration::from_secs(10));
    scaler.busy_until("pool", &meta, (2.0, true), Duration::from_secs(4));
    let answer = scaler.poll("pool", &meta);
    assert_eq!(answer["active"], true, "{answer}");
    let stream = scaler.stream("pool", &meta);
    assert!(
        stream.next(Duration::from_secs(10)).0,
        "a busy pool streamed as inactive"
    );
    pool.expect_line("busy-done", Duration::from_secs(20));
    let (active, _) = stream.next(Duration::from_secs(15));
    assert!(
        !active,
        "the stream's next answer after the drain is not inactive"
    );
    assert_eq!(scaler.busy("pool", &meta), (0.0, false));
    let metrics = common::scrape(&scaler.metrics);
    assert_eq!(workers_in(&metrics, "pool", "idle"), 3.0);
}

/// Given a worker listening on every address of a dual-stack host, when the metadata names
/// `localhost` and its port, then each address the name resolves to (127.0.0.1 and ::1, both
/// answered on the machine: no query leaves it) is a member: metric = addresses while busy, 0
/// once idle.
#[test]
fn a_dns_name_and_port_name_the_workers() {
    let worker = WorkerProcess::spawn(&["--listen".into(), "[::]:0".into()]);
    let port = common::port_of(&worker.address).to_string();
    let scaler = ScalerProcess::start();
    let meta = [
        ("dnsName", "localhost"),
        ("port", port.as_str()),
        ("idleThreshold", "0"),
        ("maxSweepAge", "0"),
    ];
    assert_eq!(scaler.busy("dns", &meta), (0.0, false));
    let runtime = common::runtime();
    let task = occupy(&runtime, &format!("127.0.0.1:{port}"), 30);
    let metrics = {
        scaler.busy_until("dns", &meta, (2.0, true), Duration::from_secs(5));
        common::scrape(&scaler.metrics)
    };
    assert_eq!(workers_in(&metrics, "dns", "busy"), 2.0);
    task.abort();
}

/// Given metadata naming a DNS name that does not exist (`nosuchhost.invalid.`: the special-use
/// `.invalid` zone, answered NXDOMAIN by the resolver itself, so no query leaves the machine),
/// when KEDA's client polls (GetMetrics) and IsActive is asked, then each gets UNAVAILABLE
/// saying the name does not resolve (KEDA keeps the replica count), not metric 0 and
/// inactive, and the scaler logs it.
#[test]
fn a_dns_name_that_does_not_resolve_is_an_error_to_keda() {
    let scaler = ScalerProcess::start();
    let meta = [
        ("dnsName", "nosuchhost.invalid."),
        ("port", "50051"),
        ("maxSweepAge", "0"),
    ];
    let answer = scaler.poll("nxdomain", &meta);
    assert_eq!(answer["error"]["code"], "Unavailable", "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("nosuchhost.invalid. does not resolve"),
        "{answer}"
    );
    let line = common::expect_log_line(&scaler.log, "does not resolve", Duration::from_secs(5));
    assert!(line.contains("the fleet cannot be listed"), "{line}");
    let runtime = common::runtime();
    let status = runtime.block_on(async {
        use libwool::protocol::externalscaler::external_scaler_client::ExternalScalerClient;
        let channel = scaler_channels(&scaler.address, 1).await.remove(0);
        ExternalScalerClient::new(channel)
            .is_active(reference("default", "nxdomain", &meta))
            .await
            .unwrap_err()
    });
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    assert!(status.message().contains("does not resolve"), "{status:?}");
}

/// Given a worker serving mutual TLS and a scaler started with `--tls-files-dir` naming the
/// directory of the PKI's files, when the metadata gives the CA and client pair by path, then
/// the scaler reads it (idle: metric 0); without TLS metadata it cannot (unreachable: metric
/// 1); a TLS file that does not exist is INVALID_ARGUMENT naming it.
#[test]
fn tls_material_by_path_reaches_a_mutual_tls_worker() {
    let pki = common::Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let dir = pki.ca_path.parent().unwrap().display().to_string();
    let scaler = ScalerProcess::start_with(&["--tls-files-dir".into(), dir], &[]);
    let ca = pki.ca_path.display().to_string();
    let cert = pki.leaf.cert_path.display().to_string();
    let key = pki.leaf.key_path.display().to_string();
    let tls = [
        ("targets", worker.address.as_str()),
        ("idleThreshold", "0"),
        ("workerTlsCa", ca.as_str()),
        ("workerTlsCert", cert.as_str()),
        ("workerTlsKey", key.as_str()),
    ];
    assert_eq!(scaler.busy("tls", &tls), (0.0, false));
    let plain = [("targets", worker.address.as_str()), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("plain", &plain), (1.0, true));
    let missing = [
        ("targets", worker.address.as_str()),
        ("workerTlsCa", "/nonexistent/ca.pem"),
    ];
    let answer = scaler.poll("missing", &missing);
    assert_eq!(answer["error"]["code"], "InvalidArgument", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("workerTlsCa") && message.contains("cannot be used"),
        "{message}"
    );
    assert!(
        !message.contains("/nonexistent/ca.pem"),
        "the path is not repeated: {message}"
    );
}

/// Given a plaintext Wool 0.15.7 pool of two found by namespace, when a ScaledObject asks for
/// it with TLS material for the workers, then Wool's admission gate refuses both records (a
/// caller with credentials admits only secure workers): they are no members at all — metric 0,
/// inactive, no worker counted unreachable — rather than two unreachable workers counted busy
/// (before the gate, every record was a member, and a forged plaintext record kept a TLS fleet
/// active). Without TLS material the same pool is two members.
#[test]
fn records_the_admission_gate_refuses_are_no_members() {
    let pki = common::Pki::generate();
    let dir = pki.ca_path.parent().unwrap().display().to_string();
    let scaler = ScalerProcess::start_with(&["--tls-files-dir".into(), dir], &[]);
    let namespace = common::unique_namespace("gate");
    let _pool = WoolPool::start(&namespace, 2, &[], None);
    let ca = pki.ca_path.display().to_string();
    let cert = pki.leaf.cert_path.display().to_string();
    let key = pki.leaf.key_path.display().to_string();
    let tls = [
        ("namespace", namespace.as_str()),
        ("idleThreshold", "1h"),
        ("workerTlsCa", ca.as_str()),
        ("workerTlsCert", cert.as_str()),
        ("workerTlsKey", key.as_str()),
    ];
    assert_eq!(scaler.busy("tls", &tls), (0.0, false));
    let metrics = common::scrape(&scaler.metrics);
    assert_eq!(workers_in(&metrics, "tls", "unreachable"), 0.0);
    let plain = [("namespace", namespace.as_str()), ("idleThreshold", "1h")];
    assert_eq!(scaler.busy("plain", &plain), (2.0, true));
}

/// Given bad metadata, then KEDA's client gets INVALID_ARGUMENT naming the key, from every
/// call, and the scaler keeps serving.
#[test]
fn bad_metadata_is_invalid_argument_naming_the_key() {
    let scaler = ScalerProcess::start();
    for (meta, says) in [
        (
            vec![("namespace", "a"), ("idleTreshold", "5m")],
            "idleTreshold",
        ),
        (
            vec![("targets", "127.0.0.1:1"), ("idleThreshold", "NaN")],
            "idleThreshold",
        ),
        (vec![("idleThreshold", "5m")], "say which workers"),
        (vec![("targets", "not a target")], "targets"),
    ] {
        let answer = scaler.poll("bad", &meta);
        assert_eq!(answer["error"]["code"], "InvalidArgument", "{answer}");
        assert!(
            answer["error"]["message"].as_str().unwrap().contains(says),
            "{answer}"
        );
    }
    let worker = WorkerProcess::plaintext();
    let good = [("targets", worker.address.as_str()), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("good", &good), (0.0, false));
}

/// Given a serving scaler with a stream open, then grpc.health.v1 says SERVING; when SIGTERM
/// arrives, the stream ends cleanly (KEDA's client sees EOF) and the process exits 0.
#[test]
fn health_serves_and_sigterm_ends_streams_and_exits_zero() {
    let mut scaler = ScalerProcess::start();
    let runtime = common::runtime();
    let address = format!("http://{}", scaler.address);
    let serving = runtime.block_on(async {
        let channel = tonic::transport::Channel::from_shared(address)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
        let mut statuses = Vec::new();
        for service in ["", "externalscaler.ExternalScaler"] {
            let answer = health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: service.into(),
                })
                .await
                .unwrap()
                .into_inner();
            statuses.push(answer.status);
        }
        statuses
    });
    let serving_code = tonic_health::pb::health_check_response::ServingStatus::Serving as i32;
    assert_eq!(serving, vec![serving_code, serving_code]);
    let worker = WorkerProcess::plaintext();
    let meta = [
        ("targets", worker.address.as_str()),
        ("maxSweepAge", "200ms"),
    ];
    let mut stream = scaler.stream("term", &meta);
    let _ = stream.next(Duration::from_secs(10));
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(scaler.child.id() as i32, libc::SIGTERM) },
        0
    );
    let end = stream
        .lines
        .recv_timeout(Duration::from_secs(10))
        .expect("the stream ends on SIGTERM");
    assert_eq!(end["end"], "EOF", "{end}");
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = scaler.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "wool-scaler still running 10 s after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    let _ = stream.child.wait();
}

/// Given a scaler serving mutual TLS (`--tls-ca`, `--tls-cert`, `--tls-key`) with a plaintext
/// health port, then KEDA's client with `caCert` and a client pair gets its answers, one without
/// TLS or without a client certificate gets none, and the health port says SERVING in
/// plaintext (what a Kubernetes gRPC probe needs).
#[test]
fn the_scaler_serves_mutual_tls_to_keda_with_a_plaintext_health_port() {
    let pki = common::Pki::generate();
    let health = common::unused_local_address();
    let mut args = pki.mutual_args();
    args.extend(["--health-listen".to_string(), health.clone()]);
    let ca = pki.ca_path.display().to_string();
    let cert = pki.leaf.cert_path.display().to_string();
    let key = pki.leaf.key_path.display().to_string();
    let client = ["--ca", &ca, "--cert", &cert, "--key", &key].map(String::from);
    let mut scaler = ScalerProcess::start_with(&args, &client);
    let worker = WorkerProcess::plaintext();
    let meta = [("targets", worker.address.as_str()), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("tls", &meta), (0.0, false));

    scaler.client_args = Vec::new();
    let answer = scaler.poll("tls", &meta);
    assert_eq!(answer["error"]["code"], "Unavailable", "{answer}");
    scaler.client_args = ["--ca", &ca].map(String::from).to_vec();
    let answer = scaler.poll("tls", &meta);
    assert!(
        answer.get("error").is_some(),
        "no client certificate, yet: {answer}"
    );

    let status = common::runtime().block_on(async {
        let channel = tonic::transport::Channel::from_shared(format!("http://{health}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        tonic_health::pb::health_client::HealthClient::new(channel)
            .check(tonic_health::pb::HealthCheckRequest {
                service: "externalscaler.ExternalScaler".into(),
            })
            .await
            .unwrap()
            .into_inner()
            .status
    });
    assert_eq!(
        status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// Given two ScaledObjects' streams asking for fresh sweeps (`maxSweepAge: 0`) of one worker,
/// then they share their sweeps (the worker sees a handful of polls a second, not one per
/// stream turn); and given a frozen worker, twenty concurrent calls with `maxSweepAge: 0` share
/// one sweep bounded by `sweepTimeout` instead of queueing one sweep each behind it. A
/// certificate path naming a FIFO (in the scaler's `--tls-files-dir`) or `/dev/zero` (outside
/// it) is refused at once and the scaler keeps answering.
#[test]
fn calls_and_streams_share_sweeps_and_hostile_paths_are_refused() {
    use libwool::protocol::externalscaler::external_scaler_client::ExternalScalerClient;
    use libwool::protocol::externalscaler::{GetMetricsRequest, ScaledObjectRef};

    let worker_metrics = common::unused_local_address();
    let worker = WorkerProcess::spawn(&["--metrics-listen".into(), worker_metrics.clone()]);
    let polls = || common::scrape(&worker_metrics)["wool_worker_idle_polls_total"];
    let dir = tempfile::tempdir().unwrap();
    let scaler = ScalerProcess::start_with(
        &["--tls-files-dir".into(), dir.path().display().to_string()],
        &[],
    );
    let meta = [("targets", worker.address.as_str()), ("maxSweepAge", "0")];
    let streams = [scaler.stream("a", &meta), scaler.stream("b", &meta)];
    for stream in &streams {
        let _ = stream.next(Duration::from_secs(10));
    }
    let counting = Instant::now();
    let at_start = polls();
    std::thread::sleep(Duration::from_secs(2));
    let during = polls() - at_start;
    let seconds = counting.elapsed().as_secs_f64();
    drop(streams);
    eprintln!("two streams, maxSweepAge 0: {during} polls in {seconds:.1} s");
    // One sweep per 250 ms turn, shared: 8 in 2 s (a few more for the scrapes' timing).
    assert!(
        during <= 4.0 * seconds + 4.0,
        "{during} polls in {seconds:.1} s"
    );

    let frozen = WorkerProcess::plaintext();
    frozen.freeze();
    let targets = format!("{},{}", worker.address, frozen.address);
    let sweeps_ok = |metrics: &std::collections::HashMap<String, f64>| {
        metrics
            .get(r#"wool_scaler_sweeps_total{outcome="ok"}"#)
            .copied()
            .unwrap_or(0.0)
    };
    let sweeps_before = sweeps_ok(&common::scrape(&scaler.metrics));
    let address = format!("http://{}", scaler.address);
    let answers = common::runtime().block_on(async {
        let channel = tonic::transport::Channel::from_shared(address)
            .unwrap()
            .connect()
            .await
            .unwrap();
        let calls = (0..20).map(|_| {
            let mut client = ExternalScalerClient::new(channel.clone());
            let reference = ScaledObjectRef {
                name: "frozen".into(),
                namespace: "default".into(),
                scaler_metadata: [
                    ("targets", targets.as_str()),
                    ("maxSweepAge", "0"),
                    ("sweepTimeout", "1s"),
                    ("idleThreshold", "0"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            };
            async move {
                let started = Instant::now();
                let answer = client
                    .get_metrics(GetMetricsRequest {
                        scaled_object_ref: Some(reference),
                        metric_name: libwool::scaler::METRIC_NAME.into(),
                    })
                    .await
                    .map(|a| a.into_inner().metric_values[0].metric_value_float);
                (answer, started.elapsed())
            }
        });
        futures_util::future::join_all(calls).await
    });
    frozen.thaw();
    let slowest = answers.iter().map(|(_, took)| *took).max().unwrap();
    for (answer, _) in &answers {
        // The idle worker counts 0, the frozen one (unreachable) 1.
        assert_eq!(answer.as_ref().unwrap(), &1.0, "{answers:?}");
    }
    let sweeps = sweeps_ok(&common::scrape(&scaler.metrics)) - sweeps_before;
    eprintln!("20 concurrent calls, a frozen worker: {sweeps} sweeps, slowest call {slowest:?}");
    assert!(sweeps <= 2.0, "{sweeps} sweeps for 20 concurrent calls");
    // One shared sweep of at most 1 s, not twenty in a row.
    assert!(
        slowest < Duration::from_secs(5),
        "calls queued: slowest {slowest:?}"
    );

    let fifo = dir.path().join("ca.pem");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    let fifo = fifo.display().to_string();
    for path in [fifo.as_str(), "/dev/zero"] {
        let hostile = [("targets", worker.address.as_str()), ("workerTlsCa", path)];
        let answer = scaler.poll("hostile", &hostile);
        assert_eq!(answer["error"]["code"], "InvalidArgument", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains("cannot be used"), "{message}");
    }
    let plain = [("targets", worker.address.as_str()), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("after", &plain), (0.0, false));
}

/// A ScaledObjectRef in `namespace` named `name` with this metadata (for tonic's client).
fn reference(
    namespace: &str,
    name: &str,
    meta: &[(&str, &str)],
) -> libwool::protocol::externalscaler::ScaledObjectRef {
    libwool::protocol::externalscaler::ScaledObjectRef {
        name: name.into(),
        namespace: namespace.into(),
        scaler_metadata: meta
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    }
}

/// `count` plaintext connections to the scaler (HTTP/2 allows a server 200 streams at once on
/// one connection by default: many streams need several).
async fn scaler_channels(address: &str, count: usize) -> Vec<tonic::transport::Channel> {
    let mut channels = Vec::new();
    for _ in 0..count {
        channels.push(
            tonic::transport::Channel::from_shared(format!("http://{address}"))
                .unwrap()
                .connect()
                .await
                .unwrap(),
        );
    }
    channels
}

/// GetMetrics for `reference` over `channel`: the metric, or the status.
async fn get_metrics(
    channel: &tonic::transport::Channel,
    reference: libwool::protocol::externalscaler::ScaledObjectRef,
) -> Result<f64, tonic::Status> {
    use libwool::protocol::externalscaler::external_scaler_client::ExternalScalerClient;
    use libwool::protocol::externalscaler::GetMetricsRequest;
    ExternalScalerClient::new(channel.clone())
        .get_metrics(GetMetricsRequest {
            scaled_object_ref: Some(reference),
            metric_name: libwool::scaler::METRIC_NAME.into(),
        })
        .await
        .map(|answer| answer.into_inner().metric_values[0].metric_value_float)
}

/// Opens StreamIsActive for each reference, spread over `channels`: the open streams (kept
/// open while held) or each refusal's status.
async fn open_streams(
    channels: &[tonic::transport::Channel],
    references: Vec<libwool::protocol::externalscaler::ScaledObjectRef>,
) -> Vec<Result<tonic::Streaming<libwool::protocol::externalscaler::IsActiveResponse>, tonic::Status>>
{
    use libwool::protocol::externalscaler::external_scaler_client::ExternalScalerClient;
    let opens = references.into_iter().enumerate().map(|(i, reference)| {
        let mut client = ExternalScalerClient::new(channels[i % channels.len()].clone());
        async move {
            client
                .stream_is_active(reference)
                .await
                .map(|r| r.into_inner())
        }
    });
    let mut opened = Vec::new();
    // In batches: a few hundred at once, not all.
    let mut opens = opens.peekable();
    while opens.peek().is_some() {
        let batch: Vec<_> = opens.by_ref().take(200).collect();
        opened.extend(futures_util::future::join_all(batch).await);
    }
    opened
}

/// Given metadata whose durations or numbers overflow (`idleThreshold`
/// `18446744073709551615s`, `maxSweepAge` `18446744073709551615s` or beyond an hour,
/// `sweepTimeout` beyond a minute, `port` 99999), then every call of KEDA's client gets
/// INVALID_ARGUMENT naming the key (never an internal error or a dropped connection from a
/// panic), and the scaler keeps serving.
#[test]
fn overflowing_durations_and_numbers_are_invalid_argument() {
    let scaler = ScalerProcess::start();
    let worker = WorkerProcess::plaintext();
    let target = worker.address.as_str();
    for (meta, says) in [
        (
            vec![
                ("targets", target),
                ("maxSweepAge", "18446744073709551615s"),
            ],
            "maxSweepAge",
        ),
        (
            vec![
                ("targets", target),
                ("idleThreshold", "18446744073709551615s"),
            ],
            "idleThreshold",
        ),
        (
            vec![("targets", target), ("idleThreshold", "1e30s")],
            "idleThreshold",
        ),
        (
            vec![("targets", target), ("maxSweepAge", "1000000h")],
            "maxSweepAge",
        ),
        (
            vec![
                ("targets", target),
                ("sweepTimeout", "18446744073709551615s"),
            ],
            "sweepTimeout",
        ),
        (vec![("dnsName", "localhost"), ("port", "99999")], "port"),
    ] {
        // Twice: the second call finds the first one's census (an overflow in `at + age`).
        for _ in 0..2 {
            let answer = scaler.poll("overflow", &meta);
            assert_eq!(
                answer["error"]["code"], "InvalidArgument",
                "{meta:?}: {answer}"
            );
            let message = answer["error"]["message"].as_str().unwrap();
            assert!(message.contains(says), "{meta:?}: {message}");
        }
    }
    let good = [("targets", target), ("idleThreshold", "0")];
    assert_eq!(scaler.busy("good", &good), (0.0, false));
}

/// Given one namespace opening StreamIsActive for 1,100 distinct fleets (the same unreachable
/// target under 1,100 sweep deadlines), then at most 64 are opened and the rest are
/// RESOURCE_EXHAUSTED saying why; a ScaledObject of another namespace naming a new fleet is
/// still answered (before these bounds, the streams held all 1,024 fleet slots and it got
/// UNAVAILABLE).
#[test]
fn one_namespace_cannot_hold_every_fleet() {
    let scaler = ScalerProcess::start();
    let worker = WorkerProcess::plaintext();
    let runtime = common::runtime();
    runtime.block_on(async {
        let channels = scaler_channels(&scaler.address, 8).await;
        let timeouts: Vec<String> = (0..1100).map(|i| format!("{}ms", 100 + i)).collect();
        let references = timeouts
            .iter()
            .enumerate()
            .map(|(i, timeout)| {
                reference(
                    "hog",
                    &format!("so-{i}"),
                    &[
                        ("targets", "127.0.0.1:1"),
                        ("maxSweepAge", "1h"),
                        ("sweepTimeout", timeout),
                    ],
                )
            })
            .collect();
        let opened = open_streams(&channels, references).await;
        let open = opened.iter().filter(|o| o.is_ok()).count();
        let refused: Vec<&tonic::Status> = opened.iter().filter_map(|o| o.as_ref().err()).collect();
        eprintln!("one namespace, 1,100 fleets: {open} streams opened");
        assert!(open <= 64, "{open} streams opened");
        assert!(!refused.is_empty());
        for status in &refused {
            assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
            assert!(status.message().contains("\"hog\""), "{status:?}");
        }
        let other = reference(
            "other",
            "workers",
            &[("targets", worker.address.as_str()), ("idleThreshold", "0")],
        );
        assert_eq!(get_metrics(&channels[0], other).await.unwrap(), 0.0);
        drop(opened);
    });
}

/// Given 1,024 streams open on ONE connection, as KEDA's operator holds them (16 namespaces of
/// 64, one fleet), when one more namespace opens a stream, then it is RESOURCE_EXHAUSTED naming
/// the bound, while a GetMetrics of another ScaledObject on that same connection is still
/// answered (not queued behind the streams); once the streams close, a stream opens again.
#[test]
fn streams_past_the_total_are_resource_exhausted_while_calls_are_answered() {
    let scaler = ScalerProcess::start();
    let worker = WorkerProcess::plaintext();
    let meta = [
        ("targets", worker.address.as_str()),
        ("maxSweepAge", "1h"),
        ("idleThreshold", "0"),
    ];
    common::runtime().block_on(async {
        let channels = scaler_channels(&scaler.address, 1).await;
        let references = (0..1024)
            .map(|i| reference(&format!("ns-{}", i % 16), &format!("so-{i}"), &meta))
            .collect();
        let opened = open_streams(&channels, references).await;
        for outcome in &opened {
            assert!(outcome.is_ok(), "{:?}", outcome.as_ref().err());
        }
        let more = tokio::time::timeout(
            Duration::from_secs(10),
            open_streams(&channels, vec![reference("late", "so", &meta)]),
        )
        .await
        .expect("a stream queued behind the others on their connection");
        let status = more.into_iter().next().unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(status.message().contains("1024 streams"), "{status:?}");
        let call = reference("late", "polled", &meta);
        let answered =
            tokio::time::timeout(Duration::from_secs(10), get_metrics(&channels[0], call))
                .await
                .expect("a call queued behind the streams on their connection");
        assert_eq!(answered.unwrap(), 0.0);
        drop(opened);
        // The scaler sees the streams end (the client resets them) and frees their slots.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let again = open_streams(&channels, vec![reference("late", "so", &meta)]).await;
            if again[0].is_ok() {
                break;
            }
            assert!(Instant::now() < deadline, "no stream slot came back");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// Given a scaler with `--tls-files-dir D`, when metadata names as `workerTlsCa` a file in D
/// that is not PEM, a missing file in D, a directory in D, a FIFO in D, an unreadable file in D
/// (when not run as root), a symbolic link in D to a CA outside it, a `..` path out of D, and a
/// readable CA outside D, then each is INVALID_ARGUMENT with the same message (no "No such
/// file" or "Permission denied", no path, nothing to tell an existing file from a missing one),
/// the log says why; a CA in D reaches the worker.
/// Without the flag, no metadata TLS file is taken.
#[test]
fn tls_files_outside_the_directory_or_unusable_are_refused_alike() {
    let pki = common::Pki::generate();
    let worker = WorkerProcess::spawn(&pki.one_way_args());
    let allowed = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let ca_pem = std::fs::read(&pki.ca_path).unwrap();
    let good = allowed.path().join("ca.pem");
    std::fs::write(&good, &ca_pem).unwrap();
    let outside_ca = outside.path().join("ca.pem");
    std::fs::write(&outside_ca, &ca_pem).unwrap();
    std::fs::create_dir(allowed.path().join("dir.pem")).unwrap();
    let fifo = allowed.path().join("fifo.pem");
    let name = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
    std::os::unix::fs::symlink(&outside_ca, allowed.path().join("link.pem")).unwrap();
    let unreadable = allowed.path().join("unreadable.pem");
    std::fs::write(&unreadable, &ca_pem).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&unreadable, std::fs::Permissions::from_mode(0o000)).unwrap();
    let escape = format!(
        "{}/../{}/ca.pem",
        allowed.path().display(),
        outside.path().file_name().unwrap().to_str().unwrap()
    );
    let garbage = allowed.path().join("garbage.pem");
    std::fs::write(&garbage, b"not PEM at all").unwrap();
    let mut hostile: Vec<String> = vec![
        garbage.display().to_string(),
        allowed.path().join("missing.pem").display().to_string(),
        allowed.path().join("dir.pem").display().to_string(),
        fifo.display().to_string(),
        allowed.path().join("link.pem").display().to_string(),
        escape,
        outside_ca.display().to_string(),
    ];
    // SAFETY: no arguments, no memory.
    if unsafe { libc::geteuid() } != 0 {
        hostile.push(unreadable.display().to_string());
    }
    let scaler = ScalerProcess::start_with(
        &[
            "--tls-files-dir".into(),
            allowed.path().display().to_string(),
        ],
        &[],
    );
    let server_name = "localhost";
    let mut messages = std::collections::BTreeSet::new();
    for path in &hostile {
        let meta = [
            ("targets", worker.address.as_str()),
            ("workerTlsCa", path.as_str()),
            ("workerTlsServerName", server_name),
        ];
        let answer = scaler.poll("hostile", &meta);
        assert_eq!(
            answer["error"]["code"], "InvalidArgument",
            "{path}: {answer}"
        );
        let message = answer["error"]["message"].as_str().unwrap();
        messages.insert(message.replace(&format!("{path:?}"), "PATH"));
    }
    assert_eq!(messages.len(), 1, "the refusals differ: {messages:#?}");
    let message = messages.into_iter().next().unwrap();
    for leak in [
        "No such file",
        "Permission denied",
        "regular file in",
        "outside",
    ] {
        if leak != "regular file in" {
            assert!(!message.contains(leak), "{message}");
        }
    }
    common::expect_log_line(&scaler.log, "refusing a TLS file", Duration::from_secs(5));
    let good_meta = [
        ("targets", worker.address.as_str()),
        ("workerTlsCa", good.to_str().unwrap()),
        ("idleThreshold", "0"),
    ];
    assert_eq!(scaler.busy("good", &good_meta), (0.0, false));

    let unset = ScalerProcess::start();
    let answer = unset.poll("unset", &good_meta);
    assert_eq!(answer["error"]["code"], "InvalidArgument", "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("--tls-files-dir"), "{message}");
}

/// Given a ScaledObject whose namespace and name are 200 bytes each, then its `scaledobject`
/// label in /metrics is cut to 128 bytes (ending with a hash); a 10 KB name is INVALID_ARGUMENT
/// and never becomes a label.
#[test]
fn long_names_are_cut_in_metric_labels() {
    let scaler = ScalerProcess::start();
    let worker = WorkerProcess::plaintext();
    let meta = [("targets", worker.address.as_str()), ("idleThreshold", "0")];
    let long_ns = "n".repeat(200);
    let long_name = "s".repeat(200);
    let huge = "h".repeat(10_000);
    common::runtime().block_on(async {
        let channels = scaler_channels(&scaler.address, 1).await;
        let answer = get_metrics(&channels[0], reference(&long_ns, &long_name, &meta)).await;
        assert_eq!(answer.unwrap(), 0.0);
        let status = get_metrics(&channels[0], reference("default", &huge, &meta))
            .await
            .unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
    });
    let metrics = common::scrape(&scaler.metrics);
    let series: Vec<&String> = metrics
        .keys()
        .filter(|k| k.starts_with("wool_scaler_busy_workers{"))
        .collect();
    assert_eq!(series.len(), 1, "{series:?}");
    let label = series[0]
        .split("scaledobject=\"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap();
    assert!(label.len() <= 128, "a label of {} bytes", label.len());
    assert!(label.starts_with("nnnn"), "{label}");
    assert!(!metrics.keys().any(|k| k.contains("hhhhhhhh")));
}
