//! A scripted remote write receiver for the `prometheus_remote_write`
//! sink's tests: it answers requests in turn with the statuses a test
//! gives (what a real Prometheus cannot be made to answer: 429 with
//! `Retry-After`, 500, 401), records each request's headers and body, and
//! decodes the body as a receiver does (snappy block format, then the
//! remote write 1.0 protobuf, messages written here from the published
//! schema).
//!
//! Included with `#[path = "common/remote_write.rs"] mod remote_write;`.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use prost::Message;

/// One request as it arrived.
#[derive(Debug, Clone)]
pub struct Seen {
    pub at: Instant,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Seen {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP/1.1 receiver answering requests in turn with `script`
/// (status, extra header lines, body), then 204.
pub struct Scripted {
    pub addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Scripted {
    pub fn start(script: Vec<(u16, &'static str, &'static str)>) -> Scripted {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let s = seen.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { return };
                let (s, script) = (s.clone(), script.clone());
                std::thread::spawn(move || serve(conn, s, script));
            }
        });
        Scripted { addr, seen }
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    pub fn url(&self) -> String {
        format!("http://{}/api/v1/write", self.addr)
    }
}

type Script = Arc<Mutex<VecDeque<(u16, &'static str, &'static str)>>>;

fn serve(conn: std::net::TcpStream, seen: Arc<Mutex<Vec<Seen>>>, script: Script) {
    let mut w = conn.try_clone().unwrap();
    let mut r = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            r.read_line(&mut h).unwrap();
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            let (k, v) = h.split_once(':').unwrap();
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .map_or(0, |(_, v)| v.parse().unwrap());
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        seen.lock().unwrap().push(Seen {
            at: Instant::now(),
            headers,
            body,
        });
        let (status, extra, text) = script.lock().unwrap().pop_front().unwrap_or((204, "", ""));
        let _ = write!(
            w,
            "HTTP/1.1 {status} X\r\n{extra}Content-Length: {}\r\n\r\n{text}",
            text.len()
        );
    }
}

/// The remote write messages, as a receiver decodes them.
#[derive(Clone, PartialEq, Message)]
pub struct WriteRequest {
    #[prost(message, repeated, tag = "1")]
    pub timeseries: Vec<TimeSeries>,
}

#[derive(Clone, PartialEq, Message)]
pub struct TimeSeries {
    #[prost(message, repeated, tag = "1")]
    pub labels: Vec<Label>,
    #[prost(message, repeated, tag = "2")]
    pub samples: Vec<Sample>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Label {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sample {
    #[prost(double, tag = "1")]
    pub value: f64,
    #[prost(int64, tag = "2")]
    pub timestamp: i64,
}

pub fn decode(body: &[u8]) -> WriteRequest {
    let raw = snap::raw::Decoder::new()
        .decompress_vec(body)
        .expect("a snappy block-format body");
    WriteRequest::decode(raw.as_slice()).expect("a remote write WriteRequest")
}
