//! `WorkerConnection`: the direct single-worker client, like Wool's `WorkerConnection`.
//!
//! Constructing a connection does no I/O. The first call takes a share of the pooled HTTP/2
//! channel for its (target, credentials, options); a worker that cannot be reached shows up
//! then, as [`ErrorKind::Transient`]. Calls are never refused locally: when more calls are
//! started than the worker accepts streams, they queue on the channel.
//!
//! ```no_run
//! # async fn demo() -> Result<(), libwool::connection::Error> {
//! use std::time::Duration;
//! use libwool::connection::WorkerConnection;
//! use libwool::Grace;
//! let worker = WorkerConnection::new("127.0.0.1:50051")?;
//! let idle = worker.idle(Some(Duration::from_secs(2))).await?;
//! if idle > 300.0 {
//!     worker.stop(Grace::Within(Duration::from_secs(10)), None).await?;
//! }
//! # Ok(()) }
//! ```

mod channel;
mod credentials;
mod error;
mod pool;
mod target;
mod transport;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub use credentials::{Peers, WorkerCredentials, CREDENTIAL_RELOAD_INTERVAL};
use error::Call;
pub use error::{Error, ErrorKind};
pub use pool::UNUSED_CHANNEL_TTL;
use pool::{ChannelLease, PoolKey};
pub use target::Target;

use crate::protocol::{
    request::Payload as RequestPayload, response::Payload as ResponsePayload,
    worker_client::WorkerClient, Request, StopRequest, Task, Void, PROTOCOL_VERSION,
};
use crate::Grace;

/// Channel settings, as Wool's `ChannelOptions`; part of the pool key (connections share a
/// channel only when their options are equal). [`Default`] gives Wool's channel defaults.
///
/// Set fields on a default value; [`WorkerConnection::with_options`] checks them
/// ([`ChannelOptions::validate`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct ChannelOptions {
    /// Largest message received, in bytes, 1 to 4 GiB − 1 (Wool's
    /// `max_receive_message_length`: 100 MiB). A larger one fails the call (`RESOURCE_EXHAUSTED`).
    pub max_receive_message_bytes: usize,
    /// Largest message sent, in bytes, 1 to 4 GiB − 1 (Wool's `max_send_message_length`:
    /// 100 MiB).
    pub max_send_message_bytes: usize,
    /// How long after the previous PING was answered the next one goes out (Wool's
    /// `keepalive_time_ms`: 30 s); at least 1 ms. `None` turns keepalive off: a call with no
    /// deadline to a frozen worker then waits for ever.
    pub keepalive_interval: Option<Duration>,
    /// How long a PING may go unanswered before the connection is declared dead and its calls
    /// fail as [`ErrorKind::Transient`] (Wool's `keepalive_timeout_ms`: 30 s); at least 1 ms.
    pub keepalive_timeout: Duration,
    /// Whether to ping while no call is open (Wool's `keepalive_permit_without_calls`: true), so
    /// a pooled connection that died between polls is found out before the next poll.
    pub keepalive_without_calls: bool,
    /// Most PINGs sent with no call started in between; 0 = no limit (Wool's
    /// `max_pings_without_data`: 2). Keeps an idle connection within a worker's ping policy.
    pub max_pings_without_data: u32,
    /// Most calls opening streams on the channel at once, 1 to 2^31 − 1 (Wool's
    /// `max_concurrent_streams`: 100). More calls wait their turn instead of failing: workers
    /// refuse streams beyond their limit.
    pub max_concurrent_streams: usize,
    /// Limit on establishing the connection, at least 1 ms: TCP, TLS, and the HTTP/2 handshake
    /// up to the worker's first SETTINGS frame (as gRPC's client waits for it). A worker that
    /// accepts the connection and never speaks HTTP/2 fails the call at this limit as
    /// [`ErrorKind::Transient`] (UNAVAILABLE), "accepted the connection but never spoke
    /// HTTP/2". `None` = only the call's deadline. Default 20 s, gRPC's minimum connect
    /// timeout, so a worker frozen mid-handshake cannot hold a call with no deadline for ever.
    pub connect_timeout: Option<Duration>,
}

/// Wool's default message limit, each way: 100 MiB.
const DEFAULT_MAX_MESSAGE_BYTES: usize = crate::protocol::MAX_MESSAGE_BYTES;

impl Default for ChannelOptions {
    fn default() -> Self {
        Self {
            max_receive_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_send_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            keepalive_interval: Some(Duration::from_secs(30)),
            keepalive_timeout: Duration::from_secs(30),
            keepalive_without_calls: true,
            max_pings_without_data: 2,
            max_concurrent_streams: 100,
            connect_timeout: Some(Duration::from_secs(20)),
        }
    }
}

impl ChannelOptions {
    /// Checks every field's range.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] naming the first option out of range.
    pub fn validate(&self) -> Result<(), Error> {
        const MIN_TIME: Duration = Duration::from_millis(1);
        let bad = |option: &str, value: String, range: &str| {
            Err(Error::invalid_argument(format!(
                "channel option {option} must be {range}, got {value}"
            )))
        };
        let message_limit = 1..=(u32::MAX as usize);
        if !message_limit.contains(&self.max_receive_message_bytes) {
            return bad(
                "max_receive_message_bytes",
                self.max_receive_message_bytes.to_string(),
                "1 to 4294967295 bytes",
            );
        }
        if !message_limit.contains(&self.max_send_message_bytes) {
            return bad(
                "max_send_message_bytes",
                self.max_send_message_bytes.to_string(),
                "1 to 4294967295 bytes",
            );
        }
        if let Some(interval) = self.keepalive_interval.filter(|i| *i < MIN_TIME) {
            return bad(
                "keepalive_interval",
                format!("{interval:?}"),
                "at least 1 ms (or none, to turn keepalive off)",
            );
        }
        if self.keepalive_timeout < MIN_TIME {
            return bad(
                "keepalive_timeout",
                format!("{:?}", self.keepalive_timeout),
                "at least 1 ms",
            );
        }
        if !(1..=i32::MAX as usize).contains(&self.max_concurrent_streams) {
            return bad(
                "max_concurrent_streams",
                self.max_concurrent_streams.to_string(),
                "1 to 2147483647",
            );
        }
        if let Some(limit) = self.connect_timeout.filter(|l| *l < MIN_TIME) {
            return bad(
                "connect_timeout",
                format!("{limit:?}"),
                "at least 1 ms (or none)",
            );
        }
        Ok(())
    }

    /// The keepalive the channel runs, if any.
    fn keepalive(&self) -> Option<channel::Keepalive> {
        self.keepalive_interval.map(|interval| channel::Keepalive {
            interval,
            timeout: self.keepalive_timeout,
            without_calls: self.keepalive_without_calls,
            max_pings_without_data: self.max_pings_without_data,
        })
    }
}

/// A client for one worker (Wool's `WorkerConnection`): `idle`, `stop`, `dispatch`.
///
/// Cheap to create and to share across tasks (`&self` methods, `Send + Sync`). Connections with
/// equal target, credentials and options share one pooled channel, so 1,000 connections to one
/// worker open one TCP connection.
#[derive(Debug)]
pub struct WorkerConnection {
    /// The pool key: for reloadable credentials, the one made with the material read first.
    key: Arc<PoolKey>,
    /// Reloadable credentials, looked at on each call for new material.
    reloadable: Option<WorkerCredentials>,
    /// This connection's share of its pooled channel, taken on the first call. Replaced when
    /// it belongs to another process (the connection was inherited across `fork()`); swapped
    /// without a lock, so a forked child never waits on one its parent held.
    lease: ArcSwapOption<ChannelLease>,
}

impl WorkerConnection {
    /// A plaintext connection to `target` (any form [`Target::parse`] accepts). No I/O.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a malformed target.
    pub fn new(target: &str) -> Result<Self, Error> {
        Self::with_options(target, None, ChannelOptions::default())
    }

    /// A connection over TLS when `credentials` is given, plaintext otherwise. No I/O.
    pub fn with_credentials(
        target: &str,
        credentials: Option<WorkerCredentials>,
    ) -> Result<Self, Error> {
        Self::with_options(target, credentials, ChannelOptions::default())
    }

    /// A connection with explicit channel options (TLS when `credentials` is given). No I/O.
    ///
    /// Errors: [`ErrorKind::InvalidArgument`] for a malformed target or an option out of range
    /// (the message names it).
    pub fn with_options(
        target: &str,
        credentials: Option<WorkerCredentials>,
        options: ChannelOptions,
    ) -> Result<Self, Error> {
        let target = Target::parse(target)?;
        options.validate()?;
        Ok(Self {
            key: Arc::new(PoolKey {
                target,
                tls: credentials.as_ref().map(WorkerCredentials::current),
                options,
            }),
            reloadable: credentials.filter(WorkerCredentials::is_reloadable),
            lease: ArcSwapOption::empty(),
        })
    }

    /// The parsed target.
    pub fn target(&self) -> &Target {
        &self.key.target
    }

    /// The pooled channel, taking a share of it on first use in this process, and again when
    /// reloadable credentials have new material.
    fn channel(&self) -> Result<channel::Http2Channel, Error> {
        if let Some(lease) = self.lease.load().as_ref() {
            if lease.is_current() && self.still_serves(lease) {
                return Ok(lease.channel().clone());
            }
        }
        self.renew_lease()
    }

    /// Whether the lease was made with the material the credentials serve now.
    fn still_serves(&self, lease: &ChannelLease) -> bool {
        match (&self.reloadable, &lease.key().tls) {
            (Some(credentials), Some(tls)) => credentials.still_serves(&tls.material),
            _ => true,
        }
    }

    /// Takes a share of the channel for the current key; a lease made with superseded material
    /// retires its channel (see [`ChannelLease::retire`]).
    fn renew_lease(&self) -> Result<channel::Http2Channel, Error> {
        let key = match &self.reloadable {
            Some(credentials) => Arc::new(PoolKey {
                target: self.key.target.clone(),
                tls: Some(credentials.current()),
                options: self.key.options.clone(),
            }),
            None => Arc::clone(&self.key),
        };
        let lease = Arc::new(ChannelLease::acquire(&key)?);
        let channel = lease.channel().clone();
        // Racing first calls each take a share; the one stored stays, the others are released.
        if let Some(old) = self.lease.swap(Some(lease)) {
            if old.is_current() && old.key() != &key {
                old.retire();
            }
        }
        Ok(channel)
    }

    fn client(&self) -> Result<WorkerClient<channel::Http2Channel>, Error> {
        let options = &self.key.options;
        // The channel enforces the receive limit (as RESOURCE_EXHAUSTED, gRPC's code for it);
        // tonic's own check would report OUT_OF_RANGE.
        Ok(WorkerClient::new(self.channel()?)
            .max_decoding_message_size(usize::MAX)
            .max_encoding_message_size(options.max_send_message_bytes))
    }

    /// Seconds the worker has been continuously idle (`0.0` while it has work in flight).
    /// Matches Wool's `WorkerConnection.idle`.
    ///
    /// `timeout`: the call deadline (zero is an [`ErrorKind::InvalidArgument`]); `None` waits as
    /// long as it takes.
    ///
    /// Errors: [`ErrorKind::IdleUnavailable`] when the worker predates the `idle` RPC,
    /// [`ErrorKind::Rpc`] when it answers with NaN, a negative or an infinite reading,
    /// [`ErrorKind::Transient`] when it cannot be reached or the deadline passes,
    /// [`ErrorKind::Handshake`] on TLS failures, [`ErrorKind::Rpc`] otherwise.
    pub async fn idle(&self, timeout: Option<Duration>) -> Result<f64, Error> {
        check_timeout(timeout)?;
        let mut client = self.client()?;
        let answer = with_deadline(
            Call::Idle,
            timeout,
            client.idle(small_answer(request(Void {}, timeout))),
        )
        .await?;
        let seconds = answer.into_inner().seconds;
        if !(seconds.is_finite() && seconds >= 0.0) {
            return Err(Error::new(
                ErrorKind::Rpc,
                Some(tonic::Code::Internal),
                format!(
                    "the worker answered idle with {seconds}, not a finite number of seconds >= 0"
                ),
            ));
        }
        Ok(seconds)
    }

    /// Stops (retires) the worker with `grace` for its in-flight work; returns once the worker
    /// has answered, after its drain. Matches Wool's `WorkerConnection.stop`.
    ///
    /// `timeout` is this call's own deadline, separate from `grace`: to see the answer it must
    /// exceed the grace (`None` waits as long as it takes).
    ///
    /// Errors: as [`idle`](Self::idle), except that `UNIMPLEMENTED` is an [`ErrorKind::Rpc`].
    pub async fn stop(&self, grace: Grace, timeout: Option<Duration>) -> Result<(), Error> {
        check_timeout(timeout)?;
        let mut client = self.client()?;
        let stop = StopRequest {
            timeout: grace.to_wire(),
        };
        with_deadline(
            Call::Stop,
            timeout,
            client.stop(small_answer(request(stop, timeout))),
        )
        .await?;
        // The worker is retiring and waits for its clients to hang up: do so now.
        self.channel()?.close().await;
        Ok(())
    }

    /// Runs the routine `routine` on `args` on a worker built with this library and returns its
    /// output bytes (one task: `ack`, `next`, `result`).
    ///
    /// Errors: [`ErrorKind::Routine`] when the worker refuses the task (`nack`, e.g. an unknown
    /// routine) or the routine fails (`exception`, message = the routine's error); otherwise as
    /// [`idle`](Self::idle) (a zero `timeout` is an [`ErrorKind::InvalidArgument`]; a stopping
    /// worker refuses with a [`ErrorKind::Transient`]).
    pub async fn dispatch(
        &self,
        routine: &str,
        args: Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<Vec<u8>, Error> {
        check_timeout(timeout)?;
        let mut client = self.client()?;
        let (requests, outbound) = mpsc::channel(2);
        let task = Task {
            version: PROTOCOL_VERSION.to_string(),
            id: next_task_id(),
            callable: routine.as_bytes().to_vec(),
            args,
            ..Task::default()
        };
        let _ = requests.try_send(payload(RequestPayload::Task(task)));
        let exchange = async move {
            let mut call = request(ReceiverStream::new(outbound), timeout);
            call.extensions_mut().insert(channel::StreamingCall);
            let mut responses = client.dispatch(call).await?.into_inner();
            match responses.message().await?.and_then(|r| r.payload) {
                Some(ResponsePayload::Ack(_)) => {}
                Some(ResponsePayload::Nack(nack)) => {
                    let why = nack.exception.map(|m| m.dump).unwrap_or_default();
                    return Ok(Err(routine_error("task refused", &why)));
                }
                other => return Ok(Err(protocol_violation("ack or nack", other))),
            }
            let _ = requests.send(payload(RequestPayload::Next(Void {}))).await;
            let outcome = match responses.message().await?.and_then(|r| r.payload) {
                Some(ResponsePayload::Result(result)) => Ok(result.dump),
                Some(ResponsePayload::Exception(exception)) => {
                    Err(routine_error("routine failed", &exception.dump))
                }
                other => Err(protocol_violation("result or exception", other)),
            };
            drop(requests);
            Ok(outcome)
        };
        with_deadline(Call::Dispatch, timeout, exchange).await?
    }

    /// Releases this connection's share of its pooled channel (as dropping it does).
    pub fn close(self) {}
}

fn payload(payload: RequestPayload) -> Request {
    Request {
        payload: Some(payload),
        context: None,
    }
}

/// The longest deadline the `grpc-timeout` header can carry (8 digits of hours); a longer one
/// is enforced locally only (tonic would panic formatting it).
const MAX_GRPC_TIMEOUT: Duration = Duration::from_secs(99_999_999 * 3600);

fn request<T>(message: T, timeout: Option<Duration>) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    if let Some(timeout) = timeout.filter(|t| *t <= MAX_GRPC_TIMEOUT) {
        // Tells the worker (grpc-timeout); enforced locally too.
        request
            .metadata_mut()
            .insert("grpc-timeout", grpc_timeout(timeout));
    }
    request
}

/// The `grpc-timeout` value for `timeout` (at most [`MAX_GRPC_TIMEOUT`]), byte for byte what
/// tonic's `Request::set_timeout` writes — the finest unit that keeps the number within 8
/// digits — without its `format!` and parse: this runs on every call that has a deadline.
fn grpc_timeout(timeout: Duration) -> tonic::metadata::AsciiMetadataValue {
    const MAX: u128 = 99_999_999;
    let seconds = u128::from(timeout.as_secs());
    let (mut value, unit) = [
        (timeout.as_nanos(), b'n'),
        (timeout.as_micros(), b'u'),
        (timeout.as_millis(), b'm'),
        (seconds, b'S'),
        (seconds / 60, b'M'),
    ]
    .into_iter()
    .find(|(value, _)| *value <= MAX)
    .unwrap_or((seconds / 3600, b'H'));
    let mut text = [0u8; 9];
    let mut start = 8;
    text[8] = unit;
    loop {
        start -= 1;
        text[start] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    tonic::metadata::AsciiMetadataValue::try_from(&text[start..])
        .expect("digits and a unit letter are a valid header value")
}

/// The largest answer `idle` and `stop` take: `Idle` is one double (9 bytes encoded) and
/// `stop`'s answer is empty; the rest is room for fields a later Wool may add. A worker that
/// answers with more fails the call as [`ErrorKind::Transient`] (`RESOURCE_EXHAUSTED`, as a
/// message over the receive limit), after at most this much was buffered: a sweep of many
/// endpoints holds a few KiB per poll whatever they send.
pub(crate) const SMALL_ANSWER_LIMIT: usize = 4 * 1024;

/// Bounds a call's answer to [`SMALL_ANSWER_LIMIT`].
fn small_answer<T>(mut request: tonic::Request<T>) -> tonic::Request<T> {
    request
        .extensions_mut()
        .insert(channel::AnswerLimit(SMALL_ANSWER_LIMIT));
    request
}

/// A zero deadline can never be met: the caller's mistake, not a network failure.
fn check_timeout(timeout: Option<Duration>) -> Result<(), Error> {
    match timeout {
        Some(Duration::ZERO) => Err(Error::invalid_argument("timeout must be positive")),
        _ => Ok(()),
    }
}

/// Runs a call with the local deadline and sorts a failure into its [`ErrorKind`].
async fn with_deadline<T>(
    call: Call,
    timeout: Option<Duration>,
    future: impl Future<Output = Result<T, tonic::Status>>,
) -> Result<T, Error> {
    let result = match timeout {
        Some(limit) => tokio::time::timeout(limit, future)
            .await
            .map_err(|_| Error::deadline_exceeded(limit))?,
        None => future.await,
    };
    result.map_err(|status| Error::from_status(call, &status))
}

fn routine_error(what: &str, dump: &[u8]) -> Error {
    Error::new(
        ErrorKind::Routine,
        None,
        format!("{what}: {}", String::from_utf8_lossy(dump)),
    )
}

fn protocol_violation(expected: &str, got: Option<ResponsePayload>) -> Error {
    let got = match got {
        None => "end of stream".to_string(),
        Some(payload) => format!("{payload:?}"),
    };
    Error::new(
        ErrorKind::Rpc,
        Some(tonic::Code::Internal),
        format!("dispatch protocol violation: expected {expected}, got {got}"),
    )
}

/// A task id as Wool's worker parses it: a UUID (random, version 4), in its hyphenated form.
fn next_task_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    #[test]
    fn grpc_timeout_is_written_as_tonic_writes_it() {
        let samples = [
            Duration::from_nanos(1),
            Duration::from_nanos(99_999_999),
            Duration::from_nanos(100_000_000),
            Duration::from_millis(500),
            Duration::from_secs(10),
            Duration::from_secs(30),
            Duration::from_secs(3600),
            Duration::from_secs(99_999_999),
            Duration::from_secs(100_000_000),
            Duration::from_secs(99_999_999 * 60 + 59),
            Duration::from_secs(99_999_999 * 60 + 60),
            Duration::new(123_456, 789),
            super::MAX_GRPC_TIMEOUT,
        ];
        for timeout in samples {
            let mut tonic = tonic::Request::new(());
            tonic.set_timeout(timeout);
            assert_eq!(
                Some(&super::grpc_timeout(timeout)),
                tonic.metadata().get("grpc-timeout"),
                "{timeout:?}"
            );
        }
    }
}
