//! The scan server's busy rule, shared verbatim by the server and the simulator.
//!
//! A scan task (a `startScan` or any `continueScan` batch) is queued with the
//! busy timeout its client sent. If no scan thread has started it when the
//! timeout has passed since it was queued, the server cancels it and answers
//! "busy", having done no work; the client then asks the selector again. The
//! decision is one compare-and-set on the task's state, so exactly one of
//! "start" (executor) and "cancel as busy" (waiter) wins:
//!
//! ```text
//! Queued --try_start--> Running --finish--> Finished
//!    \--check_busy (deadline passed) / cancel_busy--> CancelledBusy
//! ```
//!
//! A task once running never reports busy; a cancelled task is never run.
//!
//! Busy timeouts: 0 ms is invalid at the API edge ([`BusyTimeout::from_ms`]
//! rejects it; Accumulo's "≤ 0 means wait forever" is not carried over because
//! it turns a typo into an unbounded queue wait). `None` means the client sent
//! no busy timeout, and the rule then waits forever: the task is never busy
//! (tablet-server reads use this).
//!
//! This module owns only the rule and the state word. It must never read a
//! clock (time comes in as microseconds), sleep, block, spawn threads, or
//! decide anything about which server to try next.

use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::profile::BUSY_TIMEOUT_MS_MAX;

/// A validated busy timeout: 1 ms to [`BUSY_TIMEOUT_MS_MAX`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BusyTimeout(NonZeroU64);

/// Why a busy timeout from the wire was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BusyTimeoutError {
    /// 0 ms was sent; send no timeout to wait forever.
    #[error("busy_timeout_ms = 0 is invalid; omit the timeout to wait forever")]
    Zero,
    /// More than [`BUSY_TIMEOUT_MS_MAX`] was sent.
    #[error("busy_timeout_ms = {value_ms} exceeds the limit of {max_ms} ms")]
    TooLarge {
        /// The value sent.
        value_ms: u64,
        /// The limit.
        max_ms: u64,
    },
}

impl BusyTimeout {
    /// Validates a busy timeout in milliseconds.
    pub fn from_ms(ms: u64) -> Result<BusyTimeout, BusyTimeoutError> {
        if ms > BUSY_TIMEOUT_MS_MAX {
            return Err(BusyTimeoutError::TooLarge {
                value_ms: ms,
                max_ms: BUSY_TIMEOUT_MS_MAX,
            });
        }
        NonZeroU64::new(ms)
            .map(BusyTimeout)
            .ok_or(BusyTimeoutError::Zero)
    }

    /// The timeout in milliseconds (at least 1).
    pub fn as_ms(self) -> u64 {
        self.0.get()
    }

    /// The timeout in microseconds.
    pub fn as_us(self) -> u64 {
        self.0.get().saturating_mul(1_000)
    }
}

/// True when a task queued at `enqueued_at_us` and not yet started is busy at
/// `now_us`: at least the busy timeout has elapsed. `None` waits forever
/// (never busy). A clock that went backwards (`now_us < enqueued_at_us`)
/// counts as no time elapsed.
pub fn busy_deadline_passed(
    enqueued_at_us: u64,
    now_us: u64,
    busy_timeout: Option<BusyTimeout>,
) -> bool {
    match busy_timeout {
        None => false,
        Some(t) => now_us.saturating_sub(enqueued_at_us) >= t.as_us(),
    }
}

/// Where a scan task is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum TaskState {
    /// Waiting for a scan thread.
    Queued = 0,
    /// A scan thread is running it; it can no longer be busy.
    Running = 1,
    /// It ran to completion.
    Finished = 2,
    /// Cancelled while queued (busy, or shutdown); it will never run.
    CancelledBusy = 3,
}

impl TaskState {
    fn from_u8(v: u8) -> TaskState {
        match v {
            0 => TaskState::Queued,
            1 => TaskState::Running,
            2 => TaskState::Finished,
            _ => TaskState::CancelledBusy,
        }
    }
}

/// What the waiting side learns from [`TaskGate::check_busy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BusyCheck {
    /// Still queued and the deadline has not passed: check again at the deadline.
    Waiting,
    /// The task is cancelled: answer "busy" to the client.
    Busy,
    /// A scan thread has started it: wait for its result, never busy.
    Started,
}

/// The state word of one queued scan task plus when it was queued and with
/// which busy timeout.
#[derive(Debug)]
pub struct TaskGate {
    state: AtomicU8,
    enqueued_at_us: u64,
    busy_timeout: Option<BusyTimeout>,
}

impl TaskGate {
    /// A task queued at `enqueued_at_us` with `busy_timeout` (`None`: never busy).
    pub fn new(enqueued_at_us: u64, busy_timeout: Option<BusyTimeout>) -> TaskGate {
        TaskGate {
            state: AtomicU8::new(TaskState::Queued as u8),
            enqueued_at_us,
            busy_timeout,
        }
    }

    /// Current state.
    pub fn state(&self) -> TaskState {
        TaskState::from_u8(self.state.load(Ordering::Acquire))
    }

    /// When the task was queued, in microseconds.
    pub fn enqueued_at_us(&self) -> u64 {
        self.enqueued_at_us
    }

    /// The busy timeout the task was queued with.
    pub fn busy_timeout(&self) -> Option<BusyTimeout> {
        self.busy_timeout
    }

    /// The instant at which an unstarted task becomes busy, if it ever does.
    pub fn busy_deadline_us(&self) -> Option<u64> {
        self.busy_timeout
            .map(|t| self.enqueued_at_us.saturating_add(t.as_us()))
    }

    /// Executor side, when a scan thread takes the task: Queued → Running.
    /// Returns false if the task was cancelled; it must then be dropped unrun.
    pub fn try_start(&self) -> bool {
        self.transition(TaskState::Queued, TaskState::Running)
    }

    /// Executor side, when the task's work is done: Running → Finished.
    /// Returns false (and changes nothing) if the task was not running.
    pub fn finish(&self) -> bool {
        self.transition(TaskState::Running, TaskState::Finished)
    }

    /// Cancels a still-queued task (busy or shutdown): Queued → CancelledBusy.
    /// Returns false if a thread already started it.
    pub fn cancel_busy(&self) -> bool {
        self.transition(TaskState::Queued, TaskState::CancelledBusy)
    }

    /// Waiting side: applies the busy rule at `now_us`.
    pub fn check_busy(&self, now_us: u64) -> BusyCheck {
        if busy_deadline_passed(self.enqueued_at_us, now_us, self.busy_timeout)
            && self.cancel_busy()
        {
            return BusyCheck::Busy;
        }
        match self.state() {
            TaskState::Queued => BusyCheck::Waiting,
            TaskState::CancelledBusy => BusyCheck::Busy,
            TaskState::Running | TaskState::Finished => BusyCheck::Started,
        }
    }

    fn transition(&self, from: TaskState, to: TaskState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn ms(v: u64) -> Option<BusyTimeout> {
        Some(BusyTimeout::from_ms(v).unwrap())
    }

    #[test]
    fn timeout_edge_validation() {
        assert_eq!(BusyTimeout::from_ms(0), Err(BusyTimeoutError::Zero));
        assert_eq!(BusyTimeout::from_ms(1).unwrap().as_us(), 1_000);
        assert!(BusyTimeout::from_ms(BUSY_TIMEOUT_MS_MAX).is_ok());
        assert!(matches!(
            BusyTimeout::from_ms(BUSY_TIMEOUT_MS_MAX + 1),
            Err(BusyTimeoutError::TooLarge { .. })
        ));
    }

    #[test]
    fn deadline_rule() {
        assert!(!busy_deadline_passed(1_000, 33_999, ms(33)));
        assert!(busy_deadline_passed(1_000, 34_000, ms(33)));
        assert!(busy_deadline_passed(1_000, 900_000, ms(33)));
        assert!(
            !busy_deadline_passed(1_000, u64::MAX, None),
            "None waits forever"
        );
        assert!(
            !busy_deadline_passed(50_000, 10, ms(1)),
            "clock going back is no time"
        );
    }

    #[test]
    fn running_task_is_never_busy() {
        let g = TaskGate::new(0, ms(5));
        assert_eq!(g.check_busy(4_999), BusyCheck::Waiting);
        assert!(g.try_start());
        assert_eq!(g.check_busy(1_000_000), BusyCheck::Started);
        assert_eq!(g.state(), TaskState::Running);
        assert!(g.finish());
        assert_eq!(g.check_busy(2_000_000), BusyCheck::Started);
        assert!(!g.cancel_busy());
    }

    #[test]
    fn cancelled_task_is_never_run() {
        let g = TaskGate::new(10, ms(5));
        assert_eq!(g.busy_deadline_us(), Some(5_010));
        assert_eq!(g.check_busy(5_010), BusyCheck::Busy);
        assert_eq!(g.state(), TaskState::CancelledBusy);
        assert!(!g.try_start());
        assert!(!g.finish());
        assert_eq!(g.check_busy(6_000), BusyCheck::Busy);
    }

    #[test]
    fn no_timeout_never_busy() {
        let g = TaskGate::new(0, None);
        assert_eq!(g.busy_deadline_us(), None);
        assert_eq!(g.check_busy(u64::MAX), BusyCheck::Waiting);
        assert!(g.try_start());
    }

    #[test]
    fn start_and_cancel_race_has_one_winner() {
        for _ in 0..200 {
            let g = Arc::new(TaskGate::new(0, ms(1)));
            let a = Arc::clone(&g);
            let b = Arc::clone(&g);
            let t1 = std::thread::spawn(move || a.try_start());
            let t2 = std::thread::spawn(move || b.check_busy(10_000) == BusyCheck::Busy);
            let started = t1.join().unwrap();
            let busy = t2.join().unwrap();
            assert!(started != busy, "started={started} busy={busy}");
        }
    }
}
