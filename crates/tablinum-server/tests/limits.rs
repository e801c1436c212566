//! One client must not starve the others: a real cluster where callers
//! leave scan streams unread, hold more streams than their share, open
//! more tablet scans than the server runs, send keepalives that make no
//! progress, or send messages the protocol does not allow. Each is refused
//! or ended with the status the .proto documents, naming the limit.

mod common;

use std::time::{Duration, Instant};

use tablinum_auth::Role;
use tablinum_client::{Durability, Error, Mutation, Query, Split};
use tablinum_proto::v1::{
    self, scan_many_client_message::Msg as M, ScanManyAcks, ScanManyClientMessage, ScanStart,
    SlotAck,
};
use tonic::{Code, Streaming};

use common::{drain_for, open_many, TestCluster};

/// The first message of a stream, or its error.
async fn first(s: &mut Streaming<v1::ScanManyBatch>) -> Result<v1::ScanManyBatch, tonic::Status> {
    match tokio::time::timeout(Duration::from_secs(10), s.message()).await {
        Ok(Ok(Some(m))) => Ok(m),
        Ok(Ok(None)) => Err(tonic::Status::unknown("ended")),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(tonic::Status::unknown("no message within 10 s")),
    }
}

fn scan(table: &str, window: u32, batch_rows: u32) -> ScanStart {
    ScanStart {
        table: table.into(),
        tablet_id: 0,
        window,
        batch_rows,
        ..Default::default()
    }
}

fn table_with_rows(c: &TestCluster, table: &str, rows: usize, value_bytes: usize) {
    c.client
        .create_table(table, Split::Even(1), Durability::Nosync)
        .unwrap();
    c.wait_open(table, 1);
    for chunk in (0..rows).collect::<Vec<_>>().chunks(16) {
        let muts = chunk
            .iter()
            .map(|i| Mutation {
                key: format!("k{i:05}").into_bytes(),
                value: vec![b'x'; value_bytes],
                ..Default::default()
            })
            .collect();
        c.client.write(table, muts).unwrap();
    }
}

fn bytes_received(msgs: &[v1::ScanManyBatch]) -> usize {
    msgs.iter()
        .flat_map(|m| &m.batches)
        .flat_map(|b| &b.rows)
        .map(|r| r.key.len() + r.value.len())
        .sum()
}

const ROW_BYTES: usize = 256 << 10;
const STREAM_MAX: u64 = 2 << 20;
const SERVER_MAX: u64 = 3 << 20;

#[test]
fn unread_streams_hold_no_more_than_the_byte_limits() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.stream_bytes_in_flight_max = STREAM_MAX;
        t.scan_bytes_in_flight_max = SERVER_MAX;
        t.ack_wait_timeout_ms = 30_000;
    });
    table_with_rows(&c, "big", 48, ROW_BYTES);
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        // Windows of 1,024 one-row batches, never acknowledged: only the
        // byte limits stop the server.
        let mut a = open_many(&addr, None, vec![scan("big", 1024, 1)])
            .await
            .unwrap();
        let got_a = drain_for(&mut a.1, Duration::from_millis(700)).await;
        let a_bytes = bytes_received(&got_a);
        // The stream limit, overshot by at most the batch that crossed it.
        assert!(a_bytes >= STREAM_MAX as usize, "{a_bytes}");
        assert!(
            a_bytes <= STREAM_MAX as usize + ROW_BYTES + 1024,
            "{a_bytes}"
        );
        let mut b = open_many(&addr, None, vec![scan("big", 1024, 1)])
            .await
            .unwrap();
        let got_b = drain_for(&mut b.1, Duration::from_millis(700)).await;
        let b_bytes = bytes_received(&got_b);
        // The server's budget (3 MiB) is spent once the second stream
        // holds about 1 MiB: it stops there, not at its own 2 MiB.
        let held = ts.scan_bytes_in_flight();
        assert!(
            held <= SERVER_MAX as usize + ROW_BYTES + 4096,
            "server holds {held}"
        );
        assert!(b_bytes < STREAM_MAX as usize, "{b_bytes}");
        // A third stream gets its first batch (a slot holding none always
        // may: a merge needs it) and nothing more while the budget is spent.
        let mut c3 = open_many(&addr, None, vec![scan("big", 1024, 1)])
            .await
            .unwrap();
        let got_c = drain_for(&mut c3.1, Duration::from_millis(500)).await;
        assert_eq!(
            got_c.iter().map(|m| m.batches.len()).sum::<usize>(),
            1,
            "a third stream got more than its first batch beyond the server's budget"
        );
        // Acknowledging the first stream's batches frees the budget: the
        // waiting streams go on. (Its window drops to one batch, or it could
        // take all it freed back before the others run: who gets freed
        // budget first is up to the scheduler.)
        let n = got_a.iter().map(|m| m.batches.len()).sum::<usize>();
        a.0.send(ScanManyClientMessage {
            msg: Some(M::Acks(ScanManyAcks {
                acks: vec![SlotAck {
                    slot: 0,
                    batches: u32::try_from(n).unwrap(),
                    window: 1,
                    cancel: false,
                }],
                progress: 0,
            })),
        })
        .unwrap();
        assert!(
            !drain_for(&mut c3.1, Duration::from_millis(700))
                .await
                .is_empty(),
            "the third stream did not go on after acks freed the budget"
        );
        // Ended streams give everything back.
        drop((a, b, c3));
        let t0 = Instant::now();
        while ts.scan_bytes_in_flight() != 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "{} bytes still held",
                ts.scan_bytes_in_flight()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
}

/// One token's streams share one byte budget on a server
/// (`scan_bytes_per_caller_max`): a greedy reader's unread streams stop at
/// its share, not at the server's, so another token's scan still gets its
/// bytes; a Query that would set aside more than the share left is refused
/// naming the limit; and a stream may ask for a smaller byte window than
/// the server's (`stream_bytes_max`) but never a larger one.
#[test]
fn one_callers_streams_share_one_byte_budget() {
    const CALLER_MAX: u64 = 2 << 20;
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.stream_bytes_in_flight_max = 8 << 20;
        t.scan_bytes_in_flight_max = 16 << 20;
        t.scan_bytes_per_caller_max = CALLER_MAX;
        t.query_bytes_in_flight_max = 1 << 20;
        t.ack_wait_timeout_ms = 30_000;
    });
    table_with_rows(&c, "big", 48, ROW_BYTES);
    let (_, greedy) = c.client.create_token(Role::Read, "greedy").unwrap();
    let (_, other) = c.client.create_token(Role::Read, "other").unwrap();
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        // Three unread streams of the greedy token, windows of 1,024
        // one-row batches: together they stop at its 2 MiB share (plus the
        // first batch each slot may always send), far below the stream
        // and server limits.
        let mut held = Vec::new();
        let mut got = 0;
        for _ in 0..3 {
            let mut s = open_many(&addr, Some(&greedy), vec![scan("big", 1024, 1)])
                .await
                .unwrap();
            got += bytes_received(&drain_for(&mut s.1, Duration::from_millis(500)).await);
            held.push(s);
        }
        let slack = 3 * (ROW_BYTES + 1024);
        assert!(got >= CALLER_MAX as usize, "{got}");
        assert!(
            got <= CALLER_MAX as usize + slack,
            "greedy streams got {got} bytes"
        );
        assert!(ts.scan_bytes_in_flight() <= CALLER_MAX as usize + slack);
        // Another token is not held back by the greedy one's share: its
        // stream gets its own 2 MiB.
        let mut o = open_many(&addr, Some(&other), vec![scan("big", 1024, 1)])
            .await
            .unwrap();
        let other_got = bytes_received(&drain_for(&mut o.1, Duration::from_millis(700)).await);
        assert!(
            other_got >= CALLER_MAX as usize,
            "the other token got {other_got} bytes"
        );
        // The greedy token's Query would set aside 1 MiB its share does
        // not have: refused, naming the limit.
        let mut raw = common::raw_tserver_as(&addr, Some(&greedy)).await;
        let e = match raw
            .query(v1::QueryRequest {
                table: "big".into(),
                ..Default::default()
            })
            .await
        {
            Ok(_) => panic!("a Query past the caller's byte budget was admitted"),
            Err(e) => e,
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_bytes_per_caller_max = 2097152"),
            "{e:?}"
        );
        // Once its streams end, the share is whole again and the Query
        // runs, holding at most its 1 MiB (plus a batch) while unread.
        drop(held);
        let t0 = Instant::now();
        while ts.scan_bytes_in_flight() > other_got + 4096 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "greedy bytes never came back"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let q = raw
            .query(v1::QueryRequest {
                table: "big".into(),
                ..Default::default()
            })
            .await
            .unwrap()
            .into_inner();
        tokio::time::sleep(Duration::from_millis(700)).await;
        let before = ts.scan_bytes_in_flight();
        assert!(
            before <= other_got + (1 << 20) + ROW_BYTES + 4096,
            "a stalled Query holds {} bytes beyond the other stream",
            before.saturating_sub(other_got)
        );
        drop(q);
        // A stream asking for a 512 KiB window gets about that; one asking
        // for more than the server's gets the server's (here the caller's
        // share, 2 MiB, is what stops it first).
        drop(o);
        let small = ScanStart {
            stream_bytes_max: 512 << 10,
            ..scan("big", 1024, 1)
        };
        let mut s = open_many(&addr, Some(&other), vec![small]).await.unwrap();
        let n = bytes_received(&drain_for(&mut s.1, Duration::from_millis(700)).await);
        assert!(
            (512 << 10..=(512 << 10) + ROW_BYTES + 1024).contains(&n),
            "a 512 KiB stream window let {n} bytes through"
        );
    });
}

/// Past the byte budgets a slot holding nothing may still send (a merge
/// needs a row of every slot before it emits anything), but one row, not a
/// batch, and only until the caller holds twice its budget: a caller's
/// stream of 64 overlapping slots, never read, holds at most twice its
/// budget and a row, not a full batch per slot (64 MiB here) nor a row per
/// slot (4 MiB).
#[test]
fn many_slots_past_the_budget_hold_a_row_each_up_to_twice_the_budget() {
    const CALLER_MAX: u64 = 1 << 20;
    const ROW: usize = 64 << 10;
    const SLOTS: usize = 64;
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.scan_bytes_per_caller_max = CALLER_MAX;
        t.batch_bytes = 1 << 20;
        t.ack_wait_timeout_ms = 30_000;
    });
    table_with_rows(&c, "rows", 64, ROW);
    let (_, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        let slots = (0..SLOTS).map(|_| scan("rows", 8, 16)).collect();
        let mut s = open_many(&addr, Some(&reader), slots).await.unwrap();
        let got = drain_for(&mut s.1, Duration::from_millis(1_000)).await;
        let held = ts.scan_bytes_in_flight();
        let bound = 2 * CALLER_MAX as usize + ROW + 4096;
        assert!(
            held <= bound,
            "{SLOTS} unread slots hold {held} bytes, past twice the budget and a row ({bound})"
        );
        // The first slot's batch spent the budget; the exemption still
        // served other slots a row each, until twice the budget.
        let mut served = vec![0usize; SLOTS];
        for b in got.iter().flat_map(|m| &m.batches) {
            served[b.slot as usize] += b.rows.len();
        }
        let rows_of_one: Vec<usize> = served.iter().copied().filter(|&n| n > 0).collect();
        assert!(
            rows_of_one.len() > 4,
            "the exemption served too few slots: {served:?}"
        );
        assert!(
            rows_of_one.iter().skip(1).all(|&n| n == 1),
            "an exempt slot got more than one row: {served:?}"
        );
        drop(s);
    });
}

#[test]
fn one_caller_cannot_take_every_stream_and_a_busy_query_fails_fast() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.scan_streams_per_caller_max = 2);
    table_with_rows(&c, "share", 100, 10);
    let (_, greedy) = c.client.create_token(Role::Read, "greedy").unwrap();
    let (_, other) = c.client.create_token(Role::Read, "other").unwrap();
    // Token grants reach the server with its next heartbeat.
    std::thread::sleep(Duration::from_millis(400));
    let addr = c.addr();
    let held = c.rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = open_many(&addr, Some(&greedy), vec![scan("share", 1, 1)])
                .await
                .unwrap();
            first(&mut s.1).await.unwrap();
            held.push(s);
        }
        let e = match open_many(&addr, Some(&greedy), vec![scan("share", 1, 1)]).await {
            Err(e) => e,
            Ok(mut s) => first(&mut s.1).await.unwrap_err(),
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_streams_per_caller_max = 2"),
            "{}",
            e.message()
        );
        assert!(e.message().contains("greedy") || e.message().contains("token"));
        // Another caller is still served.
        let mut s = open_many(&addr, Some(&other), vec![scan("share", 1, 1)])
            .await
            .unwrap();
        first(&mut s.1).await.unwrap();
        held
    });
    // The greedy caller's query fails at once, naming the limit, instead
    // of retrying until its deadline.
    let greedy_client = common::client_as(&addr, &greedy);
    let t0 = Instant::now();
    let e = greedy_client
        .query(&Query::new("share"), &mut |_| {})
        .unwrap_err();
    assert!(
        matches!(&e, Error::Busy(m) if m.contains("scan_streams_per_caller_max")),
        "{e}"
    );
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    // Once its streams end, it is served again.
    drop(held);
    let t0 = Instant::now();
    loop {
        let mut n = 0;
        match greedy_client.query(&Query::new("share"), &mut |_| n += 1) {
            Ok(_) => {
                assert_eq!(n, 100);
                break;
            }
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(5), "{e}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn every_slot_of_a_scan_many_counts_against_the_tablet_scan_limit() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.scan_slots_max = 4);
    table_with_rows(&c, "slots", 10, 10);
    let addr = c.addr();
    c.rt.block_on(async {
        let five = vec![scan("slots", 1, 1); 5];
        let e = match open_many(&addr, None, five).await {
            Err(e) => e,
            Ok(mut s) => first(&mut s.1).await.unwrap_err(),
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_slots_max = 4"),
            "{}",
            e.message()
        );
        let mut four = open_many(&addr, None, vec![scan("slots", 1, 1); 4])
            .await
            .unwrap();
        first(&mut four.1).await.unwrap();
        // All four are taken: one more single scan is refused too.
        let e = match open_many(&addr, None, vec![scan("slots", 1, 1)]).await {
            Err(e) => e,
            Ok(mut s) => first(&mut s.1).await.unwrap_err(),
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    });
}

/// One token cannot read one tablet more than its slot share at once: a
/// ScanMany of many overlapping slots counts each against the caller's
/// `scan_slots_per_caller_max`, across its streams (members are not
/// counted).
#[test]
fn a_callers_tablet_scans_are_capped_across_its_streams() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.scan_slots_per_caller_max = 4);
    table_with_rows(&c, "share", 10, 10);
    let (_, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let addr = c.addr();
    c.rt.block_on(async {
        let refused = |r: Result<common::Many, tonic::Status>| async {
            let e = match r {
                Err(e) => e,
                Ok(mut s) => first(&mut s.1).await.unwrap_err(),
            };
            assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
            assert!(
                e.message().contains("scan_slots_per_caller_max = 4"),
                "{}",
                e.message()
            );
        };
        refused(open_many(&addr, Some(&reader), vec![scan("share", 1, 1); 5]).await).await;
        let mut three = open_many(&addr, Some(&reader), vec![scan("share", 1, 1); 3])
            .await
            .unwrap();
        first(&mut three.1).await.unwrap();
        refused(open_many(&addr, Some(&reader), vec![scan("share", 1, 1); 2]).await).await;
        let mut one = open_many(&addr, Some(&reader), vec![scan("share", 1, 1)])
            .await
            .unwrap();
        first(&mut one.1).await.unwrap();
        // A member is not a token: its slots count only against the server.
        let mut member = open_many(&addr, None, vec![scan("share", 1, 1); 8])
            .await
            .unwrap();
        first(&mut member.1).await.unwrap();
        // The token's slots come back when its streams end.
        drop(three);
        let t0 = Instant::now();
        loop {
            if let Ok(mut s) = open_many(&addr, Some(&reader), vec![scan("share", 1, 1); 3]).await {
                if first(&mut s.1).await.is_ok() {
                    break;
                }
            }
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "slots never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
}

#[test]
fn keepalives_keep_a_stream_alive_only_while_the_query_progresses() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.ack_wait_timeout_ms = 1_000);
    table_with_rows(&c, "idle", 100, 10);
    let addr = c.addr();
    c.rt.block_on(async {
        let keepalive = |progress| ScanManyClientMessage {
            msg: Some(M::Acks(ScanManyAcks {
                acks: Vec::new(),
                progress,
            })),
        };
        // Progress reported every 200 ms: alive after 2.5 s (2.5 ack-waits).
        let mut live = open_many(&addr, None, vec![scan("idle", 1, 1)])
            .await
            .unwrap();
        first(&mut live.1).await.unwrap();
        // Empty keepalives, always progress 0: ended after one ack-wait.
        let mut idle = open_many(&addr, None, vec![scan("idle", 1, 1)])
            .await
            .unwrap();
        first(&mut idle.1).await.unwrap();
        let t0 = Instant::now();
        let mut idle_end = None;
        for i in 1..=12u64 {
            live.0.send(keepalive(i)).unwrap();
            let _ = idle.0.send(keepalive(0));
            tokio::time::sleep(Duration::from_millis(200)).await;
            if idle_end.is_none() {
                if let Ok(r) =
                    tokio::time::timeout(Duration::from_millis(1), idle.1.message()).await
                {
                    idle_end = Some((t0.elapsed(), r));
                }
            }
        }
        let (after, r) = idle_end.expect("a stream kept alive by empty keepalives");
        let e = r.expect_err("the idle stream ended without an error");
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
        assert!(e.message().contains("no progress"), "{}", e.message());
        assert!(after < Duration::from_millis(2_000), "{after:?}");
        // The progressing stream still answers acks.
        live.0
            .send(ScanManyClientMessage {
                msg: Some(M::Acks(ScanManyAcks {
                    acks: vec![SlotAck {
                        slot: 0,
                        batches: 1,
                        window: 0,
                        cancel: false,
                    }],
                    progress: 0,
                })),
            })
            .unwrap();
        let m = first(&mut live.1).await.unwrap();
        assert_eq!(m.batches[0].rows.len(), 1);
    });
}

#[test]
fn an_ack_window_over_the_maximum_ends_the_stream_as_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "win", 100, 10);
    let addr = c.addr();
    c.rt.block_on(async {
        let mut s = open_many(&addr, None, vec![scan("win", 1, 1)])
            .await
            .unwrap();
        first(&mut s.1).await.unwrap();
        s.0.send(ScanManyClientMessage {
            msg: Some(M::Acks(ScanManyAcks {
                acks: vec![SlotAck {
                    slot: 0,
                    batches: 1,
                    window: tablinum_proto::WINDOW_BATCHES_MAX + 1,
                    cancel: false,
                }],
                progress: 0,
            })),
        })
        .unwrap();
        let e = loop {
            match tokio::time::timeout(Duration::from_secs(10), s.1.message()).await {
                Ok(Ok(Some(_))) => continue,
                Ok(Err(e)) => break e,
                other => panic!("stream did not fail: {other:?}"),
            }
        };
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("window 1025"), "{}", e.message());
    });
}

/// Sends `path` a body that does not decode as a WriteRequest (field 1 is
/// a string; this sends a varint there) as `cred`; its error.
async fn undecodable(addr: &str, cred: &tablinum_auth::Credential, path: &str) -> tonic::Status {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let ch = tonic::service::interceptor::InterceptedService::new(
        ch,
        tablinum_auth::Bearer::new(Some(cred), addr),
    );
    let mut grpc = tonic::client::Grpc::new(ch);
    grpc.ready().await.unwrap();
    let wrong = v1::FlushResponse { tablets: 7 };
    let codec = tonic_prost::ProstCodec::<v1::FlushResponse, v1::WriteResponse>::default();
    grpc.unary(tonic::Request::new(wrong), path.parse().unwrap(), codec)
        .await
        .unwrap_err()
}

#[test]
fn a_request_that_does_not_decode_is_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "dec", 1, 10);
    let addr = c.addr();
    c.rt.block_on(async {
        let e = undecodable(
            &addr,
            &common::secret().credential(),
            "/tablinum.v1.TabletServer/Write",
        )
        .await;
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(e.message().contains("decode"), "{}", e.message());
    });
    // Nothing was written.
    let mut n = 0;
    c.client.query(&Query::new("dec"), &mut |_| n += 1).unwrap();
    assert_eq!(n, 1);
}

#[test]
fn silent_connections_are_capped_per_address_and_closed_after_the_handshake_timeout() {
    use std::io::Read;
    use tablinum_server::listen::{CONNECTIONS_PER_ADDRESS_MAX, HANDSHAKE_TIMEOUT_MS};
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "conn", 1, 10);
    // The test's own client holds a connection or two from this address.
    let addr: std::net::SocketAddr = c.addr().parse().unwrap();
    let t0 = Instant::now();
    let mut silent = Vec::new();
    for _ in 0..CONNECTIONS_PER_ADDRESS_MAX + 20 {
        let s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        silent.push(s);
    }
    // Connections beyond the per-address limit are closed at once (EOF);
    // those within it wait for their handshake.
    let mut closed = 0;
    let mut waiting = 0;
    let mut buf = [0u8; 64];
    for s in &mut silent {
        match s.read(&mut buf) {
            Ok(0) => closed += 1,
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut =>
            {
                waiting += 1;
            }
            // tonic may send its settings frame first on some connections;
            // a reset also counts as closed.
            Ok(_) => waiting += 1,
            Err(_) => closed += 1,
        }
        if t0.elapsed() > Duration::from_millis(HANDSHAKE_TIMEOUT_MS - 2_000) {
            break;
        }
    }
    assert!(closed >= 20, "closed {closed}, waiting {waiting}");
    assert!(
        waiting >= CONNECTIONS_PER_ADDRESS_MAX - 8,
        "closed {closed}, waiting {waiting}"
    );
    // After the handshake timeout every silent connection is closed, and a
    // real client from the same address is served again.
    let wait = Duration::from_millis(HANDSHAKE_TIMEOUT_MS + 1_500).saturating_sub(t0.elapsed());
    std::thread::sleep(wait);
    for s in &mut silent {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut rest = Vec::new();
        let r = s.read_to_end(&mut rest);
        assert!(
            r.is_ok()
                || r.as_ref()
                    .is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock),
            "a silent connection is still open after the handshake timeout: {r:?}"
        );
    }
    drop(silent);
    let fresh = common::client_as(&c.addr(), &c.admin);
    let mut n = 0;
    fresh.query(&Query::new("conn"), &mut |_| n += 1).unwrap();
    assert_eq!(n, 1);
}

/// Connections that complete the HTTP/2 handshake and then go quiet hold
/// their address's places only until somebody needs one: past
/// `IDLE_EVICT_MS` of silence a newcomer takes the idlest one's place.
#[test]
fn quiet_connections_give_their_places_to_newcomers() {
    use std::io::{Read, Write};
    use tablinum_server::listen::{CONNECTIONS_PER_ADDRESS_MAX, IDLE_EVICT_MS};
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "quiet", 1, 10);
    let addr: std::net::SocketAddr = c.addr().parse().unwrap();
    // The client preface and an empty SETTINGS frame, then nothing.
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend([0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let mut quiet = Vec::new();
    for _ in 0..CONNECTIONS_PER_ADDRESS_MAX {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&hello).unwrap();
        quiet.push(s);
    }
    let t0 = Instant::now();
    // Full now: a newcomer from this address is closed at once.
    let mut probe = std::net::TcpStream::connect(addr).unwrap();
    probe
        .set_read_timeout(Some(Duration::from_millis(2_000)))
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        matches!(probe.read(&mut buf), Ok(0) | Err(_)),
        "a connection past the limit was kept"
    );
    // Once they have been quiet long enough, a real client is served: it
    // takes the place of a quiet one, which is closed.
    std::thread::sleep(Duration::from_millis(IDLE_EVICT_MS + 1_000).saturating_sub(t0.elapsed()));
    let fresh = common::client_as(&c.addr(), &c.admin);
    let mut n = 0;
    fresh.query(&Query::new("quiet"), &mut |_| n += 1).unwrap();
    assert_eq!(n, 1);
    let mut closed = 0;
    for s in &mut quiet {
        s.set_nonblocking(true).unwrap();
        let mut rest = [0u8; 4096];
        loop {
            match s.read(&mut rest) {
                Ok(0) => {
                    closed += 1;
                    break;
                }
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => {
                    closed += 1;
                    break;
                }
            }
        }
    }
    assert!(closed >= 1, "no quiet connection gave its place");
    assert!(
        closed <= 8,
        "{closed} quiet connections closed for one client"
    );
}

#[test]
fn tables_beyond_what_the_servers_may_hold_are_refused_and_big_drops_keep_servers_live() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start_with(dir.path(), |m| m.tablets_per_server_max = 300, |_| {});
    c.client
        .create_table("wide", Split::Even(280), Durability::Nosync)
        .unwrap();
    // 280 + 40 > 300 on the one live server: refused, naming the limit,
    // and nothing is created.
    let e = c
        .client
        .create_table("more", Split::Even(40), Durability::Nosync)
        .unwrap_err();
    assert!(
        matches!(&e, Error::Busy(m) if m.contains("tablets_per_server_max = 300")),
        "{e}"
    );
    assert!(matches!(
        c.client.locations("more", true),
        Err(Error::NotFound(_))
    ));
    c.client
        .create_table("fits", Split::Even(20), Durability::Nosync)
        .unwrap();
    c.wait_open("wide", 280);
    c.wait_open("fits", 20);
    // Dropping 280 tablets closes them off the heartbeat path: the server
    // stays live (heartbeat timeout 2 s) and the drop completes.
    let t0 = Instant::now();
    c.client.drop_table("wide").unwrap();
    let took = t0.elapsed();
    let st = c.client.status().unwrap();
    assert_eq!(st.servers.len(), 1, "{st:?}");
    assert!(st.servers[0].last_heartbeat_ms < 1_000, "{st:?}");
    assert_eq!(st.tablets_unassigned, 0, "{st:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    // The freed room admits the refused table now.
    c.client
        .create_table("more", Split::Even(40), Durability::Nosync)
        .unwrap();
    c.wait_open("more", 40);
}

#[test]
fn http_answers_garbage_with_400_and_idle_clients_delay_nobody() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    let http = c.running.as_ref().unwrap().http;
    // Garbage gets an answer (400) and a closed connection, not a hang.
    let mut s = std::net::TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"\x16\x03\x01garbage\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 400"), "{out:?}");
    // More clients than the server serves at once send half a request and
    // wait: they do not delay /metrics (the oldest make room).
    let idle: Vec<_> = (0..tablinum_server::http::CONNECTIONS_MAX + 20)
        .map(|_| {
            let mut s = std::net::TcpStream::connect(http).unwrap();
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    let t0 = Instant::now();
    let mut s = std::net::TcpStream::connect(http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(
        format!(
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {}\r\n\r\n",
            c.admin.expose()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    assert!(out.starts_with("HTTP/1.1 200"), "{out:?}");
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    drop(idle);
}

/// The two codes no other test provokes: OUT_OF_RANGE for a message over
/// the gRPC limit, DATA_LOSS for storage that fails its checksums, typed
/// CORRUPTION naming the file and the offset of the bad record.
#[test]
fn oversized_messages_are_out_of_range_and_damaged_storage_is_data_loss() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "codes", 1, 4096);
    let addr = c.addr();
    c.rt.block_on(async {
        let mut t = common::raw_tserver(&addr)
            .await
            .max_encoding_message_size(usize::MAX);
        let e = t
            .write(v1::WriteRequest {
                table: "codes".into(),
                mutations: vec![v1::Mutation {
                    key: b"big".to_vec(),
                    value: vec![0; tablinum_proto::GRPC_MESSAGE_BYTES_MAX + 1],
                    ..Default::default()
                }],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    });
    assert_eq!(c.client.get("codes", b"big").unwrap(), None);
    // An incompressible value (the journal compresses values that shrink),
    // then damage to the journal where its record lies: the read that
    // needs it fails INTERNAL, naming the corruption, never a wrong value.
    let value: Vec<u8> = (0..4096u64).map(|i| common::mix(i) as u8).collect();
    c.client
        .write(
            "codes",
            vec![Mutation {
                key: b"rnd".to_vec(),
                value,
                ..Default::default()
            }],
        )
        .unwrap();
    c.client.flush("codes").unwrap();
    let mut damaged = 0;
    let mut stack = vec![dir.path().join("storage").join("tables")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "jnl") {
                let mut b = std::fs::read(&p).unwrap();
                if b.len() > 4_096 {
                    let n = b.len();
                    for x in &mut b[n - 3_000..n - 1_000] {
                        *x ^= 0x5a;
                    }
                    std::fs::write(&p, b).unwrap();
                    damaged += 1;
                }
            }
        }
    }
    assert!(
        damaged > 0,
        "no journal segment found under {}",
        dir.path().display()
    );
    match c.client.get("codes", b"rnd") {
        Err(Error::Server(m)) => {
            assert!(m.starts_with("DataLoss"), "{m}");
            assert!(
                m.contains("corrupt") || m.contains("checksum") || m.contains("CRC"),
                "{m}"
            );
        }
        other => panic!("a damaged record was read as {other:?}"),
    }
    let addr = c.addr();
    let s = c.rt.block_on(async {
        common::raw_tserver_as(&addr, Some(&c.admin))
            .await
            .get(v1::GetRequest {
                table: "codes".into(),
                key: b"rnd".to_vec(),
                ..Default::default()
            })
            .await
            .unwrap_err()
    });
    let d = tablinum_proto::error::Detail::of(&s).expect("a typed detail");
    assert_eq!(d.reason, tablinum_proto::error::ErrorReason::Corruption);
    let (file, _offset) = d.corruption.expect("the damaged file and offset");
    assert!(file.ends_with(".jnl"), "{file}");
}

/// Regression: a merge needs a batch of every tablet before it can emit
/// anything, so a stream budget smaller than one batch per tablet must not
/// starve a tablet of its first batch (the query would hang until the
/// ack-wait timeout). Every slot may hold one batch beyond the budgets.
#[test]
fn byte_budgets_never_starve_a_tablet_of_its_first_batch() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.stream_bytes_in_flight_max = 1 << 20;
        t.scan_bytes_in_flight_max = 1 << 20;
        t.ack_wait_timeout_ms = 5_000;
    });
    c.client
        .create_table("wide", Split::Even(8), Durability::Nosync)
        .unwrap();
    c.wait_open("wide", 8);
    // 6 rows of 256 KiB in each of the 8 tablets: 8 first batches are
    // 2 MiB, twice the budgets.
    let muts: Vec<Mutation> = (0..48u32)
        .map(|i| Mutation {
            key: vec![(i % 8 * 32) as u8, 0, i as u8],
            value: vec![i as u8; ROW_BYTES],
            ..Default::default()
        })
        .collect();
    c.client.write_routed("wide", muts).unwrap();
    let mut q = Query::new("wide");
    q.batch_rows = 1;
    let t0 = Instant::now();
    let mut n = 0;
    c.client.query(&q, &mut |_| n += 1).unwrap();
    assert_eq!(n, 48);
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
}

/// Waits until `f` holds, at most `d`; false if it never did.
async fn eventually(d: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    f()
}

/// The outsider's stall: a read token opens a scan, never reads the
/// answer (its HTTP/2 window fills and stays shut) and claims progress in
/// keepalives all the while. The server sees nothing drain: the stream is
/// ended after one ack-wait, its bytes and places given back, and the
/// reader is told why once it does read.
#[test]
fn a_reader_that_drains_nothing_is_ended_whatever_its_keepalives_claim() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.ack_wait_timeout_ms = 1_000);
    table_with_rows(&c, "stall", 48, ROW_BYTES);
    let (_, reader) = c.client.create_token(Role::Read, "staller").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        let (tx, mut s) = open_many(&addr, Some(&reader), vec![scan("stall", 1024, 1)])
            .await
            .unwrap();
        // 12 MiB wanted, far beyond what the client's window takes unread.
        assert!(eventually(Duration::from_secs(2), || ts.scan_bytes_in_flight() > 0).await);
        assert_eq!(ts.admission.streams_running(), 1);
        let t0 = Instant::now();
        for i in 1..=15u64 {
            let _ = tx.send(ScanManyClientMessage {
                msg: Some(M::Acks(ScanManyAcks {
                    acks: Vec::new(),
                    progress: i * 1_000,
                })),
            });
            tokio::time::sleep(Duration::from_millis(200)).await;
            if ts.admission.streams_running() == 0 {
                break;
            }
        }
        let after = t0.elapsed();
        assert_eq!(
            ts.admission.streams_running(),
            0,
            "a stream that drained nothing was kept alive by keepalives"
        );
        assert!(after < Duration::from_millis(2_600), "{after:?}");
        assert!(eventually(Duration::from_secs(1), || ts.scan_bytes_in_flight() == 0).await);
        // Reading now: what the window held, then the reason.
        let e = loop {
            match tokio::time::timeout(Duration::from_secs(5), s.message()).await {
                Ok(Ok(Some(_))) => {}
                Ok(Ok(None)) => panic!("the ended stream looked complete"),
                Ok(Err(e)) => break e,
                Err(_) => panic!("no end within 5 s"),
            }
        };
        assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
        assert!(e.message().contains("read nothing"), "{}", e.message());
    });
}

/// Keepalives keep a drained, waiting stream alive (a merge busy with
/// other servers' tablets sends them), but only while no one else needs
/// its place: a newcomer on a full server ends the longest-idle stream of
/// the caller holding the most.
#[test]
fn a_full_server_ends_the_longest_idle_stream_for_a_newcomer() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.ack_wait_timeout_ms = 1_000;
        t.scan_streams_max = 2;
    });
    table_with_rows(&c, "full", 100, 10);
    let (_, hog) = c.client.create_token(Role::Read, "hog").unwrap();
    let (_, late) = c.client.create_token(Role::Read, "late").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut s = open_many(&addr, Some(&hog), vec![scan("full", 1, 1)])
                .await
                .unwrap();
            first(&mut s.1).await.unwrap();
            held.push(s);
        }
        // Not idle long enough yet: the newcomer is refused.
        let e = match open_many(&addr, Some(&late), vec![scan("full", 1, 1)]).await {
            Err(e) => e,
            Ok(mut s) => first(&mut s.1).await.unwrap_err(),
        };
        assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
        assert!(
            e.message().contains("scan_streams_max = 2"),
            "{}",
            e.message()
        );
        // The hog claims progress in keepalives but acknowledges nothing.
        for i in 1..=6u64 {
            for (tx, _) in &held {
                let _ = tx.send(ScanManyClientMessage {
                    msg: Some(M::Acks(ScanManyAcks {
                        acks: Vec::new(),
                        progress: i,
                    })),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // Idle for the ack-wait: the newcomer takes a hog's place.
        let mut s = open_many(&addr, Some(&late), vec![scan("full", 1, 1)])
            .await
            .unwrap();
        assert_eq!(first(&mut s.1).await.unwrap().batches[0].rows.len(), 1);
        assert_eq!(
            ts.admission
                .evictions
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        // One hog stream was ended for the newcomer (the other, now
        // without keepalives, ends by the ack-wait rule soon after).
        let mut made_room = 0;
        for (_, rx) in &mut held {
            let e = first(rx).await.unwrap_err();
            assert_eq!(e.code(), Code::DeadlineExceeded, "{e:?}");
            if e.message().contains("to make room") {
                made_room += 1;
            }
        }
        assert_eq!(made_room, 1, "exactly one idle stream makes room");
    });
}

/// A read token's Queries (a merge and a thread each) are capped per
/// caller and per server; Queries nobody reads stop within one chunk and
/// end after the ack-wait, giving back their places and bytes.
#[test]
fn stalled_queries_are_capped_per_caller_and_end_after_the_ack_wait() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| {
        t.ack_wait_timeout_ms = 1_000;
        t.queries_per_caller_max = 3;
        t.queries_max = 5;
    });
    table_with_rows(&c, "q", 48, ROW_BYTES);
    let (_, greedy) = c.client.create_token(Role::Read, "greedy").unwrap();
    let (_, other) = c.client.create_token(Role::Read, "other").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let ts = c.running.as_ref().unwrap().node.tserver.clone().unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        let query = || v1::QueryRequest {
            table: "q".into(),
            ..Default::default()
        };
        let mut stalled = Vec::new();
        let mut refused = 0;
        for _ in 0..128 {
            let mut t = common::raw_tserver_as(&addr, Some(&greedy)).await;
            match t.query(query()).await {
                Ok(s) => stalled.push(s.into_inner()),
                Err(e) => {
                    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
                    assert!(
                        e.message().contains("queries_per_caller_max = 3"),
                        "{}",
                        e.message()
                    );
                    refused += 1;
                }
            }
        }
        assert_eq!((stalled.len(), refused), (3, 125));
        // What the server holds for them stays under its scan budget.
        let held = ts.scan_bytes_in_flight();
        assert!(held <= (512 << 20), "{held}");
        // Another caller is served meanwhile.
        let mut t = common::raw_tserver_as(&addr, Some(&other)).await;
        let mut s = t.query(query()).await.unwrap().into_inner();
        let mut rows = 0;
        while let Some(m) = s.message().await.unwrap() {
            rows += m.rows.len();
        }
        assert_eq!(rows, 48);
        // Nobody reads the three: they end, and their places come back.
        assert!(
            eventually(Duration::from_secs(5), || ts.scan_bytes_in_flight() == 0).await,
            "{} bytes still held",
            ts.scan_bytes_in_flight()
        );
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        // queries_max = 5: all five places are free again (a member's
        // Queries count against the server's limit, not a caller's).
        let mut t = common::raw_tserver(&addr).await;
        let mut five = Vec::new();
        for _ in 0..5 {
            five.push(t.query(query()).await.unwrap());
        }
        drop((stalled, five));
    });
}

/// A call the caller's role does not allow is refused before its body is
/// read: a read token's undecodable Write gets PERMISSION_DENIED, not the
/// INVALID_ARGUMENT of decoding it (which the cluster member gets).
#[test]
fn a_call_the_role_does_not_allow_is_refused_before_its_body_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |_| {});
    table_with_rows(&c, "pre", 1, 10);
    let (_, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let addr = c.addr();
    let send = |cred: tablinum_auth::Credential, path: &'static str| {
        c.rt.block_on(undecodable(&addr, &cred, path))
    };
    for path in [
        "/tablinum.v1.TabletServer/Write",
        "/tablinum.v1.TabletServer/Append",
        "/tablinum.v1.Manager/CreateTable",
        "/tablinum.v1.Manager/Heartbeat",
    ] {
        let e = send(reader.clone(), path);
        assert_eq!(e.code(), Code::PermissionDenied, "{path}: {e:?}");
        assert!(
            e.message().contains("the caller has read token"),
            "{}",
            e.message()
        );
    }
    let e = send(
        common::secret().credential(),
        "/tablinum.v1.TabletServer/Write",
    );
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    // Every RPC of the API has a need.
    let proto = include_str!("../../tablinum-proto/proto/tablinum.proto");
    let mut service = "";
    for line in proto.lines().map(str::trim) {
        if let Some(s) = line.strip_prefix("service ") {
            service = s.split_whitespace().next().unwrap();
        }
        if let Some(r) = line.strip_prefix("rpc ") {
            let name = r.split('(').next().unwrap().trim();
            let path = format!("/tablinum.v1.{service}/{name}");
            assert!(
                tablinum_server::call_need(&path).is_some(),
                "{path} has no need in call_need"
            );
        }
    }
}
