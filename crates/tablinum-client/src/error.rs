//! The client's typed errors, mapped from gRPC statuses.

use std::fmt;

use tablinum_proto::error::{reason_of_code, Applied, Detail, ErrorReason};
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

/// What kind of call failed, for [`classify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    /// A read on a tablet server (or any call that changes nothing).
    Read,
    /// A write: sent again only when the failure proves it changed nothing.
    Write,
    /// An eventual read on a scan server: a busy or stalled server is left
    /// for another at once.
    Eventual,
}

/// What to do about a failed call ([`classify`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verdict {
    /// Try again (after refreshing locations, or on another server).
    pub retry: bool,
    /// A scan server's busy answer: no work was done; go elsewhere at once.
    pub busy: bool,
    /// The failure proves the request changed nothing.
    pub not_applied: bool,
}

/// The typed cause of `s`: its detail, or what its code alone says with
/// `applied` unknown (a status from a proxy, or tonic's own).
fn cause(s: &Status) -> Detail {
    Detail::of(s).unwrap_or_else(|| Detail {
        applied: Applied::Unknown,
        ..Detail::new(reason_of_code(s.code()))
    })
}

/// The one rule every attempt loop (point, write, query, eventual, batch)
/// follows: from a status's code and typed detail, never its message.
///
/// - Retried for any call: the tablet moved or a newer owner took it
///   (NOT_SERVING, STALE_EPOCH), the tablet is opening or reopening
///   (TABLET_UNAVAILABLE), the proof must be made afresh (PROOF_RETRY),
///   the connection was never made (CONNECT_FAILED) or broke (TRANSPORT),
///   an outcome-unknown or cancelled read; and an untyped UNAVAILABLE,
///   UNKNOWN or CANCELLED.
/// - A write only when, besides, the detail says it was not applied.
/// - An eventual read also on a busy scan server (SCAN_SERVER_BUSY) and
///   one that stalled (DEADLINE): another server is tried.
/// - Never: LIMIT_EXCEEDED (the proto says clients do not), bad requests,
///   refusals of credentials, NOT_FOUND, corruption.
pub(crate) fn classify(s: &Status, op: Op) -> Verdict {
    use ErrorReason as R;
    let d = cause(s);
    let busy = d.reason == R::ScanServerBusy;
    let transient = match d.reason {
        R::NotServing
        | R::StaleEpoch
        | R::TabletUnavailable
        | R::ProofRetry
        | R::ConnectFailed
        | R::Transport
        | R::OutcomeUnknown
        | R::CancelledByCaller => true,
        R::Unspecified => matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled
        ),
        _ => false,
    };
    let not_applied = d.applied == Applied::No;
    let retry = match op {
        Op::Read => transient,
        Op::Write => transient && not_applied,
        Op::Eventual => transient || busy || d.reason == R::Deadline,
    };
    Verdict {
        retry,
        busy,
        not_applied,
    }
}

/// Whether a status is a scan server's busy answer (SCAN_SERVER_BUSY).
pub fn is_busy(s: &Status) -> bool {
    Detail::of(s).is_some_and(|d| d.reason == ErrorReason::ScanServerBusy)
}

/// The error for a write that is not sent again: an outcome-unknown
/// error unless the failure proves the write changed nothing or is a
/// refusal by its code.
pub(crate) fn write_outcome(s: Status) -> Error {
    let d = cause(&s);
    let lost = matches!(
        d.reason,
        ErrorReason::OutcomeUnknown | ErrorReason::Transport | ErrorReason::CancelledByCaller
    ) || (d.reason == ErrorReason::Unspecified
        && matches!(
            s.code(),
            Code::Unavailable | Code::Unknown | Code::Cancelled
        ));
    if lost && d.applied != Applied::No {
        Error::OutcomeUnknown(format!("{:?}: {}", s.code(), s.message()))
    } else {
        s.into()
    }
}

impl From<Status> for Error {
    fn from(s: Status) -> Self {
        let reason = cause(&s).reason;
        let m = s.message().to_string();
        match (s.code(), reason) {
            (_, ErrorReason::ConnectFailed | ErrorReason::Transport) => Error::Connect(m),
            (Code::InvalidArgument | Code::OutOfRange, _) => Error::InvalidArgument(m),
            (Code::NotFound, _) => Error::NotFound(m),
            (Code::AlreadyExists, _) => Error::AlreadyExists(m),
            (Code::FailedPrecondition | Code::Unavailable | Code::Cancelled, _) => {
                Error::Unavailable(m)
            }
            (Code::ResourceExhausted, _) => Error::Busy(m),
            (Code::DeadlineExceeded, _) => Error::Timeout(m),
            (Code::Unauthenticated, _) => Error::Unauthenticated(m),
            (Code::PermissionDenied, _) => Error::PermissionDenied(m),
            (Code::Aborted, _) => Error::Conflict(m),
            (Code::Unknown, _) => Error::OutcomeUnknown(m),
            _ => Error::Server(format!("{:?}: {m}", s.code())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tablinum_proto::error::status;

    #[test]
    fn one_rule_decides_retries_from_the_detail_never_the_message() {
        let moved = status(Code::FailedPrecondition, ErrorReason::NotServing, "x");
        let opening = status(Code::Unavailable, ErrorReason::TabletUnavailable, "x");
        let broke = status(Code::Unavailable, ErrorReason::Transport, "x");
        let never = status(Code::Unavailable, ErrorReason::ConnectFailed, "x");
        let busy = status(Code::ResourceExhausted, ErrorReason::ScanServerBusy, "x");
        let limit = Detail::limit("scan_streams_max").status(Code::ResourceExhausted, "x");
        let stalled = status(Code::DeadlineExceeded, ErrorReason::Deadline, "x");
        let lost = status(Code::Unknown, ErrorReason::OutcomeUnknown, "x");
        // The words of a typed cause do not matter; untyped, only the code.
        let untyped = Status::unavailable("tablet unavailable: tcp connect error");
        for (s, read, write, eventual) in [
            (&moved, true, true, true),
            (&opening, true, true, true),
            (&broke, true, false, true),
            (&never, true, true, true),
            (&busy, false, false, true),
            (&limit, false, false, false),
            (&stalled, false, false, true),
            (&lost, true, false, true),
            (&untyped, true, false, true),
        ] {
            assert_eq!(classify(s, Op::Read).retry, read, "{s:?}");
            assert_eq!(classify(s, Op::Write).retry, write, "{s:?}");
            assert_eq!(classify(s, Op::Eventual).retry, eventual, "{s:?}");
        }
        assert!(is_busy(&busy) && !is_busy(&Status::resource_exhausted("scan server busy")));
        assert!(matches!(write_outcome(broke), Error::OutcomeUnknown(_)));
        assert!(matches!(write_outcome(untyped), Error::OutcomeUnknown(_)));
        assert!(matches!(write_outcome(limit), Error::Busy(_)));
        assert!(matches!(Error::from(never), Error::Connect(_)));
    }
}
