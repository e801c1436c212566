//! Disk faults through the engine's storage seam (`Options::faults`): a
//! journal fsync that fails is never followed by a read of what it did not
//! cover, the journal is cut back to its last good sync so a reopen finds
//! only durable records, and a full disk fails writes cleanly until space
//! comes back, when the store resumes by itself.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tablinum_engine::faults::{Condition, FaultSwitch};
use tablinum_engine::{Durability, Error, Health, Options, Store};

fn opts(faults: &Arc<FaultSwitch>) -> Options {
    Options {
        durability: Durability::Sync,
        faults: Some(faults.clone()),
        ..Options::default()
    }
}

/// A value large enough to live in the journal only (not inline).
fn big(tag: &str) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    v.resize(2_000, b'.');
    v
}

fn journal_holds(dir: &std::path::Path, needle: &[u8]) -> bool {
    let jdir = dir.join("journal");
    std::fs::read_dir(jdir).unwrap().flatten().any(|e| {
        let b = std::fs::read(e.path()).unwrap_or_default();
        b.windows(needle.len()).any(|w| w == needle)
    })
}

fn poisoned(s: &Store) -> bool {
    matches!(s.health().0, Health::Poisoned { .. })
}

/// The record of a failed fsync is never read, and after a reopen it is
/// gone; `lose` says whether the simulated device also dropped the bytes
/// (when it did not, only the store's own cut removes them).
fn failed_fsync_case(lose: bool) {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultSwitch::new());
    let s = Store::open(dir.path(), opts(&faults)).unwrap();
    s.put(b"small", b"v1").unwrap();
    s.put(b"big", &big("v1")).unwrap();
    faults.fail_syncs(1, lose);
    let e = s.put(b"small", b"v2-unsynced").unwrap_err();
    assert!(
        matches!(e, Error::WriteOutcomeUnknown(_)),
        "a failed fsync after the append leaves the outcome unknown: {e}"
    );
    // The fault is over (armed once): before the fix, this read led a new
    // fdatasync that succeeded and served the record.
    for _ in 0..3 {
        assert!(
            s.get(b"small").is_err(),
            "a poisoned store must serve nothing"
        );
        assert!(s.head(b"small").is_err());
        assert!(s
            .scan_heads((std::ops::Bound::Unbounded, std::ops::Bound::Unbounded))
            .is_err());
    }
    assert!(s.put(b"other", b"x").is_err(), "no write after poison");
    match s.health().0 {
        Health::Poisoned {
            reason,
            cut_pending,
        } => {
            assert!(reason.contains("fsync journal"), "{reason}");
            assert!(!cut_pending, "the cut succeeded at once");
        }
        h => panic!("expected poisoned, got {h:?}"),
    }
    assert!(
        !journal_holds(dir.path(), b"v2-unsynced"),
        "the journal was cut back to its last good sync"
    );
    assert!(matches!(s.close(), Err(Error::Background(_))));
    drop(s);
    let s = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(s.get(b"small").unwrap().as_deref(), Some(&b"v1"[..]));
    assert_eq!(s.get(b"big").unwrap(), Some(big("v1")));
    assert_eq!(s.get(b"other").unwrap(), None);
    // And the store takes writes again after the reopen.
    s.put(b"small", b"v3").unwrap();
    assert_eq!(s.get(b"small").unwrap().as_deref(), Some(&b"v3"[..]));
}

#[test]
fn a_failed_fsync_whose_bytes_are_lost_is_never_served() {
    failed_fsync_case(true);
}

#[test]
fn a_failed_fsync_whose_bytes_stay_cached_is_cut_off_before_a_reopen() {
    failed_fsync_case(false);
}

#[test]
fn a_cut_that_fails_keeps_the_store_closed_until_it_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultSwitch::new());
    let s = Store::open(dir.path(), opts(&faults)).unwrap();
    s.put(b"k", b"durable").unwrap();
    faults.fail_syncs(FaultSwitch::FOREVER, false);
    assert!(s.put(b"k", b"never").is_err());
    assert!(matches!(
        s.health().0,
        Health::Poisoned {
            cut_pending: true,
            ..
        }
    ));
    // The cut keeps failing while the disk does: close says so, every time.
    let e = s.close().unwrap_err();
    assert!(e.to_string().contains("cut to last sync"), "{e}");
    assert!(s.close().is_err());
    faults.heal();
    s.close().unwrap();
    assert!(!journal_holds(dir.path(), b"never"));
    drop(s);
    let s = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"durable"[..]));
}

/// Readers running beside writers while one group commit fails: no read
/// ever returns a write that is not on disk after the reopen. Each writer
/// owns a key and writes 1, 2, 3, ... to it, so a key's value only grows.
#[test]
fn no_reader_sees_past_the_last_good_sync() {
    const WRITERS: usize = 3;
    for round in 0..4u32 {
        let dir = tempfile::tempdir().unwrap();
        let faults = Arc::new(FaultSwitch::new());
        let s = Arc::new(Store::open(dir.path(), opts(&faults)).unwrap());
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
        let mut threads = Vec::new();
        for w in 0..WRITERS {
            let (s, stop) = (s.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let key = format!("w{w}");
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    if s.put(key.as_bytes(), &n.to_be_bytes()).is_err() {
                        break;
                    }
                }
            }));
        }
        for _ in 0..2 {
            let (s, stop, seen) = (s.clone(), stop.clone(), seen.clone());
            threads.push(std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for (w, max) in seen.iter().enumerate() {
                        if let Ok(Some(v)) = s.get(format!("w{w}").as_bytes()) {
                            max.fetch_max(
                                u64::from_be_bytes(v.try_into().unwrap()),
                                Ordering::Relaxed,
                            );
                        }
                    }
                }
            }));
        }
        std::thread::sleep(Duration::from_millis(40 + 20 * u64::from(round)));
        faults.fail_syncs(1, round % 2 == 0);
        let deadline = Instant::now() + Duration::from_secs(10);
        while !poisoned(&s) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(poisoned(&s), "the armed sync failed");
        std::thread::sleep(Duration::from_millis(30));
        stop.store(true, Ordering::Relaxed);
        for t in threads {
            t.join().unwrap();
        }
        let _ = s.close();
        drop(s);
        let s = Store::open(dir.path(), Options::default()).unwrap();
        for (w, max) in seen.iter().enumerate() {
            let on_disk = s
                .get(format!("w{w}").as_bytes())
                .unwrap()
                .map_or(0, |v| u64::from_be_bytes(v.try_into().unwrap()));
            let saw = max.load(Ordering::Relaxed);
            assert!(
                saw <= on_disk,
                "round {round}: a reader saw w{w} = {saw}, but the disk holds {on_disk}"
            );
        }
    }
}

#[test]
fn a_full_disk_fails_writes_cleanly_and_the_store_resumes_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultSwitch::new());
    let s = Store::open(dir.path(), opts(&faults)).unwrap();
    s.put(b"k", b"before").unwrap();
    faults.disk_full(true);
    for _ in 0..3 {
        let e = s.put(b"k", b"refused").unwrap_err();
        assert!(e.is_disk_full(), "a full disk says so: {e}");
        assert!(
            !matches!(e, Error::WriteOutcomeUnknown(_)),
            "nothing reached the journal"
        );
    }
    match s.health().0 {
        Health::Degraded { condition, .. } => assert_eq!(condition, Condition::DiskFull),
        h => panic!("expected degraded, got {h:?}"),
    }
    // Reads go on meanwhile.
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"before"[..]));
    faults.disk_full(false);
    s.put(b"k", b"after").unwrap();
    assert_eq!(s.health().0, Health::Serving);
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"after"[..]));
    s.close().unwrap();
    drop(s);
    let s = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"after"[..]));
    assert!(!journal_holds(dir.path(), b"refused"));
}

#[test]
fn a_slow_sync_shows_as_io_in_flight_without_blocking_the_file_list() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultSwitch::new());
    let s = Arc::new(Store::open(dir.path(), opts(&faults)).unwrap());
    s.put(b"k", b"v").unwrap();
    faults.delay_ms(600);
    let w = {
        let s = s.clone();
        std::thread::spawn(move || s.put(b"k", b"slow"))
    };
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    let _ = s.immutable_files();
    let (health, stalled) = s.health();
    assert!(
        t.elapsed() < Duration::from_millis(100),
        "the file list and health wait for no writer"
    );
    assert_eq!(health, Health::Serving);
    assert!(stalled >= Duration::from_millis(200), "{stalled:?}");
    faults.heal();
    w.join().unwrap().unwrap();
    assert_eq!(s.health().1, Duration::ZERO);
}

/// Writes applied before a failed fsync but not yet acknowledged (an
/// appender that released its lock before the fsync) all fail: none is
/// acknowledged, none is served, and none is there after a reopen.
#[test]
fn unacked_writes_behind_a_failed_fsync_all_fail_and_vanish() {
    let dir = tempfile::tempdir().unwrap();
    let faults = Arc::new(FaultSwitch::new());
    let s = Store::open(dir.path(), opts(&faults)).unwrap();
    s.put(b"k", b"durable").unwrap();
    let mut a = tablinum_engine::Batch::new();
    a.put(b"a", &big("first"));
    let mut b = tablinum_engine::Batch::new();
    b.put(b"b", &big("second"));
    let wa = s.write_unacked(&a).unwrap();
    let wb = s.write_unacked(&b).unwrap();
    faults.fail_syncs(1, true);
    assert!(s.acknowledge(wa).is_err(), "its fsync failed");
    assert!(
        s.acknowledge(wb).is_err(),
        "a poisoned store never leads another fsync for a later write"
    );
    assert!(s.get(b"a").is_err() && s.get(b"b").is_err());
    assert!(s.write_unacked(&a).is_err(), "no write after poison");
    drop(s);
    let s = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(s.get(b"k").unwrap().as_deref(), Some(&b"durable"[..]));
    assert_eq!(s.get(b"a").unwrap(), None);
    assert_eq!(s.get(b"b").unwrap(), None);
}
