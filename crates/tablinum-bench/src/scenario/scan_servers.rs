//! The Accumulo scan-server report (scan servers with busy timeouts), its
//! four tables reproduced *simulated*: `tablinum-sim` runs the real
//! dispatcher (`tablinum_dispatch::select`) and busy rule in a seeded
//! discrete-event model of the report's setups (193 or 721 closed-loop
//! clients, 12 or 23 scan servers of 16 threads, a tablet server, the
//! report's single probe client), configured like Accumulo 2.1 and with
//! tablinum's default profile.
//!
//! Then, measured ([`measured`]): a small-scale probe experiment on
//! loopback with real processes (a tablet server, scan-server children with
//! few scan threads, a closed loop of large scans on a hot tablet, one probe
//! timing small scans) comparing immediate reads, eventual reads without
//! and with busy shedding, and the default profile; and the simulated grid
//! once more for tablinum's default profile with the per-row costs measured
//! here.
//!
//! Owns `tablinum bench scenario scan-servers`: the grid runs, the report's
//! rows side by side with the simulated ones, the per-table rank
//! correlation that validates the model, the measured rows, every target's
//! verdict, `scenario.json` (one object per row, each saying whether it is
//! simulated or measured) and `scenario.png`. Never labels a simulated
//! figure as measured.

pub mod measured;

use std::path::PathBuf;

use serde::Serialize;
use tablinum_sim::{Calibration, RowResult, Selector};

use crate::chart::{Line, Panel, TimeUnit};
use crate::error::BenchError;
use crate::scenario::framework::child::ChildCommand;
use measured::{MeasuredReport, MeasuredRow, MeasuredShape};

/// `tablinum bench scenario scan-servers`.
#[derive(Debug, Clone, clap::Args)]
pub struct ScanServersArgs {
    /// Output directory (created; must be empty or absent).
    #[arg(long)]
    pub out: PathBuf,
    /// Base seed of the simulation.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Probe scans per scan-server row (tablet-server rows get a quarter;
    /// default 100, 20 with --quick).
    #[arg(long)]
    pub probe_scans: Option<u32>,
    /// 20 probe scans per simulated row, one short measured repeat.
    #[arg(long)]
    pub quick: bool,
    /// Seconds the probe runs in each measured mode (default 20, 4 with
    /// --quick); the warm-up is a quarter of it, at most the default's.
    #[arg(long)]
    pub measured_seconds: Option<f64>,
    /// Closed-loop large-scan clients of the measured run (default 6).
    #[arg(long)]
    pub measured_clients: Option<u32>,
    /// Scan threads of each measured scan server (default 2).
    #[arg(long)]
    pub measured_scan_threads: Option<u32>,
    /// CPU of each measured scan server, thousandths of a core (default 250).
    #[arg(long)]
    pub measured_millicores: Option<u64>,
    /// Dispatcher profiles of the measured run's shedding modes instead of
    /// the built-in ones: a TOML file defining profiles `noshed` and `shed`.
    #[arg(long)]
    pub measured_profiles: Option<PathBuf>,
    /// Only the simulated grids (no cluster is started).
    #[arg(long)]
    pub skip_measured: bool,
}

/// Shortest measured probe run, s.
pub const MEASURED_SECONDS_MIN: f64 = 0.5;
/// Longest measured probe run, s (one hour).
pub const MEASURED_SECONDS_MAX: f64 = 3_600.0;

/// Most large-scan clients of the measured run.
pub const MEASURED_CLIENTS_MAX: u32 = 256;
/// Most scan threads of a measured scan server.
pub const MEASURED_SCAN_THREADS_MAX: u32 = 64;
/// Least and most CPU of a measured scan server, thousandths of a core.
pub const MEASURED_MILLICORES_MIN: u64 = 50;
/// See [`MEASURED_MILLICORES_MIN`].
pub const MEASURED_MILLICORES_MAX: u64 = 64_000;

/// One row of `scenario.json`: simulated or measured (`source` says).
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Row {
    /// A simulated row of the report's grids.
    Simulated(RowResult),
    /// A measured row on this machine.
    Measured(MeasuredRow),
}

/// A simulated target and its verdict.
#[derive(Debug, Clone, Serialize)]
pub struct SimTarget {
    /// Which target.
    pub id: &'static str,
    /// What it asks.
    pub what: &'static str,
    /// The figures it was decided on.
    pub measured: String,
    /// "pass" or "miss".
    pub verdict: &'static str,
}

/// What `scenario.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct ScanServersReport {
    /// "simulated", or "simulated+measured".
    pub source: &'static str,
    /// The command.
    pub command: String,
    /// Seed and probe scans.
    pub seed: u64,
    /// Probe scans per scan-server row.
    pub probe_scans: u32,
    /// The model's parameters (the hand fit to the report).
    pub calibration: Calibration,
    /// The model with this machine's measured per-row costs (selector
    /// `tablinum-default@this-machine`), when measured.
    pub calibration_this_machine: Option<Calibration>,
    /// The measured run: shape, profiles, costs (its rows are in `rows`).
    pub measured: Option<MeasuredSummary>,
    /// One object per (selector, row), simulated then measured.
    pub rows: Vec<Row>,
    /// Rank correlation per selector and table.
    pub correlations: Vec<tablinum_sim::TableCorrelation>,
    /// The targets (simulated and measured).
    pub targets: Vec<SimTarget>,
}

/// The measured run without its rows.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredSummary {
    /// Its shape.
    pub shape: MeasuredShape,
    /// The shedding modes' dispatcher profiles.
    pub profiles_toml: String,
    /// Single-client costs on this machine.
    pub costs: measured::MeasuredCosts,
}

/// The issue's measured target: busy shedding cuts the probe's p99 by at
/// least this factor against eventual reads without shedding.
pub const SHED_P99_CUT_MIN: f64 = 2.0;

/// The measured target's verdict.
fn measured_targets(m: &MeasuredReport) -> Vec<SimTarget> {
    let p99 = |id: &str| -> Vec<f64> {
        m.rows
            .iter()
            .filter(|r| r.id == id)
            .map(|r| r.p99_ms)
            .collect()
    };
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
    let (noshed, shed) = (p99("M-eventual-noshed"), p99("M-eventual-shed"));
    let errors: u64 = m.rows.iter().map(|r| r.errors).sum();
    let ratio = mean(&noshed) / mean(&shed).max(f64::MIN_POSITIVE);
    let worst = noshed
        .iter()
        .zip(&shed)
        .map(|(a, b)| a / b.max(f64::MIN_POSITIVE))
        .fold(f64::INFINITY, f64::min);
    let pass = ratio >= SHED_P99_CUT_MIN && errors == 0 && !shed.is_empty();
    vec![SimTarget {
        id: "measured-shed-p99",
        what: "measured on loopback: busy shedding cuts the probe's p99 by >= 2x against eventual \
               scans without shedding (hot tablet, capacity-limited scan servers), every row right",
        measured: format!(
            "probe p99 noshed {:.1} ms / shed {:.1} ms = {ratio:.2}x (mean of {} repeats; worst repeat \
             {worst:.2}x); failed or wrong scans {errors}",
            mean(&noshed),
            mean(&shed),
            shed.len()
        ),
        verdict: if pass { "pass" } else { "miss" },
    }]
}

/// This machine's calibration: the hand fit with the per-row and per-scan
/// CPU costs measured here (split between read and return, and between
/// request and session, in the hand fit's proportions).
fn calibration_here(base: &Calibration, c: &measured::MeasuredCosts) -> Calibration {
    let per_row = base.entry_read_ns + base.entry_returned_ns;
    let fixed = base.request_cpu_us + base.scan_start_us;
    Calibration {
        entry_read_ns: c.per_row_ns * base.entry_read_ns / per_row,
        entry_returned_ns: c.per_row_ns * base.entry_returned_ns / per_row,
        request_cpu_us: c.fixed_us * base.request_cpu_us / fixed,
        scan_start_us: c.fixed_us * base.scan_start_us / fixed,
        ..base.clone()
    }
}

/// The probe's latency by percentile, per measured mode (mean over
/// repeats).
fn measured_panel(m: &MeasuredReport) -> Panel {
    let mut ids: Vec<&str> = m.rows.iter().map(|r| r.id).collect();
    ids.sort_unstable();
    ids.dedup();
    let lines = ids
        .into_iter()
        .map(|id| {
            let rows: Vec<&MeasuredRow> = m.rows.iter().filter(|r| r.id == id).collect();
            let points = measured::PERCENTILES
                .iter()
                .enumerate()
                .map(|(i, &p)| {
                    let v = rows.iter().map(|r| r.percentiles[i].1).sum::<f64>()
                        / rows.len().max(1) as f64;
                    (p, v)
                })
                .collect();
            Line::new(id, points)
        })
        .collect();
    Panel {
        bands: Vec::new(),
        title: format!(
            "MEASURED probe small scans under {} clients of large scans ({} scan servers x {} threads)",
            m.shape.clients, m.shape.sservers, m.shape.scan_threads
        ),
        x_desc: "percentile".into(),
        y_desc: "probe scan time".into(),
        y_unit: Some(TimeUnit::Millis),
        lines,
    }
}

fn measured_markdown(m: &MeasuredReport) -> String {
    let c = &m.costs;
    let mut md = format!(
        "\n## Measured on this machine (loopback, real processes)\n\n\
         `tablinum up --sservers 0` plus {} `tablinum sserver` processes of {} scan threads, each capped \
         at {} millicores by a CPU cgroup (a small machine of its own); one table of one tablet ({} rows \
         of {} B, flushed); {} clients in a closed loop of large scans ({} rows, batches of {}), and one \
         probe timing small scans ({} rows) for {} s after {} s of load; every row checked. Profiles \
         (profiles.toml): noshed = one first-attempt server, no busy timeout; shed = the same first \
         plan, 5 ms, then any server at 33 ms; default = the built-in profile. The tablet server \
         (immediate) runs uncapped.\n\n\
         Single-client costs on one capped scan server: {:.0} µs per {}-row scan, {:.0} µs per {}-row \
         scan => {:.0} µs fixed + {:.0} ns per row.\n\n\
         | id | repeat | probe scans | avg ms | sd ms | min ms | max ms | p99 ms | busy | fleet scans/s \
         | fleet avg ms | fleet busy/scan | errors |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        m.shape.sservers,
        m.shape.scan_threads,
        m.shape.sserver_millicores,
        m.shape.rows,
        m.shape.value_bytes,
        m.shape.clients,
        m.shape.large_rows,
        m.shape.large_batch_rows,
        m.shape.small_rows,
        m.shape.probe_s,
        m.shape.warmup_s,
        c.small_scan_us,
        m.shape.small_rows,
        c.large_scan_us,
        m.shape.large_rows,
        c.fixed_us,
        c.per_row_ns
    );
    let mut rows: Vec<&MeasuredRow> = m.rows.iter().collect();
    rows.sort_by_key(|r| (r.id, r.repeat));
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} | {} | {:.1} | {:.1} | {:.2} | {} |\n",
            r.id,
            r.repeat,
            r.probe_scans,
            r.avg_ms,
            r.sd_ms,
            r.min_ms,
            r.max_ms,
            r.p99_ms,
            r.busy_events,
            r.fleet_scans_per_s,
            r.fleet_avg_ms,
            r.fleet_busy_per_scan,
            r.errors
        ));
    }
    md
}

fn find<'a>(rows: &'a [RowResult], id: &str, selector: &str) -> Option<&'a RowResult> {
    rows.iter().find(|r| r.id == id && r.selector == selector)
}

/// The simulated targets of the issue, decided on fleet means (the probe is
/// one more identical client; the fleet estimates the same mean from far
/// more scans).
fn targets(rows: &[RowResult]) -> Vec<SimTarget> {
    let mut out = Vec::new();
    if let (Some(ideal), Some(acc), Some(ours)) = (
        find(rows, "D808", "accumulo-2.1"),
        find(rows, "D807", "accumulo-2.1"),
        find(rows, "D807", "tablinum-default"),
    ) {
        let ratio = ours.fleet_avg_ms / ideal.fleet_avg_ms;
        let pass = ratio <= 1.10 && ours.fleet_busy_per_scan <= acc.fleet_busy_per_scan;
        out.push(SimTarget {
            id: "large-near-ideal",
            what: "large scans, 23 servers, <= 3 first-attempt servers: avg within 1.10x of all-23 (D808), \
                   no more busy answers than Accumulo 2.1's setup (D807)",
            measured: format!(
                "tablinum-default {:.1} ms / ideal {:.1} ms = {ratio:.3}x; busy/scan {:.2} vs accumulo-2.1 {:.2}",
                ours.fleet_avg_ms,
                ideal.fleet_avg_ms,
                ours.fleet_busy_per_scan,
                acc.fleet_busy_per_scan
            ),
            verdict: if pass { "pass" } else { "miss" },
        });
    }
    if let (Some(best), Some(ours)) = (
        find(rows, "D830", "accumulo-2.1"),
        find(rows, "D825", "tablinum-default"),
    ) {
        let pass = ours.fleet_avg_ms <= best.fleet_avg_ms * 1.01;
        out.push(SimTarget {
            id: "small-best-shape",
            what: "small scans, <= 3 first-attempt servers: avg <= the report's best shape (D830, all 23), \
                   1 % slack (both storage-bound)",
            measured: format!(
                "tablinum-default on D825's servers {:.2} ms vs D830 shape {:.2} ms",
                ours.fleet_avg_ms, best.fleet_avg_ms
            ),
            verdict: if pass { "pass" } else { "miss" },
        });
    }
    out
}

/// Runs the simulated grids and the measured run, and writes `README.md`,
/// `scenario.json` and `scenario.png`.
pub fn run(args: &ScanServersArgs, child: &ChildCommand) -> Result<ScanServersReport, BenchError> {
    if let Some(s) = args.measured_seconds {
        if !(s.is_finite() && (MEASURED_SECONDS_MIN..=MEASURED_SECONDS_MAX).contains(&s)) {
            return Err(BenchError::Usage {
                arg: "--measured-seconds",
                reason: format!("{s} is outside {MEASURED_SECONDS_MIN}..={MEASURED_SECONDS_MAX} s"),
            });
        }
    }
    if let Some(n) = args.measured_clients {
        if !(1..=MEASURED_CLIENTS_MAX).contains(&n) {
            return Err(BenchError::Usage {
                arg: "--measured-clients",
                reason: format!("{n} is outside 1..={MEASURED_CLIENTS_MAX}"),
            });
        }
    }
    if let Some(n) = args.measured_scan_threads {
        if !(1..=MEASURED_SCAN_THREADS_MAX).contains(&n) {
            return Err(BenchError::Usage {
                arg: "--measured-scan-threads",
                reason: format!("{n} is outside 1..={MEASURED_SCAN_THREADS_MAX}"),
            });
        }
    }
    if let Some(m) = args.measured_millicores {
        if !(MEASURED_MILLICORES_MIN..=MEASURED_MILLICORES_MAX).contains(&m) {
            return Err(BenchError::Usage {
                arg: "--measured-millicores",
                reason: format!(
                    "{m} is outside {MEASURED_MILLICORES_MIN}..={MEASURED_MILLICORES_MAX}"
                ),
            });
        }
    }
    let profiles_toml = match &args.measured_profiles {
        None => measured::PROFILES_TOML.to_string(),
        Some(f) => {
            let text = std::fs::read_to_string(f).map_err(|e| BenchError::io(f, "read", e))?;
            let p =
                tablinum_client::Profiles::from_toml_str(&text).map_err(|e| BenchError::Usage {
                    arg: "--measured-profiles",
                    reason: format!("{}: {e}", f.display()),
                })?;
            for name in ["noshed", "shed"] {
                if p.get(name).is_err() {
                    return Err(BenchError::Usage {
                        arg: "--measured-profiles",
                        reason: format!("{} defines no profile {name:?}", f.display()),
                    });
                }
            }
            text
        }
    };
    crate::scenario::framework::output::claim_out_dir(&args.out)?;
    let probe_scans = args
        .probe_scans
        .unwrap_or(if args.quick { 20 } else { 100 })
        .max(1);
    let mut shape = MeasuredShape::pick(args.quick);
    if let Some(s) = args.measured_seconds {
        shape.warmup_s = shape.warmup_s.min(s / 4.0);
        shape.probe_s = s;
    }
    if let Some(n) = args.measured_clients {
        shape.clients = n;
    }
    if let Some(n) = args.measured_scan_threads {
        shape.scan_threads = n;
    }
    if let Some(m) = args.measured_millicores {
        shape.sserver_millicores = m;
    }
    let calibration = Calibration::default();
    eprintln!(
        "scan-servers: SIMULATED grids, seed {}, {probe_scans} probe scans per row",
        args.seed
    );
    let grid = tablinum_sim::scan_servers_grid(
        &[Selector::Accumulo21, Selector::TablinumDefault],
        &calibration,
        args.seed,
        probe_scans,
    );
    let command = std::env::args().collect::<Vec<_>>().join(" ");
    let mut rows: Vec<Row> = grid.rows.iter().cloned().map(Row::Simulated).collect();
    let mut targets = targets(&grid.rows);
    let mut correlations = grid.correlations.clone();
    let mut measured_run = None;
    let mut calibration_this_machine = None;
    let mut here_table = None;
    if !args.skip_measured {
        let m = measured::run(&child.program, &args.out, &shape, &profiles_toml, args.seed)?;
        let here = calibration_here(&calibration, &m.costs);
        eprintln!("scan-servers: SIMULATED grids once more with this machine's per-row costs");
        let mut g = tablinum_sim::scan_servers_grid(
            &[Selector::TablinumDefault],
            &here,
            args.seed,
            probe_scans,
        );
        for r in &mut g.rows {
            r.selector = format!("{}@this-machine", r.selector);
        }
        for c in &mut g.correlations {
            c.selector = format!("{}@this-machine", c.selector);
        }
        here_table = Some(tablinum_sim::format_grid(&g));
        rows.extend(g.rows.into_iter().map(Row::Simulated));
        correlations.extend(g.correlations);
        rows.extend(m.rows.iter().cloned().map(Row::Measured));
        targets.extend(measured_targets(&m));
        calibration_this_machine = Some(here);
        measured_run = Some(m);
    }
    let report = ScanServersReport {
        source: if measured_run.is_some() {
            "simulated+measured"
        } else {
            "simulated"
        },
        command: command.clone(),
        seed: args.seed,
        probe_scans,
        calibration,
        calibration_this_machine,
        measured: measured_run.as_ref().map(|m| MeasuredSummary {
            shape: m.shape.clone(),
            profiles_toml: m.profiles_toml.clone(),
            costs: m.costs.clone(),
        }),
        targets,
        correlations,
        rows,
    };
    let table = tablinum_sim::format_grid(&grid);
    let mut md = format!(
        "# Scan servers (Accumulo scan-server report) — SIMULATED grids, MEASURED probe run\n\n```sh\n{command}\n```\n\n\
         Every figure below is *simulated* by `tablinum-sim` (the real dispatcher and busy rule in a \
         discrete-event model, calibration in scenario.json); the report's own figures are beside them.\n\n\
         ```\n{table}```\n\n## Rank correlation with the report (avg time)\n\n\
         | selector | table | Spearman (fleet, 1 ms) | Spearman (probe) | rows |\n|---|---|---:|---:|---:|\n"
    );
    for c in &report.correlations {
        md.push_str(&format!(
            "| {} | {} | {:.3} | {:.3} | {} |\n",
            c.selector,
            c.test.as_str(),
            c.spearman_fleet_avg_ms,
            c.spearman_probe_avg,
            c.rows
        ));
    }
    if let Some(t) = &here_table {
        md.push_str(&format!(
            "\n## Simulated with this machine's per-row costs\n\nThe report's grids once more, tablinum's \
             default profile, with the per-row and per-scan CPU costs measured below instead of the hand fit \
             (`calibration_this_machine` in scenario.json; the report's machine shapes and storage tier are \
             kept).\n\n```\n{t}```\n"
        ));
    }
    if let Some(m) = &measured_run {
        md.push_str(&measured_markdown(m));
    }
    md.push_str("\n## Targets\n\n| target | figures | verdict |\n|---|---|---|\n");
    for t in &report.targets {
        md.push_str(&format!(
            "| {} | {} | {} |\n",
            t.id,
            t.measured,
            t.verdict.to_uppercase()
        ));
    }
    print!("{md}");
    let write = |name: &str, text: &str| {
        let p = args.out.join(name);
        std::fs::write(&p, text).map_err(|e| BenchError::io(&p, "write scenario output", e))
    };
    write(crate::scenario::README_MD, &md)?;
    let json = serde_json::to_string_pretty(&report).map_err(|e| BenchError::Usage {
        arg: "--out",
        reason: format!("encoding scenario.json: {e}"),
    })?;
    write(crate::scenario::SCENARIO_JSON, &json)?;
    if let Some(m) = &measured_run {
        let png = args.out.join("scenario.png");
        crate::chart::draw_panels(
            &png,
            "Scan servers: probe latency, measured on loopback",
            &[measured_panel(m)],
        )?;
    }
    Ok(report)
}
