//! The leveled volume report's test (martinsumner/leveled `docs/VOLUME.md`),
//! scaled to one small machine.
//!
//! Owns the variants (8 KB values with `sync` and `nosync`, 4 KB and 16 KB
//! `nosync`), their workload (incompressible `fixed` values, pareto keys over a
//! key space much larger than the run writes, 5 GET : 1 UPDATE, closed loop,
//! starting empty), the quick / full presets, its measured cell (one child
//! process, the current binary's `bench run`, per variant, target and
//! repeat, under the memory limit: [`framework::child::run_child`]) and its
//! tables ([`super::report`]). The plan, the outputs and the child
//! processes are the [`framework`]'s. It must never measure in its own
//! process (a store's page cache, threads and allocator state must not leak
//! from one run into the next) and never run a child outside its memory
//! limit unless told to with `--no-memory-limit`.
//!
//! Scaling choices (the report: a 5-node cluster, 60–100 basho_bench workers,
//! 200M keys, 4–6 hours, data growing well past the page cache):
//! - [`WORKERS`] = 16: enough outstanding requests to keep a store's I/O queue
//!   and its background threads busy on 2 cores without the client threads
//!   taking the CPU away from the store (60–100 workers served five 8-core nodes).
//! - Starting empty with pareto keys, GETs mostly miss at first and the run's
//!   UPDATEs mostly create new keys (the report's "Lies, damned lies"); the key
//!   space ([`QUICK_KEYS`], [`FULL_KEYS`]) is sized so that this stays true for
//!   most of a run. `gets found` in the table shows how far a run got.
//! - The memory limit ([`QUICK_MEMORY_LIMIT_BYTES`], [`FULL_MEMORY_LIMIT_BYTES`])
//!   caps anonymous memory and page cache together, so it must hold every
//!   store's *own* memory at its default settings, or the store is OOM-killed
//!   instead of measured. Peak RSS measured on this machine (release build,
//!   16 workers, 20 s at max rate, no limit): tablinum 80–110 MiB; rocksdb and
//!   rocksdb-blob 220–320 MiB (64 MiB block cache, 2 × 64 MiB memtables);
//!   fjall and fjall-kv 250 MiB with 8 KB sync, 430 MiB with 8 KB nosync and
//!   840 MiB with 16 KB nosync (sealed memtables pile up while flushes lag).
//!   Under 256 MiB both fjall targets were OOM-killed within 2 s, so the quick
//!   limit is 1 GiB. At the 40–330 MB/s of values the stores absorb (sync
//!   included: 16 writers share each fsync), 25 s runs write 1–8 GB, mostly
//!   2–8× the limit. The table shows `written (× limit)` and the peak RSS per
//!   target, and a note flags every target that wrote less than 2× the limit.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cgroup::{self, MEMORY_LIMIT_BYTES_MIN};
use super::framework::child::{run_child, ChildCommand, ChildRun};
use super::framework::output::{mib, ChartSpec, Report, SCENARIO_JSON};
use super::framework::plan::{Group, Interleave, Plan};
use super::framework::preset::{check_distinct, check_range, usage, Preset};
use super::framework::{self, RunAt, Scenario};
use super::report::{report_table, trim_float, RunMetrics, RunRecord, VariantReport};
use crate::chart::{Line, Panel};
use crate::cli::CACHE_BYTES_DEFAULT;
use crate::error::BenchError;
use crate::output::{read_summary_csv, RunSummary, SUMMARY_CSV};
use crate::targets::{known_targets, ClusterTarget, MemoryTarget, TablinumTarget};
use crate::workload::{
    KeyEncoding, KeyGenerator, Mode, Operations, ValueGenerator, Workload, REPORT_INTERVAL_S_MIN,
};

/// Concurrent workers (closed loop) of every run.
pub const WORKERS: u32 = 16;
/// GET weight of the op mix (the report: 5 GETs for each UPDATE).
pub const GET_WEIGHT: u32 = 5;
/// UPDATE (get then put) weight of the op mix.
pub const UPDATE_WEIGHT: u32 = 1;
/// Seed of repeat 1 (repeat `r` uses `seed + r − 1`; every target of a repeat
/// sees the same key and value sequence).
pub const VOLUME_SEED: u64 = 20_161_121;

/// Measured seconds per run in `--quick` mode: 20 runs (4 variants × 5
/// targets) of 25 s plus the 1–3 s of process start, open, close and data
/// removal measured per run fit in 10 minutes.
pub const QUICK_RUN_S: f64 = 25.0;
/// Report interval in `--quick` mode, seconds (the last window is the last 10%: 2 s).
pub const QUICK_REPORT_INTERVAL_S: f64 = 1.0;
/// Memory limit per run in `--quick` mode, bytes (1 GiB): the smallest round
/// limit under which every peer survives at its defaults (see the module docs).
pub const QUICK_MEMORY_LIMIT_BYTES: u64 = 1 << 30;
/// Key space in `--quick` mode: 2M keys, pareto mean at 400k; a 25 s run
/// updates a few hundred thousand keys, mostly new ones.
pub const QUICK_KEYS: u64 = 2_000_000;

/// Measured seconds per run in full mode (10 minutes; 20 runs take ~3.5 hours).
pub const FULL_RUN_S: f64 = 600.0;
/// Report interval in full mode, seconds.
pub const FULL_REPORT_INTERVAL_S: f64 = 10.0;
/// Memory limit per run in full mode, bytes (2 GiB: headroom for a store whose
/// own memory grows over 10 minutes); 10 minutes of writes are 10× that and more.
pub const FULL_MEMORY_LIMIT_BYTES: u64 = 2 << 30;
/// Key space in full mode: 20M keys.
pub const FULL_KEYS: u64 = 20_000_000;
/// Measured seconds per run with `--long` (30 minutes: the tail of a store
/// that has outgrown memory many times over).
pub const LONG_RUN_S: f64 = 1800.0;
/// Report interval with `--long`, seconds.
pub const LONG_REPORT_INTERVAL_S: f64 = 30.0;
/// Memory limit per run with `--long`, bytes (768 MiB: the smallest limit
/// every peer survived at 24 workers, so that data reaches 10× it).
pub const LONG_MEMORY_LIMIT_BYTES: u64 = 768 << 20;
/// Concurrent workers with `--long` (the shape the volume issue measured).
pub const LONG_WORKERS: u32 = 24;
/// Key space of a `--long` variant, as value bytes per byte of memory limit:
/// pareto keys over 16× the limit leave a live store of ≥ 10× it after 30
/// minutes (the key space's far tail is rarely drawn) and bound the disk a
/// run needs: every update past that overwrites, so each store's own
/// reclamation (compaction, blob GC, journal compaction) must keep up.
pub const LONG_DATA_PER_MEMORY_LIMIT: u64 = 16;

/// Most repeats accepted.
pub const REPEAT_MAX: u32 = 100;

/// File name of a child's captured stdout and stderr, in its run directory.
pub const RUN_LOG: &str = "run.log";
/// Time a child gets beyond its measured duration (open, close, cleanup)
/// before it is killed, seconds.
pub const CHILD_GRACE_S: f64 = 300.0;
/// Time limit of a child whose workload has no duration (op count only), seconds.
pub const CHILD_TIMEOUT_NO_DURATION_S: f64 = 86_400.0;
/// Rough per-run cost beyond the measured time (process start, open, close,
/// cleanup), seconds; only used for the time estimate printed at the start.
pub const CHILD_OVERHEAD_ESTIMATE_S: f64 = 4.0;
/// What the JSON and the README say when runs had no memory limit.
pub const NO_MEMORY_LIMIT_WARNING: &str = "NO MEMORY LIMIT: runs were not confined by a \
    cgroup memory limit (--no-memory-limit), so a store's data may have fitted in the page \
    cache and reads may never have touched the disk; these results do not show behaviour \
    once data outgrows memory.";
/// How the runs are ordered (recorded in `scenario.json`).
pub const RUN_ORDER: &str = "variants in turn; within a variant, repeats in turn; within a \
    repeat, every target once, the target order rotated by one per repeat (round-robin), so \
    repeated runs of different targets interleave";

/// What `--quick` and a full run differ in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VolumeShape {
    /// Measured seconds per run.
    pub run_s: f64,
    /// Longest report interval, seconds.
    pub report_interval_s: f64,
    /// Memory limit per run, bytes.
    pub memory_limit_bytes: u64,
    /// Key space; `None`: [`LONG_DATA_PER_MEMORY_LIMIT`] times the memory
    /// limit in values of each variant's size ([`long_keys`]).
    pub keys: Option<u64>,
    /// Concurrent workers.
    pub workers: u32,
}

/// The quick and full presets.
pub const PRESETS: Preset<VolumeShape> = Preset {
    quick: VolumeShape {
        run_s: QUICK_RUN_S,
        report_interval_s: QUICK_REPORT_INTERVAL_S,
        memory_limit_bytes: QUICK_MEMORY_LIMIT_BYTES,
        keys: Some(QUICK_KEYS),
        workers: WORKERS,
    },
    full: VolumeShape {
        run_s: FULL_RUN_S,
        report_interval_s: FULL_REPORT_INTERVAL_S,
        memory_limit_bytes: FULL_MEMORY_LIMIT_BYTES,
        keys: Some(FULL_KEYS),
        workers: WORKERS,
    },
};

/// The `--long` preset: ≥ 30-minute runs whose data grows to ≥ 10× the
/// memory limit, within the disk of one machine (4 variants × 4 targets
/// take ~8.5 hours; run one variant at a time with `--variants`).
pub const LONG: VolumeShape = VolumeShape {
    run_s: LONG_RUN_S,
    report_interval_s: LONG_REPORT_INTERVAL_S,
    memory_limit_bytes: LONG_MEMORY_LIMIT_BYTES,
    keys: None,
    workers: LONG_WORKERS,
};

/// The key space of a `--long` variant with `value_size_bytes` values.
pub fn long_keys(value_size_bytes: u64, memory_limit_bytes: Option<u64>) -> u64 {
    let memory = memory_limit_bytes.unwrap_or(LONG_MEMORY_LIMIT_BYTES);
    (LONG_DATA_PER_MEMORY_LIMIT * memory / value_size_bytes.max(1)).max(1)
}

/// One variant of the volume test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Variant {
    /// Name (`--variants`, directory under `--out`).
    pub name: &'static str,
    /// Value size, bytes.
    pub value_size_bytes: u64,
    /// fsync every write.
    pub sync: bool,
    /// Value size as the report writes it.
    pub size_label: &'static str,
    /// Preload a key space [`GC_DATA_PER_MEMORY_LIMIT`] times the memory
    /// limit, overwrite it for the first half of the run and run the
    /// target's reclamation (tablinum: journal compaction) back to back in
    /// the second half ([`Workload::reclaim_window_s`]).
    pub reclaim: bool,
}

/// The report's variants that one machine can run: its tests 1, 2, 4 and 5
/// (test 3 differs only in hardware, test 6 needs secondary indexes).
pub const VARIANTS: [Variant; 4] = [
    Variant {
        name: "8k-sync",
        value_size_bytes: 8 << 10,
        sync: true,
        size_label: "8KB",
        reclaim: false,
    },
    Variant {
        name: "8k-nosync",
        value_size_bytes: 8 << 10,
        sync: false,
        size_label: "8KB",
        reclaim: false,
    },
    Variant {
        name: "4k-nosync",
        value_size_bytes: 4 << 10,
        sync: false,
        size_label: "4KB",
        reclaim: false,
    },
    Variant {
        name: "16k-nosync",
        value_size_bytes: 16 << 10,
        sync: false,
        size_label: "16KB",
        reclaim: false,
    },
];

/// Variants run only when named in `--variants`: value GC under load, which
/// the report left as future testing.
pub const EXTRA_VARIANTS: [Variant; 1] = [Variant {
    name: "8k-gc",
    value_size_bytes: 8 << 10,
    sync: false,
    size_label: "8KB",
    reclaim: true,
}];

/// Live data of a reclaim variant, as a multiple of the memory limit: the
/// key space is preloaded to this size, so GETs find their object and read
/// mostly from disk, and every UPDATE overwrites (leaves garbage).
pub const GC_DATA_PER_MEMORY_LIMIT: u64 = 3;
/// Memory a reclaim variant's key space is sized for when runs have no
/// memory limit, bytes (1 GiB).
pub const GC_MEMORY_BYTES_NO_LIMIT: u64 = 1 << 30;

/// The key space of a reclaim variant with `value_size_bytes` values under
/// `memory_limit_bytes`.
pub fn gc_keys(value_size_bytes: u64, memory_limit_bytes: Option<u64>) -> u64 {
    let memory = memory_limit_bytes.unwrap_or(GC_MEMORY_BYTES_NO_LIMIT);
    (GC_DATA_PER_MEMORY_LIMIT * memory / value_size_bytes.max(1)).max(1)
}

/// `tablinum bench scenario volume` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeArgs {
    /// Short runs: 25 s each under a 1 GiB memory limit (all variants and
    /// five targets in under 10 minutes on 2 cores). Default: 10 minutes each
    /// under 2 GiB.
    #[arg(long, conflicts_with = "long")]
    pub quick: bool,
    /// Long runs: 30 minutes each under a 768 MiB limit, 24 workers, each
    /// variant's key space 16× the limit in its values, so data grows past
    /// 10× the limit and every store must reclaim overwritten values as it
    /// goes (~2 hours per variant with four targets).
    #[arg(long)]
    pub long: bool,
    /// Output directory (scenario.json, README.md, one directory per variant
    /// and run). Must not hold an earlier scenario.
    #[arg(long)]
    pub out: PathBuf,
    /// Targets, comma-separated; the first is the subject of the deltas.
    /// `tablinum:KEY=VALUE` is tablinum with one engine option set (e.g.
    /// `tablinum:journal_writeback_bytes=0`), for an A/B in one scenario;
    /// `tablinum:K1=V1+K2=V2` sets several.
    /// Default: tablinum and, when built with the `peers` feature, rocksdb,
    /// rocksdb-blob, fjall, fjall-kv.
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Variants, comma-separated (default: 8k-sync, 8k-nosync, 4k-nosync,
    /// 16k-nosync; also known: 8k-gc, value GC under load: a key space 3×
    /// the memory limit preloaded, overwritten, and each target's own
    /// reclamation run back to back in the second half of the run).
    #[arg(long, value_delimiter = ',')]
    pub variants: Vec<String>,
    /// Runs per variant and target, interleaved round-robin over the targets.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Run without a memory limit (when cgroups are unavailable). The data
    /// may then fit in the page cache: the results are marked as such.
    #[arg(long)]
    pub no_memory_limit: bool,
    /// Memory limit per run, MiB (default 1024 with --quick, else 2048).
    #[arg(long, conflicts_with = "no_memory_limit")]
    pub memory_limit_mib: Option<u64>,
    /// Measured seconds per run (default 25 with --quick, else 600).
    #[arg(long)]
    pub duration_s: Option<f64>,
    /// Stop a run after this many ops (in addition to the duration).
    #[arg(long)]
    pub op_count: Option<u64>,
    /// Key space (default 2M with --quick, 16× the memory limit in values
    /// with --long, else 20M).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Concurrent workers per run (default 16; 24 with --long).
    #[arg(long)]
    pub workers: Option<u32>,
    /// Block/row cache budget of every target, bytes.
    #[arg(long, default_value_t = CACHE_BYTES_DEFAULT)]
    pub cache_bytes: u64,
    /// Seed of repeat 1 (repeat r uses seed + r - 1).
    #[arg(long, default_value_t = VOLUME_SEED)]
    pub seed: u64,
}

/// The parameters a volume scenario ran with (the `parameters` of `scenario.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeParameters {
    /// Concurrent workers per run.
    pub workers: u32,
    /// Measured seconds per run.
    pub run_s: f64,
    /// Op budget per run, if any.
    pub op_count: Option<u64>,
    /// Key space; `None` when each variant has its own (in its description).
    pub keys: Option<u64>,
    /// Key distribution.
    pub key_generator: String,
    /// Value generator.
    pub value_generator: String,
    /// `get:update` weights.
    pub op_mix: String,
    /// Report interval, seconds.
    pub report_interval_s: f64,
    /// Cache budget of every target, bytes.
    pub cache_bytes: u64,
    /// Runs per variant and target.
    pub repeat: u32,
    /// Seed of repeat 1.
    pub seed: u64,
}

/// The default targets: tablinum, then every peer this build has (not the
/// `memory` baseline, and not `cluster`: the volume report compares engines,
/// not the network path).
pub fn default_targets() -> Vec<String> {
    known_targets()
        .into_iter()
        .filter(|&t| t != MemoryTarget::NAME && t != ClusterTarget::NAME)
        .map(str::to_string)
        .collect()
}

/// The workload of `variant`.
pub fn workload(
    variant: &Variant,
    run_s: f64,
    op_count: Option<u64>,
    keys: u64,
    workers: u32,
    report_interval_s: f64,
    seed: u64,
) -> Workload {
    Workload {
        duration_s: Some(run_s),
        op_count,
        concurrent: workers,
        mode: Mode::Max,
        rate_ops_per_s: None,
        report_interval_s,
        seed: Some(seed),
        preload_keys: 0,
        keys,
        key_generator: KeyGenerator::Pareto,
        key_encoding: KeyEncoding::Be64,
        key_prefix: String::new(),
        value_generator: ValueGenerator::Fixed,
        value_size_bytes: variant.value_size_bytes,
        scan_limit_rows: 100,
        reclaim_window_s: None,
        operations: Operations {
            get: GET_WEIGHT,
            update: UPDATE_WEIGHT,
            ..Operations::default()
        },
    }
}

/// One variant of the scenario: a workload and a durability mode.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantSpec {
    /// Name, also the directory under `--out`.
    pub name: String,
    /// The report's test description.
    pub description: String,
    /// The workload (seed of repeat 1).
    pub workload: Workload,
    /// fsync every write (`bench run --sync`).
    pub sync: bool,
}

/// Everything the volume scenario runs.
#[derive(Debug, Clone, PartialEq)]
pub struct VolumeSpec {
    /// `--quick`.
    pub quick: bool,
    /// Variants, in run order.
    pub variants: Vec<VariantSpec>,
    /// Targets; the first is the subject of the deltas.
    pub targets: Vec<String>,
    /// Runs per variant and target.
    pub repeat: u32,
    /// Memory limit per child, bytes; `None` with `--no-memory-limit`.
    pub memory_limit_bytes: Option<u64>,
    /// Cache budget of every target, bytes.
    pub cache_bytes: u64,
    /// The scenario's parameters, echoed into `scenario.json`.
    pub parameters: serde_json::Value,
}

/// Checks `args` and turns them into the scenario to run.
pub fn spec(args: &VolumeArgs) -> Result<(VolumeSpec, VolumeParameters), BenchError> {
    let known = known_targets();
    let targets: Vec<String> = if args.targets.is_empty() {
        default_targets()
    } else {
        args.targets.iter().map(|t| t.trim().to_string()).collect()
    };
    for t in &targets {
        // `tablinum:KEY=VALUE` is tablinum with one engine option set,
        // checked here so a bad one fails before the first run.
        if let Some(overrides) = t.strip_prefix("tablinum:") {
            TablinumTarget::check_overrides(overrides)
                .map_err(|e| usage("--targets", format!("`{t}`: {e}")))?;
        } else if !known.contains(&t.as_str()) {
            return Err(BenchError::UnknownTarget {
                name: t.clone(),
                known,
            });
        }
    }
    check_distinct("--targets", &targets)?;
    let variants: Vec<Variant> = if args.variants.is_empty() {
        VARIANTS.to_vec()
    } else {
        let mut chosen: Vec<Variant> = Vec::new();
        for name in &args.variants {
            let name = name.trim();
            let known = VARIANTS.iter().chain(EXTRA_VARIANTS.iter());
            let v = known.clone().find(|v| v.name == name).ok_or_else(|| {
                usage(
                    "--variants",
                    format!(
                        "unknown variant `{name}` (known: {})",
                        known.map(|v| v.name).collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            if chosen.contains(v) {
                return Err(usage("--variants", format!("`{name}` is listed twice")));
            }
            chosen.push(*v);
        }
        chosen
    };
    check_range("--repeat", args.repeat, 1, REPEAT_MAX)?;
    let preset = if args.long {
        LONG
    } else {
        <Volume as Scenario>::PRESETS.pick(args.quick)
    };
    let run_s = args.duration_s.unwrap_or(preset.run_s);
    // At least ten report rows per run, so the last window is a tenth of it.
    let report_interval_s = (run_s / 10.0).clamp(REPORT_INTERVAL_S_MIN, preset.report_interval_s);
    let keys = args.keys.or(preset.keys);
    let workers = args.workers.unwrap_or(preset.workers);
    // No one key space for the whole scenario: each variant names its own.
    let per_variant_keys = keys.is_none() || variants.iter().any(|v| v.reclaim);
    let memory_limit_bytes = if args.no_memory_limit {
        None
    } else {
        let bytes = match args.memory_limit_mib {
            Some(mib) => mib
                .checked_mul(1 << 20)
                .ok_or_else(|| usage("--memory-limit-mib", format!("{mib} MiB is too large")))?,
            None => preset.memory_limit_bytes,
        };
        if bytes < MEMORY_LIMIT_BYTES_MIN {
            return Err(usage(
                "--memory-limit-mib",
                format!("at least {} MiB", MEMORY_LIMIT_BYTES_MIN >> 20),
            ));
        }
        Some(bytes)
    };
    let variant_specs = variants
        .iter()
        .map(|v| {
            let keys = keys.unwrap_or_else(|| long_keys(v.value_size_bytes, memory_limit_bytes));
            let mut w = workload(
                v,
                run_s,
                args.op_count,
                keys,
                workers,
                report_interval_s,
                args.seed,
            );
            if v.reclaim {
                w.keys = gc_keys(v.value_size_bytes, memory_limit_bytes);
                w.preload_keys = w.keys;
                w.reclaim_window_s = Some([run_s / 2.0, run_s]);
            }
            // Every field (duration, workers, keys, ...) is checked here, before
            // the first child starts.
            w.validate(&Workload::in_memory_path())?;
            Ok(VariantSpec {
                name: v.name.to_string(),
                description: format!(
                    "{} value, {} workers, {}{}{}",
                    v.size_label,
                    workers,
                    if v.sync { "sync" } else { "no_sync" },
                    if per_variant_keys && !v.reclaim {
                        format!(", {} keys", w.keys)
                    } else {
                        String::new()
                    },
                    match w.reclaim_window_s {
                        Some([a, b]) => format!(
                            ", {} keys preloaded, reclamation run from {} s to {} s",
                            w.keys,
                            trim_float(a),
                            trim_float(b)
                        ),
                        None => String::new(),
                    }
                ),
                workload: w,
                sync: v.sync,
            })
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let parameters = VolumeParameters {
        workers,
        run_s,
        op_count: args.op_count,
        keys: keys.filter(|_| !per_variant_keys),
        key_generator: "pareto".into(),
        value_generator: "fixed".into(),
        op_mix: format!("get:update = {GET_WEIGHT}:{UPDATE_WEIGHT}"),
        report_interval_s,
        cache_bytes: args.cache_bytes,
        repeat: args.repeat,
        seed: args.seed,
    };
    let spec = VolumeSpec {
        quick: args.quick,
        variants: variant_specs,
        targets,
        repeat: args.repeat,
        memory_limit_bytes,
        cache_bytes: args.cache_bytes,
        parameters: serde_json::to_value(&parameters).map_err(|e| BenchError::Json {
            file: args.out.join(SCENARIO_JSON),
            message: e.to_string(),
        })?,
    };
    Ok((spec, parameters))
}

/// The volume scenario's own fields of `scenario.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VolumeBody {
    /// Memory limit of every run (cgroup v1 `memory.limit_in_bytes`: anonymous
    /// memory and page cache together), bytes; `None`: no limit.
    pub memory_limit_bytes: Option<u64>,
    /// Set when there was no memory limit.
    pub memory_limit_warning: Option<String>,
    /// Targets in order; the first is the subject of the deltas.
    pub targets: Vec<String>,
    /// Runs per variant and target.
    pub repeat: u32,
    /// How the runs were ordered.
    pub order: String,
    /// The scenario's parameters (workers, run length, key space, ...).
    pub parameters: serde_json::Value,
    /// Per variant, per target results.
    pub variants: Vec<VariantReport>,
}

/// The volume scenario's `scenario.json`.
pub type ScenarioReport = Report<VolumeBody>;

/// The name a run's child writes into `summary.json` for `target`: the
/// target's own name, without the `:SPEC` of `tablinum:KEY=VALUE` or
/// `cluster:...` (the spec is the scenario's business, not the target's).
pub fn reported_target_name(target: &str) -> &str {
    target.split_once(':').map_or(target, |(base, _)| base)
}

/// A run's directory relative to `--out`: `<variant>/<target>-r<repeat>`,
/// with every character of the target other than ASCII letters, digits, `-`
/// and `.` written as `_` (`tablinum:journal_writeback_bytes=0` becomes
/// `tablinum_journal_writeback_bytes_0`), so the name needs no quoting in a
/// shell and is valid on every filesystem.
pub fn run_dir_name(variant: &str, target: &str, repeat: u32) -> String {
    let target: String = target
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{variant}/{target}-r{repeat}")
}

/// The workload file every target of `variant` runs in repeat `repeat`.
pub fn workload_file(out: &Path, variant: &str, repeat: u32) -> PathBuf {
    out.join(variant).join(format!("workload-r{repeat}.toml"))
}

/// The volume scenario, ready to run.
#[derive(Debug)]
pub struct Volume {
    spec: VolumeSpec,
    child: ChildCommand,
    /// Every run so far, per variant.
    records: Vec<Vec<RunRecord>>,
    /// `--out`, once known (the charts read the runs' `summary.csv`).
    out: Option<PathBuf>,
}

impl Volume {
    /// The scenario of `spec`, starting children with `child`.
    pub fn new(spec: VolumeSpec, child: ChildCommand) -> Volume {
        let records = vec![Vec::new(); spec.variants.len()];
        Volume {
            spec,
            child,
            records,
            out: None,
        }
    }

    fn variant_report(&self, v: &VariantSpec, runs: &[RunRecord]) -> VariantReport {
        VariantReport::build(
            &v.name,
            &v.description,
            &v.workload,
            v.sync,
            &self.spec.targets,
            runs,
            self.spec.memory_limit_bytes,
        )
    }
}

impl Scenario for Volume {
    type Cell = String;
    type Run = RunRecord;
    type Body = VolumeBody;
    type Shape = VolumeShape;
    const PRESETS: Preset<VolumeShape> = PRESETS;

    fn name(&self) -> &'static str {
        "volume"
    }

    fn title(&self) -> String {
        "Volume test (after martinsumner/leveled docs/VOLUME.md)".into()
    }

    fn quick(&self) -> bool {
        self.spec.quick
    }

    /// Variants in turn; within one, every target once per repeat, rotated.
    fn plan(&self) -> Plan<String> {
        Plan {
            groups: self
                .spec
                .variants
                .iter()
                .enumerate()
                .map(|(i, v)| Group {
                    name: v.name.clone(),
                    key: i as u64,
                    cells: self.spec.targets.clone(),
                })
                .collect(),
            repeat: self.spec.repeat,
            interleave: Interleave::Rotate,
        }
    }

    fn plan_words(&self) -> (&'static str, &'static str) {
        ("variants", "targets")
    }

    fn run_estimate_s(&self) -> f64 {
        self.spec.variants[0].workload.duration_s.unwrap_or(0.0) + CHILD_OVERHEAD_ESTIMATE_S
    }

    fn body(&self) -> VolumeBody {
        VolumeBody {
            memory_limit_bytes: self.spec.memory_limit_bytes,
            memory_limit_warning: self
                .spec
                .memory_limit_bytes
                .is_none()
                .then(|| NO_MEMORY_LIMIT_WARNING.to_string()),
            targets: self.spec.targets.clone(),
            repeat: self.spec.repeat,
            order: RUN_ORDER.to_string(),
            parameters: self.spec.parameters.clone(),
            variants: self
                .spec
                .variants
                .iter()
                .map(|v| self.variant_report(v, &[]))
                .collect(),
        }
    }

    fn announce(&self) -> Vec<String> {
        let mut lines = vec![match self.spec.memory_limit_bytes {
            Some(b) => format!(
                "memory limit: {} per run (cgroup v1, anonymous memory and page cache)",
                mib(b as f64)
            ),
            None => format!("WARNING: {NO_MEMORY_LIMIT_WARNING}"),
        }];
        if self.spec.memory_limit_bytes.is_some()
            && self.spec.targets.iter().any(|t| t == MemoryTarget::NAME)
        {
            lines.push(
                "note: the `memory` target keeps every value in RAM; under the memory limit it \
                 is OOM-killed once its data outgrows the limit"
                    .into(),
            );
        }
        lines
    }

    fn warning(&self, body: &VolumeBody) -> Option<String> {
        body.memory_limit_warning.clone()
    }

    fn header_lines(&self, body: &VolumeBody) -> Vec<String> {
        let limit = match body.memory_limit_bytes {
            Some(b) => format!(
                "{} per run (cgroup v1 `memory.limit_in_bytes`: the store's memory and its page \
                 cache together)",
                mib(b as f64)
            ),
            None => "**none** (`--no-memory-limit`)".to_string(),
        };
        let parameters = match body.parameters.as_object() {
            Some(map) => map
                .iter()
                .map(|(k, v)| format!("{k} = {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            None => body.parameters.to_string(),
        };
        vec![
            format!("memory limit: {limit}"),
            format!(
                "targets: {} (deltas are `{}` against each other target: `subject / peer − 1`)",
                body.targets.join(", "),
                body.targets.first().map_or("?", String::as_str),
            ),
            format!("parameters: {parameters}"),
            format!("order: {}", body.order),
        ]
    }

    /// Writes every variant's workload file per repeat (repeat `r` runs with
    /// seed `seed + r − 1`, the same for every target).
    fn prepare(&mut self, out: &Path) -> Result<(), BenchError> {
        self.out = Some(out.to_path_buf());
        for v in &self.spec.variants {
            for r in 1..=self.spec.repeat {
                let mut w = v.workload.clone();
                w.seed = Some(w.seed.unwrap_or(0).wrapping_add(u64::from(r - 1)));
                let path = workload_file(out, &v.name, r);
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| BenchError::io(dir, "create variant directory", e))?;
                }
                std::fs::write(&path, w.to_toml_string())
                    .map_err(|e| BenchError::io(&path, "write", e))?;
            }
        }
        Ok(())
    }

    /// One child `bench run` of the variant's workload against the target,
    /// under the memory limit; its `summary.json` read back.
    fn measure(&mut self, at: &RunAt<'_, String>) -> Result<RunRecord, BenchError> {
        let variant = &self.spec.variants[at.planned.group];
        let target = at.cell.as_str();
        let repeat = at.planned.repeat;
        let rel = run_dir_name(&variant.name, target, repeat);
        let dir = at.out.join(&rel);
        if dir.exists() {
            // Ours (`--out` holds no earlier scenario.json): a leftover of an
            // interrupted scenario that would mix files of two runs.
            std::fs::remove_dir_all(&dir)
                .map_err(|e| BenchError::io(&dir, "remove stale run directory", e))?;
        }
        std::fs::create_dir_all(&dir)
            .map_err(|e| BenchError::io(&dir, "create run directory", e))?;
        let mut args = self.child.prefix.clone();
        args.extend([
            "run".to_string(),
            workload_file(at.out, &variant.name, repeat)
                .to_string_lossy()
                .into_owned(),
            "--target".into(),
            target.to_string(),
            "--out".into(),
            dir.to_string_lossy().into_owned(),
            if variant.sync { "--sync" } else { "--nosync" }.into(),
            "--cache-bytes".into(),
            self.spec.cache_bytes.to_string(),
        ]);
        let expected_s = variant.workload.duration_s;
        let outcome = run_child(&ChildRun {
            program: &self.child.program,
            args: &args,
            log: &dir.join(RUN_LOG),
            memory_limit_bytes: self.spec.memory_limit_bytes,
            cgroup_suffix: format!("{}-{}", std::process::id(), at.planned.sequence),
            timeout_s: expected_s.map_or(CHILD_TIMEOUT_NO_DURATION_S, |d| d + CHILD_GRACE_S),
            expected_s,
            label: &at.label,
        })?;
        let mut error = outcome.error;
        // A child killed before its clean-up leaves its store behind.
        let data = dir.join("data");
        if error.is_some() && data.exists() {
            if let Err(e) = std::fs::remove_dir_all(&data) {
                eprintln!("warning: removing {}: {e}", data.display());
            }
        }
        let mut metrics = None;
        if error.is_none() {
            let expected_name = reported_target_name(target);
            match RunSummary::load(&dir) {
                Ok(s) if s.target != expected_name => {
                    error = Some(format!(
                        "summary.json names target `{}`, expected `{expected_name}` (for `{target}`)",
                        s.target
                    ));
                }
                Ok(s) => metrics = Some(RunMetrics::from_summary(&s)),
                Err(e) => error = Some(e.to_string()),
            }
        }
        if let (None, Some(m)) = (&error, &outcome.memory) {
            if m.max_usage_bytes == 0 {
                error = Some(
                    "nothing was charged to the run's memory cgroup: it did not run under the \
                     limit"
                        .into(),
                );
                metrics = None;
            }
        }
        Ok(RunRecord {
            variant: variant.name.clone(),
            target: target.to_string(),
            repeat,
            sequence: at.planned.sequence,
            dir: rel,
            wall_s: outcome.wall_s,
            error,
            metrics,
            memory: outcome.memory,
        })
    }

    fn record(&mut self, body: &mut VolumeBody, at: &RunAt<'_, String>, run: RunRecord) {
        let g = at.planned.group;
        self.records[g].push(run);
        body.variants[g] = self.variant_report(&self.spec.variants[g], &self.records[g]);
    }

    fn group_table(&self, body: &VolumeBody, group: &Group<String>) -> String {
        body.variants
            .iter()
            .find(|v| v.name == group.name)
            .map_or_else(String::new, |v| {
                v.table(&body.targets, body.memory_limit_bytes)
            })
    }

    /// The report's throughput-over-time chart: one panel per variant, one
    /// line per target and repeat, the reclaim window shaded.
    fn charts(&self, body: &VolumeBody) -> Vec<ChartSpec> {
        let Some(out) = &self.out else {
            return Vec::new();
        };
        let panels = body
            .variants
            .iter()
            .map(|v| throughput_panel(out, v, &body.targets))
            .collect();
        vec![ChartSpec {
            file: SCENARIO_PNG.into(),
            title: "Volume: successful ops/s over time per target".into(),
            panels,
        }]
    }

    fn summary(&self, body: &VolumeBody) -> String {
        format!("## Summary\n\n{}", report_table(&body.variants))
    }

    fn readme_tail(&self, body: &VolumeBody) -> String {
        let mut s = String::from("## Variants\n\n");
        for v in &body.variants {
            s.push_str(&v.table(&body.targets, body.memory_limit_bytes));
            s.push('\n');
        }
        s.push_str(&format!(
            "## Files\n\n`{SCENARIO_JSON}` holds every number above with the per-repeat values \
             and standard deviations. Each run's directory `<variant>/<target>-r<i>/` holds \
             `summary.csv`, `<op>_latencies.csv`, `errors.csv`, `summary.json`, `summary.png`, \
             `workload.toml` and `{RUN_LOG}` (the child's output); \
             `<variant>/workload-r<i>.toml` is the workload every target ran in repeat `i`. \
             `{SCENARIO_PNG}` draws every run's throughput over time, a panel per variant \
             (a reclaim variant's window shaded).\n"
        ));
        s
    }
}

/// File name of the throughput-over-time chart in `--out`.
pub const SCENARIO_PNG: &str = "scenario.png";

/// One variant's throughput over time: a line per successful run (its
/// `summary.csv`, read from `out`), the reclaim window shaded.
fn throughput_panel(out: &Path, v: &VariantReport, order: &[String]) -> Panel {
    let mut lines = Vec::new();
    for t in order {
        let Some(r) = v.targets.get(t) else {
            continue;
        };
        for run in r.runs.iter().filter(|run| run.metrics.is_some()) {
            let Ok(rows) = read_summary_csv(&out.join(&run.dir).join(SUMMARY_CSV)) else {
                continue;
            };
            let points = rows
                .iter()
                .filter(|row| row.window_s > 0.0)
                .map(|row| (row.elapsed_s, row.successful as f64 / row.window_s))
                .collect();
            let label = if r.runs.len() > 1 {
                format!("{t} r{}", run.repeat)
            } else {
                t.clone()
            };
            lines.push(Line::new(label, points));
        }
    }
    let window = v.workload.reclaim_window_s;
    Panel {
        title: match window {
            Some(_) => format!("{} (shaded: reclamation window)", v.description),
            None => v.description.clone(),
        },
        x_desc: "seconds".into(),
        y_desc: "ops/s".into(),
        y_unit: None,
        lines,
        bands: window.map(|[a, b]| vec![(a, b)]).unwrap_or_default(),
    }
}

/// Runs the volume scenario, starting children with `child`.
pub fn run(args: &VolumeArgs, child: &ChildCommand) -> Result<ScenarioReport, BenchError> {
    let (spec, _) = spec(args)?;
    if spec.memory_limit_bytes.is_some() {
        cgroup::check_available()?;
    }
    let mut scenario = Volume::new(spec, child.clone());
    framework::run(&mut scenario, &args.out, &child.invocation)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> VolumeArgs {
        VolumeArgs {
            quick: true,
            out: PathBuf::from("/tmp/x"),
            targets: vec![],
            variants: vec![],
            repeat: 1,
            no_memory_limit: false,
            memory_limit_mib: None,
            duration_s: None,
            op_count: None,
            keys: None,
            workers: None,
            long: false,
            cache_bytes: CACHE_BYTES_DEFAULT,
            seed: VOLUME_SEED,
        }
    }

    #[test]
    fn the_gc_variant_preloads_three_times_the_limit_and_reclaims_in_the_second_half() {
        let a = VolumeArgs {
            variants: vec!["8k-gc".into(), "4k-nosync".into()],
            memory_limit_mib: Some(768),
            duration_s: Some(120.0),
            ..args()
        };
        let (s, p) = spec(&a).unwrap_or_else(|e| panic!("{e}"));
        let gc = &s.variants[0].workload;
        assert_eq!(gc.keys, 3 * (768 << 20) / 8192);
        assert_eq!(gc.preload_keys, gc.keys);
        assert_eq!(gc.reclaim_window_s, Some([60.0, 120.0]));
        assert!(s.variants[0]
            .description
            .contains("reclamation run from 60 s to 120 s"));
        let other = &s.variants[1].workload;
        assert_eq!((other.reclaim_window_s, other.preload_keys), (None, 0));
        // The scenario has no one key space: each variant names its own.
        assert_eq!(p.keys, None);
        assert!(s.variants[1]
            .description
            .contains(&format!("{} keys", other.keys)));
        let e = spec(&VolumeArgs {
            variants: vec!["9k".into()],
            ..args()
        })
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains("9k") && e.contains("8k-gc"), "{e}");
    }

    #[test]
    fn long_runs_size_each_key_space_to_the_memory_limit() {
        let a = VolumeArgs {
            quick: false,
            long: true,
            ..args()
        };
        let (s, p) = spec(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.memory_limit_bytes, Some(768 << 20));
        assert_eq!(
            (p.run_s, p.report_interval_s, p.workers),
            (1800.0, 30.0, 24)
        );
        assert_eq!(p.keys, None);
        for v in &s.variants {
            let w = &v.workload;
            // 16× the limit in this variant's values, not preloaded.
            assert_eq!(w.keys * w.value_size_bytes, 16 * (768 << 20), "{}", v.name);
            assert_eq!((w.preload_keys, w.reclaim_window_s), (0, None));
            assert!(v.description.contains(&format!("{} keys", w.keys)));
        }
        assert_eq!(s.variants[2].workload.keys, 3_145_728);
        // Flags still win over the preset.
        let (s, _) = spec(&VolumeArgs {
            keys: Some(1000),
            workers: Some(8),
            memory_limit_mib: Some(1024),
            ..a
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.variants[0].workload.keys, 1000);
        assert_eq!(s.variants[0].workload.concurrent, 8);
        assert_eq!(s.memory_limit_bytes, Some(1 << 30));
    }

    #[test]
    fn quick_defaults_are_the_reports_test_scaled_down() {
        let (spec, p) = spec(&args()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.targets[0], "tablinum");
        assert!(!spec.targets.contains(&"memory".to_string()));
        assert!(!spec.targets.contains(&"cluster".to_string()));
        assert_eq!(
            spec.variants
                .iter()
                .map(|v| v.name.as_str())
                .collect::<Vec<_>>(),
            ["8k-sync", "8k-nosync", "4k-nosync", "16k-nosync"]
        );
        assert_eq!(spec.memory_limit_bytes, Some(QUICK_MEMORY_LIMIT_BYTES));
        assert_eq!(
            (p.run_s, p.keys, p.report_interval_s),
            (QUICK_RUN_S, Some(QUICK_KEYS), 1.0)
        );
        let w = &spec.variants[0].workload;
        assert!(spec.variants[0].sync && !spec.variants[1].sync);
        assert_eq!(w.value_size_bytes, 8192);
        assert_eq!(spec.variants[3].workload.value_size_bytes, 16384);
        assert_eq!(w.key_generator, KeyGenerator::Pareto);
        assert_eq!(w.value_generator, ValueGenerator::Fixed);
        assert_eq!((w.operations.get, w.operations.update), (5, 1));
        assert_eq!(w.operations.total(), 6);
        assert_eq!((w.preload_keys, w.concurrent), (0, 16));
        assert_eq!(spec.variants[0].description, "8KB value, 16 workers, sync");
        assert_eq!(
            spec.variants[2].description,
            "4KB value, 16 workers, no_sync"
        );
        // The quick budget: every run of five targets in under 10 minutes.
        const { assert!(4.0 * 5.0 * (QUICK_RUN_S + 3.0) <= 600.0) };
    }

    #[test]
    fn a_tablinum_target_may_carry_an_engine_option() {
        let (spec, _) = spec(&VolumeArgs {
            targets: vec![
                "tablinum:journal_writeback_bytes=0".into(),
                "tablinum:journal_recycle_segments=8+journal_writeback_bytes=0".into(),
                "tablinum".into(),
            ],
            ..args()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            spec.targets,
            [
                "tablinum:journal_writeback_bytes=0",
                "tablinum:journal_recycle_segments=8+journal_writeback_bytes=0",
                "tablinum"
            ]
        );
    }

    #[test]
    fn bad_arguments_are_refused_with_the_argument_named() {
        let cases: Vec<(VolumeArgs, &str)> = vec![
            (
                VolumeArgs {
                    targets: vec!["leveldb".into()],
                    ..args()
                },
                "leveldb",
            ),
            // A bad engine override is refused before any run starts: an
            // unknown key, a value that does not parse, one out of range.
            (
                VolumeArgs {
                    targets: vec!["tablinum:journal_gc=30".into()],
                    ..args()
                },
                "unknown engine override `journal_gc`",
            ),
            (
                VolumeArgs {
                    targets: vec!["tablinum:journal_compaction_garbage_pct=lots".into()],
                    ..args()
                },
                "`lots` is not valid",
            ),
            (
                VolumeArgs {
                    targets: vec!["tablinum:memtable_bytes_max=1".into()],
                    ..args()
                },
                "options.memtable_bytes_max",
            ),
            (
                VolumeArgs {
                    targets: vec!["tablinum:journal_writeback_bytes".into()],
                    ..args()
                },
                "expected KEY=VALUE",
            ),
            // Each of several options is checked.
            (
                VolumeArgs {
                    targets: vec!["tablinum:journal_recycle_segments=8+memtable_bytes_max=1".into()],
                    ..args()
                },
                "options.memtable_bytes_max",
            ),
            (
                VolumeArgs {
                    targets: vec!["tablinum".into(), "tablinum".into()],
                    ..args()
                },
                "--targets",
            ),
            (
                VolumeArgs {
                    variants: vec!["2k-sync".into()],
                    ..args()
                },
                "--variants",
            ),
            (
                VolumeArgs {
                    repeat: 0,
                    ..args()
                },
                "--repeat",
            ),
            (
                VolumeArgs {
                    memory_limit_mib: Some(1),
                    ..args()
                },
                "--memory-limit-mib",
            ),
            (
                VolumeArgs {
                    memory_limit_mib: Some(u64::MAX),
                    ..args()
                },
                "--memory-limit-mib",
            ),
            (
                VolumeArgs {
                    duration_s: Some(-1.0),
                    ..args()
                },
                "duration_s",
            ),
            (
                VolumeArgs {
                    workers: Some(0),
                    ..args()
                },
                "concurrent",
            ),
            (
                VolumeArgs {
                    keys: Some(0),
                    ..args()
                },
                "keys",
            ),
        ];
        for (a, needle) in cases {
            match spec(&a) {
                Ok(_) => panic!("accepted {a:?}"),
                Err(e) => assert!(e.to_string().contains(needle), "{needle} not in {e}"),
            }
        }
    }

    #[test]
    fn overrides_shorten_runs_and_lift_the_limit() {
        let a = VolumeArgs {
            duration_s: Some(1.0),
            no_memory_limit: true,
            variants: vec!["16k-nosync".into()],
            targets: vec!["memory".into(), "tablinum".into()],
            ..args()
        };
        let (spec, p) = spec(&a).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(spec.memory_limit_bytes, None);
        assert_eq!(p.report_interval_s, 0.1);
        assert_eq!(spec.targets, ["memory", "tablinum"]);
        assert_eq!(spec.variants.len(), 1);
    }

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    fn synthetic() -> (Volume, ScenarioReport) {
        use crate::scenario::cgroup::CgroupStats;
        use crate::scenario::machine::Machine;
        use crate::scenario::report::RunMetrics;
        let (spec, _) = spec(&VolumeArgs {
            targets: s(&["tablinum", "memory"]),
            variants: s(&["8k-sync"]),
            memory_limit_mib: Some(256),
            ..args()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let child = ChildCommand {
            program: PathBuf::from("/bin/true"),
            prefix: s(&["bench"]),
            invocation: s(&[
                "tablinum", "bench", "scenario", "volume", "--quick", "--out", "x",
            ]),
        };
        let mut v = Volume::new(spec, child.clone());
        let targets = s(&["tablinum", "rocksdb"]);
        v.spec.targets = targets.clone();
        let run = |t: &str, ops: f64| RunRecord {
            variant: "8k-sync".into(),
            target: t.into(),
            repeat: 1,
            sequence: 1,
            dir: run_dir_name("8k-sync", t, 1),
            wall_s: 22.0,
            error: None,
            metrics: Some(RunMetrics {
                elapsed_s: 20.0,
                ops_per_sec: ops,
                last_window_ops_per_sec: ops / 2.0,
                last_window_s: 2.0,
                get_p99_us: 100.0,
                update_p99_us: 200.0,
                get_found_pct: 10.0,
                updates: 100_000,
                data_written_bytes: 100_000 * 8192,
                failed_ops: 0,
                disk_bytes: None,
                disk_read_bytes: Some(400_000 * 4096),
                disk_write_bytes: Some(2 * 100_000 * 8192),
                ops: 400_000,
                reclaim: None,
            }),
            memory: Some(CgroupStats {
                limit_bytes: 256 << 20,
                max_usage_bytes: 255 << 20,
                max_rss_bytes: 100 << 20,
                limit_hits: 5,
                oom_kills: 0,
            }),
        };
        let mut r = Report::new("volume", v.title(), true, &child.invocation, 2, v.body());
        r.started_at = "2026-11-21T00:00:00Z".into();
        r.machine = Machine {
            cores: Some(2),
            ram_bytes: Some(24 << 30),
            kernel: Some("6.1".into()),
            cpu_model: Some("AMD EPYC".into()),
        };
        r.git_commit = None;
        let plan = v.plan();
        for (i, rec) in [run("tablinum", 2000.0), run("rocksdb", 1000.0)]
            .into_iter()
            .enumerate()
        {
            let at = RunAt {
                cell: &targets[i],
                planned: plan.runs()[i],
                total: 2,
                label: String::new(),
                out: Path::new("x"),
                started: std::time::Instant::now(),
            };
            v.record(&mut r.body, &at, rec);
            r.runs_done += 1;
        }
        r.complete = true;
        r.finished_at = Some("2026-11-21T00:01:00Z".into());
        r.wall_s = 60.0;
        (v, r)
    }

    #[test]
    fn scenario_json_has_the_documented_shape() {
        let (_, r) = synthetic();
        let j = serde_json::to_value(&r).unwrap_or_else(|e| panic!("{e}"));
        for key in [
            "scenario",
            "complete",
            "command_line",
            "args",
            "started_at",
            "finished_at",
            "git_commit",
            "machine",
            "memory_limit_bytes",
            "memory_limit_warning",
            "targets",
            "repeat",
            "order",
            "parameters",
            "runs_total",
            "runs_done",
            "runs_failed",
            "variants",
        ] {
            assert!(j.get(key).is_some(), "missing {key}");
        }
        assert!(j.get("body").is_none());
        for key in ["cores", "ram_bytes", "kernel", "cpu_model"] {
            assert!(j["machine"].get(key).is_some(), "missing machine.{key}");
        }
        assert_eq!(j["memory_limit_bytes"], 256 << 20);
        assert_eq!(j["parameters"]["workers"], 16);
        let v = &j["variants"][0];
        assert_eq!(v["name"], "8k-sync");
        assert_eq!(v["sync"], true);
        let t = &v["targets"]["tablinum"];
        for key in [
            "ops_per_sec",
            "last_window_ops_per_sec",
            "get_p99_us",
            "update_p99_us",
        ] {
            assert!(t[key]["mean"].is_number(), "{key}.mean");
            assert!(t[key]["sd"].is_number(), "{key}.sd");
            assert!(t[key]["values"].is_array(), "{key}.values");
        }
        assert_eq!(t["ops_per_sec"]["mean"], 2000.0);
        assert_eq!(t["runs"][0]["dir"], "8k-sync/tablinum-r1");
        assert_eq!(t["runs"][0]["memory"]["max_usage_bytes"], 255u64 << 20);
        assert_eq!(v["deltas"][0]["peer"], "rocksdb");
        assert_eq!(v["deltas"][0]["overall_pct"], 100.0);
        // Round trip.
        let back: ScenarioReport = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
    }

    #[test]
    fn readme_has_command_machine_limit_and_tables() {
        let (v, mut r) = synthetic();
        let md = framework::render_markdown(&v, &r);
        assert!(
            md.starts_with("# Volume test (after martinsumner/leveled docs/VOLUME.md)\n\n```sh\n"),
            "{md}"
        );
        assert!(
            md.contains("tablinum bench scenario volume --quick --out x"),
            "{md}"
        );
        assert!(md.contains("2 cores (AMD EPYC)"), "{md}");
        assert!(
            md.contains("finished 2026-11-21T00:01:00Z: 2 runs (0 failed)"),
            "{md}"
        );
        assert!(md.contains("256.0 MiB per run"), "{md}");
        assert!(md.contains("\n## Summary\n\n| Test Description |"), "{md}");
        assert!(
            md.contains("| 8KB value, 16 workers, sync | rocksdb | 2,000.00 | +100.0% | +100.0% |"),
            "{md}"
        );
        assert!(md.contains("\n## Variants\n\n### 8k-sync — "), "{md}");
        // Write amplification and disk reads per op, from the process's I/O.
        assert!(
            md.contains("| disk writes ÷ data | disk reads/op |")
                && md.contains("| 2.00× | 4.0 KiB |"),
            "{md}"
        );
        assert!(
            md.contains("- tablinum vs rocksdb: +100.0% / +100.0%"),
            "{md}"
        );
        assert!(md.contains("## Files"), "{md}");
        assert!(!md.contains("WARNING"), "{md}");
        r.body.memory_limit_bytes = None;
        r.body.memory_limit_warning = Some(NO_MEMORY_LIMIT_WARNING.into());
        let md = framework::render_markdown(&v, &r);
        assert!(md.contains("> **WARNING** NO MEMORY LIMIT"), "{md}");
        assert!(md.contains("memory limit: **none**"), "{md}");
        assert_eq!(
            v.group_table(&r.body, &v.plan().groups[0]),
            r.variants[0].table(&r.targets, r.memory_limit_bytes)
        );
    }

    #[test]
    fn the_plan_rotates_targets_within_each_variant() {
        let (spec, _) = spec(&VolumeArgs {
            targets: s(&["tablinum", "memory"]),
            variants: s(&["8k-sync", "4k-nosync"]),
            repeat: 2,
            ..args()
        })
        .unwrap_or_else(|e| panic!("{e}"));
        let v = Volume::new(
            spec,
            ChildCommand {
                program: PathBuf::from("/bin/true"),
                prefix: vec![],
                invocation: vec![],
            },
        );
        let plan = v.plan();
        let order: Vec<(String, String, u32)> = plan
            .runs()
            .iter()
            .map(|r| {
                let g = &plan.groups[r.group];
                (g.name.clone(), g.cells[r.cell].clone(), r.repeat)
            })
            .collect();
        let want = [
            ("8k-sync", "tablinum", 1),
            ("8k-sync", "memory", 1),
            ("8k-sync", "memory", 2),
            ("8k-sync", "tablinum", 2),
            ("4k-nosync", "tablinum", 1),
        ];
        for (got, want) in order.iter().zip(want) {
            assert_eq!((got.0.as_str(), got.1.as_str(), got.2), want);
        }
        assert_eq!(order.len(), 8);
        assert_eq!(run_dir_name("8k-sync", "rocksdb", 2), "8k-sync/rocksdb-r2");
        // A run of `tablinum:KEY=VALUE` reports itself as `tablinum`, and
        // that is the run the scenario expects (a run once failed on it).
        assert_eq!(
            reported_target_name("tablinum:journal_compaction_garbage_pct=30"),
            "tablinum"
        );
        assert_eq!(reported_target_name("rocksdb-blob"), "rocksdb-blob");
        assert_eq!(reported_target_name("cluster:3"), "cluster");
        assert_eq!(
            run_dir_name("8k-sync", "tablinum:journal_compaction_garbage_pct=30", 1),
            "8k-sync/tablinum_journal_compaction_garbage_pct_30-r1"
        );
    }
}
