//! The client's sockets: TCP or Unix streams whose writes can never raise SIGPIPE.
//!
//! A write to a peer that has closed raises SIGPIPE, which kills a C host that left the default
//! disposition (exit status 141) — seen when a mutual-TLS worker rejects the client's
//! certificate. hyper writes with `writev`, which cannot be told not to signal, so every write
//! here goes through `sendmsg(…, MSG_NOSIGNAL)` instead: the failed write just returns `EPIPE`,
//! on whatever thread it happens.

use std::io::{self, IoSlice};
use std::os::fd::{AsRawFd, RawFd};
use std::path::PathBuf;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use super::Target;

/// The readiness API that TCP and Unix streams share.
trait ReadySocket: AsyncRead + AsRawFd + Unpin {
    fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
    fn try_write_io(&self, write: impl FnOnce() -> io::Result<usize>) -> io::Result<usize>;
}

macro_rules! ready_socket {
    ($stream:ty) => {
        impl ReadySocket for $stream {
            fn poll_write_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                <$stream>::poll_write_ready(self, cx)
            }
            fn try_write_io(&self, write: impl FnOnce() -> io::Result<usize>) -> io::Result<usize> {
                self.try_io(Interest::WRITABLE, write)
            }
        }
    };
}
ready_socket!(TcpStream);
ready_socket!(UnixStream);

/// A connected client socket (see the module docs).
#[derive(Debug)]
pub(crate) enum Socket {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    /// Dials `target`: TCP with `TCP_NODELAY` (a poll is one small request; Nagle would hold
    /// it back), or the Unix socket at its path.
    pub(crate) async fn connect(target: Target) -> io::Result<Socket> {
        let socket = match target {
            Target::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), port)).await?;
                stream.set_nodelay(true)?;
                Socket::Tcp(stream)
            }
            Target::Unix(path) => Socket::Unix(UnixStream::connect::<PathBuf>(path).await?),
        };
        Ok(socket)
    }
}

/// `sendmsg` with `MSG_NOSIGNAL`: a vectored write that returns `EPIPE` instead of raising SIGPIPE.
fn send_nosignal(fd: RawFd, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
    // SAFETY: `msghdr` is plain data; the iovec array is `bufs` (IoSlice is ABI-compatible with
    // iovec) and outlives the call.
    let sent = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = bufs.as_ptr() as *mut libc::iovec;
        message.msg_iovlen = bufs.len().min(1024) as _;
        libc::sendmsg(fd, &message, libc::MSG_NOSIGNAL)
    };
    if sent < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(sent as usize)
    }
}

fn poll_send<S: ReadySocket>(
    socket: &S,
    cx: &mut Context<'_>,
    bufs: &[IoSlice<'_>],
) -> Poll<io::Result<usize>> {
    loop {
        ready!(socket.poll_write_ready(cx))?;
        match socket.try_write_io(|| send_nosignal(socket.as_raw_fd(), bufs)) {
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            result => return Poll::Ready(result),
        }
    }
}

impl Socket {
    fn poll_send(&self, cx: &mut Context<'_>, bufs: &[IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self {
            Socket::Tcp(stream) => poll_send(stream, cx, bufs),
            Socket::Unix(stream) => poll_send(stream, cx, bufs),
        }
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            Socket::Tcp(stream) => stream.as_raw_fd(),
            Socket::Unix(stream) => stream.as_raw_fd(),
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Socket::Unix(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Socket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, &[IoSlice::new(buf)])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.poll_send(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(())) // sockets have no user-space buffer
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Socket::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Socket::Unix(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn writing_to_a_closed_peer_is_epipe_not_sigpipe() {
        // Rust programs start with SIGPIPE ignored; restore the default action a C host has, so
        // that a write raising SIGPIPE would kill this test process.
        // SAFETY: setting a signal disposition; no handler code involved.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
        let (ours, theirs) = UnixStream::pair().unwrap();
        drop(theirs);
        let mut socket = Socket::Unix(ours);
        let mut outcome = Ok(());
        for _ in 0..4 {
            outcome = socket.write_all(b"after the peer closed").await;
            if outcome.is_err() {
                break;
            }
        }
        assert_eq!(outcome.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
}
