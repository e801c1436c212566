//! The splitter scenario's child processes: `tablinum` commands against the
//! started cluster, the Kafka tools and the peer, several at once when a run
//! needs it, each with its output in files, its CPU sampled from
//! `/proc/PID/stat`, and a time limit.
//!
//! Owns [`Ctx`] (the running binary, the cluster's address, credential,
//! process and HTTP address, and the environment every child gets:
//! `TABLINUM_CLUSTER`, `TABLINUM_TOKEN`, `XDG_CONFIG_HOME=OUT/home`),
//! [`Proc`] (one child: spawned, polled every [`CHILD_POLL_MS`] for its CPU
//! ticks, killed on drop) and [`wait_all`] (children that run together, a
//! progress line every [`PROGRESS_LINE_S`], all killed at the time limit).
//! It must never leave a child running (a [`Proc`] kills its child when
//! dropped), never signal a process it did not start, and never turn a
//! child's failure into anything but a [`BenchError::ChildRun`] naming the
//! command and the end of its stderr.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::parse;
use crate::error::BenchError;
use crate::scenario::framework::child::{log_tail, CHILD_POLL_MS, PROGRESS_LINE_S};
use crate::scenario::framework::cluster::ScenarioCluster;
use crate::scenario::framework::output::trim_float;

/// How long to wait for `tablinum up`'s status line in its log, seconds.
pub const STATUS_LINE_WAIT_S: f64 = 5.0;
/// The CLI's environment variable of the cluster address.
pub const CLUSTER_ENV: &str = "TABLINUM_CLUSTER";

/// What every run needs to start children against the cluster.
#[derive(Debug, Clone)]
pub struct Ctx {
    /// The `tablinum` binary (the running one).
    pub program: PathBuf,
    /// `--out`, absolute.
    pub out: PathBuf,
    /// The cluster's gRPC address.
    pub addr: String,
    /// Its admin token (the text of DATA/admin.token).
    pub token: String,
    /// Its data directory (cluster.secret for workers).
    pub data_dir: Option<PathBuf>,
    /// Its process (CPU).
    pub cluster_pid: Option<u32>,
    /// Its HTTP address (`/metrics`).
    pub http: Option<String>,
    /// Child time limit, seconds.
    pub timeout_s: f64,
}

impl Ctx {
    /// The context of the started `cluster`.
    pub fn for_cluster(
        program: &Path,
        out: &Path,
        cluster: &ScenarioCluster,
        timeout_s: f64,
    ) -> Result<Ctx, BenchError> {
        let info = cluster.info();
        let data_dir = info.data_dir.clone();
        let token = match &data_dir {
            Some(d) => {
                let p = d.join(crate::local_cluster::ADMIN_TOKEN_FILE);
                std::fs::read_to_string(&p)
                    .map_err(|e| BenchError::io(&p, "read the admin token", e))?
                    .trim()
                    .to_string()
            }
            None => std::env::var(tablinum_auth::files::TOKEN_ENV).unwrap_or_default(),
        };
        let mut http = None;
        if let Some(log) = &info.log {
            let t0 = Instant::now();
            while http.is_none() && t0.elapsed().as_secs_f64() < STATUS_LINE_WAIT_S {
                http = parse::status_addr(&std::fs::read_to_string(log).unwrap_or_default());
                if http.is_none() {
                    std::thread::sleep(Duration::from_millis(CHILD_POLL_MS));
                }
            }
        }
        Ok(Ctx {
            program: program.to_path_buf(),
            out: out.to_path_buf(),
            addr: cluster.addr().to_string(),
            token,
            data_dir,
            cluster_pid: super::cluster_pid(cluster),
            http,
            timeout_s,
        })
    }

    /// Creates `OUT/home`, `OUT/raw`, `OUT/flows`, `OUT/files`.
    pub fn prepare_dirs(&self, out: &Path) -> Result<(), BenchError> {
        for d in ["home", "raw", "flows", "files"] {
            let p = out.join(d);
            std::fs::create_dir_all(&p).map_err(|e| BenchError::io(&p, "create", e))?;
        }
        Ok(())
    }

    /// `tablinum ARGS` with the cluster's environment.
    pub fn tablinum(&self, args: &[&str]) -> Command {
        let mut c = Command::new(&self.program);
        c.args(args)
            .env(CLUSTER_ENV, &self.addr)
            .env(tablinum_auth::files::TOKEN_ENV, &self.token)
            .env("XDG_CONFIG_HOME", self.out.join("home"));
        c
    }

    /// The directory of run `sequence`'s raw outputs (`OUT/raw/007`), created.
    pub fn run_dir(&self, sequence: usize) -> Result<PathBuf, BenchError> {
        let d = self.out.join("raw").join(format!("{sequence:03}"));
        std::fs::create_dir_all(&d).map_err(|e| BenchError::io(&d, "create", e))?;
        Ok(d)
    }

    /// Writes `text` to `OUT/flows/NAME.toml` and returns the path.
    pub fn write_flow(&self, name: &str, text: &str) -> Result<PathBuf, BenchError> {
        let p = self.out.join("flows").join(format!("{name}.toml"));
        std::fs::write(&p, text).map_err(|e| BenchError::io(&p, "write", e))?;
        Ok(p)
    }
}

/// `utime + stime` of process `pid` now, clock ticks (`None` when it is gone).
pub fn ticks_of(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse::stat_ticks(&text).ok()
}

/// CPU of an outside process (the cluster, the broker) over a span.
#[derive(Debug, Clone, Copy)]
pub struct CpuSpan {
    pid: Option<u32>,
    ticks: Option<u64>,
}

impl CpuSpan {
    /// Starts measuring `pid`.
    pub fn start(pid: Option<u32>) -> CpuSpan {
        CpuSpan {
            pid,
            ticks: pid.and_then(ticks_of),
        }
    }

    /// Percent of one core since the start over `wall_s`.
    pub fn percent(&self, wall_s: f64) -> Option<f64> {
        let now = self.pid.and_then(ticks_of)?;
        Some(parse::cpu_percent(now.saturating_sub(self.ticks?), wall_s))
    }
}

/// One child process.
#[derive(Debug)]
pub struct Proc {
    /// What it is (`flow run`, `kafka streams`); its CPU stage.
    pub stage: String,
    /// The command, for errors.
    pub command: String,
    child: Option<Child>,
    pid: u32,
    ticks: u64,
    /// Its stdout file.
    pub stdout: PathBuf,
    /// Its stderr file.
    pub stderr: PathBuf,
    status: Option<ExitStatus>,
    ok_codes: &'static [i32],
    started: Instant,
    ended: Option<Instant>,
    killed: bool,
}

impl Proc {
    /// Starts `cmd` with its output in `DIR/STEM.out` and `DIR/STEM.err`;
    /// exit codes in `ok_codes` count as success.
    pub fn spawn(
        mut cmd: Command,
        stage: &str,
        dir: &Path,
        stem: &str,
        ok_codes: &'static [i32],
    ) -> Result<Proc, BenchError> {
        let stdout = dir.join(format!("{stem}.out"));
        let stderr = dir.join(format!("{stem}.err"));
        let open = |p: &Path| std::fs::File::create(p).map_err(|e| BenchError::io(p, "create", e));
        let command = format!(
            "{} {}",
            Path::new(cmd.get_program())
                .file_name()
                .map_or_else(String::new, |f| f.to_string_lossy().into_owned()),
            cmd.get_args()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        );
        cmd.stdin(Stdio::null())
            .stdout(Stdio::from(open(&stdout)?))
            .stderr(Stdio::from(open(&stderr)?));
        let child = cmd.spawn().map_err(|e| BenchError::ChildRun {
            run: command.clone(),
            reason: format!("cannot start it: {e}"),
        })?;
        Ok(Proc {
            stage: stage.to_string(),
            command,
            pid: child.id(),
            child: Some(child),
            ticks: 0,
            stdout,
            stderr,
            status: None,
            ok_codes,
            started: Instant::now(),
            ended: None,
            killed: false,
        })
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Samples its CPU and checks whether it ended; true once it has.
    pub fn poll(&mut self) -> bool {
        if self.status.is_some() {
            return true;
        }
        if let Some(t) = ticks_of(self.pid) {
            self.ticks = self.ticks.max(t);
        }
        let Some(child) = self.child.as_mut() else {
            return true;
        };
        match child.try_wait() {
            Ok(Some(s)) => {
                self.status = Some(s);
                self.ended = Some(Instant::now());
                true
            }
            Ok(None) => false,
            Err(_) => {
                self.kill();
                true
            }
        }
    }

    /// SIGKILLs it and reaps it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            if self.status.is_none() {
                let _ = c.kill();
                self.killed = true;
                self.status = c.wait().ok();
                self.ended = Some(Instant::now());
            } else {
                self.child = Some(c);
            }
        }
    }

    /// CPU ticks seen (the last sample before it ended).
    pub fn ticks(&self) -> u64 {
        self.ticks
    }

    /// Seconds from its start to its end (or now).
    pub fn wall_s(&self) -> f64 {
        self.ended
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_secs_f64()
    }

    /// Percent of one core over `wall_s`.
    pub fn cpu_percent(&self, wall_s: f64) -> f64 {
        parse::cpu_percent(self.ticks, wall_s)
    }

    /// Its stdout so far.
    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// `Err` when it ended with a code outside its `ok_codes`, by a signal,
    /// or not at all.
    pub fn check(&self) -> Result<(), BenchError> {
        let how = match self.status {
            None => "has not ended".to_string(),
            Some(_) if self.killed => "was killed".to_string(),
            Some(s) => match s.code() {
                Some(c) if self.ok_codes.contains(&c) => return Ok(()),
                Some(c) => format!("exited with status {c}"),
                None => "was killed by a signal".to_string(),
            },
        };
        Err(BenchError::ChildRun {
            run: self.command.clone(),
            reason: format!(
                "{how}; last lines of {}: {}",
                self.stderr.display(),
                log_tail(&self.stderr)
            ),
        })
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits for every child of `procs`, sampling their CPU; after `timeout_s`
/// every one still running is killed and the wait fails. Prints a progress
/// line every [`PROGRESS_LINE_S`]. `Err` when one timed out or failed its
/// [`Proc::check`].
pub fn wait_all(procs: &mut [&mut Proc], timeout_s: f64, label: &str) -> Result<(), BenchError> {
    let t0 = Instant::now();
    let mut next_line = PROGRESS_LINE_S;
    loop {
        let mut done = true;
        for p in procs.iter_mut() {
            done &= p.poll();
        }
        if done {
            break;
        }
        let elapsed = t0.elapsed().as_secs_f64();
        if elapsed > timeout_s {
            let running: Vec<String> = procs
                .iter_mut()
                .filter_map(|p| (!p.poll()).then(|| p.command.clone()))
                .collect();
            for p in procs.iter_mut() {
                p.kill();
            }
            return Err(BenchError::ChildRun {
                run: label.to_string(),
                reason: format!(
                    "timed out after {} s and was killed: {}",
                    trim_float(timeout_s),
                    running.join("; ")
                ),
            });
        }
        if elapsed >= next_line {
            let running: Vec<&str> = procs
                .iter()
                .filter(|p| p.status.is_none())
                .map(|p| p.stage.as_str())
                .collect();
            eprintln!("{label}: {elapsed:.0} s, running: {}", running.join(", "));
            next_line += PROGRESS_LINE_S;
        }
        std::thread::sleep(Duration::from_millis(CHILD_POLL_MS));
    }
    for p in procs.iter() {
        p.check()?;
    }
    Ok(())
}

/// Runs `cmd` to its end (see [`wait_all`]) and returns it, to read its output.
pub fn run_one(
    cmd: Command,
    stage: &str,
    dir: &Path,
    stem: &str,
    ok_codes: &'static [i32],
    timeout_s: f64,
    label: &str,
) -> Result<Proc, BenchError> {
    let mut p = Proc::spawn(cmd, stage, dir, stem, ok_codes)?;
    wait_all(&mut [&mut p], timeout_s, label)?;
    Ok(p)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(script: &str) -> Command {
        let mut c = Command::new("/bin/sh");
        c.args(["-c", script]);
        c
    }

    #[test]
    fn children_end_fail_and_time_out() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let d = tmp.path();
        let p =
            run_one(sh("echo hi"), "x", d, "ok", &[0], 30.0, "t").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(p.stdout_text(), "hi\n");
        let e = run_one(sh("echo boom >&2; exit 3"), "x", d, "bad", &[0], 30.0, "t")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            e.contains("exited with status 3") && e.contains("boom"),
            "{e}"
        );
        assert!(run_one(sh("exit 1"), "x", d, "one", &[0, 1], 30.0, "t").is_ok());
        let t0 = Instant::now();
        let e = run_one(sh("sleep 20"), "x", d, "slow", &[0], 0.3, "t")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("timed out"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}
