//! The `tablinum` binary. Argument parsing and wiring only; the logic lives
//! in the library crates (`tablinum-engine`, `tablinum-bench`).

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
    /// The benchmark harness: run workloads, compare runs, reproduce reports.
    #[command(subcommand)]
    Bench(tablinum_bench::cli::BenchCommand),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
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
        Command::Bench(cmd) => tablinum_bench::cli::execute(cmd)?,
    }
    Ok(())
}
