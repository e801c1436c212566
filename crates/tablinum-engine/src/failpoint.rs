//! Crash points for crash tests: `failpoint!("name")` marks a moment where a
//! crash is interesting (inside a segment roll, a flush install, a journal
//! compaction). With the `failpoints` feature and the environment variable
//! `TABLINUM_FAILPOINT=name` (or `name@N`: the N-th time it is reached), the
//! process aborts there, as abruptly as a SIGKILL: no destructor runs, no
//! buffer is flushed. With `name[@N]:panic` the thread panics there instead
//! (to test that a panicking background job poisons its store). Without the
//! feature the macro expands to nothing.
//!
//! Never used for error injection: a failpoint only ever kills the process
//! or the thread.

/// The environment variable naming the armed failpoint.
pub const FAILPOINT_ENV: &str = "TABLINUM_FAILPOINT";

/// Every failpoint name, so tests can check they cover each one.
pub const FAILPOINTS: &[&str] = &[
    "roll.after-new-segment",
    "flush.before-install",
    "install.after-manifest",
    "gc.after-copy",
    "gc.after-switch",
    "gc.after-manifest",
    "gc.after-delete",
];

/// Aborts the process if `name` is the armed failpoint and this is the
/// armed hit.
#[cfg(feature = "failpoints")]
pub fn hit(name: &'static str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static ARMED: OnceLock<Option<(String, u64, bool)>> = OnceLock::new();
    static HITS: AtomicU64 = AtomicU64::new(0);
    debug_assert!(FAILPOINTS.contains(&name), "unlisted failpoint {name}");
    let armed = ARMED.get_or_init(|| {
        let v = std::env::var(FAILPOINT_ENV).ok()?;
        let (v, panic) = match v.strip_suffix(":panic") {
            Some(v) => (v.to_string(), true),
            None => (v, false),
        };
        Some(match v.split_once('@') {
            Some((n, k)) => (n.to_string(), k.parse().unwrap_or(1), panic),
            None => (v, 1, panic),
        })
    });
    if let Some((armed, at, panic)) = armed {
        if armed == name && HITS.fetch_add(1, Ordering::Relaxed) + 1 == *at {
            if *panic {
                panic!("failpoint {name}");
            }
            eprintln!("failpoint {name}: aborting");
            std::process::abort();
        }
    }
}

/// Marks a crash point (see the module docs).
macro_rules! failpoint {
    ($name:literal) => {
        #[cfg(feature = "failpoints")]
        $crate::failpoint::hit($name);
    };
}
pub(crate) use failpoint;
