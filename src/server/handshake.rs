//! What a connection does between its acceptance and HTTP/2 ([`Opening`]: nothing in plaintext,
//! a TLS handshake otherwise), and the deadlines it does it within: the ClientHello's start,
//! the whole handshake, the HTTP/2 client preface.

use std::future::Future;
use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};
use tonic::transport::server::Connected;

use super::http2::{refuse, PREFACE, PREFACE_TIMEOUT};
use super::io::Readable;

/// How long a TLS client has, from its connection's acceptance, to start its ClientHello.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a TLS client's whole handshake may take, from its connection's acceptance.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What a connection does between its acceptance and HTTP/2: nothing (plaintext), or a TLS
/// handshake.
pub(crate) trait Opening<IO>: Send + Sync + 'static {
    /// The connection once opened.
    type Output: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static;

    /// Opens `io`; an error drops the connection (logged at debug level).
    fn open(&self, io: IO) -> impl Future<Output = io::Result<Self::Output>> + Send;

    /// Whether the HTTP/2 server takes the connection as soon as it is opened, so that its
    /// SETTINGS leave at once, the client's preface then read (within [`PREFACE_TIMEOUT`],
    /// the connection still counted as opening until it has come) by the HTTP/2 server itself.
    /// So it is after a TLS handshake: a TLS client (ours, to tell a refused client
    /// certificate from a worker that hung up) may wait for the server's first bytes before it
    /// sends its preface. Otherwise the preface is read and checked first.
    const SERVER_SPEAKS_FIRST: bool = false;
}

/// Plaintext: nothing to do before HTTP/2.
pub(crate) struct Plaintext;

impl<IO: Send + 'static> Opening<IO> for Plaintext
where
    IO: AsyncRead + AsyncWrite + Connected + Unpin,
{
    type Output = IO;

    fn open(&self, io: IO) -> impl Future<Output = io::Result<IO>> + Send {
        std::future::ready(Ok(io))
    }
}

/// Opens `io` and reads its HTTP/2 client preface, each within its deadline. A connection
/// whose first bytes are not the preface is answered as h2 answers one (see [`refuse`]).
pub(crate) async fn open<IO, O: Opening<IO>>(opening: &O, io: IO) -> io::Result<O::Output> {
    let mut io = opening.open(io).await?;
    if O::SERVER_SPEAKS_FIRST {
        return Ok(io);
    }
    let mut preface = [0u8; PREFACE.len()];
    match tokio::time::timeout(PREFACE_TIMEOUT, io.read_exact(&mut preface)).await {
        Ok(Ok(_)) if &preface == PREFACE => Ok(io),
        Ok(Ok(_)) => {
            refuse(&mut io).await;
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "not an HTTP/2 client preface",
            ))
        }
        Ok(Err(error)) => Err(error),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("no HTTP/2 client preface within {PREFACE_TIMEOUT:?}"),
        )),
    }
}

/// Waits for `io`'s first bytes within [`FIRST_BYTES_TIMEOUT`], then runs `handshake` on it
/// to the end of [`HANDSHAKE_TIMEOUT`] (both from now): for TLS handshakes.
pub(crate) async fn within_handshake_deadlines<IO, T, F>(
    io: IO,
    handshake: impl FnOnce(IO) -> F,
) -> io::Result<T>
where
    IO: Readable,
    F: Future<Output = io::Result<T>>,
{
    let started = tokio::time::Instant::now();
    match tokio::time::timeout(FIRST_BYTES_TIMEOUT, io.first_bytes()).await {
        Ok(result) => result?,
        Err(_) => {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no TLS ClientHello within {FIRST_BYTES_TIMEOUT:?}"),
            ))
        }
    }
    match tokio::time::timeout_at(started + HANDSHAKE_TIMEOUT, handshake(io)).await {
        Ok(result) => result,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("TLS handshake not done within {HANDSHAKE_TIMEOUT:?}"),
        )),
    }
}
