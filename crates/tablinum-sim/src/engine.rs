//! The discrete-event simulation of one report row.
//!
//! Owns the simulated cluster: scan servers (k scan threads, a FIFO queue and
//! processor-shared CPU cores each), one tablet server (its own threads,
//! cores and co-located datanode), a shared storage tier (a FIFO resource
//! with c slots), closed-loop clients issuing scans back to back, and one
//! probe client measured as the report measured its single-thread probe.
//!
//! Every scan-server choice is made by `tablinum_dispatch::select` and every
//! busy decision by `tablinum_dispatch::TaskGate` — the real code, not a
//! model of it. A scan is split into batches of `batch_entries` returned
//! entries; each batch (a `continueScan`) re-enters the same server's queue
//! with the scan's busy timeout, and a busy batch sends the rest of the scan
//! to whatever server `select` picks next (a new session there).
//!
//! It must never read the wall clock, spawn threads or use a random source
//! other than its one seeded generator: the same inputs give the same output,
//! bit for bit. The number of events is bounded by [`EVENTS_MAX`].

use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;
use tablinum_dispatch::{
    select, Attempt, AttemptOutcome, BusyCheck, BusyTimeout, FirstPlanHeat, Profile, Profiles,
    Request, Selection, ServerCount, ServerSnapshot, TabletAttempts, Target, TaskGate, TaskState,
};

use crate::calibration::Calibration;
use crate::grid::{GridRow, ScanType};
use crate::stats::Summary;
use crate::workload::TestKind;

/// Hard cap on events processed per row; a row that hits it is `truncated`.
pub const EVENTS_MAX: u64 = 100_000_000;
/// Fewest scans in the fleet window: fleet statistics cover scans started
/// from the probe's start until the probe is done and at least this many
/// scans have started (a few lucky short probe scans must not leave the
/// fleet mean with a handful of samples).
pub const FLEET_WINDOW_SCANS_MIN: u64 = 1_500;
/// Scans the fleet must complete (per client) before the probe starts.
const WARMUP_SCANS_PER_CLIENT: u64 = 2;
/// Remaining CPU work (µs) at or below which a task counts as done.
const WORK_EPSILON_US: f64 = 1e-6;
const GROUP: &str = "default";
const NEVER: u64 = u64::MAX;

/// Which dispatch configuration the simulated clients use.
#[derive(Debug, Clone, PartialEq)]
pub enum Selector {
    /// The report's setup on Accumulo 2.1: a random server of the row's
    /// `initial` hashed servers, then any server, same busy timeout
    /// ([`Profiles::accumulo_2_1`]).
    Accumulo21,
    /// tablinum's built-in default profile ([`Profiles::builtin`]).
    TablinumDefault,
    /// Any profiles' default profile, under a name of your choice.
    Custom {
        /// Name printed in results.
        name: String,
        /// Profiles whose default profile is used.
        profiles: Profiles,
    },
}

impl Selector {
    /// The name printed in results: "accumulo-2.1", "tablinum-default" or the custom name.
    pub fn name(&self) -> &str {
        match self {
            Selector::Accumulo21 => "accumulo-2.1",
            Selector::TablinumDefault => "tablinum-default",
            Selector::Custom { name, .. } => name,
        }
    }

    /// The profile the clients use for `row`; `None` for tablet-server rows.
    pub fn profile_for(&self, row: &GridRow) -> Option<Profile> {
        if row.scan_type == ScanType::Immediate {
            return None;
        }
        Some(match self {
            Selector::Accumulo21 => {
                let initial = row.initial.unwrap_or(1);
                let timeout = row.busy_timeout_ms.unwrap_or(33);
                Profiles::accumulo_2_1(ServerCount::Count(initial), timeout)
                    .expect("report rows have valid Accumulo settings")
                    .default_profile()
                    .clone()
            }
            Selector::TablinumDefault => Profiles::builtin().default_profile().clone(),
            Selector::Custom { profiles, .. } => profiles.default_profile().clone(),
        })
    }
}

/// One simulated row, labelled `source = "simulated"`. Latency fields are
/// the probe's, as in the report; `fleet_*` fields cover every client's scans
/// (the probe's included) that started in the fleet window — from the
/// probe's first scan until it finished and at least
/// [`FLEET_WINDOW_SCANS_MIN`] scans started — each run to completion, so long scans are not
/// under-counted. Same distribution as the probe's, many more samples.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RowResult {
    /// "large", "grep", "grep5" or "small".
    pub test: TestKind,
    /// The report's row id.
    pub id: String,
    /// Always "simulated".
    pub source: &'static str,
    /// Selector name.
    pub selector: String,
    /// Scan servers simulated.
    pub sservers: Option<u32>,
    /// First-attempt candidate servers per tablet under the selector's profile.
    pub initial: Option<u32>,
    /// First-attempt busy timeout under the selector's profile, ms.
    pub busy_timeout_ms: Option<u64>,
    /// Tablet server or scan servers.
    pub scan_type: ScanType,
    /// Closed-loop clients besides the probe.
    pub concurrent: u32,
    /// Busy responses the probe received.
    pub busy_events: u64,
    /// Probe mean scan time, ms.
    pub avg_ms: f64,
    /// Probe standard deviation, ms.
    pub sd_ms: f64,
    /// Probe fastest scan, ms.
    pub min_ms: f64,
    /// Probe slowest scan, ms.
    pub max_ms: f64,
    /// Probe 99th percentile, ms.
    pub p99_ms: f64,
    /// Scans the probe completed.
    pub probe_scans: u64,
    /// Scans by all clients started in the fleet window.
    pub fleet_scans: u64,
    /// Their mean time, ms.
    pub fleet_avg_ms: f64,
    /// Their busy responses per scan.
    pub fleet_busy_per_scan: f64,
    /// The part of `fleet_busy_per_scan` that hit a continuation batch of a started session.
    pub fleet_continuation_busy_per_scan: f64,
    /// Sessions of window scans that paid the cold-cache penalty.
    pub cold_starts: u64,
    /// Distinct scan servers that served at least one batch of a window scan.
    pub servers_used: u32,
    /// Seed of the run.
    pub seed: u64,
    /// Simulated time at the end of the run, ms.
    pub simulated_ms: f64,
    /// Events processed.
    pub events: u64,
    /// True if the run stopped at [`EVENTS_MAX`] before the probe finished.
    pub truncated: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ev {
    /// Minimum warm-up time has passed.
    WarmupTimer,
    /// A client starts a new scan.
    StartScan(u32),
    /// A client asks the selector where to send (the rest of) its scan.
    Dispatch(u32),
    /// A client's batch request reaches its server.
    Arrive(u32),
    /// A queued task's busy deadline: (task, generation).
    BusyCheck(u32, u32),
    /// A storage read finished: (storage, task).
    StorageDone(u8, u32),
    /// The earliest CPU completion on a server, as last scheduled.
    CpuDone(u16),
}

/// Work sharing a server's CPU: a scan task on a scan thread, or the request
/// handling (Thrift, authorisation, file reservation, session) that precedes
/// queueing a client's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CpuJob {
    Task(u32),
    Request(u32),
}

/// A pending event, ordered by (time, sequence) only: earliest first in the
/// max-heap, and first scheduled first among equal times.
struct Scheduled {
    key: u128,
    ev: Ev,
}

impl PartialEq for Scheduled {
    fn eq(&self, other: &Self) -> bool {
        self.key == other.key
    }
}

impl Eq for Scheduled {}

impl PartialOrd for Scheduled {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Scheduled {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.key.cmp(&self.key)
    }
}

struct Task {
    gate: TaskGate,
    generation: u32,
    client: u32,
    server: u16,
    read: u64,
    returned: u64,
    new_session: bool,
    cpu_us: f64,
}

struct Client {
    tablet: usize,
    read_left: u64,
    returned_left: u64,
    batches_left: u64,
    history: Vec<Attempt>,
    started_us: u64,
    server: u16,
    busy_timeout: Option<BusyTimeout>,
    new_session: bool,
    in_window: bool,
    /// This client's first-plan heat per tablet (what a real client keeps).
    heat: Vec<FirstPlanHeat>,
    /// The current session came from the first plan, so its outcome feeds `heat`.
    first_plan_session: bool,
}

struct Server {
    threads: u32,
    cores: f64,
    held: u32,
    queue: VecDeque<u32>,
    cpu: Vec<(CpuJob, f64)>,
    cpu_at_us: u64,
    /// Time of the pending `CpuDone` event, `NEVER` if none. An event may
    /// fire early (jobs were added since); it then just reschedules.
    next_cpu_us: u64,
    tserver: bool,
    storage: u8,
    used_in_window: bool,
}

struct Storage {
    slots: u32,
    busy: u32,
    queue: VecDeque<(u32, u64)>,
}

struct Sim<'a> {
    now: u64,
    seq: u64,
    events: BinaryHeap<Scheduled>,
    processed: u64,
    rng: fastrand::Rng,
    cal: &'a Calibration,
    kind: TestKind,
    profile: Option<Profile>,
    snapshot: ServerSnapshot,
    names: Vec<String>,
    tablet_ids: Vec<Vec<u8>>,
    servers: Vec<Server>,
    /// Index of the first tablet server; tablet i is hosted by tablet server i % tservers.
    tserver_base: u16,
    tservers: u16,
    storage: Vec<Storage>,
    tasks: Vec<Task>,
    free: Vec<u32>,
    clients: Vec<Client>,
    last_read: Vec<u64>,
    scratch: Vec<CpuJob>,
    probe: u32,
    probe_scans: u64,
    probe_started: bool,
    probe_finished: bool,
    window_started: u64,
    window_closed: bool,
    /// Window scans still running; the run ends when the window is closed and this is 0.
    window_in_flight: u64,
    warm_time_passed: bool,
    fleet_completed: u64,
    warmup_scans: u64,
    probe_lat: Vec<f64>,
    probe_busy: u64,
    fleet_sum_ms: f64,
    fleet_count: u64,
    fleet_busy: u64,
    fleet_continuation_busy: u64,
    cold_starts: u64,
    done: bool,
}

/// Work per µs a server with `cores` physical cores completes with `n`
/// runnable tasks: one per core up to `cores`, then `smt_yield` more per
/// task on a core's second hardware thread (up to `cores` such tasks).
pub fn cpu_capacity(cores: f64, smt_yield: f64, n: usize) -> f64 {
    let n = n as f64;
    n.min(cores) + smt_yield * (n - cores).clamp(0.0, cores)
}

fn cpu_rate(cores: f64, smt_yield: f64, n: usize) -> f64 {
    cpu_capacity(cores, smt_yield, n) / n as f64
}

fn us_ceil(x: f64) -> u64 {
    x.max(0.0).ceil() as u64
}

impl<'a> Sim<'a> {
    fn new(
        row: &GridRow,
        profile: Option<Profile>,
        cal: &'a Calibration,
        seed: u64,
        probe_scans: u32,
    ) -> Sim<'a> {
        let n_ss = if profile.is_some() {
            row.sservers.unwrap_or(1) as usize
        } else {
            0
        };
        let names: Vec<String> = (0..n_ss).map(|i| format!("ss{i:03}")).collect();
        let snapshot = ServerSnapshot::with_group(GROUP, names.iter().cloned());
        let mut servers: Vec<Server> = (0..n_ss)
            .map(|_| Server {
                threads: cal.sserver_threads,
                cores: cal.sserver_cores,
                held: 0,
                queue: VecDeque::new(),
                cpu: Vec::new(),
                cpu_at_us: 0,
                next_cpu_us: NEVER,
                tserver: false,
                storage: 0,
                used_in_window: false,
            })
            .collect();
        let tservers = cal.tservers.max(1) as usize;
        for j in 0..tservers {
            servers.push(Server {
                threads: cal.tserver_threads,
                cores: cal.tserver_cores,
                held: 0,
                queue: VecDeque::new(),
                cpu: Vec::new(),
                cpu_at_us: 0,
                next_cpu_us: NEVER,
                tserver: true,
                storage: (1 + j) as u8,
                used_in_window: false,
            });
        }
        let tablets = row.test.tablets() as usize;
        let clients = (0..=row.concurrent)
            .map(|_| Client {
                tablet: 0,
                read_left: 0,
                returned_left: 0,
                batches_left: 0,
                history: Vec::new(),
                started_us: 0,
                server: 0,
                busy_timeout: None,
                new_session: true,
                in_window: false,
                heat: vec![FirstPlanHeat::default(); tablets],
                first_plan_session: false,
            })
            .collect();
        Sim {
            now: 0,
            seq: 0,
            events: BinaryHeap::new(),
            processed: 0,
            rng: fastrand::Rng::with_seed(seed),
            cal,
            kind: row.test,
            profile,
            snapshot,
            names,
            tablet_ids: (0..tablets)
                .map(|i| format!("1;t{i:02}").into_bytes())
                .collect(),
            tserver_base: n_ss as u16,
            tservers: tservers as u16,
            servers,
            storage: std::iter::once(cal.storage_slots)
                .chain(std::iter::repeat_n(cal.tserver_storage_slots, tservers))
                .map(|slots| Storage {
                    slots,
                    busy: 0,
                    queue: VecDeque::new(),
                })
                .collect(),
            tasks: Vec::new(),
            free: Vec::new(),
            clients,
            last_read: vec![NEVER; (n_ss + tservers) * tablets],
            scratch: Vec::new(),
            probe: row.concurrent,
            probe_scans: u64::from(probe_scans.max(1)),
            probe_started: false,
            probe_finished: false,
            window_started: 0,
            window_closed: false,
            window_in_flight: 0,
            warm_time_passed: false,
            fleet_completed: 0,
            warmup_scans: u64::from(row.concurrent) * WARMUP_SCANS_PER_CLIENT,
            probe_lat: Vec::new(),
            probe_busy: 0,
            fleet_sum_ms: 0.0,
            fleet_count: 0,
            fleet_busy: 0,
            fleet_continuation_busy: 0,
            cold_starts: 0,
            done: false,
        }
    }

    fn schedule(&mut self, at: u64, ev: Ev) {
        self.seq += 1;
        let key = (u128::from(at) << 64) | u128::from(self.seq);
        self.events.push(Scheduled { key, ev });
    }

    fn one_way_us(&self) -> u64 {
        self.cal.rpc_round_trip_us / 2
    }

    fn run(&mut self) {
        // Clients start spread over the first 100 ms so they do not move in lockstep.
        for c in 0..self.probe {
            let at = self.rng.u64(0..100_000);
            self.schedule(at, Ev::StartScan(c));
        }
        self.schedule(self.cal.warmup_ms * 1_000, Ev::WarmupTimer);
        while let Some(Scheduled { key, ev }) = self.events.pop() {
            self.now = (key >> 64) as u64;
            self.processed += 1;
            if self.processed > EVENTS_MAX {
                break;
            }
            match ev {
                Ev::WarmupTimer => {
                    self.warm_time_passed = true;
                    self.maybe_start_probe();
                }
                Ev::StartScan(c) => self.start_scan(c),
                Ev::Dispatch(c) => self.dispatch(c),
                Ev::Arrive(c) => self.arrive(c),
                Ev::BusyCheck(t, generation) => self.busy_check(t, generation),
                Ev::StorageDone(st, t) => self.storage_done(st, t),
                Ev::CpuDone(s) => self.cpu_done(s),
            }
            if self.done {
                break;
            }
        }
    }

    fn maybe_start_probe(&mut self) {
        if !self.probe_started && self.warm_time_passed && self.fleet_completed >= self.warmup_scans
        {
            self.probe_started = true;
            self.schedule(self.now, Ev::StartScan(self.probe));
        }
    }

    /// Closes the fleet window once the probe is done and enough scans have
    /// started in it; the run then drains the window's scans still in flight.
    fn maybe_close_window(&mut self) {
        if !self.window_closed
            && self.probe_finished
            && self.window_started >= FLEET_WINDOW_SCANS_MIN
        {
            self.window_closed = true;
        }
        if self.window_closed && self.window_in_flight == 0 {
            self.done = true;
        }
    }

    fn start_scan(&mut self, c: u32) {
        let entries = self.kind.sample(&mut self.rng);
        let tablet = self.rng.usize(0..self.tablet_ids.len());
        let batches = entries.returned.div_ceil(self.cal.batch_entries).max(1);
        let in_window = self.probe_started && !self.window_closed;
        if in_window {
            self.window_in_flight += 1;
            self.window_started += 1;
        }
        let cl = &mut self.clients[c as usize];
        cl.tablet = tablet;
        cl.read_left = entries.read;
        cl.returned_left = entries.returned;
        cl.batches_left = batches;
        cl.history.clear();
        cl.started_us = self.now;
        cl.in_window = in_window;
        self.dispatch(c);
    }

    fn dispatch(&mut self, c: u32) {
        let (server, busy_timeout, delay_us, first_plan) = match &self.profile {
            None => (self.host(c), None, 0, false),
            Some(profile) => {
                let cl = &self.clients[c as usize];
                let tablets = [TabletAttempts {
                    tablet: &self.tablet_ids[cl.tablet],
                    attempts: &cl.history,
                    heat: cl.heat[cl.tablet],
                }];
                let seed = self.rng.u64(..);
                let selection = select(&Request {
                    tablets: &tablets,
                    servers: &self.snapshot,
                    profile,
                    waited_for_servers_ms: 0,
                    seed,
                })
                .expect("the simulated group always has live servers");
                match selection {
                    Selection::Dispatch(d) => {
                        let delay_us = d.delay_ms.saturating_mul(1_000);
                        let first_plan = d.plan == 0;
                        match &d.targets[0] {
                            Target::ScanServer(id) => {
                                let s = self
                                    .names
                                    .binary_search(id)
                                    .expect("select returns a server of the snapshot");
                                (
                                    s as u16,
                                    BusyTimeout::from_ms(d.busy_timeout_ms).ok(),
                                    delay_us,
                                    first_plan,
                                )
                            }
                            Target::TabletServer => (self.host(c), None, delay_us, false),
                        }
                    }
                    Selection::WaitForServers { recheck_after_ms } => {
                        let at = self.now + recheck_after_ms * 1_000;
                        self.schedule(at, Ev::Dispatch(c));
                        return;
                    }
                }
            }
        };
        let cl = &mut self.clients[c as usize];
        cl.server = server;
        cl.busy_timeout = busy_timeout;
        cl.new_session = true;
        cl.first_plan_session = first_plan;
        let at = self.now + delay_us + self.one_way_us();
        self.schedule(at, Ev::Arrive(c));
    }

    /// The tablet server hosting client `c`'s current tablet.
    fn host(&self, c: u32) -> u16 {
        let tablet = self.clients[c as usize].tablet;
        self.tserver_base + (tablet % usize::from(self.tservers)) as u16
    }

    fn alloc(&mut self, mut task: Task) -> u32 {
        if let Some(i) = self.free.pop() {
            task.generation = self.tasks[i as usize].generation;
            self.tasks[i as usize] = task;
            i
        } else {
            self.tasks.push(task);
            (self.tasks.len() - 1) as u32
        }
    }

    fn release(&mut self, t: u32) {
        let task = &mut self.tasks[t as usize];
        task.generation = task.generation.wrapping_add(1);
        self.free.push(t);
    }

    /// A batch request reaches its server: the handler's CPU work comes
    /// first (paid even if the task later turns out busy), then the task is
    /// queued and its busy clock starts.
    fn arrive(&mut self, c: u32) {
        let s = self.clients[c as usize].server;
        let mut work = self.cal.request_cpu_us;
        if self.servers[s as usize].tserver {
            work *= self.cal.tserver_cpu_factor;
        }
        if work > 0.0 {
            self.cpu_add(s, CpuJob::Request(c), work);
        } else {
            self.enqueue(c);
        }
    }

    fn enqueue(&mut self, c: u32) {
        let cl = &self.clients[c as usize];
        let read = cl.read_left.div_ceil(cl.batches_left);
        let returned = cl.returned_left.div_ceil(cl.batches_left);
        let s = cl.server;
        let task = Task {
            gate: TaskGate::new(self.now, cl.busy_timeout),
            generation: 0,
            client: c,
            server: s,
            read,
            returned,
            new_session: cl.new_session,
            cpu_us: 0.0,
        };
        let t = self.alloc(task);
        self.servers[s as usize].queue.push_back(t);
        self.pump(s);
        let task = &self.tasks[t as usize];
        if task.gate.state() == TaskState::Queued {
            if let Some(deadline) = task.gate.busy_deadline_us() {
                let generation = task.generation;
                self.schedule(deadline, Ev::BusyCheck(t, generation));
            }
        }
    }

    /// Gives free scan threads to queued tasks; cancelled (busy) tasks are dropped unrun.
    fn pump(&mut self, s: u16) {
        loop {
            let srv = &mut self.servers[s as usize];
            if srv.held >= srv.threads {
                return;
            }
            let Some(t) = srv.queue.pop_front() else {
                return;
            };
            if !self.tasks[t as usize].gate.try_start() {
                self.release(t);
                continue;
            }
            srv.held += 1;
            self.begin(t);
        }
    }

    fn begin(&mut self, t: u32) {
        let cal = self.cal;
        let task = &self.tasks[t as usize];
        let s = task.server as usize;
        let tablet = self.clients[task.client as usize].tablet;
        let in_window = self.clients[task.client as usize].in_window;
        let read = task.read as f64;
        let returned = task.returned as f64;
        let mut setup_us = 0.0;
        let mut storage_us = read * cal.storage_entry_ns / 1_000.0;
        if task.new_session {
            setup_us += cal.scan_start_us;
            storage_us += cal.storage_seek_us;
            let key = s * self.tablet_ids.len() + tablet;
            let last = self.last_read[key];
            if last == NEVER || self.now - last > cal.cache_warm_ms * 1_000 {
                storage_us += cal.cold_start_us;
                if in_window {
                    self.cold_starts += 1;
                }
            }
        }
        let grep_ns = if self.kind.grep() {
            cal.grep_entry_ns
        } else {
            0.0
        };
        let read_us = read * (cal.entry_read_ns + grep_ns) / 1_000.0;
        let return_us = returned * cal.entry_returned_ns / 1_000.0;
        let srv = &mut self.servers[s];
        let cpu_us = if srv.tserver {
            (setup_us + read_us) * cal.tserver_cpu_factor + return_us * cal.tserver_return_factor
        } else {
            setup_us + read_us + return_us
        };
        if in_window && !srv.tserver {
            srv.used_in_window = true;
        }
        let storage = srv.storage;
        let key = s * self.tablet_ids.len() + tablet;
        self.last_read[key] = self.now;
        self.tasks[t as usize].cpu_us = cpu_us;
        if self.storage[storage as usize].slots > 0 && storage_us > 0.0 {
            self.storage_submit(storage, t, us_ceil(storage_us).max(1));
        } else {
            self.cpu_add(s as u16, CpuJob::Task(t), cpu_us);
        }
    }

    fn storage_submit(&mut self, st: u8, t: u32, us: u64) {
        let sto = &mut self.storage[st as usize];
        if sto.busy < sto.slots {
            sto.busy += 1;
            let at = self.now + us;
            self.schedule(at, Ev::StorageDone(st, t));
        } else {
            sto.queue.push_back((t, us));
        }
    }

    fn storage_done(&mut self, st: u8, t: u32) {
        let sto = &mut self.storage[st as usize];
        sto.busy -= 1;
        if let Some((next, us)) = sto.queue.pop_front() {
            sto.busy += 1;
            let at = self.now + us;
            self.schedule(at, Ev::StorageDone(st, next));
        }
        let task = &self.tasks[t as usize];
        let (s, cpu_us) = (task.server, task.cpu_us);
        self.cpu_add(s, CpuJob::Task(t), cpu_us);
    }

    /// Processor sharing: n running tasks share [`cpu_capacity`] equally.
    fn cpu_advance(&mut self, s: u16) {
        let now = self.now;
        let smt = self.cal.smt_yield;
        let srv = &mut self.servers[s as usize];
        if !srv.cpu.is_empty() {
            let rate = cpu_rate(srv.cores, smt, srv.cpu.len());
            let done = (now - srv.cpu_at_us) as f64 * rate;
            for e in &mut srv.cpu {
                e.1 -= done;
            }
        }
        srv.cpu_at_us = now;
    }

    fn cpu_reschedule(&mut self, s: u16) {
        let smt = self.cal.smt_yield;
        let srv = &mut self.servers[s as usize];
        if srv.cpu.is_empty() {
            return;
        }
        let rate = cpu_rate(srv.cores, smt, srv.cpu.len());
        let min = srv.cpu.iter().map(|e| e.1).fold(f64::INFINITY, f64::min);
        let at = self.now + us_ceil(min / rate);
        if at < srv.next_cpu_us {
            srv.next_cpu_us = at;
            self.schedule(at, Ev::CpuDone(s));
        }
    }

    fn cpu_add(&mut self, s: u16, job: CpuJob, work_us: f64) {
        self.cpu_advance(s);
        self.servers[s as usize].cpu.push((job, work_us));
        self.cpu_reschedule(s);
    }

    fn cpu_done(&mut self, s: u16) {
        if self.servers[s as usize].next_cpu_us != self.now {
            return; // superseded by an earlier event
        }
        self.servers[s as usize].next_cpu_us = NEVER;
        self.cpu_advance(s);
        let mut finished = std::mem::take(&mut self.scratch);
        finished.clear();
        self.servers[s as usize].cpu.retain(|&(job, left)| {
            if left <= WORK_EPSILON_US {
                finished.push(job);
                false
            } else {
                true
            }
        });
        for &job in &finished {
            match job {
                CpuJob::Task(t) => self.complete(t),
                CpuJob::Request(c) => self.enqueue(c),
            }
        }
        self.scratch = finished;
        self.cpu_reschedule(s);
        self.pump(s);
    }

    fn complete(&mut self, t: u32) {
        let task = &self.tasks[t as usize];
        let finished = task.gate.finish();
        debug_assert!(finished, "a completed task was running");
        let (s, c, read, returned) = (task.server, task.client, task.read, task.returned);
        let first_batch = task.new_session;
        self.servers[s as usize].held -= 1;
        self.release(t);
        let one_way = self.one_way_us();
        let round_trip = self.cal.rpc_round_trip_us;
        let cl = &mut self.clients[c as usize];
        if first_batch && cl.first_plan_session {
            let tablet = cl.tablet;
            cl.heat[tablet].record(false);
        }
        cl.read_left -= read;
        cl.returned_left -= returned;
        cl.batches_left -= 1;
        cl.new_session = false;
        if cl.batches_left > 0 {
            let at = self.now + round_trip;
            self.schedule(at, Ev::Arrive(c));
            return;
        }
        let end = self.now + one_way;
        let latency_ms = (end - cl.started_us) as f64 / 1_000.0;
        let was_in_window = cl.in_window;
        cl.in_window = false;
        self.fleet_completed += 1;
        if was_in_window {
            self.fleet_sum_ms += latency_ms;
            self.fleet_count += 1;
            self.window_in_flight -= 1;
        }
        let mut next = true;
        if c == self.probe {
            self.probe_lat.push(latency_ms);
            if self.probe_lat.len() as u64 >= self.probe_scans {
                self.probe_finished = true;
                next = false;
            }
        }
        if next {
            self.schedule(end, Ev::StartScan(c));
        }
        self.maybe_start_probe();
        self.maybe_close_window();
    }

    fn busy_check(&mut self, t: u32, generation: u32) {
        let task = &self.tasks[t as usize];
        if task.generation != generation {
            return;
        }
        match task.gate.check_busy(self.now) {
            BusyCheck::Started => {}
            BusyCheck::Waiting => {
                let at = task
                    .gate
                    .busy_deadline_us()
                    .unwrap_or(self.now)
                    .max(self.now + 1);
                self.schedule(at, Ev::BusyCheck(t, generation));
            }
            BusyCheck::Busy => {
                // The cancelled task stays queued until a thread pops and drops it.
                let (c, s, continuation) = (task.client, task.server, !task.new_session);
                let cl = &mut self.clients[c as usize];
                cl.history.push(Attempt {
                    server: self.names[s as usize].clone(),
                    outcome: AttemptOutcome::Busy,
                });
                if cl.first_plan_session {
                    let tablet = cl.tablet;
                    cl.heat[tablet].record(true);
                    cl.first_plan_session = false;
                }
                if cl.in_window {
                    self.fleet_busy += 1;
                    self.fleet_continuation_busy += u64::from(continuation);
                    if c == self.probe {
                        self.probe_busy += 1;
                    }
                }
                let at = self.now + self.one_way_us();
                self.schedule(at, Ev::Dispatch(c));
            }
        }
    }
}

fn per_scan(events: u64, scans: u64) -> f64 {
    if scans == 0 {
        0.0
    } else {
        events as f64 / scans as f64
    }
}

/// Simulates one report row with `selector`'s profile, and returns the
/// probe's statistics after `probe_scans` probe scans (labelled simulated).
///
/// The fleet starts at time 0; the probe starts once the calibration's
/// warm-up time has passed and the fleet has completed two scans per client.
pub fn run_row(
    row: &GridRow,
    selector: &Selector,
    calibration: &Calibration,
    seed: u64,
    probe_scans: u32,
) -> RowResult {
    let profile = selector.profile_for(row);
    let (initial, busy_timeout_ms) = match (&profile, row.sservers) {
        (Some(p), Some(n)) => (
            Some(p.attempts[0].servers.resolve(n as usize) as u32),
            Some(p.attempts[0].busy_timeout_ms),
        ),
        _ => (None, None),
    };
    let mut sim = Sim::new(row, profile, calibration, seed, probe_scans);
    sim.run();
    let probe = Summary::of(&sim.probe_lat);
    let servers_used = sim
        .servers
        .iter()
        .filter(|s| !s.tserver && s.used_in_window)
        .count() as u32;
    RowResult {
        test: row.test,
        id: row.id.to_string(),
        source: "simulated",
        selector: selector.name().to_string(),
        sservers: row.sservers,
        initial,
        busy_timeout_ms,
        scan_type: row.scan_type,
        concurrent: row.concurrent,
        busy_events: sim.probe_busy,
        avg_ms: probe.avg,
        sd_ms: probe.sd,
        min_ms: probe.min,
        max_ms: probe.max,
        p99_ms: probe.p99,
        probe_scans: probe.count as u64,
        fleet_scans: sim.fleet_count,
        fleet_avg_ms: if sim.fleet_count > 0 {
            sim.fleet_sum_ms / sim.fleet_count as f64
        } else {
            0.0
        },
        fleet_busy_per_scan: per_scan(sim.fleet_busy, sim.fleet_count),
        fleet_continuation_busy_per_scan: per_scan(sim.fleet_continuation_busy, sim.fleet_count),
        cold_starts: sim.cold_starts,
        servers_used,
        seed,
        simulated_ms: sim.now as f64 / 1_000.0,
        events: sim.processed,
        truncated: !sim.done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grid::report_grids;

    #[test]
    fn smt_capacity() {
        assert_eq!(cpu_capacity(4.0, 0.3, 1), 1.0);
        assert_eq!(cpu_capacity(4.0, 0.3, 4), 4.0);
        assert!((cpu_capacity(4.0, 0.3, 8) - 5.2).abs() < 1e-12);
        assert!((cpu_capacity(4.0, 0.3, 16) - 5.2).abs() < 1e-12);
        assert_eq!(cpu_rate(4.0, 0.3, 2), 1.0);
        assert!((cpu_rate(4.0, 0.3, 16) - 0.325).abs() < 1e-12);
    }

    #[test]
    fn tablet_server_rows_never_see_busy_and_use_no_scan_server() {
        let row = report_grids().into_iter().find(|r| r.id == "D816").unwrap();
        let r = run_row(
            &row,
            &Selector::TablinumDefault,
            &Calibration::default(),
            3,
            5,
        );
        assert_eq!(r.busy_events, 0);
        assert_eq!(r.fleet_busy_per_scan, 0.0);
        assert_eq!(r.servers_used, 0);
        assert_eq!(r.initial, None);
        assert_eq!(r.probe_scans, 5);
        assert!(!r.truncated);
    }

    #[test]
    fn busy_rule_sheds_load_from_the_initial_server() {
        // One initial server per tablet of 23, 33 ms (D819's setup): the
        // real busy rule must fire and the fleet must spread to every server.
        let row = report_grids().into_iter().find(|r| r.id == "D819").unwrap();
        let r = run_row(&row, &Selector::Accumulo21, &Calibration::default(), 5, 5);
        assert!(r.fleet_busy_per_scan > 0.2, "{r:?}");
        assert_eq!(r.servers_used, 23);
        assert_eq!(r.initial, Some(1));
    }
}
