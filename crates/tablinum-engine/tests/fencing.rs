//! Epoch fencing: a newer owner opens a store while the old owner's
//! process still has it open (as after a pause or a partition), and nothing
//! the old owner does afterwards is acknowledged, becomes visible, is
//! replayed by any later owner, or removes a file the new owner needs.

use std::time::Duration;

use tablinum_engine::{Durability, Error, Options, Store};

fn opts(epoch: u64) -> Options {
    Options {
        durability: Durability::Sync,
        epoch: Some(epoch),
        memtable_bytes_max: 64 << 10,
        journal_segment_bytes_max: 64 << 10,
        sst_target_bytes: 64 << 10,
        l0_compaction_trigger_files: 2,
        ..Options::default()
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

fn fenced(r: Result<u64, Error>) -> Option<bool> {
    match r {
        Err(Error::Fenced {
            outcome_unknown, ..
        }) => Some(outcome_unknown),
        _ => None,
    }
}

#[test]
fn a_newer_epoch_takes_over_while_the_old_owner_still_runs() {
    let d = tempfile::tempdir().unwrap();
    let old = Store::open(d.path(), opts(1)).unwrap();
    assert_eq!(old.epoch(), 1);
    // Enough to roll segments and flush tables.
    for i in 0..400 {
        old.put(&key(i), &vec![b'a'; 700]).unwrap();
    }
    old.flush().unwrap();
    for i in 400..500 {
        old.put(&key(i), b"acked-by-old").unwrap();
    }

    // The new owner opens with the old one still open: no lock stops it.
    let new = Store::open(d.path(), opts(2)).unwrap();
    for i in 0..500 {
        assert!(new.get(&key(i)).unwrap().is_some(), "key {i} lost");
    }

    // The old owner's next write was appended but is not acknowledged: its
    // outcome is unknown (and here it is not replayed: the new owner sealed
    // the journal before it). After that, writes fail before appending.
    assert_eq!(
        fenced(old.put(b"stale-1", b"x")),
        Some(true),
        "an old owner's write was acknowledged"
    );
    assert_eq!(fenced(old.put(b"stale-2", b"x")), Some(false));
    assert!(matches!(
        old.check_fence(),
        Err(Error::Fenced { found: 2, .. })
    ));
    // Its background work (a flush writes a manifest) deletes nothing and
    // is refused.
    assert!(old.flush().is_err());

    // The new owner keeps working, rolls segments, compacts.
    for i in 500..900 {
        new.put(&key(i), &vec![b'b'; 700]).unwrap();
    }
    new.flush().unwrap();
    new.compact_ledger().unwrap();
    new.compact_journal().unwrap();
    assert_eq!(new.get(b"stale-1").unwrap(), None);
    let _ = old.close();
    new.close().unwrap();

    // A later owner sees the new owner's writes and the old owner's
    // acknowledged ones, never the stale ones.
    let later = Store::open(d.path(), opts(3)).unwrap();
    for i in 0..900 {
        assert!(later.get(&key(i)).unwrap().is_some(), "key {i} lost");
    }
    assert_eq!(
        later.get(&key(450)).unwrap(),
        Some(b"acked-by-old".to_vec())
    );
    assert_eq!(later.get(b"stale-1").unwrap(), None);
    assert_eq!(later.get(b"stale-2").unwrap(), None);
    later.verify().unwrap();
    later.close().unwrap();

    // A stale owner cannot reopen; an unfenced open is refused by name.
    let e = Store::open(d.path(), opts(2)).err().unwrap();
    assert!(matches!(e, Error::Fenced { found: 3, .. }), "{e}");
    let e = Store::open(d.path(), Options::default()).err().unwrap();
    assert!(e.to_string().contains("fenced"), "{e}");
    // Only the newest manifest is left.
    let manifests: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("MANIFEST"))
        .collect();
    assert_eq!(manifests, vec!["MANIFEST-3".to_string()]);
}

#[test]
fn an_old_owner_appending_after_the_seal_is_never_replayed() {
    let d = tempfile::tempdir().unwrap();
    let old = Store::open(d.path(), opts(1)).unwrap();
    for i in 0..50 {
        old.put(&key(i), b"v1").unwrap();
    }
    let new = Store::open(d.path(), opts(2)).unwrap();
    // Writers of the old owner racing the takeover: each write is either
    // acknowledged (then the new owner must have it) or refused.
    let h = std::thread::spawn(move || {
        let mut acked = Vec::new();
        for i in 50..5000 {
            match old.put(&key(i), b"late") {
                Ok(_) => acked.push(i),
                Err(Error::Fenced { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let _ = old.close();
        acked
    });
    std::thread::sleep(Duration::from_millis(5));
    let acked = h.join().unwrap();
    assert!(
        acked.is_empty(),
        "acknowledged after the takeover: {acked:?}"
    );
    for i in 0..50 {
        assert_eq!(new.get(&key(i)).unwrap(), Some(b"v1".to_vec()));
    }
    new.put(b"new", b"1").unwrap();
    new.close().unwrap();
    let later = Store::open(d.path(), opts(3)).unwrap();
    assert_eq!(later.get(&key(50)).unwrap(), None);
    assert_eq!(later.get(b"new").unwrap(), Some(b"1".to_vec()));
    later.close().unwrap();
}

/// Regression (CI, a tablet server's heartbeat raced its own open task):
/// the same epoch opened twice in one process would append two writers to
/// one segment. The second open is refused until the first closes.
#[test]
fn one_process_never_opens_the_same_epoch_twice() {
    let d = tempfile::tempdir().unwrap();
    let a = Store::open(d.path(), opts(4)).unwrap();
    a.put(b"k", b"v").unwrap();
    let e = Store::open(d.path(), opts(4)).err().unwrap();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    assert!(e.to_string().contains("same epoch"), "{e}");
    // Through another spelling of the same directory too.
    let other = d.path().join(".");
    assert!(matches!(
        Store::open(&other, opts(4)).err().unwrap(),
        Error::Locked(_)
    ));
    a.close().unwrap();
    let b = Store::open(d.path(), opts(4)).unwrap();
    assert_eq!(b.get(b"k").unwrap(), Some(b"v".to_vec()));
    // Dropping the closed first handle releases nothing of the second's.
    drop(a);
    assert!(matches!(
        Store::open(d.path(), opts(4)).err().unwrap(),
        Error::Locked(_)
    ));
    b.close().unwrap();
}
