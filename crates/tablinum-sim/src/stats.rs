//! Summary statistics of latency samples and Spearman's rank correlation.
//!
//! Owns the arithmetic only; it must never know what the samples mean.

use serde::Serialize;

/// Count, mean, sample standard deviation, min, max and p99 of some samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Mean.
    pub avg: f64,
    /// Sample standard deviation (n − 1); 0 for fewer than two samples.
    pub sd: f64,
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// 99th percentile, nearest-rank.
    pub p99: f64,
}

impl Summary {
    /// Summarises `xs`; all fields are 0 when `xs` is empty.
    pub fn of(xs: &[f64]) -> Summary {
        if xs.is_empty() {
            return Summary {
                count: 0,
                avg: 0.0,
                sd: 0.0,
                min: 0.0,
                max: 0.0,
                p99: 0.0,
            };
        }
        let n = xs.len() as f64;
        let avg = xs.iter().sum::<f64>() / n;
        let sd = if xs.len() > 1 {
            (xs.iter().map(|x| (x - avg).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        let mut sorted = xs.to_vec();
        sorted.sort_by(f64::total_cmp);
        let rank = ((0.99 * n).ceil() as usize).clamp(1, sorted.len());
        Summary {
            count: xs.len(),
            avg,
            sd,
            min: sorted[0],
            max: sorted[sorted.len() - 1],
            p99: sorted[rank - 1],
        }
    }
}

/// Ranks 1..=n with ties given the average of the ranks they span.
pub fn ranks(xs: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..xs.len()).collect();
    order.sort_by(|&a, &b| xs[a].total_cmp(&xs[b]));
    let mut r = vec![0.0; xs.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && xs[order[j + 1]] == xs[order[i]] {
            j += 1;
        }
        let avg_rank = (i + j) as f64 / 2.0 + 1.0;
        for &k in &order[i..=j] {
            r[k] = avg_rank;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation with ties (Pearson's correlation of the
/// average ranks). Returns NaN if the lengths differ, fewer than two pairs
/// are given, or either side is constant.
pub fn spearman(a: &[f64], b: &[f64]) -> f64 {
    if a.len() != b.len() || a.len() < 2 {
        return f64::NAN;
    }
    let (ra, rb) = (ranks(a), ranks(b));
    let n = a.len() as f64;
    let ma = ra.iter().sum::<f64>() / n;
    let mb = rb.iter().sum::<f64>() / n;
    let mut cov = 0.0;
    let mut va = 0.0;
    let mut vb = 0.0;
    for (x, y) in ra.iter().zip(&rb) {
        cov += (x - ma) * (y - mb);
        va += (x - ma).powi(2);
        vb += (y - mb).powi(2);
    }
    if va == 0.0 || vb == 0.0 {
        return f64::NAN;
    }
    cov / (va * vb).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_basics() {
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]), 1.0);
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), -1.0);
        // Classic no-tie formula: 1 - 6 Σd² / (n(n²-1)); one adjacent swap of 6 -> 1 - 12/210.
        let r = spearman(
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[1.0, 2.0, 4.0, 3.0, 5.0, 6.0],
        );
        assert!((r - (1.0 - 12.0 / 210.0)).abs() < 1e-12, "{r}");
        assert!(spearman(&[1.0], &[1.0]).is_nan());
        assert!(spearman(&[1.0, 1.0], &[1.0, 2.0]).is_nan());
        assert!(spearman(&[1.0, 2.0], &[1.0]).is_nan());
    }

    #[test]
    fn spearman_with_ties() {
        assert_eq!(ranks(&[53.0, 51.0, 53.0, 92.0]), vec![2.5, 1.0, 2.5, 4.0]);
        // Tied reported values vs a strict simulated order.
        let r = spearman(
            &[548.0, 92.0, 60.0, 53.0, 53.0, 51.0],
            &[500.0, 90.0, 61.0, 54.0, 52.0, 50.0],
        );
        assert!(r > 0.98 && r < 1.0, "{r}");
    }

    #[test]
    fn summary() {
        let s = Summary::of(&[1.0, 2.0, 3.0, 4.0]);
        assert_eq!(s.avg, 2.5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 4.0);
        assert_eq!(s.p99, 4.0);
        assert!((s.sd - 1.2909944487358056).abs() < 1e-12);
        let xs: Vec<f64> = (1..=1000).map(f64::from).collect();
        assert_eq!(Summary::of(&xs).p99, 990.0);
        assert_eq!(Summary::of(&[]).count, 0);
    }
}
