//! The in-memory, sorted part of the ledger.
//!
//! Owns an ordered map of ledger key -> entry and its byte count, behind a
//! reader-writer lock. Inserts are serialised by the store's write lock, so
//! the map's write lock is never contended by two writers; readers take the
//! read lock only for one lookup or one bounded chunk copy. (A lock-free
//! skip list was measured first: its epoch pinning and pointer chasing cost
//! ~17 % of CPU on the volume workload, more than this lock.) A memtable
//! never touches files: it is frozen and handed to a flush.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::RwLock;

use crate::ledger::entry::Entry;

/// Approximate per-entry overhead of the map, bytes.
const ENTRY_OVERHEAD_BYTES: usize = 48;

/// Hands out memtable ids, unique within the process.
static NEXT_MEMTABLE_ID: AtomicU64 = AtomicU64::new(1);

/// Sorted in-memory entries.
#[derive(Debug)]
pub struct Memtable {
    id: u64,
    map: RwLock<BTreeMap<Vec<u8>, Arc<Entry>>>,
    bytes: AtomicU64,
    /// A budget shared with other memtables: this one's bytes are added on
    /// insert and taken off again when it is dropped.
    shared_bytes: Option<Arc<AtomicU64>>,
    /// When the first entry went in.
    first_insert: std::sync::OnceLock<std::time::Instant>,
}

impl Default for Memtable {
    fn default() -> Self {
        Memtable {
            id: NEXT_MEMTABLE_ID.fetch_add(1, Ordering::Relaxed),
            map: RwLock::default(),
            bytes: AtomicU64::new(0),
            shared_bytes: None,
            first_insert: std::sync::OnceLock::new(),
        }
    }
}

impl Drop for Memtable {
    fn drop(&mut self) {
        if let Some(c) = &self.shared_bytes {
            c.fetch_sub(self.bytes.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }
}

impl Memtable {
    /// An empty memtable whose bytes also count in `shared_bytes` while it
    /// lives.
    pub fn counted(shared_bytes: Arc<AtomicU64>) -> Self {
        let mut m = Self::default();
        m.shared_bytes = Some(shared_bytes);
        m
    }

    /// When its first entry went in (none: empty).
    pub fn first_insert(&self) -> Option<std::time::Instant> {
        self.first_insert.get().copied()
    }

    /// This memtable's id: unique within the process, never reused (unlike
    /// its address), so work pending on a memtable can be keyed by it.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Inserts or replaces; returns the replaced entry.
    pub fn insert(&self, key: Vec<u8>, entry: Entry) -> Option<Arc<Entry>> {
        self.first_insert.get_or_init(std::time::Instant::now);
        let add = key.len() + entry.approx_bytes() + ENTRY_OVERHEAD_BYTES;
        self.bytes.fetch_add(add as u64, Ordering::Relaxed);
        if let Some(c) = &self.shared_bytes {
            c.fetch_add(add as u64, Ordering::Relaxed);
        }
        self.map.write().insert(key, Arc::new(entry))
    }

    /// Looks a key up.
    pub fn get(&self, key: &[u8]) -> Option<Arc<Entry>> {
        self.map.read().get(key).cloned()
    }

    /// Approximate bytes held.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.map.read().is_empty()
    }

    /// Copies up to `n` entries with keys after `from` (and before `end`).
    pub fn chunk(
        &self,
        from: Bound<&[u8]>,
        end: Bound<&[u8]>,
        n: usize,
    ) -> Vec<(Vec<u8>, Arc<Entry>)> {
        self.map
            .read()
            .range::<[u8], _>((from, end))
            .take(n)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}
