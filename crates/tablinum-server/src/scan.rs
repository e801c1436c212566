//! The server side of flow-controlled scans.
//!
//! The credit rules of a stream's slots (one slot per tablet scan: windows,
//! bytes in flight, cancellation, the idle rule) are the pure
//! `tablinum_stream::credit` core, which the in-process channel and its
//! model test run too; this module wraps it for tokio ([`Credits`]: wake-ups,
//! the ack-wait sleep) and owns the server-wide [`ByteBudget`], the cursor
//! that reads one
//! tablet's objects or index entries in batches bounded by rows and bytes,
//! and [`produce`], the one producer loop behind both `Scan` (one slot) and
//! `ScanMany` (many slots on one gRPC stream). A stream whose client went
//! away stops at its next credit check. Never reads a batch the window or
//! the byte budgets do not allow.

use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tablinum_engine::{HeadIter, ObjectIter, Store};
use tablinum_proto::v1::Row;
use tablinum_stream::credit::{Budgets, CreditStop, Credits as StreamCredits, Take};
use tokio::sync::Notify;

/// Messages a scan producer may queue for the transport before it waits
/// (each at most `batch_bytes`, or one row beyond it).
pub const PRODUCER_QUEUE_MESSAGES: usize = 4;

/// A scan producer's end of its [`crate::admit::outbox`].
pub type Outbox = crate::admit::OutboxTx<Vec<tablinum_proto::v1::SlotBatch>>;
/// The transport's end of a scan's outbox.
pub type OutboxRx = crate::admit::OutboxRx<Vec<tablinum_proto::v1::SlotBatch>>;

/// Bytes of unacknowledged scan batches one server (or one caller on it)
/// holds at most, across all its streams: a stream waits for credit while
/// the total is at or over the limit, except that a slot with nothing in
/// flight may still send one row (so no merge waits forever on bytes
/// another of its own streams holds), for a caller until its total reaches
/// [`tablinum_stream::credit::EXEMPT_BUDGET_FACTOR`] times its limit.
#[derive(Debug)]
pub struct ByteBudget {
    used: AtomicUsize,
    max: usize,
    freed: Notify,
}

impl ByteBudget {
    /// A budget of `max` bytes.
    pub fn new(max: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            used: AtomicUsize::new(0),
            max,
            freed: Notify::new(),
        })
    }

    /// Bytes held now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    fn charge(&self, n: usize) {
        self.used.fetch_add(n, Ordering::AcqRel);
    }

    fn refund(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
            self.freed.notify_waiters();
        }
    }

    /// Sets `n` bytes aside until the returned guard drops, if they fit
    /// under the limit now; `None` if they do not.
    pub fn try_reserve(self: &Arc<Self>, n: usize) -> Option<Reserved> {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(n).filter(|&t| t <= self.max)
            })
            .ok()?;
        Some(Reserved {
            budget: self.clone(),
            n,
        })
    }
}

/// Bytes set aside in a [`ByteBudget`]; given back when dropped.
#[derive(Debug)]
pub struct Reserved {
    budget: Arc<ByteBudget>,
    n: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.budget.refund(self.n);
    }
}

/// The bytes of unacknowledged batches a stream of `starts` may hold: the
/// smallest non-zero `stream_bytes_max` its scans ask for, never more than
/// the server's `server_max`.
pub fn stream_bytes_max(server_max: u64, starts: &[tablinum_proto::v1::ScanStart]) -> usize {
    let asked = starts
        .iter()
        .map(|s| s.stream_bytes_max)
        .filter(|&b| b > 0)
        .min()
        .unwrap_or(u64::MAX);
    usize::try_from(asked.min(server_max)).unwrap_or(usize::MAX)
}

/// The windows of one stream's slots, shared by the producer and the task
/// reading acknowledgements: the pure [`tablinum_stream::credit::Credits`]
/// (which the in-process channel and its model test run too) behind a
/// lock, plus the wake-ups and the byte budgets it draws from.
#[derive(Debug)]
pub struct Credits {
    st: Mutex<StreamCredits>,
    notify: Notify,
    server: Arc<ByteBudget>,
    /// The calling token's budget on this server (none for members).
    caller: Option<Arc<ByteBudget>>,
    /// Messages queued for the transport and not taken by it yet.
    queued: AtomicUsize,
}

/// Why a producer stopped waiting.
#[derive(Debug, PartialEq, Eq)]
pub enum CreditError {
    /// The client cancelled or went away.
    Cancelled,
    /// Batches stayed unacknowledged, with no progress, for the ack-wait
    /// timeout.
    AckTimeout,
    /// The client sent something the protocol does not allow.
    Invalid(String),
}

/// Now, on the clock the credit rules run on (tokio's, so paused-time
/// tests apply).
fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

impl Credits {
    /// One window per slot, batches; at most `stream_bytes_max` bytes of
    /// unacknowledged batches, drawn from the server's `server` budget and
    /// the calling token's `caller` budget.
    pub fn new(
        windows: &[u32],
        stream_bytes_max: usize,
        server: Arc<ByteBudget>,
        caller: Option<Arc<ByteBudget>>,
    ) -> Arc<Credits> {
        Arc::new(Credits {
            st: Mutex::new(StreamCredits::new(windows, stream_bytes_max, now())),
            notify: Notify::new(),
            server,
            caller,
            queued: AtomicUsize::new(0),
        })
    }

    /// `delta` messages were queued for the transport (negative: a send
    /// that did not go out).
    pub fn queued(&self, delta: isize) {
        if delta >= 0 {
            self.queued
                .fetch_add(delta.unsigned_abs(), Ordering::AcqRel);
        } else {
            let _ = self
                .queued
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |q| {
                    Some(q.saturating_sub(delta.unsigned_abs()))
                });
        }
    }

    /// The transport took a message: progress the server saw itself.
    pub fn taken(&self) {
        self.queued(-1);
        self.st.lock().taken(now());
        self.notify.notify_waiters();
    }

    /// The queue was dropped (the stream was killed).
    pub fn drain_reset(&self) {
        self.queued.store(0, Ordering::Release);
    }

    /// When the server last saw progress itself (acks, cancels, the
    /// transport taking a message; never keepalives).
    pub fn seen(&self) -> std::time::Instant {
        self.st.lock().seen()
    }

    /// Takes all the credit of every slot in `wanted` that has some,
    /// waiting until at least one has and the byte budgets allow a batch
    /// (see [`tablinum_stream::credit`] for the rules, the ack-wait timeout
    /// among them). Returns the slots that got credit with the batches each
    /// may send now.
    pub async fn acquire(
        &self,
        wanted: &[usize],
        timeout: Duration,
    ) -> Result<Vec<(usize, u32)>, CreditError> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let freed = self.server.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            // Created before the check, so a refund between the check
            // and the wait still wakes it.
            let caller_freed = self.caller.as_ref().map(|c| c.freed.notified());
            let caller_freed = async {
                match caller_freed {
                    Some(n) => n.await,
                    None => std::future::pending().await,
                }
            };
            tokio::pin!(caller_freed);
            let take = self.st.lock().take(wanted, self.budgets(), timeout, now());
            match take {
                Take::Granted(g) => return Ok(g),
                Take::Stop(CreditStop::Cancelled) => return Err(CreditError::Cancelled),
                Take::Stop(CreditStop::AckTimeout) => return Err(CreditError::AckTimeout),
                Take::Stop(CreditStop::Invalid(m)) => return Err(CreditError::Invalid(m)),
                Take::Wait { deadline: Some(d) } => tokio::select! {
                    _ = &mut notified => {}
                    _ = &mut freed => {}
                    _ = &mut caller_freed => {}
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(d)) => {}
                },
                Take::Wait { deadline: None } => tokio::select! {
                    _ = &mut notified => {}
                    _ = &mut freed => {}
                    _ = &mut caller_freed => {}
                },
            }
        }
    }

    /// What the server's and the caller's byte budgets allow now. Only a
    /// caller's budget is ever exhausted: a spent server budget still lets
    /// every slot holding nothing send its row, so a merge of many tablets
    /// under a small server budget is never starved by one tablet that
    /// took the budget first; a token's rows past its own budget stop at
    /// twice it.
    fn budgets(&self) -> Budgets {
        let server = if self.server.used() >= self.server.max {
            Budgets::Spent
        } else {
            Budgets::Open
        };
        match &self.caller {
            Some(c) => server.max(Budgets::of(c.used(), c.max)),
            None => server,
        }
    }

    /// Charges `n` bytes to every budget this stream draws from.
    fn charge(&self, n: usize) {
        self.server.charge(n);
        if let Some(c) = &self.caller {
            c.charge(n);
        }
    }

    /// Gives `n` bytes back to every budget this stream draws from.
    fn refund(&self, n: usize) {
        self.server.refund(n);
        if let Some(c) = &self.caller {
            c.refund(n);
        }
    }

    /// Whether the byte budgets let slot `i` send one more batch in the
    /// current round.
    pub fn may_send(&self, i: usize) -> bool {
        self.st.lock().may_send(i, self.budgets())
    }

    /// Whether slot `i` may send only because it holds nothing while the
    /// byte budgets are spent: its batch is then one row.
    pub fn only_by_exemption(&self, i: usize) -> bool {
        self.st.lock().only_by_exemption(i, self.budgets())
    }

    /// Gives back `batches` of credit `slot` took but did not use.
    pub fn unspend(&self, slot: usize, batches: u32) {
        self.st.lock().unspend(slot, batches);
    }

    /// A batch of `bytes` went out for `slot`: it holds them until acked.
    pub fn sent(&self, slot: usize, bytes: usize) {
        if self.st.lock().sent(slot, bytes) {
            self.charge(bytes);
        }
    }

    /// The client consumed `batches` of `slot`; a non-zero `window` replaces
    /// its window; `cancel` stops it. Unknown slots are ignored; a window
    /// over [`tablinum_proto::WINDOW_BATCHES_MAX`] ends the stream with
    /// INVALID_ARGUMENT.
    pub fn ack(&self, slot: usize, batches: u32, window: u32, cancel: bool) {
        let freed = self.st.lock().ack(slot, batches, window, cancel, now());
        self.refund(freed);
        self.notify.notify_waiters();
    }

    /// A keepalive reporting the query's `progress` (rows its merge has
    /// taken from all its sources): a higher value than before counts as
    /// progress, the same value does not, and none counts while the
    /// transport holds a message of this stream it has not taken.
    pub fn keepalive(&self, progress: u64) {
        let drained = self.queued.load(Ordering::Acquire) == 0;
        self.st.lock().keepalive(progress, drained, now());
        self.notify.notify_waiters();
    }

    /// Whether `slot` was cancelled.
    pub fn cancelled(&self, slot: usize) -> bool {
        self.st.lock().cancelled(slot)
    }

    /// Whether the client ended its side while any of `open` (slots not
    /// finished) was still wanted, i.e. not cancelled slot by slot.
    pub fn abandoned(&self, open: &[usize]) -> bool {
        self.st.lock().abandoned(open)
    }

    /// The client went away: every slot stops.
    pub fn end(&self) {
        let freed = self.st.lock().end();
        self.refund(freed);
        self.notify.notify_waiters();
    }

    /// Bytes of this stream's unacknowledged batches.
    pub fn bytes_in_flight(&self) -> usize {
        self.st.lock().bytes_in_flight()
    }
}

impl Drop for Credits {
    fn drop(&mut self) {
        // The stream is over: whatever it held goes back to the budgets.
        let held = self.st.get_mut().bytes_in_flight();
        self.refund(held);
    }
}

/// Where index pages come from: a tablet's store, or a scan server's
/// read-only view of it.
pub trait IndexSource: Send + Sync {
    /// As `Store::index_query`.
    fn index_query(
        &self,
        name: &[u8],
        terms: (Bound<&[u8]>, Bound<&[u8]>),
        return_terms: bool,
        limit: usize,
    ) -> tablinum_engine::Result<Vec<tablinum_engine::IndexHit>>;
}

impl IndexSource for Store {
    fn index_query(
        &self,
        name: &[u8],
        terms: (Bound<&[u8]>, Bound<&[u8]>),
        return_terms: bool,
        limit: usize,
    ) -> tablinum_engine::Result<Vec<tablinum_engine::IndexHit>> {
        Store::index_query(self, name, terms, return_terms, limit)
    }
}

impl IndexSource for tablinum_engine::ReadOnlyStore {
    fn index_query(
        &self,
        name: &[u8],
        terms: (Bound<&[u8]>, Bound<&[u8]>),
        return_terms: bool,
        limit: usize,
    ) -> tablinum_engine::Result<Vec<tablinum_engine::IndexHit>> {
        tablinum_engine::ReadOnlyStore::index_query(self, name, terms, return_terms, limit)
    }
}

/// The scan threads a producer's batch reads wait for, with the busy rule
/// (scan servers; tablet servers read without one).
#[derive(Clone)]
pub struct Gate {
    /// The queue in front of the scan threads.
    pub queue: Arc<crate::scan_queue::ScanQueue>,
    /// The stream's busy timeout (none: wait).
    pub busy: Option<tablinum_dispatch::busy::BusyTimeout>,
}

/// Reads one tablet in batches.
pub enum Cursor {
    /// Keys and values.
    Objects(ObjectIter),
    /// Keys only.
    Keys(HeadIter),
    /// Index entries (term, key), paged through `index_query`.
    Index {
        /// The tablet (its store, or a scan server's view of it).
        store: Arc<dyn IndexSource>,
        /// Index name.
        name: Vec<u8>,
        /// Next lower bound on terms.
        lo: Bound<Vec<u8>>,
        /// Exclusive end term (empty: unbounded).
        end: Vec<u8>,
        /// Last (term, key) returned, to skip on the next page.
        last: Option<(Vec<u8>, Vec<u8>)>,
        /// Fetched, not yet returned.
        buf: VecDeque<Row>,
        /// No more pages.
        done: bool,
    },
}

impl Cursor {
    /// True when batches come from the ledger alone (keys, index entries):
    /// small reads of cached blocks, cheap enough to run on the async
    /// worker. Value reads go through `block_in_place`.
    pub fn ledger_only(&self) -> bool {
        !matches!(self, Cursor::Objects(_))
    }
}

/// Bytes a row counts against batch and message caps besides its key,
/// value and term: its share of the framing (so a keys-only batch of tiny
/// keys is bounded too).
pub const ROW_OVERHEAD_BYTES: usize = 32;

/// What one row counts against the byte caps.
pub fn row_bytes(r: &Row) -> usize {
    r.key.len() + r.value.len() + r.term.len() + ROW_OVERHEAD_BYTES
}

/// Bytes of batches packed into one message, at most (unless a single
/// batch is larger): the gRPC limit less room for framing. A batch is at
/// most the batch cap plus one row, which `config::BATCH_BYTES_MAX` keeps
/// below this.
pub const MESSAGE_BYTES_BUDGET: usize = tablinum_proto::GRPC_MESSAGE_BYTES_MAX - (4 << 20);

/// Smallest index page fetched at once, rows (a page is two batches).
const INDEX_PAGE_ROWS_MIN: usize = 16;

/// A scan's server-side filter (the `ScanFilter` of its start): runs where
/// the data is, on tablet and scan servers alike.
#[derive(Debug, Clone, Default)]
pub struct RowFilter {
    grep: Vec<u8>,
    key_prefix: Vec<u8>,
    /// Send no rows, only counts.
    pub count_only: bool,
}

/// Rows read and rows matching the filter, since they were last taken.
#[derive(Debug, Clone, Copy, Default)]
pub struct Examined {
    /// Rows read from storage.
    pub rows: u64,
    /// Of those, rows that matched.
    pub matched: u64,
}

impl RowFilter {
    /// The filter of a scan start (none when it sets no condition), or
    /// INVALID_ARGUMENT naming what is wrong.
    pub fn from_wire(
        f: Option<&tablinum_proto::v1::ScanFilter>,
    ) -> Result<Option<RowFilter>, tonic::Status> {
        let Some(f) = f else { return Ok(None) };
        if f.grep.len() > tablinum_proto::FILTER_GREP_BYTES_MAX {
            return Err(tonic::Status::invalid_argument(format!(
                "filter grep of {} bytes is over the limit {}",
                f.grep.len(),
                tablinum_proto::FILTER_GREP_BYTES_MAX
            )));
        }
        if f.key_prefix.len() > tablinum_engine::options::KEY_BYTES_MAX {
            return Err(tonic::Status::invalid_argument(format!(
                "filter key_prefix of {} bytes is over the key limit {}",
                f.key_prefix.len(),
                tablinum_engine::options::KEY_BYTES_MAX
            )));
        }
        if f.grep.is_empty() && f.key_prefix.is_empty() && !f.count_only {
            return Ok(None);
        }
        Ok(Some(RowFilter {
            grep: f.grep.clone(),
            key_prefix: f.key_prefix.clone(),
            count_only: f.count_only,
        }))
    }

    fn matches(&self, r: &Row) -> bool {
        let contains = |hay: &[u8]| {
            self.grep.len() <= hay.len() && hay.windows(self.grep.len()).any(|w| w == self.grep)
        };
        r.key.starts_with(&self.key_prefix)
            && (self.grep.is_empty() || contains(&r.key) || contains(&r.value))
    }
}

impl Cursor {
    /// Next batch of at most `rows_max` rows and about `bytes_max` bytes;
    /// `(rows, exhausted)`. With a filter only matching rows are kept (none
    /// with `count_only`), and a batch examines at most
    /// `rows_max * FILTER_EXAMINE_PER_ROW_MAX` rows; `seen` counts what was
    /// read and what matched.
    pub fn next_batch(
        &mut self,
        rows_max: usize,
        bytes_max: usize,
        filter: Option<&RowFilter>,
        seen: &mut Examined,
    ) -> tablinum_engine::Result<(Vec<Row>, bool)> {
        let mut out = Vec::new();
        let mut bytes = 0usize;
        let examine_max = (rows_max.max(1) * tablinum_proto::FILTER_EXAMINE_PER_ROW_MAX) as u64;
        let mut examined = 0u64;
        loop {
            if out.len() >= rows_max
                || (bytes >= bytes_max && !out.is_empty())
                || (filter.is_some() && examined >= examine_max)
            {
                return Ok((out, false));
            }
            let row = match self {
                Cursor::Objects(it) => match it.next() {
                    Some(r) => {
                        let (key, value) = r?;
                        Row {
                            key,
                            value,
                            term: Vec::new(),
                        }
                    }
                    None => return Ok((out, true)),
                },
                Cursor::Keys(it) => match it.next() {
                    Some(r) => Row {
                        key: r?.0,
                        value: Vec::new(),
                        term: Vec::new(),
                    },
                    None => return Ok((out, true)),
                },
                Cursor::Index {
                    store,
                    name,
                    lo,
                    end,
                    last,
                    buf,
                    done,
                } => {
                    if buf.is_empty() && !*done {
                        let mut page = rows_max.saturating_mul(2).max(INDEX_PAGE_ROWS_MIN);
                        loop {
                            let hi = if end.is_empty() {
                                Bound::Unbounded
                            } else {
                                Bound::Excluded(end.as_slice())
                            };
                            let lo_ref = match lo {
                                Bound::Included(v) => Bound::Included(v.as_slice()),
                                Bound::Excluded(v) => Bound::Excluded(v.as_slice()),
                                Bound::Unbounded => Bound::Unbounded,
                            };
                            let hits = store.index_query(name, (lo_ref, hi), true, page)?;
                            let full = hits.len() >= page;
                            for h in hits {
                                let term = h.term.unwrap_or_default();
                                if let Some((lt, lk)) = last.as_ref() {
                                    if (&term, &h.key) <= (lt, lk) {
                                        continue;
                                    }
                                }
                                buf.push_back(Row {
                                    key: h.key,
                                    value: Vec::new(),
                                    term,
                                });
                            }
                            if !buf.is_empty() || !full {
                                *done = !full;
                                break;
                            }
                            // A page of one term's keys already returned:
                            // fetch a bigger page.
                            page = page.saturating_mul(4);
                        }
                        if let Some(r) = buf.back() {
                            *lo = Bound::Included(r.term.clone());
                        }
                    }
                    match buf.pop_front() {
                        Some(r) => {
                            *last = Some((r.term.clone(), r.key.clone()));
                            r
                        }
                        None => return Ok((out, true)),
                    }
                }
            };
            examined += 1;
            seen.rows += 1;
            if let Some(f) = filter {
                if !f.matches(&row) {
                    continue;
                }
                seen.matched += 1;
                if f.count_only {
                    continue;
                }
            } else {
                seen.matched += 1;
            }
            bytes += row_bytes(&row);
            out.push(row);
        }
    }
}

/// One slot of a producer: a tablet scan and its limits.
pub struct Slot {
    /// The cursor (`None`: the range is empty).
    pub cursor: Option<Cursor>,
    /// A row read ahead (announced as the previous batch's `next`).
    pub lookahead: Option<tablinum_proto::v1::Row>,
    /// Rows per batch, at most.
    pub rows_max: usize,
    /// Rows to send at most.
    pub limit: u64,
    /// Its tablet's count of rows read.
    pub rows_read: Arc<std::sync::atomic::AtomicU64>,
    /// Its server-side filter.
    pub filter: Option<RowFilter>,
    /// Rows examined and matched since its last batch went out.
    pub seen: Examined,
    /// What must live as long as the slot: a scan server's view, whose
    /// reservation keeps the cursor's files from being deleted (the
    /// cursor itself holds the files open, not the reservation).
    pub keep: Option<Arc<dyn std::any::Any + Send + Sync>>,
}

/// Up to `want` rows of `slot`, the row read ahead first.
fn read_batch(
    slot: &mut Slot,
    want: usize,
    bytes_max: usize,
) -> tablinum_engine::Result<(Vec<tablinum_proto::v1::Row>, bool)> {
    let mut rows = Vec::new();
    if want == 0 {
        return Ok((rows, slot.cursor.is_none() && slot.lookahead.is_none()));
    }
    let mut budget = bytes_max;
    if let Some(r) = slot.lookahead.take() {
        budget = budget.saturating_sub(row_bytes(&r));
        rows.push(r);
    }
    // A read-ahead row that fills the byte cap travels alone.
    let rest = if budget == 0 { 0 } else { want - rows.len() };
    let (more, exhausted) = match slot.cursor.as_mut() {
        None => (Vec::new(), true),
        Some(_) if rest == 0 => (Vec::new(), false),
        // Ledger-only batches inline: a block_in_place per small batch
        // costs a worker hand-off (measured: the top of the profile at
        // q = 192). Value reads may wait on the disk.
        Some(c) if c.ledger_only() => {
            c.next_batch(rest, budget, slot.filter.as_ref(), &mut slot.seen)?
        }
        Some(c) => tokio::task::block_in_place(|| {
            c.next_batch(rest, budget, slot.filter.as_ref(), &mut slot.seen)
        })?,
    };
    rows.extend(more);
    Ok((rows, exhausted))
}

/// Counters the producer updates.
pub trait ProducerMetrics: Send + Sync {
    /// `rows` rows went out in one batch.
    fn batch_sent(&self, rows: usize);
    /// A stream ended by the ack-wait timeout.
    fn ack_timeout(&self);
}

/// Produces every slot's batches into `out` (each message carries batches
/// of several slots, about `bytes_max` bytes at most), honouring each
/// slot's credit, until every slot is done or cancelled, the client ends
/// the stream, or no ack arrives within `ack_wait` (then a
/// DEADLINE_EXCEEDED status ends the stream).
pub async fn produce(
    mut slots: Vec<Slot>,
    credits: Arc<Credits>,
    out: &Outbox,
    bytes_max: usize,
    ack_wait: Duration,
    metrics: Arc<dyn ProducerMetrics>,
    gate: Option<Gate>,
) {
    let mut sent = vec![0u64; slots.len()];
    let mut done = vec![false; slots.len()];
    let mut open: Vec<usize> = (0..slots.len()).collect();
    while !open.is_empty() {
        let ready = match credits.acquire(&open, ack_wait).await {
            Ok(r) => r,
            Err(CreditError::Cancelled) => {
                abandon(&credits, &open, out, ack_wait).await;
                return;
            }
            Err(CreditError::AckTimeout) => {
                metrics.ack_timeout();
                let _ = out
                    .send(
                        Err(tonic::Status::deadline_exceeded(format!(
                            "no progress (no batch acknowledged, no query progress reported) \
                             within the ack-wait timeout of {} ms",
                            ack_wait.as_millis()
                        ))),
                        ack_wait,
                    )
                    .await;
                return;
            }
            Err(CreditError::Invalid(m)) => {
                let _ = out
                    .send(Err(tonic::Status::invalid_argument(m)), ack_wait)
                    .await;
                return;
            }
        };
        let mut msg = Vec::with_capacity(ready.len());
        let mut msg_bytes = 0usize;
        // Every batch the credit allows, slot by slot: the first round
        // delivers each slot's whole initial window, so the merge does not
        // stall on batches the server simply had not produced yet. Credit
        // the byte budgets stop is given back.
        let mut work: VecDeque<(usize, u32)> = ready.into();
        while let Some((i, n)) = work.pop_front() {
            if n == 0 {
                continue;
            }
            if !credits.may_send(i) {
                // This slot's credit waits for acks; others may go on.
                credits.unspend(i, n);
                continue;
            }
            work.push_front((i, n - 1));
            if done[i] || credits.cancelled(i) {
                // Its last batch went out earlier in this round, or the
                // client no longer wants it: read nothing more for it.
                work.pop_front();
                continue;
            }
            // A scan server's batch waits for a scan thread, or is busy.
            let _running = match &gate {
                Some(g) => match g.queue.enter(g.busy).await {
                    Ok(r) => Some(r),
                    Err(refused) => {
                        if !msg.is_empty() {
                            let _ = out.send(Ok(std::mem::take(&mut msg)), ack_wait).await;
                        }
                        let _ = out.send(Err(busy_status(&refused)), ack_wait).await;
                        return;
                    }
                },
                None => None,
            };
            // Past the budgets, a slot holding nothing still sends (a merge
            // needs a row of every slot), but one row, not a batch: a
            // stream of thousands of slots holds rows, not batches, beyond
            // its caller's budget.
            let rows_cap = if credits.only_by_exemption(i) {
                1
            } else {
                usize::MAX
            };
            let slot = &mut slots[i];
            let want = usize::try_from(slot.limit - sent[i])
                .unwrap_or(usize::MAX)
                .min(slot.rows_max)
                .min(rows_cap);
            let r = read_batch(slot, want, bytes_max);
            let (rows, exhausted) = match r {
                Ok(x) => x,
                Err(e) => {
                    let _ = out.send(Err(crate::status_from_engine(e)), ack_wait).await;
                    return;
                }
            };
            sent[i] += rows.len() as u64;
            let mut last = exhausted || sent[i] >= slot.limit;
            // Read one row ahead: its key tells the merge where this slot
            // continues, and an exhausted cursor makes this batch the last.
            let mut next = None;
            let count_only = slot.filter.as_ref().is_some_and(|f| f.count_only);
            if !last && !count_only {
                match read_batch(slot, 1, usize::MAX) {
                    Ok((mut one, ex)) => match one.pop() {
                        Some(row) => {
                            next = Some(tablinum_proto::v1::Row {
                                key: row.key.clone(),
                                value: Vec::new(),
                                term: row.term.clone(),
                            });
                            slot.lookahead = Some(row);
                        }
                        None => last = ex,
                    },
                    Err(e) => {
                        let _ = out.send(Err(crate::status_from_engine(e)), ack_wait).await;
                        return;
                    }
                }
            }
            if last {
                slot.cursor = None;
                slot.lookahead = None;
                done[i] = true;
                open.retain(|&j| j != i);
            }
            metrics.batch_sent(rows.len());
            slot.rows_read
                .fetch_add(rows.len() as u64, std::sync::atomic::Ordering::Relaxed);
            let batch_bytes: usize = rows.iter().map(row_bytes).sum();
            credits.sent(i, batch_bytes);
            if !msg.is_empty() && msg_bytes + batch_bytes > MESSAGE_BYTES_BUDGET {
                if out
                    .send(Ok(std::mem::take(&mut msg)), ack_wait)
                    .await
                    .is_err()
                {
                    return;
                }
                msg_bytes = 0;
            }
            msg_bytes += batch_bytes;
            let seen = std::mem::take(&mut slot.seen);
            msg.push(tablinum_proto::v1::SlotBatch {
                slot: u32::try_from(i).unwrap_or(u32::MAX),
                rows,
                last,
                next,
                examined: seen.rows,
                matched: seen.matched,
            });
            if msg_bytes >= bytes_max {
                if out
                    .send(Ok(std::mem::take(&mut msg)), ack_wait)
                    .await
                    .is_err()
                {
                    return;
                }
                msg_bytes = 0;
            }
        }
        if !msg.is_empty() && out.send(Ok(msg), ack_wait).await.is_err() {
            return;
        }
        if credits.abandoned(&open) {
            abandon(&credits, &open, out, ack_wait).await;
            return;
        }
        open.retain(|&j| !credits.cancelled(j));
    }
}

/// The status of a batch that did not get a scan thread: RESOURCE_EXHAUSTED,
/// "scan server busy" for the busy rule (clients pick another server at
/// once), the limit's name for a full queue.
pub fn busy_status(r: &crate::scan_queue::Refused) -> tonic::Status {
    use crate::scan_queue::Refused;
    match r {
        Refused::Busy {
            busy_timeout_ms,
            queued,
        } => tablinum_proto::error::status(
            tonic::Code::ResourceExhausted,
            tablinum_proto::error::ErrorReason::ScanServerBusy,
            format!(
                "{}: a batch waited {busy_timeout_ms} ms (busy_timeout_ms) with {queued} queued",
                crate::SCAN_SERVER_BUSY_PREFIX
            ),
        ),
        Refused::QueueFull { max } => tablinum_proto::error::Detail::limit("scan_queue_max")
            .status(
                tonic::Code::ResourceExhausted,
                format!("scan_queue_max = {max} batches are waiting for a scan thread"),
            ),
    }
}

/// Ends a stream whose caller ended its side with slots still wanted:
/// CANCELLED, lest the end look like exhausted tablets.
async fn abandon(credits: &Credits, open: &[usize], out: &Outbox, ack_wait: Duration) {
    if credits.abandoned(open) {
        let _ = out
            .send(
                Err(tonic::Status::cancelled(
                    "the request stream ended before the scan finished",
                )),
                ack_wait,
            )
            .await;
    }
}

/// The answer to a Head of `h`.
pub fn head_response(h: Option<tablinum_engine::Head>) -> tablinum_proto::v1::HeadResponse {
    use tablinum_proto::v1;
    match h {
        Some(h) => v1::HeadResponse {
            found: true,
            seq: h.seq,
            value_len: h.value_len,
            value_hash: h.value_hash,
            metadata: h.metadata,
            index_terms: h
                .index_terms
                .into_iter()
                .map(|(index, term)| v1::IndexTerm { index, term })
                .collect(),
        },
        None => v1::HeadResponse::default(),
    }
}

/// Feeds a `Scan` stream's acks to `credits` until the client ends its
/// side (which ends the stream).
pub fn read_scan_acks(
    mut inbound: tonic::Streaming<tablinum_proto::v1::ScanClientMessage>,
    credits: Arc<Credits>,
) {
    use tablinum_proto::v1::{scan_client_message::Msg, ScanClientMessage};
    tokio::spawn(async move {
        loop {
            match inbound.message().await {
                Ok(Some(ScanClientMessage {
                    msg: Some(Msg::Ack(a)),
                })) => credits.ack(0, a.batches, a.window, false),
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    credits.end();
                    return;
                }
            }
        }
    });
}

/// Feeds a `ScanMany` stream's acks and keepalives to `credits` until the
/// client ends its side (which ends every slot).
pub fn read_scan_many_acks(
    mut inbound: tonic::Streaming<tablinum_proto::v1::ScanManyClientMessage>,
    credits: Arc<Credits>,
) {
    use tablinum_proto::v1::{scan_many_client_message::Msg, ScanManyClientMessage};
    tokio::spawn(async move {
        loop {
            match inbound.message().await {
                Ok(Some(ScanManyClientMessage {
                    msg: Some(Msg::Acks(a)),
                })) => {
                    if a.acks.is_empty() {
                        credits.keepalive(a.progress);
                    }
                    for a in a.acks {
                        credits.ack(a.slot as usize, a.batches, a.window, a.cancel);
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    credits.end();
                    return;
                }
            }
        }
    });
}

/// A one-slot producer's messages as `Scan` answers: one `ScanBatch` per
/// batch (a producer message may carry several), taken from the outbox
/// only as the transport asks (no buffer in between, so the outbox sees
/// whether the transport drains).
pub fn scan_batches(rx: OutboxRx) -> ScanBatches {
    ScanBatches {
        rx,
        pending: VecDeque::new(),
    }
}

/// The stream [`scan_batches`] returns.
pub struct ScanBatches {
    rx: OutboxRx,
    pending: VecDeque<tablinum_proto::v1::ScanBatch>,
}

impl tokio_stream::Stream for ScanBatches {
    type Item = Result<tablinum_proto::v1::ScanBatch, tonic::Status>;

    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        use std::task::Poll;
        loop {
            if let Some(b) = self.pending.pop_front() {
                return Poll::Ready(Some(Ok(b)));
            }
            match std::pin::Pin::new(&mut self.rx).poll_next(cx) {
                Poll::Ready(Some(Ok(batches))) => {
                    self.pending.extend(batches.into_iter().map(|b| {
                        tablinum_proto::v1::ScanBatch {
                            rows: b.rows,
                            last: b.last,
                            next: b.next,
                            examined: b.examined,
                            matched: b.matched,
                        }
                    }))
                }
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Some(Err(e))),
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Checks a scan's window, batch rows and range, and resolves its window
/// and rows per batch (0: the server's defaults). The error is
/// INVALID_ARGUMENT naming what was wrong.
pub fn scan_limits(
    start: &tablinum_proto::v1::ScanStart,
    default_window: u32,
    default_batch_rows: u32,
) -> Result<(u32, usize), tonic::Status> {
    if start.window > tablinum_proto::WINDOW_BATCHES_MAX {
        return Err(tonic::Status::invalid_argument(format!(
            "window {} is out of range 0..={}",
            start.window,
            tablinum_proto::WINDOW_BATCHES_MAX
        )));
    }
    if start.batch_rows > tablinum_proto::BATCH_ROWS_MAX {
        return Err(tonic::Status::invalid_argument(format!(
            "batch_rows {} is out of range 0..={}",
            start.batch_rows,
            tablinum_proto::BATCH_ROWS_MAX
        )));
    }
    if !start.end.is_empty() && start.end < start.start {
        return Err(tonic::Status::invalid_argument(format!(
            "inverted range: end {:?} is before start {:?}",
            String::from_utf8_lossy(&start.end),
            String::from_utf8_lossy(&start.start)
        )));
    }
    let window = if start.window == 0 {
        default_window
    } else {
        start.window
    };
    let rows = if start.batch_rows == 0 {
        default_batch_rows
    } else {
        start.batch_rows
    };
    Ok((window, rows as usize))
}
