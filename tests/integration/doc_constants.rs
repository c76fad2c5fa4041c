//! The numbers the docs restate from the code (deadlines, caps, sizes) are the code's.
//!
//! Each claim is a phrase of a doc built from a public constant of the library, formatted as
//! the docs write numbers (`1,024`, `3 s`, `100 ms`, `16 KiB`): a changed constant makes the
//! phrase one the doc does not hold, and a changed doc loses the phrase, so either fails here
//! until the other follows. Phrases are matched with runs of whitespace (line breaks in
//! wrapped paragraphs) read as one space.

use std::path::Path;
use std::time::Duration;

use libwool::connection::UNUSED_CHANNEL_TTL;
use libwool::fleet::discovery::{
    DEFAULT_DNS_TIMEOUT, DEFAULT_LISTEN, MAX_DNS_ADDRESSES, MAX_REGISTRY_SLOTS,
};
use libwool::scaler::POLLS_PER_SECOND_PER_FLEET;
use libwool::server::{
    ACCEPT_ERROR_PAUSE, DEFAULT_KEEPALIVE, DEFAULT_MAX_CONNECTIONS, FIRST_BYTES_TIMEOUT,
    HANDSHAKE_TIMEOUT, HEADER_READ_TIMEOUT, MAX_HEADER_LIST_BYTES, MAX_LOCAL_ERROR_RESETS,
    MAX_METRICS_CONNECTIONS, OPENING_AT_ONCE, OPENING_PER_PEER, PREFACE_TIMEOUT,
    SIDE_PORT_MAX_CONNECTIONS,
};
use libwool::worker::{MAX_CONCURRENT_STREAMS, MAX_MESSAGE_BYTES};
use wool::WOOL_IDLE_START_BATCH_MAX;

/// A count as the docs write it: thousands separated by commas (`1,024`, `10,000`).
fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(digit);
    }
    out
}

/// A duration as the docs write it: `100 ms` under a second, else seconds (`3 s`, `1.5 s`).
fn duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{} s", d.as_secs_f64())
    }
}

/// A size as the docs write it: whole KiB or MiB (`16 KiB`, `100 MiB`).
fn size(bytes: usize) -> String {
    const KIB: usize = 1024;
    const MIB: usize = 1024 * KIB;
    if bytes.is_multiple_of(MIB) {
        format!("{} MiB", bytes / MIB)
    } else {
        assert!(bytes.is_multiple_of(KIB), "{bytes} bytes: not a whole KiB");
        format!("{} KiB", bytes / KIB)
    }
}

/// Usize from a `u32` constant.
fn wide(n: u32) -> usize {
    usize::try_from(n).expect("usize holds u32")
}

/// A phrase of `doc` (relative to the repository), and the constants it restates.
struct Claim {
    doc: &'static str,
    phrase: String,
    constants: &'static str,
}

fn claim(doc: &'static str, constants: &'static str, phrase: String) -> Claim {
    Claim {
        doc,
        phrase,
        constants,
    }
}

fn claims() -> Vec<Claim> {
    let security = "SECURITY.md";
    let architecture = "docs/architecture.md";
    let c_api = "docs/C-API.md";
    vec![
        // The servers' accept loop (libwool::server).
        claim(
            security,
            "FIRST_BYTES_TIMEOUT, HANDSHAKE_TIMEOUT",
            format!(
                "a TLS ClientHello must start within **{}** and the handshake end within **{}**",
                duration(FIRST_BYTES_TIMEOUT),
                duration(HANDSHAKE_TIMEOUT)
            ),
        ),
        claim(
            security,
            "PREFACE_TIMEOUT",
            format!(
                "must send the HTTP/2 client preface within **{}**",
                duration(PREFACE_TIMEOUT)
            ),
        ),
        claim(
            security,
            "OPENING_PER_PEER, OPENING_AT_ONCE, DEFAULT_MAX_CONNECTIONS",
            format!(
                "at most **{}** connections still opening (handshake or preface) per peer \
                 address (an IPv6 peer by its /64), **{}** in all, and at most **{}** connections",
                count(OPENING_PER_PEER),
                count(OPENING_AT_ONCE),
                count(DEFAULT_MAX_CONNECTIONS)
            ),
        ),
        claim(
            security,
            "DEFAULT_MAX_CONNECTIONS",
            format!(
                "when all {} are established, a new one is closed at once",
                count(DEFAULT_MAX_CONNECTIONS)
            ),
        ),
        claim(
            security,
            "ACCEPT_ERROR_PAUSE",
            format!("the loop pauses {}", duration(ACCEPT_ERROR_PAUSE)),
        ),
        claim(
            security,
            "MAX_HEADER_LIST_BYTES, MAX_LOCAL_ERROR_RESETS, DEFAULT_KEEPALIVE",
            format!(
                "header lists of at most {}, at most {} streams a connection resets for the \
                 peer's errors, keepalive PINGs every {}",
                size(wide(MAX_HEADER_LIST_BYTES)),
                count(MAX_LOCAL_ERROR_RESETS),
                duration(DEFAULT_KEEPALIVE)
            ),
        ),
        claim(
            security,
            "HEADER_READ_TIMEOUT, MAX_METRICS_CONNECTIONS, SIDE_PORT_MAX_CONNECTIONS",
            format!(
                "the metrics endpoints read a request's header within **{}** and hold at most \
                 **{}** connections; the health side ports accept as above with a cap of {}",
                duration(HEADER_READ_TIMEOUT),
                count(MAX_METRICS_CONNECTIONS),
                count(SIDE_PORT_MAX_CONNECTIONS)
            ),
        ),
        claim(
            architecture,
            "FIRST_BYTES_TIMEOUT, HANDSHAKE_TIMEOUT",
            format!(
                "a ClientHello started within {}, the TLS handshake within {}",
                duration(FIRST_BYTES_TIMEOUT),
                duration(HANDSHAKE_TIMEOUT)
            ),
        ),
        claim(
            architecture,
            "PREFACE_TIMEOUT",
            format!(
                "the client preface and its {} deadline",
                duration(PREFACE_TIMEOUT)
            ),
        ),
        claim(
            architecture,
            "DEFAULT_MAX_CONNECTIONS, SIDE_PORT_MAX_CONNECTIONS, OPENING_PER_PEER, OPENING_AT_ONCE",
            format!(
                "a connection cap ({} or the descriptor limit less 256; {} on a side port), at \
                 most {} opening per peer address (an IPv6 peer by its /64) and {} in all",
                count(DEFAULT_MAX_CONNECTIONS),
                count(SIDE_PORT_MAX_CONNECTIONS),
                count(OPENING_PER_PEER),
                count(OPENING_AT_ONCE)
            ),
        ),
        claim(
            architecture,
            "ACCEPT_ERROR_PAUSE",
            format!(
                "a {} pause after accept errors",
                duration(ACCEPT_ERROR_PAUSE)
            ),
        ),
        claim(
            architecture,
            "MAX_HEADER_LIST_BYTES",
            format!(
                "(`bounded_server`: {} header lists",
                size(wide(MAX_HEADER_LIST_BYTES))
            ),
        ),
        claim(
            architecture,
            "HEADER_READ_TIMEOUT, MAX_METRICS_CONNECTIONS",
            format!(
                "a {} header-read timeout, at most {} connections",
                duration(HEADER_READ_TIMEOUT),
                count(MAX_METRICS_CONNECTIONS)
            ),
        ),
        // The worker.
        claim(
            security,
            "MAX_MESSAGE_BYTES",
            format!(
                "messages up to its receive limit ({}, Wool's)",
                size(MAX_MESSAGE_BYTES)
            ),
        ),
        claim(
            "docs/worker.md",
            "DEFAULT_KEEPALIVE",
            format!(
                "It PINGs each caller every {} (`--keepalive-interval`, 0 = off) and drops one \
                 that does not answer within {}",
                duration(DEFAULT_KEEPALIVE),
                duration(DEFAULT_KEEPALIVE)
            ),
        ),
        // The scaler.
        claim(
            security,
            "POLLS_PER_SECOND_PER_FLEET",
            format!(
                "a fleet sweeps at most {} workers a second",
                count(wide(POLLS_PER_SECOND_PER_FLEET))
            ),
        ),
        claim(
            "docs/kubernetes.md",
            "POLLS_PER_SECOND_PER_FLEET",
            format!(
                "A fleet sweeps at most {} workers a second",
                count(wide(POLLS_PER_SECOND_PER_FLEET))
            ),
        ),
        // The client and the fleet.
        claim(
            c_api,
            "MAX_MESSAGE_BYTES",
            format!(
                "| max receive message bytes | `max_receive_message_length` | {} |",
                size(MAX_MESSAGE_BYTES)
            ),
        ),
        claim(
            c_api,
            "WOOL_IDLE_START_BATCH_MAX",
            format!(
                "idle polls (at most `WOOL_IDLE_START_BATCH_MAX`, {})",
                count(WOOL_IDLE_START_BATCH_MAX)
            ),
        ),
        claim(
            c_api,
            "DEFAULT_LISTEN",
            format!("LAN window, 0 = {}", duration(DEFAULT_LISTEN)),
        ),
        claim(
            c_api,
            "DEFAULT_DNS_TIMEOUT, MAX_DNS_ADDRESSES",
            format!(
                "`timeout_seconds` (0 = {}). An answer with more than {} addresses fails",
                duration(DEFAULT_DNS_TIMEOUT),
                count(MAX_DNS_ADDRESSES)
            ),
        ),
        claim(
            c_api,
            "MAX_REGISTRY_SLOTS",
            format!("a scan reads at most {} slots", count(MAX_REGISTRY_SLOTS)),
        ),
        claim(
            security,
            "MAX_REGISTRY_SLOTS",
            format!(
                "A local registry scan reads at most {} slots",
                count(MAX_REGISTRY_SLOTS)
            ),
        ),
        claim(
            architecture,
            "UNUSED_CHANNEL_TTL",
            format!(
                "the per-process channel pool (ref-counted, {} TTL)",
                duration(UNUSED_CHANNEL_TTL)
            ),
        ),
        claim(
            "docs/client.md",
            "UNUSED_CHANNEL_TTL",
            format!(
                "{} after its last user (`UNUSED_CHANNEL_TTL`)",
                duration(UNUSED_CHANNEL_TTL)
            ),
        ),
        claim(
            architecture,
            "MAX_CONCURRENT_STREAMS",
            format!(
                "at most {} streams a connection, `MAX_CONCURRENT_STREAMS`",
                count(wide(MAX_CONCURRENT_STREAMS))
            ),
        ),
    ]
}

/// `text` with every run of whitespace made one space.
fn flattened(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_numbers_in_the_docs_are_the_codes_constants() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut wrong = Vec::new();
    for claim in claims() {
        let text = std::fs::read_to_string(root.join(claim.doc))
            .unwrap_or_else(|e| panic!("{}: {e}", claim.doc));
        if !flattened(&text).contains(&flattened(&claim.phrase)) {
            wrong.push(format!(
                "{}: no \"{}\" ({} as the code has it)",
                claim.doc, claim.phrase, claim.constants
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "docs that do not say what the code does:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn numbers_are_written_as_the_docs_write_them() {
    assert_eq!(count(32), "32");
    assert_eq!(count(1024), "1,024");
    assert_eq!(count(10_000), "10,000");
    assert_eq!(count(1_328_477), "1,328,477");
    assert_eq!(duration(Duration::from_millis(100)), "100 ms");
    assert_eq!(duration(Duration::from_secs(3)), "3 s");
    assert_eq!(duration(Duration::from_millis(1500)), "1.5 s");
    assert_eq!(size(16 * 1024), "16 KiB");
    assert_eq!(size(100 * 1024 * 1024), "100 MiB");
}
