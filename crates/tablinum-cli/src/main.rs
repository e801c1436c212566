//! The `tablinum` binary. Argument parsing and wiring only; the logic lives
//! in the library crates (`tablinum-engine`, `tablinum-server`,
//! `tablinum-client`, and with the `bench` feature, on by default,
//! `tablinum-bench`). Built without `bench`, the binary carries no
//! benchmark harness (no plotters, indicatif or HDR histograms) and
//! `tablinum bench` fails naming the feature.
//!
//! With the `jemalloc` feature (on by default) the process allocates
//! through jemalloc: Rust code through `#[global_allocator]`, and C and C++
//! code (the RocksDB peer of the bench) through the unprefixed `malloc`
//! symbols it exports. Under a memory limit glibc malloc's per-thread
//! arenas kept ~100 MiB of freed memory that the page cache needed.

mod exit;
mod flows;
mod output;
mod remote;
mod repl;
mod roles;
mod shell;
mod topics;
mod transfer;
mod verbs;

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use remote::ClusterArg;
use verbs::{Outcome, Verb};

#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// A cluster command's arguments with where the cluster is.
#[derive(Debug, Args)]
struct Remote<T: Args> {
    #[command(flatten)]
    cluster: ClusterArg,
    #[command(flatten)]
    args: T,
}

/// tablinum: a sorted key/value store for large values and scan-heavy reads.
#[derive(Debug, Parser)]
#[command(name = "tablinum", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start an embedded cluster (manager, tablet server and scan servers)
    /// in this process on localhost and print its endpoints; runs until
    /// Ctrl-C. Data in ./tablinum-data by default.
    Up {
        /// Data directory: metadata in DIR/manager, tablets in DIR/storage.
        #[arg(long, default_value = "tablinum-data")]
        data: PathBuf,
        /// gRPC address.
        #[arg(long, default_value = roles::UP_LISTEN_DEFAULT)]
        listen: String,
        /// HTTP address of the status page and /metrics.
        #[arg(long, default_value = roles::UP_HTTP_DEFAULT)]
        http: String,
        /// Speak TLS only, with a certificate for localhost signed by a CA
        /// of its own (made at the first start in DIR/tls; clients pass
        /// `--ca DIR/tls/ca.pem`).
        #[arg(long)]
        tls: bool,
        /// Serve plaintext on a non-loopback address anyway (without
        /// `--tls`, client tokens cross the network in the clear; refused
        /// unless this is given).
        #[arg(long)]
        insecure: bool,
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
    /// Run a dataflow worker from a config file's [worker] section: it
    /// runs the flow tasks the manager leases to it (`tablinum flow
    /// submit`).
    Worker {
        /// TOML config file.
        #[arg(long)]
        config: PathBuf,
    },
    /// Create, drop, list tables; show a table's tablets.
    Table {
        #[command(flatten)]
        cluster: ClusterArg,
        #[command(subcommand)]
        cmd: verbs::TableCommand,
    },
    /// Put one object: `tablinum put TABLE KEY [VALUE]`; the value comes
    /// from VALUE, --file, or standard input.
    Put(Remote<verbs::PutArgs>),
    /// Get one object's value as raw bytes, or many keys' values as rows
    /// (exit 1 when any is absent).
    Get(Remote<verbs::GetArgs>),
    /// Show one object's metadata without reading its value (exit 1 when
    /// absent).
    Head(Remote<verbs::HeadArgs>),
    /// Delete one object: `tablinum delete TABLE KEY`.
    Delete(Remote<verbs::KeyArgs>),
    /// Flush every tablet of a table (memtables to files, which publishes
    /// them to scan servers).
    Flush(Remote<verbs::TableArg>),
    /// Scan a table (or one of its secondary indexes) across all tablets in
    /// key order with flow-controlled streams.
    Scan(Remote<verbs::ScanArgs>),
    /// Live servers, tables and unassigned tablets.
    Status(Remote<output::OutputArg>),
    /// Create, list and revoke client tokens (admin).
    Token {
        #[command(flatten)]
        cluster: ClusterArg,
        #[command(subcommand)]
        cmd: verbs::TokenCommand,
    },
    /// Load objects from a JSON-lines or CSV file (checked whole before
    /// anything is written; batched; progress on stderr).
    Import(Remote<transfer::ImportArgs>),
    /// Write a table's objects (or a key range) as JSON lines or CSV.
    Export(Remote<transfer::ExportArgs>),
    /// Check, run and validate dataflows (topics through operators into
    /// topics, tables and files, exactly once).
    Flow {
        #[command(flatten)]
        cluster: ClusterArg,
        #[command(subcommand)]
        cmd: flows::FlowCommand,
    },
    /// Create, produce to, consume from, list, describe and drop topics
    /// (partitioned, append-only logs).
    Topic {
        #[command(flatten)]
        cluster: ClusterArg,
        #[command(subcommand)]
        cmd: topics::TopicCommand,
    },
    /// An interactive shell on the cluster (line editing, history,
    /// completion; the same verbs as the one-shot commands). With --local
    /// or --data: the engine shell on a local store instead.
    Shell {
        #[command(flatten)]
        cluster: ClusterArg,
        /// Open a local engine store instead of talking to a cluster.
        #[arg(long)]
        local: bool,
        /// The local store's directory (created if missing; implies
        /// --local).
        #[arg(long)]
        data: Option<PathBuf>,
        /// Local store: acknowledge writes before fsync (fsync on segment
        /// roll and close).
        #[arg(long)]
        nosync: bool,
    },
    /// Run one engine-shell command against a local store and exit, e.g.
    /// `tablinum kv put k v` (exit 1 when a key is absent).
    Kv {
        /// Store directory (created if missing).
        #[arg(long, default_value = shell::LOCAL_DATA_DEFAULT)]
        data: PathBuf,
        /// Acknowledge writes before fsync.
        #[arg(long)]
        nosync: bool,
        /// The command and its arguments.
        #[arg(required = true, num_args = 1..)]
        words: Vec<String>,
    },
    /// Print a completion script: `tablinum completion bash > /etc/bash_completion.d/tablinum`.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// A Jepsen-style test: a manager and tablet servers as processes,
    /// concurrent clients, a nemesis (kills, pauses), a linearizability
    /// check per key and unavailability per fault kind. Exits 1 when the
    /// history is not linearizable or an acknowledged write was lost.
    Jepsen {
        /// Length of the history, s (at least 56 covers every fault once).
        #[arg(long, default_value_t = 56)]
        seconds: u64,
        /// Only these fault kinds, comma-separated (default: all):
        /// kill-tserver-restart, kill-tserver, pause-tserver, kill-manager,
        /// pause-manager, fsync-lost, fsync-fail, disk-full, slow-disk,
        /// partition-tserver.
        #[arg(long, value_delimiter = ',', value_parser = tablinum_jepsen::Fault::parse)]
        faults: Vec<tablinum_jepsen::Fault>,
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
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // Usage errors exit 2, help and --version 0 (clap's codes).
        Err(e) => e.exit(),
    };
    init_logging();
    let code = match run(cli) {
        Ok(Outcome::Done) => exit::Code::Ok,
        Ok(Outcome::NotFound) => exit::Code::NotFound,
        Err((e, cluster)) => report(&e, cluster.as_deref()),
    };
    std::process::exit(code as i32);
}

/// Prints an error (and a hint when one helps) and returns its exit code.
/// A closed output pipe (`tablinum scan t | head`) is not a failure.
fn report(e: &anyhow::Error, cluster: Option<&str>) -> exit::Code {
    if exit::is_broken_pipe(e) {
        return exit::Code::Ok;
    }
    let (code, hint) = exit::classify(e, cluster);
    // The causes on one line, each once, and never a backtrace, even with
    // RUST_BACKTRACE set: a user error is not a crash. Nor is a standard
    // error that cannot be written (a file on a full disk): `eprintln!`
    // would panic there, and the exit code must stay the error's.
    use std::io::Write as _;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "error: {}", exit::one_line(e));
    if let Some(h) = hint {
        let _ = writeln!(err, "hint: {h}");
    }
    code
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

/// The error of a command and the cluster address it used, if any.
type Failure = (anyhow::Error, Option<String>);

fn run(cli: Cli) -> Result<Outcome, Failure> {
    let (cluster, verb) = match cli.command {
        Command::Table { cluster, cmd } => (cluster, Verb::Table(cmd)),
        Command::Put(r) => (r.cluster, Verb::Put(r.args)),
        Command::Get(r) => (r.cluster, Verb::Get(r.args)),
        Command::Head(r) => (r.cluster, Verb::Head(r.args)),
        Command::Delete(r) => (r.cluster, Verb::Delete(r.args)),
        Command::Flush(r) => (r.cluster, Verb::Flush(r.args)),
        Command::Scan(r) => (r.cluster, Verb::Scan(r.args)),
        Command::Status(r) => (r.cluster, Verb::Status(r.args)),
        Command::Token { cluster, cmd } => (cluster, Verb::Token(cmd)),
        Command::Import(r) => (r.cluster, Verb::Import(r.args)),
        Command::Export(r) => (r.cluster, Verb::Export(r.args)),
        Command::Topic { cluster, cmd } => (cluster, Verb::Topic(cmd)),
        Command::Flow {
            cmd: flows::FlowCommand::Check { file },
            ..
        } => {
            // Offline: no cluster needed to check a file.
            let remote = remote::Resolved::offline();
            let mut session = verbs::Session::new(remote, false);
            return flows::run(&mut session, flows::FlowCommand::Check { file })
                .map(|_| Outcome::Done)
                .map_err(|e| (e, None));
        }
        Command::Flow { cluster, cmd } => (cluster, Verb::Flow(cmd)),
        Command::Shell {
            cluster,
            local,
            data,
            nosync,
        } if !local && data.is_none() => {
            if nosync {
                return Err((
                    anyhow::Error::new(exit::Usage(
                        "--nosync applies to the local engine shell (--local)".into(),
                    )),
                    None,
                ));
            }
            let remote = cluster.resolve().map_err(|e| (e, None))?;
            let addr = remote.cluster.clone();
            return repl::run(verbs::Session::new(remote, true))
                .map(|()| Outcome::Done)
                .map_err(|e| (e, Some(addr)));
        }
        other => return run_local(other).map_err(|e| (e, None)),
    };
    let remote = cluster.resolve().map_err(|e| (e, None))?;
    let addr = remote.cluster.clone();
    let mut session = verbs::Session::new(remote, false);
    verbs::run(&mut session, verb).map_err(|e| (e, Some(addr)))
}

/// The commands that do not talk to a cluster as a client.
fn run_local(command: Command) -> anyhow::Result<Outcome> {
    match command {
        Command::Shell { data, nosync, .. } => {
            let data = data.unwrap_or_else(|| PathBuf::from(shell::LOCAL_DATA_DEFAULT));
            let store = shell::open(&data, nosync)?;
            let res = repl::run_local(&store, &data);
            store.close().context("closing the store")?;
            res?;
        }
        Command::Kv {
            data,
            nosync,
            words,
        } => {
            let store = shell::open(&data, nosync)?;
            let mut out = std::io::stdout();
            let outcome = shell::execute_words(&store, &words, &mut out)?;
            store.close().context("closing the store")?;
            return Ok(outcome);
        }
        Command::Completion { shell } => {
            clap_complete::generate(
                shell,
                &mut Cli::command(),
                "tablinum",
                &mut std::io::stdout(),
            );
        }
        #[cfg(feature = "bench")]
        Command::Bench(cmd) => tablinum_bench::cli::execute(cmd)?,
        #[cfg(not(feature = "bench"))]
        Command::Bench { .. } => anyhow::bail!(NO_BENCH),
        Command::Jepsen {
            seconds,
            faults,
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
                faults,
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
            insecure,
            sservers,
        } => roles::up(data, listen, http, (tls, insecure), sservers)?,
        Command::Manager { config } => roles::role(config, true)?,
        Command::Tserver { config } => roles::role(config, false)?,
        Command::Sserver { config } => roles::sserver(config)?,
        Command::Worker { config } => roles::worker(config)?,
        Command::Table { .. }
        | Command::Put(_)
        | Command::Get(_)
        | Command::Head(_)
        | Command::Delete(_)
        | Command::Flush(_)
        | Command::Scan(_)
        | Command::Status(_)
        | Command::Token { .. }
        | Command::Import(_)
        | Command::Export(_)
        | Command::Topic { .. }
        | Command::Flow { .. } => unreachable!("cluster commands are run by `run`"),
    }
    Ok(Outcome::Done)
}
