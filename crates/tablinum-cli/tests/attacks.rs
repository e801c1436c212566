//! The outsider's suites against a real `tablinum up` process, re-run on
//! every change: every RPC the .proto declares (read from the file, so a
//! new one is covered at once) is called by an outsider without
//! credentials, with forged and replayed credentials, with a read token
//! where it needs more, and with hundreds of malformed protobuf bodies
//! under an admin token. The process must answer every call within a
//! bound with a status the API allows, never INTERNAL, UNKNOWN or
//! DATA_LOSS (what a panic or a decode slip would show), never log a
//! panic, stay up, and keep its data.

mod common;

use std::io::Read;
use std::process::Stdio;
use std::time::Duration;

use bytes::{Buf, BufMut};
use tablinum_client::{Durability, Mutation, Query, Split};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::{Code, Status};

use common::{client_as, spawn_up_with, up_admin, xorshift, Procs};

/// Malformed bodies sent to each RPC.
const BODIES_PER_RPC: u64 = 40;
/// Longest a refusal may take, ms.
const ANSWER_WITHIN_MS: u64 = 10_000;

/// Sends and receives message bodies as they are, undecoded.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        Ok(Some(src.copy_to_bytes(src.remaining()).to_vec()))
    }
}

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

/// One RPC of the .proto.
#[derive(Debug, Clone)]
struct Rpc {
    service: String,
    method: String,
    client_streams: bool,
    server_streams: bool,
}

impl Rpc {
    fn path(&self) -> PathAndQuery {
        format!("/tablinum.v1.{}/{}", self.service, self.method)
            .parse()
            .unwrap()
    }

    /// Whom a proof for this RPC is made for at an `up` process.
    fn audience(&self, addr: &str) -> String {
        if self.service == "Manager" {
            tablinum_auth::proof::MANAGER_AUDIENCE.into()
        } else {
            addr.into()
        }
    }
}

/// Every RPC of the services an `up` process serves, from the .proto.
fn rpcs() -> Vec<Rpc> {
    let proto = include_str!("../../tablinum-proto/proto/tablinum.proto");
    let mut out = Vec::new();
    let mut service = None;
    for line in proto.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("service ") {
            service = rest.split_whitespace().next().map(str::to_string);
        } else if line == "}" {
            service = None;
        } else if let (Some(s), Some(rest)) = (&service, line.strip_prefix("rpc ")) {
            let (method, sig) = rest.split_once('(').unwrap();
            let (req, resp) = sig.split_once("returns").unwrap();
            out.push(Rpc {
                service: s.clone(),
                method: method.trim().into(),
                client_streams: req.trim_start().starts_with("stream "),
                server_streams: resp
                    .trim_start()
                    .trim_start_matches('(')
                    .starts_with("stream "),
            });
        }
    }
    out.retain(|r| r.service == "Manager" || r.service == "TabletServer");
    assert!(
        out.len() >= 24,
        "read only {} RPCs from the .proto",
        out.len()
    );
    out
}

/// `r` with `auth` as its authorization header, as sent.
fn with_auth<M>(mut r: tonic::Request<M>, auth: Option<&str>) -> tonic::Request<M> {
    if let Some(a) = auth {
        r.metadata_mut().insert("authorization", a.parse().unwrap());
    }
    r
}

/// How a response stream ends once read to its end: OK, or its error.
async fn drained(mut s: tonic::Streaming<Vec<u8>>) -> Status {
    loop {
        match s.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => return Status::ok(""),
            Err(e) => return e,
        }
    }
}

/// Calls `rpc` with one `body` over `transport`; the status it ends with
/// (OK when it answered without one within the bound).
async fn call<T>(transport: T, rpc: &Rpc, body: Vec<u8>, auth: Option<&str>) -> Status
where
    T: tonic::client::GrpcService<tonic::body::Body>,
    T::Error: Into<tonic::codegen::StdError>,
    T::ResponseBody: tonic::codegen::Body<Data = bytes::Bytes> + Send + 'static,
    <T::ResponseBody as tonic::codegen::Body>::Error: Into<tonic::codegen::StdError> + Send,
{
    let mut g = tonic::client::Grpc::new(transport);
    let fut = async {
        if let Err(e) = g.ready().await {
            return Status::unavailable(format!("not ready: {}", e.into()));
        }
        if rpc.client_streams {
            let req = with_auth(tonic::Request::new(tokio_stream::once(body)), auth);
            match g.streaming(req, rpc.path(), Raw).await {
                Err(s) => s,
                Ok(r) => drained(r.into_inner()).await,
            }
        } else if rpc.server_streams {
            let req = with_auth(tonic::Request::new(body), auth);
            match g.server_streaming(req, rpc.path(), Raw).await {
                Err(s) => s,
                Ok(r) => drained(r.into_inner()).await,
            }
        } else {
            let req = with_auth(tonic::Request::new(body), auth);
            match g.unary(req, rpc.path(), Raw).await {
                Err(s) => s,
                Ok(_) => Status::ok(""),
            }
        }
    };
    tokio::time::timeout(Duration::from_millis(ANSWER_WITHIN_MS), fut)
        .await
        .unwrap_or_else(|_| {
            Status::deadline_exceeded(format!("no answer within {ANSWER_WITHIN_MS} ms"))
        })
}

/// A malformed body, deterministic by `seed`: random bytes, a length
/// beyond the body, nesting past the decoder's limit, overlong varints,
/// strings that are not UTF-8, fields of every number and wire type, and
/// the empty message.
fn body(seed: u64) -> Vec<u8> {
    let mut r = xorshift(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let mut b = Vec::new();
    match seed % 7 {
        0 => (0..r(300)).for_each(|_| b.push(r(256) as u8)),
        1 => {
            // Field 1, length-delimited, claiming 2^62 bytes.
            b.push(0x0a);
            b.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f]);
            b.extend_from_slice(b"short");
        }
        2 => {
            // 120 levels of field 1 in field 1 (prost stops at 100).
            for _ in 0..120 {
                let inner = std::mem::take(&mut b);
                b.push(0x0a);
                b.push(u8::try_from(inner.len().min(127)).unwrap());
                b.extend_from_slice(&inner[..inner.len().min(127)]);
            }
        }
        3 => {
            // An 11-byte varint in each of the first fields.
            for f in 1..=8u8 {
                b.push(f << 3);
                b.extend_from_slice(&[0xff; 10]);
                b.push(0x01);
            }
        }
        4 => {
            // Field 1 (a string in most requests) holding bytes that are
            // not UTF-8.
            b.extend_from_slice(&[0x0a, 4, 0xff, 0xfe, 0xc3, 0x28]);
        }
        5 => {
            // Random fields of random numbers and wire types.
            for _ in 0..r(40) {
                let field = r(30) + 1;
                let wire = r(6);
                b.push(u8::try_from(((field << 3) | wire) & 0x7f).unwrap());
                match wire {
                    0 => b.push(r(128) as u8),
                    1 => b.extend_from_slice(&r(u64::MAX).to_le_bytes()),
                    2 => {
                        let n = r(20);
                        b.push(n as u8);
                        (0..n).for_each(|_| b.push(r(256) as u8));
                    }
                    5 => b.extend_from_slice(&(r(u64::from(u32::MAX)) as u32).to_le_bytes()),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    b
}

fn allowed(c: Code) -> bool {
    !matches!(
        c,
        Code::Internal | Code::Unknown | Code::DataLoss | Code::Unimplemented
    )
}

#[test]
fn outsiders_forgers_readers_and_malformed_bodies_never_break_a_real_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let home = dir.path().join("home");
    let log = dir.path().join("up.log");
    let (child, addr, _) = spawn_up_with(
        &data,
        &home,
        Stdio::from(std::fs::File::create(&log).unwrap()),
    );
    let mut procs = Procs(vec![child]);
    let admin = up_admin(&home, &addr);
    let client = client_as(&addr, &admin);
    client
        .create_table("kept", Split::Even(2), Durability::Sync)
        .unwrap();
    let rows: Vec<Mutation> = (0..50u32)
        .map(|i| Mutation {
            key: format!("k{i:03}").into_bytes(),
            value: format!("v{i}").into_bytes(),
            ..Default::default()
        })
        .collect();
    client.write_routed("kept", rows).unwrap();
    let (_, reader) = client
        .create_token(tablinum_client::Role::Read, "reader")
        .unwrap();
    let (before, _) = client.query_vec(&Query::new("kept")).unwrap();

    let rpcs = rpcs();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut calls = 0usize;
    let mut codes: std::collections::BTreeMap<String, usize> = Default::default();
    let mut served: std::collections::BTreeMap<String, usize> = Default::default();
    let mut bad = Vec::new();
    rt.block_on(async {
        let ch = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        let as_cred = |cred: Option<&tablinum_auth::Credential>, rpc: &Rpc| {
            tablinum_auth::Caller::new(
                ch.clone(),
                tablinum_auth::Bearer::new(cred, &rpc.audience(&addr)),
            )
        };
        let mut note = |family: &str, rpc: &Rpc, s: &Status, ok: bool| {
            calls += 1;
            *codes.entry(format!("{:?}", s.code())).or_default() += 1;
            if s.code() == Code::Ok {
                *served.entry(rpc.method.clone()).or_default() += 1;
            }
            if !ok {
                bad.push(format!(
                    "{family} {}: {:?} {}",
                    rpc.method,
                    s.code(),
                    s.message()
                ));
            }
        };
        // Family 1: no credentials, a forged proof, a proof with a wrong
        // secret, a member proof for the wrong key, the raw cluster secret
        // of another cluster: UNAUTHENTICATED, whatever the body.
        let forged_member = tablinum_auth::proof::Prover::member([9u8; 32])
            .proof("manager")
            .text;
        let wrong_secret = tablinum_auth::proof::Prover::token(
            admin.token_id().unwrap(),
            &"0".repeat(tablinum_auth::token::SECRET_HEX),
        )
        .unwrap()
        .proof(&addr)
        .text;
        let other_cluster = tablinum_auth::ClusterSecret::generate()
            .unwrap()
            .credential();
        let forged: Vec<Option<String>> = vec![
            None,
            Some("Bearer tbp1.000000000000.1.x.y.z".into()),
            Some(format!("Bearer {forged_member}")),
            Some(format!("Bearer {wrong_secret}")),
            Some(format!("Bearer {}", other_cluster.expose())),
            Some("Basic YWRtaW46YWRtaW4=".into()),
        ];
        for rpc in &rpcs {
            for (i, auth) in forged.iter().enumerate() {
                let s = call(ch.clone(), rpc, body(i as u64), auth.as_deref()).await;
                note("outsider", rpc, &s, s.code() == Code::Unauthenticated);
            }
        }
        // Family 2: a read token where a call needs more is refused before
        // its (malformed) body is read.
        for rpc in &rpcs {
            let need = tablinum_server::call_need(rpc.path().path()).map(|(n, _)| n);
            if need == Some(tablinum_auth::Need::Read) {
                continue;
            }
            let s = call(as_cred(Some(&reader), rpc), rpc, body(0), None).await;
            note("reader", rpc, &s, s.code() == Code::PermissionDenied);
        }
        // Family 3: malformed bodies with an admin token (and a read token
        // on the calls it may make): a clear refusal, never a crash.
        for rpc in &rpcs {
            for seed in 0..BODIES_PER_RPC {
                let cred = if seed % 5 == 4 { &reader } else { &admin };
                let s = call(as_cred(Some(cred), rpc), rpc, body(seed), None).await;
                note("malformed", rpc, &s, allowed(s.code()));
            }
        }
    });
    eprintln!(
        "{calls} calls to {} RPCs; answers by code: {codes:?}; served (a malformed body \
         that decodes to a valid request) by RPC: {served:?}",
        rpcs.len()
    );
    assert!(
        bad.is_empty(),
        "{} wrong answers:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // Still up, its data whole, and no panic in its log.
    assert!(
        procs.0[0].try_wait().unwrap().is_none(),
        "the server exited during the attacks"
    );
    let (after, _) = client.query_vec(&Query::new("kept")).unwrap();
    assert_eq!(before, after, "the table changed under the attacks");
    let mut text = String::new();
    std::fs::File::open(&log)
        .unwrap()
        .read_to_string(&mut text)
        .unwrap();
    assert!(!text.contains("panicked"), "the server panicked:\n{text}");
    drop(procs.0.pop().map(|mut c| {
        let _ = c.kill();
        c.wait()
    }));
}
