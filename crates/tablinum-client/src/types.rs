//! The client's own types: what callers write, read and are told, in Rust
//! terms. Only this module knows how they map to the generated wire
//! structs of `tablinum-proto`, so a change of the wire format stops here.

use tablinum_proto::v1;

/// Durability of a table's acknowledged writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// Acknowledge after fsync (group commit).
    #[default]
    Sync,
    /// Acknowledge after the write reached the OS; fsync on segment roll.
    Nosync,
}

impl Durability {
    pub(crate) fn wire(self) -> i32 {
        match self {
            Durability::Sync => v1::Durability::Sync as i32,
            Durability::Nosync => v1::Durability::Nosync as i32,
        }
    }

    pub(crate) fn from_wire(d: i32) -> Durability {
        if d == v1::Durability::Nosync as i32 {
            Durability::Nosync
        } else {
            Durability::Sync
        }
    }
}

/// One change to one object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mutation {
    /// 1..=4096 bytes.
    pub key: Vec<u8>,
    /// Up to 64 MiB; ignored for deletes.
    pub value: Vec<u8>,
    /// Delete the object instead of writing it.
    pub delete: bool,
    /// Up to 16 KiB, returned by head.
    pub metadata: Vec<u8>,
    /// Secondary-index terms; they replace the object's old terms.
    pub index_terms: Vec<IndexTerm>,
}

/// A secondary-index term of an object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IndexTerm {
    /// The index's name, 1..=64 bytes.
    pub index: Vec<u8>,
    /// The term, up to 1024 bytes.
    pub term: Vec<u8>,
}

impl From<Mutation> for v1::Mutation {
    fn from(m: Mutation) -> Self {
        v1::Mutation {
            key: m.key,
            value: m.value,
            delete: m.delete,
            metadata: m.metadata,
            index_terms: m.index_terms.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<IndexTerm> for v1::IndexTerm {
    fn from(t: IndexTerm) -> Self {
        v1::IndexTerm {
            index: t.index,
            term: t.term,
        }
    }
}

impl From<v1::IndexTerm> for IndexTerm {
    fn from(t: v1::IndexTerm) -> Self {
        IndexTerm {
            index: t.index,
            term: t.term,
        }
    }
}

/// An object's metadata, as head returns it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Head {
    /// Sequence number of its last write in its tablet.
    pub seq: u64,
    /// Length of its value, bytes.
    pub value_len: u64,
    /// xxh3-64 of its value.
    pub value_hash: u64,
    /// Its metadata.
    pub metadata: Vec<u8>,
    /// Its secondary-index terms.
    pub index_terms: Vec<IndexTerm>,
}

impl From<v1::HeadResponse> for Head {
    fn from(h: v1::HeadResponse) -> Self {
        Head {
            seq: h.seq,
            value_len: h.value_len,
            value_hash: h.value_hash,
            metadata: h.metadata,
            index_terms: h.index_terms.into_iter().map(Into::into).collect(),
        }
    }
}

/// A table.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Table {
    /// Its name.
    pub name: String,
    /// Unique for the life of the cluster (never reused after a drop).
    pub id: u64,
    /// Durability of its writes.
    pub durability: Durability,
    /// Its number of tablets.
    pub tablets: u32,
}

impl From<v1::Table> for Table {
    fn from(t: v1::Table) -> Self {
        Table {
            name: t.name,
            id: t.id,
            durability: Durability::from_wire(t.durability),
            tablets: t.tablets,
        }
    }
}

/// A tablet of a table's map.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Tablet {
    /// Unique within its table.
    pub id: u64,
    /// Inclusive start key (empty: the beginning).
    pub start: Vec<u8>,
    /// Exclusive end key (empty: the end).
    pub end: Vec<u8>,
    /// gRPC address of the server hosting it ("" while unassigned).
    pub server: String,
    /// Its immutable files as last published, relative to its directory.
    pub files: Vec<String>,
}

impl From<v1::Tablet> for Tablet {
    fn from(t: v1::Tablet) -> Self {
        Tablet {
            id: t.id,
            start: t.start,
            end: t.end,
            server: t.server,
            files: t.files,
        }
    }
}

/// A live tablet server as the manager sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ServerStatus {
    /// Its id (unique per process).
    pub id: String,
    /// Its gRPC address.
    pub address: String,
    /// Its HTTP address (status page, metrics).
    pub http: String,
    /// Tablets assigned to it.
    pub tablets: u32,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
    /// Rows written on it since it started.
    pub rows_written: u64,
    /// Rows read on it since it started.
    pub rows_read: u64,
    /// Its tablets that are not serving normally, as of its last heartbeat.
    pub faults: Vec<TabletFault>,
}

/// A tablet that is not serving normally, as its server reported it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TabletFault {
    /// Table name ("" when the manager no longer knows the table).
    pub table: String,
    /// Tablet id.
    pub tablet_id: u64,
    /// `disk full`, `degraded`, `recovering` or `stuck`.
    pub condition: &'static str,
    /// Why, as the server saw it.
    pub reason: String,
    /// How long its oldest journal write or sync has been in flight, ms.
    pub io_stalled_ms: u64,
}

impl From<v1::TabletFault> for TabletFault {
    fn from(f: v1::TabletFault) -> Self {
        let condition = match v1::TabletCondition::try_from(f.condition) {
            Ok(v1::TabletCondition::TabletServing) => "serving",
            Ok(v1::TabletCondition::TabletDiskFull) => "disk full",
            Ok(v1::TabletCondition::TabletDegraded) => "degraded",
            Ok(v1::TabletCondition::TabletRecovering) => "recovering",
            Ok(v1::TabletCondition::TabletStuck) => "stuck",
            Err(_) => "unknown",
        };
        TabletFault {
            table: f.table,
            tablet_id: f.tablet_id,
            condition,
            reason: f.reason,
            io_stalled_ms: f.io_stalled_ms,
        }
    }
}

/// The cluster as the manager sees it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClusterStatus {
    /// Live tablet servers.
    pub servers: Vec<ServerStatus>,
    /// Every table.
    pub tables: Vec<Table>,
    /// Tablets without a live server.
    pub tablets_unassigned: u32,
    /// Live scan servers.
    pub scan_servers: Vec<ScanServer>,
}

/// A live scan server, as the manager last heard from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanServer {
    /// Its id.
    pub id: String,
    /// gRPC address.
    pub address: String,
    /// HTTP address.
    pub http: String,
    /// Its group.
    pub group: String,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
    /// Batches running on its scan threads, and queued, at that heartbeat.
    pub scans_running: u32,
    /// Batches waiting for a scan thread.
    pub queue_depth: u32,
    /// Batches run since it started.
    pub batches_total: u64,
    /// Batches answered busy since it started.
    pub busy_total: u64,
    /// Reads and scans it served on the client's 1st, 2nd, 3rd and later
    /// attempt (always [`tablinum_proto::SERVED_BUCKETS`] entries).
    pub served_by_attempt: Vec<u64>,
    /// The same, by the attempt plan that chose it (0, 1, 2, 3 or later).
    pub served_by_plan: Vec<u64>,
}

impl From<v1::ScanServerStatus> for ScanServer {
    fn from(s: v1::ScanServerStatus) -> Self {
        ScanServer {
            id: s.id,
            address: s.address,
            http: s.http,
            group: s.group,
            last_heartbeat_ms: s.last_heartbeat_ms,
            scans_running: s.scans_running,
            queue_depth: s.queue_depth,
            batches_total: s.batches_total,
            busy_total: s.busy_total,
            served_by_attempt: buckets(s.served_by_attempt),
            served_by_plan: buckets(s.served_by_plan),
        }
    }
}

/// Exactly [`tablinum_proto::SERVED_BUCKETS`] counts (missing ones 0).
fn buckets(mut v: Vec<u64>) -> Vec<u64> {
    v.resize(tablinum_proto::SERVED_BUCKETS, 0);
    v
}

impl From<v1::ClusterStatusResponse> for ClusterStatus {
    fn from(r: v1::ClusterStatusResponse) -> Self {
        ClusterStatus {
            servers: r
                .servers
                .into_iter()
                .map(|s| ServerStatus {
                    id: s.id,
                    address: s.address,
                    http: s.http,
                    tablets: s.tablets,
                    last_heartbeat_ms: s.last_heartbeat_ms,
                    rows_written: s.rows_written,
                    rows_read: s.rows_read,
                    faults: s.faults.into_iter().map(Into::into).collect(),
                })
                .collect(),
            tables: r.tables.into_iter().map(Into::into).collect(),
            tablets_unassigned: r.tablets_unassigned,
            scan_servers: r.scan_servers.into_iter().map(Into::into).collect(),
        }
    }
}
