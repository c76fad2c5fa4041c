//! What a failed connection or handshake is reported as: an h2 error on a connection, an I/O
//! error, a TLS rejection or a failed TLS handshake, each sorted into a [`TransportFailure`]
//! with its [`Cause`].

use std::sync::atomic::Ordering;

use super::connection::ConnectionState;
use crate::connection::error::{Cause, TransportFailure};

impl ConnectionState {
    /// The [`TransportFailure`] for an h2 error on this connection, sorted by the error's type.
    pub(super) fn failure(&self, error: &h2::Error) -> TransportFailure {
        let target = &self.target;
        if self.keepalive_expired.load(Ordering::Acquire) {
            let timeout = self.keepalive.map(|k| k.timeout).unwrap_or_default();
            return TransportFailure::new(
                Cause::KeepaliveTimeout,
                format!(
                    "the worker at {target} stopped answering keepalive pings (no PING ack \
                     within {:.3} s): it is frozen or its network path is cut",
                    timeout.as_secs_f64()
                ),
            );
        }
        if let Some(reason) = self.tls_failure.get() {
            return tls_rejection(target, reason);
        }
        if self.peer_spoke_tls.load(Ordering::Acquire) {
            return TransportFailure::new(
                Cause::Tls,
                format!(
                    "TLS mismatch: the worker at {target} answered with TLS, but this \
                     connection is plaintext (give the connection TLS credentials)"
                ),
            );
        }
        if let Some(io) = error.get_io() {
            return io_failure(target, "connection", io);
        }
        let reason = error.reason().unwrap_or(h2::Reason::INTERNAL_ERROR);
        let cause = if error.is_go_away() && error.is_remote() {
            Cause::GoingAway
        } else if error.is_reset() && error.is_remote() {
            match reason {
                h2::Reason::REFUSED_STREAM => Cause::GoingAway,
                h2::Reason::CANCEL => Cause::Cancelled,
                h2::Reason::ENHANCE_YOUR_CALM => Cause::Exhausted,
                _ => Cause::Protocol,
            }
        } else {
            Cause::Protocol
        };
        TransportFailure::new(
            cause,
            format!("HTTP/2 with the worker at {target}: {error}"),
        )
    }
}

/// A TLS failure after the handshake: the worker refused this client (its certificate, most
/// often: not signed by a CA the worker trusts, or missing).
pub(super) fn tls_rejection(target: &str, reason: &str) -> TransportFailure {
    TransportFailure::new(
        Cause::Tls,
        format!("TLS with the worker at {target} failed: {reason}"),
    )
}

/// An I/O failure on the way to or with the worker: a TLS failure when rustls reports one
/// (the error it wraps is a `rustls::Error`), else the worker is unreachable.
pub(super) fn io_failure(target: &str, what: &str, error: &std::io::Error) -> TransportFailure {
    let tls = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>());
    match tls {
        Some(tls) => TransportFailure::new(
            Cause::Tls,
            format!("TLS with the worker at {target} failed: {tls}"),
        ),
        None => TransportFailure::new(
            Cause::Unreachable,
            format!("{what} to the worker at {target} failed: {error}"),
        ),
    }
}

/// A TLS handshake that failed: the worker rejected us or we rejected it (a rustls error), or
/// it hung up in the middle (a plaintext worker does); anything else is a broken connection.
pub(super) fn tls_handshake_failure(target: &str, error: &std::io::Error) -> TransportFailure {
    if error.kind() == std::io::ErrorKind::UnexpectedEof {
        return TransportFailure::new(
            Cause::Tls,
            format!(
                "TLS handshake with {target}: the worker closed the connection (does it \
                 serve plaintext?)"
            ),
        );
    }
    let failure = io_failure(target, "TLS handshake", error);
    let corrupt = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<tokio_rustls::rustls::Error>())
        .is_some_and(|tls| matches!(tls, tokio_rustls::rustls::Error::InvalidMessage(_)));
    if failure.cause == Cause::Tls {
        let hint = if corrupt {
            " (a plaintext worker answers TLS with HTTP/2 bytes, which TLS reads as a corrupt \
             message)"
        } else {
            ""
        };
        TransportFailure::new(
            Cause::Tls,
            format!("TLS handshake with {target} failed: {error}{hint}"),
        )
    } else {
        failure
    }
}
