//! Helpers of the process-level tests: the `tablinum` binary, its children
//! (killed when a test ends, however it ends), roles started from config
//! files, bounded waits and clients.
#![allow(dead_code)] // each test crate uses its own subset

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tablinum_client::{Client, ClientConfig, Credential};

pub const BIN: &str = env!("CARGO_BIN_EXE_tablinum");

/// Children killed when the test ends, however it ends.
pub struct Procs(pub Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Spawns `cmd` (a `tablinum` role) with its stdout piped and reads its
/// banner; returns it with the gRPC and HTTP addresses of its `grpc` and
/// `status` lines.
pub fn spawn_with_endpoints(mut cmd: Command, what: &str) -> (Child, String, String) {
    let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut grpc = None;
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            let l = line.trim();
            if let Some(a) = l.strip_prefix("grpc") {
                grpc = Some(a.trim().to_string());
            }
            if let Some(a) = l.strip_prefix("status") {
                let http = a.trim().trim_start_matches("http://").trim_end_matches('/');
                let _ = tx.send((grpc.clone().unwrap_or_default(), http.to_string()));
            }
        }
    });
    let (grpc, http) = rx
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what} did not print its endpoints"));
    (child, grpc, http)
}

/// Starts `tablinum ROLE --config F` and returns it with its gRPC address.
pub fn spawn_role(role: &str, config: &Path) -> (Child, String) {
    let mut cmd = Command::new(BIN);
    cmd.args([role, "--config"])
        .arg(config)
        .stderr(Stdio::inherit());
    let (child, grpc, _) = spawn_with_endpoints(cmd, role);
    (child, grpc)
}

/// Starts `tablinum up` on free ports with `home` as its XDG_CONFIG_HOME;
/// returns it with its gRPC and HTTP addresses.
pub fn spawn_up(data: &Path, home: &Path) -> (Child, String, String) {
    spawn_up_with(data, home, Stdio::inherit())
}

/// [`spawn_up`] with the process's standard error sent to `stderr`.
pub fn spawn_up_with(data: &Path, home: &Path, stderr: Stdio) -> (Child, String, String) {
    let mut cmd = Command::new(BIN);
    cmd.args([
        "up",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--data",
    ])
    .arg(data)
    .env("XDG_CONFIG_HOME", home)
    .stderr(stderr);
    spawn_with_endpoints(cmd, "tablinum up")
}

/// The admin token `tablinum up` at `addr` saved in `home`'s credentials
/// file.
pub fn up_admin(home: &Path, addr: &str) -> Credential {
    let creds = home.join("tablinum").join("credentials");
    tablinum_auth::files::lookup_credentials(&creds, addr)
        .unwrap()
        .expect("no credentials entry for the cluster")
}

/// The `/metrics` page at `http`, fetched with `cred`.
pub fn metrics_page(http: &str, cred: &Credential) -> String {
    let mut s = std::net::TcpStream::connect(http).unwrap();
    s.write_all(
        format!(
            "GET /metrics HTTP/1.1\r\nAuthorization: Bearer {}\r\n\r\n",
            cred.expose()
        )
        .as_bytes(),
    )
    .unwrap();
    let mut o = String::new();
    std::io::Read::read_to_string(&mut s, &mut o).unwrap();
    o
}

/// A xorshift generator of numbers below `n`, deterministic by `seed`
/// (kill moments of the crash tests).
pub fn xorshift(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |n| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    }
}

pub fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A client presenting `cred`.
pub fn client_as(addr: &str, cred: &Credential) -> Client {
    Client::connect_with(addr, ClientConfig::with_credential(Some(cred.clone()))).unwrap()
}

/// A manager and `n` tablet servers as processes, sharing `dir/storage`
/// and the cluster secret `dir/cluster.secret`; returns them (manager
/// first) with the manager's address and each tablet server's index in
/// `procs` by address.
pub fn start_processes(
    dir: &Path,
    timeout_ms: u64,
    n: usize,
) -> (Procs, String, HashMap<String, usize>) {
    start_processes_with(dir, timeout_ms, n, "")
}

/// [`start_processes`] with `tserver_extra` appended to every tablet
/// server's `[tserver]` section.
pub fn start_processes_with(
    dir: &Path,
    timeout_ms: u64,
    n: usize,
    tserver_extra: &str,
) -> (Procs, String, HashMap<String, usize>) {
    let storage = dir.join("storage");
    let secret = dir.join("cluster.secret");
    let mcfg = dir.join("manager.toml");
    std::fs::write(
        &mcfg,
        format!(
            "[manager]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\ndata = {:?}\nstorage = {storage:?}\nheartbeat_timeout_ms = {timeout_ms}\ncluster_secret_file = {secret:?}\n",
            dir.join("manager"),
        ),
    )
    .unwrap();
    let mut procs = Procs(Vec::new());
    let (m, maddr) = spawn_role("manager", &mcfg);
    procs.0.push(m);
    let mut tservers = HashMap::new();
    for i in 0..n {
        let cfg = dir.join(format!("tserver{i}.toml"));
        std::fs::write(
            &cfg,
            format!(
                "[tserver]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nmanager = \"{maddr}\"\nstorage = {storage:?}\nheartbeat_interval_ms = 200\ncluster_secret_file = {secret:?}\n{tserver_extra}"
            ),
        )
        .unwrap();
        let (c, addr) = spawn_role("tserver", &cfg);
        procs.0.push(c);
        tservers.insert(addr, procs.0.len() - 1);
    }
    (procs, maddr, tservers)
}

/// The CLI as a user runs it against one cluster: its address, the home
/// directory holding its credentials, the working directory.
pub struct Cli {
    pub grpc: String,
    pub home: std::path::PathBuf,
    pub dir: std::path::PathBuf,
}

/// What one CLI run returned.
pub struct Out {
    pub code: i32,
    pub out: String,
    pub err: String,
}

impl Cli {
    /// Starts `tablinum up` on `dir/data` with its credentials in
    /// `dir/home`; returns it (killed when dropped) and the CLI for it,
    /// working in `dir`.
    pub fn up(dir: &Path) -> (Procs, Cli) {
        let home = dir.join("home");
        let (child, grpc, _) = spawn_up(&dir.join("data"), &home);
        (
            Procs(vec![child]),
            Cli {
                grpc,
                home,
                dir: dir.to_path_buf(),
            },
        )
    }

    /// Spawns `tablinum ARGS`, its output discarded, with the flow crash
    /// point `crash_at` if given.
    pub fn spawn(&self, args: &[&str], crash_at: Option<&str>) -> Child {
        let mut c = self.cmd(args);
        if let Some(at) = crash_at {
            c.env("TABLINUM_FLOW_CRASH_AT", at);
        }
        c.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    }

    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(&self.dir)
            .env("XDG_CONFIG_HOME", &self.home)
            .env("TABLINUM_CLUSTER", &self.grpc)
            .env_remove("TABLINUM_TOKEN")
            .env_remove("TABLINUM_CONFIG");
        cmd
    }

    pub fn run(&self, args: &[&str], stdin: &[u8]) -> Out {
        let mut child = self
            .cmd(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut i = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let w = std::thread::spawn(move || {
            let _ = i.write_all(&data);
        });
        let o = child.wait_with_output().unwrap();
        w.join().unwrap();
        Out {
            code: o.status.code().unwrap_or(-1),
            out: String::from_utf8_lossy(&o.stdout).into_owned(),
            err: String::from_utf8_lossy(&o.stderr).into_owned(),
        }
    }

    /// Runs `tablinum ARGS` with a new token of `role` and asserts it is
    /// refused (exit 4); returns its standard error.
    pub fn denied_as(&self, role: &str, args: &[&str]) -> String {
        let token = self.ok(&["token", "create", "--role", role]);
        let o = self
            .cmd(args)
            .env("TABLINUM_TOKEN", token.trim())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(4), "{args:?} as {role}: {err}");
        err
    }

    pub fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args, b"");
        assert_eq!(r.code, 0, "{args:?}: {}{}", r.out, r.err);
        r.out
    }
}
