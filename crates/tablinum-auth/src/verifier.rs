//! Checking callers: the [`Verifier`] (the cluster secret's hash and the
//! valid tokens' hashes), the [`Principal`] a credential proves, the
//! [`Need`] of a call, and the tonic interceptors that carry them: the
//! server's [`Authenticator`] (refuses calls without valid credentials and
//! records the principal) and the client's [`Bearer`] (adds the
//! `authorization` header to every call).
//!
//! A handler decides what it needs with [`authorize`]; a handler reached
//! without the authenticator fails closed (UNAUTHENTICATED).
//! Never holds a token's secret: only SHA-256 digests.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use crate::token::{digest_eq, sha256, ClusterSecret, Credential, Role, CLUSTER_PREFIX};

/// The metadata key (HTTP header) credentials travel in.
pub const AUTHORIZATION: &str = "authorization";

/// A valid token as a verifier knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// What it allows.
    pub role: Role,
    /// SHA-256 of its secret part.
    pub secret_sha256: [u8; 32],
}

/// Who a checked credential belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Principal {
    /// A member of the cluster (manager, tablet server) holding the cluster
    /// secret: may do anything, and alone may heartbeat.
    Cluster,
    /// A client token.
    Token {
        /// Its id.
        id: String,
        /// Its role.
        role: Role,
    },
}

/// What a call requires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// A read token or better.
    Read,
    /// A write token or better.
    Write,
    /// An admin token.
    Admin,
    /// The cluster credential.
    Cluster,
}

impl Principal {
    /// Whether this principal may make a call needing `need`.
    pub fn may(&self, need: Need) -> bool {
        match (self, need) {
            (Principal::Cluster, _) => true,
            (Principal::Token { .. }, Need::Cluster) => false,
            (Principal::Token { role, .. }, Need::Read) => *role >= Role::Read,
            (Principal::Token { role, .. }, Need::Write) => *role >= Role::Write,
            (Principal::Token { role, .. }, Need::Admin) => *role >= Role::Admin,
        }
    }
}

impl std::fmt::Display for Principal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Principal::Cluster => f.write_str("the cluster credential"),
            Principal::Token { id, role } => write!(f, "{} token {id}", role.name()),
        }
    }
}

/// What a call needs, as a message.
fn need_name(need: Need) -> &'static str {
    match need {
        Need::Read => "a read, write or admin token",
        Need::Write => "a write or admin token",
        Need::Admin => "an admin token",
        Need::Cluster => "the cluster credential (servers only)",
    }
}

struct Tokens {
    version: u64,
    grants: HashMap<String, Grant>,
    /// Until when the set is known to be current, on a server that learns
    /// it from the manager with a lease (None: no bound, as in the
    /// manager's own process).
    until: Option<std::time::Instant>,
}

/// Checks credentials against the cluster secret and the valid tokens.
/// Shared by every listener of a process; tokens are replaced as a whole
/// with a version (the manager's metadata is the source).
pub struct Verifier {
    /// Member proofs, keyed with SHA-256 of the cluster secret.
    members: crate::member::Checker,
    tokens: RwLock<Tokens>,
}

impl Verifier {
    /// A verifier of `secret` knowing no tokens yet (version 0).
    pub fn new(secret: &ClusterSecret) -> Arc<Verifier> {
        Arc::new(Verifier {
            members: crate::member::Checker::new(secret.sha256()),
            tokens: RwLock::new(Tokens {
                version: 0,
                grants: HashMap::new(),
                until: None,
            }),
        })
    }

    /// Replaces the valid tokens with `grants` (by id), unless the set held
    /// is already of `version` or newer.
    pub fn set_tokens(&self, version: u64, grants: HashMap<String, Grant>) {
        let mut t = self.tokens.write();
        if version > t.version || (version == t.version && grants != t.grants) {
            t.version = version;
            t.grants = grants;
        }
    }

    /// The token set is current until `until` (a lease from the manager):
    /// past it, client tokens are refused with UNAVAILABLE until the next
    /// renewal, so a server cut off from the manager never serves a token
    /// revoked meanwhile. Members are not affected.
    pub fn renew_tokens_until(&self, until: std::time::Instant) {
        let mut t = self.tokens.write();
        if t.until.is_none_or(|old| until > old) {
            t.until = Some(until);
        }
    }

    /// Whether token `id` is in the set held (not revoked).
    pub fn knows(&self, id: &str) -> bool {
        self.tokens.read().grants.contains_key(id)
    }

    /// The version of the token set held.
    pub fn tokens_version(&self) -> u64 {
        self.tokens.read().version
    }

    /// The principal `credential` proves, or why it proves none.
    pub fn check(&self, credential: &str) -> Result<Principal, Status> {
        let credential = credential.trim();
        if credential.starts_with(crate::member::MEMBER_PREFIX) {
            return self
                .members
                .check(credential)
                .map(|()| Principal::Cluster)
                .map_err(|r| Status::unauthenticated(r.to_string()));
        }
        let c = Credential::parse(credential)
            .map_err(|e| Status::unauthenticated(format!("bad credentials: {e}")))?;
        if c.is_cluster() {
            // Members prove the secret (`Bearer` does it); the secret
            // itself on the wire could be captured and replayed.
            return Err(Status::unauthenticated(
                "the cluster secret itself was sent: members send a member proof \
                 (tbm1.…) made from it, never the secret",
            ));
        }
        let id = c.token_id().unwrap_or_default();
        let secret = c.expose().rsplit('.').next().unwrap_or_default();
        // The digest is computed and compared whether or not the id is
        // known, and a refusal reads the same either way: neither the text
        // nor the time tells which token ids exist.
        let digest = sha256(secret.as_bytes());
        let t = self.tokens.read();
        if let Some(until) = t.until {
            let now = std::time::Instant::now();
            if now > until {
                return Err(Status::unavailable(format!(
                    "this server's token set expired {} ms ago (it has not heard from the \
                     manager within its token lease): tokens are refused until it does; \
                     try another server",
                    (now - until).as_millis()
                )));
            }
        }
        let g = t.grants.get(id);
        let matches = digest_eq(&digest, g.map_or(&[0u8; 32], |g| &g.secret_sha256));
        match g {
            Some(g) if matches => Ok(Principal::Token {
                id: id.to_string(),
                role: g.role,
            }),
            _ => Err(Status::unauthenticated(format!(
                "token {id} is unknown or revoked, or its secret is wrong"
            ))),
        }
    }

    /// The principal of an `authorization` header value (`Bearer <credential>`).
    pub fn check_header(&self, value: Option<&[u8]>) -> Result<Principal, Status> {
        let Some(v) = value else {
            return Err(Status::unauthenticated(
                "no credentials: pass a token (--token, TABLINUM_TOKEN or the credentials file)",
            ));
        };
        let v = std::str::from_utf8(v)
            .map_err(|_| Status::unauthenticated("bad credentials: authorization is not text"))?;
        let cred = v
            .strip_prefix("Bearer ")
            .or_else(|| v.strip_prefix("bearer "))
            .ok_or_else(|| {
                Status::unauthenticated("bad credentials: authorization must be `Bearer <token>`")
            })?;
        self.check(cred)
    }

    /// The principal of a gRPC call's metadata.
    pub fn check_metadata(&self, md: &MetadataMap) -> Result<Principal, Status> {
        self.check_header(md.get(AUTHORIZATION).map(|v| v.as_bytes()))
    }
}

/// The server interceptor: refuses calls without valid credentials
/// (UNAUTHENTICATED) and records the caller's [`Principal`] for
/// [`authorize`].
#[derive(Clone)]
pub struct Authenticator {
    verifier: Arc<Verifier>,
    certs_are_members: bool,
    needs: Option<CallNeeds>,
}

/// What a call needs by its gRPC path, and the call's name (see
/// [`Authenticator::with_needs`]).
pub type CallNeeds = fn(&str) -> Option<(Need, &'static str)>;

/// The gRPC path of a call (`/package.Service/Method`), put in the
/// request's extensions by a layer in front of the [`Authenticator`] so it
/// can refuse a call the caller's role does not allow before its body is
/// read.
#[derive(Debug, Clone)]
pub struct CallPath(pub String);

impl Authenticator {
    /// Checks callers with `verifier`. With `certs_are_members` (the
    /// listener verifies client certificates against the cluster's CA), a
    /// caller that presented a verified certificate and no bearer
    /// credential is a cluster member (mutual TLS instead of the secret).
    pub fn new(verifier: Arc<Verifier>, certs_are_members: bool) -> Authenticator {
        Authenticator {
            verifier,
            certs_are_members,
            needs: None,
        }
    }

    /// Also refuses, before the request body is read, a call whose
    /// [`CallPath`] `needs` maps to a need (and the call's name) the
    /// caller's role does not meet: PERMISSION_DENIED in the words of
    /// [`authorize`], which each handler still runs.
    pub fn with_needs(mut self, needs: CallNeeds) -> Authenticator {
        self.needs = Some(needs);
        self
    }
}

impl tonic::service::Interceptor for Authenticator {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let p = match self.verifier.check_metadata(req.metadata()) {
            Ok(p) => p,
            Err(e) => {
                let has_bearer = req.metadata().get(AUTHORIZATION).is_some();
                let cert = req.peer_certs().is_some_and(|c| !c.is_empty());
                if self.certs_are_members && cert && !has_bearer {
                    Principal::Cluster
                } else {
                    return Err(e);
                }
            }
        };
        if let (Some(needs), Some(CallPath(path))) =
            (self.needs, req.extensions().get::<CallPath>())
        {
            if let Some((need, call)) = needs(path) {
                if !p.may(need) {
                    return Err(denied(call, need, &p));
                }
            }
        }
        req.extensions_mut().insert(p);
        Ok(req)
    }
}

fn denied(call: &str, need: Need, p: &Principal) -> Status {
    Status::permission_denied(format!(
        "{call} needs {}; the caller has {p}",
        need_name(need)
    ))
}

/// The caller of `req` if it may make a call needing `need`; otherwise
/// PERMISSION_DENIED naming what the call needs (or UNAUTHENTICATED when no
/// authenticator checked the call: fail closed).
pub fn authorize<T>(req: &Request<T>, need: Need, call: &str) -> Result<Principal, Status> {
    let Some(p) = req.extensions().get::<Principal>() else {
        return Err(Status::unauthenticated(format!(
            "{call}: the caller's credentials were not checked"
        )));
    };
    if p.may(need) {
        Ok(p.clone())
    } else {
        Err(denied(call, need, p))
    }
}

/// The client interceptor: adds `authorization: Bearer <credential>` to
/// every call (marked sensitive, so it is never logged by the HTTP/2 stack).
/// A cluster credential is never sent: each call carries a fresh member
/// proof made from it ([`crate::member`]).
#[derive(Clone, Default)]
pub struct Bearer(BearerKind);

#[derive(Clone, Default)]
enum BearerKind {
    #[default]
    None,
    Token(AsciiMetadataValue),
    Member(crate::member::Prover),
}

fn header(credential: &str) -> Option<AsciiMetadataValue> {
    let mut v = AsciiMetadataValue::try_from(format!("Bearer {credential}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

impl Bearer {
    /// Calls carrying `credential` (none: calls carry nothing and are refused).
    pub fn new(credential: Option<&Credential>) -> Bearer {
        Bearer(match credential {
            None => BearerKind::None,
            Some(c) if c.is_cluster() => {
                let secret = &c.expose()[CLUSTER_PREFIX.len()..];
                BearerKind::Member(crate::member::Prover::new(sha256(secret.as_bytes())))
            }
            Some(c) => header(c.expose()).map_or(BearerKind::None, BearerKind::Token),
        })
    }

    /// The `authorization` value of the next call, if any.
    pub fn value(&self) -> Option<AsciiMetadataValue> {
        match &self.0 {
            BearerKind::None => None,
            BearerKind::Token(v) => Some(v.clone()),
            BearerKind::Member(p) => header(&p.proof()),
        }
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            BearerKind::None => "Bearer(none)",
            BearerKind::Token(_) => "Bearer(…)",
            BearerKind::Member(_) => "Bearer(member proofs)",
        })
    }
}

impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = self.value() {
            req.metadata_mut().insert(AUTHORIZATION, v);
        }
        Ok(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::token::NewToken;
    use tonic::service::Interceptor;
    use tonic::Code;

    fn read_grant(t: &NewToken) -> HashMap<String, Grant> {
        let mut g = HashMap::new();
        g.insert(
            t.id.clone(),
            Grant {
                role: Role::Read,
                secret_sha256: t.secret_sha256,
            },
        );
        g
    }

    fn setup() -> (ClusterSecret, Arc<Verifier>, NewToken) {
        let s = ClusterSecret::generate().unwrap();
        let v = Verifier::new(&s);
        let t = NewToken::generate().unwrap();
        v.set_tokens(1, read_grant(&t));
        (s, v, t)
    }

    #[test]
    fn credentials_are_checked() {
        let (s, v, t) = setup();
        // Members send proofs, good once; the secret itself is refused.
        let member = Bearer::new(Some(&s.credential())).value().unwrap();
        let proof = member.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        assert!(proof.starts_with("tbm1.") && !proof.contains(&s.file_text().trim()[..16]));
        assert_eq!(v.check(proof).unwrap(), Principal::Cluster);
        let e = v.check(proof).unwrap_err();
        assert!(e.message().contains("replayed"), "{}", e.message());
        let e = v.check(s.credential().expose()).unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        assert!(e.message().contains("never the secret"), "{}", e.message());
        let p = v.check(t.token.expose()).unwrap();
        assert_eq!(
            p,
            Principal::Token {
                id: t.id.clone(),
                role: Role::Read
            }
        );
        // A forged secret for a known id, another cluster's secret, an unknown token.
        let forged = format!("tbt1.{}.{}", t.id, "0".repeat(64));
        let e = v.check(&forged).unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated);
        let other = ClusterSecret::generate().unwrap();
        let theirs = Bearer::new(Some(&other.credential())).value().unwrap();
        assert!(v
            .check(theirs.to_str().unwrap().strip_prefix("Bearer ").unwrap())
            .unwrap_err()
            .message()
            .contains("does not match"));
        // An unknown id reads exactly like a wrong secret (but for the id).
        let stranger = NewToken::generate().unwrap();
        let unknown = v.check(stranger.token.expose()).unwrap_err();
        let sid = stranger.token.token_id().unwrap();
        assert_eq!(
            unknown.message().replace(sid, "ID"),
            e.message().replace(t.id.as_str(), "ID")
        );
        assert!(unknown.message().contains("unknown or revoked"));
        // Revoked: a newer set without it.
        v.set_tokens(2, HashMap::new());
        assert!(v.check(t.token.expose()).is_err());
        // An older set does not bring it back.
        v.set_tokens(1, read_grant(&t));
        assert!(v.check(t.token.expose()).is_err());
        assert_eq!(v.tokens_version(), 2);
    }

    #[test]
    fn errors_never_echo_the_secret() {
        let (_, v, t) = setup();
        let secret = t.token.expose().rsplit('.').next().unwrap().to_string();
        let forged = format!("tbt1.{}.{}", t.id, secret.replace('a', "b"));
        for h in [
            format!("Bearer {forged}"),
            format!("Basic {secret}"),
            format!("Bearer {secret}"),
        ] {
            let e = v.check_header(Some(h.as_bytes())).unwrap_err();
            assert!(!e.message().contains(&secret), "{}", e.message());
        }
        assert!(v
            .check_header(None)
            .unwrap_err()
            .message()
            .contains("no credentials"));
    }

    #[test]
    fn roles_allow_what_they_name() {
        let tok = |role| Principal::Token {
            id: "x".into(),
            role,
        };
        assert!(tok(Role::Read).may(Need::Read));
        assert!(!tok(Role::Read).may(Need::Write));
        assert!(tok(Role::Write).may(Need::Write));
        assert!(!tok(Role::Write).may(Need::Admin));
        assert!(tok(Role::Admin).may(Need::Admin));
        assert!(!tok(Role::Admin).may(Need::Cluster));
        assert!(Principal::Cluster.may(Need::Cluster));
    }

    #[test]
    fn a_lapsed_token_lease_refuses_tokens_but_not_members() {
        let (s, v, t) = setup();
        assert!(v.check(t.token.expose()).is_ok());
        let now = std::time::Instant::now();
        v.renew_tokens_until(now - std::time::Duration::from_millis(5));
        let e = v.check(t.token.expose()).unwrap_err();
        assert_eq!(e.code(), Code::Unavailable, "{e:?}");
        assert!(e.message().contains("token lease"), "{}", e.message());
        let member = Bearer::new(Some(&s.credential())).value().unwrap();
        let proof = member.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        assert_eq!(v.check(proof).unwrap(), Principal::Cluster);
        v.renew_tokens_until(now + std::time::Duration::from_secs(60));
        assert!(v.check(t.token.expose()).is_ok());
    }

    #[test]
    fn interceptors_carry_and_check() {
        let (_, v, t) = setup();
        let mut bearer = Bearer::new(Some(&t.token));
        let req = bearer.call(Request::new(())).unwrap();
        let mut auth = Authenticator::new(v, false);
        let req = auth.call(req).unwrap();
        assert!(authorize(&req, Need::Read, "Get").is_ok());
        let e = authorize(&req, Need::Write, "Write").unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
        assert!(e.message().contains("Write needs a write or admin token"));
        assert_eq!(
            auth.call(Request::new(())).unwrap_err().code(),
            Code::Unauthenticated
        );
        // Fail closed without the authenticator.
        assert_eq!(
            authorize(&Request::new(()), Need::Read, "Get")
                .unwrap_err()
                .code(),
            Code::Unauthenticated
        );
        assert!(!format!("{bearer:?}").contains(t.token.expose()));
    }
}
