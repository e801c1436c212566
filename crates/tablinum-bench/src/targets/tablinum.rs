//! The `tablinum` target: the engine, `tablinum_engine::Store`, opened with the
//! run's fsync policy and cache budget.
//!
//! Owns only the mapping from [`TargetConfig`] to engine [`Options`] and from
//! engine errors to [`TargetError`]. It must never tune the engine beyond what
//! every target gets (durability and cache bytes), so comparisons stay fair;
//! the one exception is an explicit override list (`--target
//! tablinum:inline_value_bytes_max=0`) for the engine's own tuning sweeps,
//! never used by a scenario that compares against peers.

use std::ops::Bound;

use tablinum_engine::{Durability, Options, Store};

use crate::target::{Counter, CounterKind, Reclaimed, Target, TargetConfig, TargetError};

/// The engine behind the harness's target trait.
pub struct TablinumTarget {
    store: Store,
}

fn err(e: tablinum_engine::Error) -> TargetError {
    TargetError(e.to_string())
}

impl TablinumTarget {
    /// The name `--target` uses.
    pub const NAME: &'static str = "tablinum";

    /// Opens (or creates) a store in `cfg.dir`.
    pub fn open(cfg: &TargetConfig) -> Result<TablinumTarget, TargetError> {
        Self::open_with(cfg, "")
    }

    /// Opens with engine option overrides, `key=value` separated by commas
    /// (see [`TablinumTarget::check_overrides`]).
    pub fn open_with(cfg: &TargetConfig, overrides: &str) -> Result<TablinumTarget, TargetError> {
        let opts = options(cfg.sync, cfg.cache_bytes, overrides)?;
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|e| TargetError(format!("create {}: {e}", cfg.dir.display())))?;
        Ok(TablinumTarget {
            store: Store::open(&cfg.dir, opts).map_err(err)?,
        })
    }

    /// Checks an override list without opening anything, so that a scenario
    /// refuses a bad `tablinum:KEY=VALUE` target before its first run rather
    /// than when a child process opens it. Known keys: [`OVERRIDES`].
    pub fn check_overrides(overrides: &str) -> Result<(), TargetError> {
        let opts = options(false, Options::default().block_cache_bytes, overrides)?;
        opts.validate().map_err(|e| TargetError(e.to_string()))
    }
}

/// Sets one engine option from its text; the error says why it did not parse.
type Setter = fn(&mut Options, &str) -> Result<(), String>;

/// One `(name, setter)` per option field, so the names cannot drift from
/// the fields they set.
macro_rules! setters {
    ($($field:ident),* $(,)?) => {
        &[$((stringify!($field), |o: &mut Options, v: &str| {
            o.$field = v.parse().map_err(|e| format!("{e}"))?;
            Ok(())
        })),*]
    };
}

/// The engine options a `tablinum:KEY=VALUE,...` target may set (`+`
/// separates them too, for lists that are themselves comma-separated).
pub const OVERRIDES: &[(&str, Setter)] = setters![
    inline_value_bytes_max,
    memtable_bytes_max,
    value_compression,
    journal_segment_bytes_max,
    journal_compaction_bytes_per_s,
    journal_compaction_garbage_pct,
    journal_writeback_bytes,
    journal_preallocate,
    journal_align_value_bytes_min,
    journal_recycle_segments,
];

/// The run's options: durability and cache bytes as every target gets them,
/// then the overrides in order.
fn options(sync: bool, cache_bytes: u64, overrides: &str) -> Result<Options, TargetError> {
    let mut opts = Options {
        durability: if sync {
            Durability::Sync
        } else {
            Durability::NoSync
        },
        block_cache_bytes: cache_bytes,
        ..Options::default()
    };
    for kv in overrides.split([',', '+']).filter(|s| !s.is_empty()) {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| TargetError(format!("engine override `{kv}`: expected KEY=VALUE")))?;
        let (_, set) = OVERRIDES
            .iter()
            .find(|(name, _)| *name == k)
            .ok_or_else(|| {
                let known: Vec<&str> = OVERRIDES.iter().map(|(name, _)| *name).collect();
                TargetError(format!(
                    "unknown engine override `{k}` (known: {})",
                    known.join(", ")
                ))
            })?;
        set(&mut opts, v)
            .map_err(|e| TargetError(format!("engine override `{k}`: `{v}` is not valid: {e}")))?;
    }
    Ok(opts)
}

impl Target for TablinumTarget {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        self.store.get(key).map_err(err)
    }

    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError> {
        Ok(self.store.head(key).map_err(err)?.map(|h| h.value_len))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError> {
        self.store.put(key, value).map(|_| ()).map_err(err)
    }

    fn delete(&self, key: &[u8]) -> Result<(), TargetError> {
        self.store.delete(key).map(|_| ()).map_err(err)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError> {
        let iter = self
            .store
            .scan_objects((Bound::Included(start), Bound::Unbounded))
            .map_err(err)?;
        let mut rows = 0;
        for item in iter.take(limit) {
            std::hint::black_box(item.map_err(err)?);
            rows += 1;
        }
        Ok(rows)
    }

    fn disk_bytes(&self) -> Option<u64> {
        Some(self.store.disk_bytes())
    }

    fn reclaim(&self) -> Result<Option<Reclaimed>, TargetError> {
        let run = self.store.compact_journal().map_err(err)?;
        Ok(Some(Reclaimed {
            bytes_before: run.bytes_before,
            bytes_after: run.bytes_after,
        }))
    }

    fn counters(&self) -> Vec<Counter> {
        let s = self.store.stats();
        let r = s.reads;
        let level = |name, value: u64| Counter {
            name,
            value,
            kind: CounterKind::Level,
        };
        let total = |name, value: u64| Counter {
            name,
            value,
            kind: CounterKind::Total,
        };
        vec![
            level("memtable_bytes", s.memtable_bytes),
            level("immutable_memtables", s.immutable_memtables as u64),
            level("block_cache_bytes", s.block_cache_bytes),
            level("journal_segments", s.journal_segments as u64),
            level(
                "l0_tables",
                s.tables_per_level.first().copied().unwrap_or(0) as u64,
            ),
            total("value_reads", r.value_reads),
            total("value_read_bytes", r.value_read_bytes),
            total("table_probes", r.table_probes),
            total("bloom_negatives", r.bloom_negatives),
            total("bloom_false_positives", r.bloom_false_positives),
            total("block_cache_hits", r.block_cache_hits),
            total("block_cache_misses", r.block_cache_misses),
            total("block_read_bytes", r.block_read_bytes),
            total("flushes", s.flushes),
            total("compactions", s.compactions),
            total("journal_compactions", s.journal_compactions),
            total("journal_bytes_reclaimed", s.journal_bytes_reclaimed),
            total("journal_segment_rolls", s.journal_segment_rolls),
            total("journal_segments_recycled", s.journal_segments_recycled),
            total("journal_syncs", s.journal_syncs),
            total("stall_ms", s.stall_ms),
        ]
    }

    fn close(&self) -> Result<(), TargetError> {
        self.store.close().map_err(err)
    }
}
