//! Reads one field of a JSON record from its raw bytes, without decoding the
//! record: the splitter routes ~870-byte log records by a `level` field,
//! and Scribengin decoded every record whole in every operator.
//!
//! Owns the field path ([`Path`]), the scanner that walks the bytes to the
//! path's value while skipping every other value (strings with escapes,
//! nested objects and arrays, numbers, literals) without allocating, and
//! comparisons of a found value ([`Value`]). Records are hostile input: the
//! scanner never panics, never recurses (nesting is counted, up to
//! [`NESTING_DEPTH_MAX`]) and answers [`Error::Malformed`] with the byte
//! offset for anything that is not JSON as far as it had to read. It reads
//! only as far as it must: bytes after the found value are not checked.

use std::borrow::Cow;
use std::cmp::Ordering;
use std::fmt;

/// Deepest nesting of objects and arrays a record may have on the way to
/// (or inside a value skipped before) the field.
pub const NESTING_DEPTH_MAX: usize = 64;
/// Most segments of a field path (`a.b.c` has three).
pub const PATH_SEGMENTS_MAX: usize = 16;
/// Longest field path, bytes.
pub const PATH_BYTES_MAX: usize = 256;

/// Why a field could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A path that is empty, too long, or has an empty segment.
    BadPath(String),
    /// The record is not JSON where the scanner had to read it.
    Malformed {
        /// Byte offset of the problem.
        offset: usize,
        /// What was expected or found.
        reason: &'static str,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadPath(m) => write!(f, "bad field path: {m}"),
            Error::Malformed { offset, reason } => {
                write!(f, "malformed JSON record at byte {offset}: {reason}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A field path: object keys from the top level down (`level`,
/// `request.user.id`). Keys containing `.` cannot be named.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Path {
    segments: Vec<Vec<u8>>,
}

impl Path {
    /// Parses `a.b.c`, refusing an empty path, an empty segment, more than
    /// [`PATH_SEGMENTS_MAX`] segments or more than [`PATH_BYTES_MAX`] bytes.
    pub fn parse(s: &str) -> Result<Path, Error> {
        if s.is_empty() {
            return Err(Error::BadPath("empty".into()));
        }
        if s.len() > PATH_BYTES_MAX {
            return Err(Error::BadPath(format!(
                "{} bytes exceeds PATH_BYTES_MAX = {PATH_BYTES_MAX}",
                s.len()
            )));
        }
        let segments: Vec<Vec<u8>> = s.split('.').map(|p| p.as_bytes().to_vec()).collect();
        if segments.iter().any(Vec::is_empty) {
            return Err(Error::BadPath(format!("{s:?} has an empty segment")));
        }
        if segments.len() > PATH_SEGMENTS_MAX {
            return Err(Error::BadPath(format!(
                "{} segments exceeds PATH_SEGMENTS_MAX = {PATH_SEGMENTS_MAX}",
                segments.len()
            )));
        }
        Ok(Path { segments })
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.segments.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            f.write_str(&String::from_utf8_lossy(seg))?;
        }
        Ok(())
    }
}

/// A value found at a path: its raw bytes, and for a string its contents
/// (borrowed unless it had escapes).
#[derive(Debug, Clone, PartialEq)]
pub enum Value<'a> {
    /// A string's contents, unescaped.
    Str(Cow<'a, [u8]>),
    /// A number, as written.
    Num(&'a [u8]),
    /// `true` or `false`.
    Bool(bool),
    /// `null`.
    Null,
    /// An object or array, raw (not decoded).
    Composite(&'a [u8]),
}

impl Value<'_> {
    /// The value as a number, if it is one (or a string holding one).
    pub fn as_f64(&self) -> Option<f64> {
        let b: &[u8] = match self {
            Value::Num(b) => b,
            Value::Str(s) => s,
            _ => return None,
        };
        std::str::from_utf8(b).ok()?.trim().parse().ok()
    }

    /// Compares with `other`, given as text: numerically when both are
    /// numbers, else bytewise against a string's contents (or a number's
    /// text). `None` for booleans, null and composites against anything but
    /// their own text.
    pub fn compare(&self, other: &str) -> Option<Ordering> {
        if let (Some(a), Ok(b)) = (self.as_f64(), other.trim().parse::<f64>()) {
            if matches!(self, Value::Num(_)) {
                return a.partial_cmp(&b);
            }
        }
        match self {
            Value::Str(s) => Some(s.as_ref().cmp(other.as_bytes())),
            Value::Num(n) => Some(n.cmp(&other.as_bytes())),
            Value::Bool(b) => {
                (other == if *b { "true" } else { "false" }).then_some(Ordering::Equal)
            }
            Value::Null => (other == "null").then_some(Ordering::Equal),
            Value::Composite(_) => None,
        }
    }
}

/// The value at `path` in `record` (`Ok(None)`: the record is an object
/// without that field, or a value on the way is not an object).
pub fn extract<'a>(record: &'a [u8], path: &Path) -> Result<Option<Value<'a>>, Error> {
    let mut s = Scanner { b: record, i: 0 };
    for seg in &path.segments {
        s.ws();
        if s.peek() != Some(b'{') {
            // Not an object on the way: the field is absent (the value is
            // still checked as far as a skip reads it).
            s.skip_value()?;
            return Ok(None);
        }
        if !s.find_key(seg)? {
            return Ok(None);
        }
    }
    s.ws();
    s.read_value().map(Some)
}

/// The bytes `start..end` of `record` (clamped to its length).
pub fn byte_range(record: &[u8], start: usize, end: usize) -> &[u8] {
    let end = end.min(record.len());
    &record[start.min(end)..end]
}

struct Scanner<'a> {
    b: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn bad<T>(&self, reason: &'static str) -> Result<T, Error> {
        Err(Error::Malformed {
            offset: self.i,
            reason,
        })
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.i).copied()
    }

    fn ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.i += 1;
        }
    }

    fn expect(&mut self, c: u8, reason: &'static str) -> Result<(), Error> {
        self.ws();
        if self.peek() == Some(c) {
            self.i += 1;
            Ok(())
        } else {
            self.bad(reason)
        }
    }

    /// At `{`: walks the object's members to the one named `key` and leaves
    /// the scanner at its value. `false` (scanner past the object) if none.
    fn find_key(&mut self, key: &[u8]) -> Result<bool, Error> {
        self.i += 1; // '{'
        self.ws();
        if self.peek() == Some(b'}') {
            self.i += 1;
            return Ok(false);
        }
        loop {
            self.ws();
            if self.peek() != Some(b'"') {
                return self.bad("expected a member name");
            }
            let name = self.string()?;
            self.expect(b':', "expected ':' after a member name")?;
            if name.as_ref() == key {
                return Ok(true);
            }
            self.ws();
            self.skip_value()?;
            self.ws();
            match self.peek() {
                Some(b',') => self.i += 1,
                Some(b'}') => {
                    self.i += 1;
                    return Ok(false);
                }
                _ => return self.bad("expected ',' or '}' in an object"),
            }
        }
    }

    /// At `"`: the string's contents, unescaped (borrowed when it has no
    /// escapes); the scanner ends after the closing quote.
    fn string(&mut self) -> Result<Cow<'a, [u8]>, Error> {
        self.i += 1; // opening quote
        let start = self.i;
        // Fast path: no escapes.
        while let Some(c) = self.peek() {
            match c {
                b'"' => {
                    self.i += 1;
                    return Ok(Cow::Borrowed(&self.b[start..self.i - 1]));
                }
                b'\\' => break,
                0..=0x1f => return self.bad("control character in a string"),
                _ => self.i += 1,
            }
        }
        if self.peek().is_none() {
            return self.bad("unterminated string");
        }
        let mut out = self.b[start..self.i].to_vec();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                b'"' => return Ok(Cow::Owned(out)),
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return self.bad("unterminated escape");
                    };
                    self.i += 1;
                    match e {
                        b'"' | b'\\' | b'/' => out.push(e),
                        b'b' => out.push(8),
                        b'f' => out.push(12),
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'u' => {
                            let c = self.unicode_escape()?;
                            let mut buf = [0u8; 4];
                            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                        }
                        _ => return self.bad("unknown escape"),
                    }
                }
                0..=0x1f => return self.bad("control character in a string"),
                _ => out.push(c),
            }
        }
        self.bad("unterminated string")
    }

    fn hex4(&mut self) -> Result<u32, Error> {
        let Some(h) = self.b.get(self.i..self.i + 4) else {
            return self.bad("short \\u escape");
        };
        let s = std::str::from_utf8(h).or_else(|_| self.bad("bad \\u escape"))?;
        let v = u32::from_str_radix(s, 16).or_else(|_| self.bad("bad \\u escape"))?;
        self.i += 4;
        Ok(v)
    }

    /// After `\u`: one character, joining a surrogate pair; a lone
    /// surrogate becomes U+FFFD (as serde_json's lossy reading would not
    /// accept it either way, the field is never routed by it).
    fn unicode_escape(&mut self) -> Result<char, Error> {
        let hi = self.hex4()?;
        if (0xD800..0xDC00).contains(&hi) {
            if self.b.get(self.i..self.i + 2) == Some(b"\\u") {
                let save = self.i;
                self.i += 2;
                let lo = self.hex4()?;
                if (0xDC00..0xE000).contains(&lo) {
                    let c = 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                    return Ok(char::from_u32(c).unwrap_or('\u{FFFD}'));
                }
                self.i = save;
            }
            return self.bad("lone surrogate in a \\u escape");
        }
        if (0xDC00..0xE000).contains(&hi) {
            return self.bad("lone surrogate in a \\u escape");
        }
        Ok(char::from_u32(hi).unwrap_or('\u{FFFD}'))
    }

    fn number(&mut self) -> Result<&'a [u8], Error> {
        let start = self.i;
        if self.peek() == Some(b'-') {
            self.i += 1;
        }
        let digits = |s: &mut Self| {
            let d = s.i;
            while matches!(s.peek(), Some(b'0'..=b'9')) {
                s.i += 1;
            }
            s.i > d
        };
        if self.peek() == Some(b'0') {
            self.i += 1;
        } else if !digits(self) {
            return self.bad("expected a value");
        }
        if self.peek() == Some(b'.') {
            self.i += 1;
            if !digits(self) {
                return self.bad("expected digits after '.'");
            }
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.i += 1;
            }
            if !digits(self) {
                return self.bad("expected digits in an exponent");
            }
        }
        Ok(&self.b[start..self.i])
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<(), Error> {
        if self.b.get(self.i..self.i + word.len()) == Some(word) {
            self.i += word.len();
            Ok(())
        } else {
            self.bad("expected a value")
        }
    }

    /// Reads the value at the scanner.
    fn read_value(&mut self) -> Result<Value<'a>, Error> {
        match self.peek() {
            Some(b'"') => Ok(Value::Str(self.string()?)),
            Some(b'{' | b'[') => {
                let start = self.i;
                self.skip_value()?;
                Ok(Value::Composite(&self.b[start..self.i]))
            }
            Some(b't') => self.literal(b"true").map(|()| Value::Bool(true)),
            Some(b'f') => self.literal(b"false").map(|()| Value::Bool(false)),
            Some(b'n') => self.literal(b"null").map(|()| Value::Null),
            Some(_) => self.number().map(Value::Num),
            None => self.bad("expected a value, found the end"),
        }
    }

    /// Skips the value at the scanner, nested ones included, iteratively.
    fn skip_value(&mut self) -> Result<(), Error> {
        // The open containers: true for an object.
        let mut stack: Vec<bool> = Vec::new();
        loop {
            self.ws();
            match self.peek() {
                Some(b'{') | Some(b'[') => {
                    let obj = self.peek() == Some(b'{');
                    if stack.len() >= NESTING_DEPTH_MAX {
                        return self.bad("nested deeper than NESTING_DEPTH_MAX");
                    }
                    self.i += 1;
                    self.ws();
                    let close = if obj { b'}' } else { b']' };
                    if self.peek() == Some(close) {
                        self.i += 1;
                    } else {
                        stack.push(obj);
                        if obj {
                            self.member_name()?;
                        }
                        continue;
                    }
                }
                Some(b'"') => {
                    self.string()?;
                }
                _ => {
                    self.read_value()?;
                }
            }
            // A value ended: close containers or go to the next element.
            loop {
                let Some(&obj) = stack.last() else {
                    return Ok(());
                };
                self.ws();
                match self.peek() {
                    Some(b',') => {
                        self.i += 1;
                        if obj {
                            self.member_name()?;
                        }
                        break;
                    }
                    Some(b'}') if obj => {
                        self.i += 1;
                        stack.pop();
                    }
                    Some(b']') if !obj => {
                        self.i += 1;
                        stack.pop();
                    }
                    _ => return self.bad("expected ',' or the container's end"),
                }
            }
        }
    }

    /// A member name and its colon, inside an object being skipped.
    fn member_name(&mut self) -> Result<(), Error> {
        self.ws();
        if self.peek() != Some(b'"') {
            return self.bad("expected a member name");
        }
        self.string()?;
        self.expect(b':', "expected ':' after a member name")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt, SeedableRng};

    fn get<'a>(rec: &'a str, path: &str) -> Option<Value<'a>> {
        extract(rec.as_bytes(), &Path::parse(path).unwrap()).unwrap()
    }

    #[test]
    fn finds_fields_at_any_depth_and_skips_everything_else() {
        let r = r#" {"a": [1, {"level": "X"}, "s\"]"], "b": {"c": {"level": "deep"}, "n": -1.5e3},
                  "level" : "WARNING", "t": true, "z": null} "#;
        assert_eq!(get(r, "level"), Some(Value::Str(Cow::Borrowed(b"WARNING"))));
        assert_eq!(
            get(r, "b.c.level"),
            Some(Value::Str(Cow::Borrowed(b"deep")))
        );
        assert_eq!(get(r, "b.n"), Some(Value::Num(b"-1.5e3")));
        assert_eq!(get(r, "t"), Some(Value::Bool(true)));
        assert_eq!(get(r, "z"), Some(Value::Null));
        assert_eq!(get(r, "missing"), None);
        assert_eq!(get(r, "a.level"), None, "an array is not an object");
        assert!(matches!(get(r, "b.c"), Some(Value::Composite(_))));
    }

    #[test]
    fn escapes_are_decoded_only_when_present() {
        let r = r#"{"k\u0065y": "a\nb\u00e9\ud83d\ude00"}"#;
        match get(r, "key") {
            Some(Value::Str(Cow::Owned(v))) => assert_eq!(v, "a\nbé😀".as_bytes()),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_paths_are_refused_by_name() {
        for bad in ["", "a..b", ".a", "a."] {
            assert!(
                matches!(Path::parse(bad), Err(Error::BadPath(_))),
                "{bad:?}"
            );
        }
        let long = vec!["x"; PATH_SEGMENTS_MAX + 1].join(".");
        assert!(Path::parse(&long)
            .unwrap_err()
            .to_string()
            .contains("PATH_SEGMENTS_MAX"));
    }

    #[test]
    fn malformed_records_are_errors_with_an_offset_never_panics() {
        for bad in [
            r#"{"a" 1}"#,
            r#"{"a": }"#,
            r#"{"a": "x"#,
            r#"{"a": tru}"#,
            "{",
            r#"{"a": 01x, "level": 1}"#,
        ] {
            let e = extract(bad.as_bytes(), &Path::parse("level").unwrap());
            assert!(matches!(e, Err(Error::Malformed { .. })), "{bad}: {e:?}");
        }
        let deep = format!(
            "{{\"a\": {}1{}, \"level\": 1}}",
            "[".repeat(100),
            "]".repeat(100)
        );
        let e = extract(deep.as_bytes(), &Path::parse("level").unwrap()).unwrap_err();
        assert!(e.to_string().contains("NESTING_DEPTH_MAX"), "{e}");
    }

    #[test]
    fn comparisons_are_numeric_for_numbers_and_bytewise_for_strings() {
        assert_eq!(Value::Num(b"10").compare("9"), Some(Ordering::Greater));
        assert_eq!(
            Value::Str(Cow::Borrowed(b"10")).compare("9"),
            Some(Ordering::Less)
        );
        assert_eq!(Value::Bool(true).compare("true"), Some(Ordering::Equal));
        assert_eq!(Value::Composite(b"{}").compare("{}"), None);
        assert_eq!(byte_range(b"abcdef", 2, 4), b"cd");
        assert_eq!(byte_range(b"abc", 2, 99), b"c");
        assert_eq!(byte_range(b"abc", 9, 99), b"");
    }

    fn random_value(rng: &mut rand::rngs::StdRng, depth: u32) -> serde_json::Value {
        use serde_json::Value as J;
        match rng.random_range(0..if depth > 3 { 5 } else { 7 }) {
            0 => J::Null,
            1 => J::Bool(rng.random_bool(0.5)),
            2 => J::from(rng.random_range(-1_000_000i64..1_000_000)),
            // Eighths: exact in binary, so reading them back is exact.
            3 => J::from(rng.random_range(-1_000_000i64..1_000_000) as f64 / 8.0),
            4 => {
                let n = rng.random_range(0..12);
                J::String(
                    (0..n)
                        .map(|_| ['a', 'é', '"', '\\', '\n', '😀', 'z'][rng.random_range(0..7)])
                        .collect(),
                )
            }
            5 => J::Array(
                (0..rng.random_range(0..4))
                    .map(|_| random_value(rng, depth + 1))
                    .collect(),
            ),
            _ => {
                let mut m = serde_json::Map::new();
                for _ in 0..rng.random_range(0..5) {
                    let k = ["level", "a", "b", "k\"q", "é"][rng.random_range(0..5)];
                    m.insert(k.to_string(), random_value(rng, depth + 1));
                }
                J::Object(m)
            }
        }
    }

    /// The scanner agrees with serde_json on every path of random documents,
    /// and random damage to them never panics it.
    #[test]
    fn agrees_with_a_full_decoder_and_survives_damage() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(33);
        let paths = [
            "level",
            "a",
            "b",
            "a.level",
            "b.a",
            "a.b.level",
            "k\"q",
            "é",
        ];
        for _ in 0..2_000 {
            let doc = random_value(&mut rng, 0);
            let text = if rng.random_bool(0.5) {
                serde_json::to_vec(&doc).unwrap()
            } else {
                serde_json::to_vec_pretty(&doc).unwrap()
            };
            for p in paths {
                let want = p.split('.').try_fold(&doc, |v, k| v.as_object()?.get(k));
                let got = extract(&text, &Path::parse(p).unwrap()).unwrap();
                match (want, got) {
                    (None, None) => {}
                    (Some(serde_json::Value::String(s)), Some(Value::Str(g))) => {
                        assert_eq!(s.as_bytes(), g.as_ref())
                    }
                    (Some(w @ serde_json::Value::Number(_)), Some(Value::Num(g))) => {
                        assert_eq!(w.to_string().as_bytes(), g)
                    }
                    (Some(serde_json::Value::Bool(b)), Some(Value::Bool(g))) => assert_eq!(*b, g),
                    (Some(serde_json::Value::Null), Some(Value::Null)) => {}
                    (Some(w), Some(Value::Composite(g))) => {
                        let back: serde_json::Value = serde_json::from_slice(g).unwrap();
                        assert_eq!(&back, w);
                    }
                    (w, g) => panic!(
                        "{p} in {}: want {w:?}, got {g:?}",
                        String::from_utf8_lossy(&text)
                    ),
                }
            }
            let mut damaged = text.clone();
            for _ in 0..3 {
                if damaged.is_empty() {
                    break;
                }
                let at = rng.random_range(0..damaged.len());
                match rng.random_range(0..3) {
                    0 => damaged[at] = rng.random(),
                    1 => damaged.truncate(at),
                    _ => {
                        damaged.remove(at);
                    }
                }
            }
            for p in paths {
                let _ = extract(&damaged, &Path::parse(p).unwrap());
            }
        }
    }
}
