//! One tablet's flow-controlled stream: batches of rows from a producer to a
//! consumer, with at most `window` unacknowledged batches in flight.
//!
//! The credit accounting, cancellation and the ack-wait rule are the
//! [`credit`](crate::credit) core the server's scan streams also run on (a
//! producer holding unacknowledged batches gives up once the consumer has
//! made no progress for `ack_wait_timeout`); this module adds the queue
//! between two threads and the consumer's timeout (a consumer waiting for
//! a batch longer than `idle_timeout` gives up: the producer is gone or
//! stuck). The consumer acknowledges a batch when it has consumed it, so a
//! slow consumer slows the producer. Never buffers more than `window`
//! batches.

use std::collections::VecDeque;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::credit::{CreditStop, Credits, Take};
use crate::Row;

/// Default ack-wait timeout of a producer, ms.
pub const ACK_WAIT_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default idle timeout of a consumer, ms.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Default rows per batch.
pub const BATCH_ROWS_MAX_DEFAULT: usize = 100;
/// Default bytes per batch (keys and values).
pub const BATCH_BYTES_MAX_DEFAULT: usize = 1 << 20;

/// Why a stream operation stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamError {
    /// The other side cancelled the stream.
    Cancelled,
    /// The producer waited longer than the ack-wait timeout.
    AckTimeout,
    /// The consumer waited longer than the idle timeout.
    IdleTimeout,
    /// The producer failed (the transport keeps the reason).
    Failed,
}

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StreamError::Cancelled => "stream cancelled",
            StreamError::AckTimeout => "no acknowledgement within the ack-wait timeout",
            StreamError::IdleTimeout => "no batch within the idle timeout",
            StreamError::Failed => "the producer failed",
        })
    }
}

impl std::error::Error for StreamError {}

/// Limits of one stream.
#[derive(Debug, Clone, Copy)]
pub struct StreamConfig {
    /// Unacknowledged batches allowed in flight at the start.
    pub window_batches: u32,
    /// Rows per batch, at most.
    pub batch_rows_max: usize,
    /// Key and value bytes per batch, at most (a single larger row still
    /// travels alone).
    pub batch_bytes_max: usize,
    /// How long a producer waits for an acknowledgement.
    pub ack_wait_timeout: Duration,
    /// How long a consumer waits for a batch.
    pub idle_timeout: Duration,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            window_batches: crate::window::STREAM_LIMIT_DEFAULT_BATCHES,
            batch_rows_max: BATCH_ROWS_MAX_DEFAULT,
            batch_bytes_max: BATCH_BYTES_MAX_DEFAULT,
            ack_wait_timeout: Duration::from_millis(ACK_WAIT_TIMEOUT_MS_DEFAULT),
            idle_timeout: Duration::from_millis(IDLE_TIMEOUT_MS_DEFAULT),
        }
    }
}

/// Counters of one stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Batches the producer sent.
    pub batches_sent: u64,
    /// Rows the producer sent.
    pub rows_sent: u64,
    /// Most batches that were ever unacknowledged at once.
    pub in_flight_max: u32,
}

#[derive(Debug)]
struct State {
    credits: Credits,
    queue: VecDeque<Vec<Row>>,
    done: bool,
    stats: StreamStats,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    cv: Condvar,
    cfg: StreamConfig,
}

/// The producing end.
#[derive(Debug)]
pub struct Sender {
    shared: Arc<Shared>,
}

/// The consuming end.
#[derive(Debug)]
pub struct Receiver {
    shared: Arc<Shared>,
}

/// A new stream.
pub fn stream(cfg: StreamConfig) -> (Sender, Receiver) {
    let shared = Arc::new(Shared {
        state: Mutex::new(State {
            credits: Credits::new(&[cfg.window_batches], usize::MAX, Instant::now()),
            queue: VecDeque::new(),
            done: false,
            stats: StreamStats::default(),
        }),
        cv: Condvar::new(),
        cfg,
    });
    (
        Sender {
            shared: shared.clone(),
        },
        Receiver { shared },
    )
}

impl Sender {
    /// Sends one batch, waiting while the window is full.
    pub fn send(&self, batch: Vec<Row>) -> Result<(), StreamError> {
        let mut st = self.shared.state.lock();
        loop {
            let ack_wait = self.shared.cfg.ack_wait_timeout;
            match st
                .credits
                .take(&[0], crate::credit::Budgets::Open, ack_wait, Instant::now())
            {
                Take::Granted(g) => {
                    // One batch goes now; the rest of the credit stays.
                    let n = g.first().map_or(1, |&(_, n)| n);
                    st.credits.unspend(0, n - 1);
                    break;
                }
                Take::Wait { deadline: Some(d) } => {
                    self.shared.cv.wait_until(&mut st, d);
                }
                Take::Wait { deadline: None } => self.shared.cv.wait(&mut st),
                Take::Stop(CreditStop::Cancelled) => return Err(StreamError::Cancelled),
                Take::Stop(CreditStop::AckTimeout) => return Err(StreamError::AckTimeout),
                Take::Stop(CreditStop::Invalid(_)) => return Err(StreamError::Failed),
            }
        }
        let bytes = batch.iter().map(|(k, v)| k.len() + v.len()).sum();
        st.credits.sent(0, bytes);
        let in_flight = st.credits.in_flight(0);
        st.stats.in_flight_max = st.stats.in_flight_max.max(in_flight);
        st.stats.batches_sent += 1;
        st.stats.rows_sent += batch.len() as u64;
        st.queue.push_back(batch);
        drop(st);
        self.shared.cv.notify_all();
        Ok(())
    }

    /// Sends every row of `rows` in batches bounded by rows and bytes, then
    /// marks the stream finished.
    pub fn send_all(&self, rows: impl IntoIterator<Item = Row>) -> Result<(), StreamError> {
        let (rows_max, bytes_max) = (
            self.shared.cfg.batch_rows_max.max(1),
            self.shared.cfg.batch_bytes_max,
        );
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        for row in rows {
            let n = row.0.len() + row.1.len();
            if !batch.is_empty() && (batch.len() >= rows_max || bytes + n > bytes_max) {
                self.send(std::mem::take(&mut batch))?;
                bytes = 0;
            }
            bytes += n;
            batch.push(row);
        }
        if !batch.is_empty() {
            self.send(batch)?;
        }
        self.finish();
        Ok(())
    }

    /// Marks the stream finished: no more batches.
    pub fn finish(&self) {
        self.shared.state.lock().done = true;
        self.shared.cv.notify_all();
    }

    /// Counters so far.
    pub fn stats(&self) -> StreamStats {
        self.shared.state.lock().stats
    }
}

impl Drop for Sender {
    fn drop(&mut self) {
        self.finish();
    }
}

/// What [`Receiver::recv`] found.
#[derive(Debug, PartialEq, Eq)]
pub enum Received {
    /// A batch, to be acknowledged once consumed.
    Batch(Vec<Row>),
    /// The producer finished and every batch was received.
    End,
}

impl Receiver {
    /// True when a batch is waiting (a `recv` would not block).
    pub fn ready(&self) -> bool {
        let st = self.shared.state.lock();
        !st.queue.is_empty() || st.done || st.credits.cancelled(0)
    }

    /// Receives the next batch, waiting up to the idle timeout.
    pub fn recv(&self) -> Result<Received, StreamError> {
        let deadline = Instant::now() + self.shared.cfg.idle_timeout;
        let mut st = self.shared.state.lock();
        loop {
            if let Some(b) = st.queue.pop_front() {
                return Ok(Received::Batch(b));
            }
            if st.credits.cancelled(0) {
                return Err(StreamError::Cancelled);
            }
            if st.done {
                return Ok(Received::End);
            }
            if self.shared.cv.wait_until(&mut st, deadline).timed_out()
                && st.queue.is_empty()
                && !st.done
            {
                return Err(StreamError::IdleTimeout);
            }
        }
    }

    /// Acknowledges one consumed batch, letting the producer send another.
    pub fn ack(&self) {
        self.shared
            .state
            .lock()
            .credits
            .ack(0, 1, 0, false, Instant::now());
        self.shared.cv.notify_all();
    }

    /// Changes the window (takes effect for the producer's next send).
    pub fn set_window(&self, window: u32) {
        let w = window.clamp(1, crate::window::WINDOW_BATCHES_MAX);
        self.shared
            .state
            .lock()
            .credits
            .ack(0, 0, w, false, Instant::now());
        self.shared.cv.notify_all();
    }

    /// The current window.
    pub fn window(&self) -> u32 {
        self.shared.state.lock().credits.window(0)
    }

    /// Cancels the stream; returns the rows that arrived but were never
    /// consumed (thrown away).
    pub fn cancel(&self) -> u64 {
        let mut st = self.shared.state.lock();
        st.credits.ack(0, 0, 0, true, Instant::now());
        let wasted = st.queue.drain(..).map(|b| b.len() as u64).sum();
        drop(st);
        self.shared.cv.notify_all();
        wasted
    }

    /// Counters of the producer so far.
    pub fn stats(&self) -> StreamStats {
        self.shared.state.lock().stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waits (bounded) until the producer has sent `n` batches.
    fn wait_for_batches(rx: &Receiver, n: u64) {
        let t = Instant::now();
        while rx.stats().batches_sent < n {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "producer stuck at {:?}",
                rx.stats()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn rows(n: usize) -> Vec<Row> {
        (0..n)
            .map(|i| (format!("k{i:05}").into_bytes(), vec![0; 10]))
            .collect()
    }

    #[test]
    fn a_consumer_that_stops_acknowledging_stops_the_producer() {
        let cfg = StreamConfig {
            window_batches: 5,
            batch_rows_max: 10,
            ack_wait_timeout: Duration::from_millis(300),
            ..StreamConfig::default()
        };
        let (tx, rx) = stream(cfg);
        let producer = std::thread::spawn(move || {
            let r = tx.send_all(rows(1000));
            (r, tx.stats())
        });
        // Receive everything that arrives but never acknowledge.
        wait_for_batches(&rx, 5);
        let mut got = 0;
        while rx.ready() {
            match rx.recv().unwrap() {
                Received::Batch(_) => got += 1,
                Received::End => break,
            }
        }
        let (r, stats) = producer.join().unwrap();
        assert_eq!(r, Err(StreamError::AckTimeout));
        assert_eq!(stats.batches_sent, 5, "{stats:?}");
        assert_eq!(stats.in_flight_max, 5);
        assert_eq!(got, 5);
    }

    #[test]
    fn acknowledging_lets_everything_through_within_the_window() {
        let cfg = StreamConfig {
            window_batches: 2,
            batch_rows_max: 7,
            ..StreamConfig::default()
        };
        let (tx, rx) = stream(cfg);
        let producer = std::thread::spawn(move || tx.send_all(rows(100)));
        let mut n = 0;
        while let Received::Batch(b) = rx.recv().unwrap() {
            n += b.len();
            rx.ack();
        }
        producer.join().unwrap().unwrap();
        assert_eq!(n, 100);
        assert!(rx.stats().in_flight_max <= 2);
        assert_eq!(rx.stats().batches_sent, 15);
    }

    #[test]
    fn cancel_stops_the_producer_and_counts_waste() {
        let (tx, rx) = stream(StreamConfig {
            window_batches: 3,
            batch_rows_max: 10,
            ..StreamConfig::default()
        });
        let producer = std::thread::spawn(move || tx.send_all(rows(1000)));
        wait_for_batches(&rx, 3);
        assert_eq!(rx.cancel(), 30);
        assert_eq!(producer.join().unwrap(), Err(StreamError::Cancelled));
        assert_eq!(rx.recv(), Err(StreamError::Cancelled));
    }

    #[test]
    fn an_idle_producer_times_the_consumer_out() {
        let (tx, rx) = stream(StreamConfig {
            idle_timeout: Duration::from_millis(50),
            ..StreamConfig::default()
        });
        assert_eq!(rx.recv(), Err(StreamError::IdleTimeout));
        drop(tx);
        assert_eq!(rx.recv(), Ok(Received::End));
    }
}
