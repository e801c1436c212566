//! Ledger table reader on a hostile file: open, point reads and a full
//! verify must error or succeed, never panic.
#![no_main]
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use tablinum_engine::cache::Caches;
use tablinum_engine::ledger::bloom::key_hash;
use tablinum_engine::ledger::sst::{sst_path, SstReader};

fuzz_target!(|data: &[u8]| {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(sst_path(dir.path(), 1), data).unwrap();
    let caches = Arc::new(Caches::new(16, 1 << 20));
    if let Ok(r) = SstReader::open(dir.path(), 1, caches.view()) {
        let _ = r.get(b"\0key", key_hash(b"\0key"));
        let _ = r.verify();
    }
});
