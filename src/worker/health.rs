//! The worker's `grpc.health.v1.Health` (tonic-health), on the main address and optionally
//! alone on a plaintext side port ([`crate::server::health`]).

use std::sync::Arc;

use super::service::{WorkerService, WorkerState};
use super::WorkerError;
use crate::protocol::worker_server::WorkerServer;
use crate::server::health::{health_port_server, serve_health_alone};
use crate::server::listen::bind_side_port;

/// The worker's `grpc.health.v1.Health` (tonic-health): SERVING from start-up, for the whole
/// server (`""`) and for the `Worker` service; NOT_SERVING for both as soon as a stop begins, so
/// that load balancers and probes drain the worker while it finishes its in-flight work.
pub(super) struct Health {
    pub(super) service:
        tonic_health::pb::health_server::HealthServer<tonic_health::server::HealthService>,
}

impl Health {
    pub(super) async fn start(state: &Arc<WorkerState>) -> Self {
        let reporter = tonic_health::server::HealthReporter::new();
        let service = tonic_health::pb::health_server::HealthServer::new(
            tonic_health::server::HealthService::from_health_reporter(reporter.clone()),
        );
        reporter.set_serving::<WorkerServer<WorkerService>>().await;
        let begun = state.stop_begun.clone();
        tokio::spawn(async move {
            begun.cancelled().await;
            reporter
                .set_service_status("", tonic_health::ServingStatus::NotServing)
                .await;
            reporter
                .set_not_serving::<WorkerServer<WorkerService>>()
                .await;
        });
        Self { service }
    }

    /// Serves health alone on `address` (plaintext TCP) until `shutdown`; its bound address.
    pub(super) async fn serve_alone(
        &self,
        address: &str,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<String, WorkerError> {
        let (listener, local) = bind_side_port(address).await?;
        let router = health_port_server().add_service(self.service.clone());
        serve_health_alone(listener, router, shutdown);
        Ok(local.to_string())
    }
}
