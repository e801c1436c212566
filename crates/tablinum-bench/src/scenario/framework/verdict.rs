//! Targets a scenario checks, and their verdicts.
//!
//! Owns the vocabulary of a target's outcome: a [`Check`] is one measured
//! figure against one threshold (`adaptive / best fixed at q=8 = 0.982 ≥
//! 0.951`), a [`TargetCheck`] is a named target made of checks with its
//! [`Verdict`] (PASS when every check passes, MISS when one does not, not
//! evaluated when the cells it needs were not measured), and the markdown
//! line the report prints. [`ratio_at_least`] is the reports' rule for "not
//! slower": a ratio passes when it is not below its floor by more than its 3
//! std-dev band. Pure: it must never measure, and never decide a threshold
//! (scenarios own their targets' numbers).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::output::thousands;
use super::stats::{Ratio, Sample};

/// Whether a target was met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every check passed.
    Pass,
    /// At least one check failed.
    Miss,
    /// Nothing could be checked (the cells it needs were not run).
    NotEvaluated,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Pass => "PASS",
            Verdict::Miss => "MISS",
            Verdict::NotEvaluated => "not evaluated",
        })
    }
}

/// Which side of its threshold a measured figure must be on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// `measured ≥ threshold`.
    AtLeast,
    /// `measured ≤ threshold`.
    AtMost,
}

/// One measured figure against one threshold.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    /// What was measured (`q=8: adaptive / best fixed (5 × 32) rows/s`).
    pub what: String,
    /// The figure.
    pub measured: f64,
    /// Which side of the threshold passes.
    pub bound: Bound,
    /// The threshold it was held to.
    pub threshold: f64,
    /// How the threshold came about (`1 − 3σ 4.9%`), if not a plain number.
    pub basis: Option<String>,
    /// `measured` is on the right side of `threshold`.
    pub pass: bool,
}

impl Check {
    /// `measured` held to `threshold`.
    pub fn new(what: impl Into<String>, measured: f64, bound: Bound, threshold: f64) -> Check {
        let pass = match bound {
            Bound::AtLeast => measured >= threshold,
            Bound::AtMost => measured <= threshold,
        };
        Check {
            what: what.into(),
            measured,
            bound,
            threshold,
            basis: None,
            pass,
        }
    }

    /// The same, saying where the threshold comes from.
    pub fn with_basis(mut self, basis: impl Into<String>) -> Check {
        self.basis = Some(basis.into());
        self
    }

    /// `q=8: adaptive / best fixed = 0.982 ≥ 0.951 (1 − 3σ 4.9%): PASS`.
    pub fn line(&self) -> String {
        let sign = match self.bound {
            Bound::AtLeast => "≥",
            Bound::AtMost => "≤",
        };
        format!(
            "{} = {} {sign} {}{}: {}",
            self.what,
            figure(self.measured),
            figure(self.threshold),
            self.basis
                .as_ref()
                .map_or_else(String::new, |b| format!(" ({b})")),
            if self.pass { "PASS" } else { "MISS" }
        )
    }
}

/// Three decimals below 10, thousands separators above.
fn figure(x: f64) -> String {
    if x.abs() < 10.0 {
        format!("{x:.3}")
    } else {
        thousands(x, 1)
    }
}

/// `b` (measured against the baseline `a`) is at least `floor × a`, allowing
/// the ratio's 3 std-dev band when both sides have two repeats: passes when
/// `b / a ≥ floor · (1 − 3σ%)` (never below 0: a band of 100% or more
/// cannot fail, and the line shows the band so the reader sees why), else
/// when `b / a ≥ floor`.
pub fn ratio_at_least(what: impl Into<String>, a: &Sample, b: &Sample, floor: f64) -> Check {
    let r = Ratio::of(a, b);
    match r.three_sigma_pct {
        Some(band) => Check::new(
            what,
            r.ratio,
            Bound::AtLeast,
            (floor * (1.0 - band / 100.0)).max(0.0),
        )
        .with_basis(if floor == 1.0 {
            format!("1 − 3σ {band:.1}%")
        } else {
            format!("{floor} × (1 − 3σ {band:.1}%)")
        }),
        None => Check::new(what, r.ratio, Bound::AtLeast, floor)
            .with_basis("no 3σ band: fewer than two repeats"),
    }
}

/// A target: its checks and their verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// Short id (`a`, `fair`).
    pub id: String,
    /// What it asks.
    pub description: String,
    /// PASS, MISS or not evaluated.
    pub verdict: Verdict,
    /// Every figure checked.
    #[serde(default)]
    pub checks: Vec<Check>,
    /// Parts that could not be checked (`q=96: adaptive not measured`).
    #[serde(default)]
    pub missing: Vec<String>,
    /// The numbers behind the verdict, one line.
    pub detail: String,
}

impl TargetCheck {
    /// The target `id` from its checks: not evaluated without any, MISS when
    /// one fails, else PASS. `missing` is listed but does not fail it.
    pub fn of(
        id: impl Into<String>,
        description: impl Into<String>,
        checks: Vec<Check>,
        missing: Vec<String>,
    ) -> TargetCheck {
        let verdict = if checks.is_empty() {
            Verdict::NotEvaluated
        } else if checks.iter().all(|c| c.pass) {
            Verdict::Pass
        } else {
            Verdict::Miss
        };
        let detail = checks
            .iter()
            .map(Check::line)
            .chain(missing.iter().map(|m| format!("{m}: not evaluated")))
            .collect::<Vec<_>>()
            .join("; ");
        TargetCheck {
            id: id.into(),
            description: description.into(),
            verdict,
            checks,
            missing,
            detail,
        }
    }

    /// `- (a) description: **PASS** — detail`.
    pub fn markdown_line(&self) -> String {
        format!(
            "- ({}) {}: **{}** — {}\n",
            self.id, self.description, self.verdict, self.detail
        )
    }
}

/// Every target's line.
pub fn targets_markdown(targets: &[TargetCheck]) -> String {
    targets.iter().map(TargetCheck::markdown_line).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_their_checks() {
        let ok = Check::new("sent rows/req", 1100.0, Bound::AtMost, 1500.0);
        let bad = Check::new("ratio", 1.2, Bound::AtLeast, 1.5);
        assert!(ok.pass && !bad.pass);
        assert_eq!(ok.line(), "sent rows/req = 1,100.0 ≤ 1,500.0: PASS");
        assert_eq!(bad.line(), "ratio = 1.200 ≥ 1.500: MISS");
        let t = TargetCheck::of("a", "x", vec![ok.clone()], vec!["q=96".into()]);
        assert_eq!(t.verdict, Verdict::Pass);
        assert_eq!(
            t.detail,
            "sent rows/req = 1,100.0 ≤ 1,500.0: PASS; q=96: not evaluated"
        );
        assert_eq!(
            TargetCheck::of("a", "x", vec![ok, bad], vec![]).verdict,
            Verdict::Miss
        );
        let none = TargetCheck::of("a", "x", vec![], vec!["q=8".into()]);
        assert_eq!(none.verdict, Verdict::NotEvaluated);
        assert!(none
            .markdown_line()
            .starts_with("- (a) x: **not evaluated** — q=8: not evaluated"));
        let j = serde_json::to_value(&none).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(j["verdict"], "not_evaluated");
    }

    #[test]
    fn ratios_pass_within_their_three_sd_band() {
        let s = |m: f64| Sample {
            n: 3,
            mean: m,
            sd: m * 0.01,
        };
        // 2% slower with a 3σ band of 4.2%: within noise.
        let c = ratio_at_least("r", &s(100.0), &s(98.0), 1.0);
        assert!(c.pass, "{}", c.line());
        assert!(c.line().contains("(1 − 3σ 4.2%)"), "{}", c.line());
        // 10% slower: beyond it.
        assert!(!ratio_at_least("r", &s(100.0), &s(90.0), 1.0).pass);
        // One repeat: no band, the plain floor.
        let one = Sample {
            n: 1,
            mean: 100.0,
            sd: 0.0,
        };
        let c = ratio_at_least("r", &one, &s(99.9), 1.0);
        assert!(!c.pass && c.threshold == 1.0, "{}", c.line());
        assert!(ratio_at_least("r", &s(100.0), &s(151.0), 1.5).pass);
        // A band wider than the ratio: the floor stops at 0.
        let noisy = Sample {
            n: 2,
            mean: 100.0,
            sd: 40.0,
        };
        let c = ratio_at_least("r", &noisy, &noisy, 1.0);
        assert_eq!(c.threshold, 0.0, "{}", c.line());
        assert!(
            c.pass && c.line().contains("(1 − 3σ 169.7%)"),
            "{}",
            c.line()
        );
    }
}
