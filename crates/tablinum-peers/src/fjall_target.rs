//! fjall 3 targets: `fjall` (plain LSM keyspace) and `fjall-kv` (key/value
//! separated keyspace).
//!
//! Owns the fjall configuration the benchmark runs with: fjall's defaults
//! (leveled compaction, its bloom filters, lz4 on the last level, 64 MiB
//! memtables, its worker-thread count of min(cores, 4)), with only the
//! harness's cache budget and fsync policy applied, and, for `fjall-kv`,
//! key/value separation at fjall's default 1 KiB threshold. It must never
//! weaken fjall's own durability: the journal is written on every write as
//! fjall does by default.

use std::path::PathBuf;

use fjall::PersistMode;
use fjall::{CompressionType, Database, Keyspace, KeyspaceCreateOptions, KvSeparationOptions};

use crate::{create_dir, dir_bytes, err, Target, TargetConfig, TargetError};

/// Which fjall keyspace configuration to open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Flavor {
    /// Plain LSM keyspace: values live in the tables.
    Plain,
    /// Key/value separated keyspace: values of >= 1 KiB go to blob files.
    KvSeparated,
}

impl Flavor {
    fn name(self) -> &'static str {
        match self {
            Flavor::Plain => "fjall",
            Flavor::KvSeparated => "fjall-kv",
        }
    }
}

/// The one keyspace every fjall target stores its data in.
const KEYSPACE: &str = "bench";

/// How a write under `sync` is made durable: `fdatasync` of the journal, the
/// same system call RocksDB's `WriteOptions::sync` issues (`use_fsync` is off
/// by default there), so both pay the same price per acknowledged write.
const SYNC_MODE: PersistMode = PersistMode::SyncData;

fn keyspace_options(flavor: Flavor) -> KeyspaceCreateOptions {
    // fjall's defaults for everything else.
    let opts = KeyspaceCreateOptions::default();
    match flavor {
        Flavor::Plain => opts,
        // Default separation options (1 KiB threshold, 64 MiB blob files,
        // staleness 0.25, age cutoff 0.25) except blob compression: the
        // values are incompressible random bytes, so lz4 on every blob would
        // only burn CPU. This matches `rocksdb-blob` (no blob compression).
        Flavor::KvSeparated => opts.with_kv_separation(Some(
            KvSeparationOptions::default().compression(CompressionType::None),
        )),
    }
}

/// A fjall database with one keyspace, opened for one benchmark run.
pub(crate) struct FjallTarget {
    name: &'static str,
    db: Database,
    ks: Keyspace,
    dir: PathBuf,
    sync: bool,
}

impl FjallTarget {
    /// Opens (or creates) the database in `cfg.dir`.
    pub(crate) fn open(flavor: Flavor, cfg: &TargetConfig) -> Result<Self, TargetError> {
        let name = flavor.name();
        create_dir(name, &cfg.dir)?;
        // One cache of `cache_bytes` for blocks and blobs: the same budget
        // every target gets. Everything else is fjall's default, including
        // `manual_journal_persist = false`: each write is handed to the OS
        // (PersistMode::Buffer) before it returns.
        let db = Database::builder(&cfg.dir)
            .cache_size(cfg.cache_bytes)
            .open()
            .map_err(|e| err(name, "open", format_args!("{}: {e}", cfg.dir.display())))?;
        let ks = db
            .keyspace(KEYSPACE, || keyspace_options(flavor))
            .map_err(|e| err(name, "open keyspace", e))?;
        Ok(Self {
            name,
            db,
            ks,
            dir: cfg.dir.clone(),
            sync: cfg.sync,
        })
    }

    /// Under `sync`, makes the journal durable before a write is acknowledged.
    /// Otherwise fjall's own default applies (journal written to the OS on
    /// every write, no fsync).
    fn persist_write(&self, op: &str) -> Result<(), TargetError> {
        if self.sync {
            self.db
                .persist(SYNC_MODE)
                .map_err(|e| err(self.name, op, format_args!("persist: {e}")))?;
        }
        Ok(())
    }
}

impl Target for FjallTarget {
    fn name(&self) -> &'static str {
        self.name
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        let value = self.ks.get(key).map_err(|e| err(self.name, "get", e))?;
        Ok(value.map(|v| v.to_vec()))
    }

    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError> {
        // `size_of` answers from the index entry: for a separated value it
        // decodes the blob pointer's size and never reads the blob.
        let size = self
            .ks
            .size_of(key)
            .map_err(|e| err(self.name, "head", e))?;
        Ok(size.map(u64::from))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError> {
        self.ks
            .insert(key, value)
            .map_err(|e| err(self.name, "put", e))?;
        self.persist_write("put")
    }

    fn delete(&self, key: &[u8]) -> Result<(), TargetError> {
        self.ks
            .remove(key)
            .map_err(|e| err(self.name, "delete", e))?;
        self.persist_write("delete")
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError> {
        let mut rows = 0usize;
        let mut bytes = 0usize;
        for guard in self.ks.range::<&[u8], _>(start..).take(limit) {
            let (k, v) = guard.into_inner().map_err(|e| err(self.name, "scan", e))?;
            // Touch key and value so the read cannot be skipped.
            bytes = bytes.wrapping_add(k.len() + v.len());
            rows += 1;
        }
        std::hint::black_box(bytes);
        Ok(rows)
    }

    fn disk_bytes(&self) -> Option<u64> {
        dir_bytes(&self.dir)
    }

    fn close(&self) -> Result<(), TargetError> {
        // fsync the journal (data and metadata): everything written is
        // durable. fjall flushes memtables in the background and recovers
        // the rest from the journal on the next open.
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| err(self.name, "close (persist)", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_in(dir: &std::path::Path, flavor: Flavor) -> FjallTarget {
        let cfg = TargetConfig {
            dir: dir.to_path_buf(),
            sync: false,
            cache_bytes: 8 * 1024 * 1024,
        };
        FjallTarget::open(flavor, &cfg).expect("open")
    }

    #[test]
    fn kv_flavor_separates_values_and_plain_does_not() {
        for (flavor, separated) in [(Flavor::Plain, false), (Flavor::KvSeparated, true)] {
            let dir = tempfile::tempdir().expect("tempdir");
            let t = open_in(dir.path(), flavor);
            assert_eq!(t.ks.is_kv_separated(), separated, "{}", t.name);
            for i in 0..20u32 {
                t.put(format!("k{i:04}").as_bytes(), &[i as u8; 8 * 1024])
                    .expect("put");
            }
            // Test-only: force the memtable into tables (and blobs).
            t.ks.rotate_memtable_and_wait().expect("flush");
            assert_eq!(t.ks.blob_file_count() > 0, separated, "{}", t.name);
            assert_eq!(t.head(b"k0003").expect("head"), Some(8 * 1024));
            assert_eq!(
                t.get(b"k0003").expect("get"),
                Some(vec![3u8; 8 * 1024]),
                "{}",
                t.name
            );
        }
    }

    #[test]
    fn kv_separation_survives_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let t = open_in(dir.path(), Flavor::KvSeparated);
            t.put(b"a", &[1u8; 4096]).expect("put");
            t.close().expect("close");
        }
        // The keyspace is recovered as separated, with its data.
        let t = open_in(dir.path(), Flavor::KvSeparated);
        assert!(t.ks.is_kv_separated());
        assert_eq!(t.get(b"a").expect("get"), Some(vec![1u8; 4096]));
    }
}
