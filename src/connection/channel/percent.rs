//! `grpc-message` percent coding: decoding as tonic reads it, encoding as gRPC sends it.

/// `grpc-message` percent-decoding as tonic does it: `%` and two hex digits make a byte, any
/// other `%` stands for itself (the `percent-encoding` crate's reading).
pub(super) fn percent_decode(bytes: &[u8]) -> Vec<u8> {
    percent_encoding::percent_decode(bytes).collect()
}

/// What gRPC percent-encodes in `grpc-message`: everything but printable ASCII, and `%`.
const GRPC_MESSAGE_ESCAPED: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%');

/// `text` percent-encoded as gRPC sends `grpc-message`: printable ASCII but `%` as is, every
/// other byte of its UTF-8 as `%XX`.
pub(super) fn percent_encoded(text: &str) -> http::HeaderValue {
    let encoded = percent_encoding::utf8_percent_encode(text, GRPC_MESSAGE_ESCAPED).to_string();
    http::HeaderValue::from_str(&encoded).expect("printable ASCII is a header value")
}
