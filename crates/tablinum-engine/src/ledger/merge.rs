//! Merging sorted sources (memtables, tables, levels) into one ordered
//! stream where, for each key, the newest source wins.
//!
//! Owns the source adapters and the heap merge (O(log n) per entry). Source
//! priority is position: index 0 is the newest. Shadowed entries can be
//! handed to the caller (compaction counts them as journal garbage). Never
//! filters tombstones: callers decide.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

use crate::error::Result;
use crate::ledger::entry::Entry;
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::{SstIter, SstReader};

/// Entries memtable sources copy per refill.
const MEM_CHUNK_ENTRIES: usize = 256;

/// A sorted stream of (ledger key, entry).
pub trait Source: Send {
    /// The next entry, or `None` at the end.
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>>;
}

/// A memtable read in chunks so no lock or borrow is held between calls.
pub struct MemSource {
    mem: Arc<Memtable>,
    buf: VecDeque<(Vec<u8>, Arc<Entry>)>,
    next_from: Option<Bound<Vec<u8>>>,
}

impl MemSource {
    /// Entries of `mem` from `start`.
    pub fn new(mem: Arc<Memtable>, start: Bound<Vec<u8>>) -> Self {
        MemSource {
            mem,
            buf: VecDeque::new(),
            next_from: Some(start),
        }
    }
}

impl Source for MemSource {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        if self.buf.is_empty() {
            let Some(from) = self.next_from.take() else {
                return Ok(None);
            };
            let chunk = self.mem.chunk(
                from.as_ref().map(Vec::as_slice),
                Bound::Unbounded,
                MEM_CHUNK_ENTRIES,
            );
            if chunk.len() == MEM_CHUNK_ENTRIES {
                self.next_from = chunk.last().map(|(k, _)| Bound::Excluded(k.clone()));
            }
            self.buf.extend(chunk);
        }
        Ok(self.buf.pop_front())
    }
}

/// One table.
pub struct SstSource(SstIter);

impl SstSource {
    /// Entries of `sst` from `start`.
    pub fn new(sst: Arc<SstReader>, start: Option<&[u8]>) -> Result<Self> {
        Ok(SstSource(SstIter::new(sst, start)?))
    }
}

impl Source for SstSource {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        Ok(self.0.next_entry()?.map(|(k, e)| (k, Arc::new(e))))
    }
}

/// A level of non-overlapping tables in key order, opened lazily.
pub struct LevelSource {
    files: Vec<Arc<SstReader>>,
    next_file: usize,
    cur: Option<SstIter>,
    start: Option<Vec<u8>>,
}

impl LevelSource {
    /// Entries of the level (`files` sorted, disjoint) from `start`.
    pub fn new(files: Vec<Arc<SstReader>>, start: Option<&[u8]>) -> Self {
        let first = start.map_or(0, |k| {
            files.partition_point(|f| f.meta.last_key.as_slice() < k)
        });
        LevelSource {
            files,
            next_file: first,
            cur: None,
            start: start.map(<[u8]>::to_vec),
        }
    }
}

impl Source for LevelSource {
    fn next_entry(&mut self) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        loop {
            if let Some(it) = &mut self.cur {
                if let Some((k, e)) = it.next_entry()? {
                    return Ok(Some((k, Arc::new(e))));
                }
                self.cur = None;
            }
            let Some(f) = self.files.get(self.next_file) else {
                return Ok(None);
            };
            self.next_file += 1;
            self.cur = Some(SstIter::new(f.clone(), self.start.take().as_deref())?);
        }
    }
}

/// Heap merge of sources; newest (lowest index) wins per key.
pub struct Merge {
    sources: Vec<Box<dyn Source>>,
    heads: Vec<Option<Arc<Entry>>>,
    heap: BinaryHeap<Reverse<(Vec<u8>, usize)>>,
}

impl Merge {
    /// Starts merging; `sources[0]` is the newest.
    pub fn new(mut sources: Vec<Box<dyn Source>>) -> Result<Merge> {
        let mut heap = BinaryHeap::with_capacity(sources.len());
        let mut heads = Vec::with_capacity(sources.len());
        for (i, s) in sources.iter_mut().enumerate() {
            match s.next_entry()? {
                Some((k, e)) => {
                    heap.push(Reverse((k, i)));
                    heads.push(Some(e));
                }
                None => heads.push(None),
            }
        }
        Ok(Merge {
            sources,
            heads,
            heap,
        })
    }

    fn advance(&mut self, i: usize) -> Result<()> {
        match self.sources[i].next_entry()? {
            Some((k, e)) => {
                self.heap.push(Reverse((k, i)));
                self.heads[i] = Some(e);
            }
            None => self.heads[i] = None,
        }
        Ok(())
    }

    /// Next key and its newest entry; older entries of the same key are
    /// pushed to `shadowed` when given.
    pub fn next_with(
        &mut self,
        mut shadowed: Option<&mut Vec<Arc<Entry>>>,
    ) -> Result<Option<(Vec<u8>, Arc<Entry>)>> {
        let Some(Reverse((key, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let entry = self.heads[i].take().expect("head present for heap item");
        self.advance(i)?;
        while let Some(Reverse((k, _))) = self.heap.peek() {
            if *k != key {
                break;
            }
            let Some(Reverse((_, j))) = self.heap.pop() else {
                break;
            };
            if let (Some(sh), Some(e)) = (shadowed.as_deref_mut(), self.heads[j].take()) {
                sh.push(e);
            }
            self.advance(j)?;
        }
        Ok(Some((key, entry)))
    }
}
