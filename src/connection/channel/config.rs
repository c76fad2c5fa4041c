//! What a channel is made with: the target, TLS, the stream bound, the connect timeout, the
//! keepalive settings and the receive limit.

use std::sync::Arc;
use std::time::Duration;

use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::rustls::ClientConfig;

use crate::connection::Target;

/// What to dial and how: the target, TLS (config and the name to verify), how many calls may
/// be opening streams at once, the connect timeout and keepalive.
#[derive(Clone)]
pub(crate) struct ChannelConfig {
    pub(crate) target: Target,
    pub(crate) tls: Option<(Arc<ClientConfig>, ServerName<'static>)>,
    pub(crate) max_concurrent_streams: usize,
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) keepalive: Option<Keepalive>,
    /// The largest gRPC message a response may carry, in bytes.
    pub(crate) max_receive_message_bytes: usize,
}

/// HTTP/2 keepalive, as gRPC's client does it (`grpc.keepalive_time_ms`,
/// `grpc.keepalive_timeout_ms`, `grpc.keepalive_permit_without_calls`,
/// `grpc.http2.max_pings_without_data`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Keepalive {
    /// A PING goes out this long after the previous one was answered.
    pub(crate) interval: Duration,
    /// An unanswered PING ends the connection after this long: its calls fail as transient.
    pub(crate) timeout: Duration,
    /// Whether to ping while no call is open on the connection.
    pub(crate) without_calls: bool,
    /// Most PINGs sent with no call started in between (0 = no limit).
    pub(crate) max_pings_without_data: u32,
}
