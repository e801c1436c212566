//! Result files: basho_bench-compatible CSVs and `summary.json`.
//!
//! Owns the exact bytes of `summary.csv`, `<op>_latencies.csv` and `errors.csv`
//! (as `basho_bench_stats_writer_csv.erl` writes them, so `priv/summary.r`,
//! `compare.r` and the gnuplot scripts still read them), the `summary.json`
//! schema ([`RunSummary`]) and reading both back for comparisons. It must never
//! measure anything or draw charts.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::BenchError;
use crate::stats::{Interval, OpInterval, Percentiles};
use crate::target::{Counter, CounterKind};
use crate::workload::{Op, Workload};

/// Header of `summary.csv` (basho_bench).
pub const SUMMARY_CSV_HEADER: &str = "elapsed, window, total, successful, failed";
/// Header of `<op>_latencies.csv` (basho_bench), latencies in µs.
pub const LATENCIES_CSV_HEADER: &str =
    "elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors";
/// Header of `errors.csv` (basho_bench).
pub const ERRORS_CSV_HEADER: &str = "\"error\",\"count\"";
/// File name of the JSON summary.
pub const SUMMARY_JSON: &str = "summary.json";
/// File name of the throughput CSV.
pub const SUMMARY_CSV: &str = "summary.csv";
/// File name of the chart.
pub const SUMMARY_PNG: &str = "summary.png";
/// File name of the error counts.
pub const ERRORS_CSV: &str = "errors.csv";

/// File name of the target's own counters per interval.
pub const STORE_COUNTERS_CSV: &str = "store_counters.csv";
/// Header of `store_counters.csv`: one row per counter per interval; `value`
/// is a total's change over the interval or a level as read at its end.
pub const STORE_COUNTERS_CSV_HEADER: &str = "elapsed, window, name, kind, value";

/// File name of `op`'s latency CSV.
pub fn latencies_csv_name(op: Op) -> String {
    format!("{}_latencies.csv", op.name())
}

/// Seconds as Erlang's `~w` prints a float: shortest round-trip, always with a
/// fractional part (`10.0`, `10.000123`). Rounded to the microsecond.
pub fn erlang_float(seconds: f64) -> String {
    let us = (seconds * 1e6).round() / 1e6;
    format!("{us:?}")
}

/// One `summary.csv` line (without newline).
pub fn summary_csv_line(i: &Interval) -> String {
    format!(
        "{}, {}, {}, {}, {}",
        erlang_float(i.elapsed_s),
        erlang_float(i.window_s),
        i.successful + i.failed,
        i.successful,
        i.failed
    )
}

/// One `<op>_latencies.csv` line (without newline). Like basho_bench, a window
/// with no successful op writes zeros and the error count.
pub fn latencies_csv_line(elapsed_s: f64, window_s: f64, o: &OpInterval) -> String {
    let (e, w) = (erlang_float(elapsed_s), erlang_float(window_s));
    if o.successful == 0 {
        return format!("{e}, {w}, 0, 0, 0, 0, 0, 0, 0, 0, {}", o.failed);
    }
    let p = &o.latency_us;
    format!(
        "{e}, {w}, {}, {}, {:.1}, {}, {}, {}, {}, {}, {}",
        o.successful, p.min, p.mean, p.p50, p.p95, p.p99, p.p99_9, p.max, o.failed
    )
}

/// A target's own counters over a run ([`Target::counters`]): written to
/// `store_counters.csv` per interval (created with the first interval that
/// has any) and summed up for `summary.json`. Holds what it was given; the
/// runner does the sampling.
///
/// [`Target::counters`]: crate::target::Target::counters
pub struct StoreCounters {
    dir: PathBuf,
    file: Option<(PathBuf, BufWriter<File>)>,
    /// Totals at the previous sample.
    last: BTreeMap<&'static str, u64>,
    /// Totals' change since the first sample; levels' peak.
    run: BTreeMap<String, u64>,
}

impl StoreCounters {
    /// Starts from `now`, the counters at the start of measurement.
    pub fn start(dir: &Path, now: &[Counter]) -> StoreCounters {
        StoreCounters {
            dir: dir.to_path_buf(),
            file: None,
            last: now
                .iter()
                .filter(|c| c.kind == CounterKind::Total)
                .map(|c| (c.name, c.value))
                .collect(),
            run: BTreeMap::new(),
        }
    }

    /// Records `now`, read at the end of an interval; returns each counter's
    /// figure for the interval (a total's change, a level's value). A total
    /// that went down (a store that reset it) counts from zero again.
    pub fn record(
        &mut self,
        elapsed_s: f64,
        window_s: f64,
        now: &[Counter],
    ) -> Result<Vec<(&'static str, u64)>, BenchError> {
        let mut row = Vec::with_capacity(now.len());
        for c in now {
            let v = match c.kind {
                CounterKind::Total => {
                    let before = self.last.insert(c.name, c.value).unwrap_or(0);
                    let d = c.value.checked_sub(before).unwrap_or(c.value);
                    *self.run.entry(c.name.to_string()).or_default() += d;
                    d
                }
                CounterKind::Level => {
                    let peak = self.run.entry(c.name.to_string()).or_default();
                    *peak = (*peak).max(c.value);
                    c.value
                }
            };
            row.push((c.name, v));
        }
        if row.is_empty() {
            return Ok(row);
        }
        if self.file.is_none() {
            self.file = Some(create(
                self.dir.join(STORE_COUNTERS_CSV),
                STORE_COUNTERS_CSV_HEADER,
            )?);
        }
        if let Some((path, w)) = &mut self.file {
            let (e, win) = (erlang_float(elapsed_s), erlang_float(window_s));
            for (c, (name, v)) in now.iter().zip(&row) {
                let kind = match c.kind {
                    CounterKind::Total => "total",
                    CounterKind::Level => "level",
                };
                writeln!(w, "{e}, {win}, {name}, {kind}, {v}")
                    .map_err(|err| BenchError::io(&*path, "write", err))?;
            }
            w.flush()
                .map_err(|err| BenchError::io(&*path, "write", err))?;
        }
        Ok(row)
    }

    /// Over the run so far: each total's change, each level's peak.
    pub fn run_figures(&self) -> BTreeMap<String, u64> {
        self.run.clone()
    }
}

/// Streams interval rows to the CSV files as a run goes (flushed every row, so
/// a run that dies still leaves its rows).
pub struct CsvWriter {
    summary: (PathBuf, BufWriter<File>),
    ops: Vec<(Op, PathBuf, BufWriter<File>)>,
}

fn create(path: PathBuf, header: &str) -> Result<(PathBuf, BufWriter<File>), BenchError> {
    let file = File::create(&path).map_err(|e| BenchError::io(&path, "create", e))?;
    let mut w = BufWriter::new(file);
    writeln!(w, "{header}").map_err(|e| BenchError::io(&path, "write", e))?;
    Ok((path, w))
}

impl CsvWriter {
    /// Creates `summary.csv` and one latency CSV per op in `dir`, headers written.
    pub fn create(dir: &Path, ops: &[Op]) -> Result<CsvWriter, BenchError> {
        let summary = create(dir.join(SUMMARY_CSV), SUMMARY_CSV_HEADER)?;
        let ops = ops
            .iter()
            .map(|&op| {
                let (p, w) = create(dir.join(latencies_csv_name(op)), LATENCIES_CSV_HEADER)?;
                Ok((op, p, w))
            })
            .collect::<Result<Vec<_>, BenchError>>()?;
        Ok(CsvWriter { summary, ops })
    }

    /// Appends one interval to every file.
    pub fn write(&mut self, i: &Interval) -> Result<(), BenchError> {
        let (path, w) = &mut self.summary;
        writeln!(w, "{}", summary_csv_line(i))
            .and_then(|_| w.flush())
            .map_err(|e| BenchError::io(&*path, "write", e))?;
        for (op, path, w) in &mut self.ops {
            if let Some(o) = i.op(*op) {
                writeln!(w, "{}", latencies_csv_line(i.elapsed_s, i.window_s, o))
                    .and_then(|_| w.flush())
                    .map_err(|e| BenchError::io(&*path, "write", e))?;
            }
        }
        Ok(())
    }
}

/// Writes `errors.csv` (`"error","count"`, one row per op and message).
pub fn write_errors_csv(
    dir: &Path,
    errors: &BTreeMap<(Op, String), u64>,
) -> Result<(), BenchError> {
    let (path, mut w) = create(dir.join(ERRORS_CSV), ERRORS_CSV_HEADER)?;
    for ((op, message), count) in errors {
        let text = format!("{}: {}", op.name(), message).replace('"', "'");
        writeln!(w, "\"{text}\",\"{count}\"").map_err(|e| BenchError::io(&path, "write", e))?;
    }
    w.flush().map_err(|e| BenchError::io(&path, "write", e))
}

/// One op's whole-run numbers in `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSummary {
    /// Ops issued (successful + failed).
    pub total: u64,
    /// Ops that succeeded (including `not_found`).
    pub successful: u64,
    /// Ops the target failed.
    pub failed: u64,
    /// Gets/heads of absent keys (counted in `successful`).
    pub not_found: u64,
    /// `successful / elapsed_s`.
    pub ops_per_sec: f64,
    /// Whole-run latency from merged HDR histograms, µs. In `rate` mode this is
    /// response time, measured from each op's intended start.
    pub latency_us: Percentiles,
    /// Whole-run service time (from the actual start), µs; `rate` mode only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_time_us: Option<Percentiles>,
    /// Whole-run latency of the ops that found their key, µs; only when some
    /// did not (absent in files written before it existed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found_latency_us: Option<Percentiles>,
    /// Whole-run latency of the not-found gets/heads, µs; only when there
    /// were some.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_found_latency_us: Option<Percentiles>,
}

/// The preload phase, when there was one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreloadSummary {
    /// Keys written.
    pub keys: u64,
    /// Seconds it took.
    pub elapsed_s: f64,
}

/// `summary.json`: everything about one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    /// The workload, as run (with the seed filled in).
    pub workload: Workload,
    /// Target name (`Target::name`).
    pub target: String,
    /// RNG seed (worker `w` used `seed + w`).
    pub seed: u64,
    /// Start of measurement, RFC 3339 UTC.
    pub started_at: String,
    /// Measured seconds (preload excluded).
    pub elapsed_s: f64,
    /// Report intervals written.
    pub intervals: usize,
    /// The preload phase, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preload: Option<PreloadSummary>,
    /// Per op, by name, enabled ops only.
    pub ops: BTreeMap<String, OpSummary>,
    /// Ops issued, all kinds.
    pub total: u64,
    /// Successful ops, all kinds.
    pub successful: u64,
    /// Failed ops, all kinds.
    pub failed: u64,
    /// Not-found gets/heads, all kinds.
    pub not_found: u64,
    /// Successful ops per second over the whole run.
    pub ops_per_sec: f64,
    /// Successful ops per second over the last report intervals that cover at
    /// least 10% of the run (and at least one interval): the tail, where a store
    /// that slows down as data grows shows it.
    pub last_window_ops_per_sec: f64,
    /// Length of that last window, seconds.
    pub last_window_s: f64,
    /// Bytes the target occupied on disk at the end, when it reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_bytes: Option<u64>,
    /// Bytes the run's process read from and wrote to storage during the
    /// measured period (`/proc/self/io`), background work included: with
    /// the bytes of values written, the write amplification.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_io: Option<DiskIo>,
    /// The run's reclaim window (`reclaim_window_s` of the workload): what
    /// reclamation did and the phases before and in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimSummary>,
    /// Why `summary.png` could not be drawn, if it could not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_error: Option<String>,
    /// The target's own counters over the measured period
    /// (`store_counters.csv` has them per interval): a running total's
    /// change, a level's peak. Empty when the target reports none.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub store_counters: BTreeMap<String, u64>,
}

/// One `Target::reclaim` call inside a run's reclaim window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimRun {
    /// Seconds since the measured period began, at the call.
    pub start_s: f64,
    /// Seconds since the measured period began, when it returned.
    pub end_s: f64,
    /// Bytes of the files it rewrote (0: nothing was worth reclaiming).
    pub bytes_before: u64,
    /// Bytes of the files that replaced them.
    pub bytes_after: u64,
    /// The target's error, if the call failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A stretch of a run: the report intervals whose midpoints fall in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    /// Start of its first interval, seconds since the measured period began.
    pub from_s: f64,
    /// End of its last interval.
    pub to_s: f64,
    /// Successful ops/s over its intervals.
    pub ops_per_sec: f64,
    /// Per op, as in the run's `ops` (percentiles over the phase only).
    pub ops: BTreeMap<String, OpSummary>,
}

/// What a run's reclaim window did.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimSummary {
    /// The window, seconds of the measured period.
    pub window_s: [f64; 2],
    /// `false`: the target has no reclamation step to ask for; its phases
    /// are still split at the window, to compare stores over the same time.
    pub supported: bool,
    /// Every call, in order.
    pub runs: Vec<ReclaimRun>,
    /// Seconds of the window during which a call was running.
    pub busy_s: f64,
    /// Bytes of rewritten files minus the bytes that replaced them.
    pub bytes_reclaimed: u64,
    /// `bytes_reclaimed` per second of the window.
    pub reclaimed_bytes_per_s: f64,
    /// The second half of the time before the window (the same store,
    /// warmed up, without reclamation).
    pub before: Option<Phase>,
    /// The window.
    pub during: Option<Phase>,
}

impl ReclaimSummary {
    /// The summary of `runs` in `window_s`; `supported` as the target said.
    pub fn of(
        window_s: [f64; 2],
        supported: bool,
        runs: Vec<ReclaimRun>,
        before: Option<Phase>,
        during: Option<Phase>,
    ) -> ReclaimSummary {
        let [from, to] = window_s;
        let busy_s = runs
            .iter()
            .map(|r| (r.end_s.min(to) - r.start_s.max(from)).max(0.0))
            .sum();
        let bytes_reclaimed = runs
            .iter()
            .map(|r| r.bytes_before.saturating_sub(r.bytes_after))
            .sum();
        ReclaimSummary {
            window_s,
            supported,
            runs,
            busy_s,
            bytes_reclaimed,
            reclaimed_bytes_per_s: bytes_reclaimed as f64 / (to - from),
            before,
            during,
        }
    }
}

/// Storage I/O of a process (`read_bytes` and `write_bytes` of
/// `/proc/PID/io`: what reached the block layer, not the page cache).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskIo {
    /// Bytes read from storage.
    pub read_bytes: u64,
    /// Bytes written to storage (dirtied pages written back, direct writes).
    pub write_bytes: u64,
}

impl DiskIo {
    /// This process's counters so far; `None` where `/proc/self/io` is not
    /// readable (not Linux, no task I/O accounting).
    pub fn of_this_process() -> Option<DiskIo> {
        DiskIo::parse(&std::fs::read_to_string("/proc/self/io").ok()?)
    }

    /// Parses the text of `/proc/PID/io`; `None` when a counter is missing
    /// or malformed.
    pub fn parse(text: &str) -> Option<DiskIo> {
        let field = |name: &str| -> Option<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .and_then(|v| v.trim().parse().ok())
        };
        Some(DiskIo {
            read_bytes: field("read_bytes")?,
            write_bytes: field("write_bytes")?,
        })
    }

    /// What happened between `before` and `self`.
    pub fn since(self, before: DiskIo) -> DiskIo {
        DiskIo {
            read_bytes: self.read_bytes.saturating_sub(before.read_bytes),
            write_bytes: self.write_bytes.saturating_sub(before.write_bytes),
        }
    }
}

impl RunSummary {
    /// Reads `summary.json` from a run directory.
    pub fn load(dir: &Path) -> Result<RunSummary, BenchError> {
        let path = dir.join(SUMMARY_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, "read", e))?;
        serde_json::from_str(&text).map_err(|e| BenchError::Json {
            file: path,
            message: e.to_string(),
        })
    }

    /// Writes `summary.json` into `dir`.
    pub fn save(&self, dir: &Path) -> Result<(), BenchError> {
        let path = dir.join(SUMMARY_JSON);
        let text = serde_json::to_string_pretty(self).map_err(|e| BenchError::Json {
            file: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|e| BenchError::io(&path, "write", e))
    }
}

/// One row of `summary.csv`, read back.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SummaryRow {
    /// Seconds since start.
    pub elapsed_s: f64,
    /// Interval length, seconds.
    pub window_s: f64,
    /// Successful ops in the interval.
    pub successful: u64,
    /// Failed ops in the interval.
    pub failed: u64,
}

/// Reads a `summary.csv` (ours or basho_bench's).
pub fn read_summary_csv(path: &Path) -> Result<Vec<SummaryRow>, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::io(path, "read", e))?;
    let bad = |line: usize, what: &str| BenchError::CompareInput {
        dir: path.to_path_buf(),
        reason: format!("line {line}: {what}"),
    };
    let mut lines = text.lines().enumerate();
    match lines.next() {
        Some((_, h)) if h.trim() == SUMMARY_CSV_HEADER => {}
        _ => return Err(bad(1, &format!("expected header `{SUMMARY_CSV_HEADER}`"))),
    }
    let mut rows = Vec::new();
    for (n, line) in lines {
        if line.trim().is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split(',').map(str::trim).collect();
        if f.len() != 5 {
            return Err(bad(n + 1, "expected 5 fields"));
        }
        let float = |s: &str| s.parse::<f64>().map_err(|_| bad(n + 1, "bad number"));
        let int = |s: &str| s.parse::<u64>().map_err(|_| bad(n + 1, "bad count"));
        rows.push(SummaryRow {
            elapsed_s: float(f[0])?,
            window_s: float(f[1])?,
            successful: int(f[3])?,
            failed: int(f[4])?,
        });
    }
    Ok(rows)
}

/// `t` as RFC 3339 UTC with second precision (`2026-05-01T12:00:00Z`).
pub fn rfc3339_utc(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters(reads: u64, mem: u64) -> Vec<Counter> {
        vec![
            Counter {
                name: "reads",
                value: reads,
                kind: CounterKind::Total,
            },
            Counter {
                name: "mem",
                value: mem,
                kind: CounterKind::Level,
            },
        ]
    }

    #[test]
    fn store_counters_give_totals_per_interval_and_levels_at_their_peak() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = StoreCounters::start(dir.path(), &counters(100, 5));
        assert_eq!(
            c.record(1.0, 1.0, &counters(130, 50)).unwrap(),
            [("reads", 30), ("mem", 50)]
        );
        assert_eq!(
            c.record(2.0, 1.0, &counters(160, 20)).unwrap(),
            [("reads", 30), ("mem", 20)]
        );
        // A total that went down was reset: it counts from zero.
        assert_eq!(
            c.record(3.0, 1.0, &counters(7, 20)).unwrap(),
            [("reads", 7), ("mem", 20)]
        );
        let run = c.run_figures();
        assert_eq!((run["reads"], run["mem"]), (67, 50));
        let text = std::fs::read_to_string(dir.path().join(STORE_COUNTERS_CSV)).unwrap();
        let rows: Vec<&str> = text.lines().collect();
        assert_eq!(rows.len(), 7, "{text}");
        assert_eq!(rows[0], STORE_COUNTERS_CSV_HEADER);
        assert_eq!(rows[1], "1.0, 1.0, reads, total, 30");
        assert_eq!(rows[6], "3.0, 1.0, mem, level, 20");
        // A target without counters writes no file.
        let empty = tempfile::tempdir().unwrap();
        let mut none = StoreCounters::start(empty.path(), &[]);
        assert!(none.record(1.0, 1.0, &[]).unwrap().is_empty());
        assert!(!empty.path().join(STORE_COUNTERS_CSV).exists());
        assert!(none.run_figures().is_empty());
    }

    #[test]
    fn proc_io_is_parsed_and_bad_text_refused() {
        let text = "rchar: 10\nwchar: 20\nsyscr: 1\nsyscw: 2\nread_bytes: 4096\nwrite_bytes: 8192\ncancelled_write_bytes: 0\n";
        let io = DiskIo::parse(text).unwrap();
        assert_eq!((io.read_bytes, io.write_bytes), (4096, 8192));
        assert_eq!(
            DiskIo {
                read_bytes: 5000,
                write_bytes: 9000
            }
            .since(io),
            DiskIo {
                read_bytes: 904,
                write_bytes: 808
            }
        );
        assert_eq!(DiskIo::parse("read_bytes: x\nwrite_bytes: 1\n"), None);
        assert_eq!(DiskIo::parse("rchar: 1\n"), None);
        // This process has counters on Linux.
        assert!(DiskIo::of_this_process().is_some());
    }

    #[test]
    fn csv_lines_match_basho_bench_formatting() {
        assert_eq!(erlang_float(10.0), "10.0");
        assert_eq!(erlang_float(10.0001234), "10.000123");
        let o = OpInterval {
            op: Op::Get,
            successful: 3,
            not_found: 1,
            failed: 2,
            latency_us: Percentiles {
                min: 5,
                mean: 12.345,
                p50: 10,
                p95: 20,
                p99: 21,
                p99_9: 22,
                max: 23,
            },
            found_latency_us: None,
            not_found_latency_us: None,
        };
        assert_eq!(
            latencies_csv_line(10.0, 10.0, &o),
            "10.0, 10.0, 3, 5, 12.3, 10, 20, 21, 22, 23, 2"
        );
        let empty = OpInterval {
            successful: 0,
            ..o.clone()
        };
        assert_eq!(
            latencies_csv_line(20.5, 10.5, &empty),
            "20.5, 10.5, 0, 0, 0, 0, 0, 0, 0, 0, 2"
        );
        let i = Interval {
            elapsed_s: 1.5,
            window_s: 1.5,
            successful: 7,
            failed: 1,
            ops: vec![o],
        };
        assert_eq!(summary_csv_line(&i), "1.5, 1.5, 8, 7, 1");
    }

    #[test]
    fn op_summaries_without_found_and_not_found_latency_still_load() {
        // An op of a summary.json written before found and not-found
        // latencies were kept apart.
        let old = r#"{"total": 3, "successful": 3, "failed": 0, "not_found": 1,
            "ops_per_sec": 1.5, "latency_us": {"min": 1, "mean": 2.0, "p50": 2,
            "p95": 3, "p99": 3, "p99_9": 3, "max": 3}}"#;
        let s: OpSummary = serde_json::from_str(old).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.found_latency_us, s.not_found_latency_us), (None, None));
        assert_eq!(s.latency_us.p50, 2);
        // And without them, what is written is what was written before.
        let text = serde_json::to_string(&s).unwrap_or_else(|e| panic!("{e}"));
        assert!(!text.contains("found_latency_us"), "{text}");
    }

    #[test]
    fn rfc3339_of_known_instants() {
        let t = |s| std::time::UNIX_EPOCH + std::time::Duration::from_secs(s);
        assert_eq!(rfc3339_utc(t(0)), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(t(951_782_400)), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339_utc(t(1_767_225_599)), "2025-12-31T23:59:59Z");
    }
}
