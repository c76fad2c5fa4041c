//! The HTTP/2 channel a [`WorkerConnection`](super::WorkerConnection) calls through: one lazily
//! established connection to one worker (plaintext or TLS), re-established after it breaks.
//!
//! Built directly on the `h2` crate rather than on tonic's transport `Channel` for speed: tonic's
//! channel hands every call to a buffer task and every request body to a task that first waits
//! for flow-control capacity, so a unary call leaves the client as two writes (HEADERS, then
//! DATA) and wakes the worker twice. Here a call queues its HEADERS and its DATA before the
//! connection task next runs, so each unary call is one write and one wake-up of the worker.
//! tonic still does the gRPC framing and status handling on top (`WorkerClient<Http2Channel>`).

use std::future::Future;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;

use super::error::{Cause, TransportFailure};
use super::transport::{Socket, TlsSocket};
use super::Target;

/// What to dial and how: the target, TLS (config and the name to verify), how many calls may
/// be opening streams at once, the connect timeout and keepalive.
#[derive(Clone)]
pub(crate) struct ChannelConfig {
    pub(crate) target: Target,
    pub(crate) tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    pub(crate) max_concurrent_streams: usize,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) keepalive: Option<Keepalive>,
    /// The largest gRPC message a response may carry, in bytes.
    pub(crate) max_receive_message_bytes: usize,
}

/// HTTP/2 keepalive, as gRPC's client does it (`grpc.keepalive_time_ms`,
/// `grpc.keepalive_timeout_ms`, `grpc.keepalive_permit_without_calls`,
/// `grpc.http2.max_pings_without_data`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    /// A PING goes out this long after the previous one was answered.
    pub(crate) interval: Duration,
    /// An unanswered PING ends the connection after this long: its calls fail as transient.
    pub(crate) timeout: Duration,
    /// Whether to ping while no call is open on the connection.
    pub(crate) without_calls: bool,
    /// Most PINGs sent with no call started in between (0 = no limit).
    pub(crate) max_pings_without_data: u32,
}

/// An open HTTP/2 connection: the handle to start streams on, what the connection task and the
/// calls know about it, and the task itself.
#[derive(Clone)]
struct Open {
    send: SendRequest<Bytes>,
    state: Arc<ConnectionState>,
    /// The socket's descriptor, for [`Open::peer_hung_up`].
    fd: RawFd,
    /// The connection task, to see whether it has finished (see [`Http2Channel::close`]).
    task: Arc<tokio::task::AbortHandle>,
}

/// What the connection task, the keepalive and the calls on one connection share.
struct ConnectionState {
    /// The target, for messages.
    target: String,
    /// The connection task has ended (the connection broke, or the worker or we closed it).
    ended: AtomicBool,
    /// The keepalive ended the connection: a PING went unanswered.
    keepalive_expired: AtomicBool,
    /// Set by the socket of a plaintext connection when the worker's first bytes are a TLS
    /// record: the worker expects TLS.
    peer_spoke_tls: Arc<AtomicBool>,
    /// For a TLS connection: the TLS failure its socket met after the handshake (the worker
    /// rejected this client's certificate), if any.
    tls_failure: Arc<OnceLock<String>>,
    /// Calls between starting their stream and dropping their response (counted only when
    /// keepalive waits for calls: `without_calls` false).
    calls: AtomicUsize,
    /// Keepalive PINGs sent since a call last started (gRPC's "pings without data").
    pings_without_data: AtomicU32,
    /// The keepalive settings in force, if any (what the timeout message reports).
    keepalive: Option<Keepalive>,
}

impl ConnectionState {
    /// The [`TransportFailure`] for an h2 error on this connection, sorted by the error's type.
    fn failure(&self, error: &h2::Error) -> TransportFailure {
        let target = &self.target;
        if self.keepalive_expired.load(Ordering::Acquire) {
            let timeout = self.keepalive.map(|k| k.timeout).unwrap_or_default();
            return TransportFailure::new(
                Cause::KeepaliveTimeout,
                format!(
                    "the worker at {target} stopped answering keepalive pings (no PING ack \
                     within {:.3} s): it is frozen or its network path is cut",
                    timeout.as_secs_f64()
                ),
            );
        }
        if let Some(reason) = self.tls_failure.get() {
            return tls_rejection(target, reason);
        }
        if self.peer_spoke_tls.load(Ordering::Acquire) {
            return TransportFailure::new(
                Cause::Tls,
                format!(
                    "TLS mismatch: the worker at {target} answered with TLS, but this \
                     connection is plaintext (give the connection TLS credentials)"
                ),
            );
        }
        if let Some(io) = error.get_io() {
            return io_failure(target, "connection", io);
        }
        let reason = error.reason().unwrap_or(h2::Reason::INTERNAL_ERROR);
        let cause = if error.is_go_away() && error.is_remote() {
            Cause::GoingAway
        } else if error.is_reset() && error.is_remote() {
            match reason {
                h2::Reason::REFUSED_STREAM => Cause::GoingAway,
                h2::Reason::CANCEL => Cause::Cancelled,
                h2::Reason::ENHANCE_YOUR_CALM => Cause::Exhausted,
                _ => Cause::Protocol,
            }
        } else {
            Cause::Protocol
        };
        TransportFailure::new(
            cause,
            format!("HTTP/2 with the worker at {target}: {error}"),
        )
    }
}

/// A TLS failure after the handshake: the worker refused this client (its certificate, most
/// often: not signed by a CA the worker trusts, or missing).
fn tls_rejection(target: &str, reason: &str) -> TransportFailure {
    TransportFailure::new(
        Cause::Tls,
        format!("TLS with the worker at {target} failed: {reason}"),
    )
}

/// An I/O failure on the way to or with the worker: a TLS failure when rustls reports one
/// (the error it wraps is a `rustls::Error`), else the worker is unreachable.
fn io_failure(target: &str, what: &str, error: &std::io::Error) -> TransportFailure {
    let tls = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>());
    match tls {
        Some(tls) => TransportFailure::new(
            Cause::Tls,
            format!("TLS with the worker at {target} failed: {tls}"),
        ),
        None => TransportFailure::new(
            Cause::Unreachable,
            format!("{what} to the worker at {target} failed: {error}"),
        ),
    }
}

/// One call on a connection, from its stream's start until its response is dropped: what
/// keepalive needs to know of it (gRPC's "pings without data" start again; calls are counted
/// only where PINGs wait for one). Shared counters are written only when they change, so
/// concurrent calls on many threads do not bounce their cache line.
struct CallOnConnection {
    state: Arc<ConnectionState>,
    counted: bool,
}

impl CallOnConnection {
    fn begin(state: &Arc<ConnectionState>) -> Self {
        if state.pings_without_data.load(Ordering::Relaxed) != 0 {
            state.pings_without_data.store(0, Ordering::Relaxed);
        }
        let counted = state.keepalive.is_some_and(|k| !k.without_calls);
        if counted {
            state.calls.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            state: Arc::clone(state),
            counted,
        }
    }
}

impl Drop for CallOnConnection {
    fn drop(&mut self) {
        if self.counted {
            self.state.calls.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Open {
    fn is_ended(&self) -> bool {
        self.state.ended.load(Ordering::Acquire)
    }

    /// Whether the worker closed or reset the connection (`poll` reports RDHUP, HUP or ERR on
    /// its socket) without the connection task having seen it yet.
    fn peer_hung_up(&self) -> bool {
        let mut socket = libc::pollfd {
            fd: self.fd,
            events: libc::POLLRDHUP,
            revents: 0,
        };
        // SAFETY: one pollfd on the stack, zero timeout. `fd` is the connection's socket, open
        // while the connection task (checked not ended just before) owns it.
        let ready = unsafe { libc::poll(&mut socket, 1, 0) };
        ready > 0 && socket.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
    }
}

/// A cloneable gRPC transport for tonic's generated clients (see the module docs).
#[derive(Clone)]
pub(crate) struct Http2Channel {
    shared: Arc<Shared>,
}

struct Shared {
    config: ChannelConfig,
    /// `scheme://authority` put in front of each request path.
    origin: http::uri::Parts,
    /// The current connection; the async lock makes concurrent first calls share one dial.
    open: tokio::sync::Mutex<Option<Open>>,
    /// Calls between opening their stream and receiving the response head. More wait here, in
    /// order: an h2 worker closes a connection on which over 100 small request DATA frames sit
    /// unread (`too_many_data_frames`), and grpcio refuses streams beyond its limit.
    calls: Arc<tokio::sync::Semaphore>,
    /// Streaming calls (dispatch) open at once, each for its whole life.
    streams: Arc<tokio::sync::Semaphore>,
    /// The keepalive interval in force, in milliseconds: the configured one, doubled each time
    /// a worker refuses our PINGs as too many (GOAWAY ENHANCE_YOUR_CALM), as gRPC's client does.
    keepalive_interval_ms: Arc<AtomicU64>,
}

/// Marks a request (in its extensions) as a streaming call: it holds a turn among the
/// channel's streams for as long as its stream lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamingCall;

/// A request extension bounding the call's answer to a message of at most this many bytes
/// (never more than the channel's `max_receive_message_bytes`): for calls whose answer has a
/// known small size (`idle`'s one double, `stop`'s empty message), so that an endpoint a sweep
/// polls cannot make it buffer a large message per call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct AnswerLimit(pub(crate) usize);

impl std::fmt::Debug for Http2Channel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http2Channel")
            .field("target", &self.shared.config.target)
            .field("tls", &self.shared.config.tls.is_some())
            .finish_non_exhaustive()
    }
}

impl Http2Channel {
    /// A channel that dials on its first call. No I/O here.
    pub(crate) fn new(config: ChannelConfig) -> Self {
        let mut origin = http::uri::Parts::default();
        origin.scheme = Some(if config.tls.is_some() {
            http::uri::Scheme::HTTPS
        } else {
            http::uri::Scheme::HTTP
        });
        origin.authority = Some(authority(&config.target));
        Self {
            shared: Arc::new(Shared {
                origin,
                open: tokio::sync::Mutex::new(None),
                calls: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_streams)),
                streams: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_streams)),
                keepalive_interval_ms: Arc::new(AtomicU64::new(
                    config
                        .keepalive
                        .map_or(0, |k| k.interval.as_millis().try_into().unwrap_or(u64::MAX)),
                )),
                config,
            }),
        }
    }

    /// Whether `other` is a clone of this channel.
    pub(crate) fn same_channel(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The current connection, dialing (once, for all concurrent callers) if there is none or
    /// the last one ended.
    ///
    /// A host that polls, say, once a minute leaves the library's runtime idle in between, so
    /// nothing reads the socket: a worker that closed the connection meanwhile (it was replaced,
    /// or grpcio closed a connection whose keepalive pings went unanswered) is not yet noticed
    /// by the connection task. So every call first asks the socket directly (one `poll`, no
    /// wait) whether the peer hung up, and a closed connection is replaced instead of failing
    /// the call — also one used moments ago by a worker since replaced on the same port.
    async fn connection(&self) -> Result<Open, TransportFailure> {
        let mut open = self.shared.open.lock().await;
        if let Some(current) = open.as_ref().filter(|o| !o.is_ended()) {
            if !current.peer_hung_up() {
                return Ok(current.clone());
            }
            current.state.ended.store(true, Ordering::Release);
        }
        let dialed = dial(
            &self.shared.config,
            Arc::clone(&self.shared.keepalive_interval_ms),
        )
        .await?;
        *open = Some(dialed.clone());
        Ok(dialed)
    }

    /// Lets go of the current connection, if there is one: the next call dials anew, and the
    /// connection closes (GOAWAY, then the socket) as soon as no call is using it any more.
    ///
    /// Used once a worker has answered `stop`: it is retiring and waits for its clients to hang
    /// up, and a host whose library runtime sits idle between calls would otherwise leave it
    /// waiting. Calls still running on the connection (other handles share it) are not cut.
    pub(crate) async fn close(&self) {
        let Some(open) = self.shared.open.lock().await.take() else {
            return;
        };
        let Open {
            send, state, task, ..
        } = open;
        // With no handle left, h2 closes the connection once its streams are done. A few turns
        // for the connection task to do so now; if calls are still running it finishes later,
        // driven by them or by the housekeeper.
        drop(send);
        for _ in 0..8 {
            if state.ended.load(Ordering::Acquire) || task.is_finished() {
                break;
            }
            tokio::task::yield_now().await;
        }
    }

    fn request_uri(&self, path: Option<&http::uri::PathAndQuery>) -> http::Uri {
        let mut parts = http::uri::Parts::default();
        parts.scheme = self.shared.origin.scheme.clone();
        parts.authority = self.shared.origin.authority.clone();
        parts.path_and_query = Some(
            path.cloned()
                .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/")),
        );
        http::Uri::from_parts(parts).expect("scheme, authority and path make a URI")
    }

    /// One call: open a stream, send the request's HEADERS and as much of its body as is ready
    /// (a unary request: all of it, END_STREAM included), pump any rest in a task, await the
    /// response head.
    async fn call(
        self,
        request: http::Request<tonic::body::Body>,
    ) -> Result<http::Response<ResponseBody>, TransportFailure> {
        // A unary call holds its turn until the response head; a streaming one (dispatch) for
        // as long as its stream lives, so a burst of them cannot flood the worker.
        let streaming = request.extensions().get::<StreamingCall>().is_some();
        let limit = match request.extensions().get::<AnswerLimit>() {
            Some(AnswerLimit(bound)) => (*bound).min(self.shared.config.max_receive_message_bytes),
            None => self.shared.config.max_receive_message_bytes,
        };
        let turns = if streaming {
            &self.shared.streams
        } else {
            &self.shared.calls
        };
        let turn = Arc::clone(turns)
            .acquire_owned()
            .await
            .expect("the call semaphores are never closed");
        let Open { send, state, .. } = self.connection().await?;
        let call = CallOnConnection::begin(&state);
        let mut send = send.ready().await.map_err(|e| state.failure(&e))?;
        let (mut head, body) = request.into_parts();
        head.uri = self.request_uri(head.uri.path_and_query());
        let (response, stream) = send
            .send_request(http::Request::from_parts(head, ()), false)
            .map_err(|e| state.failure(&e))?;
        let mut pump = BodyPump {
            body,
            stream,
            held: None,
        };
        if std::future::poll_fn(|cx| pump.poll_ready_part(cx)).now_or_never_pending() {
            tokio::spawn(pump.run());
        }
        let mut response = response.await.map_err(|e| state.failure(&e))?;
        readable_status(response.headers_mut());
        let encoding = unoffered_encoding(response.headers_mut());
        let stream_turn = streaming.then_some(turn);
        Ok(response.map(|recv| ResponseBody {
            recv,
            data_done: false,
            _stream_turn: stream_turn,
            call,
            messages: MessageSizes::new(limit, encoding),
        }))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Http2Channel {
    type Response = http::Response<ResponseBody>;
    type Error = TransportFailure;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, TransportFailure>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), TransportFailure>> {
        Poll::Ready(Ok(())) // readiness is per stream, awaited in `call`
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.clone().call(request))
    }
}

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

/// Dials the target, does the TLS and HTTP/2 handshakes, and spawns the connection task
/// (with the keepalive, when configured; `interval_ms` is the channel's interval in force).
async fn dial(
    config: &ChannelConfig,
    interval_ms: Arc<AtomicU64>,
) -> Result<Open, TransportFailure> {
    let target = config.target.to_string();
    let peer_spoke_tls = Arc::new(AtomicBool::new(false));
    let tls_failure = Arc::new(OnceLock::new());
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
                let socket = socket.sniffing_for_tls(Arc::clone(&peer_spoke_tls));
                handshake(builder, socket, fd, &target, None).await
            }
            Some((tls, name)) => {
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
                handshake(builder, socket, fd, &target, Some(&tls_failure)).await
            }
        }
    };
    let Handshaken {
        send,
        fd,
        connection,
        ping_pong,
    } = match config.connect_timeout {
        Some(limit) => tokio::time::timeout(limit, connect).await.map_err(|_| {
            TransportFailure::new(
                Cause::Unreachable,
                format!(
                    "connecting to the worker at {target} took over {:.3} s",
                    limit.as_secs_f64()
                ),
            )
        })??,
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
    });
    let task = tokio::spawn(drive(
        connection,
        ping_pong,
        Arc::clone(&state),
        interval_ms,
    ));
    Ok(Open {
        send,
        state,
        fd,
        task: Arc::new(task.abort_handle()),
    })
}

/// A TLS handshake that failed: the worker rejected us or we rejected it (a rustls error), or
/// it hung up in the middle (a plaintext worker does); anything else is a broken connection.
fn tls_handshake_failure(target: &str, error: &std::io::Error) -> TransportFailure {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        return TransportFailure::new(
            Cause::Tls,
            format!(
                "TLS handshake with {target}: the worker closed the connection (does it \
                 serve plaintext?)"
            ),
        );
    }
    let failure = io_failure(target, "TLS handshake", error);
    let corrupt = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
        .is_some_and(|tls| matches!(tls, tokio_rustls::rustls::Error::InvalidMessage(_)));
    if failure.cause == Cause::Tls {
        let hint = if corrupt {
            " (a plaintext worker answers TLS with HTTP/2 bytes, which TLS reads as a corrupt \
             message)"
        } else {
            ""
        };
        TransportFailure::new(
            Cause::Tls,
            format!("TLS handshake with {target} failed: {error}{hint}"),
        )
    } else {
        failure
    }
}

/// The connection future, boxed: it is the same type whatever the socket.
type Connection = Pin<Box<dyn Future<Output = Result<(), h2::Error>> + Send>>;
/// What the HTTP/2 handshake gives: the stream handle, the socket's descriptor, the connection
/// future and its PING handle.
struct Handshaken {
    send: SendRequest<Bytes>,
    fd: RawFd,
    connection: Connection,
    ping_pong: Option<h2::PingPong>,
}

async fn handshake<T>(
    builder: h2::client::Builder,
    io: T,
    fd: RawFd,
    target: &str,
    tls_failure: Option<&OnceLock<String>>,
) -> Result<Handshaken, TransportFailure>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, mut connection) = builder.handshake::<T, Bytes>(io).await.map_err(|e| {
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
        ping_pong,
    })
}

/// The connection task: drives the HTTP/2 connection, and the keepalive beside it. When a PING
/// goes unanswered the connection is dropped, which fails every call on it (as
/// [`Cause::KeepaliveTimeout`]).
async fn drive(
    mut connection: Connection,
    ping_pong: Option<h2::PingPong>,
    state: Arc<ConnectionState>,
    interval_ms: Arc<AtomicU64>,
) {
    // Marks the connection ended however this task ends, also when it is dropped unfinished
    // (the runtime it was spawned on shut down): the next call then dials anew.
    struct Ended(Arc<ConnectionState>);
    impl Drop for Ended {
        fn drop(&mut self) {
            self.0.ended.store(true, Ordering::Release);
        }
    }
    let _ended = Ended(Arc::clone(&state));
    let ended = match (state.keepalive, ping_pong) {
        (Some(settings), Some(ping_pong)) => tokio::select! {
            ended = &mut connection => ended,
            () = keep_alive(ping_pong, settings, &state, &interval_ms) => {
                state.keepalive_expired.store(true, Ordering::Release);
                tracing::debug!(target = %state.target, "keepalive PING unanswered: closing the connection");
                Ok(())
            }
        },
        _ => (&mut connection).await,
    };
    drop(connection);
    if let Err(error) = ended {
        tracing::debug!(target = %state.target, "worker connection ended: {error}");
        if error.is_go_away()
            && error.is_remote()
            && error.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM)
        {
            // The worker's ping policy refused our PINGs as too frequent: ping half as often
            // from now on (gRPC's client does the same on `too_many_pings`).
            let doubled = interval_ms.load(Ordering::Relaxed).saturating_mul(2);
            interval_ms.store(doubled, Ordering::Relaxed);
            tracing::warn!(target = %state.target, interval_ms = doubled,
                "the worker refused our keepalive pings as too many (ENHANCE_YOUR_CALM): pinging less often");
        }
    }
}

/// Sends a PING every interval and waits up to the timeout for its ack; returns when one goes
/// unanswered. Respects `without_calls` and `max_pings_without_data` as gRPC's client does.
async fn keep_alive(
    mut ping_pong: h2::PingPong,
    settings: Keepalive,
    state: &ConnectionState,
    interval_ms: &AtomicU64,
) {
    loop {
        tokio::time::sleep(Duration::from_millis(interval_ms.load(Ordering::Relaxed))).await;
        if !settings.without_calls && state.calls.load(Ordering::Relaxed) == 0 {
            continue;
        }
        let sent = state.pings_without_data.fetch_add(1, Ordering::Relaxed);
        if settings.max_pings_without_data > 0 && sent >= settings.max_pings_without_data {
            continue;
        }
        match tokio::time::timeout(settings.timeout, ping_pong.ping(h2::Ping::opaque())).await {
            Ok(Ok(_pong)) => {}
            // The connection is ending anyway; the connection future reports why.
            Ok(Err(_)) => return std::future::pending().await,
            Err(_elapsed) => return,
        }
    }
}

/// `host:port` as the HTTP/2 `:authority` (IPv6 bracketed), or `localhost` for a Unix socket.
fn authority(target: &Target) -> http::uri::Authority {
    let text = match target {
        Target::Unix(_) => "localhost".to_string(),
        tcp => tcp.to_string(),
    };
    text.parse()
        .unwrap_or_else(|_| http::uri::Authority::from_static("localhost"))
}

/// Moves a request body into its HTTP/2 stream, holding back one frame so that the last one
/// carries END_STREAM (a unary request becomes a single DATA frame).
struct BodyPump {
    body: tonic::body::Body,
    stream: h2::SendStream<Bytes>,
    held: Option<Bytes>,
}

impl BodyPump {
    /// Sends what the body has ready. `Ready(())` when the body is fully sent (or failed);
    /// `Pending` when it waits for more of the body.
    fn poll_ready_part(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    // Nothing more yet (a streaming request): what we hold must go now, or a
                    // peer waiting for it (e.g. a worker that acks a task) never sees it.
                    if let Some(held) = self.held.take() {
                        let _ = self.stream.send_data(held, false);
                    }
                    return Poll::Pending;
                }
            };
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if let Some(previous) = self.held.replace(data) {
                            if self.stream.send_data(previous, false).is_err() {
                                return Poll::Ready(());
                            }
                        }
                    }
                    Err(frame) => {
                        if let Some(held) = self.held.take() {
                            let _ = self.stream.send_data(held, false);
                        }
                        if let Ok(trailers) = frame.into_trailers() {
                            let _ = self.stream.send_trailers(trailers);
                        }
                        return Poll::Ready(());
                    }
                },
                Some(Err(error)) => {
                    tracing::debug!("request body failed: {error}");
                    self.stream.send_reset(h2::Reason::CANCEL);
                    return Poll::Ready(());
                }
                None => {
                    let _ = self
                        .stream
                        .send_data(self.held.take().unwrap_or_default(), true);
                    return Poll::Ready(());
                }
            }
        }
    }

    /// Sends the rest of a body that was not ready at once (a streaming request).
    async fn run(mut self) {
        std::future::poll_fn(|cx| self.poll_ready_part(cx)).await;
    }
}

/// Polls a future once, with a no-op waker: whether it is still pending. The body's waker is
/// taken over by the pump task when it is.
trait NowOrNeverPending {
    fn now_or_never_pending(self) -> bool;
}

impl<F: Future<Output = ()>> NowOrNeverPending for F {
    fn now_or_never_pending(self) -> bool {
        let mut future = std::pin::pin!(self);
        future
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    }
}

/// The response body: DATA frames (their flow-control capacity released as they arrive), then
/// the trailers that carry the gRPC status.
pub(crate) struct ResponseBody {
    recv: h2::RecvStream,
    data_done: bool,
    /// A streaming call's turn, released when the response body is done with.
    _stream_turn: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The call's place on its connection (and the connection's state, for failures).
    call: CallOnConnection,
    /// Checks each gRPC message's length prefix against the receive limit.
    messages: MessageSizes,
}

/// Follows the gRPC length-prefixed messages in a response's DATA (1 flag byte, 4 length
/// bytes, the message) and refuses a message over the limit as soon as its prefix arrives,
/// before it is buffered: as gRPC's client does, with `RESOURCE_EXHAUSTED`. Also refuses a
/// compressed message (flag bit 0) in an encoding this client never offered (see
/// [`unoffered_encoding`]).
struct MessageSizes {
    limit: usize,
    /// The `grpc-encoding` the worker named that this client does not decode, if any.
    encoding: Option<String>,
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message still to come.
    body_left: usize,
}

impl MessageSizes {
    fn new(limit: usize, encoding: Option<String>) -> Self {
        Self {
            limit,
            encoding,
            prefix: [0; 5],
            prefix_len: 0,
            body_left: 0,
        }
    }

    /// Follows `data`; a message in it that must be refused, if one starts there.
    fn follow(&mut self, mut data: &[u8]) -> Result<(), Refused> {
        while !data.is_empty() {
            if self.body_left > 0 {
                let taken = self.body_left.min(data.len());
                self.body_left -= taken;
                data = &data[taken..];
                continue;
            }
            let taken = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + taken].copy_from_slice(&data[..taken]);
            self.prefix_len += taken;
            data = &data[taken..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let length = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                if length > self.limit {
                    return Err(Refused::TooLarge(length));
                }
                if self.prefix[0] & 1 != 0 {
                    if let Some(encoding) = &self.encoding {
                        return Err(Refused::Compressed(encoding.clone()));
                    }
                }
                self.body_left = length;
            }
        }
        Ok(())
    }
}

/// Why [`MessageSizes`] refused a message.
#[derive(Debug, PartialEq, Eq)]
enum Refused {
    /// Its length prefix, over the limit.
    TooLarge(usize),
    /// Compressed with this encoding, which this client never offered.
    Compressed(String),
}

/// Takes out of a response's head a `grpc-encoding` other than `identity`, returning it: this
/// client offers no compression (it sends no `grpc-accept-encoding`), so a worker must not
/// compress. tonic would fail the call as UNIMPLEMENTED on seeing the header, before any
/// message — which on `idle` would read as "the worker predates idle" (idle unavailable),
/// and would refuse even messages sent uncompressed (flag 0), which gRPC allows under any
/// encoding, and the status of a trailers-only answer. Without the header tonic takes what it
/// can; a message actually compressed is refused by [`MessageSizes`] as a protocol failure.
fn unoffered_encoding(headers: &mut http::HeaderMap) -> Option<String> {
    const ENCODING: &str = "grpc-encoding";
    let encoding = headers.get(ENCODING)?;
    if encoding.as_bytes() == b"identity" {
        return None;
    }
    let name = String::from_utf8_lossy(encoding.as_bytes()).into_owned();
    headers.remove(ENCODING);
    Some(name)
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = TransportFailure;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportFailure>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    let refused = self.messages.follow(&data);
                    let target = &self.call.state.target;
                    let limit = self.messages.limit;
                    match refused {
                        Ok(()) => {}
                        Err(Refused::TooLarge(length)) => {
                            return Poll::Ready(Some(Err(TransportFailure::new(
                                Cause::Exhausted,
                                format!(
                                    "the worker at {target} answered with a message of \
                                     {length} bytes, over this call's receive limit ({limit} \
                                     bytes: max_receive_message_bytes, or less for an answer \
                                     of known size)"
                                ),
                            ))));
                        }
                        Err(Refused::Compressed(encoding)) => {
                            return Poll::Ready(Some(Err(TransportFailure::new(
                                Cause::Protocol,
                                format!(
                                    "the worker at {target} answered with a message compressed \
                                     as {encoding:?}, which this client never offered (it \
                                     accepts uncompressed messages only)"
                                ),
                            ))));
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(self.call.state.failure(&error)))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(mut trailers)) => {
                readable_status(&mut trailers);
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(self.call.state.failure(&error)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}

/// Makes the gRPC status a worker put in a response's head (trailers-only) or trailers safe
/// for tonic to read, keeping what the worker said. tonic's `Status::from_header_map` reads
/// these fields, and a hostile or broken worker can make it:
///
/// - panic (it `expect`s a `grpc-status-details-bin` to be base64), which would crash the
///   caller's thread, or a C host's call: such details are dropped;
/// - throw the worker's code away for UNKNOWN when `grpc-message` does not percent-decode to
///   UTF-8 (so an UNAVAILABLE worker would be evicted as an RPC error, where the gRPC spec
///   says a bad message must never cost the status): the message is replaced by its lossy
///   decoding (U+FFFD for the bad bytes), percent-encoded again;
/// - report a `grpc-status` that is no code (`abc`, `99`) as a bare UNKNOWN with no word of
///   what came: it is made UNKNOWN (2, as tonic and gRPC read it) with a message saying what
///   the worker sent, ahead of the worker's own message.
fn readable_status(headers: &mut http::HeaderMap) {
    use base64::Engine;
    const DETAILS: &str = "grpc-status-details-bin";
    const MESSAGE: &str = "grpc-message";
    const STATUS: &str = "grpc-status";
    // tonic decodes the details with the standard alphabet, padding optional.
    let decodes = |value: &http::HeaderValue| {
        base64::engine::general_purpose::STANDARD_PAD_INDIFFERENT
            .decode(value.as_bytes())
            .is_ok()
    };
    if headers.get(DETAILS).is_some_and(|value| !decodes(value)) {
        tracing::debug!("the worker's {DETAILS} is not base64: dropped");
        headers.remove(DETAILS);
    }
    if let Some(message) = headers.get(MESSAGE) {
        let decoded = percent_decode(message.as_bytes());
        if std::str::from_utf8(&decoded).is_err() {
            let lossy = String::from_utf8_lossy(&decoded).into_owned();
            headers.insert(MESSAGE, percent_encoded(&lossy));
        }
    }
    let Some(status) = headers.get(STATUS) else {
        return;
    };
    let code = status.as_bytes();
    if tonic::Code::from_bytes(code) != tonic::Code::Unknown || code == b"2" {
        return;
    }
    let mut message = format!(
        "the worker sent grpc-status \"{}\", which is no gRPC status code (read as UNKNOWN)",
        code.escape_ascii()
    );
    if let Some(own) = headers.get(MESSAGE) {
        let own = String::from_utf8_lossy(&percent_decode(own.as_bytes())).into_owned();
        if !own.is_empty() {
            message = format!("{message}: {own}");
        }
    }
    headers.insert(STATUS, http::HeaderValue::from_static("2"));
    headers.insert(MESSAGE, percent_encoded(&message));
}

/// `grpc-message` percent-decoding as tonic does it: `%` and two hex digits make a byte, any
/// other `%` stands for itself (the `percent-encoding` crate's reading).
fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    percent_encoding::percent_decode(bytes).collect()
}

/// What gRPC percent-encodes in `grpc-message`: everything but printable ASCII, and `%`.
const GRPC_MESSAGE_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// `text` percent-encoded as gRPC sends `grpc-message`: printable ASCII but `%` as is, every
/// other byte of its UTF-8 as `%XX`.
fn percent_encoded(text: &str) -> http::HeaderValue {
    let encoded = percent_encoding::utf8_percent_encode(text, GRPC_MESSAGE_ESCAPED).to_string();
    http::HeaderValue::from_str(&encoded).expect("printable ASCII is a header value")
}

#[cfg(test)]
mod tests {
    use super::{MessageSizes, Refused};

    #[test]
    fn a_workers_status_fields_are_made_readable_without_losing_its_code() {
        use super::readable_status;
        let read = |fields: &[(&'static str, &'static str)]| {
            let mut headers = http::HeaderMap::new();
            for (name, value) in fields {
                headers.insert(*name, http::HeaderValue::from_static(value));
            }
            readable_status(&mut headers);
            let status = tonic::Status::from_header_map(&headers).expect("a status");
            (status.code(), status.message().to_string(), headers)
        };
        // Good fields pass untouched.
        let (code, message, headers) = read(&[
            ("grpc-status", "14"),
            ("grpc-message", "100%25 busy"),
            ("grpc-status-details-bin", "QUJD"),
        ]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unavailable, "100% busy")
        );
        assert!(headers.contains_key("grpc-status-details-bin"));
        // Details that are not base64 (tonic would panic) are dropped.
        let (code, _, headers) = read(&[("grpc-status", "14"), ("grpc-status-details-bin", "!!")]);
        assert_eq!(code, tonic::Code::Unavailable);
        assert!(!headers.contains_key("grpc-status-details-bin"));
        // A message that is not UTF-8 keeps the code, decoded lossily.
        let (code, message, _) = read(&[("grpc-status", "14"), ("grpc-message", "busy %FF%FE")]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unavailable, "busy \u{FFFD}\u{FFFD}")
        );
        // Lone and malformed escapes stand for themselves, as tonic reads them.
        let (_, message, _) = read(&[("grpc-status", "14"), ("grpc-message", "%zz 100% %4")]);
        assert_eq!(message, "%zz 100% %4");
        // A status that is no code is UNKNOWN, saying what came.
        for (sent, own) in [("abc", ""), ("99", "on fire"), ("", ""), ("014", "")] {
            let fields = [("grpc-status", sent), ("grpc-message", own)];
            let (code, message, _) = read(if own.is_empty() {
                &fields[..1]
            } else {
                &fields
            });
            assert_eq!(code, tonic::Code::Unknown, "{sent:?}");
            assert!(
                message.contains(&format!("grpc-status \"{sent}\"")),
                "{message}"
            );
            assert!(message.ends_with(own), "{message}");
        }
        let (code, message, _) = read(&[("grpc-status", "2"), ("grpc-message", "own words")]);
        assert_eq!(
            (code, message.as_str()),
            (tonic::Code::Unknown, "own words")
        );
    }

    #[test]
    fn message_sizes_are_followed_across_data_frames() {
        let framed = |length: u32| {
            let mut bytes = vec![0];
            bytes.extend(length.to_be_bytes());
            bytes.extend(std::iter::repeat_n(7, length as usize));
            bytes
        };
        let mut sizes = MessageSizes::new(9, None);
        let two = [framed(9), framed(0), framed(3)].concat();
        for chunk in two.chunks(2) {
            assert_eq!(sizes.follow(chunk), Ok(()));
        }
        let over = framed(10);
        assert_eq!(sizes.follow(&over[..3]), Ok(()));
        assert_eq!(sizes.follow(&over[3..]), Err(Refused::TooLarge(10)));
        // A compressed message is refused only when the worker named an encoding we never
        // offered (with none named, tonic refuses the flag itself).
        let mut compressed = framed(3);
        compressed[0] = 1;
        assert_eq!(MessageSizes::new(9, None).follow(&compressed), Ok(()));
        assert_eq!(
            MessageSizes::new(9, Some("gzip".into())).follow(&compressed),
            Err(Refused::Compressed("gzip".into()))
        );
        assert_eq!(
            MessageSizes::new(9, Some("gzip".into())).follow(&framed(3)),
            Ok(())
        );
    }
}
