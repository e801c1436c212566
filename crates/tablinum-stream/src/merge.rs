//! The coordinator's merge: many tablet streams in key order, with skip and
//! limit, a binary heap (O(log q) per row), cancellation of every stream the
//! moment the limit is met, and counts of rows returned and wasted.
//!
//! A batch is acknowledged when its last row has been consumed by the merge,
//! so a slow caller slows every tablet. In adaptive mode a stream's window
//! doubles each time the merge has to wait for it, and near the end of a
//! limited query an acknowledgement shrinks it to what the stream can still
//! be expected to supply ([`tail_cap`]). Never reorders rows of
//! one stream and never reads a stream it has cancelled.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::ops::ControlFlow;

use crate::channel::{Received, Receiver, StreamError};
use crate::window::{after_wait, tail_cap, WindowMode};
use crate::Row;

/// What a merged query asks for.
#[derive(Debug, Clone, Copy)]
pub struct MergeQuery {
    /// Rows to skip after merging.
    pub skip: u64,
    /// Rows to return after skipping (`u64::MAX`: all).
    pub limit: u64,
    /// Window policy of the streams (used to grow windows on waits).
    pub mode: WindowMode,
}

/// Counters of one merged query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Rows handed to the caller.
    pub rows_returned: u64,
    /// Rows consumed by `skip`.
    pub rows_skipped: u64,
    /// Rows sent by tablets but never used (buffered or queued at cancel).
    pub rows_wasted: u64,
    /// Times the merge had to wait for a tablet's next batch.
    pub waits: u64,
    /// Of those, waits after the tablet delivered its initial window: the
    /// tablet ran dry while it was needed (the ones that grow adaptive
    /// windows).
    pub stalls: u64,
    /// Acknowledgements that also shrank a stream's window near the end
    /// of the query ([`tail_cap`]).
    pub tail_caps: u64,
    /// Each stream's window when the query ended.
    pub final_windows: Vec<u32>,
}

/// One tablet stream as the merge sees it: the in-process [`Receiver`], or a
/// network stream that forwards acknowledgements to its server.
pub trait BatchSource {
    /// True when `recv` would not block.
    fn ready(&self) -> bool;
    /// The next batch, waiting up to the stream's idle timeout.
    fn recv(&self) -> Result<Received, StreamError>;
    /// One batch was consumed.
    fn ack(&self);
    /// Changes the window.
    fn set_window(&self, window: u32);
    /// One batch was consumed, and the window becomes `window` (one message
    /// where the transport allows).
    fn ack_with_window(&self, window: u32) {
        self.set_window(window);
        self.ack();
    }
    /// The current window.
    fn window(&self) -> u32;
    /// Cancels the stream; returns rows that arrived and were never consumed.
    fn cancel(&self) -> u64;
    /// The sort key of the row that follows the last batch received, if
    /// the producer announced it (taken: asked once per batch). The merge
    /// uses it as the stream's place in the heap until the next batch is
    /// needed, so it keeps emitting other streams' smaller rows instead of
    /// waiting. Must never be greater than the stream's next row.
    fn next_hint(&self) -> Option<Vec<u8>> {
        None
    }
}

impl BatchSource for Receiver {
    fn ready(&self) -> bool {
        Receiver::ready(self)
    }
    fn recv(&self) -> Result<Received, StreamError> {
        Receiver::recv(self)
    }
    fn ack(&self) {
        Receiver::ack(self)
    }
    fn set_window(&self, window: u32) {
        Receiver::set_window(self, window)
    }
    fn window(&self) -> u32 {
        Receiver::window(self)
    }
    fn cancel(&self) -> u64 {
        Receiver::cancel(self)
    }
}

struct Cursor<'a, S> {
    rx: &'a S,
    rows: VecDeque<Row>,
    done: bool,
    /// Batches received so far.
    received: u32,
    /// The window when the stream started: waits before that many batches
    /// arrived are the server still delivering the initial window, not the
    /// tablet being needed more than its share.
    initial: u32,
    /// Rows taken from this stream (skipped or returned).
    taken: u64,
    /// Rows of the largest batch received: the stream's batch size.
    batch_rows: u64,
}

impl<S: BatchSource> Cursor<'_, S> {
    /// Makes sure a row is buffered unless the stream ended.
    fn fill(&mut self, mode: WindowMode, stats: &mut MergeStats) -> Result<(), StreamError> {
        while self.rows.is_empty() && !self.done {
            if !self.rx.ready() {
                stats.waits += 1;
                if self.received >= self.initial {
                    stats.stalls += 1;
                    let w = after_wait(mode, self.rx.window());
                    if w != self.rx.window() {
                        self.rx.set_window(w);
                    }
                }
            }
            match self.rx.recv()? {
                Received::Batch(b) if b.is_empty() => {
                    self.received += 1;
                    self.rx.ack();
                }
                Received::Batch(b) => {
                    self.received += 1;
                    self.batch_rows = self.batch_rows.max(b.len() as u64);
                    self.rows = b.into();
                }
                Received::End => self.done = true,
            }
        }
        Ok(())
    }
}

/// Merges `streams` (each sorted by key, keys unique across streams) in key
/// order, handing rows to `out` after `skip`, until `limit` rows, the end,
/// or `out` answers `Break` (the caller wants no more: a closed pipe, a
/// client gone). Every stream is cancelled before returning, on success or
/// error.
pub fn merge<S: BatchSource>(
    streams: &[S],
    query: &MergeQuery,
    mut out: impl FnMut(Row) -> ControlFlow<()>,
) -> Result<MergeStats, StreamError> {
    let mut stats = MergeStats::default();
    let mut cursors: Vec<Cursor<'_, S>> = streams
        .iter()
        .map(|rx| Cursor {
            rx,
            rows: VecDeque::new(),
            done: false,
            received: 0,
            initial: rx.window(),
            taken: 0,
            batch_rows: 0,
        })
        .collect();
    let result = run(&mut cursors, query, &mut stats, &mut out);
    for c in &cursors {
        stats.rows_wasted += c.rows.len() as u64 + c.rx.cancel();
    }
    stats.final_windows = cursors.iter().map(|c| c.rx.window()).collect();
    result.map(|()| stats)
}

fn run<S: BatchSource>(
    cursors: &mut [Cursor<'_, S>],
    query: &MergeQuery,
    stats: &mut MergeStats,
    out: &mut impl FnMut(Row) -> ControlFlow<()>,
) -> Result<(), StreamError> {
    // Heap entries are (key, stream). A stream whose buffer is empty but
    // whose next key is known sits in the heap under that key (a
    // placeholder); its batch is waited for only when that key is the
    // smallest.
    let streams = cursors.len();
    let mut heap: BinaryHeap<Reverse<(Vec<u8>, usize)>> = BinaryHeap::with_capacity(streams);
    for (i, c) in cursors.iter_mut().enumerate() {
        c.fill(query.mode, stats)?;
        if let Some((k, _)) = c.rows.front() {
            heap.push(Reverse((k.clone(), i)));
        }
    }
    while stats.rows_returned < query.limit {
        let Some(Reverse((_, i))) = heap.pop() else {
            break;
        };
        let c = &mut cursors[i];
        if c.rows.is_empty() {
            // A placeholder reached the top: now the batch is needed.
            c.fill(query.mode, stats)?;
            if let Some((k, _)) = c.rows.front() {
                heap.push(Reverse((k.clone(), i)));
            }
            continue;
        }
        let Some(row) = c.rows.pop_front() else {
            continue;
        };
        c.taken += 1;
        if stats.rows_skipped < query.skip {
            stats.rows_skipped += 1;
        } else {
            stats.rows_returned += 1;
            if out(row).is_break() {
                return Ok(());
            }
        }
        if c.rows.is_empty() {
            // The batch is consumed: acknowledge (near the end of a
            // limited query, shrinking the window to what the stream can
            // still be expected to supply), then go on from the announced
            // next key, or fetch the next batch now.
            let merged = stats.rows_skipped + stats.rows_returned;
            let remaining = if query.limit == u64::MAX {
                u64::MAX
            } else {
                query
                    .skip
                    .saturating_add(query.limit)
                    .saturating_sub(merged)
            };
            let q = u32::try_from(streams).unwrap_or(u32::MAX);
            match tail_cap(query.mode, remaining, c.taken, merged, q, c.batch_rows) {
                Some(cap) if cap < c.rx.window() => {
                    stats.tail_caps += 1;
                    c.rx.ack_with_window(cap);
                }
                _ => c.rx.ack(),
            }
            if stats.rows_returned >= query.limit {
                break;
            }
            if c.done {
                continue;
            }
            match c.rx.next_hint() {
                Some(k) => heap.push(Reverse((k, i))),
                None => {
                    c.fill(query.mode, stats)?;
                    if let Some((k, _)) = c.rows.front() {
                        heap.push(Reverse((k.clone(), i)));
                    }
                }
            }
            continue;
        }
        if let Some((k, _)) = c.rows.front() {
            heap.push(Reverse((k.clone(), i)));
        }
    }
    Ok(())
}
