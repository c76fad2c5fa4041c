//! Generates the gRPC code for the Wool wire contract (`proto/wool/wire.proto`).
//! Uses the vendored `protoc` from `protoc-bin-vendored`, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/wool/wire.proto");
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    let descriptors =
        std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("wool_descriptor.bin");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // For server reflection (grpcurl and friends without the .proto file).
        .file_descriptor_set_path(descriptors)
        .compile_protos(&["proto/wool/wire.proto"], &["proto"])?;
    Ok(())
}
