//! The receive limit: following the gRPC messages in a response's DATA and refusing one over
//! the limit as its length prefix arrives, or one compressed in an encoding never offered.

/// Follows the gRPC length-prefixed messages in a response's DATA (1 flag byte, 4 length
/// bytes, the message) and refuses a message over the limit as soon as its prefix arrives,
/// before it is buffered: as gRPC's client does, with `RESOURCE_EXHAUSTED`. Also refuses a
/// compressed message (flag bit 0) in an encoding this client never offered (see
/// [`unoffered_encoding`]).
pub(super) struct MessageSizes {
    pub(super) limit: usize,
    /// The `grpc-encoding` the worker named that this client does not decode, if any.
    encoding: Option<String>,
    prefix: [u8; 5],
    prefix_len: usize,
    /// Bytes of the current message still to come.
    body_left: usize,
}

impl MessageSizes {
    pub(super) fn new(limit: usize, encoding: Option<String>) -> Self {
        Self {
            limit,
            encoding,
            prefix: [0; 5],
            prefix_len: 0,
            body_left: 0,
        }
    }

    /// Follows `data`; a message in it that must be refused, if one starts there.
    pub(super) fn follow(&mut self, mut data: &[u8]) -> Result<(), Refused> {
        while !data.is_empty() {
            if self.body_left > 0 {
                let taken = self.body_left.min(data.len());
                self.body_left -= taken;
                data = &data[taken..];
                continue;
            }
            let taken = (5 - self.prefix_len).min(data.len());
            self.prefix[self.prefix_len..self.prefix_len + taken].copy_from_slice(&data[..taken]);
            self.prefix_len += taken;
            data = &data[taken..];
            if self.prefix_len == 5 {
                self.prefix_len = 0;
                let length = u32::from_be_bytes([
                    self.prefix[1],
                    self.prefix[2],
                    self.prefix[3],
                    self.prefix[4],
                ]) as usize;
                if length > self.limit {
                    return Err(Refused::TooLarge(length));
                }
                if self.prefix[0] & 1 != 0 {
                    if let Some(encoding) = &self.encoding {
                        return Err(Refused::Compressed(encoding.clone()));
                    }
                }
                self.body_left = length;
            }
        }
        Ok(())
    }
}

/// Why [`MessageSizes`] refused a message.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refused {
    /// Its length prefix, over the limit.
    TooLarge(usize),
    /// Compressed with this encoding, which this client never offered.
    Compressed(String),
}

/// Takes out of a response's head a `grpc-encoding` other than `identity`, returning it: this
/// client offers no compression (it sends no `grpc-accept-encoding`), so a worker must not
/// compress. tonic would fail the call as UNIMPLEMENTED on seeing the header, before any
/// message — which on `idle` would read as "the worker predates idle" (idle unavailable),
/// and would refuse even messages sent uncompressed (flag 0), which gRPC allows under any
/// encoding, and the status of a trailers-only answer. Without the header tonic takes what it
/// can; a message actually compressed is refused by [`MessageSizes`] as a protocol failure.
pub(super) fn unoffered_encoding(headers: &mut http::HeaderMap) -> Option<String> {
    static ENCODING: http::HeaderName = http::HeaderName::from_static("grpc-encoding");
    let encoding = headers.get(&ENCODING)?;
    if encoding.as_bytes() == b"identity" {
        return None;
    }
    let name = String::from_utf8_lossy(encoding.as_bytes()).into_owned();
    headers.remove(&ENCODING);
    Some(name)
}

#[cfg(test)]
mod tests {
    use super::{MessageSizes, Refused};

    #[test]
    fn message_sizes_are_followed_across_data_frames() {
        let framed = |length: u32| {
            let mut bytes = vec![0];
            bytes.extend(length.to_be_bytes());
            bytes.extend(std::iter::repeat_n(7, length as usize));
            bytes
        };
        let mut sizes = MessageSizes::new(9, None);
        let two = [framed(9), framed(0), framed(3)].concat();
        for chunk in two.chunks(2) {
            assert_eq!(sizes.follow(chunk), Ok(()));
        }
        let over = framed(10);
        assert_eq!(sizes.follow(&over[..3]), Ok(()));
        assert_eq!(sizes.follow(&over[3..]), Err(Refused::TooLarge(10)));
        // A compressed message is refused only when the worker named an encoding we never
        // offered (with none named, tonic refuses the flag itself).
        let mut compressed = framed(3);
        compressed[0] = 1;
        assert_eq!(MessageSizes::new(9, None).follow(&compressed), Ok(()));
        assert_eq!(
            MessageSizes::new(9, Some("gzip".into())).follow(&compressed),
            Err(Refused::Compressed("gzip".into()))
        );
        assert_eq!(
            MessageSizes::new(9, Some("gzip".into())).follow(&framed(3)),
            Ok(())
        );
    }
}
