//! The `cluster` target: tablinum's Rust client (`tablinum_client::Client`)
//! against a cluster, one table of its own.
//!
//! `--target cluster` starts an embedded cluster (`tablinum up`, see
//! [`crate::local_cluster`]) on free localhost ports with its data under the
//! run's data directory, and stops it on close; `--target cluster:ADDR` uses a
//! running cluster instead. Options follow the address or stand alone,
//! comma-separated: `cluster:tablets=8`, `cluster:127.0.0.1:7400,table=b2`.
//!
//! Owns only the mapping of the target trait onto the client: get, head,
//! put, delete to the tablet owning the key; scan to a coordinated query
//! from `start` with `limit` (every tablet from `start`'s on streams, merged
//! in key order). Durability is the table's (`sync` or `nosync` from the
//! run's fsync policy). It must never tune the cluster beyond the table it
//! creates: the run's cache budget is *not* applied (the tablet server uses
//! its own setting), and it must never drop a table it did not create.

use std::path::{Path, PathBuf};

use tablinum_client::{Client, ClientConfig, Durability, Error as ClientError, Query, Split};
use tablinum_stream::window::WindowMode;

use crate::local_cluster::LocalCluster;
use crate::target::{Target, TargetConfig, TargetError};

/// Tablets of the target's table unless `tablets=N` says otherwise.
pub const TABLETS_DEFAULT: u32 = 8;
/// Name of the target's table unless `table=NAME` says otherwise.
pub const TABLE_DEFAULT: &str = "bench";
/// Directory of the embedded cluster's data inside the run's data directory.
pub const CLUSTER_DATA_DIR: &str = "cluster";
/// The embedded cluster's log inside the run's data directory.
pub const CLUSTER_LOG: &str = "cluster.log";

/// What `cluster[:...]` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterSpec {
    /// A running cluster's address; `None`: start one.
    pub addr: Option<String>,
    /// Tablets of the table.
    pub tablets: u32,
    /// Table name.
    pub table: String,
    /// Window policy of scans.
    pub stream_limit: WindowMode,
    /// Rows per batch of scans (0: the client's default).
    pub batch_rows: u32,
    /// Start the cluster with TLS (`tablinum up --tls`).
    pub tls: bool,
}

impl Default for ClusterSpec {
    fn default() -> Self {
        ClusterSpec {
            addr: None,
            tablets: TABLETS_DEFAULT,
            table: TABLE_DEFAULT.to_string(),
            stream_limit: WindowMode::Adaptive,
            batch_rows: 0,
            tls: false,
        }
    }
}

impl ClusterSpec {
    /// Parses what follows `cluster:`: an optional address and `KEY=VALUE`
    /// options (`tablets`, `table`, `stream_limit`, `batch_rows`, `addr`),
    /// comma-separated.
    pub fn parse(text: &str) -> Result<ClusterSpec, TargetError> {
        let mut spec = ClusterSpec::default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((k, v)) = item.split_once('=') else {
                if spec.addr.is_some() {
                    return Err(TargetError(format!(
                        "cluster target: two addresses (`{}` and `{item}`)",
                        spec.addr.as_deref().unwrap_or_default()
                    )));
                }
                spec.addr = Some(item.to_string());
                continue;
            };
            let bad = |e: &dyn std::fmt::Display| TargetError(format!("cluster option `{k}`: {e}"));
            match k {
                "addr" => spec.addr = Some(v.to_string()),
                "tablets" => {
                    spec.tablets = v.parse().map_err(|e| bad(&e))?;
                    if spec.tablets == 0 || spec.tablets > tablinum_proto::TABLETS_PER_TABLE_MAX {
                        return Err(bad(&format!(
                            "{} is not in 1..={}",
                            spec.tablets,
                            tablinum_proto::TABLETS_PER_TABLE_MAX
                        )));
                    }
                }
                "table" => {
                    tablinum_proto::check_table_name(v).map_err(|e| bad(&e))?;
                    spec.table = v.to_string();
                }
                "stream_limit" => spec.stream_limit = WindowMode::parse(v).map_err(|e| bad(&e))?,
                "batch_rows" => {
                    spec.batch_rows = v.parse().map_err(|e| bad(&e))?;
                    if spec.batch_rows > tablinum_proto::BATCH_ROWS_MAX {
                        return Err(bad(&format!(
                            "{} is over {}",
                            spec.batch_rows,
                            tablinum_proto::BATCH_ROWS_MAX
                        )));
                    }
                }
                "tls" => {
                    spec.tls = match v {
                        "1" | "true" => true,
                        "0" | "false" => false,
                        _ => return Err(bad(&"is 1 or 0")),
                    }
                }
                _ => {
                    return Err(TargetError(format!(
                        "unknown cluster option `{k}` (known: addr, tablets, table, \
                         stream_limit, batch_rows, tls)"
                    )))
                }
            }
        }
        Ok(spec)
    }
}

/// The client and, unless an address was given, the cluster it started.
pub struct ClusterTarget {
    client: Client,
    spec: ClusterSpec,
    /// Declared after `client` so the client goes first when dropped.
    local: Option<LocalCluster>,
    local_data: Option<PathBuf>,
}

fn err(e: impl std::fmt::Display) -> TargetError {
    TargetError(e.to_string())
}

/// Bytes of the files under `dir` (0 for what cannot be read).
pub fn dir_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

impl ClusterTarget {
    /// The name `--target` uses.
    pub const NAME: &'static str = "cluster";

    /// Opens the target for `cluster` (`options` empty) or `cluster:OPTIONS`:
    /// starts a cluster unless an address is given, then creates the table.
    pub fn open(cfg: &TargetConfig, options: &str) -> Result<ClusterTarget, TargetError> {
        let spec = ClusterSpec::parse(options)?;
        if spec.tls && spec.addr.is_some() {
            return Err(TargetError(
                "cluster option `tls=1` starts a TLS cluster; it does not go with an address"
                    .into(),
            ));
        }
        std::fs::create_dir_all(&cfg.dir)
            .map_err(|e| TargetError(format!("create {}: {e}", cfg.dir.display())))?;
        let (local, local_data) = match &spec.addr {
            Some(_) => (None, None),
            None => {
                let program = std::env::current_exe()
                    .map_err(|e| TargetError(format!("cannot find the current executable: {e}")))?;
                let data = cfg.dir.join(CLUSTER_DATA_DIR);
                let c = LocalCluster::start(&program, &data, &cfg.dir.join(CLUSTER_LOG), spec.tls)
                    .map_err(err)?;
                (Some(c), Some(data))
            }
        };
        let addr = match (&spec.addr, &local) {
            (Some(a), _) => a.clone(),
            (None, Some(c)) => c.addr().to_string(),
            (None, None) => unreachable!("a cluster was started when no address was given"),
        };
        let credential = match &local {
            Some(c) => Some(c.credential().map_err(err)?),
            None => crate::local_cluster::credential_for(&addr).map_err(err)?,
        };
        let tls = match &local {
            Some(c) => c.client_tls().map_err(err)?,
            None => None,
        };
        let client = Client::connect_with(
            &addr,
            ClientConfig {
                tls,
                ..ClientConfig::with_credential(credential)
            },
        )
        .map_err(err)?;
        let durability = if cfg.sync {
            Durability::Sync
        } else {
            Durability::Nosync
        };
        match client.create_table(&spec.table, Split::Even(spec.tablets), durability) {
            Ok(_) => {}
            Err(ClientError::AlreadyExists(m)) => {
                return Err(TargetError(format!(
                    "table `{}` already exists on {addr} ({m}): drop it (`tablinum table drop {} \
                     --cluster {addr}`) or name another with `cluster:{addr},table=NAME`",
                    spec.table, spec.table
                )))
            }
            Err(e) => return Err(TargetError(format!("create table `{}`: {e}", spec.table))),
        }
        Ok(ClusterTarget {
            client,
            spec,
            local,
            local_data,
        })
    }

    /// The address of the cluster in use.
    pub fn addr(&self) -> &str {
        match (&self.spec.addr, &self.local) {
            (Some(a), _) => a,
            (None, Some(c)) => c.addr(),
            (None, None) => "",
        }
    }
}

impl Target for ClusterTarget {
    fn name(&self) -> &'static str {
        Self::NAME
    }

    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        self.client.get(&self.spec.table, key).map_err(err)
    }

    fn head(&self, key: &[u8]) -> Result<Option<u64>, TargetError> {
        Ok(self
            .client
            .head(&self.spec.table, key)
            .map_err(err)?
            .map(|h| h.value_len))
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), TargetError> {
        self.client
            .put(&self.spec.table, key, value)
            .map(|_| ())
            .map_err(err)
    }

    fn delete(&self, key: &[u8]) -> Result<(), TargetError> {
        self.client
            .delete(&self.spec.table, key)
            .map(|_| ())
            .map_err(err)
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<usize, TargetError> {
        let q = Query {
            start: start.to_vec(),
            limit: limit as u64,
            stream_limit: self.spec.stream_limit,
            batch_rows: self.spec.batch_rows,
            ..Query::new(self.spec.table.clone())
        };
        let stats = self
            .client
            .query(&q, &mut |row| {
                std::hint::black_box(row);
            })
            .map_err(err)?;
        Ok(usize::try_from(stats.rows_returned).unwrap_or(usize::MAX))
    }

    fn disk_bytes(&self) -> Option<u64> {
        self.local_data.as_deref().map(dir_bytes)
    }

    fn close(&self) -> Result<(), TargetError> {
        match &self.local {
            // The run's data directory (and the table in it) goes with the run.
            Some(c) => c.stop().map_err(err),
            // Someone else's cluster: leave it as it was.
            None => self.client.drop_table(&self.spec.table).map_err(err),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_and_addresses_are_parsed() {
        assert_eq!(
            ClusterSpec::parse("").unwrap_or_else(|e| panic!("{e}")),
            ClusterSpec::default()
        );
        let s =
            ClusterSpec::parse("127.0.0.1:7400,tablets=32,stream_limit=5,batch_rows=1,table=t1")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(s.addr.as_deref(), Some("127.0.0.1:7400"));
        assert_eq!(s.tablets, 32);
        assert_eq!(s.stream_limit, WindowMode::Fixed(5));
        assert_eq!(s.batch_rows, 1);
        assert_eq!(s.table, "t1");
        let s = ClusterSpec::parse("tablets=4").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((s.addr, s.tablets, s.tls), (None, 4, false));
        let s = ClusterSpec::parse("tls=1").unwrap_or_else(|e| panic!("{e}"));
        assert!(s.tls);
        for (bad, needle) in [
            ("tablets=0", "tablets"),
            ("tablets=x", "tablets"),
            ("stream_limit=0", "stream_limit"),
            ("table=a b", "table"),
            ("color=red", "unknown cluster option"),
            ("a:1,b:2", "two addresses"),
            ("tls=yes", "tls"),
        ] {
            match ClusterSpec::parse(bad) {
                Ok(s) => panic!("accepted {bad}: {s:?}"),
                Err(e) => assert!(e.0.contains(needle), "{needle} not in {e}"),
            }
        }
    }
}
