//! Latency histograms and counters: per worker, per interval, per run.
//!
//! Owns the HDR histogram shape (µs, [`LATENCY_US_MIN`]..=[`LATENCY_US_MAX`],
//! [`LATENCY_SIGNIFICANT_DIGITS`] significant digits), the per-worker recording
//! buffers (not-found reads' latency kept apart as well as in the whole, so
//! charts can tell found from not-found), their merge into one interval and
//! the whole-run accumulation, and the summary types written to
//! `summary.json`. Percentiles are always computed from merged histograms,
//! never by averaging percentiles. It must never do I/O or read the clock:
//! callers pass durations in.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::workload::Op;

/// Lowest recordable latency, µs (faster operations are recorded as 1 µs).
pub const LATENCY_US_MIN: u64 = 1;
/// Highest recordable latency, µs (one hour; slower operations saturate).
pub const LATENCY_US_MAX: u64 = 3_600_000_000;
/// HDR precision, significant decimal digits.
pub const LATENCY_SIGNIFICANT_DIGITS: u8 = 3;
/// Distinct error messages kept per worker per interval; later ones are counted
/// under [`OTHER_ERRORS`].
pub const ERROR_KINDS_PER_WORKER_MAX: usize = 64;
/// The bucket for error messages beyond [`ERROR_KINDS_PER_WORKER_MAX`].
pub const OTHER_ERRORS: &str = "(other errors)";
/// Longest error message kept, bytes (longer ones are cut).
pub const ERROR_MESSAGE_BYTES_MAX: usize = 200;

const OPS: usize = Op::ALL.len();

/// A new empty latency histogram of the harness's shape.
pub fn new_histogram() -> Histogram<u64> {
    // The bounds are constants that satisfy hdrhistogram's preconditions
    // (low >= 1, high >= 2 * low, sigfig <= 5), so this cannot fail.
    Histogram::new_with_bounds(LATENCY_US_MIN, LATENCY_US_MAX, LATENCY_SIGNIFICANT_DIGITS)
        .unwrap_or_else(|e| unreachable!("constant histogram bounds rejected: {e}"))
}

/// What one operation came to.
#[derive(Debug)]
pub enum Outcome {
    /// Succeeded.
    Ok,
    /// A get/head of an absent key: a success, counted apart.
    NotFound,
    /// The target returned an error.
    Failed(String),
}

/// One op's recordings in one worker (or merged) over one interval.
#[derive(Debug, Clone, Default)]
pub struct OpRecord {
    /// Latency of successful ops (response time: from the intended start).
    pub latency: Option<Histogram<u64>>,
    /// Service time of successful ops (from the actual start); rate mode only.
    pub service: Option<Histogram<u64>>,
    /// Latency of the not-found ops alone (also recorded in `latency`), so a
    /// chart can draw found and not-found reads apart.
    pub not_found_latency: Option<Histogram<u64>>,
    /// Successful ops (including `not_found`).
    pub successful: u64,
    /// Successful gets/heads that found nothing.
    pub not_found: u64,
    /// Ops the target failed.
    pub failed: u64,
}

impl OpRecord {
    fn add(&mut self, other: &OpRecord) {
        merge_hist(&mut self.latency, other.latency.as_ref());
        merge_hist(&mut self.service, other.service.as_ref());
        merge_hist(
            &mut self.not_found_latency,
            other.not_found_latency.as_ref(),
        );
        self.successful += other.successful;
        self.not_found += other.not_found;
        self.failed += other.failed;
    }

    fn reset(&mut self) {
        if let Some(h) = self.latency.as_mut() {
            h.reset();
        }
        if let Some(h) = self.service.as_mut() {
            h.reset();
        }
        if let Some(h) = self.not_found_latency.as_mut() {
            h.reset();
        }
        self.successful = 0;
        self.not_found = 0;
        self.failed = 0;
    }

    /// Latency percentiles of the successful ops that found their key, and of
    /// those that did not; `None` when no op was not-found (then every
    /// successful op found its key and `latency` says it all).
    pub fn found_and_not_found(&self) -> Option<(Percentiles, Percentiles)> {
        let not_found = self.not_found_latency.as_ref().filter(|h| !h.is_empty())?;
        let found = self.latency.as_ref().map(|all| {
            let mut found = all.clone();
            // Every not-found value was also recorded in `latency`, so no
            // count goes negative.
            let _ = found.subtract(not_found);
            found
        });
        Some((
            Percentiles::of(found.as_ref()),
            Percentiles::of(Some(not_found)),
        ))
    }
}

fn merge_hist(into: &mut Option<Histogram<u64>>, from: Option<&Histogram<u64>>) {
    if let Some(from) = from {
        if from.is_empty() {
            return;
        }
        let into = into.get_or_insert_with(new_histogram);
        // Same bounds everywhere, so addition cannot go out of range.
        let _ = into.add(from);
    }
}

/// Everything recorded over one interval by one worker, or merged across workers.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    /// Per op, indexed by [`Op::index`].
    pub ops: [OpRecord; OPS],
    /// Error message counts, per op.
    pub errors: BTreeMap<(Op, String), u64>,
}

impl Recorder {
    /// Records one finished op. `response_us` is measured from the intended
    /// start, `service_us` from the actual start (they are equal in `max` mode,
    /// where `service_us` is `None`).
    pub fn record(&mut self, op: Op, outcome: Outcome, response_us: u64, service_us: Option<u64>) {
        let rec = &mut self.ops[op.index()];
        match outcome {
            Outcome::Ok | Outcome::NotFound => {
                if matches!(outcome, Outcome::NotFound) {
                    rec.not_found += 1;
                    rec.not_found_latency
                        .get_or_insert_with(new_histogram)
                        .saturating_record(response_us.max(LATENCY_US_MIN));
                }
                rec.successful += 1;
                rec.latency
                    .get_or_insert_with(new_histogram)
                    .saturating_record(response_us.max(LATENCY_US_MIN));
                if let Some(s) = service_us {
                    rec.service
                        .get_or_insert_with(new_histogram)
                        .saturating_record(s.max(LATENCY_US_MIN));
                }
            }
            Outcome::Failed(message) => {
                rec.failed += 1;
                let mut message = message;
                if message.len() > ERROR_MESSAGE_BYTES_MAX {
                    let mut cut = ERROR_MESSAGE_BYTES_MAX;
                    while !message.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    message.truncate(cut);
                }
                let key = if self.errors.len() < ERROR_KINDS_PER_WORKER_MAX
                    || self.errors.contains_key(&(op, message.clone()))
                {
                    (op, message)
                } else {
                    (op, OTHER_ERRORS.to_string())
                };
                *self.errors.entry(key).or_insert(0) += 1;
            }
        }
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Recorder) {
        for (mine, theirs) in self.ops.iter_mut().zip(other.ops.iter()) {
            mine.add(theirs);
        }
        for (k, v) in &other.errors {
            *self.errors.entry(k.clone()).or_insert(0) += v;
        }
    }

    /// Empties every counter and histogram, keeping their memory.
    pub fn reset(&mut self) {
        for r in &mut self.ops {
            r.reset();
        }
        self.errors.clear();
    }

    /// Successful ops over all op kinds.
    pub fn successful(&self) -> u64 {
        self.ops.iter().map(|r| r.successful).sum()
    }

    /// Failed ops over all op kinds.
    pub fn failed(&self) -> u64 {
        self.ops.iter().map(|r| r.failed).sum()
    }

    /// The record of `op`.
    pub fn op(&self, op: Op) -> &OpRecord {
        &self.ops[op.index()]
    }
}

/// Latency distribution, µs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Percentiles {
    /// Fastest.
    pub min: u64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median.
    pub p50: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// 99.9th percentile.
    pub p99_9: u64,
    /// Slowest.
    pub max: u64,
}

impl Percentiles {
    /// Percentiles of `h` (all zero when empty).
    pub fn of(h: Option<&Histogram<u64>>) -> Percentiles {
        match h {
            Some(h) if !h.is_empty() => Percentiles {
                min: h.min(),
                mean: h.mean(),
                p50: h.value_at_quantile(0.50),
                p95: h.value_at_quantile(0.95),
                p99: h.value_at_quantile(0.99),
                p99_9: h.value_at_quantile(0.999),
                max: h.max(),
            },
            _ => Percentiles::default(),
        }
    }
}

/// One op's numbers over one report interval (a row of `<op>_latencies.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpInterval {
    /// The op.
    pub op: Op,
    /// Successful ops (basho_bench `n`).
    pub successful: u64,
    /// Not-found among the successful.
    pub not_found: u64,
    /// Failed ops (basho_bench `errors`).
    pub failed: u64,
    /// Latency (response time), µs.
    pub latency_us: Percentiles,
    /// Latency of the successful ops that found their key, µs; only when some
    /// did not (otherwise it equals `latency_us`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_latency_us: Option<Percentiles>,
    /// Latency of the not-found ops, µs; only when there were some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found_latency_us: Option<Percentiles>,
}

impl OpInterval {
    /// Latency of the ops that found their key (all successful ops when none
    /// was not-found).
    pub fn found_latency(&self) -> &Percentiles {
        self.found_latency_us.as_ref().unwrap_or(&self.latency_us)
    }
}

/// One report interval (a row of `summary.csv`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    /// Seconds since measurement started, at the end of the interval.
    pub elapsed_s: f64,
    /// Length of the interval, seconds.
    pub window_s: f64,
    /// Successful ops over all kinds.
    pub successful: u64,
    /// Failed ops over all kinds.
    pub failed: u64,
    /// Per enabled op.
    pub ops: Vec<OpInterval>,
}

impl Interval {
    /// Builds the row for `rec`, listing `ops`.
    pub fn from_recorder(elapsed_s: f64, window_s: f64, rec: &Recorder, ops: &[Op]) -> Interval {
        Interval {
            elapsed_s,
            window_s,
            successful: rec.successful(),
            failed: rec.failed(),
            ops: ops
                .iter()
                .map(|&op| {
                    let r = rec.op(op);
                    let split = r.found_and_not_found();
                    OpInterval {
                        op,
                        successful: r.successful,
                        not_found: r.not_found,
                        failed: r.failed,
                        latency_us: Percentiles::of(r.latency.as_ref()),
                        found_latency_us: split.map(|s| s.0),
                        not_found_latency_us: split.map(|s| s.1),
                    }
                })
                .collect(),
        }
    }

    /// Successful ops per second in this interval.
    pub fn ops_per_sec(&self) -> f64 {
        rate(self.successful, self.window_s)
    }

    /// The row of `op`, if it is enabled.
    pub fn op(&self, op: Op) -> Option<&OpInterval> {
        self.ops.iter().find(|o| o.op == op)
    }
}

/// `count / seconds`, 0 when no time passed.
pub fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        count as f64 / seconds
    } else {
        0.0
    }
}

/// The fraction of a run's duration that "last window" throughput covers.
pub const LAST_WINDOW_FRACTION: f64 = 0.1;

/// Throughput over the tail of a run: the last report intervals that together
/// cover at least [`LAST_WINDOW_FRACTION`] (10%) of the run's elapsed time, and
/// at least one interval. Returns `(ops_per_sec, window_s)`.
pub fn last_window(intervals: &[Interval]) -> (f64, f64) {
    let elapsed = intervals.last().map_or(0.0, |i| i.elapsed_s);
    let want = elapsed * LAST_WINDOW_FRACTION;
    let mut ops = 0u64;
    let mut window = 0.0;
    for i in intervals.iter().rev() {
        ops += i.successful;
        window += i.window_s;
        if window >= want {
            break;
        }
    }
    (rate(ops, window), window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merged_percentiles_come_from_merged_histograms() {
        let mut a = Recorder::default();
        let mut b = Recorder::default();
        for v in 1..=90 {
            a.record(Op::Get, Outcome::Ok, v, None);
        }
        for _ in 0..10 {
            b.record(Op::Get, Outcome::NotFound, 10_000, None);
        }
        b.record(Op::Get, Outcome::Failed("boom".into()), 5, None);
        let mut m = Recorder::default();
        m.add(&a);
        m.add(&b);
        let r = m.op(Op::Get);
        assert_eq!((r.successful, r.not_found, r.failed), (100, 10, 1));
        let p = Percentiles::of(r.latency.as_ref());
        assert_eq!(p.min, 1);
        assert_eq!(p.p50, 50);
        assert!(p.p95 >= 9_990, "{p:?}");
        let (found, not_found) = r
            .found_and_not_found()
            .unwrap_or_else(|| panic!("not-found ops were recorded"));
        assert_eq!((found.min, found.max), (1, 90), "{found:?}");
        assert_eq!(found.p50, 45);
        assert!(
            not_found.min >= 9_990 && not_found.p50 >= 9_990,
            "{not_found:?}"
        );
        assert!(a.op(Op::Get).found_and_not_found().is_none());
        assert_eq!(m.errors.get(&(Op::Get, "boom".to_string())), Some(&1));
        m.reset();
        assert_eq!(m.successful(), 0);
        assert!(m.errors.is_empty());
    }

    #[test]
    fn error_kinds_are_bounded() {
        let mut r = Recorder::default();
        for i in 0..(ERROR_KINDS_PER_WORKER_MAX + 10) {
            r.record(Op::Put, Outcome::Failed(format!("e{i}")), 1, None);
        }
        assert_eq!(r.errors.len(), ERROR_KINDS_PER_WORKER_MAX + 1);
        assert_eq!(
            r.errors.get(&(Op::Put, OTHER_ERRORS.to_string())),
            Some(&10)
        );
    }

    #[test]
    fn last_window_covers_a_tenth_and_at_least_one_interval() {
        let iv = |elapsed_s: f64, successful| Interval {
            elapsed_s,
            window_s: 1.0,
            successful,
            failed: 0,
            ops: vec![],
        };
        let rows: Vec<_> = (1..=30)
            .map(|s| iv(s as f64, if s > 27 { 50 } else { 10 }))
            .collect();
        assert_eq!(last_window(&rows), (50.0, 3.0));
        assert_eq!(last_window(&rows[..2]), (10.0, 1.0));
    }
}
