//! Proofs: how a caller shows it holds a secret without sending it, and
//! how the server it called shows it belongs to the cluster.
//!
//! Every call carries a fresh proof, made for one server (its *audience*:
//! the address the tablet map names it by, or [`MANAGER_AUDIENCE`]):
//!
//! - a member (manager, tablet or scan server) sends
//!   `tbm1.<ms>.<nonce>.<mac>.<audience>`: HMAC-SHA256 over the time, the
//!   nonce and the audience, keyed with SHA-256 of the cluster secret
//!   (what every verifier holds);
//! - a client sends `tbp1.<id>.<ms>.<nonce>.<masked>.<audience>`: its
//!   token's 32 secret bytes XOR HMAC-SHA256 over the id, time, nonce and
//!   audience keyed with SHA-256 of the secret's text (what verifiers hold
//!   of a token). A verifier unmasks the secret and checks its digest; a
//!   listener that is not a verifier learns nothing from it (as in SCRAM's
//!   client proof).
//!
//! A verifier accepts a proof once (it remembers every nonce for as long
//! as the proof's time is acceptable), only within
//! [`PROOF_SKEW_MS_MAX`] of its clock, never one dated before the verifier
//! was made (a restarted server has forgotten the nonces its predecessor
//! saw, so a proof captured before the restart is refused by its time),
//! and only when it is the proof's audience: a proof captured on the
//! wire, or received by a process that took a dead server's port, is good
//! nowhere else. Its answer carries
//! [`answer`]: HMAC-SHA256 of the proof keyed with the same digest, which
//! only a holder of that digest (a member) can make; the caller checks it
//! before it trusts a byte of the answer.
//!
//! Never formats a key or a secret; knows nothing of tonic.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use parking_lot::Mutex;
use sha2::Sha256;

use crate::token::{digest_eq, hex, random_bytes, sha256, SECRET_HEX, TOKEN_ID_HEX};

/// Prefix of a member proof.
pub const MEMBER_PREFIX: &str = "tbm1.";
/// Prefix of a client token proof.
pub const TOKEN_PROOF_PREFIX: &str = "tbp1.";
/// The audience of calls to the manager (clients reach it by whatever
/// address they were given, so it is named by its role).
pub const MANAGER_AUDIENCE: &str = "manager";
/// A proof whose time is further than this from the verifier's clock is
/// refused, ms: members' and clients' clocks must agree this well.
pub const PROOF_SKEW_MS_MAX: u64 = 30_000;
/// Nonces remembered at most; beyond it new proofs are refused until old
/// ones age out (more than this many calls per skew window to one server
/// are not expected).
pub const NONCES_MAX: usize = 4_000_000;
/// Longest audience, bytes (a host name and port).
pub const AUDIENCE_BYTES_MAX: usize = 255;
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

fn hmac(key: &[u8; 32], parts: &[&str]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p.as_bytes());
        m.update(b"\n");
    }
    m.finalize().into_bytes().into()
}

fn member_mac(key: &[u8; 32], ms: &str, nonce: &str, audience: &str) -> [u8; 32] {
    hmac(key, &["tablinum-member-v1", ms, nonce, audience])
}

fn token_mask(key: &[u8; 32], id: &str, ms: &str, nonce: &str, audience: &str) -> [u8; 32] {
    hmac(key, &["tablinum-token-v1", id, ms, nonce, audience])
}

fn xor(a: &[u8; 32], b: &[u8; 32]) -> [u8; 32] {
    std::array::from_fn(|i| a[i] ^ b[i])
}

/// The answer a server gives to the call that carried `proof`, keyed with
/// the digest the proof was checked against: 64 hex digits.
pub fn answer(key: &[u8; 32], proof: &str) -> String {
    hex(&hmac(key, &["tablinum-answer-v1", proof]))
}

/// Token `id`'s `digest` sealed with the cluster's `key` (its own inverse):
/// what a heartbeat answer carries instead of the digest.
pub fn seal_grant(key: &[u8; 32], id: &str, digest: &[u8; 32]) -> [u8; 32] {
    xor(digest, &hmac(key, &["tablinum-grant-v1", id]))
}

/// Unique nonces for one process: a random prefix and a counter. Nonces
/// need to be unique, not secret: without the operating system's random
/// source the prefix is the clock's nanoseconds and the process id.
#[derive(Clone)]
struct Nonces {
    prefix: [u8; 8],
    counter: Arc<AtomicU64>,
}

impl Nonces {
    fn new() -> Nonces {
        let prefix = random_bytes::<8>().unwrap_or_else(|_| {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0);
            (nanos ^ (u64::from(std::process::id()) << 40)).to_be_bytes()
        });
        Nonces {
            prefix,
            counter: Arc::new(AtomicU64::new(0)),
        }
    }

    fn next(&self) -> String {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut nonce = [0u8; 16];
        nonce[..8].copy_from_slice(&self.prefix);
        nonce[8..].copy_from_slice(&n.to_be_bytes());
        hex(&nonce)
    }
}

/// Makes proofs of one credential for one process.
#[derive(Clone)]
pub struct Prover {
    kind: ProverKind,
    nonces: Nonces,
}

#[derive(Clone)]
enum ProverKind {
    /// SHA-256 of the cluster secret.
    Member { key: [u8; 32] },
    /// A client token: its id, secret bytes and the digest verifiers hold.
    Token {
        id: String,
        secret: [u8; 32],
        key: [u8; 32],
    },
}

impl std::fmt::Debug for Prover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.kind {
            ProverKind::Member { .. } => f.write_str("Prover(member)"),
            ProverKind::Token { id, .. } => write!(f, "Prover(token {id})"),
        }
    }
}

/// A proof made for one call, and the answer that proves the server.
#[derive(Clone, PartialEq, Eq)]
pub struct Proof {
    /// What travels (`tbm1.…` or `tbp1.…`).
    pub text: String,
    /// The answer a member of the cluster gives to it.
    pub expected_answer: String,
}

impl std::fmt::Debug for Proof {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Proof(…)")
    }
}

impl Prover {
    /// Member proofs keyed with `key` (SHA-256 of the cluster secret).
    pub fn member(key: [u8; 32]) -> Prover {
        Prover {
            kind: ProverKind::Member { key },
            nonces: Nonces::new(),
        }
    }

    /// Proofs of client token `id` whose secret part is `secret_hex`
    /// (64 lowercase hex digits); None if it is not of that form.
    pub fn token(id: &str, secret_hex: &str) -> Option<Prover> {
        if id.len() != TOKEN_ID_HEX || secret_hex.len() != SECRET_HEX {
            return None;
        }
        let secret = parse_hex::<32>(secret_hex)?;
        Some(Prover {
            kind: ProverKind::Token {
                id: id.to_string(),
                secret,
                key: sha256(hex(&secret).as_bytes()),
            },
            nonces: Nonces::new(),
        })
    }

    /// A fresh proof for `audience` at `now_ms`.
    pub fn proof_at(&self, audience: &str, now_ms: u64) -> Proof {
        let ms = format!("{now_ms:0MS_DIGITS$}");
        let nonce = self.nonces.next();
        let (text, key) = match &self.kind {
            ProverKind::Member { key } => {
                let m = hex(&member_mac(key, &ms, &nonce, audience));
                (format!("{MEMBER_PREFIX}{ms}.{nonce}.{m}.{audience}"), key)
            }
            ProverKind::Token { id, secret, key } => {
                let masked = hex(&xor(secret, &token_mask(key, id, &ms, &nonce, audience)));
                (
                    format!("{TOKEN_PROOF_PREFIX}{id}.{ms}.{nonce}.{masked}.{audience}"),
                    key,
                )
            }
        };
        Proof {
            expected_answer: answer(key, &text),
            text,
        }
    }

    /// A fresh proof for `audience` now.
    pub fn proof(&self, audience: &str) -> Proof {
        self.proof_at(audience, unix_ms())
    }
}

/// Why a proof was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Not of the expected form.
    Malformed(&'static str),
    /// Its time is too far from the verifier's clock.
    Skewed {
        /// How far, ms.
        off_ms: u64,
    },
    /// Not made with this cluster's secret (member proofs).
    Wrong,
    /// A token proof whose id is unknown or revoked, or whose secret is
    /// wrong (the two read the same).
    UnknownToken(String),
    /// Made for another server.
    OtherAudience {
        /// Whom it was made for.
        audience: String,
        /// Whom this verifier answers as.
        names: Vec<String>,
    },
    /// Made before this verifier was (a server restarted since): its
    /// predecessor may have accepted it.
    BeforeStart {
        /// How long before, ms.
        early_ms: u64,
    },
    /// Seen before.
    Replayed,
    /// Too many recent nonces to remember one more.
    Overloaded,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Malformed(m) => write!(f, "malformed proof: {m}"),
            Refusal::Skewed { off_ms } => write!(
                f,
                "the proof is {off_ms} ms off this server's clock (at most \
                 {PROOF_SKEW_MS_MAX} ms): replayed, or the clocks disagree"
            ),
            Refusal::Wrong => f.write_str("the member proof does not match this cluster's secret"),
            Refusal::UnknownToken(id) => {
                write!(
                    f,
                    "token {id} is unknown or revoked, or its secret is wrong"
                )
            }
            Refusal::OtherAudience { audience, names } => write!(
                f,
                "the proof was made for {audience:?}; this server is {} (a proof is good \
                 only at the server it was made for)",
                if names.is_empty() {
                    "not serving yet".to_string()
                } else {
                    names
                        .iter()
                        .map(|n| format!("{n:?}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                }
            ),
            Refusal::BeforeStart { early_ms } => write!(
                f,
                "the proof was made {early_ms} ms before this server started; retry with a \
                 fresh one (a proof made before a restart may have been used already)"
            ),
            Refusal::Replayed => f.write_str("proof replayed (each proof is good once)"),
            Refusal::Overloaded => f.write_str("too many proofs to remember; retry"),
        }
    }
}

pub(crate) fn parse_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// The fields of a proof after its prefix and id.
struct Fields<'a> {
    ms: &'a str,
    t: u64,
    nonce: [u8; 16],
    nonce_hex: &'a str,
    mac: [u8; 32],
    audience: &'a str,
}

/// Splits `<ms>.<nonce>.<mac>.<audience>`.
fn fields(rest: &str) -> Result<Fields<'_>, Refusal> {
    let mut parts = rest.splitn(4, '.');
    let (Some(ms), Some(nonce_hex), Some(m), Some(audience)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed(
            "expected <ms>.<nonce>.<mac>.<audience> after the prefix",
        ));
    };
    if ms.len() != MS_DIGITS || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Refusal::Malformed("the time is not 13 digits"));
    }
    let t: u64 = ms.parse().map_err(|_| Refusal::Malformed("bad time"))?;
    let nonce = (nonce_hex.len() == NONCE_HEX)
        .then(|| parse_hex::<16>(nonce_hex))
        .flatten()
        .ok_or(Refusal::Malformed("the nonce is not 32 hex digits"))?;
    let mac = (m.len() == MAC_HEX)
        .then(|| parse_hex::<32>(m))
        .flatten()
        .ok_or(Refusal::Malformed("the mac is not 64 hex digits"))?;
    if audience.is_empty()
        || audience.len() > AUDIENCE_BYTES_MAX
        || !audience.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(Refusal::Malformed(
            "the audience is empty, too long or not printable text",
        ));
    }
    Ok(Fields {
        ms,
        t,
        nonce,
        nonce_hex,
        mac,
        audience,
    })
}

/// What a verifier checks proofs with: the cluster's key, the names it
/// answers as, and the nonces it has seen.
pub struct Checker {
    key: [u8; 32],
    names: parking_lot::RwLock<Vec<String>>,
    /// When this checker was made, Unix ms: older proofs are refused.
    born_ms: u64,
    /// The (caller, nonce) digests of accepted proofs.
    seen: Mutex<Seen>,
}

/// Accepted nonces in three generations, the newest first, rotated every
/// [`PROOF_SKEW_MS_MAX`]: a nonce stays remembered at least twice the
/// skew after it was accepted, as long as its proof's time can be
/// acceptable (up to the skew ahead of the clock, then the skew behind),
/// and forgetting is a swap, not a scan of every nonce.
struct Seen {
    generations: [HashSet<[u8; 16]>; 3],
    rotated_at_ms: u64,
}

/// A checked proof: who made it and the key its answer is made with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Checked {
    /// A member of the cluster.
    Member,
    /// The holder of token `id`.
    Token {
        /// The token's id.
        id: String,
    },
}

impl Checker {
    /// Checks proofs keyed with `key` (SHA-256 of the cluster secret).
    /// Until [`Checker::answer_as`] names it, the checker is nobody's
    /// audience and refuses every proof.
    pub fn new(key: [u8; 32]) -> Checker {
        Checker {
            key,
            names: parking_lot::RwLock::new(Vec::new()),
            born_ms: unix_ms(),
            seen: Mutex::new(Seen {
                generations: Default::default(),
                rotated_at_ms: 0,
            }),
        }
    }

    /// The audiences this server answers as (its addresses in the tablet
    /// map, and [`MANAGER_AUDIENCE`] where the manager runs).
    pub fn answer_as(&self, names: Vec<String>) {
        *self.names.write() = names;
    }

    /// The key answers to member proofs are made with.
    pub fn member_key(&self) -> &[u8; 32] {
        &self.key
    }

    /// Accepts member proof `proof` (the whole `tbm1.…` text) once, at `now_ms`.
    pub fn check_member_at(&self, proof: &str, now_ms: u64) -> Result<(), Refusal> {
        let rest = proof
            .strip_prefix(MEMBER_PREFIX)
            .ok_or(Refusal::Malformed("no tbm1. prefix"))?;
        let f = fields(rest)?;
        let expected = member_mac(&self.key, f.ms, f.nonce_hex, f.audience);
        if !digest_eq(&f.mac, &expected) {
            return Err(Refusal::Wrong);
        }
        self.fresh(&f, "", now_ms)
    }

    /// Accepts token proof `proof` (the whole `tbp1.…` text) once, at
    /// `now_ms`, when `stored` (what the verifier holds of the token, None
    /// if it holds nothing) matches the secret it carries. Returns the
    /// token's id. The work and the refusal are the same whether or not
    /// the id is known.
    pub fn check_token_at(
        &self,
        proof: &str,
        stored: impl FnOnce(&str) -> Option<[u8; 32]>,
        now_ms: u64,
    ) -> Result<String, Refusal> {
        let rest = proof
            .strip_prefix(TOKEN_PROOF_PREFIX)
            .ok_or(Refusal::Malformed("no tbp1. prefix"))?;
        let (id, rest) = rest
            .split_once('.')
            .ok_or(Refusal::Malformed("expected tbp1.<id>.<ms>.…"))?;
        if id.len() != TOKEN_ID_HEX
            || !id
                .bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        {
            return Err(Refusal::Malformed(
                "the token id is not 12 lowercase hex digits",
            ));
        }
        let f = fields(rest)?;
        let held = stored(id);
        let key = held.unwrap_or([0u8; 32]);
        let secret = xor(&f.mac, &token_mask(&key, id, f.ms, f.nonce_hex, f.audience));
        let matches = digest_eq(&sha256(hex(&secret).as_bytes()), &key);
        if held.is_none() || !matches {
            return Err(Refusal::UnknownToken(id.to_string()));
        }
        self.fresh(&f, id, now_ms)?;
        Ok(id.to_string())
    }

    /// The time, audience and nonce rules, after the proof's MAC held.
    fn fresh(&self, f: &Fields<'_>, caller: &str, now_ms: u64) -> Result<(), Refusal> {
        let off_ms = f.t.abs_diff(now_ms);
        if off_ms > PROOF_SKEW_MS_MAX {
            return Err(Refusal::Skewed { off_ms });
        }
        if f.t < self.born_ms {
            return Err(Refusal::BeforeStart {
                early_ms: self.born_ms - f.t,
            });
        }
        {
            let names = self.names.read();
            if !names.iter().any(|n| n == f.audience) {
                return Err(Refusal::OtherAudience {
                    audience: f.audience.to_string(),
                    names: names.clone(),
                });
            }
        }
        // Nonces are unique per prover; keyed with the caller too, so no
        // caller can use up another's.
        let k: [u8; 16] = {
            use sha2::Digest;
            let mut h = Sha256::new();
            h.update(caller.as_bytes());
            h.update(b"\n");
            h.update(f.nonce);
            let d: [u8; 32] = h.finalize().into();
            std::array::from_fn(|i| d[i])
        };
        let mut seen = self.seen.lock();
        if now_ms.saturating_sub(seen.rotated_at_ms) >= PROOF_SKEW_MS_MAX {
            seen.generations.rotate_right(1);
            seen.generations[0] = HashSet::new();
            seen.rotated_at_ms = now_ms;
        }
        if seen.generations.iter().any(|g| g.contains(&k)) {
            return Err(Refusal::Replayed);
        }
        if seen.generations.iter().map(|g| g.len()).sum::<usize>() >= NONCES_MAX {
            return Err(Refusal::Overloaded);
        }
        seen.generations[0].insert(k);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_800_000_000_000;

    fn checker(key: [u8; 32]) -> Checker {
        let mut c = Checker::new(key);
        c.answer_as(vec!["127.0.0.1:7001".into(), MANAGER_AUDIENCE.into()]);
        // Made long ago, so the tests' fixed times are after its start.
        c.born_ms = 0;
        c
    }

    #[test]
    fn a_proof_made_before_the_checker_is_refused_as_a_possible_replay() {
        let key = [7u8; 32];
        let p = Prover::member(key);
        let c = Checker::new(key);
        c.answer_as(vec![MANAGER_AUDIENCE.into()]);
        let born = c.born_ms;
        // Captured a second before a restart, replayed just after it.
        let old = p.proof_at(MANAGER_AUDIENCE, born - 1_000).text;
        assert_eq!(
            c.check_member_at(&old, born + 50),
            Err(Refusal::BeforeStart { early_ms: 1_000 })
        );
        let fresh = p.proof_at(MANAGER_AUDIENCE, born).text;
        assert_eq!(c.check_member_at(&fresh, born + 50), Ok(()));
    }

    #[test]
    fn a_member_proof_is_good_once_within_the_skew_for_its_audience_and_key() {
        let key = [7u8; 32];
        let p = Prover::member(key);
        let c = checker(key);
        let a = p.proof_at("127.0.0.1:7001", NOW).text;
        assert_eq!(c.check_member_at(&a, NOW + 10), Ok(()));
        assert_eq!(c.check_member_at(&a, NOW + 20), Err(Refusal::Replayed));
        // Another proof of the same prover is new.
        let m = p.proof_at(MANAGER_AUDIENCE, NOW).text;
        assert_eq!(c.check_member_at(&m, NOW), Ok(()));
        // Too old, too new.
        assert!(matches!(
            c.check_member_at(&p.proof_at("manager", NOW - 31_000).text, NOW),
            Err(Refusal::Skewed { off_ms: 31_000 })
        ));
        assert!(matches!(
            c.check_member_at(&p.proof_at("manager", NOW + 31_000).text, NOW),
            Err(Refusal::Skewed { .. })
        ));
        // Made for another server.
        let e = c
            .check_member_at(&p.proof_at("127.0.0.1:7002", NOW).text, NOW)
            .unwrap_err();
        assert!(matches!(e, Refusal::OtherAudience { .. }), "{e:?}");
        assert!(e.to_string().contains("\"127.0.0.1:7002\""), "{e}");
        // Another cluster's key, a changed field, a changed audience.
        let other = Prover::member([8u8; 32]);
        assert_eq!(
            c.check_member_at(&other.proof_at("manager", NOW).text, NOW),
            Err(Refusal::Wrong)
        );
        let b = p.proof_at("127.0.0.1:7002", NOW).text;
        let forged = b.replacen(&format!("{NOW}"), &format!("{}", NOW + 1), 1);
        assert_eq!(c.check_member_at(&forged, NOW), Err(Refusal::Wrong));
        let moved = b.replace("127.0.0.1:7002", "127.0.0.1:7001");
        assert_eq!(c.check_member_at(&moved, NOW), Err(Refusal::Wrong));
        // Once its time is past the skew, a replay is refused by its time
        // even after the nonce is forgotten.
        let late = NOW + PROOF_SKEW_MS_MAX + 5_000;
        assert!(matches!(
            c.check_member_at(&a, late),
            Err(Refusal::Skewed { .. })
        ));
    }

    #[test]
    fn a_token_proof_hides_the_secret_and_is_good_once_where_it_was_sent() {
        let t = crate::NewToken::generate().unwrap();
        let id = t.id.clone();
        let secret = t.token.expose().rsplit('.').next().unwrap().to_string();
        let p = Prover::token(&id, &secret).unwrap();
        let c = checker([1u8; 32]);
        let stored = |want: &str| (want == id).then_some(t.secret_sha256);
        let a = p.proof_at("127.0.0.1:7001", NOW);
        assert!(!a.text.contains(&secret), "{}", a.text);
        assert_eq!(c.check_token_at(&a.text, stored, NOW), Ok(id.clone()));
        assert_eq!(
            c.check_token_at(&a.text, stored, NOW),
            Err(Refusal::Replayed)
        );
        // The answer needs the stored digest; the caller expects exactly it.
        assert_eq!(answer(&t.secret_sha256, &a.text), a.expected_answer);
        assert_ne!(answer(&[0u8; 32], &a.text), a.expected_answer);
        // For another server: refused here.
        let b = p.proof_at("127.0.0.1:9999", NOW);
        assert!(matches!(
            c.check_token_at(&b.text, stored, NOW),
            Err(Refusal::OtherAudience { .. })
        ));
        // Its audience changed on the way: the unmasked secret is wrong.
        let moved = b.text.replace("127.0.0.1:9999", "127.0.0.1:7001");
        assert_eq!(
            c.check_token_at(&moved, stored, NOW),
            Err(Refusal::UnknownToken(id.clone()))
        );
        // A wrong secret and an unknown id read the same.
        let wrong = Prover::token(&id, &"0".repeat(64)).unwrap();
        let e1 = c
            .check_token_at(&wrong.proof_at("manager", NOW).text, stored, NOW)
            .unwrap_err();
        let stranger = crate::NewToken::generate().unwrap();
        let s2 = stranger.token.expose().rsplit('.').next().unwrap();
        let sp = Prover::token(&stranger.id, s2).unwrap();
        let e2 = c
            .check_token_at(&sp.proof_at("manager", NOW).text, stored, NOW)
            .unwrap_err();
        assert_eq!(
            e1.to_string().replace(&id, "ID"),
            e2.to_string().replace(&stranger.id, "ID")
        );
        // Too old.
        assert!(matches!(
            c.check_token_at(&p.proof_at("manager", NOW - 40_000).text, stored, NOW),
            Err(Refusal::Skewed { .. })
        ));
        // A grant's digest is sealed for the wire and unsealed by a member.
        let sealed = seal_grant(&[9u8; 32], &id, &t.secret_sha256);
        assert_ne!(sealed, t.secret_sha256);
        assert_eq!(seal_grant(&[9u8; 32], &id, &sealed), t.secret_sha256);
        assert_ne!(seal_grant(&[8u8; 32], &id, &sealed), t.secret_sha256);
    }

    #[test]
    fn a_nonce_is_remembered_while_its_proof_can_be_acceptable() {
        let key = [5u8; 32];
        let p = Prover::member(key);
        let c = checker(key);
        // Dated as far ahead as the skew allows: acceptable until the skew
        // past its time, twice the skew from now.
        let ahead = p.proof_at("manager", NOW + PROOF_SKEW_MS_MAX).text;
        assert_eq!(c.check_member_at(&ahead, NOW), Ok(()));
        for later in [
            NOW + PROOF_SKEW_MS_MAX / 2,
            NOW + PROOF_SKEW_MS_MAX,
            NOW + 3 * PROOF_SKEW_MS_MAX / 2,
            NOW + 2 * PROOF_SKEW_MS_MAX,
        ] {
            // Other proofs on the way rotate the generations.
            assert_eq!(
                c.check_member_at(&p.proof_at("manager", later).text, later),
                Ok(())
            );
            assert_eq!(
                c.check_member_at(&ahead, later),
                Err(Refusal::Replayed),
                "at +{} ms",
                later - NOW
            );
        }
    }

    #[test]
    fn a_checker_with_no_names_accepts_nothing() {
        let key = [3u8; 32];
        let c = Checker::new(key);
        let e = c
            .check_member_at(&Prover::member(key).proof_at("manager", NOW).text, NOW)
            .unwrap_err();
        assert!(e.to_string().contains("not serving yet"), "{e}");
    }

    #[test]
    fn malformed_proofs_are_named_and_never_panic() {
        let c = checker([1u8; 32]);
        let mac = "0".repeat(64);
        let nonce = "0".repeat(32);
        for bad in [
            String::new(),
            "tbm1.".into(),
            "tbm1.1.2.3".into(),
            format!("tbm1.180000000000x.{nonce}.{mac}.manager"),
            format!("tbm1.1800000000000.zz{}.{mac}.manager", &nonce[2..]),
            format!("tbm1.1800000000000.{nonce}.{mac}"),
            format!("tbm1.1800000000000.{nonce}.{mac}."),
            format!("tbm1.1800000000000.{nonce}.{mac}.a b"),
            format!("tbm1.1800000000000.{nonce}.{mac}.{}", "x".repeat(300)),
            format!("tbm1.1800000000000.é{}.{mac}.manager", &nonce[2..]),
        ] {
            assert!(
                matches!(c.check_member_at(&bad, NOW), Err(Refusal::Malformed(_))),
                "{bad:?}"
            );
        }
        for bad in [
            "tbp1.".to_string(),
            "tbp1.abc".into(),
            format!("tbp1.ABCDEF012345.1800000000000.{nonce}.{mac}.manager"),
            format!("tbp1.abcdef012345.1800000000000.{nonce}.{mac}"),
            format!(
                "tbp1.abcdef012345.1800000000000.{nonce}.{}.manager",
                &mac[1..]
            ),
        ] {
            assert!(
                matches!(
                    c.check_token_at(&bad, |_| None, NOW),
                    Err(Refusal::Malformed(_))
                ),
                "{bad:?}"
            );
        }
    }
}
