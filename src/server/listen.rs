//! Binding a plaintext side port (health, metrics) on a TCP `host:port`.

use std::net::SocketAddr;

use tokio::net::TcpListener;

use super::ServerError;

/// Binds a plaintext side port (health, metrics) on a TCP `host:port`; the listener and its
/// address.
pub(crate) async fn bind_side_port(
    address: &str,
) -> Result<(TcpListener, SocketAddr), ServerError> {
    let bind_error = |source| ServerError::Bind {
        address: address.to_owned(),
        source,
    };
    let listener = TcpListener::bind(address).await.map_err(bind_error)?;
    let local = listener.local_addr().map_err(bind_error)?;
    Ok((listener, local))
}
