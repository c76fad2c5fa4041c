//! `wool_bench`: the Rust side of the benchmark harness (`scripts/bench.sh`, BENCHMARKS.md).
//!
//! Not a test and never asserts on time: each subcommand measures one thing against a worker
//! that the harness started and prints ONE line of JSON on stdout (the harness collects them
//! into `target/bench/results.json`). Built by `cargo bench --no-run --bench wool_bench`
//! (`harness = false`); run with no subcommand (as `cargo bench` / `cargo test --all-targets`
//! do) it prints a note and exits 0.
//!
//! ```text
//! wool_bench seq-raw  ADDR N WARMUP current|multi   raw tonic stub (default Endpoint), sequential
//! wool_bench seq-conn ADDR N WARMUP current|multi [no-keepalive]
//!                                                   WorkerConnection::idle, sequential
//! wool_bench burst    ADDR LEVELS SECONDS [no-keepalive]
//!                                                   bursts of N concurrent idle() on one connection
//!     (`no-keepalive`: the connection's keepalive off, to compare with the default, on)
//! wool_bench fleet-serve N                          serves N Workers in this process; prints their
//!                                                   addresses, then `ready`; ends at stdin EOF
//! wool_bench sweep    ADDRFILE CONCURRENCY SWEEPS [TIMEOUT]
//!                                                   wool::fleet::sweep over every address, once
//!                                                   per sweep (CONCURRENCY = max_in_flight,
//!                                                   TIMEOUT = the sweep's deadline, s, default 30):
//!                                                   1 cold sweep (new connections) + SWEEPS warm
//! wool_bench discover NS REPS [ADDR N]              LocalDiscovery::new(NS)?.list(), REPS times:
//!                                                   first, median, p90 (µs) and the count; with
//!                                                   ADDR, also N sequential WorkerConnection::idle
//!                                                   polls of ADDR (current_thread) for comparison
//! wool_bench handles  ADDR N                        N WorkerConnections, each polled once; prints
//!                                                   `ready`, then waits for stdin EOF
//! wool_bench dispatch ADDR CONCURRENCY SECONDS BYTES        WorkerConnection::dispatch("echo")
//! wool_bench dispatch-raw ADDR CONCURRENCY SECONDS TEMPLATE raw stub replaying a Task template
//!                                                   (prost bytes; fresh UUID id per dispatch)
//! wool_bench poller   ADDR HZ SECONDS               idle polls at HZ (a fleet manager's poller)
//!                                                   until stdin closes (at most SECONDS)
//! ```

use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use prost::Message as _;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};
use wool::protocol::{
    request::Payload as RequestPayload, response::Payload as ResponsePayload,
    worker_client::WorkerClient, Request, Task, Void,
};
use wool::worker::{RoutineRegistry, Worker};
use wool::WorkerConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_none_or(|a| a.starts_with('-')) {
        // `cargo bench` passes `--bench`; `cargo test --all-targets` passes nothing.
        println!("wool_bench: a benchmark driver for scripts/bench.sh (see BENCHMARKS.md); nothing to do");
        return;
    }
    if let Err(e) = run(&args) {
        eprintln!("wool_bench {}: {e}", args[0]);
        std::process::exit(1);
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, BoxError> {
    args.get(i)
        .ok_or_else(|| format!("missing argument {i}: {what}"))?
        .parse()
        .map_err(|_| format!("bad argument {i} ({what}): {:?}", args[i]).into())
}

fn runtime(kind: &str) -> Result<tokio::runtime::Runtime, BoxError> {
    let mut builder = match kind {
        "current" => tokio::runtime::Builder::new_current_thread(),
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        other => return Err(format!("runtime must be current or multi, got {other}").into()),
    };
    Ok(builder.enable_all().build()?)
}

fn run(args: &[String]) -> Result<(), BoxError> {
    let line = match args[0].as_str() {
        "seq-raw" | "seq-conn" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let n: usize = arg(args, 2, "N")?;
            let warmup: usize = arg(args, 3, "WARMUP")?;
            let kind: String = arg(args, 4, "current|multi")?;
            let rt = runtime(&kind)?;
            let raw = args[0] == "seq-raw";
            let keepalive = keepalive_arg(args, 5)?;
            rt.block_on(async move {
                if raw {
                    seq_raw(&addr, n, warmup).await
                } else {
                    seq_conn(&addr, n, warmup, keepalive).await
                }
            })?
        }
        "burst" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let levels: String = arg(args, 2, "LEVELS")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            let levels: Vec<usize> = levels
                .split(',')
                .map(|l| l.trim().parse())
                .collect::<Result<_, _>>()?;
            let keepalive = keepalive_arg(args, 4)?;
            runtime("multi")?.block_on(burst(&addr, &levels, seconds, keepalive))?
        }
        "fleet-serve" => {
            let n: usize = arg(args, 1, "N")?;
            return runtime("multi")?.block_on(fleet_serve(n));
        }
        "sweep" => {
            let file: String = arg(args, 1, "ADDRFILE")?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let sweeps: usize = arg(args, 3, "SWEEPS")?;
            let timeout: f64 = if args.len() > 4 {
                arg(args, 4, "TIMEOUT")?
            } else {
                30.0
            };
            let addrs: Vec<String> = std::fs::read_to_string(&file)?
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .map(String::from)
                .collect();
            runtime("multi")?.block_on(sweep(addrs, concurrency, sweeps, timeout))?
        }
        "discover" => {
            let namespace: String = arg(args, 1, "NS")?;
            let reps: usize = arg(args, 2, "REPS")?;
            let poll = match args.get(3) {
                Some(addr) => Some((addr.clone(), arg::<usize>(args, 4, "N")?)),
                None => None,
            };
            discover(&namespace, reps, poll)?
        }
        "handles" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let n: usize = arg(args, 2, "N")?;
            return runtime("multi")?.block_on(handles(&addr, n));
        }
        "dispatch" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            let bytes: usize = arg(args, 4, "BYTES")?;
            runtime("multi")?.block_on(dispatch(&addr, concurrency, seconds, bytes))?
        }
        "dispatch-raw" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            let template: String = arg(args, 4, "TEMPLATE")?;
            let task = Task::decode(std::fs::read(&template)?.as_slice())?;
            runtime("multi")?.block_on(dispatch_raw(&addr, concurrency, seconds, task))?
        }
        "poller" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let hz: f64 = arg(args, 2, "HZ")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            runtime("current")?.block_on(poller(&addr, hz, seconds))?
        }
        other => return Err(format!("unknown subcommand {other}").into()),
    };
    println!("{line}");
    Ok(())
}

/// Whether the optional argument at `i` leaves keepalive on (absent) or turns it off
/// (`no-keepalive`).
fn keepalive_arg(args: &[String], i: usize) -> Result<bool, BoxError> {
    match args.get(i).map(String::as_str) {
        None => Ok(true),
        Some("no-keepalive") => Ok(false),
        Some(other) => Err(format!("bad argument {i}: {other:?} (expected no-keepalive)").into()),
    }
}

/// A connection with Wool's default channel options, or with keepalive off.
fn connection(addr: &str, keepalive: bool) -> Result<WorkerConnection, BoxError> {
    let mut options = wool::connection::ChannelOptions::default();
    if !keepalive {
        options.keepalive_interval = None;
    }
    Ok(WorkerConnection::with_options(addr, None, options)?)
}

/// CPU time of this whole process (all threads), in seconds.
fn process_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: writes into a local timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Latency summary of `samples` (nanoseconds, one per call) over `elapsed` wall time, with the
/// process CPU time the calls took (`cpu` seconds).
fn latency_json(mut samples: Vec<u64>, elapsed: Duration, cpu: f64) -> String {
    samples.sort_unstable();
    let n = samples.len().max(1);
    let pick = |q: f64| samples[((q * n as f64).ceil() as usize).clamp(1, n) - 1] as f64 / 1e3;
    let mean = samples.iter().sum::<u64>() as f64 / n as f64 / 1e3;
    format!(
        "{{\"n\":{},\"median_us\":{:.2},\"p99_us\":{:.2},\"mean_us\":{:.2},\"min_us\":{:.2},\
         \"polls_per_s\":{:.1},\"cpu_us_per_poll\":{:.2}}}",
        samples.len(),
        pick(0.5),
        pick(0.99),
        mean,
        samples.first().copied().unwrap_or(0) as f64 / 1e3,
        samples.len() as f64 / elapsed.as_secs_f64(),
        cpu * 1e6 / n as f64,
    )
}

/// (a) The generated stub on a tonic `Channel` with default settings.
async fn seq_raw(addr: &str, n: usize, warmup: usize) -> Result<String, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = WorkerClient::new(channel);
    for _ in 0..warmup {
        client.idle(Void {}).await?;
    }
    let mut samples = Vec::with_capacity(n);
    let cpu = process_cpu();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client.idle(Void {}).await?;
        samples.push(t.elapsed().as_nanos() as u64);
    }
    Ok(latency_json(samples, start.elapsed(), process_cpu() - cpu))
}

/// (b) `WorkerConnection::idle` with a 10 s deadline (as a host would pass one).
async fn seq_conn(
    addr: &str,
    n: usize,
    warmup: usize,
    keepalive: bool,
) -> Result<String, BoxError> {
    let conn = connection(addr, keepalive)?;
    let timeout = Some(Duration::from_secs(10));
    for _ in 0..warmup {
        conn.idle(timeout).await?;
    }
    let mut samples = Vec::with_capacity(n);
    let cpu = process_cpu();
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        conn.idle(timeout).await?;
        samples.push(t.elapsed().as_nanos() as u64);
    }
    Ok(latency_json(samples, start.elapsed(), process_cpu() - cpu))
}

/// Bursts of `level` concurrent `idle()` calls (tokio tasks) on one `WorkerConnection`,
/// repeated until `seconds` have passed (at least one burst per level).
async fn burst(
    addr: &str,
    levels: &[usize],
    seconds: f64,
    keepalive: bool,
) -> Result<String, BoxError> {
    let conn = Arc::new(connection(addr, keepalive)?);
    conn.idle(Some(Duration::from_secs(10))).await?; // connect outside the measurement
    let mut rows = Vec::new();
    for &level in levels {
        let (mut ok, mut failed, mut bursts) = (0u64, 0u64, 0u64);
        let mut first_error = String::new();
        let budget = Duration::from_secs_f64(seconds);
        let start = Instant::now();
        while bursts == 0 || start.elapsed() < budget {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..level {
                let conn = Arc::clone(&conn);
                set.spawn(async move { conn.idle(Some(Duration::from_secs(60))).await });
            }
            while let Some(joined) = set.join_next().await {
                match joined {
                    Ok(Ok(_)) => ok += 1,
                    Ok(Err(e)) => {
                        failed += 1;
                        if first_error.is_empty() {
                            first_error = e.to_string();
                        }
                    }
                    Err(e) => {
                        failed += 1;
                        if first_error.is_empty() {
                            first_error = e.to_string();
                        }
                    }
                }
            }
            bursts += 1;
        }
        let elapsed = start.elapsed().as_secs_f64();
        rows.push(format!(
            "{{\"concurrency\":{level},\"bursts\":{bursts},\"ok\":{ok},\"failed\":{failed},\
             \"polls_per_s\":{:.1},\"first_error\":{}}}",
            (ok + failed) as f64 / elapsed,
            json_str(&first_error)
        ));
    }
    Ok(format!("{{\"levels\":[{}]}}", rows.join(",")))
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Serves `n` workers (echo, sleep) on 127.0.0.1:0 in this process until stdin closes.
async fn fleet_serve(n: usize) -> Result<(), BoxError> {
    let mut workers = Vec::with_capacity(n);
    for _ in 0..n {
        let worker = Worker::builder()
            .routines(RoutineRegistry::default().with_reference_routines())
            .serve()
            .await?;
        workers.push(worker);
    }
    {
        let mut out = std::io::stdout().lock();
        for worker in &workers {
            writeln!(out, "{}", worker.address())?;
        }
        writeln!(out, "ready")?;
        out.flush()?;
    }
    tokio::task::spawn_blocking(|| {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
    })
    .await?;
    Ok(())
}

/// One cold sweep (fresh connections: TCP + HTTP/2 handshakes) then `sweeps` warm ones over
/// the same connections, each one `wool::fleet::sweep` (the library's sweep, which
/// `wool_idle_many` and `woolctl sweep` are built on) with `max_in_flight = concurrency` and
/// one deadline of `timeout` seconds for the whole sweep.
async fn sweep(
    addrs: Vec<String>,
    concurrency: usize,
    sweeps: usize,
    timeout: f64,
) -> Result<String, BoxError> {
    let conns: Vec<WorkerConnection> = addrs
        .iter()
        .map(|a| WorkerConnection::new(a))
        .collect::<Result<_, _>>()?;
    let mut options = wool::fleet::SweepOptions::default();
    options.max_in_flight = concurrency.max(1);
    options.timeout = Some(Duration::from_secs_f64(timeout));
    let mut times = Vec::new();
    let mut failures = Vec::new();
    let mut first_error = String::new();
    for _ in 0..=sweeps {
        let start = Instant::now();
        let outcomes = wool::fleet::sweep(&conns, &options).await?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
        let failed = outcomes.iter().filter(|o| o.is_err()).count();
        if first_error.is_empty() {
            if let Some(Err(e)) = outcomes.iter().find(|o| o.is_err()) {
                first_error = e.to_string();
            }
        }
        failures.push(failed);
    }
    let warm: Vec<String> = times[1..].iter().map(|t| format!("{t:.2}")).collect();
    Ok(format!(
        "{{\"endpoints\":{},\"concurrency\":{concurrency},\"cold_ms\":{:.2},\"warm_ms\":[{}],\
         \"failures\":[{}],\"first_error\":{}}}",
        conns.len(),
        times[0],
        warm.join(","),
        failures
            .iter()
            .map(|f| f.to_string())
            .collect::<Vec<_>>()
            .join(","),
        json_str(&first_error)
    ))
}

/// `reps` listings of a local registry, each `LocalDiscovery::new(ns)?.list()` (the whole
/// call, constructor included); the first is reported apart (cold caches), median and p90 of
/// all. With `poll = (addr, n)`, also `n` sequential `WorkerConnection::idle` polls of `addr`
/// on a current_thread runtime (after 200 warm-up polls), for the comparison in one process.
fn discover(
    namespace: &str,
    reps: usize,
    poll: Option<(String, usize)>,
) -> Result<String, BoxError> {
    use wool::fleet::discovery::LocalDiscovery;
    let mut samples = Vec::with_capacity(reps.max(1));
    let mut counts = std::collections::BTreeSet::new();
    // Fresh: a new LocalDiscovery per listing (a one-shot tool: every segment opened).
    let mut fresh = Vec::with_capacity(reps.max(4) / 4);
    for _ in 0..reps.max(4) / 4 {
        let t = Instant::now();
        let workers = LocalDiscovery::new(namespace)?.list()?;
        fresh.push(t.elapsed().as_nanos() as u64);
        counts.insert(workers.len());
    }
    fresh.sort_unstable();
    let fresh_median = fresh[fresh.len() / 2] as f64 / 1e3;
    // Kept: one LocalDiscovery listed again and again (a fleet manager's rounds; the first
    // listing opens the segments, later ones reuse them).
    let discovery = LocalDiscovery::new(namespace)?;
    let cpu = process_cpu();
    let start = Instant::now();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let workers = discovery.list()?;
        samples.push(t.elapsed().as_nanos() as u64);
        counts.insert(workers.len());
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cpu = process_cpu() - cpu;
    let first = samples[0] as f64 / 1e3;
    let mut sorted = samples.clone();
    sorted.sort_unstable();
    let pick = |q: f64| {
        let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
        sorted[i - 1] as f64 / 1e3
    };
    let mut out =
        format!(
        "{{\"namespace\":{},\"reps\":{},\"workers\":{},\"counts\":[{}],\"first_us\":{first:.2},\
         \"median_us\":{:.2},\"p90_us\":{:.2},\"min_us\":{:.2},\"mean_us\":{:.2},\
         \"cpu_us_per_list\":{:.2},\"fresh_median_us\":{fresh_median:.2}",
        json_str(namespace),
        samples.len(),
        counts.iter().next_back().copied().unwrap_or(0),
        counts.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(","),
        pick(0.5),
        pick(0.9),
        sorted[0] as f64 / 1e3,
        elapsed * 1e6 / samples.len() as f64,
        cpu * 1e6 / samples.len() as f64,
    );
    if let Some((addr, n)) = poll {
        let line = runtime("current")?.block_on(seq_conn(&addr, n.max(1), 200, true))?;
        out.push_str(&format!(",\"poll\":{line}"));
    }
    out.push('}');
    Ok(out)
}

/// `n` WorkerConnections to one worker, each polled once; then holds them until stdin closes
/// (the harness reads this process's RSS and sockets from /proc meanwhile).
async fn handles(addr: &str, n: usize) -> Result<(), BoxError> {
    let mut conns = Vec::with_capacity(n);
    let mut failed = 0usize;
    for _ in 0..n {
        let conn = WorkerConnection::new(addr)?;
        if conn.idle(Some(Duration::from_secs(10))).await.is_err() {
            failed += 1;
        }
        conns.push(conn);
    }
    println!("ready {{\"handles\":{n},\"failed\":{failed}}}");
    std::io::stdout().flush()?;
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    })
    .await?;
    drop(conns);
    Ok(())
}

/// Closed loop: `concurrency` tasks each dispatching `echo` back to back for `seconds`.
async fn dispatch(
    addr: &str,
    concurrency: usize,
    seconds: f64,
    bytes: usize,
) -> Result<String, BoxError> {
    let conn = Arc::new(WorkerConnection::new(addr)?);
    let payload = vec![b'x'; bytes];
    // Warm-up: connection and a few tasks.
    for _ in 0..10 {
        conn.dispatch("echo", payload.clone(), Some(Duration::from_secs(10)))
            .await?;
    }
    closed_loop(concurrency, seconds, move || {
        let conn = Arc::clone(&conn);
        let payload = payload.clone();
        async move {
            let out = conn
                .dispatch("echo", payload.clone(), Some(Duration::from_secs(30)))
                .await
                .map_err(|e| e.to_string())?;
            if out != payload {
                return Err("echo returned other bytes".to_string());
            }
            Ok(())
        }
    })
    .await
}

/// Runs `call` back to back on `concurrency` tasks for `seconds`; one JSON object.
async fn closed_loop<F, Fut>(concurrency: usize, seconds: f64, call: F) -> Result<String, BoxError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let call = Arc::new(call);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(std::sync::Mutex::new(String::new()));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let start = Instant::now();
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (call, ok, failed, first_error) = (
            Arc::clone(&call),
            Arc::clone(&ok),
            Arc::clone(&failed),
            Arc::clone(&first_error),
        );
        set.spawn(async move {
            while Instant::now() < deadline {
                match call().await {
                    Ok(()) => ok.fetch_add(1, Ordering::Relaxed),
                    Err(e) => {
                        let mut first = first_error.lock().unwrap();
                        if first.is_empty() {
                            *first = e;
                        }
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        });
    }
    while set.join_next().await.is_some() {}
    let elapsed = start.elapsed().as_secs_f64();
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    let first_error = first_error.lock().unwrap().clone();
    Ok(format!(
        "{{\"concurrency\":{concurrency},\"seconds\":{elapsed:.3},\"ok\":{ok},\"failed\":{failed},\
         \"tasks_per_s\":{:.1},\"first_error\":{}}}",
        ok as f64 / elapsed,
        json_str(&first_error)
    ))
}

/// A fresh UUID-shaped task id (Wool's worker parses `Task.id` as a UUID).
fn task_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let pid = std::process::id() as u64;
    format!(
        "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
        pid & 0xffff_ffff,
        (n >> 48) & 0xffff,
        (n >> 36) & 0xfff,
        (n >> 24) & 0xfff,
        n & 0xffff_ffff_ffff
    )
}

/// One dispatch over the raw stub: send `task`, read the ack, send `next`, read the result,
/// half-close and read to the end of the stream (as Wool's own client does).
async fn raw_dispatch(client: &mut WorkerClient<Channel>, mut task: Task) -> Result<(), String> {
    task.id = task_id();
    let (tx, rx) = mpsc::channel(2);
    let request = |payload| Request {
        payload: Some(payload),
        context: None,
    };
    let _ = tx.try_send(request(RequestPayload::Task(task)));
    let mut responses = client
        .dispatch(ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("dispatch: {s}"))?
        .into_inner();
    match next(&mut responses, "ack").await? {
        ResponsePayload::Ack(_) => {}
        other => return Err(format!("expected ack, got {}", short(&other))),
    }
    let _ = tx.send(request(RequestPayload::Next(Void {}))).await;
    match next(&mut responses, "result").await? {
        ResponsePayload::Result(_) => {}
        other => return Err(format!("expected result, got {}", short(&other))),
    }
    drop(tx);
    while let Ok(Some(_)) = responses.message().await {}
    Ok(())
}

/// The next response that carries a payload (frames with only a context are skipped).
async fn next(
    responses: &mut tonic::Streaming<wool::protocol::Response>,
    what: &str,
) -> Result<ResponsePayload, String> {
    loop {
        match responses.message().await {
            Err(s) => return Err(format!("{what}: {s}")),
            Ok(None) => return Err(format!("{what}: end of stream")),
            Ok(Some(r)) => {
                if let Some(p) = r.payload {
                    return Ok(p);
                }
            }
        }
    }
}

fn short(payload: &ResponsePayload) -> String {
    let text = format!("{payload:?}");
    text.chars().take(200).collect()
}

/// Closed-loop dispatch over the raw stub, replaying `template` (one channel; each task gets
/// its own client clone, as tonic clients are cheap handles on the channel).
async fn dispatch_raw(
    addr: &str,
    concurrency: usize,
    seconds: f64,
    template: Task,
) -> Result<String, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let client = WorkerClient::new(channel)
        .max_decoding_message_size(100 << 20)
        .max_encoding_message_size(100 << 20);
    for _ in 0..10 {
        raw_dispatch(&mut client.clone(), template.clone()).await?;
    }
    let template = Arc::new(template);
    closed_loop(concurrency, seconds, move || {
        let mut client = client.clone();
        let task = (*template).clone();
        async move { raw_dispatch(&mut client, task).await }
    })
    .await
}

/// Polls `idle` at `hz` (tokio interval; late ticks are delayed, not bunched) until stdin
/// closes or `seconds` have passed, then prints what it achieved.
async fn poller(addr: &str, hz: f64, seconds: f64) -> Result<String, BoxError> {
    let conn = WorkerConnection::new(addr)?;
    conn.idle(Some(Duration::from_secs(10))).await?;
    let (closed_tx, mut closed) = tokio::sync::oneshot::channel::<()>();
    std::thread::spawn(move || {
        let mut sink = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut sink);
        let _ = closed_tx.send(());
    });
    println!("started");
    std::io::stdout().flush()?;
    let mut interval = tokio::time::interval(Duration::from_secs_f64(1.0 / hz));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut ok, mut failed) = (0u64, 0u64);
    let start = Instant::now();
    let budget = Duration::from_secs_f64(seconds);
    while start.elapsed() < budget {
        tokio::select! {
            _ = &mut closed => break,
            _ = interval.tick() => {}
        }
        match conn.idle(Some(Duration::from_secs(5))).await {
            Ok(_) => ok += 1,
            Err(_) => failed += 1,
        }
    }
    Ok(format!(
        "{{\"ok\":{ok},\"failed\":{failed},\"polls_per_s\":{:.1}}}",
        (ok + failed) as f64 / start.elapsed().as_secs_f64()
    ))
}
