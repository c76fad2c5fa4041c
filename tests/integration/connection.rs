//! WorkerConnection against real workers over real sockets.
//! Each test says what it arranges (Given), does (When) and expects (Then).

use crate::common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{unused_local_address, Pki};
use libwool::connection::{ErrorKind, WorkerConnection, WorkerCredentials};
use libwool::worker::{RoutineRegistry, ServerCredentials, Worker, WorkerHandle};
use libwool::Grace;

const SECOND: Option<Duration> = Some(Duration::from_secs(5));

async fn reference_worker() -> WorkerHandle {
    Worker::builder()
        .routines(RoutineRegistry::default().with_reference_routines())
        .serve()
        .await
        .expect("worker serves")
}

async fn tls_worker(credentials: ServerCredentials) -> WorkerHandle {
    Worker::builder()
        .credentials(credentials)
        .routines(RoutineRegistry::default().with_reference_routines())
        .serve()
        .await
        .expect("TLS worker serves")
}

/// Polls twice, 100 ms apart; asserts the reading accrues from start-up.
async fn assert_idle_accrues(conn: &WorkerConnection, started: Instant) {
    let first = conn.idle(SECOND).await.expect("first idle poll");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = conn.idle(SECOND).await.expect("second idle poll");
    assert!(first >= 0.0, "{first}");
    assert!(
        second >= first + 0.09,
        "idle must accrue: {first} then {second}"
    );
    assert!(
        second <= started.elapsed().as_secs_f64(),
        "idle counts from start-up at the earliest"
    );
}

/// Spawns `n` `sleep` dispatches of `seconds` and waits (30 s at most) until the worker counts
/// them in flight. `seconds` must outlast dispatching all `n`: under ThreadSanitizer on a busy
/// 2-core machine, dispatching 100 took longer than 0.4 s, so the first finished before the last
/// began and the count never reached 100. A sleeper that ends first fails the test saying so.
async fn start_sleepers(
    worker: &WorkerHandle,
    n: usize,
    seconds: &str,
) -> Vec<tokio::task::JoinHandle<Result<Vec<u8>, libwool::Error>>> {
    let conn = Arc::new(WorkerConnection::new(worker.address()).unwrap());
    let tasks: Vec<_> = (0..n)
        .map(|_| {
            let conn = Arc::clone(&conn);
            let args = seconds.as_bytes().to_vec();
            tokio::spawn(async move { conn.dispatch("sleep", args, None).await })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while worker.in_flight() < n as u64 {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} in flight",
            worker.in_flight()
        );
        assert!(
            tasks.iter().all(|task| !task.is_finished()),
            "a {seconds} s sleeper ended before all {n} were in flight ({} were): \
             dispatching them took longer than one sleep",
            worker.in_flight()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tasks
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_plaintext_worker_when_polled_then_idle_accrues_from_startup() {
    let started = Instant::now();
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    assert_idle_accrues(&conn, started).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_mutual_tls_worker_when_polled_with_client_cert_then_idle_accrues() {
    let pki = Pki::generate();
    let started = Instant::now();
    let worker = tls_worker(pki.server_mutual()).await;
    let credentials = pki.client_mutual(&pki.ca_pem, &pki.leaf);
    // Dialing the IP address: verified against the certificate's IP SAN 127.0.0.1.
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    assert_idle_accrues(&conn, started).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_one_way_tls_worker_when_polled_without_client_cert_then_idle_accrues() {
    let pki = Pki::generate();
    let started = Instant::now();
    let worker = tls_worker(ServerCredentials::one_way(
        pki.leaf.cert_pem.clone(),
        pki.leaf.key_pem.clone(),
    ))
    .await;
    let credentials =
        WorkerCredentials::from_pem(pki.ca_pem.as_bytes(), None, None, false, None).unwrap();
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    assert_idle_accrues(&conn, started).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_identity_override_when_dialing_by_ip_then_name_is_verified_instead() {
    let pki = Pki::generate();
    let worker = tls_worker(ServerCredentials::one_way(
        pki.leaf.cert_pem.clone(),
        pki.leaf.key_pem.clone(),
    ))
    .await;
    let port = worker.address().rsplit_once(':').unwrap().1;
    let good =
        WorkerCredentials::from_pem(pki.ca_pem.as_bytes(), None, None, false, Some("localhost"))
            .unwrap();
    let conn =
        WorkerConnection::with_credentials(&format!("127.0.0.1:{port}"), Some(good)).unwrap();
    conn.idle(SECOND)
        .await
        .expect("localhost is a SAN of the worker certificate");
    let bad = WorkerCredentials::from_pem(
        pki.ca_pem.as_bytes(),
        None,
        None,
        false,
        Some("elsewhere.example"),
    )
    .unwrap();
    let conn = WorkerConnection::with_credentials(&format!("127.0.0.1:{port}"), Some(bad)).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_one_task_in_flight_when_polled_then_idle_is_exactly_zero() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    // A task that outlasts any poll, however slow the machine: it is cancelled at the end.
    let tasks = start_sleepers(&worker, 1, "300").await;
    for _ in 0..3 {
        assert_eq!(conn.idle(SECOND).await.unwrap(), 0.0);
    }
    assert_eq!(
        worker.in_flight(),
        1,
        "the task was in flight for every poll"
    );
    conn.stop(Grace::None, SECOND).await.unwrap();
    for task in tasks {
        assert!(task.await.unwrap().is_err(), "the stop cancels the task");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_100_tasks_in_flight_when_polled_then_zero_and_after_drain_counts_from_drain() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await; // idle accrues before the work
    let tasks = start_sleepers(&worker, 100, "3").await;
    assert_eq!(conn.idle(SECOND).await.unwrap(), 0.0);
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    // Counted from start-up it would be 3.3 s or more (0.3 s before the work, 3 s of it).
    let after = conn.idle(SECOND).await.unwrap();
    assert!(
        after > 0.0 && after < 1.5,
        "idle restarts at the drain, not at start-up: {after}"
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(conn.idle(SECOND).await.unwrap() > after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_caller_cancels_mid_task_then_in_flight_entry_is_released() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    // The caller's deadline expires while the routine sleeps: the stream is reset.
    let error = conn
        .dispatch("sleep", b"30".to_vec(), Some(Duration::from_millis(200)))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while worker.in_flight() > 0 {
        assert!(
            Instant::now() < deadline,
            "in-flight entry never released (30 s)"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert!(
        conn.idle(SECOND).await.unwrap() > 0.0,
        "idle must not stay stuck at 0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_long_task_when_stopped_with_grace_zero_then_cancelled_at_once() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    let tasks = start_sleepers(&worker, 1, "30").await;
    let begun = Instant::now();
    conn.stop(Grace::None, SECOND).await.unwrap();
    assert!(
        begun.elapsed() < Duration::from_secs(3),
        "grace 0 cancels at once: {:?}",
        begun.elapsed()
    );
    let outcome = tasks.into_iter().next().unwrap().await.unwrap();
    let error = outcome.expect_err("the cancelled task reports an error");
    assert!(error.message().contains("cancelled"), "{error}");
    tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_short_task_when_stopped_with_longer_grace_then_caller_gets_result() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    let tasks = start_sleepers(&worker, 1, "0.3").await;
    conn.stop(
        Grace::Within(Duration::from_secs(5)),
        Some(Duration::from_secs(10)),
    )
    .await
    .unwrap();
    assert_eq!(
        tasks.into_iter().next().unwrap().await.unwrap().unwrap(),
        b"0.3"
    );
    tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_task_longer_than_grace_when_stopped_then_cancelled_after_grace() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    let tasks = start_sleepers(&worker, 1, "30").await;
    let begun = Instant::now();
    conn.stop(Grace::Within(Duration::from_millis(300)), SECOND)
        .await
        .unwrap();
    let waited = begun.elapsed();
    assert!(
        waited >= Duration::from_millis(290) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    assert!(tasks.into_iter().next().unwrap().await.unwrap().is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_negative_grace_when_stopped_then_waits_for_the_task() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    // The task sleeps 0.6 s from its dispatch, which comes after `dispatched`: a stop that
    // waits for it answers 0.6 s after `dispatched` at the earliest, however slow the machine.
    let dispatched = Instant::now();
    let tasks = start_sleepers(&worker, 1, "0.6").await;
    conn.stop(Grace::Unbounded, None).await.unwrap();
    assert!(
        dispatched.elapsed() >= Duration::from_millis(600),
        "stop answered before the drain"
    );
    assert_eq!(
        worker.in_flight(),
        0,
        "the stop answered with the task in flight"
    );
    assert_eq!(
        tasks.into_iter().next().unwrap().await.unwrap().unwrap(),
        b"0.6"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_stop_has_begun_when_dispatching_then_transient_shutting_down() {
    let worker = reference_worker().await;
    let conn = Arc::new(WorkerConnection::new(worker.address()).unwrap());
    let tasks = start_sleepers(&worker, 1, "3").await;
    let stopper = {
        let conn = Arc::clone(&conn);
        tokio::spawn(async move { conn.stop(Grace::Unbounded, None).await })
    };
    // The stop is draining once the worker says so (its `stopping` gauge), whatever the wait.
    let deadline = Instant::now() + Duration::from_secs(30);
    while common::samples(&worker.metrics_text())["wool_worker_stopping"] != 1.0 {
        assert!(Instant::now() < deadline, "the stop never began (30 s)");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let late = conn.dispatch("echo", b"late".to_vec(), SECOND).await;
    assert_eq!(
        worker.in_flight(),
        1,
        "precondition not met: the 3 s task ended before the late dispatch was answered, \
         so the drain was over ({late:?})"
    );
    let error = late.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert_eq!(error.code(), Some(tonic::Code::Unavailable));
    assert!(error.message().contains("shutting down"), "{error}");
    // A second stop is harmless and also answers after the drain.
    conn.stop(Grace::Unbounded, SECOND).await.unwrap();
    stopper.await.unwrap().unwrap();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_polled_worker_when_stopped_then_it_is_unreachable_and_transient() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    conn.idle(SECOND).await.unwrap();
    conn.stop(Grace::None, SECOND).await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .unwrap()
        .unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert_eq!(error.code(), Some(tonic::Code::Unavailable));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_1000_connections_to_one_target_then_one_tcp_connection() {
    let worker = reference_worker().await;
    let conns: Vec<_> = (0..1000)
        .map(|_| WorkerConnection::new(worker.address()).unwrap())
        .collect();
    for conn in &conns {
        conn.idle(SECOND).await.unwrap();
    }
    assert_eq!(worker.accepted_connections(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_wrong_ca_when_polled_then_handshake() {
    let pki = Pki::generate();
    let worker = tls_worker(pki.server_mutual()).await;
    let credentials = pki.client_mutual(&pki.other_ca_pem, &pki.leaf);
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_client_cert_from_unrelated_ca_when_polling_mutual_tls_worker_then_never_success() {
    let pki = Pki::generate();
    let worker = tls_worker(pki.server_mutual()).await;
    let credentials = pki.client_mutual(&pki.ca_pem, &pki.other_leaf);
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    assert!(error.to_string().contains("UnknownCA"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_nothing_listening_when_polled_then_transient_unavailable() {
    let conn = WorkerConnection::new(&unused_local_address()).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert_eq!(error.code(), Some(tonic::Code::Unavailable));
}

/// Given a listener that accepts TCP connections and never writes a byte (the kernel accepts
/// them into its backlog; nothing ever reads or answers), when `idle` (30 s deadline) and
/// `stop` (30 s grace, no deadline) are called over plaintext and TLS with a 1 s connect
/// timeout, then each fails at the connect timeout, long before its deadline or grace:
/// TRANSIENT, UNAVAILABLE, and the message says the worker accepted the connection but never
/// spoke HTTP/2 (plaintext) or never finished the TLS handshake (TLS), within 1.000 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_listener_that_never_speaks_when_polled_or_stopped_then_the_connect_timeout_ends_it(
) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    let pki = Pki::generate();
    let mut options = libwool::connection::ChannelOptions::default();
    options.connect_timeout = Some(Duration::from_secs(1));
    for (tls, says) in [
        (None, "never spoke HTTP/2"),
        (
            Some(
                WorkerCredentials::from_pem(pki.ca_pem.as_bytes(), None, None, false, None)
                    .unwrap(),
            ),
            "did not complete the TLS handshake",
        ),
    ] {
        let conn = WorkerConnection::with_options(&address, tls, options.clone()).unwrap();
        let started = Instant::now();
        let idle = conn.idle(Some(Duration::from_secs(30))).await.unwrap_err();
        let stop = conn
            .stop(Grace::Within(Duration::from_secs(30)), None)
            .await
            .unwrap_err();
        let took = started.elapsed();
        for error in [&idle, &stop] {
            assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
            assert_eq!(error.code(), Some(tonic::Code::Unavailable), "{error}");
            assert!(
                error.message().contains("accepted the connection"),
                "{error}"
            );
            assert!(error.message().contains(says), "{error}");
            assert!(error.message().contains("1.000 s"), "{error}");
        }
        // Two calls, each ended by the 1 s connect timeout; a 30 s deadline or grace otherwise.
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_bad_input_then_invalid_argument_before_any_io() {
    for target in ["", "no-port", "localhost:99999", "http://x:1", "unix:"] {
        let error = WorkerConnection::new(target).unwrap_err();
        assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{target}");
        assert_eq!(error.code(), None);
    }
    let conn = WorkerConnection::new(&unused_local_address()).unwrap();
    let error = conn.idle(Some(Duration::ZERO)).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let error = conn
        .stop(Grace::None, Some(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument);
    let error = conn
        .dispatch("echo", Vec::new(), Some(Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    for seconds in [0.0, -1.0, f64::NAN] {
        assert_eq!(
            wool::timeout_from_seconds(seconds).unwrap_err().kind(),
            ErrorKind::InvalidArgument
        );
    }
    let garbage = WorkerCredentials::from_pem(b"not a pem", None, None, false, None).unwrap_err();
    assert_eq!(garbage.kind(), ErrorKind::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_unknown_routine_when_dispatched_then_refused_at_once_and_worker_keeps_serving() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    let error = conn
        .dispatch("no-such-routine", vec![], SECOND)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Routine, "{error}");
    assert!(error.message().contains("unknown routine"), "{error}");
    assert_eq!(
        conn.dispatch("echo", b"still here".to_vec(), SECOND)
            .await
            .unwrap(),
        b"still here"
    );
    let error = conn
        .dispatch("sleep", b"forever-ish".to_vec(), SECOND)
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Routine);
    assert!(error.message().contains("not a number"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_unix_socket_worker_then_idle_and_stop_work_over_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sock");
    let worker = Worker::builder()
        .listen(format!("unix:{}", path.display()).parse().unwrap())
        .routines(RoutineRegistry::default().with_reference_routines())
        .serve()
        .await
        .unwrap();
    assert_eq!(worker.address(), format!("unix:{}", path.display()));
    for target in [
        format!("unix:{}", path.display()),
        format!("unix://{}", path.display()),
    ] {
        let conn = WorkerConnection::new(&target).unwrap();
        assert!(conn.idle(SECOND).await.unwrap() >= 0.0);
        assert_eq!(
            conn.dispatch("echo", b"uds".to_vec(), SECOND)
                .await
                .unwrap(),
            b"uds"
        );
    }
    WorkerConnection::new(worker.address())
        .unwrap()
        .stop(Grace::None, SECOND)
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(10), worker.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(!path.exists(), "the socket file is removed after the stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_one_connection_when_10000_idle_polls_burst_then_all_succeed() {
    let worker = reference_worker().await;
    let conn = Arc::new(WorkerConnection::new(worker.address()).unwrap());
    let deadline = common::burst_deadline(10_000, 500, |deadline| {
        let conn = Arc::clone(&conn);
        async move { conn.idle(deadline).await }
    })
    .await;
    let begun = Instant::now();
    let polls: Vec<_> = (0..10_000)
        .map(|_| {
            let conn = Arc::clone(&conn);
            tokio::spawn(async move { conn.idle(Some(deadline)).await })
        })
        .collect();
    let mut failures = Vec::new();
    for poll in polls {
        if let Err(error) = poll.await.unwrap() {
            failures.push(error);
        }
    }
    eprintln!("10,000 concurrent idle polls took {:?}", begun.elapsed());
    assert!(
        failures.is_empty(),
        "{} failed, first: {}",
        failures.len(),
        failures[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_worker_without_idle_rpc_when_polled_then_idle_unavailable_not_rpc_error() {
    let (address, server) = common::serve_legacy_worker().await;
    let conn = WorkerConnection::new(&address).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::IdleUnavailable, "{error}");
    assert_eq!(error.code(), Some(tonic::Code::Unimplemented));
    conn.stop(Grace::None, SECOND)
        .await
        .expect("stop still works on a legacy worker");
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_worker_answering_nonsense_readings_then_rpc_error_not_a_reading() {
    for reading in [f64::NAN, -5.0, f64::INFINITY] {
        let (address, server) = common::serve_worker_double(Some(reading)).await;
        let conn = WorkerConnection::new(&address).unwrap();
        let error = conn.idle(SECOND).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Rpc, "{reading}: {error}");
        server.abort();
    }
    let (address, server) = common::serve_worker_double(Some(12.5)).await;
    assert_eq!(
        WorkerConnection::new(&address)
            .unwrap()
            .idle(SECOND)
            .await
            .unwrap(),
        12.5
    );
    server.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_deadlines_too_long_for_grpc_timeout_header_then_calls_still_work() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    for seconds in [3.6e11, 1e12, 1e18] {
        let timeout = wool::timeout_from_seconds(seconds).unwrap();
        assert!(conn.idle(timeout).await.unwrap() >= 0.0, "{seconds}");
    }
    let error = wool::timeout_from_seconds(1e300).unwrap_err();
    assert!(error.message().len() < 100, "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_one_connection_when_5000_dispatches_burst_then_all_succeed_and_the_connection_survives(
) {
    // An h2 worker closes a connection on which too many small DATA frames sit unread; the
    // client keeps streaming calls to its limit so a burst waits its turn instead.
    let worker = reference_worker().await;
    let conn = Arc::new(WorkerConnection::new(worker.address()).unwrap());
    let deadline = common::burst_deadline(5_000, 250, |deadline| {
        let conn = Arc::clone(&conn);
        async move { conn.dispatch("echo", b"sample".to_vec(), deadline).await }
    })
    .await;
    let begun = Instant::now();
    let tasks: Vec<_> = (0..5_000u32)
        .map(|i| {
            let conn = Arc::clone(&conn);
            tokio::spawn(async move {
                (
                    i,
                    conn.dispatch("echo", i.to_be_bytes().to_vec(), Some(deadline))
                        .await,
                )
            })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        assert_eq!(
            outcome.expect("every dispatch of the burst succeeds"),
            i.to_be_bytes()
        );
    }
    eprintln!(
        "5,000 concurrent echo dispatches took {:?}",
        begun.elapsed()
    );
    assert_eq!(
        worker.accepted_connections(),
        1,
        "the burst never cost the connection"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_calls_running_on_a_shared_connection_when_one_handle_stops_then_they_are_not_cut() {
    let worker = reference_worker().await;
    let busy = Arc::new(WorkerConnection::new(worker.address()).unwrap());
    let tasks = start_sleepers(&worker, 3, "1.5").await;
    let stopper = WorkerConnection::new(worker.address()).unwrap();
    let second = {
        let busy = Arc::clone(&busy);
        tokio::spawn(async move {
            busy.stop(Grace::Unbounded, Some(Duration::from_secs(10)))
                .await
        })
    };
    stopper
        .stop(Grace::Unbounded, Some(Duration::from_secs(10)))
        .await
        .expect("first stop");
    second
        .await
        .unwrap()
        .expect("a second stop while draining is harmless");
    for task in tasks {
        assert_eq!(
            task.await.unwrap().unwrap(),
            b"1.5",
            "in-flight work on the shared connection completes"
        );
    }
}

#[test]
fn given_credentials_rustls_would_refuse_then_invalid_argument_at_creation() {
    let pki = Pki::generate();
    // A certificate block whose body is not a certificate.
    let junk_cert = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
    let error =
        WorkerCredentials::from_pem(junk_cert.as_bytes(), None, None, false, None).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
    // A client key that does not belong to the client certificate.
    let error = WorkerCredentials::from_pem(
        pki.ca_pem.as_bytes(),
        Some(pki.other_leaf.key_pem.as_bytes()),
        Some(pki.leaf.cert_pem.as_bytes()),
        true,
        None,
    )
    .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::InvalidArgument, "{error}");
}

// ---- error kinds come from types, never from words in the target or message ---------------

/// Words Wool's text rule takes for TLS evidence.
const TLS_WORDS: &str = "ssl-tls-handshake-certificate-x509-alpn";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_vanished_worker_whose_target_holds_tls_words_then_transient_not_handshake() {
    let dir = tempfile::tempdir().unwrap();
    let tls_dir = dir.path().join("tls").join(TLS_WORDS);
    std::fs::create_dir_all(&tls_dir).unwrap();
    // A Unix socket path that has nobody behind it, and one that is not there at all.
    let gone = tls_dir.join("worker.sock");
    drop(std::os::unix::net::UnixListener::bind(&gone).unwrap());
    let missing = tls_dir.join("never-was.sock");
    for path in [&gone, &missing] {
        let conn = WorkerConnection::new(&format!("unix:{}", path.display())).unwrap();
        let error = conn.idle(SECOND).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
        assert_eq!(error.code(), Some(tonic::Code::Unavailable));
        assert!(
            error.message().contains(TLS_WORDS),
            "names the target: {error}"
        );
    }
    // A host name with the words that does not resolve.
    let conn = WorkerConnection::new(&format!("{TLS_WORDS}.invalid:50051")).unwrap();
    let error = conn.idle(Some(Duration::from_secs(30))).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert!(
        error.message().contains(TLS_WORDS),
        "names the target: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_worker_certificate_that_fails_verification_then_handshake() {
    let pki = Pki::generate();
    let worker = tls_worker(pki.server_mutual()).await;
    // Verified against a name the certificate does not carry.
    let credentials = WorkerCredentials::from_pem(
        pki.ca_pem.as_bytes(),
        Some(pki.leaf.key_pem.as_bytes()),
        Some(pki.leaf.cert_pem.as_bytes()),
        true,
        Some("not-the-worker.example"),
    )
    .unwrap();
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    assert!(error.message().contains("certificate"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_plaintext_client_and_a_tls_worker_then_handshake_at_once_naming_the_mismatch() {
    let pki = Pki::generate();
    let one_way = ServerCredentials::one_way(pki.leaf.cert_pem.clone(), pki.leaf.key_pem.clone());
    for credentials in [pki.server_mutual(), one_way] {
        let worker = tls_worker(credentials).await;
        let conn = WorkerConnection::new(worker.address()).unwrap();
        let started = Instant::now();
        let error = conn.idle(Some(Duration::from_secs(20))).await.unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
        assert!(error.message().contains("TLS mismatch"), "{error}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "promptly: {error}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_a_tls_client_and_a_plaintext_worker_then_handshake_at_once_naming_the_mismatch() {
    let pki = Pki::generate();
    let worker = reference_worker().await;
    let credentials = pki.client_mutual(&pki.ca_pem, &pki.leaf);
    let conn = WorkerConnection::with_credentials(worker.address(), Some(credentials)).unwrap();
    let started = Instant::now();
    let error = conn.idle(Some(Duration::from_secs(20))).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    assert!(error.message().contains("plaintext"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "promptly: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn given_an_answer_over_the_receive_limit_then_transient_resource_exhausted() {
    let worker = reference_worker().await;
    let mut options = libwool::connection::ChannelOptions::default();
    options.max_receive_message_bytes = 4; // an Idle message is 9 bytes
    let conn = WorkerConnection::with_options(worker.address(), None, options).unwrap();
    let error = conn.idle(SECOND).await.unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
    assert_eq!(
        error.code(),
        Some(tonic::Code::ResourceExhausted),
        "{error}"
    );
    assert!(
        error.message().contains("max_receive_message_bytes"),
        "{error}"
    );
}

/// Given one connection, when 1,000 polls time out locally (a 1 µs deadline: such a call is
/// sent, then reset before the worker's answer arrives), then each is a Transient deadline
/// failure, the connection stays up (h2 used to count every late answer against its small-frame
/// budget and close the connection with GOAWAY "too_many_data_frames" after about a hundred,
/// failing calls as RPC errors — found by the soak), and a poll with a real deadline succeeds.
///
/// The worker's HTTP/2 server allows 20 streams reset by the client before it accepted them
/// (h2's guard against rapid resets, `max_pending_accept_reset_streams`): past that it closes
/// the connection with GOAWAY "too_many_resets". On a busy machine the worker accepts slowly,
/// so every 10 timed-out polls are followed by one with a real deadline, which the worker
/// answers only after it has taken in every stream before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_arriving_after_local_timeouts_never_close_the_connection() {
    let worker = reference_worker().await;
    let conn = WorkerConnection::new(worker.address()).unwrap();
    conn.idle(SECOND).await.unwrap();
    let mut late = 0;
    for _ in 0..50_000 {
        if late == 1_000 {
            break;
        }
        match conn.idle(Some(Duration::from_micros(1))).await {
            Ok(_) => {}
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
                assert_eq!(error.code(), Some(tonic::Code::DeadlineExceeded), "{error}");
                late += 1;
                if late % 10 == 0 {
                    conn.idle(SECOND).await.unwrap();
                }
            }
        }
    }
    assert_eq!(
        late, 1_000,
        "only {late} polls timed out: the test did not test"
    );
    tokio::time::sleep(Duration::from_millis(100)).await; // the last late answers arrive
    conn.idle(SECOND).await.unwrap();
    assert_eq!(
        worker.accepted_connections(),
        1,
        "the connection was replaced"
    );
}

/// Given mutual-TLS credentials (from PEM text and from files, reloadable) and connections
/// made with them, when each is formatted with `{:?}` (as `dbg!`, a `tracing` field or a panic
/// message would), then no private-key or certificate material appears: neither the PEM text
/// nor its bytes as a list of numbers.
#[test]
fn given_credentials_and_connections_then_debug_output_carries_no_key_material() {
    let pki = Pki::generate();
    let fixed = WorkerCredentials::from_pem(
        pki.ca_pem.as_bytes(),
        Some(pki.leaf.key_pem.as_bytes()),
        Some(pki.leaf.cert_pem.as_bytes()),
        true,
        None,
    )
    .unwrap();
    let files = WorkerCredentials::from_files_reloadable(
        &pki.ca_path,
        Some(&pki.leaf.key_path),
        Some(&pki.leaf.cert_path),
        true,
        None,
    )
    .unwrap();
    let key_body: String = pki.leaf.key_pem.lines().nth(1).unwrap().to_owned();
    // "-----" as Rust's `Debug` of a byte vector prints it.
    let pem_as_numbers = "45, 45, 45, 45, 45";
    for credentials in [fixed, files] {
        let connection =
            WorkerConnection::with_credentials("127.0.0.1:1", Some(credentials.clone())).unwrap();
        for text in [
            format!("{credentials:?}"),
            format!("{connection:?}"),
            format!("{connection:#?}"),
        ] {
            assert!(!text.contains(&key_body), "key material in {text}");
            assert!(
                !text.contains("PRIVATE KEY") && !text.contains("CERTIFICATE"),
                "{text}"
            );
            assert!(!text.contains(pem_as_numbers), "PEM bytes in {text}");
        }
    }
}

#[test]
fn given_a_call_polling_the_connection_when_it_gives_up_then_the_connection_task_reads_the_rest() {
    // While a call awaits its answer it polls the connection itself (one call at a time); a
    // call that gives up then must hand the connection back, or the answers of the calls
    // still waiting would never be read. Given a task in flight on a worker process and a
    // client on a current-thread runtime, a stop with a long grace waits for the drain and its
    // caller drops it after 100 ms. Then the task's result, sent about 0.4 s later on the same
    // connection, still reaches its caller.
    let worker = common::WorkerProcess::plaintext();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let conn = Arc::new(WorkerConnection::new(&worker.address).unwrap());
    rt.block_on(async {
        let task = tokio::spawn({
            let conn = Arc::clone(&conn);
            async move { conn.dispatch("sleep", b"0.5".to_vec(), SECOND).await }
        });
        let deadline = Instant::now() + Duration::from_secs(30);
        while conn.idle(SECOND).await.unwrap() != 0.0 {
            assert!(
                !task.is_finished(),
                "precondition not met: the 0.5 s task ended before a poll saw it in flight"
            );
            assert!(
                Instant::now() < deadline,
                "the task never went in flight (30 s)"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // Dropped by the caller (no deadline sent, so the worker does not answer first).
        let stop = conn.stop(Grace::Within(Duration::from_secs(5)), None);
        tokio::time::timeout(Duration::from_millis(100), stop)
            .await
            .expect_err("the drain outlasts the caller's patience");
        assert_eq!(task.await.unwrap().unwrap(), b"0.5");
    });
}
