//! Opening a store: claiming it (lock file or epoch fence), loading the
//! manifest, removing files it does not name, and replaying the journal
//! above `persisted_seq` (or all of it when the ledger must be rebuilt).
//!
//! Never deletes a file the manifest names, nor a file of a newer epoch.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};
use xxhash_rust::xxh3::xxh3_64;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::journal::record::{self, FLAG_BATCH_CONTINUES, KIND_DELETE, KIND_PUT};
use crate::journal::segment::{self, ScanEnd, SegmentKind};
use crate::ledger::compaction::{self, Shape, LEVELS};
use crate::ledger::entry::{Loc, SPACE_INDEX};
use crate::ledger::memtable::Memtable;
use crate::ledger::sst::SstReader;
use crate::manifest::{self, ManifestState, SegmentMeta};
use crate::options::{Durability, Options};

use super::background::summaries;
use super::graveyard::Graveyard;
use super::health::IoTracker;
use super::shared::Jobs;
use super::write::{create_write_segment, Applied, Old};
use super::{
    Counters, Files, Inner, MetaState, Segment, Shared, SharedOptions, Store, SuperVersion,
    WriterState, JOURNAL_DIR, LEDGER_DIR, LOCK_FILE, REBUILD_MARKER_FILE,
};

impl Store {
    /// Opens (creating if needed) the store in `dir`, recovering from the
    /// journal whatever the ledger tables do not hold. The store gets
    /// resources of its own: two background workers, and caches sized by
    /// `opts.block_cache_bytes` and `opts.open_files_max`.
    pub fn open(dir: impl AsRef<Path>, opts: Options) -> Result<Store> {
        opts.validate()?;
        let shared = Shared::new(SharedOptions {
            worker_threads: 2,
            block_cache_bytes: opts.block_cache_bytes,
            open_files_max: opts.open_files_max,
            memtable_budget_bytes: 0,
        })?;
        Self::open_shared(dir, opts, &shared)
    }

    /// Opens the store in `dir` on resources shared with other stores of
    /// the process: their workers run its flushes and compactions, their
    /// caches hold its blocks and handles, their memtable budget covers its
    /// memtables (`opts.block_cache_bytes` and `opts.open_files_max` are not
    /// used).
    pub fn open_shared(
        dir: impl AsRef<Path>,
        opts: Options,
        shared: &Arc<Shared>,
    ) -> Result<Store> {
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
                        deletes: true,
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

        // A fenced store never recycles: an older owner may still append
        // to a segment this one deleted.
        let graveyard = if fence.is_none() {
            Graveyard::with_recycling(
                &dir,
                &journal_dir,
                opts.journal_recycle_segments,
                opts.journal_segment_bytes_max / 2,
            )
        } else {
            Graveyard::new(&dir)
        };
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
                    // A read-only view may still hold it reserved.
                    graveyard.bury(&ent.path());
                }
            }
        }
        let _ = fs::remove_file(dir.join(format!("{}.tmp", manifest::manifest_name(epoch))));

        let caches = shared.caches.view();
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
                    graveyard: Some(graveyard.clone()),
                    pinned: std::sync::OnceLock::new(),
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
            mems: vec![Arc::new(Memtable::counted(
                shared.pool.memtable_bytes.clone(),
            ))],
            levels,
            segments,
            debt_bytes: debt,
        });

        // A placeholder writer until replay tells us where to continue.
        let first_id = state.next_file_id;
        state.next_file_id += 1;
        let seg = create_write_segment(&journal_dir, first_id, &opts, &graveyard)?;
        let sync_target = Mutex::new((Arc::new(seg.try_clone_file()?), seg.path.clone()));
        let persisted_seq = state.persisted_seq;
        let inner = Arc::new(Inner {
            files: Arc::new(Files {
                dir: dir.clone(),
                journal_dir: journal_dir.clone(),
                ledger_dir,
                caches,
                scan_readahead_values: opts.scan_readahead_values,
            }),
            writer: Mutex::new(WriterState {
                seg,
                next_seq: persisted_seq + 1,
                written_total: 0,
                buf: Vec::new(),
                seg_deletes: false,
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
            compress_gate: Default::default(),
            seals: Mutex::new(Vec::new()),
            compact_lock: Mutex::new(()),
            opts,
            _lock_file: lock_file,
            fence,
            pool: shared.pool.clone(),
            jobs: Jobs::default(),
            graveyard,
            io: IoTracker::new(),
            cut_pending: Mutex::new(None),
            active_segment: AtomicU64::new(first_id),
            last_seq: AtomicU64::new(persisted_seq),
        });
        Self::replay(&inner, rebuild)?;
        // Whatever the ledger holds may want compacting.
        inner.jobs.compact_wanted.store(true, Ordering::Release);
        shared.pool.register(&inner);
        let store = Store {
            inner,
            shared: shared.clone(),
        };
        Ok(store)
    }

    /// Replays journal records above `persisted_seq` (or all, in rebuild
    /// mode) into memtables, cuts a torn tail, then registers the new active
    /// segment in the manifest.
    pub(super) fn replay(inner: &Arc<Inner>, rebuild: bool) -> Result<()> {
        let (persisted, segs, active_id) = {
            let w = inner.lock_writer();
            let m = inner.lock_meta();
            (m.state.persisted_seq, m.state.segments.clone(), w.seg.id)
        };
        let last_write_id = segs
            .iter()
            .filter(|s| s.kind == SegmentKind::Write)
            .map(|s| s.id)
            .max();
        let mut max_seq = persisted;
        // id, min seq, max seq, size, holds delete records
        let mut seg_updates: Vec<(u64, u64, u64, u64, bool)> = Vec::new();
        for s in &segs {
            let needed = rebuild || s.max_seq == u64::MAX || s.max_seq > persisted;
            let path = segment::segment_path(&inner.files.journal_dir, s.id, s.kind);
            if !needed {
                segment::read_header(&path, s.id, s.kind)?;
                max_seq = max_seq.max(s.max_seq);
                continue;
            }
            // Only a segment whose end the manifest does not know (it was
            // active at a crash) may have a torn tail.
            let allow_torn = s.max_seq == u64::MAX
                && (Some(s.id) == last_write_id || (rebuild && s.kind == SegmentKind::Compacted));
            let mut pending: Vec<(u64, u32, Vec<u8>)> = Vec::new();
            let (mut smin, mut smax, mut deletes) = (u64::MAX, 0u64, false);
            let limit = s.scan_limit();
            let end = segment::scan(
                &path,
                s.id,
                s.kind,
                allow_torn,
                limit,
                s.first_seq(),
                |off, len, rec| {
                    smin = smin.min(rec.seq);
                    smax = smax.max(rec.seq);
                    deletes |= rec.kind == KIND_DELETE;
                    if rec.seq <= persisted && !rebuild {
                        return Ok(());
                    }
                    let mut raw = Vec::with_capacity(len as usize);
                    record::encode(&mut raw, &rec.parts(), rec.seq);
                    pending.push((off, len, raw));
                    if rec.flags & FLAG_BATCH_CONTINUES == 0 || s.kind == SegmentKind::Compacted {
                        for (off, len, raw) in pending.drain(..) {
                            let r = record::decode(&raw)
                                .map_err(|why| Error::corrupt(&path, off, why))?;
                            let value = record::value_of(&r)
                                .map_err(|why| Error::corrupt(&path, off, why))?;
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
                                if rebuild
                                    || inner.has_index.load(Ordering::Relaxed)
                                    || !r.terms.is_empty()
                                {
                                    Old::LookUp
                                } else {
                                    Old::Unneeded
                                },
                                rebuild,
                            )?;
                            if sv.mems[0].bytes() >= inner.opts.memtable_bytes_max {
                                let w = inner.lock_writer();
                                inner.rotate(if rebuild { 0 } else { r.seq });
                                drop(w);
                                while inner.current().mems.len()
                                    > inner.opts.immutable_memtables_max
                                {
                                    inner.flush_once()?;
                                }
                            }
                        }
                    }
                    Ok(())
                },
            )?;
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
                // Not the file's length now: an old owner may have appended
                // records since the scan read it, unscanned (and perhaps
                // half-written) bytes a sealed size must not cover.
                ScanEnd::Clean(end) => end,
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
                deletes,
            ));
        }
        let mut w = inner.lock_writer();
        w.next_seq = max_seq + 1;
        inner.last_seq.store(max_seq, Ordering::Release);
        // Everything replayed is on disk: in sealed segments, synced at
        // their roll, or in the ones synced above.
        inner.durable_seq.store(max_seq, Ordering::Release);
        let mut meta = inner.lock_meta();
        for (id, smin, smax, size, deletes) in seg_updates {
            if let Some(m) = meta.state.segments.iter_mut().find(|m| m.id == id) {
                m.min_seq = smin;
                m.max_seq = smax;
                m.size = size;
                m.deletes = deletes;
            }
        }
        meta.state.segments.push(SegmentMeta {
            id: active_id,
            kind: SegmentKind::Write,
            min_seq: max_seq + 1,
            max_seq: u64::MAX,
            size: 0,
            dead_bytes: 0,
            deletes: true,
        });
        w.seg.sync()?;
        manifest::sync_dir(&inner.files.journal_dir)?;
        inner.save_manifest(&mut meta)?;
        if let Some(f) = &inner.fence {
            // This epoch's manifest now holds everything: older epochs'
            // manifests (and an unfenced `MANIFEST`) are garbage.
            for e in manifest::epochs(&inner.files.dir)? {
                if e < f.epoch() {
                    let _ = fs::remove_file(inner.files.dir.join(manifest::manifest_name(e)));
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
            let mut meta = inner.lock_meta();
            meta.state.persisted_seq = max_seq;
            inner.save_manifest(&mut meta)?;
            let marker = inner.files.dir.join(REBUILD_MARKER_FILE);
            fs::remove_file(&marker).map_err(|e| Error::io("remove rebuild marker", &marker, e))?;
            manifest::sync_dir(&inner.files.dir)?;
        }
        Ok(())
    }
}
