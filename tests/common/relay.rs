//! A TCP relay on loopback that reads whatever each side writes as soon as
//! it is written, and when one side goes away (a kill -9 included) hands
//! the other side everything it had written, then closes that half
//! gracefully: the other side reads it all, then end of file, never a
//! reset.
//!
//! One connection at a time: a new one reaches the target only once the
//! target has closed the previous one, having read it to its end.
//!
//! Why: a process killed -9 with unread bytes in its socket makes its
//! kernel answer with a reset, and a peer that writes before it reads
//! (mosquitto does) then drops the connection with bytes it had received
//! and not read; and a client that restarts and connects again at once
//! takes its session over while the broker is still reading the old
//! connection, which the broker then closes unread. Between the two, the
//! relay keeps a test's count to what the killed process itself had or
//! had not written.
//!
//! Included with `#[path = "common/relay.rs"] mod relay;`.
#![allow(dead_code)]

use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Relays every connection made to `port` to `target`.
pub struct Relay {
    pub port: u16,
    stop: Arc<AtomicBool>,
    /// Per connection, in order: the MQTT packets each way, by type.
    pub connections: Arc<Mutex<Vec<Arc<Counts>>>>,
}

/// MQTT packets seen on one connection: `to_client[t]` of type `t` from
/// the target, `to_target[t]` from the client; `dup` publishes with DUP set.
#[derive(Default, Debug)]
pub struct Counts {
    pub to_client: [AtomicU64; 16],
    pub to_target: [AtomicU64; 16],
    pub dup: AtomicU64,
}

impl Relay {
    pub fn start(target: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding the relay");
        let port = listener.local_addr().expect("the relay's address").port();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let connections: Arc<Mutex<Vec<Arc<Counts>>>> = Arc::default();
        let all = connections.clone();
        std::thread::spawn(move || {
            let mut previous: Option<std::thread::JoinHandle<()>> = None;
            for client in listener.incoming() {
                if stopping.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(client) = client else { continue };
                // One connection at a time: the next reaches the target once
                // the target has closed the previous one, i.e. has read it to
                // its end.
                if let Some(p) = previous.take() {
                    let _ = p.join();
                }
                let Ok(server) = TcpStream::connect(target) else {
                    // As if the target were down: the client sees a close.
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (c2, s2) = match (client.try_clone(), server.try_clone()) {
                    (Ok(c), Ok(s)) => (c, s),
                    _ => continue,
                };
                let counts = Arc::new(Counts::default());
                all.lock().unwrap().push(counts.clone());
                let c = counts.clone();
                std::thread::spawn(move || pump(client, server, &c, false));
                previous = Some(std::thread::spawn(move || pump(s2, c2, &counts, true)));
            }
        });
        Relay {
            port,
            stop,
            connections,
        }
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept loop so that it sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Copies `from` to `to` until `from` ends (end of file or a reset: the
/// bytes received before a reset are read first), then closes the writing
/// half of `to`. When `to` can no longer be written, goes on reading `from`
/// to its end, so that `from`'s writer never meets a reset either.
fn pump(mut from: TcpStream, mut to: TcpStream, counts: &Counts, to_client: bool) {
    let mut buf = vec![0u8; 64 << 10];
    let mut open = true;
    let mut frames = Frames::default();
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        frames.feed(&buf[..n], |head| {
            let t = usize::from(head >> 4);
            let by_type = if to_client {
                &counts.to_client
            } else {
                &counts.to_target
            };
            by_type[t].fetch_add(1, Ordering::Relaxed);
            if to_client && t == 3 && head & 0x08 != 0 {
                counts.dup.fetch_add(1, Ordering::Relaxed);
            }
        });
        if open && to.write_all(&buf[..n]).is_err() {
            open = false;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// Splits a byte stream into MQTT packets, calling `f` with each one's
/// first byte (its type and flags).
#[derive(Default)]
struct Frames {
    /// The current packet's first byte and remaining-length bytes so far.
    head: Vec<u8>,
    /// Bytes of the current packet's body still to skip.
    skip: usize,
}

impl Frames {
    fn feed(&mut self, mut bytes: &[u8], mut f: impl FnMut(u8)) {
        while !bytes.is_empty() {
            if self.skip > 0 {
                let n = self.skip.min(bytes.len());
                self.skip -= n;
                bytes = &bytes[n..];
                continue;
            }
            self.head.push(bytes[0]);
            bytes = &bytes[1..];
            let h = &self.head;
            // The remaining length ends at its first byte below 0x80.
            if h.len() >= 2 && h[h.len() - 1] < 0x80 {
                let mut len = 0usize;
                for (i, b) in h[1..].iter().enumerate() {
                    len |= usize::from(b & 0x7f) << (7 * i);
                }
                f(h[0]);
                self.head.clear();
                self.skip = len;
            }
        }
    }
}
