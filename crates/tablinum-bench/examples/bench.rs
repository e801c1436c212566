//! `cargo run -p tablinum-bench --example bench -- run|compare ...`: the bench
//! subcommands without the `tablinum` binary (handy while developing the harness).

use clap::Parser;

/// tablinum benchmark harness.
#[derive(Parser)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    cmd: tablinum_bench::cli::BenchCommand,
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = tablinum_bench::cli::execute(cli.cmd) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
