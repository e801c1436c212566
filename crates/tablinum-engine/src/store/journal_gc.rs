//! Journal compaction (value GC) execution: rewrites the live records of a
//! run of sealed segments into new segments, switches ledger pointers and
//! hands the segment edit to the next flush. The live records of a run
//! without delete records are found from one pass over the ledger and only
//! they are read; a run that may hold one is read record by record.
//!
//! The policy (which run, whether a record is live) is pure and lives in
//! [`crate::gc`]; this module only executes it. It never touches segments
//! holding writes above `persisted_seq`.

use std::collections::HashSet;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::failpoint::failpoint;
use crate::gc::{self, GcPolicy, RecordAt, SegmentStat};
use crate::journal::record::{self, Record, RecordParts, FLAG_BATCH_CONTINUES, KIND_DELETE};
use crate::journal::segment::{self, SegmentKind, SegmentWriter, SEGMENT_HEADER_BYTES};
use crate::ledger::entry::{self, Entry, EntryKind, Loc, SPACE_OBJECT};
use crate::ledger::merge::Merge;
use crate::manifest::{self, SegmentMeta};

use parking_lot::MutexGuard;

use super::order::Ordered;
use super::read::{lookup, sources};
use super::{GcEdit, Inner, JournalCompaction, SuperVersion, WriterState, STALL_RECHECK_MS};

pub(super) fn utc_hour_now() -> u8 {
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

/// Least time a [`Pacer`] sleeps at once, milliseconds (shorter sleeps cost
/// more than they smooth).
const PACE_SLEEP_MS_MIN: u64 = 10;

/// Keeps the bytes a loop reads at or below a rate by sleeping whenever it
/// runs ahead of it; a rate of 0 never sleeps.
struct Pacer {
    start: Instant,
    bytes_per_s: u64,
    done: u64,
}

impl Pacer {
    fn new(bytes_per_s: u64) -> Pacer {
        Pacer {
            start: Instant::now(),
            bytes_per_s,
            done: 0,
        }
    }

    /// Counts `n` more bytes; sleeps until they are due.
    fn add(&mut self, n: u64) {
        self.done += n;
        if let Some(ahead) = self.ahead() {
            std::thread::sleep(ahead);
        }
    }

    /// How far ahead of the rate the loop is, when it is by at least
    /// [`PACE_SLEEP_MS_MIN`].
    fn ahead(&self) -> Option<Duration> {
        if self.bytes_per_s == 0 {
            return None;
        }
        let due = Duration::from_secs_f64(self.done as f64 / self.bytes_per_s as f64);
        due.checked_sub(self.start.elapsed())
            .filter(|d| *d >= Duration::from_millis(PACE_SLEEP_MS_MIN))
    }
}

impl Inner {
    pub(super) fn scheduled_journal_compaction(&self) -> Result<()> {
        let inner = self;
        let Some(window) = inner.opts.journal_compaction_hours else {
            return Ok(());
        };
        if !in_window(utc_hour_now(), window) {
            return Ok(());
        }
        let recent = inner.gc_lock.lock().is_some_and(|t| {
            t.elapsed() < Duration::from_secs(inner.opts.journal_compaction_interval_s)
        });
        if recent && !self.journal_over_garbage_pct() {
            return Ok(());
        }
        self.journal_compaction().map(|_| ())
    }

    /// True when `journal_compaction_garbage_pct` (not 0) of the sealed
    /// journal is known dead, counting dead bytes not yet in the manifest.
    fn journal_over_garbage_pct(&self) -> bool {
        let pct = self.opts.journal_compaction_garbage_pct;
        if pct == 0 {
            return false;
        }
        // Cloned first: `segment_stats` takes the writer lock, which comes
        // before the meta lock.
        let segments = self.lock_meta().state.segments.clone();
        gc::garbage_pct(&self.segment_stats(&segments)) >= f64::from(pct)
    }

    /// What the GC policy knows of `segments`: their sizes and the bytes
    /// known dead, including dead bytes counted since the last manifest save.
    fn segment_stats(&self, segments: &[SegmentMeta]) -> Vec<SegmentStat> {
        let active = self.lock_writer().seg.id;
        let unsaved = self.dead.lock().clone();
        segments
            .iter()
            .map(|s| SegmentStat {
                id: s.id,
                sealed: s.id != active && s.max_seq != u64::MAX,
                max_seq: s.max_seq,
                record_bytes: s.size.saturating_sub(SEGMENT_HEADER_BYTES),
                dead_bytes: s.dead_bytes + unsaved.get(&s.id).copied().unwrap_or(0),
            })
            .collect()
    }

    /// Which relocated records are still their key's current version, as
    /// entries pointing at the new place; returned with the writer lock,
    /// under which they must be inserted (so no write can slip in between).
    ///
    /// The lookups run before the lock is taken: a run relocates tens of
    /// thousands of records, and looking each one up under the lock (ledger
    /// blocks read from disk included) held every writer for a quarter of a
    /// second per run. Under the lock only the memtables that can hold a
    /// write newer than the lookups are checked again. If a flush took such
    /// a memtable away meanwhile, the lookups are redone; after
    /// [`RELOCATION_LOOKUP_TRIES`] such misses they run under the lock.
    fn relocation_switches(&self, relocs: &[Relocation]) -> Result<(WriterGuard<'_>, Switches)> {
        for _ in 0..RELOCATION_LOOKUP_TRIES {
            let looked = self.look_up_relocations(relocs)?;
            if let Some(confirmed) = self.confirm_relocations(looked) {
                return Ok(confirmed);
            }
        }
        let w = self.lock_writer();
        let switches = current_switches(&self.current(), relocs)?;
        Ok((w, switches))
    }

    /// The lookups of [`Inner::relocation_switches`], without the writer lock.
    fn look_up_relocations(&self, relocs: &[Relocation]) -> Result<LookedUp> {
        // Every write below `mark` is applied and visible in `before`, and
        // its immutable memtables hold nothing at or above `mark`.
        let (mark, before) = {
            let w = self.lock_writer();
            (w.next_seq, self.current())
        };
        Ok(LookedUp {
            mark,
            active_then: before.mems[0].id(),
            switches: current_switches(&before, relocs)?,
        })
    }

    /// Takes the writer lock and drops the switches a write made since the
    /// lookups has overtaken. `None` (lock released) when a flush took the
    /// memtables such a write may be in away meanwhile.
    fn confirm_relocations(&self, looked: LookedUp) -> Option<(WriterGuard<'_>, Switches)> {
        let LookedUp {
            mark,
            active_then,
            mut switches,
        } = looked;
        let w = self.lock_writer();
        let now = self.current();
        // Writes at or above `mark` are in the memtable active at the
        // lookups or in newer ones, unless a flush moved them to a table.
        let newer = now.mems.iter().position(|m| m.id() == active_then)?;
        switches.retain(|(lk, _)| {
            now.mems[..=newer]
                .iter()
                .find_map(|m| m.get(lk))
                .is_none_or(|cur| cur.seq < mark)
        });
        Some((w, switches))
    }

    pub(super) fn journal_compaction(&self) -> Result<JournalCompaction> {
        let inner = self;
        let mut last = inner.gc_lock.lock();
        *last = Some(Instant::now());
        let (persisted, metas) = {
            let m = inner.lock_meta();
            (m.state.persisted_seq, m.state.segments.clone())
        };
        let stats = inner.segment_stats(&metas);
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
        // Records above persisted_seq exist only in the journal (the ledger
        // may not hold them yet): their segments are never rewritten.
        assert!(
            run_metas
                .iter()
                .all(|s| s.max_seq != u64::MAX && s.max_seq <= persisted),
            "journal compaction chose a segment above persisted_seq {persisted}: {run_metas:?}"
        );
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
        let mut pace = Pacer::new(gc::pace_bytes_per_s(
            inner.opts.journal_compaction_bytes_per_s,
            gc::garbage_pct(&stats),
            inner.opts.journal_compaction_garbage_pct,
        ));
        let mut out = Relocator::new(inner);
        if run_metas.iter().all(|s| !s.deletes) {
            // No delete record in the run: the live records are exactly the
            // ones the ledger points at; only their spans are read.
            let live: Vec<Pointer> = run_pointers(&sv, &run_metas)?
                .into_iter()
                .filter(|p| {
                    gc::record_is_live(
                        &RecordAt {
                            is_delete: p.is_delete,
                            seq: p.seq,
                            at: p.at,
                        },
                        Some((p.seq, p.at)),
                        others_min_seq,
                    )
                })
                .collect();
            for sm in &run_metas {
                report.bytes_before += sm.size;
                let mine: Vec<&Pointer> = live.iter().filter(|p| p.at.segment == sm.id).collect();
                report.bytes_read += inner.copy_pointed(sm, &mine, &mut out, &mut pace)?;
            }
        } else {
            for sm in &run_metas {
                report.bytes_before += sm.size;
                report.bytes_read += sm.size;
                let path = segment::segment_path(&inner.files.journal_dir, sm.id, sm.kind);
                segment::scan(
                    &path,
                    sm.id,
                    sm.kind,
                    false,
                    sm.scan_limit(),
                    sm.first_seq(),
                    |off, len, rec| {
                        // Closing stops a run between records: its new
                        // segments are unnamed and go at the next open.
                        inner.check_open()?;
                        pace.add(u64::from(len));
                        let lk = entry::object_key(rec.key);
                        let cur = lookup(&sv, &lk)?;
                        let here = Loc {
                            segment: sm.id,
                            offset: off,
                            len,
                        };
                        let live = gc::record_is_live(
                            &RecordAt {
                                is_delete: rec.kind == KIND_DELETE,
                                seq: rec.seq,
                                at: here,
                            },
                            cur.as_ref().map(|e| (e.seq, e.loc)),
                            others_min_seq,
                        );
                        if !live {
                            *report.records_dropped.get_or_insert(0) += 1;
                            return Ok(());
                        }
                        out.copy(rec, here)
                    },
                )?;
            }
        }
        let (new_metas, relocs) = out.finish()?;
        report.records_relocated = relocs.len() as u64;
        manifest::sync_dir(&inner.files.journal_dir)?;
        report.bytes_after = new_metas.iter().map(|m| m.size).sum();
        // Make the new segments readable before any pointer refers to them
        // (they join the manifest with the flush that carries the edit; a
        // crash before that deletes them and the old pointers stay valid).
        let added: Vec<(u64, SegmentKind)> = new_metas.iter().map(|m| (m.id, m.kind)).collect();
        failpoint!("gc.after-copy");
        inner.publish_segments(&added);
        // Switch pointers: looked up first without the writer lock (a
        // lookup may read ledger blocks from disk), then under it only the
        // memtables are checked again for writes that came in meanwhile.
        {
            let (w, switches) = inner.relocation_switches(&relocs)?;
            let sv = inner.current();
            for (lk, e) in switches {
                sv.mems[0].insert(lk, e);
            }
            // Register the edit against the memtable about to be frozen
            // *before* freezing it, so the flush cannot miss it.
            inner.pending_gc.lock().push((
                sv.mems[0].id(),
                GcEdit {
                    remove: run.clone(),
                    add: new_metas.clone(),
                },
            ));
            inner.rotate(w.next_seq - 1);
        }
        failpoint!("gc.after-switch");
        // Wait until the flush that carries the edit has landed, still
        // holding `gc_lock` so no second run picks the same segments.
        let wait_s = inner.opts.journal_compaction_flush_wait_s;
        let deadline = Instant::now() + Duration::from_secs(wait_s);
        loop {
            inner.check_open()?;
            let sv = inner.current();
            if run.iter().all(|id| !sv.segments.contains_key(id)) {
                break;
            }
            if Instant::now() > deadline {
                return Err(Error::Background(std::sync::Arc::new(Error::Unavailable {
                    reason: format!(
                        "journal compaction edit was not flushed within \
                         journal_compaction_flush_wait_s = {wait_s} s"
                    ),
                })));
            }
            let mut g = inner.bg_lock.lock();
            inner.bg_cv.notify_all();
            inner
                .bg_cv
                .wait_for(&mut g, Duration::from_millis(STALL_RECHECK_MS));
        }
        drop(last);
        if !report.segments_compacted.is_empty() {
            let c = &inner.counters;
            c.journal_compactions.fetch_add(1, Ordering::Relaxed);
            c.journal_bytes_reclaimed.fetch_add(
                report.bytes_before.saturating_sub(report.bytes_after),
                Ordering::Relaxed,
            );
        }
        Ok(report)
    }
}

/// A record journal compaction copied: its key, sequence number, old place
/// and new place.
type Relocation = (Vec<u8>, u64, Loc, Loc);

/// Most bytes between two live records that one journal compaction read
/// still spans: reading a short dead gap costs less than a second read.
const GC_READ_GAP_BYTES_MAX: u64 = 16 << 10;
/// Most bytes one journal compaction read of live records spans.
const GC_READ_SPAN_BYTES_MAX: u64 = 1 << 20;

/// A journal record of a run that the ledger points at.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pointer {
    /// User key.
    key: Vec<u8>,
    /// Sequence number of the record.
    seq: u64,
    /// Where the record is.
    at: Loc,
    /// A tombstone's delete record rather than a put.
    is_delete: bool,
}

/// Every record of the segments `run` that the ledger of `sv` points at
/// (current puts and tombstones), in segment and offset order. One pass
/// over the object key space instead of a point lookup per record read.
fn run_pointers(sv: &SuperVersion, run: &[SegmentMeta]) -> Result<Vec<Pointer>> {
    let ids: HashSet<u64> = run.iter().map(|s| s.id).collect();
    let mut merge = Merge::new(sources(sv, &[SPACE_OBJECT])?)?;
    let mut out = Vec::new();
    while let Some((k, e)) = merge.next_with(None)? {
        if k.first() != Some(&SPACE_OBJECT) {
            break;
        }
        if !ids.contains(&e.loc.segment) {
            continue;
        }
        let is_delete = match e.kind {
            EntryKind::Object => false,
            EntryKind::Tombstone => true,
            EntryKind::Index | EntryKind::IndexTombstone => continue,
        };
        out.push(Pointer {
            key: k[1..].to_vec(),
            seq: e.seq,
            at: e.loc,
            is_delete,
        });
    }
    out.sort_unstable_by_key(|p| (p.at.segment, p.at.offset));
    Ok(out)
}

impl Inner {
    /// Copies the records `pointers` of segment `sm` (in offset order) to
    /// `out`, reading only spans that hold them; returns the bytes read.
    /// Every record read is checked against its ledger entry: a pointer the
    /// segment does not back is a corruption error, and nothing is switched.
    fn copy_pointed(
        &self,
        sm: &SegmentMeta,
        pointers: &[&Pointer],
        out: &mut Relocator<'_>,
        pace: &mut Pacer,
    ) -> Result<u64> {
        if pointers.is_empty() {
            return Ok(0);
        }
        let path = segment::segment_path(&self.files.journal_dir, sm.id, sm.kind);
        let file = File::open(&path).map_err(|e| Error::io("open segment", &path, e))?;
        let mut head = [0u8; SEGMENT_HEADER_BYTES as usize];
        file.read_exact_at(&mut head, 0)
            .map_err(|e| Error::io("read segment header", &path, e))?;
        segment::check_header(&head, &path, sm.id, sm.kind)?;
        let limit = sm.scan_limit();
        // The end of a pointed record, once its place is checked.
        let end_of = |p: &Pointer, prev_end: u64| -> Result<u64> {
            let len = p.at.len as usize;
            let end = p.at.offset.checked_add(u64::from(p.at.len));
            match end {
                _ if !(record::HEADER_BYTES..=record::RECORD_BYTES_MAX).contains(&len) => {
                    Err(Error::corrupt(
                        &path,
                        p.at.offset,
                        "ledger entry's record length out of range",
                    ))
                }
                Some(end) if p.at.offset >= prev_end.max(SEGMENT_HEADER_BYTES) && end <= limit => {
                    Ok(end)
                }
                _ => Err(Error::corrupt(
                    &path,
                    p.at.offset,
                    "ledger entry points outside its journal segment or into another record",
                )),
            }
        };
        let mut read = 0u64;
        let mut buf = Vec::new();
        let mut prev_end = 0u64;
        let mut i = 0;
        while i < pointers.len() {
            // Closing stops a run between reads: its new segments are
            // unnamed and go at the next open.
            self.check_open()?;
            let start = pointers[i].at.offset;
            let mut end = end_of(pointers[i], prev_end)?;
            let mut j = i + 1;
            while let Some(p) = pointers.get(j) {
                if p.at.offset > end.saturating_add(GC_READ_GAP_BYTES_MAX) {
                    break;
                }
                let e = end_of(p, end)?;
                if e - start > GC_READ_SPAN_BYTES_MAX {
                    break;
                }
                end = e;
                j += 1;
            }
            prev_end = end;
            buf.resize((end - start) as usize, 0);
            file.read_exact_at(&mut buf, start).map_err(|e| {
                if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    Error::corrupt(
                        &path,
                        start,
                        "ledger entry points past the end of its segment",
                    )
                } else {
                    Error::io("pread journal", &path, e)
                }
            })?;
            read += end - start;
            pace.add(end - start);
            for p in &pointers[i..j] {
                let off = (p.at.offset - start) as usize;
                let raw = &buf[off..off + p.at.len as usize];
                let rec =
                    record::decode(raw).map_err(|why| Error::corrupt(&path, p.at.offset, why))?;
                if rec.seq != p.seq || rec.key != p.key || (rec.kind == KIND_DELETE) != p.is_delete
                {
                    return Err(Error::corrupt(
                        &path,
                        p.at.offset,
                        "journal record does not match its ledger entry",
                    ));
                }
                out.copy(&rec, p.at)?;
            }
            i = j;
        }
        Ok(read)
    }
}

/// Writes the records a journal compaction keeps into new compacted
/// segments, in the order given, and remembers where each one went.
struct Relocator<'a> {
    inner: &'a Inner,
    writer: Option<SegmentWriter>,
    metas: Vec<SegmentMeta>,
    relocs: Vec<Relocation>,
    buf: Vec<u8>,
}

impl<'a> Relocator<'a> {
    fn new(inner: &'a Inner) -> Self {
        Relocator {
            inner,
            writer: None,
            metas: Vec::new(),
            relocs: Vec::new(),
            buf: Vec::new(),
        }
    }

    /// Appends `rec`, found at `here`, to the current new segment (a fresh
    /// one when there is none or it is full).
    fn copy(&mut self, rec: &Record<'_>, here: Loc) -> Result<()> {
        let full = self.inner.opts.journal_segment_bytes_max;
        if self.writer.as_ref().is_none_or(|w| w.len >= full) {
            self.seal()?;
            let id = self.inner.new_file_id();
            self.writer = Some(
                SegmentWriter::create(&self.inner.files.journal_dir, id, SegmentKind::Compacted)?
                    .with_writeback(self.inner.opts.journal_writeback_bytes),
            );
            self.metas.push(SegmentMeta {
                id,
                kind: SegmentKind::Compacted,
                min_seq: u64::MAX,
                max_seq: 0,
                size: 0,
                dead_bytes: 0,
                deletes: false,
            });
        }
        let (Some(w), Some(m)) = (self.writer.as_mut(), self.metas.last_mut()) else {
            return Ok(());
        };
        self.buf.clear();
        let parts = RecordParts {
            flags: rec.flags & !FLAG_BATCH_CONTINUES,
            ..rec.parts()
        };
        let pad = record::pad_for(w.len, &parts, self.inner.opts.journal_align_value_bytes_min);
        let n = record::encode_padded(&mut self.buf, &parts, rec.seq, pad);
        let at = w.append(&self.buf)?;
        m.min_seq = m.min_seq.min(rec.seq);
        m.max_seq = m.max_seq.max(rec.seq);
        m.deletes |= rec.kind == KIND_DELETE;
        self.relocs.push((
            rec.key.to_vec(),
            rec.seq,
            here,
            Loc {
                segment: w.id,
                offset: at,
                len: n as u32,
            },
        ));
        Ok(())
    }

    /// Syncs the current new segment and records its size.
    fn seal(&mut self) -> Result<()> {
        if let Some(w) = self.writer.take() {
            w.sync()?;
            if let Some(m) = self.metas.last_mut() {
                m.size = w.len;
            }
        }
        Ok(())
    }

    /// The new segments and the records copied into them.
    fn finish(mut self) -> Result<(Vec<SegmentMeta>, Vec<Relocation>)> {
        self.seal()?;
        Ok((self.metas, self.relocs))
    }
}

/// Relocated records still current: ledger key and the entry, pointing at
/// the new place, to insert into the active memtable.
type Switches = Vec<(Vec<u8>, Entry)>;

/// The writer lock, as [`Inner::lock_writer`] holds it.
type WriterGuard<'a> = Ordered<MutexGuard<'a, WriterState>>;

/// Relocations looked up without the writer lock: what was current then.
struct LookedUp {
    /// The writer's next sequence number before the lookups: any write at
    /// or above it came after them.
    mark: u64,
    /// The memtable active at the lookups.
    active_then: u64,
    /// The relocations that were current, as entries at their new place.
    switches: Switches,
}

/// How often [`Inner::relocation_switches`] redoes its lookups when a flush
/// overtook them, before it looks up under the writer lock instead.
const RELOCATION_LOOKUP_TRIES: usize = 3;

/// The relocations whose record is its key's newest version in `sv`, as that
/// entry pointing at the record's new place.
fn current_switches(sv: &SuperVersion, relocs: &[Relocation]) -> Result<Switches> {
    let mut switches = Vec::with_capacity(relocs.len());
    for (key, seq, old, new) in relocs {
        let lk = entry::object_key(key);
        if let Some(cur) = lookup(sv, &lk)? {
            if cur.seq == *seq && cur.loc == *old {
                let mut e = (*cur).clone();
                e.loc = *new;
                switches.push((lk, e));
            }
        }
    }
    Ok(switches)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 3,000 incompressible bytes from `seed` (xorshift64), so each record
    /// takes its full size in a segment.
    fn incompressible(seed: u32) -> Vec<u8> {
        let mut x = u64::from(seed).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..3000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// A write that lands between a relocation's lookup and the writer lock
    /// wins over the relocation; a flush in between sends the lookups
    /// round again.
    #[test]
    fn relocations_yield_to_writes_made_after_their_lookups() {
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::options::Options {
            durability: crate::options::Durability::NoSync,
            journal_compaction_hours: None,
            ..Default::default()
        };
        let s = super::super::Store::open(dir.path(), opts).unwrap();
        let key = |i: u32| format!("k{i:03}").into_bytes();
        for i in 0..50u32 {
            s.put(&key(i), &incompressible(i)).unwrap();
        }
        // The entries sit in a ledger table, the memtables are empty.
        s.flush().unwrap();
        let inner = &s.inner;
        let relocs: Vec<(Vec<u8>, u64, Loc, Loc)> = (0..50u32)
            .map(|i| {
                let e = lookup(&inner.current(), &entry::object_key(&key(i)))
                    .unwrap()
                    .unwrap();
                let new = Loc {
                    segment: 1 << 40,
                    offset: u64::from(i) * 4096,
                    len: e.loc.len,
                };
                (key(i), e.seq, e.loc, new)
            })
            .collect();
        let switched = |sw: &[(Vec<u8>, Entry)], i: u32| {
            sw.iter()
                .any(|(lk, e)| *lk == entry::object_key(&key(i)) && e.loc.segment == 1 << 40)
        };

        let looked = inner.look_up_relocations(&relocs).unwrap();
        assert_eq!(looked.switches.len(), 50);
        s.put(&key(3), b"newer").unwrap();
        s.delete(&key(4)).unwrap();
        let (w, sw) = inner
            .confirm_relocations(looked)
            .expect("no flush in between");
        drop(w);
        assert_eq!(sw.len(), 48);
        assert!(!switched(&sw, 3) && !switched(&sw, 4) && switched(&sw, 5));

        let looked = inner.look_up_relocations(&relocs).unwrap();
        assert_eq!(looked.switches.len(), 48);
        s.put(&key(5), b"newer").unwrap();
        s.flush().unwrap();
        assert!(inner.confirm_relocations(looked).is_none());
        let (w, sw) = inner.relocation_switches(&relocs).unwrap();
        drop(w);
        assert_eq!(sw.len(), 47);
        assert!(!switched(&sw, 5) && switched(&sw, 6));
    }

    /// The pointer path reads what the ledger points at and checks it: a
    /// pointer the segment does not back (wrong record, past the end,
    /// overlapping another) is a corruption error, never a copy.
    #[test]
    fn pointed_records_are_checked_before_they_are_copied() {
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::options::Options {
            durability: crate::options::Durability::NoSync,
            journal_compaction_hours: None,
            journal_segment_bytes_max: 64 << 10,
            ..Default::default()
        };
        let s = super::super::Store::open(dir.path(), opts).unwrap();
        let key = |i: u32| format!("k{i:03}").into_bytes();
        for i in 0..50u32 {
            s.put(&key(i), &incompressible(i)).unwrap();
        }
        for i in 0..50u32 {
            if i % 8 != 0 {
                s.put(&key(i), b"small").unwrap();
            }
        }
        s.flush().unwrap();
        let inner = &s.inner;
        let seg = inner.lock_meta().state.segments[0].clone();
        let sv = inner.current();
        let all = run_pointers(&sv, std::slice::from_ref(&seg)).unwrap();
        // The first segment holds ~21 records; only keys 0, 8 and 16 were
        // not overwritten.
        assert!(seg.size > 0 && !seg.deletes, "{seg:?}");
        let live: Vec<Vec<u8>> = all.iter().map(|p| p.key.clone()).collect();
        assert_eq!(live, [key(0), key(8), key(16)]);
        let copy = |ps: &[Pointer]| {
            let refs: Vec<&Pointer> = ps.iter().collect();
            let mut out = Relocator::new(inner);
            let read = inner.copy_pointed(&seg, &refs, &mut out, &mut Pacer::new(0));
            read.map(|r| (r, out.finish().unwrap().1.len()))
        };
        let (read, copied) = copy(&all).unwrap();
        assert_eq!(copied, 3);
        // Three 3 KB records 24 KB apart: three reads of one record each.
        assert!(read < seg.size / 4, "{read} of {}", seg.size);

        let corrupt = |ps: Vec<Pointer>, why: &str| {
            let e = copy(&ps).unwrap_err();
            assert!(
                matches!(&e, Error::Corruption { .. }) && e.to_string().contains(why),
                "{e}"
            );
        };
        let mut wrong_seq = all.clone();
        wrong_seq[2].seq += 1;
        corrupt(wrong_seq, "does not match its ledger entry");
        let mut past_end = all.clone();
        past_end[2].at.offset = seg.size;
        corrupt(past_end, "outside its journal segment");
        let mut overlap = all.clone();
        overlap[1].at.offset = overlap[0].at.offset + 1;
        corrupt(overlap, "into another record");
        let mut short = all.clone();
        short[0].at.len = 3;
        corrupt(short, "length out of range");
    }

    /// A segment that got a delete record is sealed saying so (at a roll
    /// and at close, and the flags survive a reopen); one without says it
    /// has none. (`store_basic.rs` checks a run holding one is read whole.)
    #[test]
    fn segments_with_deletes_are_flagged_when_sealed() {
        let dir = tempfile::tempdir().unwrap();
        let opts = crate::options::Options {
            durability: crate::options::Durability::NoSync,
            journal_compaction_hours: None,
            journal_segment_bytes_max: 64 << 10,
            value_compression: false,
            ..Default::default()
        };
        let flags = |s: &super::super::Store| -> Vec<(u64, bool)> {
            let m = s.inner.lock_meta();
            m.state
                .segments
                .iter()
                .map(|m| (m.max_seq, m.deletes))
                .collect()
        };
        let s = super::super::Store::open(dir.path(), opts.clone()).unwrap();
        let v = [7u8; 20_000];
        // Three 20 KB records fill a 64 KiB segment; the fourth rolls it.
        // Segment 1: puts only, sealed by a roll.
        for k in ["a0", "a1", "a2"] {
            s.put(k.as_bytes(), &v).unwrap();
        }
        // Segment 2: a delete among puts, sealed by a roll.
        s.put(b"b0", &v).unwrap();
        s.delete(b"a0").unwrap();
        s.put(b"b1", &v).unwrap();
        s.put(b"b2", &v).unwrap();
        // Segment 3, active: a delete.
        s.put(b"c0", &v).unwrap();
        s.delete(b"a1").unwrap();
        let f = flags(&s);
        assert_eq!(f.len(), 3, "{f:?}");
        assert!(f[0].0 != u64::MAX && !f[0].1, "{f:?}");
        assert!(f[1].0 != u64::MAX && f[1].1, "{f:?}");
        // Active: unknown until sealed.
        assert_eq!(f[2], (u64::MAX, true), "{f:?}");
        s.close().unwrap();
        drop(s);
        let s = super::super::Store::open(dir.path(), opts.clone()).unwrap();
        let f = flags(&s);
        assert!(!f[0].1 && f[1].1, "kept over a reopen: {f:?}");
        assert!(f[2].0 != u64::MAX && f[2].1, "sealed by close: {f:?}");
    }

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
    fn a_pacer_is_ahead_only_when_bytes_come_faster_than_its_rate() {
        let mut unpaced = Pacer::new(0);
        unpaced.done = u64::MAX / 2;
        assert_eq!(unpaced.ahead(), None);
        // 1 MiB/s: 4 MiB at once is ~4 s ahead; a few bytes are not worth a sleep.
        let mut p = Pacer::new(1 << 20);
        p.done = 4 << 20;
        let ahead = p.ahead().unwrap_or_default();
        assert!(
            ahead > Duration::from_secs(3) && ahead <= Duration::from_secs(4),
            "{ahead:?}"
        );
        let mut p = Pacer::new(1 << 20);
        p.done = 100;
        assert_eq!(p.ahead(), None);
        // A real sleep: 200 KiB at 2 MiB/s takes about 100 ms.
        let mut p = Pacer::new(2 << 20);
        let t = Instant::now();
        p.add(200 << 10);
        assert!(
            t.elapsed() >= Duration::from_millis(90),
            "{:?}",
            t.elapsed()
        );
    }
}
