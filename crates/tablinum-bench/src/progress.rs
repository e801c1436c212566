//! What a person watching a run sees on stderr.
//!
//! Owns the `indicatif` progress bar (drawn only when stderr is a terminal; it
//! hides itself otherwise) and the one-line YCSB-style status printed every
//! report interval whether or not a terminal is attached. It must never write
//! to stdout (reserved for command output such as compare tables) and never
//! decide anything about the run.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::stats::Interval;
use crate::workload::Op;

/// How often the bar is redrawn at most, per second.
pub const PROGRESS_REDRAWS_PER_S_MAX: u8 = 10;

/// The bar and the status lines of one phase of a run.
pub struct Progress {
    bar: ProgressBar,
    enabled: bool,
}

impl Progress {
    /// A phase of `len` units (seconds or ops, named by `unit`). With
    /// `enabled = false` nothing at all is printed.
    pub fn new(enabled: bool, len: u64, unit: &str, phase: &str) -> Progress {
        let target = if enabled {
            ProgressDrawTarget::stderr_with_hz(PROGRESS_REDRAWS_PER_S_MAX)
        } else {
            ProgressDrawTarget::hidden()
        };
        let bar = ProgressBar::with_draw_target(Some(len), target);
        let template = format!(
            "{{prefix}} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} {unit} (eta {{eta}}) {{msg}}"
        );
        if let Ok(style) = ProgressStyle::with_template(&template) {
            bar.set_style(style);
        }
        bar.set_prefix(phase.to_string());
        Progress { bar, enabled }
    }

    /// Moves the bar to `pos` units.
    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    /// Sets the text after the bar.
    pub fn set_message(&self, msg: String) {
        self.bar.set_message(msg);
    }

    /// Prints a line on stderr above the bar (plain `eprintln` when the bar is hidden).
    pub fn line(&self, text: &str) {
        if !self.enabled {
            return;
        }
        if self.bar.is_hidden() {
            eprintln!("{text}");
        } else {
            self.bar.println(text);
        }
    }

    /// Removes the bar.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

/// The YCSB-style status line of an interval:
/// `10 sec: 123456 ops; 12345.6 ops/s; p99 get 812 us, put 2310 us; 0 failed`.
pub fn status_line(interval: &Interval, total_ops: u64) -> String {
    let e = interval.elapsed_s;
    let elapsed = if (e - e.round()).abs() < 0.05 {
        format!("{e:.0}")
    } else {
        format!("{e:.1}")
    };
    let mut line = format!(
        "{elapsed} sec: {} ops; {:.1} ops/s",
        total_ops,
        interval.ops_per_sec()
    );
    let p99: Vec<String> = interval
        .ops
        .iter()
        .filter(|o| o.successful > 0)
        .map(|o| format!("{} {} us", o.op.name(), o.latency_us.p99))
        .collect();
    if !p99.is_empty() {
        line.push_str("; p99 ");
        line.push_str(&p99.join(", "));
    }
    let nf: u64 = interval
        .ops
        .iter()
        .filter(|o| matches!(o.op, Op::Get | Op::Head))
        .map(|o| o.not_found)
        .sum();
    if nf > 0 {
        line.push_str(&format!("; {nf} not found"));
    }
    line.push_str(&format!("; {} failed", interval.failed));
    line
}
