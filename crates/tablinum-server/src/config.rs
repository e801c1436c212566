//! Configuration of the roles, read from a TOML file (`tablinum manager
//! --config F`, `tablinum tserver --config F`) or built by `tablinum up`.
//! Every limit is named with its unit; unknown keys are errors.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::Error;

/// Default manager gRPC address.
pub const MANAGER_LISTEN_DEFAULT: &str = "127.0.0.1:7400";
/// Default manager HTTP (status, metrics) address.
pub const MANAGER_HTTP_DEFAULT: &str = "127.0.0.1:7401";
/// Default tablet server gRPC address.
pub const TSERVER_LISTEN_DEFAULT: &str = "127.0.0.1:7410";
/// Default tablet server HTTP address.
pub const TSERVER_HTTP_DEFAULT: &str = "127.0.0.1:7411";
/// A tablet server heartbeats this often, ms.
pub const HEARTBEAT_INTERVAL_MS_DEFAULT: u64 = 500;
/// The manager declares a tablet server dead after this long without a
/// heartbeat and reassigns its tablets, ms.
pub const HEARTBEAT_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// Window of a scan stream whose request names none (CouchDB's default), batches.
pub const STREAM_LIMIT_DEFAULT: u32 = tablinum_stream::window::STREAM_LIMIT_DEFAULT_BATCHES;
/// Rows per scan batch when a request names none (the client's default).
pub const BATCH_ROWS_DEFAULT: u32 = tablinum_client::BATCH_ROWS_DEFAULT;
/// Key and value bytes per scan batch, at most (a larger single row travels alone).
pub const BATCH_BYTES_DEFAULT: u64 = 1 << 20;
/// Largest `batch_bytes` a server accepts: a batch is at most this plus one
/// row (a 64 MiB value), which must stay below the gRPC message limit.
pub const BATCH_BYTES_MAX: u64 = 8 << 20;
/// A scan producer that hears nothing from its consumer (no ack, no
/// keepalive) for this long gives up, ms.
pub const ACK_WAIT_TIMEOUT_MS_DEFAULT: u64 = tablinum_stream::channel::ACK_WAIT_TIMEOUT_MS_DEFAULT;
/// Scan streams (Scan or ScanMany) one tablet or scan server runs at once;
/// more are refused at once with RESOURCE_EXHAUSTED naming the limit,
/// unless a stream idle for the ack-wait timeout can be ended for the
/// newcomer (see `admit.rs`).
pub const SCAN_STREAMS_MAX_DEFAULT: usize = 512;
/// Scan streams one caller (one client token) holds at once on one server,
/// so one client cannot take every stream slot from the others; ended
/// streams its transport has not let go of still count. Cluster members
/// (a server running a thin client's Query) are not counted.
pub const SCAN_STREAMS_PER_CALLER_MAX_DEFAULT: usize = 128;
/// Queries (server-side merges, one thread each) one tablet server runs at
/// once. Each holds at most one chunk (`batch_bytes`) for a caller that
/// does not read, plus its merge's windows under the servers' scan budgets.
pub const QUERIES_MAX_DEFAULT: usize = 64;
/// Queries one caller runs at once on one tablet server.
pub const QUERIES_PER_CALLER_MAX_DEFAULT: usize = 8;
/// Tablet scans (ScanMany slots; a Scan is one) one tablet server runs at
/// once: a ScanMany of 4,096 slots counts 4,096.
pub const SCAN_SLOTS_MAX_DEFAULT: usize = 16_384;
/// Tablet scans one caller (one client token) runs at once on one server:
/// one batch scan of `BATCH_RANGES_MAX` ranges fits, and no caller can
/// take every slot (nor read one tablet more than this many times at once
/// with overlapping slots). Cluster members are not counted.
pub const SCAN_SLOTS_PER_CALLER_MAX_DEFAULT: usize = 4_096;
/// Bytes of unacknowledged batches one scan stream may hold, across its
/// slots (a slot holding none may always send one batch).
pub const STREAM_BYTES_IN_FLIGHT_MAX_DEFAULT: u64 = 64 << 20;
/// Bytes of unacknowledged scan batches one tablet server holds at most,
/// across all streams; streams wait for acks beyond it.
pub const SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT: u64 = 512 << 20;
/// Bytes one caller (one client token) may make one server hold at once:
/// its streams' unacknowledged batches (they wait for acks beyond it; a
/// slot holding none may still send one batch) plus what its Queries set
/// aside. A quarter of the server's, so no one token takes it all.
pub const SCAN_BYTES_PER_CALLER_MAX_DEFAULT: u64 = SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT / 4;
/// Bytes one Query's streams may hold in flight altogether (split over the
/// servers it reads), set aside in its caller's budget when it starts:
/// `queries_per_caller_max` Queries fit one caller's budget.
pub const QUERY_BYTES_IN_FLIGHT_MAX_DEFAULT: u64 = 16 << 20;
/// Tablets one tablet server holds at most: placement assigns no more to
/// it, and CreateTable is refused (RESOURCE_EXHAUSTED) when the live
/// servers could not hold every tablet. Each tablet is an engine store
/// with its own files and background threads.
pub const TABLETS_PER_SERVER_MAX_DEFAULT: usize = 1_024;
/// Tablets a tablet server opens (recovers) at once; the rest wait.
pub const TABLET_OPENS_MAX: usize = 8;
/// Tablets a tablet server closes (flushes) at once; the rest wait.
pub const TABLET_CLOSES_MAX: usize = 8;
/// Default of `tablet_stuck_ms`: a tablet whose oldest journal write or
/// sync has been in flight this long is reported stuck (TABLET_STUCK), ms.
pub const TABLET_STUCK_MS: u64 = 5_000;
/// First wait before a poisoned tablet's recovery tries again (the cut of
/// its journal, or its reopen), ms; it doubles up to
/// [`TABLET_RECOVERY_BACKOFF_MS_MAX`].
pub const TABLET_RECOVERY_BACKOFF_MS_FIRST: u64 = 100;
/// Longest wait between two tries of a poisoned tablet's recovery, ms:
/// once the disk answers again, the tablet takes writes within this (plus
/// the reopen's journal replay).
pub const TABLET_RECOVERY_BACKOFF_MS_MAX: u64 = 1_000;
// Defaults that must fit the limits they live under.
const _: () = {
    assert!(
        STREAM_LIMIT_DEFAULT >= 1 && STREAM_LIMIT_DEFAULT <= tablinum_proto::WINDOW_BATCHES_MAX
    );
    assert!(BATCH_BYTES_DEFAULT <= BATCH_BYTES_MAX);
    assert!(SCAN_STREAMS_PER_CALLER_MAX_DEFAULT <= SCAN_STREAMS_MAX_DEFAULT);
    assert!(SCAN_STREAMS_MAX_DEFAULT <= SCAN_SLOTS_MAX_DEFAULT);
    assert!(SCAN_SLOTS_PER_CALLER_MAX_DEFAULT < SCAN_SLOTS_MAX_DEFAULT);
    assert!(STREAM_BYTES_IN_FLIGHT_MAX_DEFAULT <= SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT);
    assert!(SCAN_BYTES_PER_CALLER_MAX_DEFAULT <= SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT);
    assert!(
        QUERY_BYTES_IN_FLIGHT_MAX_DEFAULT * QUERIES_PER_CALLER_MAX_DEFAULT as u64
            <= SCAN_BYTES_PER_CALLER_MAX_DEFAULT
    );
    // A batch (at most BATCH_BYTES_MAX plus one 64 MiB row) fits one
    // message with room for framing.
    assert!(BATCH_BYTES_MAX as usize + (64 << 20) <= crate::scan::MESSAGE_BYTES_BUDGET);
    assert!(HEARTBEAT_INTERVAL_MS_DEFAULT * 3 <= HEARTBEAT_TIMEOUT_MS_DEFAULT);
};

/// Memtable of one tablet: frozen and flushed at this size, MiB.
pub const TABLET_MEMTABLE_MIB_DEFAULT: u64 = 8;
/// A tablet's oldest unflushed write is flushed once this old, ms.
pub const FLUSH_MAX_AGE_MS_DEFAULT: u64 = 5_000;
/// A tablet's journal segment rolls at this size, MiB.
pub const JOURNAL_SEGMENT_MIB_DEFAULT: u64 = 64;
/// Largest journal segment a tablet server accepts, MiB.
pub const JOURNAL_SEGMENT_MIB_MAX: u64 = 4_096;
/// How often each tablet looks for journal segments worth compacting (value
/// GC), s.
pub const JOURNAL_COMPACTION_INTERVAL_S_DEFAULT: u64 = 3_600;
/// Longest journal-compaction interval accepted, s (a week).
pub const JOURNAL_COMPACTION_INTERVAL_S_MAX: u64 = 7 * 86_400;
/// Read rate of one tablet's journal compaction, MiB/s (the engine's
/// default: it leaves the disk to GETs while value GC runs under load).
pub const JOURNAL_COMPACTION_MIB_PER_S_DEFAULT: u64 =
    tablinum_engine::JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT >> 20;
/// Largest journal-compaction read rate accepted, MiB/s.
pub const JOURNAL_COMPACTION_MIB_PER_S_MAX: u64 = 65_536;
/// Dead share of a tablet's sealed journal that makes a compaction due at
/// once, percent (the engine's default).
pub const JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT: u32 =
    tablinum_engine::JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT;
/// Largest garbage share accepted, percent.
pub const JOURNAL_COMPACTION_GARBAGE_PCT_MAX: u32 = 99;
/// Background threads (flushes, compactions) of a server, all tablets.
pub const BACKGROUND_THREADS_DEFAULT: usize = 2;
/// Block cache of a server, all tablets, MiB.
pub const BLOCK_CACHE_MIB_DEFAULT: u64 = 256;
/// Open read handles of a server, all tablets.
pub const OPEN_FILES_MAX_DEFAULT: usize = 4_096;
/// Memtables of a server, all tablets, MiB: above it the largest is
/// flushed; at twice it writes stall.
pub const MEMTABLE_BUDGET_MIB_DEFAULT: u64 = 512;

/// Name of the cluster secret file in the manager's data directory when
/// `cluster_secret_file` is not set.
pub const CLUSTER_SECRET_FILE_NAME: &str = "cluster.secret";
/// Name of the bootstrap admin token file in the manager's data directory
/// when `admin_token_file` is not set.
pub const ADMIN_TOKEN_FILE_NAME: &str = "admin.token";

fn or_in(set: &Path, dir: &Path, name: &str) -> PathBuf {
    if set.as_os_str().is_empty() {
        dir.join(name)
    } else {
        set.to_path_buf()
    }
}

/// A listener's TLS material, read from its PEM files.
#[derive(Clone)]
pub struct ListenerTls {
    /// Certificate chain.
    pub cert_pem: Vec<u8>,
    /// Private key.
    pub key_pem: Vec<u8>,
    /// CA of client certificates that make a caller a cluster member.
    pub client_ca_pem: Option<Vec<u8>>,
}

impl std::fmt::Debug for ListenerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ListenerTls(…)")
    }
}

fn read_pem(what: &str, p: &Path) -> Result<Vec<u8>, Error> {
    std::fs::read(p).map_err(|e| Error::Tls(format!("{what} {}: {e}", p.display())))
}

/// The TLS of a listener from its settings: none when `cert` and `key` are
/// both empty; an error naming the setting when only one is set or a file
/// cannot be read.
pub fn listener_tls(
    role: &str,
    cert: &Path,
    key: &Path,
    client_ca: &Path,
) -> Result<Option<ListenerTls>, Error> {
    let set = |p: &Path| !p.as_os_str().is_empty();
    match (set(cert), set(key)) {
        (false, false) => {
            if set(client_ca) {
                return Err(Error::Config(format!(
                    "[{role}] tls_client_ca needs tls_cert and tls_key"
                )));
            }
            Ok(None)
        }
        (true, false) => Err(Error::Config(format!(
            "[{role}] tls_cert is set but tls_key is not"
        ))),
        (false, true) => Err(Error::Config(format!(
            "[{role}] tls_key is set but tls_cert is not"
        ))),
        (true, true) => Ok(Some(ListenerTls {
            cert_pem: read_pem(&format!("[{role}] tls_cert"), cert)?,
            key_pem: read_pem(&format!("[{role}] tls_key"), key)?,
            client_ca_pem: if set(client_ca) {
                Some(read_pem(&format!("[{role}] tls_client_ca"), client_ca)?)
            } else {
                None
            },
        })),
    }
}

/// The manager's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ManagerConfig {
    /// gRPC listen address (port 0: any free port).
    pub listen: String,
    /// HTTP listen address for `/` and `/metrics`.
    pub http: String,
    /// Directory of the manager's metadata store.
    pub data: PathBuf,
    /// Shared storage root holding every tablet's files.
    pub storage: PathBuf,
    /// Heartbeat timeout, ms.
    pub heartbeat_timeout_ms: u64,
    /// The cluster secret shared with the servers (created, mode 0600, if
    /// missing). Empty: `<data>/cluster.secret`.
    pub cluster_secret_file: PathBuf,
    /// Where the first start writes a bootstrap admin token (mode 0600).
    /// Empty: `<data>/admin.token`.
    pub admin_token_file: PathBuf,
    /// PEM certificate (chain) of this listener; with `tls_key`, both the
    /// gRPC and the HTTP listener speak TLS only. Empty: plaintext.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// PEM CA: a caller presenting a certificate it signed is a cluster
    /// member (mutual TLS, instead of the cluster secret). Callers without
    /// a certificate still use tokens. Empty: no client certificates.
    pub tls_client_ca: PathBuf,
    /// Tablets one tablet server holds at most.
    pub tablets_per_server_max: usize,
}

impl Default for ManagerConfig {
    fn default() -> Self {
        ManagerConfig {
            listen: MANAGER_LISTEN_DEFAULT.into(),
            http: MANAGER_HTTP_DEFAULT.into(),
            data: PathBuf::from("tablinum-data/manager"),
            storage: PathBuf::from("tablinum-data/storage"),
            heartbeat_timeout_ms: HEARTBEAT_TIMEOUT_MS_DEFAULT,
            cluster_secret_file: PathBuf::new(),
            admin_token_file: PathBuf::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_client_ca: PathBuf::new(),
            tablets_per_server_max: TABLETS_PER_SERVER_MAX_DEFAULT,
        }
    }
}

impl ManagerConfig {
    /// The cluster secret file (its default in the data directory).
    pub fn cluster_secret_path(&self) -> PathBuf {
        or_in(
            &self.cluster_secret_file,
            &self.data,
            CLUSTER_SECRET_FILE_NAME,
        )
    }

    /// The bootstrap admin token file (its default in the data directory).
    pub fn admin_token_path(&self) -> PathBuf {
        or_in(&self.admin_token_file, &self.data, ADMIN_TOKEN_FILE_NAME)
    }

    /// The heartbeat timeout.
    pub fn heartbeat_timeout(&self) -> Duration {
        Duration::from_millis(self.heartbeat_timeout_ms)
    }

    /// The read lease granted with each heartbeat answer, ms: two thirds of
    /// the heartbeat timeout. A server counts it from when it *sent* the
    /// heartbeat and the manager reassigns no earlier than a full timeout
    /// after it *received* the last one, so a lease ends at least a third
    /// of the timeout (1 s by default) before any reassignment, which
    /// covers clock-rate drift with a wide margin.
    pub fn lease_ms(&self) -> u64 {
        self.heartbeat_timeout_ms - self.heartbeat_timeout_ms / 3
    }
}

/// Checks a server's default window and rows per batch.
fn check_scan_defaults(stream_limit: u32, batch_rows: u32) -> Result<(), String> {
    if !(1..=tablinum_proto::WINDOW_BATCHES_MAX).contains(&stream_limit) {
        return Err(format!(
            "stream_limit {stream_limit} is out of range 1..={}",
            tablinum_proto::WINDOW_BATCHES_MAX
        ));
    }
    if !(1..=tablinum_proto::BATCH_ROWS_MAX).contains(&batch_rows) {
        return Err(format!(
            "batch_rows {batch_rows} is out of range 1..={}",
            tablinum_proto::BATCH_ROWS_MAX
        ));
    }
    Ok(())
}

/// A tablet server's settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TserverConfig {
    /// gRPC listen address (port 0: any free port).
    pub listen: String,
    /// HTTP listen address for `/` and `/metrics`.
    pub http: String,
    /// The manager's gRPC address.
    pub manager: String,
    /// Shared storage root holding every tablet's files.
    pub storage: PathBuf,
    /// Heartbeat interval, ms.
    pub heartbeat_interval_ms: u64,
    /// Default window of a scan stream, batches (1..=1024).
    pub stream_limit: u32,
    /// Default rows per scan batch (1..=10000).
    pub batch_rows: u32,
    /// Bytes per scan batch, at most.
    pub batch_bytes: u64,
    /// Ack-wait timeout of a scan producer, ms.
    pub ack_wait_timeout_ms: u64,
    /// Scan streams running at once, at most.
    pub scan_streams_max: usize,
    /// Scan streams of one caller (token) running at once, at most.
    pub scan_streams_per_caller_max: usize,
    /// Tablet scans (ScanMany slots) running at once, at most.
    pub scan_slots_max: usize,
    /// Tablet scans of one caller (token) running at once, at most.
    pub scan_slots_per_caller_max: usize,
    /// Queries (server-side merges) running at once, at most.
    pub queries_max: usize,
    /// Queries of one caller (token) running at once, at most.
    pub queries_per_caller_max: usize,
    /// Bytes of unacknowledged batches per scan stream, at most.
    pub stream_bytes_in_flight_max: u64,
    /// Bytes of unacknowledged scan batches on this server, at most.
    pub scan_bytes_in_flight_max: u64,
    /// Bytes one caller's streams and Queries hold on this server, at most.
    pub scan_bytes_per_caller_max: u64,
    /// Bytes one Query's streams hold in flight altogether, at most.
    pub query_bytes_in_flight_max: u64,
    /// Memtable of each tablet: frozen and flushed at this size, MiB.
    pub tablet_memtable_mib: u64,
    /// A tablet whose oldest unflushed write is older than this is flushed,
    /// ms: what bounds how stale scan servers' eventual reads can be.
    pub flush_max_age_ms: u64,
    /// A tablet whose oldest journal write or sync has been in flight this
    /// long is reported stuck (a slow or hung disk), ms.
    pub tablet_stuck_ms: u64,
    /// Each tablet's journal segments roll at this size, MiB
    /// (1..=`JOURNAL_SEGMENT_MIB_MAX`); whole segments are what journal
    /// compaction (value GC) reclaims.
    pub journal_segment_mib: u64,
    /// How often each tablet looks for journal segments worth compacting, s
    /// (1..=`JOURNAL_COMPACTION_INTERVAL_S_MAX`).
    pub journal_compaction_interval_s: u64,
    /// Each tablet's journal compaction reads at most this fast, MiB/s
    /// (0..=`JOURNAL_COMPACTION_MIB_PER_S_MAX`; 0: as fast as the disk goes).
    pub journal_compaction_mib_per_s: u64,
    /// A tablet's journal compaction is due at once, however recent the
    /// last, while this share of its sealed journal is dead, percent
    /// (0..=`JOURNAL_COMPACTION_GARBAGE_PCT_MAX`; 0: the interval only).
    pub journal_compaction_garbage_pct: u32,
    /// Background threads running every tablet's flushes and compactions.
    pub background_threads: usize,
    /// Block cache shared by every tablet, MiB.
    pub block_cache_mib: u64,
    /// Open read handles shared by every tablet.
    pub open_files_max: usize,
    /// Memtables of every tablet together, MiB: above it the largest is
    /// frozen and flushed; at twice it writes stall.
    pub memtable_budget_mib: u64,
    /// The manager's cluster secret (a copy of its `cluster_secret_file`).
    /// Required unless the manager runs in the same process.
    pub cluster_secret_file: PathBuf,
    /// PEM certificate of this server's listeners (TLS; see the manager's).
    /// With `tls_ca` it is also presented to the manager and to other
    /// servers (mutual TLS).
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// PEM CA whose certificates make callers cluster members (mutual TLS).
    pub tls_client_ca: PathBuf,
    /// PEM CA the manager's and other servers' certificates chain to: set
    /// when the cluster speaks TLS.
    pub tls_ca: PathBuf,
}

impl Default for TserverConfig {
    fn default() -> Self {
        TserverConfig {
            listen: TSERVER_LISTEN_DEFAULT.into(),
            http: TSERVER_HTTP_DEFAULT.into(),
            manager: MANAGER_LISTEN_DEFAULT.into(),
            storage: PathBuf::from("tablinum-data/storage"),
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS_DEFAULT,
            stream_limit: STREAM_LIMIT_DEFAULT,
            batch_rows: BATCH_ROWS_DEFAULT,
            batch_bytes: BATCH_BYTES_DEFAULT,
            ack_wait_timeout_ms: ACK_WAIT_TIMEOUT_MS_DEFAULT,
            scan_streams_max: SCAN_STREAMS_MAX_DEFAULT,
            scan_streams_per_caller_max: SCAN_STREAMS_PER_CALLER_MAX_DEFAULT,
            scan_slots_max: SCAN_SLOTS_MAX_DEFAULT,
            scan_slots_per_caller_max: SCAN_SLOTS_PER_CALLER_MAX_DEFAULT,
            queries_max: QUERIES_MAX_DEFAULT,
            queries_per_caller_max: QUERIES_PER_CALLER_MAX_DEFAULT,
            stream_bytes_in_flight_max: STREAM_BYTES_IN_FLIGHT_MAX_DEFAULT,
            scan_bytes_in_flight_max: SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT,
            scan_bytes_per_caller_max: SCAN_BYTES_PER_CALLER_MAX_DEFAULT,
            query_bytes_in_flight_max: QUERY_BYTES_IN_FLIGHT_MAX_DEFAULT,
            tablet_memtable_mib: TABLET_MEMTABLE_MIB_DEFAULT,
            flush_max_age_ms: FLUSH_MAX_AGE_MS_DEFAULT,
            tablet_stuck_ms: TABLET_STUCK_MS,
            journal_segment_mib: JOURNAL_SEGMENT_MIB_DEFAULT,
            journal_compaction_interval_s: JOURNAL_COMPACTION_INTERVAL_S_DEFAULT,
            journal_compaction_mib_per_s: JOURNAL_COMPACTION_MIB_PER_S_DEFAULT,
            journal_compaction_garbage_pct: JOURNAL_COMPACTION_GARBAGE_PCT_DEFAULT,
            background_threads: BACKGROUND_THREADS_DEFAULT,
            block_cache_mib: BLOCK_CACHE_MIB_DEFAULT,
            open_files_max: OPEN_FILES_MAX_DEFAULT,
            memtable_budget_mib: MEMTABLE_BUDGET_MIB_DEFAULT,
            cluster_secret_file: PathBuf::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_client_ca: PathBuf::new(),
            tls_ca: PathBuf::new(),
        }
    }
}

impl TserverConfig {
    /// The stream and Query limits of this server.
    pub fn admission_limits(&self) -> crate::admit::Limits {
        crate::admit::Limits {
            streams_max: self.scan_streams_max,
            streams_per_caller_max: self.scan_streams_per_caller_max,
            slots_max: self.scan_slots_max,
            slots_per_caller_max: self.scan_slots_per_caller_max,
            queries_max: self.queries_max,
            queries_per_caller_max: self.queries_per_caller_max,
            bytes_per_caller_max: usize::try_from(self.scan_bytes_per_caller_max)
                .unwrap_or(usize::MAX),
            idle_after: std::time::Duration::from_millis(self.ack_wait_timeout_ms),
        }
    }

    /// The engine resources every tablet of this server shares.
    pub fn engine_shared(&self) -> tablinum_engine::SharedOptions {
        tablinum_engine::SharedOptions {
            worker_threads: self.background_threads,
            block_cache_bytes: self.block_cache_mib << 20,
            open_files_max: self.open_files_max,
            memtable_budget_bytes: self.memtable_budget_mib << 20,
        }
    }

    /// The TLS this server's outgoing calls use (to the manager and other
    /// servers): none unless `tls_ca` is set; with `tls_cert` and `tls_key`
    /// it also presents its certificate.
    pub fn client_tls(&self) -> Result<Option<tablinum_client::ClientTls>, Error> {
        if self.tls_ca.as_os_str().is_empty() {
            return Ok(None);
        }
        let id = (!self.tls_cert.as_os_str().is_empty() && !self.tls_key.as_os_str().is_empty())
            .then_some((self.tls_cert.as_path(), self.tls_key.as_path()));
        tablinum_client::ClientTls::from_files(&self.tls_ca, id)
            .map(Some)
            .map_err(|e| Error::Tls(format!("[tserver] tls_ca: {e}")))
    }

    /// Checks the ranges; the error names the bad setting.
    pub fn validate(&self) -> Result<(), Error> {
        self.check().map_err(Error::Config)
    }

    fn check(&self) -> Result<(), String> {
        check_scan_defaults(self.stream_limit, self.batch_rows)?;
        if self.batch_bytes > BATCH_BYTES_MAX {
            return Err(format!(
                "batch_bytes {} is over the limit {BATCH_BYTES_MAX}",
                self.batch_bytes
            ));
        }
        for (name, v) in [
            ("scan_streams_max", self.scan_streams_max as u64),
            (
                "scan_streams_per_caller_max",
                self.scan_streams_per_caller_max as u64,
            ),
            ("scan_slots_max", self.scan_slots_max as u64),
            (
                "scan_slots_per_caller_max",
                self.scan_slots_per_caller_max as u64,
            ),
            ("queries_max", self.queries_max as u64),
            ("queries_per_caller_max", self.queries_per_caller_max as u64),
            (
                "stream_bytes_in_flight_max",
                self.stream_bytes_in_flight_max,
            ),
            ("scan_bytes_in_flight_max", self.scan_bytes_in_flight_max),
            ("scan_bytes_per_caller_max", self.scan_bytes_per_caller_max),
            ("query_bytes_in_flight_max", self.query_bytes_in_flight_max),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        // Tokio's semaphores hold at most usize::MAX >> 3 permits.
        if self.scan_slots_max > tokio::sync::Semaphore::MAX_PERMITS
            || self.scan_streams_max > tokio::sync::Semaphore::MAX_PERMITS
        {
            return Err(format!(
                "scan_slots_max and scan_streams_max must be at most {}",
                tokio::sync::Semaphore::MAX_PERMITS
            ));
        }
        self.engine_shared()
            .validate()
            .map_err(|e| e.to_string().replace("shared.", ""))?;
        if self.flush_max_age_ms == 0 {
            return Err("flush_max_age_ms must be at least 1".into());
        }
        if self.tablet_stuck_ms == 0 {
            return Err("tablet_stuck_ms must be at least 1".into());
        }
        if !(1..=JOURNAL_SEGMENT_MIB_MAX).contains(&self.journal_segment_mib) {
            return Err(format!(
                "journal_segment_mib = {} is outside 1..={JOURNAL_SEGMENT_MIB_MAX}",
                self.journal_segment_mib
            ));
        }
        if !(1..=JOURNAL_COMPACTION_INTERVAL_S_MAX).contains(&self.journal_compaction_interval_s) {
            return Err(format!(
                "journal_compaction_interval_s = {} is outside 1..={JOURNAL_COMPACTION_INTERVAL_S_MAX}",
                self.journal_compaction_interval_s
            ));
        }
        if self.journal_compaction_mib_per_s > JOURNAL_COMPACTION_MIB_PER_S_MAX {
            return Err(format!(
                "journal_compaction_mib_per_s = {} is outside 0..={JOURNAL_COMPACTION_MIB_PER_S_MAX}",
                self.journal_compaction_mib_per_s
            ));
        }
        if self.journal_compaction_garbage_pct > JOURNAL_COMPACTION_GARBAGE_PCT_MAX {
            return Err(format!(
                "journal_compaction_garbage_pct = {} is outside 0..={JOURNAL_COMPACTION_GARBAGE_PCT_MAX}",
                self.journal_compaction_garbage_pct
            ));
        }
        if self.batch_bytes == 0 || self.heartbeat_interval_ms == 0 || self.ack_wait_timeout_ms == 0
        {
            return Err(
                "batch_bytes, heartbeat_interval_ms and ack_wait_timeout_ms must be > 0".into(),
            );
        }
        Ok(())
    }
}

/// Scan server gRPC listen address.
pub const SSERVER_LISTEN_DEFAULT: &str = "127.0.0.1:7420";
/// Scan server HTTP listen address.
pub const SSERVER_HTTP_DEFAULT: &str = "127.0.0.1:7421";
/// The scan-server group of a server that names none.
pub const SSERVER_GROUP_DEFAULT: &str = "default";
/// Batches a scan server reads at once (its scan threads).
pub const SCAN_THREADS_DEFAULT: usize = 8;
/// Most scan threads of a scan server.
pub const SCAN_THREADS_MAX: usize = 1_024;
/// Batches waiting for a scan thread, at most; more are refused at once.
pub const SCAN_QUEUE_MAX_DEFAULT: usize = 4_096;
/// A scan server re-reads a tablet's published file set once its copy is
/// this old (in the background from 75 % of it), ms.
pub const METADATA_TTL_MS_DEFAULT: u64 = 2_000;
/// Lease of a scan server's file reservations, renewed while in use, ms.
pub const RESERVATION_LEASE_MS_DEFAULT: u64 = 60_000;

/// A scan server's settings (`[sserver]`): stateless, it serves eventual
/// reads of any tablet from the files its tablet server published.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SserverConfig {
    /// gRPC listen address (port 0: any free port).
    pub listen: String,
    /// HTTP listen address for `/` and `/metrics`.
    pub http: String,
    /// The manager's gRPC address.
    pub manager: String,
    /// Shared storage root holding every tablet's files (the tablet
    /// servers' `storage`).
    pub storage: PathBuf,
    /// Its group (clients' dispatcher profiles choose a group):
    /// 1..=64 bytes of `[A-Za-z0-9_.-]`.
    pub group: String,
    /// Batches read at once (1..=1024).
    pub scan_threads: usize,
    /// Batches waiting for a scan thread, at most (more: RESOURCE_EXHAUSTED).
    pub scan_queue_max: usize,
    /// Block cache shared by every tablet it reads, MiB.
    pub block_cache_mib: u64,
    /// Open read handles shared by every tablet it reads.
    pub open_files_max: usize,
    /// Age of a tablet's cached file set before it is read again, ms.
    pub metadata_ttl_ms: u64,
    /// Lease of its file reservations, ms (1..=600,000; renewed while in use).
    pub reservation_lease_ms: u64,
    /// Heartbeat interval, ms.
    pub heartbeat_interval_ms: u64,
    /// Default window of a scan stream, batches (1..=1024).
    pub stream_limit: u32,
    /// Default rows per scan batch (1..=10000).
    pub batch_rows: u32,
    /// Bytes per scan batch, at most.
    pub batch_bytes: u64,
    /// Ack-wait timeout of a scan producer, ms.
    pub ack_wait_timeout_ms: u64,
    /// Scan streams running at once, at most.
    pub scan_streams_max: usize,
    /// Scan streams of one caller (token) at once, at most.
    pub scan_streams_per_caller_max: usize,
    /// Tablet scans (ScanMany slots) running at once, at most.
    pub scan_slots_max: usize,
    /// Tablet scans of one caller (token) running at once, at most.
    pub scan_slots_per_caller_max: usize,
    /// Bytes of unacknowledged batches per scan stream, at most.
    pub stream_bytes_in_flight_max: u64,
    /// Bytes of unacknowledged scan batches on this server, at most.
    pub scan_bytes_in_flight_max: u64,
    /// Bytes of one caller's streams on this server, at most.
    pub scan_bytes_per_caller_max: u64,
    /// A copy of the manager's cluster secret (required).
    pub cluster_secret_file: PathBuf,
    /// TLS as in `[tserver]`.
    pub tls_cert: PathBuf,
    /// PEM private key of `tls_cert`.
    pub tls_key: PathBuf,
    /// PEM CA whose certificates make callers cluster members.
    pub tls_client_ca: PathBuf,
    /// PEM CA the manager's certificate chains to.
    pub tls_ca: PathBuf,
}

impl Default for SserverConfig {
    fn default() -> Self {
        SserverConfig {
            listen: SSERVER_LISTEN_DEFAULT.into(),
            http: SSERVER_HTTP_DEFAULT.into(),
            manager: MANAGER_LISTEN_DEFAULT.into(),
            storage: PathBuf::from("tablinum-data/storage"),
            group: SSERVER_GROUP_DEFAULT.into(),
            scan_threads: SCAN_THREADS_DEFAULT,
            scan_queue_max: SCAN_QUEUE_MAX_DEFAULT,
            block_cache_mib: BLOCK_CACHE_MIB_DEFAULT,
            open_files_max: OPEN_FILES_MAX_DEFAULT,
            metadata_ttl_ms: METADATA_TTL_MS_DEFAULT,
            reservation_lease_ms: RESERVATION_LEASE_MS_DEFAULT,
            heartbeat_interval_ms: HEARTBEAT_INTERVAL_MS_DEFAULT,
            stream_limit: STREAM_LIMIT_DEFAULT,
            batch_rows: BATCH_ROWS_DEFAULT,
            batch_bytes: BATCH_BYTES_DEFAULT,
            ack_wait_timeout_ms: ACK_WAIT_TIMEOUT_MS_DEFAULT,
            scan_streams_max: SCAN_STREAMS_MAX_DEFAULT,
            scan_streams_per_caller_max: SCAN_STREAMS_PER_CALLER_MAX_DEFAULT,
            scan_slots_max: SCAN_SLOTS_MAX_DEFAULT,
            scan_slots_per_caller_max: SCAN_SLOTS_PER_CALLER_MAX_DEFAULT,
            stream_bytes_in_flight_max: STREAM_BYTES_IN_FLIGHT_MAX_DEFAULT,
            scan_bytes_in_flight_max: SCAN_BYTES_IN_FLIGHT_MAX_DEFAULT,
            scan_bytes_per_caller_max: SCAN_BYTES_PER_CALLER_MAX_DEFAULT,
            cluster_secret_file: PathBuf::new(),
            tls_cert: PathBuf::new(),
            tls_key: PathBuf::new(),
            tls_client_ca: PathBuf::new(),
            tls_ca: PathBuf::new(),
        }
    }
}

impl SserverConfig {
    /// The stream limits of this server (it runs no Queries).
    pub fn admission_limits(&self) -> crate::admit::Limits {
        crate::admit::Limits {
            streams_max: self.scan_streams_max,
            streams_per_caller_max: self.scan_streams_per_caller_max,
            slots_max: self.scan_slots_max,
            slots_per_caller_max: self.scan_slots_per_caller_max,
            queries_max: 0,
            queries_per_caller_max: 0,
            bytes_per_caller_max: usize::try_from(self.scan_bytes_per_caller_max)
                .unwrap_or(usize::MAX),
            idle_after: std::time::Duration::from_millis(self.ack_wait_timeout_ms),
        }
    }

    /// Checks every setting, naming the one that is wrong.
    pub fn validate(&self) -> Result<(), Error> {
        self.check().map_err(Error::Config)
    }

    fn check(&self) -> Result<(), String> {
        tablinum_proto::check_group(&self.group)?;
        if !(1..=SCAN_THREADS_MAX).contains(&self.scan_threads) {
            return Err(format!(
                "scan_threads {} is out of range 1..={SCAN_THREADS_MAX}",
                self.scan_threads
            ));
        }
        check_scan_defaults(self.stream_limit, self.batch_rows)?;
        if self.batch_bytes == 0 || self.batch_bytes > BATCH_BYTES_MAX {
            return Err(format!(
                "batch_bytes {} is out of range 1..={BATCH_BYTES_MAX}",
                self.batch_bytes
            ));
        }
        let lease_max = tablinum_engine::store::reserve::RESERVATION_LEASE_MS_MAX;
        if !(1_000..=lease_max).contains(&self.reservation_lease_ms) {
            return Err(format!(
                "reservation_lease_ms {} is out of range 1000..={lease_max}",
                self.reservation_lease_ms
            ));
        }
        if self.metadata_ttl_ms == 0 || self.metadata_ttl_ms > self.reservation_lease_ms {
            return Err(format!(
                "metadata_ttl_ms {} must be in 1..=reservation_lease_ms ({})",
                self.metadata_ttl_ms, self.reservation_lease_ms
            ));
        }
        for (name, v) in [
            ("scan_queue_max", self.scan_queue_max as u64),
            ("scan_streams_max", self.scan_streams_max as u64),
            (
                "scan_streams_per_caller_max",
                self.scan_streams_per_caller_max as u64,
            ),
            ("scan_slots_max", self.scan_slots_max as u64),
            (
                "scan_slots_per_caller_max",
                self.scan_slots_per_caller_max as u64,
            ),
            ("heartbeat_interval_ms", self.heartbeat_interval_ms),
            ("ack_wait_timeout_ms", self.ack_wait_timeout_ms),
            (
                "stream_bytes_in_flight_max",
                self.stream_bytes_in_flight_max,
            ),
            ("scan_bytes_in_flight_max", self.scan_bytes_in_flight_max),
            ("scan_bytes_per_caller_max", self.scan_bytes_per_caller_max),
        ] {
            if v == 0 {
                return Err(format!("{name} must be at least 1"));
            }
        }
        self.engine_shared()
            .validate()
            .map_err(|e| e.to_string().replace("shared.", ""))?;
        if self.cluster_secret_file.as_os_str().is_empty() {
            return Err(
                "cluster_secret_file is not set: name a copy of the manager's cluster secret"
                    .into(),
            );
        }
        if !self.storage.is_dir() {
            return Err(format!(
                "storage {} is not a directory: point it at the tablet servers' storage root",
                self.storage.display()
            ));
        }
        Ok(())
    }

    /// The engine resources of every tablet view this server opens.
    pub fn engine_shared(&self) -> tablinum_engine::SharedOptions {
        tablinum_engine::SharedOptions {
            worker_threads: 2,
            block_cache_bytes: self.block_cache_mib << 20,
            open_files_max: self.open_files_max,
            memtable_budget_bytes: 0,
        }
    }

    /// The TLS of calls to the manager (see `TserverConfig::client_tls`).
    pub fn client_tls(&self) -> Result<Option<tablinum_client::ClientTls>, Error> {
        TserverConfig {
            tls_ca: self.tls_ca.clone(),
            tls_cert: self.tls_cert.clone(),
            tls_key: self.tls_key.clone(),
            ..TserverConfig::default()
        }
        .client_tls()
    }
}

/// A config file holding either role (or both, for `tablinum up`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// `[manager]`.
    pub manager: Option<ManagerConfig>,
    /// `[tserver]`.
    pub tserver: Option<TserverConfig>,
    /// `[sserver]`.
    pub sserver: Option<SserverConfig>,
}

impl ConfigFile {
    /// Reads and parses `path`; the error names the file and the problem.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Io(format!("cannot read config {}: {e}", path.display())))?;
        let cfg: ConfigFile = toml::from_str(&text)
            .map_err(|e| Error::Config(format!("config {}: {e}", path.display())))?;
        if let Some(t) = &cfg.tserver {
            t.check()
                .map_err(|e| Error::Config(format!("config {}: [tserver] {e}", path.display())))?;
        }
        if let Some(s) = &cfg.sserver {
            s.check()
                .map_err(|e| Error::Config(format!("config {}: [sserver] {e}", path.display())))?;
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_rejects_unknown_keys() {
        let c: ConfigFile = toml::from_str(
            "[tserver]\nlisten = \"127.0.0.1:0\"\nstream_limit = 10\n[manager]\nheartbeat_timeout_ms = 900\n",
        )
        .unwrap();
        assert_eq!(c.tserver.unwrap().stream_limit, 10);
        assert_eq!(c.manager.unwrap().heartbeat_timeout_ms, 900);
        assert!(toml::from_str::<ConfigFile>("[tserver]\nstream_limt = 1\n").is_err());
        let bad = TserverConfig {
            stream_limit: 0,
            ..TserverConfig::default()
        };
        assert!(matches!(bad.validate(), Err(Error::Config(m)) if m.contains("stream_limit 0")));
    }

    #[test]
    fn journal_compaction_rate_is_read_and_checked() {
        let c: ConfigFile = toml::from_str(
            "[tserver]
journal_compaction_mib_per_s = 0
journal_compaction_garbage_pct = 0
",
        )
        .unwrap();
        let t = c.tserver.unwrap();
        assert_eq!(t.journal_compaction_mib_per_s, 0);
        assert_eq!(t.journal_compaction_garbage_pct, 0);
        assert!(t.validate().is_ok());
        assert_eq!(
            TserverConfig::default().journal_compaction_mib_per_s << 20,
            tablinum_engine::JOURNAL_COMPACTION_BYTES_PER_S_DEFAULT
        );
        let bad = TserverConfig {
            journal_compaction_mib_per_s: JOURNAL_COMPACTION_MIB_PER_S_MAX + 1,
            ..TserverConfig::default()
        };
        assert!(
            matches!(bad.validate(), Err(Error::Config(m)) if m.contains("journal_compaction_mib_per_s"))
        );
        let bad = TserverConfig {
            journal_compaction_garbage_pct: JOURNAL_COMPACTION_GARBAGE_PCT_MAX + 1,
            ..TserverConfig::default()
        };
        assert!(
            matches!(bad.validate(), Err(Error::Config(m)) if m.contains("journal_compaction_garbage_pct = 100"))
        );
    }
}
