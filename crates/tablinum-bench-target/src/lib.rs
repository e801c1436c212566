//! The one trait every benchmarked store implements.
//!
//! A target is opened once per run from a [`TargetConfig`] and then shared by
//! all workers (`&self`, `Send + Sync`). Targets must apply the same cache
//! budget and the same fsync policy so that runs are comparable.

use std::path::PathBuf;

/// What every target is opened with: the same budget for all.
#[derive(Debug, Clone)]
pub struct TargetConfig {
    /// Directory the target owns for this run (created if missing).
    pub dir: PathBuf,
    /// `true`: fsync before acknowledging each write (`sync`); `false`: `nosync`.
    pub sync: bool,
    /// Block/row cache budget in bytes, the same for every target.
    pub cache_bytes: u64,
}

/// An error from a target operation, carried as text from the engine's own error.
#[derive(Debug)]
pub struct TargetError(pub String);

impl TargetError {
    /// A target error carrying `e`'s message (`TargetError::new(engine_error)`).
    pub fn new(e: impl std::fmt::Display) -> TargetError {
        TargetError(e.to_string())
    }
}

impl std::fmt::Display for TargetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TargetError {}

/// What one [`Target::reclaim`] call rewrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// Bytes of the files it rewrote (0: nothing was worth reclaiming).
    pub bytes_before: u64,
    /// Bytes of the files that replaced them.
    pub bytes_after: u64,
}

/// How a [`Counter`] reads over time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterKind {
    /// A running total since the store opened: reports show its change per
    /// interval and over the run.
    Total,
    /// A level now (bytes held, files waiting): reports show it per interval
    /// and its peak over the run.
    Level,
}

/// One of a store's own counters, as the store names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counter {
    /// Stable snake_case name (`value_reads`, `block_cache_hits`).
    pub name: &'static str,
    /// Its value now.
    pub value: u64,
    /// Whether it is a running total or a level.
    pub kind: CounterKind,
}

/// A store under test.
pub trait Target: Send + Sync {
    /// Short stable name (`tablinum`, `rocksdb`, `rocksdb-blob`, `fjall`, `fjall-kv`).
    fn name(&self) -> &'static str;
    /// Reads a value; `Ok(None)` when the key is absent.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError>;
    /// Reads only whether the key exists and its metadata (no value read where the
    /// engine can avoid it). Returns the value length when present.
    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError>;
    /// Writes a value, durable per the configured fsync policy when it returns.
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError>;
    /// Deletes a key (absent keys are not an error).
    fn delete(&self, key: &[u8]) -> Result<(), TargetError>;
    /// Forward scan of at most `limit` objects (keys and values) from `start`;
    /// returns the number of rows read.
    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError>;
    /// Bytes the target occupies on disk now (for reports), if cheap to know.
    fn disk_bytes(&self) -> Option<u64> {
        None
    }
    /// Runs the store's own reclamation of overwritten values once, now, and
    /// says what it rewrote (tablinum: one journal compaction run). `Ok(None)`:
    /// the target has no such step to ask for (its reclamation, if any, runs
    /// by itself, as RocksDB's compactions do).
    fn reclaim(&self) -> Result<Option<Reclaimed>, TargetError> {
        Ok(None)
    }
    /// The store's own counters now (block cache hits, bloom filter false
    /// positives, bytes held in memtables, …), read at every report interval
    /// so a run's profile says where its reads go. Empty (the default) when
    /// the target reports none. Called on the reporter thread while the
    /// workers run: must be cheap (a few short locks at most).
    fn counters(&self) -> Vec<Counter> {
        Vec::new()
    }
    /// Flushes and closes; called once at the end of a run.
    fn close(&self) -> Result<(), TargetError>;
}
