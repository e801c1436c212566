//! tablinum's storage engine: key/value separation with a journal of values
//! (the only write-ahead log) and a ledger LSM of keys and metadata.
//!
//! The engine is a synchronous library. It knows nothing of networking,
//! async runtimes or the cluster (a test enforces the dependency rule).
//! Module map: [`journal`] (values, WAL), [`ledger`] (the LSM primitives),
//! [`store`] (the database layer that composes them), plus policies for
//! ledger compaction ([`ledger::compaction`]) and journal compaction
//! ([`gc`]), and the anti-entropy tree ([`aae`]).

/// Declares modules that are the engine's internals: crate-private, or
/// public with the `internals` feature, which only the fuzz targets (and
/// tests that decode formats directly) enable. The public API is the
/// store, its options, errors and the anti-entropy tree.
macro_rules! internal_modules {
    ($($(#[$doc:meta])* $name:ident;)*) => {$(
        $(#[$doc])*
        #[cfg(feature = "internals")]
        pub mod $name;
        $(#[$doc])*
        #[cfg(not(feature = "internals"))]
        pub(crate) mod $name;
    )*};
}

pub mod aae;
pub mod error;
#[doc(hidden)]
pub mod failpoint;
pub mod faults;
pub mod options;
pub mod store;

internal_modules! {
    /// Bounded file-handle and block caches.
    cache;
    /// Bounds-checked byte readers and writers.
    codec;
    /// Epoch fencing of a store.
    fence;
    /// Journal compaction policy.
    gc;
    /// The journal of values.
    journal;
    /// The ledger LSM primitives.
    ledger;
    /// The manifest format.
    manifest;
}

pub use error::{Error, Result};
pub use options::{
    Durability, Options, JOURNAL_ALIGN_VALUE_BYTES_MIN_DEFAULT,
    JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT, JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT,
    JOURNAL_WRITEBACK_BYTES_DEFAULT,
};
pub use store::{
    Batch, Head, HeadIter, Health, IndexHit, JournalCompaction, ObjectIter, PutOptions,
    ReadOnlyStore, ReadStats, Shared, SharedOptions, Snapshot, Stats, Store, Unacked, VerifyReport,
};
