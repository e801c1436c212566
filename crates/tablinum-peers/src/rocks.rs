//! RocksDB targets: `rocksdb` (plain leveled LSM) and `rocksdb-blob`
//! (integrated BlobDB).
//!
//! Owns the RocksDB options the benchmark runs with. The tuning is what a fair,
//! informed RocksDB user would apply for 8 KiB incompressible values on a
//! 2-core machine (RocksDB's own "Setup Options and Basic Tuning" advice), and
//! it is deliberately *not* crippled: the WAL is on, bloom filters are on,
//! index and filter blocks stay in memory (RocksDB's default), background work
//! gets both cores. The only budget that is imposed is the harness's cache
//! budget and fsync policy, the same as every other target gets.

use std::path::PathBuf;

use rocksdb::{
    BlockBasedOptions, Cache, DBCompactionStyle, DBCompressionType, FlushOptions, Options,
    WriteOptions, DB,
};

use crate::{create_dir, dir_bytes, err, Counter, CounterKind, Target, TargetConfig, TargetError};

/// Which RocksDB configuration to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Plain leveled LSM: values live in the SSTs.
    Plain,
    /// Integrated BlobDB: values of at least `MIN_BLOB_SIZE` go to blob files.
    Blob,
}

impl Flavor {
    fn name(self) -> &'static str {
        match self {
            Flavor::Plain => "rocksdb",
            Flavor::Blob => "rocksdb-blob",
        }
    }
}

const MIB: u64 = 1024 * 1024;

/// Values of at least this many bytes are stored in blob files. 1 KiB, the
/// same threshold as fjall's key/value separation, so both separate every
/// 8 KiB value and keep small values inline.
const MIN_BLOB_SIZE: u64 = 1024;

/// Builds the options for `flavor`, with `cache` as the block (and blob) cache.
fn options(flavor: Flavor, cache: &Cache) -> Options {
    let mut opts = Options::default();
    opts.create_if_missing(true);

    // --- Parallelism: the machine has 2 cores. ---
    // Flushes + compactions share 2 background threads (RocksDB raises its
    // thread pools to match). The default is 2 as well; set explicitly so the
    // report states it. More would oversubscribe the 2 cores the foreground
    // workers also need.
    opts.set_max_background_jobs(2);
    // One compaction is not split further: with 2 cores there is nothing to
    // gain from subcompactions (default 1, stated for the record).
    opts.set_max_subcompactions(1);

    // --- Write path / memtables. ---
    // 64 MiB memtables (the default, and fjall's default memtable size), two
    // of them so a write can continue while the other is flushed.
    opts.set_write_buffer_size(64 * MIB as usize);
    opts.set_max_write_buffer_number(2);
    // Smooth writeback: ask the kernel to write SST/blob and WAL files out every
    // 1 MiB instead of in one burst at fsync, as RocksDB's tuning guide
    // recommends. This lowers latency spikes; it does not change durability.
    opts.set_bytes_per_sync(MIB);
    opts.set_wal_bytes_per_sync(MIB);

    // --- Compaction shape: leveled, as in RocksDB's defaults. ---
    opts.set_compaction_style(DBCompactionStyle::Level);
    // Dynamic level sizing (default since RocksDB 8.4) keeps space
    // amplification near 1.1x; stated explicitly.
    opts.set_level_compaction_dynamic_level_bytes(true);
    // L1 target 256 MiB and 64 MiB SSTs: RocksDB's defaults, consistent with a
    // 64 MiB memtable (L0 of 4 files ~ L1 size).
    opts.set_max_bytes_for_level_base(256 * MIB);
    opts.set_target_file_size_base(64 * MIB);

    // --- Compression: lz4 everywhere, the cheap codec, as fjall uses. ---
    // RocksDB keeps a block uncompressed when lz4 does not shrink it, so
    // incompressible values cost only the attempt.
    opts.set_compression_type(DBCompressionType::Lz4);
    opts.set_bottommost_compression_type(DBCompressionType::Lz4);

    // --- Table format: block cache of the harness's budget + bloom filters. ---
    let mut table = BlockBasedOptions::default();
    // LRU block cache of exactly `cache_bytes`, the same budget every target gets.
    table.set_block_cache(cache);
    // Full (not block-based) bloom filters, 10 bits/key (~1 % false positives):
    // the standard setting; misses cost no data-block read.
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks stay in table-reader memory, outside the block
    // cache: RocksDB's default (`cache_index_and_filter_blocks = false`). This
    // matches tablinum (index and filters always in RAM) and fjall (pinned
    // index/filter blocks), so RocksDB's data-block cache is not squeezed by
    // metadata the others keep outside their cache.
    table.set_cache_index_and_filter_blocks(false);
    // 4 KiB data blocks (the default, and fjall's): with 8 KiB values a block
    // holds one value, so a point read fetches no neighbours it does not need.
    table.set_block_size(4 * 1024);
    opts.set_block_based_table_factory(&table);

    if flavor == Flavor::Blob {
        // --- Integrated BlobDB (RocksDB >= 6.18). ---
        opts.set_enable_blob_files(true);
        // Separate every value of >= 1 KiB (all 8 KiB values), like fjall-kv.
        opts.set_min_blob_size(MIN_BLOB_SIZE);
        // 256 MiB blob files: RocksDB's default.
        opts.set_blob_file_size(256 * MIB);
        // Values are incompressible random bytes: compressing blobs would only
        // burn CPU (RocksDB's default is no blob compression too).
        opts.set_blob_compression_type(DBCompressionType::None);
        // Garbage collection during compaction: relocate live blobs out of the
        // oldest 25 % of blob files (the documented default cutoff), so
        // overwritten values are reclaimed.
        opts.set_enable_blob_gc(true);
        opts.set_blob_gc_age_cutoff(0.25);
        // Force-compact SSTs pointing at the oldest blob files once these are
        // >= 100 % garbage only (default 1.0): no extra write amplification.
        opts.set_blob_gc_force_threshold(1.0);
        // Blob cache = the same LRU cache as the block cache, so the total
        // cache budget is still `cache_bytes` (RocksDB recommends sharing the
        // block cache); fjall caches blobs in its one cache as well.
        opts.set_blob_cache(cache);
    }
    opts
}

/// A RocksDB database opened for one benchmark run.
pub(crate) struct RocksTarget {
    name: &'static str,
    db: DB,
    dir: PathBuf,
    sync: bool,
}

impl RocksTarget {
    /// Opens (or creates) the database in `cfg.dir`.
    pub(crate) fn open(flavor: Flavor, cfg: &TargetConfig) -> Result<Self, TargetError> {
        let name = flavor.name();
        create_dir(name, &cfg.dir)?;
        let cache_bytes = usize::try_from(cfg.cache_bytes)
            .map_err(|e| err(name, "open", format_args!("cache_bytes: {e}")))?;
        let cache = Cache::new_lru_cache(cache_bytes);
        let opts = options(flavor, &cache);
        let db = DB::open(&opts, &cfg.dir)
            .map_err(|e| err(name, "open", format_args!("{}: {e}", cfg.dir.display())))?;
        Ok(Self {
            name,
            db,
            dir: cfg.dir.clone(),
            sync: cfg.sync,
        })
    }

    /// Write options for one write. `WriteOptions` is `Send` but not `Sync`,
    /// so it cannot be shared by the workers; creating one is a small
    /// allocation, negligible next to an 8 KiB write.
    fn write_options(&self) -> WriteOptions {
        let mut w = WriteOptions::default();
        // `sync`: fdatasync the WAL before the write returns (RocksDB's
        // group commit shares one sync among concurrent writers). The WAL is
        // always on: `nosync` still writes it, to the OS buffers.
        w.set_sync(self.sync);
        w.disable_wal(false);
        w
    }
}

impl Target for RocksTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        // Pinned read, then one copy out: the same work `DB::get` does.
        let value = self
            .db
            .get_pinned(key)
            .map_err(|e| err(self.name, "get", e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError> {
        // RocksDB has no metadata/value split and no exact existence check
        // without the value (`key_may_exist` is only a filter probe). The
        // cheapest exact answer is a pinned get: no copy of the value, but
        // BlobDB still reads the blob.
        let value = self
            .db
            .get_pinned(key)
            .map_err(|e| err(self.name, "head", e))?;
        Ok(value.map(|v| v.len() as u64))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError> {
        self.db
            .put_opt(key, value, &self.write_options())
            .map_err(|e| err(self.name, "put", e))
    }

    fn delete(&self, key: &[u8]) -> Result<(), TargetError> {
        self.db
            .delete_opt(key, &self.write_options())
            .map_err(|e| err(self.name, "delete", e))
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError> {
        let mut it = self.db.raw_iterator();
        it.seek(start);
        let mut rows = 0usize;
        let mut bytes = 0usize;
        while rows < limit {
            let (Some(k), Some(v)) = (it.key(), it.value()) else {
                break;
            };
            // Touch key and value so the read cannot be skipped.
            bytes = bytes.wrapping_add(k.len() + v.len());
            rows += 1;
            it.next();
        }
        std::hint::black_box(bytes);
        it.status().map_err(|e| err(self.name, "scan", e))?;
        Ok(rows)
    }

    fn disk_bytes(&self) -> Option<u64> {
        dir_bytes(&self.dir)
    }

    fn counters(&self) -> Vec<Counter> {
        // Properties only: RocksDB's running totals (cache hits, bloom
        // useful) need `Options::enable_statistics`, which costs every
        // operation some time, so the tuned configuration leaves it off.
        [
            ("memtable_bytes", "rocksdb.cur-size-all-mem-tables"),
            ("immutable_memtables", "rocksdb.num-immutable-mem-table"),
            ("block_cache_bytes", "rocksdb.block-cache-usage"),
            ("table_readers_bytes", "rocksdb.estimate-table-readers-mem"),
            ("l0_tables", "rocksdb.num-files-at-level0"),
            (
                "pending_compaction_bytes",
                "rocksdb.estimate-pending-compaction-bytes",
            ),
        ]
        .into_iter()
        .filter_map(|(name, property)| {
            let value = self.db.property_int_value(property).ok().flatten()?;
            Some(Counter {
                name,
                value,
                kind: CounterKind::Level,
            })
        })
        .collect()
    }

    fn close(&self) -> Result<(), TargetError> {
        // Flush the memtables to SSTs (and blobs) and wait for it, then sync
        // the WAL, so that everything acknowledged is in durable files.
        let mut flush = FlushOptions::default();
        flush.set_wait(true);
        self.db
            .flush_opt(&flush)
            .map_err(|e| err(self.name, "close (flush memtables)", e))?;
        self.db
            .flush_wal(true)
            .map_err(|e| err(self.name, "close (sync WAL)", e))
    }
}
