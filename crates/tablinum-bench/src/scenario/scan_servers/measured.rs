//! The measured part of the scan-server scenario: a small-scale version of
//! the report's probe experiment on loopback, with real processes — one
//! `tablinum up --sservers 0` (manager and tablet server) and several
//! `tablinum sserver` children with few scan threads each, every one capped
//! at a fraction of a core by its own CPU cgroup (the report's scan servers
//! are machines of their own; here they would otherwise share two cores,
//! and spreading load would add no capacity) — a closed loop
//! of clients running large eventual scans of one hot tablet, and a single
//! probe client timing small scans of it, as in the report. Modes: immediate
//! (everything on the tablet server), eventual without shedding (one
//! first-attempt server per tablet, no busy timeout), eventual with busy
//! shedding (the same first plan with a 5 ms busy timeout, then any server
//! at 33 ms), and tablinum's built-in default profile. Every row any client
//! receives is checked against the data it loaded.
//!
//! Owns the scan-server children (started, waited for, stopped: SIGTERM,
//! then SIGKILL), the data, the loops and the measured rows of
//! `scenario.json`, and the per-row cost fit recorded as this machine's
//! calibration. It must never leave a child running (dropping one stops
//! it) and never count a wrong row as a success.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use rand::RngExt;
use serde::Serialize;
use tablinum_client::{Client, ClientConfig, Consistency, Durability, Mutation, Query, Split};

use crate::error::BenchError;
use crate::local_cluster::LocalCluster;
use crate::scenario::framework::driver::{closed_loop, Counts, LoopResult};
use crate::scenario::framework::plan::shuffled;

/// The table the measured run creates (and drops).
pub const TABLE: &str = "ssbench-hot";
/// How long a scan server may take to print its ready line, s.
pub const SSERVER_START_TIMEOUT_S: u64 = 30;
/// How long a stopping scan server may take after SIGTERM, s.
pub const SSERVER_STOP_TIMEOUT_S: u64 = 10;
/// How long the scan servers may take to register with the manager, s.
pub const REGISTER_TIMEOUT_S: u64 = 30;

/// Percentiles of the probe's latency kept per row (and charted).
pub const PERCENTILES: [f64; 6] = [50.0, 75.0, 90.0, 95.0, 99.0, 99.9];

/// The dispatcher profiles of the two shedding modes (the default mode uses
/// the built-in profiles). Written beside the results.
pub const PROFILES_TOML: &str = r#"# Profiles of `bench scenario scan-servers` (measured rows).
default = "noshed"

# One first-attempt server per tablet, and no busy timeout: every client of
# a hot tablet queues on the same server, as scan servers without busy
# timeouts do.
[profiles.noshed]
busy_timeout_max_ms = 3600000
attempts = [ { servers = 1, busy_timeout_ms = 3600000 } ]

# The same first plan, shedding after 5 ms to any live server (33 ms there).
[profiles.shed]
attempts = [
  { servers = 1, busy_timeout_ms = 5 },
  { servers = "100%", busy_timeout_ms = 33 },
]
"#;

/// The measured run's shape.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredShape {
    /// Scan-server processes.
    pub sservers: u32,
    /// Scan threads of each.
    pub scan_threads: u32,
    /// CPU of each scan-server process, thousandths of a core (a cgroup v1
    /// CFS quota): each is a small machine of its own, as in the report,
    /// instead of all sharing this machine's cores.
    pub sserver_millicores: u64,
    /// Closed-loop clients running large scans: more than one server's scan
    /// threads (the hot tablet's first-plan server is overloaded) and fewer
    /// than all servers' (shedding has somewhere to go), as in the report,
    /// whose fleets never filled every scan server. With 16 clients on 8
    /// threads every server is saturated and no dispatcher helps: measured
    /// 2026-11-24, release build, probe p99 261 ms without shedding against
    /// 242 ms with it.
    pub clients: u32,
    /// Rows in the hot tablet.
    pub rows: u64,
    /// Value size, bytes.
    pub value_bytes: usize,
    /// Rows per large scan, and per batch of one.
    pub large_rows: u64,
    /// Rows per batch of a large scan.
    pub large_batch_rows: u32,
    /// Rows per probe scan.
    pub small_rows: u64,
    /// Load before the probe starts, s.
    pub warmup_s: f64,
    /// How long the probe runs, s.
    pub probe_s: f64,
    /// Repeats of every mode, interleaved.
    pub repeats: u32,
}

impl MeasuredShape {
    /// The full run, or the quick one.
    pub fn pick(quick: bool) -> MeasuredShape {
        MeasuredShape {
            sservers: 4,
            scan_threads: 2,
            sserver_millicores: 250,
            clients: 6,
            rows: if quick { 10_000 } else { 40_000 },
            value_bytes: 1_000,
            large_rows: 2_000,
            large_batch_rows: 500,
            small_rows: 10,
            warmup_s: if quick { 1.0 } else { 3.0 },
            probe_s: if quick { 4.0 } else { 20.0 },
            repeats: if quick { 1 } else { 3 },
        }
    }
}

/// Where the reads of a mode go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Immediate,
    NoShed,
    Shed,
    Default,
}

impl Mode {
    const ALL: [Mode; 4] = [Mode::Immediate, Mode::NoShed, Mode::Shed, Mode::Default];

    fn id(self) -> &'static str {
        match self {
            Mode::Immediate => "M-immediate",
            Mode::NoShed => "M-eventual-noshed",
            Mode::Shed => "M-eventual-shed",
            Mode::Default => "M-eventual-default",
        }
    }

    fn consistency(self) -> Consistency {
        let profile = match self {
            Mode::Immediate => return Consistency::Immediate,
            Mode::NoShed => Some("noshed".to_string()),
            Mode::Shed => Some("shed".to_string()),
            Mode::Default => None,
        };
        Consistency::Eventual {
            profile,
            busy_timeout_ms: None,
        }
    }

    /// (first-attempt servers, first busy timeout ms) of its profile.
    fn plan(self) -> (Option<u32>, Option<u64>) {
        match self {
            Mode::Immediate => (None, None),
            Mode::NoShed => (Some(1), None),
            Mode::Shed => (Some(1), Some(5)),
            Mode::Default => (Some(3), Some(2)),
        }
    }
}

/// One measured row of `scenario.json` (the report's columns, plus the
/// fleet's figures).
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredRow {
    /// Always "small": the probe runs small scans (under large-scan load).
    pub test: &'static str,
    /// "M-immediate", "M-eventual-noshed", "M-eventual-shed", "M-eventual-default".
    pub id: &'static str,
    /// Always "measured".
    pub source: &'static str,
    /// "tablet-server", or the dispatcher profile ("noshed", "shed",
    /// "tablinum-default").
    pub selector: &'static str,
    /// Scan-server processes (0: immediate).
    pub sservers: u32,
    /// First-attempt candidate servers.
    pub initial: Option<u32>,
    /// First busy timeout, ms (none: no shedding).
    pub busy_timeout_ms: Option<u64>,
    /// "tablet server" or "scan server".
    pub scan_type: &'static str,
    /// Closed-loop clients besides the probe.
    pub concurrent: u32,
    /// Busy answers the probe received.
    pub busy_events: u64,
    /// Probe scan time: mean, standard deviation, fastest, slowest, 99th
    /// percentile, ms.
    pub avg_ms: f64,
    /// See `avg_ms`.
    pub sd_ms: f64,
    /// See `avg_ms`.
    pub min_ms: f64,
    /// See `avg_ms`.
    pub max_ms: f64,
    /// See `avg_ms`.
    pub p99_ms: f64,
    /// Probe scans completed.
    pub probe_scans: u64,
    /// Which repeat (0-based).
    pub repeat: u32,
    /// Large scans the fleet completed per second.
    pub fleet_scans_per_s: f64,
    /// The fleet's mean large-scan time, ms.
    pub fleet_avg_ms: f64,
    /// Busy answers per large scan.
    pub fleet_busy_per_scan: f64,
    /// Probe latency (percentile, ms) at 50, 75, 90, 95, 99 and 99.9.
    pub percentiles: Vec<(f64, f64)>,
    /// Failed requests (probe and fleet); a wrong row is a failure.
    pub errors: u64,
    /// The first failure.
    pub first_error: Option<String>,
}

/// Per-row costs fitted from single-client scans on one scan server
/// (nothing else running): time = fixed + rows × per_row.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredCosts {
    /// Mean time of a scan of `small_rows` rows, µs.
    pub small_scan_us: f64,
    /// Mean time of a scan of `large_rows` rows (one batch), µs.
    pub large_scan_us: f64,
    /// Fitted fixed cost per scan (round trip, session, first seek), µs.
    pub fixed_us: f64,
    /// Fitted cost per row read and returned, ns.
    pub per_row_ns: f64,
}

/// Everything the measured run produced.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuredReport {
    /// Its shape.
    pub shape: MeasuredShape,
    /// The profiles of the shedding modes.
    pub profiles_toml: String,
    /// Single-client costs on this machine.
    pub costs: MeasuredCosts,
    /// One row per (mode, repeat), in run order.
    pub rows: Vec<MeasuredRow>,
}

fn cluster_err(action: &'static str, reason: impl Into<String>) -> BenchError {
    BenchError::Cluster {
        action,
        reason: reason.into(),
    }
}

/// A `tablinum sserver` child; dropping it stops it.
struct SserverChild {
    child: Option<Child>,
    grpc: String,
    /// Its CPU cap; removed after the child is stopped (field drop order).
    _cpu: crate::scenario::cgroup::CpuCgroup,
}

impl SserverChild {
    /// Writes its config into `out` and starts it; waits for its ready line.
    fn start(
        program: &Path,
        out: &Path,
        i: u32,
        manager: &str,
        data: &Path,
        shape: &MeasuredShape,
    ) -> Result<SserverChild, BenchError> {
        let scan_threads = shape.scan_threads;
        let cpu = crate::scenario::cgroup::CpuCgroup::create(
            &format!("{}-sserver-{i}", std::process::id()),
            shape.sserver_millicores,
        )
        .map_err(|e| {
            cluster_err(
                "cap a scan server's CPU",
                format!(
                    "{e} (needs root and the cgroup v1 cpu controller; or pass --skip-measured)"
                ),
            )
        })?;
        let config = out.join(format!("sserver-{i}.toml"));
        let text = format!(
            "[sserver]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nmanager = {manager:?}\n\
             storage = {:?}\ncluster_secret_file = {:?}\nscan_threads = {scan_threads}\n",
            data.join("storage").display().to_string(),
            tablinum_server::embedded_secret_path(data)
                .display()
                .to_string(),
        );
        std::fs::write(&config, text).map_err(|e| BenchError::io(&config, "write", e))?;
        let log_path = out.join(format!("sserver-{i}.log"));
        let log =
            std::fs::File::create(&log_path).map_err(|e| BenchError::io(&log_path, "create", e))?;
        let mut pump_log = log
            .try_clone()
            .map_err(|e| BenchError::io(&log_path, "open", e))?;
        let mut child = Command::new(program)
            .arg("sserver")
            .arg("--config")
            .arg(&config)
            // Exits by itself if this harness dies (killed, Ctrl-C).
            .env(tablinum_server::EXIT_WITH_PARENT_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| cluster_err("start a scan server", e.to_string()))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(cluster_err("start a scan server", "no stdout pipe"));
        };
        if let Err(e) = cpu.add(child.id()) {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                let _ = writeln!(pump_log, "{line}");
                if let Some(addr) = line.strip_prefix(crate::local_cluster::READY_LINE_PREFIX) {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(addr.trim().to_string());
                    }
                }
            }
        });
        let mut s = SserverChild {
            child: Some(child),
            grpc: String::new(),
            _cpu: cpu,
        };
        match rx.recv_timeout(Duration::from_secs(SSERVER_START_TIMEOUT_S)) {
            Ok(addr) => {
                s.grpc = addr;
                Ok(s)
            }
            Err(_) => Err(cluster_err(
                "start a scan server",
                format!(
                    "no ready line within {SSERVER_START_TIMEOUT_S} s; last lines of {}: {}",
                    log_path.display(),
                    crate::local_cluster::log_tail(&log_path)
                ),
            )),
        }
    }
}

impl Drop for SserverChild {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(SSERVER_STOP_TIMEOUT_S);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn key(i: u64) -> Vec<u8> {
    format!("row{i:08}").into_bytes()
}

fn value(i: u64, bytes: usize) -> Vec<u8> {
    let mut v = format!("v{i:08}:").into_bytes();
    v.resize(bytes.max(v.len()), (i % 251) as u8);
    v
}

/// Scans `rows` rows from row `start` at `consistency` and checks every row
/// is the loaded one, in order; adds its counts.
fn checked_scan(
    client: &Client,
    shape: &MeasuredShape,
    start: u64,
    rows: u64,
    batch_rows: u32,
    consistency: Consistency,
    counts: &mut Counts,
) -> Result<(), String> {
    let q = Query {
        start: key(start),
        limit: rows,
        batch_rows,
        consistency,
        ..Query::new(TABLE)
    };
    let (got, stats) = client.query_vec(&q).map_err(|e| e.to_string())?;
    let want = rows.min(shape.rows - start);
    if got.len() as u64 != want {
        return Err(format!(
            "scan from row {start}: {} rows, want {want}",
            got.len()
        ));
    }
    for (n, r) in got.iter().enumerate() {
        let i = start + n as u64;
        if r.key != key(i) || r.value != value(i, shape.value_bytes) {
            return Err(format!(
                "scan from row {start}: row {n} is wrong (want row {i})"
            ));
        }
    }
    *counts.entry("busy").or_default() += stats.busy_answers;
    *counts.entry("attempts").or_default() += stats.attempts;
    *counts.entry("rows").or_default() += got.len() as u64;
    Ok(())
}

fn client_with(
    addr: &str,
    base: &ClientConfig,
    profiles: &Arc<tablinum_client::Profiles>,
    builtin: bool,
) -> Result<Client, BenchError> {
    Client::connect_with(
        addr,
        ClientConfig {
            dispatcher: (!builtin).then(|| profiles.clone()),
            ..base.clone()
        },
    )
    .map_err(|e| cluster_err("connect", e.to_string()))
}

fn ms(us: u64) -> f64 {
    us as f64 / 1_000.0
}

/// Runs the measured part: starts the cluster and the scan servers in
/// `out`, loads the hot tablet, fits the single-client costs, then every
/// mode `shape.repeats` times in seeded interleaved order.
pub fn run(
    program: &Path,
    out: &Path,
    shape: &MeasuredShape,
    profiles_toml: &str,
    seed: u64,
) -> Result<MeasuredReport, BenchError> {
    let data: PathBuf = out.join("cluster-data");
    let cluster = LocalCluster::start_with(
        program,
        &data,
        &out.join("cluster.log"),
        false,
        &["--sservers", "0"],
    )?;
    let result = run_on(program, out, &cluster, &data, shape, profiles_toml, seed);
    let stopped = cluster.stop();
    if data.exists() {
        let _ = std::fs::remove_dir_all(&data);
    }
    let r = result?;
    stopped?;
    Ok(r)
}

fn run_on(
    program: &Path,
    out: &Path,
    cluster: &LocalCluster,
    data: &Path,
    shape: &MeasuredShape,
    profiles_toml: &str,
    seed: u64,
) -> Result<MeasuredReport, BenchError> {
    let profiles_path = out.join("profiles.toml");
    std::fs::write(&profiles_path, profiles_toml)
        .map_err(|e| BenchError::io(&profiles_path, "write", e))?;
    let profiles = Arc::new(
        tablinum_client::Profiles::from_toml_str(profiles_toml)
            .map_err(|e| cluster_err("read the profiles", e.to_string()))?,
    );
    let base = ClientConfig::with_credential(Some(cluster.credential()?));
    let admin = client_with(cluster.addr(), &base, &profiles, false)?;
    let mut sservers = Vec::new();
    for i in 0..shape.sservers {
        sservers.push(SserverChild::start(
            program,
            out,
            i,
            cluster.addr(),
            data,
            shape,
        )?);
    }
    let t0 = Instant::now();
    loop {
        let live = admin
            .status()
            .map_err(|e| cluster_err("status", e.to_string()))?
            .scan_servers
            .len();
        if live >= sservers.len() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(REGISTER_TIMEOUT_S) {
            return Err(cluster_err(
                "wait for scan servers",
                format!("{live} of {} registered", sservers.len()),
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "scan-servers (measured): {} scan servers ({}) with {} scan threads and {} millicores each",
        sservers.len(),
        sservers
            .iter()
            .map(|s| s.grpc.as_str())
            .collect::<Vec<_>>()
            .join(", "),
        shape.scan_threads,
        shape.sserver_millicores
    );
    admin
        .create_table(TABLE, Split::Even(1), Durability::Nosync)
        .map_err(|e| cluster_err("create the table", e.to_string()))?;
    let mut batch = Vec::new();
    for i in 0..shape.rows {
        batch.push(Mutation {
            key: key(i),
            value: value(i, shape.value_bytes),
            ..Default::default()
        });
        if batch.len() == 500 || i + 1 == shape.rows {
            admin
                .write(TABLE, std::mem::take(&mut batch))
                .map_err(|e| cluster_err("load", e.to_string()))?;
        }
    }
    admin
        .flush(TABLE)
        .map_err(|e| cluster_err("flush", e.to_string()))?;
    let costs = fit_costs(cluster.addr(), &base, &profiles, shape)?;
    eprintln!(
        "scan-servers (measured): single-client costs: {:.0} µs per {}-row scan, {:.0} µs per {}-row scan \
         => {:.0} µs fixed + {:.0} ns per row",
        costs.small_scan_us, shape.small_rows, costs.large_scan_us, shape.large_rows, costs.fixed_us, costs.per_row_ns
    );
    let mut runs = Vec::new();
    for r in 0..shape.repeats {
        for m in shuffled(&Mode::ALL, seed ^ u64::from(r)) {
            runs.push((m, r));
        }
    }
    let mut rows = Vec::new();
    for (n, (mode, repeat)) in runs.iter().enumerate() {
        let row = run_mode(
            cluster.addr(),
            &base,
            &profiles,
            shape,
            *mode,
            *repeat,
            seed,
        )?;
        eprintln!(
            "  [{}/{}] {} repeat {}: probe avg {:.2} ms p99 {:.2} ms ({} scans, {} busy); fleet {:.1} scans/s, {:.2} busy/scan; errors {}",
            n + 1,
            runs.len(),
            row.id,
            row.repeat,
            row.avg_ms,
            row.p99_ms,
            row.probe_scans,
            row.busy_events,
            row.fleet_scans_per_s,
            row.fleet_busy_per_scan,
            row.errors
        );
        rows.push(row);
    }
    let _ = admin.drop_table(TABLE);
    drop(sservers);
    Ok(MeasuredReport {
        shape: shape.clone(),
        profiles_toml: profiles_toml.to_string(),
        costs,
        rows,
    })
}

/// Mean single-client time of small and large scans on one scan server
/// (eventual, `noshed`: one server per tablet), and the linear fit.
fn fit_costs(
    addr: &str,
    base: &ClientConfig,
    profiles: &Arc<tablinum_client::Profiles>,
    shape: &MeasuredShape,
) -> Result<MeasuredCosts, BenchError> {
    let client = client_with(addr, base, profiles, false)?;
    let mean_us = |rows: u64, batch: u32, n: u32| -> Result<f64, BenchError> {
        let mut total = 0.0;
        let mut counts = Counts::new();
        for i in 0..n + 5 {
            let start = (u64::from(i) * 7_919) % (shape.rows - rows);
            let t = Instant::now();
            checked_scan(
                &client,
                shape,
                start,
                rows,
                batch,
                Mode::NoShed.consistency(),
                &mut counts,
            )
            .map_err(|e| cluster_err("calibration scan", e))?;
            if i >= 5 {
                total += t.elapsed().as_secs_f64() * 1e6;
            }
        }
        Ok(total / f64::from(n))
    };
    let small = mean_us(shape.small_rows, shape.small_rows as u32, 200)?;
    let large = mean_us(shape.large_rows, shape.large_rows as u32, 40)?;
    let per_row_us = ((large - small) / (shape.large_rows - shape.small_rows) as f64).max(0.0);
    Ok(MeasuredCosts {
        small_scan_us: small,
        large_scan_us: large,
        fixed_us: (small - per_row_us * shape.small_rows as f64).max(0.0),
        per_row_ns: per_row_us * 1_000.0,
    })
}

/// One mode once: the fleet's closed loop of large scans, and the probe's
/// small scans after the warm-up.
fn run_mode(
    addr: &str,
    base: &ClientConfig,
    profiles: &Arc<tablinum_client::Profiles>,
    shape: &MeasuredShape,
    mode: Mode,
    repeat: u32,
    seed: u64,
) -> Result<MeasuredRow, BenchError> {
    let builtin = mode == Mode::Default;
    let fleet_clients: Vec<Client> = (0..shape.clients)
        .map(|_| client_with(addr, base, profiles, builtin))
        .collect::<Result<_, _>>()?;
    let probe_client = client_with(addr, base, profiles, builtin)?;
    let next = AtomicUsize::new(0);
    thread_local! {
        static WORKER: std::cell::Cell<Option<usize>> = const { std::cell::Cell::new(None) };
    }
    let fleet_seconds = shape.warmup_s + shape.probe_s;
    let seed = seed ^ (u64::from(repeat) << 32) ^ mode as u64;
    let (fleet, probe): (Result<LoopResult, BenchError>, LoopResult) = std::thread::scope(|s| {
        let fleet = s.spawn(|| {
            closed_loop(shape.clients, fleet_seconds, seed, |rng, counts| {
                let w = WORKER.with(|c| match c.get() {
                    Some(w) => w,
                    None => {
                        let w = next.fetch_add(1, Ordering::Relaxed);
                        c.set(Some(w));
                        w
                    }
                });
                let start = rng.random_range(0..shape.rows - shape.large_rows);
                checked_scan(
                    &fleet_clients[w % fleet_clients.len()],
                    shape,
                    start,
                    shape.large_rows,
                    shape.large_batch_rows,
                    mode.consistency(),
                    counts,
                )
            })
        });
        std::thread::sleep(Duration::from_secs_f64(shape.warmup_s));
        let probe = closed_loop(1, shape.probe_s, seed ^ 0x9e37, |rng, counts| {
            let start = rng.random_range(0..shape.rows - shape.small_rows);
            checked_scan(
                &probe_client,
                shape,
                start,
                shape.small_rows,
                shape.small_rows as u32,
                mode.consistency(),
                counts,
            )
        });
        let fleet = fleet
            .join()
            .map_err(|_| cluster_err("run the fleet", "its thread panicked"));
        (fleet, probe)
    });
    let fleet = fleet?;
    let h = &probe.latency_us;
    let (initial, busy_timeout_ms) = mode.plan();
    Ok(MeasuredRow {
        test: "small",
        id: mode.id(),
        source: "measured",
        selector: match mode {
            Mode::Immediate => "tablet-server",
            Mode::NoShed => "noshed",
            Mode::Shed => "shed",
            Mode::Default => "tablinum-default",
        },
        sservers: if mode == Mode::Immediate {
            0
        } else {
            shape.sservers
        },
        initial,
        busy_timeout_ms,
        scan_type: if mode == Mode::Immediate {
            "tablet server"
        } else {
            "scan server"
        },
        concurrent: shape.clients,
        busy_events: probe.count("busy"),
        avg_ms: h.mean() / 1_000.0,
        sd_ms: h.stdev() / 1_000.0,
        min_ms: ms(h.min()),
        max_ms: ms(h.max()),
        p99_ms: ms(h.value_at_quantile(0.99)),
        probe_scans: probe.requests,
        percentiles: PERCENTILES
            .iter()
            .map(|&p| (p, ms(h.value_at_quantile(p / 100.0))))
            .collect(),
        repeat,
        fleet_scans_per_s: fleet.requests as f64 / fleet.elapsed_s.max(f64::MIN_POSITIVE),
        fleet_avg_ms: fleet.latency_us.mean() / 1_000.0,
        fleet_busy_per_scan: fleet.per_request("busy"),
        errors: probe.errors + fleet.errors,
        first_error: probe.first_error.or(fleet.first_error),
    })
}
