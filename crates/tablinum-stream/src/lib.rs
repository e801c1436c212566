//! Flow-controlled streaming of sorted rows from many tablets, and the
//! coordinator's merge (the stream-limit report, CouchDB's `rexi:stream2`).
//!
//! Owns four pieces, transport-independent so the gRPC layer can carry them
//! and tests can run them in one process:
//! - [`credit`]: the pure credit accounting of a stream (windows, bytes in
//!   flight, cancellation, the ack-wait rule), clock passed in: the server's
//!   scan streams and the in-process channel both run on it;
//! - [`channel`]: one tablet's stream; the producer never has more than the
//!   window of unacknowledged batches in flight, and the consumer
//!   acknowledges a batch when it has *consumed* it, not when it arrived;
//! - [`window`]: the pure window policy (fixed `stream_limit`, or adaptive:
//!   start from the query's need, grow when the merge waits on a tablet,
//!   shrink the next query's start when rows were thrown away at cancel);
//! - [`merge`]: the k-way merge in key order (binary heap, O(log q) per row)
//!   with skip and limit, cancelling every stream the moment the limit is met
//!   and counting rows received, returned and wasted.
//!
//! It never touches storage or the network.

pub mod channel;
pub mod credit;
pub mod merge;
pub mod window;

/// One row: key and value.
pub type Row = (Vec<u8>, Vec<u8>);
