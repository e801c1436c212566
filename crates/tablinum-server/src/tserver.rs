//! The tablet server: hosts tablets and serves writes, reads and
//! flow-controlled scans.
//!
//! Owns the open tablets (one engine store each, in
//! `<storage>/tables/<table id>/<tablet id>/`), the heartbeat loop that
//! reports them (with their immutable files) to the manager and opens or
//! closes tablets to match the answer, and the gRPC `TabletServer` service.
//! Opening a tablet is the engine's recovery (journal replay) at the epoch
//! of its assignment, which fences every older owner out of the storage, so
//! a tablet taken over from a dead, paused or cut-off server comes back
//! with every acknowledged write while the old process cannot acknowledge
//! any more. Reads are answered under the read lease of the latest
//! heartbeat answer, or after the store confirms no newer owner exists.
//!
//! Never serves a key outside a tablet it holds open: such requests get
//! FAILED_PRECONDITION "not serving", and the client refreshes its map.
//! Never applies a write read after its caller's deadline.

use std::collections::{HashMap, HashSet};
use std::ops::Bound;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tablinum_engine::{Batch, Durability as EngineDurability, Options, PutOptions, Store};
use tablinum_proto::topic;
use tablinum_proto::v1::{
    self, manager_client::ManagerClient, scan_client_message::Msg,
    tablet_server_server::TabletServer as TabletRpc,
};
use tokio_stream::Stream;
use tonic::{Request, Response, Status, Streaming};

use tablinum_auth::{authorize, ClusterSecret, Grant, Need, Role, Verifier};

use crate::config::TserverConfig;
use crate::error::Error;
use crate::scan::{produce, Credits, Cursor, ProducerMetrics, Slot};
use crate::status_from_engine;

/// One open tablet.
pub struct Tablet {
    /// Table name.
    pub table: String,
    /// Table id.
    pub table_id: u64,
    /// Tablet id.
    pub id: u64,
    /// Inclusive start key.
    pub start: Vec<u8>,
    /// Exclusive end key (empty: unbounded).
    pub end: Vec<u8>,
    /// The epoch it was opened at (its store is fenced at it).
    pub epoch: u64,
    /// Its table's durability (`v1::Durability`), to reopen it the same way.
    pub durability: i32,
    /// Its store.
    pub store: Arc<Store>,
    /// Rows written to it here (puts and deletes).
    pub rows_written: AtomicU64,
    /// Rows read from it here (gets, heads, scan rows).
    pub rows_read: Arc<AtomicU64>,
    /// A topic partition's head, once read (appends hold this lock from
    /// reading the head to their batch being applied, so offsets are
    /// assigned in order, and wait for the fsync after releasing it;
    /// `None`: read it from the store first).
    pub topic_head: tokio::sync::Mutex<Option<topic::Head>>,
}

impl Tablet {
    fn contains(&self, key: &[u8]) -> bool {
        key >= self.start.as_slice() && (self.end.is_empty() || key < self.end.as_slice())
    }
}

/// How often a tablet server applies topic retention, ms.
pub const RETENTION_CHECK_MS: u64 = 1_000;
/// Records one retention batch removes at most (with the marks among them
/// and the head, within the engine's batch limit).
pub const TRIM_BATCH_RECORDS: u64 = 40_000;

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct TserverMetrics {
    /// Objects written (puts and deletes).
    pub rows_written: AtomicU64,
    /// Rows read (gets, scan rows sent).
    pub rows_read: AtomicU64,
    /// Write requests.
    pub writes: AtomicU64,
    /// Get and head requests.
    pub reads: AtomicU64,
    /// Scan streams started.
    pub scans: AtomicU64,
    /// Scan streams running now.
    pub scans_active: AtomicU64,
    /// Scan batches sent.
    pub batches_sent: AtomicU64,
    /// Scan streams ended by the ack-wait timeout.
    pub ack_timeouts: AtomicU64,
    /// Coordinated queries run for thin clients.
    pub queries: AtomicU64,
    /// Requests refused (bad input, not serving).
    pub refused: AtomicU64,
    /// Tablets opened (recoveries included).
    pub tablets_opened: AtomicU64,
    /// Topic records removed by retention.
    pub topic_records_trimmed: AtomicU64,
}

/// A tablet held but not serving, as a heartbeat reports it: key
/// (table id, tablet id, epoch), opening or closing, no files.
fn held(k: (u64, u64, u64), opening: bool, closing: bool) -> v1::HostedTablet {
    v1::HostedTablet {
        table_id: k.0,
        tablet_id: k.1,
        epoch: k.2,
        opening,
        closing,
        ..Default::default()
    }
}

/// A tablet's health as a heartbeat reports it: (condition, reason,
/// journal I/O in flight ms). Read from the store without its writer lock.
fn condition_of(store: &Store, stuck_ms: u64) -> (v1::TabletCondition, String, u64) {
    use tablinum_engine::faults::Condition;
    use tablinum_engine::Health;
    let (health, stalled) = store.health();
    let stalled_ms = u64::try_from(stalled.as_millis()).unwrap_or(u64::MAX);
    let (c, reason) = match health {
        Health::Serving if stalled_ms >= stuck_ms => (
            v1::TabletCondition::TabletStuck,
            format!("journal I/O in flight for {stalled_ms} ms"),
        ),
        Health::Serving => (v1::TabletCondition::TabletServing, String::new()),
        Health::Degraded {
            condition: Condition::DiskFull,
            reason,
        } => (v1::TabletCondition::TabletDiskFull, reason),
        Health::Degraded { reason, .. } => (v1::TabletCondition::TabletDegraded, reason),
        Health::Poisoned { reason, .. } => (v1::TabletCondition::TabletRecovering, reason),
    };
    (c, cut_reason(reason), stalled_ms)
}

/// `reason` cut to `TABLET_CONDITION_REASON_BYTES_MAX` bytes (at a char
/// boundary).
fn cut_reason(mut reason: String) -> String {
    let max = tablinum_proto::TABLET_CONDITION_REASON_BYTES_MAX;
    if reason.len() > max {
        let mut at = max;
        while !reason.is_char_boundary(at) {
            at -= 1;
        }
        reason.truncate(at);
    }
    reason
}

/// A poisoned tablet being closed and reopened from durable state.
#[derive(Debug, Clone)]
struct Recovering {
    reason: String,
}

/// The read lease of the latest heartbeat answer.
#[derive(Debug, Default)]
struct Lease {
    until: Option<Instant>,
    tablets: HashSet<(u64, u64, u64)>,
}

/// The token grants of a heartbeat answer, unsealed, as the verifier
/// keeps them (malformed ones are skipped: they can match no caller).
pub(crate) fn grants(tokens: &[v1::TokenGrant], verifier: &Verifier) -> HashMap<String, Grant> {
    tokens
        .iter()
        .filter_map(|t| {
            Some((
                t.id.clone(),
                Grant {
                    role: Role::from_i32(t.role)?,
                    secret_sha256: verifier
                        .seal_grant(&t.id, &t.secret_sha256.as_slice().try_into().ok()?),
                },
            ))
        })
        .collect()
}

/// The tablet server role.
pub struct Tserver {
    cfg: TserverConfig,
    id: String,
    address: String,
    http: String,
    tablets: RwLock<HashMap<String, Vec<Arc<Tablet>>>>,
    opening: Mutex<HashSet<(u64, u64, u64)>>,
    /// Tablets withdrawn from this server and still closing (reported as
    /// held until closed, so the manager deletes nothing under them).
    closing: Mutex<HashSet<(u64, u64, u64)>>,
    /// Opens running at once (`TABLET_OPENS_MAX`).
    open_permits: Arc<tokio::sync::Semaphore>,
    /// Closes running at once (`TABLET_CLOSES_MAX`).
    close_permits: Arc<tokio::sync::Semaphore>,
    /// The assignment of the latest heartbeat answer: an open that finishes
    /// after its tablet was withdrawn is discarded.
    assigned: Mutex<HashSet<(u64, u64, u64)>>,
    /// Counters.
    pub metrics: TserverMetrics,
    /// Scan streams, tablet scans and Queries: the server's and each
    /// caller's share.
    pub admission: Arc<crate::admit::Admission>,
    /// Bytes of unacknowledged scan batches (`scan_bytes_in_flight_max`).
    scan_bytes: Arc<crate::scan::ByteBudget>,
    query_client: tablinum_client::AsyncClient,
    /// Checks every caller; its tokens come with heartbeat answers.
    verifier: Arc<Verifier>,
    /// The read lease: until when, and for which (table, tablet, epoch).
    lease: Mutex<Lease>,
    /// TLS of calls to the manager and other servers.
    client_tls: Option<tablinum_client::ClientTls>,
    /// What this server presents to the manager and to other servers.
    secret: ClusterSecret,
    /// Background workers, caches and the memtable budget of every tablet.
    engine: Arc<tablinum_engine::Shared>,
    /// Poisoned tablets being closed and reopened in place (reported as
    /// held, opening, with their reason). Last in the lock order.
    recovering: Mutex<HashMap<(u64, u64, u64), Recovering>>,
    /// Tablets recovered in place since start.
    pub recoveries: AtomicU64,
    /// A pass of `flush_old_writes` is running (it takes writer locks, so
    /// it runs beside the heartbeat, never in its way).
    flushing_old: Arc<std::sync::atomic::AtomicBool>,
    /// Fault injection for tests: every tablet opened from now on sends its
    /// journal I/O through this seam.
    storage_faults: RwLock<Option<Arc<dyn tablinum_engine::faults::StorageFaults>>>,
}

impl Tserver {
    /// A server that will report `address` (its gRPC address) and `http`,
    /// presenting `secret` to the manager and checking callers with
    /// `verifier`.
    pub fn new(
        cfg: TserverConfig,
        address: String,
        http: String,
        secret: ClusterSecret,
        verifier: Arc<Verifier>,
    ) -> Result<Arc<Tserver>, Error> {
        cfg.validate()?;
        std::fs::create_dir_all(&cfg.storage).map_err(|e| {
            Error::Io(format!(
                "cannot create storage root {}: {e}",
                cfg.storage.display()
            ))
        })?;
        let id = format!(
            "ts-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0)
        );
        let client_tls = cfg.client_tls()?;
        let query_client = tablinum_client::AsyncClient::connect_lazy(
            &cfg.manager,
            tablinum_client::ClientConfig {
                tls: client_tls.clone(),
                ..tablinum_client::ClientConfig::with_credential(Some(secret.credential()))
            },
        )
        .map_err(|e| Error::Config(format!("[tserver] manager: {e}")))?;
        let engine = tablinum_engine::Shared::new(cfg.engine_shared())
            .map_err(|e| Error::Config(format!("[tserver] {e}")))?;
        let admission = crate::admit::Admission::new(address.clone(), cfg.admission_limits());
        let scan_bytes = crate::scan::ByteBudget::new(
            usize::try_from(cfg.scan_bytes_in_flight_max).unwrap_or(usize::MAX),
        );
        Ok(Arc::new(Tserver {
            cfg,
            id,
            address,
            http,
            tablets: RwLock::new(HashMap::new()),
            opening: Mutex::new(HashSet::new()),
            closing: Mutex::new(HashSet::new()),
            open_permits: Arc::new(tokio::sync::Semaphore::new(crate::config::TABLET_OPENS_MAX)),
            close_permits: Arc::new(tokio::sync::Semaphore::new(
                crate::config::TABLET_CLOSES_MAX,
            )),
            assigned: Mutex::new(HashSet::new()),
            metrics: TserverMetrics::default(),
            admission,
            scan_bytes,
            engine,
            query_client,
            verifier,
            secret,
            lease: Mutex::new(Lease::default()),
            client_tls,
            recovering: Mutex::new(HashMap::new()),
            recoveries: AtomicU64::new(0),
            flushing_old: Arc::new(std::sync::atomic::AtomicBool::new(false)),
            storage_faults: RwLock::new(None),
        }))
    }

    /// Arms a fault switch for every tablet opened from now on and keeps it
    /// set to what `file` says, read every `DISK_FAULTS_POLL_MS` until
    /// `stop` (see `DISK_FAULTS_ENV`: process-level fault tests only). A
    /// line it cannot parse is logged and changes nothing.
    pub fn watch_fault_file(&self, file: PathBuf, stop: tokio::sync::watch::Receiver<bool>) {
        let switch = Arc::new(tablinum_engine::faults::FaultSwitch::new());
        self.inject_storage_faults(switch.clone());
        tracing::warn!(file = %file.display(), "disk fault injection is on (a test)");
        std::thread::spawn(move || {
            let mut last: Option<String> = None;
            while !*stop.borrow() {
                let now = std::fs::read_to_string(&file).unwrap_or_default();
                if last.as_deref() != Some(now.as_str()) {
                    match switch.apply_command(now.trim()) {
                        Ok(()) => tracing::warn!(command = %now.trim(), "disk faults set"),
                        Err(e) => tracing::error!(error = %e, "bad disk fault command"),
                    }
                    last = Some(now);
                }
                std::thread::sleep(Duration::from_millis(crate::DISK_FAULTS_POLL_MS));
            }
        });
    }

    /// Sends the journal I/O of every tablet opened from now on through
    /// `faults` (tests: a failing, full or slow disk under one server).
    /// Reachable only in-process, never over the network.
    pub fn inject_storage_faults(&self, faults: Arc<dyn tablinum_engine::faults::StorageFaults>) {
        *self.storage_faults.write() = Some(faults);
    }

    /// This server's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Bytes of unacknowledged scan batches this server holds now.
    pub fn scan_bytes_in_flight(&self) -> usize {
        self.scan_bytes.used()
    }

    /// The tablets open now, sorted by table and start key.
    pub fn open_tablets(&self) -> Vec<Arc<Tablet>> {
        let mut v: Vec<Arc<Tablet>> = self.tablets.read().values().flatten().cloned().collect();
        v.sort_by(|a, b| (&a.table, &a.start).cmp(&(&b.table, &b.start)));
        v
    }

    /// How many of this server's tablets are in each condition now
    /// (serving, disk full, degraded, recovering, stuck), read without any
    /// tablet's writer lock.
    pub fn tablet_conditions(&self) -> [(v1::TabletCondition, u64); 5] {
        use v1::TabletCondition as C;
        let mut n = [
            (C::TabletServing, 0),
            (C::TabletDiskFull, 0),
            (C::TabletDegraded, 0),
            (C::TabletRecovering, 0),
            (C::TabletStuck, 0),
        ];
        let mut count = |c: C| {
            if let Some(e) = n.iter_mut().find(|(k, _)| *k == c) {
                e.1 += 1;
            }
        };
        for t in self.open_tablets() {
            count(condition_of(&t.store, self.cfg.tablet_stuck_ms).0);
        }
        for _ in 0..self.recovering.lock().len() {
            count(C::TabletRecovering);
        }
        n
    }

    /// Tablets open now, as (table, tablet id, start, end), sorted.
    pub fn hosted(&self) -> Vec<(String, u64, Vec<u8>, Vec<u8>)> {
        self.open_tablets()
            .iter()
            .map(|t| (t.table.clone(), t.id, t.start.clone(), t.end.clone()))
            .collect()
    }

    fn tablet_dir(&self, table_id: u64, tablet_id: u64) -> PathBuf {
        self.cfg
            .storage
            .join("tables")
            .join(table_id.to_string())
            .join(tablet_id.to_string())
    }

    fn engine_options(&self, durability: i32, epoch: u64) -> Options {
        Options {
            epoch: Some(epoch),
            durability: if durability == v1::Durability::Nosync as i32 {
                EngineDurability::NoSync
            } else {
                EngineDurability::Sync
            },
            memtable_bytes_max: self.cfg.tablet_memtable_mib << 20,
            journal_segment_bytes_max: self.cfg.journal_segment_mib << 20,
            journal_compaction_interval_s: self.cfg.journal_compaction_interval_s,
            journal_compaction_bytes_per_s: self.cfg.journal_compaction_mib_per_s << 20,
            journal_compaction_garbage_pct: self.cfg.journal_compaction_garbage_pct,
            faults: self.storage_faults.read().clone(),
            ..Options::default()
        }
    }

    /// Opens (recovers) the store of a tablet at `epoch` (blocking).
    fn open_store(
        &self,
        table_id: u64,
        tablet_id: u64,
        durability: i32,
        epoch: u64,
    ) -> Result<Store, String> {
        let dir = self.tablet_dir(table_id, tablet_id);
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Store::open_shared(&dir, self.engine_options(durability, epoch), &self.engine)
            .map_err(|e| e.to_string())
    }

    /// Puts an opened tablet in the serving map if it is still assigned
    /// (else closes it again). Returns whether it now serves.
    fn install_tablet(&self, t: Arc<Tablet>) -> bool {
        let k = (t.table_id, t.id, t.epoch);
        let mut m = self.tablets.write();
        if self.assigned.lock().contains(&k) {
            let v = m.entry(t.table.clone()).or_default();
            v.push(t);
            v.sort_by(|x, y| x.start.cmp(&y.start));
            true
        } else {
            // Withdrawn while opening (moved or dropped).
            drop(m);
            if let Err(e) = t.store.close() {
                tracing::error!(table = %t.table, tablet = t.id, error = %e,
                    "closing a withdrawn tablet failed");
            }
            false
        }
    }

    /// Takes every poisoned tablet out of service and starts its recovery:
    /// close it (its journal cut back to the last good sync), then reopen
    /// it here from durable state, at the same epoch, retrying with backoff
    /// while the disk still fails. Meanwhile it is reported as held
    /// (opening) with its reason, so the manager neither reassigns it nor
    /// deletes its files.
    fn start_recoveries(self: &Arc<Self>) {
        let mut poisoned = Vec::new();
        {
            let mut m = self.tablets.write();
            let mut rec = self.recovering.lock();
            for v in m.values_mut() {
                v.retain(|t| {
                    let tablinum_engine::Health::Poisoned { reason, .. } = t.store.health().0
                    else {
                        return true;
                    };
                    rec.insert(
                        (t.table_id, t.id, t.epoch),
                        Recovering {
                            reason: cut_reason(reason.clone()),
                        },
                    );
                    poisoned.push((t.clone(), reason));
                    false
                });
            }
            m.retain(|_, v| !v.is_empty());
        }
        for (t, reason) in poisoned {
            tracing::warn!(table = %t.table, tablet = t.id, reason = %reason,
                "tablet store poisoned; reopening it from durable state");
            let me = self.clone();
            tokio::spawn(async move { me.recover(t).await });
        }
    }

    /// Closes poisoned tablet `t` until its journal is cut back, then
    /// reopens it while it stays assigned here (see `start_recoveries`).
    async fn recover(self: Arc<Self>, t: Arc<Tablet>) {
        use crate::config::{TABLET_RECOVERY_BACKOFF_MS_FIRST, TABLET_RECOVERY_BACKOFF_MS_MAX};
        let k = (t.table_id, t.id, t.epoch);
        let mut delay = TABLET_RECOVERY_BACKOFF_MS_FIRST;
        let backoff = |delay: &mut u64| {
            let d = Duration::from_millis(*delay);
            *delay = (*delay * 2).min(TABLET_RECOVERY_BACKOFF_MS_MAX);
            d
        };
        // A close fails with an I/O error while the journal cannot be cut
        // back yet; with the poison's own error once it has been.
        loop {
            let store = t.store.clone();
            let r = tokio::task::spawn_blocking(move || store.close()).await;
            match r {
                Ok(Err(e @ tablinum_engine::Error::Io { .. })) => {
                    if let Some(r) = self.recovering.lock().get_mut(&k) {
                        r.reason = cut_reason(e.to_string());
                    }
                    tokio::time::sleep(backoff(&mut delay)).await;
                }
                _ => break,
            }
        }
        loop {
            if !self.assigned.lock().contains(&k) {
                self.recovering.lock().remove(&k);
                return;
            }
            let me = self.clone();
            let durability = t.durability;
            let r = tokio::task::spawn_blocking(move || me.open_store(k.0, k.1, durability, k.2))
                .await
                .unwrap_or_else(|e| Err(e.to_string()));
            match r {
                Ok(store) => {
                    let fresh = Arc::new(Tablet {
                        table: t.table.clone(),
                        table_id: t.table_id,
                        id: t.id,
                        start: t.start.clone(),
                        end: t.end.clone(),
                        epoch: t.epoch,
                        durability: t.durability,
                        store: Arc::new(store),
                        rows_written: AtomicU64::new(0),
                        rows_read: Arc::new(AtomicU64::new(0)),
                        topic_head: tokio::sync::Mutex::new(None),
                    });
                    self.metrics.tablets_opened.fetch_add(1, Ordering::Relaxed);
                    // Serving before it leaves `recovering`, so every
                    // heartbeat reports it (once or, for a moment, twice).
                    let me = self.clone();
                    tokio::task::spawn_blocking(move || {
                        if me.install_tablet(fresh) {
                            me.recoveries.fetch_add(1, Ordering::Relaxed);
                        }
                        me.recovering.lock().remove(&k);
                    })
                    .await
                    .ok();
                    tracing::info!(table = %t.table, tablet = t.id, "tablet reopened from durable state");
                    return;
                }
                Err(e) => {
                    if let Some(r) = self.recovering.lock().get_mut(&k) {
                        r.reason = cut_reason(format!("reopening: {e}"));
                    }
                    tokio::time::sleep(backoff(&mut delay)).await;
                }
            }
        }
    }

    fn refuse(&self, s: Status) -> Status {
        self.metrics.refused.fetch_add(1, Ordering::Relaxed);
        s
    }

    /// The open tablet of `table` (of id `table_id`, unless 0) holding `key`.
    fn tablet_for(&self, table: &str, table_id: u64, key: &[u8]) -> Result<Arc<Tablet>, Status> {
        tablinum_proto::check_table_name(table)
            .map_err(|m| self.refuse(Status::invalid_argument(m)))?;
        let m = self.tablets.read();
        // Sorted by start: the holder is at or before the partition point
        // (searched back from it, since a dropped table's tablets of the same
        // name may overlap for a moment).
        m.get(table)
            .and_then(|v| {
                let end = v.partition_point(|t| t.start.as_slice() <= key);
                v[..end]
                    .iter()
                    .rev()
                    .find(|t| t.contains(key) && (table_id == 0 || t.table_id == table_id))
                    .cloned()
            })
            .ok_or_else(|| {
                self.refuse(Status::failed_precondition(format!(
                    "not serving table {table} at key {:?} on {}",
                    String::from_utf8_lossy(key),
                    self.address
                )))
            })
    }

    /// The open tablets the scans in `starts` name, looked up under one
    /// lock through an index by tablet id (not a search of the table per
    /// scan: a query over q tablets would cost O(q²)).
    fn tablets_by_id(&self, starts: &[v1::ScanStart]) -> Vec<Result<Arc<Tablet>, Status>> {
        let m = self.tablets.read();
        let mut index: HashMap<(&str, u64), Vec<&Arc<Tablet>>> = HashMap::new();
        let mut indexed: HashSet<&str> = HashSet::new();
        for st in starts {
            if indexed.insert(st.table.as_str()) {
                for t in m.get(&st.table).into_iter().flatten() {
                    index.entry((st.table.as_str(), t.id)).or_default().push(t);
                }
            }
        }
        starts
            .iter()
            .map(|st| {
                tablinum_proto::check_table_name(&st.table)
                    .map_err(|m| self.refuse(Status::invalid_argument(m)))?;
                index
                    .get(&(st.table.as_str(), st.tablet_id))
                    .and_then(|c| {
                        c.iter()
                            .find(|t| st.table_id == 0 || t.table_id == st.table_id)
                    })
                    .map(|t| Arc::clone(t))
                    .ok_or_else(|| {
                        self.refuse(Status::failed_precondition(format!(
                            "not serving tablet {} of table {} on {}",
                            st.tablet_id, st.table, self.address
                        )))
                    })
            })
            .collect()
    }

    /// Checks one tablet scan and opens its cursor on `tablet`; returns the
    /// slot and its first window.
    fn open_slot(&self, start: &v1::ScanStart, tablet: &Tablet) -> Result<(Slot, u32), Status> {
        let (window, rows_max) =
            crate::scan::scan_limits(start, self.cfg.stream_limit, self.cfg.batch_rows)
                .map_err(|s| self.refuse(s))?;
        let cursor = if start.index.is_empty() {
            // Clip the key range to the tablet.
            let lo = start.start.clone().max(tablet.start.clone());
            let hi = match (start.end.is_empty(), tablet.end.is_empty()) {
                (true, _) => tablet.end.clone(),
                (false, true) => start.end.clone(),
                (false, false) => start.end.clone().min(tablet.end.clone()),
            };
            let upper = if hi.is_empty() {
                Bound::Unbounded
            } else {
                Bound::Excluded(hi.as_slice())
            };
            let range = (Bound::Included(lo.as_slice()), upper);
            if !hi.is_empty() && hi <= lo {
                None
            } else if start.keys_only {
                Some(Cursor::Keys(
                    tablet.store.scan_heads(range).map_err(status_from_engine)?,
                ))
            } else {
                Some(Cursor::Objects(
                    blocking(|| tablet.store.scan_objects(range)).map_err(status_from_engine)?,
                ))
            }
        } else {
            Some(Cursor::Index {
                store: tablet.store.clone(),
                name: start.index.clone(),
                lo: Bound::Included(start.start.clone()),
                end: start.end.clone(),
                last: None,
                buf: Default::default(),
                done: false,
            })
        };
        self.metrics.scans.fetch_add(1, Ordering::Relaxed);
        let limit = if start.limit == 0 {
            u64::MAX
        } else {
            start.limit
        };
        Ok((
            Slot {
                cursor,
                lookahead: None,
                rows_max,
                limit,
                rows_read: tablet.rows_read.clone(),
                filter: crate::scan::RowFilter::from_wire(start.filter.as_ref())
                    .map_err(|s| self.refuse(s))?,
                seen: Default::default(),
                keep: None,
            },
            window,
        ))
    }

    /// Confirms that a read of `t` just done may be answered: under a valid
    /// lease for its epoch at once; otherwise (the manager is slow or
    /// paused, or the lease lapsed) by asking the storage whether a newer
    /// owner has claimed the tablet. A fenced tablet is dropped and the
    /// caller told "not serving".
    fn confirm_read(&self, t: &Arc<Tablet>) -> Result<(), Status> {
        {
            let l = self.lease.lock();
            if l.until.is_some_and(|u| Instant::now() < u)
                && l.tablets.contains(&(t.table_id, t.id, t.epoch))
            {
                return Ok(());
            }
        }
        t.store.check_fence().map_err(|e| self.fenced(t, e))
    }

    /// The status for engine error `e` on tablet `t`; a fenced tablet is
    /// dropped from this server (closed in the background).
    fn fenced(&self, t: &Arc<Tablet>, e: tablinum_engine::Error) -> Status {
        if matches!(e, tablinum_engine::Error::Fenced { .. }) {
            let removed = {
                let mut m = self.tablets.write();
                let before = m.get(&t.table).map_or(0, Vec::len);
                if let Some(v) = m.get_mut(&t.table) {
                    v.retain(|x| !Arc::ptr_eq(x, t));
                }
                before != m.get(&t.table).map_or(0, Vec::len)
            };
            if removed {
                tracing::warn!(table = %t.table, tablet = t.id, epoch = t.epoch, error = %e,
                    "a newer owner took the tablet over; dropping it");
                let t = t.clone();
                tokio::task::spawn_blocking(move || {
                    let _ = t.store.close();
                });
            }
        }
        self.refuse(status_from_engine(e))
    }

    /// Credits for a stream of `starts` with `windows`, under this
    /// server's byte limits and `caller`'s.
    fn credits(
        &self,
        starts: &[v1::ScanStart],
        windows: &[u32],
        caller: &tablinum_auth::Principal,
    ) -> Arc<Credits> {
        Credits::new(
            windows,
            crate::scan::stream_bytes_max(self.cfg.stream_bytes_in_flight_max, starts),
            self.scan_bytes.clone(),
            self.admission.caller_bytes(caller),
        )
    }

    /// Runs the producer of `slots` on its own task, the stream holding
    /// its admission `ticket` (see `admit::outbox`); returns its messages.
    fn spawn_producer(
        self: &Arc<Self>,
        slots: Vec<Slot>,
        credits: Arc<Credits>,
        (ticket, id): (crate::admit::Ticket, u64),
        caller: &tablinum_auth::Principal,
    ) -> crate::scan::OutboxRx {
        let (tx, rx) = crate::admit::outbox(
            crate::scan::PRODUCER_QUEUE_MESSAGES,
            Some(ticket),
            Some(credits.clone()),
        );
        self.admission
            .track(id, caller, Some(&credits), tx.killer(), Vec::new());
        let bytes_max = usize::try_from(self.cfg.batch_bytes).unwrap_or(usize::MAX);
        let ack_wait = Duration::from_millis(self.cfg.ack_wait_timeout_ms);
        let me = self.clone();
        tokio::spawn(async move {
            me.metrics.scans_active.fetch_add(1, Ordering::Relaxed);
            let m: Arc<dyn ProducerMetrics> = me.clone();
            produce(slots, credits, &tx, bytes_max, ack_wait, m, None).await;
            me.metrics.scans_active.fetch_sub(1, Ordering::Relaxed);
            tx.finish(ack_wait).await;
        });
        rx
    }

    /// One heartbeat: report, then open and close tablets to match.
    async fn heartbeat(
        self: &Arc<Self>,
        mgr: &mut ManagerClient<tablinum_client::Transport>,
    ) -> Result<(), Status> {
        // Tablets still opening or closing are reported too: the manager
        // must not delete or reassign what this server is about to serve or
        // still has open. Read under `opening`, `tablets`, then `closing`
        // (the order every path takes them in), so a tablet moving from one
        // to the next is reported once.
        //
        // Nothing here waits on a tablet's write path: the file list and
        // the health are read without the writer lock, so a slow or stuck
        // disk shows as stuck tablets, not as a silent (dead) server.
        self.start_recoveries();
        let hosted: Vec<v1::HostedTablet> = {
            let opening = self.opening.lock();
            let m = self.tablets.read();
            let closing = self.closing.lock();
            let recovering = self.recovering.lock();
            m.values()
                .flatten()
                .map(|t| {
                    let (condition, reason, stalled_ms) =
                        condition_of(&t.store, self.cfg.tablet_stuck_ms);
                    v1::HostedTablet {
                        table_id: t.table_id,
                        tablet_id: t.id,
                        epoch: t.epoch,
                        files: t.store.immutable_files(),
                        condition: condition as i32,
                        condition_reason: reason,
                        io_stalled_ms: stalled_ms,
                        ..Default::default()
                    }
                })
                .chain(opening.iter().map(|&k| held(k, true, false)))
                .chain(closing.iter().map(|&k| held(k, false, true)))
                .chain(recovering.iter().map(|(&k, r)| v1::HostedTablet {
                    condition: v1::TabletCondition::TabletRecovering as i32,
                    condition_reason: r.reason.clone(),
                    ..held(k, true, false)
                }))
                .collect()
        };
        let req = v1::HeartbeatRequest {
            server_id: self.id.clone(),
            address: self.address.clone(),
            http: self.http.clone(),
            tablets: hosted,
            rows_written: self.metrics.rows_written.load(Ordering::Relaxed),
            rows_read: self.metrics.rows_read.load(Ordering::Relaxed),
            tokens_version: self.verifier.tokens_version(),
        };
        let sent = Instant::now();
        let resp = mgr.heartbeat(req).await?.into_inner();
        if resp.tokens_changed {
            self.verifier
                .set_tokens(resp.tokens_version, grants(&resp.tokens, &self.verifier));
        }
        // Streams and Queries of tokens revoked since the last check end
        // now (in the manager's process the set changes there).
        self.admission.end_revoked(&self.verifier);
        let wanted: HashSet<(u64, u64, u64)> = resp
            .assignments
            .iter()
            .map(|a| (a.table_id, a.tablet_id, a.epoch))
            .collect();
        *self.assigned.lock() = wanted.clone();
        // The lease runs from when the heartbeat was sent.
        *self.lease.lock() = Lease {
            until: Some(sent + Duration::from_millis(resp.lease_ms)),
            tablets: wanted.clone(),
        };
        // Close what is no longer ours, off the heartbeat path (closing
        // thousands of tablets must not silence this server): each stays
        // in `closing`, reported as held, until its close has finished,
        // since the manager may then remove a dropped table's files.
        let mut closing = Vec::new();
        {
            let mut m = self.tablets.write();
            let mut closing_set = self.closing.lock();
            for v in m.values_mut() {
                v.retain(|t| {
                    let keep = wanted.contains(&(t.table_id, t.id, t.epoch));
                    if !keep {
                        closing_set.insert((t.table_id, t.id, t.epoch));
                        closing.push(t.clone());
                    }
                    keep
                });
            }
            m.retain(|_, v| !v.is_empty());
        }
        for t in closing {
            let me = self.clone();
            tokio::spawn(async move {
                let _permit = me.close_permits.clone().acquire_owned().await;
                let k = (t.table_id, t.id, t.epoch);
                let _ = tokio::task::spawn_blocking(move || {
                    if let Err(e) = t.store.close() {
                        tracing::error!(table = %t.table, tablet = t.id, error = %e, "closing a tablet failed");
                    }
                })
                .await;
                me.closing.lock().remove(&k);
            });
        }
        // Open what is newly ours, concurrently.
        for a in resp.assignments {
            let k = (a.table_id, a.tablet_id, a.epoch);
            if a.epoch == 0 {
                continue; // not yet fenced by the manager: next heartbeat
            }
            {
                // Under `opening`, then `tablets`: an open task inserts its
                // tablet before it leaves `opening`, so a tablet is seen in
                // one or the other and never opened twice.
                let mut opening = self.opening.lock();
                let open = self
                    .tablets
                    .read()
                    .get(&a.table)
                    .is_some_and(|v| v.iter().any(|t| (t.table_id, t.id, t.epoch) == k));
                // A recovering tablet is reopened by its recovery.
                if open || self.recovering.lock().contains_key(&k) || !opening.insert(k) {
                    continue;
                }
            }
            let me = self.clone();
            tokio::spawn(async move {
                // At most TABLET_OPENS_MAX opens at once: a table of
                // thousands of tablets must not start thousands of threads.
                let _permit = me.open_permits.clone().acquire_owned().await;
                let _ = tokio::task::spawn_blocking(move || {
                    if !me.assigned.lock().contains(&k) {
                        me.opening.lock().remove(&k);
                        return; // withdrawn before the open started
                    }
                    let r = me.open_store(a.table_id, a.tablet_id, a.durability, a.epoch);
                    match r {
                        Ok(store) => {
                            me.metrics.tablets_opened.fetch_add(1, Ordering::Relaxed);
                            me.install_tablet(Arc::new(Tablet {
                                table: a.table.clone(),
                                table_id: a.table_id,
                                id: a.tablet_id,
                                start: a.start,
                                end: a.end,
                                epoch: a.epoch,
                                durability: a.durability,
                                store: Arc::new(store),
                                rows_written: AtomicU64::new(0),
                                rows_read: Arc::new(AtomicU64::new(0)),
                                topic_head: tokio::sync::Mutex::new(None),
                            }));
                        }
                        Err(e) => {
                            tracing::warn!(table = %a.table, tablet = a.tablet_id, error = %e,
                        "cannot open a tablet yet (will retry)")
                        }
                    }
                    me.opening.lock().remove(&k);
                })
                .await;
            });
        }
        Ok(())
    }

    /// Applies every topic partition's retention every
    /// [`RETENTION_CHECK_MS`] until `stop` fires.
    pub async fn retention_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_millis(RETENTION_CHECK_MS)) => {}
                _ = stop.changed() => return,
            }
            let tablets: Vec<(String, Arc<Tablet>)> = self
                .tablets
                .read()
                .iter()
                .filter(|(t, _)| topic::topic_of(t).is_some())
                .flat_map(|(t, v)| v.iter().map(move |x| (t.clone(), x.clone())))
                .collect();
            for (table, t) in tablets {
                let p = match t.start.as_slice() {
                    [] => 0,
                    s => match <[u8; 4]>::try_from(s) {
                        Ok(b) => u32::from_be_bytes(b),
                        Err(_) => continue,
                    },
                };
                if !t.contains(&topic::head_key(p)) {
                    continue;
                }
                match self.trim(&t, p).await {
                    Ok(0) => {}
                    Ok(n) => {
                        self.metrics
                            .topic_records_trimmed
                            .fetch_add(n, Ordering::Relaxed);
                        tracing::debug!(table = %table, partition = p, records = n, "retention removed records");
                    }
                    Err(e) => {
                        tracing::warn!(table = %table, partition = p, error = %e, "retention failed; trying again later")
                    }
                }
            }
        }
    }

    /// Removes what partition `p`'s retention no longer keeps, whole
    /// appends from the front, in batches of at most [`TRIM_BATCH_RECORDS`]
    /// (each moves the head's `start` with its deletes, so a crash between
    /// two leaves a consistent partition). Holds the partition's append
    /// lock. Returns the records removed.
    async fn trim(&self, t: &Arc<Tablet>, p: u32) -> Result<u64, String> {
        let r = blocking(|| t.store.get(&topic::retention_key(p))).map_err(|e| e.to_string())?;
        let r = topic::Retention::decode(r.as_deref())?;
        if r.is_unlimited() {
            return Ok(0);
        }
        let mut head = t.topic_head.lock().await;
        let current = match *head {
            Some(h) => h,
            None => {
                let v = blocking(|| t.store.get(&topic::head_key(p))).map_err(|e| e.to_string())?;
                topic::Head::decode(v.as_deref())?
            }
        };
        let (lo, hi) = (
            topic::mark_key(p, current.start),
            topic::mark_key(p, u64::MAX),
        );
        let rows = blocking(|| {
            t.store
                .scan_objects((
                    Bound::Included(lo.as_slice()),
                    Bound::Included(hi.as_slice()),
                ))
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        })
        .map_err(|e| e.to_string())?;
        let marks = rows
            .iter()
            .map(|(k, v)| topic::Mark::decode(p, k, v))
            .collect::<Result<Vec<_>, _>>()?;
        let to = topic::trim_to(current, &marks, r, tablinum_proto::unix_ms());
        let mut start = current.start;
        while start < to {
            let end = to.min(start + TRIM_BATCH_RECORDS);
            let mut b = Batch::new();
            for o in start..end {
                b.delete(&topic::record_key(p, o));
            }
            for m in marks.iter().filter(|m| m.offset >= start && m.offset < end) {
                b.delete(&topic::mark_key(p, m.offset));
            }
            let h = topic::Head {
                next: current.next,
                start: end,
            };
            b.put(&topic::head_key(p), &h.encode());
            if let Err(e) = blocking(|| t.store.write(&b)) {
                *head = None;
                return Err(e.to_string());
            }
            *head = Some(h);
            start = end;
        }
        if head.is_none() {
            *head = Some(current);
        }
        Ok(to - current.start)
    }

    /// Heartbeats every interval until `stop` fires.
    pub async fn heartbeat_loop(self: Arc<Self>, stop: tokio::sync::watch::Receiver<bool>) {
        let period = Duration::from_millis(self.cfg.heartbeat_interval_ms);
        let me = self.clone();
        crate::heartbeat::run(
            "tserver",
            &self.cfg.manager,
            self.client_tls.as_ref(),
            &self.secret,
            period,
            stop,
            move |mut mgr| {
                let me = me.clone();
                async move {
                    me.flush_old_writes();
                    me.heartbeat(&mut mgr).await
                }
            },
        )
        .await;
    }

    /// Freezes (for flush) every tablet whose oldest unflushed write is
    /// older than `flush_max_age_ms`, so eventual readers see it soon.
    /// Runs beside the heartbeat (a freeze takes the tablet's writer lock,
    /// which a slow disk may hold for seconds), one pass at a time.
    fn flush_old_writes(self: &Arc<Self>) {
        if self.flushing_old.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            me.flush_old_writes_pass().await;
            me.flushing_old.store(false, Ordering::Release);
        });
    }

    async fn flush_old_writes_pass(self: &Arc<Self>) {
        let max = Duration::from_millis(self.cfg.flush_max_age_ms);
        let old: Vec<Arc<Tablet>> = self
            .tablets
            .read()
            .values()
            .flatten()
            .filter(|t| t.store.unflushed_age().is_some_and(|a| a >= max))
            .cloned()
            .collect();
        if old.is_empty() {
            return;
        }
        let _ = tokio::task::spawn_blocking(move || {
            for t in old {
                if let Err(e) = t.store.freeze() {
                    tracing::warn!(table = %t.table, tablet = t.id, error = %e, "flushing old writes failed");
                }
            }
        })
        .await;
    }

    /// Closes every tablet (fsyncs journals).
    pub fn close_all(&self) {
        let all: Vec<Arc<Tablet>> = self.tablets.write().drain().flat_map(|(_, v)| v).collect();
        for t in all {
            if let Err(e) = t.store.close() {
                tracing::error!(table = %t.table, tablet = t.id, error = %e, "closing a tablet failed");
            }
        }
    }
}

impl ProducerMetrics for Tserver {
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

/// One key of a GetMany that failed alone with `s`.
fn key_failed(s: &Status) -> v1::KeyResult {
    let reason = tablinum_proto::error::Detail::of(s).map_or_else(
        || tablinum_proto::error::reason_of_code(s.code()),
        |d| d.reason,
    );
    v1::KeyResult {
        found: false,
        value: Vec::new(),
        code: u32::try_from(i32::from(s.code())).unwrap_or(2),
        message: s.message().to_string(),
        reason: reason.into(),
    }
}

/// A key's length within 1..=KEY_BYTES_MAX, or an error naming it.
fn check_key(what: &str, key: &[u8]) -> Result<(), Status> {
    let max = tablinum_engine::options::KEY_BYTES_MAX;
    if key.is_empty() || key.len() > max {
        return Err(Status::invalid_argument(format!(
            "{what}key is {} bytes; keys are 1..={max} bytes",
            key.len()
        )));
    }
    Ok(())
}

/// The absolute deadline a write carries (`tablinum-deadline-unix-ms`), if any.
fn write_deadline<T>(req: &Request<T>) -> Result<Option<u64>, Status> {
    let Some(v) = req.metadata().get(tablinum_proto::DEADLINE_HEADER) else {
        return Ok(None);
    };
    v.to_str()
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| {
            Status::invalid_argument(format!(
                "{} must be milliseconds since the Unix epoch",
                tablinum_proto::DEADLINE_HEADER
            ))
        })
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// Rows per message of a thin-client query, at most (also capped by
/// `batch_bytes`).
pub const QUERY_CHUNK_ROWS: usize = 1000;

/// The gRPC face of a tablet server.
#[derive(Clone)]
pub struct TserverService(pub Arc<Tserver>);

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

#[tonic::async_trait]
impl TabletRpc for TserverService {
    async fn write(
        &self,
        req: Request<v1::WriteRequest>,
    ) -> Result<Response<v1::WriteResponse>, Status> {
        let ts = &self.0;
        let who = authorize(&req, Need::Write, "Write")?;
        let deadline = write_deadline(&req)?;
        let req = req.into_inner();
        ts.metrics.writes.fetch_add(1, Ordering::Relaxed);
        if req.mutations.is_empty() {
            return Err(ts.refuse(Status::invalid_argument(
                "a write needs at least one mutation",
            )));
        }
        if req.mutations.len() > tablinum_engine::options::BATCH_OPS_MAX {
            return Err(ts.refuse(Status::invalid_argument(format!(
                "{} mutations in one write; the limit is {}",
                req.mutations.len(),
                tablinum_engine::options::BATCH_OPS_MAX
            ))));
        }
        for (i, m) in req.mutations.iter().enumerate() {
            check_key(&format!("mutation {i}: "), &m.key).map_err(|s| ts.refuse(s))?;
            let value_max = tablinum_engine::options::VALUE_BYTES_MAX;
            if m.value.len() > value_max {
                return Err(ts.refuse(Status::invalid_argument(format!(
                    "mutation {i}: value is {} bytes; the limit is {value_max} bytes",
                    m.value.len()
                ))));
            }
        }
        if topic::topic_of(&req.table).is_some() {
            if let Some((i, _)) = req.mutations.iter().enumerate().find(|(_, m)| {
                !(topic::is_group_key(&m.key) || topic::is_retention_key(&m.key)) || m.delete
            }) {
                return Err(ts.refuse(Status::invalid_argument(format!(
                    "mutation {i}: table {} is a topic; its records are added with Append and a Write may only set consumer group positions and (admins) retention",
                    req.table
                ))));
            }
            for (i, m) in req.mutations.iter().enumerate() {
                if !topic::is_retention_key(&m.key) {
                    continue;
                }
                if !who.may(Need::Admin) {
                    return Err(ts.refuse(Status::permission_denied(format!(
                        "mutation {i}: setting a topic's retention needs an admin token; the caller has {who}"
                    ))));
                }
                topic::Retention::decode(Some(&m.value)).map_err(|e| {
                    ts.refuse(Status::invalid_argument(format!("mutation {i}: {e}")))
                })?;
            }
        }
        let tablet = ts.tablet_for(&req.table, req.table_id, &req.mutations[0].key)?;
        if let Some(m) = req.mutations.iter().find(|m| !tablet.contains(&m.key)) {
            return Err(ts.refuse(Status::invalid_argument(format!(
                "a write spans tablets: key {:?} is outside tablet {} of {} (writes are atomic within one tablet)",
                String::from_utf8_lossy(&m.key),
                tablet.id,
                req.table
            ))));
        }
        let n = req.mutations.len() as u64;
        let mut batch = Batch::new();
        for m in req.mutations {
            if m.delete {
                batch.delete(&m.key);
            } else if m.metadata.is_empty() && m.index_terms.is_empty() {
                batch.put(&m.key, &m.value);
            } else {
                let opts = PutOptions {
                    metadata: m.metadata,
                    index_terms: m
                        .index_terms
                        .into_iter()
                        .map(|t| (t.index, t.term))
                        .collect(),
                };
                batch.put_with(&m.key, &m.value, opts);
            }
        }
        // A write read after its caller's deadline (it waited in a paused
        // server's socket) is not applied: the caller may have retried it.
        if let Some(d) = deadline {
            if tablinum_proto::unix_ms() > d {
                return Err(ts.refuse(Status::deadline_exceeded(format!(
                    "the caller's deadline passed {} ms before the write was read; it was not applied",
                    tablinum_proto::unix_ms() - d
                ))));
            }
        }
        let seq = blocking(|| tablet.store.write(&batch)).map_err(|e| ts.fenced(&tablet, e))?;
        ts.metrics.rows_written.fetch_add(n, Ordering::Relaxed);
        tablet.rows_written.fetch_add(n, Ordering::Relaxed);
        Ok(Response::new(v1::WriteResponse { seq }))
    }

    async fn get(&self, req: Request<v1::GetRequest>) -> Result<Response<v1::GetResponse>, Status> {
        let ts = &self.0;
        authorize(&req, Need::Read, "Get")?;
        let req = req.into_inner();
        ts.metrics.reads.fetch_add(1, Ordering::Relaxed);
        check_key("", &req.key).map_err(|s| ts.refuse(s))?;
        let tablet = ts.tablet_for(&req.table, req.table_id, &req.key)?;
        let v = blocking(|| tablet.store.get(&req.key)).map_err(|e| ts.fenced(&tablet, e))?;
        ts.confirm_read(&tablet)?;
        ts.metrics.rows_read.fetch_add(1, Ordering::Relaxed);
        tablet.rows_read.fetch_add(1, Ordering::Relaxed);
        Ok(Response::new(match v {
            Some(value) => v1::GetResponse { found: true, value },
            None => v1::GetResponse::default(),
        }))
    }

    async fn get_many(
        &self,
        req: Request<v1::GetManyRequest>,
    ) -> Result<Response<v1::GetManyResponse>, Status> {
        let ts = &self.0;
        authorize(&req, Need::Read, "GetMany")?;
        let req = req.into_inner();
        ts.metrics.reads.fetch_add(1, Ordering::Relaxed);
        let max = tablinum_proto::GET_MANY_KEYS_MAX;
        if req.keys.is_empty() || req.keys.len() > max {
            return Err(ts.refuse(Status::invalid_argument(format!(
                "a GetMany has {} keys; 1..={max} are allowed (GET_MANY_KEYS_MAX)",
                req.keys.len()
            ))));
        }
        tablinum_proto::check_table_name(&req.table)
            .map_err(|m| ts.refuse(Status::invalid_argument(m)))?;
        let mut results: Vec<v1::KeyResult> = Vec::with_capacity(req.keys.len());
        // The tablets read, and the results each answered: confirmed once
        // each after the reads, as a Get confirms its one.
        let mut read: Vec<(Arc<Tablet>, Vec<usize>)> = Vec::new();
        let mut bytes = 0usize;
        blocking(|| {
            for (i, key) in req.keys.iter().enumerate() {
                let tablet = match check_key("", key)
                    .and_then(|()| ts.tablet_for(&req.table, req.table_id, key))
                {
                    Ok(t) => t,
                    Err(s) => {
                        results.push(key_failed(&s));
                        continue;
                    }
                };
                match tablet.store.get(key) {
                    Ok(v) => {
                        let n = v.as_ref().map_or(0, Vec::len);
                        if i > 0 && bytes + n > tablinum_proto::GET_MANY_RESPONSE_BYTES_MAX {
                            // Full: the caller asks again for the rest.
                            break;
                        }
                        bytes += n;
                        results.push(match v {
                            Some(value) => v1::KeyResult {
                                found: true,
                                value,
                                ..Default::default()
                            },
                            None => v1::KeyResult::default(),
                        });
                        match read.iter_mut().find(|(t, _)| Arc::ptr_eq(t, &tablet)) {
                            Some((_, at)) => at.push(i),
                            None => read.push((tablet, vec![i])),
                        }
                    }
                    Err(e) => results.push(key_failed(&ts.fenced(&tablet, e))),
                }
            }
        });
        let mut rows = 0u64;
        for (tablet, at) in read {
            match ts.confirm_read(&tablet) {
                Ok(()) => {
                    rows += at.len() as u64;
                    tablet
                        .rows_read
                        .fetch_add(at.len() as u64, Ordering::Relaxed);
                }
                Err(s) => {
                    for i in at {
                        results[i] = key_failed(&s);
                    }
                }
            }
        }
        ts.metrics.rows_read.fetch_add(rows, Ordering::Relaxed);
        Ok(Response::new(v1::GetManyResponse { results }))
    }

    async fn head(
        &self,
        req: Request<v1::GetRequest>,
    ) -> Result<Response<v1::HeadResponse>, Status> {
        let ts = &self.0;
        authorize(&req, Need::Read, "Head")?;
        let req = req.into_inner();
        ts.metrics.reads.fetch_add(1, Ordering::Relaxed);
        check_key("", &req.key).map_err(|s| ts.refuse(s))?;
        let tablet = ts.tablet_for(&req.table, req.table_id, &req.key)?;
        let h = blocking(|| tablet.store.head(&req.key)).map_err(|e| ts.fenced(&tablet, e))?;
        ts.confirm_read(&tablet)?;
        Ok(Response::new(crate::scan::head_response(h)))
    }

    type ScanStream = BoxStream<v1::ScanBatch>;

    async fn scan(
        &self,
        req: Request<Streaming<v1::ScanClientMessage>>,
    ) -> Result<Response<Self::ScanStream>, Status> {
        let caller = authorize(&req, Need::Read, "Scan")?;
        let ts = self.0.clone();
        let mut inbound = req.into_inner();
        let start = match inbound.message().await? {
            Some(v1::ScanClientMessage {
                msg: Some(Msg::Start(s)),
            }) => s,
            _ => {
                return Err(ts.refuse(Status::invalid_argument(
                    "a scan stream must begin with a start message",
                )))
            }
        };
        let permit = ts
            .admission
            .stream(&caller, 1)
            .await
            .map_err(|s| ts.refuse(s))?;
        let tablet = ts.tablets_by_id(std::slice::from_ref(&start)).remove(0)?;
        let (slot, window) = ts.open_slot(&start, &tablet)?;
        // The cursor is a snapshot: confirm it is not a stale owner's.
        ts.confirm_read(&tablet)?;
        let credits = ts.credits(std::slice::from_ref(&start), &[window], &caller);
        crate::scan::read_scan_acks(inbound, credits.clone());
        let rx = ts.spawn_producer(vec![slot], credits, permit, &caller);
        // One ScanBatch per batch (a producer message may carry several).
        let out = crate::scan::scan_batches(rx);
        Ok(Response::new(Box::pin(out)))
    }

    type ScanManyStream = BoxStream<v1::ScanManyBatch>;

    async fn scan_many(
        &self,
        req: Request<Streaming<v1::ScanManyClientMessage>>,
    ) -> Result<Response<Self::ScanManyStream>, Status> {
        let caller = authorize(&req, Need::Read, "ScanMany")?;
        let ts = self.0.clone();
        let mut inbound = req.into_inner();
        let starts = match inbound.message().await? {
            Some(v1::ScanManyClientMessage {
                msg: Some(v1::scan_many_client_message::Msg::Start(s)),
            }) => s.scans,
            _ => {
                return Err(ts.refuse(Status::invalid_argument(
                    "a scan-many stream must begin with a start message",
                )))
            }
        };
        let max = tablinum_proto::TABLETS_PER_TABLE_MAX as usize;
        if starts.is_empty() || starts.len() > max {
            return Err(ts.refuse(Status::invalid_argument(format!(
                "a scan-many stream has {} scans; 1..={max} are allowed",
                starts.len()
            ))));
        }
        let permit = ts
            .admission
            .stream(&caller, starts.len())
            .await
            .map_err(|s| ts.refuse(s))?;
        let tablets = ts.tablets_by_id(&starts);
        let mut slots = Vec::with_capacity(starts.len());
        let mut windows = Vec::with_capacity(starts.len());
        for (i, (st, tablet)) in starts.iter().zip(tablets).enumerate() {
            let (slot, window) = tablet
                .and_then(|t| {
                    let r = ts.open_slot(st, &t)?;
                    ts.confirm_read(&t)?;
                    Ok(r)
                })
                .map_err(|e| Status::new(e.code(), format!("scan {i}: {}", e.message())))?;
            slots.push(slot);
            windows.push(window);
        }
        let credits = ts.credits(&starts, &windows, &caller);
        crate::scan::read_scan_many_acks(inbound, credits.clone());
        let rx = ts.spawn_producer(slots, credits, permit, &caller);
        let out =
            tokio_stream::StreamExt::map(rx, |m| m.map(|batches| v1::ScanManyBatch { batches }));
        Ok(Response::new(Box::pin(out)))
    }

    type QueryStream = BoxStream<v1::QueryResponse>;

    async fn query(
        &self,
        req: Request<v1::QueryRequest>,
    ) -> Result<Response<Self::QueryStream>, Status> {
        let caller = authorize(&req, Need::Read, "Query")?;
        let ts = self.0.clone();
        // A Query takes one of the server's Query places and one of its
        // caller's, and sets its bytes aside in its caller's budget; the
        // streams it opens to servers run as a cluster member, under those
        // servers' byte budgets and within the bytes set aside.
        let window_bytes_max = match caller {
            tablinum_auth::Principal::Token { .. } => ts.cfg.query_bytes_in_flight_max,
            tablinum_auth::Principal::Cluster => 0,
        };
        let (ticket, query_id) = ts
            .admission
            .query(
                &caller,
                usize::try_from(window_bytes_max).unwrap_or(usize::MAX),
            )
            .map_err(|s| ts.refuse(s))?;
        let r = req.into_inner();
        ts.metrics.queries.fetch_add(1, Ordering::Relaxed);
        let mode = match r.stream_limit.and_then(|s| s.mode) {
            None | Some(v1::stream_limit::Mode::Adaptive(_)) => {
                tablinum_stream::window::WindowMode::Adaptive
            }
            Some(v1::stream_limit::Mode::Fixed(n)) => tablinum_stream::window::WindowMode::Fixed(n),
        };
        let q = tablinum_client::Query {
            table: r.table,
            start: r.start,
            end: r.end,
            index: (!r.index.is_empty()).then_some(r.index),
            skip: r.skip,
            limit: r.limit,
            stream_limit: mode,
            batch_rows: 0,
            keys_only: r.keys_only,
            consistency: tablinum_client::Consistency::Immediate,
            filter: r.filter.map(|f| tablinum_client::Filter {
                grep: f.grep,
                key_prefix: f.key_prefix,
                count_only: f.count_only,
            }),
            window_bytes_max,
        };
        // One chunk queued for the transport at most: a caller that stops
        // reading stops the merge within one chunk, and one that reads
        // nothing for the ack-wait timeout ends the query.
        let (tx, rx) = crate::admit::outbox::<v1::QueryResponse>(1, Some(ticket), None);
        ts.admission
            .track(query_id, &caller, None, tx.killer(), Vec::new());
        tokio::spawn(async move {
            let mut chunk: Vec<v1::Row> = Vec::new();
            let mut chunk_bytes = 0usize;
            let chunk_bytes_max = usize::try_from(ts.cfg.batch_bytes).unwrap_or(usize::MAX);
            let handle = tokio::runtime::Handle::current();
            let send_wait = Duration::from_millis(ts.cfg.ack_wait_timeout_ms);
            let mut gone = false;
            let mut out = |row: tablinum_client::QueryRow| {
                let r = v1::Row {
                    key: row.key,
                    value: row.value,
                    term: row.term.unwrap_or_default(),
                };
                chunk_bytes += crate::scan::row_bytes(&r);
                chunk.push(r);
                if chunk.len() >= QUERY_CHUNK_ROWS || chunk_bytes >= chunk_bytes_max {
                    chunk_bytes = 0;
                    let rows = std::mem::take(&mut chunk);
                    // The merge runs outside the async workers; a caller
                    // that reads nothing for the ack-wait timeout ends the
                    // query (its streams, buffers and thread go with it).
                    let sent = handle
                        .block_on(tx.send(Ok(v1::QueryResponse { rows, stats: None }), send_wait));
                    if sent.is_err() {
                        // Stalled (the outbox says so) or gone: stop scanning.
                        gone = true;
                        return std::ops::ControlFlow::Break(());
                    }
                }
                std::ops::ControlFlow::Continue(())
            };
            let res = ts.query_client.query_until(&q, &mut out).await;
            if gone {
                return;
            }
            let rows = std::mem::take(&mut chunk);
            let msg = match res {
                Ok(s) => Ok(v1::QueryResponse {
                    rows,
                    stats: Some(v1::QueryStats {
                        rows_returned: s.rows_returned,
                        rows_skipped: s.rows_skipped,
                        rows_wasted: s.rows_wasted,
                        rows_sent: s.rows_sent,
                        waits: s.waits,
                    }),
                }),
                Err(e) => Err(crate::status_from_client(e)),
            };
            if tx.send(msg, send_wait).await.is_ok() {
                tx.finish(send_wait).await;
            }
        });
        Ok(Response::new(Box::pin(rx)))
    }

    async fn flush(
        &self,
        req: Request<v1::FlushRequest>,
    ) -> Result<Response<v1::FlushResponse>, Status> {
        let ts = &self.0;
        authorize(&req, Need::Write, "Flush")?;
        let table = req.into_inner().table;
        tablinum_proto::check_table_name(&table)
            .map_err(|m| ts.refuse(Status::invalid_argument(m)))?;
        let tablets: Vec<Arc<Tablet>> = ts.tablets.read().get(&table).cloned().unwrap_or_default();
        for t in &tablets {
            blocking(|| t.store.flush()).map_err(status_from_engine)?;
        }
        Ok(Response::new(v1::FlushResponse {
            tablets: u32::try_from(tablets.len()).unwrap_or(u32::MAX),
        }))
    }
    async fn append(
        &self,
        req: Request<v1::AppendRequest>,
    ) -> Result<Response<v1::AppendResponse>, Status> {
        let ts = &self.0;
        authorize(&req, Need::Write, "Append")?;
        let deadline = write_deadline(&req)?;
        let req = req.into_inner();
        ts.metrics.writes.fetch_add(1, Ordering::Relaxed);
        check_append(&req).map_err(|s| ts.refuse(s))?;
        let p = req.partition;
        let tablet = ts.tablet_for(&req.table, req.table_id, &topic::record_key(p, 0))?;
        if !tablet.contains(&topic::head_key(p)) {
            return Err(ts.refuse(Status::invalid_argument(format!(
                "table {} is not laid out as a topic: partition {p} spans tablets",
                req.table
            ))));
        }
        // One append per partition at a time, from reading the head to the
        // batch being applied: offsets are assigned densely and in order.
        let mut head = tablet.topic_head.lock().await;
        let current = match *head {
            Some(h) => h,
            None => {
                let v = blocking(|| tablet.store.get(&topic::head_key(p)))
                    .map_err(|e| ts.fenced(&tablet, e))?;
                topic::Head::decode(v.as_deref()).map_err(Status::data_loss)?
            }
        };
        if !req.writer.is_empty() {
            let stored = blocking(|| {
                tablet
                    .store
                    .get(&topic::writer_key(p, req.writer.as_bytes()))
            })
            .map_err(|e| ts.fenced(&tablet, e))?
            .unwrap_or_default();
            if stored != req.writer_expect {
                *head = Some(current);
                return Err(ts.refuse(Status::aborted(format!(
                    "writer position moved: writer {:?} of partition {p} is at {}, the append expected {}; nothing was applied",
                    req.writer,
                    hex(&stored),
                    hex(&req.writer_expect)
                ))));
            }
        }
        let n = req.records.len() as u64;
        let next = topic::Head {
            next: current.next + n,
            start: current.start,
        };
        let mut batch = Batch::new();
        for (i, r) in req.records.iter().enumerate() {
            batch.put_shared(&topic::record_key(p, current.next + i as u64), r.clone());
        }
        batch.put(&topic::head_key(p), &next.encode());
        if n > 0 {
            let mark = topic::Mark {
                offset: current.next,
                unix_ms: tablinum_proto::unix_ms(),
                bytes: req.records.iter().map(|r| r.len() as u64).sum(),
            };
            batch.put(&topic::mark_key(p, current.next), &mark.encode_value());
        }
        if !req.writer.is_empty() {
            batch.put(
                &topic::writer_key(p, req.writer.as_bytes()),
                &req.writer_position,
            );
        }
        if let Some(d) = deadline {
            if tablinum_proto::unix_ms() > d {
                *head = Some(current);
                return Err(ts.refuse(Status::deadline_exceeded(format!(
                    "the caller's deadline passed {} ms before the append was read; it was not applied",
                    tablinum_proto::unix_ms() - d
                ))));
            }
        }
        let unacked = match blocking(|| tablet.store.write_unacked(&batch)) {
            Ok(w) => {
                *head = Some(next);
                w
            }
            Err(e) => {
                // Applied or not is unknown here: read the head again next time.
                *head = None;
                return Err(ts.fenced(&tablet, e));
            }
        };
        // The offsets are taken: the next append to this partition may go
        // on while this one waits for its fsync, and share it (readers wait
        // for durability before they see these records). A failed fsync
        // poisons the store, which fails every later append, and the tablet
        // is reopened from durable state with its head read again.
        drop(head);
        blocking(|| tablet.store.acknowledge(unacked)).map_err(|e| ts.fenced(&tablet, e))?;
        ts.metrics.rows_written.fetch_add(n, Ordering::Relaxed);
        tablet.rows_written.fetch_add(n, Ordering::Relaxed);
        Ok(Response::new(v1::AppendResponse {
            first_offset: current.next,
            next_offset: next.next,
        }))
    }
}

/// Checks an append's shape before any tablet is looked up.
fn check_append(req: &v1::AppendRequest) -> Result<(), Status> {
    if topic::topic_of(&req.table).is_none() {
        return Err(Status::invalid_argument(format!(
            "Append needs a topic's table ({}NAME); {:?} is not one",
            topic::TABLE_PREFIX,
            req.table
        )));
    }
    if req.records.is_empty() && req.writer.is_empty() {
        return Err(Status::invalid_argument(
            "an append needs at least one record (or a writer whose position it moves)",
        ));
    }
    if req.records.len() > topic::APPEND_RECORDS_MAX {
        return Err(Status::invalid_argument(format!(
            "{} records in one append; the limit is {}",
            req.records.len(),
            topic::APPEND_RECORDS_MAX
        )));
    }
    let value_max = tablinum_engine::options::VALUE_BYTES_MAX;
    if let Some((i, r)) = req
        .records
        .iter()
        .enumerate()
        .find(|(_, r)| r.len() > value_max)
    {
        return Err(Status::invalid_argument(format!(
            "record {i} is {} bytes; the limit is {value_max} bytes",
            r.len()
        )));
    }
    if req.writer.is_empty() {
        if !req.writer_expect.is_empty() || !req.writer_position.is_empty() {
            return Err(Status::invalid_argument(
                "writer_expect and writer_position need a writer",
            ));
        }
    } else {
        topic::check_name("writer", &req.writer).map_err(Status::invalid_argument)?;
        for (what, v) in [
            ("writer_expect", &req.writer_expect),
            ("writer_position", &req.writer_position),
        ] {
            if v.len() > topic::POSITION_BYTES_MAX {
                return Err(Status::invalid_argument(format!(
                    "{what} is {} bytes; the limit is {}",
                    v.len(),
                    topic::POSITION_BYTES_MAX
                )));
            }
        }
        if req.writer_position.is_empty() {
            return Err(Status::invalid_argument("a writer needs a writer_position"));
        }
    }
    Ok(())
}

fn hex(b: &[u8]) -> String {
    if b.is_empty() {
        return "none".into();
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}
