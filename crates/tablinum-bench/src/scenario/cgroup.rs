//! A cgroup v1 memory cgroup for one child run: create, limit, read back,
//! remove; and a cgroup v1 CPU cgroup that caps a child at a share of the
//! machine's cores ([`CpuCgroup`]: a scan server modelled as a machine of
//! its own).
//!
//! Owns the directory `/sys/fs/cgroup/memory/tablinum-bench-<pid>-<n>/`, the
//! limit written to its `memory.limit_in_bytes` (the kernel charges the
//! child's anonymous memory *and* its page cache to it, so data larger than the
//! limit must come from disk), the `sh` wrapper that moves a child into the
//! cgroup before it `exec`s (so not one allocation escapes the limit), and the
//! statistics read back after the run (peak usage, limit hits, OOM kills).
//!
//! The CPU cgroup owns `/sys/fs/cgroup/cpu/tablinum-bench-<suffix>/` and its
//! CFS quota.
//!
//! It must never touch a cgroup it did not create, never move any process but
//! the child it was asked to wrap, and never leave its directory behind on
//! the normal paths (removal is retried while the exiting child's charges
//! drain; `Drop` removes it best-effort on early returns).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::BenchError;

/// Where the cgroup v1 CPU controller is mounted.
pub const CGROUP_V1_CPU_ROOT: &str = "/sys/fs/cgroup/cpu";
/// CFS period of a CPU cgroup, µs (its quota is a share of this). Short, so
/// a throttled process waits at most a few ms for its next share.
pub const CPU_PERIOD_US: u64 = 10_000;
/// Where the cgroup v1 memory controller is mounted.
pub const CGROUP_V1_MEMORY_ROOT: &str = "/sys/fs/cgroup/memory";
/// Prefix of the cgroups this harness creates (`<prefix>-<pid>-<n>`).
pub const CGROUP_NAME_PREFIX: &str = "tablinum-bench";
/// How many times removal of a cgroup is tried (its last task may still be exiting).
pub const REMOVE_ATTEMPTS: u32 = 50;
/// Pause between removal attempts, milliseconds.
pub const REMOVE_RETRY_MS: u64 = 100;
/// Smallest limit accepted, bytes (below this no store can even open).
pub const MEMORY_LIMIT_BYTES_MIN: u64 = 32 << 20;

/// What the kernel accounted for one child, read before the cgroup is removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CgroupStats {
    /// The limit the kernel applied (page-rounded), bytes.
    pub limit_bytes: u64,
    /// Peak memory charged (anonymous + page cache), bytes (`memory.max_usage_in_bytes`).
    pub max_usage_bytes: u64,
    /// Peak anonymous memory, bytes: the largest `total_rss` of `memory.stat`
    /// seen while the child ran (sampled every poll, so a shorter peak can be missed).
    #[serde(default)]
    pub max_rss_bytes: u64,
    /// Times the limit was hit and reclaim was needed (`memory.failcnt`).
    pub limit_hits: u64,
    /// Processes the OOM killer killed in the cgroup (`oom_kill` of `memory.oom_control`).
    pub oom_kills: u64,
}

/// A memory cgroup owned by this process.
#[derive(Debug)]
pub struct MemoryCgroup {
    dir: PathBuf,
    removed: bool,
}

fn read_u64(path: &Path) -> Result<u64, BenchError> {
    let text = std::fs::read_to_string(path).map_err(|e| BenchError::MemoryLimit {
        path: path.to_path_buf(),
        reason: format!("cannot read: {e}"),
    })?;
    text.trim().parse().map_err(|_| BenchError::MemoryLimit {
        path: path.to_path_buf(),
        reason: format!("not a number: {:?}", text.trim()),
    })
}

/// The `total_rss N` line of a `memory.stat` file (anonymous memory, bytes).
pub fn parse_total_rss(memory_stat: &str) -> Option<u64> {
    memory_stat
        .lines()
        .find_map(|l| l.strip_prefix("total_rss "))
        .and_then(|n| n.trim().parse().ok())
}

/// The `oom_kill N` line of a `memory.oom_control` file (0 when absent: old kernels).
pub fn parse_oom_kills(oom_control: &str) -> u64 {
    oom_control
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// Checks that memory cgroups can be created here (root, v1 memory controller
/// mounted at [`CGROUP_V1_MEMORY_ROOT`]). The error says what is missing and
/// names `--no-memory-limit`.
pub fn check_available() -> Result<(), BenchError> {
    let root = Path::new(CGROUP_V1_MEMORY_ROOT);
    let hint = "run as root on a host with the cgroup v1 memory controller, or pass \
                --no-memory-limit (then the data may fit in the page cache and the \
                results do not show a store reading from disk)";
    if !root.join("memory.limit_in_bytes").is_file() {
        return Err(BenchError::MemoryLimit {
            path: root.to_path_buf(),
            reason: format!("the cgroup v1 memory controller is not mounted here; {hint}"),
        });
    }
    // Creating and removing a probe is the only reliable permission check.
    let probe =
        MemoryCgroup::create(&format!("probe-{}", std::process::id()), None).map_err(|e| {
            BenchError::MemoryLimit {
                path: root.to_path_buf(),
                reason: format!("cannot create a memory cgroup ({e}); {hint}"),
            }
        })?;
    probe.remove()
}

impl MemoryCgroup {
    /// Creates `CGROUP_V1_MEMORY_ROOT/tablinum-bench-<suffix>` and, with
    /// `limit_bytes`, writes its limit and checks the kernel took it.
    pub fn create(suffix: &str, limit_bytes: Option<u64>) -> Result<MemoryCgroup, BenchError> {
        let dir = Path::new(CGROUP_V1_MEMORY_ROOT).join(format!("{CGROUP_NAME_PREFIX}-{suffix}"));
        std::fs::create_dir(&dir).map_err(|e| BenchError::MemoryLimit {
            path: dir.clone(),
            reason: format!("cannot create cgroup: {e}"),
        })?;
        let cg = MemoryCgroup {
            dir,
            removed: false,
        };
        if let Some(limit) = limit_bytes {
            let file = cg.dir.join("memory.limit_in_bytes");
            std::fs::write(&file, limit.to_string()).map_err(|e| BenchError::MemoryLimit {
                path: file.clone(),
                reason: format!("cannot write {limit}: {e}"),
            })?;
            let applied = read_u64(&file)?;
            // The kernel rounds down to a page; anything else means it refused.
            if applied > limit || applied + (64 << 10) < limit {
                return Err(BenchError::MemoryLimit {
                    path: file,
                    reason: format!("wrote {limit} but the kernel applied {applied}"),
                });
            }
        }
        Ok(cg)
    }

    /// The cgroup's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A command that runs `program args...` inside this cgroup: `sh` writes
    /// its own pid into `cgroup.procs` and then `exec`s the program, so the
    /// program starts (and allocates) under the limit and keeps the pid the
    /// caller sees.
    pub fn wrap(&self, program: &Path, args: &[String]) -> Command {
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c")
            .arg(r#"echo $$ > "$0" && exec "$@""#)
            .arg(self.dir.join("cgroup.procs"))
            .arg(program)
            .args(args);
        cmd
    }

    /// Anonymous memory charged now, bytes (`None` when unreadable).
    pub fn rss_bytes(&self) -> Option<u64> {
        parse_total_rss(&std::fs::read_to_string(self.dir.join("memory.stat")).ok()?)
    }

    /// Reads what the kernel accounted so far (`max_rss_bytes` is the caller's
    /// to fill from [`MemoryCgroup::rss_bytes`] samples).
    pub fn stats(&self) -> Result<CgroupStats, BenchError> {
        let oom_file = self.dir.join("memory.oom_control");
        let oom = std::fs::read_to_string(&oom_file).map_err(|e| BenchError::MemoryLimit {
            path: oom_file,
            reason: format!("cannot read: {e}"),
        })?;
        Ok(CgroupStats {
            limit_bytes: read_u64(&self.dir.join("memory.limit_in_bytes"))?,
            max_usage_bytes: read_u64(&self.dir.join("memory.max_usage_in_bytes"))?,
            max_rss_bytes: 0,
            limit_hits: read_u64(&self.dir.join("memory.failcnt"))?,
            oom_kills: parse_oom_kills(&oom),
        })
    }

    /// Removes the cgroup, retrying while its last task finishes exiting.
    pub fn remove(mut self) -> Result<(), BenchError> {
        remove_retrying(&self.dir).map_err(|reason| BenchError::MemoryLimit {
            path: self.dir.clone(),
            reason,
        })?;
        self.removed = true;
        Ok(())
    }
}

/// Removes a cgroup directory, retrying while its last task finishes
/// exiting; the error says why it could not.
fn remove_retrying(dir: &Path) -> Result<(), String> {
    let mut last = None;
    for _ in 0..REMOVE_ATTEMPTS {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(REMOVE_RETRY_MS));
    }
    Err(format!(
        "cannot remove cgroup: {}",
        last.map_or_else(|| "unknown error".to_string(), |e| e.to_string())
    ))
}

/// A CPU cgroup owned by this process: its tasks together get at most
/// `millicores / 1000` of a core per CFS period. Removed when dropped
/// (best effort; its tasks must have exited).
#[derive(Debug)]
pub struct CpuCgroup {
    dir: PathBuf,
}

impl CpuCgroup {
    /// Creates `CGROUP_V1_CPU_ROOT/tablinum-bench-<suffix>` with a quota of
    /// `millicores` (1000 = one core).
    pub fn create(suffix: &str, millicores: u64) -> Result<CpuCgroup, BenchError> {
        let dir = Path::new(CGROUP_V1_CPU_ROOT).join(format!("{CGROUP_NAME_PREFIX}-{suffix}"));
        std::fs::create_dir(&dir).map_err(|e| BenchError::io(&dir, "create a CPU cgroup", e))?;
        let cg = CpuCgroup { dir };
        let write = |name: &str, v: u64| {
            let f = cg.dir.join(name);
            std::fs::write(&f, v.to_string()).map_err(|e| BenchError::io(&f, "write", e))
        };
        write("cpu.cfs_period_us", CPU_PERIOD_US)?;
        write(
            "cpu.cfs_quota_us",
            (CPU_PERIOD_US * millicores / 1_000).max(1_000),
        )?;
        Ok(cg)
    }

    /// Moves process `pid` (all its threads) into the cgroup.
    pub fn add(&self, pid: u32) -> Result<(), BenchError> {
        let f = self.dir.join("cgroup.procs");
        std::fs::write(&f, pid.to_string()).map_err(|e| BenchError::io(&f, "write", e))
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        let _ = remove_retrying(&self.dir);
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        if !self.removed {
            // Best effort on early returns; `remove` reports errors on the normal path.
            let _ = std::fs::remove_dir(&self.dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oom_kill_count_is_parsed_or_zero() {
        let text = "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n";
        assert_eq!(parse_oom_kills(text), 3);
        assert_eq!(parse_oom_kills("oom_kill_disable 0\nunder_oom 0\n"), 0);
        assert_eq!(parse_oom_kills("oom_kill x\n"), 0);
        let stat = "cache 10\nrss 5\ntotal_cache 10\ntotal_rss 4096\n";
        assert_eq!(parse_total_rss(stat), Some(4096));
        assert_eq!(parse_total_rss("rss 5\n"), None);
    }
}
