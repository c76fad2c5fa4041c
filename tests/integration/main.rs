//! libwool's integration tests, one binary: a module per subject, all against real workers over
//! real sockets (the fixtures are `tests/common`). One binary means one build of the fixtures
//! and one link of the crate for them all. Run one subject with its module as the filter:
//! `cargo test --test integration -- scaler::`.
//!
//! Two subjects stay binaries of their own because they measure this process's own memory,
//! which tests running beside them would disturb: `tests/hostile.rs` and
//! `tests/sweep_memory.rs`.

#[path = "../common/mod.rs"]
mod common;

mod abi;
mod c_api;
mod connection;
mod demand;
mod doc_compile_lines;
mod doc_constants;
mod ffi_housekeeping;
mod fleet;
mod header;
mod interop;
mod keepalive;
mod operable;
mod queue;
mod rotation;
mod scaler;
mod slow_peers;
mod wool_worker;
mod woolctl;
mod woolctl_messages;
