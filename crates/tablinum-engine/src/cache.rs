//! Bounded caches shared by a store: open file handles and decoded ledger
//! blocks.
//!
//! Owns the two limits `open_files_max` (handles) and `block_cache_bytes`
//! (decoded block bytes). Never decides what is cached beyond "recently
//! used": callers ask, the cache evicts.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use quick_cache::sync::Cache;
use quick_cache::Weighter;

use crate::error::{Error, Result};
use crate::ledger::block::Block;

#[derive(Clone)]
struct BlockWeighter;

impl Weighter<(u64, u64), Arc<Block>> for BlockWeighter {
    fn weight(&self, _k: &(u64, u64), v: &Arc<Block>) -> u64 {
        v.bytes() as u64
    }
}

/// Tells the kernel that reads of `f` are random, turning off its
/// read-ahead: a GET reads one record, and read-ahead of the neighbours
/// would spend page cache (and, under a memory limit, evict hot pages) on
/// data nobody asked for. Scans do their own read-ahead. Advisory only:
/// a failure changes nothing but speed, so it is ignored.
#[allow(unsafe_code)]
fn advise_random(f: &File) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: posix_fadvise only reads its integer arguments; the descriptor
    // is valid for the duration of the call because `f` is borrowed.
    unsafe {
        libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
}

/// File handles and decoded blocks, bounded.
pub struct Caches {
    files: Cache<u64, Arc<File>>,
    blocks: Option<Cache<(u64, u64), Arc<Block>, BlockWeighter>>,
}

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

    /// A read handle on file `id` at `path`, opened on a miss.
    pub fn file(&self, id: u64, path: &Path) -> Result<Arc<File>> {
        self.files.get_or_insert_with(&id, || {
            let f = File::open(path).map_err(|e| Error::io("open for read", path, e))?;
            advise_random(&f);
            Ok(Arc::new(f))
        })
    }

    /// Drops the handle of a file that is being deleted.
    pub fn forget_file(&self, id: u64) {
        self.files.remove(&id);
    }

    /// A cached block.
    pub fn block(&self, file: u64, offset: u64) -> Option<Arc<Block>> {
        self.blocks.as_ref()?.get(&(file, offset))
    }

    /// Caches a block.
    pub fn put_block(&self, file: u64, offset: u64, b: Arc<Block>) {
        if let Some(c) = &self.blocks {
            c.insert((file, offset), b);
        }
    }
}
