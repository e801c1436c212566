//! The `tablinum` binary. Argument parsing and wiring only; the logic lives
//! in the library crates (`tablinum-engine`, `tablinum-server`,
//! `tablinum-client`, and with the `bench` feature, on by default,
//! `tablinum-bench`). Built without `bench`, the binary carries no
//! benchmark harness (no plotters, indicatif or HDR histograms) and
//! `tablinum bench` fails naming the feature.

mod cluster;
mod shell;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// tablinum: a sorted key/value store for large values and scan-heavy reads.
#[derive(Debug, Parser)]
#[command(name = "tablinum", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start an embedded cluster (manager + tablet server) in this process
    /// on localhost and print its endpoints; runs until Ctrl-C.
    Up {
        /// Data directory: metadata in DIR/manager, tablets in DIR/storage.
        #[arg(long, default_value = "tablinum-data")]
        data: PathBuf,
        /// gRPC address.
        #[arg(long, default_value = cluster::UP_LISTEN_DEFAULT)]
        listen: String,
        /// HTTP address of the status page and /metrics.
        #[arg(long, default_value = cluster::UP_HTTP_DEFAULT)]
        http: String,
        /// Speak TLS only, with a certificate for localhost signed by a CA
        /// of its own (made at the first start in DIR/tls; clients pass
        /// `--ca DIR/tls/ca.pem`).
        #[arg(long)]
        tls: bool,
        /// Scan servers to start in the process (eventual reads).
        #[arg(long, default_value_t = 1)]
        sservers: usize,
    },
    /// Run the manager from a config file's [manager] section.
    Manager {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a tablet server from a config file's [tserver] section.
    Tserver {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Run a scan server (eventual reads; stateless) from a config file's
    /// [sserver] section.
    Sserver {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Create, drop, list tables; show a table's tablets.
    Table {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        #[command(subcommand)]
        cmd: cluster::TableCommand,
    },
    /// Put one object: `tablinum put TABLE KEY VALUE`.
    Put {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        /// Table name.
        table: String,
        /// Key.
        key: String,
        /// Value.
        value: String,
    },
    /// Get one object's value: `tablinum get TABLE KEY` (exit 1 when absent).
    Get {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        /// Table name.
        table: String,
        /// Key.
        key: String,
        #[command(flatten)]
        read: cluster::PointArgs,
    },
    /// Show one object's metadata without reading its value: `tablinum
    /// head TABLE KEY` (exit 1 when absent).
    Head {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        /// Table name.
        table: String,
        /// Key.
        key: String,
        #[command(flatten)]
        read: cluster::PointArgs,
    },
    /// Delete one object: `tablinum delete TABLE KEY`.
    Delete {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        /// Table name.
        table: String,
        /// Key.
        key: String,
    },
    /// Flush every tablet of a table (memtables to files, which publishes
    /// them): `tablinum flush TABLE`.
    Flush {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        /// Table name.
        table: String,
    },
    /// Scan a table (or one of its secondary indexes) across all tablets in
    /// key order with flow-controlled streams.
    Scan {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        #[command(flatten)]
        args: cluster::ScanArgs,
    },
    /// Live servers, tables and unassigned tablets.
    Status {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
    },
    /// Create, list and revoke client tokens (admin).
    Token {
        #[command(flatten)]
        cluster: cluster::ClusterArg,
        #[command(subcommand)]
        cmd: cluster::TokenCommand,
    },
    /// Open an embedded store and read commands (put, get, head, delete,
    /// scan, index, stats, verify, flush, compact, gc) from standard input.
    Shell {
        /// Store directory (created if missing).
        #[arg(long, default_value = "tablinum-data")]
        data: PathBuf,
        /// Acknowledge writes before fsync (fsync on segment roll and close).
        #[arg(long)]
        nosync: bool,
    },
    /// Run one shell command against an embedded store and exit, e.g.
    /// `tablinum kv --data DIR put k v`.
    Kv {
        /// Store directory (created if missing).
        #[arg(long, default_value = "tablinum-data")]
        data: PathBuf,
        /// Acknowledge writes before fsync.
        #[arg(long)]
        nosync: bool,
        /// The command and its arguments.
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
    },
    /// A Jepsen-style test: a manager and tablet servers as processes,
    /// concurrent clients, a nemesis (kills, pauses), a linearizability
    /// check per key and unavailability per fault kind. Exits 1 when the
    /// history is not linearizable or an acknowledged write was lost.
    Jepsen {
        /// Length of the history, s (at least 30 covers every fault once).
        #[arg(long, default_value_t = 32)]
        seconds: u64,
        /// Seed of the clients and the nemesis.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Client threads.
        #[arg(long, default_value_t = 6)]
        clients: usize,
        /// Registers (keys), two per tablet.
        #[arg(long, default_value_t = 10)]
        keys: usize,
        /// Tablet server processes.
        #[arg(long, default_value_t = 3)]
        tservers: usize,
        /// The manager's heartbeat timeout, ms.
        #[arg(long, default_value_t = 1500)]
        heartbeat_timeout_ms: u64,
        /// Working directory (cluster data and logs, history.jsonl, report.json).
        #[arg(long, default_value = "tablinum-jepsen")]
        out: PathBuf,
    },
    /// The benchmark harness: run workloads, compare runs, reproduce reports.
    #[cfg(feature = "bench")]
    #[command(subcommand)]
    Bench(tablinum_bench::cli::BenchCommand),
    /// The benchmark harness (not in this build: it was compiled without the
    /// `bench` feature).
    #[cfg(not(feature = "bench"))]
    Bench {
        /// Whatever was asked of it.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
        args: Vec<String>,
    },
}

/// What `tablinum bench` says in a build without the harness.
#[cfg(not(feature = "bench"))]
const NO_BENCH: &str = "`tablinum bench` is not in this build: tablinum-cli was compiled \
    without its `bench` feature (the benchmark harness). Rebuild with it, e.g. `cargo build \
    --release -p tablinum-cli --features bench` (it is on by default; \
    `--no-default-features` leaves it out)";

fn main() {
    let cli = Cli::parse();
    init_logging();
    if let Err(e) = run(cli) {
        // A closed output pipe (`tablinum status | head`) is not a failure.
        if e.chain().any(|c| {
            c.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
        }) {
            std::process::exit(0);
        }
        eprintln!("error: {e:#}");
        std::process::exit(2);
    }
}

/// Logs go to standard error through `tracing`: level from `RUST_LOG`
/// (default `info`), JSON lines when `TABLINUM_LOG_FORMAT=json`.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if std::env::var("TABLINUM_LOG_FORMAT").is_ok_and(|v| v == "json") {
        b.json().init();
    } else {
        b.init();
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Shell { data, nosync } => {
            let store = shell::open(&data, nosync)?;
            let stdin = std::io::stdin();
            let mut out = std::io::stdout();
            shell::repl(&store, stdin.lock(), &mut out)?;
            store.close().context("closing the store")?;
        }
        Command::Kv {
            data,
            nosync,
            words,
        } => {
            let store = shell::open(&data, nosync)?;
            let mut out = std::io::stdout();
            let ok = shell::execute_line(&store, &words.join(" "), &mut out)?;
            store.close().context("closing the store")?;
            if !ok {
                std::process::exit(1);
            }
        }
        #[cfg(feature = "bench")]
        Command::Bench(cmd) => tablinum_bench::cli::execute(cmd)?,
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => anyhow::bail!(NO_BENCH),
        Command::Jepsen {
            seconds,
            seed,
            clients,
            keys,
            tservers,
            heartbeat_timeout_ms,
            out,
        } => {
            if out.exists() {
                anyhow::bail!("{} exists; pass a new --out directory", out.display());
            }
            let cfg = tablinum_jepsen::RunConfig {
                bin: std::env::current_exe().context("finding this executable")?,
                dir: out.clone(),
                seconds,
                seed,
                clients,
                keys,
                tservers,
                heartbeat_timeout_ms,
            };
            eprintln!("jepsen: {seconds} s of history in {} ...", out.display());
            let report = tablinum_jepsen::run(&cfg).map_err(anyhow::Error::msg)?;
            std::fs::write(
                out.join("report.json"),
                serde_json::to_string_pretty(&report)?,
            )?;
            print!("{}", report.text());
            if !report.safe() {
                std::process::exit(1);
            }
        }
        Command::Up {
            data,
            listen,
            http,
            tls,
            sservers,
        } => cluster::up(data, listen, http, tls, sservers)?,
        Command::Manager { config } => cluster::role(config, true)?,
        Command::Tserver { config } => cluster::role(config, false)?,
        Command::Sserver { config } => cluster::sserver(config)?,
        Command::Table { cluster, cmd } => cluster::table(&cluster, cmd)?,
        Command::Token { cluster, cmd } => cluster::token(&cluster, cmd)?,
        Command::Put {
            cluster,
            table,
            key,
            value,
        } => cluster::put(&cluster, &table, &key, &value)?,
        Command::Get {
            cluster,
            table,
            key,
            read,
        } => {
            if !cluster::get(&cluster, &table, &key, &read)? {
                std::process::exit(1);
            }
        }
        Command::Head {
            cluster,
            table,
            key,
            read,
        } => {
            if !cluster::head(&cluster, &table, &key, &read)? {
                std::process::exit(1);
            }
        }
        Command::Delete {
            cluster,
            table,
            key,
        } => cluster::delete(&cluster, &table, &key)?,
        Command::Flush { cluster, table } => cluster::flush(&cluster, &table)?,
        Command::Scan { cluster, args } => cluster::scan(&cluster, args)?,
        Command::Status { cluster } => cluster::status(&cluster)?,
    }
    Ok(())
}
