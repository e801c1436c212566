//! Dataflows in the manager: submitted flows (kept durably as
//! `flow/<name>` records of the metadata store, docs/format.md), the live
//! workers from their heartbeats, and which worker holds which task under
//! which lease epoch.
//!
//! The placement rule ([`Flows::place`], pure: no I/O, no clock of its
//! own) keeps one invariant: **a task gets a new holder only when no live
//! worker reports running it**. A stopped flow, a balancing move and a
//! silent worker all first take the task away (its holder learns it at its
//! next heartbeat and stops, committing what it holds) and give it to
//! another only once the old holder no longer reports it — or was declared
//! dead a heartbeat timeout after its last heartbeat, which is later than
//! its lease ([`crate::config::ManagerConfig::lease_ms`]) lets it commit.
//! Each new holder gets the next epoch. The sinks' own position checks
//! (ARCHITECTURE.md, "Dataflow") keep exactly-once even if a holder
//! outlives its lease; the lease keeps two holders from working at once.
//!
//! Never parses a definition (the submitter and every worker check it).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use prost::Message;
use tablinum_proto::v1;

/// A flow as stored in the metadata (`flow/<name>`).
#[derive(Clone, PartialEq, Message)]
pub struct FlowRecord {
    /// The flow's name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its definition (TOML), as submitted.
    #[prost(string, tag = "2")]
    pub definition: String,
    /// Its tasks (sources × parallelism).
    #[prost(uint32, tag = "3")]
    pub tasks: u32,
    /// Running (tasks go to workers) or stopped.
    #[prost(bool, tag = "4")]
    pub running: bool,
    /// Per task: its holder ("": none).
    #[prost(string, repeated, tag = "5")]
    pub holders: Vec<String>,
    /// Per task: the epoch of its latest holder (0: never held).
    #[prost(uint64, repeated, tag = "6")]
    pub epochs: Vec<u64>,
}

impl FlowRecord {
    /// Checks a decoded record's shape (bytes from disk are hostile).
    pub fn check(&self) -> Result<(), String> {
        tablinum_proto::check_flow_name(&self.name)?;
        let n = self.tasks as usize;
        if self.tasks == 0
            || self.tasks > tablinum_proto::FLOW_TASKS_MAX
            || self.holders.len() != n
            || self.epochs.len() != n
        {
            return Err(format!(
                "flow {}: {} tasks with {} holders and {} epochs",
                self.name,
                self.tasks,
                self.holders.len(),
                self.epochs.len()
            ));
        }
        Ok(())
    }
}

/// One live worker.
#[derive(Debug)]
struct Worker {
    last: Instant,
    tasks_max: u32,
    /// (flow, task) it reported running at its last heartbeat.
    running: HashSet<(String, u32)>,
    /// (flow, task) the last answer to it leased: it may have started them
    /// since it reported.
    leased: HashSet<(String, u32)>,
}

/// A flow with its holders' latest reports.
#[derive(Debug)]
struct Entry {
    rec: FlowRecord,
    /// Per task: the holder's latest report and when it came.
    reports: Vec<Option<(v1::TaskReport, Instant)>>,
}

/// Flows and workers; guarded by the manager's state lock.
#[derive(Debug, Default)]
pub struct Flows {
    flows: BTreeMap<String, Entry>,
    workers: HashMap<String, Worker>,
}

impl Flows {
    /// Loads stored records. Their holders get one heartbeat timeout
    /// (from `now`) to report in before their tasks move.
    pub fn load(records: Vec<FlowRecord>, now: Instant) -> Flows {
        let mut f = Flows::default();
        for rec in records {
            for h in rec.holders.iter().filter(|h| !h.is_empty()) {
                let w = f.workers.entry(h.clone()).or_insert_with(|| Worker {
                    last: now,
                    tasks_max: u32::MAX,
                    running: HashSet::new(),
                    leased: HashSet::new(),
                });
                // It may still run them (its lease outlived the manager).
                for (t, holder) in rec.holders.iter().enumerate() {
                    if holder == h {
                        w.leased.insert((rec.name.clone(), t as u32));
                    }
                }
            }
            f.insert(rec);
        }
        f
    }

    fn insert(&mut self, rec: FlowRecord) {
        let reports = vec![None; rec.tasks as usize];
        self.flows.insert(rec.name.clone(), Entry { rec, reports });
    }

    /// Stores a submitted flow (running). Returns the record to persist,
    /// or none when it runs already with this definition. A changed task
    /// count is refused while any old task still runs.
    pub fn submit(
        &mut self,
        name: &str,
        definition: &str,
        tasks: u32,
    ) -> Result<Option<FlowRecord>, String> {
        if let Some(e) = self.flows.get_mut(name) {
            if e.rec.running && e.rec.definition == definition {
                return Ok(None);
            }
            if e.rec.running {
                return Err(format!(
                    "flow {name} is running with another definition: stop it first"
                ));
            }
            if e.rec.tasks != tasks {
                let busy = self
                    .workers
                    .values()
                    .any(|w| w.running.iter().any(|(f, _)| f == name));
                if busy {
                    return Err(format!(
                        "flow {name} changes its task count from {} to {tasks} while its old tasks still stop; try again in a moment",
                        e.rec.tasks
                    ));
                }
            }
        } else if self.flows.len() >= tablinum_proto::FLOWS_MAX {
            return Err(format!(
                "{} flows are submitted already (the most there may be)",
                tablinum_proto::FLOWS_MAX
            ));
        }
        let n = tasks as usize;
        let epochs = self
            .flows
            .get(name)
            .map(|e| e.rec.epochs.clone())
            .unwrap_or_default();
        let rec = FlowRecord {
            name: name.to_string(),
            definition: definition.to_string(),
            tasks,
            running: true,
            holders: vec![String::new(); n],
            // Epochs never go back, whatever the task count becomes.
            epochs: (0..n)
                .map(|i| epochs.get(i).copied().unwrap_or(0))
                .collect(),
        };
        self.insert(rec.clone());
        Ok(Some(rec))
    }

    /// Marks a flow stopped; returns the record to persist.
    pub fn stop(&mut self, name: &str) -> Result<FlowRecord, String> {
        let e = self
            .flows
            .get_mut(name)
            .ok_or_else(|| format!("no flow {name} is submitted"))?;
        e.rec.running = false;
        for h in &mut e.rec.holders {
            h.clear();
        }
        Ok(e.rec.clone())
    }

    /// Forgets a stopped flow none of whose tasks runs anywhere.
    pub fn drop_flow(&mut self, name: &str) -> Result<(), String> {
        let e = self
            .flows
            .get(name)
            .ok_or_else(|| format!("no flow {name} is submitted"))?;
        if e.rec.running {
            return Err(format!("flow {name} is running: stop it first"));
        }
        let busy = self
            .workers
            .values()
            .any(|w| w.running.iter().chain(&w.leased).any(|(f, _)| f == name));
        if busy {
            return Err(format!(
                "flow {name} still has tasks committing on their workers; try again in a moment"
            ));
        }
        self.flows.remove(name);
        Ok(())
    }

    /// Takes a worker's heartbeat: who it is and what it runs. Reports of
    /// tasks it holds at their current epoch are kept for the status.
    pub fn heartbeat(&mut self, hb: &v1::WorkerHeartbeatRequest, now: Instant) {
        let mut running = HashSet::new();
        for r in &hb.tasks {
            running.insert((r.flow.clone(), r.task));
            let Some(e) = self.flows.get_mut(&r.flow) else {
                continue;
            };
            let t = r.task as usize;
            if t < e.reports.len() && e.rec.holders[t] == hb.worker_id && e.rec.epochs[t] == r.epoch
            {
                e.reports[t] = Some((r.clone(), now));
            }
        }
        let w = self.workers.entry(hb.worker_id.clone()).or_insert_with(|| {
            tracing::info!(worker = %hb.worker_id, "flow worker joined");
            Worker {
                last: now,
                tasks_max: hb.tasks_max,
                running: HashSet::new(),
                leased: HashSet::new(),
            }
        });
        w.last = now;
        w.tasks_max = hb.tasks_max;
        w.running = running;
    }

    /// The tasks worker `id` must run, with the definitions of their
    /// flows; remembered as what it may run until its next heartbeat.
    pub fn leases(&mut self, id: &str) -> (Vec<v1::TaskLease>, Vec<v1::FlowDefinition>) {
        let mut tasks = Vec::new();
        let mut defs = Vec::new();
        for e in self.flows.values().filter(|e| e.rec.running) {
            let before = tasks.len();
            for (t, h) in e.rec.holders.iter().enumerate() {
                if h == id {
                    tasks.push(v1::TaskLease {
                        flow: e.rec.name.clone(),
                        task: t as u32,
                        epoch: e.rec.epochs[t],
                    });
                }
            }
            if tasks.len() > before {
                defs.push(v1::FlowDefinition {
                    name: e.rec.name.clone(),
                    definition: e.rec.definition.clone(),
                });
            }
        }
        if let Some(w) = self.workers.get_mut(id) {
            w.leased = tasks.iter().map(|l| (l.flow.clone(), l.task)).collect();
        }
        (tasks, defs)
    }

    /// One placement pass at `now`: forgets workers silent for `timeout`,
    /// takes tasks from stopped flows and dead workers, gives free tasks
    /// to the least-loaded live workers and moves one task when loads
    /// differ by more than one. Returns the records that changed (to
    /// persist).
    pub fn place(&mut self, now: Instant, timeout: Duration) -> Vec<FlowRecord> {
        let dead: Vec<String> = self
            .workers
            .iter()
            .filter(|(_, w)| now.saturating_duration_since(w.last) >= timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            tracing::info!(worker = %id, "flow worker silent for the heartbeat timeout; its tasks move");
            self.workers.remove(id);
        }
        let mut changed: HashSet<String> = HashSet::new();
        // Holders that are gone, and tasks of stopped flows.
        for e in self.flows.values_mut() {
            for h in &mut e.rec.holders {
                if !h.is_empty() && (!e.rec.running || !self.workers.contains_key(h)) {
                    h.clear();
                    changed.insert(e.rec.name.clone());
                }
            }
        }
        // Run somewhere, or leased and maybe started since the last report.
        let busy: HashSet<(String, u32)> = self
            .workers
            .values()
            .flat_map(|w| w.running.iter().chain(&w.leased).cloned())
            .collect();
        let mut load: HashMap<String, u32> = self.workers.keys().map(|k| (k.clone(), 0)).collect();
        for e in self.flows.values() {
            for h in e.rec.holders.iter().filter(|h| !h.is_empty()) {
                *load.entry(h.clone()).or_default() += 1;
            }
        }
        // Free tasks to the least-loaded worker with room.
        let mut moving = false;
        for e in self.flows.values_mut().filter(|e| e.rec.running) {
            for t in 0..e.rec.tasks as usize {
                if !e.rec.holders[t].is_empty() {
                    continue;
                }
                if busy.contains(&(e.rec.name.clone(), t as u32)) {
                    moving = true;
                    continue;
                }
                let Some(w) = least_loaded(&load, &self.workers) else {
                    continue;
                };
                *load.get_mut(&w).expect("a live worker") += 1;
                e.rec.epochs[t] += 1;
                e.rec.holders[t] = w;
                e.reports[t] = None;
                changed.insert(e.rec.name.clone());
            }
        }
        // One balancing move at a time: take a task from the busiest
        // worker when it holds two more than the idlest.
        if !moving {
            let max = load
                .iter()
                .max_by_key(|(id, n)| (**n, std::cmp::Reverse((*id).clone())));
            let min = load.values().min().copied();
            if let (Some((from, &hi)), Some(lo)) = (max, min) {
                if hi > lo + 1 {
                    let from = from.clone();
                    if let Some(e) = self
                        .flows
                        .values_mut()
                        .find(|e| e.rec.running && e.rec.holders.contains(&from))
                    {
                        let t = e
                            .rec
                            .holders
                            .iter()
                            .rposition(|h| *h == from)
                            .expect("found above");
                        tracing::info!(flow = %e.rec.name, task = t, from = %from, "moving a flow task to balance workers");
                        e.rec.holders[t].clear();
                        changed.insert(e.rec.name.clone());
                    }
                }
            }
        }
        changed
            .into_iter()
            .filter_map(|n| self.flows.get(&n).map(|e| e.rec.clone()))
            .collect()
    }

    /// Every flow with its tasks, for `ListFlows`, the status page and
    /// `/metrics`.
    pub fn statuses(&self, now: Instant) -> Vec<v1::FlowStatus> {
        self.flows
            .values()
            .map(|e| v1::FlowStatus {
                name: e.rec.name.clone(),
                running: e.rec.running,
                definition: e.rec.definition.clone(),
                tasks: (0..e.rec.tasks as usize)
                    .map(|t| {
                        let (report, last) = match &e.reports[t] {
                            Some((r, at)) if !e.rec.holders[t].is_empty() => (
                                Some(r.clone()),
                                now.saturating_duration_since(*at).as_millis() as u64,
                            ),
                            _ => (None, 0),
                        };
                        v1::TaskStatus {
                            task: t as u32,
                            worker: e.rec.holders[t].clone(),
                            epoch: e.rec.epochs[t],
                            report,
                            last_report_ms: last,
                        }
                    })
                    .collect(),
            })
            .collect()
    }

    /// Live workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }
}

/// The live worker with the fewest tasks that has room for one more (ties:
/// the smallest id, so a pass is deterministic).
fn least_loaded(load: &HashMap<String, u32>, workers: &HashMap<String, Worker>) -> Option<String> {
    workers
        .iter()
        .filter(|(id, w)| load.get(*id).copied().unwrap_or(0) < w.tasks_max)
        .min_by_key(|(id, _)| (load.get(*id).copied().unwrap_or(0), (*id).clone()))
        .map(|(id, _)| id.clone())
}

/// Checks a worker heartbeat's fields (bytes from the network).
pub fn check_worker_heartbeat(hb: &v1::WorkerHeartbeatRequest) -> Result<(), String> {
    tablinum_proto::check_server_id(&hb.worker_id)?;
    if hb.tasks.len() > tablinum_proto::FLOW_TASKS_MAX as usize {
        return Err(format!(
            "{} task reports; at most {} are allowed",
            hb.tasks.len(),
            tablinum_proto::FLOW_TASKS_MAX
        ));
    }
    for r in &hb.tasks {
        tablinum_proto::check_flow_name(&r.flow)?;
        if r.error.len() > 4096 {
            return Err("a task report's error is longer than 4096 bytes".into());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hb(id: &str, tasks_max: u32, running: &[(&str, u32, u64)]) -> v1::WorkerHeartbeatRequest {
        v1::WorkerHeartbeatRequest {
            worker_id: id.into(),
            tasks_max,
            tasks: running
                .iter()
                .map(|(f, t, e)| v1::TaskReport {
                    flow: (*f).into(),
                    task: *t,
                    epoch: *e,
                    ..Default::default()
                })
                .collect(),
        }
    }

    const T: Duration = Duration::from_secs(3);

    /// What worker `w` is told to run (as its heartbeat's answer).
    fn held(f: &mut Flows, w: &str) -> Vec<(u32, u64)> {
        f.leases(w).0.iter().map(|l| (l.task, l.epoch)).collect()
    }

    #[test]
    fn a_task_moves_only_once_its_old_holder_let_go() {
        let t0 = Instant::now();
        let mut f = Flows::default();
        f.submit("s", "def", 4).unwrap();
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.place(t0, T);
        assert_eq!(held(&mut f, "a"), vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
        // A second worker: one task is taken from `a`, not given to `b`
        // while `a` still runs it.
        let run_a = [("s", 0, 1), ("s", 1, 1), ("s", 2, 1), ("s", 3, 1)];
        f.heartbeat(&hb("a", 64, &run_a), t0);
        f.heartbeat(&hb("b", 64, &[]), t0);
        f.place(t0, T);
        assert_eq!(held(&mut f, "a").len(), 3);
        assert!(held(&mut f, "b").is_empty());
        f.place(t0, T);
        assert!(held(&mut f, "b").is_empty(), "a still runs the task");
        // `a` stopped it: now `b` gets it at the next epoch.
        f.heartbeat(&hb("a", 64, &run_a[..3]), t0);
        f.place(t0, T);
        assert_eq!(held(&mut f, "b"), vec![(3, 2)]);
        assert_eq!(
            held(&mut f, "a").len(),
            2,
            "3 and 1 differ by 2: one more moves"
        );
        f.place(t0, T);
        assert!(held(&mut f, "b").len() == 1, "not before a lets go of it");
    }

    #[test]
    fn a_task_leased_but_not_reported_yet_is_not_given_away() {
        let t0 = Instant::now();
        let mut f = Flows::default();
        f.submit("s", "def", 2).unwrap();
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.place(t0, T);
        // `a` got both and starts them; it has not reported them yet.
        assert_eq!(held(&mut f, "a").len(), 2);
        f.heartbeat(&hb("b", 64, &[]), t0);
        f.place(t0, T);
        assert!(held(&mut f, "b").is_empty());
        f.place(t0, T);
        assert!(
            held(&mut f, "b").is_empty(),
            "a may run it: it was leased to a"
        );
        // `a` hears it lost the task, and then reports it no longer runs it.
        assert_eq!(held(&mut f, "a").len(), 1);
        f.heartbeat(&hb("a", 64, &[("s", 0, 1), ("s", 1, 1)]), t0);
        f.place(t0, T);
        assert!(held(&mut f, "b").is_empty(), "a still runs it");
        f.heartbeat(&hb("a", 64, &[("s", 0, 1)]), t0);
        f.place(t0, T);
        assert_eq!(held(&mut f, "b"), vec![(1, 2)]);
    }

    #[test]
    fn a_silent_worker_loses_its_tasks_after_the_timeout() {
        let t0 = Instant::now();
        let mut f = Flows::default();
        f.submit("s", "def", 2).unwrap();
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.place(t0, T);
        f.heartbeat(&hb("a", 64, &[("s", 0, 1), ("s", 1, 1)]), t0);
        f.heartbeat(&hb("b", 1, &[]), t0 + T / 2);
        f.place(t0 + T / 2, T);
        f.heartbeat(&hb("b", 1, &[]), t0 + T);
        let changed = f.place(t0 + T, T);
        assert_eq!(changed.len(), 1);
        assert_eq!(f.workers(), 1);
        // b has room for one task only; the other waits.
        assert_eq!(held(&mut f, "b").len(), 1);
        assert_eq!(held(&mut f, "b")[0].1, 2);
        let st = f.statuses(t0 + T);
        assert_eq!(
            st[0].tasks.iter().filter(|t| t.worker.is_empty()).count(),
            1
        );
    }

    #[test]
    fn stop_takes_tasks_away_and_submit_starts_again_with_new_epochs() {
        let t0 = Instant::now();
        let mut f = Flows::default();
        assert!(f.submit("s", "def", 1).unwrap().is_some());
        assert!(
            f.submit("s", "def", 1).unwrap().is_none(),
            "same definition: no change"
        );
        assert!(
            f.submit("s", "other", 1).is_err(),
            "running with another definition"
        );
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.place(t0, T);
        f.heartbeat(&hb("a", 64, &[("s", 0, 1)]), t0);
        f.stop("s").unwrap();
        assert!(held(&mut f, "a").is_empty());
        assert!(f.submit("s", "def", 2).is_err(), "the old task still runs");
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.submit("s", "def", 2).unwrap();
        f.place(t0, T);
        assert_eq!(held(&mut f, "a"), vec![(0, 2), (1, 1)]);
        assert!(f.stop("nope").is_err());
        // Dropping: only stopped flows none of whose tasks still runs.
        assert!(f.drop_flow("s").unwrap_err().contains("stop it first"));
        f.heartbeat(&hb("a", 64, &[("s", 0, 2)]), t0);
        f.stop("s").unwrap();
        assert!(f.drop_flow("s").unwrap_err().contains("try again"));
        f.heartbeat(&hb("a", 64, &[]), t0);
        f.leases("a");
        f.drop_flow("s").unwrap();
        assert!(f.statuses(t0).is_empty());
        assert!(f.drop_flow("s").unwrap_err().contains("no flow s"));
    }

    #[test]
    fn loaded_holders_report_in_before_their_tasks_move() {
        let t0 = Instant::now();
        let rec = FlowRecord {
            name: "s".into(),
            definition: "d".into(),
            tasks: 1,
            running: true,
            holders: vec!["a".into()],
            epochs: vec![5],
        };
        rec.check().unwrap();
        let mut f = Flows::load(vec![rec], t0);
        f.heartbeat(&hb("b", 64, &[]), t0 + T / 2);
        f.place(t0 + T / 2, T);
        assert_eq!(held(&mut f, "a"), vec![(0, 5)]);
        f.heartbeat(&hb("b", 64, &[]), t0 + T);
        f.place(t0 + T, T);
        assert_eq!(held(&mut f, "b"), vec![(0, 6)]);
        let bad = FlowRecord {
            tasks: 2,
            ..FlowRecord::default()
        };
        assert!(bad.check().is_err());
    }
}
