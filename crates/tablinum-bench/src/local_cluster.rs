//! A `tablinum up` child process: the embedded cluster (manager and tablet
//! server in one process) on free localhost ports, for the `cluster` target
//! and the `stream-limit` scenario.
//!
//! Owns starting it (an executable that has the `up` subcommand, normally the
//! current one, as `EXE up --data DIR --listen 127.0.0.1:0 --http
//! 127.0.0.1:0`), reading the gRPC address from its ready line, keeping its
//! stdout and stderr in a log file, and stopping it (SIGTERM, a bounded wait,
//! then SIGKILL). It must never leave the process running (dropping a
//! [`LocalCluster`] stops it), never send a signal to any process but its
//! own child, and never delete the cluster's data: the caller owns the
//! directory.

use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tablinum_auth::Credential;

use crate::error::BenchError;

/// The file in the data directory where `tablinum up` writes its admin token.
pub const ADMIN_TOKEN_FILE: &str = "admin.token";

/// How long the cluster may take to print its ready line, seconds.
pub const START_TIMEOUT_S: u64 = 60;
/// How long the cluster may take to exit after SIGTERM before it is killed,
/// seconds (it closes its tablets first).
pub const STOP_TIMEOUT_S: u64 = 60;
/// How often a stopping cluster is checked on, milliseconds.
pub const STOP_POLL_MS: u64 = 20;
/// The address both listeners are given: localhost, a free port each.
pub const ANY_LOCAL_PORT: &str = "127.0.0.1:0";
/// The start of the line of `tablinum up` that names its gRPC address.
pub const READY_LINE_PREFIX: &str = "  grpc ";
/// Lines of the cluster's log quoted in an error.
pub const LOG_TAIL_LINES: usize = 8;

/// A running `tablinum up` child.
#[derive(Debug)]
pub struct LocalCluster {
    child: Mutex<Option<Child>>,
    pump: Mutex<Option<JoinHandle<()>>>,
    addr: String,
    log: PathBuf,
    data: PathBuf,
}

fn cluster_err(action: &'static str, reason: String) -> BenchError {
    BenchError::Cluster { action, reason }
}

/// The last [`LOG_TAIL_LINES`] non-empty lines of `path`, joined with ` | `.
pub fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
    if tail.is_empty() {
        "(empty log)".to_string()
    } else {
        tail.join(" | ")
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s}"),
        _ => "exited".to_string(),
    }
}

/// The credential for a cluster the harness did not start: `TABLINUM_TOKEN`,
/// else the address's entry in the user's credentials file.
pub fn credential_for(addr: &str) -> Result<Option<Credential>, BenchError> {
    let bad = |e: tablinum_auth::Error| cluster_err("read credentials", e.to_string());
    if let Ok(t) = std::env::var(tablinum_auth::files::TOKEN_ENV) {
        return Credential::parse(&t).map(Some).map_err(bad);
    }
    match tablinum_auth::files::credentials_path() {
        Some(p) => tablinum_auth::files::lookup_credentials(&p, addr).map_err(bad),
        None => Ok(None),
    }
}

impl LocalCluster {
    /// The TLS a client of this cluster needs: its CA when it was started
    /// with `tls` (`tablinum up --tls` keeps it in DATA/tls/ca.pem).
    pub fn client_tls(&self) -> Result<Option<tablinum_client::ClientTls>, BenchError> {
        let ca = tablinum_server::embedded_ca_path(&self.data);
        if !ca.exists() {
            return Ok(None);
        }
        tablinum_client::ClientTls::from_files(&ca, None)
            .map(Some)
            .map_err(|e| cluster_err("read the cluster's CA", e.to_string()))
    }

    /// The admin token the cluster wrote into its data directory.
    pub fn credential(&self) -> Result<Credential, BenchError> {
        let p = self.data.join(ADMIN_TOKEN_FILE);
        tablinum_auth::files::load_token_file(&p)
            .map_err(|e| cluster_err("read the admin token", e.to_string()))
    }

    /// Starts `program up` (with `--tls` when `tls`) with its data in
    /// `data` (created if missing) and its output appended to `log`, and
    /// waits for its ready line.
    pub fn start(
        program: &Path,
        data: &Path,
        log: &Path,
        tls: bool,
    ) -> Result<LocalCluster, BenchError> {
        Self::start_with(program, data, log, tls, &[])
    }

    /// [`LocalCluster::start`] with more arguments for `up` (such as
    /// `--sservers 0`).
    pub fn start_with(
        program: &Path,
        data: &Path,
        log: &Path,
        tls: bool,
        extra: &[&str],
    ) -> Result<LocalCluster, BenchError> {
        std::fs::create_dir_all(data)
            .map_err(|e| BenchError::io(data, "create cluster data directory", e))?;
        if let Some(dir) = log.parent() {
            std::fs::create_dir_all(dir).map_err(|e| BenchError::io(dir, "create", e))?;
        }
        let open_log = || -> Result<File, BenchError> {
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(log)
                .map_err(|e| BenchError::io(log, "open cluster log", e))
        };
        let stderr = open_log()?;
        let mut pump_log = open_log()?;
        let mut child = Command::new(program)
            .arg("up")
            .arg("--data")
            .arg(data)
            .args(["--listen", ANY_LOCAL_PORT, "--http", ANY_LOCAL_PORT])
            .args(tls.then_some("--tls"))
            .args(extra)
            // Its credentials entry goes beside its data, not into the
            // user's credentials file.
            .env("XDG_CONFIG_HOME", data.join(".config"))
            // Exits by itself if this harness dies (killed, Ctrl-C).
            .env(tablinum_server::EXIT_WITH_PARENT_ENV, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(stderr))
            .spawn()
            .map_err(|e| cluster_err("start", format!("cannot run {}: {e}", program.display())))?;
        let Some(stdout) = child.stdout.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(cluster_err("start", "no stdout pipe to the child".into()));
        };
        let (tx, rx) = mpsc::channel::<String>();
        // Copies the child's stdout into the log (so its pipe never fills)
        // and hands over the gRPC address once.
        let pump = std::thread::Builder::new()
            .name("cluster-stdout".into())
            .spawn(move || {
                let mut tx = Some(tx);
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { break };
                    let _ = writeln!(pump_log, "{line}");
                    if let Some(addr) = line.strip_prefix(READY_LINE_PREFIX) {
                        if let Some(tx) = tx.take() {
                            let _ = tx.send(addr.trim().to_string());
                        }
                    }
                }
            })
            .map_err(|e| cluster_err("start", format!("cannot start the output thread: {e}")))?;
        let mut cluster = LocalCluster {
            child: Mutex::new(Some(child)),
            pump: Mutex::new(Some(pump)),
            addr: String::new(),
            log: log.to_path_buf(),
            data: data.to_path_buf(),
        };
        match rx.recv_timeout(Duration::from_secs(START_TIMEOUT_S)) {
            Ok(addr) => {
                cluster.addr = addr;
                Ok(cluster)
            }
            Err(e) => {
                let why = match e {
                    mpsc::RecvTimeoutError::Timeout => {
                        format!("no ready line within {START_TIMEOUT_S} s")
                    }
                    mpsc::RecvTimeoutError::Disconnected => {
                        "the process ended before it was ready".to_string()
                    }
                };
                // Best effort: the start failure is the error to report.
                let _ = cluster.stop();
                Err(cluster_err(
                    "start",
                    format!(
                        "`{} up`: {why} (the cluster is started by re-executing the `tablinum` \
                         binary; pass an address to use a running cluster instead); last lines \
                         of {}: {}",
                        program.display(),
                        log.display(),
                        log_tail(log)
                    ),
                ))
            }
        }
    }

    /// The manager's gRPC address (`127.0.0.1:PORT`).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The log file of the cluster's output.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The cluster process's id (`None` once stopped), to read its CPU time.
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .as_ref()
            .map(Child::id)
    }

    /// Stops the cluster: SIGTERM, then up to [`STOP_TIMEOUT_S`] for it to
    /// close its tablets and exit, then SIGKILL. `Err` when it had to be
    /// killed or did not exit cleanly. Stopping a stopped cluster does nothing.
    pub fn stop(&self) -> Result<(), BenchError> {
        let mut guard = self
            .child
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(mut child) = guard.take() else {
            return Ok(());
        };
        let mut problem = None;
        if let Ok(None) = child.try_wait() {
            let term = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if !term.is_ok_and(|s| s.success()) {
                problem = Some("SIGTERM could not be sent".to_string());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(STOP_TIMEOUT_S);
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break Some(status),
                Ok(None) if Instant::now() < deadline && problem.is_none() => {
                    std::thread::sleep(Duration::from_millis(STOP_POLL_MS));
                }
                Ok(None) => {
                    problem.get_or_insert_with(|| {
                        format!("did not exit within {STOP_TIMEOUT_S} s of SIGTERM")
                    });
                    let _ = child.kill();
                    break child.wait().ok();
                }
                Err(e) => {
                    problem = Some(format!("cannot wait for it: {e}"));
                    let _ = child.kill();
                    break child.wait().ok();
                }
            }
        };
        drop(guard);
        if let Some(pump) = self
            .pump
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            let _ = pump.join();
        }
        if problem.is_none() {
            if let Some(s) = status.filter(|s| !s.success()) {
                problem = Some(describe(s));
            }
        }
        match problem {
            None => Ok(()),
            Some(p) => Err(cluster_err(
                "stop",
                format!(
                    "the cluster at {}: {p}; last lines of {}: {}",
                    self.addr,
                    self.log.display(),
                    log_tail(&self.log)
                ),
            )),
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        // Best effort (a panic or an early error): never leave it running.
        let _ = self.stop();
    }
}
