//! Accepts the HTTP/2 `:authority` that real gRPC clients send over Unix sockets.
//!
//! grpcio (and so Wool's Python client) sends the percent-encoded socket path as `:authority`
//! when it dials `unix:PATH` (e.g. `%2Ftmp%2Fw.sock`). That is not a valid URI authority, and the
//! `h2` crate under tonic resets such a stream with `PROTOCOL_ERROR` before any service code runs
//! (the client sees `INTERNAL`, RST_STREAM code 1). For a Unix socket peer the authority carries
//! no information (the path already names the peer), so this adapter, placed between the Unix
//! socket and the HTTP/2 server, replaces an invalid literal `:authority` value in each request's
//! HEADERS frame with a same-length valid one (`_` for every byte a URI authority may not hold).
//! Keeping the length keeps both HPACK dynamic tables in step. Frames are released to the server
//! whole for HEADERS, as they arrive for everything else; nothing is ever dropped or reordered.
//! A HEADERS frame longer than [`MAX_REWRITTEN_FRAME`] (h2's frame size limit) passes through
//! untouched, as it arrives, for h2 to refuse: what the adapter holds is bounded by that size
//! plus one read.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tonic::transport::server::Connected;

/// The HTTP/2 client connection preface, passed through untouched.
const PREFACE_LEN: usize = 24;
const FRAME_HEADER_LEN: usize = 9;
const FRAME_HEADERS: u8 = 0x1;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;
/// HPACK static table index of `:authority`.
const AUTHORITY_INDEX: u64 = 1;
const READ_CHUNK: usize = 16 * 1024;
/// The longest HEADERS frame rewritten (and so held whole): 16 KiB, the server's
/// `SETTINGS_MAX_FRAME_SIZE` (h2's default, which the servers keep), so every frame h2 would
/// accept is seen whole. A longer one is a `FRAME_SIZE_ERROR` for h2 and passes untouched.
pub(crate) const MAX_REWRITTEN_FRAME: usize = 16 * 1024;

/// Where the scanner stands in the inbound HTTP/2 byte stream.
#[derive(Debug, Clone, Copy)]
enum Scan {
    /// Inside the connection preface, this many bytes still to pass.
    Preface(usize),
    /// At the start of a frame header.
    FrameHeader,
    /// Inside a frame payload that needs no rewriting, this many bytes still to pass.
    Payload(usize),
}

/// An IO stream whose inbound HTTP/2 HEADERS frames get a valid `:authority` (see module docs).
#[derive(Debug)]
pub(crate) struct LenientAuthority<T> {
    inner: T,
    /// Bytes read from `inner` and not yet handed to the reader.
    pending: Vec<u8>,
    /// How many bytes at the front of `pending` are scanned and may be handed out.
    releasable: usize,
    scan: Scan,
}

impl<T> LenientAuthority<T> {
    pub(crate) fn new(inner: T) -> Self {
        Self {
            inner,
            pending: Vec::new(),
            releasable: 0,
            scan: Scan::Preface(PREFACE_LEN),
        }
    }

    /// Advances over `pending`, rewriting whole HEADERS frames, as far as the bytes allow.
    fn scan_pending(&mut self) {
        loop {
            let available = self.pending.len() - self.releasable;
            match self.scan {
                Scan::Preface(left) | Scan::Payload(left) => {
                    let step = left.min(available);
                    self.releasable += step;
                    self.scan = if step == left {
                        Scan::FrameHeader
                    } else {
                        Scan::Payload(left - step)
                    };
                    if step < left {
                        return;
                    }
                }
                Scan::FrameHeader => {
                    if available < FRAME_HEADER_LEN {
                        return;
                    }
                    let header = &self.pending[self.releasable..self.releasable + FRAME_HEADER_LEN];
                    let length = usize::from(header[0]) << 16
                        | usize::from(header[1]) << 8
                        | usize::from(header[2]);
                    let (kind, flags) = (header[3], header[4]);
                    if kind != FRAME_HEADERS || length > MAX_REWRITTEN_FRAME {
                        self.releasable += FRAME_HEADER_LEN;
                        self.scan = Scan::Payload(length);
                        continue;
                    }
                    if available < FRAME_HEADER_LEN + length {
                        return; // wait for the whole HEADERS frame
                    }
                    let start = self.releasable + FRAME_HEADER_LEN;
                    sanitize_headers_payload(&mut self.pending[start..start + length], flags);
                    self.releasable = start + length;
                }
            }
        }
    }
}

/// Rewrites an invalid literal `:authority` value in one HEADERS frame payload, in place.
fn sanitize_headers_payload(payload: &mut [u8], flags: u8) {
    let mut start = 0;
    let mut end = payload.len();
    if flags & FLAG_PADDED != 0 {
        let Some(&pad) = payload.first() else { return };
        start = 1;
        end = end.saturating_sub(usize::from(pad));
    }
    if flags & FLAG_PRIORITY != 0 {
        start += 5;
    }
    if start < end {
        sanitize_header_block(&mut payload[start..end]);
    }
}

/// Walks an HPACK header block (RFC 7541 §6) without decoding it; every literal field whose
/// name is `:authority` and whose value is a plain (not Huffman) string that is not a valid
/// authority gets that value made valid. Stops quietly at anything truncated.
fn sanitize_header_block(block: &mut [u8]) {
    let mut at = 0;
    while at < block.len() {
        let first = block[at];
        let name_index = if first & 0x80 != 0 {
            // Indexed field: nothing literal to look at.
            match decode_int(block, at, 7) {
                Some((_, next)) => {
                    at = next;
                    continue;
                }
                None => return,
            }
        } else if first & 0xE0 == 0x20 {
            // Dynamic table size update.
            match decode_int(block, at, 5) {
                Some((_, next)) => {
                    at = next;
                    continue;
                }
                None => return,
            }
        } else {
            let prefix = if first & 0xC0 == 0x40 { 6 } else { 4 };
            match decode_int(block, at, prefix) {
                Some((index, next)) => {
                    at = next;
                    index
                }
                None => return,
            }
        };
        let mut is_authority = name_index == AUTHORITY_INDEX;
        if name_index == 0 {
            let Some((huffman, range)) = string_at(block, at) else {
                return;
            };
            is_authority = !huffman && &block[range.clone()] == b":authority";
            at = range.end;
        }
        let Some((huffman, range)) = string_at(block, at) else {
            return;
        };
        at = range.end;
        if is_authority && !huffman {
            make_valid_authority(&mut block[range]);
        }
    }
}

/// The string literal at `at`: whether it is Huffman-coded, and where its bytes are.
fn string_at(block: &[u8], at: usize) -> Option<(bool, std::ops::Range<usize>)> {
    let huffman = block.get(at)? & 0x80 != 0;
    let (length, start) = decode_int(block, at, 7)?;
    let end = start.checked_add(usize::try_from(length).ok()?)?;
    (end <= block.len()).then_some((huffman, start..end))
}

/// An HPACK integer with an `prefix`-bit prefix starting at `at` (RFC 7541 §5.1):
/// its value and the index just past it.
fn decode_int(block: &[u8], at: usize, prefix: u32) -> Option<(u64, usize)> {
    let mask = (1u16 << prefix) as u8 - 1;
    let mut value = u64::from(block.get(at)? & mask);
    let mut at = at + 1;
    if value < u64::from(mask) {
        return Some((value, at));
    }
    let mut shift = 0u32;
    loop {
        let byte = *block.get(at)?;
        at += 1;
        value = value.checked_add(u64::from(byte & 0x7F).checked_shl(shift)?)?;
        if byte & 0x80 == 0 {
            return Some((value, at));
        }
        shift += 7;
        if shift > 56 {
            return None;
        }
    }
}

/// Leaves a valid authority alone; otherwise replaces each byte outside `[A-Za-z0-9.-]` with
/// `_`, keeping the length.
fn make_valid_authority(value: &mut [u8]) {
    if http::uri::Authority::try_from(&value[..]).is_ok() {
        return;
    }
    for byte in value.iter_mut() {
        if !(byte.is_ascii_alphanumeric() || *byte == b'.' || *byte == b'-') {
            *byte = b'_';
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for LenientAuthority<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        out: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        loop {
            if this.releasable > 0 {
                let n = this.releasable.min(out.remaining());
                out.put_slice(&this.pending[..n]);
                this.pending.drain(..n);
                this.releasable -= n;
                return Poll::Ready(Ok(()));
            }
            let filled = this.pending.len();
            this.pending.resize(filled + READ_CHUNK, 0);
            let mut buf = ReadBuf::new(&mut this.pending[filled..]);
            let polled = Pin::new(&mut this.inner).poll_read(cx, &mut buf);
            let read = buf.filled().len();
            this.pending.truncate(filled + read);
            ready!(polled)?;
            if read == 0 {
                // End of stream: hand out whatever is left as it is.
                this.releasable = this.pending.len();
                if this.releasable == 0 {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            this.scan_pending();
        }
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for LenientAuthority<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl<T: Connected> Connected for LenientAuthority<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A HEADERS frame as grpcio sends it for `unix:/tmp/w.sock`: `:authority` as a literal with
    /// incremental indexing (name index 1), plain string `%2Ftmp%2Fw.sock`, then `:path`.
    fn grpcio_headers_frame(authority: &[u8]) -> Vec<u8> {
        let mut block = vec![0x41, authority.len() as u8];
        block.extend_from_slice(authority);
        block.extend_from_slice(&[0x44, 4]); // :path literal
        block.extend_from_slice(b"/x/y");
        let mut frame = vec![0, 0, block.len() as u8, FRAME_HEADERS, 0x4, 0, 0, 0, 1];
        frame.extend_from_slice(&block);
        frame
    }

    fn scan_all(chunks: &[&[u8]]) -> Vec<u8> {
        let mut adapter = LenientAuthority::new(());
        let mut out = Vec::new();
        for chunk in chunks {
            adapter.pending.extend_from_slice(chunk);
            adapter.scan_pending();
            out.extend(adapter.pending.drain(..adapter.releasable));
            adapter.releasable = 0;
        }
        out.append(&mut adapter.pending);
        out
    }

    #[test]
    fn percent_encoded_socket_path_becomes_a_valid_authority_of_same_length() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let settings = [0u8, 0, 0, 0x4, 0, 0, 0, 0, 0];
        let headers = grpcio_headers_frame(b"%2Ftmp%2Fw.sock");
        let stream = [&preface[..], &settings, &headers].concat();
        // Fed in awkward pieces: one byte, then the rest split inside the HEADERS frame.
        let out = scan_all(&[&stream[..1], &stream[1..40], &stream[40..]]);
        assert_eq!(out.len(), stream.len());
        let expected = grpcio_headers_frame(b"_2Ftmp_2Fw.sock");
        assert_eq!(&out[out.len() - expected.len()..], &expected[..]);
        assert!(http::uri::Authority::try_from("_2Ftmp_2Fw.sock").is_ok());
    }

    #[test]
    fn valid_authorities_and_other_frames_pass_untouched() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let data = [0u8, 0, 3, 0x0, 0, 0, 0, 0, 1, b'%', b'2', b'F'];
        let headers = grpcio_headers_frame(b"localhost:50051");
        let stream = [&preface[..], &data, &headers].concat();
        assert_eq!(scan_all(&[&stream]), stream);
    }

    #[test]
    fn a_headers_frame_over_the_frame_size_limit_passes_as_it_arrives() {
        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let declared = (1usize << 24) - 1;
        let head = [
            (declared >> 16) as u8,
            (declared >> 8) as u8,
            declared as u8,
            FRAME_HEADERS,
            0x4,
            0,
            0,
            0,
            1,
        ];
        let mut adapter = LenientAuthority::new(());
        adapter
            .pending
            .extend_from_slice(&[&preface[..], &head].concat());
        adapter.scan_pending();
        assert_eq!(adapter.releasable, adapter.pending.len(), "head held back");
        adapter.pending.clear();
        adapter.releasable = 0;
        adapter.pending.extend_from_slice(&[0x41; READ_CHUNK]);
        adapter.scan_pending();
        assert_eq!(adapter.releasable, READ_CHUNK, "payload held back");
    }

    #[test]
    fn truncated_or_garbage_blocks_do_not_panic() {
        for len in 0..40u8 {
            let mut block: Vec<u8> = (0..len).map(|i| i.wrapping_mul(37) ^ 0x41).collect();
            sanitize_header_block(&mut block);
            sanitize_headers_payload(&mut block, FLAG_PADDED | FLAG_PRIORITY);
        }
        assert_eq!(
            decode_int(
                &[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF],
                0,
                7
            ),
            None
        );
    }
}
