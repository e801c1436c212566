//! tablinum's storage engine: key/value separation with a journal of values
//! (the only write-ahead log) and a ledger LSM of keys and metadata.
//!
//! The engine is a synchronous library. It knows nothing of networking,
//! async runtimes or the cluster (a test enforces the dependency rule).
//! Module map: [`journal`] (values, WAL), [`ledger`] (the LSM primitives),
//! [`store`] (the database layer that composes them), plus policies for
//! ledger compaction ([`ledger::compaction`]) and journal compaction
//! ([`gc`]), and the anti-entropy tree ([`aae`]).

pub mod aae;
pub mod cache;
pub mod codec;
pub mod error;
pub mod fence;
pub mod gc;
pub mod journal;
pub mod ledger;
pub mod manifest;
pub mod options;
pub mod store;

pub use error::{Error, Result};
pub use options::{Durability, Options};
pub use store::{
    Batch, Head, HeadIter, IndexHit, JournalCompaction, ObjectIter, PutOptions, Snapshot, Stats,
    Store, VerifyReport,
};
