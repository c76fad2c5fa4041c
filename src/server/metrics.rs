//! The plaintext metrics endpoint (`--metrics-listen` of the worker and the scaler): HTTP/1.1,
//! every request answered with what the server's `scrape` makes (the Prometheus text
//! exposition), its connections bounded as a side port's.

use std::sync::Arc;

use tokio::net::TcpListener;

use super::accept::AcceptErrors;
use super::eviction::{ConnectionLimits, Connections};
use super::io::Heard;

/// How long a metrics client has to send a request's header (each request's, on a kept-alive
/// connection too, so an idle one is closed after this long): 5 s.
pub const HEADER_READ_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connections open at once to a metrics endpoint: 64 (scrapers hold one or two each). One
/// more displaces the one never heard from (oldest first), else the one least recently heard
/// from, as on the health port ([`server`](super)).
pub const MAX_METRICS_CONNECTIONS: usize = 64;

/// Serves `GET /metrics` (any path, in fact) over plaintext HTTP/1.1 on `listener` until
/// `shutdown`, each answer made by `scrape`: at most [`MAX_METRICS_CONNECTIONS`] connections
/// at once, each request's header within [`HEADER_READ_TIMEOUT`], and a pause after an error
/// from `accept` (as the gRPC listeners: [`ACCEPT_ERROR_PAUSE`](super::ACCEPT_ERROR_PAUSE)).
pub(crate) fn serve(
    listener: TcpListener,
    scrape: Arc<dyn Fn() -> String + Send + Sync>,
    shutdown: tokio_util::sync::CancellationToken,
) {
    use http_body_util::Full;
    use hyper::body::Bytes;
    let connections = Connections::new(ConnectionLimits {
        max_connections: MAX_METRICS_CONNECTIONS,
        evict_established: true,
    });
    tokio::spawn(async move {
        let mut errors = AcceptErrors::default();
        loop {
            let (stream, peer) = tokio::select! {
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        errors.pause("metrics", &error).await;
                        continue;
                    }
                },
                () = shutdown.cancelled() => return,
            };
            errors.accepted("metrics");
            // A side port always makes room, so there is always a slot.
            let Some(mut slot) = connections.take(Some(peer.ip())) else {
                continue;
            };
            slot.establish();
            let stream = Heard::new(stream, &slot);
            let scrape = Arc::clone(&scrape);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |_request| {
                    let body = scrape();
                    async move {
                        hyper::Response::builder()
                            .header(
                                "content-type",
                                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                            )
                            .body(Full::new(Bytes::from(body)))
                    }
                });
                let connection = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(HEADER_READ_TIMEOUT)
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                tokio::select! {
                    _ = connection => {}
                    () = slot.evicted() => {}
                    () = shutdown.cancelled() => {}
                }
            });
        }
    });
}
