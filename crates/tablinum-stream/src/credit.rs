//! Credit accounting of a flow-controlled stream, as one pure type: the
//! windows of a stream's slots (one slot per tablet scan), the bytes of its
//! unacknowledged batches, cancellation, and the ack-wait rule. The time
//! comes in as an argument, so the same code runs under the server's tokio
//! tasks, the in-process [`channel`](crate::channel) and tests with a
//! made-up clock.
//!
//! The rules:
//! - a slot may have at most `window` unacknowledged batches in flight; an
//!   ack returns credit and may replace the window (1..=
//!   [`WINDOW_BATCHES_MAX`]; more is a protocol error) or cancel the slot;
//! - a stream may hold at most `stream_bytes_max` bytes of unacknowledged
//!   batches (and the caller's server-wide budget may be full), except that
//!   a slot holding no unacknowledged batch may always send one: a merge
//!   needs a batch of every slot before it can emit (and acknowledge)
//!   anything;
//! - a stream that holds unacknowledged batches gives up (`AckTimeout`)
//!   once the consumer has made no progress for the ack-wait timeout.
//!   Progress is an ack of a batch, a cancel, the transport taking a
//!   message ([`Credits::taken`]), or a keepalive reporting more rows
//!   consumed than before (a consumer busy with other servers' tablets says
//!   so); an empty ack is not. A keepalive is the consumer's claim: the
//!   server counts it only while the transport holds nothing of this stream
//!   (the consumer is demonstrably reading), and [`Credits::seen`] tells
//!   when the last progress the server saw itself happened. A stream
//!   holding nothing is never idle.
//!
//! Never blocks, never reads a clock, never allocates per batch beyond its
//! queue of batch sizes.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::window::WINDOW_BATCHES_MAX;

/// Credit of one slot.
#[derive(Debug, Clone)]
struct Slot {
    window: u32,
    in_flight: u32,
    cancelled: bool,
    /// Bytes of each batch sent and not yet acknowledged, oldest first.
    sizes: VecDeque<usize>,
}

/// Why a producer must stop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CreditStop {
    /// The consumer cancelled every wanted slot, or ended the stream.
    Cancelled,
    /// Batches stayed unacknowledged, with no progress, for the ack-wait
    /// timeout.
    AckTimeout,
    /// The consumer sent something the protocol does not allow.
    Invalid(String),
}

/// What [`Credits::take`] decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// These slots may send this many batches now (their credit is taken:
    /// give back what goes unused with [`Credits::unspend`]).
    Granted(Vec<(usize, u32)>),
    /// No credit: wait for an ack, a keepalive or freed budget, at most
    /// until `deadline` (then take again: it will time out), or without a
    /// deadline when the stream holds nothing.
    Wait {
        /// When the ack-wait timeout would pass.
        deadline: Option<Instant>,
    },
    /// Stop producing.
    Stop(CreditStop),
}

/// What the byte budgets a stream draws from besides its own (its
/// server's, its caller's) allow now, from the most to the least; the
/// stricter of two is their `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Budgets {
    /// Room left: batches go out within the stream's own limit.
    Open,
    /// Spent: only a slot holding nothing may send, one row (a merge
    /// needs a row of every slot before it emits anything).
    Spent,
    /// Spent [`EXEMPT_BUDGET_FACTOR`] times over (by such rows): not even
    /// that; the stream waits for acks anywhere under the budget.
    Exhausted,
}

/// A budget used this many times over stops even the one-row exemption:
/// what a caller (or a server) holds stays within this multiple of its
/// limit, plus the row that crossed it, however many slots it opens.
pub const EXEMPT_BUDGET_FACTOR: usize = 2;

impl Budgets {
    /// The state of a budget of `max` bytes with `used` held.
    pub fn of(used: usize, max: usize) -> Budgets {
        if used >= max.saturating_mul(EXEMPT_BUDGET_FACTOR) {
            Budgets::Exhausted
        } else if used >= max {
            Budgets::Spent
        } else {
            Budgets::Open
        }
    }
}

/// The credit state of one stream (see the module docs).
#[derive(Debug, Clone)]
pub struct Credits {
    slots: Vec<Slot>,
    /// The consumer ended its side: every slot is cancelled.
    ended: bool,
    /// The consumer broke the protocol.
    invalid: Option<String>,
    bytes_in_flight: usize,
    stream_bytes_max: usize,
    /// The highest progress a keepalive reported (rows).
    progress: u64,
    last_progress: Instant,
    /// The last progress the server saw itself (an ack, a cancel, the
    /// transport taking a message): never a keepalive's claim.
    last_seen: Instant,
}

impl Credits {
    /// One window per slot (batches, at least 1); at most
    /// `stream_bytes_max` bytes of unacknowledged batches.
    pub fn new(windows: &[u32], stream_bytes_max: usize, now: Instant) -> Credits {
        Credits {
            slots: windows
                .iter()
                .map(|&w| Slot {
                    window: w.clamp(1, WINDOW_BATCHES_MAX),
                    in_flight: 0,
                    cancelled: false,
                    sizes: VecDeque::new(),
                })
                .collect(),
            ended: false,
            invalid: None,
            bytes_in_flight: 0,
            stream_bytes_max,
            progress: 0,
            last_progress: now,
            last_seen: now,
        }
    }

    fn bytes_allow(&self, i: usize, budgets: Budgets) -> bool {
        let holds_nothing = self.slots[i].sizes.is_empty();
        match budgets {
            Budgets::Open => holds_nothing || self.bytes_in_flight < self.stream_bytes_max,
            Budgets::Spent => holds_nothing,
            Budgets::Exhausted => false,
        }
    }

    fn holding(&self) -> bool {
        self.slots.iter().any(|c| c.in_flight > 0)
    }

    /// Takes all the credit of every slot in `wanted` that has some and
    /// that the byte budgets allow (`budgets`: what the server's and the
    /// caller's budgets allow), or says how long to wait, or to stop.
    pub fn take(
        &mut self,
        wanted: &[usize],
        budgets: Budgets,
        ack_wait: Duration,
        now: Instant,
    ) -> Take {
        if let Some(m) = &self.invalid {
            return Take::Stop(CreditStop::Invalid(m.clone()));
        }
        if self.ended
            || wanted
                .iter()
                .all(|&i| self.slots.get(i).is_none_or(|c| c.cancelled))
        {
            return Take::Stop(CreditStop::Cancelled);
        }
        let mut got = Vec::new();
        for &i in wanted {
            if i >= self.slots.len() || !self.bytes_allow(i, budgets) {
                continue;
            }
            let c = &mut self.slots[i];
            if !c.cancelled && c.in_flight < c.window {
                got.push((i, c.window - c.in_flight));
                c.in_flight = c.window;
            }
        }
        if !got.is_empty() {
            return Take::Granted(got);
        }
        if !self.holding() {
            return Take::Wait { deadline: None };
        }
        let deadline = self.last_progress + ack_wait;
        if deadline <= now {
            return Take::Stop(CreditStop::AckTimeout);
        }
        Take::Wait {
            deadline: Some(deadline),
        }
    }

    /// Whether the byte budgets let slot `i` send one more batch now.
    pub fn may_send(&self, i: usize, budgets: Budgets) -> bool {
        i < self.slots.len() && self.bytes_allow(i, budgets)
    }

    /// Whether slot `i` may send only because it holds nothing (the byte
    /// budgets are spent): such a batch should be as small as the merge
    /// allows, one row, so a stream of many slots cannot hold a full batch
    /// per slot past its budgets.
    pub fn only_by_exemption(&self, i: usize, budgets: Budgets) -> bool {
        i < self.slots.len()
            && self.slots[i].sizes.is_empty()
            && (budgets != Budgets::Open || self.bytes_in_flight >= self.stream_bytes_max)
    }

    /// Gives back `batches` of credit `slot` took but did not use.
    pub fn unspend(&mut self, slot: usize, batches: u32) {
        if let Some(c) = self.slots.get_mut(slot) {
            c.in_flight = c.in_flight.saturating_sub(batches);
        }
    }

    /// A batch of `bytes` went out for `slot`: it holds them until acked.
    /// Returns false for an unknown slot (nothing charged).
    pub fn sent(&mut self, slot: usize, bytes: usize) -> bool {
        match self.slots.get_mut(slot) {
            Some(c) => {
                c.sizes.push_back(bytes);
                self.bytes_in_flight += bytes;
                true
            }
            None => false,
        }
    }

    /// The consumer consumed `batches` of `slot`; a non-zero `window`
    /// replaces its window; `cancel` stops it. Unknown slots are ignored; a
    /// window over [`WINDOW_BATCHES_MAX`] is a protocol error (every later
    /// `take` stops with it). Returns the bytes freed.
    pub fn ack(
        &mut self,
        slot: usize,
        batches: u32,
        window: u32,
        cancel: bool,
        now: Instant,
    ) -> usize {
        if window > WINDOW_BATCHES_MAX {
            self.invalid = Some(format!(
                "ack of slot {slot}: window {window} is out of range 1..={WINDOW_BATCHES_MAX}"
            ));
            return 0;
        }
        let Some(c) = self.slots.get_mut(slot) else {
            return 0;
        };
        let was = c.in_flight;
        c.in_flight = c.in_flight.saturating_sub(batches);
        let mut freed = 0;
        for _ in 0..batches {
            match c.sizes.pop_front() {
                Some(b) => freed += b,
                None => break,
            }
        }
        if window > 0 {
            c.window = window;
        }
        let progressed = (batches > 0 && was > 0) || (cancel && !c.cancelled);
        c.cancelled |= cancel;
        if c.cancelled {
            // A cancelled slot's batches will never be acknowledged.
            freed += c.sizes.drain(..).sum::<usize>();
        }
        self.bytes_in_flight -= freed;
        if progressed {
            self.last_progress = now;
            self.last_seen = now;
        }
        freed
    }

    /// The transport took one of this stream's messages (the consumer's
    /// side drained it): progress the server sees itself.
    pub fn taken(&mut self, now: Instant) {
        self.last_progress = now;
        self.last_seen = now;
    }

    /// When the server last saw progress itself (see [`Credits::taken`]);
    /// keepalives do not move it.
    pub fn seen(&self) -> Instant {
        self.last_seen
    }

    /// A keepalive reporting the consumer's `progress` (rows it has taken
    /// from all its sources): a higher value than before is progress, but
    /// only while `drained` (the transport holds none of this stream's
    /// messages): a consumer that reads nothing cannot claim progress.
    pub fn keepalive(&mut self, progress: u64, drained: bool, now: Instant) {
        if drained && progress > self.progress {
            self.progress = progress;
            self.last_progress = now;
        }
    }

    /// Whether `slot` was cancelled (or the stream ended).
    pub fn cancelled(&self, slot: usize) -> bool {
        self.ended || self.slots.get(slot).is_none_or(|c| c.cancelled)
    }

    /// Whether the consumer ended its side while any of `open` was still
    /// wanted (not cancelled slot by slot).
    pub fn abandoned(&self, open: &[usize]) -> bool {
        self.ended
            && open
                .iter()
                .any(|&i| self.slots.get(i).is_some_and(|c| !c.cancelled))
    }

    /// The consumer went away: every slot stops, and the bytes of batches
    /// it will never acknowledge are freed (returned).
    pub fn end(&mut self) -> usize {
        self.ended = true;
        let freed: usize = self
            .slots
            .iter_mut()
            .map(|c| c.sizes.drain(..).sum::<usize>())
            .sum();
        self.bytes_in_flight -= freed;
        freed
    }

    /// Bytes of this stream's unacknowledged batches.
    pub fn bytes_in_flight(&self) -> usize {
        self.bytes_in_flight
    }

    /// The current window of `slot`.
    pub fn window(&self, slot: usize) -> u32 {
        self.slots.get(slot).map_or(0, |c| c.window)
    }

    /// Unacknowledged batches of `slot`.
    pub fn in_flight(&self, slot: usize) -> u32 {
        self.slots.get(slot).map_or(0, |c| c.in_flight)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAIT: Duration = Duration::from_millis(100);

    #[test]
    fn credit_is_taken_whole_and_returned_by_acks() {
        let t0 = Instant::now();
        let mut c = Credits::new(&[3, 2], usize::MAX, t0);
        assert_eq!(
            c.take(&[0, 1], Budgets::Open, WAIT, t0),
            Take::Granted(vec![(0, 3), (1, 2)])
        );
        c.unspend(1, 1); // slot 1 sent one batch only
        assert_eq!(c.in_flight(1), 1);
        assert_eq!(
            c.take(&[0, 1], Budgets::Open, WAIT, t0),
            Take::Granted(vec![(1, 1)])
        );
        assert_eq!(
            c.take(&[0, 1], Budgets::Open, WAIT, t0),
            Take::Wait {
                deadline: Some(t0 + WAIT)
            }
        );
        c.ack(0, 2, 0, false, t0);
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(vec![(0, 2)])
        );
        // A new window takes effect with the next take.
        c.ack(0, 3, 5, false, t0);
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(vec![(0, 5)])
        );
    }

    #[test]
    fn no_progress_for_the_ack_wait_stops_a_stream_that_holds_batches() {
        let t0 = Instant::now();
        let mut c = Credits::new(&[1], usize::MAX, t0);
        // Holding nothing: never idle.
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        c.unspend(0, 1);
        assert_eq!(
            c.take(&[], Budgets::Open, WAIT, t0 + WAIT * 10),
            Take::Stop(CreditStop::Cancelled)
        );
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        let t1 = t0 + WAIT / 2;
        // An empty ack is not progress; a higher keepalive is.
        c.ack(0, 0, 0, false, t1);
        c.keepalive(10, true, t1);
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t1 + WAIT / 2),
            Take::Wait {
                deadline: Some(t1 + WAIT)
            }
        );
        c.keepalive(10, true, t1 + WAIT / 2); // the same value: not progress
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t1 + WAIT),
            Take::Stop(CreditStop::AckTimeout)
        );
        // Keepalives are claims: the server's own sightings stay put.
        assert_eq!(c.seen(), t0);
    }

    #[test]
    fn a_keepalive_counts_only_while_the_transport_is_drained() {
        let t0 = Instant::now();
        let mut c = Credits::new(&[1], usize::MAX, t0);
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        c.sent(0, 10);
        // The consumer's transport holds a message: its claim is ignored.
        c.keepalive(5, false, t0 + WAIT / 2);
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t0 + WAIT),
            Take::Stop(CreditStop::AckTimeout)
        );
        // The transport taking a message is progress the server saw.
        let mut c = Credits::new(&[1], usize::MAX, t0);
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        c.sent(0, 10);
        c.taken(t0 + WAIT / 2);
        assert_eq!(c.seen(), t0 + WAIT / 2);
        assert_eq!(
            c.take(&[0], Budgets::Open, WAIT, t0 + WAIT),
            Take::Wait {
                deadline: Some(t0 + WAIT + WAIT / 2)
            }
        );
    }

    #[test]
    fn byte_budgets_never_starve_a_slot_of_its_first_batch() {
        let t0 = Instant::now();
        let mut c = Credits::new(&[4, 4], 1_000, t0);
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        assert!(c.sent(0, 1_500));
        c.unspend(0, 3);
        // Over the stream budget: slot 0 waits, slot 1 (holding nothing)
        // still gets its first batch, even with the server budget spent.
        assert!(!c.may_send(0, Budgets::Open));
        assert_eq!(
            c.take(&[0, 1], Budgets::Spent, WAIT, t0),
            Take::Granted(vec![(1, 4)])
        );
        assert_eq!(c.ack(0, 1, 0, false, t0), 1_500);
        assert_eq!(c.bytes_in_flight(), 0);
        assert!(c.may_send(0, Budgets::Open));
        // A budget spent twice over stops even a slot holding nothing.
        assert!(!c.may_send(0, Budgets::Exhausted));
        assert!(matches!(
            c.take(&[0], Budgets::Exhausted, WAIT, t0),
            Take::Wait { .. }
        ));
        assert_eq!(Budgets::of(10, 10), Budgets::Spent);
        assert_eq!(Budgets::of(20, 10), Budgets::Exhausted);
        assert_eq!(Budgets::Open.max(Budgets::Spent), Budgets::Spent);
    }

    #[test]
    fn cancel_frees_bytes_and_bad_windows_are_protocol_errors() {
        let t0 = Instant::now();
        let mut c = Credits::new(&[2, 2], usize::MAX, t0);
        assert!(matches!(
            c.take(&[0, 1], Budgets::Open, WAIT, t0),
            Take::Granted(_)
        ));
        c.sent(0, 10);
        c.sent(0, 20);
        assert_eq!(c.ack(0, 0, 0, true, t0), 30);
        assert!(c.cancelled(0) && !c.cancelled(1));
        assert!(!c.abandoned(&[1]));
        c.end();
        assert!(c.abandoned(&[1]) && c.cancelled(1));
        let mut c = Credits::new(&[2], usize::MAX, t0);
        c.ack(0, 0, WINDOW_BATCHES_MAX + 1, false, t0);
        assert!(matches!(
            c.take(&[0], Budgets::Open, WAIT, t0),
            Take::Stop(CreditStop::Invalid(m)) if m.contains("out of range")
        ));
        // Unknown slots are ignored.
        let mut c = Credits::new(&[2], usize::MAX, t0);
        assert_eq!(c.ack(9, 1, 0, true, t0), 0);
        assert!(!c.sent(9, 1));
    }
}
