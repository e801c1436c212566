//! The ledger: an LSM of ledger key -> entry (sequence number, kind, value
//! length and hash, metadata, index terms, journal location or inline value).
//!
//! This is the primitive layer: memtables, blocks, blooms, tables, merging
//! and the compaction policy. It knows nothing of journals, background
//! threads or the store; the store composes these pieces.

pub mod block;
pub mod bloom;
pub mod compaction;
pub mod entry;
pub mod memtable;
pub mod merge;
pub mod output;
pub mod sst;
