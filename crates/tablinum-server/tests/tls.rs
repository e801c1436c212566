//! TLS on every listener, end to end: a cluster whose gRPC and HTTP
//! listeners speak TLS only, a tablet server in another listener reaching
//! the manager over TLS, clients with and without the right CA, a client
//! certificate standing in for the cluster secret (mutual TLS), and
//! plaintext callers refused.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
use tablinum_client::{Client, ClientConfig, ClientTls, Durability, Split};
use tablinum_server::{ManagerConfig, TserverConfig};

struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    other_ca: PathBuf,
}

fn pki(dir: &Path) -> Pki {
    let ca_params = || {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p
    };
    let ca = CertifiedIssuer::self_signed(ca_params(), KeyPair::generate().unwrap()).unwrap();
    let other = CertifiedIssuer::self_signed(ca_params(), KeyPair::generate().unwrap()).unwrap();
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&server_key, &ca)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let client = CertificateParams::new(vec!["tserver-7".to_string()])
        .unwrap()
        .signed_by(&client_key, &ca)
        .unwrap();
    let w = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    Pki {
        ca: w("ca.pem", ca.pem()),
        cert: w("server.pem", server.pem()),
        key: w("server.key", server_key.serialize_pem()),
        client_cert: w("client.pem", client.pem()),
        client_key: w("client.key", client_key.serialize_pem()),
        other_ca: w("other-ca.pem", other.pem()),
    }
}

fn tls_client(
    addr: &str,
    ca: &Path,
    cred: Option<tablinum_client::Credential>,
) -> tablinum_client::Result<Client> {
    Client::connect_with(
        addr,
        ClientConfig {
            tls: Some(ClientTls::from_files(ca, None).unwrap()),
            ..ClientConfig::with_credential(cred)
        },
    )
}

#[test]
fn a_tls_cluster_serves_only_tls_callers_that_trust_its_ca() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let k = pki(d);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let m = ManagerConfig {
        listen: "127.0.0.1:0".into(),
        http: "127.0.0.1:0".into(),
        data: d.join("manager"),
        storage: d.join("storage"),
        heartbeat_timeout_ms: 2_000,
        tls_cert: k.cert.clone(),
        tls_key: k.key.clone(),
        tls_client_ca: k.ca.clone(),
        ..ManagerConfig::default()
    };
    let running = rt.block_on(tablinum_server::start(Some(m), None)).unwrap();
    let addr = running.grpc.to_string();
    // A tablet server in its own listener (TLS too), reaching the manager
    // over TLS with the cluster secret.
    let t = TserverConfig {
        listen: "127.0.0.1:0".into(),
        http: "127.0.0.1:0".into(),
        manager: addr.clone(),
        storage: d.join("storage"),
        heartbeat_interval_ms: 100,
        cluster_secret_file: d.join("manager").join("cluster.secret"),
        tls_cert: k.cert.clone(),
        tls_key: k.key.clone(),
        tls_client_ca: k.ca.clone(),
        tls_ca: k.ca.clone(),
        ..TserverConfig::default()
    };
    let ts = rt.block_on(tablinum_server::start(None, Some(t))).unwrap();
    let admin =
        tablinum_auth::files::load_token_file(&d.join("manager").join("admin.token")).unwrap();

    let c = tls_client(&addr, &k.ca, Some(admin.clone())).unwrap();
    let t0 = Instant::now();
    while c.status().unwrap().servers.is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the TLS tablet server never joined"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    c.create_table("s", Split::Even(2), Durability::Sync)
        .unwrap();
    let t0 = Instant::now();
    while c.put("s", b"k", b"v").is_err() {
        assert!(t0.elapsed() < Duration::from_secs(20));
    }
    assert_eq!(c.get("s", b"k").unwrap(), Some(b"v".to_vec()));
    let (rows, _) = c.query_vec(&tablinum_client::Query::new("s")).unwrap();
    assert_eq!(rows.len(), 1);

    // Plaintext callers and callers trusting another CA get nowhere.
    let plain = Client::connect_with(&addr, ClientConfig::with_credential(Some(admin.clone())))
        .and_then(|c| c.status());
    assert!(plain.is_err(), "a plaintext client was served");
    let wrong = tls_client(&addr, &k.other_ca, Some(admin.clone())).and_then(|c| c.status());
    assert!(wrong.is_err(), "a client trusting another CA was served");
    // TLS without a token is still refused.
    let e = tls_client(&addr, &k.ca, None)
        .unwrap()
        .status()
        .unwrap_err();
    assert!(
        matches!(e, tablinum_client::Error::Unauthenticated(_)),
        "{e}"
    );

    // A client certificate of the cluster's CA stands in for the secret.
    let member = Client::connect_with(
        &addr,
        ClientConfig {
            tls: Some(ClientTls::from_files(&k.ca, Some((&k.client_cert, &k.client_key))).unwrap()),
            ..ClientConfig::default()
        },
    )
    .unwrap();
    assert_eq!(member.get("s", b"k").unwrap(), Some(b"v".to_vec()));

    // HTTP is TLS too: plaintext gets no page, TLS gets /health.
    let http = running.http;
    {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(http).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.write_all(b"GET /health HTTP/1.1\r\n\r\n");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        assert!(
            !out.starts_with(b"HTTP/1.1 200"),
            "plaintext HTTP was served"
        );
    }
    let body = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_rustls::rustls;
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(&k.ca).unwrap();
        use rustls::pki_types::pem::PemObject;
        for c in rustls::pki_types::CertificateDer::pem_slice_iter(&pem) {
            roots.add(c.unwrap()).unwrap();
        }
        let cfg = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        let conn = tokio_rustls::TlsConnector::from(Arc::new(cfg));
        let tcp = tokio::net::TcpStream::connect(http).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let mut s = conn.connect(name, tcp).await.unwrap();
        s.write_all(b"GET /health HTTP/1.1\r\n\r\n").await.unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    assert!(body.starts_with("HTTP/1.1 200"), "{body}");

    rt.block_on(ts.shutdown());
    rt.block_on(running.shutdown());
}

#[test]
fn half_configured_tls_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let m = ManagerConfig {
        listen: "127.0.0.1:0".into(),
        http: "127.0.0.1:0".into(),
        data: dir.path().join("manager"),
        storage: dir.path().join("storage"),
        tls_cert: dir.path().join("cert.pem"),
        ..ManagerConfig::default()
    };
    let e = rt
        .block_on(tablinum_server::start(Some(m), None))
        .err()
        .unwrap();
    assert!(
        matches!(&e, tablinum_server::Error::Config(m) if m.contains("tls_key is not")),
        "{e}"
    );
}
