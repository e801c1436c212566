//! Drives the real `tablinum` binary: the shell over a real store, data that
//! survives a restart, and bad input that is refused without a panic.

use std::io::Write;
use std::process::{Command, Stdio};

fn shell(dir: &std::path::Path, input: &str) -> String {
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
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn shell_writes_reads_and_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let out = shell(dir.path(), "put a 1 meta=m idx=tag:x\nput b 2 idx=tag:y\ndelete nothing\nget a\nhead a\nindex tag x y\nbogus\nput onlykey\n");
    assert!(out.contains("ok seq=1"), "{out}");
    assert!(out.contains("\n1\n"), "{out}");
    assert!(out.contains("meta=m terms=tag:x"), "{out}");
    assert!(out.contains("x -> a") && out.contains("y -> b"), "{out}");
    assert!(out.contains("error: unknown command `bogus`"), "{out}");
    assert!(out.contains("error: `put` needs 2 argument(s)"), "{out}");
    let out = shell(dir.path(), "scan\nverify\n");
    assert!(out.contains("a = 1") && out.contains("b = 2"), "{out}");
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
