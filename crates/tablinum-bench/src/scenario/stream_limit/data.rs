//! The stream-limit scenario's data set: one table per q whose index order
//! is spread uniformly over its tablets, and the random query starts.
//!
//! Owns the rows (key = [`splitmix64`]`(i)`, a 16-byte value, one index
//! term = `splitmix64(i ^ TERM_SALT)`: the term order is independent of the
//! key order, so every tablet holds ~1/q of any run of terms), the table
//! names, loading a table (chunks written by a few threads, then a flush)
//! and the query starts (uniform over the part of the term space that
//! still has a full limit after it). It must never measure: loading is
//! timed for the report but is not a run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::RngExt;
use serde::{Deserialize, Serialize};
use tablinum_client::{Client, IndexTerm, Mutation};

use super::{INDEX, LOAD_CHUNK_ROWS, LOAD_PROGRESS_LINE_S, LOAD_WRITERS, TERM_SALT, VALUE_BYTES};
use crate::error::BenchError;
use crate::generators::BenchRng;
use crate::progress::Progress;
use crate::scenario::framework::output::thousands;

/// SplitMix64's output function: a bijection of `u64` that spreads
/// consecutive inputs uniformly.
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Object key of row `i`.
pub fn row_key(i: u64) -> [u8; 8] {
    splitmix64(i).to_be_bytes()
}

/// Index term of row `i` (a different hash from the key's).
pub fn row_term(i: u64) -> [u8; 8] {
    splitmix64(i ^ TERM_SALT).to_be_bytes()
}

/// The mutation that loads row `i`.
pub fn row_mutation(i: u64) -> Mutation {
    let mut value = format!("{i:0w$x}", w = VALUE_BYTES).into_bytes();
    value.truncate(VALUE_BYTES);
    Mutation {
        key: row_key(i).to_vec(),
        value,
        delete: false,
        metadata: Vec::new(),
        index_terms: vec![IndexTerm {
            index: INDEX.to_vec(),
            term: row_term(i).to_vec(),
        }],
    }
}

/// The largest query start (as a u64) that still has about `limit` rows
/// after it among `rows` uniform terms: the first `(rows − limit) / rows` of
/// the term space (all of it when `rows ≤ limit`).
pub fn start_span(rows: u64, limit: u64) -> u64 {
    if rows <= limit {
        return u64::MAX;
    }
    let span = u128::from(u64::MAX) * u128::from(rows - limit) / u128::from(rows);
    u64::try_from(span).unwrap_or(u64::MAX)
}

/// A random query start in `[0, span]`, as 8 big-endian bytes.
pub fn random_start(rng: &mut BenchRng, span: u64) -> Vec<u8> {
    let x: u64 = rng.random();
    let scaled = (u128::from(x) * (u128::from(span) + 1)) >> 64;
    u64::try_from(scaled).unwrap_or(span).to_be_bytes().to_vec()
}

/// The table of tablet count `q`.
pub fn table_name(q: u32) -> String {
    format!("sl_q{q}")
}

/// Loading one table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadRecord {
    /// Tablets.
    pub q: u32,
    /// Table name.
    pub table: String,
    /// Rows written.
    pub rows: u64,
    /// Seconds writing.
    pub load_s: f64,
    /// Rows written per second.
    pub rows_per_sec: f64,
    /// Seconds flushing.
    pub flush_s: f64,
}

pub(super) fn client_err(action: &'static str, e: impl std::fmt::Display) -> BenchError {
    BenchError::Cluster {
        action,
        reason: e.to_string(),
    }
}

/// Writes `rows` rows into `table` (chunks of [`LOAD_CHUNK_ROWS`] from
/// [`LOAD_WRITERS`] threads), then flushes it.
pub fn load(client: &Client, table: &str, q: u32, rows: u64) -> Result<LoadRecord, BenchError> {
    let chunks = rows.div_ceil(LOAD_CHUNK_ROWS);
    let next = AtomicU64::new(0);
    let written = AtomicU64::new(0);
    let progress = Progress::new(true, rows, "rows", &format!("load {table}"));
    let t0 = Instant::now();
    let result: Result<(), BenchError> = std::thread::scope(|s| {
        let writers: Vec<_> = (0..LOAD_WRITERS)
            .map(|_| {
                s.spawn(|| -> Result<(), BenchError> {
                    loop {
                        let c = next.fetch_add(1, Ordering::Relaxed);
                        if c >= chunks {
                            return Ok(());
                        }
                        let lo = c * LOAD_CHUNK_ROWS;
                        let hi = (lo + LOAD_CHUNK_ROWS).min(rows);
                        let batch: Vec<Mutation> = (lo..hi).map(row_mutation).collect();
                        if let Err(e) = client.write_routed(table, batch) {
                            // Stop the other writers too.
                            next.store(chunks, Ordering::Relaxed);
                            return Err(client_err("load", format!("write to {table}: {e}")));
                        }
                        written.fetch_add(hi - lo, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut next_line = LOAD_PROGRESS_LINE_S;
        while writers.iter().any(|w| !w.is_finished()) {
            std::thread::sleep(Duration::from_millis(100));
            let done = written.load(Ordering::Relaxed);
            progress.set_position(done);
            let el = t0.elapsed().as_secs_f64();
            if el >= next_line {
                progress.line(&format!(
                    "load {table}: {} / {} rows ({} rows/s)",
                    thousands(done as f64, 0),
                    thousands(rows as f64, 0),
                    thousands(done as f64 / el, 0)
                ));
                next_line += LOAD_PROGRESS_LINE_S;
            }
        }
        writers.into_iter().enumerate().try_for_each(|(i, w)| {
            w.join()
                .unwrap_or(Err(BenchError::WorkerPanicked { worker: i }))
        })
    });
    progress.finish();
    result?;
    let load_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    client
        .flush(table)
        .map_err(|e| client_err("flush", format!("{table}: {e}")))?;
    let flush_s = t1.elapsed().as_secs_f64();
    Ok(LoadRecord {
        q,
        table: table.to_string(),
        rows,
        load_s,
        rows_per_sec: rows as f64 / load_s.max(f64::MIN_POSITIVE),
        flush_s,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_terms_are_unique_and_spread_over_the_tablets() {
        let n = 20_000u64;
        let mut keys: Vec<[u8; 8]> = (0..n).map(row_key).collect();
        let mut terms: Vec<[u8; 8]> = (0..n).map(row_term).collect();
        keys.sort_unstable();
        keys.dedup();
        terms.sort_unstable();
        terms.dedup();
        assert_eq!((keys.len(), terms.len()), (n as usize, n as usize));
        // 8 even tablets over the first key byte: each within 10% of n/8.
        let mut per = [0u64; 8];
        for i in 0..n {
            per[usize::from(row_key(i)[0] >> 5)] += 1;
        }
        assert!(per.iter().all(|&c| c.abs_diff(n / 8) < n / 80), "{per:?}");
        // The 1000 rows after a term come from all tablets: the term order
        // does not follow the key order.
        let mut by_term: Vec<(u64, u8)> = (0..n)
            .map(|i| (u64::from_be_bytes(row_term(i)), row_key(i)[0] >> 5))
            .collect();
        by_term.sort_unstable();
        let mut hit = [0u64; 8];
        for &(_, t) in &by_term[5000..6000] {
            hit[usize::from(t)] += 1;
        }
        assert!(hit.iter().all(|&c| (80..=170).contains(&c)), "{hit:?}");
        let m = row_mutation(7);
        assert_eq!(m.value.len(), VALUE_BYTES);
        assert_eq!(m.index_terms[0].index, INDEX);
        assert_eq!(m.index_terms[0].term, row_term(7));
    }

    #[test]
    fn starts_leave_a_full_limit_after_them() {
        assert_eq!(start_span(1000, 1000), u64::MAX);
        assert_eq!(start_span(10, 1000), u64::MAX);
        let s = start_span(1_000_000, 1000);
        let frac = s as f64 / u64::MAX as f64;
        assert!((frac - 0.999).abs() < 1e-9, "{frac}");
        let mut rng = <BenchRng as rand::SeedableRng>::seed_from_u64(1);
        for _ in 0..1000 {
            let b = random_start(&mut rng, 5);
            assert!(u64::from_be_bytes(b.try_into().unwrap_or_default()) <= 5);
        }
    }
}
