//! The harness's one error type, [`BenchError`].
//!
//! Owns the vocabulary of everything that can stop a benchmark: a bad workload
//! file (naming the file and the field), an I/O failure (naming the path and
//! what was being done), a target that cannot be opened or closed, a chart that
//! cannot be drawn, a comparison input that is missing or malformed. It must
//! never carry per-operation target errors: those are counted as `failed` by the
//! runner, they do not stop a run.

use std::fmt;
use std::path::PathBuf;

use crate::target::TargetError;

/// Everything that can stop a benchmark command.
#[derive(Debug)]
pub enum BenchError {
    /// A file or directory could not be read, written or created.
    Io {
        /// The path involved.
        path: PathBuf,
        /// What the harness was doing (`"read workload"`, `"create output dir"`, ...).
        action: &'static str,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The workload file is not valid TOML for the workload schema (syntax,
    /// unknown field, wrong type). The message comes from the TOML parser and
    /// names the field and the line.
    WorkloadParse {
        /// The workload file (`<string>` when parsed from memory).
        file: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A workload field has a value outside what the harness accepts.
    WorkloadInvalid {
        /// The workload file (`<string>` when parsed from memory).
        file: PathBuf,
        /// The offending field, as spelled in the file (`concurrent`, `operations.get`).
        field: &'static str,
        /// Why the value was refused.
        reason: String,
    },
    /// `--target` names no known target.
    UnknownTarget {
        /// The name given.
        name: String,
        /// The names this build knows.
        known: Vec<&'static str>,
    },
    /// A target failed at a point where the run cannot go on (open, preload, close).
    Target {
        /// Target name.
        target: String,
        /// What was being done (`"open"`, `"preload put"`, `"close"`).
        action: &'static str,
        /// The target's error.
        source: TargetError,
    },
    /// A worker thread panicked (a bug in a target or in the harness).
    WorkerPanicked {
        /// Worker index (0-based).
        worker: usize,
    },
    /// A chart could not be drawn or written.
    Chart {
        /// The PNG file.
        file: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// JSON could not be written or read back.
    Json {
        /// The JSON file.
        file: PathBuf,
        /// The serde_json message.
        message: String,
    },
    /// A comparison input is missing, malformed or inconsistent.
    CompareInput {
        /// The run directory (or argument) at fault.
        dir: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// A command-line argument is invalid.
    Usage {
        /// The argument.
        arg: &'static str,
        /// Why it was refused.
        reason: String,
    },
    /// The cgroup v1 memory limit a scenario runs its children under cannot be
    /// set up, read or removed.
    MemoryLimit {
        /// The cgroup file or directory involved.
        path: PathBuf,
        /// What went wrong (and what to do about it).
        reason: String,
    },
    /// One child run of a scenario failed: it could not start, exited with an
    /// error, was killed (e.g. by the OOM killer) or timed out.
    ChildRun {
        /// Which run (`variant/target-rN`).
        run: String,
        /// What happened.
        reason: String,
    },
    /// The output of a child process of a scenario could not be read (a
    /// line missing or not in the shape expected).
    ChildOutput {
        /// The command (`tablinum flow run`).
        command: String,
        /// The line at fault (or the last line when one is missing).
        line: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A `tablinum up` child process (the `cluster` target, the
    /// `stream-limit` scenario) could not be started, used or stopped.
    Cluster {
        /// What was being done (`"start"`, `"stop"`, `"create table"`, ...).
        action: &'static str,
        /// What went wrong (with the tail of the cluster's log when it helps).
        reason: String,
    },
    /// A scenario stopped after a run that makes going on pointless (e.g.
    /// no request of it succeeded); the results so far were written.
    ScenarioAborted {
        /// The run (`[3/44] q=8 10×1 r1`).
        run: String,
        /// What happened.
        reason: String,
        /// Where the results so far are.
        out: PathBuf,
    },
    /// A scenario finished but some of its runs failed; the results of the
    /// others were written.
    ScenarioIncomplete {
        /// Runs that failed.
        failed: usize,
        /// Runs attempted.
        total: usize,
        /// Where the results are.
        out: PathBuf,
    },
}

impl BenchError {
    /// Shorthand for [`BenchError::Io`].
    pub fn io(path: impl Into<PathBuf>, action: &'static str, source: std::io::Error) -> Self {
        BenchError::Io {
            path: path.into(),
            action,
            source,
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Io {
                path,
                action,
                source,
            } => write!(f, "cannot {action} {}: {source}", path.display()),
            BenchError::WorkloadParse { file, message } => {
                write!(f, "workload {}: {}", file.display(), message.trim_end())
            }
            BenchError::WorkloadInvalid {
                file,
                field,
                reason,
            } => write!(f, "workload {}: field `{field}`: {reason}", file.display()),
            BenchError::UnknownTarget { name, known } => write!(
                f,
                "unknown target `{name}` (known in this build: {})",
                known.join(", ")
            ),
            BenchError::Target {
                target,
                action,
                source,
            } => write!(f, "target `{target}`: {action} failed: {source}"),
            BenchError::WorkerPanicked { worker } => {
                write!(f, "benchmark worker {worker} panicked")
            }
            BenchError::Chart { file, message } => {
                write!(f, "cannot draw chart {}: {message}", file.display())
            }
            BenchError::Json { file, message } => {
                write!(f, "JSON file {}: {message}", file.display())
            }
            BenchError::CompareInput { dir, reason } => {
                write!(f, "compare input {}: {reason}", dir.display())
            }
            BenchError::Usage { arg, reason } => write!(f, "argument `{arg}`: {reason}"),
            BenchError::MemoryLimit { path, reason } => {
                write!(f, "memory limit ({}): {reason}", path.display())
            }
            BenchError::ChildRun { run, reason } => write!(f, "run {run}: {reason}"),
            BenchError::ChildOutput {
                command,
                line,
                reason,
            } => write!(
                f,
                "cannot read the output of `{command}`: {reason} (line: `{line}`)"
            ),
            BenchError::Cluster { action, reason } => {
                write!(f, "cluster: {action} failed: {reason}")
            }
            BenchError::ScenarioAborted { run, reason, out } => write!(
                f,
                "scenario stopped after run {run}: {reason}; results so far are in {}",
                out.display()
            ),
            BenchError::ScenarioIncomplete { failed, total, out } => write!(
                f,
                "{failed} of {total} runs failed (see scenario.json and the run.log files in {})",
                out.display()
            ),
        }
    }
}

impl std::error::Error for BenchError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BenchError::Io { source, .. } => Some(source),
            BenchError::Target { source, .. } => Some(source),
            _ => None,
        }
    }
}
