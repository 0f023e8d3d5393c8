//! The receivers: `_bulk` and `/v1/logs` on one thread of this process,
//! answering from a scan of the body rather than a parse, and counting
//! the numbered lines they accept.

use std::io::Read;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;

use crate::input::LINENO;
use crate::measure::proc_sample;

#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) accepting: AtomicBool,
    pub(crate) es_docs: AtomicU64,
    pub(crate) otlp_records: AtomicU64,
    pub(crate) requests: AtomicU64,
    pub(crate) refused: AtomicU64,
    pub(crate) body_bytes: AtomicU64,
    /// Nanoseconds after `epoch` of the first accepted event; 0 = none yet.
    pub(crate) first_accept: AtomicU64,
    tid: AtomicU64,
    /// The status answered while not accepting; 0 means 503.
    pub(crate) refuse_status: AtomicU64,
    /// Per line number of the numbered corpus, how often an accepted
    /// document carried it (None: not counting).
    pub(crate) tally: std::sync::Mutex<Option<Vec<u8>>>,
    /// Accepted documents that carried a line number, and how many distinct.
    tally_docs: AtomicU64,
    tally_distinct: AtomicU64,
}

pub(crate) struct Receiver {
    pub(crate) addr: SocketAddr,
    pub(crate) stats: Arc<Stats>,
    epoch: Instant,
}

impl Receiver {
    pub(crate) fn start() -> Receiver {
        let stats = Arc::new(Stats::default());
        let epoch = Instant::now();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let st = stats.clone();
        std::thread::Builder::new()
            .name("receiver".into())
            .spawn(move || {
                // SAFETY: gettid has no preconditions.
                st.tid
                    .store(unsafe { libc::gettid() } as u64, Ordering::Relaxed);
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                    loop {
                        let Ok((stream, _)) = listener.accept().await else {
                            continue;
                        };
                        let _ = stream.set_nodelay(true);
                        let st = st.clone();
                        tokio::spawn(async move {
                            let svc = hyper::service::service_fn(move |req| {
                                handle(req, st.clone(), epoch)
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                });
            })
            .unwrap();
        while stats.tid.load(Ordering::Relaxed) == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        Receiver { addr, stats, epoch }
    }

    pub(crate) fn reset(&self, accepting: bool) {
        let s = &self.stats;
        for c in [
            &s.es_docs,
            &s.otlp_records,
            &s.requests,
            &s.refused,
            &s.body_bytes,
            &s.first_accept,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        s.refuse_status.store(0, Ordering::Relaxed);
        s.tally_docs.store(0, Ordering::Relaxed);
        s.tally_distinct.store(0, Ordering::Relaxed);
        *s.tally.lock().unwrap() = None;
        s.accepting.store(accepting, Ordering::SeqCst);
    }

    /// Like `reset`, and counts each accepted document by its line number
    /// (`lineno=` in the numbered corpus, `0..lines`).
    pub(crate) fn reset_counting(&self, accepting: bool, lines: u64) {
        self.reset(accepting);
        *self.stats.tally.lock().unwrap() = Some(vec![0u8; lines as usize]);
    }

    /// Accepted documents with a line number, and the distinct line numbers.
    pub(crate) fn tally(&self) -> (u64, u64) {
        (
            self.stats.tally_docs.load(Ordering::SeqCst),
            self.stats.tally_distinct.load(Ordering::SeqCst),
        )
    }

    pub(crate) fn first_accept(&self) -> Option<Instant> {
        match self.stats.first_accept.load(Ordering::SeqCst) {
            0 => None,
            n => Some(self.epoch + Duration::from_nanos(n)),
        }
    }

    pub(crate) fn cpu_s(&self) -> f64 {
        proc_sample(&format!(
            "/proc/self/task/{}",
            self.stats.tid.load(Ordering::Relaxed)
        ))
        .cpu_s
    }
}

type Answer = hyper::Response<Full<Bytes>>;

async fn handle(
    req: hyper::Request<hyper::body::Incoming>,
    st: Arc<Stats>,
    epoch: Instant,
) -> Result<Answer, hyper::Error> {
    let path = req.uri().path().to_string();
    let gzip = req
        .headers()
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    let wire = req.into_body().collect().await?.to_bytes();
    st.requests.fetch_add(1, Ordering::Relaxed);
    st.body_bytes
        .fetch_add(wire.len() as u64, Ordering::Relaxed);
    if !st.accepting.load(Ordering::SeqCst) {
        st.refused.fetch_add(1, Ordering::Relaxed);
        let status = match st.refuse_status.load(Ordering::Relaxed) {
            0 => 503,
            s => s as u16,
        };
        return Ok(answer(
            status,
            "application/json",
            br#"{"error":"not yet"}"#.to_vec(),
        ));
    }
    let body: Bytes = if gzip {
        let mut out = Vec::with_capacity(wire.len() * 4);
        if flate2::read::GzDecoder::new(&wire[..])
            .read_to_end(&mut out)
            .is_err()
        {
            return Ok(answer(400, "text/plain", b"bad gzip".to_vec()));
        }
        out.into()
    } else {
        wire
    };
    let (events, ct, out) = if path.ends_with("/_bulk") {
        let (docs, out) = bulk_answer(&body);
        tally_lines(&st, &body);
        st.es_docs.fetch_add(docs, Ordering::Relaxed);
        (docs, "application/json", out)
    } else if path == "/v1/logs" {
        let Some(n) = count_log_records(&body) else {
            return Ok(answer(400, "text/plain", b"bad protobuf".to_vec()));
        };
        st.otlp_records.fetch_add(n, Ordering::Relaxed);
        // An empty ExportLogsServiceResponse: everything accepted.
        (n, "application/x-protobuf", Vec::new())
    } else {
        return Ok(answer(404, "text/plain", b"no such API".to_vec()));
    };
    if events > 0 {
        let now = epoch.elapsed().as_nanos() as u64;
        let _ = st
            .first_accept
            .compare_exchange(0, now.max(1), Ordering::SeqCst, Ordering::SeqCst);
    }
    Ok(answer(200, ct, out))
}

fn answer(status: u16, ct: &str, body: Vec<u8>) -> Answer {
    hyper::Response::builder()
        .status(status)
        .header("content-type", ct)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// Counts the line numbers (`lineno=` and ten digits, once per document)
/// in an accepted `_bulk` body, when the receiver is counting.
fn tally_lines(st: &Stats, body: &[u8]) {
    let mut guard = st.tally.lock().unwrap();
    let Some(counts) = guard.as_mut() else {
        return;
    };
    let (mut docs, mut distinct) = (0u64, 0u64);
    for at in memchr::memmem::find_iter(body, LINENO) {
        let digits = body.get(at + LINENO.len()..at + LINENO.len() + 10);
        let Some(n) = digits.and_then(|d| std::str::from_utf8(d).ok()?.parse::<usize>().ok())
        else {
            continue;
        };
        let Some(c) = counts.get_mut(n) else {
            continue;
        };
        docs += 1;
        distinct += u64::from(*c == 0);
        *c = c.saturating_add(1);
    }
    st.tally_docs.fetch_add(docs, Ordering::SeqCst);
    st.tally_distinct.fetch_add(distinct, Ordering::SeqCst);
}

/// The `_bulk` answer: one `create` item per action line, with its `_id`.
fn bulk_answer(body: &[u8]) -> (u64, Vec<u8>) {
    let id_key = memchr::memmem::Finder::new(b"\"_id\":\"");
    let mut out = Vec::with_capacity(body.len() / 3 + 64);
    out.extend_from_slice(br#"{"took":1,"errors":false,"items":["#);
    let mut docs = 0u64;
    let mut start = 0;
    let mut action = true;
    for end in memchr::memchr_iter(b'\n', body).chain(std::iter::once(body.len())) {
        let line = &body[start..end];
        start = end + 1;
        if line.is_empty() {
            continue;
        }
        if action {
            let id = id_key
                .find(line)
                .map(|at| {
                    let rest = &line[at + 7..];
                    &rest[..memchr::memchr(b'"', rest).unwrap_or(0)]
                })
                .unwrap_or(b"");
            if docs > 0 {
                out.push(b',');
            }
            out.extend_from_slice(br#"{"create":{"_index":"holdfast-logs","_id":""#);
            out.extend_from_slice(id);
            out.extend_from_slice(br#"","_version":1,"result":"created","status":201}}"#);
            docs += 1;
        }
        action = !action;
    }
    out.extend_from_slice(b"]}");
    (docs, out)
}

/// Reads a protobuf varint at `*i`.
fn varint(b: &[u8], i: &mut usize) -> Option<u64> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*i)?;
        *i += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Calls `f(field, bytes)` for each length-delimited field of a message,
/// skipping the others.
fn each_len_field<'a>(b: &'a [u8], mut f: impl FnMut(u64, &'a [u8]) -> Option<()>) -> Option<()> {
    let mut i = 0;
    while i < b.len() {
        let key = varint(b, &mut i)?;
        match key & 7 {
            0 => {
                varint(b, &mut i)?;
            }
            1 => i += 8,
            5 => i += 4,
            2 => {
                let len = varint(b, &mut i)? as usize;
                let end = i.checked_add(len).filter(|&e| e <= b.len())?;
                f(key >> 3, &b[i..end])?;
                i = end;
            }
            _ => return None,
        }
    }
    (i == b.len()).then_some(())
}

/// Log records in an `ExportLogsServiceRequest`: resource_logs (1) →
/// scope_logs (2) → log_records (2), without decoding the records.
fn count_log_records(b: &[u8]) -> Option<u64> {
    let mut n = 0;
    each_len_field(b, |f, rl| {
        if f != 1 {
            return Some(());
        }
        each_len_field(rl, |f, sl| {
            if f != 2 {
                return Some(());
            }
            each_len_field(sl, |f, _| {
                n += u64::from(f == 2);
                Some(())
            })
        })
    })?;
    Some(n)
}
