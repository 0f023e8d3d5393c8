//! A harness for the `otlp_http` source tests: start the real source
//! in-process with a real log in a temporary directory on a free loopback
//! port, talk real HTTP/1.1 to it (hyper's client, or raw bytes when a test
//! needs to misbehave), read back what landed in the log, and rebuild OTLP
//! requests from the envelopes to compare with what was sent.
//!
//! Included with `mod otlp_http_common;`; not every test uses every helper.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use holdfast::api::{Health, Phase};
use holdfast::event::{Envelope, Record};
use holdfast::metrics::Metrics;
use holdfast::seglog::{Log, LogOptions, StartAt};
use holdfast::sources::otlp_http::{Listener, OtlpHttpSourceSettings};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, Metric, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const SOURCE: &str = "otlp";
/// The harness's own consumer: it never commits, so no segment is deleted
/// under a test's feet and the full-log tests really fill up.
pub const AUDIT: &str = "audit";

pub fn fixture_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/otlp")
        .join(name)
}

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(fixture_path(name)).unwrap_or_else(|e| panic!("reading fixture {name}: {e}"))
}

/// A free loopback port (bound and released; the source binds it next).
pub fn free_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// The source's settings with the documented defaults, on `addr`.
pub fn settings(addr: SocketAddr) -> OtlpHttpSourceSettings {
    OtlpHttpSourceSettings {
        listener: Listener {
            listen: addr,
            max_connections: NonZeroUsize::new(256).unwrap(),
            max_connections_per_peer: NonZeroUsize::new(32).unwrap(),
            tls_handshake_timeout: Duration::from_secs(10),
            tls: None,
        },
        max_body_bytes: 8 << 20,
        header_timeout: Duration::from_secs(10),
        request_timeout: Duration::from_secs(30),
        bearer_token_file: None,
        process: None,
    }
}

pub fn log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 4 << 20,
        max_bytes: 64 << 20,
        cursor_sync_interval: Duration::from_secs(3600),
        ..LogOptions::default()
    }
}

/// The source running in this process.
pub struct Agent {
    pub addr: SocketAddr,
    pub log: Log,
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
    pub stop: CancellationToken,
    pub task: Option<JoinHandle<anyhow::Result<()>>>,
    pub dir: tempfile::TempDir,
}

pub async fn start() -> Agent {
    start_with(|_, _| {}).await
}

/// Starts the source after `tweak` adjusted its settings and the log's.
pub async fn start_with(tweak: impl FnOnce(&mut OtlpHttpSourceSettings, &mut LogOptions)) -> Agent {
    let dir = tempfile::tempdir().unwrap();
    let mut opts = settings(free_addr());
    let mut log_opts = log_options();
    tweak(&mut opts, &mut log_opts);
    let path = dir.path().to_path_buf();
    let log = tokio::task::spawn_blocking(move || Log::open(path, log_opts))
        .await
        .unwrap()
        .unwrap();
    log.consumer(AUDIT, StartAt::Oldest).unwrap();
    let metrics = Arc::new(Metrics::new(Some(log.clone())));
    let health = Arc::new(Health::default());
    health.set(Phase::Ready);
    let stop = CancellationToken::new();
    let addr = opts.listener.listen;
    let task = tokio::spawn(holdfast::sources::otlp_http::run(
        SOURCE.to_string(),
        opts,
        log.clone(),
        metrics.clone(),
        health.clone(),
        stop.clone(),
    ));
    let agent = Agent {
        addr,
        log,
        metrics,
        health,
        stop,
        task: Some(task),
        dir,
    };
    agent.wait_listening().await;
    agent
}

impl Agent {
    async fn wait_listening(&self) {
        for _ in 0..500 {
            if TcpStream::connect(self.addr).await.is_ok() {
                return;
            }
            if self.task.as_ref().is_some_and(|t| t.is_finished()) {
                panic!("the source stopped before listening");
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the source is not listening on {} after 5 s", self.addr);
    }

    /// Cancels `stop` and waits for `run` to return.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        self.stop.cancel();
        let task = self.task.take().expect("stopped twice");
        tokio::time::timeout(Duration::from_secs(20), task)
            .await
            .expect("run did not return within 20 s of stop")
            .unwrap()
    }

    pub fn next_seq(&self) -> u64 {
        self.log.next_seq()
    }

    /// Every event in the log, decoded.
    pub fn events(&self) -> Vec<(u64, Envelope)> {
        events_from(&self.log, 0)
    }

    /// Events appended from `seq` on.
    pub fn events_since(&self, seq: u64) -> Vec<Envelope> {
        events_from(&self.log, seq)
            .into_iter()
            .map(|(_, e)| e)
            .collect()
    }

    pub fn client(&self) -> impl std::future::Future<Output = Client> {
        Client::connect(self.addr)
    }
}

pub fn events_from(log: &Log, seq: u64) -> Vec<(u64, Envelope)> {
    let mut r = log.reader(seq);
    let mut out = Vec::new();
    // Either format: format 2 holds each record's own fields, its batch's
    // context the rest.
    let mut dec = holdfast::event::Decoder::new();
    loop {
        let batch = r.read(100_000, 256 << 20).unwrap();
        if batch.is_empty() {
            return out;
        }
        for e in batch {
            let env = dec
                .decode(&e.data, &e.context, e.seq - e.batch_start)
                .unwrap_or_else(|err| panic!("event {} is not an event: {err}", e.seq))
                .to_envelope();
            out.push((e.seq, env));
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP

/// A response, read whole.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

/// `google.rpc.Status` as the source sends it.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn content_type(&self) -> &str {
        self.header("content-type").unwrap_or("")
    }

    /// The error message, decoded from the body in whatever encoding the
    /// response declares (protobuf Status, JSON Status, or text).
    pub fn message(&self) -> String {
        match self.content_type() {
            "application/x-protobuf" => {
                RpcStatus::decode(self.body.clone())
                    .expect("a protobuf google.rpc.Status")
                    .message
            }
            "application/json" => {
                let v: serde_json::Value =
                    serde_json::from_slice(&self.body).expect("a JSON google.rpc.Status");
                v["message"].as_str().unwrap_or_default().to_string()
            }
            _ => String::from_utf8_lossy(&self.body).into_owned(),
        }
    }

    pub fn retry_after(&self) -> Option<u64> {
        self.header("retry-after").and_then(|v| v.parse().ok())
    }
}

pub const PROTOBUF: &str = "application/x-protobuf";
pub const JSON: &str = "application/json";

/// A keep-alive HTTP/1.1 connection.
pub struct Client {
    sender: SendRequest<Full<Bytes>>,
    pub addr: SocketAddr,
}

impl Client {
    pub async fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).await.unwrap();
        let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Client { sender, addr }
    }

    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    pub async fn send(&mut self, req: hyper::Request<Full<Bytes>>) -> Result<Reply, hyper::Error> {
        self.sender.ready().await?;
        let resp = self.sender.send_request(req).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(Reply {
            status: parts.status.as_u16(),
            headers: parts.headers,
            body,
        })
    }

    /// POSTs `body` with the given headers (Content-Length is added).
    pub async fn post(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: impl Into<Bytes>,
    ) -> Reply {
        let req = request("POST", path, headers, body.into());
        self.send(req).await.expect("no response")
    }
}

pub fn request(
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> hyper::Request<Full<Bytes>> {
    let mut b = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", "127.0.0.1");
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Full::new(body)).unwrap()
}

/// One request on a new connection.
pub async fn post(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
    body: impl Into<Bytes>,
) -> Reply {
    Client::connect(addr).await.post(path, headers, body).await
}

/// The content type, and the encoding when the name ends in `.gz`.
pub fn fixture_headers(name: &str) -> Vec<(&'static str, &'static str)> {
    let mut h = vec![(
        "content-type",
        if name.contains(".json") {
            JSON
        } else {
            PROTOBUF
        },
    )];
    if name.ends_with(".gz") {
        h.push(("content-encoding", "gzip"));
    }
    h
}

/// Reads one HTTP/1.1 response from a raw stream (Content-Length bodies).
pub async fn read_response(s: &mut TcpStream) -> Option<Reply> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let mut headers = HeaderMap::new();
    for l in lines.filter(|l| !l.is_empty()) {
        let (k, v) = l.split_once(':')?;
        headers.append(
            hyper::header::HeaderName::from_bytes(k.trim().as_bytes()).ok()?,
            v.trim().parse().ok()?,
        );
    }
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some(Reply {
        status,
        headers,
        body: Bytes::copy_from_slice(&buf[head_end..head_end + len]),
    })
}

/// Writes a request head on a raw stream.
pub async fn write_head(s: &mut TcpStream, path: &str, headers: &[(&str, &str)]) {
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).await.unwrap();
}

// ---------------------------------------------------------------------------
// Rebuilding requests from envelopes

/// Groups consecutive items by a key, keeping order.
fn runs<T, K: PartialEq>(items: Vec<T>, key: impl Fn(&T) -> K) -> Vec<(K, Vec<T>)> {
    let mut out: Vec<(K, Vec<T>)> = Vec::new();
    for it in items {
        let k = key(&it);
        match out.last_mut() {
            Some((last, group)) if *last == k => group.push(it),
            _ => out.push((k, vec![it])),
        }
    }
    out
}

type ResKey = (
    Option<opentelemetry_proto::tonic::resource::v1::Resource>,
    String,
);
type ScopeKey = (
    Option<opentelemetry_proto::tonic::common::v1::InstrumentationScope>,
    String,
);

fn res_key(e: &Envelope) -> ResKey {
    (e.resource.clone(), e.resource_schema_url.clone())
}

fn scope_key(e: &Envelope) -> ScopeKey {
    (e.scope.clone(), e.scope_schema_url.clone())
}

/// What an OTLP sink would send for these log envelopes.
pub fn rebuild_logs(envs: &[Envelope]) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: runs(envs.to_vec(), res_key)
            .into_iter()
            .map(|((resource, schema_url), group)| ResourceLogs {
                resource,
                schema_url,
                scope_logs: runs(group, scope_key)
                    .into_iter()
                    .map(|((scope, schema_url), group)| ScopeLogs {
                        scope,
                        schema_url,
                        log_records: group
                            .into_iter()
                            .map(|e| match e.record {
                                Some(Record::Log(r)) => r,
                                other => panic!("not a log record: {other:?}"),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

pub fn rebuild_traces(envs: &[Envelope]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: runs(envs.to_vec(), res_key)
            .into_iter()
            .map(|((resource, schema_url), group)| ResourceSpans {
                resource,
                schema_url,
                scope_spans: runs(group, scope_key)
                    .into_iter()
                    .map(|((scope, schema_url), group)| ScopeSpans {
                        scope,
                        schema_url,
                        spans: group
                            .into_iter()
                            .map(|e| match e.record {
                                Some(Record::Span(r)) => r,
                                other => panic!("not a span: {other:?}"),
                            })
                            .collect(),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// A metric without its points: what consecutive single-point metrics must
/// share to be merged back into one.
fn metric_shell(m: &Metric) -> Metric {
    let mut s = m.clone();
    if let Some(d) = &mut s.data {
        match d {
            Data::Gauge(g) => g.data_points.clear(),
            Data::Sum(g) => g.data_points.clear(),
            Data::Histogram(g) => g.data_points.clear(),
            Data::ExponentialHistogram(g) => g.data_points.clear(),
            Data::Summary(g) => g.data_points.clear(),
        }
    }
    s
}

fn merge_points(group: Vec<Metric>) -> Metric {
    let mut it = group.into_iter();
    let mut first = it.next().unwrap();
    for m in it {
        match (first.data.as_mut().unwrap(), m.data.unwrap()) {
            (Data::Gauge(a), Data::Gauge(b)) => a.data_points.extend(b.data_points),
            (Data::Sum(a), Data::Sum(b)) => a.data_points.extend(b.data_points),
            (Data::Histogram(a), Data::Histogram(b)) => a.data_points.extend(b.data_points),
            (Data::ExponentialHistogram(a), Data::ExponentialHistogram(b)) => {
                a.data_points.extend(b.data_points)
            }
            (Data::Summary(a), Data::Summary(b)) => a.data_points.extend(b.data_points),
            _ => unreachable!("grouped by shell"),
        }
    }
    first
}

/// Number of points of a single-point metric envelope, checked.
pub fn points(m: &Metric) -> usize {
    match m.data.as_ref().expect("metric without data") {
        Data::Gauge(g) => g.data_points.len(),
        Data::Sum(g) => g.data_points.len(),
        Data::Histogram(g) => g.data_points.len(),
        Data::ExponentialHistogram(g) => g.data_points.len(),
        Data::Summary(g) => g.data_points.len(),
    }
}

pub fn rebuild_metrics(envs: &[Envelope]) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: runs(envs.to_vec(), res_key)
            .into_iter()
            .map(|((resource, schema_url), group)| ResourceMetrics {
                resource,
                schema_url,
                scope_metrics: runs(group, scope_key)
                    .into_iter()
                    .map(|((scope, schema_url), group)| {
                        let metrics: Vec<Metric> = group
                            .into_iter()
                            .map(|e| match e.record {
                                Some(Record::Metric(m)) => {
                                    assert_eq!(points(&m), 1, "one point per envelope");
                                    m
                                }
                                other => panic!("not a metric: {other:?}"),
                            })
                            .collect();
                        ScopeMetrics {
                            scope,
                            schema_url,
                            metrics: runs(metrics, metric_shell)
                                .into_iter()
                                .map(|(_, g)| merge_points(g))
                                .collect(),
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

// ---------------------------------------------------------------------------
// Attribute helpers

pub fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

pub fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key) {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        _ => None,
    }
}

pub fn kv(key: &str, v: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The value of a counter or gauge line in the Prometheus text, by its
/// exact name and labels as printed.
pub fn metric_value(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        l.strip_prefix(series)?
            .strip_prefix(' ')?
            .trim()
            .parse()
            .ok()
    })
}

/// Counts records per value of a string attribute.
pub fn count_by<F: Fn(&Envelope) -> Option<String>>(
    envs: &[Envelope],
    key: F,
) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for e in envs {
        if let Some(k) = key(e) {
            *m.entry(k).or_insert(0) += 1;
        }
    }
    m
}
