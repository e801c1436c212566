//! README.md's quick start, run exactly as written: the first command's
//! `tablinum up` (the binary `cargo install` builds from this source, put
//! first on PATH), then every line of the block marked `quickstart`, each
//! through `bash -c` in a fresh directory with a fresh home, as a newcomer
//! in a second terminal would. The commands are read from README.md, so the
//! README cannot drift from what works.
//!
//! It uses `tablinum up`'s default ports (127.0.0.1:7400 and 7401), as the
//! README does; it is the only test that does.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{Procs, BIN};

/// How long one quick-start command may take, s (the smoke benchmark runs
/// 5 s plus loading in a debug build).
const COMMAND_SECONDS_MAX: u64 = 180;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The lines of the first ```sh block after `marker`, without comments.
fn block_after(readme: &str, marker: &str) -> Vec<String> {
    let at = readme
        .find(marker)
        .unwrap_or_else(|| panic!("README.md has no {marker:?}"));
    let rest = &readme[at..];
    let start = rest.find("```sh\n").expect("a ```sh block") + "```sh\n".len();
    let end = rest[start..].find("```").expect("the block's end") + start;
    rest[start..end]
        .lines()
        .map(|l| match l.find(" #") {
            Some(i) => l[..i].trim().to_string(),
            None => l.trim().to_string(),
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

#[test]
fn the_readme_quick_start_runs_as_written() {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).unwrap();
    // Terminal 1: the README's first command installs and starts tablinum.
    let first = block_after(&readme, "## Two commands");
    assert_eq!(
        first.first().map(String::as_str),
        Some("cargo install --locked --path crates/tablinum-cli && tablinum up"),
        "the README's first command changed; update this test with it"
    );
    let commands = block_after(&readme, "<!-- quickstart");
    assert!(commands.len() >= 10, "{commands:?}");

    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().join("work");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    // The quick start runs from the repository's root: it names README.md,
    // bench/workloads and examples.
    for f in ["README.md", "bench", "examples"] {
        std::os::unix::fs::symlink(repo_root().join(f), cwd.join(f)).unwrap();
    }
    let bin_dir = Path::new(BIN).parent().unwrap().to_path_buf();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let env = |c: &mut Command| {
        c.current_dir(&cwd)
            .env("PATH", &path)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env_remove("TABLINUM_CLUSTER")
            .env_remove("TABLINUM_TOKEN")
            .env_remove("TABLINUM_CONFIG")
            .env_remove("TABLINUM_CA");
    };

    let mut up = Command::new("bash");
    up.args(["-c", "exec tablinum up"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    env(&mut up);
    let mut child = up.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let _procs = Procs(vec![child]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if line.trim_start().starts_with("admin token") {
                let _ = tx.send(());
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("`tablinum up` did not start (is something else on 127.0.0.1:7400 or :7401?)");

    for cmd in &commands {
        let mut c = Command::new("bash");
        c.args(["-c", cmd])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        env(&mut c);
        let t0 = Instant::now();
        let child = c.spawn().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(child.wait_with_output());
        });
        let o = rx
            .recv_timeout(Duration::from_secs(COMMAND_SECONDS_MAX))
            .unwrap_or_else(|_| panic!("`{cmd}` ran over {COMMAND_SECONDS_MAX} s"))
            .unwrap();
        let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(
            o.status.success(),
            "`{cmd}` failed ({}):\n{stdout}\n{stderr}",
            o.status
        );
        eprintln!("ok in {:.1} s: {cmd}", t0.elapsed().as_secs_f64());
        // What the README's comments promise.
        match cmd.as_str() {
            "tablinum status" => assert!(
                stdout.contains("live tablet servers: 1")
                    && stdout.contains("live scan servers: 1"),
                "{stdout}"
            ),
            "tablinum get demo hello" => assert_eq!(stdout, "world"),
            "tablinum flow validate examples/splitter.toml" => assert!(
                stdout.contains(
                    "expected 20000, received 20000, lost 0, duplicated 0, unexpected 0: EXACT"
                ),
                "{stdout}"
            ),
            "tablinum scan demo --index lang" => assert_eq!(stdout, "en\thello\n"),
            "tablinum scan copy --count" => assert_eq!(stdout, "2\n"),
            c if c.starts_with("tablinum bench run") => {
                assert!(cwd.join("smoke-run/summary.png").is_file(), "{stderr}")
            }
            _ => {}
        }
    }
    // The export holds both objects, the README's bytes exactly.
    let export = std::fs::read_to_string(cwd.join("demo.jsonl")).unwrap();
    assert_eq!(export.lines().count(), 2, "{export}");
    let readme_line: serde_json::Value =
        serde_json::from_str(export.lines().find(|l| l.contains("\"readme\"")).unwrap()).unwrap();
    assert_eq!(readme_line["value"].as_str().unwrap(), readme);
}

/// Most bytes `bench/results/` may hold: it keeps what a reader needs to
/// check a claim (the NOTE with command, machine and table; summary JSON;
/// charts), not raw output a run's command writes again.
const BENCH_RESULTS_BYTES_MAX: u64 = 20 << 20;

fn tree_bytes(dir: &Path, patches: &mut Vec<PathBuf>) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let meta = e.metadata().unwrap();
        if meta.is_dir() {
            n += tree_bytes(&p, patches);
        } else {
            if p.extension().is_some_and(|x| x == "patch") {
                patches.push(p.clone());
            }
            n += meta.len();
        }
    }
    n
}

/// `bench/results/` stays a source repository's record: within its byte
/// budget, a NOTE.md in every run folder, and no patches of unmerged
/// experiments (they live in git history or the note's prose).
#[test]
fn bench_results_stay_small_and_every_run_has_a_note() {
    let results = repo_root().join("bench").join("results");
    let mut patches = Vec::new();
    let total = tree_bytes(&results, &mut patches);
    assert!(
        total <= BENCH_RESULTS_BYTES_MAX,
        "bench/results holds {} KiB; the budget is {} KiB (BENCH_RESULTS_BYTES_MAX): keep \
         the NOTE, summary JSON and charts, drop raw output the command writes again",
        total >> 10,
        BENCH_RESULTS_BYTES_MAX >> 10
    );
    assert!(patches.is_empty(), "patches in bench/results: {patches:?}");
    let mut without_note = Vec::new();
    for e in std::fs::read_dir(&results).unwrap().flatten() {
        if e.path().is_dir() && !e.path().join("NOTE.md").is_file() {
            without_note.push(e.file_name());
        }
    }
    assert!(
        without_note.is_empty(),
        "run folders without a NOTE.md: {without_note:?}"
    );
}

/// No client code decides by the words of a status: retries, "not
/// applied" and busy answers come from the status's code and typed detail
/// (`tablinum_client::error::classify`), never from its message, which is
/// for people. A line of the client's sources outside its tests that reads
/// a status's message and compares it fails this test.
#[test]
fn no_client_code_path_matches_on_a_status_message() {
    let src = repo_root()
        .join("crates")
        .join("tablinum-client")
        .join("src");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        // Unit tests may check the words they expect.
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (i, line) in code.lines().enumerate() {
            let reads_message = line.contains(".message()");
            let compares = [
                "starts_with(",
                "ends_with(",
                "contains(",
                "strip_prefix(",
                " == ",
                " != ",
                "matches!(",
            ]
            .iter()
            .any(|c| line.contains(c));
            if reads_message && compares {
                found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "client code matching on status messages (use the typed detail):\n{}",
        found.join("\n")
    );
}
