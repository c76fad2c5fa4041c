//! The suite's own network namespace: its loopback, and a veth pair with 10.250.x addresses that
//! exist only inside it (the API server refuses loopback addresses in the Endpoints of the
//! metrics adapter's aggregated API). The program makes it, runs itself again inside it
//! (`ip netns exec`), and deletes it afterwards, failing when processes are left in it.

use std::process::{Command, Stdio};

pub use crate::common::netns::ip;

/// Set in the environment of the run inside the namespace.
pub const INSIDE: &str = "WOOL_E2E_INSIDE";
/// The veth address the metrics adapter serves on (empty: no namespace).
pub const AGGREGATION_IP: &str = "WOOL_E2E_AGG_IP";

/// Whether this process is the run inside the namespace (or the host run that follows a
/// namespace that could not be made).
pub fn inside() -> bool {
    std::env::var_os(INSIDE).is_some()
}

/// Whether the run has its own namespace (and so the HPA parts can run).
pub fn available() -> bool {
    std::env::var(AGGREGATION_IP).is_ok_and(|ip| !ip.is_empty())
}

fn say(text: &str) {
    eprintln!("{}  e2e  {text}", crate::clock());
}

/// A namespace made for this run; deleted on drop, with its resolv.conf.
struct Namespace {
    name: String,
}

impl Namespace {
    /// Makes it with its loopback up and a veth pair addressed `10.250.SUB.1-2/30`, both ends
    /// inside it; DNS inside goes to its own loopback (`ip netns exec` bind-mounts
    /// /etc/netns/NAME/resolv.conf). The adapter's address, or why it cannot be made.
    fn make() -> Result<(Self, String), String> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root".into());
        }
        let pid = std::process::id();
        let name = format!("wool-e2e-{pid}");
        ip(&["netns", "add", &name])?;
        let namespace = Namespace { name };
        let etc = format!("/etc/netns/{}", namespace.name);
        std::fs::create_dir_all(&etc)
            .and_then(|_| std::fs::write(format!("{etc}/resolv.conf"), "nameserver 127.0.0.1\n"))
            .map_err(|e| format!("{etc}/resolv.conf: {e}"))?;
        let sub = pid % 250;
        let n = namespace.name.as_str();
        ip(&["-n", n, "link", "set", "lo", "up"])?;
        ip(&[
            "-n", n, "link", "add", "e2e-host", "type", "veth", "peer", "name", "e2e-agg",
        ])?;
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("10.250.{sub}.1/30"),
            "dev",
            "e2e-host",
        ])?;
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("10.250.{sub}.2/30"),
            "dev",
            "e2e-agg",
        ])?;
        ip(&["-n", n, "link", "set", "e2e-host", "up"])?;
        ip(&["-n", n, "link", "set", "e2e-agg", "up"])?;
        say(&format!(
            "network namespace {n}: loopback, and 10.250.{sub}.1-2 on a veth pair inside it"
        ));
        Ok((namespace, format!("10.250.{sub}.2")))
    }

    /// The processes still in it.
    fn pids(&self) -> Vec<i32> {
        Command::new("ip")
            .args(["netns", "pids", &self.name])
            .stdin(Stdio::null())
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
        let _ = std::fs::remove_dir_all(format!("/etc/netns/{}", self.name));
    }
}

/// Runs this program again with the same arguments: inside a namespace of its own when one can
/// be made (root, `ip`), else on the host's loopback (the HPA parts then cannot run). Returns
/// the exit code to exit with: the inner run's, or 1 when processes were left in the namespace.
pub fn run_inside() -> i32 {
    let exe = std::env::current_exe().expect("the test's own path");
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (namespace, command) = match Namespace::make() {
        Ok((namespace, aggregation_ip)) => {
            let mut command = Command::new("ip");
            command
                .args(["netns", "exec", &namespace.name])
                .arg(&exe)
                .env(AGGREGATION_IP, aggregation_ip);
            (Some(namespace), command)
        }
        Err(why) => {
            say(&format!(
                "no network namespace ({why}; it needs root and iproute2): running on the host's \
                 loopback; the cases that need the HPA parts are not run"
            ));
            let mut command = Command::new(&exe);
            command.env(AGGREGATION_IP, "");
            (None, command)
        }
    };
    let mut command = command;
    command.args(&args).env(INSIDE, "1");
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            say(&format!("cannot run the suite: {e}"));
            return 1;
        }
    };
    forward_signals(child.id() as i32);
    let mut code = child.wait().map(|s| s.code().unwrap_or(1)).unwrap_or(1);
    if let Some(namespace) = namespace {
        let left = namespace.pids();
        if !left.is_empty() {
            say(&format!("FAIL: processes left in the namespace: {left:?}"));
            for pid in left {
                // SAFETY: killing a process left in the namespace this run made.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            code = 1;
        }
    }
    code
}

/// SIGINT and SIGTERM to this process become SIGTERM to the inner run (which stops everything
/// it started); this process keeps waiting for it, then deletes the namespace.
fn forward_signals(inner: i32) {
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime for the signals");
        runtime.block_on(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let mut interrupt = signal(SignalKind::interrupt()).expect("SIGINT handler");
            let mut terminate = signal(SignalKind::terminate()).expect("SIGTERM handler");
            loop {
                tokio::select! {
                    _ = interrupt.recv() => {}
                    _ = terminate.recv() => {}
                }
                // SAFETY: signalling our own child.
                unsafe { libc::kill(inner, libc::SIGTERM) };
            }
        });
    });
}
