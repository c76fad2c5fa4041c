//! KEDA's `externalscaler.ExternalScaler` service over the fleets.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use super::demand::{DemandTable, ObjectKey};
use super::metadata::TriggerSpec;
use super::metrics::{Answer, ScalerMetrics};
use super::target_group::{Count, Freshness, HoldFor, TargetGroup, TargetGroups};
use crate::connection::{Error, ErrorKind};
use crate::protocol::externalscaler::external_scaler_server::ExternalScaler;
use crate::protocol::externalscaler::{
    GetMetricSpecResponse, GetMetricsRequest, GetMetricsResponse, IsActiveResponse, MetricSpec,
    MetricValue, ScaledObjectRef,
};

/// The one metric this scaler gives: the number of busy workers.
pub const METRIC_NAME: &str = "wool-busy-workers";

/// The shortest time between a stream's sweeps, whatever `maxSweepAge` says.
const MIN_STREAM_PERIOD: Duration = Duration::from_millis(250);

/// The longest ScaledObject `name` or `namespace` taken (bytes): Kubernetes' names are at most
/// 253 bytes.
pub(crate) const MAX_REF_BYTES: usize = 253;

/// The service: fleets by metadata, the demand clients reported, the scaler's metrics, and the
/// stop its streams end on (each with its status; the server's graceful stop waits for them).
pub(crate) struct ScalerService {
    pub(crate) fleets: Arc<TargetGroups>,
    pub(crate) demand: Arc<DemandTable>,
    pub(crate) metrics: Arc<ScalerMetrics>,
    pub(crate) shutdown: CancellationToken,
}

/// `namespace/name` of the ScaledObject a call is for, as the metrics label it.
fn scaled_object(reference: &ScaledObjectRef) -> String {
    format!("{}/{}", reference.namespace, reference.name)
}

/// The ScaledObject a call is for, as the demand table keys it.
fn demand_key(reference: &ScaledObjectRef) -> ObjectKey {
    ObjectKey {
        namespace: reference.namespace.clone(),
        name: reference.name.clone(),
    }
}

/// A call's failure as the status KEDA gets: bad metadata is `INVALID_ARGUMENT`, one of the
/// scaler's bounds reached `RESOURCE_EXHAUSTED`, a fleet that cannot be listed now
/// `UNAVAILABLE` (KEDA then keeps the replica count as it is).
fn status(error: Error) -> Status {
    match (error.kind(), error.code()) {
        (ErrorKind::InvalidArgument, _) => Status::invalid_argument(error.message()),
        (_, Some(tonic::Code::ResourceExhausted)) => Status::resource_exhausted(error.message()),
        _ => Status::unavailable(error.message()),
    }
}

/// Refuses a ScaledObject reference whose name or namespace is longer than Kubernetes allows.
fn check_reference(reference: &ScaledObjectRef) -> Result<(), Status> {
    for (what, value) in [
        ("name", &reference.name),
        ("namespace", &reference.namespace),
    ] {
        if value.len() > MAX_REF_BYTES {
            return Err(Status::invalid_argument(format!(
                "the ScaledObject's {what} is {} bytes long, more than {MAX_REF_BYTES}",
                value.len()
            )));
        }
    }
    Ok(())
}

impl ScalerService {
    /// The spec and fleet a call names: the kept reading of its metadata, else one made off
    /// the runtime's threads (a new fleet reads its TLS files).
    async fn fleet(
        &self,
        reference: &ScaledObjectRef,
    ) -> Result<(Arc<TriggerSpec>, Arc<TargetGroup>), Status> {
        check_reference(reference)?;
        if let Some(kept) = self
            .fleets
            .kept(&reference.namespace, &reference.scaler_metadata)
        {
            return Ok(kept);
        }
        let fleets = Arc::clone(&self.fleets);
        let namespace = reference.namespace.clone();
        let metadata = reference.scaler_metadata.clone();
        tokio::task::spawn_blocking(move || fleets.for_metadata(&namespace, &metadata))
            .await
            .map_err(|e| Status::internal(format!("reading the metadata failed: {e}")))?
            .map_err(status)
    }

    /// The count a call answers from, recorded in the metrics under `rpc`.
    async fn count(&self, reference: &ScaledObjectRef, rpc: &'static str) -> Result<Count, Status> {
        let answer = async {
            let (spec, fleet) = self.fleet(reference).await?;
            let hold = self
                .fleets
                .hold(&reference.namespace, Some(&fleet), HoldFor::Call)
                .map_err(status)?;
            let (census, freshness) = fleet.census(&spec, spec.max_sweep_age).await.map_err(
                |error| {
                    self.metrics.sweep_failed();
                    tracing::warn!(source = %fleet.source(), %error, "the fleet cannot be listed");
                    status(error)
                },
            )?;
            if freshness == Freshness::Swept {
                self.metrics.swept(census.took);
            }
            let count = census
                .count(&spec)
                .with_waiting(self.demand.waiting(&demand_key(reference)));
            self.metrics
                .record(&scaled_object(reference), fleet.source(), &count);
            drop(hold);
            if spec.deletion_cost {
                // Off the answer's path: the patches never delay the metric.
                let metrics = Arc::clone(&self.metrics);
                tokio::spawn(async move {
                    for outcome in fleet.mark_idlest(&spec, &census, count.metric).await {
                        metrics.deletion_cost_patch(fleet.source(), outcome);
                    }
                });
            }
            Ok::<_, Status>((count, freshness))
        }
        .await;
        self.metrics.call(
            rpc,
            match &answer {
                Ok((_, Freshness::Swept)) => Answer::Swept,
                Ok((_, Freshness::Cached)) => Answer::Cached,
                Err(_) => Answer::Failed,
            },
        );
        answer.map(|(count, _)| count)
    }
}

type IsActiveStream = Pin<Box<dyn Stream<Item = Result<IsActiveResponse, Status>> + Send>>;
type MetricSpecStream = Pin<Box<dyn Stream<Item = Result<GetMetricSpecResponse, Status>> + Send>>;

#[tonic::async_trait]
impl ExternalScaler for ScalerService {
    async fn is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<IsActiveResponse>, Status> {
        let reference = request.get_ref();
        let result = match self.count(reference, "IsActive").await {
            Ok(count) => count.active(),
            // Demand is what should start workers on a fleet that lists none (a headless
            // Service without pods may not resolve): active, whatever the listing says.
            Err(status)
                if status.code() == tonic::Code::Unavailable
                    && self.demand.waiting(&demand_key(reference)) > 0 =>
            {
                true
            }
            Err(status) => return Err(status),
        };
        Ok(Response::new(IsActiveResponse { result }))
    }

    type StreamIsActiveStream = IsActiveStream;

    /// Sends whether the ScaledObject is active now, then again each time that changes: every
    /// `maxSweepAge` (at least [`MIN_STREAM_PERIOD`] apart) the stream asks for a census that
    /// old at most (streams of one fleet thus share their sweeps), and it also reads every
    /// census other calls' sweeps publish, without sweeping for it; a change of the
    /// ScaledObject's demand (tasks waiting, reported or expired) is answered at once, a sweep
    /// in progress or not. Ends when the caller goes or the scaler stops, a sweep in progress
    /// included; ends with the listing's status when the fleet cannot be listed before any
    /// census was counted and no task waits.
    async fn stream_is_active(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamIsActiveStream>, Status> {
        let reference = request.into_inner();
        let (spec, fleet) = self.fleet(&reference).await?;
        let hold = self
            .fleets
            .hold(&reference.namespace, Some(&fleet), HoldFor::Stream)
            .map_err(status)?;
        let label = scaled_object(&reference);
        let metrics = Arc::clone(&self.metrics);
        let shutdown = self.shutdown.clone();
        let mut demand = self.demand.watch(demand_key(&reference));
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let period = spec.max_sweep_age.max(MIN_STREAM_PERIOD);
        tokio::spawn(async move {
            let _hold = hold;
            let mut sweeps = fleet.subscribe();
            let mut said = StreamState::default();
            // Each turn: a census (swept when due, else the one another call published), then
            // an answer if the activity changed, then a wait for the period or a new census;
            // demand changes are answered whenever they come.
            let mut published = false;
            loop {
                let census = if published {
                    fleet.latest().map(|census| Ok((census, Freshness::Cached)))
                } else {
                    let sweep = fleet.census(&spec, period);
                    tokio::pin!(sweep);
                    loop {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = sender.closed() => return,
                            census = &mut sweep => break Some(census),
                            () = demand.changed() => {
                                let waiting = demand.waiting();
                                if !said.answer(&sender, &metrics, waiting).await {
                                    return;
                                }
                            }
                        }
                    }
                };
                sweeps.borrow_and_update();
                match census {
                    None => {}
                    Some(Ok((census, freshness))) => {
                        if freshness == Freshness::Swept {
                            metrics.swept(census.took);
                        }
                        said.counted = Some(census.count(&spec));
                    }
                    Some(Err(error)) => {
                        metrics.sweep_failed();
                        tracing::warn!(source = %fleet.source(), %error, "the fleet cannot be listed");
                        if said.counted.is_none() && demand.waiting() == 0 {
                            // Nothing known: say why, and end (KEDA opens a new stream).
                            let _ = sender.send(Err(status(error))).await;
                            return;
                        }
                    }
                }
                let waiting = demand.waiting();
                if let Some(count) = said.counted {
                    metrics.record(&label, fleet.source(), &count.with_waiting(waiting));
                }
                if !said.answer(&sender, &metrics, waiting).await {
                    return;
                }
                let pause = tokio::time::sleep(period);
                tokio::pin!(pause);
                published = loop {
                    tokio::select! {
                        () = shutdown.cancelled() => return,
                        () = sender.closed() => return,
                        () = &mut pause => break false,
                        changed = sweeps.changed() => match changed {
                            Ok(()) => break true,
                            Err(_) => return,
                        },
                        () = demand.changed() => {
                            let waiting = demand.waiting();
                            if let Some(count) = said.counted {
                                metrics.record(&label, fleet.source(), &count.with_waiting(waiting));
                            }
                            if !said.answer(&sender, &metrics, waiting).await {
                                return;
                            }
                        }
                    }
                };
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }

    async fn get_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<GetMetricSpecResponse>, Status> {
        let (spec, _) = self.fleet(request.get_ref()).await?;
        self.metrics.call("GetMetricSpec", Answer::Cached);
        Ok(Response::new(metric_spec(&spec)))
    }

    async fn get_metrics(
        &self,
        request: Request<GetMetricsRequest>,
    ) -> Result<Response<GetMetricsResponse>, Status> {
        let request = request.into_inner();
        if request.metric_name != METRIC_NAME {
            return Err(Status::not_found(format!(
                "this scaler gives one metric, {METRIC_NAME:?}, not {:?}",
                request.metric_name
            )));
        }
        let reference = request
            .scaled_object_ref
            .ok_or_else(|| Status::invalid_argument("scaledObjectRef is missing"))?;
        let count = self.count(&reference, "GetMetrics").await?;
        Ok(Response::new(GetMetricsResponse {
            metric_values: vec![MetricValue {
                metric_name: METRIC_NAME.to_owned(),
                metric_value: i64::try_from(count.metric).unwrap_or(i64::MAX),
                metric_value_float: count.metric as f64,
            }],
        }))
    }

    type StreamMetricSpecStream = MetricSpecStream;

    /// Sends the metric spec once (it changes only with the metadata, and new metadata is a new
    /// call), then holds the stream open until the caller goes or the scaler stops, as KEDA
    /// asks of a scaler that implements it.
    async fn stream_metric_spec(
        &self,
        request: Request<ScaledObjectRef>,
    ) -> Result<Response<Self::StreamMetricSpecStream>, Status> {
        let (spec, _) = self.fleet(request.get_ref()).await?;
        let hold = self
            .fleets
            .hold(&request.get_ref().namespace, None, HoldFor::Stream)
            .map_err(status)?;
        let (sender, receiver) = tokio::sync::mpsc::channel(1);
        let shutdown = self.shutdown.clone();
        tokio::spawn(async move {
            let _hold = hold;
            if sender.send(Ok(metric_spec(&spec))).await.is_ok() {
                tokio::select! {
                    () = shutdown.cancelled() => {}
                    () = sender.closed() => {}
                }
            }
        });
        Ok(Response::new(Box::pin(
            tokio_stream::wrappers::ReceiverStream::new(receiver),
        )))
    }
}

/// What a `StreamIsActive` stream has said, and the last census it counted (demand left out).
#[derive(Debug, Default)]
struct StreamState {
    sent: Option<bool>,
    counted: Option<Count>,
}

impl StreamState {
    /// Whether the ScaledObject is active with `waiting` tasks waiting: from the last census
    /// counted and the demand; before any census, active if a task waits, else not known.
    fn active(&self, waiting: u64) -> Option<bool> {
        match self.counted {
            Some(count) => Some(count.with_waiting(waiting).active()),
            None => (waiting > 0).then_some(true),
        }
    }

    /// Sends whether active now over `sender` if it differs from what was last sent. Returns
    /// `false` once the caller has gone.
    async fn answer(
        &mut self,
        sender: &tokio::sync::mpsc::Sender<Result<IsActiveResponse, Status>>,
        metrics: &ScalerMetrics,
        waiting: u64,
    ) -> bool {
        let Some(active) = self.active(waiting) else {
            return true;
        };
        if self.sent == Some(active) {
            return true;
        }
        if sender
            .send(Ok(IsActiveResponse { result: active }))
            .await
            .is_err()
        {
            return false;
        }
        metrics.call("StreamIsActive", Answer::Swept);
        self.sent = Some(active);
        true
    }
}

/// The metric spec: [`METRIC_NAME`] with the metadata's `targetValue` (busy workers per
/// replica) as the float target and, rounded up, as KEDA's deprecated integer one.
fn metric_spec(spec: &TriggerSpec) -> GetMetricSpecResponse {
    GetMetricSpecResponse {
        metric_specs: vec![MetricSpec {
            metric_name: METRIC_NAME.to_owned(),
            target_size: spec.target_value.ceil() as i64,
            target_size_float: spec.target_value,
        }],
    }
}
