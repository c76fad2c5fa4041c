//! The servers against peers that are slow or big on purpose: silent TCP connections, a byte
//! then silence, half an HTTP/1 request, a HEADERS frame declaring 16 MiB. Real `wool-worker`
//! processes (and in-process workers where a limit is set through the builder), real sockets
//! on 127.0.0.0/8. Each test says what it arranges (Given), does (When) and expects (Then),
//! and prints what it measured (`--nocapture`).

use crate::common;

use std::time::{Duration, Instant};

use common::{client_mutual, Pki, WorkerProcess};
use libwool::connection::{ChannelOptions, WorkerConnection, WorkerCredentials};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

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
) -> (Result<f64, libwool::Error>, Duration) {
    timed_poll_on_channel(address, credentials, 60).await
}

/// As [`timed_poll`], on a channel of its own for each `channel` number (from 2 to 60: the
/// connect timeout in seconds, so that each opens a connection of its own).
async fn timed_poll_on_channel(
    address: &str,
    credentials: Option<WorkerCredentials>,
    channel: u64,
) -> (Result<f64, libwool::Error>, Duration) {
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

/// A mutual-TLS connection to `address` (rustls, presenting `pki`'s leaf), its handshake done
/// and nothing sent since.
async fn tls_handshaken(address: &str, pki: &Pki) -> tokio_rustls::client::TlsStream<TcpStream> {
    use common::hostile::{pem_cert, pem_key};
    use tokio_rustls::rustls;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pem_cert(&pki.ca_pem)).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(
        vec![pem_cert(&pki.leaf.cert_pem)],
        pem_key(&pki.leaf.key_pem),
    )
    .unwrap();
    let mut config = config;
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let socket = TcpStream::connect(address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, socket).await.unwrap()
}

// Given a mutual-TLS worker, when a client has done its TLS handshake and sends nothing, then
// the worker's HTTP/2 SETTINGS reach it at once (a client may wait for them before its
// preface: ours does, to tell a refused certificate from a worker that hung up), and the
// connection is closed at the preface deadline when no preface follows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_tls_handshake_the_worker_speaks_first_and_keeps_the_preface_deadline() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let mut stream = tls_handshaken(&worker.address, &pki).await;
    let mut first = [0u8; 9];
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read_exact(&mut first)).await;
    assert!(
        matches!(read, Ok(Ok(_))),
        "no bytes from the worker before the client's preface: {read:?}"
    );
    assert_eq!(first[3], 0x4, "the first frame is SETTINGS: {first:?}");
    let started = Instant::now();
    let mut sink = [0u8; 256];
    let end = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let closed = tokio::time::timeout(Duration::from_secs(9), end)
        .await
        .is_ok();
    println!(
        "TLS connection without a preface: closed {closed} after {:?}",
        started.elapsed()
    );
    assert!(closed, "a TLS connection sending no preface was kept");
}

// Given a mutual-TLS worker and 40 connections from the caller's own address (127.0.0.1) that
// finished their TLS handshake and then sent nothing (past the address's 32 opening slots: a
// handshaken connection opens until its preface comes), when the caller polls, then the poll is
// served and the longest-quiet of the 40 have been closed to make room, the newest kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshaken_connections_without_a_preface_make_room_for_a_caller() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let mut quiet = Vec::new();
    for _ in 0..40 {
        quiet.push(tls_handshaken(&worker.address, &pki).await);
    }
    let credentials = client_mutual(&pki.ca_pem, &pki.leaf);
    let (result, took) = timed_poll(&worker.address, Some(credentials)).await;
    assert!(result.is_ok(), "the poll failed after {took:?}: {result:?}");
    // All at once, well within the preface deadline: a closed connection ends within the wait
    // (after the worker's SETTINGS), an open one does not.
    let waits = quiet.iter_mut().map(|stream| async move {
        let mut sink = [0u8; 256];
        let end = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
        tokio::time::timeout(Duration::from_millis(500), end)
            .await
            .is_ok()
    });
    let ended = futures_util::future::join_all(waits).await;
    let closed: Vec<usize> = (0..ended.len()).filter(|&i| ended[i]).collect();
    println!(
        "handshaken-quiet connections closed to make room: {closed:?}; poll served in {:.1} ms",
        took.as_secs_f64() * 1e3
    );
    assert!(
        closed.len() >= 9,
        "fewer closed than over the share: {closed:?}"
    );
    assert!(!closed.contains(&39), "the newest was closed: {closed:?}");
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

/// The HTTP/2 client preface and an empty SETTINGS frame: what makes a plaintext connection
/// established, after which this peer says nothing more.
const PREFACE_AND_SETTINGS: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0";

/// A peer reopening silent connections from `source` for as long as it runs: one every
/// `every`, the newest `held` kept open (whether or not the server has closed them).
fn reopening_flood(
    address: &str,
    source: std::net::Ipv4Addr,
    held: usize,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    let target: std::net::SocketAddr = address.parse().unwrap();
    tokio::spawn(async move {
        let mut open = std::collections::VecDeque::with_capacity(held + 1);
        loop {
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind((source, 0).into()).unwrap();
            if let Ok(stream) = socket.connect(target).await {
                open.push_back(stream);
                if open.len() > held {
                    open.pop_front();
                }
            }
            tokio::time::sleep(every).await;
        }
    })
}

// Given a mutual-TLS worker and a peer on the caller's own address (127.0.0.1) holding 64
// silent connections and opening a new one every 10 ms (twice its share of opening slots, at
// a hundred a second), when the caller polls 20 times, each on a connection of its own, then
// every poll is served: silent connections displace each other, never a client that spoke.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_connections_from_the_callers_own_address_do_not_lock_it_out() {
    let pki = Pki::generate();
    let worker = WorkerProcess::spawn(&pki.mutual_args());
    let local = std::net::Ipv4Addr::LOCALHOST;
    let flood = reopening_flood(&worker.address, local, 64, Duration::from_millis(10));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for channel in 2..22 {
        let credentials = client_mutual(&pki.ca_pem, &pki.leaf);
        let (result, took) =
            timed_poll_on_channel(&worker.address, Some(credentials), channel).await;
        slowest = slowest.max(took);
        if let Err(error) = result {
            failures.push(error.to_string());
        }
    }
    flood.abort();
    println!(
        "mutual-TLS polls from 127.0.0.1 beside its own flood: {}/20 served, slowest {:.1} ms",
        20 - failures.len(),
        slowest.as_secs_f64() * 1e3
    );
    assert!(failures.is_empty(), "polls refused: {failures:?}");
}

// Given an in-process worker capped at 20 connections and holding 20 silent ones, when 5 more
// connect, then the 5 longest silent are closed at once and the newcomers kept, and a poll is
// served at once; when the 20 are instead established (their HTTP/2 preface sent), a newcomer
// is closed at once and the 20 are kept: connections that carry dispatches are never displaced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_cap_newcomers_displace_silent_connections_never_established_ones() {
    let worker = libwool::worker::Worker::builder()
        .max_connections(20)
        .serve()
        .await
        .unwrap();
    let mut held = silent_connections(worker.address(), 20, b"").await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let newcomers = silent_connections(worker.address(), 5, b"").await;
    let rest = held.split_off(5);
    let (closed, after) = closed_within(held, Duration::from_secs(2)).await;
    println!("longest-silent connections displaced: {closed}/5 within {after:?}");
    assert_eq!(closed, 5, "the longest silent were kept");
    assert!(
        newcomers.iter().chain(&rest).all(still_open),
        "a newer one was closed"
    );
    let (result, took) = timed_poll(worker.address(), None).await;
    assert!(
        result.is_ok(),
        "the poll at the cap failed after {took:?}: {result:?}"
    );
    drop((newcomers, rest));
    worker.stop(libwool::Grace::None).await;

    // A worker of the same cap whose every place is taken by an established connection.
    let worker = libwool::worker::Worker::builder()
        .max_connections(20)
        .serve()
        .await
        .unwrap();
    let established = silent_connections(worker.address(), 20, PREFACE_AND_SETTINGS).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let over = silent_connections(worker.address(), 1, b"").await;
    let (closed, after) = closed_within(over, Duration::from_secs(2)).await;
    println!("newcomer at a cap of established connections closed: {closed}/1 within {after:?}");
    assert_eq!(
        closed, 1,
        "a newcomer over a cap of established connections was kept"
    );
    let mut sink = [0u8; 64];
    for (index, mut stream) in established.into_iter().enumerate() {
        // Each reads the server's SETTINGS, and is still open.
        let read = tokio::time::timeout(Duration::from_millis(500), stream.read(&mut sink)).await;
        assert!(
            matches!(read, Ok(Ok(n)) if n > 0),
            "established connection {index}: {read:?}"
        );
        assert!(
            still_open(&stream),
            "an established connection was displaced"
        );
    }
    worker.stop(libwool::Grace::None).await;
}

/// One health check on a connection of its own: the status answered.
async fn health_check(address: &str) -> Result<i32, String> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let answer = tonic_health::pb::health_client::HealthClient::new(channel)
        .check(tonic_health::pb::HealthCheckRequest::default())
        .await
        .map_err(|e| format!("check: {e}"))?;
    Ok(answer.into_inner().status)
}

// Given a worker's plaintext health port holding 64 silent connections (its cap) and reopening
// floods from 10 addresses (each opening a connection every 5 ms), when health is checked
// 12 times, then every check is answered SERVING; when 64 connections instead sit established
// and idle, a check is still answered (the quietest is displaced); and silent connections are
// closed at the preface deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_health_port_answers_probes_through_silent_and_idle_connections() {
    let worker = libwool::worker::Worker::builder()
        .health_listen("127.0.0.1:0")
        .serve()
        .await
        .unwrap();
    let health = worker.health_address().unwrap().to_string();
    let held = silent_connections(&health, 64, b"").await;
    let floods: Vec<_> = (0..10)
        .map(|n| {
            let source = std::net::Ipv4Addr::new(127, 0, 1, 2 + n);
            reopening_flood(&health, source, 40, Duration::from_millis(5))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut answers = Vec::new();
    for _ in 0..12 {
        answers.push(health_check(&health).await);
    }
    floods.iter().for_each(|flood| flood.abort());
    println!("health checks through floods of silent connections: {answers:?}");
    assert!(answers.iter().all(|a| *a == Ok(1)), "{answers:?}");
    let (closed, after) = closed_within(held, Duration::from_secs(9)).await;
    println!("silent health connections closed: {closed}/64 within {after:?}");
    assert_eq!(closed, 64, "silent health connections left open");

    let idle = silent_connections(&health, 64, PREFACE_AND_SETTINGS).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        health_check(&health).await,
        Ok(1),
        "SERVING beside 64 idle connections"
    );
    let (displaced, _) = closed_within(idle, Duration::from_secs(1)).await;
    assert!(
        displaced >= 1,
        "the check's connection displaced no idle one"
    );
    worker.stop(libwool::Grace::None).await;
}

// ---- the metrics endpoint ------------------------------------------------------------------

/// A worker serving metrics on 127.0.0.1, in process; the metrics address.
async fn worker_with_metrics() -> (libwool::worker::WorkerHandle, String) {
    let worker = libwool::worker::Worker::builder()
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

// Given a worker's metrics endpoint holding 64 silent connections (its cap), when it is
// scraped, then the scrape is answered (it displaces the longest silent); when 5 more connect,
// the 5 longest silent are closed at once and the newcomers kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_at_the_cap_are_scraped_and_newcomers_displace_the_longest_silent() {
    let (_worker, metrics) = worker_with_metrics().await;
    let mut held = Vec::new();
    for _ in 0..64 {
        held.push(TcpStream::connect(&metrics).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let address = metrics.clone();
    let samples = tokio::task::spawn_blocking(move || common::scrape(&address))
        .await
        .unwrap();
    assert!(
        samples.contains_key("wool_worker_idle_polls_total"),
        "{samples:?}"
    );
    // The scrape displaced the first; its own connection, closed since, left room for one.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut held = held.split_off(1);
    let mut newcomers = Vec::new();
    for _ in 0..6 {
        newcomers.push(TcpStream::connect(&metrics).await.unwrap());
    }
    let rest = held.split_off(5);
    let (closed, after) = closed_within(held, Duration::from_secs(2)).await;
    println!("longest-silent metrics connections displaced: {closed}/5 within {after:?}");
    assert_eq!(closed, 5, "the longest silent were kept");
    assert!(
        newcomers.iter().chain(&rest).all(still_open),
        "a newer one was closed"
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
