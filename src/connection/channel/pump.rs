//! The request body pump: moving a request body into its HTTP/2 stream, at once when it is
//! ready (a unary request) or from a task (a streaming one).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::Body;

/// Moves a request body into its HTTP/2 stream, holding back one frame so that the last one
/// carries END_STREAM (a unary request becomes a single DATA frame).
pub(super) struct BodyPump {
    pub(super) body: tonic::body::Body,
    pub(super) stream: h2::SendStream<Bytes>,
    pub(super) held: Option<Bytes>,
}

impl BodyPump {
    /// Sends what the body has ready. `Ready(())` when the body is fully sent (or failed);
    /// `Pending` when it waits for more of the body.
    pub(super) fn poll_ready_part(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            let frame = match Pin::new(&mut self.body).poll_frame(cx) {
                Poll::Ready(frame) => frame,
                Poll::Pending => {
                    // Nothing more yet (a streaming request): what we hold must go now, or a
                    // peer waiting for it (e.g. a worker that acks a task) never sees it.
                    if let Some(held) = self.held.take() {
                        let _ = self.stream.send_data(held, false);
                    }
                    return Poll::Pending;
                }
            };
            match frame {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if let Some(previous) = self.held.replace(data) {
                            if self.stream.send_data(previous, false).is_err() {
                                return Poll::Ready(());
                            }
                        }
                    }
                    Err(frame) => {
                        if let Some(held) = self.held.take() {
                            let _ = self.stream.send_data(held, false);
                        }
                        if let Ok(trailers) = frame.into_trailers() {
                            let _ = self.stream.send_trailers(trailers);
                        }
                        return Poll::Ready(());
                    }
                },
                Some(Err(error)) => {
                    tracing::debug!("request body failed: {error}");
                    self.stream.send_reset(h2::Reason::CANCEL);
                    return Poll::Ready(());
                }
                None => {
                    let _ = self
                        .stream
                        .send_data(self.held.take().unwrap_or_default(), true);
                    return Poll::Ready(());
                }
            }
        }
    }

    /// Sends the rest of a body that was not ready at once (a streaming request).
    pub(super) async fn run(mut self) {
        std::future::poll_fn(|cx| self.poll_ready_part(cx)).await;
    }
}

/// Polls a future once, with a no-op waker: whether it is still pending. The body's waker is
/// taken over by the pump task when it is.
pub(super) trait NowOrNeverPending {
    fn now_or_never_pending(self) -> bool;
}

impl<F: Future<Output = ()>> NowOrNeverPending for F {
    fn now_or_never_pending(self) -> bool {
        let mut future = std::pin::pin!(self);
        future
            .as_mut()
            .poll(&mut Context::from_waker(std::task::Waker::noop()))
            .is_pending()
    }
}
