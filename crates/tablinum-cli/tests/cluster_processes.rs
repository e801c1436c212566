//! A real multi-process cluster on loopback: `tablinum manager` and three
//! `tablinum tserver` processes started from config files. A writer keeps
//! writing (Sync durability) while the tablet server holding the most
//! tablets is killed with SIGKILL; its tablets are reassigned, recovered
//! from their journals under the shared storage root, and every
//! acknowledged write is readable afterwards. Also drives the CLI commands
//! (`table create`, `put`, `get`, `scan`, `status`) against that cluster.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tablinum_client::{Credential, Durability, Query, Split};

mod common;

use common::{
    client_as, metrics_page, spawn_role, spawn_up, start_processes, up_admin, wait_until, Procs,
    BIN,
};

/// Runs the CLI with `home` as its XDG_CONFIG_HOME (where the credentials
/// file lives) and no TABLINUM_TOKEN.
fn cli(home: &Path, addr: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(BIN)
        .args(args)
        .args(["--cluster", addr])
        .env("XDG_CONFIG_HOME", home)
        .env_remove("TABLINUM_TOKEN")
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn killing_a_tablet_server_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("cluster.secret");
    let home = dir.path().join("home");
    let (mut procs, maddr, tservers) = start_processes(dir.path(), 1500, 3);
    // The manager's first start wrote the cluster secret and a bootstrap
    // admin token, both readable by their owner only.
    let token_file = dir.path().join("manager").join("admin.token");
    for f in [&secret, &token_file] {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", f.display());
    }
    let admin = tablinum_auth::files::load_token_file(&token_file).unwrap();
    let client = client_as(&maddr, &admin);
    wait_until("3 live tablet servers", Duration::from_secs(20), || {
        client.status().unwrap().servers.len() == 3
    });

    // The CLI against this cluster: nothing without a token.
    let (ok, _, err) = cli(&home, &maddr, &["status"]);
    assert!(
        !ok && err.contains("no credentials") && err.contains("hint"),
        "{err}"
    );
    let tf = token_file.to_str().unwrap();
    let admin_cli = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--token-file", tf]);
        cli(&home, &maddr, &a)
    };
    let (ok, out, err) = admin_cli(&["table", "create", "clitab", "--tablets", "3"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("with 3 tablets"), "{out}");
    let (ok, _, err) = admin_cli(&["put", "clitab", "hello", "world"]);
    assert!(ok, "{err}");
    let (ok, out, _) = admin_cli(&["get", "clitab", "hello"]);
    assert!(ok && out.trim() == "world", "{out}");
    let (ok, _, err) = admin_cli(&["get", "clitab", "absent"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, out, err) = admin_cli(&["head", "clitab", "hello"]);
    assert!(
        ok && out.contains("value_len=5") && out.contains("seq="),
        "{out}{err}"
    );
    let (ok, _, err) = admin_cli(&["head", "clitab", "absent"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, out, err) = admin_cli(&["flush", "clitab"]);
    assert!(
        ok && out.contains("flushed 3 tablets of clitab"),
        "{out}{err}"
    );
    let (ok, _, err) = admin_cli(&["put", "clitab", "gone", "soon"]);
    assert!(ok, "{err}");
    let (ok, out, err) = admin_cli(&["delete", "clitab", "gone"]);
    assert!(ok && out.starts_with("ok seq="), "{out}{err}");
    let (ok, _, err) = admin_cli(&["get", "clitab", "gone"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, _, err) = admin_cli(&["flush", "nosuchtable"]);
    assert!(!ok && err.contains("not found"), "{err}");
    let (ok, out, _) = admin_cli(&["scan", "clitab", "--stream-limit", "2"]);
    assert!(ok && out.trim() == "hello\tworld", "{out}");
    let (ok, _, err) = admin_cli(&["scan", "clitab", "--stream-limit", "0"]);
    assert!(!ok && err.contains("stream limit"), "{err}");
    let (ok, out, _) = admin_cli(&["status"]);
    assert!(ok && out.contains("live tablet servers: 3"), "{out}");
    // A read token made with the CLI reads but cannot write; revoked, it
    // cannot read either.
    let (ok, token, err) = admin_cli(&["token", "create", "--role", "read", "--name", "ro"]);
    assert!(ok && err.contains("created read token"), "{err}");
    let token = token.trim().to_string();
    let as_reader = |args: &[&str]| {
        let out = Command::new(BIN)
            .args(args)
            .args(["--cluster", &maddr])
            .env("XDG_CONFIG_HOME", &home)
            .env("TABLINUM_TOKEN", &token)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, out, _) = as_reader(&["get", "clitab", "hello"]);
    assert!(ok && out.trim() == "world", "{out}");
    let (ok, _, err) = as_reader(&["put", "clitab", "hello", "evil"]);
    assert!(!ok && err.contains("permission denied"), "{err}");
    let (ok, _, err) = as_reader(&["delete", "clitab", "hello"]);
    assert!(!ok && err.contains("permission denied"), "{err}");
    let (ok, _, err) = as_reader(&["table", "drop", "clitab", "--yes"]);
    assert!(!ok && err.contains("admin token"), "{err}");
    let (ok, out, _) = admin_cli(&["token", "list"]);
    let id = Credential::parse(&token)
        .unwrap()
        .token_id()
        .unwrap()
        .to_string();
    assert!(ok && out.contains(&id) && out.contains("read\tro"), "{out}");
    assert!(!out.contains(&token), "token list printed a secret: {out}");
    let (ok, _, err) = admin_cli(&["token", "revoke", &id]);
    assert!(ok, "{err}");
    let (ok, _, err) = as_reader(&["get", "clitab", "hello"]);
    assert!(!ok && err.contains("unknown or revoked"), "{err}");
    // Output into a closed pipe ends quietly, without a panic.
    let mut st = Command::new(BIN)
        .args(["status", "--cluster", &maddr, "--token-file", tf])
        .env("XDG_CONFIG_HOME", &home)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(st.stdout.take());
    let o = st.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success() && !e.contains("panicked"), "{e}");

    // 12 tablets over keys k000..k999, spread over the three servers.
    let splits: Vec<Vec<u8>> = (1..12)
        .map(|i| format!("k{:03}", i * 84).into_bytes())
        .collect();
    client
        .create_table("kill", Split::Points(splits), Durability::Sync)
        .unwrap();
    let acked: Arc<Mutex<BTreeMap<Vec<u8>, Vec<u8>>>> = Arc::default();
    let failed: Arc<Mutex<Vec<Vec<u8>>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (acked, failed, stop, maddr, admin) = (
                acked.clone(),
                failed.clone(),
                stop.clone(),
                maddr.clone(),
                admin.clone(),
            );
            std::thread::spawn(move || {
                let c = client_as(&maddr, &admin);
                let mut i = w;
                while !stop.load(Ordering::Relaxed) && i < 2_000 {
                    let key = format!("k{:03}-{i:05}", (i * 37) % 1000).into_bytes();
                    let value = format!("value-{i}").into_bytes();
                    match c.put("kill", &key, &value) {
                        Ok(_) => {
                            acked.lock().unwrap().insert(key, value);
                        }
                        Err(_) => failed.lock().unwrap().push(key),
                    }
                    i += 2;
                }
            })
        })
        .collect();
    wait_until("300 acknowledged writes", Duration::from_secs(60), || {
        acked.lock().unwrap().len() >= 300
    });
    // Kill the server holding the most tablets, mid-write.
    let loc = client.locations("kill", true).unwrap();
    let mut count: HashMap<&str, usize> = HashMap::new();
    for t in &loc.tablets {
        *count.entry(t.server.as_str()).or_default() += 1;
    }
    let (victim, n) = count.into_iter().max_by_key(|(_, n)| *n).unwrap();
    let victim = victim.to_string();
    assert!(n >= 1 && !victim.is_empty());
    let idx = tservers[&victim];
    procs.0[idx].kill().unwrap(); // SIGKILL
    procs.0[idx].wait().unwrap();
    let acked_at_kill = acked.lock().unwrap().len();
    wait_until("writes after the kill", Duration::from_secs(60), || {
        acked.lock().unwrap().len() >= acked_at_kill + 200
    });
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }

    // Reassigned: two live servers, nothing unassigned, nothing on the victim.
    wait_until(
        "the dead server to be dropped",
        Duration::from_secs(20),
        || {
            let s = client.status().unwrap();
            s.servers.len() == 2 && s.tablets_unassigned == 0
        },
    );
    let loc = client.locations("kill", true).unwrap();
    assert!(loc
        .tablets
        .iter()
        .all(|t| !t.server.is_empty() && t.server != victim));

    // Every acknowledged write is readable, by get and by scan.
    let acked = acked.lock().unwrap().clone();
    for (k, v) in &acked {
        assert_eq!(
            client.get("kill", k).unwrap().as_ref(),
            Some(v),
            "key {:?}",
            String::from_utf8_lossy(k)
        );
    }
    let (rows, _) = client.query_vec(&Query::new("kill")).unwrap();
    let failed = failed.lock().unwrap().clone();
    for r in &rows {
        assert!(
            acked.get(&r.key) == Some(&r.value) || failed.contains(&r.key),
            "unexpected row {:?}",
            String::from_utf8_lossy(&r.key)
        );
    }
    assert!(rows.len() >= acked.len());
    eprintln!(
        "acked {} writes ({} before the kill), {} failed, victim held {n} tablets",
        acked.len(),
        acked_at_kill,
        failed.len()
    );
}

#[test]
fn up_runs_an_embedded_cluster_that_keeps_its_data_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let home = dir.path().join("home");
    let (child, addr, http) = spawn_up(&data, &home);
    let mut procs = Procs(vec![child]);
    // `up` saved an admin token for its address in the credentials file
    // (mode 0600): the CLI needs no flags.
    let creds = home.join("tablinum").join("credentials");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&creds).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let admin = up_admin(&home, &addr);
    let (ok, out, err) = cli(&home, &addr, &["table", "create", "demo", "--tablets", "4"]);
    assert!(ok, "{out}{err}");
    for (k, v) in [("b", "2"), ("a", "1"), ("zz", "3")] {
        let (ok, _, err) = cli(&home, &addr, &["put", "demo", k, v]);
        assert!(ok, "{err}");
    }
    let (ok, out, _) = cli(&home, &addr, &["scan", "demo", "--keys-only"]);
    assert!(ok && out == "a\nb\nzz\n", "{out}");
    // `up` runs a scan server: once flushed, eventual scans see the rows.
    let (ok, out, err) = cli(&home, &addr, &["flush", "demo"]);
    assert!(ok, "{out}{err}");
    let (ok, out, err) = cli(
        &home,
        &addr,
        &[
            "scan",
            "demo",
            "--keys-only",
            "--consistency",
            "eventual",
            "--stats",
        ],
    );
    assert!(ok && out == "a\nb\nzz\n", "{out}{err}");
    assert!(err.contains("served by plan"), "{err}");
    let (ok, out, err) = cli(&home, &addr, &["status"]);
    assert!(ok && out.contains("live scan servers: 1"), "{out}{err}");
    let (ok, _, err) = cli(
        &home,
        &addr,
        &[
            "scan",
            "demo",
            "--consistency",
            "eventual",
            "--profile",
            "nope",
        ],
    );
    assert!(!ok && err.contains("nope"), "{err}");
    // The status page and metrics of the embedded cluster.
    let page = metrics_page(&http, &admin);
    assert!(
        page.contains("tablinum_tserver_rows_written_total 3"),
        "{page}"
    );

    // A reader that goes away (`| head -1`) stops the scan: the cluster
    // does not read the rest of a large table.
    let c = client_as(&addr, &admin);
    c.create_table("large", Split::Even(4), Durability::Nosync)
        .unwrap();
    let muts: Vec<tablinum_client::Mutation> = (0..40_000u32)
        .map(|i| tablinum_client::Mutation {
            key: format!("r{i:06}").into_bytes(),
            value: vec![b'v'; 100],
            ..Default::default()
        })
        .collect();
    c.write_routed("large", muts).unwrap();
    let rows_read = || {
        metrics_page(&http, &admin)
            .lines()
            .find_map(|l| l.strip_prefix("tablinum_tserver_rows_read_total "))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap()
    };
    let before = rows_read();
    let mut scan = Command::new(BIN)
        .args(["scan", "large", "--stream-limit", "1", "--cluster", &addr])
        .env("XDG_CONFIG_HOME", &home)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(scan.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap(); // the reader is dropped here: the pipe closes
    assert_eq!(first.split('\t').next(), Some("r000000"));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = scan.try_wait().unwrap() {
            break st;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "scan kept running after its reader left"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    let read = rows_read() - before;
    assert!(
        read < 20_000.0,
        "the cluster read {read} rows of 40,000 for one printed row"
    );

    // SIGTERM closes the tablets cleanly; a restart serves the same data.
    let pid = procs.0[0].id();
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let status = procs.0[0].wait().unwrap();
    assert!(status.success(), "tablinum up exited with {status}");
    let (child, addr, _) = spawn_up(&data, &home);
    procs.0[0] = child;
    let (ok, out, err) = cli(&home, &addr, &["status"]);
    assert!(ok && out.contains("tables: 2"), "{out}{err}");
    let client = client_as(&addr, &admin);
    let mut q = Query::new("demo");
    q.keys_only = true;
    let t0 = Instant::now();
    let rows = loop {
        match client.query_vec(&q) {
            Ok((rows, _)) => break rows,
            Err(e) => assert!(t0.elapsed() < Duration::from_secs(30), "{e}"),
        }
    };
    let keys: Vec<&[u8]> = rows.iter().map(|r| r.key.as_slice()).collect();
    assert_eq!(keys, vec![&b"a"[..], b"b", b"zz"]);
    assert_eq!(client.get("demo", b"zz").unwrap(), Some(b"3".to_vec()));
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(pid: u32, sig: &str) {
    assert!(Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success());
}

/// Waits until every thread of process `pid` is stopped. `kill -STOP`
/// returns once the signal is queued; on a loaded machine the process's
/// threads can run (and answer requests) for a while after that.
fn wait_stopped(pid: u32) {
    let stopped = || {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            return false;
        };
        tasks.filter_map(Result::ok).all(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .ok()
                .and_then(|s| {
                    // "tid (comm) STATE ...": comm may hold spaces and ')'.
                    let after = &s[s.rfind(')')? + 1..];
                    after
                        .split_whitespace()
                        .next()
                        .map(|st| st == "T" || st == "t")
                })
                .unwrap_or(false)
        })
    };
    wait_until(
        "the paused process to stop",
        Duration::from_secs(10),
        stopped,
    );
}

#[test]
fn a_paused_tablet_server_is_fenced_and_its_tablets_served_elsewhere() {
    const TIMEOUT_MS: u64 = 1500;
    let dir = tempfile::tempdir().unwrap();
    let (procs, maddr, by_addr) = start_processes(dir.path(), TIMEOUT_MS, 2);
    let admin =
        tablinum_auth::files::load_token_file(&dir.path().join("manager").join("admin.token"))
            .unwrap();
    let client = client_as(&maddr, &admin);
    wait_until("2 live tablet servers", Duration::from_secs(20), || {
        client.status().unwrap().servers.len() == 2
    });
    let splits: Vec<Vec<u8>> = ["b", "c", "d"]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect();
    client
        .create_table("p", Split::Points(splits), Durability::Sync)
        .unwrap();
    for k in ["a1", "b1", "c1", "d1"] {
        client.put("p", k.as_bytes(), b"before").unwrap();
    }
    let loc = client.locations("p", true).unwrap();
    let victim = loc.tablets[0].server.clone();
    let victim_keys: Vec<&str> = ["a", "b", "c", "d"]
        .into_iter()
        .zip(&loc.tablets)
        .filter(|(_, t)| t.server == victim)
        .map(|(k, _)| k)
        .collect();
    let pid = procs.0[by_addr[&victim]].id();

    // Pause the owner; a writer keeps writing to one of its tablets.
    signal(pid, "-STOP");
    wait_stopped(pid);
    let paused = Instant::now();
    let key = format!("{}-during", victim_keys[0]);
    let w = Instant::now();
    // A write in flight to the paused server ends "outcome unknown" (or
    // unavailable); the next ones go to the new owner.
    let gap = loop {
        match client.put("p", key.as_bytes(), b"during") {
            Ok(_) => break w.elapsed(),
            Err(e) => {
                eprintln!("write during the pause: {e}");
                assert!(w.elapsed() < Duration::from_secs(30), "{e}");
            }
        }
    };
    eprintln!(
        "tablet of a SIGSTOPped server writable again after {} ms (heartbeat timeout {TIMEOUT_MS} ms)",
        gap.as_millis()
    );
    assert!(
        gap < Duration::from_millis(TIMEOUT_MS + 3_000),
        "unavailable for {gap:?}"
    );
    // Another write after the takeover, then resume the old owner.
    client.put("p", key.as_bytes(), b"after").unwrap();
    std::thread::sleep(Duration::from_millis(TIMEOUT_MS).saturating_sub(paused.elapsed()));
    signal(pid, "-CONT");

    // The resumed server must not answer from its stale copy: asked
    // directly for the moved tablet, it refuses ("not serving"); it never
    // returns "during" or nothing.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let stale = rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{victim}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut c = tablinum_proto::v1::tablet_server_client::TabletServerClient::with_interceptor(
            ch,
            tablinum_auth::Bearer::new(Some(&admin), &victim),
        );
        c.get(tablinum_proto::v1::GetRequest {
            table: "p".into(),
            key: key.clone().into_bytes(),
            table_id: 0,
            tablet_id: 0,
            busy_timeout_ms: 0,
            ..Default::default()
        })
        .await
    });
    match stale {
        // Only if it has been given the tablet back (a new epoch, replayed).
        Ok(r) => assert_eq!(r.into_inner().value, b"after", "a stale answer"),
        Err(s) => assert!(
            matches!(
                s.code(),
                tonic::Code::FailedPrecondition | tonic::Code::Unavailable
            ),
            "{s:?}"
        ),
    }
    // Nothing lost, the newest value wins, everywhere.
    assert_eq!(
        client.get("p", key.as_bytes()).unwrap(),
        Some(b"after".to_vec())
    );
    for k in ["a1", "b1", "c1", "d1"] {
        assert_eq!(
            client.get("p", k.as_bytes()).unwrap(),
            Some(b"before".to_vec())
        );
    }
    // The resumed server rejoins and may get tablets back; the data stays.
    wait_until(
        "the resumed server to rejoin",
        Duration::from_secs(20),
        || client.status().unwrap().servers.len() == 2,
    );
    let (rows, _) = client.query_vec(&Query::new("p")).unwrap();
    assert_eq!(rows.len(), 5);
}

#[test]
fn the_cli_speaks_tls_to_a_tls_cluster() {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(d.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(d.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(d.join("key.pem"), key.serialize_pem()).unwrap();
    let tls = format!(
        "tls_cert = {:?}\ntls_key = {:?}\n",
        d.join("cert.pem"),
        d.join("key.pem")
    );
    let secret = d.join("cluster.secret");
    let storage = d.join("storage");
    std::fs::write(
        d.join("m.toml"),
        format!(
            "[manager]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\ndata = {:?}\nstorage = {storage:?}\ncluster_secret_file = {secret:?}\n{tls}",
            d.join("manager")
        ),
    )
    .unwrap();
    let mut procs = Procs(Vec::new());
    let (m, maddr) = spawn_role("manager", &d.join("m.toml"));
    procs.0.push(m);
    std::fs::write(
        d.join("t.toml"),
        format!(
            "[tserver]\nlisten = \"127.0.0.1:0\"\nhttp = \"127.0.0.1:0\"\nmanager = \"{maddr}\"\nstorage = {storage:?}\ncluster_secret_file = {secret:?}\ntls_ca = {:?}\n{tls}",
            d.join("ca.pem")
        ),
    )
    .unwrap();
    let (t, _) = spawn_role("tserver", &d.join("t.toml"));
    procs.0.push(t);
    let home = d.join("home");
    let tf = d.join("manager").join("admin.token");
    let ca = d.join("ca.pem");
    let with_ca = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend([
            "--token-file",
            tf.to_str().unwrap(),
            "--ca",
            ca.to_str().unwrap(),
        ]);
        cli(&home, &maddr, &a)
    };
    wait_until("the TLS tablet server", Duration::from_secs(20), || {
        with_ca(&["status"]).1.contains("live tablet servers: 1")
    });
    let (ok, out, err) = with_ca(&["table", "create", "tls", "--tablets", "2"]);
    assert!(ok, "{out}{err}");
    let mut put = (false, String::new(), String::new());
    for _ in 0..100 {
        put = with_ca(&["put", "tls", "k", "v"]);
        if put.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(put.0, "{}", put.2);
    let (ok, out, _) = with_ca(&["get", "tls", "k"]);
    assert!(ok && out.trim() == "v", "{out}");
    // Without the CA the CLI speaks plaintext and is not served.
    let (ok, _, err) = cli(
        &home,
        &maddr,
        &["status", "--token-file", tf.to_str().unwrap()],
    );
    assert!(!ok, "a plaintext CLI was served");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn a_cluster_started_with_exit_with_parent_stops_when_its_parent_dies() {
    // A shell starts `tablinum up` in the background (as the benchmark
    // harness does, with the variable set), prints its pid, and waits; the
    // shell is then SIGKILLed, as a harness killed by a signal would be.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let script = format!(
        "{bin} up --data {data} --listen 127.0.0.1:0 --http 127.0.0.1:0 --sservers 0 \
         >/dev/null 2>&1 & echo $!; wait",
        bin = common::BIN,
        data = data.display()
    );
    let mut shell = Command::new("sh")
        .args(["-c", &script])
        .env(tablinum_server::EXIT_WITH_PARENT_ENV, "1")
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(shell.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let pid: u32 = line.trim().parse().unwrap();
    // Killed however the test ends.
    let mut shell = Procs(vec![shell]);
    let proc_dir = std::path::PathBuf::from(format!("/proc/{pid}"));
    // Up and serving: it wrote its manager's store.
    wait_until("the cluster to start", Duration::from_secs(30), || {
        data.join("manager").exists()
    });
    shell.0[0].kill().unwrap();
    shell.0[0].wait().unwrap();
    wait_until(
        "the orphaned cluster to exit",
        Duration::from_secs(15),
        || {
            // Gone, or a zombie waiting for init to reap it.
            std::fs::read_to_string(proc_dir.join("stat"))
                .map_or(true, |s| s.split_whitespace().nth(2) == Some("Z"))
        },
    );
}

#[test]
fn the_binary_and_its_banners_say_their_version() {
    let o = Command::new(BIN).arg("--version").output().unwrap();
    assert!(o.status.success());
    assert_eq!(
        String::from_utf8_lossy(&o.stdout).trim(),
        format!("tablinum {}", tablinum_server::VERSION)
    );
    let dir = tempfile::tempdir().unwrap();
    let mut up = Command::new(BIN)
        .args(["up", "--data"])
        .arg(dir.path().join("data"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--http",
            "127.0.0.1:0",
            "--sservers",
            "0",
        ])
        .env("XDG_CONFIG_HOME", dir.path().join(".config"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(up.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let _procs = Procs(vec![up]);
    assert!(
        line.starts_with(&format!("tablinum {} up:", tablinum_server::VERSION)),
        "{line}"
    );
}

/// Resident memory of process `pid`, bytes.
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/PID/status");
    kb * 1024
}

/// The outsider's memory attack against a real server process: one read
/// token sends 128 Queries over a 48 MiB table and never reads an answer
/// (the HTTP/2 windows stay shut). Eight are admitted
/// (`queries_per_caller_max`), the rest refused. The scan bytes the server
/// holds for them stay within the caller's budget
/// (`scan_bytes_per_caller_max`, which their `query_bytes_in_flight_max`
/// reservations fill) plus one batch per tablet each, and the process's
/// resident memory grows by that plus each Query's working set (its
/// chunks and wire buffers) and allocator slack, whatever the table's size
/// (before the limits, 48 such Queries took a server from 301 MiB to
/// 3.5 GiB; with only the server-wide budget, eight took 480 MiB).
#[test]
fn stalled_queries_from_one_read_token_keep_a_servers_memory_bounded() {
    use tablinum_proto::v1::tablet_server_client::TabletServerClient;
    const ROW_BYTES: usize = 64 << 10;
    const ROWS: usize = 768;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let home = dir.path().join("home");
    let (child, addr, http) = spawn_up(&data, &home);
    let pid = child.id();
    let _procs = Procs(vec![child]);
    let admin = up_admin(&home, &addr);
    let client = client_as(&addr, &admin);
    client
        .create_table("big", Split::Even(4), Durability::Nosync)
        .unwrap();
    for chunk in (0..ROWS).collect::<Vec<_>>().chunks(16) {
        let m = chunk
            .iter()
            .map(|i| tablinum_client::Mutation {
                key: format!("k{i:06}").into_bytes(),
                value: vec![(*i % 251) as u8; ROW_BYTES],
                ..Default::default()
            })
            .collect();
        client.write_routed("big", m).unwrap();
    }
    let (_, reader) = client
        .create_token(tablinum_client::Role::Read, "reader")
        .unwrap();
    // One full read first, so caches and pools are as warm as they get.
    let (rows, _) = client.query_vec(&Query::new("big")).unwrap();
    assert_eq!(rows.len(), ROWS);
    drop(rows);
    std::thread::sleep(Duration::from_millis(500));
    let before = rss_bytes(pid);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (held, refused) = rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut held = Vec::new();
        let mut refused = 0;
        for _ in 0..128 {
            let mut t = TabletServerClient::new(tablinum_auth::Caller::new(
                ch.clone(),
                tablinum_auth::Bearer::new(Some(&reader), &addr),
            ));
            let q = tablinum_proto::v1::QueryRequest {
                table: "big".into(),
                ..Default::default()
            };
            match t.query(q).await {
                Ok(s) => held.push(s.into_inner()),
                Err(e) => {
                    assert_eq!(e.code(), tonic::Code::ResourceExhausted, "{e:?}");
                    refused += 1;
                }
            }
        }
        (held, refused)
    });
    assert_eq!((held.len(), refused), (8, 120));
    // Let every admitted Query produce all it may.
    std::thread::sleep(Duration::from_secs(3));
    let after = rss_bytes(pid);
    let in_flight = metrics_page(&http, &admin)
        .lines()
        .find_map(|l| l.strip_prefix("tablinum_tserver_scan_bytes_in_flight "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap() as u64;
    let grew = after.saturating_sub(before);
    eprintln!(
        "scan bytes in flight {} MiB; resident memory {} MiB before, {} MiB with 8 stalled \
         Queries (+{} MiB; 128 stalled Queries' results would be {} MiB)",
        in_flight >> 20,
        before >> 20,
        after >> 20,
        grew >> 20,
        (128 * ROWS * ROW_BYTES) >> 20
    );
    let caller = tablinum_server::config::SCAN_BYTES_PER_CALLER_MAX_DEFAULT;
    let batch = tablinum_server::config::BATCH_BYTES_DEFAULT + ROW_BYTES as u64;
    let overshoot = 8 * 4 * batch;
    assert!(
        in_flight <= caller + overshoot,
        "stalled Queries hold {in_flight} scan bytes, past one caller's budget {caller} \
         and one batch per tablet"
    );
    // Each Query's working set: the chunk it builds, the one queued, the
    // codec buffers of its response and of its own stream: 16 MiB is ample.
    let budget = caller + overshoot + 8 * (16 << 20) + (64 << 20);
    assert!(
        grew < budget,
        "stalled Queries grew the server by {} MiB, past one caller's budget and slack ({} MiB)",
        grew >> 20,
        budget >> 20
    );
    drop(held);
}
