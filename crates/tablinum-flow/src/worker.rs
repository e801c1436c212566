//! The worker role: runs the flow tasks the manager gives it, each under a
//! lease renewed by every heartbeat, and reports their progress.
//!
//! Every heartbeat interval the worker reports each task it runs (input
//! position, records read, rate, lag) and gets back the tasks it must run
//! with their flows' definitions and a lease. It starts the tasks it does
//! not run yet, tells the ones no longer listed to stop (each commits what
//! it holds, then ends), and renews the lease of the rest: `sent + lease_ms`,
//! counted from when the heartbeat was *sent*. A worker that cannot reach
//! the manager keeps working until that instant, then stops every task
//! without committing — the manager gives them to other workers only a full
//! heartbeat timeout after the last heartbeat it received, which is later.
//! A task that fails starts again from its committed positions once the
//! manager still lists it and its backoff has passed: [`RESTART_BACKOFF_MS_MIN`]
//! after the first failure, doubling with every failure in a row up to
//! [`RESTART_BACKOFF_MS_MAX`] (a task that ran that long before failing
//! starts counting again). A flow whose definition cannot be prepared is
//! retried on the same schedule.
//!
//! Owns the worker loop; never decides which worker runs what (the
//! manager's `flows` module does) or what a task does ([`crate::run`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use tablinum_client::flow::TaskReport;
use tablinum_client::AsyncClient;

use crate::definition::Flow;
use crate::run::{progress_for, RunError, RunOptions, Runner, TaskCtl};

/// Default heartbeat interval of a worker, ms.
pub const HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 500;
/// Default tasks one worker runs at most.
pub const TASKS_MAX_DEFAULT: u32 = 64;
/// How long a stopping worker waits for its tasks' last commits, ms.
pub const STOP_WAIT_MS: u64 = 10_000;
/// How long one heartbeat's lag lookups may take together, ms: a tablet
/// server that does not answer must not delay the heartbeat (and so the
/// lease) of every task.
pub const LAG_LOOKUP_BUDGET_MS: u64 = 100;

/// Wait before restarting a task after its first failure in a row, ms.
pub const RESTART_BACKOFF_MS_MIN: u64 = 500;
/// Longest wait before restarting a failing task, ms.
pub const RESTART_BACKOFF_MS_MAX: u64 = 30_000;

/// Failures in a row of one task (or of preparing one flow) and when it may
/// be tried again.
#[derive(Debug, Clone, Copy)]
struct Backoff {
    failures: u32,
    not_before: Instant,
}

impl Backoff {
    /// The wait after `failures` failures in a row, ms.
    fn wait_ms(failures: u32) -> u64 {
        let doublings = failures.saturating_sub(1).min(16);
        (RESTART_BACKOFF_MS_MIN << doublings).min(RESTART_BACKOFF_MS_MAX)
    }

    /// Notes a failure of something that ran for `ran`; returns the wait.
    fn fail(map: &mut HashMap<String, Backoff>, key: String, ran: Duration) -> u64 {
        let now = Instant::now();
        let prev = map.get(&key).map_or(0, |b| b.failures);
        let failures = if ran >= Duration::from_millis(RESTART_BACKOFF_MS_MAX) {
            1
        } else {
            prev.saturating_add(1)
        };
        let wait = Backoff::wait_ms(failures);
        map.insert(
            key,
            Backoff {
                failures,
                not_before: now + Duration::from_millis(wait),
            },
        );
        wait
    }

    /// Whether `key` must still wait.
    fn waiting(map: &HashMap<String, Backoff>, key: &str) -> bool {
        map.get(key).is_some_and(|b| Instant::now() < b.not_before)
    }
}

/// The backoff key of task `task` of flow `flow`.
fn task_key(flow: &str, task: u32) -> String {
    format!("{flow}#{task}")
}

/// A worker's settings (`[worker]` of its config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WorkerConfig {
    /// Its id, unique in the cluster (empty: `worker-<pid>`), 1..=128
    /// bytes of `[A-Za-z0-9_.:-]`.
    pub id: String,
    /// The manager's gRPC address.
    pub manager: String,
    /// A copy of the manager's cluster secret (required): workers are
    /// cluster members.
    pub cluster_secret_file: PathBuf,
    /// PEM CA the manager's certificate chains to (empty: plaintext).
    pub tls_ca: PathBuf,
    /// The root of file sinks (shared by every worker of a flow with file
    /// sinks).
    pub root: PathBuf,
    /// Heartbeat interval, ms.
    pub heartbeat_interval_ms: u64,
    /// Tasks it runs at most.
    pub tasks_max: u32,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: String::new(),
            manager: tablinum_client::CLUSTER_ADDR_DEFAULT.into(),
            cluster_secret_file: PathBuf::new(),
            tls_ca: PathBuf::new(),
            root: PathBuf::from("tablinum-data/files"),
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS_DEFAULT,
            tasks_max: TASKS_MAX_DEFAULT,
        }
    }
}

/// A worker config file: its `[worker]` section.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerFile {
    /// `[worker]`.
    pub worker: WorkerConfig,
}

impl WorkerConfig {
    /// Parses a config file's text; the error names the problem.
    pub fn parse(text: &str) -> Result<WorkerConfig, String> {
        let f: WorkerFile = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut w = f.worker;
        if w.id.is_empty() {
            w.id = format!("worker-{}", std::process::id());
        }
        tablinum_proto::check_server_id(&w.id).map_err(|e| format!("[worker] id: {e}"))?;
        if w.cluster_secret_file.as_os_str().is_empty() {
            return Err(
                "[worker] cluster_secret_file is not set: name a copy of the manager's cluster secret"
                    .into(),
            );
        }
        if !(10..=60_000).contains(&w.heartbeat_interval_ms) {
            return Err(format!(
                "[worker] heartbeat_interval_ms {} is out of range 10..=60000",
                w.heartbeat_interval_ms
            ));
        }
        if !(1..=tablinum_proto::FLOW_TASKS_MAX).contains(&w.tasks_max) {
            return Err(format!(
                "[worker] tasks_max {} is out of range 1..={}",
                w.tasks_max,
                tablinum_proto::FLOW_TASKS_MAX
            ));
        }
        Ok(w)
    }
}

/// A task this worker runs.
struct Running {
    epoch: u64,
    ctl: Arc<TaskCtl>,
    handle: tokio::task::JoinHandle<Result<(), RunError>>,
    /// Records read at the previous report and when.
    last: (u64, Instant),
    rate: f64,
    /// Its lag as last looked up.
    lag: u64,
    /// When it started.
    started: Instant,
}

/// A flow this worker has prepared.
struct Prepared {
    definition: String,
    runner: Arc<Runner>,
}

/// Live figures of a worker, for its progress line.
#[derive(Debug, Default)]
pub struct WorkerStatus {
    /// Tasks running.
    pub tasks: std::sync::atomic::AtomicU64,
    /// Records read by every task since the worker started.
    pub records_in: std::sync::atomic::AtomicU64,
    /// Heartbeats the manager answered.
    pub heartbeats: std::sync::atomic::AtomicU64,
}

/// Runs the worker until `stop` is set: then its tasks commit what they
/// hold (bounded by [`STOP_WAIT_MS`]) and a last heartbeat lets the
/// manager give them to others at once.
pub async fn work(
    c: AsyncClient,
    cfg: WorkerConfig,
    stop: Arc<AtomicBool>,
    status: Arc<WorkerStatus>,
) -> Result<(), RunError> {
    let period = Duration::from_millis(cfg.heartbeat_interval_ms);
    let mut flows: HashMap<String, Prepared> = HashMap::new();
    let mut running: HashMap<(String, u32), Running> = HashMap::new();
    let mut lease_until: Option<Instant> = None;
    let mut warned = false;
    // Failing tasks (by `task_key`) and flows that failed to prepare (by
    // name) wait before they are tried again.
    let mut backoff: HashMap<String, Backoff> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        reap(&mut running, &status, &mut backoff).await;
        let reports = report(&c, &flows, &mut running).await;
        let sent = Instant::now();
        match c.worker_heartbeat(&cfg.id, cfg.tasks_max, reports).await {
            Ok(resp) => {
                if warned {
                    tracing::info!(worker = %cfg.id, "reached the manager again");
                    warned = false;
                }
                status.heartbeats.fetch_add(1, Ordering::Relaxed);
                let until = sent + Duration::from_millis(resp.lease_ms);
                lease_until = Some(until);
                let defs: HashMap<String, String> = resp
                    .flows
                    .into_iter()
                    .map(|f| (f.name, f.definition))
                    .collect();
                let mut listed = std::collections::HashSet::new();
                for l in resp.tasks {
                    listed.insert((l.flow.clone(), l.task));
                    let key = (l.flow.clone(), l.task);
                    if let Some(r) = running.get(&key) {
                        if r.epoch == l.epoch {
                            r.ctl.renew(until);
                        } else {
                            // Not ours at this epoch: end it, start the
                            // new one once it is gone.
                            r.ctl.stop.store(true, Ordering::Relaxed);
                        }
                        continue;
                    }
                    let Some(def) = defs.get(&l.flow) else {
                        continue;
                    };
                    if Backoff::waiting(&backoff, &task_key(&l.flow, l.task))
                        || Backoff::waiting(&backoff, &l.flow)
                    {
                        continue;
                    }
                    let runner = match prepared(&c, &cfg, &mut flows, &l.flow, def).await {
                        Ok(r) => {
                            backoff.remove(&l.flow);
                            r
                        }
                        Err(e) => {
                            let wait = Backoff::fail(&mut backoff, l.flow.clone(), Duration::ZERO);
                            tracing::warn!(flow = %l.flow, error = %e, wait_ms = wait, "cannot prepare the flow; trying again after the wait");
                            continue;
                        }
                    };
                    let ctl = TaskCtl::leased(until);
                    let (task, ctl2) = (l.task, ctl.clone());
                    let handle = tokio::spawn(async move { runner.run_task(task, ctl2).await });
                    tracing::info!(flow = %l.flow, task = l.task, epoch = l.epoch, "task started");
                    running.insert(
                        key,
                        Running {
                            epoch: l.epoch,
                            ctl,
                            handle,
                            last: (0, Instant::now()),
                            rate: 0.0,
                            lag: 0,
                            started: Instant::now(),
                        },
                    );
                }
                for (k, r) in &running {
                    if !listed.contains(k) && !r.ctl.stop.swap(true, Ordering::Relaxed) {
                        tracing::info!(flow = %k.0, task = k.1, "task taken away: committing and stopping");
                    }
                }
                flows.retain(|name, _| {
                    running.keys().any(|(f, _)| f == name) || defs.contains_key(name)
                });
                // Forget the backoff of what the manager no longer lists.
                let listed_keys: std::collections::HashSet<String> =
                    listed.iter().map(|(f, t)| task_key(f, *t)).collect();
                backoff.retain(|k, _| defs.contains_key(k) || listed_keys.contains(k));
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(worker = %cfg.id, error = %e, "heartbeat failed; tasks go on until their lease ends");
                    warned = true;
                }
                if lease_until.is_some_and(|u| Instant::now() >= u) {
                    for r in running.values() {
                        r.ctl.stop.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        status.tasks.store(running.len() as u64, Ordering::Relaxed);
        let wake = Instant::now() + period;
        while Instant::now() < wake && !stop.load(Ordering::Relaxed) {
            tokio::time::sleep(period.min(Duration::from_millis(50))).await;
        }
    }
    // Stopping: every task commits what it holds, then one heartbeat with
    // none lets the manager hand them out at once.
    for r in running.values() {
        r.ctl.stop.store(true, Ordering::Relaxed);
    }
    let deadline = Instant::now() + Duration::from_millis(STOP_WAIT_MS);
    while !running.is_empty() && Instant::now() < deadline {
        reap(&mut running, &status, &mut backoff).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    if running.is_empty() {
        let _ = c.worker_heartbeat(&cfg.id, 0, Vec::new()).await;
    }
    Ok(())
}

/// The runner of `flow`, prepared once per definition.
async fn prepared(
    c: &AsyncClient,
    cfg: &WorkerConfig,
    flows: &mut HashMap<String, Prepared>,
    name: &str,
    def: &str,
) -> Result<Arc<Runner>, String> {
    if let Some(p) = flows.get(name).filter(|p| p.definition == def) {
        return Ok(p.runner.clone());
    }
    let flow = Flow::parse(def).map_err(|e| format!("its definition does not check: {e}"))?;
    if flow.name != name {
        return Err(format!("its definition names flow {}", flow.name));
    }
    let flow = Arc::new(flow);
    let progress = progress_for(&flow);
    let runner = Runner::prepare(c.clone(), flow, RunOptions::new(cfg.root.clone()), progress)
        .await
        .map_err(|e| e.to_string())?;
    let runner = Arc::new(runner);
    flows.insert(
        name.to_string(),
        Prepared {
            definition: def.to_string(),
            runner: runner.clone(),
        },
    );
    Ok(runner)
}

/// Removes tasks that ended, logging why; a task that failed waits out its
/// backoff before it starts again.
async fn reap(
    running: &mut HashMap<(String, u32), Running>,
    status: &WorkerStatus,
    backoff: &mut HashMap<String, Backoff>,
) {
    let done: Vec<(String, u32)> = running
        .iter()
        .filter(|(_, r)| r.handle.is_finished())
        .map(|(k, _)| k.clone())
        .collect();
    for k in done {
        let r = running.remove(&k).expect("listed above");
        status
            .records_in
            .fetch_add(r.ctl.records_in.load(Ordering::Relaxed), Ordering::Relaxed);
        let key = task_key(&k.0, k.1);
        match r.handle.await {
            Ok(Ok(())) => {
                backoff.remove(&key);
                tracing::info!(flow = %k.0, task = k.1, "task stopped");
            }
            Ok(Err(e)) => {
                let wait = Backoff::fail(backoff, key, r.started.elapsed());
                tracing::warn!(flow = %k.0, task = k.1, error = %e, wait_ms = wait, "task ended; restarting after the wait");
            }
            Err(e) => {
                let wait = Backoff::fail(backoff, key, r.started.elapsed());
                tracing::error!(flow = %k.0, task = k.1, error = %e, wait_ms = wait, "task failed; restarting after the wait");
            }
        }
    }
}

/// One report per running task; lag from the source partition's head
/// (tablinum topics only), looked up within [`LAG_LOOKUP_BUDGET_MS`] for
/// all tasks together (past it, a task reports its previous lag).
async fn report(
    c: &AsyncClient,
    flows: &HashMap<String, Prepared>,
    running: &mut HashMap<(String, u32), Running>,
) -> Vec<TaskReport> {
    let mut out = Vec::with_capacity(running.len());
    let budget = Instant::now() + Duration::from_millis(LAG_LOOKUP_BUDGET_MS);
    for ((flow, task), r) in running.iter_mut() {
        let n = r.ctl.records_in.load(Ordering::Relaxed);
        let dt = r.last.1.elapsed().as_secs_f64();
        if dt > 0.0 {
            r.rate = (n - r.last.0) as f64 / dt;
        }
        r.last = (n, Instant::now());
        let position = r.ctl.position.load(Ordering::Relaxed);
        if let Some((topic, p)) = flows.get(flow).and_then(|f| f.runner.topic_of(*task)) {
            let left = budget.saturating_duration_since(Instant::now());
            if let Ok(Ok(h)) = tokio::time::timeout(left, c.topic_head(&topic, p)).await {
                r.lag = h.next.saturating_sub(position);
            }
        }
        let lag = r.lag;
        out.push(TaskReport {
            flow: flow.clone(),
            task: *task,
            epoch: r.epoch,
            position,
            records_in: n,
            records_per_sec: r.rate,
            lag,
            error: String::new(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_errors() {
        let w = WorkerConfig::parse("[worker]\ncluster_secret_file = \"s\"\n").unwrap();
        assert!(w.id.starts_with("worker-"));
        assert_eq!(w.tasks_max, TASKS_MAX_DEFAULT);
        for (text, want) in [
            ("[worker]\n", "cluster_secret_file is not set"),
            (
                "[worker]\ncluster_secret_file = \"s\"\ntasks_max = 0\n",
                "tasks_max 0",
            ),
            (
                "[worker]\ncluster_secret_file = \"s\"\nid = \"a b\"\n",
                "[worker] id",
            ),
            (
                "[worker]\ncluster_secret_file = \"s\"\nheartbeat_interval_ms = 1\n",
                "heartbeat_interval_ms 1",
            ),
            ("[worker]\nclustr_secret_file = \"s\"\n", "unknown field"),
            ("[tserver]\n", "unknown field"),
        ] {
            let e = WorkerConfig::parse(text).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }
}

#[cfg(test)]
mod backoff_tests {
    use super::*;

    #[test]
    fn restarts_back_off_exponentially_up_to_the_cap_and_reset_after_a_long_run() {
        assert_eq!(Backoff::wait_ms(1), RESTART_BACKOFF_MS_MIN);
        assert_eq!(Backoff::wait_ms(2), 2 * RESTART_BACKOFF_MS_MIN);
        assert_eq!(Backoff::wait_ms(3), 4 * RESTART_BACKOFF_MS_MIN);
        assert_eq!(Backoff::wait_ms(60), RESTART_BACKOFF_MS_MAX);
        assert_eq!(Backoff::wait_ms(u32::MAX), RESTART_BACKOFF_MS_MAX);
        let mut m = HashMap::new();
        let k = task_key("f", 3);
        assert!(!Backoff::waiting(&m, &k));
        assert_eq!(Backoff::fail(&mut m, k.clone(), Duration::ZERO), 500);
        assert!(Backoff::waiting(&m, &k));
        assert_eq!(Backoff::fail(&mut m, k.clone(), Duration::ZERO), 1_000);
        assert_eq!(Backoff::fail(&mut m, k.clone(), Duration::ZERO), 2_000);
        // It ran for the longest wait before failing: counting starts over.
        let long = Duration::from_millis(RESTART_BACKOFF_MS_MAX);
        assert_eq!(Backoff::fail(&mut m, k.clone(), long), 500);
        assert!(!Backoff::waiting(&m, &task_key("f", 4)));
    }
}
