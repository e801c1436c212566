//! The stream-limit scenario's tables: cells over their repeats, adaptive
//! against the best fixed (window, batch rows) pair, the targets' verdicts,
//! and the markdown and chart of them.
//!
//! Owns [`CellReport`] (one line of the report's table: mean rows/s,
//! std-dev %, ratio vs `stream_limit` 10 with its 3 std-dev %, rows sent and
//! wasted, waits, latency), [`FairComparison`] (per q: the best fixed pair by
//! rows/s and the fewest-sent one against adaptive), [`check_targets`] (a, b
//! and the fair grid's c) and their rendering. Pure functions of the run
//! records: they must never run, read or write anything, so they are tested
//! on synthetic runs.

use serde::{Deserialize, Serialize};
use tablinum_stream::window::WindowMode;

use super::{
    Cell, CellLimit, Parameters, RunRecord, StreamLimitBody, BASELINE_STREAM_LIMIT, SCENARIO_PNG,
    TARGET_Q, TARGET_RATIO_MIN,
};
use crate::chart::{Line, Panel};
use crate::scenario::framework::output::{thousands, ChartSpec};
use crate::scenario::framework::stats::{self, Sample};
use crate::scenario::framework::verdict::{ratio_at_least, Bound, Check, TargetCheck};

/// One cell (q × stream limit × batch rows) over its repeats: a line of the
/// report's table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellReport {
    /// Tablets.
    pub q: u32,
    /// Stream limit: a number, or `"adaptive"`.
    pub stream_limit: CellLimit,
    /// Rows per batch asked for.
    pub batch_rows: u32,
    /// One of the report's cells.
    #[serde(default)]
    pub in_report_grid: bool,
    /// One of the fair grid's cells.
    #[serde(default)]
    pub in_fair_grid: bool,
    /// Repeats measured.
    pub repeats: usize,
    /// Mean rows/s over the repeats.
    pub rows_per_sec_mean: f64,
    /// Sample std-dev of rows/s, percent of the mean.
    pub rows_per_sec_stddev_pct: f64,
    /// rows/s of every repeat, in run order.
    pub rows_per_sec_values: Vec<f64>,
    /// Mean rows/s over that of `stream_limit` 10 (the report's batch rows)
    /// at the same q (`None` without that cell).
    pub ratio_vs_10: Option<f64>,
    /// 3 std-dev of that ratio, percent (`None` without two repeats on both sides).
    pub ratio_vs_10_three_sd_pct: Option<f64>,
    /// Wasted rows per request (over every request of every repeat).
    pub wasted_rows_per_request: f64,
    /// Rows sent per request.
    pub rows_sent_per_request: f64,
    /// Merge waits per request.
    pub waits_per_request: f64,
    /// Merge stalls (waits after a tablet's initial window) per request.
    #[serde(default)]
    pub stalls_per_request: f64,
    /// Successful requests, all repeats.
    pub requests: u64,
    /// Failed requests, all repeats.
    pub errors: u64,
    /// Median request latency over every request of every repeat, µs.
    pub p50_us: u64,
    /// 99th percentile, µs.
    pub p99_us: u64,
}

impl CellReport {
    /// Its rows/s over the repeats, for ratios.
    pub fn sample(&self) -> Sample {
        Sample::of(&self.rows_per_sec_values)
    }

    /// `5 × 32` (window × batch rows) or `adaptive`.
    pub fn pair(&self) -> String {
        match self.stream_limit.fixed() {
            Some(w) => format!("{w} × {}", self.batch_rows),
            None => "adaptive".into(),
        }
    }
}

/// Builds the cells of one q from its runs, in `cells` order.
pub fn cells_of(q: u32, cells: &[Cell], runs: &[RunRecord]) -> Vec<CellReport> {
    let of = |c: &Cell| -> Vec<&RunRecord> {
        runs.iter()
            .filter(|r| r.q == q && c.same(r.stream_limit, r.batch_rows) && r.requests > 0)
            .collect()
    };
    let sample =
        |rs: &[&RunRecord]| Sample::of(&rs.iter().map(|r| r.rows_per_sec).collect::<Vec<_>>());
    let baseline = cells
        .iter()
        .find(|c| c.report && c.stream_limit.fixed() == Some(BASELINE_STREAM_LIMIT));
    let base = baseline.map(|b| sample(&of(b)));
    cells
        .iter()
        .map(|c| {
            let rs = of(c);
            let s = sample(&rs);
            let requests: u64 = rs.iter().map(|r| r.requests).sum();
            let per_request = |f: fn(&RunRecord) -> f64| {
                stats::weighted_mean(rs.iter().map(|r| (f(r), r.requests as f64)))
            };
            // Percentiles of all requests: the runs' request-weighted
            // percentiles are not kept, so take the medians' and p99s'
            // request-weighted means (runs of one cell are equally long).
            let weighted = |f: fn(&RunRecord) -> u64| {
                stats::weighted_mean(rs.iter().map(|r| (f(r) as f64, r.requests as f64))).round()
                    as u64
            };
            let ratio = base.as_ref().and_then(|b| stats::ratio(b, &s));
            let is_baseline = baseline.is_some_and(|b| b == c);
            CellReport {
                q,
                stream_limit: c.stream_limit,
                batch_rows: c.batch_rows,
                in_report_grid: c.report,
                in_fair_grid: c.fair,
                repeats: s.n,
                rows_per_sec_mean: s.mean,
                rows_per_sec_stddev_pct: s.cv() * 100.0,
                rows_per_sec_values: rs.iter().map(|r| r.rows_per_sec).collect(),
                ratio_vs_10: ratio.map(|r| r.ratio),
                ratio_vs_10_three_sd_pct: ratio
                    .filter(|_| !is_baseline)
                    .and_then(|r| r.three_sigma_pct),
                wasted_rows_per_request: per_request(|r| r.rows_wasted_per_request),
                rows_sent_per_request: per_request(|r| r.rows_sent_per_request),
                waits_per_request: per_request(|r| r.waits_per_request),
                stalls_per_request: per_request(|r| r.stalls_per_request),
                requests,
                errors: runs
                    .iter()
                    .filter(|r| r.q == q && c.same(r.stream_limit, r.batch_rows))
                    .map(|r| r.errors)
                    .sum(),
                p50_us: weighted(|r| r.p50_us),
                p99_us: weighted(|r| r.p99_us),
            }
        })
        .collect()
}

/// Adaptive against the best fixed (window, batch rows) pair at one q.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FairComparison {
    /// Tablets.
    pub q: u32,
    /// The fixed cell with the highest mean rows/s: its window.
    pub best_stream_limit: u32,
    /// Its rows per batch.
    pub best_batch_rows: u32,
    /// Its mean rows/s.
    pub best_rows_per_sec_mean: f64,
    /// Adaptive's mean rows/s.
    pub adaptive_rows_per_sec_mean: f64,
    /// Adaptive / best in rows/s.
    pub ratio: f64,
    /// 3 std-dev of that ratio, percent (two repeats on both sides).
    pub ratio_three_sd_pct: Option<f64>,
    /// Adaptive is not below the best by more than the 3 std-dev band.
    pub rows_per_sec_within_3sd: bool,
    /// Rows the best fixed pair sent per request.
    pub best_rows_sent_per_request: f64,
    /// Rows adaptive sent per request.
    pub adaptive_rows_sent_per_request: f64,
    /// Adaptive / best in rows sent per request.
    pub sent_ratio: Option<f64>,
    /// The fixed cell that sent the fewest rows per request: its window.
    pub fewest_sent_stream_limit: u32,
    /// Its rows per batch.
    pub fewest_sent_batch_rows: u32,
    /// Its rows sent per request.
    pub fewest_rows_sent_per_request: f64,
    /// Adaptive's rows sent per request over the rows the query needs.
    pub adaptive_sent_per_needed: f64,
}

/// Adaptive against every fixed cell measured at `q` (`None` unless both
/// adaptive and a fixed cell were measured there).
pub fn fair_of(q: u32, cells: &[CellReport], limit_rows: u64) -> Option<FairComparison> {
    let here = || cells.iter().filter(move |c| c.q == q && c.repeats > 0);
    let adaptive = here().find(|c| c.stream_limit.fixed().is_none())?;
    let best = here()
        .filter(|c| c.stream_limit.fixed().is_some())
        .max_by(|x, y| x.rows_per_sec_mean.total_cmp(&y.rows_per_sec_mean))?;
    let fewest = here()
        .filter(|c| c.stream_limit.fixed().is_some())
        .min_by(|x, y| x.rows_sent_per_request.total_cmp(&y.rows_sent_per_request))?;
    let check = ratio_at_least("", &best.sample(), &adaptive.sample(), 1.0);
    let r = stats::Ratio::of(&best.sample(), &adaptive.sample());
    Some(FairComparison {
        q,
        best_stream_limit: best.stream_limit.fixed().unwrap_or(0),
        best_batch_rows: best.batch_rows,
        best_rows_per_sec_mean: best.rows_per_sec_mean,
        adaptive_rows_per_sec_mean: adaptive.rows_per_sec_mean,
        ratio: r.ratio,
        ratio_three_sd_pct: r.three_sigma_pct,
        rows_per_sec_within_3sd: check.pass,
        best_rows_sent_per_request: best.rows_sent_per_request,
        adaptive_rows_sent_per_request: adaptive.rows_sent_per_request,
        sent_ratio: (best.rows_sent_per_request > 0.0)
            .then(|| adaptive.rows_sent_per_request / best.rows_sent_per_request),
        fewest_sent_stream_limit: fewest.stream_limit.fixed().unwrap_or(0),
        fewest_sent_batch_rows: fewest.batch_rows,
        fewest_rows_sent_per_request: fewest.rows_sent_per_request,
        adaptive_sent_per_needed: adaptive.rows_sent_per_request / limit_rows.max(1) as f64,
    })
}

fn measured(cells: &[CellReport], q: u32, l: WindowMode, report_only: bool) -> Option<&CellReport> {
    cells.iter().find(|c| {
        c.q == q && c.stream_limit.0 == l && c.repeats > 0 && (c.in_report_grid || !report_only)
    })
}

/// The three targets, from the cells (`qs` in run order).
pub fn check_targets(cells: &[CellReport], qs: &[u32], p: &Parameters) -> Vec<TargetCheck> {
    let a = {
        let description = format!(
            "at q={TARGET_Q} adaptive ≥ {TARGET_RATIO_MIN} × stream_limit {BASELINE_STREAM_LIMIT} in rows/s"
        );
        match (
            measured(cells, TARGET_Q, WindowMode::Adaptive, true),
            measured(
                cells,
                TARGET_Q,
                WindowMode::Fixed(BASELINE_STREAM_LIMIT),
                true,
            ),
        ) {
            (Some(ad), Some(base)) if base.rows_per_sec_mean > 0.0 => TargetCheck::of(
                "a",
                description,
                vec![Check::new(
                    format!(
                        "q={TARGET_Q}: adaptive {} rows/s / stream_limit {BASELINE_STREAM_LIMIT} {} rows/s",
                        thousands(ad.rows_per_sec_mean, 0),
                        thousands(base.rows_per_sec_mean, 0)
                    ),
                    ad.rows_per_sec_mean / base.rows_per_sec_mean,
                    Bound::AtLeast,
                    TARGET_RATIO_MIN,
                )],
                vec![],
            ),
            _ => TargetCheck::of(
                "a",
                description,
                vec![],
                vec![format!(
                    "q={TARGET_Q} with adaptive and stream_limit {BASELINE_STREAM_LIMIT} measured"
                )],
            ),
        }
    };
    // Adaptive against the best of a set of fixed cells, at every q.
    let versus_best = |report_only: bool| -> (Vec<Check>, Vec<String>) {
        let mut checks = Vec::new();
        let mut missing = Vec::new();
        for &q in qs {
            let best = cells
                .iter()
                .filter(|c| {
                    c.q == q
                        && c.stream_limit.fixed().is_some()
                        && c.repeats > 0
                        && (c.in_report_grid || !report_only)
                })
                .max_by(|x, y| x.rows_per_sec_mean.total_cmp(&y.rows_per_sec_mean));
            match (measured(cells, q, WindowMode::Adaptive, report_only), best) {
                (Some(ad), Some(best)) => checks.push(ratio_at_least(
                    format!(
                        "q={q}: adaptive / best fixed ({}) in rows/s",
                        if report_only {
                            best.stream_limit.to_string()
                        } else {
                            best.pair()
                        }
                    ),
                    &best.sample(),
                    &ad.sample(),
                    1.0,
                )),
                _ => missing.push(format!("q={q}")),
            }
        }
        (checks, missing)
    };
    let (checks, missing) = versus_best(true);
    let b = TargetCheck::of(
        "b",
        "at every q adaptive is not slower than the best of the report's fixed stream limits \
         by more than the 3 std-dev of their ratio",
        checks,
        missing,
    );
    let (mut checks, mut missing) = versus_best(false);
    let needed = p.limit_rows as f64;
    let sent_q = p.fair_sent_q;
    match measured(cells, sent_q, WindowMode::Adaptive, false) {
        Some(ad) => checks.push(
            Check::new(
                format!("q={sent_q}: adaptive rows sent per request"),
                ad.rows_sent_per_request,
                Bound::AtMost,
                p.fair_sent_ratio_max * needed,
            )
            .with_basis(format!(
                "{} × the {} rows the query needs",
                p.fair_sent_ratio_max, p.limit_rows
            )),
        ),
        None => missing.push(format!("q={sent_q}: adaptive rows sent")),
    }
    let c = TargetCheck::of(
        "c",
        format!(
            "fair grid: adaptive ≥ the best fixed (window, batch rows) pair at every q in rows/s \
             (within 3 std-dev) and sends no more than {}× the rows the query needs at q = {}",
            p.fair_sent_ratio_max, sent_q
        ),
        checks,
        missing,
    );
    vec![a, b, c]
}

pub(super) fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.map_or_else(|| "—".to_string(), f)
}

/// The report's table for `cells` (markdown).
pub fn cells_table(cells: &[CellReport]) -> String {
    let mut t = String::from(
        "| q | stream_limit | batch rows | mean rows/s | std-dev % | ratio vs 10 | 3 std-dev % \
         | wasted rows/req | sent rows/req | waits/req | p50 ms | p99 ms | requests |\n\
         |---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for c in cells {
        let batch = if c.batch_rows == 0 {
            "auto".to_string()
        } else {
            c.batch_rows.to_string()
        };
        t.push_str(&format!(
            "| {} | {} | {batch} | {} | {:.2} | {} | {} | {:.1} | {:.1} | {:.1} | {:.2} | {:.2} | {}{} |\n",
            c.q,
            c.stream_limit,
            thousands(c.rows_per_sec_mean, 1),
            c.rows_per_sec_stddev_pct,
            opt(c.ratio_vs_10, |r| format!("{r:.3}")),
            opt(c.ratio_vs_10_three_sd_pct, |p| format!("{p:.2}")),
            c.wasted_rows_per_request,
            c.rows_sent_per_request,
            c.waits_per_request,
            c.p50_us as f64 / 1000.0,
            c.p99_us as f64 / 1000.0,
            c.requests,
            if c.errors > 0 {
                format!(" ({} failed)", c.errors)
            } else {
                String::new()
            }
        ));
    }
    t
}

/// Adaptive against the best fixed (window, batch rows) pair, one line per q.
pub fn fair_table(fair: &[FairComparison]) -> String {
    let mut t = String::from(
        "| q | best fixed (window × batch rows) | its rows/s | adaptive rows/s | adaptive / best \
         | 3 std-dev % | rows/s within 3σ | its sent rows/req | adaptive sent rows/req \
         | adaptive / best sent | fewest-sent fixed (sent rows/req) | adaptive sent / needed |\n\
         |---:|---|---:|---:|---:|---:|---|---:|---:|---:|---|---:|\n",
    );
    for f in fair {
        t.push_str(&format!(
            "| {} | {} × {} | {} | {} | {:.3} | {} | {} | {:.1} | {:.1} | {} | {} × {} ({:.1}) | {:.3} |\n",
            f.q,
            f.best_stream_limit,
            f.best_batch_rows,
            thousands(f.best_rows_per_sec_mean, 1),
            thousands(f.adaptive_rows_per_sec_mean, 1),
            f.ratio,
            opt(f.ratio_three_sd_pct, |p| format!("{p:.2}")),
            if f.rows_per_sec_within_3sd { "yes" } else { "**no**" },
            f.best_rows_sent_per_request,
            f.adaptive_rows_sent_per_request,
            opt(f.sent_ratio, |r| format!("{r:.3}")),
            f.fewest_sent_stream_limit,
            f.fewest_sent_batch_rows,
            f.fewest_rows_sent_per_request,
            f.adaptive_sent_per_needed,
        ));
    }
    t
}

/// `scenario.png`: mean rows/s against q (the report's fixed cells, the best
/// fixed pair, adaptive) and rows sent per request against q (the best pair,
/// the fewest-sent pair, adaptive, the rows needed).
pub fn scenario_chart(body: &StreamLimitBody) -> ChartSpec {
    let by_q = |f: &dyn Fn(u32) -> Option<f64>| -> Vec<(f64, f64)> {
        let mut pts: Vec<(f64, f64)> = body
            .parameters
            .qs
            .iter()
            .filter_map(|&q| f(q).map(|y| (f64::from(q), y)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        pts
    };
    let mut rows = Vec::new();
    for l in body
        .parameters
        .stream_limits
        .iter()
        .filter(|l| l.fixed().is_some())
    {
        let w = l.0;
        rows.push(Line::new(
            format!(
                "stream_limit {l}, {} row/batch",
                body.parameters.fixed_batch_rows
            ),
            by_q(&|q| measured(&body.cells, q, w, true).map(|c| c.rows_per_sec_mean)),
        ));
    }
    let fair =
        |f: &dyn Fn(&FairComparison) -> f64| by_q(&|q| body.fair.iter().find(|x| x.q == q).map(f));
    rows.push(Line::new(
        "best fixed (window, batch rows)",
        fair(&|f| f.best_rows_per_sec_mean),
    ));
    rows.push(Line::new(
        "adaptive",
        by_q(&|q| {
            measured(&body.cells, q, WindowMode::Adaptive, false).map(|c| c.rows_per_sec_mean)
        }),
    ));
    let sent = vec![
        Line::new(
            "best fixed (by rows/s)",
            fair(&|f| f.best_rows_sent_per_request),
        ),
        Line::new(
            "fewest-sent fixed",
            fair(&|f| f.fewest_rows_sent_per_request),
        ),
        Line::new(
            "adaptive",
            by_q(&|q| {
                measured(&body.cells, q, WindowMode::Adaptive, false)
                    .map(|c| c.rows_sent_per_request)
            }),
        ),
        Line::new(
            "needed (limit)",
            by_q(&|_| Some(body.parameters.limit_rows as f64)),
        ),
    ];
    ChartSpec {
        file: SCENARIO_PNG.into(),
        title: "stream_limit: index queries of 1000 rows against q tablets".into(),
        panels: vec![
            Panel {
                bands: Vec::new(),
                title: "mean rows/s".into(),
                x_desc: "q (tablets)".into(),
                y_desc: "rows/s".into(),
                y_unit: None,
                lines: rows,
            },
            Panel {
                bands: Vec::new(),
                title: "rows sent per request".into(),
                x_desc: "q (tablets)".into(),
                y_desc: "rows".into(),
                y_unit: None,
                lines: sent,
            },
        ],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::framework::cluster::ClusterInfo;
    use crate::scenario::framework::output::Report;
    use crate::scenario::framework::verdict::{Bound, Verdict};
    use crate::scenario::stream_limit::{
        grid, parameters, StreamLimitArgs, StreamLimitBody, StreamLimitReport, LIMIT_ROWS,
        RUNS_CSV_HEADER,
    };
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: StreamLimitArgs,
    }

    fn params(extra: &[&str]) -> Parameters {
        let mut v = vec!["x", "--out", "/tmp/x"];
        v.extend_from_slice(extra);
        let args = Cli::try_parse_from(v)
            .unwrap_or_else(|e| panic!("{e}"))
            .args;
        parameters(&args).unwrap_or_else(|e| panic!("{e}"))
    }

    fn run(q: u32, l: WindowMode, batch_rows: u32, repeat: u32, rows_per_sec: f64) -> RunRecord {
        RunRecord {
            q,
            stream_limit: CellLimit(l),
            batch_rows,
            repeat,
            position: 1,
            sequence: 1,
            clients: 2,
            elapsed_s: 1.0,
            requests: 100,
            errors: 0,
            rows_returned: rows_per_sec as u64,
            rows_per_sec,
            rows_sent_per_request: 1100.0,
            rows_wasted_per_request: 100.0,
            waits_per_request: 3.0,
            stalls_per_request: 1.0,
            retries: 0,
            p50_us: 1000,
            p99_us: 3000,
            mean_us: 1100.0,
            first_error: None,
        }
    }

    /// Two repeats of the report's cells at `q` (±1%) and of two fair cells.
    fn synthetic(q: u32, adaptive: f64, best_fair: f64) -> Vec<RunRecord> {
        let mut runs = Vec::new();
        for r in 1..=2 {
            let d = if r == 1 { 0.99 } else { 1.01 };
            runs.push(run(q, WindowMode::Fixed(5), 1, r, 150_000.0 * d));
            runs.push(run(q, WindowMode::Fixed(10), 1, r, 100_000.0 * d));
            runs.push(run(q, WindowMode::Fixed(100), 1, r, 30_000.0 * d));
            runs.push(run(q, WindowMode::Adaptive, 0, r, adaptive * d));
            runs.push(run(q, WindowMode::Fixed(5), 32, r, best_fair * d));
            runs.push(run(q, WindowMode::Fixed(2), 8, r, 90_000.0 * d));
        }
        runs
    }

    fn small_grid() -> Parameters {
        params(&["--fair-windows", "2,5", "--fair-batch-rows", "8,32"])
    }

    #[test]
    fn cells_have_the_reports_columns_and_targets_are_checked() {
        let p = small_grid();
        let cells_192 = grid(&p, 192);
        let runs = synthetic(192, 160_000.0, 155_000.0);
        let cells = cells_of(192, &cells_192, &runs);
        assert_eq!(cells.len(), 8, "4 report cells, 4 fair");
        let measured_cells: Vec<CellReport> =
            cells.iter().filter(|c| c.repeats > 0).cloned().collect();
        assert_eq!(measured_cells.len(), 6);
        let c5 = &cells[0];
        assert!((c5.ratio_vs_10.unwrap_or(0.0) - 1.5).abs() < 1e-9);
        assert!(c5.ratio_vs_10_three_sd_pct.is_some_and(|p| p > 0.0));
        assert_eq!(cells[1].ratio_vs_10, Some(1.0));
        assert_eq!(cells[1].ratio_vs_10_three_sd_pct, None);
        assert!((c5.wasted_rows_per_request - 100.0).abs() < 1e-9);
        assert!(c5.in_report_grid && !c5.in_fair_grid);
        let j = serde_json::to_value(&cells).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j[0]["stream_limit"], 5);
        assert_eq!(j[3]["stream_limit"], "adaptive");
        for key in [
            "q",
            "stream_limit",
            "rows_per_sec_mean",
            "rows_per_sec_stddev_pct",
            "ratio_vs_10",
            "wasted_rows_per_request",
        ] {
            assert!(!j[3][key].is_null(), "{key}");
        }
        let back: Vec<CellReport> = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, cells);
        let t = check_targets(&measured_cells, &[192], &p);
        assert_eq!(
            (t[0].verdict, t[1].verdict),
            (Verdict::Pass, Verdict::Pass),
            "{t:?}"
        );
        assert_eq!(t[0].checks[0].threshold, TARGET_RATIO_MIN);

        // Adaptive 25% under the best fixed limit, far outside the noise.
        let slow: Vec<RunRecord> = runs
            .iter()
            .cloned()
            .map(|mut r| {
                if r.stream_limit.0 == WindowMode::Adaptive {
                    r.rows_per_sec *= 0.75;
                }
                r
            })
            .collect();
        let t = check_targets(&cells_of(192, &cells_192, &slow), &[192, 8], &p);
        assert_eq!(
            (t[0].verdict, t[1].verdict, t[2].verdict),
            (Verdict::Miss, Verdict::Miss, Verdict::Miss),
            "{t:?}"
        );
        assert!(t[1].detail.contains("q=8: not evaluated"), "{t:?}");
        let t = check_targets(&[], &[8], &p);
        assert_eq!(
            (t[0].verdict, t[1].verdict, t[2].verdict),
            (
                Verdict::NotEvaluated,
                Verdict::NotEvaluated,
                Verdict::NotEvaluated
            )
        );

        let md = cells_table(&cells);
        assert!(md.contains("| 192 | 5 | 1 | 150,000.0 |"), "{md}");
        assert!(md.contains("| 192 | adaptive | auto |"), "{md}");
        assert!(md.contains("| 192 | 5 | 32 | 155,000.0 |"), "{md}");
        let line = runs[0].csv_line();
        assert_eq!(line.split(',').count(), RUNS_CSV_HEADER.split(',').count());
    }

    #[test]
    fn adaptive_is_judged_against_the_best_fixed_pair_in_rows_and_rows_sent() {
        let p = small_grid();
        // At q=8 adaptive beats the report's cells by 1.07× but is 10%
        // under a batched fixed pair: (b) passes, (c) misses on rows/s.
        let mut runs = synthetic(8, 160_000.0, 178_000.0);
        for r in runs.iter_mut() {
            if r.stream_limit.0 == WindowMode::Adaptive {
                r.rows_sent_per_request = 1_400.0;
            }
            if r.batch_rows == 32 {
                r.rows_sent_per_request = 1_300.0;
            }
            if r.batch_rows == 8 {
                r.rows_sent_per_request = 1_050.0;
            }
        }
        let cells = cells_of(8, &grid(&p, 8), &runs);
        let f = fair_of(8, &cells, LIMIT_ROWS).unwrap_or_else(|| panic!("no comparison"));
        assert_eq!((f.best_stream_limit, f.best_batch_rows), (5, 32));
        assert!((f.ratio - 160.0 / 178.0).abs() < 1e-9, "{f:?}");
        assert!(!f.rows_per_sec_within_3sd);
        assert_eq!(f.adaptive_rows_sent_per_request, 1_400.0);
        assert_eq!(f.best_rows_sent_per_request, 1_300.0);
        assert_eq!(
            (f.fewest_sent_stream_limit, f.fewest_sent_batch_rows),
            (2, 8)
        );
        assert!((f.adaptive_sent_per_needed - 1.4).abs() < 1e-9);
        let t = check_targets(&cells, &[8], &p);
        assert_eq!(
            (t[1].verdict, t[2].verdict),
            (Verdict::Pass, Verdict::Miss),
            "{t:?}"
        );
        let sent = t[2].checks.last().unwrap_or_else(|| panic!("{t:?}"));
        assert!(sent.pass && sent.bound == Bound::AtMost, "{sent:?}");
        assert_eq!(sent.threshold, 1_500.0);
        assert!(
            t[2].detail
                .contains("q=8: adaptive / best fixed (5 × 32) in rows/s = 0.899"),
            "{}",
            t[2].detail
        );
        assert!(
            t[2].markdown_line()
                .starts_with("- (c) fair grid: adaptive ≥ the best fixed"),
            "{}",
            t[2].markdown_line()
        );
        assert!(t[2].markdown_line().contains("**MISS**"));

        // Within noise on rows/s, but sending 1.6× what the query needs.
        let mut runs = synthetic(8, 176_000.0, 178_000.0);
        for r in runs.iter_mut() {
            if r.stream_limit.0 == WindowMode::Adaptive {
                r.rows_sent_per_request = 1_600.0;
            }
        }
        let cells = cells_of(8, &grid(&p, 8), &runs);
        let t = check_targets(&cells, &[8], &p);
        assert_eq!(t[2].verdict, Verdict::Miss, "{t:?}");
        assert!(t[2].checks[0].pass && !t[2].checks[1].pass, "{t:?}");
        // And both within bounds: PASS.
        for r in runs.iter_mut() {
            r.rows_sent_per_request = 1_100.0;
        }
        let cells = cells_of(8, &grid(&p, 8), &runs);
        let t = check_targets(&cells, &[8], &p);
        assert_eq!(t[2].verdict, Verdict::Pass, "{t:?}");
        let fair: Vec<FairComparison> = fair_of(8, &cells, LIMIT_ROWS).into_iter().collect();
        let md = fair_table(&fair);
        assert!(
            md.contains("| 8 | 5 × 32 | 178,000.0 | 176,000.0 | 0.989 |"),
            "{md}"
        );
        // Nothing to compare without adaptive.
        let no_adaptive: Vec<CellReport> = cells
            .iter()
            .filter(|c| c.stream_limit.fixed().is_some())
            .cloned()
            .collect();
        assert!(fair_of(8, &no_adaptive, LIMIT_ROWS).is_none());
    }

    #[test]
    fn the_report_json_keeps_its_shape_and_the_chart_its_lines() {
        let p = small_grid();
        let runs = synthetic(8, 176_000.0, 178_000.0);
        let cells: Vec<CellReport> = cells_of(8, &grid(&p, 8), &runs)
            .into_iter()
            .filter(|c| c.repeats > 0)
            .collect();
        let body = StreamLimitBody {
            cluster: ClusterInfo {
                addr: "127.0.0.1:1".into(),
                started_here: false,
                data_dir: None,
                log: None,
                tls: false,
            },
            parameters: p.clone(),
            loads: vec![],
            fair: fair_of(8, &cells, LIMIT_ROWS).into_iter().collect(),
            targets: check_targets(&cells, &[8], &p),
            cells,
            runs,
        };
        let r = Report::new("stream-limit", "t".into(), true, &[], 12, body);
        let j = serde_json::to_value(&r).unwrap_or_else(|e| panic!("{e}"));
        for key in [
            "scenario",
            "command_line",
            "machine",
            "git_commit",
            "cluster",
            "parameters",
            "loads",
            "cells",
            "fair",
            "targets",
            "runs",
            "runs_total",
        ] {
            assert!(j.get(key).is_some(), "{key}");
        }
        assert_eq!(j["targets"][2]["id"], "c");
        assert_eq!(j["targets"][2]["verdict"], "pass");
        assert!(j["targets"][2]["checks"][0]["measured"].is_number());
        assert!(j["targets"][2]["checks"][0]["threshold"].is_number());
        assert_eq!(j["fair"][0]["best_batch_rows"], 32);
        let back: StreamLimitReport = serde_json::from_value(j).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back, r);
    }
}
