//! Report scenarios: the experiments of published reports, reproduced on one
//! machine in one invocation.
//!
//! Owns the `tablinum bench scenario ...` subcommands ([`ScenarioCommand`])
//! and their dispatch. Everything scenarios share — the plan of cells ×
//! repeats in interleaved seeded order, child processes and clusters,
//! statistics with the reports' 3 std-dev ratio, target verdicts, and the
//! `scenario.json` / `README.md` / `runs.csv` / PNG outputs with their shared
//! header — is the [`framework`]; a scenario file holds only its own plan,
//! its measured cell and its tables:
//! - [`volume`] (the leveled volume report): every target side by side, each
//!   run a child process (the current binary re-executed with `bench run`)
//!   under its own cgroup v1 memory limit ([`cgroup`]); its tables are in
//!   [`report`].
//! - [`stream_limit`] (the CouchDB `stream_limit` report): index queries
//!   against one cluster (`tablinum up` as a child process), the client and
//!   its coordinator measured in this process.
//! - [`splitter`] (the Scribengin splitter report): the real `tablinum`
//!   binary's flows as child processes against one cluster and one Kafka
//!   broker, beside Kafka Streams, validated exactly once per run.
//! - [`scan_servers`] (the Accumulo scan-server report): its four tables
//!   simulated by `tablinum-sim` (the measured loopback run is still to come).
//!
//! A scenario must never measure two runs at once, never run a child outside
//! its memory limit unless told to with `--no-memory-limit` (and then it says
//! so loudly in every output), and never stop because one run failed: the
//! failure is recorded and the command fails at the end, after writing the
//! rest.

pub mod cgroup;
pub mod framework;
pub mod machine;
pub mod report;
pub mod scan_servers;
pub mod splitter;
pub mod stream_limit;
pub mod volume;

pub use self::framework::child::{prefix_before_scenario, ChildCommand};
pub use self::framework::output::{README_MD, RUNS_CSV, SCENARIO_JSON};
use crate::error::BenchError;

/// The scenarios.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ScenarioCommand {
    /// The leveled volume report's test: 8 KB incompressible values (sync and
    /// nosync), 4 KB and 16 KB (nosync), pareto keys, 5 GET : 1 UPDATE from an
    /// empty store, every target side by side, each run in its own process
    /// under a memory limit smaller than the data.
    Volume(volume::VolumeArgs),
    /// The CouchDB stream_limit report (apache/couchdb PR #2360): 1000-row
    /// index queries from random starts over q = 8, 32, 96, 192 tablets with
    /// stream limits 5, 10, 100 (one row per message) and adaptive, plus a
    /// fair grid of fixed windows 2, 5, 10 × batch rows 8, 32, limit/q,
    /// against one `tablinum up` cluster; the report's table (rows/s,
    /// std-dev %, ratio to 10 with its 3 std-dev %), adaptive against the
    /// best fixed (window, batch rows) pair, and the targets' verdicts.
    StreamLimit(stream_limit::StreamLimitArgs),
    /// The Accumulo scan-server report's four tables (large scans, grep on 1
    /// and 5 tablets, small scans), SIMULATED: the real dispatcher and busy
    /// rule in a seeded model of the report's setups, Accumulo 2.1's
    /// configuration and tablinum's default profile, beside the report's
    /// figures, with the rank correlation that validates the model.
    ScanServers(scan_servers::ScanServersArgs),
    /// The Scribengin splitter report: log records split by level into one
    /// sink per level, tablinum topics end to end (fused and a topic on
    /// every edge), Kafka → Kafka beside Kafka Streams 4.4.0, Kafka →
    /// Parquet, an 80/15/5 skew, p50/p99 at a steady rate and a worker
    /// SIGKILLed mid-run; every run validated exactly once.
    Splitter(splitter::SplitterArgs),
}

/// Runs a scenario command from the `tablinum` binary (children are started by
/// re-executing the current binary; see [`ChildCommand::from_env`]).
pub fn execute(cmd: ScenarioCommand) -> Result<(), BenchError> {
    let child = ChildCommand::from_env()?;
    let (failed, total, out) = match cmd {
        ScenarioCommand::Volume(args) => {
            let r = volume::run(&args, &child)?;
            (r.runs_failed, r.runs_total, args.out)
        }
        ScenarioCommand::StreamLimit(args) => {
            let r = stream_limit::run(&args, &child)?;
            (r.runs_failed, r.runs_total, args.out)
        }
        ScenarioCommand::Splitter(args) => {
            let r = splitter::run(&args, &child)?;
            (r.runs_failed, r.runs_total, args.out)
        }
        ScenarioCommand::ScanServers(args) => {
            let r = scan_servers::run(&args, &child)?;
            (0, r.rows.len(), args.out)
        }
    };
    if failed > 0 {
        return Err(BenchError::ScenarioIncomplete { failed, total, out });
    }
    Ok(())
}
