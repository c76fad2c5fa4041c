//! Every process the suite starts, each in a process group of its own, with its stdout and stderr
//! in `logs/NAME.out` and `logs/NAME.log`; stopped by group, the last started first, at the end
//! of the run whatever happened (also from the signal handler).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use std::os::unix::process::CommandExt;

use crate::common;

/// One started process: the leader of its own process group.
struct Started {
    name: String,
    child: Child,
}

/// The processes started so far, in order.
static STARTED: Mutex<Vec<Started>> = Mutex::new(Vec::new());
/// Where the logs go (`<temp dir>/logs`), set once by the engine.
static LOG_DIR: OnceLock<PathBuf> = OnceLock::new();

/// A started process: its name (unique in the run), pid (= its process group) and log files.
#[derive(Debug, Clone)]
pub struct Process {
    pub name: String,
    pub pid: i32,
    /// What it wrote to stdout.
    pub out: PathBuf,
    /// What it wrote to stderr.
    pub log: PathBuf,
}

/// Sets the folder of the logs; the first call wins.
pub fn set_log_dir(dir: &Path) {
    let _ = LOG_DIR.set(dir.to_path_buf());
}

fn log_dir() -> PathBuf {
    LOG_DIR.get().cloned().unwrap_or_else(std::env::temp_dir)
}

/// Starts `command` in a process group of its own, stdin from /dev/null, stdout and stderr to
/// `logs/NAME.out` and `logs/NAME.log` (NAME made unique with a number when taken).
pub fn start(name: &str, command: &mut Command) -> Result<Process, String> {
    let mut started = STARTED.lock().unwrap();
    let taken: HashSet<&str> = started.iter().map(|s| s.name.as_str()).collect();
    let unique = (1..)
        .map(|n| {
            if n == 1 {
                name.to_owned()
            } else {
                format!("{name}-{n}")
            }
        })
        .find(|candidate| !taken.contains(candidate.as_str()))
        .expect("a free name");
    let dir = log_dir();
    let out = dir.join(format!("{unique}.out"));
    let log = dir.join(format!("{unique}.log"));
    let file =
        |path: &Path| std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()));
    let child = command
        .stdin(Stdio::null())
        .stdout(file(&out)?)
        .stderr(file(&log)?)
        .process_group(0)
        .spawn()
        .map_err(|e| format!("{unique}: cannot start {:?}: {e}", command.get_program()))?;
    let pid = child.id() as i32;
    started.push(Started {
        name: unique.clone(),
        child,
    });
    Ok(Process {
        name: unique,
        pid,
        out,
        log,
    })
}

/// The exit status of process `pid`, or `None` while it runs.
pub fn status(pid: i32) -> Option<ExitStatus> {
    let mut started = STARTED.lock().unwrap();
    let entry = started.iter_mut().find(|s| s.child.id() as i32 == pid)?;
    entry.child.try_wait().ok().flatten()
}

/// Whether process `pid` still runs.
pub fn running(pid: i32) -> bool {
    status(pid).is_none()
}

/// Sends `signal` to process `pid` alone (not its group).
pub fn signal(pid: i32, signal: i32) {
    // SAFETY: signalling a process this suite started.
    unsafe { libc::kill(pid, signal) };
}

/// Sends `signal` to the process group led by `pid`.
fn signal_group(pid: i32, signal: i32) {
    // SAFETY: signalling a process group this suite started.
    unsafe { libc::kill(-pid, signal) };
}

/// Waits up to `limit` for process `pid` to exit; whether it did.
pub fn wait_exit(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if !running(pid) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Stops one process: SIGTERM to its group, up to `grace` for it to exit, then SIGKILL to the
/// group (what it left behind too). Whether it exited within the grace.
pub fn stop(pid: i32, grace: Duration) -> bool {
    if !running(pid) {
        signal_group(pid, libc::SIGKILL);
        return true;
    }
    signal_group(pid, libc::SIGTERM);
    let exited = wait_exit(pid, grace);
    signal_group(pid, libc::SIGKILL);
    let mut started = STARTED.lock().unwrap();
    if let Some(entry) = started.iter_mut().find(|s| s.child.id() as i32 == pid) {
        let _ = entry.child.wait();
    }
    exited
}

/// Stops every process started, the last started first (clients before the API server, the API
/// server before etcd), each given 15 s after SIGTERM. The lines to report: one per process
/// that had to be killed.
pub fn stop_all() -> Vec<String> {
    let pids: Vec<(i32, String)> = STARTED
        .lock()
        .unwrap()
        .iter()
        .map(|s| (s.child.id() as i32, s.name.clone()))
        .collect();
    let mut report = Vec::new();
    for (pid, name) in pids.into_iter().rev() {
        if !stop(pid, Duration::from_secs(15)) {
            report.push(format!(
                "{name} (pid {pid}) still running 15 s after SIGTERM: SIGKILL"
            ));
        }
    }
    report
}

/// How many processes were started.
pub fn count() -> usize {
    STARTED.lock().unwrap().len()
}

/// The process groups started (their leaders' pids).
pub fn groups() -> Vec<i32> {
    STARTED
        .lock()
        .unwrap()
        .iter()
        .map(|s| s.child.id() as i32)
        .collect()
}

/// The log files, for the tails printed after a failed run.
pub fn log_files() -> Vec<PathBuf> {
    let Some(dir) = LOG_DIR.get() else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|dir| dir.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    files.retain(|p| p.extension().is_some_and(|e| e == "log"));
    files.sort();
    files
}

/// The inodes of the TCP sockets listening in this network namespace, with their ports.
fn listening_sockets() -> Vec<(u64, u16)> {
    common::tcp_sockets()
        .into_iter()
        .filter(|s| s.state == common::TCP_LISTEN)
        .map(|s| (s.inode, s.local_port))
        .collect()
}

/// The processes of this machine in one of `groups`, as (pid, process group).
fn members_of(groups: &HashSet<i32>) -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // after "(comm)": state, ppid, pgrp
            let pgrp: i32 = stat.rsplit_once(") ")?.1.split(' ').nth(2)?.parse().ok()?;
            groups.contains(&pgrp).then_some((pid, pgrp))
        })
        .collect()
}

/// What is still listening after the stop: in a network namespace of the suite's own, any
/// listening socket at all; on the host, sockets held by a process of a group the suite
/// started. One line each.
pub fn still_listening(own_namespace: bool) -> Vec<String> {
    let sockets = listening_sockets();
    if own_namespace {
        return sockets
            .iter()
            .map(|(inode, port)| format!("port {port} (socket inode {inode})"))
            .collect();
    }
    let groups: HashSet<i32> = groups().into_iter().collect();
    let mut lines = Vec::new();
    for (pid, pgrp) in members_of(&groups) {
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        for fd in fds.filter_map(|e| e.ok()) {
            let Ok(link) = std::fs::read_link(fd.path()) else {
                continue;
            };
            let link = link.to_string_lossy();
            let Some(inode) = link
                .strip_prefix("socket:[")
                .and_then(|s| s.strip_suffix(']'))
                .and_then(|s| s.parse::<u64>().ok())
            else {
                continue;
            };
            if let Some((_, port)) = sockets.iter().find(|(i, _)| *i == inode) {
                lines.push(format!("pid {pid} (group {pgrp}) on port {port}"));
            }
        }
    }
    lines
}

/// A TCP port on 127.0.0.1 with nothing listening on it (bound, then released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// Waits up to `limit` for the first line of `path` (a server's address on stdout).
pub fn first_line(path: &Path, limit: Duration) -> Option<String> {
    let deadline = Instant::now() + limit;
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            if let Some((line, _)) = text.split_once('\n') {
                return Some(line.trim().to_owned());
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Whether any line of the files holds every one of `parts`, in that order.
pub fn logged(files: &[&Path], parts: &[&str]) -> bool {
    first_logged(files, parts).is_some()
}

/// The first line of the files holding every one of `parts`, in that order.
pub fn first_logged(files: &[&Path], parts: &[&str]) -> Option<String> {
    files
        .iter()
        .filter_map(|f| std::fs::read_to_string(f).ok())
        .flat_map(|text| text.lines().map(str::to_owned).collect::<Vec<_>>())
        .find(|line| holds_in_order(line, parts))
}

/// Whether `line` holds each of `parts`, each after the one before.
pub fn holds_in_order(line: &str, parts: &[&str]) -> bool {
    let mut rest = line;
    for part in parts {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

/// The last `n` lines of `path`.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
