//! The `tablinum bench ...` subcommands: argument definitions and their wiring.
//!
//! Owns the clap definitions ([`BenchCommand`]) and [`execute`], which turns a
//! parsed command into library calls: load the workload, open the target,
//! run, close, clean up, print. It must never contain benchmark logic of its
//! own, and it prints results to stdout and progress to stderr only.

use std::path::{Path, PathBuf};

use crate::compare::{compare_runs, RunRef};
use crate::error::BenchError;
use crate::output::RunSummary;
use crate::runner::{run_with_options, RunOptions};
use crate::target::TargetConfig;
use crate::targets::open_target;
use crate::workload::Workload;

/// Default block/row cache budget of every target, bytes (64 MiB).
pub const CACHE_BYTES_DEFAULT: u64 = 64 << 20;
/// Name of the default data directory inside `--out`.
pub const DATA_DIR_NAME: &str = "data";

/// Benchmark commands.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Run a workload file against a target; write basho_bench-style CSVs,
    /// summary.json and summary.png into --out.
    Run {
        /// Workload TOML file.
        workload: PathBuf,
        /// Target: tablinum, memory, cluster (the Rust client against a
        /// `tablinum up` it starts; `cluster:ADDR` for a running cluster,
        /// options such as `cluster:tablets=8`), and with the `peers` feature
        /// rocksdb, rocksdb-blob, fjall, fjall-kv.
        #[arg(long)]
        target: String,
        /// Output directory for results (created if missing).
        #[arg(long)]
        out: PathBuf,
        /// Directory for the target's data (default: OUT/data, removed at the
        /// end unless --keep-data).
        #[arg(long)]
        dir: Option<PathBuf>,
        /// fsync every acknowledged write.
        #[arg(long, conflicts_with = "nosync")]
        sync: bool,
        /// Do not fsync each write (the default).
        #[arg(long)]
        nosync: bool,
        /// Block/row cache budget of the target, bytes.
        #[arg(long, default_value_t = CACHE_BYTES_DEFAULT)]
        cache_bytes: u64,
        /// Keep the target's data directory after the run.
        #[arg(long)]
        keep_data: bool,
        /// No progress bar and no status lines on stderr.
        #[arg(long)]
        quiet: bool,
        /// Run for this many seconds instead of the workload's `duration_s`
        /// (its `op_count`, if any, still stops the run earlier).
        #[arg(long)]
        duration_s: Option<f64>,
    },
    /// Compare runs: per op throughput and p99 ratios against the first
    /// (baseline) group, with 3-sigma significance for repeated runs.
    Compare {
        /// Run directories, as DIR or label=DIR; repeated runs share a label
        /// (without labels, runs are grouped by target name).
        #[arg(required = true, num_args = 2..)]
        dirs: Vec<String>,
        /// Directory for compare.md, compare.json and compare.png.
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Report scenarios: `volume` (every target side by side, each run in its
    /// own process under a memory limit) and `stream-limit` (index queries
    /// against a `tablinum up` cluster); tables, scenario.json and README.md in --out.
    #[command(subcommand)]
    Scenario(crate::scenario::ScenarioCommand),
}

/// Carries out a benchmark command.
pub fn execute(cmd: BenchCommand) -> Result<(), BenchError> {
    match cmd {
        BenchCommand::Run {
            workload,
            target,
            out,
            dir,
            sync,
            nosync: _,
            cache_bytes,
            keep_data,
            quiet,
            duration_s,
        } => {
            let mut w = Workload::load(&workload)?;
            if let Some(d) = duration_s {
                w.duration_s = Some(d);
                // The override is checked like the file's own value.
                w.validate(Path::new("--duration-s"))?;
            }
            let workload = w;
            let summary = run_command(
                &workload,
                &target,
                &out,
                dir.as_deref(),
                sync,
                cache_bytes,
                keep_data,
                !quiet,
            )?;
            print!("{}", summary_table(&summary));
            Ok(())
        }
        BenchCommand::Compare { dirs, out } => {
            let refs: Vec<RunRef> = dirs.iter().map(|d| RunRef::parse(d)).collect();
            let report = compare_runs(&refs, out.as_deref())?;
            print!("{}", report.markdown);
            Ok(())
        }
        BenchCommand::Scenario(cmd) => crate::scenario::execute(cmd),
    }
}

/// Opens `target_name`, runs `workload` into `out`, closes the target and
/// removes a data directory the run created (unless `keep_data`).
#[allow(clippy::too_many_arguments)]
pub fn run_command(
    workload: &Workload,
    target_name: &str,
    out: &Path,
    dir: Option<&Path>,
    sync: bool,
    cache_bytes: u64,
    keep_data: bool,
    progress: bool,
) -> Result<RunSummary, BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, "create output directory", e))?;
    let data_dir = dir.map_or_else(|| out.join(DATA_DIR_NAME), Path::to_path_buf);
    if dir.is_none() && data_dir.exists() {
        // The default data directory belongs to the harness: a leftover from an
        // earlier run in the same --out would skew this one.
        std::fs::remove_dir_all(&data_dir)
            .map_err(|e| BenchError::io(&data_dir, "remove stale data directory", e))?;
    }
    let created = !data_dir.exists();
    std::fs::create_dir_all(&data_dir)
        .map_err(|e| BenchError::io(&data_dir, "create data directory", e))?;
    let cfg = TargetConfig {
        dir: data_dir.clone(),
        sync,
        cache_bytes,
    };
    let target = match open_target(target_name, &cfg) {
        Ok(t) => t,
        Err(e) => {
            if created {
                // Best effort: the open error is the one to report.
                let _ = std::fs::remove_dir_all(&data_dir);
            }
            return Err(e);
        }
    };
    let result = run_with_options(
        workload,
        target.as_ref(),
        out,
        &RunOptions {
            progress,
            ..RunOptions::default()
        },
    );
    let closed = target.close().map_err(|source| BenchError::Target {
        target: target_name.to_string(),
        action: "close",
        source,
    });
    drop(target);
    if created && !keep_data {
        std::fs::remove_dir_all(&data_dir)
            .map_err(|e| BenchError::io(&data_dir, "remove data directory", e))?;
    }
    let summary = result?;
    closed?;
    Ok(summary)
}

/// A per-op markdown table of a run (count, ops/s, latency percentiles in µs).
pub fn summary_table(s: &RunSummary) -> String {
    let mut t = format!(
        "target `{}`, seed {}, {:.1} s, {:.1} ops/s (last {:.0} s: {:.1} ops/s), {} failed\n\n",
        s.target,
        s.seed,
        s.elapsed_s,
        s.ops_per_sec,
        s.last_window_s,
        s.last_window_ops_per_sec,
        s.failed
    );
    t.push_str(
        "| op | ops | not found | failed | ops/s | mean µs | p50 | p95 | p99 | p99.9 | max |\n",
    );
    t.push_str("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (name, o) in &s.ops {
        let p = &o.latency_us;
        t.push_str(&format!(
            "| {name} | {} | {} | {} | {:.1} | {:.1} | {} | {} | {} | {} | {} |\n",
            o.total,
            o.not_found,
            o.failed,
            o.ops_per_sec,
            p.mean,
            p.p50,
            p.p95,
            p.p99,
            p.p99_9,
            p.max
        ));
    }
    t
}
