//! A cluster of real processes for the test: one `tablinum manager` and
//! several `tablinum tserver`s started from config files the harness
//! writes, on fixed loopback addresses (so a restarted process comes back
//! at the same address), sharing one storage root and cluster secret.
//!
//! Owns starting, SIGKILL, restart, SIGSTOP and SIGCONT of its own children,
//! their disk faults (each tablet server runs with `TABLINUM_DISK_FAULTS`
//! naming a control file here) and their links to the manager (each tablet
//! server reaches it through a `partition::Relay`), and nothing else: it never signals a process it did not start, and
//! dropping it kills (and reaps) every child, paused ones included.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::partition::Relay;

/// How long a process may take to print its ready line, s.
pub const READY_TIMEOUT_S: u64 = 30;

/// A role process and how to start it again.
struct Proc {
    role: &'static str,
    config: PathBuf,
    child: Option<Child>,
    paused: bool,
}

/// The processes of one test cluster.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    log: PathBuf,
    procs: Vec<Proc>,
    /// The manager's gRPC address.
    pub manager: String,
    /// Each tablet server's gRPC address (index = tablet server number).
    pub tservers: Vec<String>,
    /// Each tablet server's relay to the manager (index = tablet server
    /// number): cutting it partitions that server from the manager.
    relays: Vec<Relay>,
}

fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

impl Cluster {
    /// Starts a manager (heartbeat timeout `timeout_ms`) and `n` tablet
    /// servers with `bin`, data under `dir`, output appended to
    /// `dir/cluster.log`.
    pub fn start(bin: &Path, dir: &Path, n: usize, timeout_ms: u64) -> Result<Cluster, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
        let storage = dir.join("storage");
        let secret = dir.join("cluster.secret");
        let manager = format!("127.0.0.1:{}", free_port()?);
        let mcfg = dir.join("manager.toml");
        write(
            &mcfg,
            &format!(
                "[manager]\nlisten = \"{manager}\"\nhttp = \"127.0.0.1:0\"\ndata = {:?}\nstorage = {storage:?}\nheartbeat_timeout_ms = {timeout_ms}\ncluster_secret_file = {secret:?}\n",
                dir.join("manager")
            ),
        )?;
        let mut c = Cluster {
            bin: bin.to_path_buf(),
            dir: dir.to_path_buf(),
            log: dir.join("cluster.log"),
            procs: vec![Proc {
                role: "manager",
                config: mcfg,
                child: None,
                paused: false,
            }],
            manager: manager.clone(),
            tservers: Vec::new(),
            relays: Vec::new(),
        };
        c.spawn(0)?;
        for i in 0..n {
            let addr = format!("127.0.0.1:{}", free_port()?);
            let cfg = dir.join(format!("tserver{i}.toml"));
            // The server reaches the manager only through its relay.
            let relay = Relay::start(&manager)?;
            let via = relay.addr.clone();
            c.relays.push(relay);
            write(
                &cfg,
                &format!(
                    "[tserver]\nlisten = \"{addr}\"\nhttp = \"127.0.0.1:0\"\nmanager = \"{via}\"\nstorage = {storage:?}\nheartbeat_interval_ms = 200\ncluster_secret_file = {secret:?}\n"
                ),
            )?;
            c.procs.push(Proc {
                role: "tserver",
                config: cfg,
                child: None,
                paused: false,
            });
            c.tservers.push(addr);
            c.spawn(i + 1)?;
        }
        Ok(c)
    }

    /// The bootstrap admin token file the manager wrote.
    pub fn admin_token_file(&self) -> PathBuf {
        self.dir.join("manager").join("admin.token")
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| format!("open {}: {e}", self.log.display()))?;
        let p = &mut self.procs[i];
        let mut cmd = Command::new(&self.bin);
        if p.role == "tserver" {
            // Each tablet server's journal I/O goes through a fault switch
            // this harness arms by writing the file (`disk`).
            cmd.env(
                tablinum_engine::faults::DISK_FAULTS_ENV,
                self.dir.join(format!("disk{i}.fault")),
            );
        }
        let mut child = cmd
            .args([p.role, "--config"])
            .arg(&p.config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log))
            .spawn()
            .map_err(|e| format!("start {}: {e}", self.bin.display()))?;
        let out = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut tx = Some(tx);
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if line.trim().starts_with("grpc") {
                    if let Some(tx) = tx.take() {
                        let _ = tx.send(());
                    }
                }
            }
        });
        p.paused = false;
        let t0 = std::time::Instant::now();
        loop {
            if rx.recv_timeout(Duration::from_millis(50)).is_ok() {
                p.child = Some(child);
                return Ok(());
            }
            let exited = child.try_wait().ok().flatten().is_some();
            if exited || t0.elapsed() > Duration::from_secs(READY_TIMEOUT_S) {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} {i} did not start (see {})",
                    p.role,
                    self.log.display()
                ));
            }
        }
    }

    fn signal(&mut self, i: usize, sig: &str) -> Result<(), String> {
        let Some(c) = &self.procs[i].child else {
            return Err(format!("process {i} is not running"));
        };
        let ok = Command::new("kill")
            .args([sig, &c.id().to_string()])
            .status()
            .map_err(|e| format!("kill: {e}"))?
            .success();
        if ok {
            Ok(())
        } else {
            Err(format!("kill {sig} of process {i} failed"))
        }
    }

    /// SIGKILLs process `i` (0: the manager, 1..: tablet servers).
    pub fn kill(&mut self, i: usize) -> Result<(), String> {
        if let Some(mut c) = self.procs[i].child.take() {
            c.kill().map_err(|e| format!("kill: {e}"))?;
            let _ = c.wait();
        }
        self.procs[i].paused = false;
        Ok(())
    }

    /// Starts process `i` again at its address.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        if self.procs[i].child.is_some() {
            return Ok(());
        }
        // The port may linger briefly; retry the start a few times.
        let mut last = String::new();
        for _ in 0..20 {
            match self.spawn(i) {
                Ok(()) => return Ok(()),
                Err(e) => {
                    last = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
            }
        }
        Err(last)
    }

    /// SIGSTOPs process `i`.
    pub fn pause(&mut self, i: usize) -> Result<(), String> {
        self.signal(i, "-STOP")?;
        self.procs[i].paused = true;
        Ok(())
    }

    /// SIGCONTs process `i`.
    pub fn resume(&mut self, i: usize) -> Result<(), String> {
        self.signal(i, "-CONT")?;
        self.procs[i].paused = false;
        Ok(())
    }

    /// Sets tablet server `i`'s disk faults (one `FaultSwitch` command:
    /// `heal`, `fsync-fail lose`, `disk-full`, `slow 1500`, ...); the
    /// server applies it within `DISK_FAULTS_POLL_MS`. Written whole
    /// (temporary file, then rename), so it never reads half a command.
    pub fn disk(&self, i: usize, command: &str) -> Result<(), String> {
        if self.procs.get(i).is_none_or(|p| p.role != "tserver") {
            return Err(format!("process {i} is not a tablet server"));
        }
        let path = self.dir.join(format!("disk{i}.fault"));
        let tmp = path.with_extension("tmp");
        write(&tmp, command)?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("rename {}: {e}", path.display()))?;
        // Let the server see it before the caller goes on.
        std::thread::sleep(Duration::from_millis(
            3 * tablinum_engine::faults::DISK_FAULTS_POLL_MS,
        ));
        Ok(())
    }

    /// Cuts (`true`) or heals tablet server `i`'s link to the manager
    /// (both directions; clients still reach both).
    pub fn partition(&self, i: usize, cut: bool) -> Result<(), String> {
        let r = i
            .checked_sub(1)
            .and_then(|t| self.relays.get(t))
            .ok_or_else(|| format!("process {i} is not a tablet server"))?;
        if cut {
            r.cut();
        } else {
            r.heal();
        }
        Ok(())
    }

    /// Heals every link and disk, resumes every paused process and
    /// restarts every dead one.
    pub fn heal(&mut self) -> Result<(), String> {
        for r in &self.relays {
            r.heal();
        }
        for i in 0..self.procs.len() {
            if self.procs[i].role == "tserver" {
                self.disk(i, "heal")?;
            }
        }
        for i in 0..self.procs.len() {
            if self.procs[i].paused {
                self.resume(i)?;
            }
            if self.procs[i].child.is_none() {
                self.restart(i)?;
            }
        }
        Ok(())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in &mut self.procs {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill(); // SIGKILL ends a stopped process too
                let _ = c.wait();
            }
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("write {}: {e}", path.display()))
}
