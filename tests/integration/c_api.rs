//! The C API, from C: builds `tests/c/contract.c` and `tests/c/harness.c` against `include/wool.h`
//! and `libwool.so`, arranges each case's world (real `wool-worker` processes, throwaway PKI, a
//! worker without `idle`, an address nobody listens on, a peer that never answers, hostile fake
//! workers from `common::hostile`) and runs one harness case per test. Plus the C API called
//! from Rust threads that run inside tokio runtimes.
//!
//! `WOOL_VALGRIND=1` runs every C program under valgrind (no definite leaks, no invalid reads or
//! writes, or the test fails; see `suppressions` for the only errors it lets pass):
//! `scripts/valgrind-c.sh`. `CC` picks the C compiler (default `cc`).

use crate::common;

use std::ffi::{c_char, CStr, CString};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{hostile, library_dir, Pki, WorkerProcess};
use libwool::WorkerConnection;
use wool::{
    wool_connect, wool_connection, wool_free, wool_idle, wool_last_error, wool_last_rpc_code,
    wool_status, wool_stop,
};

// ---- building and running the C programs ----------------------------------------------------

fn under_valgrind() -> bool {
    std::env::var_os("WOOL_VALGRIND").is_some_and(|v| !v.is_empty() && v != "0")
}

/// How long a task must stay in flight for a freshly started C program to see it: valgrind
/// makes a C program's first call take seconds (it instruments the whole library first).
/// Whether the C programs run slowed down: under valgrind, or built with a sanitizer
/// (scripts/sanitizers.sh). Deadlines and counts that only time bounds are scaled for it.
fn slowed() -> bool {
    under_valgrind() || std::env::var("WOOL_C_FLAGS").is_ok_and(|flags| flags.contains("sanitize"))
}

fn task_seconds(normally: f64) -> f64 {
    if slowed() {
        15.0
    } else {
        normally
    }
}

/// Compiles `<source>` (relative to the repository) against `include/wool.h` and `libwool.so`
/// (strict warnings, as errors) into the cargo target's temporary directory; returns the
/// program's path.
fn compile(source: &str) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-api");
    std::fs::create_dir_all(&out_dir).unwrap();
    let name = Path::new(source).file_stem().expect("a C source file");
    let program = out_dir.join(name);
    // scripts/sanitizers.sh points these at a library built with AddressSanitizer and adds
    // -fsanitize=address: the same programs, instrumented.
    let lib = std::env::var_os("WOOL_C_LIBRARY_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(library_dir);
    let extra_flags = std::env::var("WOOL_C_FLAGS").unwrap_or_default();
    let compiler = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let output = Command::new(&compiler)
        .args(extra_flags.split_whitespace())
        .args([
            "-std=c11",
            "-g",
            "-O1",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-pedantic",
        ])
        .arg("-I")
        .arg(root.join("include"))
        .arg(root.join(source))
        .arg("-o")
        .arg(&program)
        .arg("-L")
        .arg(&lib)
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .args(["-lwool", "-lpthread", "-lm"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run the C compiler {compiler:?}: {e}"));
    assert!(
        output.status.success(),
        "compiling {source} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    program
}

fn harness() -> &'static Path {
    static HARNESS: OnceLock<PathBuf> = OnceLock::new();
    HARNESS.get_or_init(|| compile("tests/c/harness.c"))
}

fn poll_then_retire() -> &'static Path {
    static EXAMPLE: OnceLock<PathBuf> = OnceLock::new();
    EXAMPLE.get_or_init(|| compile("examples/c/poll_then_retire.c"))
}

/// Runs a C program, under valgrind when asked; its output.
fn run_program(program: &Path, args: &[&str]) -> Output {
    run_program_with(program, args, under_valgrind())
}

fn run_program_with(program: &Path, args: &[&str], valgrind: bool) -> Output {
    let mut command = if valgrind {
        let mut command = Command::new("valgrind");
        command.args([
            "--quiet",
            "--error-exitcode=97",
            "--leak-check=full",
            "--errors-for-leak-kinds=definite",
            "--show-leak-kinds=definite",
            "--num-callers=50", // deep enough for the suppressions' rustls frames
        ]);
        command.arg(format!("--suppressions={}", suppressions().display()));
        command.arg(program);
        command
    } else {
        Command::new(program)
    };
    command
        .args(args)
        // cargo points LD_LIBRARY_PATH at target/<profile> too, where a libwool.so from an
        // earlier `cargo build` may linger; it would win over the program's RUNPATH.
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()))
}

/// Valgrind suppressions for false positives of ring's AES-GCM assembly, and nothing else.
///
/// It computes the GCM tag with vector instructions over whole 16-byte blocks, reading bytes
/// past the record that it then masks out; memcheck's definedness tracking of those
/// instructions is pessimistic, so the tag looks "uninitialised" to it: in the bytes rustls
/// sends (`write_tls`), and where it checks an incoming record's tag. TLS works, so the tags are
/// right (OpenSSL's GCM is known for the same reports). Invalid reads and writes, definite
/// leaks and every other uninitialised use are still reported. Written once per test run, as
/// valgrind matches a syscall parameter's name exactly (`sendmsg(msg.msg_iov[3])`, one entry per
/// index).
fn suppressions() -> &'static Path {
    static FILE: OnceLock<PathBuf> = OnceLock::new();
    FILE.get_or_init(|| {
        let sent_in_a_tls_record = |name: &str, parameter: &str| {
            format!(
                "{{\n   ring-aes-gcm-tag-sent-by-rustls-{name}\n   Memcheck:Param\n   \
                 {parameter}\n   ...\n   fun:*rustls*write_tls*\n}}\n"
            )
        };
        let mut text = String::from(
            "{\n   ring-aes-gcm-tag-checked-by-rustls\n   Memcheck:Cond\n   \
             fun:*ring*verify_slices_are_equal*\n   ...\n   fun:*ring*aead*\n}\n",
        );
        text += &sent_in_a_tls_record("writev", "writev(vector[...])");
        text += &sent_in_a_tls_record("write", "write(buf)");
        text += &sent_in_a_tls_record("sendto", "sendto(msg)");
        for index in 0..64 {
            let parameter = format!("sendmsg(msg.msg_iov[{index}])");
            text += &sent_in_a_tls_record(&format!("sendmsg-{index}"), &parameter);
        }
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("c-api");
        std::fs::create_dir_all(&dir).unwrap();
        // Written aside, then renamed: a concurrent test run never reads a half-written file.
        let file = dir.join("valgrind.supp");
        let partial = dir.join(format!("valgrind.supp.{}", std::process::id()));
        std::fs::write(&partial, text).unwrap();
        std::fs::rename(&partial, &file).unwrap();
        file
    })
}

/// Runs one harness case and requires it to pass; its stdout.
fn run_case(case: &str, args: &[&str]) -> String {
    run_case_with(case, args, under_valgrind())
}

fn run_case_with(case: &str, args: &[&str], valgrind: bool) -> String {
    let output = run_program_with(harness(), &[&[case], args].concat(), valgrind);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(
        output.status.success(),
        "harness case {case} failed ({}):\n{stdout}{stderr}",
        describe_exit(&output)
    );
    stdout
}

fn describe_exit(output: &Output) -> String {
    match (output.status.code(), output.status.signal()) {
        (Some(97), _) if under_valgrind() => "valgrind found errors".into(),
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "no exit status".into(),
    }
}

fn path(p: &Path) -> &str {
    p.to_str().expect("test paths are UTF-8")
}

fn mutual_worker(pki: &Pki) -> WorkerProcess {
    WorkerProcess::spawn(&pki.mutual_args())
}

// ---- arranging the world --------------------------------------------------------------------

/// A tokio runtime for the Rust side of a test (dispatching tasks, serving test doubles).
fn rust_side_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
}

/// Dispatches one `sleep` task of `seconds` to `address` and returns once it is in flight (the
/// worker reports idle exactly 0). The task's outcome arrives on the returned handle.
fn dispatch_sleep(
    runtime: &tokio::runtime::Runtime,
    address: &str,
    seconds: f64,
) -> tokio::task::JoinHandle<Result<Vec<u8>, libwool::Error>> {
    let worker = std::sync::Arc::new(WorkerConnection::new(address).unwrap());
    let dispatcher = std::sync::Arc::clone(&worker);
    let task = runtime.spawn(async move {
        let args = format!("{seconds}").into_bytes();
        dispatcher.dispatch("sleep", args, None).await
    });
    runtime.block_on(async {
        let deadline = Instant::now() + Duration::from_secs(10);
        let idle = || async {
            let reading = worker.idle(Some(Duration::from_secs(5))).await;
            reading.unwrap_or_else(|e| panic!("idle while dispatching sleep: {e}"))
        };
        while idle().await != 0.0 {
            assert!(
                Instant::now() < deadline,
                "the sleep task never went in flight"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    task
}

// ---- the C programs -------------------------------------------------------------------------

/// Given tests/c/contract.c, which repeats every declaration of C-API.md verbatim and asserts
/// the enum values, when it is compiled against include/wool.h with -Werror, linked and run,
/// then it builds (the header agrees with the contract) and exits 0 (the library defines all).
#[test]
fn contract_prototypes_compile_against_the_header_and_link() {
    let program = compile("tests/c/contract.c");
    let output = run_program(&program, &[]);
    assert!(
        output.status.success(),
        "contract failed ({}): {}",
        describe_exit(&output),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Given a fresh C process, then status names are exact, an unknown value gives
/// "WOOL_STATUS_UNKNOWN", the version is the package's, freeing NULL is a no-op, and there is
/// no last error (length 0, rpc code -1).
#[test]
fn names_version_and_no_last_error_before_any_failure() {
    run_case("names", &[env!("CARGO_PKG_VERSION")]);
}

/// Given a running worker and valid PEM files, when C passes each bad input of C-API.md (NULL
/// target/out/conn, non-UTF-8 text, empty and malformed targets, port 99999, timeout
/// 0/negative/NaN, NaN grace, garbage PEM, a missing file), then each is
/// WOOL_STATUS_INVALID_ARGUMENT with *out untouched, a message and rpc code -1; a later success
/// keeps the message; and the worker, sent nothing, keeps running.
#[test]
fn every_bad_input_is_an_invalid_argument_and_touches_nothing() {
    let pki = Pki::generate();
    let mut worker = WorkerProcess::plaintext();
    let scratch = tempfile::tempdir().unwrap();
    run_case(
        "invalid",
        &[
            &worker.address,
            path(&pki.ca_path),
            path(&pki.leaf.cert_path),
            path(&pki.leaf.key_path),
            path(scratch.path()),
        ],
    );
    assert!(worker.is_running(), "a refused wool_stop must send nothing");
}

/// Given a failure's message, then wool_last_error copies it NUL-terminated, truncates it to
/// fit (never writing past len, nothing at all for len 0) and always returns its full length.
#[test]
fn last_error_truncates_and_returns_the_full_length() {
    run_case("last-error", &[]);
}

/// Given a worker with nothing to do, when C polls it twice 0.3 s apart, then idle grew by the
/// time between (and an INFINITY timeout means no deadline).
#[test]
fn idle_accrues_while_the_worker_has_nothing_to_do() {
    let worker = WorkerProcess::plaintext();
    run_case("idle-accrues", &[&worker.address]);
}

/// As above, over a Unix domain socket target (`unix:PATH`).
#[test]
fn idle_accrues_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("unix:{}", dir.path().join("w.sock").display());
    let worker = WorkerProcess::spawn(&["--listen".to_string(), listen]);
    run_case("idle-accrues", &[&worker.address]);
}

/// Given a `sleep` task in flight (dispatched from Rust), when C polls, then idle is exactly
/// 0.0; once the task has finished, idle rises.
#[test]
fn idle_is_exactly_zero_while_a_task_is_in_flight_and_rises_after() {
    let worker = WorkerProcess::plaintext();
    let runtime = rust_side_runtime();
    let seconds = task_seconds(1.5);
    let task = dispatch_sleep(&runtime, &worker.address, seconds);
    let stdout = run_case("in-flight", &[&worker.address]);
    assert!(stdout.contains("exactly 0.0"));
    let output = runtime
        .block_on(task)
        .unwrap()
        .expect("the sleep task completed");
    assert_eq!(output, format!("{seconds}").into_bytes());
}

/// Given a worker, when C calls wool_stop, then it answers OK, the worker exits with status 0,
/// and calls after it are WOOL_STATUS_TRANSIENT with code 14.
#[test]
fn stop_retires_the_worker_and_later_calls_are_transient() {
    let mut worker = WorkerProcess::plaintext();
    let stdout = run_case("stop", &[&worker.address]);
    assert!(stdout.contains("WOOL_STATUS_TRANSIENT"));
    assert_eq!(worker.wait_exit(Duration::from_secs(15)), Some(0));
}

/// Runs the `stop-grace` case with `grace` against a worker with one `sleep` task of
/// `task_seconds` in flight; whether the task completed, and how long wool_stop took.
fn stop_with_grace_during_a_task(grace: &str, task_seconds: f64) -> (bool, f64) {
    let mut worker = WorkerProcess::plaintext();
    let runtime = rust_side_runtime();
    let task = dispatch_sleep(&runtime, &worker.address, task_seconds);
    let stdout = run_case("stop-grace", &[&worker.address, grace]);
    let took: f64 = stdout
        .split("answered after ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|seconds| seconds.parse().ok())
        .expect("stop-grace prints how long the stop took");
    let completed = runtime.block_on(task).unwrap().is_ok();
    assert_eq!(worker.wait_exit(Duration::from_secs(15)), Some(0));
    (completed, took)
}

/// Given a task in flight, when C stops the worker with a negative or INFINITY grace, then the
/// stop waits for the task, which completes.
#[test]
fn stop_with_unbounded_grace_lets_in_flight_work_finish() {
    for grace in ["-1", "inf"] {
        let (completed, took) = stop_with_grace_during_a_task(grace, 0.5);
        assert!(
            completed,
            "grace {grace}: the task was cancelled (stop took {took} s)"
        );
    }
}

/// Given a 30 s task in flight, when C stops the worker with grace 0, or 0.2 s, then the task
/// is cancelled and the stop answers at once, or after about the grace.
#[test]
fn stop_with_zero_or_short_grace_cancels_in_flight_work() {
    for (grace, at_least) in [("0", 0.0), ("0.2", 0.19)] {
        let (completed, took) = stop_with_grace_during_a_task(grace, 30.0);
        assert!(!completed, "grace {grace}: the task was not cancelled");
        assert!(
            took >= at_least && took < 10.0,
            "grace {grace}: stop took {took} s"
        );
    }
}

/// Given a worker that predates the idle RPC (UNIMPLEMENTED), when C polls it, then
/// WOOL_STATUS_IDLE_UNAVAILABLE with rpc code 12; its stop still works.
#[test]
fn worker_without_idle_is_idle_unavailable_with_code_12() {
    let runtime = rust_side_runtime();
    let (address, server) = runtime.block_on(common::serve_legacy_worker());
    run_case("unimplemented", &[&address]);
    server.abort();
}

/// Given an address nobody listens on, when C polls or stops it, then WOOL_STATUS_TRANSIENT
/// with rpc code 14 (wool_connect itself succeeds: it does no I/O).
#[test]
fn nothing_listening_is_transient_with_code_14() {
    run_case("unreachable", &[&common::unused_local_address()]);
}

/// Given a peer that accepts connections but never answers, when C polls it with a 0.2 s
/// timeout, then WOOL_STATUS_TRANSIENT with rpc code 4 (DEADLINE_EXCEEDED) after about 0.2 s.
#[test]
fn local_deadline_is_transient_with_code_4() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // never accepts
    let address = silent.local_addr().unwrap().to_string();
    run_case("deadline", &[&address]);
    drop(silent);
}

/// Given a peer that accepts connections and never writes a byte, when C polls (30 s deadline)
/// and stops (30 s grace) it with a 1 s connect timeout, then each call ends at the connect
/// timeout: WOOL_STATUS_TRANSIENT, code 14, "accepted the connection but never spoke HTTP/2".
#[test]
fn a_peer_that_never_speaks_ends_calls_at_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap(); // never accepts
    let address = silent.local_addr().unwrap().to_string();
    let out = run_case("connect-timeout", &[&address]);
    assert!(out.contains("stop gave up"), "{out}");
    drop(silent);
}

/// Given a DNS name that does not exist (`nosuchhost.invalid.`: the special-use `.invalid`
/// zone, answered NXDOMAIN by the resolver itself, so no query leaves the machine), when C lists
/// it with wool_discover_dns, then WOOL_STATUS_TRANSIENT saying it does not resolve.
#[test]
fn c_lists_a_dns_name_that_does_not_resolve_as_an_error() {
    let out = run_case("dns-nxdomain", &["nosuchhost.invalid."]);
    assert!(out.contains("does not resolve"), "{out}");
}

/// Given one handle, when 16 C threads poll through it at once, then every call is OK, and each
/// thread's last error is its own.
#[test]
fn sixteen_threads_share_one_handle() {
    let worker = WorkerProcess::plaintext();
    run_case("threads", &[&worker.address]);
}

/// Given a mutual-TLS worker, when C connects with the right CA, certificate and key (from
/// files and from PEM), then idle is OK; with an identity the worker's certificate lacks,
/// WOOL_STATUS_HANDSHAKE.
#[test]
fn mutual_tls_with_the_right_credentials_works() {
    let pki = Pki::generate();
    let worker = mutual_worker(&pki);
    run_case(
        "mtls",
        &[
            &worker.address,
            path(&pki.ca_path),
            path(&pki.leaf.cert_path),
            path(&pki.leaf.key_path),
        ],
    );
}

/// Given a one-way TLS worker, when C connects with credentials holding only the CA, then
/// idle is OK.
#[test]
fn one_way_tls_needs_only_the_ca() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.one_way_args());
    run_case("one-way", &[&worker.address, path(&pki.ca_path)]);
}

/// Given a mutual-TLS worker, when C trusts another CA, then WOOL_STATUS_HANDSHAKE.
#[test]
fn mutual_tls_with_the_wrong_ca_is_a_handshake_failure() {
    let pki = Pki::generate();
    let worker = mutual_worker(&pki);
    run_case(
        "wrong-ca",
        &[
            &worker.address,
            path(&pki.other_ca_path),
            path(&pki.leaf.cert_path),
            path(&pki.leaf.key_path),
        ],
    );
}

/// Given credentials from files that are read again when they change (trusting and presenting
/// worker A's CA) and a second worker B of another CA, when the files are replaced by B's
/// material, then within about a second the same connections reach B and refuse A, and a
/// garbage key written afterwards is refused with the material in force kept.
#[test]
fn reloadable_credentials_follow_their_files() {
    let pki = Pki::generate();
    let worker_a = mutual_worker(&pki);
    let worker_b = WorkerProcess::spawn(&[
        "--tls-ca".into(),
        path(&pki.other_ca_path).into(),
        "--tls-cert".into(),
        path(&pki.other_leaf.cert_path).into(),
        "--tls-key".into(),
        path(&pki.other_leaf.key_path).into(),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str, from: &std::path::Path| {
        let to = dir.path().join(name);
        std::fs::copy(from, &to).unwrap();
        to.display().to_string()
    };
    let client = [
        file("ca.pem", &pki.ca_path),
        file("cert.pem", &pki.leaf.cert_path),
        file("key.pem", &pki.leaf.key_path),
    ];
    let next = [
        file("next-ca.pem", &pki.other_ca_path),
        file("next-cert.pem", &pki.other_leaf.cert_path),
        file("next-key.pem", &pki.other_leaf.key_path),
    ];
    let out = run_case(
        "reload",
        &[
            &worker_a.address,
            &worker_b.address,
            &client[0],
            &client[1],
            &client[2],
            &next[0],
            &next[1],
            &next[2],
        ],
    );
    assert!(out.contains("B still answers"), "{out}");
}

/// Given a mutual-TLS worker, when C sends a plaintext wool_stop, then it is refused and the
/// worker keeps running: it still answers idle over mutual TLS.
#[test]
fn plaintext_stop_against_a_mutual_tls_worker_is_refused_and_it_keeps_running() {
    let pki = Pki::generate();
    let mut worker = mutual_worker(&pki);
    run_case(
        "plaintext-stop",
        &[
            &worker.address,
            path(&pki.ca_path),
            path(&pki.leaf.cert_path),
            path(&pki.leaf.key_path),
        ],
    );
    assert!(worker.is_running());
}

/// Known pitfall: a socket write to a peer that closed raises SIGPIPE. Given a mutual-TLS
/// worker and a C host with the default SIGPIPE disposition whose certificate comes from
/// another CA, when the host calls again and again (five processes, several rounds each), then
/// every call is HANDSHAKE or TRANSIENT and the host exits normally, never killed by SIGPIPE.
#[test]
fn c_host_with_default_sigpipe_survives_a_rejected_client_certificate() {
    let pki = Pki::generate();
    let worker = mutual_worker(&pki);
    let (processes, rounds) = if slowed() { (2, "2") } else { (5, "4") };
    for run in 0..processes {
        let output = run_program(
            harness(),
            &[
                "sigpipe",
                &worker.address,
                path(&pki.ca_path),
                path(&pki.other_leaf.cert_path),
                path(&pki.other_leaf.key_path),
                rounds,
            ],
        );
        print!("{}", String::from_utf8_lossy(&output.stdout));
        assert!(
            output.status.success(),
            "run {run}: the host did not exit normally ({}; 141 = SIGPIPE):\n{}",
            describe_exit(&output),
            String::from_utf8_lossy(&output.stderr)
        );
    }
}

/// Given a C host that used the library and then forked while another of its threads was
/// polling, when the child polls with the inherited handle and a new one and stops a worker,
/// then all succeed (the child builds its own runtime and pool and redials); the parent's
/// polling thread saw no failure and the parent still polls.
#[test]
fn a_forked_child_polls_and_stops_while_the_parent_keeps_working() {
    let worker = WorkerProcess::plaintext();
    let mut retiree = WorkerProcess::plaintext();
    // Never under valgrind: in the child, the parent's runtime is reachable only from threads
    // that fork() did not copy, so valgrind's leak check there reports it as definitely lost.
    let out = run_case_with("fork", &[&worker.address, &retiree.address], false);
    assert!(out.contains("the child polled"), "{out}");
    assert_eq!(
        retiree.wait_exit(Duration::from_secs(10)),
        Some(0),
        "the worker the child stopped exits 0"
    );
}

/// Given the header's version macros, then they agree with wool_version() and Cargo.toml.
#[test]
fn the_headers_version_macros_match_the_library_and_cargo_toml() {
    let out = run_case("version", &[env!("CARGO_PKG_VERSION")]);
    assert!(out.contains(env!("CARGO_PKG_VERSION")), "{out}");
}

/// Given channel options, when C passes each bad value (NULL options, 0, negative, NaN, -inf,
/// below 1 ms, an infinite keepalive timeout, sizes 0 and SIZE_MAX), then each setter refuses it
/// with WOOL_STATUS_INVALID_ARGUMENT naming the option; good values are taken, and a connection
/// made with them (and one with NULL options) polls.
#[test]
fn channel_options_refuse_bad_values_naming_the_option() {
    let worker = WorkerProcess::plaintext();
    run_case("options", &[&worker.address]);
}

/// Given a worker frozen (SIGSTOP) under a wool_idle with no deadline on a connection with
/// keepalive 1 s / 1 s, then the call ends WOOL_STATUS_TRANSIENT naming keepalive (instead of
/// blocking for ever), and after the worker is thawed the next call succeeds.
#[test]
fn a_call_with_no_deadline_to_a_frozen_worker_ends_transient() {
    let worker = WorkerProcess::plaintext();
    let out = run_case("frozen", &[&worker.address, &worker.pid().to_string()]);
    assert!(out.contains("after"), "{out}");
}

// ---- calls that start without blocking: the completion queue --------------------------------

/// A peer that accepts connections (in the kernel's backlog) but never answers.
fn silent_peer() -> (std::net::TcpListener, String) {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    (silent, address)
}

/// Given a single-threaded C host, when it starts 10,000 idle polls on one handle without
/// blocking and collects their completions, then every one completes OK, each tag once.
/// (2,000 under valgrind, which slows each call a hundredfold.)
#[test]
fn a_single_thread_keeps_10000_polls_in_flight_on_one_handle() {
    let worker = WorkerProcess::plaintext();
    let count = if slowed() { "2000" } else { "10000" };
    let out = run_case("queue-many", &[&worker.address, count]);
    assert!(out.contains("completed OK"), "{out}");
}

/// Given a completion queue, then its descriptor is readable (poll(2)) exactly while a
/// completion waits; collecting without waiting returns at once; bad input is refused.
#[test]
fn the_queue_descriptor_is_readable_exactly_while_completions_wait() {
    let worker = WorkerProcess::plaintext();
    run_case("queue-fd", &[&worker.address]);
}

/// Given calls started without blocking, then a cancel during or right after the start
/// completes them at once with WOOL_STATUS_CANCELLED, a cancel after completion or of an
/// unknown id changes nothing, and a stop started without blocking retires the worker.
#[test]
fn started_calls_cancel_before_during_and_after_completion() {
    let (_silent, silent) = silent_peer();
    let mut worker = WorkerProcess::plaintext();
    run_case("queue-cancel", &[&silent, &worker.address]);
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
}

/// Given 300 idle polls started in one wool_idle_start_batch, three of them refused on their
/// own and one toward a silent peer, then the others start and every entry completes once
/// under its tag and call id (the refused ones at once with their message, the silent one when
/// cancelled); a batch at the bound starts, one past it and NULL arrays are refused whole.
#[test]
fn a_batch_of_starts_checks_each_entry_on_its_own_and_completes_every_one() {
    let (_silent, silent) = silent_peer();
    let worker = WorkerProcess::plaintext();
    run_case("queue-batch", &[&silent, &worker.address]);
}

/// Given a queue with 200 calls in flight, when it is freed, then nothing crashes, hangs or
/// leaks; given a handle freed while its 50 calls are in flight, then they all complete.
#[test]
fn freeing_a_queue_or_a_handle_with_calls_in_flight_is_defined() {
    let (_silent, silent) = silent_peer();
    let worker = WorkerProcess::plaintext();
    run_case("queue-free", &[&silent, &worker.address]);
}

/// Given a handle of each of the six types, when it is used after its free, freed twice, or
/// passed where another type is expected, then each call returns WOOL_STATUS_INVALID_ARGUMENT
/// (a free sets the last error) naming what was wrong, and the live handles keep working.
#[test]
fn freed_and_mistyped_handles_of_every_type_are_refused() {
    let worker = WorkerProcess::plaintext();
    let pki = Pki::generate();
    let namespace = common::unique_namespace("c-handles");
    let out = run_case(
        "handles",
        &[&worker.address, path(&pki.ca_path), &namespace],
    );
    assert!(out.contains("6 types refused"), "{out}");
}

/// Given 4 threads polling a connection (a live worker, then a silent peer's calls that run to
/// their deadline), a thread waiting in wool_queue_next with calls in flight, and a thread
/// waiting in wool_watch_next, when each handle is freed from another thread, then every call
/// ends with its status and every wait ends, with no crash and no leak.
#[test]
fn freeing_handles_while_other_threads_are_in_calls_on_them() {
    let worker = WorkerProcess::plaintext();
    let (_silent, silent) = silent_peer();
    let namespace = common::unique_namespace("c-free-busy");
    let out = run_case("free-while-busy", &[&worker.address, &silent, &namespace]);
    assert!(out.contains("then 4 refused as freed"), "{out}");
    assert!(out.contains("the queue's wait ended"), "{out}");
}

/// Given 1,000 handles (a live worker's, a worker without idle, a silent peer, a NULL), when
/// wool_idle_many polls them with one deadline and 64 in flight, then each gets its own
/// status, seconds and code.
#[test]
fn one_call_polls_a_fleet_with_one_deadline() {
    let worker = WorkerProcess::plaintext();
    let runtime = rust_side_runtime();
    let (legacy, server) = runtime.block_on(common::serve_legacy_worker());
    let (_silent, silent) = silent_peer();
    // A deadline the live polls meet even under valgrind's hundredfold slowdown.
    let deadline = if slowed() { "30" } else { "2" };
    let out = run_case("idle-many", &[&worker.address, &legacy, &silent, deadline]);
    assert!(out.contains("in one call"), "{out}");
    server.abort();
}

/// Given a live worker and a silent peer, when C starts sweeps with wool_idle_many_start, then
/// each completes once into the queue (kind SWEEP, its count) with one result per handle; a
/// sweep cancelled mid-way or at once, and sweeps of a freed queue, never write their results
/// after wool_cancel / wool_queue_free returned (the host frees each array at once: under
/// valgrind a later write would fail the run); handles freed under a sweep are kept by it.
#[test]
fn c_starts_sweeps_and_frees_their_results_after_a_cancel() {
    let worker = WorkerProcess::plaintext();
    let (_silent, silent) = silent_peer();
    let out = run_case("sweep-start", &[&worker.address, &silent]);
    assert!(out.contains("one completion per sweep"), "{out}");
}

/// Given a real Wool pool of 3 under a namespace, when C lists it with wool_discover, then it
/// gets the 3 workers with every field filled, reaches each through wool_connect_worker, and
/// bad inputs are refused with messages.
#[test]
fn c_discovers_a_wool_pool_and_reaches_its_workers() {
    let namespace = common::unique_namespace("c-discover");
    let _pool = common::WoolPool::start(&namespace, 3, &[], None);
    let out = run_case("discover", &[&namespace, "3"]);
    assert!(out.contains("3 workers of namespace"), "{out}");
}

/// Given a running Wool pool of 2, when C watches its namespace, then both workers are reported
/// as added, then nothing.
#[test]
fn c_watches_a_wool_pool() {
    let namespace = common::unique_namespace("c-watch");
    let _pool = common::WoolPool::start(&namespace, 2, &[], None);
    let out = run_case("watch", &[&namespace, "2"]);
    assert!(out.contains("2 workers reported as added"), "{out}");
}

/// Given a worker on 127.0.0.1, when a host lists `localhost` at its port with
/// wool_discover_dns, then the worker is in the list (a DNS record: nil uid, no version,
/// identity `localhost`, admitted), wool_worker_list_connect reaches it and it answers a poll;
/// a NULL name, a non-UTF-8 name, a name with a port, port 0, a NaN timeout and the DNS backend
/// given to wool_discover and wool_watch_new are refused with INVALID_ARGUMENT.
#[test]
fn c_lists_a_fleet_by_dns_name() {
    use wool::discovery::{wool_discover_admitted, wool_worker_list_connect};
    use wool::{
        wool_discover, wool_discover_dns, wool_watch, wool_watch_new, wool_worker_list,
        wool_worker_list_count, wool_worker_list_free, wool_worker_list_get, WOOL_DISCOVERY_DNS,
    };
    let worker = WorkerProcess::plaintext();
    let port = common::port_of(&worker.address);
    let localhost = CString::new("localhost").unwrap();
    let mut list: *mut wool_worker_list = std::ptr::null_mut();
    // SAFETY: NUL-terminated strings, NULL or live handles, writable out-pointers; `list` and
    // `conn` are used only until freed, the info pointers only while `list` lives.
    unsafe {
        let status = wool_discover_dns(localhost.as_ptr(), port, 0.0, std::ptr::null(), &mut list);
        assert_eq!(status, wool_status::Ok, "{:?}", last_error());
        let count = wool_worker_list_count(list);
        let index = (0..count)
            .find(|i| {
                let info = &*wool_worker_list_get(list, *i);
                CStr::from_ptr(info.address).to_str().unwrap() == worker.address
            })
            .expect("the worker is listed");
        let info = &*wool_worker_list_get(list, index);
        assert_eq!(CStr::from_ptr(info.identity).to_str().unwrap(), "localhost");
        assert_eq!(CStr::from_ptr(info.version).to_str().unwrap(), "");
        assert_eq!(
            CStr::from_ptr(info.uid).to_str().unwrap(),
            "00000000-0000-0000-0000-000000000000"
        );
        assert!(!info.secure);
        assert_eq!(info.refusal, wool::discovery::WOOL_DISCOVERY_REFUSAL_NONE);
        let mut conn: *mut wool_connection = std::ptr::null_mut();
        let status =
            wool_worker_list_connect(list, index, std::ptr::null(), std::ptr::null(), &mut conn);
        assert_eq!(status, wool_status::Ok, "{:?}", last_error());
        let mut seconds = -1.0;
        assert_eq!(
            wool_idle(conn, 5.0, &mut seconds),
            wool_status::Ok,
            "{:?}",
            last_error()
        );
        assert!(seconds >= 0.0);
        wool_free(conn);
        wool_worker_list_free(list);

        let not_utf8 = [0xffu8 as c_char, 0];
        let with_port = CString::new("localhost:1").unwrap();
        for (name, port, timeout, says) in [
            (std::ptr::null(), port, 0.0, "name"),
            (not_utf8.as_ptr(), port, 0.0, "UTF-8"),
            (with_port.as_ptr(), port, 0.0, "give the port"),
            (localhost.as_ptr(), 0, 0.0, "port"),
            (localhost.as_ptr(), port, f64::NAN, "timeout_seconds"),
            (localhost.as_ptr(), port, -1.0, "timeout_seconds"),
        ] {
            let mut list: *mut wool_worker_list = std::ptr::null_mut();
            let status = wool_discover_dns(name, port, timeout, std::ptr::null(), &mut list);
            assert_eq!(status, wool_status::InvalidArgument, "{says}");
            assert!(list.is_null());
            let (message, _) = last_error();
            assert!(message.contains(says), "{says}: {message}");
        }
        assert_eq!(
            wool_discover_dns(
                localhost.as_ptr(),
                port,
                0.0,
                std::ptr::null(),
                std::ptr::null_mut()
            ),
            wool_status::InvalidArgument
        );
        let mut list: *mut wool_worker_list = std::ptr::null_mut();
        assert_eq!(
            wool_discover(localhost.as_ptr(), WOOL_DISCOVERY_DNS, 0.0, &mut list),
            wool_status::InvalidArgument
        );
        assert!(
            last_error().0.contains("wool_discover_dns"),
            "{:?}",
            last_error()
        );
        assert_eq!(
            wool_discover_admitted(
                localhost.as_ptr(),
                WOOL_DISCOVERY_DNS,
                0.0,
                std::ptr::null(),
                &mut list
            ),
            wool_status::InvalidArgument
        );
        let mut watch: *mut wool_watch = std::ptr::null_mut();
        assert_eq!(
            wool_watch_new(localhost.as_ptr(), WOOL_DISCOVERY_DNS, &mut watch),
            wool_status::InvalidArgument
        );
        assert!(watch.is_null());
    }
}

/// Given three idle workers, when C runs wool_retire_idle as a dry run and then keeping one,
/// then the dry run stops nothing and the real round retires the two most idle (they exit 0)
/// and keeps the last.
#[test]
fn c_retires_idle_workers_by_policy() {
    let mut workers: Vec<WorkerProcess> = (0..3)
        .map(|_| {
            let worker = WorkerProcess::plaintext();
            std::thread::sleep(Duration::from_millis(100));
            worker
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let addresses: Vec<&str> = workers.iter().map(|w| w.address.as_str()).collect();
    let out = run_case("retire", &addresses);
    assert!(out.contains("dry run stopped nothing"), "{out}");
    assert_eq!(workers[0].wait_exit(Duration::from_secs(10)), Some(0));
    assert_eq!(workers[1].wait_exit(Duration::from_secs(10)), Some(0));
    assert!(workers[2].is_running());
}

// ---- hostile workers, from C ------------------------------------------------------------------

/// Runs the `hostile` case against the fake worker `serve` makes (`common::hostile`, served on
/// a runtime of this process while the C program runs): wool_idle and wool_stop must each give
/// `status` with gRPC code `code`, a message, and return within their timeout (2 s) plus 3 s.
/// Valgrind's slow start (seconds for a program's first call, before the call's deadline
/// starts) gets a 15 s margin, and, when the failure is the client's own finding (`found`), a
/// 30 s timeout, so that the deadline is not what ends the call.
fn c_host_meets<F, Fut>(serve: F, status: &str, code: i32, found: bool, ca: Option<&Path>)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = hostile::FakeWorker>,
{
    let runtime = rust_side_runtime();
    let worker = runtime.block_on(serve());
    let timeout = if found && slowed() { "30" } else { "2" };
    let margin = if slowed() { "15" } else { "3" };
    let code = code.to_string();
    let mut args = vec![worker.address.as_str(), status, &code, timeout, margin];
    args.extend(ca.map(path));
    let out = run_case("hostile", &args);
    assert!(out.contains("hostile: stop gave"), "{out}");
    drop(worker);
}

/// Given a "worker" that answers with an HTTP/1.1 error page instead of HTTP/2, when C polls
/// and stops it, then each call is WOOL_STATUS_RPC_ERROR (code 13, INTERNAL) with a message.
#[test]
fn c_host_meets_garbage_instead_of_http2() {
    let page = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n".to_vec();
    c_host_meets(
        || hostile::writing_at_once(page),
        "WOOL_STATUS_RPC_ERROR",
        13,
        true,
        None,
    );
}

/// Given a worker whose answer announces a 200 MiB message (and streams it), when C polls and
/// stops it with the default 100 MiB receive limit, then each call is WOOL_STATUS_TRANSIENT
/// with code 8 (RESOURCE_EXHAUSTED).
#[test]
fn c_host_meets_a_message_over_the_receive_limit() {
    c_host_meets(
        || hostile::announcing_a_huge_message(200 << 20, 8 << 20),
        "WOOL_STATUS_TRANSIENT",
        8,
        true,
        None,
    );
}

/// Given a worker that answers each request with GOAWAY naming no stream as processed, when C
/// polls and stops it, then each call is WOOL_STATUS_TRANSIENT with code 14 (UNAVAILABLE).
#[test]
fn c_host_meets_goaway_mid_call() {
    c_host_meets(
        || hostile::answering(|_| hostile::goaway(0, hostile::NO_ERROR, b"going away")),
        "WOOL_STATUS_TRANSIENT",
        14,
        true,
        None,
    );
}

/// Given a worker that speaks HTTP/2 and reads the request but never answers, when C polls and
/// stops it with a 2 s timeout, then each call is WOOL_STATUS_TRANSIENT with code 4
/// (DEADLINE_EXCEEDED) at the deadline.
#[test]
fn c_host_meets_a_worker_that_never_answers() {
    c_host_meets(
        hostile::never_answering,
        "WOOL_STATUS_TRANSIENT",
        4,
        false,
        None,
    );
}

/// Given a worker that answers with HEADERS and then CONTINUATION frames without end, when C
/// polls and stops it, then h2's limit ends each call: WOOL_STATUS_RPC_ERROR, code 13.
#[test]
fn c_host_meets_an_endless_header_block() {
    c_host_meets(
        || hostile::endless_header_block(0),
        "WOOL_STATUS_RPC_ERROR",
        13,
        true,
        None,
    );
}

/// Given a worker whose trailers say grpc-status 14 with grpc-status-details-bin that is not
/// base64 (on which tonic panics), when C polls and stops it, then each call is
/// WOOL_STATUS_TRANSIENT with code 14, never WOOL_STATUS_PANIC.
#[test]
fn c_host_meets_status_details_that_are_not_base64() {
    c_host_meets(
        || {
            hostile::answering(|stream| {
                [
                    hostile::response_head(stream),
                    hostile::trailers(
                        stream,
                        &[
                            ("grpc-status", b"14"),
                            ("grpc-message", b"draining"),
                            ("grpc-status-details-bin", b"!!not base64!!"),
                        ],
                    ),
                ]
                .concat()
            })
        },
        "WOOL_STATUS_TRANSIENT",
        14,
        true,
        None,
    );
}

/// Given a worker whose trailers say grpc-status "abc", when C polls and stops it, then each
/// call is WOOL_STATUS_RPC_ERROR with code 2 (UNKNOWN).
#[test]
fn c_host_meets_a_status_that_is_no_code() {
    c_host_meets(
        || {
            hostile::answering(|stream| {
                [
                    hostile::response_head(stream),
                    hostile::trailers(stream, &[("grpc-status", b"abc")]),
                ]
                .concat()
            })
        },
        "WOOL_STATUS_RPC_ERROR",
        2,
        true,
        None,
    );
}

/// Given a TLS worker presenting a chain of 100 certificates (its leaf and 99 intermediates up
/// to the CA C trusts), when C polls and stops it over one-way TLS, then each call is
/// WOOL_STATUS_HANDSHAKE (code 14).
#[test]
fn c_host_meets_a_chain_of_100_certificates() {
    let (ca_pem, chain, key) = hostile::long_chain(99);
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.pem");
    std::fs::write(&ca, ca_pem).unwrap();
    c_host_meets(
        || hostile::tls(hostile::tls_config(chain, key)),
        "WOOL_STATUS_HANDSHAKE",
        14,
        true,
        Some(&ca),
    );
}

// ---- the C example ---------------------------------------------------------------------------

/// Given a worker with a short task in flight, when examples/c/poll_then_retire polls it every
/// 50 ms with a 0.3 s threshold, then it prints the readings (0 while busy), retires the worker
/// once idle long enough, and both exit 0.
#[test]
fn example_poll_then_retire_polls_then_retires_the_worker() {
    let program = poll_then_retire();
    let mut worker = WorkerProcess::plaintext();
    let runtime = rust_side_runtime();
    let task = dispatch_sleep(&runtime, &worker.address, task_seconds(0.5));
    let output = run_program(program, &[&worker.address, "0.05", "0.3", "1"]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    assert!(
        output.status.success(),
        "poll_then_retire failed ({}):\n{stdout}{}",
        describe_exit(&output),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("idle  0.000 s   busy: work in flight"),
        "{stdout}"
    );
    assert!(stdout.contains("worker retired"), "{stdout}");
    assert!(runtime.block_on(task).unwrap().is_ok());
    assert_eq!(worker.wait_exit(Duration::from_secs(15)), Some(0));
}

/// Given an address nobody listens on, when poll_then_retire polls it, then it exits 1 and
/// names the status, the gRPC code and the last error.
#[test]
fn example_poll_then_retire_reports_a_failure_and_exits_non_zero() {
    let output = run_program(
        poll_then_retire(),
        &[&common::unused_local_address(), "0.05", "1"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("wool_idle failed: WOOL_STATUS_TRANSIENT (gRPC code 14)"),
        "{stderr}"
    );
}

// ---- the C API called from Rust threads inside tokio runtimes -------------------------------

/// Ends the test process if a body deadlocks (a blocked runtime thread cannot be timed out from
/// inside): the test fails loudly instead of hanging the suite.
struct Watchdog(std::sync::mpsc::Sender<()>);

impl Watchdog {
    fn arm(what: &'static str, limit: Duration) -> Self {
        let (done, finished) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            if let Err(std::sync::mpsc::RecvTimeoutError::Timeout) = finished.recv_timeout(limit) {
                eprintln!("{what}: deadlocked (no return within {limit:?})");
                std::process::exit(101);
            }
        });
        Self(done)
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

fn last_error() -> (String, i32) {
    let mut buf = [0 as c_char; 512];
    // SAFETY: `buf` has `buf.len()` writable bytes.
    unsafe { wool_last_error(buf.as_mut_ptr(), buf.len()) };
    // SAFETY: wool_last_error NUL-terminated it.
    let message = unsafe { CStr::from_ptr(buf.as_ptr()) };
    (message.to_string_lossy().into_owned(), wool_last_rpc_code())
}

/// The C API as a Rust host would call it from an async task: connect, idle twice, a refused
/// call, stop, a transient idle after it, free. Blocking calls straight on the runtime's thread.
fn exercise_the_c_api(address: &str) {
    let target = CString::new(address).unwrap();
    let mut conn: *mut wool_connection = std::ptr::null_mut();
    let mut seconds = -1.0;
    // SAFETY: valid NUL-terminated target, NULL credentials, writable out-pointers; `conn` is
    // used only between wool_connect and wool_free.
    unsafe {
        assert_eq!(
            wool_connect(target.as_ptr(), std::ptr::null(), &mut conn),
            wool_status::Ok
        );
        for _ in 0..2 {
            let status = wool_idle(conn, 10.0, &mut seconds);
            assert_eq!(status, wool_status::Ok, "{:?}", last_error());
            assert!(seconds >= 0.0);
        }
        assert_eq!(
            wool_idle(conn, f64::NAN, &mut seconds),
            wool_status::InvalidArgument
        );
        assert_eq!(
            wool_stop(conn, 0.0, 10.0),
            wool_status::Ok,
            "{:?}",
            last_error()
        );
        let stopped = Instant::now();
        let status = loop {
            match wool_idle(conn, 5.0, &mut seconds) {
                wool_status::Ok => {
                    let late = stopped.elapsed();
                    assert!(
                        late < Duration::from_secs(5),
                        "still answering {late:?} after stop"
                    );
                    std::thread::sleep(Duration::from_millis(20));
                }
                failed => break failed,
            }
        };
        assert_eq!(
            (status, last_error().1),
            (wool_status::Transient, 14),
            "{:?}",
            last_error()
        );
        wool_free(conn);
    }
}

/// Known pitfall: `Runtime::block_on` panics on a thread already inside a runtime. Given a Rust
/// host on a multi-threaded tokio runtime, when it calls the blocking C API from a task, then
/// nothing panics or deadlocks and every call gives its usual answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c_api_from_a_multi_thread_runtime_task_neither_panics_nor_deadlocks() {
    let _watchdog = Watchdog::arm("multi-thread runtime", Duration::from_secs(60));
    let mut worker = WorkerProcess::plaintext();
    exercise_the_c_api(&worker.address);
    assert_eq!(
        worker.wait_exit(Duration::from_secs(30)),
        Some(0),
        "the stopped worker did not exit with 0"
    );
}

/// As above, on a current-thread runtime, whose only thread the blocking calls occupy.
#[tokio::test(flavor = "current_thread")]
async fn c_api_from_a_current_thread_runtime_neither_panics_nor_deadlocks() {
    let _watchdog = Watchdog::arm("current-thread runtime", Duration::from_secs(60));
    let mut worker = WorkerProcess::plaintext();
    exercise_the_c_api(&worker.address);
    assert_eq!(
        worker.wait_exit(Duration::from_secs(30)),
        Some(0),
        "the stopped worker did not exit with 0"
    );
}

/// One wool_connection shared by the threads of a test (a handle may be used by many threads
/// at once: C-API.md), freed on drop.
struct SharedHandle(*mut wool_connection);

// SAFETY: the library allows any thread to use a handle, many at once.
unsafe impl Send for SharedHandle {}
// SAFETY: as above.
unsafe impl Sync for SharedHandle {}

impl SharedHandle {
    fn connect(address: &str) -> Self {
        let target = CString::new(address).unwrap();
        let mut conn: *mut wool_connection = std::ptr::null_mut();
        // SAFETY: valid NUL-terminated target, NULL credentials, a writable out-pointer.
        let status = unsafe { wool_connect(target.as_ptr(), std::ptr::null(), &mut conn) };
        assert_eq!(status, wool_status::Ok, "{:?}", last_error());
        Self(conn)
    }

    /// wool_idle with a deadline of `timeout` seconds: its status, and the seconds on OK.
    fn idle(&self, timeout: f64) -> (wool_status, f64) {
        let mut seconds = -1.0;
        // SAFETY: a live handle (freed only on drop) and a writable out-pointer.
        let status = unsafe { wool_idle(self.0, timeout, &mut seconds) };
        (status, seconds)
    }
}

impl Drop for SharedHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is freed once, after every thread using it has been joined.
        unsafe { wool_free(self.0) };
    }
}

/// Given 48 threads polling one handle in a loop (blocked in wool_idle at once), one thread
/// polling a frozen worker (SIGSTOP) with a 1 s deadline, and one thread inside a host's tokio
/// runtime polling the live worker too, then the frozen worker's call ends
/// WOOL_STATUS_TRANSIENT with code 4 (its deadline) after 1 s and well before the 30 s the
/// others use, while every other thread has calls complete OK meanwhile: each thread
/// blocked at once ends on its own answer or its own deadline, never on another's.
#[test]
fn threads_blocked_at_once_end_on_their_own_answers_and_deadlines() {
    let _watchdog = Watchdog::arm("threads blocked at once", Duration::from_secs(120));
    let live = WorkerProcess::plaintext();
    let frozen = WorkerProcess::plaintext();
    let live_handle = SharedHandle::connect(&live.address);
    let frozen_handle = SharedHandle::connect(&frozen.address);
    assert_eq!(
        frozen_handle.idle(10.0).0,
        wool_status::Ok,
        "{:?}",
        last_error()
    );
    frozen.freeze();
    let frozen_done = std::sync::atomic::AtomicBool::new(false);
    let (frozen_outcome, answers) = std::thread::scope(|scope| {
        // Polls until the frozen call has ended; counts the answers that came before it did.
        let poll_until_frozen_done = || {
            let mut answered_meanwhile = 0u32;
            loop {
                let (status, seconds) = live_handle.idle(30.0);
                assert_eq!(status, wool_status::Ok, "{:?}", last_error());
                assert!(seconds >= 0.0);
                if frozen_done.load(std::sync::atomic::Ordering::SeqCst) {
                    return answered_meanwhile;
                }
                answered_meanwhile += 1;
            }
        };
        let pollers: Vec<_> = (0..48)
            .map(|_| scope.spawn(poll_until_frozen_done))
            .collect();
        let in_a_runtime = scope.spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move { poll_until_frozen_done() })
        });
        let frozen_call = scope.spawn(|| {
            let started = Instant::now();
            let (status, _) = frozen_handle.idle(1.0);
            let took = started.elapsed();
            let code = last_error().1;
            frozen_done.store(true, std::sync::atomic::Ordering::SeqCst);
            (status, code, took)
        });
        let frozen_outcome = frozen_call.join().unwrap();
        let mut answers: Vec<u32> = pollers.into_iter().map(|p| p.join().unwrap()).collect();
        answers.push(in_a_runtime.join().unwrap());
        (frozen_outcome, answers)
    });
    frozen.thaw();
    let (status, code, took) = frozen_outcome;
    assert_eq!(
        (status, code),
        (wool_status::Transient, 4),
        "after {took:?}"
    );
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(10),
        "the frozen worker's call ended after {took:?}, its deadline being 1 s"
    );
    assert_eq!(answers.len(), 49);
    assert!(
        answers.iter().all(|&answered| answered >= 1),
        "answers each thread had while the frozen call waited: {answers:?}"
    );
}

/// Given a thread with no runtime at all, when it connects and frees without ever calling the
/// worker, then both succeed: making a handle needs no runtime and does no I/O.
#[test]
fn connect_and_free_need_no_runtime() {
    let target = CString::new(common::unused_local_address()).unwrap();
    let mut conn: *mut wool_connection = std::ptr::null_mut();
    // SAFETY: as in `exercise_the_c_api`.
    unsafe {
        assert_eq!(
            wool_connect(target.as_ptr(), std::ptr::null(), &mut conn),
            wool_status::Ok
        );
        assert!(!conn.is_null());
        wool_free(conn);
    }
}
