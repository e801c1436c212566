//! `tablinum bench scenario volume` through the real binary: the children are
//! re-executed as `tablinum bench run ...` (the `bench` prefix is taken from
//! the parent's own command line).

use std::process::Command;

#[test]
fn scenario_volume_runs_children_through_the_tablinum_binary() {
    let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let out = tmp.path().join("volume");
    let o = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .args([
            "bench",
            "scenario",
            "volume",
            "--targets",
            "tablinum,memory",
            "--variants",
            "8k-nosync",
            "--no-memory-limit",
            "--duration-s",
            "0.3",
            "--keys",
            "10000",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap_or_else(|e| panic!("{e}"));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("- tablinum vs memory: "), "{stdout}");
    for t in ["tablinum", "memory"] {
        let dir = out.join("8k-nosync").join(format!("{t}-r1"));
        for f in ["summary.json", "summary.csv", "summary.png", "run.log"] {
            assert!(dir.join(f).is_file(), "{}/{f} missing", dir.display());
        }
    }
    let text = std::fs::read_to_string(out.join("scenario.json")).unwrap_or_else(|e| panic!("{e}"));
    for needle in [
        "\"complete\": true",
        "\"runs_failed\": 0",
        "tablinum bench scenario volume --targets tablinum,memory",
    ] {
        assert!(
            text.contains(needle),
            "{needle:?} not in scenario.json:\n{text}"
        );
    }
}
