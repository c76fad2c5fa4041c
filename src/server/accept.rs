//! The accept loop: accepts from a listener continuously, in a task of its own, pausing
//! [`ACCEPT_ERROR_PAUSE`] after an error from `accept` (logged once per burst), takes each
//! connection's place in the eviction table ([`eviction`](super::eviction)), then opens it in a
//! task of its own ([`handshake`](super::handshake)) and hands it to the HTTP/2 server once
//! past its preface.

use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::server::Connected;

use super::eviction::{ConnectionLimits, Connections};
use super::handshake::{open, Opening};
use super::io::{Accepted, Heard, Readable};

/// How long accepting pauses after an error from `accept` (EMFILE: out of descriptors, say),
/// instead of trying again at once.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// A listener the servers accept from: TCP (the peer's address known) or a Unix socket.
pub(crate) trait Listener: Send + 'static {
    /// The accepted connection.
    type Io: AsyncRead + AsyncWrite + Connected + Readable + Unpin + Send + 'static;

    /// The next connection, and its peer's IP address when it has one.
    fn accept(&self) -> impl Future<Output = io::Result<(Self::Io, Option<IpAddr>)>> + Send;
}

impl Listener for TcpListener {
    type Io = TcpStream;

    async fn accept(&self) -> io::Result<(TcpStream, Option<IpAddr>)> {
        let (stream, peer) = TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok((stream, Some(peer.ip())))
    }
}

impl Listener for UnixListener {
    type Io = UnixStream;

    async fn accept(&self) -> io::Result<(UnixStream, Option<IpAddr>)> {
        let (stream, _) = UnixListener::accept(self).await?;
        Ok((stream, None))
    }
}

/// Logs accept errors once per burst and pauses after each (see [`ACCEPT_ERROR_PAUSE`]).
#[derive(Debug, Default)]
pub(crate) struct AcceptErrors {
    /// Errors since the last accepted connection.
    burst: u64,
}

impl AcceptErrors {
    /// After an error from `accept`: a log line if it starts a burst, then the pause.
    pub(crate) async fn pause(&mut self, what: &str, error: &io::Error) {
        if self.burst == 0 {
            tracing::warn!(
                listener = what,
                %error,
                pause = ?ACCEPT_ERROR_PAUSE,
                "accepting a connection failed; pausing before each new attempt until one succeeds"
            );
        }
        self.burst += 1;
        tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
    }

    /// After a connection was accepted: ends a burst of errors (logged with its count).
    pub(crate) fn accepted(&mut self, what: &str) {
        if self.burst > 0 {
            tracing::info!(listener = what, errors = self.burst, "accepting again");
            self.burst = 0;
        }
    }
}

/// Accepts from `listener` continuously (until the returned stream is dropped) and yields
/// each connection once opened with `opening` and past its HTTP/2 preface, as the module
/// describes; `accepted` counts every accepted connection, refused ones included. `what`
/// names the listener in log lines. Must be called on a tokio runtime.
pub(crate) fn accept_connections<L, O>(
    listener: L,
    opening: O,
    limits: ConnectionLimits,
    accepted: Option<Arc<AtomicU64>>,
    what: &'static str,
) -> ReceiverStream<io::Result<Accepted<O::Output>>>
where
    L: Listener,
    O: Opening<Heard<L::Io>>,
{
    let (ready, incoming) = mpsc::channel(64);
    let opening = Arc::new(opening);
    let cap = limits.max_connections;
    let connections = Connections::new(limits);
    tokio::spawn(async move {
        let mut errors = AcceptErrors::default();
        let mut over_cap = false;
        loop {
            let (io, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        errors.pause(what, &error).await;
                        continue;
                    }
                },
                () = ready.closed() => return, // the server has stopped accepting
            };
            errors.accepted(what);
            if let Some(accepted) = &accepted {
                accepted.fetch_add(1, Ordering::Relaxed);
            }
            let Some(mut slot) = connections.take(peer) else {
                if !over_cap {
                    tracing::warn!(
                        listener = what,
                        cap,
                        "connection cap reached, every connection established: \
                         closing new connections until one ends"
                    );
                }
                over_cap = true;
                continue; // `io` is dropped: closed at once
            };
            over_cap = false;
            let io = Heard::new(io, &slot);
            let opening = Arc::clone(&opening);
            let ready = ready.clone();
            tokio::spawn(async move {
                let opened = tokio::select! {
                    opened = open(&*opening, io) => opened,
                    () = slot.evicted() => Err(io::Error::new(
                        io::ErrorKind::ConnectionAborted,
                        "closed while opening, to make room for a newer connection",
                    )),
                };
                match opened {
                    Ok(io) if O::SERVER_SPEAKS_FIRST => {
                        let _ = ready.send(Ok(Accepted::before_preface(io, slot))).await;
                    }
                    Ok(io) if slot.establish() => {
                        let _ = ready.send(Ok(Accepted::new(io, slot))).await;
                    }
                    Ok(_) => {}
                    Err(error) => {
                        tracing::debug!(listener = what, ?peer, %error, "connection not opened");
                    }
                }
            });
        }
    });
    ReceiverStream::new(incoming)
}
