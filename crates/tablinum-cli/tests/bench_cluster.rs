//! The harness against a real cluster, through the real binary: the
//! `stream-limit` scenario (which starts `tablinum up` itself), and the
//! `cluster` target of `bench run`, both starting its own cluster and
//! against a running one (`cluster:ADDR`).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use tablinum_bench::scenario::stream_limit::{CellLimit, StreamLimitReport};
use tablinum_bench::RunSummary;
use tablinum_stream::window::WindowMode;

fn tablinum(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn ok(o: &Output) -> String {
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

#[test]
fn stream_limit_scenario_writes_the_reports_cells() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("sl");
    let out_s = out.to_string_lossy().into_owned();
    let o = tablinum(&[
        "bench",
        "scenario",
        "stream-limit",
        "--rows",
        "3000",
        "--repeat",
        "1",
        "--duration-s",
        "1",
        "--warmup-s",
        "0",
        "--q",
        "8",
        "--stream-limits",
        "10,adaptive",
        "--fair-windows",
        "5",
        "--fair-batch-rows",
        "8,share",
        "--out",
        &out_s,
    ]);
    let stdout = ok(&o);
    assert!(stdout.contains("| 8 | 10 | 1 |"), "{stdout}");
    assert!(stdout.contains("| 8 | adaptive | auto |"), "{stdout}");
    // The fair grid: window 5 with 8 rows and with the share (1000 / 8) per batch.
    assert!(stdout.contains("| 8 | 5 | 8 |"), "{stdout}");
    assert!(stdout.contains("| 8 | 5 | 125 |"), "{stdout}");
    assert!(
        stdout.contains("## Adaptive against the best fixed (window, batch rows) pair"),
        "{stdout}"
    );
    assert!(stdout.contains("## Targets"), "{stdout}");
    assert!(
        stdout.contains("- (c) fair grid: adaptive ≥ the best fixed (window, batch rows) pair"),
        "{stdout}"
    );
    assert!(
        ["**PASS**", "**MISS**"].iter().any(|v| stdout
            .lines()
            .any(|l| l.starts_with("- (c)") && l.contains(v))),
        "{stdout}"
    );
    // Every cell carries the report's fields, under these names.
    let text = std::fs::read_to_string(out.join("scenario.json")).unwrap_or_else(|e| panic!("{e}"));
    for field in [
        "\"q\": 8",
        "\"stream_limit\": 10",
        "\"stream_limit\": \"adaptive\"",
        "\"rows_per_sec_mean\"",
        "\"rows_per_sec_stddev_pct\"",
        "\"ratio_vs_10\"",
        "\"wasted_rows_per_request\"",
        "\"fair\"",
        "\"best_batch_rows\"",
        "\"git_commit\"",
        "\"machine\"",
        "\"command_line\"",
    ] {
        assert!(
            text.contains(field),
            "{field} not in scenario.json:\n{text}"
        );
    }
    let r = StreamLimitReport::load(&out).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.complete && r.runs_failed == 0, "{text}");
    assert!(r.machine.cores.is_some());
    assert!(
        r.command_line
            .contains("bench scenario stream-limit --rows 3000"),
        "{}",
        r.command_line
    );
    assert_eq!(r.cells.len(), 4, "{text}");
    for c in &r.cells {
        assert_eq!(c.q, 8);
        assert!(c.rows_per_sec_mean > 0.0, "{c:?}");
        assert!(c.ratio_vs_10.is_some_and(|x| x > 0.0), "{c:?}");
        assert!(c.wasted_rows_per_request >= 0.0, "{c:?}");
    }
    assert_eq!(r.cells[0].stream_limit, CellLimit(WindowMode::Fixed(10)));
    assert_eq!(r.cells[0].ratio_vs_10, Some(1.0));
    assert_eq!(r.cells[1].stream_limit, CellLimit(WindowMode::Adaptive));
    assert_eq!(
        (r.cells[2].stream_limit, r.cells[2].batch_rows),
        (CellLimit(WindowMode::Fixed(5)), 8)
    );
    assert_eq!(r.cells[3].batch_rows, 125);
    assert_eq!(r.fair.len(), 1, "{text}");
    assert!(r.fair[0].adaptive_rows_sent_per_request > 0.0, "{text}");
    assert_eq!(r.targets.len(), 3);
    assert_eq!(r.targets[2].id, "c");
    assert!(!r.targets[2].checks.is_empty(), "{text}");
    let csv = std::fs::read_to_string(out.join("runs.csv")).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(out.join("README.md").is_file());
    assert!(out.join("scenario.png").is_file());
    assert!(
        !out.join("cluster-data").exists(),
        "the cluster's data is removed"
    );
}

/// `tablinum up` on free ports; returns the child and its gRPC address.
fn start_cluster(data: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .arg("up")
        .arg("--data")
        .arg(data)
        .args(["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = child.stdout.take().unwrap_or_else(|| panic!("no stdout"));
    let mut lines = BufReader::new(stdout).lines();
    let addr = loop {
        match lines.next() {
            Some(Ok(l)) => {
                if let Some(a) = l.strip_prefix("  grpc ") {
                    break a.trim().to_string();
                }
            }
            _ => {
                let _ = child.kill();
                panic!("tablinum up ended before its ready line");
            }
        }
    };
    // Keep draining its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

#[test]
fn cluster_target_runs_a_workload_with_and_without_its_own_cluster() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let wl = tmp.path().join("w.toml");
    std::fs::write(
        &wl,
        "duration_s = 1\nconcurrent = 2\nreport_interval_s = 0.5\nseed = 5\npreload_keys = 100\n\
         keys = 200\nvalue_size_bytes = 512\nscan_limit_rows = 20\n[operations]\nget = 2\n\
         head = 1\nput = 2\nupdate = 1\ndelete = 1\nscan = 1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let wl_s = wl.to_string_lossy().into_owned();

    // Its own cluster, under the run's data directory, removed afterwards.
    let out = tmp.path().join("own");
    let out_s = out.to_string_lossy().into_owned();
    ok(&tablinum(&[
        "bench",
        "run",
        &wl_s,
        "--target",
        "cluster:tablets=4",
        "--out",
        &out_s,
        "--quiet",
    ]));
    let s = RunSummary::load(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.target, "cluster");
    assert_eq!(s.failed, 0, "{s:?}");
    assert!(s.ops["scan"].successful > 0, "{s:?}");
    assert!(s.ops["get"].successful > s.ops["get"].not_found, "{s:?}");
    assert!(s.disk_bytes.is_some_and(|b| b > 0), "{s:?}");
    assert!(!out.join("data").exists(), "data dir removed");

    // The same through TLS (`tablinum up --tls`, the client trusting its CA).
    let out_tls = tmp.path().join("own-tls");
    let out_tls_s = out_tls.to_string_lossy().into_owned();
    ok(&tablinum(&[
        "bench",
        "run",
        &wl_s,
        "--target",
        "cluster:tablets=2,tls=1",
        "--out",
        &out_tls_s,
        "--quiet",
    ]));
    let s = RunSummary::load(&out_tls).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.failed, 0, "{s:?}");
    assert!(s.ops["get"].successful > 0, "{s:?}");

    // A running cluster: the table is created, then dropped at the end.
    let (mut cluster, addr) = start_cluster(&tmp.path().join("cluster"));
    let out = tmp.path().join("given");
    let out_s = out.to_string_lossy().into_owned();
    let target = format!("cluster:{addr},tablets=2,table=bench_t");
    let run = tablinum(&[
        "bench", "run", &wl_s, "--target", &target, "--out", &out_s, "--quiet",
    ]);
    let tables = tablinum(&["table", "list", "--cluster", &addr]);
    let _ = Command::new("kill")
        .args(["-TERM", &cluster.id().to_string()])
        .status();
    let _ = cluster.wait();
    ok(&run);
    let s = RunSummary::load(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.target.as_str(), s.failed), ("cluster", 0));
    let tables = ok(&tables);
    assert!(!tables.contains("bench_t"), "{tables}");
}

#[test]
fn scan_servers_scenario_writes_the_simulated_and_measured_rows() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("ss");
    let out_s = out.to_string_lossy().into_owned();
    let o = tablinum(&[
        "bench",
        "scenario",
        "scan-servers",
        "--quick",
        "--probe-scans",
        "4",
        "--measured-seconds",
        "1",
        "--out",
        &out_s,
    ]);
    let stdout = ok(&o);
    assert!(stdout.contains("SIMULATED"), "{stdout}");
    assert!(stdout.contains("large-near-ideal"), "{stdout}");
    let json: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("scenario.json")).unwrap_or_else(|e| panic!("{e}")),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let rows = json["rows"].as_array().unwrap_or_else(|| panic!("no rows"));
    // The report's 23 rows under both selectors and once more with this
    // machine's costs, then one measured row per mode (one quick repeat).
    let simulated = rows.iter().filter(|r| r["source"] == "simulated").count();
    assert_eq!(simulated, 3 * 23);
    let measured: Vec<&serde_json::Value> =
        rows.iter().filter(|r| r["source"] == "measured").collect();
    for id in [
        "M-immediate",
        "M-eventual-noshed",
        "M-eventual-shed",
        "M-eventual-default",
    ] {
        let r = measured
            .iter()
            .find(|r| r["id"] == id)
            .unwrap_or_else(|| panic!("no measured row {id}"));
        assert!(r["probe_scans"].as_u64().unwrap_or(0) > 0, "{r}");
        assert_eq!(r["errors"], 0, "{r}");
    }
    assert_eq!(measured.len(), 4);
    assert!(out.join("profiles.toml").exists());
    assert!(out.join("scenario.png").exists());
    for r in rows {
        for f in [
            "test",
            "id",
            "source",
            "selector",
            "sservers",
            "initial",
            "busy_timeout_ms",
            "scan_type",
            "concurrent",
            "busy_events",
            "avg_ms",
            "sd_ms",
            "min_ms",
            "max_ms",
            "p99_ms",
        ] {
            assert!(r.get(f).is_some(), "row without {f}: {r}");
        }
    }
    assert!(rows.iter().any(|r| r["id"] == "D833"));
    // A second run into the same directory is refused, nothing overwritten.
    let o = tablinum(&["bench", "scenario", "scan-servers", "--out", &out_s]);
    assert!(!o.status.success());
    // Bad measured options are refused before anything is created.
    let fresh = tmp.path().join("never");
    let fresh_s = fresh.to_string_lossy().into_owned();
    let profiles = tmp.path().join("only-noshed.toml");
    std::fs::write(
        &profiles,
        "default = \"noshed\"\n[profiles.noshed]\nattempts = [ { servers = 1, busy_timeout_ms = 5 } ]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let profiles_s = profiles.to_string_lossy().into_owned();
    for (args, want) in [
        (
            vec!["--measured-profiles", profiles_s.as_str()],
            "defines no profile \"shed\"",
        ),
        (vec!["--measured-seconds", "0"], "--measured-seconds"),
        (vec!["--measured-clients", "0"], "--measured-clients"),
        (vec!["--measured-millicores", "1"], "--measured-millicores"),
    ] {
        let mut all = vec![
            "bench",
            "scenario",
            "scan-servers",
            "--out",
            fresh_s.as_str(),
        ];
        all.extend(args);
        let o = tablinum(&all);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{want}: {err}");
        assert!(!fresh.exists(), "{want}: the output directory was created");
    }
}
