//! What a scenario leaves behind: `scenario.json` with its shared header,
//! `README.md` with the shared machine and command lines, `runs.csv`, PNG
//! charts, and the number formats of every table.
//!
//! Owns [`Report`] (the header every `scenario.json` starts with — command,
//! machine, git commit, times, run counts — with the scenario's own body
//! flattened beside it), claiming a fresh output directory (never mixing
//! the results of two scenarios), writing JSON, CSV and README files, and
//! the header markdown. It must never compute statistics or decide what a
//! scenario measures; it writes what it is handed.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::{Deref, DerefMut};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::chart::Panel;
use crate::error::BenchError;
use crate::output::rfc3339_utc;
use crate::scenario::machine::{self, Machine};

/// File name of the scenario's JSON results.
pub const SCENARIO_JSON: &str = "scenario.json";
/// File name of the scenario's markdown report.
pub const README_MD: &str = "README.md";
/// File name of the one-line-per-run CSV (scenarios that write one).
pub const RUNS_CSV: &str = "runs.csv";

/// `scenario.json`: the shared header, then the scenario's own fields
/// (`body`, flattened into the same JSON object; its fields are reachable
/// through `Deref`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report<B> {
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
    /// Runs planned.
    pub runs_total: usize,
    /// Runs finished (successful or not).
    pub runs_done: usize,
    /// Runs that failed.
    pub runs_failed: usize,
    /// Charts that could not be drawn (the results are complete without them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chart_errors: Vec<String>,
    /// The scenario's own fields.
    #[serde(flatten)]
    pub body: B,
}

impl<B> Deref for Report<B> {
    type Target = B;
    fn deref(&self) -> &B {
        &self.body
    }
}

impl<B> DerefMut for Report<B> {
    fn deref_mut(&mut self) -> &mut B {
        &mut self.body
    }
}

impl<B> Report<B> {
    /// A report started now by the command `invocation`, nothing run yet.
    pub fn new(
        scenario: &str,
        title: String,
        quick: bool,
        invocation: &[String],
        runs_total: usize,
        body: B,
    ) -> Report<B> {
        Report {
            scenario: scenario.to_string(),
            title,
            quick,
            complete: false,
            command_line: machine::command_line(invocation),
            args: invocation.to_vec(),
            started_at: rfc3339_utc(SystemTime::now()),
            finished_at: None,
            wall_s: 0.0,
            git_commit: machine::git_commit(),
            machine: Machine::current(),
            runs_total,
            runs_done: 0,
            runs_failed: 0,
            chart_errors: Vec::new(),
            body,
        }
    }

    /// `, finished …: N runs (k failed)`, `: N runs planned` or `: **incomplete**, …`.
    pub fn runs_status(&self) -> String {
        if self.complete {
            format!(
                ", finished {}: {} runs ({} failed)",
                self.finished_at.as_deref().unwrap_or("?"),
                self.runs_total,
                self.runs_failed
            )
        } else if self.runs_done == 0 {
            format!(": {} runs planned", self.runs_total)
        } else {
            format!(
                ": **incomplete**, {} of {} runs done ({} failed)",
                self.runs_done, self.runs_total, self.runs_failed
            )
        }
    }

    /// The shared header (the command in a shell block, start and runs,
    /// machine, git commit), then one bullet per line of `lines`.
    pub fn header_markdown(&self, lines: &[String]) -> String {
        let mut s = format!(
            "```sh\n{}\n```\n\n- started {}{}\n- machine: {}\n- git commit: {}\n",
            self.command_line,
            self.started_at,
            self.runs_status(),
            self.machine.describe(),
            self.git_commit.as_deref().unwrap_or("unknown"),
        );
        for l in lines {
            s.push_str(&format!("- {l}\n"));
        }
        s
    }
}

impl<B: Serialize> Report<B> {
    /// Writes `scenario.json` into `out` (pretty, newline-terminated).
    pub fn save(&self, out: &Path) -> Result<(), BenchError> {
        let path = out.join(SCENARIO_JSON);
        let text = serde_json::to_string_pretty(self).map_err(|e| BenchError::Json {
            file: path.clone(),
            message: e.to_string(),
        })?;
        std::fs::write(&path, text + "\n").map_err(|e| BenchError::io(&path, "write", e))
    }
}

impl<B: DeserializeOwned> Report<B> {
    /// Reads `scenario.json` back from a scenario's output directory.
    pub fn load(out: &Path) -> Result<Report<B>, BenchError> {
        let path = out.join(SCENARIO_JSON);
        let text = std::fs::read_to_string(&path).map_err(|e| BenchError::io(&path, "read", e))?;
        serde_json::from_str(&text).map_err(|e| BenchError::Json {
            file: path,
            message: e.to_string(),
        })
    }
}

/// Makes `out` the scenario's output directory: refused when it already
/// holds a scenario (results are never mixed), created when missing.
pub fn claim_out_dir(out: &Path) -> Result<(), BenchError> {
    if out.join(SCENARIO_JSON).exists() {
        return Err(BenchError::Usage {
            arg: "--out",
            reason: format!(
                "{} already holds a scenario ({SCENARIO_JSON}); choose a new directory",
                out.display()
            ),
        });
    }
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, "create output directory", e))
}

/// A CSV file written one line per run, so an interrupted scenario keeps
/// every line it measured.
#[derive(Debug, Clone)]
pub struct CsvFile {
    path: PathBuf,
}

impl CsvFile {
    /// Creates (truncates) `path` with its header line.
    pub fn create(path: PathBuf, header: &str) -> Result<CsvFile, BenchError> {
        let mut f = File::create(&path).map_err(|e| BenchError::io(&path, "create", e))?;
        writeln!(f, "{header}").map_err(|e| BenchError::io(&path, "write", e))?;
        Ok(CsvFile { path })
    }

    /// Appends one line.
    pub fn append(&self, line: &str) -> Result<(), BenchError> {
        let mut f = OpenOptions::new()
            .append(true)
            .open(&self.path)
            .map_err(|e| BenchError::io(&self.path, "open", e))?;
        writeln!(f, "{line}").map_err(|e| BenchError::io(&self.path, "write", e))
    }
}

/// A PNG a scenario asks for at its end (drawn by [`crate::chart`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ChartSpec {
    /// File name inside `--out` (`scenario.png`).
    pub file: String,
    /// Title strip.
    pub title: String,
    /// Panels, top to bottom.
    pub panels: Vec<Panel>,
}

/// Seconds as `5m07s` (or `42s`).
pub fn minutes(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
    }
}

/// `+35.2%`, `-4.5%`, or `n/a`.
pub fn pct(p: Option<f64>) -> String {
    match p {
        Some(p) if p.is_finite() => format!("{p:+.1}%"),
        _ => "n/a".to_string(),
    }
}

/// Bytes as MiB, one decimal (`1,024.0 MiB`).
pub fn mib(bytes: f64) -> String {
    format!("{} MiB", thousands(bytes / (1u64 << 20) as f64, 1))
}

/// `x` with `decimals` decimals and thousands separators (`12,679.91`).
pub fn thousands(x: f64, decimals: usize) -> String {
    if !x.is_finite() {
        return "n/a".to_string();
    }
    let text = format!("{:.*}", decimals, x.abs());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i.to_string(), Some(f.to_string())),
        None => (text, None),
    };
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    let nonzero = grouped
        .chars()
        .chain(frac.as_deref().unwrap_or("").chars())
        .any(|c| c.is_ascii_digit() && c != '0');
    let sign = if x < 0.0 && nonzero { "-" } else { "" };
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

/// A float without a useless fractional part (`2`, `2.5`).
pub fn trim_float(x: f64) -> String {
    if (x - x.round()).abs() < 0.05 {
        format!("{x:.0}")
    } else {
        format!("{x:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_formatted_like_the_reports() {
        assert_eq!(thousands(12_679.912, 2), "12,679.91");
        assert_eq!(thousands(999.0, 0), "999");
        assert_eq!(thousands(1_000_000.0, 0), "1,000,000");
        assert_eq!(thousands(-1234.5, 1), "-1,234.5");
        assert_eq!(thousands(-0.01, 1), "0.0");
        assert_eq!(thousands(f64::NAN, 1), "n/a");
        assert_eq!(pct(Some(-4.48)), "-4.5%");
        assert_eq!(pct(Some(70.81)), "+70.8%");
        assert_eq!(pct(None), "n/a");
        assert_eq!(trim_float(2.0), "2");
        assert_eq!(trim_float(2.5), "2.5");
        assert_eq!(mib((3 << 20) as f64), "3.0 MiB");
        assert_eq!(minutes(59.4), "59s");
        assert_eq!(minutes(307.0), "5m07s");
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct Body {
        cells: Vec<u32>,
        limit_bytes: Option<u64>,
    }

    #[test]
    fn the_header_and_the_body_share_one_json_object() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let args: Vec<String> = ["tablinum", "bench", "scenario", "x", "--out", "a b"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut r = Report::new(
            "x",
            "X test".into(),
            true,
            &args,
            4,
            Body {
                cells: vec![1, 2],
                limit_bytes: None,
            },
        );
        assert_eq!(r.cells, [1, 2], "body fields through Deref");
        assert_eq!(r.command_line, "tablinum bench scenario x --out 'a b'");
        assert!(r.header_markdown(&[]).contains("4 runs planned"));
        r.runs_done = 1;
        assert!(r.runs_status().contains("**incomplete**, 1 of 4"));
        r.complete = true;
        r.finished_at = Some("2026-01-01T00:00:00Z".into());
        let md = r.header_markdown(&["cluster: here".to_string()]);
        assert!(md.starts_with("```sh\ntablinum bench scenario x --out 'a b'\n```\n\n- started "));
        assert!(md.contains(", finished 2026-01-01T00:00:00Z: 4 runs (0 failed)\n"));
        assert!(md.ends_with("- cluster: here\n"), "{md}");

        claim_out_dir(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        r.save(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        let j: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(tmp.path().join(SCENARIO_JSON))
                .unwrap_or_else(|e| panic!("{e}")),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        for key in [
            "scenario",
            "machine",
            "git_commit",
            "runs_total",
            "cells",
            "limit_bytes",
        ] {
            assert!(j.get(key).is_some(), "{key}");
        }
        assert!(j.get("body").is_none() && j.get("chart_errors").is_none());
        let back: Report<Body> = Report::load(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
        let again = claim_out_dir(tmp.path()).err().map(|e| e.to_string());
        assert!(again.is_some_and(|e| e.contains("already holds a scenario")));

        let csv =
            CsvFile::create(tmp.path().join(RUNS_CSV), "a,b").unwrap_or_else(|e| panic!("{e}"));
        csv.append("1,2").unwrap_or_else(|e| panic!("{e}"));
        csv.append("3,4").unwrap_or_else(|e| panic!("{e}"));
        let text =
            std::fs::read_to_string(tmp.path().join(RUNS_CSV)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(text, "a,b\n1,2\n3,4\n");
    }
}
