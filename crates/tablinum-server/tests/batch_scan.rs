//! Batch scans end to end on loopback sockets: many ranges over many
//! tablets in one call, each range's rows exactly (immediate and eventual);
//! busy scan servers shedding a batch's bins while every range stays right;
//! a scan server shut down between and during batches; bad input refused
//! with typed errors and nothing sent.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::TestCluster;
use tablinum_client::{
    BatchResult, BatchScan, BinOutcome, Client, Consistency, Durability, Error, Filter, KeyRange,
    Mutation, Query, ServedBy, Split,
};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

const ROWS: u64 = 3_000;
/// Tablets of every test table: split every 500 keys.
const TABLETS: usize = 6;

fn key(n: u64) -> Vec<u8> {
    format!("k{n:06}").into_bytes()
}

fn value(n: u64) -> Vec<u8> {
    let mut v = format!("v-{n:06}-").into_bytes();
    v.resize(300, (n % 251) as u8);
    v
}

/// Creates `table` (six tablets), loads `ROWS` rows, flushes; returns the
/// model of what it holds.
fn load(c: &TestCluster, table: &str) -> Model {
    let splits: Vec<Vec<u8>> = (1..TABLETS as u64).map(|i| key(i * 500)).collect();
    c.client
        .create_table(table, Split::Points(splits), Durability::Nosync)
        .unwrap();
    wait_assigned(&c.client, table);
    let mut model = Model::new();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(250) {
        let m: Vec<Mutation> = chunk
            .iter()
            .map(|&n| Mutation {
                key: key(n),
                value: value(n),
                ..Default::default()
            })
            .collect();
        for &n in chunk {
            model.insert(key(n), value(n));
        }
        c.client.write_routed(table, m).unwrap();
    }
    c.client.flush(table).unwrap();
    model
}

/// Waits (bounded) until every tablet of `table` has a server.
fn wait_assigned(client: &Client, table: &str) {
    let t0 = Instant::now();
    loop {
        let loc = client.locations(table, true).unwrap();
        if loc.tablets.len() == TABLETS && loc.tablets.iter().all(|t| !t.server.is_empty()) {
            return;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{table}: tablets unassigned after 60 s"
        );
        std::thread::sleep(Duration::from_millis(50));
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

/// Twenty-odd ranges without overlap: one from the table's start, twenty
/// of 25..140 keys (several across a tablet boundary), one to the end of
/// the table past every key (empty).
fn ranges() -> Vec<KeyRange> {
    let mut r = vec![KeyRange::new(Vec::new(), key(7))];
    for i in 0..20u64 {
        let s = 20 + i * 145;
        let len = 25 + (i * 37) % 115;
        r.push(KeyRange::new(key(s), key(s + len)));
    }
    r.push(KeyRange::new(key(2_950), key(2_990)));
    r.push(KeyRange::new(*b"x", Vec::new()));
    r
}

fn eventual(busy_timeout_ms: Option<u64>) -> Consistency {
    Consistency::Eventual {
        profile: None,
        busy_timeout_ms,
    }
}

/// Each range's rows as the model has them (first `limit`; keys only:
/// empty values).
fn expected(model: &Model, req: &BatchScan) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    req.ranges
        .iter()
        .map(|r| {
            let hi = if r.end.is_empty() {
                std::ops::Bound::Unbounded
            } else {
                std::ops::Bound::Excluded(r.end.clone())
            };
            let keep = |k: &Vec<u8>, v: &Vec<u8>| {
                let f = req.filter.clone().unwrap_or_default();
                k.starts_with(&f.key_prefix)
                    && (f.grep.is_empty()
                        || k.windows(f.grep.len()).any(|w| w == f.grep)
                        || v.windows(f.grep.len()).any(|w| w == f.grep))
            };
            let rows = model
                .range((std::ops::Bound::Included(r.start.clone()), hi))
                .filter(|(k, v)| keep(k, v))
                .map(|(k, v)| {
                    (
                        k.clone(),
                        if req.keys_only { Vec::new() } else { v.clone() },
                    )
                });
            match req.limit_per_range {
                0 => rows.collect(),
                n => rows.take(n as usize).collect(),
            }
        })
        .collect()
}

fn got(r: &BatchResult) -> Vec<Vec<(Vec<u8>, Vec<u8>)>> {
    r.ranges
        .iter()
        .map(|rows| {
            rows.iter()
                .map(|q| {
                    assert_eq!(q.term, None);
                    (q.key.clone(), q.value.clone())
                })
                .collect()
        })
        .collect()
}

/// Every range's rows exactly; the first range that differs is named.
fn assert_exact(r: &BatchResult, model: &Model, req: &BatchScan) {
    let want = expected(model, req);
    let have = got(r);
    assert_eq!(have.len(), want.len());
    for (i, (h, w)) in have.iter().zip(&want).enumerate() {
        let keys = |v: &[(Vec<u8>, Vec<u8>)]| -> Vec<String> {
            v.iter()
                .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
                .collect()
        };
        assert_eq!(keys(h), keys(w), "range {i} keys: {:?}", r.stats);
        assert!(h == w, "range {i}: a value differs");
    }
}

/// The first eventual batch after a flush may run before the scan servers
/// see the new files: retry (bounded) until it is complete.
fn eventual_until_complete(client: &Client, model: &Model, req: &BatchScan) -> BatchResult {
    let t0 = Instant::now();
    loop {
        let r = client.batch_scan(req).unwrap();
        if got(&r) == expected(model, req) {
            return r;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "eventual batch scans still incomplete after 20 s: {:?}",
            r.stats
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Internal consistency of the counters of one batch.
fn check_stats(r: &BatchResult, req: &BatchScan) {
    let s = &r.stats;
    assert_eq!(s.ranges as usize, req.ranges.len());
    assert_eq!(s.pieces as usize, s.served.len());
    assert_eq!(s.bins as usize, s.bin_log.len());
    assert_eq!(
        s.busy_answers as usize,
        s.bin_log
            .iter()
            .filter(|b| b.outcome == BinOutcome::Busy)
            .count()
    );
    assert_eq!(
        s.errors as usize,
        s.bin_log
            .iter()
            .filter(|b| matches!(b.outcome, BinOutcome::Failed(_)))
            .count()
    );
    // Every failed bin sent at least one unfinished piece again.
    assert!(s.retries >= s.busy_answers + s.errors, "{s:?}");
    assert_eq!(
        s.rows_returned,
        r.ranges.iter().map(|v| v.len() as u64).sum::<u64>()
    );
    assert_eq!(
        s.attempts,
        s.tablets.iter().map(|t| u64::from(t.attempts)).sum::<u64>()
    );
    // Every piece was sent at least once and finished somewhere.
    assert!(s.served.iter().all(|p| p.attempts >= 1), "{s:?}");
    // One busy timeout per round: every scan-server bin of a round
    // carried the same one.
    let mut per_round: BTreeMap<u32, BTreeSet<u64>> = BTreeMap::new();
    for b in s.bin_log.iter().filter(|b| b.plan.is_some()) {
        per_round
            .entry(b.round)
            .or_default()
            .insert(b.busy_timeout_ms);
    }
    assert!(per_round.values().all(|t| t.len() == 1), "{s:?}");
}

#[test]
fn batch_scans_return_exactly_each_ranges_rows_immediate_and_eventual() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    // Two tablet servers, so immediate batches bin over both.
    c.add_tserver(|_| {});
    let t0 = Instant::now();
    while c.client.status().unwrap().servers.len() < 2 {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "second tablet server"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..3 {
        c.add_sserver(|_| {});
    }
    wait_sservers(&c, 3);
    let model = load(&c, "bt");
    let loc = c.client.locations("bt", true).unwrap();
    let tserver_of: BTreeMap<u64, String> = loc
        .tablets
        .iter()
        .map(|t| (t.id, t.server.clone()))
        .collect();

    // Immediate: every range exactly, served by the tablets' servers.
    let req = BatchScan {
        batch_rows: 16,
        ..BatchScan::new("bt", ranges())
    };
    let r = c.client.batch_scan(&req).unwrap();
    assert_exact(&r, &model, &req);
    check_stats(&r, &req);
    let s = &r.stats;
    assert_eq!(s.ranges, 23);
    // 23 ranges, four of them across a tablet boundary.
    assert_eq!(s.pieces, 27, "{s:?}");
    assert!(s.tablets.len() == TABLETS, "{s:?}");
    for p in &s.served {
        assert_eq!(
            p.served_by,
            ServedBy::TabletServer {
                server: tserver_of[&p.tablet_id].clone()
            },
            "{s:?}"
        );
    }
    let servers: BTreeSet<&str> = tserver_of.values().map(String::as_str).collect();
    let binned: BTreeSet<&str> = s.bin_log.iter().map(|b| b.server.as_str()).collect();
    assert_eq!(binned, servers, "one bin per tablet server: {s:?}");
    assert_eq!(s.rows_returned, s.rows_received);

    // Limits, keys only and a filter, immediate.
    let limited = BatchScan {
        limit_per_range: 7,
        keys_only: true,
        filter: Some(Filter {
            key_prefix: b"k00".to_vec(),
            ..Default::default()
        }),
        ..req.clone()
    };
    let r = c.client.batch_scan(&limited).unwrap();
    assert_exact(&r, &model, &limited);
    check_stats(&r, &limited);
    assert!(r.ranges.iter().all(|v| v.len() <= 7));
    assert!(r.ranges.iter().flatten().all(|q| q.value.is_empty()));

    // Eventual: the same rows from scan servers, in one round when nothing
    // is busy, at most one bin per scan server per round.
    let ev = BatchScan {
        consistency: eventual(None),
        ..req.clone()
    };
    let r = eventual_until_complete(&c.client, &model, &ev);
    for _ in 0..3 {
        let r = c.client.batch_scan(&ev).unwrap();
        assert_exact(&r, &model, &ev);
        check_stats(&r, &ev);
    }
    let s = &r.stats;
    check_stats(&r, &ev);
    let sservers: BTreeSet<String> = c
        .client
        .status()
        .unwrap()
        .scan_servers
        .into_iter()
        .map(|s| s.address)
        .collect();
    for p in &s.served {
        match &p.served_by {
            ServedBy::ScanServer { server, .. } => assert!(sservers.contains(server), "{s:?}"),
            other => panic!("piece served by {other:?}: {s:?}"),
        }
    }
    let mut per_round: BTreeMap<(u32, &str), u32> = BTreeMap::new();
    for b in &s.bin_log {
        *per_round.entry((b.round, b.server.as_str())).or_default() += 1;
    }
    assert!(per_round.values().all(|&n| n == 1), "{s:?}");

    // Eventual with a limit and keys only.
    let ev_limited = BatchScan {
        consistency: eventual(None),
        ..limited
    };
    let r = c.client.batch_scan(&ev_limited).unwrap();
    assert_exact(&r, &model, &ev_limited);
}

#[test]
fn busy_scan_servers_shed_batch_bins_and_every_range_is_still_right() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    for _ in 0..3 {
        c.add_sserver(|s| s.scan_threads = 1);
    }
    wait_sservers(&c, 3);
    let model = Arc::new(load(&c, "hot"));
    let base = BatchScan {
        batch_rows: 20,
        consistency: eventual(None),
        ..BatchScan::new("hot", ranges())
    };
    eventual_until_complete(&c.client, &model, &base);
    // Batch scans with a 1 ms busy timeout on scan servers of one scan
    // thread each, while other clients run eventual queries of the whole
    // table against the same servers.
    let stop = Arc::new(AtomicBool::new(false));
    let loaders: Vec<_> = (0..3)
        .map(|_| {
            let (addr, admin, stop) = (c.addr(), c.admin.clone(), stop.clone());
            std::thread::spawn(move || {
                let client = common::client_as(&addr, &admin);
                while !stop.load(Ordering::Relaxed) {
                    let q = Query {
                        consistency: eventual(Some(1)),
                        batch_rows: 20,
                        ..Query::new("hot")
                    };
                    let (rows, _) = client.query_vec(&q).unwrap();
                    assert_eq!(rows.len() as u64, ROWS);
                }
            })
        })
        .collect();
    let busy = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let batches: Vec<_> = (0..6)
        .map(|_| {
            let (addr, admin, model, busy, retries) = (
                c.addr(),
                c.admin.clone(),
                model.clone(),
                busy.clone(),
                retries.clone(),
            );
            let req = BatchScan {
                consistency: eventual(Some(1)),
                ..base.clone()
            };
            std::thread::spawn(move || {
                let client = common::client_as(&addr, &admin);
                for _ in 0..4 {
                    let r = client.batch_scan(&req).unwrap();
                    assert_exact(&r, &model, &req);
                    check_stats(&r, &req);
                    busy.fetch_add(r.stats.busy_answers, Ordering::Relaxed);
                    retries.fetch_add(r.stats.retries, Ordering::Relaxed);
                    // A busy bin recorded an attempt for its tablets.
                    let tablet_busy: u64 = r.stats.tablets.iter().map(|t| u64::from(t.busy)).sum();
                    assert!(tablet_busy >= r.stats.busy_answers, "{:?}", r.stats);
                }
            })
        })
        .collect();
    for b in batches {
        b.join().unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for l in loaders {
        l.join().unwrap();
    }
    let (busy, retries) = (
        busy.load(Ordering::Relaxed),
        retries.load(Ordering::Relaxed),
    );
    assert!(busy > 0, "no scan server ever answered a batch's bin busy");
    assert!(retries >= busy, "{retries} retries for {busy} busy answers");
}

#[test]
fn a_scan_server_shut_down_mid_batch_loses_no_row() {
    let dir = tempfile::tempdir().unwrap();
    // The manager keeps listing a silent scan server for 10 s, so batches
    // after the shutdown are still sent to it and must move on.
    let mut c = TestCluster::start_with(dir.path(), |m| m.heartbeat_timeout_ms = 10_000, |_| {});
    let mut addrs = Vec::new();
    for _ in 0..3 {
        addrs.push(c.add_sserver(|_| {}));
    }
    wait_sservers(&c, 3);
    let model = Arc::new(load(&c, "kill"));
    let req = BatchScan {
        batch_rows: 8,
        consistency: eventual(None),
        ..BatchScan::new("kill", ranges())
    };
    eventual_until_complete(&c.client, &model, &req);
    let dead = addrs[0].clone();
    let killed = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let errors_after = Arc::new(AtomicU64::new(0));
    let reader = {
        let (addr, admin, model, req, dead) = (
            c.addr(),
            c.admin.clone(),
            model.clone(),
            req.clone(),
            dead.clone(),
        );
        let (killed, stop, done, errors_after) = (
            killed.clone(),
            stop.clone(),
            done.clone(),
            errors_after.clone(),
        );
        std::thread::spawn(move || {
            let client = common::client_as(&addr, &admin);
            while !stop.load(Ordering::Relaxed) {
                let after_kill = killed.load(Ordering::Acquire);
                let r = client
                    .batch_scan(&req)
                    .unwrap_or_else(|e| panic!("a batch scan failed: {e}"));
                assert_exact(&r, &model, &req);
                check_stats(&r, &req);
                if after_kill {
                    errors_after.fetch_add(r.stats.errors, Ordering::Relaxed);
                    // Nothing of a batch begun after the shutdown came
                    // from the dead server.
                    assert!(
                        !r.stats.served.iter().any(|p| matches!(
                            &p.served_by,
                            ServedBy::ScanServer { server, .. } if *server == dead
                        )),
                        "{:?}",
                        r.stats
                    );
                }
                done.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let wait_done = |n: u64| {
        let t0 = Instant::now();
        while done.load(Ordering::Relaxed) < n {
            assert!(!reader.is_finished(), "the reader stopped (a batch failed)");
            assert!(t0.elapsed() < Duration::from_secs(60), "batches stalled");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    wait_done(2);
    // Shut the server down while a batch is running (the reader never
    // pauses between batches).
    let i = c
        .extra
        .iter()
        .position(|r| r.grpc.to_string() == dead)
        .unwrap();
    let r = c.extra.remove(i);
    c.rt.block_on(r.shutdown());
    killed.store(true, Ordering::Release);
    let at = done.load(Ordering::Relaxed);
    wait_done(at + 6);
    stop.store(true, Ordering::Relaxed);
    reader.join().unwrap();
    assert!(
        errors_after.load(Ordering::Relaxed) > 0,
        "no batch after the shutdown tried the dead server"
    );
}

#[test]
fn bad_batch_scans_are_refused_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |_| {});
    c.add_sserver(|_| {});
    wait_sservers(&c, 1);
    let model = load(&c, "b");
    let ev = BatchScan {
        consistency: eventual(None),
        ..BatchScan::new("b", vec![KeyRange::new(key(1), key(40))])
    };
    eventual_until_complete(&c.client, &model, &ev);
    let batches = |c: &TestCluster| -> u64 {
        c.client
            .status()
            .unwrap()
            .scan_servers
            .iter()
            .map(|s| s.batches_total)
            .sum()
    };
    std::thread::sleep(Duration::from_millis(300));
    let before = batches(&c);
    let invalid = |req: &BatchScan, what: &str| match c.client.batch_scan(req) {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(what), "{m}"),
        other => panic!("{other:?}"),
    };
    for consistency in [Consistency::Immediate, eventual(None)] {
        let req = |ranges: Vec<KeyRange>| BatchScan {
            consistency: consistency.clone(),
            ..BatchScan::new("b", ranges)
        };
        invalid(&req(vec![]), "at least one range");
        invalid(
            &req(vec![
                KeyRange::new(key(1), key(2)),
                KeyRange::new(key(9), key(3)),
            ]),
            "range 1 is empty or inverted",
        );
        invalid(&req(vec![KeyRange::new(key(5), key(5))]), "range 0");
        let unknown = BatchScan {
            table: "nope".into(),
            ..req(vec![KeyRange::new(key(1), key(2))])
        };
        match c.client.batch_scan(&unknown) {
            Err(Error::NotFound(m)) => assert!(m.contains("nope"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    invalid(
        &BatchScan {
            consistency: Consistency::Eventual {
                profile: Some("no-such-profile".into()),
                busy_timeout_ms: None,
            },
            ..ev.clone()
        },
        "no-such-profile",
    );
    invalid(
        &BatchScan {
            consistency: eventual(Some(0)),
            ..ev.clone()
        },
        "busy timeout",
    );
    invalid(
        &BatchScan {
            filter: Some(Filter {
                count_only: true,
                ..Default::default()
            }),
            ..ev.clone()
        },
        "count-only",
    );
    // Nothing reached a scan server (its heartbeats would have said so).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(batches(&c), before, "a refused batch scan read something");
    // The same client still works.
    let r = c.client.batch_scan(&ev).unwrap();
    assert_exact(&r, &model, &ev);
}
