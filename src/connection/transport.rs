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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{ready, Context, Poll};
use std::time::Duration;

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
pub(crate) struct Socket {
    stream: Stream,
    /// For a plaintext connection: set when the peer's first bytes are a TLS record.
    tls_answer: Option<Arc<AtomicBool>>,
}

#[derive(Debug)]
enum Stream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Socket {
    /// Dials `target`: TCP with `TCP_NODELAY` (a poll is one small request; Nagle would hold
    /// it back), or the Unix socket at its path.
    pub(crate) async fn connect(target: Target) -> io::Result<Socket> {
        let stream = match target {
            Target::Tcp { host, port } => {
                let stream = TcpStream::connect((host.as_str(), port)).await?;
                stream.set_nodelay(true)?;
                Stream::Tcp(stream)
            }
            Target::Unix(path) => Stream::Unix(UnixStream::connect::<PathBuf>(path).await?),
        };
        Ok(Socket {
            stream,
            tls_answer: None,
        })
    }

    /// For plaintext HTTP/2: sets `flag` if the peer's first bytes are a TLS record (a TLS
    /// worker answers a plaintext client's preface with an alert). An HTTP/2 peer's first
    /// bytes are a SETTINGS frame, whose length field never starts with those bytes.
    pub(crate) fn sniffing_for_tls(mut self, flag: Arc<AtomicBool>) -> Self {
        self.tls_answer = Some(flag);
        self
    }
}

/// Whether `bytes` begin a TLS record: content type alert (21) or handshake (22), then the
/// major version 3.
fn is_tls_record(bytes: &[u8]) -> bool {
    matches!(bytes, [21 | 22, 3, ..] | [21 | 22])
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
        match &self.stream {
            Stream::Tcp(stream) => poll_send(stream, cx, bufs),
            Stream::Unix(stream) => poll_send(stream, cx, bufs),
        }
    }
}

impl AsRawFd for Socket {
    fn as_raw_fd(&self) -> RawFd {
        match &self.stream {
            Stream::Tcp(stream) => stream.as_raw_fd(),
            Stream::Unix(stream) => stream.as_raw_fd(),
        }
    }
}

impl AsyncRead for Socket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(match &mut this.stream {
            Stream::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Unix(stream) => Pin::new(stream).poll_read(cx, buf),
        })?;
        let read = &buf.filled()[before..];
        if !read.is_empty() {
            // Only the first bytes tell: look once.
            if let Some(flag) = this.tls_answer.take() {
                flag.store(is_tls_record(read), Ordering::Release);
            }
        }
        Poll::Ready(Ok(()))
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
        match &mut self.get_mut().stream {
            Stream::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Unix(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

/// A connection's stream (plaintext or TLS) that says when the worker's first bytes arrive,
/// and keeps when it was last heard from. Every HTTP/2 server's first frame is its SETTINGS, so
/// until then the connection is not set up, and the dial waits for them within the connect
/// timeout (as gRPC's client waits for them before it calls a connection ready). After that,
/// each read that gives bytes marks the time in [`LastHeard`].
pub(crate) struct FirstBytes<T> {
    inner: T,
    first_bytes: Option<Arc<tokio::sync::Notify>>,
    heard: Arc<LastHeard>,
}

impl<T> FirstBytes<T> {
    /// Wraps `inner`, marking each read that gives bytes in `heard`; the returned
    /// [`Notify`](tokio::sync::Notify) gets one permit when the peer's first bytes are read.
    pub(crate) fn new(inner: T, heard: Arc<LastHeard>) -> (Self, Arc<tokio::sync::Notify>) {
        let notify = Arc::new(tokio::sync::Notify::new());
        (
            Self {
                inner,
                first_bytes: Some(Arc::clone(&notify)),
                heard,
            },
            notify,
        )
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for FirstBytes<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        if buf.filled().len() > before {
            this.heard.mark();
            if let Some(notify) = this.first_bytes.take() {
                notify.notify_one();
            }
        }
        Poll::Ready(Ok(()))
    }
}

/// When a connection's peer was last heard from (a read that gave bytes), on the monotonic
/// clock, in nanoseconds since the connection was made. Written by the connection's reads,
/// read by calls deciding whether to ask the socket if the peer hung up; no lock.
#[derive(Debug)]
pub(crate) struct LastHeard {
    since: std::time::Instant,
    /// Nanoseconds from `since` to the last read that gave bytes; [`NEVER`](Self::NEVER) before one.
    nanos: AtomicU64,
}

impl LastHeard {
    const NEVER: u64 = u64::MAX;

    pub(crate) fn new() -> Self {
        Self {
            since: std::time::Instant::now(),
            nanos: AtomicU64::new(Self::NEVER),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_nanos()).unwrap_or(Self::NEVER - 1)
    }

    fn mark(&self) {
        self.nanos.store(self.now(), Ordering::Relaxed);
    }

    /// Whether the peer was heard from less than `bound` ago.
    pub(crate) fn within(&self, bound: Duration) -> bool {
        let last = self.nanos.load(Ordering::Relaxed);
        last != Self::NEVER && u128::from(self.now().saturating_sub(last)) < bound.as_nanos()
    }
}

write_through_to_inner!(FirstBytes);

/// A client TLS stream that keeps the first TLS failure it meets after the handshake. Under
/// TLS 1.3 a worker that rejects this client's certificate says so with an alert after the
/// client's side of the handshake is done, so it surfaces on a later read; h2 turns I/O errors
/// into text, and the rustls error (what tells a TLS failure from a broken connection) would
/// be lost on the way.
pub(crate) struct TlsSocket {
    inner: tokio_rustls::client::TlsStream<Socket>,
    failure: Arc<OnceLock<String>>,
    /// Bytes read ahead by [`read_ahead`](Self::read_ahead), handed out first.
    ahead: Vec<u8>,
}

impl TlsSocket {
    /// Wraps `inner`, recording into `failure`.
    pub(crate) fn new(
        inner: tokio_rustls::client::TlsStream<Socket>,
        failure: Arc<OnceLock<String>>,
    ) -> Self {
        Self {
            inner,
            failure,
            ahead: Vec::new(),
        }
    }

    /// Waits for the worker's first bytes after the handshake (its HTTP/2 SETTINGS), keeping
    /// them for the first read; `Ok(0)` if the worker closed the connection instead. A worker
    /// that rejects this client's certificate answers with an alert instead, which then fails
    /// here, typed, rather than racing the client's first writes (a write to the closed socket
    /// would report a broken pipe). gRPC clients wait for the server's preface the same way
    /// before they call a connection ready.
    pub(crate) async fn read_ahead(&mut self) -> io::Result<usize> {
        use tokio::io::AsyncReadExt;
        let mut buf = [0u8; 1024];
        let read = self.inner.read(&mut buf).await;
        let read = self.note(Poll::Ready(read));
        let Poll::Ready(read) = read else {
            unreachable!("a ready result stays ready")
        };
        let read = read?;
        self.ahead.extend_from_slice(&buf[..read]);
        Ok(read)
    }

    fn note<T>(&self, result: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if let Poll::Ready(Err(error)) = &result {
            let tls = error
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>());
            if let Some(tls) = tls {
                let _ = self.failure.set(tls.to_string());
            }
        }
        result
    }
}

impl AsyncRead for TlsSocket {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.ahead.is_empty() {
            let take = this.ahead.len().min(buf.remaining());
            buf.put_slice(&this.ahead[..take]);
            this.ahead.drain(..take);
            return Poll::Ready(Ok(()));
        }
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        this.note(result)
    }
}

impl AsyncWrite for TlsSocket {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.note(result)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.note(result)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let result = Pin::new(&mut this.inner).poll_flush(cx);
        this.note(result)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
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
        let mut socket = Socket {
            stream: Stream::Unix(ours),
            tls_answer: None,
        };
        let mut outcome = Ok(());
        for _ in 0..4 {
            outcome = socket.write_all(b"after the peer closed").await;
            if outcome.is_err() {
                break;
            }
        }
        assert_eq!(outcome.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn tls_records_are_told_from_http2_frames() {
        assert!(is_tls_record(&[21, 3, 3, 0, 2, 2, 50])); // an alert
        assert!(is_tls_record(&[22, 3, 1])); // a handshake
        assert!(is_tls_record(&[21]));
        assert!(!is_tls_record(&[0, 0, 18, 4, 0])); // a SETTINGS frame
        assert!(!is_tls_record(&[21, 0, 0]));
        assert!(!is_tls_record(&[]));
    }
}
