//! The window policy: how many unacknowledged batches a tablet stream may
//! have in flight. Pure functions of the query and what was observed, so
//! they can be unit tested and simulated.
//!
//! Never blocks, never allocates, never reads a clock.

/// CouchDB's default `stream_limit`, in batches (one row per batch there).
pub const STREAM_LIMIT_DEFAULT_BATCHES: u32 = 5;
/// Smallest window an adaptive stream starts with, batches: one batch
/// being consumed while the next is in flight (with one, every batch costs
/// a stall: measured 77 stalls per 100-row query over 192 tablets).
pub const ADAPTIVE_WINDOW_MIN_BATCHES: u32 = 2;
/// How many times its expected share of the rows a query still needs an
/// adaptive stream may have in flight near the end of the query
/// ([`tail_cap`]). 1.0 stalls more; 2.0 sends more (a model of the merge
/// at q = 8..192: 1.5 costs under one stall per query).
pub const TAIL_FACTOR: f64 = 1.5;
/// Largest window any stream may have, batches.
pub const WINDOW_BATCHES_MAX: u32 = 1024;

/// How the window of a query's streams is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WindowMode {
    /// A fixed `stream_limit` for every tablet.
    Fixed(u32),
    /// Start from the query's need per tablet, grow on waits (the default).
    #[default]
    Adaptive,
}

impl WindowMode {
    /// Parses a stream limit as users write it: `adaptive`, or a number of
    /// batches in 1..=[`WINDOW_BATCHES_MAX`]. The error names the input.
    pub fn parse(s: &str) -> Result<WindowMode, String> {
        if s.eq_ignore_ascii_case("adaptive") {
            return Ok(WindowMode::Adaptive);
        }
        match s.parse::<u32>() {
            Ok(n) if (1..=WINDOW_BATCHES_MAX).contains(&n) => Ok(WindowMode::Fixed(n)),
            _ => Err(format!(
                "stream limit {s:?} is neither `adaptive` nor a number in 1..={WINDOW_BATCHES_MAX}"
            )),
        }
    }
}

/// The first window of each of `q` tablet streams for a query that needs
/// `skip + limit` rows, with batches of `rows_per_batch` rows: the batches
/// one tablet supplies if rows spread evenly, at least
/// [`ADAPTIVE_WINDOW_MIN_BATCHES`]. What a tablet does not need is cut at
/// the end of the query ([`tail_cap`]).
pub fn initial_window(mode: WindowMode, skip: u64, limit: u64, q: u32, rows_per_batch: u32) -> u32 {
    match mode {
        WindowMode::Fixed(n) => n.clamp(1, WINDOW_BATCHES_MAX),
        WindowMode::Adaptive => {
            let need_rows = skip.saturating_add(limit).div_ceil(u64::from(q.max(1)));
            let need = need_rows.div_ceil(u64::from(rows_per_batch.max(1)));
            u32::try_from(need)
                .unwrap_or(WINDOW_BATCHES_MAX)
                .clamp(ADAPTIVE_WINDOW_MIN_BATCHES, WINDOW_BATCHES_MAX)
        }
    }
}

/// The window after the merge had to wait for this tablet: doubled in
/// adaptive mode (the tablet is needed more than its share), unchanged when
/// fixed.
pub fn after_wait(mode: WindowMode, window: u32) -> u32 {
    match mode {
        WindowMode::Fixed(_) => window,
        WindowMode::Adaptive => window.saturating_mul(2).clamp(1, WINDOW_BATCHES_MAX),
    }
}

/// The largest window worth granting an adaptive stream when it
/// acknowledges a batch near the end of a query: its expected part of the
/// `remaining_rows` the query still needs, times [`TAIL_FACTOR`], in
/// batches of `batch_rows`, at least one. Its part is its share of the
/// rows merged so far (`stream_rows` of `merged_rows`), at least 1/`q`,
/// so a stream that supplies most rows (a range-partitioned table) keeps
/// its window. `None` when nothing is capped: fixed windows, or a query
/// without a limit (`remaining_rows == u64::MAX`).
pub fn tail_cap(
    mode: WindowMode,
    remaining_rows: u64,
    stream_rows: u64,
    merged_rows: u64,
    q: u32,
    batch_rows: u64,
) -> Option<u32> {
    if mode != WindowMode::Adaptive || remaining_rows == u64::MAX {
        return None;
    }
    let even = 1.0 / f64::from(q.max(1));
    let seen = if merged_rows == 0 {
        0.0
    } else {
        stream_rows as f64 / merged_rows as f64
    };
    let want = remaining_rows as f64 * even.max(seen).min(1.0) * TAIL_FACTOR;
    let batches = (want / batch_rows.max(1) as f64).ceil();
    // In 1..=WINDOW_BATCHES_MAX, so the cast cannot truncate.
    Some(batches.clamp(1.0, f64::from(WINDOW_BATCHES_MAX)) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_starts_from_the_need_per_tablet() {
        // 1000 rows over 192 tablets: 6 rows each, one batch of 100 rows,
        // but never fewer than two batches.
        assert_eq!(initial_window(WindowMode::Adaptive, 0, 1000, 192, 100), 2);
        // 1000 rows over 8 tablets, batches of 32 rows: 4 batches each.
        assert_eq!(initial_window(WindowMode::Adaptive, 0, 1000, 8, 32), 4);
        assert_eq!(initial_window(WindowMode::Adaptive, 500, 500, 8, 10), 13);
        assert_eq!(initial_window(WindowMode::Fixed(10), 0, 1000, 8, 10), 10);
        assert_eq!(initial_window(WindowMode::Fixed(0), 0, 1, 1, 1), 1);
        assert_eq!(
            initial_window(WindowMode::Adaptive, u64::MAX, u64::MAX, 1, 1),
            WINDOW_BATCHES_MAX
        );
    }

    #[test]
    fn the_tail_caps_windows_to_the_expected_need() {
        // Fixed windows and unlimited queries are never capped.
        assert_eq!(tail_cap(WindowMode::Fixed(5), 10, 1, 8, 8, 32), None);
        assert_eq!(tail_cap(WindowMode::Adaptive, u64::MAX, 1, 8, 8, 32), None);
        // 800 rows left over 8 even streams: 100 each, 150 with the
        // factor: 5 batches of 32.
        assert_eq!(tail_cap(WindowMode::Adaptive, 800, 50, 400, 8, 32), Some(5));
        // Near the end: one batch, never zero.
        assert_eq!(tail_cap(WindowMode::Adaptive, 40, 120, 960, 8, 32), Some(1));
        assert_eq!(tail_cap(WindowMode::Adaptive, 0, 120, 1000, 8, 32), Some(1));
        // A stream that supplied every row so far keeps a window for all
        // that is left.
        assert_eq!(
            tail_cap(WindowMode::Adaptive, 320, 680, 680, 8, 32),
            Some(15)
        );
        // Nothing merged yet: the even share.
        assert_eq!(tail_cap(WindowMode::Adaptive, 1000, 0, 0, 8, 125), Some(2));
        // Absurd inputs stay in range.
        assert_eq!(
            tail_cap(WindowMode::Adaptive, u64::MAX - 1, 1, 1, 1, 0),
            Some(WINDOW_BATCHES_MAX)
        );
        assert_eq!(tail_cap(WindowMode::Adaptive, 1, 5, 1, 0, 1), Some(2));
    }

    #[test]
    fn stream_limits_parse() {
        assert_eq!(WindowMode::parse("adaptive"), Ok(WindowMode::Adaptive));
        assert_eq!(WindowMode::parse("ADAPTIVE"), Ok(WindowMode::Adaptive));
        assert_eq!(WindowMode::parse("10"), Ok(WindowMode::Fixed(10)));
        for bad in ["0", "1025", "-1", "", "ten"] {
            assert!(
                WindowMode::parse(bad).unwrap_err().contains("stream limit"),
                "{bad}"
            );
        }
    }

    #[test]
    fn waits_grow_adaptive_windows_only() {
        assert_eq!(after_wait(WindowMode::Adaptive, 3), 6);
        assert_eq!(
            after_wait(WindowMode::Adaptive, WINDOW_BATCHES_MAX),
            WINDOW_BATCHES_MAX
        );
        assert_eq!(after_wait(WindowMode::Fixed(5), 5), 5);
    }
}
