//! A background job that panics poisons its store, as a failed fsync
//! does: writers get an error at once instead of waiting forever, and
//! `close` reports it. Its own test binary: the failpoint is armed through
//! the process environment.

use std::time::{Duration, Instant};

use tablinum_engine::failpoint::FAILPOINT_ENV;
use tablinum_engine::{Error, Options, Store};

#[test]
fn a_panicking_flush_poisons_the_store() {
    std::env::set_var(FAILPOINT_ENV, "flush.before-install:panic");
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        dir.path(),
        Options {
            memtable_bytes_max: 64 << 10,
            ..Options::default()
        },
    )
    .unwrap();
    let t = Instant::now();
    let err = loop {
        assert!(t.elapsed() < Duration::from_secs(20), "never poisoned");
        match store.put(b"key", &[7u8; 4_000]) {
            Ok(_) => {}
            Err(e) => break e,
        }
    };
    // The put that meets the poison either is refused before its record
    // reaches the journal, or reaches it first and is told its outcome is
    // unknown: which one depends on when the flush thread panics.
    match &err {
        Error::Background(cause) => assert!(
            matches!(&**cause, Error::Panicked { what, .. } if what == "flush"),
            "{cause}"
        ),
        Error::WriteOutcomeUnknown(inner) => {
            assert!(matches!(**inner, Error::Background(_)), "{inner}");
            assert!(inner.to_string().contains("flush panicked"), "{inner}");
        }
        e => panic!("unexpected error {e}"),
    }
    // Every later call says so too, and close reports it.
    assert!(matches!(store.flush(), Err(Error::Background(_))));
    let closed = store.close().unwrap_err().to_string();
    assert!(closed.contains("flush panicked"), "{closed}");
    drop(store);
    // Nothing acknowledged was lost: the journal replays.
    std::env::remove_var(FAILPOINT_ENV);
    let store = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(store.get(b"key").unwrap().map(|v| v.len()), Some(4_000));
}
