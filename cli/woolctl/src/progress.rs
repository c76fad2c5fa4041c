//! The progress line a long run shows on a terminal's stderr: `sweeping: 3/10 answered` (a
//! sweep, `idle`) or `stopping: 0/1 answered` (`stop`), from a second in, every 200 ms, erased
//! when the run ends. Nothing when stderr is not a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A running progress line; [`Progress::done`] counts the answers, [`Progress::finish`] erases it.
pub struct Progress {
    done: Arc<AtomicUsize>,
    line: Option<tokio::task::JoinHandle<()>>,
}

impl Progress {
    /// Starts the line `{doing}: N/{total} answered` (shown only on a terminal, once a second
    /// has passed).
    pub fn start(doing: &'static str, total: usize) -> Self {
        let done = Arc::new(AtomicUsize::new(0));
        let line = std::io::stderr().is_terminal().then(|| {
            let done = Arc::clone(&done);
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(1)).await;
                loop {
                    eprint!(
                        "\r{doing}: {}/{total} answered",
                        done.load(Ordering::Relaxed)
                    );
                    let _ = std::io::stderr().flush();
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            })
        });
        Self { done, line }
    }

    /// Counts one answer (or failure).
    pub fn answered(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }

    /// Stops the line and erases it.
    pub fn finish(self) {
        if let Some(line) = self.line {
            line.abort();
            eprint!("\r\x1b[K");
        }
    }
}
