//! Member proofs: how a cluster member shows it knows the cluster secret
//! without sending it.
//!
//! Every call of a member carries `tbm1.<ms>.<nonce>.<mac>`: the sender's
//! clock in Unix milliseconds, 16 bytes never used before (a per-process
//! random prefix and a counter) and HMAC-SHA256 over both, keyed with
//! SHA-256 of the cluster secret (what every verifier holds). A captured
//! proof reveals neither the secret nor its digest, is accepted once (the
//! verifier remembers every nonce for as long as its time is acceptable)
//! and only within [`MEMBER_PROOF_SKEW_MS_MAX`] of the verifier's clock.
//!
//! Never formats a key; knows nothing of tonic.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use sha2::Sha256;

use crate::token::{hex, random_bytes};

/// Prefix of a member proof.
pub const MEMBER_PREFIX: &str = "tbm1.";
/// A proof whose time is further than this from the verifier's clock is
/// refused, ms: members' clocks must agree this well.
pub const MEMBER_PROOF_SKEW_MS_MAX: u64 = 30_000;
/// Nonces remembered at most; beyond it new member proofs are refused
/// until old ones age out (a member sending more than this many calls per
/// skew window is not expected).
pub const MEMBER_NONCES_MAX: usize = 4_000_000;
/// Digits of the time field (Unix ms until the year 2286).
const MS_DIGITS: usize = 13;
const NONCE_HEX: usize = 32;
const MAC_HEX: usize = 64;

/// Unix time now, ms.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn mac(key: &[u8; 32], ms: &str, nonce: &str) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(b"tablinum-member-v1\n");
    m.update(ms.as_bytes());
    m.update(b"\n");
    m.update(nonce.as_bytes());
    m.finalize().into_bytes().into()
}

/// Makes member proofs for one process.
#[derive(Clone)]
pub struct Prover {
    key: [u8; 32],
    prefix: [u8; 8],
    counter: Arc<AtomicU64>,
}

impl std::fmt::Debug for Prover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Prover(…)")
    }
}

impl Prover {
    /// Proofs keyed with `key` (SHA-256 of the cluster secret). Nonces
    /// need to be unique, not secret: without the operating system's
    /// random source their prefix is the clock's nanoseconds and the
    /// process id.
    pub fn new(key: [u8; 32]) -> Prover {
        let prefix = random_bytes::<8>().unwrap_or_else(|_| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            (nanos ^ (u64::from(std::process::id()) << 40)).to_be_bytes()
        });
        Prover {
            key,
            prefix,
            counter: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A fresh proof at `now_ms`.
    pub fn proof_at(&self, now_ms: u64) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&self.prefix);
        nonce[8..].copy_from_slice(&n.to_be_bytes());
        let ms = format!("{now_ms:0MS_DIGITS$}");
        let nonce = hex(&nonce);
        let m = hex(&mac(&self.key, &ms, &nonce));
        format!("{MEMBER_PREFIX}{ms}.{nonce}.{m}")
    }

    /// A fresh proof now.
    pub fn proof(&self) -> String {
        self.proof_at(unix_ms())
    }
}

/// Why a proof was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not of the form `tbm1.<ms>.<nonce>.<mac>`.
    Malformed(&'static str),
    /// Its time is too far from the verifier's clock.
    Skewed {
        /// How far, ms.
        off_ms: u64,
    },
    /// Not made with this cluster's secret.
    Wrong,
    /// Seen before.
    Replayed,
    /// Too many recent nonces to remember one more.
    Overloaded,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Malformed(m) => write!(f, "malformed member proof: {m}"),
            Refusal::Skewed { off_ms } => write!(
                f,
                "member proof is {off_ms} ms off this server's clock (at most \
                 {MEMBER_PROOF_SKEW_MS_MAX} ms): replayed, or the clocks disagree"
            ),
            Refusal::Wrong => f.write_str("the member proof does not match this cluster's secret"),
            Refusal::Replayed => f.write_str("member proof replayed (each proof is good once)"),
            Refusal::Overloaded => f.write_str("too many member proofs to remember; retry"),
        }
    }
}

/// Checks member proofs and remembers their nonces.
pub struct Checker {
    key: [u8; 32],
    /// Nonce → the proof's time, ms, while that time is acceptable.
    seen: Mutex<Seen>,
}

struct Seen {
    nonces: HashMap<[u8; 16], u64>,
    pruned_at_ms: u64,
}

fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Checker {
    /// Checks proofs keyed with `key` (SHA-256 of the cluster secret).
    pub fn new(key: [u8; 32]) -> Checker {
        Checker {
            key,
            seen: Mutex::new(Seen {
                nonces: HashMap::new(),
                pruned_at_ms: 0,
            }),
        }
    }

    /// Accepts `proof` (the whole `tbm1.…` text) once, at `now_ms`.
    pub fn check_at(&self, proof: &str, now_ms: u64) -> Result<(), Refusal> {
        let rest = proof
            .strip_prefix(MEMBER_PREFIX)
            .ok_or(Refusal::Malformed("no tbm1. prefix"))?;
        let mut parts = rest.split('.');
        let (Some(ms), Some(nonce), Some(m), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(Refusal::Malformed("expected tbm1.<ms>.<nonce>.<mac>"));
        };
        if ms.len() != MS_DIGITS || !ms.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Refusal::Malformed("the time is not 13 digits"));
        }
        let t: u64 = ms.parse().map_err(|_| Refusal::Malformed("bad time"))?;
        let nonce_bytes = (nonce.len() == NONCE_HEX)
            .then(|| parse_hex::<16>(nonce))
            .flatten()
            .ok_or(Refusal::Malformed("the nonce is not 32 hex digits"))?;
        let given = (m.len() == MAC_HEX)
            .then(|| parse_hex::<32>(m))
            .flatten()
            .ok_or(Refusal::Malformed("the mac is not 64 hex digits"))?;
        let expected = mac(&self.key, ms, nonce);
        // Constant time: the digest compare of the token module.
        if !crate::token::digest_eq(&given, &expected) {
            return Err(Refusal::Wrong);
        }
        let off_ms = t.abs_diff(now_ms);
        if off_ms > MEMBER_PROOF_SKEW_MS_MAX {
            return Err(Refusal::Skewed { off_ms });
        }
        let mut seen = self.seen.lock();
        let oldest = now_ms.saturating_sub(MEMBER_PROOF_SKEW_MS_MAX);
        if now_ms.saturating_sub(seen.pruned_at_ms) >= 1_000 {
            // A proof older than the skew is refused by its time: its
            // nonce need not be remembered.
            seen.nonces.retain(|_, at| *at >= oldest);
            seen.pruned_at_ms = now_ms;
        }
        if seen.nonces.contains_key(&nonce_bytes) {
            return Err(Refusal::Replayed);
        }
        if seen.nonces.len() >= MEMBER_NONCES_MAX {
            return Err(Refusal::Overloaded);
        }
        seen.nonces.insert(nonce_bytes, t);
        Ok(())
    }

    /// [`Checker::check_at`] on this machine's clock.
    pub fn check(&self, proof: &str) -> Result<(), Refusal> {
        self.check_at(proof, unix_ms())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_proof_is_good_once_within_the_skew_and_only_for_its_key() {
        let key = [7u8; 32];
        let p = Prover::new(key);
        let c = Checker::new(key);
        let now = 1_800_000_000_000;
        let a = p.proof_at(now);
        assert!(a.len() <= crate::token::CREDENTIAL_BYTES_MAX, "{}", a.len());
        assert_eq!(c.check_at(&a, now + 10), Ok(()));
        assert_eq!(c.check_at(&a, now + 20), Err(Refusal::Replayed));
        // Another proof of the same prover is new.
        assert_eq!(c.check_at(&p.proof_at(now), now), Ok(()));
        // Too old, too new.
        assert!(matches!(
            c.check_at(&p.proof_at(now - 31_000), now),
            Err(Refusal::Skewed { off_ms: 31_000 })
        ));
        assert!(matches!(
            c.check_at(&p.proof_at(now + 31_000), now),
            Err(Refusal::Skewed { .. })
        ));
        // Another cluster's key, a changed field.
        let other = Prover::new([8u8; 32]);
        assert_eq!(c.check_at(&other.proof_at(now), now), Err(Refusal::Wrong));
        let b = p.proof_at(now);
        let forged = b.replacen(&format!("{now}"), &format!("{}", now + 1), 1);
        assert_eq!(c.check_at(&forged, now), Err(Refusal::Wrong));
        // Once its time is past the skew, a replay is refused by its time
        // even after the nonce is forgotten.
        let late = now + MEMBER_PROOF_SKEW_MS_MAX + 5_000;
        assert!(matches!(c.check_at(&a, late), Err(Refusal::Skewed { .. })));
    }

    #[test]
    fn malformed_proofs_are_named_and_never_panic() {
        let c = Checker::new([1u8; 32]);
        for bad in [
            "",
            "tbm1.",
            "tbm1.1.2.3",
            "tbm1.180000000000x.00000000000000000000000000000000.00",
            "tbm1.1800000000000.zz000000000000000000000000000000.0000000000000000000000000000000000000000000000000000000000000000",
            "tbm1.1800000000000.00000000000000000000000000000000.0000000000000000000000000000000000000000000000000000000000000000.x",
            "tbm1.1800000000000.é0000000000000000000000000000000.0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            assert!(
                matches!(c.check_at(bad, 1_800_000_000_000), Err(Refusal::Malformed(_))),
                "{bad:?}"
            );
        }
    }
}
