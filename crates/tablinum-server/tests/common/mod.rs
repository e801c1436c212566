//! A real cluster (manager + tablet server on loopback sockets) in the test
//! process, and a client for it.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use tablinum_client::Client;
use tablinum_server::{ManagerConfig, Running, TserverConfig};

pub struct TestCluster {
    pub rt: tokio::runtime::Runtime,
    pub running: Option<Running>,
    pub client: Client,
    /// Extra tablet servers (`add_tserver`).
    pub extra: Vec<Running>,
    dir: std::path::PathBuf,
}

impl TestCluster {
    /// Starts manager and tablet server in one process on free ports.
    pub fn start(dir: &Path, tweak: impl FnOnce(&mut TserverConfig)) -> TestCluster {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(1024)
            .enable_all()
            .build()
            .unwrap();
        let m = ManagerConfig {
            listen: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            data: dir.join("manager"),
            storage: dir.join("storage"),
            heartbeat_timeout_ms: 2_000,
        };
        let mut t = TserverConfig {
            storage: dir.join("storage"),
            heartbeat_interval_ms: 100,
            ..TserverConfig::default()
        };
        tweak(&mut t);
        let running = rt
            .block_on(tablinum_server::start(Some(m), Some(t)))
            .unwrap();
        let client = Client::connect(&running.grpc.to_string()).unwrap();
        TestCluster {
            rt,
            running: Some(running),
            client,
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
            ..TserverConfig::default()
        };
        tweak(&mut t);
        let r = self
            .rt
            .block_on(tablinum_server::start(None, Some(t)))
            .unwrap();
        self.extra.push(r);
    }

    pub fn addr(&self) -> String {
        self.running.as_ref().unwrap().grpc.to_string()
    }

    /// Waits (bounded) until every tablet of `table` is open on a server.
    pub fn wait_open(&self, table: &str, tablets: usize) {
        let t0 = Instant::now();
        loop {
            let hosted = self
                .running
                .as_ref()
                .unwrap()
                .node
                .tserver
                .as_ref()
                .unwrap()
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
