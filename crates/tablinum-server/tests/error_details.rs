//! Every refusal reaches the caller typed: a real cluster is made to answer
//! each reason (a tablet it does not host, a limit, a newer owner, a full
//! and a failing disk, a corrupted value, a connection never made, a port
//! that does not speak gRPC), and the status the caller gets carries the
//! reason and whether the request was applied in its details, whatever its
//! message says.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{open_many, raw_tserver_as, TestCluster};
use tablinum_auth::Role;
use tablinum_client::{Durability, Split};
use tablinum_engine::faults::FaultSwitch;
use tablinum_proto::error::{Applied, Detail, ErrorReason as R};
use tablinum_proto::v1;
use tonic::{Code, Status};

fn detail(s: &Status) -> Detail {
    Detail::of(s).unwrap_or_else(|| panic!("no typed detail on {s:?}"))
}

fn write_req(table: &str, key: &[u8], value: Vec<u8>) -> v1::WriteRequest {
    v1::WriteRequest {
        table: table.into(),
        mutations: vec![v1::Mutation {
            key: key.to_vec(),
            value,
            ..Default::default()
        }],
        table_id: 0,
    }
}

fn get_req(table: &str, key: &[u8]) -> v1::GetRequest {
    v1::GetRequest {
        table: table.into(),
        key: key.to_vec(),
        ..Default::default()
    }
}

/// A client of `addr` that connects at its first call, through tablinum's
/// own transport (which types what fails below gRPC).
fn lazy(
    addr: &str,
    cred: &tablinum_auth::Credential,
) -> v1::tablet_server_client::TabletServerClient<tablinum_client::Transport> {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_lazy();
    v1::tablet_server_client::TabletServerClient::new(tablinum_auth::Caller::new(
        ch,
        tablinum_auth::Bearer::new(Some(cred), addr),
    ))
}

#[test]
fn refusals_carry_their_reason_and_whether_anything_was_applied() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.scan_streams_per_caller_max = 1);
    c.client
        .create_table("t", Split::Even(1), Durability::Sync)
        .unwrap();
    c.wait_open("t", 1);
    for i in 0..40u32 {
        c.client
            .put("t", format!("k{i:03}").as_bytes(), &[b'v'; 64])
            .unwrap();
    }
    let (_, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    let addr = c.addr();
    let http = c.running.as_ref().unwrap().http.to_string();
    let tablet0 = c.client.locations("t", false).unwrap().tablets[0].id;
    c.rt.block_on(async {
        let mut admin = raw_tserver_as(&addr, Some(&c.admin)).await;
        // A table this server does not host.
        let s = admin.get(get_req("nope", b"k")).await.unwrap_err();
        let d = detail(&s);
        assert_eq!(
            (s.code(), d.reason, d.applied),
            (Code::FailedPrecondition, R::NotServing, Applied::No)
        );
        // Bad input, typed by its code.
        let s = admin.get(get_req("", b"k")).await.unwrap_err();
        assert_eq!(
            (s.code(), detail(&s).reason),
            (Code::InvalidArgument, R::BadRequest)
        );
        // No credentials; a read token writing.
        let mut outsider = raw_tserver_as(&addr, None).await;
        let s = outsider.get(get_req("t", b"k000")).await.unwrap_err();
        assert_eq!(
            (s.code(), detail(&s).reason),
            (Code::Unauthenticated, R::Unauthenticated)
        );
        let mut r = raw_tserver_as(&addr, Some(&reader)).await;
        let s = r.write(write_req("t", b"x", vec![1])).await.unwrap_err();
        let d = detail(&s);
        assert_eq!(
            (s.code(), d.reason, d.applied),
            (Code::PermissionDenied, R::PermissionDenied, Applied::No)
        );
        // A limit, named.
        let scan = v1::ScanStart {
            table: "t".into(),
            tablet_id: tablet0,
            window: 1,
            batch_rows: 1,
            ..Default::default()
        };
        let _held = open_many(&addr, Some(&reader), vec![scan.clone()])
            .await
            .unwrap();
        let s = match open_many(&addr, Some(&reader), vec![scan]).await {
            Ok(_) => panic!("a second stream past scan_streams_per_caller_max = 1"),
            Err(s) => s,
        };
        let d = detail(&s);
        assert_eq!(
            (s.code(), d.reason, d.applied, d.limit.as_deref()),
            (
                Code::ResourceExhausted,
                R::LimitExceeded,
                Applied::No,
                Some("scan_streams_per_caller_max")
            )
        );
        // A connection never made: typed where it failed, nothing sent.
        let dead = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let s = lazy(&dead, &c.admin)
            .write(write_req("t", b"x", vec![1]))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert_eq!(
            (s.code(), d.reason, d.applied),
            (Code::Unavailable, R::ConnectFailed, Applied::No)
        );
        // A port that does not speak gRPC (the status page's): the
        // connection fails under the call; it may have been applied.
        let s = lazy(&http, &c.admin)
            .write(write_req("t", b"x", vec![1]))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert_eq!(
            (d.reason, d.applied),
            (R::Transport, Applied::Unknown),
            "{s:?}"
        );
    });
}

#[test]
fn a_newer_owner_a_full_disk_and_a_failed_fsync_are_typed() {
    let dir = tempfile::tempdir().unwrap();
    let c = TestCluster::start(dir.path(), |t| t.tablet_stuck_ms = 1_000);
    let faults = Arc::new(FaultSwitch::new());
    c.tserver().inject_storage_faults(faults.clone());
    c.client
        .create_table("t", Split::Even(1), Durability::Sync)
        .unwrap();
    c.wait_open("t", 1);
    c.client.put("t", b"k", b"durable").unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        let mut admin = raw_tserver_as(&addr, Some(&c.admin)).await;
        // A full disk: refused before anything reached the journal.
        faults.disk_full(true);
        let s = admin
            .write(write_req("t", b"k", b"x".to_vec()))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert_eq!(
            (s.code(), d.reason, d.applied),
            (Code::ResourceExhausted, R::DiskFull, Applied::No)
        );
        faults.heal();
        // A failed fsync: the write's outcome is unknown, then the tablet
        // refuses (reopening, or handed back) with nothing applied.
        faults.fail_syncs(FaultSwitch::FOREVER, true);
        let s = admin
            .write(write_req("t", b"k", b"x".to_vec()))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert_eq!(d.applied, Applied::Unknown, "{s:?}");
        assert!(
            matches!(d.reason, R::OutcomeUnknown | R::TabletUnavailable),
            "{s:?}"
        );
        let mut refused = 0;
        let t0 = Instant::now();
        while refused < 3 && t0.elapsed() < Duration::from_secs(5) {
            if let Err(s) = admin.get(get_req("t", b"k")).await {
                let d = detail(&s);
                assert!(
                    matches!(d.reason, R::TabletUnavailable | R::NotServing),
                    "{s:?}"
                );
                assert_eq!(d.applied, Applied::No);
                refused += 1;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(refused > 0, "a tablet whose fsync failed kept serving");
        faults.heal();
    });
    // A newer owner opens the tablet's store at a higher epoch: this
    // server's next write learns it is stale.
    let t0 = Instant::now();
    while c.client.put("t", b"k2", b"v").is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "writes never resumed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let loc = c.client.locations("t", true).unwrap();
    let tablet_dir = dir
        .path()
        .join("storage")
        .join("tables")
        .join(loc.table.id.to_string())
        .join(loc.tablets[0].id.to_string());
    let newer = tablinum_engine::Store::open(
        &tablet_dir,
        tablinum_engine::Options {
            epoch: Some(1_000_000),
            ..Default::default()
        },
    )
    .unwrap();
    c.rt.block_on(async {
        let mut admin = raw_tserver_as(&addr, Some(&c.admin)).await;
        let s = admin
            .write(write_req("t", b"k3", b"v".to_vec()))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert!(
            matches!(
                (s.code(), d.reason),
                (Code::FailedPrecondition, R::StaleEpoch)
                    | (Code::Unknown, R::OutcomeUnknown)
                    | (Code::FailedPrecondition, R::NotServing)
            ),
            "{s:?}"
        );
        // Once fenced, every later call is refused as stale or not served.
        let s = admin
            .write(write_req("t", b"k4", b"v".to_vec()))
            .await
            .unwrap_err();
        let d = detail(&s);
        assert_eq!(d.applied, Applied::No, "{s:?}");
        assert!(matches!(d.reason, R::StaleEpoch | R::NotServing), "{s:?}");
    });
    drop(newer);
}
