//! The client's typed errors, mapped from gRPC statuses.

use std::fmt;

use tonic::{Code, Status};

/// What went wrong with a client call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The request was malformed; nothing was changed. The message names
    /// what was wrong.
    InvalidArgument(String),
    /// A table (or other named thing) does not exist.
    NotFound(String),
    /// A table with that name exists already.
    AlreadyExists(String),
    /// The cluster could not serve the request before the retry deadline
    /// (tablet moving or recovering, server unreachable).
    Unavailable(String),
    /// A stream's idle or ack-wait timeout expired.
    Timeout(String),
    /// Any other failure reported by a server (storage errors among them).
    Server(String),
    /// The cluster address could not be used.
    Connect(String),
    /// The call carried no credentials, or credentials the cluster does not
    /// know (forged, revoked); nothing was changed.
    Unauthenticated(String),
    /// The credentials' role does not allow the call; nothing was changed.
    PermissionDenied(String),
    /// A write reached a server but its outcome is unknown (the server lost
    /// the tablet before confirming it): it may or may not have been
    /// applied. Never retried, since applying it again could undo a later
    /// write of another client.
    OutcomeUnknown(String),
    /// A server refused the call at once because one of its limits was
    /// reached (scan streams, a caller's streams, tablet scans); the
    /// message names the limit. Nothing was changed. Not retried: a client
    /// that waited would hold its caller for the whole retry deadline.
    Busy(String),
    /// A conditional write found another state than it expected (an
    /// exactly-once writer's stored position moved: another instance of
    /// it, or this one's earlier try, got there first). Nothing was changed.
    Conflict(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidArgument(m) => write!(f, "invalid argument: {m}"),
            Error::NotFound(m) => write!(f, "not found: {m}"),
            Error::AlreadyExists(m) => write!(f, "already exists: {m}"),
            Error::Unavailable(m) => write!(f, "unavailable: {m}"),
            Error::Timeout(m) => write!(f, "timed out: {m}"),
            Error::Server(m) => write!(f, "server error: {m}"),
            Error::Connect(m) => write!(f, "cannot connect: {m}"),
            Error::Unauthenticated(m) => write!(f, "not authenticated: {m}"),
            Error::PermissionDenied(m) => write!(f, "permission denied: {m}"),
            Error::OutcomeUnknown(m) => write!(f, "outcome unknown: {m}"),
            Error::Busy(m) => write!(f, "server busy: {m}"),
            Error::Conflict(m) => write!(f, "conflict: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Result of client calls.
pub type Result<T> = std::result::Result<T, Error>;

/// Whether a status means "try again after refreshing locations".
///
/// INTERNAL counts only when the transport said it ([`H2_BROKEN_PREFIX`]):
/// a server killed or restarted mid-stream can end the HTTP/2 connection
/// with a protocol error, which tonic reports as INTERNAL, and that is the
/// same lost connection as UNAVAILABLE. A server's own INTERNAL answer
/// (an engine error) is not retried. A write still needs
/// [`not_applied`] as well, which INTERNAL never is.
pub(crate) fn retryable(s: &Status) -> bool {
    match s.code() {
        Code::FailedPrecondition | Code::Unavailable | Code::Unknown | Code::Cancelled => true,
        Code::Internal => s.message().starts_with(H2_BROKEN_PREFIX),
        _ => false,
    }
}

/// How tonic words an HTTP/2 connection that broke under a request.
pub(crate) const H2_BROKEN_PREFIX: &str = "h2 protocol error";

/// Whether a status proves the request was not applied, so even a write
/// may be sent again: the server refused it ("not serving", tablet
/// opening) or it never reached a server. UNKNOWN and CANCELLED (a
/// connection that broke mid-request) do not: the write may have been
/// applied, and sending it again could undo another client's later write.
///
/// UNAVAILABLE proves it only when a server said so ("tablet unavailable")
/// or the connection was never made ("tcp connect error"): a connection
/// lost after the request was sent (a keepalive timeout to a paused
/// server, a reset) also reads UNAVAILABLE, and that write may have been
/// applied.
pub(crate) fn not_applied(s: &Status) -> bool {
    match s.code() {
        Code::FailedPrecondition | Code::ResourceExhausted => true,
        Code::Unavailable => {
            let m = s.message();
            m.starts_with(SERVER_UNAVAILABLE_PREFIX) || m == CONNECT_FAILED_MESSAGE
        }
        _ => false,
    }
}

/// How a tablet server's own UNAVAILABLE answers begin (opening, closed).
pub const SERVER_UNAVAILABLE_PREFIX: &str = "tablet unavailable";
/// How a scan server's busy answers (RESOURCE_EXHAUSTED) begin: a batch
/// waited longer than the scan's busy timeout; no work was done.
pub const SCAN_SERVER_BUSY_PREFIX: &str = "scan server busy";

/// Whether a status is a scan server's busy answer.
pub fn is_busy(s: &Status) -> bool {
    s.code() == Code::ResourceExhausted && s.message().starts_with(SCAN_SERVER_BUSY_PREFIX)
}

/// tonic's message for a connection that could not be made.
const CONNECT_FAILED_MESSAGE: &str = "tcp connect error";

/// The error for a write whose failure does not prove it was not applied.
pub(crate) fn write_outcome(s: Status) -> Error {
    match s.code() {
        Code::Unavailable | Code::Cancelled | Code::Unknown => {
            Error::OutcomeUnknown(format!("{:?}: {}", s.code(), s.message()))
        }
        _ => s.into(),
    }
}

impl From<Status> for Error {
    fn from(s: Status) -> Self {
        let m = s.message().to_string();
        match s.code() {
            Code::InvalidArgument | Code::OutOfRange => Error::InvalidArgument(m),
            Code::NotFound => Error::NotFound(m),
            Code::AlreadyExists => Error::AlreadyExists(m),
            Code::FailedPrecondition | Code::Unavailable | Code::Cancelled => Error::Unavailable(m),
            Code::ResourceExhausted => Error::Busy(m),
            Code::DeadlineExceeded => Error::Timeout(m),
            Code::Unauthenticated => Error::Unauthenticated(m),
            Code::PermissionDenied => Error::PermissionDenied(m),
            Code::Aborted => Error::Conflict(m),
            // tonic's word for a connection that failed below gRPC (a TLS
            // server spoken to in plaintext, a reset): for anything but a
            // write (see write_outcome) nothing was applied.
            Code::Unknown if m.starts_with("transport error") => Error::Connect(format!(
                "{m} (the connection failed below gRPC: a server that speaks TLS needs --ca / TABLINUM_CA)"
            )),
            Code::Unknown => Error::OutcomeUnknown(m),
            _ => Error::Server(format!("{:?}: {m}", s.code())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_connection_is_retried_for_reads_but_never_proves_a_write_unapplied() {
        let broken = Status::internal("h2 protocol error: http2 error");
        assert!(retryable(&broken));
        assert!(!not_applied(&broken));
        let engine = Status::internal("journal segment 7: checksum mismatch");
        assert!(!retryable(&engine));
        assert!(!retryable(&Status::invalid_argument("h2 protocol error")));
    }
}
