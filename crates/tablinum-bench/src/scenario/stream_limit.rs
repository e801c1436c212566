//! The CouchDB `stream_limit` report (apache/couchdb PR #2360, "Make the
//! rexi:stream2 interface unacked message limit configurable"), on
//! tablinum's coordinated index queries, with a fair grid beside it.
//!
//! The report: 1000 rows requested from a random `startkey` with `limit` in a
//! view of 10M documents, q ∈ {8, 32, 96, 192} shards, `stream_limit` 10
//! against 5; mean rows/s over 3-minute runs, std-dev %, the ratio to 10 and
//! its 3 std-dev %. Here:
//! - One cluster ([`framework::cluster`]: `tablinum up` as a child process on
//!   free ports, or `--cluster ADDR`). Per q a table `sl_q{q}` of `q` tablets
//!   (`Split::Even(q)`) holding [`FULL_ROWS`] rows (`--rows`): key = 8 bytes
//!   big-endian of [`splitmix64`]`(i)` (keys spread over every tablet), a
//!   16-byte value, and one term in index `v` = 8 bytes big-endian of
//!   `splitmix64(i ^ `[`TERM_SALT`]`)`: the index order is spread uniformly
//!   over the tablets, as CouchDB's hashed doc ids are over its shards.
//! - The query (a view query): index `v` from a random 8-byte start, `limit`
//!   [`LIMIT_ROWS`], keys only. Every tablet holds ~1000/q of the rows
//!   wanted, exactly the report's situation. Starts are drawn from the part
//!   of the term space that still has [`LIMIT_ROWS`] rows after it.
//! - The report's cells: `Fixed(5)`, `Fixed(10)`, `Fixed(100)` with one row
//!   per batch (`batch_rows = 1`: one row per message, as rexi sends view
//!   rows), and `Adaptive` with `batch_rows = 0` (the client sizes batches
//!   and windows from the query's need: `limit / q` rows per tablet).
//! - The fair grid: adaptive also batches rows, so part of what it gains
//!   over one row per message is batching. Fixed windows [`FAIR_WINDOWS`] ×
//!   batch rows [`FAIR_BATCH_ROWS`] (8, 32 and ⌈limit / q⌉, a tablet's share
//!   of the limit in one batch) are measured beside the report's cells, and
//!   adaptive is reported against the best fixed (window, batch rows) pair
//!   at every q, in rows/s and in rows sent per request ([`fair_of`]).
//! - Runs ([`framework::plan`]): per q (tables are loaded once each, then
//!   dropped), `R` repeats; within a repeat every cell once in a seeded
//!   shuffled order; each run a closed loop ([`framework::driver`]) of `C`
//!   client threads sharing one `Client`, a warm-up, then `T` measured
//!   seconds. rows/s = rows returned / measured seconds.
//! - Statistics ([`framework::stats`]): mean and sample std-dev over the
//!   repeats; the ratio to `stream_limit` 10 at the same q and its 3 std-dev
//!   in percent, `3·√(cv_a² + cv_b²)` (the report's own table: 0.12% and
//!   0.56% give its 1.718%).
//!
//! Owns the plan's cells ([`grid`]), the measured cell (one closed loop of
//! queries, [`StreamLimit`]), its data set ([`data`]), its tables and the
//! three targets it checks ([`table`], [`check_targets`]): (a) at q = 192 adaptive ≥ [`TARGET_RATIO_MIN`] ×
//! `stream_limit` 10; (b) at every q adaptive is not slower than the best of
//! the report's fixed limits by more than the 3 std-dev of their ratio; (c)
//! the fair grid: adaptive ≥ the best fixed (window, batch rows) pair at
//! every q within 3 std-dev, and at q = [`FAIR_SENT_Q`] it sends no more than
//! [`FAIR_SENT_RATIO_MAX`] × the rows the query needs. Unlike the volume
//! scenario it measures in its own process: the client — and so the
//! coordinator's merge, which is part of what is measured — runs here, the
//! cluster in its child process. It must never run two measured loops at
//! once, never keep a table it created beyond its q, and never change the
//! cluster's settings.

pub mod data;
pub mod table;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use tablinum_client::{Client, Durability, Error as ClientError, Query, Split};
use tablinum_stream::window::WindowMode;

use self::data::client_err;
use self::table::opt;
use super::framework::cluster::{with_cluster, ClusterArgs, ClusterInfo};
use super::framework::driver::{closed_loop, Counts};
use super::framework::output::{thousands, trim_float, ChartSpec, Report, SCENARIO_JSON};
use super::framework::plan::{Group, Interleave, Plan};
use super::framework::preset::{check_distinct, check_range, check_seconds, usage, Preset};
use super::framework::verdict::{targets_markdown, TargetCheck};
use super::framework::{self, RunAt, RunResult, Scenario};
use super::ChildCommand;
use crate::error::BenchError;
use crate::generators::BenchRng;

pub use self::data::{
    load, random_start, row_key, row_mutation, row_term, splitmix64, start_span, table_name,
    LoadRecord,
};
pub use self::table::{
    cells_of, cells_table, check_targets, fair_of, fair_table, scenario_chart, CellReport,
    FairComparison,
};
pub use super::framework::cluster::{CLUSTER_DATA_DIR, CLUSTER_LOG};
pub use super::framework::output::{README_MD, RUNS_CSV};
pub use super::framework::plan::shuffled;
pub use super::framework::verdict::Verdict;

/// The shard counts of the report (its q column).
pub const QS: [u32; 4] = [8, 32, 96, 192];
/// The stream limits: the report's 5 and 10, the thread's 100, and adaptive.
pub const STREAM_LIMITS: [WindowMode; 4] = [
    WindowMode::Fixed(5),
    WindowMode::Fixed(10),
    WindowMode::Fixed(100),
    WindowMode::Adaptive,
];
/// The limit the ratios are against (the report's default then).
pub const BASELINE_STREAM_LIMIT: u32 = 10;
/// Rows per request (the report's `limit`).
pub const LIMIT_ROWS: u64 = 1000;
/// Rows per batch of the report's fixed cells: one row per message, as rexi sends.
pub const FIXED_BATCH_ROWS: u32 = 1;
/// Rows per batch of the adaptive cell: 0, the client sizes batches from the
/// query's need.
pub const ADAPTIVE_BATCH_ROWS: u32 = 0;
/// Windows (batches) of the fair grid's fixed cells.
pub const FAIR_WINDOWS: [u32; 3] = [2, 5, 10];
/// Rows per batch of the fair grid's fixed cells.
pub const FAIR_BATCH_ROWS: [BatchRows; 3] =
    [BatchRows::Rows(8), BatchRows::Rows(32), BatchRows::Share];
/// Target (c): the q at which adaptive's rows sent per request are checked.
pub const FAIR_SENT_Q: u32 = 8;
/// Target (c): most rows adaptive may send per request at [`FAIR_SENT_Q`],
/// as a multiple of the rows the query needs ([`LIMIT_ROWS`]).
pub const FAIR_SENT_RATIO_MAX: f64 = 1.5;
/// Name of the secondary index the queries read.
pub const INDEX: &[u8] = b"v";
/// Bytes of every value.
pub const VALUE_BYTES: usize = 16;
/// Mixed into `i` before hashing it into the index term, so the term order
/// is independent of the key order (and so of the tablets).
pub const TERM_SALT: u64 = 0x5851_f42d_4c95_7f2d;
/// Mutations per `write_routed` call while loading.
pub const LOAD_CHUNK_ROWS: u64 = 2_000;
/// Threads writing chunks concurrently while loading.
pub const LOAD_WRITERS: u32 = 2;
/// Seconds between load progress lines.
pub const LOAD_PROGRESS_LINE_S: f64 = 10.0;
/// Default seed (PR #2360 was merged on 2020-01-08).
pub const SEED: u64 = 20_200_108;
/// Client threads of the closed loop (the research's 1–2 clients).
pub const CLIENTS: u32 = 2;
/// Most client threads accepted.
pub const CLIENTS_MAX: u32 = 256;
/// Most repeats accepted.
pub const REPEAT_MAX: u32 = 100;
/// Longest run accepted, seconds.
pub const DURATION_S_MAX: f64 = 3_600.0;

/// Rows per table in full mode (the research's 10M scaled to 2 cores).
pub const FULL_ROWS: u64 = 1_000_000;
/// Repeats in full mode (the research's "at least 10").
pub const FULL_REPEAT: u32 = 10;
/// Measured seconds per run in full mode.
pub const FULL_DURATION_S: f64 = 30.0;
/// Warm-up seconds per run in full mode.
pub const FULL_WARMUP_S: f64 = 5.0;
/// Rows per table with `--quick`: the full data set. Loading 1M rows takes
/// ~10 s per table here (release build, 2 cores).
pub const QUICK_ROWS: u64 = FULL_ROWS;
/// Repeats with `--quick`.
pub const QUICK_REPEAT: u32 = 3;
/// Measured seconds per run with `--quick`: the 10–13 cells per q of the
/// report's and the fair grid, 3 repeats, 4 q and the loads fit in about
/// 10 minutes.
pub const QUICK_DURATION_S: f64 = 3.0;
/// Warm-up seconds per run with `--quick`.
pub const QUICK_WARMUP_S: f64 = 0.5;

/// Target (a): q it is checked at.
pub const TARGET_Q: u32 = 192;
/// Target (a): adaptive rows/s over `stream_limit` 10 at [`TARGET_Q`].
pub const TARGET_RATIO_MIN: f64 = 1.5;

/// The chart of rows/s and rows sent per request against q.
pub const SCENARIO_PNG: &str = "scenario.png";
/// The header of [`RUNS_CSV`].
pub const RUNS_CSV_HEADER: &str = "q,stream_limit,batch_rows,repeat,position,sequence,clients,\
    elapsed_s,requests,errors,rows_returned,rows_per_sec,rows_sent_per_request,\
    rows_wasted_per_request,waits_per_request,stalls_per_request,retries,p50_us,p99_us,mean_us";
/// How the runs are ordered (recorded in `scenario.json`).
pub const RUN_ORDER: &str = "q in turn (each table loaded once, dropped after its runs); within \
    a q, repeats in turn; within a repeat, every cell (stream_limit × batch rows) once in a \
    seeded shuffled order; each run a warm-up, then the measured closed loop";
/// How the 3 std-dev of a ratio is computed (recorded in `scenario.json`).
pub const THREE_SD_METHOD: &str = "3·√(cv_a² + cv_b²) in percent of the ratio, cv = sample \
    std-dev / mean over the repeats (crate::compare::Ratio; the report's own method)";

/// What `--quick` and a full run differ in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StreamLimitShape {
    /// Rows per table.
    pub rows: u64,
    /// Repeats per cell.
    pub repeat: u32,
    /// Measured seconds per run.
    pub duration_s: f64,
    /// Warm-up seconds per run.
    pub warmup_s: f64,
}

/// The quick and full presets.
pub const PRESETS: Preset<StreamLimitShape> = Preset {
    quick: StreamLimitShape {
        rows: QUICK_ROWS,
        repeat: QUICK_REPEAT,
        duration_s: QUICK_DURATION_S,
        warmup_s: QUICK_WARMUP_S,
    },
    full: StreamLimitShape {
        rows: FULL_ROWS,
        repeat: FULL_REPEAT,
        duration_s: FULL_DURATION_S,
        warmup_s: FULL_WARMUP_S,
    },
};

/// `tablinum bench scenario stream-limit` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct StreamLimitArgs {
    /// Short runs (3 repeats of 0.5 s warm-up + 3 s; about 10 minutes on 2
    /// cores). Default: 10 repeats of 5 s warm-up + 30 s (about 5 hours).
    #[arg(long)]
    pub quick: bool,
    /// Output directory (scenario.json, runs.csv, README.md, scenario.png,
    /// cluster.log). Must not hold an earlier scenario.
    #[arg(long)]
    pub out: PathBuf,
    /// The cluster measured.
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// Rows per table (default 1,000,000).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Repeats per cell (default 3 with --quick, else 10).
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Measured seconds per run (default 3 with --quick, else 30).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Warm-up seconds before each run (default 0.5 with --quick, else 5; 0: none).
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Client threads of the closed loop, sharing one client.
    #[arg(long, default_value_t = CLIENTS)]
    pub clients: u32,
    /// Tablet counts, comma-separated (default 8,32,96,192).
    #[arg(long = "q", value_delimiter = ',')]
    pub q: Vec<u32>,
    /// The report's stream limits, comma-separated numbers or `adaptive`
    /// (default 5,10,100,adaptive).
    #[arg(long, value_delimiter = ',', value_parser = WindowMode::parse)]
    pub stream_limits: Vec<WindowMode>,
    /// Seed of the run order and of the query starts.
    #[arg(long, default_value_t = SEED)]
    pub seed: u64,
    /// Rows per batch of the report's fixed stream limits (the report's
    /// design is 1, one row per message; recorded in scenario.json).
    #[arg(long, default_value_t = FIXED_BATCH_ROWS)]
    pub fixed_batch_rows: u32,
    /// Windows (batches) of the fair grid's fixed cells, comma-separated
    /// (default 2,5,10).
    #[arg(long, value_delimiter = ',')]
    pub fair_windows: Vec<u32>,
    /// Rows per batch of the fair grid's fixed cells, comma-separated
    /// numbers or `share` (⌈limit / q⌉) (default 8,32,share).
    #[arg(long, value_delimiter = ',', value_parser = BatchRows::parse)]
    pub fair_batch_rows: Vec<BatchRows>,
    /// Only the report's cells: no fixed windows with batched rows.
    #[arg(long, conflicts_with_all = ["fair_windows", "fair_batch_rows"])]
    pub no_fair_grid: bool,
}

/// A cell's stream limit: a number in JSON, or the string `"adaptive"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CellLimit(pub WindowMode);

impl CellLimit {
    /// Rows per batch this cell's queries ask for, `fixed_batch_rows` for
    /// fixed limits ([`FIXED_BATCH_ROWS`] unless `--fixed-batch-rows`).
    pub fn batch_rows(self, fixed_batch_rows: u32) -> u32 {
        match self.0 {
            WindowMode::Fixed(_) => fixed_batch_rows,
            WindowMode::Adaptive => ADAPTIVE_BATCH_ROWS,
        }
    }

    /// The fixed limit, if any.
    pub fn fixed(self) -> Option<u32> {
        match self.0 {
            WindowMode::Fixed(n) => Some(n),
            WindowMode::Adaptive => None,
        }
    }
}

impl std::fmt::Display for CellLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            WindowMode::Fixed(n) => write!(f, "{n}"),
            WindowMode::Adaptive => f.write_str("adaptive"),
        }
    }
}

impl Serialize for CellLimit {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            WindowMode::Fixed(n) => s.serialize_u32(n),
            WindowMode::Adaptive => s.serialize_str("adaptive"),
        }
    }
}

impl<'de> Deserialize<'de> for CellLimit {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(CellLimit(WindowMode::Fixed(n))),
            Raw::Text(t) => WindowMode::parse(&t)
                .map(CellLimit)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Rows per batch of a fair-grid cell: a number, or a tablet's share of the
/// limit (`share`: ⌈limit / q⌉ rows, so one batch per tablet holds what the
/// query needs from it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BatchRows {
    /// This many rows.
    Rows(u32),
    /// ⌈[`LIMIT_ROWS`] / q⌉.
    Share,
}

impl BatchRows {
    /// `share` or a number of rows (at least 1).
    pub fn parse(s: &str) -> Result<BatchRows, String> {
        if s.trim().eq_ignore_ascii_case("share") {
            return Ok(BatchRows::Share);
        }
        match s.trim().parse::<u32>() {
            Ok(n) if n > 0 => Ok(BatchRows::Rows(n)),
            _ => Err(format!(
                "`{s}` is neither a number of rows (at least 1) nor `share`"
            )),
        }
    }

    /// The rows per batch at `q` tablets for queries of `limit` rows.
    pub fn rows_at(self, q: u32, limit: u64) -> u32 {
        match self {
            BatchRows::Rows(n) => n,
            BatchRows::Share => u32::try_from(limit.div_ceil(u64::from(q.max(1))))
                .unwrap_or(u32::MAX)
                .clamp(1, tablinum_proto::BATCH_ROWS_MAX),
        }
    }
}

impl std::fmt::Display for BatchRows {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BatchRows::Rows(n) => write!(f, "{n}"),
            BatchRows::Share => f.write_str("share"),
        }
    }
}

impl Serialize for BatchRows {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            BatchRows::Rows(n) => s.serialize_u32(*n),
            BatchRows::Share => s.serialize_str("share"),
        }
    }
}

impl<'de> Deserialize<'de> for BatchRows {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Number(u32),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => BatchRows::parse(&n.to_string()),
            Raw::Text(t) => BatchRows::parse(&t),
        }
        .map_err(serde::de::Error::custom)
    }
}

/// One cell of the plan at one q: a stream limit and the rows per batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// The stream limit (window of batches) or adaptive.
    pub stream_limit: CellLimit,
    /// Rows per batch asked for (0: sized by the client, adaptive).
    pub batch_rows: u32,
    /// One of the report's cells (`--stream-limits` with `--fixed-batch-rows`).
    pub report: bool,
    /// One of the fair grid's cells (adaptive is in both).
    pub fair: bool,
}

impl Cell {
    /// The same stream limit and rows per batch (whatever grid it is in).
    pub fn same(&self, limit: CellLimit, batch_rows: u32) -> bool {
        self.stream_limit == limit && self.batch_rows == batch_rows
    }
}

impl std::fmt::Display for Cell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.stream_limit.0 {
            WindowMode::Fixed(n) => write!(f, "stream_limit={n},batch_rows={}", self.batch_rows),
            WindowMode::Adaptive => f.write_str("stream_limit=adaptive"),
        }
    }
}

/// The checked plan of a scenario (the `parameters` of `scenario.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// Rows per table.
    pub rows: u64,
    /// Rows per request.
    pub limit_rows: u64,
    /// Repeats per cell.
    pub repeat: u32,
    /// Measured seconds per run.
    pub duration_s: f64,
    /// Warm-up seconds per run.
    pub warmup_s: f64,
    /// Client threads.
    pub clients: u32,
    /// Tablet counts, in run order.
    pub qs: Vec<u32>,
    /// The report's stream limits, in table order.
    pub stream_limits: Vec<CellLimit>,
    /// Rows per batch of the report's fixed cells.
    pub fixed_batch_rows: u32,
    /// Rows per batch of the adaptive cell (0: sized by the client).
    pub adaptive_batch_rows: u32,
    /// Windows of the fair grid's fixed cells (empty: no fair grid).
    #[serde(default)]
    pub fair_windows: Vec<u32>,
    /// Rows per batch of the fair grid's fixed cells.
    #[serde(default)]
    pub fair_batch_rows: Vec<BatchRows>,
    /// Target (c): q of the rows-sent check.
    #[serde(default)]
    pub fair_sent_q: u32,
    /// Target (c): most rows sent per request there, × `limit_rows`.
    #[serde(default)]
    pub fair_sent_ratio_max: f64,
    /// Index read by the queries.
    pub index: String,
    /// Queries return keys (and terms) only.
    pub keys_only: bool,
    /// Value bytes per row.
    pub value_bytes: usize,
    /// Mutations per write while loading.
    pub load_chunk_rows: u64,
    /// Durability of the tables.
    pub durability: String,
    /// Seed.
    pub seed: u64,
    /// How the runs were ordered.
    pub order: String,
    /// How the ratios' 3 std-dev is computed.
    pub three_sd_method: String,
}

/// Checks `args` and turns them into the plan.
pub fn parameters(args: &StreamLimitArgs) -> Result<Parameters, BenchError> {
    let preset = <StreamLimit as Scenario>::PRESETS.pick(args.quick);
    let rows = args.rows.unwrap_or(preset.rows);
    if rows == 0 {
        return Err(usage("--rows", "at least one row"));
    }
    let repeat = check_range(
        "--repeat",
        args.repeat.unwrap_or(preset.repeat),
        1,
        REPEAT_MAX,
    )?;
    let duration_s = check_seconds(
        "--duration-s",
        args.duration_s.unwrap_or(preset.duration_s),
        false,
        DURATION_S_MAX,
    )?;
    let warmup_s = check_seconds(
        "--warmup-s",
        args.warmup_s.unwrap_or(preset.warmup_s),
        true,
        DURATION_S_MAX,
    )?;
    check_range("--clients", args.clients, 1, CLIENTS_MAX)?;
    let qs = if args.q.is_empty() {
        QS.to_vec()
    } else {
        args.q.clone()
    };
    for &q in &qs {
        check_range("--q", q, 1, tablinum_proto::TABLETS_PER_TABLE_MAX)?;
    }
    check_distinct("--q", &qs)?;
    check_range(
        "--fixed-batch-rows",
        args.fixed_batch_rows,
        1,
        tablinum_proto::BATCH_ROWS_MAX,
    )?;
    let limits: Vec<CellLimit> = if args.stream_limits.is_empty() {
        STREAM_LIMITS.to_vec()
    } else {
        args.stream_limits.clone()
    }
    .into_iter()
    .map(CellLimit)
    .collect();
    check_distinct("--stream-limits", &limits)?;
    let (fair_windows, fair_batch_rows) = if args.no_fair_grid {
        (Vec::new(), Vec::new())
    } else {
        let w = if args.fair_windows.is_empty() {
            FAIR_WINDOWS.to_vec()
        } else {
            args.fair_windows.clone()
        };
        let b = if args.fair_batch_rows.is_empty() {
            FAIR_BATCH_ROWS.to_vec()
        } else {
            args.fair_batch_rows.clone()
        };
        (w, b)
    };
    for &w in &fair_windows {
        check_range(
            "--fair-windows",
            w,
            1,
            tablinum_stream::window::WINDOW_BATCHES_MAX,
        )?;
    }
    check_distinct("--fair-windows", &fair_windows)?;
    for &b in &fair_batch_rows {
        if let BatchRows::Rows(n) = b {
            check_range("--fair-batch-rows", n, 1, tablinum_proto::BATCH_ROWS_MAX)?;
        }
    }
    check_distinct("--fair-batch-rows", &fair_batch_rows)?;
    Ok(Parameters {
        rows,
        limit_rows: LIMIT_ROWS,
        repeat,
        duration_s,
        warmup_s,
        clients: args.clients,
        qs,
        stream_limits: limits,
        fixed_batch_rows: args.fixed_batch_rows,
        adaptive_batch_rows: ADAPTIVE_BATCH_ROWS,
        fair_windows,
        fair_batch_rows,
        fair_sent_q: FAIR_SENT_Q,
        fair_sent_ratio_max: FAIR_SENT_RATIO_MAX,
        index: String::from_utf8_lossy(INDEX).into_owned(),
        keys_only: true,
        value_bytes: VALUE_BYTES,
        load_chunk_rows: LOAD_CHUNK_ROWS,
        durability: "nosync".into(),
        seed: args.seed,
        order: RUN_ORDER.into(),
        three_sd_method: THREE_SD_METHOD.into(),
    })
}

/// The cells at `q`, in table order: the report's (`--stream-limits`), then
/// the fair grid's windows × batch rows not already among them.
pub fn grid(p: &Parameters, q: u32) -> Vec<Cell> {
    let mut cells: Vec<Cell> = p
        .stream_limits
        .iter()
        .map(|&l| Cell {
            stream_limit: l,
            batch_rows: l.batch_rows(p.fixed_batch_rows),
            report: true,
            fair: l.fixed().is_none(),
        })
        .collect();
    for &w in &p.fair_windows {
        for &b in &p.fair_batch_rows {
            let limit = CellLimit(WindowMode::Fixed(w));
            let rows = b.rows_at(q, p.limit_rows);
            match cells.iter_mut().find(|c| c.same(limit, rows)) {
                Some(c) => c.fair = true,
                None => cells.push(Cell {
                    stream_limit: limit,
                    batch_rows: rows,
                    report: false,
                    fair: true,
                }),
            }
        }
    }
    cells
}

/// The query of `cell` on `table` (its start is set per request).
pub fn cell_query(table: &str, cell: &Cell) -> Query {
    Query {
        table: table.to_string(),
        start: Vec::new(),
        end: Vec::new(),
        index: Some(INDEX.to_vec()),
        skip: 0,
        limit: LIMIT_ROWS,
        stream_limit: cell.stream_limit.0,
        batch_rows: cell.batch_rows,
        keys_only: true,
        consistency: tablinum_client::Consistency::Immediate,
        filter: None,
        window_bytes_max: 0,
    }
}

/// One measured run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Tablets.
    pub q: u32,
    /// The cell's stream limit.
    pub stream_limit: CellLimit,
    /// Rows per batch asked for.
    pub batch_rows: u32,
    /// Repeat, from 1.
    pub repeat: u32,
    /// Position within the repeat's shuffled order, from 1.
    pub position: usize,
    /// Position in the whole scenario, from 1.
    pub sequence: usize,
    /// Client threads.
    pub clients: u32,
    /// Measured seconds (until the last client's last request ended).
    pub elapsed_s: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Rows returned by successful requests.
    pub rows_returned: u64,
    /// Rows returned per second.
    pub rows_per_sec: f64,
    /// Rows the tablets sent that reached the client, per request.
    pub rows_sent_per_request: f64,
    /// Rows that reached the client and were thrown away at cancel, per request.
    pub rows_wasted_per_request: f64,
    /// Times the merge waited for a tablet, per request.
    pub waits_per_request: f64,
    /// Of those, waits after the tablet delivered its initial window (it
    /// ran dry while needed), per request.
    #[serde(default)]
    pub stalls_per_request: f64,
    /// Query retries after retryable failures.
    pub retries: u64,
    /// Request latency percentiles and mean, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
    /// Mean, µs.
    pub mean_us: f64,
    /// The first error message, if any request failed.
    pub first_error: Option<String>,
}

impl RunRecord {
    /// The run's line of [`RUNS_CSV`].
    pub fn csv_line(&self) -> String {
        format!(
            "{},{},{},{},{},{},{},{:.3},{},{},{},{:.1},{:.3},{:.3},{:.3},{:.3},{},{},{},{:.1}",
            self.q,
            self.stream_limit,
            self.batch_rows,
            self.repeat,
            self.position,
            self.sequence,
            self.clients,
            self.elapsed_s,
            self.requests,
            self.errors,
            self.rows_returned,
            self.rows_per_sec,
            self.rows_sent_per_request,
            self.rows_wasted_per_request,
            self.waits_per_request,
            self.stalls_per_request,
            self.retries,
            self.p50_us,
            self.p99_us,
            self.mean_us
        )
    }
}

impl RunResult for RunRecord {
    fn failed(&self) -> bool {
        self.errors > 0 || self.requests == 0
    }

    fn fatal(&self) -> Option<String> {
        (self.requests == 0).then(|| {
            format!(
                "no request succeeded ({})",
                self.first_error.as_deref().unwrap_or("no error reported")
            )
        })
    }

    fn line(&self) -> String {
        format!(
            "{} rows/s, {} req, {:.1} sent/req, {:.1} wasted/req, {:.1} waits/req, p50 {:.2} ms, \
             p99 {:.2} ms{}",
            thousands(self.rows_per_sec, 0),
            self.requests,
            self.rows_sent_per_request,
            self.rows_wasted_per_request,
            self.waits_per_request,
            self.p50_us as f64 / 1000.0,
            self.p99_us as f64 / 1000.0,
            self.first_error
                .as_ref()
                .map_or_else(String::new, |e| format!(
                    "; {} FAILED requests, first: {e}",
                    self.errors
                )),
        )
    }

    fn csv_line(&self) -> String {
        RunRecord::csv_line(self)
    }
}

/// The stream-limit scenario's own fields of `scenario.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamLimitBody {
    /// The cluster.
    pub cluster: ClusterInfo,
    /// The plan.
    pub parameters: Parameters,
    /// One per loaded table.
    pub loads: Vec<LoadRecord>,
    /// One per q × cell, the report's table.
    pub cells: Vec<CellReport>,
    /// Adaptive against the best fixed pair, one per q.
    #[serde(default)]
    pub fair: Vec<FairComparison>,
    /// The targets.
    pub targets: Vec<TargetCheck>,
    /// Every run, in run order.
    pub runs: Vec<RunRecord>,
}

/// `scenario.json` of the stream-limit scenario.
pub type StreamLimitReport = Report<StreamLimitBody>;

/// The stream-limit scenario against one cluster, ready to run.
pub struct StreamLimit {
    p: Parameters,
    quick: bool,
    client: Client,
    cluster: ClusterInfo,
    /// The cells of every q, in `p.qs` order.
    grid: Vec<Vec<Cell>>,
    /// Rows the last query start may still have after it.
    span: u64,
}

impl StreamLimit {
    /// The scenario of `p` against the cluster `cluster`, through `client`.
    pub fn new(p: Parameters, quick: bool, client: Client, cluster: ClusterInfo) -> StreamLimit {
        let grid = p.qs.iter().map(|&q| grid(&p, q)).collect();
        let span = start_span(p.rows, p.limit_rows);
        StreamLimit {
            p,
            quick,
            client,
            cluster,
            grid,
            span,
        }
    }

    fn all_cells(&self, runs: &[RunRecord]) -> Vec<CellReport> {
        self.p
            .qs
            .iter()
            .zip(&self.grid)
            .flat_map(|(&q, cells)| cells_of(q, cells, runs))
            .filter(|c| c.repeats > 0)
            .collect()
    }

    fn fair_line(body: &StreamLimitBody, q: u32) -> String {
        body.fair
            .iter()
            .find(|f| f.q == q)
            .map_or_else(String::new, |f| {
                format!(
                    "\nq={q}: adaptive {} rows/s, best fixed pair {} × {} {} rows/s (adaptive / \
                     best {:.3}{}); rows sent per request adaptive {:.1}, best pair {:.1}\n",
                    thousands(f.adaptive_rows_per_sec_mean, 0),
                    f.best_stream_limit,
                    f.best_batch_rows,
                    thousands(f.best_rows_per_sec_mean, 0),
                    f.ratio,
                    opt(f.ratio_three_sd_pct, |p| format!(", 3σ {p:.1}%")),
                    f.adaptive_rows_sent_per_request,
                    f.best_rows_sent_per_request,
                )
            })
    }
}

impl Scenario for StreamLimit {
    type Cell = Cell;
    type Run = RunRecord;
    type Body = StreamLimitBody;
    type Shape = StreamLimitShape;
    const PRESETS: Preset<StreamLimitShape> = PRESETS;

    fn name(&self) -> &'static str {
        "stream-limit"
    }

    fn title(&self) -> String {
        "stream_limit test (after apache/couchdb PR #2360)".into()
    }

    fn quick(&self) -> bool {
        self.quick
    }

    /// Per q its grid; repeats in turn, cells shuffled per repeat.
    fn plan(&self) -> Plan<Cell> {
        Plan {
            groups: self
                .p
                .qs
                .iter()
                .zip(&self.grid)
                .map(|(&q, cells)| Group {
                    name: format!("q={q}"),
                    key: u64::from(q),
                    cells: cells.clone(),
                })
                .collect(),
            repeat: self.p.repeat,
            interleave: Interleave::Shuffle { seed: self.p.seed },
        }
    }

    fn plan_words(&self) -> (&'static str, &'static str) {
        ("q", "cells")
    }

    fn run_estimate_s(&self) -> f64 {
        self.p.warmup_s + self.p.duration_s
    }

    fn body(&self) -> StreamLimitBody {
        StreamLimitBody {
            cluster: self.cluster.clone(),
            parameters: self.p.clone(),
            loads: Vec::new(),
            cells: Vec::new(),
            fair: Vec::new(),
            targets: Vec::new(),
            runs: Vec::new(),
        }
    }

    fn csv_header(&self) -> Option<&'static str> {
        Some(RUNS_CSV_HEADER)
    }

    fn announce(&self) -> Vec<String> {
        vec![format!(
            "plus loading {} rows into each of {} tables",
            thousands(self.p.rows as f64, 0),
            self.p.qs.len()
        )]
    }

    fn header_lines(&self, body: &StreamLimitBody) -> Vec<String> {
        let p = &body.parameters;
        let list = |v: Vec<String>| v.join(", ");
        let fair = if p.fair_windows.is_empty() {
            "none (`--no-fair-grid`)".to_string()
        } else {
            format!(
                "fixed windows {{{}}} × batch rows {{{}}} (share = ⌈limit / q⌉: {})",
                list(p.fair_windows.iter().map(ToString::to_string).collect()),
                list(p.fair_batch_rows.iter().map(ToString::to_string).collect()),
                list(
                    p.qs.iter()
                        .map(|&q| format!(
                            "{} at q = {q}",
                            BatchRows::Share.rows_at(q, p.limit_rows)
                        ))
                        .collect()
                ),
            )
        };
        let cells_per_q: Vec<String> = self.grid.iter().map(|g| g.len().to_string()).collect();
        vec![
            format!("cluster: {}", body.cluster.describe()),
            format!(
                "data: {} rows per table `sl_q<q>` (`Split::Even(q)`, {} tables), 8-byte hashed \
                 keys, {}-byte values, one hashed 8-byte term per row in index `{}`",
                thousands(p.rows as f64, 0),
                p.durability,
                p.value_bytes,
                p.index
            ),
            format!(
                "query: index `{}` from a random start, limit {}, keys only; the report's fixed \
                 stream limits send {} row(s) per batch ({}), adaptive sizes batches and windows \
                 from the query's need (`batch_rows` 0)",
                p.index,
                p.limit_rows,
                p.fixed_batch_rows,
                if p.fixed_batch_rows == FIXED_BATCH_ROWS {
                    "one row per message, as rexi"
                } else {
                    "**not** the report's one row per message: `--fixed-batch-rows`"
                },
            ),
            format!("fair grid: {fair}"),
            format!(
                "runs: {} repeats × {} cells per q ({} report stream limits plus the fair \
                 grid), each {} s warm-up + {} s measured, closed loop of {} client threads \
                 sharing one client; order: {}",
                p.repeat,
                cells_per_q.join("/"),
                p.stream_limits.len(),
                trim_float(p.warmup_s),
                trim_float(p.duration_s),
                p.clients,
                p.order,
            ),
            format!("ratio 3 std-dev: {}", p.three_sd_method),
        ]
    }

    /// Creates the q's table and loads it.
    fn begin_group(
        &mut self,
        group: &Group<Cell>,
        body: &mut StreamLimitBody,
    ) -> Result<(), BenchError> {
        let q = u32::try_from(group.key).unwrap_or(u32::MAX);
        let table = table_name(q);
        let addr = &self.cluster.addr;
        match self
            .client
            .create_table(&table, Split::Even(q), Durability::Nosync)
        {
            Ok(_) => {}
            Err(ClientError::AlreadyExists(m)) => {
                return Err(client_err(
                    "create table",
                    format!(
                        "table `{table}` already exists on {addr} ({m}): drop it first \
                         (`tablinum table drop {table} --cluster {addr}`)"
                    ),
                ))
            }
            Err(e) => return Err(client_err("create table", format!("{table}: {e}"))),
        }
        let l = load(&self.client, &table, q, self.p.rows)?;
        eprintln!(
            "loaded {} rows into {table} ({q} tablets) in {:.1} s ({} rows/s), flushed in {:.2} s",
            thousands(l.rows as f64, 0),
            l.load_s,
            thousands(l.rows_per_sec, 0),
            l.flush_s
        );
        body.loads.push(l);
        Ok(())
    }

    /// Drops the q's table.
    fn end_group(
        &mut self,
        group: &Group<Cell>,
        _body: &mut StreamLimitBody,
    ) -> Result<(), BenchError> {
        let table = table_name(u32::try_from(group.key).unwrap_or(u32::MAX));
        if let Err(e) = self.client.drop_table(&table) {
            eprintln!("warning: cannot drop {table}: {e}");
        }
        Ok(())
    }

    /// A warm-up loop, then the measured closed loop of the cell's query.
    fn measure(&mut self, at: &RunAt<'_, Cell>) -> Result<RunRecord, BenchError> {
        let q = self.p.qs[at.planned.group];
        let cell = at.cell;
        let query = cell_query(&table_name(q), cell);
        let sequence = at.planned.sequence;
        let run_seed = self.p.seed ^ (u64::from(q) << 40) ^ ((sequence as u64) << 8);
        let (client, span) = (&self.client, self.span);
        let request = |rng: &mut BenchRng, counts: &mut Counts| {
            let mut qr = query.clone();
            qr.start = random_start(rng, span);
            let st = client
                .query(&qr, &mut |row| {
                    std::hint::black_box(row);
                })
                .map_err(|e| e.to_string())?;
            counts.insert("rows_returned", st.rows_returned);
            counts.insert("rows_sent", st.rows_sent);
            counts.insert("rows_wasted", st.rows_wasted);
            counts.insert("waits", st.waits);
            counts.insert("stalls", st.stalls);
            counts.insert("retries", u64::from(st.retries));
            Ok(())
        };
        if self.p.warmup_s > 0.0 {
            let _ = closed_loop(self.p.clients, self.p.warmup_s, !run_seed, request);
        }
        let m = closed_loop(self.p.clients, self.p.duration_s, run_seed, request);
        Ok(RunRecord {
            q,
            stream_limit: cell.stream_limit,
            batch_rows: cell.batch_rows,
            repeat: at.planned.repeat,
            position: at.planned.position,
            sequence,
            clients: self.p.clients,
            elapsed_s: m.elapsed_s,
            requests: m.requests,
            errors: m.errors,
            rows_returned: m.count("rows_returned"),
            rows_per_sec: m.per_second("rows_returned"),
            rows_sent_per_request: m.per_request("rows_sent"),
            rows_wasted_per_request: m.per_request("rows_wasted"),
            waits_per_request: m.per_request("waits"),
            stalls_per_request: m.per_request("stalls"),
            retries: m.count("retries"),
            p50_us: m.latency_us.value_at_quantile(0.5),
            p99_us: m.latency_us.value_at_quantile(0.99),
            mean_us: m.latency_us.mean(),
            first_error: m.first_error,
        })
    }

    fn record(&mut self, body: &mut StreamLimitBody, _at: &RunAt<'_, Cell>, run: RunRecord) {
        body.runs.push(run);
        body.cells = self.all_cells(&body.runs);
        body.fair = self
            .p
            .qs
            .iter()
            .filter_map(|&q| fair_of(q, &body.cells, self.p.limit_rows))
            .collect();
        body.targets = check_targets(&body.cells, &self.p.qs, &self.p);
    }

    fn group_table(&self, body: &StreamLimitBody, group: &Group<Cell>) -> String {
        let q = u32::try_from(group.key).unwrap_or(u32::MAX);
        format!(
            "{}{}",
            cells_table(&cells_of(q, &group.cells, &body.runs)),
            Self::fair_line(body, q)
        )
    }

    fn summary(&self, body: &StreamLimitBody) -> String {
        format!(
            "## Results\n\n{}\n## Adaptive against the best fixed (window, batch rows) pair\n\n{}\n\
             ## Targets\n\n{}",
            cells_table(&body.cells),
            fair_table(&body.fair),
            targets_markdown(&body.targets)
        )
    }

    fn readme_tail(&self, body: &StreamLimitBody) -> String {
        let mut s = String::new();
        if !body.loads.is_empty() {
            s.push_str(
                "## Loads\n\n| q | rows | load s | rows/s | flush s |\n|---:|---:|---:|---:|---:|\n",
            );
            for l in &body.loads {
                s.push_str(&format!(
                    "| {} | {} | {:.1} | {} | {:.2} |\n",
                    l.q,
                    thousands(l.rows as f64, 0),
                    l.load_s,
                    thousands(l.rows_per_sec, 0),
                    l.flush_s
                ));
            }
            s.push('\n');
        }
        s.push_str(&format!(
            "## Files\n\n`{SCENARIO_JSON}` holds every number above with the per-repeat rows/s; \
             `{RUNS_CSV}` has one line per run; `{SCENARIO_PNG}` charts rows/s and rows sent per \
             request against q; `{CLUSTER_LOG}` is the started cluster's output.\n\
             \nrows/s is rows returned per measured second over all client threads; wasted rows \
             arrived at the client and were thrown away when the limit was met; sent rows is \
             every row that arrived; waits counts the merge blocking on a tablet's next batch. \
             The best fixed pair at a q is the fixed cell (report's or fair grid's) with the \
             highest mean rows/s there.\n"
        ));
        s
    }

    fn charts(&self, body: &StreamLimitBody) -> Vec<ChartSpec> {
        vec![scenario_chart(body)]
    }
}

/// Runs the scenario; the cluster is started with `child.program up`.
pub fn run(args: &StreamLimitArgs, child: &ChildCommand) -> Result<StreamLimitReport, BenchError> {
    let p = parameters(args)?;
    framework::output::claim_out_dir(&args.out)?;
    with_cluster(&args.cluster, &args.out, &child.program, |cluster| {
        let mut s = StreamLimit::new(p, args.quick, cluster.connect()?, cluster.info());
        framework::run(&mut s, &args.out, &child.invocation)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: StreamLimitArgs,
    }

    fn args(extra: &[&str]) -> StreamLimitArgs {
        let mut v = vec!["x", "--out", "/tmp/x"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v)
            .unwrap_or_else(|e| panic!("{e}"))
            .args
    }

    fn params(extra: &[&str]) -> Parameters {
        parameters(&args(extra)).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn defaults_are_the_reports_grid_and_the_fair_grid() {
        let p = params(&[]);
        assert_eq!(p.qs, QS);
        assert_eq!(
            p.stream_limits
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["5", "10", "100", "adaptive"]
        );
        assert_eq!(p.fair_windows, [2, 5, 10]);
        assert_eq!(
            p.fair_batch_rows
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["8", "32", "share"]
        );
        assert_eq!(
            (p.rows, p.repeat, p.duration_s, p.warmup_s),
            (FULL_ROWS, 10, 30.0, 5.0)
        );
        let p = params(&["--quick"]);
        assert_eq!(
            (p.rows, p.repeat, p.duration_s, p.warmup_s),
            (QUICK_ROWS, 3, 3.0, 0.5)
        );
        // The quick budget: at most 13 cells per q, 4 q, 3 repeats in under
        // 9.5 minutes, leaving a minute for the cluster and the four loads.
        const { assert!(13.0 * 4.0 * 3.0 * (QUICK_DURATION_S + QUICK_WARMUP_S) <= 570.0) };
        let p = params(&[
            "--q",
            "8,32",
            "--stream-limits",
            "10,adaptive",
            "--rows",
            "3000",
            "--repeat",
            "1",
            "--duration-s",
            "1",
            "--warmup-s",
            "0",
            "--clients",
            "1",
            "--no-fair-grid",
        ]);
        assert_eq!(p.qs, [8, 32]);
        assert_eq!(
            p.stream_limits,
            [
                CellLimit(WindowMode::Fixed(10)),
                CellLimit(WindowMode::Adaptive)
            ]
        );
        assert_eq!(
            (p.rows, p.repeat, p.duration_s, p.warmup_s, p.clients),
            (3000, 1, 1.0, 0.0, 1)
        );
        assert!(p.fair_windows.is_empty() && p.fair_batch_rows.is_empty());
        assert_eq!(grid(&p, 8).len(), 2);
    }

    #[test]
    fn the_fair_grid_adds_batched_windows_with_a_tablets_share() {
        let p = params(&[]);
        let at = |q: u32| -> Vec<String> {
            grid(&p, q)
                .iter()
                .map(|c| match c.stream_limit.fixed() {
                    Some(w) => format!("{w}x{}", c.batch_rows),
                    None => "adaptive".into(),
                })
                .collect()
        };
        assert_eq!(
            at(8),
            [
                "5x1", "10x1", "100x1", "adaptive", "2x8", "2x32", "2x125", "5x8", "5x32", "5x125",
                "10x8", "10x32", "10x125"
            ]
        );
        // ⌈1000 / 32⌉ = 32: at every window the share is the 32-row cell,
        // measured once.
        assert_eq!(at(32).len(), 10);
        assert!(at(32).contains(&"5x32".to_string()));
        assert!(at(96).contains(&"10x11".to_string()));
        assert!(at(192).contains(&"2x6".to_string()));
        let g = grid(&p, 8);
        assert!(g[0].report && !g[0].fair);
        assert!(g[3].report && g[3].fair, "adaptive is in both grids");
        assert!(!g[4].report && g[4].fair);
        assert_eq!(g[3].batch_rows, ADAPTIVE_BATCH_ROWS);
        // A report cell that is also a fair cell is measured once.
        let p = params(&["--fixed-batch-rows", "8"]);
        let g = grid(&p, 8);
        assert_eq!(g.len(), 11, "5 × 8 and 10 × 8 are in both grids");
        assert!(g[0].report && g[0].fair && g[0].batch_rows == 8);
        assert_eq!(BatchRows::Share.rows_at(1, 1000), 1000);
        assert_eq!(BatchRows::Share.rows_at(4096, 1000), 1);
        assert_eq!(g[1].to_string(), "stream_limit=10,batch_rows=8");
        assert_eq!(g[3].to_string(), "stream_limit=adaptive");
        let j = serde_json::to_value(&p).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j["fair_batch_rows"], serde_json::json!([8, 32, "share"]));
        let back: Parameters = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, p);
    }

    #[test]
    fn bad_arguments_are_refused_with_the_argument_named() {
        for (extra, needle) in [
            (&["--rows", "0"][..], "--rows"),
            (&["--repeat", "0"], "--repeat"),
            (&["--duration-s", "0"], "--duration-s"),
            (&["--warmup-s=-1"], "--warmup-s"),
            (&["--clients", "0"], "--clients"),
            (&["--q", "8,8"], "--q"),
            (&["--q", "0"], "--q"),
            (&["--stream-limits", "5,5"], "--stream-limits"),
            (&["--fixed-batch-rows", "0"], "--fixed-batch-rows"),
            (&["--fair-windows", "0"], "--fair-windows"),
            (&["--fair-windows", "2,2"], "--fair-windows"),
            (&["--fair-batch-rows", "20000"], "--fair-batch-rows"),
            (&["--fair-batch-rows", "share,share"], "--fair-batch-rows"),
        ] {
            match parameters(&args(extra)) {
                Ok(_) => panic!("accepted {extra:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{needle} not in {e}"),
            }
        }
        let mut v = vec!["x", "--out", "o", "--stream-limits", "0"];
        assert!(Cli::try_parse_from(&v).is_err());
        v[4] = "fast";
        assert!(Cli::try_parse_from(&v).is_err());
        v[3] = "--fair-batch-rows";
        assert!(Cli::try_parse_from(&v).is_err());
        assert!(
            Cli::try_parse_from(["x", "--out", "o", "--no-fair-grid", "--fair-windows", "2"])
                .is_err()
        );
        assert!(Cli::try_parse_from(["x", "--out", "o", "--cluster", "a:1", "--tls"]).is_err());
    }
}
