//! The Kafka side of the splitter scenario: one Kafka 4.4.0 broker for the
//! whole run (the repository's `scripts/kafka-broker.sh`, embedded in the
//! binary so the command works from any directory), its topics, and the
//! Kafka Streams peer (`bench/peers/kafka-streams/Splitter.java`, compiled
//! once with `javac`).
//!
//! Owns writing the embedded tools under `OUT/tools/` in the layout the
//! script expects (`$HERE/kafka/pom.xml`), starting the broker in
//! `OUT/kafka` on a free port pair and stopping it when [`KafkaBroker`] is
//! dropped, creating topics with Kafka's `TopicCommand`, and the classpath
//! of the cached jars. Java or Maven missing is an error that quotes the
//! script's own message (what to install), never a skip. It must never
//! touch a broker it did not start and never write outside `--out` (the
//! jar cache is the script's, in `${TABLINUM_CACHE:-$HOME/.cache/tablinum}`).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde::{Deserialize, Serialize};

use super::procs::{run_one, wait_all, Ctx, Proc};
use super::PARTITIONS;
use crate::error::BenchError;

/// `scripts/kafka-broker.sh`.
pub const BROKER_SCRIPT: &str = include_str!("../../../../../scripts/kafka-broker.sh");
/// `scripts/kafka/pom.xml` (the jars the script fetches).
pub const BROKER_POM: &str = include_str!("../../../../../scripts/kafka/pom.xml");
/// `bench/peers/kafka-streams/Splitter.java`.
pub const PEER_SOURCE: &str =
    include_str!("../../../../../bench/peers/kafka-streams/Splitter.java");
/// The Kafka version of the script and the peer.
pub const KAFKA_VERSION: &str = "4.4.0";
/// The peer's main class.
pub const PEER_CLASS: &str = "Splitter";
/// Tries at finding a free port pair for the broker and its controller.
pub const PORT_TRIES: u32 = 20;

/// Where the broker is (`scenario.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KafkaInfo {
    /// Bootstrap address.
    pub brokers: String,
    /// Its directory (log, data, pid).
    pub dir: PathBuf,
    /// The jars.
    pub libs: PathBuf,
}

impl KafkaInfo {
    /// One line for the README header.
    pub fn describe(&self) -> String {
        format!(
            "Kafka {KAFKA_VERSION} broker (KRaft, one node, `scripts/kafka-broker.sh`) at {}, \
             directory {}",
            self.brokers,
            self.dir.display()
        )
    }
}

/// `${TABLINUM_CACHE:-$HOME/.cache/tablinum}/kafka-4.4.0/libs`.
pub fn libs_dir() -> PathBuf {
    let cache = std::env::var_os("TABLINUM_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache/tablinum")
        });
    cache.join(format!("kafka-{KAFKA_VERSION}")).join("libs")
}

/// `LIBS/*` (java expands the wildcard itself), then `extra` entries.
pub fn classpath(libs: &Path, extra: &[&Path]) -> String {
    std::iter::once(format!("{}/*", libs.display()))
        .chain(extra.iter().map(|p| p.display().to_string()))
        .collect::<Vec<_>>()
        .join(":")
}

/// Writes the embedded tools under `OUT/tools` and returns that directory.
pub fn write_tools(out: &Path) -> Result<PathBuf, BenchError> {
    let tools = out.join("tools");
    for (rel, text) in [
        ("kafka-broker.sh", BROKER_SCRIPT),
        ("kafka/pom.xml", BROKER_POM),
        ("peers/kafka-streams/Splitter.java", PEER_SOURCE),
    ] {
        let p = tools.join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| BenchError::io(d, "create", e))?;
        }
        std::fs::write(&p, text).map_err(|e| BenchError::io(&p, "write", e))?;
    }
    Ok(tools)
}

/// A localhost port `p` with `p + 1` also free (the controller's).
pub fn free_port_pair() -> Result<u16, BenchError> {
    for _ in 0..PORT_TRIES {
        let l = TcpListener::bind("127.0.0.1:0")
            .map_err(|e| BenchError::io("127.0.0.1:0", "bind", e))?;
        let port = l
            .local_addr()
            .map_err(|e| BenchError::io("127.0.0.1:0", "bind", e))?
            .port();
        if port < u16::MAX && TcpListener::bind(("127.0.0.1", port + 1)).is_ok() {
            return Ok(port);
        }
    }
    Err(BenchError::ChildRun {
        run: "kafka broker".into(),
        reason: format!("no free port pair in {PORT_TRIES} tries"),
    })
}

/// The broker started by the scenario; stopped when dropped.
#[derive(Debug)]
pub struct KafkaBroker {
    info: KafkaInfo,
    tools: PathBuf,
}

impl KafkaBroker {
    /// Writes the tools, fetches the jars if needed and starts the broker
    /// in `OUT/kafka` (`kafka-broker.sh start`).
    pub fn start(ctx: &Ctx, timeout_s: f64) -> Result<KafkaBroker, BenchError> {
        let tools = write_tools(&ctx.out)?;
        let dir = ctx.out.join(super::KAFKA_DIR);
        let port = free_port_pair()?;
        eprintln!(
            "starting the Kafka broker on 127.0.0.1:{port} (`kafka-broker.sh start {}`; the \
             first start fetches the jars with Maven)",
            dir.display()
        );
        let mut cmd = Command::new("bash");
        cmd.arg(tools.join("kafka-broker.sh"))
            .arg("start")
            .arg(&dir)
            .arg(port.to_string());
        let broker = KafkaBroker {
            info: KafkaInfo {
                brokers: format!("127.0.0.1:{port}"),
                dir: dir.clone(),
                libs: libs_dir(),
            },
            tools,
        };
        // On failure `broker` is dropped: a half-started broker is stopped.
        run_one(
            cmd,
            "kafka broker start",
            &ctx.out,
            "kafka-start",
            &[0],
            timeout_s,
            "kafka broker",
        )
        .map_err(|e| BenchError::ChildRun {
            run: "kafka broker".into(),
            reason: format!(
                "`kafka-broker.sh start` failed (it needs Java 17+ and Maven: install \
                     openjdk-17-jdk-headless and maven): {e}"
            ),
        })?;
        Ok(broker)
    }

    /// Where it is.
    pub fn info(&self) -> KafkaInfo {
        self.info.clone()
    }

    /// Its bootstrap address.
    pub fn brokers(&self) -> &str {
        &self.info.brokers
    }

    /// Its process id (from `DIR/broker.pid`).
    pub fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.info.dir.join("broker.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Creates `topics` with [`PARTITIONS`] partitions each (one
    /// `TopicCommand` JVM per topic, all at once).
    pub fn create_topics(
        &self,
        topics: &[String],
        dir: &Path,
        timeout_s: f64,
        label: &str,
    ) -> Result<(), BenchError> {
        let cp = classpath(&self.info.libs, &[]);
        let mut procs = Vec::new();
        for t in topics {
            let mut c = Command::new("java");
            c.args(["-cp", &cp, "org.apache.kafka.tools.TopicCommand"])
                .args(["--bootstrap-server", self.brokers()])
                .args(["--create", "--topic", t, "--partitions"])
                .arg(PARTITIONS.to_string());
            procs.push(Proc::spawn(
                c,
                "kafka topic create",
                dir,
                &format!("kcreate-{t}"),
                &[0],
            )?);
        }
        let mut refs: Vec<&mut Proc> = procs.iter_mut().collect();
        wait_all(&mut refs, timeout_s, label)
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        let stopped = Command::new("bash")
            .arg(self.tools.join("kafka-broker.sh"))
            .arg("stop")
            .arg(&self.info.dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        if !stopped.is_ok_and(|s| s.success()) {
            eprintln!(
                "warning: cannot stop the Kafka broker in {} (its pid is in broker.pid)",
                self.info.dir.display()
            );
        }
    }
}

/// The peer's classes directory, `OUT/peer`.
pub fn peer_dir(out: &Path) -> PathBuf {
    out.join("peer")
}

/// Compiles the embedded `Splitter.java` into `OUT/peer`.
pub fn compile_peer(ctx: &Ctx, timeout_s: f64) -> Result<(), BenchError> {
    let tools = write_tools(&ctx.out)?;
    let dest = peer_dir(&ctx.out);
    std::fs::create_dir_all(&dest).map_err(|e| BenchError::io(&dest, "create", e))?;
    let mut c = Command::new("javac");
    c.args(["-nowarn", "-cp", &classpath(&libs_dir(), &[])])
        .arg("-d")
        .arg(&dest)
        .arg(tools.join("peers/kafka-streams/Splitter.java"));
    run_one(
        c,
        "javac",
        &ctx.out,
        "peer-javac",
        &[0],
        timeout_s,
        "javac Splitter.java",
    )
    .map_err(|e| BenchError::ChildRun {
        run: "javac Splitter.java".into(),
        reason: format!("cannot compile the Kafka Streams peer (a JDK 17+ is needed): {e}"),
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tools_keep_the_layout_the_script_expects() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let tools = write_tools(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
        assert!(tools.join("kafka-broker.sh").is_file());
        assert!(BROKER_SCRIPT.contains("$HERE/kafka/pom.xml"));
        assert!(tools.join("kafka/pom.xml").is_file());
        assert!(PEER_SOURCE.contains("class Splitter"));
        assert_eq!(
            classpath(Path::new("/c/libs"), &[Path::new("/o/peer")]),
            "/c/libs/*:/o/peer"
        );
        assert!(libs_dir().ends_with("kafka-4.4.0/libs"));
        let p = free_port_pair().unwrap_or_else(|e| panic!("{e}"));
        assert!(p > 0);
    }
}
