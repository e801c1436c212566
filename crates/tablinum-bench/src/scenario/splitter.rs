//! The Scribengin splitter report (log records split by level into one sink
//! per level), on tablinum's dataflow beside Kafka Streams 4.4.0
//! (`exactly_once_v2`) on one Kafka 4.4.0 broker: `tablinum bench scenario
//! splitter`.
//!
//! The port of `bench/results/2026-11-29-splitter/run.sh` and
//! `bench/results/2026-11-29-worker-kill/run.py` (their NOTE.md explains the
//! figures). Topology: generator → input topic ([`PARTITIONS`] partitions)
//! → split by the JSON field `level` (INFO / WARNING / ERROR) → one sink per
//! level. Every run drives the real `tablinum` binary (the running one) as
//! child processes ([`procs`]), against one `tablinum up` cluster
//! ([`framework::cluster`]) and one Kafka broker started once
//! (`scripts/kafka-broker.sh`, embedded; [`kafka`]). Cells ([`Variant`] ×
//! [`SplitKind`]):
//! - `a-fused`: tablinum topics end to end in one flow; `a-topics`: run.sh's
//!   (a), a topic on every edge (splitter and persister flows at once).
//! - `b-tablinum` / `b-kafka-streams`: Kafka → Kafka; the two of one repeat
//!   and split read one generated input, one after the other.
//! - `c-parquet`: Kafka → Parquet files (the report's HDFS rows).
//! - (d) the skewed split 80/15/5 for `a-fused` and the b pair.
//! - `… latency`: p50/p99 at a steady generator rate.
//! - `e-kill`: run.py: two workers, one SIGKILLed a third of the way
//!   through, recovery of the 2 s-window rate to 90 % ([`kill`]).
//!
//! Every run is validated (`flow validate`: 0 lost, 0 duplicated) before its
//! throughput counts. Owns the plan (its cells are [`cells`]), the parameters and the
//! body's `rows` (one per run; [`RunRow`]); the measurement of each variant
//! is [`measure`], the tables, verdicts and charts are [`table`], the files
//! handed to children [`flows`], the lines read back [`parse`]. It must
//! never run two systems of a comparison at once, never let a child outlive
//! its run (every child has a timeout and a kill-on-drop guard), never count
//! a run whose validation is not exact, and never write outside `--out`.

pub mod cells;
pub mod flows;
pub mod kafka;
pub mod kill;
pub mod measure;
pub mod parse;
pub mod procs;
pub mod table;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use self::cells::{groups, Cell, SplitKind, Variant};
use self::kafka::{KafkaBroker, KafkaInfo};
use self::procs::Ctx;
use super::framework::cluster::{with_cluster, ClusterArgs, ClusterInfo, ScenarioCluster};
use super::framework::output::{thousands, trim_float, ChartSpec, Report};
use super::framework::plan::{Group, Interleave, Plan};
use super::framework::preset::{check_range, check_seconds, usage, Preset};
use super::framework::verdict::TargetCheck;
use super::framework::{self, RunAt, RunResult, Scenario};
use super::ChildCommand;
use crate::error::BenchError;

/// Partitions of every input topic, and tasks of every flow.
pub const PARTITIONS: u32 = 8;
/// Commit interval of every system by default, ms (run.sh's).
pub const COMMIT_INTERVAL_MS: u64 = 1000;
/// `flow run --until-idle-ms` of a flow whose input is already there.
pub const IDLE_MS: u64 = 2000;
/// `--until-idle-ms` of a flow that waits for another's output (the
/// a-topics persister) or for a rate-paced generator (latency cells).
pub const WAITING_IDLE_MS: u64 = 15_000;
/// Every child is killed after this long by default, seconds.
pub const CHILD_TIMEOUT_S: f64 = 600.0;
/// Longest `--timeout-s` accepted.
pub const CHILD_TIMEOUT_S_MAX: f64 = 7_200.0;
/// Most repeats accepted.
pub const REPEAT_MAX: u32 = 100;
/// Mean size of a generated record when no tablinum sink of the same input
/// measured it, bytes (the NOTE's 870).
pub const GENERATED_RECORD_BYTES: f64 = 870.0;
/// The report's even split, percent INFO, WARNING, ERROR.
pub const SPLIT_EVEN: [u8; 3] = [34, 33, 33];
/// The skewed split of variant (d).
pub const SPLIT_SKEWED: [u8; 3] = [80, 15, 5];
/// Durability of tablinum topics.
pub const TABLINUM_DURABILITY: &str = "sync";
/// Durability of the Kafka sides, as the broker ships.
pub const KAFKA_DURABILITY: &str =
    "kafka: replication factor 1, no fsync per write, acks=all, transactions";
/// Target (1): a-fused records/s at the even split.
pub const TARGET_FUSED_RECORDS_PER_S: f64 = 100_000.0;
/// Target (2): b-tablinum over b-kafka-streams at the same split.
pub const TARGET_PEER_RATIO_MIN: f64 = 1.5;
/// Target (4): the rate must be back to this fraction of the pre-kill rate…
pub const TARGET_RECOVERY_FRACTION: f64 = 0.9;
/// … within this many seconds of the kill.
pub const TARGET_RECOVERY_S: f64 = 10.0;

/// Records per partition in full mode.
pub const FULL_RECORDS_PER_PARTITION: u64 = 50_000;
/// Repeats in full mode.
pub const FULL_REPEAT: u32 = 3;
/// Generator rate of the latency cells in full mode, records/s in total:
/// below what Kafka Streams sustains here (22,000–40,000), so latency is
/// not queueing.
pub const FULL_RATE_PER_S: u64 = 10_000;
/// Records of a latency cell in full mode, in total (20 s at the rate).
pub const FULL_LATENCY_RECORDS: u64 = 200_000;
/// Records per partition with `--quick`.
pub const QUICK_RECORDS_PER_PARTITION: u64 = 5_000;
/// Repeats with `--quick`.
pub const QUICK_REPEAT: u32 = 1;
/// Generator rate with `--quick`, records/s in total.
pub const QUICK_RATE_PER_S: u64 = 5_000;
/// Records of a latency cell with `--quick`, in total.
pub const QUICK_LATENCY_RECORDS: u64 = 40_000;

/// The chart file.
pub const SCENARIO_PNG: &str = "scenario.png";

/// What `--quick` and a full run differ in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SplitterShape {
    /// Generated records per input partition.
    pub records_per_partition: u64,
    /// Repeats per cell.
    pub repeat: u32,
    /// Generator rate of the latency cells, records/s in total.
    pub rate_per_s: u64,
    /// Records of a latency cell, in total.
    pub latency_records: u64,
}

/// `tablinum bench scenario splitter` arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct SplitterArgs {
    /// Small runs: 5,000 records per partition, 1 repeat, latency at 5,000
    /// records/s over 40,000 records. Default: 50,000 per partition, 3
    /// repeats, 10,000 records/s over 200,000 (below both systems' capacity).
    #[arg(long)]
    pub quick: bool,
    /// Output directory (scenario.json, README.md, scenario.png, raw/,
    /// flows/, tools/, kafka/, cluster.log). Must not hold an earlier scenario.
    #[arg(long)]
    pub out: PathBuf,
    /// Generated records per input partition.
    #[arg(long)]
    pub records_per_partition: Option<u64>,
    /// Repeats per cell.
    #[arg(long)]
    pub repeat: Option<u32>,
    /// Generator rate of the latency cells, records/s in total.
    #[arg(long)]
    pub rate: Option<u64>,
    /// Records of a latency cell, in total.
    #[arg(long)]
    pub latency_records: Option<u64>,
    /// Commit interval of every system, ms.
    #[arg(long, default_value_t = COMMIT_INTERVAL_MS)]
    pub commit_interval_ms: u64,
    /// Every child is killed after this many seconds (its run fails).
    #[arg(long, default_value_t = CHILD_TIMEOUT_S)]
    pub timeout_s: f64,
    /// Only these variants, comma-separated (a-fused, a-topics, b-tablinum,
    /// b-kafka-streams, c-parquet, e-kill, a-fused-latency,
    /// b-tablinum-latency, b-kafka-streams-latency). Default: all.
    #[arg(long, value_delimiter = ',', value_parser = Variant::parse)]
    pub only: Vec<Variant>,
    /// Keep the data at the end: the cluster's (OUT/cluster-data), the
    /// broker's (OUT/kafka) and the file sinks' (OUT/files); a full run
    /// leaves ~9 GB. Default: removed once the results are written.
    #[arg(long)]
    pub keep_data: bool,
}

/// The scenario's parameters (`scenario.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Parameters {
    /// Generated records per input partition.
    pub records_per_partition: u64,
    /// Input partitions and flow parallelism.
    pub partitions: u32,
    /// Repeats per cell.
    pub repeat: u32,
    /// Generator rate of the latency cells, records/s in total.
    pub rate_per_s: u64,
    /// Records of a latency cell, in total.
    pub latency_records: u64,
    /// Commit interval of every system, ms.
    pub commit_interval_ms: u64,
    /// `--until-idle-ms` of flows whose input is there.
    pub idle_ms: u64,
    /// `--until-idle-ms` of flows waiting for input.
    pub waiting_idle_ms: u64,
    /// Child time limit, seconds.
    pub timeout_s: f64,
    /// The variants run (names).
    pub variants: Vec<String>,
}

impl Parameters {
    /// Records of one throughput run.
    pub fn records(&self) -> u64 {
        self.records_per_partition * u64::from(self.partitions)
    }

    /// Records per partition of a latency run (its total rounded up to whole partitions).
    pub fn latency_per_partition(&self) -> u64 {
        self.latency_records
            .div_ceil(u64::from(self.partitions))
            .max(1)
    }
}

/// The parameters `args` ask for, checked.
pub fn parameters(args: &SplitterArgs) -> Result<Parameters, BenchError> {
    let preset = <Splitter as Scenario>::PRESETS.pick(args.quick);
    let records_per_partition = args
        .records_per_partition
        .unwrap_or(preset.records_per_partition);
    if records_per_partition == 0 {
        return Err(usage("--records-per-partition", "at least one record"));
    }
    let repeat = check_range(
        "--repeat",
        args.repeat.unwrap_or(preset.repeat),
        1,
        REPEAT_MAX,
    )?;
    let rate_per_s = args.rate.unwrap_or(preset.rate_per_s);
    if rate_per_s == 0 {
        return Err(usage("--rate", "at least one record per second"));
    }
    let latency_records = args.latency_records.unwrap_or(preset.latency_records);
    if latency_records == 0 {
        return Err(usage("--latency-records", "at least one record"));
    }
    check_range(
        "--commit-interval-ms",
        args.commit_interval_ms,
        1,
        3_600_000,
    )?;
    let timeout_s = check_seconds("--timeout-s", args.timeout_s, false, CHILD_TIMEOUT_S_MAX)?;
    let variants = if args.only.is_empty() {
        Variant::ALL.to_vec()
    } else {
        args.only.clone()
    };
    Ok(Parameters {
        records_per_partition,
        partitions: PARTITIONS,
        repeat,
        rate_per_s,
        latency_records,
        commit_interval_ms: args.commit_interval_ms,
        idle_ms: IDLE_MS,
        waiting_idle_ms: WAITING_IDLE_MS,
        timeout_s,
        variants: variants.iter().map(|v| v.name().to_string()).collect(),
    })
}

/// One run (a row of the report's table; `scenario.json`'s `rows`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    /// `a-fused`, `b-kafka-streams latency`, ...
    pub variant: String,
    /// `tablinum` or `kafka-streams`.
    pub system: String,
    /// Records through the system.
    pub records: u64,
    /// Records per second over the measured span (counted only when the
    /// run is exact; see `exact`).
    pub records_per_sec: f64,
    /// Sink bytes per second (the peer: records/s × the input's mean record size).
    pub bytes_per_sec: f64,
    /// Stamped records not found in the output.
    pub lost: u64,
    /// Stamped records found more than once.
    pub duplicated: u64,
    /// p99 latency, ms: a latency row's own, a throughput row's from the
    /// latency rows of its system and variant (null when none ran).
    pub p99_ms: Option<f64>,
    /// CPU of every stage together, percent of one core over the span.
    pub cpu_percent: f64,
    /// Durability of its output.
    pub durability: String,
    /// Commit interval, ms.
    pub commit_interval_ms: u64,
    /// `even` or `skewed`.
    pub split: SplitKind,
    /// `34,33,33`.
    pub split_pct: String,
    /// Repeat (from 1).
    pub repeat: u32,
    /// Position in the whole plan (from 1; in topic names).
    pub sequence: usize,
    /// Seconds of the measured span.
    pub seconds: f64,
    /// p50 latency, ms (as `p99_ms`).
    pub p50_ms: Option<f64>,
    /// CPU per stage (`cluster`, `flow run`, `kafka broker`, `kafka streams`, ...).
    pub cpu_per_stage: BTreeMap<String, f64>,
    /// The validation was exact (and the run's figures count).
    pub exact: bool,
    /// Why the run failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Where `bytes_per_sec`'s record size comes from (the peer's rows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes_basis: Option<String>,
    /// e-kill: seconds from the kill until the 2 s-window rate is back to
    /// 90 % of the pre-kill rate (null: never within the run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovery_s: Option<f64>,
    /// e-kill: details of the kill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kill: Option<kill::KillDetail>,
}

impl RunRow {
    /// An empty row of `cell` at `at`, failed with `error` until filled in.
    pub fn new(cell: &Cell, repeat: u32, sequence: usize, commit_interval_ms: u64) -> RunRow {
        RunRow {
            variant: cell.variant.name().to_string(),
            system: cell.variant.system().to_string(),
            records: 0,
            records_per_sec: 0.0,
            bytes_per_sec: 0.0,
            lost: 0,
            duplicated: 0,
            p99_ms: None,
            cpu_percent: 0.0,
            durability: cell.variant.durability().to_string(),
            commit_interval_ms,
            split: cell.split,
            split_pct: cell.split.arg(),
            repeat,
            sequence,
            seconds: 0.0,
            p50_ms: None,
            cpu_per_stage: BTreeMap::new(),
            exact: false,
            error: None,
            bytes_basis: None,
            recovery_s: None,
            kill: None,
        }
    }

    /// The variant, parsed back.
    pub fn variant(&self) -> Option<Variant> {
        Variant::parse(&self.variant).ok()
    }

    /// The run counts: exact and no error.
    pub fn ok(&self) -> bool {
        self.exact && self.error.is_none()
    }
}

impl RunResult for RunRow {
    fn failed(&self) -> bool {
        !self.ok()
    }

    fn line(&self) -> String {
        let mut s = format!(
            "{} records/s, {} records in {} s, lost {}, duplicated {}, CPU {:.0} %",
            thousands(self.records_per_sec, 0),
            thousands(self.records as f64, 0),
            trim_float(self.seconds),
            self.lost,
            self.duplicated,
            self.cpu_percent
        );
        if let (Some(p50), Some(p99)) = (self.p50_ms, self.p99_ms) {
            s.push_str(&format!(", p50 {p50:.0} ms, p99 {p99:.0} ms"));
        }
        if let Some(r) = self.recovery_s {
            s.push_str(&format!(", back to 90 % in {r:.1} s"));
        }
        if let Some(e) = &self.error {
            s.push_str(&format!("; FAILED: {e}"));
        } else if !self.exact {
            s.push_str("; FAILED: not exact");
        }
        s
    }
}

/// `scenario.json`'s own fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SplitterBody {
    /// The cluster.
    pub cluster: ClusterInfo,
    /// The Kafka broker (when a Kafka variant runs).
    pub kafka: Option<KafkaInfo>,
    /// The parameters.
    pub parameters: Parameters,
    /// One row per run.
    pub rows: Vec<RunRow>,
    /// Mean over repeats per (variant, split).
    pub cells: Vec<table::CellSummary>,
    /// tablinum / Kafka Streams per split.
    pub ratios: Vec<table::PeerRatio>,
    /// The targets' verdicts.
    pub targets: Vec<TargetCheck>,
}

/// `scenario.json`.
pub type SplitterReport = Report<SplitterBody>;

/// The input the b pair of one split and repeat share.
#[derive(Debug, Clone, PartialEq)]
pub struct SharedInput {
    /// The Kafka topic.
    pub topic: String,
    /// Records in it.
    pub records: u64,
}

/// The scenario.
pub struct Splitter {
    p: Parameters,
    quick: bool,
    ctx: Ctx,
    cluster: ClusterInfo,
    broker: Option<KafkaBroker>,
    kafka_info: Option<KafkaInfo>,
    peer_built: bool,
    shared: BTreeMap<(SplitKind, u32), SharedInput>,
}

impl Splitter {
    /// The scenario on a started cluster reached through `ctx`.
    pub fn new(p: Parameters, quick: bool, ctx: Ctx, cluster: ClusterInfo) -> Splitter {
        Splitter {
            p,
            quick,
            ctx,
            cluster,
            broker: None,
            kafka_info: None,
            peer_built: false,
            shared: BTreeMap::new(),
        }
    }

    fn selected(&self) -> Vec<Variant> {
        self.p
            .variants
            .iter()
            .filter_map(|v| Variant::parse(v).ok())
            .collect()
    }
}

impl Scenario for Splitter {
    type Cell = Cell;
    type Run = RunRow;
    type Body = SplitterBody;
    type Shape = SplitterShape;
    const PRESETS: Preset<SplitterShape> = Preset {
        quick: SplitterShape {
            records_per_partition: QUICK_RECORDS_PER_PARTITION,
            repeat: QUICK_REPEAT,
            rate_per_s: QUICK_RATE_PER_S,
            latency_records: QUICK_LATENCY_RECORDS,
        },
        full: SplitterShape {
            records_per_partition: FULL_RECORDS_PER_PARTITION,
            repeat: FULL_REPEAT,
            rate_per_s: FULL_RATE_PER_S,
            latency_records: FULL_LATENCY_RECORDS,
        },
    };

    fn name(&self) -> &'static str {
        "splitter"
    }

    fn title(&self) -> String {
        "The Scribengin splitter report: tablinum beside Kafka Streams 4.4.0".into()
    }

    fn quick(&self) -> bool {
        self.quick
    }

    fn plan(&self) -> Plan<Cell> {
        Plan {
            groups: groups(&self.selected()),
            repeat: self.p.repeat,
            interleave: Interleave::Rotate,
        }
    }

    fn plan_words(&self) -> (&'static str, &'static str) {
        ("groups", "cells")
    }

    fn run_estimate_s(&self) -> f64 {
        // Generation, the run and the validation at ~40,000 records/s, and
        // a few JVM starts for the Kafka topics.
        15.0 + 3.0 * self.p.records() as f64 / 40_000.0
    }

    fn body(&self) -> SplitterBody {
        SplitterBody {
            cluster: self.cluster.clone(),
            kafka: self.kafka_info.clone(),
            parameters: self.p.clone(),
            rows: Vec::new(),
            cells: Vec::new(),
            ratios: Vec::new(),
            targets: table::targets(&[]),
        }
    }

    fn announce(&self) -> Vec<String> {
        vec![format!(
            "splitter: {} records per throughput run ({} per partition × {}), latency cells at \
             {} records/s over {} records, commit every {} ms; children killed after {} s",
            thousands(self.p.records() as f64, 0),
            thousands(self.p.records_per_partition as f64, 0),
            self.p.partitions,
            thousands(self.p.rate_per_s as f64, 0),
            thousands(self.p.latency_records as f64, 0),
            self.p.commit_interval_ms,
            trim_float(self.p.timeout_s)
        )]
    }

    fn header_lines(&self, body: &SplitterBody) -> Vec<String> {
        let p = &body.parameters;
        vec![
            format!("cluster: {}", body.cluster.describe()),
            format!(
                "kafka: {}",
                body.kafka.as_ref().map_or_else(
                    || "not started (no Kafka variant)".into(),
                    KafkaInfo::describe
                )
            ),
            format!(
                "input: {} generated records of the report (~{} bytes of JSON each) per run, {} \
                 per partition × {} partitions; splits {} (even) and {} (skewed)",
                thousands(p.records() as f64, 0),
                GENERATED_RECORD_BYTES,
                thousands(p.records_per_partition as f64, 0),
                p.partitions,
                SplitKind::Even.arg(),
                SplitKind::Skewed.arg()
            ),
            format!(
                "commit interval {} ms for every system; durability: tablinum topics `{}`, {}",
                p.commit_interval_ms, TABLINUM_DURABILITY, KAFKA_DURABILITY
            ),
            format!(
                "latency cells: {} records/s in total over {} records",
                thousands(p.rate_per_s as f64, 0),
                thousands(p.latency_records as f64, 0)
            ),
            format!("repeats: {}; variants: {}", p.repeat, p.variants.join(", ")),
        ]
    }

    fn prepare(&mut self, out: &std::path::Path) -> Result<(), BenchError> {
        self.ctx.prepare_dirs(out)?;
        let selected = self.selected();
        if selected.iter().any(|v| v.needs_kafka()) {
            let broker = KafkaBroker::start(&self.ctx, self.p.timeout_s)?;
            self.kafka_info = Some(broker.info());
            self.broker = Some(broker);
        }
        if selected.iter().any(|v| v.base() == Variant::BKafkaStreams) {
            kafka::compile_peer(&self.ctx, self.p.timeout_s)?;
            self.peer_built = true;
        }
        Ok(())
    }

    fn begin_group(&mut self, _: &Group<Cell>, body: &mut SplitterBody) -> Result<(), BenchError> {
        body.kafka = self.kafka_info.clone();
        Ok(())
    }

    fn measure(&mut self, at: &RunAt<'_, Cell>) -> Result<RunRow, BenchError> {
        let mut row = RunRow::new(
            at.cell,
            at.planned.repeat,
            at.planned.sequence,
            self.p.commit_interval_ms,
        );
        let m = measure::Measure {
            ctx: &self.ctx,
            p: &self.p,
            broker: self.broker.as_ref(),
            label: &at.label,
            sequence: at.planned.sequence,
        };
        let result = match at.cell.variant {
            Variant::AFused => m.a_fused(at.cell.split, &mut row),
            Variant::ATopics => m.a_topics(at.cell.split, &mut row),
            Variant::BTablinum | Variant::BKafkaStreams => {
                let key = (at.cell.split, at.planned.repeat);
                let input = match self.shared.get(&key) {
                    Some(i) => Ok(i.clone()),
                    None => m.kafka_input(at.cell.split, &format!("in{}", at.planned.sequence)),
                };
                input.and_then(|input| {
                    self.shared.insert(key, input.clone());
                    if at.cell.variant == Variant::BTablinum {
                        m.b_tablinum(&input, &mut row)
                    } else {
                        m.b_kafka_streams(&input, &mut row)
                    }
                })
            }
            Variant::CParquet => m.c_parquet(at.cell.split, &mut row),
            Variant::EKill => kill::e_kill(&m, &mut row),
            Variant::AFusedLatency => m.a_fused_latency(&mut row),
            Variant::BTablinumLatency => m.b_latency(false, &mut row),
            Variant::BKafkaStreamsLatency => m.b_latency(true, &mut row),
        };
        if let Err(e) = result {
            row.error = Some(e.to_string());
        }
        Ok(row)
    }

    fn record(&mut self, body: &mut SplitterBody, _: &RunAt<'_, Cell>, run: RunRow) {
        body.rows.push(run);
        table::fill_derived(&mut body.rows);
        body.cells = table::summaries(&body.rows);
        body.ratios = table::peer_ratios(&body.rows);
        body.targets = table::targets(&body.rows);
    }

    fn group_table(&self, body: &SplitterBody, group: &Group<Cell>) -> String {
        let names: Vec<String> = group.cells.iter().map(ToString::to_string).collect();
        let cells: Vec<table::CellSummary> = body
            .cells
            .iter()
            .filter(|c| names.contains(&c.cell))
            .cloned()
            .collect();
        table::results_table(&cells)
    }

    fn summary(&self, body: &SplitterBody) -> String {
        table::summary(body)
    }

    fn readme_tail(&self, _body: &SplitterBody) -> String {
        table::readme_tail()
    }

    fn charts(&self, body: &SplitterBody) -> Vec<ChartSpec> {
        vec![table::chart(&body.rows)]
    }
}

/// Runs the scenario: the cluster (`tablinum up` started here), the Kafka
/// broker when a Kafka variant runs, every cell × repeat.
pub fn run(args: &SplitterArgs, child: &ChildCommand) -> Result<SplitterReport, BenchError> {
    let p = parameters(args)?;
    framework::output::claim_out_dir(&args.out)?;
    let out = std::fs::canonicalize(&args.out)
        .map_err(|e| BenchError::io(&args.out, "resolve the output directory", e))?;
    let cluster_args = ClusterArgs {
        keep_data: args.keep_data,
        ..ClusterArgs::default()
    };
    let report = with_cluster(&cluster_args, &out, &child.program, |cluster| {
        let ctx = Ctx::for_cluster(&child.program, &out, cluster, p.timeout_s)?;
        let info = cluster.info();
        let mut s = Splitter::new(p, args.quick, ctx, info);
        let r = framework::run(&mut s, &out, &child.invocation);
        // Stops the broker (also on an early error).
        drop(s);
        r
    });
    if !args.keep_data {
        for d in [KAFKA_DIR, FILES_DIR] {
            let dir = out.join(d);
            if dir.exists() {
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    eprintln!("warning: cannot remove {}: {e}", dir.display());
                }
            }
        }
    }
    report
}

/// The broker's directory under `--out` (removed at the end unless
/// `--keep-data`).
pub const KAFKA_DIR: &str = "kafka";
/// The file sinks' root under `--out` (likewise).
pub const FILES_DIR: &str = "files";

/// The started cluster's process id.
pub fn cluster_pid(cluster: &ScenarioCluster) -> Option<u32> {
    match cluster {
        ScenarioCluster::Started { cluster, .. } => cluster.pid(),
        ScenarioCluster::Given { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SplitterArgs,
    }

    fn args(extra: &[&str]) -> SplitterArgs {
        let mut v = vec!["x", "--out", "/tmp/x"];
        v.extend_from_slice(extra);
        Cli::try_parse_from(v)
            .unwrap_or_else(|e| panic!("{e}"))
            .args
    }

    #[test]
    fn presets_and_arguments() {
        let q = parameters(&args(&["--quick"])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (q.records_per_partition, q.repeat, q.rate_per_s),
            (5_000, 1, 5_000)
        );
        assert_eq!(q.records(), 40_000);
        assert_eq!(q.latency_per_partition(), 5_000);
        let f = parameters(&args(&[])).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (f.records_per_partition, f.repeat, f.rate_per_s),
            (50_000, 3, 10_000)
        );
        assert_eq!(f.variants.len(), Variant::ALL.len());
        let o = parameters(&args(&["--only", "a-fused,b-tablinum-latency"]))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(o.variants, ["a-fused", "b-tablinum latency"]);
        assert!(Cli::try_parse_from(["x", "--out", "o", "--only", "z"]).is_err());
        assert!(parameters(&args(&["--repeat", "0"])).is_err());
        assert!(parameters(&args(&["--rate", "0"])).is_err());
        assert!(parameters(&args(&["--timeout-s", "0"])).is_err());
    }

    #[test]
    fn the_plan_pairs_the_b_cells_and_names_cells_like_the_report() {
        let g = groups(&[]);
        let names: Vec<Vec<String>> = g
            .iter()
            .map(|g| g.cells.iter().map(ToString::to_string).collect())
            .collect();
        assert_eq!(names[1], ["b-tablinum even", "b-kafka-streams even"]);
        assert_eq!(
            names[3],
            [
                "a-fused skewed",
                "b-tablinum skewed",
                "b-kafka-streams skewed"
            ]
        );
        assert_eq!(names[4][2], "b-kafka-streams latency");
        assert_eq!(names[5], ["e-kill even"]);
        assert_eq!(g.iter().map(|g| g.cells.len()).sum::<usize>(), 12);
        let only = groups(&[Variant::EKill]);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].name, "e");
        assert!(Variant::BKafkaStreamsLatency.needs_kafka());
        assert_eq!(Variant::BKafkaStreamsLatency.system(), "kafka-streams");
        assert_eq!(Variant::AFusedLatency.base(), Variant::AFused);
        assert_eq!(Variant::BTablinum.durability(), KAFKA_DURABILITY);
        assert_eq!(Variant::AFused.durability(), "sync");
    }
}
