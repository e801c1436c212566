//! The files the splitter scenario hands to its children: flow definitions
//! (the report's splitter in every variant's shape, the a-topics persister
//! and its check flow) and a worker's config.
//!
//! Owns their text, in the shape `tablinum-flow`'s definition reader and
//! `tablinum worker --config` read (the tests parse every file back as TOML
//! and check what the CLI looks for). Pure: it must never write a file or
//! run anything; every string goes through TOML quoting, never pasted raw.

use std::fmt::Write as _;
use std::path::Path;

/// The report's levels, in its order, and the sink each is routed to.
pub const LEVELS: [(&str, &str); 3] =
    [("INFO", "info"), ("WARNING", "warning"), ("ERROR", "error")];
/// The JSON field the splitter routes on.
pub const SPLIT_FIELD: &str = "level";
/// The name of the split operator (the sinks' input).
pub const SPLIT_OPERATOR: &str = "by-level";
/// The name of the source of a one-source flow.
pub const SOURCE_NAME: &str = "in";
/// Heartbeat of the e-kill workers, ms (run.py's).
pub const WORKER_HEARTBEAT_MS: u64 = 500;

/// A TOML string literal.
pub fn quote(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

/// Where a flow reads.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceSpec {
    /// A tablinum topic.
    Topic {
        /// Its name.
        topic: String,
    },
    /// A Kafka topic.
    Kafka {
        /// Bootstrap brokers.
        brokers: String,
        /// Its name.
        topic: String,
        /// Consumer group.
        group: String,
    },
}

/// Where a sink writes.
#[derive(Debug, Clone, PartialEq)]
pub enum SinkSpec {
    /// A tablinum topic.
    Topic {
        /// Its name.
        topic: String,
    },
    /// A Kafka topic (transactional).
    Kafka {
        /// Bootstrap brokers.
        brokers: String,
        /// Its name.
        topic: String,
    },
    /// Files under the flow's `--root`.
    Files {
        /// Directory, relative to the root.
        dir: String,
        /// `parquet` or `jsonl`.
        format: String,
    },
}

/// One flow file.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowSpec {
    /// `[flow] name`.
    pub name: String,
    /// Tasks per operator.
    pub parallelism: u32,
    /// `commit_interval_ms` (absent: the flow's default).
    pub commit_interval_ms: Option<u64>,
    /// `durability` (absent: the flow's default).
    pub durability: Option<&'static str>,
    /// `(name, source)`.
    pub sources: Vec<(String, SourceSpec)>,
    /// The split by level, reading the first source.
    pub split: bool,
    /// `(name, input, sink)`.
    pub sinks: Vec<(String, String, SinkSpec)>,
}

impl FlowSpec {
    /// The report's splitter: one source, the split by [`SPLIT_FIELD`],
    /// one sink per level made by `sink(level_sink_name)`.
    pub fn splitter(
        name: &str,
        parallelism: u32,
        commit_interval_ms: u64,
        source: SourceSpec,
        sink: impl Fn(&str) -> SinkSpec,
    ) -> FlowSpec {
        FlowSpec {
            name: name.to_string(),
            parallelism,
            commit_interval_ms: Some(commit_interval_ms),
            durability: Some("sync"),
            sources: vec![(SOURCE_NAME.to_string(), source)],
            split: true,
            sinks: LEVELS
                .iter()
                .map(|(_, l)| (l.to_string(), SPLIT_OPERATOR.to_string(), sink(l)))
                .collect(),
        }
    }

    /// The TOML text.
    pub fn render(&self) -> String {
        let mut s = format!(
            "[flow]\nname = {}\nparallelism = {}\n",
            quote(&self.name),
            self.parallelism
        );
        if let Some(ms) = self.commit_interval_ms {
            let _ = writeln!(s, "commit_interval_ms = {ms}");
        }
        if let Some(d) = self.durability {
            let _ = writeln!(s, "durability = {}", quote(d));
        }
        for (name, src) in &self.sources {
            let _ = write!(s, "\n[[source]]\nname = {}\n", quote(name));
            match src {
                SourceSpec::Topic { topic } => {
                    let _ = write!(s, "kind = \"topic\"\ntopic = {}\n", quote(topic));
                }
                SourceSpec::Kafka {
                    brokers,
                    topic,
                    group,
                } => {
                    let _ = write!(
                        s,
                        "kind = \"kafka\"\nbrokers = {}\ntopic = {}\ngroup = {}\n",
                        quote(brokers),
                        quote(topic),
                        quote(group)
                    );
                }
            }
        }
        if self.split {
            let input = self
                .sources
                .first()
                .map_or(SOURCE_NAME, |(n, _)| n.as_str());
            let routes: Vec<String> = LEVELS
                .iter()
                .map(|(level, sink)| format!("{level} = {}", quote(sink)))
                .collect();
            let _ = write!(
                s,
                "\n[[operator]]\nname = {}\nkind = \"split\"\ninput = {}\nfield = {}\nroutes = {{ {} }}\n",
                quote(SPLIT_OPERATOR),
                quote(input),
                quote(SPLIT_FIELD),
                routes.join(", ")
            );
        }
        for (name, input, sink) in &self.sinks {
            let _ = write!(
                s,
                "\n[[sink]]\nname = {}\ninput = {}\n",
                quote(name),
                quote(input)
            );
            match sink {
                SinkSpec::Topic { topic } => {
                    let _ = write!(s, "kind = \"topic\"\ntopic = {}\n", quote(topic));
                }
                SinkSpec::Kafka { brokers, topic } => {
                    let _ = write!(
                        s,
                        "kind = \"kafka\"\nbrokers = {}\ntopic = {}\n",
                        quote(brokers),
                        quote(topic)
                    );
                }
                SinkSpec::Files { dir, format } => {
                    let _ = write!(
                        s,
                        "kind = \"files\"\ndir = {}\nformat = {}\n",
                        quote(dir),
                        quote(format)
                    );
                }
            }
        }
        s
    }
}

/// The a-topics persister: every level topic `PREFIX.LEVEL` into
/// `PREFIX.aggregate` (run.sh's `aR-persist`).
pub fn persister(name: &str, prefix: &str, parallelism: u32, commit_interval_ms: u64) -> FlowSpec {
    FlowSpec {
        name: name.to_string(),
        parallelism,
        commit_interval_ms: Some(commit_interval_ms),
        durability: Some("sync"),
        sources: LEVELS
            .iter()
            .map(|(_, l)| {
                (
                    l.to_string(),
                    SourceSpec::Topic {
                        topic: format!("{prefix}.{l}"),
                    },
                )
            })
            .collect(),
        split: false,
        sinks: LEVELS
            .iter()
            .map(|(_, l)| {
                (
                    format!("agg-{l}"),
                    l.to_string(),
                    SinkSpec::Topic {
                        topic: format!("{prefix}.aggregate"),
                    },
                )
            })
            .collect(),
    }
}

/// The a-topics check flow: what `flow validate` compares, the generated
/// input against the aggregate topic (run.sh's `aR-check`).
pub fn check(name: &str, input: &str, aggregate: &str, parallelism: u32) -> FlowSpec {
    FlowSpec {
        name: name.to_string(),
        parallelism,
        commit_interval_ms: None,
        durability: None,
        sources: vec![(
            SOURCE_NAME.to_string(),
            SourceSpec::Topic {
                topic: input.to_string(),
            },
        )],
        split: false,
        sinks: vec![(
            "aggregate".to_string(),
            SOURCE_NAME.to_string(),
            SinkSpec::Topic {
                topic: aggregate.to_string(),
            },
        )],
    }
}

/// A `tablinum worker --config` file (run.py's keys).
pub fn worker_config(id: &str, manager: &str, cluster_secret: &Path, root: &Path) -> String {
    format!(
        "[worker]\nid = {}\nmanager = {}\ncluster_secret_file = {}\nroot = {}\nheartbeat_interval_ms = {WORKER_HEARTBEAT_MS}\n",
        quote(id),
        quote(manager),
        quote(&cluster_secret.display().to_string()),
        quote(&root.display().to_string()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> toml::Table {
        text.parse::<toml::Table>()
            .unwrap_or_else(|e| panic!("{e}\n{text}"))
    }

    fn get<'a>(v: &'a toml::Value, path: &[&str]) -> &'a toml::Value {
        let mut v = v;
        for p in path {
            v = match p.parse::<usize>() {
                Ok(i) => &v[i],
                Err(_) => &v[*p],
            };
        }
        v
    }

    #[test]
    fn the_fused_splitter_has_what_the_cli_reads() {
        let f = FlowSpec::splitter(
            "a7",
            8,
            1000,
            SourceSpec::Topic {
                topic: "logs7".into(),
            },
            |_| SinkSpec::Topic {
                topic: "a7.aggregate".into(),
            },
        );
        let t = toml::Value::Table(parse(&f.render()));
        assert_eq!(get(&t, &["flow", "name"]).as_str(), Some("a7"));
        assert_eq!(get(&t, &["flow", "parallelism"]).as_integer(), Some(8));
        assert_eq!(
            get(&t, &["flow", "commit_interval_ms"]).as_integer(),
            Some(1000)
        );
        assert_eq!(get(&t, &["flow", "durability"]).as_str(), Some("sync"));
        assert_eq!(get(&t, &["source", "0", "kind"]).as_str(), Some("topic"));
        assert_eq!(get(&t, &["source", "0", "topic"]).as_str(), Some("logs7"));
        let op = get(&t, &["operator", "0"]);
        assert_eq!(op["kind"].as_str(), Some("split"));
        assert_eq!(op["input"].as_str(), Some("in"));
        assert_eq!(op["field"].as_str(), Some("level"));
        assert_eq!(op["routes"]["INFO"].as_str(), Some("info"));
        assert_eq!(op["routes"]["WARNING"].as_str(), Some("warning"));
        assert_eq!(op["routes"]["ERROR"].as_str(), Some("error"));
        let sinks = t["sink"].as_array().unwrap_or_else(|| panic!("sinks"));
        let names: Vec<_> = sinks.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(names, ["info", "warning", "error"]);
        for s in sinks {
            assert_eq!(s["input"].as_str(), Some("by-level"));
            assert_eq!(s["kind"].as_str(), Some("topic"));
            assert_eq!(s["topic"].as_str(), Some("a7.aggregate"));
        }
    }

    #[test]
    fn kafka_and_parquet_flows_name_brokers_groups_and_dirs() {
        let src = SourceSpec::Kafka {
            brokers: "127.0.0.1:19192".into(),
            topic: "in3".into(),
            group: "b3".into(),
        };
        let f = FlowSpec::splitter("b3", 8, 500, src.clone(), |l| SinkSpec::Kafka {
            brokers: "127.0.0.1:19192".into(),
            topic: format!("t3.{l}"),
        });
        let t = toml::Value::Table(parse(&f.render()));
        assert_eq!(get(&t, &["source", "0", "kind"]).as_str(), Some("kafka"));
        assert_eq!(
            get(&t, &["source", "0", "brokers"]).as_str(),
            Some("127.0.0.1:19192")
        );
        assert_eq!(get(&t, &["source", "0", "group"]).as_str(), Some("b3"));
        assert_eq!(
            get(&t, &["flow", "commit_interval_ms"]).as_integer(),
            Some(500)
        );
        assert_eq!(get(&t, &["sink", "2", "topic"]).as_str(), Some("t3.error"));
        assert_eq!(get(&t, &["sink", "2", "kind"]).as_str(), Some("kafka"));
        let f = FlowSpec::splitter("c3", 8, 1000, src, |l| SinkSpec::Files {
            dir: format!("c3/{l}"),
            format: "parquet".into(),
        });
        let t = toml::Value::Table(parse(&f.render()));
        assert_eq!(get(&t, &["sink", "0", "kind"]).as_str(), Some("files"));
        assert_eq!(get(&t, &["sink", "0", "dir"]).as_str(), Some("c3/info"));
        assert_eq!(get(&t, &["sink", "1", "format"]).as_str(), Some("parquet"));
        // Quoting: a name with a quote stays one string.
        let f = FlowSpec::splitter(
            "we\"ird",
            1,
            1,
            SourceSpec::Topic { topic: "t".into() },
            |_| SinkSpec::Topic { topic: "o".into() },
        );
        let t = toml::Value::Table(parse(&f.render()));
        assert_eq!(get(&t, &["flow", "name"]).as_str(), Some("we\"ird"));
    }

    #[test]
    fn the_persister_and_check_flows_are_run_shs() {
        let p = toml::Value::Table(parse(&persister("a2-persist", "a2", 8, 1000).render()));
        let sources = p["source"].as_array().unwrap_or_else(|| panic!("sources"));
        assert_eq!(sources.len(), 3);
        assert_eq!(sources[1]["topic"].as_str(), Some("a2.warning"));
        assert!(p.get("operator").is_none());
        assert_eq!(
            get(&p, &["sink", "1", "name"]).as_str(),
            Some("agg-warning")
        );
        assert_eq!(get(&p, &["sink", "1", "input"]).as_str(), Some("warning"));
        assert_eq!(
            get(&p, &["sink", "1", "topic"]).as_str(),
            Some("a2.aggregate")
        );
        let c = toml::Value::Table(parse(
            &check("a2-check", "logs2", "a2.aggregate", 8).render(),
        ));
        assert!(c["flow"].get("durability").is_none());
        assert_eq!(get(&c, &["source", "0", "topic"]).as_str(), Some("logs2"));
        assert_eq!(get(&c, &["sink", "0", "input"]).as_str(), Some("in"));
        assert_eq!(
            get(&c, &["sink", "0", "topic"]).as_str(),
            Some("a2.aggregate")
        );
    }

    #[test]
    fn a_worker_config_has_run_pys_keys() {
        let t = parse(&worker_config(
            "w1",
            "127.0.0.1:7620",
            Path::new("/d/cluster.secret"),
            Path::new("/o/files"),
        ));
        let w = &t["worker"];
        assert_eq!(w["id"].as_str(), Some("w1"));
        assert_eq!(w["manager"].as_str(), Some("127.0.0.1:7620"));
        assert_eq!(w["cluster_secret_file"].as_str(), Some("/d/cluster.secret"));
        assert_eq!(w["root"].as_str(), Some("/o/files"));
        assert_eq!(w["heartbeat_interval_ms"].as_integer(), Some(500));
    }
}
