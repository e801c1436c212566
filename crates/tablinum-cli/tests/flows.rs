//! Topics and dataflows through the real binary: `tablinum up` as the
//! cluster, `tablinum topic` and `tablinum flow` as a user types them. The
//! splitter routes generated log records by level into a topic, a table and
//! JSON-lines files (disjoint, so validation counts each record once),
//! unreadable records into the dead-letter topic; the flow process is
//! SIGKILLed at random moments over many rounds, the cluster itself once,
//! and validation must still find every record exactly once.

use std::time::{Duration, Instant};

mod common;

use common::{spawn_up, Cli, Out};

#[test]
fn topics_from_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let (_procs, cli) = Cli::up(dir.path());
    assert!(cli
        .ok(&["topic", "create", "t", "--partitions", "2"])
        .contains("created topic t with 2 partitions"));
    let r = cli.run(
        &["topic", "produce", "t", "--partition", "1", "--batch", "2"],
        b"a\nb\nc\n",
    );
    assert_eq!(r.code, 0, "{}", r.err);
    assert_eq!(
        cli.ok(&["topic", "consume", "t", "--partition", "1"]),
        "a\nb\nc\n"
    );
    let j = cli.ok(&[
        "topic",
        "consume",
        "t",
        "--partition",
        "1",
        "--from",
        "2",
        "-o",
        "json",
    ]);
    assert_eq!(j.trim(), r#"{"offset":2,"partition":1,"value":"c"}"#);
    // A group resumes where it stopped.
    let args = ["topic", "consume", "t", "--group", "g", "--max", "2"];
    assert_eq!(cli.ok(&args), "a\nb\n");
    cli.run(&["topic", "produce", "t", "--partition", "1"], b"d\n");
    assert_eq!(cli.ok(&args), "c\nd\n");
    assert_eq!(cli.ok(&args), "");
    assert!(cli.ok(&["topic", "list"]).starts_with("t\t2\tsync"));
    assert_eq!(
        cli.ok(&["topic", "describe", "t"]),
        "0\t0\t0\t0\n1\t0\t4\t0\n"
    );
    // Mistakes are named.
    let r = cli.run(&["topic", "consume", "t", "--partition", "5"], b"");
    assert!(r.code == 2 && r.err.contains("no partition 5"), "{}", r.err);
    let r = cli.run(&["topic", "consume", "nope"], b"");
    assert!(r.code != 0 && r.err.contains("topic.nope"), "{}", r.err);
    let r = cli.run(&["topic", "drop", "t"], b"");
    assert!(r.code == 2 && r.err.contains("--yes"), "{}", r.err);
    cli.ok(&["topic", "drop", "t", "--yes"]);
    assert_eq!(cli.ok(&["topic", "list"]), "");
}

#[test]
fn a_materialized_key_repartitions_through_a_topic() {
    let dir = tempfile::tempdir().unwrap();
    let (_procs, cli) = Cli::up(dir.path());
    let flow = dir.path().join("mat.toml");
    std::fs::write(
        &flow,
        r#"
[flow]
name = "mat"
parallelism = 2
commit_interval_ms = 200

[[source]]
name = "logs"
kind = "topic"
topic = "mlogs"

[[operator]]
name = "by-host"
kind = "key"
input = "logs"
field = "host"
materialize = true

[[operator]]
name = "no-debug"
kind = "filter"
input = "by-host"
field = "level"
op = "ne"
value = "DEBUG"

[[sink]]
name = "out"
input = "no-debug"
kind = "topic"
topic = "mout"
"#,
    )
    .unwrap();
    let flow = flow.to_str().unwrap();
    cli.ok(&["topic", "create", "mlogs", "--partitions", "2"]);
    // Paced: 2 × 1,000 records at 2,000 records/s take about a second.
    let t0 = Instant::now();
    cli.ok(&[
        "topic",
        "produce",
        "mlogs",
        "--generate",
        "1000",
        "--rate",
        "2000",
    ]);
    assert!(
        t0.elapsed() >= Duration::from_millis(800),
        "{:?}",
        t0.elapsed()
    );
    let r = run_to_idle(&cli, flow, "1500");
    assert_eq!(r.code, 0, "{}{}", r.out, r.err);
    assert!(
        r.out.contains("by-host (materialized): 2000 records"),
        "{}",
        r.out
    );
    let v = validate(&cli, flow);
    assert!(
        v.contains("expected 2000, received 2000, lost 0, duplicated 0"),
        "{v}"
    );
    // The stage after the topic keeps its partitions: each host in one.
    let hosts = |p: &str| -> std::collections::BTreeSet<String> {
        cli.ok(&["topic", "consume", "mout", "--partition", p])
            .lines()
            // (a record's binary stamp may hold a newline: skip the pieces)
            .filter_map(|l| {
                Some(
                    l.split("\"host\":\"")
                        .nth(1)?
                        .split('"')
                        .next()?
                        .to_string(),
                )
            })
            .collect()
    };
    let (a, b) = (hosts("0"), hosts("1"));
    assert!(
        !a.is_empty() && !b.is_empty() && a.is_disjoint(&b),
        "{a:?} {b:?}"
    );
    assert!(cli.ok(&["topic", "list"]).contains("mat.by-host\t2"));
    // End-to-end latency from the append marks of the source and the sink.
    let l = cli.ok(&["flow", "validate", flow, "--root", "files", "--latency"]);
    let line = l
        .lines()
        .find(|x| x.contains("latency, source append to sink commit"))
        .unwrap();
    assert!(line.contains("over 2000 records"), "{line}");
    let p99: u64 = line
        .split("p99 ")
        .nth(1)
        .unwrap()
        .split(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    assert!(p99 < 60_000, "{line}");
}

#[test]
fn retention_removes_whole_appends_from_the_front() {
    let dir = tempfile::tempdir().unwrap();
    let (_procs, cli) = Cli::up(dir.path());
    cli.ok(&["topic", "create", "r", "--retention-bytes", "1000"]);
    // Five appends of five 100-byte records (one append per produce; the
    // newline is not part of a record).
    for i in 0..5 {
        let lines: String = (0..5).map(|j| format!("{:0>100}\n", i * 5 + j)).collect();
        let r = cli.run(&["topic", "produce", "r"], lines.as_bytes());
        assert_eq!(r.code, 0, "{}", r.err);
    }
    // The oldest appends go while the rest still hold 1000 bytes: 3 of 5.
    let t0 = Instant::now();
    loop {
        let d = cli.ok(&["topic", "describe", "r"]);
        if d.starts_with("0\t15\t25") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "retention did not run: {d}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let rest = cli.ok(&["topic", "consume", "r"]);
    assert_eq!(rest.lines().count(), 10, "{rest}");
    assert!(rest.starts_with(&format!("{:0>100}", 15)), "{rest}");
    assert!(cli
        .ok(&["topic", "retention", "r"])
        .contains("keeps appends for unlimited, up to 1000 bytes"));
    // Only an admin may change it.
    let err = cli.denied_as("write", &["topic", "retention", "r", "--ms", "1"]);
    assert!(err.contains("needs an admin token"), "{err}");
    // By age: everything is older than 1 ms; offsets are never reused.
    cli.ok(&["topic", "retention", "r", "--ms", "1"]);
    let t0 = Instant::now();
    while !cli.ok(&["topic", "describe", "r"]).starts_with("0\t25\t25") {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "age retention did not run"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cli.ok(&["topic", "consume", "r"]), "");
    cli.run(&["topic", "produce", "r"], b"late\n");
    assert!(cli
        .ok(&["topic", "consume", "r", "-o", "json"])
        .contains(r#""offset":25"#));
}

const SPLITTER: &str = r#"
[flow]
name = "split3"
parallelism = 3
commit_interval_ms = 200

[[source]]
name = "logs"
kind = "topic"
topic = "logs"

[[operator]]
name = "by-level"
kind = "split"
input = "logs"
field = "level"
routes = { INFO = "info", WARNING = "warnings", ERROR = "only-errors" }

[[sink]]
name = "info"
input = "by-level"
kind = "topic"
topic = "logs.info"

[[operator]]
name = "warnings"
kind = "filter"
input = "by-level"
field = "level"
op = "eq"
value = "WARNING"

[[sink]]
name = "warning-files"
input = "warnings"
kind = "files"
dir = "warnings"
format = "jsonl"

[[operator]]
name = "only-errors"
kind = "project"
input = "by-level"
fields = ["level", "w", "s", "host"]

[[sink]]
name = "errors"
input = "only-errors"
kind = "table"
table = "errors"
key = "position"
metadata = ["host", "level"]
index = { by_host = "host" }
"#;

fn validate(cli: &Cli, flow: &str) -> String {
    let r = cli.run(&["flow", "validate", flow, "--root", "files"], b"");
    assert!(r.code == 0 || r.code == 1, "{}{}", r.out, r.err);
    r.out
}

fn run_to_idle(cli: &Cli, flow: &str, idle_ms: &str) -> Out {
    cli.run(
        &[
            "flow",
            "run",
            flow,
            "--root",
            "files",
            "--until-idle-ms",
            idle_ms,
        ],
        b"",
    )
}

#[test]
fn the_splitter_delivers_every_record_once_across_kills() {
    let dir = tempfile::tempdir().unwrap();
    let (mut procs, mut cli) = Cli::up(dir.path());
    let flow = dir.path().join("split3.toml");
    std::fs::write(&flow, SPLITTER).unwrap();
    let flow = flow.to_str().unwrap().to_string();
    // A definition error names its line; checking needs no cluster.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, SPLITTER.replace("op = \"eq\"", "op = \"like\"")).unwrap();
    let r = cli.run(&["flow", "check", bad.to_str().unwrap()], b"");
    assert!(r.code == 2 && r.err.contains("line 30"), "{}", r.err);
    // The source must exist.
    let r = cli.run(&["flow", "run", &flow, "--until-idle-ms", "100"], b"");
    assert!(
        r.code != 0 && r.err.contains("source topic logs does not exist"),
        "{}",
        r.err
    );
    cli.ok(&["topic", "create", "logs", "--partitions", "3"]);
    cli.ok(&["topic", "produce", "logs", "--generate", "4000"]);
    // Unreadable records go to the dead-letter topic, not nowhere.
    let r = cli.run(
        &["topic", "produce", "logs", "--partition", "2"],
        b"not json\n{\"level\":\"DEBUG\"}\n{\"no\":1}\n",
    );
    assert_eq!(r.code, 0, "{}", r.err);

    // Kill the flow at random moments; more input arrives between rounds.
    let mut rnd = common::xorshift(0x9E37_79B9_7F4A_7C15u64);
    for round in 0..6 {
        let mut f = cli.spawn(&["flow", "run", &flow, "--root", "files"], None);
        std::thread::sleep(Duration::from_millis(300 + rnd(1200)));
        f.kill().unwrap();
        f.wait().unwrap();
        // And between two sinks' commits, where a replay must skip what
        // the sinks committed already (sinks: info, warning-files, errors,
        // dead-letter).
        // New input first, so every task has something to commit.
        cli.ok(&["topic", "produce", "logs", "--generate", "500"]);
        let at = format!("{}:{}", 1 + rnd(3), rnd(3));
        let mut f = cli.spawn(
            &[
                "flow",
                "run",
                &flow,
                "--root",
                "files",
                "--until-idle-ms",
                "3000",
            ],
            Some(&at),
        );
        let status = f.wait().unwrap();
        assert!(!status.success(), "the crash point {at} was not reached");
        // Once, the cluster itself dies under the flow (SIGKILL) and comes
        // back on the same data.
        if round == 3 {
            let mut f = cli.spawn(&["flow", "run", &flow, "--root", "files"], None);
            std::thread::sleep(Duration::from_millis(300 + rnd(500)));
            procs.0[0].kill().unwrap();
            procs.0[0].wait().unwrap();
            f.kill().unwrap();
            f.wait().unwrap();
            let (child, grpc, _) = spawn_up(&dir.path().join("data"), &cli.home);
            procs.0[0] = child;
            cli.grpc = grpc;
        }
    }
    // A sink directory that disappears: a clear error, nothing lost.
    std::fs::remove_dir_all(dir.path().join("files/warnings")).unwrap();
    std::fs::write(dir.path().join("files/warnings"), b"not a directory").unwrap();
    let r = run_to_idle(&cli, &flow, "500");
    assert!(r.code != 0 && r.err.contains("files/warnings"), "{}", r.err);
    std::fs::remove_file(dir.path().join("files/warnings")).unwrap();

    // The last run goes to the end.
    let t0 = Instant::now();
    let r = run_to_idle(&cli, &flow, "1000");
    assert_eq!(r.code, 0, "{}{}", r.out, r.err);
    assert!(t0.elapsed() < Duration::from_secs(120));
    let v = validate(&cli, &flow);
    // 3 partitions x (4000 + 6 x 500) generated records.
    assert!(
        v.contains("expected 21000, received 21000, lost 0, duplicated 0, unexpected 0: EXACT"),
        "{v}"
    );
    assert!(
        v.contains("dead-letter: 3 records (3 without a stamp)"),
        "{v}"
    );
    // Every sink got its share, and the table rows are the projection.
    for s in ["info", "warning-files", "errors"] {
        let line = v
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{s}:")))
            .unwrap();
        let n: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(n > 5_000, "{line}");
    }
    let row = cli.ok(&["scan", "errors", "--limit", "1", "-o", "json"]);
    assert!(
        row.contains(r#"\"level\":\"ERROR\""#) && !row.contains("timestamp"),
        "{row}"
    );
    // Metadata and index terms from fields.
    let row: serde_json::Value = serde_json::from_str(row.trim()).unwrap();
    let key = row["key"].as_str().unwrap();
    let head = cli.ok(&["head", "errors", key]);
    assert!(
        head.contains(r#"metadata={"host":"worker-"#) && head.contains(r#""level":"ERROR"}"#),
        "{head}"
    );
    assert!(head.contains("index by_host=worker-"), "{head}");
    let by_host = cli.ok(&["scan", "errors", "--index", "by_host", "--limit", "1"]);
    assert!(by_host.starts_with("worker-"), "{by_host}");
    // Running again finds nothing new and changes nothing.
    cli.ok(&[
        "flow",
        "run",
        &flow,
        "--root",
        "files",
        "--until-idle-ms",
        "300",
    ]);
    assert_eq!(validate(&cli, &flow), v);
}
