//! The gRPC `Worker` service: `dispatch`, `stop` and `idle` over one shared [`WorkerState`].

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::Instrument;

use super::idle::{InFlightGuard, InFlightTracker};
use super::metrics::{TaskEnd, WorkerMetrics};
use super::routine::{Routine, RoutineRegistry};
use crate::protocol::{
    self, request::Payload as RequestPayload, response::Payload as ResponsePayload,
    worker_server::Worker, Ack, Idle, Message, Nack, StopRequest, Void,
};
use crate::Grace;

/// Everything a serving worker keeps: its routines, its in-flight set and idle clock, and the
/// stop machinery. Shared by the gRPC service and the [`WorkerHandle`](super::WorkerHandle).
#[derive(Debug)]
pub(crate) struct WorkerState {
    pub(crate) routines: RoutineRegistry,
    pub(crate) tracker: Arc<InFlightTracker>,
    /// Set from the moment a stop begins; new dispatches are refused with `UNAVAILABLE`.
    stopping: AtomicBool,
    /// Cancels every in-flight routine (when grace runs out).
    cancel: CancellationToken,
    /// Tells the server to shut down (after a stop's drain).
    pub(crate) shutdown: CancellationToken,
    /// Cancelled as a stop begins, before the drain: health turns NOT_SERVING then.
    pub(crate) stop_begun: CancellationToken,
    /// Task and poll counters (Prometheus).
    pub(crate) metrics: WorkerMetrics,
}

impl WorkerState {
    pub(crate) fn new(routines: RoutineRegistry) -> Self {
        Self {
            routines,
            tracker: Arc::new(InFlightTracker::new()),
            stopping: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            shutdown: CancellationToken::new(),
            stop_begun: CancellationToken::new(),
            metrics: WorkerMetrics::new(),
        }
    }

    /// The metrics' text exposition now.
    pub(crate) fn metrics_text(&self) -> String {
        self.metrics
            .encode(&self.tracker, self.stopping.load(Ordering::SeqCst))
    }

    fn refuse_if_stopping(&self) -> Result<(), Status> {
        if self.stopping.load(Ordering::SeqCst) {
            Err(Status::unavailable("shutting down"))
        } else {
            Ok(())
        }
    }

    /// Stops the worker: refuse new dispatches, let in-flight ones run for `grace`, cancel the
    /// rest, wait for the drain, then signal the server to shut down. Repeating it is harmless.
    pub(crate) async fn stop(&self, grace: Grace) {
        let first = !self.stopping.swap(true, Ordering::SeqCst);
        self.stop_begun.cancel();
        if first {
            tracing::info!(grace = ?grace, in_flight = self.tracker.in_flight(), "stop begun");
        }
        match grace {
            Grace::None => self.cancel.cancel(),
            Grace::Within(limit) => {
                if tokio::time::timeout(limit, self.tracker.drained())
                    .await
                    .is_err()
                {
                    tracing::info!(
                        in_flight = self.tracker.in_flight(),
                        "grace over: cancelling the tasks still in flight"
                    );
                    self.cancel.cancel();
                }
            }
            Grace::Unbounded => {}
        }
        self.tracker.drained().await;
        if first {
            tracing::info!("drained: nothing in flight; shutting down");
        }
        self.shutdown.cancel();
    }
}

/// The `Worker` gRPC service (see WIRE.md).
#[derive(Debug, Clone)]
pub(crate) struct WorkerService {
    pub(crate) state: Arc<WorkerState>,
}

type ResponseStream = Pin<Box<dyn Stream<Item = Result<protocol::Response, Status>> + Send>>;

fn response(payload: ResponsePayload) -> protocol::Response {
    protocol::Response {
        payload: Some(payload),
        context: None,
    }
}

fn message(dump: impl Into<Vec<u8>>) -> Message {
    Message { dump: dump.into() }
}

#[tonic::async_trait]
impl Worker for WorkerService {
    type dispatchStream = ResponseStream;

    /// One task per call: `ack`, then one `result` per `next` (a terminal `exception` if the
    /// routine fails), then end of stream; an unknown routine gets a `nack` alone.
    async fn dispatch(
        &self,
        request: Request<Streaming<protocol::Request>>,
    ) -> Result<Response<Self::dispatchStream>, Status> {
        self.state.refuse_if_stopping()?;
        let mut inbound = request.into_inner();
        let task = match inbound.message().await?.and_then(|r| r.payload) {
            Some(RequestPayload::Task(task)) => task,
            _ => {
                return Err(Status::invalid_argument(
                    "the first request of a dispatch must carry a task",
                ))
            }
        };
        let Some(routine) = self.state.routines.get(&task.callable) else {
            let name = String::from_utf8_lossy(&task.callable);
            let nack = ResponsePayload::Nack(Nack {
                exception: Some(message(format!("unknown routine {name:?}"))),
            });
            return Ok(Response::new(Box::pin(tokio_stream::once(Ok(response(
                nack,
            ))))));
        };
        // Enter the in-flight set, then re-check: a stop that began meanwhile either sees this
        // dispatch in its drain or this dispatch sees the stop — never neither.
        let guard = self.state.tracker.begin();
        self.state.refuse_if_stopping()?;
        self.state.metrics.task_started();
        let (tx, rx) = mpsc::channel(2);
        let state = Arc::clone(&self.state);
        // Log lines of the task (its failure) carry its routine and id.
        let span = tracing::info_span!(
            "task",
            routine = %String::from_utf8_lossy(&task.callable),
            id = %task.id
        );
        tokio::spawn(
            async move {
                let end = drive(routine, task.args, inbound, tx, guard, state.cancel.clone()).await;
                state.metrics.task_ended(end);
                if end == TaskEnd::Cancelled {
                    tracing::debug!("task cancelled");
                }
            }
            .instrument(span),
        );
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    /// Stops the worker with `StopRequest.timeout` seconds of grace; answers after the drain.
    async fn stop(&self, request: Request<StopRequest>) -> Result<Response<Void>, Status> {
        let grace = Grace::from_seconds(f64::from(request.into_inner().timeout));
        self.state.stop(grace).await;
        Ok(Response::new(Void {}))
    }

    /// Seconds continuously idle; exactly `0.0` while anything is in flight.
    async fn idle(&self, _: Request<Void>) -> Result<Response<Idle>, Status> {
        self.state.metrics.idle_polls().inc();
        Ok(Response::new(Idle {
            seconds: self.state.tracker.idle_seconds(),
        }))
    }
}

/// Runs one dispatched routine and speaks the dispatch FSM until the routine's outcome has been
/// delivered, the caller goes away, or a stop cancels it. The in-flight `guard` lives exactly as
/// long as this task, so every way out releases it. Says how the routine ended.
async fn drive(
    routine: Arc<dyn Routine>,
    args: Vec<u8>,
    mut inbound: Streaming<protocol::Request>,
    tx: mpsc::Sender<Result<protocol::Response, Status>>,
    _guard: InFlightGuard,
    cancel: CancellationToken,
) -> TaskEnd {
    let ack = ResponsePayload::Ack(Ack {
        version: protocol::PROTOCOL_VERSION.to_string(),
    });
    if tx.send(Ok(response(ack))).await.is_err() {
        return TaskEnd::Cancelled;
    }
    let mut running = routine.call(args);
    let mut outcome: Option<Result<Vec<u8>, String>> = None;
    let mut next_wanted = false;
    let mut inbound_open = true;
    loop {
        if let Some(result) = outcome.take_if(|_| next_wanted) {
            let (payload, end) = match result {
                Ok(output) => (ResponsePayload::Result(message(output)), TaskEnd::Finished),
                Err(error) => {
                    tracing::warn!(%error, "task failed");
                    (ResponsePayload::Exception(message(error)), TaskEnd::Failed)
                }
            };
            let _ = tx.send(Ok(response(payload))).await;
            return end;
        }
        if let Some(result) = outcome.as_ref().filter(|_| !inbound_open) {
            // The caller half-closed without asking for the result.
            return if result.is_ok() {
                TaskEnd::Finished
            } else {
                TaskEnd::Failed
            };
        }
        tokio::select! {
            result = &mut running, if outcome.is_none() => outcome = Some(result),
            request = inbound.message(), if inbound_open => match request {
                Ok(Some(protocol::Request { payload: Some(RequestPayload::Throw(thrown)), .. })) => {
                    let text = format!("thrown into routine: {}", String::from_utf8_lossy(&thrown.dump));
                    let _ = tx.send(Ok(response(ResponsePayload::Exception(message(text))))).await;
                    return TaskEnd::Failed;
                }
                Ok(Some(_)) => next_wanted = true, // `next`, or `send` (a Rust routine takes no sent values)
                Ok(None) => inbound_open = false,
                Err(_) => return TaskEnd::Cancelled, // the caller reset the stream
            },
            _ = cancel.cancelled() => {
                let cancelled = message("routine cancelled: the worker is stopping");
                let _ = tx.try_send(Ok(response(ResponsePayload::Exception(cancelled))));
                return TaskEnd::Cancelled;
            }
            _ = tx.closed() => return TaskEnd::Cancelled, // the caller went away
        }
    }
}

/// The `idle` method's full path.
const IDLE_PATH: &str = "/wool.runtime.protobuf.wire.Worker/idle";

/// Answers `idle` ahead of tonic's per-call machinery: the reading is one lock and a clock read,
/// while the generic unary path decodes a streaming request body, runs the handler as a future
/// and pipes an encoded response stream — most of the worker's CPU per poll. The answer is the
/// same on the wire: `content-type: application/grpc`, one length-prefixed `Idle` message,
/// trailers `grpc-status: 0`. Every other request goes to the wrapped service.
///
/// The answer's HEADERS and message go at once, and its trailers (which end the stream) once
/// the request has ended (its frames are discarded: the `Void` request carries nothing). A
/// client may send its request's end in a frame of its own after the HEADERS (tonic's default
/// channel does); ending the stream before it would close the stream on the server's side
/// while the client still sends, and each such stream costs the connection a reset that HTTP/2
/// servers count against a peer (a GOAWAY after 1,024). A request that already ended (one
/// write, as libwool's and Wool's clients send) is answered in one write.
#[derive(Debug, Clone)]
pub(crate) struct IdleFastPath<S> {
    pub(crate) inner: S,
    pub(crate) tracker: Arc<InFlightTracker>,
    /// Counts the polls answered here (`wool_worker_idle_polls_total`).
    pub(crate) polls: prometheus_client::metrics::counter::Counter,
}

impl<S: tonic::server::NamedService> tonic::server::NamedService for IdleFastPath<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B> tower::Service<http::Request<B>> for IdleFastPath<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>,
    B: http_body::Body + Unpin + Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = futures_util::future::Either<
        std::future::Ready<Result<Self::Response, S::Error>>,
        S::Future,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.method() == http::Method::POST && request.uri().path() == IDLE_PATH {
            self.polls.inc();
            let answer = idle_response(self.tracker.idle_seconds(), Some(request.into_body()));
            return futures_util::future::Either::Left(std::future::ready(Ok(answer)));
        }
        futures_util::future::Either::Right(self.inner.call(request))
    }
}

/// A complete gRPC response carrying `Idle { seconds }`, its trailers sent once `request` (the
/// request's body, if any) has ended.
fn idle_response<B>(seconds: f64, request: Option<B>) -> http::Response<tonic::body::Body>
where
    B: http_body::Body + Unpin + Send + 'static,
{
    let idle = Idle { seconds };
    let length = prost::Message::encoded_len(&idle);
    let mut framed = Vec::with_capacity(5 + length);
    framed.push(0); // not compressed
    framed.extend_from_slice(&(length as u32).to_be_bytes());
    prost::Message::encode_raw(&idle, &mut framed);
    let body = IdleBody {
        data: Some(bytes::Bytes::from(framed)),
        request,
        trailers: true,
    };
    let mut response = http::Response::new(tonic::body::Body::new(body));
    response.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/grpc"),
    );
    response
}

/// The body of an `idle` answer: its one framed message, then, once the request has ended (or
/// failed: the stream is gone then), the trailers `grpc-status: 0`. With the request already
/// ended both are ready at once, and the HTTP/2 server sends HEADERS, DATA and trailers in one
/// write.
struct IdleBody<B> {
    data: Option<bytes::Bytes>,
    request: Option<B>,
    trailers: bool,
}

impl<B: http_body::Body + Unpin> http_body::Body for IdleBody<B> {
    type Data = bytes::Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<bytes::Bytes>, Self::Error>>> {
        if let Some(data) = self.data.take() {
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::data(data))));
        }
        while let Some(request) = self.request.as_mut() {
            if request.is_end_stream() {
                self.request = None;
                break;
            }
            match std::pin::Pin::new(request).poll_frame(cx) {
                std::task::Poll::Ready(Some(Ok(_frame))) => {}
                std::task::Poll::Ready(Some(Err(_)) | None) => self.request = None,
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
        if std::mem::take(&mut self.trailers) {
            let mut trailers = http::HeaderMap::with_capacity(1);
            trailers.insert(
                http::HeaderName::from_static("grpc-status"),
                http::HeaderValue::from_static("0"),
            );
            return std::task::Poll::Ready(Some(Ok(http_body::Frame::trailers(trailers))));
        }
        std::task::Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.request.is_none() && !self.trailers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn idle_fast_path_answers_a_well_formed_grpc_response() {
        for seconds in [0.0, 12.25] {
            let response = idle_response(seconds, None::<http_body_util::Empty<bytes::Bytes>>);
            assert_eq!(
                response.headers()[http::header::CONTENT_TYPE],
                "application/grpc"
            );
            let collected = response.into_body().collect().await.unwrap();
            let trailers = collected.trailers().cloned().expect("trailers");
            assert_eq!(trailers["grpc-status"], "0");
            let bytes = collected.to_bytes();
            assert_eq!(bytes[0], 0, "uncompressed");
            let length = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
            assert_eq!(bytes.len(), 5 + length);
            let idle: Idle = prost::Message::decode(&bytes[5..]).unwrap();
            assert_eq!(idle.seconds, seconds);
        }
    }
}
