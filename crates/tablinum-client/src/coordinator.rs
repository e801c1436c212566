//! The coordinator of table-wide queries: one flow-controlled gRPC scan
//! stream per tablet, merged in key order by `tablinum_stream::merge`, with
//! skip and limit, every stream cancelled the moment the limit is met.
//!
//! Owns [`GrpcSource`], the bridge from a tonic bidirectional stream to the
//! merge's [`BatchSource`]: batches arrive on a pump task, the merge takes
//! them on its own (blocking) thread, and each consumed batch sends one
//! acknowledgement back to the server. Never acknowledges a batch the merge
//! has not consumed.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use parking_lot::Mutex;
use tablinum_proto::v1::{self, scan_client_message::Msg, ScanAck, ScanClientMessage, ScanStart};
use tablinum_stream::channel::{Received, StreamError};
use tablinum_stream::merge::BatchSource;
use tablinum_stream::Row;
use tokio::sync::mpsc::UnboundedSender;
use tonic::Status;

use crate::sortkey;

/// What the pump task hands the merge.
enum Msg2 {
    Batch(Vec<Row>, bool),
    Failed(Status),
}

/// One tablet's scan stream as a merge source.
pub(crate) struct GrpcSource {
    rx: Mutex<mpsc::Receiver<Msg2>>,
    peeked: Mutex<Option<Msg2>>,
    acks: Mutex<Option<UnboundedSender<ScanClientMessage>>>,
    window: AtomicU32,
    ended: AtomicBool,
    idle: Duration,
    /// Rows that arrived from the server.
    pub(crate) rows_received: std::sync::Arc<AtomicU64>,
    /// The status that failed the stream, if any.
    pub(crate) failure: Mutex<Option<Status>>,
}

/// Opens the scan stream of one tablet on `client`'s runtime and returns its
/// merge source. The stream opens in the background; failures arrive as
/// [`StreamError::Failed`] with the status kept in `failure`.
pub(crate) fn open(
    handle: &tokio::runtime::Handle,
    channel: tonic::transport::Channel,
    start: ScanStart,
    index: bool,
    idle: Duration,
) -> GrpcSource {
    let window = start.window;
    let (ack_tx, ack_rx) = tokio::sync::mpsc::unbounded_channel();
    let _ = ack_tx.send(ScanClientMessage {
        msg: Some(Msg::Start(start)),
    });
    let (tx, rx) = mpsc::channel();
    let rows_received = std::sync::Arc::new(AtomicU64::new(0));
    let counter = rows_received.clone();
    handle.spawn(async move {
        let mut client = v1::tablet_server_client::TabletServerClient::new(channel)
            .max_decoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX);
        let req = tokio_stream::wrappers::UnboundedReceiverStream::new(ack_rx);
        let mut stream = match client.scan(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                let _ = tx.send(Msg2::Failed(s));
                return;
            }
        };
        loop {
            match stream.message().await {
                Ok(Some(b)) => {
                    counter.fetch_add(b.rows.len() as u64, Ordering::Relaxed);
                    let rows: Vec<Row> = b
                        .rows
                        .into_iter()
                        .map(|r| {
                            if index {
                                (sortkey::encode(&r.term, &r.key), r.value)
                            } else {
                                (r.key, r.value)
                            }
                        })
                        .collect();
                    let last = b.last;
                    if tx.send(Msg2::Batch(rows, last)).is_err() || last {
                        return;
                    }
                }
                Ok(None) => {
                    let _ = tx.send(Msg2::Failed(Status::unavailable(
                        "scan stream ended without its last batch",
                    )));
                    return;
                }
                Err(s) => {
                    let _ = tx.send(Msg2::Failed(s));
                    return;
                }
            }
        }
    });
    GrpcSource {
        rx: Mutex::new(rx),
        peeked: Mutex::new(None),
        acks: Mutex::new(Some(ack_tx)),
        window: AtomicU32::new(window),
        ended: AtomicBool::new(false),
        idle,
        rows_received,
        failure: Mutex::new(None),
    }
}

impl GrpcSource {
    fn send(&self, ack: ScanAck) {
        if let Some(tx) = self.acks.lock().as_ref() {
            let _ = tx.send(ScanClientMessage {
                msg: Some(Msg::Ack(ack)),
            });
        }
    }

    fn take(&self, m: Msg2) -> Result<Received, StreamError> {
        match m {
            Msg2::Batch(rows, last) => {
                if last {
                    self.ended.store(true, Ordering::Release);
                    // The server sends nothing more: stop the request stream.
                    self.acks.lock().take();
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
                if self.failure.lock().is_none() {
                    *self.failure.lock() = Some(Status::unavailable("scan stream dropped"));
                }
                Err(StreamError::Failed)
            }
        }
    }

    fn ack(&self) {
        self.send(ScanAck {
            batches: 1,
            window: 0,
        });
    }

    fn set_window(&self, window: u32) {
        self.window.store(window, Ordering::Relaxed);
        self.send(ScanAck { batches: 0, window });
    }

    fn window(&self) -> u32 {
        self.window.load(Ordering::Relaxed)
    }

    fn cancel(&self) -> u64 {
        // Ending the request stream tells the server to stop.
        self.acks.lock().take();
        let mut wasted = 0;
        if let Some(Msg2::Batch(rows, _)) = self.peeked.lock().take() {
            wasted += rows.len() as u64;
        }
        while let Ok(m) = self.rx.lock().try_recv() {
            if let Msg2::Batch(rows, _) = m {
                wasted += rows.len() as u64;
            }
        }
        wasted
    }
}
