//! The volume scenario's numbers and tables: per-run metrics, per-target
//! statistics over repeats, deltas between targets, and the markdown the
//! volume report prints.
//!
//! Owns the volume `scenario.json` schema below the top level
//! ([`VariantReport`], [`TargetReport`], [`Delta`], [`RunRecord`],
//! [`RunMetrics`]; [`Stat`] and the number formats are the framework's,
//! re-exported here) and the pure functions that build and render them.
//! Everything here is a pure function of run summaries: it must never run,
//! read or write anything, so it can be tested on synthetic summaries.
//!
//! A delta is the report's "TPS Delta": `subject / peer - 1` in percent, where
//! the subject is the first target of the scenario (tablinum by default). With
//! at least two runs per side it carries the 3σ band of [`Ratio`]
//! (`3·√(cv_a² + cv_b²)`) and is significant only beyond it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cgroup::CgroupStats;
use super::framework::stats::{self, Ratio};
use super::framework::RunResult;
use crate::output::RunSummary;
use crate::workload::{Op, Workload};

pub use super::framework::output::{mib, pct, thousands, trim_float};
pub use super::framework::stats::Stat;

/// Below this ratio of data written to the memory limit, a run is flagged: its
/// data may still have fitted in the page cache.
pub const DATA_TO_LIMIT_RATIO_MIN: f64 = 2.0;

/// What one child run measured, taken from its `summary.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMetrics {
    /// Measured seconds.
    pub elapsed_s: f64,
    /// Successful ops/s over the whole run.
    pub ops_per_sec: f64,
    /// Successful ops/s over the last window (the run's tail).
    pub last_window_ops_per_sec: f64,
    /// Length of that window, seconds.
    pub last_window_s: f64,
    /// Whole-run p99 of gets, µs.
    pub get_p99_us: f64,
    /// Whole-run p99 of updates (get then put), µs.
    pub update_p99_us: f64,
    /// Gets that found their key, percent of successful gets (low at first on
    /// an empty store with pareto keys: the report's "Lies, damned lies").
    pub get_found_pct: f64,
    /// Successful updates.
    pub updates: u64,
    /// `updates × value size`, bytes: what the store had to absorb.
    pub data_written_bytes: u64,
    /// Failed operations (all kinds).
    pub failed_ops: u64,
    /// Bytes on disk at the end, when the target reports it.
    pub disk_bytes: Option<u64>,
    /// Bytes the run read from storage during the measured period.
    #[serde(default)]
    pub disk_read_bytes: Option<u64>,
    /// Bytes the run wrote to storage during the measured period.
    #[serde(default)]
    pub disk_write_bytes: Option<u64>,
    /// Successful operations of the run, all kinds.
    #[serde(default)]
    pub ops: u64,
    /// The phases around the run's reclaim window (reclaim variants only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimMetrics>,
}

/// A run's figures before and during its reclaim window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReclaimMetrics {
    /// The window, seconds of the measured period.
    pub window_s: [f64; 2],
    /// The target had a reclamation step to run.
    pub supported: bool,
    /// Successful ops/s in the second half of the time before the window.
    pub before_ops_per_sec: f64,
    /// Successful ops/s in the window.
    pub during_ops_per_sec: f64,
    /// GET p99 before / during, µs.
    pub before_get_p99_us: f64,
    /// See `before_get_p99_us`.
    pub during_get_p99_us: f64,
    /// UPDATE p99 before / during, µs.
    pub before_update_p99_us: f64,
    /// See `before_update_p99_us`.
    pub during_update_p99_us: f64,
    /// Bytes reclaimed per second of the window.
    pub reclaimed_bytes_per_s: f64,
    /// Share of the window a reclamation call was running, percent.
    pub busy_pct: f64,
    /// Reclamation calls that failed.
    pub failed_calls: usize,
}

impl ReclaimMetrics {
    /// The figures of `r`; `None` when a phase has no report interval.
    pub fn of(r: &crate::output::ReclaimSummary) -> Option<ReclaimMetrics> {
        let (before, during) = (r.before.as_ref()?, r.during.as_ref()?);
        let p99 = |p: &crate::output::Phase, op: Op| {
            p.ops
                .get(op.name())
                .map_or(0.0, |o| o.latency_us.p99 as f64)
        };
        let [from, to] = r.window_s;
        Some(ReclaimMetrics {
            window_s: r.window_s,
            supported: r.supported,
            before_ops_per_sec: before.ops_per_sec,
            during_ops_per_sec: during.ops_per_sec,
            before_get_p99_us: p99(before, Op::Get),
            during_get_p99_us: p99(during, Op::Get),
            before_update_p99_us: p99(before, Op::Update),
            during_update_p99_us: p99(during, Op::Update),
            reclaimed_bytes_per_s: r.reclaimed_bytes_per_s,
            busy_pct: r.busy_s * 100.0 / (to - from),
            failed_calls: r.runs.iter().filter(|c| c.error.is_some()).count(),
        })
    }
}

impl RunMetrics {
    /// The metrics of a run summary.
    pub fn from_summary(s: &RunSummary) -> RunMetrics {
        let get = s.ops.get(Op::Get.name());
        let update = s.ops.get(Op::Update.name());
        let p99 = |o: Option<&crate::output::OpSummary>| o.map_or(0.0, |o| o.latency_us.p99 as f64);
        let get_found_pct = match get {
            Some(g) if g.successful > 0 => {
                g.successful.saturating_sub(g.not_found) as f64 * 100.0 / g.successful as f64
            }
            _ => 0.0,
        };
        let updates = update.map_or(0, |u| u.successful);
        RunMetrics {
            elapsed_s: s.elapsed_s,
            ops_per_sec: s.ops_per_sec,
            last_window_ops_per_sec: s.last_window_ops_per_sec,
            last_window_s: s.last_window_s,
            get_p99_us: p99(get),
            update_p99_us: p99(update),
            get_found_pct,
            updates,
            data_written_bytes: updates.saturating_mul(s.workload.value_size_bytes),
            failed_ops: s.failed,
            disk_bytes: s.disk_bytes,
            disk_read_bytes: s.disk_io.map(|d| d.read_bytes),
            disk_write_bytes: s.disk_io.map(|d| d.write_bytes),
            ops: s.successful,
            reclaim: s.reclaim.as_ref().and_then(ReclaimMetrics::of),
        }
    }
}

/// One child run, successful or not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    /// Variant name.
    pub variant: String,
    /// Target name.
    pub target: String,
    /// Repeat, from 1.
    pub repeat: u32,
    /// Position in the whole scenario's run order, from 1.
    pub sequence: usize,
    /// The run's directory, relative to the scenario's `--out`.
    pub dir: String,
    /// Wall-clock seconds of the child process (open, run, close, cleanup).
    pub wall_s: f64,
    /// Why the run failed; `None` when it succeeded.
    pub error: Option<String>,
    /// What it measured (successful runs only).
    pub metrics: Option<RunMetrics>,
    /// What its memory cgroup accounted (runs under a limit only).
    pub memory: Option<CgroupStats>,
}

impl RunResult for RunRecord {
    fn failed(&self) -> bool {
        self.error.is_some()
    }

    fn line(&self) -> String {
        match (&self.error, &self.metrics) {
            (None, Some(m)) => format!(
                "done in {:.1} s: {} ops/s (last {} s: {}), {} written{}",
                self.wall_s,
                thousands(m.ops_per_sec, 1),
                trim_float(m.last_window_s),
                thousands(m.last_window_ops_per_sec, 1),
                mib(m.data_written_bytes as f64),
                self.memory.map_or_else(String::new, |c| format!(
                    ", peak rss {}, peak with page cache {}",
                    mib(c.max_rss_bytes as f64),
                    mib(c.max_usage_bytes as f64)
                )),
            ),
            (e, _) => format!(
                "FAILED after {:.1} s: {}",
                self.wall_s,
                e.as_deref().unwrap_or("unknown error")
            ),
        }
    }
}

/// One target within one variant: statistics over its successful repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetReport {
    /// Successful runs.
    pub runs_ok: usize,
    /// Failed runs.
    pub runs_failed: usize,
    /// Successful ops/s over the whole run.
    pub ops_per_sec: Stat,
    /// Successful ops/s over the last window.
    pub last_window_ops_per_sec: Stat,
    /// Length of the last window, seconds.
    pub last_window_s: Stat,
    /// p99 of gets, µs (mean of the per-run p99s).
    pub get_p99_us: Stat,
    /// p99 of updates, µs (mean of the per-run p99s).
    pub update_p99_us: Stat,
    /// Gets that found their key, percent.
    pub get_found_pct: Stat,
    /// Value bytes written by updates.
    pub data_written_bytes: Stat,
    /// Peak memory charged to the run's cgroup (anonymous + page cache), bytes
    /// (runs under a limit).
    pub max_memory_bytes: Option<Stat>,
    /// Peak anonymous memory of the run (sampled), bytes (runs under a limit):
    /// the store's own memory; the rest of the limit was its page cache.
    pub max_rss_bytes: Option<Stat>,
    /// Write amplification: bytes written to storage ÷ value bytes written
    /// by updates (runs where the process's I/O was accounted).
    #[serde(default)]
    pub write_amp: Option<Stat>,
    /// Bytes read from storage per successful operation.
    #[serde(default)]
    pub read_bytes_per_op: Option<Stat>,
    /// Before and during the reclaim window (reclaim variants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<ReclaimStats>,
    /// Every run of this target, in run order.
    pub runs: Vec<RunRecord>,
}

/// [`ReclaimMetrics`] over a target's repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReclaimStats {
    /// The target had a reclamation step to run (in every run).
    pub supported: bool,
    /// Ops/s before the window.
    pub before_ops_per_sec: Stat,
    /// Ops/s in the window.
    pub during_ops_per_sec: Stat,
    /// GET p99 before, µs.
    pub before_get_p99_us: Stat,
    /// GET p99 during, µs.
    pub during_get_p99_us: Stat,
    /// UPDATE p99 before, µs.
    pub before_update_p99_us: Stat,
    /// UPDATE p99 during, µs.
    pub during_update_p99_us: Stat,
    /// Bytes reclaimed per second of the window.
    pub reclaimed_bytes_per_s: Stat,
    /// Share of the window reclamation was running, percent.
    pub busy_pct: Stat,
    /// Failed reclamation calls, all runs.
    pub failed_calls: usize,
}

impl ReclaimStats {
    fn of(ok: &[&RunMetrics]) -> Option<ReclaimStats> {
        let m: Vec<&ReclaimMetrics> = ok.iter().filter_map(|m| m.reclaim.as_ref()).collect();
        if m.is_empty() {
            return None;
        }
        let stat = |f: fn(&ReclaimMetrics) -> f64| Stat::of(m.iter().map(|r| f(r)).collect());
        Some(ReclaimStats {
            supported: m.iter().all(|r| r.supported),
            before_ops_per_sec: stat(|r| r.before_ops_per_sec),
            during_ops_per_sec: stat(|r| r.during_ops_per_sec),
            before_get_p99_us: stat(|r| r.before_get_p99_us),
            during_get_p99_us: stat(|r| r.during_get_p99_us),
            before_update_p99_us: stat(|r| r.before_update_p99_us),
            during_update_p99_us: stat(|r| r.during_update_p99_us),
            reclaimed_bytes_per_s: stat(|r| r.reclaimed_bytes_per_s),
            busy_pct: stat(|r| r.busy_pct),
            failed_calls: m.iter().map(|r| r.failed_calls).sum(),
        })
    }
}

impl TargetReport {
    /// Statistics of `runs` (all of one variant and target).
    pub fn of(runs: Vec<RunRecord>) -> TargetReport {
        let ok: Vec<&RunMetrics> = runs.iter().filter_map(|r| r.metrics.as_ref()).collect();
        let stat = |f: &dyn Fn(&RunMetrics) -> f64| Stat::of(ok.iter().map(|m| f(m)).collect());
        let memory = |f: fn(&CgroupStats) -> u64| -> Option<Stat> {
            let v: Vec<f64> = runs
                .iter()
                .filter(|r| r.metrics.is_some())
                .filter_map(|r| r.memory.as_ref().map(|m| f(m) as f64))
                .collect();
            (!v.is_empty()).then(|| Stat::of(v))
        };
        TargetReport {
            runs_ok: ok.len(),
            runs_failed: runs.len() - ok.len(),
            ops_per_sec: stat(&|m| m.ops_per_sec),
            last_window_ops_per_sec: stat(&|m| m.last_window_ops_per_sec),
            last_window_s: stat(&|m| m.last_window_s),
            get_p99_us: stat(&|m| m.get_p99_us),
            update_p99_us: stat(&|m| m.update_p99_us),
            get_found_pct: stat(&|m| m.get_found_pct),
            data_written_bytes: stat(&|m| m.data_written_bytes as f64),
            max_memory_bytes: memory(|m| m.max_usage_bytes),
            max_rss_bytes: memory(|m| m.max_rss_bytes),
            write_amp: io_stat(&ok, |m| {
                (m.data_written_bytes > 0)
                    .then(|| {
                        m.disk_write_bytes
                            .map(|w| w as f64 / m.data_written_bytes as f64)
                    })
                    .flatten()
            }),
            read_bytes_per_op: io_stat(&ok, |m| {
                (m.ops > 0)
                    .then(|| m.disk_read_bytes.map(|r| r as f64 / m.ops as f64))
                    .flatten()
            }),
            reclaim: ReclaimStats::of(&ok),
            runs,
        }
    }
}

/// The report's "TPS Delta" of the subject against one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delta {
    /// The target the deltas are about (the scenario's first target).
    pub subject: String,
    /// The target it is compared with.
    pub peer: String,
    /// `subject / peer − 1` of whole-run ops/s, percent (`None` without runs on both sides).
    pub overall_pct: Option<f64>,
    /// The same over the last window.
    pub last_window_pct: Option<f64>,
    /// 3σ band of the overall ratio, percent (at least two runs on both sides).
    pub overall_three_sigma_pct: Option<f64>,
    /// 3σ band of the last-window ratio, percent.
    pub last_window_three_sigma_pct: Option<f64>,
    /// |overall delta| beyond its 3σ band.
    pub overall_significant: Option<bool>,
    /// |last-window delta| beyond its 3σ band.
    pub last_window_significant: Option<bool>,
}

impl Delta {
    /// `subject` against `peer`.
    pub fn of(subject: (&str, &TargetReport), peer: (&str, &TargetReport)) -> Delta {
        let ratio = |s: &Stat, p: &Stat| -> Option<Ratio> {
            (p.mean > 0.0)
                .then(|| stats::ratio(&p.sample(), &s.sample()))
                .flatten()
        };
        let overall = ratio(&subject.1.ops_per_sec, &peer.1.ops_per_sec);
        let last = ratio(
            &subject.1.last_window_ops_per_sec,
            &peer.1.last_window_ops_per_sec,
        );
        Delta {
            subject: subject.0.to_string(),
            peer: peer.0.to_string(),
            overall_pct: overall.map(|r| (r.ratio - 1.0) * 100.0),
            last_window_pct: last.map(|r| (r.ratio - 1.0) * 100.0),
            overall_three_sigma_pct: overall.and_then(|r| r.three_sigma_pct),
            last_window_three_sigma_pct: last.and_then(|r| r.three_sigma_pct),
            overall_significant: overall.and_then(|r| r.significant),
            last_window_significant: last.and_then(|r| r.significant),
        }
    }

    /// `tablinum vs rocksdb: +35.2% / +40.1%`, with the 3σ bands when known.
    pub fn line(&self) -> String {
        let mut s = format!(
            "{} vs {}: {} / {}",
            self.subject,
            self.peer,
            pct(self.overall_pct),
            pct(self.last_window_pct)
        );
        if let (Some(a), Some(b)) = (
            self.overall_three_sigma_pct,
            self.last_window_three_sigma_pct,
        ) {
            let word = |sig: Option<bool>| match sig {
                Some(true) => "significant",
                _ => "within noise",
            };
            s.push_str(&format!(
                " (3σ {a:.1}% / {b:.1}%: {} / {})",
                word(self.overall_significant),
                word(self.last_window_significant)
            ));
        }
        s
    }
}

/// One variant of a scenario (e.g. 8 KB values, sync) with every target's results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantReport {
    /// Short name (`8k-sync`), also its directory under `--out`.
    pub name: String,
    /// The report's test description (`8KB value, 16 workers, sync`).
    pub description: String,
    /// Value size, bytes.
    pub value_size_bytes: u64,
    /// fsync on every write.
    pub sync: bool,
    /// The workload every target ran (seed of repeat 1; repeat `r` uses `seed + r − 1`).
    pub workload: Workload,
    /// The first target: the deltas are about it.
    pub subject: Option<String>,
    /// Per target, by name.
    pub targets: BTreeMap<String, TargetReport>,
    /// The subject against every other target, in target order.
    pub deltas: Vec<Delta>,
    /// Things the reader must know (failed runs, data that may have fitted in cache).
    pub notes: Vec<String>,
}

impl VariantReport {
    /// Builds the report of one variant from its runs; `order` is the
    /// scenario's target order (the first is the subject).
    pub fn build(
        name: &str,
        description: &str,
        workload: &Workload,
        sync: bool,
        order: &[String],
        runs: &[RunRecord],
        memory_limit_bytes: Option<u64>,
    ) -> VariantReport {
        let mut targets = BTreeMap::new();
        for t in order {
            let mine: Vec<RunRecord> = runs.iter().filter(|r| &r.target == t).cloned().collect();
            targets.insert(t.clone(), TargetReport::of(mine));
        }
        let subject = order.first().cloned();
        let deltas = match subject
            .as_ref()
            .and_then(|s| targets.get(s).map(|r| (s, r)))
        {
            Some((s, sr)) => order[1..]
                .iter()
                .filter_map(|p| targets.get(p).map(|pr| Delta::of((s, sr), (p, pr))))
                .collect(),
            None => Vec::new(),
        };
        let mut notes = Vec::new();
        for r in runs {
            if let Some(e) = &r.error {
                notes.push(format!("{}: FAILED: {e}", r.dir));
            }
        }
        if let Some(limit) = memory_limit_bytes.filter(|&l| l > 0) {
            for t in order {
                if let Some(tr) = targets.get(t).filter(|tr| tr.runs_ok > 0) {
                    // Preloaded values count: they are on disk before the run.
                    let preloaded = workload.preload_keys as f64 * workload.value_size_bytes as f64;
                    let ratio = (tr.data_written_bytes.mean + preloaded) / limit as f64;
                    if ratio < DATA_TO_LIMIT_RATIO_MIN {
                        notes.push(format!(
                            "{t}: wrote {} of values{}, only {ratio:.1}× the {} memory limit: \
                             its data may still fit in the page cache (run longer)",
                            mib(tr.data_written_bytes.mean),
                            if preloaded > 0.0 {
                                format!(" after {} preloaded", mib(preloaded))
                            } else {
                                String::new()
                            },
                            mib(limit as f64)
                        ));
                    }
                }
            }
        }
        VariantReport {
            name: name.to_string(),
            description: description.to_string(),
            value_size_bytes: workload.value_size_bytes,
            sync,
            workload: workload.clone(),
            subject,
            targets,
            deltas,
            notes,
        }
    }

    /// The variant's markdown section: the per-target table, then one delta
    /// line per peer (`tablinum vs rocksdb: +35.2% / +40.1%`), then the notes.
    pub fn table(&self, order: &[String], memory_limit_bytes: Option<u64>) -> String {
        let window = order
            .iter()
            .filter_map(|t| self.targets.get(t))
            .find(|t| t.runs_ok > 0)
            .map_or_else(
                || "last window".to_string(),
                |t| format!("last {} s", trim_float(t.last_window_s.mean)),
            );
        let mut s = format!(
            "### {} — {}\n\n| target | runs | avg ops/s | ± sd | {window} ops/s | get p99 µs | update p99 µs | gets found | written{} | peak rss | disk writes ÷ data | disk reads/op |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            self.name,
            self.description,
            if memory_limit_bytes.is_some() { " (× limit)" } else { "" },
        );
        for t in order {
            let Some(r) = self.targets.get(t) else {
                continue;
            };
            let runs = if r.runs_failed > 0 {
                format!("{} (+{} failed)", r.runs_ok, r.runs_failed)
            } else {
                r.runs_ok.to_string()
            };
            if r.runs_ok == 0 {
                s.push_str(&format!(
                    "| {t} | {runs} | – | – | – | – | – | – | – | – | – | – |\n"
                ));
                continue;
            }
            let sd = if r.ops_per_sec.values.len() > 1 {
                thousands(r.ops_per_sec.sd, 1)
            } else {
                "–".to_string()
            };
            let written = match memory_limit_bytes.filter(|&l| l > 0) {
                Some(l) => format!(
                    "{} ({:.1}×)",
                    mib(r.data_written_bytes.mean),
                    r.data_written_bytes.mean / l as f64
                ),
                None => mib(r.data_written_bytes.mean),
            };
            s.push_str(&format!(
                "| {t} | {runs} | {} | {sd} | {} | {} | {} | {:.1}% | {written} | {} | {} | {} |\n",
                thousands(r.ops_per_sec.mean, 1),
                thousands(r.last_window_ops_per_sec.mean, 1),
                thousands(r.get_p99_us.mean, 0),
                thousands(r.update_p99_us.mean, 0),
                r.get_found_pct.mean,
                r.max_rss_bytes
                    .as_ref()
                    .map_or_else(|| "–".to_string(), |m| mib(m.mean)),
                r.write_amp
                    .as_ref()
                    .map_or_else(|| "–".to_string(), |w| format!("{:.2}×", w.mean)),
                r.read_bytes_per_op.as_ref().map_or_else(
                    || "–".to_string(),
                    |b| format!("{:.1} KiB", b.mean / 1024.0)
                ),
            ));
        }
        if !self.deltas.is_empty() {
            s.push_str(&format!(
                "\nTPS delta (overall / {window}), `subject / peer − 1`:\n\n"
            ));
            for d in &self.deltas {
                s.push_str(&format!("- {}\n", d.line()));
            }
        }
        s.push_str(&self.reclaim_table(order));
        for n in &self.notes {
            s.push_str(&format!("\n> **note** {n}\n"));
        }
        s
    }

    /// Before and during the reclaim window, per target, and the subject in
    /// the window against every peer in the same seconds of its own run
    /// (empty for variants without a window).
    pub fn reclaim_table(&self, order: &[String]) -> String {
        let Some([from, to]) = self.workload.reclaim_window_s else {
            return String::new();
        };
        let mut s = format!(
            "\nReclamation window {}–{} s against the second half of the time before it \
             ({}–{} s), same store:\n\n| target | reclaims | ops/s before | ops/s during | \
             during ÷ before | get p99 µs before / during | update p99 µs before / during | \
             reclaimed | busy |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n",
            trim_float(from),
            trim_float(to),
            trim_float(from / 2.0),
            trim_float(from),
        );
        let during = |t: &str| {
            self.targets
                .get(t)
                .and_then(|r| r.reclaim.as_ref())
                .map(|r| r.during_ops_per_sec.mean)
        };
        for t in order {
            let Some(r) = self.targets.get(t).and_then(|r| r.reclaim.as_ref()) else {
                continue;
            };
            let ratio = if r.before_ops_per_sec.mean > 0.0 {
                format!(
                    "{:.2}×",
                    r.during_ops_per_sec.mean / r.before_ops_per_sec.mean
                )
            } else {
                "–".into()
            };
            let (reclaimed, busy) = if r.supported {
                (
                    format!("{}/s", mib(r.reclaimed_bytes_per_s.mean)),
                    format!("{:.0}%", r.busy_pct.mean),
                )
            } else {
                ("–".into(), "–".into())
            };
            s.push_str(&format!(
                "| {t} | {} | {} | {} | {ratio} | {} / {} | {} / {} | {reclaimed} | {busy} |\n",
                if r.supported {
                    if r.failed_calls > 0 {
                        format!("yes ({} failed)", r.failed_calls)
                    } else {
                        "yes".into()
                    }
                } else {
                    "its own (not asked)".into()
                },
                thousands(r.before_ops_per_sec.mean, 1),
                thousands(r.during_ops_per_sec.mean, 1),
                thousands(r.before_get_p99_us.mean, 0),
                thousands(r.during_get_p99_us.mean, 0),
                thousands(r.before_update_p99_us.mean, 0),
                thousands(r.during_update_p99_us.mean, 0),
            ));
        }
        if let Some((subject, Some(ours))) = order.first().map(|t| (t, during(t))) {
            let peers: Vec<String> = order[1..]
                .iter()
                .filter_map(|p| {
                    during(p)
                        .filter(|&v| v > 0.0)
                        .map(|v| format!("{:.2}× {p}", ours / v))
                })
                .collect();
            if !peers.is_empty() {
                s.push_str(&format!(
                    "\n{subject} in the window against each peer in the same seconds of its run: {}\n",
                    peers.join(", ")
                ));
            }
        }
        s
    }
}

/// A statistic over the runs that have it; `None` when none has.
fn io_stat(ok: &[&RunMetrics], f: impl Fn(&RunMetrics) -> Option<f64>) -> Option<Stat> {
    let v: Vec<f64> = ok.iter().filter_map(|m| f(m)).collect();
    (!v.is_empty()).then(|| Stat::of(v))
}

/// The volume report's summary table over all variants:
/// `Test Description | vs | Avg TPS | TPS Delta (Overall) | TPS Delta (Last window)`,
/// Avg TPS being the subject's; deltas beyond 3σ in bold.
pub fn report_table(variants: &[VariantReport]) -> String {
    let subject = variants
        .iter()
        .find_map(|v| v.subject.clone())
        .unwrap_or_else(|| "subject".to_string());
    let mut s = format!(
        "| Test Description | vs | Avg TPS ({subject}) | TPS Delta (Overall) | TPS Delta (Last window) |\n|:---|:---|---:|---:|---:|\n"
    );
    for v in variants {
        let avg = v
            .subject
            .as_ref()
            .and_then(|s| v.targets.get(s))
            .filter(|t| t.runs_ok > 0)
            .map_or_else(|| "–".to_string(), |t| thousands(t.ops_per_sec.mean, 2));
        if v.deltas.is_empty() {
            s.push_str(&format!("| {} | – | {avg} | – | – |\n", v.description));
        }
        for d in &v.deltas {
            let cell = |p: Option<f64>, sig: Option<bool>| {
                if sig == Some(true) {
                    format!("**{}**", pct(p))
                } else {
                    pct(p)
                }
            };
            s.push_str(&format!(
                "| {} | {} | {avg} | {} | {} |\n",
                v.description,
                d.peer,
                cell(d.overall_pct, d.overall_significant),
                cell(d.last_window_pct, d.last_window_significant)
            ));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::OpSummary;
    use crate::stats::Percentiles;
    use crate::workload::Operations;

    fn workload(value_size_bytes: u64) -> Workload {
        Workload {
            value_size_bytes,
            operations: Operations {
                get: 5,
                update: 1,
                ..Operations::default()
            },
            ..Workload::default()
        }
    }

    fn op(successful: u64, not_found: u64, p99: u64) -> OpSummary {
        OpSummary {
            total: successful,
            successful,
            failed: 0,
            not_found,
            ops_per_sec: 0.0,
            latency_us: Percentiles {
                p99,
                ..Percentiles::default()
            },
            service_time_us: None,
            found_latency_us: None,
            not_found_latency_us: None,
        }
    }

    /// A synthetic `summary.json` of a run.
    fn summary(target: &str, ops_per_sec: f64, last: f64, gets: u64, updates: u64) -> RunSummary {
        RunSummary {
            workload: workload(8192),
            target: target.into(),
            seed: 1,
            started_at: "2026-11-21T00:00:00Z".into(),
            elapsed_s: 20.0,
            intervals: 20,
            preload: None,
            ops: [
                ("get".to_string(), op(gets, gets / 4, 800)),
                ("update".to_string(), op(updates, 0, 2300)),
            ]
            .into_iter()
            .collect(),
            total: gets + updates,
            successful: gets + updates,
            failed: 0,
            not_found: gets / 4,
            ops_per_sec,
            last_window_ops_per_sec: last,
            last_window_s: 2.0,
            disk_bytes: None,
            disk_io: None,
            reclaim: None,
            chart_error: None,
            store_counters: BTreeMap::new(),
        }
    }

    fn record(target: &str, repeat: u32, s: Option<&RunSummary>) -> RunRecord {
        RunRecord {
            variant: "8k-sync".into(),
            target: target.into(),
            repeat,
            sequence: 1,
            dir: format!("8k-sync/{target}-r{repeat}"),
            wall_s: 21.0,
            error: s.is_none().then(|| "killed by signal 9 (OOM)".to_string()),
            metrics: s.map(RunMetrics::from_summary),
            memory: Some(CgroupStats {
                limit_bytes: 256 << 20,
                max_usage_bytes: 256 << 20,
                max_rss_bytes: 250 << 20,
                limit_hits: 10,
                oom_kills: 0,
            }),
        }
    }

    fn order() -> Vec<String> {
        vec!["tablinum".into(), "rocksdb".into(), "fjall".into()]
    }

    fn phase(ops_per_sec: f64, get_p99: u64) -> crate::output::Phase {
        crate::output::Phase {
            from_s: 0.0,
            to_s: 1.0,
            ops_per_sec,
            ops: [
                ("get".to_string(), op(10, 0, get_p99)),
                ("update".to_string(), op(2, 0, get_p99 * 2)),
            ]
            .into_iter()
            .collect(),
        }
    }

    #[test]
    fn the_reclaim_table_compares_phases_and_peers_in_the_same_seconds() {
        let with = |target: &str, supported: bool, before: f64, during: f64| {
            let mut s = summary(target, 1000.0, 900.0, 400, 100);
            s.workload.reclaim_window_s = Some([10.0, 20.0]);
            let runs = if supported {
                vec![crate::output::ReclaimRun {
                    start_s: 10.0,
                    end_s: 15.0,
                    bytes_before: 300 << 20,
                    bytes_after: 100 << 20,
                    error: None,
                }]
            } else {
                Vec::new()
            };
            s.reclaim = Some(crate::output::ReclaimSummary::of(
                [10.0, 20.0],
                supported,
                runs,
                Some(phase(before, 500)),
                Some(phase(during, 700)),
            ));
            s
        };
        let (a, b) = (
            with("tablinum", true, 1000.0, 900.0),
            with("rocksdb", false, 400.0, 450.0),
        );
        let m = RunMetrics::from_summary(&a);
        let r = m.reclaim.unwrap_or_else(|| panic!("no reclaim metrics"));
        assert_eq!(r.busy_pct, 50.0);
        assert_eq!(r.reclaimed_bytes_per_s, (20 << 20) as f64);
        assert_eq!((r.before_get_p99_us, r.during_get_p99_us), (500.0, 700.0));
        let runs = [
            record("tablinum", 1, Some(&a)),
            record("rocksdb", 1, Some(&b)),
        ];
        let order = vec!["tablinum".to_string(), "rocksdb".to_string()];
        let v = VariantReport::build("8k-gc", "d", &a.workload, false, &order, &runs, None);
        let t = v.table(&order, None);
        assert!(t.contains("Reclamation window 10–20 s"), "{t}");
        assert!(
            t.contains("| tablinum | yes | 1,000.0 | 900.0 | 0.90× | 500 / 700 | 1,000 / 1,400 | 20.0 MiB/s | 50% |"),
            "{t}"
        );
        assert!(t.contains("| rocksdb | its own (not asked) |"), "{t}");
        assert!(t.contains("tablinum in the window against each peer in the same seconds of its run: 2.00× rocksdb"), "{t}");
        // A variant without a window has no such section.
        let plain = VariantReport::build("8k", "d", &workload(8192), false, &order, &[], None);
        assert!(plain.reclaim_table(&order).is_empty());
    }

    #[test]
    fn metrics_come_from_the_summary() {
        let m = RunMetrics::from_summary(&summary("tablinum", 1000.0, 900.0, 400, 100));
        assert_eq!(m.get_p99_us, 800.0);
        assert_eq!(m.update_p99_us, 2300.0);
        assert_eq!(m.get_found_pct, 75.0);
        assert_eq!(m.updates, 100);
        assert_eq!(m.data_written_bytes, 100 * 8192);
    }

    #[test]
    fn deltas_are_subject_over_peer_with_three_sigma_only_for_repeats() {
        let runs = vec![
            record(
                "tablinum",
                1,
                Some(&summary("tablinum", 1352.0, 1401.0, 4000, 800)),
            ),
            record(
                "rocksdb",
                1,
                Some(&summary("rocksdb", 1000.0, 1000.0, 4000, 800)),
            ),
            record("fjall", 1, None),
        ];
        let v = VariantReport::build(
            "8k-sync",
            "8KB value, 16 workers, sync",
            &workload(8192),
            true,
            &order(),
            &runs,
            Some(256 << 20),
        );
        assert_eq!(v.subject.as_deref(), Some("tablinum"));
        assert_eq!(v.deltas.len(), 2);
        let d = &v.deltas[0];
        assert_eq!(d.peer, "rocksdb");
        assert!((d.overall_pct.unwrap_or(0.0) - 35.2).abs() < 1e-9, "{d:?}");
        assert!(
            (d.last_window_pct.unwrap_or(0.0) - 40.1).abs() < 1e-9,
            "{d:?}"
        );
        assert_eq!(d.overall_three_sigma_pct, None);
        assert_eq!(d.line(), "tablinum vs rocksdb: +35.2% / +40.1%");
        // A peer without a successful run has no delta.
        assert_eq!(v.deltas[1].overall_pct, None);
        assert_eq!(v.deltas[1].line(), "tablinum vs fjall: n/a / n/a");
        let fjall = &v.targets["fjall"];
        assert_eq!((fjall.runs_ok, fjall.runs_failed), (0, 1));
        // Notes: the failure, and data far below 2x the limit (800 x 8 KiB).
        assert!(
            v.notes.iter().any(|n| n.contains("FAILED")),
            "{:?}",
            v.notes
        );
        assert!(
            v.notes.iter().any(|n| n.contains("page cache")),
            "{:?}",
            v.notes
        );

        let table = v.table(&order(), Some(256 << 20));
        assert!(
            table.starts_with("### 8k-sync — 8KB value, 16 workers, sync\n"),
            "{table}"
        );
        assert!(table.contains("| last 2 s ops/s |"), "{table}");
        assert!(
            table.contains("| tablinum | 1 | 1,352.0 | – | 1,401.0 | 800 | 2,300 | 75.0% | 6.2 MiB (0.0×) | 250.0 MiB |"),
            "{table}"
        );
        assert!(table.contains("| fjall | 0 (+1 failed) | – |"), "{table}");
        assert!(
            table.contains("- tablinum vs rocksdb: +35.2% / +40.1%\n"),
            "{table}"
        );

        let report = report_table(std::slice::from_ref(&v));
        assert!(report.contains("Avg TPS (tablinum)"), "{report}");
        assert!(
            report
                .contains("| 8KB value, 16 workers, sync | rocksdb | 1,352.00 | +35.2% | +40.1% |"),
            "{report}"
        );
    }

    #[test]
    fn repeats_give_mean_sd_values_and_significance() {
        let t = |r, ops, last| record("tablinum", r, Some(&summary("tablinum", ops, last, 10, 10)));
        let p = |r, ops, last| record("rocksdb", r, Some(&summary("rocksdb", ops, last, 10, 10)));
        let runs = vec![
            t(1, 1500.0, 1500.0),
            p(1, 1000.0, 1000.0),
            p(2, 1010.0, 1300.0),
            t(2, 1510.0, 1000.0),
            t(3, 1490.0, 1400.0),
            p(3, 990.0, 1100.0),
        ];
        let order = vec!["tablinum".to_string(), "rocksdb".to_string()];
        let v = VariantReport::build("x", "x", &workload(4096), false, &order, &runs, None);
        let tab = &v.targets["tablinum"];
        assert_eq!(tab.ops_per_sec.values, vec![1500.0, 1510.0, 1490.0]);
        assert!((tab.ops_per_sec.mean - 1500.0).abs() < 1e-9);
        assert!((tab.ops_per_sec.sd - 10.0).abs() < 1e-9);
        let d = &v.deltas[0];
        assert!((d.overall_pct.unwrap_or(0.0) - 50.0).abs() < 1e-9);
        assert_eq!(d.overall_significant, Some(true));
        // Noisy tails: +14.7% but far inside 3σ.
        assert_eq!(d.last_window_significant, Some(false));
        assert!(
            d.line().contains("significant / within noise"),
            "{}",
            d.line()
        );
        assert!(v.notes.is_empty(), "{:?}", v.notes);
        let report = report_table(&[v]);
        assert!(report.contains("| **+50.0%** | +14.7% |"), "{report}");
    }
}
