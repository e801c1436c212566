//! Who may hold how much of a server's streaming capacity, and the
//! response side of every stream.
//!
//! [`Admission`] hands out a [`Ticket`] per scan stream or `Query`: a place
//! among the server's streams (`scan_streams_max`) and tablet scans
//! (`scan_slots_max`) or Queries (`queries_max`), and a place in its
//! caller's count (`scan_streams_per_caller_max`,
//! `queries_per_caller_max`; cluster members are not counted), and each
//! calling token's byte budget ([`Admission::caller_bytes`],
//! `scan_bytes_per_caller_max`), which its streams' unacknowledged batches
//! and its Queries' reservations draw from. When the
//! server's streams are all taken, a caller's new stream ends the stream
//! that has gone longest without progress the server saw itself (acks,
//! cancels, the transport taking a message; never a keepalive's claim),
//! taken from the caller holding the most, if it has been idle for the
//! ack-wait timeout: keepalives keep a waiting stream alive only while no
//! one else needs its place.
//!
//! [`outbox`] is the channel between a producer and the transport. It
//! counts the messages the transport has not taken yet (a keepalive counts
//! only when there are none), gives the producer a deadline for each send
//! (a transport that takes nothing for the ack-wait timeout ends the
//! stream, whatever its keepalives say), and on [`OutboxTx::kill`] drops
//! every queued message and the ticket's server places at once. The
//! caller's place is kept until the transport lets go of the stream, so a
//! caller that never reads cannot pile up ended streams: each still counts
//! against its share.
//!
//! Never blocks; never decides by a client's claim alone.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tablinum_auth::Principal;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

use crate::scan::{ByteBudget, Credits, Reserved};

/// The limits an [`Admission`] enforces.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Scan streams running at once.
    pub streams_max: usize,
    /// Scan streams of one caller (token) at once, ended ones the
    /// transport still holds included.
    pub streams_per_caller_max: usize,
    /// Tablet scans (slots of every stream) running at once.
    pub slots_max: usize,
    /// Tablet scans of one caller at once.
    pub slots_per_caller_max: usize,
    /// Queries (server-side merges) running at once.
    pub queries_max: usize,
    /// Queries of one caller at once.
    pub queries_per_caller_max: usize,
    /// Bytes one caller's streams and Queries may hold at once.
    pub bytes_per_caller_max: usize,
    /// A stream is idle, and may be ended for a newcomer, after this long
    /// without progress the server saw.
    pub idle_after: Duration,
}

/// RESOURCE_EXHAUSTED for `limit`, typed LIMIT_EXCEEDED naming it.
fn over(limit: &str, message: String) -> Status {
    tablinum_proto::error::Detail::limit(limit).status(tonic::Code::ResourceExhausted, message)
}

/// Budgets of callers with nothing running are swept from the map once it
/// holds this many.
const CALLER_BUDGETS_KEPT: usize = 64;

/// Waits at most this long for an ended idle stream to give its place to a
/// newcomer, ms.
const EVICTION_WAIT_MS: u64 = 2_000;

/// One server's streaming capacity and who holds it.
pub struct Admission {
    limits: Limits,
    /// What the refusals name.
    server: String,
    streams: Arc<Semaphore>,
    slots: Arc<Semaphore>,
    queries: Arc<Semaphore>,
    callers: Arc<Mutex<HashMap<String, usize>>>,
    caller_slots: Arc<Mutex<HashMap<String, usize>>>,
    caller_queries: Arc<Mutex<HashMap<String, usize>>>,
    /// Each calling token's byte budget, alive while a stream or Query of
    /// it holds it.
    caller_bytes: Mutex<HashMap<String, Weak<ByteBudget>>>,
    /// Running streams, for eviction: caller (None: a member), credits and
    /// what kills the stream.
    running: Mutex<HashMap<u64, Running>>,
    next: AtomicU64,
    /// Streams ended to make room for another caller.
    pub evictions: AtomicU64,
    /// The token-set version running streams were last checked against.
    tokens_checked: AtomicU64,
}

/// A running stream as eviction sees it.
struct Running {
    caller: Option<String>,
    /// A scan stream's credits (a Query has none).
    credits: Option<Weak<Credits>>,
    kill: Killer,
    /// The tables the stream reads.
    tables: Vec<u64>,
}

/// Ends one stream with a status (see [`OutboxTx::killer`]).
pub type Killer = Arc<dyn Fn(Status) + Send + Sync>;

/// What an admitted stream or Query holds: its server places (given back
/// when it ends or is killed) and its caller's place (given back when the
/// transport lets go of it).
pub struct Ticket {
    server: Mutex<Option<ServerPlaces>>,
    _caller: Option<CallerPlace>,
    /// A Query's bytes, set aside in its caller's budget.
    _bytes: Option<Reserved>,
}

struct ServerPlaces {
    _permit: OwnedSemaphorePermit,
    _slots: Option<OwnedSemaphorePermit>,
    /// The caller's share of `_slots`.
    _caller_slots: Option<CallerPlace>,
    running: (Arc<Admission>, u64),
}

impl Drop for ServerPlaces {
    fn drop(&mut self) {
        let (a, id) = &self.running;
        a.running.lock().remove(id);
    }
}

impl Ticket {
    /// Gives back the server's places now (the caller's stays).
    pub fn release_server(&self) {
        self.server.lock().take();
    }
}

/// Places in a caller's count; leaves it when dropped.
struct CallerPlace {
    map: Arc<Mutex<HashMap<String, usize>>>,
    id: String,
    n: usize,
}

impl Drop for CallerPlace {
    fn drop(&mut self) {
        let mut m = self.map.lock();
        if let Some(n) = m.get_mut(&self.id) {
            *n = n.saturating_sub(self.n);
            if *n == 0 {
                m.remove(&self.id);
            }
        }
    }
}

/// `want` places of caller `id`, if its count stays within `max`.
fn take_caller_places(
    map: &Arc<Mutex<HashMap<String, usize>>>,
    id: &str,
    max: usize,
    want: usize,
) -> Option<CallerPlace> {
    let mut m = map.lock();
    let n = m.entry(id.to_string()).or_default();
    if n.saturating_add(want) > max {
        if *n == 0 {
            m.remove(id);
        }
        return None;
    }
    *n += want;
    Some(CallerPlace {
        map: map.clone(),
        id: id.to_string(),
        n: want,
    })
}

impl Admission {
    /// The capacity of `server` (its address, for refusals) under `limits`.
    pub fn new(server: String, limits: Limits) -> Arc<Admission> {
        Arc::new(Admission {
            streams: Arc::new(Semaphore::new(limits.streams_max)),
            slots: Arc::new(Semaphore::new(limits.slots_max)),
            queries: Arc::new(Semaphore::new(limits.queries_max)),
            limits,
            server,
            callers: Arc::new(Mutex::new(HashMap::new())),
            caller_slots: Arc::new(Mutex::new(HashMap::new())),
            caller_queries: Arc::new(Mutex::new(HashMap::new())),
            caller_bytes: Mutex::new(HashMap::new()),
            running: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            tokens_checked: AtomicU64::new(0),
        })
    }

    /// The byte budget `caller` draws from on this server
    /// (`scan_bytes_per_caller_max`), shared by all its streams and
    /// Queries; none for cluster members.
    pub fn caller_bytes(&self, caller: &Principal) -> Option<Arc<ByteBudget>> {
        let Principal::Token { id, .. } = caller else {
            return None;
        };
        let mut m = self.caller_bytes.lock();
        if let Some(b) = m.get(id).and_then(Weak::upgrade) {
            return Some(b);
        }
        if m.len() >= CALLER_BUDGETS_KEPT {
            m.retain(|_, b| b.strong_count() > 0);
        }
        let b = ByteBudget::new(self.limits.bytes_per_caller_max);
        m.insert(id.clone(), Arc::downgrade(&b));
        Some(b)
    }

    /// Scan streams running now.
    pub fn streams_running(&self) -> usize {
        self.limits.streams_max - self.streams.available_permits()
    }

    /// Admits a scan stream of `slots` tablet scans for `caller`, or
    /// answers RESOURCE_EXHAUSTED naming the limit. Register the stream's
    /// credits with [`Admission::track`] so it can be ended for a newcomer
    /// once idle.
    pub async fn stream(
        self: &Arc<Self>,
        caller: &Principal,
        slots: usize,
    ) -> Result<(Ticket, u64), Status> {
        let caller_id = match caller {
            Principal::Token { id, .. } => Some(id.as_str()),
            Principal::Cluster => None,
        };
        let place = match caller_id {
            Some(id) => Some(
                take_caller_places(&self.callers, id, self.limits.streams_per_caller_max, 1)
                    .ok_or_else(|| {
                        over(
                            "scan_streams_per_caller_max",
                            format!(
                                "token {id} holds {n} scan streams on {}; the limit is \
                             scan_streams_per_caller_max = {n}",
                                self.server,
                                n = self.limits.streams_per_caller_max
                            ),
                        )
                    })?,
            ),
            None => None,
        };
        let permit = match self.streams.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                // Full: a token's stream may end the longest-idle stream
                // of the biggest holder, then wait for its place.
                let full = || {
                    over(
                        "scan_streams_max",
                        format!(
                        "{n} scan streams are running on {}; the limit is scan_streams_max = {n}",
                        self.server,
                        n = self.limits.streams_max
                    ),
                    )
                };
                if caller_id.is_none() || !self.evict_one(caller_id) {
                    return Err(full());
                }
                match tokio::time::timeout(
                    Duration::from_millis(EVICTION_WAIT_MS),
                    self.streams.clone().acquire_owned(),
                )
                .await
                {
                    Ok(Ok(p)) => p,
                    _ => return Err(full()),
                }
            }
        };
        let caller_slots = match caller_id {
            Some(id) => Some(
                take_caller_places(
                    &self.caller_slots,
                    id,
                    self.limits.slots_per_caller_max,
                    slots,
                )
                .ok_or_else(|| {
                    over(
                        "scan_slots_per_caller_max",
                        format!(
                            "{slots} more tablet scans of token {id} would pass \
                         scan_slots_per_caller_max = {} on {}",
                            self.limits.slots_per_caller_max, self.server,
                        ),
                    )
                })?,
            ),
            None => None,
        };
        let n = u32::try_from(slots).unwrap_or(u32::MAX);
        let slot_permits = self.slots.clone().try_acquire_many_owned(n).map_err(|_| {
            over(
                "scan_slots_max",
                format!(
                    "{} more tablet scans would pass scan_slots_max = {} on {} ({} running)",
                    n,
                    self.limits.slots_max,
                    self.server,
                    self.limits.slots_max - self.slots.available_permits()
                ),
            )
        })?;
        Ok(self.ticket(permit, Some((slot_permits, caller_slots)), place))
    }

    /// Registers stream `id`'s credits, killer and the table ids it reads
    /// (see [`Admission::stream`]).
    pub fn track(
        &self,
        id: u64,
        caller: &Principal,
        credits: Option<&Arc<Credits>>,
        kill: Killer,
        tables: Vec<u64>,
    ) {
        let who = match caller {
            Principal::Token { id, .. } => Some(id.clone()),
            Principal::Cluster => None,
        };
        self.running.lock().insert(
            id,
            Running {
                caller: who,
                credits: credits.map(Arc::downgrade),
                kill,
                tables,
            },
        );
    }

    /// Ends every running stream and Query of a token `verifier` no longer
    /// holds (revoked), once per new token-set version; how many.
    pub fn end_revoked(&self, verifier: &tablinum_auth::Verifier) -> usize {
        let v = verifier.tokens_version();
        if self.tokens_checked.swap(v, Ordering::AcqRel) == v {
            return 0;
        }
        let kills: Vec<(String, Killer)> = self
            .running
            .lock()
            .values()
            .filter_map(|r| {
                let id = r.caller.as_ref()?;
                (!verifier.knows(id)).then(|| (id.clone(), r.kill.clone()))
            })
            .collect();
        for (id, k) in &kills {
            k(Status::unauthenticated(format!(
                "token {id} was revoked while this stream ran"
            )));
        }
        kills.len()
    }

    /// Ends every running stream that reads one of `tables` with `status`;
    /// how many.
    pub fn end_reading(&self, tables: &std::collections::HashSet<u64>, status: &Status) -> usize {
        let kills: Vec<Killer> = self
            .running
            .lock()
            .values()
            .filter(|r| r.tables.iter().any(|t| tables.contains(t)))
            .map(|r| r.kill.clone())
            .collect();
        // Killing gives the places back, which takes the lock again.
        for k in &kills {
            k(status.clone());
        }
        kills.len()
    }

    /// Ends the longest-idle stream of the caller holding the most
    /// streams (not `newcomer`'s, never a member's) if it has been idle for
    /// `idle_after`; whether one was ended.
    fn evict_one(&self, newcomer: Option<&str>) -> bool {
        let now = tokio::time::Instant::now().into_std();
        let running = self.running.lock();
        let mut held: HashMap<&str, usize> = HashMap::new();
        for r in running.values() {
            if let Some(w) = &r.caller {
                *held.entry(w.as_str()).or_default() += 1;
            }
        }
        let victim = running
            .iter()
            .filter_map(|(&id, r)| {
                let who = r.caller.as_deref()?;
                if Some(who) == newcomer {
                    return None;
                }
                let c = r.credits.as_ref()?.upgrade()?;
                let idle = now.saturating_duration_since(c.seen());
                (idle >= self.limits.idle_after && c.bytes_in_flight() > 0)
                    .then(|| (held[who], idle, id))
            })
            .max_by_key(|(n, idle, _)| (*n, *idle));
        let Some((_, idle, id)) = victim else {
            return false;
        };
        let kill = running.get(&id).map(|r| r.kill.clone());
        // Killing gives the places back, which takes the lock again.
        drop(running);
        if let Some(kill) = kill {
            kill(Status::deadline_exceeded(format!(
                "ended to make room on {}: no batch acknowledged or taken for {} ms \
                 while its caller held the most streams",
                self.server,
                idle.as_millis()
            )));
        }
        self.evictions.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// A ticket holding these places, under a new running id.
    fn ticket(
        self: &Arc<Self>,
        permit: OwnedSemaphorePermit,
        slots: Option<(OwnedSemaphorePermit, Option<CallerPlace>)>,
        caller: Option<CallerPlace>,
    ) -> (Ticket, u64) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (slots, caller_slots) = slots.map_or((None, None), |(s, c)| (Some(s), c));
        let ticket = Ticket {
            server: Mutex::new(Some(ServerPlaces {
                _permit: permit,
                _slots: slots,
                _caller_slots: caller_slots,
                running: (self.clone(), id),
            })),
            _caller: caller,
            _bytes: None,
        };
        (ticket, id)
    }

    /// Admits a `Query` (a server-side merge) for `caller`, setting aside
    /// the `bytes` its streams may hold in the caller's budget, or answers
    /// RESOURCE_EXHAUSTED naming the limit. Register its killer with
    /// [`Admission::track`] (no credits) so a revocation ends it.
    pub fn query(
        self: &Arc<Self>,
        caller: &Principal,
        bytes: usize,
    ) -> Result<(Ticket, u64), Status> {
        let place = match caller {
            Principal::Token { id, .. } => Some(
                take_caller_places(
                    &self.caller_queries,
                    id,
                    self.limits.queries_per_caller_max,
                    1,
                )
                .ok_or_else(|| {
                    over(
                        "queries_per_caller_max",
                        format!(
                            "token {id} runs {n} queries on {}; the limit is \
                             queries_per_caller_max = {n}",
                            self.server,
                            n = self.limits.queries_per_caller_max
                        ),
                    )
                })?,
            ),
            Principal::Cluster => None,
        };
        let reserved = match (caller, self.caller_bytes(caller)) {
            (Principal::Token { id, .. }, Some(budget)) => {
                Some(budget.try_reserve(bytes).ok_or_else(|| {
                    over(
                        "scan_bytes_per_caller_max",
                        format!(
                            "token {id} holds {held} bytes of scans and queries on {}; a query \
                         sets aside {bytes} more; the limit is scan_bytes_per_caller_max = {}",
                            self.server,
                            self.limits.bytes_per_caller_max,
                            held = budget.used(),
                        ),
                    )
                })?)
            }
            _ => None,
        };
        let permit = self.queries.clone().try_acquire_owned().map_err(|_| {
            over(
                "queries_max",
                format!(
                    "{n} queries are running on {}; the limit is queries_max = {n}",
                    self.server,
                    n = self.limits.queries_max
                ),
            )
        })?;
        let (mut ticket, id) = self.ticket(permit, None, place);
        ticket._bytes = reserved;
        Ok((ticket, id))
    }
}

struct Shared<T> {
    rx: Mutex<Option<tokio::sync::mpsc::Receiver<Result<T, Status>>>>,
    /// The transport's waker, woken by a kill.
    waker: Mutex<Option<std::task::Waker>>,
    /// Set by a kill: the one status the transport gets next.
    killed: Mutex<Option<Status>>,
    ticket: Option<Ticket>,
    credits: Option<Arc<Credits>>,
}

/// The producer's end of an [`outbox`].
pub struct OutboxTx<T> {
    tx: tokio::sync::mpsc::Sender<Result<T, Status>>,
    shared: Arc<Shared<T>>,
}

/// The transport's end of an [`outbox`]: a stream of the producer's
/// messages that holds the ticket until the transport drops it.
pub struct OutboxRx<T> {
    shared: Arc<Shared<T>>,
    done: bool,
}

/// Why a send did not go out.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// The transport took nothing for the wait: the stream is killed.
    Stalled,
    /// The transport went away.
    Closed,
}

/// A channel of `depth` messages from a producer to the transport, holding
/// `ticket`; `credits` (a scan's) learn when the transport takes a message.
pub fn outbox<T>(
    depth: usize,
    ticket: Option<Ticket>,
    credits: Option<Arc<Credits>>,
) -> (OutboxTx<T>, OutboxRx<T>) {
    let (tx, rx) = tokio::sync::mpsc::channel(depth.max(1));
    let shared = Arc::new(Shared {
        rx: Mutex::new(Some(rx)),
        waker: Mutex::new(None),
        killed: Mutex::new(None),
        ticket,
        credits,
    });
    (
        OutboxTx {
            tx,
            shared: shared.clone(),
        },
        OutboxRx {
            shared,
            done: false,
        },
    )
}

impl<T> OutboxTx<T> {
    /// Sends `m`, waiting at most `wait` for the transport to make room; a
    /// transport that took nothing for that long kills the stream with
    /// DEADLINE_EXCEEDED naming the wait.
    pub async fn send(&self, m: Result<T, Status>, wait: Duration) -> Result<(), SendError> {
        if let Some(c) = &self.shared.credits {
            c.queued(1);
        }
        match self.tx.send_timeout(m, wait).await {
            Ok(()) => Ok(()),
            Err(e) => {
                if let Some(c) = &self.shared.credits {
                    c.queued(-1);
                }
                match e {
                    tokio::sync::mpsc::error::SendTimeoutError::Timeout(_) => {
                        self.kill(Status::deadline_exceeded(format!(
                            "the caller read nothing for the ack-wait timeout of {} ms",
                            wait.as_millis()
                        )));
                        Err(SendError::Stalled)
                    }
                    tokio::sync::mpsc::error::SendTimeoutError::Closed(_) => Err(SendError::Closed),
                }
            }
        }
    }

    /// The producer is done: waits at most `wait` for the transport to
    /// take what is queued, then gives back the server's places (the
    /// caller's stay until the transport lets go); a transport that takes
    /// nothing for that long gets the stream killed instead.
    pub async fn finish(self, wait: Duration) {
        let depth = self.tx.max_capacity();
        match tokio::time::timeout(wait, self.tx.reserve_many(depth)).await {
            Ok(Ok(_)) | Ok(Err(_)) => {
                if let Some(t) = &self.shared.ticket {
                    t.release_server();
                }
            }
            Err(_) => self.kill(Status::deadline_exceeded(format!(
                "the caller read nothing for the ack-wait timeout of {} ms",
                wait.as_millis()
            ))),
        }
    }

    /// Ends the stream at once (see [`kill`]).
    pub fn kill(&self, s: Status) {
        kill(&self.shared, s);
    }

    /// What ends this stream from elsewhere (eviction) without keeping it.
    pub fn killer(&self) -> Killer
    where
        T: Send + 'static,
    {
        let w = Arc::downgrade(&self.shared);
        Arc::new(move |s| {
            if let Some(shared) = w.upgrade() {
                kill(&shared, s);
            }
        })
    }
}

/// Ends a stream at once: queued messages are dropped, the server's places
/// given back, the producer stopped, and `s` is what the transport reads
/// next.
fn kill<T>(shared: &Shared<T>, s: Status) {
    *shared.killed.lock() = Some(s);
    let rx = shared.rx.lock().take();
    drop(rx);
    if let Some(t) = &shared.ticket {
        t.release_server();
    }
    if let Some(c) = &shared.credits {
        c.drain_reset();
        c.end();
    }
    if let Some(w) = shared.waker.lock().take() {
        w.wake();
    }
}

impl<T> Drop for OutboxRx<T> {
    fn drop(&mut self) {
        // The transport let go: the producer's sends fail from now on, and
        // the server's places go back at once (the caller's with the last
        // reference).
        let rx = self.shared.rx.lock().take();
        drop(rx);
        if let Some(t) = &self.shared.ticket {
            t.release_server();
        }
    }
}

impl<T> tokio_stream::Stream for OutboxRx<T> {
    type Item = Result<T, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if self.done {
            return Poll::Ready(None);
        }
        *self.shared.waker.lock() = Some(cx.waker().clone());
        let polled = {
            let mut rx = self.shared.rx.lock();
            rx.as_mut().map(|rx| rx.poll_recv(cx))
        };
        match polled {
            Some(Poll::Ready(Some(m))) => {
                if let Some(c) = &self.shared.credits {
                    c.taken();
                }
                Poll::Ready(Some(m))
            }
            Some(Poll::Pending) => Poll::Pending,
            Some(Poll::Ready(None)) | None => {
                self.done = true;
                if let Some(t) = &self.shared.ticket {
                    t.release_server();
                }
                Poll::Ready(self.shared.killed.lock().take().map(Err))
            }
        }
    }
}
