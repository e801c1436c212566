//! tablinum's Rust client.
//!
//! Owns the client side of the cluster protocol: finding tablets through the
//! manager, caching their locations and refreshing them when a server
//! answers "not serving", routing writes and reads to the tablet that owns a
//! key, retrying retryable failures with exponential backoff and full
//! jitter, coordinating table-wide queries (one flow-controlled stream
//! per tablet merged in key order, see [`coordinator`]), and batch scans of
//! many ranges (`batch`: pieces binned per server, retried per tablet).
//!
//! [`AsyncClient`] is the tokio API; [`Client`] wraps it with its own
//! runtime for synchronous callers (the CLI, the benchmark harness, tests).
//! Never retries an error that says the request itself was wrong.

mod batch;
pub mod coordinator;
mod error;
mod eventual;
pub mod flow;
mod point;
pub mod sortkey;
pub mod topic;
mod types;

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::RngExt;
use tablinum_proto::v1::{
    self, manager_client::ManagerClient, tablet_server_client::TabletServerClient,
};
use tablinum_stream::merge::{merge, MergeQuery};
use tablinum_stream::window::{initial_window, WindowMode};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

pub use batch::{
    BatchResult, BatchScan, BatchStats, BinOutcome, BinStats, KeyRange, PieceStats, ServedBy,
    TabletStats, BATCH_PIECES_MAX, BATCH_RANGES_MAX,
};
pub use error::{is_busy, Error, Result};
pub use point::ReadStats;
pub use tablinum_auth::{Credential, Role};

/// A connection that adds the caller's credential to every call.
pub type Transport = tablinum_auth::Caller<Channel>;
pub use tablinum_dispatch::{Profile, Profiles};
pub use types::{
    ClusterStatus, Durability, Head, IndexTerm, Mutation, ScanServer, ServerStatus, Table, Tablet,
};

/// The embedded cluster's default gRPC address (`tablinum up`).
pub const CLUSTER_ADDR_DEFAULT: &str = "127.0.0.1:7400";
/// How long a call keeps retrying retryable failures, ms.
pub const RETRY_DEADLINE_MS_DEFAULT: u64 = 30_000;
/// First backoff, ms; doubles per attempt up to [`BACKOFF_MAX_MS_DEFAULT`].
pub const BACKOFF_BASE_MS_DEFAULT: u64 = 10;
/// Largest backoff, ms.
pub const BACKOFF_MAX_MS_DEFAULT: u64 = 1_000;
/// How long connecting to the manager may take, ms.
pub const CONNECT_TIMEOUT_MS_DEFAULT: u64 = 3_000;
/// How often a connection pings its server (HTTP/2 PING), ms.
pub const KEEPALIVE_INTERVAL_MS: u64 = 1_000;
/// A connection whose ping is not answered this long is closed and its
/// calls fail, ms.
pub const KEEPALIVE_TIMEOUT_MS: u64 = 2_000;
/// How long the coordinator waits for a tablet's next batch, ms.
pub const IDLE_TIMEOUT_MS_DEFAULT: u64 = 30_000;
/// Rows per batch when a query names none (fixed windows): the stream
/// crate's default, defined there once.
pub const BATCH_ROWS_DEFAULT: u32 = tablinum_stream::channel::BATCH_ROWS_MAX_DEFAULT as u32;
const _: () =
    assert!(BATCH_ROWS_DEFAULT >= 1 && BATCH_ROWS_DEFAULT <= tablinum_proto::BATCH_ROWS_MAX);
// The server's ack-wait timeout must outlast several keepalives.
const _: () = assert!(
    coordinator::SCAN_KEEPALIVE_MS * 4 <= tablinum_stream::channel::ACK_WAIT_TIMEOUT_MS_DEFAULT
);

/// A key as people read it (the CLI and the status page): `empty` for an
/// empty key, the text itself when it is UTF-8 without control characters,
/// else `0x` and its bytes in hex.
pub fn display_key(b: &[u8], empty: &str) -> String {
    if b.is_empty() {
        return empty.to_string();
    }
    match std::str::from_utf8(b) {
        Ok(s) if !s.chars().any(char::is_control) => s.to_string(),
        _ => format!(
            "0x{}",
            b.iter().map(|x| format!("{x:02x}")).collect::<String>()
        ),
    }
}

/// Client settings.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Retry deadline of one call.
    pub retry_deadline: Duration,
    /// First backoff.
    pub backoff_base: Duration,
    /// Largest backoff.
    pub backoff_max: Duration,
    /// Connect timeout to the manager.
    pub connect_timeout: Duration,
    /// Idle timeout of a tablet stream in a query.
    pub idle_timeout: Duration,
    /// What every call presents (`authorization: Bearer …`): a client
    /// token, or the cluster credential for servers. None: calls are
    /// refused by any cluster.
    pub credential: Option<Credential>,
    /// TLS to every server (none: plaintext HTTP/2).
    pub tls: Option<ClientTls>,
    /// Dispatcher profiles of eventual reads (none: the built-in ones).
    pub dispatcher: Option<Arc<Profiles>>,
}

/// How a client speaks TLS: the CA that signed the servers' certificates
/// and, for mutual TLS, the client's own certificate and key (PEM).
#[derive(Clone)]
pub struct ClientTls {
    /// PEM of the CA certificate(s) servers must chain to.
    pub ca_pem: Vec<u8>,
    /// PEM certificate and key presented to servers (mutual TLS).
    pub identity_pem: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("ca_pem_bytes", &self.ca_pem.len())
            .field("identity", &self.identity_pem.is_some())
            .finish()
    }
}

impl ClientTls {
    /// Reads the CA file (and, for mutual TLS, certificate and key files).
    pub fn from_files(
        ca: &std::path::Path,
        identity: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<ClientTls> {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| Error::Connect(format!("cannot read {}: {e}", p.display())))
        };
        Ok(ClientTls {
            ca_pem: read(ca)?,
            identity_pem: match identity {
                Some((c, k)) => Some((read(c)?, read(k)?)),
                None => None,
            },
        })
    }
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            retry_deadline: Duration::from_millis(RETRY_DEADLINE_MS_DEFAULT),
            backoff_base: Duration::from_millis(BACKOFF_BASE_MS_DEFAULT),
            backoff_max: Duration::from_millis(BACKOFF_MAX_MS_DEFAULT),
            connect_timeout: Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT),
            idle_timeout: Duration::from_millis(IDLE_TIMEOUT_MS_DEFAULT),
            credential: None,
            tls: None,
            dispatcher: None,
        }
    }
}

/// A client token as the cluster lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenInfo {
    /// Its id (public).
    pub id: String,
    /// What it allows.
    pub role: Role,
    /// The label it was created with.
    pub name: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: u64,
}

impl TokenInfo {
    fn from_wire(t: &v1::TokenInfo) -> Option<TokenInfo> {
        Some(TokenInfo {
            id: t.id.clone(),
            role: Role::from_i32(t.role)?,
            name: t.name.clone(),
            created_ms: t.created_ms,
        })
    }
}

impl ClientConfig {
    /// The defaults, presenting `credential` on every call.
    pub fn with_credential(credential: Option<Credential>) -> Self {
        ClientConfig {
            credential,
            ..ClientConfig::default()
        }
    }
}

/// How a new table is split.
#[derive(Debug, Clone)]
pub enum Split {
    /// `q` tablets with split points spread evenly over the first two key
    /// bytes.
    Even(u32),
    /// Explicit split points, strictly increasing.
    Points(Vec<Vec<u8>>),
}

/// A table's tablets in key order.
#[derive(Debug, Clone)]
pub struct Locations {
    /// The table.
    pub table: Table,
    /// Its tablets, in key order.
    pub tablets: Vec<Tablet>,
}

impl Locations {
    /// Index of the tablet holding `key`.
    pub fn tablet_for(&self, key: &[u8]) -> usize {
        self.tablets
            .partition_point(|t| t.start.as_slice() <= key)
            .saturating_sub(1)
    }
}

/// A table-wide query.
#[derive(Debug, Clone)]
pub struct Query {
    /// Table name.
    pub table: String,
    /// Inclusive start (object key, or index term when `index` is set).
    pub start: Vec<u8>,
    /// Exclusive end; empty: unbounded.
    pub end: Vec<u8>,
    /// Scan this secondary index instead of the objects.
    pub index: Option<Vec<u8>>,
    /// Rows to skip after merging.
    pub skip: u64,
    /// Rows to return; 0: all.
    pub limit: u64,
    /// Window policy of the tablet streams.
    pub stream_limit: WindowMode,
    /// Rows per batch; 0: the server's default for fixed windows, sized
    /// from the query's need in adaptive mode.
    pub batch_rows: u32,
    /// Return keys (and terms) without values.
    pub keys_only: bool,
    /// Where the tablets are read (default: immediate, on their tablet
    /// servers).
    pub consistency: Consistency,
    /// A filter the servers run where the data is (none: every row).
    pub filter: Option<Filter>,
    /// Bytes of unacknowledged batches all of this query's streams may
    /// hold at once, split evenly over them (0: each stream gets its
    /// server's `stream_bytes_in_flight_max`). Each tablet may still have
    /// one batch in flight beyond it. What a server running a Query for a
    /// token sets, so a caller that stops reading holds at most this.
    pub window_bytes_max: u64,
}

/// A server-side row filter; every set condition must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only rows whose key or value contains these bytes (1..=1024; empty:
    /// no condition).
    pub grep: Vec<u8>,
    /// Only rows whose key starts with these bytes (empty: no condition).
    pub key_prefix: Vec<u8>,
    /// Return no rows, only the count (`QueryStats::rows_matched`).
    pub count_only: bool,
}

impl Filter {
    fn to_wire(&self) -> v1::ScanFilter {
        v1::ScanFilter {
            grep: self.grep.clone(),
            key_prefix: self.key_prefix.clone(),
            count_only: self.count_only,
        }
    }
}

/// Where a query reads.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Consistency {
    /// On each tablet's tablet server: every acknowledged write.
    #[default]
    Immediate,
    /// On scan servers chosen by a dispatcher profile: the files tablet
    /// servers last flushed (unflushed writes are not seen; see
    /// ARCHITECTURE.md for the staleness bound). Object queries only.
    Eventual {
        /// The dispatcher profile (none: the default one).
        profile: Option<String>,
        /// The first attempt's busy timeout instead of the profile's, ms;
        /// later attempts escalate from it by the profile's multiplier.
        busy_timeout_ms: Option<u64>,
    },
}

impl Query {
    /// A query of `table` from the start, all rows, adaptive windows.
    pub fn new(table: impl Into<String>) -> Self {
        Query {
            table: table.into(),
            start: Vec::new(),
            end: Vec::new(),
            index: None,
            skip: 0,
            limit: 0,
            stream_limit: WindowMode::Adaptive,
            batch_rows: 0,
            keys_only: false,
            consistency: Consistency::Immediate,
            filter: None,
            window_bytes_max: 0,
        }
    }
}

/// One key's answer of a [`AsyncClient::get_many`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRead {
    /// The key holds this value.
    Found(Vec<u8>),
    /// The key holds nothing.
    Absent,
    /// Reading this key failed (the others are not affected).
    Failed(Error),
}

/// One row of a query result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueryRow {
    /// Object key.
    pub key: Vec<u8>,
    /// Value (empty when keys only).
    pub value: Vec<u8>,
    /// The index term (index queries only).
    pub term: Option<Vec<u8>>,
}

/// Counters of one query.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QueryStats {
    /// Tablet streams opened.
    pub tablets: u32,
    /// Rows handed to the caller.
    pub rows_returned: u64,
    /// Rows consumed by skip.
    pub rows_skipped: u64,
    /// Rows tablets sent that arrived here.
    pub rows_sent: u64,
    /// Rows that arrived and were thrown away at cancel.
    pub rows_wasted: u64,
    /// Times the merge waited for a tablet.
    pub waits: u64,
    /// Of those, waits after the tablet delivered its initial window (it
    /// ran dry while needed).
    pub stalls: u64,
    /// Attempts after retryable failures.
    pub retries: u32,
    /// Rows the servers read for this query (before any filter).
    pub rows_examined: u64,
    /// Rows that matched the query's filter (all rows read without one;
    /// the count of a count-only query).
    pub rows_matched: u64,
    /// Eventual queries: tablet scan attempts made (one per tablet when
    /// nothing was busy or failed).
    pub attempts: u64,
    /// Eventual queries: busy answers from scan servers.
    pub busy_answers: u64,
    /// Eventual queries: tablets whose scan finished on each attempt plan
    /// of the profile (index = plan).
    pub served_by_plan: Vec<u64>,
    /// Eventual queries: tablets read from their tablet server (no scan
    /// server, and the profile falls back).
    pub served_by_tserver: u64,
}

/// Exponential backoff with full jitter, bounded by a deadline.
struct Backoff {
    next: Duration,
    max: Duration,
    deadline: Instant,
    attempts: u32,
}

impl Backoff {
    fn new(cfg: &ClientConfig) -> Self {
        Backoff {
            next: cfg.backoff_base,
            max: cfg.backoff_max,
            deadline: Instant::now() + cfg.retry_deadline,
            attempts: 0,
        }
    }

    /// Sleeps before the next attempt, or gives up with the last failure.
    async fn wait(&mut self, last: &Status) -> Result<()> {
        let now = Instant::now();
        if now >= self.deadline {
            return Err(Error::Unavailable(format!(
                "gave up after {} attempts: {}",
                self.attempts + 1,
                last.message()
            )));
        }
        let cap = self.next.min(self.deadline - now);
        let ms = u64::try_from(cap.as_millis()).unwrap_or(u64::MAX).max(1);
        let sleep = rand::rng().random_range(0..=ms);
        tokio::time::sleep(Duration::from_millis(sleep)).await;
        self.next = (self.next * 2).min(self.max);
        self.attempts += 1;
        Ok(())
    }
}

/// The gRPC endpoint of `addr` (`host:port` or a URL), with TCP_NODELAY
/// and HTTP/2 keepalive: a server that stops answering (paused, cut off)
/// fails its calls within [`KEEPALIVE_INTERVAL_MS`] +
/// [`KEEPALIVE_TIMEOUT_MS`] instead of holding them forever.
pub fn endpoint(addr: &str, tls: Option<&ClientTls>) -> Result<Endpoint> {
    let url = match (addr.split_once("://"), tls) {
        (Some((_, rest)), Some(_)) => format!("https://{rest}"),
        (Some(_), None) => addr.to_string(),
        (None, Some(_)) => format!("https://{addr}"),
        (None, None) => format!("http://{addr}"),
    };
    let ep = Endpoint::from_shared(url.clone())
        .map_err(|e| Error::Connect(format!("bad cluster address {addr:?}: {e}")))?;
    let ep = match tls {
        None => ep,
        Some(t) => {
            let mut c = tonic::transport::ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(&t.ca_pem));
            if let Some((cert, key)) = &t.identity_pem {
                c = c.identity(tonic::transport::Identity::from_pem(cert, key));
            }
            ep.tls_config(c)
                .map_err(|e| Error::Connect(format!("TLS settings for {addr}: {e}")))?
        }
    };
    Ok(ep).map(|e: Endpoint| {
        e.tcp_nodelay(true)
            .connect_timeout(Duration::from_millis(CONNECT_TIMEOUT_MS_DEFAULT))
            .http2_keep_alive_interval(Duration::from_millis(KEEPALIVE_INTERVAL_MS))
            .keep_alive_timeout(Duration::from_millis(KEEPALIVE_TIMEOUT_MS))
            .keep_alive_while_idle(true)
    })
}

struct Inner {
    manager: ManagerClient<Transport>,
    /// This client's credential's proofs, re-aimed at each server dialled.
    bearer: tablinum_auth::Bearer,
    channels: Mutex<HashMap<String, Channel>>,
    tables: Mutex<HashMap<String, Arc<Locations>>>,
    /// Live scan servers (every group) and when they were listed.
    scan_servers: tokio::sync::Mutex<Option<(Instant, Vec<v1::ScanServerStatus>)>>,
    /// First-plan busy history per tablet (the dispatcher's heat).
    heat: Mutex<HashMap<Vec<u8>, tablinum_dispatch::select::FirstPlanHeat>>,
    /// Latencies of eventual point reads (percentile hedges).
    point_latency: Mutex<tablinum_dispatch::hedge::LatencyTracker>,
    cfg: ClientConfig,
}

/// The asynchronous client. Cheap to clone.
#[derive(Clone)]
pub struct AsyncClient {
    inner: Arc<Inner>,
}

impl AsyncClient {
    /// Connects to the manager at `addr` (`host:port` or `http://host:port`).
    pub async fn connect(addr: &str, cfg: ClientConfig) -> Result<Self> {
        let ep = endpoint(addr, cfg.tls.as_ref())?.connect_timeout(cfg.connect_timeout);
        let ch = tokio::time::timeout(cfg.connect_timeout, ep.connect())
            .await
            .map_err(|_| Error::Connect(format!("no answer from the manager at {addr}")))?
            .map_err(|e| Error::Connect(format!("cannot reach the manager at {addr}: {e}")))?;
        Ok(Self::with_channel(ch, cfg))
    }

    /// A client whose manager connection is made on first use.
    pub fn connect_lazy(addr: &str, cfg: ClientConfig) -> Result<Self> {
        Ok(Self::with_channel(
            endpoint(addr, cfg.tls.as_ref())?.connect_lazy(),
            cfg,
        ))
    }

    fn with_channel(ch: Channel, cfg: ClientConfig) -> Self {
        let bearer = tablinum_auth::Bearer::new(
            cfg.credential.as_ref(),
            tablinum_auth::proof::MANAGER_AUDIENCE,
        );
        let manager = ManagerClient::new(tablinum_auth::Caller::new(ch, bearer.clone()))
            .max_decoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX);
        AsyncClient {
            inner: Arc::new(Inner {
                manager,
                bearer,
                channels: Mutex::new(HashMap::new()),
                tables: Mutex::new(HashMap::new()),
                scan_servers: tokio::sync::Mutex::new(None),
                heat: Mutex::new(HashMap::new()),
                point_latency: Mutex::new(tablinum_dispatch::hedge::LatencyTracker::new()),
                cfg,
            }),
        }
    }

    fn channel(&self, addr: &str) -> Result<Channel> {
        let mut m = self.inner.channels.lock();
        if let Some(c) = m.get(addr) {
            return Ok(c.clone());
        }
        let c = endpoint(addr, self.inner.cfg.tls.as_ref())?.connect_lazy();
        m.insert(addr.to_string(), c.clone());
        Ok(c)
    }

    /// The connection to `addr`, with this client's credential.
    pub(crate) fn transport(&self, addr: &str) -> Result<Transport> {
        Ok(tablinum_auth::Caller::new(
            self.channel(addr)?,
            self.inner.bearer.for_audience(addr),
        ))
    }

    fn tserver(&self, addr: &str) -> Result<TabletServerClient<Transport>> {
        Ok(TabletServerClient::new(self.transport(addr)?)
            .max_decoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX)
            .max_encoding_message_size(tablinum_proto::GRPC_MESSAGE_BYTES_MAX))
    }

    fn manager(&self) -> ManagerClient<Transport> {
        self.inner.manager.clone()
    }

    /// Creates a table.
    pub async fn create_table(
        &self,
        name: &str,
        split: Split,
        durability: Durability,
    ) -> Result<Table> {
        let (split_points, tablets) = match split {
            Split::Even(q) => (Vec::new(), q),
            Split::Points(p) => (p, 0),
        };
        let req = v1::CreateTableRequest {
            name: name.to_string(),
            split_points,
            tablets,
            durability: durability.wire(),
        };
        let r = self.manager().create_table(req).await?.into_inner();
        r.table
            .map(Into::into)
            .ok_or_else(|| Error::Server("create table answered without a table".into()))
    }

    /// Creates a client token of `role` labelled `name`; the answer holds
    /// the token, which the cluster keeps only as a hash. Admin only.
    pub async fn create_token(&self, role: Role, name: &str) -> Result<(TokenInfo, Credential)> {
        let r = self
            .manager()
            .create_token(v1::CreateTokenRequest {
                role: role as i32,
                name: name.to_string(),
            })
            .await?
            .into_inner();
        let info = r
            .info
            .as_ref()
            .and_then(TokenInfo::from_wire)
            .ok_or_else(|| Error::Server("create token answered without a token".into()))?;
        let token = Credential::parse(&r.token)
            .map_err(|e| Error::Server(format!("create token answered a bad token: {e}")))?;
        Ok((info, token))
    }

    /// Every token (ids, roles, names; never a secret). Admin only.
    pub async fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        let r = self
            .manager()
            .list_tokens(v1::ListTokensRequest {})
            .await?
            .into_inner();
        Ok(r.tokens.iter().filter_map(TokenInfo::from_wire).collect())
    }

    /// Revokes the token `id`; returns once no live server accepts it.
    /// Admin only.
    pub async fn revoke_token(&self, id: &str) -> Result<()> {
        self.manager()
            .revoke_token(v1::RevokeTokenRequest { id: id.to_string() })
            .await?;
        Ok(())
    }

    /// Drops a table.
    pub async fn drop_table(&self, name: &str) -> Result<()> {
        self.manager()
            .drop_table(v1::DropTableRequest {
                name: name.to_string(),
            })
            .await?;
        self.inner.tables.lock().remove(name);
        Ok(())
    }

    /// Every table.
    pub async fn list_tables(&self) -> Result<Vec<Table>> {
        Ok(self
            .manager()
            .list_tables(v1::ListTablesRequest {})
            .await?
            .into_inner()
            .tables
            .into_iter()
            .map(Into::into)
            .collect())
    }

    /// Live servers, tables, unassigned tablets.
    pub async fn status(&self) -> Result<ClusterStatus> {
        Ok(self
            .manager()
            .cluster_status(v1::ClusterStatusRequest {})
            .await?
            .into_inner()
            .into())
    }

    /// Live scan servers of `group` (every group when empty).
    pub async fn scan_servers(&self, group: &str) -> Result<Vec<ScanServer>> {
        let r = self
            .manager()
            .list_scan_servers(v1::ListScanServersRequest {
                group: group.to_string(),
            })
            .await?
            .into_inner();
        Ok(r.scan_servers.into_iter().map(Into::into).collect())
    }

    /// The live scan servers as the dispatcher takes them, listed again
    /// when older than `SCAN_SERVERS_TTL_MS` or when `refresh`.
    pub(crate) async fn scan_server_snapshot(
        &self,
        _group: &str,
        refresh: bool,
    ) -> Result<tablinum_dispatch::select::ServerSnapshot> {
        let mut cached = self.inner.scan_servers.lock().await;
        let fresh = cached.as_ref().is_some_and(|(at, _)| {
            at.elapsed() < Duration::from_millis(eventual::SCAN_SERVERS_TTL_MS)
        });
        if refresh || !fresh {
            let r = self
                .manager()
                .list_scan_servers(v1::ListScanServersRequest {
                    group: String::new(),
                })
                .await?
                .into_inner();
            *cached = Some((Instant::now(), r.scan_servers));
        }
        Ok(eventual::snapshot(
            cached.as_ref().map_or(&[][..], |(_, v)| v.as_slice()),
        ))
    }

    pub(crate) fn heat(&self, tablet: &[u8]) -> tablinum_dispatch::select::FirstPlanHeat {
        self.inner
            .heat
            .lock()
            .get(tablet)
            .copied()
            .unwrap_or_default()
    }

    pub(crate) fn record_heat(&self, tablet: &[u8], busy: bool) {
        self.inner
            .heat
            .lock()
            .entry(tablet.to_vec())
            .or_default()
            .record(busy);
    }

    /// The dispatcher profile `name` (none: the default) of this client's
    /// profiles.
    pub fn profile(&self, name: Option<&str>) -> Result<Arc<Profile>> {
        let builtin;
        let profiles = match &self.inner.cfg.dispatcher {
            Some(p) => p.as_ref(),
            None => {
                builtin = Profiles::builtin();
                &builtin
            }
        };
        let p = match name {
            Some(n) => profiles
                .get(n)
                .map_err(|e| Error::InvalidArgument(e.to_string()))?,
            None => profiles.default_profile(),
        };
        Ok(Arc::new(p.clone()))
    }

    /// The table's tablets, from the cache unless `refresh`.
    pub async fn locations(&self, table: &str, refresh: bool) -> Result<Arc<Locations>> {
        if !refresh {
            if let Some(l) = self.inner.tables.lock().get(table) {
                return Ok(l.clone());
            }
        }
        let mut b = Backoff::new(&self.inner.cfg);
        loop {
            match self
                .manager()
                .tablet_map(v1::TabletMapRequest {
                    table: table.to_string(),
                })
                .await
            {
                Ok(r) => {
                    let r = r.into_inner();
                    let loc = Arc::new(Locations {
                        table: r.table.map(Into::into).unwrap_or_default(),
                        tablets: r.tablets.into_iter().map(Into::into).collect(),
                    });
                    self.inner
                        .tables
                        .lock()
                        .insert(table.to_string(), loc.clone());
                    return Ok(loc);
                }
                Err(s) if s.code() == tonic::Code::Unavailable => b.wait(&s).await?,
                Err(s) => return Err(s.into()),
            }
        }
    }

    /// The server of the tablet holding `key`, refreshing locations while
    /// the tablet is unassigned.
    async fn route(&self, table: &str, key: &[u8], refresh: bool) -> Result<(u64, Tablet)> {
        let loc = self.locations(table, refresh).await?;
        let t = loc
            .tablets
            .get(loc.tablet_for(key))
            .cloned()
            .ok_or_else(|| Error::Server(format!("table {table} has no tablets")))?;
        Ok((loc.table.id, t))
    }

    /// Runs `call` against the server of `key`'s tablet, retrying retryable
    /// failures after refreshing the locations.
    async fn with_tablet<T, F, Fut>(
        &self,
        table: &str,
        key: &[u8],
        idempotent: bool,
        call: F,
    ) -> Result<T>
    where
        F: Fn(TabletServerClient<Transport>, u64) -> Fut,
        Fut: std::future::Future<Output = std::result::Result<T, Status>>,
    {
        let mut b = Backoff::new(&self.inner.cfg);
        let mut refresh = false;
        loop {
            let (table_id, t) = self.route(table, key, refresh).await?;
            let status = if t.server.is_empty() {
                Status::unavailable(format!("tablet {} of {table} is not assigned yet", t.id))
            } else {
                match call(self.tserver(&t.server)?, table_id).await {
                    Ok(v) => return Ok(v),
                    Err(s)
                        if error::classify(
                            &s,
                            if idempotent {
                                error::Op::Read
                            } else {
                                error::Op::Write
                            },
                        )
                        .retry =>
                    {
                        s
                    }
                    Err(s) if !idempotent => {
                        // The server may be gone: look the tablet up again
                        // on the next call.
                        self.inner.tables.lock().remove(table);
                        return Err(error::write_outcome(s));
                    }
                    Err(s) => return Err(s.into()),
                }
            };
            refresh = true;
            b.wait(&status).await?;
        }
    }

    /// Applies `mutations` atomically; every key must be in one tablet.
    pub async fn write(&self, table: &str, mutations: Vec<Mutation>) -> Result<u64> {
        let Some(first) = mutations.first().map(|m| m.key.clone()) else {
            return Err(Error::InvalidArgument(
                "a write needs at least one mutation".into(),
            ));
        };
        let req = v1::WriteRequest {
            table: table.to_string(),
            mutations: mutations.into_iter().map(Into::into).collect(),
            table_id: 0,
        };
        // Servers refuse to apply a copy read after this moment (it could
        // otherwise land after this call gave up and the caller retried).
        let deadline_ms = tablinum_proto::unix_ms().saturating_add(
            u64::try_from(self.inner.cfg.retry_deadline.as_millis()).unwrap_or(u64::MAX),
        );
        self.with_tablet(table, &first, false, |mut c, table_id| {
            let mut r = tonic::Request::new(v1::WriteRequest {
                table_id,
                ..req.clone()
            });
            if let Ok(v) = deadline_ms.to_string().parse() {
                r.metadata_mut().insert(tablinum_proto::DEADLINE_HEADER, v);
            }
            async move { Ok(c.write(r).await?.into_inner().seq) }
        })
        .await
    }

    /// Applies `mutations` grouped by tablet: atomic within each tablet,
    /// not across tablets. The groups are sent concurrently.
    pub async fn write_routed(&self, table: &str, mutations: Vec<Mutation>) -> Result<()> {
        let loc = self.locations(table, false).await?;
        let mut groups: HashMap<usize, Vec<Mutation>> = HashMap::new();
        for m in mutations {
            groups.entry(loc.tablet_for(&m.key)).or_default().push(m);
        }
        let mut tasks = tokio::task::JoinSet::new();
        for (_, g) in groups {
            let c = self.clone();
            let table = table.to_string();
            tasks.spawn(async move { c.write(&table, g).await });
        }
        while let Some(r) = tasks.join_next().await {
            r.map_err(|e| Error::Server(format!("write task failed: {e}")))??;
        }
        Ok(())
    }

    /// Puts one object.
    pub async fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<u64> {
        self.write(
            table,
            vec![Mutation {
                key: key.to_vec(),
                value: value.to_vec(),
                ..Default::default()
            }],
        )
        .await
    }

    /// Deletes one object.
    pub async fn delete(&self, table: &str, key: &[u8]) -> Result<u64> {
        self.write(
            table,
            vec![Mutation {
                key: key.to_vec(),
                delete: true,
                ..Default::default()
            }],
        )
        .await
    }

    /// Reads one object's value (on its tablet server).
    pub async fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.get_with(table, key, &Consistency::Immediate).await?.0)
    }

    /// Reads many keys of `table` at once: the keys are binned by the
    /// tablet server holding each, one `GetMany` per server (at most
    /// `GET_MANY_KEYS_MAX` keys each), all servers at once. The answers
    /// come back in request order, each key found, absent or failed on its
    /// own; keys that fail with a retryable reason (their tablet moved,
    /// is opening, the connection broke) are asked again after the
    /// locations are refreshed, until the retry deadline.
    pub async fn get_many(&self, table: &str, keys: &[Vec<u8>]) -> Result<Vec<KeyRead>> {
        let mut out: Vec<Option<KeyRead>> = vec![None; keys.len()];
        let mut pending: Vec<usize> = (0..keys.len()).collect();
        let mut last: Option<Status> = None;
        let mut b = Backoff::new(&self.inner.cfg);
        let mut refresh = false;
        while !pending.is_empty() {
            let loc = self.locations(table, refresh).await?;
            let mut bins: Vec<(&str, Vec<usize>)> = Vec::new();
            let mut again: Vec<usize> = Vec::new();
            for &i in &pending {
                let Some(t) = loc.tablets.get(loc.tablet_for(&keys[i])) else {
                    return Err(Error::Server(format!("table {table} has no tablets")));
                };
                if t.server.is_empty() {
                    last = Some(Status::unavailable(format!(
                        "tablet {} of {table} is not assigned yet",
                        t.id
                    )));
                    again.push(i);
                    continue;
                }
                match bins.iter_mut().find(|(s, v)| {
                    *s == t.server.as_str() && v.len() < tablinum_proto::GET_MANY_KEYS_MAX
                }) {
                    Some((_, v)) => v.push(i),
                    None => bins.push((t.server.as_str(), vec![i])),
                }
            }
            let mut calls = tokio::task::JoinSet::new();
            for (server, idx) in bins {
                let mut c = self.tserver(server)?;
                let req = v1::GetManyRequest {
                    table: table.to_string(),
                    table_id: loc.table.id,
                    keys: idx.iter().map(|&i| keys[i].clone()).collect(),
                };
                calls.spawn(async move { (idx, c.get_many(req).await) });
            }
            let mut full = false;
            while let Some(done) = calls.join_next().await {
                let (idx, answer) =
                    done.map_err(|e| Error::Server(format!("a GetMany task failed: {e}")))?;
                match answer {
                    Ok(resp) => {
                        let results = resp.into_inner().results;
                        // Keys past the last result were not read (the
                        // answer was full): asked again at once.
                        full |= results.len() < idx.len();
                        again.extend(idx.iter().skip(results.len()));
                        for (&i, r) in idx.iter().zip(results) {
                            if r.code == 0 {
                                out[i] = Some(if r.found {
                                    KeyRead::Found(r.value)
                                } else {
                                    KeyRead::Absent
                                });
                                continue;
                            }
                            let reason = v1::ErrorReason::try_from(r.reason)
                                .unwrap_or(v1::ErrorReason::Unspecified);
                            let code = tonic::Code::from_i32(i32::try_from(r.code).unwrap_or(2));
                            let st = tablinum_proto::error::status(code, reason, r.message);
                            if error::classify(&st, error::Op::Read).retry {
                                again.push(i);
                                last = Some(st);
                            } else {
                                out[i] = Some(KeyRead::Failed(st.into()));
                            }
                        }
                    }
                    Err(st) if error::classify(&st, error::Op::Read).retry => {
                        again.extend(idx);
                        last = Some(st);
                    }
                    Err(st) => {
                        let e = Error::from(st);
                        for i in idx {
                            out[i] = Some(KeyRead::Failed(e.clone()));
                        }
                    }
                }
            }
            again.sort_unstable();
            pending = again;
            if pending.is_empty() {
                break;
            }
            if let Some(st) = last.take() {
                // Something failed, not merely a full answer: look the
                // tablets up again after a backoff, or give up on them.
                refresh = true;
                if let Err(e) = b.wait(&st).await {
                    for &i in &pending {
                        out[i] = Some(KeyRead::Failed(e.clone()));
                    }
                    break;
                }
            } else if !full {
                break;
            }
        }
        Ok(out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| KeyRead::Failed(Error::Server("not answered".into()))))
            .collect())
    }

    /// Reads one object's metadata (on its tablet server).
    pub async fn head(&self, table: &str, key: &[u8]) -> Result<Option<Head>> {
        Ok(self.head_with(table, key, &Consistency::Immediate).await?.0)
    }

    /// Flushes every tablet of `table` on every server hosting one.
    pub async fn flush(&self, table: &str) -> Result<u32> {
        let loc = self.locations(table, true).await?;
        let mut servers: Vec<&str> = loc.tablets.iter().map(|t| t.server.as_str()).collect();
        servers.sort_unstable();
        servers.dedup();
        let mut n = 0;
        for s in servers.into_iter().filter(|s| !s.is_empty()) {
            n += self
                .tserver(s)?
                .flush(v1::FlushRequest {
                    table: table.to_string(),
                })
                .await?
                .into_inner()
                .tablets;
        }
        Ok(n)
    }

    /// Runs a table-wide query, handing rows in key order (or (term, key)
    /// order for index queries) to `out`. Retries from the start after a
    /// retryable failure only while no row was handed out yet.
    pub async fn query(
        &self,
        q: &Query,
        out: &mut (dyn FnMut(QueryRow) + Send),
    ) -> Result<QueryStats> {
        self.query_until(q, &mut |r| {
            out(r);
            ControlFlow::Continue(())
        })
        .await
    }

    /// [`AsyncClient::query`] that stops (cancelling every tablet stream)
    /// as soon as `out` answers `Break`: a reader that went away must not
    /// keep the cluster scanning.
    pub async fn query_until(
        &self,
        q: &Query,
        out: &mut (dyn FnMut(QueryRow) -> ControlFlow<()> + Send),
    ) -> Result<QueryStats> {
        check_query(q)?;
        let mut b = Backoff::new(&self.inner.cfg);
        let mut refresh = false;
        let mut retries = 0;
        loop {
            let mut emitted = 0u64;
            let mut wrapped = |r: QueryRow| {
                emitted += 1;
                out(r)
            };
            match self.query_once(q, refresh, &mut wrapped).await {
                Ok(mut s) => {
                    s.retries = retries;
                    return Ok(s);
                }
                Err(QueryFailure::Status(s))
                    if error::classify(&s, error::Op::Read).retry && emitted == 0 =>
                {
                    refresh = true;
                    retries += 1;
                    b.wait(&s).await?;
                }
                Err(QueryFailure::Status(s)) => return Err(s.into()),
                Err(QueryFailure::Client(e)) => return Err(e),
            }
        }
    }

    async fn query_once(
        &self,
        q: &Query,
        refresh: bool,
        out: &mut (dyn FnMut(QueryRow) -> ControlFlow<()> + Send),
    ) -> std::result::Result<QueryStats, QueryFailure> {
        let loc = self
            .locations(&q.table, refresh)
            .await
            .map_err(QueryFailure::Client)?;
        let tablets: Vec<&Tablet> = loc
            .tablets
            .iter()
            .filter(|t| {
                q.index.is_some()
                    || ((t.end.is_empty() || t.end.as_slice() > q.start.as_slice())
                        && (q.end.is_empty() || t.start.as_slice() < q.end.as_slice()))
            })
            .collect();
        if let Some(t) = tablets.iter().find(|t| t.server.is_empty()) {
            return Err(QueryFailure::Status(Status::unavailable(format!(
                "tablet {} of {} is not assigned yet",
                t.id, q.table
            ))));
        }
        let n = u32::try_from(tablets.len()).unwrap_or(u32::MAX);
        let need = q
            .skip
            .saturating_add(if q.limit == 0 { u64::MAX } else { q.limit });
        let batch_rows = match (q.batch_rows, q.stream_limit) {
            (0, WindowMode::Adaptive) => adaptive_batch_rows(need, n),
            (0, WindowMode::Fixed(_)) => BATCH_ROWS_DEFAULT,
            (b, _) => b,
        };
        let window = initial_window(q.stream_limit, q.skip, limit_or_max(q.limit), n, batch_rows);
        // The query's byte window, split over its streams: one per tablet
        // when eventual, one per server when immediate.
        let streams = match q.consistency {
            Consistency::Eventual { .. } => tablets.len(),
            Consistency::Immediate => {
                let mut servers: Vec<&str> = tablets.iter().map(|t| t.server.as_str()).collect();
                servers.sort_unstable();
                servers.dedup();
                servers.len()
            }
        };
        let stream_bytes_max = match q.window_bytes_max {
            0 => 0,
            b => (b / streams.max(1) as u64).max(1),
        };
        let handle = tokio::runtime::Handle::current();
        let progress = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counters = Arc::new(eventual::EventualCounters::default());
        let examined = Arc::new(coordinator::ExaminedCounters::default());
        let mut sources: Vec<Source> = Vec::with_capacity(tablets.len());
        if let Consistency::Eventual {
            profile,
            busy_timeout_ms,
        } = &q.consistency
        {
            // One stream per tablet, each on the scan server the
            // dispatcher picks for it (re-dispatched on busy or failure).
            let profile = self
                .profile(profile.as_deref())
                .map_err(QueryFailure::Client)?;
            for t in &tablets {
                let template = v1::ScanStart {
                    table: q.table.clone(),
                    tablet_id: t.id,
                    start: q.start.clone(),
                    end: q.end.clone(),
                    index: Vec::new(),
                    limit: if q.limit == 0 { 0 } else { need },
                    window,
                    batch_rows,
                    keys_only: q.keys_only,
                    table_id: loc.table.id,
                    busy_timeout_ms: 0,
                    filter: q.filter.as_ref().map(Filter::to_wire),
                    attempt: 0,
                    plan: 0,
                    stream_bytes_max,
                };
                sources.push(Source::Eventual(Box::new(eventual::EventualSource::new(
                    self.clone(),
                    handle.clone(),
                    eventual::Plan {
                        template,
                        tserver: t.server.clone(),
                        profile: profile.clone(),
                        busy_timeout_ms: *busy_timeout_ms,
                        idle: self.inner.cfg.idle_timeout,
                        progress: progress.clone(),
                        counters: counters.clone(),
                        examined: examined.clone(),
                    },
                ))));
            }
        }
        // One stream per server carrying all of its tablets' scans.
        let mut by_server: Vec<(&str, Vec<v1::ScanStart>)> = Vec::new();
        for t in tablets
            .iter()
            .filter(|_| q.consistency == Consistency::Immediate)
        {
            let start = v1::ScanStart {
                table: q.table.clone(),
                tablet_id: t.id,
                start: q.start.clone(),
                end: q.end.clone(),
                index: q.index.clone().unwrap_or_default(),
                limit: if q.limit == 0 { 0 } else { need },
                window,
                batch_rows,
                keys_only: q.keys_only,
                table_id: loc.table.id,
                busy_timeout_ms: 0,
                filter: q.filter.as_ref().map(Filter::to_wire),
                attempt: 0,
                plan: 0,
                stream_bytes_max,
            };
            match by_server.iter_mut().find(|(s, _)| *s == t.server.as_str()) {
                Some((_, v)) => v.push(start),
                None => by_server.push((t.server.as_str(), vec![start])),
            }
        }
        for (server, starts) in by_server {
            let ch = self.transport(server).map_err(QueryFailure::Client)?;
            sources.extend(
                coordinator::open_many(
                    &handle,
                    ch,
                    starts,
                    q.index.is_some(),
                    self.inner.cfg.idle_timeout,
                    progress.clone(),
                    examined.clone(),
                )
                .into_iter()
                .map(Source::Grpc),
            );
        }
        let mq = MergeQuery {
            skip: q.skip,
            limit: limit_or_max(q.limit),
            mode: q.stream_limit,
        };
        let index = q.index.is_some();
        let mut bad_row = false;
        let result = tokio::task::block_in_place(|| {
            merge(&sources, &mq, |(k, v)| {
                if index {
                    match sortkey::decode(&k) {
                        Some((term, key)) => out(QueryRow {
                            key,
                            value: v,
                            term: Some(term),
                        }),
                        None => {
                            bad_row = true;
                            ControlFlow::Break(())
                        }
                    }
                } else {
                    out(QueryRow {
                        key: k,
                        value: v,
                        term: None,
                    })
                }
            })
        });
        match result {
            Ok(m) => {
                // Every stream was cancelled; wait until the servers ended
                // them, so the rows still in flight are counted as sent and
                // wasted (bounded by the windows), and no stream outlives
                // its query.
                let pumps: Vec<_> = sources.iter().flat_map(Source::take_pumps).collect();
                let _ = tokio::time::timeout(self.inner.cfg.idle_timeout, async {
                    for p in pumps {
                        let _ = p.await;
                    }
                })
                .await;
                let rows_sent: u64 = sources.iter().map(Source::rows_received).sum();
                let rows_wasted = rows_sent.saturating_sub(m.rows_returned + m.rows_skipped);
                if bad_row {
                    return Err(QueryFailure::Client(Error::Server(
                        "an index row could not be decoded".into(),
                    )));
                }
                Ok(QueryStats {
                    tablets: n,
                    rows_returned: m.rows_returned,
                    rows_skipped: m.rows_skipped,
                    rows_sent,
                    rows_wasted,
                    waits: m.waits,
                    stalls: m.stalls,
                    retries: 0,
                    attempts: counters.attempts.load(Ordering::Relaxed),
                    busy_answers: counters.busy.load(Ordering::Relaxed),
                    served_by_plan: counters
                        .served_by_plan
                        .lock()
                        .map(|v| v.clone())
                        .unwrap_or_default(),
                    served_by_tserver: counters.served_by_tserver.load(Ordering::Relaxed),
                    rows_examined: examined.rows.load(Ordering::Relaxed),
                    rows_matched: examined.matched.load(Ordering::Relaxed),
                })
            }
            Err(e) => {
                let failure = sources.iter().find_map(Source::take_failure);
                Err(QueryFailure::Status(failure.unwrap_or_else(|| match e {
                    tablinum_stream::channel::StreamError::IdleTimeout => {
                        Status::deadline_exceeded(format!(
                            "no batch from a tablet within the idle timeout of {} ms",
                            self.inner.cfg.idle_timeout.as_millis()
                        ))
                    }
                    other => Status::unavailable(other.to_string()),
                })))
            }
        }
    }
}

/// One tablet's stream in a query: a slot of a server's `ScanMany`
/// (immediate), or a dispatched, resumable eventual scan.
enum Source {
    Grpc(coordinator::GrpcSource),
    Eventual(Box<eventual::EventualSource>),
}

impl Source {
    fn rows_received(&self) -> u64 {
        match self {
            Source::Grpc(s) => s.rows_received.load(Ordering::Relaxed),
            Source::Eventual(s) => s.rows_received(),
        }
    }

    fn take_failure(&self) -> Option<Status> {
        match self {
            Source::Grpc(s) => s.failure.lock().take(),
            Source::Eventual(s) => s.failure.lock().take(),
        }
    }

    fn take_pumps(&self) -> Vec<tokio::task::JoinHandle<()>> {
        match self {
            Source::Grpc(s) => s.pump.lock().take().into_iter().collect(),
            Source::Eventual(s) => std::mem::take(&mut *s.pumps.lock()),
        }
    }
}

impl tablinum_stream::merge::BatchSource for Source {
    fn ready(&self) -> bool {
        match self {
            Source::Grpc(s) => s.ready(),
            Source::Eventual(s) => s.ready(),
        }
    }
    fn recv(
        &self,
    ) -> std::result::Result<
        tablinum_stream::channel::Received,
        tablinum_stream::channel::StreamError,
    > {
        match self {
            Source::Grpc(s) => s.recv(),
            Source::Eventual(s) => s.recv(),
        }
    }
    fn ack(&self) {
        match self {
            Source::Grpc(s) => s.ack(),
            Source::Eventual(s) => s.ack(),
        }
    }
    fn ack_with_window(&self, window: u32) {
        match self {
            Source::Grpc(s) => s.ack_with_window(window),
            Source::Eventual(s) => s.ack_with_window(window),
        }
    }
    fn set_window(&self, window: u32) {
        match self {
            Source::Grpc(s) => s.set_window(window),
            Source::Eventual(s) => s.set_window(window),
        }
    }
    fn window(&self) -> u32 {
        match self {
            Source::Grpc(s) => s.window(),
            Source::Eventual(s) => s.window(),
        }
    }
    fn cancel(&self) -> u64 {
        match self {
            Source::Grpc(s) => s.cancel(),
            Source::Eventual(s) => s.cancel(),
        }
    }
    fn next_hint(&self) -> Option<Vec<u8>> {
        match self {
            Source::Grpc(s) => s.next_hint(),
            Source::Eventual(s) => s.next_hint(),
        }
    }
}

enum QueryFailure {
    Status(Status),
    Client(Error),
}

fn limit_or_max(limit: u64) -> u64 {
    if limit == 0 {
        u64::MAX
    } else {
        limit
    }
}

/// Rows per batch in adaptive mode: a quarter of a tablet's share of the
/// query, or the whole share up to [`ADAPTIVE_BATCH_ROWS_FLOOR`] rows,
/// whichever is larger; at most [`BATCH_ROWS_DEFAULT`]. Measured (`bench
/// scenario stream-limit`, fair grid, 2026-11-24, limit 1000): the best
/// fixed pairs were 2 × 32 rows at q = 8 (share 125), 2 × 8 at q = 32 and
/// q = 96, 2 × 6 at q = 192 (share 6): smaller batches waste fewer rows
/// at the end of a query, and below about 8 rows per-batch costs win.
pub fn adaptive_batch_rows(need_rows: u64, tablets: u32) -> u32 {
    let share = need_rows.div_ceil(u64::from(tablets.max(1)));
    let quarter = share.div_ceil(4);
    let rows = quarter.max(share.min(u64::from(ADAPTIVE_BATCH_ROWS_FLOOR)));
    u32::try_from(rows)
        .unwrap_or(u32::MAX)
        .clamp(1, BATCH_ROWS_DEFAULT)
}

/// Below this many rows per batch, adaptive scans send a tablet's whole
/// share in one batch rather than a quarter of it.
pub const ADAPTIVE_BATCH_ROWS_FLOOR: u32 = 8;

fn check_query(q: &Query) -> Result<()> {
    if let Err(m) = tablinum_proto::check_table_name(&q.table) {
        return Err(Error::InvalidArgument(m));
    }
    if !q.end.is_empty() && q.end < q.start {
        return Err(Error::InvalidArgument(format!(
            "inverted range: end {:?} is before start {:?}",
            String::from_utf8_lossy(&q.end),
            String::from_utf8_lossy(&q.start)
        )));
    }
    if let WindowMode::Fixed(n) = q.stream_limit {
        if n == 0 || n > tablinum_proto::WINDOW_BATCHES_MAX {
            return Err(Error::InvalidArgument(format!(
                "stream limit {n} is out of range 1..={}",
                tablinum_proto::WINDOW_BATCHES_MAX
            )));
        }
    }
    if let Consistency::Eventual {
        busy_timeout_ms: Some(ms),
        ..
    } = &q.consistency
    {
        if *ms == 0 || *ms > u64::from(tablinum_proto::BUSY_TIMEOUT_MS_MAX) {
            return Err(Error::InvalidArgument(format!(
                "busy timeout {ms} ms is out of range 1..={} ms",
                tablinum_proto::BUSY_TIMEOUT_MS_MAX
            )));
        }
    }
    if q.index.is_some() && q.consistency != Consistency::Immediate {
        return Err(Error::InvalidArgument(
            "eventual queries read objects only: scan an index with immediate consistency".into(),
        ));
    }
    if q.batch_rows > tablinum_proto::BATCH_ROWS_MAX {
        return Err(Error::InvalidArgument(format!(
            "batch rows {} is over the limit {}",
            q.batch_rows,
            tablinum_proto::BATCH_ROWS_MAX
        )));
    }
    Ok(())
}

/// The synchronous client: [`AsyncClient`] on its own runtime. Safe to share
/// between threads.
pub struct Client {
    rt: tokio::runtime::Runtime,
    inner: AsyncClient,
}

impl Client {
    /// Connects to the manager at `addr`.
    pub fn connect(addr: &str) -> Result<Self> {
        Self::connect_with(addr, ClientConfig::default())
    }

    /// Connects with explicit settings.
    pub fn connect_with(addr: &str, cfg: ClientConfig) -> Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .thread_name("tablinum-client")
            .build()
            .map_err(|e| Error::Connect(format!("cannot start the client runtime: {e}")))?;
        let inner = rt.block_on(AsyncClient::connect(addr, cfg))?;
        Ok(Client { rt, inner })
    }

    /// The asynchronous client underneath.
    pub fn as_async(&self) -> &AsyncClient {
        &self.inner
    }

    /// Runs `f` to completion on this client's runtime: for synchronous
    /// callers that drive the asynchronous client (a dataflow run).
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// See [`AsyncClient::create_table`].
    pub fn create_table(&self, name: &str, split: Split, durability: Durability) -> Result<Table> {
        self.rt
            .block_on(self.inner.create_table(name, split, durability))
    }

    /// Creates a client token. Admin only.
    pub fn create_token(&self, role: Role, name: &str) -> Result<(TokenInfo, Credential)> {
        self.rt.block_on(self.inner.create_token(role, name))
    }

    /// Every token. Admin only.
    pub fn list_tokens(&self) -> Result<Vec<TokenInfo>> {
        self.rt.block_on(self.inner.list_tokens())
    }

    /// Revokes a token; returns once no live server accepts it. Admin only.
    pub fn revoke_token(&self, id: &str) -> Result<()> {
        self.rt.block_on(self.inner.revoke_token(id))
    }

    /// See [`AsyncClient::drop_table`].
    pub fn drop_table(&self, name: &str) -> Result<()> {
        self.rt.block_on(self.inner.drop_table(name))
    }

    /// See [`AsyncClient::list_tables`].
    pub fn list_tables(&self) -> Result<Vec<Table>> {
        self.rt.block_on(self.inner.list_tables())
    }

    /// See [`AsyncClient::status`].
    pub fn status(&self) -> Result<ClusterStatus> {
        self.rt.block_on(self.inner.status())
    }

    /// See [`AsyncClient::locations`].
    pub fn locations(&self, table: &str, refresh: bool) -> Result<Arc<Locations>> {
        self.rt.block_on(self.inner.locations(table, refresh))
    }

    /// See [`AsyncClient::write`].
    pub fn write(&self, table: &str, mutations: Vec<Mutation>) -> Result<u64> {
        self.rt.block_on(self.inner.write(table, mutations))
    }

    /// See [`AsyncClient::write_routed`].
    pub fn write_routed(&self, table: &str, mutations: Vec<Mutation>) -> Result<()> {
        self.rt.block_on(self.inner.write_routed(table, mutations))
    }

    /// See [`AsyncClient::put`].
    pub fn put(&self, table: &str, key: &[u8], value: &[u8]) -> Result<u64> {
        self.rt.block_on(self.inner.put(table, key, value))
    }

    /// See [`AsyncClient::delete`].
    pub fn delete(&self, table: &str, key: &[u8]) -> Result<u64> {
        self.rt.block_on(self.inner.delete(table, key))
    }

    /// See [`AsyncClient::get`].
    pub fn get(&self, table: &str, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.rt.block_on(self.inner.get(table, key))
    }

    /// See [`AsyncClient::get_many`].
    pub fn get_many(&self, table: &str, keys: &[Vec<u8>]) -> Result<Vec<KeyRead>> {
        self.rt.block_on(self.inner.get_many(table, keys))
    }

    /// See [`AsyncClient::head`].
    pub fn head(&self, table: &str, key: &[u8]) -> Result<Option<Head>> {
        self.rt.block_on(self.inner.head(table, key))
    }

    /// See [`AsyncClient::get_with`].
    pub fn get_with(
        &self,
        table: &str,
        key: &[u8],
        consistency: &Consistency,
    ) -> Result<(Option<Vec<u8>>, ReadStats)> {
        self.rt
            .block_on(self.inner.get_with(table, key, consistency))
    }

    /// See [`AsyncClient::head_with`].
    pub fn head_with(
        &self,
        table: &str,
        key: &[u8],
        consistency: &Consistency,
    ) -> Result<(Option<Head>, ReadStats)> {
        self.rt
            .block_on(self.inner.head_with(table, key, consistency))
    }

    /// See [`AsyncClient::flush`].
    pub fn flush(&self, table: &str) -> Result<u32> {
        self.rt.block_on(self.inner.flush(table))
    }

    /// See [`AsyncClient::query`].
    pub fn query(&self, q: &Query, out: &mut (dyn FnMut(QueryRow) + Send)) -> Result<QueryStats> {
        self.rt.block_on(self.inner.query(q, out))
    }

    /// See [`AsyncClient::query_until`].
    pub fn query_until(
        &self,
        q: &Query,
        out: &mut (dyn FnMut(QueryRow) -> ControlFlow<()> + Send),
    ) -> Result<QueryStats> {
        self.rt.block_on(self.inner.query_until(q, out))
    }

    /// See [`AsyncClient::batch_scan`].
    pub fn batch_scan(&self, req: &BatchScan) -> Result<BatchResult> {
        self.rt.block_on(self.inner.batch_scan(req))
    }

    /// Runs a query and collects its rows.
    pub fn query_vec(&self, q: &Query) -> Result<(Vec<QueryRow>, QueryStats)> {
        let mut rows = Vec::new();
        let stats = self.query(q, &mut |r| rows.push(r))?;
        Ok((rows, stats))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_batches_are_a_quarter_share_or_the_floor() {
        assert_eq!(adaptive_batch_rows(1000, 192), 6);
        assert_eq!(adaptive_batch_rows(1000, 96), 8);
        assert_eq!(adaptive_batch_rows(1000, 32), 8);
        assert_eq!(adaptive_batch_rows(1000, 8), 32);
        assert_eq!(adaptive_batch_rows(10, 8), 2);
        assert_eq!(adaptive_batch_rows(1000, 1), BATCH_ROWS_DEFAULT);
        assert_eq!(adaptive_batch_rows(u64::MAX, 0), BATCH_ROWS_DEFAULT);
    }

    #[test]
    fn tablet_lookup_by_key() {
        let t = |s: &[u8]| Tablet {
            start: s.to_vec(),
            ..Default::default()
        };
        let loc = Locations {
            table: Table::default(),
            tablets: vec![t(b""), t(b"g"), t(b"p")],
        };
        assert_eq!(loc.tablet_for(b""), 0);
        assert_eq!(loc.tablet_for(b"f"), 0);
        assert_eq!(loc.tablet_for(b"g"), 1);
        assert_eq!(loc.tablet_for(b"zz"), 2);
    }
}
