//! The generated Wool wire types and gRPC stubs (`package wool.runtime.protobuf.wire`).
//!
//! Internal: callers use [`WorkerConnection`](crate::WorkerConnection) and
//! [`Worker`](crate::worker::Worker), which own the channel and credential handling. The
//! `protocol` feature makes this module public, for the benchmarks' raw-stub rows and the
//! tests' stand-in workers. Nothing else in the crate includes the generated code by path.
#![allow(
    missing_docs,
    non_camel_case_types,
    clippy::all,
    dead_code,
    unreachable_pub
)]

tonic::include_proto!("wool.runtime.protobuf.wire");

/// The encoded `FileDescriptorSet` of `proto/wool/wire.proto`, served by the worker's server
/// reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("wool_descriptor");

/// Wool's channel default for message sizes, each way: 100 MiB. The worker's limit and the
/// client's default.
pub const MAX_MESSAGE_BYTES: usize = 100 * 1024 * 1024;

/// The protocol version this library puts in `Ack.version` and `Task.version`.
pub const PROTOCOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// KEDA's external scaler contract (`package externalscaler`), served by
/// [`scaler`](crate::scaler).
#[cfg(feature = "scaler")]
pub mod externalscaler {
    tonic::include_proto!("externalscaler");

    /// The encoded `FileDescriptorSet` of `proto/externalscaler/externalscaler.proto`, served
    /// by the scaler's server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("externalscaler_descriptor");
}
