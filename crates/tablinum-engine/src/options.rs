//! Store settings: every limit the engine enforces, with its unit and default.
//!
//! Owns [`Options`] and its validation. Defaults are documented on each field
//! and in `docs/format.md` / README; changing one is a behaviour change.
//! Never reads the environment or files: callers build the struct.

use crate::error::{Error, Result};

/// When an acknowledged write is durable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// fsync (fdatasync) the journal before acknowledging; concurrent writers
    /// share one fsync (group commit).
    Sync,
    /// Write to the OS before acknowledging; fsync when a journal segment
    /// rolls and on close. A machine crash may lose recent writes; a process
    /// crash loses nothing that was acknowledged.
    NoSync,
}

/// Hard limit on a key's length in bytes.
pub const KEY_BYTES_MAX: usize = 4096;
/// Hard limit on a value's length in bytes (64 MiB).
pub const VALUE_BYTES_MAX: usize = 64 << 20;
/// Hard limit on user metadata bytes per object.
pub const METADATA_BYTES_MAX: usize = 16 << 10;
/// Hard limit on secondary-index terms per object.
pub const INDEX_TERMS_MAX: usize = 64;
/// Hard limit on an index name's length in bytes.
pub const INDEX_NAME_BYTES_MAX: usize = 64;
/// Hard limit on an index term's length in bytes.
pub const INDEX_TERM_BYTES_MAX: usize = 1024;
/// Hard limit on an object's encoded index terms (the journal record and
/// the ledger entry store this length in 16 bits).
pub const INDEX_TERMS_ENCODED_BYTES_MAX: usize = u16::MAX as usize;
/// Hard limit on operations in one atomic batch.
pub const BATCH_OPS_MAX: usize = 100_000;

/// Settings of one store. `Options::default()` is a sensible single-node
/// configuration; every field names its unit.
#[derive(Debug, Clone)]
pub struct Options {
    /// Durability of acknowledged writes. Default `Sync`.
    pub durability: Durability,
    /// Open as the owner of this epoch (1..=`fence::EPOCH_MAX`), fenced
    /// instead of locked: a store opened at a higher epoch (by another
    /// process, even while this one still runs) makes this one refuse every
    /// later write and delete nothing, and its journal past what the newer
    /// owner replayed is never read. `None` (the default): an unfenced
    /// store guarded by its lock file.
    pub epoch: Option<u64>,
    /// A journal segment rolls once it reaches this many bytes. Default 128 MiB.
    pub journal_segment_bytes_max: u64,
    /// Values shorter than this are kept inline in the ledger entry (and still
    /// journaled); longer ones are read from the journal with one positional
    /// read. Default 512 bytes (see README "Inline threshold").
    pub inline_value_bytes_max: usize,
    /// Compress journal values with lz4 when that saves at least 1/8 of the
    /// bytes (a sample is tried first, so incompressible values cost little).
    /// Default true.
    pub value_compression: bool,
    /// The active memtable is frozen and flushed once it holds this many
    /// bytes. Default 32 MiB.
    pub memtable_bytes_max: u64,
    /// Writes stall while this many frozen memtables wait for flush. Default 4.
    pub immutable_memtables_max: usize,
    /// A write (or `flush`) stalled this long while background work keeps
    /// failing with a transient error (a full disk, too many open files)
    /// gives up with `Error::Unavailable`, changing nothing. Stalls behind
    /// healthy background work wait as long as it takes. Default 10,000 ms.
    pub write_stall_ms_max: u64,
    /// Decompressed ledger block cache budget of a store opened on its own
    /// (`Store::open`); a store on `Shared` resources uses theirs. Default
    /// 64 MiB.
    pub block_cache_bytes: u64,
    /// Most file descriptors a store opened on its own keeps open for reads
    /// (a store on `Shared` resources uses theirs). Default 512.
    pub open_files_max: usize,
    /// Target size of a ledger block before compression. Default 4 KiB.
    pub block_bytes: usize,
    /// Target size of a ledger table file. Default 16 MiB.
    pub sst_target_bytes: u64,
    /// L0 files that trigger an L0 -> L1 compaction. Default 4.
    pub l0_compaction_trigger_files: usize,
    /// L0 files at which writes stall. Default 16.
    pub l0_stall_files: usize,
    /// Byte budget of level 1; each deeper level is `level_size_multiplier`
    /// times larger. Default 64 MiB.
    pub level1_bytes_max: u64,
    /// Growth factor between levels. Default 10.
    pub level_size_multiplier: u64,
    /// Writes stall while the estimated compaction debt exceeds this. Default 2 GiB.
    pub compaction_debt_bytes_max: u64,
    /// Bloom filter bits per key. Default 10 (~1 % false positives).
    pub bloom_bits_per_key: u32,
    /// Journal compaction window: it may start only at hours `h` (UTC) with
    /// `start <= h < end` (wrapping past midnight when `start > end`).
    /// Default `(0, 24)`: any hour. `None` disables scheduled runs
    /// (on-demand runs still work).
    pub journal_compaction_hours: Option<(u8, u8)>,
    /// Scheduled journal compaction runs at most this often, unless the
    /// journal holds [`Options::journal_compaction_garbage_pct`] garbage.
    /// Default 3600 s.
    pub journal_compaction_interval_s: u64,
    /// A scheduled journal compaction is due, however recent the last run,
    /// while at least this percentage of the sealed segments' record bytes
    /// is known dead (overwritten or deleted values): a store under
    /// overwrites then keeps its journal within about `100 / (100 − pct)`×
    /// its live values instead of growing until the next interval. 0 turns
    /// the trigger off (interval only). Default
    /// [`JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT`].
    pub journal_compaction_garbage_pct: u32,
    /// Most adjacent journal segments compacted in one run. Default 8.
    pub journal_compaction_run_segments_max: usize,
    /// A single segment is worth compacting when its live share is below this
    /// percentage; the threshold rises linearly to
    /// `journal_compaction_run_live_pct` for a run of the maximal length.
    /// Defaults 30 and 70 (leveled's values).
    pub journal_compaction_single_live_pct: u32,
    /// See `journal_compaction_single_live_pct`.
    pub journal_compaction_run_live_pct: u32,
    /// A journal compaction reads the segments it rewrites at most this
    /// fast, bytes per second (0: as fast as the disk goes), so that value
    /// GC under load leaves the disk to GETs. While the garbage share is
    /// over [`Options::journal_compaction_garbage_pct`] the rate doubles
    /// for every 10 points of excess (`gc::pace_bytes_per_s`), so GC catches
    /// up with overwrites that make garbage faster than this. Default
    /// [`JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT`].
    pub journal_compaction_bytes_per_s: u64,
    /// A journal compaction hands its segment edit to the next flush and
    /// waits at most this long for that flush before failing. Default 600 s.
    pub journal_compaction_flush_wait_s: u64,
    /// Read-ahead of an object scan: values fetched per batch. Default 64.
    pub scan_readahead_values: usize,
    /// Bytes appended to a journal segment (by writes or by journal
    /// compaction) after which the kernel is asked to start writing them
    /// out, without waiting (`sync_file_range`); 0 = never, the kernel's
    /// flusher writes them when they expire. Bounds the dirty pages a
    /// `NoSync` store leaves in the page cache: under a memory limit, the
    /// reclaim a GET's page-cache miss runs would otherwise wait for their
    /// writeback (stalls of a second were measured). Durability is
    /// unchanged.
    pub journal_writeback_bytes: u64,
    /// Reserve each new write segment's full size
    /// (`journal_segment_bytes_max`) on disk when it is created
    /// (`fallocate`, file size unchanged), so appends never wait for the
    /// filesystem to allocate blocks: on ext4 under a memory limit, an
    /// append waited up to 1.5 s for allocation to read evicted block
    /// bitmaps, holding every other writer up. On by default, as RocksDB
    /// preallocates its WAL. 4 KB volume A/B over two sittings: throughput
    /// 1.05× and 1.00×, worst GET/UPDATE 0.77× and 0.43×
    /// (`bench/results/2026-11-27-volume-4k-journal-preallocate-ab`). A
    /// segment sealed short leaves at most one batch of its reservation
    /// unused until it is deleted; a filesystem without `fallocate` (or a
    /// full disk) allocates at writeback as before.
    pub journal_preallocate: bool,
    /// Stored values at least this long start on a 4 KiB page boundary in
    /// the journal whenever they would otherwise span one page more than
    /// their length needs; 0 = never. Uncompressed values only. A GET reads
    /// only the value's pages, so an 8 KiB value costs 2 pages of device
    /// read and page cache instead of 3, paid for by up to a page of zeros
    /// per record on disk (a value of exactly 8 KiB: always nearly a page,
    /// so 1.5× the journal's bytes). Off by default: in the 8 KB volume A/B
    /// (`bench/results/2026-11-27-volume-aligned-values-ab`) it served 1.12×
    /// the operations under `NoSync`, but under `Sync` throughput fell to a
    /// third once journal compaction started; a repeat
    /// (`bench/results/2026-11-27-volume-8k-sync-padded-repeat`) did not
    /// fall but served 0.88× in the last minute, its journal compaction
    /// rewriting 1.7× the bytes. At 4 KB (2× the journal) it gained nothing
    /// and doubled p99. 8192 is the setting measured at 8 KB.
    pub journal_align_value_bytes_min: usize,
    /// Deleted journal segments kept (renamed, not unlinked) for the writer
    /// to reuse as its next segment; 0 = delete them. A recycled file's
    /// blocks are already written, so the appends to it change no file
    /// metadata and a `Sync` group commit's fdatasync needs no filesystem
    /// journal commit; it is written in whole pages, so the kernel never
    /// reads the old contents back. Holds up to this many segments' bytes
    /// of disk. Never used by a fenced store (`epoch`): an older owner may
    /// still write to a file it deleted.
    pub journal_recycle_segments: usize,
    /// Fault injection for tests: every journal append and fdatasync goes
    /// through this seam ([`crate::faults::FaultSwitch`] fails, fills or
    /// slows them on demand). `None` (the default): straight to the file.
    pub faults: Option<std::sync::Arc<dyn crate::faults::StorageFaults>>,
}

/// Default garbage share that makes a journal compaction due at once, percent
/// (50: the journal stays within about 2× its live values).
pub const JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT: u32 = 50;

/// Default read rate of a journal compaction, bytes per second (32 MiB/s).
/// Measured with `bench scenario volume --variants 8k-gc` (24 workers, 768
/// MiB limit, 2-core machine, ~280 MB/s disk): unpaced, a compaction reads
/// ~250 MB/s and the store serves 0.43–0.58× its throughput outside it; at
/// 96, 64, 48 and 32 MiB/s it serves 0.70, 0.78, 0.80 and 0.86× while
/// reclaiming 81, 59, 44 and 29 MiB/s (`bench/results/2026-11-24-volume-gc-pace-sweep`;
/// with the default, `bench/results/2026-11-24-volume-gc`: 0.86×).
pub const JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT: u64 = 32 << 20;

/// Default of [`Options::journal_writeback_bytes`]: 1 MiB (RocksDB's
/// `bytes_per_sync` in the tuned peer configuration).
pub const JOURNAL_WRITEBACK_BYTES_DEFAULT: u64 = 1 << 20;

/// Default of [`Options::journal_align_value_bytes_min`]: 0, no padding.
pub const JOURNAL_ALIGN_VALUE_BYTES_MIN_DEFAULT: usize = 0;

/// Default of [`Options::journal_recycle_segments`]: 0, off. At 8 KB
/// `Sync` (`bench/results/2026-11-27-volume-journal-recycle-ab`) a pool of
/// 8 served 1.03× (last minute 1.05×) the operations of the same binary
/// without, with 36% of rolls finding a recycled file: within the noise of
/// one run each. A pool of 2 covered fewer rolls and its run dipped to a
/// quarter for 90 s. Once files entering the pool left the page cache, a
/// pool of 8 served 1.17× (last minute 1.13×), UPDATE mean 0.81×
/// (`bench/results/2026-11-28-volume-8k-sync-flush`, main run first); with
/// the order swapped, 1.00× (last minute 0.93×), UPDATE mean 0.94×
/// (`bench/results/2026-11-28-volume-8k-sync-pool-swapped`). Off: the gain
/// is within the spread of run positions and sittings.
pub const JOURNAL_RECYCLE_SEGMENTS_DEFAULT: usize = 0;

/// Most segments [`Options::journal_recycle_segments`] may keep.
pub const JOURNAL_RECYCLE_SEGMENTS_MAX: usize = 64;

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            epoch: None,
            journal_segment_bytes_max: 128 << 20,
            inline_value_bytes_max: 512,
            value_compression: true,
            memtable_bytes_max: 32 << 20,
            immutable_memtables_max: 4,
            write_stall_ms_max: 10_000,
            block_cache_bytes: 64 << 20,
            open_files_max: 512,
            block_bytes: 4096,
            sst_target_bytes: 16 << 20,
            l0_compaction_trigger_files: 4,
            l0_stall_files: 16,
            level1_bytes_max: 64 << 20,
            level_size_multiplier: 10,
            compaction_debt_bytes_max: 2 << 30,
            bloom_bits_per_key: 10,
            journal_compaction_hours: Some((0, 24)),
            journal_compaction_interval_s: 3600,
            journal_compaction_garbage_pct: JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT,
            journal_compaction_run_segments_max: 8,
            journal_compaction_single_live_pct: 30,
            journal_compaction_run_live_pct: 70,
            journal_compaction_bytes_per_s: JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT,
            journal_compaction_flush_wait_s: 600,
            scan_readahead_values: 64,
            journal_writeback_bytes: JOURNAL_WRITEBACK_BYTES_DEFAULT,
            journal_preallocate: true,
            journal_align_value_bytes_min: JOURNAL_ALIGN_VALUE_BYTES_MIN_DEFAULT,
            journal_recycle_segments: JOURNAL_RECYCLE_SEGMENTS_DEFAULT,
            faults: None,
        }
    }
}

impl Options {
    /// Bytes to reserve on disk for a new write segment (0: none).
    pub(crate) fn preallocate_bytes(&self) -> u64 {
        if self.journal_preallocate {
            self.journal_segment_bytes_max
        } else {
            0
        }
    }

    /// Checks every setting; returns which one is out of range.
    pub fn validate(&self) -> Result<()> {
        fn range(what: &'static str, v: u64, lo: u64, hi: u64, unit: &str) -> Result<()> {
            if v < lo || v > hi {
                return Err(Error::invalid(
                    what,
                    format!("{v} {unit} is outside {lo}..={hi} {unit}"),
                ));
            }
            Ok(())
        }
        range(
            "options.journal_segment_bytes_max",
            self.journal_segment_bytes_max,
            64 << 10,
            4 << 30,
            "bytes",
        )?;
        range(
            "options.journal_recycle_segments",
            self.journal_recycle_segments as u64,
            0,
            JOURNAL_RECYCLE_SEGMENTS_MAX as u64,
            "segments",
        )?;
        range(
            "options.inline_value_bytes_max",
            self.inline_value_bytes_max as u64,
            0,
            64 << 10,
            "bytes",
        )?;
        range(
            "options.memtable_bytes_max",
            self.memtable_bytes_max,
            64 << 10,
            4 << 30,
            "bytes",
        )?;
        range(
            "options.immutable_memtables_max",
            self.immutable_memtables_max as u64,
            1,
            64,
            "memtables",
        )?;
        range(
            "options.block_cache_bytes",
            self.block_cache_bytes,
            0,
            1 << 40,
            "bytes",
        )?;
        range(
            "options.open_files_max",
            self.open_files_max as u64,
            16,
            1 << 20,
            "files",
        )?;
        range(
            "options.block_bytes",
            self.block_bytes as u64,
            256,
            1 << 20,
            "bytes",
        )?;
        range(
            "options.sst_target_bytes",
            self.sst_target_bytes,
            64 << 10,
            1 << 30,
            "bytes",
        )?;
        range(
            "options.l0_compaction_trigger_files",
            self.l0_compaction_trigger_files as u64,
            1,
            1000,
            "files",
        )?;
        range(
            "options.l0_stall_files",
            self.l0_stall_files as u64,
            self.l0_compaction_trigger_files as u64 + 1,
            10_000,
            "files",
        )?;
        range(
            "options.level1_bytes_max",
            self.level1_bytes_max,
            1 << 20,
            1 << 40,
            "bytes",
        )?;
        range(
            "options.level_size_multiplier",
            self.level_size_multiplier,
            2,
            100,
            "times",
        )?;
        range(
            "options.compaction_debt_bytes_max",
            self.compaction_debt_bytes_max,
            1 << 20,
            1 << 50,
            "bytes",
        )?;
        range(
            "options.bloom_bits_per_key",
            self.bloom_bits_per_key as u64,
            1,
            32,
            "bits",
        )?;
        if let Some((s, e)) = self.journal_compaction_hours {
            range(
                "options.journal_compaction_hours.start",
                s as u64,
                0,
                23,
                "h",
            )?;
            range("options.journal_compaction_hours.end", e as u64, 0, 24, "h")?;
        }
        range(
            "options.journal_compaction_run_segments_max",
            self.journal_compaction_run_segments_max as u64,
            1,
            64,
            "segments",
        )?;
        range(
            "options.journal_compaction_single_live_pct",
            self.journal_compaction_single_live_pct as u64,
            0,
            100,
            "%",
        )?;
        range(
            "options.journal_compaction_garbage_pct",
            self.journal_compaction_garbage_pct as u64,
            0,
            99,
            "%",
        )?;
        range(
            "options.journal_compaction_run_live_pct",
            self.journal_compaction_run_live_pct as u64,
            0,
            100,
            "%",
        )?;
        range(
            "options.write_stall_ms_max",
            self.write_stall_ms_max,
            1,
            3_600_000,
            "ms",
        )?;
        range(
            "options.journal_compaction_flush_wait_s",
            self.journal_compaction_flush_wait_s,
            1,
            86_400,
            "s",
        )?;
        range(
            "options.scan_readahead_values",
            self.scan_readahead_values as u64,
            1,
            4096,
            "values",
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_bad_values_are_named() {
        Options::default().validate().unwrap();
        let o = Options {
            memtable_bytes_max: 1,
            ..Options::default()
        };
        let e = o.validate().unwrap_err().to_string();
        assert!(e.contains("options.memtable_bytes_max"), "{e}");
    }
}
