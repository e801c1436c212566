//! The cluster a scenario measures: one it starts (`tablinum up` as a child
//! process, [`crate::local_cluster`]) or a running one (`--cluster ADDR`).
//!
//! Owns the shared cluster arguments ([`ClusterArgs`]: `--cluster`, `--dir`,
//! `--keep-data`, `--tls`), starting the cluster with its data in
//! `OUT/cluster-data` and its output in `OUT/cluster.log`, the client
//! connection (credential and CA of a started cluster, else the user's), the
//! [`ClusterInfo`] recorded in `scenario.json`, and stopping it and removing
//! its data at the end. It must never change a cluster's settings, never
//! remove a directory it did not create or was not given with `--dir`, and
//! never leave a started cluster running (stopping is also what `Drop` of
//! [`LocalCluster`] does on early returns).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use tablinum_client::{Client, ClientConfig};

use super::preset::usage;
use crate::error::BenchError;
use crate::local_cluster::{credential_for, LocalCluster};

/// The started cluster's data, inside `--out` unless `--dir`.
pub const CLUSTER_DATA_DIR: &str = "cluster-data";
/// The started cluster's output, inside `--out`.
pub const CLUSTER_LOG: &str = "cluster.log";

/// Which cluster a scenario measures.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Data directory of the started cluster (default OUT/cluster-data;
    /// removed at the end unless --keep-data). Must be empty or absent.
    #[arg(long, conflicts_with = "cluster")]
    pub dir: Option<PathBuf>,
    /// Keep the started cluster's data directory.
    #[arg(long)]
    pub keep_data: bool,
    /// Use the running cluster at this gRPC address instead of starting one
    /// (the scenario's tables must not exist there; they are dropped after use).
    #[arg(long)]
    pub cluster: Option<String>,
    /// Start the cluster with TLS on every listener (`tablinum up --tls`),
    /// to measure what TLS costs.
    #[arg(long, conflicts_with = "cluster")]
    pub tls: bool,
}

/// Where the cluster was (`scenario.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// gRPC address.
    pub addr: String,
    /// Started by the scenario (`tablinum up`), else given with `--cluster`.
    pub started_here: bool,
    /// Data directory of a started cluster.
    pub data_dir: Option<PathBuf>,
    /// Log of a started cluster.
    pub log: Option<PathBuf>,
    /// The cluster speaks TLS (`--tls`).
    #[serde(default)]
    pub tls: bool,
}

impl ClusterInfo {
    /// One line for the README header.
    pub fn describe(&self) -> String {
        let path = |p: &Option<PathBuf>| {
            p.as_ref()
                .map_or_else(|| "?".into(), |d| d.display().to_string())
        };
        if self.started_here {
            format!(
                "`tablinum up{}` started by the scenario at {} (data {}, log {})",
                if self.tls { " --tls" } else { "" },
                self.addr,
                path(&self.data_dir),
                path(&self.log)
            )
        } else {
            format!("running cluster at {} (`--cluster`)", self.addr)
        }
    }
}

/// The cluster in use.
#[derive(Debug)]
pub enum ScenarioCluster {
    /// Started here; its data directory is removed at the end unless kept.
    Started {
        /// The child process.
        cluster: LocalCluster,
        /// Its data directory.
        data: PathBuf,
        /// `--keep-data`.
        keep_data: bool,
        /// `--tls`.
        tls: bool,
    },
    /// Someone else's (`--cluster ADDR`).
    Given {
        /// Its gRPC address.
        addr: String,
    },
}

impl ScenarioCluster {
    /// The cluster `args` ask for: the given one, or `program up` started
    /// with its data in `--dir` (else `out/cluster-data`, a stale one
    /// removed) and its output in `out/cluster.log`. `out` must exist.
    pub fn open(
        args: &ClusterArgs,
        out: &Path,
        program: &Path,
    ) -> Result<ScenarioCluster, BenchError> {
        if let Some(addr) = &args.cluster {
            return Ok(ScenarioCluster::Given { addr: addr.clone() });
        }
        let data = args
            .dir
            .clone()
            .unwrap_or_else(|| out.join(CLUSTER_DATA_DIR));
        if args.dir.is_none() && data.exists() {
            // Ours (`--out` holds no earlier scenario.json): a leftover.
            std::fs::remove_dir_all(&data)
                .map_err(|e| BenchError::io(&data, "remove stale cluster data", e))?;
        }
        if std::fs::read_dir(&data).is_ok_and(|mut d| d.next().is_some()) {
            return Err(usage(
                "--dir",
                format!(
                    "{} is not empty: the cluster needs a fresh directory",
                    data.display()
                ),
            ));
        }
        eprintln!(
            "starting the cluster (`{} up`, data in {})",
            program.display(),
            data.display()
        );
        let cluster = LocalCluster::start(program, &data, &out.join(CLUSTER_LOG), args.tls)?;
        Ok(ScenarioCluster::Started {
            cluster,
            data,
            keep_data: args.keep_data,
            tls: args.tls,
        })
    }

    /// The manager's gRPC address.
    pub fn addr(&self) -> &str {
        match self {
            ScenarioCluster::Started { cluster, .. } => cluster.addr(),
            ScenarioCluster::Given { addr } => addr,
        }
    }

    /// What `scenario.json` records about it.
    pub fn info(&self) -> ClusterInfo {
        match self {
            ScenarioCluster::Started {
                cluster, data, tls, ..
            } => ClusterInfo {
                addr: cluster.addr().to_string(),
                started_here: true,
                data_dir: Some(data.clone()),
                log: Some(cluster.log_path().to_path_buf()),
                tls: *tls,
            },
            ScenarioCluster::Given { addr } => ClusterInfo {
                addr: addr.clone(),
                started_here: false,
                data_dir: None,
                log: None,
                tls: false,
            },
        }
    }

    /// A client of it: the started cluster's admin token and CA, else
    /// `TABLINUM_TOKEN` or the user's credentials for the address.
    pub fn connect(&self) -> Result<Client, BenchError> {
        let (credential, tls) = match self {
            ScenarioCluster::Started { cluster, .. } => {
                (Some(cluster.credential()?), cluster.client_tls()?)
            }
            ScenarioCluster::Given { addr } => (credential_for(addr)?, None),
        };
        Client::connect_with(
            self.addr(),
            ClientConfig {
                tls,
                ..ClientConfig::with_credential(credential)
            },
        )
        .map_err(|e| BenchError::Cluster {
            action: "connect",
            reason: e.to_string(),
        })
    }

    /// Stops a started cluster and removes its data (unless kept); a given
    /// cluster is left alone.
    pub fn close(self) -> Result<(), BenchError> {
        let ScenarioCluster::Started {
            cluster,
            data,
            keep_data,
            ..
        } = self
        else {
            return Ok(());
        };
        let stopped = cluster.stop();
        if !keep_data && data.exists() {
            if let Err(e) = std::fs::remove_dir_all(&data) {
                eprintln!("warning: cannot remove {}: {e}", data.display());
            }
        }
        stopped
    }
}

/// Runs `f` against the cluster `args` ask for, and closes it afterwards
/// whether `f` succeeded or not (`f`'s error wins over a failed stop).
pub fn with_cluster<T>(
    args: &ClusterArgs,
    out: &Path,
    program: &Path,
    f: impl FnOnce(&ScenarioCluster) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let cluster = ScenarioCluster::open(args, out, program)?;
    let result = f(&cluster);
    let closed = cluster.close();
    let value = result?;
    closed?;
    Ok(value)
}
