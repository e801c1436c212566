//! The manager: the cluster's metadata authority.
//!
//! Owns tables, tablets and their assignments, kept durably in an engine
//! store (`<data>/`, Sync durability; record layouts in docs/format.md), and
//! the live-server view built from heartbeats, and the client tokens. It
//! executes the pure placement plan (`placement::plan`): dead servers'
//! tablets move to the least-loaded live server with a new epoch (the new
//! owner fences the old one out of the storage and recovers each tablet
//! from its journal under the shared storage root), balancing moves
//! tablets while counts differ by more than `BALANCE_SLACK`, and a stall of
//! the manager itself judges nobody. It removes a dropped table's files
//! once every server has let go of them (`State::released`). A server is
//! shown as live only once it has heartbeated to this manager (after a
//! restart, the servers of the metadata are candidates until then). Table
//! creation and drops are logged at INFO with the caller.
//!
//! Never touches a tablet's files while a live server may hold them open.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message;
use tablinum_engine::{Batch, Durability as EngineDurability, Options, Store};
use tablinum_proto::v1::{self, manager_server::Manager as ManagerRpc};
use tonic::{Request, Response, Status};

use tablinum_auth::{authorize, Credential, Grant, Need, NewToken, Role, Verifier};

use crate::config::ManagerConfig;
use crate::error::Error;
use crate::placement;
use crate::status_from_engine;

const KEY_TABLE: &[u8] = b"table/";
const KEY_SERVER: &[u8] = b"server/";
const KEY_DROPPED: &[u8] = b"dropped/";
const KEY_NEXT_TABLE_ID: &[u8] = b"next_table_id";
const KEY_TOKEN: &[u8] = b"token/";
const KEY_TOKENS_VERSION: &[u8] = b"tokens_version";
const KEY_FLOW: &[u8] = b"flow/";
/// How often a token change checks whether every server has heard of it.
const TOKENS_POLL: Duration = Duration::from_millis(20);
/// How often a drop checks whether servers have let go of the table.
const DROP_POLL: Duration = Duration::from_millis(20);

/// A table as stored in the metadata (`table/<name>`).
#[derive(Clone, PartialEq, Message)]
pub struct TableRecord {
    /// Name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Unique id.
    #[prost(uint64, tag = "2")]
    pub id: u64,
    /// `v1::Durability` as i32.
    #[prost(int32, tag = "3")]
    pub durability: i32,
    /// Tablets in key order.
    #[prost(message, repeated, tag = "4")]
    pub tablets: Vec<TabletRecord>,
}

/// A tablet as stored in the metadata.
#[derive(Clone, PartialEq, Message)]
pub struct TabletRecord {
    /// Id, unique within the table.
    #[prost(uint64, tag = "1")]
    pub id: u64,
    /// Inclusive start key.
    #[prost(bytes = "vec", tag = "2")]
    pub start: Vec<u8>,
    /// Exclusive end key (empty: unbounded).
    #[prost(bytes = "vec", tag = "3")]
    pub end: Vec<u8>,
    /// Assigned server id ("" while unassigned).
    #[prost(string, tag = "4")]
    pub server_id: String,
    /// Immutable files last published by its server.
    #[prost(string, repeated, tag = "5")]
    pub files: Vec<String>,
    /// Grows by one with every assignment; the owner opens the store at it.
    #[prost(uint64, tag = "6")]
    pub epoch: u64,
}

/// A server as stored in the metadata (`server/<id>`).
#[derive(Clone, PartialEq, Message)]
pub struct ServerRecord {
    /// Id.
    #[prost(string, tag = "1")]
    pub id: String,
    /// gRPC address.
    #[prost(string, tag = "2")]
    pub address: String,
    /// HTTP address.
    #[prost(string, tag = "3")]
    pub http: String,
}

/// A client token as stored in the metadata (`token/<id>`): never the
/// secret, only its SHA-256.
#[derive(Clone, PartialEq, Message)]
pub struct TokenRecord {
    /// Id (12 hex digits).
    #[prost(string, tag = "1")]
    pub id: String,
    /// `v1::Role` as i32.
    #[prost(int32, tag = "2")]
    pub role: i32,
    /// Label.
    #[prost(string, tag = "3")]
    pub name: String,
    /// Creation time, ms since the Unix epoch.
    #[prost(uint64, tag = "4")]
    pub created_ms: u64,
    /// SHA-256 of the secret part.
    #[prost(bytes = "vec", tag = "5")]
    pub secret_sha256: Vec<u8>,
}

impl TokenRecord {
    fn info(&self) -> v1::TokenInfo {
        v1::TokenInfo {
            id: self.id.clone(),
            role: self.role,
            name: self.name.clone(),
            created_ms: self.created_ms,
        }
    }

    fn grant(&self) -> Option<(String, Grant)> {
        Some((
            self.id.clone(),
            Grant {
                role: Role::from_i32(self.role)?,
                secret_sha256: self.secret_sha256.as_slice().try_into().ok()?,
            },
        ))
    }
}

#[derive(Debug)]
struct Live {
    address: String,
    http: String,
    last: Instant,
    /// It has heartbeated since this manager started (`hosted` is real).
    reported: bool,
    /// Heartbeats received from it since this manager started.
    beats: u64,
    hosted: HashSet<(u64, u64)>,
    /// Its tablets that are not serving normally, as last reported.
    faults: Vec<v1::TabletFault>,
    rows_written: u64,
    rows_read: u64,
    /// The token-set version it last reported holding.
    tokens_version: u64,
}

/// A live scan server (ephemeral: scan servers own nothing, so nothing
/// about them is persisted).
#[derive(Debug, Clone)]
struct ScanLive {
    last: Instant,
    status: v1::ScanServerStatus,
    tokens_version: u64,
}

#[derive(Debug, Default)]
struct State {
    tables: BTreeMap<String, TableRecord>,
    servers: HashMap<String, Live>,
    /// Scan servers by id; expired ones are dropped when listed.
    scan_servers: HashMap<String, ScanLive>,
    /// Dropped tables whose files are not removed yet, by table id: each
    /// with the heartbeats every server had sent when it was dropped (in
    /// memory only; empty for drops loaded at start).
    dropped: BTreeMap<u64, HashMap<String, u64>>,
    next_table_id: u64,
    tokens: BTreeMap<String, TokenRecord>,
    tokens_version: u64,
    /// When the previous placement pass ran (stall detection).
    last_pass: Option<Instant>,
    /// Dataflows and their workers.
    flows: crate::flows::Flows,
}

impl State {
    /// Whether a server holding token set `held` is behind, and then every
    /// grant (never a secret, only its hash, sealed with the cluster key).
    fn token_update(&self, held: u64, verifier: &Verifier) -> (bool, Vec<v1::TokenGrant>) {
        if held == self.tokens_version {
            return (false, Vec::new());
        }
        let grants = self
            .tokens
            .values()
            .map(|t| v1::TokenGrant {
                id: t.id.clone(),
                role: t.role,
                secret_sha256: match <[u8; 32]>::try_from(t.secret_sha256.as_slice()) {
                    Ok(d) => verifier.seal_grant(&t.id, &d).to_vec(),
                    Err(_) => Vec::new(),
                },
            })
            .collect();
        (true, grants)
    }

    fn grants(&self) -> HashMap<String, Grant> {
        self.tokens
            .values()
            .filter_map(TokenRecord::grant)
            .collect()
    }

    /// Whether every live server has let go of dropped table `id`: each
    /// has reported since this manager started, none reports holding one
    /// of its tablets, and each live at the drop has sent two heartbeats
    /// since (the answer to the first withdraws the tablets; the second is
    /// sent after that and reports any still closing). A report alone is
    /// not enough: a tablet assigned in the last answer is opened only
    /// after it, so the server holds it before it reports it.
    fn released(&self, id: u64) -> bool {
        let beats_at_drop = self.dropped.get(&id);
        self.servers.iter().all(|(sid, l)| {
            let at_drop = beats_at_drop.and_then(|b| b.get(sid));
            l.reported
                && at_drop.is_none_or(|&b| l.beats.saturating_sub(b) >= 2)
                && !l.hosted.iter().any(|(t, _)| *t == id)
        })
    }
}

/// Counters of the manager, for `/metrics`.
#[derive(Debug, Clone, Default)]
pub struct ManagerSnapshot {
    /// Tables.
    pub tables: Vec<v1::Table>,
    /// Live servers.
    pub servers: Vec<v1::ServerStatus>,
    /// Tablets without a live server.
    pub tablets_unassigned: u32,
    /// Live scan servers.
    pub scan_servers: Vec<v1::ScanServerStatus>,
    /// Servers declared dead since start.
    pub servers_expired: u64,
    /// Tablet moves since start.
    pub reassignments: u64,
    /// Submitted flows with their tasks.
    pub flows: Vec<v1::FlowStatus>,
    /// Live flow workers.
    pub workers: usize,
}

/// The manager role.
pub struct Manager {
    store: Store,
    state: Mutex<State>,
    cfg: ManagerConfig,
    counters: Mutex<(u64, u64)>,
    /// Checks every caller of this process; the manager keeps its tokens
    /// current.
    verifier: Arc<Verifier>,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("metadata record {what} does not decode: {e}"))
}

impl Manager {
    /// Opens (or creates) the metadata store and loads it; hands the valid
    /// tokens to `verifier`. At the first start (no token yet) creates an
    /// admin token and writes it to the admin token file (mode 0600).
    pub fn open(cfg: ManagerConfig, verifier: Arc<Verifier>) -> Result<Arc<Manager>, Error> {
        if cfg.tablets_per_server_max == 0 || cfg.heartbeat_timeout_ms == 0 {
            return Err(Error::Config(
                "[manager] tablets_per_server_max and heartbeat_timeout_ms must be > 0".into(),
            ));
        }
        Self::load(cfg, verifier).map_err(Error::Metadata)
    }

    fn load(cfg: ManagerConfig, verifier: Arc<Verifier>) -> Result<Arc<Manager>, String> {
        std::fs::create_dir_all(&cfg.storage)
            .map_err(|e| format!("cannot create storage root {}: {e}", cfg.storage.display()))?;
        let opts = Options {
            durability: EngineDurability::Sync,
            memtable_bytes_max: 4 << 20,
            block_cache_bytes: 4 << 20,
            journal_segment_bytes_max: 16 << 20,
            ..Options::default()
        };
        let store = Store::open(&cfg.data, opts)
            .map_err(|e| format!("cannot open manager metadata {}: {e}", cfg.data.display()))?;
        let mut st = State {
            next_table_id: 1,
            ..State::default()
        };
        type Rows = Vec<(Vec<u8>, Vec<u8>)>;
        let load = |prefix: &[u8]| -> Result<Rows, String> {
            let mut end = prefix.to_vec();
            *end.last_mut().expect("prefix") += 1;
            store
                .scan_objects((Bound::Included(prefix), Bound::Excluded(end.as_slice())))
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("cannot read manager metadata: {e}"))
        };
        for (k, v) in load(KEY_TABLE)? {
            let t = TableRecord::decode(v.as_slice()).map_err(|e| {
                corrupt(&String::from_utf8_lossy(&k), e)
                    .message()
                    .to_string()
            })?;
            st.tables.insert(t.name.clone(), t);
        }
        let now = Instant::now();
        for (k, v) in load(KEY_SERVER)? {
            let s = ServerRecord::decode(v.as_slice()).map_err(|e| {
                corrupt(&String::from_utf8_lossy(&k), e)
                    .message()
                    .to_string()
            })?;
            // Known servers get one heartbeat timeout to report in.
            st.servers.insert(
                s.id,
                Live {
                    address: s.address,
                    http: s.http,
                    last: now,
                    reported: false,
                    beats: 0,
                    hosted: HashSet::new(),
                    faults: Vec::new(),
                    rows_written: 0,
                    rows_read: 0,
                    tokens_version: 0,
                },
            );
        }
        for (k, v) in load(KEY_TOKEN)? {
            let t = TokenRecord::decode(v.as_slice()).map_err(|e| {
                corrupt(&String::from_utf8_lossy(&k), e)
                    .message()
                    .to_string()
            })?;
            st.tokens.insert(t.id.clone(), t);
        }
        for (k, _) in load(KEY_DROPPED)? {
            let id = k[KEY_DROPPED.len()..]
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| "manager metadata: bad dropped-table key".to_string())?;
            st.dropped.insert(id, HashMap::new());
        }
        // Counters: 8 bytes, big-endian.
        let counter = |key: &[u8]| -> Result<Option<u64>, String> {
            let what = String::from_utf8_lossy(key);
            match store
                .get(key)
                .map_err(|e| format!("cannot read manager metadata: {e}"))?
            {
                None => Ok(None),
                Some(v) => v
                    .as_slice()
                    .try_into()
                    .map(|b| Some(u64::from_be_bytes(b)))
                    .map_err(|_| format!("manager metadata: {what} is not 8 bytes")),
            }
        };
        let mut flows = Vec::new();
        for (k, v) in load(KEY_FLOW)? {
            let what = String::from_utf8_lossy(&k).to_string();
            let f = crate::flows::FlowRecord::decode(v.as_slice())
                .map_err(|e| corrupt(&what, e).message().to_string())?;
            f.check()
                .map_err(|e| format!("metadata record {what}: {e}"))?;
            flows.push(f);
        }
        st.flows = crate::flows::Flows::load(flows, now);
        st.next_table_id = counter(KEY_NEXT_TABLE_ID)?.unwrap_or(1);
        st.tokens_version = counter(KEY_TOKENS_VERSION)?.unwrap_or(0);
        let bootstrap = st.tokens.is_empty();
        verifier.set_tokens(st.tokens_version, st.grants());
        let m = Arc::new(Manager {
            store,
            state: Mutex::new(st),
            cfg,
            counters: Mutex::new((0, 0)),
            verifier,
        });
        if bootstrap {
            let (_, token) = m
                .add_token(Role::Admin, "bootstrap-admin")
                .map_err(|s| format!("cannot create the bootstrap admin token: {}", s.message()))?;
            let path = m.cfg.admin_token_path();
            tablinum_auth::files::write_secret_file(&path, &format!("{}\n", token.expose()))
                .map_err(|e| format!("cannot write the bootstrap admin token: {e}"))?;
            tracing::info!(file = %path.display(), "created the bootstrap admin token");
        }
        Ok(m)
    }

    /// Returns once every live server holds token set `version` or newer
    /// (bounded by twice the heartbeat timeout: a server silent that long
    /// is being declared dead anyway).
    async fn tokens_everywhere(&self, version: u64) {
        let deadline = Instant::now() + 2 * self.cfg.heartbeat_timeout();
        loop {
            let behind = {
                let st = self.state.lock();
                let timeout = self.cfg.heartbeat_timeout();
                st.servers.values().any(|l| l.tokens_version < version)
                    || st
                        .scan_servers
                        .values()
                        .any(|l| l.last.elapsed() < timeout && l.tokens_version < version)
            };
            if !behind || Instant::now() >= deadline {
                return;
            }
            tokio::time::sleep(TOKENS_POLL).await;
        }
    }

    /// Creates a token of `role`: stores its hash, bumps the token-set
    /// version (one atomic write) and tells the local verifier.
    fn add_token(&self, role: Role, name: &str) -> Result<(TokenRecord, Credential), Status> {
        let t = NewToken::generate().map_err(|e| Status::internal(e.to_string()))?;
        let rec = TokenRecord {
            id: t.id.clone(),
            role: role as i32,
            name: name.to_string(),
            created_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .unwrap_or(0),
            secret_sha256: t.secret_sha256.to_vec(),
        };
        let mut st = self.state.lock();
        let version = st.tokens_version + 1;
        let mut b = Batch::new();
        b.put(
            &[KEY_TOKEN, rec.id.as_bytes()].concat(),
            &rec.encode_to_vec(),
        );
        b.put(KEY_TOKENS_VERSION, &version.to_be_bytes());
        self.write(&b)?;
        st.tokens.insert(rec.id.clone(), rec.clone());
        st.tokens_version = version;
        self.verifier.set_tokens(version, st.grants());
        Ok((rec, t.token))
    }

    /// Whether tablet server `id` has heartbeated to this manager.
    pub fn server_reported(&self, id: &str) -> bool {
        self.state
            .lock()
            .servers
            .get(id)
            .is_some_and(|l| l.reported)
    }

    /// Forgets tablet server `id`, which is stopping and holds no tablet
    /// any more: its record leaves the metadata, so a manager started
    /// later does not wait a heartbeat timeout for it, and its tablets go
    /// to other servers at the next placement pass.
    pub fn server_left(&self, id: &str) -> Result<(), Status> {
        let mut st = self.state.lock();
        if st.servers.remove(id).is_some() {
            self.delete(&[KEY_SERVER, id.as_bytes()].concat())?;
            tracing::info!(server = %id, "tablet server left");
        }
        Ok(())
    }

    /// Closes the metadata store.
    pub fn close(&self) {
        let _ = self.store.close();
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        tokio::task::block_in_place(|| self.store.put(key, value))
            .map(|_| ())
            .map_err(status_from_engine)
    }

    fn delete(&self, key: &[u8]) -> Result<(), Status> {
        tokio::task::block_in_place(|| self.store.delete(key))
            .map(|_| ())
            .map_err(status_from_engine)
    }

    /// Applies `batch` atomically (all or none after a crash).
    fn write(&self, batch: &Batch) -> Result<(), Status> {
        tokio::task::block_in_place(|| self.store.write(batch))
            .map(|_| ())
            .map_err(status_from_engine)
    }

    fn save_table(&self, t: &TableRecord) -> Result<(), Status> {
        self.put(&[KEY_TABLE, t.name.as_bytes()].concat(), &t.encode_to_vec())
    }

    fn tablet_dir(&self, table_id: u64) -> PathBuf {
        self.cfg.storage.join("tables").join(table_id.to_string())
    }

    /// Plans placement ([`placement::plan`]) and executes the plan: expires
    /// dead servers, moves tablets (each move bumps the tablet's epoch),
    /// persists what changed, and removes dropped tables' files once no
    /// server holds them. Called on every heartbeat and by the ticker.
    pub fn rebalance(&self) -> Result<(), Status> {
        let mut st = self.state.lock();
        let now = Instant::now();
        let since_last_pass = st.last_pass.map_or(Duration::ZERO, |t| now - t);
        st.last_pass = Some(now);
        let servers: Vec<placement::ServerView> = st
            .servers
            .iter()
            .map(|(id, l)| placement::ServerView {
                id: id.clone(),
                silent_for: now.saturating_duration_since(l.last),
                reported: l.reported,
            })
            .collect();
        let mut holders: HashMap<(u64, u64), Vec<String>> = HashMap::new();
        for (id, l) in &st.servers {
            for h in &l.hosted {
                holders.entry(*h).or_default().push(id.clone());
            }
        }
        let tablets: Vec<placement::TabletView> = st
            .tables
            .values()
            .flat_map(|t| {
                let holders = &holders;
                t.tablets
                    .iter()
                    .enumerate()
                    .map(move |(index, tab)| placement::TabletView {
                        table: t.name.clone(),
                        index,
                        server: tab.server_id.clone(),
                        epoch: tab.epoch,
                        holders: holders.get(&(t.id, tab.id)).cloned().unwrap_or_default(),
                    })
            })
            .collect();
        let p = placement::plan(&placement::PlanInput {
            servers: &servers,
            tablets: &tablets,
            heartbeat_timeout: self.cfg.heartbeat_timeout(),
            since_last_pass,
            tablets_per_server_max: self.cfg.tablets_per_server_max,
        });
        if p.stalled {
            // Our own silence is not theirs: count theirs from now.
            tracing::warn!(
                stalled_ms = since_last_pass.as_millis() as u64,
                "the manager stalled; every server gets a full heartbeat timeout before it is judged"
            );
            for l in st.servers.values_mut() {
                l.last = now;
            }
        }
        for id in &p.expire {
            st.servers.remove(id);
            tracing::warn!(server = %id, timeout_ms = self.cfg.heartbeat_timeout_ms,
                "tablet server missed heartbeats; reassigning its tablets");
            self.delete(&[KEY_SERVER, id.as_bytes()].concat())?;
            self.counters.lock().0 += 1;
        }
        let mut changed: BTreeSet<String> = BTreeSet::new();
        let mut moves = 0u64;
        for m in &p.moves {
            let Some(tab) = st
                .tables
                .get_mut(&m.table)
                .and_then(|t| t.tablets.get_mut(m.index))
            else {
                continue;
            };
            if tab.server_id != m.to {
                moves += 1;
                tracing::info!(table = %m.table, tablet = tab.id, from = %tab.server_id,
                    to = %m.to, epoch = m.epoch, "tablet assigned");
            }
            tab.server_id = m.to.clone();
            tab.epoch = m.epoch;
            changed.insert(m.table.clone());
        }
        for name in changed {
            let t = st.tables[&name].clone();
            self.save_table(&t)?;
        }
        self.counters.lock().1 += moves;
        // Remove dropped tables' files once every live server has let go of
        // them (`State::released`): a tablet server closes a withdrawn
        // tablet (flushing it) before it stops reporting it, so no store
        // has its files removed under it.
        let dropped: Vec<u64> = st.dropped.keys().copied().collect();
        let live_ids: HashSet<u64> = st.tables.values().map(|t| t.id).collect();
        for id in dropped {
            let held = live_ids.contains(&id) || !st.released(id);
            if !held {
                let dir = self.tablet_dir(id);
                // Scan servers may still read its files: wait for their
                // reservations to end or expire (retried every tick).
                if tablets_reserved(&dir) {
                    continue;
                }
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        tracing::warn!(dir = %dir.display(), error = %e, "cannot remove a dropped table's files");
                        continue;
                    }
                }
                self.delete(&[KEY_DROPPED, &id.to_be_bytes()].concat())?;
                st.dropped.remove(&id);
                tracing::info!(id, dir = %dir.display(), "dropped table's files removed");
            }
        }
        Ok(())
    }

    /// What `/metrics` and the status page show.
    pub fn snapshot(&self) -> ManagerSnapshot {
        let st = self.state.lock();
        let (servers_expired, reassignments) = *self.counters.lock();
        ManagerSnapshot {
            tables: st.tables.values().map(table_msg).collect(),
            servers: server_statuses(&st),
            tablets_unassigned: unassigned(&st),
            scan_servers: scan_server_statuses(&st, self.cfg.heartbeat_timeout(), ""),
            servers_expired,
            reassignments,
            flows: st.flows.statuses(Instant::now()),
            workers: st.flows.workers(),
        }
    }

    /// Persists flow records that changed (one atomic batch).
    fn save_flows(&self, recs: &[crate::flows::FlowRecord]) -> Result<(), Status> {
        if recs.is_empty() {
            return Ok(());
        }
        let mut b = Batch::new();
        for r in recs {
            b.put(&[KEY_FLOW, r.name.as_bytes()].concat(), &r.encode_to_vec());
        }
        self.write(&b)
    }

    /// One flow placement pass ([`crate::flows::Flows::place`]), persisted.
    pub fn place_flows(&self) -> Result<(), Status> {
        let mut st = self.state.lock();
        let changed = st.flows.place(Instant::now(), self.cfg.heartbeat_timeout());
        self.save_flows(&changed)
    }
}

/// A table's durability as logs and the CLI name it.
fn durability_name(d: i32) -> &'static str {
    match v1::Durability::try_from(d) {
        Ok(v1::Durability::Sync) => "sync",
        Ok(v1::Durability::Nosync) => "nosync",
        Err(_) => "unknown",
    }
}

fn table_msg(t: &TableRecord) -> v1::Table {
    v1::Table {
        name: t.name.clone(),
        id: t.id,
        durability: t.durability,
        tablets: u32::try_from(t.tablets.len()).unwrap_or(u32::MAX),
    }
}

/// Tablets not on a live server: unassigned, or assigned to a server that
/// has not reported to this manager (after a restart, the servers in the
/// metadata are only candidates until they heartbeat).
fn unassigned(st: &State) -> u32 {
    let n = st
        .tables
        .values()
        .flat_map(|t| &t.tablets)
        .filter(|t| !st.servers.get(&t.server_id).is_some_and(|l| l.reported))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Scan servers heard from within `timeout` (of `group`, or all when
/// empty), by address.
fn scan_server_statuses(st: &State, timeout: Duration, group: &str) -> Vec<v1::ScanServerStatus> {
    let mut v: Vec<v1::ScanServerStatus> = st
        .scan_servers
        .values()
        .filter(|l| l.last.elapsed() < timeout)
        .filter(|l| group.is_empty() || l.status.group == group)
        .map(|l| v1::ScanServerStatus {
            last_heartbeat_ms: u64::try_from(l.last.elapsed().as_millis()).unwrap_or(u64::MAX),
            ..l.status.clone()
        })
        .collect();
    v.sort_by(|a, b| a.address.cmp(&b.address));
    v
}

/// The live tablet servers: those that have heartbeated to this manager
/// (a server known from the metadata but silent since the manager started
/// may be long gone, so it is not shown until it reports).
fn server_statuses(st: &State) -> Vec<v1::ServerStatus> {
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for tab in st.tables.values().flat_map(|t| &t.tablets) {
        *counts.entry(tab.server_id.as_str()).or_default() += 1;
    }
    let mut v: Vec<v1::ServerStatus> = st
        .servers
        .iter()
        .filter(|(_, l)| l.reported)
        .map(|(id, l)| v1::ServerStatus {
            id: id.clone(),
            address: l.address.clone(),
            http: l.http.clone(),
            tablets: counts.get(id.as_str()).copied().unwrap_or(0),
            last_heartbeat_ms: u64::try_from(l.last.elapsed().as_millis()).unwrap_or(u64::MAX),
            rows_written: l.rows_written,
            rows_read: l.rows_read,
            faults: l.faults.clone(),
        })
        .collect();
    v.sort_by(|a, b| a.address.cmp(&b.address));
    v
}

/// Even split points for `q` tablets over the first two key bytes.
pub fn even_splits(q: u32) -> Vec<Vec<u8>> {
    (1..q)
        .map(|i| {
            let v = (u64::from(i) * 65_536 / u64::from(q)) as u16;
            v.to_be_bytes().to_vec()
        })
        .collect()
}

/// Checks a create request and returns its split points.
fn check_create(req: &v1::CreateTableRequest) -> Result<Vec<Vec<u8>>, Status> {
    tablinum_proto::check_table_name(&req.name).map_err(Status::invalid_argument)?;
    if v1::Durability::try_from(req.durability).is_err() {
        return Err(Status::invalid_argument(format!(
            "durability {} is not one of SYNC (0), NOSYNC (1)",
            req.durability
        )));
    }
    let max = tablinum_proto::TABLETS_PER_TABLE_MAX;
    if req.split_points.is_empty() {
        if req.tablets == 0 || req.tablets > max {
            return Err(Status::invalid_argument(format!(
                "tablets {} is out of range 1..={max}",
                req.tablets
            )));
        }
        return Ok(even_splits(req.tablets));
    }
    if req.tablets != 0 && req.tablets as usize != req.split_points.len() + 1 {
        return Err(Status::invalid_argument(format!(
            "tablets {} does not match {} split points (which make {} tablets)",
            req.tablets,
            req.split_points.len(),
            req.split_points.len() + 1
        )));
    }
    if req.split_points.len() + 1 > max as usize {
        return Err(Status::invalid_argument(format!(
            "{} split points make more than {max} tablets",
            req.split_points.len()
        )));
    }
    for (i, p) in req.split_points.iter().enumerate() {
        if p.is_empty() || p.len() > tablinum_engine::options::KEY_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "split point {i} is {} bytes; split points are 1..={} bytes",
                p.len(),
                tablinum_engine::options::KEY_BYTES_MAX
            )));
        }
        if i > 0 && req.split_points[i - 1] >= *p {
            return Err(Status::invalid_argument(format!(
                "split points are not strictly increasing at {i}"
            )));
        }
    }
    Ok(req.split_points.clone())
}

/// The gRPC face of the manager.
#[derive(Clone)]
pub struct ManagerService(pub Arc<Manager>);

#[tonic::async_trait]
impl ManagerRpc for ManagerService {
    async fn create_table(
        &self,
        req: Request<v1::CreateTableRequest>,
    ) -> Result<Response<v1::CreateTableResponse>, Status> {
        let who = authorize(&req, Need::Admin, "CreateTable")?;
        let req = req.into_inner();
        let splits = check_create(&req)?;
        let m = &self.0;
        let rec = {
            let mut st = m.state.lock();
            if st.tables.contains_key(&req.name) {
                return Err(Status::already_exists(format!("table {} exists", req.name)));
            }
            // Admission: the live servers must be able to hold every
            // tablet (with none live yet, as one server would).
            let held: usize = st.tables.values().map(|t| t.tablets.len()).sum();
            let live = st.servers.len().max(1);
            let room = live.saturating_mul(m.cfg.tablets_per_server_max);
            if held + splits.len() + 1 > room {
                return Err(
                    tablinum_proto::error::Detail::limit("tablets_per_server_max").status(
                        tonic::Code::ResourceExhausted,
                        format!(
                            "table {} needs {} tablets; {held} exist and {live} live server(s) \
                             hold at most {room} (tablets_per_server_max = {})",
                            req.name,
                            splits.len() + 1,
                            m.cfg.tablets_per_server_max
                        ),
                    ),
                );
            }
            let id = st.next_table_id;
            let mut bounds = vec![Vec::new()];
            bounds.extend(splits);
            let tablets = bounds
                .iter()
                .enumerate()
                .map(|(i, s)| TabletRecord {
                    id: i as u64,
                    start: s.clone(),
                    end: bounds.get(i + 1).cloned().unwrap_or_default(),
                    server_id: String::new(),
                    files: Vec::new(),
                    epoch: 0,
                })
                .collect();
            let rec = TableRecord {
                name: req.name.clone(),
                id,
                durability: req.durability,
                tablets,
            };
            // The id counter and the table in one atomic write.
            let mut b = Batch::new();
            b.put(KEY_NEXT_TABLE_ID, &(id + 1).to_be_bytes());
            b.put(
                &[KEY_TABLE, rec.name.as_bytes()].concat(),
                &rec.encode_to_vec(),
            );
            m.write(&b)?;
            st.next_table_id = id + 1;
            st.tables.insert(rec.name.clone(), rec.clone());
            rec
        };
        tracing::info!(table = %rec.name, id = rec.id, tablets = rec.tablets.len(),
            durability = durability_name(rec.durability), by = %who, "table created");
        m.rebalance()?;
        Ok(Response::new(v1::CreateTableResponse {
            table: Some(table_msg(&rec)),
        }))
    }

    async fn drop_table(
        &self,
        req: Request<v1::DropTableRequest>,
    ) -> Result<Response<v1::DropTableResponse>, Status> {
        let who = authorize(&req, Need::Admin, "DropTable")?;
        let name = req.into_inner().name;
        tablinum_proto::check_table_name(&name).map_err(Status::invalid_argument)?;
        let m = &self.0;
        let id = {
            let mut st = m.state.lock();
            let Some(t) = st.tables.get(&name).cloned() else {
                return Err(Status::not_found(format!("table {name} does not exist")));
            };
            // The drop marker and the table's removal in one atomic write.
            let mut b = Batch::new();
            b.put(&[KEY_DROPPED, &t.id.to_be_bytes()].concat(), b"");
            b.delete(&[KEY_TABLE, name.as_bytes()].concat());
            m.write(&b)?;
            st.tables.remove(&name);
            let beats: HashMap<String, u64> = st
                .servers
                .iter()
                .map(|(id, l)| (id.clone(), l.beats))
                .collect();
            st.dropped.insert(t.id, beats);
            t.id
        };
        tracing::info!(table = %name, id, by = %who, "table dropped");
        // Return only once no live server serves the table any more: a
        // client with a stale map must not have a write acknowledged into a
        // table that is being removed. The rule is the one its files wait
        // for (`State::released`): two heartbeats of every server after the
        // drop, the second showing none of its tablets. Bounded: a server
        // silent this long is being declared dead anyway. (The files may
        // be gone by the time this returns; they may also wait longer, for
        // scan servers' reservations.)
        let deadline = Instant::now() + 2 * m.cfg.heartbeat_timeout();
        loop {
            // Removed from `dropped` once its files are gone: released.
            let held = {
                let st = m.state.lock();
                st.dropped.contains_key(&id) && !st.released(id)
            };
            if !held || Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(DROP_POLL).await;
        }
        Ok(Response::new(v1::DropTableResponse {}))
    }

    async fn list_tables(
        &self,
        req: Request<v1::ListTablesRequest>,
    ) -> Result<Response<v1::ListTablesResponse>, Status> {
        authorize(&req, Need::Read, "ListTables")?;
        let st = self.0.state.lock();
        Ok(Response::new(v1::ListTablesResponse {
            tables: st.tables.values().map(table_msg).collect(),
        }))
    }

    async fn tablet_map(
        &self,
        req: Request<v1::TabletMapRequest>,
    ) -> Result<Response<v1::TabletMapResponse>, Status> {
        authorize(&req, Need::Read, "TabletMap")?;
        let name = req.into_inner().table;
        tablinum_proto::check_table_name(&name).map_err(Status::invalid_argument)?;
        let st = self.0.state.lock();
        let Some(t) = st.tables.get(&name) else {
            return Err(Status::not_found(format!("table {name} does not exist")));
        };
        let tablets = t
            .tablets
            .iter()
            .map(|tab| v1::Tablet {
                id: tab.id,
                start: tab.start.clone(),
                end: tab.end.clone(),
                server: st
                    .servers
                    .get(&tab.server_id)
                    .map(|l| l.address.clone())
                    .unwrap_or_default(),
                files: tab.files.clone(),
            })
            .collect();
        Ok(Response::new(v1::TabletMapResponse {
            table: Some(table_msg(t)),
            tablets,
        }))
    }

    async fn cluster_status(
        &self,
        req: Request<v1::ClusterStatusRequest>,
    ) -> Result<Response<v1::ClusterStatusResponse>, Status> {
        authorize(&req, Need::Read, "ClusterStatus")?;
        let s = self.0.snapshot();
        Ok(Response::new(v1::ClusterStatusResponse {
            servers: s.servers,
            tables: s.tables,
            tablets_unassigned: s.tablets_unassigned,
            scan_servers: s.scan_servers,
        }))
    }

    async fn scan_server_heartbeat(
        &self,
        req: Request<v1::ScanServerHeartbeatRequest>,
    ) -> Result<Response<v1::ScanServerHeartbeatResponse>, Status> {
        authorize(&req, Need::Cluster, "ScanServerHeartbeat")?;
        let hb = req.into_inner();
        check_scan_server_heartbeat(&hb).map_err(Status::invalid_argument)?;
        let m = &self.0;
        let mut st = m.state.lock();
        let timeout = m.cfg.heartbeat_timeout();
        // A new process at the address of a live one replaces it.
        st.scan_servers
            .retain(|id, l| *id == hb.server_id || l.status.address != hb.address);
        let joined = st
            .scan_servers
            .get(&hb.server_id)
            .is_none_or(|l| l.last.elapsed() >= timeout);
        if joined {
            tracing::info!(server = %hb.server_id, address = %hb.address, group = %hb.group,
                "scan server joined");
        }
        st.scan_servers.insert(
            hb.server_id.clone(),
            ScanLive {
                last: Instant::now(),
                tokens_version: hb.tokens_version,
                status: v1::ScanServerStatus {
                    id: hb.server_id.clone(),
                    address: hb.address.clone(),
                    http: hb.http.clone(),
                    group: hb.group.clone(),
                    last_heartbeat_ms: 0,
                    scans_running: hb.scans_running,
                    queue_depth: hb.queue_depth,
                    batches_total: hb.batches_total,
                    busy_total: hb.busy_total,
                    served_by_attempt: hb.served_by_attempt.clone(),
                    served_by_plan: hb.served_by_plan.clone(),
                },
            },
        );
        // Forget servers silent for long (a listing skips them already).
        st.scan_servers
            .retain(|_, l| l.last.elapsed() < 10 * timeout);
        let (tokens_changed, tokens) = st.token_update(hb.tokens_version, &m.verifier);
        Ok(Response::new(v1::ScanServerHeartbeatResponse {
            tokens_version: st.tokens_version,
            tokens,
            tokens_changed,
            token_lease_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
            dropped_table_ids: st.dropped.keys().copied().collect(),
        }))
    }

    async fn submit_flow(
        &self,
        req: Request<v1::SubmitFlowRequest>,
    ) -> Result<Response<v1::SubmitFlowResponse>, Status> {
        let who = authorize(&req, Need::Admin, "SubmitFlow")?;
        let r = req.into_inner();
        tablinum_proto::check_flow_name(&r.name).map_err(Status::invalid_argument)?;
        if r.definition.len() > tablinum_proto::FLOW_DEFINITION_BYTES_MAX {
            return Err(Status::invalid_argument(format!(
                "flow definition is {} bytes; at most {} are allowed",
                r.definition.len(),
                tablinum_proto::FLOW_DEFINITION_BYTES_MAX
            )));
        }
        if r.tasks == 0 || r.tasks > tablinum_proto::FLOW_TASKS_MAX {
            return Err(Status::invalid_argument(format!(
                "flow {} has {} tasks; allowed are 1..={}",
                r.name,
                r.tasks,
                tablinum_proto::FLOW_TASKS_MAX
            )));
        }
        let m = &self.0;
        let mut st = m.state.lock();
        let rec = st
            .flows
            .submit(&r.name, &r.definition, r.tasks)
            // ABORTED: nothing changed, the caller decides (FAILED_PRECONDITION
            // is what a moved tablet answers, and clients retry it).
            .map_err(Status::aborted)?;
        let started = rec.is_some();
        if let Some(rec) = rec {
            m.save_flows(std::slice::from_ref(&rec))?;
            tracing::info!(flow = %r.name, tasks = r.tasks, by = %who, "flow submitted");
            let changed = st.flows.place(Instant::now(), m.cfg.heartbeat_timeout());
            m.save_flows(&changed)?;
        }
        Ok(Response::new(v1::SubmitFlowResponse { started }))
    }

    async fn stop_flow(
        &self,
        req: Request<v1::StopFlowRequest>,
    ) -> Result<Response<v1::StopFlowResponse>, Status> {
        let who = authorize(&req, Need::Admin, "StopFlow")?;
        let name = req.into_inner().name;
        tablinum_proto::check_flow_name(&name).map_err(Status::invalid_argument)?;
        let m = &self.0;
        let mut st = m.state.lock();
        let rec = st.flows.stop(&name).map_err(Status::not_found)?;
        m.save_flows(std::slice::from_ref(&rec))?;
        tracing::info!(flow = %name, by = %who, "flow stopped");
        Ok(Response::new(v1::StopFlowResponse {}))
    }

    async fn drop_flow(
        &self,
        req: Request<v1::DropFlowRequest>,
    ) -> Result<Response<v1::DropFlowResponse>, Status> {
        let who = authorize(&req, Need::Admin, "DropFlow")?;
        let name = req.into_inner().name;
        tablinum_proto::check_flow_name(&name).map_err(Status::invalid_argument)?;
        let m = &self.0;
        let mut st = m.state.lock();
        st.flows.drop_flow(&name).map_err(|e| {
            if e.starts_with("no flow") {
                Status::not_found(e)
            } else {
                Status::aborted(e)
            }
        })?;
        m.delete(&[KEY_FLOW, name.as_bytes()].concat())?;
        tracing::info!(flow = %name, by = %who, "flow dropped");
        Ok(Response::new(v1::DropFlowResponse {}))
    }

    async fn list_flows(
        &self,
        req: Request<v1::ListFlowsRequest>,
    ) -> Result<Response<v1::ListFlowsResponse>, Status> {
        authorize(&req, Need::Read, "ListFlows")?;
        let st = self.0.state.lock();
        Ok(Response::new(v1::ListFlowsResponse {
            flows: st.flows.statuses(Instant::now()),
        }))
    }

    async fn worker_heartbeat(
        &self,
        req: Request<v1::WorkerHeartbeatRequest>,
    ) -> Result<Response<v1::WorkerHeartbeatResponse>, Status> {
        authorize(&req, Need::Cluster, "WorkerHeartbeat")?;
        let hb = req.into_inner();
        crate::flows::check_worker_heartbeat(&hb).map_err(Status::invalid_argument)?;
        let m = &self.0;
        let mut st = m.state.lock();
        let now = Instant::now();
        st.flows.heartbeat(&hb, now);
        let changed = st.flows.place(now, m.cfg.heartbeat_timeout());
        m.save_flows(&changed)?;
        let (tasks, flows) = st.flows.leases(&hb.worker_id);
        drop(st);
        Ok(Response::new(v1::WorkerHeartbeatResponse {
            tasks,
            flows,
            lease_ms: m.cfg.lease_ms(),
        }))
    }

    async fn list_scan_servers(
        &self,
        req: Request<v1::ListScanServersRequest>,
    ) -> Result<Response<v1::ListScanServersResponse>, Status> {
        authorize(&req, Need::Read, "ListScanServers")?;
        let group = req.into_inner().group;
        let st = self.0.state.lock();
        Ok(Response::new(v1::ListScanServersResponse {
            scan_servers: scan_server_statuses(&st, self.0.cfg.heartbeat_timeout(), &group),
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        authorize(&req, Need::Cluster, "Heartbeat")?;
        let hb = req.into_inner();
        check_heartbeat(&hb).map_err(Status::invalid_argument)?;
        let m = &self.0;
        {
            let mut st = m.state.lock();
            if let Some(l) = st.servers.get(&hb.server_id) {
                if l.address != hb.address && l.reported {
                    return Err(tablinum_proto::error::status(
                        tonic::Code::FailedPrecondition,
                        tablinum_proto::error::ErrorReason::BadRequest,
                        format!(
                            "server {} is live at {}; a server id keeps the address it joined \
                             with",
                            hb.server_id, l.address
                        ),
                    ));
                }
            }
            if !st.servers.contains_key(&hb.server_id) {
                // A new process at the address of a server we think is live:
                // that one is gone (the address is bound by the newcomer), so
                // its tablets move now, not after the heartbeat timeout.
                let stale: Vec<String> = st
                    .servers
                    .iter()
                    .filter(|(_, l)| l.address == hb.address)
                    .map(|(id, _)| id.clone())
                    .collect();
                for id in stale {
                    st.servers.remove(&id);
                    m.delete(&[KEY_SERVER, id.as_bytes()].concat())?;
                    m.counters.lock().0 += 1;
                    tracing::info!(server = %id, successor = %hb.server_id, address = %hb.address,
                        "tablet server replaced at its address; reassigning its tablets");
                }
            }
            let known = st
                .servers
                .get(&hb.server_id)
                .is_some_and(|l| l.address == hb.address && l.http == hb.http);
            if !known {
                let rec = ServerRecord {
                    id: hb.server_id.clone(),
                    address: hb.address.clone(),
                    http: hb.http.clone(),
                };
                m.put(
                    &[KEY_SERVER, hb.server_id.as_bytes()].concat(),
                    &rec.encode_to_vec(),
                )?;
                if !st.servers.contains_key(&hb.server_id) {
                    tracing::info!(server = %hb.server_id, address = %hb.address, "tablet server joined");
                }
            }
            let hosted: HashSet<(u64, u64)> = hb
                .tablets
                .iter()
                .map(|t| (t.table_id, t.tablet_id))
                .collect();
            let names: HashMap<u64, &str> = st
                .tables
                .values()
                .map(|t| (t.id, t.name.as_str()))
                .collect();
            let faults: Vec<v1::TabletFault> = hb
                .tablets
                .iter()
                .filter(|t| t.condition != v1::TabletCondition::TabletServing as i32)
                .map(|t| v1::TabletFault {
                    table_id: t.table_id,
                    tablet_id: t.tablet_id,
                    table: names
                        .get(&t.table_id)
                        .map_or(String::new(), |n| n.to_string()),
                    condition: t.condition,
                    reason: t.condition_reason.clone(),
                    io_stalled_ms: t.io_stalled_ms,
                })
                .collect();
            for f in &faults {
                let was = st.servers.get(&hb.server_id).is_some_and(|l| {
                    l.faults.iter().any(|g| {
                        (g.table_id, g.tablet_id, g.condition)
                            == (f.table_id, f.tablet_id, f.condition)
                    })
                });
                if !was {
                    tracing::warn!(server = %hb.server_id, table = %f.table, tablet = f.tablet_id,
                        condition = ?v1::TabletCondition::try_from(f.condition).unwrap_or_default(),
                        reason = %f.reason, "tablet not serving normally");
                }
            }
            let prev_beats = st.servers.get(&hb.server_id).map_or(0, |l| l.beats);
            st.servers.insert(
                hb.server_id.clone(),
                Live {
                    address: hb.address.clone(),
                    http: hb.http.clone(),
                    last: Instant::now(),
                    reported: true,
                    beats: prev_beats + 1,
                    hosted,
                    faults,
                    rows_written: hb.rows_written,
                    rows_read: hb.rows_read,
                    tokens_version: hb.tokens_version,
                },
            );
            // Publish each hosted tablet's immutable files.
            let by_id: HashMap<u64, String> =
                st.tables.values().map(|t| (t.id, t.name.clone())).collect();
            let mut dirty: Vec<String> = Vec::new();
            for h in hb.tablets.iter().filter(|h| !h.opening && !h.closing) {
                let Some(name) = by_id.get(&h.table_id) else {
                    continue;
                };
                let t = st.tables.get_mut(name).expect("table");
                if let Some(tab) = t.tablets.iter_mut().find(|x| {
                    x.id == h.tablet_id && x.server_id == hb.server_id && x.epoch == h.epoch
                }) {
                    if tab.files != h.files {
                        tab.files = h.files.clone();
                        if !dirty.contains(name) {
                            dirty.push(name.clone());
                        }
                    }
                }
            }
            for name in dirty {
                let t = st.tables[&name].clone();
                m.save_table(&t)?;
            }
        }
        m.rebalance()?;
        let st = m.state.lock();
        let (tokens_changed, tokens) = st.token_update(hb.tokens_version, &m.verifier);
        let assignments = st
            .tables
            .values()
            .flat_map(|t| {
                t.tablets
                    .iter()
                    .filter(|tab| tab.server_id == hb.server_id)
                    .map(move |tab| v1::Assignment {
                        table: t.name.clone(),
                        table_id: t.id,
                        tablet_id: tab.id,
                        start: tab.start.clone(),
                        end: tab.end.clone(),
                        durability: t.durability,
                        epoch: tab.epoch,
                    })
            })
            .collect();
        Ok(Response::new(v1::HeartbeatResponse {
            assignments,
            tokens_version: st.tokens_version,
            tokens,
            tokens_changed,
            lease_ms: m.cfg.lease_ms(),
        }))
    }

    async fn create_token(
        &self,
        req: Request<v1::CreateTokenRequest>,
    ) -> Result<Response<v1::CreateTokenResponse>, Status> {
        let who = authorize(&req, Need::Admin, "CreateToken")?;
        let r = req.into_inner();
        let role = Role::from_i32(r.role).ok_or_else(|| {
            Status::invalid_argument(format!(
                "role {} is not one of READ (1), WRITE (2), ADMIN (3)",
                r.role
            ))
        })?;
        tablinum_proto::check_token_name(&r.name).map_err(Status::invalid_argument)?;
        let (rec, token) = self.0.add_token(role, &r.name)?;
        let version = self.0.state.lock().tokens_version;
        self.0.tokens_everywhere(version).await;
        tracing::info!(id = %rec.id, role = role.name(), name = %rec.name, by = %who, "token created");
        Ok(Response::new(v1::CreateTokenResponse {
            info: Some(rec.info()),
            token: token.expose().to_string(),
        }))
    }

    async fn list_tokens(
        &self,
        req: Request<v1::ListTokensRequest>,
    ) -> Result<Response<v1::ListTokensResponse>, Status> {
        authorize(&req, Need::Admin, "ListTokens")?;
        let st = self.0.state.lock();
        Ok(Response::new(v1::ListTokensResponse {
            tokens: st.tokens.values().map(TokenRecord::info).collect(),
        }))
    }

    async fn revoke_token(
        &self,
        req: Request<v1::RevokeTokenRequest>,
    ) -> Result<Response<v1::RevokeTokenResponse>, Status> {
        let who = authorize(&req, Need::Admin, "RevokeToken")?;
        let id = req.into_inner().id;
        let m = &self.0;
        let version = {
            let mut st = m.state.lock();
            if !st.tokens.contains_key(&id) {
                return Err(Status::not_found(format!(
                    "token {:?} does not exist (ids are 12 hex digits, as `tablinum token list` shows)",
                    id.chars().take(64).collect::<String>()
                )));
            }
            let version = st.tokens_version + 1;
            let mut b = Batch::new();
            b.delete(&[KEY_TOKEN, id.as_bytes()].concat());
            b.put(KEY_TOKENS_VERSION, &version.to_be_bytes());
            m.write(&b)?;
            st.tokens.remove(&id);
            st.tokens_version = version;
            m.verifier.set_tokens(version, st.grants());
            version
        };
        tracing::info!(id = %id, by = %who, "token revoked");
        m.tokens_everywhere(version).await;
        Ok(Response::new(v1::RevokeTokenResponse {}))
    }
}

/// Checks every field of a heartbeat against its limits; the error names
/// the field.
fn check_scan_server_heartbeat(hb: &v1::ScanServerHeartbeatRequest) -> Result<(), String> {
    tablinum_proto::check_server_id(&hb.server_id)?;
    tablinum_proto::check_address("address", &hb.address)?;
    tablinum_proto::check_address("http", &hb.http)?;
    tablinum_proto::check_group(&hb.group)?;
    for (name, v) in [
        ("served_by_attempt", &hb.served_by_attempt),
        ("served_by_plan", &hb.served_by_plan),
    ] {
        if v.len() > tablinum_proto::SERVED_BUCKETS {
            return Err(format!(
                "{name} has {} entries; at most {} are allowed",
                v.len(),
                tablinum_proto::SERVED_BUCKETS
            ));
        }
    }
    Ok(())
}

fn check_heartbeat(hb: &v1::HeartbeatRequest) -> Result<(), String> {
    tablinum_proto::check_server_id(&hb.server_id)?;
    tablinum_proto::check_address("address", &hb.address)?;
    tablinum_proto::check_address("http", &hb.http)?;
    if hb.tablets.len() > tablinum_proto::HEARTBEAT_TABLETS_MAX {
        return Err(format!(
            "a heartbeat reports {} tablets; the limit is {}",
            hb.tablets.len(),
            tablinum_proto::HEARTBEAT_TABLETS_MAX
        ));
    }
    for t in &hb.tablets {
        if t.files.len() > tablinum_proto::TABLET_FILES_MAX {
            return Err(format!(
                "tablet {} of table {} reports {} files; the limit is {}",
                t.tablet_id,
                t.table_id,
                t.files.len(),
                tablinum_proto::TABLET_FILES_MAX
            ));
        }
        for f in &t.files {
            tablinum_proto::check_file_path(f)
                .map_err(|e| format!("tablet {} of table {}: {e}", t.tablet_id, t.table_id))?;
        }
        if v1::TabletCondition::try_from(t.condition).is_err() {
            return Err(format!(
                "tablet {} of table {} reports unknown condition {}",
                t.tablet_id, t.table_id, t.condition
            ));
        }
        if t.condition_reason.len() > tablinum_proto::TABLET_CONDITION_REASON_BYTES_MAX {
            return Err(format!(
                "tablet {} of table {} reports a {}-byte condition reason; the limit is {}",
                t.tablet_id,
                t.table_id,
                t.condition_reason.len(),
                tablinum_proto::TABLET_CONDITION_REASON_BYTES_MAX
            ));
        }
    }
    Ok(())
}

/// Runs `rebalance` every quarter heartbeat timeout (at most 250 ms) until
/// the manager is dropped elsewhere and `stop` fires.
pub async fn ticker(m: Arc<Manager>, mut stop: tokio::sync::watch::Receiver<bool>) {
    let period = (m.cfg.heartbeat_timeout() / 4).min(Duration::from_millis(250));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = stop.changed() => return,
        }
        if let Err(e) = m.rebalance() {
            tracing::error!(error = %e.message(), "rebalance failed");
        }
        if let Err(e) = m.place_flows() {
            tracing::error!(error = %e.message(), "flow placement failed");
        }
    }
}

/// Whether a scan server still reserves files in any tablet directory of a
/// dropped table's directory `dir`.
fn tablets_reserved(dir: &std::path::Path) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.flatten()
        .any(|e| tablinum_engine::store::reserve::any_reserved(&e.path()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn even_splits_are_increasing_and_distinct() {
        for q in [1u32, 2, 3, 8, 192, 4096] {
            let s = even_splits(q);
            assert_eq!(s.len() as u32, q - 1);
            assert!(s.windows(2).all(|w| w[0] < w[1]), "q={q}");
        }
        assert_eq!(even_splits(2), vec![vec![0x80, 0]]);
    }

    #[test]
    fn create_requests_are_checked() {
        let ok = v1::CreateTableRequest {
            name: "t".into(),
            tablets: 4,
            ..Default::default()
        };
        assert_eq!(check_create(&ok).unwrap().len(), 3);
        let bad = |r: v1::CreateTableRequest| check_create(&r).unwrap_err().message().to_string();
        assert!(bad(v1::CreateTableRequest {
            tablets: 0,
            ..ok.clone()
        })
        .contains("out of range"));
        assert!(bad(v1::CreateTableRequest {
            tablets: 5000,
            ..ok.clone()
        })
        .contains("out of range"));
        assert!(bad(v1::CreateTableRequest {
            name: String::new(),
            ..ok.clone()
        })
        .contains("empty"));
        assert!(bad(v1::CreateTableRequest {
            split_points: vec![b"b".to_vec(), b"a".to_vec()],
            tablets: 0,
            ..ok.clone()
        })
        .contains("strictly increasing"));
        assert!(bad(v1::CreateTableRequest {
            durability: 7,
            ..ok
        })
        .contains("durability 7"));
    }
}
