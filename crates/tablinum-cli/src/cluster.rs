//! The cluster commands of the binary: running the roles (`up`, `manager`,
//! `tserver`) and talking to a cluster (`table`, `put`, `get`, `scan`,
//! `status`, `token`). Argument handling, credentials lookup and printing
//! only. Output goes through [`out!`], so a closed pipe (`| head`) ends the
//! command quietly instead of panicking.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use tablinum_auth::files::{credentials_path, load_token_file, lookup_credentials, TOKEN_ENV};
use tablinum_client::{
    Client, ClientConfig, Consistency, Credential, Durability, Query, Role, Split,
    CLUSTER_ADDR_DEFAULT,
};
use tablinum_server::config::{MANAGER_HTTP_DEFAULT, MANAGER_LISTEN_DEFAULT};
use tablinum_server::EXIT_WITH_PARENT_ENV;
use tablinum_stream::window::WindowMode;

/// `writeln!` to standard output, returning its error (a closed pipe among
/// them) instead of panicking as `println!` does.
macro_rules! out {
    ($($t:tt)*) => {
        writeln!(std::io::stdout(), $($t)*)?
    };
}

/// Where the cluster is and who is asking.
#[derive(Debug, Args)]
pub struct ClusterArg {
    /// The manager's gRPC address (default: the embedded cluster of `tablinum up`).
    #[arg(long, global = true, default_value = CLUSTER_ADDR_DEFAULT)]
    pub cluster: String,
    /// The token to present (default: $TABLINUM_TOKEN, then --token-file,
    /// then this address's entry in the credentials file that `tablinum up`
    /// writes).
    #[arg(long, global = true, env = TOKEN_ENV, hide_env_values = true)]
    pub token: Option<String>,
    /// A file holding the token (e.g. the manager's admin.token).
    #[arg(long, global = true, conflicts_with = "token")]
    pub token_file: Option<PathBuf>,
    /// Speak TLS, trusting the servers' certificates signed by this CA
    /// (PEM); default: $TABLINUM_CA, else plaintext.
    #[arg(long, global = true, env = "TABLINUM_CA")]
    pub ca: Option<PathBuf>,
}

impl ClusterArg {
    /// The credential to present: `--token` / `TABLINUM_TOKEN`, else
    /// `--token-file`, else the credentials file's entry for the address.
    pub fn credential(&self) -> anyhow::Result<Option<Credential>> {
        if let Some(t) = &self.token {
            return Ok(Some(
                Credential::parse(t).context("--token (or TABLINUM_TOKEN)")?,
            ));
        }
        if let Some(f) = &self.token_file {
            return Ok(Some(load_token_file(f)?));
        }
        match credentials_path() {
            Some(p) => Ok(lookup_credentials(&p, &self.cluster)?),
            None => Ok(None),
        }
    }
}

/// `tablinum table ...`.
#[derive(Debug, Subcommand)]
pub enum TableCommand {
    /// Create a table split into tablets.
    Create {
        /// Table name (1..=128 bytes of A-Z a-z 0-9 _ . -).
        name: String,
        /// Number of tablets, split points spread evenly over the first two key bytes.
        #[arg(long, default_value_t = 1, conflicts_with = "split")]
        tablets: u32,
        /// Explicit split points, comma-separated (instead of --tablets).
        #[arg(long, value_delimiter = ',')]
        split: Vec<String>,
        /// Acknowledge writes before fsync.
        #[arg(long)]
        nosync: bool,
    },
    /// Drop a table and its data.
    Drop {
        /// Table name.
        name: String,
    },
    /// List tables.
    List,
    /// Show a table's tablets and their servers.
    Map {
        /// Table name.
        name: String,
    },
}

/// Runs `tablinum up`: manager and tablet server in this process until
/// Ctrl-C or SIGTERM.
pub fn up(
    data: PathBuf,
    listen: String,
    http: String,
    tls: bool,
    sservers: usize,
) -> anyhow::Result<()> {
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
            out!("  grpc     {}", r.grpc);
            out!("  status   {scheme}://{}/", r.http);
            out!("  metrics  {scheme}://{}/metrics", r.http);
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
            }
            out!("  admin token in {} (mode 0600)", token_file.display());
            match creds {
                Some(p) => out!("  credentials for {} saved in {}", r.grpc, p.display()),
                None => out!("  no credentials file (neither XDG_CONFIG_HOME nor HOME is set): pass --token-file {}", token_file.display()),
            }
            out!("try: tablinum table create demo --tablets 4 && tablinum put demo k v && tablinum scan demo");
            Ok(())
        },
    )
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
            out!("  grpc     {}", r.grpc);
            out!("  status   http://{}/", r.http);
            out!("  metrics  http://{}/metrics", r.http);
            Ok(())
        },
    )
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
            out!("  grpc     {}", r.grpc);
            out!("  status   http://{}/", r.http);
            out!("  metrics  http://{}/metrics", r.http);
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

fn connect(c: &ClusterArg) -> anyhow::Result<Client> {
    connect_with(c, None)
}

fn connect_with(
    c: &ClusterArg,
    dispatcher: Option<std::sync::Arc<tablinum_client::Profiles>>,
) -> anyhow::Result<Client> {
    let addr = c.cluster.as_str();
    let tls = match &c.ca {
        Some(ca) => Some(tablinum_client::ClientTls::from_files(ca, None)?),
        None => None,
    };
    let cfg = ClientConfig {
        tls,
        dispatcher,
        ..ClientConfig::with_credential(c.credential()?)
    };
    Client::connect_with(addr, cfg).map_err(|e| {
        if addr == CLUSTER_ADDR_DEFAULT {
            anyhow::anyhow!("{e}\nhint: start a cluster with `tablinum up`, or pass --cluster ADDR")
        } else {
            anyhow::anyhow!("{e}")
        }
    })
}

/// Adds a hint to authentication failures.
fn hint(e: tablinum_client::Error) -> anyhow::Error {
    match &e {
        tablinum_client::Error::Unauthenticated(_) => anyhow::anyhow!(
            "{e}\nhint: pass --token, --token-file or TABLINUM_TOKEN; `tablinum up` saves an admin token in the credentials file"
        ),
        _ => anyhow::Error::new(e),
    }
}

fn show(b: &[u8]) -> String {
    tablinum_client::display_key(b, "")
}

/// `tablinum table ...`.
pub fn table(cluster: &ClusterArg, cmd: TableCommand) -> anyhow::Result<()> {
    let c = connect(cluster)?;
    match cmd {
        TableCommand::Create {
            name,
            tablets,
            split,
            nosync,
        } => {
            let s = if split.is_empty() {
                Split::Even(tablets)
            } else {
                Split::Points(split.into_iter().map(String::into_bytes).collect())
            };
            let d = if nosync {
                Durability::Nosync
            } else {
                Durability::Sync
            };
            let t = c.create_table(&name, s, d).map_err(hint)?;
            out!(
                "created table {} (id {}) with {} tablets",
                t.name,
                t.id,
                t.tablets
            );
        }
        TableCommand::Drop { name } => {
            c.drop_table(&name).map_err(hint)?;
            out!("dropped table {name}");
        }
        TableCommand::List => {
            for t in c.list_tables().map_err(hint)? {
                let d = if t.durability == Durability::Nosync {
                    "nosync"
                } else {
                    "sync"
                };
                out!("{}\tid={}\ttablets={}\t{d}", t.name, t.id, t.tablets);
            }
        }
        TableCommand::Map { name } => {
            let loc = c.locations(&name, true).map_err(hint)?;
            for t in &loc.tablets {
                let server = if t.server.is_empty() {
                    "(unassigned)"
                } else {
                    &t.server
                };
                out!(
                    "tablet {}\t[{}, {})\t{server}\t{} files",
                    t.id,
                    show(&t.start),
                    if t.end.is_empty() {
                        "end".into()
                    } else {
                        show(&t.end)
                    },
                    t.files.len()
                );
            }
        }
    }
    Ok(())
}

/// `tablinum put TABLE KEY VALUE`.
pub fn put(cluster: &ClusterArg, table: &str, key: &str, value: &str) -> anyhow::Result<()> {
    let seq = connect(cluster)?
        .put(table, key.as_bytes(), value.as_bytes())
        .map_err(hint)?;
    out!("ok seq={seq}");
    Ok(())
}

/// `tablinum get TABLE KEY`; exit status 1 when absent.
pub fn get(cluster: &ClusterArg, table: &str, key: &str, read: &PointArgs) -> anyhow::Result<bool> {
    let (c, consistency) = read.read.open(cluster)?;
    let (v, stats) = c
        .get_with(table, key.as_bytes(), &consistency)
        .map_err(hint)?;
    if read.stats {
        print_read_stats(&stats);
    }
    match v {
        Some(v) => {
            out!("{}", show(&v));
            Ok(true)
        }
        None => {
            eprintln!("not found: {key}");
            Ok(false)
        }
    }
}

/// `tablinum head TABLE KEY`: the object's metadata; exit status 1 when
/// absent.
pub fn head(
    cluster: &ClusterArg,
    table: &str,
    key: &str,
    read: &PointArgs,
) -> anyhow::Result<bool> {
    let (c, consistency) = read.read.open(cluster)?;
    let (h, stats) = c
        .head_with(table, key.as_bytes(), &consistency)
        .map_err(hint)?;
    if read.stats {
        print_read_stats(&stats);
    }
    match h {
        Some(h) => {
            out!("seq={}", h.seq);
            out!("value_len={}", h.value_len);
            out!("value_hash={:016x}", h.value_hash);
            out!("metadata={}", show(&h.metadata));
            for t in &h.index_terms {
                out!("index {}={}", show(&t.index), show(&t.term));
            }
            Ok(true)
        }
        None => {
            eprintln!("not found: {key}");
            Ok(false)
        }
    }
}

/// Options of `tablinum get` and `tablinum head`.
#[derive(Debug, Args)]
pub struct PointArgs {
    #[command(flatten)]
    pub read: ReadArgs,
    /// Print which server answered, attempts, busy answers and hedges to
    /// stderr.
    #[arg(long)]
    pub stats: bool,
}

/// `tablinum delete TABLE KEY`.
pub fn delete(cluster: &ClusterArg, table: &str, key: &str) -> anyhow::Result<()> {
    let seq = connect(cluster)?
        .delete(table, key.as_bytes())
        .map_err(hint)?;
    out!("ok seq={seq}");
    Ok(())
}

/// `tablinum flush TABLE`.
pub fn flush(cluster: &ClusterArg, table: &str) -> anyhow::Result<()> {
    let n = connect(cluster)?.flush(table).map_err(hint)?;
    out!("flushed {n} tablets of {table}");
    Ok(())
}

/// Where a read goes: `--consistency` and the dispatcher's options.
#[derive(Debug, Args)]
pub struct ReadArgs {
    /// `immediate` (tablet servers: every acknowledged write) or
    /// `eventual` (scan servers: what tablet servers last flushed; see ARCHITECTURE.md for the bound).
    #[arg(long, default_value = "immediate", value_parser = ["immediate", "eventual"])]
    pub consistency: String,
    /// Eventual reads: a busy timeout for every attempt instead of the
    /// profile's, ms (1..=3600000).
    #[arg(long)]
    pub busy_timeout_ms: Option<u64>,
    /// Eventual reads: the dispatcher profile (default: the file's, or the
    /// built-in default).
    #[arg(long)]
    pub profile: Option<String>,
    /// Eventual reads: a TOML file of dispatcher profiles (docs/dispatcher.md).
    #[arg(long)]
    pub dispatcher: Option<PathBuf>,
}

impl ReadArgs {
    /// The client (with the dispatcher file, if any) and the consistency,
    /// checked before anything is read.
    fn open(&self, cluster: &ClusterArg) -> anyhow::Result<(Client, Consistency)> {
        let eventual = self.consistency == "eventual";
        if !eventual
            && (self.busy_timeout_ms.is_some()
                || self.profile.is_some()
                || self.dispatcher.is_some())
        {
            bail!("--busy-timeout-ms, --profile and --dispatcher apply to --consistency eventual only");
        }
        let dispatcher = match &self.dispatcher {
            Some(f) => Some(std::sync::Arc::new(
                tablinum_client::Profiles::load(f)
                    .with_context(|| format!("--dispatcher {}", f.display()))?,
            )),
            None => None,
        };
        let c = connect_with(cluster, dispatcher)?;
        if !eventual {
            return Ok((c, Consistency::Immediate));
        }
        // Check the profile before any tablet is touched.
        c.as_async()
            .profile(self.profile.as_deref())
            .map_err(|e| anyhow::anyhow!("--profile: {e}"))?;
        let consistency = Consistency::Eventual {
            profile: self.profile.clone(),
            busy_timeout_ms: self.busy_timeout_ms,
        };
        Ok((c, consistency))
    }
}

/// Prints what a point read did to stderr.
fn print_read_stats(s: &tablinum_client::ReadStats) {
    let plan = s
        .plan
        .map_or_else(|| "tablet server".to_string(), |p| format!("plan {p}"));
    eprintln!(
        "served by {} ({plan}) attempts {} busy {} hedges {} hedge won {}",
        s.server, s.attempts, s.busy_answers, s.hedges, s.hedge_won
    );
}

/// Options of `tablinum scan`.
#[derive(Debug, Args)]
pub struct ScanArgs {
    /// Table name.
    pub table: String,
    /// First key (inclusive).
    #[arg(long, default_value = "")]
    pub start: String,
    /// End key (exclusive).
    #[arg(long, default_value = "")]
    pub end: String,
    /// Rows to return (0: all).
    #[arg(long, default_value_t = 0)]
    pub limit: u64,
    /// Rows to skip.
    #[arg(long, default_value_t = 0)]
    pub skip: u64,
    /// Scan this secondary index (rows are term, key).
    #[arg(long)]
    pub index: Option<String>,
    /// Unacknowledged batches per tablet: a number, or `adaptive`.
    #[arg(long, default_value = "adaptive", value_parser = WindowMode::parse)]
    pub stream_limit: WindowMode,
    /// Print keys only.
    #[arg(long)]
    pub keys_only: bool,
    /// Print the query's counters (rows sent, wasted, waits) to stderr.
    #[arg(long)]
    pub stats: bool,
    #[command(flatten)]
    pub read: ReadArgs,
    /// Only rows whose key or value contains STR (run on the servers).
    #[arg(long)]
    pub grep: Option<String>,
    /// Only rows whose key starts with P (run on the servers).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Print only the number of matching rows.
    #[arg(long)]
    pub count: bool,
}

/// `tablinum scan ...`.
pub fn scan(cluster: &ClusterArg, a: ScanArgs) -> anyhow::Result<()> {
    let eventual = a.read.consistency == "eventual";
    let (c, consistency) = a.read.open(cluster)?;
    let q = Query {
        table: a.table,
        start: a.start.into_bytes(),
        end: a.end.into_bytes(),
        index: a.index.map(String::into_bytes),
        skip: a.skip,
        limit: a.limit,
        stream_limit: a.stream_limit,
        batch_rows: 0,
        keys_only: a.keys_only,
        consistency,
        filter: (a.grep.is_some() || a.prefix.is_some() || a.count).then(|| {
            tablinum_client::Filter {
                grep: a.grep.clone().unwrap_or_default().into_bytes(),
                key_prefix: a.prefix.clone().unwrap_or_default().into_bytes(),
                count_only: a.count,
            }
        }),
    };
    let mut out = std::io::BufWriter::new(std::io::stdout());
    let mut err = None;
    // A closed pipe (`| head`) stops the query: no tablet keeps streaming.
    let stats = c
        .query_until(&q, &mut |r| {
            let line = match (&r.term, a.keys_only) {
                (Some(t), _) => format!("{}\t{}", show(t), show(&r.key)),
                (None, true) => show(&r.key),
                (None, false) => format!("{}\t{}", show(&r.key), show(&r.value)),
            };
            match writeln!(out, "{line}") {
                Ok(()) => std::ops::ControlFlow::Continue(()),
                Err(e) => {
                    err = Some(e);
                    std::ops::ControlFlow::Break(())
                }
            }
        })
        .map_err(hint)?;
    drop(out);
    if let Some(e) = err {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            return Err(e.into());
        }
    }
    if a.count {
        out!("{}", stats.rows_matched);
    }
    if a.stats {
        eprintln!(
            "rows returned {} skipped {} sent {} wasted {} waits {} tablets {}",
            stats.rows_returned,
            stats.rows_skipped,
            stats.rows_sent,
            stats.rows_wasted,
            stats.waits,
            stats.tablets
        );
        eprintln!(
            "rows examined on the servers {} matched {}",
            stats.rows_examined, stats.rows_matched
        );
        if eventual {
            eprintln!(
                "attempts {} busy {} served by plan {:?} by tablet servers {}",
                stats.attempts, stats.busy_answers, stats.served_by_plan, stats.served_by_tserver
            );
        }
    }
    Ok(())
}

/// `tablinum status`.
pub fn status(cluster: &ClusterArg) -> anyhow::Result<()> {
    let s = connect(cluster)?.status().map_err(hint)?;
    out!("live tablet servers: {}", s.servers.len());
    for sv in &s.servers {
        out!(
            "  {}\t{}\ttablets={}\tlast heartbeat {} ms ago\thttp://{}/",
            sv.id,
            sv.address,
            sv.tablets,
            sv.last_heartbeat_ms,
            sv.http
        );
    }
    out!("tables: {}", s.tables.len());
    for t in &s.tables {
        out!("  {}\ttablets={}", t.name, t.tablets);
    }
    out!("unassigned tablets: {}", s.tablets_unassigned);
    out!("live scan servers: {}", s.scan_servers.len());
    for sv in &s.scan_servers {
        out!(
            "  {}	{}	group={}	queue={}	running={}	busy={}	batches={}	served by attempt={}	by plan={}	last heartbeat {} ms ago	http://{}/",
            sv.id,
            sv.address,
            sv.group,
            sv.queue_depth,
            sv.scans_running,
            sv.busy_total,
            sv.batches_total,
            slash(&sv.served_by_attempt),
            slash(&sv.served_by_plan),
            sv.last_heartbeat_ms,
            sv.http
        );
    }
    Ok(())
}

/// Counts as `12/3/0/0`.
fn slash(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join("/")
}

/// `tablinum token ...`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Create a token and print it (shown once; the cluster keeps only its hash).
    Create {
        /// What it may do: read, write or admin.
        #[arg(long, value_parser = Role::parse)]
        role: Role,
        /// A label for operators (A-Z a-z 0-9 _ . - @, at most 128 bytes).
        #[arg(long, default_value = "")]
        name: String,
    },
    /// List tokens: id, role, name, creation time (never a secret).
    List,
    /// Revoke a token by id; returns once no server accepts it.
    Revoke {
        /// The token's id (12 hex digits, as `token list` shows).
        id: String,
    },
}

/// `tablinum token ...`.
pub fn token(cluster: &ClusterArg, cmd: TokenCommand) -> anyhow::Result<()> {
    let c = connect(cluster)?;
    match cmd {
        TokenCommand::Create { role, name } => {
            let (info, token) = c.create_token(role, &name).map_err(hint)?;
            eprintln!(
                "created {} token {} (shown once; keep it secret)",
                info.role.name(),
                info.id
            );
            out!("{}", token.expose());
        }
        TokenCommand::List => {
            for t in c.list_tokens().map_err(hint)? {
                out!(
                    "{}\t{}\t{}\tcreated_ms={}",
                    t.id,
                    t.role.name(),
                    if t.name.is_empty() { "-" } else { &t.name },
                    t.created_ms
                );
            }
        }
        TokenCommand::Revoke { id } => {
            c.revoke_token(&id).map_err(hint)?;
            out!("revoked token {id}");
        }
    }
    Ok(())
}

/// Defaults shown in `--help` of `up`.
pub const UP_LISTEN_DEFAULT: &str = MANAGER_LISTEN_DEFAULT;
/// Default HTTP address of `up`.
pub const UP_HTTP_DEFAULT: &str = MANAGER_HTTP_DEFAULT;
