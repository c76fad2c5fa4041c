//! A Python interop peer (`tests/interop/*.py` under a pinned Wool venv) run as a child whose
//! stdout lines arrive on a channel: closing its stdin is how the scripts are told to finish.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `tests/interop/<script>`; SIGTERM, then SIGKILL, on drop if still running.
pub struct PythonPeer {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
    /// Every line read so far, in order.
    pub seen: Vec<String>,
}

impl PythonPeer {
    /// Starts `script` (a file of `tests/interop/`) with `args` under Wool `version`'s Python;
    /// its stderr goes to the test's.
    pub fn spawn(version: &str, script: &str, args: &[String]) -> Self {
        let mut child = Command::new(super::wool_python(version))
            .arg(super::repo().join("tests/interop").join(script))
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{script} starts: {e}"));
        let stdin = child.stdin.take();
        let out = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in out.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            stdin,
            lines,
            seen: Vec::new(),
        }
    }

    /// The next line within `limit`, or `None` (nothing came, or stdout closed).
    pub fn next_line(&mut self, limit: Duration) -> Option<String> {
        let line = self.lines.recv_timeout(limit).ok()?;
        self.seen.push(line.clone());
        Some(line)
    }

    /// Reads lines until one satisfies `want` (returned); panics after `limit` with the lines
    /// read meanwhile.
    pub fn wait_for(&mut self, limit: Duration, want: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + limit;
        let from = self.seen.len();
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.next_line(left) {
                Some(line) if want(&line) => return line,
                Some(_) => continue,
                None => break,
            }
        }
        let read = &self.seen[from..];
        panic!(
            "no awaited line within {limit:?}; {} lines read meanwhile, the last: {:?}",
            read.len(),
            &read[read.len().saturating_sub(5)..]
        );
    }

    /// Closes its stdin (the scripts' signal to finish) and reads the rest of its lines until
    /// stdout closes, for at most `limit`; its exit code.
    pub fn finish(&mut self, limit: Duration) -> Option<i32> {
        drop(self.stdin.take());
        let deadline = Instant::now() + limit;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            if self.next_line(left).is_none() {
                break;
            }
        }
        while Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for PythonPeer {
    fn drop(&mut self) {
        drop(self.stdin.take());
        super::terminate(&mut self.child, Duration::from_secs(10));
    }
}
