//! End-to-end test of `bench scenario volume`: a real (tiny) scenario through
//! the `bench` example binary, which `cargo test -p tablinum-bench` builds
//! before running tests. Each child run is a real process writing real files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// `target/<profile>/examples/bench`, next to this test's `deps/` directory.
fn bench_example() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("{e}"));
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| panic!("unexpected test binary path {}", exe.display()));
    let bin = profile_dir
        .join("examples")
        .join(format!("bench{}", std::env::consts::EXE_SUFFIX));
    assert!(
        bin.is_file(),
        "{} is missing: run `cargo test -p tablinum-bench` (which builds the examples)",
        bin.display()
    );
    bin
}

fn bench(args: &[&str]) -> Output {
    Command::new(bench_example())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
}

/// A `tablinum:KEY=VALUE` target runs end to end: its child reports itself
/// as `tablinum`, and the scenario counts that as the run it asked for.
#[test]
fn volume_scenario_runs_tablinum_with_an_engine_option_as_a_target() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("volume");
    let out_s = out.to_string_lossy().into_owned();
    let o = bench(&[
        "scenario",
        "volume",
        "--targets",
        "tablinum:journal_writeback_bytes=0",
        "--no-memory-limit",
        "--duration-s",
        "0.5",
        "--variants",
        "4k-nosync",
        "--keys",
        "10000",
        "--out",
        &out_s,
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stderr:\n{stderr}");
    let j = json(&out.join("scenario.json"));
    assert_eq!(j["runs_failed"], 0, "{stderr}");
    let run = &j["variants"][0]["targets"]["tablinum:journal_writeback_bytes=0"];
    assert!(
        run["ops_per_sec"]["mean"].as_f64().is_some_and(|v| v > 0.0),
        "{j}"
    );
    assert!(out
        .join("4k-nosync/tablinum_journal_writeback_bytes_0-r1/summary.json")
        .exists());
}

#[test]
fn tiny_volume_scenario_writes_tables_json_readme_and_run_directories() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("volume");
    let out_s = out.to_string_lossy().into_owned();
    let o = bench(&[
        "scenario",
        "volume",
        "--targets",
        "tablinum,memory",
        "--no-memory-limit",
        "--duration-s",
        "0.5",
        "--variants",
        "8k-sync,4k-nosync",
        "--repeat",
        "2",
        "--keys",
        "100000",
        "--out",
        &out_s,
    ]);
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");

    // The printed report: a table per variant, deltas, the summary table.
    for needle in [
        "### 8k-sync — 8KB value, 16 workers, sync",
        "### 4k-nosync — 4KB value, 16 workers, no_sync",
        "| tablinum | 2 |",
        "| memory | 2 |",
        "- tablinum vs memory: ",
        "| Test Description | vs | Avg TPS (tablinum) |",
        "NO MEMORY LIMIT",
    ] {
        assert!(stdout.contains(needle), "{needle:?} not in:\n{stdout}");
    }
    // A progress line per child run, naming variant, target and repeat.
    for label in ["[1/8] 8k-sync tablinum r1", "[8/8] 4k-nosync tablinum r2"] {
        assert!(stderr.contains(label), "{label:?} not in:\n{stderr}");
    }
    assert!(stderr.contains("WARNING: NO MEMORY LIMIT"), "{stderr}");

    let j = json(&out.join("scenario.json"));
    assert_eq!(j["scenario"], "volume");
    assert_eq!(j["complete"], true);
    assert_eq!(j["runs_total"], 8);
    assert_eq!(j["runs_failed"], 0);
    assert!(j["memory_limit_bytes"].is_null());
    assert!(j["memory_limit_warning"].is_string());
    assert!(j["command_line"]
        .as_str()
        .is_some_and(|c| c.contains("scenario volume --targets tablinum,memory")));
    assert!(j["machine"]["cores"].as_u64().is_some_and(|c| c >= 1));
    assert!(j["machine"].get("cpu_model").is_some());
    assert!(j.get("git_commit").is_some());
    assert_eq!(j["targets"], serde_json::json!(["tablinum", "memory"]));
    let variants = j["variants"]
        .as_array()
        .unwrap_or_else(|| panic!("variants"));
    assert_eq!(variants.len(), 2);
    for v in variants {
        let name = v["name"].as_str().unwrap_or_else(|| panic!("name"));
        for t in ["tablinum", "memory"] {
            let tr = &v["targets"][t];
            for metric in [
                "ops_per_sec",
                "last_window_ops_per_sec",
                "get_p99_us",
                "update_p99_us",
            ] {
                assert!(tr[metric]["mean"].is_number(), "{name}/{t}/{metric}");
                assert!(tr[metric]["sd"].is_number(), "{name}/{t}/{metric}");
                assert_eq!(
                    tr[metric]["values"].as_array().map(Vec::len),
                    Some(2),
                    "{name}/{t}/{metric}"
                );
            }
            assert!(tr["ops_per_sec"]["mean"].as_f64().is_some_and(|x| x > 0.0));
            for r in 1..=2 {
                let dir = out.join(name).join(format!("{t}-r{r}"));
                for f in [
                    "summary.csv",
                    "get_latencies.csv",
                    "update_latencies.csv",
                    "summary.json",
                    "summary.png",
                    "workload.toml",
                    "run.log",
                ] {
                    assert!(dir.join(f).is_file(), "{}/{f} missing", dir.display());
                }
                // The child's data directory is removed after its run.
                assert!(!dir.join("data").exists(), "{}", dir.display());
                let s = json(&dir.join("summary.json"));
                assert_eq!(s["target"], t);
                assert_eq!(s["workload"]["key_generator"], "pareto");
                assert_eq!(s["workload"]["value_generator"], "fixed");
                assert_eq!(s["workload"]["preload_keys"], 0);
                assert_eq!(s["workload"]["operations"]["get"], 5);
                assert_eq!(s["workload"]["operations"]["update"], 1);
                // Repeat r runs with seed + r - 1, the same for every target.
                assert_eq!(s["seed"], 20_161_121 + r - 1);
            }
        }
        assert_eq!(v["deltas"][0]["subject"], "tablinum");
        assert_eq!(v["deltas"][0]["peer"], "memory");
        assert!(v["deltas"][0]["overall_three_sigma_pct"].is_number());
    }
    assert_eq!(variants[0]["sync"], true);
    assert_eq!(variants[1]["value_size_bytes"], 4096);
    // Interleaved: tablinum, memory, then memory, tablinum (rotated), per variant.
    let seq =
        |v: usize, t: &str, r: usize| variants[v]["targets"][t]["runs"][r]["sequence"].clone();
    assert_eq!(
        [
            seq(0, "tablinum", 0),
            seq(0, "memory", 0),
            seq(0, "memory", 1),
            seq(0, "tablinum", 1)
        ],
        [1, 2, 3, 4].map(serde_json::Value::from)
    );

    let readme = std::fs::read_to_string(out.join("README.md")).unwrap_or_else(|e| panic!("{e}"));
    assert!(readme.contains("> **WARNING** NO MEMORY LIMIT"), "{readme}");
    assert!(
        readme.contains("scenario volume --targets tablinum,memory"),
        "{readme}"
    );
    assert!(
        readme.contains("## Summary") && readme.contains("### 4k-nosync"),
        "{readme}"
    );

    // The same --out again is refused: results are never mixed.
    let again = bench(&[
        "scenario",
        "volume",
        "--targets",
        "memory",
        "--no-memory-limit",
        "--duration-s",
        "0.2",
        "--out",
        &out_s,
    ]);
    assert!(!again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(err.contains("already holds a scenario"), "{err}");
}

#[test]
fn bad_scenario_arguments_fail_before_any_run() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("never");
    let out_s = out.to_string_lossy().into_owned();
    let cases: &[(&[&str], &str)] = &[
        (&["--targets", "leveldb"], "unknown target `leveldb`"),
        (&["--variants", "2k-sync"], "unknown variant `2k-sync`"),
        (&["--repeat", "0"], "--repeat"),
        (&["--duration-s", "0"], "duration_s"),
    ];
    for (extra, needle) in cases {
        let mut args = vec!["scenario", "volume", "--no-memory-limit", "--out", &out_s];
        args.extend_from_slice(extra);
        let o = bench(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{extra:?} accepted");
        assert!(err.contains(needle), "{needle:?} not in {err}");
        assert!(!out.exists(), "{extra:?} created {}", out.display());
    }
}
