//! The scan-server role: stateless servers of *eventual* reads. A scan
//! server owns no tablet; it registers with the manager (with its group)
//! and heartbeats, and serves Get, Head, Scan and ScanMany of any tablet
//! from the file set the tablet's server last published, opened read-only
//! from shared storage (`tablinum_engine::ReadOnlyStore`): no memtable, so
//! unflushed writes are invisible, by design.
//!
//! Owns the cache of tablet views (one per tablet, re-opened once older
//! than `metadata_ttl_ms`, in the background from 75 % of it; their file
//! reservations renewed while in use and released when idle), the scan
//! threads with the busy rule (`scan_queue`), and its counters. Never
//! writes, flushes or deletes a tablet's files; every call but the four
//! reads answers UNIMPLEMENTED.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tablinum_auth::{ClusterSecret, Need, Verifier};
use tablinum_dispatch::busy::BusyTimeout;
use tablinum_engine::{ReadOnlyStore, Shared};
use tablinum_proto::v1::{self, tablet_server_server::TabletServer};
use tonic::{Request, Response, Status, Streaming};

use crate::config::SserverConfig;
use crate::scan::{Credits, Cursor, Gate, ProducerMetrics, Slot};
use crate::scan_queue::ScanQueue;
use crate::{status_from_engine, Error};

/// A stream of gRPC messages.
type BoxStream<T> = std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<T, Status>> + Send>>;

/// Counters of a scan server.
#[derive(Debug, Default)]
pub struct SserverMetrics {
    /// Get and Head requests.
    pub reads: AtomicU64,
    /// Scan streams started.
    pub scans: AtomicU64,
    /// Scan streams running now.
    pub scans_active: AtomicU64,
    /// Rows sent by scans and gets.
    pub rows_read: AtomicU64,
    /// Scan batches sent.
    pub batches_sent: AtomicU64,
    /// Streams ended by the ack-wait timeout.
    pub ack_timeouts: AtomicU64,
    /// Tablet views opened (a file set read and reserved).
    pub views_opened: AtomicU64,
    /// Views held past a lease by a running scan: files pinned, reservation
    /// released.
    pub views_pinned: AtomicU64,
    /// Microseconds spent opening views (reading the manifest, reserving,
    /// re-validating, opening tables), summed.
    pub view_open_us: AtomicU64,
    /// View lookups served from the cache.
    pub view_hits: AtomicU64,
    /// Requests refused (bad input, unknown tablet).
    pub refused: AtomicU64,
    /// Reads and scans served, by the client's attempt number (buckets of
    /// `tablinum_proto::served_buckets`).
    pub served_by_attempt: [AtomicU64; tablinum_proto::SERVED_BUCKETS],
    /// Reads and scans served, by the attempt plan that chose this server.
    pub served_by_plan: [AtomicU64; tablinum_proto::SERVED_BUCKETS],
}

impl SserverMetrics {
    /// Counts one read or scan served that said `attempt` and `plan`.
    pub fn served(&self, attempt: u32, plan: u32) {
        if let Some((a, p)) = tablinum_proto::served_buckets(attempt, plan) {
            self.served_by_attempt[a].fetch_add(1, Ordering::Relaxed);
            self.served_by_plan[p].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The served-by-attempt and served-by-plan counts, as reported.
    pub fn served_counts(&self) -> (Vec<u64>, Vec<u64>) {
        let load = |v: &[AtomicU64]| v.iter().map(|a| a.load(Ordering::Relaxed)).collect();
        (load(&self.served_by_attempt), load(&self.served_by_plan))
    }
}

/// One tablet's view and when it was opened.
struct CachedView {
    view: Arc<ReadOnlyStore>,
    opened: Instant,
    last_used: Mutex<Instant>,
    refreshing: AtomicBool,
}

/// The scan-server role.
pub struct Sserver {
    cfg: SserverConfig,
    id: String,
    address: String,
    http: String,
    engine: Arc<Shared>,
    views: Mutex<HashMap<(u64, u64), Arc<CachedView>>>,
    /// Every view handed out that may still be in use, with when it was
    /// opened: a scan keeps its view after the cache replaced or evicted
    /// it, and its reservation is renewed while the scan runs, for at most
    /// one lease after the view opened (then its files are pinned and the
    /// reservation released: see [`Sserver::maintain`]).
    live_views: Mutex<Vec<(std::sync::Weak<ReadOnlyStore>, Instant)>>,
    /// The scan threads and their queue.
    pub queue: Arc<ScanQueue>,
    scan_bytes: Arc<crate::scan::ByteBudget>,
    /// Scan streams and tablet scans: the server's and each caller's share.
    pub admission: Arc<crate::admit::Admission>,
    /// Tables the manager said were dropped (ids are never reused): no
    /// view of them is opened or served.
    dropped: Mutex<std::collections::HashSet<u64>>,
    /// Counters.
    pub metrics: SserverMetrics,
    verifier: Arc<Verifier>,
    client_tls: Option<tablinum_client::ClientTls>,
    secret: ClusterSecret,
}

impl Sserver {
    /// A scan server reporting `address` and `http` to its manager.
    pub fn new(
        cfg: SserverConfig,
        address: String,
        http: String,
        secret: ClusterSecret,
        verifier: Arc<Verifier>,
    ) -> Result<Arc<Sserver>, Error> {
        cfg.validate()?;
        let engine = Shared::new(cfg.engine_shared())
            .map_err(|e| Error::Config(format!("[sserver] {e}")))?;
        let id = format!(
            "ss-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let client_tls = cfg.client_tls()?;
        Ok(Arc::new(Sserver {
            queue: ScanQueue::new(cfg.scan_threads, cfg.scan_queue_max),
            scan_bytes: crate::scan::ByteBudget::new(
                usize::try_from(cfg.scan_bytes_in_flight_max).unwrap_or(usize::MAX),
            ),
            admission: crate::admit::Admission::new(address.clone(), cfg.admission_limits()),
            dropped: Mutex::new(std::collections::HashSet::new()),
            cfg,
            id,
            address,
            http,
            engine,
            views: Mutex::new(HashMap::new()),
            live_views: Mutex::new(Vec::new()),
            metrics: SserverMetrics::default(),
            verifier,
            client_tls,
            secret,
        }))
    }

    /// Its id (unique per process).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its group.
    pub fn group(&self) -> &str {
        &self.cfg.group
    }

    /// Tablets with a cached view.
    pub fn views_cached(&self) -> usize {
        self.views.lock().len()
    }

    fn tablet_dir(&self, table_id: u64, tablet_id: u64) -> PathBuf {
        self.cfg
            .storage
            .join("tables")
            .join(table_id.to_string())
            .join(tablet_id.to_string())
    }

    fn ttl(&self) -> Duration {
        Duration::from_millis(self.cfg.metadata_ttl_ms)
    }

    fn lease(&self) -> Duration {
        Duration::from_millis(self.cfg.reservation_lease_ms)
    }

    fn refuse(&self, s: Status) -> Status {
        self.metrics.refused.fetch_add(1, Ordering::Relaxed);
        s
    }

    /// Opens a fresh view of a tablet (blocking: reads the manifest and
    /// opens its tables).
    fn open_view(&self, table_id: u64, tablet_id: u64) -> Result<Arc<CachedView>, Status> {
        self.refuse_dropped(table_id)?;
        let dir = self.tablet_dir(table_id, tablet_id);
        if !dir.is_dir() {
            return Err(Status::failed_precondition(format!(
                "not serving tablet {tablet_id} of table {table_id}: no such tablet in storage"
            )));
        }
        let t = Instant::now();
        let view = ReadOnlyStore::open(&dir, &self.engine, &self.id, self.lease()).map_err(
            |e| match e {
                tablinum_engine::Error::InvalidArgument { .. } => Status::failed_precondition(
                    format!("not serving tablet {tablet_id} of table {table_id}: {e}"),
                ),
                e => status_from_engine(e),
            },
        )?;
        self.metrics.views_opened.fetch_add(1, Ordering::Relaxed);
        self.metrics
            .view_open_us
            .fetch_add(t.elapsed().as_micros() as u64, Ordering::Relaxed);
        let now = Instant::now();
        let v = Arc::new(CachedView {
            view: Arc::new(view),
            opened: now,
            last_used: Mutex::new(now),
            refreshing: AtomicBool::new(false),
        });
        self.live_views.lock().push((Arc::downgrade(&v.view), now));
        {
            // A drop that arrived while the view opened wins.
            let mut views = self.views.lock();
            self.refuse_dropped(table_id)?;
            views.insert((table_id, tablet_id), v.clone());
        }
        Ok(v)
    }

    /// The view a read of `(table_id, tablet_id)` uses: the cached one while
    /// younger than the TTL (refreshed in the background once past 75 % of
    /// it), else a fresh one.
    async fn view(
        self: &Arc<Self>,
        table_id: u64,
        tablet_id: u64,
    ) -> Result<Arc<ReadOnlyStore>, Status> {
        if table_id == 0 {
            return Err(self.refuse(Status::invalid_argument(
                "a scan server needs table_id (from TabletMap) in every request",
            )));
        }
        self.refuse_dropped(table_id)?;
        let cached = self.views.lock().get(&(table_id, tablet_id)).cloned();
        if let Some(c) = cached {
            let age = c.opened.elapsed();
            if age < self.ttl() {
                *c.last_used.lock() = Instant::now();
                self.metrics.view_hits.fetch_add(1, Ordering::Relaxed);
                if age >= self.ttl() * 3 / 4 && !c.refreshing.swap(true, Ordering::AcqRel) {
                    let me = self.clone();
                    tokio::task::spawn_blocking(move || {
                        let _ = me.open_view(table_id, tablet_id);
                    });
                }
                return Ok(c.view.clone());
            }
        }
        let me = self.clone();
        let v = tokio::task::spawn_blocking(move || me.open_view(table_id, tablet_id))
            .await
            .map_err(|e| Status::internal(format!("opening a tablet view failed: {e}")))??;
        Ok(v.view.clone())
    }

    /// Renews the reservations of views in use and drops views idle for
    /// longer than the TTL (their reservations go with them), every third
    /// of the lease, until `stop`.
    pub async fn maintain_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        let period = self.lease() / 3;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                _ = stop.changed() => return,
            }
            let me = self.clone();
            let _ = tokio::task::spawn_blocking(move || me.maintain()).await;
        }
    }

    /// One round of [`Sserver::maintain_loop`]: evicts cached views idle
    /// for longer than the TTL, then renews the reservation of every view
    /// still held by the cache or by a running read (a long scan keeps
    /// its view after the cache moved on). A view opened a lease ago or
    /// more is renewed no longer: its files are pinned (open handles, so
    /// the scans reading it go on) and its reservation released, so the
    /// tablet's obsolete files leave its directory however long a scan
    /// runs; their space comes back when the last such scan ends.
    fn maintain(&self) {
        let ttl = self.ttl();
        self.views
            .lock()
            .retain(|_, v| v.last_used.lock().elapsed() <= ttl);
        let live: Vec<(Arc<ReadOnlyStore>, Instant)> = {
            let mut l = self.live_views.lock();
            l.retain(|(w, _)| w.strong_count() > 0);
            l.iter()
                .filter_map(|(w, at)| Some((w.upgrade()?, *at)))
                .collect()
        };
        let mut pinned = Vec::new();
        for (v, opened) in live {
            // Only this loop's reference left: it is being dropped, and
            // dropping it releases its reservation.
            if Arc::strong_count(&v) == 1 {
                continue;
            }
            if opened.elapsed() >= self.lease() {
                match v.pin_files() {
                    Ok(()) => {
                        self.views.lock().retain(|_, c| !Arc::ptr_eq(&c.view, &v));
                        if let Err(e) = v.release() {
                            tracing::warn!(error = %e, "releasing a pinned view's reservation failed");
                        }
                        self.metrics.views_pinned.fetch_add(1, Ordering::Relaxed);
                        pinned.push(Arc::downgrade(&v));
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "pinning a long-held view's files failed; renewing its reservation");
                    }
                }
            }
            if let Err(e) = v.renew(self.lease()) {
                tracing::warn!(error = %e, "renewing a reservation failed; dropping the view from the cache");
                self.views.lock().retain(|_, c| !Arc::ptr_eq(&c.view, &v));
            }
        }
        if !pinned.is_empty() {
            self.live_views
                .lock()
                .retain(|(w, _)| !pinned.iter().any(|p| p.ptr_eq(w)));
        }
    }

    /// Heartbeats to the manager every `heartbeat_interval_ms` until `stop`.
    pub async fn heartbeat_loop(self: Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        let period = Duration::from_millis(self.cfg.heartbeat_interval_ms);
        let me = self.clone();
        crate::heartbeat::run(
            "sserver",
            &self.cfg.manager,
            self.client_tls.as_ref(),
            &self.secret,
            period,
            stop,
            move |mgr| me.clone().heartbeat(mgr),
        )
        .await;
    }

    /// One heartbeat: report this server, take the token set if it changed.
    async fn heartbeat(self: Arc<Self>, mut mgr: crate::heartbeat::Manager) -> Result<(), Status> {
        let (running, queued) = self.queue.depth();
        let (served_by_attempt, served_by_plan) = self.metrics.served_counts();
        let req = v1::ScanServerHeartbeatRequest {
            server_id: self.id.clone(),
            address: self.address.clone(),
            http: self.http.clone(),
            group: self.cfg.group.clone(),
            scans_running: u32::try_from(running).unwrap_or(u32::MAX),
            queue_depth: u32::try_from(queued).unwrap_or(u32::MAX),
            batches_total: self.queue.batches_total.load(Ordering::Relaxed),
            busy_total: self.queue.busy_total.load(Ordering::Relaxed),
            tokens_version: self.verifier.tokens_version(),
            served_by_attempt,
            served_by_plan,
        };
        // The lease counts from before the request: the manager heard from
        // this server no earlier than that.
        let sent = std::time::Instant::now();
        let r = mgr.scan_server_heartbeat(req).await?.into_inner();
        if r.tokens_changed {
            self.verifier.set_tokens(
                r.tokens_version,
                crate::tserver::grants(&r.tokens, &self.verifier),
            );
        }
        if r.token_lease_ms > 0 {
            self.verifier
                .renew_tokens_until(sent + Duration::from_millis(r.token_lease_ms));
        }
        self.forget_dropped(&r.dropped_table_ids);
        self.admission.end_revoked(&self.verifier);
        Ok(())
    }

    /// Tables the manager says were dropped: their cached views go, every
    /// read of them ends, and none is served again. Nothing of them is
    /// renewed from now on, so their reservations lapse and the manager
    /// removes their files.
    fn forget_dropped(&self, ids: &[u64]) {
        let new: std::collections::HashSet<u64> = {
            let mut d = self.dropped.lock();
            ids.iter().copied().filter(|id| d.insert(*id)).collect()
        };
        if new.is_empty() {
            return;
        }
        self.views.lock().retain(|(t, _), _| !new.contains(t));
        let ended = self
            .admission
            .end_reading(&new, &Status::not_found(dropped_message(&new)));
        tracing::info!(tables = ?new, streams_ended = ended, "tables dropped: views and reads ended");
    }

    fn refuse_dropped(&self, table_id: u64) -> Result<(), Status> {
        if self.dropped.lock().contains(&table_id) {
            return Err(self.refuse(Status::not_found(format!("table {table_id} was dropped"))));
        }
        Ok(())
    }

    /// The slot of one scan of `view`.
    fn open_slot(
        &self,
        start: &v1::ScanStart,
        view: Arc<ReadOnlyStore>,
    ) -> Result<(Slot, u32), Status> {
        let (window, rows_max) =
            crate::scan::scan_limits(start, self.cfg.stream_limit, self.cfg.batch_rows)
                .map_err(|s| self.refuse(s))?;
        // A tablet's store holds only its own keys: no clipping needed.
        let hi = if start.end.is_empty() {
            std::ops::Bound::Unbounded
        } else {
            std::ops::Bound::Excluded(start.end.as_slice())
        };
        let range = (std::ops::Bound::Included(start.start.as_slice()), hi);
        let keep: Arc<dyn std::any::Any + Send + Sync> = view.clone();
        let cursor = if !start.index.is_empty() {
            Cursor::Index {
                store: view,
                name: start.index.clone(),
                lo: std::ops::Bound::Included(start.start.clone()),
                end: start.end.clone(),
                last: None,
                buf: Default::default(),
                done: false,
            }
        } else if start.keys_only {
            Cursor::Keys(view.scan_heads(range).map_err(status_from_engine)?)
        } else {
            Cursor::Objects(view.scan_objects(range).map_err(status_from_engine)?)
        };
        Ok((
            Slot {
                cursor: Some(cursor),
                lookahead: None,
                rows_max: rows_max.max(1),
                limit: if start.limit == 0 {
                    u64::MAX
                } else {
                    start.limit
                },
                rows_read: Arc::new(AtomicU64::new(0)),
                filter: crate::scan::RowFilter::from_wire(start.filter.as_ref())
                    .map_err(|s| self.refuse(s))?,
                seen: Default::default(),
                keep: Some(keep),
            },
            window,
        ))
    }

    fn busy_timeout(&self, ms: u32) -> Result<Option<BusyTimeout>, Status> {
        if ms == 0 {
            return Ok(None);
        }
        BusyTimeout::from_ms(u64::from(ms))
            .map(Some)
            .map_err(|e| self.refuse(Status::invalid_argument(format!("busy_timeout_ms: {e}"))))
    }

    /// Runs the slots of one stream on the scan threads; the stream counts
    /// as served on the client's `attempt` (and `plan`) once a batch of it
    /// goes out. `starts` say how many bytes the stream may hold.
    fn spawn_producer(
        self: &Arc<Self>,
        starts: &[v1::ScanStart],
        slots: Vec<Slot>,
        windows: &[u32],
        busy: Option<BusyTimeout>,
        (attempt, plan): (u32, u32),
        who: Admitted<'_>,
    ) -> (Arc<Credits>, crate::scan::OutboxRx) {
        let Admitted {
            ticket: (ticket, id),
            caller,
            tables,
        } = who;
        let credits = Credits::new(
            windows,
            crate::scan::stream_bytes_max(self.cfg.stream_bytes_in_flight_max, starts),
            self.scan_bytes.clone(),
            self.admission.caller_bytes(caller),
        );
        let (tx, rx) = crate::admit::outbox(
            crate::scan::PRODUCER_QUEUE_MESSAGES,
            Some(ticket),
            Some(credits.clone()),
        );
        self.admission
            .track(id, caller, Some(&credits), tx.killer(), tables.to_vec());
        let bytes_max = usize::try_from(self.cfg.batch_bytes).unwrap_or(usize::MAX);
        let ack_wait = Duration::from_millis(self.cfg.ack_wait_timeout_ms);
        let me = self.clone();
        let c = credits.clone();
        let gate = Gate {
            queue: self.queue.clone(),
            busy,
        };
        tokio::spawn(async move {
            me.metrics.scans.fetch_add(1, Ordering::Relaxed);
            me.metrics.scans_active.fetch_add(1, Ordering::Relaxed);
            let m: Arc<dyn ProducerMetrics> = Arc::new(StreamMetrics {
                ss: me.clone(),
                attempt,
                plan,
                counted: AtomicBool::new(false),
            });
            crate::scan::produce(slots, c, &tx, bytes_max, ack_wait, m, Some(gate)).await;
            me.metrics.scans_active.fetch_sub(1, Ordering::Relaxed);
            tx.finish(ack_wait).await;
        });
        (credits, rx)
    }

    /// An eventual point read: `read` of the key's tablet view, run on a
    /// scan thread (or answered busy, unread, when it waited for one
    /// longer than its busy timeout).
    async fn read_one<T>(
        self: &Arc<Self>,
        r: &v1::GetRequest,
        read: impl FnOnce(&ReadOnlyStore, &[u8]) -> tablinum_engine::Result<T>,
    ) -> Result<T, Status> {
        let busy = self.busy_timeout(r.busy_timeout_ms)?;
        let view = self.view(r.table_id, r.tablet_id).await?;
        let _running = self
            .queue
            .enter(busy)
            .await
            .map_err(|e| crate::scan::busy_status(&e))?;
        self.metrics.reads.fetch_add(1, Ordering::Relaxed);
        self.metrics.served(r.attempt, r.plan);
        tokio::task::block_in_place(|| read(&view, &r.key)).map_err(status_from_engine)
    }
}

/// An admitted stream: its ticket and id, its caller and the tables it
/// reads (a drop of one ends it).
struct Admitted<'a> {
    ticket: (crate::admit::Ticket, u64),
    caller: &'a tablinum_auth::Principal,
    tables: &'a [u64],
}

impl ProducerMetrics for Sserver {
    fn batch_sent(&self, rows: usize) {
        self.metrics
            .rows_read
            .fetch_add(rows as u64, Ordering::Relaxed);
        self.metrics.batches_sent.fetch_add(1, Ordering::Relaxed);
    }

    fn ack_timeout(&self) {
        self.metrics.ack_timeouts.fetch_add(1, Ordering::Relaxed);
    }
}

/// The status of reads of dropped `tables`.
fn dropped_message(tables: &std::collections::HashSet<u64>) -> String {
    let mut ids: Vec<u64> = tables.iter().copied().collect();
    ids.sort_unstable();
    let ids: Vec<String> = ids.iter().map(u64::to_string).collect();
    format!("table {} was dropped", ids.join(", "))
}

/// The producer metrics of one stream: the server's, and the stream
/// counted as served by its attempt and plan when its first batch goes out.
struct StreamMetrics {
    ss: Arc<Sserver>,
    attempt: u32,
    plan: u32,
    counted: AtomicBool,
}

impl ProducerMetrics for StreamMetrics {
    fn batch_sent(&self, rows: usize) {
        if !self.counted.swap(true, Ordering::Relaxed) {
            self.ss.metrics.served(self.attempt, self.plan);
        }
        self.ss.batch_sent(rows);
    }

    fn ack_timeout(&self) {
        self.ss.ack_timeout();
    }
}

/// The gRPC face of a scan server (the TabletServer service, reads only).
pub struct SserverService(pub Arc<Sserver>);

fn read_only(call: &str) -> Status {
    Status::unimplemented(format!(
        "{call}: a scan server serves eventual reads only (Get, Head, Scan, ScanMany)"
    ))
}

fn authorize<T>(req: &Request<T>, call: &str) -> Result<tablinum_auth::Principal, Status> {
    tablinum_auth::authorize(req, Need::Read, call)
}

#[tonic::async_trait]
impl TabletServer for SserverService {
    async fn write(
        &self,
        _req: Request<v1::WriteRequest>,
    ) -> Result<Response<v1::WriteResponse>, Status> {
        Err(read_only("Write"))
    }

    async fn get(&self, req: Request<v1::GetRequest>) -> Result<Response<v1::GetResponse>, Status> {
        authorize(&req, "Get")?;
        let r = req.into_inner();
        let v = self.0.read_one(&r, |v, k| v.get(k)).await?;
        Ok(Response::new(v1::GetResponse {
            found: v.is_some(),
            value: v.unwrap_or_default(),
        }))
    }

    async fn get_many(
        &self,
        req: Request<v1::GetManyRequest>,
    ) -> Result<Response<v1::GetManyResponse>, Status> {
        authorize(&req, "GetMany")?;
        Err(self.0.refuse(Status::unimplemented(
            "GetMany is answered by tablet servers; scan servers answer Get per key",
        )))
    }

    async fn head(
        &self,
        req: Request<v1::GetRequest>,
    ) -> Result<Response<v1::HeadResponse>, Status> {
        authorize(&req, "Head")?;
        let r = req.into_inner();
        let h = self.0.read_one(&r, |v, k| v.head(k)).await?;
        Ok(Response::new(crate::scan::head_response(h)))
    }

    type ScanStream = BoxStream<v1::ScanBatch>;

    async fn scan(
        &self,
        req: Request<Streaming<v1::ScanClientMessage>>,
    ) -> Result<Response<Self::ScanStream>, Status> {
        use v1::scan_client_message::Msg;
        let caller = authorize(&req, "Scan")?;
        let ss = self.0.clone();
        let mut inbound = req.into_inner();
        let start = match inbound.message().await? {
            Some(v1::ScanClientMessage {
                msg: Some(Msg::Start(s)),
            }) => s,
            _ => {
                return Err(ss.refuse(Status::invalid_argument(
                    "a scan stream must begin with a start message",
                )))
            }
        };
        let busy = ss.busy_timeout(start.busy_timeout_ms)?;
        let ticket = ss
            .admission
            .stream(&caller, 1)
            .await
            .map_err(|s| ss.refuse(s))?;
        let view = ss.view(start.table_id, start.tablet_id).await?;
        let (slot, window) = ss.open_slot(&start, view)?;
        let said = (start.attempt, start.plan);
        let who = Admitted {
            ticket,
            caller: &caller,
            tables: &[start.table_id],
        };
        let (credits, rx) = ss.spawn_producer(
            std::slice::from_ref(&start),
            vec![slot],
            &[window],
            busy,
            said,
            who,
        );
        crate::scan::read_scan_acks(inbound, credits);
        let out = crate::scan::scan_batches(rx);
        Ok(Response::new(Box::pin(out)))
    }

    type ScanManyStream = BoxStream<v1::ScanManyBatch>;

    async fn scan_many(
        &self,
        req: Request<Streaming<v1::ScanManyClientMessage>>,
    ) -> Result<Response<Self::ScanManyStream>, Status> {
        use v1::scan_many_client_message::Msg;
        let caller = authorize(&req, "ScanMany")?;
        let ss = self.0.clone();
        let mut inbound = req.into_inner();
        let starts = match inbound.message().await? {
            Some(v1::ScanManyClientMessage {
                msg: Some(Msg::Start(s)),
            }) => s.scans,
            _ => {
                return Err(ss.refuse(Status::invalid_argument(
                    "a scan-many stream must begin with a start message",
                )))
            }
        };
        let max = tablinum_proto::TABLETS_PER_TABLE_MAX as usize;
        if starts.is_empty() || starts.len() > max {
            return Err(ss.refuse(Status::invalid_argument(format!(
                "a scan-many stream has {} scans; 1..={max} are allowed",
                starts.len()
            ))));
        }
        let busy = ss.busy_timeout(starts[0].busy_timeout_ms)?;
        let ticket = ss
            .admission
            .stream(&caller, starts.len())
            .await
            .map_err(|s| ss.refuse(s))?;
        let mut slots = Vec::with_capacity(starts.len());
        let mut windows = Vec::with_capacity(starts.len());
        for (i, st) in starts.iter().enumerate() {
            let r = async {
                let view = ss.view(st.table_id, st.tablet_id).await?;
                ss.open_slot(st, view)
            }
            .await
            .map_err(|e| Status::new(e.code(), format!("scan {i}: {}", e.message())))?;
            slots.push(r.0);
            windows.push(r.1);
        }
        let said = (starts[0].attempt, starts[0].plan);
        let mut tables: Vec<u64> = starts.iter().map(|s| s.table_id).collect();
        tables.sort_unstable();
        tables.dedup();
        let who = Admitted {
            ticket,
            caller: &caller,
            tables: &tables,
        };
        let (credits, rx) = ss.spawn_producer(&starts, slots, &windows, busy, said, who);
        crate::scan::read_scan_many_acks(inbound, credits);
        let out =
            tokio_stream::StreamExt::map(rx, |m| m.map(|batches| v1::ScanManyBatch { batches }));
        Ok(Response::new(Box::pin(out)))
    }

    type QueryStream = BoxStream<v1::QueryResponse>;

    async fn query(
        &self,
        _req: Request<v1::QueryRequest>,
    ) -> Result<Response<Self::QueryStream>, Status> {
        Err(read_only("Query"))
    }

    async fn flush(
        &self,
        _req: Request<v1::FlushRequest>,
    ) -> Result<Response<v1::FlushResponse>, Status> {
        Err(read_only("Flush"))
    }

    async fn append(
        &self,
        _req: Request<v1::AppendRequest>,
    ) -> Result<Response<v1::AppendResponse>, Status> {
        Err(read_only("Append"))
    }
}
