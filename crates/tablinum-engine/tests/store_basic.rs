//! End-to-end behaviour of the public store API on real files: every
//! operation, reopen, snapshots, index queries, anti-entropy, journal
//! compaction and ledger rebuild.

mod common;

use std::ops::Bound::{self, Excluded, Included, Unbounded};

use tablinum_engine::{Batch, Durability, Error, Options, PutOptions, Store};

fn small_opts() -> Options {
    Options {
        durability: Durability::NoSync,
        memtable_bytes_max: 64 << 10,
        journal_segment_bytes_max: 64 << 10,
        sst_target_bytes: 64 << 10,
        level1_bytes_max: 1 << 20,
        l0_compaction_trigger_files: 2,
        l0_stall_files: 8,
        ..Options::default()
    }
}

fn val(i: u32, len: usize) -> Vec<u8> {
    common::pseudo_random_bytes(u64::from(i), len)
}

const ALL: (Bound<&[u8]>, Bound<&[u8]>) = (Unbounded, Unbounded);

#[test]
fn put_get_head_delete_scan_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    for i in 0..2000u32 {
        let len = if i % 3 == 0 { 100 } else { 3000 };
        s.put(format!("k{i:05}").as_bytes(), &val(i, len)).unwrap();
    }
    for i in (0..2000u32).step_by(7) {
        s.delete(format!("k{i:05}").as_bytes()).unwrap();
    }
    let check = |s: &Store| {
        for i in 0..2000u32 {
            let k = format!("k{i:05}");
            let len = if i % 3 == 0 { 100 } else { 3000 };
            let got = s.get(k.as_bytes()).unwrap();
            if i % 7 == 0 {
                assert_eq!(got, None, "{k}");
                assert_eq!(s.head(k.as_bytes()).unwrap(), None);
            } else {
                assert_eq!(got.as_deref(), Some(&val(i, len)[..]), "{k}");
                assert_eq!(s.head(k.as_bytes()).unwrap().unwrap().value_len, len as u64);
            }
        }
        let keys: Vec<Vec<u8>> = s
            .scan_objects((Included(&b"k00100"[..]), Excluded(&b"k00200"[..])))
            .unwrap()
            .map(|r| r.unwrap().0)
            .collect();
        let want: Vec<Vec<u8>> = (100..200u32)
            .filter(|i| i % 7 != 0)
            .map(|i| format!("k{i:05}").into_bytes())
            .collect();
        assert_eq!(keys, want);
        assert_eq!(
            s.scan_heads(ALL).unwrap().count(),
            2000 - 2000usize.div_ceil(7)
        );
    };
    check(&s);
    s.flush().unwrap();
    s.compact_ledger().unwrap();
    check(&s);
    s.close().unwrap();
    assert!(matches!(s.get(b"k00001"), Err(Error::Closed)));
    drop(s);
    let s = Store::open(dir.path(), small_opts()).unwrap();
    check(&s);
    s.verify().unwrap();
}

#[test]
fn bad_input_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    assert!(matches!(
        s.put(b"", b"v"),
        Err(Error::InvalidArgument { what: "key", .. })
    ));
    let long = vec![b'k'; 5000];
    assert!(matches!(
        s.put(&long, b"v"),
        Err(Error::InvalidArgument { what: "key", .. })
    ));
    let bad_terms = PutOptions {
        metadata: vec![],
        index_terms: vec![(vec![], b"t".to_vec())],
    };
    assert!(s.put_with(b"k", b"v", &bad_terms).is_err());
    assert!(s
        .scan_objects((Included(&b"z"[..]), Included(&b"a"[..])))
        .is_err());
    assert!(s.write(&Batch::new()).is_err());
    assert_eq!(s.scan_heads(ALL).unwrap().count(), 0);
    assert_eq!(s.stats().last_seq, 0);
    let e = Store::open(dir.path(), small_opts()).unwrap_err();
    assert!(matches!(e, Error::Locked(_)), "{e}");
    let bad = Options {
        memtable_bytes_max: 1,
        ..Options::default()
    };
    let d2 = tempfile::tempdir().unwrap();
    assert!(Store::open(d2.path(), bad)
        .unwrap_err()
        .to_string()
        .contains("memtable_bytes_max"));
}

#[test]
fn batches_snapshots_and_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    s.put_with(
        b"a",
        b"1",
        &PutOptions {
            metadata: b"meta-a".to_vec(),
            index_terms: vec![],
        },
    )
    .unwrap();
    let snap = s.snapshot().unwrap();
    let mut b = Batch::new();
    b.put(b"a", b"2").put(b"b", &val(1, 5000)).delete(b"zz");
    s.write(&b).unwrap();
    assert_eq!(s.get(b"a").unwrap().unwrap(), b"2");
    assert_eq!(snap.get(b"a").unwrap().unwrap(), b"1");
    assert_eq!(snap.head(b"a").unwrap().unwrap().metadata, b"meta-a");
    assert_eq!(snap.get(b"b").unwrap(), None);
    // The snapshot survives flushes and compactions of newer data.
    for i in 0..500u32 {
        s.put(format!("x{i}").as_bytes(), &val(i, 2000)).unwrap();
    }
    s.compact_ledger().unwrap();
    assert_eq!(snap.get(b"a").unwrap().unwrap(), b"1");
    assert_eq!(snap.scan_objects(ALL).unwrap().count(), 1);
    drop(snap);
    assert_eq!(s.head(b"a").unwrap().unwrap().metadata, Vec::<u8>::new());
}

#[test]
fn secondary_index_follows_object_updates() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    let terms = |t: &[&str]| PutOptions {
        metadata: vec![],
        index_terms: t
            .iter()
            .map(|x| (b"colour".to_vec(), x.as_bytes().to_vec()))
            .collect(),
    };
    s.put_with(b"o1", b"v", &terms(&["red", "blue"])).unwrap();
    s.put_with(b"o2", b"v", &terms(&["red"])).unwrap();
    s.put_with(b"o3", b"v", &terms(&["green"])).unwrap();
    let q = |s: &Store, lo: &[u8], hi: &[u8]| -> Vec<(Vec<u8>, Vec<u8>)> {
        s.index_query(b"colour", (Included(lo), Included(hi)), true, 100)
            .unwrap()
            .into_iter()
            .map(|h| (h.term.unwrap(), h.key))
            .collect()
    };
    assert_eq!(
        q(&s, b"red", b"red"),
        vec![
            (b"red".to_vec(), b"o1".to_vec()),
            (b"red".to_vec(), b"o2".to_vec())
        ]
    );
    assert_eq!(q(&s, b"a", b"h").len(), 2);
    // Replacing the terms drops the old postings; deleting drops them all.
    s.put_with(b"o1", b"v2", &terms(&["green"])).unwrap();
    s.delete(b"o2").unwrap();
    assert_eq!(q(&s, b"red", b"red"), vec![]);
    assert_eq!(q(&s, b"green", b"green").len(), 2);
    s.compact_ledger().unwrap();
    drop(s);
    let s = Store::open(dir.path(), small_opts()).unwrap();
    assert_eq!(q(&s, b"green", b"green").len(), 2);
    assert_eq!(q(&s, b"a", b"z").len(), 2);
    assert_eq!(
        s.head(b"o1").unwrap().unwrap().index_terms,
        vec![(b"colour".to_vec(), b"green".to_vec())]
    );
}

#[test]
fn anti_entropy_lists_the_keys_that_differ() {
    let d1 = tempfile::tempdir().unwrap();
    let d2 = tempfile::tempdir().unwrap();
    let a = Store::open(d1.path(), small_opts()).unwrap();
    let b = Store::open(d2.path(), small_opts()).unwrap();
    for i in 0..3000u32 {
        let k = format!("key{i}");
        a.put(k.as_bytes(), &val(i, 700)).unwrap();
        if i != 42 {
            b.put(k.as_bytes(), &val(if i == 7 { 9999 } else { i }, 700))
                .unwrap();
        }
    }
    b.put(b"only-in-b", b"x").unwrap();
    let (ta, tb) = (a.aae_tree(ALL).unwrap(), b.aae_tree(ALL).unwrap());
    let segs = ta.diff_segments(&tb);
    assert!(!segs.is_empty() && segs.len() <= 3);
    let ka = a.aae_keys(ALL, &segs).unwrap();
    let kb = b.aae_keys(ALL, &segs).unwrap();
    let diff = tablinum_engine::aae::diff_keys(&ka, &kb);
    assert_eq!(
        diff,
        vec![b"key42".to_vec(), b"key7".to_vec(), b"only-in-b".to_vec()]
    );
}

#[test]
fn journal_compaction_reclaims_space_and_keeps_every_live_value() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_compaction_hours: None,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for round in 0..5u32 {
        for i in 0..200u32 {
            s.put(format!("k{i:04}").as_bytes(), &val(i * 10 + round, 2000))
                .unwrap();
        }
    }
    let snap = s.snapshot().unwrap();
    let before = s.disk_bytes();
    let r = s.compact_journal().unwrap();
    assert!(!r.segments_compacted.is_empty(), "{r:?}");
    // No deletes: only the spans holding live records were read (none at
    // all when the run is the first rounds, wholly overwritten).
    assert!(
        r.bytes_read < r.bytes_before && r.bytes_after < r.bytes_before,
        "{r:?}"
    );
    // A snapshot taken before keeps reading through the compaction.
    assert_eq!(snap.get(b"k0003").unwrap().unwrap(), val(34, 2000));
    drop(snap);
    let mut runs = 0;
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {
        runs += 1;
        assert!(runs < 50);
    }
    // Replaced files go once the last reader of the old view lets go (a
    // background job may still hold it for a moment).
    let t0 = std::time::Instant::now();
    while s.disk_bytes() >= before {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(10),
            "{} >= {before}",
            s.disk_bytes()
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    for i in 0..200u32 {
        assert_eq!(
            s.get(format!("k{i:04}").as_bytes()).unwrap().unwrap(),
            val(i * 10 + 4, 2000)
        );
    }
    s.verify().unwrap();
    drop(s);
    let s = Store::open(dir.path(), opts).unwrap();
    for i in 0..200u32 {
        assert_eq!(
            s.get(format!("k{i:04}").as_bytes()).unwrap().unwrap(),
            val(i * 10 + 4, 2000)
        );
    }
}

#[test]
fn deleted_ledger_is_rebuilt_from_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    for i in 0..1000u32 {
        s.put(format!("k{i:04}").as_bytes(), &val(i, 1500)).unwrap();
    }
    for i in 0..1000u32 {
        if i % 2 == 0 {
            s.put(format!("k{i:04}").as_bytes(), &val(i + 1, 1500))
                .unwrap();
        }
        if i % 5 == 0 {
            s.delete(format!("k{i:04}").as_bytes()).unwrap();
        }
    }
    s.compact_ledger().unwrap();
    drop(s);
    std::fs::remove_dir_all(dir.path().join("ledger")).unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    for i in 0..1000u32 {
        let got = s.get(format!("k{i:04}").as_bytes()).unwrap();
        let want = if i % 5 == 0 {
            None
        } else if i % 2 == 0 {
            Some(val(i + 1, 1500))
        } else {
            Some(val(i, 1500))
        };
        assert_eq!(got, want, "k{i:04}");
    }
}

/// Regression: relocated pointers reached the memtable before their new
/// segment was readable, so a concurrent GET could fail with "points to a
/// journal segment that is not in the manifest" (seen as a flaky
/// `deleted_ledger_is_rebuilt_from_the_journal`).
#[test]
fn reads_during_journal_compaction_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_compaction_hours: None,
        ..small_opts()
    };
    let s = std::sync::Arc::new(Store::open(dir.path(), opts).unwrap());
    for round in 0..8u32 {
        for i in 0..1000u32 {
            // Every fifth key is written once, so the oldest segments stay
            // ~20 % live and compaction has values to relocate.
            if round == 0 || i % 5 != 0 {
                s.put(format!("k{i:04}").as_bytes(), &val(i * 10 + round, 1500))
                    .unwrap();
            }
        }
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (s, stop) = (s.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut reads = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for i in 0..1000u32 {
                    let v = s.get(format!("k{i:04}").as_bytes()).unwrap();
                    let round = if i % 5 == 0 { 0 } else { 7 };
                    if v != Some(val(i * 10 + round, 1500)) {
                        let found =
                            (0..8u32).find(|r| v.as_deref() == Some(&val(i * 10 + r, 1500)[..]));
                        panic!("key {i}: expected round {round}, found round {found:?}");
                    }
                    reads += 1;
                }
            }
            reads
        })
    };
    let mut runs = 0;
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {
        runs += 1;
        assert!(runs < 50);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(reader.join().unwrap() > 0);
    assert!(runs > 0);
}

/// Regression (review): index terms whose encoding exceeded 16 bits were
/// accepted, and the wrapped length made the record unreadable.
#[test]
fn oversized_index_terms_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path(), small_opts()).unwrap();
    let terms: Vec<(Vec<u8>, Vec<u8>)> = (0..61u8)
        .map(|i| {
            (
                vec![b'n'; 63].into_iter().chain([i]).collect(),
                vec![b't'; 1024],
            )
        })
        .collect();
    let opts = PutOptions {
        metadata: vec![],
        index_terms: terms,
    };
    let e = s.put_with(b"k", &val(1, 600), &opts).unwrap_err();
    assert!(
        e.to_string().contains("INDEX_TERMS_ENCODED_BYTES_MAX"),
        "{e}"
    );
    assert_eq!(s.get(b"k").unwrap(), None);
}

/// Regression (review): journal compaction dropped a delete record once the
/// ledger had dropped its tombstone, so a ledger rebuilt from the journal
/// resurrected the deleted key from an older segment.
#[test]
fn deleted_key_stays_deleted_after_journal_compaction_and_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_compaction_hours: None,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    s.put(b"victim", &val(7, 2000)).unwrap();
    for i in 0..60u32 {
        s.put(format!("keep{i:03}").as_bytes(), &val(i, 2000))
            .unwrap();
    }
    for round in 0..4u32 {
        if round == 1 {
            // Lands amid junk that later rounds overwrite, so its segment
            // is almost all dead and gets compacted.
            s.delete(b"victim").unwrap();
        }
        for i in 0..60u32 {
            s.put(format!("junk{i:03}").as_bytes(), &val(i + round, 2000))
                .unwrap();
        }
        // Separate L0 tables, so the ledger compaction below merges them
        // into the bottom level and drops the tombstone.
        s.flush().unwrap();
    }
    s.compact_ledger().unwrap();
    let (mut runs, mut read_whole) = (0, 0);
    loop {
        let r = s.compact_journal().unwrap();
        if r.segments_compacted.is_empty() {
            break;
        }
        // A run holding the delete record is read whole, record by record.
        if r.records_dropped.is_some() {
            assert_eq!(r.bytes_read, r.bytes_before, "{r:?}");
            read_whole += 1;
        }
        runs += 1;
        assert!(runs < 50);
    }
    assert!(
        runs > 0 && read_whole > 0,
        "{runs} runs, {read_whole} read whole"
    );
    s.close().unwrap();
    drop(s);
    std::fs::remove_dir_all(dir.path().join("ledger")).unwrap();
    let s = Store::open(dir.path(), opts).unwrap();
    assert_eq!(s.get(b"victim").unwrap(), None);
    assert_eq!(s.get(b"keep007").unwrap(), Some(val(7, 2000)));
}

/// Segments of opens without writes are removed by journal compaction, and
/// a leftover rebuild marker (a rebuild interrupted by a crash) makes the
/// next open rebuild the ledger again.
#[test]
fn empty_segments_are_reclaimed_and_interrupted_rebuilds_restart() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_compaction_hours: None,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    s.put(b"a", b"1").unwrap();
    drop(s);
    for _ in 0..4 {
        drop(Store::open(dir.path(), opts.clone()).unwrap());
    }
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    let before = s.stats().journal_segments;
    s.compact_journal().unwrap();
    assert!(
        s.stats().journal_segments < before,
        "{} segments before and after",
        before
    );
    assert_eq!(s.get(b"a").unwrap().unwrap(), b"1");
    drop(s);
    std::fs::write(dir.path().join("REBUILDING"), b"").unwrap();
    let s = Store::open(dir.path(), opts).unwrap();
    assert!(!dir.path().join("REBUILDING").exists());
    assert_eq!(s.get(b"a").unwrap().unwrap(), b"1");
}

#[test]
fn immutable_files_list_tables_and_sealed_segments_that_exist() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = small_opts();
    o.journal_segment_bytes_max = 64 << 10;
    let s = Store::open(dir.path(), o).unwrap();
    assert!(
        s.immutable_files().is_empty(),
        "a new store has only its active segment"
    );
    for i in 0..200u32 {
        s.put(format!("k{i:04}").as_bytes(), &val(i, 1_000))
            .unwrap();
    }
    s.flush().unwrap();
    let files = s.immutable_files();
    assert!(files.iter().any(|f| f.starts_with("ledger/")), "{files:?}");
    assert!(files.iter().any(|f| f.starts_with("journal/")), "{files:?}");
    for f in &files {
        assert!(dir.path().join(f).is_file(), "{f} is listed but missing");
    }
    // The segment being written is never listed.
    let segments = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .count();
    let listed = files.iter().filter(|f| f.starts_with("journal/")).count();
    assert_eq!(listed + 1, segments, "{files:?}");
    s.close().unwrap();
}

/// Under Sync a write becomes visible only once durable: concurrent
/// readers never see a write newer than the durable bound (which only a
/// completed journal fsync raises). Before, a reader could see a write in
/// the window between its memtable apply and its group commit.
#[test]
fn under_sync_readers_never_see_a_write_before_it_is_durable() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let d = tempfile::tempdir().unwrap();
    let s = Arc::new(
        Store::open(
            d.path(),
            Options {
                durability: Durability::Sync,
                ..Options::default()
            },
        )
        .unwrap(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let s = s.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut i = 0u32;
                while !stop.load(Ordering::Relaxed) && i < 5_000 {
                    s.put(
                        format!("k{}", i % 8).as_bytes(),
                        format!("{w}-{i}").as_bytes(),
                    )
                    .unwrap();
                    i += 1;
                }
            })
        })
        .collect();
    let mut seen = 0u64;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(2) {
        for k in 0..8 {
            let key = format!("k{k}");
            if let Some(h) = s.head(key.as_bytes()).unwrap() {
                assert!(
                    h.seq <= s.durable_seq(),
                    "head saw seq {} before it was durable ({})",
                    h.seq,
                    s.durable_seq()
                );
                seen += 1;
            }
        }
        for r in s
            .scan_heads((std::ops::Bound::Unbounded, std::ops::Bound::Unbounded))
            .unwrap()
        {
            let (_, h) = r.unwrap();
            assert!(
                h.seq <= s.durable_seq(),
                "scan saw seq {} before it was durable",
                h.seq
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    assert!(seen > 100, "{seen}");
}

/// `journal_syncs` counts group commits: one per write or fewer under
/// `Sync` (never more), none under `NoSync`.
#[test]
fn group_commits_are_counted_under_sync_only() {
    use std::sync::Arc;
    for durability in [Durability::Sync, Durability::NoSync] {
        let d = tempfile::tempdir().unwrap();
        let s = Arc::new(
            Store::open(
                d.path(),
                Options {
                    durability,
                    ..small_opts()
                },
            )
            .unwrap(),
        );
        let writers: Vec<_> = (0..4u32)
            .map(|w| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for i in 0..100u32 {
                        s.put(format!("w{w}-{i}").as_bytes(), &val(i, 100)).unwrap();
                    }
                })
            })
            .collect();
        for t in writers {
            t.join().unwrap();
        }
        let syncs = s.stats().journal_syncs;
        match durability {
            Durability::Sync => assert!((1..=400).contains(&syncs), "{syncs}"),
            Durability::NoSync => assert_eq!(syncs, 0),
        }
    }
}

/// Regression: a GET whose view was taken just before a segment roll met,
/// in the shared active memtable, an entry written after the roll, and
/// failed with "ledger entry points to a journal segment that is not in the
/// manifest" (found by the harness's reclaim-window test with 64 KiB
/// segments). Writers roll a 64 KiB segment every ~30 writes here.
#[test]
fn reads_racing_segment_rolls_never_fail() {
    let dir = tempfile::tempdir().unwrap();
    let s = std::sync::Arc::new(Store::open(dir.path(), small_opts()).unwrap());
    for i in 0..32u32 {
        s.put(format!("r{i:02}").as_bytes(), &val(i, 2000)).unwrap();
    }
    let writers_left = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(2));
    let mut threads = Vec::new();
    for w in 0..2u32 {
        let (s, left) = (s.clone(), writers_left.clone());
        threads.push(std::thread::spawn(move || {
            for n in 0..6_000u32 {
                let i = (n * 7 + w) % 32;
                s.put(format!("r{i:02}").as_bytes(), &val(n, 2000)).unwrap();
            }
            left.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            0u64
        }));
    }
    for _ in 0..3 {
        let (s, left) = (s.clone(), writers_left.clone());
        threads.push(std::thread::spawn(move || {
            let mut reads = 0u64;
            while left.load(std::sync::atomic::Ordering::Relaxed) > 0 {
                for i in 0..32u32 {
                    match s.get(format!("r{i:02}").as_bytes()) {
                        Ok(Some(v)) => assert_eq!(v.len(), 2000),
                        other => panic!("key {i}: {other:?}"),
                    }
                    reads += 1;
                }
            }
            reads
        }));
    }
    let reads: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(reads > 0);
    assert!(s.stats().journal_segments > 1);
}

/// Opens a store with `journal_compaction_garbage_pct = pct` (and the
/// default hourly interval), lets its first scheduled check pass, then
/// overwrites every key nine times (90 % of the journal dead) and returns
/// the journal compactions that ran by themselves within `wait`.
fn scheduled_compactions_after_overwrites(pct: u32, wait: std::time::Duration) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_compaction_garbage_pct: pct,
        ..small_opts()
    };
    assert_eq!(opts.journal_compaction_interval_s, 3600);
    let s = Store::open(dir.path(), opts).unwrap();
    // The first check after open finds nothing to do and starts the interval.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    for round in 0..10u32 {
        for i in 0..100u32 {
            s.put(format!("k{i:04}").as_bytes(), &val(i * 10 + round, 2000))
                .unwrap();
        }
    }
    s.flush().unwrap();
    let t0 = std::time::Instant::now();
    while s.stats().journal_compactions == 0 && t0.elapsed() < wait {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let n = s.stats().journal_compactions;
    for i in 0..100u32 {
        assert_eq!(
            s.get(format!("k{i:04}").as_bytes()).unwrap().unwrap(),
            val(i * 10 + 9, 2000)
        );
    }
    s.verify().unwrap();
    n
}

#[test]
fn a_journal_mostly_garbage_is_compacted_without_waiting_for_the_interval() {
    let n = scheduled_compactions_after_overwrites(50, std::time::Duration::from_secs(30));
    assert!(
        n > 0,
        "no journal compaction ran within 30 s of 90 % garbage"
    );
}

#[test]
fn without_the_garbage_trigger_the_interval_holds_compaction_back() {
    let n = scheduled_compactions_after_overwrites(0, std::time::Duration::from_secs(4));
    assert_eq!(n, 0, "a journal compaction ran inside the hourly interval");
}

#[test]
fn read_counters_say_what_each_get_cost() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        durability: Durability::NoSync,
        // No journal compaction: its liveness lookups would count too.
        journal_compaction_hours: None,
        ..Options::default()
    };
    let s = Store::open(dir.path(), opts).unwrap();
    // Even keys carry 3,000-byte values (kept in the journal), odd keys
    // 100-byte values (kept in the ledger entry).
    let len = |i: u32| if i.is_multiple_of(2) { 3000 } else { 100 };
    for i in 0..1000u32 {
        s.put(format!("k{i:05}").as_bytes(), &val(i, len(i)))
            .unwrap();
    }
    assert!(s.stats().memtable_bytes > 0);
    s.flush().unwrap();
    let before = s.stats().reads;
    assert_eq!(s.stats().memtable_bytes, 0, "flushed");

    // 100 found GETs of journal values: one read each, of the (uncompressed)
    // value alone.
    for i in (0..200u32).step_by(2) {
        assert!(s.get(format!("k{i:05}").as_bytes()).unwrap().is_some());
    }
    let after = s.stats().reads;
    assert_eq!(after.value_reads - before.value_reads, 100);
    assert_eq!(after.value_read_bytes - before.value_read_bytes, 100 * 3000);
    assert!(after.table_probes - before.table_probes >= 100);
    assert_eq!(after.bloom_false_positives, before.bloom_false_positives);
    assert!(after.block_cache_misses > before.block_cache_misses);
    assert!(after.block_read_bytes > before.block_read_bytes);
    assert!(s.stats().block_cache_bytes > 0);

    // Values kept in the ledger cost no value read; their blocks are cached.
    for i in (1..200u32).step_by(2) {
        assert!(s.get(format!("k{i:05}").as_bytes()).unwrap().is_some());
    }
    let inline = s.stats().reads;
    assert_eq!(inline.value_reads, after.value_reads);
    assert!(inline.block_cache_hits > after.block_cache_hits);

    // Absent keys inside the table's range (`k00999x` would sort after its
    // last key): the bloom filter answers almost all of them (10 bits per
    // key: about 1 % false positives), and nothing reads a value.
    for i in 0..999u32 {
        assert!(s.get(format!("k{i:05}x").as_bytes()).unwrap().is_none());
    }
    let absent = s.stats().reads;
    let probes = absent.table_probes - inline.table_probes;
    let negatives = absent.bloom_negatives - inline.bloom_negatives;
    let false_positives = absent.bloom_false_positives - inline.bloom_false_positives;
    assert!(probes >= 999, "{absent:?}");
    assert_eq!(probes, negatives + false_positives, "{absent:?}");
    assert!(false_positives < 50, "{absent:?}");
    assert_eq!(absent.value_reads, inline.value_reads);
}

#[test]
fn preallocated_segments_roll_reopen_and_compact_like_any_other() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_preallocate: true,
        journal_compaction_hours: None,
        ..small_opts()
    };
    let seg_max = opts.journal_segment_bytes_max;
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for i in 0..300u32 {
        s.put(format!("k{:03}", i % 100).as_bytes(), &val(i, 3000))
            .unwrap();
    }
    // Every write segment reserved its full size when it was created, and
    // the reservation never shows as file length.
    let segs: Vec<_> = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(segs.len() > 5, "{} segments", segs.len());
    for p in &segs {
        let md = std::fs::metadata(p).unwrap();
        assert!(md.len() <= seg_max, "{p:?}: {} bytes", md.len());
        assert!(
            md.blocks() * 512 >= seg_max,
            "{p:?}: {} blocks",
            md.blocks()
        );
    }
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {}
    drop(s);
    let s = Store::open(dir.path(), opts).unwrap();
    for i in 200..300u32 {
        let k = format!("k{:03}", i % 100);
        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(val(i, 3000)), "{k}");
    }
}

/// Offsets in `hay` where `needle` starts.
fn find_all(hay: &[u8], needle: &[u8]) -> Vec<usize> {
    hay.windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(i, _)| i)
        .collect()
}

#[test]
fn aligned_values_start_on_a_page_through_rolls_reopen_and_journal_compaction() {
    const PAGE: usize = 4096;
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_align_value_bytes_min: 4096,
        journal_segment_bytes_max: 256 << 10,
        journal_compaction_hours: None,
        ..small_opts()
    };
    // Incompressible 8 KiB and 5,000-byte values (padded where that saves a
    // page), compressible 8 KiB ones (never padded) and small ones.
    let value = |i: u32| -> Vec<u8> {
        match i % 4 {
            0 => val(i, 8192),
            1 => val(i, 5000),
            2 => format!("{i:08}").repeat(1024).into_bytes(),
            _ => val(i, 700),
        }
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for i in 0..400u32 {
        s.put(format!("k{:03}", i % 100).as_bytes(), &value(i))
            .unwrap();
    }
    let check = |s: &Store| {
        for i in 300..400u32 {
            let k = format!("k{:03}", i % 100);
            assert_eq!(s.get(k.as_bytes()).unwrap(), Some(value(i)), "{k}");
        }
    };
    check(&s);
    // Every incompressible 8 KiB value starts on a page in whichever
    // segment holds it; 5,000-byte ones never span more than 2 pages.
    let journal = |ext: &str| -> Vec<u8> {
        let mut all = Vec::new();
        let mut paths: Vec<_> = std::fs::read_dir(dir.path().join("journal"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == ext))
            .collect();
        paths.sort();
        for p in paths {
            let mut b = std::fs::read(&p).unwrap();
            // Keep page offsets of each file: pad the concatenation.
            b.resize(b.len().div_ceil(PAGE) * PAGE, 0);
            all.extend(b);
        }
        all
    };
    let check_layout = |bytes: &[u8], range: std::ops::Range<u32>, min_seen: usize| {
        let mut seen = 0;
        for i in range.filter(|i| i % 4 < 2) {
            let v = value(i);
            for at in find_all(bytes, &v[..64]) {
                seen += 1;
                if v.len() == 8192 {
                    assert_eq!(at % PAGE, 0, "value {i} at {at}");
                } else {
                    assert!(at % PAGE + v.len() <= 2 * PAGE, "value {i} at {at}");
                }
            }
        }
        assert!(seen >= min_seen, "only {seen} values found");
    };
    check_layout(&journal("jnl"), 0..400, 100);
    // Journal compaction pads anew at the record's new offset.
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {}
    check(&s);
    check_layout(&journal("gcj"), 300..400, 5);
    drop(s);
    // Replay reads padded records, and a store reopened without padding
    // still reads them.
    let s = Store::open(
        dir.path(),
        Options {
            journal_align_value_bytes_min: 0,
            ..opts
        },
    )
    .unwrap();
    check(&s);
    s.verify().unwrap();
}

#[test]
fn a_damaged_aligned_value_is_reported_never_returned() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_align_value_bytes_min: 4096,
        journal_compaction_hours: None,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for i in 0..20u32 {
        s.put(format!("k{i:02}").as_bytes(), &val(i, 8192)).unwrap();
    }
    s.close().unwrap();
    drop(s);
    let v = val(7, 8192);
    let mut hit = None;
    for e in std::fs::read_dir(dir.path().join("journal")).unwrap() {
        let p = e.unwrap().path();
        let b = std::fs::read(&p).unwrap();
        if let Some(&at) = find_all(&b, &v[..64]).first() {
            hit = Some((p, b, at));
        }
    }
    let (path, mut bytes, at) = hit.expect("value 7 is in the journal");
    bytes[at + 100] ^= 0x5A;
    std::fs::write(&path, &bytes).unwrap();
    // `close` flushed every write to the ledger, so open replays nothing and
    // the GET is the first to read the damaged value.
    let s = Store::open(dir.path(), opts).unwrap();
    let e = s.get(b"k07").expect_err("damaged value returned");
    assert!(e.is_corruption(), "{e}");
    assert!(e.to_string().contains("checksum"), "{e}");
    for i in (0..20u32).filter(|&i| i != 7) {
        assert_eq!(
            s.get(format!("k{i:02}").as_bytes()).unwrap(),
            Some(val(i, 8192))
        );
    }
    assert!(s.verify().is_err());
}

#[test]
fn journal_segments_of_version_1_are_read_and_newer_ones_refused() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        journal_align_value_bytes_min: 0,
        journal_recycle_segments: 0,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for i in 0..50u32 {
        s.put(format!("k{i:02}").as_bytes(), &val(i, 3000)).unwrap();
    }
    s.close().unwrap();
    drop(s);
    let set_version = |version: u32| {
        for e in std::fs::read_dir(dir.path().join("journal")).unwrap() {
            let p = e.unwrap().path();
            let mut b = std::fs::read(&p).unwrap();
            b[8..12].copy_from_slice(&version.to_le_bytes());
            let c = crc32c::crc32c(&b[..24]);
            b[24..28].copy_from_slice(&c.to_le_bytes());
            std::fs::write(&p, &b).unwrap();
        }
    };
    set_version(1);
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for i in 0..50u32 {
        assert_eq!(
            s.get(format!("k{i:02}").as_bytes()).unwrap(),
            Some(val(i, 3000))
        );
    }
    s.close().unwrap();
    drop(s);
    set_version(4);
    match Store::open(dir.path(), opts) {
        Err(Error::UnsupportedVersion { found: 4, .. }) => {}
        Err(e) => panic!("wrong error: {e}"),
        Ok(_) => panic!("a version 4 segment was opened"),
    }
}

/// Journal files: (segments with a version 3 header, pool files). The
/// store may be open and deleting segments meanwhile: a file that is gone
/// by the time it is read is not counted.
fn recycled_and_pooled(dir: &std::path::Path) -> (usize, usize) {
    let (mut v3, mut pool) = (0, 0);
    for e in std::fs::read_dir(dir.join("journal")).unwrap() {
        let p = e.unwrap().path();
        match p.extension().and_then(|x| x.to_str()) {
            Some("free") => pool += 1,
            Some("jnl") => {
                // The header's version is bytes 8..12; read only those.
                use std::io::Read;
                let mut head = [0u8; 12];
                match std::fs::File::open(&p).and_then(|mut f| f.read_exact(&mut head)) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                    Err(e) => panic!("{}: {e}", p.display()),
                }
                v3 += usize::from(head[8..12] == 3u32.to_le_bytes());
            }
            _ => {}
        }
    }
    (v3, pool)
}

/// Pages of the file at `path` the page cache holds now (`mincore` of a
/// shared read-only mapping).
#[allow(unsafe_code)]
fn resident_pages(path: &std::path::Path) -> usize {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    if len == 0 {
        return 0;
    }
    let page = 4096;
    let mut vec = vec![0u8; len.div_ceil(page)];
    // SAFETY: a fresh read-only shared mapping of `len` bytes of an open
    // file; mincore writes one byte per page into `vec`, which holds
    // exactly that many; the mapping is unmapped before returning and no
    // byte of it is ever read.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        );
        assert_ne!(addr, libc::MAP_FAILED, "mmap {}", path.display());
        let rc = libc::mincore(addr, len, vec.as_mut_ptr());
        libc::munmap(addr, len);
        assert_eq!(rc, 0, "mincore {}", path.display());
    }
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

/// Files of `dir`'s journal with extension `ext` (`free`: the recycling pool).
fn journal_files(dir: &std::path::Path, ext: &str) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect()
}

#[test]
fn deleted_segments_are_recycled_as_write_segments_and_read_back_after_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        durability: Durability::Sync,
        journal_compaction_hours: None,
        journal_recycle_segments: 2,
        ..small_opts()
    };
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    let mut latest = std::collections::BTreeMap::new();
    let put = |s: &Store, latest: &mut std::collections::BTreeMap<String, u32>, i: u32| {
        let k = format!("k{:03}", i % 40);
        s.put(k.as_bytes(), &val(i, 3000)).unwrap();
        latest.insert(k, i);
    };
    for i in 0..400u32 {
        put(&s, &mut latest, i);
    }
    // Control for the check below: sealed segments, just written, are in
    // the page cache.
    let cached: usize = journal_files(dir.path(), "jnl")
        .iter()
        .map(|p| resident_pages(p))
        .sum();
    assert!(cached > 0, "written segments are cached");
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {}
    let (v3, pool) = recycled_and_pooled(dir.path());
    assert_eq!((v3, pool), (0, 2), "compaction fills the pool, no more");
    // A file entering the pool leaves the page cache: nothing reads it.
    for p in journal_files(dir.path(), "free") {
        assert_eq!(resident_pages(&p), 0, "{} still cached", p.display());
    }
    for i in 400..700u32 {
        put(&s, &mut latest, i);
    }
    let (v3, _) = recycled_and_pooled(dir.path());
    assert!(v3 >= 2, "the writer took both pool files: {v3}");
    for (k, &i) in &latest {
        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(val(i, 3000)), "{k}");
    }
    s.verify().unwrap();
    // Again through compaction (recycled segments are read and deleted
    // like any other), then a reopen, which empties the pool.
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {}
    for i in 700..760u32 {
        put(&s, &mut latest, i);
    }
    drop(s);
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    assert_eq!(
        recycled_and_pooled(dir.path()).1,
        0,
        "reopen empties the pool"
    );
    for (k, &i) in &latest {
        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(val(i, 3000)), "{k}");
    }
    s.verify().unwrap();
    drop(s);
    // A manifest rebuilt from the files knows neither sealed sizes nor first
    // sequence numbers: recycled segments end at their leftovers.
    assert!(recycled_and_pooled(dir.path()).0 > 0);
    std::fs::remove_file(dir.path().join("MANIFEST")).unwrap();
    std::fs::remove_dir_all(dir.path().join("ledger")).unwrap();
    let s = Store::open(dir.path(), opts.clone()).unwrap();
    for (k, &i) in &latest {
        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(val(i, 3000)), "{k}");
    }
    s.verify().unwrap();
    drop(s);
    // Off: deleted segments are unlinked.
    let off = Options {
        journal_recycle_segments: 0,
        ..opts
    };
    let s = Store::open(dir.path(), off).unwrap();
    for i in 760..1100u32 {
        put(&s, &mut latest, i);
    }
    while !s.compact_journal().unwrap().segments_compacted.is_empty() {}
    assert_eq!(recycled_and_pooled(dir.path()).1, 0);
    for (k, &i) in &latest {
        assert_eq!(s.get(k.as_bytes()).unwrap(), Some(val(i, 3000)), "{k}");
    }
}

/// Two writes applied one after the other without waiting for durability
/// (an appender releasing its lock before the fsync) share one group
/// commit, and both are readable and acknowledged afterwards.
#[test]
fn unacked_writes_share_one_fsync_and_are_acknowledged_in_any_order() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(
        dir.path(),
        Options {
            durability: Durability::Sync,
            ..Options::default()
        },
    )
    .unwrap();
    let syncs = s.stats().journal_syncs;
    let mut a = Batch::new();
    a.put(b"a", &val(1, 3000));
    let mut b = Batch::new();
    b.put(b"b", &val(2, 3000));
    let wa = s.write_unacked(&a).unwrap();
    let wb = s.write_unacked(&b).unwrap();
    let sb = s.acknowledge(wb).unwrap();
    let sa = s.acknowledge(wa).unwrap();
    assert!(sa < sb, "sequence numbers follow the apply order");
    assert_eq!(
        s.stats().journal_syncs - syncs,
        1,
        "the second acknowledgement's fsync covered the first write"
    );
    assert_eq!(s.get(b"a").unwrap(), Some(val(1, 3000)));
    assert_eq!(s.get(b"b").unwrap(), Some(val(2, 3000)));
    s.close().unwrap();
    drop(s);
    let s = Store::open(dir.path(), Options::default()).unwrap();
    assert_eq!(s.get(b"b").unwrap(), Some(val(2, 3000)));
}
