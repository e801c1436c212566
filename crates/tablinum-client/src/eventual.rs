//! Eventual reads: each tablet of a query is scanned on a scan server the
//! dispatcher (`tablinum_dispatch::select`, pure) chooses from the live
//! scan servers of the profile's group, and re-dispatched — from the row
//! after the last one received, so nothing is lost or repeated — when that
//! server answers busy (at once, never backing off) or fails (after the
//! selector's jittered backoff), until the attempt limit.
//!
//! Owns one merge source per tablet ([`EventualSource`]) wrapping the
//! single-slot `ScanMany` stream of its current attempt, the attempt
//! history the selector decides from, and the per-query counters (attempts,
//! busy answers, which plan served each tablet). Never reads a tablet's
//! rows twice into the merge, and never dispatches index scans (their rows
//! cannot be resumed by key).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tablinum_dispatch::select::{
    select, Attempt, AttemptOutcome, Request, Selection, ServerSnapshot, TabletAttempts, Target,
};
use tablinum_dispatch::Profile;
use tablinum_proto::v1::{ScanServerStatus, ScanStart};
use tablinum_stream::channel::{Received, StreamError};
use tablinum_stream::merge::BatchSource;
use tonic::Status;

use crate::coordinator::{self, GrpcSource};
use crate::AsyncClient;

/// Attempts of one tablet's scan before the query fails, at most.
pub const EVENTUAL_ATTEMPTS_MAX: usize = 12;
/// How long a client keeps a list of live scan servers, ms.
pub const SCAN_SERVERS_TTL_MS: u64 = 1_000;

/// Counters of one eventual query, shared by its sources.
#[derive(Debug, Default)]
pub(crate) struct EventualCounters {
    /// Attempts made (every tablet's first one included).
    pub attempts: AtomicU64,
    /// Busy answers received.
    pub busy: AtomicU64,
    /// Tablets whose scan finished on each attempt plan (index = plan).
    pub served_by_plan: StdMutex<Vec<u64>>,
    /// Tablets whose scan finished on their tablet server (no scan server).
    pub served_by_tserver: AtomicU64,
}

/// What a tablet's source needs to open an attempt.
pub(crate) struct Plan {
    /// The scan as the query asks for it (start, limit and busy timeout are
    /// set per attempt).
    pub template: ScanStart,
    /// The tablet's server (for profiles that fall back to it).
    pub tserver: String,
    /// The profile.
    pub profile: Arc<Profile>,
    /// The first attempt's busy timeout instead of the profile's, ms (later
    /// attempts escalate from it by the profile's multiplier).
    pub busy_timeout_ms: Option<u64>,
    /// Idle timeout of a stream.
    pub idle: Duration,
    /// Batches the whole query consumed (keepalives carry it).
    pub progress: Arc<AtomicU64>,
    /// The query's counters.
    pub counters: Arc<EventualCounters>,
    /// Rows the servers read and matched.
    pub examined: Arc<coordinator::ExaminedCounters>,
}

struct State {
    current: Option<GrpcSource>,
    /// The server of the current attempt, and its plan (`None`: tablet server).
    server: String,
    plan: Option<usize>,
    /// Whether the current attempt's first batch arrived (first-plan heat).
    first_batch_seen: bool,
    attempts: Vec<Attempt>,
    /// The key of the last row received (resume point), rows received.
    last_key: Option<Vec<u8>>,
    delivered: u64,
    window: u32,
    done: bool,
    cancelled: bool,
    /// Rows received by finished attempts.
    rows_before: u64,
}

/// One tablet's eventual scan as a merge source (see the module docs).
pub(crate) struct EventualSource {
    client: AsyncClient,
    handle: tokio::runtime::Handle,
    plan: Plan,
    tablet_key: Vec<u8>,
    state: Mutex<State>,
    /// Why the source failed, when it did.
    pub(crate) failure: Mutex<Option<Status>>,
    /// Pump tasks of every attempt's stream.
    pub(crate) pumps: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

/// A tablet's name for the dispatcher (rendezvous hashing, heat).
pub(crate) fn tablet_key(table_id: u64, tablet_id: u64) -> Vec<u8> {
    let mut k = table_id.to_be_bytes().to_vec();
    k.extend_from_slice(&tablet_id.to_be_bytes());
    k
}

/// The busy timeout of a tablet's attempt after `attempts_before` ones, ms:
/// the selector's (`chosen_ms`), or, with an override, the override
/// escalated by the profile's multiplier per earlier attempt (up to the
/// profile's cap), so a short timeout sheds load without failing the read.
pub(crate) fn busy_timeout_ms(
    profile: &Profile,
    override_ms: Option<u64>,
    attempts_before: usize,
    chosen_ms: u64,
) -> u64 {
    match override_ms {
        Some(o) => {
            let k = i32::try_from(attempts_before).unwrap_or(i32::MAX);
            let t = o as f64 * profile.busy_timeout_multiplier.powi(k);
            (t.min(profile.busy_timeout_max_ms as f64) as u64).max(o)
        }
        None => chosen_ms,
    }
}

/// The smallest key after `k`.
pub(crate) fn after(k: &[u8]) -> Vec<u8> {
    let mut v = k.to_vec();
    v.push(0);
    v
}

impl EventualSource {
    pub(crate) fn new(client: AsyncClient, handle: tokio::runtime::Handle, plan: Plan) -> Self {
        let tablet_key = tablet_key(plan.template.table_id, plan.template.tablet_id);
        let window = plan.template.window;
        EventualSource {
            client,
            handle,
            plan,
            tablet_key,
            state: Mutex::new(State {
                current: None,
                server: String::new(),
                plan: None,
                first_batch_seen: false,
                attempts: Vec::new(),
                last_key: None,
                delivered: 0,
                window,
                done: false,
                cancelled: false,
                rows_before: 0,
            }),
            failure: Mutex::new(None),
            pumps: Mutex::new(Vec::new()),
        }
    }

    /// Rows that arrived from every attempt.
    pub(crate) fn rows_received(&self) -> u64 {
        let st = self.state.lock();
        st.rows_before
            + st.current
                .as_ref()
                .map_or(0, |c| c.rows_received.load(Ordering::Relaxed))
    }

    fn fail(&self, s: Status) -> StreamError {
        *self.failure.lock() = Some(s);
        StreamError::Failed
    }

    /// Opens the next attempt: asks the selector, waits its delay, starts a
    /// one-slot stream on the chosen server from the resume point.
    fn open(&self, st: &mut State) -> Result<(), StreamError> {
        let profile = &self.plan.profile;
        let waited_from = Instant::now();
        let dispatch = loop {
            let servers = self
                .handle
                .block_on(self.client.scan_server_snapshot(&profile.group, false))
                .map_err(|e| self.fail(Status::unavailable(e.to_string())))?;
            let heat = self.client.heat(&self.tablet_key);
            let tablets = [TabletAttempts {
                tablet: &self.tablet_key,
                attempts: &st.attempts,
                heat,
            }];
            let req = Request {
                tablets: &tablets,
                servers: &servers,
                profile,
                waited_for_servers_ms: waited_from.elapsed().as_millis() as u64,
                seed: rand::random(),
            };
            match select(&req) {
                Ok(Selection::Dispatch(d)) => break d,
                Ok(Selection::WaitForServers { recheck_after_ms }) => {
                    std::thread::sleep(Duration::from_millis(recheck_after_ms.max(1)));
                    let _ = self
                        .handle
                        .block_on(self.client.scan_server_snapshot(&profile.group, true));
                }
                Err(e) => return Err(self.fail(Status::unavailable(e.to_string()))),
            }
        };
        if dispatch.delay_ms > 0 {
            std::thread::sleep(Duration::from_millis(dispatch.delay_ms));
        }
        let busy = busy_timeout_ms(
            profile,
            self.plan.busy_timeout_ms,
            st.attempts.len(),
            dispatch.busy_timeout_ms,
        );
        let (server, busy, plan) = match dispatch.targets.first() {
            Some(Target::ScanServer(s)) => (s.clone(), busy, Some(dispatch.plan)),
            _ => (self.plan.tserver.clone(), 0, None),
        };
        if server.is_empty() {
            return Err(self.fail(Status::unavailable(format!(
                "tablet {} has no server to fall back to",
                self.plan.template.tablet_id
            ))));
        }
        let mut start = self.plan.template.clone();
        if let Some(k) = &st.last_key {
            start.start = after(k);
        }
        if start.limit > 0 {
            start.limit = start.limit.saturating_sub(st.delivered).max(1);
        }
        start.window = st.window;
        start.busy_timeout_ms = u32::try_from(busy).unwrap_or(u32::MAX);
        start.attempt = u32::try_from(st.attempts.len() + 1).unwrap_or(u32::MAX);
        start.plan = plan.map_or(0, |p| u32::try_from(p).unwrap_or(u32::MAX));
        let transport = self
            .client
            .transport(&server)
            .map_err(|e| self.fail(Status::unavailable(e.to_string())))?;
        let mut srcs = coordinator::open_many(
            &self.handle,
            transport,
            vec![start],
            false,
            self.plan.idle,
            self.plan.progress.clone(),
            self.plan.examined.clone(),
        );
        let src = srcs.remove(0);
        if let Some(p) = src.pump.lock().take() {
            self.pumps.lock().push(p);
        }
        self.plan.counters.attempts.fetch_add(1, Ordering::Relaxed);
        st.current = Some(src);
        st.server = server;
        st.plan = plan;
        st.first_batch_seen = false;
        Ok(())
    }

    /// The current attempt ended without its last batch: record how, and
    /// whether to try again.
    fn attempt_failed(&self, st: &mut State, status: Status) -> Result<(), StreamError> {
        let crate::error::Verdict { retry, busy, .. } =
            crate::error::classify(&status, crate::error::Op::Eventual);
        if let Some(c) = st.current.take() {
            st.rows_before += c.rows_received.load(Ordering::Relaxed);
            c.cancel();
        }
        if busy {
            self.plan.counters.busy.fetch_add(1, Ordering::Relaxed);
        }
        if st.plan == Some(0) && !st.first_batch_seen {
            self.client.record_heat(&self.tablet_key, busy);
        }
        st.attempts.push(Attempt {
            server: st.server.clone(),
            outcome: if busy {
                AttemptOutcome::Busy
            } else {
                AttemptOutcome::Error
            },
        });
        if !retry || st.attempts.len() >= EVENTUAL_ATTEMPTS_MAX {
            return Err(self.fail(Status::new(
                status.code(),
                format!(
                    "tablet {} after {} attempts: {}",
                    self.plan.template.tablet_id,
                    st.attempts.len(),
                    status.message()
                ),
            )));
        }
        if !busy {
            // Errors may mean the server is gone: look again.
            let _ = self.handle.block_on(
                self.client
                    .scan_server_snapshot(&self.plan.profile.group, true),
            );
        }
        Ok(())
    }
}

impl BatchSource for EventualSource {
    fn ready(&self) -> bool {
        let st = self.state.lock();
        st.done || st.current.as_ref().is_none_or(|c| c.ready())
    }

    fn recv(&self) -> Result<Received, StreamError> {
        let mut st = self.state.lock();
        loop {
            if st.done {
                return Ok(Received::End);
            }
            if st.cancelled {
                return Err(StreamError::Cancelled);
            }
            if st.current.is_none() {
                self.open(&mut st)?;
            }
            let r = match st.current.as_ref() {
                Some(c) => c.recv(),
                None => continue,
            };
            match r {
                Ok(Received::Batch(rows)) => {
                    if !st.first_batch_seen {
                        st.first_batch_seen = true;
                        if st.plan == Some(0) {
                            self.client.record_heat(&self.tablet_key, false);
                        }
                    }
                    if let Some((k, _)) = rows.last() {
                        st.last_key = Some(k.clone());
                    }
                    st.delivered += rows.len() as u64;
                    return Ok(Received::Batch(rows));
                }
                Ok(Received::End) => {
                    st.done = true;
                    match st.plan {
                        Some(p) => {
                            if let Ok(mut v) = self.plan.counters.served_by_plan.lock() {
                                if v.len() <= p {
                                    v.resize(p + 1, 0);
                                }
                                v[p] += 1;
                            }
                        }
                        None => {
                            self.plan
                                .counters
                                .served_by_tserver
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    return Ok(Received::End);
                }
                Err(StreamError::Failed) => {
                    let status = st
                        .current
                        .as_ref()
                        .and_then(|c| c.failure.lock().take())
                        .unwrap_or_else(|| Status::unavailable("scan stream failed"));
                    self.attempt_failed(&mut st, status)?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    fn ack(&self) {
        if let Some(c) = self.state.lock().current.as_ref() {
            c.ack();
        }
    }

    fn ack_with_window(&self, window: u32) {
        let mut st = self.state.lock();
        st.window = window;
        if let Some(c) = st.current.as_ref() {
            c.ack_with_window(window);
        }
    }

    fn set_window(&self, window: u32) {
        let mut st = self.state.lock();
        st.window = window;
        if let Some(c) = st.current.as_ref() {
            c.set_window(window);
        }
    }

    fn window(&self) -> u32 {
        self.state.lock().window
    }

    fn cancel(&self) -> u64 {
        let mut st = self.state.lock();
        st.cancelled = true;
        st.current.as_ref().map_or(0, |c| c.cancel())
    }

    fn next_hint(&self) -> Option<Vec<u8>> {
        self.state
            .lock()
            .current
            .as_ref()
            .and_then(|c| c.next_hint())
    }
}

/// Live scan servers of `group` (or every group) as the selector takes them.
pub(crate) fn snapshot(servers: &[ScanServerStatus]) -> ServerSnapshot {
    let mut s = ServerSnapshot::new();
    for v in servers {
        s.insert(&v.group, v.address.clone());
    }
    s
}
