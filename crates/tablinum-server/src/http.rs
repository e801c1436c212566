//! The HTTP pages for operators: `GET /metrics` (Prometheus text format),
//! `GET /` (an HTML status page) and `GET /health`.
//!
//! Owns the rendering and the accept loop; HTTP itself is hyper's.
//! Requests are treated as hostile: the head is read up to
//! [`REQUEST_HEAD_BYTES_MAX`] bytes within [`REQUEST_TIMEOUT_MS`] (the
//! whole exchange must finish within it too), at most [`CONNECTIONS_MAX`]
//! connections are served at once (a newcomer ends the oldest connection
//! still sending its head), a malformed request gets 400, and only
//! GET is served; anything else gets a 4xx. Every path but `/health` needs
//! credentials (`Authorization: Bearer <token>`, or HTTP Basic with the
//! token as password, so a browser can ask for it): a read token or better,
//! or the cluster credential; otherwise 401.
//! Never changes cluster state, and never renders a secret.

use std::collections::{HashMap, VecDeque};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::net::TcpListener;

use base64::Engine as _;
use tablinum_auth::{Need, Verifier};

use crate::manager::Manager;
use crate::tserver::Tserver;

/// Largest request head accepted, bytes.
pub const REQUEST_HEAD_BYTES_MAX: usize = 8 << 10;
/// Time a client has to send its request head, and to take the response, ms.
pub const REQUEST_TIMEOUT_MS: u64 = 5_000;
/// Connections served at once; beyond it a newcomer ends the oldest one
/// still sending its head, or waits if every one is answering.
pub const CONNECTIONS_MAX: usize = 256;
/// Pause after a failed accept (e.g. out of file descriptors), ms.
pub const ACCEPT_BACKOFF_MS: u64 = 50;

/// Time between two rate samples of the status page, ms.
pub const RATE_SAMPLE_INTERVAL_MS: u64 = 5_000;
/// Rate samples kept per series: the charts show the last 5 minutes.
pub const RATE_SAMPLES_MAX: usize = 60;
/// Tablets listed on the status page, at most (the rest are counted).
pub const PAGE_TABLETS_MAX: usize = 500;

/// What one process runs: either role or both.
pub struct Node {
    /// The manager, when this process runs it.
    pub manager: Option<Arc<Manager>>,
    /// The tablet server, when this process runs it.
    pub tserver: Option<Arc<Tserver>>,
    /// The scan server, when this process runs one.
    pub sserver: Option<Arc<crate::sserver::Sserver>>,
    rates: Mutex<Rates>,
    verifier: Arc<Verifier>,
}

/// Rows written and read per second, sampled every
/// [`RATE_SAMPLE_INTERVAL_MS`]: per server (this one, or every live server
/// the manager hears from) and per tablet open here.
#[derive(Default)]
struct Rates {
    at: Option<Instant>,
    /// Counters (written, read) at the last sample, per series.
    last: HashMap<String, (u64, u64)>,
    /// (written/s, read/s), oldest first, per server.
    history: HashMap<String, VecDeque<(f64, f64)>>,
    /// Counters at the last sample and the latest rates, per tablet.
    tablets: HashMap<TabletKey, (Counts, PerSecond)>,
}

/// (table id, tablet id, epoch).
type TabletKey = (u64, u64, u64);
/// Rows (written, read) so far.
type Counts = (u64, u64);
/// Rows (written, read) per second.
type PerSecond = (f64, f64);

impl Node {
    /// A node of these roles.
    pub fn new(
        manager: Option<Arc<Manager>>,
        tserver: Option<Arc<Tserver>>,
        verifier: Arc<Verifier>,
    ) -> Arc<Node> {
        Arc::new(Node {
            manager,
            tserver,
            sserver: None,
            rates: Mutex::new(Rates::default()),
            verifier,
        })
    }

    /// The node of a scan-server process.
    pub fn for_sserver(s: Arc<crate::sserver::Sserver>, verifier: Arc<Verifier>) -> Arc<Node> {
        Arc::new(Node {
            manager: None,
            tserver: None,
            sserver: Some(s),
            rates: Mutex::new(Rates::default()),
            verifier,
        })
    }

    /// Samples the rates every [`RATE_SAMPLE_INTERVAL_MS`] until `stop`.
    pub async fn sample_loop(self: Arc<Self>, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            self.sample();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(RATE_SAMPLE_INTERVAL_MS)) => {}
                _ = stop.changed() => return,
            }
        }
    }

    /// Takes one rate sample.
    fn sample(&self) {
        let mut series: Vec<(String, u64, u64)> = Vec::new();
        if let Some(m) = &self.manager {
            for s in m.snapshot().servers {
                series.push((s.id, s.rows_written, s.rows_read));
            }
        }
        let mut tablets = Vec::new();
        if let Some(ts) = &self.tserver {
            let m = &ts.metrics;
            series.push((
                ts.id().to_string(),
                m.rows_written.load(Ordering::Relaxed),
                m.rows_read.load(Ordering::Relaxed),
            ));
            for t in ts.open_tablets() {
                tablets.push((
                    (t.table_id, t.id, t.epoch),
                    (
                        t.rows_written.load(Ordering::Relaxed),
                        t.rows_read.load(Ordering::Relaxed),
                    ),
                ));
            }
        }
        let now = Instant::now();
        let mut g = self.rates.lock();
        let dt = g.at.map(|t| now.duration_since(t).as_secs_f64());
        g.at = Some(now);
        let rate = |now: u64, before: u64, dt: f64| now.saturating_sub(before) as f64 / dt;
        let mut last = HashMap::new();
        for (id, w, r) in series {
            if let (Some(dt), Some(&(pw, pr))) = (dt, g.last.get(&id)) {
                let h = g.history.entry(id.clone()).or_default();
                h.push_back((rate(w, pw, dt), rate(r, pr, dt)));
                while h.len() > RATE_SAMPLES_MAX {
                    h.pop_front();
                }
            }
            last.insert(id, (w, r));
        }
        g.history.retain(|id, _| last.contains_key(id));
        g.last = last;
        let mut next = HashMap::new();
        for (k, (w, r)) in tablets {
            let rates = match (dt, g.tablets.get(&k)) {
                (Some(dt), Some(&((pw, pr), _))) => (rate(w, pw, dt), rate(r, pr, dt)),
                _ => (0.0, 0.0),
            };
            next.insert(k, ((w, r), rates));
        }
        g.tablets = next;
    }

    /// Whether the `Authorization` header value allows a read; `Err` holds
    /// the reason (without any secret).
    fn authorized(&self, value: Option<&[u8]>) -> Result<(), String> {
        let value = value
            .map(|v| std::str::from_utf8(v).map_err(|_| "bad credentials: not text".to_string()))
            .transpose()?
            .map(str::trim);
        let bearer = match value {
            Some(v)
                if v.len() > 6
                    && v.is_char_boundary(6)
                    && v[..6].eq_ignore_ascii_case("basic ") =>
            {
                let raw = base64::engine::general_purpose::STANDARD
                    .decode(v[6..].trim())
                    .map_err(|_| "bad credentials: Basic credentials are not base64".to_string())?;
                let text = String::from_utf8(raw)
                    .map_err(|_| "bad credentials: Basic credentials are not text".to_string())?;
                let token = text.split_once(':').map_or(text.as_str(), |(_, p)| p);
                Some(format!("Bearer {token}"))
            }
            other => other.map(str::to_string),
        };
        let p = self
            .verifier
            .check_header(bearer.as_deref().map(str::as_bytes))
            .map_err(|s| s.message().to_string())?;
        if p.may(Need::Read) {
            Ok(())
        } else {
            Err(format!("{p} may not read"))
        }
    }

    /// The Prometheus text exposition of this node.
    pub fn metrics(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "# HELP tablinum_build_info The running tablinum's version.\n\
             # TYPE tablinum_build_info gauge\ntablinum_build_info{{version=\"{}\"}} 1",
            crate::VERSION
        );
        let mut metric = |name: &str, kind: &str, help: &str, v: f64| {
            let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {v}");
        };
        if let Some(m) = &self.manager {
            let snap = m.snapshot();
            metric(
                "tablinum_manager_tables",
                "gauge",
                "Tables.",
                snap.tables.len() as f64,
            );
            metric(
                "tablinum_manager_tablets",
                "gauge",
                "Tablets of all tables.",
                snap.tables.iter().map(|t| f64::from(t.tablets)).sum(),
            );
            metric(
                "tablinum_manager_tablets_unassigned",
                "gauge",
                "Tablets without a live server.",
                f64::from(snap.tablets_unassigned),
            );
            metric(
                "tablinum_manager_live_servers",
                "gauge",
                "Tablet servers heard from within the heartbeat timeout.",
                snap.servers.len() as f64,
            );
            metric(
                "tablinum_manager_servers_expired_total",
                "counter",
                "Tablet servers declared dead.",
                snap.servers_expired as f64,
            );
            metric(
                "tablinum_manager_tablet_assignments_total",
                "counter",
                "Tablet assignments and moves.",
                snap.reassignments as f64,
            );
        }
        if let Some(ss) = &self.sserver {
            let m = &ss.metrics;
            let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
            let (running, queued) = ss.queue.depth();
            let batches = c(&ss.queue.batches_total);
            for (name, kind, help, v) in [
                (
                    "tablinum_sserver_scans_total",
                    "counter",
                    "Scan streams started.",
                    c(&m.scans),
                ),
                (
                    "tablinum_sserver_scans_active",
                    "gauge",
                    "Scan streams running.",
                    c(&m.scans_active),
                ),
                (
                    "tablinum_sserver_batches_total",
                    "counter",
                    "Batches that got a scan thread.",
                    batches,
                ),
                (
                    "tablinum_sserver_busy_total",
                    "counter",
                    "Batches answered busy (queued past their busy timeout; no work done).",
                    c(&ss.queue.busy_total),
                ),
                (
                    "tablinum_sserver_scan_threads_busy",
                    "gauge",
                    "Batches running on scan threads.",
                    running as f64,
                ),
                (
                    "tablinum_sserver_queue_depth",
                    "gauge",
                    "Batches waiting for a scan thread.",
                    queued as f64,
                ),
                (
                    "tablinum_sserver_queued_seconds_total",
                    "counter",
                    "Time batches waited for a scan thread.",
                    c(&ss.queue.queued_us_total) / 1e6,
                ),
                (
                    "tablinum_sserver_rows_read_total",
                    "counter",
                    "Rows sent.",
                    c(&m.rows_read),
                ),
                (
                    "tablinum_sserver_reads_total",
                    "counter",
                    "Get and head requests.",
                    c(&m.reads),
                ),
                (
                    "tablinum_sserver_views_cached",
                    "gauge",
                    "Tablets with a cached file-set view.",
                    ss.views_cached() as f64,
                ),
                (
                    "tablinum_sserver_views_opened_total",
                    "counter",
                    "Tablet file sets read and reserved.",
                    c(&m.views_opened),
                ),
                (
                    "tablinum_sserver_views_pinned_total",
                    "counter",
                    "Views a scan held past a reservation lease: files pinned, reservation released.",
                    c(&m.views_pinned),
                ),
                (
                    "tablinum_sserver_reservation_seconds_total",
                    "counter",
                    "Time spent reading, reserving and re-validating file sets.",
                    c(&m.view_open_us) / 1e6,
                ),
                (
                    "tablinum_sserver_view_cache_hits_total",
                    "counter",
                    "Reads served by a cached view.",
                    c(&m.view_hits),
                ),
                (
                    "tablinum_sserver_ack_timeouts_total",
                    "counter",
                    "Streams ended by the ack-wait timeout.",
                    c(&m.ack_timeouts),
                ),
                (
                    "tablinum_sserver_refused_total",
                    "counter",
                    "Requests refused.",
                    c(&m.refused),
                ),
            ] {
                metric(name, kind, help, v);
            }
        }
        if let Some(ts) = &self.tserver {
            let m = &ts.metrics;
            let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed) as f64;
            metric(
                "tablinum_tserver_tablets",
                "gauge",
                "Tablets open on this server.",
                ts.hosted().len() as f64,
            );
            metric(
                "tablinum_tserver_rows_written_total",
                "counter",
                "Objects written (puts and deletes).",
                c(&m.rows_written),
            );
            metric(
                "tablinum_tserver_rows_read_total",
                "counter",
                "Rows read by gets and scans.",
                c(&m.rows_read),
            );
            metric(
                "tablinum_tserver_write_requests_total",
                "counter",
                "Write requests.",
                c(&m.writes),
            );
            metric(
                "tablinum_tserver_read_requests_total",
                "counter",
                "Get and head requests.",
                c(&m.reads),
            );
            metric(
                "tablinum_tserver_scans_total",
                "counter",
                "Scan streams started.",
                c(&m.scans),
            );
            metric(
                "tablinum_tserver_scans_active",
                "gauge",
                "Scan streams running.",
                c(&m.scans_active),
            );
            metric(
                "tablinum_tserver_scan_bytes_in_flight",
                "gauge",
                "Bytes of scan batches sent and not yet acknowledged, all streams \
                 (scan_bytes_in_flight_max).",
                ts.scan_bytes_in_flight() as f64,
            );
            metric(
                "tablinum_tserver_scan_batches_total",
                "counter",
                "Scan batches sent.",
                c(&m.batches_sent),
            );
            metric(
                "tablinum_tserver_scan_ack_timeouts_total",
                "counter",
                "Scan streams ended by the ack-wait timeout.",
                c(&m.ack_timeouts),
            );
            metric(
                "tablinum_tserver_queries_total",
                "counter",
                "Coordinated queries run for thin clients.",
                c(&m.queries),
            );
            metric(
                "tablinum_tserver_refused_total",
                "counter",
                "Requests refused (bad input, not serving).",
                c(&m.refused),
            );
            let (mut jc, mut jb, mut mem) = (0u64, 0u64, 0u64);
            let mut reads = tablinum_engine::ReadStats::default();
            let mut block_cache = 0u64;
            for t in ts.open_tablets() {
                let st = t.store.stats();
                jc += st.journal_compactions;
                jb += st.journal_bytes_reclaimed;
                mem += st.memtable_bytes;
                block_cache = block_cache.max(st.block_cache_bytes);
                reads.add(&st.reads);
            }
            for (name, help, v) in [
                (
                    "tablinum_tserver_memtable_bytes",
                    "Bytes the memtables of the tablets open now count (active and frozen).",
                    mem,
                ),
                (
                    "tablinum_tserver_block_cache_bytes",
                    "Bytes of decoded ledger blocks the shared block cache holds.",
                    block_cache,
                ),
                (
                    "tablinum_tserver_block_cache_hits",
                    "Ledger blocks found in the block cache, summed over the tablets open now since they opened.",
                    reads.block_cache_hits,
                ),
                (
                    "tablinum_tserver_block_cache_misses",
                    "Ledger blocks read from disk, summed over the tablets open now.",
                    reads.block_cache_misses,
                ),
                (
                    "tablinum_tserver_block_read_bytes",
                    "Bytes read from ledger tables for those misses, summed over the tablets open now.",
                    reads.block_read_bytes,
                ),
                (
                    "tablinum_tserver_ledger_table_probes",
                    "Ledger tables point lookups consulted, summed over the tablets open now.",
                    reads.table_probes,
                ),
                (
                    "tablinum_tserver_bloom_negatives",
                    "Table probes the bloom filter answered alone, summed over the tablets open now.",
                    reads.bloom_negatives,
                ),
                (
                    "tablinum_tserver_bloom_false_positives",
                    "Table probes the bloom filter passed for an absent key, summed over the tablets open now.",
                    reads.bloom_false_positives,
                ),
                (
                    "tablinum_tserver_value_reads",
                    "Values read from journal segments, summed over the tablets open now.",
                    reads.value_reads,
                ),
                (
                    "tablinum_tserver_value_read_bytes",
                    "Bytes read from journal segments for values, summed over the tablets open now.",
                    reads.value_read_bytes,
                ),
            ] {
                metric(name, "gauge", help, v as f64);
            }
            metric(
                "tablinum_tserver_journal_compactions",
                "gauge",
                "Journal compactions (value GC) that rewrote segments, summed over the tablets open now since they opened.",
                jc as f64,
            );
            metric(
                "tablinum_tserver_journal_bytes_reclaimed",
                "gauge",
                "Journal bytes those reclaimed, summed over the tablets open now.",
                jb as f64,
            );
            metric(
                "tablinum_tserver_tablets_opened_total",
                "counter",
                "Tablets opened (recoveries included).",
                c(&m.tablets_opened),
            );
            metric(
                "tablinum_tserver_topic_records_trimmed_total",
                "counter",
                "Topic records removed by retention.",
                c(&m.topic_records_trimmed),
            );
            metric(
                "tablinum_tserver_tablet_recoveries_total",
                "counter",
                "Poisoned tablets reopened in place from durable state.",
                ts.recoveries.load(Ordering::Relaxed) as f64,
            );
            let _ = writeln!(
                s,
                "# HELP tablinum_tserver_tablets Tablets held, by condition.\n\
                 # TYPE tablinum_tserver_tablets gauge"
            );
            for (cond, n) in ts.tablet_conditions() {
                let _ = writeln!(
                    s,
                    "tablinum_tserver_tablets{{condition=\"{}\"}} {n}",
                    condition_label(cond)
                );
            }
        }
        if let Some(ss) = &self.sserver {
            let (by_attempt, by_plan) = ss.metrics.served_counts();
            for (name, label, help, values, names) in [
                (
                    "tablinum_sserver_served_by_attempt_total",
                    "attempt",
                    "Reads and scans served (they got a scan thread), by the client's attempt number.",
                    &by_attempt,
                    ["1", "2", "3", "4+"],
                ),
                (
                    "tablinum_sserver_served_by_plan_total",
                    "plan",
                    "Reads and scans served, by the attempt plan that chose this server.",
                    &by_plan,
                    ["0", "1", "2", "3+"],
                ),
            ] {
                let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} counter");
                for (v, l) in values.iter().zip(names) {
                    let _ = writeln!(s, "{name}{{{label}=\"{l}\"}} {v}");
                }
            }
        }
        if let Some(m) = &self.manager {
            flow_metrics(&mut s, &m.snapshot());
        }
        s
    }

    /// The HTML status page: refreshes itself every
    /// [`RATE_SAMPLE_INTERVAL_MS`]; keys are shown as the CLI shows them.
    pub fn page(&self) -> String {
        let mut h = format!(
            "<!doctype html><html><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"{}\"><title>tablinum</title><style>{PAGE_CSS}</style>\
             </head><body><h1>tablinum <small>{}</small></h1>",
            RATE_SAMPLE_INTERVAL_MS / 1000,
            crate::VERSION
        );
        let rates = self.rates.lock();
        if let Some(m) = &self.manager {
            let snap = m.snapshot();
            let tablets: u32 = snap.tables.iter().map(|t| t.tablets).sum();
            let _ =
                write!(
                h,
                "<div class=\"cards\"><div><b>{}</b>live servers</div><div><b>{}</b>tables</div>\
                 <div><b>{tablets}</b>tablets</div><div class=\"{}\"><b>{}</b>unassigned</div>\
                 <div><b>{}</b>servers declared dead</div></div>",
                snap.servers.len(),
                snap.tables.len(),
                if snap.tablets_unassigned > 0 { "warn" } else { "" },
                snap.tablets_unassigned,
                snap.servers_expired,
            );
            h.push_str(
                "<h2>Tablet servers</h2><table><tr><th>id</th><th>address</th><th>tablets</th>\
                 <th>last heartbeat</th><th>rows/s written</th><th>rows/s read</th>\
                 <th>last 5 minutes <span class=\"w\">written</span> <span class=\"r\">read</span></th></tr>",
            );
            for s in &snap.servers {
                let hist = rates.history.get(&s.id);
                let (w, r) = hist.and_then(|h| h.back().copied()).unwrap_or_default();
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{} ms ago</td>\
                     <td class=\"n\">{w:.0}</td><td class=\"n\">{r:.0}</td><td>{}</td></tr>",
                    esc(&s.id),
                    esc(&s.address),
                    s.tablets,
                    s.last_heartbeat_ms,
                    sparkline(hist),
                );
            }
            h.push_str("</table>");
            let faults: Vec<(&str, &tablinum_proto::v1::TabletFault)> = snap
                .servers
                .iter()
                .flat_map(|s| s.faults.iter().map(move |f| (s.address.as_str(), f)))
                .collect();
            if !faults.is_empty() {
                h.push_str(
                    "<h2 class=\"warn\">Tablets not serving normally</h2><table><tr><th>table</th>\
                     <th>tablet</th><th>server</th><th>condition</th><th>journal I/O in flight</th>\
                     <th>reason</th></tr>",
                );
                for (addr, f) in faults {
                    let cond = tablinum_proto::v1::TabletCondition::try_from(f.condition)
                        .map_or("unknown", condition_label);
                    let _ = write!(
                        h,
                        "<tr><td>{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"warn\">{cond}</td>\
                         <td class=\"n\">{} ms</td><td>{}</td></tr>",
                        esc(&f.table),
                        f.tablet_id,
                        esc(addr),
                        f.io_stalled_ms,
                        esc(&f.reason),
                    );
                }
                h.push_str("</table>");
            }
            h.push_str(
                "<h2>Scan servers</h2><table><tr><th>id</th><th>address</th><th>group</th>\
                 <th>last heartbeat</th><th>running</th><th>queued</th><th>batches</th><th>busy</th>\
                 <th title=\"reads and scans served on the client's 1st / 2nd / 3rd / later attempt\">\
                 served on attempt 1/2/3/4+</th><th title=\"by the attempt plan that chose the server\">\
                 by plan 0/1/2/3+</th></tr>",
            );
            for s in &snap.scan_servers {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"n\">{} ms ago</td>\
                     <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
                    esc(&s.id),
                    esc(&s.address),
                    esc(&s.group),
                    s.last_heartbeat_ms,
                    s.scans_running,
                    s.queue_depth,
                    s.batches_total,
                    s.busy_total,
                    served_cell(&s.served_by_attempt),
                    served_cell(&s.served_by_plan),
                );
            }
            h.push_str(
                "</table><h2>Tables</h2><table><tr><th>name</th><th>id</th><th>tablets</th><th>durability</th></tr>",
            );
            for t in &snap.tables {
                let d = if t.durability == 1 { "nosync" } else { "sync" };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{d}</td></tr>",
                    esc(&t.name),
                    t.id,
                    t.tablets
                );
            }
            h.push_str("</table>");
            flow_page(&mut h, &snap);
        }
        if let Some(ss) = &self.sserver {
            let (running, queued) = ss.queue.depth();
            let m = &ss.metrics;
            let c = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
            let _ = write!(
                h,
                "<h2>This scan server</h2><p>{} &middot; group {} &middot; {} tablet views cached</p>\
                 <div class=\"cards\"><div><b>{running}</b>batches running</div><div><b>{queued}</b>queued</div>\
                 <div><b>{}</b>batches run</div><div class=\"{}\"><b>{}</b>busy answers</div>\
                 <div><b>{}</b>scans</div><div><b>{}</b>view cache hits</div></div>",
                esc(ss.id()),
                esc(ss.group()),
                ss.views_cached(),
                c(&ss.queue.batches_total),
                if c(&ss.queue.busy_total) > 0 { "warn" } else { "" },
                c(&ss.queue.busy_total),
                c(&m.scans),
                c(&m.view_hits),
            );
        }
        if let Some(ts) = &self.tserver {
            let open = ts.open_tablets();
            let hist = rates.history.get(ts.id());
            let (w, r) = hist.and_then(|h| h.back().copied()).unwrap_or_default();
            let _ = write!(
                h,
                "<h2>This tablet server</h2><p>{} &middot; {} tablets open &middot; {w:.0} rows/s written, \
                 {r:.0} rows/s read {}</p><table><tr><th>table</th><th>tablet</th><th>epoch</th>\
                 <th>start</th><th>end</th><th>on disk</th><th>files</th><th>rows/s written</th>\
                 <th>rows/s read</th><th>compaction debt</th></tr>",
                esc(ts.id()),
                open.len(),
                sparkline(hist),
            );
            for t in open.iter().take(PAGE_TABLETS_MAX) {
                let (tw, tr) = rates
                    .tablets
                    .get(&(t.table_id, t.id, t.epoch))
                    .map(|x| x.1)
                    .unwrap_or_default();
                let stats = t.store.stats();
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td><code>{}</code></td>\
                     <td><code>{}</code></td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
                     <td class=\"n\">{tw:.0}</td><td class=\"n\">{tr:.0}</td><td class=\"n\">{}</td></tr>",
                    esc(&t.table),
                    t.id,
                    t.epoch,
                    esc(&tablinum_client::display_key(&t.start, "-inf")),
                    esc(&tablinum_client::display_key(&t.end, "+inf")),
                    bytes_text(t.store.disk_bytes()),
                    t.store.immutable_files().len(),
                    bytes_text(stats.compaction_debt_bytes),
                );
            }
            h.push_str("</table>");
            if open.len() > PAGE_TABLETS_MAX {
                let _ = write!(
                    h,
                    "<p>{} more tablets not listed (PAGE_TABLETS_MAX)</p>",
                    open.len() - PAGE_TABLETS_MAX
                );
            }
        }
        h.push_str(
            "<p class=\"foot\"><a href=\"/metrics\">/metrics</a> &middot; refreshes every 5 s</p></body></html>\n",
        );
        h
    }
}

/// The page's style.
const PAGE_CSS: &str = "body{font-family:system-ui,sans-serif;margin:1.5em 2em;color:#222}\
h1{margin:0 0 .6em}h2{margin:1.4em 0 .4em;font-size:1.15em}\
table{border-collapse:collapse}td,th{padding:3px 12px;text-align:left;border-bottom:1px solid #e4e4e4}\
th{background:#f4f4f6;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}\
code{font-size:.92em}.cards{display:flex;gap:1em}.cards div{background:#f4f4f6;border-radius:6px;\
padding:.5em 1em;min-width:7em}.cards b{display:block;font-size:1.6em}.cards .warn{background:#fde2e1}\
.w{color:#2b6cb0}.r{color:#c05621}.foot{color:#777;margin-top:2em}";

/// An inline SVG chart of a server's written (blue) and read (orange)
/// rows/s over the samples kept.
fn sparkline(h: Option<&VecDeque<(f64, f64)>>) -> String {
    const W: f64 = 180.0;
    const H: f64 = 28.0;
    let Some(h) = h.filter(|h| h.len() >= 2) else {
        return "<span class=\"foot\">collecting…</span>".into();
    };
    let max = h.iter().map(|&(w, r)| w.max(r)).fold(1.0, f64::max);
    let step = W / (RATE_SAMPLES_MAX - 1) as f64;
    let x0 = W - step * (h.len() - 1) as f64;
    let line = |pick: fn(&(f64, f64)) -> f64| {
        h.iter()
            .enumerate()
            .map(|(i, v)| {
                format!(
                    "{:.1},{:.1}",
                    x0 + step * i as f64,
                    H - 1.0 - (H - 2.0) * pick(v) / max
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "<svg width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\"><rect width=\"{W}\" height=\"{H}\" fill=\"#fafafa\"/>\
         <polyline fill=\"none\" stroke=\"#2b6cb0\" stroke-width=\"1.5\" points=\"{}\"/>\
         <polyline fill=\"none\" stroke=\"#c05621\" stroke-width=\"1.5\" points=\"{}\"/></svg>",
        line(|v| v.0),
        line(|v| v.1)
    )
}

/// Bytes as an operator reads them (KiB, MiB, GiB).
fn bytes_text(b: u64) -> String {
    const UNITS: [&str; 4] = ["B", "KiB", "MiB", "GiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// A scan server's served-by counts as one cell: `12/3/0/0`.
fn served_cell(v: &[u64]) -> String {
    let mut out = String::new();
    for i in 0..tablinum_proto::SERVED_BUCKETS {
        if i > 0 {
            out.push('/');
        }
        let _ = write!(out, "{}", v.get(i).copied().unwrap_or(0));
    }
    out
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The TLS acceptor of the HTTP listener (no client certificates: the
/// pages use tokens).
pub fn tls_acceptor(
    t: &crate::config::ListenerTls,
) -> Result<tokio_rustls::TlsAcceptor, crate::Error> {
    tls_config(t).map_err(crate::Error::Tls)
}

fn tls_config(t: &crate::config::ListenerTls) -> Result<tokio_rustls::TlsAcceptor, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls;
    let certs = CertificateDer::pem_slice_iter(&t.cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("tls_cert: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(&t.key_pem).map_err(|e| format!("tls_key: {e}"))?;
    let cfg = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS: {e}"))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| format!("tls_cert / tls_key: {e}"))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(cfg)))
}

/// Serves `node` on `listener` (through `tls` when set) until `stop` fires:
/// HTTP/1.1 by hyper, one request per connection, at most
/// [`CONNECTIONS_MAX`] connections at once, each given
/// [`REQUEST_TIMEOUT_MS`] for its TLS handshake, request head
/// ([`REQUEST_HEAD_BYTES_MAX`] at most) and response; a malformed request
/// gets 400 and a closed connection. When every place is taken, a new
/// connection ends the oldest one still sending its head (a client that
/// trickles its request delays nobody), and waits only if every place is
/// answering.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    // Connections still in their handshake or head, oldest first.
    let mut heads: VecDeque<(tokio::task::AbortHandle, Arc<AtomicBool>)> = VecDeque::new();
    loop {
        let (sock, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(ACCEPT_BACKOFF_MS)).await;
                    continue;
                }
            },
            _ = stop.changed() => return,
        };
        heads.retain(|(h, read)| !h.is_finished() && !read.load(Ordering::Acquire));
        let permit = match slots.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if let Some((h, _)) = heads.pop_front() {
                    h.abort();
                }
                tokio::select! {
                    p = slots.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => return,
                    },
                    _ = stop.changed() => return,
                }
            }
        };
        let node = node.clone();
        let tls = tls.clone();
        let read = Arc::new(AtomicBool::new(false));
        let head_read = read.clone();
        let task = tokio::spawn(async move {
            let _permit = permit;
            let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
            let _ = tokio::time::timeout(timeout, async move {
                match tls {
                    None => serve_connection(sock, node, head_read).await,
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(sock).await {
                            serve_connection(s, node, head_read).await;
                        }
                    }
                }
            })
            .await;
        });
        heads.push_back((task.abort_handle(), read));
    }
}

/// Serves one request on `io` (plain TCP or TLS), then closes it; sets
/// `head_read` once the request head has arrived.
async fn serve_connection<S>(io: S, node: Arc<Node>, head_read: Arc<AtomicBool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        head_read.store(true, Ordering::Release);
        let node = node.clone();
        async move { Ok::<_, std::convert::Infallible>(respond(&node, &req)) }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(Duration::from_millis(REQUEST_TIMEOUT_MS))
        .max_buf_size(REQUEST_HEAD_BYTES_MAX)
        .keep_alive(false)
        .serve_connection(hyper_util::rt::TokioIo::new(io), svc)
        .await;
}

type Body = http_body_util::Full<bytes::Bytes>;

fn reply(status: u16, ctype: &str, body: String) -> hyper::Response<Body> {
    let mut r = hyper::Response::new(Body::new(bytes::Bytes::from(body)));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::OK);
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

/// The response to one request.
fn respond<B>(node: &Node, req: &hyper::Request<B>) -> hyper::Response<Body> {
    let path = req.uri().path();
    if req.method() != hyper::Method::GET {
        return reply(405, "text/plain", "only GET is served\n".into());
    }
    if path == "/health" {
        return reply(200, "text/plain", "ok\n".into());
    }
    let auth = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .map(hyper::header::HeaderValue::as_bytes);
    if let Err(why) = node.authorized(auth) {
        let mut r = reply(
            401,
            "text/plain",
            format!(
                "{why}\nsend `Authorization: Bearer <token>` (or HTTP Basic with the token as password)\n"
            ),
        );
        r.headers_mut().insert(
            hyper::header::WWW_AUTHENTICATE,
            hyper::header::HeaderValue::from_static("Basic realm=\"tablinum\", charset=\"UTF-8\""),
        );
        return r;
    }
    match path {
        "/metrics" => reply(200, "text/plain; version=0.0.4", node.metrics()),
        "/" => reply(200, "text/html; charset=utf-8", node.page()),
        _ => reply(
            404,
            "text/plain",
            "not found: try /, /metrics or /health\n".into(),
        ),
    }
}

/// A tablet condition as the status page and `/metrics` name it.
fn condition_label(c: tablinum_proto::v1::TabletCondition) -> &'static str {
    use tablinum_proto::v1::TabletCondition as C;
    match c {
        C::TabletServing => "serving",
        C::TabletDiskFull => "disk_full",
        C::TabletDegraded => "degraded",
        C::TabletRecovering => "recovering",
        C::TabletStuck => "stuck",
    }
}

/// Flow and worker metrics of the manager: live workers, and per task its
/// holder, position, lag and rate (labels: flow, task, worker).
fn flow_metrics(s: &mut String, snap: &crate::manager::ManagerSnapshot) {
    let _ = writeln!(
        s,
        "# HELP tablinum_manager_flow_workers Flow workers heard from within the heartbeat timeout.\n\
         # TYPE tablinum_manager_flow_workers gauge\ntablinum_manager_flow_workers {}",
        snap.workers
    );
    for (name, help, kind) in [
        (
            "tablinum_flow_task_position",
            "Input position every sink of the task committed (next offset).",
            "gauge",
        ),
        (
            "tablinum_flow_task_records_in_total",
            "Records the task read on its current worker.",
            "counter",
        ),
        (
            "tablinum_flow_task_records_per_second",
            "Records per second the task read over its last report interval.",
            "gauge",
        ),
        (
            "tablinum_flow_task_lag",
            "Records in the task's input partition past its position.",
            "gauge",
        ),
        (
            "tablinum_flow_task_epoch",
            "Lease epoch of the task's current holder.",
            "gauge",
        ),
    ] {
        let _ = writeln!(s, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for f in &snap.flows {
            for t in &f.tasks {
                let r = t.report.clone().unwrap_or_default();
                let v = match name {
                    "tablinum_flow_task_position" => r.position as f64,
                    "tablinum_flow_task_records_in_total" => r.records_in as f64,
                    "tablinum_flow_task_records_per_second" => r.records_per_sec,
                    "tablinum_flow_task_lag" => r.lag as f64,
                    _ => t.epoch as f64,
                };
                let _ = writeln!(
                    s,
                    "{name}{{flow=\"{}\",task=\"{}\",worker=\"{}\"}} {v}",
                    f.name, t.task, t.worker
                );
            }
        }
    }
}

/// The flows section of the manager's status page.
fn flow_page(h: &mut String, snap: &crate::manager::ManagerSnapshot) {
    let _ = write!(
        h,
        "<h2>Flows</h2><p>{} workers live</p><table><tr><th>flow</th><th>task</th><th>state</th>\
         <th>worker</th><th>epoch</th><th>position</th><th>records in</th><th>records/s</th>\
         <th>lag</th><th>last report</th></tr>",
        snap.workers
    );
    for f in &snap.flows {
        for t in &f.tasks {
            let r = t.report.clone().unwrap_or_default();
            let state = match (f.running, t.worker.is_empty()) {
                (false, _) => "stopped",
                (true, true) => "waiting for a worker",
                (true, false) => "running",
            };
            let seen = if t.report.is_some() {
                format!("{} ms ago", t.last_report_ms)
            } else {
                "-".into()
            };
            let _ = write!(
                h,
                "<tr><td>{}</td><td class=\"n\">{}</td><td>{state}</td><td>{}</td><td class=\"n\">{}</td>\
                 <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.0}</td>\
                 <td class=\"n\">{}</td><td>{seen}</td></tr>",
                esc(&f.name),
                t.task,
                esc(&t.worker),
                t.epoch,
                r.position,
                r.records_in,
                r.records_per_sec,
                r.lag,
            );
        }
    }
    h.push_str("</table>");
}
