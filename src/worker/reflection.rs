//! Server reflection (tonic-reflection, v1 and v1alpha) over the protocol's and health's
//! descriptors, so grpcurl and other tools work without the .proto files.

use super::WorkerError;

/// Server reflection (tonic-reflection), v1: the worker describes its services, so grpcurl
/// and other tools work without the .proto files.
pub(super) fn reflection_v1() -> Result<
    tonic_reflection::server::v1::ServerReflectionServer<
        impl tonic_reflection::server::v1::ServerReflection,
    >,
    WorkerError,
> {
    reflection()
        .build_v1()
        .map_err(|e| WorkerError::Reflection(e.to_string()))
}

/// Server reflection, v1alpha (what older grpcurl and grpc_cli versions ask for).
pub(super) fn reflection_v1alpha() -> Result<
    tonic_reflection::server::v1alpha::ServerReflectionServer<
        impl tonic_reflection::server::v1alpha::ServerReflection,
    >,
    WorkerError,
> {
    reflection()
        .build_v1alpha()
        .map_err(|e| WorkerError::Reflection(e.to_string()))
}

fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(crate::protocol::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}
