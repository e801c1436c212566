//! A Jepsen-style test of a real tablinum cluster.
//!
//! - [`cluster`]: the manager and tablet servers as processes, with kill,
//!   restart, pause, resume, disk faults and partitions;
//! - [`partition`]: the relay that cuts one tablet server off the manager;
//! - [`run`]: concurrent clients on a small set of registers, the nemesis
//!   schedule (every fault kind once in short mode, then random kinds),
//!   the recorded history (`history.jsonl`) and the report;
//! - [`checker`]: linearizability of one register's history (Wing-Gong
//!   with Lowe's memoization), with tests of its own.
//!
//! Run by `cargo test` in a short mode (`crates/tablinum-cli/tests/jepsen.rs`)
//! and by hand with `tablinum jepsen --seconds N --seed S`. Servers listen
//! on loopback only; every loop is bounded by the run's duration.

pub mod checker;
pub mod cluster;
pub mod partition;
pub mod run;

pub use run::{run, Fault, Report, RunConfig};
