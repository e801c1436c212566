//! Typed error details on the wire: what a server attaches to every error
//! status it answers (a google.rpc.ErrorInfo in the status details, with
//! an [`ErrorReason`] by name and whether the request was applied), and
//! how a client reads them back.
//!
//! Never reads a status's message; treats the details bytes as hostile (a
//! status whose details do not decode, or name a reason this build does
//! not know, has no [`Detail`]).

use std::collections::HashMap;

use tonic::{Code, Status};
use tonic_types::{ErrorDetails, StatusExt};

pub use crate::v1::ErrorReason;

/// The ErrorInfo domain of tablinum's reasons.
pub const DOMAIN: &str = "tablinum";

/// Whether a failed request changed anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It changed nothing: sending it again is safe.
    No,
    /// It may have been applied.
    Unknown,
}

/// The typed cause of an error status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detail {
    /// Why.
    pub reason: ErrorReason,
    /// Whether the request changed anything.
    pub applied: Applied,
    /// The limit reached (`LIMIT_EXCEEDED`), as the config names it.
    pub limit: Option<String>,
    /// The damaged file and the offset of the bad bytes (`CORRUPTION`).
    pub corruption: Option<(String, u64)>,
}

impl Detail {
    /// `reason`, with what each reason says of `applied` (see the .proto).
    pub fn new(reason: ErrorReason) -> Detail {
        let applied = match reason {
            ErrorReason::OutcomeUnknown
            | ErrorReason::Storage
            | ErrorReason::Corruption
            | ErrorReason::Deadline
            | ErrorReason::CancelledByCaller
            | ErrorReason::Transport
            | ErrorReason::Unspecified => Applied::Unknown,
            _ => Applied::No,
        };
        Detail {
            reason,
            applied,
            limit: None,
            corruption: None,
        }
    }

    /// `LIMIT_EXCEEDED` naming `limit`.
    pub fn limit(limit: &str) -> Detail {
        Detail {
            limit: Some(limit.to_string()),
            ..Detail::new(ErrorReason::LimitExceeded)
        }
    }

    /// A status of `code` and `message` carrying this detail.
    pub fn status(self, code: Code, message: impl Into<String>) -> Status {
        let mut meta = HashMap::new();
        meta.insert(
            "applied".to_string(),
            match self.applied {
                Applied::No => "no",
                Applied::Unknown => "unknown",
            }
            .to_string(),
        );
        if let Some(l) = self.limit {
            meta.insert("limit".into(), l);
        }
        if let Some((f, o)) = self.corruption {
            meta.insert("file".into(), f);
            meta.insert("offset".into(), o.to_string());
        }
        Status::with_error_details(
            code,
            message,
            ErrorDetails::with_error_info(self.reason.as_str_name(), DOMAIN, meta),
        )
    }

    /// The detail `s` carries, if it carries one of ours.
    pub fn of(s: &Status) -> Option<Detail> {
        if s.details().is_empty() {
            return None;
        }
        let info = s.get_details_error_info()?;
        if info.domain != DOMAIN {
            return None;
        }
        let reason = ErrorReason::from_str_name(&info.reason)?;
        let applied = match info.metadata.get("applied").map(String::as_str) {
            Some("no") => Applied::No,
            _ => Applied::Unknown,
        };
        let corruption = match (info.metadata.get("file"), info.metadata.get("offset")) {
            (Some(f), Some(o)) => o.parse().ok().map(|o| (f.clone(), o)),
            _ => None,
        };
        Some(Detail {
            reason,
            applied,
            limit: info.metadata.get("limit").cloned(),
            corruption,
        })
    }
}

/// A status of `code` and `message` with `reason` (and what it says of
/// `applied`).
pub fn status(code: Code, reason: ErrorReason, message: impl Into<String>) -> Status {
    Detail::new(reason).status(code, message)
}

/// The reason a status of `code` gets when its maker named none: what the
/// code alone says.
pub fn reason_of_code(code: Code) -> ErrorReason {
    match code {
        Code::InvalidArgument | Code::OutOfRange => ErrorReason::BadRequest,
        Code::NotFound => ErrorReason::NotFound,
        Code::AlreadyExists => ErrorReason::AlreadyExists,
        Code::Unauthenticated => ErrorReason::Unauthenticated,
        Code::PermissionDenied => ErrorReason::PermissionDenied,
        Code::FailedPrecondition => ErrorReason::NotServing,
        Code::Aborted => ErrorReason::Conflict,
        Code::DeadlineExceeded => ErrorReason::Deadline,
        Code::DataLoss => ErrorReason::Corruption,
        Code::Internal => ErrorReason::Storage,
        Code::Cancelled => ErrorReason::CancelledByCaller,
        Code::Unknown => ErrorReason::OutcomeUnknown,
        _ => ErrorReason::Unspecified,
    }
}

/// `s` with a detail: its own if it has one, else the one its code says
/// ([`reason_of_code`]). What a server sends for every error.
pub fn typed(s: Status) -> Status {
    if s.code() == Code::Ok || Detail::of(&s).is_some() {
        return s;
    }
    let reason = reason_of_code(s.code());
    if reason == ErrorReason::Unspecified {
        return s;
    }
    let mut t = Detail::new(reason).status(s.code(), s.message());
    *t.metadata_mut() = s.metadata().clone();
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_detail_survives_the_wire_and_garbage_yields_none() {
        let d = Detail {
            corruption: Some(("tablet/000007.sst".into(), 4096)),
            ..Detail::new(ErrorReason::Corruption)
        };
        let s = d.clone().status(Code::DataLoss, "checksum mismatch");
        let back = Detail::of(&Status::with_details(
            s.code(),
            s.message(),
            s.details().to_vec().into(),
        ));
        assert_eq!(back, Some(d));
        let l = Detail::of(&Detail::limit("scan_streams_max").status(Code::ResourceExhausted, "x"))
            .unwrap();
        assert_eq!(
            (l.reason, l.applied, l.limit.as_deref()),
            (
                ErrorReason::LimitExceeded,
                Applied::No,
                Some("scan_streams_max")
            )
        );
        // No details, garbage details, another domain, an unknown reason.
        assert_eq!(Detail::of(&Status::unavailable("tablet unavailable")), None);
        for junk in [&b"\xff\xff\x01"[..], b"", b"\x0a\x02\x08\x01"] {
            let s = Status::with_details(Code::Unavailable, "m", junk.to_vec().into());
            assert_eq!(Detail::of(&s), None);
        }
        let other = Status::with_error_details(
            Code::Unavailable,
            "m",
            ErrorDetails::with_error_info("NOT_SERVING", "elsewhere", HashMap::new()),
        );
        assert_eq!(Detail::of(&other), None);
        let unknown = Status::with_error_details(
            Code::Unavailable,
            "m",
            ErrorDetails::with_error_info("SOMETHING_NEW", DOMAIN, HashMap::new()),
        );
        assert_eq!(Detail::of(&unknown), None);
    }

    #[test]
    fn typing_keeps_a_named_reason_and_fills_in_the_codes() {
        let busy = status(
            Code::ResourceExhausted,
            ErrorReason::ScanServerBusy,
            "scan server busy",
        );
        assert_eq!(
            Detail::of(&typed(busy)).unwrap().reason,
            ErrorReason::ScanServerBusy
        );
        let bad = typed(Status::invalid_argument("empty table name"));
        assert_eq!(bad.message(), "empty table name");
        let d = Detail::of(&bad).unwrap();
        assert_eq!(
            (d.reason, d.applied),
            (ErrorReason::BadRequest, Applied::No)
        );
        let unknown = Detail::of(&typed(Status::unknown("outcome unknown"))).unwrap();
        assert_eq!(unknown.applied, Applied::Unknown);
        // UNAVAILABLE and RESOURCE_EXHAUSTED say nothing by their code.
        assert_eq!(Detail::of(&typed(Status::unavailable("?"))), None);
    }
}
