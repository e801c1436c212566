//! The CouchDB `stream_limit` report (apache/couchdb PR #2360, "Make the
//! rexi:stream2 interface unacked message limit configurable"), on
//! tablinum's coordinated index queries.
//!
//! The report: 1000 rows requested from a random `startkey` with `limit` in a
//! view of 10M documents, q ∈ {8, 32, 96, 192} shards, `stream_limit` 10
//! against 5; mean rows/s over 3-minute runs, std-dev %, the ratio to 10 and
//! its 3 std-dev %. Here:
//! - One cluster (`tablinum up` as a child process on free ports, or
//!   `--cluster ADDR`). Per q a table `sl_q{q}` of `q` tablets
//!   (`Split::Even(q)`) holding [`FULL_ROWS`] rows (`--rows`): key = 8 bytes
//!   big-endian of [`splitmix64`]`(i)` (keys spread over every tablet), a
//!   16-byte value, and one term in index `v` = 8 bytes big-endian of
//!   `splitmix64(i ^ `[`TERM_SALT`]`)`: the index order is spread uniformly
//!   over the tablets, as CouchDB's hashed doc ids are over its shards.
//! - The query (a view query): index `v` from a random 8-byte start, `limit`
//!   [`LIMIT_ROWS`], keys only. Every tablet holds ~1000/q of the rows
//!   wanted, exactly the report's situation. Starts are drawn from the part
//!   of the term space that still has [`LIMIT_ROWS`] rows after it.
//! - The cells: `Fixed(5)`, `Fixed(10)`, `Fixed(100)` with one row per batch
//!   (`batch_rows = 1`: one row per message, as rexi sends view rows), and
//!   `Adaptive` with `batch_rows = 0` (the client sizes batches and windows
//!   from the query's need: `limit / q` rows per tablet).
//! - Runs: per q (tables are loaded once each, then dropped), `R` repeats;
//!   within a repeat every cell once in a seeded shuffled order; each run a
//!   closed loop of `C` client threads sharing one `Client`, a warm-up, then
//!   `T` measured seconds. rows/s = rows returned / measured seconds.
//! - Statistics: mean and sample std-dev over the repeats; the ratio to
//!   `stream_limit` 10 at the same q and its 3 std-dev in percent,
//!   `3·√(cv_a² + cv_b²)`, the method of [`crate::compare::Ratio`] and of the
//!   report's own table (0.12% and 0.56% give its 1.718%).
//!
//! Owns the plan, the data set, the load, the closed loop, `scenario.json`,
//! `runs.csv`, `README.md` and the two targets it checks: (a) at q = 192
//! adaptive ≥ [`TARGET_RATIO_MIN`] × `stream_limit` 10; (b) at every q
//! adaptive is not slower than the best fixed limit by more than the 3
//! std-dev of their ratio. Unlike the volume scenario it measures in its own
//! process: the client — and so the coordinator's merge, which is part of
//! what is measured — runs here, the cluster in its child process. It must
//! never run two measured loops at once, never keep a table it created
//! beyond its q, and never change the cluster's settings.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::Histogram;
use rand::{RngExt, SeedableRng};
use serde::{Deserialize, Serialize};
use tablinum_client::{
    Client, ClientConfig, Durability, Error as ClientError, IndexTerm, Mutation, Query, Split,
};
use tablinum_stream::window::WindowMode;

use super::machine::{self, Machine};
use super::report::{thousands, trim_float};
use super::{ChildCommand, SCENARIO_JSON};
use crate::compare::{Ratio, Sample};
use crate::error::BenchError;
use crate::generators::BenchRng;
use crate::local_cluster::LocalCluster;
use crate::output;
use crate::progress::Progress;
use crate::stats::new_histogram;

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
/// Rows per batch of the fixed cells: one row per message, as rexi sends.
pub const FIXED_BATCH_ROWS: u32 = 1;
/// Rows per batch of the adaptive cell: 0, the client sizes batches from the
/// query's need.
pub const ADAPTIVE_BATCH_ROWS: u32 = 0;
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
/// ~10 s per table here (release build, 2 cores), so the four loads and the
/// 48 runs of 6 s fit in 10 minutes.
pub const QUICK_ROWS: u64 = FULL_ROWS;
/// Repeats with `--quick`.
pub const QUICK_REPEAT: u32 = 3;
/// Measured seconds per run with `--quick`.
pub const QUICK_DURATION_S: f64 = 5.0;
/// Warm-up seconds per run with `--quick`.
pub const QUICK_WARMUP_S: f64 = 1.0;

/// Target (a): q it is checked at.
pub const TARGET_Q: u32 = 192;
/// Target (a): adaptive rows/s over `stream_limit` 10 at [`TARGET_Q`].
pub const TARGET_RATIO_MIN: f64 = 1.5;

/// Raw per-run lines.
pub const RUNS_CSV: &str = "runs.csv";
/// The markdown report.
pub const README_MD: &str = "README.md";
/// The started cluster's data, inside `--out` unless `--dir`.
pub const CLUSTER_DATA_DIR: &str = "cluster-data";
/// The started cluster's output.
pub const CLUSTER_LOG: &str = "cluster.log";
/// The header of [`RUNS_CSV`].
pub const RUNS_CSV_HEADER: &str = "q,stream_limit,batch_rows,repeat,position,sequence,clients,\
    elapsed_s,requests,errors,rows_returned,rows_per_sec,rows_sent_per_request,\
    rows_wasted_per_request,waits_per_request,stalls_per_request,retries,p50_us,p99_us,mean_us";
/// How the runs are ordered (recorded in `scenario.json`).
pub const RUN_ORDER: &str = "q in turn (each table loaded once, dropped after its runs); within \
    a q, repeats in turn; within a repeat, every stream_limit once in a seeded shuffled order; \
    each run a warm-up, then the measured closed loop";
/// How the 3 std-dev of a ratio is computed (recorded in `scenario.json`).
pub const THREE_SD_METHOD: &str = "3·√(cv_a² + cv_b²) in percent of the ratio, cv = sample \
    std-dev / mean over the repeats (crate::compare::Ratio; the report's own method)";

/// `tablinum bench scenario stream-limit` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct StreamLimitArgs {
    /// Short runs (3 repeats of 1 s warm-up + 5 s; under 10 minutes on 2
    /// cores). Default: 10 repeats of 5 s warm-up + 30 s.
    #[arg(long)]
    pub quick: bool,
    /// Output directory (scenario.json, runs.csv, README.md, cluster.log).
    /// Must not hold an earlier scenario.
    #[arg(long)]
    pub out: PathBuf,
    /// Data directory of the started cluster (default OUT/cluster-data;
    /// removed at the end unless --keep-data). Must be empty or absent.
    #[arg(long, conflicts_with = "cluster")]
    pub dir: Option<PathBuf>,
    /// Keep the started cluster's data directory.
    #[arg(long)]
    pub keep_data: bool,
    /// Use the running cluster at this gRPC address instead of starting one
    /// (its tables `sl_q<q>` must not exist; they are dropped after use).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Rows per table (default 1,000,000).
    #[arg(long)]
    pub rows: Option<u64>,
    /// Repeats per cell (default 3 with --quick, else 10).
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Measured seconds per run (default 5 with --quick, else 30).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Warm-up seconds before each run (default 1 with --quick, else 5; 0: none).
    #[arg(long)]
    pub warmup_s: Option<f64>,
    /// Client threads of the closed loop, sharing one client.
    #[arg(long, default_value_t = CLIENTS)]
    pub clients: u32,
    /// Tablet counts, comma-separated (default 8,32,96,192).
    #[arg(long = "q", value_delimiter = ',')]
    pub q: Vec<u32>,
    /// Stream limits, comma-separated numbers or `adaptive` (default 5,10,100,adaptive).
    #[arg(long, value_delimiter = ',', value_parser = WindowMode::parse)]
    pub stream_limits: Vec<WindowMode>,
    /// Seed of the run order and of the query starts.
    #[arg(long, default_value_t = SEED)]
    pub seed: u64,
    /// Start the cluster with TLS on every listener (`tablinum up --tls`),
    /// to measure what TLS costs.
    #[arg(long, conflicts_with = "cluster")]
    pub tls: bool,
    /// Rows per batch of the fixed stream limits (the report's design is 1,
    /// one row per message; other values are for exploring what a window of
    /// batches could do, and are recorded in scenario.json).
    #[arg(long, default_value_t = FIXED_BATCH_ROWS)]
    pub fixed_batch_rows: u32,
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
    /// Stream limits, in table order.
    pub stream_limits: Vec<CellLimit>,
    /// Rows per batch of the fixed cells.
    pub fixed_batch_rows: u32,
    /// Rows per batch of the adaptive cell (0: sized by the client).
    pub adaptive_batch_rows: u32,
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

fn usage(arg: &'static str, reason: String) -> BenchError {
    BenchError::Usage { arg, reason }
}

/// Checks `args` and turns them into the plan.
pub fn parameters(args: &StreamLimitArgs) -> Result<Parameters, BenchError> {
    let rows = args
        .rows
        .unwrap_or(if args.quick { QUICK_ROWS } else { FULL_ROWS });
    if rows == 0 {
        return Err(usage("--rows", "at least one row".into()));
    }
    let repeat = args.repeat.unwrap_or(if args.quick {
        QUICK_REPEAT
    } else {
        FULL_REPEAT
    });
    if repeat == 0 || repeat > REPEAT_MAX {
        return Err(usage(
            "--repeat",
            format!("{repeat} is not in 1..={REPEAT_MAX}"),
        ));
    }
    let duration_s = args.duration_s.unwrap_or(if args.quick {
        QUICK_DURATION_S
    } else {
        FULL_DURATION_S
    });
    if !(duration_s.is_finite() && duration_s > 0.0 && duration_s <= DURATION_S_MAX) {
        return Err(usage(
            "--duration-s",
            format!("{duration_s} is not in (0, {DURATION_S_MAX}] seconds"),
        ));
    }
    let warmup_s = args.warmup_s.unwrap_or(if args.quick {
        QUICK_WARMUP_S
    } else {
        FULL_WARMUP_S
    });
    if !(warmup_s.is_finite() && (0.0..=DURATION_S_MAX).contains(&warmup_s)) {
        return Err(usage(
            "--warmup-s",
            format!("{warmup_s} is not in [0, {DURATION_S_MAX}] seconds"),
        ));
    }
    if args.clients == 0 || args.clients > CLIENTS_MAX {
        return Err(usage(
            "--clients",
            format!("{} is not in 1..={CLIENTS_MAX}", args.clients),
        ));
    }
    let qs = if args.q.is_empty() {
        QS.to_vec()
    } else {
        args.q.clone()
    };
    for (i, &q) in qs.iter().enumerate() {
        if q == 0 || q > tablinum_proto::TABLETS_PER_TABLE_MAX {
            return Err(usage(
                "--q",
                format!(
                    "{q} is not in 1..={}",
                    tablinum_proto::TABLETS_PER_TABLE_MAX
                ),
            ));
        }
        if qs[..i].contains(&q) {
            return Err(usage("--q", format!("{q} is listed twice")));
        }
    }
    if args.fixed_batch_rows == 0 || args.fixed_batch_rows > tablinum_proto::BATCH_ROWS_MAX {
        return Err(usage(
            "--fixed-batch-rows",
            format!(
                "{} is not in 1..={}",
                args.fixed_batch_rows,
                tablinum_proto::BATCH_ROWS_MAX
            ),
        ));
    }
    let limits = if args.stream_limits.is_empty() {
        STREAM_LIMITS.to_vec()
    } else {
        args.stream_limits.clone()
    };
    for (i, l) in limits.iter().enumerate() {
        if limits[..i].contains(l) {
            return Err(usage(
                "--stream-limits",
                format!("{} is listed twice", CellLimit(*l)),
            ));
        }
    }
    Ok(Parameters {
        rows,
        limit_rows: LIMIT_ROWS,
        repeat,
        duration_s,
        warmup_s,
        clients: args.clients,
        qs,
        stream_limits: limits.into_iter().map(CellLimit).collect(),
        fixed_batch_rows: args.fixed_batch_rows,
        adaptive_batch_rows: ADAPTIVE_BATCH_ROWS,
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

/// `items` in a seeded random order (Fisher–Yates).
pub fn shuffled<T: Clone>(items: &[T], seed: u64) -> Vec<T> {
    let mut v = items.to_vec();
    let mut rng = BenchRng::seed_from_u64(seed);
    for i in (1..v.len()).rev() {
        let j = rng.random_range(0..=i);
        v.swap(i, j);
    }
    v
}

/// The table of tablet count `q`.
pub fn table_name(q: u32) -> String {
    format!("sl_q{q}")
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

/// One cell (q × stream limit) over its repeats: a line of the report's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellReport {
    /// Tablets.
    pub q: u32,
    /// Stream limit: a number, or `"adaptive"`.
    pub stream_limit: CellLimit,
    /// Rows per batch asked for.
    pub batch_rows: u32,
    /// Repeats measured.
    pub repeats: usize,
    /// Mean rows/s over the repeats.
    pub rows_per_sec_mean: f64,
    /// Sample std-dev of rows/s, percent of the mean.
    pub rows_per_sec_stddev_pct: f64,
    /// rows/s of every repeat, in run order.
    pub rows_per_sec_values: Vec<f64>,
    /// Mean rows/s over that of `stream_limit` 10 at the same q (`None`
    /// without that cell).
    pub ratio_vs_10: Option<f64>,
    /// 3 std-dev of that ratio, percent (`None` without two repeats on both sides).
    pub ratio_vs_10_three_sd_pct: Option<f64>,
    /// Wasted rows per request (over every request of every repeat).
    pub wasted_rows_per_request: f64,
    /// Rows sent per request.
    pub rows_sent_per_request: f64,
    /// Merge waits per request.
    pub waits_per_request: f64,
    /// Merge stalls (waits after a tablet's initial window) per request.
    #[serde(default)]
    pub stalls_per_request: f64,
    /// Successful requests, all repeats.
    pub requests: u64,
    /// Failed requests, all repeats.
    pub errors: u64,
    /// Median request latency over every request of every repeat, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
}

/// Builds the cells of one q from its runs, in `limits` order.
pub fn cells_of(q: u32, limits: &[CellLimit], runs: &[RunRecord]) -> Vec<CellReport> {
    let of = |l: CellLimit| -> Vec<&RunRecord> {
        runs.iter()
            .filter(|r| r.q == q && r.stream_limit == l && r.requests > 0)
            .collect()
    };
    let sample =
        |rs: &[&RunRecord]| Sample::of(&rs.iter().map(|r| r.rows_per_sec).collect::<Vec<_>>());
    let baseline = of(CellLimit(WindowMode::Fixed(BASELINE_STREAM_LIMIT)));
    let base = (!baseline.is_empty()).then(|| sample(&baseline));
    limits
        .iter()
        .map(|&l| {
            let rs = of(l);
            let s = sample(&rs);
            let requests: u64 = rs.iter().map(|r| r.requests).sum();
            let per_request = |f: fn(&RunRecord) -> f64| {
                if requests == 0 {
                    0.0
                } else {
                    rs.iter().map(|r| f(r) * r.requests as f64).sum::<f64>() / requests as f64
                }
            };
            // Percentiles of all requests: the runs' request-weighted
            // percentiles are not kept, so take the medians' and p99s'
            // request-weighted means (runs of one cell are equally long).
            let weighted = |f: fn(&RunRecord) -> u64| {
                if requests == 0 {
                    0
                } else {
                    (rs.iter()
                        .map(|r| f(r) as f64 * r.requests as f64)
                        .sum::<f64>()
                        / requests as f64)
                        .round() as u64
                }
            };
            let ratio = base
                .as_ref()
                .filter(|b| b.mean > 0.0 && s.n > 0)
                .map(|b| Ratio::of(b, &s));
            let is_baseline = l.fixed() == Some(BASELINE_STREAM_LIMIT);
            CellReport {
                q,
                stream_limit: l,
                batch_rows: rs
                    .first()
                    .map_or(l.batch_rows(FIXED_BATCH_ROWS), |r| r.batch_rows),
                repeats: s.n,
                rows_per_sec_mean: s.mean,
                rows_per_sec_stddev_pct: s.cv() * 100.0,
                rows_per_sec_values: rs.iter().map(|r| r.rows_per_sec).collect(),
                ratio_vs_10: ratio.map(|r| r.ratio),
                ratio_vs_10_three_sd_pct: ratio
                    .filter(|_| !is_baseline)
                    .and_then(|r| r.three_sigma_pct),
                wasted_rows_per_request: per_request(|r| r.rows_wasted_per_request),
                rows_sent_per_request: per_request(|r| r.rows_sent_per_request),
                waits_per_request: per_request(|r| r.waits_per_request),
                stalls_per_request: per_request(|r| r.stalls_per_request),
                requests,
                errors: runs
                    .iter()
                    .filter(|r| r.q == q && r.stream_limit == l)
                    .map(|r| r.errors)
                    .sum(),
                p50_us: weighted(|r| r.p50_us),
                p99_us: weighted(|r| r.p99_us),
            }
        })
        .collect()
}

/// Whether a target was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Met.
    Met,
    /// Missed.
    Missed,
    /// Not evaluated (a cell it needs was not run).
    NotEvaluated,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Verdict::Met => "MET",
            Verdict::Missed => "MISSED",
            Verdict::NotEvaluated => "not evaluated",
        })
    }
}

/// One target's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// `a` or `b`.
    pub id: String,
    /// What it asks.
    pub description: String,
    /// Met or not.
    pub verdict: Verdict,
    /// The numbers behind the verdict.
    pub detail: String,
}

fn cell(cells: &[CellReport], q: u32, l: WindowMode) -> Option<&CellReport> {
    cells
        .iter()
        .find(|c| c.q == q && c.stream_limit.0 == l && c.repeats > 0)
}

/// The two targets, from the cells.
pub fn check_targets(cells: &[CellReport], qs: &[u32]) -> Vec<TargetCheck> {
    let a = {
        let description = format!(
            "at q={TARGET_Q} adaptive ≥ {TARGET_RATIO_MIN} × stream_limit {BASELINE_STREAM_LIMIT} in rows/s"
        );
        match (
            cell(cells, TARGET_Q, WindowMode::Adaptive),
            cell(cells, TARGET_Q, WindowMode::Fixed(BASELINE_STREAM_LIMIT)),
        ) {
            (Some(ad), Some(base)) if base.rows_per_sec_mean > 0.0 => {
                let r = ad.rows_per_sec_mean / base.rows_per_sec_mean;
                TargetCheck {
                    id: "a".into(),
                    description,
                    verdict: if r >= TARGET_RATIO_MIN {
                        Verdict::Met
                    } else {
                        Verdict::Missed
                    },
                    detail: format!(
                        "adaptive {} rows/s / stream_limit {BASELINE_STREAM_LIMIT} {} rows/s = {r:.3}",
                        thousands(ad.rows_per_sec_mean, 0),
                        thousands(base.rows_per_sec_mean, 0)
                    ),
                }
            }
            _ => TargetCheck {
                id: "a".into(),
                description,
                verdict: Verdict::NotEvaluated,
                detail: format!(
                    "needs q={TARGET_Q} with adaptive and {BASELINE_STREAM_LIMIT} measured"
                ),
            },
        }
    };
    let description = "at every q adaptive is not slower than the best fixed stream_limit by \
                       more than the 3 std-dev of their ratio"
        .to_string();
    let mut verdict = Verdict::Met;
    let mut details = Vec::new();
    let mut evaluated = 0;
    for &q in qs {
        let best = cells
            .iter()
            .filter(|c| c.q == q && c.stream_limit.fixed().is_some() && c.repeats > 0)
            .max_by(|x, y| x.rows_per_sec_mean.total_cmp(&y.rows_per_sec_mean));
        let (Some(ad), Some(best)) = (cell(cells, q, WindowMode::Adaptive), best) else {
            details.push(format!("q={q}: not evaluated"));
            continue;
        };
        evaluated += 1;
        let sample = |c: &CellReport| Sample::of(&c.rows_per_sec_values);
        let r = Ratio::of(&sample(best), &sample(ad));
        let slower_pct = (1.0 - r.ratio) * 100.0;
        let ok = match r.three_sigma_pct {
            Some(band) => slower_pct <= band,
            None => r.ratio >= 1.0,
        };
        if !ok {
            verdict = Verdict::Missed;
        }
        details.push(format!(
            "q={q}: adaptive / best fixed ({}) = {:.3}{} {}",
            best.stream_limit,
            r.ratio,
            r.three_sigma_pct.map_or_else(
                || " (no 3σ band: one repeat)".to_string(),
                |b| format!(" (3σ {b:.1}%)")
            ),
            if ok { "ok" } else { "SLOWER" }
        ));
    }
    if evaluated == 0 {
        verdict = Verdict::NotEvaluated;
    }
    vec![
        a,
        TargetCheck {
            id: "b".into(),
            description,
            verdict,
            detail: details.join("; "),
        },
    ]
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

/// Where the cluster was.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// gRPC address.
    pub addr: String,
    /// Started by the scenario (`tablinum up`), else given with `--cluster`.
    pub started_here: bool,
    /// Data directory of a started cluster.
    pub data_dir: Option<PathBuf>,
    /// Log of a started cluster.
    pub log: Option<PathBuf>,
    /// The cluster speaks TLS (`--tls`).
    #[serde(default)]
    pub tls: bool,
}

/// `scenario.json` of the stream-limit scenario.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StreamLimitReport {
    /// `stream-limit`.
    pub scenario: String,
    /// Title.
    pub title: String,
    /// `--quick`.
    pub quick: bool,
    /// `false` until every run is done.
    pub complete: bool,
    /// The exact command, quoted for a shell.
    pub command_line: String,
    /// The exact command, argument by argument.
    pub args: Vec<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC.
    pub finished_at: Option<String>,
    /// Wall-clock seconds so far.
    pub wall_s: f64,
    /// `git rev-parse HEAD` where the command ran.
    pub git_commit: Option<String>,
    /// The machine.
    pub machine: Machine,
    /// The cluster.
    pub cluster: ClusterInfo,
    /// The plan.
    pub parameters: Parameters,
    /// Runs planned.
    pub runs_total: usize,
    /// Runs done.
    pub runs_done: usize,
    /// Runs with failed requests (or none successful).
    pub runs_failed: usize,
    /// One per loaded table.
    pub loads: Vec<LoadRecord>,
    /// One per q × stream limit, the report's table.
    pub cells: Vec<CellReport>,
    /// The two targets.
    pub targets: Vec<TargetCheck>,
    /// Every run, in run order.
    pub runs: Vec<RunRecord>,
}

impl StreamLimitReport {
    /// Reads `scenario.json` back from a scenario's output directory.
    pub fn load(out: &Path) -> Result<StreamLimitReport, BenchError> {
        let path = out.join(SCENARIO_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, "read", e))?;
        serde_json::from_str(&text).map_err(|e| BenchError::Json {
            file: path,
            message: e.to_string(),
        })
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "—".to_string(), f)
}

/// The report's table for `cells` (markdown).
pub fn cells_table(cells: &[CellReport]) -> String {
    let mut t = String::from(
        "| q | stream_limit | batch rows | mean rows/s | std-dev % | ratio vs 10 | 3 std-dev % \
         | wasted rows/req | sent rows/req | waits/req | p50 ms | p99 ms | requests |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in cells {
        let batch = if c.batch_rows == 0 {
            "auto".to_string()
        } else {
            c.batch_rows.to_string()
        };
        t.push_str(&format!(
            "| {} | {} | {batch} | {} | {:.2} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {}{} |\n",
            c.q,
            c.stream_limit,
            thousands(c.rows_per_sec_mean, 1),
            c.rows_per_sec_stddev_pct,
            opt(c.ratio_vs_10, |r| format!("{r:.3}")),
            opt(c.ratio_vs_10_three_sd_pct, |p| format!("{p:.2}")),
            c.wasted_rows_per_request,
            c.rows_sent_per_request,
            c.waits_per_request,
            c.p50_us as f64 / 1000.0,
            c.p99_us as f64 / 1000.0,
            c.requests,
            if c.errors > 0 {
                format!(" ({} failed)", c.errors)
            } else {
                String::new()
            }
        ));
    }
    t
}

fn targets_markdown(targets: &[TargetCheck]) -> String {
    targets
        .iter()
        .map(|t| {
            format!(
                "- ({}) {}: **{}** — {}\n",
                t.id, t.description, t.verdict, t.detail
            )
        })
        .collect()
}

fn header_markdown(r: &StreamLimitReport) -> String {
    let p = &r.parameters;
    let cluster = if r.cluster.started_here {
        format!(
            "`tablinum up` started by the scenario at {} (data {}, log {})",
            r.cluster.addr,
            r.cluster
                .data_dir
                .as_ref()
                .map_or_else(|| "?".into(), |d| d.display().to_string()),
            r.cluster
                .log
                .as_ref()
                .map_or_else(|| "?".into(), |d| d.display().to_string()),
        )
    } else {
        format!("running cluster at {} (`--cluster`)", r.cluster.addr)
    };
    format!(
        "```sh\n{}\n```\n\n- started {}\n- machine: {}\n- git commit: {}\n- cluster: {cluster}\n\
         - data: {} rows per table `sl_q<q>` (`Split::Even(q)`, {} tables), 8-byte hashed keys, \
         {}-byte values, one hashed 8-byte term per row in index `{}`\n\
         - query: index `{}` from a random start, limit {}, keys only; fixed stream limits send \
         {} row(s) per batch ({}), adaptive sizes batches and windows from the query's need \
         (`batch_rows` 0)\n\
         - runs: {} repeats × {} stream limits per q, each {} s warm-up + {} s measured, closed \
         loop of {} client threads sharing one client; order: {}\n\
         - ratio 3 std-dev: {}\n",
        r.command_line,
        r.started_at,
        r.machine.describe(),
        r.git_commit.as_deref().unwrap_or("unknown"),
        thousands(p.rows as f64, 0),
        p.durability,
        p.value_bytes,
        p.index,
        p.index,
        p.limit_rows,
        p.fixed_batch_rows,
        if p.fixed_batch_rows == FIXED_BATCH_ROWS {
            "one row per message, as rexi"
        } else {
            "**not** the report's one row per message: `--fixed-batch-rows`"
        },
        p.repeat,
        p.stream_limits.len(),
        trim_float(p.warmup_s),
        trim_float(p.duration_s),
        p.clients,
        p.order,
        p.three_sd_method,
    )
}

/// The whole report as markdown (README.md and the end of stdout).
pub fn render_markdown(r: &StreamLimitReport) -> String {
    let mut s = format!("# {}\n\n{}", r.title, header_markdown(r));
    s.push_str("\n## Results\n\n");
    s.push_str(&cells_table(&r.cells));
    s.push_str("\n## Targets\n\n");
    s.push_str(&targets_markdown(&r.targets));
    if !r.loads.is_empty() {
        s.push_str(
            "\n## Loads\n\n| q | rows | load s | rows/s | flush s |\n|---:|---:|---:|---:|---:|\n",
        );
        for l in &r.loads {
            s.push_str(&format!(
                "| {} | {} | {:.1} | {} | {:.2} |\n",
                l.q,
                thousands(l.rows as f64, 0),
                l.load_s,
                thousands(l.rows_per_sec, 0),
                l.flush_s
            ));
        }
    }
    s.push_str(&format!(
        "\n## Files\n\n`{SCENARIO_JSON}` holds every number above with the per-repeat rows/s; \
         `{RUNS_CSV}` has one line per run; `{CLUSTER_LOG}` is the started cluster's output.\n\
         \nrows/s is rows returned per measured second over all client threads; wasted rows \
         arrived at the client and were thrown away when the limit was met; sent rows is \
         every row that arrived; waits counts the merge blocking on a tablet's next batch.\n"
    ));
    s
}

fn save_json(out: &Path, report: &StreamLimitReport) -> Result<(), BenchError> {
    let path = out.join(SCENARIO_JSON);
    let text = serde_json::to_string_pretty(report).map_err(|e| BenchError::Json {
        file: path.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(|e| BenchError::io(&path, "write", e))
}

fn minutes(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

fn client_err(action: &'static str, e: impl std::fmt::Display) -> BenchError {
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

/// What a closed loop measured.
#[derive(Debug, Clone)]
pub struct LoopResult {
    /// Seconds from the start until the last request ended.
    pub elapsed_s: f64,
    /// Successful requests.
    pub requests: u64,
    /// Failed requests.
    pub errors: u64,
    /// Rows returned.
    pub rows_returned: u64,
    /// Rows that arrived.
    pub rows_sent: u64,
    /// Rows thrown away.
    pub rows_wasted: u64,
    /// Merge waits.
    pub waits: u64,
    /// Merge stalls.
    pub stalls: u64,
    /// Retries.
    pub retries: u64,
    /// Latency of successful requests, µs.
    pub latency_us: Histogram<u64>,
    /// The first error.
    pub first_error: Option<String>,
}

impl LoopResult {
    fn empty() -> LoopResult {
        LoopResult {
            elapsed_s: 0.0,
            requests: 0,
            errors: 0,
            rows_returned: 0,
            rows_sent: 0,
            rows_wasted: 0,
            waits: 0,
            stalls: 0,
            retries: 0,
            latency_us: new_histogram(),
            first_error: None,
        }
    }

    fn add(&mut self, o: LoopResult) {
        self.requests += o.requests;
        self.errors += o.errors;
        self.rows_returned += o.rows_returned;
        self.rows_sent += o.rows_sent;
        self.rows_wasted += o.rows_wasted;
        self.waits += o.waits;
        self.stalls += o.stalls;
        self.retries += o.retries;
        // Same shape on both sides: cannot fail.
        let _ = self.latency_us.add(&o.latency_us);
        if self.first_error.is_none() {
            self.first_error = o.first_error;
        }
    }
}

/// Runs `base` (with random starts in `[0, span]`) in a closed loop of
/// `clients` threads for `seconds`.
pub fn closed_loop(
    client: &Client,
    base: &Query,
    span: u64,
    clients: u32,
    seconds: f64,
    seed: u64,
) -> LoopResult {
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(seconds);
    let mut total = LoopResult::empty();
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..clients)
            .map(|w| {
                s.spawn(move || {
                    let mut rng = crate::generators::worker_rng(seed, u64::from(w));
                    let mut r = LoopResult::empty();
                    let mut q = base.clone();
                    while Instant::now() < deadline {
                        q.start = random_start(&mut rng, span);
                        let t = Instant::now();
                        match client.query(&q, &mut |row| {
                            std::hint::black_box(row);
                        }) {
                            Ok(st) => {
                                let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
                                r.latency_us.saturating_record(us.max(1));
                                r.requests += 1;
                                r.rows_returned += st.rows_returned;
                                r.rows_sent += st.rows_sent;
                                r.rows_wasted += st.rows_wasted;
                                r.waits += st.waits;
                                r.stalls += st.stalls;
                                r.retries += u64::from(st.retries);
                            }
                            Err(e) => {
                                r.errors += 1;
                                if r.first_error.is_none() {
                                    r.first_error = Some(e.to_string());
                                }
                            }
                        }
                    }
                    r
                })
            })
            .collect();
        for w in workers {
            match w.join() {
                Ok(r) => total.add(r),
                Err(_) => {
                    total.errors += 1;
                    total
                        .first_error
                        .get_or_insert_with(|| "a client thread panicked".into());
                }
            }
        }
    });
    total.elapsed_s = t0.elapsed().as_secs_f64();
    total
}

/// The query of one cell on `table`.
pub fn cell_query(table: &str, limit: CellLimit, fixed_batch_rows: u32) -> Query {
    Query {
        table: table.to_string(),
        start: Vec::new(),
        end: Vec::new(),
        index: Some(INDEX.to_vec()),
        skip: 0,
        limit: LIMIT_ROWS,
        stream_limit: limit.0,
        batch_rows: limit.batch_rows(fixed_batch_rows),
        keys_only: true,
        consistency: tablinum_client::Consistency::Immediate,
        filter: None,
    }
}

/// The cluster in use: started here, or someone else's.
enum ClusterHandle {
    Started(LocalCluster, PathBuf),
    Given(String),
}

impl ClusterHandle {
    fn addr(&self) -> &str {
        match self {
            ClusterHandle::Started(c, _) => c.addr(),
            ClusterHandle::Given(a) => a,
        }
    }
}

/// Runs the scenario; the cluster is started with `child.program up`.
pub fn run(args: &StreamLimitArgs, child: &ChildCommand) -> Result<StreamLimitReport, BenchError> {
    let p = parameters(args)?;
    let out = &args.out;
    if out.join(SCENARIO_JSON).exists() {
        return Err(usage(
            "--out",
            format!(
                "{} already holds a scenario ({SCENARIO_JSON}); choose a new directory",
                out.display()
            ),
        ));
    }
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, "create output directory", e))?;
    let started = Instant::now();

    let cluster = match &args.cluster {
        Some(addr) => ClusterHandle::Given(addr.clone()),
        None => {
            let data = args
                .dir
                .clone()
                .unwrap_or_else(|| out.join(CLUSTER_DATA_DIR));
            if args.dir.is_none() && data.exists() {
                // Ours (`--out` holds no earlier scenario.json): a leftover.
                std::fs::remove_dir_all(&data)
                    .map_err(|e| BenchError::io(&data, "remove stale cluster data", e))?;
            }
            if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
                return Err(usage(
                    "--dir",
                    format!(
                        "{} is not empty: the cluster needs a fresh directory",
                        data.display()
                    ),
                ));
            }
            eprintln!(
                "starting the cluster (`{} up`, data in {})",
                child.program.display(),
                data.display()
            );
            let c = LocalCluster::start(&child.program, &data, &out.join(CLUSTER_LOG), args.tls)?;
            ClusterHandle::Started(c, data)
        }
    };
    let result = run_on(args, child, &p, &cluster, started);
    let stopped = match &cluster {
        ClusterHandle::Started(c, _) => c.stop(),
        ClusterHandle::Given(_) => Ok(()),
    };
    if let ClusterHandle::Started(_, data) = &cluster {
        if !args.keep_data && data.exists() {
            if let Err(e) = std::fs::remove_dir_all(data) {
                eprintln!("warning: cannot remove {}: {e}", data.display());
            }
        }
    }
    let report = result?;
    stopped?;
    Ok(report)
}

fn run_on(
    args: &StreamLimitArgs,
    child: &ChildCommand,
    p: &Parameters,
    cluster: &ClusterHandle,
    started: Instant,
) -> Result<StreamLimitReport, BenchError> {
    let out = &args.out;
    let addr = cluster.addr().to_string();
    let credential = match cluster {
        ClusterHandle::Started(c, _) => Some(c.credential()?),
        ClusterHandle::Given(a) => crate::local_cluster::credential_for(a)?,
    };
    let tls = match cluster {
        ClusterHandle::Started(c, _) => c.client_tls()?,
        ClusterHandle::Given(_) => None,
    };
    let client = Client::connect_with(
        &addr,
        ClientConfig {
            tls,
            ..ClientConfig::with_credential(credential)
        },
    )
    .map_err(|e| client_err("connect", e))?;
    let runs_total = p.qs.len() * p.stream_limits.len() * p.repeat as usize;
    let mut report = StreamLimitReport {
        scenario: "stream-limit".into(),
        title: "stream_limit test (after apache/couchdb PR #2360)".into(),
        quick: args.quick,
        complete: false,
        command_line: machine::command_line(&child.invocation),
        args: child.invocation.clone(),
        started_at: output::rfc3339_utc(SystemTime::now()),
        finished_at: None,
        wall_s: 0.0,
        git_commit: machine::git_commit(),
        machine: Machine::current(),
        cluster: ClusterInfo {
            addr: addr.clone(),
            started_here: matches!(cluster, ClusterHandle::Started(..)),
            data_dir: match cluster {
                ClusterHandle::Started(_, d) => Some(d.clone()),
                ClusterHandle::Given(_) => None,
            },
            log: match cluster {
                ClusterHandle::Started(c, _) => Some(c.log_path().to_path_buf()),
                ClusterHandle::Given(_) => None,
            },
            tls: args.tls,
        },
        parameters: p.clone(),
        runs_total,
        runs_done: 0,
        runs_failed: 0,
        loads: Vec::new(),
        cells: Vec::new(),
        targets: Vec::new(),
        runs: Vec::new(),
    };
    save_json(out, &report)?;
    let csv_path = out.join(RUNS_CSV);
    let mut csv = File::create(&csv_path).map_err(|e| BenchError::io(&csv_path, "create", e))?;
    writeln!(csv, "{RUNS_CSV_HEADER}").map_err(|e| BenchError::io(&csv_path, "write", e))?;
    drop(csv);

    let per_run_s = p.warmup_s + p.duration_s;
    eprintln!(
        "scenario stream-limit: {} q × {} stream limits × {} repeats = {runs_total} runs of {} s \
         (~{} plus loading {} rows {} times); results in {}",
        p.qs.len(),
        p.stream_limits.len(),
        p.repeat,
        trim_float(per_run_s),
        minutes(runs_total as f64 * per_run_s),
        thousands(p.rows as f64, 0),
        p.qs.len(),
        out.display()
    );
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the runs: results go to files anyway.
    let _ = write!(
        stdout,
        "# {}\n\n{}\n",
        report.title,
        header_markdown(&report)
    );
    let _ = stdout.flush();

    let span = start_span(p.rows, p.limit_rows);
    let mut sequence = 0;
    for &q in &p.qs {
        let table = table_name(q);
        match client.create_table(&table, Split::Even(q), Durability::Nosync) {
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
        let l = load(&client, &table, q, p.rows)?;
        eprintln!(
            "loaded {} rows into {table} ({q} tablets) in {:.1} s ({} rows/s), flushed in {:.2} s",
            thousands(l.rows as f64, 0),
            l.load_s,
            thousands(l.rows_per_sec, 0),
            l.flush_s
        );
        report.loads.push(l);
        for repeat in 1..=p.repeat {
            let order = shuffled(
                &p.stream_limits,
                p.seed ^ (u64::from(q) << 32) ^ u64::from(repeat),
            );
            for (pos, &limit) in order.iter().enumerate() {
                sequence += 1;
                let query = cell_query(&table, limit, p.fixed_batch_rows);
                let run_seed = p.seed ^ (u64::from(q) << 40) ^ ((sequence as u64) << 8);
                if p.warmup_s > 0.0 {
                    let _ = closed_loop(&client, &query, span, p.clients, p.warmup_s, !run_seed);
                }
                let m = closed_loop(&client, &query, span, p.clients, p.duration_s, run_seed);
                let per_req = |x: u64| {
                    if m.requests == 0 {
                        0.0
                    } else {
                        x as f64 / m.requests as f64
                    }
                };
                let rec = RunRecord {
                    q,
                    stream_limit: limit,
                    batch_rows: limit.batch_rows(p.fixed_batch_rows),
                    repeat,
                    position: pos + 1,
                    sequence,
                    clients: p.clients,
                    elapsed_s: m.elapsed_s,
                    requests: m.requests,
                    errors: m.errors,
                    rows_returned: m.rows_returned,
                    rows_per_sec: m.rows_returned as f64 / m.elapsed_s.max(f64::MIN_POSITIVE),
                    rows_sent_per_request: per_req(m.rows_sent),
                    rows_wasted_per_request: per_req(m.rows_wasted),
                    waits_per_request: per_req(m.waits),
                    stalls_per_request: per_req(m.stalls),
                    retries: m.retries,
                    p50_us: m.latency_us.value_at_quantile(0.5),
                    p99_us: m.latency_us.value_at_quantile(0.99),
                    mean_us: m.latency_us.mean(),
                    first_error: m.first_error.clone(),
                };
                let mut f = OpenOptions::new()
                    .append(true)
                    .open(&csv_path)
                    .map_err(|e| BenchError::io(&csv_path, "open", e))?;
                writeln!(f, "{}", rec.csv_line())
                    .map_err(|e| BenchError::io(&csv_path, "write", e))?;
                let failed = rec.errors > 0 || rec.requests == 0;
                eprintln!(
                    "[{sequence:>w$}/{runs_total}] q={q} r{repeat} stream_limit={limit}: {} rows/s, \
                     {} req, {:.1} sent/req, {:.1} wasted/req, {:.1} waits/req, p50 {:.2} ms, p99 \
                     {:.2} ms{}; scenario {}",
                    thousands(rec.rows_per_sec, 0),
                    rec.requests,
                    rec.rows_sent_per_request,
                    rec.rows_wasted_per_request,
                    rec.waits_per_request,
                    rec.p50_us as f64 / 1000.0,
                    rec.p99_us as f64 / 1000.0,
                    rec.first_error.as_ref().map_or_else(String::new, |e| format!(
                        "; {} FAILED requests, first: {e}",
                        rec.errors
                    )),
                    minutes(started.elapsed().as_secs_f64()),
                    w = runs_total.to_string().len()
                );
                report.runs_done += 1;
                if failed {
                    report.runs_failed += 1;
                }
                let dead = rec.requests == 0;
                report.runs.push(rec);
                report.cells =
                    p.qs.iter()
                        .flat_map(|&q| cells_of(q, &p.stream_limits, &report.runs))
                        .filter(|c| c.repeats > 0)
                        .collect();
                report.targets = check_targets(&report.cells, &p.qs);
                report.wall_s = started.elapsed().as_secs_f64();
                save_json(out, &report)?;
                if dead {
                    return Err(client_err(
                        "query",
                        format!(
                            "no request of run {sequence} succeeded ({}); results so far are in {}",
                            report
                                .runs
                                .last()
                                .and_then(|r| r.first_error.clone())
                                .unwrap_or_default(),
                            out.display()
                        ),
                    ));
                }
            }
        }
        if let Err(e) = client.drop_table(&table) {
            eprintln!("warning: cannot drop {table}: {e}");
        }
        let _ = writeln!(
            stdout,
            "{}",
            cells_table(&cells_of(q, &p.stream_limits, &report.runs))
        );
        let _ = stdout.flush();
    }

    report.complete = true;
    report.finished_at = Some(output::rfc3339_utc(SystemTime::now()));
    report.wall_s = started.elapsed().as_secs_f64();
    save_json(out, &report)?;
    let readme = out.join(README_MD);
    std::fs::write(&readme, render_markdown(&report))
        .map_err(|e| BenchError::io(&readme, "write", e))?;
    let _ = write!(
        stdout,
        "## Results\n\n{}\n## Targets\n\n{}\n",
        cells_table(&report.cells),
        targets_markdown(&report.targets)
    );
    let _ = stdout.flush();
    eprintln!(
        "scenario stream-limit: {} runs ({} failed) in {}; {SCENARIO_JSON}, {RUNS_CSV} and \
         {README_MD} in {}",
        report.runs_done,
        report.runs_failed,
        minutes(report.wall_s),
        out.display()
    );
    Ok(report)
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

    #[test]
    fn defaults_are_the_reports_grid() {
        let p = parameters(&args(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.qs, QS);
        assert_eq!(
            p.stream_limits
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["5", "10", "100", "adaptive"]
        );
        assert_eq!(
            (p.rows, p.repeat, p.duration_s, p.warmup_s),
            (FULL_ROWS, 10, 30.0, 5.0)
        );
        let p = parameters(&args(&["--quick"])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (p.rows, p.repeat, p.duration_s, p.warmup_s),
            (QUICK_ROWS, 3, 5.0, 1.0)
        );
        // The quick budget: 48 runs leave over 4 minutes for starting the
        // cluster and the four loads.
        const { assert!(4.0 * 4.0 * 3.0 * (QUICK_DURATION_S + QUICK_WARMUP_S) <= 330.0) };
        let p = parameters(&args(&[
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
        ]))
        .unwrap_or_else(|e| panic!("{e}"));
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
    }

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
        let mut rng = BenchRng::seed_from_u64(1);
        for _ in 0..1000 {
            let b = random_start(&mut rng, 5);
            assert!(u64::from_be_bytes(b.try_into().unwrap_or_default()) <= 5);
        }
    }

    #[test]
    fn shuffles_are_seeded_permutations() {
        let v = [1, 2, 3, 4];
        let a = shuffled(&v, 9);
        assert_eq!(a, shuffled(&v, 9));
        let mut s = a.clone();
        s.sort_unstable();
        assert_eq!(s, v);
        assert!((0..20).any(|seed| shuffled(&v, seed) != a));
    }

    fn run(q: u32, l: WindowMode, repeat: u32, rows_per_sec: f64) -> RunRecord {
        RunRecord {
            q,
            stream_limit: CellLimit(l),
            batch_rows: CellLimit(l).batch_rows(FIXED_BATCH_ROWS),
            repeat,
            position: 1,
            sequence: 1,
            clients: 2,
            elapsed_s: 1.0,
            requests: 100,
            errors: 0,
            rows_returned: rows_per_sec as u64,
            rows_per_sec,
            rows_sent_per_request: 1100.0,
            rows_wasted_per_request: 100.0,
            waits_per_request: 3.0,
            stalls_per_request: 1.0,
            retries: 0,
            p50_us: 1000,
            p99_us: 3000,
            mean_us: 1100.0,
            first_error: None,
        }
    }

    #[test]
    fn cells_have_the_reports_columns_and_targets_are_checked() {
        let limits: Vec<CellLimit> = STREAM_LIMITS.iter().copied().map(CellLimit).collect();
        let mut runs = Vec::new();
        for r in 1..=2 {
            let d = if r == 1 { 0.99 } else { 1.01 };
            runs.push(run(192, WindowMode::Fixed(5), r, 150_000.0 * d));
            runs.push(run(192, WindowMode::Fixed(10), r, 100_000.0 * d));
            runs.push(run(192, WindowMode::Fixed(100), r, 30_000.0 * d));
            runs.push(run(192, WindowMode::Adaptive, r, 160_000.0 * d));
        }
        let cells = cells_of(192, &limits, &runs);
        assert_eq!(cells.len(), 4);
        let c5 = &cells[0];
        assert!((c5.ratio_vs_10.unwrap_or(0.0) - 1.5).abs() < 1e-9);
        assert!(c5.ratio_vs_10_three_sd_pct.is_some_and(|p| p > 0.0));
        assert_eq!(cells[1].ratio_vs_10, Some(1.0));
        assert_eq!(cells[1].ratio_vs_10_three_sd_pct, None);
        assert!((c5.wasted_rows_per_request - 100.0).abs() < 1e-9);
        let j = serde_json::to_value(&cells).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j[0]["stream_limit"], 5);
        assert_eq!(j[3]["stream_limit"], "adaptive");
        for key in [
            "q",
            "stream_limit",
            "rows_per_sec_mean",
            "rows_per_sec_stddev_pct",
            "ratio_vs_10",
            "wasted_rows_per_request",
        ] {
            assert!(!j[3][key].is_null(), "{key}");
        }
        let back: Vec<CellReport> = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, cells);
        let t = check_targets(&cells, &[192]);
        assert_eq!(
            (t[0].verdict, t[1].verdict),
            (Verdict::Met, Verdict::Met),
            "{t:?}"
        );

        // Adaptive 20% under the best fixed limit, far outside the noise.
        let slow: Vec<RunRecord> = runs
            .iter()
            .cloned()
            .map(|mut r| {
                if r.stream_limit.0 == WindowMode::Adaptive {
                    r.rows_per_sec *= 0.75;
                }
                r
            })
            .collect();
        let t = check_targets(&cells_of(192, &limits, &slow), &[192, 8]);
        assert_eq!(
            (t[0].verdict, t[1].verdict),
            (Verdict::Missed, Verdict::Missed),
            "{t:?}"
        );
        assert!(t[1].detail.contains("q=8: not evaluated"), "{t:?}");
        let t = check_targets(&[], &[8]);
        assert_eq!(
            (t[0].verdict, t[1].verdict),
            (Verdict::NotEvaluated, Verdict::NotEvaluated)
        );

        let md = cells_table(&cells);
        assert!(md.contains("| 192 | 5 | 1 | 150,000.0 |"), "{md}");
        assert!(md.contains("| 192 | adaptive | auto |"), "{md}");
        let line = runs[0].csv_line();
        assert_eq!(line.split(',').count(), RUNS_CSV_HEADER.split(',').count());
    }
}
