//! What each operator of a checked definition does to one record, as pure
//! functions of the record's bytes: where a split sends it, whether a
//! filter keeps it, what a projection leaves of it, which key a key
//! operator gives it. Workers apply these between their input and their
//! sinks; a record none of them can read (not JSON where they must look)
//! goes to the dead-letter topic, never silently nowhere.
//!
//! Owns only these decisions; never buffers, batches or does I/O.

use std::cmp::Ordering;

use crate::definition::{Cmp, Operator, DEAD_LETTER};
use crate::field::{self, extract, Value};

/// What an operator made of a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Passed on unchanged, to the operator's output (or, for a split, to
    /// the named node).
    Forward(Option<String>),
    /// Passed on as these bytes (a projection).
    Rewritten(Vec<u8>),
    /// Passed on with this key (a key operator).
    Keyed(Vec<u8>),
    /// Dropped by a filter.
    Dropped,
    /// Sent to the dead-letter topic, with the reason.
    DeadLetter(String),
}

fn matches(v: &Value<'_>, op: Cmp, want: &str) -> bool {
    match op {
        Cmp::Exists => true,
        Cmp::Prefix => match v {
            Value::Str(s) => s.starts_with(want.as_bytes()),
            Value::Num(n) => n.starts_with(want.as_bytes()),
            _ => false,
        },
        _ => {
            let Some(o) = v.compare(want) else {
                return matches!(op, Cmp::Ne);
            };
            match op {
                Cmp::Eq => o == Ordering::Equal,
                Cmp::Ne => o != Ordering::Equal,
                Cmp::Lt => o == Ordering::Less,
                Cmp::Le => o != Ordering::Greater,
                Cmp::Gt => o == Ordering::Greater,
                Cmp::Ge => o != Ordering::Less,
                Cmp::Exists | Cmp::Prefix => unreachable!("handled above"),
            }
        }
    }
}

/// Writes `v` as JSON (strings re-escaped; everything else as it was).
/// Writes `v` as JSON (strings escaped; numbers and composites as read).
pub(crate) fn write_json(v: &Value<'_>, out: &mut Vec<u8>) {
    match v {
        Value::Str(s) => {
            out.push(b'"');
            for &c in s.iter() {
                match c {
                    b'"' => out.extend_from_slice(b"\\\""),
                    b'\\' => out.extend_from_slice(b"\\\\"),
                    0..=0x1f => out.extend_from_slice(format!("\\u{c:04x}").as_bytes()),
                    c => out.push(c),
                }
            }
            out.push(b'"');
        }
        Value::Num(n) | Value::Composite(n) => out.extend_from_slice(n),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Null => out.extend_from_slice(b"null"),
    }
}

/// The name a path is written under by a projection (its segments joined
/// by dots, escaped as a JSON string body).
fn key_text(path: &str) -> String {
    path.replace('\\', "\\\\").replace('"', "\\\"")
}

/// Applies `op` to `record` (JSON bytes, without the validator's stamp).
pub fn apply(op: &Operator, record: &[u8]) -> Outcome {
    let dead = |e: field::Error| Outcome::DeadLetter(e.to_string());
    match op {
        Operator::Split {
            field,
            routes,
            default,
        } => match extract(record, field) {
            Err(e) => dead(e),
            Ok(v) => {
                let route = match &v {
                    Some(Value::Str(s)) => std::str::from_utf8(s).ok().and_then(|s| routes.get(s)),
                    Some(Value::Num(n)) => std::str::from_utf8(n).ok().and_then(|s| routes.get(s)),
                    _ => None,
                };
                match route.unwrap_or(default) {
                    d if d == DEAD_LETTER => Outcome::DeadLetter(match v {
                        None => format!("no field `{field}` to split by"),
                        Some(_) => format!("no route for the value of `{field}`"),
                    }),
                    to => Outcome::Forward(Some(to.clone())),
                }
            }
        },
        Operator::Filter { field, op, value } => match extract(record, field) {
            Err(e) => dead(e),
            Ok(None) => Outcome::Dropped,
            Ok(Some(v)) if matches(&v, *op, value) => Outcome::Forward(None),
            Ok(Some(_)) => Outcome::Dropped,
        },
        Operator::Project(paths) => {
            let mut out = b"{".to_vec();
            let mut first = true;
            for p in paths {
                match extract(record, p) {
                    Err(e) => return dead(e),
                    Ok(None) => {}
                    Ok(Some(v)) => {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        out.push(b'"');
                        out.extend_from_slice(key_text(&p.to_string()).as_bytes());
                        out.extend_from_slice(b"\":");
                        write_json(&v, &mut out);
                    }
                }
            }
            out.push(b'}');
            Outcome::Rewritten(out)
        }
        Operator::Key(p) => match extract(record, p) {
            Err(e) => dead(e),
            Ok(None) => Outcome::DeadLetter(format!("no field `{p}` to key by")),
            Ok(Some(Value::Str(s))) => Outcome::Keyed(s.into_owned()),
            Ok(Some(v)) => {
                let mut k = Vec::new();
                write_json(&v, &mut k);
                Outcome::Keyed(k)
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::definition::{Flow, Kind};

    fn ops(text: &str) -> Vec<Operator> {
        Flow::parse(text)
            .unwrap()
            .nodes
            .into_iter()
            .filter_map(|n| match n.kind {
                Kind::Operator(o, _) => Some(o),
                _ => None,
            })
            .collect()
    }

    const FLOW: &str = r#"[[source]]
name = "s"
kind = "topic"
topic = "in"
[[operator]]
name = "split"
kind = "split"
input = "s"
field = "level"
routes = { INFO = "keep", "7" = "seven" }
[[operator]]
name = "keep"
kind = "filter"
input = "split"
field = "n"
op = "ge"
value = "10"
[[operator]]
name = "slim"
kind = "project"
input = "keep"
fields = ["level", "a.b", "missing"]
[[operator]]
name = "key"
kind = "key"
input = "slim"
field = "level"
[[sink]]
name = "seven"
kind = "topic"
topic = "seven"
input = "split"
[[sink]]
name = "out"
kind = "topic"
topic = "out"
input = "key"
"#;

    #[test]
    fn split_filter_project_and_key_act_on_raw_records() {
        let o = ops(FLOW);
        let (split, filter, project, key) = (&o[0], &o[1], &o[2], &o[3]);
        let rec = br#"{"level":"INFO","n":12,"a":{"b":"q\"x"},"msg":"long text"}"#;
        assert_eq!(apply(split, rec), Outcome::Forward(Some("keep".into())));
        assert_eq!(
            apply(split, br#"{"level":7}"#),
            Outcome::Forward(Some("seven".into()))
        );
        assert!(
            matches!(apply(split, br#"{"level":"DEBUG"}"#), Outcome::DeadLetter(m) if m.contains("no route"))
        );
        assert!(
            matches!(apply(split, br#"{"lvl":"INFO"}"#), Outcome::DeadLetter(m) if m.contains("no field"))
        );
        assert!(
            matches!(apply(split, b"not json"), Outcome::DeadLetter(m) if m.contains("malformed"))
        );
        assert_eq!(apply(filter, rec), Outcome::Forward(None));
        assert_eq!(apply(filter, br#"{"n":9.5}"#), Outcome::Dropped);
        assert_eq!(apply(filter, br#"{"x":1}"#), Outcome::Dropped);
        let Outcome::Rewritten(p) = apply(project, rec) else {
            panic!()
        };
        let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
        assert_eq!(v, serde_json::json!({"level": "INFO", "a.b": "q\"x"}));
        assert_eq!(apply(key, rec), Outcome::Keyed(b"INFO".to_vec()));
        assert_eq!(apply(key, br#"{"level":3}"#), Outcome::Keyed(b"3".to_vec()));
    }

    #[test]
    fn every_comparison_means_what_it_says() {
        let num = Value::Num(b"5");
        for (op, want, expect) in [
            (Cmp::Eq, "5", true),
            (Cmp::Ne, "5", false),
            (Cmp::Lt, "10", true),
            (Cmp::Le, "5", true),
            (Cmp::Gt, "10", false),
            (Cmp::Ge, "4", true),
            (Cmp::Exists, "", true),
            (Cmp::Prefix, "5", true),
        ] {
            assert_eq!(matches(&num, op, want), expect, "{op:?} {want}");
        }
        assert!(matches(&Value::Null, Cmp::Ne, "x"));
        assert!(!matches(&Value::Null, Cmp::Eq, "x"));
    }
}
