//! `tablinum topic ...`: create, produce to, consume from, list, describe
//! and drop topics on a cluster.
//!
//! Owns the command-line face of topics; offsets are assigned by the
//! tablet servers, never here.

use std::io::{BufRead, Write};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use clap::{Args, Subcommand};
use tablinum_client::topic::{Retention, WriterCheck};
use tablinum_client::{Client, Durability};
use tablinum_flow::generator::{self, Generator, Split, GENERATOR_WRITER};

use crate::exit::usage;
use crate::output::{Field, Format, OutputArg, RowWriter};
use crate::verbs::Session;

macro_rules! out {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// Records per append of `topic produce`, by default.
const PRODUCE_BATCH_DEFAULT: usize = 1_000;

/// `tablinum topic ...`.
#[derive(Debug, Subcommand)]
pub enum TopicCommand {
    /// Create a topic: a partitioned, append-only log.
    Create {
        /// Topic name (its table is `topic.NAME`).
        name: String,
        /// Partitions (1..=1024), one tablet each.
        #[arg(long, default_value_t = 1)]
        partitions: u32,
        /// Acknowledge appends before fsync.
        #[arg(long)]
        nosync: bool,
        /// Remove appends older than this, ms (0: keep them).
        #[arg(long, default_value_t = 0)]
        retention_ms: u64,
        /// Remove the oldest appends while the rest hold this many record
        /// bytes (0: no limit).
        #[arg(long, default_value_t = 0)]
        retention_bytes: u64,
    },
    /// Show a topic's retention, or set it (--ms, --bytes; admin only).
    Retention {
        /// Topic name.
        name: String,
        /// Remove appends older than this, ms (0: keep them).
        #[arg(long)]
        ms: Option<u64>,
        /// Remove the oldest appends while the rest hold this many record
        /// bytes (0: no limit).
        #[arg(long)]
        bytes: Option<u64>,
    },
    /// Append records: one per line of --file or standard input, or
    /// --generate N of the splitter report's stamped log records.
    Produce(ProduceArgs),
    /// Print records from an offset (one per line; -o json for offsets).
    Consume(ConsumeArgs),
    /// List topics.
    List(OutputArg),
    /// Show each partition's first retained and next offset, and the
    /// generator's count.
    Describe {
        /// Topic name.
        name: String,
        #[command(flatten)]
        output: OutputArg,
    },
    /// Drop a topic and every record in it.
    Drop {
        /// Topic name.
        name: String,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

/// `topic produce`.
#[derive(Debug, Args)]
pub struct ProduceArgs {
    /// Topic name.
    pub name: String,
    /// Only this partition (default: batches go round the partitions).
    #[arg(long)]
    pub partition: Option<u32>,
    /// Read records from this file, one per line (default: standard input).
    #[arg(long, conflicts_with = "generate")]
    pub file: Option<PathBuf>,
    /// Records per append.
    #[arg(long, default_value_t = PRODUCE_BATCH_DEFAULT)]
    pub batch: usize,
    /// Generate this many of the report's ~870-byte JSON log records per
    /// partition, stamped for `tablinum flow validate` (exactly once: a
    /// retried or repeated run never duplicates one).
    #[arg(long)]
    pub generate: Option<u64>,
    /// Percent of INFO, WARNING and ERROR records (with --generate).
    #[arg(long, value_delimiter = ',', default_value = "34,33,33")]
    pub split: Vec<u8>,
    /// The generator's seed (with --generate).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Generate into this Kafka topic on these brokers instead (in
    /// transactions; NAME is the Kafka topic).
    #[arg(long, requires = "generate", value_name = "BROKERS")]
    pub kafka: Option<String>,
    /// Pace --generate at this many records/s in total, spread evenly over
    /// the partitions (default: as fast as appends go). For latency: input
    /// that arrives steadily while a flow runs.
    #[arg(long, requires = "generate", value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: Option<u64>,
}

/// `topic consume`.
#[derive(Debug, Args)]
pub struct ConsumeArgs {
    /// Topic name.
    pub name: String,
    /// Only this partition (default: each in turn).
    #[arg(long)]
    pub partition: Option<u32>,
    /// First offset (default: the group's position, else the first
    /// retained).
    #[arg(long)]
    pub from: Option<u64>,
    /// Consumer group: start at its stored position and store the new one
    /// after printing.
    #[arg(long)]
    pub group: Option<String>,
    /// Records per partition at most (default: to the end as it is now).
    #[arg(long, default_value_t = 0)]
    pub max: u64,
    #[command(flatten)]
    pub output: OutputArg,
}

fn partitions_of(c: &Client, name: &str, only: Option<u32>) -> anyhow::Result<Vec<u32>> {
    let t = c.topic(name)?;
    match only {
        Some(p) if p >= t.partitions() => usage!(
            "topic {name} has {} partitions; there is no partition {p}",
            t.partitions()
        ),
        Some(p) => Ok(vec![p]),
        None => Ok((0..t.partitions()).collect()),
    }
}

/// Runs one `topic` command.
pub fn run(s: &mut Session, cmd: TopicCommand) -> anyhow::Result<()> {
    match cmd {
        TopicCommand::Create {
            name,
            partitions,
            nosync,
            retention_ms,
            retention_bytes,
        } => {
            let d = if nosync {
                Durability::Nosync
            } else {
                Durability::Sync
            };
            let c = s.client()?;
            let t = c.create_topic(&name, partitions, d)?;
            let r = Retention {
                ms: retention_ms,
                bytes: retention_bytes,
            };
            if !r.is_unlimited() {
                c.set_retention(&name, r)?;
            }
            out!(
                "created topic {} with {} partitions (table {})",
                t.name,
                t.partitions(),
                t.table.name
            );
        }
        TopicCommand::Produce(a) => {
            let interactive = s.interactive;
            produce(s.client()?, a, interactive)?
        }
        TopicCommand::Consume(a) => consume(s.client()?, a)?,
        TopicCommand::List(o) => {
            let topics = s.client()?.list_topics()?;
            let mut w = RowWriter::stdout(o.format, &["name", "partitions", "durability"]);
            for t in &topics {
                let d = if t.table.durability == Durability::Nosync {
                    "nosync"
                } else {
                    "sync"
                };
                w.row(&[
                    Field::Text(&t.name),
                    Field::Num(u64::from(t.partitions())),
                    Field::Text(d),
                ])?;
            }
            w.finish()?;
        }
        TopicCommand::Describe { name, output } => {
            let c = s.client()?;
            let mut w =
                RowWriter::stdout(output.format, &["partition", "start", "next", "generated"]);
            for p in partitions_of(c, &name, None)? {
                let h = c.topic_head(&name, p)?;
                let g = generated(c, &name, p)?;
                w.row(&[
                    Field::Num(u64::from(p)),
                    Field::Num(h.start),
                    Field::Num(h.next),
                    Field::Num(g),
                ])?;
            }
            w.finish()?;
        }
        TopicCommand::Retention { name, ms, bytes } => {
            let c = s.client()?;
            let mut r = c.retention(&name)?;
            if ms.is_some() || bytes.is_some() {
                r.ms = ms.unwrap_or(r.ms);
                r.bytes = bytes.unwrap_or(r.bytes);
                c.set_retention(&name, r)?;
            }
            let show = |v: u64, unit: &str| {
                if v == 0 {
                    "unlimited".to_string()
                } else {
                    format!("{v} {unit}")
                }
            };
            out!(
                "topic {name}: keeps appends for {}, up to {}",
                show(r.ms, "ms"),
                show(r.bytes, "bytes")
            );
        }
        TopicCommand::Drop { name, yes } => {
            if !yes {
                usage!("dropping topic {name} deletes every record in it: pass --yes");
            }
            s.client()?.drop_topic(&name)?;
            out!("dropped topic {name}");
        }
    }
    Ok(())
}

/// How many records `--generate` wrote to partition `p`.
pub fn generated(c: &Client, topic: &str, p: u32) -> anyhow::Result<u64> {
    Ok(c.block_on(tablinum_flow::check::generated_in(c.as_async(), topic, p))?)
}

fn produce(c: &Client, a: ProduceArgs, interactive: bool) -> anyhow::Result<()> {
    if a.batch == 0 || a.batch > tablinum_proto::topic::APPEND_RECORDS_MAX {
        usage!(
            "--batch is 1..={} records, not {}",
            tablinum_proto::topic::APPEND_RECORDS_MAX,
            a.batch
        );
    }
    if let (Some(brokers), Some(n)) = (&a.kafka, a.generate) {
        let [i, w, e] = a.split[..] else {
            usage!(
                "--split takes three percentages (INFO,WARNING,ERROR), not {:?}",
                a.split
            );
        };
        let g = Generator::new(a.seed, Split::new([i, w, e]).map_err(crate::exit::Usage)?);
        return kafka_generate(c, brokers, &a.name, n, a.batch, &g, a.rate);
    }
    let parts = partitions_of(c, &a.name, a.partition)?;
    if let Some(n) = a.generate {
        let [i, w, e] = a.split[..] else {
            usage!(
                "--split takes three percentages (INFO,WARNING,ERROR), not {:?}",
                a.split
            );
        };
        let split = Split::new([i, w, e]).map_err(crate::exit::Usage)?;
        return generate(
            c,
            &a.name,
            &parts,
            n,
            a.batch,
            Generator::new(a.seed, split),
            a.rate,
        );
    }
    let input: Box<dyn BufRead> = match &a.file {
        Some(f) => Box::new(std::io::BufReader::new(
            std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?,
        )),
        None if interactive => usage!("in the shell, produce reads --file or --generate"),
        None => Box::new(std::io::stdin().lock()),
    };
    let mut batch = Vec::with_capacity(a.batch);
    let mut total = 0u64;
    let mut turn = 0usize;
    let mut send = |batch: &mut Vec<Vec<u8>>| -> anyhow::Result<()> {
        let p = parts[turn % parts.len()];
        turn += 1;
        let n = batch.len() as u64;
        c.append(&a.name, p, std::mem::take(batch), None)
            .with_context(|| format!("appending {n} records to partition {p}"))?;
        total += n;
        Ok(())
    };
    for line in input.split(b'\n') {
        let mut line = line.context("reading records")?;
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        batch.push(line);
        if batch.len() == a.batch {
            send(&mut batch)?;
        }
    }
    if !batch.is_empty() {
        send(&mut batch)?;
    }
    out!("appended {total} records to topic {}", a.name);
    Ok(())
}

fn generate(
    c: &Client,
    topic: &str,
    parts: &[u32],
    n: u64,
    batch: usize,
    g: Generator,
    rate: Option<u64>,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let mut last_report = Instant::now();
    let all = parts.len() as u64 * n;
    let partitions = c.topic(topic)?.partitions();
    // Round the partitions: a step per partition at a time (a paced step,
    // else a whole batch).
    let step = match rate {
        Some(r) => generator::pace_step(r, parts.len() as u32).min(batch as u64),
        None => batch as u64,
    };
    let mut at = Vec::with_capacity(parts.len());
    for &p in parts {
        at.push((p, generated(c, topic, p)?, 0u64));
    }
    let mut done_all = 0u64;
    while done_all < all {
        for (p, position, done) in at.iter_mut() {
            if *done >= n {
                continue;
            }
            let (p, take) = (*p, (n - *done).min(step));
            append_generated(c, topic, partitions, p, *position, take, &g)?;
            *position += take;
            *done += take;
            done_all += take;
            if let Some(r) = rate {
                std::thread::sleep(generator::pace_due(done_all, r).saturating_sub(t0.elapsed()));
            }
            if last_report.elapsed().as_secs() >= 1 {
                last_report = Instant::now();
                eprintln!(
                    "generated {done_all} of {all} records ({:.0} records/s)",
                    done_all as f64 / t0.elapsed().as_secs_f64()
                );
            }
        }
    }
    out!(
        "generated {done_all} records into topic {topic} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Appends the `take` generated records that follow `position` to
/// partition `p`, exactly once (under the generator's writer position).
fn append_generated(
    c: &Client,
    topic: &str,
    partitions: u32,
    p: u32,
    position: u64,
    take: u64,
    g: &Generator,
) -> anyhow::Result<()> {
    let mut records = Vec::with_capacity(take as usize);
    for i in 0..take {
        let Some(stamp) = generator::stamp_at(partitions, p, position + i) else {
            anyhow::bail!("partition {p} is past the generator's stamp space");
        };
        let mut r = Vec::with_capacity(generator::RECORD_BYTES);
        g.record(stamp, &mut r);
        records.push(r);
    }
    let expect = if position == 0 {
        Vec::new()
    } else {
        position.to_be_bytes().to_vec()
    };
    let check = WriterCheck {
        writer: GENERATOR_WRITER.into(),
        expect,
        position: (position + take).to_be_bytes().to_vec(),
    };
    match c.append(topic, p, records, Some(check)) {
        Ok(_) => Ok(()),
        // An earlier try of this very append landed (its answer was lost):
        // the stored position says so.
        Err(tablinum_client::Error::Conflict(_)) if generated(c, topic, p)? == position + take => {
            Ok(())
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!(
            "generating into partition {p} at record {position}"
        ))),
    }
}

fn consume(c: &Client, a: ConsumeArgs) -> anyhow::Result<()> {
    if let Some(g) = &a.group {
        tablinum_proto::topic::check_name("group", g).map_err(crate::exit::Usage)?;
    }
    let parts = partitions_of(c, &a.name, a.partition)?;
    let mut w = RowWriter::stdout(a.output.format, &["partition", "offset", "value"]);
    let text = a.output.format == Format::Text;
    for p in parts {
        let from = match (a.from, &a.group) {
            (Some(f), _) => f,
            (None, Some(g)) => match c.group_offset(&a.name, g, p)? {
                Some(o) => o,
                None => c.topic_head(&a.name, p)?.start,
            },
            (None, None) => c.topic_head(&a.name, p)?.start,
        };
        let mut failed: Option<std::io::Error> = None;
        let next = c.read_topic(&a.name, p, from, a.max, &mut |r| {
            let res = if text {
                let mut o = std::io::stdout().lock();
                o.write_all(&r.value).and_then(|()| o.write_all(b"\n"))
            } else {
                w.row(&[
                    Field::Num(u64::from(p)),
                    Field::Num(r.offset),
                    Field::Bytes(&r.value),
                ])
            };
            match res {
                Ok(()) => ControlFlow::Continue(()),
                Err(e) => {
                    failed = Some(e);
                    ControlFlow::Break(())
                }
            }
        })?;
        if let Some(e) = failed {
            return Err(e.into());
        }
        if let Some(g) = &a.group {
            c.commit_group(&a.name, g, p, next)?;
        }
    }
    w.finish()?;
    Ok(())
}

#[cfg(feature = "kafka")]
fn kafka_generate(
    c: &Client,
    brokers: &str,
    topic: &str,
    n: u64,
    batch: usize,
    g: &Generator,
    rate: Option<u64>,
) -> anyhow::Result<()> {
    let t0 = Instant::now();
    let total =
        c.block_on(async { tablinum_flow::kafka::generate(brokers, topic, n, batch, g, rate) })?;
    out!(
        "generated {total} records into Kafka topic {topic} in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

#[cfg(not(feature = "kafka"))]
fn kafka_generate(
    _: &Client,
    _: &str,
    _: &str,
    _: u64,
    _: usize,
    _: &Generator,
    _: Option<u64>,
) -> anyhow::Result<()> {
    anyhow::bail!(
        "Kafka is not in this build: tablinum-cli was compiled without its `kafka` feature"
    )
}
