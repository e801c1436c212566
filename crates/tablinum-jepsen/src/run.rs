//! One test run: a process cluster, concurrent clients reading and writing
//! unique values on a small set of registers (keys), a nemesis on a
//! schedule, the recorded history, and the report: linearizability per key,
//! lost acknowledged writes, and unavailability per nemesis kind.
//!
//! Owns the schedule and the analysis. Every loop is bounded by the run's
//! duration; the cluster is healed and every key read once more at the end
//! (those reads join the history, so a lost acknowledged write is a
//! linearizability violation and is also reported by name).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::{Rng, RngExt, SeedableRng};
use serde::Serialize;
use tablinum_client::{Client, ClientConfig, Credential, Durability, Error, Split};

use crate::checker::{self, Kind, Op, Verdict};
use crate::cluster::Cluster;

/// What to run.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// The `tablinum` binary.
    pub bin: PathBuf,
    /// Working directory (cluster data, logs, history).
    pub dir: PathBuf,
    /// Length of the history, s.
    pub seconds: u64,
    /// Seed of the clients' choices and (long mode) the nemesis.
    pub seed: u64,
    /// Client threads.
    pub clients: usize,
    /// Registers (keys), spread over `keys / 2` tablets.
    pub keys: usize,
    /// Tablet servers.
    pub tservers: usize,
    /// The manager's heartbeat timeout, ms.
    pub heartbeat_timeout_ms: u64,
    /// The fault kinds the nemesis draws from (empty: every kind).
    pub faults: Vec<Fault>,
}

/// The kinds of fault the nemesis injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Fault {
    /// SIGKILL a tablet server and start it again at once.
    KillTserverRestart,
    /// SIGKILL a tablet server; start it again only later.
    KillTserver,
    /// SIGSTOP a tablet server beyond the heartbeat timeout, then SIGCONT.
    PauseTserver,
    /// SIGKILL the manager and start it again.
    KillManager,
    /// SIGSTOP the manager for a while, then SIGCONT.
    PauseManager,
    /// Every journal fsync of a tablet server fails for a while, and what
    /// was not synced is lost (the device dropped it).
    FsyncLost,
    /// Every journal fsync of a tablet server fails for a while; the
    /// unsynced bytes stay in the page cache.
    FsyncFail,
    /// A tablet server's disk is full for a while.
    DiskFull,
    /// Every journal append and fsync of a tablet server takes 1.5 s more
    /// for a while.
    SlowDisk,
    /// A tablet server is cut off from the manager (both ways) beyond the
    /// heartbeat timeout, while clients still reach it.
    PartitionTserver,
}

impl Fault {
    /// Every kind, in the order the short schedule uses.
    pub const ALL: [Fault; 10] = [
        Fault::KillTserverRestart,
        Fault::KillTserver,
        Fault::PauseTserver,
        Fault::KillManager,
        Fault::PauseManager,
        Fault::FsyncLost,
        Fault::FsyncFail,
        Fault::DiskFull,
        Fault::SlowDisk,
        Fault::PartitionTserver,
    ];

    /// The unavailability target for this kind, ms (the targets;
    /// a disk fault's window runs from its start, so its own length
    /// counts too).
    pub fn target_ms(self, heartbeat_timeout_ms: u64) -> u64 {
        match self {
            Fault::KillTserverRestart => 2_000,
            Fault::KillTserver | Fault::PauseTserver | Fault::PartitionTserver => {
                heartbeat_timeout_ms + 2_000
            }
            Fault::KillManager | Fault::PauseManager => 1_000,
            Fault::FsyncLost | Fault::FsyncFail | Fault::DiskFull | Fault::SlowDisk => {
                self.disk_fault_ms() + heartbeat_timeout_ms + 2_000
            }
        }
    }

    /// How long a disk fault lasts, ms (0: not a disk fault).
    fn disk_fault_ms(self) -> u64 {
        match self {
            Fault::FsyncLost | Fault::FsyncFail => 1_000,
            Fault::DiskFull => 2_000,
            Fault::SlowDisk => 4_000,
            _ => 0,
        }
    }

    /// The kind named `s` (kebab case, as `--faults` takes it).
    pub fn parse(s: &str) -> Result<Fault, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Fault::ALL.iter().map(|f| f.name()).collect();
                format!("unknown fault {s:?}; the kinds: {}", names.join(", "))
            })
    }

    /// Its name in kebab case.
    pub fn name(self) -> &'static str {
        match self {
            Fault::KillTserverRestart => "kill-tserver-restart",
            Fault::KillTserver => "kill-tserver",
            Fault::PauseTserver => "pause-tserver",
            Fault::KillManager => "kill-manager",
            Fault::PauseManager => "pause-manager",
            Fault::FsyncLost => "fsync-lost",
            Fault::FsyncFail => "fsync-fail",
            Fault::DiskFull => "disk-full",
            Fault::SlowDisk => "slow-disk",
            Fault::PartitionTserver => "partition-tserver",
        }
    }

    /// The tablet server's fault command for a disk fault.
    fn disk_command(self) -> Option<&'static str> {
        match self {
            Fault::FsyncLost => Some("fsync-fail lose"),
            Fault::FsyncFail => Some("fsync-fail"),
            Fault::DiskFull => Some("disk-full"),
            Fault::SlowDisk => Some("slow 1500"),
            _ => None,
        }
    }
}

/// One fault as injected.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    /// Kind.
    pub fault: Fault,
    /// Which process (0: manager, 1..: tablet servers).
    pub process: usize,
    /// Start, ms since the run began.
    pub start_ms: u64,
    /// When it was healed, ms since the run began.
    pub end_ms: u64,
}

/// One operation of the history.
#[derive(Debug, Clone, Serialize)]
pub struct Event {
    /// Client thread.
    pub process: usize,
    /// Register.
    pub key: usize,
    /// `true`: write of `value`; `false`: read (returning `value`).
    pub write: bool,
    /// Written or read value (`None`: read found nothing).
    pub value: Option<u64>,
    /// Invocation, µs since the run began.
    pub invoke_us: u64,
    /// Completion, µs since the run began.
    pub complete_us: u64,
    /// `ok`, `fail` (certainly not applied) or `unknown`.
    pub outcome: &'static str,
    /// The error, when not ok.
    pub error: Option<String>,
}

/// Unavailability during one kind of fault.
#[derive(Debug, Clone, Serialize)]
pub struct Unavailability {
    /// Kind.
    pub fault: Fault,
    /// Times injected.
    pub injected: usize,
    /// Longest gap with no successful operation on any one tablet within
    /// each fault's window (from its start until the heartbeat timeout +
    /// 3 s after it was healed, or the next fault), ms. Clients are closed
    /// loops, so a client blocked on a dead tablet also stops working on
    /// others: this is an upper bound.
    pub longest_gap_ms: u64,
    /// The target, ms.
    pub target_ms: u64,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// Seed.
    pub seed: u64,
    /// Length of the history, s.
    pub seconds: u64,
    /// Operations invoked.
    pub operations: usize,
    /// Of those, ok / fail / unknown.
    pub ok: usize,
    /// Certainly not applied.
    pub failed: usize,
    /// Outcome unknown.
    pub unknown: usize,
    /// Keys whose history is not linearizable (with an operation index).
    pub violations: Vec<(usize, usize)>,
    /// Keys the checker gave up on.
    pub undecided: Vec<usize>,
    /// Acknowledged writes whose key's final value is older (by name).
    pub lost: Vec<String>,
    /// Unavailability per fault kind.
    pub unavailability: Vec<Unavailability>,
    /// Successful operations per second of the run.
    pub ok_per_second: Vec<u64>,
    /// The faults as injected.
    pub faults: Vec<Injected>,
}

impl Report {
    /// Whether the history is linearizable and nothing acknowledged was lost.
    pub fn safe(&self) -> bool {
        self.violations.is_empty() && self.undecided.is_empty() && self.lost.is_empty()
    }

    /// The report as text.
    pub fn text(&self) -> String {
        let mut s = format!(
            "jepsen: seed {} | {} s | {} operations: {} ok, {} failed, {} unknown\n",
            self.seed, self.seconds, self.operations, self.ok, self.failed, self.unknown
        );
        s += &format!(
            "linearizable per key: {} | lost acknowledged writes: {}\n",
            if self.violations.is_empty() && self.undecided.is_empty() {
                "yes".to_string()
            } else {
                format!(
                    "NO (violations {:?}, undecided {:?})",
                    self.violations, self.undecided
                )
            },
            self.lost.len()
        );
        s += "fault                 injected  longest gap (ms)  target (ms)\n";
        for u in &self.unavailability {
            s += &format!(
                "{:<21} {:>8}  {:>16}  {:>11}{}\n",
                format!("{:?}", u.fault),
                u.injected,
                u.longest_gap_ms,
                u.target_ms,
                if u.longest_gap_ms <= u.target_ms {
                    ""
                } else {
                    "  MISSED"
                }
            );
        }
        s += &format!("ok operations per second: {:?}\n", self.ok_per_second);
        s
    }
}

/// The tablet of key `k` (two registers per tablet).
fn tablet_of(k: usize) -> usize {
    k / 2
}

fn key_name(k: usize) -> Vec<u8> {
    format!("r{k:03}").into_bytes()
}

/// The fault schedule: in short mode every kind once, in order; then (and
/// in long mode) random kinds. Each entry: (start after, kind, duration).
fn schedule(cfg: &RunConfig, rng: &mut impl Rng) -> Vec<(Duration, Fault, Duration)> {
    let t = cfg.heartbeat_timeout_ms;
    let dur = |f: Fault| match f {
        Fault::KillTserverRestart => Duration::from_millis(300),
        Fault::KillTserver => Duration::from_millis(t + 3_000),
        Fault::PauseTserver | Fault::PartitionTserver => Duration::from_millis(t + 2_000),
        Fault::KillManager => Duration::from_millis(1_000),
        Fault::PauseManager => Duration::from_millis(3_000),
        f => Duration::from_millis(f.disk_fault_ms()),
    };
    let kinds: &[Fault] = if cfg.faults.is_empty() {
        &Fault::ALL
    } else {
        &cfg.faults
    };
    let mut v = Vec::new();
    let mut at = Duration::from_secs(2);
    let end = Duration::from_secs(cfg.seconds);
    let mut i = 0;
    loop {
        let f = if i < kinds.len() {
            kinds[i]
        } else {
            kinds[rng.random_range(0..kinds.len())]
        };
        let d = dur(f);
        if at + d + Duration::from_secs(1) > end {
            break;
        }
        v.push((at, f, d));
        // Quiet time after each fault lets the cluster settle.
        at += d + Duration::from_millis(2_500);
        i += 1;
    }
    v
}

/// Runs the test.
pub fn run(cfg: &RunConfig) -> Result<Report, String> {
    let mut cluster = Cluster::start(&cfg.bin, &cfg.dir, cfg.tservers, cfg.heartbeat_timeout_ms)?;
    let admin = tablinum_auth::files::load_token_file(&cluster.admin_token_file())
        .map_err(|e| e.to_string())?;
    let client_cfg = |admin: &Credential| ClientConfig {
        retry_deadline: Duration::from_secs(10),
        ..ClientConfig::with_credential(Some(admin.clone()))
    };
    let setup = Client::connect_with(&cluster.manager, client_cfg(&admin))
        .map_err(|e| format!("connect: {e}"))?;
    let t0 = Instant::now();
    while setup.status().map_or(0, |s| s.servers.len()) < cfg.tservers {
        if t0.elapsed() > Duration::from_secs(30) {
            return Err("tablet servers did not join".into());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let splits: Vec<Vec<u8>> = (1..cfg.keys.div_ceil(2)).map(|t| key_name(t * 2)).collect();
    setup
        .create_table("jepsen", Split::Points(splits), Durability::Sync)
        .map_err(|e| format!("create table: {e}"))?;
    for k in 0..cfg.keys {
        // Wait until every tablet is writable (value 0 is everyone's start).
        let t0 = Instant::now();
        while setup.put("jepsen", &key_name(k), b"0").is_err() {
            if t0.elapsed() > Duration::from_secs(30) {
                return Err(format!("key {k} never became writable"));
            }
        }
    }

    let start = Instant::now();
    let since = move || u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
    let history: Arc<Mutex<Vec<Event>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for p in 0..cfg.clients {
        let (history, stop, admin, manager) = (
            history.clone(),
            stop.clone(),
            admin.clone(),
            cluster.manager.clone(),
        );
        let c = Client::connect_with(&manager, client_cfg(&admin))
            .map_err(|e| format!("connect: {e}"))?;
        let keys = cfg.keys;
        let seed = cfg.seed.wrapping_add(p as u64 + 1);
        workers.push(std::thread::spawn(move || {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut counter = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let key = rng.random_range(0..keys);
                let write = rng.random_bool(0.5);
                let invoke_us = since();
                let (value, outcome, error) = if write {
                    counter += 1;
                    let v = (p as u64 + 1) * 1_000_000_000 + counter;
                    match c.put("jepsen", &key_name(key), v.to_string().as_bytes()) {
                        Ok(_) => (Some(v), "ok", None),
                        // Refused before anything was applied: bad input,
                        // or RESOURCE_EXHAUSTED (a full disk).
                        Err(
                            e @ (Error::InvalidArgument(_)
                            | Error::PermissionDenied(_)
                            | Error::Busy(_)),
                        ) => (Some(v), "fail", Some(e.to_string())),
                        // Anything else may have been applied.
                        Err(e) => (Some(v), "unknown", Some(e.to_string())),
                    }
                } else {
                    match c.get("jepsen", &key_name(key)) {
                        Ok(v) => (
                            v.and_then(|b| String::from_utf8(b).ok()?.parse().ok()),
                            "ok",
                            None,
                        ),
                        Err(e) => (None, "fail", Some(e.to_string())),
                    }
                };
                history.lock().expect("history").push(Event {
                    process: p,
                    key,
                    write,
                    value,
                    invoke_us,
                    complete_us: since(),
                    outcome,
                    error,
                });
            }
        }));
    }

    // The nemesis, on this thread.
    let mut rng = rand::rngs::StdRng::seed_from_u64(cfg.seed);
    let plan = schedule(cfg, &mut rng);
    let mut faults = Vec::new();
    let mut nemesis_error = None;
    for (at, fault, dur) in plan {
        if let Some(d) = at.checked_sub(start.elapsed()) {
            std::thread::sleep(d);
        }
        let target = match fault {
            Fault::KillManager | Fault::PauseManager => 0,
            _ => 1 + rng.random_range(0..cfg.tservers),
        };
        let begin = start.elapsed();
        let r = match fault {
            Fault::KillTserverRestart | Fault::KillTserver | Fault::KillManager => {
                cluster.kill(target).and_then(|()| {
                    std::thread::sleep(dur);
                    cluster.restart(target)
                })
            }
            Fault::PauseTserver | Fault::PauseManager => cluster.pause(target).and_then(|()| {
                std::thread::sleep(dur);
                cluster.resume(target)
            }),
            Fault::PartitionTserver => cluster.partition(target, true).and_then(|()| {
                std::thread::sleep(dur);
                cluster.partition(target, false)
            }),
            Fault::FsyncLost | Fault::FsyncFail | Fault::DiskFull | Fault::SlowDisk => {
                let cmd = fault.disk_command().unwrap_or("heal");
                cluster.disk(target, cmd).and_then(|()| {
                    std::thread::sleep(dur);
                    cluster.disk(target, "heal")
                })
            }
        };
        faults.push(Injected {
            fault,
            process: target,
            start_ms: begin.as_millis() as u64,
            end_ms: start.elapsed().as_millis() as u64,
        });
        if let Err(e) = r {
            nemesis_error = Some(e);
            break;
        }
    }
    if let Some(d) = Duration::from_secs(cfg.seconds).checked_sub(start.elapsed()) {
        std::thread::sleep(d);
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join()
            .map_err(|_| "a client thread panicked".to_string())?;
    }
    cluster.heal()?;
    if let Some(e) = nemesis_error {
        return Err(format!("nemesis: {e}"));
    }
    // Final reads, after healing, join the history.
    let mut history = std::mem::take(&mut *history.lock().expect("history"));
    for k in 0..cfg.keys {
        let invoke_us = since();
        let v = setup
            .get("jepsen", &key_name(k))
            .map_err(|e| format!("final read of key {k}: {e}"))?;
        history.push(Event {
            process: usize::MAX,
            key: k,
            write: false,
            value: v.and_then(|b| String::from_utf8(b).ok()?.parse().ok()),
            invoke_us,
            complete_us: since(),
            outcome: "ok",
            error: None,
        });
    }
    write_history(cfg, &history)?;
    Ok(analyse(cfg, &history, faults, since() / 1_000))
}

fn write_history(cfg: &RunConfig, history: &[Event]) -> Result<(), String> {
    let p = cfg.dir.join("history.jsonl");
    let mut text = String::new();
    for e in history {
        text += &serde_json::to_string(e).map_err(|e| e.to_string())?;
        text.push('\n');
    }
    std::fs::write(&p, text).map_err(|e| format!("write {}: {e}", p.display()))
}

/// Checks and measures a history.
pub fn analyse(cfg: &RunConfig, history: &[Event], faults: Vec<Injected>, end_ms: u64) -> Report {
    let mut per_key: BTreeMap<usize, Vec<Op>> = BTreeMap::new();
    // Every key starts at value 0 (written before the run).
    for k in 0..cfg.keys {
        per_key.entry(k).or_default().push(Op {
            invoke: 0,
            complete: Some(0),
            kind: Kind::Write(0),
        });
    }
    for e in history {
        let op = match (e.write, e.outcome) {
            (true, "ok") => Op {
                invoke: e.invoke_us + 1,
                complete: Some(e.complete_us + 1),
                kind: Kind::Write(e.value.unwrap_or(0)),
            },
            (true, "unknown") => Op {
                invoke: e.invoke_us + 1,
                complete: None,
                kind: Kind::Write(e.value.unwrap_or(0)),
            },
            (false, "ok") => Op {
                invoke: e.invoke_us + 1,
                complete: Some(e.complete_us + 1),
                kind: Kind::Read(e.value),
            },
            _ => continue,
        };
        per_key.entry(e.key).or_default().push(op);
    }
    let mut violations = Vec::new();
    let mut undecided = Vec::new();
    for (k, ops) in &per_key {
        match checker::check(ops) {
            Verdict::Linearizable => {}
            Verdict::Violation { at } => violations.push((*k, at)),
            Verdict::Unknown => undecided.push(*k),
        }
    }
    // Lost writes: the key's final value must be the last acknowledged
    // write's, or that of a write that may have taken effect after it
    // began (acknowledged later, or of unknown outcome).
    let mut lost = Vec::new();
    for k in 0..cfg.keys {
        let Some(fin) = history
            .iter()
            .rev()
            .find(|e| e.key == k && e.process == usize::MAX)
        else {
            continue;
        };
        let Some(w) = history
            .iter()
            .filter(|e| e.key == k && e.write && e.outcome == "ok")
            .max_by_key(|e| e.complete_us)
        else {
            continue;
        };
        let explained = fin.value == w.value
            || history.iter().any(|e| {
                e.key == k
                    && e.write
                    && e.value == fin.value
                    && (e.outcome == "unknown"
                        || (e.outcome == "ok" && e.complete_us >= w.invoke_us))
            });
        if !explained {
            lost.push(format!(
                "key {k}: write {:?} acknowledged at {} µs, final value {:?}",
                w.value, w.complete_us, fin.value
            ));
        }
    }
    // Unavailability: per fault window (start .. end + settle), the
    // longest stretch on any tablet with no successful operation.
    let tablets = cfg.keys.div_ceil(2);
    let mut ok_times: Vec<Vec<u64>> = vec![Vec::new(); tablets];
    for e in history
        .iter()
        .filter(|e| e.outcome == "ok" && e.process != usize::MAX)
    {
        ok_times[tablet_of(e.key)].push(e.complete_us / 1_000);
    }
    for v in &mut ok_times {
        v.sort_unstable();
    }
    let settle_ms = cfg.heartbeat_timeout_ms + 3_000;
    let mut unavailability: Vec<Unavailability> = Vec::new();
    // A window ends when the next fault begins, so no gap is counted twice.
    let window_end = |i: usize| {
        let next = faults.get(i + 1).map_or(end_ms, |n| n.start_ms);
        (faults[i].end_ms + settle_ms).min(next).min(end_ms)
    };
    for kind in Fault::ALL {
        let windows: Vec<usize> = (0..faults.len())
            .filter(|i| faults[*i].fault == kind)
            .collect();
        if windows.is_empty() && !cfg.faults.is_empty() && !cfg.faults.contains(&kind) {
            continue; // not asked for
        }
        let mut longest = 0u64;
        for &i in &windows {
            let (a, b) = (faults[i].start_ms, window_end(i));
            for times in &ok_times {
                // Gaps between successes, clipped to the window.
                let mut prev = a;
                for &t in times.iter().filter(|t| **t > a && **t <= b) {
                    longest = longest.max(t - prev);
                    prev = t;
                }
                let last_in = times.iter().any(|t| *t > a && *t <= b);
                if !last_in {
                    longest = longest.max(b - a);
                }
            }
        }
        unavailability.push(Unavailability {
            fault: kind,
            injected: windows.len(),
            longest_gap_ms: longest,
            target_ms: kind.target_ms(cfg.heartbeat_timeout_ms),
        });
    }
    let secs = (end_ms / 1_000 + 1) as usize;
    let mut ok_per_second = vec![0u64; secs];
    for e in history
        .iter()
        .filter(|e| e.outcome == "ok" && e.process != usize::MAX)
    {
        let s = (e.complete_us / 1_000_000) as usize;
        if s < secs {
            ok_per_second[s] += 1;
        }
    }
    let count = |o: &str| {
        history
            .iter()
            .filter(|e| e.outcome == o && e.process != usize::MAX)
            .count()
    };
    Report {
        seed: cfg.seed,
        seconds: cfg.seconds,
        operations: history.iter().filter(|e| e.process != usize::MAX).count(),
        ok: count("ok"),
        failed: count("fail"),
        unknown: count("unknown"),
        violations,
        undecided,
        lost,
        unavailability,
        ok_per_second,
        faults,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(
        process: usize,
        key: usize,
        write: bool,
        value: u64,
        t: u64,
        outcome: &'static str,
    ) -> Event {
        Event {
            process,
            key,
            write,
            value: Some(value),
            invoke_us: t,
            complete_us: t + 10,
            outcome,
            error: None,
        }
    }

    fn cfg() -> RunConfig {
        RunConfig {
            bin: PathBuf::new(),
            dir: PathBuf::new(),
            seconds: 1,
            seed: 0,
            clients: 1,
            keys: 2,
            tservers: 1,
            heartbeat_timeout_ms: 1500,
            faults: Vec::new(),
        }
    }

    #[test]
    fn fault_kinds_parse_by_their_names_and_unknown_ones_are_refused() {
        for f in Fault::ALL {
            assert_eq!(Fault::parse(f.name()), Ok(f));
        }
        let e = Fault::parse("flood").unwrap_err();
        assert!(e.contains("\"flood\"") && e.contains("fsync-lost"), "{e}");
    }

    #[test]
    fn a_lost_acknowledged_write_is_caught() {
        let h = vec![
            ev(0, 0, true, 5, 100, "ok"),
            ev(0, 0, false, 5, 200, "ok"),
            ev(usize::MAX, 0, false, 0, 500, "ok"),
        ];
        let r = analyse(&cfg(), &h, Vec::new(), 1);
        assert_eq!(r.lost.len(), 1, "{r:?}");
        assert_eq!(r.violations.len(), 1);
        assert!(!r.safe());
    }

    #[test]
    fn unknown_writes_explain_a_final_value() {
        let h = vec![
            ev(0, 0, true, 5, 100, "ok"),
            ev(1, 0, true, 6, 105, "unknown"),
            ev(usize::MAX, 0, false, 6, 500, "ok"),
        ];
        let r = analyse(&cfg(), &h, Vec::new(), 1);
        assert!(r.safe(), "{r:?}");
    }

    #[test]
    fn gaps_are_measured_per_tablet_within_each_window() {
        // Key 0 (tablet 0) succeeds at 1 s and 4 s; a fault at 1.5 s..2 s.
        let h = vec![
            ev(0, 0, false, 0, 1_000_000, "ok"),
            ev(0, 0, false, 0, 4_000_000, "ok"),
        ];
        let faults = vec![Injected {
            fault: Fault::KillManager,
            process: 0,
            start_ms: 1_500,
            end_ms: 2_000,
        }];
        let r = analyse(&cfg(), &h, faults, 10_000);
        let u = r
            .unavailability
            .iter()
            .find(|u| u.fault == Fault::KillManager)
            .unwrap();
        assert_eq!(u.injected, 1);
        assert_eq!(u.longest_gap_ms, 2_500);
    }
}
