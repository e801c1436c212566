//! The coordinator's transport: the tablet scans of one query on one server
//! travel in one `ScanMany` gRPC stream (one HTTP/2 stream per server per
//! query, not per tablet), each tablet a slot with its own credit window,
//! and each slot surfaces as a [`GrpcSource`] the merge of
//! `tablinum_stream::merge` reads.
//!
//! Owns the bridge: a pump task demultiplexes response messages into one
//! queue per slot; the merge takes batches on its own (blocking) thread;
//! each consumed batch queues one slot acknowledgement, and the request
//! stream sends every queued acknowledgement in one message. Never
//! acknowledges a batch the merge has not consumed.
//!
//! Cancelling never resets the HTTP/2 stream: when every slot of a stream
//! has ended or been cancelled the request side is closed and the pump
//! drains the response until the server ends it (the server stops at its
//! next credit check). Mass RST_STREAMs from a coordinator that cancels
//! per tablet trip the server's rapid-reset protection (measured:
//! `ResourceExhausted` within seconds at q = 192), and draining lets the
//! coordinator count every row a tablet sent. One stream per tablet cost
//! ~84 µs of HTTP/2 and task overhead per tablet (16 ms per query at
//! q = 192), more than the rows themselves.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tablinum_proto::v1::{
    self, scan_many_client_message::Msg, ScanManyAcks, ScanManyClientMessage, ScanManyStart,
    ScanStart, SlotAck,
};
use tablinum_stream::channel::{Received, StreamError};
use tablinum_stream::merge::BatchSource;
use tablinum_stream::Row;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tonic::Status;

use crate::sortkey;

/// Rows the servers of a query read and matched (from every batch).
#[derive(Debug, Default)]
pub(crate) struct ExaminedCounters {
    pub rows: AtomicU64,
    pub matched: AtomicU64,
}

/// What the pump task hands one slot.
enum Msg2 {
    /// Rows, last, the sort key of the row after them.
    Batch(Vec<Row>, bool, Option<Vec<u8>>),
    Failed(Status),
}

/// The request side of one server's stream, shared by its slots.
struct Shared {
    acks: Mutex<Option<UnboundedSender<SlotAck>>>,
    /// Slots not yet ended or cancelled; at zero the request side closes.
    open: AtomicUsize,
    /// Batches the whole query consumed (shared by all its streams).
    progress: Arc<AtomicU64>,
}

impl Shared {
    fn send(&self, ack: SlotAck) {
        if let Some(tx) = self.acks.lock().as_ref() {
            let _ = tx.send(ack);
        }
    }

    fn slot_closed(&self) {
        if self.open.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.acks.lock().take();
        }
    }
}

/// A stream with nothing to acknowledge for this long sends an empty ack
/// message, ms: the server's ack-wait timeout (which must be longer) then
/// means "the consumer is gone", not "the merge is busy with another
/// server's tablets" (tablets are key ranges, so a query often reads one
/// server's tablets long before another's).
pub const SCAN_KEEPALIVE_MS: u64 = 250;

/// The request stream: the start message, then every queued ack in one
/// message each time the transport asks for more, and keepalives.
struct RequestStream {
    start: Option<ScanManyClientMessage>,
    rx: UnboundedReceiver<SlotAck>,
    keepalive: tokio::time::Interval,
    /// Batches the query consumed from all its sources: keepalives carry
    /// it, so a server sees progress made on other servers' tablets.
    progress: Arc<AtomicU64>,
}

impl tokio_stream::Stream for RequestStream {
    type Item = ScanManyClientMessage;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(s) = self.start.take() {
            return Poll::Ready(Some(s));
        }
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(a)) => {
                let mut acks = vec![a];
                while let Ok(a) = self.rx.try_recv() {
                    acks.push(a);
                }
                Poll::Ready(Some(ScanManyClientMessage {
                    msg: Some(Msg::Acks(ScanManyAcks { acks, progress: 0 })),
                }))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => match self.keepalive.poll_tick(cx) {
                Poll::Ready(_) => Poll::Ready(Some(ScanManyClientMessage {
                    msg: Some(Msg::Acks(ScanManyAcks {
                        acks: Vec::new(),
                        progress: self.progress.load(Ordering::Relaxed),
                    })),
                })),
                Poll::Pending => Poll::Pending,
            },
        }
    }
}

/// One tablet's scan (a slot of a server stream) as a merge source.
pub(crate) struct GrpcSource {
    slot: u32,
    shared: Arc<Shared>,
    rx: Mutex<mpsc::Receiver<Msg2>>,
    peeked: Mutex<Option<Msg2>>,
    window: AtomicU32,
    ended: AtomicBool,
    closed: AtomicBool,
    idle: Duration,
    /// Rows of this slot that arrived from the server.
    pub(crate) rows_received: Arc<AtomicU64>,
    /// The sort key of the row after the last batch received.
    hint: Mutex<Option<Vec<u8>>>,
    /// The status that failed the stream, if any.
    pub(crate) failure: Mutex<Option<Status>>,
    /// The server stream's pump task (held by the stream's first slot); it
    /// ends when the server has ended the stream.
    pub(crate) pump: Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// Signalled (one stored permit) each time the pump hands any slot of
    /// this stream a message, so an async reader can wait for the next
    /// one without a thread per slot (batch scans).
    pub(crate) arrived: Arc<tokio::sync::Notify>,
}

/// Opens one `ScanMany` stream on `channel` for `starts` (tablets of one
/// server) and returns one merge source per start, in order. The stream
/// opens in the background; failures arrive as [`StreamError::Failed`] with
/// the status kept in `failure`.
pub(crate) fn open_many(
    handle: &tokio::runtime::Handle,
    channel: crate::Transport,
    starts: Vec<ScanStart>,
    index: bool,
    idle: Duration,
    progress: Arc<AtomicU64>,
    examined: Arc<ExaminedCounters>,
) -> Vec<GrpcSource> {
    let n = starts.len();
    let windows: Vec<u32> = starts.iter().map(|s| s.window).collect();
    let (ack_tx, ack_rx) = tokio::sync::mpsc::unbounded_channel();
    let shared = Arc::new(Shared {
        acks: Mutex::new(Some(ack_tx)),
        open: AtomicUsize::new(n),
        progress: progress.clone(),
    });
    let request = RequestStream {
        start: Some(ScanManyClientMessage {
            msg: Some(Msg::Start(ScanManyStart { scans: starts })),
        }),
        rx: ack_rx,
        keepalive: {
            let period = Duration::from_millis(SCAN_KEEPALIVE_MS);
            let mut i = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        },
        progress,
    };
    let arrived = Arc::new(tokio::sync::Notify::new());
    let mut txs = Vec::with_capacity(n);
    let mut sources = Vec::with_capacity(n);
    let mut counters = Vec::with_capacity(n);
    for (i, w) in windows.into_iter().enumerate() {
        let (tx, rx) = mpsc::channel();
        let counter = Arc::new(AtomicU64::new(0));
        txs.push(tx);
        counters.push(counter.clone());
        sources.push(GrpcSource {
            slot: u32::try_from(i).unwrap_or(u32::MAX),
            shared: shared.clone(),
            rx: Mutex::new(rx),
            peeked: Mutex::new(None),
            window: AtomicU32::new(w),
            ended: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            idle,
            rows_received: counter,
            hint: Mutex::new(None),
            failure: Mutex::new(None),
            pump: Mutex::new(None),
            arrived: arrived.clone(),
        });
    }
    let pump = handle.spawn(async move {
        let fail_all = |s: &Status, txs: &[mpsc::Sender<Msg2>]| {
            for tx in txs {
                let _ = tx.send(Msg2::Failed(s.clone()));
            }
            arrived.notify_one();
        };
        let mut client = v1::tablet_server_client::TabletServerClient::new(channel)
            .max_decoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX);
        let mut stream = match client.scan_many(request).await {
            Ok(r) => r.into_inner(),
            Err(s) => return fail_all(&s, &txs),
        };
        let mut last_seen = vec![false; txs.len()];
        loop {
            match stream.message().await {
                Ok(Some(m)) => {
                    for b in m.batches {
                        let i = b.slot as usize;
                        let (Some(tx), Some(counter)) = (txs.get(i), counters.get(i)) else {
                            continue;
                        };
                        counter.fetch_add(b.rows.len() as u64, Ordering::Relaxed);
                        examined.rows.fetch_add(b.examined, Ordering::Relaxed);
                        examined.matched.fetch_add(b.matched, Ordering::Relaxed);
                        last_seen[i] |= b.last;
                        let sort_key = |r: v1::Row| {
                            if index {
                                (sortkey::encode(&r.term, &r.key), r.value)
                            } else {
                                (r.key, r.value)
                            }
                        };
                        let rows: Vec<Row> = b.rows.into_iter().map(sort_key).collect();
                        let next = b.next.map(|r| sort_key(r).0);
                        // A slot whose merge is gone just drains.
                        let _ = tx.send(Msg2::Batch(rows, b.last, next));
                    }
                    arrived.notify_one();
                }
                Ok(None) => {
                    // Ended: slots without their last batch were cancelled
                    // (by us) or the server stopped; the merge decides.
                    let s = Status::unavailable("scan stream ended without a slot's last batch");
                    for (i, tx) in txs.iter().enumerate() {
                        if !last_seen[i] {
                            let _ = tx.send(Msg2::Failed(s.clone()));
                        }
                    }
                    arrived.notify_one();
                    return;
                }
                Err(s) => return fail_all(&s, &txs),
            }
        }
    });
    if let Some(first) = sources.first() {
        *first.pump.lock() = Some(pump);
    }
    sources
}

impl GrpcSource {
    /// The slot is finished here: no more acks; the stream's request side
    /// closes once every slot is.
    fn close(&self, cancel: bool) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            if cancel {
                self.shared.send(SlotAck {
                    slot: self.slot,
                    batches: 0,
                    window: 0,
                    cancel: true,
                });
            }
            self.shared.slot_closed();
        }
    }

    fn take(&self, m: Msg2) -> Result<Received, StreamError> {
        match m {
            Msg2::Batch(rows, last, next) => {
                *self.hint.lock() = next;
                if last {
                    self.ended.store(true, Ordering::Release);
                    self.close(false);
                    if rows.is_empty() {
                        return Ok(Received::End);
                    }
                }
                Ok(Received::Batch(rows))
            }
            Msg2::Failed(s) => {
                *self.failure.lock() = Some(s);
                Err(StreamError::Failed)
            }
        }
    }
}

impl BatchSource for GrpcSource {
    fn ready(&self) -> bool {
        if self.ended.load(Ordering::Acquire) {
            return true;
        }
        let mut p = self.peeked.lock();
        if p.is_some() {
            return true;
        }
        match self.rx.lock().try_recv() {
            Ok(m) => {
                *p = Some(m);
                true
            }
            Err(mpsc::TryRecvError::Empty) => false,
            Err(mpsc::TryRecvError::Disconnected) => true,
        }
    }

    fn recv(&self) -> Result<Received, StreamError> {
        if let Some(m) = self.peeked.lock().take() {
            return self.take(m);
        }
        if self.ended.load(Ordering::Acquire) {
            return Ok(Received::End);
        }
        match self.rx.lock().recv_timeout(self.idle) {
            Ok(m) => self.take(m),
            Err(mpsc::RecvTimeoutError::Timeout) => Err(StreamError::IdleTimeout),
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let mut f = self.failure.lock();
                if f.is_none() {
                    *f = Some(Status::unavailable("scan stream dropped"));
                }
                Err(StreamError::Failed)
            }
        }
    }

    fn ack(&self) {
        self.shared.progress.fetch_add(1, Ordering::Relaxed);
        if !self.closed.load(Ordering::Acquire) {
            self.shared.send(SlotAck {
                slot: self.slot,
                batches: 1,
                window: 0,
                cancel: false,
            });
        }
    }

    fn ack_with_window(&self, window: u32) {
        self.window.store(window, Ordering::Relaxed);
        self.shared.progress.fetch_add(1, Ordering::Relaxed);
        if !self.closed.load(Ordering::Acquire) {
            self.shared.send(SlotAck {
                slot: self.slot,
                batches: 1,
                window,
                cancel: false,
            });
        }
    }

    fn set_window(&self, window: u32) {
        self.window.store(window, Ordering::Relaxed);
        if !self.closed.load(Ordering::Acquire) {
            self.shared.send(SlotAck {
                slot: self.slot,
                batches: 0,
                window,
                cancel: false,
            });
        }
    }

    fn window(&self) -> u32 {
        self.window.load(Ordering::Relaxed)
    }

    fn next_hint(&self) -> Option<Vec<u8>> {
        self.hint.lock().take()
    }

    fn cancel(&self) -> u64 {
        self.close(true);
        let mut wasted = 0;
        if let Some(Msg2::Batch(rows, _, _)) = self.peeked.lock().take() {
            wasted += rows.len() as u64;
        }
        while let Ok(m) = self.rx.lock().try_recv() {
            if let Msg2::Batch(rows, _, _) = m {
                wasted += rows.len() as u64;
            }
        }
        wasted
    }
}
