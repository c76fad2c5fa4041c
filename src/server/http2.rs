//! The HTTP/2 side every server here shares: the bounds its tonic server is built with, the
//! client preface and its deadline, and the answer to a connection that does not send it.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

/// How long a client has to send the 24-byte HTTP/2 client preface (`PRI * HTTP/2.0…`) once
/// its connection is ready for HTTP/2 (accepted, or past its TLS handshake).
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most bytes of header fields a request may carry (HTTP/2 `SETTINGS_MAX_HEADER_LIST_SIZE`, as
/// hyper's default): 16 KiB. A larger header block is refused by h2.
pub const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;

/// Streams a peer may make the server reset for its errors before the connection is closed
/// (hyper's own default, which tonic's builder turns off unless set): 1,024.
pub const MAX_LOCAL_ERROR_RESETS: usize = 1024;

/// Streams a peer may open and reset before the server has accepted them, at once (h2's
/// default: the "rapid reset" bound): 20.
pub const MAX_PENDING_ACCEPT_RESETS: usize = 20;

/// HTTP/2 keepalive toward the peers by default: a PING every 30 s, 30 s to answer (Wool's
/// worker pings its clients with these values too). A peer that stops answering is
/// disconnected, and the streams it held end.
pub const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(30);

/// A tonic server with the HTTP/2 bounds every server here shares (some of tonic's defaults
/// are unbounded): `max_streams` streams per connection, [`MAX_HEADER_LIST_BYTES`] of header
/// fields, [`MAX_LOCAL_ERROR_RESETS`] and [`MAX_PENDING_ACCEPT_RESETS`], keepalive PINGs every
/// `keepalive_interval` (`None`: none) answered within `keepalive_timeout`. Frames stay at
/// h2's 16 KiB and the flow-control windows at hyper's 1 MiB per connection.
pub(crate) fn bounded_server(
    max_streams: u32,
    keepalive_interval: Option<Duration>,
    keepalive_timeout: Duration,
) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .tcp_nodelay(true)
        .max_concurrent_streams(Some(max_streams))
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .http2_max_local_error_reset_streams(Some(MAX_LOCAL_ERROR_RESETS))
        .http2_max_pending_accept_reset_streams(Some(MAX_PENDING_ACCEPT_RESETS))
        .http2_keepalive_interval(keepalive_interval)
        .http2_keepalive_timeout(Some(keepalive_timeout))
}

/// The HTTP/2 client connection preface (RFC 9113 §3.4).
pub(crate) const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// How long refusing a connection that sent no preface may take (its answer written, what
/// it sent read and discarded).
const REFUSAL_TIMEOUT: Duration = Duration::from_secs(1);

/// Most bytes read and discarded from a refused connection before it is closed.
const REFUSAL_DRAIN: usize = 64 * 1024;

/// Answers a connection that sent something other than the HTTP/2 preface as an HTTP/2
/// server does: its SETTINGS and a GOAWAY (PROTOCOL_ERROR), then the end of the stream,
/// discarding what the peer sent (up to [`REFUSAL_DRAIN`] bytes) so that the close is not a
/// reset: a TLS client meeting a plaintext server reads HTTP/2 bytes and can say so. All
/// within [`REFUSAL_TIMEOUT`].
pub(crate) async fn refuse<IO: AsyncRead + AsyncWrite + Unpin>(io: &mut IO) {
    use tokio::io::AsyncWriteExt;
    const ANSWER: [u8; 26] = [
        0, 0, 0, 0x4, 0, 0, 0, 0, 0, // SETTINGS, empty
        0, 0, 8, 0x7, 0, 0, 0, 0, 0, // GOAWAY:
        0, 0, 0, 0, 0, 0, 0, 0x1, // last stream 0, PROTOCOL_ERROR
    ];
    let refusal = async {
        io.write_all(&ANSWER).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        let mut drained = 0;
        while drained < REFUSAL_DRAIN {
            match io.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<_, io::Error>(())
    };
    let _ = tokio::time::timeout(REFUSAL_TIMEOUT, refusal).await;
}
