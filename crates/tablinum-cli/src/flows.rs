//! `tablinum flow ...`: check a dataflow definition, run it against a
//! cluster (its tasks in this process) or submit it to the cluster's
//! workers, stop and list submitted flows, and validate what a flow
//! delivered.
//!
//! Owns the command-line face of flows; what a flow does is
//! `tablinum_flow::run`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use tablinum_flow::definition::Flow;
use tablinum_flow::run::{progress_for, Progress, RunOptions};

use crate::exit::usage;
use crate::verbs::Session;

macro_rules! out {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// Where file sinks write, by default (under `tablinum up`'s data directory).
pub const ROOT_DEFAULT: &str = "tablinum-data/files";
/// How long `flow drop` waits for a stopped flow's tasks to leave their
/// workers (a heartbeat or two), ms.
pub const DROP_WAIT_MS: u64 = 15_000;
/// Between two tries of the drop, ms.
pub const DROP_RETRY_MS: u64 = 250;

/// `tablinum flow ...`.
#[derive(Debug, Subcommand)]
pub enum FlowCommand {
    /// Check a definition file without running it (every error names its
    /// line).
    Check {
        /// The definition (TOML).
        file: PathBuf,
    },
    /// Run a flow: one task per source partition in this process, until
    /// Ctrl-C (or --until-idle-ms); resumes from what it committed.
    Run {
        /// The definition (TOML).
        file: PathBuf,
        /// Root directory of file sinks.
        #[arg(long, default_value = ROOT_DEFAULT)]
        root: PathBuf,
        /// Stop once every task has been at the end of its input this long.
        #[arg(long)]
        until_idle_ms: Option<u64>,
    },
    /// Submit a flow to the cluster: its tasks run on the workers
    /// (`tablinum worker`), each under a lease; a stopped flow starts again.
    Submit {
        /// The definition (TOML).
        file: PathBuf,
    },
    /// Stop a submitted flow: each task commits what it holds and ends.
    Stop {
        /// The flow's name.
        name: String,
    },
    /// Forget a stopped flow (its topics, tables and files stay), waiting up
    /// to 15 s for its tasks' last commits.
    Drop {
        /// The flow's name.
        name: String,
    },
    /// Every submitted flow: running or stopped, tasks held, records/s.
    List,
    /// One submitted flow's tasks: holder, epoch, position, lag, rate.
    Status {
        /// The flow's name.
        name: String,
    },
    /// Read every sink back and report expected, received, lost and
    /// duplicated records (generated input only); exit 1 unless exact.
    Validate {
        /// The definition (TOML).
        file: PathBuf,
        /// Root directory of file sinks.
        #[arg(long, default_value = ROOT_DEFAULT)]
        root: PathBuf,
        /// Follow the running flow: a line per interval (what arrived so
        /// far, what is still in flight, duplicates), reading only what
        /// topics and files committed since the last line; ends on Ctrl-C,
        /// after --timeout-s, or (--until-exact) once every record arrived
        /// exactly once.
        #[arg(long)]
        follow: bool,
        /// Interval between lines with --follow, ms.
        #[arg(long, default_value_t = 1000)]
        interval_ms: u64,
        /// With --follow: stop once exact.
        #[arg(long)]
        until_exact: bool,
        /// With --follow: stop after this long, s.
        #[arg(long, default_value_t = 3600)]
        timeout_s: u64,
        /// Also report end-to-end latency (source append to sink commit,
        /// p50/p99/max) of every record at the topic sinks, from the
        /// topics' append marks (a flow reading one tablinum topic).
        #[arg(long)]
        latency: bool,
    },
    /// Follow a Kafka flow's sinks from now (read_committed) and report the
    /// latency from each input record's Kafka create time to when it became
    /// visible at a sink: p50, p99, max. Start it before the input is
    /// generated; it ends once --expect records arrived (exit 1 if the
    /// timeout came first). Works for any writer of the sinks, so a peer
    /// stream processor is measured the same way.
    Latency {
        /// The definition (TOML): one Kafka source, Kafka sinks.
        file: PathBuf,
        /// Stop once this many distinct stamped records arrived.
        #[arg(long)]
        expect: u64,
        /// Stop after this long, s.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
}

fn load(file: &Path) -> anyhow::Result<Flow> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    match Flow::parse(&text) {
        Ok(f) => Ok(f),
        Err(e) => usage!("{}: {e}", file.display()),
    }
}

/// Runs one `flow` command; `false`: validation was not exact.
pub fn run(s: &mut Session, cmd: FlowCommand) -> anyhow::Result<bool> {
    match cmd {
        FlowCommand::Check { file } => {
            let f = load(&file)?;
            out!(
                "{}: flow {} is valid: {} nodes, parallelism {}, commit every {} ms, {}",
                file.display(),
                f.name,
                f.nodes.len(),
                f.parallelism,
                f.commit_interval_ms,
                if f.sync { "sync" } else { "nosync" }
            );
        }
        FlowCommand::Run {
            file,
            root,
            until_idle_ms,
        } => {
            let flow = Arc::new(load(&file)?);
            let c = s.client()?;
            let mut opts = RunOptions::new(root);
            opts.until_idle = until_idle_ms.map(Duration::from_millis);
            if let Ok(v) = std::env::var(tablinum_flow::run::CRASH_AT_ENV) {
                opts.crash_at =
                    Some(tablinum_flow::run::parse_crash_at(&v).map_err(crate::exit::Usage)?);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let progress = progress_for(&flow);
            let done = Arc::new(AtomicBool::new(false));
            let printer = {
                let (p, done) = (progress.clone(), done.clone());
                let name = flow.name.clone();
                std::thread::spawn(move || show_progress(&name, &p, &done))
            };
            let t0 = Instant::now();
            let r = c.block_on(async {
                let stopper = stop.clone();
                tokio::spawn(async move {
                    if tokio::signal::ctrl_c().await.is_ok() {
                        stopper.store(true, Ordering::Relaxed);
                    }
                });
                tablinum_flow::run::run_with(
                    c.as_async().clone(),
                    flow.clone(),
                    opts,
                    stop,
                    progress.clone(),
                )
                .await
            });
            done.store(true, Ordering::Relaxed);
            let _ = printer.join();
            r?;
            let secs = t0.elapsed().as_secs_f64();
            let n = progress.records_in.load(Ordering::Relaxed);
            out!(
                "flow {}: {n} records in {secs:.1} s, {:.0} records/s from the first record to the last commit, {} commits (every {} ms, {})",
                flow.name,
                progress.active_rate(),
                progress.commits.load(Ordering::Relaxed),
                flow.commit_interval_ms,
                if flow.sync { "sync" } else { "nosync" }
            );
            let t0 = progress.started_unix_ms.load(Ordering::Relaxed);
            out!(
                "  span: first record at unix ms {}, last commit at unix ms {}",
                t0 + progress
                    .first_record_ms
                    .load(Ordering::Relaxed)
                    .min(u64::MAX - t0),
                t0 + progress.last_commit_ms.load(Ordering::Relaxed)
            );
            for (i, name) in progress.sink_names.iter().enumerate() {
                out!(
                    "  {name}: {} records, {} bytes",
                    progress.records_out[i].load(Ordering::Relaxed),
                    progress.bytes_out[i].load(Ordering::Relaxed)
                );
            }
        }
        FlowCommand::Submit { file } => {
            let flow = load(&file)?;
            let text = std::fs::read_to_string(&file)?;
            let c = s.client()?;
            // The sources must exist now, not only in a worker's log.
            for n in &flow.nodes {
                if let tablinum_flow::definition::Kind::Source(
                    tablinum_flow::definition::Source::Topic(t),
                ) = &n.kind
                {
                    let topic = c.topic(t).with_context(|| {
                        format!("{}: line {}: source topic {t}", file.display(), n.line)
                    })?;
                    if topic.partitions() != flow.parallelism {
                        usage!(
                            "{}: line {}: source topic {t} has {} partitions but the flow's parallelism is {}",
                            file.display(),
                            n.line,
                            topic.partitions(),
                            flow.parallelism
                        );
                    }
                }
            }
            let started = c.block_on(c.as_async().submit_flow(&flow.name, &text, flow.tasks()))?;
            if started {
                out!(
                    "flow {} submitted: {} tasks go to the cluster's workers (tablinum flow status {})",
                    flow.name,
                    flow.tasks(),
                    flow.name
                );
            } else {
                out!("flow {} runs already with this definition", flow.name);
            }
        }
        FlowCommand::Stop { name } => {
            let c = s.client()?;
            c.block_on(c.as_async().stop_flow(&name))?;
            out!("flow {name} stopped: its tasks commit what they hold and leave their workers");
        }
        FlowCommand::Drop { name } => {
            let c = s.client()?;
            // A flow just stopped still has tasks committing on their
            // workers for a heartbeat or two: wait for them, bounded.
            let deadline = Instant::now() + Duration::from_millis(DROP_WAIT_MS);
            let mut said = false;
            loop {
                match c.block_on(c.as_async().drop_flow(&name)) {
                    Err(tablinum_client::Error::Conflict(m))
                        if m.contains("still has tasks") && Instant::now() < deadline =>
                    {
                        if !said {
                            eprintln!("flow {name}: waiting for its tasks to finish their last commits (up to {} s)", DROP_WAIT_MS / 1000);
                            said = true;
                        }
                        std::thread::sleep(Duration::from_millis(DROP_RETRY_MS));
                    }
                    r => {
                        r?;
                        break;
                    }
                }
            }
            out!("flow {name} dropped: its outputs stay");
        }
        FlowCommand::List => {
            let c = s.client()?;
            let flows = c.block_on(c.as_async().list_flows())?;
            if flows.is_empty() {
                out!("no flow is submitted");
            }
            for f in flows {
                let held = f.tasks.iter().filter(|t| !t.worker.is_empty()).count();
                let rate: f64 = f
                    .tasks
                    .iter()
                    .filter_map(|t| t.report.as_ref())
                    .map(|r| r.records_per_sec)
                    .sum();
                let lag: u64 = f
                    .tasks
                    .iter()
                    .filter_map(|t| t.report.as_ref())
                    .map(|r| r.lag)
                    .sum();
                out!(
                    "{}  {}  {held}/{} tasks held  {rate:.0} records/s  lag {lag}",
                    f.name,
                    if f.running { "running" } else { "stopped" },
                    f.tasks.len()
                );
            }
        }
        FlowCommand::Status { name } => {
            let c = s.client()?;
            let flows = c.block_on(c.as_async().list_flows())?;
            let Some(f) = flows.into_iter().find(|f| f.name == name) else {
                return Err(tablinum_client::Error::NotFound(format!(
                    "no flow {name} is submitted"
                ))
                .into());
            };
            out!(
                "flow {}: {}",
                f.name,
                if f.running { "running" } else { "stopped" }
            );
            out!("task  worker                epoch  position     records_in   records/s  lag        report");
            for t in &f.tasks {
                let r = t.report.clone().unwrap_or_default();
                let seen = if t.report.is_some() {
                    format!("{} ms ago", t.last_report_ms)
                } else {
                    "-".into()
                };
                out!(
                    "{:<5} {:<21} {:<6} {:<12} {:<12} {:<10.0} {:<10} {seen}",
                    t.task,
                    if t.worker.is_empty() { "-" } else { &t.worker },
                    t.epoch,
                    r.position,
                    r.records_in,
                    r.records_per_sec,
                    r.lag
                );
            }
        }
        FlowCommand::Validate {
            file,
            root,
            follow,
            interval_ms,
            until_exact,
            timeout_s,
            latency,
        } => {
            let flow = load(&file)?;
            let c = s.client()?;
            let r = if follow {
                follow_validation(c, &flow, &root, interval_ms, until_exact, timeout_s)?
            } else {
                c.block_on(tablinum_flow::check::validate(c.as_async(), &flow, &root))?
            };
            for sk in &r.sinks {
                out!(
                    "  {}: {} records ({} without a stamp)",
                    sk.name,
                    sk.records,
                    sk.unstamped
                );
            }
            if latency {
                match c.block_on(tablinum_flow::latency::measure(c.as_async(), &flow))? {
                    Some(l) => out!(
                        "  latency, source append to sink commit: p50 {} ms, p99 {} ms, max {} ms over {} records (commit every {} ms, {})",
                        l.p50_ms,
                        l.p99_ms,
                        l.max_ms,
                        l.records,
                        flow.commit_interval_ms,
                        if flow.sync { "sync" } else { "nosync" }
                    ),
                    None => out!("  latency: not measured (it needs one tablinum topic source, topic sinks and stamped records)"),
                }
            }
            let k = r.counts;
            out!(
                "flow {}: expected {}, received {}, lost {}, duplicated {}, unexpected {}: {}",
                flow.name,
                k.expected,
                k.received,
                k.lost,
                k.duplicated,
                k.unexpected,
                if k.exact() { "EXACT" } else { "NOT EXACT" }
            );
            return Ok(k.exact());
        }
        FlowCommand::Latency {
            file,
            expect,
            timeout_s,
        } => {
            let flow = load(&file)?;
            return follow_latency(s, &flow, expect, timeout_s);
        }
    }
    Ok(true)
}

#[cfg(feature = "kafka")]
fn follow_latency(
    s: &mut Session,
    flow: &Flow,
    expect: u64,
    timeout_s: u64,
) -> anyhow::Result<bool> {
    let c = s.client()?;
    eprintln!(
        "following the sinks of flow {} until {expect} records are visible (at most {timeout_s} s)",
        flow.name
    );
    let l = c.block_on(async {
        tablinum_flow::latency::follow_kafka(flow, expect, Duration::from_secs(timeout_s))
    })?;
    let Some(l) = l else {
        out!("latency: no record arrived at the sinks within {timeout_s} s");
        return Ok(false);
    };
    out!(
        "latency, source to visible: p50 {} ms, p99 {} ms, max {} ms over {} records (read_committed, fetches wait at most {} ms)",
        l.p50_ms,
        l.p99_ms,
        l.max_ms,
        l.records,
        tablinum_flow::kafka::FOLLOW_FETCH_WAIT_MS
    );
    if l.records < expect {
        out!(
            "latency: only {} of {expect} records arrived within {timeout_s} s",
            l.records
        );
    }
    Ok(l.records >= expect)
}

#[cfg(not(feature = "kafka"))]
fn follow_latency(_: &mut Session, _: &Flow, _: u64, _: u64) -> anyhow::Result<bool> {
    anyhow::bail!(
        "Kafka is not in this build: tablinum-cli was compiled without its `kafka` feature"
    )
}

/// `flow validate --follow`: a line per interval until Ctrl-C, the
/// timeout or (with `until_exact`) an exact report; returns the last report.
fn follow_validation(
    c: &tablinum_client::Client,
    flow: &Flow,
    root: &Path,
    interval_ms: u64,
    until_exact: bool,
    timeout_s: u64,
) -> anyhow::Result<tablinum_flow::check::Report> {
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    c.block_on(async {
        let stopper = stop.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                stopper.store(true, Ordering::Relaxed);
            }
        });
        let mut live = tablinum_flow::check::Live::new(flow);
        loop {
            let tick = Instant::now();
            let r = live.tick(c.as_async(), flow, root).await?;
            let k = r.counts;
            out!(
                "{:>6.1} s  expected {}, received {}, in flight {}, duplicated {}, unexpected {}",
                t0.elapsed().as_secs_f64(),
                k.expected,
                k.received,
                k.lost,
                k.duplicated,
                k.unexpected
            );
            let done = stop.load(Ordering::Relaxed)
                || t0.elapsed() >= Duration::from_secs(timeout_s)
                || (until_exact && k.exact() && k.expected > 0);
            if done {
                return Ok(r);
            }
            let wait = Duration::from_millis(interval_ms).saturating_sub(tick.elapsed());
            tokio::time::sleep(wait).await;
        }
    })
}

/// A progress line on standard error every second while the run goes.
fn show_progress(name: &str, p: &Progress, done: &AtomicBool) {
    let t0 = Instant::now();
    let mut last = (0u64, Instant::now());
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(100));
        if last.1.elapsed() < Duration::from_secs(1) {
            continue;
        }
        let n = p.records_in.load(Ordering::Relaxed);
        let rate = (n - last.0) as f64 / last.1.elapsed().as_secs_f64();
        last = (n, Instant::now());
        let sinks: Vec<String> = p
            .sink_names
            .iter()
            .enumerate()
            .map(|(i, s)| format!("{s} {}", p.records_out[i].load(Ordering::Relaxed)))
            .collect();
        eprintln!(
            "flow {name} {:>4.0} s: {n} in ({rate:.0}/s) | {} | {} tasks",
            t0.elapsed().as_secs_f64(),
            sinks.join(" | "),
            p.tasks_running.load(Ordering::Relaxed)
        );
    }
}
