//! Exit codes of the `tablinum` binary and the hints printed with errors.
//!
//! Owns the mapping from a failure to its exit status and a one-line hint
//! naming what to try; it never prints rows and never retries anything.
//! README.md lists the codes; `tests/cli_exit.rs` drives each one.

use tablinum_client::Error as ClientError;

/// The exit status of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Done; for `get`/`head`: found.
    Ok = 0,
    /// `get`/`head`: the key is absent.
    NotFound = 1,
    /// Bad arguments or input (clap's usage errors exit 2 too); nothing
    /// was changed.
    Usage = 2,
    /// The cluster could not be reached (or answered as something else
    /// than a tablinum gRPC endpoint), or did not answer in time.
    Unreachable = 3,
    /// Credentials missing, unknown, revoked, or not allowed the call.
    Denied = 4,
    /// The named table or index does not exist, or already exists.
    NoSuchThing = 5,
    /// Anything else: a server error, an unknown write outcome, local I/O.
    Failed = 6,
}

/// A usage error raised by the CLI itself (a bad flag combination, a bad
/// input file); exits [`Code::Usage`].
#[derive(Debug)]
pub struct Usage(pub String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Returns a [`Usage`] error from the enclosing function.
macro_rules! usage {
    ($($t:tt)*) => {
        return Err(anyhow::Error::new($crate::exit::Usage(format!($($t)*))))
    };
}
pub(crate) use usage;

/// The exit code of an error and a hint for the user, if one helps.
/// `cluster` is the address the command used, if it talked to one.
pub fn classify(e: &anyhow::Error, cluster: Option<&str>) -> (Code, Option<String>) {
    for cause in e.chain() {
        if cause.downcast_ref::<Usage>().is_some() {
            return (Code::Usage, None);
        }
        if let Some(c) = cause.downcast_ref::<ClientError>() {
            return client(c, cluster);
        }
        if cause.downcast_ref::<clap::Error>().is_some() {
            return (Code::Usage, None);
        }
    }
    (Code::Failed, None)
}

fn client(e: &ClientError, cluster: Option<&str>) -> (Code, Option<String>) {
    let at = cluster.unwrap_or(tablinum_client::CLUSTER_ADDR_DEFAULT);
    match e {
        ClientError::InvalidArgument(_) => (Code::Usage, None),
        ClientError::NotFound(m) => {
            let hint = if m.contains("flow") {
                "`tablinum flow list` shows the submitted flows"
            } else if m.contains("table") {
                "`tablinum table list` shows the tables; `tablinum table create NAME` makes one"
            } else {
                "`tablinum table list` shows the tables"
            };
            (Code::NoSuchThing, Some(hint.into()))
        }
        ClientError::AlreadyExists(_) => (Code::NoSuchThing, None),
        ClientError::Unauthenticated(_) => (
            Code::Denied,
            Some(
                "pass --token, --token-file or TABLINUM_TOKEN; `tablinum up` saves an admin \
                 token in the credentials file"
                    .into(),
            ),
        ),
        ClientError::PermissionDenied(_) => (
            Code::Denied,
            Some("this token's role does not allow the call; an admin can `tablinum token create --role write`".into()),
        ),
        ClientError::Connect(m) | ClientError::Unavailable(m) | ClientError::Timeout(m) => {
            (Code::Unreachable, Some(unreachable_hint(m, at)))
        }
        ClientError::Server(m) if looks_like_wrong_protocol(m) => {
            (Code::Unreachable, Some(unreachable_hint(m, at)))
        }
        ClientError::Server(_)
        | ClientError::OutcomeUnknown(_)
        | ClientError::Busy(_)
        | ClientError::Conflict(_) => {
            (Code::Failed, None)
        }
    }
}

/// A gRPC call answered by something that does not speak gRPC (the status
/// page's HTTP port, another service): tonic reports a transport or
/// protocol error with an unknown status.
fn looks_like_wrong_protocol(m: &str) -> bool {
    let m = m.to_ascii_lowercase();
    m.contains("transport error")
        || m.contains("h2 protocol error")
        || m.contains("invalid content-type")
        || m.contains("http2 error")
}

/// Whether the error is a closed output pipe (`tablinum scan t | head`):
/// the reader is done, which is not a failure.
pub fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// An error and its causes on one line, `outer: cause: cause`, leaving out
/// a cause whose text the line already holds (many errors print their
/// source in their own message and also return it as `source()`).
pub fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// How long the hint's probe waits for a TCP connection, ms.
const PROBE_TIMEOUT_MS: u64 = 500;

/// Whether something accepts TCP connections at `addr` (`host:port`, with
/// or without an `http(s)://` scheme). Tells "nothing listens" from
/// "something listens but does not speak tablinum's gRPC".
fn listening(addr: &str) -> bool {
    use std::net::ToSocketAddrs as _;
    let a = tablinum_auth::files::address_key(addr);
    let Ok(addrs) = a.to_socket_addrs() else {
        return false;
    };
    addrs.into_iter().any(|sa| {
        std::net::TcpStream::connect_timeout(
            &sa,
            std::time::Duration::from_millis(PROBE_TIMEOUT_MS),
        )
        .is_ok()
    })
}

fn unreachable_hint(m: &str, at: &str) -> String {
    let timeout = m.to_ascii_lowercase().contains("timed out");
    if !listening(at) {
        format!(
            "nothing answers at {at}: is `tablinum up` running? (pass --cluster ADDR, set \
             TABLINUM_CLUSTER, or `cluster = ...` in the CLI config file for another cluster)"
        )
    } else if timeout {
        format!("{at} accepts connections but did not answer in time: is the cluster overloaded? `tablinum status` shows its servers")
    } else {
        format!(
            "{at} accepts connections but does not speak tablinum's gRPC: is it the HTTP \
             (status page) port? `tablinum up` prints the gRPC address on its `grpc` line; a \
             cluster started with --tls needs --ca"
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(e: ClientError) -> Code {
        classify(&anyhow::Error::new(e).context("while doing x"), None).0
    }

    #[test]
    fn every_client_error_has_its_code() {
        assert_eq!(code(ClientError::InvalidArgument("x".into())), Code::Usage);
        assert_eq!(
            code(ClientError::NotFound("table t".into())),
            Code::NoSuchThing
        );
        assert_eq!(
            code(ClientError::AlreadyExists("t".into())),
            Code::NoSuchThing
        );
        assert_eq!(
            code(ClientError::Connect("refused".into())),
            Code::Unreachable
        );
        assert_eq!(
            code(ClientError::Unavailable("x".into())),
            Code::Unreachable
        );
        assert_eq!(code(ClientError::Unauthenticated("x".into())), Code::Denied);
        assert_eq!(
            code(ClientError::PermissionDenied("x".into())),
            Code::Denied
        );
        assert_eq!(code(ClientError::OutcomeUnknown("x".into())), Code::Failed);
        assert_eq!(
            code(ClientError::Server("Unknown: transport error".into())),
            Code::Unreachable
        );
        assert_eq!(code(ClientError::Server("disk".into())), Code::Failed);
        let u = anyhow::Error::new(Usage("bad".into())).context("x");
        assert_eq!(classify(&u, None).0, Code::Usage);
        assert_eq!(classify(&anyhow::anyhow!("io"), None).0, Code::Failed);
    }

    #[test]
    fn a_cause_already_in_the_message_is_printed_once() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "cannot read /x: {}", self.0)
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "No such file or directory");
        let e = anyhow::Error::new(Outer(io)).context("bench run");
        assert_eq!(
            one_line(&e),
            "bench run: cannot read /x: No such file or directory"
        );
        let e = anyhow::anyhow!("inner").context("outer");
        assert_eq!(one_line(&e), "outer: inner");
    }

    #[test]
    fn hints_name_the_likely_mistake() {
        // A port nobody listens on (bound, then closed).
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().to_string()
        };
        let (_, h) = classify(
            &anyhow::Error::new(ClientError::Connect("transport error".into())),
            Some(&closed),
        );
        let h = h.unwrap();
        assert!(h.contains("tablinum up") && h.contains(&closed), "{h}");
        // A port that listens but is not gRPC.
        let open = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let at = open.local_addr().unwrap().to_string();
        let (code, h) = classify(
            &anyhow::Error::new(ClientError::Server("Unknown: transport error".into())),
            Some(&at),
        );
        assert_eq!(code, Code::Unreachable);
        assert!(h.unwrap().contains("HTTP"));
    }
}
