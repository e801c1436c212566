//! The runner: drives a [`Target`] with a [`Workload`] and writes the results.
//!
//! Owns the worker threads (one `std::thread::scope`, one seeded RNG per worker,
//! each stopping by itself at the deadline or the op budget), the open-loop
//! schedule of `rate` mode (op `i` of worker `w` is intended at
//! `t0 + (w / concurrent + i) * concurrent / rate`; latency is measured from that
//! intended time, so a stalled target is charged for every op it delayed, and
//! service time is recorded beside it), the preload phase, the reclaim
//! window's caller (one thread asking the target to reclaim, back to back,
//! inside `reclaim_window_s`; its panic is reported as that of worker
//! `concurrent`) and the phases before and in that window, and the reporter
//! (main thread) that merges per-worker histograms every `report_interval_s`,
//! reads the target's own counters at the same moments, writes CSV rows and
//! status lines, and finally `summary.json` and the chart.
//!
//! It must never open, close or reach inside a target (the caller owns it), and
//! never stop a run on a per-op target error: those are counted as `failed`.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use crate::chart;
use crate::error::BenchError;
use crate::generators::{worker_rng, KeySource, OpChooser, ValueSource};
use crate::output::{
    self, CsvWriter, OpSummary, Phase, PreloadSummary, ReclaimRun, ReclaimSummary, RunSummary,
    StoreCounters,
};
use crate::progress::{status_line, Progress};
use crate::stats::{self, Interval, Outcome, Percentiles, Recorder};
use crate::target::{Reclaimed, Target, TargetError};
use crate::workload::{Mode, Op, Workload};

/// How often the reporter wakes to redraw the progress bar, milliseconds.
pub const PROGRESS_TICK_MS: u64 = 100;
/// Longest single sleep of a rate-mode worker waiting for its next op, milliseconds
/// (it re-checks the stop flag in between).
pub const RATE_SLEEP_MS_MAX: u64 = 50;

/// A reclaim window's caller waits this long after a call that found
/// nothing worth reclaiming before asking again, milliseconds.
pub const RECLAIM_IDLE_MS: u64 = 2_000;

/// How to run, beyond the workload.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Progress bar (terminal only) and per-interval status lines on stderr.
    pub progress: bool,
    /// Draw `summary.png` at the end.
    pub chart: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            progress: true,
            chart: true,
        }
    }
}

/// Runs `workload` against `target`, writing results into `out_dir` (created if
/// missing). The target is neither opened nor closed here.
pub fn run(
    workload: &Workload,
    target: &dyn Target,
    out_dir: &Path,
    progress: bool,
) -> Result<RunSummary, BenchError> {
    run_with_options(
        workload,
        target,
        out_dir,
        &RunOptions {
            progress,
            ..RunOptions::default()
        },
    )
}

/// Everything the workers share.
struct Shared<'a> {
    workload: &'a Workload,
    target: &'a dyn Target,
    seed: u64,
    keys: KeySource,
    values: ValueSource,
    chooser: OpChooser,
    t0: Instant,
    deadline: Option<Instant>,
    /// Seconds between a worker's consecutive intended starts (rate mode).
    period_s: Option<f64>,
    op_budget: Option<u64>,
    issued: AtomicU64,
    stop: AtomicBool,
    recorders: Vec<Mutex<Recorder>>,
}

fn lock(m: &Mutex<Recorder>) -> MutexGuard<'_, Recorder> {
    // A worker that panicked while recording leaves counts that are still usable.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Runs `workload` against `target` with explicit options. See [`run`].
pub fn run_with_options(
    workload: &Workload,
    target: &dyn Target,
    out_dir: &Path,
    options: &RunOptions,
) -> Result<RunSummary, BenchError> {
    workload.validate(&Workload::in_memory_path())?;
    std::fs::create_dir_all(out_dir)
        .map_err(|e| BenchError::io(out_dir, "create output directory", e))?;
    let seed = workload.seed.unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
    });
    let mut workload = workload.clone();
    workload.seed = Some(seed);
    let workload = &workload;
    std::fs::write(out_dir.join("workload.toml"), workload.to_toml_string())
        .map_err(|e| BenchError::io(out_dir.join("workload.toml"), "write", e))?;

    let keys = KeySource::new(workload);
    let values = ValueSource::new(workload, seed);
    let concurrent = workload.concurrent as usize;

    let preload = if workload.preload_keys > 0 {
        Some(preload(
            workload,
            target,
            &keys,
            &values,
            seed,
            options.progress,
        )?)
    } else {
        if options.progress && workload.operations.get + workload.operations.head > 0 {
            eprintln!(
                "note: no preload_keys: reads start on an empty store and will mostly be not_found"
            );
        }
        None
    };

    let ops = workload.operations.enabled();
    let mut csv = CsvWriter::create(out_dir, &ops)?;
    let mut counters = StoreCounters::start(out_dir, &target.counters());
    let started_at = output::rfc3339_utc(SystemTime::now());
    let io_before = output::DiskIo::of_this_process();
    let t0 = Instant::now();
    let deadline = workload.duration_s.map(|d| t0 + Duration::from_secs_f64(d));
    let period_s = match workload.mode {
        Mode::Max => None,
        Mode::Rate => workload
            .rate_ops_per_s
            .map(|r| workload.concurrent as f64 / r),
    };
    let shared = Shared {
        workload,
        target,
        seed,
        keys,
        values,
        chooser: OpChooser::new(&workload.operations),
        t0,
        deadline,
        period_s,
        op_budget: workload.op_count,
        issued: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        recorders: (0..concurrent)
            .map(|_| Mutex::new(Recorder::default()))
            .collect(),
    };

    let (bar_len, bar_unit) = match (workload.duration_s, workload.op_count) {
        (_, Some(n)) => (n, "ops"),
        (Some(d), None) => (d.ceil() as u64, "s"),
        (None, None) => (0, "ops"),
    };
    let progress = Progress::new(options.progress, bar_len, bar_unit, "run");
    progress.line(&format!(
        "run: target {}, {} workers, mode {}, seed {seed}, ops {}",
        target.name(),
        concurrent,
        workload.mode.name(),
        ops.iter().map(|o| o.name()).collect::<Vec<_>>().join("/")
    ));

    let interval = Duration::from_secs_f64(workload.report_interval_s);
    let mut intervals: Vec<Interval> = Vec::new();
    let mut cumulative = Recorder::default();
    // Reclaim window: the second half of the time before it, and the window.
    let window = workload.reclaim_window_s;
    let mut phases = window.map(|_| PhaseRecorders::default());
    let mut reclaim_runs: Option<(bool, Vec<ReclaimRun>)> = None;
    let mut write_error: Option<BenchError> = None;
    let mut panicked: Option<usize> = None;

    std::thread::scope(|scope| {
        let (done_tx, done_rx) = mpsc::channel::<()>();
        let handles: Vec<_> = (0..concurrent)
            .map(|w| {
                let tx = done_tx.clone();
                let shared = &shared;
                scope.spawn(move || {
                    worker(shared, w);
                    drop(tx);
                })
            })
            .collect();
        drop(done_tx);
        let reclaimer = window.map(|w| {
            let shared = &shared;
            scope.spawn(move || reclaimer(shared, w))
        });

        let mut spares: Vec<Recorder> = (0..concurrent).map(|_| Recorder::default()).collect();
        let mut merged = Recorder::default();
        let mut last_report = t0;
        let mut next_report = t0 + interval;
        loop {
            let now = Instant::now();
            let wake = next_report.min(now + Duration::from_millis(PROGRESS_TICK_MS));
            let done = matches!(
                done_rx.recv_timeout(wake.saturating_duration_since(now)),
                Err(mpsc::RecvTimeoutError::Disconnected)
            );
            let now = Instant::now();
            let issued = shared.issued.load(Ordering::Relaxed);
            progress.set_position(match (workload.op_count, workload.duration_s) {
                (Some(n), _) => issued.min(n),
                _ => now.duration_since(t0).as_secs(),
            });
            // A boundary at or after the deadline is not reported by time: the
            // final row comes when the workers have stopped.
            let due = now >= next_report && deadline.is_none_or(|d| next_report < d);
            if !(done || due) {
                continue;
            }
            merged.reset();
            for (slot, spare) in shared.recorders.iter().zip(spares.iter_mut()) {
                std::mem::swap(&mut *lock(slot), spare);
                merged.add(spare);
                spare.reset();
            }
            cumulative.add(&merged);
            let row = Interval::from_recorder(
                now.duration_since(t0).as_secs_f64(),
                now.duration_since(last_report).as_secs_f64(),
                &merged,
                &ops,
            );
            if let Err(e) = csv.write(&row) {
                write_error.get_or_insert(e);
                shared.stop.store(true, Ordering::Relaxed);
            }
            progress.line(&status_line(
                &row,
                cumulative.successful() + cumulative.failed(),
            ));
            match counters.record(row.elapsed_s, row.window_s, &target.counters()) {
                Ok(figures) if !figures.is_empty() => progress.line(&counters_line(&figures)),
                Ok(_) => {}
                Err(e) => {
                    write_error.get_or_insert(e);
                    shared.stop.store(true, Ordering::Relaxed);
                }
            }
            progress.set_message(format!("{:.0} ops/s", row.ops_per_sec()));
            if let (Some(p), Some(w)) = (phases.as_mut(), window) {
                p.add(&row, &merged, w);
            }
            intervals.push(row);
            last_report = now;
            while next_report <= now {
                next_report += interval;
            }
            if done {
                break;
            }
        }
        for (w, h) in handles.into_iter().enumerate() {
            if h.join().is_err() {
                panicked.get_or_insert(w);
            }
        }
        // The workers are done: a reclaim call in progress finishes, no new one starts.
        shared.stop.store(true, Ordering::Relaxed);
        if let Some(h) = reclaimer {
            match h.join() {
                Ok(r) => reclaim_runs = Some(r),
                Err(_) => {
                    panicked.get_or_insert(concurrent);
                }
            }
        }
    });
    progress.finish();
    if let Some(worker) = panicked {
        return Err(BenchError::WorkerPanicked { worker });
    }
    if let Some(e) = write_error {
        return Err(e);
    }

    let elapsed_s = intervals.last().map_or(0.0, |i| i.elapsed_s);
    let mut summary = summarize(
        workload,
        target,
        seed,
        started_at,
        elapsed_s,
        &intervals,
        &cumulative,
        &ops,
    );
    summary.preload = preload;
    summary.store_counters = counters.run_figures();
    if let (Some(w), Some(p), Some((supported, runs))) = (window, &phases, reclaim_runs) {
        let rate_mode = workload.mode == Mode::Rate;
        summary.reclaim = Some(ReclaimSummary::of(
            w,
            supported,
            runs,
            p.before.phase(&ops, rate_mode),
            p.during.phase(&ops, rate_mode),
        ));
    }
    summary.disk_io = io_before
        .zip(output::DiskIo::of_this_process())
        .map(|(before, after)| after.since(before));
    output::write_errors_csv(out_dir, &cumulative.errors)?;
    if options.chart {
        let title = format!(
            "{}: {} workers, {}, {} keys ({:?}), {} B values, seed {seed}",
            target.name(),
            workload.concurrent,
            match workload.rate_ops_per_s {
                Some(r) => format!("rate {r} ops/s"),
                None => "max".to_string(),
            },
            workload.keys,
            workload.key_generator,
            workload.value_size_bytes,
        );
        let png = out_dir.join(output::SUMMARY_PNG);
        if let Err(e) = chart::draw_summary(&png, &title, &intervals, &ops, &summary) {
            if options.progress {
                eprintln!("warning: {e}");
            }
            summary.chart_error = Some(e.to_string());
        }
    }
    summary.save(out_dir)?;
    if options.progress {
        eprintln!(
            "done: {} ops in {:.1} s, {:.1} ops/s (last {:.0} s: {:.1} ops/s), {} failed; results in {}",
            summary.total,
            summary.elapsed_s,
            summary.ops_per_sec,
            summary.last_window_s,
            summary.last_window_ops_per_sec,
            summary.failed,
            out_dir.display()
        );
    }
    Ok(summary)
}

/// The status line of the target's own counters for one interval:
/// `  store: name=value …`.
fn counters_line(figures: &[(&str, u64)]) -> String {
    let pairs: Vec<String> = figures.iter().map(|(n, v)| format!("{n}={v}")).collect();
    format!("  store: {}", pairs.join(" "))
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    workload: &Workload,
    target: &dyn Target,
    seed: u64,
    started_at: String,
    elapsed_s: f64,
    intervals: &[Interval],
    cumulative: &Recorder,
    ops: &[Op],
) -> RunSummary {
    let per_op = per_op_summary(cumulative, ops, elapsed_s, workload.mode == Mode::Rate);
    let (last_window_ops_per_sec, last_window_s) = stats::last_window(intervals);
    let successful = cumulative.successful();
    let failed = cumulative.failed();
    RunSummary {
        workload: workload.clone(),
        target: target.name().to_string(),
        seed,
        started_at,
        elapsed_s,
        intervals: intervals.len(),
        preload: None,
        ops: per_op,
        total: successful + failed,
        successful,
        failed,
        not_found: ops.iter().map(|&op| cumulative.op(op).not_found).sum(),
        ops_per_sec: stats::rate(successful, elapsed_s),
        last_window_ops_per_sec,
        last_window_s,
        disk_bytes: target.disk_bytes(),
        disk_io: None,
        reclaim: None,
        chart_error: None,
        store_counters: BTreeMap::new(),
    }
}

/// Per op figures of `rec` over `elapsed_s` seconds.
fn per_op_summary(
    rec: &Recorder,
    ops: &[Op],
    elapsed_s: f64,
    rate_mode: bool,
) -> BTreeMap<String, OpSummary> {
    ops.iter()
        .map(|&op| {
            let r = rec.op(op);
            let split = r.found_and_not_found();
            (
                op.name().to_string(),
                OpSummary {
                    total: r.successful + r.failed,
                    successful: r.successful,
                    failed: r.failed,
                    not_found: r.not_found,
                    ops_per_sec: stats::rate(r.successful, elapsed_s),
                    latency_us: Percentiles::of(r.latency.as_ref()),
                    service_time_us: rate_mode.then(|| Percentiles::of(r.service.as_ref())),
                    found_latency_us: split.map(|s| s.0),
                    not_found_latency_us: split.map(|s| s.1),
                },
            )
        })
        .collect()
}

/// The report intervals of one phase of a run, merged.
#[derive(Default)]
struct PhaseRecorder {
    rec: Recorder,
    from_s: Option<f64>,
    to_s: f64,
    seconds: f64,
}

impl PhaseRecorder {
    fn add(&mut self, row: &Interval, rec: &Recorder) {
        self.from_s.get_or_insert(row.elapsed_s - row.window_s);
        self.to_s = row.elapsed_s;
        self.seconds += row.window_s;
        self.rec.add(rec);
    }

    fn phase(&self, ops: &[Op], rate_mode: bool) -> Option<Phase> {
        let from_s = self.from_s?;
        Some(Phase {
            from_s,
            to_s: self.to_s,
            ops_per_sec: stats::rate(self.rec.successful(), self.seconds),
            ops: per_op_summary(&self.rec, ops, self.seconds, rate_mode),
        })
    }
}

/// The phases around a reclaim window `[from, to]`: an interval belongs to
/// the phase its midpoint falls in; `before` is `[from / 2, from)`.
#[derive(Default)]
struct PhaseRecorders {
    before: PhaseRecorder,
    during: PhaseRecorder,
}

impl PhaseRecorders {
    fn add(&mut self, row: &Interval, rec: &Recorder, [from, to]: [f64; 2]) {
        let mid = row.elapsed_s - row.window_s / 2.0;
        if (from / 2.0..from).contains(&mid) {
            self.before.add(row, rec);
        } else if (from..to).contains(&mid) {
            self.during.add(row, rec);
        }
    }
}

/// Calls [`Target::reclaim`] back to back during `[from, to]` of the
/// measured period (waiting [`RECLAIM_IDLE_MS`] after a call that found
/// nothing to do or failed) until the window closes or the run stops.
/// Returns whether the target has a reclaim step, and every call.
fn reclaimer(shared: &Shared<'_>, [from, to]: [f64; 2]) -> (bool, Vec<ReclaimRun>) {
    let t0 = shared.t0;
    let end = t0 + Duration::from_secs_f64(to);
    let end = shared.deadline.map_or(end, |d| end.min(d));
    let stopped = || shared.stop.load(Ordering::Relaxed);
    let sleep_until = |until: Instant| {
        while !stopped() {
            let now = Instant::now();
            if now >= until {
                break;
            }
            std::thread::sleep((until - now).min(Duration::from_millis(PROGRESS_TICK_MS)));
        }
    };
    sleep_until(t0 + Duration::from_secs_f64(from));
    let mut runs = Vec::new();
    while !stopped() && Instant::now() < end {
        let start = Instant::now();
        let (done, error) = match shared.target.reclaim() {
            Ok(None) => return (false, runs),
            Ok(Some(r)) => (r, None),
            Err(e) => (Reclaimed::default(), Some(e.to_string())),
        };
        let secs = |t: Instant| t.duration_since(t0).as_secs_f64();
        // Nothing worth reclaiming, or a failure: wait before asking again.
        let idle = done.bytes_before == 0;
        let run = ReclaimRun {
            start_s: secs(start),
            end_s: secs(Instant::now()),
            bytes_before: done.bytes_before,
            bytes_after: done.bytes_after,
            error,
        };
        runs.push(run);
        if idle {
            sleep_until((Instant::now() + Duration::from_millis(RECLAIM_IDLE_MS)).min(end));
        }
    }
    (true, runs)
}

/// One worker: draws ops until the deadline, the op budget or the stop flag.
fn worker(shared: &Shared<'_>, w: usize) {
    let workload = shared.workload;
    let mut rng = worker_rng(shared.seed, w as u64);
    let mut key = Vec::new();
    let mut value_buf = Vec::new();
    let offset_s = shared
        .period_s
        .map_or(0.0, |p| p * w as f64 / workload.concurrent as f64);
    let scan_limit = workload.scan_limit_rows as usize;
    let mut i: u64 = 0;
    loop {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let intended = match shared.period_s {
            Some(p) => shared.t0 + Duration::from_secs_f64(offset_s + p * i as f64),
            None => Instant::now(),
        };
        if shared.deadline.is_some_and(|d| intended >= d) {
            break;
        }
        let n = shared.issued.fetch_add(1, Ordering::Relaxed);
        if shared.op_budget.is_some_and(|b| n >= b) {
            break;
        }
        if shared.period_s.is_some() && !wait_until(intended, &shared.stop) {
            break;
        }
        let op = shared.chooser.next(&mut rng);
        let k = shared.keys.next_number(&mut rng);
        shared.keys.encode(k, &mut key);
        let start = Instant::now();
        let outcome = match op {
            Op::Get => read_outcome(shared.target.get(&key).map(|v| v.is_some())),
            Op::Head => read_outcome(shared.target.head(&key).map(|v| v.is_some())),
            Op::Put => {
                let value = shared.values.next(&mut rng, &mut value_buf);
                write_outcome(shared.target.put(&key, value))
            }
            Op::Update => match shared.target.get(&key) {
                Ok(_) => {
                    let value = shared.values.next(&mut rng, &mut value_buf);
                    write_outcome(shared.target.put(&key, value))
                }
                Err(e) => Outcome::Failed(e.to_string()),
            },
            Op::Delete => write_outcome(shared.target.delete(&key)),
            Op::Scan => write_outcome(shared.target.scan(&key, scan_limit).map(|_| ())),
        };
        let end = Instant::now();
        let response_us = micros(end.saturating_duration_since(intended));
        let service_us = shared
            .period_s
            .map(|_| micros(end.saturating_duration_since(start)));
        lock(&shared.recorders[w]).record(op, outcome, response_us, service_us);
        i += 1;
    }
}

fn read_outcome(r: Result<bool, TargetError>) -> Outcome {
    match r {
        Ok(true) => Outcome::Ok,
        Ok(false) => Outcome::NotFound,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

fn write_outcome(r: Result<(), TargetError>) -> Outcome {
    match r {
        Ok(()) => Outcome::Ok,
        Err(e) => Outcome::Failed(e.to_string()),
    }
}

/// Sleeps until `t` in slices of at most [`RATE_SLEEP_MS_MAX`]; `false` if
/// `stop` was raised meanwhile.
fn wait_until(t: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if now >= t {
            return true;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(RATE_SLEEP_MS_MAX)));
    }
}

/// Writes keys `0..preload_keys` in order, split over `concurrent` threads that
/// take the next key from one shared counter. Not measured; any error aborts.
fn preload(
    workload: &Workload,
    target: &dyn Target,
    keys: &KeySource,
    values: &ValueSource,
    seed: u64,
    show: bool,
) -> Result<PreloadSummary, BenchError> {
    let n = workload.preload_keys;
    let next = AtomicU64::new(0);
    let failed: Mutex<Option<TargetError>> = Mutex::new(None);
    let progress = Progress::new(show, n, "keys", "preload");
    let start = Instant::now();
    let mut panicked = None;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workload.concurrent as u64)
            .map(|w| {
                let (next, failed) = (&next, &failed);
                scope.spawn(move || {
                    // Preload RNGs are disjoint from the measured workers' (seed + w).
                    let mut rng = worker_rng(seed, u64::from(workload.concurrent) + w);
                    let mut key = Vec::new();
                    let mut buf = Vec::new();
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            break;
                        }
                        keys.encode(i, &mut key);
                        let value = values.next(&mut rng, &mut buf);
                        if let Err(e) = target.put(&key, value) {
                            let mut f = failed.lock().unwrap_or_else(PoisonError::into_inner);
                            f.get_or_insert(e);
                            next.store(n, Ordering::Relaxed);
                            break;
                        }
                    }
                })
            })
            .collect();
        while handles.iter().any(|h| !h.is_finished()) {
            progress.set_position(next.load(Ordering::Relaxed).min(n));
            std::thread::sleep(Duration::from_millis(PROGRESS_TICK_MS));
        }
        for (w, h) in handles.into_iter().enumerate() {
            if h.join().is_err() {
                panicked.get_or_insert(w);
            }
        }
    });
    if let Some(worker) = panicked {
        progress.finish();
        return Err(BenchError::WorkerPanicked { worker });
    }
    if let Some(source) = failed.into_inner().unwrap_or_else(PoisonError::into_inner) {
        progress.finish();
        return Err(BenchError::Target {
            target: target.name().to_string(),
            action: "preload put",
            source,
        });
    }
    let elapsed_s = start.elapsed().as_secs_f64();
    progress.line(&format!(
        "preload: {n} keys in {elapsed_s:.1} s ({:.0} keys/s)",
        stats::rate(n, elapsed_s)
    ));
    progress.finish();
    Ok(PreloadSummary { keys: n, elapsed_s })
}
