//! Ledger entry decoder on hostile bytes: no panic; what decodes re-encodes
//! to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tablinum_engine::ledger::entry::Entry;

fuzz_target!(|data: &[u8]| {
    if let Some(e) = Entry::decode(data) {
        let mut out = Vec::new();
        e.encode(&mut out);
        assert_eq!(out, data);
    }
});
