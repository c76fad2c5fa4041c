//! `wool_bench`: the Rust benchmark driver program.
//!
//! `benches/run.py` (run by `scripts/bench.sh`, see BENCHMARKS.md) starts the workers and runs
//! this program once per measurement, as it runs the C, Go and Python drivers. Built by
//! `cargo bench --no-run --bench wool_bench` (`harness = false`); run with no sub-command (as
//! `cargo bench` and `cargo test --all-targets` do) it prints a note and exits 0. Not a test:
//! nothing here asserts on time.
//!
//! # Output
//!
//! A measuring sub-command prints ONE line of JSON on stdout (serde_json): what it measured,
//! raw, and the totals only this process knows. No statistics: `benches/run.py` computes every
//! median, percentile, mean and rate, from every driver's raw figures alike. Units:
//!
//! * a duration of one operation (a poll, a sweep, a listing): integer nanoseconds, in lists
//!   named `*_ns`, in the order the operations ran;
//! * totals: `elapsed_s`, the wall time of the timed part, and `cpu_s`, this process's CPU time
//!   over it (all threads), in seconds;
//! * counts (`ok`, `failed`, `bursts`) and `first_error`, the first failure's text (`""`: none).
//!
//! The shapes are the types under "Outputs" below ([`Latency`], [`Bursts`], [`Sweeps`],
//! [`Listings`], [`ScalerCalls`], [`ClosedLoop`], [`PollerRun`]); progress and diagnostics go
//! to stderr.
//!
//! # Sub-commands
//!
//! ```text
//! seq-raw  ADDR N WARMUP current|multi      N sequential polls on the generated tonic stub
//!                                           (default Endpoint), after WARMUP        -> Latency
//! seq-conn ADDR N WARMUP current|multi [no-keepalive]
//!                                           the same through WorkerConnection::idle -> Latency
//! burst    ADDR LEVELS SECONDS [no-keepalive]
//!                                           per level N: bursts of N concurrent idle() on one
//!                                           WorkerConnection for SECONDS (>= 1 burst) -> Bursts
//! fleet-serve N                             serves N Workers in this process; prints their
//!                                           addresses, then `ready`; ends at stdin EOF
//! sweep    ADDRFILE CONCURRENCY SWEEPS [TIMEOUT]
//!                                           libwool::fleet::sweep over every address
//!                                           (max_in_flight = CONCURRENCY, one deadline of
//!                                           TIMEOUT s per sweep, default 30): 1 cold sweep
//!                                           (new connections) + SWEEPS warm          -> Sweeps
//! scaler   ADDRFILE REPS [TIMEOUT]          a libwool::scaler::Scaler in this process answering
//!                                           GetMetrics for the fleet of ADDRFILE (`targets`,
//!                                           idleThreshold 0: the metric is 0 unless polls
//!                                           fail; sweepTimeout TIMEOUT s, default 30), on one
//!                                           tonic Channel, one call at a time. First the
//!                                           anchor, as `sweep` (max_in_flight as the scaler's,
//!                                           100): 1 cold + REPS warm sweeps; then REPS calls
//!                                           with maxSweepAge 0 (each sweeps the fleet) and
//!                                           20 x REPS with maxSweepAge 1h (the cached sweep),
//!                                           each kind after one untimed call   -> ScalerCalls
//! discover NS REPS [ADDR N]                 LocalDiscovery listings of namespace NS: REPS on
//!                                           one kept LocalDiscovery, REPS/4 on a fresh one
//!                                           each (WOOL_BENCH_FRESH=K: K of them, e.g. 0
//!                                           under strace); with ADDR, also N sequential
//!                                           WorkerConnection::idle polls of ADDR   -> Listings
//! handles  ADDR N                           N WorkerConnections, each polled once; prints
//!                                           `ready {"handles","failed"}`, then waits for stdin
//! dispatch ADDR CONCURRENCY SECONDS BYTES   closed loop of WorkerConnection::dispatch("echo")
//!                                                                                -> ClosedLoop
//! dispatch-raw ADDR CONCURRENCY SECONDS TEMPLATE
//!                                           closed loop of raw-stub dispatches replaying a Task
//!                                           template (prost bytes; fresh UUID id each)
//!                                                                                -> ClosedLoop
//! poller   ADDR HZ SECONDS                  idle polls at HZ (a fleet manager's poller); prints
//!                                           `started`, polls until stdin closes (at most
//!                                           SECONDS)                                -> PollerRun
//! tls-certs DIR                             writes a throwaway PKI (rcgen) into DIR: ca.pem,
//!                                           worker-cert.pem / worker-key.pem (SANs 127.0.0.1,
//!                                           localhost) and client-cert.pem / client-key.pem
//! first    ADDR N WARMUP                    N first polls, each on a NEW connection (a new
//!                                           WorkerConnection whose pool key no earlier one
//!                                           had, so a new TCP connection, TLS and HTTP/2
//!                                           handshake), timed from WorkerConnection::new to
//!                                           the answer, after WARMUP untimed ones -> Latency
//! ```
//! (`no-keepalive`: the connection's keepalive off, to compare with the default, on.)
//!
//! With `WOOL_BENCH_TLS=DIR` in the environment (a directory `tls-certs` wrote), every
//! `WorkerConnection` this program makes (`seq-conn`, `burst`, `first`, ...) is mutual TLS:
//! trusting `DIR/ca.pem`, presenting `DIR/client-cert.pem` and `DIR/client-key.pem`. The C
//! driver (benches/c/idle_bench.c) and the grpc-go anchor (benches/grpc-go) read the same
//! variable.

use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, Read, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use libwool::protocol::externalscaler::{
    external_scaler_client::ExternalScalerClient, GetMetricsRequest, ScaledObjectRef,
};
use libwool::protocol::{
    request::Payload as RequestPayload, response::Payload as ResponsePayload,
    worker_client::WorkerClient, Request, Task, Void,
};
use libwool::worker::{RoutineRegistry, Worker};
use libwool::WorkerConnection;
use prost::Message as _;
use serde::Serialize;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::{Channel, Endpoint};

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

/// Runs the sub-command `args[0]`.
fn run(args: &[String]) -> Result<(), BoxError> {
    match args[0].as_str() {
        "seq-raw" | "seq-conn" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let n: usize = arg(args, 2, "N")?;
            let warmup: usize = arg(args, 3, "WARMUP")?;
            let kind: String = arg(args, 4, "current|multi")?;
            let keepalive = keepalive_arg(args, 5)?;
            let rt = runtime(&kind)?;
            let latency = if args[0] == "seq-raw" {
                rt.block_on(seq_raw(&addr, n, warmup))?
            } else {
                rt.block_on(seq_conn(&addr, n, warmup, keepalive))?
            };
            emit(&latency)
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
            emit(&runtime("multi")?.block_on(burst(&addr, &levels, seconds, keepalive))?)
        }
        "fleet-serve" => {
            let n: usize = arg(args, 1, "N")?;
            runtime("multi")?.block_on(fleet_serve(n))
        }
        "sweep" => {
            let addrs = addr_file(args, 1)?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let sweeps: usize = arg(args, 3, "SWEEPS")?;
            let timeout = timeout_arg(args, 4)?;
            emit(&runtime("multi")?.block_on(sweep(addrs, concurrency, sweeps, timeout))?)
        }
        "scaler" => {
            let addrs = addr_file(args, 1)?;
            let reps: usize = arg(args, 2, "REPS")?;
            let timeout = timeout_arg(args, 3)?;
            emit(&runtime("multi")?.block_on(scaler(addrs, reps, timeout))?)
        }
        "discover" => {
            let namespace: String = arg(args, 1, "NS")?;
            let reps: usize = arg(args, 2, "REPS")?;
            let poll = match args.get(3) {
                Some(addr) => Some((addr.clone(), arg::<usize>(args, 4, "N")?)),
                None => None,
            };
            emit(&discover(&namespace, reps, poll)?)
        }
        "handles" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let n: usize = arg(args, 2, "N")?;
            runtime("multi")?.block_on(handles(&addr, n))
        }
        "dispatch" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            let bytes: usize = arg(args, 4, "BYTES")?;
            emit(&runtime("multi")?.block_on(dispatch(&addr, concurrency, seconds, bytes))?)
        }
        "dispatch-raw" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let concurrency: usize = arg(args, 2, "CONCURRENCY")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            let template: String = arg(args, 4, "TEMPLATE")?;
            let task = Task::decode(std::fs::read(&template)?.as_slice())?;
            emit(&runtime("multi")?.block_on(dispatch_raw(&addr, concurrency, seconds, task))?)
        }
        "poller" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let hz: f64 = arg(args, 2, "HZ")?;
            let seconds: f64 = arg(args, 3, "SECONDS")?;
            emit(&runtime("current")?.block_on(poller(&addr, hz, seconds))?)
        }
        "tls-certs" => {
            let dir: String = arg(args, 1, "DIR")?;
            tls_certs(std::path::Path::new(&dir))
        }
        "first" => {
            let addr: String = arg(args, 1, "ADDR")?;
            let n: usize = arg(args, 2, "N")?;
            let warmup: usize = arg(args, 3, "WARMUP")?;
            emit(&runtime("current")?.block_on(first_polls(&addr, n, warmup))?)
        }
        other => Err(format!("unknown subcommand {other}").into()),
    }
}

// ---------------------------------------------------------------- arguments, runtimes

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, BoxError> {
    args.get(i)
        .ok_or_else(|| format!("missing argument {i}: {what}"))?
        .parse()
        .map_err(|_| format!("bad argument {i} ({what}): {:?}", args[i]).into())
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

/// The addresses in the file named by the argument at `i`, one a line (blank lines skipped).
fn addr_file(args: &[String], i: usize) -> Result<Vec<String>, BoxError> {
    let file: String = arg(args, i, "ADDRFILE")?;
    Ok(std::fs::read_to_string(&file)?
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(String::from)
        .collect())
}

/// The optional TIMEOUT (seconds) at `i`: a whole sweep's deadline, 30 if absent.
fn timeout_arg(args: &[String], i: usize) -> Result<f64, BoxError> {
    if args.len() > i {
        arg(args, i, "TIMEOUT")
    } else {
        Ok(30.0)
    }
}

fn runtime(kind: &str) -> Result<tokio::runtime::Runtime, BoxError> {
    let mut builder = match kind {
        "current" => tokio::runtime::Builder::new_current_thread(),
        "multi" => tokio::runtime::Builder::new_multi_thread(),
        other => return Err(format!("runtime must be current or multi, got {other}").into()),
    };
    Ok(builder.enable_all().build()?)
}

/// A connection with Wool's default channel options, or with keepalive off.
fn connection(addr: &str, keepalive: bool) -> Result<WorkerConnection, BoxError> {
    let mut options = libwool::connection::ChannelOptions::default();
    if !keepalive {
        options.keepalive_interval = None;
    }
    let credentials = bench_credentials()?;
    Ok(WorkerConnection::with_options(addr, credentials, options)?)
}

// ---------------------------------------------------------------- outputs

/// Prints `output` as the one line of JSON the harness reads.
fn emit(output: &impl Serialize) -> Result<(), BoxError> {
    let line = serde_json::to_string(output)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}")?;
    out.flush()?;
    Ok(())
}

/// A sequential run: one sample per call (`seq-raw`, `seq-conn`, and `discover`'s polls).
#[derive(Serialize)]
struct Latency {
    samples_ns: Vec<u64>,
    elapsed_s: f64,
    cpu_s: f64,
}

/// `burst`: one row per level.
#[derive(Serialize)]
struct Bursts {
    levels: Vec<Level>,
}

/// One level of `burst`: `bursts` rounds of `concurrency` calls each, in `elapsed_s`.
#[derive(Serialize)]
struct Level {
    concurrency: usize,
    bursts: u64,
    #[serde(flatten)]
    tally: Tally,
    elapsed_s: f64,
}

/// `dispatch`, `dispatch-raw`: `concurrency` callers back to back for `elapsed_s`.
#[derive(Serialize)]
struct ClosedLoop {
    concurrency: usize,
    elapsed_s: f64,
    #[serde(flatten)]
    tally: Tally,
}

/// `poller`: the polls made (failures counted, not kept) in `elapsed_s`.
#[derive(Serialize)]
struct PollerRun {
    ok: u64,
    failed: u64,
    elapsed_s: f64,
}

/// `sweep`: the duration of each sweep (the first cold, then the warm ones) and its failures.
#[derive(Serialize)]
struct Sweeps {
    endpoints: usize,
    concurrency: usize,
    sweep_ns: Vec<u64>,
    failures: Vec<usize>,
    first_error: String,
}

/// `scaler`: the anchor's sweeps, then the `GetMetrics` calls answered with a fresh sweep each
/// (`fresh`) and from the cached sweep (`cached`).
#[derive(Serialize)]
struct ScalerCalls {
    endpoints: usize,
    /// The most polls a second one fleet's sweeps make (the scaler's tenant bound): fresh
    /// calls back to back wait for the next allowed sweep.
    polls_per_second_per_fleet: u32,
    sweep: Sweeps,
    fresh: Calls,
    cached: Calls,
}

/// One kind of `scaler` call: the timed calls ([`Latency`]), and the tally of them all, the
/// untimed one too (a failure: an error status, or a metric other than 0: workers the sweep
/// did not reach).
#[derive(Serialize)]
struct Calls {
    #[serde(flatten)]
    latency: Latency,
    #[serde(flatten)]
    tally: Tally,
}

/// `discover`: each listing's duration, on the kept `LocalDiscovery` (`kept_ns`, with this
/// process's CPU time over them) and on a fresh one each time (`fresh_ns`); the distinct
/// worker counts the listings returned; the polls, if asked for.
#[derive(Serialize)]
struct Listings {
    namespace: String,
    counts: BTreeSet<usize>,
    kept_ns: Vec<u64>,
    fresh_ns: Vec<u64>,
    cpu_s: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    poll: Option<Latency>,
}

/// Calls that succeeded, calls that failed, and the first failure's text.
#[derive(Default, Serialize)]
struct Tally {
    ok: u64,
    failed: u64,
    first_error: String,
}

impl Tally {
    fn record<T, E: std::fmt::Display>(&mut self, outcome: Result<T, E>) {
        match outcome {
            Ok(_) => self.ok += 1,
            Err(e) => self.fail(e),
        }
    }

    fn fail(&mut self, error: impl std::fmt::Display) {
        self.failed += 1;
        if self.first_error.is_empty() {
            self.first_error = error.to_string();
        }
    }
}

/// Wall clock and this process's CPU clock from `start` on.
struct Stopwatch {
    wall: Instant,
    cpu: f64,
}

impl Stopwatch {
    fn start() -> Self {
        Stopwatch {
            cpu: process_cpu(),
            wall: Instant::now(),
        }
    }

    /// (elapsed wall seconds, CPU seconds) since `start`.
    fn read(&self) -> (f64, f64) {
        (self.wall.elapsed().as_secs_f64(), process_cpu() - self.cpu)
    }
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

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// `warmup` calls, then `n` timed ones, one at a time.
async fn sequential<T, E>(
    n: usize,
    warmup: usize,
    mut call: impl AsyncFnMut() -> Result<T, E>,
) -> Result<Latency, E> {
    for _ in 0..warmup {
        call().await?;
    }
    let mut samples_ns = Vec::with_capacity(n);
    let clock = Stopwatch::start();
    for _ in 0..n {
        let t = Instant::now();
        call().await?;
        samples_ns.push(nanos(t.elapsed()));
    }
    let (elapsed_s, cpu_s) = clock.read();
    Ok(Latency {
        samples_ns,
        elapsed_s,
        cpu_s,
    })
}

// ---------------------------------------------------------------- sequential polls

/// (a) The generated stub on a tonic `Channel` with default settings.
async fn seq_raw(addr: &str, n: usize, warmup: usize) -> Result<Latency, BoxError> {
    let channel = Endpoint::from_shared(format!("http://{addr}"))?
        .connect()
        .await?;
    let mut client = WorkerClient::new(channel);
    Ok(sequential(n, warmup, async || client.idle(Void {}).await).await?)
}

/// (b) `WorkerConnection::idle` with a 10 s deadline (as a host would pass one).
async fn seq_conn(
    addr: &str,
    n: usize,
    warmup: usize,
    keepalive: bool,
) -> Result<Latency, BoxError> {
    let conn = connection(addr, keepalive)?;
    let timeout = Some(Duration::from_secs(10));
    Ok(sequential(n, warmup, async || conn.idle(timeout).await).await?)
}

// ---------------------------------------------------------------- concurrent polls

/// Bursts of `level` concurrent `idle()` calls (tokio tasks) on one `WorkerConnection`,
/// repeated until `seconds` have passed (at least one burst per level).
async fn burst(
    addr: &str,
    levels: &[usize],
    seconds: f64,
    keepalive: bool,
) -> Result<Bursts, BoxError> {
    let conn = Arc::new(connection(addr, keepalive)?);
    conn.idle(Some(Duration::from_secs(10))).await?; // connect outside the measurement
    let mut rows = Vec::new();
    for &level in levels {
        let mut tally = Tally::default();
        let mut bursts = 0u64;
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
                    Ok(outcome) => tally.record(outcome),
                    Err(e) => tally.fail(e), // the task panicked or was cancelled
                }
            }
            bursts += 1;
        }
        rows.push(Level {
            concurrency: level,
            bursts,
            tally,
            elapsed_s: start.elapsed().as_secs_f64(),
        });
    }
    Ok(Bursts { levels: rows })
}

// ---------------------------------------------------------------- fleets

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
/// the same connections, each one `libwool::fleet::sweep` (the library's sweep, which
/// `wool_idle_many` and `woolctl sweep` are built on) with `max_in_flight = concurrency` and
/// one deadline of `timeout` seconds for the whole sweep.
async fn sweep(
    addrs: Vec<String>,
    concurrency: usize,
    sweeps: usize,
    timeout: f64,
) -> Result<Sweeps, BoxError> {
    let conns: Vec<WorkerConnection> = addrs
        .iter()
        .map(|a| WorkerConnection::new(a))
        .collect::<Result<_, _>>()?;
    let mut options = libwool::fleet::SweepOptions::default();
    options.max_in_flight = concurrency.max(1);
    options.timeout = Some(Duration::from_secs_f64(timeout));
    let mut out = Sweeps {
        endpoints: conns.len(),
        concurrency,
        sweep_ns: Vec::with_capacity(sweeps + 1),
        failures: Vec::with_capacity(sweeps + 1),
        first_error: String::new(),
    };
    for _ in 0..=sweeps {
        let start = Instant::now();
        let outcomes = libwool::fleet::sweep(&conns, &options).await?;
        out.sweep_ns.push(nanos(start.elapsed()));
        let mut failed = 0;
        for e in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            failed += 1;
            if out.first_error.is_empty() {
                out.first_error = e.to_string();
            }
        }
        out.failures.push(failed);
    }
    Ok(out)
}

/// `GetMetrics` calls answered from the cached sweep per call answered with a fresh one.
const CACHED_PER_FRESH: usize = 20;

/// The anchor (as [`sweep`]: 1 cold + `reps` warm sweeps, at most as many polls in flight as
/// the scaler's sweeps, 100), then a [`libwool::scaler::Scaler`] on 127.0.0.1:0 in this process,
/// asked over one tonic `Channel` for the metric of the fleet `addrs` (KEDA's `targets`), one
/// call at a time: `reps` calls with `maxSweepAge` 0 (each sweeps the whole fleet, over the
/// scaler's own connections), then `CACHED_PER_FRESH * reps` with `maxSweepAge` 1h (each answered
/// from the cached sweep); each kind after one untimed call (the first dials the scaler's
/// connections). `idleThreshold` 0: every worker that answers is idle, so the metric is 0.
async fn scaler(addrs: Vec<String>, reps: usize, timeout: f64) -> Result<ScalerCalls, BoxError> {
    let in_flight = libwool::fleet::SweepOptions::default().max_in_flight;
    let anchor = sweep(addrs.clone(), in_flight, reps, timeout).await?;
    let scaler = libwool::scaler::Scaler::builder()
        .listen("127.0.0.1:0")
        .serve()
        .await?;
    let channel = Endpoint::from_shared(format!("http://{}", scaler.address()))?
        .tcp_nodelay(true)
        .connect()
        .await?;
    let mut client = ExternalScalerClient::new(channel);
    let targets = addrs.join(",");
    let request = |max_sweep_age: &str| GetMetricsRequest {
        scaled_object_ref: Some(ScaledObjectRef {
            name: "wool-bench".into(),
            namespace: "bench".into(),
            scaler_metadata: HashMap::from([
                ("targets".into(), targets.clone()),
                ("idleThreshold".into(), "0".into()),
                ("maxSweepAge".into(), max_sweep_age.into()),
                ("sweepTimeout".into(), format!("{timeout}")),
            ]),
        }),
        metric_name: libwool::scaler::METRIC_NAME.into(),
    };
    let mut calls = async |request: GetMetricsRequest, n: usize| {
        let mut tally = Tally::default();
        let outcome = sequential(n, 1, async || {
            tally.record(get_metrics(&mut client, request.clone()).await);
            Ok::<_, std::convert::Infallible>(())
        })
        .await;
        let Ok(latency) = outcome;
        Calls { latency, tally }
    };
    let fresh = calls(request("0"), reps).await;
    let cached = calls(request("1h"), CACHED_PER_FRESH * reps).await;
    drop(client);
    scaler.shutdown();
    scaler.wait().await?;
    Ok(ScalerCalls {
        endpoints: addrs.len(),
        polls_per_second_per_fleet: libwool::scaler::POLLS_PER_SECOND_PER_FLEET,
        sweep: anchor,
        fresh,
        cached,
    })
}

/// One `GetMetrics` call; `Err` unless it answers the one metric, 0.
async fn get_metrics(
    client: &mut ExternalScalerClient<Channel>,
    request: GetMetricsRequest,
) -> Result<(), String> {
    let answer = client
        .get_metrics(request)
        .await
        .map_err(|s| format!("GetMetrics: {s}"))?
        .into_inner();
    match answer.metric_values.as_slice() {
        [value] if value.metric_value_float == 0.0 => Ok(()),
        values => Err(format!(
            "expected the one metric at 0 (every worker idle), got {values:?}"
        )),
    }
}

/// Listings of a local registry: `reps / 4` (at least 1) by a fresh
/// `LocalDiscovery::new(ns)?.list()` each (a one-shot tool: every segment opened), then `reps`
/// (at least 1) by one kept `LocalDiscovery` (a fleet manager's rounds: the first listing
/// opens the segments, later ones reuse them). With `poll = (addr, n)`, also `n` sequential
/// `WorkerConnection::idle` polls of `addr` on a current_thread runtime (after 200 warm-up
/// polls), for the comparison in one process.
fn discover(
    namespace: &str,
    reps: usize,
    poll: Option<(String, usize)>,
) -> Result<Listings, BoxError> {
    use libwool::fleet::discovery::LocalDiscovery;
    let mut counts = BTreeSet::new();
    let fresh = match std::env::var("WOOL_BENCH_FRESH") {
        Ok(k) => k
            .parse()
            .map_err(|_| format!("WOOL_BENCH_FRESH: not a count: {k:?}"))?,
        Err(_) => reps.max(4) / 4,
    };
    let mut fresh_ns = Vec::with_capacity(fresh);
    for _ in 0..fresh {
        let t = Instant::now();
        let workers = LocalDiscovery::new(namespace)?.list()?;
        fresh_ns.push(nanos(t.elapsed()));
        counts.insert(workers.len());
    }
    let discovery = LocalDiscovery::new(namespace)?;
    let mut kept_ns = Vec::with_capacity(reps.max(1));
    let clock = Stopwatch::start();
    for _ in 0..reps.max(1) {
        let t = Instant::now();
        let workers = discovery.list()?;
        kept_ns.push(nanos(t.elapsed()));
        counts.insert(workers.len());
    }
    let (_, cpu_s) = clock.read();
    let poll = match poll {
        Some((addr, n)) => {
            Some(runtime("current")?.block_on(seq_conn(&addr, n.max(1), 200, true))?)
        }
        None => None,
    };
    Ok(Listings {
        namespace: namespace.to_string(),
        counts,
        kept_ns,
        fresh_ns,
        cpu_s,
        poll,
    })
}

// ---------------------------------------------------------------- memory

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
    println!(
        "ready {}",
        serde_json::json!({"handles": n, "failed": failed})
    );
    std::io::stdout().flush()?;
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        let _ = std::io::stdin().lock().read_line(&mut line);
    })
    .await?;
    drop(conns);
    Ok(())
}

// ---------------------------------------------------------------- dispatch

/// Closed loop: `concurrency` tasks each dispatching `echo` back to back for `seconds`.
async fn dispatch(
    addr: &str,
    concurrency: usize,
    seconds: f64,
    bytes: usize,
) -> Result<ClosedLoop, BoxError> {
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

/// Runs `call` back to back on `concurrency` tasks for `seconds`.
async fn closed_loop<F, Fut>(
    concurrency: usize,
    seconds: f64,
    call: F,
) -> Result<ClosedLoop, BoxError>
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    // Counters, not a locked Tally: the tasks must not contend on a lock per call.
    let call = Arc::new(call);
    let ok = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let first_error = Arc::new(Mutex::new(String::new()));
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
    let elapsed_s = start.elapsed().as_secs_f64();
    let first_error = first_error.lock().unwrap().clone();
    Ok(ClosedLoop {
        concurrency,
        elapsed_s,
        tally: Tally {
            ok: ok.load(Ordering::Relaxed),
            failed: failed.load(Ordering::Relaxed),
            first_error,
        },
    })
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
    responses: &mut tonic::Streaming<libwool::protocol::Response>,
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
) -> Result<ClosedLoop, BoxError> {
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
/// closes or `seconds` have passed.
async fn poller(addr: &str, hz: f64, seconds: f64) -> Result<PollerRun, BoxError> {
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
    Ok(PollerRun {
        ok,
        failed,
        elapsed_s: start.elapsed().as_secs_f64(),
    })
}

// ---------------------------------------------------------------- TLS

/// The variable naming the directory of the client's mutual-TLS material (see the module docs).
const TLS_DIR_VAR: &str = "WOOL_BENCH_TLS";

/// Writes a throwaway PKI into `dir`: a CA, a worker certificate (server authentication, SANs
/// `127.0.0.1` and `localhost`) and a client certificate (client authentication), each with
/// its key, as PEM files (see the module docs for their names).
fn tls_certs(dir: &std::path::Path) -> Result<(), BoxError> {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose,
        IsCa, KeyPair, KeyUsagePurpose,
    };
    std::fs::create_dir_all(dir)?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "wool-bench-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    std::fs::write(dir.join("ca.pem"), ca.pem())?;
    for (stem, purpose) in [
        ("worker", ExtendedKeyUsagePurpose::ServerAuth),
        ("client", ExtendedKeyUsagePurpose::ClientAuth),
    ] {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
        params
            .distinguished_name
            .push(DnType::CommonName, format!("wool-bench-{stem}"));
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = vec![purpose];
        params.use_authority_key_identifier_extension = true;
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &ca)?;
        std::fs::write(dir.join(format!("{stem}-cert.pem")), cert.pem())?;
        std::fs::write(dir.join(format!("{stem}-key.pem")), key.serialize_pem())?;
    }
    Ok(())
}

/// The client's mutual-TLS credentials from the directory in `WOOL_BENCH_TLS`; `None`
/// (plaintext) when the variable is unset or empty.
fn bench_credentials() -> Result<Option<libwool::WorkerCredentials>, BoxError> {
    let Some(dir) = std::env::var_os(TLS_DIR_VAR).filter(|d| !d.is_empty()) else {
        return Ok(None);
    };
    let dir = std::path::PathBuf::from(dir);
    Ok(Some(libwool::WorkerCredentials::from_files(
        &dir.join("ca.pem"),
        Some(&dir.join("client-key.pem")),
        Some(&dir.join("client-cert.pem")),
        true,
        None,
    )?))
}

/// `warmup` + `n` first polls, each on a new connection: connections to one target with equal
/// credentials and options share one pooled channel, so each gets options no other has (its
/// receive limit one byte below the previous one's: nothing a poll's answer comes near), hence
/// a channel, a TCP connection and handshakes of its own. Timed: `WorkerConnection` made, its
/// first `idle` answered (TCP connect, TLS handshake when `WOOL_BENCH_TLS` is set, HTTP/2
/// preface and settings, the call). The connections are kept until the end, so that no
/// closing overlaps a later sample.
async fn first_polls(addr: &str, n: usize, warmup: usize) -> Result<Latency, BoxError> {
    let credentials = bench_credentials()?;
    let mut options = libwool::connection::ChannelOptions::default();
    let mut kept = Vec::with_capacity(n + warmup);
    let mut samples_ns = Vec::with_capacity(n);
    let mut clock = Stopwatch::start();
    for i in 0..warmup + n {
        options.max_receive_message_bytes -= 1;
        if i == warmup {
            clock = Stopwatch::start();
        }
        let t = Instant::now();
        let conn = WorkerConnection::with_options(addr, credentials.clone(), options.clone())?;
        conn.idle(Some(Duration::from_secs(10))).await?;
        if i >= warmup {
            samples_ns.push(nanos(t.elapsed()));
        }
        kept.push(conn);
    }
    let (elapsed_s, cpu_s) = clock.read();
    drop(kept);
    Ok(Latency {
        samples_ns,
        elapsed_s,
        cpu_s,
    })
}
