//! The Kubernetes suite: wool-scaler driving Deployments through the real engine (etcd,
//! kube-apiserver, kube-controller-manager's HPA controller, KEDA's operator and metrics
//! adapter), with wool-worker and wool-scaler processes, a real Wool 0.15.7 pool, and a Wool
//! application whose pods run Wool's own worker (`wool_app.rs`, `kubelet.rs`), in a network
//! namespace of its own. Each case is one trial, ignored by a plain `cargo test`:
//!
//! ```text
//! cargo test --test kubernetes -- --ignored              every default case
//! cargo test --test kubernetes -- --ignored scaledown    one case (the runner's filter)
//! CHURN_MINUTES=10 cargo test --test kubernetes -- --ignored --exact churn   the measurement
//! ```
//!
//! `scripts/e2e-kubernetes.sh` prepares what the cases need (the engine, Helm, the images'
//! digests, the Wool venv, the programs) and runs the first form; without them a case fails at
//! once, naming what is missing and the command that provides it. Cases run one at a time; the
//! engine is started once, by the first case that needs it, with every part the selected cases
//! need, and stopped when the run ends, whatever happened. Each case prints its timeline; a
//! failure names the case and the object and carries the timeline.

#[path = "../common/mod.rs"]
mod common;

mod api;
mod chart;
mod engine;
mod fleet;
mod kubelet;
mod manifests;
mod netns;
mod pki;
mod pods;
mod processes;
mod scaling;
mod setup;
mod timeline;
mod wool_app;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};

use libtest_mimic::{Arguments, Completion, Failed, Trial};

use engine::{Engine, Parts};
use setup::Setup;

/// What a case returns: `Err` with the failure's message.
pub type Verdict = Result<(), String>;
type CaseFuture = Pin<Box<dyn Future<Output = Verdict>>>;

/// One case of the suite.
struct Case {
    name: &'static str,
    /// What of the engine it needs.
    needs: Parts,
    run: fn(&'static Engine) -> CaseFuture,
}

/// A [`Case`] named `$name`, needing `Parts::$needs`, that runs `$run(engine, $arg...)`.
macro_rules! case {
    ($name:literal, $needs:ident, $run:path $(, $arg:expr)*) => {
        Case {
            name: $name,
            needs: Parts::$needs,
            run: |e| Box::pin($run(e $(, $arg)*)),
        }
    };
}

/// The cases, in the order they run. `churn` is a measurement, run only when named.
fn cases() -> Vec<Case> {
    vec![
        case!("activation", KEDA, scaling::activation),
        case!("pool", KEDA, scaling::pool),
        case!("stream", KEDA, scaling::stream),
        case!("tls", KEDA, scaling::tls),
        case!("unreachable", KEDA, scaling::unreachable, false),
        case!("unreachable_fallback", HPA, scaling::unreachable, true),
        case!("hpa", HPA, scaling::hpa),
        case!("scaledown", PODS, pods::scaledown),
        case!("podbounds", KEDA, pods::podbounds),
        case!("manifests", API_SERVER, manifests::manifests),
        case!("packaged", API_SERVER, manifests::packaged),
        case!("wool_cycle", PODS, wool_app::cycle),
        case!("wool_delete", PODS, wool_app::delete),
        case!("churn", KEDA, pods::churn),
    ]
}

/// The measurement that runs only when the filter names it.
const NAMED_ONLY: &str = "churn";

/// The runtime every case's async part runs on (two worker threads: the samplers run there
/// while a case blocks its own thread).
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

/// The time of day, UTC, with milliseconds, for the suite's own lines.
pub fn clock() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let s = now.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        s / 3600,
        s / 60 % 60,
        s % 60,
        now.subsec_millis()
    )
}

/// One line per case for the summary printed at the end.
static RESULTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// How long each case took, for the summary.
static TIMES: Mutex<Vec<String>> = Mutex::new(Vec::new());

/// Adds a line to the summary.
pub fn result(line: impl Into<String>) {
    RESULTS.lock().unwrap().push(line.into());
}

/// Whether a case that needs the network namespace fails without it (CI sets it).
fn namespace_required() -> bool {
    std::env::var_os("WOOL_TEST_REQUIRE_NETNS").is_some_and(|v| v == "1")
}

/// Runs one case: its preconditions, the engine, then the case.
fn run_case(case: &Case) -> Result<Completion, Failed> {
    let setup = Setup::from_env().map_err(|e| Failed::from(format!("case {}: {e}", case.name)))?;
    if case.needs.hpa && !netns::available() {
        let why = "no network namespace (it needs root and iproute2): the metrics adapter's \
                   Endpoints cannot be loopback";
        if namespace_required() {
            return Err(format!("case {}: {why}, and WOOL_TEST_REQUIRE_NETNS=1", case.name).into());
        }
        println!("\n== {}: NOT RUN: {why}", case.name);
        result(format!("{}: not run: {why}", case.name));
        return Ok(Completion::ignored_with(format!("not run: {why}")));
    }
    let started = std::time::Instant::now();
    let engine =
        engine::ensure(&setup).map_err(|e| Failed::from(format!("case {}: {e}", case.name)))?;
    if !engine.parts.covers(case.needs) {
        return Err(format!(
            "case {}: the engine runs {:?}, the case needs {:?}",
            case.name, engine.parts, case.needs
        )
        .into());
    }
    let verdict = runtime().block_on((case.run)(engine));
    let took = started.elapsed().as_secs();
    let outcome = if verdict.is_ok() { "passed" } else { "FAILED" };
    println!("    (case {} {outcome} in {took} s)", case.name);
    TIMES
        .lock()
        .unwrap()
        .push(format!("{} {took} s ({outcome})", case.name));
    verdict.map(|()| Completion::Completed).map_err(|e| {
        if e.starts_with("case ") {
            Failed::from(e)
        } else {
            Failed::from(format!("case {}: {e}", case.name))
        }
    })
}

/// The trials for `arguments`: every case, ignored unless `--ignored` is given; `churn` only
/// when the filter names it.
fn trials(arguments: &Arguments) -> (Vec<Trial>, Parts) {
    let named = arguments.filter.as_deref() == Some(NAMED_ONLY);
    let mut needed = Parts::API_SERVER;
    let mut trials = Vec::new();
    for case in cases() {
        if case.name == NAMED_ONLY && !named {
            continue;
        }
        let needs = case.needs;
        let trial =
            Trial::ignorable_test(case.name, move || run_case(&case)).with_ignored_flag(true);
        if !arguments.is_ignored(&trial) && !arguments.is_filtered_out(&trial) {
            needed = needed.union(needs);
        }
        trials.push(trial);
    }
    (trials, needed)
}

/// Whether any trial would run.
fn any_runs(arguments: &Arguments, trials: &[Trial]) -> bool {
    !arguments.list
        && trials
            .iter()
            .any(|t| !arguments.is_ignored(t) && !arguments.is_filtered_out(t))
}

/// Stops everything on SIGINT or SIGTERM, then exits 130.
fn stop_on_signal() {
    runtime().spawn(async {
        use tokio::signal::unix::{signal, SignalKind};
        let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
        let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
        }
        eprintln!("{}  e2e  interrupted: stopping everything", clock());
        std::thread::spawn(|| {
            engine::shutdown(true);
            std::process::exit(130);
        });
    });
}

fn print_summary() {
    let results = RESULTS.lock().unwrap();
    let times = TIMES.lock().unwrap();
    if results.is_empty() && times.is_empty() {
        return;
    }
    println!("\n== summary");
    for line in results.iter() {
        println!("    {line}");
    }
    if !times.is_empty() {
        println!("    cases: {}", times.join(", "));
    }
}

fn main() -> std::process::ExitCode {
    let mut arguments = Arguments::from_args();
    // One case at a time: they share the engine, and their timings are the evidence.
    arguments.test_threads = Some(1);
    let (trials, needed) = trials(&arguments);
    if !any_runs(&arguments, &trials) {
        return libtest_mimic::run(&arguments, trials).exit_code();
    }
    if !netns::inside() {
        let started = std::time::Instant::now();
        let code = netns::run_inside();
        eprintln!(
            "{}  e2e  suite finished in {} s (rc {code})",
            clock(),
            started.elapsed().as_secs()
        );
        return std::process::ExitCode::from(code.clamp(0, 255) as u8);
    }
    engine::want(needed);
    stop_on_signal();
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        libtest_mimic::run(&arguments, trials)
    }));
    print_summary();
    let failed = run.as_ref().map_or(true, |c| c.has_failed());
    let clean = engine::shutdown(failed);
    match run {
        Ok(conclusion) if clean => conclusion.exit_code(),
        _ => std::process::ExitCode::FAILURE,
    }
}
