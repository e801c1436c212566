//! Model test: random operations, including close/reopen, flushes, ledger and
//! journal compactions and snapshots, checked against a `BTreeMap`. Each
//! seed is reproducible; a failure prints the seed and the step.

use std::collections::BTreeMap;
use std::ops::Bound::{Excluded, Included, Unbounded};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tablinum_engine::{Batch, Durability, Options, Store};

/// Operations per seed.
const STEPS: usize = 2500;
/// Distinct keys (small, so overwrites and deletes are frequent).
const KEYS: u32 = 300;

fn opts() -> Options {
    Options {
        durability: Durability::NoSync,
        memtable_bytes_max: 64 << 10,
        journal_segment_bytes_max: 128 << 10,
        sst_target_bytes: 64 << 10,
        level1_bytes_max: 1 << 20,
        l0_compaction_trigger_files: 2,
        l0_stall_files: 8,
        journal_compaction_hours: None,
        ..Options::default()
    }
}

/// The model: key -> value.
type Model = BTreeMap<Vec<u8>, Vec<u8>>;

fn key(i: u32) -> Vec<u8> {
    format!("k{i:04}").into_bytes()
}

fn run(seed: u64) {
    let dir = tempfile::tempdir().unwrap();
    let mut rng = StdRng::seed_from_u64(seed);
    let mut store = Some(Store::open(dir.path(), opts()).unwrap());
    let mut model: Model = BTreeMap::new();
    let mut snap: Option<(tablinum_engine::Snapshot, Model)> = None;
    for step in 0..STEPS {
        let s = store.as_ref().unwrap();
        let ctx = format!("seed {seed} step {step}");
        match rng.random_range(0..100u32) {
            0..=39 => {
                let k = key(rng.random_range(0..KEYS));
                let len = [0usize, 20, 600, 2500][rng.random_range(0..4usize)];
                let v: Vec<u8> = (0..len).map(|_| rng.random()).collect();
                s.put(&k, &v).unwrap();
                model.insert(k, v);
            }
            40..=49 => {
                let k = key(rng.random_range(0..KEYS));
                s.delete(&k).unwrap();
                model.remove(&k);
            }
            50..=54 => {
                let mut b = Batch::new();
                for _ in 0..rng.random_range(1..6) {
                    let k = key(rng.random_range(0..KEYS));
                    if rng.random_bool(0.3) {
                        b.delete(&k);
                        model.remove(&k);
                    } else {
                        let v = vec![rng.random::<u8>(); rng.random_range(1..1500)];
                        b.put(&k, &v);
                        model.insert(k, v);
                    }
                }
                s.write(&b).unwrap();
            }
            55..=79 => {
                let k = key(rng.random_range(0..KEYS));
                assert_eq!(s.get(&k).unwrap(), model.get(&k).cloned(), "{ctx}: get");
                let h = s.head(&k).unwrap().map(|h| h.value_len);
                assert_eq!(h, model.get(&k).map(|v| v.len() as u64), "{ctx}: head");
            }
            80..=86 => {
                let a = key(rng.random_range(0..KEYS));
                let b = key(rng.random_range(0..KEYS));
                let (lo, hi) = if a <= b { (a, b) } else { (b, a) };
                let got: Vec<(Vec<u8>, Vec<u8>)> = s
                    .scan_objects((Included(&lo[..]), Excluded(&hi[..])))
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .range(lo.clone()..hi.clone())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                assert_eq!(got, want, "{ctx}: scan");
            }
            87..=89 => {
                if let Some((sn, m)) = &snap {
                    let got: Vec<(Vec<u8>, Vec<u8>)> = sn
                        .scan_objects((Unbounded, Unbounded))
                        .unwrap()
                        .map(Result::unwrap)
                        .collect();
                    let want: Vec<(Vec<u8>, Vec<u8>)> =
                        m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                    assert_eq!(got, want, "{ctx}: snapshot scan");
                }
                snap = Some((s.snapshot().unwrap(), model.clone()));
            }
            90..=92 => s.flush().unwrap(),
            93..=94 => s.compact_ledger().unwrap(),
            95..=96 => {
                s.compact_journal().unwrap();
            }
            _ => {
                snap = None;
                let old = store.take().unwrap();
                old.close().unwrap();
                drop(old);
                store = Some(Store::open(dir.path(), opts()).unwrap());
            }
        }
    }
    let s = store.unwrap();
    let got: Vec<(Vec<u8>, Vec<u8>)> = s
        .scan_objects((Unbounded, Unbounded))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    assert_eq!(got, want, "seed {seed}: final scan");
    s.verify().unwrap();
}

#[test]
fn model_seed_1() {
    run(1);
}

#[test]
fn model_seed_2() {
    run(2);
}

#[test]
fn model_seed_3() {
    run(3);
}
