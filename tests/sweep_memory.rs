//! What a sweep holds while the endpoints it polls are hostile: endpoints named by targets, DNS
//! or a discovery record are peers' inputs, and an idle answer is one double. This file has one
//! test, so that the process's peak resident set (`VmHWM`) is the sweep's alone.

mod common;

use std::time::Duration;

use common::hostile;
use libwool::connection::{ErrorKind, WorkerConnection};
use libwool::fleet::{sweep, SweepOptions};

/// Megabytes each hostile endpoint answers with.
const ANSWER_MIB: u32 = 50;

/// This process's peak resident set since the last reset, in bytes (`VmHWM`).
fn peak_resident_bytes() -> u64 {
    hostile::memory_bytes("self", "VmHWM")
}

/// Resets the peak resident set to the current one (Linux: `5` to `/proc/self/clear_refs`).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").expect("resetting VmHWM");
}

/// Given four endpoints that answer `idle` with a 50 MiB message (streamed honouring flow
/// control), four that answer with a header block that never ends (16 KiB CONTINUATION frames
/// of header fields) and one correct worker, when one sweep polls all nine, then the correct
/// worker's idle time comes back, every hostile poll fails (a message over the answer's limit is
/// transient, a flood of headers a protocol failure or the deadline) and the sweep's peak
/// resident set grows by a few MiB at most, not by the hundreds of MiB the answers carry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sweep_of_hostile_endpoints_holds_a_few_kib_per_poll() {
    let mut endpoints = Vec::new();
    for _ in 0..4 {
        endpoints.push(
            hostile::announcing_a_huge_message(ANSWER_MIB << 20, u64::from(ANSWER_MIB) << 20).await,
        );
    }
    for _ in 0..4 {
        endpoints.push(hostile::endless_header_block(16_000).await);
    }
    let good = hostile::answering(|stream| hostile::good_idle_answer(stream, 7.5)).await;
    let mut connections: Vec<WorkerConnection> = endpoints
        .iter()
        .map(|e| WorkerConnection::new(&e.address).unwrap())
        .collect();
    connections.push(WorkerConnection::new(&good.address).unwrap());
    let mut options = SweepOptions::default();
    options.timeout = Some(Duration::from_secs(10));
    // A first sweep of the correct worker alone warms the runtime and the allocator.
    let warm = sweep(&connections[8..], &options).await.unwrap();
    assert_eq!(warm[0].as_ref().ok(), Some(&7.5));

    reset_peak();
    let before = peak_resident_bytes();
    let outcomes = sweep(&connections, &options).await.unwrap();
    let grown = peak_resident_bytes().saturating_sub(before);
    let sent: u64 = endpoints[..4]
        .iter()
        .map(|e| e.sent.load(std::sync::atomic::Ordering::Relaxed))
        .sum();
    println!(
        "peak RSS grew {} KiB over the sweep; the 50 MiB endpoints got {} KiB out before being \
         refused; outcomes: {outcomes:?}",
        grown / 1024,
        sent / 1024
    );
    assert_eq!(outcomes[8].as_ref().ok(), Some(&7.5), "{:?}", outcomes[8]);
    for (i, outcome) in outcomes[..4].iter().enumerate() {
        let error = outcome
            .as_ref()
            .expect_err("a 50 MiB idle answer is refused");
        assert_eq!(error.kind(), ErrorKind::Transient, "{i}: {error}");
        assert!(error.message().contains("receive limit"), "{i}: {error}");
    }
    for (i, outcome) in outcomes[4..8].iter().enumerate() {
        let error = outcome.as_ref().expect_err("an endless header block fails");
        assert!(
            matches!(error.kind(), ErrorKind::Rpc | ErrorKind::Transient),
            "{i}: {error}"
        );
    }
    assert!(
        grown < 16 << 20,
        "the sweep's peak resident set grew {} MiB",
        grown >> 20
    );
}
