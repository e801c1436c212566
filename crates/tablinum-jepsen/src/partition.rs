//! A network partition between one tablet server and the manager, without
//! firewall rules: each tablet server reaches the manager through its own
//! TCP relay on loopback, and cutting the relay stops forwarding in both
//! directions. Bytes already sent stay in the kernel's buffers and new
//! connections wait unanswered, as across a dropped link (no reset, no
//! error: the peer only sees silence); healing resumes forwarding on the
//! same connections.
//!
//! Chosen over nftables/iptables rules because a rule on loopback cannot
//! tell one local process from another without a cgroup match, which this
//! machine's kernel setup lacks, and because nothing here can outlive the
//! test: the relay is a thread of the harness and dies with it.
//!
//! Owns its listener and the threads that copy bytes; never connects
//! anywhere but its one upstream address on loopback. Every thread polls a
//! stop flag at least every `POLL_MS` and ends once the relay is dropped.

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often a relay thread looks at its cut and stop flags, ms.
pub const POLL_MS: u64 = 20;
/// Bytes one read moves at most.
const CHUNK_BYTES: usize = 64 << 10;

/// A TCP relay to one upstream address that can be cut and healed.
pub struct Relay {
    /// Where clients of the relay connect (`127.0.0.1:port`).
    pub addr: String,
    cut: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
}

impl Relay {
    /// Listens on a free loopback port and relays every connection to
    /// `upstream`.
    pub fn start(upstream: &str) -> Result<Relay, String> {
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("relay bind: {e}"))?;
        let addr = l
            .local_addr()
            .map_err(|e| format!("relay address: {e}"))?
            .to_string();
        l.set_nonblocking(true)
            .map_err(|e| format!("relay listener: {e}"))?;
        let cut = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s, up) = (cut.clone(), stop.clone(), upstream.to_string());
        std::thread::spawn(move || accept_loop(l, &up, &c, &s));
        Ok(Relay { addr, cut, stop })
    }

    /// Stops forwarding (both ways, every connection, new ones too).
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
    }

    /// Forwards again.
    pub fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }

    /// Whether it is cut now.
    pub fn is_cut(&self) -> bool {
        self.cut.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn pause() {
    std::thread::sleep(Duration::from_millis(POLL_MS));
}

fn accept_loop(l: TcpListener, upstream: &str, cut: &Arc<AtomicBool>, stop: &Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        let down = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                pause();
                continue;
            }
            Err(_) => {
                pause();
                continue;
            }
        };
        let (cut, stop, upstream) = (cut.clone(), stop.clone(), upstream.to_string());
        std::thread::spawn(move || {
            // A connection made while cut waits, unanswered, for the heal.
            while cut.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                pause();
            }
            let Ok(up) = TcpStream::connect(&upstream) else {
                return; // dropping `down` closes it, as a refused upstream would
            };
            let pair = (down.try_clone(), up.try_clone());
            let (Ok(down2), Ok(up2)) = pair else {
                return;
            };
            let (c2, s2) = (cut.clone(), stop.clone());
            std::thread::spawn(move || copy(down2, up2, &c2, &s2));
            copy(up, down, &cut, &stop);
        });
    }
}

/// Copies `from` to `to` until either side ends or the relay stops; while
/// cut, reads nothing (the bytes wait in the kernel).
fn copy(mut from: TcpStream, mut to: TcpStream, cut: &AtomicBool, stop: &AtomicBool) {
    let _ = from.set_read_timeout(Some(Duration::from_millis(POLL_MS)));
    let mut buf = vec![0u8; CHUNK_BYTES];
    while !stop.load(Ordering::SeqCst) {
        if cut.load(Ordering::SeqCst) {
            pause();
            continue;
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Read just as the cut came: held until the heal.
                while cut.load(Ordering::SeqCst) && !stop.load(Ordering::SeqCst) {
                    pause();
                }
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    /// An echo server on loopback for the relay to reach.
    fn echo() -> String {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for s in l.incoming().take(4).flatten() {
                std::thread::spawn(move || {
                    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
                    let mut w = s;
                    let mut line = String::new();
                    while r.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
                        let _ = w.write_all(line.as_bytes());
                        line.clear();
                    }
                });
            }
        });
        addr
    }

    fn ask(r: &mut std::io::BufReader<TcpStream>, w: &mut TcpStream, q: &str) -> Option<String> {
        w.write_all(format!("{q}\n").as_bytes()).unwrap();
        let mut line = String::new();
        match r.read_line(&mut line) {
            Ok(n) if n > 0 => Some(line.trim().to_string()),
            _ => None,
        }
    }

    #[test]
    fn a_cut_relay_answers_nothing_and_a_healed_one_delivers_what_waited() {
        let relay = Relay::start(&echo()).unwrap();
        let s = TcpStream::connect(&relay.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut r = std::io::BufReader::new(s.try_clone().unwrap());
        let mut w = s;
        assert_eq!(ask(&mut r, &mut w, "one").as_deref(), Some("one"));
        relay.cut();
        assert!(relay.is_cut());
        assert_eq!(ask(&mut r, &mut w, "two"), None, "silence while cut");
        relay.heal();
        // The question asked while cut arrives now, then the next one.
        let mut line = String::new();
        r.get_mut()
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        r.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "two");
        assert_eq!(ask(&mut r, &mut w, "three").as_deref(), Some("three"));
    }
}
