//! Crash consistency: a child process writes under `Durability::Sync` and
//! reports each acknowledged write; the parent SIGKILLs it at random moments,
//! reopens the store and checks that every acknowledged write is present,
//! that every present value is correct, and that batches are all-or-nothing.
//! The child is this test binary re-executed with `TABLINUM_CRASH_DIR` set.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tablinum_engine::{Batch, Durability, Options, Store};

/// Kill rounds per test run.
const ROUNDS: u64 = 12;
/// Longest a child may run before it is killed, ms.
const CHILD_RUN_MS_MAX: u64 = 400;

fn opts() -> Options {
    Options {
        durability: Durability::Sync,
        memtable_bytes_max: 64 << 10,
        journal_segment_bytes_max: 256 << 10,
        sst_target_bytes: 64 << 10,
        level1_bytes_max: 1 << 20,
        l0_compaction_trigger_files: 2,
        l0_stall_files: 6,
        journal_recycle_segments: 8,
        ..Options::default()
    }
}

/// Keys the overwriting child cycles through.
const OVERWRITTEN_KEYS: u64 = 48;

fn value(n: u64) -> Vec<u8> {
    let len = [10usize, 700, 3000, 9000][(n % 4) as usize];
    common::pseudo_random_bytes(n, len)
}

fn key(n: u64) -> Vec<u8> {
    format!("key{n:08}").into_bytes()
}

/// The child: writes keys `start..` (every 5th as a 3-key batch) forever,
/// printing `ack N` after each acknowledged write.
#[test]
fn crash_child_entry() {
    let Ok(dir) = std::env::var("TABLINUM_CRASH_DIR") else {
        return;
    };
    let start: u64 = std::env::var("TABLINUM_CRASH_START")
        .unwrap()
        .parse()
        .unwrap();
    let store = Store::open(&dir, opts()).unwrap();
    let mut n = start;
    if std::env::var("TABLINUM_CRASH_OVERWRITE").is_ok() {
        // Overwrites of a few keys, compacting the journal as it goes, so
        // that deleted segments are recycled as write segments.
        loop {
            store.put(&key(n % OVERWRITTEN_KEYS), &value(n)).unwrap();
            println!("ack {n} 1");
            n += 1;
            if n.is_multiple_of(50) {
                store.compact_journal().unwrap();
            }
        }
    }
    loop {
        if n.is_multiple_of(5) {
            let mut b = Batch::new();
            for i in 0..3 {
                b.put(&key(n + i), &value(n + i));
            }
            store.write(&b).unwrap();
            println!("ack {n} 3");
            n += 3;
        } else {
            store.put(&key(n), &value(n)).unwrap();
            println!("ack {n} 1");
            n += 1;
        }
    }
}

#[test]
fn every_acknowledged_write_survives_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut acked: Vec<(u64, u64)> = Vec::new();
    let mut next = 0u64;
    let mut rng = 0x1234_5678u64;
    for round in 0..ROUNDS {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let run_ms = 30 + rng % CHILD_RUN_MS_MAX;
        let got = run_child(dir.path(), next, false, run_ms);
        acked.extend(&got);
        // Reopen and check everything acknowledged so far, in every round.
        let store = Store::open(dir.path(), opts()).unwrap();
        for &(n, c) in &acked {
            for i in n..n + c {
                let v = store.get(&key(i)).unwrap();
                assert_eq!(
                    v.as_deref(),
                    Some(&value(i)[..]),
                    "round {round}: acked key {i} lost or wrong"
                );
            }
        }
        // Unacknowledged writes may be present, but then correct and whole.
        let last = got.last().map_or(next, |(n, c)| n + c);
        for n in last..last + 10 {
            if let Some(v) = store.get(&key(n)).unwrap() {
                assert_eq!(v, value(n), "round {round}: unacked key {n} has wrong data");
            }
        }
        for b in (last..last + 10).filter(|n| n.is_multiple_of(5)) {
            let present: Vec<bool> = (b..b + 3)
                .map(|i| store.get(&key(i)).unwrap().is_some())
                .collect();
            assert!(
                present.iter().all(|p| *p) || present.iter().all(|p| !*p),
                "torn batch at {b}: {present:?}"
            );
        }
        store.verify().unwrap();
        drop(store);
        next = last + 10;
        next += (5 - next % 5) % 5 + 1; // keep batch starts aligned to multiples of 5 plus 1
    }
    assert!(
        acked.len() > 20,
        "children acknowledged too little: {}",
        acked.len()
    );
}

/// Spawns the child writing from `start` (overwriting when `overwrite`),
/// kills it after `run_ms` and returns what it acknowledged.
fn run_child(dir: &std::path::Path, start: u64, overwrite: bool, run_ms: u64) -> Vec<(u64, u64)> {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "crash_child_entry",
        "--exact",
        "--nocapture",
        "--test-threads",
        "1",
    ])
    .env("TABLINUM_CRASH_DIR", dir)
    .env("TABLINUM_CRASH_START", start.to_string())
    .stdout(Stdio::piped())
    .stderr(Stdio::null());
    if overwrite {
        cmd.env("TABLINUM_CRASH_OVERWRITE", "1");
    }
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut got = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let mut it = line.split_whitespace();
            if it.next() == Some("ack") {
                let n: u64 = it.next().unwrap().parse().unwrap();
                let c: u64 = it.next().unwrap().parse().unwrap();
                got.push((n, c));
            }
        }
        got
    });
    let t = Instant::now();
    while t.elapsed() < Duration::from_millis(run_ms) {
        assert!(child.try_wait().unwrap().is_none(), "child exited early");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    reader.join().unwrap()
}

/// Write segments of `dir` whose header says version 3 (recycled files).
fn recycled_segments(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jnl"))
        .filter(|p| std::fs::read(p).unwrap()[8..12] == 3u32.to_le_bytes())
        .count()
}

#[test]
fn every_acknowledged_overwrite_survives_sigkill_on_recycled_segments() {
    let dir = tempfile::tempdir().unwrap();
    // Last acknowledged write of each key.
    let mut last = std::collections::BTreeMap::new();
    let mut next = 0u64;
    let mut rounds_recycled = 0;
    for round in 0..ROUNDS / 2 {
        let got = run_child(dir.path(), next, true, 300 + 50 * round);
        for &(n, _) in &got {
            last.insert(n % OVERWRITTEN_KEYS, n);
        }
        let end = got.last().map_or(next, |(n, _)| n + 1);
        rounds_recycled += usize::from(recycled_segments(dir.path()) > 0);
        let store = Store::open(dir.path(), opts()).unwrap();
        for (&k, &n) in &last {
            // The acknowledged value, or the one write in flight after it.
            let v = store.get(&key(k)).unwrap();
            let ok = [n, n + OVERWRITTEN_KEYS]
                .iter()
                .any(|&m| m <= end && v.as_deref() == Some(&value(m)[..]));
            assert!(ok, "round {round}: key {k} lost its write {n}");
        }
        store.verify().unwrap();
        drop(store);
        // Past anything written, keeping every key's sequence increasing.
        next = end + OVERWRITTEN_KEYS;
    }
    assert!(
        rounds_recycled > 0,
        "no round killed a child while it wrote on a recycled segment"
    );
}
