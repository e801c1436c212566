//! Parameter presets and argument checks shared by every scenario.
//!
//! Owns [`Preset`] (a scenario's `--quick` and full values side by side, so
//! the two modes are declared once, next to each other) and the checks every
//! scenario's arguments go through (ranges, run lengths, lists without
//! duplicates), each failing with [`BenchError::Usage`] naming the argument.
//! It must never read the command line or the environment itself, and never
//! print: a scenario checks its arguments before anything runs or is created.

use std::fmt::Display;

use crate::error::BenchError;

/// A scenario's values for `--quick` and for a full run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset<T> {
    /// With `--quick`.
    pub quick: T,
    /// Without.
    pub full: T,
}

impl<T: Clone> Preset<T> {
    /// The values of the mode.
    pub fn pick(&self, quick: bool) -> T {
        if quick {
            self.quick.clone()
        } else {
            self.full.clone()
        }
    }
}

/// [`BenchError::Usage`] for `arg`.
pub fn usage(arg: &'static str, reason: impl Into<String>) -> BenchError {
    BenchError::Usage {
        arg,
        reason: reason.into(),
    }
}

/// `value` when it is in `lo..=hi`.
pub fn check_range<T: PartialOrd + Display + Copy>(
    arg: &'static str,
    value: T,
    lo: T,
    hi: T,
) -> Result<T, BenchError> {
    if value < lo || value > hi {
        return Err(usage(arg, format!("{value} is not in {lo}..={hi}")));
    }
    Ok(value)
}

/// A length of time in seconds: finite, at most `max_s`, above 0 (or at
/// least 0 with `zero_ok`).
pub fn check_seconds(
    arg: &'static str,
    seconds: f64,
    zero_ok: bool,
    max_s: f64,
) -> Result<f64, BenchError> {
    let ok = seconds.is_finite()
        && seconds <= max_s
        && if zero_ok {
            seconds >= 0.0
        } else {
            seconds > 0.0
        };
    if !ok {
        let open = if zero_ok { "[0" } else { "(0" };
        return Err(usage(
            arg,
            format!("{seconds} is not in {open}, {max_s}] seconds"),
        ));
    }
    Ok(seconds)
}

/// Fails when an item of `items` is listed twice.
pub fn check_distinct<T: PartialEq + Display>(
    arg: &'static str,
    items: &[T],
) -> Result<(), BenchError> {
    for (i, x) in items.iter().enumerate() {
        if items[..i].contains(x) {
            return Err(usage(arg, format!("{x} is listed twice")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_pick_the_mode_and_checks_name_the_argument() {
        let p = Preset { quick: 3, full: 10 };
        assert_eq!((p.pick(true), p.pick(false)), (3, 10));
        assert_eq!(check_range("--repeat", 3, 1, 100).ok(), Some(3));
        let e = check_range("--repeat", 0, 1, 100)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("argument `--repeat`: 0 is not in 1..=100")
        );
        assert!(check_seconds("--duration-s", 0.0, false, 10.0).is_err());
        assert!(check_seconds("--warmup-s", 0.0, true, 10.0).is_ok());
        assert!(check_seconds("--warmup-s", -1.0, true, 10.0).is_err());
        assert!(check_seconds("--warmup-s", f64::NAN, true, 10.0).is_err());
        assert!(check_seconds("--duration-s", 11.0, false, 10.0).is_err());
        assert!(check_distinct("--q", &[8, 32]).is_ok());
        let e = check_distinct("--q", &[8, 8]).err().map(|e| e.to_string());
        assert_eq!(e.as_deref(), Some("argument `--q`: 8 is listed twice"));
    }
}
