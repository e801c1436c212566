//! Authentication and roles end to end, on a real cluster on loopback
//! sockets, played by outsiders: no credentials, a forged token, a revoked
//! token, a read-only token, a client token posing as a server, and an
//! impostor tablet server without the cluster secret.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tablinum_auth::{ClusterSecret, Credential, Role};
use tablinum_client::{Durability, Error, Split};
use tablinum_proto::v1;
use tonic::Code;

use common::TestCluster;

/// Every RPC of both services once with `cred`; the status code of each
/// (`Ok` for a call that went through).
fn every_call(c: &TestCluster, cred: Option<&Credential>) -> Vec<(&'static str, Code)> {
    let addr = c.addr();
    c.rt.block_on(async {
        let mut m = common::raw_manager_as(&addr, cred).await;
        let mut t = common::raw_tserver_as(&addr, cred).await;
        let code = |r: Result<(), tonic::Status>| r.err().map_or(Code::Ok, |s| s.code());
        let mut out = Vec::new();
        out.push((
            "CreateTable",
            code(
                m.create_table(v1::CreateTableRequest {
                    name: "made".into(),
                    tablets: 1,
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
        ));
        out.push((
            "DropTable",
            code(
                m.drop_table(v1::DropTableRequest { name: "t".into() })
                    .await
                    .map(drop),
            ),
        ));
        out.push((
            "ListTables",
            code(m.list_tables(v1::ListTablesRequest {}).await.map(drop)),
        ));
        out.push((
            "TabletMap",
            code(
                m.tablet_map(v1::TabletMapRequest { table: "t".into() })
                    .await
                    .map(drop),
            ),
        ));
        out.push((
            "ClusterStatus",
            code(
                m.cluster_status(v1::ClusterStatusRequest {})
                    .await
                    .map(drop),
            ),
        ));
        out.push((
            "Heartbeat",
            code(
                m.heartbeat(v1::HeartbeatRequest {
                    server_id: "impostor".into(),
                    address: "127.0.0.1:9".into(),
                    http: "127.0.0.1:9".into(),
                    ..Default::default()
                })
                .await
                .map(drop),
            ),
        ));
        out.push((
            "CreateToken",
            code(
                m.create_token(v1::CreateTokenRequest {
                    role: Role::Admin as i32,
                    name: "sneaky".into(),
                })
                .await
                .map(drop),
            ),
        ));
        out.push((
            "ListTokens",
            code(m.list_tokens(v1::ListTokensRequest {}).await.map(drop)),
        ));
        out.push((
            "RevokeToken",
            code(
                m.revoke_token(v1::RevokeTokenRequest {
                    id: c.admin.token_id().unwrap().into(),
                })
                .await
                .map(drop),
            ),
        ));
        out.push((
            "Write",
            code(
                t.write(v1::WriteRequest {
                    table: "t".into(),
                    mutations: vec![v1::Mutation {
                        key: b"k0".to_vec(),
                        value: b"evil".to_vec(),
                        ..Default::default()
                    }],
                    table_id: 0,
                })
                .await
                .map(drop),
            ),
        ));
        let get = v1::GetRequest {
            table: "t".into(),
            key: b"k0".to_vec(),
            table_id: 0,
            tablet_id: 0,
            busy_timeout_ms: 0,
            ..Default::default()
        };
        out.push(("Get", code(t.get(get.clone()).await.map(drop))));
        out.push(("Head", code(t.head(get).await.map(drop))));
        let q = v1::QueryRequest {
            table: "t".into(),
            limit: 5,
            ..Default::default()
        };
        // A stream's status arrives with its first message.
        let r = match t.query(q).await {
            Ok(s) => s.into_inner().message().await.map(drop),
            Err(e) => Err(e),
        };
        out.push(("Query", code(r)));
        let scan = tokio_stream::iter(vec![v1::ScanClientMessage {
            msg: Some(v1::scan_client_message::Msg::Start(v1::ScanStart {
                table: "t".into(),
                window: 1,
                ..Default::default()
            })),
        }]);
        let r = match t.scan(scan).await {
            Ok(s) => s.into_inner().message().await.map(drop),
            Err(e) => Err(e),
        };
        out.push(("Scan", code(r)));
        let many = tokio_stream::iter(vec![v1::ScanManyClientMessage {
            msg: Some(v1::scan_many_client_message::Msg::Start(
                v1::ScanManyStart {
                    scans: vec![v1::ScanStart {
                        table: "t".into(),
                        window: 1,
                        ..Default::default()
                    }],
                },
            )),
        }]);
        let r = match t.scan_many(many).await {
            Ok(s) => s.into_inner().message().await.map(drop),
            Err(e) => Err(e),
        };
        out.push(("ScanMany", code(r)));
        out.push((
            "Flush",
            code(
                t.flush(v1::FlushRequest { table: "t".into() })
                    .await
                    .map(drop),
            ),
        ));
        out
    })
}

/// The table's rows, the tables, the tokens and the servers: what a
/// refused call must leave as it was.
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

fn state(c: &TestCluster) -> (Rows, usize, usize, usize) {
    let (rows, _) = c
        .client
        .query_vec(&tablinum_client::Query::new("t"))
        .unwrap();
    let rows = rows.into_iter().map(|r| (r.key, r.value)).collect();
    let st = c.client.status().unwrap();
    (
        rows,
        c.client.list_tables().unwrap().len(),
        c.client.list_tokens().unwrap().len(),
        st.servers.len(),
    )
}

fn setup(dir: &std::path::Path) -> TestCluster {
    let c = TestCluster::start(dir, |_| {});
    c.client
        .create_table("t", Split::Even(1), Durability::Sync)
        .unwrap();
    c.wait_open("t", 1);
    for i in 0..20u32 {
        c.client
            .put("t", format!("k{i}").as_bytes(), b"good")
            .unwrap();
    }
    c
}

#[test]
fn outsiders_are_refused_on_every_call_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    let before = state(&c);

    // No credentials, a forged secret for a real token id, a token of a
    // cluster that never existed, another cluster's secret: all refused.
    let forged = Credential::parse(&format!(
        "tbt1.{}.{}",
        c.admin.token_id().unwrap(),
        "0".repeat(64)
    ))
    .unwrap();
    let stranger = tablinum_auth::NewToken::generate().unwrap().token;
    let other_cluster = ClusterSecret::generate().unwrap().credential();
    for (who, cred) in [
        ("nobody", None),
        ("forged", Some(&forged)),
        ("stranger", Some(&stranger)),
        ("other cluster", Some(&other_cluster)),
    ] {
        let calls = every_call(&c, cred);
        assert_eq!(calls.len(), 16);
        for (call, code) in calls {
            assert_eq!(code, Code::Unauthenticated, "{who}: {call}");
        }
    }
    assert_eq!(state(&c), before, "a refused call changed something");

    // What the refusal says names the problem and never echoes a secret.
    let e = c.rt.block_on(async {
        let mut m = common::raw_manager_as(&c.addr(), Some(&forged)).await;
        m.list_tables(v1::ListTablesRequest {}).await.unwrap_err()
    });
    assert!(
        e.message()
            .contains("unknown or revoked, or its secret is wrong"),
        "{}",
        e.message()
    );
    assert!(!e.message().contains(&"0".repeat(64)));
}

#[test]
fn roles_allow_only_what_they_name() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    let (info, read) = c.client.create_token(Role::Read, "reader").unwrap();
    assert_eq!(info.role, Role::Read);
    let (_, write) = c.client.create_token(Role::Write, "writer").unwrap();
    let before = state(&c);

    let allowed = |cred: &Credential| -> Vec<&'static str> {
        every_call(&c, Some(cred))
            .into_iter()
            .filter(|(_, code)| *code != Code::PermissionDenied)
            .map(|(call, _)| call)
            .collect()
    };
    let reads = [
        "ListTables",
        "TabletMap",
        "ClusterStatus",
        "Get",
        "Head",
        "Query",
        "Scan",
        "ScanMany",
    ];
    assert_eq!(allowed(&read), reads);
    assert_eq!(state(&c), before, "a read token changed something");
    let writes: Vec<&str> = every_call(&c, Some(&write))
        .into_iter()
        .filter(|(_, code)| *code == Code::PermissionDenied)
        .map(|(call, _)| call)
        .collect();
    assert_eq!(
        writes,
        [
            "CreateTable",
            "DropTable",
            "Heartbeat",
            "CreateToken",
            "ListTokens",
            "RevokeToken"
        ]
    );
    // The write token's Write went through; nothing else changed.
    let rc = common::client_as(&c.addr(), &read);
    assert_eq!(rc.get("t", b"k0").unwrap(), Some(b"evil".to_vec()));
    let e = rc.put("t", b"k1", b"x").unwrap_err();
    assert!(
        matches!(&e, Error::PermissionDenied(m) if m.contains("Write needs a write or admin token")),
        "{e}"
    );
    // Even an admin token is not a server.
    let e = c.rt.block_on(async {
        let mut m = common::raw_manager_as(&c.addr(), Some(&c.admin)).await;
        m.heartbeat(v1::HeartbeatRequest {
            server_id: "x".into(),
            address: "127.0.0.1:9".into(),
            http: "127.0.0.1:9".into(),
            ..Default::default()
        })
        .await
        .unwrap_err()
    });
    assert_eq!(e.code(), Code::PermissionDenied);
    assert!(
        e.message().contains("cluster credential"),
        "{}",
        e.message()
    );
}

#[test]
fn a_revoked_token_is_refused_everywhere_once_revoke_returns() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = setup(dir.path());
    // A second tablet server in its own listener: it learns tokens only
    // through heartbeats.
    c.add_tserver(|_| {});
    c.client
        .create_table("u", Split::Even(4), Durability::Sync)
        .unwrap();
    let (info, tok) = c.client.create_token(Role::Write, "temp").unwrap();
    let tc = common::client_as(&c.addr(), &tok);
    // Wait until the new token works on every server of `u` (a heartbeat).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let ok = (0..64u8).all(|i| tc.put("u", &[i * 4], b"v").is_ok());
        if ok {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "token never accepted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let servers: std::collections::HashSet<String> = c
        .client
        .locations("u", true)
        .unwrap()
        .tablets
        .iter()
        .map(|t| t.server.clone())
        .collect();
    assert_eq!(servers.len(), 2, "u should span both servers");
    let listed = c.client.list_tokens().unwrap();
    assert!(listed.iter().any(|t| t.id == info.id && t.name == "temp"));
    c.client.revoke_token(&info.id).unwrap();
    // At once, with no waiting: every call with it, on every server.
    for (call, code) in every_call(&c, Some(&tok)) {
        assert_eq!(code, Code::Unauthenticated, "{call}");
    }
    for i in 0..64u8 {
        let e = tc.get("u", &[i * 4]).unwrap_err();
        assert!(matches!(e, Error::Unauthenticated(_)), "{e}");
    }
    assert!(!c
        .client
        .list_tokens()
        .unwrap()
        .iter()
        .any(|t| t.id == info.id));
    let e = c.client.revoke_token(&info.id).unwrap_err();
    assert!(matches!(e, Error::NotFound(_)), "{e}");
    // Bad token requests are named.
    let e = c.client.create_token(Role::Read, "has space").unwrap_err();
    assert!(e.to_string().contains("token name"), "{e}");
}

#[test]
fn an_impostor_cannot_join_and_no_tablet_moves() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    let before = c.client.locations("t", true).unwrap();
    let addr = c.addr();
    c.rt.block_on(async {
        // Without the secret: refused, whatever it claims.
        let other = ClusterSecret::generate().unwrap().credential();
        for cred in [None, Some(&other), Some(&c.admin)] {
            let mut m = common::raw_manager_as(&addr, cred).await;
            for _ in 0..5 {
                let e = m
                    .heartbeat(v1::HeartbeatRequest {
                        server_id: "impostor-1".into(),
                        address: "127.0.0.1:1".into(),
                        http: "127.0.0.1:1".into(),
                        ..Default::default()
                    })
                    .await
                    .unwrap_err();
                assert!(
                    matches!(e.code(), Code::Unauthenticated | Code::PermissionDenied),
                    "{e:?}"
                );
            }
        }
        // Even with the secret, hostile fields are refused by name.
        let mut m = common::raw_manager_as(&addr, Some(&common::secret().credential())).await;
        let bad = |hb: v1::HeartbeatRequest| {
            let mut m = m.clone();
            async move { m.heartbeat(hb).await.unwrap_err() }
        };
        let ok = v1::HeartbeatRequest {
            server_id: "member".into(),
            address: "127.0.0.1:2".into(),
            http: "127.0.0.1:2".into(),
            ..Default::default()
        };
        let e = bad(v1::HeartbeatRequest {
            server_id: "x".repeat(5000),
            ..ok.clone()
        })
        .await;
        assert_eq!(e.code(), Code::InvalidArgument);
        assert!(
            e.message().contains("server_id is 5000 bytes"),
            "{}",
            e.message()
        );
        let e = bad(v1::HeartbeatRequest {
            address: "127.0.0.1:2\nmanager: forged log line".into(),
            ..ok.clone()
        })
        .await;
        assert!(e.message().contains("address"), "{}", e.message());
        let e = bad(v1::HeartbeatRequest {
            address: "a".repeat(4 << 20),
            ..ok.clone()
        })
        .await;
        assert_eq!(e.code(), Code::InvalidArgument);
        let e = bad(v1::HeartbeatRequest {
            tablets: vec![v1::HostedTablet {
                table_id: 1,
                tablet_id: 0,
                files: vec!["../../etc/shadow".into()],
                ..Default::default()
            }],
            ..ok.clone()
        })
        .await;
        assert!(e.message().contains("file path"), "{}", e.message());
        // None of that registered anyone.
        let st = m.cluster_status(v1::ClusterStatusRequest {}).await.unwrap();
        assert_eq!(st.into_inner().servers.len(), 1);
        let _ = m.list_tables(v1::ListTablesRequest {}).await.unwrap();
    });
    std::thread::sleep(Duration::from_millis(300));
    let after = c.client.locations("t", true).unwrap();
    assert_eq!(
        before.tablets.iter().map(|t| &t.server).collect::<Vec<_>>(),
        after.tablets.iter().map(|t| &t.server).collect::<Vec<_>>(),
        "a tablet moved"
    );
    assert_eq!(c.client.status().unwrap().servers.len(), 1);
    assert_eq!(c.client.get("t", b"k3").unwrap(), Some(b"good".to_vec()));
}

#[test]
fn a_separate_tablet_server_needs_the_cluster_secret() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    let rt = &c.rt;
    // No secret configured: refuses to start, naming the setting.
    let cfg = tablinum_server::TserverConfig {
        listen: "127.0.0.1:0".into(),
        http: "127.0.0.1:0".into(),
        manager: c.addr(),
        storage: dir.path().join("storage"),
        ..Default::default()
    };
    let e = rt
        .block_on(tablinum_server::start(None, Some(cfg.clone())))
        .err()
        .unwrap();
    assert!(
        matches!(&e, tablinum_server::Error::Config(m) if m.contains("cluster_secret_file is not set")),
        "{e}"
    );
    // The wrong secret: starts, but the manager never counts it.
    let wrong = dir.path().join("wrong.secret");
    tablinum_auth::files::load_or_create_cluster_secret(&wrong).unwrap();
    let r = rt
        .block_on(tablinum_server::start(
            None,
            Some(tablinum_server::TserverConfig {
                cluster_secret_file: wrong,
                heartbeat_interval_ms: 50,
                ..cfg
            }),
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(c.client.status().unwrap().servers.len(), 1);
    rt.block_on(r.shutdown());
}

/// Scan servers listen and join the cluster too: outsiders are refused on
/// every read a scan server serves, a revoked token is refused there once
/// revoke returns, and without the cluster secret nobody can register as a
/// scan server (or list them).
#[test]
fn scan_servers_refuse_outsiders_and_impostors_cannot_register() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = setup(dir.path());
    c.client.flush("t").unwrap();
    let ss = c.add_sserver(|_| {});
    let t0 = std::time::Instant::now();
    while c.client.status().unwrap().scan_servers.is_empty() {
        assert!(t0.elapsed() < Duration::from_secs(20), "never registered");
        std::thread::sleep(Duration::from_millis(50));
    }
    let table_id = c.client.locations("t", true).unwrap().table.id;
    let (info, tok) = c.client.create_token(Role::Read, "ss-reader").unwrap();
    // The scan server's reads with `cred`: Get, Head, Scan, ScanMany.
    let reads = |cred: Option<&Credential>| -> Vec<(&'static str, Code)> {
        c.rt.block_on(async {
            let mut t = common::raw_tserver_as(&ss, cred).await;
            let code = |r: Result<(), tonic::Status>| r.err().map_or(Code::Ok, |s| s.code());
            let get = v1::GetRequest {
                table: "t".into(),
                key: b"k1".to_vec(),
                table_id,
                tablet_id: 0,
                busy_timeout_ms: 0,
                ..Default::default()
            };
            let start = v1::ScanStart {
                table: "t".into(),
                table_id,
                ..Default::default()
            };
            let (mut t1, mut t2) = (t.clone(), t.clone());
            let scan = async {
                let mut s = t1
                    .scan(tokio_stream::iter(vec![v1::ScanClientMessage {
                        msg: Some(v1::scan_client_message::Msg::Start(start.clone())),
                    }]))
                    .await?
                    .into_inner();
                s.message().await.map(drop)
            };
            let many = async {
                let mut s = t2
                    .scan_many(tokio_stream::iter(vec![v1::ScanManyClientMessage {
                        msg: Some(v1::scan_many_client_message::Msg::Start(
                            v1::ScanManyStart {
                                scans: vec![start.clone()],
                            },
                        )),
                    }]))
                    .await?
                    .into_inner();
                s.message().await.map(drop)
            };
            vec![
                ("Get", code(t.get(get.clone()).await.map(drop))),
                ("Head", code(t.head(get).await.map(drop))),
                ("Scan", code(scan.await)),
                ("ScanMany", code(many.await)),
            ]
        })
    };
    // Wait until the scan server holds the new token (a heartbeat).
    let t0 = std::time::Instant::now();
    while reads(Some(&tok)).iter().any(|(_, code)| *code != Code::Ok) {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "token never accepted"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let forged = Credential::parse(&format!(
        "tbt1.{}.{}",
        c.admin.token_id().unwrap(),
        "0".repeat(64)
    ))
    .unwrap();
    let other_cluster = ClusterSecret::generate().unwrap().credential();
    for (who, cred) in [
        ("nobody", None),
        ("forged", Some(&forged)),
        ("other cluster", Some(&other_cluster)),
    ] {
        for (call, code) in reads(cred) {
            assert_eq!(
                code,
                Code::Unauthenticated,
                "{who}: {call} on the scan server"
            );
        }
    }
    // Revoked: refused on the scan server too, at once.
    c.client.revoke_token(&info.id).unwrap();
    for (call, code) in reads(Some(&tok)) {
        assert_eq!(
            code,
            Code::Unauthenticated,
            "revoked: {call} on the scan server"
        );
    }
    // Registering as a scan server needs the cluster secret; listing them
    // needs credentials.
    let addr = c.addr();
    c.rt.block_on(async {
        for cred in [None, Some(&other_cluster), Some(&c.admin)] {
            let mut m = common::raw_manager_as(&addr, cred).await;
            let e = m
                .scan_server_heartbeat(v1::ScanServerHeartbeatRequest {
                    server_id: "impostor-ss".into(),
                    address: "127.0.0.1:3".into(),
                    http: "127.0.0.1:3".into(),
                    group: "default".into(),
                    ..Default::default()
                })
                .await
                .unwrap_err();
            assert!(
                matches!(e.code(), Code::Unauthenticated | Code::PermissionDenied),
                "{e:?}"
            );
        }
        let mut m = common::raw_manager_as(&addr, None).await;
        let e = m
            .list_scan_servers(v1::ListScanServersRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        // A member with the secret but a malformed report is refused,
        // naming the field, and not listed.
        let cluster = common::secret().credential();
        let mut m = common::raw_manager_as(&addr, Some(&cluster)).await;
        let e = m
            .scan_server_heartbeat(v1::ScanServerHeartbeatRequest {
                server_id: "counts-ss".into(),
                address: "127.0.0.1:4".into(),
                http: "127.0.0.1:4".into(),
                group: "default".into(),
                served_by_attempt: vec![1; 5],
                ..Default::default()
            })
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
        assert!(
            e.message().contains("served_by_attempt has 5 entries"),
            "{e:?}"
        );
    });
    let listed = c.client.status().unwrap().scan_servers;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].address, ss);
}

/// What an eavesdropper on a plaintext cluster captures from a member is a
/// member proof, not the cluster secret: replayed, it is refused (on a
/// heartbeat as on any call), and the secret itself is refused on the
/// wire, so nobody sends it.
#[test]
fn the_cluster_secret_never_travels_and_a_captured_member_proof_is_good_once() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    // What a member's interceptor puts on the wire: a fresh proof.
    let bearer = tablinum_auth::Bearer::new(
        Some(&common::secret().credential()),
        tablinum_auth::proof::MANAGER_AUDIENCE,
    );
    let captured = bearer.value().unwrap();
    let wire = captured.to_str().unwrap().to_string();
    assert!(wire.starts_with("Bearer tbm1."), "{wire}");
    assert!(!wire.contains(common::TEST_SECRET));
    let call = |auth: tonic::metadata::AsciiMetadataValue| {
        let addr = c.addr();
        c.rt.block_on(async move {
            let mut m = common::raw_manager_as(&addr, None).await;
            let mut req = tonic::Request::new(v1::HeartbeatRequest {
                server_id: "ts-impostor".into(),
                address: "127.0.0.1:1".into(),
                ..Default::default()
            });
            req.metadata_mut().insert("authorization", auth);
            m.heartbeat(req).await.map(|_| ())
        })
    };
    // The secret itself: refused, naming why.
    let raw = format!("Bearer {}", common::secret().credential().expose());
    let e = call(raw.parse().unwrap()).unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("never the secret"), "{}", e.message());
    // The captured proof: good once (a heartbeat from a server that
    // reports nothing), refused when replayed.
    let first = call(captured.clone());
    if let Err(e) = &first {
        assert_ne!(e.code(), Code::Unauthenticated, "{e:?}");
    }
    let e = call(captured).unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("replayed"), "{}", e.message());
    // An old proof is refused by its time.
    let old = tablinum_auth::proof::Prover::member(common::secret().sha256())
        .proof_at(
            tablinum_auth::proof::MANAGER_AUDIENCE,
            tablinum_auth::proof::unix_ms() - 60_000,
        )
        .text;
    let e = call(format!("Bearer {old}").parse().unwrap()).unwrap_err();
    assert!(
        e.message().contains("off this server's clock"),
        "{}",
        e.message()
    );
    // The honest cluster goes on.
    assert_eq!(c.client.status().unwrap().servers.len(), 1);
}

/// A TCP proxy to `to` that a test can cut: every connection is dropped
/// and new ones are closed at once while `cut` is true.
fn cuttable_proxy(
    rt: &tokio::runtime::Runtime,
    to: String,
) -> (String, tokio::sync::watch::Sender<bool>) {
    let (cut, cut_rx) = tokio::sync::watch::channel(false);
    let l = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = l.local_addr().unwrap().to_string();
    rt.spawn(async move {
        while let Ok((mut a, _)) = l.accept().await {
            if *cut_rx.borrow() {
                continue;
            }
            let to = to.clone();
            let mut cut_rx = cut_rx.clone();
            tokio::spawn(async move {
                let Ok(mut b) = tokio::net::TcpStream::connect(&to).await else {
                    return;
                };
                tokio::select! {
                    _ = tokio::io::copy_bidirectional(&mut a, &mut b) => {}
                    _ = cut_rx.wait_for(|c| *c) => {}
                }
            });
        }
    });
    (addr, cut)
}

/// A scan server cut off from the manager stops honouring client tokens
/// once its token lease (the manager's heartbeat timeout) has run out: a
/// token revoked meanwhile is refused there by the time RevokeToken
/// returns, and tokens work again once it hears from the manager.
#[test]
fn a_revoked_token_fails_on_a_scan_server_cut_off_from_the_manager() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = setup(dir.path());
    c.client.flush("t").unwrap();
    let (proxy, cut) = cuttable_proxy(&c.rt, c.addr());
    let ss = c.add_sserver(|s| s.manager = proxy.clone());
    let (info, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    let table_id = c
        .client
        .list_tables()
        .unwrap()
        .into_iter()
        .find(|t| t.name == "t")
        .unwrap()
        .id;
    let get = |cred: &Credential| {
        let (ss, cred) = (ss.clone(), cred.clone());
        c.rt.block_on(async move {
            let mut raw = common::raw_tserver_as(&ss, Some(&cred)).await;
            raw.get(v1::GetRequest {
                table: "t".into(),
                key: b"k1".to_vec(),
                table_id,
                tablet_id: 0,
                ..Default::default()
            })
            .await
            .map(|r| r.into_inner().value)
        })
    };
    let t0 = std::time::Instant::now();
    while get(&reader).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", get(&reader));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&reader).unwrap(), b"good");
    // Cut the scan server off, then revoke.
    cut.send(true).unwrap();
    c.client.revoke_token(&info.id).unwrap();
    let e = get(&reader).unwrap_err();
    assert!(
        matches!(e.code(), Code::Unavailable | Code::Unauthenticated),
        "a revoked token was served by a cut-off scan server: {e:?}"
    );
    // Still cut off: a valid token is refused too, naming why.
    let (_, other) = c.client.create_token(Role::Read, "other").unwrap();
    let e = get(&other).unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("token lease"), "{}", e.message());
    // Back in touch: the valid token works, the revoked one does not.
    cut.send(false).unwrap();
    let t0 = std::time::Instant::now();
    while get(&other).is_err() {
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", get(&other));
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(get(&reader).unwrap_err().code(), Code::Unauthenticated);
}

/// A stream opened before a revocation does not outlive it: the token's
/// open scans end with UNAUTHENTICATED within a heartbeat or two of
/// RevokeToken returning, while other callers' streams go on.
#[test]
fn streams_of_a_revoked_token_end_with_the_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let c = setup(dir.path());
    let (info, doomed) = c.client.create_token(Role::Read, "doomed").unwrap();
    let (_, kept) = c.client.create_token(Role::Read, "kept").unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let addr = c.addr();
    let open = |cred: Credential| {
        let scan = v1::ScanStart {
            table: "t".into(),
            window: 1,
            batch_rows: 1,
            ..Default::default()
        };
        c.rt.block_on(async {
            let (tx, mut s) = common::open_many(&addr, Some(&cred), vec![scan])
                .await
                .unwrap();
            assert!(s.message().await.unwrap().is_some());
            (tx, s)
        })
    };
    let mut a = open(doomed);
    let mut b = open(kept);
    c.client.revoke_token(&info.id).unwrap();
    let next = |s: &mut tonic::Streaming<v1::ScanManyBatch>| {
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(3), s.message()).await })
    };
    match next(&mut a.1) {
        Ok(Err(e)) => {
            assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
            assert!(e.message().contains("revoked"), "{}", e.message());
        }
        other => panic!("a revoked token's stream went on: {other:?}"),
    }
    // The other caller's stream is untouched (it waits for an ack).
    assert!(next(&mut b.1).is_err(), "the kept stream ended");
}

/// A process on a dead server's port, as an outsider writes it with raw
/// HTTP/2: answers every call with a forged row (a `GetResponse` holding
/// "forged") and keeps what each caller sent in `authorization`.
async fn impostor(listener: tokio::net::TcpListener, seen: Arc<Mutex<Vec<String>>>) {
    use prost::Message;
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        let seen = seen.clone();
        tokio::spawn(async move {
            let Ok(mut conn) = h2::server::handshake(sock).await else {
                return;
            };
            while let Some(Ok((req, mut respond))) = conn.accept().await {
                if let Some(a) = req.headers().get("authorization") {
                    seen.lock()
                        .unwrap()
                        .push(a.to_str().unwrap_or_default().to_string());
                }
                let resp = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/grpc")
                    .body(())
                    .unwrap();
                let Ok(mut send) = respond.send_response(resp, false) else {
                    continue;
                };
                let msg = v1::GetResponse {
                    found: true,
                    value: b"forged".to_vec(),
                }
                .encode_to_vec();
                let mut frame = vec![0u8];
                frame.extend(u32::try_from(msg.len()).unwrap().to_be_bytes());
                frame.extend(msg);
                let _ = send.send_data(frame.into(), false);
                let mut trailers = http::HeaderMap::new();
                trailers.insert("grpc-status", "0".parse().unwrap());
                let _ = send.send_trailers(trailers);
            }
        });
    }
}

/// A process that takes a dead scan server's port while the manager still
/// lists it gets no token (each call carries a proof made for that
/// address, good once and nowhere else) and no trust (its answers lack the
/// proof only a member can make, so the client never returns its rows).
#[test]
fn a_process_on_a_dead_scan_servers_port_gets_no_token_and_no_trust() {
    let dir = tempfile::tempdir().unwrap();
    let mut c = setup(dir.path());
    c.client.flush("t").unwrap();
    let ss = c.add_sserver(|_| {});
    let (_, reader) = c.client.create_token(Role::Read, "reader").unwrap();
    let secret = reader.expose().rsplit('.').next().unwrap().to_string();
    // Without a scan server, reads go to the tablet server (the built-in
    // profile would wait for one).
    let profiles = tablinum_client::Profiles::from_toml_str(
        "default = \"p\"\n[profiles.p]\nwhen_no_servers = \"tablet-server\"\n\
         attempts = [ { servers = 1, busy_timeout_ms = 60000 } ]\n",
    )
    .unwrap();
    let client = tablinum_client::Client::connect_with(
        &c.addr(),
        tablinum_client::ClientConfig {
            dispatcher: Some(Arc::new(profiles)),
            ..tablinum_client::ClientConfig::with_credential(Some(reader.clone()))
        },
    )
    .unwrap();
    let eventual = tablinum_client::Consistency::Eventual {
        profile: None,
        busy_timeout_ms: None,
    };
    // The scan server serves eventual reads first.
    let t0 = std::time::Instant::now();
    loop {
        let (v, s) = client.get_with("t", b"k1", &eventual).unwrap();
        assert_eq!(v.as_deref(), Some(&b"good"[..]));
        if s.server == ss {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "{s:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // It dies; an impostor takes its port at once.
    let running = c.extra.pop().unwrap();
    c.rt.block_on(running.shutdown());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let l =
        c.rt.block_on(tokio::net::TcpListener::bind(&ss))
            .expect("the dead scan server's port");
    c.rt.spawn(impostor(l, seen.clone()));
    // While the manager still lists the dead server, no forged row is
    // ever returned: every read is the real row or an error.
    let t0 = std::time::Instant::now();
    let mut errors = 0;
    while t0.elapsed() < Duration::from_millis(1_500) {
        match client.get_with("t", b"k1", &eventual) {
            Ok((v, _)) => assert_eq!(v.as_deref(), Some(&b"good"[..]), "a forged row"),
            Err(e) => {
                errors += 1;
                assert!(!e.to_string().contains("forged"), "{e}");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let captured = seen.lock().unwrap().clone();
    assert!(
        !captured.is_empty(),
        "the client never reached the impostor ({errors} errors): the test proves nothing"
    );
    // What the impostor captured: proofs, never the token; replayed to
    // the real tablet server (or the manager) they are refused.
    for a in &captured {
        assert!(a.starts_with("Bearer tbp1."), "{a}");
        assert!(!a.contains(&secret), "the token's secret travelled");
    }
    let addr = c.addr();
    let replay = |a: &str| {
        let (addr, a) = (addr.clone(), a.to_string());
        c.rt.block_on(async move {
            let mut m = common::raw_manager_as(&addr, None).await;
            let mut req = tonic::Request::new(v1::ListTablesRequest::default());
            req.metadata_mut()
                .insert("authorization", a.parse().unwrap());
            m.list_tables(req).await.map(|_| ())
        })
    };
    for a in captured.iter().take(3) {
        let e = replay(a).unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
        assert!(e.message().contains("made for"), "{}", e.message());
    }
}
