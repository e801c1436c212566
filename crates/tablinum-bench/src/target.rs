//! The one trait every benchmarked store implements, re-exported from the
//! `tablinum-bench-target` crate (so `tablinum-peers` can implement it without
//! a dependency cycle).
//!
//! Owns nothing itself; it must never grow definitions of its own — add them
//! to `crates/tablinum-bench-target` instead.

pub use tablinum_bench_target::*;
