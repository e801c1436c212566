//! Runs a checked flow against a cluster: one task per source partition,
//! each reading its partition in order, passing every record through the
//! fused operators in memory and buffering what reaches each sink, then
//! committing every sink together with the input position it covers.
//!
//! Exactly once, per sink (ARCHITECTURE.md, "Dataflow"): every sink keeps
//! its own committed input position *atomically with its output* — a
//! topic sink in the same Append as its records (a writer row checked and
//! moved in that batch, so a retried or zombie append never lands twice), a
//! file sink in the committed file's name (written aside, fsynced, renamed),
//! a table sink after idempotent upserts (a replay writes the same rows
//! again). A task resumes from the lowest committed position of its sinks
//! and each sink drops what it already holds; operators are pure, so a
//! replay makes the same records.
//!
//! Owns the task loop, the sinks' buffers and commits; never parses the
//! definition (see [`crate::definition`]) or decides what an operator does
//! (see [`crate::ops`]).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::io::Write as _;
use std::ops::ControlFlow;
use std::path::{Path as FsPath, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use tablinum_client::topic::WriterCheck;
use tablinum_client::{AsyncClient, Durability, Mutation, Split as TableSplit};

use crate::definition::{FileFormat, Flow, Kind, Operator, Sink, Source, TableKey};
use crate::field::{extract, Value};
use crate::ops::{apply, Outcome};
use crate::validate::split_tail;

/// Records one task reads per request to its source partition, at most.
pub const READ_RECORDS_DEFAULT: u64 = 5_000;
/// Bytes a task buffers for its sinks before it commits early.
pub const BUFFER_BYTES_MAX: usize = 32 << 20;
/// Bytes of input a task reads ahead while a commit is in flight (from a
/// tablinum topic; a Kafka source reads through a blocking client and does
/// not read ahead).
pub const READ_AHEAD_BYTES_MAX: usize = 16 << 20;
/// How long a task at the end of its partition waits before reading again.
pub const POLL_MS_DEFAULT: u64 = 50;

/// How a run goes.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The storage root file sinks write under.
    pub root: PathBuf,
    /// Stop once every task has been at the end of its input this long
    /// (none: run until stopped).
    pub until_idle: Option<Duration>,
    /// Records per read.
    pub read_records: u64,
    /// Wait at the end of the input before reading again.
    pub poll: Duration,
    /// Test seam: end the process (abort, as abrupt as SIGKILL) in the
    /// run's commit number `.0` (counted from 1 over all tasks) once
    /// `.1 + 1` of its sinks finished committing (sinks commit at once, so
    /// others may be in flight) — between sinks' commits, the moment
    /// exactly-once must survive. Set by the CLI from
    /// [`CRASH_AT_ENV`].
    pub crash_at: Option<(u64, usize)>,
}

/// The environment variable `tablinum flow run` reads
/// [`RunOptions::crash_at`] from: `COMMIT:SINK`, e.g. `3:1`.
pub const CRASH_AT_ENV: &str = "TABLINUM_FLOW_CRASH_AT";

/// Parses a [`CRASH_AT_ENV`] value.
pub fn parse_crash_at(v: &str) -> Result<(u64, usize), String> {
    let bad = || format!("{CRASH_AT_ENV}={v:?}: expected COMMIT:SINK, e.g. 3:1");
    let (a, b) = v.split_once(':').ok_or_else(bad)?;
    Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
}

impl RunOptions {
    /// Defaults, file sinks under `root`.
    pub fn new(root: impl Into<PathBuf>) -> RunOptions {
        RunOptions {
            root: root.into(),
            until_idle: None,
            read_records: READ_RECORDS_DEFAULT,
            poll: Duration::from_millis(POLL_MS_DEFAULT),
            crash_at: None,
        }
    }
}

/// Why a run stopped with an error. Nothing committed is ever undone: a
/// run started again resumes from the committed positions.
#[derive(Debug)]
pub enum RunError {
    /// The flow cannot run as defined (a missing source topic, a
    /// parallelism the source does not have, a kind not built yet).
    Setup(String),
    /// The cluster refused or failed a call.
    Cluster(String),
    /// A file sink's directory or file failed.
    Io(String),
    /// Another instance of a task committed past this one: this one stops.
    Fenced(String),
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunError::Setup(m) => write!(f, "flow cannot start: {m}"),
            RunError::Cluster(m) => write!(f, "flow: {m}"),
            RunError::Io(m) => write!(f, "flow file sink: {m}"),
            RunError::Fenced(m) => write!(f, "flow task fenced: {m}"),
        }
    }
}

impl std::error::Error for RunError {}

fn cluster(what: impl fmt::Display) -> impl FnOnce(tablinum_client::Error) -> RunError {
    move |e| RunError::Cluster(format!("{what}: {e}"))
}

/// Live counters of a run, for a progress line and the final report.
#[derive(Debug, Default)]
pub struct Progress {
    /// Records read from the sources.
    pub records_in: AtomicU64,
    /// Records committed to each sink (in [`Progress::sink_names`] order).
    pub records_out: Vec<AtomicU64>,
    /// Bytes committed to each sink.
    pub bytes_out: Vec<AtomicU64>,
    /// Sink names, the dead-letter topic last.
    pub sink_names: Vec<String>,
    /// Commits made (one per task per commit interval).
    pub commits: AtomicU64,
    /// Tasks still running.
    pub tasks_running: AtomicU64,
    /// When the run started, ms since the Unix epoch (0 until it did).
    pub started_unix_ms: AtomicU64,
    /// When a task first read a record, ms after the run started.
    pub first_record_ms: AtomicU64,
    /// When a task last committed records, ms after the run started:
    /// with `first_record_ms`, the span throughput is measured over (an
    /// idle tail before stopping does not count).
    pub last_commit_ms: AtomicU64,
}

impl Progress {
    /// Records read per second between the first record and the last
    /// commit that carried records (0 before both).
    pub fn active_rate(&self) -> f64 {
        let a = self.first_record_ms.load(Ordering::Relaxed);
        let b = self.last_commit_ms.load(Ordering::Relaxed);
        if a == u64::MAX || b <= a {
            return 0.0;
        }
        self.records_in.load(Ordering::Relaxed) as f64 / ((b - a) as f64 / 1000.0)
    }
}

/// The topic a flow's unreadable records go to.
pub fn dead_letter_topic(flow: &Flow) -> String {
    format!("{}.dead-letter", flow.name)
}

/// The topic a materialized operator's output goes through.
pub fn materialized_topic(flow: &Flow, node: &str) -> String {
    format!("{}.{node}", flow.name)
}

/// The table a flow keeps table sinks' positions in.
pub fn state_table(flow: &Flow) -> String {
    format!("flow.{}", flow.name)
}

/// What a table sink takes from each record beside its value: metadata
/// and secondary-index terms.
#[derive(Debug, Default)]
struct RowFields {
    metadata: Vec<(String, crate::field::Path)>,
    index: Vec<(String, crate::field::Path)>,
}

impl RowFields {
    /// The record's metadata (a JSON object of the fields present; empty
    /// when none is asked for) and index terms; none when a value is past
    /// the engine's limits or the record is not JSON (dead letter).
    fn of(&self, json: &[u8]) -> Option<(Vec<u8>, Vec<tablinum_client::IndexTerm>)> {
        use tablinum_engine::options::{INDEX_TERM_BYTES_MAX, METADATA_BYTES_MAX};
        let mut meta = Vec::new();
        if !self.metadata.is_empty() {
            meta.push(b'{');
            for (name, path) in &self.metadata {
                let Some(v) = extract(json, path).ok()? else {
                    continue;
                };
                if meta.len() > 1 {
                    meta.push(b',');
                }
                crate::ops::write_json(&Value::Str(name.as_bytes().into()), &mut meta);
                meta.push(b':');
                crate::ops::write_json(&v, &mut meta);
            }
            meta.push(b'}');
            if meta.len() > METADATA_BYTES_MAX {
                return None;
            }
        }
        let mut terms = Vec::with_capacity(self.index.len());
        for (name, path) in &self.index {
            let term = match extract(json, path).ok()? {
                None | Some(Value::Null) => continue,
                Some(Value::Str(s)) => s.into_owned(),
                Some(Value::Num(n) | Value::Composite(n)) => n.to_vec(),
                Some(Value::Bool(b)) => {
                    if b {
                        b"true".to_vec()
                    } else {
                        b"false".to_vec()
                    }
                }
            };
            if term.len() > INDEX_TERM_BYTES_MAX {
                return None;
            }
            terms.push(tablinum_client::IndexTerm {
                index: name.as_bytes().to_vec(),
                term,
            });
        }
        Some((meta, terms))
    }
}

/// One node of the compiled graph.
struct PNode {
    /// Its name (a materialized operator's topic sink and source take the
    /// operator's).
    name: String,
    kind: Kind,
    children: Vec<usize>,
    sink: Option<usize>,
}

/// The graph with names resolved to indexes, shared by every task.
struct Plan {
    nodes: Vec<PNode>,
    by_name: HashMap<String, usize>,
    /// Sinks in order, the dead-letter topic last.
    sinks: Vec<PlanSink>,
    /// (node, where it reads) per source.
    sources: Vec<(usize, Source)>,
}

#[derive(Clone)]
enum PlanSink {
    Topic {
        name: String,
        topic: String,
        partitions: u32,
        hashed: bool,
    },
    Table {
        name: String,
        table: String,
        key: TableKey,
        fields: Arc<RowFields>,
    },
    Files {
        dir: PathBuf,
        parquet: bool,
    },
    #[cfg_attr(not(feature = "kafka"), allow(dead_code))]
    Kafka {
        name: String,
        brokers: String,
        topic: String,
        hashed: bool,
        partitions: u32,
    },
}

struct Ctx {
    c: AsyncClient,
    flow: Arc<Flow>,
    plan: Plan,
    opts: RunOptions,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
    started: Instant,
}

/// Creates what the flow writes to (output topics, the dead-letter topic,
/// the state table) and checks what it reads; then runs every task until
/// `stop` is set (or, with `until_idle`, the input stays at its end). The
/// counters in `progress` are live; the returned ones are final.
pub async fn run(
    c: AsyncClient,
    flow: Arc<Flow>,
    opts: RunOptions,
    stop: Arc<AtomicBool>,
) -> Result<Arc<Progress>, RunError> {
    let progress = progress_for(&flow);
    run_with(c, flow, opts, stop, progress.clone()).await?;
    Ok(progress)
}

/// As [`run`], reporting into a `Progress` the caller made with
/// [`progress_for`] (to watch it while the run goes).
pub async fn run_with(
    c: AsyncClient,
    flow: Arc<Flow>,
    opts: RunOptions,
    stop: Arc<AtomicBool>,
    progress: Arc<Progress>,
) -> Result<(), RunError> {
    let runner = Arc::new(Runner::build(c, flow, opts, stop.clone(), progress).await?);
    runner
        .ctx
        .progress
        .started_unix_ms
        .store(tablinum_proto::unix_ms(), Ordering::Relaxed);
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..runner.tasks() {
        let runner = runner.clone();
        tasks.spawn(async move { runner.run_task(t, Arc::default()).await });
    }
    let mut first_err = None;
    while let Some(r) = tasks.join_next().await {
        let r = r.unwrap_or_else(|e| Err(RunError::Cluster(format!("a task failed: {e}"))));
        if let Err(e) = r {
            // One task's failure stops the rest (each commits what it has).
            stop.store(true, Ordering::Relaxed);
            first_err.get_or_insert(e);
        }
    }
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Counters for [`run_with`]: one per sink of `flow`, the dead-letter
/// topic last.
pub fn progress_for(flow: &Flow) -> Arc<Progress> {
    let mut names: Vec<String> = flow
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, Kind::Sink(_)))
        .map(|n| n.name.clone())
        .collect();
    names.extend(
        flow.nodes
            .iter()
            .filter(|n| matches!(n.kind, Kind::Operator(_, true)))
            .map(|n| format!("{} (materialized)", n.name)),
    );
    names.push(crate::definition::DEAD_LETTER.to_string());
    Arc::new(Progress {
        first_record_ms: AtomicU64::new(u64::MAX),
        records_out: names.iter().map(|_| AtomicU64::new(0)).collect(),
        bytes_out: names.iter().map(|_| AtomicU64::new(0)).collect(),
        sink_names: names,
        ..Progress::default()
    })
}

/// One task's control and live figures, shared between the task and
/// whoever runs it (a worker reports them in its heartbeat).
#[derive(Debug, Default)]
pub struct TaskCtl {
    /// Set: the task commits what it holds and ends.
    pub stop: AtomicBool,
    /// The task may commit only before this instant (none: no lease, as
    /// in `flow run`); past it, it ends without committing.
    lease_until: parking_lot::Mutex<Option<Instant>>,
    /// The input position every sink has committed (next offset to read).
    pub position: AtomicU64,
    /// Records read.
    pub records_in: AtomicU64,
}

impl TaskCtl {
    /// A task under a lease that ends at `until`.
    pub fn leased(until: Instant) -> Arc<TaskCtl> {
        let c = TaskCtl::default();
        *c.lease_until.lock() = Some(until);
        Arc::new(c)
    }

    /// Extends (or shortens) the lease.
    pub fn renew(&self, until: Instant) {
        *self.lease_until.lock() = Some(until);
    }

    /// Whether the lease (if any) still holds.
    pub fn lease_holds(&self) -> bool {
        self.lease_until.lock().is_none_or(|u| Instant::now() < u)
    }
}

/// A prepared flow whose tasks run one by one (a worker runs the tasks the
/// manager gave it): what [`run`] does for every task at once.
pub struct Runner {
    ctx: Arc<Ctx>,
}

impl Runner {
    /// Creates what the flow writes to and checks what it reads (as
    /// [`run`] does).
    pub async fn prepare(
        c: AsyncClient,
        flow: Arc<Flow>,
        opts: RunOptions,
        progress: Arc<Progress>,
    ) -> Result<Runner, RunError> {
        Runner::build(c, flow, opts, Arc::new(AtomicBool::new(false)), progress).await
    }

    /// [`Runner::prepare`], every task also stopping when `stop` is set.
    async fn build(
        c: AsyncClient,
        flow: Arc<Flow>,
        opts: RunOptions,
        stop: Arc<AtomicBool>,
        progress: Arc<Progress>,
    ) -> Result<Runner, RunError> {
        let plan = prepare(&c, &flow, &opts).await?;
        if progress.sink_names.len() != plan.sinks.len() {
            return Err(RunError::Setup(
                "the progress counters were made for another flow".into(),
            ));
        }
        Ok(Runner {
            ctx: Arc::new(Ctx {
                c,
                flow,
                plan,
                opts,
                stop,
                progress,
                started: Instant::now(),
            }),
        })
    }

    /// Its tasks: sources × parallelism. Task `t` reads source
    /// `t / parallelism`, partition `t % parallelism`.
    pub fn tasks(&self) -> u32 {
        self.ctx.plan.sources.len() as u32 * self.ctx.flow.parallelism
    }

    /// The tablinum topic and partition task `t` reads (none: a Kafka
    /// source).
    pub fn topic_of(&self, t: u32) -> Option<(String, u32)> {
        let par = self.ctx.flow.parallelism;
        match &self.ctx.plan.sources.get((t / par) as usize)?.1 {
            Source::Topic(name) => Some((name.clone(), t % par)),
            Source::Kafka { .. } => None,
        }
    }

    /// Runs task `t` until `ctl.stop` is set or its lease ends (then it
    /// ends with [`RunError::Fenced`] and commits nothing more).
    pub async fn run_task(&self, t: u32, ctl: Arc<TaskCtl>) -> Result<(), RunError> {
        if t >= self.tasks() {
            return Err(RunError::Setup(format!(
                "flow {} has {} tasks; there is no task {t}",
                self.ctx.flow.name,
                self.tasks()
            )));
        }
        let par = self.ctx.flow.parallelism;
        let ctx = self.ctx.clone();
        ctx.progress.tasks_running.fetch_add(1, Ordering::Relaxed);
        let r = match Task::start(ctx.clone(), (t / par) as usize, t % par, ctl).await {
            Ok(mut task) => task.run().await,
            Err(e) => Err(e),
        };
        ctx.progress.tasks_running.fetch_sub(1, Ordering::Relaxed);
        r
    }
}

fn durability(flow: &Flow) -> Durability {
    if flow.sync {
        Durability::Sync
    } else {
        Durability::Nosync
    }
}

/// A topic of at least `partitions` partitions, created if missing.
async fn ensure_topic(c: &AsyncClient, flow: &Flow, topic: &str) -> Result<u32, RunError> {
    match c.topic(topic).await {
        Ok(t) if t.partitions() < flow.parallelism => Err(RunError::Setup(format!(
            "output topic {topic} has {} partitions; parallelism {} needs at least as many",
            t.partitions(),
            flow.parallelism
        ))),
        Ok(t) => Ok(t.partitions()),
        Err(tablinum_client::Error::NotFound(_)) => {
            match c
                .create_topic(topic, flow.parallelism, durability(flow))
                .await
            {
                Ok(t) => Ok(t.partitions()),
                // Another run made it at the same moment.
                Err(tablinum_client::Error::AlreadyExists(_)) => Ok(c
                    .topic(topic)
                    .await
                    .map_err(cluster(format!("topic {topic}")))?
                    .partitions()),
                Err(e) => Err(cluster(format!("creating topic {topic}"))(e)),
            }
        }
        Err(e) => Err(cluster(format!("topic {topic}"))(e)),
    }
}

#[cfg(feature = "kafka")]
fn kafka_partitions(brokers: &str, topic: &str, line: usize) -> Result<u32, RunError> {
    crate::kafka::partitions(brokers, topic)?.ok_or_else(|| {
        RunError::Setup(format!(
            "line {line}: Kafka topic {topic} does not exist on {brokers}"
        ))
    })
}

#[cfg(not(feature = "kafka"))]
fn kafka_partitions(_: &str, _: &str, line: usize) -> Result<u32, RunError> {
    Err(no_kafka(line))
}

#[cfg(not(feature = "kafka"))]
fn no_kafka(line: usize) -> RunError {
    RunError::Setup(format!(
        "line {line}: Kafka is not in this build: tablinum-flow was compiled without its `kafka` feature"
    ))
}

/// The Kafka sink's topic (created with the flow's parallelism if missing)
/// and the flow's positions topic; the sink topic's partitions.
#[cfg(feature = "kafka")]
async fn ensure_kafka_topics(
    brokers: &str,
    topic: &str,
    flow: &Flow,
    line: usize,
) -> Result<u32, RunError> {
    let n = crate::kafka::ensure_topic(brokers, topic, flow.parallelism, false).await?;
    if n < flow.parallelism {
        return Err(RunError::Setup(format!(
            "line {line}: Kafka topic {topic} has {n} partitions; parallelism {} needs at least as many",
            flow.parallelism
        )));
    }
    let pt = crate::kafka::positions_topic(&flow.name);
    crate::kafka::ensure_topic(brokers, &pt, flow.parallelism, true).await?;
    Ok(n)
}

#[cfg(not(feature = "kafka"))]
async fn ensure_kafka_topics(_: &str, _: &str, _: &Flow, line: usize) -> Result<u32, RunError> {
    Err(no_kafka(line))
}

async fn prepare(c: &AsyncClient, flow: &Flow, opts: &RunOptions) -> Result<Plan, RunError> {
    let by_name: HashMap<String, usize> = flow
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.clone(), i))
        .collect();
    let mut nodes: Vec<PNode> = flow
        .nodes
        .iter()
        .map(|n| PNode {
            name: n.name.clone(),
            kind: n.kind.clone(),
            children: Vec::new(),
            sink: None,
        })
        .collect();
    for (i, n) in flow.nodes.iter().enumerate() {
        if let Some(input) = &n.input {
            let up = by_name[input];
            nodes[up].children.push(i);
        }
    }
    let hashed_after: Vec<bool> = {
        // A sink is hash-partitioned when a key operator is upstream of it.
        let mut keyed = vec![false; nodes.len()];
        for (i, n) in flow.nodes.iter().enumerate() {
            let up = n.input.as_ref().map(|x| by_name[x]);
            let from_up = up.is_some_and(|u| keyed[u]);
            keyed[i] = from_up || matches!(n.kind, Kind::Operator(Operator::Key(_), _));
        }
        keyed
    };
    let mut sources = Vec::new();
    let mut sinks = Vec::new();
    for (i, n) in flow.nodes.iter().enumerate() {
        match &n.kind {
            Kind::Source(Source::Topic(t)) => {
                let topic = c.topic(t).await.map_err(|e| match e {
                    tablinum_client::Error::NotFound(_) => RunError::Setup(format!(
                        "line {}: source topic {t} does not exist (tablinum topic create {t} --partitions {})",
                        n.line, flow.parallelism
                    )),
                    e => cluster(format!("source topic {t}"))(e),
                })?;
                if topic.partitions() != flow.parallelism {
                    return Err(RunError::Setup(format!(
                        "line {}: source topic {t} has {} partitions but the flow's parallelism is {}: one task reads one partition, so they must match",
                        n.line,
                        topic.partitions(),
                        flow.parallelism
                    )));
                }
                sources.push((i, Source::Topic(t.clone())));
            }
            Kind::Source(k @ Source::Kafka { brokers, topic, .. }) => {
                let have = kafka_partitions(brokers, topic, n.line)?;
                if have != flow.parallelism {
                    return Err(RunError::Setup(format!(
                        "line {}: Kafka topic {topic} has {have} partitions but the flow's parallelism is {}: one task reads one partition, so they must match",
                        n.line, flow.parallelism
                    )));
                }
                sources.push((i, k.clone()));
            }
            Kind::Sink(s) => {
                nodes[i].sink = Some(sinks.len());
                sinks.push(match s {
                    Sink::Topic(t) => PlanSink::Topic {
                        name: n.name.clone(),
                        topic: t.clone(),
                        partitions: ensure_topic(c, flow, t).await?,
                        hashed: hashed_after[i],
                    },
                    Sink::Kafka { brokers, topic } => PlanSink::Kafka {
                        name: n.name.clone(),
                        brokers: brokers.clone(),
                        partitions: ensure_kafka_topics(brokers, topic, flow, n.line).await?,
                        topic: topic.clone(),
                        hashed: hashed_after[i],
                    },
                    Sink::Table {
                        table,
                        key,
                        metadata,
                        index,
                    } => {
                        match c.locations(table, true).await {
                            Ok(_) => {}
                            Err(tablinum_client::Error::NotFound(_)) => {
                                let r = c
                                    .create_table(table, TableSplit::Even(1), durability(flow))
                                    .await;
                                if let Err(e) = r {
                                    if !matches!(e, tablinum_client::Error::AlreadyExists(_)) {
                                        return Err(cluster(format!("creating table {table}"))(e));
                                    }
                                }
                            }
                            Err(e) => return Err(cluster(format!("table {table}"))(e)),
                        }
                        PlanSink::Table {
                            name: n.name.clone(),
                            table: table.clone(),
                            key: key.clone(),
                            fields: Arc::new(RowFields {
                                metadata: metadata.clone(),
                                index: index.clone(),
                            }),
                        }
                    }
                    Sink::Files { dir, format } => {
                        let d = opts.root.join(dir);
                        std::fs::create_dir_all(&d)
                            .map_err(|e| RunError::Io(format!("creating {}: {e}", d.display())))?;
                        PlanSink::Files {
                            dir: d,
                            parquet: *format == FileFormat::Parquet,
                        }
                    }
                });
            }
            Kind::Operator(..) => {}
        }
    }
    // A materialized operator writes into its topic (a sink of this stage)
    // and its children read that topic (a source of the next stage).
    for (i, n) in flow.nodes.iter().enumerate() {
        if !matches!(n.kind, Kind::Operator(_, true)) {
            continue;
        }
        let topic = materialized_topic(flow, &n.name);
        let partitions = ensure_topic(c, flow, &topic).await?;
        let sink = nodes.len();
        let source = sink + 1;
        let children = std::mem::replace(&mut nodes[i].children, vec![sink]);
        nodes.push(PNode {
            name: n.name.clone(),
            kind: Kind::Sink(Sink::Topic(topic.clone())),
            children: Vec::new(),
            sink: Some(sinks.len()),
        });
        nodes.push(PNode {
            name: n.name.clone(),
            kind: Kind::Source(Source::Topic(topic.clone())),
            children,
            sink: None,
        });
        sinks.push(PlanSink::Topic {
            name: n.name.clone(),
            topic: topic.clone(),
            partitions,
            hashed: hashed_after[i],
        });
        sources.push((source, Source::Topic(topic)));
    }
    let dl = dead_letter_topic(flow);
    sinks.push(PlanSink::Topic {
        name: crate::definition::DEAD_LETTER.to_string(),
        partitions: ensure_topic(c, flow, &dl).await?,
        topic: dl,
        hashed: false,
    });
    if sinks.iter().any(|s| matches!(s, PlanSink::Table { .. })) {
        let st = state_table(flow);
        match c
            .create_table(&st, TableSplit::Even(1), Durability::Sync)
            .await
        {
            Ok(_) | Err(tablinum_client::Error::AlreadyExists(_)) => {}
            Err(e) => return Err(cluster(format!("creating table {st}"))(e)),
        }
    }
    Ok(Plan {
        nodes,
        by_name,
        sinks,
        sources,
    })
}

/// A record on its way through the graph.
struct Rec<'a> {
    offset: u64,
    json: std::borrow::Cow<'a, [u8]>,
    tail: Option<&'a [u8]>,
    key: Option<Vec<u8>>,
}

/// One output partition of a topic sink, as one task sees it.
#[derive(Default)]
struct OutPart {
    /// The writer's committed input position (next offset), if any.
    pos: Option<u64>,
    buf: Vec<Vec<u8>>,
}

/// One sink as one task holds it: what is buffered and what is committed.
enum SinkTask {
    Topic {
        topic: String,
        writer: String,
        hashed: bool,
        parts: Vec<OutPart>,
    },
    Table {
        table: String,
        key: TableKey,
        fields: Arc<RowFields>,
        state_key: Vec<u8>,
        pos: u64,
        rows: Vec<Mutation>,
    },
    Files {
        dir: PathBuf,
        prefix: String,
        pos: u64,
        /// JSON lines, or (for Parquet) empty.
        buf: Vec<u8>,
        /// Parquet rows: (input offset, JSON).
        rows: Option<Vec<(u64, Vec<u8>)>>,
        records: u64,
        first: Option<u64>,
    },
    #[cfg(feature = "kafka")]
    Kafka {
        sink: crate::kafka::KafkaSink,
        topic: String,
        positions: String,
        hashed: bool,
        partitions: u32,
        pos: u64,
        buf: Vec<(u32, Vec<u8>)>,
    },
}

fn enc(pos: u64) -> Vec<u8> {
    pos.to_be_bytes().to_vec()
}

fn dec(what: &str, v: &[u8]) -> Result<u64, RunError> {
    tablinum_proto::topic::decode_offset(v)
        .map_err(|m| RunError::Cluster(format!("{what}: stored position: {m}")))
}

/// FNV-1a: the output partition of a keyed record.
fn hash(key: &[u8]) -> u64 {
    key.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl SinkTask {
    /// The input position this sink has committed (next offset to read).
    fn committed(&self) -> u64 {
        match self {
            SinkTask::Topic { parts, .. } => parts.iter().filter_map(|p| p.pos).min().unwrap_or(0),
            SinkTask::Table { pos, .. } | SinkTask::Files { pos, .. } => *pos,
            #[cfg(feature = "kafka")]
            SinkTask::Kafka { pos, .. } => *pos,
        }
    }

    fn buffered(&self) -> usize {
        match self {
            SinkTask::Topic { parts, .. } => parts
                .iter()
                .map(|p| p.buf.iter().map(Vec::len).sum::<usize>())
                .sum(),
            SinkTask::Table { rows, .. } => rows.iter().map(|m| m.value.len()).sum(),
            SinkTask::Files { buf, rows, .. } => {
                buf.len()
                    + rows
                        .as_ref()
                        .map_or(0, |r| r.iter().map(|x| x.1.len()).sum())
            }
            #[cfg(feature = "kafka")]
            SinkTask::Kafka { buf, .. } => buf.iter().map(|r| r.1.len()).sum(),
        }
    }
}

/// Where one task reads.
enum Reader {
    /// A tablinum topic.
    Topic(String),
    /// A Kafka partition.
    #[cfg(feature = "kafka")]
    Kafka(crate::kafka::KafkaSource),
}

/// One source partition's task.
struct Task {
    ctx: Arc<Ctx>,
    source: usize,
    reader: Reader,
    p: u32,
    sinks: Vec<SinkTask>,
    /// The next input offset to read.
    next: u64,
    /// When it last committed.
    last_commit: Instant,
    /// Its stop flag, lease and live figures.
    ctl: Arc<TaskCtl>,
}

impl Task {
    async fn start(
        ctx: Arc<Ctx>,
        source: usize,
        p: u32,
        ctl: Arc<TaskCtl>,
    ) -> Result<Task, RunError> {
        let (src_node, spec) = ctx.plan.sources[source].clone();
        let src_name = ctx.plan.nodes[src_node].name.clone();
        let mut sinks = Vec::new();
        for s in &ctx.plan.sinks {
            sinks.push(match s {
                PlanSink::Topic {
                    name,
                    topic: out,
                    partitions,
                    hashed,
                } => {
                    let writer = format!("{}/{name}/{src_name}:{p}", ctx.flow.name);
                    let targets: Vec<u32> = if *hashed {
                        (0..*partitions).collect()
                    } else {
                        vec![p]
                    };
                    let mut parts: Vec<OutPart> =
                        (0..*partitions).map(|_| OutPart::default()).collect();
                    for q in targets {
                        let v = ctx
                            .c
                            .writer_position(out, q, &writer)
                            .await
                            .map_err(cluster(format!("reading {writer} in {out}")))?;
                        parts[q as usize].pos =
                            Some(if v.is_empty() { 0 } else { dec(&writer, &v)? });
                    }
                    SinkTask::Topic {
                        topic: out.clone(),
                        writer,
                        hashed: *hashed,
                        parts,
                    }
                }
                PlanSink::Table {
                    name,
                    table,
                    key,
                    fields,
                } => {
                    let state_key = format!("{name}/{src_name}/{p}").into_bytes();
                    let st = state_table(&ctx.flow);
                    let v = ctx
                        .c
                        .get(&st, &state_key)
                        .await
                        .map_err(cluster(format!("reading positions in {st}")))?;
                    let pos = match v {
                        Some(v) => dec(name, &v)?,
                        None => 0,
                    };
                    SinkTask::Table {
                        table: table.clone(),
                        key: key.clone(),
                        fields: fields.clone(),
                        state_key,
                        pos,
                        rows: Vec::new(),
                    }
                }
                #[cfg(feature = "kafka")]
                PlanSink::Kafka {
                    name,
                    brokers,
                    topic: out,
                    hashed,
                    partitions,
                } => {
                    let writer = format!("{}/{name}/{src_name}:{p}", ctx.flow.name);
                    let positions = crate::kafka::positions_topic(&ctx.flow.name);
                    let sink = crate::kafka::KafkaSink::open(brokers, &writer)?;
                    let pos = sink.position(brokers, &positions, p)?.unwrap_or(0);
                    SinkTask::Kafka {
                        sink,
                        topic: out.clone(),
                        positions,
                        hashed: *hashed,
                        partitions: *partitions,
                        pos,
                        buf: Vec::new(),
                    }
                }
                #[cfg(not(feature = "kafka"))]
                PlanSink::Kafka { .. } => return Err(no_kafka(0)),
                PlanSink::Files { dir, parquet } => {
                    let prefix = format!("{src_name}-{p:05}-");
                    let pos = files_position(dir, &prefix)?;
                    SinkTask::Files {
                        dir: dir.clone(),
                        prefix,
                        pos,
                        buf: Vec::new(),
                        rows: parquet.then(Vec::new),
                        records: 0,
                        first: None,
                    }
                }
            });
        }
        // Resume at the lowest committed position; each sink skips what
        // it holds already.
        let next = sinks.iter().map(SinkTask::committed).min().unwrap_or(0);
        let (reader, start) = match spec {
            Source::Topic(topic) => {
                let start = ctx
                    .c
                    .topic_head(&topic, p)
                    .await
                    .map_err(cluster(format!("topic {topic} partition {p}")))?
                    .start;
                (Reader::Topic(topic), start)
            }
            #[cfg(feature = "kafka")]
            Source::Kafka {
                brokers,
                topic,
                group,
            } => (
                Reader::Kafka(crate::kafka::KafkaSource::open(
                    &brokers, &topic, &group, p,
                )?),
                0,
            ),
            #[cfg(not(feature = "kafka"))]
            Source::Kafka { .. } => return Err(no_kafka(0)),
        };
        ctl.position.store(next, Ordering::Relaxed);
        Ok(Task {
            ctx,
            source,
            reader,
            p,
            sinks,
            next: next.max(start),
            last_commit: Instant::now(),
            ctl,
        })
    }

    async fn run(&mut self) -> Result<(), RunError> {
        let interval = Duration::from_millis(self.ctx.flow.commit_interval_ms);
        let mut idle_since: Option<Instant> = None;
        // Input read while the last commit was in flight, in order, from
        // `self.next` on (dropped, never committed, if the task stops).
        let mut ahead: VecDeque<Vec<tablinum_client::topic::Record>> = VecDeque::new();
        loop {
            if self.ctx.stop.load(Ordering::Relaxed) || self.ctl.stop.load(Ordering::Relaxed) {
                return self.commit().await;
            }
            let got = match ahead.pop_front() {
                Some(got) => got,
                None => self.read().await?,
            };
            if got.is_empty() {
                if self.dirty() {
                    self.commit().await?;
                }
                let since = *idle_since.get_or_insert_with(Instant::now);
                if self
                    .ctx
                    .opts
                    .until_idle
                    .is_some_and(|d| since.elapsed() >= d)
                {
                    return Ok(());
                }
                tokio::time::sleep(self.ctx.opts.poll).await;
                continue;
            }
            idle_since = None;
            let now = self.ctx.started.elapsed().as_millis() as u64;
            self.ctx
                .progress
                .first_record_ms
                .fetch_min(now, Ordering::Relaxed);
            self.ctx
                .progress
                .records_in
                .fetch_add(got.len() as u64, Ordering::Relaxed);
            self.ctl
                .records_in
                .fetch_add(got.len() as u64, Ordering::Relaxed);
            for r in &got {
                self.route(r)?;
                self.next = r.offset + 1;
            }
            let buffered: usize = self.sinks.iter().map(SinkTask::buffered).sum();
            if self.last_commit.elapsed() >= interval || buffered >= BUFFER_BYTES_MAX {
                self.commit_reading_ahead(&mut ahead).await?;
            }
        }
    }

    /// Commits, and meanwhile reads on from the end of `ahead` (or
    /// `self.next`) into `ahead`, up to [`READ_AHEAD_BYTES_MAX`] in all: the
    /// next batch is read while the sinks wait for their fsyncs, so a task
    /// does not alternate between reading and waiting. Only the commit
    /// changes any sink or position; the records read ahead are routed
    /// after it, in order.
    async fn commit_reading_ahead(
        &mut self,
        ahead: &mut VecDeque<Vec<tablinum_client::topic::Record>>,
    ) -> Result<(), RunError> {
        let Reader::Topic(topic) = &self.reader else {
            return self.commit().await;
        };
        let (ctx, topic, p) = (self.ctx.clone(), topic.clone(), self.p);
        let mut from = ahead
            .back()
            .and_then(|b| b.last())
            .map_or(self.next, |r| r.offset + 1);
        let mut bytes: usize = ahead.iter().flatten().map(|r| r.value.len()).sum();
        let commit = self.commit();
        tokio::pin!(commit);
        let mut committed = false;
        // Reading ahead is optional work: a read that fails only ends it
        // (the commit goes on; the task's next plain read meets a lasting
        // error and reports it).
        while !committed && bytes < READ_AHEAD_BYTES_MAX {
            let read = read_topic_batch(&ctx, &topic, p, from);
            tokio::pin!(read);
            let got = tokio::select! {
                r = &mut commit => {
                    r?;
                    committed = true;
                    // Finish the read in flight rather than waste it.
                    (&mut read).await
                }
                got = &mut read => got,
            };
            let Ok(got) = got else { break };
            let Some(last) = got.last() else { break };
            from = last.offset + 1;
            bytes += got.iter().map(|r| r.value.len()).sum::<usize>();
            ahead.push_back(got);
        }
        if !committed {
            commit.await?;
        }
        Ok(())
    }

    /// The next records of this task's partition (none: at its end).
    async fn read(&mut self) -> Result<Vec<tablinum_client::topic::Record>, RunError> {
        match &mut self.reader {
            Reader::Topic(topic) => read_topic_batch(&self.ctx, topic, self.p, self.next).await,
            #[cfg(feature = "kafka")]
            Reader::Kafka(k) => Ok(k
                .read(self.next, self.ctx.opts.read_records, self.ctx.opts.poll)?
                .into_iter()
                .map(|(offset, value)| tablinum_client::topic::Record { offset, value })
                .collect()),
        }
    }

    /// Whether a commit would move any sink's position.
    fn dirty(&self) -> bool {
        self.sinks.iter().any(|s| match s {
            SinkTask::Topic { parts, .. } => parts
                .iter()
                .any(|p| p.pos.is_some_and(|x| x < self.next) || !p.buf.is_empty()),
            SinkTask::Table { pos, .. } => *pos < self.next,
            SinkTask::Files { records, .. } => *records > 0,
            #[cfg(feature = "kafka")]
            SinkTask::Kafka { pos, buf, .. } => *pos < self.next || !buf.is_empty(),
        })
    }

    fn route(&mut self, r: &tablinum_client::topic::Record) -> Result<(), RunError> {
        let (json, tail_stamp) = split_tail(&r.value);
        let tail = tail_stamp.map(|_| &r.value[json.len()..]);
        let src = self.ctx.plan.sources[self.source].0;
        let rec = Rec {
            offset: r.offset,
            json: std::borrow::Cow::Borrowed(json),
            tail,
            key: None,
        };
        let ctx = self.ctx.clone();
        for &child in &ctx.plan.nodes[src].children {
            self.visit(&ctx, child, &rec, &r.value)?;
        }
        Ok(())
    }

    fn visit(&mut self, ctx: &Ctx, node: usize, rec: &Rec<'_>, raw: &[u8]) -> Result<(), RunError> {
        let n = &ctx.plan.nodes[node];
        match &n.kind {
            Kind::Operator(op, _) => match apply(op, &rec.json) {
                Outcome::Forward(Some(to)) => {
                    let i = ctx.plan.by_name[&to];
                    self.visit(ctx, i, rec, raw)?;
                }
                Outcome::Forward(None) => {
                    for &c in &n.children {
                        self.visit(ctx, c, rec, raw)?;
                    }
                }
                Outcome::Rewritten(b) => {
                    let r2 = Rec {
                        offset: rec.offset,
                        json: std::borrow::Cow::Owned(b),
                        tail: rec.tail,
                        key: rec.key.clone(),
                    };
                    for &c in &n.children {
                        self.visit(ctx, c, &r2, raw)?;
                    }
                }
                Outcome::Keyed(k) => {
                    let r2 = Rec {
                        offset: rec.offset,
                        json: rec.json.clone(),
                        tail: rec.tail,
                        key: Some(k),
                    };
                    for &c in &n.children {
                        self.visit(ctx, c, &r2, raw)?;
                    }
                }
                Outcome::Dropped => {}
                Outcome::DeadLetter(_) => self.dead_letter(rec.offset, raw),
            },
            Kind::Sink(_) => {
                let s = n.sink.expect("sinks are indexed in prepare");
                self.deliver(ctx, s, rec, raw);
            }
            Kind::Source(_) => {}
        }
        Ok(())
    }

    fn dead_letter(&mut self, offset: u64, raw: &[u8]) {
        let last = self.sinks.len() - 1;
        if let SinkTask::Topic { parts, .. } = &mut self.sinks[last] {
            let part = &mut parts[self.p as usize];
            if part.pos.unwrap_or(0) <= offset {
                part.buf.push(raw.to_vec());
            }
        }
    }

    fn deliver(&mut self, ctx: &Ctx, s: usize, rec: &Rec<'_>, raw: &[u8]) {
        let p = self.p;
        match &mut self.sinks[s] {
            SinkTask::Topic { parts, hashed, .. } => {
                let q = match (&rec.key, *hashed) {
                    (Some(k), true) => (hash(k) % parts.len() as u64) as usize,
                    _ => p as usize,
                };
                let part = &mut parts[q];
                if part.pos.unwrap_or(0) > rec.offset {
                    return;
                }
                let mut v = Vec::with_capacity(rec.json.len() + 9);
                v.extend_from_slice(&rec.json);
                if let Some(t) = rec.tail {
                    v.extend_from_slice(t);
                }
                part.buf.push(v);
            }
            SinkTask::Table {
                key,
                fields,
                pos,
                rows,
                ..
            } => {
                if *pos > rec.offset {
                    return;
                }
                let k = match key {
                    TableKey::Position => {
                        let src = &ctx.plan.nodes[ctx.plan.sources[self.source].0].name;
                        format!("{src}/{p:05}/{:020}", rec.offset).into_bytes()
                    }
                    TableKey::Field(path) => match extract(&rec.json, path) {
                        Ok(Some(Value::Str(s))) if !s.is_empty() => s.into_owned(),
                        Ok(Some(Value::Num(n))) => n.to_vec(),
                        _ => {
                            self.dead_letter(rec.offset, raw);
                            return;
                        }
                    },
                };
                let Some((metadata, index_terms)) = fields.of(&rec.json) else {
                    self.dead_letter(rec.offset, raw);
                    return;
                };
                if k.len() > tablinum_engine::options::KEY_BYTES_MAX {
                    self.dead_letter(rec.offset, raw);
                    return;
                }
                rows.push(Mutation {
                    key: k,
                    value: rec.json.to_vec(),
                    metadata,
                    index_terms,
                    ..Default::default()
                });
            }
            #[cfg(feature = "kafka")]
            SinkTask::Kafka {
                pos,
                buf,
                hashed,
                partitions,
                ..
            } => {
                if *pos > rec.offset {
                    return;
                }
                let q = match (&rec.key, *hashed) {
                    (Some(k), true) => (hash(k) % u64::from(*partitions)) as u32,
                    _ => p,
                };
                let mut v = Vec::with_capacity(rec.json.len() + 9);
                v.extend_from_slice(&rec.json);
                if let Some(t) = rec.tail {
                    v.extend_from_slice(t);
                }
                buf.push((q, v));
            }
            SinkTask::Files {
                pos,
                buf,
                rows,
                records,
                first,
                ..
            } => {
                if *pos > rec.offset {
                    return;
                }
                match rows {
                    // Parquet keeps records as UTF-8 strings.
                    Some(_) if std::str::from_utf8(&rec.json).is_err() => {
                        self.dead_letter(rec.offset, raw);
                        return;
                    }
                    Some(rows) => rows.push((rec.offset, rec.json.to_vec())),
                    None => {
                        buf.extend_from_slice(&rec.json);
                        buf.push(b'\n');
                    }
                }
                first.get_or_insert(rec.offset);
                *records += 1;
            }
        }
    }

    /// Commits every sink at the current input position.
    async fn commit(&mut self) -> Result<(), RunError> {
        if !self.ctl.lease_holds() {
            return Err(RunError::Fenced(format!(
                "task {}:{} of flow {}: its lease ended before this commit; nothing more is committed",
                self.source, self.p, self.ctx.flow.name
            )));
        }
        let to = self.next;
        let number = self.ctx.progress.commits.fetch_add(1, Ordering::Relaxed) + 1;
        let mut carried = 0;
        // Every sink commits at once (their positions are independent);
        // the crash seam fires after the (k+1)-th of them finished, while
        // the others may still be in flight.
        let ctx = self.ctx.clone();
        let p = self.p;
        let mut pending: FuturesUnordered<_> = self
            .sinks
            .iter_mut()
            .enumerate()
            .map(|(i, s)| {
                let ctx = &ctx;
                async move { (i, commit_sink(ctx, s, p, to).await) }
            })
            .collect();
        let mut finished = 0;
        while let Some((i, r)) = pending.next().await {
            let (n, bytes) = r?;
            carried += n;
            ctx.progress.records_out[i].fetch_add(n, Ordering::Relaxed);
            ctx.progress.bytes_out[i].fetch_add(bytes, Ordering::Relaxed);
            if ctx.opts.crash_at == Some((number, finished)) {
                eprintln!(
                    "{CRASH_AT_ENV}: ending the process in commit {number} after {} sinks committed",
                    finished + 1
                );
                std::process::abort();
            }
            finished += 1;
        }
        drop(pending);
        #[cfg(feature = "kafka")]
        if let Reader::Kafka(k) = &self.reader {
            k.commit_group(to)?;
        }
        if carried > 0 {
            let now = self.ctx.started.elapsed().as_millis() as u64;
            self.ctx
                .progress
                .last_commit_ms
                .fetch_max(now, Ordering::Relaxed);
        }
        self.ctl.position.store(to, Ordering::Relaxed);
        self.last_commit = Instant::now();
        Ok(())
    }
}

/// The records of topic partition `p` from offset `from`, at most
/// `ctx.opts.read_records` of them (none: at its end).
async fn read_topic_batch(
    ctx: &Ctx,
    topic: &str,
    p: u32,
    from: u64,
) -> Result<Vec<tablinum_client::topic::Record>, RunError> {
    let mut got = Vec::new();
    ctx.c
        .read_topic(topic, p, from, ctx.opts.read_records, &mut |r| {
            got.push(r);
            ControlFlow::Continue(())
        })
        .await
        .map_err(cluster(format!("reading topic {topic} partition {p}")))?;
    Ok(got)
}

/// Commits one sink's buffer with input position `to`; returns the
/// records and bytes it committed.
async fn commit_sink(ctx: &Ctx, s: &mut SinkTask, p: u32, to: u64) -> Result<(u64, u64), RunError> {
    match s {
        #[cfg(feature = "kafka")]
        SinkTask::Kafka {
            sink,
            topic,
            positions,
            pos,
            buf,
            ..
        } => {
            if *pos >= to && buf.is_empty() {
                return Ok((0, 0));
            }
            let records = std::mem::take(buf);
            let (n, bytes) = (
                records.len() as u64,
                records.iter().map(|r| r.1.len() as u64).sum::<u64>(),
            );
            sink.commit(topic, &records, Some((positions.as_str(), p, to)))?;
            *pos = to;
            Ok((n, bytes))
        }
        SinkTask::Topic {
            topic,
            writer,
            parts,
            ..
        } => {
            let mut n = 0u64;
            let mut bytes = 0u64;
            for (q, part) in parts.iter_mut().enumerate() {
                let Some(pos) = part.pos else { continue };
                if pos >= to && part.buf.is_empty() {
                    continue;
                }
                let records = std::mem::take(&mut part.buf);
                let (rn, rb) = (
                    records.len() as u64,
                    records.iter().map(|r| r.len() as u64).sum::<u64>(),
                );
                let check = WriterCheck {
                    writer: writer.clone(),
                    expect: if pos == 0 { Vec::new() } else { enc(pos) },
                    position: enc(to),
                };
                match ctx.c.append(topic, q as u32, records, Some(check)).await {
                    Ok(_) => {}
                    Err(tablinum_client::Error::Conflict(m)) => {
                        // An earlier try of this append landed (its answer
                        // was lost), or another instance got there first.
                        let now = ctx
                            .c
                            .writer_position(topic, q as u32, writer)
                            .await
                            .map_err(cluster(format!("reading {writer} in {topic}")))?;
                        if now != enc(to) {
                            return Err(RunError::Fenced(format!(
                                "{writer} in topic {topic} partition {q}: {m}"
                            )));
                        }
                    }
                    Err(e) => {
                        return Err(cluster(format!("appending to topic {topic} partition {q}"))(e))
                    }
                }
                part.pos = Some(to);
                n += rn;
                bytes += rb;
            }
            Ok((n, bytes))
        }
        SinkTask::Table {
            table,
            state_key,
            pos,
            rows,
            ..
        } => {
            if *pos >= to && rows.is_empty() {
                return Ok((0, 0));
            }
            let rows = std::mem::take(rows);
            let (n, bytes) = (
                rows.len() as u64,
                rows.iter().map(|m| m.value.len() as u64).sum::<u64>(),
            );
            if !rows.is_empty() {
                ctx.c
                    .write_routed(table, rows)
                    .await
                    .map_err(cluster(format!("writing table {table}")))?;
            }
            let st = state_table(&ctx.flow);
            ctx.c
                .put(&st, state_key, &enc(to))
                .await
                .map_err(cluster(format!("storing a position in {st}")))?;
            *pos = to;
            Ok((n, bytes))
        }
        SinkTask::Files {
            dir,
            prefix,
            pos,
            buf,
            rows,
            records,
            first,
        } => {
            let Some(f) = *first else {
                return Ok((0, 0));
            };
            let last = to - 1;
            let (bytes, ext) = match rows {
                Some(r) => (r.iter().map(|x| x.1.len() as u64).sum(), PARQUET_EXT),
                None => (buf.len() as u64, JSONL_EXT),
            };
            let name = format!("{prefix}{f:020}-{last:020}{ext}");
            match rows {
                Some(r) => {
                    write_committed(dir, &name, |file| write_parquet(file, p, r))?;
                    r.clear();
                }
                None => write_committed(dir, &name, |file| {
                    file.write_all(buf).map_err(|e| e.to_string())
                })?,
            }
            let n = *records;
            buf.clear();
            *records = 0;
            *first = None;
            *pos = to;
            Ok((n, bytes))
        }
    }
}

/// Suffix of a file being written (never read as committed).
pub const IN_PROGRESS_SUFFIX: &str = ".inprogress";

/// Suffix of a committed JSON-lines file.
pub const JSONL_EXT: &str = ".jsonl";
/// Suffix of a committed Parquet file.
pub const PARQUET_EXT: &str = ".parquet";

#[cfg(feature = "parquet")]
fn write_parquet(f: &mut std::fs::File, p: u32, rows: &[(u64, Vec<u8>)]) -> Result<(), String> {
    crate::parquet_file::write(f, p, rows)
}

#[cfg(not(feature = "parquet"))]
fn write_parquet(_: &mut std::fs::File, _: u32, _: &[(u64, Vec<u8>)]) -> Result<(), String> {
    Err("Parquet is not in this build (feature `parquet`)".into())
}

/// Writes `name` in `dir` whole or not at all: `fill` writes it aside
/// under `.NAME.inprogress`; then it is fsynced, renamed and the directory
/// fsynced.
fn write_committed(
    dir: &FsPath,
    name: &str,
    fill: impl FnOnce(&mut std::fs::File) -> Result<(), String>,
) -> Result<(), RunError> {
    let io = |what: &str, p: &FsPath, e: std::io::Error| {
        RunError::Io(format!("{what} {}: {e}", p.display()))
    };
    let tmp = dir.join(format!(".{name}{IN_PROGRESS_SUFFIX}"));
    let fin = dir.join(name);
    let mut f = std::fs::File::create(&tmp).map_err(|e| io("creating", &tmp, e))?;
    fill(&mut f).map_err(|e| RunError::Io(format!("writing {}: {e}", tmp.display())))?;
    f.sync_all().map_err(|e| io("syncing", &tmp, e))?;
    drop(f);
    std::fs::rename(&tmp, &fin).map_err(|e| io("renaming into", &fin, e))?;
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| io("syncing directory", dir, e))?;
    Ok(())
}

/// The input position the committed files of one task cover (one past the
/// last offset in their names); removes the task's in-progress files,
/// which never count.
fn files_position(dir: &FsPath, prefix: &str) -> Result<u64, RunError> {
    let rd = std::fs::read_dir(dir)
        .map_err(|e| RunError::Io(format!("reading {}: {e}", dir.display())))?;
    let mut pos = 0u64;
    for e in rd {
        let e = e.map_err(|e| RunError::Io(format!("reading {}: {e}", dir.display())))?;
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!(".{prefix}")) && name.ends_with(IN_PROGRESS_SUFFIX) {
            std::fs::remove_file(e.path())
                .map_err(|er| RunError::Io(format!("removing {}: {er}", e.path().display())))?;
            continue;
        }
        if let Some((_, last)) = committed_range(&name, prefix) {
            pos = pos.max(last + 1);
        }
    }
    Ok(pos)
}

/// The (first, last) input offsets a committed file of `prefix` names.
pub fn committed_range(name: &str, prefix: &str) -> Option<(u64, u64)> {
    let rest = name.strip_prefix(prefix)?;
    let rest = rest
        .strip_suffix(JSONL_EXT)
        .or_else(|| rest.strip_suffix(PARQUET_EXT))?;
    let (a, b) = rest.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Whether `name` is a committed file of a file sink
/// (`SOURCE-PPPPP-FIRST-LAST.jsonl` or `.parquet`, twenty digits each
/// offset).
pub fn is_committed_file(name: &str) -> bool {
    let Some(rest) = name
        .strip_suffix(JSONL_EXT)
        .or_else(|| name.strip_suffix(PARQUET_EXT))
    else {
        return false;
    };
    let mut it = rest.rsplitn(4, '-');
    let digits = |s: Option<&str>, n: usize| {
        s.is_some_and(|s| s.len() == n && s.bytes().all(|b| b.is_ascii_digit()))
    };
    digits(it.next(), 20) && digits(it.next(), 20) && digits(it.next(), 5) && it.next().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_rows_take_metadata_and_index_terms_from_fields() {
        let path = |p: &str| crate::field::Path::parse(p).unwrap();
        let f = RowFields {
            metadata: vec![
                ("host".into(), path("host")),
                ("ctx.n".into(), path("ctx.n")),
                ("gone".into(), path("gone")),
            ],
            index: vec![
                ("by_host".into(), path("host")),
                ("by_gone".into(), path("gone")),
            ],
        };
        let (meta, terms) = f.of(br#"{"host":"a\"b\u0001","ctx":{"n":12}}"#).unwrap();
        assert_eq!(
            String::from_utf8(meta).unwrap(),
            r#"{"host":"a\"b\u0001","ctx.n":12}"#
        );
        assert_eq!(terms.len(), 1);
        assert_eq!(terms[0].term, b"a\"b\x01");
        assert!(
            f.of(b"not json").is_none(),
            "a record that is not JSON: dead letter"
        );
        let long = format!(r#"{{"host":"{}"}}"#, "x".repeat(2000));
        assert!(
            f.of(long.as_bytes()).is_none(),
            "a term past the limit: dead letter"
        );
        assert_eq!(
            RowFields::default().of(b"not json").unwrap(),
            (Vec::new(), Vec::new())
        );
    }

    #[test]
    fn committed_files_name_their_range_and_others_are_ignored() {
        assert_eq!(
            committed_range(
                "logs-00003-00000000000000000010-00000000000000000019.jsonl",
                "logs-00003-"
            ),
            Some((10, 19))
        );
        assert_eq!(committed_range("logs-00004-1-2.jsonl", "logs-00003-"), None);
        assert_eq!(
            committed_range("logs-00003-1-2.jsonl.inprogress", "logs-00003-"),
            None
        );
        assert_eq!(committed_range("logs-00003-x-2.jsonl", "logs-00003-"), None);
        assert!(is_committed_file(
            "logs-00003-00000000000000000010-00000000000000000019.jsonl"
        ));
        assert!(!is_committed_file(
            ".logs-00003-00000000000000000010-00000000000000000019.jsonl.inprogress"
        ));
        assert!(!is_committed_file("logs-3-10-19.jsonl"));
        assert!(!is_committed_file("notes.jsonl"));
    }

    #[test]
    fn files_position_skips_in_progress_and_removes_them() {
        let d = std::env::temp_dir().join(format!("tablinum-flow-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        write_committed(
            &d,
            "s-00000-00000000000000000000-00000000000000000009.jsonl",
            |f| {
                f.write_all(
                    b"x
",
                )
                .map_err(|e| e.to_string())
            },
        )
        .unwrap();
        std::fs::write(
            d.join(".s-00000-00000000000000000010-00000000000000000099.jsonl.inprogress"),
            b"y",
        )
        .unwrap();
        assert_eq!(files_position(&d, "s-00000-").unwrap(), 10);
        assert_eq!(files_position(&d, "s-00001-").unwrap(), 0);
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
