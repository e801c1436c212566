//! The splitter scenario's cells: what a run measures ([`Variant`], the
//! system and the topology), at which level split ([`SplitKind`]), and the
//! groups of the plan (the b pair shares its input per repeat, so it is one
//! group).
//!
//! Owns the names every table, row and `--only` use and what each variant
//! needs (Kafka, its durability). Pure: it must never measure or print.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{KAFKA_DURABILITY, SPLIT_EVEN, SPLIT_SKEWED, TABLINUM_DURABILITY};
use crate::scenario::framework::plan::Group;

/// What a run of the report measures: a system in a shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Variant {
    /// Tablinum topics end to end, one flow.
    AFused,
    /// Tablinum topics with a topic on every edge (two flows).
    ATopics,
    /// Kafka → Kafka by tablinum.
    BTablinum,
    /// Kafka → Kafka by Kafka Streams.
    BKafkaStreams,
    /// Kafka → Parquet files by tablinum.
    CParquet,
    /// A worker SIGKILLed mid-run.
    EKill,
    /// [`Variant::AFused`] at a steady rate, for latency.
    AFusedLatency,
    /// [`Variant::BTablinum`] at a steady rate, for latency.
    BTablinumLatency,
    /// [`Variant::BKafkaStreams`] at a steady rate, for latency.
    BKafkaStreamsLatency,
}

impl Variant {
    /// Every variant, in table order.
    pub const ALL: [Variant; 9] = [
        Variant::AFused,
        Variant::ATopics,
        Variant::BTablinum,
        Variant::BKafkaStreams,
        Variant::CParquet,
        Variant::EKill,
        Variant::AFusedLatency,
        Variant::BTablinumLatency,
        Variant::BKafkaStreamsLatency,
    ];

    /// Its name in tables and `rows` (`a-fused`, `b-tablinum latency`).
    pub fn name(self) -> &'static str {
        match self {
            Variant::AFused => "a-fused",
            Variant::ATopics => "a-topics",
            Variant::BTablinum => "b-tablinum",
            Variant::BKafkaStreams => "b-kafka-streams",
            Variant::CParquet => "c-parquet",
            Variant::EKill => "e-kill",
            Variant::AFusedLatency => "a-fused latency",
            Variant::BTablinumLatency => "b-tablinum latency",
            Variant::BKafkaStreamsLatency => "b-kafka-streams latency",
        }
    }

    /// `tablinum` or `kafka-streams`.
    pub fn system(self) -> &'static str {
        match self {
            Variant::BKafkaStreams | Variant::BKafkaStreamsLatency => "kafka-streams",
            _ => "tablinum",
        }
    }

    /// The throughput variant a latency variant measures (itself otherwise).
    pub fn base(self) -> Variant {
        match self {
            Variant::AFusedLatency => Variant::AFused,
            Variant::BTablinumLatency => Variant::BTablinum,
            Variant::BKafkaStreamsLatency => Variant::BKafkaStreams,
            v => v,
        }
    }

    /// A latency cell.
    pub fn is_latency(self) -> bool {
        self.base() != self
    }

    /// Its input is a Kafka topic.
    pub fn needs_kafka(self) -> bool {
        matches!(
            self.base(),
            Variant::BTablinum | Variant::BKafkaStreams | Variant::CParquet
        )
    }

    /// Durability of its output.
    pub fn durability(self) -> &'static str {
        if self.needs_kafka() && self.base() != Variant::CParquet {
            KAFKA_DURABILITY
        } else if self.base() == Variant::CParquet {
            "kafka source (as b); parquet files fsynced and renamed at each commit"
        } else {
            TABLINUM_DURABILITY
        }
    }

    /// The variant named `s` (`a-fused`, `b-tablinum-latency` or `b-tablinum latency`).
    pub fn parse(s: &str) -> Result<Variant, String> {
        let want = s.trim().replace(' ', "-");
        Variant::ALL
            .into_iter()
            .find(|v| v.name().replace(' ', "-") == want)
            .ok_or_else(|| {
                format!(
                    "`{s}` is not a variant ({})",
                    Variant::ALL
                        .iter()
                        .map(|v| v.name().replace(' ', "-"))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
    }
}

/// Percent of INFO, WARNING and ERROR records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SplitKind {
    /// [`SPLIT_EVEN`].
    Even,
    /// [`SPLIT_SKEWED`].
    Skewed,
}

impl SplitKind {
    /// `even` or `skewed`.
    pub fn name(self) -> &'static str {
        match self {
            SplitKind::Even => "even",
            SplitKind::Skewed => "skewed",
        }
    }

    /// The percentages.
    pub fn pct(self) -> [u8; 3] {
        match self {
            SplitKind::Even => SPLIT_EVEN,
            SplitKind::Skewed => SPLIT_SKEWED,
        }
    }

    /// `34,33,33`, as `--split` takes it.
    pub fn arg(self) -> String {
        let [i, w, e] = self.pct();
        format!("{i},{w},{e}")
    }
}

/// One cell: a variant at a split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cell {
    /// What is measured.
    pub variant: Variant,
    /// The level split of its input.
    pub split: SplitKind,
}

impl fmt::Display for Cell {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.variant.is_latency() {
            f.write_str(self.variant.name())
        } else {
            write!(f, "{} {}", self.variant.name(), self.split.name())
        }
    }
}

/// The groups of the plan: cells sharing a setup (the b pair shares its
/// input per repeat), in run order.
pub fn groups(only: &[Variant]) -> Vec<Group<Cell>> {
    let c = |variant, split| Cell { variant, split };
    use SplitKind::{Even, Skewed};
    use Variant::*;
    let all = vec![
        ("a", vec![c(AFused, Even), c(ATopics, Even)]),
        ("b", vec![c(BTablinum, Even), c(BKafkaStreams, Even)]),
        ("c", vec![c(CParquet, Even)]),
        (
            "d",
            vec![
                c(AFused, Skewed),
                c(BTablinum, Skewed),
                c(BKafkaStreams, Skewed),
            ],
        ),
        (
            "latency",
            vec![
                c(AFusedLatency, Even),
                c(BTablinumLatency, Even),
                c(BKafkaStreamsLatency, Even),
            ],
        ),
        ("e", vec![c(EKill, Even)]),
    ];
    all.into_iter()
        .enumerate()
        .filter_map(|(key, (name, cells))| {
            let cells: Vec<Cell> = cells
                .into_iter()
                .filter(|c| only.is_empty() || only.contains(&c.variant))
                .collect();
            (!cells.is_empty()).then(|| Group {
                name: name.to_string(),
                key: key as u64,
                cells,
            })
        })
        .collect()
}
