//! Flows submitted to a cluster and run by worker processes: the manager
//! leases each task to one worker, balances when a worker joins, moves a
//! SIGKILLed worker's tasks to the others, and validation still finds every
//! record exactly once in every sink kind (topic, table, files). Outsiders
//! cannot act as a worker or submit a flow.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::{spawn_with_endpoints, Cli, Procs, BIN};

/// `tablinum up` on `dir/data` at a fixed gRPC address (workers keep
/// theirs across a restart of the cluster).
fn up_at(dir: &Path, listen: &str) -> (Child, String) {
    let mut cmd = Command::new(BIN);
    cmd.args(["up", "--listen", listen, "--http", "127.0.0.1:0", "--data"])
        .arg(dir.join("data"))
        .env("XDG_CONFIG_HOME", dir.join("home"))
        .stderr(Stdio::inherit());
    let (c, _, http) = spawn_with_endpoints(cmd, "tablinum up");
    (c, http)
}

/// GET `path` from the HTTP listener at `http` with an admin token.
fn http_get(http: &str, path: &str, token: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(http).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut o = String::new();
    s.read_to_string(&mut o).unwrap();
    o
}

/// A free loopback address (bound and released).
fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

const FLOW: &str = r#"
[flow]
name = "wsplit"
parallelism = 4
commit_interval_ms = 200

[[source]]
name = "logs"
kind = "topic"
topic = "logs"

[[operator]]
name = "by-level"
kind = "split"
input = "logs"
field = "level"
routes = { INFO = "info", WARNING = "warnings", ERROR = "errors" }

[[sink]]
name = "info"
input = "by-level"
kind = "topic"
topic = "logs.info"

[[sink]]
name = "warnings"
input = "by-level"
kind = "files"
dir = "warnings"
format = "jsonl"

[[sink]]
name = "errors"
input = "by-level"
kind = "table"
table = "errors"
key = "position"
"#;

/// Worker processes by id, killed when the test ends, however it ends.
struct Workers(Vec<(String, Child)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `tablinum worker` with id `id` against the cluster of `cli`
/// (embedded: its cluster secret in `dir/data`).
fn worker(cli: &Cli, id: &str) -> Child {
    worker_with(cli, id, &cli.dir.join("data").join("cluster.secret"))
}

/// Starts `tablinum worker` with id `id` and the cluster secret `secret`.
fn worker_with(cli: &Cli, id: &str, secret: &Path) -> Child {
    let cfg = cli.dir.join(format!("{id}.toml"));
    std::fs::write(
        &cfg,
        format!(
            "[worker]\nid = \"{id}\"\nmanager = \"{}\"\ncluster_secret_file = \"{}\"\nroot = \"{}\"\nheartbeat_interval_ms = 200\n",
            cli.grpc,
            secret.display(),
            cli.dir.join("files").display()
        ),
    )
    .unwrap();
    Command::new(BIN)
        .args(["worker", "--config"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// `flow status` rows: (task, worker, position, lag).
fn status(cli: &Cli) -> Vec<(String, String, u64, u64)> {
    cli.ok(&["flow", "status", "wsplit"])
        .lines()
        .skip(2)
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].to_string(),
                f[1].to_string(),
                f[3].parse().unwrap(),
                f[6].parse().unwrap(),
            )
        })
        .collect()
}

fn wait(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `flow validate --follow --until-exact`, asserted to end exact; its
/// standard output.
fn follow_until_exact(cli: &Cli, flow: &str, interval_ms: &str, timeout_s: &str) -> String {
    let live = cli.run(
        &[
            "flow",
            "validate",
            flow,
            "--root",
            "files",
            "--follow",
            "--until-exact",
            "--interval-ms",
            interval_ms,
            "--timeout-s",
            timeout_s,
        ],
        b"",
    );
    assert_eq!(live.code, 0, "{}{}", live.out, live.err);
    live.out
}

fn holders(cli: &Cli) -> Vec<String> {
    status(cli).into_iter().map(|r| r.1).collect()
}

fn validate(cli: &Cli, flow: &Path) -> String {
    let r = cli.run(
        &[
            "flow",
            "validate",
            flow.to_str().unwrap(),
            "--root",
            "files",
        ],
        b"",
    );
    assert!(r.code == 0 || r.code == 1, "{}{}", r.out, r.err);
    r.out
}

#[test]
fn workers_share_tasks_and_survive_kills_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let addr = free_addr();
    let (up, _) = up_at(dir.path(), &addr);
    let mut procs = Procs(vec![up]);
    let cli = Cli {
        grpc: addr.clone(),
        home: dir.path().join("home"),
        dir: dir.path().to_path_buf(),
    };
    let flow = dir.path().join("wsplit.toml");
    std::fs::write(&flow, FLOW).unwrap();
    let fl = flow.to_str().unwrap();

    // Submitting checks the sources first.
    let r = cli.run(&["flow", "submit", fl], b"");
    assert!(
        r.code != 0 && r.err.contains("source topic logs"),
        "{}",
        r.err
    );
    cli.ok(&["topic", "create", "logs", "--partitions", "4"]);
    cli.ok(&["topic", "produce", "logs", "--generate", "3000"]);
    assert!(cli.ok(&["flow", "submit", fl]).contains("4 tasks"));
    assert!(cli.ok(&["flow", "submit", fl]).contains("runs already"));
    assert!(holders(&cli).iter().all(|h| h == "-"), "no worker yet");

    // Outsiders: a read token cannot submit; a client token cannot act as
    // a worker.
    cli.denied_as("read", &["flow", "submit", fl]);
    let admin = std::fs::read_to_string(dir.path().join("data").join("admin.token")).unwrap();
    let cred = tablinum_client::Credential::parse(admin.trim()).unwrap();
    let client = common::client_as(&cli.grpc, &cred);
    let e = client
        .block_on(client.as_async().worker_heartbeat("thief", 64, Vec::new()))
        .unwrap_err();
    assert!(e.to_string().contains("WorkerHeartbeat needs"), "{e}");
    // And an outsider with no credentials at all gets nothing either.
    let nobody = tablinum_client::Client::connect_with(
        &cli.grpc,
        tablinum_client::ClientConfig::with_credential(None),
    )
    .unwrap();
    for e in [
        nobody
            .block_on(nobody.as_async().worker_heartbeat("thief", 64, Vec::new()))
            .unwrap_err(),
        nobody
            .block_on(nobody.as_async().submit_flow("wsplit", FLOW, 4))
            .unwrap_err(),
    ] {
        assert!(
            matches!(e, tablinum_client::Error::Unauthenticated(_)),
            "{e}"
        );
    }
    assert!(nobody.block_on(nobody.as_async().list_flows()).is_err());

    // One worker takes every task; a second one gets half.
    let mut workers = Workers(vec![("w0".to_string(), worker(&cli, "w0"))]);
    wait("w0 holds every task", Duration::from_secs(20), || {
        holders(&cli).iter().all(|h| h == "w0")
    });
    workers.0.push(("w1".to_string(), worker(&cli, "w1")));
    wait("the tasks are balanced", Duration::from_secs(30), || {
        let h = holders(&cli);
        h.iter().filter(|x| *x == "w0").count() == 2 && h.iter().filter(|x| *x == "w1").count() == 2
    });

    // Kill a worker at random moments while input arrives; a new worker
    // joins after each kill.
    let mut rnd = common::xorshift(0x2545_F491_4F6C_DD1Du64);
    for round in 0..3 {
        cli.ok(&["topic", "produce", "logs", "--generate", "2000"]);
        std::thread::sleep(Duration::from_millis(100 + rnd(900)));
        let (id, mut w) = workers.0.remove(rnd(workers.0.len() as u64) as usize);
        w.kill().unwrap();
        w.wait().unwrap();
        eprintln!("round {round}: killed {id}");
        let next = format!("w{}", round + 2);
        workers.0.push((next.clone(), worker(&cli, &next)));
        wait(
            "the killed worker's tasks move",
            Duration::from_secs(30),
            || holders(&cli).iter().all(|h| *h != id && h != "-"),
        );
    }
    // The cluster itself (manager and tablet server in one process) dies
    // under the workers and comes back at its address: the manager gives
    // each task back to the holder it had stored.
    cli.ok(&["topic", "produce", "logs", "--generate", "1000"]);
    std::thread::sleep(Duration::from_millis(100 + rnd(900)));
    procs.0[0].kill().unwrap();
    procs.0[0].wait().unwrap();
    let (up, http) = up_at(dir.path(), &addr);
    procs.0[0] = up;
    // Every record arrives exactly once: followed live while the workers
    // catch up (only what topics and files committed since the last line
    // is read), then checked whole.
    let live = follow_until_exact(&cli, fl, "300", "90");
    assert!(
        live.contains("in flight") && live.contains("EXACT"),
        "{live}"
    );
    wait("the workers catch up", Duration::from_secs(60), || {
        status(&cli).iter().all(|r| r.3 == 0 && r.2 > 0)
    });
    let out = validate(&cli, &flow);
    assert!(out.contains("EXACT") && !out.contains("NOT EXACT"), "{out}");
    // `--generate N` writes N records into each of the 4 partitions.
    assert!(out.contains("expected 40000"), "{out}");
    assert!(cli
        .ok(&["flow", "list"])
        .contains("running  4/4 tasks held"));
    // Per-task progress on /metrics and the status page.
    let m = http_get(&http, "/metrics", admin.trim());
    assert!(m.contains("tablinum_manager_flow_workers 2"), "{m}");
    let positions = m
        .lines()
        .filter(|l| l.starts_with("tablinum_flow_task_position{flow=\"wsplit\""))
        .count();
    assert_eq!(positions, 4, "{m}");
    let page = http_get(&http, "/", admin.trim());
    assert!(
        page.contains("<h2>Flows</h2>") && page.contains("running"),
        "{page}"
    );

    // Stop: the tasks leave their workers; records produced after that
    // stay in the input.
    assert!(cli.ok(&["flow", "stop", "wsplit"]).contains("stopped"));
    wait("the tasks leave", Duration::from_secs(20), || {
        holders(&cli).iter().all(|h| h == "-")
    });
    assert!(cli.ok(&["flow", "list"]).contains("wsplit  stopped  0/4"));
    // Dropping needs a stopped flow whose tasks left their workers.
    wait(
        "the stopped flow can be dropped",
        Duration::from_secs(20),
        || cli.run(&["flow", "drop", "wsplit"], b"").code == 0,
    );
    assert_eq!(cli.ok(&["flow", "list"]), "no flow is submitted\n");
    let r = cli.run(&["flow", "stop", "nope"], b"");
    assert!(r.code == 5 && r.err.contains("no flow nope"), "{}", r.err);
}

#[test]
fn workers_ride_out_a_tablet_server_kill_and_a_manager_restart() {
    let dir = tempfile::tempdir().unwrap();
    // A manager and two tablet servers as processes (heartbeat timeout
    // 1.5 s, so a worker's lease is 1 s).
    let (mut procs, maddr, tservers) = common::start_processes(dir.path(), 1_500, 2);
    let home = dir.path().join("home");
    let token =
        tablinum_auth::files::load_token_file(&dir.path().join("manager").join("admin.token"))
            .unwrap();
    tablinum_auth::files::store_credentials(
        &home.join("tablinum").join("credentials"),
        &maddr,
        &token,
    )
    .unwrap();
    let cli = Cli {
        grpc: maddr.clone(),
        home,
        dir: dir.path().to_path_buf(),
    };
    let flow = dir.path().join("wsplit.toml");
    std::fs::write(&flow, FLOW).unwrap();
    let fl = flow.to_str().unwrap();
    cli.ok(&["topic", "create", "logs", "--partitions", "4"]);
    cli.ok(&["topic", "produce", "logs", "--generate", "5000"]);
    cli.ok(&["flow", "submit", fl]);
    let secret = dir.path().join("cluster.secret");
    let _workers = Workers(vec![
        ("p0".into(), worker_with(&cli, "p0", &secret)),
        ("p1".into(), worker_with(&cli, "p1", &secret)),
    ]);
    let mut rnd = common::xorshift(0x5DEE_CE66_D1CE_4E5Bu64);

    // A tablet server dies mid-run: its tablets (topics, the table, the
    // state table) move to the other one; the tasks that failed start
    // again from their committed positions.
    cli.ok(&["topic", "produce", "logs", "--generate", "3000"]);
    std::thread::sleep(Duration::from_millis(200 + rnd(800)));
    let victim = *tservers.values().next().unwrap();
    procs.0[victim].kill().unwrap();
    procs.0[victim].wait().unwrap();
    cli.ok(&["topic", "produce", "logs", "--generate", "3000"]);

    // The manager dies and comes back at its address: it reloads the
    // flows and their holders, the workers keep their tasks.
    std::thread::sleep(Duration::from_millis(rnd(1000)));
    procs.0[0].kill().unwrap();
    procs.0[0].wait().unwrap();
    let mcfg = dir.path().join("manager.toml");
    let text = std::fs::read_to_string(&mcfg)
        .unwrap()
        .replace("listen = \"127.0.0.1:0\"", &format!("listen = \"{maddr}\""));
    std::fs::write(&mcfg, text).unwrap();
    let (m, again) = common::spawn_role("manager", &mcfg);
    procs.0[0] = m;
    assert_eq!(again, maddr);
    cli.ok(&["topic", "produce", "logs", "--generate", "3000"]);

    let live = follow_until_exact(&cli, fl, "500", "120");
    // 4 partitions x (5000 + 3 x 3000) generated records.
    assert!(
        live.contains("expected 56000, received 56000, lost 0, duplicated 0"),
        "{live}"
    );
}
