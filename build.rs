//! Generates the gRPC code for the Wool wire contract (`proto/wool/wire.proto`), and for the
//! `scaler` feature that `wool-scaler` serves KEDA's external scaler contract
//! (`proto/externalscaler/externalscaler.proto`) and libwool's demand input
//! (`proto/libwool/demand.proto`).
//! Uses the vendored `protoc` from `protoc-bin-vendored`, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/wool/wire.proto");
    println!("cargo:rerun-if-changed=proto/externalscaler/externalscaler.proto");
    println!("cargo:rerun-if-changed=proto/libwool/demand.proto");
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // No `connect` helper: the client dials through its own HTTP/2 channel.
        .build_transport(false)
        // For server reflection (grpcurl and friends without the .proto file).
        .file_descriptor_set_path(out.join("wool_descriptor.bin"))
        .compile_protos(&["proto/wool/wire.proto"], &["proto"])?;
    // KEDA's contract and libwool's demand input only for the scaler (feature `scaler`).
    if std::env::var_os("CARGO_FEATURE_SCALER").is_some() {
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .build_transport(false)
            .file_descriptor_set_path(out.join("externalscaler_descriptor.bin"))
            .compile_protos(&["proto/externalscaler/externalscaler.proto"], &["proto"])?;
        tonic_prost_build::configure()
            .build_client(true)
            .build_server(true)
            .build_transport(false)
            .file_descriptor_set_path(out.join("demand_descriptor.bin"))
            .compile_protos(&["proto/libwool/demand.proto"], &["proto"])?;
    }
    Ok(())
}
