//! Test receivers: small HTTP servers on 127.0.0.1, port 0, that implement
//! the documented answers of each API — Elasticsearch `_bulk` (`errors`,
//! `items[].create.status`/`error`), OTLP/HTTP (`Export*ServiceResponse`
//! with `partial_success`, `google.rpc.Status` on failure), OpenObserve
//! `_json` (`status[].successful/failed/error`) — and play scripted faults:
//! statuses with `Retry-After`, answers lost after the data was stored (the
//! connection closed before the response), slow answers, too-large bodies.
//!
//! They keep what a real receiver would (documents by id) and what a test
//! needs to judge the sink: every arrival of every id, the 409s answered,
//! and which ids travelled in a request whose answer was lost — the only
//! duplicates a correct sink may cause.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use prost::Message;
use serde_json::{json, Value};

/// Which API a receiver speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    Elasticsearch,
    Otlp,
    OpenObserve,
}

/// What a receiver does with one request, instead of answering normally.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer this status (and `Retry-After`), storing nothing.
    Status {
        status: u16,
        retry_after: Option<String>,
    },
    /// Store the events, then close the connection without an answer: the
    /// sink cannot know they arrived.
    LoseAnswer,
    /// Store the events and answer after this long (a timeout, if longer
    /// than the sink's request_timeout).
    Slow(Duration),
}

impl Fault {
    pub fn status(status: u16) -> Fault {
        Fault::Status {
            status,
            retry_after: None,
        }
    }
}

/// Everything a receiver saw and keeps.
#[derive(Debug, Default)]
pub struct State {
    /// Requests answered (or dropped), in order.
    pub requests: u64,
    /// The status of each answer (0 for a lost answer).
    pub statuses: Vec<u16>,
    /// When each request arrived.
    pub times: Vec<std::time::Instant>,
    pub paths: Vec<String>,
    pub authorization: Vec<Option<String>>,
    pub content_encodings: Vec<Option<String>>,
    /// Ids of events per request, in order.
    pub batches: Vec<Vec<String>>,
    /// How many times each id arrived.
    pub arrivals: HashMap<String, u32>,
    /// How many times each id was stored (an Elasticsearch `create` stores
    /// once; OTLP and OpenObserve store every arrival they accept).
    pub stored: HashMap<String, u32>,
    /// Stored documents (Elasticsearch, OpenObserve) by id.
    pub docs: HashMap<String, Value>,
    /// The `_index` of each stored Elasticsearch document.
    pub indices: HashMap<String, String>,
    /// Elasticsearch: every arrival of every id as its action and document
    /// lines exactly as sent (`action\ndocument`), for tests that hold the
    /// bytes a sink sends to a recorded expectation.
    pub raw: HashMap<String, Vec<String>>,
    /// Ids answered 409 (already stored).
    pub conflicts: Vec<String>,
    /// Ids in requests whose answer was lost or late: the duplicates a
    /// correct sink may cause.
    pub explained: HashSet<String>,
    /// OTLP: (path, resource groups, scope groups, records) per request.
    pub otlp_shapes: Vec<(String, usize, usize, usize)>,

    // ------------------------------------------------------------ script
    /// Faults for the next requests, one each; then normal answers.
    pub faults: VecDeque<Fault>,
    /// Elasticsearch: statuses to answer for an id (one per arrival) before
    /// accepting it.
    pub item_status: HashMap<String, VecDeque<u16>>,
    /// Elasticsearch: ids always refused with a mapping error (400).
    pub reject: HashSet<String>,
    /// 413 for bodies (as received) larger than this.
    pub max_body: Option<usize>,
    /// OTLP: the next answers' `partial_success` (rejected, message); the
    /// last `rejected` records of such a request are not stored.
    pub partial: VecDeque<(i64, String)>,
    /// OpenObserve: the next answers' `failed` counts (with an error).
    pub failed: VecDeque<u64>,
    /// Elasticsearch: a per-document verdict by content (for tests that
    /// cannot know the ids in advance): `Some(status)` answers that item
    /// status instead of storing the document (400 is a mapping error).
    pub judge: Option<Judge>,
    /// While true, every request is dropped unanswered, before anything is
    /// stored (with `refuse`, the receiver is down).
    pub down: bool,
    /// A request answered this long after it arrived may have been given up
    /// by the sender (its timeout counts from before the receiver saw the
    /// request): its ids go to `explained`, and it is counted in `late`.
    pub late_after: Option<Duration>,
    pub late: u64,
    /// Elasticsearch: accept at most this many documents a second and answer
    /// per-item 429 above that, as a full write queue does.
    pub rate: Option<RateLimit>,
    /// Per-item 429s answered for the rate limit.
    pub busy: u64,
    /// While set, every request is answered this status (and stores
    /// nothing): a receiver that is up but failing, like a 500 outage.
    pub failing: Option<u16>,

    // ------------------------------------------------------------ epochs
    /// Set by the test: which run of the agent is sending now. Each
    /// connection keeps the epoch it was accepted in.
    pub epoch: u32,
    /// For every delivery of an id (stored, or an Elasticsearch 409), the
    /// epoch of the connection it came on: a repeat in a later epoch is
    /// explained by the agent's restart.
    pub delivered_epochs: HashMap<String, Vec<u32>>,
    /// The epoch of the request being handled.
    conn_epoch: u32,
    /// Peers whose connections the accept loop has taken (for `settle`).
    accepted: HashSet<SocketAddr>,
}

impl State {
    fn delivered(&mut self, id: &str) {
        let e = self.conn_epoch;
        self.delivered_epochs
            .entry(id.to_string())
            .or_default()
            .push(e);
    }
}

/// A token bucket of documents: `per_second` refilled continuously, at most
/// a tenth of a second's worth held (so a burst cannot hide the limit).
#[derive(Debug, Clone)]
pub struct RateLimit {
    pub per_second: f64,
    tokens: f64,
    at: Option<std::time::Instant>,
}

impl RateLimit {
    pub fn new(per_second: u64) -> RateLimit {
        RateLimit {
            per_second: per_second as f64,
            tokens: per_second as f64 / 10.0,
            at: None,
        }
    }

    /// Whether one more document fits now.
    fn take(&mut self) -> bool {
        let now = std::time::Instant::now();
        let cap = self.per_second / 10.0;
        if let Some(at) = self.at {
            self.tokens = (self.tokens + (now - at).as_secs_f64() * self.per_second).min(cap);
        }
        self.at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

pub type Verdict = dyn Fn(&Value) -> Option<u16> + Send + Sync;

/// See [`State::judge`].
#[derive(Clone)]
pub struct Judge(pub Arc<Verdict>);

impl std::fmt::Debug for Judge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Judge")
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    pub api: Api,
    state: Arc<Mutex<State>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }
}

fn serve(
    api: Api,
    listener: tokio::net::TcpListener,
    state: Arc<Mutex<State>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((stream, peer)) = listener.accept().await else {
                return;
            };
            let s = state.clone();
            let epoch = {
                let mut st = s.lock().unwrap();
                st.accepted.insert(peer);
                st.epoch
            };
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| handle(api, s.clone(), epoch, req));
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

impl Receiver {
    pub async fn start(api: Api) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let task = serve(api, listener, state.clone());
        Receiver {
            addr,
            api,
            state,
            task: Mutex::new(Some(task)),
        }
    }

    /// The receiver goes down: new connections are refused, and requests on
    /// connections already open are dropped unanswered, storing nothing.
    pub fn refuse(&self) {
        self.state().down = true;
        if let Some(t) = self.task.lock().unwrap().take() {
            t.abort();
        }
    }

    /// Returns once every connection made before the call has been taken
    /// by the accept loop (and so labelled with the epoch of its time): a
    /// connection of our own, made now, is accepted after them.
    pub async fn settle(&self) {
        if self.task.lock().unwrap().is_none() {
            return;
        }
        let probe = tokio::net::TcpStream::connect(self.addr).await.unwrap();
        let me = probe.local_addr().unwrap();
        while !self.state().accepted.remove(&me) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The receiver comes back on the same address.
    pub async fn accept(&self) {
        if self.task.lock().unwrap().is_some() {
            return;
        }
        let listener = loop {
            // The aborted accept loop releases the socket when its task is
            // dropped, which may be a moment after `abort`.
            match tokio::net::TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => {
                    tokio::task::yield_now().await
                }
                Err(e) => panic!("rebinding {}: {e}", self.addr),
            }
        };
        *self.task.lock().unwrap() = Some(serve(self.api, listener, self.state.clone()));
        self.state().down = false;
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    pub fn url(&self) -> reqwest::Url {
        reqwest::Url::parse(&format!("http://{}", self.addr)).unwrap()
    }

    /// Queues faults for the next requests.
    pub fn script(&self, faults: impl IntoIterator<Item = Fault>) {
        self.state().faults.extend(faults);
    }
}

/// The connection is closed without an answer.
#[derive(Debug)]
struct Dropped;

impl std::fmt::Display for Dropped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("answer deliberately lost")
    }
}

impl std::error::Error for Dropped {}

fn respond(status: u16, content_type: &str, body: Vec<u8>) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

async fn handle(
    api: Api,
    state: Arc<Mutex<State>>,
    epoch: u32,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Dropped> {
    let arrived = std::time::Instant::now();
    let path = req.uri().path().to_string();
    let header = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let auth = header("authorization");
    let encoding = header("content-encoding");
    let content_type = header("content-type").unwrap_or_default();
    let raw = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return Err(Dropped),
    };
    let body = if encoding.as_deref() == Some("gzip") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&raw[..])
            .read_to_end(&mut out)
            .unwrap();
        out
    } else {
        raw.to_vec()
    };
    let fault = {
        let mut st = state.lock().unwrap();
        if st.down {
            return Err(Dropped);
        }
        st.requests += 1;
        st.times.push(std::time::Instant::now());
        st.paths.push(path.clone());
        st.authorization.push(auth);
        st.content_encodings.push(encoding);
        if st.max_body.is_some_and(|m| raw.len() > m) {
            st.statuses.push(413);
            return Ok(error_answer(api, 413, None, &content_type));
        }
        if let Some(status) = st.failing {
            st.statuses.push(status);
            return Ok(error_answer(api, status, None, &content_type));
        }
        st.faults.pop_front()
    };
    if let Some(Fault::Status {
        status,
        retry_after,
    }) = &fault
    {
        state.lock().unwrap().statuses.push(*status);
        return Ok(error_answer(
            api,
            *status,
            retry_after.as_deref(),
            &content_type,
        ));
    }
    let (status, ct, answer, ids) = {
        let mut st = state.lock().unwrap();
        st.conn_epoch = epoch;
        match api {
            Api::Elasticsearch => elasticsearch(&mut st, &body),
            Api::Otlp => otlp(&mut st, &path, &content_type, &body),
            Api::OpenObserve => openobserve(&mut st, &path, &body),
        }
    };
    match fault {
        Some(Fault::LoseAnswer) => {
            let mut st = state.lock().unwrap();
            st.explained.extend(ids);
            st.statuses.push(0);
            Err(Dropped)
        }
        Some(Fault::Slow(d)) => {
            {
                let mut st = state.lock().unwrap();
                st.explained.extend(ids);
                st.statuses.push(status);
            }
            tokio::time::sleep(d).await;
            Ok(respond(status, ct, answer))
        }
        _ => {
            let mut st = state.lock().unwrap();
            st.statuses.push(status);
            if st.late_after.is_some_and(|l| arrived.elapsed() >= l) {
                st.late += 1;
                st.explained.extend(ids);
            }
            Ok(respond(status, ct, answer))
        }
    }
}

/// A failure answer in the API's own format.
fn error_answer(
    api: Api,
    status: u16,
    retry_after: Option<&str>,
    content_type: &str,
) -> Response<Full<Bytes>> {
    let reason = match status {
        401 => "missing authentication credentials",
        413 => "request body too large",
        429 => "too many requests",
        503 => "service unavailable",
        _ => "failure",
    };
    let (ct, body) = match api {
        Api::Elasticsearch => (
            "application/json",
            serde_json::to_vec(&json!({
                "error": {"root_cause": [{"type": "test_exception", "reason": reason}],
                          "type": "test_exception", "reason": reason},
                "status": status
            }))
            .unwrap(),
        ),
        Api::Otlp if content_type.contains("json") => (
            "application/json",
            serde_json::to_vec(&json!({"code": 14, "message": reason})).unwrap(),
        ),
        Api::Otlp => ("application/x-protobuf", rpc_status(14, reason)),
        Api::OpenObserve => (
            "application/json",
            serde_json::to_vec(&json!({"code": status, "message": reason})).unwrap(),
        ),
    };
    let mut r = respond(status, ct, body);
    if let Some(ra) = retry_after {
        r.headers_mut().insert("retry-after", ra.parse().unwrap());
    }
    r
}

/// `google.rpc.Status` { code = 1, message = 2 }.
fn rpc_status(code: i32, message: &str) -> Vec<u8> {
    #[derive(Clone, PartialEq, prost::Message)]
    struct RpcStatus {
        #[prost(int32, tag = "1")]
        code: i32,
        #[prost(string, tag = "2")]
        message: String,
    }
    RpcStatus {
        code,
        message: message.into(),
    }
    .encode_to_vec()
}

fn elasticsearch(st: &mut State, body: &[u8]) -> (u16, &'static str, Vec<u8>, Vec<String>) {
    let text = std::str::from_utf8(body).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines.len() % 2, 0, "a _bulk body is action/document pairs");
    let mut items = Vec::new();
    let mut ids = Vec::new();
    let mut errors = false;
    for pair in lines.chunks(2) {
        let action: Value = serde_json::from_str(pair[0]).unwrap();
        let doc: Value = serde_json::from_str(pair[1]).unwrap();
        let create = &action["create"];
        assert!(create.is_object(), "only create actions: {action}");
        let id = create["_id"].as_str().unwrap().to_string();
        let index = create["_index"].as_str().unwrap().to_string();
        ids.push(id.clone());
        *st.arrivals.entry(id.clone()).or_default() += 1;
        st.raw
            .entry(id.clone())
            .or_default()
            .push(format!("{}\n{}", pair[0], pair[1]));
        let scripted = st
            .item_status
            .get_mut(&id)
            .and_then(|q| q.pop_front())
            .or_else(|| st.judge.as_ref().and_then(|j| (j.0)(&doc)))
            .or_else(|| {
                let over = st.rate.as_mut().is_some_and(|r| !r.take());
                over.then_some(429)
            });
        if scripted == Some(429) && st.rate.is_some() {
            st.busy += 1;
        }
        let item = if st.reject.contains(&id) || scripted == Some(400) {
            json!({"_index": index, "_id": id, "status": 400, "error": {
                "type": "mapper_parsing_exception",
                "reason": format!("failed to parse field [attributes.n] of type [long] in document with id '{id}'. Preview of field's value: 'x'"),
                "caused_by": {"type": "illegal_argument_exception", "reason": "For input string: \"x\""}}})
        } else if let Some(s) = scripted {
            let (t, r) = match s {
                429 => ("es_rejected_execution_exception", "rejected execution of coordinating operation [coordinating_and_primary_bytes=0]"),
                _ => ("unavailable_shards_exception", "[idx][0] primary shard is not active"),
            };
            json!({"_index": index, "_id": id, "status": s, "error": {"type": t, "reason": r}})
        } else if st.stored.contains_key(&id) {
            st.delivered(&id);
            st.conflicts.push(id.clone());
            json!({"_index": index, "_id": id, "status": 409, "error": {
                "type": "version_conflict_engine_exception",
                "reason": format!("[{id}]: version conflict, document already exists (current version [1])"),
                "index_uuid": "aAsFqTI0Tc2W0LCWgPNrOA", "shard": "0", "index": index}})
        } else {
            *st.stored.entry(id.clone()).or_default() += 1;
            st.delivered(&id);
            st.docs.insert(id.clone(), doc);
            st.indices.insert(id.clone(), index.clone());
            json!({"_index": index, "_id": id, "_version": 1, "result": "created",
                   "_shards": {"total": 2, "successful": 1, "failed": 0},
                   "_seq_no": 0, "_primary_term": 1, "status": 201})
        };
        if item["status"].as_u64().unwrap() >= 300 {
            errors = true;
        }
        items.push(json!({"create": item}));
    }
    st.batches.push(ids.clone());
    let answer = json!({"took": 7, "errors": errors, "items": items});
    (
        200,
        "application/json",
        serde_json::to_vec(&answer).unwrap(),
        ids,
    )
}

/// The `test.id` attribute a test event carries, identifying it at the
/// receiver (OTLP records have no id field of their own).
fn test_id(attrs: &[KeyValue]) -> String {
    attrs
        .iter()
        .find(|kv| kv.key == "test.id")
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| match &v.value {
            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
            _ => None,
        })
        .expect("test events carry a test.id attribute")
}

/// A log record's `test.id`, or else its string body (a line from a file
/// carries its own number in its text).
fn log_id(l: &opentelemetry_proto::tonic::logs::v1::LogRecord) -> String {
    let body = l.body.as_ref().and_then(|b| match &b.value {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    });
    match body {
        Some(b) if !l.attributes.iter().any(|kv| kv.key == "test.id") => b,
        _ => test_id(&l.attributes),
    }
}

fn otlp(
    st: &mut State,
    path: &str,
    content_type: &str,
    body: &[u8],
) -> (u16, &'static str, Vec<u8>, Vec<String>) {
    let json = content_type.contains("json");
    let mut ids = Vec::new();
    let (resources, scopes) = match path {
        "/v1/logs" => {
            let r: ExportLogsServiceRequest = if json {
                serde_json::from_slice(body).unwrap()
            } else {
                ExportLogsServiceRequest::decode(body).unwrap()
            };
            for rl in &r.resource_logs {
                for sl in &rl.scope_logs {
                    ids.extend(sl.log_records.iter().map(log_id));
                }
            }
            (
                r.resource_logs.len(),
                r.resource_logs.iter().map(|r| r.scope_logs.len()).sum(),
            )
        }
        "/v1/traces" => {
            let r: ExportTraceServiceRequest = if json {
                serde_json::from_slice(body).unwrap()
            } else {
                ExportTraceServiceRequest::decode(body).unwrap()
            };
            for rs in &r.resource_spans {
                for ss in &rs.scope_spans {
                    ids.extend(ss.spans.iter().map(|s| test_id(&s.attributes)));
                }
            }
            (
                r.resource_spans.len(),
                r.resource_spans.iter().map(|r| r.scope_spans.len()).sum(),
            )
        }
        "/v1/metrics" => {
            let r: ExportMetricsServiceRequest = if json {
                serde_json::from_slice(body).unwrap()
            } else {
                ExportMetricsServiceRequest::decode(body).unwrap()
            };
            use opentelemetry_proto::tonic::metrics::v1::metric::Data;
            for rm in &r.resource_metrics {
                for sm in &rm.scope_metrics {
                    for m in &sm.metrics {
                        if let Some(Data::Gauge(g)) = &m.data {
                            ids.push(test_id(&g.data_points[0].attributes));
                        }
                    }
                }
            }
            (
                r.resource_metrics.len(),
                r.resource_metrics
                    .iter()
                    .map(|r| r.scope_metrics.len())
                    .sum(),
            )
        }
        other => panic!("unexpected OTLP path {other}"),
    };
    st.otlp_shapes
        .push((path.to_string(), resources, scopes, ids.len()));
    for id in &ids {
        *st.arrivals.entry(id.clone()).or_default() += 1;
    }
    let partial = st.partial.pop_front();
    let keep = ids.len() - partial.as_ref().map_or(0, |p| p.0.max(0) as usize);
    for id in &ids[..keep] {
        *st.stored.entry(id.clone()).or_default() += 1;
        st.delivered(id);
    }
    st.batches.push(ids.clone());
    // The answer: the same message type for every signal's response, here
    // built as the logs one (field numbers are shared).
    let response = ExportLogsServiceResponse {
        partial_success: partial.map(|(rejected, message)| ExportLogsPartialSuccess {
            rejected_log_records: rejected,
            error_message: message,
        }),
    };
    if json {
        let v = match &response.partial_success {
            Some(p) => {
                let key = match path {
                    "/v1/traces" => "rejectedSpans",
                    "/v1/metrics" => "rejectedDataPoints",
                    _ => "rejectedLogRecords",
                };
                json!({"partialSuccess": {key: p.rejected_log_records.to_string(), "errorMessage": p.error_message}})
            }
            None => json!({}),
        };
        (
            200,
            "application/json",
            serde_json::to_vec(&v).unwrap(),
            ids,
        )
    } else {
        (200, "application/x-protobuf", response.encode_to_vec(), ids)
    }
}

fn openobserve(
    st: &mut State,
    path: &str,
    body: &[u8],
) -> (u16, &'static str, Vec<u8>, Vec<String>) {
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    assert!(
        parts.len() == 4 && parts[0] == "api" && parts[3] == "_json",
        "unexpected path {path}"
    );
    let stream = parts[2].to_string();
    let docs: Vec<Value> = serde_json::from_slice(body).unwrap();
    let ids: Vec<String> = docs
        .iter()
        .map(|d| d["event_id"].as_str().unwrap().to_string())
        .collect();
    for id in &ids {
        *st.arrivals.entry(id.clone()).or_default() += 1;
    }
    let failed = st.failed.pop_front().unwrap_or(0) as usize;
    let keep = ids.len() - failed;
    for (id, d) in ids.iter().zip(&docs).take(keep) {
        *st.stored.entry(id.clone()).or_default() += 1;
        st.delivered(id);
        st.docs.insert(id.clone(), d.clone());
        st.indices.insert(id.clone(), stream.clone());
    }
    st.batches.push(ids.clone());
    let mut s = json!({"name": stream, "successful": keep, "failed": failed});
    if failed > 0 {
        s["error"] = json!("too old data, only last 5h data can be ingested");
    }
    let answer = json!({"code": 200, "status": [s]});
    (
        200,
        "application/json",
        serde_json::to_vec(&answer).unwrap(),
        ids,
    )
}
