//! `woolctl` as a process, as an operator runs it: against our workers and a real Wool 0.15.7
//! pool found by namespace; output formats, exit statuses, stdout/stderr, TLS flags.

use crate::common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{unique_namespace, Pki, WoolPool, WorkerProcess};

/// Runs woolctl with `args`, stdin closed; its whole output.
pub(crate) fn woolctl(args: &[&str]) -> Output {
    Command::new(common::program("woolctl"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("woolctl runs")
}

pub(crate) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Every stdout line parsed as one JSON object.
fn json_lines(output: &Output) -> Vec<serde_json::Value> {
    stdout(output)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?}: {e}")))
        .collect()
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

/// Given two live workers and an address with nothing behind it, when `woolctl idle` polls
/// them, then each gets a table row (or a JSON line, in order), and the exit status is 1; with
/// the live ones only, 0.
#[test]
fn idle_prints_each_worker_and_exits_1_when_any_failed() {
    let a = WorkerProcess::plaintext();
    let b = WorkerProcess::plaintext();
    let dead = common::unused_local_address();
    let table = woolctl(&["idle", &a.address, &b.address, &dead]);
    assert_eq!(code(&table), 1, "{}", stderr(&table));
    let text = stdout(&table);
    assert!(text.lines().next().unwrap().starts_with("TARGET"), "{text}");
    assert!(text.contains(&a.address) && text.contains(&dead), "{text}");
    assert!(text.contains("transient"), "{text}");
    let json = woolctl(&["idle", "--output", "json", &a.address, &dead, &b.address]);
    let lines = json_lines(&json);
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0]["target"], a.address.as_str());
    assert_eq!(lines[0]["ok"], true);
    assert!(lines[0]["idle_seconds"].as_f64().unwrap() >= 0.0);
    assert_eq!(lines[1]["ok"], false);
    assert_eq!(lines[1]["error"]["kind"], "transient");
    assert_eq!(lines[1]["error"]["code"], 14);
    assert_eq!(lines[2]["target"], b.address.as_str());
    let ok = woolctl(&["idle", "--output", "json", &a.address, &b.address]);
    assert_eq!(code(&ok), 0, "{}", stderr(&ok));
    assert!(stderr(&ok).is_empty(), "{}", stderr(&ok));
}

/// Given a worker, when `woolctl stop --grace 0` stops it, then it reports "stopped", exits 0,
/// and the worker process exits 0.
#[test]
fn stop_retires_the_worker() {
    let mut worker = WorkerProcess::plaintext();
    let output = woolctl(&["stop", "--grace", "0", &worker.address]);
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    assert!(stdout(&output).contains("stopped"), "{}", stdout(&output));
    assert_eq!(worker.wait_exit(Duration::from_secs(10)), Some(0));
    let again = woolctl(&["stop", "--output", "json", &worker.address]);
    assert_eq!(code(&again), 1);
    assert_eq!(json_lines(&again)[0]["error"]["kind"], "transient");
}

/// Usage errors exit 2 with a message on stderr and nothing on stdout.
#[test]
fn usage_errors_exit_2() {
    for args in [
        &[][..],
        &["idle"][..],
        &["idle", "not a target"][..],
        &["reap", "127.0.0.1:1"][..],
        &["reap", "--idle-over", "soon", "127.0.0.1:1"][..],
        &["sweep"][..],
        &["sweep", "--namespace", "x", "127.0.0.1:1"][..],
        &["sweep", "--lan", "127.0.0.1:1"][..],
        &["stop", "--grace", "nan", "127.0.0.1:1"][..],
        &["idle", "--output", "yaml", "127.0.0.1:1"][..],
        &["idle", "--tls-client-cert", "c.pem", "127.0.0.1:1"][..],
        &[
            "idle",
            "--tls-ca-cert",
            "/nonexistent/ca.pem",
            "127.0.0.1:1",
        ][..],
        &["discover", ""][..],
        &["sweep", "--max-in-flight", "0", "127.0.0.1:1"][..],
        &["idle", "--rpc-timeout", "0", "127.0.0.1:1"][..],
        &[
            "reap",
            "--idle-over",
            "1s",
            "--interval",
            "0",
            "127.0.0.1:1",
        ][..],
        &["reap", "--idle-over", "1e30", "127.0.0.1:1"][..],
        &["sweep", "--dns-name", "localhost"][..],
        &["sweep", "--port", "1"][..],
        &["sweep", "--dns-name", "localhost", "--port", "0"][..],
        &[
            "sweep",
            "--dns-name",
            "localhost",
            "--port",
            "1",
            "--namespace",
            "x",
        ][..],
        &[
            "sweep",
            "--dns-name",
            "localhost",
            "--port",
            "1",
            "127.0.0.1:1",
        ][..],
        &["sweep", "--dns-name", "localhost", "--port", "1", "--lan"][..],
        &["sweep", "--dns-name", "w:1", "--port", "1"][..],
        &["discover", "x", "--dns-name", "localhost", "--port", "1"][..],
    ] {
        let output = woolctl(args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        assert!(stdout(&output).is_empty(), "{args:?}: {}", stdout(&output));
        assert!(!stderr(&output).is_empty(), "{args:?}");
    }
}

/// Given a worker on 127.0.0.1 (`localhost` resolves there, and may resolve to ::1 too, where
/// nothing listens), when woolctl discovers, sweeps and dry-run reaps by `--dns-name localhost
/// --port <its port>`, then each lists or polls that worker: its row with its idle seconds; the
/// exit status is 0 unless the ::1 row failed.
#[test]
fn discover_sweep_and_reap_a_fleet_by_dns_name() {
    let worker = WorkerProcess::plaintext();
    let port = worker.address.rsplit(':').next().unwrap().to_owned();
    let ipv6 = format!("[::1]:{port}");
    let by_dns = [
        "--dns-name",
        "localhost",
        "--port",
        &port,
        "--output",
        "json",
    ];
    let sweep = woolctl(&[&["sweep"][..], &by_dns].concat());
    let lines = json_lines(&sweep);
    let ours: Vec<_> = lines
        .iter()
        .filter(|l| l["target"] == worker.address.as_str())
        .collect();
    assert_eq!(ours.len(), 1, "{lines:?}");
    assert_eq!(ours[0]["ok"], true, "{lines:?}");
    assert!(
        ours[0]["idle_seconds"].as_f64().unwrap() >= 0.0,
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .all(|l| l["target"] == worker.address.as_str() || l["target"] == ipv6.as_str()),
        "{lines:?}"
    );
    let expected = i32::from(lines.len() > 1);
    assert_eq!(code(&sweep), expected, "{}", stderr(&sweep));
    let table = woolctl(&["sweep", "--dns-name", "localhost", "--port", &port]);
    assert_eq!(code(&table), expected, "{}", stderr(&table));
    assert!(
        stdout(&table).contains(&worker.address),
        "{}",
        stdout(&table)
    );
    let discover = woolctl(&[&["discover"][..], &by_dns].concat());
    assert_eq!(code(&discover), 0, "{}", stderr(&discover));
    assert!(
        json_lines(&discover)
            .iter()
            .any(|l| l["address"] == worker.address.as_str()),
        "{}",
        stdout(&discover)
    );
    let reap = woolctl(&[&["reap", "--idle-over", "1h", "--dry-run"][..], &by_dns].concat());
    assert_eq!(code(&reap), expected, "{}", stderr(&reap));
    assert!(stdout(&reap).contains(&worker.address), "{}", stdout(&reap));
    let watch = woolctl(&[&["discover", "--watch"][..], &by_dns].concat());
    assert_ne!(code(&watch), 0);
    assert!(
        stderr(&watch).contains("cannot watch"),
        "{}",
        stderr(&watch)
    );
}

/// Given a DNS name that does not exist (`nosuchhost.invalid.`: the special-use `.invalid`
/// zone, answered NXDOMAIN by the resolver itself; the final dot keeps resolv.conf's search
/// list out, so no query leaves the machine), when `sweep`, `discover` and `reap` name it,
/// then each exits 1 saying the name does not resolve, and none calls it a namespace or a
/// fleet with no admitted workers.
#[test]
fn a_dns_name_that_does_not_resolve_fails_the_run() {
    for command in [
        &["sweep"][..],
        &["discover"][..],
        &["reap", "--idle-over", "1h", "--dry-run"][..],
    ] {
        let output = woolctl(
            &[
                command,
                &["--dns-name", "nosuchhost.invalid.", "--port", "50051"],
            ]
            .concat(),
        );
        let said = stderr(&output);
        assert_eq!(code(&output), 1, "{command:?}: {said}");
        assert!(
            said.contains("nosuchhost.invalid. does not resolve"),
            "{command:?}: {said}"
        );
        assert!(!said.contains("namespace"), "{command:?}: {said}");
        assert!(!said.contains("no admitted workers"), "{command:?}: {said}");
    }
}

/// Given a network namespace whose resolv.conf names a DNS server on its own loopback (run by
/// this test: NXDOMAIN for `gone.wool.test.`, NOERROR with no records for `empty.wool.test.`),
/// when `woolctl sweep` names each there, then the first fails (exit 1, "does not resolve") and
/// the second is an empty fleet (exit 0, "resolves to no addresses"), neither called a
/// namespace. No query leaves the namespace.
#[test]
fn a_dns_name_without_addresses_is_said_to_resolve_to_none() {
    let Some(link) = common::netns::link_or_skip("d") else {
        return;
    };
    let ns = link.client_ns.clone();
    let etc = std::path::PathBuf::from("/etc/netns").join(&ns);
    std::fs::create_dir_all(&etc).unwrap();
    std::fs::write(etc.join("resolv.conf"), "nameserver 127.0.0.1\n").unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, bound) = std::sync::mpsc::channel();
    let server = common::netns::Link::run_in(&ns, async move {
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:53").await.unwrap();
        ready.send(()).unwrap();
        let mut query = [0u8; 512];
        let serve = async {
            loop {
                let Ok((length, from)) = socket.recv_from(&mut query).await else {
                    continue;
                };
                if let Some(answer) = dns_answer(&query[..length]) {
                    let _ = socket.send_to(&answer, from).await;
                }
            }
        };
        tokio::select! {
            () = serve => {}
            _ = stopped => {}
        }
    });
    bound.recv_timeout(Duration::from_secs(10)).unwrap();
    let sweep = |name: &str| {
        Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(common::program("woolctl"))
            .args(["sweep", "--dns-name", name, "--port", "50051"])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let gone = sweep("gone.wool.test.");
    let empty = sweep("empty.wool.test.");
    let _ = stop.send(());
    server.join().unwrap();
    let _ = std::fs::remove_dir_all(&etc);
    drop(link);
    assert_eq!(code(&gone), 1, "{}", stderr(&gone));
    assert!(
        stderr(&gone).contains("gone.wool.test. does not resolve"),
        "{}",
        stderr(&gone)
    );
    assert_eq!(code(&empty), 0, "{}", stderr(&empty));
    assert!(
        stderr(&empty).contains("empty.wool.test. resolves to no addresses"),
        "{}",
        stderr(&empty)
    );
    for said in [stderr(&gone), stderr(&empty)] {
        assert!(!said.contains("namespace"), "{said}");
    }
}

/// A DNS answer to `query` with no records: NXDOMAIN when the name's first label is `gone`,
/// else NOERROR (the header: the same id, a response, RD copied, RA; the question copied).
fn dns_answer(query: &[u8]) -> Option<Vec<u8>> {
    let first_label = query.get(13..13 + usize::from(*query.get(12)?))?;
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + usize::from(query[end]);
    }
    let question = query.get(12..end + 1 + 4)?; // the root label, QTYPE and QCLASS
    let rcode = if first_label == b"gone" { 3 } else { 0 };
    let mut answer = vec![query[0], query[1], 0x80 | (query[2] & 0x01), 0x80 | rcode];
    answer.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]);
    answer.extend_from_slice(question);
    Some(answer)
}

/// Given a real Wool pool of 3 with one worker busy, when woolctl discovers, sweeps and reaps it
/// by namespace, then `discover` lists what Wool's own subscriber lists, `sweep` shows the busy
/// worker at 0, a dry-run reap stops nothing, and a reap retires the two idle workers and keeps
/// the busy one.
#[test]
fn discover_sweep_and_reap_a_wool_pool_by_namespace() {
    let namespace = unique_namespace("woolctl");
    let mut pool = WoolPool::start(&namespace, 3, &["--busy", "60"], None);
    pool.expect_line("busy-dispatched", Duration::from_secs(10));
    let listed = woolctl(&["discover", &namespace, "--output", "json"]);
    assert_eq!(code(&listed), 0, "{}", stderr(&listed));
    let ours: Vec<String> = json_lines(&listed)
        .iter()
        .map(|w| format!("{} {}", w["uid"], w["address"]))
        .collect();
    let wools: Vec<String> = WoolPool::wool_listing(&namespace, &[], None)
        .iter()
        .map(|w| format!("{} {}", w["uid"], w["address"]))
        .collect();
    assert_eq!(ours, wools);
    // Until one worker is busy and the other two have idled past the threshold.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sweep = woolctl(&["sweep", "--namespace", &namespace, "--output", "json"]);
        let lines = json_lines(&sweep);
        let busy = lines.iter().filter(|l| l["idle_seconds"] == 0.0).count();
        let idle = lines
            .iter()
            .filter(|l| l["idle_seconds"].as_f64().is_some_and(|s| s >= 1.5))
            .count();
        if busy == 1 && idle == 2 {
            assert_eq!(code(&sweep), 0);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never one busy, two idle: {lines:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let dry = woolctl(&[
        "reap",
        "--idle-over",
        "1s",
        "--dry-run",
        "--namespace",
        &namespace,
        "--output",
        "json",
    ]);
    assert_eq!(code(&dry), 0, "{}", stderr(&dry));
    let actions: Vec<String> = json_lines(&dry)
        .iter()
        .map(|l| l["action"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        actions.iter().filter(|a| *a == "would-retire").count(),
        2,
        "{actions:?}"
    );
    let reap = woolctl(&[
        "reap",
        "--idle-over",
        "1s",
        "--grace",
        "5",
        "--namespace",
        &namespace,
        "--output",
        "json",
    ]);
    assert_eq!(code(&reap), 0, "{}", stderr(&reap));
    let lines = json_lines(&reap);
    let retired = lines
        .iter()
        .filter(|l| l["action"] == "retired" && l["reason"] == "idle")
        .count();
    let kept: Vec<_> = lines.iter().filter(|l| l["action"] == "keep").collect();
    assert_eq!(retired, 2, "{lines:?}");
    assert_eq!(kept.len(), 1, "{lines:?}");
    assert_eq!(kept[0]["reason"], "busy");
    // The busy worker still answers; the retired ones do not.
    let after = woolctl(&["sweep", "--namespace", &namespace, "--output", "json"]);
    assert_eq!(code(&after), 1, "retired workers no longer answer");
    let answering: Vec<_> = json_lines(&after)
        .into_iter()
        .filter(|l| l["ok"] == true)
        .collect();
    assert_eq!(answering.len(), 1);
    assert_eq!(answering[0]["target"], kept[0]["target"]);
}

/// Given a watch on a namespace, when a Wool pool starts there, then woolctl prints a
/// worker-added line per worker, and exits 0 on SIGTERM.
#[test]
fn discover_watch_prints_joins_until_terminated() {
    let namespace = unique_namespace("watch");
    let mut watch = Command::new(common::program("woolctl"))
        .args(["discover", &namespace, "--watch", "--output", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let _pool = WoolPool::start(&namespace, 2, &[], None);
    let stdout = watch.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let mut added = 0;
    while added < 2 {
        let line = rx
            .recv_timeout(Duration::from_secs(15))
            .expect("a worker-added line");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap();
        if event["event"] == "worker-added" {
            assert!(event["worker"]["address"]
                .as_str()
                .unwrap()
                .starts_with("127.0.0.1:"));
            added += 1;
        }
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(watch.id() as i32, libc::SIGTERM) };
    let status = watch.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Given a mutual-TLS worker, when woolctl polls it with grpc_health_probe's TLS flags, then the
/// poll succeeds; without them, it fails as a handshake (exit 1).
#[test]
fn tls_flags_as_grpc_health_probe_names_them() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let ca = pki.ca_path.display().to_string();
    let cert = pki.leaf.cert_path.display().to_string();
    let key = pki.leaf.key_path.display().to_string();
    let output = woolctl(&[
        "idle",
        "--output",
        "json",
        "--tls-ca-cert",
        &ca,
        "--tls-client-cert",
        &cert,
        "--tls-client-key",
        &key,
        "--tls-server-name",
        "localhost",
        &worker.address,
    ]);
    assert_eq!(code(&output), 0, "{}{}", stdout(&output), stderr(&output));
    assert_eq!(json_lines(&output)[0]["ok"], true);
    let plain = woolctl(&[
        "idle",
        "--output",
        "json",
        "--rpc-timeout",
        "3s",
        &worker.address,
    ]);
    assert_eq!(code(&plain), 1);
    assert_eq!(json_lines(&plain)[0]["error"]["kind"], "handshake");
}

/// Given a frozen worker, when woolctl sweeps it on a terminal with a 2 s deadline, then a
/// progress line appears on stderr after a second, and the sweep ends at its deadline (exit 1).
#[test]
fn a_slow_sweep_on_a_terminal_shows_progress_on_stderr() {
    let frozen = WorkerProcess::plaintext();
    let live = WorkerProcess::plaintext();
    frozen.freeze();
    // `script` gives woolctl a terminal; stdout is sent to a file so only stderr is on it.
    let out = tempfile::NamedTempFile::new().unwrap();
    let command = format!(
        "{} sweep --rpc-timeout 2s {} {} > {}",
        common::program("woolctl").display(),
        frozen.address,
        live.address,
        out.path().display()
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    frozen.thaw();
    let terminal = stdout(&output);
    assert!(terminal.contains("sweeping: 1/2 answered"), "{terminal:?}");
    let results = std::fs::read_to_string(out.path()).unwrap();
    assert!(results.contains("deadline exceeded"), "{results}");
    assert!(
        !results.contains("sweeping"),
        "progress stays off stdout: {results}"
    );
}

/// Given a listener that accepts TCP connections and never writes a byte, when `woolctl idle`
/// and `woolctl stop` (default grace 30 s, so a 35 s deadline) reach it with
/// `--connect-timeout 1`, then each ends at the connect timeout, far before its deadline:
/// exit 1, kind `transient` (code 14), "accepted the connection but never spoke HTTP/2"; and
/// `stop` on a terminal shows its progress on stderr meanwhile ("stopping: 0/1 answered").
#[test]
fn a_worker_that_never_speaks_ends_idle_and_stop_at_the_connect_timeout() {
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = silent.local_addr().unwrap().to_string();
    for command in [&["idle"][..], &["stop"][..]] {
        let started = Instant::now();
        let output = woolctl(
            &[
                command,
                &["--connect-timeout", "1", "--output", "json", &address],
            ]
            .concat(),
        );
        let took = started.elapsed();
        assert_eq!(code(&output), 1, "{command:?}: {}", stderr(&output));
        let line = &json_lines(&output)[0];
        assert_eq!(line["error"]["kind"], "transient", "{line}");
        assert_eq!(line["error"]["code"], 14, "{line}");
        let message = line["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("accepted the connection but never spoke HTTP/2"),
            "{message}"
        );
        assert!(message.contains("1.000 s"), "{message}");
        // 5 s (idle's deadline) or 35 s (stop's) before the connect timeout covered HTTP/2.
        assert!(took < Duration::from_secs(4), "{command:?} took {took:?}");
    }
    let command = format!(
        "{} stop --connect-timeout 3 {address} > /dev/null",
        common::program("woolctl").display(),
    );
    let output = Command::new("script")
        .args(["-qec", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script (util-linux) runs");
    let terminal = stdout(&output);
    assert!(terminal.contains("stopping: 0/1 answered"), "{terminal:?}");
}

/// Given a fresh worker, when `woolctl reap --interval` runs rounds every 200 ms with a 0.7 s
/// threshold, then it keeps the worker at first, retires it once idle long enough (the worker
/// exits 0), and ends on SIGTERM.
#[test]
fn reap_with_an_interval_runs_rounds_until_terminated() {
    let mut worker = WorkerProcess::plaintext();
    let reap = Command::new(common::program("woolctl"))
        .args([
            "reap",
            "--idle-over",
            "700ms",
            "--grace",
            "0",
            "--interval",
            "200ms",
            "--output",
            "json",
            &worker.address,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert_eq!(
        worker.wait_exit(Duration::from_secs(15)),
        Some(0),
        "retired by a later round"
    );
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(reap.id() as i32, libc::SIGTERM) };
    let output = reap.wait_with_output().unwrap();
    let lines = json_lines(&output);
    assert_eq!(lines[0]["reason"], "below-threshold", "{lines:?}");
    let retired = lines
        .iter()
        .position(|l| l["action"] == "retired")
        .expect("a retiring round");
    assert!(retired > 0);
    // Rounds after the retirement find the worker gone: unreachable, so the run reports failure.
    assert!(
        lines[retired + 1..]
            .iter()
            .all(|l| l["reason"] == "unreachable"),
        "{lines:?}"
    );
    assert_eq!(code(&output), 1);
}

/// Given an `--interval` reap whose round is waiting on a frozen worker (a 10 s poll deadline),
/// when SIGTERM arrives in the middle of a later round, then woolctl ends at once, not after
/// the round.
#[test]
fn a_signal_in_the_middle_of_a_reap_round_ends_the_loop() {
    let frozen = WorkerProcess::plaintext();
    let reap = Command::new(common::program("woolctl"))
        .args([
            "reap",
            "--idle-over",
            "1h",
            "--interval",
            "100ms",
            "--rpc-timeout",
            "10s",
            "--output",
            "json",
            &frozen.address,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first round answers (the worker is still running), then it freezes under the next.
    std::thread::sleep(Duration::from_millis(800));
    frozen.freeze();
    std::thread::sleep(Duration::from_millis(1000));
    let signalled = Instant::now();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(reap.id() as i32, libc::SIGTERM) };
    let output = reap.wait_with_output().unwrap();
    let took = signalled.elapsed();
    frozen.thaw();
    assert!(
        took < Duration::from_secs(5),
        "woolctl finished the round first: {took:?}"
    );
    assert!(
        !json_lines(&output).is_empty(),
        "the first rounds were printed"
    );
    assert_eq!(code(&output), 0, "{}", stderr(&output));
}

/// Given stdout on a full device, when woolctl prints its results, then it says so on stderr
/// and exits 1 (a closed pipe, by contrast, is no failure).
#[test]
fn results_that_cannot_be_written_fail_the_run() {
    let worker = WorkerProcess::plaintext();
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let output = Command::new(common::program("woolctl"))
        .args(["idle", &worker.address])
        .stdin(Stdio::null())
        .stdout(full)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(code(&output), 1);
    assert!(
        stderr(&output).contains("cannot write the results"),
        "{}",
        stderr(&output)
    );
}

/// Given a plaintext Wool pool and a TLS one whose workers advertise an identity, when woolctl
/// discovers and reaps them with credentials (the TLS one under a `--peer` naming someone
/// else), then `discover` shows each worker refused with its reason, the reaps poll and stop
/// nothing (a record saying plaintext never makes woolctl drop its credentials and stop the
/// worker in cleartext), and every worker still answers afterwards.
#[test]
fn reap_stops_no_worker_the_admission_gate_refuses() {
    let pki = Pki::generate();
    let ca = pki.ca_path.display().to_string();
    let cert = pki.named_leaf.cert_path.display().to_string();
    let key = pki.named_leaf.key_path.display().to_string();
    let plain_ns = unique_namespace("refused-plain");
    let _plain = WoolPool::start(&plain_ns, 2, &[], None);
    let tls_ns = unique_namespace("refused-peer");
    let _tls = WoolPool::start(
        &tls_ns,
        2,
        &[
            "--tls-ca",
            &ca,
            "--tls-cert",
            &cert,
            "--tls-key",
            &key,
            "--identity",
            common::NAMED_LEAF_IDENTITY,
        ],
        None,
    );
    let tls_flags = [
        "--tls-ca-cert",
        &ca,
        "--tls-client-cert",
        &cert,
        "--tls-client-key",
        &key,
    ];
    std::thread::sleep(Duration::from_millis(1200)); // idle past the threshold below
    for (namespace, peer) in [(&plain_ns, None), (&tls_ns, Some("someone-else"))] {
        let mut flags: Vec<&str> = tls_flags.to_vec();
        if let Some(peer) = peer {
            flags.extend(["--peer", peer]);
        }
        let listed = woolctl(&[&["discover", namespace, "--output", "json"], &flags[..]].concat());
        assert_eq!(code(&listed), 0, "{}", stderr(&listed));
        let lines = json_lines(&listed);
        assert_eq!(lines.len(), 2, "{lines:?}");
        let arm = if peer.is_some() {
            "identity"
        } else {
            "security"
        };
        for line in &lines {
            assert_eq!(line["admission"]["admitted"], false, "{line}");
            assert_eq!(line["admission"]["arm"], arm, "{line}");
        }
        if peer.is_some() {
            let reason = lines[0]["admission"]["reason"].as_str().unwrap();
            assert!(reason.contains("accepted peers: someone-else"), "{reason}");
        }
        assert!(
            stderr(&listed).contains("2 of 2 workers refused"),
            "{}",
            stderr(&listed)
        );
        let reap = woolctl(
            &[
                &[
                    "reap",
                    "--idle-over",
                    "1s",
                    "--grace",
                    "0",
                    "--namespace",
                    namespace,
                ][..],
                &["--output", "json"],
                &flags[..],
            ]
            .concat(),
        );
        assert!(
            json_lines(&reap).is_empty(),
            "nothing polled or stopped: {}",
            stdout(&reap)
        );
        let err = stderr(&reap);
        assert_eq!(err.matches("not admitting worker").count(), 2, "{err}");
        assert!(err.contains(&format!("incompatible {arm}")), "{err}");
    }
    // Every worker still answers: plaintext ones without credentials, the TLS ones under a
    // policy accepting the name they advertise.
    let plain = woolctl(&["sweep", "--namespace", &plain_ns, "--output", "json"]);
    assert_eq!(code(&plain), 0, "{}", stderr(&plain));
    assert_eq!(json_lines(&plain).len(), 2);
    let named = woolctl(
        &[
            &["sweep", "--namespace", &tls_ns, "--output", "json"][..],
            &tls_flags[..],
            &["--peer", common::NAMED_LEAF_IDENTITY],
        ]
        .concat(),
    );
    assert_eq!(code(&named), 0, "{}", stderr(&named));
    assert!(json_lines(&named).iter().all(|l| l["ok"] == true));
    assert_eq!(json_lines(&named).len(), 2);
}

/// Given one live worker and 1,199 addresses with nothing behind them, when `woolctl sweep`
/// prints a row each (the rows go out in writes of many rows, not one a row), then every row
/// is there once, whole and in the order the targets were given, in JSON and as a table, and
/// the run exits 1 for the failed ones.
#[test]
fn a_sweep_longer_than_one_write_prints_every_row_in_order() {
    let worker = WorkerProcess::plaintext();
    let mut targets = vec![worker.address.clone()];
    let mut dead = std::collections::BTreeSet::new();
    while dead.len() < 1_199 {
        dead.insert(common::unused_local_address());
    }
    dead.remove(&worker.address);
    targets.extend(dead);
    let sweep = |format: &'static str| {
        let mut args = vec!["sweep", "--output", format, "--connect-timeout", "5s"];
        args.extend(targets.iter().map(String::as_str));
        woolctl(&args)
    };
    let json = sweep("json");
    assert_eq!(code(&json), 1, "{}", stderr(&json));
    // More than one write's worth of rows.
    assert!(json.stdout.len() > 64 * 1024, "{} bytes", json.stdout.len());
    let lines = json_lines(&json);
    let printed: Vec<&str> = lines
        .iter()
        .map(|l| l["target"].as_str().unwrap())
        .collect();
    assert_eq!(
        printed,
        targets.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(lines[0]["ok"], true);
    assert!(lines[1..].iter().all(|l| l["ok"] == false));
    let table = sweep("table");
    assert_eq!(code(&table), 1, "{}", stderr(&table));
    let text = stdout(&table);
    let rows: Vec<&str> = text.lines().collect();
    assert!(rows[0].starts_with("TARGET"), "{}", rows[0]);
    assert_eq!(rows.len(), targets.len() + 1);
    for (row, target) in rows[1..].iter().zip(&targets) {
        assert!(
            row.starts_with(target.as_str()),
            "{row:?} is not {target}'s row"
        );
    }
}
