//! What a store can say about its own health without waiting on its write
//! path: serving, degraded (a retryable condition such as a full disk, from
//! which it resumes by itself) or poisoned (it must be reopened from durable
//! state), and how long its oldest journal I/O has been in flight.
//!
//! Owns the in-flight I/O clock and the last write fault. Everything here is
//! read with atomics or tiny locks of its own, never the writer lock: a
//! tablet server's heartbeat reads it while writers are stuck on a slow
//! disk. Never decides what to do about the health; servers do.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;
use crate::faults::Condition;

/// A store's health now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Health {
    /// Reads and writes are served.
    Serving,
    /// Writes fail cleanly (nothing applied) or background work is being
    /// retried because of a condition that may pass by itself; the store
    /// resumes without a reopen once it does.
    Degraded {
        /// What kind of condition.
        condition: Condition,
        /// The error, as the operating system said it.
        reason: String,
    },
    /// The store serves nothing: a journal fsync failed, bytes on disk are
    /// damaged, or a background job panicked. It must be closed and
    /// reopened from durable state.
    Poisoned {
        /// The error that poisoned it.
        reason: String,
        /// The journal could not yet be cut back to its last good sync:
        /// do not reopen the store until `close` has succeeded.
        cut_pending: bool,
    },
}

/// Which journal I/O is in flight (each runs one at a time).
#[derive(Debug, Clone, Copy)]
pub(super) enum IoSlot {
    /// An append, under the writer lock.
    Append = 0,
    /// A group-commit fdatasync (its leader).
    Sync = 1,
    /// A segment roll's fdatasync, under the writer lock.
    Roll = 2,
}

/// The in-flight journal I/O clock and the last write fault.
#[derive(Debug)]
pub(super) struct IoTracker {
    origin: Instant,
    /// Per slot: 1 + ms since `origin` when its I/O started; 0 when idle.
    started: [AtomicU64; 3],
    /// Set while `write_fault` holds something (the fast path reads only
    /// this).
    faulted: AtomicBool,
    write_fault: Mutex<Option<(Condition, String)>>,
}

/// Marks a slot's I/O as in flight until dropped.
pub(super) struct InFlight<'a> {
    t: &'a IoTracker,
    slot: IoSlot,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.t.started[self.slot as usize].store(0, Ordering::Release);
    }
}

impl IoTracker {
    pub(super) fn new() -> IoTracker {
        IoTracker {
            origin: Instant::now(),
            started: Default::default(),
            faulted: AtomicBool::new(false),
            write_fault: Mutex::new(None),
        }
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64 + 1
    }

    /// Starts the clock of `slot`'s I/O.
    pub(super) fn start(&self, slot: IoSlot) -> InFlight<'_> {
        self.started[slot as usize].store(self.now_ms(), Ordering::Release);
        InFlight { t: self, slot }
    }

    /// How long the oldest journal I/O in flight has been running (zero
    /// when none is).
    pub(super) fn stalled(&self) -> Duration {
        let now = self.now_ms();
        let oldest = self
            .started
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .filter(|&s| s > 0)
            .min();
        Duration::from_millis(oldest.map_or(0, |s| now.saturating_sub(s)))
    }

    /// An append succeeded: a write fault, if any, is over.
    pub(super) fn append_ok(&self) {
        if self.faulted.load(Ordering::Relaxed) {
            *self.write_fault.lock() = None;
            self.faulted.store(false, Ordering::Relaxed);
        }
    }

    /// An append failed cleanly with a retryable error.
    pub(super) fn append_failed(&self, e: &Error) {
        if let Some(c) = e.condition() {
            *self.write_fault.lock() = Some((c, e.to_string()));
            self.faulted.store(true, Ordering::Relaxed);
        }
    }

    /// The last write fault, while no append has succeeded since.
    pub(super) fn write_fault(&self) -> Option<(Condition, String)> {
        if !self.faulted.load(Ordering::Relaxed) {
            return None;
        }
        self.write_fault.lock().clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clock_reports_the_oldest_io_in_flight_and_forgets_finished_ones() {
        let t = IoTracker::new();
        assert_eq!(t.stalled(), Duration::ZERO);
        let a = t.start(IoSlot::Sync);
        std::thread::sleep(Duration::from_millis(30));
        let _b = t.start(IoSlot::Append);
        assert!(t.stalled() >= Duration::from_millis(30));
        drop(a);
        assert!(t.stalled() < Duration::from_millis(30));
    }

    #[test]
    fn a_write_fault_lasts_until_an_append_succeeds() {
        let t = IoTracker::new();
        let full = Error::Io {
            op: "append journal",
            path: "j".into(),
            source: std::io::Error::from_raw_os_error(libc::ENOSPC),
        };
        t.append_failed(&full);
        assert_eq!(t.write_fault().map(|f| f.0), Some(Condition::DiskFull));
        t.append_ok();
        assert_eq!(t.write_fault(), None);
    }
}
