//! Typed errors for every engine operation.
//!
//! Owns the one error enum the engine returns. Variants are structured so a
//! caller (and, later, the gRPC edge) can tell *what* was wrong: a corrupt
//! byte names its file and offset, a bad argument names the argument and the
//! limit it broke. Never carries `anyhow` or formatted strings where a field
//! would do.

use std::fmt;
use std::path::PathBuf;

use crate::faults::{classify, Condition, Fault, IoKind};

/// The operation named by the error of a failed journal append whose
/// partial bytes could not be cut off: the segment's end is unknown, so the
/// store must stop writing.
pub(crate) const JOURNAL_REWIND_OP: &str = "cut a failed append off the journal";

/// Result alias used throughout the engine.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong inside the engine.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system I/O error while doing `op` on `path`.
    Io {
        /// What the engine was doing (`"open"`, `"pread"`, `"fsync"`, ...).
        op: &'static str,
        /// The file or directory involved.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// Bytes on disk failed a check: a checksum, a magic number, a length or
    /// a structural rule. `offset` is the byte offset within `file` where the
    /// bad structure starts.
    Corruption {
        /// The file holding the bad bytes.
        file: PathBuf,
        /// Byte offset of the bad structure within `file`.
        offset: u64,
        /// What check failed.
        reason: String,
    },
    /// A caller passed something the engine refuses; nothing was changed.
    InvalidArgument {
        /// Which argument (`"key"`, `"value"`, `"options.memtable_bytes_max"`, ...).
        what: &'static str,
        /// Why it was refused, naming the limit and its unit.
        reason: String,
    },
    /// The store was closed (explicitly or after a fatal background error).
    Closed,
    /// A background task failed for good (damage, a failed fsync, a panic);
    /// the store refuses writes until reopened. Holds the first cause,
    /// shared by every call that reports it.
    Background(std::sync::Arc<Error>),
    /// A background task (`what`: "flush", "compaction", …) panicked with
    /// `message`: what [`Error::Background`] holds after a panic.
    Panicked {
        /// The task.
        what: String,
        /// The panic's message.
        message: String,
    },
    /// The store cannot take this request now, and nothing was changed:
    /// writers stalled past `write_stall_ms_max` while background work kept
    /// failing with a transient error (named in `reason`). Retry later.
    Unavailable {
        /// Why, naming the stall limit and the background error.
        reason: String,
    },
    /// A write's record reached the journal and then something failed: the
    /// write may or may not be durable and visible after a restart.
    WriteOutcomeUnknown(Box<Error>),
    /// The on-disk format version is not one this build can read.
    UnsupportedVersion {
        /// The file carrying the version.
        file: PathBuf,
        /// The version found.
        found: u32,
        /// The version this build writes.
        supported: u32,
    },
    /// Another process holds the store's lock file, or (fenced stores) this
    /// process has the store open already under the same epoch.
    Locked(PathBuf),
    /// A fenced store was claimed by an owner of a newer epoch: this one
    /// must stop. Returned by `open` (a newer owner exists already), by a
    /// write whose record was appended before the fence was seen (its
    /// outcome is unknown: the new owner may or may not replay it), and by
    /// every call after that.
    Fenced {
        /// The store directory.
        dir: PathBuf,
        /// This owner's epoch.
        epoch: u64,
        /// The newer epoch found.
        found: u64,
        /// A write's record was appended before the fence was seen: the new
        /// owner may or may not have replayed it.
        outcome_unknown: bool,
    },
}

impl Error {
    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            op,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn corrupt(
        file: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            file: file.into(),
            offset,
            reason: reason.into(),
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidArgument {
            what,
            reason: reason.into(),
        }
    }

    /// An owned copy of this error, for keeping it as a store's first
    /// cause while the caller returns the original: an I/O error keeps its
    /// OS error code (so [`Error::condition`] reads the same) or its kind
    /// and message; a background error shares its cause.
    pub(crate) fn duplicate(&self) -> Error {
        use std::sync::Arc;
        match self {
            Error::Io { op, path, source } => Error::Io {
                op,
                path: path.clone(),
                source: match source.raw_os_error() {
                    Some(code) => std::io::Error::from_raw_os_error(code),
                    None => std::io::Error::new(source.kind(), source.to_string()),
                },
            },
            Error::Corruption {
                file,
                offset,
                reason,
            } => Error::Corruption {
                file: file.clone(),
                offset: *offset,
                reason: reason.clone(),
            },
            Error::InvalidArgument { what, reason } => Error::InvalidArgument {
                what,
                reason: reason.clone(),
            },
            Error::Closed => Error::Closed,
            Error::Background(e) => Error::Background(Arc::clone(e)),
            Error::Panicked { what, message } => Error::Panicked {
                what: what.clone(),
                message: message.clone(),
            },
            Error::Unavailable { reason } => Error::Unavailable {
                reason: reason.clone(),
            },
            Error::WriteOutcomeUnknown(e) => Error::WriteOutcomeUnknown(Box::new(e.duplicate())),
            Error::UnsupportedVersion {
                file,
                found,
                supported,
            } => Error::UnsupportedVersion {
                file: file.clone(),
                found: *found,
                supported: *supported,
            },
            Error::Locked(p) => Error::Locked(p.clone()),
            Error::Fenced {
                dir,
                epoch,
                found,
                outcome_unknown,
            } => Error::Fenced {
                dir: dir.clone(),
                epoch: *epoch,
                found: *found,
                outcome_unknown: *outcome_unknown,
            },
        }
    }

    /// True when the error reports damaged bytes on disk.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }

    /// The fault rule's answer for this error ([`crate::faults::classify`]):
    /// `Some` for an operating-system error that may go away by itself on a
    /// path that left durable state as it was (a full disk, too many open
    /// files, no memory, an I/O error on work redone from scratch, an
    /// append that was cut off again), `None` for everything else: damage,
    /// a failed journal fsync (after which the state of its pages is
    /// unknown), a failed rewind. A failed fsync of a new table or manifest
    /// is retryable, as that file is abandoned and written anew.
    pub fn condition(&self) -> Option<Condition> {
        let Error::Io { op, source, .. } = self else {
            return None;
        };
        let kind = if *op == JOURNAL_REWIND_OP {
            IoKind::JournalRewind
        } else if op.starts_with("fsync") && (op.contains("journal") || op.contains("segment")) {
            IoKind::JournalSync
        } else if *op == "append journal" {
            IoKind::JournalAppend
        } else {
            IoKind::Redoable
        };
        match classify(kind, source) {
            Fault::Retry(c) => Some(c),
            Fault::Poison => None,
        }
    }

    /// True when [`Error::condition`] says the error may go away by itself:
    /// background work that fails with one is retried with backoff instead
    /// of poisoning the store, and a write that fails with one was not
    /// applied.
    pub fn is_transient(&self) -> bool {
        self.condition().is_some()
    }

    /// True when the disk (or the quota) is full: the call changed nothing
    /// and may succeed once space is freed.
    pub fn is_disk_full(&self) -> bool {
        self.condition() == Some(Condition::DiskFull)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
            Error::Corruption {
                file,
                offset,
                reason,
            } => write!(
                f,
                "corruption in {} at offset {offset}: {reason}",
                file.display()
            ),
            Error::InvalidArgument { what, reason } => write!(f, "invalid {what}: {reason}"),
            Error::Closed => f.write_str("store is closed"),
            Error::Background(e) => write!(f, "background task failed: {e}"),
            Error::Panicked { what, message } => write!(f, "{what} panicked: {message}"),
            Error::Unavailable { reason } => write!(f, "store unavailable: {reason}"),
            Error::WriteOutcomeUnknown(e) => write!(
                f,
                "the write reached the journal, then failed ({e}): it may or may not be applied"
            ),
            Error::UnsupportedVersion {
                file,
                found,
                supported,
            } => write!(
                f,
                "{} has format version {found}; this build reads version {supported}",
                file.display()
            ),
            Error::Locked(path) => {
                write!(
                    f,
                    "store {} is open already (locked by another process, or by this one under the same epoch)",
                    path.display()
                )
            }
            Error::Fenced {
                dir,
                epoch,
                found,
                outcome_unknown,
            } => write!(
                f,
                "store {} was taken over at epoch {found}; this owner (epoch {epoch}) is fenced{}",
                dir.display(),
                if *outcome_unknown {
                    " (the write may or may not have been applied)"
                } else {
                    ""
                }
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::WriteOutcomeUnknown(e) => Some(e.as_ref()),
            Error::Background(e) => Some(e.as_ref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_first_cause_reads_like_the_original() {
        let full = Error::io(
            "append journal",
            "/t/0.jnl",
            std::io::Error::from_raw_os_error(libc::ENOSPC),
        );
        let kept = full.duplicate();
        assert!(kept.is_disk_full());
        assert_eq!(kept.to_string(), full.to_string());
        let bg = Error::Background(std::sync::Arc::new(kept));
        assert!(std::error::Error::source(&bg).is_some());
        assert!(bg.to_string().contains("append journal /t/0.jnl"), "{bg}");
        let odd = Error::io("pread", "/t/1.sst", std::io::Error::other("odd"));
        assert_eq!(odd.duplicate().to_string(), odd.to_string());
    }
}
