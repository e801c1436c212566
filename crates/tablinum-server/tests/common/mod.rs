//! A real cluster (manager + tablet server on loopback sockets) in the test
//! process, and a client for it.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use tablinum_auth::{Bearer, ClusterSecret, Credential};
use tablinum_client::{Client, ClientConfig, Transport};
use tablinum_proto::v1::{manager_client::ManagerClient, tablet_server_client::TabletServerClient};
use tablinum_server::{ManagerConfig, Running, SserverConfig, TserverConfig};

/// The cluster secret of every test cluster in this process, so raw wire
/// clients (`raw_tserver`, `raw_manager`) can authenticate without a
/// handle on the cluster. Tests of authentication make their own.
pub const TEST_SECRET: &str = "5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1e5eb1";

pub fn secret() -> ClusterSecret {
    ClusterSecret::parse(TEST_SECRET).unwrap()
}

/// A connection to `addr` presenting proofs of `cred` made for `audience`.
pub async fn transport(addr: &str, cred: Option<&Credential>, audience: &str) -> Transport {
    let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    tablinum_auth::Caller::new(ch, Bearer::new(cred, audience))
}

/// A raw tablet server client presenting the test cluster credential.
pub async fn raw_tserver(addr: &str) -> TabletServerClient<Transport> {
    raw_tserver_as(addr, Some(&secret().credential())).await
}

/// A raw tablet server client presenting `cred` (none: no credentials).
pub async fn raw_tserver_as(
    addr: &str,
    cred: Option<&Credential>,
) -> TabletServerClient<Transport> {
    TabletServerClient::new(transport(addr, cred, addr).await)
}

/// A raw manager client presenting `cred` (none: no credentials).
pub async fn raw_manager_as(addr: &str, cred: Option<&Credential>) -> ManagerClient<Transport> {
    ManagerClient::new(transport(addr, cred, tablinum_auth::proof::MANAGER_AUDIENCE).await)
}

/// A client of `addr` presenting `cred`.
pub fn client_as(addr: &str, cred: &Credential) -> Client {
    Client::connect_with(addr, ClientConfig::with_credential(Some(cred.clone()))).unwrap()
}

pub struct TestCluster {
    pub rt: tokio::runtime::Runtime,
    pub running: Option<Running>,
    pub client: Client,
    /// The bootstrap admin token.
    pub admin: Credential,
    /// Extra tablet servers (`add_tserver`).
    pub extra: Vec<Running>,
    dir: std::path::PathBuf,
}

impl TestCluster {
    /// Starts manager and tablet server in one process on free ports.
    pub fn start(dir: &Path, tweak: impl FnOnce(&mut TserverConfig)) -> TestCluster {
        Self::start_with(dir, |_| {}, tweak)
    }

    /// [`TestCluster::start`] with the manager's settings tweaked too.
    pub fn start_with(
        dir: &Path,
        tweak_manager: impl FnOnce(&mut ManagerConfig),
        tweak: impl FnOnce(&mut TserverConfig),
    ) -> TestCluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(1024)
            .enable_all()
            .build()
            .unwrap();
        let secret_file = dir.join("cluster.secret");
        tablinum_auth::files::write_secret_file(&secret_file, &secret().file_text()).unwrap();
        let m = ManagerConfig {
            listen: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            data: dir.join("manager"),
            storage: dir.join("storage"),
            heartbeat_timeout_ms: 2_000,
            cluster_secret_file: secret_file.clone(),
            admin_token_file: dir.join("admin.token"),
            ..ManagerConfig::default()
        };
        let mut m = m;
        tweak_manager(&mut m);
        let mut t = TserverConfig {
            storage: dir.join("storage"),
            heartbeat_interval_ms: 100,
            ..TserverConfig::default()
        };
        tweak(&mut t);
        let running = rt
            .block_on(tablinum_server::start(Some(m), Some(t)))
            .unwrap();
        let admin = tablinum_auth::files::load_token_file(&dir.join("admin.token")).unwrap();
        let client = client_as(&running.grpc.to_string(), &admin);
        TestCluster {
            rt,
            running: Some(running),
            client,
            admin,
            extra: Vec::new(),
            dir: dir.to_path_buf(),
        }
    }

    /// Starts another tablet server (its own sockets) reporting to this
    /// cluster's manager.
    pub fn add_tserver(&mut self, tweak: impl FnOnce(&mut TserverConfig)) {
        let mut t = TserverConfig {
            listen: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            manager: self.addr(),
            storage: self.dir.join("storage"),
            heartbeat_interval_ms: 100,
            cluster_secret_file: self.dir.join("cluster.secret"),
            ..TserverConfig::default()
        };
        tweak(&mut t);
        let r = self
            .rt
            .block_on(tablinum_server::start(None, Some(t)))
            .unwrap();
        self.extra.push(r);
    }

    /// Starts a scan server (its own sockets) reporting to this cluster's
    /// manager and reading its storage; returns its gRPC address.
    pub fn add_sserver(&mut self, tweak: impl FnOnce(&mut SserverConfig)) -> String {
        let mut s = SserverConfig {
            listen: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            manager: self.addr(),
            storage: self.dir.join("storage"),
            heartbeat_interval_ms: 100,
            cluster_secret_file: self.dir.join("cluster.secret"),
            ..SserverConfig::default()
        };
        tweak(&mut s);
        let r = self.rt.block_on(tablinum_server::start_sserver(s)).unwrap();
        let addr = r.grpc.to_string();
        self.extra.push(r);
        addr
    }

    /// A new client of this cluster with the admin token.
    pub fn new_client(&self) -> Client {
        client_as(&self.addr(), &self.admin)
    }

    pub fn addr(&self) -> String {
        self.running.as_ref().unwrap().grpc.to_string()
    }

    /// The tablet server of the first process.
    pub fn tserver(&self) -> &std::sync::Arc<tablinum_server::tserver::Tserver> {
        self.running
            .as_ref()
            .unwrap()
            .node
            .tserver
            .as_ref()
            .unwrap()
    }

    /// Waits (bounded) until every tablet of `table` is open on a server.
    pub fn wait_open(&self, table: &str, tablets: usize) {
        let t0 = Instant::now();
        loop {
            let hosted = self
                .tserver()
                .hosted()
                .iter()
                .filter(|h| h.0 == table)
                .count();
            if hosted == tablets {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "{table}: {hosted} of {tablets} tablets open after 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestCluster {
    fn drop(&mut self) {
        for r in std::mem::take(&mut self.extra) {
            self.rt.block_on(r.shutdown());
        }
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.shutdown());
        }
    }
}

/// splitmix64: keys spread over every tablet.
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = x;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Messages of `s` that arrive within `d`.
pub async fn drain_for<T>(s: &mut tonic::Streaming<T>, d: Duration) -> Vec<T> {
    let mut got = Vec::new();
    let deadline = tokio::time::Instant::now() + d;
    while let Ok(Ok(Some(b))) = tokio::time::timeout_at(deadline, s.message()).await {
        got.push(b);
    }
    got
}

/// A raw ScanMany stream: its request side and its answers.
pub type Many = (
    tokio::sync::mpsc::UnboundedSender<tablinum_proto::v1::ScanManyClientMessage>,
    tonic::Streaming<tablinum_proto::v1::ScanManyBatch>,
);

/// Opens a raw ScanMany stream of `scans` as the cluster member, or as
/// `cred` when given.
pub async fn open_many(
    addr: &str,
    cred: Option<&tablinum_auth::Credential>,
    scans: Vec<tablinum_proto::v1::ScanStart>,
) -> Result<Many, tonic::Status> {
    let mut c = match cred {
        Some(cred) => raw_tserver_as(addr, Some(cred)).await,
        None => raw_tserver(addr).await,
    };
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tx.send(tablinum_proto::v1::ScanManyClientMessage {
        msg: Some(tablinum_proto::v1::scan_many_client_message::Msg::Start(
            tablinum_proto::v1::ScanManyStart { scans },
        )),
    })
    .unwrap();
    let s = c
        .scan_many(tokio_stream::wrappers::UnboundedReceiverStream::new(rx))
        .await?
        .into_inner();
    Ok((tx, s))
}
