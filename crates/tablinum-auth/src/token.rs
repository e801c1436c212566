//! Client tokens, roles and the cluster secret: their text forms, how they
//! are made (from the operating system's random source) and hashed.
//!
//! A client token is `tbt1.<id>.<secret>`: `id` is 12 hex digits (public,
//! shown by `tablinum token list`), `secret` is 64 hex digits (256 random
//! bits). The manager keeps only SHA-256 of the secret; a 256-bit random
//! secret needs no slow hash. The cluster credential is `tbc1.<secret>`
//! with the cluster secret's 64 hex digits.
//!
//! Never formats a secret: [`Credential`] prints as its kind and id only.

use sha2::{Digest, Sha256};

use crate::Error;

/// Prefix of a client token.
pub const TOKEN_PREFIX: &str = "tbt1.";
/// Prefix of the cluster credential.
pub const CLUSTER_PREFIX: &str = "tbc1.";
/// Hex digits of a token id.
pub const TOKEN_ID_HEX: usize = 12;
/// Hex digits of a secret (a token's or the cluster's): 256 bits.
pub const SECRET_HEX: usize = 64;
/// Longest credential accepted, bytes (the longest valid one is a token:
/// 5 + 12 + 1 + 64).
pub const CREDENTIAL_BYTES_MAX: usize = 128;

/// What a client token allows. Each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Role {
    /// Reads, scans, queries, table maps, cluster status, status pages.
    Read = 1,
    /// Read, plus writes and flushes.
    Write = 2,
    /// Write, plus creating and dropping tables and managing tokens.
    Admin = 3,
}

impl Role {
    /// The role of its wire number (`tablinum.v1.Role`), if any.
    pub fn from_i32(v: i32) -> Option<Role> {
        match v {
            1 => Some(Role::Read),
            2 => Some(Role::Write),
            3 => Some(Role::Admin),
            _ => None,
        }
    }

    /// Its name as the CLI spells it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }

    /// Parses `read`, `write` or `admin`.
    pub fn parse(s: &str) -> Result<Role, String> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(format!("role {other:?} is not one of read, write, admin")),
        }
    }
}

/// A credential a caller presents: a client token or the cluster
/// credential. Its `Debug` and `Display` never show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(String);

impl Credential {
    /// Checks the form of `s` (prefix, lengths, hex digits) without
    /// knowing whether any cluster accepts it.
    pub fn parse(s: &str) -> Result<Credential, Error> {
        let s = s.trim();
        if s.len() > CREDENTIAL_BYTES_MAX {
            return Err(Error::Malformed(format!(
                "credential is {} bytes; the longest valid one is {CREDENTIAL_BYTES_MAX}",
                s.len()
            )));
        }
        if let Some(rest) = s.strip_prefix(TOKEN_PREFIX) {
            let (id, secret) = rest.split_once('.').ok_or_else(|| {
                Error::Malformed("token has no secret part (expected tbt1.<id>.<secret>)".into())
            })?;
            check_hex("token id", id, TOKEN_ID_HEX)?;
            check_hex("token secret", secret, SECRET_HEX)?;
        } else if let Some(secret) = s.strip_prefix(CLUSTER_PREFIX) {
            check_hex("cluster secret", secret, SECRET_HEX)?;
        } else {
            return Err(Error::Malformed(
                "credential is neither a token (tbt1.…) nor a cluster credential (tbc1.…)".into(),
            ));
        }
        Ok(Credential(s.to_string()))
    }

    /// The whole credential, for the `authorization` header. Handle with care.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The token id, for a client token.
    pub fn token_id(&self) -> Option<&str> {
        self.0
            .strip_prefix(TOKEN_PREFIX)
            .and_then(|r| r.split('.').next())
    }

    /// Whether this is the cluster credential.
    pub fn is_cluster(&self) -> bool {
        self.0.starts_with(CLUSTER_PREFIX)
    }
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credential({self})")
    }
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.token_id() {
            Some(id) => write!(f, "token {id}"),
            None => f.write_str("cluster credential"),
        }
    }
}

fn check_hex(what: &str, s: &str, len: usize) -> Result<(), Error> {
    if s.len() != len
        || !s
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err(Error::Malformed(format!(
            "{what} must be {len} lowercase hex digits"
        )));
    }
    Ok(())
}

/// `n` bytes from the operating system's random source.
pub fn random_bytes<const N: usize>() -> Result<[u8; N], Error> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b)
        .map_err(|e| Error::Io(format!("no random bytes from the operating system: {e}")))?;
    Ok(b)
}

/// Lowercase hex of `b`.
pub fn hex(b: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(b.len() * 2);
    for x in b {
        s.push(char::from(DIGITS[usize::from(x >> 4)]));
        s.push(char::from(DIGITS[usize::from(x & 15)]));
    }
    s
}

/// SHA-256 of `b`.
pub fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Equality of two digests in time independent of where they differ.
pub fn digest_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// A token just made: the text to hand out once, and what the manager
/// keeps of it.
pub struct NewToken {
    /// `tbt1.<id>.<secret>`: shown once, stored nowhere by the cluster.
    pub token: Credential,
    /// Its id.
    pub id: String,
    /// SHA-256 of its secret part.
    pub secret_sha256: [u8; 32],
}

impl NewToken {
    /// A fresh random token.
    pub fn generate() -> Result<NewToken, Error> {
        let id = hex(&random_bytes::<{ TOKEN_ID_HEX / 2 }>()?);
        let secret = hex(&random_bytes::<{ SECRET_HEX / 2 }>()?);
        let secret_sha256 = sha256(secret.as_bytes());
        Ok(NewToken {
            token: Credential(format!("{TOKEN_PREFIX}{id}.{secret}")),
            id,
            secret_sha256,
        })
    }
}

/// The secret the manager and its servers share. Its `Debug` never shows it.
#[derive(Clone)]
pub struct ClusterSecret {
    hex: String,
}

impl std::fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

impl ClusterSecret {
    /// A fresh random secret.
    pub fn generate() -> Result<ClusterSecret, Error> {
        Ok(ClusterSecret {
            hex: hex(&random_bytes::<{ SECRET_HEX / 2 }>()?),
        })
    }

    /// Parses the text of a secret file (64 hex digits; surrounding white
    /// space ignored).
    pub fn parse(text: &str) -> Result<ClusterSecret, Error> {
        let t = text.trim();
        check_hex("cluster secret", t, SECRET_HEX)?;
        Ok(ClusterSecret { hex: t.to_string() })
    }

    /// The text to store in the secret file.
    pub fn file_text(&self) -> String {
        format!("{}\n", self.hex)
    }

    /// The credential servers present to each other.
    pub fn credential(&self) -> Credential {
        Credential(format!("{CLUSTER_PREFIX}{}", self.hex))
    }

    /// SHA-256 of the secret part of [`ClusterSecret::credential`].
    pub fn sha256(&self) -> [u8; 32] {
        sha256(self.hex.as_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_parse_and_never_print_their_secret() {
        let t = NewToken::generate().unwrap();
        let text = t.token.expose().to_string();
        assert!(text.starts_with("tbt1."));
        assert_eq!(text.len(), 5 + 12 + 1 + 64);
        let c = Credential::parse(&text).unwrap();
        assert_eq!(c.token_id(), Some(t.id.as_str()));
        let secret = text.rsplit('.').next().unwrap();
        assert!(!format!("{c:?} {c}").contains(secret));
        assert_eq!(sha256(secret.as_bytes()), t.secret_sha256);
        assert_ne!(NewToken::generate().unwrap().id, t.id);
    }

    #[test]
    fn malformed_credentials_are_named() {
        let bad = |s: &str| Credential::parse(s).unwrap_err().to_string();
        assert!(bad("hello").contains("neither a token"));
        assert!(bad("tbt1.abc").contains("no secret part"));
        assert!(bad("tbt1.abc.def").contains("token id must be 12"));
        assert!(bad(&format!("tbt1.{}.{}", "a".repeat(12), "G".repeat(64))).contains("secret"));
        assert!(bad(&"x".repeat(4000)).contains("4000 bytes"));
        assert!(bad(&format!("tbc1.{}", "a".repeat(63))).contains("cluster secret"));
    }

    #[test]
    fn cluster_secret_round_trips() {
        let s = ClusterSecret::generate().unwrap();
        let back = ClusterSecret::parse(&s.file_text()).unwrap();
        assert_eq!(back.credential(), s.credential());
        assert!(s.credential().is_cluster());
        assert!(!format!("{s:?} {}", s.credential()).contains(&s.hex));
        assert!(ClusterSecret::parse("short").is_err());
    }

    #[test]
    fn digests_compare() {
        let a = sha256(b"a");
        let mut b = a;
        assert!(digest_eq(&a, &b));
        b[31] ^= 1;
        assert!(!digest_eq(&a, &b));
        assert_eq!(hex(&[0, 0xab, 0xff]), "00abff");
    }

    #[test]
    fn roles_order_and_parse() {
        assert!(Role::Admin > Role::Write && Role::Write > Role::Read);
        assert_eq!(Role::parse("write"), Ok(Role::Write));
        assert!(Role::parse("root").unwrap_err().contains("root"));
        assert_eq!(Role::from_i32(3), Some(Role::Admin));
        assert_eq!(Role::from_i32(0), None);
    }
}
