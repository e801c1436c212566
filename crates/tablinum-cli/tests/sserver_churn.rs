//! Scan servers as processes under churn: while clients run eventual
//! scans and check every row against what was written, scan-server
//! processes are added, SIGKILLed, stopped and started again, a tablet
//! server is SIGKILLed and restarted (its tablets move), and the tablets
//! flush, compact and journal-compact (1 MiB segments, a compaction check
//! every second) all along. Zero client-visible errors, zero wrong, missing
//! or repeated rows; no scan server ever read a deleted file (that is an
//! INTERNAL error, which eventual reads do not retry, so a reader would see
//! it), and journal compaction did run.

mod common;

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{client_as, spawn_role, start_processes_with, wait_until};
use tablinum_client::{Consistency, Durability, Mutation, Query, Split};

/// Rows of the table (every one rewritten each writer round).
const ROWS: u64 = 1_200;
/// Bytes per value.
const VALUE_BYTES: usize = 3_000;
/// How long the churn runs, s.
const CHURN_S: u64 = 30;

fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// Keys spread over the four tablets (split at "4", "8", "c").
fn key(i: u64) -> Vec<u8> {
    format!("{:04x}{i:06}", mix(i) & 0xffff).into_bytes()
}

fn value(i: u64, version: u64) -> Vec<u8> {
    let mut v = format!("v{version:06}-{i:06}-").into_bytes();
    v.resize(VALUE_BYTES, ((i + version) % 251) as u8);
    v
}

/// The version a value says it is, when it is a value this test wrote.
fn version_of(v: &[u8]) -> Option<u64> {
    std::str::from_utf8(v.get(1..7)?).ok()?.parse().ok()
}

/// A scan-server process, its config and log.
fn spawn_sserver(dir: &Path, n: usize, manager: &str) -> Child {
    let cfg = dir.join(format!("sserver{n}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[sserver]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nmanager = \"{manager}\"\n\
             storage = {:?}\ncluster_secret_file = {:?}\nscan_threads = 2\nmetadata_ttl_ms = 300\n\
             reservation_lease_ms = 3000\nheartbeat_interval_ms = 200\n",
            dir.join("storage"),
            dir.join("cluster.secret"),
        ),
    )
    .unwrap();
    spawn_role("sserver", &cfg).0
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .stdin(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} failed");
}

/// `/metrics` of a server's HTTP address, with the admin token; `None`
/// when nothing listens there (a killed server the manager still lists
/// until its heartbeats time out).
fn metrics(http: &str, token: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(http).ok()?;
    s.write_all(
        format!("GET /metrics HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let mut o = String::new();
    s.read_to_string(&mut o).ok()?;
    Some(o)
}

fn gauge(page: &str, name: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn scan_server_and_tablet_server_churn_loses_no_row() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let tserver_extra =
        "flush_max_age_ms = 500\njournal_segment_mib = 1\njournal_compaction_interval_s = 1\n";
    let (mut procs, maddr, by_addr) = start_processes_with(d, 1500, 2, tserver_extra);
    let admin =
        tablinum_auth::files::load_token_file(&d.join("manager").join("admin.token")).unwrap();
    let client = client_as(&maddr, &admin);
    wait_until("2 live tablet servers", Duration::from_secs(20), || {
        client.status().unwrap().servers.len() == 2
    });
    let split = Split::Points(vec![b"4".to_vec(), b"8".to_vec(), b"c".to_vec()]);
    client
        .create_table("churn", split, Durability::Sync)
        .unwrap();
    wait_until("4 open tablets", Duration::from_secs(20), || {
        let s = client.status().unwrap();
        s.tablets_unassigned == 0 && s.servers.iter().map(|v| v.tablets).sum::<u32>() == 4
    });
    let write_round = |c: &tablinum_client::Client, version: u64, stop: &AtomicBool| {
        for chunk in (0..ROWS).collect::<Vec<_>>().chunks(100) {
            let m: Vec<Mutation> = chunk
                .iter()
                .map(|&i| Mutation {
                    key: key(i),
                    value: value(i, version),
                    ..Default::default()
                })
                .collect();
            // Writes may fail while a tablet server restarts: not what
            // this test checks (the kill tests do); try again.
            let t0 = Instant::now();
            while let Err(e) = c.write_routed("churn", m.clone()) {
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "writes never resumed: {e}"
                );
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    };
    let never = AtomicBool::new(false);
    write_round(&client, 1, &never);
    client.flush("churn").unwrap();
    let mut expected: Vec<Vec<u8>> = (0..ROWS).map(key).collect();
    expected.sort();

    let mut sservers: Vec<Child> = Vec::new();
    let mut started = 0;
    for _ in 0..2 {
        sservers.push(spawn_sserver(d, started, &maddr));
        started += 1;
    }
    wait_until("2 scan servers", Duration::from_secs(20), || {
        client.status().unwrap().scan_servers.len() == 2
    });

    let stop = Arc::new(AtomicBool::new(false));
    let max_version = Arc::new(AtomicU64::new(1));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let scans = Arc::new(AtomicU64::new(0));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, max_version, failures, scans) = (
                stop.clone(),
                max_version.clone(),
                failures.clone(),
                scans.clone(),
            );
            let (c, expected) = (client_as(&maddr, &admin), expected.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let newest = max_version.load(Ordering::SeqCst);
                    let q = Query {
                        consistency: Consistency::Eventual {
                            profile: None,
                            busy_timeout_ms: None,
                        },
                        batch_rows: 100,
                        ..Query::new("churn")
                    };
                    let rows = match c.query_vec(&q) {
                        Ok((rows, _)) => rows,
                        Err(e) => {
                            failures
                                .lock()
                                .unwrap()
                                .push(format!("eventual scan failed: {e}"));
                            continue;
                        }
                    };
                    let keys: Vec<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
                    if keys != expected.iter().map(Vec::as_slice).collect::<Vec<_>>() {
                        failures.lock().unwrap().push(format!(
                            "{} rows, not every key exactly once in order",
                            rows.len()
                        ));
                        continue;
                    }
                    for r in &rows {
                        let i: u64 = std::str::from_utf8(&r.key[4..]).unwrap().parse().unwrap();
                        let ok = version_of(&r.value).is_some_and(|v| {
                            v >= 1
                                && v <= newest.max(max_version.load(Ordering::SeqCst))
                                && r.value == value(i, v)
                        });
                        if !ok {
                            failures.lock().unwrap().push(format!(
                                "row {i}: a value no writer wrote ({:?}...)",
                                String::from_utf8_lossy(&r.value[..16.min(r.value.len())])
                            ));
                            break;
                        }
                    }
                    scans.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let writer = {
        let (stop, max_version) = (stop.clone(), max_version.clone());
        let c = client_as(&maddr, &admin);
        std::thread::spawn(move || {
            let mut v = 1;
            while !stop.load(Ordering::Relaxed) {
                v += 1;
                max_version.store(v, Ordering::SeqCst);
                write_round(&c, v, &stop);
                let _ = c.flush("churn");
            }
            v
        })
    };

    // The churn: one step every 1.5 s, cycling through the faults.
    let t0 = Instant::now();
    let mut step = 0;
    let mut tserver_restarts = 0;
    let tserver_idx: Vec<usize> = by_addr.values().copied().collect();
    while t0.elapsed() < Duration::from_secs(CHURN_S) {
        std::thread::sleep(Duration::from_millis(1_500));
        match step % 4 {
            // Add a scan server.
            0 => {
                sservers.push(spawn_sserver(d, started, &maddr));
                started += 1;
            }
            // SIGKILL the oldest scan server (mid-scan, leases held).
            1 => {
                let mut c = sservers.remove(0);
                signal(&c, "-KILL");
                let _ = c.wait();
            }
            // Stop one gracefully, start another.
            2 => {
                let mut c = sservers.remove(0);
                signal(&c, "-TERM");
                let _ = c.wait();
                sservers.push(spawn_sserver(d, started, &maddr));
                started += 1;
            }
            // SIGKILL a tablet server and start it again (its tablets move
            // to the other one, then are balanced back or not).
            _ => {
                let i = tserver_idx[tserver_restarts % tserver_idx.len()];
                signal(&procs.0[i], "-KILL");
                let _ = procs.0[i].wait();
                let cfg = d.join(format!("tserver{}.toml", i - 1));
                let (c, _) = spawn_role("tserver", &cfg);
                procs.0[i] = c;
                tserver_restarts += 1;
            }
        }
        step += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        r.join().unwrap();
    }
    let versions = writer.join().unwrap();
    // Journal compaction ran on the live tablet servers while scan servers
    // read (the counters are of the tablets open now; at least one tablet
    // stayed open long enough to compact).
    let status = client.status().unwrap();
    let compactions: f64 = status
        .servers
        .iter()
        .filter_map(|s| metrics(&s.http, admin.expose()))
        .map(|page| gauge(&page, "tablinum_tserver_journal_compactions"))
        .sum();
    for mut c in sservers {
        let _ = c.kill();
        let _ = c.wait();
    }
    let failures = failures.lock().unwrap().clone();
    let n = scans.load(Ordering::Relaxed);
    eprintln!(
        "{n} verified eventual scans, {versions} versions written, {started} scan servers started, \
         {tserver_restarts} tablet-server restarts, {compactions} journal compactions on the open tablets"
    );
    assert!(
        failures.is_empty(),
        "{} failures, first: {}",
        failures.len(),
        failures[0]
    );
    assert!(n >= 20, "only {n} scans completed");
    assert!(tserver_restarts >= 4, "{tserver_restarts}");
    assert!(compactions >= 1.0, "no journal compaction ran");
}
