//! Checking callers: the [`Verifier`] (the cluster secret's hash and the
//! valid tokens' hashes), the [`Principal`] a credential proves, the
//! [`Need`] of a call, and what carries them:
//!
//! - on servers, the [`Answering`] layer (checks a call's proof once and
//!   answers it with [`ANSWER`], which proves the server is a member) and
//!   the [`Authenticator`] interceptor (refuses calls without valid
//!   credentials and records the principal);
//! - on clients, the [`Caller`] service: adds a fresh proof for the server
//!   it dials to every call ([`Bearer`]) and refuses an answer that does
//!   not prove the server.
//!
//! A handler decides what it needs with [`authorize`]; a handler reached
//! without the authenticator fails closed (UNAUTHENTICATED).
//! Never holds a token's secret: only SHA-256 digests.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use tonic::codegen::{http, BoxFuture, Context, Poll, Service, StdError};
use tonic::metadata::{AsciiMetadataValue, MetadataMap};
use tonic::{Request, Status};

use crate::proof::{Prover, Refusal, MEMBER_PREFIX, TOKEN_PROOF_PREFIX};
use crate::token::{digest_eq, sha256, ClusterSecret, Credential, Role, CLUSTER_PREFIX};

/// The metadata key (HTTP header) credentials travel in.
pub const AUTHORIZATION: &str = "authorization";
/// The response header a server proves itself with: [`crate::proof::answer`]
/// of the call's proof.
pub const ANSWER: &str = "tablinum-answer";

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
    /// Proofs: the cluster's key, the names this process answers as, the
    /// nonces seen.
    proofs: crate::proof::Checker,
    tokens: RwLock<Tokens>,
}

fn refused(r: Refusal) -> Status {
    match r {
        // Nothing wrong with the caller: a fresh proof will do.
        Refusal::Overloaded | Refusal::BeforeStart { .. } => tablinum_proto::error::status(
            tonic::Code::Unavailable,
            tablinum_proto::error::ErrorReason::ProofRetry,
            r.to_string(),
        ),
        _ => Status::unauthenticated(r.to_string()),
    }
}

impl Verifier {
    /// A verifier of `secret` knowing no tokens yet (version 0), and nobody's
    /// audience until [`Verifier::answer_as`] names it.
    pub fn new(secret: &ClusterSecret) -> Arc<Verifier> {
        Arc::new(Verifier {
            proofs: crate::proof::Checker::new(secret.sha256()),
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

    /// The audiences this process answers proofs for: its gRPC address as
    /// the tablet map names it, and [`crate::proof::MANAGER_AUDIENCE`]
    /// where the manager runs.
    pub fn answer_as(&self, names: Vec<String>) {
        self.proofs.answer_as(names);
    }

    /// Token `id`'s digest sealed for the wire (or, applied to a sealed
    /// one, unsealed): XOR with HMAC-SHA256 of the id keyed with the
    /// cluster's key. A heartbeat answer carries grants sealed, because a
    /// digest and one captured token proof would give the token's secret.
    pub fn seal_grant(&self, id: &str, digest: &[u8; 32]) -> [u8; 32] {
        crate::proof::seal_grant(self.proofs.member_key(), id, digest)
    }

    /// The principal `credential` proves, or why it proves none.
    pub fn check(&self, credential: &str) -> Result<Principal, Status> {
        self.check_answering(credential).map(|(p, _)| p)
    }

    /// Refuses client tokens while the token set's lease has lapsed.
    fn lease_holds(t: &Tokens) -> Result<(), Status> {
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
        Ok(())
    }

    /// The principal `credential` proves and, for a proof, the answer
    /// ([`ANSWER`]) that proves this server to the caller.
    pub fn check_answering(&self, credential: &str) -> Result<(Principal, Option<String>), Status> {
        let credential = credential.trim();
        let now_ms = crate::proof::unix_ms();
        if credential.starts_with(MEMBER_PREFIX) {
            self.proofs
                .check_member_at(credential, now_ms)
                .map_err(refused)?;
            let a = crate::proof::answer(self.proofs.member_key(), credential);
            return Ok((Principal::Cluster, Some(a)));
        }
        if credential.starts_with(TOKEN_PROOF_PREFIX) {
            let t = self.tokens.read();
            Self::lease_holds(&t)?;
            let mut grant = None;
            let id = self
                .proofs
                .check_token_at(
                    credential,
                    |id| {
                        grant = t.grants.get(id).cloned();
                        grant.as_ref().map(|g| g.secret_sha256)
                    },
                    now_ms,
                )
                .map_err(refused)?;
            let g = grant.expect("a checked token proof has its grant");
            let a = crate::proof::answer(&g.secret_sha256, credential);
            return Ok((Principal::Token { id, role: g.role }, Some(a)));
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
        Self::lease_holds(&t)?;
        let g = t.grants.get(id);
        let matches = digest_eq(&digest, g.map_or(&[0u8; 32], |g| &g.secret_sha256));
        match g {
            Some(g) if matches => Ok((
                Principal::Token {
                    id: id.to_string(),
                    role: g.role,
                },
                None,
            )),
            _ => Err(refused(Refusal::UnknownToken(id.to_string()))),
        }
    }

    /// The principal of an `authorization` header value (`Bearer <credential>`).
    pub fn check_header(&self, value: Option<&[u8]>) -> Result<Principal, Status> {
        self.check(credential_of(value)?)
    }

    /// The principal of a gRPC call's metadata.
    pub fn check_metadata(&self, md: &MetadataMap) -> Result<Principal, Status> {
        self.check_header(md.get(AUTHORIZATION).map(|v| v.as_bytes()))
    }
}

/// The credential of an `authorization` header value (`Bearer <credential>`).
fn credential_of(value: Option<&[u8]>) -> Result<&str, Status> {
    let Some(v) = value else {
        return Err(Status::unauthenticated(
            "no credentials: pass a token (--token, TABLINUM_TOKEN or the credentials file)",
        ));
    };
    let v = std::str::from_utf8(v)
        .map_err(|_| Status::unauthenticated("bad credentials: authorization is not text"))?;
    v.strip_prefix("Bearer ")
        .or_else(|| v.strip_prefix("bearer "))
        .ok_or_else(|| {
            Status::unauthenticated("bad credentials: authorization must be `Bearer <token>`")
        })
}

/// The outcome of checking a call's credential, put in its extensions by
/// [`Answering`] so the [`Authenticator`] does not check (and spend the
/// proof) twice.
#[derive(Debug, Clone)]
struct Prechecked(Result<Principal, Status>);

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
        let checked = match req.extensions().get::<Prechecked>() {
            Some(Prechecked(r)) => r.clone(),
            None => self.verifier.check_metadata(req.metadata()),
        };
        let p = match checked {
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

/// The server layer in front of every service: checks a call's proof once
/// (for the [`Authenticator`]) and, when it holds, answers with [`ANSWER`]
/// so the caller knows it reached a member of the cluster. Calls carrying
/// a raw token or nothing pass to the authenticator unanswered.
#[derive(Clone)]
pub struct AnsweringLayer(pub Arc<Verifier>);

impl<S> tower_layer::Layer<S> for AnsweringLayer {
    type Service = Answering<S>;
    fn layer(&self, inner: S) -> Answering<S> {
        Answering {
            inner,
            verifier: self.0.clone(),
        }
    }
}

/// See [`AnsweringLayer`].
#[derive(Clone)]
pub struct Answering<S> {
    inner: S,
    verifier: Arc<Verifier>,
}

impl<S, B, RB> Service<http::Request<B>> for Answering<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let proof = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| credential_of(Some(v.as_bytes())).ok())
            .map(str::trim)
            .filter(|c| c.starts_with(MEMBER_PREFIX) || c.starts_with(TOKEN_PROOF_PREFIX))
            .map(str::to_string);
        let Some(proof) = proof else {
            return Box::pin(self.inner.call(req));
        };
        let checked = self.verifier.check_answering(&proof);
        let answer = checked
            .as_ref()
            .ok()
            .and_then(|(_, a)| a.as_deref())
            .and_then(|a| http::HeaderValue::from_str(a).ok());
        req.extensions_mut()
            .insert(Prechecked(checked.map(|(p, _)| p)));
        let fut = self.inner.call(req);
        Box::pin(async move {
            let mut resp = fut.await?;
            if let Some(a) = answer {
                resp.headers_mut().insert(ANSWER, a);
            }
            Ok(resp)
        })
    }
}

/// What a client presents: a fresh proof for one server (its audience) on
/// every call; the proof is of a client token or, for members, of the
/// cluster secret. Neither secret is ever sent.
#[derive(Clone)]
pub struct Bearer {
    prover: Option<Prover>,
    audience: Arc<str>,
}

fn header(credential: &str) -> Option<AsciiMetadataValue> {
    let mut v = AsciiMetadataValue::try_from(format!("Bearer {credential}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

impl Bearer {
    /// Calls carrying proofs of `credential` (none: calls carry nothing and
    /// are refused) made for `audience`: the address the tablet map names
    /// the server by, or [`crate::proof::MANAGER_AUDIENCE`].
    pub fn new(credential: Option<&Credential>, audience: &str) -> Bearer {
        let prover = credential.and_then(|c| {
            if c.is_cluster() {
                let secret = &c.expose()[CLUSTER_PREFIX.len()..];
                Some(Prover::member(sha256(secret.as_bytes())))
            } else {
                let secret = c.expose().rsplit('.').next().unwrap_or_default();
                Prover::token(c.token_id()?, secret)
            }
        });
        Bearer {
            prover,
            audience: audience.into(),
        }
    }

    /// The proof of the next call and the answer that proves the server,
    /// if any credential is presented.
    pub fn next(&self) -> Option<crate::proof::Proof> {
        Some(self.prover.as_ref()?.proof(&self.audience))
    }

    /// The `authorization` value of the next call, if any.
    pub fn value(&self) -> Option<AsciiMetadataValue> {
        header(&self.next()?.text)
    }

    /// The same credential's proofs, made for `audience` (the prover and
    /// its nonces are shared: no new random prefix, no parsing per call).
    pub fn for_audience(&self, audience: &str) -> Bearer {
        Bearer {
            prover: self.prover.clone(),
            audience: audience.into(),
        }
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bearer({:?} for {})", self.prover, self.audience)
    }
}

/// Adds the header without checking the answer (for tests that play a
/// raw client).
impl tonic::service::Interceptor for Bearer {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = self.value() {
            req.metadata_mut().insert(AUTHORIZATION, v);
        }
        Ok(req)
    }
}

/// A client transport that proves its caller on every call ([`Bearer`])
/// and trusts an answer only when it proves the server: a successful
/// answer without the expected [`ANSWER`] (a process on a dead server's
/// port, a forged server) fails the call with UNAVAILABLE before a byte of
/// it is read. An error answer without one passes (a refusal carries no
/// data, and a real server refusing the proof cannot answer it).
///
/// It also types the transport's own failures where they happen
/// ([`transport_failure`]): a connection never made is CONNECT_FAILED
/// (nothing was sent), one that broke under the call (before its answer or
/// within its body) is TRANSPORT (it may have been applied).
#[derive(Clone)]
pub struct Caller<S> {
    inner: S,
    bearer: Bearer,
}

impl<S> Caller<S> {
    /// Calls through `inner` presenting `bearer`.
    pub fn new(inner: S, bearer: Bearer) -> Caller<S> {
        Caller { inner, bearer }
    }
}

/// Whether a response is a gRPC error answered in its headers alone.
fn is_refusal<B>(resp: &http::Response<B>) -> bool {
    resp.headers()
        .get("grpc-status")
        .is_some_and(|v| v.as_bytes() != b"0")
}

impl<S, B, RB> Service<http::Request<B>> for Caller<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Error: Into<StdError>,
    S::Future: Send + 'static,
{
    type Response = http::Response<Typed<RB>>;
    type Error = StdError;
    type Future = BoxFuture<Self::Response, StdError>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), StdError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let expected = self.bearer.next().and_then(|p| {
            let mut v = http::HeaderValue::from_str(&format!("Bearer {}", p.text)).ok()?;
            v.set_sensitive(true);
            req.headers_mut().insert(AUTHORIZATION, v);
            Some(p.expected_answer)
        });
        let audience = self.bearer.audience.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let resp = fut
                .await
                .map_err(|e| transport_failure(e.into(), &audience))?
                .map(|b| Typed {
                    inner: Box::pin(b),
                    audience: audience.clone(),
                });
            let Some(expected) = expected else {
                return Ok(resp);
            };
            let proven = resp
                .headers()
                .get(ANSWER)
                .is_some_and(|a| digest_eq(a.as_bytes(), expected.as_bytes()));
            if proven || is_refusal(&resp) {
                return Ok(resp);
            }
            Err(Box::new(Status::unavailable(format!(
                "the server at {audience} did not prove it is a member of this cluster \
                 (its answer lacks the proof only a member can make): not trusted"
            ))) as StdError)
        })
    }
}

/// A transport failure `e` of a call to `audience`, typed where it
/// happened: a connection never made is CONNECT_FAILED (applied no); any
/// other failure below gRPC (a reset, an HTTP/2 protocol error, a TLS
/// server spoken to in plaintext) is TRANSPORT (applied unknown). A status
/// and tonic's timeout pass as they are.
pub fn transport_failure(e: StdError, audience: &str) -> StdError {
    use tablinum_proto::error::{status, ErrorReason};
    if e.is::<Status>() || e.is::<tonic::TimeoutExpired>() {
        return e;
    }
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        if c.is::<tonic::ConnectError>() {
            return Box::new(status(
                tonic::Code::Unavailable,
                ErrorReason::ConnectFailed,
                format!("cannot connect to {audience}: {e}"),
            ));
        }
        if c.is::<Status>() {
            return e;
        }
        cause = c.source();
    }
    Box::new(status(
        tonic::Code::Unavailable,
        ErrorReason::Transport,
        format!(
            "transport error talking to {audience}: {e}: the connection failed below gRPC (a \
             reset, or a server that speaks TLS spoken to without --ca / TABLINUM_CA)"
        ),
    ))
}

/// A response body whose transport failures are typed
/// ([`transport_failure`]).
pub struct Typed<B> {
    inner: std::pin::Pin<Box<B>>,
    audience: Arc<str>,
}

impl<B> http_body::Body for Typed<B>
where
    B: http_body::Body,
    B::Error: Into<StdError>,
{
    type Data = B::Data;
    type Error = StdError;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let audience = self.audience.clone();
        self.inner
            .as_mut()
            .poll_frame(cx)
            .map_err(|e| transport_failure(e.into(), &audience))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
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
        v.answer_as(vec!["manager".into()]);
        let t = NewToken::generate().unwrap();
        v.set_tokens(1, read_grant(&t));
        (s, v, t)
    }

    #[test]
    fn credentials_are_checked() {
        let (s, v, t) = setup();
        // Members send proofs, good once; the secret itself is refused.
        let member = Bearer::new(Some(&s.credential()), "manager")
            .value()
            .unwrap();
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
        let theirs = Bearer::new(Some(&other.credential()), "manager")
            .value()
            .unwrap();
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
        let member = Bearer::new(Some(&s.credential()), "manager")
            .value()
            .unwrap();
        let proof = member.to_str().unwrap().strip_prefix("Bearer ").unwrap();
        assert_eq!(v.check(proof).unwrap(), Principal::Cluster);
        v.renew_tokens_until(now + std::time::Duration::from_secs(60));
        assert!(v.check(t.token.expose()).is_ok());
    }

    #[test]
    fn interceptors_carry_and_check() {
        let (_, v, t) = setup();
        let mut bearer = Bearer::new(Some(&t.token), "manager");
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
