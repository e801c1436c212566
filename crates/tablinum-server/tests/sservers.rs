//! Scan servers end to end on loopback sockets: registration, eventual
//! scans that see exactly what was flushed, the staleness bound without an
//! explicit flush, busy shedding under load with every row still correct,
//! and bad input.

mod common;

use std::time::{Duration, Instant};

use common::TestCluster;
use tablinum_auth::Role;
use tablinum_client::{Consistency, Durability, Mutation, Query, Split};

fn value(n: u64, version: u64) -> Vec<u8> {
    let mut v = format!("v{version}-{n:06}-").into_bytes();
    v.resize(2_000, (n % 251) as u8);
    v
}

fn key(n: u64) -> Vec<u8> {
    format!("{:016x}", common::mix(n)).into_bytes()
}

fn write_all(c: &TestCluster, table: &str, n: u64, version: u64) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(200) {
        let m: Vec<Mutation> = chunk
            .iter()
            .map(|&i| Mutation {
                key: key(i),
                value: value(i, version),
                ..Default::default()
            })
            .collect();
        c.client.write_routed(table, m).unwrap();
    }
}

fn eventual(table: &str) -> Query {
    Query {
        consistency: Consistency::Eventual {
            profile: None,
            busy_timeout_ms: None,
        },
        ..Query::new(table)
    }
}

/// Waits (bounded) until the manager lists `n` scan servers.
fn wait_sservers(c: &TestCluster, n: usize) {
    let t0 = Instant::now();
    while c.client.status().unwrap().scan_servers.len() < n {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "scan servers never registered"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn eventual_scans_read_what_was_flushed_and_see_new_writes_within_the_bound() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |t| t.flush_max_age_ms = 500);
    c.add_sserver(|s| {
        s.group = "default".into();
        s.metadata_ttl_ms = 300;
    });
    c.add_sserver(|s| s.metadata_ttl_ms = 300);
    wait_sservers(&c, 2);
    let st = c.client.status().unwrap();
    assert!(st.scan_servers.iter().all(|s| s.group == "default"));
    c.client
        .create_table("ev", Split::Even(4), Durability::Sync)
        .unwrap();
    c.wait_open("ev", 4);
    write_all(&c, "ev", 400, 1);
    c.client.flush("ev").unwrap();
    // Every flushed row, each exactly once, in key order.
    let t0 = Instant::now();
    let (rows, stats) = loop {
        let (rows, stats) = c.client.query_vec(&eventual("ev")).unwrap();
        if rows.len() == 400 || t0.elapsed() > Duration::from_secs(10) {
            break (rows, stats);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(rows.len(), 400, "{stats:?}");
    let mut want: Vec<(Vec<u8>, Vec<u8>)> = (0..400).map(|n| (key(n), value(n, 1))).collect();
    want.sort();
    let got: Vec<(Vec<u8>, Vec<u8>)> = rows.into_iter().map(|r| (r.key, r.value)).collect();
    assert_eq!(got, want);
    assert!(stats.attempts >= 4, "{stats:?}");
    assert_eq!(stats.served_by_tserver, 0, "{stats:?}");

    // New versions, no explicit flush: visible to eventual scans within
    // flush_max_age_ms + metadata_ttl_ms (+ a heartbeat and a flush).
    write_all(&c, "ev", 400, 2);
    let t0 = Instant::now();
    loop {
        let (rows, _) = c.client.query_vec(&eventual("ev")).unwrap();
        assert_eq!(rows.len(), 400);
        let fresh = rows.iter().filter(|r| r.value.starts_with(b"v2-")).count();
        // Never a mixed-up or damaged row: each is version 1 or 2 of its key.
        for r in &rows {
            let n = (0..400).find(|&n| key(n) == r.key).unwrap();
            assert!(r.value == value(n, 1) || r.value == value(n, 2));
        }
        if fresh == 400 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "{fresh} of 400 new versions visible after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn busy_scan_servers_shed_load_and_every_row_is_still_right() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    for _ in 0..3 {
        c.add_sserver(|s| s.scan_threads = 1);
    }
    wait_sservers(&c, 3);
    c.client
        .create_table("hot", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("hot", 1);
    write_all(&c, "hot", 1_000, 1);
    c.client.flush("hot").unwrap();
    let mut want: Vec<Vec<u8>> = (0..1_000).map(key).collect();
    want.sort();
    // Many concurrent eventual scans of one hot tablet with a 1 ms busy
    // timeout on scan servers of one scan thread each.
    let addr = c.addr();
    let admin = c.admin.clone();
    let threads: Vec<_> = (0..12)
        .map(|_| {
            let (addr, admin, want) = (addr.clone(), admin.clone(), want.clone());
            std::thread::spawn(move || {
                let client = common::client_as(&addr, &admin);
                let mut busy = 0;
                for _ in 0..4 {
                    let q = Query {
                        consistency: Consistency::Eventual {
                            profile: None,
                            busy_timeout_ms: Some(1),
                        },
                        batch_rows: 20,
                        ..Query::new("hot")
                    };
                    let (rows, stats) = client.query_vec(&q).unwrap();
                    let keys: Vec<Vec<u8>> = rows.iter().map(|r| r.key.clone()).collect();
                    assert_eq!(keys, want, "rows lost, repeated or out of order");
                    busy += stats.busy_answers;
                }
                busy
            })
        })
        .collect();
    let busy: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(busy > 0, "no scan server ever answered busy");
    // The scan servers say on which attempt and plan they served: every
    // scan was served at least once (48; a stream answered busy between
    // batches is served again from where it stopped), some after a busy
    // answer.
    let t0 = Instant::now();
    loop {
        let servers = c.client.status().unwrap().scan_servers;
        let sum = |f: fn(&tablinum_client::ScanServer) -> &Vec<u64>, i: usize| -> u64 {
            servers.iter().map(|s| f(s)[i]).sum()
        };
        let first = sum(|s| &s.served_by_attempt, 0);
        let later: u64 = (1..4).map(|i| sum(|s| &s.served_by_attempt, i)).sum();
        let by_plan: u64 = (0..4).map(|i| sum(|s| &s.served_by_plan, i)).sum();
        if first + later >= 48 && by_plan == first + later {
            assert!(later > 0, "no scan served after a busy answer: {servers:?}");
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "served counts never reached 48: {servers:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn bad_eventual_requests_say_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    let ss = c.add_sserver(|_| {});
    wait_sservers(&c, 1);
    c.client
        .create_table("b", Split::Even(1), Durability::Sync)
        .unwrap();
    c.wait_open("b", 1);
    let q = |profile: Option<&str>, busy: Option<u64>| Query {
        consistency: Consistency::Eventual {
            profile: profile.map(str::to_string),
            busy_timeout_ms: busy,
        },
        ..Query::new("b")
    };
    let e = c.client.query_vec(&q(Some("nope"), None)).unwrap_err();
    assert!(e.to_string().contains("nope"), "{e}");
    for bad in [0, 3_600_001] {
        let e = c.client.query_vec(&q(None, Some(bad))).unwrap_err();
        assert!(e.to_string().contains("busy timeout"), "{e}");
    }
    let e = c
        .client
        .query_vec(&Query {
            index: Some(b"i".to_vec()),
            ..q(None, None)
        })
        .unwrap_err();
    assert!(e.to_string().contains("index"), "{e}");
    // The scan server itself: reads only, table ids required.
    c.rt.block_on(async {
        let mut raw = common::raw_tserver(&ss).await;
        let w = raw
            .write(tablinum_proto::v1::WriteRequest {
                table: "b".into(),
                mutations: vec![tablinum_proto::v1::Mutation {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                    ..Default::default()
                }],
                table_id: 0,
            })
            .await
            .unwrap_err();
        assert_eq!(w.code(), tonic::Code::Unimplemented, "{w:?}");
        let g = raw
            .get(tablinum_proto::v1::GetRequest {
                table: "b".into(),
                key: b"k".to_vec(),
                table_id: 0,
                tablet_id: 0,
                busy_timeout_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(g.code(), tonic::Code::InvalidArgument, "{g:?}");
        let g = raw
            .get(tablinum_proto::v1::GetRequest {
                table: "b".into(),
                key: b"k".to_vec(),
                table_id: 9_999,
                tablet_id: 0,
                busy_timeout_ms: 0,
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(g.code(), tonic::Code::FailedPrecondition, "{g:?}");
    });
    // A scan server pointed at a missing storage root does not start.
    let cfg = tablinum_server::SserverConfig {
        storage: dir.path().join("missing"),
        cluster_secret_file: dir.path().join("cluster.secret"),
        ..Default::default()
    };
    let e = cfg.validate().unwrap_err().to_string();
    assert!(e.contains("storage") && e.contains("missing"), "{e}");
}

#[test]
fn server_side_filters_run_identically_on_tablet_and_scan_servers() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    c.add_sserver(|_| {});
    wait_sservers(&c, 1);
    c.client
        .create_table("g", Split::Even(3), Durability::Nosync)
        .unwrap();
    c.wait_open("g", 3);
    // Random hex rows, as in the report's grep test; "def" sometimes.
    let rows: Vec<(Vec<u8>, Vec<u8>)> = (0..3_000u64)
        .map(|n| {
            let k = format!("{:016x}", common::mix(n)).into_bytes();
            let v = format!("{:016x}{:016x}", common::mix(n + 7), common::mix(n + 11)).into_bytes();
            (k, v)
        })
        .collect();
    let m: Vec<Mutation> = rows
        .iter()
        .map(|(k, v)| Mutation {
            key: k.clone(),
            value: v.clone(),
            ..Default::default()
        })
        .collect();
    c.client.write_routed("g", m).unwrap();
    c.client.flush("g").unwrap();
    let contains = |h: &[u8], n: &[u8]| h.windows(n.len()).any(|w| w == n);
    let mut want: Vec<&(Vec<u8>, Vec<u8>)> = rows
        .iter()
        .filter(|(k, v)| contains(k, b"def") || contains(v, b"def"))
        .collect();
    want.sort();
    assert!(!want.is_empty() && want.len() < 1_000, "{}", want.len());
    for consistency in [
        Consistency::Immediate,
        Consistency::Eventual {
            profile: None,
            busy_timeout_ms: None,
        },
    ] {
        let grep = |count_only| Query {
            consistency: consistency.clone(),
            filter: Some(tablinum_client::Filter {
                grep: b"def".to_vec(),
                count_only,
                ..Default::default()
            }),
            ..Query::new("g")
        };
        let (got, stats) = c.client.query_vec(&grep(false)).unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = got.into_iter().map(|r| (r.key, r.value)).collect();
        let want_rows: Vec<(Vec<u8>, Vec<u8>)> = want.iter().map(|r| (*r).clone()).collect();
        assert_eq!(got, want_rows, "{consistency:?}");
        // Work done on the servers vs rows returned: every row examined.
        assert_eq!(stats.rows_examined, 3_000, "{consistency:?} {stats:?}");
        assert_eq!(stats.rows_matched, want.len() as u64, "{stats:?}");
        let (none, stats) = c.client.query_vec(&grep(true)).unwrap();
        assert!(none.is_empty());
        assert_eq!(stats.rows_matched, want.len() as u64, "{stats:?}");
        assert_eq!(stats.rows_sent, 0, "{stats:?}");
        // A key prefix.
        let (got, _) = c
            .client
            .query_vec(&Query {
                consistency: consistency.clone(),
                filter: Some(tablinum_client::Filter {
                    key_prefix: b"a".to_vec(),
                    ..Default::default()
                }),
                ..Query::new("g")
            })
            .unwrap();
        let n = rows.iter().filter(|(k, _)| k.starts_with(b"a")).count();
        assert_eq!(got.len(), n);
        assert!(got.iter().all(|r| r.key.starts_with(b"a")));
    }
}

/// The report's "zero problems", checked for correctness: while clients run
/// eventual scans and verify every row, scan servers stop and new ones
/// start, and writers overwrite every row (so the tablet server flushes,
/// compacts and deletes files under the scan servers' views). No client
/// error, no missing, repeated, damaged or unknown row.
#[test]
fn churn_of_scan_servers_and_files_loses_or_corrupts_no_row() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |t| {
        t.flush_max_age_ms = 200;
        t.tablet_memtable_mib = 1;
    });
    let mut live: Vec<usize> = Vec::new();
    for _ in 0..3 {
        c.add_sserver(|s| {
            s.metadata_ttl_ms = 200;
            s.scan_threads = 2;
        });
        live.push(c.extra.len() - 1);
    }
    wait_sservers(&c, 3);
    c.client
        .create_table("churn", Split::Even(4), Durability::Nosync)
        .unwrap();
    c.wait_open("churn", 4);
    const KEYS: u64 = 600;
    write_all(&c, "churn", KEYS, 1);
    c.client.flush("churn").unwrap();
    let mut want_keys: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    want_keys.sort();
    let stop = Arc::new(AtomicBool::new(false));
    let version = Arc::new(AtomicU64::new(1));
    let scans = Arc::new(AtomicU64::new(0));
    // Writers: every key rewritten, version after version.
    let writer = {
        let (addr, admin, stop, version) =
            (c.addr(), c.admin.clone(), stop.clone(), version.clone());
        std::thread::spawn(move || {
            let client = common::client_as(&addr, &admin);
            while !stop.load(Ordering::Relaxed) {
                let v = version.load(Ordering::Relaxed) + 1;
                for chunk in (0..KEYS).collect::<Vec<_>>().chunks(150) {
                    let m: Vec<Mutation> = chunk
                        .iter()
                        .map(|&i| Mutation {
                            key: key(i),
                            value: value(i, v),
                            ..Default::default()
                        })
                        .collect();
                    client.write_routed("churn", m).unwrap();
                }
                version.store(v, Ordering::Relaxed);
            }
        })
    };
    // Readers: every eventual scan returns every key once, in order, each
    // with a value some writer wrote for it.
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (addr, admin, stop, version, scans, want_keys) = (
                c.addr(),
                c.admin.clone(),
                stop.clone(),
                version.clone(),
                scans.clone(),
                want_keys.clone(),
            );
            std::thread::spawn(move || {
                let client = common::client_as(&addr, &admin);
                while !stop.load(Ordering::Relaxed) {
                    let q = Query {
                        batch_rows: 50,
                        ..eventual("churn")
                    };
                    let (rows, stats) = client
                        .query_vec(&q)
                        .unwrap_or_else(|e| panic!("an eventual scan failed: {e}"));
                    let keys: Vec<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
                    assert_eq!(keys.len(), want_keys.len(), "{stats:?}");
                    assert!(keys.iter().zip(&want_keys).all(|(a, b)| *a == b.as_slice()));
                    let newest = version.load(Ordering::Relaxed) + 1;
                    for r in &rows {
                        // value(n, v) is "v{v}-{n:06}-" padded.
                        let text = String::from_utf8_lossy(&r.value[..32.min(r.value.len())]);
                        let mut parts = text.trim_start_matches('v').split('-');
                        let v: u64 = parts.next().unwrap().parse().unwrap();
                        let n: u64 = parts.next().unwrap().parse().unwrap();
                        assert!((1..=newest).contains(&v), "version {v} of a key");
                        assert_eq!(r.value, value(n, v), "damaged value");
                        assert_eq!(r.key, key(n), "a value under the wrong key");
                    }
                    scans.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // Churn: stop the oldest scan server, start a new one, every 700 ms.
    let t0 = std::time::Instant::now();
    let mut stopped = 0;
    while t0.elapsed() < Duration::from_secs(8) {
        std::thread::sleep(Duration::from_millis(700));
        let oldest = live.remove(0);
        // Start the new one first (a new process at a new address), then
        // stop the oldest.
        c.add_sserver(|s| {
            s.metadata_ttl_ms = 200;
            s.scan_threads = 2;
        });
        let fresh = c.extra.pop().unwrap();
        let r = std::mem::replace(&mut c.extra[oldest], fresh);
        c.rt.block_on(r.shutdown());
        live.push(oldest);
        stopped += 1;
    }
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    for r in readers {
        r.join().unwrap();
    }
    assert!(stopped >= 8, "{stopped} scan servers stopped");
    assert!(
        scans.load(Ordering::Relaxed) >= 10,
        "{} scans verified",
        scans.load(Ordering::Relaxed)
    );
    assert!(
        version.load(Ordering::Relaxed) >= 3,
        "writers made little progress"
    );
}

/// A dispatcher with one first-plan server per tablet: `one` never hedges,
/// `hedged` hedges after 2 ms.
const POINT_PROFILES: &str = r#"
default = "one"
[profiles.one]
attempts = [ { servers = 1, busy_timeout_ms = 60000 } ]
[profiles.hedged]
attempts = [ { servers = 1, busy_timeout_ms = 60000 } ]
hedge = { after_ms = 2 }
"#;

#[test]
fn eventual_point_reads_hedge_past_a_loaded_scan_server() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    let mut sservers = Vec::new();
    for _ in 0..2 {
        sservers.push(c.add_sserver(|s| s.scan_threads = 1));
    }
    wait_sservers(&c, 2);
    c.client
        .create_table("p", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("p", 1);
    // Large values, so a filtered batch keeps a scan thread for a while.
    let big = |n: u64| {
        let mut v = value(n, 1);
        v.resize(16 << 10, b'x');
        v
    };
    for chunk in (0..3_000u64).collect::<Vec<_>>().chunks(50) {
        let m: Vec<Mutation> = chunk
            .iter()
            .map(|&i| Mutation {
                key: key(i),
                value: big(i),
                ..Default::default()
            })
            .collect();
        c.client.write_routed("p", m).unwrap();
    }
    c.client.flush("p").unwrap();
    let profiles =
        std::sync::Arc::new(tablinum_client::Profiles::from_toml_str(POINT_PROFILES).unwrap());
    let cfg = || tablinum_client::ClientConfig {
        dispatcher: Some(profiles.clone()),
        ..tablinum_client::ClientConfig::with_credential(Some(c.admin.clone()))
    };
    let reader = tablinum_client::Client::connect_with(&c.addr(), cfg()).unwrap();
    let ev = |profile: &str| Consistency::Eventual {
        profile: Some(profile.to_string()),
        busy_timeout_ms: None,
    };

    // Unloaded: one attempt on the tablet's first-plan server, no hedge.
    let (v, s) = reader.get_with("p", &key(7), &ev("one")).unwrap();
    assert_eq!(v.as_deref(), Some(&big(7)[..]));
    assert_eq!((s.attempts, s.hedges, s.plan), (1, 0, Some(0)), "{s:?}");
    assert!(sservers.contains(&s.server), "{s:?} not a scan server");
    let primary = s.server.clone();
    let (h, s) = reader.head_with("p", &key(8), &ev("one")).unwrap();
    assert_eq!(h.unwrap().value_len, 16 << 10);
    assert_eq!(s.server, primary);
    let (v, s) = reader
        .get_with("p", b"no such key", &Consistency::Immediate)
        .unwrap();
    assert_eq!((v, s.plan, s.attempts), (None, None, 1));

    // Load the primary's single scan thread with filtered scans that match
    // nothing (the same first-plan server: same profile, same tablet).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loaders: Vec<_> = (0..3)
        .map(|_| {
            let client = tablinum_client::Client::connect_with(&c.addr(), cfg()).unwrap();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let t0 = Instant::now();
                while !stop.load(std::sync::atomic::Ordering::Relaxed)
                    && t0.elapsed() < Duration::from_secs(60)
                {
                    let q = Query {
                        consistency: Consistency::Eventual {
                            profile: Some("one".into()),
                            busy_timeout_ms: None,
                        },
                        batch_rows: 1_000,
                        filter: Some(tablinum_client::Filter {
                            grep: b"no row holds this".to_vec(),
                            count_only: true,
                            ..Default::default()
                        }),
                        ..Query::new("p")
                    };
                    let (_, stats) = client.query_vec(&q).unwrap();
                    assert_eq!(stats.rows_matched, 0);
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let (mut hedges, mut won, mut busy) = (0, 0, 0);
    for i in 0..40u64 {
        let n = common::mix(i) % 3_000;
        let (v, s) = reader.get_with("p", &key(n), &ev("hedged")).unwrap();
        assert_eq!(v.as_deref(), Some(&big(n)[..]), "key {n}: wrong value");
        assert!(sservers.contains(&s.server), "{s:?}");
        assert_eq!(s.server != primary, s.hedge_won, "{s:?}");
        hedges += s.hedges;
        won += u32::from(s.hedge_won);
        // A short busy timeout on the loaded server moves the read on.
        let (v, s) = reader
            .get_with(
                "p",
                &key(n),
                &Consistency::Eventual {
                    profile: Some("one".into()),
                    busy_timeout_ms: Some(1),
                },
            )
            .unwrap();
        assert_eq!(v.as_deref(), Some(&big(n)[..]), "key {n}: wrong value");
        busy += s.busy_answers;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in loaders {
        l.join().unwrap();
    }
    eprintln!("40 hedged reads: {hedges} hedges, {won} won; busy answers {busy}");
    assert!(hedges > 0 && won > 0, "hedges {hedges}, won {won}");
    assert!(busy > 0, "the loaded scan server never answered busy");
}

/// A dropped table is unreadable through scan servers within a heartbeat,
/// whoever keeps asking: a running eventual scan fails naming the drop, a
/// reader asking every 200 ms is refused, and the files are removed once
/// the scan server's reservations lapse (which no reader can extend).
#[test]
fn a_dropped_table_is_unreadable_through_scan_servers_and_its_files_go() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    let ss = c.add_sserver(|s| {
        s.metadata_ttl_ms = 500;
        s.reservation_lease_ms = 1_000;
    });
    wait_sservers(&c, 1);
    c.client
        .create_table("d", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("d", 1);
    write_all(&c, "d", 400, 1);
    c.client.flush("d").unwrap();
    let table_id = c.client.locations("d", false).unwrap().table.id;
    let table_dir = dir
        .path()
        .join("storage")
        .join("tables")
        .join(table_id.to_string());
    assert!(table_dir.is_dir());
    // A slow eventual scan: the table is dropped after its first rows.
    let q = Query {
        batch_rows: 10,
        stream_limit: tablinum_stream::window::WindowMode::Fixed(1),
        ..eventual("d")
    };
    let reader = c.new_client();
    let dropper = c.new_client();
    let mut keys = 0;
    let mut dropped_at = None;
    let e = reader
        .query(&q, &mut |_| {
            keys += 1;
            if keys == 50 {
                dropper.drop_table("d").unwrap();
                dropped_at = Some(Instant::now());
            }
            std::thread::sleep(Duration::from_millis(4));
        })
        .unwrap_err();
    let dropped_at = dropped_at.expect("the drop happened");
    assert!(keys < 400, "the scan read the whole dropped table");
    assert!(
        dropped_at.elapsed() < Duration::from_secs(5),
        "the scan went on for {:?} after the drop",
        dropped_at.elapsed()
    );
    let msg = e.to_string();
    assert!(
        msg.contains("dropped") || msg.contains("no table") || msg.contains("not found"),
        "{msg}"
    );
    // A reader that keeps asking the scan server directly is refused, and
    // cannot keep the files alive.
    let admin = c.admin.clone();
    let t0 = Instant::now();
    while table_dir.exists() {
        let r = c.rt.block_on(async {
            let mut raw = common::raw_tserver_as(&ss, Some(&admin)).await;
            raw.get(tablinum_proto::v1::GetRequest {
                table: "d".into(),
                key: key(1),
                table_id,
                tablet_id: 0,
                ..Default::default()
            })
            .await
        });
        match r {
            // The scan server learns of the drop with its next heartbeat.
            Ok(_) => assert!(
                dropped_at.elapsed() < Duration::from_secs(1),
                "a scan server served a table dropped {:?} ago",
                dropped_at.elapsed()
            ),
            Err(e) => {
                assert_eq!(e.code(), tonic::Code::NotFound, "{e:?}");
                assert!(e.message().contains("dropped"), "{}", e.message());
            }
        }
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "the dropped table's files were never removed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A read token may hold only its share of a scan server's streams, as on
/// tablet servers; others are still served.
#[test]
fn one_caller_holds_only_its_share_of_a_scan_servers_streams() {
    use tablinum_proto::v1;
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    let ss = c.add_sserver(|s| s.scan_streams_per_caller_max = 2);
    wait_sservers(&c, 1);
    let table = c
        .client
        .create_table("share", Split::Even(1), Durability::Sync)
        .unwrap();
    c.wait_open("share", 1);
    write_all(&c, "share", 50, 1);
    c.client.flush("share").unwrap();
    let (_, greedy) = c.client.create_token(Role::Read, "greedy").unwrap();
    let (_, other) = c.client.create_token(Role::Read, "other").unwrap();
    std::thread::sleep(Duration::from_millis(600));
    c.rt.block_on(async {
        let open = |cred: tablinum_auth::Credential| {
            let ss = ss.clone();
            let scan = v1::ScanStart {
                table: "share".into(),
                table_id: table.id,
                tablet_id: 0,
                window: 1,
                batch_rows: 1,
                ..Default::default()
            };
            async move {
                let (tx, mut s) = common::open_many(&ss, Some(&cred), vec![scan]).await?;
                match tokio::time::timeout(Duration::from_secs(10), s.message()).await {
                    Ok(Ok(Some(_))) => Ok((tx, s)),
                    Ok(Ok(None)) => Err(tonic::Status::unknown("ended")),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(tonic::Status::unknown("no message within 10 s")),
                }
            }
        };
        let a = open(greedy.clone()).await.unwrap();
        let b = open(greedy.clone()).await.unwrap();
        let e = open(greedy.clone()).await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_streams_per_caller_max = 2"),
            "{}",
            e.message()
        );
        open(other.clone()).await.unwrap();
        drop((a, b));
        // Its streams gone, the greedy caller is served again.
        let t0 = std::time::Instant::now();
        while let Err(e) = open(greedy.clone()).await {
            assert!(t0.elapsed() < Duration::from_secs(5), "{e:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

/// The ledger tables and journal segments of a tablet directory.
fn tablet_files(dir: &std::path::Path) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for sub in ["ledger", "journal"] {
        let Ok(rd) = std::fs::read_dir(dir.join(sub)) else {
            continue;
        };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".sst") || name.ends_with(".jnl") {
                out.insert(format!("{sub}/{name}"));
            }
        }
    }
    out
}

/// A scan that runs longer than a reservation lease does not keep the
/// tablet's obsolete files in its directory: once its view is a lease old,
/// the scan server pins the view's files (open handles) and releases the
/// reservation, so compaction leftovers go while the scan reads on, and
/// the scan still returns every row once, in order.
#[test]
fn a_long_eventual_scan_does_not_keep_obsolete_files() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    c.add_sserver(|s| {
        s.metadata_ttl_ms = 500;
        s.reservation_lease_ms = 1_000;
    });
    wait_sservers(&c, 1);
    c.client
        .create_table("long", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("long", 1);
    const KEYS: u64 = 400;
    write_all(&c, "long", KEYS, 1);
    c.client.flush("long").unwrap();
    let table_id = c.client.locations("long", false).unwrap().table.id;
    let tablet_dir = dir
        .path()
        .join("storage")
        .join("tables")
        .join(table_id.to_string())
        .join("0");
    let before = tablet_files(&tablet_dir);
    let tables_before: Vec<String> = before
        .iter()
        .filter(|f| f.ends_with(".sst"))
        .cloned()
        .collect();
    assert!(!tables_before.is_empty(), "{before:?}");
    // A slow eventual scan: one batch of 10 rows at a time, 15 ms a row.
    let read = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let scan = {
        let (addr, admin, read, done) = (c.addr(), c.admin.clone(), read.clone(), done.clone());
        std::thread::spawn(move || {
            let client = common::client_as(&addr, &admin);
            let q = Query {
                batch_rows: 10,
                stream_limit: tablinum_stream::window::WindowMode::Fixed(1),
                ..eventual("long")
            };
            let mut keys = Vec::new();
            let r = client.query(&q, &mut |row| {
                keys.push(row.key);
                read.fetch_add(1, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(15));
            });
            done.store(true, Ordering::Relaxed);
            (r, keys)
        })
    };
    let t0 = Instant::now();
    while read.load(Ordering::Relaxed) < 10 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the scan never started"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Rewrite everything, flushing each time: compactions replace the
    // tables the scan's view names.
    for v in 2..=6 {
        write_all(&c, "long", KEYS, v);
        c.client.flush("long").unwrap();
    }
    let mut gone_while_scanning = false;
    while !done.load(Ordering::Relaxed) {
        let now = tablet_files(&tablet_dir);
        if tables_before.iter().any(|f| !now.contains(f)) {
            gone_while_scanning = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let (r, keys) = scan.join().unwrap();
    r.unwrap();
    let mut want: Vec<Vec<u8>> = (0..KEYS).map(key).collect();
    want.sort();
    assert_eq!(keys, want, "every row once, in order");
    assert!(
        gone_while_scanning,
        "the scan ({} rows) ended before any of its obsolete tables {tables_before:?} left the \
         directory (now {:?})",
        read.load(Ordering::Relaxed),
        tablet_files(&tablet_dir)
    );
}
