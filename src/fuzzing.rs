//! Entry points for the fuzz targets in `fuzz/` (feature `fuzzing`; not a public API): the
//! crate-private parts a fuzzer drives — the worker's Unix-socket `:authority` rewriter, its
//! dispatch handling, and its TLS material checks — each wrapped so that one call runs one
//! input to its end and checks the invariants that must hold whatever the input.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, ReadBuf};
use tokio_stream::StreamExt;
use tonic::codec::Codec;

use crate::protocol::worker_server::Worker as _;
use crate::protocol::{Request, Response};
use crate::worker::routine::RoutineRegistry;

/// One current-thread runtime for every input (made once: runtimes are costly to start).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a current-thread runtime")
    })
}

/// A reader that hands out `data` in pieces of the sizes `cuts` gives (cycled; 0 counts as 1),
/// as a socket would deliver it.
struct Pieces<'a> {
    data: &'a [u8],
    cuts: &'a [u8],
    next_cut: usize,
}

impl AsyncRead for Pieces<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let cut = match self.cuts {
            [] => usize::MAX,
            cuts => usize::from(cuts[self.next_cut % cuts.len()]).max(1),
        };
        self.next_cut += 1;
        let take = cut.min(self.data.len()).min(buf.remaining());
        buf.put_slice(&self.data[..take]);
        self.data = &self.data[take..];
        Poll::Ready(Ok(()))
    }
}

/// Runs `stream` (the bytes a client sends a worker on a Unix socket, delivered in pieces cut as
/// `cuts` says) through the `:authority` rewriter and returns what the worker's HTTP/2 server
/// would read. Panics if the rewriter fails to end, or makes more than it could from the input
/// (each rewritten header grows by a bounded amount).
pub fn rewrite_authority(stream: &[u8], cuts: &[u8]) -> Vec<u8> {
    let reader = Pieces {
        data: stream,
        cuts,
        next_cut: 0,
    };
    let mut lenient = crate::worker::authority::LenientAuthority::new(reader);
    let mut out = Vec::new();
    runtime()
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(5), lenient.read_to_end(&mut out)).await
        })
        .expect("the rewriter ends on a finite input")
        .ok();
    out
}

/// Routines for [`dispatch`]: `echo` and `fail`, which end at once whatever their input.
fn routines() -> RoutineRegistry {
    let mut routines = RoutineRegistry::default();
    routines.insert("echo", |args: Vec<u8>| async move { Ok(args) });
    routines.insert("fail", |args: Vec<u8>| async move {
        Err(String::from_utf8_lossy(&args).into_owned())
    });
    routines
}

/// What one fuzzed dispatch came to.
#[derive(Debug)]
pub struct DispatchOutcome {
    /// Whether the worker accepted the call (else it answered with a gRPC status).
    pub accepted: bool,
    /// Responses streamed back.
    pub responses: usize,
}

/// Feeds `body` (the request body of one `dispatch` call: gRPC length-prefixed frames, each a
/// `Request` message, as a client would send) to a fresh worker's dispatch handling and reads
/// the answer to its end. Panics if the answer does not end, or if the worker's in-flight set is
/// not empty once it has (the idle clock would then never run again).
pub fn dispatch(body: &[u8]) -> DispatchOutcome {
    let state = Arc::new(crate::worker::service::WorkerState::new(routines()));
    let service = crate::worker::service::WorkerService {
        state: Arc::clone(&state),
    };
    let body = tonic::body::Body::new(http_body_util::Full::new(Bytes::copy_from_slice(body)));
    let mut codec = tonic_prost::ProstCodec::<Response, Request>::default();
    let streaming = tonic::Streaming::new_request(
        codec.decoder(),
        body,
        None,
        Some(crate::protocol::MAX_MESSAGE_BYTES),
    );
    let outcome = runtime().block_on(async {
        let answer = service.dispatch(tonic::Request::new(streaming)).await;
        let mut outcome = DispatchOutcome {
            accepted: answer.is_ok(),
            responses: 0,
        };
        if let Ok(answer) = answer {
            let mut responses = answer.into_inner();
            let read_all = async {
                while responses.next().await.is_some() {
                    outcome.responses += 1;
                }
            };
            tokio::time::timeout(Duration::from_secs(5), read_all)
                .await
                .expect("the dispatch answer ends on a finite request");
        }
        // The task that ran the routine ends after its last answer; give it its turns.
        for _ in 0..1000 {
            if state.tracker.in_flight() == 0 {
                break;
            }
            tokio::task::yield_now().await;
        }
        outcome
    });
    assert_eq!(
        state.tracker.in_flight(),
        0,
        "a finished dispatch left the in-flight set non-empty"
    );
    outcome
}

/// Checks worker TLS material as the worker does at start-up and on reload; whether it would
/// serve it. `client_ca` `None` means one-way TLS.
pub fn server_credentials(cert: &[u8], key: &[u8], client_ca: Option<&[u8]>) -> bool {
    let credentials = match client_ca {
        Some(ca) => crate::worker::ServerCredentials::mutual(ca, cert, key),
        None => crate::worker::ServerCredentials::one_way(cert, key),
    };
    credentials.check().is_ok()
}

/// What one fuzzed `scalerMetadata` map read as.
#[derive(Debug, PartialEq, Eq)]
pub enum MetadataOutcome {
    /// A fleet spec, within every documented bound.
    Spec,
    /// `INVALID_ARGUMENT`.
    Invalid,
}

/// Reads `pairs` as a ScaledObject's `scalerMetadata` (the last value of a repeated key wins,
/// as in the map gRPC decodes) the way `wool-scaler` reads every call's. Panics if the reading
/// fails with anything but `INVALID_ARGUMENT`, or if a spec it gives passes a documented bound
/// (targets, their sizes, names, paths, durations, `targetValue`), holds more text than the
/// input did, or makes the arithmetic a sweep does on it overflow.
pub fn scaler_metadata(pairs: &[(String, String)]) -> MetadataOutcome {
    use crate::scaler::metadata::{
        Source, TriggerSpec, MAX_IDLE_THRESHOLD, MAX_NAMESPACE_BYTES, MAX_PATH_BYTES,
        MAX_SELECTOR_BYTES, MAX_SERVER_NAME_BYTES, MAX_SWEEP_AGE, MAX_SWEEP_TIMEOUT, MAX_TARGETS,
        MAX_TARGET_BYTES,
    };
    let metadata: std::collections::HashMap<String, String> = pairs.iter().cloned().collect();
    let input_bytes: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    let spec = match TriggerSpec::from_metadata_in(&metadata, "fuzz") {
        Ok(spec) => spec,
        Err(error) => {
            assert_eq!(
                error.kind(),
                crate::ErrorKind::InvalidArgument,
                "a metadata map failed otherwise than INVALID_ARGUMENT: {error}"
            );
            return MetadataOutcome::Invalid;
        }
    };
    let mut held = 0;
    match &spec.source {
        Source::Targets(targets) => {
            assert!(!targets.is_empty() && targets.len() <= MAX_TARGETS);
            for target in targets {
                assert!(
                    target.len() <= MAX_TARGET_BYTES,
                    "a target of {} bytes",
                    target.len()
                );
                held += target.len();
            }
        }
        Source::Namespace { name, .. } => {
            assert!(!name.is_empty() && name.len() <= MAX_NAMESPACE_BYTES);
            held += name.len();
        }
        Source::Dns { name, port } => {
            assert!(!name.is_empty() && name.len() <= 255 && *port != 0);
            held += name.len();
        }
        Source::Pods { selector, port, .. } => {
            assert!(!selector.is_empty() && selector.len() <= MAX_SELECTOR_BYTES && *port != 0);
            held += selector.len();
        }
    }
    if let Some(tls) = &spec.tls {
        let paths = std::iter::once(&tls.ca).chain(tls.client.iter().flat_map(|(c, k)| [c, k]));
        for path in paths {
            let len = path.as_os_str().len();
            assert!(
                len > 0 && len <= MAX_PATH_BYTES,
                "a TLS path of {len} bytes"
            );
            held += len;
        }
        if let Some(name) = &tls.server_name {
            assert!(name.len() <= MAX_SERVER_NAME_BYTES);
            held += name.len();
        }
    }
    assert!(
        held <= input_bytes,
        "the spec holds {held} bytes from {input_bytes}"
    );
    assert!(spec.idle_threshold <= MAX_IDLE_THRESHOLD);
    assert!(spec.max_sweep_age <= MAX_SWEEP_AGE);
    assert!(
        spec.sweep_timeout >= Duration::from_millis(100) && spec.sweep_timeout <= MAX_SWEEP_TIMEOUT
    );
    assert!((0.001..=1_000_000.0).contains(&spec.target_value));
    // The arithmetic a call and a sweep do with the spec's durations.
    let now = std::time::Instant::now();
    assert!(now.checked_add(spec.max_sweep_age).is_some());
    assert!(now.checked_add(spec.sweep_timeout * 2).is_some());
    assert!(spec.idle_threshold.as_secs_f64().is_finite());
    let _ = spec.group_key();
    MetadataOutcome::Spec
}
