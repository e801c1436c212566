//! The wire contract of a real cluster: flow control of scan streams (a
//! consumer that stops acknowledging stops the producer after exactly
//! `window` batches, and the ack-wait timeout ends it), and every bad input
//! getting INVALID_ARGUMENT or NOT_FOUND with a message naming the problem
//! while the data stays unchanged.

mod common;

use std::time::{Duration, Instant};

use tablinum_client::{Durability, Error, IndexTerm, Mutation, Query, Split};
use tablinum_proto::v1::{self, scan_client_message::Msg, ScanAck, ScanClientMessage, ScanStart};
use tablinum_stream::window::WindowMode;
use tokio::sync::mpsc::UnboundedSender;
use tonic::{Code, Streaming};

use common::{drain_for, TestCluster};

const ACK_WAIT_MS: u64 = 1_500;

/// Opens a raw scan stream on tablet 0 of `table`.
async fn open_scan(
    addr: &str,
    start: ScanStart,
) -> Result<(UnboundedSender<ScanClientMessage>, Streaming<v1::ScanBatch>), tonic::Status> {
    let mut c = common::raw_tserver(addr).await;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(ScanClientMessage {
        msg: Some(Msg::Start(start)),
    })
    .unwrap();
    let s = c
        .scan(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, s))
}

fn one_tablet_with_rows(c: &TestCluster, table: &str, n: usize) {
    c.client
        .create_table(table, Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open(table, 1);
    let muts = (0..n)
        .map(|i| Mutation {
            key: format!("k{i:05}").into_bytes(),
            value: vec![b'x'; 20],
            ..Default::default()
        })
        .collect();
    c.client.write(table, muts).unwrap();
}

#[test]
fn a_consumer_that_stops_acknowledging_stops_the_producer() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.ack_wait_timeout_ms = ACK_WAIT_MS);
    one_tablet_with_rows(&c, "flow", 1_000);
    let addr = c.addr();
    c.rt.block_on(async {
        let start = ScanStart {
            table: "flow".into(),
            tablet_id: 0,
            window: 3,
            batch_rows: 10,
            ..Default::default()
        };
        // Never acknowledge: exactly 3 batches, then the ack-wait timeout.
        let t0 = Instant::now();
        let (_tx, mut s) = open_scan(&addr, start.clone()).await.unwrap();
        let got = drain_for(&mut s, Duration::from_millis(700)).await;
        assert_eq!(got.len(), 3, "window 3 must stop the producer at 3 batches");
        assert!(got.iter().all(|b| b.rows.len() == 10 && !b.last));
        let err = match s.message().await {
            Ok(Some(b)) => panic!("a batch beyond the window arrived: {} rows", b.rows.len()),
            Ok(None) => panic!("the stream ended without the ack-wait error"),
            Err(e) => e,
        };
        assert_eq!(err.code(), Code::DeadlineExceeded, "{err:?}");
        assert!(
            err.message().contains("ack-wait timeout"),
            "{}",
            err.message()
        );
        assert!(t0.elapsed() >= Duration::from_millis(ACK_WAIT_MS));

        // Each acknowledgement lets exactly one more batch through; a larger
        // window in an ack lets that many more through.
        let (tx, mut s) = open_scan(
            &addr,
            ScanStart {
                window: 2,
                ..start.clone()
            },
        )
        .await
        .unwrap();
        assert_eq!(drain_for(&mut s, Duration::from_millis(400)).await.len(), 2);
        tx.send(ScanClientMessage {
            msg: Some(Msg::Ack(ScanAck {
                batches: 1,
                window: 0,
            })),
        })
        .unwrap();
        assert_eq!(drain_for(&mut s, Duration::from_millis(400)).await.len(), 1);
        tx.send(ScanClientMessage {
            msg: Some(Msg::Ack(ScanAck {
                batches: 0,
                window: 6,
            })),
        })
        .unwrap();
        assert_eq!(drain_for(&mut s, Duration::from_millis(400)).await.len(), 4);

        // Acknowledging everything streams the whole tablet, in order.
        let (tx, mut s) = open_scan(&addr, start.clone()).await.unwrap();
        let mut keys = Vec::new();
        loop {
            let b = s
                .message()
                .await
                .unwrap()
                .expect("last batch before the end");
            keys.extend(b.rows.iter().map(|r| r.key.clone()));
            tx.send(ScanClientMessage {
                msg: Some(Msg::Ack(ScanAck {
                    batches: 1,
                    window: 0,
                })),
            })
            .unwrap();
            if b.last {
                break;
            }
        }
        let want: Vec<Vec<u8>> = (0..1_000)
            .map(|i| format!("k{i:05}").into_bytes())
            .collect();
        assert_eq!(keys, want);
    });
}

#[test]
fn scan_many_keeps_a_window_per_slot() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.ack_wait_timeout_ms = ACK_WAIT_MS);
    c.client
        .create_table(
            "many",
            Split::Points(vec![b"k00500".to_vec()]),
            Durability::Nosync,
        )
        .unwrap();
    c.wait_open("many", 2);
    let muts = (0..1_000)
        .map(|i| Mutation {
            key: format!("k{i:05}").into_bytes(),
            value: vec![b'x'; 20],
            ..Default::default()
        })
        .collect();
    c.client.write_routed("many", muts).unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        use v1::{
            scan_many_client_message::Msg as M, ScanManyAcks, ScanManyClientMessage, ScanManyStart,
            SlotAck,
        };
        let scan = |tablet_id, window| ScanStart {
            table: "many".into(),
            tablet_id,
            window,
            batch_rows: 10,
            ..Default::default()
        };
        let mut cl = common::raw_tserver(&addr).await;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(ScanManyClientMessage {
            msg: Some(M::Start(ScanManyStart {
                scans: vec![scan(0, 2), scan(1, 3)],
            })),
        })
        .unwrap();
        let mut s = cl
            .scan_many(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let count = |msgs: &[v1::ScanManyBatch]| {
            let mut n = [0usize; 2];
            for m in msgs {
                for b in &m.batches {
                    n[b.slot as usize] += 1;
                }
            }
            n
        };
        let mut got = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        while let Ok(Ok(Some(m))) = tokio::time::timeout_at(deadline, s.message()).await {
            got.push(m);
        }
        assert_eq!(count(&got), [2, 3], "each slot stops at its own window");
        // One ack for slot 1 only lets one more batch of slot 1 through;
        // cancelling slot 0 lets nothing more of it through.
        tx.send(ScanManyClientMessage {
            msg: Some(M::Acks(ScanManyAcks {
                acks: vec![
                    SlotAck {
                        slot: 1,
                        batches: 1,
                        window: 0,
                        cancel: false,
                    },
                    SlotAck {
                        slot: 0,
                        batches: 2,
                        window: 0,
                        cancel: true,
                    },
                ],
                progress: 0,
            })),
        })
        .unwrap();
        let mut more = Vec::new();
        let deadline = tokio::time::Instant::now() + Duration::from_millis(500);
        while let Ok(Ok(Some(m))) = tokio::time::timeout_at(deadline, s.message()).await {
            more.push(m);
        }
        assert_eq!(count(&more), [0, 1]);
        // Ending the request side ends the stream (no reset needed), and
        // says CANCELLED: slot 1 was still wanted, so a clean end would
        // look like an exhausted tablet.
        drop(tx);
        let t0 = Instant::now();
        loop {
            match s.message().await {
                Ok(None) => panic!("the stream ended cleanly with slot 1 unfinished"),
                Ok(Some(_)) => {}
                Err(e) => {
                    assert_eq!(e.code(), Code::Cancelled, "{e:?}");
                    break;
                }
            }
            assert!(t0.elapsed() < Duration::from_secs(5));
        }
        // An empty scan list is refused.
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(ScanManyClientMessage {
            msg: Some(M::Start(ScanManyStart { scans: Vec::new() })),
        })
        .unwrap();
        let e = cl
            .scan_many(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect_err("must fail");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("0 scans"), "{}", e.message());
    });
}

fn code_of(r: Result<impl std::fmt::Debug, Error>) -> (String, String) {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(Error::InvalidArgument(m)) => ("InvalidArgument".into(), m),
        Err(Error::NotFound(m)) => ("NotFound".into(), m),
        Err(Error::AlreadyExists(m)) => ("AlreadyExists".into(), m),
        Err(e) => panic!("unexpected error kind: {e:?}"),
    }
}

#[test]
fn every_bad_input_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("good", Split::Points(vec![b"m".to_vec()]), Durability::Sync)
        .unwrap();
    c.wait_open("good", 2);
    let mut muts = Vec::new();
    for k in ["a", "b", "n", "z"] {
        muts.push(Mutation {
            key: k.as_bytes().to_vec(),
            value: format!("value-{k}").into_bytes(),
            index_terms: vec![IndexTerm {
                index: b"i".to_vec(),
                term: k.as_bytes().to_vec(),
            }],
            ..Default::default()
        });
    }
    c.client.write_routed("good", muts).unwrap();
    let everything = |c: &TestCluster| {
        let mut q = Query::new("good");
        q.stream_limit = WindowMode::Fixed(5);
        let rows = c.client.query_vec(&q).unwrap().0;
        let tables: Vec<String> = c
            .client
            .list_tables()
            .unwrap()
            .into_iter()
            .map(|t| t.name)
            .collect();
        (rows, tables)
    };
    let before = everything(&c);
    assert_eq!(before.0.len(), 4);

    let long_name = "t".repeat(129);
    let big_key = vec![b'k'; tablinum_engine::options::KEY_BYTES_MAX + 1];
    let big_value = vec![0u8; tablinum_engine::options::VALUE_BYTES_MAX + 1];
    let put = |key: &[u8], value: &[u8]| c.client.put("good", key, value);
    let with = |m: Mutation| c.client.write("good", vec![m]);
    let scan = |f: &dyn Fn(&mut Query)| {
        let mut q = Query::new("good");
        f(&mut q);
        c.client.query_vec(&q)
    };
    let cases: Vec<(&str, (String, String), &str, &str)> = vec![
        (
            "create: empty name",
            code_of(c.client.create_table("", Split::Even(1), Durability::Sync)),
            "InvalidArgument",
            "empty",
        ),
        (
            "create: long name",
            code_of(
                c.client
                    .create_table(&long_name, Split::Even(1), Durability::Sync),
            ),
            "InvalidArgument",
            "129 bytes",
        ),
        (
            "create: bad character",
            code_of(
                c.client
                    .create_table("a b", Split::Even(1), Durability::Sync),
            ),
            "InvalidArgument",
            "' '",
        ),
        (
            "create: zero tablets",
            code_of(c.client.create_table("x", Split::Even(0), Durability::Sync)),
            "InvalidArgument",
            "tablets 0",
        ),
        (
            "create: too many tablets",
            code_of(
                c.client
                    .create_table("x", Split::Even(5_000), Durability::Sync),
            ),
            "InvalidArgument",
            "tablets 5000",
        ),
        (
            "create: unsorted splits",
            code_of(c.client.create_table(
                "x",
                Split::Points(vec![b"b".to_vec(), b"a".to_vec()]),
                Durability::Sync,
            )),
            "InvalidArgument",
            "strictly increasing",
        ),
        (
            "create: empty split",
            code_of(
                c.client
                    .create_table("x", Split::Points(vec![Vec::new()]), Durability::Sync),
            ),
            "InvalidArgument",
            "split point 0",
        ),
        (
            "create: existing",
            code_of(
                c.client
                    .create_table("good", Split::Even(1), Durability::Sync),
            ),
            "AlreadyExists",
            "good",
        ),
        (
            "drop: unknown",
            code_of(c.client.drop_table("nosuch")),
            "NotFound",
            "nosuch",
        ),
        (
            "drop: empty name",
            code_of(c.client.drop_table("")),
            "InvalidArgument",
            "empty",
        ),
        (
            "map: unknown",
            code_of(c.client.locations("nosuch", true)),
            "NotFound",
            "nosuch",
        ),
        (
            "put: unknown table",
            code_of(c.client.put("nosuch", b"k", b"v")),
            "NotFound",
            "nosuch",
        ),
        (
            "put: long table name",
            code_of(c.client.put(&long_name, b"k", b"v")),
            "InvalidArgument",
            "129 bytes",
        ),
        (
            "put: empty key",
            code_of(put(b"", b"v")),
            "InvalidArgument",
            "key is 0 bytes",
        ),
        (
            "put: long key",
            code_of(put(&big_key, b"v")),
            "InvalidArgument",
            "key is 4097 bytes",
        ),
        (
            "put: big value",
            code_of(put(b"a", &big_value)),
            "InvalidArgument",
            "value is 67108865 bytes",
        ),
        (
            "put: big metadata",
            code_of(with(Mutation {
                key: b"a".to_vec(),
                value: b"v".to_vec(),
                metadata: vec![0; 20_000],
                ..Default::default()
            })),
            "InvalidArgument",
            "metadata",
        ),
        (
            "put: long index term",
            code_of(with(Mutation {
                key: b"a".to_vec(),
                value: b"v".to_vec(),
                index_terms: vec![IndexTerm {
                    index: b"i".to_vec(),
                    term: vec![1; 2_000],
                }],
                ..Default::default()
            })),
            "InvalidArgument",
            "term",
        ),
        (
            "write: empty",
            code_of(c.client.write("good", Vec::new())),
            "InvalidArgument",
            "at least one mutation",
        ),
        (
            "write: spans tablets",
            code_of(c.client.write(
                "good",
                vec![
                    Mutation {
                        key: b"a".to_vec(),
                        value: b"changed".to_vec(),
                        ..Default::default()
                    },
                    Mutation {
                        key: b"z".to_vec(),
                        value: b"changed".to_vec(),
                        ..Default::default()
                    },
                ],
            )),
            "InvalidArgument",
            "spans tablets",
        ),
        (
            "get: unknown table",
            code_of(c.client.get("nosuch", b"a")),
            "NotFound",
            "nosuch",
        ),
        (
            "get: empty key",
            code_of(c.client.get("good", b"")),
            "InvalidArgument",
            "key is 0 bytes",
        ),
        (
            "get: long key",
            code_of(c.client.get("good", &big_key)),
            "InvalidArgument",
            "key is 4097 bytes",
        ),
        (
            "scan: unknown table",
            code_of(c.client.query_vec(&Query::new("nosuch"))),
            "NotFound",
            "nosuch",
        ),
        (
            "scan: inverted range",
            code_of(scan(&|q| {
                q.start = b"z".to_vec();
                q.end = b"a".to_vec();
            })),
            "InvalidArgument",
            "inverted range",
        ),
        (
            "scan: stream limit 0",
            code_of(scan(&|q| q.stream_limit = WindowMode::Fixed(0))),
            "InvalidArgument",
            "stream limit 0",
        ),
        (
            "scan: stream limit too big",
            code_of(scan(&|q| q.stream_limit = WindowMode::Fixed(5_000))),
            "InvalidArgument",
            "stream limit 5000",
        ),
        (
            "scan: batch rows too big",
            code_of(scan(&|q| q.batch_rows = 20_000)),
            "InvalidArgument",
            "batch rows 20000",
        ),
        (
            "scan: bad table name",
            code_of(c.client.query_vec(&Query::new("a/b"))),
            "InvalidArgument",
            "'/'",
        ),
    ];
    for (what, (code, msg), want_code, want_msg) in cases {
        assert_eq!(code, want_code, "{what}: {msg}");
        assert!(
            msg.contains(want_msg),
            "{what}: message {msg:?} should name {want_msg:?}"
        );
    }

    // The same checks hold on the raw wire, where no client checks first.
    let addr = c.addr();
    c.rt.block_on(async {
        let start = ScanStart {
            table: "good".into(),
            tablet_id: 0,
            ..Default::default()
        };
        let raw = [
            (
                ScanStart {
                    window: 5_000,
                    ..start.clone()
                },
                Code::InvalidArgument,
                "window 5000",
            ),
            (
                ScanStart {
                    batch_rows: 20_000,
                    ..start.clone()
                },
                Code::InvalidArgument,
                "batch_rows 20000",
            ),
            (
                ScanStart {
                    start: b"z".to_vec(),
                    end: b"a".to_vec(),
                    ..start.clone()
                },
                Code::InvalidArgument,
                "inverted range",
            ),
            (
                ScanStart {
                    table: String::new(),
                    ..start.clone()
                },
                Code::InvalidArgument,
                "empty",
            ),
            (
                ScanStart {
                    tablet_id: 99,
                    ..start.clone()
                },
                Code::FailedPrecondition,
                "not serving tablet 99",
            ),
        ];
        for (s, code, msg) in raw {
            let e = match open_scan(&addr, s.clone()).await {
                Err(e) => e,
                Ok((_tx, mut st)) => st.message().await.expect_err("must fail"),
            };
            assert_eq!(e.code(), code, "{s:?}: {e:?}");
            assert!(e.message().contains(msg), "{s:?}: {}", e.message());
        }
        // A stream that does not begin with its start message.
        let mut cl = common::raw_tserver(&addr).await;
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(ScanClientMessage {
            msg: Some(Msg::Ack(ScanAck {
                batches: 1,
                window: 0,
            })),
        })
        .unwrap();
        let e = cl
            .scan(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
            .await
            .expect_err("must fail");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("start message"));
        // Heartbeats without identity.
        let mut m = common::raw_manager_as(&addr, Some(&common::secret().credential())).await;
        let e = m
            .heartbeat(v1::HeartbeatRequest::default())
            .await
            .expect_err("must fail");
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = m
            .create_table(v1::CreateTableRequest {
                name: "d".into(),
                tablets: 1,
                durability: 9,
                ..Default::default()
            })
            .await
            .expect_err("must fail");
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(e.message().contains("durability 9"));
    });

    assert_eq!(everything(&c), before, "a refused request changed the data");
}

#[test]
fn status_page_and_metrics_are_served_over_http() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    one_tablet_with_rows(&c, "web", 10);
    let http = c.running.as_ref().unwrap().http;
    let get = |req: &str| {
        let mut s = std::net::TcpStream::connect(http).unwrap();
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        out
    };
    let auth = format!("Authorization: Bearer {}\r\n", c.admin.expose());
    // Without credentials only /health answers.
    let m = get("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(m.starts_with("HTTP/1.1 401"), "{m}");
    assert!(m.contains("no credentials"), "{m}");
    assert!(get("GET / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 401"));
    assert!(get("GET /health HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 200"));
    let forged = format!("tbt1.{}.{}", c.admin.token_id().unwrap(), "0".repeat(64));
    let f = get(&format!(
        "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {forged}\r\n\r\n"
    ));
    assert!(
        f.starts_with("HTTP/1.1 401") && f.contains("its secret is wrong"),
        "{f}"
    );
    // HTTP Basic with the token as password (what a browser sends).
    use base64::Engine as _;
    let basic =
        base64::engine::general_purpose::STANDARD.encode(format!("op:{}", c.admin.expose()));
    let b = get(&format!(
        "GET /metrics HTTP/1.1\r\nauthorization: Basic {basic}\r\n\r\n"
    ));
    assert!(b.starts_with("HTTP/1.1 200"), "{b}");
    let m = get(&format!("GET /metrics HTTP/1.1\r\nHost: x\r\n{auth}\r\n"));
    assert!(m.starts_with("HTTP/1.1 200"), "{m}");
    assert!(!m.contains(c.admin.expose()) && !m.contains(common::TEST_SECRET));
    assert!(m.contains("tablinum_manager_tables 1"), "{m}");
    assert!(
        m.contains(&format!(
            "tablinum_build_info{{version=\"{}\"}} 1",
            tablinum_server::VERSION
        )),
        "{m}"
    );
    assert!(m.contains("tablinum_manager_live_servers 1"), "{m}");
    assert!(m.contains("tablinum_tserver_rows_written_total 10"), "{m}");
    // Binary split keys show as the CLI shows them (hex), not raw bytes.
    c.client
        .create_table(
            "bin",
            Split::Points(vec![vec![0xff, 0x00, 0x7f]]),
            Durability::Nosync,
        )
        .unwrap();
    c.wait_open("bin", 2);
    let p = get(&format!("GET / HTTP/1.1\r\n{auth}\r\n"));
    assert!(p.contains("<h2>Tables</h2>") && p.contains(">web<"), "{p}");
    assert!(p.contains("<code>0xff007f</code>"), "{p}");
    assert!(!p.contains('\u{fffd}'), "{p}");
    assert!(p.contains("http-equiv=\"refresh\""), "{p}");
    assert!(p.contains(tablinum_server::VERSION), "{p}");
    assert!(
        p.contains("rows/s written") && p.contains("compaction debt"),
        "{p}"
    );
    assert!(!p.contains(c.admin.expose()) && !p.contains(common::TEST_SECRET));
    assert!(get("POST / HTTP/1.1\r\n\r\n").starts_with("HTTP/1.1 405"));
    assert!(get(&format!("GET /nope HTTP/1.1\r\n{auth}\r\n")).starts_with("HTTP/1.1 404"));
    // A head that never ends is cut off at the size limit, not buffered.
    let mut s = std::net::TcpStream::connect(http).unwrap();
    let _ = s.write_all(&vec![b'A'; 64 << 10]);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    assert!(out.is_empty() || out.starts_with(b"HTTP/1.1 4"));
}

#[test]
fn thin_clients_query_through_the_server_and_files_are_published() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("thin", Split::Even(8), Durability::Nosync)
        .unwrap();
    c.wait_open("thin", 8);
    let muts: Vec<Mutation> = (0..500u64)
        .map(|i| Mutation {
            key: common::mix(i).to_be_bytes().to_vec(),
            value: format!("v{i}").into_bytes(),
            ..Default::default()
        })
        .collect();
    c.client.write_routed("thin", muts).unwrap();
    let mut q = Query::new("thin");
    q.skip = 10;
    q.limit = 100;
    let (want, _) = c.client.query_vec(&q).unwrap();
    let addr = c.addr();
    let (rows, stats) = c.rt.block_on(async {
        let mut cl = common::raw_tserver(&addr).await;
        let mut s = cl
            .query(v1::QueryRequest {
                table: "thin".into(),
                skip: 10,
                limit: 100,
                stream_limit: Some(v1::StreamLimit {
                    mode: Some(v1::stream_limit::Mode::Fixed(3)),
                }),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        let mut rows = Vec::new();
        let mut stats = None;
        while let Some(m) = s.message().await.unwrap() {
            rows.extend(m.rows);
            if m.stats.is_some() {
                stats = m.stats;
            }
        }
        (
            rows,
            stats.expect("the last message carries the query's counters"),
        )
    });
    let got: Vec<(Vec<u8>, Vec<u8>)> = rows.into_iter().map(|r| (r.key, r.value)).collect();
    let want: Vec<(Vec<u8>, Vec<u8>)> = want.into_iter().map(|r| (r.key, r.value)).collect();
    assert_eq!(got, want);
    assert_eq!((stats.rows_returned, stats.rows_skipped), (100, 10));
    // Unknown tables are NOT_FOUND through the server too.
    let e = c.rt.block_on(async {
        let mut cl = common::raw_tserver(&addr).await;
        let r = cl
            .query(v1::QueryRequest {
                table: "nosuch".into(),
                ..Default::default()
            })
            .await;
        match r {
            Err(e) => e,
            Ok(s) => s.into_inner().message().await.expect_err("must fail"),
        }
    });
    assert_eq!(e.code(), Code::NotFound, "{e:?}");

    // After a flush the next heartbeats publish each tablet's immutable
    // files in the tablet map, and they exist under the storage root.
    c.client.flush("thin").unwrap();
    let t0 = Instant::now();
    let loc = loop {
        let loc = c.client.locations("thin", true).unwrap();
        if loc.tablets.iter().all(|t| !t.files.is_empty()) {
            break loc;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "files not published: {loc:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let table_id = loc.table.id;
    for t in &loc.tablets {
        assert!(t.files.iter().any(|f| f.starts_with("ledger/")), "{t:?}");
        for f in &t.files {
            let p = dir
                .path()
                .join("storage/tables")
                .join(table_id.to_string())
                .join(t.id.to_string())
                .join(f);
            assert!(p.is_file(), "published file {} is missing", p.display());
        }
    }
}

#[test]
fn dropping_a_table_removes_it_and_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    let t = c
        .client
        .create_table("gone", Split::Even(3), Durability::Sync)
        .unwrap();
    c.wait_open("gone", 3);
    c.client.put("gone", b"k", b"v").unwrap();
    let files = dir.path().join("storage/tables").join(t.id.to_string());
    assert!(files.is_dir());
    c.client.drop_table("gone").unwrap();
    assert!(matches!(
        c.client.get("gone", b"k"),
        Err(Error::NotFound(_))
    ));
    assert!(c.client.list_tables().unwrap().is_empty());
    let t0 = Instant::now();
    while files.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "files of a dropped table remain"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The name can be reused; the new table gets a new id and no old data.
    let t2 = c
        .client
        .create_table("gone", Split::Even(1), Durability::Sync)
        .unwrap();
    assert!(t2.id > t.id);
    c.wait_open("gone", 1);
    assert_eq!(c.client.get("gone", b"k").unwrap(), None);
    // A caller holding the old table's id is refused, never served by the
    // new table of the same name.
    let addr = c.addr();
    let e = c.rt.block_on(async {
        let mut cl = common::raw_tserver(&addr).await;
        cl.write(v1::WriteRequest {
            table: "gone".into(),
            table_id: t.id,
            mutations: vec![v1::Mutation {
                key: b"k".to_vec(),
                value: b"stale".to_vec(),
                ..Default::default()
            }],
        })
        .await
        .expect_err("a stale table id must be refused")
    });
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(c.client.get("gone", b"k").unwrap(), None);
}

#[test]
fn a_stale_map_never_gets_a_write_acknowledged_into_a_dropped_table() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("t", Split::Even(2), Durability::Sync)
        .unwrap();
    c.wait_open("t", 2);
    // A second client caches the map, then the table is dropped and
    // re-created behind its back.
    let stale = c.new_client();
    stale.put("t", b"k1", b"v1").unwrap();
    c.client.drop_table("t").unwrap();
    c.client
        .create_table("t", Split::Even(2), Durability::Sync)
        .unwrap();
    // The stale client's write is either refused or lands in the new table;
    // an acknowledged write is never lost with the old one.
    let r = stale.put("t", b"k2", b"v2");
    std::thread::sleep(Duration::from_millis(600)); // several heartbeats
    let fresh = c.new_client();
    if r.is_ok() {
        assert_eq!(fresh.get("t", b"k2").unwrap(), Some(b"v2".to_vec()));
    }
    assert_eq!(
        fresh.get("t", b"k1").unwrap(),
        None,
        "the old table's data is gone"
    );
}

#[test]
fn values_near_the_limit_are_scanned_one_message_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    c.client
        .create_table("big", Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open("big", 1);
    // Two 45 MiB values: a batch holding both (or a message holding both
    // batches) would exceed the 80 MiB gRPC limit.
    let v = |b: u8| vec![b; 45 << 20];
    c.client.put("big", b"a", &v(1)).unwrap();
    c.client.put("big", b"b", &v(2)).unwrap();
    c.client.put("big", b"c", b"small").unwrap();
    for stream_limit in [WindowMode::Adaptive, WindowMode::Fixed(3)] {
        let mut q = Query::new("big");
        q.stream_limit = stream_limit;
        let (rows, _) = c.client.query_vec(&q).unwrap();
        let got: Vec<(&[u8], usize)> = rows
            .iter()
            .map(|r| (r.key.as_slice(), r.value.len()))
            .collect();
        assert_eq!(
            got,
            vec![(&b"a"[..], 45 << 20), (b"b", 45 << 20), (b"c", 5)]
        );
        assert!(rows[1].value.iter().all(|&x| x == 2));
    }
}

#[test]
fn a_slow_consumer_keeps_idle_servers_streams_alive() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = TestCluster::start(dir.path(), |t| t.ack_wait_timeout_ms = 1_000);
    c.add_tserver(|t| t.ack_wait_timeout_ms = 1_000);
    c.client
        .create_table(
            "two",
            Split::Points(vec![b"m".to_vec()]),
            Durability::Nosync,
        )
        .unwrap();
    // One tablet per server.
    let t0 = Instant::now();
    loop {
        let loc = c.client.locations("two", true).unwrap();
        let mut servers: Vec<&str> = loc.tablets.iter().map(|t| t.server.as_str()).collect();
        servers.dedup();
        if servers.len() == 2 && servers.iter().all(|s| !s.is_empty()) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "not balanced: {loc:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut muts: Vec<Mutation> = (0..2_000)
        .map(|i| Mutation {
            key: format!("a{i:05}").into_bytes(),
            value: b"v".to_vec(),
            ..Default::default()
        })
        .collect();
    muts.extend((0..100).map(|i| Mutation {
        key: format!("x{i:05}").into_bytes(),
        value: b"v".to_vec(),
        ..Default::default()
    }));
    c.client.write_routed("two", muts).unwrap();
    // The merge reads the first server's tablet for ~2 s before it needs the
    // second's: the second server hears only keepalives meanwhile.
    let mut q = Query::new("two");
    q.stream_limit = WindowMode::Fixed(2);
    q.batch_rows = 10;
    let mut n = 0;
    let t0 = Instant::now();
    let r = c.client.query(&q, &mut |_| {
        n += 1;
        if n % 10 == 0 {
            std::thread::sleep(Duration::from_millis(10));
        }
    });
    r.unwrap();
    assert_eq!(n, 2_100);
    assert!(
        t0.elapsed() > Duration::from_millis(1_500),
        "the consumer was not slow"
    );
}

#[test]
fn scan_streams_beyond_the_limit_are_refused_until_one_ends() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.scan_streams_max = 1);
    one_tablet_with_rows(&c, "cap", 1_000);
    let addr = c.addr();
    let start = ScanStart {
        table: "cap".into(),
        tablet_id: 0,
        window: 1,
        batch_rows: 10,
        ..Default::default()
    };
    c.rt.block_on(async {
        let (tx, mut s) = open_scan(&addr, start.clone()).await.unwrap();
        assert_eq!(drain_for(&mut s, Duration::from_millis(300)).await.len(), 1);
        let e = match open_scan(&addr, start.clone()).await {
            Err(e) => e,
            Ok((_t, mut s2)) => s2.message().await.expect_err("over the limit"),
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_streams_max = 1"),
            "{}",
            e.message()
        );
        // Ending the first stream frees its permit.
        drop(tx);
        drop(s);
        let t0 = Instant::now();
        loop {
            match open_scan(&addr, start.clone()).await {
                Ok((_t, mut s3)) => match s3.message().await {
                    Ok(Some(b)) => {
                        assert_eq!(b.rows.len(), 10);
                        break;
                    }
                    other => assert!(t0.elapsed() < Duration::from_secs(5), "{other:?}"),
                },
                Err(e) => assert!(t0.elapsed() < Duration::from_secs(5), "{e:?}"),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

#[test]
fn a_scan_whose_request_side_closes_at_once_ends_cancelled_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    one_tablet_with_rows(&c, "rc", 500);
    let addr = c.addr();
    let (rows, end) = c.rt.block_on(async {
        let start = ScanStart {
            table: "rc".into(),
            window: 1,
            batch_rows: 10,
            ..Default::default()
        };
        let (tx, mut s) = open_scan(&addr, start).await.unwrap();
        drop(tx); // the request side ends right after the start message
        let mut rows = 0;
        let end = loop {
            match tokio::time::timeout(Duration::from_secs(10), s.message()).await {
                Ok(Ok(Some(b))) => {
                    rows += b.rows.len();
                    if b.last {
                        break Ok(());
                    }
                }
                Ok(Ok(None)) => break Err(Code::Ok),
                Ok(Err(st)) => break Err(st.code()),
                Err(_) => panic!("the stream neither ended nor failed"),
            }
        };
        (rows, end)
    });
    // Either the whole tablet arrived (with its last batch), or the stream
    // failed CANCELLED; never a clean end that looks like an empty tablet.
    match end {
        Ok(()) => assert_eq!(rows, 500),
        Err(code) => assert_eq!(code, Code::Cancelled, "after {rows} rows"),
    }
}
