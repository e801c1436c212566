//! One run of each splitter variant: the topics it needs, the generated
//! input, the flow file, the system under test as child processes, and the
//! validation that decides whether its figures count.
//!
//! Owns the sequence of commands of every variant (run.sh's, in Rust), the
//! names of everything a run creates (every topic and flow name carries the
//! run's sequence number, so no two runs share one) and filling in a
//! [`RunRow`]. It must never run the two systems of the b pair at once,
//! never leave a child running (every [`Proc`] is killed when dropped), and
//! never mark a row exact without a validation line that says `EXACT` with
//! 0 lost and 0 duplicated.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::flows::{self, FlowSpec, SinkSpec, SourceSpec, LEVELS};
use super::kafka::{classpath, peer_dir, KafkaBroker, PEER_CLASS};
use super::parse::{self, FlowRunOutput, Latency, Validation};
use super::procs::{run_one, wait_all, CpuSpan, Ctx, Proc};
use super::{Parameters, RunRow, SharedInput, SplitKind, GENERATED_RECORD_BYTES};
use crate::error::BenchError;

/// How long the `flow latency` follower is given to start following
/// before the system and the generator start, ms.
pub const FOLLOWER_START_MS: u64 = 2000;
/// How long a latency cell's system runs before the generator starts, ms:
/// Kafka Streams joins its group and initialises its transactions first,
/// so neither system's start-up counts as latency.
pub const SYSTEM_START_MS: u64 = 8000;
/// CPU stage of the cluster process.
pub const STAGE_CLUSTER: &str = "cluster";
/// CPU stage of the Kafka broker.
pub const STAGE_BROKER: &str = "kafka broker";
/// CPU stage of a `flow run` process.
pub const STAGE_FLOW: &str = "flow run";
/// CPU stage of the Kafka Streams JVM.
pub const STAGE_PEER: &str = "kafka streams";

/// Exit codes of `flow validate` that still print its counts (1: not exact).
const VALIDATE_CODES: &[i32] = &[0, 1];
const OK: &[i32] = &[0];

/// What a run needs.
pub struct Measure<'a> {
    /// The cluster and the binary.
    pub ctx: &'a Ctx,
    /// The parameters.
    pub p: &'a Parameters,
    /// The broker (Kafka variants).
    pub broker: Option<&'a KafkaBroker>,
    /// The run's label, for progress lines.
    pub label: &'a str,
    /// The run's sequence number, in every name it creates.
    pub sequence: usize,
}

impl Measure<'_> {
    fn dir(&self) -> Result<PathBuf, BenchError> {
        self.ctx.run_dir(self.sequence)
    }

    fn broker(&self) -> Result<&KafkaBroker, BenchError> {
        self.broker.ok_or_else(|| BenchError::ChildRun {
            run: self.label.to_string(),
            reason: "no Kafka broker was started".into(),
        })
    }

    fn one(
        &self,
        cmd: Command,
        stage: &str,
        stem: &str,
        ok: &'static [i32],
    ) -> Result<Proc, BenchError> {
        run_one(
            cmd,
            stage,
            &self.dir()?,
            stem,
            ok,
            self.p.timeout_s,
            self.label,
        )
    }

    fn spawn(
        &self,
        cmd: Command,
        stage: &str,
        stem: &str,
        ok: &'static [i32],
    ) -> Result<Proc, BenchError> {
        Proc::spawn(cmd, stage, &self.dir()?, stem, ok)
    }

    /// `tablinum topic create NAME --partitions P` for each name.
    fn create_topics(&self, names: &[String]) -> Result<(), BenchError> {
        for n in names {
            let parts = self.p.partitions.to_string();
            let c = self
                .ctx
                .tablinum(&["topic", "create", n, "--partitions", &parts]);
            self.one(c, "topic create", &format!("create-{n}"), OK)?;
        }
        Ok(())
    }

    /// `tablinum topic produce TOPIC --generate N --split S [--kafka B] [--rate R]`
    /// (`--kafka` when `kafka`: the topic is the broker's).
    fn produce(
        &self,
        topic: &str,
        per_partition: u64,
        split: SplitKind,
        rate: Option<u64>,
        kafka: bool,
    ) -> Command {
        let n = per_partition.to_string();
        let s = split.arg();
        let mut c =
            self.ctx
                .tablinum(&["topic", "produce", topic, "--generate", &n, "--split", &s]);
        if let Some(b) = self.broker.filter(|_| kafka) {
            c.args(["--kafka", b.brokers()]);
        }
        if let Some(r) = rate {
            c.args(["--rate", &r.to_string()]);
        }
        c
    }

    /// `tablinum flow run FILE --until-idle-ms MS [--root OUT/files]`.
    fn flow_run(&self, file: &Path, idle_ms: u64, root: bool) -> Command {
        let mut c = self.ctx.tablinum(&["flow", "run"]);
        c.arg(file).args(["--until-idle-ms", &idle_ms.to_string()]);
        if root {
            c.arg("--root").arg(self.ctx.out.join(super::FILES_DIR));
        }
        c
    }

    /// `tablinum flow validate FILE [--root] [--latency]`: its counts and stdout.
    fn validate(
        &self,
        file: &Path,
        root: bool,
        latency: bool,
    ) -> Result<(Validation, String), BenchError> {
        let mut c = self.ctx.tablinum(&["flow", "validate"]);
        c.arg(file);
        if root {
            c.arg("--root").arg(self.ctx.out.join(super::FILES_DIR));
        }
        if latency {
            c.arg("--latency");
        }
        let p = self.one(c, "flow validate", "validate", VALIDATE_CODES)?;
        let text = p.stdout_text();
        Ok((parse::validation(&text)?, text))
    }

    fn write(&self, f: &FlowSpec) -> Result<PathBuf, BenchError> {
        self.ctx.write_flow(&f.name, &f.render())
    }

    fn kafka_source(&self, topic: &str, group: &str) -> Result<SourceSpec, BenchError> {
        Ok(SourceSpec::Kafka {
            brokers: self.broker()?.brokers().to_string(),
            topic: topic.to_string(),
            group: group.to_string(),
        })
    }

    fn kafka_sinks(&self, prefix: &str) -> Result<impl Fn(&str) -> SinkSpec, BenchError> {
        let brokers = self.broker()?.brokers().to_string();
        let prefix = prefix.to_string();
        Ok(move |l: &str| SinkSpec::Kafka {
            brokers: brokers.clone(),
            topic: format!("{prefix}.{l}"),
        })
    }

    fn level_topics(prefix: &str) -> Vec<String> {
        LEVELS
            .iter()
            .map(|(_, l)| format!("{prefix}.{l}"))
            .collect()
    }

    /// The flow `f` run to idleness alone, CPU of the cluster, the flow and
    /// (Kafka variants) the broker.
    fn run_flow(
        &self,
        file: &Path,
        root: bool,
        row: &mut RunRow,
    ) -> Result<FlowRunOutput, BenchError> {
        let broker_pid = self.broker.and_then(KafkaBroker::pid);
        let (cluster, broker) = (
            CpuSpan::start(self.ctx.cluster_pid),
            CpuSpan::start(broker_pid),
        );
        let mut fr = self.spawn(
            self.flow_run(file, self.p.idle_ms, root),
            STAGE_FLOW,
            "flow-run",
            OK,
        )?;
        wait_all(&mut [&mut fr], self.p.timeout_s, self.label)?;
        let wall = fr.wall_s();
        set_cpu(row, STAGE_FLOW, Some(fr.cpu_percent(wall)));
        set_cpu(row, STAGE_CLUSTER, cluster.percent(wall));
        if broker_pid.is_some() {
            set_cpu(row, STAGE_BROKER, broker.percent(wall));
        }
        let out = parse::flow_run(&fr.stdout_text())?;
        fill_throughput(row, out.records, out.span_s(), out.sink_bytes());
        Ok(out)
    }

    /// a-fused: tablinum topics end to end in one flow.
    pub fn a_fused(&self, split: SplitKind, row: &mut RunRow) -> Result<(), BenchError> {
        let s = self.sequence;
        let (input, agg) = (format!("logs{s}"), format!("a{s}.aggregate"));
        self.create_topics(&[input.clone(), agg.clone()])?;
        self.one(
            self.produce(&input, self.p.records_per_partition, split, None, false),
            "generate",
            "generate",
            OK,
        )?;
        let f = FlowSpec::splitter(
            &format!("a{s}"),
            self.p.partitions,
            self.p.commit_interval_ms,
            SourceSpec::Topic { topic: input },
            |_| SinkSpec::Topic { topic: agg.clone() },
        );
        let file = self.write(&f)?;
        self.run_flow(&file, false, row)?;
        fill_validation(row, &self.validate(&file, false, false)?.0);
        Ok(())
    }

    /// a-topics: run.sh's (a), a topic on every edge; both flows at once.
    pub fn a_topics(&self, split: SplitKind, row: &mut RunRow) -> Result<(), BenchError> {
        let s = self.sequence;
        let prefix = format!("at{s}");
        let input = format!("logs{s}");
        let agg = format!("{prefix}.aggregate");
        let mut topics = vec![input.clone(), agg.clone()];
        topics.extend(Self::level_topics(&prefix));
        self.create_topics(&topics)?;
        self.one(
            self.produce(&input, self.p.records_per_partition, split, None, false),
            "generate",
            "generate",
            OK,
        )?;
        let (p, ms) = (self.p.partitions, self.p.commit_interval_ms);
        let split_flow = FlowSpec::splitter(
            &format!("{prefix}-split"),
            p,
            ms,
            SourceSpec::Topic {
                topic: input.clone(),
            },
            |l| SinkSpec::Topic {
                topic: format!("{prefix}.{l}"),
            },
        );
        let split_file = self.write(&split_flow)?;
        let persist_file = self.write(&flows::persister(
            &format!("{prefix}-persist"),
            &prefix,
            p,
            ms,
        ))?;
        let check_file = self.write(&flows::check(&format!("{prefix}-check"), &input, &agg, p))?;
        let cluster = CpuSpan::start(self.ctx.cluster_pid);
        let mut persist = self.spawn(
            self.flow_run(&persist_file, self.p.waiting_idle_ms, false),
            "flow run (persister)",
            "flow-run-persist",
            OK,
        )?;
        let mut splitter = self.spawn(
            self.flow_run(&split_file, self.p.idle_ms, false),
            "flow run (splitter)",
            "flow-run-split",
            OK,
        )?;
        wait_all(
            &mut [&mut persist, &mut splitter],
            self.p.timeout_s,
            self.label,
        )?;
        let wall = persist.wall_s().max(splitter.wall_s());
        set_cpu(row, STAGE_CLUSTER, cluster.percent(wall));
        set_cpu(row, "flow run (splitter)", Some(splitter.cpu_percent(wall)));
        set_cpu(row, "flow run (persister)", Some(persist.cpu_percent(wall)));
        let a = parse::flow_run(&splitter.stdout_text())?;
        let b = parse::flow_run(&persist.stdout_text())?;
        // End to end: the splitter's first record to the persister's last commit.
        let seconds = parse::span_s(a.first_record_unix_ms, b.last_commit_unix_ms);
        fill_throughput(row, a.records, seconds, b.sink_bytes());
        fill_validation(row, &self.validate(&check_file, false, false)?.0);
        Ok(())
    }

    /// The b pair's input: Kafka topic `topic`, generated.
    pub fn kafka_input(&self, split: SplitKind, topic: &str) -> Result<SharedInput, BenchError> {
        self.broker()?.create_topics(
            &[topic.to_string()],
            &self.dir()?,
            self.p.timeout_s,
            self.label,
        )?;
        self.one(
            self.produce(topic, self.p.records_per_partition, split, None, true),
            "generate",
            "generate",
            OK,
        )?;
        Ok(SharedInput {
            topic: topic.to_string(),
            records: self.p.records(),
        })
    }

    /// b-tablinum: Kafka → tablinum's splitter → three Kafka topics.
    pub fn b_tablinum(&self, input: &SharedInput, row: &mut RunRow) -> Result<(), BenchError> {
        let s = self.sequence;
        let prefix = format!("t{s}");
        self.create_level_topics(&prefix)?;
        let file = self.kafka_flow(&format!("b{s}"), &input.topic, &prefix)?;
        self.run_flow(&file, false, row)?;
        fill_validation(row, &self.validate(&file, false, false)?.0);
        Ok(())
    }

    /// The file of a Kafka → Kafka splitter flow `name` (also its group)
    /// reading `input` into `PREFIX.LEVEL`: what tablinum runs, and what
    /// `flow validate` and `flow latency` read the peer's output with.
    fn kafka_flow(&self, name: &str, input: &str, prefix: &str) -> Result<PathBuf, BenchError> {
        let f = FlowSpec::splitter(
            name,
            self.p.partitions,
            self.p.commit_interval_ms,
            self.kafka_source(input, name)?,
            self.kafka_sinks(prefix)?,
        );
        self.write(&f)
    }

    /// The flow file the peer's output `PREFIX.LEVEL` is checked with.
    fn peer_check_flow(&self, input: &str, prefix: &str) -> Result<PathBuf, BenchError> {
        self.kafka_flow(&format!("{prefix}-check"), input, prefix)
    }

    /// Kafka topics `PREFIX.LEVEL`.
    fn create_level_topics(&self, prefix: &str) -> Result<(), BenchError> {
        self.broker()?.create_topics(
            &Self::level_topics(prefix),
            &self.dir()?,
            self.p.timeout_s,
            self.label,
        )
    }

    fn peer_topics(&self, prefix: &str) -> Result<(), BenchError> {
        let mut topics = Self::level_topics(prefix);
        topics.push(format!("{prefix}.dead-letter"));
        self.broker()?
            .create_topics(&topics, &self.dir()?, self.p.timeout_s, self.label)
    }

    fn peer_cmd(&self, input: &str, prefix: &str, expected: u64) -> Result<Command, BenchError> {
        let mut c = Command::new("java");
        c.args([
            "-cp",
            &classpath(&self.broker()?.info().libs, &[&peer_dir(&self.ctx.out)]),
        ])
        .arg(PEER_CLASS)
        .args([self.broker()?.brokers(), input, prefix])
        .arg(expected.to_string())
        .arg(self.p.commit_interval_ms.to_string());
        Ok(c)
    }

    /// b-kafka-streams: the peer on the same input.
    pub fn b_kafka_streams(&self, input: &SharedInput, row: &mut RunRow) -> Result<(), BenchError> {
        let prefix = format!("ks{}", self.sequence);
        self.peer_topics(&prefix)?;
        let check = self.peer_check_flow(&input.topic, &prefix)?;
        let broker_pid = self.broker.and_then(KafkaBroker::pid);
        let broker = CpuSpan::start(broker_pid);
        let mut peer = self.spawn(
            self.peer_cmd(&input.topic, &prefix, input.records)?,
            STAGE_PEER,
            "peer",
            OK,
        )?;
        wait_all(&mut [&mut peer], self.p.timeout_s, self.label)?;
        let wall = peer.wall_s();
        set_cpu(row, STAGE_PEER, Some(peer.cpu_percent(wall)));
        set_cpu(row, STAGE_BROKER, broker.percent(wall));
        let out = parse::peer(&peer.stdout_text())?;
        fill_throughput(row, out.records, out.seconds, 0);
        row.bytes_per_sec = row.records_per_sec * GENERATED_RECORD_BYTES;
        row.bytes_basis = Some(format!(
            "records/s × {GENERATED_RECORD_BYTES} bytes (assumed)"
        ));
        fill_validation(row, &self.validate(&check, false, false)?.0);
        Ok(())
    }

    /// c-parquet: Kafka → Parquet files under `OUT/files`.
    pub fn c_parquet(&self, split: SplitKind, row: &mut RunRow) -> Result<(), BenchError> {
        let s = self.sequence;
        let input = self.kafka_input(split, &format!("cin{s}"))?;
        let f = FlowSpec::splitter(
            &format!("c{s}"),
            self.p.partitions,
            self.p.commit_interval_ms,
            self.kafka_source(&input.topic, &format!("c{s}"))?,
            |l| SinkSpec::Files {
                dir: format!("c{s}/{l}"),
                format: "parquet".into(),
            },
        );
        let file = self.write(&f)?;
        self.run_flow(&file, true, row)?;
        fill_validation(row, &self.validate(&file, true, false)?.0);
        Ok(())
    }

    /// a-fused latency: `flow run` and the rate-paced generator at once,
    /// then `flow validate --latency`.
    pub fn a_fused_latency(&self, row: &mut RunRow) -> Result<(), BenchError> {
        const KAFKA: bool = false;
        let s = self.sequence;
        let (input, agg) = (format!("logs{s}"), format!("al{s}.aggregate"));
        self.create_topics(&[input.clone(), agg.clone()])?;
        let f = FlowSpec::splitter(
            &format!("al{s}"),
            self.p.partitions,
            self.p.commit_interval_ms,
            SourceSpec::Topic {
                topic: input.clone(),
            },
            |_| SinkSpec::Topic { topic: agg.clone() },
        );
        let file = self.write(&f)?;
        let cluster = CpuSpan::start(self.ctx.cluster_pid);
        let mut fr = self.spawn(
            self.flow_run(&file, self.p.waiting_idle_ms, false),
            STAGE_FLOW,
            "flow-run",
            OK,
        )?;
        let gen = self.produce(
            &input,
            self.p.latency_per_partition(),
            SplitKind::Even,
            Some(self.p.rate_per_s),
            KAFKA,
        );
        let mut g = self.spawn(gen, "generate", "generate", OK)?;
        wait_all(&mut [&mut fr, &mut g], self.p.timeout_s, self.label)?;
        let wall = fr.wall_s();
        set_cpu(row, STAGE_FLOW, Some(fr.cpu_percent(wall)));
        set_cpu(row, STAGE_CLUSTER, cluster.percent(wall));
        let out = parse::flow_run(&fr.stdout_text())?;
        fill_throughput(row, out.records, out.span_s(), out.sink_bytes());
        let (v, text) = self.validate(&file, false, true)?;
        fill_validation(row, &v);
        fill_latency(row, &parse::commit_latency(&text)?);
        Ok(())
    }

    /// b-tablinum latency (`peer` false) or b-kafka-streams latency: the
    /// `flow latency` follower first, then the system, then the rate-paced
    /// generator; the follower's figures are the row's.
    pub fn b_latency(&self, peer: bool, row: &mut RunRow) -> Result<(), BenchError> {
        const KAFKA: bool = true;
        let s = self.sequence;
        let input = format!("lin{s}");
        let count = self.p.latency_per_partition() * u64::from(self.p.partitions);
        self.broker()?.create_topics(
            std::slice::from_ref(&input),
            &self.dir()?,
            self.p.timeout_s,
            self.label,
        )?;
        let (file, prefix) = if peer {
            let prefix = format!("lks{s}");
            self.peer_topics(&prefix)?;
            (self.peer_check_flow(&input, &prefix)?, prefix)
        } else {
            let prefix = format!("lt{s}");
            self.create_level_topics(&prefix)?;
            (self.kafka_flow(&format!("bl{s}"), &input, &prefix)?, prefix)
        };
        let mut follow_cmd = self.ctx.tablinum(&["flow", "latency"]);
        follow_cmd
            .arg(&file)
            .args(["--expect", &count.to_string()])
            .args(["--timeout-s", &format!("{:.0}", self.p.timeout_s)]);
        let mut follower = self.spawn(follow_cmd, "flow latency", "latency", OK)?;
        std::thread::sleep(Duration::from_millis(FOLLOWER_START_MS));
        let broker_pid = self.broker.and_then(KafkaBroker::pid);
        let broker = CpuSpan::start(broker_pid);
        let (stage, mut system) = if peer {
            (
                STAGE_PEER,
                self.spawn(
                    self.peer_cmd(&input, &prefix, count)?,
                    STAGE_PEER,
                    "peer",
                    OK,
                )?,
            )
        } else {
            (
                STAGE_FLOW,
                self.spawn(
                    self.flow_run(&file, self.p.waiting_idle_ms, false),
                    STAGE_FLOW,
                    "flow-run",
                    OK,
                )?,
            )
        };
        std::thread::sleep(Duration::from_millis(SYSTEM_START_MS));
        let gen = self.produce(
            &input,
            self.p.latency_per_partition(),
            SplitKind::Even,
            Some(self.p.rate_per_s),
            KAFKA,
        );
        let mut g = self.spawn(gen, "generate", "generate", OK)?;
        wait_all(
            &mut [&mut follower, &mut system, &mut g],
            self.p.timeout_s,
            self.label,
        )?;
        let wall = system.wall_s();
        set_cpu(row, stage, Some(system.cpu_percent(wall)));
        set_cpu(row, STAGE_BROKER, broker.percent(wall));
        if peer {
            let out = parse::peer(&system.stdout_text())?;
            fill_throughput(row, out.records, out.seconds, 0);
            row.bytes_per_sec = row.records_per_sec * GENERATED_RECORD_BYTES;
        } else {
            let out = parse::flow_run(&system.stdout_text())?;
            fill_throughput(row, out.records, out.span_s(), out.sink_bytes());
        }
        fill_latency(row, &parse::follow_latency(&follower.stdout_text())?);
        fill_validation(row, &self.validate(&file, false, false)?.0);
        Ok(())
    }
}

/// Records one stage's CPU percent (nothing when it could not be read) and
/// the row's total.
pub fn set_cpu(row: &mut RunRow, stage: &str, percent: Option<f64>) {
    if let Some(p) = percent {
        row.cpu_per_stage.insert(stage.to_string(), p);
    }
    row.cpu_percent = row.cpu_per_stage.values().sum();
}

/// records, seconds, records/s and bytes/s of a row.
pub fn fill_throughput(row: &mut RunRow, records: u64, seconds: f64, sink_bytes: u64) {
    row.records = records;
    row.seconds = seconds;
    row.records_per_sec = parse::per_second(records, seconds).unwrap_or(0.0);
    row.bytes_per_sec = if seconds > 0.0 {
        sink_bytes as f64 / seconds
    } else {
        0.0
    };
}

/// lost, duplicated and exact: exact only with 0 lost and 0 duplicated.
pub fn fill_validation(row: &mut RunRow, v: &Validation) {
    row.lost = v.lost;
    row.duplicated = v.duplicated;
    row.exact = v.exact && v.lost == 0 && v.duplicated == 0;
}

/// p50 and p99 of a latency row.
pub fn fill_latency(row: &mut RunRow, l: &Latency) {
    row.p50_ms = Some(l.p50_ms);
    row.p99_ms = Some(l.p99_ms);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::splitter::{Cell, Variant};

    #[test]
    fn rows_count_only_exact_runs_and_add_up_cpu() {
        let cell = Cell {
            variant: Variant::AFused,
            split: SplitKind::Even,
        };
        let mut row = RunRow::new(&cell, 1, 4, 1000);
        fill_throughput(&mut row, 40_000, 0.8, 34_800_000);
        assert_eq!(row.records_per_sec, 50_000.0);
        assert_eq!(row.bytes_per_sec, 43_500_000.0);
        set_cpu(&mut row, STAGE_CLUSTER, Some(120.0));
        set_cpu(&mut row, STAGE_FLOW, Some(60.5));
        set_cpu(&mut row, STAGE_BROKER, None);
        assert_eq!(row.cpu_percent, 180.5);
        assert_eq!(row.cpu_per_stage.len(), 2);
        let mut v = Validation {
            expected: 40_000,
            received: 40_000,
            exact: true,
            ..Validation::default()
        };
        fill_validation(&mut row, &v);
        assert!(row.ok());
        v.duplicated = 3;
        fill_validation(&mut row, &v);
        assert!(!row.ok() && row.duplicated == 3);
    }
}
