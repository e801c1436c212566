//! Bounded caches of open file handles and decoded ledger blocks, shared by
//! every store of a process (or owned by one store opened on its own).
//!
//! Owns the two limits `open_files_max` (handles) and `block_cache_bytes`
//! (decoded block bytes). Each store reads through its own [`StoreCache`]
//! view, whose namespace keeps equal file ids of different stores apart,
//! and which counts that store's reads ([`ReadCounters`]: block cache hits
//! and misses, bloom probes, value reads), so a profile can say where a
//! GET's time goes. Never decides what is cached beyond "recently used":
//! callers ask, the cache evicts.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::error::{Error, Result};
use crate::ledger::block::Block;

#[derive(Clone)]
struct BlockWeighter;

/// (store namespace, file id, block offset).
type BlockKey = (u64, u64, u64);

impl Weighter<BlockKey, Arc<Block>> for BlockWeighter {
    fn weight(&self, _k: &BlockKey, v: &Arc<Block>) -> u64 {
        v.bytes() as u64
    }
}

/// Tells the kernel that reads of `f` are random, turning off its
/// read-ahead: a GET reads one record, and read-ahead of the neighbours
/// would spend page cache (and, under a memory limit, evict hot pages) on
/// data nobody asked for. Scans do their own read-ahead.
fn advise_random(f: &File) {
    crate::journal::segment::advise(f, libc::POSIX_FADV_RANDOM);
}

/// File handles and decoded blocks, bounded.
pub struct Caches {
    /// Keyed by (store namespace, file id).
    files: Cache<(u64, u64), Arc<File>>,
    blocks: Option<Cache<BlockKey, Arc<Block>, BlockWeighter>>,
}

/// Hands out store namespaces, unique within the process.
static NEXT_NAMESPACE: AtomicU64 = AtomicU64::new(1);

impl std::fmt::Debug for Caches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Caches")
    }
}

impl Caches {
    /// Caches with at most `open_files_max` handles and `block_cache_bytes` of blocks.
    pub fn new(open_files_max: usize, block_cache_bytes: u64) -> Self {
        let blocks = (block_cache_bytes > 0).then(|| {
            Cache::with_weighter(
                (block_cache_bytes / 4096).max(16) as usize,
                block_cache_bytes,
                BlockWeighter,
            )
        });
        Caches {
            files: Cache::new(open_files_max),
            blocks,
        }
    }

    /// A view for one store, with a namespace and read counters of its own.
    pub fn view(self: &Arc<Self>) -> StoreCache {
        StoreCache {
            caches: self.clone(),
            ns: NEXT_NAMESPACE.fetch_add(1, Ordering::Relaxed),
            reads: Arc::default(),
        }
    }

    /// Bytes of decoded blocks held now, over every store sharing the cache.
    pub fn block_cache_bytes(&self) -> u64 {
        self.blocks.as_ref().map_or(0, |c| c.weight())
    }
}

/// What one store's reads cost, counted since it opened (relaxed atomics:
/// each a running total, not a consistent snapshot of all of them). Every
/// read counts, whoever asks: GETs, HEADs and scans, and the store's own
/// (ledger compactions' block reads, journal compaction's liveness lookups,
/// index maintenance on writes).
#[derive(Debug, Default)]
pub struct ReadCounters {
    /// Ledger blocks found in the block cache.
    pub block_hits: AtomicU64,
    /// Ledger blocks not found there, to be read from their file.
    pub block_misses: AtomicU64,
    /// Bytes read from ledger tables for those, as stored.
    pub block_read_bytes: AtomicU64,
    /// Ledger tables a point lookup asked (the key was inside the table's
    /// key range, so its bloom filter was consulted).
    pub table_probes: AtomicU64,
    /// Of those, answered "absent" by the bloom filter alone.
    pub bloom_negatives: AtomicU64,
    /// Of those, let through by the bloom filter but without the key.
    pub bloom_false_positives: AtomicU64,
    /// Journal records read for their values (one positional read each;
    /// values kept in the ledger entry are not counted).
    pub value_reads: AtomicU64,
    /// Bytes of those reads: the value alone when it is stored
    /// uncompressed, else the whole record, header and key included.
    pub value_read_bytes: AtomicU64,
}

impl ReadCounters {
    /// Adds `n` to counter `c`.
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

/// One store's view of the shared caches: its file ids, its blocks, and the
/// counters of its reads.
#[derive(Clone)]
pub struct StoreCache {
    caches: Arc<Caches>,
    ns: u64,
    reads: Arc<ReadCounters>,
}

impl std::fmt::Debug for StoreCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "StoreCache({})", self.ns)
    }
}

impl StoreCache {
    /// A read handle on file `id` at `path`, opened on a miss.
    pub fn file(&self, id: u64, path: &Path) -> Result<Arc<File>> {
        self.caches.files.get_or_insert_with(&(self.ns, id), || {
            let f = File::open(path).map_err(|e| Error::io("open for read", path, e))?;
            advise_random(&f);
            Ok(Arc::new(f))
        })
    }

    /// Drops the handle of a file that is being deleted.
    pub fn forget_file(&self, id: u64) {
        self.caches.files.remove(&(self.ns, id));
    }

    /// A cached block; counts a hit or a miss.
    pub fn block(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        let b = self
            .caches
            .blocks
            .as_ref()
            .and_then(|c| c.get(&(self.ns, file, offset)));
        let counter = if b.is_some() {
            &self.reads.block_hits
        } else {
            &self.reads.block_misses
        };
        ReadCounters::add(counter, 1);
        b
    }

    /// This store's read counters.
    pub fn reads(&self) -> &ReadCounters {
        &self.reads
    }

    /// The caches this view reads through.
    pub fn shared(&self) -> &Caches {
        &self.caches
    }

    /// Caches a block.
    pub fn put_block(&self, file: u64, offset: u64, b: Arc<Block>) {
        if let Some(c) = &self.caches.blocks {
            c.insert((self.ns, file, offset), b);
        }
    }
}
