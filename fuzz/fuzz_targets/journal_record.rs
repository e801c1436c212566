//! Journal record and index-term decoders on hostile bytes: no panic, and a
//! decoded record's value decodes or errors.
#![no_main]
use libfuzzer_sys::fuzz_target;
use tablinum_engine::journal::record;

fuzz_target!(|data: &[u8]| {
    let _ = record::peek_len(data);
    if let Ok(r) = record::decode(data) {
        let _ = record::value_of(&r);
    }
    let _ = record::decode_terms(data);
});
