//! How the CLI prints rows: one writer shared by the cluster commands, the
//! cluster shell and the local engine shell, in four formats (`-o`).
//!
//! - `text` (default): tab-separated, keys and values as people read them
//!   ([`tablinum_client::display_key`]: text, or `0x…` hex for bytes that
//!   are not printable UTF-8); no header.
//! - `tsv`: a header line, then fields with `\\`, `\t`, `\n`, `\r` escaped
//!   and bytes that are not UTF-8 as `\xNN`, so every field stays on its
//!   line and in its column.
//! - `csv`: a header line, then RFC 4180 records holding the bytes exactly.
//! - `json`: one JSON object per line (JSON lines); a byte field is a
//!   string when it is UTF-8, else it is named `FIELD_b64` and holds its
//!   base64 (standard alphabet, padded), so any bytes round-trip.
//!
//! Owns formatting only: it never decides what to print, and it reports a
//! closed pipe as an error for the caller to end quietly.

use std::io::Write;

use base64::Engine as _;

/// `-o FORMAT` of listing commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Format {
    /// Tab-separated, for people (no header).
    #[default]
    Text,
    /// JSON lines: one object per row.
    Json,
    /// Comma-separated with a header (RFC 4180), bytes exact.
    Csv,
    /// Tab-separated with a header, fields escaped.
    Tsv,
}

/// `-o FORMAT` as a flag to flatten into a command.
#[derive(Debug, Clone, clap::Args)]
pub struct OutputArg {
    /// Output format: text (default), json (JSON lines), csv or tsv.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// One field of a row.
#[derive(Debug, Clone, Copy)]
pub enum Field<'a> {
    /// Bytes (keys, values, terms, metadata).
    Bytes(&'a [u8]),
    /// Text the program made (names, addresses).
    Text(&'a str),
    /// A count or a size.
    Num(u64),
}

/// Writes rows with named columns in one [`Format`].
pub struct RowWriter<W: Write> {
    sink: Sink<W>,
    format: Format,
    columns: Vec<&'static str>,
    header_done: bool,
}

/// Where rows go: CSV through the `csv` crate's writer, the rest as lines.
enum Sink<W: Write> {
    Lines(W),
    Csv(Box<csv::Writer<W>>),
}

impl RowWriter<std::io::BufWriter<std::io::Stdout>> {
    /// A writer of rows to (buffered) standard output.
    pub fn stdout(format: Format, columns: &[&'static str]) -> Self {
        RowWriter::new(std::io::BufWriter::new(std::io::stdout()), format, columns)
    }
}

impl<W: Write> RowWriter<W> {
    /// A writer of rows with these columns; the header (csv, tsv) is
    /// written with the first row, or by [`RowWriter::finish`] when there
    /// is none.
    pub fn new(out: W, format: Format, columns: &[&'static str]) -> Self {
        let sink = if format == Format::Csv {
            Sink::Csv(Box::new(
                csv::WriterBuilder::new()
                    .has_headers(false)
                    .from_writer(out),
            ))
        } else {
            Sink::Lines(out)
        };
        RowWriter {
            sink,
            format,
            columns: columns.to_vec(),
            header_done: false,
        }
    }

    fn header(&mut self) -> std::io::Result<()> {
        if self.header_done {
            return Ok(());
        }
        self.header_done = true;
        match (&mut self.sink, self.format) {
            (Sink::Lines(o), Format::Tsv) => writeln!(o, "{}", self.columns.join("\t")),
            (Sink::Csv(w), _) => w.write_record(&self.columns).map_err(csv_io),
            _ => Ok(()),
        }
    }

    /// Writes one row; `fields` are in the order of the columns.
    pub fn row(&mut self, fields: &[Field<'_>]) -> std::io::Result<()> {
        debug_assert_eq!(fields.len(), self.columns.len(), "one field per column");
        self.header()?;
        let o = match &mut self.sink {
            Sink::Csv(w) => {
                let rec: Vec<Vec<u8>> = fields
                    .iter()
                    .map(|f| match f {
                        Field::Bytes(b) => b.to_vec(),
                        Field::Text(t) => t.as_bytes().to_vec(),
                        Field::Num(n) => n.to_string().into_bytes(),
                    })
                    .collect();
                return w.write_record(&rec).map_err(csv_io);
            }
            Sink::Lines(o) => o,
        };
        match self.format {
            Format::Tsv => {
                let line: Vec<String> = fields.iter().map(|f| tsv_field(*f)).collect();
                writeln!(o, "{}", line.join("\t"))
            }
            Format::Json => {
                let mut obj = serde_json::Map::new();
                for (c, f) in self.columns.iter().zip(fields) {
                    put_json(&mut obj, c, *f);
                }
                writeln!(o, "{}", serde_json::Value::Object(obj))
            }
            Format::Text | Format::Csv => {
                let line: Vec<String> = fields.iter().map(|f| text_field(*f)).collect();
                writeln!(o, "{}", line.join("\t"))
            }
        }
    }

    /// Writes the header if no row did, flushes, and returns the output.
    pub fn finish(mut self) -> std::io::Result<W> {
        self.header()?;
        match self.sink {
            Sink::Lines(mut o) => {
                o.flush()?;
                Ok(o)
            }
            Sink::Csv(w) => w.into_inner().map_err(|e| e.into_error()),
        }
    }
}

/// A CSV error as the I/O error it wraps (so a closed pipe is recognised).
pub fn csv_io(e: csv::Error) -> std::io::Error {
    match e.into_kind() {
        csv::ErrorKind::Io(e) => e,
        other => std::io::Error::other(format!("{other:?}")),
    }
}

/// A field as `text` prints it.
pub fn text_field(f: Field<'_>) -> String {
    match f {
        Field::Bytes(b) => tablinum_client::display_key(b, ""),
        Field::Text(t) => t.to_string(),
        Field::Num(n) => n.to_string(),
    }
}

/// A field as `tsv` prints it: escaped so it stays in its column.
pub fn tsv_field(f: Field<'_>) -> String {
    match f {
        Field::Bytes(b) => escape(b),
        Field::Text(t) => escape(t.as_bytes()),
        Field::Num(n) => n.to_string(),
    }
}

/// `\\`, `\t`, `\n`, `\r` escaped; bytes that are not UTF-8 as `\xNN`.
pub fn escape(b: &[u8]) -> String {
    let mut s = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '\\' => s.push_str("\\\\"),
                '\t' => s.push_str("\\t"),
                '\n' => s.push_str("\\n"),
                '\r' => s.push_str("\\r"),
                c => s.push(c),
            }
        }
        for x in chunk.invalid() {
            s.push_str(&format!("\\x{x:02x}"));
        }
    }
    s
}

/// Adds `name: value` to a JSON object; bytes that are not UTF-8 go under
/// `name_b64` in base64.
pub fn put_json(obj: &mut serde_json::Map<String, serde_json::Value>, name: &str, f: Field<'_>) {
    match f {
        Field::Bytes(b) => match std::str::from_utf8(b) {
            Ok(s) => {
                obj.insert(name.to_string(), s.into());
            }
            Err(_) => {
                obj.insert(format!("{name}_b64"), b64(b).into());
            }
        },
        Field::Text(t) => {
            obj.insert(name.to_string(), t.into());
        }
        Field::Num(n) => {
            obj.insert(name.to_string(), n.into());
        }
    }
}

/// Standard base64 with padding.
pub fn b64(b: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(b)
}

/// Reads `name` (a UTF-8 string) or `name_b64` (base64) from a JSON object;
/// `Ok(None)` when neither is there. The error names the field.
pub fn get_json_bytes(
    obj: &serde_json::Map<String, serde_json::Value>,
    name: &str,
) -> Result<Option<Vec<u8>>, String> {
    let b64_name = format!("{name}_b64");
    match (obj.get(name), obj.get(&b64_name)) {
        (Some(_), Some(_)) => Err(format!("both `{name}` and `{b64_name}` are given")),
        (Some(serde_json::Value::String(s)), None) => Ok(Some(s.as_bytes().to_vec())),
        (Some(_), None) => Err(format!("`{name}` must be a string")),
        (None, Some(serde_json::Value::String(s))) => base64::engine::general_purpose::STANDARD
            .decode(s)
            .map(Some)
            .map_err(|e| format!("`{b64_name}` is not base64: {e}")),
        (None, Some(_)) => Err(format!("`{b64_name}` must be a base64 string")),
        (None, None) => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn render(format: Format, rows: &[[Field<'_>; 3]]) -> String {
        String::from_utf8(render_bytes(format, rows)).unwrap()
    }

    fn render_bytes(format: Format, rows: &[[Field<'_>; 3]]) -> Vec<u8> {
        let mut w = RowWriter::new(Vec::new(), format, &["key", "value", "n"]);
        for r in rows {
            w.row(r).unwrap();
        }
        w.finish().unwrap()
    }

    const ODD: &[u8] = b"a\tb\nc\\\xff";

    #[test]
    fn every_format_keeps_fields_apart() {
        let rows = [[Field::Bytes(b"k1"), Field::Bytes(ODD), Field::Num(7)]];
        assert_eq!(render(Format::Text, &rows), "k1\t0x6109620a635cff\t7\n");
        assert_eq!(
            render(Format::Tsv, &rows),
            "key\tvalue\tn\nk1\ta\\tb\\nc\\\\\\xff\t7\n"
        );
        let csv = render_bytes(Format::Csv, &rows);
        assert!(csv.starts_with(b"key,value,n\n"));
        let mut r = csv::ReaderBuilder::new().from_reader(csv.as_slice());
        let rec = r.byte_records().next().unwrap().unwrap();
        assert_eq!(&rec[1], ODD, "csv keeps the bytes");
        let json = render(Format::Json, &rows);
        let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap();
        let obj = v.as_object().unwrap();
        assert_eq!(obj["key"], "k1");
        assert_eq!(obj["n"], 7);
        assert!(!obj.contains_key("value"), "{json}");
        assert_eq!(get_json_bytes(obj, "value").unwrap().unwrap(), ODD);
    }

    #[test]
    fn headers_are_written_without_rows() {
        assert_eq!(render(Format::Tsv, &[]), "key\tvalue\tn\n");
        assert_eq!(render(Format::Csv, &[]), "key,value,n\n");
        assert_eq!(render(Format::Text, &[]), "");
        assert_eq!(render(Format::Json, &[]), "");
    }

    #[test]
    fn json_bytes_refuse_ambiguous_or_bad_fields() {
        let obj = |s: &str| -> serde_json::Map<String, serde_json::Value> {
            serde_json::from_str(s).unwrap()
        };
        assert!(get_json_bytes(&obj(r#"{"k":"a","k_b64":"YQ=="}"#), "k")
            .unwrap_err()
            .contains("both"));
        assert!(get_json_bytes(&obj(r#"{"k_b64":"!!"}"#), "k")
            .unwrap_err()
            .contains("not base64"));
        assert!(get_json_bytes(&obj(r#"{"k":5}"#), "k")
            .unwrap_err()
            .contains("must be a string"));
        assert_eq!(get_json_bytes(&obj(r#"{}"#), "k").unwrap(), None);
        assert_eq!(
            get_json_bytes(&obj(r#"{"k_b64":"/w=="}"#), "k").unwrap(),
            Some(vec![0xff])
        );
    }
}
