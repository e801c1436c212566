//! Who is calling.
//!
//! - [`token`]: client tokens (`tbt1.<id>.<secret>`) with a [`Role`], and
//!   the cluster secret (`tbc1.<secret>`) that the manager and its servers
//!   share; how they are made, parsed and hashed;
//! - [`verifier`]: the [`Verifier`] every listener checks callers with (the
//!   cluster secret's hash and the valid tokens' hashes, never a secret),
//!   the [`Principal`] it yields and the [`Need`] of each call; its tonic
//!   interceptors for servers and clients;
//! - [`proof`]: member proofs (`tbm1.…`) and client token proofs
//!   (`tbp1.…`), with which callers show they hold a secret without
//!   sending it, each good once and at one server, and the answer with
//!   which that server shows it is a member;
//! - [`files`]: secret files (mode 0600, written atomically) and the
//!   user's credentials file (one token per cluster address).
//!
//! Never logs, prints or formats a secret: [`Credential`]'s `Debug` and
//! `Display` show only a token's id, and every error names what was wrong
//! without the secret.

pub mod files;
pub mod proof;
pub mod token;
pub mod verifier;

pub use token::{ClusterSecret, Credential, NewToken, Role};
pub use verifier::{
    authorize, Answering, AnsweringLayer, Authenticator, Bearer, CallPath, Caller, Grant, Need,
    Principal, Verifier,
};

/// What went wrong reading or checking credentials; the message names it
/// and never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// A credential (or a file holding one) is not in the expected form.
    Malformed(String),
    /// A file could not be read or written.
    Io(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Malformed(m) | Error::Io(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}
