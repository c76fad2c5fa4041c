//! The wrappers an accepted connection is read through: [`Heard`] (its reads mark when its peer
//! was last heard from) and [`Accepted`] (its preface replayed or awaited, its place under the
//! connection cap held), and [`Readable`], the peek that tells a connection's first bytes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio::net::{TcpStream, UnixStream};
use tokio_util::sync::WaitForCancellationFutureOwned;
use tonic::transport::server::Connected;

use super::eviction::{Slot, Tracked};
use super::http2::{PREFACE, PREFACE_TIMEOUT};

/// A connection that can say when its first bytes have arrived (or it has ended).
pub(crate) trait Readable {
    /// Resolves once a byte can be read (without reading it), or at the end of the stream.
    fn first_bytes(&self) -> impl Future<Output = io::Result<()>> + Send;
}

impl Readable for TcpStream {
    async fn first_bytes(&self) -> io::Result<()> {
        self.peek(&mut [0u8; 1]).await.map(drop)
    }
}

impl Readable for UnixStream {
    async fn first_bytes(&self) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        // `readable` alone may wake without data: a peek tells (and clears the readiness
        // when there is nothing yet).
        loop {
            self.readable().await?;
            let peeked = self.try_io(tokio::io::Interest::READABLE, || {
                let mut byte = 0u8;
                // SAFETY: a one-byte peek into a local buffer on this socket's descriptor.
                let n = unsafe {
                    libc::recv(
                        self.as_raw_fd(),
                        std::ptr::addr_of_mut!(byte).cast(),
                        1,
                        libc::MSG_PEEK,
                    )
                };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(())
                }
            });
            match peeked {
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
                other => return other,
            }
        }
    }
}

/// What a connection wrapper passes through unchanged to its `inner` connection: its peer's
/// details (tonic's `Connected`) and every write (`write_through_to_inner!`).
macro_rules! pass_through_to_inner {
    ($wrapper:ident) => {
        impl<IO: Connected> Connected for $wrapper<IO> {
            type ConnectInfo = IO::ConnectInfo;

            fn connect_info(&self) -> Self::ConnectInfo {
                self.inner.connect_info()
            }
        }

        write_through_to_inner!($wrapper);
    };
}

pass_through_to_inner!(Heard);
pass_through_to_inner!(Accepted);

/// An accepted connection, whose reads tell its [`Slot`] when its peer was last heard from
/// (see [`Connections`](super::eviction::Connections)); otherwise the connection itself.
pub(crate) struct Heard<IO> {
    inner: IO,
    tracked: Arc<Tracked>,
}

impl<IO> Heard<IO> {
    /// `io`, its reads telling `slot` when its peer was last heard from.
    pub(crate) fn new(io: IO, slot: &Slot) -> Self {
        Self {
            inner: io,
            tracked: slot.tracked(),
        }
    }
}

/// A peek, not a read: the reads that follow it mark the connection heard from.
impl<IO: Readable + Sync> Readable for Heard<IO> {
    fn first_bytes(&self) -> impl Future<Output = io::Result<()>> + Send {
        self.inner.first_bytes()
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Heard<IO> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = Pin::new(&mut this.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            this.tracked.hear();
        }
        read
    }
}

/// A connection accepted for HTTP/2: its preface (already read and checked) is read again
/// first, or, when the server speaks first, the preface is awaited within its deadline as
/// the HTTP/2 server reads it; it holds its place under the connection cap until dropped,
/// and reads end (as at the end of the stream) once it has been closed to make room for a
/// newer one.
pub(crate) struct Accepted<T> {
    inner: T,
    /// How much of the preface has been read again.
    replayed: usize,
    /// While the preface has not come yet (the server spoke first): how much of it has, and
    /// its deadline.
    awaiting: Option<(usize, Pin<Box<tokio::time::Sleep>>)>,
    /// Resolves when the connection is closed to make room (only where that may happen).
    evicted: Option<Pin<Box<WaitForCancellationFutureOwned>>>,
    slot: Slot,
}

impl<T> Accepted<T> {
    /// A connection past its preface.
    pub(super) fn new(inner: T, slot: Slot) -> Self {
        let evicted = slot.evicts_established().then(|| Box::pin(slot.evicted()));
        Self {
            inner,
            replayed: 0,
            awaiting: None,
            evicted,
            slot,
        }
    }

    /// A connection whose preface the HTTP/2 server is to read: still opening.
    pub(super) fn before_preface(inner: T, slot: Slot) -> Self {
        let deadline = Box::pin(tokio::time::sleep(PREFACE_TIMEOUT));
        Self {
            inner,
            replayed: PREFACE.len(),
            awaiting: Some((0, deadline)),
            evicted: Some(Box::pin(slot.evicted())),
            slot,
        }
    }

    /// After `n` more bytes of a connection awaiting its preface: once the preface's length
    /// has come, the connection is established.
    fn preface_bytes(&mut self, n: usize) {
        let Some((read, _)) = &mut self.awaiting else {
            return;
        };
        *read += n;
        if *read >= PREFACE.len() {
            self.awaiting = None;
            // If it was closed to make room meanwhile, `evicted` ends the next read.
            if self.slot.establish() && !self.slot.evicts_established() {
                self.evicted = None;
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Accepted<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Some(evicted) = &mut this.evicted {
            if evicted.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Ok(())); // nothing read: the end of the stream
            }
        }
        if this.replayed < PREFACE.len() {
            let rest = &PREFACE[this.replayed..];
            let n = rest.len().min(buf.remaining());
            buf.put_slice(&rest[..n]);
            this.replayed += n;
            return Poll::Ready(Ok(()));
        }
        if this.awaiting.is_none() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        let before = buf.filled().len();
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                this.preface_bytes(buf.filled().len() - before);
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let late = match &mut this.awaiting {
                    Some((_, deadline)) => deadline.as_mut().poll(cx).is_ready(),
                    None => false,
                };
                if late {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("no HTTP/2 client preface within {PREFACE_TIMEOUT:?}"),
                    )));
                }
                Poll::Pending
            }
            other => other,
        }
    }
}
