//! The dataflow (issue "Dataflow"). Its pure core — the pieces every
//! operator, sink and validator of a flow uses, with no I/O, no clock, no
//! runtime:
//!
//! - [`definition`]: the TOML definition of a flow (sources, operators,
//!   sinks, wiring, parallelism), checked whole, every error naming its
//!   line; edges, their partitioning and which are fused.
//! - [`field`]: reads one field of a JSON record from its raw bytes (the
//!   splitter's routing key) without decoding the record; comparisons for
//!   filters; byte ranges.
//! - [`ops`]: what a split, filter, projection or key operator does to
//!   one record; unreadable records go to the dead-letter topic.
//! - [`validate`]: the built-in end-to-end validation: (window, sequence)
//!   stamps and per-window bitsets that say expected, received, lost and
//!   duplicated, mergeable across sink partitions and checkpointable.
//! - [`generator`]: the report's ~870-byte JSON log records with a level
//!   in a chosen split, stamped for the validator, deterministic by seed.
//!
//! Around that core, with I/O:
//! - [`run`]: runs a flow against a cluster — one task per source
//!   partition, operators fused in memory, every sink committing its
//!   output with the input position it covers (exactly once per sink).
//! - [`check`]: reads what sinks hold back and validates it.
//! - [`latency`]: end-to-end latency between generated topics and topic
//!   sinks, from the topics' append marks.
//! - [`worker`]: the worker role — runs the tasks the manager leases to
//!   it and reports their progress.
//! - `kafka` (feature `kafka`, on by default): Kafka sources and
//!   transactional sinks through rdkafka.
//! - `parquet_file` (feature `parquet`, on by default): the Parquet
//!   files of a file sink.

pub mod check;
pub mod definition;
pub mod field;
pub mod generator;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod latency;
pub mod ops;
#[cfg(feature = "parquet")]
pub mod parquet_file;
pub mod run;
pub mod validate;
pub mod worker;
