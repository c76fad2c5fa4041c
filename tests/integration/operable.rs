//! The worker as operators' tools see it: grpc.health.v1 and server reflection, checked with
//! the clients those crates ship (tonic-health's `HealthClient`, tonic-reflection's reflection
//! clients) over real sockets against `wool-worker` processes.

use crate::common;

use std::time::{Duration, Instant};

use common::{Pki, WorkerProcess};
use libwool::Grace;
use libwool::WorkerConnection;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const WORKER_SERVICE: &str = "wool.runtime.protobuf.wire.Worker";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn channel(address: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

async fn status(
    client: &mut HealthClient<tonic::transport::Channel>,
    service: &str,
) -> Result<ServingStatus, tonic::Status> {
    let answer = client
        .check(HealthCheckRequest {
            service: service.into(),
        })
        .await?;
    Ok(answer.into_inner().status())
}

/// Given a worker serving health on its own port and on a plaintext side port, when a stop
/// with a grace begins while a task is in flight, then both report SERVING before, NOT_SERVING
/// for the server and the Worker service during the drain (the task still running), and an
/// unknown service is NOT_FOUND.
#[test]
fn health_is_serving_until_a_stop_begins_then_not_serving_during_the_drain() {
    let health_address = common::unused_local_address();
    let mut worker = WorkerProcess::spawn(&["--health-listen".into(), health_address.clone()]);
    let runtime = runtime();
    runtime.block_on(async {
        let mut main = HealthClient::new(channel(&worker.address).await);
        let mut side = HealthClient::new(channel(&health_address).await);
        for client in [&mut main, &mut side] {
            assert_eq!(status(client, "").await.unwrap(), ServingStatus::Serving);
            assert_eq!(
                status(client, WORKER_SERVICE).await.unwrap(),
                ServingStatus::Serving
            );
            let unknown = status(client, "no.such.Service").await.unwrap_err();
            assert_eq!(unknown.code(), tonic::Code::NotFound);
        }
        let connection = WorkerConnection::new(&worker.address).unwrap();
        let dispatcher = WorkerConnection::new(&worker.address).unwrap();
        let task = tokio::spawn(async move {
            dispatcher
                .dispatch("sleep", b"2.0".to_vec(), Some(Duration::from_secs(20)))
                .await
        });
        while connection.idle(Some(Duration::from_secs(2))).await != Ok(0.0) {
            assert!(
                !task.is_finished(),
                "precondition not met: the 2 s task ended before a poll saw it in flight"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let stopper = WorkerConnection::new(&worker.address).unwrap();
        let stop = tokio::spawn(async move {
            stopper
                .stop(
                    Grace::Within(Duration::from_secs(10)),
                    Some(Duration::from_secs(20)),
                )
                .await
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let overall = status(&mut side, "").await.unwrap();
            if overall == ServingStatus::NotServing {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "health never turned NOT_SERVING (30 s)"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(
            status(&mut side, WORKER_SERVICE).await.unwrap(),
            ServingStatus::NotServing
        );
        assert_eq!(
            status(&mut main, "").await.unwrap(),
            ServingStatus::NotServing
        );
        assert!(!task.is_finished(), "the drain is still running its task");
        assert!(task.await.unwrap().is_ok(), "the drained task finishes");
        stop.await.unwrap().unwrap();
    });
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

/// Given a mutual-TLS worker with a plaintext health port, when a plaintext prober asks, then
/// it is answered there (Kubernetes gRPC probes cannot speak TLS).
#[test]
fn a_tls_worker_answers_plaintext_probes_on_its_health_port() {
    let pki = Pki::generate();
    let health_address = common::unused_local_address();
    let mut args = pki.mutual_args();
    args.extend(["--health-listen".into(), health_address.clone()]);
    let _worker = WorkerProcess::spawn(&args);
    runtime().block_on(async {
        let mut side = HealthClient::new(channel(&health_address).await);
        assert_eq!(
            status(&mut side, WORKER_SERVICE).await.unwrap(),
            ServingStatus::Serving
        );
    });
}

/// Given a worker, when a reflection client (v1, then v1alpha) lists its services and asks for
/// the file defining the Worker service, then it lists Worker, Health and reflection, and the
/// descriptor names the `idle` method: grpcurl needs nothing more.
#[test]
fn server_reflection_lists_and_describes_the_services() {
    use tonic_reflection::pb::{v1, v1alpha};
    let worker = WorkerProcess::plaintext();
    runtime().block_on(async {
        let mut client = v1::server_reflection_client::ServerReflectionClient::new(
            channel(&worker.address).await,
        );
        let requests = tokio_stream::iter([
            v1::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(v1::server_reflection_request::MessageRequest::ListServices(
                    String::new(),
                )),
            },
            v1::ServerReflectionRequest {
                host: String::new(),
                message_request: Some(
                    v1::server_reflection_request::MessageRequest::FileContainingSymbol(
                        WORKER_SERVICE.into(),
                    ),
                ),
            },
        ]);
        let mut answers = client
            .server_reflection_info(requests)
            .await
            .unwrap()
            .into_inner();
        let listed = answers.message().await.unwrap().unwrap();
        let Some(v1::server_reflection_response::MessageResponse::ListServicesResponse(list)) =
            listed.message_response
        else {
            panic!("not a service list: {listed:?}");
        };
        let names: Vec<String> = list.service.into_iter().map(|s| s.name).collect();
        for want in [
            WORKER_SERVICE,
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
        ] {
            assert!(names.iter().any(|n| n == want), "{want} not in {names:?}");
        }
        let file = answers.message().await.unwrap().unwrap();
        let Some(v1::server_reflection_response::MessageResponse::FileDescriptorResponse(files)) =
            file.message_response
        else {
            panic!("not a file descriptor: {file:?}");
        };
        use prost::Message;
        let descriptor =
            prost_types::FileDescriptorProto::decode(files.file_descriptor_proto[0].as_slice())
                .unwrap();
        let service = descriptor
            .service
            .iter()
            .find(|s| s.name() == "Worker")
            .unwrap();
        let methods: Vec<&str> = service.method.iter().map(|m| m.name()).collect();
        assert_eq!(methods, ["dispatch", "stop", "idle"]);

        let mut old = v1alpha::server_reflection_client::ServerReflectionClient::new(
            channel(&worker.address).await,
        );
        let requests = tokio_stream::iter([v1alpha::ServerReflectionRequest {
            host: String::new(),
            message_request: Some(
                v1alpha::server_reflection_request::MessageRequest::ListServices(String::new()),
            ),
        }]);
        let mut answers = old
            .server_reflection_info(requests)
            .await
            .unwrap()
            .into_inner();
        let listed = answers.message().await.unwrap().unwrap();
        assert!(format!("{listed:?}").contains(WORKER_SERVICE), "{listed:?}");
    });
}

/// Given a worker with a metrics port, when tasks run, finish, fail, are cancelled and idle is
/// polled, then a scrape over HTTP shows each counter and the gauges (in flight, idle seconds,
/// stopping) as they are.
#[test]
fn metrics_scrapes_show_tasks_polls_and_the_stop_state() {
    let metrics_address = common::unused_local_address();
    let mut worker = WorkerProcess::spawn(&["--metrics-listen".into(), metrics_address.clone()]);
    let runtime = runtime();
    let before = common::scrape(&metrics_address);
    assert_eq!(before["wool_worker_tasks_in_flight"], 0.0);
    assert_eq!(before["wool_worker_tasks_started_total"], 0.0);
    assert_eq!(before["wool_worker_stopping"], 0.0);
    assert!(before["wool_worker_idle_seconds"] >= 0.0);
    runtime.block_on(async {
        let connection = WorkerConnection::new(&worker.address).unwrap();
        for _ in 0..3 {
            connection.idle(Some(Duration::from_secs(5))).await.unwrap();
        }
        connection
            .dispatch("echo", b"hi".to_vec(), Some(Duration::from_secs(5)))
            .await
            .unwrap();
        let failed = connection
            .dispatch(
                "sleep",
                b"not a number".to_vec(),
                Some(Duration::from_secs(5)),
            )
            .await;
        assert!(failed.is_err(), "{failed:?}");
        // One cut short by its caller's deadline: cancelled at the worker.
        let cut = connection
            .dispatch("sleep", b"30".to_vec(), Some(Duration::from_millis(300)))
            .await;
        assert!(cut.is_err());
        let dispatcher = WorkerConnection::new(&worker.address).unwrap();
        let running = tokio::spawn(async move {
            dispatcher
                .dispatch("sleep", b"30".to_vec(), Some(Duration::from_secs(40)))
                .await
        });
        while connection.idle(Some(Duration::from_secs(2))).await != Ok(0.0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let during = tokio::task::spawn_blocking({
            let address = metrics_address.clone();
            move || common::scrape(&address)
        })
        .await
        .unwrap();
        assert_eq!(during["wool_worker_tasks_in_flight"], 1.0);
        assert_eq!(during["wool_worker_idle_seconds"], 0.0);
        assert_eq!(during["wool_worker_tasks_started_total"], 4.0);
        assert_eq!(during["wool_worker_tasks_finished_total"], 1.0);
        assert_eq!(during["wool_worker_tasks_failed_total"], 1.0);
        assert_eq!(during["wool_worker_tasks_cancelled_total"], 1.0);
        assert!(during["wool_worker_idle_polls_total"] >= 4.0);
        // A stop with no grace cancels the running task.
        let stopper = WorkerConnection::new(&worker.address).unwrap();
        stopper
            .stop(Grace::None, Some(Duration::from_secs(10)))
            .await
            .unwrap();
        assert!(running.await.unwrap().is_err());
    });
    // The metrics port closes with the worker; the last counts were taken before.
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

/// Given a Rust program embedding a worker, then the same exposition is at hand without a port.
#[test]
fn an_embedded_worker_gives_its_metrics_text() {
    runtime().block_on(async {
        let worker = libwool::worker::Worker::builder().serve().await.unwrap();
        let connection = WorkerConnection::new(worker.address()).unwrap();
        connection.idle(Some(Duration::from_secs(5))).await.unwrap();
        let text = worker.metrics_text();
        assert_eq!(
            common::samples(&text)["wool_worker_idle_polls_total"],
            1.0,
            "{text}"
        );
        assert!(
            text.contains("# TYPE wool_worker_tasks_in_flight gauge"),
            "{text}"
        );
        assert_eq!(
            common::samples(&text)["wool_worker_stopping"],
            0.0,
            "{text}"
        );
        worker.stop(Grace::None).await;
        let text = worker.metrics_text();
        assert_eq!(
            common::samples(&text)["wool_worker_stopping"],
            1.0,
            "{text}"
        );
    });
}

/// Given `--log-format json`, when a worker starts, runs a failing task and is stopped with a
/// grace, then its stderr is JSON lines: its listen address, the task's failure (with the
/// routine's name and the task's id), the stop with its grace, and the drain.
#[test]
fn json_logs_tell_start_failures_stop_and_drain() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let mut child = Command::new(common::wool_worker_bin())
        .args(["--log-format", "json", "--log-level", "info"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut address = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut address)
        .unwrap();
    let address = address.trim().to_owned();
    runtime().block_on(async {
        let connection = WorkerConnection::new(&address).unwrap();
        let failed = connection
            .dispatch("sleep", b"soon".to_vec(), Some(Duration::from_secs(5)))
            .await;
        assert!(failed.is_err());
        connection
            .stop(
                Grace::Within(Duration::from_secs(2)),
                Some(Duration::from_secs(10)),
            )
            .await
            .unwrap();
    });
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&output.stderr)
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON: {line:?}: {e}"))
        })
        .collect();
    let find = |message: &str| {
        lines
            .iter()
            .find(|l| {
                l["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with(message))
            })
            .unwrap_or_else(|| panic!("no {message:?} line in {lines:?}"))
            .clone()
    };
    let listening = find("worker listening");
    assert_eq!(listening["address"], address.as_str());
    assert_eq!(listening["level"], "INFO");
    let failure = find("task failed");
    assert_eq!(failure["level"], "WARN");
    assert_eq!(failure["span"]["routine"], "sleep");
    assert!(
        failure["span"]["id"]
            .as_str()
            .is_some_and(|id| id.len() == 36),
        "{failure}"
    );
    assert!(failure["error"].as_str().is_some(), "{failure}");
    let stop = find("stop begun");
    assert!(
        stop["grace"].as_str().is_some_and(|g| g.contains("2s")),
        "{stop}"
    );
    find("drained");
}

/// The pinned grpcurl (`scripts/ensure-grpcurl.sh` builds it with `go install` on first use).
fn grpcurl() -> std::path::PathBuf {
    let output = std::process::Command::new(common::repo().join("scripts/ensure-grpcurl.sh"))
        .stdin(std::process::Stdio::null())
        .output()
        .expect("scripts/ensure-grpcurl.sh runs");
    assert!(
        output.status.success(),
        "scripts/ensure-grpcurl.sh failed (it needs go and the Go module proxy):\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::path::PathBuf::from(String::from_utf8(output.stdout).unwrap().trim())
}

/// Given a worker, when the real grpcurl (no .proto file given) lists, describes and calls it,
/// then it sees the Worker, Health and reflection services, the Worker's three methods, and
/// gets an idle reading back.
#[test]
fn grpcurl_lists_describes_and_calls_the_worker_through_reflection() {
    let grpcurl = grpcurl();
    let worker = WorkerProcess::plaintext();
    std::thread::sleep(Duration::from_millis(100));
    let run = |args: &[&str]| {
        let output = std::process::Command::new(&grpcurl)
            .args(["-plaintext", "-max-time", "10"])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "grpcurl {args:?}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    let listed = run(&[&worker.address, "list"]);
    for want in [
        WORKER_SERVICE,
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(listed.lines().any(|l| l == want), "{want} not in {listed}");
    }
    let described = run(&[&worker.address, "describe", WORKER_SERVICE]);
    for method in ["rpc dispatch", "rpc stop", "rpc idle"] {
        assert!(described.contains(method), "{described}");
    }
    let answer = run(&[
        "-d",
        "{}",
        &worker.address,
        &format!("{WORKER_SERVICE}/idle"),
    ]);
    let idle: serde_json::Value = serde_json::from_str(&answer).unwrap();
    assert!(
        idle["seconds"].as_f64().is_some_and(|s| s > 0.0),
        "{answer}"
    );
    let health = run(&[&worker.address, "grpc.health.v1.Health/Check"]);
    assert!(health.contains("SERVING"), "{health}");
}

/// Whether something still accepts TCP connections at `address`, waiting up to 2 s for it to
/// stop (a stop is asynchronous).
async fn still_listening(address: &str) -> bool {
    let until = Instant::now() + Duration::from_secs(2);
    while Instant::now() < until {
        if tokio::net::TcpStream::connect(address).await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// Given an address already taken, when a worker is started with a health port that binds and
/// that address as its main one, then the start fails with the bind error and the health port
/// it had opened is closed (it answered SERVING for a worker that never started); likewise a
/// scaler whose metrics address is taken closes its health port.
#[test]
fn a_start_that_fails_closes_the_side_ports_it_opened() {
    runtime().block_on(async {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let taken_address = taken.local_addr().unwrap().to_string();

        let health = common::unused_local_address();
        let error = libwool::worker::Worker::builder()
            .listen(taken_address.parse().unwrap())
            .health_listen(health.clone())
            .serve()
            .await
            .expect_err("the main address is taken");
        assert!(
            matches!(error, libwool::worker::WorkerError::Bind { .. }),
            "{error}"
        );
        assert!(
            !still_listening(&health).await,
            "the worker's health port was left open"
        );

        let health = common::unused_local_address();
        let error = libwool::scaler::Scaler::builder()
            .listen("127.0.0.1:0")
            .health_listen(health.clone())
            .metrics_listen(taken_address.clone())
            .serve()
            .await
            .expect_err("the metrics address is taken");
        assert!(
            matches!(error, libwool::scaler::ScalerError::Bind { .. }),
            "{error}"
        );
        assert!(
            !still_listening(&health).await,
            "the scaler's health port was left open"
        );
        drop(taken);
    });
}
