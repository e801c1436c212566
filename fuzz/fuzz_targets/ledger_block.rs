//! Ledger block decoder on hostile bytes: no panic; lookups on a decoded
//! block stay in bounds.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tablinum_engine::ledger::block::Block;

fuzz_target!(|data: &[u8]| {
    if let Ok(b) = Block::decode(data, 1 << 20) {
        for i in 0..b.len() {
            let _ = b.entry(i);
        }
        let _ = b.seek(data);
    }
});
