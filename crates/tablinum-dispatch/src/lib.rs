//! Which server serves each attempt of an eventual read.
//!
//! tablinum's scan-server dispatch policy, after Accumulo's
//! `ConfigurableScanServerSelector`, as a pure library:
//!
//! * [`profile`]: named profiles from TOML (attempt plans, busy timeouts and
//!   their escalation, what to do with no scan server, hedging), validated
//!   into typed errors;
//! * [`rendezvous`]: the stable hash and the salted highest-random-weight
//!   ranking of servers per tablet;
//! * [`select`](mod@select): the per-attempt choice of a server per tablet,
//!   the busy timeout and the error backoff, plus tablinum's optional skip of
//!   a first plan the caller has recently seen busy ([`FirstPlanHeat`]);
//! * [`hedge`](mod@hedge): when and where to hedge small reads, with a
//!   fixed-memory latency tracker;
//! * [`busy`]: the server-side busy rule (queued → running or cancelled by
//!   one compare-and-set), used by scan servers and by `tablinum-sim`.
//!
//! Invariants: no I/O except [`Profiles::load`], no threads, no clock reads
//! and no global random generator: time arrives as microseconds and
//! randomness as a per-call seed, so every decision is reproducible and the
//! simulator runs exactly this code.

pub mod busy;
pub mod hedge;
pub mod profile;
pub mod rendezvous;
mod rng;
pub mod select;

pub use busy::{
    busy_deadline_passed, BusyCheck, BusyTimeout, BusyTimeoutError, TaskGate, TaskState,
};
pub use hedge::{hedge, HedgeDecision, LatencyTracker};
pub use profile::{
    AttemptPlan, Hedge, Profile, ProfileError, Profiles, ServerCount, WhenNoServers,
};
pub use select::{
    error_backoff_ms, select, Attempt, AttemptOutcome, Dispatch, FirstPlanHeat, Request,
    SelectError, Selection, ServerId, ServerSnapshot, TabletAttempts, Target,
};
