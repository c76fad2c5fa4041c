//! How the servers (the worker, `wool-scaler`, their health ports) admit connections, so that
//! peers that are slow on purpose hold little for long and never stop the others from being
//! served.
//!
//! The listener is accepted from continuously, in a task of its own. Each accepted connection:
//!
//! - counts against a connection cap (`ConnectionLimits::max_connections`, set by [`WorkerBuilder::max_connections`](super::WorkerBuilder::max_connections)) for its whole life;
//! - then *opens* in a task of its own: its TLS handshake when the server has one (the
//!   ClientHello must start within [`FIRST_BYTES_TIMEOUT`], the whole handshake end within
//!   [`HANDSHAKE_TIMEOUT`]), then the 24-byte HTTP/2 client preface, which must arrive within
//!   [`PREFACE_TIMEOUT`] and be exact (in plaintext it is read here first; after a TLS
//!   handshake the HTTP/2 server takes the connection at once and sends its SETTINGS, as a
//!   TLS client may wait for them, and reads the preface under the same deadline);
//! - while opening, takes one of [`OPENING_PER_PEER`] slots of its peer's address (an IPv4
//!   address, or an IPv6 /64) and one of [`OPENING_AT_ONCE`] for the server.
//!
//! A full server makes room rather than turning the newcomer away, because the newcomer is the
//! one most likely to be a real client (a client speaks as soon as it connects; a peer holding
//! connections open on purpose does not): when the cap, the address's opening slots or the
//! server's are all taken, the connection the new one displaces is closed, chosen among those
//! still opening (and, on a side port, established ones too) as the one *never heard from*,
//! oldest first, else the one *least recently heard from*. So silent connections from an
//! address, however many and however fast they are reopened, displace each other and never a
//! client that has sent its ClientHello or preface since. Connections of a main address past
//! their opening carry dispatches and are never displaced: a new connection finding the cap
//! taken by established ones only is closed at once.
//!
//! Only then is a plaintext connection handed to the HTTP/2 server (tonic's
//! `serve_with_incoming`), its preface replayed. An error from `accept` (EMFILE, say) pauses accepting for
//! [`ACCEPT_ERROR_PAUSE`], logged once per burst of errors, not once per error.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};
use tonic::transport::server::Connected;

/// How long a TLS client has, from its connection's acceptance, to start its ClientHello.
pub const FIRST_BYTES_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a TLS client's whole handshake may take, from its connection's acceptance.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send the 24-byte HTTP/2 client preface (`PRI * HTTP/2.0…`) once
/// its connection is ready for HTTP/2 (accepted, or past its TLS handshake).
pub const PREFACE_TIMEOUT: Duration = Duration::from_secs(5);

/// Connections from one peer address (an IPv4 address, or an IPv6 /64) still opening (TLS
/// handshake, HTTP/2 preface) at once; one more displaces one of them (see the module
/// documentation).
pub const OPENING_PER_PEER: usize = 32;

/// Connections still opening at once, all peers together; one more displaces one of them.
pub const OPENING_AT_ONCE: usize = 1024;

/// How long accepting pauses after an error from `accept` (EMFILE: out of descriptors, say),
/// instead of trying again at once.
pub const ACCEPT_ERROR_PAUSE: Duration = Duration::from_millis(100);

/// The connection cap of a worker's or scaler's main address by default, at most: 10,000.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// Descriptors kept back from the default connection cap, for files, side ports and the
/// connections' own start-up.
const RESERVED_DESCRIPTORS: usize = 256;

/// The connection cap of a side port (plaintext health): probes, a few at a time.
pub(crate) const SIDE_PORT_MAX_CONNECTIONS: usize = 64;

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
const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The default connection cap: [`DEFAULT_MAX_CONNECTIONS`], or fewer when the process's soft
/// `RLIMIT_NOFILE` is lower (the limit less 256 kept back, at least 16).
pub fn default_max_connections() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    let known = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let descriptors = if known && limit.rlim_cur != libc::RLIM_INFINITY {
        usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
    } else {
        usize::MAX
    };
    DEFAULT_MAX_CONNECTIONS.min(descriptors.saturating_sub(RESERVED_DESCRIPTORS).max(16))
}

/// The limits a server admits connections under.
#[derive(Debug, Clone)]
pub(crate) struct ConnectionLimits {
    /// Connections open at once (opening ones included); see [`Connections::take`] for what
    /// one more does.
    pub(crate) max_connections: usize,
    /// Whether connections past their opening may be closed to make room for new ones: for
    /// side ports (health probes, metrics scrapes), whose connections carry nothing that is
    /// lost by it; never for a main address, whose connections carry dispatches.
    pub(crate) evict_established: bool,
}

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

/// The key a peer's opening connections are counted under: its IPv4 address, or its IPv6 /64
/// (one host's usual share of addresses); an IPv4-mapped IPv6 address counts as IPv4.
fn peer_key(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(prefix.into())
            }
        },
    }
}

/// The order in which connections were last heard from: each read that brings bytes takes the
/// next value. Zero means "never heard from".
static HEARD: AtomicU64 = AtomicU64::new(1);

/// What the table knows of one connection, shared with the connection itself.
#[derive(Debug)]
struct Tracked {
    /// When its peer last sent bytes (a [`HEARD`] value), 0 if never.
    heard: AtomicU64,
    /// Whether reads still mark `heard` (not once it can no longer be closed to make room).
    watched: AtomicBool,
    /// Cancelled when the connection is closed to make room for a newer one.
    evicted: CancellationToken,
}

impl Tracked {
    fn hear(&self) {
        if self.watched.load(Ordering::Relaxed) {
            self.heard
                .store(HEARD.fetch_add(1, Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    /// The order of eviction: never heard from first (oldest first), then least recently
    /// heard from.
    fn eviction_key(&self, id: u64) -> (u64, u64) {
        (self.heard.load(Ordering::Relaxed), id)
    }
}

/// One connection in the table.
#[derive(Debug)]
struct Entry {
    peer: Option<IpAddr>,
    tracked: Arc<Tracked>,
}

/// The connections of one server, by stage.
#[derive(Debug, Default)]
struct Table {
    /// The next connection's number (so lower is older).
    next: u64,
    /// Connections still opening (TLS handshake, HTTP/2 preface).
    opening: HashMap<u64, Entry>,
    /// Opening connections per peer key.
    per_peer: HashMap<IpAddr, usize>,
    /// Connections past their opening that may be closed to make room (side ports only).
    evictable: HashMap<u64, Entry>,
    /// Connections past their opening, all of them.
    established: usize,
}

impl Table {
    /// The connection to close to make room: the least recently heard from of `candidates`.
    fn least_recently_heard<'a>(
        candidates: impl Iterator<Item = (&'a u64, &'a Entry)>,
    ) -> Option<u64> {
        candidates
            .min_by_key(|(id, entry)| entry.tracked.eviction_key(**id))
            .map(|(id, _)| *id)
    }

    /// Takes connection `id` out of the table (its counts given back) and closes it.
    fn evict(&mut self, id: u64) {
        let entry = if let Some(entry) = self.opening.remove(&id) {
            self.release_peer(entry.peer);
            entry
        } else if let Some(entry) = self.evictable.remove(&id) {
            self.established -= 1;
            entry
        } else {
            return;
        };
        entry.tracked.evicted.cancel();
    }

    fn release_peer(&mut self, peer: Option<IpAddr>) {
        if let Some(key) = peer {
            if let Some(count) = self.per_peer.get_mut(&key) {
                *count -= 1;
                if *count == 0 {
                    self.per_peer.remove(&key);
                }
            }
        }
    }
}

/// The connections a server holds, and the rules that make room for new ones (see the module
/// documentation).
#[derive(Debug)]
pub(crate) struct Connections {
    limits: ConnectionLimits,
    table: Mutex<Table>,
}

/// A connection's place in its server's [`Connections`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Slot {
    connections: Arc<Connections>,
    id: u64,
    tracked: Arc<Tracked>,
    established: bool,
}

impl Connections {
    pub(crate) fn new(limits: ConnectionLimits) -> Arc<Self> {
        Arc::new(Self {
            limits,
            table: Mutex::new(Table::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A place for a new connection from `peer`, still opening, made by closing others as the
    /// module documentation says; `None` when the server is at its cap and no connection may
    /// be closed to make room.
    pub(crate) fn take(self: &Arc<Self>, peer: Option<IpAddr>) -> Option<Slot> {
        let mut table = self.lock();
        let max = self.limits.max_connections.max(1);
        if table.opening.len() + table.established >= max {
            let candidates = table.opening.iter().chain(table.evictable.iter());
            let victim = Table::least_recently_heard(candidates)?;
            table.evict(victim);
        }
        let key = peer.map(peer_key);
        if let Some(key) = key {
            if table.per_peer.get(&key).copied().unwrap_or(0) >= OPENING_PER_PEER {
                let from_peer = table.opening.iter().filter(|(_, e)| e.peer == Some(key));
                if let Some(victim) = Table::least_recently_heard(from_peer) {
                    table.evict(victim);
                }
            }
        }
        if table.opening.len() >= OPENING_AT_ONCE {
            if let Some(victim) = Table::least_recently_heard(table.opening.iter()) {
                table.evict(victim);
            }
        }
        let id = table.next;
        table.next += 1;
        let tracked = Arc::new(Tracked {
            heard: AtomicU64::new(0),
            watched: AtomicBool::new(true),
            evicted: CancellationToken::new(),
        });
        if let Some(key) = key {
            *table.per_peer.entry(key).or_insert(0) += 1;
        }
        let entry = Entry {
            peer: key,
            tracked: Arc::clone(&tracked),
        };
        table.opening.insert(id, entry);
        Some(Slot {
            connections: Arc::clone(self),
            id,
            tracked,
            established: false,
        })
    }
}

impl Slot {
    /// Moves the connection past its opening: it no longer counts against its peer's opening
    /// slots, and from now on may be closed to make room only on a side port. `false` when it
    /// has been closed to make room meanwhile.
    pub(crate) fn establish(&mut self) -> bool {
        let mut table = self.connections.lock();
        let Some(entry) = table.opening.remove(&self.id) else {
            return false;
        };
        table.release_peer(entry.peer);
        table.established += 1;
        if self.connections.limits.evict_established {
            table.evictable.insert(self.id, entry);
        } else {
            self.tracked.watched.store(false, Ordering::Relaxed);
        }
        self.established = true;
        true
    }

    /// `io`, its reads telling this slot when its peer was last heard from.
    pub(crate) fn watch<IO>(&self, io: IO) -> Heard<IO> {
        Heard {
            inner: io,
            tracked: Arc::clone(&self.tracked),
        }
    }

    /// Resolves when the connection has been closed to make room for a newer one.
    pub(crate) fn evicted(&self) -> tokio_util::sync::WaitForCancellationFutureOwned {
        self.tracked.evicted.clone().cancelled_owned()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut table = self.connections.lock();
        if let Some(entry) = table.opening.remove(&self.id) {
            table.release_peer(entry.peer);
        } else if self.established {
            let counted = if self.connections.limits.evict_established {
                table.evictable.remove(&self.id).is_some()
            } else {
                true
            };
            if counted {
                table.established -= 1;
            }
        }
    }
}

/// Accepts from `listener` continuously (until the returned stream is dropped) and yields
/// each connection once opened with `opening` and past its HTTP/2 preface, as the module
/// describes; `accepted` counts every accepted connection, refused ones included. `what`
/// names the listener in log lines. Must be called on a tokio runtime.
pub(crate) fn admit<L, O>(
    listener: L,
    opening: O,
    limits: ConnectionLimits,
    accepted: Option<Arc<AtomicU64>>,
    what: &'static str,
) -> ReceiverStream<io::Result<Admitted<O::Output>>>
where
    L: Listener,
    O: Opening<Heard<L::Io>>,
{
    let (ready, incoming) = mpsc::channel(64);
    let opening = Arc::new(opening);
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
                        cap = connections.limits.max_connections,
                        "connection cap reached, every connection established: \
                         closing new connections until one ends"
                    );
                }
                over_cap = true;
                continue; // `io` is dropped: closed at once
            };
            over_cap = false;
            let io = slot.watch(io);
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
                        let _ = ready.send(Ok(Admitted::before_preface(io, slot))).await;
                    }
                    Ok(io) if slot.establish() => {
                        let _ = ready.send(Ok(Admitted::new(io, slot))).await;
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

/// Opens `io` and reads its HTTP/2 client preface, each within its deadline. A connection
/// whose first bytes are not the preface is answered as h2 answers one (see [`refuse`]).
async fn open<IO, O: Opening<IO>>(opening: &O, io: IO) -> io::Result<O::Output> {
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
async fn refuse<IO: AsyncRead + AsyncWrite + Unpin>(io: &mut IO) {
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

/// What a connection wrapper passes through unchanged to its `inner` connection: its peer's
/// details (tonic's `Connected`) and every write.
macro_rules! pass_through_to_inner {
    ($wrapper:ident) => {
        impl<IO: Connected> Connected for $wrapper<IO> {
            type ConnectInfo = IO::ConnectInfo;

            fn connect_info(&self) -> Self::ConnectInfo {
                self.inner.connect_info()
            }
        }

        impl<IO: AsyncWrite + Unpin> AsyncWrite for $wrapper<IO> {
            fn poll_write(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                buf: &[u8],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
            }

            fn poll_write_vectored(
                self: Pin<&mut Self>,
                cx: &mut Context<'_>,
                bufs: &[io::IoSlice<'_>],
            ) -> Poll<io::Result<usize>> {
                Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.inner.is_write_vectored()
            }

            fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().inner).poll_flush(cx)
            }

            fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
                Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
            }
        }
    };
}

pass_through_to_inner!(Heard);
pass_through_to_inner!(Admitted);

/// An accepted connection, whose reads tell its [`Slot`] when its peer was last heard from
/// (see [`Connections`]); otherwise the connection itself.
pub(crate) struct Heard<IO> {
    inner: IO,
    tracked: Arc<Tracked>,
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

/// A connection admitted to HTTP/2: its preface (already read and checked) is read again
/// first, or, when the server speaks first, the preface is awaited within its deadline as
/// the HTTP/2 server reads it; it holds its place under the connection cap until dropped,
/// and reads end (as at the end of the stream) once it has been closed to make room for a
/// newer one.
pub(crate) struct Admitted<T> {
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

impl<T> Admitted<T> {
    /// A connection past its preface.
    fn new(inner: T, slot: Slot) -> Self {
        let evicted = slot
            .connections
            .limits
            .evict_established
            .then(|| Box::pin(slot.evicted()));
        Self {
            inner,
            replayed: 0,
            awaiting: None,
            evicted,
            slot,
        }
    }

    /// A connection whose preface the HTTP/2 server is to read: still opening.
    fn before_preface(inner: T, slot: Slot) -> Self {
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
            if self.slot.establish() && !self.slot.connections.limits.evict_established {
                self.evicted = None;
            }
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Admitted<T> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_count_by_ipv4_address_or_ipv6_64() {
        let v6 = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(peer_key(v6("192.0.2.7")), v6("192.0.2.7"));
        assert_eq!(peer_key(v6("::ffff:192.0.2.7")), v6("192.0.2.7"));
        assert_eq!(peer_key(v6("2001:db8:1:2:aaaa::1")), v6("2001:db8:1:2::"));
        assert_eq!(
            peer_key(v6("2001:db8:1:2:ffff::9")),
            peer_key(v6("2001:db8:1:2::1"))
        );
    }

    fn connections(max_connections: usize, evict_established: bool) -> Arc<Connections> {
        Connections::new(ConnectionLimits {
            max_connections,
            evict_established,
        })
    }

    fn open_ids(connections: &Connections) -> Vec<u64> {
        let mut ids: Vec<u64> = connections.lock().opening.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    #[test]
    fn a_peer_past_its_share_of_opening_slots_displaces_its_longest_silent_one() {
        let table = connections(10_000, false);
        let address: IpAddr = "192.0.2.1".parse().unwrap();
        let peer = Some(address);
        let held: Vec<_> = (0..OPENING_PER_PEER)
            .map(|_| table.take(peer).expect("within the share"))
            .collect();
        // The oldest has spoken; the second oldest is then the longest silent.
        held[0].tracked.hear();
        let newcomer = table.take(peer).expect("a newcomer displaces a silent one");
        assert!(held[1].tracked.evicted.is_cancelled(), "the longest silent");
        assert!(!held[0].tracked.evicted.is_cancelled(), "one that spoke");
        assert_eq!(table.lock().per_peer[&address], OPENING_PER_PEER);
        assert!(table.take(Some("192.0.2.2".parse().unwrap())).is_some());
        assert!(table.take(None).is_some(), "Unix peers count only globally");
        drop(held);
        drop(newcomer);
        assert!(table.lock().per_peer.is_empty());
        assert!(table.lock().opening.is_empty());
    }

    #[test]
    fn among_peers_that_spoke_the_least_recently_heard_goes_first() {
        let table = connections(3, false);
        let held: Vec<_> = (0..3).map(|_| table.take(None).unwrap()).collect();
        held[2].tracked.hear();
        held[0].tracked.hear();
        held[1].tracked.hear();
        let _newcomer = table.take(None).unwrap();
        assert!(held[2].tracked.evicted.is_cancelled());
        assert_eq!(open_ids(&table), vec![0, 1, 3]);
    }

    #[test]
    fn established_connections_of_a_main_address_are_never_displaced() {
        let table = connections(2, false);
        let mut first = table.take(None).unwrap();
        let mut second = table.take(None).unwrap();
        assert!(first.establish() && second.establish());
        assert!(table.take(None).is_none(), "at the cap, all established");
        drop(first);
        let third = table.take(None).expect("room again");
        assert!(!second.tracked.evicted.is_cancelled());
        drop((second, third));
        let left = table.lock();
        assert_eq!((left.established, left.opening.len()), (0, 0));
    }

    #[test]
    fn a_side_port_at_its_cap_displaces_its_quietest_connection() {
        let table = connections(2, true);
        let mut probe = table.take(None).unwrap();
        let mut idle = table.take(None).unwrap();
        assert!(probe.establish() && idle.establish());
        probe.tracked.hear();
        let _newcomer = table.take(None).expect("a side port makes room");
        assert!(idle.tracked.evicted.is_cancelled(), "never heard from");
        assert!(!probe.tracked.evicted.is_cancelled());
        drop(idle);
        assert_eq!(table.lock().established, 1, "counted once");
    }

    #[test]
    fn the_default_cap_stays_within_the_descriptor_limit() {
        let cap = default_max_connections();
        assert!((16..=DEFAULT_MAX_CONNECTIONS).contains(&cap), "{cap}");
    }
}
