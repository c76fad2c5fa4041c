//! The reference worker binary, `wool-worker`, as a process (docs/architecture.md).

use crate::common;

use std::time::Duration;

use common::{Pki, WorkerProcess};
use libwool::connection::{WorkerConnection, WorkerCredentials};
use libwool::Grace;

const TIMEOUT: Option<Duration> = Some(Duration::from_secs(5));

#[test]
fn given_default_flags_then_first_line_is_a_dialable_address_and_stop_exits_zero() {
    let mut worker = WorkerProcess::plaintext();
    assert!(
        worker.address.starts_with("127.0.0.1:"),
        "{}",
        worker.address
    );
    worker
        .address
        .rsplit_once(':')
        .unwrap()
        .1
        .parse::<u16>()
        .expect("a port and nothing else");
    let conn = WorkerConnection::new(&worker.address).unwrap();
    let rt = common::runtime();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    assert_eq!(
        rt.block_on(conn.dispatch("echo", b"hi".to_vec(), TIMEOUT))
            .unwrap(),
        b"hi"
    );
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    assert_eq!(
        worker.wait_exit(Duration::from_secs(10)),
        Some(0),
        "exit status 0 after a stop"
    );
}

#[test]
fn given_unix_listen_address_then_it_prints_unix_path_and_serves_there() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("worker.sock");
    let mut worker = WorkerProcess::spawn(&["--listen".into(), format!("unix:{}", path.display())]);
    assert_eq!(worker.address, format!("unix:{}", path.display()));
    let conn = WorkerConnection::new(&worker.address).unwrap();
    let rt = common::runtime();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn given_task_in_flight_when_sigterm_then_task_finishes_and_exit_zero() {
    let mut worker = WorkerProcess::plaintext();
    let conn = std::sync::Arc::new(WorkerConnection::new(&worker.address).unwrap());
    let rt = common::runtime();
    let task = {
        let conn = std::sync::Arc::clone(&conn);
        rt.spawn(async move { conn.dispatch("sleep", b"0.5".to_vec(), TIMEOUT).await })
    };
    // Wait until the worker reports the task in flight: while the task lasts, however long
    // dispatching it takes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while rt.block_on(conn.idle(TIMEOUT)).unwrap() != 0.0 {
        assert!(
            !task.is_finished(),
            "precondition not met: the 0.5 s task ended before a poll saw it in flight"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "task never in flight (30 s)"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    unsafe { libc::kill(worker.child.id() as i32, libc::SIGTERM) };
    assert_eq!(
        rt.block_on(task).unwrap().unwrap(),
        b"0.5",
        "graceful: the in-flight task finishes"
    );
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn given_tls_flags_then_mutual_tls_is_required_unless_one_way() {
    let pki = Pki::generate();
    let rt = common::runtime();
    let mutual = WorkerCredentials::from_files(
        &pki.ca_path,
        Some(&pki.leaf.key_path),
        Some(&pki.leaf.cert_path),
        true,
        None,
    )
    .unwrap();
    let one_way = WorkerCredentials::from_files(&pki.ca_path, None, None, false, None).unwrap();

    let mut worker = WorkerProcess::spawn(&pki.mutual_args());
    let without_cert =
        WorkerConnection::with_credentials(&worker.address, Some(one_way.clone())).unwrap();
    assert!(
        rt.block_on(without_cert.idle(TIMEOUT)).is_err(),
        "mutual TLS worker must refuse a client without a certificate"
    );
    let with_cert = WorkerConnection::with_credentials(&worker.address, Some(mutual)).unwrap();
    assert!(rt.block_on(with_cert.idle(TIMEOUT)).unwrap() >= 0.0);
    rt.block_on(with_cert.stop(Grace::None, TIMEOUT)).unwrap();
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));

    let mut worker = WorkerProcess::spawn(&pki.one_way_args());
    let conn = WorkerConnection::with_credentials(&worker.address, Some(one_way)).unwrap();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn given_bad_flags_then_it_exits_nonzero_with_a_message() {
    for args in [
        vec!["--listen", "nonsense"],
        vec![
            "--tls-cert",
            "/nonexistent/cert.pem",
            "--tls-key",
            "/nonexistent/key.pem",
        ],
    ] {
        let output = std::process::Command::new(common::wool_worker_bin())
            .args(&args)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{args:?}");
        assert!(output.stdout.is_empty(), "no address printed for {args:?}");
        assert!(
            !output.stderr.is_empty(),
            "an explanation on stderr for {args:?}"
        );
    }
}

#[test]
fn given_idle_runtime_and_worker_replaced_on_same_port_when_polled_again_then_reconnects() {
    // A C host's library runtime only runs during calls, so nothing notices a worker that went
    // away between two polls. Kill the worker (no GOAWAY, just a closed socket), start a new
    // one on the same port, and poll again after a pause: the call must dial anew, not fail.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let first = WorkerProcess::plaintext();
    let address = first.address.clone();
    let conn = WorkerConnection::new(&address).unwrap();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    drop(first); // SIGKILL
    let second = WorkerProcess::spawn(&["--listen".into(), address.clone()]);
    std::thread::sleep(Duration::from_millis(700));
    let reading = rt
        .block_on(conn.idle(TIMEOUT))
        .expect("a stale pooled connection is replaced, not reported");
    assert!(
        reading < second.started.elapsed().as_secs_f64(),
        "the answer comes from the new worker"
    );
}

#[test]
fn given_live_worker_on_unix_path_when_second_binds_it_then_refused_and_first_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", dir.path().join("w.sock").display());
    let first = WorkerProcess::spawn(&["--listen".into(), listen.clone()]);
    let second = std::process::Command::new(common::wool_worker_bin())
        .args(["--listen", &listen])
        .output()
        .unwrap();
    assert!(
        !second.status.success(),
        "a second worker must not take over a live socket"
    );
    assert!(
        String::from_utf8_lossy(&second.stderr).contains("in use"),
        "{}",
        String::from_utf8_lossy(&second.stderr)
    );
    let rt = common::runtime();
    let conn = WorkerConnection::new(&first.address).unwrap();
    assert!(
        rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0,
        "the first worker is still reachable"
    );

    // A worker killed without cleanup leaves a dead socket file; the next one replaces it.
    drop(first); // SIGKILL
    let mut third = WorkerProcess::spawn(&["--listen".into(), listen]);
    let conn = WorkerConnection::new(&third.address).unwrap();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    assert_eq!(third.wait_exit(Duration::from_secs(10)), Some(0));
}

#[test]
fn given_long_task_when_sigterm_twice_then_second_cancels_it_and_exit_zero() {
    let mut worker = WorkerProcess::plaintext();
    let conn = std::sync::Arc::new(WorkerConnection::new(&worker.address).unwrap());
    let rt = common::runtime();
    let task = {
        let conn = std::sync::Arc::clone(&conn);
        rt.spawn(async move {
            conn.dispatch("sleep", b"1000".to_vec(), Some(Duration::from_secs(30)))
                .await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rt.block_on(conn.idle(TIMEOUT)).unwrap() != 0.0 {
        assert!(std::time::Instant::now() < deadline, "task never in flight");
        std::thread::sleep(Duration::from_millis(5));
    }
    let pid = worker.child.id() as i32;
    unsafe { libc::kill(pid, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(200));
    assert!(worker.is_running(), "the first signal waits for the task");
    unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(
        worker.wait_exit(Duration::from_secs(10)),
        Some(0),
        "the second signal cancels the task and the worker exits"
    );
    assert!(
        rt.block_on(task).unwrap().is_err(),
        "the cancelled task reports an error to its caller"
    );
}

/// Given a client that sends a unary request's end in a frame of its own, a moment after the
/// HEADERS (as tonic's default channel can), when it polls `idle` more than the 1,024 times a
/// connection may cost the server a reset, then every poll is answered on the one connection:
/// the worker reads each request to its end before answering, so no stream ends on its side
/// while the client still sends.
#[test]
fn given_a_request_ending_in_a_frame_of_its_own_when_polled_thousands_of_times_then_all_answer() {
    let worker = WorkerProcess::plaintext();
    let rt = common::runtime();
    rt.block_on(async {
        let socket = tokio::net::TcpStream::connect(&worker.address)
            .await
            .unwrap();
        socket.set_nodelay(true).unwrap();
        let (client, connection) = h2::client::handshake(socket).await.unwrap();
        tokio::spawn(connection);
        let mut client = client.ready().await.unwrap();
        for poll in 0..1_100 {
            let request = http::Request::post(format!(
                "http://{}/wool.runtime.protobuf.wire.Worker/idle",
                worker.address
            ))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
            let (answer, mut body) = client.send_request(request, false).unwrap();
            tokio::time::sleep(Duration::from_micros(200)).await;
            // The empty `Void` message in its gRPC frame, and the request's end.
            body.send_data(bytes::Bytes::from_static(&[0, 0, 0, 0, 0]), true)
                .unwrap_or_else(|error| panic!("poll {poll}: the request's end: {error}"));
            let answer = answer
                .await
                .unwrap_or_else(|error| panic!("poll {poll}: {error}"));
            assert_eq!(answer.status(), 200, "poll {poll}");
            let mut answer = answer.into_body();
            while let Some(data) = answer.data().await {
                let data = data.unwrap();
                answer.flow_control().release_capacity(data.len()).unwrap();
            }
            let trailers = answer.trailers().await.unwrap().expect("trailers");
            assert_eq!(trailers["grpc-status"], "0", "poll {poll}");
            client = client.ready().await.unwrap();
        }
    });
}

/// Given a log directive that is neither a level nor `TARGET=LEVEL` (`shouty`, which tracing
/// would read as a target and so turn every other line off), then each of the three programs
/// refuses it before doing anything: exit 2, the directive named on stderr; from `--log-level`
/// (the servers) and from RUST_LOG (all three).
#[test]
fn given_a_bad_log_directive_then_each_program_exits_2_naming_it() {
    // A program that took the directive would start serving and never exit: it is killed
    // after 10 s and the test fails on its exit status.
    let run = |program: &str, args: &[&str], rust_log: &str| {
        let mut child = std::process::Command::new(common::program(program))
            .args(args)
            .env("RUST_LOG", rust_log)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), output.stdout.is_empty(), stderr)
    };
    for program in ["wool-worker", "wool-scaler"] {
        for (filter, named) in [
            ("shouty", "\"shouty\""),
            ("info,libwool=shouty", "\"libwool=shouty\""),
        ] {
            let (code, quiet, stderr) = run(program, &["--log-level", filter], "");
            assert_eq!(code, Some(2), "{program} --log-level {filter}: {stderr}");
            assert!(quiet, "{program} --log-level {filter}: no address printed");
            assert!(
                stderr.contains("--log-level") && stderr.contains(named),
                "{program} --log-level {filter} names the flag and the directive: {stderr}"
            );
        }
    }
    for (program, args) in [
        ("wool-worker", &[][..]),
        ("wool-scaler", &[][..]),
        ("woolctl", &["idle", "127.0.0.1:9"][..]),
    ] {
        let (code, quiet, stderr) = run(program, args, "shouty");
        assert_eq!(code, Some(2), "{program} with RUST_LOG=shouty: {stderr}");
        assert!(quiet, "{program} with RUST_LOG=shouty: nothing on stdout");
        assert!(
            stderr.contains("RUST_LOG") && stderr.contains("\"shouty\""),
            "{program} names RUST_LOG and the directive: {stderr}"
        );
    }
}

/// Given the filter the help gives as its example, then the worker logs what the help says it
/// does: everything at info (the library's "worker listening") and the library's own lines
/// (`libwool::worker`) at debug ("task cancelled" when a stop cancels a task).
#[test]
fn given_the_helps_log_filter_example_then_the_librarys_debug_lines_show() {
    let help = std::process::Command::new(common::wool_worker_bin())
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let example = "info,libwool=debug";
    assert!(
        help.contains(&format!("`{example}`")),
        "the help's example: {help}"
    );
    let (worker, log) =
        WorkerProcess::spawn_logging(&["--log-level".into(), example.into()], "warn");
    common::expect_log_line(&log, "worker listening", Duration::from_secs(5));
    let conn = std::sync::Arc::new(WorkerConnection::new(&worker.address).unwrap());
    let rt = common::runtime();
    let task = {
        let conn = std::sync::Arc::clone(&conn);
        rt.spawn(async move {
            conn.dispatch("sleep", b"1000".to_vec(), Some(Duration::from_secs(30)))
                .await
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while rt.block_on(conn.idle(TIMEOUT)).unwrap() != 0.0 {
        assert!(std::time::Instant::now() < deadline, "task never in flight");
        std::thread::sleep(Duration::from_millis(5));
    }
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    let line = common::expect_log_line(&log, "task cancelled", Duration::from_secs(5));
    assert!(
        line.contains("DEBUG") && line.contains("libwool::worker"),
        "{line}"
    );
    assert!(rt.block_on(task).unwrap().is_err());
}
