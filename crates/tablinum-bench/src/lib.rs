//! The benchmark harness: one runner over the [`target::Target`] trait.
//!
//! Owns workload files, key/value generators, the open- and closed-loop
//! runner, basho_bench-compatible CSV output, HDR summaries, charts,
//! comparisons and the report scenarios. It never reaches inside an engine:
//! everything it measures goes through [`target::Target`].
//!
//! Module map: [`workload`] (TOML schema, limits, validation) →
//! [`generators`] (keys, values, op mix) → [`runner`] (workers, schedule,
//! reporter) → [`stats`] (HDR histograms) → [`output`] (CSV, JSON) and
//! [`chart`] (PNG); [`mod@compare`] reads run directories back; [`targets`] maps
//! `--target` names to stores (`cluster` through [`local_cluster`], a
//! `tablinum up` child process); [`scenario`] reproduces the reports'
//! experiments on one framework ([`scenario::framework`]: plan, child
//! processes and clusters, statistics, verdicts, outputs), each scenario
//! holding only its plan, its measured cell and its tables; [`cli`] wires
//! the subcommands.

pub mod chart;
pub mod cli;
pub mod compare;
pub mod error;
pub mod generators;
pub mod local_cluster;
pub mod output;
pub mod progress;
pub mod runner;
pub mod scenario;
pub mod stats;
pub mod target;
pub mod targets;
pub mod workload;

pub use compare::{compare, compare_runs, CompareReport, RunRef};
pub use error::BenchError;
pub use output::{OpSummary, RunSummary};
pub use runner::{run, run_with_options, RunOptions};
pub use targets::open_target;
pub use workload::{Mode, Op, Operations, Workload};
