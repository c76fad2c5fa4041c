//! The client against hostile workers: fake workers on real sockets (`common::hostile`) that
//! send garbage, huge or endless answers, broken trailers, GOAWAY mid-call, nothing at all, or
//! absurd TLS. Every call ends, within its deadline (plus a margin for a noisy machine), with a
//! defined error kind and a message that says what happened; none panics or hangs, and none
//! eats memory without bound. Each test prints what it observed (`--nocapture`).
//! Each test says what it arranges (Given), does (When) and expects (Then).

mod common;

use std::time::{Duration, Instant};

use common::hostile::{self, FakeWorker};
use libwool::connection::{ChannelOptions, ErrorKind, WorkerConnection, WorkerCredentials};
use libwool::Grace;
use tonic::Code;

/// The deadline every call here is given.
const DEADLINE: Duration = Duration::from_secs(2);
/// How far past its deadline a call may end on a noisy machine (not a timing assertion: a
/// call that hangs would take for ever).
const MARGIN: Duration = Duration::from_secs(3);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rpc {
    Idle,
    Stop,
}

/// Calls `rpc` with [`DEADLINE`] and requires it to fail within the deadline plus [`MARGIN`],
/// with a non-empty message; prints what it came to. The error.
async fn failure(what: &str, conn: &WorkerConnection, rpc: Rpc) -> libwool::Error {
    failure_within(what, conn, rpc, DEADLINE).await
}

/// As [`failure`], with `deadline`.
async fn failure_within(
    what: &str,
    conn: &WorkerConnection,
    rpc: Rpc,
    deadline: Duration,
) -> libwool::Error {
    let started = Instant::now();
    let result = match rpc {
        Rpc::Idle => conn.idle(Some(deadline)).await.map(|s| format!("{s} s")),
        Rpc::Stop => conn
            .stop(Grace::None, Some(deadline))
            .await
            .map(|()| "stopped".to_string()),
    };
    let took = started.elapsed();
    let error = match result {
        Ok(answer) => panic!("{what}: {rpc:?} succeeded ({answer}) against a hostile worker"),
        Err(error) => error,
    };
    println!(
        "{what}: {rpc:?} -> {} ({:?}) after {:.3} s: {}",
        error.kind(),
        error.code(),
        took.as_secs_f64(),
        error.message()
    );
    assert!(
        took <= deadline + MARGIN,
        "{what}: {rpc:?} took {took:?}, past its deadline of {deadline:?}"
    );
    assert!(
        !error.message().trim().is_empty(),
        "{what}: {rpc:?} failed with an empty message ({error:?})"
    );
    error
}

/// As [`failure`], and requires `kind` and `code`.
async fn expect(
    what: &str,
    conn: &WorkerConnection,
    rpc: Rpc,
    kind: ErrorKind,
    code: Code,
) -> libwool::Error {
    let error = failure(what, conn, rpc).await;
    assert_eq!(
        (error.kind(), error.code()),
        (kind, Some(code)),
        "{what}: {rpc:?}: {error}"
    );
    error
}

/// [`expect`] for an `idle` and then a `stop` call: their errors, in that order.
async fn expect_each(
    what: &str,
    conn: &WorkerConnection,
    kind: ErrorKind,
    code: Code,
) -> Vec<libwool::Error> {
    let mut errors = Vec::new();
    for rpc in [Rpc::Idle, Rpc::Stop] {
        errors.push(expect(what, conn, rpc, kind, code).await);
    }
    errors
}

fn plaintext(worker: &FakeWorker) -> WorkerConnection {
    WorkerConnection::new(&worker.address).unwrap()
}

fn with_options(worker: &FakeWorker, options: ChannelOptions) -> WorkerConnection {
    WorkerConnection::with_options(&worker.address, None, options).unwrap()
}

/// One-way TLS credentials trusting `ca_pem`.
fn one_way(ca_pem: &str) -> WorkerCredentials {
    WorkerCredentials::from_pem(ca_pem.as_bytes(), None, None, false, None).unwrap()
}

fn receiving_at_most(bytes: usize) -> ChannelOptions {
    let mut options = ChannelOptions::default();
    options.max_receive_message_bytes = bytes;
    options
}

// ---- 1. garbage instead of HTTP/2 -------------------------------------------------------------

/// Given a "worker" that answers a connection with an HTTP/1.1 error page, or with 4 KiB of
/// noise, instead of an HTTP/2 SETTINGS frame, when the client polls and stops it, then each
/// call fails at once (no waiting for the deadline) as an RPC error (INTERNAL: the peer broke
/// HTTP/2) whose message names HTTP/2 and the worker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_instead_of_a_preface_is_an_rpc_error_at_once() {
    let http1 = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
    for (what, bytes) in [
        ("an HTTP/1.1 answer", http1.to_vec()),
        ("noise", hostile::noise(4096, 7)),
    ] {
        let worker = hostile::writing_at_once(bytes).await;
        let conn = plaintext(&worker);
        for error in expect_each(what, &conn, ErrorKind::Rpc, Code::Internal).await {
            assert!(error.message().contains("HTTP/2"), "{error}");
            assert!(error.message().contains(&worker.address), "{error}");
        }
    }
}

/// Given a worker whose SETTINGS frame is valid but whose next frames are not (noise; a frame
/// longer than the client allows; DATA on stream 0; a SETTINGS with an initial window over
/// 2^31 − 1; ENABLE_PUSH 2), when the client polls and stops it, then each call fails at once
/// as an RPC error (INTERNAL) naming what HTTP/2 refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_valid_settings_then_garbage_frames_is_an_rpc_error_at_once() {
    let empty = hostile::settings(&[]);
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "noise",
            [empty.clone(), hostile::noise(64 * 1024, 11)].concat(),
        ),
        (
            "a 1 MiB frame",
            [
                empty.clone(),
                hostile::frame(hostile::DATA, 0, 1, &vec![0; 1 << 20]),
            ]
            .concat(),
        ),
        (
            "DATA on stream 0",
            [empty.clone(), hostile::frame(hostile::DATA, 0, 0, b"x")].concat(),
        ),
        (
            "an initial window over 2^31-1",
            hostile::settings(&[(0x4, 0x8000_0000)]),
        ),
        ("ENABLE_PUSH 2", hostile::settings(&[(0x2, 2)])),
    ];
    for (what, bytes) in cases {
        let worker = hostile::writing_at_once(bytes).await;
        let conn = plaintext(&worker);
        for error in expect_each(what, &conn, ErrorKind::Rpc, Code::Internal).await {
            assert!(error.message().contains("HTTP/2"), "{what}: {error}");
        }
    }
}

// ---- 2. a huge answer --------------------------------------------------------------------------

/// Given a worker (h2's server, honouring flow control) whose answer to idle announces a
/// 200 MiB message and then streams zeros, when the client polls it with a receive limit of
/// 1 KiB, and with the default 100 MiB (under which idle and stop still take at most 4 KiB,
/// their answers' bound), then the call fails as soon as the length prefix arrives:
/// TRANSIENT, RESOURCE_EXHAUSTED, the message giving the size and the limit applied; the
/// worker got to send no more than a flow-control window or so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_over_the_receive_limit_is_resource_exhausted_at_its_prefix() {
    const ANNOUNCED: u32 = 200 << 20;
    for (what, limit, applied) in [
        ("limit 1 KiB", 1 << 10, 1 << 10),
        ("default limit", 100 << 20, 4 << 10),
    ] {
        let worker = hostile::announcing_a_huge_message(ANNOUNCED, 8 << 20).await;
        let conn = with_options(&worker, receiving_at_most(limit));
        for error in expect_each(what, &conn, ErrorKind::Transient, Code::ResourceExhausted).await {
            assert!(
                error.message().contains(&ANNOUNCED.to_string())
                    && error.message().contains(&format!("({applied} bytes")),
                "{error}"
            );
        }
        let sent = worker.sent.load(std::sync::atomic::Ordering::Relaxed);
        println!("{what}: the worker streamed {sent} bytes of DATA before the client reset");
        assert!(
            sent < 4 << 20,
            "{what}: the client kept reading {sent} bytes"
        );
    }
}

/// Given a worker whose answer is a message of exactly the receive limit that is not protobuf,
/// and one over it by a byte, when the client polls — with a receive limit of 1 KiB, and with
/// the default options, where idle's answer bound of 4 KiB applies —, then the first is read
/// and fails to decode (RPC error, INTERNAL), the second is RESOURCE_EXHAUSTED (TRANSIENT).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_receive_limit_is_exact() {
    for (what, options, limit) in [
        ("limit 1 KiB", receiving_at_most(1 << 10), 1 << 10),
        ("idle's own bound", ChannelOptions::default(), 4 << 10),
    ] {
        let at = hostile::announcing_a_huge_message(limit as u32, limit as u64 + 5).await;
        let over = hostile::announcing_a_huge_message(limit as u32 + 1, limit as u64 + 6).await;
        let conn = with_options(&at, options.clone());
        expect(what, &conn, Rpc::Idle, ErrorKind::Rpc, Code::Internal).await;
        let conn = with_options(&over, options);
        expect(
            what,
            &conn,
            Rpc::Idle,
            ErrorKind::Transient,
            Code::ResourceExhausted,
        )
        .await;
    }
}

// ---- 3. no trailers ----------------------------------------------------------------------------

/// Given a worker that answers idle with HEADERS and a DATA frame holding a good reading, but
/// ends the stream on that DATA frame (no trailers, so no grpc-status), when the client polls
/// and stops it, then the call is an RPC error (UNKNOWN, as gRPC has it for a missing final
/// status) whose message says grpc-status is missing, not a reading.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_without_trailers_is_an_rpc_error() {
    let worker = hostile::answering(|stream| {
        [
            hostile::response_head(stream),
            hostile::frame(
                hostile::DATA,
                hostile::END_STREAM,
                stream,
                &hostile::grpc_message(&hostile::idle_message(3.5)),
            ),
        ]
        .concat()
    })
    .await;
    let conn = plaintext(&worker);
    for error in expect_each("no trailers", &conn, ErrorKind::Rpc, Code::Unknown).await {
        assert!(error.message().contains("grpc-status"), "{error}");
    }
}

/// Given a worker that answers with HEADERS only and ends the stream there, with no
/// grpc-status (an empty trailers-only answer), when the client polls, then likewise an RPC
/// error naming the missing status.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_ends_the_stream_without_a_status_is_an_rpc_error() {
    let worker = hostile::answering(|stream| {
        let block = hostile::header_block(true, &[("content-type", b"application/grpc")]);
        hostile::frame(
            hostile::HEADERS,
            hostile::END_HEADERS | hostile::END_STREAM,
            stream,
            &block,
        )
    })
    .await;
    let conn = plaintext(&worker);
    let error = failure("head only", &conn, Rpc::Idle).await;
    assert_eq!(error.kind(), ErrorKind::Rpc, "{error}");
}

// ---- 4. a header block that never ends ---------------------------------------------------------

/// Given a worker that answers with HEADERS without END_HEADERS and then CONTINUATION frames
/// without end — full of header fields the client must decode, or empty — when the client
/// polls, then h2's limit on CONTINUATION frames (about 1,280 of 16 KiB) ends the call as an
/// RPC error (INTERNAL) naming the flood — or, for the full frames on a slow machine (a debug
/// build decodes the 16 MiB for over a second), the deadline does (TRANSIENT) — and this
/// process grew by far less than the flood could make it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_header_block_is_cut_off_by_h2s_limit() {
    for (what, fragment) in [("16 KiB fragments", 16_000), ("empty fragments", 0)] {
        let worker = hostile::endless_header_block(fragment).await;
        let conn = plaintext(&worker);
        for rpc in [Rpc::Idle, Rpc::Stop] {
            let before = hostile::resident_bytes();
            let error = failure(what, &conn, rpc).await;
            let frames = worker.sent.swap(0, std::sync::atomic::Ordering::Relaxed);
            let grown = hostile::resident_bytes().saturating_sub(before);
            println!(
                "{what}: the worker wrote {frames} CONTINUATION frames ({} KiB) to the {rpc:?} \
                 call; RSS grew {} KiB",
                frames * fragment as u64 / 1024,
                grown / 1024
            );
            let kind = (error.kind(), error.code());
            let cut_off = kind == (ErrorKind::Rpc, Some(Code::Internal))
                && error.message().contains("too_many_continuations");
            let timed_out =
                fragment > 0 && kind == (ErrorKind::Transient, Some(Code::DeadlineExceeded));
            assert!(cut_off || timed_out, "{what}: {rpc:?}: {error}");
            assert!(grown < 256 << 20, "{what}: {rpc:?}: RSS grew {grown} bytes");
        }
    }
}

// ---- 5. GOAWAY mid-call ------------------------------------------------------------------------

/// Given a worker that, once the request has arrived, sends GOAWAY with a last stream id below
/// the call's stream (NO_ERROR, and PROTOCOL_ERROR), when the client polls and stops it, then
/// each call fails at once as TRANSIENT (UNAVAILABLE): the worker refused to process it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_below_the_stream_is_transient() {
    for (what, code) in [
        ("GOAWAY(0, NO_ERROR)", hostile::NO_ERROR),
        ("GOAWAY(0, PROTOCOL_ERROR)", hostile::PROTOCOL_ERROR),
    ] {
        let worker = hostile::answering(move |_| hostile::goaway(0, code, b"going away")).await;
        let conn = plaintext(&worker);
        expect_each(what, &conn, ErrorKind::Transient, Code::Unavailable).await;
    }
}

/// Given a worker that, once the request has arrived, sends GOAWAY(NO_ERROR) naming the call's
/// own stream as processed, and then closes the connection without answering, when the client
/// polls and stops it, then each call fails at once as TRANSIENT (UNAVAILABLE).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn goaway_then_close_without_an_answer_is_transient() {
    let worker =
        hostile::answering_then_closing(|stream| hostile::goaway(stream, hostile::NO_ERROR, b""))
            .await;
    let conn = plaintext(&worker);
    expect_each(
        "GOAWAY then close",
        &conn,
        ErrorKind::Transient,
        Code::Unavailable,
    )
    .await;
}

// ---- 6. silence --------------------------------------------------------------------------------

/// Given a worker that does its side of HTTP/2 (SETTINGS, the ack) and reads the request but
/// never answers, and one that accepts the TCP connection but never sends a byte, when the
/// client polls and stops each with a 2 s deadline, then each call ends at the deadline:
/// TRANSIENT, DEADLINE_EXCEEDED, "deadline exceeded".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_ends_at_the_deadline() {
    for (what, worker) in [
        ("never answers", hostile::never_answering().await),
        ("never speaks", hostile::mute().await),
    ] {
        let conn = plaintext(&worker);
        for error in expect_each(what, &conn, ErrorKind::Transient, Code::DeadlineExceeded).await {
            assert!(error.message().contains("deadline exceeded"), "{error}");
        }
    }
}

/// Given a worker that accepts TCP and never sends a byte, and a TLS connection to it with a
/// 0.5 s connect timeout, when the client polls with a 2 s deadline, then the connect timeout
/// ends it first: TRANSIENT (UNAVAILABLE), naming the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mute_tls_worker_runs_into_the_connect_timeout() {
    let pki = common::Pki::generate();
    let worker = hostile::mute().await;
    let mut options = ChannelOptions::default();
    options.connect_timeout = Some(Duration::from_millis(500));
    let conn = WorkerConnection::with_options(&worker.address, Some(one_way(&pki.ca_pem)), options)
        .unwrap();
    let error = expect(
        "mute TLS",
        &conn,
        Rpc::Idle,
        ErrorKind::Transient,
        Code::Unavailable,
    )
    .await;
    assert!(error.message().contains("0.500 s"), "{error}");
}

// ---- 7. absurd TLS -----------------------------------------------------------------------------

/// Given a TLS worker presenting a chain of 100 certificates (its leaf, then 99 intermediates
/// up to a CA the client trusts), when the client polls and stops it, then each call fails
/// within the deadline as a HANDSHAKE failure whose message is the certificate verifier's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_of_100_certificates_is_a_handshake_failure() {
    let (ca_pem, chain, key) = hostile::long_chain(99);
    assert_eq!(chain.len(), 100);
    let bytes: usize = chain.iter().map(|c| c.len()).sum();
    println!("100-certificate chain: {bytes} bytes of DER");
    let worker = hostile::tls(hostile::tls_config(chain, key)).await;
    let conn = WorkerConnection::with_credentials(&worker.address, Some(one_way(&ca_pem))).unwrap();
    for error in expect_each(
        "100-certificate chain",
        &conn,
        ErrorKind::Handshake,
        Code::Unavailable,
    )
    .await
    {
        assert!(error.message().contains("certificate"), "{error}");
    }
}

/// Given a TLS worker presenting its leaf (from a CA the client does not trust) followed by
/// 99 unrelated certificates that all carry the name of the leaf's issuer, each with its own
/// key (99 impostors for the verifier to try, a signature check each), when the client polls
/// with a 10 s deadline, then the verifier's own budget ends the call (in about 1.5 s in a
/// debug build, under 0.1 s optimised), well before the deadline: a HANDSHAKE failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leaf_with_99_impostor_issuers_is_a_handshake_failure() {
    let pki = common::Pki::generate();
    let mut chain = vec![hostile::pem_cert(&pki.other_leaf.cert_pem)];
    for _ in 0..99 {
        // The leaf's issuer is Pki's "unrelated-ca": the same name, another key.
        chain.push(common::new_ca("unrelated-ca").der().clone());
    }
    let worker = hostile::tls(hostile::tls_config(
        chain,
        hostile::pem_key(&pki.other_leaf.key_pem),
    ))
    .await;
    let conn =
        WorkerConnection::with_credentials(&worker.address, Some(one_way(&pki.ca_pem))).unwrap();
    let error = failure_within("99 impostors", &conn, Rpc::Idle, Duration::from_secs(10)).await;
    assert_eq!(
        (error.kind(), error.code()),
        (ErrorKind::Handshake, Some(Code::Unavailable)),
        "{error}"
    );
    assert!(error.message().contains("certificate"), "{error}");
}

/// Given a "TLS worker" that answers the ClientHello with a truncated ServerHello and closes,
/// one that sends a handshake record of garbage, and one that sends a truncated ServerHello
/// and then nothing, when the client polls each, then the first two fail at once as HANDSHAKE
/// failures (the worker closed the connection mid-handshake; rustls's corrupt message), the
/// last at the deadline (TRANSIENT, DEADLINE_EXCEEDED).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_or_garbage_server_hello_is_a_handshake_failure() {
    let pki = common::Pki::generate();
    // A handshake record announcing 0x30 bytes, of which a ServerHello header and 6 bytes come.
    let truncated = vec![
        0x16, 0x03, 0x03, 0x00, 0x30, 0x02, 0x00, 0x00, 0x2c, 0x03, 0x03, 1, 2, 3, 4,
    ];
    let garbage = [&[0x16, 0x03, 0x03, 0x00, 0x08][..], &[0xff; 8]].concat();
    for (what, bytes, close, kind, code) in [
        (
            "truncated ServerHello, then close",
            truncated.clone(),
            true,
            ErrorKind::Handshake,
            Code::Unavailable,
        ),
        (
            "garbage handshake record",
            garbage,
            false,
            ErrorKind::Handshake,
            Code::Unavailable,
        ),
        (
            "truncated ServerHello, then silence",
            truncated,
            false,
            ErrorKind::Transient,
            Code::DeadlineExceeded,
        ),
    ] {
        let worker = hostile::answering_client_hello(bytes, close).await;
        let conn = WorkerConnection::with_credentials(&worker.address, Some(one_way(&pki.ca_pem)))
            .unwrap();
        expect(what, &conn, Rpc::Idle, kind, code).await;
    }
}

// ---- 8. nonsense statuses ----------------------------------------------------------------------

/// Header fields, as a fake worker sends them.
type Fields = &'static [(&'static str, &'static [u8])];

/// `fields` as `name: "value", ...`, for messages.
fn shown(fields: Fields) -> String {
    let shown: Vec<String> = fields
        .iter()
        .map(|(name, value)| format!("{name}: \"{}\"", value.escape_ascii()))
        .collect();
    shown.join(", ")
}

/// An answer to a call: the head, a good idle reading, then trailers with `fields`.
fn answer_with_trailers(fields: Fields) -> impl Fn(u32) -> Vec<u8> + Send + Sync + 'static {
    move |stream| {
        [
            hostile::response_head(stream),
            hostile::frame(
                hostile::DATA,
                0,
                stream,
                &hostile::grpc_message(&hostile::idle_message(3.5)),
            ),
            hostile::trailers(stream, fields),
        ]
        .concat()
    }
}

/// Given workers whose trailers carry a grpc-status that is no number ("abc", "", "1.0"), or an
/// unknown code (99, 4294967296), with and without a grpc-message, when the client polls, then
/// each is an RPC error (UNKNOWN, as gRPC reads an unparseable status) and its message says
/// what the worker sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_status_that_is_no_code_is_an_rpc_error_saying_so() {
    static CASES: [Fields; 6] = [
        &[("grpc-status", b"abc")],
        &[("grpc-status", b"")],
        &[("grpc-status", b"1.0")],
        &[("grpc-status", b"99")],
        &[("grpc-status", b"4294967296")],
        &[
            ("grpc-status", b"99"),
            ("grpc-message", b"the worker is on fire"),
        ],
    ];
    for fields in CASES {
        let worker = hostile::answering(answer_with_trailers(fields)).await;
        let conn = plaintext(&worker);
        let (status, message) = (fields[0].1, fields.get(1).map(|f| f.1));
        let what = shown(fields);
        let error = expect(&what, &conn, Rpc::Idle, ErrorKind::Rpc, Code::Unknown).await;
        let said = format!("grpc-status \"{}\"", status.escape_ascii());
        assert!(error.message().contains(&said), "{error}");
        if let Some(message) = message {
            assert!(
                error
                    .message()
                    .contains(std::str::from_utf8(message).unwrap()),
                "{error}"
            );
        }
    }
}

/// Given workers whose trailers carry a real code (14 UNAVAILABLE, 13 INTERNAL) with a
/// grpc-message that is not valid percent-encoding ("%zz", "100%") or decodes to invalid UTF-8
/// ("%FF%FE"), when the client polls, then the worker's code stands (the gRPC spec: a bad
/// message must not throw the status away) and the message is shown as well as it can be.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grpc_message_with_bad_percent_encoding_keeps_the_workers_code() {
    static CASES: [(Fields, ErrorKind, Code); 4] = [
        (
            &[("grpc-status", b"14"), ("grpc-message", b"%zz busy")],
            ErrorKind::Transient,
            Code::Unavailable,
        ),
        (
            &[("grpc-status", b"14"), ("grpc-message", b"100% busy")],
            ErrorKind::Transient,
            Code::Unavailable,
        ),
        (
            &[("grpc-status", b"14"), ("grpc-message", b"busy %FF%FE")],
            ErrorKind::Transient,
            Code::Unavailable,
        ),
        (
            &[("grpc-status", b"13"), ("grpc-message", b"%C3%28 broken")],
            ErrorKind::Rpc,
            Code::Internal,
        ),
    ];
    for (fields, kind, code) in CASES {
        let worker = hostile::answering(answer_with_trailers(fields)).await;
        let conn = plaintext(&worker);
        let what = shown(fields);
        let error = expect(&what, &conn, Rpc::Idle, kind, code).await;
        assert!(
            error.message().contains("busy") || error.message().contains("broken"),
            "{error}"
        );
    }
}

/// Given a worker whose trailers carry grpc-status 14 and a grpc-status-details-bin that is not
/// base64, when the client polls, then the call is TRANSIENT (UNAVAILABLE) as the worker said:
/// the undecodable details are dropped, nothing panics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_details_that_are_not_base64_do_not_panic() {
    static CASES: [Fields; 2] = [
        &[
            ("grpc-status", b"14"),
            ("grpc-message", b"busy"),
            ("grpc-status-details-bin", b"!!not base64!!"),
        ],
        &[
            ("grpc-status", b"14"),
            ("grpc-status-details-bin", b"QUJD="),
        ],
    ];
    for fields in CASES {
        let worker = hostile::answering(answer_with_trailers(fields)).await;
        let conn = plaintext(&worker);
        let what = shown(fields);
        let outcome = tokio::spawn(async move { failure(&what, &conn, Rpc::Idle).await }).await;
        let error = outcome.expect("the call panicked");
        assert_eq!(
            (error.kind(), error.code()),
            (ErrorKind::Transient, Some(Code::Unavailable)),
            "{error}"
        );
    }
}

// ---- compression nobody asked for --------------------------------------------------------------

/// An answer whose head names `grpc-encoding: gzip`, with one idle reading whose compressed
/// flag is `flag`, and `grpc-status: 0`.
fn gzip_named(flag: u8) -> impl Fn(u32) -> Vec<u8> + Send + Sync + 'static {
    move |stream| {
        let block = hostile::header_block(
            true,
            &[
                ("content-type", b"application/grpc"),
                ("grpc-encoding", b"gzip"),
            ],
        );
        let mut message = hostile::grpc_message(&hostile::idle_message(3.5));
        message[0] = flag;
        [
            hostile::frame(hostile::HEADERS, hostile::END_HEADERS, stream, &block),
            hostile::frame(hostile::DATA, 0, stream, &message),
            hostile::trailers(stream, &[("grpc-status", b"0")]),
        ]
        .concat()
    }
}

/// Given a worker that names `grpc-encoding: gzip` (which this client never offers) and sends
/// its message compressed, when the client polls, then the call is an RPC error (INTERNAL)
/// naming the encoding — not IDLE_UNAVAILABLE, which would tell the caller the worker predates
/// idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_compressed_unasked_is_an_rpc_error_not_idle_unavailable() {
    let worker = hostile::answering(gzip_named(1)).await;
    let conn = plaintext(&worker);
    let error = expect(
        "gzip, compressed",
        &conn,
        Rpc::Idle,
        ErrorKind::Rpc,
        Code::Internal,
    )
    .await;
    assert!(error.message().contains("gzip"), "{error}");
}

/// Given a worker that names `grpc-encoding: gzip` but sends its message uncompressed (flag 0,
/// which gRPC allows under any encoding), and one whose trailers-only answer is UNAVAILABLE
/// under the same header, when the client polls each, then the first reading is taken and the
/// second is TRANSIENT, as the worker said.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_encoding_named_but_unused_does_not_fail_the_call() {
    let worker = hostile::answering(gzip_named(0)).await;
    let reading = plaintext(&worker).idle(Some(DEADLINE)).await;
    println!("gzip named, uncompressed: {reading:?}");
    assert_eq!(reading.unwrap(), 3.5);
    let worker = hostile::answering(|stream| {
        let block = hostile::header_block(
            true,
            &[
                ("content-type", b"application/grpc"),
                ("grpc-encoding", b"gzip"),
                ("grpc-status", b"14"),
                ("grpc-message", b"draining"),
            ],
        );
        hostile::frame(
            hostile::HEADERS,
            hostile::END_HEADERS | hostile::END_STREAM,
            stream,
            &block,
        )
    })
    .await;
    let conn = plaintext(&worker);
    expect(
        "gzip, trailers-only",
        &conn,
        Rpc::Idle,
        ErrorKind::Transient,
        Code::Unavailable,
    )
    .await;
}
