//! The report's input: log records of about 870 bytes of JSON, each with a
//! `level` of INFO, WARNING or ERROR in a chosen split, stamped for the
//! validator. Deterministic from a seed, so a run can be repeated and its
//! expected counts known before it starts.
//!
//! Owns the record shape and the split; never does I/O. A record is the
//! JSON object followed by a newline and its 8-byte [`Stamp`] (the stamp's
//! place: the record's last bytes, see [`Stamp::from_tail`]), so routing
//! reads the JSON and validation reads the tail, and neither decodes the
//! other.

use crate::validate::Stamp;

/// The levels the splitter routes by.
pub const LEVELS: [&str; 3] = ["INFO", "WARNING", "ERROR"];
/// The report's record size, bytes (JSON, newline and stamp together).
pub const RECORD_BYTES: usize = 870;

/// How records divide among [`LEVELS`], in percent (sums to 100).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split(pub [u8; 3]);

impl Split {
    /// The report's split: a third each (34/33/33).
    pub const EVEN: Split = Split([34, 33, 33]);
    /// A skewed split: 80 % INFO, 15 % WARNING, 5 % ERROR.
    pub const SKEWED: Split = Split([80, 15, 5]);

    /// A split, refused unless it sums to 100.
    pub fn new(pct: [u8; 3]) -> Result<Split, String> {
        let sum: u32 = pct.iter().map(|&p| u32::from(p)).sum();
        if sum != 100 {
            return Err(format!("level split {pct:?} sums to {sum}, not 100"));
        }
        Ok(Split(pct))
    }

    /// The level of a record whose draw is `d` (0..100).
    fn level(self, d: u64) -> usize {
        let d = d % 100;
        if d < u64::from(self.0[0]) {
            0
        } else if d < u64::from(self.0[0]) + u64::from(self.0[1]) {
            1
        } else {
            2
        }
    }
}

/// Makes the records of one window: record `seq` of window `window` is the
/// same for the same seed, whoever asks and in whatever order.
#[derive(Debug, Clone)]
pub struct Generator {
    seed: u64,
    split: Split,
}

/// SplitMix64: a fast, well-mixed function of its input.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

impl Generator {
    /// A generator of `split` records from `seed`.
    pub fn new(seed: u64, split: Split) -> Generator {
        Generator { seed, split }
    }

    /// The level index (into [`LEVELS`]) of record `s`.
    pub fn level_of(&self, s: Stamp) -> usize {
        let h = mix(self.seed ^ (u64::from(s.window) << 32 | u64::from(s.seq)));
        self.split.level(h)
    }

    /// Record `s`, appended to `out` ([`RECORD_BYTES`] bytes).
    pub fn record(&self, s: Stamp, out: &mut Vec<u8>) {
        let start = out.len();
        let h = mix(self.seed ^ (u64::from(s.window) << 32 | u64::from(s.seq)));
        let level = LEVELS[self.split.level(h)];
        let head = format!(
            "{{\"timestamp\":\"2015-08-10T{:02}:{:02}:{:02}.{:03}Z\",\"level\":\"{level}\",\
             \"host\":\"worker-{}\",\"logger\":\"com.example.app.Service{}\",\"thread\":\"pool-{}\",\
             \"w\":{},\"s\":{},\"message\":\"",
            (h >> 8) % 24,
            (h >> 16) % 60,
            (h >> 24) % 60,
            (h >> 32) % 1000,
            (h >> 40) % 8,
            (h >> 44) % 32,
            (h >> 50) % 16,
            s.window,
            s.seq
        );
        out.extend_from_slice(head.as_bytes());
        // The message fills the record to its size with text from the hash.
        let tail = b"\"}\n";
        let fill = RECORD_BYTES - super::validate::STAMP_BYTES - tail.len() - head.len();
        let mut x = h;
        for i in 0..fill {
            if i % 8 == 0 {
                x = mix(x);
            }
            let c = b"abcdefghijklmnopqrstuvwxyz     "[(x >> ((i % 8) * 8)) as usize % 31];
            out.push(c);
        }
        out.extend_from_slice(tail);
        out.extend_from_slice(&s.encode());
        debug_assert_eq!(out.len() - start, RECORD_BYTES);
    }
}

/// The exactly-once writer name generated records are appended under: its
/// stored position in a partition is how many records it generated there,
/// which is what a validator expects at the sinks.
pub const GENERATOR_WRITER: &str = "generator";

/// Records per window in a generated topic: a partition's offsets fill one
/// window after another (the validator's per-window limit).
pub const WINDOW_RECORDS: u64 = crate::validate::WINDOW_RECORDS_MAX as u64;

/// The stamp of the record at `offset` of partition `p` of a generated
/// topic of `partitions` partitions: windows go round the partitions, so
/// every (partition, offset) has its own stamp and a partition's writer
/// knows its next stamps from its next offset alone. `None`: past the
/// stamp space.
pub fn stamp_at(partitions: u32, p: u32, offset: u64) -> Option<Stamp> {
    let w = (offset / WINDOW_RECORDS)
        .checked_mul(u64::from(partitions))?
        .checked_add(u64::from(p))?;
    Some(Stamp {
        window: u32::try_from(w).ok()?,
        seq: (offset % WINDOW_RECORDS) as u32,
    })
}

/// Steps per second of a generator paced at a rate (`topic produce
/// --generate N --rate R`): each step writes [`pace_step`] records to every
/// partition, so paced input arrives spread evenly over time and partitions.
pub const PACE_STEPS_PER_S: u64 = 20;

/// Records per partition in one step of a generator paced at `rate`
/// records/s in total over `partitions` partitions (at least 1).
pub fn pace_step(rate: u64, partitions: u32) -> u64 {
    (rate / (u64::from(partitions.max(1)) * PACE_STEPS_PER_S)).max(1)
}

/// How long after its start a generator paced at `rate` records/s (> 0)
/// may have written `done` records.
pub fn pace_due(done: u64, rate: u64) -> std::time::Duration {
    std::time::Duration::from_secs_f64(done as f64 / rate.max(1) as f64)
}

/// What a generated topic holds, as (window, records) pairs, from how many
/// records each partition holds (`counts[p]`): what a validator expects.
pub fn expected(counts: &[u64]) -> Vec<(u32, u32)> {
    let parts = counts.len() as u32;
    let mut out = Vec::new();
    for (p, &n) in counts.iter().enumerate() {
        let mut done = 0u64;
        while done < n {
            let take = (n - done).min(WINDOW_RECORDS);
            if let Some(s) = stamp_at(parts, p as u32, done) {
                out.push((s.window, take as u32));
            }
            done += take;
        }
    }
    out.sort_unstable();
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_paced_generator_spreads_its_rate_over_partitions_and_steps() {
        assert_eq!(super::pace_step(20_000, 8), 125);
        assert_eq!(super::pace_step(10, 8), 1);
        assert_eq!(super::pace_step(10, 0), 1);
        assert_eq!(super::pace_due(5_000, 10_000).as_millis(), 500);
        assert_eq!(super::pace_due(1, 0).as_millis(), 1000);
    }

    use super::*;
    use crate::field::{extract, Path, Value};
    use crate::validate::Validator;

    #[test]
    fn records_are_the_report_size_routable_and_stamped() {
        let g = Generator::new(7, Split::EVEN);
        let level = Path::parse("level").unwrap();
        let mut v = Validator::new();
        v.expect(0, 3_000).unwrap();
        let mut counts = [0u32; 3];
        for seq in 0..3_000 {
            let s = Stamp { window: 0, seq };
            let mut rec = Vec::new();
            g.record(s, &mut rec);
            assert_eq!(rec.len(), RECORD_BYTES);
            let json = &rec[..rec.len() - 8];
            let doc: serde_json::Value = serde_json::from_slice(json).unwrap();
            let got = extract(json, &level).unwrap();
            let name = LEVELS[g.level_of(s)];
            assert_eq!(
                got,
                Some(Value::Str(std::borrow::Cow::Borrowed(name.as_bytes())))
            );
            assert_eq!(doc["level"], name);
            assert_eq!(doc["s"], seq);
            counts[g.level_of(s)] += 1;
            v.observe(Stamp::from_tail(&rec).unwrap()).unwrap();
        }
        assert!(v.report().exact());
        for c in counts {
            assert!((900..1_100).contains(&c), "{counts:?}");
        }
    }

    #[test]
    fn the_same_seed_makes_the_same_records_and_splits_follow_their_shares() {
        let (a, b) = (
            Generator::new(1, Split::SKEWED),
            Generator::new(1, Split::SKEWED),
        );
        let s = Stamp { window: 3, seq: 9 };
        let (mut x, mut y) = (Vec::new(), Vec::new());
        a.record(s, &mut x);
        b.record(s, &mut y);
        assert_eq!(x, y);
        let mut counts = [0u32; 3];
        for seq in 0..10_000 {
            counts[a.level_of(Stamp { window: 0, seq })] += 1;
        }
        assert!((7_700..8_300).contains(&counts[0]), "{counts:?}");
        assert!((300..700).contains(&counts[2]), "{counts:?}");
        assert!(Split::new([50, 50, 1]).unwrap_err().contains("101"));
    }

    #[test]
    fn generated_topics_stamp_each_offset_once() {
        let mut seen = std::collections::BTreeSet::new();
        for p in 0..3 {
            for o in [
                0,
                1,
                WINDOW_RECORDS - 1,
                WINDOW_RECORDS,
                3 * WINDOW_RECORDS + 5,
            ] {
                assert!(seen.insert(stamp_at(3, p, o).unwrap()));
            }
        }
        assert_eq!(
            stamp_at(3, 2, WINDOW_RECORDS + 4),
            Some(Stamp { window: 5, seq: 4 })
        );
        assert_eq!(stamp_at(2, 0, u64::MAX), None);
        let e = expected(&[WINDOW_RECORDS + 2, 0, 7]);
        assert_eq!(e, vec![(0, WINDOW_RECORDS as u32), (2, 7), (3, 2)]);
    }
}
