//! A scan server's scan threads and the queue in front of them, with the
//! busy rule: a batch waits in a FIFO queue for one of `threads` running
//! places; if it is still queued when its busy timeout passes, it is
//! cancelled by compare-and-set (queued → cancelled) and the caller answers
//! "scan server busy" without doing any work. A batch that got its place
//! (queued → running, by the same compare-and-set, done by whoever frees
//! the place) always runs: it never reports busy. The state machine is
//! `tablinum_dispatch::busy::TaskGate`, the same code the simulation runs.
//!
//! Owns the counts of running and waiting batches and the busy counter.
//! Never reads data itself: the caller reads while holding a [`Running`].

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use tablinum_dispatch::busy::{BusyTimeout, TaskGate, TaskState};
use tokio::sync::Notify;

/// Why a batch did not get a scan thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Still queued when its busy timeout passed (no work was done).
    Busy {
        /// The busy timeout, ms.
        busy_timeout_ms: u64,
        /// Batches queued ahead of it, then.
        queued: usize,
    },
    /// The queue holds `scan_queue_max` batches already.
    QueueFull {
        /// The limit.
        max: usize,
    },
}

struct Waiter {
    gate: TaskGate,
    wake: Notify,
}

#[derive(Default)]
struct State {
    running: usize,
    waiting: VecDeque<Arc<Waiter>>,
}

/// The scan threads of a scan server (see the module docs).
pub struct ScanQueue {
    threads: usize,
    queue_max: usize,
    state: Mutex<State>,
    /// Batches that got a scan thread.
    pub batches_total: AtomicU64,
    /// Batches answered busy.
    pub busy_total: AtomicU64,
    /// Microseconds batches spent queued before running, summed.
    pub queued_us_total: AtomicU64,
}

/// A running place: the batch may read; dropping it frees the place for
/// the next queued batch.
pub struct Running {
    queue: Arc<ScanQueue>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.queue.release();
    }
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

impl ScanQueue {
    /// `threads` batches at once, at most `queue_max` waiting.
    pub fn new(threads: usize, queue_max: usize) -> Arc<ScanQueue> {
        Arc::new(ScanQueue {
            threads: threads.max(1),
            queue_max,
            state: Mutex::new(State::default()),
            batches_total: AtomicU64::new(0),
            busy_total: AtomicU64::new(0),
            queued_us_total: AtomicU64::new(0),
        })
    }

    /// Batches running now and waiting now.
    pub fn depth(&self) -> (usize, usize) {
        let st = self.state.lock();
        let waiting = st
            .waiting
            .iter()
            .filter(|w| w.gate.state() == TaskState::Queued)
            .count();
        (st.running, waiting)
    }

    /// Waits for a running place, giving up with `Busy` if still queued
    /// after `busy` (none: wait as long as it takes).
    pub async fn enter(self: &Arc<Self>, busy: Option<BusyTimeout>) -> Result<Running, Refused> {
        let queued_at = Instant::now();
        let waiter = {
            let mut st = self.state.lock();
            if st.running < self.threads && st.waiting.is_empty() {
                st.running += 1;
                self.batches_total.fetch_add(1, Ordering::Relaxed);
                return Ok(Running {
                    queue: self.clone(),
                });
            }
            st.waiting.retain(|w| w.gate.state() == TaskState::Queued);
            if st.waiting.len() >= self.queue_max {
                return Err(Refused::QueueFull {
                    max: self.queue_max,
                });
            }
            let w = Arc::new(Waiter {
                gate: TaskGate::new(now_us(), busy),
                wake: Notify::new(),
            });
            st.waiting.push_back(w.clone());
            w
        };
        let deadline = busy.map(|b| {
            tokio::time::Instant::from_std(queued_at) + std::time::Duration::from_millis(b.as_ms())
        });
        loop {
            let woken = waiter.wake.notified();
            if waiter.gate.state() == TaskState::Running {
                break;
            }
            match deadline {
                Some(d) => {
                    tokio::select! {
                        _ = woken => {}
                        _ = tokio::time::sleep_until(d) => {
                            if waiter.gate.cancel_busy() {
                                self.busy_total.fetch_add(1, Ordering::Relaxed);
                                let queued = self.depth().1;
                                return Err(Refused::Busy {
                                    busy_timeout_ms: busy.map_or(0, BusyTimeout::as_ms),
                                    queued,
                                });
                            }
                            // Lost the race: it was started, so it runs.
                        }
                    }
                }
                None => woken.await,
            }
        }
        self.queued_us_total
            .fetch_add(queued_at.elapsed().as_micros() as u64, Ordering::Relaxed);
        self.batches_total.fetch_add(1, Ordering::Relaxed);
        Ok(Running {
            queue: self.clone(),
        })
    }

    /// Frees a place: hands it to the first batch still queued (queued →
    /// running), skipping those cancelled as busy.
    fn release(&self) {
        let mut st = self.state.lock();
        while let Some(w) = st.waiting.pop_front() {
            if w.gate.try_start() {
                // The place passes straight to it: `running` is unchanged.
                w.wake.notify_one();
                return;
            }
        }
        st.running -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ms(n: u64) -> Option<BusyTimeout> {
        Some(BusyTimeout::from_ms(n).unwrap())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_batches_go_busy_running_ones_never_do() {
        let q = ScanQueue::new(1, 10);
        let first = q.enter(ms(5)).await.unwrap();
        // Queued behind a batch that holds the only thread: busy after 20 ms.
        let t = Instant::now();
        let r = q.enter(ms(20)).await.err().unwrap();
        assert!(
            matches!(
                r,
                Refused::Busy {
                    busy_timeout_ms: 20,
                    ..
                }
            ),
            "{r:?}"
        );
        assert!(t.elapsed() >= Duration::from_millis(20));
        assert_eq!(q.busy_total.load(Ordering::Relaxed), 1);
        // Released in time: it runs, and never reports busy afterwards.
        let q2 = q.clone();
        let waiting = tokio::spawn(async move { q2.enter(ms(500)).await.map(|_| ()) });
        tokio::time::sleep(Duration::from_millis(30)).await;
        drop(first);
        waiting.await.unwrap().unwrap();
        assert_eq!(q.depth(), (0, 0));
        assert_eq!(q.batches_total.load(Ordering::Relaxed), 2);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifo_order_a_full_queue_and_no_lost_places() {
        let q = ScanQueue::new(2, 3);
        let a = q.enter(None).await.unwrap();
        let b = q.enter(None).await.unwrap();
        let mut waiters = Vec::new();
        for _ in 0..3 {
            let q2 = q.clone();
            waiters.push(tokio::spawn(async move { q2.enter(None).await.map(drop) }));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(q.depth(), (2, 3));
        assert_eq!(
            q.enter(ms(1)).await.err(),
            Some(Refused::QueueFull { max: 3 })
        );
        drop(a);
        drop(b);
        for w in waiters {
            w.await.unwrap().unwrap();
        }
        assert_eq!(q.depth(), (0, 0));
        assert_eq!(q.batches_total.load(Ordering::Relaxed), 5);
    }
}
