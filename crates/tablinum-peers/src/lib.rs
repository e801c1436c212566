//! Rival engines for the benchmark harness, behind the harness's [`Target`] trait.
//!
//! This crate owns the *configuration* of every peer that tablinum is measured
//! against, and nothing else:
//!
//! | name           | engine                                   |
//! |----------------|------------------------------------------|
//! | `rocksdb`      | RocksDB (leveled compaction), plain LSM  |
//! | `rocksdb-blob` | RocksDB with integrated BlobDB           |
//! | `fjall`        | fjall 3, plain LSM                       |
//! | `fjall-kv`     | fjall 3 with key/value separation        |
//!
//! Every target is configured the way a fair, informed user of that engine
//! would configure it for 8 KiB incompressible values on a 2-core machine,
//! with the cache budget ([`TargetConfig::cache_bytes`]) and the fsync policy
//! ([`TargetConfig::sync`]) applied exactly as the harness asks. Each setting
//! is documented where it is made, with the reason.
//!
//! What this crate must never do:
//! - cripple a peer (turn off its WAL, its filters, its cache, its background
//!   work) or hand it a bigger budget than the other targets get;
//! - acknowledge a write under `sync` before the engine has fsynced it;
//! - panic on an engine error: every failure becomes a [`TargetError`] that
//!   names the target and the operation.
//!
//! It is not a default workspace member: RocksDB's C++ takes ~13 minutes to
//! build on 2 cores (see `scripts/install-peer-deps.sh` for the build needs).
//! The harness reaches it through the `peers` feature of `tablinum-bench`.

use std::fmt::Display;
use std::path::Path;

pub use tablinum_bench_target::{Counter, CounterKind, Target, TargetConfig, TargetError};

mod fjall_target;
mod rocks;

/// Every target name [`open`] accepts, in report order.
pub const NAMES: &[&str] = &["rocksdb", "rocksdb-blob", "fjall", "fjall-kv"];

/// Opens the peer called `name` in `cfg.dir` (created if missing).
///
/// # Errors
///
/// An unknown name, a directory that cannot be created, or the engine's own
/// open error.
pub fn open(name: &str, cfg: &TargetConfig) -> Result<Box<dyn Target>, TargetError> {
    let target: Box<dyn Target> = match name {
        "rocksdb" => Box::new(rocks::RocksTarget::open(rocks::Flavor::Plain, cfg)?),
        "rocksdb-blob" => Box::new(rocks::RocksTarget::open(rocks::Flavor::Blob, cfg)?),
        "fjall" => Box::new(fjall_target::FjallTarget::open(
            fjall_target::Flavor::Plain,
            cfg,
        )?),
        "fjall-kv" => Box::new(fjall_target::FjallTarget::open(
            fjall_target::Flavor::KvSeparated,
            cfg,
        )?),
        other => {
            return Err(TargetError(format!(
                "unknown peer target {other:?}; known: {}",
                NAMES.join(", ")
            )))
        }
    };
    Ok(target)
}

/// Builds a [`TargetError`] naming the target and the operation that failed.
pub(crate) fn err(target: &str, op: &str, e: impl Display) -> TargetError {
    TargetError(format!("{target}: {op}: {e}"))
}

/// Creates the target's directory.
pub(crate) fn create_dir(target: &str, dir: &Path) -> Result<(), TargetError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        err(
            target,
            "open",
            format_args!("create {}: {e}", dir.display()),
        )
    })
}

/// Sum of the sizes of all regular files under `dir`, or `None` if the walk
/// fails (files may vanish under a running compaction: those are skipped).
pub(crate) fn dir_bytes(dir: &Path) -> Option<u64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let entries = match std::fs::read_dir(&d) {
            Ok(entries) => entries,
            // The root must be readable; a subdirectory removed mid-walk is not an error.
            Err(_) if d.as_path() != dir => continue,
            Err(_) => return None,
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            if meta.is_dir() {
                stack.push(entry.path());
            } else if meta.is_file() {
                total += meta.len();
            }
        }
    }
    Some(total)
}
