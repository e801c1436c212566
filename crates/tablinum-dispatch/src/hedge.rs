//! Hedged point reads and small scans: when to send a second copy of a read
//! and to which server.
//!
//! Owns [`LatencyTracker`] (a fixed-memory, log-bucketed latency histogram
//! whose counts halve every [`DECAY_EVERY_SAMPLES`] samples, so it follows
//! the recent past) and [`hedge`], a pure function of the profile's `hedge`
//! setting, the tracker and the server snapshot. The second server is the
//! tablet's best rendezvous server (first plan's salt) other than the primary,
//! so hedges of a tablet land on one server and keep its cache warm.
//!
//! It must never send, time or cancel anything (the caller does, and must
//! hedge only idempotent reads), read a clock, or hedge long scans: busy
//! timeouts, not hedges, move those.

use crate::profile::{Hedge, Profile};
use crate::rendezvous::rank;
use crate::select::{ServerId, ServerSnapshot};

/// Recorded samples after which every bucket count is halved.
pub const DECAY_EVERY_SAMPLES: u32 = 1024;
/// Samples (after decay) needed before a percentile hedge is trusted.
pub const HEDGE_SAMPLES_MIN: u64 = 32;
/// Sub-buckets per power of two (relative bucket width ≤ 12.5 %).
const SUB_BUCKETS: u64 = 8;
const EXACT: u64 = 2 * SUB_BUCKETS;
/// Number of histogram buckets covering 0 ..= u64::MAX microseconds.
pub const LATENCY_BUCKETS: usize = (EXACT + (64 - 4) * SUB_BUCKETS) as usize;

/// Recent latencies in a log-bucketed histogram with decay. 2 KiB, no allocation after `new`.
#[derive(Debug, Clone)]
pub struct LatencyTracker {
    counts: Vec<u32>,
    total: u64,
    since_decay: u32,
}

impl Default for LatencyTracker {
    fn default() -> Self {
        LatencyTracker::new()
    }
}

fn bucket_of(v: u64) -> usize {
    if v < EXACT {
        return v as usize;
    }
    let e = 63 - u64::from(v.leading_zeros()); // >= 4
    let sub = (v >> (e - 3)) & (SUB_BUCKETS - 1);
    (EXACT + (e - 4) * SUB_BUCKETS + sub) as usize
}

fn bucket_upper(i: usize) -> u64 {
    let i = i as u64;
    if i < EXACT {
        return i;
    }
    let e = (i - EXACT) / SUB_BUCKETS + 4;
    let sub = (i - EXACT) % SUB_BUCKETS;
    let lower = (SUB_BUCKETS + sub) << (e - 3);
    lower.saturating_add((1u64 << (e - 3)) - 1)
}

impl LatencyTracker {
    /// An empty tracker.
    pub fn new() -> LatencyTracker {
        LatencyTracker {
            counts: vec![0; LATENCY_BUCKETS],
            total: 0,
            since_decay: 0,
        }
    }

    /// Records one read's latency.
    pub fn record_us(&mut self, latency_us: u64) {
        let b = bucket_of(latency_us);
        self.counts[b] = self.counts[b].saturating_add(1);
        self.total += 1;
        self.since_decay += 1;
        if self.since_decay >= DECAY_EVERY_SAMPLES {
            self.since_decay = 0;
            self.total = 0;
            for c in &mut self.counts {
                *c /= 2;
                self.total += u64::from(*c);
            }
        }
    }

    /// Samples currently weighing in the histogram.
    pub fn samples(&self) -> u64 {
        self.total
    }

    /// Upper bound of the bucket holding the `percentile`-th latency (0–100),
    /// or `None` with fewer than [`HEDGE_SAMPLES_MIN`] samples.
    pub fn percentile_us(&self, percentile: f64) -> Option<u64> {
        if self.total < HEDGE_SAMPLES_MIN || !(0.0..=100.0).contains(&percentile) {
            return None;
        }
        let rank = ((percentile / 100.0) * self.total as f64).ceil().max(1.0) as u64;
        let mut seen = 0u64;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += u64::from(c);
            if seen >= rank {
                return Some(bucket_upper(i));
            }
        }
        None
    }
}

/// A hedge to send: after `after_ms` without an answer, ask `server` too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HedgeDecision {
    /// Delay after the primary request, in ms.
    pub after_ms: u64,
    /// The second server: the tablet's best rendezvous server that is not the primary.
    pub server: ServerId,
}

/// Whether and how to hedge a small read of `tablet` sent to `primary`.
///
/// `None` when the profile has no hedge, the group has no other live server,
/// or a percentile hedge has too few samples yet.
pub fn hedge(
    profile: &Profile,
    tracker: &LatencyTracker,
    tablet: &[u8],
    servers: &ServerSnapshot,
    primary: &str,
) -> Option<HedgeDecision> {
    let after_ms = match profile.hedge.as_ref()? {
        Hedge::AfterMs { after_ms } => *after_ms,
        Hedge::AfterPercentile { percentile, min_ms } => {
            let us = tracker.percentile_us(*percentile)?;
            us.div_ceil(1_000).max(*min_ms).max(1)
        }
    };
    let group = servers.group(&profile.group);
    let salt = &profile.attempts[0].salt;
    let server = rank(tablet, salt, group)
        .into_iter()
        .map(|i| &group[i])
        .find(|s| s.as_str() != primary)?
        .clone();
    Some(HedgeDecision { after_ms, server })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Profiles;

    fn profile(hedge: &str) -> Profiles {
        Profiles::from_toml_str(&format!(
            "default = \"p\"\n[profiles.p]\nattempts = [ {{ servers = 3, busy_timeout_ms = 5 }} ]\nhedge = {hedge}\n"
        ))
        .unwrap()
    }

    #[test]
    fn buckets_are_monotone_and_tight() {
        let mut last = 0;
        for v in (0..100_000u64).chain([1 << 40, u64::MAX - 1, u64::MAX]) {
            let b = bucket_of(v);
            assert!(b >= last && b < LATENCY_BUCKETS);
            last = b;
            let up = bucket_upper(b);
            assert!(up >= v, "v={v} upper={up}");
            assert!(up as f64 <= v as f64 * 1.125 + 1.0, "v={v} upper={up}");
        }
    }

    #[test]
    fn percentile_tracks_samples_and_decays() {
        let mut t = LatencyTracker::new();
        assert_eq!(t.percentile_us(95.0), None);
        for i in 1..=1000u64 {
            t.record_us(i * 10); // 10 us .. 10 ms
        }
        let p95 = t.percentile_us(95.0).unwrap();
        assert!((9_500..=10_700).contains(&p95), "{p95}");
        let p50 = t.percentile_us(50.0).unwrap();
        assert!((5_000..=5_700).contains(&p50), "{p50}");
        // A shift to slow reads takes over after a few decay periods.
        for _ in 0..4 * DECAY_EVERY_SAMPLES {
            t.record_us(100_000);
        }
        let p50 = t.percentile_us(50.0).unwrap();
        assert!((100_000..=112_500).contains(&p50), "{p50}");
        assert!(t.samples() <= u64::from(2 * DECAY_EVERY_SAMPLES));
    }

    #[test]
    fn hedge_goes_to_the_next_rendezvous_server() {
        let p = profile("{ after_ms = 10 }");
        let snap = ServerSnapshot::with_group("default", (0..8).map(|i| format!("s{i}")));
        let g = snap.group("default");
        let order = rank(b"t", "", g);
        let first = &g[order[0]];
        let second = &g[order[1]];
        let t = LatencyTracker::new();
        let d = hedge(p.default_profile(), &t, b"t", &snap, first).unwrap();
        assert_eq!(
            d,
            HedgeDecision {
                after_ms: 10,
                server: second.clone()
            }
        );
        let d = hedge(p.default_profile(), &t, b"t", &snap, second).unwrap();
        assert_eq!(&d.server, first);
        let lone = ServerSnapshot::with_group("default", ["only"]);
        assert_eq!(hedge(p.default_profile(), &t, b"t", &lone, "only"), None);
        let none = Profiles::accumulo_default();
        assert_eq!(hedge(none.default_profile(), &t, b"t", &snap, first), None);
    }

    #[test]
    fn percentile_hedge_needs_samples_and_respects_min() {
        let p = profile("{ after_percentile = 95.0, min_ms = 2 }");
        let snap = ServerSnapshot::with_group("default", ["a", "b"]);
        let mut t = LatencyTracker::new();
        assert_eq!(hedge(p.default_profile(), &t, b"t", &snap, "a"), None);
        for _ in 0..100 {
            t.record_us(300);
        }
        let d = hedge(p.default_profile(), &t, b"t", &snap, "a").unwrap();
        assert_eq!(d.after_ms, 2, "floored at min_ms");
        for _ in 0..100 {
            t.record_us(40_000);
        }
        let d = hedge(p.default_profile(), &t, b"t", &snap, "a").unwrap();
        assert!((40..=46).contains(&d.after_ms), "{}", d.after_ms);
        assert_eq!(d.server, "b");
    }
}
