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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use http_body::{Body, Frame};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;
use tokio_rustls::TlsConnector;
use tonic::Status;

use super::transport::Socket;
use super::Target;

/// What to dial and how: the target, TLS (config and the name to verify), how many calls may
/// be opening streams at once, and the connect timeout.
#[derive(Clone)]
pub(crate) struct ChannelConfig {
    pub(crate) target: Target,
    pub(crate) tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    pub(crate) max_concurrent_calls: usize,
    pub(crate) connect_timeout: Option<Duration>,
}

/// An open HTTP/2 connection: the handle to start streams on, whether its connection task has
/// ended (the connection broke or the worker closed it), and when a call last used it.
#[derive(Clone)]
struct Open {
    send: SendRequest<Bytes>,
    ended: Arc<AtomicBool>,
    last_used: Arc<std::sync::Mutex<Instant>>,
    /// The socket's descriptor, for [`Open::peer_hung_up`].
    fd: RawFd,
    /// The connection task, to close the connection at once (see [`Http2Channel::close`]).
    task: Arc<tokio::task::AbortHandle>,
}

/// A connection unused for longer than this is checked for a hang-up before reuse
/// (see [`Http2Channel::connection`]).
const RECHECK_AFTER: Duration = Duration::from_millis(500);

impl Open {
    fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
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

    /// Marks the connection used now; how long it had been unused.
    fn touch(&self) -> Duration {
        let mut last_used = self
            .last_used
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let unused = last_used.elapsed();
        *last_used = Instant::now();
        unused
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
}

/// Marks a request (in its extensions) as a streaming call: it holds a turn among the
/// channel's streams for as long as its stream lives.
#[derive(Debug, Clone, Copy)]
pub(crate) struct StreamingCall;

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
                calls: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_calls)),
                streams: Arc::new(tokio::sync::Semaphore::new(config.max_concurrent_calls)),
                config,
            }),
        }
    }

    /// The current connection, dialing (once, for all concurrent callers) if there is none or
    /// the last one ended.
    ///
    /// A host that polls, say, once a minute leaves the library's runtime idle in between, so
    /// nothing reads the socket: a worker that closed the connection meanwhile (it was replaced,
    /// or grpcio closed a connection whose keepalive pings went unanswered) is not yet noticed
    /// by the connection task. So a connection unused for a while is first asked directly
    /// whether the peer hung up, and a closed one is replaced instead of failing the call.
    async fn connection(&self) -> Result<Open, Status> {
        let mut open = self.shared.open.lock().await;
        if let Some(current) = open.as_ref().filter(|o| !o.is_ended()) {
            if current.touch() < RECHECK_AFTER || !current.peer_hung_up() {
                return Ok(current.clone());
            }
            current.ended.store(true, Ordering::Release);
        }
        let dialed = dial(&self.shared.config).await?;
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
            send, ended, task, ..
        } = open;
        drop(send); // with no handle left, h2 closes the connection once its streams are done
                    // A few turns for the connection task to do so now; if calls are still running it
                    // finishes later, driven by them or by the housekeeper.
        for _ in 0..8 {
            if ended.load(Ordering::Acquire) || task.is_finished() {
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
    ) -> Result<http::Response<ResponseBody>, Status> {
        // A unary call holds its turn until the response head; a streaming one (dispatch) for
        // as long as its stream lives, so a burst of them cannot flood the worker.
        let streaming = request.extensions().get::<StreamingCall>().is_some();
        let turns = if streaming {
            &self.shared.streams
        } else {
            &self.shared.calls
        };
        let turn = Arc::clone(turns)
            .acquire_owned()
            .await
            .expect("the call semaphores are never closed");
        let Open { send, .. } = self.connection().await?;
        let mut send = send.ready().await.map_err(|e| status_from_h2(&e))?;
        let (mut head, body) = request.into_parts();
        head.uri = self.request_uri(head.uri.path_and_query());
        let (response, stream) = send
            .send_request(http::Request::from_parts(head, ()), false)
            .map_err(|e| status_from_h2(&e))?;
        let mut pump = BodyPump {
            body,
            stream,
            held: None,
        };
        if std::future::poll_fn(|cx| pump.poll_ready_part(cx)).now_or_never_pending() {
            tokio::spawn(pump.run());
        }
        let response = response.await.map_err(|e| status_from_h2(&e))?;
        let stream_turn = streaming.then_some(turn);
        Ok(response.map(|recv| ResponseBody {
            recv,
            data_done: false,
            _stream_turn: stream_turn,
        }))
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Http2Channel {
    type Response = http::Response<ResponseBody>;
    type Error = Status;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Status>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Status>> {
        Poll::Ready(Ok(())) // readiness is per stream, awaited in `call`
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        Box::pin(self.clone().call(request))
    }
}

/// Dials the target, does the TLS and HTTP/2 handshakes, and spawns the connection task.
async fn dial(config: &ChannelConfig) -> Result<Open, Status> {
    let connect = async {
        let socket = Socket::connect(config.target.clone()).await.map_err(|e| {
            Status::unavailable(format!(
                "transport error: cannot connect to {}: {e}",
                config.target
            ))
        })?;
        let mut builder = h2::client::Builder::new();
        builder.initial_max_send_streams(config.max_concurrent_calls);
        match &config.tls {
            None => {
                let fd = socket.as_raw_fd();
                handshake(builder, socket, fd).await
            }
            Some((tls, name)) => {
                let fd = socket.as_raw_fd();
                let socket = TlsConnector::from(Arc::clone(tls))
                    .connect(name.clone(), socket)
                    .await
                    .map_err(|e| {
                        Status::unavailable(format!(
                            "TLS handshake with {} failed: {e}",
                            config.target
                        ))
                    })?;
                if socket.get_ref().1.alpn_protocol() != Some(b"h2") {
                    return Err(Status::unavailable(format!(
                        "TLS handshake with {}: the worker did not agree to HTTP/2 (ALPN h2)",
                        config.target
                    )));
                }
                handshake(builder, socket, fd).await
            }
        }
    };
    match config.connect_timeout {
        Some(limit) => tokio::time::timeout(limit, connect).await.map_err(|_| {
            Status::unavailable(format!(
                "transport error: connecting to {} took over {limit:?}",
                config.target
            ))
        })?,
        None => connect.await,
    }
}

async fn handshake<T>(builder: h2::client::Builder, io: T, fd: RawFd) -> Result<Open, Status>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, connection) = builder.handshake::<T, Bytes>(io).await.map_err(|e| {
        Status::unavailable(format!("transport error: HTTP/2 handshake failed: {e}"))
    })?;
    let ended = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&ended);
    let task = tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::debug!("worker connection ended: {error}");
        }
        flag.store(true, Ordering::Release);
    });
    Ok(Open {
        send,
        ended,
        last_used: Arc::new(std::sync::Mutex::new(Instant::now())),
        fd,
        task: Arc::new(task.abort_handle()),
    })
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

/// A failed stream or connection as the gRPC status a peer like grpcio would report.
fn status_from_h2(error: &h2::Error) -> Status {
    let reason = error.reason();
    if error.is_io() || error.is_go_away() || reason == Some(h2::Reason::REFUSED_STREAM) {
        Status::unavailable(format!("connection error: {error}"))
    } else if reason == Some(h2::Reason::CANCEL) {
        Status::cancelled(format!("stream cancelled: {error}"))
    } else {
        Status::internal(format!("h2 protocol error: {error}"))
    }
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
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(status_from_h2(&error)))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(trailers)) => Poll::Ready(Some(Ok(Frame::trailers(trailers)))),
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(status_from_h2(&error)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}
