//! The read-only face of a store (what scan servers read): it sees what the
//! owner published (flushed) and nothing newer, and its reservation keeps
//! every file it reads on disk while the owner compacts the ledger and the
//! journal, until the view is dropped or its lease runs out.

mod common;

use std::ops::Bound;
use std::path::Path;
use std::time::{Duration, Instant};

use tablinum_engine::{Error, Options, ReadOnlyStore, Shared, SharedOptions, Store};

fn opts() -> Options {
    Options {
        memtable_bytes_max: 64 << 10,
        sst_target_bytes: 64 << 10,
        journal_segment_bytes_max: 128 << 10,
        journal_compaction_hours: None,
        journal_compaction_single_live_pct: 90,
        journal_compaction_run_live_pct: 95,
        ..Options::default()
    }
}

fn key(n: u64) -> Vec<u8> {
    format!("key{n:05}").into_bytes()
}

fn value(n: u64, version: u64) -> Vec<u8> {
    common::pseudo_random_bytes(n * 1_000 + version, 1_500)
}

fn shared() -> std::sync::Arc<Shared> {
    Shared::new(SharedOptions::default()).unwrap()
}

const LEASE: Duration = Duration::from_secs(60);

#[test]
fn a_view_sees_what_was_flushed_and_nothing_newer() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    for n in 0..200 {
        store.put(&key(n), &value(n, 1)).unwrap();
    }
    store.flush().unwrap();
    for n in 200..250 {
        store.put(&key(n), &value(n, 1)).unwrap();
    }
    let view = ReadOnlyStore::open(dir.path(), &shared(), "ss-test", LEASE).unwrap();
    assert!(view.persisted_seq() >= 200 && view.persisted_seq() < 250);
    for n in (0..200).step_by(13) {
        assert_eq!(view.get(&key(n)).unwrap(), Some(value(n, 1)), "key {n}");
    }
    for n in 200..250 {
        assert_eq!(
            view.get(&key(n)).unwrap(),
            None,
            "unflushed key {n} visible"
        );
    }
    let heads = view
        .scan_heads((Bound::Unbounded, Bound::Unbounded))
        .unwrap()
        .count();
    assert_eq!(heads, 200);
    let values: Vec<_> = view
        .scan_objects((Bound::Included(&key(10)[..]), Bound::Excluded(&key(20)[..])))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(values.len(), 10);
    assert!(values.iter().all(|(k, v)| {
        let n: u64 = std::str::from_utf8(&k[3..]).unwrap().parse().unwrap();
        *v == value(n, 1)
    }));
    // A reservation file exists while the view lives, and goes with it.
    let res = dir.path().join("reservations");
    assert_eq!(std::fs::read_dir(&res).unwrap().count(), 1);
    drop(view);
    assert_eq!(std::fs::read_dir(&res).unwrap().count(), 0);
}

fn all_exist(dir: &Path, files: &[String]) -> bool {
    files.iter().all(|f| dir.join(f).exists())
}

#[test]
fn a_reservation_keeps_files_through_compactions_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    for n in 0..300 {
        store.put(&key(n), &value(n, 1)).unwrap();
    }
    store.flush().unwrap();
    let view = ReadOnlyStore::open(dir.path(), &shared(), "ss-test", LEASE).unwrap();
    let files = view.files().to_vec();
    assert!(files.iter().any(|f| f.starts_with("ledger/")));
    assert!(files.iter().any(|f| f.starts_with("journal/")));

    // The owner rewrites everything, compacts the ledger and the journal:
    // every file of the view becomes obsolete.
    for round in 2..5 {
        for n in 0..300 {
            store.put(&key(n), &value(n, round)).unwrap();
        }
        store.flush().unwrap();
    }
    store.compact_ledger().unwrap();
    while !store
        .compact_journal()
        .unwrap()
        .segments_compacted
        .is_empty()
    {}
    assert!(store.stats().deletions_deferred > 0, "{:?}", store.stats());
    assert!(all_exist(dir.path(), &files), "a reserved file was deleted");
    // The view still reads its (old) version of everything.
    for n in 0..300 {
        assert_eq!(view.get(&key(n)).unwrap(), Some(value(n, 1)), "key {n}");
    }
    assert_eq!(store.get(&key(7)).unwrap(), Some(value(7, 4)));

    // Released: the owner's workers delete them soon after.
    drop(view);
    let t = Instant::now();
    while store.stats().deletions_deferred > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "deferred deletions never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let current = ReadOnlyStore::open(dir.path(), &shared(), "ss-test", LEASE).unwrap();
    let obsolete: Vec<_> = files
        .iter()
        .filter(|f| !current.files().contains(f))
        .collect();
    assert!(!obsolete.is_empty());
    assert!(
        obsolete.iter().all(|f| !dir.path().join(f).exists()),
        "{obsolete:?}"
    );
}

#[test]
fn an_expired_reservation_protects_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), opts()).unwrap();
    for n in 0..300 {
        store.put(&key(n), &value(n, 1)).unwrap();
    }
    store.flush().unwrap();
    let view =
        ReadOnlyStore::open(dir.path(), &shared(), "ss-dead", Duration::from_millis(30)).unwrap();
    let files = view.files().to_vec();
    std::mem::forget(view); // a scan server that died: its file stays
    std::thread::sleep(Duration::from_millis(60));
    // Enough rewrites that compaction merges (and so learns what is dead).
    for round in 2..5 {
        for n in 0..300 {
            store.put(&key(n), &value(n, round)).unwrap();
        }
        store.flush().unwrap();
    }
    store.compact_ledger().unwrap();
    while !store
        .compact_journal()
        .unwrap()
        .segments_compacted
        .is_empty()
    {}
    assert_eq!(store.stats().deletions_deferred, 0);
    let left: Vec<_> = files
        .iter()
        .filter(|f| dir.path().join(f).exists())
        .collect();
    assert!(left.len() < files.len(), "{files:?} {:?}", store.stats());
}

#[test]
fn bad_opens_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope");
    let e = ReadOnlyStore::open(&missing, &shared(), "ss", LEASE).unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    let e = ReadOnlyStore::open(dir.path(), &shared(), "ss", LEASE).unwrap_err();
    assert!(e.to_string().contains("no manifest"), "{e}");
    drop(Store::open(dir.path(), opts()).unwrap());
    for holder in ["", "a/b", "../x"] {
        let e = ReadOnlyStore::open(dir.path(), &shared(), holder, LEASE).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    }
    let e =
        ReadOnlyStore::open(dir.path(), &shared(), "ss", Duration::from_secs(7200)).unwrap_err();
    assert!(e.to_string().contains("lease"), "{e}");
    // Nothing was left behind by the failed opens.
    let res = dir.path().join("reservations");
    assert!(!res.exists() || std::fs::read_dir(&res).unwrap().count() == 0);
}
