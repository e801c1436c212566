//! The local engine shell: a line protocol over a store in a local
//! directory (`tablinum shell --local`, `tablinum kv`).
//!
//! Owns parsing shell lines and printing results, in the cluster CLI's
//! formats (values raw, rows `key<TAB>value` through [`crate::output`],
//! "not found" on stderr with [`Outcome::NotFound`]). Every command maps to
//! one public engine call; the shell never reaches into engine internals
//! and never panics on bad input. Its default directory is its own
//! ([`LOCAL_DATA_DEFAULT`]), never the cluster's.

use std::io::Write;
use std::ops::Bound;
use std::path::Path;

use anyhow::Context;
use tablinum_engine::{Durability, Options, PutOptions, Store};

use crate::exit::usage;
use crate::output::{text_field, Field};
use crate::verbs::Outcome;

/// The local store's directory by default (`tablinum up` uses
/// `tablinum-data`; the two never share one).
pub const LOCAL_DATA_DEFAULT: &str = "tablinum-local";
/// Rows `scan` prints when no limit is given.
const SCAN_ROWS_DEFAULT: usize = 20;

/// The shell's commands, for `help` and completion.
pub const COMMANDS: &[&str] = &[
    "put", "get", "head", "delete", "scan", "index", "stats", "verify", "flush", "compact", "gc",
    "help", "quit",
];

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

/// Executes one command given as words (`tablinum kv`).
pub fn execute_words(
    store: &Store,
    words: &[String],
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    run(store, &words, out)
}

/// Executes one line of the shell.
pub fn execute_line(store: &Store, line: &str, out: &mut impl Write) -> anyhow::Result<Outcome> {
    let words: Vec<&str> = line.split_whitespace().collect();
    run(store, &words, out)
}

fn run(store: &Store, words: &[&str], out: &mut impl Write) -> anyhow::Result<Outcome> {
    let Some((&cmd, args)) = words.split_first() else {
        return Ok(Outcome::Done);
    };
    let need = |n: usize| -> anyhow::Result<()> {
        if args.len() < n {
            usage!("`{cmd}` needs {n} argument(s); type help");
        }
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
                    let Some((n, v)) = t.split_once(':') else {
                        usage!("idx= takes NAME:TERM");
                    };
                    opts.index_terms
                        .push((n.as_bytes().to_vec(), v.as_bytes().to_vec()));
                } else {
                    usage!("unknown put option `{extra}` (meta=M or idx=NAME:TERM)");
                }
            }
            let seq = store.put_with(args[0].as_bytes(), args[1].as_bytes(), &opts)?;
            writeln!(out, "ok seq={seq}")?;
        }
        "get" => {
            need(1)?;
            match store.get(args[0].as_bytes())? {
                Some(v) => {
                    out.write_all(&v)?;
                    writeln!(out)?;
                }
                None => return not_found(args[0]),
            }
        }
        "head" => {
            need(1)?;
            match store.head(args[0].as_bytes())? {
                Some(h) => {
                    writeln!(out, "seq={}", h.seq)?;
                    writeln!(out, "value_len={}", h.value_len)?;
                    writeln!(out, "value_hash={:016x}", h.value_hash)?;
                    writeln!(out, "metadata={}", text_field(Field::Bytes(&h.metadata)))?;
                    for (n, t) in &h.index_terms {
                        writeln!(
                            out,
                            "index {}={}",
                            text_field(Field::Bytes(n)),
                            text_field(Field::Bytes(t))
                        )?;
                    }
                }
                None => return not_found(args[0]),
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
                Some(l) => match l.parse() {
                    Ok(n) => n,
                    Err(_) => usage!("LIMIT must be a number, not `{l}`"),
                },
                None => SCAN_ROWS_DEFAULT,
            };
            let lo = start.map_or(Bound::Unbounded, Bound::Included);
            for row in store.scan_objects((lo, Bound::Unbounded))?.take(limit) {
                let (k, v) = row?;
                writeln!(
                    out,
                    "{}\t{}",
                    text_field(Field::Bytes(&k)),
                    text_field(Field::Bytes(&v))
                )?;
            }
        }
        "index" => {
            need(3)?;
            let limit = match args.get(3) {
                Some(l) => match l.parse() {
                    Ok(n) => n,
                    Err(_) => usage!("LIMIT must be a number, not `{l}`"),
                },
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
                    "{}\t{}",
                    text_field(Field::Bytes(&h.term.unwrap_or_default())),
                    text_field(Field::Bytes(&h.key))
                )?;
            }
        }
        "stats" => {
            let s = store.stats();
            let r = s.reads;
            let lines: [(&str, String); 28] = [
                ("last_seq", s.last_seq.to_string()),
                ("persisted_seq", s.persisted_seq.to_string()),
                ("tables_per_level", join(&s.tables_per_level)),
                ("bytes_per_level", join(&s.bytes_per_level)),
                ("journal_segments", s.journal_segments.to_string()),
                ("immutable_memtables", s.immutable_memtables.to_string()),
                ("compaction_debt_bytes", s.compaction_debt_bytes.to_string()),
                ("flushes", s.flushes.to_string()),
                ("compactions", s.compactions.to_string()),
                ("journal_compactions", s.journal_compactions.to_string()),
                (
                    "journal_bytes_reclaimed",
                    s.journal_bytes_reclaimed.to_string(),
                ),
                ("journal_segment_rolls", s.journal_segment_rolls.to_string()),
                (
                    "journal_segments_recycled",
                    s.journal_segments_recycled.to_string(),
                ),
                ("journal_syncs", s.journal_syncs.to_string()),
                ("stall_ms", s.stall_ms.to_string()),
                ("background_retries", s.background_retries.to_string()),
                (
                    "background_failing",
                    s.background_failing.unwrap_or_else(|| "-".into()),
                ),
                ("deletions_deferred", s.deletions_deferred.to_string()),
                ("memtable_bytes", s.memtable_bytes.to_string()),
                ("block_cache_bytes", s.block_cache_bytes.to_string()),
                ("block_cache_hits", r.block_cache_hits.to_string()),
                ("block_cache_misses", r.block_cache_misses.to_string()),
                ("block_read_bytes", r.block_read_bytes.to_string()),
                ("table_probes", r.table_probes.to_string()),
                ("bloom_negatives", r.bloom_negatives.to_string()),
                ("bloom_false_positives", r.bloom_false_positives.to_string()),
                ("value_reads", r.value_reads.to_string()),
                ("value_read_bytes", r.value_read_bytes.to_string()),
            ];
            for (k, v) in lines {
                writeln!(out, "{k}\t{v}")?;
            }
        }
        "verify" => {
            let r = store.verify()?;
            writeln!(
                out,
                "ok: {} tables, {} entries, {} journal segments, {} records checked",
                r.tables, r.entries, r.segments, r.records
            )?;
        }
        "flush" => {
            store.flush()?;
            writeln!(out, "ok")?;
        }
        "compact" => {
            store.compact_ledger()?;
            writeln!(out, "ok")?;
        }
        "gc" => {
            let r = store.compact_journal()?;
            let dropped = r.records_dropped.map_or_else(
                || "dead records skipped unread".to_string(),
                |n| format!("{n} dropped"),
            );
            writeln!(
                out,
                "ok: {} segments compacted, {} records relocated, {dropped}, {} -> {} bytes ({} read)",
                r.segments_compacted.len(),
                r.records_relocated,
                r.bytes_before,
                r.bytes_after,
                r.bytes_read
            )?;
        }
        other => usage!("unknown command `{other}`; type help"),
    }
    Ok(Outcome::Done)
}

fn not_found(key: &str) -> anyhow::Result<Outcome> {
    eprintln!("not found: {key}");
    Ok(Outcome::NotFound)
}

/// `1,2,3`.
fn join<T: ToString>(v: &[T]) -> String {
    v.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
