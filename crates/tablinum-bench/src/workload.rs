//! Workload files: what a run does, read from TOML and validated.
//!
//! Owns the workload schema ([`Workload`], [`Mode`], [`Operations`], [`Op`]),
//! its defaults, its limits (the `*_MAX` / `*_MIN` constants, units last) and
//! its validation, which names the offending field. It must never run
//! anything, open a target or touch the clock: it only describes a run.
//!
//! ```toml
//! duration_s = 60            # stop after this many seconds ...
//! op_count = 1_000_000       # ... or after this many operations, whichever comes first
//! concurrent = 4             # worker threads
//! mode = "max"               # "max" (closed loop) or "rate" (open loop, needs rate_ops_per_s)
//! report_interval_s = 10
//! seed = 42                  # optional; a time-based seed is chosen and recorded otherwise
//! preload_keys = 100_000     # keys 0..preload_keys written before measuring
//! keys = 1_000_000           # key space size
//! key_generator = "pareto"   # uniform | pareto | truncated_pareto | sequential
//! key_encoding = "be64"      # be64 (8-byte big endian) | decimal (20 zero-padded digits)
//! key_prefix = "obj/"
//! value_generator = "fixed"  # fixed | semi_compressible
//! value_size_bytes = 8192
//! scan_limit_rows = 100
//!
//! [operations]               # weights; absent ops weigh 0
//! get = 4
//! put = 4
//! scan = 1
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// Most worker threads a workload may ask for.
pub const CONCURRENT_MAX: u32 = 1024;
/// Shortest report interval, seconds.
pub const REPORT_INTERVAL_S_MIN: f64 = 0.1;
/// Longest report interval, seconds.
pub const REPORT_INTERVAL_S_MAX: f64 = 3600.0;
/// Longest run, seconds (30 days).
pub const DURATION_S_MAX: f64 = 30.0 * 24.0 * 3600.0;
/// Lowest open-loop rate, total operations per second.
pub const RATE_OPS_PER_S_MIN: f64 = 0.001;
/// Highest open-loop rate, total operations per second.
pub const RATE_OPS_PER_S_MAX: f64 = 10_000_000.0;
/// Largest value, bytes.
pub const VALUE_SIZE_BYTES_MAX: u64 = 16 << 20;
/// Most rows one scan may read.
pub const SCAN_LIMIT_ROWS_MAX: u32 = 1_000_000;
/// Longest key prefix, bytes.
pub const KEY_PREFIX_BYTES_MAX: usize = 256;
/// Largest key space (keys are `u64`; room is kept for pareto's tail).
pub const KEYS_MAX: u64 = 1 << 48;
/// Largest sum of operation weights.
pub const OPERATION_WEIGHTS_SUM_MAX: u64 = 1_000_000;

/// How workers pace themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Closed loop: each worker issues its next operation as soon as the last returns.
    #[default]
    Max,
    /// Open loop at `rate_ops_per_s` in total: latency is measured from each
    /// operation's intended start, so stalls are not hidden (no coordinated omission).
    Rate,
}

/// Which keys operations use (all draw from `0..keys`, except pareto's tail).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KeyGenerator {
    /// Uniform over `0..keys`.
    #[default]
    Uniform,
    /// basho_bench `pareto_int`: shape 1.5, mean at 20% of `keys`, so ~80% of draws
    /// fall in the first 20% of the key space. Like basho_bench, it is not capped:
    /// ~2.7% of draws land beyond `keys` (keys that were never preloaded).
    Pareto,
    /// basho_bench `truncated_pareto_int`: `pareto` capped at `keys - 1`.
    TruncatedPareto,
    /// `0, 1, 2, ...` shared by all workers (one global sequence), wrapping at `keys`.
    Sequential,
}

/// How a key number becomes key bytes (after `key_prefix`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum KeyEncoding {
    /// 8 bytes, big endian: byte order equals numeric order.
    #[default]
    Be64,
    /// 20 ASCII digits, zero padded: byte order equals numeric order.
    Decimal,
}

/// What values `put` and `update` write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum ValueGenerator {
    /// `value_size_bytes` incompressible bytes, slices of one large random block
    /// (basho_bench `fixed_bin`).
    #[default]
    Fixed,
    /// Half random bytes, half word-like text that compresses about 3:1
    /// (martinsumner/basho_bench `semi_compressible`).
    SemiCompressible,
}

/// One kind of operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Read a value; absent is `not_found`, a success.
    Get,
    /// Read existence and length only; absent is `not_found`, a success.
    Head,
    /// Write a value.
    Put,
    /// `get` then `put` of the same key, timed as one operation.
    Update,
    /// Delete a key.
    Delete,
    /// Forward scan of at most `scan_limit_rows` objects from a generated key.
    Scan,
}

impl Mode {
    /// The mode's name in workload files.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Max => "max",
            Mode::Rate => "rate",
        }
    }
}

impl Op {
    /// Every op, in file and report order.
    pub const ALL: [Op; 6] = [Op::Get, Op::Head, Op::Put, Op::Update, Op::Delete, Op::Scan];

    /// The op's name in workload files and output file names (`get_latencies.csv`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Head => "head",
            Op::Put => "put",
            Op::Update => "update",
            Op::Delete => "delete",
            Op::Scan => "scan",
        }
    }

    /// The op named `name`, if any.
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }

    /// Dense index `0..Op::ALL.len()`.
    pub fn index(self) -> usize {
        self as usize
    }
}

/// Relative weights of each op (basho_bench `operations`). Absent ops weigh 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct Operations {
    /// Weight of `get`.
    pub get: u32,
    /// Weight of `head`.
    pub head: u32,
    /// Weight of `put`.
    pub put: u32,
    /// Weight of `update` (get then put).
    pub update: u32,
    /// Weight of `delete`.
    pub delete: u32,
    /// Weight of `scan`.
    pub scan: u32,
}

impl Operations {
    /// The weight of `op`.
    pub fn weight(&self, op: Op) -> u32 {
        match op {
            Op::Get => self.get,
            Op::Head => self.head,
            Op::Put => self.put,
            Op::Update => self.update,
            Op::Delete => self.delete,
            Op::Scan => self.scan,
        }
    }

    /// Ops with a non-zero weight, in [`Op::ALL`] order.
    pub fn enabled(&self) -> Vec<Op> {
        Op::ALL
            .into_iter()
            .filter(|&op| self.weight(op) > 0)
            .collect()
    }

    /// Sum of all weights.
    pub fn total(&self) -> u64 {
        Op::ALL.iter().map(|&op| u64::from(self.weight(op))).sum()
    }
}

/// A benchmark workload. Build one with [`Workload::load`], [`Workload::from_toml_str`]
/// or `Workload { .., ..Workload::default() }` followed by [`Workload::validate`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Workload {
    /// Stop after this many seconds (measurement only, preload excluded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Stop after this many operations in total (whichever of the two comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op_count: Option<u64>,
    /// Worker threads.
    #[serde(default = "default_concurrent")]
    pub concurrent: u32,
    /// Closed loop (`max`) or open loop (`rate`).
    #[serde(default)]
    pub mode: Mode,
    /// Total target rate for `mode = "rate"`, operations per second (all workers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_ops_per_s: Option<f64>,
    /// Seconds between report rows (CSV rows, status lines).
    #[serde(default = "default_report_interval_s")]
    pub report_interval_s: f64,
    /// RNG seed; worker `w` uses `seed + w`. Chosen from the clock and recorded when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Keys `0..preload_keys` written in order before measuring (not measured).
    #[serde(default)]
    pub preload_keys: u64,
    /// Key space size.
    #[serde(default = "default_keys")]
    pub keys: u64,
    /// Key distribution.
    #[serde(default)]
    pub key_generator: KeyGenerator,
    /// Key bytes layout.
    #[serde(default)]
    pub key_encoding: KeyEncoding,
    /// Bytes prepended to every key.
    #[serde(default)]
    pub key_prefix: String,
    /// Value contents.
    #[serde(default)]
    pub value_generator: ValueGenerator,
    /// Value size, bytes.
    #[serde(default = "default_value_size_bytes")]
    pub value_size_bytes: u64,
    /// Rows per `scan`.
    #[serde(default = "default_scan_limit_rows")]
    pub scan_limit_rows: u32,
    /// Seconds `[from, to]` of the measured period during which the target's
    /// own reclamation of overwritten values is run back to back
    /// (`Target::reclaim`; tablinum: journal compaction). Absent: never
    /// asked for. With it, `summary.json` also splits the run into the
    /// phase before the window and the phase in it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim_window_s: Option<[f64; 2]>,
    /// Op weights.
    pub operations: Operations,
}

fn default_concurrent() -> u32 {
    1
}
fn default_report_interval_s() -> f64 {
    10.0
}
fn default_keys() -> u64 {
    100_000
}
fn default_value_size_bytes() -> u64 {
    1024
}
fn default_scan_limit_rows() -> u32 {
    100
}

impl Default for Workload {
    /// 60 s, one worker, closed loop, 100k uniform keys, 1 KiB fixed values,
    /// half get half put.
    fn default() -> Self {
        Workload {
            duration_s: Some(60.0),
            op_count: None,
            concurrent: default_concurrent(),
            mode: Mode::Max,
            rate_ops_per_s: None,
            report_interval_s: default_report_interval_s(),
            seed: None,
            preload_keys: 0,
            keys: default_keys(),
            key_generator: KeyGenerator::Uniform,
            key_encoding: KeyEncoding::Be64,
            key_prefix: String::new(),
            value_generator: ValueGenerator::Fixed,
            value_size_bytes: default_value_size_bytes(),
            scan_limit_rows: default_scan_limit_rows(),
            reclaim_window_s: None,
            operations: Operations {
                get: 1,
                put: 1,
                ..Operations::default()
            },
        }
    }
}

impl Workload {
    /// Reads and validates a workload file.
    pub fn load(path: &Path) -> Result<Workload, BenchError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| BenchError::io(path, "read workload file", e))?;
        Workload::from_toml_str(&text, path)
    }

    /// Parses and validates workload TOML; `file` is only used in error messages.
    pub fn from_toml_str(text: &str, file: &Path) -> Result<Workload, BenchError> {
        let workload: Workload = toml::from_str(text).map_err(|e| BenchError::WorkloadParse {
            file: file.to_path_buf(),
            message: e.to_string(),
        })?;
        workload.validate(file)?;
        Ok(workload)
    }

    /// The workload as TOML (for echoing next to results).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot serialise workload: {e}\n"))
    }

    /// Checks every field against the limits; the error names the first bad field.
    pub fn validate(&self, file: &Path) -> Result<(), BenchError> {
        let bad = |field: &'static str, reason: String| BenchError::WorkloadInvalid {
            file: file.to_path_buf(),
            field,
            reason,
        };
        if self.duration_s.is_none() && self.op_count.is_none() {
            return Err(bad(
                "duration_s",
                "set `duration_s`, `op_count` or both (the run stops at whichever comes first)"
                    .into(),
            ));
        }
        if let Some(d) = self.duration_s {
            if !(d.is_finite() && d > 0.0 && d <= DURATION_S_MAX) {
                return Err(bad(
                    "duration_s",
                    format!("{d} is not in (0, {DURATION_S_MAX}] seconds"),
                ));
            }
        }
        if self.op_count == Some(0) {
            return Err(bad("op_count", "must be at least 1".into()));
        }
        if self.concurrent == 0 || self.concurrent > CONCURRENT_MAX {
            return Err(bad(
                "concurrent",
                format!("{} is not in 1..={CONCURRENT_MAX}", self.concurrent),
            ));
        }
        match (self.mode, self.rate_ops_per_s) {
            (Mode::Rate, None) => {
                return Err(bad(
                    "rate_ops_per_s",
                    "required when mode = \"rate\" (total operations per second)".into(),
                ))
            }
            (Mode::Rate, Some(r))
                if !(r.is_finite() && (RATE_OPS_PER_S_MIN..=RATE_OPS_PER_S_MAX).contains(&r)) =>
            {
                return Err(bad(
                    "rate_ops_per_s",
                    format!("{r} is not in [{RATE_OPS_PER_S_MIN}, {RATE_OPS_PER_S_MAX}]"),
                ))
            }
            (Mode::Max, Some(_)) => {
                return Err(bad(
                    "rate_ops_per_s",
                    "only allowed with mode = \"rate\"".into(),
                ))
            }
            _ => {}
        }
        let ri = self.report_interval_s;
        if !(ri.is_finite() && (REPORT_INTERVAL_S_MIN..=REPORT_INTERVAL_S_MAX).contains(&ri)) {
            return Err(bad(
                "report_interval_s",
                format!(
                    "{ri} is not in [{REPORT_INTERVAL_S_MIN}, {REPORT_INTERVAL_S_MAX}] seconds"
                ),
            ));
        }
        if self.keys == 0 || self.keys > KEYS_MAX {
            return Err(bad(
                "keys",
                format!("{} is not in 1..={KEYS_MAX}", self.keys),
            ));
        }
        if self.preload_keys > self.keys {
            return Err(bad(
                "preload_keys",
                format!(
                    "{} is larger than the key space (`keys` = {})",
                    self.preload_keys, self.keys
                ),
            ));
        }
        if self.key_prefix.len() > KEY_PREFIX_BYTES_MAX {
            return Err(bad(
                "key_prefix",
                format!(
                    "{} bytes is longer than {KEY_PREFIX_BYTES_MAX}",
                    self.key_prefix.len()
                ),
            ));
        }
        if self.value_size_bytes == 0 || self.value_size_bytes > VALUE_SIZE_BYTES_MAX {
            return Err(bad(
                "value_size_bytes",
                format!(
                    "{} is not in 1..={VALUE_SIZE_BYTES_MAX}",
                    self.value_size_bytes
                ),
            ));
        }
        if self.scan_limit_rows == 0 || self.scan_limit_rows > SCAN_LIMIT_ROWS_MAX {
            return Err(bad(
                "scan_limit_rows",
                format!(
                    "{} is not in 1..={SCAN_LIMIT_ROWS_MAX}",
                    self.scan_limit_rows
                ),
            ));
        }
        if let Some([from, to]) = self.reclaim_window_s {
            if !(from.is_finite() && to.is_finite() && from > 0.0 && from < to) {
                return Err(bad(
                    "reclaim_window_s",
                    format!("[{from}, {to}] is not a window 0 < from < to seconds"),
                ));
            }
            if let Some(d) = self.duration_s.filter(|&d| to > d) {
                return Err(bad(
                    "reclaim_window_s",
                    format!("ends at {to} s, after the run's `duration_s` = {d} s"),
                ));
            }
        }
        let total = self.operations.total();
        if total == 0 {
            return Err(bad(
                "operations",
                "every weight is 0; give at least one of get, head, put, update, delete, scan a weight"
                    .into(),
            ));
        }
        if total > OPERATION_WEIGHTS_SUM_MAX {
            return Err(bad(
                "operations",
                format!("weights sum to {total}, more than {OPERATION_WEIGHTS_SUM_MAX}"),
            ));
        }
        Ok(())
    }

    /// Path used in errors for workloads built in memory.
    pub fn in_memory_path() -> PathBuf {
        PathBuf::from("<in-memory workload>")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Workload, BenchError> {
        Workload::from_toml_str(text, Path::new("w.toml"))
    }

    fn err(text: &str) -> String {
        match parse(text) {
            Ok(w) => panic!("accepted: {w:?}"),
            Err(e) => e.to_string(),
        }
    }

    const FULL: &str = r#"
        duration_s = 60
        op_count = 1_000_000
        concurrent = 4
        mode = "rate"
        rate_ops_per_s = 2000
        report_interval_s = 5
        seed = 42
        preload_keys = 1000
        keys = 100_000
        key_generator = "pareto"
        key_encoding = "decimal"
        key_prefix = "obj/"
        value_generator = "semi_compressible"
        value_size_bytes = 8192
        scan_limit_rows = 50

        [operations]
        get = 4
        head = 1
        put = 4
        update = 2
        delete = 1
        scan = 1
    "#;

    #[test]
    fn full_workload_parses() {
        let w = parse(FULL).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.duration_s, Some(60.0));
        assert_eq!(w.op_count, Some(1_000_000));
        assert_eq!(w.mode, Mode::Rate);
        assert_eq!(w.rate_ops_per_s, Some(2000.0));
        assert_eq!(w.key_generator, KeyGenerator::Pareto);
        assert_eq!(w.key_encoding, KeyEncoding::Decimal);
        assert_eq!(w.value_generator, ValueGenerator::SemiCompressible);
        assert_eq!(w.operations.total(), 13);
        assert_eq!(w.operations.enabled().len(), 6);
        // Round trip through the TOML echo.
        let again = parse(&w.to_toml_string()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, w);
    }

    #[test]
    fn minimal_workload_takes_defaults() {
        let w = parse("op_count = 10\n[operations]\nput = 1\n").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.concurrent, 1);
        assert_eq!(w.report_interval_s, 10.0);
        assert_eq!(w.mode, Mode::Max);
        assert_eq!(w.key_encoding, KeyEncoding::Be64);
        assert_eq!(w.duration_s, None);
        assert_eq!(w.seed, None);
    }

    #[test]
    fn reclaim_windows_are_checked_and_round_trip() {
        let w = parse("duration_s = 10\nreclaim_window_s = [5, 10]\n[operations]\nget = 1\n")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(w.reclaim_window_s, Some([5.0, 10.0]));
        let again = parse(&w.to_toml_string()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, w);
        for bad in ["[5, 5]", "[0, 4]", "[6, 2]", "[1, 11]", "[nan, 2]"] {
            let e = err(&format!(
                "duration_s = 10\nreclaim_window_s = {bad}\n[operations]\nget = 1\n"
            ));
            assert!(e.contains("reclaim_window_s"), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_fields_are_named() {
        let e = err("duration_s = 1\nconcurency = 2\n[operations]\nget = 1\n");
        assert!(e.contains("w.toml") && e.contains("concurency"), "{e}");
        let e = err("duration_s = 1\n[operations]\nget = 1\nfetch = 2\n");
        assert!(e.contains("fetch"), "{e}");
    }

    #[test]
    fn bad_types_and_enum_values_are_named() {
        let e = err("duration_s = 1\nconcurrent = \"four\"\n[operations]\nget = 1\n");
        assert!(e.contains("concurrent"), "{e}");
        let e = err("duration_s = 1\nkey_generator = \"zipf\"\n[operations]\nget = 1\n");
        assert!(e.contains("key_generator") && e.contains("zipf"), "{e}");
        let e = err("duration_s = 1\n");
        assert!(e.contains("operations"), "{e}");
        let e = err("duration_s = 1\n[operations]\nget = -1\n");
        assert!(e.contains("get"), "{e}");
    }

    #[test]
    fn bad_values_name_the_field() {
        let cases: &[(&str, &str)] = &[
            ("[operations]\nget = 1\n", "`duration_s`"),
            ("duration_s = 0\n[operations]\nget = 1\n", "`duration_s`"),
            ("op_count = 0\n[operations]\nget = 1\n", "`op_count`"),
            (
                "duration_s = 1\nconcurrent = 0\n[operations]\nget = 1\n",
                "`concurrent`",
            ),
            (
                "duration_s = 1\nmode = \"rate\"\n[operations]\nget = 1\n",
                "`rate_ops_per_s`",
            ),
            (
                "duration_s = 1\nrate_ops_per_s = 5.0\n[operations]\nget = 1\n",
                "`rate_ops_per_s`",
            ),
            (
                "duration_s = 1\nreport_interval_s = 0\n[operations]\nget = 1\n",
                "`report_interval_s`",
            ),
            (
                "duration_s = 1\nkeys = 0\n[operations]\nget = 1\n",
                "`keys`",
            ),
            (
                "duration_s = 1\nkeys = 10\npreload_keys = 11\n[operations]\nget = 1\n",
                "`preload_keys`",
            ),
            (
                "duration_s = 1\nvalue_size_bytes = 0\n[operations]\nget = 1\n",
                "`value_size_bytes`",
            ),
            (
                "duration_s = 1\nscan_limit_rows = 0\n[operations]\nscan = 1\n",
                "`scan_limit_rows`",
            ),
            ("duration_s = 1\n[operations]\nget = 0\n", "`operations`"),
        ];
        for (text, field) in cases {
            let e = err(text);
            assert!(e.contains(field), "{field} not named in: {e}");
        }
    }

    #[test]
    fn missing_file_is_an_io_error_naming_the_file() {
        let e = match Workload::load(Path::new("/no/such/workload.toml")) {
            Ok(_) => panic!("loaded a missing file"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("/no/such/workload.toml"), "{e}");
    }
}
