//! Comparing runs: ratios against a baseline, with a 3-sigma significance test.
//!
//! Owns reading run directories back (`summary.json`, `summary.csv`), grouping
//! repeated runs (by an explicit `label=DIR`, else by target name), the ratio
//! statistics (r = m_B / m_A, σ_r / r ≈ √(cv_A² + cv_B²), significant when
//! |r − 1| > 3σ_r / r, as in the CouchDB stream-limit report), the markdown
//! table and the overlay chart. It must never run a benchmark or rewrite a run
//! directory.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::chart::{self, RunSeries};
use crate::error::BenchError;
use crate::output::{self, RunSummary};
use crate::stats;
use crate::workload::Op;

/// Most runs one comparison takes.
pub const COMPARE_RUNS_MAX: usize = 256;
/// Significance threshold, standard deviations.
pub const SIGMAS: f64 = 3.0;
/// File names written into the compare output directory.
pub const COMPARE_MD: &str = "compare.md";
/// See [`COMPARE_MD`].
pub const COMPARE_JSON: &str = "compare.json";
/// See [`COMPARE_MD`].
pub const COMPARE_PNG: &str = "compare.png";

/// A run directory with an optional group label (`label=DIR` on the command line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRef {
    /// Group label; runs without one are grouped by target name.
    pub label: Option<String>,
    /// The run directory (holding `summary.json`).
    pub dir: PathBuf,
}

impl RunRef {
    /// Parses `DIR` or `label=DIR`. An argument that exists as a path is always
    /// a plain directory, even if it contains `=`.
    pub fn parse(arg: &str) -> RunRef {
        if !Path::new(arg).exists() {
            if let Some((label, dir)) = arg.split_once('=') {
                if !label.is_empty() && !label.contains('/') {
                    return RunRef {
                        label: Some(label.to_string()),
                        dir: PathBuf::from(dir),
                    };
                }
            }
        }
        RunRef {
            label: None,
            dir: PathBuf::from(arg),
        }
    }
}

/// Mean, sample standard deviation and count of a set of measurements.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    /// Runs measured.
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for a single run.
    pub sd: f64,
}

impl Sample {
    /// The sample of `values`.
    pub fn of(values: &[f64]) -> Sample {
        let n = values.len();
        let mean = if n == 0 {
            0.0
        } else {
            values.iter().sum::<f64>() / n as f64
        };
        let sd = if n < 2 {
            0.0
        } else {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        };
        Sample { n, mean, sd }
    }

    /// Coefficient of variation (sd / mean); 0 when the mean is 0.
    pub fn cv(&self) -> f64 {
        if self.mean != 0.0 {
            self.sd / self.mean
        } else {
            0.0
        }
    }
}

/// A ratio of two samples with its uncertainty.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Ratio {
    /// m_B / m_A (0 when m_A is 0).
    pub ratio: f64,
    /// 3σ_r / r in percent, `None` unless both sides have at least two runs.
    pub three_sigma_pct: Option<f64>,
    /// |r − 1| > 3σ_r / r; `None` when the uncertainty is unknown.
    pub significant: Option<bool>,
}

impl Ratio {
    /// The ratio of `b` to the baseline `a`.
    pub fn of(a: &Sample, b: &Sample) -> Ratio {
        let ratio = if a.mean != 0.0 { b.mean / a.mean } else { 0.0 };
        let three_sigma_pct = (a.n >= 2 && b.n >= 2)
            .then(|| SIGMAS * (a.cv().powi(2) + b.cv().powi(2)).sqrt() * 100.0);
        let significant = three_sigma_pct.map(|s| ((ratio - 1.0) * 100.0).abs() > s);
        Ratio {
            ratio,
            three_sigma_pct,
            significant,
        }
    }
}

/// One line of the comparison: one op (or `all`) of one group against the baseline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRow {
    /// Op name, `all` (every op, whole run) or `all (last 10%)` (the tail window).
    pub op: String,
    /// Group label.
    pub group: String,
    /// Successful ops/s.
    pub ops_per_sec: Sample,
    /// Throughput ratio against the baseline group.
    pub throughput: Ratio,
    /// p99 latency (µs), when the row is an op.
    pub p99_us: Option<Sample>,
    /// p99 ratio against the baseline group (below 1 is faster).
    pub p99: Option<Ratio>,
}

/// A group of repeated runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Group {
    /// Label (explicit, target name, or directory name).
    pub label: String,
    /// Its run directories.
    pub dirs: Vec<PathBuf>,
}

/// The outcome of [`compare`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareReport {
    /// Groups in argument order; the first is the baseline.
    pub groups: Vec<Group>,
    /// One row per op per group.
    pub rows: Vec<CompareRow>,
    /// Warnings (e.g. runs whose workloads differ).
    pub notes: Vec<String>,
    /// The table, as markdown.
    pub markdown: String,
}

/// Compares run directories given as `DIR` or `label=DIR` (see [`RunRef::parse`]).
/// With `out`, writes `compare.md`, `compare.json` and `compare.png` there.
pub fn compare(dirs: &[PathBuf], out: Option<&Path>) -> Result<CompareReport, BenchError> {
    let refs: Vec<RunRef> = dirs
        .iter()
        .map(|d| RunRef::parse(&d.to_string_lossy()))
        .collect();
    compare_runs(&refs, out)
}

/// Extracts one number from a run's summary.
type Metric<'a> = dyn Fn(&RunSummary) -> Option<f64> + 'a;

struct LoadedRun {
    dir: PathBuf,
    summary: RunSummary,
    group: usize,
}

/// Compares labelled runs. See [`compare`].
pub fn compare_runs(runs: &[RunRef], out: Option<&Path>) -> Result<CompareReport, BenchError> {
    if runs.len() < 2 {
        return Err(BenchError::Usage {
            arg: "dirs",
            reason: format!("need at least two run directories, got {}", runs.len()),
        });
    }
    if runs.len() > COMPARE_RUNS_MAX {
        return Err(BenchError::Usage {
            arg: "dirs",
            reason: format!("at most {COMPARE_RUNS_MAX} runs, got {}", runs.len()),
        });
    }
    let summaries = runs
        .iter()
        .map(|r| RunSummary::load(&r.dir))
        .collect::<Result<Vec<_>, _>>()?;
    let mut labels: Vec<String> = runs
        .iter()
        .zip(&summaries)
        .map(|(r, s)| r.label.clone().unwrap_or_else(|| s.target.clone()))
        .collect();
    let distinct: BTreeSet<&String> = labels.iter().collect();
    let mut notes = Vec::new();
    if distinct.len() == 1 {
        // Same target, no labels: compare each run on its own.
        labels = runs
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let name = r
                    .dir
                    .file_name()
                    .map_or_else(|| format!("run{i}"), |n| n.to_string_lossy().into_owned());
                format!("{name}#{i}")
            })
            .collect();
        notes.push(
            "all runs share one label/target: each run is its own group (use label=DIR to group repeats)"
                .to_string(),
        );
    }
    let mut groups: Vec<Group> = Vec::new();
    let mut loaded = Vec::new();
    for ((r, s), label) in runs.iter().zip(summaries).zip(labels) {
        let g = match groups.iter().position(|g| g.label == label) {
            Some(g) => g,
            None => {
                groups.push(Group {
                    label,
                    dirs: Vec::new(),
                });
                groups.len() - 1
            }
        };
        groups[g].dirs.push(r.dir.clone());
        loaded.push(LoadedRun {
            dir: r.dir.clone(),
            summary: s,
            group: g,
        });
    }
    if groups.len() < 2 {
        return Err(BenchError::Usage {
            arg: "dirs",
            reason: "all runs fall in one group: nothing to compare against".into(),
        });
    }
    let workload_of = |s: &RunSummary| {
        let mut w = s.workload.clone();
        w.seed = None;
        w
    };
    let first = workload_of(&loaded[0].summary);
    for run in &loaded[1..] {
        if workload_of(&run.summary) != first {
            notes.push(format!(
                "workload of {} differs from {} (beyond the seed)",
                run.dir.display(),
                loaded[0].dir.display()
            ));
        }
    }

    // Ops present in the baseline, in report order.
    let base_ops: Vec<Op> = Op::ALL
        .into_iter()
        .filter(|op| {
            loaded
                .iter()
                .filter(|r| r.group == 0)
                .any(|r| r.summary.ops.contains_key(op.name()))
        })
        .collect();
    let runs_of = |g: usize| loaded.iter().filter(move |r| r.group == g);
    let mut rows = Vec::new();
    let mut push_rows = |name: &str, tput: &Metric<'_>, p99: Option<&Metric<'_>>| {
        let sample = |g: usize, f: &Metric<'_>| {
            Sample::of(&runs_of(g).filter_map(|r| f(&r.summary)).collect::<Vec<_>>())
        };
        let base_t = sample(0, tput);
        let base_p = p99.map(|f| sample(0, f));
        for (g, group) in groups.iter().enumerate() {
            let t = sample(g, tput);
            if t.n == 0 {
                continue;
            }
            let p = p99.map(|f| sample(g, f)).filter(|s| s.n > 0);
            rows.push(CompareRow {
                op: name.to_string(),
                group: group.label.clone(),
                ops_per_sec: t,
                throughput: Ratio::of(&base_t, &t),
                p99: match (&base_p, &p) {
                    (Some(bp), Some(p)) => Some(Ratio::of(bp, p)),
                    _ => None,
                },
                p99_us: p,
            });
        }
    };
    for &op in &base_ops {
        let name = op.name();
        push_rows(
            name,
            &|s: &RunSummary| s.ops.get(name).map(|o| o.ops_per_sec),
            Some(&|s: &RunSummary| s.ops.get(name).map(|o| o.latency_us.p99 as f64)),
        );
    }
    push_rows("all", &|s: &RunSummary| Some(s.ops_per_sec), None);
    push_rows(
        "all (last 10%)",
        &|s: &RunSummary| Some(s.last_window_ops_per_sec),
        None,
    );

    let markdown = render_markdown(&groups, &rows, &notes);
    let report = CompareReport {
        groups,
        rows,
        notes,
        markdown,
    };
    if let Some(out) = out {
        write_outputs(out, &report, &loaded)?;
    }
    Ok(report)
}

fn fmt_ratio(r: &Ratio, baseline: bool) -> [String; 3] {
    if baseline {
        return ["baseline".into(), "".into(), "".into()];
    }
    [
        format!("{:.3}", r.ratio),
        r.three_sigma_pct
            .map_or_else(|| "n/a".into(), |s| format!("{s:.1}")),
        match r.significant {
            Some(true) => "yes".into(),
            Some(false) => "no".into(),
            None => "n/a".into(),
        },
    ]
}

fn render_markdown(groups: &[Group], rows: &[CompareRow], notes: &[String]) -> String {
    let mut md = String::new();
    let base = groups.first().map_or("", |g| g.label.as_str());
    let _ = writeln!(
        md,
        "Baseline: `{base}`. Ratio = mean / baseline mean; 3σ % = 3·√(cv_A² + cv_B²)·100 \
         (needs ≥ 2 runs on both sides); significant when |ratio − 1| exceeds it.\n"
    );
    let _ = writeln!(
        md,
        "| op | group | runs | ops/s | ± sd | ratio | 3σ % | significant | p99 µs | p99 ratio | p99 3σ % | p99 significant |"
    );
    let _ = writeln!(
        md,
        "|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---|"
    );
    for r in rows {
        let is_base = r.group == base;
        let [t_ratio, t_sig, t_yes] = fmt_ratio(&r.throughput, is_base);
        let (p_mean, [p_ratio, p_sig, p_yes]) = match (&r.p99_us, &r.p99) {
            (Some(s), Some(p)) => (format!("{:.0}", s.mean), fmt_ratio(p, is_base)),
            (Some(s), None) => (
                format!("{:.0}", s.mean),
                ["-".into(), "-".into(), "-".into()],
            ),
            _ => ("-".into(), ["-".into(), "-".into(), "-".into()]),
        };
        let _ = writeln!(
            md,
            "| {} | {} | {} | {:.1} | {:.1} | {t_ratio} | {t_sig} | {t_yes} | {p_mean} | {p_ratio} | {p_sig} | {p_yes} |",
            r.op, r.group, r.ops_per_sec.n, r.ops_per_sec.mean, r.ops_per_sec.sd
        );
    }
    for n in notes {
        let _ = writeln!(md, "\nNote: {n}");
    }
    md
}

fn write_outputs(out: &Path, report: &CompareReport, runs: &[LoadedRun]) -> Result<(), BenchError> {
    std::fs::create_dir_all(out).map_err(|e| BenchError::io(out, "create output directory", e))?;
    let md = out.join(COMPARE_MD);
    std::fs::write(&md, &report.markdown).map_err(|e| BenchError::io(&md, "write", e))?;
    let json = out.join(COMPARE_JSON);
    let text = serde_json::to_string_pretty(report).map_err(|e| BenchError::Json {
        file: json.clone(),
        message: e.to_string(),
    })?;
    std::fs::write(&json, text + "\n").map_err(|e| BenchError::io(&json, "write", e))?;
    let mut series = Vec::new();
    let mut seen = vec![0usize; report.groups.len()];
    for r in runs {
        let rows = output::read_summary_csv(&r.dir.join(output::SUMMARY_CSV))?;
        seen[r.group] += 1;
        series.push(RunSeries {
            label: format!("{} #{}", report.groups[r.group].label, seen[r.group]),
            group: r.group,
            points: rows
                .iter()
                .map(|row| (row.elapsed_s, stats::rate(row.successful, row.window_s)))
                .collect(),
        });
    }
    let title = format!(
        "{} vs baseline {}",
        report.groups[1..]
            .iter()
            .map(|g| g.label.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        report.groups[0].label
    );
    chart::draw_compare(&out.join(COMPARE_PNG), &title, &series)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ratio_significance_follows_three_sigma() {
        let a = Sample::of(&[100.0, 102.0, 98.0]);
        let b = Sample::of(&[120.0, 121.0, 119.0]);
        let r = Ratio::of(&a, &b);
        assert!((r.ratio - 1.2).abs() < 1e-9);
        let expected = 3.0 * ((a.sd / a.mean).powi(2) + (b.sd / b.mean).powi(2)).sqrt() * 100.0;
        assert!((r.three_sigma_pct.unwrap_or(0.0) - expected).abs() < 1e-9);
        assert_eq!(r.significant, Some(true));
        let noisy = Sample::of(&[60.0, 100.0, 140.0]);
        assert_eq!(Ratio::of(&a, &noisy).significant, Some(false));
        let single = Sample::of(&[110.0]);
        assert_eq!(Ratio::of(&a, &single).significant, None);
    }

    #[test]
    fn run_refs_parse_labels() {
        assert_eq!(
            RunRef::parse("fast=/no/such/dir"),
            RunRef {
                label: Some("fast".into()),
                dir: "/no/such/dir".into()
            }
        );
        assert_eq!(RunRef::parse("/no/such/dir").label, None);
    }
}
