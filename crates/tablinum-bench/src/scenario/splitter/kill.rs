//! Variant e-kill (run.py's experiment): the fused splitter submitted to
//! the cluster (`tablinum flow submit`) and run by two `tablinum worker`
//! processes; once a third of the input is through one worker is SIGKILLed
//! and a replacement started at once.
//!
//! Owns the committed input position read from the manager's `/metrics`
//! every [`SAMPLE_MS`] (a task between holders counts at the highest
//! position seen), the throughput over a [`WINDOW_S`] window, the pre-kill
//! rate (median of the windows in the [`PRE_KILL_S`] before the kill) and
//! the recovery time (the first window after the kill at ≥ 90 % of it) —
//! the math is pure and tested on made-up samples. It must never leave a
//! worker running (they are [`Proc`]s, killed when dropped, also on error),
//! never leave the flow submitted when it can stop and drop it, and never
//! signal a process it did not start.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::flows::{self, FlowSpec, SinkSpec, SourceSpec};
use super::measure::{fill_throughput, fill_validation, set_cpu, Measure, STAGE_CLUSTER};
use super::parse;
use super::procs::{CpuSpan, Proc};
use super::{RunRow, SplitKind, GENERATED_RECORD_BYTES, TARGET_RECOVERY_FRACTION};
use crate::error::BenchError;
use crate::scenario::framework::child::PROGRESS_LINE_S;

/// The kill run's input, in throughput runs' worth: long enough that the
/// rate before the kill is past the start and the failover shows whole
/// (at 400,000 records the run ended about when the killed tasks resumed).
pub const KILL_RECORDS_SCALE: u64 = 3;
/// Tries of `flow drop` after `flow stop`.
pub const DROP_TRIES: u32 = 10;
/// Pause between them, ms (the workers' heartbeat is 500 ms).
pub const DROP_RETRY_MS: u64 = 500;
/// Between two samples of `/metrics`, ms (run.py's 0.25 s).
pub const SAMPLE_MS: u64 = 250;
/// The throughput window, seconds (run.py's 2 s).
pub const WINDOW_S: f64 = 2.0;
/// The fraction of the input through when the worker is killed.
pub const KILL_AT_FRACTION: f64 = 1.0 / 3.0;
/// The pre-kill rate is the median of the windows ending in this many
/// seconds before the kill.
pub const PRE_KILL_S: f64 = 6.0;
/// Time limit of one `/metrics` request, ms.
pub const HTTP_TIMEOUT_MS: u64 = 5000;
/// Failed `/metrics` reads in a row that fail the run.
pub const HTTP_FAILURES_MAX: u32 = 20;
/// Workers at the start.
pub const WORKERS: usize = 2;

/// What e-kill records beside the row's figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KillDetail {
    /// Seconds from the submit to the kill.
    pub killed_at_s: f64,
    /// The worker killed.
    pub killed_worker: String,
    /// Committed input position (summed over tasks) at the kill.
    pub position_at_kill: f64,
    /// The pre-kill rate, records/s.
    pub pre_kill_records_per_sec: f64,
    /// `(seconds since submit, committed position)` every sample.
    pub samples: Vec<(f64, f64)>,
}

/// Records/s over the `window_s` before `t` (`samples`: `(t, position)` in
/// time order), `None` without two distinct samples in it.
pub fn rate_at(samples: &[(f64, f64)], t: f64, window_s: f64) -> Option<f64> {
    let inside: Vec<&(f64, f64)> = samples
        .iter()
        .filter(|s| t - window_s <= s.0 && s.0 <= t)
        .collect();
    let (first, last) = (inside.first()?, inside.last()?);
    (last.0 > first.0).then(|| (last.1 - first.1) / (last.0 - first.0))
}

/// The median window rate in the [`PRE_KILL_S`] before `kill_t` (0 when
/// there is none).
pub fn pre_kill_rate(samples: &[(f64, f64)], kill_t: f64) -> f64 {
    let mut rates: Vec<f64> = samples
        .iter()
        .filter(|s| kill_t - PRE_KILL_S <= s.0 && s.0 <= kill_t)
        .filter_map(|s| rate_at(samples, s.0, WINDOW_S))
        .filter(|r| *r > 0.0)
        .collect();
    rates.sort_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied().unwrap_or(0.0)
}

/// Seconds from `kill_t` to the first sample after `kill_t + WINDOW_S`
/// whose window rate is at least `fraction × pre` (`None`: never).
pub fn recovery_s(samples: &[(f64, f64)], kill_t: f64, pre: f64, fraction: f64) -> Option<f64> {
    samples
        .iter()
        .filter(|s| s.0 > kill_t + WINDOW_S)
        .find(|s| rate_at(samples, s.0, WINDOW_S).is_some_and(|r| r >= fraction * pre))
        .map(|s| s.0 - kill_t)
}

/// The window rate at every sample (the chart's line).
pub fn rate_series(samples: &[(f64, f64)]) -> Vec<(f64, f64)> {
    samples
        .iter()
        .filter_map(|s| rate_at(samples, s.0, WINDOW_S).map(|r| (s.0, r)))
        .collect()
}

/// `GET PATH` on `addr` with the bearer `token`: the body of a 200.
pub fn http_get(addr: &str, path: &str, token: &str) -> Result<String, String> {
    let sock: SocketAddr = addr.parse().map_err(|e| format!("{addr}: {e}"))?;
    let timeout = Duration::from_millis(HTTP_TIMEOUT_MS);
    let mut s = TcpStream::connect_timeout(&sock, timeout).map_err(|e| format!("{addr}: {e}"))?;
    s.set_read_timeout(Some(timeout))
        .map_err(|e| e.to_string())?;
    // One write: the request in one piece.
    let request = format!(
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    );
    s.write_all(request.as_bytes()).map_err(|e| e.to_string())?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| e.to_string())?;
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| "no end of the HTTP header".to_string())?;
    let status = head.lines().next().unwrap_or("");
    if status.split_whitespace().nth(1) != Some("200") {
        return Err(format!("GET {path}: {status}"));
    }
    Ok(body.to_string())
}

fn worker(m: &Measure<'_>, id: &str) -> Result<Proc, BenchError> {
    let data = m
        .ctx
        .data_dir
        .as_ref()
        .ok_or_else(|| BenchError::ChildRun {
            run: m.label.to_string(),
            reason: "e-kill needs the started cluster's data directory (its cluster.secret)".into(),
        })?;
    let dir = m.ctx.run_dir(m.sequence)?;
    let cfg = dir.join(format!("{id}.toml"));
    let text = flows::worker_config(
        id,
        &m.ctx.addr,
        &data.join("cluster.secret"),
        &m.ctx.out.join(super::FILES_DIR),
    );
    std::fs::write(&cfg, text).map_err(|e| BenchError::io(&cfg, "write", e))?;
    let mut c = m.ctx.tablinum(&["worker", "--config"]);
    c.arg(&cfg);
    // Killed workers end by a signal: no exit code is "ok", nobody checks.
    Proc::spawn(c, "worker", &dir, id, &[0])
}

/// The run: workers, submit, samples, kill, replacement, validation, stop
/// and drop. The workers are killed when this returns (also on error).
pub fn e_kill(m: &Measure<'_>, row: &mut RunRow) -> Result<(), BenchError> {
    let s = m.sequence;
    let http = m.ctx.http.clone().ok_or_else(|| BenchError::ChildRun {
        run: m.label.to_string(),
        reason: "the cluster's HTTP address (its `status` line in cluster.log) is unknown".into(),
    })?;
    let (input, agg, name) = (
        format!("logs{s}"),
        format!("k{s}.aggregate"),
        format!("kill{s}"),
    );
    for t in [&input, &agg] {
        let parts = m.p.partitions.to_string();
        let c = m
            .ctx
            .tablinum(&["topic", "create", t, "--partitions", &parts]);
        m_one(m, c, "topic create", &format!("create-{t}"), &[0])?;
    }
    let per_partition = m.p.records_per_partition * KILL_RECORDS_SCALE;
    let n = per_partition.to_string();
    let gen = m.ctx.tablinum(&[
        "topic",
        "produce",
        &input,
        "--generate",
        &n,
        "--split",
        &SplitKind::Even.arg(),
    ]);
    m_one(m, gen, "generate", "generate", &[0])?;
    let total = (per_partition * u64::from(m.p.partitions)) as f64;
    let f = FlowSpec::splitter(
        &name,
        m.p.partitions,
        m.p.commit_interval_ms,
        SourceSpec::Topic { topic: input },
        |_| SinkSpec::Topic { topic: agg.clone() },
    );
    let file = m.ctx.write_flow(&name, &f.render())?;
    let mut workers: Vec<(String, Proc)> = Vec::new();
    for i in 1..=WORKERS {
        let id = format!("w{s}-{i}");
        workers.push((id.clone(), worker(m, &id)?));
    }
    let cluster = CpuSpan::start(m.ctx.cluster_pid);
    let mut submit = m.ctx.tablinum(&["flow", "submit"]);
    submit.arg(&file);
    m_one(m, submit, "flow submit", "submit", &[0])?;
    let result = follow(m, &http, &name, total, &mut workers)
        .and_then(|d| m_validate(m, &file).map(|v| (d, v)));
    // Stop and drop whatever happened (best effort: the run's error wins).
    // A stopped flow can be dropped once its tasks have left their workers
    // (a heartbeat or two): drop is tried a few times.
    for (verb, stem, tries) in [("stop", "stop", 1), ("drop", "drop", DROP_TRIES)] {
        for i in 1..=tries {
            let c = m.ctx.tablinum(&["flow", verb, &name]);
            match m_one(m, c, &format!("flow {verb}"), stem, &[0]) {
                Ok(_) => break,
                Err(_) if i < tries => std::thread::sleep(Duration::from_millis(DROP_RETRY_MS)),
                Err(e) => eprintln!("{}: warning: {e}", m.label),
            }
        }
    }
    let (detail, validation) = result?;
    let end_s = detail.samples.last().map_or(0.0, |x| x.0);
    let wall = end_s.max(f64::MIN_POSITIVE);
    set_cpu(row, STAGE_CLUSTER, cluster.percent(wall));
    let worker_ticks: u64 = workers
        .iter_mut()
        .map(|(_, w)| {
            w.poll();
            w.ticks()
        })
        .sum();
    set_cpu(row, "workers", Some(parse::cpu_percent(worker_ticks, wall)));
    drop(workers);
    fill_throughput(row, total as u64, end_s, 0);
    row.bytes_per_sec = row.records_per_sec * GENERATED_RECORD_BYTES;
    row.bytes_basis = Some(format!(
        "records/s × {GENERATED_RECORD_BYTES} bytes (assumed)"
    ));
    row.recovery_s = recovery_s(
        &detail.samples,
        detail.killed_at_s,
        detail.pre_kill_records_per_sec,
        TARGET_RECOVERY_FRACTION,
    );
    row.kill = Some(detail);
    fill_validation(row, &validation);
    Ok(())
}

fn m_one(
    m: &Measure<'_>,
    c: std::process::Command,
    stage: &str,
    stem: &str,
    ok: &'static [i32],
) -> Result<Proc, BenchError> {
    super::procs::run_one(
        c,
        stage,
        &m.ctx.run_dir(m.sequence)?,
        stem,
        ok,
        m.p.timeout_s,
        m.label,
    )
}

fn m_validate(m: &Measure<'_>, file: &std::path::Path) -> Result<parse::Validation, BenchError> {
    let mut c = m.ctx.tablinum(&["flow", "validate"]);
    c.arg(file);
    let p = m_one(m, c, "flow validate", "validate", &[0, 1])?;
    parse::validation(&p.stdout_text())
}

/// Samples the positions until all of `total` is committed; kills the first
/// worker a third of the way and starts a replacement.
fn follow(
    m: &Measure<'_>,
    http: &str,
    flow: &str,
    total: f64,
    workers: &mut Vec<(String, Proc)>,
) -> Result<KillDetail, BenchError> {
    let fail = |reason: String| BenchError::ChildRun {
        run: m.label.to_string(),
        reason,
    };
    let t0 = Instant::now();
    let mut samples = Vec::new();
    let mut known: std::collections::BTreeMap<u32, f64> = Default::default();
    let mut kill: Option<(f64, String, f64)> = None;
    let mut failures = 0u32;
    let mut next_line = PROGRESS_LINE_S;
    loop {
        let t = t0.elapsed().as_secs_f64();
        if t > m.p.timeout_s {
            return Err(fail(format!(
                "timed out after {:.0} s at position {:.0} of {total}",
                t,
                samples.last().map_or(0.0, |x: &(f64, f64)| x.1)
            )));
        }
        match http_get(http, "/metrics", &m.ctx.token) {
            Ok(text) => {
                failures = 0;
                for (task, pos) in parse::task_positions(&text, flow)? {
                    let e = known.entry(task).or_insert(0.0);
                    *e = e.max(pos);
                }
            }
            Err(e) => {
                failures += 1;
                if failures >= HTTP_FAILURES_MAX {
                    return Err(fail(format!(
                        "GET /metrics failed {failures} times in a row: {e}"
                    )));
                }
            }
        }
        let pos: f64 = known.values().sum();
        samples.push((t, pos));
        if kill.is_none() && pos >= total * KILL_AT_FRACTION {
            let (id, mut w) = workers.remove(0);
            w.kill();
            let kill_t = t0.elapsed().as_secs_f64();
            let repl = format!("w{}-r", m.sequence);
            workers.push((id.clone(), w));
            workers.push((repl.clone(), worker(m, &repl)?));
            eprintln!(
                "{}: t={kill_t:.1} s: SIGKILLed {id} at position {pos:.0}; started {repl}",
                m.label
            );
            kill = Some((kill_t, id, pos));
        }
        if pos >= total {
            break;
        }
        for (_, w) in workers.iter_mut() {
            w.poll();
        }
        if t >= next_line {
            eprintln!("{}: {t:.0} s, position {pos:.0} of {total}", m.label);
            next_line += PROGRESS_LINE_S;
        }
        std::thread::sleep(Duration::from_millis(SAMPLE_MS));
    }
    let (killed_at_s, killed_worker, position_at_kill) =
        kill.ok_or_else(|| fail("the input was through before the kill".into()))?;
    Ok(KillDetail {
        killed_at_s,
        killed_worker,
        position_at_kill,
        pre_kill_records_per_sec: pre_kill_rate(&samples, killed_at_s),
        samples,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10,000 records/s until 6 s, nothing from 6 to 8 s (the kill at 6 s),
    /// 5,000/s from 8 to 10 s, 10,000/s after: samples every 0.25 s.
    fn samples() -> Vec<(f64, f64)> {
        let mut v = Vec::new();
        let mut pos = 0.0;
        let mut t = 0.0;
        while t <= 16.0 + 1e-9 {
            v.push((t, pos));
            let rate = if t < 6.0 {
                10_000.0
            } else if t < 8.0 {
                0.0
            } else if t < 10.0 {
                5_000.0
            } else {
                10_000.0
            };
            pos += rate * 0.25;
            t += 0.25;
        }
        v
    }

    #[test]
    fn recovery_is_the_first_full_window_back_at_90_percent() {
        let s = samples();
        assert_eq!(rate_at(&s, 4.0, WINDOW_S), Some(10_000.0));
        assert_eq!(rate_at(&s, 0.0, WINDOW_S), None);
        assert_eq!(rate_at(&s, 8.0, WINDOW_S), Some(0.0));
        let pre = pre_kill_rate(&s, 6.0);
        assert_eq!(pre, 10_000.0);
        // The window ending at t holds the quarter seconds from t − 2: at
        // 11.75 one of them is at 5,000/s (9,375/s ≥ 9,000), at 11.5 two
        // (8,750/s).
        let r = recovery_s(&s, 6.0, pre, 0.9).unwrap_or_else(|| panic!("recovered"));
        assert!((r - 5.75).abs() < 1e-9, "{r}");
        // Never at 2× the pre-kill rate.
        assert_eq!(recovery_s(&s, 6.0, pre, 2.0), None);
        assert_eq!(pre_kill_rate(&s[..1], 0.0), 0.0);
        let series = rate_series(&s);
        assert_eq!(series.len(), s.len() - 1);
        assert_eq!(series[0], (0.25, 10_000.0));
    }

    #[test]
    fn http_get_reads_a_200_body_and_refuses_others() {
        use std::net::TcpListener;
        let l = TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let addr = l.local_addr().unwrap_or_else(|e| panic!("{e}")).to_string();
        let server = std::thread::spawn(move || {
            for reply in [
                "HTTP/1.0 200 OK\r\n\r\nm 1\n",
                "HTTP/1.0 401 Unauthorized\r\n\r\n",
            ] {
                let (mut c, _) = l.accept().unwrap_or_else(|e| panic!("{e}"));
                let mut got = Vec::new();
                let mut buf = [0u8; 1024];
                while !got.ends_with(b"\r\n\r\n") {
                    let n = c.read(&mut buf).unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                }
                assert!(String::from_utf8_lossy(&got).contains("Authorization: Bearer tok"));
                c.write_all(reply.as_bytes())
                    .unwrap_or_else(|e| panic!("{e}"));
            }
        });
        assert_eq!(http_get(&addr, "/metrics", "tok").as_deref(), Ok("m 1\n"));
        let e = http_get(&addr, "/metrics", "tok").err().unwrap_or_default();
        assert!(e.contains("401"), "{e}");
        server.join().unwrap_or_else(|_| panic!("server"));
    }
}
