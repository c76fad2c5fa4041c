//! The worker's Unix-socket `:authority` rewriter on any byte stream (an HTTP/2 client's bytes,
//! or garbage), delivered in pieces of any sizes: never panics, always ends, and a stream cut
//! into different pieces reads the same as the stream whole.
//!
//! Input: one byte N, then N bytes of piece sizes, then the stream.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&count, rest)) = data.split_first() else {
        return;
    };
    let (cuts, stream) = rest.split_at(usize::from(count).min(rest.len()));
    let pieces = libwool::fuzzing::rewrite_authority(stream, cuts);
    let whole = libwool::fuzzing::rewrite_authority(stream, &[]);
    assert_eq!(
        pieces, whole,
        "the rewrite depends on how the stream was cut"
    );
    assert!(
        whole.len() == stream.len(),
        "the rewrite changed the stream's length"
    );
});
