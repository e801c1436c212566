//! The targets a benchmark can name with `--target`.
//!
//! Owns the name → constructor table ([`open_target`]): `tablinum` (the
//! engine), `memory` (a `BTreeMap` baseline for harness tests and for the
//! harness's own overhead), `cluster` (the Rust client against a cluster it
//! starts, or `cluster:ADDR` against a running one), and with the `peers`
//! feature the rival engines of `tablinum-peers`. It must never measure
//! anything, and adapters must never add work a target would not do for a
//! real client (no extra copies, no extra syncs).

pub mod cluster;
mod memory;
mod tablinum;

pub use cluster::ClusterTarget;
pub use memory::MemoryTarget;
pub use tablinum::TablinumTarget;

use crate::error::BenchError;
use crate::target::{Target, TargetConfig};

/// Names that rival engines answer to when built with the `peers` feature.
pub const PEER_TARGET_NAMES: [&str; 4] = ["rocksdb", "rocksdb-blob", "fjall", "fjall-kv"];

/// The target names this build can open.
pub fn known_targets() -> Vec<&'static str> {
    let mut names = vec![
        TablinumTarget::NAME,
        MemoryTarget::NAME,
        ClusterTarget::NAME,
    ];
    if cfg!(feature = "peers") {
        names.extend(PEER_TARGET_NAMES);
    }
    names
}

/// Opens the target called `name` with `cfg` (its directory is created if missing).
pub fn open_target(name: &str, cfg: &TargetConfig) -> Result<Box<dyn Target>, BenchError> {
    let open_err = |source| BenchError::Target {
        target: name.to_string(),
        action: "open",
        source,
    };
    match name {
        TablinumTarget::NAME => Ok(Box::new(TablinumTarget::open(cfg).map_err(open_err)?)),
        MemoryTarget::NAME => Ok(Box::new(MemoryTarget::new())),
        ClusterTarget::NAME => Ok(Box::new(ClusterTarget::open(cfg, "").map_err(open_err)?)),
        _ if name.starts_with("cluster:") => Ok(Box::new(
            ClusterTarget::open(cfg, &name["cluster:".len()..]).map_err(open_err)?,
        )),
        _ if name.starts_with("tablinum:") => Ok(Box::new(
            TablinumTarget::open_with(cfg, &name["tablinum:".len()..]).map_err(open_err)?,
        )),
        #[cfg(feature = "peers")]
        _ if PEER_TARGET_NAMES.contains(&name) => tablinum_peers::open(name, cfg).map_err(open_err),
        _ => Err(BenchError::UnknownTarget {
            name: name.to_string(),
            known: known_targets(),
        }),
    }
}
