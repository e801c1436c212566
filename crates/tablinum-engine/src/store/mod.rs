//! The database layer: composes the journal and the ledger into a store.
//!
//! This module holds the store's state ([`Store`], `Inner`, the frozen
//! `SuperVersion` readers go through) and its public API; the work is split
//! along its seams:
//! - `write`: validation, journal append, group commit, memtable apply,
//!   write stalls, segment rolls;
//! - `read`: lookups, merged iterators, value reads (shared by every face
//!   of a store);
//! - `background`: flush, ledger compaction, installing their results;
//! - `journal_gc`: journal compaction (value GC) execution;
//! - `open`: claiming, manifest load, clean-up and journal replay.
//!
//! Invariants kept here:
//! - a write is acknowledged only after its journal record is written (and,
//!   under `Durability::Sync`, fdatasynced); recovery replays the journal
//!   from the manifest's `persisted_seq`, so nothing acknowledged is lost;
//! - files named in the manifest are never changed; a file leaves the
//!   manifest before it is deleted, and is deleted only when no snapshot or
//!   reader still holds it;
//! - journal compaction never touches segments holding writes above
//!   `persisted_seq`, and switches ledger pointers and segment lists in one
//!   manifest write.
//!
//! Lock order: `writer` -> `meta` -> `sv` (write). Never the reverse.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockWriteGuard};

use crate::aae::{self, TicTacTree};
use crate::cache::{ReadCounters, StoreCache};
use crate::error::{Error, Result};
use crate::failpoint::failpoint;
use crate::fence::Fence;
use crate::journal::record::IndexTerm;
use crate::journal::segment::{self, SegmentKind, SegmentWriter};
use crate::ledger::entry::{Entry, EntryKind};
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::SstReader;
use crate::manifest::{ManifestState, SegmentMeta};
use crate::options::Options;

mod background;
mod graveyard;
mod health;
mod journal_gc;
mod open;
mod order;
mod read;
mod read_only;
pub mod reserve;
mod shared;
mod write;

use graveyard::Graveyard;
pub use health::Health;
use health::{IoSlot, IoTracker};
pub use journal_gc::in_window;
use order::{Level, Ordered};
use read::View;
pub use read::{HeadIter, ObjectIter};
pub use read_only::ReadOnlyStore;
use shared::{Jobs, Pool};
pub use shared::{Shared, SharedOptions, WORKER_THREADS_MAX};
pub use write::Unacked;

const JOURNAL_DIR: &str = "journal";
const LEDGER_DIR: &str = "ledger";
const LOCK_FILE: &str = "LOCK";
/// Present while a ledger rebuild from the journal is in progress.
const REBUILD_MARKER_FILE: &str = "REBUILDING";
/// How often background threads wake up without a signal.
const BG_TICK_MS: u64 = 200;
/// How long a stalled writer waits between re-checks.
const STALL_RECHECK_MS: u64 = 20;

/// Metadata of an object, read without touching its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Sequence number of the write that produced it.
    pub seq: u64,
    /// Value length in bytes.
    pub value_len: u64,
    /// xxh3-64 of the value.
    pub value_hash: u64,
    /// User metadata.
    pub metadata: Vec<u8>,
    /// Secondary-index terms (index name, term).
    pub index_terms: Vec<IndexTerm>,
}

/// Extra data of a put: user metadata and secondary-index terms. The terms
/// replace the object's previous terms.
#[derive(Debug, Clone, Default)]
pub struct PutOptions {
    /// User metadata stored beside the value (returned by `head`).
    pub metadata: Vec<u8>,
    /// Secondary-index terms: (index name, term).
    pub index_terms: Vec<IndexTerm>,
}

#[derive(Debug, Clone)]
enum BatchOp {
    Put {
        key: Vec<u8>,
        /// Shared, not copied, when the caller already holds it as `Bytes`
        /// (a record decoded from a request).
        value: bytes::Bytes,
        opts: PutOptions,
    },
    Delete {
        key: Vec<u8>,
    },
}

/// One operation of a write, borrowing the caller's bytes (no copy on the
/// write path).
#[derive(Debug, Clone, Copy)]
enum OpRef<'a> {
    Put {
        key: &'a [u8],
        value: &'a [u8],
        opts: &'a PutOptions,
    },
    Delete {
        key: &'a [u8],
    },
}

impl BatchOp {
    fn as_ref(&self) -> OpRef<'_> {
        match self {
            BatchOp::Put { key, value, opts } => OpRef::Put { key, value, opts },
            BatchOp::Delete { key } => OpRef::Delete { key },
        }
    }
}

/// Operations applied atomically: after a crash either all or none are present.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    ops: Vec<BatchOp>,
}

impl Batch {
    /// An empty batch.
    pub fn new() -> Self {
        Self::default()
    }
    /// Adds a put.
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> &mut Self {
        self.put_with(key, value, PutOptions::default())
    }
    /// Adds a put with metadata and index terms.
    pub fn put_with(&mut self, key: &[u8], value: &[u8], opts: PutOptions) -> &mut Self {
        self.ops.push(BatchOp::Put {
            key: key.to_vec(),
            value: bytes::Bytes::copy_from_slice(value),
            opts,
        });
        self
    }
    /// Adds a put whose value is shared with the caller rather than copied
    /// (a record decoded from a request into `Bytes`).
    pub fn put_shared(&mut self, key: &[u8], value: bytes::Bytes) -> &mut Self {
        self.ops.push(BatchOp::Put {
            key: key.to_vec(),
            value,
            opts: PutOptions::default(),
        });
        self
    }
    /// Adds a delete.
    pub fn delete(&mut self, key: &[u8]) -> &mut Self {
        self.ops.push(BatchOp::Delete { key: key.to_vec() });
        self
    }
    /// Number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

/// One secondary-index match.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexHit {
    /// The term (when asked for).
    pub term: Option<Vec<u8>>,
    /// The object key.
    pub key: Vec<u8>,
}

/// What a journal compaction run did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JournalCompaction {
    /// Segments rewritten (and then deleted).
    pub segments_compacted: Vec<u64>,
    /// Records copied to new segments.
    pub records_relocated: u64,
    /// Records dropped as dead, when counted: a run that may hold a delete
    /// record is read whole and counts them. A run without deletes is read
    /// only where the ledger points, so its dead records are never read:
    /// `None`.
    pub records_dropped: Option<u64>,
    /// Bytes of the compacted segments.
    pub bytes_before: u64,
    /// Bytes of the compacted segments read: all of them when the run was
    /// read whole, else the spans holding live records.
    pub bytes_read: u64,
    /// Bytes of the new segments.
    pub bytes_after: u64,
}

/// What `verify` checked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Ledger tables checked.
    pub tables: u64,
    /// Ledger entries decoded.
    pub entries: u64,
    /// Journal segments checked.
    pub segments: u64,
    /// Journal records checked.
    pub records: u64,
}

/// Counters describing a store's state.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Last sequence number handed out.
    pub last_seq: u64,
    /// Every write up to this is in ledger tables.
    pub persisted_seq: u64,
    /// Tables per level.
    pub tables_per_level: Vec<usize>,
    /// Bytes per level.
    pub bytes_per_level: Vec<u64>,
    /// Journal segments.
    pub journal_segments: usize,
    /// Frozen memtables waiting for flush.
    pub immutable_memtables: usize,
    /// Estimated compaction debt.
    pub compaction_debt_bytes: u64,
    /// Flushes done since open.
    pub flushes: u64,
    /// Compactions done since open.
    pub compactions: u64,
    /// Journal compactions (value GC) that rewrote segments, since open.
    pub journal_compactions: u64,
    /// Journal bytes those reclaimed (segments' bytes before minus after).
    pub journal_bytes_reclaimed: u64,
    /// Write segments sealed and replaced by a new one since open.
    pub journal_segment_rolls: u64,
    /// Of those new segments, the ones written over a recycled file
    /// (`Options::journal_recycle_segments`).
    pub journal_segments_recycled: u64,
    /// Group-commit fdatasyncs of the journal since open (`Sync` only;
    /// rolls and closes sync on their own): synced writes ÷ this is the
    /// mean group size.
    pub journal_syncs: u64,
    /// Milliseconds writers spent stalled since open.
    pub stall_ms: u64,
    /// Background jobs that failed with a transient error and were retried.
    pub background_retries: u64,
    /// The transient error background work is failing with now, if any.
    pub background_failing: Option<String>,
    /// Obsolete files whose deletion waits for a reservation to end.
    pub deletions_deferred: usize,
    /// Bytes the memtables count now, the active one and the frozen ones
    /// (keys, entries and the map's estimated overhead).
    pub memtable_bytes: u64,
    /// Bytes of decoded ledger blocks the block cache holds now, over every
    /// store sharing it.
    pub block_cache_bytes: u64,
    /// What this store's reads cost since it opened.
    pub reads: ReadStats,
}

/// Counters of a store's reads since it opened: where a GET's time goes.
/// A found GET costs its ledger lookup (the memtables, then every L0 table
/// and one table per deeper level whose key range holds the key: a bloom
/// filter each, and on a pass one block, from the block cache or the file)
/// and one value read from the journal; the page cache, which decides
/// whether a read reaches the disk, is the operating system's and is not
/// counted here. Every read counts, whoever asks: GETs, HEADs and scans,
/// and the store's own (ledger compactions read blocks, journal compaction
/// looks up every record it scans, writes to an indexed store look up the
/// entry they replace).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadStats {
    /// Ledger blocks found in the block cache.
    pub block_cache_hits: u64,
    /// Ledger blocks read from their file.
    pub block_cache_misses: u64,
    /// Bytes of those block reads, as stored.
    pub block_read_bytes: u64,
    /// Ledger tables point lookups consulted (the key was in their range).
    pub table_probes: u64,
    /// Of those, ruled out by the bloom filter alone.
    pub bloom_negatives: u64,
    /// Of those, passed by the bloom filter but without the key.
    pub bloom_false_positives: u64,
    /// Journal records read for their values (inline values not counted).
    pub value_reads: u64,
    /// Bytes of those reads: the value alone when it is stored
    /// uncompressed, else the whole record, header and key included.
    pub value_read_bytes: u64,
}

impl ReadStats {
    /// Adds `other`'s counts to these (the sum over several stores).
    pub fn add(&mut self, other: &ReadStats) {
        self.block_cache_hits += other.block_cache_hits;
        self.block_cache_misses += other.block_cache_misses;
        self.block_read_bytes += other.block_read_bytes;
        self.table_probes += other.table_probes;
        self.bloom_negatives += other.bloom_negatives;
        self.bloom_false_positives += other.bloom_false_positives;
        self.value_reads += other.value_reads;
        self.value_read_bytes += other.value_read_bytes;
    }

    fn of(c: &ReadCounters) -> ReadStats {
        let v = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ReadStats {
            block_cache_hits: v(&c.block_hits),
            block_cache_misses: v(&c.block_misses),
            block_read_bytes: v(&c.block_read_bytes),
            table_probes: v(&c.table_probes),
            bloom_negatives: v(&c.bloom_negatives),
            bloom_false_positives: v(&c.bloom_false_positives),
            value_reads: v(&c.value_reads),
            value_read_bytes: v(&c.value_read_bytes),
        }
    }
}

/// A journal segment readable through the file cache; deleted (through
/// the owner's graveyard, which honours reservations) when marked obsolete
/// and no longer held. A read-only view's segments have no graveyard and
/// are never marked obsolete.
#[derive(Debug)]
struct Segment {
    id: u64,
    path: PathBuf,
    caches: StoreCache,
    obsolete: AtomicBool,
    graveyard: Option<Arc<Graveyard>>,
    /// A handle held for the segment's life (read-only views that let
    /// their reservation lapse: `ReadOnlyStore::pin_files`).
    pinned: std::sync::OnceLock<Arc<std::fs::File>>,
}

impl Segment {
    /// The segment's read handle: the pinned one, else the shared cache's.
    fn handle(&self) -> Result<Arc<std::fs::File>> {
        match self.pinned.get() {
            Some(f) => Ok(f.clone()),
            None => self.caches.file(self.id, &self.path),
        }
    }

    /// Holds a read handle for the segment's life.
    fn pin(&self) -> Result<()> {
        if self.pinned.get().is_none() {
            let _ = self.pinned.set(self.caches.file(self.id, &self.path)?);
        }
        Ok(())
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.caches.forget_file(self.id);
            if let Some(g) = &self.graveyard {
                g.bury_later(&self.path);
            }
            failpoint!("gc.after-delete");
        }
    }
}

/// Everything a reader needs, frozen: memtables, tables, segments.
#[derive(Debug)]
struct SuperVersion {
    /// `[0]` is the active memtable, then frozen ones newest first.
    mems: Vec<Arc<Memtable>>,
    /// L0 newest first; deeper levels in key order.
    levels: Vec<Vec<Arc<SstReader>>>,
    segments: BTreeMap<u64, Arc<Segment>>,
    debt_bytes: u64,
}

struct WriterState {
    seg: SegmentWriter,
    next_seq: u64,
    written_total: u64,
    buf: Vec<u8>,
    /// A delete record went into `seg` (its manifest flag once sealed).
    seg_deletes: bool,
}

struct MetaState {
    state: ManifestState,
}

struct GcEdit {
    remove: Vec<u64>,
    add: Vec<SegmentMeta>,
}

#[derive(Default)]
struct Counters {
    flushes: AtomicU64,
    compactions: AtomicU64,
    journal_compactions: AtomicU64,
    journal_bytes_reclaimed: AtomicU64,
    segment_rolls: AtomicU64,
    segments_recycled: AtomicU64,
    syncs: AtomicU64,
    stall_ms: AtomicU64,
}

/// Where a store's files are and how they are read: everything the read
/// path needs besides a super-version (shared by a writable store and a
/// read-only view of one).
struct Files {
    dir: PathBuf,
    journal_dir: PathBuf,
    ledger_dir: PathBuf,
    caches: StoreCache,
    /// Values fetched per read-ahead batch of an object scan.
    scan_readahead_values: usize,
}

struct Inner {
    files: Arc<Files>,
    opts: Options,
    writer: Mutex<WriterState>,
    meta: Mutex<MetaState>,
    sv: RwLock<Arc<SuperVersion>>,
    synced_total: AtomicU64,
    /// Under `Sync`: every write up to this sequence number is durable (a
    /// lower bound; raised by writers after their group commit and by
    /// readers that waited for one).
    durable_seq: AtomicU64,
    /// Bytes appended to the journal since open (mirrors the writer's count
    /// so group commit never waits for the writer lock).
    written_total: AtomicU64,
    /// The active segment's handle and path, for group-commit fsync.
    sync_target: Mutex<(Arc<fs::File>, PathBuf)>,
    /// True while a group-commit leader is in fdatasync; followers wait on
    /// `sync_cv` and are all woken at once when it finishes.
    syncing: Mutex<bool>,
    sync_cv: Condvar,
    dead: Mutex<HashMap<u64, u64>>,
    pending_gc: Mutex<Vec<(u64, GcEdit)>>,
    gc_lock: Mutex<Option<Instant>>,
    bg_lock: Mutex<()>,
    bg_cv: Condvar,
    closed: AtomicBool,
    bg_error: Mutex<Option<Arc<Error>>>,
    has_index: AtomicBool,
    counters: Counters,
    /// Whether recent values compressed (lz4 is skipped while they do not).
    compress_gate: crate::journal::record::CompressGate,
    /// (frozen memtable id, highest sequence number written before it was
    /// frozen): what `persisted_seq` becomes once it is flushed.
    seals: Mutex<Vec<(u64, u64)>>,
    /// Held by whoever runs a ledger compaction.
    compact_lock: Mutex<()>,
    /// The lock of an unfenced store (none when fenced).
    _lock_file: Option<fs::File>,
    /// The epoch fence of a fenced store.
    fence: Option<Fence>,
    /// The workers that run this store's background jobs.
    pool: Arc<Pool>,
    /// The state of this store's background jobs.
    jobs: Jobs,
    /// Deletes obsolete files, deferring those a reservation names.
    graveyard: Arc<Graveyard>,
    /// The journal I/O in flight and the last write fault (read by
    /// `health` without the writer lock).
    io: IoTracker,
    /// After a journal write or sync failed for good: the active segment
    /// and the length to cut it back to (its last good sync), while the
    /// cut has not succeeded.
    cut_pending: Mutex<Option<(PathBuf, u64)>>,
    /// The id of the segment being written (mirrors the writer's, so the
    /// file list is read without the writer lock).
    active_segment: AtomicU64,
    /// The sequence number of the last write appended (mirrors the
    /// writer's, for `stats` without the writer lock).
    last_seq: AtomicU64,
}

/// A key/value-separated store in one directory.
pub struct Store {
    inner: Arc<Inner>,
    /// Keeps the workers (private ones, for `Store::open`) running.
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.files.dir.display())
    }
}

/// A point-in-time read view; keeps its files alive until dropped.
pub struct Snapshot {
    inner: Arc<Inner>,
    sv: Arc<SuperVersion>,
    seq: u64,
}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Snapshot(seq {})", self.seq)
    }
}

impl Inner {
    /// The writer lock, in lock order (see `order`).
    fn lock_writer(&self) -> Ordered<MutexGuard<'_, WriterState>> {
        Ordered::acquire(Level::Writer, || self.writer.lock())
    }

    /// The manifest-state lock, in lock order.
    fn lock_meta(&self) -> Ordered<MutexGuard<'_, MetaState>> {
        Ordered::acquire(Level::Meta, || self.meta.lock())
    }

    /// The super-version, locked for installing a new one, in lock order.
    fn write_sv(&self) -> Ordered<RwLockWriteGuard<'_, Arc<SuperVersion>>> {
        Ordered::acquire(Level::Sv, || self.sv.write())
    }

    fn current(&self) -> Arc<SuperVersion> {
        self.sv.read().clone()
    }

    fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if let Some(e) = self.bg_error.lock().as_ref() {
            return Err(Error::Background(e.clone()));
        }
        Ok(())
    }

    /// `Err(Background)` once the store is poisoned.
    fn check_poison(&self) -> Result<()> {
        match self.bg_error.lock().as_ref() {
            Some(e) => Err(Error::Background(e.clone())),
            None => Ok(()),
        }
    }

    fn fail_background(&self, e: &Error) {
        let mut g = self.bg_error.lock();
        if g.is_none() {
            *g = Some(match e {
                Error::Background(cause) => cause.clone(),
                e => Arc::new(e.duplicate()),
            });
        }
        drop(g);
        self.bg_cv.notify_all();
        self.pool.kick();
    }

    /// `Err(Unavailable)` once a stall that began at `since` has lasted
    /// `write_stall_ms_max` while background work keeps failing.
    fn check_stall(&self, since: Instant) -> Result<()> {
        if since.elapsed() < Duration::from_millis(self.opts.write_stall_ms_max) {
            return Ok(());
        }
        match self.jobs.failing.lock().as_ref() {
            Some(why) => Err(Error::Unavailable {
                reason: format!(
                    "writes stalled for write_stall_ms_max = {} ms while background work fails: {why}",
                    self.opts.write_stall_ms_max
                ),
            }),
            None => Ok(()),
        }
    }

    fn note_dead(&self, e: &Entry) {
        if matches!(e.kind, EntryKind::Object | EntryKind::Tombstone) && e.loc.len > 0 {
            *self.dead.lock().entry(e.loc.segment).or_default() += e.loc.len as u64;
        }
    }
}

impl Store {
    /// Writes `value` under `key`. Returns the write's sequence number once
    /// it is acknowledged (durable under the store's durability mode).
    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<u64> {
        self.put_with(key, value, &PutOptions::default())
    }

    /// Writes with user metadata and secondary-index terms (which replace
    /// the object's previous terms).
    pub fn put_with(&self, key: &[u8], value: &[u8], opts: &PutOptions) -> Result<u64> {
        self.inner.write_ops(&[OpRef::Put { key, value, opts }])
    }

    /// Deletes `key` (deleting an absent key is not an error).
    pub fn delete(&self, key: &[u8]) -> Result<u64> {
        self.inner.write_ops(&[OpRef::Delete { key }])
    }

    /// Applies every operation of `batch` atomically.
    pub fn write(&self, batch: &Batch) -> Result<u64> {
        let ops: Vec<OpRef<'_>> = batch.ops.iter().map(BatchOp::as_ref).collect();
        self.inner.write_ops(&ops)
    }

    /// Applies every operation of `batch` atomically, like [`Store::write`],
    /// but returns before the write is durable: the caller may release its
    /// own locks while the fsync runs, so that writers serialised by them
    /// still share one group commit. Readers that find these writes wait
    /// for their durability first. The write counts as acknowledged only
    /// once [`Store::acknowledge`] returns `Ok`.
    pub fn write_unacked(&self, batch: &Batch) -> Result<Unacked> {
        let ops: Vec<OpRef<'_>> = batch.ops.iter().map(BatchOp::as_ref).collect();
        self.inner.write_ops_unacked(&ops)
    }

    /// Waits until a [`Store::write_unacked`] write is durable (under
    /// `Durability::Sync`) and checks no newer owner fenced the store;
    /// returns its last sequence number. An error means its outcome is
    /// unknown, as for [`Store::write`].
    pub fn acknowledge(&self, w: Unacked) -> Result<u64> {
        self.inner.acknowledge(w)
    }

    fn view(&self) -> View<'_> {
        View {
            files: &self.inner.files,
            gate: Some(&self.inner),
            sv: self.inner.current(),
        }
    }

    /// Reads a value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.check_open()?;
        self.view().get(key)
    }

    /// Reads an object's metadata without reading its value.
    pub fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.inner.check_open()?;
        self.view().head(key)
    }

    /// Forward scan of (key, value) in `range`, values read ahead in batches.
    pub fn scan_objects<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    ) -> Result<ObjectIter> {
        self.inner.check_open()?;
        self.view().objects(range.0, range.1)
    }

    /// Forward scan of (key, head) in `range`: ledger only, no value reads.
    pub fn scan_heads<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<HeadIter> {
        self.inner.check_open()?;
        self.view().heads(range.0, range.1)
    }

    /// Keys whose index `name` holds a term in `terms`, in (term, key) order,
    /// at most `limit`.
    pub fn index_query<'a>(
        &self,
        name: &[u8],
        terms: (Bound<&'a [u8]>, Bound<&'a [u8]>),
        return_terms: bool,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        self.inner.check_open()?;
        self.view()
            .index_query(name, terms.0, terms.1, return_terms, limit)
    }

    /// The tictac tree of (key, value hash) over `range`.
    pub fn aae_tree<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<TicTacTree> {
        self.inner.check_open()?;
        let mut t = TicTacTree::default();
        self.view().aae_fold(range.0, range.1, |k, h| t.add(k, h))?;
        Ok(t)
    }

    /// (key -> value hash) of the objects in `range` that fall in `segments`
    /// of the tictac tree.
    pub fn aae_keys<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
        segments: &[u32],
    ) -> Result<BTreeMap<Vec<u8>, u64>> {
        self.inner.check_open()?;
        let set: std::collections::HashSet<u32> = segments.iter().copied().collect();
        let mut out = BTreeMap::new();
        self.view().aae_fold(range.0, range.1, |k, h| {
            if set.contains(&aae::segment_of(k)) {
                out.insert(k.to_vec(), h);
            }
        })?;
        Ok(out)
    }

    /// A point-in-time view. It keeps the files it needs until dropped.
    pub fn snapshot(&self) -> Result<Snapshot> {
        self.inner.check_open()?;
        let w = self.inner.lock_writer();
        let seq = w.next_seq - 1;
        if !self.inner.current().mems[0].is_empty() {
            self.inner.rotate(seq);
        }
        let cur = self.inner.current();
        drop(w);
        // The active memtable keeps receiving writes: the snapshot holds
        // only frozen memtables, tables and segments.
        let sv = Arc::new(SuperVersion {
            mems: cur.mems[1..].to_vec(),
            levels: cur.levels.clone(),
            segments: cur.segments.clone(),
            debt_bytes: cur.debt_bytes,
        });
        Ok(Snapshot {
            inner: self.inner.clone(),
            sv,
            seq,
        })
    }

    /// Runs journal compaction now, whatever the window. Returns what it did
    /// (nothing when no run of segments is worth compacting).
    pub fn compact_journal(&self) -> Result<JournalCompaction> {
        self.inner.check_open()?;
        self.flush()?;
        let run = self.inner.journal_compaction();
        self.inner.graveyard.drain_queued();
        run
    }
}

impl Store {
    /// Freezes the active memtable and waits until every frozen memtable is
    /// in a ledger table.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_open()?;
        {
            let w = self.inner.lock_writer();
            if !self.inner.current().mems[0].is_empty() {
                self.inner.rotate(w.next_seq - 1);
            }
        }
        let since = Instant::now();
        loop {
            self.inner.check_open()?;
            if self.inner.current().mems.len() == 1 {
                return Ok(());
            }
            self.inner.check_stall(since)?;
            self.inner.pool.kick();
            let mut g = self.inner.bg_lock.lock();
            self.inner.bg_cv.notify_all();
            self.inner
                .bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
    }

    /// How long the oldest write not yet in a ledger table has waited (none:
    /// everything is flushed). Readers of the published files (scan servers)
    /// do not see such writes; a tablet server flushes a tablet whose
    /// oldest unflushed write is older than its `flush_max_age_ms`.
    pub fn unflushed_age(&self) -> Option<Duration> {
        self.inner
            .current()
            .mems
            .iter()
            .filter_map(|m| m.first_insert())
            .min()
            .map(|t| t.elapsed())
    }

    /// Freezes the active memtable for flush without waiting for the flush
    /// (nothing to do when it is empty).
    pub fn freeze(&self) -> Result<()> {
        self.inner.check_open()?;
        let w = self.inner.lock_writer();
        if !self.inner.current().mems[0].is_empty() {
            self.inner.rotate(w.next_seq - 1);
        }
        Ok(())
    }

    /// Runs ledger compactions until the policy is satisfied.
    pub fn compact_ledger(&self) -> Result<()> {
        self.flush()?;
        let r = (|| {
            while self.inner.compact_once()? {}
            Ok(())
        })();
        self.inner.graveyard.drain_queued();
        r
    }

    /// Reads every table and every journal record, checking every checksum.
    /// Meant for a quiet store (concurrent writes may be seen half-written).
    pub fn verify(&self) -> Result<VerifyReport> {
        self.inner.check_closed()?;
        let sv = self.inner.current();
        let mut rep = VerifyReport::default();
        for f in sv.levels.iter().flatten() {
            rep.entries += f.verify()?;
            rep.tables += 1;
        }
        let (active, active_len) = {
            let w = self.inner.lock_writer();
            (w.seg.id, w.seg.len)
        };
        let metas = self.inner.lock_meta().state.segments.clone();
        for s in metas.iter().filter(|s| sv.segments.contains_key(&s.id)) {
            let path = segment::segment_path(&self.inner.files.journal_dir, s.id, s.kind);
            // The active segment's records end at the writer's length: a
            // recycled file holds zeros and older bytes after them.
            let limit = if s.id == active && s.kind == SegmentKind::Write {
                active_len
            } else {
                s.scan_limit()
            };
            segment::scan(
                &path,
                s.id,
                s.kind,
                false,
                limit,
                s.first_seq(),
                |_, _, _| {
                    rep.records += 1;
                    Ok(())
                },
            )?;
            rep.segments += 1;
        }
        Ok(rep)
    }

    /// Counters describing the store now.
    pub fn stats(&self) -> Stats {
        let last_seq = self.inner.last_seq.load(Ordering::Acquire);
        let sv = self.inner.current();
        let m = self.inner.lock_meta();
        Stats {
            last_seq,
            persisted_seq: m.state.persisted_seq,
            tables_per_level: sv.levels.iter().map(Vec::len).collect(),
            bytes_per_level: sv
                .levels
                .iter()
                .map(|l| l.iter().map(|f| f.meta.size).sum())
                .collect(),
            journal_segments: sv.segments.len(),
            immutable_memtables: sv.mems.len() - 1,
            compaction_debt_bytes: sv.debt_bytes,
            flushes: self.inner.counters.flushes.load(Ordering::Relaxed),
            compactions: self.inner.counters.compactions.load(Ordering::Relaxed),
            journal_compactions: self
                .inner
                .counters
                .journal_compactions
                .load(Ordering::Relaxed),
            journal_bytes_reclaimed: self
                .inner
                .counters
                .journal_bytes_reclaimed
                .load(Ordering::Relaxed),
            journal_segment_rolls: self.inner.counters.segment_rolls.load(Ordering::Relaxed),
            journal_segments_recycled: self
                .inner
                .counters
                .segments_recycled
                .load(Ordering::Relaxed),
            journal_syncs: self.inner.counters.syncs.load(Ordering::Relaxed),
            stall_ms: self.inner.counters.stall_ms.load(Ordering::Relaxed),
            background_retries: self.inner.jobs.retries.load(Ordering::Relaxed),
            background_failing: self.inner.jobs.failing.lock().clone(),
            deletions_deferred: self.inner.graveyard.deferred(),
            memtable_bytes: sv.mems.iter().map(|m| m.bytes()).sum(),
            block_cache_bytes: self.inner.files.caches.shared().block_cache_bytes(),
            reads: ReadStats::of(self.inner.files.caches.reads()),
        }
    }

    /// The store's immutable files now, relative to its directory: every
    /// ledger table and every journal segment except the one being written.
    /// This is what a tablet publishes for readers that open files directly
    /// (the scan servers); the list is a snapshot and may be stale a moment
    /// later.
    ///
    /// Takes no lock a writer holds: a heartbeat calls it while writers may
    /// be stuck on a slow disk.
    pub fn immutable_files(&self) -> Vec<String> {
        let active = self.inner.active_segment.load(Ordering::Acquire);
        let sv = self.inner.current();
        let mut out: Vec<String> = sv
            .levels
            .iter()
            .flatten()
            .filter_map(|t| {
                let name = t.path.file_name()?.to_str()?;
                Some(format!("{LEDGER_DIR}/{name}"))
            })
            .collect();
        out.extend(
            sv.segments
                .values()
                .filter(|s| s.id != active)
                .filter_map(|s| {
                    let name = s.path.file_name()?.to_str()?;
                    Some(format!("{JOURNAL_DIR}/{name}"))
                }),
        );
        out.sort();
        out
    }

    /// The store's health now, and how long its oldest journal I/O has been
    /// in flight. Takes no lock a writer holds.
    pub fn health(&self) -> (Health, Duration) {
        let stalled = self.inner.io.stalled();
        if let Some(cause) = self.inner.bg_error.lock().clone() {
            let cut_pending = self.inner.cut_pending.lock().is_some();
            return (
                Health::Poisoned {
                    reason: cause.to_string(),
                    cut_pending,
                },
                stalled,
            );
        }
        if let Some((condition, reason)) = self.inner.io.write_fault() {
            return (Health::Degraded { condition, reason }, stalled);
        }
        if let Some(reason) = self.inner.jobs.failing.lock().clone() {
            let condition = self
                .inner
                .jobs
                .failing_condition
                .lock()
                .unwrap_or(crate::faults::Condition::Io);
            return (Health::Degraded { condition, reason }, stalled);
        }
        (Health::Serving, stalled)
    }

    /// `Err(Error::Fenced)` once an owner of a newer epoch has claimed this
    /// (fenced) store; `Ok` for an unfenced store. A reader that must not
    /// serve stale data calls it after reading.
    pub fn check_fence(&self) -> Result<()> {
        self.inner.check_fence()
    }

    /// Under `Sync`, a sequence number every write up to which is known to
    /// be durable (a lower bound). No read returns a newer write than this
    /// bound reached by the time the read returns.
    pub fn durable_seq(&self) -> u64 {
        self.inner.durable_seq.load(Ordering::Acquire)
    }

    /// The epoch this store was opened at (0: unfenced).
    pub fn epoch(&self) -> u64 {
        self.inner.fence.as_ref().map_or(0, Fence::epoch)
    }

    /// Bytes the store's files occupy.
    pub fn disk_bytes(&self) -> u64 {
        let mut total = 0;
        for d in [&self.inner.files.journal_dir, &self.inner.files.ledger_dir] {
            if let Ok(rd) = fs::read_dir(d) {
                total += rd
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum::<u64>();
            }
        }
        total
    }

    /// Stops background work and fsyncs the journal. Further calls fail with
    /// `Error::Closed`. Idempotent.
    ///
    /// On a poisoned store, `Ok` is never returned: the error says why it
    /// was poisoned. If the journal could not yet be cut back to its last
    /// good sync, every call tries again and fails with that error; only
    /// once a call has failed with the poison's own error may the store be
    /// opened again.
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            self.inner.retry_cut()?;
            return Ok(());
        }
        // Persist the memtables so the next open replays nothing, then seal
        // the active segment in the manifest: a sealed segment has a known
        // size, so damage to its tail is reported as corruption rather than
        // cut off as a torn write.
        let flushed = if self.inner.bg_error.lock().is_none() {
            self.flush()
        } else {
            Ok(())
        };
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        self.inner.bg_cv.notify_all();
        // Workers start no new job of a closed store; wait for a running one.
        while self.inner.jobs.busy() {
            let mut g = self.inner.bg_lock.lock();
            self.inner
                .bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
        // Files let go of since the workers last looked.
        self.inner.graveyard.drain_queued();
        // Released once the rest of close is done, on every path.
        struct Release<'a>(Option<&'a Fence>);
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                if let Some(f) = self.0 {
                    f.release();
                }
            }
        }
        let _release = Release(self.inner.fence.as_ref());
        if self.inner.fence.as_ref().is_some_and(Fence::is_fenced) {
            // A newer owner has the store: nothing here is this owner's to
            // persist, and failing to is no error.
            return Ok(());
        }
        let w = self.inner.lock_writer();
        // A poisoned store syncs nothing (a sync after a failed one would
        // succeed without writing what was dropped); it only makes sure the
        // journal is cut back to its last good sync.
        if let Some(e) = self.inner.bg_error.lock().clone() {
            self.inner.retry_cut()?;
            return Err(Error::Background(e));
        }
        w.seg.sync()?;
        flushed?;
        let mut meta = self.inner.lock_meta();
        let (id, len, last) = (w.seg.id, w.seg.len, w.next_seq - 1);
        if meta.state.persisted_seq >= last {
            if let Some(m) = meta.state.segments.iter_mut().find(|m| m.id == id) {
                m.max_seq = last;
                m.size = len;
                m.deletes = w.seg_deletes;
            }
            self.inner.save_manifest(&mut meta)?;
        }
        Ok(())
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

impl Inner {
    fn check_closed(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }
}

impl Snapshot {
    /// Applies every operation of `batch` atomically, like [`Store::write`],
    /// but returns before the write is durable: the caller may release its
    /// own locks while the fsync runs, so that writers serialised by them
    /// still share one group commit. Readers that find these writes wait
    /// for their durability first. The write counts as acknowledged only
    /// once [`Store::acknowledge`] returns `Ok`.
    pub fn write_unacked(&self, batch: &Batch) -> Result<Unacked> {
        let ops: Vec<OpRef<'_>> = batch.ops.iter().map(BatchOp::as_ref).collect();
        self.inner.write_ops_unacked(&ops)
    }

    /// Waits until a [`Store::write_unacked`] write is durable (under
    /// `Durability::Sync`) and checks no newer owner fenced the store;
    /// returns its last sequence number. An error means its outcome is
    /// unknown, as for [`Store::write`].
    pub fn acknowledge(&self, w: Unacked) -> Result<u64> {
        self.inner.acknowledge(w)
    }

    fn view(&self) -> View<'_> {
        View {
            files: &self.inner.files,
            gate: Some(&self.inner),
            sv: self.sv.clone(),
        }
    }
    /// Sequence number of the last write visible in the snapshot.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Reads a value as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.check_poison()?;
        self.view().get(key)
    }
    /// Reads a head as of the snapshot.
    pub fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.inner.check_poison()?;
        self.view().head(key)
    }
    /// Scans (key, value) as of the snapshot.
    pub fn scan_objects<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    ) -> Result<ObjectIter> {
        self.inner.check_poison()?;
        self.view().objects(range.0, range.1)
    }
    /// Scans (key, head) as of the snapshot.
    pub fn scan_heads<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<HeadIter> {
        self.inner.check_poison()?;
        self.view().heads(range.0, range.1)
    }
}
