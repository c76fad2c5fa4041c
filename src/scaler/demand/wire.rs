//! The generated types and gRPC stubs of `proto/libwool/demand.proto` (`package
//! libwool.scaler.v1`, service `Demand`).
//!
//! Internal, as the other generated code is: the `protocol` feature makes it public, for the
//! tests' clients (and a Rust program that wants to report demand itself). The Python client
//! is `libwool_kubernetes.demand`.
#![allow(
    missing_docs,
    non_camel_case_types,
    clippy::all,
    dead_code,
    unreachable_pub
)]

tonic::include_proto!("libwool.scaler.v1");

/// The encoded `FileDescriptorSet` of `proto/libwool/demand.proto`, served by the scaler's
/// server reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("demand_descriptor");
