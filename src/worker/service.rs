//! The gRPC `Worker` service: `dispatch`, `stop` and `idle` over one shared [`WorkerState`].

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};

use super::idle::{InFlightGuard, InFlightTracker};
use super::routine::{Routine, RoutineRegistry};
use crate::protocol::{
    self, request::Payload as RequestPayload, response::Payload as ResponsePayload,
    worker_server::Worker, Ack, Grace, Idle, Message, Nack, StopRequest, Void,
};

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
}

impl WorkerState {
    pub(crate) fn new(routines: RoutineRegistry) -> Self {
        Self {
            routines,
            tracker: Arc::new(InFlightTracker::new()),
            stopping: AtomicBool::new(false),
            cancel: CancellationToken::new(),
            shutdown: CancellationToken::new(),
        }
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
        self.stopping.store(true, Ordering::SeqCst);
        match grace {
            Grace::None => self.cancel.cancel(),
            Grace::Within(limit) => {
                if tokio::time::timeout(limit, self.tracker.drained())
                    .await
                    .is_err()
                {
                    self.cancel.cancel();
                }
            }
            Grace::Unbounded => {}
        }
        self.tracker.drained().await;
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
        let (tx, rx) = mpsc::channel(2);
        tokio::spawn(drive(
            routine,
            task.args,
            inbound,
            tx,
            guard,
            self.state.cancel.clone(),
        ));
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
        Ok(Response::new(Idle {
            seconds: self.state.tracker.idle_seconds(),
        }))
    }
}

/// Runs one dispatched routine and speaks the dispatch FSM until the routine's outcome has been
/// delivered, the caller goes away, or a stop cancels it. The in-flight `guard` lives exactly as
/// long as this task, so every way out releases it.
async fn drive(
    routine: Arc<dyn Routine>,
    args: Vec<u8>,
    mut inbound: Streaming<protocol::Request>,
    tx: mpsc::Sender<Result<protocol::Response, Status>>,
    _guard: InFlightGuard,
    cancel: CancellationToken,
) {
    let ack = ResponsePayload::Ack(Ack {
        version: protocol::PROTOCOL_VERSION.to_string(),
    });
    if tx.send(Ok(response(ack))).await.is_err() {
        return;
    }
    let mut running = routine.call(args);
    let mut outcome: Option<Result<Vec<u8>, String>> = None;
    let mut next_wanted = false;
    let mut inbound_open = true;
    loop {
        if let Some(result) = outcome.take_if(|_| next_wanted) {
            let payload = match result {
                Ok(output) => ResponsePayload::Result(message(output)),
                Err(error) => ResponsePayload::Exception(message(error)),
            };
            let _ = tx.send(Ok(response(payload))).await;
            return;
        }
        if outcome.is_some() && !inbound_open {
            return; // the caller half-closed without asking for the result
        }
        tokio::select! {
            result = &mut running, if outcome.is_none() => outcome = Some(result),
            request = inbound.message(), if inbound_open => match request {
                Ok(Some(protocol::Request { payload: Some(RequestPayload::Throw(thrown)), .. })) => {
                    let text = format!("thrown into routine: {}", String::from_utf8_lossy(&thrown.dump));
                    let _ = tx.send(Ok(response(ResponsePayload::Exception(message(text))))).await;
                    return;
                }
                Ok(Some(_)) => next_wanted = true, // `next`, or `send` (a Rust routine takes no sent values)
                Ok(None) => inbound_open = false,
                Err(_) => return, // the caller reset the stream: cancel the routine
            },
            _ = cancel.cancelled() => {
                let cancelled = message("routine cancelled: the worker is stopping");
                let _ = tx.try_send(Ok(response(ResponsePayload::Exception(cancelled))));
                return;
            }
            _ = tx.closed() => return, // the caller went away
        }
    }
}
