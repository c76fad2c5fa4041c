//! Generates the gRPC code for the Wool wire contract (`proto/wool/wire.proto`).
//! Uses the vendored `protoc` from `protoc-bin-vendored`, so no system protoc is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/wool/wire.proto");
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc_bin_vendored::protoc_bin_path()?) };
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_protos(&["proto/wool/wire.proto"], &["proto"])?;
    Ok(())
}
