//! The cluster commands (`table`, `put`, `get`, `head`, `delete`, `flush`,
//! `scan`, `status`, `token`, `import`, `export`): their arguments and what
//! each does, shared unchanged by the one-shot CLI and the cluster shell.
//!
//! Owns argument checks and printing; every command is one or a few client
//! calls and never reaches past `tablinum-client`. Rows are printed through
//! [`crate::output`], so every listing takes `-o text|json|csv|tsv`. A
//! command returns [`Outcome::NotFound`] for an absent key (exit 1) and an
//! error otherwise; [`crate::exit`] maps errors to exit codes.

use std::io::{IsTerminal as _, Read as _, Write as _};
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use tablinum_client::{Client, Consistency, Durability, IndexTerm, Mutation, Query, Role, Split};
use tablinum_engine::options::{
    INDEX_NAME_BYTES_MAX, INDEX_TERM_BYTES_MAX, KEY_BYTES_MAX, METADATA_BYTES_MAX, VALUE_BYTES_MAX,
};
use tablinum_stream::window::WindowMode;

use crate::exit::usage;
use crate::output::{Field, Format, OutputArg, RowWriter};
use crate::remote::Resolved;

/// `writeln!` to standard output, returning its error (a closed pipe among
/// them) instead of panicking as `println!` does.
macro_rules! out {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// What a command found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done (and for `get`/`head`: found).
    Done,
    /// `get`/`head`: the key is absent.
    NotFound,
}

/// A cluster command: the same verbs in the one-shot CLI and the shell.
#[derive(Debug, Subcommand)]
pub enum Verb {
    /// Create, drop, list tables; show a table's tablets.
    #[command(subcommand)]
    Table(TableCommand),
    /// Put one object: `put TABLE KEY [VALUE]`; the value comes from
    /// VALUE, --file, or standard input.
    Put(PutArgs),
    /// Get one object's value as raw bytes, or many keys' values as rows
    /// (exit 1 when any is absent).
    Get(GetArgs),
    /// Show one object's metadata without reading its value (exit 1 when
    /// absent).
    Head(HeadArgs),
    /// Delete one object.
    Delete(KeyArgs),
    /// Flush every tablet of a table (memtables to files, which publishes
    /// them to scan servers).
    Flush(TableArg),
    /// Scan a table (or one of its secondary indexes) across all tablets in
    /// key order with flow-controlled streams.
    Scan(ScanArgs),
    /// Live servers, tables and unassigned tablets.
    Status(OutputArg),
    /// Create, list and revoke client tokens (admin).
    #[command(subcommand)]
    Token(TokenCommand),
    /// Load objects from a JSON-lines or CSV file (checked whole before
    /// anything is written; batched; progress on stderr).
    Import(crate::transfer::ImportArgs),
    /// Write a table's objects (or a key range) as JSON lines or CSV.
    Export(crate::transfer::ExportArgs),
    /// Create, produce to, consume from, list, describe and drop topics.
    #[command(subcommand)]
    Topic(crate::topics::TopicCommand),
    /// Check, run and validate dataflows.
    #[command(subcommand)]
    Flow(crate::flows::FlowCommand),
}

/// A connection to one cluster, opened on first use and kept (the shell
/// runs many commands on one).
pub struct Session {
    /// Where and as whom.
    pub remote: Resolved,
    client: Option<Client>,
    /// Running in the interactive shell (no value from standard input).
    pub interactive: bool,
}

impl Session {
    /// A session that connects when a command first needs the cluster.
    pub fn new(remote: Resolved, interactive: bool) -> Self {
        Session {
            remote,
            client: None,
            interactive,
        }
    }

    /// The client, connecting on first use.
    pub fn client(&mut self) -> anyhow::Result<&Client> {
        if self.client.is_none() {
            self.client = Some(self.remote.connect(None)?);
        }
        Ok(self.client.as_ref().expect("set above"))
    }

    /// Table names (for completion); empty when the cluster cannot say.
    pub fn table_names(&mut self) -> Vec<String> {
        match self.client().map(|c| c.list_tables()) {
            Ok(Ok(t)) => t.into_iter().map(|t| t.name).collect(),
            _ => Vec::new(),
        }
    }
}

/// Runs one verb.
pub fn run(s: &mut Session, verb: Verb) -> anyhow::Result<Outcome> {
    match verb {
        Verb::Table(cmd) => table(s, cmd)?,
        Verb::Put(a) => put(s, a)?,
        Verb::Get(a) => return get(s, a),
        Verb::Head(a) => return head(s, a),
        Verb::Delete(a) => {
            let seq = s.client()?.delete(&a.table, a.key.as_bytes())?;
            out!("ok seq={seq}");
        }
        Verb::Flush(a) => {
            let n = s.client()?.flush(&a.table)?;
            out!("flushed {n} tablets of {}", a.table);
        }
        Verb::Scan(a) => scan(s, a)?,
        Verb::Status(o) => status(s, o.format)?,
        Verb::Token(cmd) => token(s, cmd)?,
        Verb::Import(a) => crate::transfer::import(s, a)?,
        Verb::Export(a) => crate::transfer::export(s, a)?,
        Verb::Topic(cmd) => crate::topics::run(s, cmd)?,
        Verb::Flow(cmd) => {
            if !crate::flows::run(s, cmd)? {
                return Ok(Outcome::NotFound);
            }
        }
    }
    Ok(Outcome::Done)
}

/// `TABLE`.
#[derive(Debug, Args)]
pub struct TableArg {
    /// Table name.
    pub table: String,
}

/// `TABLE KEY`.
#[derive(Debug, Args)]
pub struct KeyArgs {
    /// Table name.
    pub table: String,
    /// Key.
    pub key: String,
}

/// `table ...`.
#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// Create a table split into tablets.
    Create {
        /// Table name (1..=128 bytes of A-Z a-z 0-9 _ . -).
        name: String,
        /// Number of tablets. Alone, its split points spread evenly over
        /// the first two key bytes: right for random or binary keys, but
        /// text keys mostly land in one tablet. For text keys give
        /// --split-sample FILE (or --split).
        #[arg(long, default_value_t = 1, conflicts_with = "split")]
        tablets: u32,
        /// Explicit split points, comma-separated (instead of --tablets).
        #[arg(long, value_delimiter = ',')]
        split: Vec<String>,
        /// A file of sample keys, one per line: the split points are the
        /// keys at every 1/N of the sorted sample, so each of the
        /// --tablets N gets an equal share of keys like these.
        #[arg(long, requires = "tablets", conflicts_with = "split")]
        split_sample: Option<PathBuf>,
        /// Acknowledge writes before fsync.
        #[arg(long)]
        nosync: bool,
    },
    /// Drop a table and delete its data (asks for its name unless --yes).
    Drop {
        /// Table name.
        #[arg(value_name = "NAME")]
        table: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// List tables.
    List(OutputArg),
    /// Show a table's tablets and their servers.
    Map {
        /// Table name.
        #[arg(value_name = "NAME")]
        table: String,
        #[command(flatten)]
        output: OutputArg,
    },
}

/// Keys in a --split-sample file at most.
const SPLIT_SAMPLE_KEYS_MAX: usize = 10_000_000;

/// Split points at every 1/`tablets` of the sorted, distinct sample keys
/// (fewer when the sample has fewer distinct keys). Pure.
pub fn split_points_from_sample(mut keys: Vec<Vec<u8>>, tablets: u32) -> Vec<Vec<u8>> {
    keys.sort_unstable();
    keys.dedup();
    let n = keys.len();
    let t = tablets.max(1) as usize;
    if n == 0 {
        return Vec::new();
    }
    let mut points: Vec<Vec<u8>> = (1..t).map(|i| keys[i * n / t].clone()).collect();
    points.dedup();
    // A split at the smallest sample key (or the empty key) would leave the
    // first tablet without any key like the sample's.
    points.retain(|p| !p.is_empty() && *p != keys[0]);
    points
}

fn read_split_sample(path: &std::path::Path, tablets: u32) -> anyhow::Result<Vec<Vec<u8>>> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let keys: Vec<Vec<u8>> = text
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l).to_vec())
        .filter(|l| !l.is_empty())
        .collect();
    if keys.len() > SPLIT_SAMPLE_KEYS_MAX {
        usage!(
            "--split-sample {} has {} keys; at most {SPLIT_SAMPLE_KEYS_MAX} are read",
            path.display(),
            keys.len()
        );
    }
    let points = split_points_from_sample(keys, tablets);
    if points.len() + 1 < tablets as usize {
        usage!(
            "--split-sample {} gives only {} distinct split points; {tablets} tablets need {}: \
             give more distinct keys or fewer --tablets",
            path.display(),
            points.len(),
            tablets - 1
        );
    }
    Ok(points)
}

fn table(s: &mut Session, cmd: TableCommand) -> anyhow::Result<()> {
    match cmd {
        TableCommand::Create {
            name,
            tablets,
            split,
            split_sample,
            nosync,
        } => {
            let sp = if let Some(f) = split_sample {
                Split::Points(read_split_sample(&f, tablets)?)
            } else if split.is_empty() {
                Split::Even(tablets)
            } else {
                Split::Points(split.into_iter().map(String::into_bytes).collect())
            };
            let d = if nosync {
                Durability::Nosync
            } else {
                Durability::Sync
            };
            let t = s.client()?.create_table(&name, sp, d)?;
            out!(
                "created table {} (id {}) with {} tablets",
                t.name,
                t.id,
                t.tablets
            );
        }
        TableCommand::Drop { table: name, yes } => {
            if !yes {
                confirm_drop(&name)?;
            }
            s.client()?.drop_table(&name)?;
            out!("dropped table {name}");
        }
        TableCommand::List(o) => {
            let tables = s.client()?.list_tables()?;
            let mut w = RowWriter::stdout(o.format, &["name", "id", "tablets", "durability"]);
            for t in &tables {
                let d = if t.durability == Durability::Nosync {
                    "nosync"
                } else {
                    "sync"
                };
                if o.format == Format::Text {
                    w.row(&[
                        Field::Text(&t.name),
                        Field::Text(&format!("id={}", t.id)),
                        Field::Text(&format!("tablets={}", t.tablets)),
                        Field::Text(d),
                    ])?;
                } else {
                    w.row(&[
                        Field::Text(&t.name),
                        Field::Num(t.id),
                        Field::Num(u64::from(t.tablets)),
                        Field::Text(d),
                    ])?;
                }
            }
            w.finish()?;
        }
        TableCommand::Map {
            table: name,
            output,
        } => {
            let loc = s.client()?.locations(&name, true)?;
            let mut w = RowWriter::stdout(
                output.format,
                &["tablet", "start", "end", "server", "files"],
            );
            for t in &loc.tablets {
                let server = if t.server.is_empty() {
                    "(unassigned)"
                } else {
                    &t.server
                };
                if output.format == Format::Text {
                    let end = if t.end.is_empty() {
                        "end".to_string()
                    } else {
                        tablinum_client::display_key(&t.end, "")
                    };
                    out!(
                        "tablet {}\t[{}, {end})\t{server}\t{} files",
                        t.id,
                        tablinum_client::display_key(&t.start, ""),
                        t.files.len()
                    );
                    continue;
                }
                w.row(&[
                    Field::Num(t.id),
                    Field::Bytes(&t.start),
                    Field::Bytes(&t.end),
                    Field::Text(server),
                    Field::Num(t.files.len() as u64),
                ])?;
            }
            w.finish()?;
        }
    }
    Ok(())
}

/// Asks for the table's name on the terminal; refuses when there is no
/// terminal to ask on.
fn confirm_drop(name: &str) -> anyhow::Result<()> {
    if !std::io::stdin().is_terminal() {
        usage!(
            "refusing to drop table {name} without confirmation: standard input is not a \
             terminal; pass --yes"
        );
    }
    eprint!("drop table {name} and delete all its data? type its name to confirm: ");
    let _ = std::io::stderr().flush();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line)?;
    if line.trim() != name {
        usage!("table {name} not dropped (the name typed did not match)");
    }
    Ok(())
}

/// `put TABLE KEY [VALUE]`.
#[derive(Debug, Args)]
pub struct PutArgs {
    /// Table name.
    pub table: String,
    /// Key.
    pub key: String,
    /// Value (default: --file, else standard input).
    #[arg(conflicts_with = "file")]
    pub value: Option<String>,
    /// Read the value from this file (any bytes, up to 64 MiB).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Metadata stored with the object (returned by head), up to 16 KiB.
    #[arg(long)]
    pub meta: Option<String>,
    /// A secondary-index term NAME=TERM (repeatable); the object's terms
    /// are replaced by these (none given: it has none).
    #[arg(long = "index", value_name = "NAME=TERM")]
    pub index: Vec<String>,
}

/// Parses `NAME=TERM` with the engine's limits.
pub fn parse_index_term(s: &str) -> anyhow::Result<IndexTerm> {
    let Some((n, t)) = s.split_once('=') else {
        usage!("--index {s}: expected NAME=TERM");
    };
    check_index_term(n.as_bytes(), t.as_bytes())
        .map_err(|m| crate::exit::Usage(format!("--index {s}: {m}")))?;
    Ok(IndexTerm {
        index: n.as_bytes().to_vec(),
        term: t.as_bytes().to_vec(),
    })
}

/// The engine's limits on an index term, checked before anything is sent.
pub fn check_index_term(name: &[u8], term: &[u8]) -> Result<(), String> {
    if name.is_empty() || name.len() > INDEX_NAME_BYTES_MAX {
        return Err(format!(
            "index name is {} bytes; 1..={INDEX_NAME_BYTES_MAX} allowed",
            name.len()
        ));
    }
    if term.len() > INDEX_TERM_BYTES_MAX {
        return Err(format!(
            "index term is {} bytes; at most {INDEX_TERM_BYTES_MAX} allowed",
            term.len()
        ));
    }
    Ok(())
}

/// The engine's limits on a key, value and metadata.
pub fn check_object(key: &[u8], value_len: usize, meta_len: usize) -> Result<(), String> {
    if key.is_empty() || key.len() > KEY_BYTES_MAX {
        return Err(format!(
            "key is {} bytes; 1..={KEY_BYTES_MAX} allowed",
            key.len()
        ));
    }
    if value_len > VALUE_BYTES_MAX {
        return Err(format!(
            "value is {value_len} bytes; at most {VALUE_BYTES_MAX} (64 MiB) allowed"
        ));
    }
    if meta_len > METADATA_BYTES_MAX {
        return Err(format!(
            "metadata is {meta_len} bytes; at most {METADATA_BYTES_MAX} (16 KiB) allowed"
        ));
    }
    Ok(())
}

/// Reads at most `max` bytes plus one (so a caller can tell "too long").
fn read_capped(r: impl std::io::Read, max: usize) -> std::io::Result<Vec<u8>> {
    let mut v = Vec::new();
    r.take(max as u64 + 1).read_to_end(&mut v)?;
    Ok(v)
}

fn put(s: &mut Session, a: PutArgs) -> anyhow::Result<()> {
    let value = match (&a.value, &a.file) {
        (Some(v), None) => v.as_bytes().to_vec(),
        (None, Some(f)) => {
            let file = std::fs::File::open(f).with_context(|| format!("--file {}", f.display()))?;
            read_capped(file, VALUE_BYTES_MAX)
                .with_context(|| format!("reading --file {}", f.display()))?
        }
        (None, None) => {
            if s.interactive || std::io::stdin().is_terminal() {
                usage!("put needs a value: give VALUE, --file FILE, or pipe it on standard input");
            }
            read_capped(std::io::stdin().lock(), VALUE_BYTES_MAX)
                .context("reading the value from standard input")?
        }
        (Some(_), Some(_)) => usage!("give VALUE or --file, not both"),
    };
    let meta = a.meta.unwrap_or_default().into_bytes();
    if let Err(m) = check_object(a.key.as_bytes(), value.len(), meta.len()) {
        usage!("{m}");
    }
    let index_terms = a
        .index
        .iter()
        .map(|t| parse_index_term(t))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let seq = s.client()?.write(
        &a.table,
        vec![Mutation {
            key: a.key.into_bytes(),
            value,
            delete: false,
            metadata: meta,
            index_terms,
        }],
    )?;
    out!("ok seq={seq}");
    Ok(())
}

/// `get TABLE KEY`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Table name.
    pub table: String,
    /// Keys: one prints its value as raw bytes; more (or `--keys-from`)
    /// read them all in one call per server and print a row per key
    /// (key, found, value) in the order given.
    #[arg(required_unless_present = "keys_from")]
    pub keys: Vec<String>,
    /// Read the keys from this file, one per line (`-`: standard input),
    /// after any given as arguments.
    #[arg(long, value_name = "FILE")]
    pub keys_from: Option<PathBuf>,
    /// Write the value to this file instead of standard output (one key
    /// only).
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    #[command(flatten)]
    pub read: PointArgs,
    #[command(flatten)]
    pub output: OutputArg,
}

/// Most keys `get --keys-from` reads from one file.
const GET_KEYS_MAX: usize = 1_000_000;

fn get(s: &mut Session, mut a: GetArgs) -> anyhow::Result<Outcome> {
    if let Some(path) = &a.keys_from {
        let text = if path.as_os_str() == "-" {
            std::io::read_to_string(std::io::stdin()).context("reading keys from standard input")?
        } else {
            std::fs::read_to_string(path)
                .with_context(|| format!("reading --keys-from {}", path.display()))?
        };
        a.keys
            .extend(text.lines().filter(|l| !l.is_empty()).map(str::to_string));
        anyhow::ensure!(
            a.keys.len() <= GET_KEYS_MAX,
            "--keys-from names {} keys; at most {GET_KEYS_MAX} are read at once",
            a.keys.len()
        );
    }
    if a.keys.len() != 1 || a.keys_from.is_some() {
        return get_many(s, &a);
    }
    let key = &a.keys[0];
    let (c, consistency) = a.read.read.open(s)?;
    let read = c.get_with(&a.table, key.as_bytes(), &consistency)?;
    let Some(v) = a.read.found(key, read) else {
        return Ok(Outcome::NotFound);
    };
    match &a.file {
        Some(f) => {
            std::fs::write(f, &v).with_context(|| format!("writing --file {}", f.display()))?;
            eprintln!("wrote {} bytes to {}", v.len(), f.display());
        }
        None => {
            let mut o = std::io::stdout().lock();
            o.write_all(&v)?;
            // The bytes exactly, unless a person is reading them.
            if (s.interactive || o.is_terminal()) && !v.ends_with(b"\n") {
                o.write_all(b"\n")?;
            }
            o.flush()?;
        }
    }
    Ok(Outcome::Done)
}

/// `get TABLE K1 K2 …`: every key in one `GetMany` per server, a row per
/// key in the order given; exit 1 when any key is absent or failed.
fn get_many(s: &mut Session, a: &GetArgs) -> anyhow::Result<Outcome> {
    anyhow::ensure!(
        a.file.is_none(),
        "--file takes one key; {} were given",
        a.keys.len()
    );
    if a.read.read.consistency != "immediate" {
        usage!(
            "reading many keys at once is done on tablet servers: use --consistency \
             immediate, or one key per call"
        );
    }
    let (c, _) = a.read.read.open(s)?;
    let keys: Vec<Vec<u8>> = a.keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    let reads = c.get_many(&a.table, &keys)?;
    let mut w = RowWriter::stdout(a.output.format, &["key", "found", "value"]);
    let mut all = true;
    for (k, r) in keys.iter().zip(&reads) {
        match r {
            tablinum_client::KeyRead::Found(v) => {
                w.row(&[Field::Bytes(k), Field::Text("yes"), Field::Bytes(v)])?
            }
            tablinum_client::KeyRead::Absent => {
                all = false;
                w.row(&[Field::Bytes(k), Field::Text("no"), Field::Bytes(b"")])?
            }
            tablinum_client::KeyRead::Failed(e) => {
                all = false;
                eprintln!("{}: {e}", crate::output::escape(k));
                w.row(&[Field::Bytes(k), Field::Text("error"), Field::Bytes(b"")])?
            }
        }
    }
    w.finish()?;
    Ok(if all {
        Outcome::Done
    } else {
        Outcome::NotFound
    })
}

/// `head TABLE KEY`.
#[derive(Debug, Args)]
pub struct HeadArgs {
    /// Table name.
    pub table: String,
    /// Key.
    pub key: String,
    #[command(flatten)]
    pub read: PointArgs,
    #[command(flatten)]
    pub output: OutputArg,
}

fn head(s: &mut Session, a: HeadArgs) -> anyhow::Result<Outcome> {
    let (c, consistency) = a.read.read.open(s)?;
    let read = c.head_with(&a.table, a.key.as_bytes(), &consistency)?;
    let Some(h) = a.read.found(&a.key, read) else {
        return Ok(Outcome::NotFound);
    };
    let hash = format!("{:016x}", h.value_hash);
    match a.output.format {
        Format::Text => {
            out!("seq={}", h.seq);
            out!("value_len={}", h.value_len);
            out!("value_hash={hash}");
            out!("metadata={}", tablinum_client::display_key(&h.metadata, ""));
            for t in &h.index_terms {
                out!(
                    "index {}={}",
                    tablinum_client::display_key(&t.index, ""),
                    tablinum_client::display_key(&t.term, "")
                );
            }
        }
        Format::Json => {
            let mut o = serde_json::Map::new();
            o.insert("key".into(), a.key.clone().into());
            o.insert("seq".into(), h.seq.into());
            o.insert("value_len".into(), h.value_len.into());
            o.insert("value_hash".into(), hash.into());
            crate::output::put_json(&mut o, "meta", Field::Bytes(&h.metadata));
            o.insert("index".into(), index_json(&h.index_terms));
            out!("{}", serde_json::Value::Object(o));
        }
        f => {
            let terms: Vec<u8> = h
                .index_terms
                .iter()
                .map(|t| [t.index.as_slice(), b"=", t.term.as_slice()].concat())
                .collect::<Vec<_>>()
                .join(&b';');
            let mut w = RowWriter::stdout(
                f,
                &["key", "seq", "value_len", "value_hash", "meta", "index"],
            );
            w.row(&[
                Field::Text(&a.key),
                Field::Num(h.seq),
                Field::Num(h.value_len),
                Field::Text(&hash),
                Field::Bytes(&h.metadata),
                Field::Bytes(&terms),
            ])?;
            w.finish()?;
        }
    }
    Ok(Outcome::Done)
}

/// Index terms as a JSON array of `{"name", "term"}` (or `_b64` fields).
pub fn index_json(terms: &[IndexTerm]) -> serde_json::Value {
    terms
        .iter()
        .map(|t| {
            let mut o = serde_json::Map::new();
            crate::output::put_json(&mut o, "name", Field::Bytes(&t.index));
            crate::output::put_json(&mut o, "term", Field::Bytes(&t.term));
            serde_json::Value::Object(o)
        })
        .collect::<Vec<_>>()
        .into()
}

/// Options of `get` and `head`.
#[derive(Debug, Args)]
pub struct PointArgs {
    #[command(flatten)]
    pub read: ReadArgs,
    /// Print which server answered, attempts, busy answers and hedges to
    /// stderr.
    #[arg(long)]
    pub stats: bool,
}

impl PointArgs {
    /// What a point read found: prints its stats when asked and "not
    /// found" on stderr when the key is absent.
    fn found<T>(
        &self,
        key: &str,
        (v, stats): (Option<T>, tablinum_client::ReadStats),
    ) -> Option<T> {
        if self.stats {
            print_read_stats(&stats);
        }
        if v.is_none() {
            eprintln!("not found: {key}");
        }
        v
    }
}

/// Where a read goes: `--consistency` and the dispatcher's options.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// `immediate` (tablet servers: every acknowledged write) or
    /// `eventual` (scan servers: what tablet servers last flushed; see ARCHITECTURE.md for the bound).
    #[arg(long, default_value = "immediate", value_parser = ["immediate", "eventual"])]
    pub consistency: String,
    /// Eventual reads: a busy timeout for every attempt instead of the
    /// profile's, ms (1..=3600000).
    #[arg(long)]
    pub busy_timeout_ms: Option<u64>,
    /// Eventual reads: the dispatcher profile (default: the file's, or the
    /// built-in default).
    #[arg(long)]
    pub profile: Option<String>,
    /// Eventual reads: a TOML file of dispatcher profiles (docs/dispatcher.md).
    #[arg(long)]
    pub dispatcher: Option<PathBuf>,
}

impl ReadArgs {
    /// The client (with the dispatcher file, if any: a client of its own)
    /// and the consistency, checked before anything is read.
    fn open<'s>(&self, s: &'s mut Session) -> anyhow::Result<(ClientRef<'s>, Consistency)> {
        let eventual = self.consistency == "eventual";
        if !eventual
            && (self.busy_timeout_ms.is_some()
                || self.profile.is_some()
                || self.dispatcher.is_some())
        {
            usage!("--busy-timeout-ms, --profile and --dispatcher apply to --consistency eventual only");
        }
        let c = match &self.dispatcher {
            Some(f) => {
                let p = tablinum_client::Profiles::load(f).map_err(|e| {
                    crate::exit::Usage(format!("--dispatcher {}: {e}", f.display()))
                })?;
                ClientRef::Own(s.remote.connect(Some(std::sync::Arc::new(p)))?)
            }
            None => ClientRef::Shared(s.client()?),
        };
        if !eventual {
            return Ok((c, Consistency::Immediate));
        }
        // Check the profile before any tablet is touched.
        if let Err(e) = c.as_async().profile(self.profile.as_deref()) {
            usage!("--profile: {e}");
        }
        let consistency = Consistency::Eventual {
            profile: self.profile.clone(),
            busy_timeout_ms: self.busy_timeout_ms,
        };
        Ok((c, consistency))
    }
}

/// The session's client, or one of a command's own.
enum ClientRef<'s> {
    Shared(&'s Client),
    Own(Client),
}

impl std::ops::Deref for ClientRef<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        match self {
            ClientRef::Shared(c) => c,
            ClientRef::Own(c) => c,
        }
    }
}

/// Prints what a point read did to stderr.
fn print_read_stats(s: &tablinum_client::ReadStats) {
    let plan = s
        .plan
        .map_or_else(|| "tablet server".to_string(), |p| format!("plan {p}"));
    eprintln!(
        "served by {} ({plan}) attempts {} busy {} hedges {} hedge won {}",
        s.server, s.attempts, s.busy_answers, s.hedges, s.hedge_won
    );
}

/// Options of `scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Table name.
    pub table: String,
    /// First key (inclusive); with --index, first term.
    #[arg(long, default_value = "")]
    pub start: String,
    /// End key (exclusive); with --index, end term.
    #[arg(long, default_value = "")]
    pub end: String,
    /// Rows to return (0: all).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,
    /// Rows to skip.
    #[arg(long, default_value_t = 0)]
    pub skip: u64,
    /// Scan this secondary index (rows are term, key); terms are written
    /// with `put ... --index NAME=TERM`.
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
    #[command(flatten)]
    pub read: ReadArgs,
    /// Only rows whose key or value contains STR (run on the servers).
    #[arg(long)]
    pub grep: Option<String>,
    /// Only rows whose key starts with P (run on the servers).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Print only the number of matching rows.
    #[arg(long)]
    pub count: bool,
    #[command(flatten)]
    pub output: OutputArg,
}

fn scan(s: &mut Session, a: ScanArgs) -> anyhow::Result<()> {
    let eventual = a.read.consistency == "eventual";
    let (c, consistency) = a.read.open(s)?;
    let index = a.index.clone();
    let q = Query {
        table: a.table.clone(),
        start: a.start.into_bytes(),
        end: a.end.into_bytes(),
        index: a.index.map(String::into_bytes),
        skip: a.skip,
        limit: a.limit,
        stream_limit: a.stream_limit,
        batch_rows: 0,
        keys_only: a.keys_only,
        consistency,
        filter: (a.grep.is_some() || a.prefix.is_some() || a.count).then(|| {
            tablinum_client::Filter {
                grep: a.grep.clone().unwrap_or_default().into_bytes(),
                key_prefix: a.prefix.clone().unwrap_or_default().into_bytes(),
                count_only: a.count,
            }
        }),
        window_bytes_max: 0,
    };
    let columns: &[&'static str] = match (&index, a.keys_only) {
        (Some(_), _) => &["term", "key"],
        (None, true) => &["key"],
        (None, false) => &["key", "value"],
    };
    let mut w = RowWriter::stdout(a.output.format, columns);
    let mut err = None;
    // A closed pipe (`| head`) stops the query: no tablet keeps streaming.
    let stats = c.query_until(&q, &mut |r| {
        if a.count {
            return std::ops::ControlFlow::Continue(());
        }
        let res = match (&r.term, a.keys_only) {
            (Some(t), _) => w.row(&[Field::Bytes(t), Field::Bytes(&r.key)]),
            (None, true) => w.row(&[Field::Bytes(&r.key)]),
            (None, false) => w.row(&[Field::Bytes(&r.key), Field::Bytes(&r.value)]),
        };
        match res {
            Ok(()) => std::ops::ControlFlow::Continue(()),
            Err(e) => {
                err = Some(e);
                std::ops::ControlFlow::Break(())
            }
        }
    })?;
    if let Some(e) = err {
        return Err(e.into());
    }
    if a.count {
        out!("{}", stats.rows_matched);
    } else {
        w.finish()?;
    }
    if let (Some(ix), 0) = (&index, stats.rows_returned) {
        eprintln!(
            "no rows: index `{ix}` of table {} has no terms in this range (terms are written \
             with `tablinum put {} KEY VALUE --index {ix}=TERM`)",
            a.table, a.table
        );
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
        eprintln!(
            "rows examined on the servers {} matched {}",
            stats.rows_examined, stats.rows_matched
        );
        if eventual {
            eprintln!(
                "attempts {} busy {} served by plan {:?} by tablet servers {}",
                stats.attempts, stats.busy_answers, stats.served_by_plan, stats.served_by_tserver
            );
        }
    }
    Ok(())
}

fn status(s: &mut Session, format: Format) -> anyhow::Result<()> {
    let st = s.client()?.status()?;
    if format != Format::Text {
        let mut w = RowWriter::stdout(
            format,
            &[
                "role",
                "id",
                "address",
                "http",
                "tablets",
                "group",
                "queue",
                "busy",
                "last_heartbeat_ms",
            ],
        );
        for sv in &st.servers {
            w.row(&[
                Field::Text("tserver"),
                Field::Text(&sv.id),
                Field::Text(&sv.address),
                Field::Text(&sv.http),
                Field::Num(u64::from(sv.tablets)),
                Field::Text(""),
                Field::Num(0),
                Field::Num(0),
                Field::Num(sv.last_heartbeat_ms),
            ])?;
        }
        for sv in &st.scan_servers {
            w.row(&[
                Field::Text("sserver"),
                Field::Text(&sv.id),
                Field::Text(&sv.address),
                Field::Text(&sv.http),
                Field::Num(0),
                Field::Text(&sv.group),
                Field::Num(u64::from(sv.queue_depth)),
                Field::Num(sv.busy_total),
                Field::Num(sv.last_heartbeat_ms),
            ])?;
        }
        w.finish()?;
        return Ok(());
    }
    out!("live tablet servers: {}", st.servers.len());
    for sv in &st.servers {
        out!(
            "  {}\t{}\ttablets={}\tlast heartbeat {} ms ago\thttp://{}/",
            sv.id,
            sv.address,
            sv.tablets,
            sv.last_heartbeat_ms,
            sv.http
        );
        for f in &sv.faults {
            out!(
                "    tablet {} of {}: {}{}: {}",
                f.tablet_id,
                if f.table.is_empty() { "?" } else { &f.table },
                f.condition,
                if f.io_stalled_ms > 0 {
                    format!(" (journal I/O in flight {} ms)", f.io_stalled_ms)
                } else {
                    String::new()
                },
                f.reason
            );
        }
    }
    let faults: usize = st.servers.iter().map(|s| s.faults.len()).sum();
    if faults > 0 {
        out!("tablets not serving normally: {faults}");
    }
    out!("tables: {}", st.tables.len());
    for t in &st.tables {
        out!("  {}\ttablets={}", t.name, t.tablets);
    }
    out!("unassigned tablets: {}", st.tablets_unassigned);
    out!("live scan servers: {}", st.scan_servers.len());
    for sv in &st.scan_servers {
        out!(
            "  {}\t{}\tgroup={}\tqueue={}\trunning={}\tbusy={}\tbatches={}\tserved by attempt={}\tby plan={}\tlast heartbeat {} ms ago\thttp://{}/",
            sv.id,
            sv.address,
            sv.group,
            sv.queue_depth,
            sv.scans_running,
            sv.busy_total,
            sv.batches_total,
            slash(&sv.served_by_attempt),
            slash(&sv.served_by_plan),
            sv.last_heartbeat_ms,
            sv.http
        );
    }
    Ok(())
}

/// Counts as `12/3/0/0`.
fn slash(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
}

/// `token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (shown once; the cluster keeps only its hash).
    Create {
        /// What it may do: read, write or admin.
        #[arg(long, value_parser = Role::parse)]
        role: Role,
        /// A label for operators (A-Z a-z 0-9 _ . - @, at most 128 bytes).
        #[arg(long, default_value = "")]
        name: String,
    },
    /// List tokens: id, role, name, creation time (never a secret).
    List(OutputArg),
    /// Revoke a token by id; returns once no server accepts it.
    Revoke {
        /// The token's id (12 hex digits, as `token list` shows).
        id: String,
    },
}

fn token(s: &mut Session, cmd: TokenCommand) -> anyhow::Result<()> {
    let c = s.client()?;
    match cmd {
        TokenCommand::Create { role, name } => {
            let (info, token) = c.create_token(role, &name)?;
            eprintln!(
                "created {} token {} (shown once; keep it secret)",
                info.role.name(),
                info.id
            );
            out!("{}", token.expose());
        }
        TokenCommand::List(o) => {
            let mut w = RowWriter::stdout(o.format, &["id", "role", "name", "created_ms"]);
            for t in c.list_tokens()? {
                let name = if t.name.is_empty() && o.format == Format::Text {
                    "-"
                } else {
                    &t.name
                };
                if o.format == Format::Text {
                    w.row(&[
                        Field::Text(&t.id),
                        Field::Text(t.role.name()),
                        Field::Text(name),
                        Field::Text(&format!("created_ms={}", t.created_ms)),
                    ])?;
                } else {
                    w.row(&[
                        Field::Text(&t.id),
                        Field::Text(t.role.name()),
                        Field::Text(name),
                        Field::Num(t.created_ms),
                    ])?;
                }
            }
            w.finish()?;
        }
        TokenCommand::Revoke { id } => {
            c.revoke_token(&id)?;
            out!("revoked token {id}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize) -> Vec<Vec<u8>> {
        (0..n).map(|i| format!("ev{i:05}").into_bytes()).collect()
    }

    #[test]
    fn sample_splits_give_each_tablet_an_equal_share() {
        let sample = keys(1000);
        let points = split_points_from_sample(sample.clone(), 8);
        assert_eq!(points.len(), 7);
        let mut counts = [0usize; 8];
        for k in &sample {
            counts[points.iter().filter(|p| k >= *p).count()] += 1;
        }
        assert!(counts.iter().all(|&c| c == 125), "{counts:?}");
    }

    #[test]
    fn sample_splits_drop_duplicates_and_empty_points() {
        let sample = vec![b"a".to_vec(); 50];
        assert!(split_points_from_sample(sample, 4).is_empty());
        let sample = vec![Vec::new(), b"m".to_vec()];
        assert_eq!(split_points_from_sample(sample, 2), vec![b"m".to_vec()]);
    }

    #[test]
    fn index_terms_are_checked_before_sending() {
        assert!(parse_index_term("color=red").is_ok());
        assert!(format!("{:#}", parse_index_term("nocolon").unwrap_err()).contains("NAME=TERM"));
        assert!(format!("{:#}", parse_index_term("=red").unwrap_err()).contains("index name"));
        let long = format!("c={}", "x".repeat(INDEX_TERM_BYTES_MAX + 1));
        assert!(format!("{:#}", parse_index_term(&long).unwrap_err()).contains("index term"));
        assert!(check_object(b"", 1, 0).unwrap_err().contains("key"));
        assert!(check_object(b"k", VALUE_BYTES_MAX + 1, 0)
            .unwrap_err()
            .contains("64 MiB"));
    }
}
