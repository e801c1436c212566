//! The write path: validation, journal append with group commit, memtable
//! apply, memtable rotation, write stalls and segment rolls.
//!
//! A write is acknowledged only after its journal record is appended (and,
//! under `Durability::Sync`, covered by an fdatasync), and only if no newer
//! owner fenced the store in between. This module never deletes a file and
//! never touches ledger tables.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::failpoint::failpoint;
use crate::faults;
use crate::fence::Fence;
use crate::journal::record::{
    self, IndexTerm, RecordParts, FLAG_BATCH_CONTINUES, KIND_DELETE, KIND_PUT,
};
use crate::journal::segment::{self, SegmentKind, SegmentWriter, SEGMENT_HEADER_BYTES};
use crate::ledger::entry::{self, Entry, EntryKind, Loc};
use crate::ledger::memtable::Memtable;
use crate::manifest::{self, SegmentMeta};
use crate::options::{
    Durability, Options, BATCH_OPS_MAX, INDEX_NAME_BYTES_MAX, INDEX_TERMS_ENCODED_BYTES_MAX,
    INDEX_TERMS_MAX, INDEX_TERM_BYTES_MAX, KEY_BYTES_MAX, METADATA_BYTES_MAX, VALUE_BYTES_MAX,
};

use super::graveyard::Graveyard;
use super::read::lookup;
use super::{
    Inner, IoSlot, MetaState, OpRef, PutOptions, Segment, SuperVersion, WriterState,
    STALL_RECHECK_MS,
};

/// Creates write segment `id` with the journal settings of `opts`: the
/// kernel's writeback started every `journal_writeback_bytes`, and its
/// blocks reserved when `journal_preallocate` is on (at open and at a roll).
pub(super) fn create_write_segment(
    dir: &std::path::Path,
    id: u64,
    opts: &Options,
    graveyard: &Graveyard,
) -> Result<SegmentWriter> {
    if let Some(from) = graveyard.take_recycled() {
        match SegmentWriter::recycle(&from, dir, id) {
            Ok(w) => {
                return Ok(w
                    .with_writeback(opts.journal_writeback_bytes)
                    .with_faults(opts.faults.clone()))
            }
            // A new file instead: if the failure was not the pool file's,
            // creating one fails the same way and says so.
            Err(_) => {
                let _ = std::fs::remove_file(&from);
            }
        }
    }
    Ok(SegmentWriter::create(dir, id, SegmentKind::Write)?
        .with_writeback(opts.journal_writeback_bytes)
        .with_preallocation(opts.preallocate_bytes())
        .with_faults(opts.faults.clone()))
}

pub(super) fn validate_key(key: &[u8]) -> Result<()> {
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

pub(super) fn validate_put(key: &[u8], value: &[u8], opts: &PutOptions) -> Result<()> {
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

/// A write appended to the journal and applied to the memtable but not yet
/// acknowledged: its records may still be lost to a crash until
/// [`crate::Store::acknowledge`] returns `Ok`.
#[must_use = "a write is acknowledged only by Store::acknowledge"]
#[derive(Debug)]
pub struct Unacked {
    last_seq: u64,
    /// The journal's written total once this write was appended.
    end: u64,
}

/// A write decoded from the journal or prepared by a caller, ready to apply.
pub(super) struct Applied<'a> {
    pub(super) kind: u8,
    pub(super) seq: u64,
    pub(super) key: &'a [u8],
    pub(super) loc: Loc,
    pub(super) value_len: u32,
    pub(super) value_hash: u64,
    pub(super) meta: &'a [u8],
    pub(super) terms: &'a [u8],
    pub(super) inline: Option<Vec<u8>>,
}

/// What a write replaces, as far as `apply` needs to know (the old entry's
/// index terms are withdrawn; a rebuild skips writes older than it).
pub(super) enum Old {
    /// Not needed: no index anywhere, and the write carries no terms.
    Unneeded,
    /// Looked up already (before the write reached the journal, so a failed
    /// lookup could still fail the write cleanly).
    Known(Option<Arc<Entry>>),
    /// Look it up now: recovery, or a key written earlier in the same
    /// batch (found in the active memtable, without I/O).
    LookUp,
}

impl Inner {
    /// Applies one write to the active memtable (caller holds the writer
    /// lock, or is recovering alone). With `only_if_newer`, a write older than
    /// the key's current entry is skipped (journal rebuild order).
    pub(super) fn apply(
        &self,
        sv: &SuperVersion,
        a: Applied<'_>,
        old: Old,
        only_if_newer: bool,
    ) -> Result<()> {
        let lk = entry::object_key(a.key);
        let old = match old {
            Old::Unneeded => None,
            Old::Known(o) => o,
            Old::LookUp => lookup(sv, &lk)?,
        };
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
    pub(super) fn rotate(&self, seal_seq: u64) -> Arc<Memtable> {
        let mut g = self.write_sv();
        let old = g.mems[0].clone();
        let mut mems = Vec::with_capacity(g.mems.len() + 1);
        mems.push(Arc::new(Memtable::counted(
            self.pool.memtable_bytes.clone(),
        )));
        mems.extend(g.mems.iter().cloned());
        *g = Arc::new(SuperVersion {
            mems,
            levels: g.levels.clone(),
            segments: g.segments.clone(),
            debt_bytes: g.debt_bytes,
        });
        drop(g);
        self.seals.lock().push((old.id(), seal_seq));
        self.bg_cv.notify_all();
        self.pool.kick();
        old
    }

    pub(super) fn wait_for_room(&self) -> Result<()> {
        let mut stalled_since: Option<Instant> = None;
        loop {
            self.check_open()?;
            let sv = self.current();
            let imm = sv.mems.len() - 1;
            if imm < self.opts.immutable_memtables_max
                && sv.levels[0].len() < self.opts.l0_stall_files
                && sv.debt_bytes <= self.opts.compaction_debt_bytes_max
                && !self.pool.over_hard_budget()
            {
                if let Some(t) = stalled_since {
                    self.counters
                        .stall_ms
                        .fetch_add(t.elapsed().as_millis() as u64, Ordering::Relaxed);
                }
                return Ok(());
            }
            self.check_stall(*stalled_since.get_or_insert_with(Instant::now))?;
            self.pool.kick();
            let mut g = self.bg_lock.lock();
            self.bg_cv.notify_all();
            self.bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
    }

    /// A read handle on journal segment `id`.
    pub(super) fn segment_handle(&self, id: u64, kind: SegmentKind) -> Arc<Segment> {
        Arc::new(Segment {
            id,
            path: segment::segment_path(&self.files.journal_dir, id, kind),
            caches: self.files.caches.clone(),
            obsolete: AtomicBool::new(false),
            graveyard: Some(self.graveyard.clone()),
            pinned: std::sync::OnceLock::new(),
        })
    }

    /// Makes segments readable through the current view (segments already
    /// there keep their handle).
    pub(super) fn publish_segments(&self, segs: &[(u64, SegmentKind)]) {
        let mut g = self.write_sv();
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
    /// lock). Nothing changes until the manifest naming the new segment is
    /// on disk, and nothing can fail after that. A transient failure before
    /// it (too many open files, a full disk) removes the new file and fails
    /// only the write that asked; any other failure (a failed fsync of the
    /// journal, reported once) is fatal for the store.
    pub(super) fn roll(&self, w: &mut WriterState) -> Result<()> {
        let r = self.roll_once(w);
        if let Err(e) = &r {
            if !e.is_transient() {
                self.poison_journal(w, e);
            }
        }
        r
    }

    /// Seals the active segment and opens a new one (caller holds the writer lock).
    pub(super) fn roll_once(&self, w: &mut WriterState) -> Result<()> {
        {
            let _in_flight = self.io.start(IoSlot::Roll);
            w.seg.sync()?;
        }
        self.synced_total
            .fetch_max(w.written_total, Ordering::AcqRel);
        let mut meta = self.lock_meta();
        let id = meta.state.next_file_id;
        let new = create_write_segment(&self.files.journal_dir, id, &self.opts, &self.graveyard)?;
        let recycled = new.is_recycled();
        let switched = self.roll_switch(w, &mut meta, new);
        if switched.is_ok() {
            self.counters.segment_rolls.fetch_add(1, Ordering::Relaxed);
            if recycled {
                self.counters
                    .segments_recycled
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
        if switched.is_err() {
            let _ = std::fs::remove_file(segment::segment_path(
                &self.files.journal_dir,
                id,
                SegmentKind::Write,
            ));
        }
        switched
    }

    /// The part of a roll after the new segment exists: sync it, name it in
    /// the manifest, then switch the writer to it.
    fn roll_switch(
        &self,
        w: &mut WriterState,
        meta: &mut MetaState,
        new: SegmentWriter,
    ) -> Result<()> {
        let id = new.id;
        new.sync()?;
        manifest::sync_dir(&self.files.journal_dir)?;
        let sync_handle = Arc::new(new.try_clone_file()?);
        failpoint!("roll.after-new-segment");
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
            m.deletes = w.seg_deletes;
        }
        next.state.segments.push(SegmentMeta {
            id,
            kind: SegmentKind::Write,
            min_seq: w.next_seq,
            max_seq: u64::MAX,
            size: 0,
            dead_bytes: 0,
            // Known only once sealed.
            deletes: true,
        });
        self.save_manifest(&mut next)?;
        // Nothing below can fail: the manifest names the new segment as the
        // active one, so the writer must move to it.
        meta.state = next.state;
        self.publish_segments(&[(id, SegmentKind::Write)]);
        *self.sync_target.lock() = (sync_handle, new.path.clone());
        self.active_segment.store(id, Ordering::Release);
        w.seg = new;
        w.seg_deletes = false;
        Ok(())
    }

    /// Saves `meta` as the manifest, with the dead bytes counted since the
    /// last save. On failure `meta` is unchanged and the counts are kept.
    pub(super) fn save_manifest(&self, meta: &mut MetaState) -> Result<()> {
        let dead: Vec<(u64, u64)> = self.dead.lock().drain().collect();
        let mut next = meta.state.clone();
        for &(id, bytes) in &dead {
            if let Some(s) = next.segments.iter_mut().find(|s| s.id == id) {
                s.dead_bytes += bytes;
            }
        }
        let epoch = self.fence.as_ref().map_or(0, Fence::epoch);
        if let Err(e) = manifest::save_epoch(&self.files.dir, &next, epoch) {
            let mut d = self.dead.lock();
            for (id, bytes) in dead {
                *d.entry(id).or_default() += bytes;
            }
            return Err(e);
        }
        meta.state = next;
        // Whatever this switch dropped may be deleted only if no newer
        // owner had claimed the store when it was written (a newer owner
        // reads the manifest after claiming, so it saw this one).
        self.check_fence()
    }

    /// `Err(Fenced)` once a newer owner has claimed a fenced store.
    pub(super) fn check_fence(&self) -> Result<()> {
        match &self.fence {
            Some(f) => f.check(),
            None => Ok(()),
        }
    }

    pub(super) fn write_ops(&self, ops: &[OpRef<'_>]) -> Result<u64> {
        let w = self.write_ops_unacked(ops)?;
        self.acknowledge(w)
    }

    /// The first half of [`Inner::write_ops`]: validates, appends to the
    /// journal and applies to the memtable, without waiting for the fsync.
    /// Readers that find these writes wait for their durability themselves
    /// (`wait_durable`); the caller acknowledges through `acknowledge`.
    pub(super) fn write_ops_unacked(&self, ops: &[OpRef<'_>]) -> Result<Unacked> {
        // A store a newer owner fenced refuses every write (the check says
        // by whom); were the check ever to pass, the write goes on as usual,
        // never as an empty success a caller could take for an applied one.
        if self.fence.as_ref().is_some_and(Fence::is_fenced) {
            self.check_fence()?;
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
                    let (stored, flag) = self
                        .compress_gate
                        .compress(value, self.opts.value_compression);
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
            let mut w = self.lock_writer();
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
            // Padding (at most a page less a byte per record) is known only
            // once the offset is: count its bound.
            let align_min = self.opts.journal_align_value_bytes_min;
            let pad_bound = if align_min == 0 {
                0
            } else {
                prepared.len() * (record::PAGE_BYTES as usize - 1)
            };
            let total = total + pad_bound;
            if w.seg.len > SEGMENT_HEADER_BYTES
                && w.seg.len + total as u64 > self.opts.journal_segment_bytes_max
            {
                self.roll(&mut w)?;
            }
            // Every lookup `apply` needs happens before the journal append:
            // a failed one (too many open files) fails the write cleanly.
            let sv = self.current();
            let need_old = self.has_index.load(Ordering::Relaxed)
                || prepared.iter().any(|p| !p.terms.is_empty());
            let mut olds = Vec::with_capacity(prepared.len());
            for (i, p) in prepared.iter().enumerate() {
                olds.push(if !need_old {
                    Old::Unneeded
                } else if prepared[..i].iter().any(|q| q.key == p.key) {
                    Old::LookUp
                } else {
                    Old::Known(lookup(&sv, &entry::object_key(p.key))?)
                });
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
                let pad = record::pad_for(w.seg.len + buf.len() as u64, &parts, align_min);
                lens.push(record::encode_padded(
                    &mut buf,
                    &parts,
                    first_seq + i as u64,
                    pad,
                ));
            }
            // Set before the append: a failed one may still leave bytes.
            w.seg_deletes |= prepared.iter().any(|p| p.kind == KIND_DELETE);
            let _in_flight = self.io.start(IoSlot::Append);
            let at = match w.seg.append(&buf) {
                Ok(at) => {
                    self.io.append_ok();
                    at
                }
                // The failed append was cut off again: nothing happened.
                Err(e) if e.is_transient() => {
                    self.io.append_failed(&e);
                    return Err(e);
                }
                Err(e) => {
                    self.poison_journal(&mut w, &e);
                    return Err(e);
                }
            };
            w.written_total += buf.len() as u64;
            self.written_total.store(w.written_total, Ordering::Release);
            w.next_seq += prepared.len() as u64;
            self.last_seq.store(w.next_seq - 1, Ordering::Release);
            w.buf = buf;
            let seg_id = w.seg.id;
            let mut off = at;
            for (i, ((p, len), old)) in prepared.into_iter().zip(lens).zip(olds).enumerate() {
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
                    old,
                    false,
                )
                .map_err(|e| {
                    // Cannot happen (every lookup was done above), but if
                    // it did, the journal holds a write the memtable lacks.
                    self.fail_background(&e);
                    Error::WriteOutcomeUnknown(Box::new(e))
                })?;
                off += len as u64;
            }
            if sv.mems[0].bytes() >= self.opts.memtable_bytes_max {
                self.rotate(w.next_seq - 1);
            }
            (w.next_seq - 1, w.written_total)
        };
        Ok(Unacked { last_seq, end })
    }

    /// The second half of [`Inner::write_ops`]: waits until the write is
    /// durable under the store's durability (joining or leading a group
    /// commit), then checks that no newer owner fenced the store since.
    pub(super) fn acknowledge(&self, w: Unacked) -> Result<u64> {
        let Unacked { last_seq, end } = w;
        if self.opts.durability == Durability::Sync {
            self.group_sync(end)
                .map_err(|e| Error::WriteOutcomeUnknown(Box::new(e)))?;
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
    pub(super) fn wait_durable(&self, seq: u64) -> Result<()> {
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
    pub(super) fn group_sync(&self, end: u64) -> Result<()> {
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
                self.check_poison()?;
                continue;
            }
            // A poisoned store never leads a sync: after a failed one, the
            // next would succeed without writing the dropped pages, and the
            // records it "covered" would count as durable (fsyncgate).
            self.check_poison()?;
            *syncing = true;
            drop(syncing);
            // Read the total before the handle: if a roll happens in between,
            // the roll's own fsync covers the old segment and this one covers
            // the new, so everything up to `total` is durable afterwards.
            let total = self.written_total.load(Ordering::Acquire);
            let (file, path) = self.sync_target.lock().clone();
            let r = {
                let _in_flight = self.io.start(IoSlot::Sync);
                faults::sync_data(self.opts.faults.as_deref(), &path, &file)
            };
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
            let failed = r.map_err(|e| Error::io("fsync journal", &path, e)).err();
            match &failed {
                None => {
                    self.synced_total.fetch_max(total, Ordering::AcqRel);
                }
                // Poisoned before any waiter wakes or a new leader starts.
                Some(e) => self.fail_background(e),
            }
            *self.syncing.lock() = false;
            self.sync_cv.notify_all();
            if let Some(e) = failed {
                let mut w = self.lock_writer();
                self.poison_journal(&mut w, &e);
                return Err(e);
            }
        }
    }

    /// Poisons the store after a journal write or sync failed for good, and
    /// cuts the active segment back to its last good sync (caller holds the
    /// writer lock, so nothing is appended after it): the bytes after it
    /// may be in the page cache and not on the disk, and a reopen must not
    /// replay them from the cache, serve them, then lose them when the
    /// cache is dropped. If the cut fails it is retried by `close`, and the
    /// store is not to be reopened until it has succeeded.
    pub(super) fn poison_journal(&self, w: &mut WriterState, e: &Error) {
        self.fail_background(e);
        let unsynced = w
            .written_total
            .saturating_sub(self.synced_total.load(Ordering::Acquire));
        let keep = w.seg.len.saturating_sub(unsynced).max(SEGMENT_HEADER_BYTES);
        *self.cut_pending.lock() = Some((w.seg.path.clone(), keep));
        // Later appends start at `len` and there are none: the store is
        // poisoned. The writer's own view ends at the cut.
        w.seg.len = keep.min(w.seg.len);
        let _ = self.retry_cut();
    }

    /// Makes the pending cut of the journal (see `poison_journal`), if any:
    /// truncate, then fsync through the fault seam. `Ok` once no cut is
    /// pending.
    pub(super) fn retry_cut(&self) -> Result<()> {
        let mut pending = self.cut_pending.lock();
        let Some((path, keep)) = pending.clone() else {
            return Ok(());
        };
        // The file is a newer owner's now: it replayed what it found, and
        // cutting that away under it would lose records it serves.
        if self.fence.as_ref().is_some_and(|f| f.check().is_err()) {
            *pending = None;
            return Ok(());
        }
        let cut = (|| {
            let f = std::fs::OpenOptions::new().write(true).open(&path)?;
            if f.metadata()?.len() > keep {
                f.set_len(keep)?;
            }
            faults::sync_data(self.opts.faults.as_deref(), &path, &f)
        })();
        match cut {
            Ok(()) => {
                *pending = None;
                Ok(())
            }
            Err(e) => Err(Error::io("fsync journal (cut to last sync)", path, e)),
        }
    }
}
