//! The in-memory, sorted part of the ledger.
//!
//! Owns a concurrent skip list of ledger key -> entry and its byte count.
//! Inserts are serialised by the store's write lock; reads are lock-free.
//! A memtable never touches files: it is frozen and handed to a flush.

use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_skiplist::SkipMap;

use crate::ledger::entry::Entry;

/// Sorted in-memory entries.
#[derive(Debug, Default)]
pub struct Memtable {
    map: SkipMap<Vec<u8>, Arc<Entry>>,
    bytes: AtomicU64,
    max_seq: AtomicU64,
}

impl Memtable {
    /// An empty memtable.
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts or replaces; returns the replaced entry.
    pub fn insert(&self, key: Vec<u8>, entry: Entry) -> Option<Arc<Entry>> {
        let old = self.map.get(&key).map(|e| e.value().clone());
        let add = key.len() + entry.approx_bytes() + 32;
        self.max_seq.fetch_max(entry.seq, Ordering::Relaxed);
        self.map.insert(key, Arc::new(entry));
        self.bytes.fetch_add(add as u64, Ordering::Relaxed);
        old
    }

    /// Looks a key up.
    pub fn get(&self, key: &[u8]) -> Option<Arc<Entry>> {
        self.map.get(key).map(|e| e.value().clone())
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Highest sequence number inserted.
    pub fn max_seq(&self) -> u64 {
        self.max_seq.load(Ordering::Relaxed)
    }

    /// Copies up to `n` entries with keys after `from` (and before `end`).
    pub fn chunk(
        &self,
        from: Bound<&[u8]>,
        end: Bound<&[u8]>,
        n: usize,
    ) -> Vec<(Vec<u8>, Arc<Entry>)> {
        self.map
            .range::<[u8], _>((from, end))
            .take(n)
            .map(|e| (e.key().clone(), e.value().clone()))
            .collect()
    }

    /// All entries in key order (for flush).
    pub fn iter_all(&self) -> impl Iterator<Item = (Vec<u8>, Arc<Entry>)> + '_ {
        self.map
            .iter()
            .map(|e| (e.key().clone(), e.value().clone()))
    }
}
