//! Child processes of a scenario: how the current binary is re-executed, and
//! one child run under an optional cgroup memory limit with a time limit.
//!
//! Owns [`ChildCommand`] (the current executable and the arguments that led
//! to `scenario`, so a child is started as `EXE <prefix> run ...` and a
//! cluster as `EXE up ...`) and [`run_child`]: start the child with its
//! output in a log file, inside its own memory cgroup when a limit is given
//! ([`crate::scenario::cgroup`]), print a progress line every
//! [`PROGRESS_LINE_S`], kill it at its time limit, sample its peak RSS, and
//! describe how it ended (exit status, signal, OOM kill, the log's last
//! lines). It must never run two children at once, never leave a child or a
//! cgroup behind, and never turn a failing child into an `Err`: a child's
//! failure is a result ([`ChildOutcome::error`]); `Err` is the harness's own.

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::output::{mib, minutes, trim_float};
use crate::error::BenchError;
use crate::scenario::cgroup::{CgroupStats, MemoryCgroup};

/// How often the parent checks on a running child, milliseconds.
pub const CHILD_POLL_MS: u64 = 100;
/// Seconds between the "still running" progress lines of a child.
pub const PROGRESS_LINE_S: f64 = 10.0;
/// Lines of a failed child's log quoted in its error.
pub const LOG_TAIL_LINES: usize = 5;

/// How a child run is started: `program prefix... run WORKLOAD --target ...`.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildCommand {
    /// The executable (normally the current one).
    pub program: PathBuf,
    /// Arguments before `run` (`["bench"]` for `tablinum bench ...`).
    pub prefix: Vec<String>,
    /// The parent's own command line, recorded in `scenario.json`.
    pub invocation: Vec<String>,
}

/// The arguments between the program name and `scenario` (`tablinum bench
/// scenario volume ...` → `["bench"]`), or `None` when there is no `scenario`.
pub fn prefix_before_scenario(args: &[String]) -> Option<Vec<String>> {
    let pos = args.iter().skip(1).position(|a| a == "scenario")? + 1;
    Some(args[1..pos].to_vec())
}

impl ChildCommand {
    /// The current executable, with the arguments that led to `scenario` in
    /// this process's command line as the prefix of `run`.
    pub fn from_env() -> Result<ChildCommand, BenchError> {
        let args = std::env::args_os()
            .map(|a| a.into_string())
            .collect::<Result<Vec<String>, _>>()
            .map_err(|a| BenchError::Usage {
                arg: "command line",
                reason: format!("argument {a:?} is not UTF-8"),
            })?;
        let prefix = prefix_before_scenario(&args).ok_or_else(|| BenchError::Usage {
            arg: "command line",
            reason: "no `scenario` subcommand in this process's arguments: cannot tell how to \
                     re-execute it for the child runs"
                .into(),
        })?;
        let program = std::env::current_exe()
            .map_err(|e| BenchError::io("/proc/self/exe", "find the current executable", e))?;
        Ok(ChildCommand {
            program,
            prefix,
            invocation: args,
        })
    }
}

/// One child to run.
#[derive(Debug, Clone)]
pub struct ChildRun<'a> {
    /// The executable.
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [String],
    /// Where its stdout and stderr go (created).
    pub log: &'a Path,
    /// Memory limit of its cgroup, bytes; `None`: no cgroup.
    pub memory_limit_bytes: Option<u64>,
    /// Unique suffix of the cgroup's name.
    pub cgroup_suffix: String,
    /// Killed after this many seconds.
    pub timeout_s: f64,
    /// Measured seconds it is expected to run, for the progress lines.
    pub expected_s: Option<f64>,
    /// Prefix of its progress lines (`[3/20] 8k-sync rocksdb r1`).
    pub label: &'a str,
}

/// How a child run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildOutcome {
    /// Wall-clock seconds from start to exit.
    pub wall_s: f64,
    /// Why it failed (could not start, non-zero exit, signal, OOM kill,
    /// timeout, with the log's last lines); `None` when it exited with 0.
    pub error: Option<String>,
    /// What its memory cgroup accounted (runs under a limit only).
    pub memory: Option<CgroupStats>,
}

/// The last [`LOG_TAIL_LINES`] non-empty lines of `path`, joined with ` | `.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    if tail.is_empty() {
        "(empty)".to_string()
    } else {
        tail.join(" | ")
    }
}

/// Runs `run` to its end (printing progress on stderr) and says how it ended.
pub fn run_child(run: &ChildRun<'_>) -> Result<ChildOutcome, BenchError> {
    let log = File::create(run.log).map_err(|e| BenchError::io(run.log, "create", e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| BenchError::io(run.log, "open", e))?;
    let cgroup = match run.memory_limit_bytes {
        Some(limit) => Some(MemoryCgroup::create(&run.cgroup_suffix, Some(limit))?),
        None => None,
    };
    let mut cmd = match &cgroup {
        Some(cg) => cg.wrap(run.program, run.args),
        None => {
            let mut c = Command::new(run.program);
            c.args(run.args);
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err));
    let label = run.label;
    eprintln!(
        "{label}: started{}",
        cgroup
            .as_ref()
            .map_or_else(String::new, |c| format!(" in {}", c.dir().display()))
    );
    let t0 = Instant::now();
    let mut error: Option<String> = None;
    let mut max_rss_bytes = 0u64;
    let status = match cmd.spawn() {
        Err(e) => {
            error = Some(format!("cannot start {}: {e}", run.program.display()));
            None
        }
        Ok(mut proc) => {
            let mut next_line = PROGRESS_LINE_S;
            loop {
                if let Some(rss) = cgroup.as_ref().and_then(MemoryCgroup::rss_bytes) {
                    max_rss_bytes = max_rss_bytes.max(rss);
                }
                match proc.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) => {}
                    Err(e) => {
                        error = Some(format!("cannot wait for the child: {e}"));
                        let _ = proc.kill();
                        break proc.wait().ok();
                    }
                }
                let elapsed = t0.elapsed().as_secs_f64();
                if elapsed > run.timeout_s {
                    error = Some(format!(
                        "timed out after {} and was killed",
                        minutes(elapsed)
                    ));
                    let _ = proc.kill();
                    break proc.wait().ok();
                }
                if elapsed >= next_line {
                    eprintln!(
                        "{label}: {elapsed:.0} s{}",
                        run.expected_s.map_or_else(String::new, |d| format!(
                            " / {} s measured",
                            trim_float(d)
                        ))
                    );
                    next_line += PROGRESS_LINE_S;
                }
                std::thread::sleep(Duration::from_millis(CHILD_POLL_MS));
            }
        }
    };
    let wall_s = t0.elapsed().as_secs_f64();
    let memory: Option<CgroupStats> = match &cgroup {
        Some(cg) => Some(CgroupStats {
            max_rss_bytes,
            ..cg.stats()?
        }),
        None => None,
    };
    if let Some(cg) = cgroup {
        let path = cg.dir().to_path_buf();
        if let Err(e) = cg.remove() {
            eprintln!("warning: {e} (remove {} by hand)", path.display());
        }
    }
    if error.is_none() {
        if let Some(status) = status.filter(|s| !s.success()) {
            let how = match (status.code(), status.signal()) {
                (Some(c), _) => format!("exited with status {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                _ => "failed".to_string(),
            };
            let oom = memory
                .filter(|m| m.oom_kills > 0)
                .map_or_else(String::new, |m| {
                    format!(
                        " by the OOM killer at the {} memory limit (the store's own memory does \
                         not fit: raise --memory-limit-mib)",
                        mib(m.limit_bytes as f64)
                    )
                });
            error = Some(format!(
                "{how}{oom}; last lines of {}: {}",
                run.log.display(),
                log_tail(run.log)
            ));
        }
    }
    Ok(ChildOutcome {
        wall_s,
        error,
        memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_child_prefix_is_what_led_to_scenario() {
        let args = s(&[
            "tablinum", "bench", "scenario", "volume", "--out", "scenario",
        ]);
        assert_eq!(prefix_before_scenario(&args), Some(s(&["bench"])));
        let args = s(&["bench", "scenario", "volume"]);
        assert_eq!(prefix_before_scenario(&args), Some(vec![]));
        assert_eq!(prefix_before_scenario(&s(&["scenario"])), None);
        assert_eq!(prefix_before_scenario(&[]), None);
    }

    fn child(args: &[String], log: &Path, timeout_s: f64) -> ChildOutcome {
        run_child(&ChildRun {
            program: Path::new("/bin/sh"),
            args,
            log,
            memory_limit_bytes: None,
            cgroup_suffix: "test".into(),
            timeout_s,
            expected_s: None,
            label: "[1/1] test",
        })
        .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_failing_child_is_a_result_naming_its_status_and_log() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let log = tmp.path().join("run.log");
        let ok = child(&s(&["-c", "echo fine"]), &log, 30.0);
        assert_eq!(ok.error, None);
        assert_eq!(
            std::fs::read_to_string(&log).ok().as_deref(),
            Some("fine\n")
        );
        let bad = child(&s(&["-c", "echo first; echo last >&2; exit 3"]), &log, 30.0);
        let e = bad.error.unwrap_or_default();
        assert!(e.starts_with("exited with status 3; last lines of "), "{e}");
        assert!(e.ends_with("first | last"), "{e}");
        let slow = child(&s(&["-c", "sleep 5"]), &log, 0.2);
        let e = slow.error.unwrap_or_default();
        assert!(e.contains("timed out"), "{e}");
        assert!(slow.wall_s < 4.0, "{}", slow.wall_s);
        assert_eq!(slow.memory, None);
    }
}
