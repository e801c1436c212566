//! Journal compaction *policy* (value GC): which run of adjacent journal
//! segments is worth rewriting, as a pure function of segment statistics.
//!
//! Scoring follows leveled: a run of `n` segments is worth compacting when
//! its mean live percentage is below a target that rises linearly from the
//! single-segment threshold to the maximal-run threshold; the best positive
//! run wins. Segments holding writes the ledger has not persisted are never
//! candidates. Which record of a chosen run is still live is the pure
//! [`record_is_live`]. Never does I/O; the store executes the choice.

use crate::ledger::entry::Loc;

/// What the policy knows about one segment, in segment-id order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStat {
    /// Segment id.
    pub id: u64,
    /// False for the active segment.
    pub sealed: bool,
    /// Largest sequence number in it.
    pub max_seq: u64,
    /// Record bytes (header excluded).
    pub record_bytes: u64,
    /// Bytes known dead.
    pub dead_bytes: u64,
}

impl SegmentStat {
    /// Live share in percent (0 when empty).
    pub fn live_pct(&self) -> f64 {
        if self.record_bytes == 0 {
            // An empty sealed segment (a store opened and closed without
            // writes) is pure overhead: compacting it just removes it.
            return 0.0;
        }
        100.0 * self.record_bytes.saturating_sub(self.dead_bytes) as f64 / self.record_bytes as f64
    }
}

/// Thresholds (copied from `Options`).
#[derive(Debug, Clone, Copy)]
pub struct GcPolicy {
    /// Most segments in one run.
    pub run_segments_max: usize,
    /// Live % below which one segment is worth compacting.
    pub single_live_pct: u32,
    /// Live % below which a maximal run is worth compacting.
    pub run_live_pct: u32,
}

/// The best run (segment ids, adjacent in `stats` order) or `None`.
pub fn choose(stats: &[SegmentStat], persisted_seq: u64, policy: &GcPolicy) -> Option<Vec<u64>> {
    let eligible = |s: &SegmentStat| s.sealed && s.max_seq <= persisted_seq;
    let max_len = policy.run_segments_max.max(1);
    let target = |len: usize| -> f64 {
        if max_len == 1 {
            return policy.single_live_pct as f64;
        }
        let (a, b) = (policy.single_live_pct as f64, policy.run_live_pct as f64);
        a + (b - a) * (len - 1) as f64 / (max_len - 1) as f64
    };
    let mut best: Option<(f64, usize, usize)> = None;
    for start in 0..stats.len() {
        let mut sum = 0.0;
        for len in 1..=max_len {
            let Some(s) = stats.get(start + len - 1) else {
                break;
            };
            if !eligible(s) {
                break;
            }
            sum += s.live_pct();
            let score = target(len) - sum / len as f64;
            if score > 0.0 && best.is_none_or(|(b, _, _)| score > b) {
                best = Some((score, start, len));
            }
        }
    }
    best.map(|(_, s, l)| stats[s..s + l].iter().map(|x| x.id).collect())
}

/// Dead share of the sealed segments' record bytes, in percent (0 when they
/// hold none): what [`crate::Options::journal_compaction_garbage_pct`] is
/// compared against. The active segment is left out: nothing in it can be
/// compacted yet.
pub fn garbage_pct(stats: &[SegmentStat]) -> f64 {
    let (bytes, dead) = stats
        .iter()
        .filter(|s| s.sealed)
        .fold((0u64, 0u64), |(b, d), s| {
            (b + s.record_bytes, d + s.dead_bytes.min(s.record_bytes))
        });
    if bytes == 0 {
        return 0.0;
    }
    100.0 * dead as f64 / bytes as f64
}

/// Garbage share over its target, in percentage points, that doubles the
/// read rate of a journal compaction (see [`pace_bytes_per_s`]).
pub const PACE_DOUBLING_POINTS: f64 = 10.0;

/// Read rate of a journal compaction run, bytes per second (0: unpaced).
/// At or under the garbage target (`target_pct`, 0: no target) it is the
/// configured `base`; over it, `base` doubles for every
/// [`PACE_DOUBLING_POINTS`] points of excess. Overwrites can make garbage
/// faster than `base` reclaims it (8 KB values at ~7k updates/s make ~60
/// MB/s, twice the default rate): at a fixed rate the journal would grow
/// until the disk is full, while a rate that rises with the excess meets
/// the garbage rate a few points over the target and the journal stays
/// bounded, trading GET throughput for space only while it is over.
pub fn pace_bytes_per_s(base: u64, garbage_pct: f64, target_pct: u32) -> u64 {
    if base == 0 || target_pct == 0 || garbage_pct <= f64::from(target_pct) {
        return base;
    }
    let factor = 2f64.powf((garbage_pct - f64::from(target_pct)) / PACE_DOUBLING_POINTS);
    let paced = base as f64 * factor;
    if paced >= u64::MAX as f64 {
        0
    } else {
        paced as u64
    }
}

/// A journal record as value GC sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordAt {
    /// A delete (tombstone) record rather than a put.
    pub is_delete: bool,
    /// Its sequence number.
    pub seq: u64,
    /// Where it is in the journal.
    pub at: Loc,
}

/// Whether journal compaction must keep `rec`, given what the ledger holds
/// for its key now (`current`: sequence number and journal location, `None`
/// when the key has no entry) and the smallest sequence number of every
/// segment outside the run being compacted.
///
/// A put is live only while the ledger still points at exactly this record.
/// A delete is live while the ledger holds nothing newer for its key (no
/// entry, or this very tombstone) *and* an older write of the key may still
/// sit in a segment outside the run: a ledger rebuilt from the journal would
/// otherwise resurrect that write, even after compaction dropped the
/// tombstone from the ledger.
pub fn record_is_live(rec: &RecordAt, current: Option<(u64, Loc)>, others_min_seq: u64) -> bool {
    let points_here = current == Some((rec.seq, rec.at));
    if rec.is_delete {
        others_min_seq < rec.seq && (current.is_none() || points_here)
    } else {
        points_here
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(id: u64, dead: u64, max_seq: u64) -> SegmentStat {
        SegmentStat {
            id,
            sealed: true,
            max_seq,
            record_bytes: 100,
            dead_bytes: dead,
        }
    }
    const P: GcPolicy = GcPolicy {
        run_segments_max: 4,
        single_live_pct: 30,
        run_live_pct: 70,
    };

    #[test]
    fn pace_rises_with_garbage_over_its_target_only() {
        let base = 32 << 20;
        // At or under the target, or with no target, or unpaced: as configured.
        assert_eq!(pace_bytes_per_s(base, 50.0, 50), base);
        assert_eq!(pace_bytes_per_s(base, 10.0, 50), base);
        assert_eq!(pace_bytes_per_s(base, 90.0, 0), base);
        assert_eq!(pace_bytes_per_s(0, 90.0, 50), 0);
        // Doubles every PACE_DOUBLING_POINTS over it, continuously.
        assert_eq!(pace_bytes_per_s(base, 60.0, 50), 2 * base);
        assert_eq!(pace_bytes_per_s(base, 80.0, 50), 8 * base);
        let (a, b) = (pace_bytes_per_s(base, 55.0, 50), pace_bytes_per_s(base, 56.0, 50));
        assert!(base < a && a < b && b < 2 * base, "{a} {b}");
        // Past what a u64 holds: unpaced, not an overflow.
        assert_eq!(pace_bytes_per_s(u64::MAX / 2, 100.0, 1), 0);
    }

    #[test]
    fn garbage_share_counts_sealed_segments_only() {
        assert_eq!(garbage_pct(&[]), 0.0);
        let mut active = s(3, 100, u64::MAX);
        active.sealed = false;
        // 60 + 20 dead of 200 sealed bytes; the all-dead active segment is
        // not compactable and does not count.
        assert_eq!(garbage_pct(&[s(1, 60, 5), s(2, 20, 9), active]), 40.0);
        // Dead counts above a segment's size (double counting) are capped.
        assert_eq!(garbage_pct(&[s(1, 500, 5), s(2, 0, 9)]), 50.0);
    }

    #[test]
    fn picks_best_run_and_respects_persisted_seq() {
        let stats = [s(1, 10, 10), s(2, 80, 20), s(3, 60, 30), s(4, 95, 40)];
        // live: 90, 20, 40, 5
        // The run 2..=4 (mean live 21.7 % against a 3-segment target of 56.7 %)
        // beats segment 4 alone (5 % against 30 %).
        assert_eq!(choose(&stats, 40, &P), Some(vec![2, 3, 4]));
        // Segment 4 holds unpersisted writes: the run 2..3 wins.
        assert_eq!(choose(&stats, 30, &P), Some(vec![2, 3]));
        assert_eq!(choose(&stats, 5, &P), None);
        let mostly_live = [s(1, 5, 1), s(2, 5, 2)];
        assert_eq!(choose(&mostly_live, 9, &P), None);
        let mut active = s(9, 100, 1);
        active.sealed = false;
        assert_eq!(choose(&[active], 9, &P), None);
    }

    fn at(segment: u64, offset: u64) -> Loc {
        Loc {
            segment,
            offset,
            len: 100,
        }
    }

    #[test]
    fn a_put_is_live_only_while_the_ledger_points_at_it() {
        let rec = RecordAt {
            is_delete: false,
            seq: 7,
            at: at(3, 40),
        };
        assert!(record_is_live(&rec, Some((7, at(3, 40))), 0));
        // Overwritten, deleted (tombstone), or already relocated.
        assert!(!record_is_live(&rec, Some((9, at(5, 0))), 0));
        assert!(!record_is_live(&rec, Some((7, at(8, 0))), 0));
        // Key gone from the ledger (tombstone dropped at the bottom level).
        assert!(!record_is_live(&rec, None, 0));
    }

    #[test]
    fn a_delete_lives_while_an_older_write_may_remain_elsewhere() {
        let rec = RecordAt {
            is_delete: true,
            seq: 50,
            at: at(3, 40),
        };
        // Older records of any key may remain outside the run.
        assert!(record_is_live(&rec, None, 10));
        assert!(record_is_live(&rec, Some((50, at(3, 40))), 10));
        // Nothing outside the run is older: no write can be resurrected.
        assert!(!record_is_live(&rec, None, 51));
        assert!(!record_is_live(&rec, None, u64::MAX));
        // The key was written again after the delete.
        assert!(!record_is_live(&rec, Some((60, at(9, 0))), 10));
    }
}
