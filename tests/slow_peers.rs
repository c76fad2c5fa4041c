//! The servers against peers that are slow or big on purpose: silent TCP connections, a byte
//! then silence, half an HTTP/1 request, a HEADERS frame declaring 16 MiB. Real `wool-worker`
//! processes (and in-process workers where a limit is set through the builder), real sockets
//! on 127.0.0.0/8. Each test says what it arranges (Given), does (When) and expects (Then),
//! and prints what it measured (`--nocapture`).

mod common;

use std::time::{Duration, Instant};

use common::{client_mutual, Pki, WorkerProcess};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use wool::connection::{ChannelOptions, WorkerConnection, WorkerCredentials};

/// Silent connections each test holds open.
const SILENT: usize = 500;
/// Distinct source addresses (127.0.0.2 onwards) the silent connections come from: a few
/// hosts' worth, each within the per-address limit on connections still opening.
const SOURCES: usize = 32;
/// A bound on a legitimate poll made while the silent connections are open (generous: a
/// served poll takes milliseconds).
const SERVED_WITHIN: Duration = Duration::from_secs(5);

/// `count` TCP connections to `address` from 127.0.0.2 onwards (spread over [`SOURCES`]
/// addresses), each sending `first` (possibly nothing) and then nothing more.
async fn silent_connections(address: &str, count: usize, first: &[u8]) -> Vec<TcpStream> {
    let target: std::net::SocketAddr = address.parse().unwrap();
    let mut streams = Vec::with_capacity(count);
    for n in 0..count {
        let socket = TcpSocket::new_v4().unwrap();
        let source = std::net::Ipv4Addr::new(127, 0, 0, 2 + (n % SOURCES) as u8);
        socket.bind((source, 0).into()).unwrap();
        let mut stream = socket.connect(target).await.unwrap();
        if !first.is_empty() {
            stream.write_all(first).await.unwrap();
        }
        streams.push(stream);
    }
    streams
}

/// Waits up to `limit` for the server to close each of `streams` (reading and discarding
/// whatever it sends first); how many it closed and when the last one went.
async fn closed_within(streams: Vec<TcpStream>, limit: Duration) -> (usize, Duration) {
    let started = Instant::now();
    let waits = streams.into_iter().map(|mut stream| async move {
        let mut sink = [0u8; 1024];
        let end = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
        tokio::time::timeout(limit, end).await.is_ok()
    });
    let closed = futures_util::future::join_all(waits).await;
    (closed.iter().filter(|c| **c).count(), started.elapsed())
}

/// One `idle` poll through `credentials` (mutual TLS, or plaintext with `None`) with a
/// deadline well past [`SERVED_WITHIN`], so that a poll that is merely late is measured rather
/// than cut off: its outcome and how long it took.
async fn timed_poll(
    address: &str,
    credentials: Option<WorkerCredentials>,
) -> (Result<f64, wool::Error>, Duration) {
    timed_poll_on_channel(address, credentials, 60).await
}

/// As [`timed_poll`], on a channel of its own for each `channel` number (from 2 to 60: the
/// connect timeout in seconds, so that each opens a connection of its own).
async fn timed_poll_on_channel(
    address: &str,
    credentials: Option<WorkerCredentials>,
    channel: u64,
) -> (Result<f64, wool::Error>, Duration) {
    let mut options = ChannelOptions::default();
    options.connect_timeout = Some(Duration::from_secs(channel));
    let connection = WorkerConnection::with_options(address, credentials, options).unwrap();
    let started = Instant::now();
    let result = connection.idle(Some(Duration::from_secs(60))).await;
    (result, started.elapsed())
}

// Given a mutual-TLS worker holding 500 silent TCP connections and 5 that sent one byte of a
// ClientHello, when a legitimate caller polls it, then the poll is served at once, and the
// silent connections are closed after the first-bytes deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mutual_tls_poll_is_served_while_500_silent_connections_are_open() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let credentials = client_mutual(&pki.ca_pem, &pki.leaf);
    let (baseline, took) = timed_poll_on_channel(&worker.address, Some(credentials), 59).await;
    baseline.unwrap();
    println!(
        "mutual-TLS poll with no silent connection open: {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    let silent = silent_connections(&worker.address, SILENT, b"").await;
    let trickling = silent_connections(&worker.address, 5, &[0x16]).await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let credentials = client_mutual(&pki.ca_pem, &pki.leaf);
    let (result, took) = timed_poll(&worker.address, Some(credentials)).await;
    println!(
        "mutual-TLS poll with {SILENT} silent connections open: {result:?} after {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    assert!(result.is_ok(), "the poll failed after {took:?}: {result:?}");
    assert!(took < SERVED_WITHIN, "the poll took {took:?}");

    // The first-bytes deadline (3 s), with a margin; the whole handshake's (10 s) for those
    // that sent a byte.
    let (closed, after) = closed_within(silent, Duration::from_secs(7)).await;
    println!("silent connections closed by the worker: {closed}/{SILENT} within {after:?}");
    assert_eq!(closed, SILENT, "silent connections left open");
    let (closed, _) = closed_within(trickling, Duration::from_secs(15)).await;
    assert_eq!(closed, 5, "one-byte connections left open");
}

// Given a plaintext worker holding 500 silent TCP connections, when a caller polls it, then
// the poll is served, and every silent connection is closed within the HTTP/2 preface
// deadline (plus a margin).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_plaintext_connections_are_closed_after_the_preface_deadline() {
    let worker = WorkerProcess::plaintext();
    let silent = silent_connections(&worker.address, SILENT, b"").await;
    let half_preface = silent_connections(&worker.address, 5, b"PRI * HTTP/2.0\r\n").await;
    tokio::time::sleep(Duration::from_millis(200)).await;

    let (result, took) = timed_poll(&worker.address, None).await;
    println!(
        "plaintext poll with {SILENT} silent connections open: {result:?} after {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    assert!(result.is_ok(), "the poll failed after {took:?}: {result:?}");
    assert!(took < SERVED_WITHIN, "the poll took {took:?}");

    // The preface deadline (5 s), with a margin.
    let (closed, after) = closed_within(silent, Duration::from_secs(9)).await;
    println!("silent connections closed by the worker: {closed}/{SILENT} within {after:?}");
    assert_eq!(closed, SILENT, "silent connections left open");
    let (closed, _) = closed_within(half_preface, Duration::from_secs(9)).await;
    assert_eq!(closed, 5, "connections that sent half a preface left open");
}

/// Whether the server has not closed `stream` (nothing to read yet, without waiting).
fn still_open(stream: &TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

// Given an in-process worker capped at 20 connections and holding 20 silent ones, when 5 more
// connect, then those are closed at once while the 20 stay (until their preface deadline),
// and once those have gone a poll is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_over_the_cap_are_closed_at_once() {
    let worker = wool::worker::Worker::builder()
        .max_connections(20)
        .serve()
        .await
        .unwrap();
    let held = silent_connections(worker.address(), 20, b"").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let over = silent_connections(worker.address(), 5, b"").await;
    let (closed, after) = closed_within(over, Duration::from_secs(2)).await;
    println!("connections over the cap closed: {closed}/5 within {after:?}");
    assert_eq!(closed, 5, "connections over the cap were kept");
    assert!(
        held.iter().all(still_open),
        "a connection within the cap was closed early"
    );
    let (closed, _) = closed_within(held, Duration::from_secs(9)).await;
    assert_eq!(closed, 20, "silent connections within the cap left open");
    let (result, took) = timed_poll(worker.address(), None).await;
    assert!(result.is_ok(), "the poll failed after {took:?}: {result:?}");
    worker.stop(wool::Grace::None).await;
}

// Given a worker's plaintext health port, when 64 silent connections (its cap) and 5 more
// arrive, then the 5 are closed at once and the 64 after the preface deadline, and a health
// check is answered afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_port_has_the_preface_deadline_and_a_cap() {
    let worker = wool::worker::Worker::builder()
        .health_listen("127.0.0.1:0")
        .serve()
        .await
        .unwrap();
    let health = worker.health_address().unwrap().to_string();
    let held = silent_connections(&health, 64, b"").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let over = silent_connections(&health, 5, b"").await;
    let (closed, after) = closed_within(over, Duration::from_secs(2)).await;
    println!("health connections over the cap closed: {closed}/5 within {after:?}");
    assert_eq!(closed, 5, "health connections over the cap were kept");
    let (closed, after) = closed_within(held, Duration::from_secs(9)).await;
    println!("silent health connections closed: {closed}/64 within {after:?}");
    assert_eq!(closed, 64, "silent health connections left open");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{health}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .unwrap();
    assert_eq!(answer.into_inner().status, 1, "SERVING");
    worker.stop(wool::Grace::None).await;
}

// ---- the metrics endpoint ------------------------------------------------------------------

/// A worker serving metrics on 127.0.0.1, in process; the metrics address.
async fn worker_with_metrics() -> (wool::worker::WorkerHandle, String) {
    let worker = wool::worker::Worker::builder()
        .metrics_listen("127.0.0.1:0")
        .serve()
        .await
        .unwrap();
    let metrics = worker.metrics_address().unwrap().to_string();
    (worker, metrics)
}

// Given a worker's metrics endpoint, when a client sends half a request header and goes
// silent, then the endpoint closes the connection after its header-read timeout (5 s, here
// with a margin), and scrapes are still answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_metrics_client_sending_half_a_header_is_disconnected() {
    let (_worker, metrics) = worker_with_metrics().await;
    let mut stream = TcpStream::connect(&metrics).await.unwrap();
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: wool\r\n")
        .await
        .unwrap();
    let silent = TcpStream::connect(&metrics).await.unwrap();
    let (closed, after) = closed_within(vec![stream, silent], Duration::from_secs(9)).await;
    println!("half-header and silent metrics clients closed: {closed}/2 within {after:?}");
    assert_eq!(closed, 2, "a metrics client holding a header back was kept");
    let samples = tokio::task::spawn_blocking(move || common::scrape(&metrics))
        .await
        .unwrap();
    assert!(
        samples.contains_key("wool_worker_idle_polls_total"),
        "{samples:?}"
    );
}

// Given a worker's metrics endpoint holding 64 silent connections (its cap), when 5 more
// connect, then those are closed at once; once the 64 are gone, a scrape is answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_connections_over_the_cap_are_closed_at_once() {
    let (_worker, metrics) = worker_with_metrics().await;
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(TcpStream::connect(&metrics).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut over = Vec::new();
    for _ in 0..5 {
        over.push(TcpStream::connect(&metrics).await.unwrap());
    }
    let (closed, after) = closed_within(over, Duration::from_secs(2)).await;
    println!("metrics connections over the cap closed: {closed}/5 within {after:?}");
    assert_eq!(closed, 5, "metrics connections over the cap were kept");
    assert!(
        held.iter().all(still_open),
        "a connection within the cap was closed early"
    );
    let (closed, _) = closed_within(held, Duration::from_secs(9)).await;
    assert_eq!(closed, 64);
    let samples = tokio::task::spawn_blocking(move || common::scrape(&metrics))
        .await
        .unwrap();
    assert!(
        samples.contains_key("wool_worker_idle_polls_total"),
        "{samples:?}"
    );
}

/// CPU time (user + system) process `pid` has used so far.
fn cpu_time(pid: i32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // After the command: state is field 3; utime and stime are fields 14 and 15.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_secs_f64(ticks as f64 / per_second as f64)
}

// Given a worker limited to 48 descriptors serving metrics, when more clients connect to the
// metrics endpoint than it has descriptors (so each accept fails with EMFILE), then it pauses
// between attempts instead of spinning: little CPU over 2 s, and one log line for the burst.
#[test]
fn accept_errors_pause_the_listener_with_one_log_line() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    let metrics = common::unused_local_address();
    let mut command = Command::new(common::wool_worker_bin());
    command
        .args(["--metrics-listen", &metrics])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: setrlimit only, between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 48,
                rlim_max: 48,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) == 0 {
                Ok(())
            } else {
                Err(std::io::Error::last_os_error())
            }
        });
    }
    let mut child = command.spawn().expect("spawn wool-worker");
    common::printed_address(&mut child, "wool-worker");
    let log = common::log_lines(&mut child, "worker: ");
    let pid = child.id() as i32;
    let clients: Vec<_> = (0..60)
        .map(|_| std::net::TcpStream::connect(&metrics).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let (cpu_before, wall) = (cpu_time(pid), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_time(pid) - cpu_before;
    let lines: Vec<String> = log.try_iter().filter(|l| l.contains("accept")).collect();
    println!(
        "out of descriptors for {:?}: {used:?} of CPU, {} log lines about accepting",
        wall.elapsed(),
        lines.len()
    );
    let _ = child.kill();
    let _ = child.wait();
    drop(clients);
    assert!(
        used < Duration::from_millis(500),
        "the worker spun: {used:?} of CPU in 2 s"
    );
    assert!(
        lines.len() <= 2,
        "a log line per error: {} lines",
        lines.len()
    );
}

// ---- the Unix socket's `:authority` rewriter ------------------------------------------------

/// The peak resident set (`VmHWM`) of process `pid`, in bytes.
fn peak_resident_bytes(pid: i32) -> u64 {
    common::hostile::memory_bytes(&pid.to_string(), "VmHWM")
}

// Given a worker on a Unix socket, when a client sends a HEADERS frame declaring 16 MiB (and
// then that many bytes), then the worker does not buffer it (its peak resident set grows by
// well under 8 MiB) and h2 refuses the frame (GOAWAY, FRAME_SIZE_ERROR).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_16_mib_headers_frame_on_a_unix_socket_is_refused_unbuffered() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.sock");
    let worker = WorkerProcess::spawn(&["--listen".into(), format!("unix:{}", path.display())]);
    // A poll first, so the worker's own start-up and first connection count in the baseline.
    let target = format!("unix:{}", path.display());
    WorkerConnection::new(&target)
        .unwrap()
        .idle(Some(Duration::from_secs(5)))
        .await
        .unwrap();
    let before = peak_resident_bytes(worker.pid());

    let mut socket = tokio::net::UnixStream::connect(&path).await.unwrap();
    const DECLARED: usize = (1 << 24) - 1;
    let mut opening = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    opening.extend_from_slice(&[0, 0, 0, 0x4, 0, 0, 0, 0, 0]); // SETTINGS, empty
    opening.extend_from_slice(&[
        (DECLARED >> 16) as u8,
        (DECLARED >> 8) as u8,
        DECLARED as u8,
        0x1, // HEADERS
        0x4, // END_HEADERS
        0,
        0,
        0,
        1,
    ]);
    socket.write_all(&opening).await.unwrap();
    let (mut reader, mut writer) = socket.into_split();
    let flood = tokio::spawn(async move {
        let chunk = vec![0x41u8; 64 * 1024];
        let mut written = 0usize;
        while written < DECLARED {
            let n = chunk.len().min(DECLARED - written);
            if writer.write_all(&chunk[..n]).await.is_err() {
                break; // refused: the worker closed the connection
            }
            written += n;
        }
        written
    });
    // What the worker sends back: its SETTINGS, the ack, and GOAWAY with an error code.
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), reader.read_to_end(&mut answer)).await;
    let written = tokio::time::timeout(Duration::from_secs(10), flood)
        .await
        .expect("the client's writes end")
        .unwrap();
    let after = peak_resident_bytes(worker.pid());
    let growth = after.saturating_sub(before);
    let goaway = find_goaway(&answer);
    println!(
        "16 MiB HEADERS frame: {written} payload bytes written, worker's VmHWM {} -> {} KiB \
         (+{} KiB), GOAWAY {goaway:?}",
        before / 1024,
        after / 1024,
        growth / 1024
    );
    assert!(
        growth < 8 << 20,
        "the worker's peak RSS grew by {growth} bytes"
    );
    assert_eq!(
        goaway.map(|(_, code)| code),
        Some(0x6),
        "no GOAWAY with FRAME_SIZE_ERROR from h2"
    );
    // The worker still serves others.
    WorkerConnection::new(&target)
        .unwrap()
        .idle(Some(Duration::from_secs(5)))
        .await
        .unwrap();
}

/// The first GOAWAY frame in `bytes` (frames from a server, after no preface): its last
/// stream id and error code.
fn find_goaway(bytes: &[u8]) -> Option<(u32, u32)> {
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let length = usize::from(bytes[at]) << 16
            | usize::from(bytes[at + 1]) << 8
            | usize::from(bytes[at + 2]);
        let kind = bytes[at + 3];
        let payload = bytes.get(at + 9..at + 9 + length)?;
        if kind == 0x7 && payload.len() >= 8 {
            let word = |i: usize| u32::from_be_bytes(payload[i..i + 4].try_into().unwrap());
            return Some((word(0) & 0x7fff_ffff, word(4)));
        }
        at += 9 + length;
    }
    None
}
