//! The journal: the only write-ahead log and the home of values.
//!
//! Every write is appended once to the active segment with its sequence
//! number; values are later read back with one positional read. Owns record
//! and segment formats; must never decide liveness (the store asks the
//! ledger) and never buffers acknowledged bytes in user space.

pub mod record;
pub mod segment;
