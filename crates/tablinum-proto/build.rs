//! Generates the gRPC types and services from `proto/tablinum.proto` with a
//! pure-Rust protobuf compiler (protox): building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/tablinum.proto");
    let fds = protox::compile(["proto/tablinum.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // prost's codec, reserving a message's length before encoding it.
        .codec_path("crate::codec::ReservingCodec")
        // Appended records are shared, not copied, from the decoded request
        // into the engine's batch (and a retried request is cloned cheaply).
        .bytes(".tablinum.v1.AppendRequest.records")
        .compile_fds(fds)?;
    Ok(())
}
