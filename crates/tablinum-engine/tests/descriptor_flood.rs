//! A transient error in background work does not poison the store: with
//! every file descriptor taken, flushes fail ("Too many open files"), are
//! retried with backoff, writers stall and then get a clear `Unavailable`
//! error that changed nothing; once descriptors are free again the store
//! resumes by itself, and every acknowledged write is there. Its own test
//! binary: it lowers the process's descriptor limit.
#![allow(unsafe_code)]

use std::time::{Duration, Instant};

use tablinum_engine::{Error, Options, Store};

/// The soft limit on descriptors, and a way to set it.
fn nofile() -> libc::rlimit {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct it is given.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r
}

fn set_nofile(r: &libc::rlimit) {
    // SAFETY: setrlimit only reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, r) }, 0);
}

fn value(n: u64) -> Vec<u8> {
    let mut v = n.to_be_bytes().to_vec();
    v.resize(3_000, (n % 251) as u8);
    v
}

#[test]
fn a_descriptor_flood_stalls_writes_then_the_store_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = Options {
        memtable_bytes_max: 64 << 10,
        immutable_memtables_max: 2,
        journal_segment_bytes_max: 256 << 20, // no segment roll in the test
        write_stall_ms_max: 1_500,
        ..Options::default()
    };
    let store = Store::open(dir.path(), opts.clone()).unwrap();
    let mut acked = 0u64;
    for _ in 0..100 {
        store
            .put(format!("k{acked:06}").as_bytes(), &value(acked))
            .unwrap();
        acked += 1;
    }
    store.flush().unwrap();

    // Take every descriptor the (lowered) limit allows.
    let saved = nofile();
    let low = libc::rlimit {
        rlim_cur: 256.min(saved.rlim_max),
        rlim_max: saved.rlim_max,
    };
    set_nofile(&low);
    let mut flood = Vec::new();
    while let Ok(f) = std::fs::File::open("/dev/null") {
        flood.push(f);
    }

    // Writes go on (the journal is open) until flushes have failed long
    // enough: then a clear error, not a hang, and not a poisoned store.
    let t = Instant::now();
    let err = loop {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "writes never stalled"
        );
        match store.put(format!("k{acked:06}").as_bytes(), &value(acked)) {
            Ok(_) => acked += 1,
            Err(e) => break e,
        }
    };
    let msg = err.to_string();
    assert!(matches!(err, Error::Unavailable { .. }), "{msg}");
    assert!(
        msg.contains("write_stall_ms_max") && msg.contains("open files"),
        "{msg}"
    );
    let stats = store.stats();
    assert!(stats.background_retries > 0);
    assert!(stats.background_failing.is_some());

    // Free the descriptors: the store resumes by itself.
    drop(flood);
    set_nofile(&saved);
    let t = Instant::now();
    loop {
        match store.put(format!("k{acked:06}").as_bytes(), &value(acked)) {
            Ok(_) => {
                acked += 1;
                break;
            }
            Err(Error::Unavailable { .. }) if t.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("did not resume: {e}"),
        }
    }
    for _ in 0..200 {
        store
            .put(format!("k{acked:06}").as_bytes(), &value(acked))
            .unwrap();
        acked += 1;
    }
    store.flush().unwrap();
    assert!(store.stats().background_failing.is_none());
    for n in 0..acked {
        assert_eq!(
            store.get(format!("k{n:06}").as_bytes()).unwrap(),
            Some(value(n)),
            "key {n}"
        );
    }
    store.close().unwrap();
    drop(store);
    let store = Store::open(dir.path(), opts).unwrap();
    for n in (0..acked).step_by(7) {
        assert_eq!(
            store.get(format!("k{n:06}").as_bytes()).unwrap(),
            Some(value(n)),
            "key {n} after reopen"
        );
    }
}
