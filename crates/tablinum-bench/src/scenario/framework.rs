//! The report-scenario framework: what every scenario repeats, once.
//!
//! A scenario ([`Scenario`]) supplies its parameter presets, its plan of
//! cells ([`plan::Plan`]), how to measure one cell once, and its tables;
//! [`run`] does the rest: claims the output directory, writes the shared
//! header ([`output::Report`]: command, machine, git commit, times, run
//! counts) and `scenario.json` after every run, appends `runs.csv`, prints a
//! progress line per run and each group's table when the group is done,
//! and at the end draws the charts, writes `README.md` and prints the
//! summary. The pieces a scenario measures with live in submodules:
//! [`plan`] (cells × repeats in interleaved, seeded order), [`preset`]
//! (quick/full presets and argument checks), [`stats`] (mean, sd, the
//! report's ratio with its 3 std-dev band), [`verdict`] (targets: measured,
//! threshold, PASS/MISS), [`output`] (files and number formats), [`child`]
//! (child processes under a memory limit), [`cluster`] (a started or given
//! cluster) and [`driver`] (the one closed loop).
//!
//! The framework must never know what a scenario measures (no workload,
//! table or query here), never run two measured runs at once, never stop
//! because one run failed (it is recorded; only a run the scenario calls
//! fatal ends it, after its results are saved), and never write outside
//! `--out`.

pub mod child;
pub mod cluster;
pub mod driver;
pub mod output;
pub mod plan;
pub mod preset;
pub mod stats;
pub mod verdict;

use std::fmt::{Debug, Display};
use std::io::Write;
use std::path::Path;
use std::time::{Instant, SystemTime};

use serde::de::DeserializeOwned;
use serde::Serialize;

use self::output::{claim_out_dir, minutes, trim_float, ChartSpec, CsvFile, Report};
use self::plan::{Group, Plan, PlannedRun};
use self::preset::Preset;
use crate::error::BenchError;

/// One measured run, as a scenario records it.
pub trait RunResult {
    /// The run failed (counted in `runs_failed`; the scenario goes on).
    fn failed(&self) -> bool;
    /// Why the scenario cannot go on after this run (e.g. no request of it
    /// succeeded); `None` normally. Its results are saved first.
    fn fatal(&self) -> Option<String> {
        None
    }
    /// What the progress line says after the run's label.
    fn line(&self) -> String;
    /// Its line of `runs.csv` (scenarios with [`Scenario::csv_header`]).
    fn csv_line(&self) -> String {
        String::new()
    }
}

/// Which run [`Scenario::measure`] is asked for.
#[derive(Debug, Clone)]
pub struct RunAt<'a, C> {
    /// The cell.
    pub cell: &'a C,
    /// Where it is in the plan.
    pub planned: PlannedRun,
    /// Runs in the plan.
    pub total: usize,
    /// `[3/20] 8k-sync rocksdb r1`: the prefix of every line about this run.
    pub label: String,
    /// The output directory.
    pub out: &'a Path,
    /// When the scenario started.
    pub started: Instant,
}

/// A report scenario: its presets, plan, measured cell and tables.
pub trait Scenario {
    /// A cell: what one run measures (a target in a variant, a stream limit
    /// at a q); `Display` names it in progress lines.
    type Cell: Display;
    /// What one run of a cell gives.
    type Run: RunResult;
    /// The scenario's own fields of `scenario.json`, beside the shared header.
    type Body: Serialize + DeserializeOwned + Clone + Debug + PartialEq;
    /// The values its `--quick` and full modes differ in.
    type Shape: Clone;
    /// Those values, side by side.
    const PRESETS: Preset<Self::Shape>;

    /// Name (`volume`, `stream-limit`).
    fn name(&self) -> &'static str;
    /// Title of the report.
    fn title(&self) -> String;
    /// `--quick`.
    fn quick(&self) -> bool;
    /// The plan (asked for once, by [`run`]).
    fn plan(&self) -> Plan<Self::Cell>;
    /// What a group and a cell are called in the start line (`variants`, `targets`).
    fn plan_words(&self) -> (&'static str, &'static str);
    /// Expected seconds per run, for the time estimate of the start line.
    fn run_estimate_s(&self) -> f64;
    /// The body before the first run.
    fn body(&self) -> Self::Body;
    /// The header of `runs.csv`, for scenarios that write one.
    fn csv_header(&self) -> Option<&'static str> {
        None
    }
    /// Lines for stderr before the first run (limits, notes).
    fn announce(&self) -> Vec<String> {
        Vec::new()
    }
    /// A warning above everything in README.md and stdout (`> **WARNING** …`).
    fn warning(&self, _body: &Self::Body) -> Option<String> {
        None
    }
    /// The scenario's bullets of the header, after the shared ones.
    fn header_lines(&self, body: &Self::Body) -> Vec<String>;
    /// Called once the output directory exists, before anything runs.
    fn prepare(&mut self, _out: &Path) -> Result<(), BenchError> {
        Ok(())
    }
    /// Called before the first run of a group (load a table, ...).
    fn begin_group(
        &mut self,
        _group: &Group<Self::Cell>,
        _body: &mut Self::Body,
    ) -> Result<(), BenchError> {
        Ok(())
    }
    /// Called after the last run of a group (drop a table, ...).
    fn end_group(
        &mut self,
        _group: &Group<Self::Cell>,
        _body: &mut Self::Body,
    ) -> Result<(), BenchError> {
        Ok(())
    }
    /// Measures one cell once. A failed run is an `Ok` run that says so;
    /// `Err` means the scenario cannot go on.
    fn measure(&mut self, at: &RunAt<'_, Self::Cell>) -> Result<Self::Run, BenchError>;
    /// Adds a run to the body (and recomputes its statistics and verdicts).
    fn record(&mut self, body: &mut Self::Body, at: &RunAt<'_, Self::Cell>, run: Self::Run);
    /// The table of one group, printed when its last run is done.
    fn group_table(&self, body: &Self::Body, group: &Group<Self::Cell>) -> String;
    /// The results: summary tables and verdicts (stdout at the end, and
    /// README.md after the header).
    fn summary(&self, body: &Self::Body) -> String;
    /// README.md after the summary (details, the list of files).
    fn readme_tail(&self, body: &Self::Body) -> String;
    /// Charts to draw at the end.
    fn charts(&self, _body: &Self::Body) -> Vec<ChartSpec> {
        Vec::new()
    }
}

/// The title, the warning and the header of `r`.
fn top_markdown<S: Scenario>(s: &S, r: &Report<S::Body>) -> String {
    let mut md = format!("# {}\n\n", r.title);
    if let Some(w) = s.warning(&r.body) {
        md.push_str(&format!("> **WARNING** {w}\n\n"));
    }
    md.push_str(&r.header_markdown(&s.header_lines(&r.body)));
    md
}

/// The whole report as markdown (README.md).
pub fn render_markdown<S: Scenario>(s: &S, r: &Report<S::Body>) -> String {
    format!(
        "{}\n{}\n{}",
        top_markdown(s, r),
        s.summary(&r.body),
        s.readme_tail(&r.body)
    )
}

/// Runs every run of `s`'s plan into `out` and writes its results; the
/// command line recorded is `invocation`. Failed runs are recorded (and
/// counted in `runs_failed`), not returned as errors; `Err` means the
/// scenario itself could not go on (output directory, a fatal run, a
/// scenario hook's own failure), with the results so far saved.
pub fn run<S: Scenario>(
    s: &mut S,
    out: &Path,
    invocation: &[String],
) -> Result<Report<S::Body>, BenchError> {
    let plan = s.plan();
    if plan.is_empty() {
        return Err(BenchError::Usage {
            arg: "scenario",
            reason: "nothing to run: the plan has no cell".into(),
        });
    }
    claim_out_dir(out)?;
    s.prepare(out)?;
    let runs = plan.runs();
    let started = Instant::now();
    let mut report = Report::new(
        s.name(),
        s.title(),
        s.quick(),
        invocation,
        runs.len(),
        s.body(),
    );
    report.save(out)?;
    let csv = match s.csv_header() {
        Some(h) => Some(CsvFile::create(out.join(output::RUNS_CSV), h)?),
        None => None,
    };
    let (group_word, cell_word) = s.plan_words();
    let per_run_s = s.run_estimate_s();
    eprintln!(
        "scenario {}: {} of {} s (~{} in all); results in {}",
        s.name(),
        plan.describe(group_word, cell_word),
        trim_float(per_run_s),
        minutes(runs.len() as f64 * per_run_s),
        out.display()
    );
    for line in s.announce() {
        eprintln!("{line}");
    }
    let mut stdout = std::io::stdout().lock();
    // A closed stdout must not stop the runs: results go to files anyway.
    let _ = writeln!(stdout, "{}", top_markdown(s, &report));
    let _ = stdout.flush();

    let width = runs.len().to_string().len();
    for (i, p) in runs.iter().enumerate() {
        let group = &plan.groups[p.group];
        if i == 0 || runs[i - 1].group != p.group {
            s.begin_group(group, &mut report.body)?;
            report.save(out)?;
        }
        let at = RunAt {
            cell: &group.cells[p.cell],
            planned: *p,
            total: runs.len(),
            label: format!(
                "[{:>width$}/{}] {} {} r{}",
                p.sequence,
                runs.len(),
                group.name,
                group.cells[p.cell],
                p.repeat
            ),
            out,
            started,
        };
        let result = s.measure(&at)?;
        if let Some(csv) = &csv {
            csv.append(&result.csv_line())?;
        }
        eprintln!(
            "{}: {}; scenario {}",
            at.label,
            result.line(),
            minutes(started.elapsed().as_secs_f64())
        );
        report.runs_done += 1;
        if result.failed() {
            report.runs_failed += 1;
        }
        let fatal = result.fatal();
        s.record(&mut report.body, &at, result);
        report.wall_s = started.elapsed().as_secs_f64();
        report.save(out)?;
        if let Some(reason) = fatal {
            return Err(BenchError::ScenarioAborted {
                run: at.label,
                reason,
                out: out.to_path_buf(),
            });
        }
        if runs.get(i + 1).is_none_or(|n| n.group != p.group) {
            s.end_group(group, &mut report.body)?;
            report.save(out)?;
            let _ = writeln!(stdout, "{}", s.group_table(&report.body, group));
            let _ = stdout.flush();
        }
    }

    report.complete = true;
    report.finished_at = Some(crate::output::rfc3339_utc(SystemTime::now()));
    report.wall_s = started.elapsed().as_secs_f64();
    for chart in s.charts(&report.body) {
        let file = out.join(&chart.file);
        if let Err(e) = crate::chart::draw_panels(&file, &chart.title, &chart.panels) {
            eprintln!("warning: {e}");
            report.chart_errors.push(e.to_string());
        }
    }
    report.save(out)?;
    let readme = out.join(output::README_MD);
    std::fs::write(&readme, render_markdown(s, &report))
        .map_err(|e| BenchError::io(&readme, "write", e))?;
    let _ = writeln!(stdout, "{}", s.summary(&report.body));
    let _ = stdout.flush();
    eprintln!(
        "scenario {}: {} runs ({} failed) in {}; results in {}",
        s.name(),
        report.runs_done,
        report.runs_failed,
        minutes(report.wall_s),
        out.display()
    );
    Ok(report)
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::plan::{Group, Interleave};
    use super::*;

    /// A scenario measuring nothing real: cell `x` of group `g` "measures"
    /// `10 · g + x`; cell 99 is fatal.
    struct Toy {
        events: Vec<String>,
    }

    #[derive(Debug, Clone, PartialEq)]
    struct ToyRun {
        value: u32,
    }

    impl RunResult for ToyRun {
        fn failed(&self) -> bool {
            self.value % 2 == 1
        }
        fn fatal(&self) -> Option<String> {
            (self.value == 99).then(|| "the toy broke".into())
        }
        fn line(&self) -> String {
            format!("value {}", self.value)
        }
        fn csv_line(&self) -> String {
            self.value.to_string()
        }
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    struct ToyBody {
        values: Vec<u32>,
    }

    impl Scenario for Toy {
        type Cell = u32;
        type Run = ToyRun;
        type Body = ToyBody;
        type Shape = u32;
        const PRESETS: Preset<u32> = Preset { quick: 1, full: 2 };

        fn name(&self) -> &'static str {
            "toy"
        }
        fn title(&self) -> String {
            "Toy".into()
        }
        fn quick(&self) -> bool {
            true
        }
        fn plan(&self) -> Plan<u32> {
            Plan {
                groups: vec![
                    Group {
                        name: "g0".into(),
                        key: 0,
                        cells: vec![2, 4],
                    },
                    Group {
                        name: "g1".into(),
                        key: 1,
                        cells: vec![if self.events.is_empty() { 1 } else { 99 }],
                    },
                ],
                repeat: Self::PRESETS.pick(true) + 1,
                interleave: Interleave::Rotate,
            }
        }
        fn plan_words(&self) -> (&'static str, &'static str) {
            ("groups", "cells")
        }
        fn run_estimate_s(&self) -> f64 {
            0.0
        }
        fn body(&self) -> ToyBody {
            ToyBody { values: vec![] }
        }
        fn csv_header(&self) -> Option<&'static str> {
            Some("value")
        }
        fn header_lines(&self, body: &ToyBody) -> Vec<String> {
            vec![format!("values so far: {}", body.values.len())]
        }
        fn begin_group(&mut self, g: &Group<u32>, _: &mut ToyBody) -> Result<(), BenchError> {
            self.events.push(format!("begin {}", g.name));
            Ok(())
        }
        fn end_group(&mut self, g: &Group<u32>, _: &mut ToyBody) -> Result<(), BenchError> {
            self.events.push(format!("end {}", g.name));
            Ok(())
        }
        fn measure(&mut self, at: &RunAt<'_, u32>) -> Result<ToyRun, BenchError> {
            self.events.push(at.label.clone());
            Ok(ToyRun {
                value: if *at.cell == 99 {
                    99
                } else {
                    10 * at.planned.group as u32 + at.cell
                },
            })
        }
        fn record(&mut self, body: &mut ToyBody, _: &RunAt<'_, u32>, run: ToyRun) {
            body.values.push(run.value);
        }
        fn group_table(&self, body: &ToyBody, g: &Group<u32>) -> String {
            format!("table of {} after {} runs\n", g.name, body.values.len())
        }
        fn summary(&self, body: &ToyBody) -> String {
            format!("## Summary\n\nsum {}\n", body.values.iter().sum::<u32>())
        }
        fn readme_tail(&self, _: &ToyBody) -> String {
            "## Files\n".into()
        }
        fn charts(&self, body: &ToyBody) -> Vec<ChartSpec> {
            vec![ChartSpec {
                file: "toy.png".into(),
                title: "toy".into(),
                panels: vec![crate::chart::Panel {
                    bands: Vec::new(),
                    title: "values".into(),
                    x_desc: "run".into(),
                    y_desc: "value".into(),
                    y_unit: None,
                    lines: vec![crate::chart::Line::new(
                        "value",
                        body.values
                            .iter()
                            .enumerate()
                            .map(|(i, &v)| (i as f64, f64::from(v)))
                            .collect(),
                    )],
                }],
            }]
        }
    }

    #[test]
    fn the_framework_runs_the_plan_and_writes_every_output() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let out = tmp.path().join("toy");
        let mut toy = Toy { events: vec![] };
        let args = vec!["tablinum".to_string(), "toy".to_string()];
        let r = run(&mut toy, &out, &args).unwrap_or_else(|e| panic!("{e}"));
        assert!(r.complete && r.finished_at.is_some());
        assert_eq!((r.runs_total, r.runs_done, r.runs_failed), (6, 6, 2));
        // Rotated repeats within each group, hooks around each group.
        assert_eq!(r.values, [2, 4, 4, 2, 11, 11]);
        assert_eq!(
            toy.events,
            [
                "begin g0",
                "[1/6] g0 2 r1",
                "[2/6] g0 4 r1",
                "[3/6] g0 4 r2",
                "[4/6] g0 2 r2",
                "end g0",
                "begin g1",
                "[5/6] g1 1 r1",
                "[6/6] g1 1 r2",
                "end g1"
            ]
        );
        let back: Report<ToyBody> = Report::load(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
        let csv =
            std::fs::read_to_string(out.join(output::RUNS_CSV)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(csv, "value\n2\n4\n4\n2\n11\n11\n");
        let md =
            std::fs::read_to_string(out.join(output::README_MD)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            md.starts_with("# Toy\n\n```sh\ntablinum toy\n```\n\n- started "),
            "{md}"
        );
        assert!(md.contains(": 6 runs (2 failed)\n- machine: "), "{md}");
        assert!(
            md.contains("- values so far: 6\n\n## Summary\n\nsum 34\n\n## Files\n"),
            "{md}"
        );
        assert!(out.join("toy.png").is_file());
        assert!(r.chart_errors.is_empty());
        // Never into a directory that holds a scenario.
        let e = run(&mut Toy { events: vec![] }, &out, &args).err();
        assert!(e.is_some_and(|e| e.to_string().contains("already holds a scenario")));
    }

    #[test]
    fn a_fatal_run_stops_the_scenario_after_saving_it() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let out = tmp.path().join("toy");
        // A non-empty event list makes g1's cell the fatal 99.
        let mut toy = Toy {
            events: vec!["armed".into()],
        };
        let e = run(&mut toy, &out, &[]).err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some(&*format!(
                "scenario stopped after run [5/6] g1 99 r1: the toy broke; results so far are in {}",
                out.display()
            ))
        );
        let saved: Report<ToyBody> = Report::load(&out).unwrap_or_else(|e| panic!("{e}"));
        assert!(!saved.complete);
        assert_eq!(saved.runs_done, 5);
        assert_eq!(saved.values, [2, 4, 4, 2, 99]);
        assert!(!out.join(output::README_MD).exists());
    }
}
