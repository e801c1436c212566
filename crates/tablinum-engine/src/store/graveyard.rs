//! Deleting a store's obsolete files: at once, unless a reader's
//! reservation (see `reserve`) still names them; then later, retried by the
//! background workers until the reservation is released or expires. A file
//! whose last in-process holder lets go of it (the drop of a journal
//! segment or ledger table handle) is only queued: that holder may be a
//! thread serving a GET, and deleting a large file can take it a second
//! under load (on a filesystem mounted with `discard`, the unlink trims
//! every extent synchronously); the background workers delete queued files
//! within a tick, and explicit maintenance calls before they return.
//!
//! Called only with files the saved manifest no longer names (or never
//! named) and that no reader of this process holds. Never deletes a file a
//! reservation names, and treats a failure to read the reservations as
//! "reserved" (the file is retried, not deleted).
//!
//! With recycling on (`Options::journal_recycle_segments`), a deleted
//! journal segment that is free to delete is instead renamed into a small
//! pool (`<id>.free` in the journal directory) from which the writer takes
//! its next segment (`SegmentWriter::recycle`). Pool files are never read;
//! an opening store deletes any it finds. A file entering the pool leaves
//! the page cache (an unlinked file's pages go with it; a renamed one's
//! would stay, holding memory values need).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::reserve::{self, now_ms};
use crate::journal::segment::{self, SegmentKind};
use crate::ledger::sst::Remover;

/// How often deferred deletions are retried, ms.
const RETRY_MS: u64 = 1_000;

/// A store's pending deletions.
#[derive(Debug)]
pub(super) struct Graveyard {
    dir: PathBuf,
    deferred: Mutex<Vec<PathBuf>>,
    next_retry: Mutex<Option<Instant>>,
    /// Files handed over by `bury_later`, not yet looked at.
    queued: Mutex<Vec<PathBuf>>,
    /// Deleted journal segments kept for reuse, when recycling is on.
    pool: Option<Pool>,
}

/// The recycling pool of deleted journal segments.
#[derive(Debug)]
struct Pool {
    journal_dir: PathBuf,
    /// Files the pool holds at most.
    files_max: usize,
    /// Smaller files are deleted, not kept: appends past a recycled file's
    /// end change its size again.
    file_bytes_min: u64,
    files: Mutex<Vec<PathBuf>>,
}

/// Extension of a file in the recycling pool.
const POOL_EXT: &str = "free";

impl Graveyard {
    pub(super) fn new(dir: &Path) -> Arc<Graveyard> {
        Graveyard::with_recycling(dir, dir, 0, 0)
    }

    /// Like `new`, keeping up to `files_max` deleted journal segments of at
    /// least `file_bytes_min` bytes for reuse (0 files: none).
    pub(super) fn with_recycling(
        dir: &Path,
        journal_dir: &Path,
        files_max: usize,
        file_bytes_min: u64,
    ) -> Arc<Graveyard> {
        Arc::new(Graveyard {
            dir: dir.to_path_buf(),
            deferred: Mutex::new(Vec::new()),
            next_retry: Mutex::new(None),
            queued: Mutex::new(Vec::new()),
            pool: (files_max > 0).then(|| Pool {
                journal_dir: journal_dir.to_path_buf(),
                files_max,
                file_bytes_min,
                files: Mutex::new(Vec::new()),
            }),
        })
    }

    /// A file from the recycling pool, if it holds one: the caller owns it
    /// and must reuse or delete it.
    pub(super) fn take_recycled(&self) -> Option<PathBuf> {
        self.pool.as_ref()?.files.lock().pop()
    }

    /// Moves a free-to-delete journal segment into the recycling pool if it
    /// has room and the file is one worth keeping; false if it did not.
    fn keep_for_reuse(&self, path: &Path) -> bool {
        let Some(pool) = &self.pool else {
            return false;
        };
        if path.parent() != Some(pool.journal_dir.as_path()) {
            return false;
        }
        let (Some(stem), Some(ext)) = (path.file_stem(), path.extension()) else {
            return false;
        };
        let segment = ext == SegmentKind::Write.ext() || ext == SegmentKind::Compacted.ext();
        if !segment || fs::metadata(path).map_or(true, |m| m.len() < pool.file_bytes_min) {
            return false;
        }
        // Before the lock, which a roll waits for under the writer lock:
        // nothing reads a segment free to delete, so no page comes back,
        // and if the pool turns out full the file is unlinked anyway.
        segment::forget_cached(path);
        let mut files = pool.files.lock();
        if files.len() >= pool.files_max {
            return false;
        }
        let to = pool
            .journal_dir
            .join(format!("{}.{POOL_EXT}", stem.to_string_lossy()));
        if fs::rename(path, &to).is_err() {
            return false;
        }
        files.push(to);
        true
    }
    /// A remover for obsolete tables that goes through this graveyard
    /// (queued: see `bury_later`).
    pub(super) fn remover(self: &Arc<Self>) -> Remover {
        let g = self.clone();
        Arc::new(move |p: &Path| g.bury_later(p))
    }

    /// Queues `path` for the background workers to delete (or defer): the
    /// caller is whichever thread dropped the file's last handle, and must
    /// not wait for the filesystem.
    pub(super) fn bury_later(&self, path: &Path) {
        self.queued.lock().push(path.to_path_buf());
    }

    /// Deletes (or defers) every queued file now.
    pub(super) fn drain_queued(&self) {
        let queued = std::mem::take(&mut *self.queued.lock());
        for p in &queued {
            self.bury(p);
        }
    }

    fn name(&self, path: &Path) -> String {
        path.strip_prefix(&self.dir)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    }

    /// Deletes `path` now, or defers it while a reservation names it.
    pub(super) fn bury(&self, path: &Path) {
        let free =
            reserve::reserved(&self.dir, now_ms()).is_ok_and(|r| !r.contains(&self.name(path)));
        if free {
            if !self.keep_for_reuse(path) {
                let _ = fs::remove_file(path);
            }
        } else {
            self.deferred.lock().push(path.to_path_buf());
            let mut next = self.next_retry.lock();
            next.get_or_insert_with(|| Instant::now() + Duration::from_millis(RETRY_MS));
        }
    }

    /// True when files are queued, or deferred deletions are waiting and
    /// their retry is due.
    pub(super) fn due(&self, now: Instant) -> bool {
        !self.queued.lock().is_empty() || self.next_retry.lock().is_some_and(|t| now >= t)
    }

    /// Deferred deletions waiting.
    pub(super) fn deferred(&self) -> usize {
        self.deferred.lock().len()
    }

    /// Deletes the queued files, then, when due, retries the deferred
    /// deletions (and sweeps expired reservations).
    pub(super) fn retry(&self) {
        self.drain_queued();
        if !self.next_retry.lock().is_some_and(|t| Instant::now() >= t) {
            return;
        }
        let _ = reserve::sweep(&self.dir, now_ms());
        let Ok(reserved) = reserve::reserved(&self.dir, now_ms()) else {
            *self.next_retry.lock() = Some(Instant::now() + Duration::from_millis(RETRY_MS));
            return;
        };
        let mut d = self.deferred.lock();
        d.retain(|p| {
            if reserved.contains(&self.name(p)) {
                return true;
            }
            let _ = fs::remove_file(p);
            false
        });
        *self.next_retry.lock() =
            (!d.is_empty()).then(|| Instant::now() + Duration::from_millis(RETRY_MS));
    }
}
