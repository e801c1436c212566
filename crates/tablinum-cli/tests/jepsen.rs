//! The Jepsen-style test in its short mode: 56 s of history on a manager
//! and three tablet server processes, six clients on ten registers, and
//! every fault kind once (tablet server SIGKILL with and without a prompt
//! restart, tablet server SIGSTOP beyond the heartbeat timeout, manager
//! SIGKILL and restart, manager SIGSTOP, a tablet server cut off from the
//! manager beyond the heartbeat timeout; and on one tablet server's disk:
//! failing fsyncs that lose the unsynced bytes, failing fsyncs that keep
//! them cached, a full disk, a slow disk). The long mode is
//! `tablinum jepsen --seconds N --seed S`.

use std::time::Duration;

use tablinum_jepsen::{Fault, RunConfig};

#[test]
fn short_history_is_linearizable_under_every_fault() {
    // Kept when the test fails (the history is the evidence), removed when
    // it passes.
    let dir = tempfile::tempdir().unwrap().keep();
    let seed = std::env::var("TABLINUM_JEPSEN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    let cfg = RunConfig {
        bin: env!("CARGO_BIN_EXE_tablinum").into(),
        dir: dir.join("run"),
        seconds: 56,
        seed,
        clients: 6,
        keys: 10,
        tservers: 3,
        heartbeat_timeout_ms: 1500,
        faults: Vec::new(),
    };
    let report = tablinum_jepsen::run(&cfg).unwrap();
    eprint!("{}", report.text());
    assert!(report.operations > 1_000, "too few operations to judge");
    assert!(
        report.violations.is_empty() && report.undecided.is_empty(),
        "not linearizable: {:?} (history: {})",
        report.violations,
        cfg.dir.join("history.jsonl").display()
    );
    assert!(report.lost.is_empty(), "lost: {:?}", report.lost);
    for f in Fault::ALL {
        let u = report.unavailability.iter().find(|u| u.fault == f).unwrap();
        assert!(u.injected >= 1, "{f:?} was never injected");
        // The targets with slack for a shared 2-core machine; the report
        // prints the measured gap against the exact target.
        let slack = Duration::from_millis(3_000).as_millis() as u64;
        assert!(
            u.longest_gap_ms <= u.target_ms + slack,
            "{f:?}: unavailable for {} ms (target {} ms)",
            u.longest_gap_ms,
            u.target_ms
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
