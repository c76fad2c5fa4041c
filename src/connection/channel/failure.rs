//! What a failed connection or handshake is reported as: an I/O error, a TLS rejection or a
//! failed TLS handshake, each sorted into a [`TransportFailure`] with its [`Cause`]. (An h2
//! error on an open connection is sorted by [`ConnectionState::failure`](super::connection::ConnectionState::failure),
//! which knows what the connection saw.)

use crate::connection::error::{Cause, TransportFailure};

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
