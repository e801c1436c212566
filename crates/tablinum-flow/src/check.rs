//! Validation of a flow's outputs, after or during a run: what the
//! generator wrote into the sources (its writer positions) is what is
//! expected; every committed record at every sink (topics, tables, files,
//! the dead-letter topic) is read back and its stamp observed. Lost and
//! duplicated come from the merged bitsets ([`crate::validate`]).
//!
//! Owns reading sinks back; never writes anything.

use std::ops::ControlFlow;
use std::path::Path as FsPath;

use tablinum_client::{AsyncClient, Query};

use crate::definition::{Flow, Kind, Sink, Source};
use crate::generator::{self, GENERATOR_WRITER};
use crate::run::{dead_letter_topic, is_committed_file, RunError};
use crate::validate::{stamp_of, Counts, Validator};

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

/// How many records the generator wrote into each partition of `topic`.
pub async fn generated(c: &AsyncClient, topic: &str) -> Result<Vec<u64>, RunError> {
    let t = c
        .topic(topic)
        .await
        .map_err(cluster(format!("topic {topic}")))?;
    let mut out = Vec::new();
    for p in 0..t.partitions() {
        let v = c
            .writer_position(topic, p, GENERATOR_WRITER)
            .await
            .map_err(cluster(format!("topic {topic}")))?;
        out.push(if v.is_empty() {
            0
        } else {
            tablinum_proto::topic::decode_offset(&v).map_err(RunError::Cluster)?
        });
    }
    Ok(out)
}

fn observe(v: &mut Validator, seen: &mut SinkSeen, record: &[u8]) -> Result<(), RunError> {
    seen.records += 1;
    match stamp_of(record) {
        Some(s) => v.observe(s).map_err(limit),
        None => {
            seen.unstamped += 1;
            Ok(())
        }
    }
}

/// Observes every record of every partition of `topic`.
pub async fn read_topic(
    c: &AsyncClient,
    topic: &str,
    v: &mut Validator,
    seen: &mut SinkSeen,
) -> Result<(), RunError> {
    let t = c
        .topic(topic)
        .await
        .map_err(cluster(format!("topic {topic}")))?;
    for p in 0..t.partitions() {
        let start = c
            .topic_head(topic, p)
            .await
            .map_err(cluster(format!("topic {topic}")))?
            .start;
        let mut err = None;
        c.read_topic(
            topic,
            p,
            start,
            0,
            &mut |r| match observe(v, seen, &r.value) {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    err = Some(e);
                    ControlFlow::Break(())
                }
            },
        )
        .await
        .map_err(cluster(format!("reading topic {topic}")))?;
        if let Some(e) = err {
            return Err(e);
        }
    }
    Ok(())
}

/// Observes every row of `table`.
pub async fn read_table(
    c: &AsyncClient,
    table: &str,
    v: &mut Validator,
    seen: &mut SinkSeen,
) -> Result<(), RunError> {
    let mut err = None;
    c.query_until(
        &Query::new(table),
        &mut |r| match observe(v, seen, &r.value) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                err = Some(e);
                ControlFlow::Break(())
            }
        },
    )
    .await
    .map_err(cluster(format!("reading table {table}")))?;
    err.map_or(Ok(()), Err)
}

/// Observes every line of every committed file in `dir` (in-progress files
/// never count).
pub fn read_files(dir: &FsPath, v: &mut Validator, seen: &mut SinkSeen) -> Result<(), RunError> {
    let io = |e: std::io::Error| RunError::Io(format!("reading {}: {e}", dir.display()));
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(io)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    for n in names {
        if !is_committed_file(&n) {
            continue;
        }
        if n.ends_with(crate::run::PARQUET_EXT) {
            read_parquet(&dir.join(&n), v, seen)?;
            continue;
        }
        let data = std::fs::read(dir.join(&n)).map_err(io)?;
        for line in data.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            observe(v, seen, line)?;
        }
    }
    Ok(())
}

/// Validates what `flow` delivered: expected from the generator's counts in
/// its source topics, observed at every sink and the dead-letter topic.
pub async fn validate(c: &AsyncClient, flow: &Flow, root: &FsPath) -> Result<Report, RunError> {
    let mut v = Validator::new();
    for n in &flow.nodes {
        match &n.kind {
            Kind::Source(Source::Topic(t)) => {
                for (w, count) in generator::expected(&generated(c, t).await?) {
                    v.expect(w, count).map_err(limit)?;
                }
            }
            Kind::Source(Source::Kafka { brokers, topic, .. }) => {
                expect_from_kafka(brokers, topic, &mut v, n.line)?;
            }
            _ => {}
        }
    }
    let mut report = Report::default();
    for n in &flow.nodes {
        let Kind::Sink(s) = &n.kind else { continue };
        let mut seen = SinkSeen {
            name: n.name.clone(),
            ..SinkSeen::default()
        };
        match s {
            Sink::Topic(t) => read_topic(c, t, &mut v, &mut seen).await?,
            Sink::Table { table, .. } => read_table(c, table, &mut v, &mut seen).await?,
            Sink::Files { dir, .. } => read_files(&root.join(dir), &mut v, &mut seen)?,
            Sink::Kafka { brokers, topic } => {
                read_kafka(brokers, topic, &mut v, &mut seen, n.line)?
            }
        }
        report.sinks.push(seen);
    }
    let mut seen = SinkSeen {
        name: crate::definition::DEAD_LETTER.into(),
        ..SinkSeen::default()
    };
    let dl = dead_letter_topic(flow);
    match c.topic(&dl).await {
        Ok(_) => read_topic(c, &dl, &mut v, &mut seen).await?,
        Err(tablinum_client::Error::NotFound(_)) => {}
        Err(e) => return Err(cluster(format!("topic {dl}"))(e)),
    }
    report.sinks.push(seen);
    report.counts = v.report();
    Ok(report)
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

/// Observes every committed record of a Kafka topic.
#[cfg(feature = "kafka")]
fn read_kafka(
    brokers: &str,
    topic: &str,
    v: &mut Validator,
    seen: &mut SinkSeen,
    _line: usize,
) -> Result<(), RunError> {
    let n = crate::kafka::partitions(brokers, topic)?
        .ok_or_else(|| RunError::Setup(format!("Kafka topic {topic} does not exist")))?;
    let mut err = None;
    for p in 0..n {
        crate::kafka::read_partition(brokers, topic, p, &mut |_, _, r| {
            if err.is_none() {
                if let Err(e) = observe(v, seen, r) {
                    err = Some(e);
                }
            }
        })?;
    }
    err.map_or(Ok(()), Err)
}

#[cfg(not(feature = "kafka"))]
fn expect_from_kafka(_: &str, _: &str, _: &mut Validator, line: usize) -> Result<(), RunError> {
    Err(RunError::Setup(format!(
        "line {line}: Kafka is not in this build (feature `kafka`)"
    )))
}

#[cfg(not(feature = "kafka"))]
fn read_kafka(
    _: &str,
    _: &str,
    _: &mut Validator,
    _: &mut SinkSeen,
    line: usize,
) -> Result<(), RunError> {
    Err(RunError::Setup(format!(
        "line {line}: Kafka is not in this build (feature `kafka`)"
    )))
}

#[cfg(feature = "parquet")]
fn read_parquet(path: &FsPath, v: &mut Validator, seen: &mut SinkSeen) -> Result<(), RunError> {
    let mut err = None;
    crate::parquet_file::read(path, &mut |_, _, r| {
        if err.is_none() {
            if let Err(e) = observe(v, seen, r) {
                err = Some(e);
            }
        }
    })
    .map_err(RunError::Io)?;
    err.map_or(Ok(()), Err)
}

#[cfg(not(feature = "parquet"))]
fn read_parquet(path: &FsPath, _: &mut Validator, _: &mut SinkSeen) -> Result<(), RunError> {
    Err(RunError::Setup(format!(
        "{}: Parquet is not in this build (feature `parquet`)",
        path.display()
    )))
}
