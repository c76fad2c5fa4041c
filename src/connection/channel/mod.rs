//! The HTTP/2 channel a [`WorkerConnection`](super::WorkerConnection) calls through: one lazily
//! established connection to one worker (plaintext or TLS), re-established after it breaks.
//!
//! Built directly on the `h2` crate rather than on tonic's transport `Channel` for speed: tonic's
//! channel hands every call to a buffer task and every request body to a task that first waits
//! for flow-control capacity, so a unary call leaves the client as two writes (HEADERS, then
//! DATA) and wakes the worker twice. Here a call queues its HEADERS and its DATA before the
//! connection task next runs, so each unary call is one write and one wake-up of the worker.
//! tonic still does the gRPC framing and status handling on top (`WorkerClient<Http2Channel>`).
//!
//! The files, one job each: `config` (what a channel is made with), `dial` (connecting and the
//! TLS and HTTP/2 handshakes), `connection` (an open connection, its shared state and its
//! task), `keepalive` (PINGs, and what they need to know of calls), `failure` (what an h2, I/O
//! or TLS error is reported as), `pump` (a request body into its stream), `response` (the
//! response body a call reads), `limit` (the receive limit and unoffered compression), `status`
//! (making a worker's gRPC status readable) and `percent` (`grpc-message` percent coding).

mod config;
mod connection;
mod dial;
mod failure;
mod keepalive;
mod limit;
mod percent;
mod pump;
mod response;
mod status;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

pub(crate) use config::{ChannelConfig, Keepalive};
use connection::Open;
use dial::dial;
use keepalive::CallOnConnection;
use limit::{unoffered_encoding, MessageSizes};
use pump::{BodyPump, NowOrNeverPending};
pub(crate) use response::ResponseBody;
use status::readable_status;

use super::error::TransportFailure;
use super::Target;

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
    /// by the connection task. So a call first asks the socket directly (one `poll`, no wait)
    /// whether the peer hung up, and a closed connection is replaced instead of failing the
    /// call — also one used a second ago by a worker since replaced on the same port. A call
    /// made less than [`RECENTLY_HEARD`](connection::RECENTLY_HEARD) after the worker was last
    /// heard from does not ask (the reasons are there).
    async fn connection(&self) -> Result<Open, TransportFailure> {
        let mut open = self.shared.open.lock().await;
        if let Some(current) = open.as_ref().filter(|o| !o.is_ended()) {
            if !current.hung_up_unseen() {
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
        let mut response = state
            .drive_while(response)
            .await
            .map_err(|e| state.failure(&e))?;
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

/// `host:port` as the HTTP/2 `:authority` (IPv6 bracketed), or `localhost` for a Unix socket.
fn authority(target: &Target) -> http::uri::Authority {
    let text = match target {
        Target::Unix(_) => "localhost".to_string(),
        tcp => tcp.to_string(),
    };
    text.parse()
        .unwrap_or_else(|_| http::uri::Authority::from_static("localhost"))
}
