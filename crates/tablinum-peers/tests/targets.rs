//! Round trips for every peer target: put/get/head/delete/scan, persistence
//! across a reopen, and the `sync` mode. Run by hand (not in CI; RocksDB takes
//! ~13 minutes to build):
//! `CARGO_TARGET_DIR=/work/target-peers cargo test --release -p tablinum-peers`.

use std::path::Path;
use std::sync::Arc;

use tablinum_peers::{open, Target, TargetConfig, NAMES};

const VALUE_LEN: usize = 8 * 1024;

fn config(dir: &Path, sync: bool) -> TargetConfig {
    TargetConfig {
        dir: dir.to_path_buf(),
        sync,
        cache_bytes: 8 * 1024 * 1024,
    }
}

fn key(i: u32) -> Vec<u8> {
    format!("key-{i:08}").into_bytes()
}

/// Deterministic, incompressible-looking 8 KiB value for `i` (xorshift64).
fn value(i: u32) -> Vec<u8> {
    let mut x = u64::from(i).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..VALUE_LEN)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x.to_le_bytes()[0]
        })
        .collect()
}

fn round_trip(name: &str, sync: bool) {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = open(name, &config(dir.path(), sync)).expect("open");
    assert_eq!(t.name(), name);

    // Absent keys.
    assert_eq!(t.get(&key(1)).expect("get"), None);
    assert_eq!(t.head(&key(1)).expect("head"), None);
    t.delete(&key(1))
        .expect("delete of an absent key is not an error");

    for i in 0..100 {
        t.put(&key(i), &value(i)).expect("put");
    }
    assert_eq!(t.get(&key(7)).expect("get"), Some(value(7)));
    assert_eq!(t.head(&key(7)).expect("head"), Some(VALUE_LEN as u64));

    // Overwrite with a small value (kept inline by the separated flavors).
    t.put(&key(8), b"small").expect("overwrite");
    assert_eq!(t.get(&key(8)).expect("get"), Some(b"small".to_vec()));
    assert_eq!(t.head(&key(8)).expect("head"), Some(5));

    t.delete(&key(9)).expect("delete");
    assert_eq!(t.get(&key(9)).expect("get"), None);
    assert_eq!(t.head(&key(9)).expect("head"), None);

    // Scans: from the start, from the middle, past a deleted key, past the end.
    assert_eq!(t.scan(&key(0), 10).expect("scan"), 10);
    assert_eq!(t.scan(b"", 1_000).expect("scan all"), 99);
    assert_eq!(t.scan(&key(5), 10).expect("scan over delete"), 10);
    assert_eq!(t.scan(&key(95), 10).expect("scan to end"), 5);
    assert_eq!(t.scan(b"zzz", 10).expect("scan past end"), 0);
    assert_eq!(t.scan(&key(0), 0).expect("scan limit 0"), 0);

    assert!(t.disk_bytes().expect("disk bytes") > 0);
    t.close().expect("close");
}

fn reopen(name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = config(dir.path(), false);
    {
        let t = open(name, &cfg).expect("open");
        for i in 0..200 {
            t.put(&key(i), &value(i)).expect("put");
        }
        t.delete(&key(3)).expect("delete");
        t.close().expect("close");
    }
    let t = open(name, &cfg).expect("reopen");
    assert_eq!(t.get(&key(0)).expect("get"), Some(value(0)));
    assert_eq!(t.get(&key(199)).expect("get"), Some(value(199)));
    assert_eq!(t.get(&key(3)).expect("get"), None);
    assert_eq!(t.head(&key(150)).expect("head"), Some(VALUE_LEN as u64));
    assert_eq!(t.scan(b"", 1_000).expect("scan"), 199);
    // Writes still work after a reopen.
    t.put(&key(3), &value(3)).expect("put after reopen");
    assert_eq!(t.get(&key(3)).expect("get"), Some(value(3)));
    t.close().expect("close");
}

/// Two workers share one target (`&self`, `Send + Sync`) with `sync` on.
fn concurrent_sync_writers(name: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let t: Arc<dyn Target> = Arc::from(open(name, &config(dir.path(), true)).expect("open"));
    let workers: Vec<_> = (0..2u32)
        .map(|w| {
            let t = Arc::clone(&t);
            std::thread::spawn(move || {
                for i in (w * 50)..(w * 50 + 50) {
                    t.put(&key(i), &value(i)).expect("put");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_eq!(t.scan(b"", 1_000).expect("scan"), 100);
    assert_eq!(t.get(&key(77)).expect("get"), Some(value(77)));
    t.close().expect("close");
}

macro_rules! target_tests {
    ($($module:ident => $name:literal),* $(,)?) => {$(
        mod $module {
            #[test]
            fn round_trip_nosync() {
                super::round_trip($name, false);
            }

            #[test]
            fn round_trip_sync() {
                super::round_trip($name, true);
            }

            #[test]
            fn reopen_keeps_data() {
                super::reopen($name);
            }

            #[test]
            fn concurrent_sync_writers() {
                super::concurrent_sync_writers($name);
            }
        }
    )*};
}

target_tests! {
    rocksdb => "rocksdb",
    rocksdb_blob => "rocksdb-blob",
    fjall => "fjall",
    fjall_kv => "fjall-kv",
}

#[test]
fn every_name_is_tested() {
    assert_eq!(NAMES, ["rocksdb", "rocksdb-blob", "fjall", "fjall-kv"]);
}

#[test]
fn unknown_name_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let e = open("leveldb", &config(dir.path(), false))
        .err()
        .expect("unknown target must fail");
    assert!(e.to_string().contains("leveldb"), "{e}");
}

#[test]
fn rocksdb_blob_writes_blob_files() {
    let dir = tempfile::tempdir().expect("tempdir");
    let t = open("rocksdb-blob", &config(dir.path(), false)).expect("open");
    for i in 0..50 {
        t.put(&key(i), &value(i)).expect("put");
    }
    t.close()
        .expect("close (flushes memtable, extracting blobs)");
    let blobs = std::fs::read_dir(dir.path())
        .expect("read dir")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "blob"))
        .count();
    assert!(blobs > 0, "no .blob file after a flush");
}
