//! Statistics over a scenario's repeats: mean, sample standard deviation,
//! and the reports' ratio with its 3 std-dev band.
//!
//! Owns [`Stat`] (one metric of one cell over its repeats, as `scenario.json`
//! keeps it) and the few helpers every scenario's table needs; the ratio and
//! its band are [`mod@crate::compare`]'s [`Ratio`] (`r = m_b / m_a`, 3σ of `r` in
//! percent = `3·√(cv_a² + cv_b²)`, the method of the CouchDB stream-limit
//! report and of `bench compare`), re-exported here so every scenario uses
//! the one definition. Pure functions: they must never read, write or run
//! anything.

use serde::{Deserialize, Serialize};

pub use crate::compare::{Ratio, Sample, SIGMAS};

/// Mean, sample standard deviation and the per-repeat values of one metric.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    /// Arithmetic mean over the successful repeats (0 when there are none).
    pub mean: f64,
    /// Sample standard deviation (n − 1); 0 for fewer than two values.
    pub sd: f64,
    /// One value per successful repeat, in run order.
    pub values: Vec<f64>,
}

impl Stat {
    /// The statistics of `values`.
    pub fn of(values: Vec<f64>) -> Stat {
        let s = Sample::of(&values);
        Stat {
            mean: s.mean,
            sd: s.sd,
            values,
        }
    }

    /// As a [`Sample`] for ratios.
    pub fn sample(&self) -> Sample {
        Sample::of(&self.values)
    }

    /// Standard deviation in percent of the mean (0 when the mean is 0).
    pub fn sd_pct(&self) -> f64 {
        self.sample().cv() * 100.0
    }
}

/// `other / baseline` with its 3 std-dev band, or `None` when either side
/// has no value or the baseline's mean is 0.
pub fn ratio(baseline: &Sample, other: &Sample) -> Option<Ratio> {
    (baseline.n > 0 && other.n > 0 && baseline.mean != 0.0).then(|| Ratio::of(baseline, other))
}

/// The mean of `values` weighted by `weights` (0 when the weights sum to 0):
/// per-request figures of several runs, weighted by their requests.
pub fn weighted_mean(pairs: impl IntoIterator<Item = (f64, f64)>) -> f64 {
    let (sum, weight) = pairs
        .into_iter()
        .fold((0.0, 0.0), |(s, w), (v, x)| (s + v * x, w + x));
    if weight > 0.0 {
        sum / weight
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reports_three_sd_band() {
        let a = Stat::of(vec![99.0, 101.0]);
        assert_eq!(a.mean, 100.0);
        assert!((a.sd - 2f64.sqrt()).abs() < 1e-12);
        assert!((a.sd_pct() - 2f64.sqrt()).abs() < 1e-12);
        let b = Stat::of(vec![148.5, 151.5]);
        let r = ratio(&a.sample(), &b.sample()).unwrap_or_else(|| panic!("ratio"));
        assert!((r.ratio - 1.5).abs() < 1e-12);
        // 3·√(cv_a² + cv_b²) in percent, cv_a = cv_b = √2 %.
        assert!((r.three_sigma_pct.unwrap_or(0.0) - 6.0).abs() < 1e-9);
        assert_eq!(r.significant, Some(true));
        // The report's own row: 0.12 % and 0.56 % give 1.718 %.
        let cv = |pct: f64| Sample {
            n: 10,
            mean: 100.0,
            sd: pct,
        };
        let r = Ratio::of(&cv(0.12), &cv(0.56));
        assert!((r.three_sigma_pct.unwrap_or(0.0) - 1.718).abs() < 1e-3);
        assert!(ratio(&Sample::of(&[]), &b.sample()).is_none());
        assert!(ratio(&Sample::of(&[0.0]), &b.sample()).is_none());
        assert_eq!(Stat::of(vec![]).mean, 0.0);
    }

    #[test]
    fn weighted_means_weigh_by_requests() {
        assert_eq!(weighted_mean([(10.0, 1.0), (20.0, 3.0)]), 17.5);
        assert_eq!(weighted_mean([(10.0, 0.0)]), 0.0);
        assert_eq!(weighted_mean(std::iter::empty()), 0.0);
    }
}
