//! The error kinds Wool callers act on, and how a failed call is sorted into them — in one
//! place, from types:
//!
//! - a failure this client observed itself (the socket, TLS, HTTP/2, keepalive) travels as a
//!   [`TransportFailure`] whose [`Cause`] decides the kind and the gRPC code;
//! - a status the worker sent is sorted by its gRPC code, as Wool's client does (WIRE.md,
//!   "Client error kinds"): `UNIMPLEMENTED` on `idle` → idle unavailable; `UNAUTHENTICATED` →
//!   handshake; `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED` → transient; anything
//!   else → RPC error;
//! - the local deadline is `DEADLINE_EXCEEDED` (transient).
//!
//! No kind depends on how a message is worded or on the target's spelling. (Wool's client also
//! searches `UNAVAILABLE` texts for words such as "ssl" because grpcio gives it nothing else;
//! here every TLS failure of our own is typed, so a worker at `unix:/run/tls/w.sock` that has
//! gone away is transient, not a handshake failure.)

use std::fmt;

use tonic::Code;

/// What a caller should do about a failed call. New kinds may be added (as `Cancelled` was):
/// a `match` needs a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The caller's own mistake (bad target, bad PEM, non-positive timeout); nothing was sent.
    InvalidArgument,
    /// The worker predates the `idle` RPC (`UNIMPLEMENTED`): not a health fault.
    IdleUnavailable,
    /// The worker could not be reached in time or is shutting down (`UNAVAILABLE`,
    /// `DEADLINE_EXCEEDED` including the local deadline, `RESOURCE_EXHAUSTED`): skip it, keep it.
    Transient,
    /// TLS, mutual TLS or identity failure seen by this client: skip the worker, keep it.
    Handshake,
    /// Any other gRPC failure: Wool evicts such a worker.
    Rpc,
    /// A dispatched task was refused (`nack`) or its routine failed (`exception`).
    Routine,
    /// The caller cancelled the call before it completed (C `wool_cancel`); its HTTP/2 stream
    /// was reset.
    Cancelled,
}

impl ErrorKind {
    /// A short lower-case name (`"transient"`, `"idle unavailable"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::IdleUnavailable => "idle unavailable",
            ErrorKind::Transient => "transient",
            ErrorKind::Handshake => "handshake",
            ErrorKind::Rpc => "rpc error",
            ErrorKind::Routine => "routine error",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed call: its [`ErrorKind`], the gRPC status code when one was involved, and a message
/// that includes the transport's own explanation (e.g. `tcp connect error: Connection refused`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct Error {
    kind: ErrorKind,
    code: Option<Code>,
    message: String,
}

/// Which RPC failed: only `idle` turns `UNIMPLEMENTED` into [`ErrorKind::IdleUnavailable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Idle,
    Stop,
    Dispatch,
}

impl Error {
    /// An error of `kind`, with the gRPC status code that caused it if any: for code that
    /// reports its own failures in this type (the C ABI's queue and runtime do).
    pub fn new(kind: ErrorKind, code: Option<Code>, message: impl Into<String>) -> Self {
        Self {
            kind,
            code,
            message: message.into(),
        }
    }

    /// The caller's mistake, detected before any I/O.
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, None, message)
    }

    /// What to do about it.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The gRPC status code (a local deadline reports `DEADLINE_EXCEEDED`); `None` for invalid
    /// arguments and routine failures that rode a successful stream.
    pub fn code(&self) -> Option<Code> {
        self.code
    }

    /// The message, without the kind prefix.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The local deadline of `seconds` ran out (Wool counts it as `DEADLINE_EXCEEDED`).
    pub(crate) fn deadline_exceeded(timeout: std::time::Duration) -> Self {
        Self::new(
            ErrorKind::Transient,
            Some(Code::DeadlineExceeded),
            format!(
                "deadline exceeded: no answer within {:.3} s",
                timeout.as_secs_f64()
            ),
        )
    }

    /// Sorts a failed call's status into a kind: by the [`Cause`] of a [`TransportFailure`]
    /// in its source chain when this client observed the failure itself, else by the gRPC code
    /// the worker sent.
    pub(crate) fn from_status(call: Call, status: &tonic::Status) -> Self {
        let message = describe(status);
        match transport_failure(status) {
            Some(failure) => Self::new(failure.cause.kind(), Some(failure.cause.code()), message),
            None => Self::new(classify(call, status.code()), Some(status.code()), message),
        }
    }
}

/// A failure of the transport under a call, observed by this client itself. Its [`Cause`] (and
/// only that) decides the [`ErrorKind`]; the message names the target and what happened.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message}")]
pub(crate) struct TransportFailure {
    pub(crate) cause: Cause,
    message: String,
}

impl TransportFailure {
    pub(crate) fn new(cause: Cause, message: impl Into<String>) -> Self {
        Self {
            cause,
            message: message.into(),
        }
    }
}

/// What went wrong under a call, decided from the error's type where it happened: an I/O
/// error, a rustls error, an HTTP/2 reason, the keepalive timer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// The worker could not be reached or the connection broke: connect refused or reset, a
    /// name that does not resolve, no route, a closed connection, the connect timeout.
    Unreachable,
    /// The worker stopped answering keepalive PINGs (frozen, or its network path cut).
    KeepaliveTimeout,
    /// The worker is going away (HTTP/2 GOAWAY) or refused the stream before processing it.
    GoingAway,
    /// TLS failed: a rustls error (a certificate that fails verification, a fatal alert such as
    /// a rejected client certificate, a non-TLS answer), no HTTP/2 over ALPN, or TLS on one side
    /// and plaintext on the other.
    Tls,
    /// Too much: the worker reset the stream with ENHANCE_YOUR_CALM (it is overloaded), or its
    /// answer holds a message over `max_receive_message_bytes`.
    Exhausted,
    /// The stream was reset with CANCEL.
    Cancelled,
    /// An HTTP/2 protocol failure (a malformed frame from the worker, or a local h2 error).
    Protocol,
}

impl Cause {
    /// The gRPC code gRPC's own client reports for this cause (TLS failures are `UNAVAILABLE`
    /// there too, and RST_STREAM reasons follow the gRPC-over-HTTP/2 mapping).
    pub(crate) fn code(self) -> Code {
        match self {
            Cause::Unreachable | Cause::KeepaliveTimeout | Cause::GoingAway | Cause::Tls => {
                Code::Unavailable
            }
            Cause::Exhausted => Code::ResourceExhausted,
            Cause::Cancelled => Code::Cancelled,
            Cause::Protocol => Code::Internal,
        }
    }

    /// What a caller does about it.
    pub(crate) fn kind(self) -> ErrorKind {
        match self {
            Cause::Tls => ErrorKind::Handshake,
            Cause::Cancelled | Cause::Protocol => ErrorKind::Rpc,
            Cause::Unreachable | Cause::KeepaliveTimeout | Cause::GoingAway | Cause::Exhausted => {
                ErrorKind::Transient
            }
        }
    }
}

/// The [`TransportFailure`] in a status's source chain, if this client made the status from one.
fn transport_failure(status: &tonic::Status) -> Option<&TransportFailure> {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if let Some(failure) = error.downcast_ref::<TransportFailure>() {
            return Some(failure);
        }
        source = error.source();
    }
    None
}

/// A status the worker sent, by its gRPC code alone.
fn classify(call: Call, code: Code) -> ErrorKind {
    match code {
        Code::Unimplemented if call == Call::Idle => ErrorKind::IdleUnavailable,
        Code::Unauthenticated => ErrorKind::Handshake,
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted => {
            ErrorKind::Transient
        }
        _ => ErrorKind::Rpc,
    }
}

/// The status message followed by its source chain (`transport error: tcp connect error: ...`),
/// skipping links that only repeat the previous one.
fn describe(status: &tonic::Status) -> String {
    let mut text = status.message().to_string();
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        let link = error.to_string();
        if !link.is_empty() && !text.contains(&link) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(&link);
        }
        source = error.source();
    }
    if text.is_empty() {
        text = format!("{:?}", status.code());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent(call: Call, code: Code, text: &str) -> Error {
        Error::from_status(call, &tonic::Status::new(code, text))
    }

    #[test]
    fn statuses_from_the_worker_sort_by_code_alone() {
        let kind = |call, code| sent(call, code, "").kind();
        assert_eq!(
            kind(Call::Idle, Code::Unimplemented),
            ErrorKind::IdleUnavailable
        );
        assert_eq!(kind(Call::Stop, Code::Unimplemented), ErrorKind::Rpc);
        assert_eq!(
            kind(Call::Idle, Code::Unauthenticated),
            ErrorKind::Handshake
        );
        assert_eq!(kind(Call::Idle, Code::Unavailable), ErrorKind::Transient);
        assert_eq!(
            kind(Call::Idle, Code::DeadlineExceeded),
            ErrorKind::Transient
        );
        assert_eq!(
            kind(Call::Idle, Code::ResourceExhausted),
            ErrorKind::Transient
        );
        assert_eq!(kind(Call::Idle, Code::Internal), ErrorKind::Rpc);
        assert_eq!(kind(Call::Dispatch, Code::NotFound), ErrorKind::Rpc);
        // The wording of a worker's message never changes the kind.
        for words in ["ssl", "TLS handshake failed", "certificate", "x509", "alpn"] {
            assert_eq!(
                sent(Call::Idle, Code::Unavailable, words).kind(),
                ErrorKind::Transient
            );
            assert_eq!(
                sent(Call::Idle, Code::Internal, words).kind(),
                ErrorKind::Rpc
            );
        }
    }

    #[test]
    fn failures_seen_by_the_client_sort_by_their_cause() {
        let observed = |cause, text: &str| {
            Error::from_status(
                Call::Idle,
                &tonic::Status::from_error(Box::new(TransportFailure::new(cause, text))),
            )
        };
        // Words Wool's text rule looks for, in a target that has merely gone away.
        let gone = observed(
            Cause::Unreachable,
            "cannot connect to unix:/run/tls/ssl-handshake-certificate-x509-alpn.sock: No such file",
        );
        assert_eq!(
            (gone.kind(), gone.code()),
            (ErrorKind::Transient, Some(Code::Unavailable))
        );
        assert!(gone.message().contains("/run/tls/"), "{}", gone.message());
        let tls = observed(Cause::Tls, "invalid peer certificate: UnknownIssuer");
        assert_eq!(
            (tls.kind(), tls.code()),
            (ErrorKind::Handshake, Some(Code::Unavailable))
        );
        let silent = observed(Cause::KeepaliveTimeout, "stopped answering keepalive pings");
        assert_eq!(silent.kind(), ErrorKind::Transient);
        assert_eq!(observed(Cause::GoingAway, "").kind(), ErrorKind::Transient);
        let calm = observed(Cause::Exhausted, "");
        assert_eq!(
            (calm.kind(), calm.code()),
            (ErrorKind::Transient, Some(Code::ResourceExhausted))
        );
        assert_eq!(observed(Cause::Protocol, "").kind(), ErrorKind::Rpc);
        assert_eq!(observed(Cause::Cancelled, "").code(), Some(Code::Cancelled));
    }
}
