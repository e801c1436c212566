//! End-to-end tests of the harness: real runs (seconds long) against the
//! `memory` and `tablinum` targets, checking every output file.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use tablinum_bench::cli::{execute, BenchCommand};
use tablinum_bench::output::{
    LATENCIES_CSV_HEADER, STORE_COUNTERS_CSV, STORE_COUNTERS_CSV_HEADER, SUMMARY_CSV_HEADER,
};
use tablinum_bench::target::{Target, TargetConfig, TargetError};
use tablinum_bench::targets::{open_target, MemoryTarget};
use tablinum_bench::{compare, run, run_with_options, RunOptions, RunRef, Workload};

fn workload(text: &str) -> Workload {
    Workload::from_toml_str(text, Path::new("test.toml")).unwrap_or_else(|e| panic!("{e}"))
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::to_string)
        .collect()
}

fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{e}"));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
}

/// Decodes a PNG fully; returns its size.
fn png_size(path: &Path) -> (u32, u32) {
    let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let decoder = png::Decoder::new(file);
    let mut reader = decoder.read_info().unwrap_or_else(|e| panic!("{e}"));
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader
        .next_frame(&mut buf)
        .unwrap_or_else(|e| panic!("{e}"));
    // Not blank: a chart has more than one colour.
    let first = &buf[..3];
    assert!(
        buf.chunks(info.line_size / info.width as usize)
            .any(|px| &px[..3] != first),
        "blank image"
    );
    (info.width, info.height)
}

#[test]
fn memory_run_writes_basho_bench_files_summary_json_and_png() {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload(
        r#"
        duration_s = 2
        concurrent = 2
        report_interval_s = 0.5
        seed = 7
        preload_keys = 500
        keys = 1000
        key_generator = "pareto"
        value_size_bytes = 100
        scan_limit_rows = 10
        [operations]
        get = 4
        head = 1
        put = 2
        update = 1
        delete = 1
        scan = 1
        "#,
    );
    let target = MemoryTarget::new();
    let s = run(&w, &target, out.path(), false).unwrap_or_else(|e| panic!("{e}"));
    let dir = out.path();

    // summary.csv: header + one row per interval (2 s / 0.5 s).
    let summary = lines(&dir.join("summary.csv"));
    assert_eq!(summary[0], SUMMARY_CSV_HEADER);
    assert_eq!(summary.len(), 1 + 4, "{summary:?}");
    let mut csv_total = 0;
    for row in &summary[1..] {
        let f: Vec<&str> = row.split(", ").collect();
        assert_eq!(f.len(), 5, "{row}");
        assert!(f[0].contains('.') && f[1].contains('.'), "{row}");
        let total: u64 = f[2].parse().unwrap_or_else(|e| panic!("{row}: {e}"));
        let ok: u64 = f[3].parse().unwrap_or_else(|e| panic!("{row}: {e}"));
        assert_eq!(f[4], "0");
        assert_eq!(total, ok);
        assert!(ok > 0, "{row}");
        csv_total += total;
    }
    let last: f64 = summary[4]
        .split(", ")
        .next()
        .and_then(|e| e.parse().ok())
        .unwrap_or(0.0);
    assert!((1.95..2.5).contains(&last), "last elapsed {last}");

    for op in ["get", "head", "put", "update", "delete", "scan"] {
        let l = lines(&dir.join(format!("{op}_latencies.csv")));
        assert_eq!(l[0], LATENCIES_CSV_HEADER);
        assert_eq!(l.len(), 1 + 4, "{op}: {l:?}");
        for row in &l[1..] {
            assert_eq!(row.split(", ").count(), 11, "{row}");
        }
    }
    assert_eq!(
        lines(&dir.join("errors.csv")),
        vec!["\"error\",\"count\"".to_string()]
    );

    // summary.json
    let j = json(&dir.join("summary.json"));
    assert_eq!(j["target"], "memory");
    // The memory target keeps no counters of its own: no file, no field.
    assert!(j.get("store_counters").is_none(), "{j}");
    assert!(!dir.join(STORE_COUNTERS_CSV).exists());
    assert_eq!(j["seed"], 7);
    assert_eq!(j["workload"]["seed"], 7);
    assert_eq!(j["workload"]["concurrent"], 2);
    assert_eq!(j["intervals"], 4);
    assert_eq!(j["total"].as_u64(), Some(csv_total));
    assert!(j["started_at"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert!(j["elapsed_s"]
        .as_f64()
        .is_some_and(|e| (1.95..2.5).contains(&e)));
    assert!(j["ops_per_sec"].as_f64().is_some_and(|r| r > 0.0));
    assert!(j["last_window_ops_per_sec"]
        .as_f64()
        .is_some_and(|r| r > 0.0));
    assert_eq!(j["preload"]["keys"], 500);
    assert!(
        j.get("disk_bytes").is_none(),
        "memory reports no disk bytes"
    );
    let get = &j["ops"]["get"];
    for field in ["total", "successful", "failed", "not_found", "ops_per_sec"] {
        assert!(get[field].is_number(), "ops.get.{field}: {get}");
    }
    for p in ["min", "mean", "p50", "p95", "p99", "p99_9", "max"] {
        assert!(get["latency_us"][p].is_number(), "latency_us.{p}");
    }
    assert!(get["latency_us"]["p99"].as_u64() >= get["latency_us"]["p50"].as_u64());
    // Pareto keys beyond the 1000-key space, and deleted keys, are not found.
    assert!(get["not_found"].as_u64().is_some_and(|n| n > 0), "{get}");
    // ... and their latency is kept apart from the found reads'.
    for p in ["found_latency_us", "not_found_latency_us"] {
        assert!(get[p]["p99"].is_number(), "ops.get.{p}: {get}");
        assert!(
            j["ops"]["put"].get(p).is_none(),
            "puts are never not-found: {p}"
        );
    }
    assert_eq!(get["failed"], 0);
    assert_eq!(
        s.ops["get"].not_found,
        get["not_found"].as_u64().unwrap_or(0)
    );
    assert!(s.chart_error.is_none(), "{:?}", s.chart_error);

    // summary.png: a real PNG with throughput + 6 op rows.
    let (w_px, h_px) = png_size(&dir.join("summary.png"));
    assert_eq!(w_px, 1400);
    assert_eq!(h_px, 36 + 320 + 6 * 240);
    // The workload echo is itself a valid workload.
    Workload::load(&dir.join("workload.toml")).unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn rate_mode_reaches_the_target_rate_and_records_service_time() {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload(
        r#"
        duration_s = 2
        concurrent = 4
        mode = "rate"
        rate_ops_per_s = 500
        report_interval_s = 1
        seed = 1
        keys = 1000
        value_size_bytes = 64
        [operations]
        get = 1
        put = 1
        "#,
    );
    let target = MemoryTarget::new();
    let s = run(&w, &target, out.path(), false).unwrap_or_else(|e| panic!("{e}"));
    // 2 s at 500 ops/s: 1000 ops were scheduled, all before the deadline.
    assert!((950..=1000).contains(&s.total), "total {}", s.total);
    assert!(
        (450.0..560.0).contains(&s.ops_per_sec),
        "ops/s {}",
        s.ops_per_sec
    );
    let get = &s.ops["get"];
    let service = get
        .service_time_us
        .unwrap_or_else(|| panic!("no service time"));
    assert!(get.latency_us.p50 >= service.p50, "response >= service");
    let j = json(&out.path().join("summary.json"));
    assert!(j["ops"]["put"]["service_time_us"]["p99"].is_number());
}

/// A target that stalls every op for a while once: rate mode must charge the
/// ops queued behind the stall (no coordinated omission).
struct StallingTarget {
    ops: AtomicU64,
}

impl Target for StallingTarget {
    fn name(&self) -> &'static str {
        "stalling"
    }
    fn get(&self, _key: &[u8]) -> Result<Option<Vec<u8>>, TargetError> {
        if self.ops.fetch_add(1, Ordering::Relaxed) == 50 {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        Ok(None)
    }
    fn head(&self, _key: &[u8]) -> Result<Option<u64>, TargetError> {
        Ok(None)
    }
    fn put(&self, _key: &[u8], _value: &[u8]) -> Result<(), TargetError> {
        Err(TargetError("disk on fire".into()))
    }
    fn delete(&self, _key: &[u8]) -> Result<(), TargetError> {
        Ok(())
    }
    fn scan(&self, _start: &[u8], _limit: usize) -> Result<usize, TargetError> {
        Ok(0)
    }
    fn close(&self) -> Result<(), TargetError> {
        Ok(())
    }
}

#[test]
fn stalls_are_charged_to_queued_ops_and_errors_are_counted() {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload(
        r#"
        duration_s = 1
        concurrent = 1
        mode = "rate"
        rate_ops_per_s = 200
        report_interval_s = 0.5
        seed = 3
        [operations]
        get = 1
        "#,
    );
    let target = StallingTarget {
        ops: AtomicU64::new(0),
    };
    let s = run(&w, &target, out.path(), false).unwrap_or_else(|e| panic!("{e}"));
    let get = &s.ops["get"];
    let service = get
        .service_time_us
        .unwrap_or_else(|| panic!("no service time"));
    // One op took 300 ms; the ~60 ops scheduled during it waited too.
    assert!(service.p95 < 50_000, "service p95 {}", service.p95);
    assert!(
        get.latency_us.p95 > 100_000,
        "response p95 {}",
        get.latency_us.p95
    );
    assert_eq!(get.not_found, get.successful);

    let out2 = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload("op_count = 100\nreport_interval_s = 0.5\n[operations]\nput = 1\n");
    let s = run(&w, &target, out2.path(), false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((s.total, s.failed, s.successful), (100, 100, 0));
    let errors = lines(&out2.path().join("errors.csv"));
    assert_eq!(errors[1], "\"put: disk on fire\",\"100\"");
    let put = lines(&out2.path().join("put_latencies.csv"));
    assert!(
        put[1].ends_with(", 0, 0, 0, 0, 0, 0, 0, 0, 100"),
        "{}",
        put[1]
    );
}

#[test]
fn op_count_stops_the_run_exactly() {
    let out = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload(
        "op_count = 2000\nduration_s = 60\nconcurrent = 3\nreport_interval_s = 10\n[operations]\nput = 1\nget = 1\n",
    );
    let target = MemoryTarget::new();
    let opts = RunOptions {
        progress: false,
        chart: false,
    };
    let s = run_with_options(&w, &target, out.path(), &opts).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(s.total, 2000);
    assert_eq!(s.intervals, 1);
    assert!(s.elapsed_s < 10.0);
    assert!(!out.path().join("summary.png").exists());
}

#[test]
fn compare_groups_repeated_runs_and_writes_table_and_overlay() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let base = "duration_s = 0.6\nreport_interval_s = 0.2\nkeys = 100\nvalue_size_bytes = 10\n";
    let fast = workload(&format!("{base}[operations]\nget = 1\n"));
    let mut dirs = Vec::new();
    for (i, label) in ["a", "b", "a", "b"].iter().enumerate() {
        let dir = root.path().join(format!("run{i}"));
        let target = MemoryTarget::new();
        let opts = RunOptions {
            progress: false,
            chart: false,
        };
        run_with_options(&fast, &target, &dir, &opts).unwrap_or_else(|e| panic!("{e}"));
        dirs.push(format!("{label}={}", dir.display()));
    }
    let out = root.path().join("cmp");
    let paths: Vec<_> = dirs.iter().map(std::path::PathBuf::from).collect();
    let report = compare(&paths, Some(&out)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.groups.len(), 2);
    assert_eq!(report.groups[0].label, "a");
    assert_eq!(report.groups[0].dirs.len(), 2);
    let get_b = report
        .rows
        .iter()
        .find(|r| r.op == "get" && r.group == "b")
        .unwrap_or_else(|| panic!("no get/b row: {:?}", report.rows));
    assert_eq!(get_b.ops_per_sec.n, 2);
    assert!(get_b.throughput.ratio > 0.0);
    assert!(get_b.throughput.three_sigma_pct.is_some());
    assert!(get_b.p99.is_some());
    assert!(
        report.markdown.contains("| op | group | runs | ops/s |"),
        "{}",
        report.markdown
    );
    assert!(
        report.markdown.contains("| get | b | 2 |"),
        "{}",
        report.markdown
    );
    assert!(
        report.markdown.contains("| all (last 10%) |"),
        "{}",
        report.markdown
    );
    assert!(out.join("compare.md").exists() && out.join("compare.json").exists());
    png_size(&out.join("compare.png"));

    // Without labels and one target, every run is its own group.
    let plain: Vec<RunRef> = (0..2)
        .map(|i| RunRef::parse(&root.path().join(format!("run{i}")).to_string_lossy()))
        .collect();
    let report = tablinum_bench::compare_runs(&plain, None).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.groups.len(), 2);
    assert!(report.markdown.contains("n/a"), "{}", report.markdown);
    // A directory without summary.json is a clear error.
    let e = tablinum_bench::compare_runs(
        &[
            RunRef::parse(&root.path().to_string_lossy()),
            plain[0].clone(),
        ],
        None,
    );
    assert!(e.is_err_and(|e| e.to_string().contains("summary.json")));
}

#[test]
fn tablinum_target_runs_through_the_cli_and_cleans_up() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let wl = root.path().join("w.toml");
    std::fs::write(
        &wl,
        "duration_s = 30\nconcurrent = 2\nreport_interval_s = 0.5\nseed = 5\npreload_keys = 200\nkeys = 400\nvalue_size_bytes = 4096\nscan_limit_rows = 20\n[operations]\nget = 2\nhead = 1\nput = 2\nupdate = 1\ndelete = 1\nscan = 1\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let out = root.path().join("out");
    execute(BenchCommand::Run {
        workload: wl.clone(),
        target: "tablinum".into(),
        out: out.clone(),
        dir: None,
        sync: false,
        nosync: false,
        cache_bytes: 8 << 20,
        keep_data: false,
        quiet: true,
        // The file says 30 s; the flag wins, and is recorded.
        duration_s: Some(1.0),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let j = json(&out.join("summary.json"));
    assert_eq!(j["workload"]["duration_s"], 1.0, "{j}");
    assert!(j["elapsed_s"].as_f64().is_some_and(|s| s < 10.0), "{j}");
    assert_eq!(j["target"], "tablinum");
    assert_eq!(j["failed"], 0, "{j}");
    assert!(j["total"].as_u64().is_some_and(|t| t > 0));
    assert!(j["disk_bytes"].as_u64().is_some_and(|b| b > 0), "{j}");
    assert!(j["ops"]["get"]["successful"].as_u64() > j["ops"]["get"]["not_found"].as_u64());
    // The engine's own counters: found GETs of 4 KB values read the journal.
    let c = &j["store_counters"];
    assert!(c["value_reads"].as_u64().is_some_and(|n| n > 0), "{j}");
    assert!(
        c["value_read_bytes"].as_u64() >= c["value_reads"].as_u64().map(|n| n * 4096),
        "{j}"
    );
    assert!(c["memtable_bytes"].as_u64().is_some_and(|b| b > 0), "{j}");
    let rows = lines(&out.join(STORE_COUNTERS_CSV));
    assert_eq!(rows[0], STORE_COUNTERS_CSV_HEADER);
    assert!(
        rows.iter().any(|l| l.contains(", value_reads, total, ")),
        "{rows:?}"
    );
    assert!(!out.join("data").exists(), "data dir removed");

    // --keep-data keeps it; an unknown target names the known ones.
    execute(BenchCommand::Run {
        workload: wl.clone(),
        target: "tablinum".into(),
        out: out.clone(),
        dir: None,
        sync: true,
        nosync: false,
        cache_bytes: 8 << 20,
        keep_data: true,
        quiet: true,
        duration_s: Some(1.0),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    assert!(out.join("data").is_dir());
    // A bad --duration-s is refused before anything runs, naming it.
    let e = execute(BenchCommand::Run {
        workload: wl.clone(),
        target: "tablinum".into(),
        out: root.path().join("never"),
        dir: None,
        sync: false,
        nosync: false,
        cache_bytes: 8 << 20,
        keep_data: false,
        quiet: true,
        duration_s: Some(-1.0),
    })
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        e.contains("--duration-s") && e.contains("duration_s"),
        "{e}"
    );
    assert!(!root.path().join("never").exists());
    let cfg = TargetConfig {
        dir: root.path().join("x"),
        sync: false,
        cache_bytes: 1 << 20,
    };
    let e = open_target("leveldb", &cfg)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("leveldb") && e.contains("tablinum") && e.contains("memory"),
        "{e}"
    );
}

/// A reclaim window on the real engine with small journal segments: journal
/// compaction runs inside the window only, reclaims overwritten values, and
/// the run's phases before and in the window are reported; a target without
/// a reclaim step still gets its phases, marked unsupported.
#[test]
fn reclaim_window_runs_journal_compaction_and_splits_the_run() {
    let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let w = workload(
        r#"
        duration_s = 3
        concurrent = 2
        report_interval_s = 0.25
        seed = 11
        preload_keys = 64
        keys = 64
        value_size_bytes = 4096
        reclaim_window_s = [1.5, 3.0]
        [operations]
        get = 1
        update = 2
        "#,
    );
    let cfg = TargetConfig {
        dir: root.path().join("data"),
        sync: false,
        cache_bytes: 1 << 20,
    };
    let t = open_target("tablinum:journal_segment_bytes_max=65536", &cfg)
        .unwrap_or_else(|e| panic!("{e}"));
    let s = run(&w, t.as_ref(), &root.path().join("out"), false).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        s.failed,
        0,
        "{}",
        std::fs::read_to_string(root.path().join("out").join("errors.csv")).unwrap_or_default()
    );
    let r = s
        .reclaim
        .as_ref()
        .unwrap_or_else(|| panic!("no reclaim summary"));
    assert!(r.supported);
    assert!(!r.runs.is_empty());
    assert!(
        r.runs.iter().all(|c| c.start_s >= 1.5 && c.error.is_none()),
        "{:?}",
        r.runs
    );
    assert!(r.bytes_reclaimed > 0, "{r:?}");
    assert!(r.busy_s > 0.0 && r.busy_s <= 1.5 + 1e-9, "{r:?}");
    let (before, during) = (r.before.as_ref().unwrap(), r.during.as_ref().unwrap());
    assert!(
        before.from_s >= 0.75 - 0.13 && before.to_s <= 1.5 + 0.13,
        "{before:?}"
    );
    assert!(during.from_s >= 1.5 - 0.13, "{during:?}");
    assert!(before.ops_per_sec > 0.0 && during.ops_per_sec > 0.0);
    assert!(during.ops["update"].successful > 0);
    // Every object is still there, whole, after the journal was compacted.
    for k in 0..64u64 {
        let v = t.get(&k.to_be_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v.map(|v| v.len()), Some(4096), "key {k}");
    }
    t.close().unwrap_or_else(|e| panic!("{e}"));
    let saved = json(&root.path().join("out").join("summary.json"));
    assert_eq!(saved["reclaim"]["window_s"][0], 1.5, "{saved}");

    let m = MemoryTarget::new();
    let s = run(&w, &m, &root.path().join("out-m"), false).unwrap_or_else(|e| panic!("{e}"));
    let r = s.reclaim.unwrap_or_else(|| panic!("no reclaim summary"));
    assert!(!r.supported && r.runs.is_empty() && r.bytes_reclaimed == 0);
    assert!(r.before.is_some() && r.during.is_some());
}

#[test]
fn cli_parses_run_and_compare() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        cmd: BenchCommand,
    }
    let cli = Cli::try_parse_from([
        "bench",
        "run",
        "w.toml",
        "--target",
        "memory",
        "--out",
        "o",
        "--sync",
        "--cache-bytes",
        "1024",
    ])
    .unwrap_or_else(|e| panic!("{e}"));
    match cli.cmd {
        BenchCommand::Run {
            sync,
            cache_bytes,
            dir,
            keep_data,
            ..
        } => assert_eq!(
            (sync, cache_bytes, dir, keep_data),
            (true, 1024, None, false)
        ),
        other => panic!("{other:?}"),
    }
    let cli = Cli::try_parse_from(["bench", "run", "w.toml", "--target", "memory", "--out", "o"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(
        cli.cmd,
        BenchCommand::Run {
            sync: false,
            cache_bytes: 67108864,
            ..
        }
    ));
    assert!(Cli::try_parse_from([
        "bench", "run", "w", "--target", "m", "--out", "o", "--sync", "--nosync"
    ])
    .is_err());
    let cli = Cli::try_parse_from(["bench", "compare", "a=x", "b=y", "--out", "c"])
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(matches!(cli.cmd, BenchCommand::Compare { ref dirs, .. } if dirs.len() == 2));
    assert!(Cli::try_parse_from(["bench", "compare", "a"]).is_err());
}

#[test]
fn example_workloads_are_valid() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../bench/workloads");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
        if path.extension().is_some_and(|e| e == "toml") {
            Workload::load(&path).unwrap_or_else(|e| panic!("{e}"));
            n += 1;
        }
    }
    assert!(n >= 4, "found {n} workloads in {}", dir.display());
}

/// `tablinum:KEY=VALUE` opens the engine with an override; bad overrides
/// are refused with the key named.
#[test]
fn tablinum_target_overrides_are_parsed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = tablinum_bench::target::TargetConfig {
        dir: dir.path().join("a"),
        sync: false,
        cache_bytes: 1 << 20,
    };
    let t = tablinum_bench::targets::open_target(
        "tablinum:inline_value_bytes_max=0,value_compression=false",
        &cfg,
    )
    .unwrap();
    t.put(b"k", b"v").unwrap();
    assert_eq!(t.get(b"k").unwrap().unwrap(), b"v");
    t.close().unwrap();
    for (bad, named) in [
        ("tablinum:nonsense=1", "nonsense"),
        (
            "tablinum:inline_value_bytes_max=x",
            "inline_value_bytes_max",
        ),
        ("tablinum:novalue", "novalue"),
    ] {
        let cfg = tablinum_bench::target::TargetConfig {
            dir: dir.path().join("b"),
            sync: false,
            cache_bytes: 1 << 20,
        };
        let e = tablinum_bench::targets::open_target(bad, &cfg)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(named), "{bad}: {e}");
    }
}
