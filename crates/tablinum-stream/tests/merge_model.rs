//! Coordinated scans over q = 1..192 streams with random start keys, skips
//! and limits return exactly what a BTreeMap returns; the row accounting
//! balances; adaptive windows start from the query's need.

use std::collections::BTreeMap;
use std::thread;

use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use tablinum_stream::channel::{stream, StreamConfig};
use tablinum_stream::merge::{merge, MergeQuery};
use tablinum_stream::window::{initial_window, WindowMode};
use tablinum_stream::Row;

fn key(i: u32) -> Vec<u8> {
    format!("key{i:07}").into_bytes()
}

fn run_query(
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    q: u32,
    start: &[u8],
    skip: u64,
    limit: u64,
    mode: WindowMode,
) -> (Vec<Row>, u64, u64) {
    // Hash-partition the keys over q tablets, as CouchDB shards do.
    let mut parts: Vec<Vec<Row>> = vec![Vec::new(); q as usize];
    for (k, v) in model.range(start.to_vec()..) {
        let h = k
            .iter()
            .fold(0u32, |a, b| a.wrapping_mul(31).wrapping_add(u32::from(*b)));
        parts[(h % q) as usize].push((k.clone(), v.clone()));
    }
    let rows_per_batch = 10;
    let window = initial_window(mode, skip, limit, q, rows_per_batch as u32, None);
    let cfg = StreamConfig {
        window_batches: window,
        batch_rows_max: rows_per_batch,
        ..StreamConfig::default()
    };
    let mut rxs = Vec::new();
    let mut producers = Vec::new();
    for part in parts {
        let (tx, rx) = stream(cfg);
        rxs.push(rx);
        producers.push(thread::spawn(move || {
            let _ = tx.send_all(part);
            tx.stats().rows_sent
        }));
    }
    let mut got = Vec::new();
    let stats = merge(&rxs, &MergeQuery { skip, limit, mode }, |r| {
        got.push(r);
        std::ops::ControlFlow::Continue(())
    })
    .unwrap();
    let sent: u64 = producers.into_iter().map(|p| p.join().unwrap()).sum();
    assert_eq!(
        sent,
        stats.rows_returned + stats.rows_skipped + stats.rows_wasted,
        "every row sent is returned, skipped or wasted: {stats:?}"
    );
    (got, stats.rows_wasted, sent)
}

#[test]
fn merged_scans_match_the_model_for_every_q() {
    let mut rng = StdRng::seed_from_u64(7);
    let model: BTreeMap<Vec<u8>, Vec<u8>> = (0..5000u32)
        .map(|i| (key(i * 3), i.to_le_bytes().to_vec()))
        .collect();
    for q in [1u32, 2, 3, 8, 32, 96, 192] {
        for round in 0..6 {
            let start = key(rng.random_range(0..16_000));
            let skip = rng.random_range(0..50u64);
            let limit = if round == 0 {
                u64::MAX
            } else {
                rng.random_range(1..1200u64)
            };
            let mode = if round % 2 == 0 {
                WindowMode::Adaptive
            } else {
                WindowMode::Fixed(rng.random_range(1..20))
            };
            let (got, _, _) = run_query(&model, q, &start, skip, limit, mode);
            let want: Vec<Row> = model
                .range(start.clone()..)
                .skip(skip as usize)
                .take(usize::try_from(limit).unwrap_or(usize::MAX))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            assert_eq!(
                got, want,
                "q {q} round {round} skip {skip} limit {limit} mode {mode:?}"
            );
        }
    }
}

#[test]
fn adaptive_windows_waste_less_than_a_large_fixed_window_at_high_q() {
    let model: BTreeMap<Vec<u8>, Vec<u8>> = (0..60_000u32).map(|i| (key(i), vec![1; 8])).collect();
    let (_, wasted_adaptive, _) = run_query(&model, 192, &key(1000), 0, 1000, WindowMode::Adaptive);
    let (_, wasted_fixed, _) = run_query(&model, 192, &key(1000), 0, 1000, WindowMode::Fixed(100));
    // Fixed 100 lets every tablet push its whole partition slice; adaptive
    // starts at one batch per tablet.
    assert!(
        wasted_adaptive < wasted_fixed,
        "adaptive {wasted_adaptive} vs fixed {wasted_fixed}"
    );
}

#[test]
fn a_consumer_that_says_stop_cancels_every_stream() {
    use std::ops::ControlFlow;
    use tablinum_stream::channel::StreamError;
    let cfg = StreamConfig {
        window_batches: 2,
        batch_rows_max: 5,
        ..StreamConfig::default()
    };
    let mut rxs = Vec::new();
    let mut producers = Vec::new();
    for p in 0..4u32 {
        let (tx, rx) = stream(cfg);
        rxs.push(rx);
        let rows: Vec<Row> = (0..10_000).map(|i| (key(i * 4 + p), Vec::new())).collect();
        producers.push(thread::spawn(move || tx.send_all(rows)));
    }
    let mut got = Vec::new();
    let q = MergeQuery {
        skip: 0,
        limit: u64::MAX,
        mode: WindowMode::Fixed(2),
    };
    let stats = merge(&rxs, &q, |r| {
        got.push(r.0);
        if got.len() == 7 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    })
    .unwrap();
    assert_eq!(stats.rows_returned, 7);
    assert_eq!(got, (0..7).map(key).collect::<Vec<_>>());
    // Every producer was cancelled, long before its 10,000 rows.
    for p in producers {
        assert_eq!(p.join().unwrap(), Err(StreamError::Cancelled));
    }
}
