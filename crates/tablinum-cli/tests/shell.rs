//! Drives the real `tablinum` binary's local engine shell (`shell --local`,
//! `kv`): a real store, data that survives a restart, the cluster CLI's
//! output format and exit codes, its own default directory, and bad input
//! refused without a panic.

use std::io::Write;
use std::process::{Command, Stdio};

/// Runs `tablinum shell --data DIR` with `input`; returns stdout, stderr.
fn shell(dir: &std::path::Path, input: &str) -> (String, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .args(["shell", "--data"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

fn kv(cwd: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .current_dir(cwd)
        .arg("kv")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn shell_writes_reads_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = shell(dir.path(), "put a 1 meta=m idx=tag:x\nput b 2 idx=tag:y\ndelete nothing\nget a\nhead a\nindex tag x y\nbogus\nput onlykey\nget zz\nstats\n");
    assert!(out.contains("ok seq=1"), "{out}");
    assert!(out.contains("\n1\n"), "{out}");
    // head prints what the cluster CLI's head prints.
    assert!(
        out.contains("metadata=m\nindex tag=x\n") && out.contains("value_len=1\n"),
        "{out}"
    );
    assert!(out.contains("x\ta\n") && out.contains("y\tb\n"), "{out}");
    assert!(err.contains("error: unknown command `bogus`"), "{err}");
    assert!(err.contains("error: `put` needs 2 argument(s)"), "{err}");
    assert!(err.contains("not found: zz"), "{err}");
    // stats: one `name<TAB>value` per line, not a debug dump.
    assert!(out.contains("last_seq\t3\n"), "{out}");
    assert!(!out.contains("Stats {"), "{out}");
    let (out, _) = shell(dir.path(), "scan\nverify\n");
    assert!(out.contains("a\t1\n") && out.contains("b\t2\n"), "{out}");
    assert!(out.contains("ok: "), "{out}");
    let kv = Command::new(env!("CARGO_BIN_EXE_tablinum"))
        .args(["kv", "--data"])
        .arg(dir.path())
        .args(["get", "b"])
        .output()
        .unwrap();
    assert!(
        kv.status.success(),
        "stdout {} stderr {}",
        String::from_utf8_lossy(&kv.stdout),
        String::from_utf8_lossy(&kv.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&kv.stdout), "2\n");
}

#[test]
fn kv_has_its_own_directory_and_the_cluster_clis_exit_codes() {
    let cwd = tempfile::tempdir().unwrap();
    let (code, out, err) = kv(cwd.path(), &["put", "k", "v"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        cwd.path().join("tablinum-local").is_dir(),
        "the local store has its own default directory"
    );
    assert!(
        !cwd.path().join("tablinum-data").exists(),
        "never the directory of `tablinum up`"
    );
    let (code, out, _) = kv(cwd.path(), &["get", "k"]);
    assert_eq!((code, out.as_str()), (0, "v\n"));
    let (code, out, err) = kv(cwd.path(), &["get", "missing"]);
    assert_eq!(code, 1, "absent key: exit 1 as `tablinum get`; {out}{err}");
    assert!(err.contains("not found: missing"), "{err}");
    let (code, _, err) = kv(cwd.path(), &["frobnicate"]);
    assert_eq!(code, 2, "usage error: exit 2; {err}");
    assert!(err.contains("unknown command"), "{err}");
    let (code, _, err) = kv(cwd.path(), &["scan", "", "many"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("LIMIT must be a number"), "{err}");
}
