//! The response body a call reads: DATA frames, their flow-control capacity released and their
//! messages held to the receive limit, then the trailers with the gRPC status made readable.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http_body::{Body, Frame};

use super::keepalive::CallOnConnection;
use super::limit::{MessageSizes, Refused};
use super::status::readable_status;
use crate::connection::error::{Cause, TransportFailure};

/// The response body: DATA frames (their flow-control capacity released as they arrive), then
/// the trailers that carry the gRPC status.
pub(crate) struct ResponseBody {
    pub(super) recv: h2::RecvStream,
    pub(super) data_done: bool,
    /// A streaming call's turn, released when the response body is done with.
    pub(super) _stream_turn: Option<tokio::sync::OwnedSemaphorePermit>,
    /// The call's place on its connection (and the connection's state, for failures).
    pub(super) call: CallOnConnection,
    /// Checks each gRPC message's length prefix against the receive limit.
    pub(super) messages: MessageSizes,
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = TransportFailure;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, TransportFailure>>> {
        if !self.data_done {
            match ready!(self.recv.poll_data(cx)) {
                Some(Ok(data)) => {
                    let _ = self.recv.flow_control().release_capacity(data.len());
                    let refused = self.messages.follow(&data);
                    let target = &self.call.state.target;
                    let limit = self.messages.limit;
                    match refused {
                        Ok(()) => {}
                        Err(Refused::TooLarge(length)) => {
                            return Poll::Ready(Some(Err(TransportFailure::new(
                                Cause::Exhausted,
                                format!(
                                    "the worker at {target} answered with a message of \
                                     {length} bytes, over this call's receive limit ({limit} \
                                     bytes: max_receive_message_bytes, or less for an answer \
                                     of known size)"
                                ),
                            ))));
                        }
                        Err(Refused::Compressed(encoding)) => {
                            return Poll::Ready(Some(Err(TransportFailure::new(
                                Cause::Protocol,
                                format!(
                                    "the worker at {target} answered with a message compressed \
                                     as {encoding:?}, which this client never offered (it \
                                     accepts uncompressed messages only)"
                                ),
                            ))));
                        }
                    }
                    return Poll::Ready(Some(Ok(Frame::data(data))));
                }
                Some(Err(error)) => return Poll::Ready(Some(Err(self.call.state.failure(&error)))),
                None => self.data_done = true,
            }
        }
        match ready!(self.recv.poll_trailers(cx)) {
            Ok(Some(mut trailers)) => {
                readable_status(&mut trailers);
                Poll::Ready(Some(Ok(Frame::trailers(trailers))))
            }
            Ok(None) => Poll::Ready(None),
            Err(error) => Poll::Ready(Some(Err(self.call.state.failure(&error)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.recv.is_end_stream()
    }
}
