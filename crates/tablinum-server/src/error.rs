//! The server library's typed errors: why a role could not start or a
//! setting was refused. Each variant says what kind of thing failed; its
//! message names the setting, file or address and the cause, and never a
//! secret. Errors of calls (gRPC statuses) are not here: see
//! `status_from_engine` and the .proto.

use std::fmt;

/// Why the server library could not do what it was asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A setting is missing, out of range or inconsistent with another;
    /// the message names it.
    Config(String),
    /// A file, directory or socket could not be used; the message names it
    /// and the cause.
    Io(String),
    /// TLS material could not be read or used.
    Tls(String),
    /// The manager's metadata store could not be opened or read.
    Metadata(String),
    /// The cluster secret or a token file could not be read or written.
    Credentials(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Config(m) => write!(f, "bad setting: {m}"),
            Error::Io(m) => write!(f, "{m}"),
            Error::Tls(m) => write!(f, "TLS: {m}"),
            Error::Metadata(m) => write!(f, "manager metadata: {m}"),
            Error::Credentials(m) => write!(f, "credentials: {m}"),
        }
    }
}

impl std::error::Error for Error {}

/// Results of the server library.
pub type Result<T> = std::result::Result<T, Error>;
