//! The database layer: composes the journal and the ledger into a store.
//!
//! Owns the write path (sequence numbers, journal append, group commit,
//! memtable apply, write stalls), the read path (point reads, heads, scans,
//! index queries, snapshots, anti-entropy folds), the background flush and
//! compaction threads, journal compaction execution, and recovery at open.
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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex, RwLock};
use xxhash_rust::xxh3::xxh3_64;

use crate::aae::{self, TicTacTree};
use crate::cache::Caches;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::gc::{self, GcPolicy, SegmentStat};
use crate::journal::record::{
    self, IndexTerm, RecordParts, FLAG_BATCH_CONTINUES, KIND_DELETE, KIND_PUT,
};
use crate::journal::segment::{self, ScanEnd, SegmentKind, SegmentWriter, SEGMENT_HEADER_BYTES};
use crate::ledger::bloom::key_hash;
use crate::ledger::compaction::{self, Choice, FileSummary, Shape, LEVELS};
use crate::ledger::entry::{self, Entry, EntryKind, Loc, SPACE_INDEX, SPACE_OBJECT};
use crate::ledger::memtable::Memtable;
use crate::ledger::merge::{LevelSource, MemSource, Merge, Source, SstSource};
use crate::ledger::sst::{SstMeta, SstReader, SstWriter};
use crate::manifest::{self, ManifestState, SegmentMeta};
use crate::options::{
    Durability, Options, BATCH_OPS_MAX, INDEX_NAME_BYTES_MAX, INDEX_TERMS_ENCODED_BYTES_MAX,
    INDEX_TERMS_MAX, INDEX_TERM_BYTES_MAX, KEY_BYTES_MAX, METADATA_BYTES_MAX, VALUE_BYTES_MAX,
};

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
        value: Vec<u8>,
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
            value: value.to_vec(),
            opts,
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
    /// Records dropped as dead.
    pub records_dropped: u64,
    /// Bytes of the compacted segments.
    pub bytes_before: u64,
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
    /// Milliseconds writers spent stalled since open.
    pub stall_ms: u64,
}

/// A journal segment readable through the file cache; deleted from disk
/// when marked obsolete and no longer held.
#[derive(Debug)]
struct Segment {
    id: u64,
    path: PathBuf,
    caches: Arc<Caches>,
    obsolete: AtomicBool,
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            self.caches.forget_file(self.id);
            let _ = fs::remove_file(&self.path);
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
    stall_ms: AtomicU64,
}

struct Inner {
    dir: PathBuf,
    journal_dir: PathBuf,
    ledger_dir: PathBuf,
    opts: Options,
    caches: Arc<Caches>,
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
    pending_gc: Mutex<Vec<(usize, GcEdit)>>,
    gc_lock: Mutex<Option<Instant>>,
    bg_lock: Mutex<()>,
    bg_cv: Condvar,
    closed: AtomicBool,
    bg_error: Mutex<Option<String>>,
    has_index: AtomicBool,
    counters: Counters,
    /// (frozen memtable address, highest sequence number written before it
    /// was frozen): what `persisted_seq` becomes once it is flushed.
    seals: Mutex<Vec<(usize, u64)>>,
    /// Held by whoever runs a ledger compaction.
    compact_lock: Mutex<()>,
    /// The lock of an unfenced store (none when fenced).
    _lock_file: Option<fs::File>,
    /// The epoch fence of a fenced store.
    fence: Option<Fence>,
}

/// A key/value-separated store in one directory.
pub struct Store {
    inner: Arc<Inner>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Store({})", self.inner.dir.display())
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

fn validate_key(key: &[u8]) -> Result<()> {
    if key.is_empty() {
        return Err(Error::invalid("key", "empty key"));
    }
    if key.len() > KEY_BYTES_MAX {
        return Err(Error::invalid(
            "key",
            format!(
                "{} bytes exceeds KEY_BYTES_MAX = {KEY_BYTES_MAX} bytes",
                key.len()
            ),
        ));
    }
    Ok(())
}

fn validate_put(key: &[u8], value: &[u8], opts: &PutOptions) -> Result<()> {
    validate_key(key)?;
    if value.len() > VALUE_BYTES_MAX {
        return Err(Error::invalid(
            "value",
            format!(
                "{} bytes exceeds VALUE_BYTES_MAX = {VALUE_BYTES_MAX} bytes",
                value.len()
            ),
        ));
    }
    if opts.metadata.len() > METADATA_BYTES_MAX {
        return Err(Error::invalid(
            "metadata",
            format!(
                "{} bytes exceeds METADATA_BYTES_MAX = {METADATA_BYTES_MAX} bytes",
                opts.metadata.len()
            ),
        ));
    }
    if opts.index_terms.len() > INDEX_TERMS_MAX {
        return Err(Error::invalid(
            "index_terms",
            format!(
                "{} terms exceeds INDEX_TERMS_MAX = {INDEX_TERMS_MAX}",
                opts.index_terms.len()
            ),
        ));
    }
    for (name, term) in &opts.index_terms {
        if name.is_empty() || name.len() > INDEX_NAME_BYTES_MAX {
            return Err(Error::invalid(
                "index name",
                format!(
                    "must be 1..={INDEX_NAME_BYTES_MAX} bytes, got {}",
                    name.len()
                ),
            ));
        }
        if term.len() > INDEX_TERM_BYTES_MAX {
            return Err(Error::invalid(
                "index term",
                format!(
                    "{} bytes exceeds INDEX_TERM_BYTES_MAX = {INDEX_TERM_BYTES_MAX} bytes",
                    term.len()
                ),
            ));
        }
    }
    let encoded: usize = opts
        .index_terms
        .iter()
        .map(|(n, t)| 3 + n.len() + t.len())
        .sum();
    if encoded > INDEX_TERMS_ENCODED_BYTES_MAX {
        return Err(Error::invalid(
            "index_terms",
            format!(
                "{encoded} encoded bytes exceeds INDEX_TERMS_ENCODED_BYTES_MAX = {INDEX_TERMS_ENCODED_BYTES_MAX} bytes"
            ),
        ));
    }
    Ok(())
}

fn utc_hour_now() -> u8 {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    ((s / 3600) % 24) as u8
}

/// True when `hour` falls in the window `[start, end)`, wrapping past midnight.
pub fn in_window(hour: u8, (start, end): (u8, u8)) -> bool {
    if start <= end {
        start <= hour && hour < end
    } else {
        hour >= start || hour < end
    }
}

/// A write decoded from the journal or prepared by a caller, ready to apply.
struct Applied<'a> {
    kind: u8,
    seq: u64,
    key: &'a [u8],
    loc: Loc,
    value_len: u32,
    value_hash: u64,
    meta: &'a [u8],
    terms: &'a [u8],
    inline: Option<Vec<u8>>,
}

fn summaries(levels: &[Vec<Arc<SstReader>>]) -> Vec<Vec<FileSummary>> {
    levels
        .iter()
        .map(|l| {
            l.iter()
                .map(|f| FileSummary {
                    id: f.meta.id,
                    size: f.meta.size,
                    first_key: f.meta.first_key.clone(),
                    last_key: f.meta.last_key.clone(),
                })
                .collect()
        })
        .collect()
}

fn lookup(sv: &SuperVersion, lk: &[u8]) -> Result<Option<Arc<Entry>>> {
    for m in &sv.mems {
        if let Some(e) = m.get(lk) {
            return Ok(Some(e));
        }
    }
    let h = key_hash(lk);
    for f in &sv.levels[0] {
        if let Some(e) = f.get(lk, h)? {
            return Ok(Some(Arc::new(e)));
        }
    }
    for level in &sv.levels[1..] {
        let i = level.partition_point(|f| f.meta.last_key.as_slice() < lk);
        if let Some(f) = level.get(i) {
            if f.meta.first_key.as_slice() <= lk {
                if let Some(e) = f.get(lk, h)? {
                    return Ok(Some(Arc::new(e)));
                }
            }
        }
    }
    Ok(None)
}

fn sources(sv: &SuperVersion, start: &[u8]) -> Result<Vec<Box<dyn Source>>> {
    let mut out: Vec<Box<dyn Source>> = Vec::new();
    for m in &sv.mems {
        out.push(Box::new(MemSource::new(
            m.clone(),
            Bound::Included(start.to_vec()),
        )));
    }
    for f in &sv.levels[0] {
        out.push(Box::new(SstSource::new(f.clone(), Some(start))?));
    }
    for level in &sv.levels[1..] {
        if !level.is_empty() {
            out.push(Box::new(LevelSource::new(level.clone(), Some(start))));
        }
    }
    Ok(out)
}

/// Smallest byte string greater than every string with prefix `p` (None: no bound).
fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
    let mut v = p.to_vec();
    while let Some(last) = v.pop() {
        if last < 0xFF {
            v.push(last + 1);
            return Some(v);
        }
    }
    None
}

/// A view (current or snapshot) that reads go through. Under `Sync` it
/// hands out no entry whose write is not durable yet: a read that meets
/// one waits for the group commit that covers it (`Inner::wait_durable`).
struct View<'a> {
    inner: &'a Arc<Inner>,
    sv: Arc<SuperVersion>,
}

impl View<'_> {
    fn entry(&self, key: &[u8]) -> Result<Option<Arc<Entry>>> {
        validate_key(key)?;
        let e = lookup(&self.sv, &entry::object_key(key))?;
        if let Some(e) = &e {
            self.inner.wait_durable(e.seq)?;
        }
        Ok(e.filter(|e| e.kind == EntryKind::Object))
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.entry(key)? {
            Some(e) => self.value(key, &e).map(Some),
            None => Ok(None),
        }
    }

    fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.entry(key)?.map(|e| self.head_of(&e)).transpose()
    }

    fn head_of(&self, e: &Entry) -> Result<Head> {
        Ok(Head {
            seq: e.seq,
            value_len: e.value_len as u64,
            value_hash: e.value_hash,
            metadata: e.meta.clone(),
            index_terms: record::decode_terms(&e.terms).ok_or_else(|| {
                Error::corrupt(
                    &self.inner.ledger_dir,
                    0,
                    "malformed index terms in ledger entry",
                )
            })?,
        })
    }

    fn value(&self, key: &[u8], e: &Entry) -> Result<Vec<u8>> {
        if let Some(v) = &e.inline {
            return Ok(v.clone());
        }
        let seg = self.sv.segments.get(&e.loc.segment).ok_or_else(|| {
            Error::corrupt(
                segment::segment_path(&self.inner.journal_dir, e.loc.segment, SegmentKind::Write),
                e.loc.offset,
                "ledger entry points to a journal segment that is not in the manifest",
            )
        })?;
        let file = self.inner.caches.file(seg.id, &seg.path)?;
        let buf = segment::read_record(&file, &seg.path, e.loc.offset, e.loc.len)?;
        let rec =
            record::decode(&buf).map_err(|why| Error::corrupt(&seg.path, e.loc.offset, why))?;
        if rec.key != key || rec.seq != e.seq || rec.kind != KIND_PUT {
            return Err(Error::corrupt(
                &seg.path,
                e.loc.offset,
                "journal record does not match its ledger entry",
            ));
        }
        let v =
            record::value_of(&rec).map_err(|why| Error::corrupt(&seg.path, e.loc.offset, why))?;
        if xxh3_64(&v) != e.value_hash {
            return Err(Error::corrupt(
                &seg.path,
                e.loc.offset,
                "value hash mismatch",
            ));
        }
        Ok(v)
    }

    fn ledger_range(&self, start: Vec<u8>, end: Option<Vec<u8>>) -> Result<LedgerRange> {
        let merge = Merge::new(sources(&self.sv, &start)?)?;
        Ok(LedgerRange {
            merge,
            end,
            done: false,
            inner: self.inner.clone(),
        })
    }

    fn object_range(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<ObjectRange> {
        let mut lo = vec![SPACE_OBJECT];
        let mut skip_first = None;
        match start {
            Bound::Included(k) => lo.extend_from_slice(k),
            Bound::Excluded(k) => {
                lo.extend_from_slice(k);
                skip_first = Some(lo.clone());
            }
            Bound::Unbounded => {}
        }
        let (hi, hi_inclusive) = match end {
            Bound::Included(k) => (Some(entry::object_key(k)), true),
            Bound::Excluded(k) => (Some(entry::object_key(k)), false),
            Bound::Unbounded => (Some(vec![SPACE_INDEX]), false),
        };
        if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
            (start, end)
        {
            if a > b {
                return Err(Error::invalid("range", "start key is after end key"));
            }
        }
        let hi = if hi_inclusive {
            hi.map(|mut h| {
                h.push(0);
                h
            })
        } else {
            hi
        };
        Ok(ObjectRange {
            range: self.ledger_range(lo, hi)?,
            skip_first,
        })
    }

    fn index_query(
        &self,
        name: &[u8],
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        return_terms: bool,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        if name.is_empty() || name.len() > INDEX_NAME_BYTES_MAX {
            return Err(Error::invalid(
                "index name",
                format!(
                    "must be 1..={INDEX_NAME_BYTES_MAX} bytes, got {}",
                    name.len()
                ),
            ));
        }
        if let (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) =
            (start, end)
        {
            if a > b {
                return Err(Error::invalid("term range", "start term is after end term"));
            }
        }
        let name_prefix = entry::index_prefix(name, None);
        let term_end = |t: &[u8]| {
            let mut p = entry::index_prefix(name, Some(t));
            if let Some(l) = p.last_mut() {
                *l = 2; // just past every key with exactly this term
            }
            p
        };
        let lo = match start {
            Bound::Included(t) => entry::index_prefix(name, Some(t)),
            Bound::Excluded(t) => term_end(t),
            Bound::Unbounded => name_prefix.clone(),
        };
        let hi = match end {
            Bound::Included(t) => Some(term_end(t)),
            Bound::Excluded(t) => Some(entry::index_prefix(name, Some(t))),
            Bound::Unbounded => prefix_end(&name_prefix),
        };
        let mut range = self.ledger_range(lo, hi)?;
        let mut out = Vec::new();
        while out.len() < limit {
            let Some((k, e)) = range.next()? else {
                break;
            };
            if e.kind != EntryKind::Index {
                continue;
            }
            let (term, key) = entry::split_index_key(&k, name_prefix.len())
                .ok_or_else(|| Error::corrupt(&self.inner.ledger_dir, 0, "malformed index key"))?;
            out.push(IndexHit {
                term: return_terms.then_some(term),
                key,
            });
        }
        Ok(out)
    }

    fn aae_fold<F: FnMut(&[u8], u64)>(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
        mut f: F,
    ) -> Result<()> {
        let mut r = self.object_range(start, end)?;
        while let Some((k, e)) = r.next()? {
            f(&k, e.value_hash);
        }
        Ok(())
    }
}

struct LedgerRange {
    merge: Merge,
    end: Option<Vec<u8>>,
    done: bool,
    /// Whose durability an entry waits for before it is handed out.
    inner: Arc<Inner>,
}

impl LedgerRange {
    fn next(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        if self.done {
            return Ok(None);
        }
        match self.merge.next_with(None)? {
            Some((k, e)) if self.end.as_ref().is_none_or(|end| k < *end) => {
                self.inner.wait_durable(e.seq)?;
                Ok(Some((k, e)))
            }
            _ => {
                self.done = true;
                Ok(None)
            }
        }
    }
}

struct ObjectRange {
    range: LedgerRange,
    skip_first: Option<Vec<u8>>,
}

impl ObjectRange {
    /// Next live object as (user key, entry).
    fn next(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        loop {
            let Some((k, e)) = self.range.next()? else {
                return Ok(None);
            };
            if let Some(s) = self.skip_first.take() {
                if s == k {
                    continue;
                }
            }
            if e.kind == EntryKind::Object {
                return Ok(Some((k[1..].to_vec(), e)));
            }
        }
    }
}

/// Iterator over (key, head) of live objects in a key range.
pub struct HeadIter {
    inner: Arc<Inner>,
    sv: Arc<SuperVersion>,
    range: ObjectRange,
    failed: bool,
}

impl Iterator for HeadIter {
    type Item = Result<(Vec<u8>, Head)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let view = View {
            inner: &self.inner,
            sv: self.sv.clone(),
        };
        let r = self
            .range
            .next()
            .and_then(|o| o.map(|(k, e)| Ok((k, view.head_of(&e)?))).transpose());
        match r {
            Ok(x) => x.map(Ok),
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Iterator over (key, value) of live objects in a key range. Values are
/// fetched in batches of `scan_readahead_values`, read in journal order.
pub struct ObjectIter {
    inner: Arc<Inner>,
    sv: Arc<SuperVersion>,
    range: ObjectRange,
    ready: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    exhausted: bool,
    failed: bool,
}

impl ObjectIter {
    fn refill(&mut self) -> Result<()> {
        let view = View {
            inner: &self.inner,
            sv: self.sv.clone(),
        };
        let mut batch: Vec<(Vec<u8>, Arc<Entry>)> = Vec::new();
        while batch.len() < self.inner.opts.scan_readahead_values {
            match self.range.next()? {
                Some(x) => batch.push(x),
                None => {
                    self.exhausted = true;
                    break;
                }
            }
        }
        let mut order: Vec<usize> = (0..batch.len()).collect();
        order.sort_by_key(|&i| (batch[i].1.loc.segment, batch[i].1.loc.offset));
        let mut values: Vec<Option<Vec<u8>>> = vec![None; batch.len()];
        for i in order {
            values[i] = Some(view.value(&batch[i].0, &batch[i].1)?);
        }
        for ((k, _), v) in batch.into_iter().zip(values) {
            self.ready.push_back((k, v.unwrap_or_default()));
        }
        Ok(())
    }
}

impl Iterator for ObjectIter {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        if self.ready.is_empty() && !self.exhausted {
            if let Err(e) = self.refill() {
                self.failed = true;
                return Some(Err(e));
            }
        }
        self.ready.pop_front().map(Ok)
    }
}

impl Inner {
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

    fn fail_background(&self, e: &Error) {
        let mut g = self.bg_error.lock();
        if g.is_none() {
            *g = Some(e.to_string());
        }
        self.bg_cv.notify_all();
    }

    fn note_dead(&self, e: &Entry) {
        if matches!(e.kind, EntryKind::Object | EntryKind::Tombstone) && e.loc.len > 0 {
            *self.dead.lock().entry(e.loc.segment).or_default() += e.loc.len as u64;
        }
    }

    /// Applies one write to the active memtable (caller holds the writer
    /// lock, or is recovering alone). With `only_if_newer`, a write older than
    /// the key's current entry is skipped (journal rebuild order).
    fn apply(&self, sv: &SuperVersion, a: Applied<'_>, only_if_newer: bool) -> Result<()> {
        let lk = entry::object_key(a.key);
        let need_old =
            only_if_newer || self.has_index.load(Ordering::Relaxed) || !a.terms.is_empty();
        let old = if need_old { lookup(sv, &lk)? } else { None };
        if only_if_newer && old.as_ref().is_some_and(|o| o.seq >= a.seq) {
            return Ok(());
        }
        let mem = &sv.mems[0];
        let kind = if a.kind == KIND_PUT {
            EntryKind::Object
        } else {
            EntryKind::Tombstone
        };
        let new_terms: Vec<IndexTerm> = record::decode_terms(a.terms).unwrap_or_default();
        if let Some(o) = &old {
            if o.kind == EntryKind::Object && !o.terms.is_empty() {
                for t in record::decode_terms(&o.terms).unwrap_or_default() {
                    if !new_terms.contains(&t) {
                        mem.insert(
                            entry::index_key(&t.0, &t.1, a.key),
                            Entry::index(a.seq, false),
                        );
                    }
                }
            }
        }
        if !new_terms.is_empty() {
            self.has_index.store(true, Ordering::Relaxed);
            for t in &new_terms {
                mem.insert(
                    entry::index_key(&t.0, &t.1, a.key),
                    Entry::index(a.seq, true),
                );
            }
        }
        let e = Entry {
            seq: a.seq,
            kind,
            value_len: a.value_len,
            value_hash: a.value_hash,
            loc: a.loc,
            meta: a.meta.to_vec(),
            terms: a.terms.to_vec(),
            inline: a.inline,
        };
        if let Some(replaced) = mem.insert(lk, e) {
            self.note_dead(&replaced);
        }
        Ok(())
    }

    /// Freezes the active memtable (caller holds the writer lock); once it is
    /// flushed, every write up to `seal_seq` is in ledger tables.
    fn rotate(&self, seal_seq: u64) -> Arc<Memtable> {
        let mut g = self.sv.write();
        let old = g.mems[0].clone();
        let mut mems = Vec::with_capacity(g.mems.len() + 1);
        mems.push(Arc::new(Memtable::new()));
        mems.extend(g.mems.iter().cloned());
        *g = Arc::new(SuperVersion {
            mems,
            levels: g.levels.clone(),
            segments: g.segments.clone(),
            debt_bytes: g.debt_bytes,
        });
        drop(g);
        self.seals
            .lock()
            .push((Arc::as_ptr(&old) as usize, seal_seq));
        self.bg_cv.notify_all();
        old
    }

    fn wait_for_room(&self) -> Result<()> {
        let mut stalled_since: Option<Instant> = None;
        loop {
            self.check_open()?;
            let sv = self.current();
            let imm = sv.mems.len() - 1;
            if imm < self.opts.immutable_memtables_max
                && sv.levels[0].len() < self.opts.l0_stall_files
                && sv.debt_bytes <= self.opts.compaction_debt_bytes_max
            {
                if let Some(t) = stalled_since {
                    self.counters
                        .stall_ms
                        .fetch_add(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                return Ok(());
            }
            stalled_since.get_or_insert_with(Instant::now);
            let mut g = self.bg_lock.lock();
            self.bg_cv.notify_all();
            self.bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
    }

    /// Seals the active segment and opens a new one (caller holds the writer lock).
    /// A read handle on journal segment `id`.
    fn segment_handle(&self, id: u64, kind: SegmentKind) -> Arc<Segment> {
        Arc::new(Segment {
            id,
            path: segment::segment_path(&self.journal_dir, id, kind),
            caches: self.caches.clone(),
            obsolete: AtomicBool::new(false),
        })
    }

    /// Makes segments readable through the current view (segments already
    /// there keep their handle).
    fn publish_segments(&self, segs: &[(u64, SegmentKind)]) {
        let mut g = self.sv.write();
        let mut segments = g.segments.clone();
        for &(id, kind) in segs {
            segments
                .entry(id)
                .or_insert_with(|| self.segment_handle(id, kind));
        }
        *g = Arc::new(SuperVersion {
            mems: g.mems.clone(),
            levels: g.levels.clone(),
            segments,
            debt_bytes: g.debt_bytes,
        });
    }

    /// Seals the active segment and opens a new one (caller holds the writer
    /// lock). Any failure is fatal for the store: a half-done roll must not
    /// be retried (an fsync error is reported once) nor leave the in-memory
    /// manifest ahead of the one on disk.
    fn roll(&self, w: &mut WriterState) -> Result<()> {
        let r = self.roll_once(w);
        if let Err(e) = &r {
            self.fail_background(e);
        }
        r
    }

    fn roll_once(&self, w: &mut WriterState) -> Result<()> {
        w.seg.sync()?;
        self.synced_total
            .fetch_max(w.written_total, Ordering::AcqRel);
        let mut meta = self.meta.lock();
        let id = meta.state.next_file_id;
        let new = SegmentWriter::create(&self.journal_dir, id, SegmentKind::Write)?;
        new.sync()?;
        manifest::sync_dir(&self.journal_dir)?;
        let sealed_seq = w.next_seq - 1;
        let old_id = w.seg.id;
        let old_len = w.seg.len;
        // Edit a copy; the live state changes only once the copy is on disk.
        let mut next = MetaState {
            state: meta.state.clone(),
        };
        next.state.next_file_id = id + 1;
        if let Some(m) = next.state.segments.iter_mut().find(|s| s.id == old_id) {
            m.max_seq = sealed_seq;
            m.size = old_len;
        }
        next.state.segments.push(SegmentMeta {
            id,
            kind: SegmentKind::Write,
            min_seq: w.next_seq,
            max_seq: u64::MAX,
            size: 0,
            dead_bytes: 0,
        });
        self.save_manifest(&mut next)?;
        meta.state = next.state;
        self.publish_segments(&[(id, SegmentKind::Write)]);
        drop(meta);
        *self.sync_target.lock() = (Arc::new(new.try_clone_file()?), new.path.clone());
        w.seg = new;
        Ok(())
    }

    fn save_manifest(&self, meta: &mut MetaState) -> Result<()> {
        let dead: Vec<(u64, u64)> = self.dead.lock().drain().collect();
        for (id, bytes) in dead {
            if let Some(s) = meta.state.segments.iter_mut().find(|s| s.id == id) {
                s.dead_bytes += bytes;
            }
        }
        let epoch = self.fence.as_ref().map_or(0, Fence::epoch);
        manifest::save_epoch(&self.dir, &meta.state, epoch)?;
        // Whatever this switch dropped may be deleted only if no newer
        // owner had claimed the store when it was written (a newer owner
        // reads the manifest after claiming, so it saw this one).
        self.check_fence()
    }

    /// `Err(Fenced)` once a newer owner has claimed a fenced store.
    fn check_fence(&self) -> Result<()> {
        match &self.fence {
            Some(f) => f.check(),
            None => Ok(()),
        }
    }

    fn write_ops(&self, ops: &[OpRef<'_>]) -> Result<u64> {
        if self.fence.as_ref().is_some_and(Fence::is_fenced) {
            return self.check_fence().map(|()| 0);
        }
        if ops.is_empty() {
            return Err(Error::invalid("batch", "no operations"));
        }
        if ops.len() > BATCH_OPS_MAX {
            return Err(Error::invalid(
                "batch",
                format!(
                    "{} operations exceeds BATCH_OPS_MAX = {BATCH_OPS_MAX}",
                    ops.len()
                ),
            ));
        }
        for op in ops {
            match op {
                OpRef::Put { key, value, opts } => validate_put(key, value, opts)?,
                OpRef::Delete { key } => validate_key(key)?,
            }
        }
        // Work that needs no lock: compression, hashing, term encoding.
        struct Prepared<'a> {
            kind: u8,
            key: &'a [u8],
            meta: &'a [u8],
            terms: Vec<u8>,
            stored: std::borrow::Cow<'a, [u8]>,
            flag: u8,
            value_len: u32,
            hash: u64,
            inline: Option<Vec<u8>>,
        }
        let prepared: Vec<Prepared<'_>> = ops
            .iter()
            .map(|op| match *op {
                OpRef::Put { key, value, opts } => {
                    let (stored, flag) = record::compress_value(value, self.opts.value_compression);
                    Prepared {
                        kind: KIND_PUT,
                        key,
                        meta: &opts.metadata,
                        terms: record::encode_terms(&opts.index_terms),
                        stored,
                        flag,
                        value_len: value.len() as u32,
                        hash: xxh3_64(value),
                        inline: (value.len() <= self.opts.inline_value_bytes_max)
                            .then(|| value.to_vec()),
                    }
                }
                OpRef::Delete { key } => Prepared {
                    kind: KIND_DELETE,
                    key,
                    meta: &[],
                    terms: Vec::new(),
                    stored: std::borrow::Cow::Borrowed(&[]),
                    flag: 0,
                    value_len: 0,
                    hash: 0,
                    inline: None,
                },
            })
            .collect();
        self.wait_for_room()?;
        let (last_seq, end) = {
            let mut w = self.writer.lock();
            self.check_open()?;
            let total: usize = prepared
                .iter()
                .map(|p| {
                    record::encoded_len(&RecordParts {
                        kind: p.kind,
                        flags: p.flag,
                        key: p.key,
                        meta: p.meta,
                        terms: &p.terms,
                        stored_value: &p.stored,
                        value_len: p.value_len,
                    })
                })
                .sum();
            if w.seg.len > SEGMENT_HEADER_BYTES
                && w.seg.len + total as u64 > self.opts.journal_segment_bytes_max
            {
                self.roll(&mut w)?;
            }
            let first_seq = w.next_seq;
            let mut buf = std::mem::take(&mut w.buf);
            buf.clear();
            let mut lens = Vec::with_capacity(prepared.len());
            for (i, p) in prepared.iter().enumerate() {
                let flags = p.flag
                    | if i + 1 < prepared.len() {
                        FLAG_BATCH_CONTINUES
                    } else {
                        0
                    };
                let parts = RecordParts {
                    kind: p.kind,
                    flags,
                    key: p.key,
                    meta: p.meta,
                    terms: &p.terms,
                    stored_value: &p.stored,
                    value_len: p.value_len,
                };
                lens.push(record::encode(&mut buf, &parts, first_seq + i as u64));
            }
            let at = match w.seg.append(&buf) {
                Ok(at) => at,
                Err(e) => {
                    self.fail_background(&e);
                    return Err(e);
                }
            };
            w.written_total += buf.len() as u64;
            self.written_total.store(w.written_total, Ordering::Release);
            w.next_seq += prepared.len() as u64;
            w.buf = buf;
            let seg_id = w.seg.id;
            let sv = self.current();
            let mut off = at;
            for (i, (p, len)) in prepared.into_iter().zip(lens).enumerate() {
                self.apply(
                    &sv,
                    Applied {
                        kind: p.kind,
                        seq: first_seq + i as u64,
                        key: p.key,
                        loc: Loc {
                            segment: seg_id,
                            offset: off,
                            len: len as u32,
                        },
                        value_len: p.value_len,
                        value_hash: p.hash,
                        meta: p.meta,
                        terms: &p.terms,
                        inline: p.inline,
                    },
                    false,
                )
                .inspect_err(|e| self.fail_background(e))?;
                off += len as u64;
            }
            if sv.mems[0].bytes() >= self.opts.memtable_bytes_max {
                self.rotate(w.next_seq - 1);
            }
            (w.next_seq - 1, w.written_total)
        };
        if self.opts.durability == Durability::Sync {
            self.group_sync(end)?;
            self.durable_seq.fetch_max(last_seq, Ordering::AcqRel);
        }
        // Acknowledge only if no newer owner had claimed the store after the
        // append: a newer owner claims before it reads the journal, so a
        // passing check means it will replay this record.
        self.check_fence().map_err(|e| match e {
            Error::Fenced {
                dir, epoch, found, ..
            } => Error::Fenced {
                dir,
                epoch,
                found,
                outcome_unknown: true,
            },
            e => e,
        })?;
        Ok(last_seq)
    }

    /// Under `Sync`, returns once the write of `seq` is durable, joining (or
    /// leading) a group commit if it may not be yet: a reader never sees a
    /// write that a crash could still take back. `seq` was read from an
    /// entry the reader found, so its record was appended (and counted in
    /// `written_total`) before that entry was applied.
    fn wait_durable(&self, seq: u64) -> Result<()> {
        if self.opts.durability != Durability::Sync
            || seq <= self.durable_seq.load(Ordering::Acquire)
        {
            return Ok(());
        }
        self.group_sync(self.written_total.load(Ordering::Acquire))?;
        self.durable_seq.fetch_max(seq, Ordering::AcqRel);
        Ok(())
    }

    /// Group commit: one fdatasync covers every writer that appended before
    /// it. One writer at a time leads; the others wait and are all woken
    /// together (a mutex hand-off would wake them one by one, which on two
    /// cores cost more than the fsync itself).
    fn group_sync(&self, end: u64) -> Result<()> {
        loop {
            if self.synced_total.load(Ordering::Acquire) >= end {
                return Ok(());
            }
            let mut syncing = self.syncing.lock();
            if self.synced_total.load(Ordering::Acquire) >= end {
                return Ok(());
            }
            if *syncing {
                self.sync_cv.wait(&mut syncing);
                drop(syncing);
                // After a failed fsync the state of the page cache is
                // unknown: never retry it, fail every waiter instead.
                if let Some(e) = self.bg_error.lock().as_ref() {
                    return Err(Error::Background(e.clone()));
                }
                continue;
            }
            *syncing = true;
            drop(syncing);
            // Read the total before the handle: if a roll happens in between,
            // the roll's own fsync covers the old segment and this one covers
            // the new, so everything up to `total` is durable afterwards.
            let total = self.written_total.load(Ordering::Acquire);
            let (file, path) = self.sync_target.lock().clone();
            let r = file.sync_data();
            if r.is_ok() {
                self.synced_total.fetch_max(total, Ordering::AcqRel);
            }
            *self.syncing.lock() = false;
            self.sync_cv.notify_all();
            if let Err(e) = r {
                let e = Error::io("fsync journal", path, e);
                self.fail_background(&e);
                return Err(e);
            }
        }
    }

    fn install(
        &self,
        meta: &mut MetaState,
        levels: Vec<Vec<Arc<SstReader>>>,
        flushed: &[Arc<Memtable>],
        gc: Option<&GcEdit>,
    ) -> Result<()> {
        // Build the manifest view of the levels and persist first.
        meta.state.levels = levels
            .iter()
            .map(|l| l.iter().map(|f| f.meta.clone()).collect())
            .collect();
        if let Some(edit) = gc {
            meta.state.segments.retain(|s| !edit.remove.contains(&s.id));
            meta.state.segments.extend(edit.add.iter().cloned());
            meta.state.segments.sort_by_key(|s| s.id);
        }
        self.save_manifest(meta)?;
        let shape = self.shape();
        let debt = compaction::debt_bytes(&summaries(&levels), &shape);
        let mut g = self.sv.write();
        let mems: Vec<Arc<Memtable>> = g
            .mems
            .iter()
            .filter(|m| !flushed.iter().any(|f| Arc::ptr_eq(f, m)))
            .cloned()
            .collect();
        let mut segments = g.segments.clone();
        if let Some(edit) = gc {
            for id in &edit.remove {
                if let Some(s) = segments.remove(id) {
                    s.obsolete.store(true, Ordering::Release);
                }
            }
            for s in &edit.add {
                segments
                    .entry(s.id)
                    .or_insert_with(|| self.segment_handle(s.id, s.kind));
            }
        }
        *g = Arc::new(SuperVersion {
            mems,
            levels,
            segments,
            debt_bytes: debt,
        });
        drop(g);
        self.bg_cv.notify_all();
        Ok(())
    }

    fn shape(&self) -> Shape {
        Shape {
            l0_trigger_files: self.opts.l0_compaction_trigger_files,
            level1_bytes_max: self.opts.level1_bytes_max,
            multiplier: self.opts.level_size_multiplier,
        }
    }

    fn new_file_id(&self) -> u64 {
        let mut m = self.meta.lock();
        let id = m.state.next_file_id;
        m.state.next_file_id += 1;
        id
    }

    /// Flushes every frozen memtable into one L0 table. Returns false when
    /// there was nothing to flush.
    fn flush_once(&self) -> Result<bool> {
        let sv = self.current();
        if sv.mems.len() < 2 {
            return Ok(false);
        }
        let flushed: Vec<Arc<Memtable>> = sv.mems[1..].to_vec();
        let srcs: Vec<Box<dyn Source>> = flushed
            .iter()
            .map(|m| Box::new(MemSource::new(m.clone(), Bound::Unbounded)) as Box<dyn Source>)
            .collect();
        let mut merge = Merge::new(srcs)?;
        let id = self.new_file_id();
        let mut w = SstWriter::create(
            &self.ledger_dir,
            id,
            self.opts.block_bytes,
            self.opts.bloom_bits_per_key,
        )?;
        let mut shadowed = Vec::new();
        let mut n = 0u64;
        loop {
            shadowed.clear();
            let Some((k, e)) = merge.next_with(Some(&mut shadowed))? else {
                break;
            };
            for s in &shadowed {
                self.note_dead(s);
            }
            if let Err(err) = w.add(&k, &e) {
                w.abandon();
                return Err(err);
            }
            n += 1;
        }
        let new_reader = if n > 0 {
            let m = w.finish()?;
            manifest::sync_dir(&self.ledger_dir)?;
            Some(Arc::new(SstReader::open(
                &self.ledger_dir,
                m.id,
                self.caches.clone(),
            )?))
        } else {
            w.abandon();
            None
        };
        // persisted_seq: the seal point of the newest flushed memtable.
        let newest = &flushed[0];
        let key = Arc::as_ptr(newest) as usize;
        let persisted = {
            let s = self.seals.lock();
            s.iter().find(|(p, _)| *p == key).map(|(_, q)| *q)
        };
        let gc_edits: Vec<GcEdit> = {
            let mut p = self.pending_gc.lock();
            let ptrs: Vec<usize> = flushed.iter().map(|m| Arc::as_ptr(m) as usize).collect();
            let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(k, _)| ptrs.contains(k));
            *p = rest;
            mine.into_iter().map(|(_, e)| e).collect()
        };
        let merged_edit = (!gc_edits.is_empty()).then(|| GcEdit {
            remove: gc_edits
                .iter()
                .flat_map(|e| e.remove.iter().copied())
                .collect(),
            add: gc_edits
                .iter()
                .flat_map(|e| e.add.iter().cloned())
                .collect(),
        });
        // The table points into the journal: every byte it may point at must
        // be durable before the manifest names the table and advances
        // persisted_seq (under NoSync nothing else would have synced it).
        self.group_sync(self.written_total.load(Ordering::Acquire))?;
        let mut meta = self.meta.lock();
        let cur = self.current();
        let mut levels = cur.levels.clone();
        if let Some(r) = new_reader {
            levels[0].insert(0, r);
        }
        if let Some(p) = persisted {
            meta.state.persisted_seq = meta.state.persisted_seq.max(p);
        }
        self.install(&mut meta, levels, &flushed, merged_edit.as_ref())?;
        drop(meta);
        {
            let ptrs: Vec<usize> = flushed.iter().map(|m| Arc::as_ptr(m) as usize).collect();
            self.seals.lock().retain(|(p, _)| !ptrs.contains(p));
        }
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Runs one compaction if the policy asks for one.
    fn compact_once(&self) -> Result<bool> {
        let _one_at_a_time = self.compact_lock.lock();
        let sv = self.current();
        let shape = self.shape();
        let choice = compaction::choose(&summaries(&sv.levels), &shape);
        let find =
            |level: usize, id: u64| sv.levels[level].iter().find(|f| f.meta.id == id).cloned();
        match choice {
            Choice::Nothing => Ok(false),
            Choice::Move { from, file } => {
                let mut meta = self.meta.lock();
                let cur = self.current();
                let mut levels = cur.levels.clone();
                let Some(pos) = levels[from].iter().position(|f| f.meta.id == file) else {
                    return Ok(false);
                };
                let f = levels[from].remove(pos);
                let to = &mut levels[from + 1];
                let at = to.partition_point(|x| x.meta.first_key < f.meta.first_key);
                to.insert(at, f);
                self.install(&mut meta, levels, &[], None)?;
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
            Choice::Merge {
                from,
                inputs,
                overlaps,
                bottommost,
            } => {
                let ins: Vec<Arc<SstReader>> =
                    inputs.iter().filter_map(|&id| find(from, id)).collect();
                let overs: Vec<Arc<SstReader>> = overlaps
                    .iter()
                    .filter_map(|&id| find(from + 1, id))
                    .collect();
                let mut srcs: Vec<Box<dyn Source>> = Vec::new();
                if from == 0 {
                    // L0 inputs are newest first already.
                    for f in &ins {
                        srcs.push(Box::new(SstSource::new(f.clone(), None)?));
                    }
                } else {
                    srcs.push(Box::new(LevelSource::new(ins.clone(), None)));
                }
                srcs.push(Box::new(LevelSource::new(overs.clone(), None)));
                let mut merge = Merge::new(srcs)?;
                let mut outputs: Vec<SstMeta> = Vec::new();
                let mut cur_w: Option<SstWriter> = None;
                let mut shadowed = Vec::new();
                let result: Result<()> = (|| {
                    loop {
                        shadowed.clear();
                        let Some((k, e)) = merge.next_with(Some(&mut shadowed))? else {
                            break;
                        };
                        for s in &shadowed {
                            self.note_dead(s);
                        }
                        if bottommost && e.kind.is_tombstone() {
                            self.note_dead(&e);
                            continue;
                        }
                        if cur_w.is_none() {
                            let id = self.new_file_id();
                            cur_w = Some(SstWriter::create(
                                &self.ledger_dir,
                                id,
                                self.opts.block_bytes,
                                self.opts.bloom_bits_per_key,
                            )?);
                        }
                        if let Some(w) = cur_w.as_mut() {
                            w.add(&k, &e)?;
                            if w.size() >= self.opts.sst_target_bytes {
                                if let Some(w) = cur_w.take() {
                                    outputs.push(w.finish()?);
                                }
                            }
                        }
                    }
                    if let Some(w) = cur_w.take() {
                        outputs.push(w.finish()?);
                    }
                    Ok(())
                })();
                if let Err(e) = result {
                    if let Some(w) = cur_w.take() {
                        w.abandon();
                    }
                    for m in &outputs {
                        let _ =
                            fs::remove_file(crate::ledger::sst::sst_path(&self.ledger_dir, m.id));
                    }
                    return Err(e);
                }
                manifest::sync_dir(&self.ledger_dir)?;
                let mut readers = Vec::with_capacity(outputs.len());
                for m in &outputs {
                    readers.push(Arc::new(SstReader::open(
                        &self.ledger_dir,
                        m.id,
                        self.caches.clone(),
                    )?));
                }
                let mut meta = self.meta.lock();
                let cur = self.current();
                let mut levels = cur.levels.clone();
                levels[from].retain(|f| !inputs.contains(&f.meta.id));
                levels[from + 1].retain(|f| !overlaps.contains(&f.meta.id));
                levels[from + 1].extend(readers);
                levels[from + 1].sort_by(|a, b| a.meta.first_key.cmp(&b.meta.first_key));
                self.install(&mut meta, levels, &[], None)?;
                drop(meta);
                for f in ins.iter().chain(overs.iter()) {
                    f.mark_obsolete();
                }
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
        }
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, recovering from the
    /// journal whatever the ledger tables do not hold.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        opts.validate()?;
        let dir = dir.as_ref().to_path_buf();
        let journal_dir = dir.join(JOURNAL_DIR);
        let ledger_dir = dir.join(LEDGER_DIR);
        fs::create_dir_all(&dir).map_err(|e| Error::io("create store directory", &dir, e))?;
        // A fenced store claims its epoch (no lock: an older owner may still
        // run, paused or cut off, and is fenced instead); an unfenced one
        // takes the lock file.
        let (lock_file, fence) = match opts.epoch {
            Some(e) => (None, Some(Fence::claim(&dir, e)?)),
            None => {
                if dir.join(crate::fence::FENCE_DIR).exists() {
                    return Err(Error::invalid(
                        "options.epoch",
                        format!(
                            "store {} is fenced (it has {}/): open it with its owner's epoch",
                            dir.display(),
                            crate::fence::FENCE_DIR
                        ),
                    ));
                }
                let lock_path = dir.join(LOCK_FILE);
                let lock_file = fs::OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(&lock_path)
                    .map_err(|e| Error::io("open lock file", &lock_path, e))?;
                if lock_file.try_lock().is_err() {
                    return Err(Error::Locked(dir));
                }
                (Some(lock_file), None)
            }
        };
        let epoch = fence.as_ref().map_or(0, Fence::epoch);
        // Read after the claim: a newer owner's claim comes after anything
        // an older owner wrote before its last passing check.
        let manifest_found = manifest::load_latest(&dir, epoch)?.map(|(s, _)| s);
        // A rebuild interrupted by a crash left a marker: its half-built
        // ledger cannot be trusted, so rebuild again from scratch.
        let rebuild_marker = dir.join(REBUILD_MARKER_FILE);
        let ledger_missing = !ledger_dir.exists() || rebuild_marker.exists();
        let journal_existed = journal_dir.exists();
        fs::create_dir_all(&journal_dir)
            .map_err(|e| Error::io("create journal directory", &journal_dir, e))?;
        fs::create_dir_all(&ledger_dir)
            .map_err(|e| Error::io("create ledger directory", &ledger_dir, e))?;

        // Rebuild mode: the ledger (or the whole manifest) is gone but a
        // journal exists; every record is replayed, newest sequence wins.
        let (mut state, rebuild) = match manifest_found {
            Some(mut s) if ledger_missing => {
                s.levels = vec![Vec::new(); LEVELS];
                s.persisted_seq = 0;
                (s, true)
            }
            Some(s) => (s, false),
            None if journal_existed => {
                let mut segs = Vec::new();
                let mut max_id = 0;
                for ent in fs::read_dir(&journal_dir)
                    .map_err(|e| Error::io("list journal", &journal_dir, e))?
                {
                    let ent = ent.map_err(|e| Error::io("list journal", &journal_dir, e))?;
                    let name = ent.file_name().to_string_lossy().to_string();
                    let kind = if name.ends_with(".jnl") {
                        SegmentKind::Write
                    } else if name.ends_with(".gcj") {
                        SegmentKind::Compacted
                    } else {
                        continue;
                    };
                    let Ok(id) = name[..name.len() - 4].parse::<u64>() else {
                        continue;
                    };
                    if fence.as_ref().is_some_and(|f| f.is_newer(id)) {
                        continue; // a newer owner's: never touched
                    }
                    max_id = max_id.max(id);
                    segs.push(SegmentMeta {
                        id,
                        kind,
                        min_seq: 0,
                        max_seq: u64::MAX,
                        size: 0,
                        dead_bytes: 0,
                    });
                }
                segs.sort_by_key(|s| s.id);
                let rebuild = !segs.is_empty();
                (
                    ManifestState {
                        next_file_id: max_id + 1,
                        persisted_seq: 0,
                        levels: vec![Vec::new(); LEVELS],
                        segments: segs,
                    },
                    rebuild,
                )
            }
            None => (
                ManifestState {
                    next_file_id: 1,
                    persisted_seq: 0,
                    levels: vec![Vec::new(); LEVELS],
                    segments: Vec::new(),
                },
                false,
            ),
        };
        state.levels.resize(LEVELS, Vec::new());
        if let Some(f) = &fence {
            // This epoch's files get ids no other epoch uses.
            state.next_file_id = state.next_file_id.max(f.first_file_id());
        }
        if state.persisted_seq >= record::SEQ_LIMIT || state.next_file_id >= record::SEQ_LIMIT {
            return Err(Error::corrupt(
                dir.join(manifest::MANIFEST_FILE),
                0,
                "sequence number or file id out of range",
            ));
        }
        if !rebuild && rebuild_marker.exists() {
            // Stale marker of a store that has nothing to rebuild from.
            fs::remove_file(&rebuild_marker)
                .map_err(|e| Error::io("remove rebuild marker", &rebuild_marker, e))?;
        }
        if rebuild {
            fs::write(&rebuild_marker, b"ledger rebuild in progress\n")
                .map_err(|e| Error::io("create rebuild marker", &rebuild_marker, e))?;
            manifest::sync_dir(&dir)?;
        }

        // Remove files the manifest does not name (unfinished flushes,
        // compactions, journal compactions, obsolete files of a crash).
        let listed_tables: Vec<u64> = state.levels.iter().flatten().map(|m| m.id).collect();
        for (d, is_journal) in [(&journal_dir, true), (&ledger_dir, false)] {
            for ent in fs::read_dir(d).map_err(|e| Error::io("list directory", d, e))? {
                let ent = ent.map_err(|e| Error::io("list directory", d, e))?;
                let name = ent.file_name().to_string_lossy().to_string();
                let Some((stem, ext)) = name.rsplit_once('.') else {
                    continue;
                };
                let Ok(id) = stem.parse::<u64>() else {
                    continue;
                };
                if fence.as_ref().is_some_and(|f| f.is_newer(id)) {
                    continue; // a newer owner's file: never touched
                }
                let keep = if is_journal {
                    state
                        .segments
                        .iter()
                        .any(|s| s.id == id && s.kind.ext() == ext)
                } else {
                    ext == "sst" && listed_tables.contains(&id)
                };
                if !keep {
                    let _ = fs::remove_file(ent.path());
                }
            }
        }
        let _ = fs::remove_file(dir.join(format!("{}.tmp", manifest::manifest_name(epoch))));

        let caches = Arc::new(Caches::new(opts.open_files_max, opts.block_cache_bytes));
        let mut levels: Vec<Vec<Arc<SstReader>>> = vec![Vec::new(); LEVELS];
        for (l, files) in state.levels.iter().enumerate() {
            for m in files {
                let r = SstReader::open(&ledger_dir, m.id, caches.clone())?;
                levels[l].push(Arc::new(r));
            }
        }
        let mut segments = BTreeMap::new();
        for s in &state.segments {
            segments.insert(
                s.id,
                Arc::new(Segment {
                    id: s.id,
                    path: segment::segment_path(&journal_dir, s.id, s.kind),
                    caches: caches.clone(),
                    obsolete: AtomicBool::new(false),
                }),
            );
        }
        let has_index = levels
            .iter()
            .flatten()
            .any(|f| f.meta.last_key.first().is_some_and(|&b| b >= SPACE_INDEX));
        let debt = compaction::debt_bytes(
            &summaries(&levels),
            &Shape {
                l0_trigger_files: opts.l0_compaction_trigger_files,
                level1_bytes_max: opts.level1_bytes_max,
                multiplier: opts.level_size_multiplier,
            },
        );
        let sv = Arc::new(SuperVersion {
            mems: vec![Arc::new(Memtable::new())],
            levels,
            segments,
            debt_bytes: debt,
        });

        // A placeholder writer until replay tells us where to continue.
        let first_id = state.next_file_id;
        state.next_file_id += 1;
        let seg = SegmentWriter::create(&journal_dir, first_id, SegmentKind::Write)?;
        let sync_target = Mutex::new((Arc::new(seg.try_clone_file()?), seg.path.clone()));
        let persisted_seq = state.persisted_seq;
        let inner = Arc::new(Inner {
            dir: dir.clone(),
            journal_dir: journal_dir.clone(),
            ledger_dir,
            caches,
            writer: Mutex::new(WriterState {
                seg,
                next_seq: persisted_seq + 1,
                written_total: 0,
                buf: Vec::new(),
            }),
            meta: Mutex::new(MetaState { state }),
            sv: RwLock::new(sv),
            synced_total: AtomicU64::new(0),
            durable_seq: AtomicU64::new(0),
            written_total: AtomicU64::new(0),
            sync_target,
            syncing: Mutex::new(false),
            sync_cv: Condvar::new(),
            dead: Mutex::new(HashMap::new()),
            pending_gc: Mutex::new(Vec::new()),
            gc_lock: Mutex::new(None),
            bg_lock: Mutex::new(()),
            bg_cv: Condvar::new(),
            closed: AtomicBool::new(false),
            bg_error: Mutex::new(None),
            has_index: AtomicBool::new(has_index),
            counters: Counters::default(),
            seals: Mutex::new(Vec::new()),
            compact_lock: Mutex::new(()),
            opts,
            _lock_file: lock_file,
            fence,
        });
        Self::replay(&inner, rebuild)?;
        let store = Store {
            inner,
            threads: Mutex::new(Vec::new()),
        };
        store.start_threads();
        Ok(store)
    }

    /// Replays journal records above `persisted_seq` (or all, in rebuild
    /// mode) into memtables, cuts a torn tail, then registers the new active
    /// segment in the manifest.
    fn replay(inner: &Arc<Inner>, rebuild: bool) -> Result<()> {
        let (persisted, segs, active_id) = {
            let m = inner.meta.lock();
            let w = inner.writer.lock();
            (m.state.persisted_seq, m.state.segments.clone(), w.seg.id)
        };
        let last_write_id = segs
            .iter()
            .filter(|s| s.kind == SegmentKind::Write)
            .map(|s| s.id)
            .max();
        let mut max_seq = persisted;
        let mut seg_updates: Vec<(u64, u64, u64, u64)> = Vec::new(); // id, min, max, size
        for s in &segs {
            let needed = rebuild || s.max_seq == u64::MAX || s.max_seq > persisted;
            if !needed {
                max_seq = max_seq.max(s.max_seq);
                continue;
            }
            let path = segment::segment_path(&inner.journal_dir, s.id, s.kind);
            // Only a segment whose end the manifest does not know (it was
            // active at a crash) may have a torn tail.
            let allow_torn = s.max_seq == u64::MAX
                && (Some(s.id) == last_write_id || (rebuild && s.kind == SegmentKind::Compacted));
            let mut pending: Vec<(u64, u32, Vec<u8>)> = Vec::new();
            let (mut smin, mut smax) = (u64::MAX, 0u64);
            let limit = s.scan_limit();
            let end = segment::scan(&path, s.id, s.kind, allow_torn, limit, |off, len, rec| {
                smin = smin.min(rec.seq);
                smax = smax.max(rec.seq);
                if rec.seq <= persisted && !rebuild {
                    return Ok(());
                }
                let mut raw = Vec::with_capacity(len as usize);
                record::encode(
                    &mut raw,
                    &RecordParts {
                        kind: rec.kind,
                        flags: rec.flags,
                        key: rec.key,
                        meta: rec.meta,
                        terms: rec.terms,
                        stored_value: rec.stored_value,
                        value_len: rec.value_len,
                    },
                    rec.seq,
                );
                pending.push((off, len, raw));
                if rec.flags & FLAG_BATCH_CONTINUES == 0 || s.kind == SegmentKind::Compacted {
                    for (off, len, raw) in pending.drain(..) {
                        let r =
                            record::decode(&raw).map_err(|why| Error::corrupt(&path, off, why))?;
                        let value =
                            record::value_of(&r).map_err(|why| Error::corrupt(&path, off, why))?;
                        let sv = inner.current();
                        inner.apply(
                            &sv,
                            Applied {
                                kind: r.kind,
                                seq: r.seq,
                                key: r.key,
                                loc: Loc {
                                    segment: s.id,
                                    offset: off,
                                    len,
                                },
                                value_len: r.value_len,
                                value_hash: if r.kind == KIND_PUT {
                                    xxh3_64(&value)
                                } else {
                                    0
                                },
                                meta: r.meta,
                                terms: r.terms,
                                inline: (r.kind == KIND_PUT
                                    && value.len() <= inner.opts.inline_value_bytes_max)
                                    .then_some(value),
                            },
                            rebuild,
                        )?;
                        if sv.mems[0].bytes() >= inner.opts.memtable_bytes_max {
                            let w = inner.writer.lock();
                            inner.rotate(if rebuild { 0 } else { r.seq });
                            drop(w);
                            while inner.current().mems.len() > inner.opts.immutable_memtables_max {
                                inner.flush_once()?;
                            }
                        }
                    }
                }
                Ok(())
            })?;
            // The length replayed is the segment's sealed size from now on.
            // A fenced store never truncates: the file may be another
            // (older) owner's, still appending; its bytes past the sealed
            // size are never read.
            let size = match end {
                ScanEnd::Torn(off) => {
                    if inner.fence.is_none() {
                        segment::truncate(&path, off)?;
                    }
                    off
                }
                ScanEnd::Clean => fs::metadata(&path)
                    .map_err(|e| Error::io("stat segment", &path, e))?
                    .len()
                    .min(limit),
            };
            // A segment that was active at a crash may hold records that
            // were written but never synced (never acknowledged under
            // Sync): sync them before any reader may see them.
            if inner.opts.durability == Durability::Sync && s.max_seq == u64::MAX {
                fs::File::open(&path)
                    .and_then(|f| f.sync_data())
                    .map_err(|e| Error::io("fsync replayed segment", &path, e))?;
            }
            max_seq = max_seq.max(if smax == 0 { 0 } else { smax });
            seg_updates.push((
                s.id,
                smin,
                if smax == 0 && smin == u64::MAX {
                    0
                } else {
                    smax
                },
                size,
            ));
        }
        let mut w = inner.writer.lock();
        w.next_seq = max_seq + 1;
        // Everything replayed is on disk: in sealed segments, synced at
        // their roll, or in the ones synced above.
        inner.durable_seq.store(max_seq, Ordering::Release);
        let mut meta = inner.meta.lock();
        for (id, smin, smax, size) in seg_updates {
            if let Some(m) = meta.state.segments.iter_mut().find(|m| m.id == id) {
                m.min_seq = smin;
                m.max_seq = smax;
                m.size = size;
            }
        }
        meta.state.segments.push(SegmentMeta {
            id: active_id,
            kind: SegmentKind::Write,
            min_seq: max_seq + 1,
            max_seq: u64::MAX,
            size: 0,
            dead_bytes: 0,
        });
        w.seg.sync()?;
        manifest::sync_dir(&inner.journal_dir)?;
        inner.save_manifest(&mut meta)?;
        if let Some(f) = &inner.fence {
            // This epoch's manifest now holds everything: older epochs'
            // manifests (and an unfenced `MANIFEST`) are garbage.
            for e in manifest::epochs(&inner.dir)? {
                if e < f.epoch() {
                    let _ = fs::remove_file(inner.dir.join(manifest::manifest_name(e)));
                }
            }
        }
        inner.publish_segments(&[(active_id, SegmentKind::Write)]);
        drop(meta);
        // Anything replayed is frozen so the flush persists it promptly,
        // sealed at the highest replayed sequence number.
        if !inner.current().mems[0].is_empty() {
            inner.rotate(max_seq);
        }
        drop(w);
        if rebuild {
            // A rebuilt ledger is only trustworthy once fully persisted.
            while inner.flush_once()? {}
            let mut meta = inner.meta.lock();
            meta.state.persisted_seq = max_seq;
            inner.save_manifest(&mut meta)?;
            let marker = inner.dir.join(REBUILD_MARKER_FILE);
            fs::remove_file(&marker).map_err(|e| Error::io("remove rebuild marker", &marker, e))?;
            manifest::sync_dir(&inner.dir)?;
        }
        Ok(())
    }

    fn start_threads(&self) {
        let mut threads = self.threads.lock();
        let inner = self.inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tablinum-flush".into())
                .spawn(move || loop {
                    if inner.closed.load(Ordering::Acquire) {
                        return;
                    }
                    match inner.flush_once() {
                        Ok(true) => continue,
                        Ok(false) => {
                            let mut g = inner.bg_lock.lock();
                            inner
                                .bg_cv
                                .wait_for(&mut g, Duration::from_millis(BG_TICK_MS));
                        }
                        Err(e) => {
                            inner.fail_background(&e);
                            return;
                        }
                    }
                })
                .expect("spawn flush thread"),
        );
        let inner = self.inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name("tablinum-compact".into())
                .spawn(move || loop {
                    if inner.closed.load(Ordering::Acquire) {
                        return;
                    }
                    match inner.compact_once() {
                        Ok(true) => continue,
                        Ok(false) => {
                            match inner.scheduled_journal_compaction() {
                                Ok(()) => {}
                                // Closing interrupted the run: nothing failed
                                // (its edit is flushed by close or dropped with
                                // its unnamed segments at the next open).
                                Err(Error::Closed) => return,
                                Err(e) => {
                                    inner.fail_background(&e);
                                    return;
                                }
                            }
                            let mut g = inner.bg_lock.lock();
                            inner
                                .bg_cv
                                .wait_for(&mut g, Duration::from_millis(BG_TICK_MS * 5));
                        }
                        Err(e) => {
                            inner.fail_background(&e);
                            return;
                        }
                    }
                })
                .expect("spawn compaction thread"),
        );
    }

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

    fn view(&self) -> View<'_> {
        View {
            inner: &self.inner,
            sv: self.inner.current(),
        }
    }

    /// Reads a value.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.check_closed()?;
        self.view().get(key)
    }

    /// Reads an object's metadata without reading its value.
    pub fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.inner.check_closed()?;
        self.view().head(key)
    }

    /// Forward scan of (key, value) in `range`, values read ahead in batches.
    pub fn scan_objects<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    ) -> Result<ObjectIter> {
        self.inner.check_closed()?;
        let v = self.view();
        let r = v.object_range(range.0, range.1)?;
        Ok(ObjectIter {
            inner: self.inner.clone(),
            sv: v.sv,
            range: r,
            ready: Default::default(),
            exhausted: false,
            failed: false,
        })
    }

    /// Forward scan of (key, head) in `range`: ledger only, no value reads.
    pub fn scan_heads<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<HeadIter> {
        self.inner.check_closed()?;
        let v = self.view();
        let r = v.object_range(range.0, range.1)?;
        Ok(HeadIter {
            inner: self.inner.clone(),
            sv: v.sv,
            range: r,
            failed: false,
        })
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
        self.inner.check_closed()?;
        self.view()
            .index_query(name, terms.0, terms.1, return_terms, limit)
    }

    /// The tictac tree of (key, value hash) over `range`.
    pub fn aae_tree<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<TicTacTree> {
        self.inner.check_closed()?;
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
        self.inner.check_closed()?;
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
        let w = self.inner.writer.lock();
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
        self.inner.journal_compaction()
    }
}

impl Inner {
    fn scheduled_journal_compaction(&self) -> Result<()> {
        let inner = self;
        let Some(window) = inner.opts.journal_compaction_hours else {
            return Ok(());
        };
        if !in_window(utc_hour_now(), window) {
            return Ok(());
        }
        {
            let last = inner.gc_lock.lock();
            if last.is_some_and(|t| {
                t.elapsed() < Duration::from_secs(inner.opts.journal_compaction_interval_s)
            }) {
                return Ok(());
            }
        }
        self.journal_compaction().map(|_| ())
    }

    fn journal_compaction(&self) -> Result<JournalCompaction> {
        let inner = self;
        let mut last = inner.gc_lock.lock();
        *last = Some(Instant::now());
        let (stats, persisted, metas) = {
            let active = inner.writer.lock().seg.id;
            let m = inner.meta.lock();
            let stats: Vec<SegmentStat> = m
                .state
                .segments
                .iter()
                .map(|s| SegmentStat {
                    id: s.id,
                    sealed: s.id != active && s.max_seq != u64::MAX,
                    max_seq: s.max_seq,
                    record_bytes: s.size.saturating_sub(SEGMENT_HEADER_BYTES),
                    dead_bytes: s.dead_bytes,
                })
                .collect();
            (stats, m.state.persisted_seq, m.state.segments.clone())
        };
        let policy = GcPolicy {
            run_segments_max: inner.opts.journal_compaction_run_segments_max,
            single_live_pct: inner.opts.journal_compaction_single_live_pct,
            run_live_pct: inner.opts.journal_compaction_run_live_pct,
        };
        let Some(run) = gc::choose(&stats, persisted, &policy) else {
            return Ok(JournalCompaction::default());
        };
        let run_metas: Vec<SegmentMeta> = metas
            .iter()
            .filter(|s| run.contains(&s.id))
            .cloned()
            .collect();
        let others_min_seq = metas
            .iter()
            .filter(|s| !run.contains(&s.id))
            .map(|s| s.min_seq)
            .min()
            .unwrap_or(u64::MAX);
        let sv = inner.current();
        let mut report = JournalCompaction {
            segments_compacted: run.clone(),
            ..Default::default()
        };
        let mut writer: Option<SegmentWriter> = None;
        let mut new_metas: Vec<SegmentMeta> = Vec::new();
        let mut relocs: Vec<(Vec<u8>, u64, Loc, Loc)> = Vec::new();
        let mut buf = Vec::new();
        for sm in &run_metas {
            report.bytes_before += sm.size;
            let path = segment::segment_path(&inner.journal_dir, sm.id, sm.kind);
            segment::scan(
                &path,
                sm.id,
                sm.kind,
                false,
                sm.scan_limit(),
                |off, len, rec| {
                    let lk = entry::object_key(rec.key);
                    let cur = lookup(&sv, &lk)?;
                    let here = Loc {
                        segment: sm.id,
                        offset: off,
                        len,
                    };
                    let current = cur
                        .as_ref()
                        .is_some_and(|e| e.seq == rec.seq && e.loc == here);
                    // A delete record must outlive every older put of its key
                    // in the journal (a rebuilt ledger would resurrect it), even
                    // after the ledger itself dropped the tombstone.
                    let live = if rec.kind == KIND_DELETE {
                        others_min_seq < rec.seq && (cur.is_none() || current)
                    } else {
                        current
                    };
                    if !live {
                        report.records_dropped += 1;
                        return Ok(());
                    }
                    if writer
                        .as_ref()
                        .is_none_or(|w| w.len >= inner.opts.journal_segment_bytes_max)
                    {
                        if let Some(w) = writer.take() {
                            w.sync()?;
                            if let Some(m) = new_metas.last_mut() {
                                m.size = w.len;
                            }
                        }
                        let id = inner.new_file_id();
                        writer = Some(SegmentWriter::create(
                            &inner.journal_dir,
                            id,
                            SegmentKind::Compacted,
                        )?);
                        new_metas.push(SegmentMeta {
                            id,
                            kind: SegmentKind::Compacted,
                            min_seq: u64::MAX,
                            max_seq: 0,
                            size: 0,
                            dead_bytes: 0,
                        });
                    }
                    let (Some(w), Some(m)) = (writer.as_mut(), new_metas.last_mut()) else {
                        return Ok(());
                    };
                    buf.clear();
                    let n = record::encode(
                        &mut buf,
                        &RecordParts {
                            kind: rec.kind,
                            flags: rec.flags & !FLAG_BATCH_CONTINUES,
                            key: rec.key,
                            meta: rec.meta,
                            terms: rec.terms,
                            stored_value: rec.stored_value,
                            value_len: rec.value_len,
                        },
                        rec.seq,
                    );
                    let at = w.append(&buf)?;
                    m.min_seq = m.min_seq.min(rec.seq);
                    m.max_seq = m.max_seq.max(rec.seq);
                    relocs.push((
                        rec.key.to_vec(),
                        rec.seq,
                        here,
                        Loc {
                            segment: w.id,
                            offset: at,
                            len: n as u32,
                        },
                    ));
                    report.records_relocated += 1;
                    Ok(())
                },
            )?;
        }
        if let Some(w) = writer.take() {
            w.sync()?;
            if let Some(m) = new_metas.last_mut() {
                m.size = w.len;
            }
        }
        manifest::sync_dir(&inner.journal_dir)?;
        report.bytes_after = new_metas.iter().map(|m| m.size).sum();
        // Make the new segments readable before any pointer refers to them
        // (they join the manifest with the flush that carries the edit; a
        // crash before that deletes them and the old pointers stay valid).
        let added: Vec<(u64, SegmentKind)> = new_metas.iter().map(|m| (m.id, m.kind)).collect();
        inner.publish_segments(&added);
        // Switch pointers under the writer lock, re-checking each entry.
        {
            let w = inner.writer.lock();
            let sv = inner.current();
            // Every lookup first: an error here leaves the memtable untouched.
            let mut switches = Vec::with_capacity(relocs.len());
            for (key, seq, old, new) in &relocs {
                let lk = entry::object_key(key);
                if let Some(cur) = lookup(&sv, &lk)? {
                    if cur.seq == *seq && cur.loc == *old {
                        let mut e = (*cur).clone();
                        e.loc = *new;
                        switches.push((lk, e));
                    }
                }
            }
            for (lk, e) in switches {
                sv.mems[0].insert(lk, e);
            }
            // Register the edit against the memtable about to be frozen
            // *before* freezing it, so the flush cannot miss it.
            let ptr = Arc::as_ptr(&sv.mems[0]) as usize;
            inner.pending_gc.lock().push((
                ptr,
                GcEdit {
                    remove: run.clone(),
                    add: new_metas.clone(),
                },
            ));
            inner.rotate(w.next_seq - 1);
        }
        // Wait until the flush that carries the edit has landed, still
        // holding `gc_lock` so no second run picks the same segments.
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            inner.check_open()?;
            let sv = inner.current();
            if run.iter().all(|id| !sv.segments.contains_key(id)) {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Background(
                    "journal compaction edit was not flushed within 600 s".into(),
                ));
            }
            let mut g = inner.bg_lock.lock();
            inner.bg_cv.notify_all();
            inner
                .bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
        drop(last);
        Ok(report)
    }
}

impl Store {
    /// Freezes the active memtable and waits until every frozen memtable is
    /// in a ledger table.
    pub fn flush(&self) -> Result<()> {
        self.inner.check_open()?;
        {
            let w = self.inner.writer.lock();
            if !self.inner.current().mems[0].is_empty() {
                self.inner.rotate(w.next_seq - 1);
            }
        }
        loop {
            self.inner.check_open()?;
            if self.inner.current().mems.len() == 1 {
                return Ok(());
            }
            let mut g = self.inner.bg_lock.lock();
            self.inner.bg_cv.notify_all();
            self.inner
                .bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
    }

    /// Runs ledger compactions until the policy is satisfied.
    pub fn compact_ledger(&self) -> Result<()> {
        self.flush()?;
        while self.inner.compact_once()? {}
        Ok(())
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
        let metas = self.inner.meta.lock().state.segments.clone();
        for s in metas.iter().filter(|s| sv.segments.contains_key(&s.id)) {
            let path = segment::segment_path(&self.inner.journal_dir, s.id, s.kind);
            segment::scan(&path, s.id, s.kind, false, s.scan_limit(), |_, _, _| {
                rep.records += 1;
                Ok(())
            })?;
            rep.segments += 1;
        }
        Ok(rep)
    }

    /// Counters describing the store now.
    pub fn stats(&self) -> Stats {
        let last_seq = self.inner.writer.lock().next_seq - 1;
        let sv = self.inner.current();
        let m = self.inner.meta.lock();
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
            stall_ms: self.inner.counters.stall_ms.load(Ordering::Relaxed),
        }
    }

    /// The store's immutable files now, relative to its directory: every
    /// ledger table and every journal segment except the one being written.
    /// This is what a tablet publishes for readers that open files directly
    /// (the scan servers); the list is a snapshot and may be stale a moment
    /// later.
    pub fn immutable_files(&self) -> Vec<String> {
        let active = self.inner.writer.lock().seg.id;
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
        for d in [&self.inner.journal_dir, &self.inner.ledger_dir] {
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
    pub fn close(&self) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
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
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
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
        let w = self.inner.writer.lock();
        w.seg.sync()?;
        if let Some(e) = self.inner.bg_error.lock().as_ref() {
            return Err(Error::Background(e.clone()));
        }
        flushed?;
        let mut meta = self.inner.meta.lock();
        let (id, len, last) = (w.seg.id, w.seg.len, w.next_seq - 1);
        if meta.state.persisted_seq >= last {
            if let Some(m) = meta.state.segments.iter_mut().find(|m| m.id == id) {
                m.max_seq = last;
                m.size = len;
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
    fn view(&self) -> View<'_> {
        View {
            inner: &self.inner,
            sv: self.sv.clone(),
        }
    }
    /// Sequence number of the last write visible in the snapshot.
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// Reads a value as of the snapshot.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.view().get(key)
    }
    /// Reads a head as of the snapshot.
    pub fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.view().head(key)
    }
    /// Scans (key, value) as of the snapshot.
    pub fn scan_objects<'a>(
        &self,
        range: (Bound<&'a [u8]>, Bound<&'a [u8]>),
    ) -> Result<ObjectIter> {
        let r = self.view().object_range(range.0, range.1)?;
        Ok(ObjectIter {
            inner: self.inner.clone(),
            sv: self.sv.clone(),
            range: r,
            ready: Default::default(),
            exhausted: false,
            failed: false,
        })
    }
    /// Scans (key, head) as of the snapshot.
    pub fn scan_heads<'a>(&self, range: (Bound<&'a [u8]>, Bound<&'a [u8]>)) -> Result<HeadIter> {
        let r = self.view().object_range(range.0, range.1)?;
        Ok(HeadIter {
            inner: self.inner.clone(),
            sv: self.sv.clone(),
            range: r,
            failed: false,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_compaction_window_wraps_past_midnight() {
        assert!(in_window(0, (0, 24)) && in_window(23, (0, 24)));
        assert!(in_window(2, (1, 5)) && !in_window(5, (1, 5)) && !in_window(0, (1, 5)));
        // 22:00 to 04:00 UTC.
        assert!(in_window(23, (22, 4)) && in_window(3, (22, 4)));
        assert!(!in_window(4, (22, 4)) && !in_window(12, (22, 4)));
        assert!(!in_window(7, (7, 7)));
    }

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
    }
}
