//! Report scenarios: several targets run side by side on one machine, in one
//! invocation, each run in its own child process under a memory limit.
//!
//! Owns the `tablinum bench scenario ...` subcommands ([`ScenarioCommand`]),
//! the run plan (variants in turn; within a variant, repeats in turn; within a
//! repeat every target once, the order rotated by one per repeat, so repeated
//! runs of the targets interleave), starting each run as a child process (the
//! current binary re-executed with the ordinary `bench run` subcommand, see
//! [`ChildCommand`]) inside its own cgroup v1 memory cgroup
//! ([`cgroup`]), collecting each child's `summary.json`, and writing
//! `scenario.json` (after every run, `complete: false` until the end) and
//! `README.md` into `--out`. Scenarios themselves ([`volume`]) only say what
//! to run; tables and statistics are pure functions in [`report`].
//!
//! The exception is [`stream_limit`] (the CouchDB `stream_limit` report): the
//! thing measured there is a cluster, which runs as its one child process
//! (`tablinum up`, [`crate::local_cluster`]), while the client and its
//! coordinator run in the scenario's own process, one measured loop at a time;
//! it writes its own `scenario.json`, `runs.csv` and `README.md`.
//!
//! It must never measure in its own process (a store's page cache, threads
//! and allocator state must not leak from one run into the next), never run
//! two children at once, never run a child outside its memory limit unless
//! told to with `--no-memory-limit` (and then it says so loudly in every
//! output), and never stop the scenario because one child failed: the failure
//! is recorded and the command fails at the end, after writing the rest.

pub mod cgroup;
pub mod machine;
pub mod report;
pub mod stream_limit;
pub mod volume;

use std::fs::File;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Serialize};

use self::cgroup::{CgroupStats, MemoryCgroup};
use self::machine::Machine;
use self::report::{mib, report_table, thousands, RunMetrics, RunRecord, VariantReport};
use crate::error::BenchError;
use crate::output::{self, RunSummary};
use crate::targets::MemoryTarget;
use crate::workload::Workload;

/// File name of the scenario's JSON results.
pub const SCENARIO_JSON: &str = "scenario.json";
/// File name of the scenario's markdown summary.
pub const README_MD: &str = "README.md";
/// File name of a child's captured stdout and stderr, in its run directory.
pub const RUN_LOG: &str = "run.log";
/// Time a child gets beyond its measured duration (open, close, cleanup)
/// before it is killed, seconds.
pub const CHILD_GRACE_S: f64 = 300.0;
/// Time limit of a child whose workload has no duration (op count only), seconds.
pub const CHILD_TIMEOUT_NO_DURATION_S: f64 = 86_400.0;
/// How often the parent checks on a running child, milliseconds.
pub const CHILD_POLL_MS: u64 = 100;
/// Seconds between the "still running" progress lines of a child.
pub const PROGRESS_LINE_S: f64 = 10.0;
/// Rough per-run cost beyond the measured time (process start, open, close,
/// cleanup), seconds; only used for the time estimate printed at the start.
pub const CHILD_OVERHEAD_ESTIMATE_S: f64 = 4.0;
/// Lines of a failed child's log quoted in its error.
pub const LOG_TAIL_LINES: usize = 5;
/// What the JSON and the README say when runs had no memory limit.
pub const NO_MEMORY_LIMIT_WARNING: &str = "NO MEMORY LIMIT: runs were not confined by a \
    cgroup memory limit (--no-memory-limit), so a store's data may have fitted in the page \
    cache and reads may never have touched the disk; these results do not show behaviour \
    once data outgrows memory.";
/// How the runs are ordered (recorded in `scenario.json`).
pub const RUN_ORDER: &str = "variants in turn; within a variant, repeats in turn; within a \
    repeat, every target once, the target order rotated by one per repeat (round-robin), so \
    repeated runs of different targets interleave";

/// The scenarios.
#[derive(Debug, Clone, clap::Subcommand)]
pub enum ScenarioCommand {
    /// The leveled volume report's test: 8 KB incompressible values (sync and
    /// nosync), 4 KB and 16 KB (nosync), pareto keys, 5 GET : 1 UPDATE from an
    /// empty store, every target side by side, each run in its own process
    /// under a memory limit smaller than the data.
    Volume(volume::VolumeArgs),
    /// The CouchDB stream_limit report (apache/couchdb PR #2360): 1000-row
    /// index queries from random starts over q = 8, 32, 96, 192 tablets with
    /// stream limits 5, 10, 100 (one row per message) and adaptive, against
    /// one `tablinum up` cluster; the report's table (rows/s, std-dev %, ratio
    /// to 10 with its 3 std-dev %) plus wasted rows per request.
    StreamLimit(stream_limit::StreamLimitArgs),
}

/// Runs a scenario command from the `tablinum` binary (children are started by
/// re-executing the current binary; see [`ChildCommand::from_env`]).
pub fn execute(cmd: ScenarioCommand) -> Result<(), BenchError> {
    let child = ChildCommand::from_env()?;
    let (failed, total, out) = match cmd {
        ScenarioCommand::Volume(args) => {
            let r = volume::run(&args, &child)?;
            (r.runs_failed, r.runs_total, args.out)
        }
        ScenarioCommand::StreamLimit(args) => {
            let r = stream_limit::run(&args, &child)?;
            (r.runs_failed, r.runs_total, args.out)
        }
    };
    if failed > 0 {
        return Err(BenchError::ScenarioIncomplete { failed, total, out });
    }
    Ok(())
}

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

/// One variant of a scenario: a workload and a durability mode.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantSpec {
    /// Name, also the directory under `--out`.
    pub name: String,
    /// The report's test description.
    pub description: String,
    /// The workload (seed of repeat 1).
    pub workload: Workload,
    /// fsync every write (`bench run --sync`).
    pub sync: bool,
}

/// Everything a scenario runs.
#[derive(Debug, Clone, PartialEq)]
pub struct ScenarioSpec {
    /// Scenario name (`volume`).
    pub name: String,
    /// Title of the README.
    pub title: String,
    /// `--quick`.
    pub quick: bool,
    /// Output directory.
    pub out: PathBuf,
    /// Variants, in run order.
    pub variants: Vec<VariantSpec>,
    /// Targets; the first is the subject of the deltas.
    pub targets: Vec<String>,
    /// Runs per variant and target.
    pub repeat: u32,
    /// Memory limit per child, bytes; `None` with `--no-memory-limit`.
    pub memory_limit_bytes: Option<u64>,
    /// Cache budget of every target, bytes.
    pub cache_bytes: u64,
    /// The scenario's own parameters, echoed into `scenario.json`.
    pub parameters: serde_json::Value,
}

/// `scenario.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScenarioReport {
    /// Scenario name.
    pub scenario: String,
    /// Its title.
    pub title: String,
    /// `--quick`.
    pub quick: bool,
    /// `false` while runs are still going (or when the scenario was interrupted).
    pub complete: bool,
    /// The exact command, quoted for a shell.
    pub command_line: String,
    /// The exact command, argument by argument.
    pub args: Vec<String>,
    /// Start, RFC 3339 UTC.
    pub started_at: String,
    /// End, RFC 3339 UTC (`None` until complete).
    pub finished_at: Option<String>,
    /// Wall-clock seconds so far.
    pub wall_s: f64,
    /// `git rev-parse HEAD` where the command ran, when it worked.
    pub git_commit: Option<String>,
    /// The machine.
    pub machine: Machine,
    /// Memory limit of every run (cgroup v1 `memory.limit_in_bytes`: anonymous
    /// memory and page cache together), bytes; `None`: no limit.
    pub memory_limit_bytes: Option<u64>,
    /// Set when there was no memory limit.
    pub memory_limit_warning: Option<String>,
    /// Targets in order; the first is the subject of the deltas.
    pub targets: Vec<String>,
    /// Runs per variant and target.
    pub repeat: u32,
    /// How the runs were ordered.
    pub order: String,
    /// The scenario's parameters (workers, run length, key space, ...).
    pub parameters: serde_json::Value,
    /// Runs planned.
    pub runs_total: usize,
    /// Runs finished (successful or not).
    pub runs_done: usize,
    /// Runs that failed.
    pub runs_failed: usize,
    /// Per variant, per target results.
    pub variants: Vec<VariantReport>,
}

/// One run of the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlannedRun {
    /// Index into the variants.
    pub variant: usize,
    /// Index into the targets.
    pub target: usize,
    /// Repeat, from 1.
    pub repeat: u32,
}

/// The run order: see [`RUN_ORDER`].
pub fn plan(variants: usize, targets: usize, repeat: u32) -> Vec<PlannedRun> {
    let mut runs = Vec::with_capacity(variants * targets * repeat as usize);
    for variant in 0..variants {
        for r in 0..repeat {
            for k in 0..targets {
                runs.push(PlannedRun {
                    variant,
                    target: (k + r as usize) % targets,
                    repeat: r + 1,
                });
            }
        }
    }
    runs
}

/// A run's directory relative to `--out`: `<variant>/<target>-r<repeat>`.
pub fn run_dir_name(variant: &str, target: &str, repeat: u32) -> String {
    format!("{variant}/{target}-r{repeat}")
}

fn workload_file(out: &Path, variant: &str, repeat: u32) -> PathBuf {
    out.join(variant).join(format!("workload-r{repeat}.toml"))
}

/// The scenario as markdown: title, warning, command, machine, the summary
/// table and every variant's table (README.md, and what stdout shows).
pub fn render_markdown(r: &ScenarioReport) -> String {
    let mut s = format!("# {}\n\n", r.title);
    if let Some(w) = &r.memory_limit_warning {
        s.push_str(&format!("> **WARNING** {w}\n\n"));
    }
    s.push_str(&header_markdown(r));
    s.push_str("\n## Summary\n\n");
    s.push_str(&report_table(&r.variants));
    s.push_str("\n## Variants\n\n");
    for v in &r.variants {
        s.push_str(&v.table(&r.targets, r.memory_limit_bytes));
        s.push('\n');
    }
    s.push_str(&format!(
        "## Files\n\n`scenario.json` holds every number above with the per-repeat values and \
         standard deviations. Each run's directory `<variant>/<target>-r<i>/` holds \
         `summary.csv`, `<op>_latencies.csv`, `errors.csv`, `summary.json`, `summary.png`, \
         `workload.toml` and `{RUN_LOG}` (the child's output); `<variant>/workload-r<i>.toml` \
         is the workload every target ran in repeat `i`.\n"
    ));
    s
}

fn header_markdown(r: &ScenarioReport) -> String {
    let limit = match r.memory_limit_bytes {
        Some(b) => format!(
            "{} per run (cgroup v1 `memory.limit_in_bytes`: the store's memory and its page cache together)",
            mib(b as f64)
        ),
        None => "**none** (`--no-memory-limit`)".to_string(),
    };
    let runs = if r.complete {
        format!(
            ", finished {}: {} runs ({} failed)",
            r.finished_at.as_deref().unwrap_or("?"),
            r.runs_total,
            r.runs_failed
        )
    } else if r.runs_done == 0 {
        format!(": {} runs planned", r.runs_total)
    } else {
        format!(
            ": **incomplete**, {} of {} runs done ({} failed)",
            r.runs_done, r.runs_total, r.runs_failed
        )
    };
    let parameters = match r.parameters.as_object() {
        Some(map) => map
            .iter()
            .map(|(k, v)| format!("{k} = {v}"))
            .collect::<Vec<_>>()
            .join(", "),
        None => r.parameters.to_string(),
    };
    format!(
        "```sh\n{}\n```\n\n- started {}{runs}\n- machine: {}\n- git commit: {}\n- memory limit: {limit}\n- targets: {} (deltas are `{}` against each other target: `subject / peer − 1`)\n- parameters: {parameters}\n- order: {}\n",
        r.command_line,
        r.started_at,
        r.machine.describe(),
        r.git_commit.as_deref().unwrap_or("unknown"),
        r.targets.join(", "),
        r.targets.first().map_or("?", String::as_str),
        r.order,
    )
}

fn save_json(out: &Path, report: &ScenarioReport) -> Result<(), BenchError> {
    let path = out.join(SCENARIO_JSON);
    let text = serde_json::to_string_pretty(report).map_err(|e| BenchError::Json {
        file: path.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&path, text + "\n").map_err(|e| BenchError::io(&path, "write", e))
}

fn minutes(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// Runs every planned run of `spec` in its own child process and writes
/// `scenario.json` and `README.md`. Failed runs are recorded (and counted in
/// `runs_failed`), not returned as errors; an `Err` means the scenario itself
/// could not go on (bad output directory, no cgroups, cannot write results).
pub fn run_scenario(
    spec: &ScenarioSpec,
    child: &ChildCommand,
) -> Result<ScenarioReport, BenchError> {
    if spec.targets.is_empty() || spec.variants.is_empty() {
        return Err(BenchError::Usage {
            arg: "--targets",
            reason: "nothing to run: no target or no variant".into(),
        });
    }
    let out = &spec.out;
    if out.join(SCENARIO_JSON).exists() {
        return Err(BenchError::Usage {
            arg: "--out",
            reason: format!(
                "{} already holds a scenario ({SCENARIO_JSON}); choose a new directory",
                out.display()
            ),
        });
    }
    if spec.memory_limit_bytes.is_some() {
        cgroup::check_available()?;
    }
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, "create output directory", e))?;
    for v in &spec.variants {
        for r in 1..=spec.repeat {
            let mut w = v.workload.clone();
            w.seed = Some(w.seed.unwrap_or(0).wrapping_add(u64::from(r - 1)));
            let path = workload_file(out, &v.name, r);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| BenchError::io(dir, "create variant directory", e))?;
            }
            std::fs::write(&path, w.to_toml_string())
                .map_err(|e| BenchError::io(&path, "write", e))?;
        }
    }

    let runs = plan(spec.variants.len(), spec.targets.len(), spec.repeat);
    let started = Instant::now();
    let mut report = ScenarioReport {
        scenario: spec.name.clone(),
        title: spec.title.clone(),
        quick: spec.quick,
        complete: false,
        command_line: machine::command_line(&child.invocation),
        args: child.invocation.clone(),
        started_at: output::rfc3339_utc(SystemTime::now()),
        finished_at: None,
        wall_s: 0.0,
        git_commit: machine::git_commit(),
        machine: Machine::current(),
        memory_limit_bytes: spec.memory_limit_bytes,
        memory_limit_warning: spec
            .memory_limit_bytes
            .is_none()
            .then(|| NO_MEMORY_LIMIT_WARNING.to_string()),
        targets: spec.targets.clone(),
        repeat: spec.repeat,
        order: RUN_ORDER.to_string(),
        parameters: spec.parameters.clone(),
        runs_total: runs.len(),
        runs_done: 0,
        runs_failed: 0,
        variants: Vec::new(),
    };
    let build = |v: &VariantSpec, records: &[RunRecord]| {
        VariantReport::build(
            &v.name,
            &v.description,
            &v.workload,
            v.sync,
            &spec.targets,
            records,
            spec.memory_limit_bytes,
        )
    };
    let mut records: Vec<Vec<RunRecord>> = vec![Vec::new(); spec.variants.len()];
    report.variants = spec.variants.iter().map(|v| build(v, &[])).collect();
    save_json(out, &report)?;

    let per_run_s = spec.variants[0].workload.duration_s.unwrap_or(0.0);
    eprintln!(
        "scenario {}: {} variants × {} targets × {} repeats = {} runs of {} s (~{} in all); results in {}",
        spec.name,
        spec.variants.len(),
        spec.targets.len(),
        spec.repeat,
        runs.len(),
        report::trim_float(per_run_s),
        minutes(runs.len() as f64 * (per_run_s + CHILD_OVERHEAD_ESTIMATE_S)),
        out.display()
    );
    match spec.memory_limit_bytes {
        Some(b) => eprintln!(
            "memory limit: {} per run (cgroup v1, anonymous memory and page cache)",
            mib(b as f64)
        ),
        None => eprintln!("WARNING: {NO_MEMORY_LIMIT_WARNING}"),
    }
    if spec.memory_limit_bytes.is_some() && spec.targets.iter().any(|t| t == MemoryTarget::NAME) {
        eprintln!(
            "note: the `memory` target keeps every value in RAM; under the memory limit it is \
             OOM-killed once its data outgrows the limit"
        );
    }
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the runs: results go to files anyway.
    let _ = write!(
        stdout,
        "# {}\n\n{}{}\n",
        report.title,
        report
            .memory_limit_warning
            .as_ref()
            .map_or_else(String::new, |w| format!("> **WARNING** {w}\n\n")),
        header_markdown(&report)
    );
    let _ = stdout.flush();

    for (i, p) in runs.iter().enumerate() {
        let v = &spec.variants[p.variant];
        let target = &spec.targets[p.target];
        let record = run_one(
            spec,
            child,
            &RunAt {
                variant: v,
                target,
                repeat: p.repeat,
                sequence: i + 1,
                total: runs.len(),
                scenario_started: started,
            },
        )?;
        if record.error.is_some() {
            report.runs_failed += 1;
        }
        report.runs_done += 1;
        records[p.variant].push(record);
        report.variants[p.variant] = build(v, &records[p.variant]);
        report.wall_s = started.elapsed().as_secs_f64();
        save_json(out, &report)?;
        if runs.get(i + 1).is_none_or(|n| n.variant != p.variant) {
            let _ = writeln!(
                stdout,
                "{}",
                report.variants[p.variant].table(&spec.targets, spec.memory_limit_bytes)
            );
            let _ = stdout.flush();
        }
    }

    report.complete = true;
    report.finished_at = Some(output::rfc3339_utc(SystemTime::now()));
    report.wall_s = started.elapsed().as_secs_f64();
    save_json(out, &report)?;
    let readme = out.join(README_MD);
    std::fs::write(&readme, render_markdown(&report))
        .map_err(|e| BenchError::io(&readme, "write", e))?;
    let _ = write!(stdout, "## Summary\n\n{}\n", report_table(&report.variants));
    let _ = stdout.flush();
    eprintln!(
        "scenario {}: {} runs ({} failed) in {}; {} and {} in {}",
        spec.name,
        report.runs_done,
        report.runs_failed,
        minutes(report.wall_s),
        SCENARIO_JSON,
        README_MD,
        out.display()
    );
    Ok(report)
}

/// Which run [`run_one`] starts.
struct RunAt<'a> {
    variant: &'a VariantSpec,
    target: &'a str,
    repeat: u32,
    sequence: usize,
    total: usize,
    scenario_started: Instant,
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    if tail.is_empty() {
        "(empty)".to_string()
    } else {
        tail.join(" | ")
    }
}

/// Starts one child run, waits for it (printing progress), and reads its results.
/// `Err` only for problems of the harness itself; a failing child is a record
/// with an `error`.
fn run_one(
    spec: &ScenarioSpec,
    child: &ChildCommand,
    at: &RunAt<'_>,
) -> Result<RunRecord, BenchError> {
    let rel = run_dir_name(&at.variant.name, at.target, at.repeat);
    let dir = spec.out.join(&rel);
    if dir.exists() {
        // Ours (`--out` holds no earlier scenario.json): a leftover of an
        // interrupted scenario that would mix files of two runs.
        std::fs::remove_dir_all(&dir)
            .map_err(|e| BenchError::io(&dir, "remove stale run directory", e))?;
    }
    std::fs::create_dir_all(&dir).map_err(|e| BenchError::io(&dir, "create run directory", e))?;
    let log_path = dir.join(RUN_LOG);
    let log = File::create(&log_path).map_err(|e| BenchError::io(&log_path, "create", e))?;
    let log_err = log
        .try_clone()
        .map_err(|e| BenchError::io(&log_path, "open", e))?;

    let mut args = child.prefix.clone();
    args.extend([
        "run".to_string(),
        workload_file(&spec.out, &at.variant.name, at.repeat)
            .to_string_lossy()
            .into_owned(),
        "--target".into(),
        at.target.to_string(),
        "--out".into(),
        dir.to_string_lossy().into_owned(),
        if at.variant.sync {
            "--sync"
        } else {
            "--nosync"
        }
        .into(),
        "--cache-bytes".into(),
        spec.cache_bytes.to_string(),
    ]);
    let cgroup = match spec.memory_limit_bytes {
        Some(limit) => Some(MemoryCgroup::create(
            &format!("{}-{}", std::process::id(), at.sequence),
            Some(limit),
        )?),
        None => None,
    };
    let mut cmd = match &cgroup {
        Some(cg) => cg.wrap(&child.program, &args),
        None => {
            let mut c = Command::new(&child.program);
            c.args(&args);
            c
        }
    };
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err));

    let label = format!(
        "[{:>w$}/{}] {} {} r{}",
        at.sequence,
        at.total,
        at.variant.name,
        at.target,
        at.repeat,
        w = at.total.to_string().len()
    );
    let expected_s = at.variant.workload.duration_s;
    let timeout_s = expected_s.map_or(CHILD_TIMEOUT_NO_DURATION_S, |d| d + CHILD_GRACE_S);
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
            error = Some(format!("cannot start {}: {e}", child.program.display()));
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
                if elapsed > timeout_s {
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
                        expected_s.map_or_else(String::new, |d| format!(
                            " / {} s measured",
                            report::trim_float(d)
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
                log_path.display(),
                log_tail(&log_path)
            ));
        }
    }
    let mut metrics = None;
    if error.is_none() {
        match RunSummary::load(&dir) {
            Ok(s) if s.target != at.target => {
                error = Some(format!(
                    "summary.json names target `{}`, expected `{}`",
                    s.target, at.target
                ));
            }
            Ok(s) => metrics = Some(RunMetrics::from_summary(&s)),
            Err(e) => error = Some(e.to_string()),
        }
    }
    if let (None, Some(m)) = (&error, &memory) {
        if m.max_usage_bytes == 0 {
            error = Some(
                "nothing was charged to the run's memory cgroup: it did not run under the limit"
                    .into(),
            );
            metrics = None;
        }
    }
    let elapsed_all = at.scenario_started.elapsed().as_secs_f64();
    match (&error, &metrics) {
        (None, Some(m)) => eprintln!(
            "{label}: done in {wall_s:.1} s: {} ops/s (last {} s: {}), {} written{}; scenario {}",
            thousands(m.ops_per_sec, 1),
            report::trim_float(m.last_window_s),
            thousands(m.last_window_ops_per_sec, 1),
            mib(m.data_written_bytes as f64),
            memory.map_or_else(String::new, |c| format!(
                ", peak rss {}, peak with page cache {}",
                mib(c.max_rss_bytes as f64),
                mib(c.max_usage_bytes as f64)
            )),
            minutes(elapsed_all)
        ),
        _ => eprintln!(
            "{label}: FAILED after {wall_s:.1} s: {}",
            error.as_deref().unwrap_or("unknown error")
        ),
    }
    Ok(RunRecord {
        variant: at.variant.name.clone(),
        target: at.target.to_string(),
        repeat: at.repeat,
        sequence: at.sequence,
        dir: rel,
        wall_s,
        error,
        metrics,
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

    #[test]
    fn repeats_interleave_round_robin_over_targets() {
        let p = plan(2, 3, 2);
        assert_eq!(p.len(), 12);
        let order: Vec<(usize, usize, u32)> =
            p.iter().map(|r| (r.variant, r.target, r.repeat)).collect();
        assert_eq!(
            &order[..6],
            &[
                (0, 0, 1),
                (0, 1, 1),
                (0, 2, 1),
                (0, 1, 2),
                (0, 2, 2),
                (0, 0, 2)
            ]
        );
        assert!(order[6..].iter().all(|r| r.0 == 1));
        // Every (variant, target, repeat) exactly once.
        let mut all = order.clone();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 12);
        assert_eq!(plan(1, 1, 1).len(), 1);
        assert_eq!(run_dir_name("8k-sync", "rocksdb", 2), "8k-sync/rocksdb-r2");
    }

    fn synthetic_report() -> ScenarioReport {
        use crate::workload::Operations;
        let w = Workload {
            operations: Operations {
                get: 5,
                update: 1,
                ..Operations::default()
            },
            ..Workload::default()
        };
        let targets = s(&["tablinum", "rocksdb"]);
        let run = |t: &str, ops: f64| RunRecord {
            variant: "8k-sync".into(),
            target: t.into(),
            repeat: 1,
            sequence: 1,
            dir: run_dir_name("8k-sync", t, 1),
            wall_s: 22.0,
            error: None,
            metrics: Some(RunMetrics {
                elapsed_s: 20.0,
                ops_per_sec: ops,
                last_window_ops_per_sec: ops / 2.0,
                last_window_s: 2.0,
                get_p99_us: 100.0,
                update_p99_us: 200.0,
                get_found_pct: 10.0,
                updates: 100_000,
                data_written_bytes: 100_000 * 8192,
                failed_ops: 0,
                disk_bytes: None,
            }),
            memory: Some(CgroupStats {
                limit_bytes: 256 << 20,
                max_usage_bytes: 255 << 20,
                max_rss_bytes: 100 << 20,
                limit_hits: 5,
                oom_kills: 0,
            }),
        };
        let runs = vec![run("tablinum", 2000.0), run("rocksdb", 1000.0)];
        ScenarioReport {
            scenario: "volume".into(),
            title: "Volume".into(),
            quick: true,
            complete: true,
            command_line: "tablinum bench scenario volume --quick --out x".into(),
            args: s(&[
                "tablinum", "bench", "scenario", "volume", "--quick", "--out", "x",
            ]),
            started_at: "2026-11-21T00:00:00Z".into(),
            finished_at: Some("2026-11-21T00:01:00Z".into()),
            wall_s: 60.0,
            git_commit: None,
            machine: Machine {
                cores: Some(2),
                ram_bytes: Some(24 << 30),
                kernel: Some("6.1".into()),
                cpu_model: Some("AMD EPYC".into()),
            },
            memory_limit_bytes: Some(256 << 20),
            memory_limit_warning: None,
            targets: targets.clone(),
            repeat: 1,
            order: RUN_ORDER.into(),
            parameters: serde_json::json!({"workers": 16}),
            runs_total: 2,
            runs_done: 2,
            runs_failed: 0,
            variants: vec![VariantReport::build(
                "8k-sync",
                "8KB value, 16 workers, sync",
                &w,
                true,
                &targets,
                &runs,
                Some(256 << 20),
            )],
        }
    }

    #[test]
    fn scenario_json_has_the_documented_shape() {
        let r = synthetic_report();
        let j = serde_json::to_value(&r).unwrap_or_else(|e| panic!("{e}"));
        for key in [
            "command_line",
            "args",
            "git_commit",
            "machine",
            "memory_limit_bytes",
            "targets",
            "repeat",
            "parameters",
            "variants",
        ] {
            assert!(j.get(key).is_some(), "missing {key}");
        }
        for key in ["cores", "ram_bytes", "kernel", "cpu_model"] {
            assert!(j["machine"].get(key).is_some(), "missing machine.{key}");
        }
        assert_eq!(j["memory_limit_bytes"], 256 << 20);
        let v = &j["variants"][0];
        assert_eq!(v["name"], "8k-sync");
        assert_eq!(v["sync"], true);
        let t = &v["targets"]["tablinum"];
        for key in [
            "ops_per_sec",
            "last_window_ops_per_sec",
            "get_p99_us",
            "update_p99_us",
        ] {
            assert!(t[key]["mean"].is_number(), "{key}.mean");
            assert!(t[key]["sd"].is_number(), "{key}.sd");
            assert!(t[key]["values"].is_array(), "{key}.values");
        }
        assert_eq!(t["ops_per_sec"]["mean"], 2000.0);
        assert_eq!(t["runs"][0]["dir"], "8k-sync/tablinum-r1");
        assert_eq!(t["runs"][0]["memory"]["max_usage_bytes"], 255u64 << 20);
        assert_eq!(v["deltas"][0]["peer"], "rocksdb");
        assert_eq!(v["deltas"][0]["overall_pct"], 100.0);
        // Round trip.
        let back: ScenarioReport = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
    }

    #[test]
    fn readme_has_command_machine_limit_and_tables() {
        let mut r = synthetic_report();
        let md = render_markdown(&r);
        assert!(
            md.contains("tablinum bench scenario volume --quick --out x"),
            "{md}"
        );
        assert!(md.contains("2 cores (AMD EPYC)"), "{md}");
        assert!(md.contains("256.0 MiB per run"), "{md}");
        assert!(
            md.contains("| 8KB value, 16 workers, sync | rocksdb | 2,000.00 | +100.0% | +100.0% |"),
            "{md}"
        );
        assert!(
            md.contains("- tablinum vs rocksdb: +100.0% / +100.0%"),
            "{md}"
        );
        assert!(!md.contains("WARNING"), "{md}");
        r.memory_limit_bytes = None;
        r.memory_limit_warning = Some(NO_MEMORY_LIMIT_WARNING.into());
        let md = render_markdown(&r);
        assert!(md.contains("> **WARNING** NO MEMORY LIMIT"), "{md}");
        assert!(md.contains("memory limit: **none**"), "{md}");
    }
}
