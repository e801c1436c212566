//! The cluster commands of the binary: running the roles (`up`, `manager`,
//! `tserver`) and talking to a cluster (`table`, `put`, `get`, `scan`,
//! `status`). Argument handling and printing only.

use std::path::PathBuf;

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use tablinum_client::{Client, Durability, Query, Split, CLUSTER_ADDR_DEFAULT};
use tablinum_server::config::{MANAGER_HTTP_DEFAULT, MANAGER_LISTEN_DEFAULT};
use tablinum_stream::window::WindowMode;

/// Where the cluster is.
#[derive(Debug, Args)]
pub struct ClusterArg {
    /// The manager's gRPC address (default: the embedded cluster of `tablinum up`).
    #[arg(long, global = true, default_value = CLUSTER_ADDR_DEFAULT)]
    pub cluster: String,
}

/// `tablinum table ...`.
#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// Create a table split into tablets.
    Create {
        /// Table name (1..=128 bytes of A-Z a-z 0-9 _ . -).
        name: String,
        /// Number of tablets, split points spread evenly over the first two key bytes.
        #[arg(long, default_value_t = 1, conflicts_with = "split")]
        tablets: u32,
        /// Explicit split points, comma-separated (instead of --tablets).
        #[arg(long, value_delimiter = ',')]
        split: Vec<String>,
        /// Acknowledge writes before fsync.
        #[arg(long)]
        nosync: bool,
    },
    /// Drop a table and its data.
    Drop {
        /// Table name.
        name: String,
    },
    /// List tables.
    List,
    /// Show a table's tablets and their servers.
    Map {
        /// Table name.
        name: String,
    },
}

/// Runs `tablinum up`: manager and tablet server in this process until
/// Ctrl-C or SIGTERM.
pub fn up(data: PathBuf, listen: String, http: String) -> anyhow::Result<()> {
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let data = data.canonicalize().unwrap_or(data);
    run_roles(
        move || async move { tablinum_server::start_embedded(&data, &listen, &http).await },
        |r| {
            println!("tablinum up: cluster ready (manager + tablet server in one process)");
            println!("  grpc     {}", r.grpc);
            println!("  status   http://{}/", r.http);
            println!("  metrics  http://{}/metrics", r.http);
            println!("try: tablinum table create demo --tablets 4 && tablinum put demo k v && tablinum scan demo");
        },
    )
}

/// Runs `tablinum manager` / `tablinum tserver` from a config file.
pub fn role(config: PathBuf, manager: bool) -> anyhow::Result<()> {
    let cfg = tablinum_server::ConfigFile::load(&config).map_err(anyhow::Error::msg)?;
    let (m, t) = if manager {
        let Some(m) = cfg.manager else {
            bail!("config {} has no [manager] section", config.display());
        };
        (Some(m), None)
    } else {
        let Some(t) = cfg.tserver else {
            bail!("config {} has no [tserver] section", config.display());
        };
        (None, Some(t))
    };
    let what = if manager { "manager" } else { "tserver" };
    run_roles(
        move || async move { tablinum_server::start(m, t).await },
        |r| {
            println!("tablinum {what}: ready");
            println!("  grpc     {}", r.grpc);
            println!("  status   http://{}/", r.http);
            println!("  metrics  http://{}/metrics", r.http);
        },
    )
}

fn run_roles<F, Fut>(start: F, ready: impl FnOnce(&tablinum_server::Running)) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<tablinum_server::Running, String>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(1024)
        .thread_name("tablinum")
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let running = start().await.map_err(anyhow::Error::msg)?;
        ready(&running);
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        eprintln!("shutting down: closing tablets");
        running.shutdown().await;
        Ok(())
    })
}

fn connect(addr: &str) -> anyhow::Result<Client> {
    Client::connect(addr).map_err(|e| {
        if addr == CLUSTER_ADDR_DEFAULT {
            anyhow::anyhow!("{e}\nhint: start a cluster with `tablinum up`, or pass --cluster ADDR")
        } else {
            anyhow::anyhow!("{e}")
        }
    })
}

fn show(b: &[u8]) -> String {
    match std::str::from_utf8(b) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => format!(
            "0x{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

/// `tablinum table ...`.
pub fn table(cluster: &str, cmd: TableCommand) -> anyhow::Result<()> {
    let c = connect(cluster)?;
    match cmd {
        TableCommand::Create {
            name,
            tablets,
            split,
            nosync,
        } => {
            let s = if split.is_empty() {
                Split::Even(tablets)
            } else {
                Split::Points(split.into_iter().map(String::into_bytes).collect())
            };
            let d = if nosync {
                Durability::Nosync
            } else {
                Durability::Sync
            };
            let t = c.create_table(&name, s, d)?;
            println!(
                "created table {} (id {}) with {} tablets",
                t.name, t.id, t.tablets
            );
        }
        TableCommand::Drop { name } => {
            c.drop_table(&name)?;
            println!("dropped table {name}");
        }
        TableCommand::List => {
            for t in c.list_tables()? {
                let d = if t.durability == Durability::Nosync as i32 {
                    "nosync"
                } else {
                    "sync"
                };
                println!("{}\tid={}\ttablets={}\t{d}", t.name, t.id, t.tablets);
            }
        }
        TableCommand::Map { name } => {
            let loc = c.locations(&name, true)?;
            for t in &loc.tablets {
                let server = if t.server.is_empty() {
                    "(unassigned)"
                } else {
                    &t.server
                };
                println!(
                    "tablet {}\t[{}, {})\t{server}\t{} files",
                    t.id,
                    show(&t.start),
                    if t.end.is_empty() {
                        "end".into()
                    } else {
                        show(&t.end)
                    },
                    t.files.len()
                );
            }
        }
    }
    Ok(())
}

/// `tablinum put TABLE KEY VALUE`.
pub fn put(cluster: &str, table: &str, key: &str, value: &str) -> anyhow::Result<()> {
    let seq = connect(cluster)?.put(table, key.as_bytes(), value.as_bytes())?;
    println!("ok seq={seq}");
    Ok(())
}

/// `tablinum get TABLE KEY`; exit status 1 when absent.
pub fn get(cluster: &str, table: &str, key: &str) -> anyhow::Result<bool> {
    match connect(cluster)?.get(table, key.as_bytes())? {
        Some(v) => {
            println!("{}", show(&v));
            Ok(true)
        }
        None => {
            eprintln!("not found: {key}");
            Ok(false)
        }
    }
}

/// Options of `tablinum scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Table name.
    pub table: String,
    /// First key (inclusive).
    #[arg(long, default_value = "")]
    pub start: String,
    /// End key (exclusive).
    #[arg(long, default_value = "")]
    pub end: String,
    /// Rows to return (0: all).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,
    /// Rows to skip.
    #[arg(long, default_value_t = 0)]
    pub skip: u64,
    /// Scan this secondary index (rows are term, key).
    #[arg(long)]
    pub index: Option<String>,
    /// Unacknowledged batches per tablet: a number, or `adaptive`.
    #[arg(long, default_value = "adaptive", value_parser = WindowMode::parse)]
    pub stream_limit: WindowMode,
    /// Print keys only.
    #[arg(long)]
    pub keys_only: bool,
    /// Print the query's counters (rows sent, wasted, waits) to stderr.
    #[arg(long)]
    pub stats: bool,
}

/// `tablinum scan ...`.
pub fn scan(cluster: &str, a: ScanArgs) -> anyhow::Result<()> {
    let c = connect(cluster)?;
    let q = Query {
        table: a.table,
        start: a.start.into_bytes(),
        end: a.end.into_bytes(),
        index: a.index.map(String::into_bytes),
        skip: a.skip,
        limit: a.limit,
        stream_limit: a.stream_limit,
        batch_rows: 0,
        keys_only: a.keys_only,
    };
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut err = None;
    // A closed pipe (`| head`) stops the query: no tablet keeps streaming.
    let stats = c.query_until(&q, &mut |r| {
        use std::io::Write;
        let line = match (&r.term, a.keys_only) {
            (Some(t), _) => format!("{}\t{}", show(t), show(&r.key)),
            (None, true) => show(&r.key),
            (None, false) => format!("{}\t{}", show(&r.key), show(&r.value)),
        };
        match writeln!(out, "{line}") {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(e) => {
                err = Some(e);
                std::ops::ControlFlow::Break(())
            }
        }
    })?;
    drop(out);
    if let Some(e) = err {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if a.stats {
        eprintln!(
            "rows returned {} skipped {} sent {} wasted {} waits {} tablets {}",
            stats.rows_returned,
            stats.rows_skipped,
            stats.rows_sent,
            stats.rows_wasted,
            stats.waits,
            stats.tablets
        );
    }
    Ok(())
}

/// `tablinum status`.
pub fn status(cluster: &str) -> anyhow::Result<()> {
    let s = connect(cluster)?.status()?;
    println!("live tablet servers: {}", s.servers.len());
    for sv in &s.servers {
        println!(
            "  {}\t{}\ttablets={}\tlast heartbeat {} ms ago\thttp://{}/",
            sv.id, sv.address, sv.tablets, sv.last_heartbeat_ms, sv.http
        );
    }
    println!("tables: {}", s.tables.len());
    for t in &s.tables {
        println!("  {}\ttablets={}", t.name, t.tablets);
    }
    println!("unassigned tablets: {}", s.tablets_unassigned);
    Ok(())
}

/// Defaults shown in `--help` of `up`.
pub const UP_LISTEN_DEFAULT: &str = MANAGER_LISTEN_DEFAULT;
/// Default HTTP address of `up`.
pub const UP_HTTP_DEFAULT: &str = MANAGER_HTTP_DEFAULT;
