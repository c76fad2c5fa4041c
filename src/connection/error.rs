//! The error kinds Wool callers act on, and how a failed gRPC call maps to them.
//!
//! Matches the classification of Wool's Python client (WIRE.md, "Client error kinds"):
//! `UNIMPLEMENTED` on `idle` → idle unavailable; `UNAUTHENTICATED`, or a failure whose text
//! carries TLS evidence → handshake; `UNAVAILABLE`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED`
//! → transient; anything else → RPC error.

use std::fmt;

use tonic::Code;

/// What a caller should do about a failed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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

/// Words whose presence in a failure's text marks it as a TLS failure (Wool's list, plus the
/// ways rustls reports a rejected client certificate).
const TLS_EVIDENCE: &[&str] = &[
    "ssl",
    "tls",
    "handshake",
    "certificate",
    "x509",
    "alpn",
    "verification check failed",
    "alert",
    "unknownissuer",
    "invalid peer",
    // rustls on reading plaintext HTTP/2 where a TLS record was expected (TLS client, plaintext worker)
    "corrupt message",
];

/// Which RPC failed: only `idle` turns `UNIMPLEMENTED` into [`ErrorKind::IdleUnavailable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    Idle,
    Stop,
    Dispatch,
}

impl Error {
    pub(crate) fn new(kind: ErrorKind, code: Option<Code>, message: impl Into<String>) -> Self {
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

    /// Sorts a failed call's status into a kind, as Wool's client does.
    pub(crate) fn from_status(call: Call, status: &tonic::Status) -> Self {
        let message = describe(status);
        let code = transport_code(status.code(), &message);
        let kind = classify(call, code, &message);
        Self::new(kind, Some(code), message)
    }
}

/// tonic reports a connection that broke under a call (closed, reset, broken pipe) as
/// `CANCELLED` or `UNKNOWN` with a transport error; gRPC's C core — and so Wool's client —
/// reports it as `UNAVAILABLE`. Use the latter, so callers see one code for one cause.
///
/// Likewise a worker shutting down (after a stop) sends HTTP/2 GOAWAY with NO_ERROR, and h2
/// fails the calls it had not taken with that reason, which tonic reports as `INTERNAL`; for
/// gRPC such a call was never processed: `UNAVAILABLE`.
fn transport_code(code: Code, text: &str) -> Code {
    let broken_transport = text.contains("transport error") || text.contains("connection error");
    let going_away = text.contains("connection error received: not a result of an error");
    match code {
        Code::Cancelled | Code::Unknown if broken_transport => Code::Unavailable,
        Code::Internal if going_away => Code::Unavailable,
        other => other,
    }
}

fn classify(call: Call, code: Code, text: &str) -> ErrorKind {
    let lower = text.to_ascii_lowercase();
    let tls_evidence = TLS_EVIDENCE.iter().any(|word| lower.contains(word));
    match code {
        Code::Unimplemented if call == Call::Idle => ErrorKind::IdleUnavailable,
        Code::Unauthenticated => ErrorKind::Handshake,
        Code::Unavailable | Code::Unknown | Code::Internal if tls_evidence => ErrorKind::Handshake,
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

    #[test]
    fn statuses_sort_into_wools_kinds() {
        let kind = |call, code, text: &str| {
            Error::from_status(call, &tonic::Status::new(code, text)).kind()
        };
        assert_eq!(
            kind(Call::Idle, Code::Unimplemented, ""),
            ErrorKind::IdleUnavailable
        );
        assert_eq!(kind(Call::Stop, Code::Unimplemented, ""), ErrorKind::Rpc);
        assert_eq!(
            kind(Call::Idle, Code::Unauthenticated, ""),
            ErrorKind::Handshake
        );
        assert_eq!(
            kind(
                Call::Idle,
                Code::Unavailable,
                "invalid peer certificate: UnknownIssuer"
            ),
            ErrorKind::Handshake
        );
        assert_eq!(
            kind(Call::Idle, Code::Unavailable, "connection refused"),
            ErrorKind::Transient
        );
        assert_eq!(
            kind(Call::Idle, Code::DeadlineExceeded, ""),
            ErrorKind::Transient
        );
        assert_eq!(
            kind(Call::Idle, Code::ResourceExhausted, ""),
            ErrorKind::Transient
        );
        assert_eq!(kind(Call::Idle, Code::Internal, "boom"), ErrorKind::Rpc);
        assert_eq!(kind(Call::Dispatch, Code::NotFound, ""), ErrorKind::Rpc);
        let broken = Error::from_status(
            Call::Idle,
            &tonic::Status::new(
                Code::Cancelled,
                "operation was canceled: transport error: connection closed",
            ),
        );
        assert_eq!(
            (broken.kind(), broken.code()),
            (ErrorKind::Transient, Some(Code::Unavailable))
        );
    }

    #[test]
    fn a_call_refused_by_a_worker_going_away_is_transient() {
        let goaway = Error::from_status(
            Call::Idle,
            &tonic::Status::new(
                Code::Internal,
                "h2 protocol error: http2 error: connection error received: not a result of an error",
            ),
        );
        assert_eq!(
            (goaway.kind(), goaway.code()),
            (ErrorKind::Transient, Some(Code::Unavailable))
        );
        let internal = Error::from_status(Call::Idle, &tonic::Status::new(Code::Internal, "boom"));
        assert_eq!(internal.kind(), ErrorKind::Rpc);
    }
}
