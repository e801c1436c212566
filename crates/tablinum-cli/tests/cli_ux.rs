//! The cluster CLI as a newcomer meets it, against a real `tablinum up`
//! process: exit codes and hints, values that round-trip (binary, 400 KB,
//! from stdin and files), `-o json|csv|tsv`, import/export round trips,
//! splits from a key sample, `TABLINUM_CLUSTER` and the config file, the
//! drop confirmation, completion scripts, and the interactive shell driven
//! through a pseudo-terminal (completion and history).

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;

use common::{spawn_up, Procs, BIN};

/// A running `tablinum up` and a home directory holding its credentials.
struct Up {
    _procs: Procs,
    grpc: String,
    http: String,
    home: PathBuf,
    dir: tempfile::TempDir,
}

fn up() -> Up {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (child, grpc, http) = spawn_up(&dir.path().join("data"), &home);
    Up {
        _procs: Procs(vec![child]),
        grpc,
        http,
        home,
        dir,
    }
}

/// What one CLI run returned.
struct Run {
    code: i32,
    out: Vec<u8>,
    err: String,
}

impl Run {
    fn out(&self) -> String {
        String::from_utf8_lossy(&self.out).into_owned()
    }
}

impl Up {
    /// Runs `tablinum ARGS --cluster GRPC` with `stdin`.
    fn run(&self, args: &[&str], stdin: &[u8]) -> Run {
        self.run_env(args, stdin, &[("TABLINUM_CLUSTER", &self.grpc)])
    }

    fn run_env(&self, args: &[&str], stdin: &[u8], env: &[(&str, &str)]) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.args(args)
            .current_dir(self.dir.path())
            .env("XDG_CONFIG_HOME", &self.home)
            .env_remove("TABLINUM_TOKEN")
            .env_remove("TABLINUM_CLUSTER")
            .env_remove("TABLINUM_CONFIG")
            .env_remove("RUST_BACKTRACE")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().unwrap();
        let mut i = child.stdin.take().unwrap();
        let data = stdin.to_vec();
        let w = std::thread::spawn(move || {
            let _ = i.write_all(&data);
        });
        let out = child.wait_with_output().unwrap();
        w.join().unwrap();
        Run {
            code: out.status.code().unwrap_or(-1),
            out: out.stdout,
            err: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        let r = self.run(args, b"");
        assert_eq!(r.code, 0, "{args:?}: {}{}", r.out(), r.err);
        r.out()
    }
}

/// Bytes that are not text: every byte value, newlines and tabs among them.
fn binary(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 256) as u8).collect()
}

#[test]
fn exit_codes_and_hints_name_the_mistake() {
    let u = up();
    u.ok(&["table", "create", "t", "--split", "m"]);
    u.ok(&["put", "t", "k", "v"]);
    assert_eq!(u.run(&["get", "t", "k"], b"").code, 0, "found");
    let r = u.run(&["get", "t", "absent"], b"");
    assert_eq!(r.code, 1, "absent key: {}", r.err);
    assert!(r.err.contains("not found: absent"), "{}", r.err);
    assert_eq!(u.run(&["head", "t", "absent"], b"").code, 1);
    // Many keys: a row per key in the order given (keys from arguments,
    // then from standard input), exit 1 when any is absent.
    u.ok(&["put", "t", "z", "last"]);
    let r = u.run(
        &["get", "t", "z", "absent", "--keys-from", "-", "-o", "tsv"],
        b"k\n",
    );
    assert_eq!(r.code, 1, "an absent key among many: {}", r.err);
    assert_eq!(
        r.out(),
        "key\tfound\tvalue\nz\tyes\tlast\nabsent\tno\t\nk\tyes\tv\n",
        "{}",
        r.err
    );
    assert_eq!(u.run(&["get", "t", "k", "z", "-o", "json"], b"").code, 0);
    let r = u.run(&["get", "t", "k", "z", "--consistency", "eventual"], b"");
    assert_eq!(r.code, 2, "many keys are read immediate: {}", r.err);
    let r = u.run(&["get", "t"], b"");
    assert_eq!(r.code, 2, "usage: {}", r.err);
    let r = u.run(&["scan", "t", "--busy-timeout-ms", "5"], b"");
    assert_eq!(r.code, 2, "usage (ours): {}", r.err);
    let r = u.run(&["get", "nosuchtable", "k"], b"");
    assert_eq!(r.code, 5, "missing table: {}", r.err);
    assert!(r.err.contains("hint: `tablinum table list`"), "{}", r.err);
    let r = u.run(&["table", "create", "t"], b"");
    assert_eq!(r.code, 5, "table exists: {}", r.err);
    // Nothing listens: exit 3 and ask whether `tablinum up` runs.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().to_string()
    };
    let r = u.run_env(&["status"], b"", &[("TABLINUM_CLUSTER", &closed)]);
    assert_eq!(r.code, 3, "{}", r.err);
    assert!(r.err.contains("is `tablinum up` running?"), "{}", r.err);
    // The HTTP port instead of the gRPC one: exit 3 and say so.
    let r = u.run_env(&["status"], b"", &[("TABLINUM_CLUSTER", &u.http)]);
    assert_eq!(r.code, 3, "{}", r.err);
    assert!(r.err.contains("HTTP (status page) port"), "{}", r.err);
    // A token the cluster never issued: exit 4.
    let forged = format!("tbt1.{}.{}", "0".repeat(12), "a".repeat(64));
    let r = u.run_env(
        &["status"],
        b"",
        &[("TABLINUM_CLUSTER", &u.grpc), ("TABLINUM_TOKEN", &forged)],
    );
    assert_eq!(r.code, 4, "{}", r.err);
    // A user error is not a crash: no backtrace even when asked for one.
    let r = u.run_env(
        &["get", "nosuchtable", "k"],
        b"",
        &[("TABLINUM_CLUSTER", &u.grpc), ("RUST_BACKTRACE", "1")],
    );
    assert_eq!(r.code, 5);
    assert!(
        !r.err.contains("backtrace") && r.err.lines().count() <= 3,
        "{}",
        r.err
    );
    // An error that cannot be printed (standard error on a full disk)
    // still ends with its own exit code, not a panic's 101.
    let full = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .unwrap();
    let code = Command::new(BIN)
        .args(["get", "nosuchtable", "k"])
        .current_dir(u.dir.path())
        .env("XDG_CONFIG_HOME", &u.home)
        .env("TABLINUM_CLUSTER", &u.grpc)
        .env_remove("TABLINUM_TOKEN")
        .env_remove("TABLINUM_CONFIG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(full)
        .status()
        .unwrap()
        .code();
    assert_eq!(code, Some(5), "the error's exit code on a full stderr");
    // Plaintext beyond loopback is refused unless asked for, and nothing
    // is created.
    let out = Command::new(BIN)
        .args(["up", "--data", "exposed", "--listen", "0.0.0.0:0"])
        .current_dir(u.dir.path())
        .env("XDG_CONFIG_HOME", &u.home)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("0.0.0.0:0") && err.contains("--tls") && err.contains("--insecure"),
        "{err}"
    );
    assert!(!u.dir.path().join("exposed").exists());
}

#[test]
fn values_round_trip_through_put_and_get() {
    let u = up();
    u.ok(&["table", "create", "v", "--split", "m"]);
    // 400 KB of binary from standard input (too long for an argument).
    let big = binary(400 * 1024);
    let r = u.run(&["put", "v", "big"], &big);
    assert_eq!(r.code, 0, "{}", r.err);
    let r = u.run(&["get", "v", "big"], b"");
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(
        r.out == big,
        "get writes the bytes exactly ({} bytes back)",
        r.out.len()
    );
    // From a file, to a file.
    let f = u.dir.path().join("in.bin");
    let small = binary(1000);
    std::fs::write(&f, &small).unwrap();
    u.ok(&["put", "v", "file", "--file", f.to_str().unwrap()]);
    let back = u.dir.path().join("out.bin");
    u.ok(&["get", "v", "file", "--file", back.to_str().unwrap()]);
    assert_eq!(std::fs::read(&back).unwrap(), small);
    // Text with a newline and a tab comes back as written.
    u.ok(&["put", "v", "text", "a\tb\nc"]);
    assert_eq!(u.run(&["get", "v", "text"], b"").out, b"a\tb\nc");
    // Metadata and index terms from the CLI; the index is scannable.
    u.ok(&[
        "put",
        "v",
        "obj",
        "x",
        "--meta",
        "m1",
        "--index",
        "color=red",
        "--index",
        "size=L",
    ]);
    let h = u.ok(&["head", "v", "obj", "-o", "json"]);
    let h: serde_json::Value = serde_json::from_str(h.trim()).unwrap();
    assert_eq!(h["meta"], "m1");
    assert_eq!(h["index"][0]["name"], "color");
    assert_eq!(u.ok(&["scan", "v", "--index", "color"]), "red\tobj\n");
    let r = u.run(&["scan", "v", "--index", "colour"], b"");
    assert_eq!(r.code, 0);
    assert!(r.err.contains("no rows: index `colour`"), "{}", r.err);
    // A bad term is refused before anything is sent.
    let r = u.run(&["put", "v", "bad", "x", "--index", "noequals"], b"");
    assert_eq!(r.code, 2, "{}", r.err);
    assert_eq!(u.run(&["get", "v", "bad"], b"").code, 1, "nothing written");
    // Listings in every format.
    let j = u.ok(&["scan", "v", "-o", "json", "--prefix", "t"]);
    assert_eq!(j, "{\"key\":\"text\",\"value\":\"a\\tb\\nc\"}\n");
    let t = u.ok(&["scan", "v", "-o", "tsv", "--prefix", "t"]);
    assert_eq!(t, "key\tvalue\ntext\ta\\tb\\nc\n");
    let c = u.ok(&["scan", "v", "-o", "csv", "--prefix", "t"]);
    assert_eq!(c, "key,value\ntext,\"a\tb\nc\"\n");
    let c = u.ok(&["table", "list", "-o", "csv"]);
    assert!(c.starts_with("name,id,tablets,durability\nv,"), "{c}");
    let s = u.ok(&["status", "-o", "json"]);
    assert!(s.lines().any(|l| l.contains("\"role\":\"tserver\"")), "{s}");
}

#[test]
fn import_and_export_round_trip_exactly() {
    let u = up();
    let dir = u.dir.path();
    // Keys like `ev00042`: a sample spreads them over all four tablets.
    let sample: String = (0..400).map(|i| format!("ev{:05}\n", i * 5)).collect();
    std::fs::write(dir.join("sample.txt"), sample).unwrap();
    let out = u.ok(&[
        "table",
        "create",
        "ev",
        "--tablets",
        "4",
        "--split-sample",
        dir.join("sample.txt").to_str().unwrap(),
    ]);
    assert!(out.contains("with 4 tablets"), "{out}");
    // JSON lines with binary keys and values, metadata and index terms.
    let mut lines = String::new();
    let mut want = Vec::new();
    for i in 0..2000u32 {
        let mut key = format!("ev{i:05}").into_bytes();
        if i % 100 == 0 {
            key.push(0xff);
        }
        let value = if i == 7 {
            binary(400 * 1024)
        } else {
            binary(50 + i as usize % 300)
        };
        let mut o = serde_json::Map::new();
        put(&mut o, "key", &key);
        put(&mut o, "value", &value);
        o.insert("meta".into(), format!("m{i}").into());
        o.insert(
            "index".into(),
            serde_json::json!([{"name": "bucket", "term": format!("b{}", i % 7)}]),
        );
        lines.push_str(&serde_json::Value::Object(o).to_string());
        lines.push('\n');
        want.push((key, value));
    }
    want.sort();
    std::fs::write(dir.join("in.jsonl"), &lines).unwrap();
    let r = u.run(&["import", "ev", "in.jsonl", "--batch-rows", "64"], b"");
    assert_eq!(r.code, 0, "{}", r.err);
    assert!(r.err.contains("imported 2000 objects"), "{}", r.err);
    // Every tablet got a share (the sample's splits fit these keys).
    let map = u.ok(&["table", "map", "ev", "-o", "json"]);
    assert_eq!(map.lines().count(), 4, "{map}");
    let per_tablet: Vec<usize> = (0..4)
        .map(|t| {
            let s = u.ok(&[
                "scan",
                "ev",
                "--count",
                "--start",
                &split_start(&map, t),
                "--end",
                &split_end(&map, t),
            ]);
            s.trim().parse().unwrap()
        })
        .collect();
    assert!(per_tablet.iter().all(|&n| n >= 300), "{per_tablet:?}");
    // Export (with metadata) and compare byte for byte.
    let r = u.run(&["export", "ev", "--with-meta"], b"");
    assert_eq!(r.code, 0, "{}", r.err);
    let got: Vec<(Vec<u8>, Vec<u8>)> = parse_jsonl(&r.out);
    assert_eq!(got.len(), want.len());
    assert!(got == want, "export returns what import wrote");
    let first: serde_json::Value = serde_json::from_str(r.out().lines().next().unwrap()).unwrap();
    assert_eq!(first["meta"], "m0");
    assert_eq!(first["index"][0]["term"], "b0");
    // Into a second table and out again as CSV: the same bytes.
    std::fs::write(dir.join("out.jsonl"), &r.out).unwrap();
    u.ok(&["table", "create", "ev2", "--split", "ev01000"]);
    let r = u.run(&["import", "ev2", "-"], &r.out);
    assert_eq!(r.code, 0, "{}", r.err);
    let csv_path = dir.join("ev2.csv");
    u.ok(&[
        "export",
        "ev2",
        "--format",
        "csv",
        "--file",
        csv_path.to_str().unwrap(),
    ]);
    u.ok(&["table", "create", "ev3"]);
    let r = u.run(&["import", "ev3", csv_path.to_str().unwrap()], b"");
    assert_eq!(r.code, 0, "{}", r.err);
    let r = u.run(&["export", "ev3"], b"");
    assert!(parse_jsonl(&r.out) == want, "CSV round trip");
    // A bad line names itself and nothing is written.
    let bad = format!(
        "{}{{\"key\":\"zz\",\"vlue\":\"1\"}}\n",
        &lines[..lines.find('\n').unwrap() + 1]
    );
    std::fs::write(dir.join("bad.jsonl"), bad).unwrap();
    u.ok(&["table", "create", "empty"]);
    let r = u.run(&["import", "empty", "bad.jsonl"], b"");
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(
        r.err.contains("line 2")
            && r.err.contains("`vlue`")
            && r.err.contains("nothing was written"),
        "{}",
        r.err
    );
    assert_eq!(u.ok(&["scan", "empty", "--count"]).trim(), "0");
}

fn put(o: &mut serde_json::Map<String, serde_json::Value>, name: &str, b: &[u8]) {
    use base64::Engine as _;
    match std::str::from_utf8(b) {
        Ok(s) => o.insert(name.into(), s.into()),
        Err(_) => o.insert(
            format!("{name}_b64"),
            base64::engine::general_purpose::STANDARD.encode(b).into(),
        ),
    };
}

fn field(o: &serde_json::Value, name: &str) -> Vec<u8> {
    use base64::Engine as _;
    match (o.get(name), o.get(format!("{name}_b64"))) {
        (Some(s), None) => s.as_str().unwrap().as_bytes().to_vec(),
        (None, Some(b)) => base64::engine::general_purpose::STANDARD
            .decode(b.as_str().unwrap())
            .unwrap(),
        _ => panic!("{o}"),
    }
}

fn parse_jsonl(b: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    String::from_utf8_lossy(b)
        .lines()
        .map(|l| {
            let o: serde_json::Value = serde_json::from_str(l).unwrap();
            (field(&o, "key"), field(&o, "value"))
        })
        .collect()
}

fn split_start(map: &str, t: usize) -> String {
    let o: serde_json::Value = serde_json::from_str(map.lines().nth(t).unwrap()).unwrap();
    o["start"].as_str().unwrap().to_string()
}

fn split_end(map: &str, t: usize) -> String {
    let o: serde_json::Value = serde_json::from_str(map.lines().nth(t).unwrap()).unwrap();
    o["end"].as_str().unwrap().to_string()
}

#[test]
fn the_default_cluster_comes_from_the_environment_or_the_config_file() {
    let u = up();
    // No flag, no variable, no file: the built-in default, which is not
    // this cluster (it runs on a free port).
    let r = u.run_env(&["table", "list"], b"", &[]);
    if r.code == 0 {
        // Something else answers on the default port; nothing to learn here.
        eprintln!("a cluster runs on the default address; skipping that check");
    } else {
        assert_eq!(r.code, 3, "{}", r.err);
    }
    // The config file beside the credentials file.
    let cfg = u.home.join("tablinum").join("config.toml");
    std::fs::write(&cfg, format!("cluster = \"{}\"\n", u.grpc)).unwrap();
    let r = u.run_env(&["table", "list"], b"", &[]);
    assert_eq!(r.code, 0, "{}", r.err);
    // The variable wins over the file; the flag over both.
    let r = u.run_env(
        &["table", "list"],
        b"",
        &[("TABLINUM_CLUSTER", "127.0.0.1:1")],
    );
    assert_eq!(r.code, 3, "{}", r.err);
    let r = u.run_env(
        &["table", "list", "--cluster", &u.grpc],
        b"",
        &[("TABLINUM_CLUSTER", "127.0.0.1:1")],
    );
    assert_eq!(r.code, 0, "{}", r.err);
    // A typo in the file is named.
    std::fs::write(&cfg, "clustr = \"x\"\n").unwrap();
    let r = u.run_env(&["table", "list"], b"", &[]);
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(
        r.err.contains("clustr") && r.err.contains("config.toml"),
        "{}",
        r.err
    );
}

#[test]
fn drop_asks_first_and_completion_scripts_are_printed() {
    let u = up();
    u.ok(&["table", "create", "keep"]);
    u.ok(&["put", "keep", "k", "v"]);
    // Not a terminal and no --yes: refused, data intact.
    let r = u.run(&["table", "drop", "keep"], b"keep\n");
    assert_eq!(r.code, 2, "{}", r.err);
    assert!(r.err.contains("--yes"), "{}", r.err);
    assert_eq!(u.ok(&["get", "keep", "k"]), "v");
    let out = u.ok(&["table", "drop", "keep", "--yes"]);
    assert!(out.contains("dropped table keep"), "{out}");
    assert_eq!(u.run(&["get", "keep", "k"], b"").code, 5);
    for sh in ["bash", "zsh", "fish"] {
        let s = u.ok(&["completion", sh]);
        assert!(s.contains("tablinum") && s.contains("import"), "{sh}: {s}");
    }
}

/// A child on a pseudo-terminal, and everything it has printed.
struct Pty {
    child: std::process::Child,
    master: std::fs::File,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn spawn(u: &Up, args: &[&str]) -> Pty {
        let ws = nix::pty::Winsize {
            ws_row: 40,
            ws_col: 200,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let p = nix::pty::openpty(&ws, None).unwrap();
        let slave = std::fs::File::from(p.slave);
        let child = Command::new(BIN)
            .args(args)
            .env("XDG_CONFIG_HOME", &u.home)
            .env("TERM", "xterm")
            .env_remove("TABLINUM_CLUSTER")
            .stdin(slave.try_clone().unwrap())
            .stdout(slave.try_clone().unwrap())
            .stderr(slave)
            .spawn()
            .unwrap();
        let master = std::fs::File::from(p.master);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (mut r, mut w, s) = (
            master.try_clone().unwrap(),
            master.try_clone().unwrap(),
            seen.clone(),
        );
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = r.read(&mut buf) {
                if n == 0 {
                    break;
                }
                // Answer cursor-position queries as a terminal would.
                if buf[..n].windows(4).any(|x| x == b"\x1b[6n") {
                    let _ = w.write_all(b"\x1b[1;1R");
                }
                s.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            child,
            master,
            seen,
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().unwrap()).into_owned()
    }

    /// Waits until the output holds `needle` `n` times.
    fn wait_for(&self, needle: &str, n: usize) {
        let t0 = Instant::now();
        while self.text().matches(needle).count() < n {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "waited for {n}× {needle:?}; the terminal shows:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn send(&mut self, s: &str) {
        self.master.write_all(s.as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(100));
    }

    fn finish(mut self) -> String {
        let t0 = Instant::now();
        loop {
            if self.child.try_wait().unwrap().is_some() {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the shell did not exit:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.text()
    }
}

#[test]
fn the_cluster_shell_completes_and_remembers() {
    let u = up();
    u.ok(&["table", "create", "events"]);
    let mut p = Pty::spawn(&u, &["shell", "--cluster", &u.grpc]);
    let prompt = format!("tablinum {}> ", u.grpc);
    p.wait_for(&prompt, 1);
    // Tab completes the table name (`ev` -> `events`).
    p.send("put ev\t");
    p.send(" k1 'v 1'\r");
    p.wait_for("ok seq=1", 1);
    p.send("get events k1\r");
    p.wait_for("v 1\r\n", 1);
    p.send("sta\t\r");
    p.wait_for("live tablet servers: 1", 1);
    // Up arrow three times: the put again (a new sequence number).
    p.send("\x1b[A\x1b[A\x1b[A\r");
    p.wait_for("ok seq=2", 1);
    // Mistakes are printed and the shell goes on.
    p.send("get nosuch k\r");
    p.wait_for("hint: `tablinum table list`", 1);
    p.send("quit\r");
    p.finish();
    let history = std::fs::read_to_string(u.home.join("tablinum").join("history")).unwrap();
    assert!(history.contains("get events k1"), "{history}");
    assert!(history.contains("put events k1 'v 1'"), "{history}");
    // A new shell remembers: the last command was `get nosuch k`, the one
    // before it the put.
    let mut p = Pty::spawn(&u, &["shell", "--cluster", &u.grpc]);
    p.wait_for(&prompt, 1);
    p.send("\x1b[A\x1b[A\r");
    p.wait_for("ok seq=3", 1);
    p.send("\x04");
    p.finish();
}
