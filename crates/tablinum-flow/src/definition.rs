//! A dataflow definition: a TOML file of sources, operators and sinks,
//! checked whole before anything runs. Every error names the line it is
//! about.
//!
//! ```toml
//! [flow]
//! name = "splitter"
//! parallelism = 8              # tasks per operator (1..=PARALLELISM_MAX)
//! commit_interval_ms = 1000    # outputs and input positions commit together this often
//! durability = "sync"          # or "nosync"
//!
//! [[source]]
//! name = "logs"
//! kind = "topic"               # topic (tablinum) | kafka (also: brokers, group)
//! topic = "logs"
//!
//! [[operator]]
//! name = "by-level"
//! kind = "split"               # split | filter | project | key
//! input = "logs"
//! field = "level"              # a JSON field path (split, filter, key)
//! routes = { INFO = "info", WARNING = "warning", ERROR = "error" }
//! default = "dead-letter"      # where records without a route go
//!
//! [[sink]]
//! name = "info"
//! input = "by-level"
//! kind = "topic"               # topic | kafka | table | files
//! topic = "info"
//! ```
//!
//! Filter: `field`, `op` (eq ne lt le gt ge exists prefix), `value`.
//! Project: `fields` (paths kept). Key: `field` (the record's key: what
//! follows it is hash-partitioned; every other edge keeps partition p to
//! partition p). Sinks: topic and kafka name a `topic` (kafka also
//! `brokers`); table names a `table` and `key` (`field:PATH` or
//! `position`), and may take `metadata` (paths) and `index` (name = path);
//! files name a `dir` and `format` (`jsonl` or `parquet`). The user's
//! reference is docs/flows.md.
//! A split's routes name nodes whose `input` is the split. An operator's
//! output goes through a topic (`FLOW.NODE`, read by a stage of its own)
//! only with `materialize = true` (not on a split); other edges are fused
//! in memory.
//!
//! Owns the schema and its checks; never opens a topic or a file.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use serde::Deserialize;
use toml::Spanned;

use crate::field::Path;

/// Most tasks one operator may run as.
pub const PARALLELISM_MAX: u32 = 1_024;
/// Most sources, operators and sinks in one flow, together.
pub const NODES_MAX: usize = 256;
/// Longest commit interval, ms.
pub const COMMIT_INTERVAL_MS_MAX: u64 = 600_000;
/// Default commit interval, ms.
pub const COMMIT_INTERVAL_MS_DEFAULT: u64 = 1_000;
/// The route name that sends records to the flow's dead-letter topic.
pub const DEAD_LETTER: &str = "dead-letter";

/// Longest flow or node name, bytes.
pub const NAME_BYTES_MAX: usize = 64;
/// Longest secondary-index name of a table sink, bytes (the engine's).
pub const INDEX_NAME_BYTES_MAX: usize = tablinum_engine::options::INDEX_NAME_BYTES_MAX;

/// Checks a flow or node name: 1..=64 bytes of `[A-Za-z0-9_-]` (names
/// become parts of topic, table, writer and file names).
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > NAME_BYTES_MAX {
        return Err(format!(
            "{name:?} is {} bytes; allowed are 1..={NAME_BYTES_MAX}",
            name.len()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-')))
    {
        return Err(format!("{name:?} has {c:?}; allowed are A-Z a-z 0-9 _ -"));
    }
    Ok(())
}

/// A definition the checks refused: what was wrong and on which line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    /// 1-based line (0: the file as a whole).
    pub line: usize,
    /// What was wrong.
    pub message: String,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            write!(f, "flow definition: {}", self.message)
        } else {
            write!(f, "flow definition, line {}: {}", self.line, self.message)
        }
    }
}

impl std::error::Error for Error {}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    flow: Option<FlowToml>,
    #[serde(default)]
    source: Vec<NodeToml>,
    #[serde(default)]
    operator: Vec<NodeToml>,
    #[serde(default)]
    sink: Vec<NodeToml>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FlowToml {
    name: Option<Spanned<String>>,
    parallelism: Option<Spanned<u32>>,
    commit_interval_ms: Option<Spanned<u64>>,
    durability: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeToml {
    name: Spanned<String>,
    kind: Spanned<String>,
    input: Option<Spanned<String>>,
    topic: Option<String>,
    brokers: Option<String>,
    group: Option<String>,
    field: Option<Spanned<String>>,
    routes: Option<BTreeMap<String, Spanned<String>>>,
    default: Option<Spanned<String>>,
    op: Option<Spanned<String>>,
    value: Option<String>,
    fields: Option<Vec<Spanned<String>>>,
    table: Option<String>,
    key: Option<Spanned<String>>,
    dir: Option<String>,
    format: Option<Spanned<String>>,
    materialize: Option<bool>,
    metadata: Option<Vec<Spanned<String>>>,
    index: Option<BTreeMap<String, Spanned<String>>>,
}

/// Where a source reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A tablinum topic.
    Topic(String),
    /// A Kafka topic.
    Kafka {
        /// Bootstrap brokers.
        brokers: String,
        /// Topic.
        topic: String,
        /// Consumer group.
        group: String,
    },
}

/// A filter's comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cmp {
    /// `==`
    Eq,
    /// `!=`
    Ne,
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// The field is present.
    Exists,
    /// A string field starts with the value.
    Prefix,
}

/// What an operator does.
#[derive(Debug, Clone, PartialEq)]
pub enum Operator {
    /// Routes each record by a field's value to the node its route names.
    Split {
        /// The field read.
        field: Path,
        /// Field value -> downstream node.
        routes: BTreeMap<String, String>,
        /// Where unrouted records go (a node or [`DEAD_LETTER`]).
        default: String,
    },
    /// Keeps records whose field compares true.
    Filter {
        /// The field read.
        field: Path,
        /// The comparison.
        op: Cmp,
        /// The value compared with (unused by `exists`).
        value: String,
    },
    /// Keeps only these fields.
    Project(Vec<Path>),
    /// Sets each record's key from a field (hash repartition after it).
    Key(Path),
}

/// How a table sink keys its rows.
#[derive(Debug, Clone, PartialEq)]
pub enum TableKey {
    /// By a field's value (upsert).
    Field(Path),
    /// By the record's source position (idempotent replays).
    Position,
}

/// A file sink's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileFormat {
    /// JSON lines.
    Jsonl,
    /// Parquet.
    Parquet,
}

/// Where a sink writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Sink {
    /// A tablinum topic.
    Topic(String),
    /// A Kafka topic (transactional).
    Kafka {
        /// Bootstrap brokers.
        brokers: String,
        /// Topic.
        topic: String,
    },
    /// A tablinum table.
    Table {
        /// Table.
        table: String,
        /// Row key.
        key: TableKey,
        /// Fields whose values make each row's metadata (a JSON object of
        /// these paths as written, absent fields left out).
        metadata: Vec<(String, Path)>,
        /// Secondary-index terms: (index name, field); a record without
        /// the field gets no term in that index.
        index: Vec<(String, Path)>,
    },
    /// Files in the storage root.
    Files {
        /// Directory, relative to the storage root.
        dir: String,
        /// Format.
        format: FileFormat,
    },
}

/// One node of the graph.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// A source.
    Source(Source),
    /// An operator; `materialize`: its output edge is a topic.
    Operator(Operator, bool),
    /// A sink.
    Sink(Sink),
}

/// A node: its name, what it is, what it reads, and its line.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// Unique name.
    pub name: String,
    /// What it is.
    pub kind: Kind,
    /// The node it reads from (none for a source).
    pub input: Option<String>,
    /// The line its name is on.
    pub line: usize,
}

/// How records cross an edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Partitioning {
    /// Output partition p from input partition p.
    Preserve,
    /// By a hash of the key a `key` operator set.
    HashByKey,
}

/// An edge of the graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// Upstream node.
    pub from: String,
    /// Downstream node.
    pub to: String,
    /// How records cross it.
    pub partitioning: Partitioning,
    /// In memory within a worker (`false`: through a topic).
    pub fused: bool,
}

/// A checked definition.
#[derive(Debug, Clone, PartialEq)]
pub struct Flow {
    /// The flow's name.
    pub name: String,
    /// Tasks per operator.
    pub parallelism: u32,
    /// How often outputs and input positions commit together, ms.
    pub commit_interval_ms: u64,
    /// Whether commits wait for fsync.
    pub sync: bool,
    /// Every node, sources first, then in topological order.
    pub nodes: Vec<Node>,
    /// Every edge.
    pub edges: Vec<Edge>,
}

impl Flow {
    /// Its tasks: one per partition of every source and of every
    /// materialized operator's topic (each is read by a stage of its own).
    pub fn tasks(&self) -> u32 {
        let sources = self
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::Source(_) | Kind::Operator(_, true)))
            .count() as u32;
        sources * self.parallelism
    }
}

fn line_of(text: &str, at: usize) -> usize {
    text[..at.min(text.len())].matches('\n').count() + 1
}

fn err<T>(line: usize, message: impl Into<String>) -> Result<T, Error> {
    Err(Error {
        line,
        message: message.into(),
    })
}

impl Flow {
    /// Parses and checks a definition.
    pub fn parse(text: &str) -> Result<Flow, Error> {
        let f: FileToml = toml::from_str(text).map_err(|e| Error {
            line: e.span().map_or(0, |s| line_of(text, s.start)),
            message: e.message().to_string(),
        })?;
        let at = |s: std::ops::Range<usize>| line_of(text, s.start);
        let flow = f.flow.unwrap_or(FlowToml {
            name: None,
            parallelism: None,
            commit_interval_ms: None,
            durability: None,
        });
        if let Some(n) = &flow.name {
            check_name(n.get_ref()).map_err(|m| Error {
                line: at(n.span()),
                message: format!("flow name {m}"),
            })?;
        }
        let parallelism = match &flow.parallelism {
            Some(p) if !(1..=PARALLELISM_MAX).contains(p.get_ref()) => {
                return err(
                    at(p.span()),
                    format!(
                        "parallelism {} is outside 1..={PARALLELISM_MAX}",
                        p.get_ref()
                    ),
                )
            }
            Some(p) => *p.get_ref(),
            None => 1,
        };
        let commit_interval_ms = match &flow.commit_interval_ms {
            Some(c) if !(1..=COMMIT_INTERVAL_MS_MAX).contains(c.get_ref()) => {
                return err(
                    at(c.span()),
                    format!(
                        "commit_interval_ms {} is outside 1..={COMMIT_INTERVAL_MS_MAX}",
                        c.get_ref()
                    ),
                )
            }
            Some(c) => *c.get_ref(),
            None => COMMIT_INTERVAL_MS_DEFAULT,
        };
        let sync = match flow
            .durability
            .as_ref()
            .map(|d| (d.get_ref().as_str(), d.span()))
        {
            None | Some(("sync", _)) => true,
            Some(("nosync", _)) => false,
            Some((d, s)) => {
                return err(
                    at(s),
                    format!("durability {d:?}: expected \"sync\" or \"nosync\""),
                )
            }
        };
        let total = f.source.len() + f.operator.len() + f.sink.len();
        if total > NODES_MAX {
            return err(0, format!("{total} nodes exceeds NODES_MAX = {NODES_MAX}"));
        }
        if f.source.is_empty() {
            return err(0, "no [[source]]");
        }
        if f.sink.is_empty() {
            return err(0, "no [[sink]]");
        }
        let mut nodes = Vec::new();
        let mut lines: HashMap<String, usize> = HashMap::new();
        for (role, list) in [
            ("source", &f.source),
            ("operator", &f.operator),
            ("sink", &f.sink),
        ] {
            for n in list {
                let line = at(n.name.span());
                let name = n.name.get_ref().clone();
                if name.is_empty() || name == DEAD_LETTER {
                    return err(line, format!("{role} name {name:?} is reserved or empty"));
                }
                if let Err(m) = check_name(&name) {
                    return err(line, format!("{role} name {m}"));
                }
                if let Some(first) = lines.insert(name.clone(), line) {
                    return err(
                        line,
                        format!("{name:?} is defined twice (first on line {first})"),
                    );
                }
                let kind = node_kind(role, n, &at)?;
                match (role, &n.input) {
                    ("source", Some(i)) => {
                        return err(at(i.span()), format!("source {name:?} takes no input"))
                    }
                    ("source", None) => {}
                    (_, None) => return err(line, format!("{role} {name:?} has no input")),
                    _ => {}
                }
                nodes.push(Node {
                    name,
                    kind,
                    input: n.input.as_ref().map(|i| i.get_ref().clone()),
                    line,
                });
            }
        }
        let by_name: HashMap<&str, &Node> = nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        for n in &nodes {
            if let Some(i) = &n.input {
                match by_name.get(i.as_str()) {
                    None => {
                        return err(
                            n.line,
                            format!("{:?} reads {i:?}, which is not defined", n.name),
                        )
                    }
                    Some(up) if matches!(up.kind, Kind::Sink(_)) => {
                        return err(
                            n.line,
                            format!("{:?} reads sink {i:?}; sinks have no output", n.name),
                        )
                    }
                    _ => {}
                }
            }
            if let Kind::Operator(
                Operator::Split {
                    routes, default, ..
                },
                _,
            ) = &n.kind
            {
                for target in routes.values().chain(std::iter::once(default)) {
                    if target == DEAD_LETTER {
                        continue;
                    }
                    match by_name.get(target.as_str()) {
                        Some(t) if t.input.as_deref() == Some(n.name.as_str()) => {}
                        Some(_) => {
                            return err(
                                n.line,
                                format!(
                                    "split {:?} routes to {target:?}, whose input is not {:?}",
                                    n.name, n.name
                                ),
                            )
                        }
                        None => {
                            return err(
                                n.line,
                                format!(
                                    "split {:?} routes to {target:?}, which is not defined",
                                    n.name
                                ),
                            )
                        }
                    }
                }
            }
        }
        // Cycles: follow inputs upward from every node.
        for n in &nodes {
            let mut path = vec![n.name.as_str()];
            let mut cur = n;
            while let Some(i) = &cur.input {
                if let Some(pos) = path.iter().position(|p| *p == i.as_str()) {
                    let mut cycle: Vec<&str> = path[pos..].to_vec();
                    cycle.reverse();
                    return err(
                        n.line,
                        format!("cycle: {} -> {}", cycle.join(" -> "), cycle[0]),
                    );
                }
                path.push(i);
                cur = by_name[i.as_str()];
            }
        }
        // Every operator feeds something.
        for n in nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::Operator(..) | Kind::Source(_)))
        {
            if !nodes
                .iter()
                .any(|m| m.input.as_deref() == Some(n.name.as_str()))
            {
                return err(n.line, format!("{:?} feeds nothing", n.name));
            }
        }
        // Topological order: sources, then by depth.
        let depth = |n: &Node| {
            let mut d = 0;
            let mut cur = n;
            while let Some(i) = &cur.input {
                d += 1;
                cur = by_name[i.as_str()];
            }
            d
        };
        let mut order: Vec<(usize, usize)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (depth(n), i))
            .collect();
        order.sort();
        let sorted: Vec<Node> = order.iter().map(|&(_, i)| nodes[i].clone()).collect();
        let edges = sorted
            .iter()
            .filter_map(|n| {
                let from = n.input.as_ref()?;
                let up = by_name[from.as_str()];
                // Repartitioned from a key operator on; a source or a
                // materialized edge is a topic, everything else fused.
                let mut keyed = false;
                let mut cur = Some(up);
                while let Some(c) = cur {
                    if matches!(c.kind, Kind::Operator(Operator::Key(_), _)) {
                        keyed = true;
                        break;
                    }
                    cur = c.input.as_ref().map(|i| by_name[i.as_str()]);
                }
                let fused = !matches!(up.kind, Kind::Source(_) | Kind::Operator(_, true));
                Some(Edge {
                    from: from.clone(),
                    to: n.name.clone(),
                    partitioning: if keyed {
                        Partitioning::HashByKey
                    } else {
                        Partitioning::Preserve
                    },
                    fused,
                })
            })
            .collect();
        Ok(Flow {
            name: flow.name.map_or_else(|| "flow".into(), Spanned::into_inner),
            parallelism,
            commit_interval_ms,
            sync,
            nodes: sorted,
            edges,
        })
    }

    /// Whether `workers` workers of `slots` task slots each can host the
    /// flow (one task per operator and sink per partition of parallelism).
    pub fn check_capacity(&self, workers: u32, slots: u32) -> Result<(), Error> {
        let tasks = self
            .nodes
            .iter()
            .filter(|n| !matches!(n.kind, Kind::Source(_)))
            .count() as u64
            * u64::from(self.parallelism);
        let have = u64::from(workers) * u64::from(slots);
        if tasks > have {
            return err(
                0,
                format!(
                    "{tasks} tasks (parallelism {} x {} operators and sinks) need more than {workers} workers x {slots} slots = {have}",
                    self.parallelism,
                    tasks / u64::from(self.parallelism.max(1))
                ),
            );
        }
        Ok(())
    }
}

fn path_at(
    f: &Option<Spanned<String>>,
    what: &str,
    line: usize,
    at: &impl Fn(std::ops::Range<usize>) -> usize,
) -> Result<Path, Error> {
    match f {
        None => err(line, format!("{what} needs `field`")),
        Some(s) => Path::parse(s.get_ref()).map_err(|e| Error {
            line: at(s.span()),
            message: e.to_string(),
        }),
    }
}

fn need(v: &Option<String>, field: &str, what: &str, line: usize) -> Result<String, Error> {
    match v {
        Some(s) if !s.is_empty() => Ok(s.clone()),
        _ => err(line, format!("{what} needs `{field}`")),
    }
}

fn node_kind(
    role: &str,
    n: &NodeToml,
    at: &impl Fn(std::ops::Range<usize>) -> usize,
) -> Result<Kind, Error> {
    let line = at(n.name.span());
    let kline = at(n.kind.span());
    let what = format!("{} {:?} ({})", role, n.name.get_ref(), n.kind.get_ref());
    if (n.metadata.is_some() || n.index.is_some())
        && (role, n.kind.get_ref().as_str()) != ("sink", "table")
    {
        return err(
            line,
            format!("{what}: only table sinks take `metadata` and `index`"),
        );
    }
    Ok(match (role, n.kind.get_ref().as_str()) {
        ("source", "topic") => Kind::Source(Source::Topic(need(&n.topic, "topic", &what, line)?)),
        ("source", "kafka") => Kind::Source(Source::Kafka {
            brokers: need(&n.brokers, "brokers", &what, line)?,
            topic: need(&n.topic, "topic", &what, line)?,
            group: need(&n.group, "group", &what, line)?,
        }),
        ("operator", k) => {
            let op = match k {
                "split" => Operator::Split {
                    field: path_at(&n.field, &what, line, at)?,
                    routes: n
                        .routes
                        .as_ref()
                        .filter(|r| !r.is_empty())
                        .ok_or_else(|| Error {
                            line,
                            message: format!("{what} needs `routes`"),
                        })?
                        .iter()
                        .map(|(k, v)| (k.clone(), v.get_ref().clone()))
                        .collect(),
                    default: n
                        .default
                        .as_ref()
                        .map_or(DEAD_LETTER.to_string(), |d| d.get_ref().clone()),
                },
                "filter" => Operator::Filter {
                    field: path_at(&n.field, &what, line, at)?,
                    op: match n.op.as_ref().map(|o| (o.get_ref().as_str(), o.span())) {
                        Some(("eq", _)) => Cmp::Eq,
                        Some(("ne", _)) => Cmp::Ne,
                        Some(("lt", _)) => Cmp::Lt,
                        Some(("le", _)) => Cmp::Le,
                        Some(("gt", _)) => Cmp::Gt,
                        Some(("ge", _)) => Cmp::Ge,
                        Some(("exists", _)) => Cmp::Exists,
                        Some(("prefix", _)) => Cmp::Prefix,
                        Some((o, s)) => {
                            return err(
                                at(s),
                                format!(
                                    "op {o:?}: expected eq, ne, lt, le, gt, ge, exists or prefix"
                                ),
                            )
                        }
                        None => return err(line, format!("{what} needs `op`")),
                    },
                    value: n.value.clone().unwrap_or_default(),
                },
                "project" => {
                    let fields =
                        n.fields
                            .as_ref()
                            .filter(|f| !f.is_empty())
                            .ok_or_else(|| Error {
                                line,
                                message: format!("{what} needs `fields`"),
                            })?;
                    Operator::Project(
                        fields
                            .iter()
                            .map(|f| path_at(&Some(f.clone()), &what, line, at))
                            .collect::<Result<_, _>>()?,
                    )
                }
                "key" => Operator::Key(path_at(&n.field, &what, line, at)?),
                k => {
                    return err(
                        kline,
                        format!("operator kind {k:?}: expected split, filter, project or key"),
                    )
                }
            };
            let materialize = n.materialize.unwrap_or(false);
            if materialize && matches!(op, Operator::Split { .. }) {
                return err(
                    line,
                    format!("{what}: a split cannot be materialized (its routes are not in the records); materialize the operators it routes to"),
                );
            }
            Kind::Operator(op, materialize)
        }
        ("sink", "topic") => Kind::Sink(Sink::Topic(need(&n.topic, "topic", &what, line)?)),
        ("sink", "kafka") => Kind::Sink(Sink::Kafka {
            brokers: need(&n.brokers, "brokers", &what, line)?,
            topic: need(&n.topic, "topic", &what, line)?,
        }),
        ("sink", "table") => Kind::Sink(Sink::Table {
            metadata: n
                .metadata
                .iter()
                .flatten()
                .map(|f| {
                    let p = path_at(&Some(f.clone()), &what, line, at)?;
                    Ok((f.get_ref().clone(), p))
                })
                .collect::<Result<_, Error>>()?,
            index: n
                .index
                .iter()
                .flatten()
                .map(|(name, f)| {
                    if name.is_empty() || name.len() > INDEX_NAME_BYTES_MAX {
                        return err(
                            at(f.span()),
                            format!(
                                "index name {name:?} is {} bytes; allowed are 1..={INDEX_NAME_BYTES_MAX}",
                                name.len()
                            ),
                        );
                    }
                    Ok((name.clone(), path_at(&Some(f.clone()), &what, line, at)?))
                })
                .collect::<Result<_, Error>>()?,
            table: need(&n.table, "table", &what, line)?,
            key: match n.key.as_ref().map(|k| (k.get_ref().as_str(), k.span())) {
                None | Some(("position", _)) => TableKey::Position,
                Some((k, s)) => match k.strip_prefix("field:") {
                    Some(p) => TableKey::Field(Path::parse(p).map_err(|e| Error {
                        line: at(s.clone()),
                        message: e.to_string(),
                    })?),
                    None => {
                        return err(
                            at(s),
                            format!("key {k:?}: expected \"position\" or \"field:PATH\""),
                        )
                    }
                },
            },
        }),
        ("sink", "files") => Kind::Sink(Sink::Files {
            dir: need(&n.dir, "dir", &what, line)?,
            format: match n.format.as_ref().map(|f| (f.get_ref().as_str(), f.span())) {
                Some(("jsonl", _)) | None => FileFormat::Jsonl,
                Some(("parquet", _)) => FileFormat::Parquet,
                Some((f, s)) => {
                    return err(at(s), format!("format {f:?}: expected jsonl or parquet"))
                }
            },
        }),
        (role, k) => {
            let kinds = if role == "source" {
                "topic or kafka"
            } else {
                "topic, kafka, table or files"
            };
            return err(kline, format!("{role} kind {k:?}: expected {kinds}"));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPLITTER: &str = r#"[flow]
name = "splitter"
parallelism = 8
durability = "sync"

[[source]]
name = "logs"
kind = "topic"
topic = "logs"

[[operator]]
name = "by-level"
kind = "split"
input = "logs"
field = "level"
routes = { INFO = "info", WARNING = "warning", ERROR = "errors" }

[[sink]]
name = "info"
input = "by-level"
kind = "topic"
topic = "info"

[[sink]]
name = "warning"
input = "by-level"
kind = "files"
dir = "out/warning"
format = "parquet"

[[sink]]
name = "errors"
input = "by-level"
kind = "table"
table = "errors"
key = "field:id"
"#;

    #[test]
    fn the_report_splitter_parses_into_a_fused_graph() {
        let f = Flow::parse(SPLITTER).unwrap();
        assert_eq!(
            (f.name.as_str(), f.parallelism, f.sync),
            ("splitter", 8, true)
        );
        assert_eq!(f.commit_interval_ms, COMMIT_INTERVAL_MS_DEFAULT);
        assert_eq!(f.nodes[0].name, "logs");
        assert_eq!(f.nodes[1].name, "by-level");
        assert_eq!(f.edges.len(), 4);
        let e = f.edges.iter().find(|e| e.to == "info").unwrap();
        assert!(e.fused && e.partitioning == Partitioning::Preserve);
        let src = f.edges.iter().find(|e| e.from == "logs").unwrap();
        assert!(!src.fused, "a source edge is its topic");
        f.check_capacity(2, 16).unwrap();
        let e = f.check_capacity(2, 15).unwrap_err();
        assert!(e.message.contains("32 tasks"), "{e}");
    }

    fn line_and(text: &str) -> (usize, String) {
        let e = Flow::parse(text).unwrap_err();
        (e.line, e.to_string())
    }

    #[test]
    fn table_sinks_take_metadata_and_index_fields() {
        let text = SPLITTER.replace(
            "key = \"field:id\"",
            "key = \"field:id\"\nmetadata = [\"host\", \"ctx.pid\"]\nindex = { by_host = \"host\" }",
        );
        let f = Flow::parse(&text).unwrap();
        let Kind::Sink(Sink::Table {
            metadata, index, ..
        }) = &f.nodes.iter().find(|n| n.name == "errors").unwrap().kind
        else {
            panic!("errors is a table sink");
        };
        let names: Vec<&str> = metadata.iter().map(|m| m.0.as_str()).collect();
        assert_eq!(names, ["host", "ctx.pid"]);
        assert_eq!(index[0].0, "by_host");
    }

    #[test]
    fn every_error_names_its_line() {
        let cases: Vec<(String, usize, &str)> = vec![
            (
                SPLITTER.replace("topic = \"logs\"", "topic = \"logs\"\ncolour = \"red\""),
                10,
                "colour",
            ),
            (
                SPLITTER.replace("kind = \"split\"", "kind = \"splat\""),
                13,
                "splat",
            ),
            (
                SPLITTER.replace("input = \"logs\"", "input = \"nope\""),
                12,
                "not defined",
            ),
            (
                SPLITTER.replace("name = \"warning\"", "name = \"info\""),
                25,
                "defined twice (first on line 19)",
            ),
            (
                SPLITTER.replace("ERROR = \"errors\"", "ERROR = \"missing\""),
                12,
                "routes to \"missing\"",
            ),
            (
                SPLITTER.replace("parallelism = 8", "parallelism = 0"),
                3,
                "outside 1..=",
            ),
            (
                SPLITTER.replace("field = \"level\"", "field = \"a..b\""),
                15,
                "empty segment",
            ),
            (
                SPLITTER.replace("format = \"parquet\"", "format = \"csv\""),
                29,
                "csv",
            ),
            (
                SPLITTER.replace("key = \"field:id\"", "key = \"id\""),
                36,
                "position",
            ),
            (
                SPLITTER.replace("durability = \"sync\"", "durability = \"maybe\""),
                4,
                "nosync",
            ),
            (
                SPLITTER.replace(
                    "topic = \"info\"",
                    "topic = \"info\"\nindex = { a = \"b\" }",
                ),
                19,
                "only table sinks take `metadata` and `index`",
            ),
            (
                SPLITTER.replace(
                    "key = \"field:id\"",
                    "key = \"field:id\"\nindex = { by = \"a..b\" }",
                ),
                37,
                "empty segment",
            ),
        ];
        for (text, line, needle) in cases {
            let (l, msg) = line_and(&text);
            assert_eq!(l, line, "{msg}");
            assert!(msg.contains(needle), "{msg} lacks {needle:?}");
            assert!(msg.contains(&format!("line {line}")), "{msg}");
        }
    }

    #[test]
    fn cycles_dangling_operators_and_sink_inputs_are_refused() {
        let cyc = r#"[[source]]
name = "s"
kind = "topic"
topic = "t"
[[operator]]
name = "a"
kind = "key"
field = "k"
input = "b"
[[operator]]
name = "b"
kind = "project"
fields = ["x"]
input = "a"
[[sink]]
name = "out"
kind = "topic"
topic = "o"
input = "s"
"#;
        let (_, msg) = line_and(cyc);
        assert!(
            msg.contains("cycle") && (msg.contains("a -> b") || msg.contains("b -> a")),
            "{msg}"
        );
        let dangling = SPLITTER.to_string()
            + "[[operator]]\nname = \"lonely\"\nkind = \"key\"\nfield = \"id\"\ninput = \"logs\"\n";
        assert!(line_and(&dangling).1.contains("\"lonely\" feeds nothing"));
        let from_sink = SPLITTER.to_string()
            + "[[sink]]\nname = \"again\"\nkind = \"topic\"\ntopic = \"x\"\ninput = \"info\"\n";
        assert!(line_and(&from_sink).1.contains("sinks have no output"));
        assert!(line_and("").1.contains("no [[source]]"));
    }

    #[test]
    fn a_key_operator_repartitions_everything_after_it() {
        let text = r#"[[source]]
name = "s"
kind = "kafka"
brokers = "127.0.0.1:9092"
topic = "in"
group = "g"
[[operator]]
name = "k"
kind = "key"
field = "user.id"
input = "s"
materialize = true
[[operator]]
name = "f"
kind = "filter"
field = "n"
op = "gt"
value = "3"
input = "k"
[[sink]]
name = "out"
kind = "kafka"
brokers = "127.0.0.1:9092"
topic = "out"
input = "f"
"#;
        let f = Flow::parse(text).unwrap();
        let by = |to: &str| f.edges.iter().find(|e| e.to == to).unwrap().clone();
        assert_eq!(by("k").partitioning, Partitioning::Preserve);
        assert_eq!(by("f").partitioning, Partitioning::HashByKey);
        assert!(!by("f").fused, "a materialized edge is a topic");
        assert_eq!(
            f.tasks(),
            2,
            "the materialized topic is read by a stage of its own"
        );
        assert_eq!(by("out").partitioning, Partitioning::HashByKey);
        assert!(by("out").fused);
    }
}
