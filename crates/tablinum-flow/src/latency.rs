//! End-to-end latency of a flow, two ways:
//! - [`measure`], between a generated tablinum topic and tablinum topic
//!   sinks, after the fact: for every record at a sink, the time its output
//!   append committed minus the time its input append was acknowledged,
//!   both read from the topics' append marks (docs/format.md, "Topics"); the
//!   input record is found from its validation stamp ([`source_of`]).
//!   Granularity: one append (a generator batch on the way in, a task's
//!   commit on the way out), so the figure includes the commit interval, as
//!   a reader of the sink sees it.
//! - [`follow_kafka`], between a Kafka source and Kafka sinks, live: a
//!   read_committed reader follows the sinks from now and notes when each
//!   stamped record becomes visible; the input record's create time is its
//!   Kafka timestamp. Whatever wrote the sinks (tablinum or another stream
//!   processor) is measured the same way.
//!
//! Owns the mapping and the percentiles; never writes anything.

use std::collections::HashMap;
use std::ops::ControlFlow;

use tablinum_client::{AsyncClient, Query};
use tablinum_proto::topic::{self, Mark};

use crate::definition::{Flow, Kind, Sink, Source};
use crate::generator::WINDOW_RECORDS;
use crate::run::RunError;
use crate::validate::{stamp_of, Stamp};

/// The (partition, offset) of the generated record stamped `s` in a topic
/// of `partitions` partitions: the inverse of `generator::stamp_at`.
pub fn source_of(partitions: u32, s: Stamp) -> Option<(u32, u64)> {
    if partitions == 0 {
        return None;
    }
    let p = s.window % partitions;
    let offset = u64::from(s.window / partitions) * WINDOW_RECORDS + u64::from(s.seq);
    Some((p, offset))
}

/// The time of the append holding `offset`: the mark at or before it.
fn time_at(marks: &[Mark], offset: u64) -> Option<u64> {
    let i = marks.partition_point(|m| m.offset <= offset);
    (i > 0).then(|| marks[i - 1].unix_ms)
}

/// Latency percentiles, ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Latency {
    /// Records measured.
    pub records: u64,
    /// Median.
    pub p50_ms: u64,
    /// 99th percentile.
    pub p99_ms: u64,
    /// Largest.
    pub max_ms: u64,
}

impl Latency {
    /// Percentiles of `samples` (sorted in place); none when empty.
    pub fn of(samples: &mut [u64]) -> Option<Latency> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_unstable();
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Some(Latency {
            records: samples.len() as u64,
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: samples[samples.len() - 1],
        })
    }
}

async fn marks(c: &AsyncClient, t: &str, p: u32) -> Result<Vec<Mark>, RunError> {
    let mut q = Query::new(topic::table_name(t));
    q.start = topic::mark_key(p, 0);
    q.end = topic::mark_key(p, u64::MAX);
    let mut out = Vec::new();
    let mut bad = None;
    c.query_until(&q, &mut |r| match Mark::decode(p, &r.key, &r.value) {
        Ok(m) => {
            out.push(m);
            ControlFlow::Continue(())
        }
        Err(e) => {
            bad = Some(e);
            ControlFlow::Break(())
        }
    })
    .await
    .map_err(|e| RunError::Cluster(format!("reading the marks of topic {t}: {e}")))?;
    match bad {
        Some(e) => Err(RunError::Cluster(format!("topic {t} partition {p}: {e}"))),
        None => Ok(out),
    }
}

/// The latency of every stamped record in `flow`'s topic sinks, when the
/// flow reads exactly one tablinum topic (none otherwise, or when no
/// record could be measured).
pub async fn measure(c: &AsyncClient, flow: &Flow) -> Result<Option<Latency>, RunError> {
    let sources: Vec<&String> = flow
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            Kind::Source(Source::Topic(t)) => Some(t),
            _ => None,
        })
        .collect();
    let [source] = sources[..] else {
        return Ok(None);
    };
    let cluster =
        |what: String| move |e: tablinum_client::Error| RunError::Cluster(format!("{what}: {e}"));
    let parts = c
        .topic(source)
        .await
        .map_err(cluster(format!("topic {source}")))?
        .partitions();
    let mut input: HashMap<u32, Vec<Mark>> = HashMap::new();
    for p in 0..parts {
        input.insert(p, marks(c, source, p).await?);
    }
    let mut samples = Vec::new();
    // Sinks that share a topic are read once.
    let sinks: std::collections::BTreeSet<&String> = flow
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            Kind::Sink(Sink::Topic(t)) => Some(t),
            _ => None,
        })
        .collect();
    for t in sinks {
        let out_parts = c
            .topic(t)
            .await
            .map_err(cluster(format!("topic {t}")))?
            .partitions();
        for q in 0..out_parts {
            let out = marks(c, t, q).await?;
            let start = c
                .topic_head(t, q)
                .await
                .map_err(cluster(format!("topic {t}")))?
                .start;
            c.read_topic(t, q, start, 0, &mut |r| {
                let at_in = stamp_of(&r.value)
                    .and_then(|s| source_of(parts, s))
                    .and_then(|(p, o)| time_at(input.get(&p)?, o));
                if let (Some(a), Some(b)) = (at_in, time_at(&out, r.offset)) {
                    samples.push(b.saturating_sub(a));
                }
                ControlFlow::Continue(())
            })
            .await
            .map_err(cluster(format!("reading topic {t}")))?;
        }
    }
    Ok(Latency::of(&mut samples))
}

/// The latency from a Kafka source's create times to when each stamped
/// record became visible at the flow's Kafka sinks (read_committed),
/// following the sinks from now until `expect` records arrived or `limit`
/// passed; none when no record could be measured. The flow must read one
/// Kafka topic and write only Kafka sinks. Start it before the input is
/// generated.
#[cfg(feature = "kafka")]
pub fn follow_kafka(
    flow: &Flow,
    expect: u64,
    limit: std::time::Duration,
) -> Result<Option<Latency>, RunError> {
    let mut source = None;
    let mut sinks = std::collections::BTreeSet::new();
    let mut brokers_of_sinks = None;
    for n in &flow.nodes {
        match &n.kind {
            Kind::Source(Source::Kafka { brokers, topic, .. }) if source.is_none() => {
                source = Some((brokers, topic));
            }
            Kind::Source(_) => {
                return Err(RunError::Setup(format!(
                    "line {}: following latency needs exactly one source, a Kafka topic",
                    n.line
                )))
            }
            Kind::Sink(Sink::Kafka { brokers, topic }) => {
                if brokers_of_sinks.is_some_and(|b| b != brokers) {
                    return Err(RunError::Setup(format!(
                        "line {}: following latency needs every sink on the same brokers",
                        n.line
                    )));
                }
                brokers_of_sinks = Some(brokers);
                sinks.insert(topic.clone());
            }
            Kind::Sink(_) => {
                return Err(RunError::Setup(format!(
                    "line {}: following latency reads Kafka sinks only",
                    n.line
                )))
            }
            _ => {}
        }
    }
    let (Some((src_brokers, src)), Some(brokers)) = (source, brokers_of_sinks) else {
        return Err(RunError::Setup(
            "following latency needs a Kafka source and at least one Kafka sink".into(),
        ));
    };
    let sinks: Vec<String> = sinks.into_iter().collect();
    let visible = crate::kafka::follow_visible(brokers, &sinks, expect, limit)?;
    let mut samples = crate::kafka::since_created(src_brokers, src, &visible)?;
    Ok(Latency::of(&mut samples))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generator::stamp_at;

    #[test]
    fn a_stamp_leads_back_to_its_record() {
        for parts in [1u32, 3, 8] {
            for p in 0..parts {
                for off in [
                    0,
                    1,
                    WINDOW_RECORDS - 1,
                    WINDOW_RECORDS,
                    5 * WINDOW_RECORDS + 7,
                ] {
                    let s = stamp_at(parts, p, off).unwrap();
                    assert_eq!(source_of(parts, s), Some((p, off)));
                }
            }
        }
        assert_eq!(source_of(0, Stamp { window: 1, seq: 1 }), None);
    }

    #[test]
    fn times_come_from_the_mark_at_or_before_and_percentiles_from_sorted_samples() {
        let m = |offset, unix_ms| Mark {
            offset,
            unix_ms,
            bytes: 1,
        };
        let marks = [m(0, 100), m(10, 200), m(20, 300)];
        assert_eq!(time_at(&marks, 0), Some(100));
        assert_eq!(time_at(&marks, 9), Some(100));
        assert_eq!(time_at(&marks, 10), Some(200));
        assert_eq!(time_at(&marks, 99), Some(300));
        assert_eq!(time_at(&marks[1..], 5), None);
        let mut s: Vec<u64> = (1..=100).rev().collect();
        let l = Latency::of(&mut s).unwrap();
        assert_eq!(
            (l.records, l.p50_ms, l.p99_ms, l.max_ms),
            (100, 51, 99, 100)
        );
        assert_eq!(Latency::of(&mut []), None);
    }
}
