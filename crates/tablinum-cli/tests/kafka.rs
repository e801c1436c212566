//! Dataflows with a real Kafka 4.4.0 broker (KRaft, one node, from Maven
//! jars through `scripts/kafka-broker.sh`; the test fails, never skips,
//! when Java or Maven is missing). Generated records go into a Kafka topic;
//! a flow splits them into two Kafka topics (transactional sinks) and a
//! tablinum topic; the flow is killed at random moments and between two
//! sinks' commits, the broker is SIGKILLed once and restarted on its data,
//! and validation (read_committed) must find every record exactly once.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::Cli;

/// A broker started by the repository's script; stopped when dropped.
struct Broker {
    dir: PathBuf,
    port: u16,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/kafka-broker.sh")
}

impl Broker {
    fn start(dir: &Path, port: u16) -> Broker {
        let out = Command::new("bash")
            .arg(script())
            .arg("start")
            .arg(dir)
            .arg(port.to_string())
            .stderr(Stdio::inherit())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "scripts/kafka-broker.sh could not start a broker (Java 17+ and Maven are needed)"
        );
        assert_eq!(
            String::from_utf8_lossy(&out.stdout).trim(),
            format!("127.0.0.1:{port}")
        );
        Broker {
            dir: dir.to_path_buf(),
            port,
        }
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn kill9(&self) {
        let pid = std::fs::read_to_string(self.dir.join("broker.pid")).unwrap();
        let ok = Command::new("kill")
            .args(["-9", pid.trim()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        std::thread::sleep(Duration::from_millis(300));
        std::fs::remove_file(self.dir.join("broker.pid")).unwrap();
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(script())
            .arg("stop")
            .arg(&self.dir)
            .status();
    }
}

fn flow_text(brokers: &str) -> String {
    format!(
        r#"
[flow]
name = "ksplit"
parallelism = 3
commit_interval_ms = 200

[[source]]
name = "klogs"
kind = "kafka"
brokers = "{brokers}"
topic = "klogs"
group = "ksplit"

[[operator]]
name = "by-level"
kind = "split"
input = "klogs"
field = "level"
routes = {{ INFO = "info", WARNING = "warning", ERROR = "error" }}

[[sink]]
name = "info"
input = "by-level"
kind = "kafka"
brokers = "{brokers}"
topic = "klogs.info"

[[sink]]
name = "warning"
input = "by-level"
kind = "topic"
topic = "klogs.warning"

[[sink]]
name = "error"
input = "by-level"
kind = "kafka"
brokers = "{brokers}"
topic = "klogs.error"
"#
    )
}

#[test]
fn kafka_to_kafka_is_exactly_once_across_flow_and_broker_kills() {
    let dir = tempfile::tempdir().unwrap();
    // Below the ephemeral range (32768+) the other tests' servers use.
    let port = 20_000 + (std::process::id() % 10_000) as u16;
    let broker = Broker::start(&dir.path().join("kafka"), port);
    let (_procs, cli) = Cli::up(dir.path());
    let brokers = broker.addr();
    let flow = dir.path().join("ksplit.toml");
    std::fs::write(&flow, flow_text(&brokers)).unwrap();
    let flow = flow.to_str().unwrap().to_string();
    // The source topic must exist.
    let r = cli.run(&["flow", "run", &flow, "--until-idle-ms", "100"], b"");
    let (code, err) = (r.code, r.err);
    assert!(
        code != 0 && err.contains("Kafka topic klogs does not exist"),
        "{err}"
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(tablinum_flow::kafka::ensure_topic(
        &brokers, "klogs", 3, false,
    ))
    .unwrap();
    let gen = |n: &str| {
        let out = cli.ok(&[
            "topic",
            "produce",
            "klogs",
            "--kafka",
            &brokers,
            "--generate",
            n,
        ]);
        assert!(out.contains("into Kafka topic klogs"), "{out}");
    };
    gen("2000");
    let mut rnd = common::xorshift(0x2545_F491_4F6C_DD1Du64);
    let run_args = ["flow", "run", &flow, "--until-idle-ms", "3000"];
    for round in 0..4 {
        let mut f = cli.spawn(&run_args, None);
        std::thread::sleep(Duration::from_millis(1_000 + rnd(1_500)));
        f.kill().unwrap();
        f.wait().unwrap();
        gen("500");
        // Between two sinks' commits: sinks are info, warning, error,
        // then the dead-letter topic.
        let at = format!("{}:{}", 1 + rnd(3), rnd(3));
        let mut f = cli.spawn(&run_args, Some(&at));
        let status = f.wait().unwrap();
        assert!(!status.success(), "the crash point {at} was not reached");
        if round == 2 {
            // The broker dies under a running flow and comes back.
            let mut f = cli.spawn(&run_args, None);
            std::thread::sleep(Duration::from_millis(1_500));
            broker.kill9();
            f.kill().unwrap();
            f.wait().unwrap();
            let again = Broker::start(&broker.dir, broker.port);
            std::mem::forget(again);
        }
    }
    let out = cli.ok(&["flow", "run", &flow, "--until-idle-ms", "3000"]);
    assert!(out.contains("flow ksplit:"), "{out}");
    let r = cli.run(&["flow", "validate", &flow], b"");
    let (code, v, err) = (r.code, r.out, r.err);
    // 3 partitions x (2000 + 4 x 500).
    assert!(
        code == 0
            && v.contains(
                "expected 12000, received 12000, lost 0, duplicated 0, unexpected 0: EXACT"
            ),
        "{v}{err}"
    );
    for s in ["info", "warning", "error"] {
        let line = v
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{s}:")))
            .unwrap();
        let n: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(n > 3_000, "{line}");
    }

    // Latency, followed live: a flow with a tablinum sink cannot be
    // followed (the reader reads Kafka only) and says why.
    let r = cli.run(&["flow", "latency", &flow, "--expect", "10"], b"");
    assert!(
        r.code != 0 && r.err.contains("following latency reads Kafka sinks only"),
        "{}",
        r.err
    );
    // An all-Kafka flow: the follower starts first, then the flow, then a
    // generator paced at 2,000 records/s; every record is measured.
    rt.block_on(tablinum_flow::kafka::ensure_topic(
        &brokers, "klat", 3, false,
    ))
    .unwrap();
    let lat = dir.path().join("klat.toml");
    let text = flow_text(&brokers)
        .replace("ksplit", "klat")
        .replace("klogs", "klat")
        .replace(
            "kind = \"topic\"\ntopic = \"klat.warning\"",
            &format!("kind = \"kafka\"\nbrokers = \"{brokers}\"\ntopic = \"klat.warning\""),
        );
    std::fs::write(&lat, text).unwrap();
    let lat = lat.to_str().unwrap().to_string();
    // The sinks' topics exist once the flow ran (on no input).
    cli.ok(&["flow", "run", &lat, "--until-idle-ms", "100"]);
    let follower = cli
        .cmd(&[
            "flow",
            "latency",
            &lat,
            "--expect",
            "3000",
            "--timeout-s",
            "120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let mut f = cli.spawn(&["flow", "run", &lat, "--until-idle-ms", "3000"], None);
    let t0 = std::time::Instant::now();
    let out = cli.ok(&[
        "topic",
        "produce",
        "klat",
        "--kafka",
        &brokers,
        "--generate",
        "1000",
        "--rate",
        "2000",
    ]);
    assert!(out.contains("generated 3000 records"), "{out}");
    // 3,000 records at 2,000/s: paced, not as fast as Kafka takes them.
    assert!(
        t0.elapsed() >= Duration::from_millis(1_300),
        "{:?}",
        t0.elapsed()
    );
    let got = follower.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(
        got.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&got.stderr)
    );
    let line = text
        .lines()
        .find(|l| l.starts_with("latency, source to visible: p50 "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("over 3000 records"), "{line}");
    let p99: u64 = line
        .split("p99 ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // Commits every 200 ms; a minute would mean the reader waited on
    // something other than the flow.
    assert!(p99 < 60_000, "{line}");
    assert!(f.wait().unwrap().success());
}
