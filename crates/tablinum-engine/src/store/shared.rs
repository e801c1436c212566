//! Resources shared by every store of a process: one pool of background
//! workers, one block and file-handle cache, one memtable budget (as fjall's
//! worker pool and write-buffer manager, HBase's global memstore limit).
//!
//! A tablet server opens hundreds of stores; giving each its own threads,
//! cache and memtable allowance multiplies them without a cap. Here the
//! caps are the process's. A store opened with [`Store::open`] gets private
//! resources of its own, sized from its `Options`.
//!
//! The pool runs one unit of work at a time per store and job kind: flushes
//! first (they unblock writers), then ledger compactions, never more
//! compactions at once than `threads - 1`, so a flush always finds a thread.
//! Scheduled journal compaction (value GC) runs on one thread of its own,
//! one store at a time: a run is paced reads that take tens of seconds and
//! then waits for the flush that carries its edit, so in a pool slot it
//! would hold up the store's ledger compactions (and, with two threads,
//! every store's) for as long. A job that panics poisons its store
//! (as a failed fsync does); a job that fails with a transient error
//! ([`Error::is_transient`]) is retried with backoff and the store resumes
//! by itself. The pool never holds a store alive: it keeps weak references.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::cache::Caches;
use crate::error::{Error, Result};

use super::{Inner, Store, BG_TICK_MS};

/// First retry delay after a transient background failure, ms.
const RETRY_FIRST_MS: u64 = 100;
/// Longest retry delay after repeated transient failures, ms.
const RETRY_MAX_MS: u64 = 5_000;
/// How often a store is checked for scheduled journal compaction, ms.
const GC_CHECK_MS: u64 = BG_TICK_MS * 5;
/// Most background worker threads of one `Shared`.
pub const WORKER_THREADS_MAX: usize = 64;

/// Limits of the resources shared by the stores of a process.
#[derive(Debug, Clone)]
pub struct SharedOptions {
    /// Background threads running flushes and compactions for every store;
    /// at least 2 (one is always left for flushes). Default 2.
    pub worker_threads: usize,
    /// Decompressed ledger blocks cached across all stores. Default 64 MiB.
    pub block_cache_bytes: u64,
    /// Read handles kept open across all stores. Default 512.
    pub open_files_max: usize,
    /// Bytes all memtables of all stores may hold: above it the largest
    /// active memtable is frozen for flush; at twice it writers stall. 0: no
    /// budget (each store's `memtable_bytes_max` still applies). Default 0.
    pub memtable_budget_bytes: u64,
}

impl Default for SharedOptions {
    fn default() -> Self {
        SharedOptions {
            worker_threads: 2,
            block_cache_bytes: 64 << 20,
            open_files_max: 512,
            memtable_budget_bytes: 0,
        }
    }
}

impl SharedOptions {
    /// Checks every limit, naming the one that is out of range.
    pub fn validate(&self) -> Result<()> {
        if !(2..=WORKER_THREADS_MAX).contains(&self.worker_threads) {
            return Err(Error::invalid(
                "shared.worker_threads",
                format!(
                    "{} is outside 2..={WORKER_THREADS_MAX} threads",
                    self.worker_threads
                ),
            ));
        }
        if self.open_files_max < 16 {
            return Err(Error::invalid(
                "shared.open_files_max",
                format!("{} is below 16 files", self.open_files_max),
            ));
        }
        if self.memtable_budget_bytes != 0 && self.memtable_budget_bytes < 1 << 20 {
            return Err(Error::invalid(
                "shared.memtable_budget_bytes",
                format!(
                    "{} bytes is below 1 MiB (0 turns the budget off)",
                    self.memtable_budget_bytes
                ),
            ));
        }
        Ok(())
    }
}

/// Background workers, caches and the memtable budget of a process.
pub struct Shared {
    pub(super) caches: Arc<Caches>,
    pub(super) pool: Arc<Pool>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Shared({} workers)", self.pool.threads)
    }
}

impl Shared {
    /// Starts the workers.
    pub fn new(opts: SharedOptions) -> Result<Arc<Shared>> {
        opts.validate()?;
        let pool = Arc::new(Pool {
            state: Mutex::new(PoolState::default()),
            cv: Condvar::new(),
            threads: opts.worker_threads,
            memtable_budget_bytes: opts.memtable_budget_bytes,
            memtable_bytes: Arc::new(AtomicU64::new(0)),
        });
        let mut threads = Vec::with_capacity(opts.worker_threads + 1);
        for i in 0..opts.worker_threads {
            let p = pool.clone();
            let t = std::thread::Builder::new()
                .name(format!("tablinum-bg-{i}"))
                .spawn(move || p.run())
                .map_err(|e| Error::io("spawn background worker", "", e))?;
            threads.push(t);
        }
        let p = pool.clone();
        let t = std::thread::Builder::new()
            .name("tablinum-gc".to_string())
            .spawn(move || p.run_journal_compaction())
            .map_err(|e| Error::io("spawn journal compaction thread", "", e))?;
        threads.push(t);
        Ok(Arc::new(Shared {
            caches: Arc::new(Caches::new(opts.open_files_max, opts.block_cache_bytes)),
            pool,
            threads: Mutex::new(threads),
        }))
    }

    /// Bytes held by the memtables of every store now (including frozen
    /// ones still held by a flush or a snapshot).
    pub fn memtable_bytes(&self) -> u64 {
        self.pool.memtable_bytes.load(Ordering::Relaxed)
    }

    /// Stores registered and not yet dropped.
    pub fn stores(&self) -> usize {
        let mut st = self.pool.state.lock();
        st.stores.retain(|w| w.strong_count() > 0);
        st.stores.len()
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.pool.state.lock().shutdown = true;
        self.pool.cv.notify_all();
        for t in self.threads.lock().drain(..) {
            let _ = t.join();
        }
    }
}

/// Per-store state of its background jobs.
#[derive(Debug, Default)]
pub(super) struct Jobs {
    /// A worker is flushing this store.
    flushing: AtomicBool,
    /// A worker is compacting this store.
    compacting: AtomicBool,
    /// The ledger may need compaction (set by installs, cleared when the
    /// policy finds nothing).
    pub(super) compact_wanted: AtomicBool,
    /// No background work for this store before this instant (backoff after
    /// a transient failure) ...
    retry_at: Mutex<Option<Instant>>,
    /// ... which is the n-th in a row.
    failures_in_row: AtomicU32,
    /// Transient failures retried since open.
    pub(super) retries: AtomicU64,
    /// The last transient failure, while it is not yet overcome.
    pub(super) failing: Mutex<Option<String>>,
    /// The fault rule's condition of that failure.
    pub(super) failing_condition: Mutex<Option<crate::faults::Condition>>,
    /// The journal compaction thread is running a scheduled run of this store.
    journal_compacting: AtomicBool,
}

impl Jobs {
    /// True while a worker runs a job of this store.
    pub(super) fn busy(&self) -> bool {
        self.flushing.load(Ordering::Acquire)
            || self.compacting.load(Ordering::Acquire)
            || self.journal_compacting.load(Ordering::Acquire)
    }

    fn backing_off(&self, now: Instant) -> bool {
        self.retry_at.lock().is_some_and(|t| now < t)
    }

    fn succeeded(&self) {
        self.failures_in_row.store(0, Ordering::Relaxed);
        *self.retry_at.lock() = None;
        *self.failing.lock() = None;
        *self.failing_condition.lock() = None;
    }
}

#[derive(Default)]
struct PoolState {
    stores: Vec<Weak<Inner>>,
    /// Where the next search for work starts (round robin over stores).
    cursor: usize,
    /// Compaction jobs running.
    compacting: usize,
    shutdown: bool,
}

enum Job {
    Flush(Arc<Inner>),
    Compact(Arc<Inner>),
    /// Freeze the active memtable (the memtable budget is exceeded).
    Freeze(Arc<Inner>),
}

/// The worker pool (see the module docs).
pub(super) struct Pool {
    state: Mutex<PoolState>,
    cv: Condvar,
    threads: usize,
    memtable_budget_bytes: u64,
    pub(super) memtable_bytes: Arc<AtomicU64>,
}

impl Pool {
    /// Adds a store to the stores the workers serve.
    pub(super) fn register(&self, inner: &Arc<Inner>) {
        let mut st = self.state.lock();
        st.stores.retain(|w| w.strong_count() > 0);
        st.stores.push(Arc::downgrade(inner));
        drop(st);
        self.kick();
    }

    /// Wakes the workers: there may be work.
    pub(super) fn kick(&self) {
        self.cv.notify_all();
    }

    /// True when writers must stall: the memtables of all stores hold
    /// twice the budget.
    pub(super) fn over_hard_budget(&self) -> bool {
        self.memtable_budget_bytes > 0
            && self.memtable_bytes.load(Ordering::Relaxed) > 2 * self.memtable_budget_bytes
    }

    fn run(self: Arc<Self>) {
        loop {
            let job = {
                let mut st = self.state.lock();
                loop {
                    if st.shutdown {
                        return;
                    }
                    if let Some(job) = self.pick(&mut st) {
                        break job;
                    }
                    self.cv.wait_for(&mut st, Duration::from_millis(BG_TICK_MS));
                }
            };
            let compaction = matches!(job, Job::Compact(_));
            self.execute(job);
            if compaction {
                self.state.lock().compacting -= 1;
            }
            // Whatever finished may have made room or work elsewhere.
            self.cv.notify_all();
        }
    }

    /// The journal compaction thread: every [`GC_CHECK_MS`], each store
    /// whose window is open gets its scheduled run if one is due, one store
    /// at a time.
    fn run_journal_compaction(self: Arc<Self>) {
        loop {
            let stores: Vec<Weak<Inner>> = {
                let mut st = self.state.lock();
                let next = Instant::now() + Duration::from_millis(GC_CHECK_MS);
                while !st.shutdown && Instant::now() < next {
                    self.cv.wait_until(&mut st, next);
                }
                if st.shutdown {
                    return;
                }
                st.stores.clone()
            };
            let now = Instant::now();
            // One strong reference at a time, dropped before the next store.
            for s in stores.iter().filter_map(Weak::upgrade) {
                if s.opts.journal_compaction_hours.is_none() || s.jobs.backing_off(now) {
                    continue;
                }
                // Claim first, then check: `close` marks the store closed
                // and then waits until no job (this one included) runs.
                if s.jobs.journal_compacting.swap(true, Ordering::AcqRel) {
                    continue;
                }
                if !s.closed.load(Ordering::Acquire) && s.bg_error.lock().is_none() {
                    let r = catch_unwind(AssertUnwindSafe(|| {
                        match s.scheduled_journal_compaction() {
                            // Closing interrupted the run: nothing failed
                            // (its edit is flushed by close or dropped with
                            // its unnamed segments at the next open).
                            Err(Error::Closed) => Ok(()),
                            r => r,
                        }
                    }));
                    s.job_done("journal compaction", r);
                }
                s.jobs.journal_compacting.store(false, Ordering::Release);
                s.bg_cv.notify_all();
                if self.state.lock().shutdown {
                    return;
                }
            }
        }
    }

    /// The next job, if any (called with the state locked).
    fn pick(&self, st: &mut PoolState) -> Option<Job> {
        st.stores.retain(|w| w.strong_count() > 0);
        let n = st.stores.len();
        let now = Instant::now();
        let live: Vec<(usize, Arc<Inner>)> = (0..n)
            .map(|i| (st.cursor + i) % n.max(1))
            .filter_map(|i| st.stores[i].upgrade().map(|s| (i, s)))
            .filter(|(_, s)| !s.closed.load(Ordering::Acquire) && s.bg_error.lock().is_none())
            .collect();
        // Flushes first: they unblock writers.
        for (i, s) in &live {
            if s.jobs.backing_off(now) || s.current().mems.len() < 2 {
                continue;
            }
            if !s.jobs.flushing.swap(true, Ordering::AcqRel) {
                st.cursor = i + 1;
                return Some(Job::Flush(s.clone()));
            }
        }
        // Over the memtable budget with much of it in active memtables:
        // freeze the largest, which the flush above then persists.
        if self.memtable_budget_bytes > 0
            && self.memtable_bytes.load(Ordering::Relaxed) > self.memtable_budget_bytes
        {
            let active = |s: &Arc<Inner>| s.current().mems[0].bytes();
            let total: u64 = live.iter().map(|(_, s)| active(s)).sum();
            if total > self.memtable_budget_bytes / 2 {
                if let Some((_, s)) = live.iter().max_by_key(|(_, s)| active(s)) {
                    return Some(Job::Freeze(s.clone()));
                }
            }
        }
        if st.compacting + 1 >= self.threads {
            return None;
        }
        for (i, s) in &live {
            if s.jobs.backing_off(now) {
                continue;
            }
            if !(s.jobs.compact_wanted.load(Ordering::Acquire) || s.graveyard.due(now)) {
                continue;
            }
            if !s.jobs.compacting.swap(true, Ordering::AcqRel) {
                st.cursor = i + 1;
                st.compacting += 1;
                return Some(Job::Compact(s.clone()));
            }
        }
        None
    }

    fn execute(&self, job: Job) {
        match job {
            Job::Flush(s) => {
                let r = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
                    while s.flush_once()? {
                        if s.closed.load(Ordering::Acquire) {
                            break;
                        }
                    }
                    Ok(())
                }));
                s.job_done("flush", r);
                s.jobs.flushing.store(false, Ordering::Release);
                s.bg_cv.notify_all();
            }
            Job::Compact(s) => {
                let r = catch_unwind(AssertUnwindSafe(|| -> Result<()> {
                    if s.graveyard.due(Instant::now()) {
                        s.graveyard.retry();
                    }
                    if s.compact_once()? {
                        return Ok(());
                    }
                    s.jobs.compact_wanted.store(false, Ordering::Release);
                    Ok(())
                }));
                s.job_done("compaction", r);
                s.jobs.compacting.store(false, Ordering::Release);
                s.bg_cv.notify_all();
            }
            Job::Freeze(s) => {
                let w = s.lock_writer();
                if !s.current().mems[0].is_empty() {
                    s.rotate(w.next_seq - 1);
                }
            }
        }
    }
}

impl Inner {
    /// Records how a background job ended: success clears a backoff, a
    /// transient error schedules a retry, a panic or any other error
    /// poisons the store.
    fn job_done(&self, what: &str, r: std::thread::Result<Result<()>>) {
        match r {
            Ok(Ok(())) | Ok(Err(Error::Closed)) => self.jobs.succeeded(),
            Ok(Err(e)) if e.is_transient() => {
                let n = self.jobs.failures_in_row.fetch_add(1, Ordering::Relaxed) + 1;
                let delay = (RETRY_FIRST_MS << (n - 1).min(16)).min(RETRY_MAX_MS);
                *self.jobs.retry_at.lock() = Some(Instant::now() + Duration::from_millis(delay));
                *self.jobs.failing.lock() = Some(format!("{what}: {e}"));
                *self.jobs.failing_condition.lock() = e.condition();
                self.jobs.retries.fetch_add(1, Ordering::Relaxed);
                if what == "compaction" {
                    // Try again once the backoff has passed.
                    self.jobs.compact_wanted.store(true, Ordering::Release);
                }
            }
            Ok(Err(e)) => self.fail_background(&e),
            Err(panic) => {
                let msg = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "non-string panic".into());
                self.fail_background(&Error::Panicked {
                    what: what.to_string(),
                    message: msg,
                });
            }
        }
    }
}

impl Store {
    /// The shared resources this store runs on.
    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }
}
