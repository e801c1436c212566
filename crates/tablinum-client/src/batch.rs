//! Batch scans: many key ranges of one table in one call, each range's rows
//! returned on their own, in key order, each row exactly once.
//!
//! Owns the call's state: the ranges split by tablet boundaries into
//! *pieces* (range, tablet, sub-range), each piece's resume point and rows,
//! each tablet's attempt history, and the rounds that send pending pieces
//! out. A round calls the dispatcher's pure `select` once for every tablet
//! with a pending piece (eventual), or looks up each tablet's server
//! (immediate); bins the pieces by the server chosen; and opens one
//! `ScanMany` stream per bin (one slot per piece, see [`coordinator`])
//! carrying the round's one busy timeout. Every slot of every bin is
//! drained concurrently by one task per bin. When a bin fails, each piece
//! it did not finish goes back to pending from the key after its last row
//! received, and its tablet records one attempt (busy or error) on that
//! server; busy pieces are dispatched again at once, errored ones after
//! the selector's backoff (eventual) or the client's backoff (immediate),
//! until [`EVENTUAL_ATTEMPTS_MAX`] attempts of a tablet (eventual) or the
//! retry deadline (immediate).
//!
//! Never hands out a row twice, never skips one, never runs one piece in
//! two streams at once, never resumes by anything but a key (so count-only
//! filters are refused and index scans not offered: they have no resume
//! point), and sends nothing for a request it can tell is wrong.
//!
//! Accumulo's batch scanner bugs (research notes, `scan-servers.md` §3)
//! and how this avoids them:
//!
//! * Attempts recorded for only a subset of a bin's tablets (one reporter
//!   per server, fixed in apache/accumulo#6315): attempt histories live in
//!   one map per call, keyed by tablet, and a failed bin records one
//!   attempt for *every* tablet with an unfinished piece in it, so the
//!   selector's escalation and "skip servers already tried" see them all.
//! * Busy-timeout handling wrong in several cases (apache/accumulo#6307):
//!   here the round computes one busy timeout (the profile's for the
//!   round's attempt number, the largest over its tablets, or the caller's
//!   override escalated by the profile's multiplier) and every stream of
//!   the round carries it on every start; a busy answer fails the whole
//!   stream on the server, and the client re-dispatches every unfinished
//!   piece of that bin (none is left behind, none is retried with a stale
//!   timeout), with no delay, while errors alone back off.
//! * A range lost or read twice on retry: a piece resumes from the key
//!   after the last row this call received for it, with its limit reduced
//!   by those rows; pieces that finished in a failed bin stay finished;
//!   rows that arrived before a failure are kept, not thrown away and read
//!   again.
//!
//! Unlike Accumulo (apache/accumulo#3150), a server cannot fail one slot of
//! a `ScanMany` stream alone: any failure ends the stream. Finished pieces
//! and received rows are kept, so the cost is re-opening the rest.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tablinum_dispatch::select::{
    select, Attempt, AttemptOutcome, Request, Selection, TabletAttempts, Target,
};
use tablinum_dispatch::Profile;
use tablinum_proto::v1;
use tablinum_stream::channel::Received;
use tablinum_stream::merge::BatchSource;
use tablinum_stream::Row;
use tonic::Status;

use crate::coordinator;
use crate::eventual::{after, EVENTUAL_ATTEMPTS_MAX};
use crate::{
    AsyncClient, Backoff, Consistency, Error, Filter, Locations, QueryRow, Result, Tablet,
};

/// Ranges in one batch scan, at most.
pub const BATCH_RANGES_MAX: usize = 4_096;
/// Pieces (a range's part in one tablet) in one batch scan, at most: so a
/// bin always fits one `ScanMany` stream.
pub const BATCH_PIECES_MAX: usize = tablinum_proto::TABLETS_PER_TABLE_MAX as usize;

/// A key range: `start` inclusive, `end` exclusive (empty: unbounded).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRange {
    /// Inclusive start.
    pub start: Vec<u8>,
    /// Exclusive end; empty: to the end of the table.
    pub end: Vec<u8>,
}

impl KeyRange {
    /// The range [`start`, `end`).
    pub fn new(start: impl Into<Vec<u8>>, end: impl Into<Vec<u8>>) -> Self {
        KeyRange {
            start: start.into(),
            end: end.into(),
        }
    }
}

/// Many ranges of one table read in one call.
#[derive(Debug, Clone)]
pub struct BatchScan {
    /// Table name.
    pub table: String,
    /// The ranges, 1..=[`BATCH_RANGES_MAX`]; they may overlap (each is
    /// answered on its own).
    pub ranges: Vec<KeyRange>,
    /// Rows per range, at most; 0: all.
    pub limit_per_range: u64,
    /// Rows per batch; 0: the servers' default.
    pub batch_rows: u32,
    /// Return keys without values.
    pub keys_only: bool,
    /// Where the tablets are read.
    pub consistency: Consistency,
    /// A filter the servers run where the data is (count-only filters are
    /// refused: a batch scan returns rows).
    pub filter: Option<Filter>,
}

impl BatchScan {
    /// A batch scan of `ranges` of `table`: every row, values included,
    /// immediate consistency.
    pub fn new(table: impl Into<String>, ranges: Vec<KeyRange>) -> Self {
        BatchScan {
            table: table.into(),
            ranges,
            limit_per_range: 0,
            batch_rows: 0,
            keys_only: false,
            consistency: Consistency::Immediate,
            filter: None,
        }
    }
}

/// Where a piece's last rows came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServedBy {
    /// A scan server, chosen by the profile's attempt plan `plan`.
    ScanServer {
        /// Its address.
        server: String,
        /// Index of the attempt plan.
        plan: usize,
    },
    /// The tablet's tablet server (immediate, or an eventual profile that
    /// falls back when no scan server is live).
    TabletServer {
        /// Its address.
        server: String,
    },
}

/// One piece of a batch scan: a range's part in one tablet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PieceStats {
    /// Index of its range in the request.
    pub range: usize,
    /// Its tablet.
    pub tablet_id: u64,
    /// Rows received for it (before the range's limit is applied).
    pub rows: u64,
    /// Streams it was sent in.
    pub attempts: u32,
    /// Where it finished.
    pub served_by: ServedBy,
}

/// One tablet's attempts in a batch scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TabletStats {
    /// The tablet.
    pub tablet_id: u64,
    /// Streams that carried at least one of its pieces.
    pub attempts: u32,
    /// Of those, streams that ended busy with a piece of it unfinished.
    pub busy: u32,
    /// Of those, streams that failed otherwise with a piece of it
    /// unfinished.
    pub errors: u32,
}

/// How a bin's stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BinOutcome {
    /// Every piece finished.
    Finished,
    /// The server answered busy.
    Busy,
    /// It failed; the status's message.
    Failed(String),
}

/// One bin: the pieces one round sent to one server in one stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BinStats {
    /// The round (0-based).
    pub round: u32,
    /// The server's address.
    pub server: String,
    /// Pieces (slots) in the stream.
    pub pieces: u32,
    /// The attempt plan (`None`: a tablet server).
    pub plan: Option<usize>,
    /// The busy timeout the stream carried, ms (0: none, tablet servers).
    pub busy_timeout_ms: u64,
    /// How it ended.
    pub outcome: BinOutcome,
}

/// Counters of one batch scan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Ranges in the request.
    pub ranges: u32,
    /// Pieces the ranges split into.
    pub pieces: u32,
    /// Bins (streams) opened over all rounds.
    pub bins: u32,
    /// Rounds of dispatch (1 when nothing failed).
    pub rounds: u32,
    /// Tablet attempts: the sum of [`TabletStats::attempts`].
    pub attempts: u64,
    /// Busy answers (streams that ended busy).
    pub busy_answers: u64,
    /// Streams that failed otherwise.
    pub errors: u64,
    /// Pieces sent again after their stream failed.
    pub retries: u64,
    /// Rows handed to the caller.
    pub rows_returned: u64,
    /// Rows that arrived (a range's limit may drop some).
    pub rows_received: u64,
    /// Rows the servers read for this scan (every attempt, before any
    /// filter).
    pub rows_examined: u64,
    /// Rows that matched the filter (all rows read without one).
    pub rows_matched: u64,
    /// Each tablet touched, by tablet id.
    pub tablets: Vec<TabletStats>,
    /// Each piece, in request order (range, then key).
    pub served: Vec<PieceStats>,
    /// Each bin, in the order opened.
    pub bin_log: Vec<BinStats>,
}

/// What a batch scan returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchResult {
    /// Each range's rows in key order, in request order.
    pub ranges: Vec<Vec<QueryRow>>,
    /// Counters.
    pub stats: BatchStats,
}

/// A range's part in one tablet: what the call still has to read of it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Piece {
    range: usize,
    /// Index into the call's tablets.
    tablet: usize,
    /// Next key to read: the piece's start, then the key after the last
    /// row received.
    start: Vec<u8>,
    /// Exclusive end (empty: unbounded).
    end: Vec<u8>,
    rows: Vec<Row>,
    state: PieceState,
    attempts: u32,
    served_by: Option<ServedBy>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PieceState {
    Pending,
    Running,
    Done,
}

/// One tablet's part in the call.
struct TabletState {
    id: u64,
    /// Stable identity for the selector and the heat map.
    key: Vec<u8>,
    attempts: Vec<Attempt>,
    stats: TabletStats,
}

/// Where one round sends a bin.
struct BinPlan {
    server: String,
    plan: Option<usize>,
    busy_timeout_ms: u64,
    delay_ms: u64,
    pieces: Vec<usize>,
}

/// What a bin's task hands back.
struct BinReport {
    /// Index into the bin log.
    bin: usize,
    pieces: Vec<usize>,
    rows: Vec<Vec<Row>>,
    finished: Vec<bool>,
    failure: Option<Status>,
    pump: Option<tokio::task::JoinHandle<()>>,
}

/// Checks what can be checked without the cluster.
pub(crate) fn check_batch(req: &BatchScan) -> Result<()> {
    if let Err(m) = tablinum_proto::check_table_name(&req.table) {
        return Err(Error::InvalidArgument(m));
    }
    if req.ranges.is_empty() {
        return Err(Error::InvalidArgument(
            "a batch scan needs at least one range".into(),
        ));
    }
    if req.ranges.len() > BATCH_RANGES_MAX {
        return Err(Error::InvalidArgument(format!(
            "a batch scan has {} ranges; the limit is {BATCH_RANGES_MAX}",
            req.ranges.len()
        )));
    }
    for (i, r) in req.ranges.iter().enumerate() {
        if !r.end.is_empty() && r.start >= r.end {
            return Err(Error::InvalidArgument(format!(
                "range {i} is empty or inverted: start {} is not before end {}",
                crate::display_key(&r.start, "(empty)"),
                crate::display_key(&r.end, "(empty)")
            )));
        }
    }
    if req.batch_rows > tablinum_proto::BATCH_ROWS_MAX {
        return Err(Error::InvalidArgument(format!(
            "batch rows {} is over the limit {}",
            req.batch_rows,
            tablinum_proto::BATCH_ROWS_MAX
        )));
    }
    if req.filter.as_ref().is_some_and(|f| f.count_only) {
        return Err(Error::InvalidArgument(
            "a batch scan returns rows: count-only filters cannot resume by key, use a query"
                .into(),
        ));
    }
    if let Consistency::Eventual {
        busy_timeout_ms: Some(ms),
        ..
    } = &req.consistency
    {
        if *ms == 0 || *ms > u64::from(tablinum_proto::BUSY_TIMEOUT_MS_MAX) {
            return Err(Error::InvalidArgument(format!(
                "busy timeout {ms} ms is out of range 1..={} ms",
                tablinum_proto::BUSY_TIMEOUT_MS_MAX
            )));
        }
    }
    Ok(())
}

/// Splits `ranges` by the boundaries of `tablets` (in key order, covering
/// every key): (range, tablet index, start, end) per piece, in range order
/// then key order.
fn split(ranges: &[KeyRange], tablets: &[Tablet]) -> Vec<(usize, usize, Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    for (ri, r) in ranges.iter().enumerate() {
        let first = tablets
            .partition_point(|t| t.start.as_slice() <= r.start.as_slice())
            .saturating_sub(1);
        for (ti, t) in tablets.iter().enumerate().skip(first) {
            if !r.end.is_empty() && t.start.as_slice() >= r.end.as_slice() {
                break;
            }
            let start = r.start.clone().max(t.start.clone());
            let end = match (r.end.is_empty(), t.end.is_empty()) {
                (true, _) => t.end.clone(),
                (false, true) => r.end.clone(),
                (false, false) => r.end.clone().min(t.end.clone()),
            };
            if end.is_empty() || start < end {
                out.push((ri, ti, start, end));
            }
            if t.end.is_empty() {
                break;
            }
        }
    }
    out
}

/// The call's state (see the module docs).
struct Batch<'a> {
    client: &'a AsyncClient,
    req: &'a BatchScan,
    table_id: u64,
    /// Tablet server of each tablet, by the call's tablet index (refreshed).
    tservers: Vec<String>,
    tablets: Vec<TabletState>,
    pieces: Vec<Piece>,
    bin_log: Vec<BinStats>,
    rounds: u32,
    retries: u64,
    busy_answers: u64,
    errors: u64,
}

impl AsyncClient {
    /// Reads many key ranges of one table in one call: each range's rows
    /// in key order, each row exactly once.
    ///
    /// The ranges are split at tablet boundaries into pieces, binned by
    /// server (immediate: each tablet's server; eventual: the scan server
    /// the dispatcher chooses), one stream per server per round, every
    /// stream of a round with the same busy timeout. A busy or failed
    /// stream sends its unfinished pieces again from where they stopped:
    /// busy ones at once, failed ones after a backoff; eventual reads give
    /// up after `EVENTUAL_ATTEMPTS_MAX` (12) attempts of a tablet, immediate
    /// ones at the retry deadline, naming the tablet and its last failure.
    ///
    /// [`Error::InvalidArgument`] (nothing sent) for no ranges, an empty or
    /// inverted range, too many ranges or pieces, a count-only filter, an
    /// unknown profile or a busy timeout out of range;
    /// [`Error::NotFound`] for an unknown table.
    pub async fn batch_scan(&self, req: &BatchScan) -> Result<BatchResult> {
        check_batch(req)?;
        let profile = match &req.consistency {
            Consistency::Eventual { profile, .. } => Some(self.profile(profile.as_deref())?),
            Consistency::Immediate => None,
        };
        let loc = self.locations(&req.table, false).await?;
        let b = Batch::new(self, req, &loc)?;
        b.run(profile).await
    }
}

impl<'a> Batch<'a> {
    /// The call's state before its first round: the ranges split into
    /// pieces by `loc`'s tablets, every piece pending.
    fn new(client: &'a AsyncClient, req: &'a BatchScan, loc: &Locations) -> Result<Batch<'a>> {
        let parts = split(&req.ranges, &loc.tablets);
        if parts.len() > BATCH_PIECES_MAX {
            return Err(Error::InvalidArgument(format!(
                "the ranges split into {} pieces (a range's part in one tablet); the limit is \
                 {BATCH_PIECES_MAX}",
                parts.len()
            )));
        }
        let mut index: HashMap<usize, usize> = HashMap::new();
        let mut tablets = Vec::new();
        let mut tservers = Vec::new();
        let mut pieces = Vec::with_capacity(parts.len());
        for (range, ti, start, end) in parts {
            let t = &loc.tablets[ti];
            let tablet = *index.entry(ti).or_insert_with(|| {
                let mut key = loc.table.id.to_be_bytes().to_vec();
                key.extend_from_slice(&t.id.to_be_bytes());
                tablets.push(TabletState {
                    id: t.id,
                    key,
                    attempts: Vec::new(),
                    stats: TabletStats {
                        tablet_id: t.id,
                        ..Default::default()
                    },
                });
                tservers.push(t.server.clone());
                tablets.len() - 1
            });
            pieces.push(Piece {
                range,
                tablet,
                start,
                end,
                rows: Vec::new(),
                state: PieceState::Pending,
                attempts: 0,
                served_by: None,
            });
        }
        Ok(Batch {
            client,
            req,
            table_id: loc.table.id,
            tservers,
            tablets,
            pieces,
            bin_log: Vec::new(),
            rounds: 0,
            retries: 0,
            busy_answers: 0,
            errors: 0,
        })
    }

    async fn run(mut self, profile: Option<Arc<Profile>>) -> Result<BatchResult> {
        let cfg = &self.client.inner.cfg;
        let idle = cfg.idle_timeout;
        let progress = Arc::new(AtomicU64::new(0));
        let examined = Arc::new(coordinator::ExaminedCounters::default());
        let mut backoff = Backoff::new(cfg);
        let mut tasks: tokio::task::JoinSet<BinReport> = tokio::task::JoinSet::new();
        let mut pumps = Vec::new();
        // Immediate: the status that calls for a backoff and fresh
        // locations before the next round.
        let mut wait_for: Option<(usize, Status)> = None;
        let mut refresh_servers = false;
        // Eventual: a fallback bin on a tablet server failed; the tablet
        // may have moved.
        let mut refresh_tservers = false;
        loop {
            let pending: Vec<usize> = (0..self.pieces.len())
                .filter(|&i| self.pieces[i].state == PieceState::Pending)
                .collect();
            if !pending.is_empty() {
                let bins = match &profile {
                    Some(p) => {
                        if refresh_tservers {
                            self.refresh_tservers().await?;
                            refresh_tservers = false;
                        }
                        let r = self.route_eventual(p, &pending, refresh_servers).await?;
                        refresh_servers = false;
                        r
                    }
                    None => {
                        if let Some((t, s)) = wait_for.take() {
                            if backoff.wait(&s).await.is_err() {
                                return Err(self.give_up(t, &s));
                            }
                            self.refresh_tservers().await?;
                        }
                        let (bins, unassigned) = self.route_immediate(&pending);
                        wait_for = unassigned;
                        bins
                    }
                };
                for bin in bins {
                    self.spawn_bin(&mut tasks, bin, idle, &progress, &examined)?;
                }
                self.rounds += 1;
            }
            if tasks.is_empty() {
                if wait_for.is_some() {
                    continue;
                }
                break;
            }
            // Wait for a bin, then take every other bin that ended too: one
            // round re-dispatches all of them.
            let mut reports = Vec::new();
            if let Some(r) = tasks.join_next().await {
                reports.push(r);
            }
            while let Some(r) = tasks.try_join_next() {
                reports.push(r);
            }
            for r in reports {
                let r = r.map_err(|e| Error::Server(format!("a batch scan task failed: {e}")))?;
                pumps.extend(r.pump);
                let on_tserver = self.bin_log[r.bin].plan.is_none();
                let failure = self.take_report(r.bin, r.pieces, r.rows, r.finished, r.failure);
                if let Some((t, s)) = failure {
                    match &profile {
                        Some(_) => {
                            let crate::error::Verdict { retry, busy, .. } =
                                crate::error::classify(&s, crate::error::Op::Eventual);
                            if !retry || self.tablets[t].attempts.len() >= EVENTUAL_ATTEMPTS_MAX {
                                return Err(self.give_up(t, &s));
                            }
                            // Errors may mean the server is gone: look again.
                            refresh_servers |= !busy;
                            refresh_tservers |= !busy && on_tserver;
                        }
                        None => {
                            if !crate::error::classify(&s, crate::error::Op::Read).retry {
                                return Err(self.give_up(t, &s));
                            }
                            wait_for = Some((t, s));
                        }
                    }
                }
            }
        }
        // Every stream ended; wait (bounded) until the servers closed them,
        // so none outlives the call.
        let _ = tokio::time::timeout(idle, async {
            for p in pumps {
                let _ = p.await;
            }
        })
        .await;
        Ok(self.finish(&examined))
    }

    /// The error that ends the call: the tablet and its last failure, with
    /// the failure's code.
    fn give_up(&self, t: usize, s: &Status) -> Error {
        let tablet = &self.tablets[t];
        Status::new(
            s.code(),
            format!(
                "batch scan of {}: tablet {} after {} attempts: {}",
                self.req.table,
                tablet.id,
                tablet.stats.attempts,
                s.message()
            ),
        )
        .into()
    }

    /// Tablets with a pending piece, in the call's tablet order.
    fn pending_tablets(&self, pending: &[usize]) -> Vec<usize> {
        let mut t: Vec<usize> = pending.iter().map(|&i| self.pieces[i].tablet).collect();
        t.sort_unstable();
        t.dedup();
        t
    }

    /// One eventual round: one `select` for every tablet with a pending
    /// piece, bins by the chosen server.
    async fn route_eventual(
        &mut self,
        profile: &Profile,
        pending: &[usize],
        refresh: bool,
    ) -> Result<Vec<BinPlan>> {
        let tablets = self.pending_tablets(pending);
        let waited_from = Instant::now();
        let mut refresh = refresh;
        let dispatch = loop {
            let servers = self
                .client
                .scan_server_snapshot(&profile.group, refresh)
                .await?;
            let asks: Vec<TabletAttempts<'_>> = tablets
                .iter()
                .map(|&t| TabletAttempts {
                    tablet: &self.tablets[t].key,
                    attempts: &self.tablets[t].attempts,
                    heat: self.client.heat(&self.tablets[t].key),
                })
                .collect();
            let req = Request {
                tablets: &asks,
                servers: &servers,
                profile,
                waited_for_servers_ms: waited_from.elapsed().as_millis() as u64,
                seed: rand::random(),
            };
            match select(&req) {
                Ok(Selection::Dispatch(d)) => break d,
                Ok(Selection::WaitForServers { recheck_after_ms }) => {
                    tokio::time::sleep(Duration::from_millis(recheck_after_ms.max(1))).await;
                    refresh = true;
                }
                Err(e) => return Err(Error::Unavailable(e.to_string())),
            }
        };
        // The round's one busy timeout. An override is the first attempt's;
        // later rounds escalate from it by the profile's multiplier (up to
        // its cap), as single-tablet eventual reads do.
        let busy = match &self.req.consistency {
            Consistency::Eventual {
                busy_timeout_ms: Some(o),
                ..
            } => {
                let k = i32::try_from(dispatch.attempt).unwrap_or(i32::MAX);
                let t = *o as f64 * profile.busy_timeout_multiplier.powi(k);
                (t.min(profile.busy_timeout_max_ms as f64) as u64).max(*o)
            }
            _ => dispatch.busy_timeout_ms,
        };
        let mut bins: Vec<BinPlan> = Vec::new();
        for (&t, target) in tablets.iter().zip(&dispatch.targets) {
            let (server, plan, busy) = match target {
                Target::ScanServer(s) => (s.clone(), Some(dispatch.plan), busy),
                Target::TabletServer => (self.tservers[t].clone(), None, 0),
            };
            if server.is_empty() {
                return Err(Error::Unavailable(format!(
                    "tablet {} of {} has no server to fall back to",
                    self.tablets[t].id, self.req.table
                )));
            }
            // Busy answers are re-dispatched at once; only a bin carrying
            // a tablet whose last attempt failed waits the backoff.
            let errored =
                self.tablets[t].attempts.last().map(|a| a.outcome) == Some(AttemptOutcome::Error);
            let delay = if errored { dispatch.delay_ms } else { 0 };
            let pieces = pending
                .iter()
                .copied()
                .filter(|&i| self.pieces[i].tablet == t);
            match bins
                .iter_mut()
                .find(|b| b.server == server && b.plan.is_some() == plan.is_some())
            {
                Some(b) => {
                    b.pieces.extend(pieces);
                    b.delay_ms = b.delay_ms.max(delay);
                }
                None => bins.push(BinPlan {
                    server,
                    plan,
                    busy_timeout_ms: busy,
                    delay_ms: delay,
                    pieces: pieces.collect(),
                }),
            }
        }
        Ok(bins)
    }

    /// One immediate round: each pending piece to its tablet's server.
    /// Returns the bins and, if some tablet has no server yet, that tablet
    /// and a status to back off on.
    fn route_immediate(&mut self, pending: &[usize]) -> (Vec<BinPlan>, Option<(usize, Status)>) {
        let mut bins: Vec<BinPlan> = Vec::new();
        let mut unassigned = None;
        for t in self.pending_tablets(pending) {
            let server = self.tservers[t].clone();
            if server.is_empty() {
                let s = Status::unavailable(format!(
                    "tablet {} of {} is not assigned yet",
                    self.tablets[t].id, self.req.table
                ));
                self.tablets[t].stats.errors += 1;
                unassigned = Some((t, s));
                continue;
            }
            let pieces = pending
                .iter()
                .copied()
                .filter(|&i| self.pieces[i].tablet == t);
            match bins.iter_mut().find(|b| b.server == server) {
                Some(b) => b.pieces.extend(pieces),
                None => bins.push(BinPlan {
                    server,
                    plan: None,
                    busy_timeout_ms: 0,
                    delay_ms: 0,
                    pieces: pieces.collect(),
                }),
            }
        }
        (bins, unassigned)
    }

    /// Looks the table's tablets up again (they may have moved).
    async fn refresh_tservers(&mut self) -> Result<()> {
        let loc = self.client.locations(&self.req.table, true).await?;
        if loc.table.id != self.table_id {
            return Err(Error::NotFound(format!(
                "table {} was dropped during the batch scan",
                self.req.table
            )));
        }
        for (t, server) in self.tablets.iter().zip(self.tservers.iter_mut()) {
            match loc.tablets.iter().find(|x| x.id == t.id) {
                Some(x) => server.clone_from(&x.server),
                None => {
                    return Err(Error::NotFound(format!(
                        "tablet {} of {} no longer exists",
                        t.id, self.req.table
                    )))
                }
            }
        }
        Ok(())
    }

    /// Opens one bin's stream (one slot per piece, each from its resume
    /// point) in a task that drains it.
    fn spawn_bin(
        &mut self,
        tasks: &mut tokio::task::JoinSet<BinReport>,
        bin: BinPlan,
        idle: Duration,
        progress: &Arc<AtomicU64>,
        examined: &Arc<coordinator::ExaminedCounters>,
    ) -> Result<()> {
        let transport = self.client.transport(&bin.server)?;
        let limit = self.req.limit_per_range;
        let mut starts = Vec::with_capacity(bin.pieces.len());
        let mut counted = Vec::new();
        for &i in &bin.pieces {
            let p = &mut self.pieces[i];
            p.state = PieceState::Running;
            p.attempts += 1;
            if p.attempts > 1 {
                self.retries += 1;
            }
            if !counted.contains(&p.tablet) {
                counted.push(p.tablet);
                self.tablets[p.tablet].stats.attempts += 1;
            }
            starts.push(v1::ScanStart {
                table: self.req.table.clone(),
                tablet_id: self.tablets[p.tablet].id,
                start: p.start.clone(),
                end: p.end.clone(),
                index: Vec::new(),
                // Pieces reach the call's limit only when full: it stops
                // once it has `limit` rows (see `take_report`).
                limit: if limit == 0 {
                    0
                } else {
                    limit - p.rows.len() as u64
                },
                window: 0,
                batch_rows: self.req.batch_rows,
                keys_only: self.req.keys_only,
                table_id: self.table_id,
                busy_timeout_ms: u32::try_from(bin.busy_timeout_ms).unwrap_or(u32::MAX),
                filter: self.req.filter.as_ref().map(Filter::to_wire),
                attempt: p.attempts,
                plan: bin.plan.map_or(0, |p| u32::try_from(p).unwrap_or(u32::MAX)),
                stream_bytes_max: 0,
            });
        }
        let round = self.rounds;
        self.bin_log.push(BinStats {
            round,
            server: bin.server.clone(),
            pieces: u32::try_from(bin.pieces.len()).unwrap_or(u32::MAX),
            plan: bin.plan,
            busy_timeout_ms: bin.busy_timeout_ms,
            outcome: BinOutcome::Finished,
        });
        let at = self.bin_log.len() - 1;
        let (progress, examined) = (progress.clone(), examined.clone());
        tasks.spawn(async move {
            if bin.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(bin.delay_ms)).await;
            }
            let (rows, finished, failure, pump) =
                drain_bin(transport, starts, idle, progress, examined).await;
            BinReport {
                bin: at,
                pieces: bin.pieces,
                rows,
                finished,
                failure,
                pump,
            }
        });
        Ok(())
    }

    /// Takes a bin's rows; on failure, records an attempt for every tablet
    /// with an unfinished piece in it and sends those pieces back to
    /// pending. Returns a tablet of the bin with the failure, if it failed
    /// with pieces unfinished.
    fn take_report(
        &mut self,
        bin: usize,
        pieces: Vec<usize>,
        rows: Vec<Vec<Row>>,
        finished: Vec<bool>,
        failure: Option<Status>,
    ) -> Option<(usize, Status)> {
        let server = self.bin_log[bin].server.clone();
        let plan = self.bin_log[bin].plan;
        let served_by = match plan {
            Some(plan) => ServedBy::ScanServer {
                server: server.clone(),
                plan,
            },
            None => ServedBy::TabletServer {
                server: server.clone(),
            },
        };
        let busy = failure.as_ref().is_some_and(crate::error::is_busy);
        let limit = self.req.limit_per_range;
        let mut unfinished: Vec<usize> = Vec::new();
        let mut in_bin: Vec<usize> = Vec::new();
        for ((i, got), done) in pieces.into_iter().zip(rows).zip(finished) {
            let p = &mut self.pieces[i];
            if let Some((k, _)) = got.last() {
                p.start = after(k);
            }
            p.rows.extend(got);
            if !in_bin.contains(&p.tablet) {
                in_bin.push(p.tablet);
            }
            if done || (limit > 0 && p.rows.len() as u64 >= limit) {
                p.state = PieceState::Done;
                p.served_by = Some(served_by.clone());
            } else {
                p.state = PieceState::Pending;
                if !unfinished.contains(&p.tablet) {
                    unfinished.push(p.tablet);
                }
            }
        }
        if plan == Some(0) {
            for &t in &in_bin {
                let hot = busy && unfinished.contains(&t);
                self.client.record_heat(&self.tablets[t].key, hot);
            }
        }
        let status = failure?;
        self.bin_log[bin].outcome = if busy {
            BinOutcome::Busy
        } else {
            BinOutcome::Failed(format!("{:?}: {}", status.code(), status.message()))
        };
        if busy {
            self.busy_answers += 1;
        } else {
            self.errors += 1;
        }
        let outcome = if busy {
            AttemptOutcome::Busy
        } else {
            AttemptOutcome::Error
        };
        for &t in &unfinished {
            let ts = &mut self.tablets[t];
            ts.attempts.push(Attempt {
                server: server.clone(),
                outcome,
            });
            if busy {
                ts.stats.busy += 1;
            } else {
                ts.stats.errors += 1;
            }
        }
        // The tablet with the most attempts speaks for the bin: it is the
        // one the attempt limit stops first.
        unfinished
            .iter()
            .copied()
            .max_by_key(|&t| self.tablets[t].attempts.len())
            .map(|t| (t, status))
    }

    /// Each range's rows (pieces in key order, cut at the limit) and the
    /// counters.
    fn finish(self, examined: &coordinator::ExaminedCounters) -> BatchResult {
        let limit = self.req.limit_per_range;
        let mut ranges: Vec<Vec<QueryRow>> = vec![Vec::new(); self.req.ranges.len()];
        let mut served = Vec::with_capacity(self.pieces.len());
        let mut rows_received = 0u64;
        let mut rows_returned = 0u64;
        for p in self.pieces {
            rows_received += p.rows.len() as u64;
            served.push(PieceStats {
                range: p.range,
                tablet_id: self.tablets[p.tablet].id,
                rows: p.rows.len() as u64,
                attempts: p.attempts,
                served_by: p.served_by.unwrap_or(ServedBy::TabletServer {
                    server: String::new(),
                }),
            });
            let out = &mut ranges[p.range];
            for (key, value) in p.rows {
                if limit > 0 && out.len() as u64 >= limit {
                    break;
                }
                out.push(QueryRow {
                    key,
                    value,
                    term: None,
                });
                rows_returned += 1;
            }
        }
        let mut tablets: Vec<TabletStats> = self.tablets.iter().map(|t| t.stats.clone()).collect();
        tablets.sort_by_key(|t| t.tablet_id);
        BatchResult {
            ranges,
            stats: BatchStats {
                ranges: u32::try_from(self.req.ranges.len()).unwrap_or(u32::MAX),
                pieces: u32::try_from(served.len()).unwrap_or(u32::MAX),
                bins: u32::try_from(self.bin_log.len()).unwrap_or(u32::MAX),
                rounds: self.rounds,
                attempts: tablets.iter().map(|t| u64::from(t.attempts)).sum(),
                busy_answers: self.busy_answers,
                errors: self.errors,
                retries: self.retries,
                rows_returned,
                rows_received,
                rows_examined: examined.rows.load(Ordering::Relaxed),
                rows_matched: examined.matched.load(Ordering::Relaxed),
                tablets,
                served,
                bin_log: self.bin_log,
            },
        }
    }
}

/// Opens one `ScanMany` stream for `starts` and drains every slot as its
/// batches arrive (acknowledging each), until each slot has ended or
/// failed. Returns each slot's rows, whether it ended, the stream's
/// failure (the first status any slot saw) and its pump task.
async fn drain_bin(
    transport: crate::Transport,
    starts: Vec<v1::ScanStart>,
    idle: Duration,
    progress: Arc<AtomicU64>,
    examined: Arc<coordinator::ExaminedCounters>,
) -> (
    Vec<Vec<Row>>,
    Vec<bool>,
    Option<Status>,
    Option<tokio::task::JoinHandle<()>>,
) {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Slot {
        Open,
        Ended,
        Failed,
    }
    let handle = tokio::runtime::Handle::current();
    let srcs = coordinator::open_many(&handle, transport, starts, false, idle, progress, examined);
    let n = srcs.len();
    let pump = srcs.first().and_then(|s| s.pump.lock().take());
    let Some(arrived) = srcs.first().map(|s| s.arrived.clone()) else {
        return (Vec::new(), Vec::new(), None, pump);
    };
    let mut rows: Vec<Vec<Row>> = vec![Vec::new(); n];
    let mut state = vec![Slot::Open; n];
    let mut failure: Option<Status> = None;
    loop {
        // Every message the pump hands a slot is taken here without
        // blocking (`ready` then `recv`); a slot that failed still lets the
        // others take what arrived before the failure.
        let mut open = 0;
        for (i, src) in srcs.iter().enumerate() {
            while state[i] == Slot::Open && src.ready() {
                match src.recv() {
                    Ok(Received::Batch(b)) => {
                        rows[i].extend(b);
                        src.ack();
                    }
                    Ok(Received::End) => state[i] = Slot::Ended,
                    Err(e) => {
                        let s = src.failure.lock().take().unwrap_or_else(|| {
                            Status::unavailable(format!("scan stream failed: {e}"))
                        });
                        failure.get_or_insert(s);
                        state[i] = Slot::Failed;
                    }
                }
            }
            if state[i] == Slot::Open {
                open += 1;
            }
        }
        if open == 0 {
            break;
        }
        if tokio::time::timeout(idle, arrived.notified())
            .await
            .is_err()
        {
            failure.get_or_insert_with(|| {
                Status::deadline_exceeded(format!(
                    "no batch within the idle timeout of {} ms",
                    idle.as_millis()
                ))
            });
            for (i, src) in srcs.iter().enumerate() {
                if state[i] == Slot::Open {
                    src.cancel();
                    state[i] = Slot::Failed;
                }
            }
            break;
        }
    }
    let finished = state.iter().map(|s| *s == Slot::Ended).collect();
    (rows, finished, failure, pump)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tablets(bounds: &[&[u8]]) -> Vec<Tablet> {
        // Tablets split at `bounds`: ["", b0), [b0, b1), ..., [bn, "").
        let mut starts: Vec<Vec<u8>> = vec![Vec::new()];
        starts.extend(bounds.iter().map(|b| b.to_vec()));
        let n = starts.len();
        (0..n)
            .map(|i| Tablet {
                id: i as u64 + 10,
                start: starts[i].clone(),
                end: if i + 1 < n {
                    starts[i + 1].clone()
                } else {
                    Vec::new()
                },
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn ranges_split_at_tablet_boundaries_in_key_order() {
        let t = tablets(&[b"g", b"p"]);
        let got = split(
            &[
                KeyRange::new(*b"a", *b"c"),
                KeyRange::new(*b"e", *b"q"),
                KeyRange::new(*b"g", *b"p"),
                KeyRange::new(*b"x", *b""),
                KeyRange::new(*b"", *b""),
            ],
            &t,
        );
        let v = |s: &[u8]| s.to_vec();
        assert_eq!(
            got,
            vec![
                (0, 0, v(b"a"), v(b"c")),
                (1, 0, v(b"e"), v(b"g")),
                (1, 1, v(b"g"), v(b"p")),
                (1, 2, v(b"p"), v(b"q")),
                (2, 1, v(b"g"), v(b"p")),
                (3, 2, v(b"x"), v(b"")),
                (4, 0, v(b""), v(b"g")),
                (4, 1, v(b"g"), v(b"p")),
                (4, 2, v(b"p"), v(b"")),
            ]
        );
    }

    #[test]
    fn bad_batches_are_refused_before_anything_is_sent() {
        let ok = BatchScan::new("t", vec![KeyRange::new(*b"a", *b"b")]);
        assert!(check_batch(&ok).is_ok());
        let bad = |b: BatchScan| match check_batch(&b) {
            Err(Error::InvalidArgument(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(bad(BatchScan::new("t", vec![])).contains("at least one range"));
        let m = bad(BatchScan::new(
            "t",
            vec![KeyRange::new(*b"a", *b"b"), KeyRange::new(*b"b", *b"b")],
        ));
        assert!(
            m.contains("range 1") && m.contains("empty or inverted"),
            "{m}"
        );
        assert!(bad(BatchScan::new("t", vec![KeyRange::new(*b"z", *b"b")])).contains("range 0"));
        let m = bad(BatchScan {
            filter: Some(Filter {
                count_only: true,
                ..Default::default()
            }),
            ..ok.clone()
        });
        assert!(m.contains("count-only"), "{m}");
        let m = bad(BatchScan {
            consistency: Consistency::Eventual {
                profile: None,
                busy_timeout_ms: Some(0),
            },
            ..ok.clone()
        });
        assert!(m.contains("busy timeout"), "{m}");
        let m = bad(BatchScan {
            ranges: vec![KeyRange::default(); BATCH_RANGES_MAX + 1],
            ..ok
        });
        assert!(m.contains("ranges"), "{m}");
    }

    fn row(k: &[u8]) -> Row {
        (k.to_vec(), b"v".to_vec())
    }

    /// A batch of `req` over tablets split at g and p, as if its first
    /// round had sent every piece to "s1" with plan 1.
    fn sent<'a>(client: &'a AsyncClient, req: &'a BatchScan) -> Batch<'a> {
        let loc = Locations {
            table: crate::Table {
                id: 7,
                ..Default::default()
            },
            tablets: tablets(&[b"g", b"p"]),
        };
        let mut b = Batch::new(client, req, &loc).unwrap();
        b.bin_log.push(BinStats {
            round: 0,
            server: "s1".into(),
            pieces: u32::try_from(b.pieces.len()).unwrap(),
            plan: Some(1),
            busy_timeout_ms: 33,
            outcome: BinOutcome::Finished,
        });
        for p in &mut b.pieces {
            p.state = PieceState::Running;
            p.attempts = 1;
        }
        b
    }

    /// Accumulo's batch scanner recorded attempts for a subset of a bin's
    /// tablets (apache/accumulo#6315): here every tablet left unfinished
    /// by a busy bin gets one, and each piece resumes after its last row.
    #[tokio::test]
    async fn a_busy_bin_records_an_attempt_for_every_unfinished_tablet() {
        let client = AsyncClient::connect_lazy("127.0.0.1:1", Default::default()).unwrap();
        let req = BatchScan::new("t", vec![KeyRange::new(*b"a", *b"z")]);
        let mut b = sent(&client, &req);
        assert_eq!(b.pieces.len(), 3);
        let busy = tablinum_proto::error::status(
            tonic::Code::ResourceExhausted,
            tablinum_proto::error::ErrorReason::ScanServerBusy,
            "scan server busy: a batch waited 33 ms",
        );
        let failed = b.take_report(
            0,
            vec![0, 1, 2],
            vec![vec![row(b"a"), row(b"b")], vec![row(b"h")], vec![]],
            vec![true, false, false],
            Some(busy),
        );
        let (t, s) = failed.unwrap();
        assert!(t == 1 || t == 2, "{t}");
        assert!(crate::is_busy(&s));
        assert_eq!(b.pieces[0].state, PieceState::Done);
        assert_eq!(
            b.pieces[0].served_by,
            Some(ServedBy::ScanServer {
                server: "s1".into(),
                plan: 1
            })
        );
        assert_eq!(b.pieces[0].rows, vec![row(b"a"), row(b"b")]);
        assert_eq!(b.pieces[1].state, PieceState::Pending);
        assert_eq!(b.pieces[1].start, b"h\0".to_vec());
        assert_eq!(b.pieces[1].rows, vec![row(b"h")]);
        assert_eq!(b.pieces[2].state, PieceState::Pending);
        assert_eq!(b.pieces[2].start, b"p".to_vec());
        assert!(b.tablets[0].attempts.is_empty());
        for t in 1..=2 {
            assert_eq!(
                b.tablets[t].attempts,
                vec![Attempt {
                    server: "s1".into(),
                    outcome: AttemptOutcome::Busy
                }]
            );
            assert_eq!(b.tablets[t].stats.busy, 1);
        }
        assert_eq!((b.busy_answers, b.errors), (1, 0));
        assert_eq!(b.bin_log[0].outcome, BinOutcome::Busy);
    }

    /// Two unfinished pieces of one tablet in a failed bin are one attempt
    /// of that tablet, not two; a piece that reached the range's limit is
    /// finished even though its stream failed.
    #[tokio::test]
    async fn a_failed_bin_counts_one_attempt_per_tablet_and_respects_limits() {
        let client = AsyncClient::connect_lazy("127.0.0.1:1", Default::default()).unwrap();
        let req = BatchScan {
            limit_per_range: 2,
            ..BatchScan::new(
                "t",
                vec![
                    KeyRange::new(*b"h", *b"i"),
                    KeyRange::new(*b"j", *b"k"),
                    KeyRange::new(*b"q", *b"r"),
                ],
            )
        };
        let mut b = sent(&client, &req);
        let failed = b.take_report(
            0,
            vec![0, 1, 2],
            vec![vec![row(b"h1")], vec![], vec![row(b"q1"), row(b"q2")]],
            vec![false, false, false],
            Some(Status::unavailable("tcp connect error")),
        );
        assert_eq!(failed.map(|(t, _)| t), Some(0));
        assert_eq!(b.tablets.len(), 2);
        assert_eq!(
            b.tablets[0].attempts,
            vec![Attempt {
                server: "s1".into(),
                outcome: AttemptOutcome::Error
            }]
        );
        assert!(b.tablets[1].attempts.is_empty());
        assert_eq!(b.pieces[2].state, PieceState::Done);
        assert_eq!((b.busy_answers, b.errors), (0, 1));
        assert!(matches!(b.bin_log[0].outcome, BinOutcome::Failed(ref m) if m.contains("tcp")));
    }

    /// Each range gets its pieces' rows in key order, cut at its limit.
    #[tokio::test]
    async fn ranges_are_assembled_from_their_pieces_in_key_order() {
        let client = AsyncClient::connect_lazy("127.0.0.1:1", Default::default()).unwrap();
        let req = BatchScan {
            limit_per_range: 3,
            ..BatchScan::new(
                "t",
                vec![KeyRange::new(*b"a", *b""), KeyRange::new(*b"b", *b"c")],
            )
        };
        let mut b = sent(&client, &req);
        assert_eq!(b.pieces.len(), 4);
        b.take_report(
            0,
            vec![0, 1, 2, 3],
            vec![
                vec![row(b"a1"), row(b"a2")],
                vec![row(b"h1"), row(b"h2")],
                vec![row(b"q1")],
                vec![row(b"b1")],
            ],
            vec![true; 4],
            None,
        );
        let r = b.finish(&coordinator::ExaminedCounters::default());
        let keys = |v: &[QueryRow]| -> Vec<Vec<u8>> { v.iter().map(|q| q.key.clone()).collect() };
        assert_eq!(
            keys(&r.ranges[0]),
            vec![b"a1".to_vec(), b"a2".to_vec(), b"h1".to_vec()]
        );
        assert_eq!(keys(&r.ranges[1]), vec![b"b1".to_vec()]);
        assert_eq!(r.stats.rows_received, 6);
        assert_eq!(r.stats.rows_returned, 4);
        assert_eq!((r.stats.ranges, r.stats.pieces, r.stats.bins), (2, 4, 1));
    }
}
