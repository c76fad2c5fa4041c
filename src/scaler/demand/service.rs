//! `libwool.scaler.v1.Demand`: a report checked (who sent it, its names, its figure), handed
//! to the table, counted, and answered with the TTL and when to report again.

use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use super::table::{DemandTable, ObjectKey};
use super::wire::demand_server::Demand;
use super::wire::{DemandAck, DemandReport};
use super::{
    check_client_id, check_kubernetes_name, Authentication, Refusal, MAX_NAMESPACE_BYTES,
    MAX_NAME_BYTES,
};
use crate::scaler::metrics::ScalerMetrics;

/// The service: the table it writes, the scaler's metrics, and who may report.
pub(crate) struct DemandService {
    pub(crate) table: Arc<DemandTable>,
    pub(crate) metrics: Arc<ScalerMetrics>,
    pub(crate) authentication: Authentication,
}

impl DemandService {
    /// Checks `report` in the order a client can act on (who, what, how much, how often, room)
    /// and hands it to the table.
    fn take(&self, report: DemandReport) -> Result<(), Refusal> {
        if self.authentication == Authentication::OneWayTls {
            return Err(Refusal::Unauthenticated);
        }
        let object = report.scaled_object.ok_or(Refusal::NoScaledObject)?;
        check_kubernetes_name(
            "the ScaledObject's namespace",
            &object.namespace,
            MAX_NAMESPACE_BYTES,
            false,
        )?;
        check_kubernetes_name(
            "the ScaledObject's name",
            &object.name,
            MAX_NAME_BYTES,
            true,
        )?;
        check_client_id(&report.client_id)?;
        let max = self.table.options().max_waiting;
        if report.waiting > max {
            return Err(Refusal::TooManyWaiting {
                waiting: report.waiting,
                max,
            });
        }
        let key = ObjectKey {
            namespace: object.namespace,
            name: object.name,
        };
        self.table
            .report(&key, &report.client_id, report.waiting, Instant::now())
    }

    fn ack(&self) -> DemandAck {
        let options = self.table.options();
        DemandAck {
            ttl_seconds: options.ttl.as_secs_f64(),
            report_interval_seconds: options.report_interval().as_secs_f64(),
            reports_per_second: options.reports_per_second,
            max_waiting: options.max_waiting,
        }
    }
}

#[tonic::async_trait]
impl Demand for DemandService {
    async fn report(&self, request: Request<DemandReport>) -> Result<Response<DemandAck>, Status> {
        match self.take(request.into_inner()) {
            Ok(()) => {
                self.metrics.demand_report("accepted");
                Ok(Response::new(self.ack()))
            }
            Err(refusal) => {
                self.metrics.demand_report(refusal.outcome());
                tracing::debug!(%refusal, "demand report refused");
                Err(Status::new(refusal.code(), refusal.to_string()))
            }
        }
    }
}
