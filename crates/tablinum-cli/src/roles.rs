//! The server roles of the binary: `up` (the embedded cluster), `manager`,
//! `tserver`, `sserver` and the dataflow `worker`. Starting a role, printing its banner and
//! waiting for Ctrl-C, SIGTERM or (with [`EXIT_WITH_PARENT_ENV`]) its
//! parent's exit; the roles themselves live in `tablinum-server`. Output
//! goes through [`out!`], so a closed pipe ends the banner quietly.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use tablinum_auth::files::{credentials_path, load_token_file};
use tablinum_server::config::{MANAGER_HTTP_DEFAULT, MANAGER_LISTEN_DEFAULT};
use tablinum_server::EXIT_WITH_PARENT_ENV;

/// `writeln!` to standard output, returning its error (a closed pipe among
/// them) instead of panicking as `println!` does.
macro_rules! out {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// Runs `tablinum up`: manager and tablet server in this process until
/// Ctrl-C or SIGTERM.
pub fn up(
    data: PathBuf,
    listen: String,
    http: String,
    (tls, insecure): (bool, bool),
    sservers: usize,
) -> anyhow::Result<()> {
    if !tls && !insecure {
        for (flag, addr) in [("--listen", &listen), ("--http", &http)] {
            if !is_loopback(addr) {
                anyhow::bail!(
                    "{flag} {addr} is not a loopback address, and without --tls client tokens \
                     would cross the network in the clear: pass --tls (clients \
                     then pass --ca), or --insecure to serve plaintext anyway"
                );
            }
        }
    }
    std::fs::create_dir_all(&data).with_context(|| format!("creating {}", data.display()))?;
    let data = data.canonicalize().unwrap_or(data);
    let token_file = tablinum_server::embedded_admin_token_path(&data);
    let ca = tablinum_server::embedded_ca_path(&data);
    run_roles(
        move || async move {
            tablinum_server::start_embedded(&data, &listen, &http, tls, sservers).await
        },
        move |r| {
            let creds = remember_admin_token(&token_file, &r.grpc.to_string())?;
            let scheme = if tls { "https" } else { "http" };
            out!(
                "tablinum {} up: cluster ready (manager + tablet server in one process)",
                tablinum_server::VERSION
            );
            print_endpoints(r, scheme)?;
            for s in &r.sservers {
                out!(
                    "  sserver  {} (status {scheme}://{}/) serves eventual scans",
                    s.grpc,
                    s.http
                );
            }
            if tls {
                out!(
                    "  TLS only: clients pass --ca {} (or set TABLINUM_CA)",
                    ca.display()
                );
            } else {
                out!(
                    "  plaintext: for one machine only; whoever can read its traffic can read \
                     tokens (--tls for more)"
                );
            }
            out!("  admin token in {} (mode 0600)", token_file.display());
            match creds {
                Some(p) => out!("  credentials for {} saved in {}", r.grpc, p.display()),
                None => out!("  no credentials file (neither XDG_CONFIG_HOME nor HOME is set): pass --token-file {}", token_file.display()),
            }
            out!("try: tablinum table create demo --split g,n,t && tablinum put demo hello world && tablinum scan demo");
            out!("  or: tablinum shell   (an interactive shell on this cluster)");
            Ok(())
        },
    )
}

/// Whether every address `addr` (host:port) names is a loopback one.
fn is_loopback(addr: &str) -> bool {
    use std::net::ToSocketAddrs;
    match addr.to_socket_addrs() {
        Ok(mut it) => {
            let all: Vec<_> = it.by_ref().collect();
            !all.is_empty() && all.iter().all(|a| a.ip().is_loopback())
        }
        Err(_) => false,
    }
}

/// The banner's endpoint lines: gRPC, the status page and /metrics (the
/// tests and the harness read the `grpc` and `status` lines).
fn print_endpoints(r: &tablinum_server::Running, scheme: &str) -> std::io::Result<()> {
    out!("  grpc     {}", r.grpc);
    out!("  status   {scheme}://{}/", r.http);
    out!("  metrics  {scheme}://{}/metrics", r.http);
    Ok(())
}

/// Copies the admin token in `token_file` into the user's credentials file
/// under `addr`, so CLI commands on this machine need no flags. Returns the
/// credentials file written, if there is one.
fn remember_admin_token(token_file: &Path, addr: &str) -> anyhow::Result<Option<PathBuf>> {
    let Some(path) = credentials_path() else {
        return Ok(None);
    };
    let token = load_token_file(token_file)?;
    tablinum_auth::files::store_credentials(&path, addr, &token)?;
    Ok(Some(path))
}

/// Runs `tablinum sserver` from a config file's `[sserver]` section.
pub fn sserver(config: PathBuf) -> anyhow::Result<()> {
    let cfg = tablinum_server::ConfigFile::load(&config)?;
    let Some(s) = cfg.sserver else {
        bail!("config {} has no [sserver] section", config.display());
    };
    let group = s.group.clone();
    run_roles(
        move || async move { tablinum_server::start_sserver(s).await },
        move |r| {
            out!(
                "tablinum {} sserver: ready (group {group})",
                tablinum_server::VERSION
            );
            print_endpoints(r, "http")?;
            Ok(())
        },
    )
}

/// How often a worker prints its progress line, ms.
const WORKER_PROGRESS_MS: u64 = 5_000;

/// Runs `tablinum worker` from a config file's `[worker]` section until
/// Ctrl-C, SIGTERM or (with [`EXIT_WITH_PARENT_ENV`]) its parent's exit;
/// then its tasks commit what they hold and go back to the manager.
pub fn worker(config: PathBuf) -> anyhow::Result<()> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tablinum_flow::worker::{work, WorkerConfig, WorkerStatus};

    let text = std::fs::read_to_string(&config)
        .with_context(|| format!("cannot read config {}", config.display()))?;
    let cfg = match WorkerConfig::parse(&text) {
        Ok(c) => c,
        Err(e) => bail!("config {}: {e}", config.display()),
    };
    let secret =
        tablinum_auth::files::load_cluster_secret(&cfg.cluster_secret_file).with_context(|| {
            format!(
                "[worker] cluster_secret_file {}",
                cfg.cluster_secret_file.display()
            )
        })?;
    let tls = if cfg.tls_ca.as_os_str().is_empty() {
        None
    } else {
        Some(tablinum_client::ClientTls::from_files(&cfg.tls_ca, None)?)
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tablinum-worker")
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let client = tablinum_client::AsyncClient::connect(
            &cfg.manager,
            tablinum_client::ClientConfig {
                credential: Some(secret.credential()),
                tls,
                ..tablinum_client::ClientConfig::default()
            },
        )
        .await
        .with_context(|| format!("connecting to the manager at {}", cfg.manager))?;
        out!(
            "tablinum {} worker {}: ready (manager {}, at most {} tasks, file sinks under {})",
            tablinum_server::VERSION,
            cfg.id,
            cfg.manager,
            cfg.tasks_max,
            cfg.root.display()
        );
        let _ = std::io::stdout().flush();
        let stop = Arc::new(AtomicBool::new(false));
        let status = Arc::new(WorkerStatus::default());
        let id = cfg.id.clone();
        let mut job = tokio::spawn(work(client, cfg, stop.clone(), status.clone()));
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        let mut tick = tokio::time::interval(std::time::Duration::from_millis(WORKER_PROGRESS_MS));
        let r = loop {
            tokio::select! {
                r = &mut job => break r,
                _ = tokio::signal::ctrl_c() => stop.store(true, Ordering::Relaxed),
                _ = term.recv() => stop.store(true, Ordering::Relaxed),
                _ = parent_gone() => stop.store(true, Ordering::Relaxed),
                _ = tick.tick() => eprintln!(
                    "worker {id}: {} tasks, {} heartbeats answered",
                    status.tasks.load(Ordering::Relaxed),
                    status.heartbeats.load(Ordering::Relaxed)
                ),
            }
        };
        r.context("the worker loop failed")??;
        out!("worker {id}: stopped; its tasks committed what they held");
        anyhow::Ok(())
    })
}

/// Runs `tablinum manager` / `tablinum tserver` from a config file.
pub fn role(config: PathBuf, manager: bool) -> anyhow::Result<()> {
    let cfg = tablinum_server::ConfigFile::load(&config)?;
    let (m, t) = if manager {
        let Some(m) = cfg.manager else {
            bail!("config {} has no [manager] section", config.display());
        };
        (Some(m), None)
    } else {
        let Some(t) = cfg.tserver else {
            bail!("config {} has no [tserver] section", config.display());
        };
        (None, Some(t))
    };
    let what = if manager { "manager" } else { "tserver" };
    run_roles(
        move || async move { tablinum_server::start(m, t).await },
        |r| {
            out!("tablinum {} {what}: ready", tablinum_server::VERSION);
            print_endpoints(r, "http")?;
            Ok(())
        },
    )
}

fn run_roles<F, Fut>(
    start: F,
    ready: impl FnOnce(&tablinum_server::Running) -> anyhow::Result<()>,
) -> anyhow::Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = tablinum_server::Result<tablinum_server::Running>>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(1024)
        .thread_name("tablinum")
        .build()
        .context("starting the runtime")?;
    rt.block_on(async move {
        let running = start().await?;
        if let Err(e) = ready(&running) {
            running.shutdown().await;
            return Err(e);
        }
        let _ = std::io::stdout().flush();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .context("installing the SIGTERM handler")?;
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
            _ = parent_gone() => {}
        }
        tracing::info!("shutting down: closing tablets");
        running.shutdown().await;
        Ok(())
    })
}

/// How often such a process looks at its parent, ms.
const PARENT_POLL_MS: u64 = 250;

/// Resolves once this process's parent has exited (it was re-parented), if
/// [`EXIT_WITH_PARENT_ENV`] is set; otherwise never.
async fn parent_gone() {
    if std::env::var_os(EXIT_WITH_PARENT_ENV).is_none() {
        return std::future::pending().await;
    }
    let parent = std::os::unix::process::parent_id();
    loop {
        tokio::time::sleep(std::time::Duration::from_millis(PARENT_POLL_MS)).await;
        if std::os::unix::process::parent_id() != parent {
            tracing::warn!(
                parent,
                "the process that started this one exited ({EXIT_WITH_PARENT_ENV} is set)"
            );
            return;
        }
    }
}

/// Defaults shown in `--help` of `up`.
pub const UP_LISTEN_DEFAULT: &str = MANAGER_LISTEN_DEFAULT;
/// Default HTTP address of `up`.
pub const UP_HTTP_DEFAULT: &str = MANAGER_HTTP_DEFAULT;
