//! The fleets the cases scale: `wool-worker` processes (on loopback ports, or at addresses of
//! their own standing for pods), `wool-scaler` processes, the `burst` example that gives a worker
//! its tasks, and a real Wool 0.15.7 pool.

use std::path::PathBuf;
use std::process::{Command, ExitStatus};
use std::sync::Mutex;
use std::time::Duration;

use crate::engine::Engine;
use crate::processes::{self, free_port, Process};

/// The port every pod worker listens on (the ScaledObject's `port`).
pub const POD_PORT: u16 = 50051;

/// What the cases started so far and share: workers are added, never reused by another case
/// (a worker's idle clock is part of a case's arrangement), except the pod workers.
#[derive(Default)]
struct Started {
    workers: usize,
    /// Each pod worker's address (no port) and process.
    pod_workers: Vec<(String, Process)>,
    /// The shared scalers by name (`plain`, `tls`).
    scalers: Vec<(String, Scaler)>,
}

static STARTED: Mutex<Option<Started>> = Mutex::new(None);

fn with<T>(f: impl FnOnce(&mut Started) -> T) -> T {
    f(STARTED.lock().unwrap().get_or_insert_with(Started::default))
}

/// Starts `n` more wool-workers on loopback ports; their addresses.
pub fn workers(engine: &Engine, n: usize) -> Result<Vec<String>, String> {
    (0..n)
        .map(|_| {
            let index = with(|s| {
                s.workers += 1;
                s.workers - 1
            });
            let process = processes::start(
                &format!("worker-{index}"),
                Command::new(&engine.setup.wool_worker).args(["--listen", "127.0.0.1:0"]),
            )?;
            processes::first_line(&process.out, Duration::from_secs(30))
                .ok_or_else(|| format!("{} printed no address within 30 s", process.name))
        })
        .collect()
}

/// A running wool-scaler: where KEDA calls it and where its metrics are.
#[derive(Debug, Clone)]
pub struct Scaler {
    pub address: String,
    pub metrics: String,
    pub process: Process,
}

/// Starts a wool-scaler with `extra` flags (and `env`), waits for its metrics to answer.
pub async fn start_scaler(
    engine: &Engine,
    name: &str,
    extra: &[String],
    env: &[(&str, &PathBuf)],
) -> Result<Scaler, String> {
    let (port, metrics_port) = (free_port(), free_port());
    let mut command = Command::new(&engine.setup.wool_scaler);
    command
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .args(["--metrics-listen", &format!("127.0.0.1:{metrics_port}")])
        .args(["--log-level", "info"])
        .args(extra)
        // The pods fleets read the API as the admin, unless the case names another kubeconfig.
        .env("KUBECONFIG", &engine.kubeconfig);
    for (key, value) in env {
        command.env(key, value);
    }
    let process = processes::start(&format!("scaler-{name}"), &mut command)?;
    let scaler = Scaler {
        address: format!("127.0.0.1:{port}"),
        metrics: format!("127.0.0.1:{metrics_port}"),
        process,
    };
    let up = crate::api::wait_until(Duration::from_secs(20), || async {
        !crate::timeline::scrape(&scaler.metrics).await.is_empty()
    })
    .await;
    if up {
        Ok(scaler)
    } else {
        Err(format!(
            "wool-scaler {name}: its metrics did not answer within 20 s"
        ))
    }
}

/// The shared plaintext scaler (started on first use).
pub async fn plain_scaler(engine: &Engine) -> Result<Scaler, String> {
    shared_scaler(engine, "plain", Vec::new()).await
}

/// The shared scaler serving KEDA over mutual TLS (started on first use).
pub async fn tls_scaler(engine: &Engine) -> Result<Scaler, String> {
    let pki = &engine.pki;
    let path = |p: &PathBuf| p.display().to_string();
    let flags = vec![
        "--tls-ca".into(),
        path(&pki.scaler_ca),
        "--tls-cert".into(),
        path(&pki.scaler.cert),
        "--tls-key".into(),
        path(&pki.scaler.key),
    ];
    shared_scaler(engine, "tls", flags).await
}

async fn shared_scaler(engine: &Engine, name: &str, flags: Vec<String>) -> Result<Scaler, String> {
    if let Some(found) = with(|s| {
        s.scalers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
    }) {
        return Ok(found);
    }
    let scaler = start_scaler(engine, name, &flags, &[]).await?;
    with(|s| s.scalers.push((name.to_owned(), scaler.clone())));
    Ok(scaler)
}

/// The addresses of at least `n` pod workers (starting the missing ones), in start order.
pub fn pod_workers(engine: &Engine, n: usize) -> Result<Vec<String>, String> {
    let have = with(|s| s.pod_workers.len());
    if have < n {
        more_pod_workers(engine, n - have)?;
    }
    Ok(with(|s| {
        s.pod_workers.iter().map(|(ip, _)| ip.clone()).collect()
    }))
}

/// Starts `n` more pod workers; their addresses. Each listens at an address of its own on port
/// [`POD_PORT`], as pods do: inside the suite's network namespace a 10.251.x address added to
/// its loopback, on the host 127.0.0.x (no address is added outside the namespace).
pub fn more_pod_workers(engine: &Engine, n: usize) -> Result<Vec<String>, String> {
    let mut added = Vec::new();
    for _ in 0..n {
        let index = with(|s| s.pod_workers.len());
        let ip = if engine.aggregation_ip.is_some() {
            let ip = format!("10.251.1.{}", 10 + index);
            crate::netns::ip(&["addr", "add", &format!("{ip}/32"), "dev", "lo"])?;
            ip
        } else {
            format!("127.0.0.{}", 10 + index)
        };
        let process = processes::start(
            &format!("podworker-{index}"),
            Command::new(&engine.setup.wool_worker).args(["--listen", &format!("{ip}:{POD_PORT}")]),
        )?;
        processes::first_line(&process.out, Duration::from_secs(30))
            .ok_or_else(|| format!("{} printed no address within 30 s", process.name))?;
        with(|s| s.pod_workers.push((ip.clone(), process)));
        added.push(ip);
    }
    Ok(added)
}

/// The process of the pod worker at `ip`.
pub fn pod_worker_process(ip: &str) -> Option<Process> {
    with(|s| {
        s.pod_workers
            .iter()
            .find(|(i, _)| i == ip)
            .map(|(_, p)| p.clone())
    })
}

/// A `burst` run: tasks dispatched to one worker.
pub struct Burst {
    pub process: Process,
}

/// Dispatches `tasks` sleep tasks of `seconds` each to `target` (`host:port`), as process
/// `burst-NAME`.
pub fn burst(
    engine: &Engine,
    name: &str,
    target: &str,
    tasks: u32,
    seconds: f64,
) -> Result<Burst, String> {
    let process = processes::start(
        &format!("burst-{name}"),
        Command::new(&engine.setup.burst).args([target, &tasks.to_string(), &seconds.to_string()]),
    )?;
    Ok(Burst { process })
}

impl Burst {
    /// Waits for the burst to end; its exit status.
    pub async fn wait(&self) -> ExitStatus {
        loop {
            if let Some(status) = processes::status(self.process.pid) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The last line it printed.
    pub fn last_line(&self) -> String {
        let out = processes::tail(&self.process.out, 1);
        let log = processes::tail(&self.process.log, 1);
        if log.is_empty() {
            out
        } else {
            format!("{out} {log}")
        }
    }
}

/// A real Wool 0.15.7 `WorkerPool` of `spawn` workers published under discovery namespace
/// `namespace` (`tests/interop/wool_pool.py pool`), with `extra` arguments (e.g. its busy task).
pub fn wool_pool(
    engine: &Engine,
    namespace: &str,
    spawn: usize,
    extra: &[&str],
) -> Result<Process, String> {
    let setup = &engine.setup;
    processes::start(
        "wool-pool",
        Command::new(&setup.python)
            .arg(setup.repo("tests/interop/wool_pool.py"))
            .args(["pool", namespace, "--spawn", &spawn.to_string()])
            .args(extra)
            .current_dir(&setup.root),
    )
}
