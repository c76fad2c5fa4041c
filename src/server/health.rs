//! The plaintext health side port (`--health-listen` of the worker and the scaler): the HTTP/2
//! bounds of a side port and its accept loop.

use super::accept::accept_connections;
use super::eviction::{ConnectionLimits, SIDE_PORT_MAX_CONNECTIONS};
use super::handshake::Plaintext;
use super::http2::{bounded_server, DEFAULT_KEEPALIVE};

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
/// until `shutdown`, its connections accepted as the main address's are (the preface
/// deadline, the per-address limit on opening connections; see [`server`](super))
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
    let incoming = accept_connections(listener, Plaintext, limits, None, "health");
    tokio::spawn(router.serve_with_incoming_shutdown(incoming, shutdown.cancelled_owned()));
}
