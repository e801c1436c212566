//! The embedded engine shell: a line protocol over a local store.
//!
//! Owns parsing shell lines and printing results. Every command maps to one
//! public engine call; the shell never reaches into engine internals and
//! never panics on bad input (it prints the error and goes on).

use std::io::{BufRead, Write};
use std::ops::Bound;
use std::path::Path;

use anyhow::Context;
use tablinum_engine::{Durability, Options, PutOptions, Store};

/// Rows `scan` prints when no limit is given.
const SCAN_ROWS_DEFAULT: usize = 20;
/// Bytes of a value printed before it is elided.
const VALUE_PRINT_BYTES_MAX: usize = 200;

const HELP: &str = "commands:
  put KEY VALUE [meta=M] [idx=NAME:TERM ...]   write (terms replace the old ones)
  get KEY                                      read a value
  head KEY                                     read metadata only
  delete KEY                                   delete
  scan [START] [LIMIT]                         list keys and values from START
  index NAME TERM_FROM TERM_TO [LIMIT]         secondary-index range query
  stats | verify | flush | compact | gc        maintenance
  help | quit";

/// Opens the store the shell works on.
pub fn open(dir: &Path, nosync: bool) -> anyhow::Result<Store> {
    let opts = Options {
        durability: if nosync {
            Durability::NoSync
        } else {
            Durability::Sync
        },
        ..Options::default()
    };
    Store::open(dir, opts).with_context(|| format!("opening store {}", dir.display()))
}

fn show(v: &[u8]) -> String {
    let s = String::from_utf8_lossy(&v[..v.len().min(VALUE_PRINT_BYTES_MAX)]).to_string();
    if v.len() > VALUE_PRINT_BYTES_MAX {
        format!("{s}... ({} bytes)", v.len())
    } else {
        s
    }
}

/// Reads lines until EOF or `quit`, executing each.
pub fn repl(store: &Store, input: impl BufRead, out: &mut impl Write) -> anyhow::Result<()> {
    writeln!(out, "tablinum shell; type help")?;
    for line in input.lines() {
        let line = line?;
        if matches!(line.trim(), "quit" | "exit") {
            break;
        }
        execute_line(store, &line, out)?;
    }
    Ok(())
}

/// Executes one line; returns false when the command failed (the error is
/// printed).
pub fn execute_line(store: &Store, line: &str, out: &mut impl Write) -> anyhow::Result<bool> {
    match run(store, line, out) {
        Ok(()) => Ok(true),
        Err(e) => {
            writeln!(out, "error: {e:#}")?;
            Ok(false)
        }
    }
}

fn run(store: &Store, line: &str, out: &mut impl Write) -> anyhow::Result<()> {
    let words: Vec<&str> = line.split_whitespace().collect();
    let Some((&cmd, args)) = words.split_first() else {
        return Ok(());
    };
    let need = |n: usize| -> anyhow::Result<()> {
        anyhow::ensure!(args.len() >= n, "`{cmd}` needs {n} argument(s); type help");
        Ok(())
    };
    match cmd {
        "help" => writeln!(out, "{HELP}")?,
        "put" => {
            need(2)?;
            let mut opts = PutOptions::default();
            for extra in &args[2..] {
                if let Some(m) = extra.strip_prefix("meta=") {
                    opts.metadata = m.as_bytes().to_vec();
                } else if let Some(t) = extra.strip_prefix("idx=") {
                    let (n, v) = t.split_once(':').context("idx= takes NAME:TERM")?;
                    opts.index_terms
                        .push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
                } else {
                    anyhow::bail!("unknown put option `{extra}` (meta=M or idx=NAME:TERM)");
                }
            }
            let seq = store.put_with(args[0].as_bytes(), args[1].as_bytes(), &opts)?;
            writeln!(out, "ok seq={seq}")?;
        }
        "get" => {
            need(1)?;
            match store.get(args[0].as_bytes())? {
                Some(v) => writeln!(out, "{}", show(&v))?,
                None => writeln!(out, "(not found)")?,
            }
        }
        "head" => {
            need(1)?;
            match store.head(args[0].as_bytes())? {
                Some(h) => writeln!(
                    out,
                    "seq={} value_len={} value_hash={:016x} meta={} terms={}",
                    h.seq,
                    h.value_len,
                    h.value_hash,
                    show(&h.metadata),
                    h.index_terms
                        .iter()
                        .map(|(n, t)| format!("{}:{}", show(n), show(t)))
                        .collect::<Vec<_>>()
                        .join(",")
                )?,
                None => writeln!(out, "(not found)")?,
            }
        }
        "delete" | "del" => {
            need(1)?;
            let seq = store.delete(args[0].as_bytes())?;
            writeln!(out, "ok seq={seq}")?;
        }
        "scan" => {
            let start = args.first().map(|s| s.as_bytes());
            let limit = match args.get(1) {
                Some(l) => l.parse().context("LIMIT must be a number")?,
                None => SCAN_ROWS_DEFAULT,
            };
            let lo = start.map_or(Bound::Unbounded, Bound::Included);
            for row in store.scan_objects((lo, Bound::Unbounded))?.take(limit) {
                let (k, v) = row?;
                writeln!(out, "{} = {}", show(&k), show(&v))?;
            }
        }
        "index" => {
            need(3)?;
            let limit = match args.get(3) {
                Some(l) => l.parse().context("LIMIT must be a number")?,
                None => SCAN_ROWS_DEFAULT,
            };
            let hits = store.index_query(
                args[0].as_bytes(),
                (
                    Bound::Included(args[1].as_bytes()),
                    Bound::Included(args[2].as_bytes()),
                ),
                true,
                limit,
            )?;
            for h in hits {
                writeln!(
                    out,
                    "{} -> {}",
                    show(&h.term.unwrap_or_default()),
                    show(&h.key)
                )?;
            }
        }
        "stats" => writeln!(out, "{:#?}", store.stats())?,
        "verify" => writeln!(out, "{:?}", store.verify()?)?,
        "flush" => {
            store.flush()?;
            writeln!(out, "ok")?;
        }
        "compact" => {
            store.compact_ledger()?;
            writeln!(out, "ok")?;
        }
        "gc" => writeln!(out, "{:?}", store.compact_journal()?)?,
        other => anyhow::bail!("unknown command `{other}`; type help"),
    }
    Ok(())
}
