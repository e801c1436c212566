//! Deleting a store's obsolete files: at once, unless a reader's
//! reservation (see `reserve`) still names them; then later, retried by the
//! background workers until the reservation is released or expires.
//!
//! Called only with files the saved manifest no longer names (or never
//! named) and that no reader of this process holds. Never deletes a file a
//! reservation names, and treats a failure to read the reservations as
//! "reserved" (the file is retried, not deleted).

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::reserve::{self, now_ms};
use crate::ledger::sst::Remover;

/// How often deferred deletions are retried, ms.
const RETRY_MS: u64 = 1_000;

/// A store's pending deletions.
#[derive(Debug)]
pub(super) struct Graveyard {
    dir: PathBuf,
    deferred: Mutex<Vec<PathBuf>>,
    next_retry: Mutex<Option<Instant>>,
}

impl Graveyard {
    pub(super) fn new(dir: &Path) -> Arc<Graveyard> {
        Arc::new(Graveyard {
            dir: dir.to_path_buf(),
            deferred: Mutex::new(Vec::new()),
            next_retry: Mutex::new(None),
        })
    }

    /// A remover for obsolete tables that goes through this graveyard.
    pub(super) fn remover(self: &Arc<Self>) -> Remover {
        let g = self.clone();
        Arc::new(move |p: &Path| g.bury(p))
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
            let _ = fs::remove_file(path);
        } else {
            self.deferred.lock().push(path.to_path_buf());
            let mut next = self.next_retry.lock();
            next.get_or_insert_with(|| Instant::now() + Duration::from_millis(RETRY_MS));
        }
    }

    /// True when deferred deletions are waiting and their retry is due.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.next_retry.lock().is_some_and(|t| now >= t)
    }

    /// Deferred deletions waiting.
    pub(super) fn deferred(&self) -> usize {
        self.deferred.lock().len()
    }

    /// Retries the deferred deletions (and sweeps expired reservations).
    pub(super) fn retry(&self) {
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
