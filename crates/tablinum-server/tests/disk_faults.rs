//! Disk faults under one tablet server of a real cluster (manager and tablet
//! server on loopback sockets, the engine's storage seam failing the
//! server's journal I/O): a failed fsync is never served and the tablet
//! takes writes again soon after the fault ends, without a restart; a full
//! disk is answered RESOURCE_EXHAUSTED "not applied" and resumes by itself;
//! a slow disk never silences the heartbeat; status shows each reason.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestCluster;
use tablinum_client::{Client, ClientConfig, Durability, Error, Split};
use tablinum_engine::faults::FaultSwitch;

/// The test cluster's heartbeat timeout (common/mod.rs), ms.
const HEARTBEAT_TIMEOUT_MS: u64 = 2_000;
/// The bound: writes resume within the heartbeat timeout + 2 s
/// after a fault ends.
const RESUME_BOUND: Duration = Duration::from_millis(HEARTBEAT_TIMEOUT_MS + 2_000);

fn cluster_with_faults(dir: &std::path::Path) -> (TestCluster, Arc<FaultSwitch>) {
    // Journal I/O in flight for 1 s counts as stuck (default 5 s).
    let c = TestCluster::start(dir, |t| t.tablet_stuck_ms = 1_000);
    let faults = Arc::new(FaultSwitch::new());
    c.tserver().inject_storage_faults(faults.clone());
    c.client
        .create_table("t", Split::Even(2), Durability::Sync)
        .unwrap();
    c.wait_open("t", 2);
    (c, faults)
}

/// A client that gives up on retries after `deadline`.
fn impatient(c: &TestCluster, deadline: Duration) -> Client {
    Client::connect_with(
        &c.addr(),
        ClientConfig {
            retry_deadline: deadline,
            ..ClientConfig::with_credential(Some(c.admin.clone()))
        },
    )
    .unwrap()
}

/// The faults the manager reports for the cluster's server: (condition,
/// reason) pairs.
fn reported(c: &TestCluster) -> Vec<(String, String)> {
    c.client
        .status()
        .unwrap()
        .servers
        .iter()
        .flat_map(|s| s.faults.iter())
        .map(|f| (f.condition.to_string(), f.reason.clone()))
        .collect()
}

fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    t0.elapsed()
}

#[test]
fn a_failed_fsync_is_never_served_and_the_tablet_reopens_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (c, faults) = cluster_with_faults(dir.path());
    c.client.put("t", b"k", b"durable").unwrap();
    // Every sync fails, and what was not synced is lost: the write's
    // outcome is unknown, and nobody ever reads it.
    faults.fail_syncs(FaultSwitch::FOREVER, true);
    let fast = impatient(&c, Duration::from_millis(500));
    match fast.put("t", b"k", b"unsynced") {
        Err(Error::OutcomeUnknown(_)) => {}
        other => panic!("a write whose fsync failed has an unknown outcome: {other:?}"),
    }
    for _ in 0..5 {
        match fast.get("t", b"k") {
            Ok(Some(v)) => assert_eq!(v, b"durable", "an unsynced write was served"),
            Ok(None) => panic!("the durable write vanished"),
            Err(_) => {} // the tablet is recovering: refused, not wrong
        }
    }
    // The manager shows why the tablet does not serve.
    wait_for(
        "status shows the tablet recovering",
        Duration::from_secs(5),
        || {
            reported(&c)
                .iter()
                .any(|(cond, why)| cond == "recovering" && why.contains("fsync"))
        },
    );
    faults.heal();
    let healed = Instant::now();
    wait_for("writes resume after the fault ends", RESUME_BOUND, || {
        fast.put("t", b"k2", b"after").is_ok()
    });
    eprintln!(
        "writes resumed {:?} after the fault ended",
        healed.elapsed()
    );
    assert_eq!(
        c.client.get("t", b"k").unwrap().as_deref(),
        Some(&b"durable"[..])
    );
    assert_eq!(
        c.client.get("t", b"k2").unwrap().as_deref(),
        Some(&b"after"[..])
    );
    wait_for("status clears", Duration::from_secs(5), || {
        reported(&c).is_empty()
    });
    assert!(c.tserver().recoveries.load(Ordering::Relaxed) >= 1);
}

#[test]
fn one_transient_fsync_error_heals_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (c, faults) = cluster_with_faults(dir.path());
    c.client.put("t", b"a", b"1").unwrap();
    faults.fail_syncs(1, false);
    let t0 = Instant::now();
    let _ = impatient(&c, Duration::from_millis(200)).put("t", b"a", b"2");
    // The fault is over at once (one error); the tablet must come back.
    wait_for("writes resume", RESUME_BOUND, || {
        impatient(&c, Duration::from_millis(200))
            .put("t", b"a", b"3")
            .is_ok()
    });
    eprintln!("writes resumed {:?} after one fsync error", t0.elapsed());
    assert_eq!(c.client.get("t", b"a").unwrap().as_deref(), Some(&b"3"[..]));
}

#[test]
fn a_full_disk_is_answered_not_applied_and_resumes_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let (c, faults) = cluster_with_faults(dir.path());
    c.client.put("t", b"k", b"before").unwrap();
    faults.disk_full(true);
    for i in 0..5u8 {
        match c.client.put("t", b"k", &[b'x', i]) {
            Err(Error::Busy(m)) => assert!(m.contains("not applied: disk full"), "{m}"),
            other => panic!("a full disk is RESOURCE_EXHAUSTED, not applied: {other:?}"),
        }
    }
    assert_eq!(
        c.client.get("t", b"k").unwrap().as_deref(),
        Some(&b"before"[..])
    );
    wait_for("status shows the full disk", Duration::from_secs(5), || {
        reported(&c).iter().any(|(cond, _)| cond == "disk full")
    });
    faults.disk_full(false);
    let healed = Instant::now();
    wait_for("writes resume", RESUME_BOUND, || {
        c.client.put("t", b"k", b"after").is_ok()
    });
    eprintln!(
        "writes resumed {:?} after the disk had room",
        healed.elapsed()
    );
    assert_eq!(
        c.client.get("t", b"k").unwrap().as_deref(),
        Some(&b"after"[..])
    );
    wait_for("status clears", Duration::from_secs(5), || {
        reported(&c).is_empty()
    });
}

/// Each journal append and sync takes 1.5 s while writers keep the writer
/// lock busy: the heartbeat must keep its period, and the manager must not
/// declare the server dead (before: the heartbeat waited for the writer
/// lock behind them).
#[test]
fn a_slow_disk_never_silences_the_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let (c, faults) = cluster_with_faults(dir.path());
    c.client.put("t", b"k", b"v").unwrap();
    faults.delay_ms(1_500);
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let mut writers = Vec::new();
    for w in 0..4u8 {
        let (client, stop, written) = (c.new_client(), stop.clone(), written.clone());
        writers.push(std::thread::spawn(move || {
            let mut i = 0u32;
            while !stop.load(Ordering::Relaxed) && i < 100 {
                let key = [b'w', w, (i % 7) as u8];
                if client.put("t", &key, b"slow").is_ok() {
                    written.fetch_add(1, Ordering::Relaxed);
                }
                i += 1;
            }
        }));
    }
    let t0 = Instant::now();
    let mut worst_ms = 0;
    let mut stuck_seen = false;
    while t0.elapsed() < Duration::from_secs(7) {
        let st = c.client.status().unwrap();
        assert_eq!(st.servers.len(), 1, "the slow server is still live");
        worst_ms = worst_ms.max(st.servers[0].last_heartbeat_ms);
        stuck_seen |= st.servers[0]
            .faults
            .iter()
            .any(|f| f.condition == "stuck" && f.io_stalled_ms >= 1_000);
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(stuck_seen, "status showed the slow tablets as stuck");
    stop.store(true, Ordering::Relaxed);
    faults.heal();
    for w in writers {
        w.join().unwrap();
    }
    let ts = c.running.as_ref().unwrap().node.manager.as_ref().unwrap();
    assert_eq!(ts.snapshot().servers_expired, 0, "no server declared dead");
    assert!(
        worst_ms < HEARTBEAT_TIMEOUT_MS / 2,
        "the heartbeat kept its period: worst gap {worst_ms} ms"
    );
    assert!(
        written.load(Ordering::Relaxed) > 0,
        "writes went on, slowly"
    );
}
