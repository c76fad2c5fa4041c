//! The worker's dispatch handling of any request body (gRPC frames of `Request` messages, or
//! garbage): never panics, the answer always ends, and the in-flight set is empty afterwards
//! (checked inside `libwool::fuzzing::dispatch`).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|body: &[u8]| {
    libwool::fuzzing::dispatch(body);
});
