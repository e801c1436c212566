//! The manager: the cluster's metadata authority.
//!
//! Owns tables, tablets and their assignments, kept durably in an engine
//! store (`<data>/`, Sync durability; record layouts in docs/format.md), and
//! the live-server view built from heartbeats. It assigns unassigned tablets
//! to the least-loaded live server, moves tablets to servers that join until
//! the counts differ by at most one, declares a server dead after
//! `heartbeat_timeout_ms` without a heartbeat and reassigns its tablets (the
//! new owner recovers each tablet from its journal under the shared storage
//! root), and removes a dropped table's files once no server holds them.
//!
//! Never touches a tablet's files while a live server may hold them open.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::ops::Bound;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prost::Message;
use tablinum_engine::{Batch, Durability as EngineDurability, Options, Store};
use tablinum_proto::v1::{self, manager_server::Manager as ManagerRpc};
use tonic::{Request, Response, Status};

use crate::config::ManagerConfig;
use crate::status_from_engine;

const KEY_TABLE: &[u8] = b"table/";
const KEY_SERVER: &[u8] = b"server/";
const KEY_DROPPED: &[u8] = b"dropped/";
const KEY_NEXT_TABLE_ID: &[u8] = b"next_table_id";
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
    rows_written: u64,
    rows_read: u64,
}

#[derive(Debug, Default)]
struct State {
    tables: BTreeMap<String, TableRecord>,
    servers: HashMap<String, Live>,
    dropped: BTreeMap<u64, ()>,
    next_table_id: u64,
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
    /// Servers declared dead since start.
    pub servers_expired: u64,
    /// Tablet moves since start.
    pub reassignments: u64,
}

/// The manager role.
pub struct Manager {
    store: Store,
    state: Mutex<State>,
    cfg: ManagerConfig,
    counters: Mutex<(u64, u64)>,
}

fn corrupt(what: &str, e: impl std::fmt::Display) -> Status {
    Status::internal(format!("metadata record {what} does not decode: {e}"))
}

impl Manager {
    /// Opens (or creates) the metadata store and loads it.
    pub fn open(cfg: ManagerConfig) -> Result<Arc<Manager>, String> {
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
                    rows_written: 0,
                    rows_read: 0,
                },
            );
        }
        for (k, _) in load(KEY_DROPPED)? {
            let id = k[KEY_DROPPED.len()..]
                .try_into()
                .map(u64::from_be_bytes)
                .map_err(|_| "manager metadata: bad dropped-table key".to_string())?;
            st.dropped.insert(id, ());
        }
        if let Some(v) = store
            .get(KEY_NEXT_TABLE_ID)
            .map_err(|e| format!("cannot read manager metadata: {e}"))?
        {
            let b: [u8; 8] = v
                .as_slice()
                .try_into()
                .map_err(|_| "manager metadata: next_table_id is not 8 bytes".to_string())?;
            st.next_table_id = u64::from_be_bytes(b);
        }
        Ok(Arc::new(Manager {
            store,
            state: Mutex::new(st),
            cfg,
            counters: Mutex::new((0, 0)),
        }))
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

    /// Expires dead servers, assigns and balances tablets, persists what
    /// changed. Called on every heartbeat and by the ticker.
    pub fn rebalance(&self) -> Result<(), Status> {
        let mut st = self.state.lock();
        let timeout = self.cfg.heartbeat_timeout();
        let dead: Vec<String> = st
            .servers
            .iter()
            .filter(|(_, l)| l.last.elapsed() > timeout)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &dead {
            st.servers.remove(id);
            eprintln!("manager: tablet server {id} missed heartbeats for {timeout:?}; reassigning its tablets");
            self.delete(&[KEY_SERVER, id.as_bytes()].concat())?;
            self.counters.lock().0 += 1;
        }
        let live: Vec<String> = {
            let mut v: Vec<String> = st.servers.keys().cloned().collect();
            v.sort();
            v
        };
        let mut load: HashMap<String, usize> = live.iter().map(|s| (s.clone(), 0)).collect();
        for t in st.tables.values() {
            for tab in &t.tablets {
                if let Some(n) = load.get_mut(&tab.server_id) {
                    *n += 1;
                }
            }
        }
        let mut changed: Vec<String> = Vec::new();
        let mut moves = 0u64;
        let names: Vec<String> = st.tables.keys().cloned().collect();
        for name in &names {
            let t = st.tables.get_mut(name).expect("table");
            let mut dirty = false;
            for tab in &mut t.tablets {
                if !load.contains_key(&tab.server_id) {
                    if let Some(target) = least_loaded(&load) {
                        tab.server_id = target.clone();
                        *load.get_mut(&target).expect("live") += 1;
                        dirty = true;
                        moves += 1;
                    } else if !tab.server_id.is_empty() {
                        tab.server_id.clear();
                        dirty = true;
                    }
                }
            }
            if dirty {
                changed.push(name.clone());
            }
        }
        // Balance: move tablets from the most to the least loaded server
        // while they differ by more than one.
        'balance: while let (Some(max), Some(min)) = (most_loaded(&load), least_loaded(&load)) {
            if load[&max] <= load[&min] + 1 {
                break;
            }
            for name in &names {
                let t = st.tables.get_mut(name).expect("table");
                if let Some(tab) = t.tablets.iter_mut().find(|x| x.server_id == max) {
                    tab.server_id = min.clone();
                    *load.get_mut(&max).expect("live") -= 1;
                    *load.get_mut(&min).expect("live") += 1;
                    moves += 1;
                    if !changed.contains(name) {
                        changed.push(name.clone());
                    }
                    continue 'balance;
                }
            }
            break;
        }
        for name in changed {
            let t = st.tables[&name].clone();
            self.save_table(&t)?;
        }
        self.counters.lock().1 += moves;
        // Remove dropped tables' files once no live server holds a tablet,
        // and only when every live server has reported since this manager
        // started (before that, `hosted` is unknown).
        let dropped: Vec<u64> = st.dropped.keys().copied().collect();
        let all_reported = st.servers.values().all(|l| l.reported);
        let live_ids: HashSet<u64> = st.tables.values().map(|t| t.id).collect();
        for id in dropped {
            let held = !all_reported
                || live_ids.contains(&id)
                || st
                    .servers
                    .values()
                    .any(|l| l.hosted.iter().any(|(t, _)| *t == id));
            if !held {
                let dir = self.tablet_dir(id);
                if let Err(e) = std::fs::remove_dir_all(&dir) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        eprintln!("manager: cannot remove {}: {e}", dir.display());
                        continue;
                    }
                }
                self.delete(&[KEY_DROPPED, &id.to_be_bytes()].concat())?;
                st.dropped.remove(&id);
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
            servers_expired,
            reassignments,
        }
    }
}

fn least_loaded(load: &HashMap<String, usize>) -> Option<String> {
    load.iter()
        .min_by(|a, b| a.1.cmp(b.1).then(a.0.cmp(b.0)))
        .map(|(k, _)| k.clone())
}

fn most_loaded(load: &HashMap<String, usize>) -> Option<String> {
    load.iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(k, _)| k.clone())
}

fn table_msg(t: &TableRecord) -> v1::Table {
    v1::Table {
        name: t.name.clone(),
        id: t.id,
        durability: t.durability,
        tablets: u32::try_from(t.tablets.len()).unwrap_or(u32::MAX),
    }
}

fn unassigned(st: &State) -> u32 {
    let n = st
        .tables
        .values()
        .flat_map(|t| &t.tablets)
        .filter(|t| !st.servers.contains_key(&t.server_id))
        .count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn server_statuses(st: &State) -> Vec<v1::ServerStatus> {
    let mut counts: HashMap<&str, u32> = HashMap::new();
    for tab in st.tables.values().flat_map(|t| &t.tablets) {
        *counts.entry(tab.server_id.as_str()).or_default() += 1;
    }
    let mut v: Vec<v1::ServerStatus> = st
        .servers
        .iter()
        .map(|(id, l)| v1::ServerStatus {
            id: id.clone(),
            address: l.address.clone(),
            http: l.http.clone(),
            tablets: counts.get(id.as_str()).copied().unwrap_or(0),
            last_heartbeat_ms: u64::try_from(l.last.elapsed().as_millis()).unwrap_or(u64::MAX),
            rows_written: l.rows_written,
            rows_read: l.rows_read,
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
        let req = req.into_inner();
        let splits = check_create(&req)?;
        let m = &self.0;
        let rec = {
            let mut st = m.state.lock();
            if st.tables.contains_key(&req.name) {
                return Err(Status::already_exists(format!("table {} exists", req.name)));
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
        m.rebalance()?;
        Ok(Response::new(v1::CreateTableResponse {
            table: Some(table_msg(&rec)),
        }))
    }

    async fn drop_table(
        &self,
        req: Request<v1::DropTableRequest>,
    ) -> Result<Response<v1::DropTableResponse>, Status> {
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
            st.dropped.insert(t.id, ());
            let beats: HashMap<String, u64> = st
                .servers
                .iter()
                .map(|(id, l)| (id.clone(), l.beats))
                .collect();
            (t.id, beats)
        };
        let (id, beats_at_drop) = id;
        // Return only once no live server serves the table any more: a
        // client with a stale map must not have a write acknowledged into a
        // table that is being removed. Each server needs two heartbeats
        // after the drop: the answer to the first withdraws the tablets
        // (closing them, and discarding opens still under way), the second
        // is sent after that and must show none of them. Bounded: a server
        // silent this long is being declared dead anyway.
        let deadline = Instant::now() + 2 * m.cfg.heartbeat_timeout();
        loop {
            let held = {
                let st = m.state.lock();
                st.servers.iter().any(|(sid, l)| {
                    let since = l.beats - beats_at_drop.get(sid).copied().unwrap_or(0);
                    since < 2 || l.hosted.iter().any(|(t, _)| *t == id)
                })
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
        _req: Request<v1::ListTablesRequest>,
    ) -> Result<Response<v1::ListTablesResponse>, Status> {
        let st = self.0.state.lock();
        Ok(Response::new(v1::ListTablesResponse {
            tables: st.tables.values().map(table_msg).collect(),
        }))
    }

    async fn tablet_map(
        &self,
        req: Request<v1::TabletMapRequest>,
    ) -> Result<Response<v1::TabletMapResponse>, Status> {
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
        _req: Request<v1::ClusterStatusRequest>,
    ) -> Result<Response<v1::ClusterStatusResponse>, Status> {
        let s = self.0.snapshot();
        Ok(Response::new(v1::ClusterStatusResponse {
            servers: s.servers,
            tables: s.tables,
            tablets_unassigned: s.tablets_unassigned,
        }))
    }

    async fn heartbeat(
        &self,
        req: Request<v1::HeartbeatRequest>,
    ) -> Result<Response<v1::HeartbeatResponse>, Status> {
        let hb = req.into_inner();
        if hb.server_id.is_empty() || hb.address.is_empty() {
            return Err(Status::invalid_argument(
                "heartbeat needs a server_id and an address",
            ));
        }
        let m = &self.0;
        {
            let mut st = m.state.lock();
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
                    eprintln!(
                        "manager: tablet server {} joined at {}",
                        hb.server_id, hb.address
                    );
                }
            }
            let hosted: HashSet<(u64, u64)> = hb
                .tablets
                .iter()
                .map(|t| (t.table_id, t.tablet_id))
                .collect();
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
                    rows_written: hb.rows_written,
                    rows_read: hb.rows_read,
                },
            );
            // Publish each hosted tablet's immutable files.
            let by_id: HashMap<u64, String> =
                st.tables.values().map(|t| (t.id, t.name.clone())).collect();
            let mut dirty: Vec<String> = Vec::new();
            for h in &hb.tablets {
                let Some(name) = by_id.get(&h.table_id) else {
                    continue;
                };
                let t = st.tables.get_mut(name).expect("table");
                if let Some(tab) = t
                    .tablets
                    .iter_mut()
                    .find(|x| x.id == h.tablet_id && x.server_id == hb.server_id)
                {
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
                    })
            })
            .collect();
        Ok(Response::new(v1::HeartbeatResponse { assignments }))
    }
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
            eprintln!("manager: rebalance failed: {}", e.message());
        }
    }
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
