//! Coordinated scans over q = 1 .. 192 tablets of a real cluster return
//! exactly what a BTreeMap model returns, for random start keys, ends,
//! limits, skips, stream limits, batch sizes, keys-only and index queries.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tablinum_client::{Durability, IndexTerm, Mutation, Query, Split};
use tablinum_stream::window::WindowMode;

use common::{mix, TestCluster};

fn random_bytes(rng: &mut StdRng, max_len: usize) -> Vec<u8> {
    let n = rng.random_range(0..=max_len);
    (0..n).map(|_| rng.random::<u8>()).collect()
}

#[test]
fn coordinated_scans_match_a_model_for_q_1_to_192() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    let mut rng = StdRng::seed_from_u64(0x7AB1_u64);
    for &q in &[1u32, 2, 3, 8, 32, 96, 192] {
        let table = format!("scan_q{q}");
        c.client
            .create_table(&table, Split::Even(q), Durability::Nosync)
            .unwrap();
        c.wait_open(&table, q as usize);
        // Objects: key -> value; index v: (term, key).
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut terms: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let n = 1_500u64;
        let mut muts = Vec::new();
        for i in 0..n {
            let key = mix(i * 7 + u64::from(q)).to_be_bytes()[..rng.random_range(1..=8)].to_vec();
            let value = format!("v{i}").into_bytes();
            // A few shared terms, so one term spans many keys and tablets.
            let term = if i % 5 == 0 {
                b"shared".to_vec()
            } else {
                mix(i ^ 0xABCD).to_be_bytes()[..3].to_vec()
            };
            model.insert(key.clone(), value.clone());
            terms.insert(key.clone(), term.clone());
            muts.push(Mutation {
                key,
                value,
                index_terms: vec![IndexTerm {
                    index: b"v".to_vec(),
                    term,
                }],
                ..Default::default()
            });
        }
        c.client.write_routed(&table, muts).unwrap();
        // Deletes and overwrites after a flush, so reads merge memtable and files.
        c.client.flush(&table).unwrap();
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        let mut muts = Vec::new();
        for k in keys.iter().step_by(11) {
            model.remove(k);
            terms.remove(k);
            muts.push(Mutation {
                key: k.clone(),
                delete: true,
                ..Default::default()
            });
        }
        for k in keys.iter().skip(3).step_by(13) {
            if model.contains_key(k) {
                model.insert(k.clone(), b"new".to_vec());
                muts.push(Mutation {
                    key: k.clone(),
                    value: b"new".to_vec(),
                    index_terms: vec![IndexTerm {
                        index: b"v".to_vec(),
                        term: terms[k].clone(),
                    }],
                    ..Default::default()
                });
            }
        }
        c.client.write_routed(&table, muts).unwrap();
        let index_model: BTreeSet<(Vec<u8>, Vec<u8>)> =
            terms.iter().map(|(k, t)| (t.clone(), k.clone())).collect();

        for round in 0..40 {
            let start = random_bytes(&mut rng, 3);
            let end = if rng.random_bool(0.3) {
                let mut e = random_bytes(&mut rng, 3);
                if e < start {
                    e = start.clone();
                    e.push(rng.random());
                }
                e
            } else {
                Vec::new()
            };
            let skip = if rng.random_bool(0.3) {
                rng.random_range(0..60)
            } else {
                0
            };
            let limit = if rng.random_bool(0.2) {
                0
            } else {
                rng.random_range(1..400)
            };
            let stream_limit = match rng.random_range(0..4) {
                0 => WindowMode::Fixed(1),
                1 => WindowMode::Fixed(5),
                2 => WindowMode::Fixed(10),
                _ => WindowMode::Adaptive,
            };
            let batch_rows = [0u32, 1, 7, 100][rng.random_range(0..4)];
            let keys_only = rng.random_bool(0.3);
            let index = rng.random_bool(0.35);
            let query = Query {
                table: table.clone(),
                start: start.clone(),
                end: end.clone(),
                index: index.then(|| b"v".to_vec()),
                skip,
                limit,
                stream_limit,
                batch_rows,
                keys_only,
                consistency: tablinum_client::Consistency::Immediate,
                filter: None,
                window_bytes_max: 0,
            };
            let in_range = |k: &Vec<u8>| *k >= start && (end.is_empty() || *k < end);
            let take = if limit == 0 {
                usize::MAX
            } else {
                limit as usize
            };
            let (got, stats) = c.client.query_vec(&query).unwrap();
            let ctx = format!("q={q} round={round} {query:?}");
            if index {
                let want: Vec<(Vec<u8>, Vec<u8>)> = index_model
                    .iter()
                    .filter(|(t, _)| in_range(t))
                    .skip(skip as usize)
                    .take(take)
                    .cloned()
                    .collect();
                let got: Vec<(Vec<u8>, Vec<u8>)> = got
                    .into_iter()
                    .map(|r| (r.term.expect("index rows carry terms"), r.key))
                    .collect();
                assert_eq!(got, want, "{ctx}");
            } else {
                let want: Vec<(Vec<u8>, Vec<u8>)> = model
                    .iter()
                    .filter(|(k, _)| in_range(k))
                    .skip(skip as usize)
                    .take(take)
                    .map(|(k, v)| (k.clone(), if keys_only { Vec::new() } else { v.clone() }))
                    .collect();
                let got: Vec<(Vec<u8>, Vec<u8>)> =
                    got.into_iter().map(|r| (r.key, r.value)).collect();
                assert_eq!(got, want, "{ctx}");
            }
            assert_eq!(stats.rows_returned as usize, stats.rows_returned as usize);
            assert!(
                stats.rows_sent >= stats.rows_returned + stats.rows_skipped,
                "{ctx}: {stats:?}"
            );
            assert!(stats.rows_wasted <= stats.rows_sent, "{ctx}: {stats:?}");
        }
    }
}
