//! Background work on the ledger: flushing frozen memtables into L0 tables,
//! ledger compaction, installing their results, and the threads that run
//! them.
//!
//! Every new table is written and synced before the manifest names it; a
//! replaced table is marked obsolete (deleted once unreferenced) only after
//! the manifest that drops it is on disk.

use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::error::Result;
use crate::failpoint::failpoint;
use crate::ledger::compaction::{self, Choice, FileSummary, Shape};
use crate::ledger::memtable::Memtable;
use crate::ledger::merge::{LevelSource, MemSource, Merge, Source, SstSource};
use crate::ledger::output::{OutputShape, TableOutput};
use std::fs;

use crate::ledger::sst::sst_path;
use crate::ledger::sst::SstReader;

use super::{GcEdit, Inner, MetaState, SuperVersion};

pub(super) fn summaries(levels: &[Vec<Arc<SstReader>>]) -> Vec<Vec<FileSummary>> {
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

impl Inner {
    /// Makes `levels` (and a flush's `persisted_seq`, a GC edit) the
    /// store's state: the manifest first, then the read view. On failure
    /// nothing changed (the manifest edit is made on a copy).
    pub(super) fn install(
        &self,
        meta: &mut MetaState,
        levels: Vec<Vec<Arc<SstReader>>>,
        flushed: &[Arc<Memtable>],
        persisted_seq: Option<u64>,
        gc: Option<&GcEdit>,
    ) -> Result<()> {
        // Build the manifest view of the levels and persist first.
        let mut next = MetaState {
            state: meta.state.clone(),
        };
        next.state.levels = levels
            .iter()
            .map(|l| l.iter().map(|f| f.meta.clone()).collect())
            .collect();
        if let Some(p) = persisted_seq {
            next.state.persisted_seq = next.state.persisted_seq.max(p);
        }
        if let Some(edit) = gc {
            next.state.segments.retain(|s| !edit.remove.contains(&s.id));
            next.state.segments.extend(edit.add.iter().cloned());
            next.state.segments.sort_by_key(|s| s.id);
        }
        self.save_manifest(&mut next)?;
        meta.state = next.state;
        failpoint!("install.after-manifest");
        if gc.is_some() {
            failpoint!("gc.after-manifest");
        }
        let shape = self.shape();
        let debt = compaction::debt_bytes(&summaries(&levels), &shape);
        let mut g = self.write_sv();
        let mems: Vec<Arc<Memtable>> = g
            .mems
            .iter()
            .filter(|m| !flushed.iter().any(|f| f.id() == m.id()))
            .cloned()
            .collect();
        let mut segments = g.segments.clone();
        if let Some(edit) = gc {
            for id in &edit.remove {
                // Manifest before delete: the manifest just saved must no
                // longer name a segment that may now be deleted.
                assert!(
                    !meta.state.segments.iter().any(|s| s.id == *id),
                    "segment {id} still in the manifest when marked obsolete"
                );
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
        // New tables may call for a compaction.
        self.jobs
            .compact_wanted
            .store(true, std::sync::atomic::Ordering::Release);
        self.pool.kick();
        Ok(())
    }

    pub(super) fn shape(&self) -> Shape {
        Shape {
            l0_trigger_files: self.opts.l0_compaction_trigger_files,
            level1_bytes_max: self.opts.level1_bytes_max,
            multiplier: self.opts.level_size_multiplier,
        }
    }

    /// How flush (`u64::MAX`: one table) and compaction write tables.
    fn output_shape(&self, table_bytes_target: u64) -> OutputShape {
        OutputShape {
            block_bytes: self.opts.block_bytes,
            bloom_bits_per_key: self.opts.bloom_bits_per_key,
            table_bytes_target,
        }
    }

    pub(super) fn new_file_id(&self) -> u64 {
        let mut m = self.lock_meta();
        let id = m.state.next_file_id;
        m.state.next_file_id += 1;
        id
    }

    /// Flushes every frozen memtable into one L0 table. Returns false when
    /// there was nothing to flush.
    pub(super) fn flush_once(&self) -> Result<bool> {
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
        let mut out = TableOutput::new(&self.files.ledger_dir, self.output_shape(u64::MAX), || {
            self.new_file_id()
        });
        let mut shadowed = Vec::new();
        let written: Result<()> = (|| loop {
            shadowed.clear();
            let Some((k, e)) = merge.next_with(Some(&mut shadowed))? else {
                return Ok(());
            };
            for s in &shadowed {
                self.note_dead(s);
            }
            out.add(&k, &e)?;
        })();
        if let Err(e) = written {
            out.abandon();
            return Err(e);
        }
        let new_reader = match out.finish()?.first() {
            Some(m) => Some(Arc::new(
                SstReader::open(&self.files.ledger_dir, m.id, self.files.caches.clone())
                    .inspect_err(|_| {
                        let _ = fs::remove_file(sst_path(&self.files.ledger_dir, m.id));
                    })?,
            )),
            None => None,
        };
        // Dropped unread (a failure below) it removes its file; once
        // installed it is kept.
        let new_reader = new_reader.map(Unclaimed::new);
        // persisted_seq: the seal point of the newest flushed memtable.
        let newest = flushed[0].id();
        let ids: Vec<u64> = flushed.iter().map(|m| m.id()).collect();
        let persisted = {
            let s = self.seals.lock();
            s.iter().find(|(id, _)| *id == newest).map(|(_, q)| *q)
        };
        // The table points into the journal: every byte it may point at must
        // be durable before the manifest names the table and advances
        // persisted_seq (under NoSync nothing else would have synced it).
        self.group_sync(self.written_total.load(Ordering::Acquire))?;
        let mut meta = self.lock_meta();
        // The journal-compaction edits registered against these memtables
        // travel with them; they go back if the install fails.
        let gc_edits: Vec<(u64, GcEdit)> = {
            let mut p = self.pending_gc.lock();
            let (mine, rest): (Vec<_>, Vec<_>) = p.drain(..).partition(|(id, _)| ids.contains(id));
            *p = rest;
            mine
        };
        let merged_edit = (!gc_edits.is_empty()).then(|| GcEdit {
            remove: gc_edits
                .iter()
                .flat_map(|(_, e)| e.remove.iter().copied())
                .collect(),
            add: gc_edits
                .iter()
                .flat_map(|(_, e)| e.add.iter().cloned())
                .collect(),
        });
        let cur = self.current();
        let mut levels = cur.levels.clone();
        if let Some(r) = &new_reader {
            levels[0].insert(0, r.reader.clone());
        }
        failpoint!("flush.before-install");
        if let Err(e) = self.install(&mut meta, levels, &flushed, persisted, merged_edit.as_ref()) {
            self.pending_gc.lock().extend(gc_edits);
            return Err(e);
        }
        if let Some(r) = new_reader {
            r.claim();
        }
        drop(meta);
        self.seals.lock().retain(|(id, _)| !ids.contains(id));
        self.counters.flushes.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Runs one compaction if the policy asks for one.
    pub(super) fn compact_once(&self) -> Result<bool> {
        let _one_at_a_time = self.compact_lock.lock();
        let sv = self.current();
        let shape = self.shape();
        let choice = compaction::choose(&summaries(&sv.levels), &shape);
        let find =
            |level: usize, id: u64| sv.levels[level].iter().find(|f| f.meta.id == id).cloned();
        match choice {
            Choice::Nothing => Ok(false),
            Choice::Move { from, file } => {
                let mut meta = self.lock_meta();
                let cur = self.current();
                let mut levels = cur.levels.clone();
                let Some(pos) = levels[from].iter().position(|f| f.meta.id == file) else {
                    return Ok(false);
                };
                let f = levels[from].remove(pos);
                let to = &mut levels[from + 1];
                let at = to.partition_point(|x| x.meta.first_key < f.meta.first_key);
                to.insert(at, f);
                self.install(&mut meta, levels, &[], None, None)?;
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
                let mut out = TableOutput::new(
                    &self.files.ledger_dir,
                    self.output_shape(self.opts.sst_target_bytes),
                    || self.new_file_id(),
                );
                let mut shadowed = Vec::new();
                let written: Result<()> = (|| loop {
                    shadowed.clear();
                    let Some((k, e)) = merge.next_with(Some(&mut shadowed))? else {
                        return Ok(());
                    };
                    for s in &shadowed {
                        self.note_dead(s);
                    }
                    if bottommost && e.kind.is_tombstone() {
                        self.note_dead(&e);
                        continue;
                    }
                    out.add(&k, &e)?;
                })();
                if let Err(e) = written {
                    out.abandon();
                    return Err(e);
                }
                let outputs = out.finish()?;
                let remove_outputs = || {
                    for m in &outputs {
                        let _ = fs::remove_file(sst_path(&self.files.ledger_dir, m.id));
                    }
                };
                let mut readers = Vec::with_capacity(outputs.len());
                for m in &outputs {
                    match SstReader::open(&self.files.ledger_dir, m.id, self.files.caches.clone()) {
                        Ok(r) => readers.push(Arc::new(r)),
                        Err(e) => {
                            remove_outputs();
                            return Err(e);
                        }
                    }
                }
                let mut meta = self.lock_meta();
                let cur = self.current();
                let mut levels = cur.levels.clone();
                levels[from].retain(|f| !inputs.contains(&f.meta.id));
                levels[from + 1].retain(|f| !overlaps.contains(&f.meta.id));
                levels[from + 1].extend(readers);
                levels[from + 1].sort_by(|a, b| a.meta.first_key.cmp(&b.meta.first_key));
                if let Err(e) = self.install(&mut meta, levels, &[], None, None) {
                    remove_outputs();
                    return Err(e);
                }
                for f in ins.iter().chain(overs.iter()) {
                    // Manifest before delete.
                    assert!(
                        !meta
                            .state
                            .levels
                            .iter()
                            .flatten()
                            .any(|m| m.id == f.meta.id),
                        "table {} still in the manifest when marked obsolete",
                        f.meta.id
                    );
                    f.mark_obsolete_with(self.graveyard.remover());
                }
                drop(meta);
                self.counters.compactions.fetch_add(1, Ordering::Relaxed);
                Ok(true)
            }
        }
    }
}

/// A table just written and opened but not yet installed: dropped without
/// being claimed, it removes its file.
struct Unclaimed {
    reader: Arc<SstReader>,
    claimed: bool,
}

impl Unclaimed {
    fn new(reader: Arc<SstReader>) -> Self {
        Unclaimed {
            reader,
            claimed: false,
        }
    }

    /// The table is installed: keep it.
    fn claim(mut self) {
        self.claimed = true;
    }
}

impl Drop for Unclaimed {
    fn drop(&mut self) {
        if !self.claimed {
            self.reader.mark_obsolete();
        }
    }
}
