//! The gRPC listeners' accept loop: which TCP connections get as far as
//! the HTTP/2 (or TLS) handshake, and for how long they may take to start
//! it.
//!
//! Owns the connection limits of a listener: at most
//! [`CONNECTIONS_PER_ADDRESS_MAX`] connections from one peer address and
//! [`CONNECTIONS_MAX`] in all; a newcomer past either limit takes the place
//! of the connection (of that address, or of all) that has been silent
//! longest, once it has been silent [`IDLE_EVICT_MS`] (a connection that
//! connected and went quiet, or stalled in its TLS handshake, holds its
//! place only until somebody needs it); otherwise the newcomer is closed.
//! Also a deadline of [`HANDSHAKE_TIMEOUT_MS`] for a connection's first
//! [`HANDSHAKE_BYTES_MIN`] bytes (the HTTP/2 preface, or a TLS hello; the
//! whole TLS handshake has the same deadline, set on the TLS acceptor), a
//! spare descriptor that lets the loop shed a connection when the process
//! runs out of descriptors, and backoff on accept errors. Never reads or
//! writes a byte of the protocol itself; never blocks the accept loop on
//! one connection.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// Connections from one peer address at once; more are closed on accept.
pub const CONNECTIONS_PER_ADDRESS_MAX: usize = 256;
/// Connections at once on one listener; more are closed on accept.
pub const CONNECTIONS_MAX: usize = 8_192;
/// A connection that has not sent its first [`HANDSHAKE_BYTES_MIN`] bytes
/// this long after it was accepted is closed, ms.
pub const HANDSHAKE_TIMEOUT_MS: u64 = 10_000;
/// Bytes a connection must send before [`HANDSHAKE_TIMEOUT_MS`]: the
/// length of the HTTP/2 client preface (a TLS hello is longer).
pub const HANDSHAKE_BYTES_MIN: usize = 24;
/// Longest wait after a failed accept, ms (starting at 5 ms, doubling).
pub const ACCEPT_BACKOFF_MS_MAX: u64 = 1_000;
/// A connection silent (nothing read from it) this long may be closed to
/// make room for a newcomer when its listener (or its address) is full, ms.
pub const IDLE_EVICT_MS: u64 = 10_000;
/// Accepted connections queued for the server, at most.
const QUEUE_CONNECTIONS_MAX: usize = 64;

/// Open connections per peer address (and in all) of one listener.
#[derive(Default)]
struct Counts {
    by_ip: HashMap<IpAddr, usize>,
    total: usize,
    /// Every open connection's shared state, by its number.
    open: HashMap<u64, (IpAddr, Arc<Shared>)>,
    next: u64,
}

/// What the accept loop and a connection share: when it last read a
/// byte, and whether it must close.
struct Shared {
    /// When the connection last read a byte, ms since the listener began.
    last_read_ms: std::sync::atomic::AtomicU64,
    evicted: std::sync::atomic::AtomicBool,
    /// The reader's waker while a read is pending, to close it at once.
    waker: Mutex<Option<std::task::Waker>>,
}

impl Counts {
    /// Closes the connection silent longest (among those from `ip`, when
    /// given) if it has been silent [`IDLE_EVICT_MS`]; whether one was.
    fn evict_idlest(&mut self, ip: Option<IpAddr>, now_ms: u64) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let idlest = self
            .open
            .values()
            .filter(|(i, sh)| ip.is_none_or(|ip| *i == ip) && !sh.evicted.load(Relaxed))
            .min_by_key(|(_, sh)| sh.last_read_ms.load(Relaxed));
        let Some((_, sh)) = idlest else {
            return false;
        };
        if now_ms.saturating_sub(sh.last_read_ms.load(Relaxed)) < IDLE_EVICT_MS {
            return false;
        }
        sh.evicted.store(true, Relaxed);
        if let Some(w) = sh.waker.lock().take() {
            w.wake();
        }
        true
    }
}

/// A connection's place in its listener's counts; leaves them on drop.
struct Slot {
    counts: Arc<Mutex<Counts>>,
    ip: IpAddr,
    id: u64,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut c = self.counts.lock();
        c.total -= 1;
        c.open.remove(&self.id);
        if let Some(n) = c.by_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                c.by_ip.remove(&self.ip);
            }
        }
    }
}

/// An accepted connection under its listener's limits.
pub struct Conn {
    inner: TcpStream,
    /// Until the first bytes arrive: when the connection is given up.
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    read: usize,
    shared: Arc<Shared>,
    /// When the listener began (the origin of `last_read_ms`).
    epoch: tokio::time::Instant,
    _slot: Slot,
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        use std::sync::atomic::Ordering::Relaxed;
        if self.shared.evicted.load(Relaxed) {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                format!(
                    "closed for a newcomer: the listener was full and this connection \
                     had been silent {IDLE_EVICT_MS} ms or more (IDLE_EVICT_MS)"
                ),
            )));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = r {
            let n = buf.filled().len() - before;
            self.read += n;
            if n > 0 {
                let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
                self.shared.last_read_ms.store(ms, Relaxed);
            }
            if self.read >= HANDSHAKE_BYTES_MIN {
                self.deadline = None;
            }
            return r;
        }
        if r.is_pending() {
            *self.shared.waker.lock() = Some(cx.waker().clone());
            if self.shared.evicted.load(Relaxed) {
                cx.waker().wake_by_ref();
            }
            if let Some(d) = self.deadline.as_mut() {
                if d.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!(
                            "no handshake within {HANDSHAKE_TIMEOUT_MS} ms of connecting \
                             (HANDSHAKE_TIMEOUT_MS)"
                        ),
                    )));
                }
            }
        }
        r
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for Conn {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

/// Accepts connections of `listener` under the limits above, until the
/// returned stream is dropped. Sockets get `TCP_NODELAY` (scan batches
/// are small; Nagle would hold each until the peer's delayed ACK).
pub fn incoming(listener: TcpListener) -> tokio_stream::wrappers::ReceiverStream<io::Result<Conn>> {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_CONNECTIONS_MAX);
    tokio::spawn(accept_loop(listener, tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

async fn accept_loop(listener: TcpListener, tx: tokio::sync::mpsc::Sender<io::Result<Conn>>) {
    let counts = Arc::new(Mutex::new(Counts::default()));
    let epoch = tokio::time::Instant::now();
    // A spare descriptor: when the process has none left, closing it lets
    // the loop accept (and at once close) one connection, so a peer that
    // floods us is shed instead of spinning the loop.
    let mut reserve = std::fs::File::open("/dev/null").ok();
    let mut backoff_ms = 0u64;
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = tx.closed() => return,
        };
        let (sock, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                let out_of_fds = matches!(e.raw_os_error(), Some(23 | 24)); // ENFILE, EMFILE
                if out_of_fds {
                    drop(reserve.take());
                    if let Ok((s, peer)) = listener.accept().await {
                        tracing::warn!(%peer, "out of file descriptors: closing a new connection");
                        drop(s);
                    }
                    reserve = std::fs::File::open("/dev/null").ok();
                }
                backoff_ms = (backoff_ms * 2).clamp(5, ACCEPT_BACKOFF_MS_MAX);
                tracing::warn!(error = %e, backoff_ms, "accept failed");
                tokio::time::sleep(Duration::from_millis(backoff_ms)).await;
                continue;
            }
        };
        backoff_ms = 0;
        let ip = peer.ip();
        let now_ms = u64::try_from(epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        let slot = {
            let mut c = counts.lock();
            let from_ip = c.by_ip.get(&ip).copied().unwrap_or(0);
            // A full listener (or address) makes room by closing its
            // idlest connection; the newcomer takes the place at once (the
            // closed one leaves the counts when its reader sees it).
            let room = if from_ip >= CONNECTIONS_PER_ADDRESS_MAX {
                c.evict_idlest(Some(ip), now_ms)
            } else if c.total >= CONNECTIONS_MAX {
                c.evict_idlest(None, now_ms)
            } else {
                true
            };
            if room {
                c.total += 1;
                *c.by_ip.entry(ip).or_default() += 1;
                let id = c.next;
                c.next += 1;
                let shared = Arc::new(Shared {
                    last_read_ms: std::sync::atomic::AtomicU64::new(now_ms),
                    evicted: std::sync::atomic::AtomicBool::new(false),
                    waker: Mutex::new(None),
                });
                c.open.insert(id, (ip, shared.clone()));
                Some((
                    Slot {
                        counts: counts.clone(),
                        ip,
                        id,
                    },
                    shared,
                ))
            } else {
                None
            }
        };
        let Some((slot, shared)) = slot else {
            tracing::debug!(%peer, "connection limit reached: closing a new connection");
            drop(sock);
            continue;
        };
        let _ = sock.set_nodelay(true);
        let conn = Conn {
            inner: sock,
            deadline: Some(Box::pin(tokio::time::sleep(Duration::from_millis(
                HANDSHAKE_TIMEOUT_MS,
            )))),
            read: 0,
            shared,
            epoch,
            _slot: slot,
        };
        if tx.send(Ok(conn)).await.is_err() {
            return;
        }
    }
}
