//! The window policy: how many unacknowledged batches a tablet stream may
//! have in flight. Pure functions of the query and what was observed, so
//! they can be unit tested and simulated.
//!
//! Never blocks, never allocates, never reads a clock.

/// CouchDB's default `stream_limit`, in batches (one row per batch there).
pub const STREAM_LIMIT_DEFAULT_BATCHES: u32 = 5;
/// Smallest window an adaptive stream starts with, batches.
pub const ADAPTIVE_WINDOW_MIN_BATCHES: u32 = 2;
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
/// one tablet supplies if rows spread evenly, at least one. `hint` is a
/// learned start from earlier queries ([`after_cancel`]), if any.
pub fn initial_window(
    mode: WindowMode,
    skip: u64,
    limit: u64,
    q: u32,
    rows_per_batch: u32,
    hint: Option<u32>,
) -> u32 {
    match mode {
        WindowMode::Fixed(n) => n.clamp(1, WINDOW_BATCHES_MAX),
        WindowMode::Adaptive => {
            let need_rows = skip.saturating_add(limit).div_ceil(u64::from(q.max(1)));
            let need = need_rows.div_ceil(u64::from(rows_per_batch.max(1))).max(1);
            let need = u32::try_from(need).unwrap_or(WINDOW_BATCHES_MAX);
            // At least two batches: one being consumed while the next is in
            // flight. With one, every batch costs a stall (measured: 77
            // stalls per 100-row query over 192 tablets).
            hint.map_or(need, |h| h.min(need))
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

/// The start window for the next query on the same table after this one
/// threw away `wasted_rows` over `q` tablets: the per-tablet waste in
/// batches comes off the start, never below one.
pub fn after_cancel(start: u32, wasted_rows: u64, q: u32, rows_per_batch: u32) -> u32 {
    let per_tablet_batches = wasted_rows / u64::from(q.max(1)) / u64::from(rows_per_batch.max(1));
    let cut = u32::try_from(per_tablet_batches).unwrap_or(u32::MAX);
    start.saturating_sub(cut).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_starts_from_the_need_per_tablet() {
        // 1000 rows over 192 tablets: 6 rows each, one batch of 100 rows,
        // but never fewer than two batches.
        assert_eq!(
            initial_window(WindowMode::Adaptive, 0, 1000, 192, 100, None),
            2
        );
        // 1000 rows over 8 tablets, batches of 10 rows: 13 batches each.
        assert_eq!(
            initial_window(WindowMode::Adaptive, 0, 1000, 8, 10, None),
            13
        );
        assert_eq!(
            initial_window(WindowMode::Adaptive, 500, 500, 8, 10, Some(4)),
            4
        );
        assert_eq!(
            initial_window(WindowMode::Adaptive, 0, 10, 8, 10, Some(1)),
            ADAPTIVE_WINDOW_MIN_BATCHES
        );
        assert_eq!(
            initial_window(WindowMode::Fixed(10), 0, 1000, 8, 10, Some(4)),
            10
        );
        assert_eq!(initial_window(WindowMode::Fixed(0), 0, 1, 1, 1, None), 1);
        assert_eq!(
            initial_window(WindowMode::Adaptive, u64::MAX, u64::MAX, 1, 1, None),
            WINDOW_BATCHES_MAX
        );
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
    fn waits_grow_and_waste_shrinks() {
        assert_eq!(after_wait(WindowMode::Adaptive, 3), 6);
        assert_eq!(
            after_wait(WindowMode::Adaptive, WINDOW_BATCHES_MAX),
            WINDOW_BATCHES_MAX
        );
        assert_eq!(after_wait(WindowMode::Fixed(5), 5), 5);
        assert_eq!(after_cancel(8, 8 * 3 * 10, 8, 10), 5);
        assert_eq!(after_cancel(2, 1_000_000, 8, 10), 1);
    }
}
