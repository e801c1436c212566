//! Manifest decoder on hostile bytes: no panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tablinum_engine::manifest::ManifestState;

fuzz_target!(|data: &[u8]| {
    let _ = ManifestState::decode(data, std::path::Path::new("MANIFEST"));
});
