//! Dialing a worker: connecting, the TLS handshake and the wait for the worker's first bytes,
//! the HTTP/2 handshake with this client's limits, spawning the connection task, and the wait
//! for the worker's HTTP/2 SETTINGS — all of it within the connect timeout.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio_rustls::TlsConnector;

use super::config::ChannelConfig;
use super::connection::{drive, Connection, ConnectionState, Driven, Open};
use super::failure::{io_failure, tls_handshake_failure, tls_rejection};
use super::keepalive::keepalive_task;
use crate::connection::error::{Cause, TransportFailure};
use crate::connection::transport::{FirstBytes, LastHeard, Socket, TlsSocket};

/// h2's budget for the framing overhead of small DATA frames received on a connection. h2
/// (0.4.20) charges it for a frame that arrives on a stream this client already reset — the
/// answer to a call that timed out locally or was cancelled — and never gives it back, so with
/// its default (25,600) about a hundred late answers made h2 close a healthy connection with
/// GOAWAY `ENHANCE_YOUR_CALM` "too_many_data_frames", failing every call on it as a protocol
/// failure. This budget puts that off past hundreds of thousands of late answers on one
/// connection; the memory it guards stays bounded by the connection's flow-control window. (A
/// flood h2 does catch, e.g. endless CONTINUATION frames, stays a protocol failure: the worker
/// misbehaves.)
const DATA_FRAME_BUDGET: usize = 64 * 1024 * 1024;

/// The largest header block (response head or trailers, decoded) accepted from a worker:
/// 16 KiB, gRPC core's hard metadata limit (`grpc.absolute_max_metadata_size`), which Wool's
/// own client (grpcio) applies. h2's default is 16 MiB a connection, so a hostile endpoint could
/// make each connection of a sweep hold that much before it was refused; a larger block now
/// fails the call at 16 KiB as a protocol failure.
const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// How long a new TLS connection waits for the worker's first bytes (see
/// [`TlsSocket::read_ahead`]) before HTTP/2 starts anyway. Workers send their SETTINGS at once;
/// the bound is for one that would wait for the client's preface first.
const SERVER_PREFACE_WAIT: Duration = Duration::from_millis(250);

/// How far a dial got, for the connect timeout's message.
const CONNECTING: u8 = 0;
const TLS_HANDSHAKE: u8 = 1;
const HTTP2: u8 = 2;

/// Dials the target, does the TLS and HTTP/2 handshakes, spawns the connection task (with the
/// keepalive, when configured; `interval_ms` is the channel's interval in force) and waits for
/// the worker's first HTTP/2 bytes (its SETTINGS).
///
/// The connect timeout, when set, bounds all of it: a worker that accepts the TCP connection
/// and then says nothing (frozen, or not an HTTP/2 server at all) fails the dial at the
/// timeout as [`Cause::Unreachable`], the message saying how far the dial got.
pub(super) async fn dial(
    config: &ChannelConfig,
    interval_ms: Arc<AtomicU64>,
) -> Result<Open, TransportFailure> {
    let target = config.target.to_string();
    let deadline = config
        .connect_timeout
        .and_then(|limit| tokio::time::Instant::now().checked_add(limit));
    let stage = AtomicU8::new(CONNECTING);
    let limit = config.connect_timeout.unwrap_or_default();
    let peer_spoke_tls = Arc::new(AtomicBool::new(false));
    let tls_failure = Arc::new(OnceLock::new());
    let heard = Arc::new(LastHeard::new());
    let connect = async {
        let socket = Socket::connect(config.target.clone())
            .await
            .map_err(|e| io_failure(&target, "connecting", &e))?;
        let builder = {
            let mut builder = h2::client::Builder::new();
            builder
                .initial_max_send_streams(config.max_concurrent_streams)
                .max_header_list_size(MAX_HEADER_LIST_BYTES)
                .data_frame_budget(DATA_FRAME_BUDGET);
            builder
        };
        let fd = socket.as_raw_fd();
        match &config.tls {
            None => {
                stage.store(HTTP2, Ordering::Relaxed);
                let socket = socket.sniffing_for_tls(Arc::clone(&peer_spoke_tls));
                handshake(builder, socket, fd, &heard, &target, None).await
            }
            Some((tls, name)) => {
                stage.store(TLS_HANDSHAKE, Ordering::Relaxed);
                let socket = TlsConnector::from(Arc::clone(tls))
                    .connect(name.clone(), socket)
                    .await
                    .map_err(|e| tls_handshake_failure(&target, &e))?;
                if socket.get_ref().1.alpn_protocol() != Some(b"h2") {
                    return Err(TransportFailure::new(
                        Cause::Tls,
                        format!(
                            "TLS handshake with {target}: the worker did not agree to HTTP/2 \
                             (ALPN h2)"
                        ),
                    ));
                }
                stage.store(HTTP2, Ordering::Relaxed);
                let mut socket = TlsSocket::new(socket, Arc::clone(&tls_failure));
                match tokio::time::timeout(SERVER_PREFACE_WAIT, socket.read_ahead()).await {
                    Ok(Err(error)) => {
                        return Err(match tls_failure.get() {
                            Some(reason) => tls_rejection(&target, reason),
                            None => io_failure(&target, "connection", &error),
                        })
                    }
                    Ok(Ok(0)) => {
                        return Err(TransportFailure::new(
                            Cause::Unreachable,
                            format!(
                                "the worker at {target} closed the connection right after the \
                                 TLS handshake"
                            ),
                        ))
                    }
                    // Its first bytes came, or the wait ran out (a worker that speaks only
                    // after the client's preface): HTTP/2 takes over.
                    Ok(Ok(_)) | Err(_) => {}
                }
                handshake(builder, socket, fd, &heard, &target, Some(&tls_failure)).await
            }
        }
    };
    let Handshaken {
        send,
        fd,
        connection,
        spoke,
        ping_pong,
    } = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, connect)
            .await
            .map_err(|_| connect_timeout(&target, limit, stage.load(Ordering::Relaxed)))??,
        None => connect.await?,
    };
    let state = Arc::new(ConnectionState {
        target,
        ended: AtomicBool::new(false),
        keepalive_expired: AtomicBool::new(false),
        peer_spoke_tls,
        tls_failure,
        calls: AtomicUsize::new(0),
        pings_without_data: AtomicU32::new(0),
        keepalive: config.keepalive,
        keepalive_task: OnceLock::new(),
        driven: Mutex::new(Driven::new(connection)),
    });
    let mut task = tokio::spawn(drive(Arc::clone(&state), Arc::clone(&interval_ms)));
    // The connection is set up once the worker has spoken: its first frame is its SETTINGS
    // (h2 checks that it is). A connection that ends first is handed on as it is: the call's
    // first step on it fails with the reason the connection task met (a TLS alert, a reset).
    let spoken = async {
        tokio::select! {
            () = spoke.notified() => {}
            _ = &mut task => {}
        }
    };
    let spoken = match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, spoken).await.is_ok(),
        None => {
            spoken.await;
            true
        }
    };
    if !spoken {
        task.abort();
        return Err(connect_timeout(&state.target, limit, HTTP2));
    }
    if let (Some(settings), Some(ping_pong)) = (config.keepalive, ping_pong) {
        let keepalive = tokio::spawn(keepalive_task(
            ping_pong,
            settings,
            Arc::clone(&state),
            interval_ms,
            task.abort_handle(),
        ));
        let _ = state.keepalive_task.set(keepalive.abort_handle());
        // The connection may have ended before the handle was there to abort.
        if state.ended.load(Ordering::Acquire) {
            keepalive.abort();
        }
    }
    Ok(Open {
        send,
        state,
        fd,
        heard,
        task: Arc::new(task.abort_handle()),
    })
}

/// The connect timeout's failure: the worker at `target` did not get through `stage` within
/// `limit`.
fn connect_timeout(target: &str, limit: Duration, stage: u8) -> TransportFailure {
    let limit = limit.as_secs_f64();
    TransportFailure::new(
        Cause::Unreachable,
        match stage {
            CONNECTING => format!("connecting to the worker at {target} took over {limit:.3} s"),
            TLS_HANDSHAKE => format!(
                "the worker at {target} accepted the connection but did not complete the TLS \
                 handshake within {limit:.3} s (the connect timeout)"
            ),
            _ => format!(
                "the worker at {target} accepted the connection but never spoke HTTP/2 (no \
                 SETTINGS within {limit:.3} s, the connect timeout)"
            ),
        },
    )
}

/// What the HTTP/2 handshake gives: the stream handle, the socket's descriptor, the connection
/// future, what says that the worker's first bytes came, and its PING handle.
struct Handshaken {
    send: SendRequest<Bytes>,
    fd: RawFd,
    connection: Connection,
    spoke: Arc<tokio::sync::Notify>,
    ping_pong: Option<h2::PingPong>,
}

async fn handshake<T>(
    builder: h2::client::Builder,
    io: T,
    fd: RawFd,
    heard: &Arc<LastHeard>,
    target: &str,
    tls_failure: Option<&OnceLock<String>>,
) -> Result<Handshaken, TransportFailure>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (io, spoke) = FirstBytes::new(io, Arc::clone(heard));
    let (send, mut connection) = builder.handshake::<_, Bytes>(io).await.map_err(|e| {
        match tls_failure.and_then(OnceLock::get) {
            Some(reason) => tls_rejection(target, reason),
            None => {
                TransportFailure::new(Cause::Unreachable, format!("HTTP/2 handshake failed: {e}"))
            }
        }
    })?;
    let ping_pong = connection.ping_pong();
    Ok(Handshaken {
        send,
        fd,
        connection: Box::pin(connection),
        spoke,
        ping_pong,
    })
}
