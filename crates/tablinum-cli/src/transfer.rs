//! `tablinum import` and `tablinum export`: objects to and from JSON lines
//! or CSV, round-tripping any bytes.
//!
//! JSON lines: one object per line, `{"key": .., "value": .., "meta": ..,
//! "index": [{"name": .., "term": ..}]}`; each byte field is a string when
//! it is UTF-8, else it is named `FIELD_b64` and holds base64 (see
//! [`crate::output`]). `meta` and `index` are optional. CSV: a header
//! naming the columns `key`, `value` and optionally `meta` (or their
//! `_b64` forms); fields hold the bytes exactly (RFC 4180 quoting).
//!
//! Import checks the whole input (syntax, unknown fields, the engine's
//! size limits) before it writes anything, so bad input names its line and
//! changes nothing; then it writes in batches (atomic per tablet, not
//! across tablets) with a progress bar on stderr and a summary at the end.
//! Owns the file formats and batching; it never reaches past the client.

use std::io::{BufRead, IsTerminal as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::Context;
use base64::Engine as _;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tablinum_client::{IndexTerm, Mutation, Query};

use crate::exit::usage;
use crate::output::{csv_io, put_json, Field};
use crate::verbs::{check_index_term, check_object, index_json, Session};

/// Rows per write batch by default.
const BATCH_ROWS_DEFAULT: usize = 500;
/// Bytes of keys, values and metadata per write batch by default, MiB.
const BATCH_MIB_DEFAULT: usize = 4;
/// Largest JSON line read, bytes (a 64 MiB value in base64 plus the rest).
const JSON_LINE_BYTES_MAX: usize = 90 << 20;
/// How often the progress bar is redrawn at most, per second.
const PROGRESS_HZ: u8 = 10;

/// File formats of import and export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FileFormat {
    /// JSON lines (`.jsonl`, `.ndjson`, `.json`).
    Jsonl,
    /// CSV with a header (`.csv`).
    Csv,
}

impl FileFormat {
    /// The format a file's extension names, if any.
    fn from_path(p: &Path) -> Option<FileFormat> {
        match p.extension()?.to_str()? {
            "jsonl" | "ndjson" | "json" => Some(FileFormat::Jsonl),
            "csv" => Some(FileFormat::Csv),
            _ => None,
        }
    }
}

/// `import TABLE FILE`.
#[derive(Debug, Args)]
pub struct ImportArgs {
    /// Table name.
    pub table: String,
    /// The file, or `-` for standard input (read into memory first, so it
    /// can be checked before anything is written).
    pub file: PathBuf,
    /// jsonl or csv (default: from the file's extension, else jsonl).
    #[arg(long, value_enum)]
    pub format: Option<FileFormat>,
    /// Rows per write (1..=10000).
    #[arg(long, default_value_t = BATCH_ROWS_DEFAULT)]
    pub batch_rows: usize,
    /// Bytes per write, MiB (1..=64); a larger object goes alone.
    #[arg(long, default_value_t = BATCH_MIB_DEFAULT)]
    pub batch_mib: usize,
}

/// `export TABLE`.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Table name.
    pub table: String,
    /// First key (inclusive).
    #[arg(long, default_value = "")]
    pub start: String,
    /// End key (exclusive).
    #[arg(long, default_value = "")]
    pub end: String,
    /// jsonl (default; carries metadata and index terms) or csv (key,
    /// value and with --with-meta, meta).
    #[arg(long, value_enum, default_value_t = FileFormat::Jsonl)]
    pub format: FileFormat,
    /// Write here instead of standard output.
    #[arg(long, short = 'f')]
    pub file: Option<PathBuf>,
    /// Also export each object's metadata and index terms (one more read
    /// per object).
    #[arg(long)]
    pub with_meta: bool,
}

/// One object read from an import file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    key: Vec<u8>,
    value: Vec<u8>,
    meta: Vec<u8>,
    index: Vec<IndexTerm>,
}

impl Record {
    fn bytes(&self) -> usize {
        self.key.len() + self.value.len() + self.meta.len()
    }

    fn check(&self) -> Result<(), String> {
        check_object(&self.key, self.value.len(), self.meta.len())?;
        for t in &self.index {
            check_index_term(&t.index, &t.term)?;
        }
        Ok(())
    }
}

/// Parses one JSON line (hostile input: unknown fields and wrong types are
/// errors naming the field).
pub fn parse_json_line(line: &[u8]) -> Result<Record, String> {
    let v: serde_json::Value =
        serde_json::from_slice(line).map_err(|e| format!("not JSON: {e}"))?;
    let serde_json::Value::Object(obj) = v else {
        return Err("not a JSON object".into());
    };
    for k in obj.keys() {
        if !matches!(
            k.as_str(),
            "key" | "key_b64" | "value" | "value_b64" | "meta" | "meta_b64" | "index"
        ) {
            return Err(format!(
                "unknown field `{k}` (expected key, value, meta, index, or their _b64 forms)"
            ));
        }
    }
    let key = crate::output::get_json_bytes(&obj, "key")?.ok_or("no `key` field")?;
    let value = crate::output::get_json_bytes(&obj, "value")?.ok_or("no `value` field")?;
    let meta = crate::output::get_json_bytes(&obj, "meta")?.unwrap_or_default();
    let mut index = Vec::new();
    match obj.get("index") {
        None | Some(serde_json::Value::Null) => {}
        Some(serde_json::Value::Array(a)) => {
            for (i, t) in a.iter().enumerate() {
                let serde_json::Value::Object(t) = t else {
                    return Err(format!("index[{i}] is not an object"));
                };
                if let Some(k) = t
                    .keys()
                    .find(|k| !matches!(k.as_str(), "name" | "name_b64" | "term" | "term_b64"))
                {
                    return Err(format!("index[{i}]: unknown field `{k}`"));
                }
                let name = crate::output::get_json_bytes(t, "name")
                    .map_err(|e| format!("index[{i}]: {e}"))?
                    .ok_or_else(|| format!("index[{i}] has no `name`"))?;
                let term = crate::output::get_json_bytes(t, "term")
                    .map_err(|e| format!("index[{i}]: {e}"))?
                    .ok_or_else(|| format!("index[{i}] has no `term`"))?;
                index.push(IndexTerm { index: name, term });
            }
        }
        Some(_) => return Err("`index` must be an array of {name, term}".into()),
    }
    let r = Record {
        key,
        value,
        meta,
        index,
    };
    r.check()?;
    Ok(r)
}

/// Which CSV column holds what (from the header).
#[derive(Debug, Clone, Copy)]
struct CsvColumns {
    key: (usize, bool),
    value: (usize, bool),
    meta: Option<(usize, bool)>,
}

fn csv_columns(header: &csv::ByteRecord) -> Result<CsvColumns, String> {
    let mut key = None;
    let mut value = None;
    let mut meta = None;
    for (i, h) in header.iter().enumerate() {
        let slot = match h {
            b"key" => (&mut key, false),
            b"key_b64" => (&mut key, true),
            b"value" => (&mut value, false),
            b"value_b64" => (&mut value, true),
            b"meta" => (&mut meta, false),
            b"meta_b64" => (&mut meta, true),
            other => {
                return Err(format!(
                    "header: unknown column `{}` (expected key, value, meta or their _b64 forms)",
                    String::from_utf8_lossy(other)
                ))
            }
        };
        if slot.0.is_some() {
            return Err(format!(
                "header: column `{}` given twice",
                String::from_utf8_lossy(h)
            ));
        }
        *slot.0 = Some((i, slot.1));
    }
    Ok(CsvColumns {
        key: key.ok_or("header has no `key` column")?,
        value: value.ok_or("header has no `value` column")?,
        meta,
    })
}

fn csv_field(
    rec: &csv::ByteRecord,
    (i, b64): (usize, bool),
    name: &str,
) -> Result<Vec<u8>, String> {
    let f = rec.get(i).ok_or_else(|| format!("no `{name}` field"))?;
    if b64 {
        base64::engine::general_purpose::STANDARD
            .decode(f)
            .map_err(|e| format!("`{name}_b64` is not base64: {e}"))
    } else {
        Ok(f.to_vec())
    }
}

/// Reads records one by one; `f` gets each with its line number. Stops at
/// the first bad record with an error naming its line.
fn each_record(
    input: impl std::io::Read,
    format: FileFormat,
    f: &mut dyn FnMut(Record) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    match format {
        FileFormat::Jsonl => {
            let mut r = std::io::BufReader::new(input);
            let mut line = Vec::new();
            let mut n = 0u64;
            loop {
                line.clear();
                let got = (&mut r)
                    .take(JSON_LINE_BYTES_MAX as u64 + 1)
                    .read_until(b'\n', &mut line)?;
                if got == 0 {
                    return Ok(());
                }
                n += 1;
                if line.len() > JSON_LINE_BYTES_MAX {
                    usage!("line {n}: longer than {JSON_LINE_BYTES_MAX} bytes");
                }
                if line.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                match parse_json_line(&line) {
                    Ok(rec) => f(rec)?,
                    Err(m) => usage!("line {n}: {m}"),
                }
            }
        }
        FileFormat::Csv => {
            let mut r = csv::ReaderBuilder::new()
                .has_headers(true)
                .flexible(false)
                .from_reader(input);
            let header = match r.byte_headers() {
                Ok(h) => h.clone(),
                Err(e) => usage!("line 1: {e}"),
            };
            let cols = match csv_columns(&header) {
                Ok(c) => c,
                Err(m) => usage!("line 1: {m}"),
            };
            for rec in r.byte_records() {
                let rec = match rec {
                    Ok(r) => r,
                    Err(e) => {
                        let line = e.position().map_or(0, csv::Position::line);
                        usage!("line {line}: {e}");
                    }
                };
                let line = rec.position().map_or(0, csv::Position::line);
                let parsed = (|| -> Result<Record, String> {
                    let r = Record {
                        key: csv_field(&rec, cols.key, "key")?,
                        value: csv_field(&rec, cols.value, "value")?,
                        meta: match cols.meta {
                            Some(c) => csv_field(&rec, c, "meta")?,
                            None => Vec::new(),
                        },
                        index: Vec::new(),
                    };
                    r.check()?;
                    Ok(r)
                })();
                match parsed {
                    Ok(rec) => f(rec)?,
                    Err(m) => usage!("line {line}: {m}"),
                }
            }
            Ok(())
        }
    }
}

/// The import's input: a file opened twice (check, then write), or
/// standard input held in memory.
enum Input {
    File(PathBuf),
    Memory(Vec<u8>),
}

impl Input {
    fn open(&self) -> anyhow::Result<Box<dyn std::io::Read + '_>> {
        Ok(match self {
            Input::File(p) => Box::new(
                std::fs::File::open(p).with_context(|| format!("opening {}", p.display()))?,
            ),
            Input::Memory(b) => Box::new(b.as_slice()),
        })
    }
}

fn bar(len: u64, what: &str) -> ProgressBar {
    let target = if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr_with_hz(PROGRESS_HZ)
    } else {
        ProgressDrawTarget::hidden()
    };
    let b = ProgressBar::with_draw_target(Some(len), target);
    let template =
        format!("{what} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} objects (eta {{eta}})");
    if let Ok(s) = ProgressStyle::with_template(&template) {
        b.set_style(s);
    }
    b
}

/// `tablinum import TABLE FILE`.
pub fn import(s: &mut Session, a: ImportArgs) -> anyhow::Result<()> {
    if !(1..=tablinum_proto::BATCH_ROWS_MAX as usize).contains(&a.batch_rows) {
        usage!(
            "--batch-rows {}: 1..={} allowed",
            a.batch_rows,
            tablinum_proto::BATCH_ROWS_MAX
        );
    }
    if !(1..=64).contains(&a.batch_mib) {
        usage!("--batch-mib {}: 1..=64 allowed", a.batch_mib);
    }
    let stdin = a.file.as_os_str() == "-";
    let format = a
        .format
        .or_else(|| FileFormat::from_path(&a.file))
        .unwrap_or(FileFormat::Jsonl);
    let input = if stdin {
        if s.interactive {
            usage!("the shell cannot import from standard input; give a file");
        }
        let mut b = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut b)
            .context("reading standard input")?;
        Input::Memory(b)
    } else {
        Input::File(a.file.clone())
    };
    let name = if stdin {
        "standard input".to_string()
    } else {
        a.file.display().to_string()
    };
    // Check everything before writing anything.
    let (mut rows, mut bytes) = (0u64, 0u64);
    each_record(input.open()?, format, &mut |r| {
        rows += 1;
        bytes += r.bytes() as u64;
        Ok(())
    })
    .with_context(|| format!("import {name}: nothing was written"))?;
    // The table must exist before the first batch.
    let client = s.client()?;
    client.locations(&a.table, true)?;
    let started = Instant::now();
    let pb = bar(rows, "import");
    let batch_bytes = a.batch_mib << 20;
    let mut batch: Vec<Mutation> = Vec::new();
    let mut batch_len = 0usize;
    let mut written = 0u64;
    let flush = |batch: &mut Vec<Mutation>, written: &mut u64| -> anyhow::Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let n = batch.len() as u64;
        client
            .write_routed(&a.table, std::mem::take(batch))
            .with_context(|| {
                format!("import {name}: {written} objects were written before this batch failed")
            })?;
        *written += n;
        pb.set_position(*written);
        Ok(())
    };
    each_record(input.open()?, format, &mut |r| {
        let len = r.bytes();
        if !batch.is_empty() && (batch.len() >= a.batch_rows || batch_len + len > batch_bytes) {
            flush(&mut batch, &mut written)?;
            batch_len = 0;
        }
        batch_len += len;
        batch.push(Mutation {
            key: r.key,
            value: r.value,
            delete: false,
            metadata: r.meta,
            index_terms: r.index,
        });
        Ok(())
    })?;
    flush(&mut batch, &mut written)?;
    pb.finish_and_clear();
    let secs = started.elapsed().as_secs_f64();
    eprintln!(
        "imported {written} objects ({:.1} MiB) into {} in {secs:.1} s ({:.0} objects/s)",
        bytes as f64 / f64::from(1 << 20),
        a.table,
        written as f64 / secs.max(1e-9)
    );
    Ok(())
}

/// Rows read per export page at most (metadata is read between pages).
const EXPORT_PAGE_ROWS: usize = 1000;
/// Bytes read per export page at most, MiB.
const EXPORT_PAGE_MIB: usize = 64;

/// Where export writes.
enum Sink {
    Csv(Box<csv::Writer<std::io::BufWriter<Box<dyn std::io::Write>>>>),
    Json(std::io::BufWriter<Box<dyn std::io::Write>>),
}

/// `tablinum export TABLE`: pages of rows in key order, each written (with
/// its metadata when asked) before the next is read.
pub fn export(s: &mut Session, a: ExportArgs) -> anyhow::Result<()> {
    if a.format == FileFormat::Csv && a.with_meta {
        // CSV carries metadata but not index terms: say so rather than
        // drop them silently.
        eprintln!(
            "note: CSV carries each object's metadata but not its index terms; use --format jsonl for those"
        );
    }
    let client = s.client()?;
    let sink: Box<dyn std::io::Write> = match &a.file {
        Some(f) => {
            Box::new(std::fs::File::create(f).with_context(|| format!("creating {}", f.display()))?)
        }
        None => Box::new(std::io::stdout().lock()),
    };
    let sink = std::io::BufWriter::new(sink);
    let mut out = match a.format {
        FileFormat::Csv => {
            let mut w = csv::WriterBuilder::new()
                .has_headers(false)
                .from_writer(sink);
            if a.with_meta {
                w.write_record(["key", "value", "meta"]).map_err(csv_io)?;
            } else {
                w.write_record(["key", "value"]).map_err(csv_io)?;
            }
            Sink::Csv(Box::new(w))
        }
        FileFormat::Jsonl => Sink::Json(sink),
    };
    let started = Instant::now();
    let spinner = bar(0, "export");
    let (mut rows, mut bytes) = (0u64, 0u64);
    let mut start = a.start.clone().into_bytes();
    loop {
        let q = Query {
            start: start.clone(),
            end: a.end.clone().into_bytes(),
            ..Query::new(a.table.clone())
        };
        let mut page: Vec<tablinum_client::QueryRow> = Vec::new();
        let mut page_bytes = 0usize;
        client.query_until(&q, &mut |r| {
            page_bytes += r.key.len() + r.value.len();
            page.push(r);
            if page.len() >= EXPORT_PAGE_ROWS || page_bytes >= EXPORT_PAGE_MIB << 20 {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            }
        })?;
        let Some(last) = page.last() else {
            break;
        };
        // The next page starts just after this one's last key.
        start = [last.key.as_slice(), &[0]].concat();
        for r in &page {
            let head = if a.with_meta {
                client.head(&a.table, &r.key)?
            } else {
                None
            };
            match &mut out {
                Sink::Csv(w) => {
                    if a.with_meta {
                        let meta = head.as_ref().map_or(&[][..], |h| h.metadata.as_slice());
                        w.write_record([r.key.as_slice(), &r.value, meta])
                            .map_err(csv_io)?;
                    } else {
                        w.write_record([r.key.as_slice(), &r.value])
                            .map_err(csv_io)?;
                    }
                }
                Sink::Json(sink) => {
                    let mut o = serde_json::Map::new();
                    put_json(&mut o, "key", Field::Bytes(&r.key));
                    put_json(&mut o, "value", Field::Bytes(&r.value));
                    if let Some(h) = &head {
                        if !h.metadata.is_empty() {
                            put_json(&mut o, "meta", Field::Bytes(&h.metadata));
                        }
                        if !h.index_terms.is_empty() {
                            o.insert("index".into(), index_json(&h.index_terms));
                        }
                    }
                    serde_json::to_writer(&mut *sink, &serde_json::Value::Object(o))?;
                    sink.write_all(b"\n")?;
                }
            }
            rows += 1;
            bytes += (r.key.len() + r.value.len()) as u64;
        }
        spinner.set_length(rows);
        spinner.set_position(rows);
    }
    match &mut out {
        Sink::Csv(w) => w.flush()?,
        Sink::Json(w) => w.flush()?,
    }
    spinner.finish_and_clear();
    eprintln!(
        "exported {rows} objects ({:.1} MiB) from {} in {:.1} s",
        bytes as f64 / f64::from(1 << 20),
        a.table,
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(input: &[u8], format: FileFormat) -> anyhow::Result<Vec<Record>> {
        let mut v = Vec::new();
        each_record(input, format, &mut |r| {
            v.push(r);
            Ok(())
        })?;
        Ok(v)
    }

    #[test]
    fn json_lines_round_trip_binary_fields() {
        let r = Record {
            key: b"k\xff".to_vec(),
            value: (0..=255u8).collect(),
            meta: b"m".to_vec(),
            index: vec![IndexTerm {
                index: b"color".to_vec(),
                term: b"r\x00d".to_vec(),
            }],
        };
        let mut o = serde_json::Map::new();
        put_json(&mut o, "key", Field::Bytes(&r.key));
        put_json(&mut o, "value", Field::Bytes(&r.value));
        put_json(&mut o, "meta", Field::Bytes(&r.meta));
        o.insert("index".into(), index_json(&r.index));
        let line = serde_json::Value::Object(o).to_string();
        assert!(line.contains("key_b64"), "{line}");
        assert_eq!(parse_json_line(line.as_bytes()).unwrap(), r);
    }

    #[test]
    fn bad_json_lines_name_their_line_and_field() {
        let input = b"{\"key\":\"a\",\"value\":\"1\"}\n\n{\"key\":\"b\",\"valu\":\"2\"}\n";
        let e = format!("{:#}", collect(input, FileFormat::Jsonl).unwrap_err());
        assert!(e.contains("line 3") && e.contains("`valu`"), "{e}");
        let e = format!(
            "{:#}",
            collect(b"{\"key\":\"\",\"value\":\"1\"}\n", FileFormat::Jsonl).unwrap_err()
        );
        assert!(e.contains("line 1") && e.contains("key is 0 bytes"), "{e}");
        let e = format!("{:#}", collect(b"[1]\n", FileFormat::Jsonl).unwrap_err());
        assert!(e.contains("not a JSON object"), "{e}");
        let e = format!(
            "{:#}",
            collect(
                b"{\"key\":\"a\",\"value\":\"1\",\"index\":[{\"name\":\"x\"}]}",
                FileFormat::Jsonl
            )
            .unwrap_err()
        );
        assert!(e.contains("index[0] has no `term`"), "{e}");
    }

    #[test]
    fn csv_reads_bytes_exactly_and_checks_its_header() {
        let mut w = csv::WriterBuilder::new().from_writer(Vec::new());
        w.write_record([&b"key"[..], b"value"]).unwrap();
        w.write_record([&b"a,\"b"[..], b"line1\nline2\xff"])
            .unwrap();
        let data = w.into_inner().unwrap();
        let v = collect(&data, FileFormat::Csv).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].key, b"a,\"b");
        assert_eq!(v[0].value, b"line1\nline2\xff");
        let e = format!(
            "{:#}",
            collect(b"key,vale\na,b\n", FileFormat::Csv).unwrap_err()
        );
        assert!(e.contains("line 1") && e.contains("`vale`"), "{e}");
        let e = format!(
            "{:#}",
            collect(b"key,value\na,b\nc\n", FileFormat::Csv).unwrap_err()
        );
        assert!(e.contains("line 3"), "{e}");
        let v = collect(b"key_b64,value\nYQ==,1\n", FileFormat::Csv).unwrap();
        assert_eq!(v[0].key, b"a");
    }
}
