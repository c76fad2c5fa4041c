//! The worker's `grpc.health.v1.Health` (tonic-health), on the main address and optionally
//! alone on a plaintext port.

use std::sync::Arc;

use super::accept::{
    admit, bounded_server, ConnectionLimits, Plaintext, DEFAULT_KEEPALIVE,
    SIDE_PORT_MAX_CONNECTIONS,
};
use super::listen::bind_side_port;
use super::service::{WorkerService, WorkerState};
use super::WorkerError;
use crate::protocol::worker_server::WorkerServer;

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

/// The most streams (health checks and watches) one connection to a side health port may have
/// open at once.
const SIDE_PORT_MAX_STREAMS: u32 = 64;

/// A tonic server for a side health port: the shared HTTP/2 bounds
/// ([`bounded_server`]), at most [`SIDE_PORT_MAX_STREAMS`] streams per connection.
pub(crate) fn health_port_server() -> tonic::transport::Server {
    bounded_server(
        SIDE_PORT_MAX_STREAMS,
        Some(DEFAULT_KEEPALIVE),
        DEFAULT_KEEPALIVE,
    )
}

/// Serves `router` (health alone, from [`health_port_server`]) on `listener` in plaintext
/// until `shutdown`, its connections admitted as the main address's are (the preface
/// deadline, the per-address limit on opening connections; see [`accept`](super::accept))
/// under a cap of [`SIDE_PORT_MAX_CONNECTIONS`]: for the worker's and the scaler's
/// `--health-listen`.
pub(crate) fn serve_health_alone(
    listener: tokio::net::TcpListener,
    router: tonic::transport::server::Router,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let limits = ConnectionLimits {
        max_connections: SIDE_PORT_MAX_CONNECTIONS,
        evict_established: true,
    };
    let incoming = admit(listener, Plaintext, limits, None, "health");
    tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned()));
}
