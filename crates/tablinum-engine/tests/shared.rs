//! Many stores on one set of shared resources: a fixed number of
//! background threads whatever the number of stores, one cache that keeps
//! equal file ids of different stores apart, and a memtable budget that
//! bounds the memory of every memtable together.

mod common;

use std::sync::Arc;

use tablinum_engine::{Options, Shared, SharedOptions, Store};

fn bg_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("tablinum-bg"))
        })
        .count()
}

fn value(store: usize, n: u64) -> Vec<u8> {
    common::pseudo_random_bytes(store as u64 * 1_000_000 + n, 400)
}

#[test]
fn forty_stores_share_two_workers_one_cache_and_one_memtable_budget() {
    let before = bg_threads();
    let shared = Shared::new(SharedOptions {
        worker_threads: 2,
        block_cache_bytes: 4 << 20,
        open_files_max: 64,
        memtable_budget_bytes: 2 << 20,
    })
    .unwrap();
    let opts = Options {
        memtable_bytes_max: 8 << 20,
        sst_target_bytes: 256 << 10,
        ..Options::default()
    };
    let dirs: Vec<_> = (0..40).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<Store> = dirs
        .iter()
        .map(|d| Store::open_shared(d.path(), opts.clone(), &shared).unwrap())
        .collect();
    assert_eq!(shared.stores(), 40);
    assert_eq!(bg_threads() - before, 2, "one pool, whatever the stores");

    // ~10 MiB of memtable entries (400-byte values are stored inline)
    // against a 2 MiB budget: the largest memtables are frozen and flushed,
    // so memory stays near the budget (writers stall at twice it), never
    // near 40 x 8 MiB.
    let mut peak = 0;
    for n in 0..500u64 {
        for (i, s) in stores.iter().enumerate() {
            s.put(format!("key{n:05}").as_bytes(), &value(i, n))
                .unwrap();
        }
        peak = peak.max(shared.memtable_bytes());
    }
    assert!(
        peak <= 2 * (2 << 20) + (1 << 20),
        "memtables held {peak} bytes against a 2 MiB budget"
    );
    let flushed: u64 = stores.iter().map(|s| s.stats().flushes).sum();
    assert!(flushed >= 3, "the budget forced flushes: {flushed}");

    // Every store reads its own values through the one cache, although
    // their file ids are the same numbers.
    for s in &stores {
        s.flush().unwrap();
    }
    for (i, s) in stores.iter().enumerate() {
        for n in (0..500u64).step_by(37) {
            let got = s.get(format!("key{n:05}").as_bytes()).unwrap();
            assert_eq!(got.as_deref(), Some(&value(i, n)[..]), "store {i} key {n}");
        }
        assert_eq!(
            s.scan_heads((std::ops::Bound::Unbounded, std::ops::Bound::Unbounded))
                .unwrap()
                .count(),
            500
        );
    }

    // Closing and dropping the stores leaves the workers; dropping the
    // last handle on the resources stops them.
    for s in &stores {
        s.close().unwrap();
    }
    drop(stores);
    assert_eq!(shared.stores(), 0);
    assert_eq!(
        shared.memtable_bytes(),
        0,
        "every memtable's bytes returned"
    );
    let weak = Arc::downgrade(&shared);
    drop(shared);
    assert!(weak.upgrade().is_none());
    assert_eq!(bg_threads(), before);
}

#[test]
fn shared_options_are_checked() {
    for (o, what) in [
        (
            SharedOptions {
                worker_threads: 1,
                ..SharedOptions::default()
            },
            "worker_threads",
        ),
        (
            SharedOptions {
                memtable_budget_bytes: 1000,
                ..SharedOptions::default()
            },
            "memtable_budget_bytes",
        ),
        (
            SharedOptions {
                open_files_max: 3,
                ..SharedOptions::default()
            },
            "open_files_max",
        ),
    ] {
        let e = Shared::new(o).unwrap_err().to_string();
        assert!(e.contains(what), "{e}");
    }
}
