//! The leveled volume report's test (martinsumner/leveled `docs/VOLUME.md`),
//! scaled to one small machine.
//!
//! Owns the variants (8 KB values with `sync` and `nosync`, 4 KB and 16 KB
//! `nosync`), their workload (incompressible `fixed` values, pareto keys over a
//! key space much larger than the run writes, 5 GET : 1 UPDATE, closed loop,
//! starting empty) and the quick / full parameters. It must never run anything
//! itself: [`super::run_scenario`] runs the children, one per variant, target
//! and repeat, under the memory limit.
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

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::{run_scenario, ChildCommand, ScenarioReport, ScenarioSpec, VariantSpec};
use crate::cli::CACHE_BYTES_DEFAULT;
use crate::error::BenchError;
use crate::targets::{known_targets, ClusterTarget, MemoryTarget};
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
/// Most repeats accepted.
pub const REPEAT_MAX: u32 = 100;

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
}

/// The report's variants that one machine can run: its tests 1, 2, 4 and 5
/// (test 3 differs only in hardware, test 6 needs secondary indexes).
pub const VARIANTS: [Variant; 4] = [
    Variant {
        name: "8k-sync",
        value_size_bytes: 8 << 10,
        sync: true,
        size_label: "8KB",
    },
    Variant {
        name: "8k-nosync",
        value_size_bytes: 8 << 10,
        sync: false,
        size_label: "8KB",
    },
    Variant {
        name: "4k-nosync",
        value_size_bytes: 4 << 10,
        sync: false,
        size_label: "4KB",
    },
    Variant {
        name: "16k-nosync",
        value_size_bytes: 16 << 10,
        sync: false,
        size_label: "16KB",
    },
];

/// `tablinum bench scenario volume` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct VolumeArgs {
    /// Short runs: 25 s each under a 1 GiB memory limit (all variants and
    /// five targets in under 10 minutes on 2 cores). Default: 10 minutes each
    /// under 2 GiB.
    #[arg(long)]
    pub quick: bool,
    /// Output directory (scenario.json, README.md, one directory per variant
    /// and run). Must not hold an earlier scenario.
    #[arg(long)]
    pub out: PathBuf,
    /// Targets, comma-separated; the first is the subject of the deltas.
    /// Default: tablinum and, when built with the `peers` feature, rocksdb,
    /// rocksdb-blob, fjall, fjall-kv.
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// Variants, comma-separated (default: 8k-sync, 8k-nosync, 4k-nosync, 16k-nosync).
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
    /// Key space (default 2M with --quick, else 20M).
    #[arg(long)]
    pub keys: Option<u64>,
    /// Concurrent workers per run.
    #[arg(long, default_value_t = WORKERS)]
    pub workers: u32,
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
    /// Key space.
    pub keys: u64,
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
        operations: Operations {
            get: GET_WEIGHT,
            update: UPDATE_WEIGHT,
            ..Operations::default()
        },
    }
}

fn usage(arg: &'static str, reason: String) -> BenchError {
    BenchError::Usage { arg, reason }
}

/// Checks `args` and turns them into the scenario to run.
pub fn spec(args: &VolumeArgs) -> Result<(ScenarioSpec, VolumeParameters), BenchError> {
    let known = known_targets();
    let targets = if args.targets.is_empty() {
        default_targets()
    } else {
        args.targets.iter().map(|t| t.trim().to_string()).collect()
    };
    for (i, t) in targets.iter().enumerate() {
        if !known.contains(&t.as_str()) {
            return Err(BenchError::UnknownTarget {
                name: t.clone(),
                known,
            });
        }
        if targets[..i].contains(t) {
            return Err(usage("--targets", format!("`{t}` is listed twice")));
        }
    }
    let variants: Vec<Variant> = if args.variants.is_empty() {
        VARIANTS.to_vec()
    } else {
        let mut chosen: Vec<Variant> = Vec::new();
        for name in &args.variants {
            let name = name.trim();
            let v = VARIANTS.iter().find(|v| v.name == name).ok_or_else(|| {
                usage(
                    "--variants",
                    format!(
                        "unknown variant `{name}` (known: {})",
                        VARIANTS.map(|v| v.name).join(", ")
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
    if args.repeat == 0 || args.repeat > REPEAT_MAX {
        return Err(usage(
            "--repeat",
            format!("{} is not in 1..={REPEAT_MAX}", args.repeat),
        ));
    }
    let run_s = args
        .duration_s
        .unwrap_or(if args.quick { QUICK_RUN_S } else { FULL_RUN_S });
    let mode_interval = if args.quick {
        QUICK_REPORT_INTERVAL_S
    } else {
        FULL_REPORT_INTERVAL_S
    };
    // At least ten report rows per run, so the last window is a tenth of it.
    let report_interval_s = (run_s / 10.0).clamp(REPORT_INTERVAL_S_MIN, mode_interval);
    let keys = args
        .keys
        .unwrap_or(if args.quick { QUICK_KEYS } else { FULL_KEYS });
    let memory_limit_bytes = if args.no_memory_limit {
        None
    } else {
        let bytes = match args.memory_limit_mib {
            Some(mib) => mib
                .checked_mul(1 << 20)
                .ok_or_else(|| usage("--memory-limit-mib", format!("{mib} MiB is too large")))?,
            None if args.quick => QUICK_MEMORY_LIMIT_BYTES,
            None => FULL_MEMORY_LIMIT_BYTES,
        };
        if bytes < super::cgroup::MEMORY_LIMIT_BYTES_MIN {
            return Err(usage(
                "--memory-limit-mib",
                format!(
                    "at least {} MiB",
                    super::cgroup::MEMORY_LIMIT_BYTES_MIN >> 20
                ),
            ));
        }
        Some(bytes)
    };
    let variant_specs = variants
        .iter()
        .map(|v| {
            let w = workload(
                v,
                run_s,
                args.op_count,
                keys,
                args.workers,
                report_interval_s,
                args.seed,
            );
            // Every field (duration, workers, keys, ...) is checked here, before
            // the first child starts.
            w.validate(&Workload::in_memory_path())?;
            Ok(VariantSpec {
                name: v.name.to_string(),
                description: format!(
                    "{} value, {} workers, {}",
                    v.size_label,
                    args.workers,
                    if v.sync { "sync" } else { "no_sync" }
                ),
                workload: w,
                sync: v.sync,
            })
        })
        .collect::<Result<Vec<_>, BenchError>>()?;
    let parameters = VolumeParameters {
        workers: args.workers,
        run_s,
        op_count: args.op_count,
        keys,
        key_generator: "pareto".into(),
        value_generator: "fixed".into(),
        op_mix: format!("get:update = {GET_WEIGHT}:{UPDATE_WEIGHT}"),
        report_interval_s,
        cache_bytes: args.cache_bytes,
        repeat: args.repeat,
        seed: args.seed,
    };
    let spec = ScenarioSpec {
        name: "volume".into(),
        title: "Volume test (after martinsumner/leveled docs/VOLUME.md)".into(),
        quick: args.quick,
        out: args.out.clone(),
        variants: variant_specs,
        targets,
        repeat: args.repeat,
        memory_limit_bytes,
        cache_bytes: args.cache_bytes,
        parameters: serde_json::to_value(&parameters).map_err(|e| BenchError::Json {
            file: args.out.join(super::SCENARIO_JSON),
            message: e.to_string(),
        })?,
    };
    Ok((spec, parameters))
}

/// Runs the volume scenario, starting children with `child`.
pub fn run(args: &VolumeArgs, child: &ChildCommand) -> Result<ScenarioReport, BenchError> {
    let (spec, _) = spec(args)?;
    run_scenario(&spec, child)
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
            workers: WORKERS,
            cache_bytes: CACHE_BYTES_DEFAULT,
            seed: VOLUME_SEED,
        }
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
            (QUICK_RUN_S, QUICK_KEYS, 1.0)
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
    fn bad_arguments_are_refused_with_the_argument_named() {
        let cases: Vec<(VolumeArgs, &str)> = vec![
            (
                VolumeArgs {
                    targets: vec!["leveldb".into()],
                    ..args()
                },
                "leveldb",
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
                    workers: 0,
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
}
