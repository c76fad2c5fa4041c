//! The scaler's `scalerMetadata` reader on any map of strings: an answer within every
//! documented bound or `INVALID_ARGUMENT`, never a panic (see `libwool::fuzzing::scaler_metadata`).
//! The input is text, one `key=value` entry a line (a line without `=` is a key with an empty
//! value), so that the corpus reads as metadata and mutations recombine real keys.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|text: &str| {
    let pairs: Vec<(String, String)> = text
        .split('\n')
        .map(|line| match line.split_once('=') {
            Some((key, value)) => (key.to_owned(), value.to_owned()),
            None => (line.to_owned(), String::new()),
        })
        .collect();
    let _ = libwool::fuzzing::scaler_metadata(&pairs);
});
