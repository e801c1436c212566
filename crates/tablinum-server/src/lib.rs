//! tablinum's cluster roles and their wiring.
//!
//! - [`manager`]: metadata, assignment, failure detection, tokens;
//! - [`placement`]: the pure placement policy the manager executes;
//! - [`tserver`]: tablets, writes, reads, flow-controlled scans ([`scan`]);
//! - [`http`]: `/metrics` and the status page;
//! - [`config`]: the roles' settings and config files;
//! - [`start`]: runs either role or both (the embedded cluster of
//!   `tablinum up`) on real sockets until [`Running::shutdown`].
//!
//! Maps every engine and client error to a gRPC status whose message names
//! what was wrong. Never panics on input from the network.

pub mod admit;
pub mod config;
mod error;
pub mod flows;
mod heartbeat;
pub use error::{Error, Result};
pub mod http;
pub mod listen;
pub mod manager;
pub mod placement;
pub mod scan;
pub mod scan_queue;
pub mod sserver;
pub mod tserver;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tablinum_auth::{Authenticator, ClusterSecret, Verifier};
use tablinum_proto::v1::{manager_server::ManagerServer, tablet_server_server::TabletServerServer};
use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tonic::Status;

pub use config::{ConfigFile, ManagerConfig, SserverConfig, TserverConfig};

/// This build's version (the workspace's package version).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Set (to anything) in the environment of a server process that must not
/// outlive the process that started it: the benchmark harness sets it for
/// the clusters and scan servers it starts, so a harness killed by a signal
/// (or Ctrl-C) leaves nothing running. The `tablinum` binary's roles check
/// their parent every 250 ms and shut down cleanly once it is gone.
pub const EXIT_WITH_PARENT_ENV: &str = "TABLINUM_EXIT_WITH_PARENT";

pub use tablinum_engine::faults::{DISK_FAULTS_ENV, DISK_FAULTS_POLL_MS};

/// How a RESOURCE_EXHAUSTED answer for a full disk begins (for people:
/// clients read the detail's DISK_FULL): the call changed nothing and may
/// be sent again once space is freed.
pub const NOT_APPLIED_DISK_FULL_PREFIX: &str = "not applied: disk full";
/// How a tablet server's own UNAVAILABLE answers begin (opening, closed,
/// reopening); clients read the detail's TABLET_UNAVAILABLE.
pub const SERVER_UNAVAILABLE_PREFIX: &str = "tablet unavailable";
/// How a scan server's busy answers begin; clients read the detail's
/// SCAN_SERVER_BUSY.
pub const SCAN_SERVER_BUSY_PREFIX: &str = "scan server busy";

/// The gRPC status for an engine error, with its typed detail.
pub fn status_from_engine(e: tablinum_engine::Error) -> Status {
    use tablinum_engine::Error as E;
    use tablinum_proto::error::{status, Detail, ErrorReason as R};
    use tonic::Code;
    match e {
        E::InvalidArgument { .. } => status(Code::InvalidArgument, R::BadRequest, e.to_string()),
        E::Closed | E::Locked(_) => status(
            Code::Unavailable,
            R::TabletUnavailable,
            format!("{SERVER_UNAVAILABLE_PREFIX}: {e}"),
        ),
        E::Fenced {
            outcome_unknown: true,
            ..
        }
        | E::WriteOutcomeUnknown(_) => status(
            Code::Unknown,
            R::OutcomeUnknown,
            format!("outcome unknown: {e}"),
        ),
        E::Fenced { .. } => status(
            Code::FailedPrecondition,
            R::StaleEpoch,
            format!("not serving: {e}"),
        ),
        E::Unavailable { .. } => status(
            Code::Unavailable,
            R::TabletUnavailable,
            format!("{SERVER_UNAVAILABLE_PREFIX}: {e}"),
        ),
        // A full disk failed the call before anything reached the journal.
        E::Io { .. } if e.is_disk_full() => status(
            Code::ResourceExhausted,
            R::DiskFull,
            format!("{NOT_APPLIED_DISK_FULL_PREFIX}: {e}"),
        ),
        // Other retryable I/O errors also changed nothing.
        E::Io { .. } if e.is_transient() => status(
            Code::Unavailable,
            R::TabletUnavailable,
            format!("{SERVER_UNAVAILABLE_PREFIX}: not applied: {e}"),
        ),
        // Poisoned: the tablet is being reopened from durable state.
        E::Background(_) => status(
            Code::Unavailable,
            R::TabletUnavailable,
            format!(
                "{SERVER_UNAVAILABLE_PREFIX}: not applied: the tablet is reopening from durable \
                 state after {e}"
            ),
        ),
        E::Corruption {
            ref file, offset, ..
        } => Detail {
            corruption: Some((file.display().to_string(), offset)),
            ..Detail::new(R::Corruption)
        }
        .status(Code::DataLoss, e.to_string()),
        other => status(Code::Internal, R::Storage, other.to_string()),
    }
}

/// The gRPC status for a client error (the thin-client query path).
pub fn status_from_client(e: tablinum_client::Error) -> Status {
    use tablinum_client::Error as E;
    use tablinum_proto::error::{status, ErrorReason as R};
    use tonic::Code;
    match e {
        E::InvalidArgument(m) => Status::invalid_argument(m),
        E::NotFound(m) => Status::not_found(m),
        E::AlreadyExists(m) => Status::already_exists(m),
        // A Query's own streams failed: nothing it does changes data.
        E::Unavailable(m) | E::Connect(m) => status(Code::Unavailable, R::TabletUnavailable, m),
        E::Timeout(m) => Status::deadline_exceeded(m),
        E::Server(m) => Status::internal(m),
        E::Unauthenticated(m) => Status::unauthenticated(m),
        E::PermissionDenied(m) => Status::permission_denied(m),
        E::OutcomeUnknown(m) => Status::unknown(m),
        E::Busy(m) => status(Code::ResourceExhausted, R::LimitExceeded, m),
        E::Conflict(m) => Status::aborted(m),
    }
}

/// A running process: its addresses and how to stop it.
pub struct Running {
    /// Where gRPC is served.
    pub grpc: SocketAddr,
    /// Where `/` and `/metrics` are served.
    pub http: SocketAddr,
    /// The roles.
    pub node: Arc<http::Node>,
    /// Scan servers started with it (`tablinum up --sservers N`).
    pub sservers: Vec<Running>,
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Running {
    /// Stops serving, then closes every tablet and the metadata store. A
    /// tablet server stopping beside its manager (`tablinum up`) is
    /// forgotten once its tablets are closed, so the next start does not
    /// wait for it or show it as live.
    pub async fn shutdown(self) {
        for s in self.sservers {
            Box::pin(s.shutdown()).await;
        }
        let _ = self.stop.send(true);
        for t in self.tasks {
            let _ = t.await;
        }
        let node = self.node.clone();
        let _ = tokio::task::spawn_blocking(move || {
            if let Some(ts) = &node.tserver {
                ts.close_all();
                if let Some(m) = &node.manager {
                    if let Err(e) = m.server_left(ts.id()) {
                        tracing::warn!(error = %e.message(), "cannot record that the tablet server left");
                    }
                }
            }
            if let Some(m) = &node.manager {
                m.close();
            }
        })
        .await;
    }
}

async fn bind(addr: &str, what: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|e| Error::Io(format!("cannot listen for {what} on {addr}: {e}")))
}

/// Starts the manager, a tablet server, or both in this process (both: one
/// gRPC port and one HTTP port serve the two roles, and the tablet server
/// reports to its own process). Must run on a multi-thread tokio runtime.
pub async fn start(
    manager: Option<ManagerConfig>,
    tserver: Option<TserverConfig>,
) -> Result<Running> {
    let (listen, http_listen) = match (&manager, &tserver) {
        (Some(m), _) => (m.listen.clone(), m.http.clone()),
        (None, Some(t)) => (t.listen.clone(), t.http.clone()),
        (None, None) => {
            return Err(Error::Config(
                "nothing to run: neither [manager] nor [tserver] configured".into(),
            ))
        }
    };
    let secret = cluster_secret(manager.as_ref(), tserver.as_ref())?;
    let tls = match (&manager, &tserver) {
        (Some(m), _) => config::listener_tls("manager", &m.tls_cert, &m.tls_key, &m.tls_client_ca)?,
        (None, Some(t)) => {
            config::listener_tls("tserver", &t.tls_cert, &t.tls_key, &t.tls_client_ca)?
        }
        (None, None) => None,
    };
    let verifier = Verifier::new(&secret);
    let grpc_l = bind(&listen, "gRPC").await?;
    let http_l = bind(&http_listen, "HTTP").await?;
    let grpc = grpc_l
        .local_addr()
        .map_err(|e| Error::Io(format!("gRPC listener: {e}")))?;
    let http = http_l
        .local_addr()
        .map_err(|e| Error::Io(format!("HTTP listener: {e}")))?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let mut tasks = Vec::new();
    let mgr = match manager {
        Some(cfg) => {
            let v = verifier.clone();
            let m = tokio::task::spawn_blocking(move || manager::Manager::open(cfg, v))
                .await
                .map_err(|e| Error::Metadata(format!("opening the manager failed: {e}")))??;
            tasks.push(tokio::spawn(manager::ticker(m.clone(), stop_rx.clone())));
            Some(m)
        }
        None => None,
    };
    let ts = match tserver {
        Some(mut cfg) => {
            if mgr.is_some() {
                cfg.manager = grpc.to_string();
            }
            let t = tserver::Tserver::new(
                cfg,
                grpc.to_string(),
                http.to_string(),
                secret.clone(),
                verifier.clone(),
            )?;
            if let Some(file) = std::env::var_os(DISK_FAULTS_ENV) {
                t.watch_fault_file(std::path::PathBuf::from(file), stop_rx.clone());
            }
            tasks.push(tokio::spawn(t.clone().heartbeat_loop(stop_rx.clone())));
            tasks.push(tokio::spawn(t.clone().retention_loop(stop_rx.clone())));
            Some(t)
        }
        None => None,
    };
    let msvc_present = mgr.is_some();
    let mgr_ts = mgr.clone().zip(ts.clone());
    let node = http::Node::new(mgr.clone(), ts.clone(), verifier.clone());
    let http_tls = match &tls {
        Some(t) => Some(http::tls_acceptor(t)?),
        None => None,
    };
    tasks.push(tokio::spawn(node.clone().sample_loop(stop_rx.clone())));
    tasks.push(tokio::spawn(http::serve(
        http_l,
        node.clone(),
        http_tls,
        stop_rx.clone(),
    )));
    let max = tablinum_proto::GRPC_MESSAGE_BYTES_MAX;
    // Every call passes the authenticator first: no credentials, no call.
    // Proofs are good only at the server they were made for: this one
    // answers as its address in the tablet map, and as the manager.
    let mut names = vec![grpc.to_string()];
    if msvc_present {
        names.push(tablinum_auth::proof::MANAGER_AUDIENCE.to_string());
    }
    verifier.answer_as(names);
    let answering = tablinum_auth::AnsweringLayer(verifier.clone());
    let auth = Authenticator::new(
        verifier,
        tls.as_ref().is_some_and(|t| t.client_ca_pem.is_some()),
    )
    .with_needs(call_need);
    let msvc = mgr.map(|m| {
        InterceptedService::new(
            ManagerServer::new(manager::ManagerService(m))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
            auth.clone(),
        )
    });
    let tsvc = ts.map(|t| {
        InterceptedService::new(
            TabletServerServer::new(tserver::TserverService(t))
                .max_decoding_message_size(max)
                .max_encoding_message_size(max),
            auth.clone(),
        )
    });
    let builder = grpc_builder(tls.as_ref())?;
    let mut stop_grpc = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        let r = builder
            .tcp_nodelay(true)
            .layer(tower::util::MapResponseLayer::new(typed_errors))
            .layer(tower::util::MapRequestLayer::new(with_call_path))
            .layer(answering)
            .add_optional_service(msvc)
            .add_optional_service(tsvc)
            .serve_with_incoming_shutdown(
                // The builder's tcp_nodelay applies only to sockets tonic
                // accepts itself; `listen` sets it (without it, Nagle held
                // each small scan batch until the peer's delayed ACK:
                // 28 ms per acknowledgement round trip) and applies the
                // connection limits.
                listen::incoming(grpc_l),
                async move {
                    let _ = stop_grpc.changed().await;
                },
            )
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    }));
    // Both roles here: ready once the tablet server has reported to its
    // manager, so a status asked for at once lists it (bounded: a slow
    // first heartbeat only delays readiness).
    if let Some((m, t)) = mgr_ts {
        let deadline = std::time::Instant::now() + FIRST_REPORT_WAIT;
        while !m.server_reported(t.id()) && std::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
    Ok(Running {
        grpc,
        http,
        node,
        sservers: Vec::new(),
        stop,
        tasks,
    })
}

/// How long [`start`] of both roles waits for the tablet server's first
/// report to its manager before it returns anyway.
const FIRST_REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Starts a scan server in this process (its own gRPC and HTTP ports).
/// Must run on a multi-thread tokio runtime.
pub async fn start_sserver(cfg: config::SserverConfig) -> Result<Running> {
    cfg.validate()?;
    if cfg.cluster_secret_file.as_os_str().is_empty() {
        return Err(Error::Config(
            "[sserver] cluster_secret_file is not set: name a copy of the manager's cluster secret"
                .into(),
        ));
    }
    let secret = tablinum_auth::files::load_cluster_secret(&cfg.cluster_secret_file)
        .map_err(|e| Error::Credentials(format!("[sserver] cluster_secret_file: {e}")))?;
    let tls = config::listener_tls("sserver", &cfg.tls_cert, &cfg.tls_key, &cfg.tls_client_ca)?;
    let verifier = Verifier::new(&secret);
    let grpc_l = bind(&cfg.listen, "gRPC").await?;
    let http_l = bind(&cfg.http, "HTTP").await?;
    let grpc = grpc_l
        .local_addr()
        .map_err(|e| Error::Io(format!("gRPC listener: {e}")))?;
    let http = http_l
        .local_addr()
        .map_err(|e| Error::Io(format!("HTTP listener: {e}")))?;
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let ss = sserver::Sserver::new(
        cfg,
        grpc.to_string(),
        http.to_string(),
        secret,
        verifier.clone(),
    )?;
    let mut tasks = vec![
        tokio::spawn(ss.clone().heartbeat_loop(stop_rx.clone())),
        tokio::spawn(ss.clone().maintain_loop(stop_rx.clone())),
    ];
    let node = http::Node::for_sserver(ss.clone(), verifier.clone());
    let http_tls = match &tls {
        Some(t) => Some(http::tls_acceptor(t)?),
        None => None,
    };
    tasks.push(tokio::spawn(http::serve(
        http_l,
        node.clone(),
        http_tls,
        stop_rx.clone(),
    )));
    let max = tablinum_proto::GRPC_MESSAGE_BYTES_MAX;
    verifier.answer_as(vec![grpc.to_string()]);
    let answering = tablinum_auth::AnsweringLayer(verifier.clone());
    let auth = Authenticator::new(
        verifier,
        tls.as_ref().is_some_and(|t| t.client_ca_pem.is_some()),
    )
    .with_needs(call_need);
    let svc = InterceptedService::new(
        TabletServerServer::new(sserver::SserverService(ss))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max),
        auth,
    );
    let builder = grpc_builder(tls.as_ref())?;
    let mut stop_grpc = stop_rx.clone();
    tasks.push(tokio::spawn(async move {
        let r = builder
            .tcp_nodelay(true)
            .layer(tower::util::MapResponseLayer::new(typed_errors))
            .layer(tower::util::MapRequestLayer::new(with_call_path))
            .layer(answering)
            .add_service(svc)
            .serve_with_incoming_shutdown(listen::incoming(grpc_l), async move {
                let _ = stop_grpc.changed().await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "gRPC server stopped");
        }
    }));
    Ok(Running {
        grpc,
        http,
        node,
        sservers: Vec::new(),
        stop,
        tasks,
    })
}

/// A gRPC server builder speaking TLS when `tls` is set (client
/// certificates optional: clients without one use tokens).
fn grpc_builder(tls: Option<&config::ListenerTls>) -> Result<tonic::transport::Server> {
    let mut builder = tonic::transport::Server::builder();
    if let Some(t) = tls {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        // The whole handshake has the deadline the listener gives its
        // first bytes: a peer stalling mid-handshake holds nothing longer.
        let mut c = ServerTlsConfig::new()
            .identity(Identity::from_pem(&t.cert_pem, &t.key_pem))
            .timeout(std::time::Duration::from_millis(
                listen::HANDSHAKE_TIMEOUT_MS,
            ));
        if let Some(ca) = &t.client_ca_pem {
            c = c
                .client_ca_root(Certificate::from_pem(ca))
                .client_auth_optional(true);
        }
        builder = builder
            .tls_config(c)
            .map_err(|e| Error::Tls(format!("TLS settings: {e}")))?;
    }
    Ok(builder)
}

/// Puts a call's gRPC path in its extensions, for the authenticator.
fn with_call_path<B>(mut r: ::http::Request<B>) -> ::http::Request<B> {
    let path = tablinum_auth::CallPath(r.uri().path().to_string());
    r.extensions_mut().insert(path);
    r
}

/// What each RPC needs, by its gRPC path, so the authenticator refuses a
/// call the caller's role does not allow before its body is read (a read
/// token's 80 MiB Write is never decoded). The handlers check again, and
/// some need more for some requests (a write to topic settings needs
/// admin): this is the least any request of the RPC needs.
pub fn call_need(path: &str) -> Option<(tablinum_auth::Need, &'static str)> {
    use tablinum_auth::Need::{Admin, Cluster, Read, Write};
    let method = path
        .strip_prefix("/tablinum.v1.Manager/")
        .or_else(|| path.strip_prefix("/tablinum.v1.TabletServer/"))?;
    Some(match method {
        "CreateTable" => (Admin, "CreateTable"),
        "DropTable" => (Admin, "DropTable"),
        "CreateToken" => (Admin, "CreateToken"),
        "ListTokens" => (Admin, "ListTokens"),
        "RevokeToken" => (Admin, "RevokeToken"),
        "SubmitFlow" => (Admin, "SubmitFlow"),
        "StopFlow" => (Admin, "StopFlow"),
        "DropFlow" => (Admin, "DropFlow"),
        "Heartbeat" => (Cluster, "Heartbeat"),
        "ScanServerHeartbeat" => (Cluster, "ScanServerHeartbeat"),
        "WorkerHeartbeat" => (Cluster, "WorkerHeartbeat"),
        "Write" => (Write, "Write"),
        "Flush" => (Write, "Flush"),
        "Append" => (Write, "Append"),
        "ListTables" => (Read, "ListTables"),
        "TabletMap" => (Read, "TabletMap"),
        "ClusterStatus" => (Read, "ClusterStatus"),
        "ListScanServers" => (Read, "ListScanServers"),
        "ListFlows" => (Read, "ListFlows"),
        "Get" => (Read, "Get"),
        "GetMany" => (Read, "GetMany"),
        "Head" => (Read, "Head"),
        "Scan" => (Read, "Scan"),
        "ScanMany" => (Read, "ScanMany"),
        "Query" => (Read, "Query"),
        _ => return None,
    })
}

/// Every error answered in headers alone (what a handler's or an
/// interceptor's refusal becomes) leaves with a typed detail
/// (`tablinum_proto::error::typed`): its maker's, or the one its code
/// says. And a request message that does not decode is the caller's
/// fault: tonic answers INTERNAL ("failed to decode Protobuf message"),
/// which the API reserves for storage failures, so it becomes
/// INVALID_ARGUMENT with the same message.
fn typed_errors<B>(mut r: ::http::Response<B>) -> ::http::Response<B> {
    let h = r.headers();
    if h.get("grpc-status").is_none_or(|v| v == "0") {
        return r;
    }
    let Some(mut status) = Status::from_header_map(h) else {
        return r;
    };
    let decode = h
        .get("grpc-message")
        .and_then(|m| m.to_str().ok())
        .is_some_and(|m| m.contains("failed%20to%20decode") || m.contains("failed to decode"));
    if status.code() == tonic::Code::Internal && decode {
        status = Status::invalid_argument(status.message().to_string());
    }
    let status = tablinum_proto::error::typed(status);
    let _ = status.add_header(r.headers_mut());
    r
}

/// The cluster secret of this process: the manager's (created if missing)
/// when it runs here, else the tablet server's `cluster_secret_file`.
fn cluster_secret(
    manager: Option<&ManagerConfig>,
    tserver: Option<&TserverConfig>,
) -> Result<ClusterSecret> {
    if let Some(m) = manager {
        let p = m.cluster_secret_path();
        return tablinum_auth::files::load_or_create_cluster_secret(&p)
            .map_err(|e| Error::Credentials(format!("[manager] cluster_secret_file: {e}")));
    }
    let Some(t) = tserver else {
        return Err(Error::Config(
            "nothing to run: neither [manager] nor [tserver] configured".into(),
        ));
    };
    if t.cluster_secret_file.as_os_str().is_empty() {
        return Err(Error::Config(format!(
            "[tserver] cluster_secret_file is not set: name a copy of the manager's cluster secret \
             (its cluster_secret_file, by default <manager data>/{})",
            config::CLUSTER_SECRET_FILE_NAME
        )));
    }
    tablinum_auth::files::load_cluster_secret(&t.cluster_secret_file)
        .map_err(|e| Error::Credentials(format!("[tserver] cluster_secret_file: {e}")))
}

/// Where `tablinum up` keeps its cluster secret: `<data>/cluster.secret`.
pub fn embedded_secret_path(data: &Path) -> std::path::PathBuf {
    data.join(config::CLUSTER_SECRET_FILE_NAME)
}

/// Where `tablinum up` writes its bootstrap admin token: `<data>/admin.token`.
pub fn embedded_admin_token_path(data: &Path) -> std::path::PathBuf {
    data.join(config::ADMIN_TOKEN_FILE_NAME)
}

/// Where `tablinum up --tls` keeps the CA its certificate chains to
/// (clients pass it as `--ca`): `<data>/tls/ca.pem`.
pub fn embedded_ca_path(data: &Path) -> std::path::PathBuf {
    data.join(EMBEDDED_TLS_DIR).join("ca.pem")
}

/// The directory of `tablinum up --tls`'s certificates in its data directory.
const EMBEDDED_TLS_DIR: &str = "tls";

/// The certificate and key of `tablinum up --tls` (created at its first
/// start, kept after): a CA of its own (`tls/ca.pem`; its key is not kept)
/// and a certificate it signed for `localhost` and `127.0.0.1`
/// (`tls/server.pem`, `tls/server.key`, mode 0600). Returns (ca, cert, key).
pub fn embedded_tls_files(
    data: &Path,
) -> Result<(std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let dir = data.join(EMBEDDED_TLS_DIR);
    let (ca, cert, key) = (
        dir.join("ca.pem"),
        dir.join("server.pem"),
        dir.join("server.key"),
    );
    if ca.exists() && cert.exists() && key.exists() {
        return Ok((ca, cert, key));
    }
    fn e(what: &'static str) -> impl Fn(rcgen::Error) -> Error {
        move |e| Error::Tls(format!("generating the {what}: {e}"))
    }
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).map_err(e("CA"))?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "tablinum up CA");
    let issuer = rcgen::CertifiedIssuer::self_signed(
        ca_params,
        rcgen::KeyPair::generate().map_err(e("CA key"))?,
    )
    .map_err(e("CA"))?;
    let server_key = rcgen::KeyPair::generate().map_err(e("server key"))?;
    let server = rcgen::CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .map_err(e("server certificate"))?
        .signed_by(&server_key, &issuer)
        .map_err(e("server certificate"))?;
    let write = |p: &Path, text: &str| {
        tablinum_auth::files::write_secret_file(p, text)
            .map_err(|e| Error::Tls(format!("writing {}: {e}", p.display())))
    };
    write(&key, &server_key.serialize_pem())?;
    write(&cert, &server.pem())?;
    write(&ca, &issuer.pem())?;
    Ok((ca, cert, key))
}

/// The embedded cluster of `tablinum up`: manager and tablet server in this
/// process, metadata in `<data>/manager`, tablets in `<data>/storage`, the
/// cluster secret and the bootstrap admin token in `<data>` (mode 0600).
/// With `tls`, both listeners speak TLS only, with the certificate of
/// [`embedded_tls_files`]. `sservers` scan servers run in the process too,
/// each on ports of its own, reading `<data>/storage`.
pub async fn start_embedded(
    data: &Path,
    listen: &str,
    http: &str,
    tls: bool,
    sservers: usize,
) -> Result<Running> {
    let tls_files = if tls {
        Some(embedded_tls_files(data)?)
    } else {
        None
    };
    let m = ManagerConfig {
        listen: listen.to_string(),
        http: http.to_string(),
        data: data.join("manager"),
        storage: data.join("storage"),
        cluster_secret_file: embedded_secret_path(data),
        admin_token_file: embedded_admin_token_path(data),
        tls_cert: tls_files.as_ref().map(|f| f.1.clone()).unwrap_or_default(),
        tls_key: tls_files.as_ref().map(|f| f.2.clone()).unwrap_or_default(),
        ..ManagerConfig::default()
    };
    let t = TserverConfig {
        storage: data.join("storage"),
        tls_cert: tls_files.as_ref().map(|f| f.1.clone()).unwrap_or_default(),
        tls_key: tls_files.as_ref().map(|f| f.2.clone()).unwrap_or_default(),
        tls_ca: tls_files.as_ref().map(|f| f.0.clone()).unwrap_or_default(),
        ..TserverConfig::default()
    };
    let mut running = start(Some(m), Some(t)).await?;
    for _ in 0..sservers {
        let s = SserverConfig {
            listen: "127.0.0.1:0".into(),
            http: "127.0.0.1:0".into(),
            manager: running.grpc.to_string(),
            storage: data.join("storage"),
            cluster_secret_file: embedded_secret_path(data),
            tls_cert: tls_files.as_ref().map(|f| f.1.clone()).unwrap_or_default(),
            tls_key: tls_files.as_ref().map(|f| f.2.clone()).unwrap_or_default(),
            tls_ca: tls_files.as_ref().map(|f| f.0.clone()).unwrap_or_default(),
            ..SserverConfig::default()
        };
        match start_sserver(s).await {
            Ok(r) => running.sservers.push(r),
            Err(e) => {
                running.shutdown().await;
                return Err(e);
            }
        }
    }
    Ok(running)
}
