//! Interop with the real Wool runtime (PyPI `wool`), both directions.
//!
//! The Python peers live in `tests/interop/` and run from the pinned virtual environments that
//! `scripts/setup-venvs.sh` creates under `target/venvs/` (`wool==0.15.7`, `wool==0.13.1`);
//! the README's test command runs that script first.

use crate::common;

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{Pki, WorkerProcess};
use libwool::connection::{ErrorKind, WorkerConnection, WorkerCredentials};
use libwool::Grace;
use wool::{self as ffi, wool_status};

const TIMEOUT: Option<Duration> = Some(Duration::from_secs(10));

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn python(version: &str) -> PathBuf {
    common::wool_python(version)
}

fn script(name: &str) -> PathBuf {
    repo().join("tests/interop").join(name)
}

/// Runs Wool 0.15.7's own client (`wool_client.py`) against `target`.
fn wool_client(target: &str, tls: &[String], command: &[&str]) -> Output {
    let output = Command::new(python("0.15.7"))
        .arg(script("wool_client.py"))
        .arg(target)
        .args(tls)
        .args(command)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    eprintln!(
        "wool_client {command:?} -> {:?}\n{}{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// A real Wool worker (`LocalWorker`) run by `wool_worker.py`; its stdout lines arrive on a
/// channel. Closing stdin (on drop) takes the worker down.
struct WoolWorker {
    child: Child,
    _stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    address: String,
}

impl WoolWorker {
    fn spawn(version: &str, args: &[String]) -> Self {
        let mut child = Command::new(python(version))
            .arg(script("wool_worker.py"))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let (tx, lines) = mpsc::channel();
        let out = BufReader::new(child.stdout.take().unwrap());
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut worker = Self {
            child,
            _stdin: stdin,
            lines,
            address: String::new(),
        };
        worker.address = worker.next_line(Duration::from_secs(90));
        assert!(
            !worker.address.starts_with("error"),
            "Wool worker failed: {}",
            worker.address
        );
        worker
    }

    fn next_line(&mut self, limit: Duration) -> String {
        self.lines
            .recv_timeout(limit)
            .unwrap_or_else(|e| panic!("no line from wool_worker.py within {limit:?}: {e}"))
    }

    /// Waits for `expected` among the next lines.
    fn expect_line(&mut self, expected: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = self.next_line(left);
            if line == expected {
                return;
            }
            assert!(
                !line.starts_with("error") && !line.starts_with("busy-error"),
                "while waiting for {expected:?}: {line}"
            );
        }
    }

    fn exit_code(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for WoolWorker {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            if self.exit_code(Duration::from_secs(10)).is_none() {
                let _ = self.child.kill();
            }
        }
        let _ = self.child.wait();
    }
}

fn tls_flags(ca: &Path, cert: &Path, key: &Path) -> Vec<String> {
    [
        "--tls-ca",
        ca.to_str().unwrap(),
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ]
    .map(String::from)
    .to_vec()
}

fn mutual_credentials(pki: &Pki, ca_path: &Path) -> WorkerCredentials {
    WorkerCredentials::from_files(
        ca_path,
        Some(&pki.leaf.key_path),
        Some(&pki.leaf.cert_path),
        true,
        None,
    )
    .unwrap()
}

/// The C API's view of one idle poll: its status, the reading and the last rpc code.
struct CIdle {
    status: wool_status,
    seconds: f64,
    code: i32,
}

/// Runs `call` on a plaintext C-ABI handle to `target` (`wool_connect` … `wool_free`).
fn with_c_connection<T>(target: &str, call: impl FnOnce(*const ffi::wool_connection) -> T) -> T {
    let target = CString::new(target).unwrap();
    let mut conn = std::ptr::null_mut();
    unsafe {
        assert_eq!(
            ffi::wool_connect(target.as_ptr(), std::ptr::null(), &mut conn),
            wool_status::Ok
        );
        let result = call(conn);
        ffi::wool_free(conn);
        result
    }
}

/// Polls idle through the C ABI.
fn c_idle(target: &str) -> CIdle {
    with_c_connection(target, |conn| unsafe {
        let mut seconds = -1.0;
        let status = ffi::wool_idle(conn, 10.0, &mut seconds);
        let code = ffi::wool_last_rpc_code();
        CIdle {
            status,
            seconds,
            code,
        }
    })
}

/// Stops the worker through the C ABI, grace 0.
fn c_stop(target: &str) -> wool_status {
    with_c_connection(target, |conn| unsafe { ffi::wool_stop(conn, 0.0, 10.0) })
}

// 1. Wool's client → our worker.

#[test]
fn given_our_worker_when_wools_client_polls_and_stops_then_idle_accrues_and_it_retires() {
    let mut worker = WorkerProcess::plaintext();
    let polled = wool_client(&worker.address, &[], &["poll-accrues"]);
    assert_eq!(
        polled.status.code(),
        Some(0),
        "Wool's idle() must return accruing floats"
    );
    let stopped = wool_client(&worker.address, &[], &["stop"]);
    assert_eq!(stdout(&stopped), "stopped");
    assert_eq!(
        worker.wait_exit(Duration::from_secs(10)),
        Some(0),
        "our worker exits 0 after Wool's stop()"
    );
    let after = wool_client(&worker.address, &[], &["expect-transient"]);
    assert_eq!(
        after.status.code(),
        Some(0),
        "Wool's client must raise TransientRpcError once it is gone"
    );
    assert!(stdout(&after).contains("TransientRpcError"));
}

#[test]
fn given_our_mutual_tls_worker_when_wools_client_uses_worker_credentials_then_polls_and_stops() {
    let pki = Pki::generate();
    let mut worker = WorkerProcess::spawn(&pki.mutual_args());
    let tls = tls_flags(&pki.ca_path, &pki.leaf.cert_path, &pki.leaf.key_path);
    assert_eq!(
        wool_client(&worker.address, &tls, &["poll-accrues"])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        stdout(&wool_client(&worker.address, &tls, &["stop"])),
        "stopped"
    );
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(
        wool_client(&worker.address, &tls, &["expect-transient"])
            .status
            .code(),
        Some(0)
    );
}

// 2. Our client → Wool's worker.

#[test]
fn given_wools_worker_when_our_client_and_c_api_poll_then_idle_accrues_and_stop_retires_it() {
    let mut worker = WoolWorker::spawn("0.15.7", &[]);
    let rt = common::runtime();
    let conn = WorkerConnection::new(&worker.address).unwrap();
    let first = rt.block_on(conn.idle(TIMEOUT)).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let second = rt.block_on(conn.idle(TIMEOUT)).unwrap();
    assert!(first >= 0.0 && second > first, "{first} then {second}");
    let from_c = c_idle(&worker.address);
    assert_eq!(from_c.status, wool_status::Ok);
    assert!(
        from_c.seconds > second,
        "the C API reads the same accruing clock: {} after {second}",
        from_c.seconds
    );
    assert_eq!(c_stop(&worker.address), wool_status::Ok);
    worker.expect_line("stopped remote", Duration::from_secs(30));
    assert_eq!(worker.exit_code(Duration::from_secs(30)), Some(0));
    let error = rt.block_on(conn.idle(TIMEOUT)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Transient, "{error}");
}

#[test]
fn given_wools_worker_running_a_python_routine_then_idle_is_exactly_zero_until_it_ends() {
    let mut worker = WoolWorker::spawn("0.15.7", &["--busy".into(), "2.0".into()]);
    worker.expect_line("busy-start", Duration::from_secs(30));
    let rt = common::runtime();
    let conn = WorkerConnection::new(&worker.address).unwrap();
    assert_eq!(rt.block_on(conn.idle(TIMEOUT)).unwrap(), 0.0);
    let from_c = c_idle(&worker.address);
    assert_eq!((from_c.status, from_c.seconds), (wool_status::Ok, 0.0));
    worker.expect_line("busy-done", Duration::from_secs(30));
    let after = rt.block_on(conn.idle(TIMEOUT)).unwrap();
    assert!(
        after > 0.0 && after < 1.5,
        "idle restarts when the routine ends: {after}"
    );
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    worker.expect_line("stopped remote", Duration::from_secs(30));
}

#[test]
fn given_wools_mutual_tls_worker_then_right_credentials_poll_and_stop_and_wrong_ca_is_handshake() {
    let pki = Pki::generate();
    let mut worker = WoolWorker::spawn(
        "0.15.7",
        &tls_flags(&pki.ca_path, &pki.leaf.cert_path, &pki.leaf.key_path),
    );
    let rt = common::runtime();
    let wrong = WorkerConnection::with_credentials(
        &worker.address,
        Some(mutual_credentials(&pki, &pki.other_ca_path)),
    )
    .unwrap();
    let error = rt.block_on(wrong.idle(TIMEOUT)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Handshake, "{error}");
    let conn = WorkerConnection::with_credentials(
        &worker.address,
        Some(mutual_credentials(&pki, &pki.ca_path)),
    )
    .unwrap();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() >= 0.0);
    rt.block_on(conn.stop(Grace::None, TIMEOUT)).unwrap();
    worker.expect_line("stopped remote", Duration::from_secs(30));
    assert_eq!(worker.exit_code(Duration::from_secs(30)), Some(0));
}

// 3. Legacy: a Wool 0.13.1 worker predates `idle`.

#[test]
fn given_wool_0_13_worker_then_idle_unavailable_not_transient_and_stop_still_retires_it() {
    let mut worker = WoolWorker::spawn("0.13.1", &[]);
    let rt = common::runtime();
    let conn = WorkerConnection::new(&worker.address).unwrap();
    let error = rt.block_on(conn.idle(TIMEOUT)).unwrap_err();
    assert_eq!(error.kind(), ErrorKind::IdleUnavailable, "{error}");
    assert_eq!(error.code(), Some(tonic::Code::Unimplemented));
    let from_c = c_idle(&worker.address);
    assert_eq!(
        (from_c.status, from_c.code),
        (wool_status::IdleUnavailable, 12)
    );
    assert_eq!(c_stop(&worker.address), wool_status::Ok);
    worker.expect_line("stopped remote", Duration::from_secs(30));
    assert_eq!(worker.exit_code(Duration::from_secs(30)), Some(0));
}

// 4. Raw wire: Wool's generated stubs against our worker.

#[test]
fn given_our_worker_when_driven_by_wools_generated_stubs_then_dispatch_fsm_and_idle_hold() {
    let worker = WorkerProcess::plaintext();
    let output = Command::new(python("0.15.7"))
        .arg(script("raw_wire.py"))
        .arg(&worker.address)
        .args([
            "echo",
            "sleep",
            "idle-zero-under-load",
            "unknown-routine",
            "echo",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    eprintln!("{text}{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(
        output.status.code(),
        Some(0),
        "raw wire checks failed:\n{text}"
    );
    assert!(text.contains("ok "), "{text}");
}

// 5. Unix sockets across implementations.

#[test]
fn given_our_worker_on_a_unix_socket_then_grpcio_our_client_and_c_api_all_reach_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sock");
    let mut worker = WorkerProcess::spawn(&["--listen".into(), format!("unix:{}", path.display())]);
    // grpcio sends the percent-encoded socket path as :authority; our worker must accept it.
    for target in [worker.address.clone(), format!("unix://{}", path.display())] {
        assert_eq!(
            wool_client(&target, &[], &["poll-accrues"]).status.code(),
            Some(0),
            "{target}"
        );
    }
    let rt = common::runtime();
    let conn = WorkerConnection::new(&worker.address).unwrap();
    assert!(rt.block_on(conn.idle(TIMEOUT)).unwrap() > 0.0);
    let from_c = c_idle(&worker.address);
    assert_eq!(from_c.status, wool_status::Ok);
    assert!(from_c.seconds > 0.0);
    assert_eq!(
        stdout(&wool_client(&worker.address, &[], &["stop"])),
        "stopped"
    );
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

/// Given a Wool 0.15.7 worker whose ping policy is one PING a second at most (its
/// `http2_min_recv_ping_interval_without_data_ms`; 2 strikes, then GOAWAY ENHANCE_YOUR_CALM),
/// when our client keeps an idle connection alive with PINGs spaced to that floor and Wool's
/// limit of 2 PINGs without data (our default), then the worker never closes it: the same TCP
/// connection serves polls over two idle stretches. The control — the same spacing with no
/// limit on PINGs without data — is cut off by that worker (grpcio counts PINGs on a
/// connection with no call as strikes), redials and still polls.
#[test]
fn given_wools_ping_policy_then_our_keepalive_never_gets_the_connection_closed() {
    use common::{port_of, worker_side_sockets, TCP_ESTABLISHED};
    let worker = WoolWorker::spawn("0.15.7", &["--ping-floor-ms".into(), "1000".into()]);
    let port = port_of(&worker.address);
    let established = || -> Vec<u16> {
        worker_side_sockets(port)
            .into_iter()
            .filter(|(_, state)| *state == TCP_ESTABLISHED)
            .map(|(remote, _)| remote)
            .collect()
    };
    let keepalive = |max_pings_without_data: u32| {
        let mut options = libwool::connection::ChannelOptions::default();
        // A margin over the 1 s floor for scheduling.
        options.keepalive_interval = Some(Duration::from_millis(1250));
        options.keepalive_timeout = Duration::from_secs(5);
        options.max_pings_without_data = max_pings_without_data;
        options
    };
    let runtime = common::runtime();
    let polite = runtime.block_on(async {
        let conn = WorkerConnection::with_options(&worker.address, None, keepalive(2)).unwrap();
        conn.idle(TIMEOUT).await.unwrap();
        let mut seen = vec![established()];
        for _ in 0..2 {
            tokio::time::sleep(Duration::from_secs(5)).await;
            conn.idle(TIMEOUT).await.unwrap();
            seen.push(established());
        }
        seen
    });
    assert_eq!(polite[0].len(), 1, "one connection: {polite:?}");
    assert!(
        polite.iter().all(|ports| *ports == polite[0]),
        "the worker kept the connection: {polite:?}"
    );
    let rude = runtime.block_on(async {
        let conn = WorkerConnection::with_options(&worker.address, None, keepalive(0)).unwrap();
        conn.idle(TIMEOUT).await.unwrap();
        let first: Vec<u16> = established()
            .into_iter()
            .filter(|p| !polite[0].contains(p))
            .collect();
        tokio::time::sleep(Duration::from_secs(7)).await;
        let reading = conn.idle(TIMEOUT).await;
        (first, established(), reading.is_ok())
    });
    assert_eq!(rude.0.len(), 1, "{rude:?}");
    assert!(
        !rude.1.contains(&rude.0[0]),
        "the control's connection should have been closed by the worker: {rude:?}"
    );
    assert!(rude.2, "the control redials and polls");
}

/// Given a Wool 0.15.7 worker, when our client dispatches a task, then Wool accepts the task's
/// id (a UUID, as Wool's worker parses it) and refuses the task for what it is — a Rust
/// routine name, not a cloudpickled callable — never for its id.
#[test]
fn given_wools_worker_when_we_dispatch_then_the_task_id_is_accepted_as_a_uuid() {
    let worker = WoolWorker::spawn("0.15.7", &[]);
    let error = common::runtime().block_on(async {
        let conn = WorkerConnection::new(&worker.address).unwrap();
        conn.dispatch("echo", b"hello".to_vec(), TIMEOUT)
            .await
            .unwrap_err()
    });
    eprintln!("Wool's answer to our task: {error}");
    assert_eq!(error.kind(), ErrorKind::Routine, "{error}");
    let message = error.message().to_ascii_lowercase();
    assert!(
        !message.contains("uuid") && !message.contains("hexadecimal"),
        "{error}"
    );
    assert!(
        message.contains("pickl"),
        "refused for the callable: {error}"
    );
}
