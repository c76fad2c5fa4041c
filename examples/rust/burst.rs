//! `burst`: gives a worker a short burst of work: a few `sleep` tasks dispatched at once.
//!
//! `cargo run --example burst -- ADDRESS [TASKS] [SECONDS]` (defaults: 3 tasks of 2 s)
//!
//! Prints a timestamped line (UTC, like `poll_then_retire`) when the tasks are dispatched and as
//! each one finishes, so its lines interleave with the C host's into one timeline. Exits 1 if
//! any task fails.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use libwool::WorkerConnection;

/// Wall-clock time of day, UTC, with milliseconds: `14:03:07.250`.
fn timestamp() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    let seconds = since_epoch.as_secs() % 86_400;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60,
        since_epoch.subsec_millis()
    )
}

fn say(text: &str) {
    println!("{}  burst   {text}", timestamp());
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let mut args = std::env::args().skip(1);
    let (Some(address), tasks, seconds) = (args.next(), args.next(), args.next()) else {
        eprintln!("usage: burst ADDRESS [TASKS] [SECONDS]");
        return std::process::ExitCode::from(2);
    };
    let tasks: usize = tasks
        .map_or(Ok(3), |t| t.parse())
        .expect("TASKS is a count");
    let seconds: f64 = seconds
        .map_or(Ok(2.0), |s| s.parse())
        .expect("SECONDS is a number");
    let worker = match WorkerConnection::new(&address) {
        Ok(worker) => Arc::new(worker),
        Err(error) => {
            eprintln!("burst: {error}");
            return std::process::ExitCode::FAILURE;
        }
    };

    say(&format!("dispatching {tasks} x sleep {seconds} s"));
    let running: Vec<_> = (1..=tasks)
        .map(|n| {
            let worker = Arc::clone(&worker);
            tokio::spawn(async move {
                let outcome = worker
                    .dispatch("sleep", seconds.to_string().into_bytes(), None)
                    .await;
                match &outcome {
                    Ok(_) => say(&format!("task {n}/{tasks} done")),
                    Err(error) => say(&format!("task {n}/{tasks} failed: {error}")),
                }
                outcome.is_ok()
            })
        })
        .collect();
    let mut all_done = true;
    for task in running {
        all_done &= task.await.unwrap_or(false);
    }
    if all_done {
        say("burst over: the worker has nothing in flight");
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
