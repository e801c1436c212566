//! Validation of a flow's outputs, after or during a run: what the
//! generator wrote into the sources (its writer positions) is what is
//! expected; every committed record at every sink (topics, tables, files,
//! the dead-letter topic) is read back and its stamp observed. Lost and
//! duplicated come from the merged bitsets ([`crate::validate`]).
//!
//! [`Live`] does the same while the flow runs: each [`Live::tick`] reads
//! only what topics and files committed since the last one (tables and
//! Kafka topics are read whole again), reads what the generator made *after*
//! reading the sinks, and counts a stamp only once the generator's count
//! covers it — a record generated and delivered between the two reads
//! waits for the next tick instead of counting as unexpected.
//!
//! Owns reading sinks back; never writes anything.

use std::collections::{HashMap, HashSet};
use std::ops::ControlFlow;
use std::path::{Path as FsPath, PathBuf};

use tablinum_client::{AsyncClient, Query};

use crate::definition::{Flow, Kind, Sink, Source};
use crate::generator::{self, GENERATOR_WRITER};
use crate::run::{dead_letter_topic, is_committed_file, RunError};
use crate::validate::{stamp_of, Counts, Stamp, Validator};

/// What one sink held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SinkSeen {
    /// The sink's name.
    pub name: String,
    /// Records read back.
    pub records: u64,
    /// Records without a stamp (not from the generator).
    pub unstamped: u64,
}

/// A flow's validation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Report {
    /// Over every sink together.
    pub counts: Counts,
    /// Per sink, the dead-letter topic last.
    pub sinks: Vec<SinkSeen>,
}

fn cluster(what: String) -> impl FnOnce(tablinum_client::Error) -> RunError {
    move |e| RunError::Cluster(format!("{what}: {e}"))
}

fn limit(e: crate::validate::Error) -> RunError {
    RunError::Setup(e.to_string())
}

/// How many records the generator wrote into partition `p` of `topic`
/// (its writer position).
pub async fn generated_in(c: &AsyncClient, topic: &str, p: u32) -> Result<u64, RunError> {
    let v = c
        .writer_position(topic, p, GENERATOR_WRITER)
        .await
        .map_err(cluster(format!("topic {topic}")))?;
    if v.is_empty() {
        return Ok(0);
    }
    tablinum_proto::topic::decode_offset(&v).map_err(RunError::Cluster)
}

/// How many records the generator wrote into each partition of `topic`.
pub async fn generated(c: &AsyncClient, topic: &str) -> Result<Vec<u64>, RunError> {
    let t = c
        .topic(topic)
        .await
        .map_err(cluster(format!("topic {topic}")))?;
    let mut out = Vec::new();
    for p in 0..t.partitions() {
        out.push(generated_in(c, topic, p).await?);
    }
    Ok(out)
}

/// Validates what `flow` delivered: every sink and the dead-letter topic
/// read whole, then what the generator made into its sources (read after
/// the sinks, so it covers everything they hold: a stamp it does not cover
/// is unexpected).
pub async fn validate(c: &AsyncClient, flow: &Flow, root: &FsPath) -> Result<Report, RunError> {
    let mut live = Live::new(flow);
    let mut r = live.tick(c, flow, root).await?;
    r.counts.unexpected += live.staged.len() as u64 + live.whole_beyond;
    Ok(r)
}

/// Expects what a Kafka source holds: every stamped record in it (a window
/// expects one past the highest sequence seen in it).
#[cfg(feature = "kafka")]
fn expect_from_kafka(
    brokers: &str,
    topic: &str,
    v: &mut Validator,
    _line: usize,
) -> Result<(), RunError> {
    let n = crate::kafka::partitions(brokers, topic)?
        .ok_or_else(|| RunError::Setup(format!("Kafka topic {topic} does not exist")))?;
    let mut top: std::collections::BTreeMap<u32, u32> = std::collections::BTreeMap::new();
    for p in 0..n {
        crate::kafka::read_partition(brokers, topic, p, &mut |_, _, r| {
            if let Some(s) = stamp_of(r) {
                let e = top.entry(s.window).or_insert(0);
                *e = (*e).max(s.seq + 1);
            }
        })?;
    }
    for (w, count) in top {
        v.expect(w, count).map_err(limit)?;
    }
    Ok(())
}

#[cfg(not(feature = "kafka"))]
fn expect_from_kafka(_: &str, _: &str, _: &mut Validator, line: usize) -> Result<(), RunError> {
    Err(RunError::Setup(format!(
        "line {line}: Kafka is not in this build (feature `kafka`)"
    )))
}

/// A validation that follows a running flow (see the module comment).
#[derive(Debug, Default)]
pub struct Live {
    /// What append-only sinks (topics, files, the dead-letter topic)
    /// delivered and the generator's counts cover.
    base: Validator,
    /// Next offset to read, per (topic, partition).
    cursors: HashMap<(String, u32), u64>,
    /// Committed files read already.
    files: HashSet<PathBuf>,
    /// Stamps read but not yet covered by the generator's counts.
    staged: Vec<Stamp>,
    /// Stamps the last tick read from tables and Kafka sinks that the
    /// generator's counts did not cover.
    whole_beyond: u64,
    /// Per sink (the dead-letter topic last): what append-only reads saw.
    seen: Vec<SinkSeen>,
}

impl Live {
    /// A live validation of `flow`, nothing read yet.
    pub fn new(flow: &Flow) -> Live {
        let mut seen: Vec<SinkSeen> = flow
            .nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::Sink(_)))
            .map(|n| SinkSeen {
                name: n.name.clone(),
                ..SinkSeen::default()
            })
            .collect();
        seen.push(SinkSeen {
            name: crate::definition::DEAD_LETTER.into(),
            ..SinkSeen::default()
        });
        Live {
            seen,
            ..Live::default()
        }
    }

    /// Reads what arrived since the last tick and reports every sink so
    /// far. `lost` here is what has not arrived *yet*.
    pub async fn tick(
        &mut self,
        c: &AsyncClient,
        flow: &Flow,
        root: &FsPath,
    ) -> Result<Report, RunError> {
        // Sinks first, then the generator's counts (see the module comment).
        let mut whole: Vec<Stamp> = Vec::new();
        let mut whole_seen = Vec::new();
        let sinks: Vec<&Sink> = flow
            .nodes
            .iter()
            .filter_map(|n| match &n.kind {
                Kind::Sink(s) => Some(s),
                _ => None,
            })
            .collect();
        for (i, s) in sinks.iter().enumerate() {
            match s {
                Sink::Topic(t) => self.read_new(c, t, i, false).await?,
                Sink::Files { dir, .. } => self.read_new_files(&root.join(dir), i)?,
                Sink::Table { table, .. } => {
                    let mut seen = SinkSeen {
                        name: self.seen[i].name.clone(),
                        ..SinkSeen::default()
                    };
                    c.query_until(&Query::new(table), &mut |r| {
                        note(&mut whole, &mut seen, &r.value);
                        ControlFlow::Continue(())
                    })
                    .await
                    .map_err(cluster(format!("reading table {table}")))?;
                    whole_seen.push((i, seen));
                }
                Sink::Kafka { brokers, topic } => {
                    let mut seen = SinkSeen {
                        name: self.seen[i].name.clone(),
                        ..SinkSeen::default()
                    };
                    kafka_stamps(brokers, topic, &mut whole, &mut seen)?;
                    whole_seen.push((i, seen));
                }
            }
        }
        let last = self.seen.len() - 1;
        self.read_new(c, &dead_letter_topic(flow), last, true)
            .await?;
        for n in &flow.nodes {
            match &n.kind {
                Kind::Source(Source::Topic(t)) => {
                    for (w, count) in generator::expected(&generated(c, t).await?) {
                        self.base.expect(w, count).map_err(limit)?;
                    }
                }
                Kind::Source(Source::Kafka { brokers, topic, .. }) => {
                    expect_from_kafka(brokers, topic, &mut self.base, n.line)?;
                }
                _ => {}
            }
        }
        let staged = std::mem::take(&mut self.staged);
        for s in staged {
            if s.seq < self.base.expected(s.window) {
                self.base.observe(s).map_err(limit)?;
            } else {
                self.staged.push(s);
            }
        }
        let mut v = self.base.clone();
        self.whole_beyond = 0;
        for s in whole {
            if s.seq < v.expected(s.window) {
                v.observe(s).map_err(limit)?;
            } else {
                self.whole_beyond += 1;
            }
        }
        let mut sinks_seen = self.seen.clone();
        for (i, seen) in whole_seen {
            sinks_seen[i] = seen;
        }
        Ok(Report {
            counts: v.report(),
            sinks: sinks_seen,
        })
    }

    /// Stages what `topic` committed past the cursors, counted in sink
    /// `i`; a topic that does not exist (yet) is nothing when `missing_ok`.
    async fn read_new(
        &mut self,
        c: &AsyncClient,
        topic: &str,
        i: usize,
        missing_ok: bool,
    ) -> Result<(), RunError> {
        let t = match c.topic(topic).await {
            Ok(t) => t,
            Err(tablinum_client::Error::NotFound(_)) if missing_ok => return Ok(()),
            Err(e) => return Err(cluster(format!("topic {topic}"))(e)),
        };
        for p in 0..t.partitions() {
            let key = (topic.to_string(), p);
            let from = match self.cursors.get(&key) {
                Some(&n) => n,
                None => {
                    c.topic_head(topic, p)
                        .await
                        .map_err(cluster(format!("topic {topic}")))?
                        .start
                }
            };
            let (staged, seen) = (&mut self.staged, &mut self.seen[i]);
            let next = c
                .read_topic(topic, p, from, 0, &mut |r| {
                    note(staged, seen, &r.value);
                    ControlFlow::Continue(())
                })
                .await
                .map_err(cluster(format!("reading topic {topic}")))?;
            self.cursors.insert(key, next);
        }
        Ok(())
    }

    /// Stages the lines of committed files not read yet, counted in sink
    /// `i`.
    fn read_new_files(&mut self, dir: &FsPath, i: usize) -> Result<(), RunError> {
        let io = |e: std::io::Error| RunError::Io(format!("reading {}: {e}", dir.display()));
        let names: Vec<String> = match std::fs::read_dir(dir) {
            Ok(rd) => rd
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| is_committed_file(n))
                .collect(),
            // Not made yet: the flow has not started.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io(e)),
        };
        for n in names {
            let path = dir.join(&n);
            if self.files.contains(&path) {
                continue;
            }
            if n.ends_with(crate::run::PARQUET_EXT) {
                read_parquet_stamps(&path, &mut self.staged, &mut self.seen[i])?;
            } else {
                let data = std::fs::read(&path).map_err(io)?;
                for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    note(&mut self.staged, &mut self.seen[i], line);
                }
            }
            self.files.insert(path);
        }
        Ok(())
    }
}

/// Counts `record` in `seen` and keeps its stamp, if any.
fn note(stamps: &mut Vec<Stamp>, seen: &mut SinkSeen, record: &[u8]) {
    seen.records += 1;
    match stamp_of(record) {
        Some(s) => stamps.push(s),
        None => seen.unstamped += 1,
    }
}

#[cfg(feature = "kafka")]
fn kafka_stamps(
    brokers: &str,
    topic: &str,
    stamps: &mut Vec<Stamp>,
    seen: &mut SinkSeen,
) -> Result<(), RunError> {
    let n = crate::kafka::partitions(brokers, topic)?
        .ok_or_else(|| RunError::Setup(format!("Kafka topic {topic} does not exist")))?;
    for p in 0..n {
        crate::kafka::read_partition(brokers, topic, p, &mut |_, _, r| note(stamps, seen, r))?;
    }
    Ok(())
}

#[cfg(not(feature = "kafka"))]
fn kafka_stamps(_: &str, _: &str, _: &mut Vec<Stamp>, _: &mut SinkSeen) -> Result<(), RunError> {
    Err(RunError::Setup(
        "Kafka is not in this build (feature `kafka`)".into(),
    ))
}

#[cfg(feature = "parquet")]
fn read_parquet_stamps(
    path: &FsPath,
    stamps: &mut Vec<Stamp>,
    seen: &mut SinkSeen,
) -> Result<(), RunError> {
    crate::parquet_file::read(path, &mut |_, _, r| note(stamps, seen, r)).map_err(RunError::Io)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet_stamps(
    path: &FsPath,
    _: &mut Vec<Stamp>,
    _: &mut SinkSeen,
) -> Result<(), RunError> {
    Err(RunError::Setup(format!(
        "{}: Parquet is not in this build (feature `parquet`)",
        path.display()
    )))
}
