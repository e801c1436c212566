//! The read-only face of a store: a view of the file set its owner last
//! published (the latest manifest: ledger tables and the journal segments
//! their entries point into), for readers that do not own the store — the
//! scan servers.
//!
//! A view takes no lock and no fence, appends nothing, starts no thread and
//! never deletes or changes a file. It has no memtable: writes not yet
//! flushed by the owner are invisible, by design. It reads through the same
//! read path as the store itself (`read`), and it reserves the files it
//! reads (`reserve`) so the owner defers deleting them until the view is
//! dropped or its lease runs out.

use std::collections::{BTreeMap, HashSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::journal::segment;
use crate::ledger::compaction::LEVELS;
use crate::ledger::sst::{sst_path, SstReader};
use crate::manifest::{self, ManifestState};

use super::reserve;
use super::{
    Files, Head, HeadIter, IndexHit, ObjectIter, Segment, Shared, SuperVersion, View, JOURNAL_DIR,
    LEDGER_DIR,
};

/// Tries to reserve a file set that is still current before giving up.
const RESERVE_ATTEMPTS_MAX: usize = 8;

/// Makes every view's reservation name unique within the process.
static NEXT_VIEW: AtomicU64 = AtomicU64::new(1);

/// A read-only view of a store's published files (see the module docs).
pub struct ReadOnlyStore {
    files: Arc<Files>,
    sv: Arc<SuperVersion>,
    persisted_seq: u64,
    epoch: u64,
    names: Vec<String>,
    /// The name of this view's reservation.
    holder: String,
    released: AtomicBool,
}

impl std::fmt::Debug for ReadOnlyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ReadOnlyStore({}, epoch {}, persisted {})",
            self.files.dir.display(),
            self.epoch,
            self.persisted_seq
        )
    }
}

/// The files a manifest names, relative to the store directory.
fn names_of(dir: &Path, m: &ManifestState) -> Vec<String> {
    let ledger = dir.join(LEDGER_DIR);
    let journal = dir.join(JOURNAL_DIR);
    let name = |p: PathBuf, sub: &str| {
        let f = p.file_name().map(|f| f.to_string_lossy().into_owned());
        format!("{sub}/{}", f.unwrap_or_default())
    };
    let mut out: Vec<String> = m
        .levels
        .iter()
        .flatten()
        .map(|t| name(sst_path(&ledger, t.id), LEDGER_DIR))
        .collect();
    out.extend(
        m.segments
            .iter()
            .map(|s| name(segment::segment_path(&journal, s.id, s.kind), JOURNAL_DIR)),
    );
    out.sort();
    out
}

impl ReadOnlyStore {
    /// Opens a view of the files the store in `dir` last published, on the
    /// caches of `shared`, reserving them for `lease` under a name derived
    /// from `holder` (`[A-Za-z0-9._-]`, unique per view). Renew with
    /// [`renew`](Self::renew) before the lease ends; dropping the view
    /// releases the reservation.
    pub fn open(
        dir: impl AsRef<Path>,
        shared: &Arc<Shared>,
        holder: &str,
        lease: Duration,
    ) -> Result<ReadOnlyStore> {
        reserve::check_holder(holder)?;
        let dir = dir.as_ref().to_path_buf();
        if !dir.is_dir() {
            return Err(Error::invalid(
                "store directory",
                format!("{} does not exist or is not a directory", dir.display()),
            ));
        }
        let holder = format!("{holder}-{}", NEXT_VIEW.fetch_add(1, Ordering::Relaxed));
        let load = || {
            manifest::load_latest(&dir, u64::MAX)?.ok_or_else(|| {
                Error::invalid(
                    "store directory",
                    format!(
                        "{} has no manifest (no owner has opened the store yet)",
                        dir.display()
                    ),
                )
            })
        };
        for _ in 0..RESERVE_ATTEMPTS_MAX {
            let (state, epoch) = load()?;
            let names = names_of(&dir, &state);
            reserve::write(&dir, &holder, &names, lease)?;
            // Validate after reserving: if the manifest read now still
            // names every file, the owner's switch away from any of them
            // (and the deletion after it) comes after the reservation.
            let (now, _) = load()?;
            let current: HashSet<String> = names_of(&dir, &now).into_iter().collect();
            if names.iter().all(|n| current.contains(n)) {
                return Self::from_state(dir, shared, state, epoch, names, holder);
            }
        }
        let _ = reserve::remove(&dir, &holder);
        Err(Error::Unavailable {
            reason: format!(
                "the file set of {} changed {RESERVE_ATTEMPTS_MAX} times while it was being reserved",
                dir.display()
            ),
        })
    }

    fn from_state(
        dir: PathBuf,
        shared: &Arc<Shared>,
        state: ManifestState,
        epoch: u64,
        names: Vec<String>,
        holder: String,
    ) -> Result<ReadOnlyStore> {
        let journal_dir = dir.join(JOURNAL_DIR);
        let ledger_dir = dir.join(LEDGER_DIR);
        let caches = shared.caches.view();
        let opened = (|| {
            let mut levels: Vec<Vec<Arc<SstReader>>> = vec![Vec::new(); LEVELS];
            for (l, tables) in state.levels.iter().enumerate().take(LEVELS) {
                for t in tables {
                    levels[l].push(Arc::new(SstReader::open(
                        &ledger_dir,
                        t.id,
                        caches.clone(),
                    )?));
                }
            }
            Ok::<_, Error>(levels)
        })();
        let levels = match opened {
            Ok(l) => l,
            Err(e) => {
                let _ = reserve::remove(&dir, &holder);
                return Err(e);
            }
        };
        let segments: BTreeMap<u64, Arc<Segment>> = state
            .segments
            .iter()
            .map(|s| {
                (
                    s.id,
                    Arc::new(Segment {
                        id: s.id,
                        path: segment::segment_path(&journal_dir, s.id, s.kind),
                        caches: caches.clone(),
                        obsolete: AtomicBool::new(false),
                        graveyard: None,
                        pinned: std::sync::OnceLock::new(),
                    }),
                )
            })
            .collect();
        Ok(ReadOnlyStore {
            files: Arc::new(Files {
                dir,
                journal_dir,
                ledger_dir,
                caches,
                scan_readahead_values: crate::options::Options::default().scan_readahead_values,
            }),
            sv: Arc::new(SuperVersion {
                mems: Vec::new(),
                levels,
                segments,
                debt_bytes: 0,
            }),
            persisted_seq: state.persisted_seq,
            epoch,
            names,
            holder,
            released: AtomicBool::new(false),
        })
    }

    /// Opens and holds a handle on every file of the view, so its reads no
    /// longer need the files' names: after this, its reservation may lapse
    /// and the owner delete the files while a scan still reads them (the
    /// disk space comes back when the view is dropped).
    pub fn pin_files(&self) -> Result<()> {
        for level in &self.sv.levels {
            for t in level {
                t.pin()?;
            }
        }
        for s in self.sv.segments.values() {
            s.pin()?;
        }
        Ok(())
    }

    /// Extends the reservation by `lease` from now.
    pub fn renew(&self, lease: Duration) -> Result<()> {
        reserve::write(&self.files.dir, &self.holder, &self.names, lease)
    }

    /// Every write up to this sequence number is in the view.
    pub fn persisted_seq(&self) -> u64 {
        self.persisted_seq
    }

    /// The owner's epoch whose manifest the view was opened from.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The files the view reads (and reserves), relative to the store
    /// directory.
    pub fn files(&self) -> &[String] {
        &self.names
    }

    /// The name of the view's reservation.
    pub fn holder(&self) -> &str {
        &self.holder
    }

    fn view(&self) -> View<'_> {
        View {
            files: &self.files,
            gate: None,
            sv: self.sv.clone(),
        }
    }

    /// Reads a value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.view().get(key)
    }

    /// Reads an object's metadata.
    pub fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.view().head(key)
    }

    /// Forward scan of (key, value) in `range`.
    pub fn scan_objects<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    ) -> Result<ObjectIter> {
        self.view().objects(range.0, range.1)
    }

    /// Forward scan of (key, head) in `range`.
    pub fn scan_heads<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<HeadIter> {
        self.view().heads(range.0, range.1)
    }

    /// Keys whose index `name` holds a term in `terms`, at most `limit`.
    pub fn index_query<'a>(
        &self,
        name: &[u8],
        terms: (Bound<&'a [u8]>, Bound<&'a [u8]>),
        return_terms: bool,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        self.view()
            .index_query(name, terms.0, terms.1, return_terms, limit)
    }

    /// Releases the reservation now (dropping the view does it too).
    pub fn release(&self) -> Result<()> {
        if self.released.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        reserve::remove(&self.files.dir, &self.holder)
    }
}

impl Drop for ReadOnlyStore {
    fn drop(&mut self) {
        let _ = self.release();
    }
}
