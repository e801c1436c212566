//! The HTTP pages for operators: `GET /metrics` (Prometheus text format),
//! `GET /` (an HTML status page) and `GET /health`.
//!
//! Owns the rendering and the accept loop; HTTP itself is hyper's.
//! Requests are treated as hostile: the head is read up to
//! [`REQUEST_HEAD_BYTES_MAX`] bytes within [`REQUEST_TIMEOUT_MS`] (the
//! whole exchange must finish within it too), at most [`CONNECTIONS_MAX`]
//! connections are served at once, a malformed request gets 400, and only
//! GET is served; anything else gets a 4xx. Every path but `/health` needs
//! credentials (`Authorization: Bearer <token>`, or HTTP Basic with the
//! token as password, so a browser can ask for it): a read token or better,
//! or the cluster credential; otherwise 401.
//! Never changes cluster state, and never renders a secret.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
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
/// Connections served at once; more wait to be accepted.
pub const CONNECTIONS_MAX: usize = 256;
/// Pause after a failed accept (e.g. out of file descriptors), ms.
pub const ACCEPT_BACKOFF_MS: u64 = 50;

/// What one process runs: either role or both.
pub struct Node {
    /// The manager, when this process runs it.
    pub manager: Option<Arc<Manager>>,
    /// The tablet server, when this process runs it.
    pub tserver: Option<Arc<Tserver>>,
    rate: Mutex<Option<RateSample>>,
    verifier: Arc<Verifier>,
}

/// The last rate sample: when, rows written and read then, and the rates
/// computed at that moment.
type RateSample = (Instant, u64, u64, f64, f64);

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
            rate: Mutex::new(None),
            verifier,
        })
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

    /// Rows written and read per second since the previous call (at least
    /// one second apart), from this node's tablet server counters.
    fn rates(&self) -> (f64, f64) {
        let Some(ts) = &self.tserver else {
            return (0.0, 0.0);
        };
        let w = ts.metrics.rows_written.load(Ordering::Relaxed);
        let r = ts.metrics.rows_read.load(Ordering::Relaxed);
        let now = Instant::now();
        let mut g = self.rate.lock();
        match *g {
            Some((t, pw, pr, rw, rr)) => {
                let dt = now.duration_since(t).as_secs_f64();
                if dt < 1.0 {
                    return (rw, rr);
                }
                let (rw, rr) = ((w - pw) as f64 / dt, (r - pr) as f64 / dt);
                *g = Some((now, w, r, rw, rr));
                (rw, rr)
            }
            None => {
                *g = Some((now, w, r, 0.0, 0.0));
                (0.0, 0.0)
            }
        }
    }

    /// The Prometheus text exposition of this node.
    pub fn metrics(&self) -> String {
        let mut s = String::new();
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
            metric(
                "tablinum_tserver_tablets_opened_total",
                "counter",
                "Tablets opened (recoveries included).",
                c(&m.tablets_opened),
            );
        }
        s
    }

    /// The HTML status page.
    pub fn page(&self) -> String {
        let mut h = String::from(
            "<!doctype html><html><head><meta charset=\"utf-8\"><title>tablinum</title>\
             <style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 10px;text-align:left}</style>\
             </head><body><h1>tablinum</h1>",
        );
        let (w, r) = self.rates();
        if let Some(m) = &self.manager {
            let snap = m.snapshot();
            let _ = write!(
                h,
                "<h2>Live tablet servers ({})</h2><table><tr><th>id</th><th>address</th><th>status page</th><th>tablets</th><th>last heartbeat</th><th>rows written</th><th>rows read</th></tr>",
                snap.servers.len()
            );
            for s in &snap.servers {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{} ms ago</td><td>{}</td><td>{}</td></tr>",
                    esc(&s.id), esc(&s.address), esc(&s.http), s.tablets, s.last_heartbeat_ms, s.rows_written, s.rows_read
                );
            }
            let _ = write!(
                h,
                "</table><h2>Tables ({})</h2><table><tr><th>name</th><th>id</th><th>tablets</th><th>durability</th></tr>",
                snap.tables.len()
            );
            for t in &snap.tables {
                let d = if t.durability == 1 { "nosync" } else { "sync" };
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{d}</td></tr>",
                    esc(&t.name),
                    t.id,
                    t.tablets
                );
            }
            let _ = write!(
                h,
                "</table><p>Unassigned tablets: {}</p>",
                snap.tablets_unassigned
            );
        }
        if let Some(ts) = &self.tserver {
            let hosted = ts.hosted();
            let _ = write!(
                h,
                "<h2>This tablet server ({})</h2><p>{w:.0} rows/s written, {r:.0} rows/s read</p><table><tr><th>table</th><th>tablet</th><th>start</th><th>end</th></tr>",
                esc(ts.id())
            );
            for (t, id, s, e) in &hosted {
                let _ = write!(
                    h,
                    "<tr><td>{}</td><td>{id}</td><td>{}</td><td>{}</td></tr>",
                    esc(t),
                    esc(&String::from_utf8_lossy(s)),
                    esc(&String::from_utf8_lossy(e))
                );
            }
            h.push_str("</table>");
        }
        h.push_str("<p><a href=\"/metrics\">/metrics</a></p></body></html>\n");
        h
    }
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The TLS acceptor of the HTTP listener (no client certificates: the
/// pages use tokens).
pub fn tls_acceptor(t: &crate::config::ListenerTls) -> Result<tokio_rustls::TlsAcceptor, String> {
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
/// [`CONNECTIONS_MAX`] connections at once (more wait to be accepted), each
/// given [`REQUEST_TIMEOUT_MS`] for its TLS handshake, request head
/// ([`REQUEST_HEAD_BYTES_MAX`] at most) and response; a malformed request
/// gets 400 and a closed connection.
pub async fn serve(
    listener: TcpListener,
    node: Arc<Node>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let slots = Arc::new(tokio::sync::Semaphore::new(CONNECTIONS_MAX));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.changed() => return,
        };
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
        let node = node.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let timeout = Duration::from_millis(REQUEST_TIMEOUT_MS);
            let _ = tokio::time::timeout(timeout, async move {
                match tls {
                    None => serve_connection(sock, node).await,
                    Some(acceptor) => {
                        if let Ok(s) = acceptor.accept(sock).await {
                            serve_connection(s, node).await;
                        }
                    }
                }
            })
            .await;
        });
    }
}

/// Serves one request on `io` (plain TCP or TLS), then closes it.
async fn serve_connection<S>(io: S, node: Arc<Node>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
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
