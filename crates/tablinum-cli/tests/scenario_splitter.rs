//! `tablinum bench scenario splitter` through the real binary: it starts
//! its own `tablinum up` and Kafka broker (from the embedded script; Java
//! and Maven are needed, as for tests/kafka.rs), runs a tablinum-topics
//! throughput cell and a Kafka latency cell at toy sizes, validates them,
//! and writes scenario.json rows with the keys.

use std::process::Command;

#[test]
fn scenario_splitter_runs_validates_and_writes_its_rows() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("splitter");
    let o = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .args([
            "bench",
            "scenario",
            "splitter",
            "--quick",
            "--only",
            "a-fused,b-tablinum-latency",
            "--records-per-partition",
            "500",
            "--latency-records",
            "4000",
            "--rate",
            "2000",
            "--timeout-s",
            "300",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    for f in ["README.md", "scenario.json", "scenario.png"] {
        assert!(out.join(f).is_file(), "{f} missing:\n{stderr}");
    }
    // The broker's and the cluster's data are gone (no --keep-data).
    for d in ["kafka", "cluster-data"] {
        assert!(!out.join(d).exists(), "{d} left behind");
    }
    let text = std::fs::read_to_string(out.join("scenario.json")).unwrap_or_else(|e| panic!("{e}"));
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(v["runs_failed"], 0, "{text}");
    let rows = v["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no rows: {text}"));
    // a-fused at both splits, and the latency cell.
    assert_eq!(rows.len(), 3, "{text}");
    for r in rows {
        for key in [
            "variant",
            "system",
            "records",
            "records_per_sec",
            "bytes_per_sec",
            "lost",
            "duplicated",
            "p99_ms",
            "cpu_percent",
            "durability",
            "commit_interval_ms",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
        assert_eq!(r["system"], "tablinum", "{r}");
        assert_eq!(
            (r["lost"].as_u64(), r["duplicated"].as_u64()),
            (Some(0), Some(0)),
            "{r}"
        );
        assert!(r["records_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    // The latency cell measured every record it generated.
    let lat = rows
        .iter()
        .find(|r| r["variant"].as_str().is_some_and(|s| s.contains("latency")))
        .unwrap_or_else(|| panic!("no latency row: {text}"));
    assert_eq!(lat["records"], 4000, "{lat}");
    assert!(lat["p99_ms"].as_f64().is_some_and(|p| p > 0.0), "{lat}");
}
