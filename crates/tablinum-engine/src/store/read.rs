//! The read path shared by every face of a store: point lookups through the
//! memtables and levels, merged range iterators, value reads from journal
//! segments, index queries and anti-entropy folds.
//!
//! Reads only: nothing here appends, renames or deletes a file. Under
//! `Durability::Sync` no entry is handed out before its write is durable.

use std::ops::Bound;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::cache::ReadCounters;
use crate::error::{Error, Result};
use crate::journal::record::{self, KIND_PUT};
use crate::journal::segment::{self, SegmentKind};
use crate::ledger::bloom::key_hash;
use crate::ledger::entry::{self, Entry, EntryKind, SPACE_INDEX, SPACE_OBJECT};
use crate::ledger::merge::{LevelSource, MemSource, Merge, Source, SstSource};
use crate::options::INDEX_NAME_BYTES_MAX;

use super::write::validate_key;
use super::{Files, Head, IndexHit, Inner, SuperVersion};

pub(super) fn lookup(sv: &SuperVersion, lk: &[u8]) -> Result<Option<Arc<Entry>>> {
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

pub(super) fn sources(sv: &SuperVersion, start: &[u8]) -> Result<Vec<Box<dyn Source>>> {
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
pub(super) fn prefix_end(p: &[u8]) -> Option<Vec<u8>> {
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
pub(super) struct View<'a> {
    pub(super) files: &'a Arc<Files>,
    /// The store whose group commit an entry waits for before it is handed
    /// out (none for a read-only view: published files are durable).
    pub(super) gate: Option<&'a Arc<Inner>>,
    pub(super) sv: Arc<SuperVersion>,
}

impl View<'_> {
    pub(super) fn entry(&self, key: &[u8]) -> Result<Option<Arc<Entry>>> {
        validate_key(key)?;
        let e = lookup(&self.sv, &entry::object_key(key))?;
        if let Some(e) = &e {
            if let Some(g) = self.gate {
                g.wait_durable(e.seq)?;
            }
        }
        Ok(e.filter(|e| e.kind == EntryKind::Object))
    }

    pub(super) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        match self.entry(key)? {
            Some(e) => self.value(key, &e).map(Some),
            None => Ok(None),
        }
    }

    pub(super) fn head(&self, key: &[u8]) -> Result<Option<Head>> {
        self.entry(key)?.map(|e| self.head_of(&e)).transpose()
    }

    pub(super) fn head_of(&self, e: &Entry) -> Result<Head> {
        Ok(Head {
            seq: e.seq,
            value_len: e.value_len as u64,
            value_hash: e.value_hash,
            metadata: e.meta.clone(),
            index_terms: record::decode_terms(&e.terms).ok_or_else(|| {
                Error::corrupt(
                    &self.files.ledger_dir,
                    0,
                    "malformed index terms in ledger entry",
                )
            })?,
        })
    }

    pub(super) fn value(&self, key: &[u8], e: &Entry) -> Result<Vec<u8>> {
        if let Some(v) = &e.inline {
            return Ok(v.clone());
        }
        // The active memtable is shared with views taken before a segment
        // roll, so an entry written after this view was taken may point at a
        // segment the view does not list yet; the store's current view does
        // (a segment is published before any write goes to it).
        let seg = match self.sv.segments.get(&e.loc.segment) {
            Some(seg) => seg.clone(),
            None => self
                .gate
                .and_then(|g| g.current().segments.get(&e.loc.segment).cloned())
                .ok_or_else(|| {
                    Error::corrupt(
                        segment::segment_path(
                            &self.files.journal_dir,
                            e.loc.segment,
                            SegmentKind::Write,
                        ),
                        e.loc.offset,
                        "ledger entry points to a journal segment that is not in the manifest",
                    )
                })?,
        };
        let file = seg.handle()?;
        let reads = self.files.caches.reads();
        // An uncompressed value is read alone, without the record's header
        // and key: with the value on a page boundary that is one page less
        // (`Options::journal_align_value_bytes_min`). The ledger's hash
        // checks it; on a mismatch the whole record is read, so the error
        // names what is wrong.
        if let Some((off, len)) = record::value_span(
            u64::from(e.loc.len),
            key.len(),
            e.meta.len(),
            e.terms.len(),
            e.value_len,
        ) {
            let v = segment::read_span(&file, &seg.path, e.loc.offset + off, len)?;
            ReadCounters::add(&reads.value_reads, 1);
            ReadCounters::add(&reads.value_read_bytes, len);
            if xxh3_64(&v) == e.value_hash {
                return Ok(v);
            }
        }
        let buf = segment::read_record(&file, &seg.path, e.loc.offset, e.loc.len)?;
        ReadCounters::add(&reads.value_reads, 1);
        ReadCounters::add(&reads.value_read_bytes, buf.len() as u64);
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

    pub(super) fn ledger_range(&self, start: Vec<u8>, end: Option<Vec<u8>>) -> Result<LedgerRange> {
        let merge = Merge::new(sources(&self.sv, &start)?)?;
        Ok(LedgerRange {
            merge,
            end,
            done: false,
            gate: self.gate.cloned(),
        })
    }

    /// An iterator over (key, value) of the live objects in a range.
    pub(super) fn objects(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<ObjectIter> {
        Ok(ObjectIter {
            range: self.object_range(start, end)?,
            files: self.files.clone(),
            gate: self.gate.cloned(),
            sv: self.sv.clone(),
            ready: Default::default(),
            exhausted: false,
            failed: false,
        })
    }

    /// An iterator over (key, head) of the live objects in a range.
    pub(super) fn heads(&self, start: Bound<&[u8]>, end: Bound<&[u8]>) -> Result<HeadIter> {
        Ok(HeadIter {
            range: self.object_range(start, end)?,
            files: self.files.clone(),
            gate: self.gate.cloned(),
            sv: self.sv.clone(),
            failed: false,
        })
    }

    pub(super) fn object_range(
        &self,
        start: Bound<&[u8]>,
        end: Bound<&[u8]>,
    ) -> Result<ObjectRange> {
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

    pub(super) fn index_query(
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
                .ok_or_else(|| Error::corrupt(&self.files.ledger_dir, 0, "malformed index key"))?;
            out.push(IndexHit {
                term: return_terms.then_some(term),
                key,
            });
        }
        Ok(out)
    }

    pub(super) fn aae_fold<F: FnMut(&[u8], u64)>(
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

pub(super) struct LedgerRange {
    pub(super) merge: Merge,
    pub(super) end: Option<Vec<u8>>,
    pub(super) done: bool,
    /// Whose durability an entry waits for before it is handed out.
    pub(super) gate: Option<Arc<Inner>>,
}

impl LedgerRange {
    pub(super) fn next(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        if self.done {
            return Ok(None);
        }
        match self.merge.next_with(None)? {
            Some((k, e)) if self.end.as_ref().is_none_or(|end| k < *end) => {
                if let Some(g) = &self.gate {
                    g.wait_durable(e.seq)?;
                }
                Ok(Some((k, e)))
            }
            _ => {
                self.done = true;
                Ok(None)
            }
        }
    }
}

pub(super) struct ObjectRange {
    pub(super) range: LedgerRange,
    pub(super) skip_first: Option<Vec<u8>>,
}

impl ObjectRange {
    /// Next live object as (user key, entry).
    pub(super) fn next(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
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
    pub(super) files: Arc<Files>,
    pub(super) gate: Option<Arc<Inner>>,
    pub(super) sv: Arc<SuperVersion>,
    pub(super) range: ObjectRange,
    pub(super) failed: bool,
}

impl Iterator for HeadIter {
    type Item = Result<(Vec<u8>, Head)>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let view = View {
            files: &self.files,
            gate: self.gate.as_ref(),
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
    pub(super) files: Arc<Files>,
    pub(super) gate: Option<Arc<Inner>>,
    pub(super) sv: Arc<SuperVersion>,
    pub(super) range: ObjectRange,
    pub(super) ready: std::collections::VecDeque<(Vec<u8>, Vec<u8>)>,
    pub(super) exhausted: bool,
    pub(super) failed: bool,
}

impl ObjectIter {
    pub(super) fn refill(&mut self) -> Result<()> {
        let view = View {
            files: &self.files,
            gate: self.gate.as_ref(),
            sv: self.sv.clone(),
        };
        let mut batch: Vec<(Vec<u8>, Arc<Entry>)> = Vec::new();
        while batch.len() < self.files.scan_readahead_values {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_prefix() {
        assert_eq!(prefix_end(b"ab"), Some(b"ac".to_vec()));
        assert_eq!(prefix_end(&[1, 0xFF]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xFF, 0xFF]), None);
    }
}
