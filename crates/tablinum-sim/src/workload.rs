//! The four scan workloads of the report, as entry-count distributions.
//!
//! Owns [`TestKind`] and the samplers of entries read and returned per scan,
//! fitted to the statistics the report prints for each test (see
//! [`TestKind::reported_entries`]). Entries read follow a gamma distribution
//! truncated (by resampling) to the report's min/max, with shape and scale
//! chosen so that the truncated mean and standard deviation match; for the
//! grep tests, entries returned are a binomial thinning of entries read. It
//! must never know about servers, time or selection.

use serde::Serialize;

/// Which of the report's four tables a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TestKind {
    /// Large scans: ~36.7k entries read and returned, one tablet, 193 clients.
    Large,
    /// Grep over one tablet: large reads, an iterator keeps ~0.73 % of entries.
    Grep,
    /// Grep over 5 tablets: 2.5× more data read per scan.
    Grep5,
    /// Small scans: ~184 entries, one tablet, 721 clients.
    Small,
}

/// Mean, standard deviation, min and max of a per-scan entry count.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct EntryStats {
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub sd: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
}

/// Entries one scan reads server side and returns to the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanEntries {
    /// Entries read (and passed through the iterator stack).
    pub read: u64,
    /// Entries returned to the client.
    pub returned: u64,
}

/// Large-scan read distribution (gamma shape, scale), fitted so that after
/// truncation to [32, 134723] mean ≈ 36713 and sd ≈ 33438.
const LARGE_SHAPE: f64 = 0.77;
const LARGE_SCALE: f64 = 63_378.0;
const LARGE_MIN: f64 = 32.0;
const LARGE_MAX: f64 = 134_723.0;
/// Small-scan distribution: after truncation to [0, 715], mean ≈ 184, sd ≈ 158.
const SMALL_SHAPE: f64 = 1.04;
const SMALL_SCALE: f64 = 197.5;
const SMALL_MAX: f64 = 715.0;
/// Grep keeps 269.519 / 36712.65 of the entries it reads.
const GREP_KEEP: f64 = 269.519 / 36_712.65;
/// The 5-tablet grep reads 2.5× more (fewer ranges clipped at tablet ends).
const GREP5_READ_FACTOR: f64 = 2.5;
/// The 5-tablet grep keeps 688.579 / (2.5 × 36712.65).
const GREP5_KEEP: f64 = 688.579 / (GREP5_READ_FACTOR * 36_712.65);

impl TestKind {
    /// The name used in tables and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TestKind::Large => "large",
            TestKind::Grep => "grep",
            TestKind::Grep5 => "grep5",
            TestKind::Small => "small",
        }
    }

    /// Tablets the clients' ranges fall in.
    pub fn tablets(self) -> u32 {
        match self {
            TestKind::Grep5 => 5,
            _ => 1,
        }
    }

    /// Whether scans run the CPU-heavy grep iterator.
    pub fn grep(self) -> bool {
        matches!(self, TestKind::Grep | TestKind::Grep5)
    }

    /// The report's statistics of entries returned per scan.
    pub fn reported_entries(self) -> EntryStats {
        match self {
            TestKind::Large => EntryStats {
                avg: 36_712.65,
                sd: 33_438.25,
                min: 32.0,
                max: 134_723.0,
            },
            TestKind::Grep => EntryStats {
                avg: 269.519,
                sd: 242.82,
                min: 0.0,
                max: 1074.0,
            },
            TestKind::Grep5 => EntryStats {
                avg: 688.579,
                sd: 593.19,
                min: 0.0,
                max: 2836.0,
            },
            TestKind::Small => EntryStats {
                avg: 184.171,
                sd: 158.85,
                min: 0.0,
                max: 715.0,
            },
        }
    }

    /// Draws one scan's entry counts.
    pub fn sample(self, rng: &mut fastrand::Rng) -> ScanEntries {
        match self {
            TestKind::Large => {
                let read = large_read(rng);
                ScanEntries {
                    read,
                    returned: read,
                }
            }
            TestKind::Grep => {
                let read = large_read(rng);
                ScanEntries {
                    read,
                    returned: binomial_approx(rng, read, GREP_KEEP),
                }
            }
            TestKind::Grep5 => {
                let read = (large_read(rng) as f64 * GREP5_READ_FACTOR).round() as u64;
                ScanEntries {
                    read,
                    returned: binomial_approx(rng, read, GREP5_KEEP),
                }
            }
            TestKind::Small => {
                let n =
                    truncated_gamma(rng, SMALL_SHAPE, SMALL_SCALE, 0.0, SMALL_MAX).round() as u64;
                ScanEntries {
                    read: n,
                    returned: n,
                }
            }
        }
    }
}

fn large_read(rng: &mut fastrand::Rng) -> u64 {
    truncated_gamma(rng, LARGE_SHAPE, LARGE_SCALE, LARGE_MIN, LARGE_MAX).round() as u64
}

/// Standard normal by Box–Muller.
pub(crate) fn normal(rng: &mut fastrand::Rng) -> f64 {
    let u1 = 1.0 - rng.f64(); // (0, 1]
    let u2 = rng.f64();
    (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
}

/// Gamma(shape, scale) by Marsaglia–Tsang (with the shape < 1 boost).
pub(crate) fn gamma(rng: &mut fastrand::Rng, shape: f64, scale: f64) -> f64 {
    if shape < 1.0 {
        let u = 1.0 - rng.f64();
        return gamma(rng, shape + 1.0, scale) * u.powf(1.0 / shape);
    }
    let d = shape - 1.0 / 3.0;
    let c = 1.0 / (9.0 * d).sqrt();
    loop {
        let x = normal(rng);
        let v = 1.0 + c * x;
        if v <= 0.0 {
            continue;
        }
        let v = v * v * v;
        let u = 1.0 - rng.f64();
        if u.ln() < 0.5 * x * x + d - d * v + d * v.ln() {
            return d * v * scale;
        }
    }
}

fn truncated_gamma(rng: &mut fastrand::Rng, shape: f64, scale: f64, min: f64, max: f64) -> f64 {
    loop {
        let x = gamma(rng, shape, scale);
        if (min..=max).contains(&x) {
            return x;
        }
    }
}

/// Binomial(n, p) by its normal approximation (n·p is in the hundreds here).
fn binomial_approx(rng: &mut fastrand::Rng, n: u64, p: f64) -> u64 {
    let mean = n as f64 * p;
    let sd = (mean * (1.0 - p)).sqrt();
    (mean + sd * normal(rng)).round().clamp(0.0, n as f64) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(xs: &[f64]) -> EntryStats {
        let n = xs.len() as f64;
        let avg = xs.iter().sum::<f64>() / n;
        let sd = (xs.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
        EntryStats {
            avg,
            sd,
            min: xs.iter().cloned().fold(f64::INFINITY, f64::min),
            max: xs.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        }
    }

    #[test]
    fn fitted_distributions_match_the_report() {
        let mut rng = fastrand::Rng::with_seed(42);
        for kind in [
            TestKind::Large,
            TestKind::Grep,
            TestKind::Grep5,
            TestKind::Small,
        ] {
            let xs: Vec<f64> = (0..40_000)
                .map(|_| kind.sample(&mut rng).returned as f64)
                .collect();
            let got = stats(&xs);
            let want = kind.reported_entries();
            assert!(
                (got.avg / want.avg - 1.0).abs() < 0.04,
                "{kind:?} avg {got:?} vs {want:?}"
            );
            assert!(
                (got.sd / want.sd - 1.0).abs() < 0.08,
                "{kind:?} sd {got:?} vs {want:?}"
            );
            assert!(got.min >= want.min, "{kind:?} {got:?}");
            assert!(got.max <= want.max * 1.1, "{kind:?} {got:?}");
        }
        let reads: Vec<f64> = (0..20_000)
            .map(|_| TestKind::Grep5.sample(&mut rng).read as f64)
            .collect();
        let r = stats(&reads);
        assert!((r.avg / (2.5 * 36_712.65) - 1.0).abs() < 0.04, "{r:?}");
    }
}
