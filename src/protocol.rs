//! The generated Wool wire types and gRPC stubs (`package wool.runtime.protobuf.wire`).
//!
//! Nothing else in the crate includes the generated code by path; use these re-exports.
#![allow(missing_docs, non_camel_case_types, clippy::all)]

tonic::include_proto!("wool.runtime.protobuf.wire");

/// The protocol version this library puts in `Ack.version` and `Task.version`.
pub const PROTOCOL_VERSION: &str = env!("CARGO_PKG_VERSION");
