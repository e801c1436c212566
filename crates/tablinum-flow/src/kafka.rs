//! Kafka, the real distributed log, through rdkafka (librdkafka): a source
//! that reads one partition per task with `read_committed`, and a sink
//! that writes each commit as one Kafka **transaction** holding the
//! records and the task's input position (a marker in the compacted
//! positions topic `FLOW.positions`), so Kafka sinks are exactly once too.
//! The producer's `transactional.id` is the task's writer name: a restarted
//! task fences its predecessor (`init_transactions` aborts whatever it left
//! open) before reading its position back.
//!
//! Owns every call into rdkafka; blocking calls run in
//! `tokio::task::block_in_place`. Never decides what a record becomes.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::run::RunError;
use crate::validate::Stamp;

/// How long one Kafka call may take before the task fails, ms.
pub const KAFKA_TIMEOUT_MS: u64 = 30_000;

fn timeout() -> Duration {
    Duration::from_millis(KAFKA_TIMEOUT_MS)
}

fn kerr(what: impl std::fmt::Display) -> impl FnOnce(KafkaError) -> RunError {
    move |e| RunError::Cluster(format!("kafka: {what}: {e}"))
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// The topic a flow's Kafka sinks keep their positions in.
pub fn positions_topic(flow: &str) -> String {
    format!("{flow}.positions")
}

/// Partitions of `topic`, or `None` when it does not exist.
pub fn partitions(brokers: &str, topic: &str) -> Result<Option<u32>, RunError> {
    let c: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(kerr(format!("connecting to {brokers}")))?;
    let md = blocking(|| c.fetch_metadata(Some(topic), timeout()))
        .map_err(kerr(format!("metadata of {topic} from {brokers}")))?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match t.error() {
        None => Ok(Some(t.partitions().len() as u32)),
        Some(rdkafka::types::RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART) => Ok(None),
        Some(e) => Err(RunError::Cluster(format!(
            "kafka: metadata of {topic}: {e:?}"
        ))),
    }
}

/// Creates `topic` with `n` partitions unless it exists; returns its
/// partitions. `compact`: a compacted topic (positions).
pub async fn ensure_topic(
    brokers: &str,
    topic: &str,
    n: u32,
    compact: bool,
) -> Result<u32, RunError> {
    if let Some(have) = partitions(brokers, topic)? {
        return Ok(have);
    }
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .map_err(kerr(format!("connecting to {brokers}")))?;
    let mut t = NewTopic::new(topic, n as i32, TopicReplication::Fixed(1));
    if compact {
        t = t.set("cleanup.policy", "compact");
    }
    let r = admin
        .create_topics(
            [&t],
            &AdminOptions::new().operation_timeout(Some(timeout())),
        )
        .await
        .map_err(kerr(format!("creating {topic}")))?;
    for x in r {
        match x {
            Ok(_) => {}
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((name, e)) => {
                return Err(RunError::Cluster(format!("kafka: creating {name}: {e}")))
            }
        }
    }
    // Metadata lags creation for a moment.
    let t0 = Instant::now();
    loop {
        if let Some(have) = partitions(brokers, topic)? {
            return Ok(have);
        }
        if t0.elapsed() > timeout() {
            return Err(RunError::Cluster(format!(
                "kafka: topic {topic} was created but never appeared"
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// One task's transactional producer.
pub struct KafkaSink {
    producer: ThreadedProducer<DefaultProducerContext>,
    writer: String,
}

impl KafkaSink {
    /// Opens the producer of writer `writer` (its transactional id),
    /// fencing any earlier instance: whatever it left open is aborted.
    pub fn open(brokers: &str, writer: &str) -> Result<KafkaSink, RunError> {
        let producer: ThreadedProducer<DefaultProducerContext> = ClientConfig::new()
            .set("bootstrap.servers", brokers)
            .set("transactional.id", writer)
            .set("enable.idempotence", "true")
            .set("linger.ms", "5")
            .set("batch.size", "1000000")
            .set("compression.type", "lz4")
            .set("message.timeout.ms", KAFKA_TIMEOUT_MS.to_string())
            .create()
            .map_err(kerr(format!("producer for {writer}")))?;
        blocking(|| producer.init_transactions(timeout()))
            .map_err(kerr(format!("init_transactions of {writer}")))?;
        Ok(KafkaSink {
            producer,
            writer: writer.to_string(),
        })
    }

    /// The position this writer last committed in partition `p` of
    /// `positions` (read after [`KafkaSink::open`] fenced the writer).
    pub fn position(
        &self,
        brokers: &str,
        positions: &str,
        p: u32,
    ) -> Result<Option<u64>, RunError> {
        last_position(brokers, positions, p, &self.writer)
    }

    /// Commits `records` (output partition, bytes) and, with `marker`
    /// (positions topic, its partition, input position), this writer's
    /// position as one transaction.
    pub fn commit(
        &self,
        topic: &str,
        records: &[(u32, Vec<u8>)],
        marker: Option<(&str, u32, u64)>,
    ) -> Result<(), RunError> {
        blocking(|| {
            self.producer
                .begin_transaction()
                .map_err(kerr("begin_transaction"))?;
            let pos = marker.map(|m| m.2.to_be_bytes());
            let mut all: Vec<(&str, u32, &[u8], Option<&str>)> = records
                .iter()
                .map(|(q, v)| (topic, *q, v.as_slice(), None))
                .collect();
            if let (Some((t, q, _)), Some(b)) = (marker, pos.as_ref()) {
                all.push((t, q, b.as_slice(), Some(self.writer.as_str())));
            }
            for (t, q, v, key) in all {
                let mut rec: BaseRecord<'_, str, [u8]> =
                    BaseRecord::to(t).partition(q as i32).payload(v);
                if let Some(k) = key {
                    rec = rec.key(k);
                }
                if let Err(e) = send(&self.producer, rec) {
                    let _ = self.producer.abort_transaction(timeout());
                    return Err(kerr(format!("producing to {t}"))(e));
                }
            }
            self.producer
                .commit_transaction(timeout())
                .map_err(kerr(format!("commit_transaction of {}", self.writer)))
        })
    }
}

/// Waits between asks for a partition's watermarks while its leadership
/// moves, ms.
const WATERMARKS_RETRY_MS: u64 = 100;

/// The low and high watermarks of `topic`/`p`, asked again while the
/// broker says the partition's leadership is still moving (a topic just
/// created, a broker just started: NOT_LEADER_FOR_PARTITION,
/// LEADER_NOT_AVAILABLE), for at most the Kafka timeout.
fn watermarks(c: &BaseConsumer, topic: &str, p: i32) -> Result<(i64, i64), RunError> {
    let t0 = Instant::now();
    loop {
        match blocking(|| c.fetch_watermarks(topic, p, timeout())) {
            Ok(w) => return Ok(w),
            Err(e)
                if matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::NotLeaderForPartition
                            | RDKafkaErrorCode::LeaderNotAvailable
                    )
                ) && t0.elapsed() < timeout() =>
            {
                blocking(|| std::thread::sleep(Duration::from_millis(WATERMARKS_RETRY_MS)));
            }
            Err(e) => return Err(kerr(format!("watermarks of {topic}/{p}"))(e)),
        }
    }
}

fn consumer(brokers: &str, group: Option<&str>) -> Result<BaseConsumer, RunError> {
    consumer_config(brokers, group)
        .create()
        .map_err(kerr(format!("consumer of {brokers}")))
}

/// A read_committed reader's configuration (of `group`, else a fixed one).
fn consumer_config(brokers: &str, group: Option<&str>) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("bootstrap.servers", brokers)
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("fetch.max.bytes", "52428800")
        .set("enable.partition.eof", "false");
    // librdkafka assigns partitions only to a consumer with a group id;
    // readers that never commit use a fixed one.
    cfg.set("group.id", group.unwrap_or("tablinum-reader"));
    cfg
}

/// What [`read_partition`] hands each record to: (offset, key, payload).
pub type RecordSink<'a> = dyn FnMut(i64, Option<&[u8]>, &[u8]) + 'a;

/// Reads partition `p` of `topic` from its start to its end as it is now
/// (read_committed), handing each record to `out`.
pub fn read_partition(
    brokers: &str,
    topic: &str,
    p: u32,
    out: &mut RecordSink<'_>,
) -> Result<(), RunError> {
    read_messages(brokers, topic, p, &mut |m| {
        out(m.offset(), m.key(), m.payload().unwrap_or_default())
    })
}

/// [`read_partition`], handing over whole messages (with their timestamps).
fn read_messages(
    brokers: &str,
    topic: &str,
    p: u32,
    out: &mut dyn FnMut(&rdkafka::message::BorrowedMessage<'_>),
) -> Result<(), RunError> {
    let c = consumer(brokers, None)?;
    let (low, high) = watermarks(&c, topic, p as i32)?;
    if high <= low {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p as i32, Offset::Offset(low))
        .map_err(kerr("assign"))?;
    c.assign(&tpl)
        .map_err(kerr(format!("assigning {topic}/{p}")))?;
    let t0 = Instant::now();
    let mut idle = Instant::now();
    blocking(|| loop {
        match c.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                idle = Instant::now();
                out(&m);
                if m.offset() + 1 >= high {
                    return Ok(());
                }
            }
            Some(Err(e)) => return Err(kerr(format!("reading {topic}/{p}"))(e)),
            None => {
                // Control records (transaction markers) take the last
                // offsets: nothing more arrives once past them.
                let at = c.position().ok().and_then(|l| {
                    l.find_partition(topic, p as i32)
                        .and_then(|e| e.offset().to_raw())
                });
                if at.is_some_and(|o| o >= high) || idle.elapsed() > Duration::from_secs(2) {
                    return Ok(());
                }
                if t0.elapsed() > timeout() {
                    return Err(RunError::Cluster(format!(
                        "kafka: reading {topic}/{p} to offset {high} took over {KAFKA_TIMEOUT_MS} ms"
                    )));
                }
            }
        }
    })
}

/// Follows every partition of `topics` (read_committed) from where each
/// ends now until `expect` distinct stamped records became visible or
/// `limit` passed; returns each stamp's first-visible unix ms. Fetches wait
/// at most [`FOLLOW_FETCH_WAIT_MS`], which bounds the error of a time.
pub fn follow_visible(
    brokers: &str,
    topics: &[String],
    expect: u64,
    limit: Duration,
) -> Result<HashMap<Stamp, u64>, RunError> {
    let c: BaseConsumer = consumer_config(brokers, None)
        .set("fetch.wait.max.ms", FOLLOW_FETCH_WAIT_MS.to_string())
        .create()
        .map_err(kerr(format!("consumer of {brokers}")))?;
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let n = partitions(brokers, t)?
            .ok_or_else(|| RunError::Setup(format!("Kafka topic {t} does not exist")))?;
        for p in 0..n as i32 {
            let (_, high) = watermarks(&c, t, p)?;
            tpl.add_partition_offset(t, p, Offset::Offset(high))
                .map_err(kerr("assign"))?;
        }
    }
    c.assign(&tpl).map_err(kerr("assigning the sinks"))?;
    let mut seen = HashMap::new();
    let t0 = Instant::now();
    blocking(|| {
        while (seen.len() as u64) < expect && t0.elapsed() < limit {
            match c.poll(Duration::from_millis(FOLLOW_FETCH_WAIT_MS)) {
                Some(Ok(m)) => {
                    if let Some(s) = crate::validate::stamp_of(m.payload().unwrap_or_default()) {
                        seen.entry(s).or_insert_with(tablinum_proto::unix_ms);
                    }
                }
                Some(Err(e)) => return Err(kerr("following the sinks")(e)),
                None => {}
            }
        }
        Ok(())
    })?;
    Ok(seen)
}

/// Longest wait of one fetch of [`follow_visible`], ms.
pub const FOLLOW_FETCH_WAIT_MS: u64 = 10;

/// For every stamped record of `topic` whose stamp `visible` holds: its
/// visible time minus its create time (ms, 0 when the clock says
/// otherwise).
pub fn since_created(
    brokers: &str,
    topic: &str,
    visible: &HashMap<Stamp, u64>,
) -> Result<Vec<u64>, RunError> {
    let n = partitions(brokers, topic)?
        .ok_or_else(|| RunError::Setup(format!("Kafka topic {topic} does not exist")))?;
    let mut out = Vec::with_capacity(visible.len());
    for p in 0..n {
        read_messages(brokers, topic, p, &mut |m| {
            let seen = crate::validate::stamp_of(m.payload().unwrap_or_default())
                .and_then(|s| visible.get(&s));
            if let (Some(&at), Some(created)) = (seen, m.timestamp().to_millis()) {
                out.push(at.saturating_sub(u64::try_from(created).unwrap_or(0)));
            }
        })?;
    }
    Ok(out)
}

/// The position `writer` last committed in partition `p` of `positions`.
fn last_position(
    brokers: &str,
    positions: &str,
    p: u32,
    writer: &str,
) -> Result<Option<u64>, RunError> {
    let mut pos = None;
    let mut bad = None;
    read_partition(brokers, positions, p, &mut |_, key, v| {
        if key == Some(writer.as_bytes()) {
            match <[u8; 8]>::try_from(v) {
                Ok(b) => pos = Some(u64::from_be_bytes(b)),
                Err(_) => bad = Some(v.len()),
            }
        }
    })?;
    if let Some(n) = bad {
        return Err(RunError::Cluster(format!(
            "kafka: a position of {writer} in {positions} is {n} bytes, not 8"
        )));
    }
    Ok(pos)
}

/// One task's reader of one Kafka partition.
pub struct KafkaSource {
    consumer: BaseConsumer,
    topic: String,
    p: u32,
    next: Option<u64>,
}

impl KafkaSource {
    /// A reader of partition `p` of `topic`, in consumer group `group`
    /// (its offsets are committed there after each commit, for lag).
    pub fn open(brokers: &str, topic: &str, group: &str, p: u32) -> Result<KafkaSource, RunError> {
        Ok(KafkaSource {
            consumer: consumer(brokers, Some(group))?,
            topic: topic.to_string(),
            p,
            next: None,
        })
    }

    /// Up to `max` records from offset `from`, waiting up to `wait` for the
    /// first; (offset, bytes) in order.
    pub fn read(
        &mut self,
        from: u64,
        max: u64,
        wait: Duration,
    ) -> Result<Vec<(u64, Vec<u8>)>, RunError> {
        if self.next != Some(from) {
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition_offset(&self.topic, self.p as i32, Offset::Offset(from as i64))
                .map_err(kerr("assign"))?;
            self.consumer
                .assign(&tpl)
                .map_err(kerr(format!("assigning {}/{}", self.topic, self.p)))?;
            self.next = Some(from);
        }
        let mut out = Vec::new();
        let t0 = Instant::now();
        blocking(|| {
            while (out.len() as u64) < max {
                let left = if out.is_empty() {
                    wait.saturating_sub(t0.elapsed())
                } else {
                    Duration::ZERO
                };
                match self.consumer.poll(left) {
                    Some(Ok(m)) => {
                        let o = m.offset() as u64;
                        out.push((o, m.payload().unwrap_or_default().to_vec()));
                        self.next = Some(o + 1);
                    }
                    Some(Err(e)) => {
                        return Err(kerr(format!("reading {}/{}", self.topic, self.p))(e))
                    }
                    None => break,
                }
            }
            Ok(())
        })?;
        Ok(out)
    }

    /// Stores `next` as the group's committed offset (for lag; the task's
    /// own position lives with its sinks' outputs).
    pub fn commit_group(&self, next: u64) -> Result<(), RunError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.p as i32, Offset::Offset(next as i64))
            .map_err(kerr("commit"))?;
        blocking(|| {
            self.consumer
                .commit(&tpl, rdkafka::consumer::CommitMode::Sync)
        })
        .map_err(kerr(format!(
            "committing the group offset of {}/{}",
            self.topic, self.p
        )))
    }
}

/// Writes `records[p]` into partition p of `topic` in one transaction
/// (a generator's input, for tests and the benchmark).
pub fn produce(
    brokers: &str,
    topic: &str,
    records: &[Vec<Vec<u8>>],
    id: &str,
) -> Result<(), RunError> {
    let sink = KafkaSink::open(brokers, id)?;
    let all: Vec<(u32, Vec<u8>)> = records
        .iter()
        .enumerate()
        .flat_map(|(p, v)| v.iter().map(move |r| (p as u32, r.clone())))
        .collect();
    sink.commit(topic, &all, None)
}

/// Generates `n` more of the report's stamped records into every partition
/// of `topic` (`partitions` of them), continuing after the last stamped
/// record each partition holds, in transactions of at most `batch` records.
/// With a `rate` (records/s in total) records go out in paced steps across
/// every partition (`generator::pace_step`) from an idempotent producer
/// *without* transactions, so each is readable as soon as the broker has
/// it and its create time is when it was produced (what latency is
/// measured from; a transaction would hold it back until its commit).
/// Without a rate, a partition's records go in transactions, one partition
/// after another.
pub fn generate(
    brokers: &str,
    topic: &str,
    n: u64,
    batch: usize,
    g: &crate::generator::Generator,
    rate: Option<u64>,
) -> Result<u64, RunError> {
    let parts = partitions(brokers, topic)?
        .ok_or_else(|| RunError::Setup(format!("Kafka topic {topic} does not exist")))?;
    let mut next = Vec::with_capacity(parts as usize);
    for p in 0..parts {
        let from = generated_in(brokers, topic, parts, p)?;
        next.push((from, from + n));
    }
    let batch = batch.max(1) as u64;
    let step = match rate {
        Some(r) => crate::generator::pace_step(r, parts).min(batch),
        None => batch,
    };
    let sink = match rate {
        Some(_) => None,
        None => Some(KafkaSink::open(brokers, &format!("generator/{topic}"))?),
    };
    let paced: Option<ThreadedProducer<DefaultProducerContext>> = match rate {
        Some(_) => Some(
            ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .set("enable.idempotence", "true")
                .set("linger.ms", "1")
                .set("compression.type", "lz4")
                .set("message.timeout.ms", KAFKA_TIMEOUT_MS.to_string())
                .create()
                .map_err(kerr(format!("producer for {brokers}")))?,
        ),
        None => None,
    };
    let t0 = Instant::now();
    let mut total = 0;
    loop {
        let mut recs = Vec::new();
        for (p, (next, end)) in next.iter_mut().enumerate() {
            let p = p as u32;
            if *next >= *end || (rate.is_none() && !recs.is_empty()) {
                continue;
            }
            let take = (*end - *next).min(step);
            for i in *next..*next + take {
                let s = crate::generator::stamp_at(parts, p, i).ok_or_else(|| {
                    RunError::Setup(format!("partition {p} is past the generator's stamp space"))
                })?;
                let mut r = Vec::with_capacity(crate::generator::RECORD_BYTES);
                g.record(s, &mut r);
                recs.push((p, r));
            }
            *next += take;
        }
        if recs.is_empty() {
            if let Some(p) = &paced {
                blocking(|| p.flush(timeout())).map_err(kerr(format!("flushing to {topic}")))?;
            }
            return Ok(total);
        }
        match (&sink, &paced) {
            (Some(sink), _) => sink.commit(topic, &recs, None)?,
            (None, Some(producer)) => blocking(|| send_all(producer, topic, &recs))?,
            (None, None) => unreachable!("a generator has a sink or a paced producer"),
        }
        total += recs.len() as u64;
        if let Some(r) = rate {
            std::thread::sleep(crate::generator::pace_due(total, r).saturating_sub(t0.elapsed()));
        }
    }
}

/// Sends `records` ((partition, value)) to `topic` without a transaction,
/// waiting for room when the producer's queue is full.
fn send_all(
    producer: &ThreadedProducer<DefaultProducerContext>,
    topic: &str,
    records: &[(u32, Vec<u8>)],
) -> Result<(), RunError> {
    for (q, v) in records {
        send(
            producer,
            BaseRecord::to(topic).partition(*q as i32).payload(v),
        )
        .map_err(kerr(format!("producing to {topic}")))?;
    }
    Ok(())
}

/// Sends `rec`, waiting for room while the producer's queue is full.
fn send(
    producer: &ThreadedProducer<DefaultProducerContext>,
    mut rec: BaseRecord<'_, str, [u8]>,
) -> Result<(), KafkaError> {
    loop {
        match producer.send(rec) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                rec = r;
                producer.poll(Duration::from_millis(1));
            }
            Err((e, _)) => return Err(e),
        }
    }
}

/// How many stamped records partition `p` holds: one past the index of the
/// last one (read from the partition's last few offsets).
fn generated_in(brokers: &str, topic: &str, parts: u32, p: u32) -> Result<u64, RunError> {
    let c = consumer(brokers, None)?;
    let (low, high) = watermarks(&c, topic, p as i32)?;
    if high <= low {
        return Ok(0);
    }
    // Transaction markers take offsets too: look back far enough to pass
    // a few of them.
    let from = (high - 16).max(low);
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p as i32, Offset::Offset(from))
        .map_err(kerr("assign"))?;
    c.assign(&tpl)
        .map_err(kerr(format!("assigning {topic}/{p}")))?;
    let mut last = None;
    let t0 = Instant::now();
    blocking(|| {
        while t0.elapsed() < Duration::from_secs(3) {
            match c.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    if let Some(s) = crate::validate::stamp_of(m.payload().unwrap_or_default()) {
                        last = Some(s);
                    }
                    if m.offset() + 1 >= high {
                        break;
                    }
                }
                Some(Err(e)) => return Err(kerr(format!("reading {topic}/{p}"))(e)),
                None => break,
            }
        }
        Ok(())
    })?;
    Ok(last.map_or(0, |s| {
        u64::from(s.window / parts) * crate::generator::WINDOW_RECORDS + u64::from(s.seq) + 1
    }))
}
