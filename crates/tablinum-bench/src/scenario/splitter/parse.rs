//! What the splitter scenario reads back from its children: the lines of
//! `tablinum flow run`, `flow validate`, `flow latency`, the Kafka Streams
//! peer's JSON line, `/proc/PID/stat` and the manager's `/metrics`.
//!
//! Owns the exact shape of every line it parses (the `tablinum-cli` and
//! `Splitter.java` print them; the tests pin them) and the arithmetic on
//! them that needs no process: records/s over a span, CPU percent from two
//! tick counts. Pure: it must never run, read or write anything; a line it
//! cannot read is a [`BenchError::ChildOutput`] naming the command and the
//! line, never a guessed zero.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::error::BenchError;

/// Clock ticks per second of `/proc/PID/stat`'s `utime` and `stime`
/// (`sysconf(_SC_CLK_TCK)`, 100 on every Linux this runs on; the crate has
/// no `libc` to ask).
pub const CLOCK_TICKS_PER_S: f64 = 100.0;
/// The metric `/metrics` reports a flow task's committed input position in.
pub const TASK_POSITION_METRIC: &str = "tablinum_flow_task_position";
/// The start of `flow run`'s span line.
pub const SPAN_PREFIX: &str = "span: first record at unix ms ";
/// The start of `flow latency`'s result line.
pub const FOLLOW_LATENCY_PREFIX: &str = "latency, source to visible: ";
/// The start of `flow validate --latency`'s latency line.
pub const COMMIT_LATENCY_PREFIX: &str = "latency, source append to sink commit: ";

fn bad(command: &str, line: &str, reason: impl Into<String>) -> BenchError {
    BenchError::ChildOutput {
        command: command.to_string(),
        line: line.to_string(),
        reason: reason.into(),
    }
}

/// One sink's line of `flow run` (`  info: 1000 records, 870000 bytes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkCount {
    /// The sink's name.
    pub name: String,
    /// Records it wrote.
    pub records: u64,
    /// Bytes it wrote.
    pub bytes: u64,
}

/// What `tablinum flow run` printed at its end.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowRunOutput {
    /// The flow's name.
    pub name: String,
    /// Records read.
    pub records: u64,
    /// Unix ms of the first record read.
    pub first_record_unix_ms: u64,
    /// Unix ms of the last commit.
    pub last_commit_unix_ms: u64,
    /// Every sink's count.
    pub sinks: Vec<SinkCount>,
}

impl FlowRunOutput {
    /// Seconds from the first record to the last commit.
    pub fn span_s(&self) -> f64 {
        span_s(self.first_record_unix_ms, self.last_commit_unix_ms)
    }

    /// Bytes written by every sink.
    pub fn sink_bytes(&self) -> u64 {
        self.sinks.iter().map(|s| s.bytes).sum()
    }

    /// Records written by every sink.
    pub fn sink_records(&self) -> u64 {
        self.sinks.iter().map(|s| s.records).sum()
    }
}

/// Seconds between two unix ms stamps (0 when `to` is not after `from`).
pub fn span_s(from_unix_ms: u64, to_unix_ms: u64) -> f64 {
    to_unix_ms.saturating_sub(from_unix_ms) as f64 / 1000.0
}

/// `records / seconds`, or `None` when the span is empty.
pub fn per_second(records: u64, seconds: f64) -> Option<f64> {
    (seconds > 0.0 && seconds.is_finite()).then(|| records as f64 / seconds)
}

fn number<T: std::str::FromStr>(
    command: &str,
    line: &str,
    what: &str,
    text: &str,
) -> Result<T, BenchError> {
    text.trim()
        .trim_end_matches(',')
        .parse::<T>()
        .map_err(|_| bad(command, line, format!("{what} `{text}` is not a number")))
}

/// The whole stdout of `tablinum flow run`: its `flow NAME: R records in …`
/// line, its span line and one line per sink.
pub fn flow_run(stdout: &str) -> Result<FlowRunOutput, BenchError> {
    const CMD: &str = "tablinum flow run";
    let mut head = None;
    let mut span = None;
    let mut sinks = Vec::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("flow ") {
            if !rest.contains(" records in ") {
                continue;
            }
            let (name, after) = rest
                .split_once(": ")
                .ok_or_else(|| bad(CMD, line, "no `: ` after the flow's name"))?;
            let records = after
                .split_once(" records in ")
                .map(|(n, _)| n)
                .ok_or_else(|| bad(CMD, line, "no record count"))?;
            head = Some((
                name.to_string(),
                number::<u64>(CMD, line, "records", records)?,
            ));
        } else if let Some(rest) = line.trim_start().strip_prefix(SPAN_PREFIX) {
            let (first, last) = rest
                .split_once(", last commit at unix ms ")
                .ok_or_else(|| bad(CMD, line, "no `last commit at unix ms`"))?;
            span = Some((
                number::<u64>(CMD, line, "first record ms", first)?,
                number::<u64>(CMD, line, "last commit ms", last)?,
            ));
        } else if line.starts_with("  ") && line.ends_with(" bytes") {
            let (name, rest) = line
                .trim_start()
                .split_once(": ")
                .ok_or_else(|| bad(CMD, line, "no `: ` after the sink's name"))?;
            let (records, bytes) = rest
                .strip_suffix(" bytes")
                .and_then(|r| r.split_once(" records, "))
                .ok_or_else(|| bad(CMD, line, "not `N records, B bytes`"))?;
            sinks.push(SinkCount {
                name: name.to_string(),
                records: number(CMD, line, "sink records", records)?,
                bytes: number(CMD, line, "sink bytes", bytes)?,
            });
        }
    }
    let (name, records) =
        head.ok_or_else(|| bad(CMD, last_line(stdout), "no `flow NAME: R records in` line"))?;
    let (first, last) = span.ok_or_else(|| bad(CMD, last_line(stdout), "no `span:` line"))?;
    if last < first {
        return Err(bad(
            CMD,
            &format!("span {first} .. {last}"),
            "the last commit is before the first record",
        ));
    }
    Ok(FlowRunOutput {
        name,
        records,
        first_record_unix_ms: first,
        last_commit_unix_ms: last,
        sinks,
    })
}

fn last_line(text: &str) -> &str {
    text.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no output)")
}

/// The counts of `tablinum flow validate`'s last line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Validation {
    /// Records the generator stamped.
    pub expected: u64,
    /// Stamped records found in the sinks.
    pub received: u64,
    /// Expected and not found.
    pub lost: u64,
    /// Found more than once.
    pub duplicated: u64,
    /// Found and never generated.
    pub unexpected: u64,
    /// The line ended in `EXACT` (not `NOT EXACT`).
    pub exact: bool,
}

/// The last `flow NAME: expected E, received R, lost L, duplicated D,
/// unexpected U: EXACT|NOT EXACT` line of `flow validate`'s stdout.
pub fn validation(stdout: &str) -> Result<Validation, BenchError> {
    const CMD: &str = "tablinum flow validate";
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with("flow ") && l.contains(": expected "))
        .ok_or_else(|| bad(CMD, last_line(stdout), "no `flow NAME: expected …` line"))?;
    let (_, rest) = line
        .split_once(": expected ")
        .ok_or_else(|| bad(CMD, line, "no `expected`"))?;
    let (counts, verdict) = rest
        .rsplit_once(": ")
        .ok_or_else(|| bad(CMD, line, "no `: EXACT` or `: NOT EXACT` at the end"))?;
    let exact = match verdict.trim() {
        "EXACT" => true,
        "NOT EXACT" => false,
        v => {
            return Err(bad(
                CMD,
                line,
                format!("`{v}` is neither EXACT nor NOT EXACT"),
            ))
        }
    };
    let fields: Vec<&str> = counts.split(", ").collect();
    let [e, r, l, d, u] = fields[..] else {
        return Err(bad(CMD, line, "not five counts"));
    };
    let field = |text: &str, name: &str| -> Result<u64, BenchError> {
        let value = if name == "expected" {
            Some(text)
        } else {
            text.strip_prefix(name).map(str::trim_start)
        };
        let value = value.ok_or_else(|| bad(CMD, line, format!("no `{name}` count")))?;
        number(CMD, line, name, value)
    };
    Ok(Validation {
        expected: field(e, "expected")?,
        received: field(r, "received")?,
        lost: field(l, "lost")?,
        duplicated: field(d, "duplicated")?,
        unexpected: field(u, "unexpected")?,
        exact,
    })
}

/// A latency line's figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Latency {
    /// Median, ms.
    pub p50_ms: f64,
    /// 99th percentile, ms.
    pub p99_ms: f64,
    /// Largest, ms.
    pub max_ms: f64,
    /// Records measured.
    pub records: u64,
}

fn latency_after(command: &str, line: &str, rest: &str) -> Result<Latency, BenchError> {
    // `p50 X ms, p99 Y ms, max Z ms over C records[ (...)]`
    let rest = rest.split(" (").next().unwrap_or(rest);
    let (figures, over) = rest
        .split_once(" over ")
        .ok_or_else(|| bad(command, line, "no `over C records`"))?;
    let records = over
        .trim()
        .strip_suffix(" records")
        .ok_or_else(|| bad(command, line, "no `records` after the count"))?;
    let mut ms = BTreeMap::new();
    for part in figures.split(", ") {
        let (name, value) = part
            .trim()
            .split_once(' ')
            .ok_or_else(|| bad(command, line, format!("`{part}` is not `NAME X ms`")))?;
        let value = value
            .strip_suffix(" ms")
            .ok_or_else(|| bad(command, line, format!("`{part}` has no `ms`")))?;
        ms.insert(name, number::<f64>(command, line, name, value)?);
    }
    let get = |k: &str| {
        ms.get(k)
            .copied()
            .ok_or_else(|| bad(command, line, format!("no `{k}`")))
    };
    Ok(Latency {
        p50_ms: get("p50")?,
        p99_ms: get("p99")?,
        max_ms: get("max")?,
        records: number(command, line, "records", records)?,
    })
}

fn latency_line(command: &str, stdout: &str, prefix: &str) -> Result<Latency, BenchError> {
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with(prefix))
        .ok_or_else(|| {
            bad(
                command,
                last_line(stdout),
                format!("no `{}` line", prefix.trim()),
            )
        })?;
    let rest = &line.trim_start()[prefix.len()..];
    latency_after(command, line, rest)
}

/// `tablinum flow latency`'s `latency, source to visible: p50 X ms, p99 Y
/// ms, max Z ms over C records`.
pub fn follow_latency(stdout: &str) -> Result<Latency, BenchError> {
    latency_line("tablinum flow latency", stdout, FOLLOW_LATENCY_PREFIX)
}

/// `tablinum flow validate --latency`'s `  latency, source append to sink
/// commit: p50 X ms, p99 Y ms, max Z ms over C records (...)`.
pub fn commit_latency(stdout: &str) -> Result<Latency, BenchError> {
    latency_line(
        "tablinum flow validate --latency",
        stdout,
        COMMIT_LATENCY_PREFIX,
    )
}

/// The Kafka Streams peer's one JSON line.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
pub struct PeerOutput {
    /// Records it split.
    pub records: u64,
    /// Seconds from its first record to the close that committed the last.
    pub seconds: f64,
    /// `records / seconds`.
    pub records_per_sec: f64,
}

/// The last `{…}` line of `Splitter.java`'s stdout.
pub fn peer(stdout: &str) -> Result<PeerOutput, BenchError> {
    const CMD: &str = "java Splitter";
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| bad(CMD, last_line(stdout), "no JSON line"))?;
    serde_json::from_str(line.trim()).map_err(|e| bad(CMD, line, e.to_string()))
}

/// `utime + stime` (fields 14 and 15, clock ticks) of a `/proc/PID/stat`.
pub fn stat_ticks(stat: &str) -> Result<u64, BenchError> {
    const CMD: &str = "/proc/PID/stat";
    // The command name (field 2) may hold spaces and parentheses: the
    // fields after it start after the last `)`.
    let (_, after) = stat
        .rsplit_once(')')
        .ok_or_else(|| bad(CMD, stat.trim(), "no `)` after the command name"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // fields[0] is field 3 (state): field 14 is fields[11].
    let (Some(u), Some(s)) = (fields.get(11), fields.get(12)) else {
        return Err(bad(CMD, stat.trim(), "fewer than 15 fields"));
    };
    Ok(number::<u64>(CMD, stat.trim(), "utime", u)? + number::<u64>(CMD, stat.trim(), "stime", s)?)
}

/// Percent of one core: `ticks` clock ticks of CPU over `wall_s` seconds.
pub fn cpu_percent(ticks: u64, wall_s: f64) -> f64 {
    if wall_s > 0.0 {
        ticks as f64 / CLOCK_TICKS_PER_S / wall_s * 100.0
    } else {
        0.0
    }
}

/// Every task's committed position of `flow` in a `/metrics` text
/// (`tablinum_flow_task_position{flow="F",task="3",worker="w1"} 1234`).
pub fn task_positions(metrics: &str, flow: &str) -> Result<Vec<(u32, f64)>, BenchError> {
    const CMD: &str = "GET /metrics";
    let mut out = Vec::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(TASK_POSITION_METRIC) else {
            continue;
        };
        let Some(rest) = rest.strip_prefix('{') else {
            continue;
        };
        let (labels, value) = rest
            .split_once("} ")
            .ok_or_else(|| bad(CMD, line, "no `} VALUE`"))?;
        let mut task = None;
        let mut this_flow = false;
        for label in labels.split(',') {
            let (k, v) = label
                .split_once('=')
                .ok_or_else(|| bad(CMD, line, format!("label `{label}` has no `=`")))?;
            let v = v.trim_matches('"');
            match k {
                "flow" => this_flow = v == flow,
                "task" => task = Some(number::<u32>(CMD, line, "task", v)?),
                _ => {}
            }
        }
        if this_flow {
            let task = task.ok_or_else(|| bad(CMD, line, "no `task` label"))?;
            out.push((task, number(CMD, line, "position", value)?));
        }
    }
    Ok(out)
}

/// The HTTP address of `tablinum up`'s `  status   http://ADDR/` line.
pub fn status_addr(log: &str) -> Option<String> {
    log.lines().find_map(|l| {
        let rest = l.trim_start().strip_prefix("status")?.trim_start();
        let addr = rest.strip_prefix("http://")?;
        Some(addr.trim_end_matches('/').to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN: &str = "flow a3: 40000 records in 1.2 s, 35000 records/s from the first record to \
                       the last commit, 2 commits (every 1000 ms, sync)\n  span: first record at \
                       unix ms 1700000000000, last commit at unix ms 1700000000800\n  info: 13600 \
                       records, 11832000 bytes\n  warning: 13200 records, 11484000 bytes\n  error: \
                       13200 records, 11484000 bytes\n";

    fn err<T: std::fmt::Debug>(r: Result<T, BenchError>) -> String {
        match r {
            Ok(v) => panic!("parsed {v:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn flow_run_gives_the_span_and_every_sink() {
        let r = flow_run(RUN).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(r.name, "a3");
        assert_eq!(r.records, 40_000);
        assert_eq!(r.span_s(), 0.8);
        assert_eq!(per_second(r.records, r.span_s()), Some(50_000.0));
        assert_eq!(r.sinks.len(), 3);
        assert_eq!(
            r.sinks[1],
            SinkCount {
                name: "warning".into(),
                records: 13_200,
                bytes: 11_484_000
            }
        );
        assert_eq!(r.sink_bytes(), 34_800_000);
        assert_eq!(r.sink_records(), 40_000);
        assert_eq!(per_second(1, 0.0), None);
    }

    #[test]
    fn a_malformed_flow_run_names_the_line() {
        let e = err(flow_run("flow a: 10 records in 1 s\n"));
        assert!(e.contains("no `span:` line"), "{e}");
        let e = err(flow_run(
            "flow a: ten records in 1 s\n  span: first record at unix ms 1, last commit at unix ms 2\n",
        ));
        assert!(e.contains("records `ten` is not a number"), "{e}");
        let e = err(flow_run(
            "flow a: 1 records in 1 s\n  span: first record at unix ms 5, last commit at unix ms x\n",
        ));
        assert!(e.contains("last commit ms `x`"), "{e}");
        assert!(e.contains("tablinum flow run"), "{e}");
        let e = err(flow_run(
            "flow a: 1 records in 1 s\n  span: first record at unix ms 1, last commit at unix ms 2\n  info: 5 records bytes\n",
        ));
        assert!(e.contains("not `N records, B bytes`"), "{e}");
        let e = err(flow_run(
            "flow a: 1 records in 1 s\n  span: first record at unix ms 9, last commit at unix ms 2\n",
        ));
        assert!(e.contains("before the first record"), "{e}");
        let e = err(flow_run(""));
        assert!(e.contains("no `flow NAME"), "{e}");
    }

    #[test]
    fn validate_reads_its_last_line() {
        let out = "  info: 3 records (0 without a stamp)\nflow a1: expected 400000, received \
                   400000, lost 0, duplicated 0, unexpected 0: EXACT\n";
        let v = validation(out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v,
            Validation {
                expected: 400_000,
                received: 400_000,
                lost: 0,
                duplicated: 0,
                unexpected: 0,
                exact: true
            }
        );
        let v = validation(
            "flow x: expected 10, received 9, lost 2, duplicated 1, unexpected 0: NOT EXACT\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!v.exact);
        assert_eq!((v.lost, v.duplicated, v.received), (2, 1, 9));
        let e = err(validation(
            "flow x: expected 10, received 9, lost 2, duplicated 1: EXACT\n",
        ));
        assert!(e.contains("not five counts"), "{e}");
        let e = err(validation(
            "flow x: expected 10, received 9, lost 2, duplicated 1, unexpected 0: MAYBE\n",
        ));
        assert!(e.contains("neither EXACT"), "{e}");
        let e = err(validation(
            "flow x: expected 10, received 9, dropped 2, duplicated 1, unexpected 0: EXACT\n",
        ));
        assert!(e.contains("no `lost` count"), "{e}");
        assert!(err(validation("error: no cluster\n")).contains("error: no cluster"));
    }

    #[test]
    fn both_latency_lines_parse() {
        let l = follow_latency(
            "waiting\nlatency, source to visible: p50 12 ms, p99 48.5 ms, max 230 ms over 40000 records\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            l,
            Latency {
                p50_ms: 12.0,
                p99_ms: 48.5,
                max_ms: 230.0,
                records: 40_000
            }
        );
        let l = commit_latency(
            "  info: 3 records (0 without a stamp)\n  latency, source append to sink commit: p50 \
             510 ms, p99 990 ms, max 1020 ms over 40000 records (commit every 1000 ms, sync)\nflow \
             a: expected 1, received 1, lost 0, duplicated 0, unexpected 0: EXACT\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (l.p50_ms, l.p99_ms, l.max_ms, l.records),
            (510.0, 990.0, 1020.0, 40_000)
        );
        let e = err(commit_latency("  latency: not measured (it needs ...)\n"));
        assert!(
            e.contains("no `latency, source append to sink commit:` line"),
            "{e}"
        );
        let e = err(follow_latency(
            "latency, source to visible: p50 12 ms, p99 x ms, max 230 ms over 4 records\n",
        ));
        assert!(e.contains("p99 `x` is not a number"), "{e}");
        let e = err(follow_latency(
            "latency, source to visible: p50 12 ms, max 230 ms over 4 records\n",
        ));
        assert!(e.contains("no `p99`"), "{e}");
        let e = err(follow_latency(
            "latency, source to visible: p50 12 ms, p99 1 ms, max 2 ms\n",
        ));
        assert!(e.contains("no `over C records`"), "{e}");
    }

    #[test]
    fn the_peers_json_line_parses() {
        let p = peer(
            "log line\n{\"records\":400000,\"seconds\":12.500,\"records_per_sec\":32000,\"threads\":2}\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            p,
            PeerOutput {
                records: 400_000,
                seconds: 12.5,
                records_per_sec: 32_000.0
            }
        );
        assert!(err(peer("Splitter: only 5 of 10 records in 600 s\n")).contains("no JSON line"));
        let e = err(peer("{\"records\":\"many\"}\n"));
        assert!(e.contains("java Splitter"), "{e}");
    }

    #[test]
    fn cpu_comes_from_two_stat_samples() {
        // A command name with a space and a parenthesis; utime 250, stime 50.
        let before = "4242 (tablinum (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                      9 0 100 1000 200";
        let after = "4242 (tablinum (x)) S 1 4242 4242 0 -1 4194560 100 0 0 0 400 100 0 0 20 0 \
                     9 0 100 1000 200";
        let a = stat_ticks(before).unwrap_or_else(|e| panic!("{e}"));
        let b = stat_ticks(after).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((a, b), (300, 500));
        // 200 ticks = 2 s of CPU over 4 s: half a core.
        assert_eq!(cpu_percent(b - a, 4.0), 50.0);
        assert_eq!(cpu_percent(100, 0.0), 0.0);
        assert!(err(stat_ticks("4242 (x) S 1 2")).contains("fewer than 15 fields"));
        assert!(err(stat_ticks("garbage")).contains("no `)`"));
    }

    #[test]
    fn metrics_give_the_flows_task_positions() {
        let m =
            "# HELP x\ntablinum_flow_task_position{flow=\"kill1\",task=\"0\",worker=\"w1\"} 1500\n\
                 tablinum_flow_task_position{flow=\"kill1\",task=\"7\",worker=\"\"} 2e3\n\
                 tablinum_flow_task_position{flow=\"other\",task=\"1\",worker=\"w2\"} 9\n\
                 tablinum_flow_task_positions_total 4\n";
        let p = task_positions(m, "kill1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p, vec![(0, 1500.0), (7, 2000.0)]);
        let e = err(task_positions(
            "tablinum_flow_task_position{flow=\"kill1\",task=\"z\"} 1\n",
            "kill1",
        ));
        assert!(e.contains("task `z`"), "{e}");
        assert_eq!(
            status_addr("  grpc     127.0.0.1:5000\n  status   http://127.0.0.1:5001/\n"),
            Some("127.0.0.1:5001".into())
        );
        assert_eq!(status_addr("  grpc 1\n"), None);
    }
}
