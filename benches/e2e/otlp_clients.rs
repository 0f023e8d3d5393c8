//! The OTLP/HTTP load: a pool of SDK-like `ExportLogsServiceRequest`s
//! and the keep-alive clients that post them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use crate::input::loghub_lines;
use crate::measure::thread_cpu_s;

pub(crate) const CLIENTS: usize = 8;
pub(crate) const RECORDS_PER_REQUEST: usize = 200;
pub(crate) const POOL: usize = 64;

fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

/// `POOL` distinct requests of `RECORDS_PER_REQUEST` records each, with
/// Loghub lines as bodies.
pub(crate) fn otlp_pool() -> Vec<Bytes> {
    let lines = loghub_lines();
    let mut n = 0usize;
    (0..POOL)
        .map(|r| {
            let records = (0..RECORDS_PER_REQUEST)
                .map(|i| {
                    let line = String::from_utf8_lossy(&lines[n % lines.len()])
                        .trim_end()
                        .to_string();
                    n += 1;
                    LogRecord {
                        time_unix_nano: 1_700_000_000_000_000_000 + n as u64 * 1_000,
                        observed_time_unix_nano: 1_700_000_000_000_000_000 + n as u64 * 1_000 + 7,
                        severity_number: 9,
                        severity_text: "INFO".into(),
                        body: Some(AnyValue {
                            value: Some(s(&format!("{n:010} {line}"))),
                        }),
                        attributes: vec![
                            kv("log.iostream", s("stdout")),
                            kv("thread.id", Value::IntValue((i % 16) as i64)),
                        ],
                        flags: 1,
                        trace_id: (0..16).map(|b| (b * 7 + i + r) as u8).collect(),
                        span_id: (0..8).map(|b| (b * 3 + i) as u8).collect(),
                        ..Default::default()
                    }
                })
                .collect();
            ExportLogsServiceRequest {
                resource_logs: vec![ResourceLogs {
                    resource: Some(Resource {
                        attributes: vec![
                            kv("service.name", s("checkout")),
                            kv("service.version", s("1.4.2")),
                            kv(
                                "service.instance.id",
                                s("7233be56-33bb-4d09-8d46-649d95da0b2b"),
                            ),
                            kv("host.name", s("gateway-017")),
                            kv("telemetry.sdk.name", s("opentelemetry")),
                            kv("telemetry.sdk.language", s("python")),
                        ],
                        ..Default::default()
                    }),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(InstrumentationScope {
                            name: "checkout.http".into(),
                            version: "1.4.2".into(),
                            ..Default::default()
                        }),
                        log_records: records,
                        schema_url: String::new(),
                    }],
                    schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
                }],
            }
            .encode_to_vec()
            .into()
        })
        .collect()
}

pub(crate) struct ClientTotals {
    pub(crate) requests: u64,
    pub(crate) refused: u64,
    pub(crate) cpu_s: f64,
}

/// Sends requests `0..total` (request `i` is `pool[i % POOL]`) over
/// `CLIENTS` keep-alive connections; a refused request is sent again.
pub(crate) fn run_clients(addr: SocketAddr, pool: Vec<Bytes>, total: u64) -> ClientTotals {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let next = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let pool = Arc::new(pool);
    let cpu0 = thread_cpu_s();
    rt.block_on(async {
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let (next, refused, pool) = (next.clone(), refused.clone(), pool.clone());
            tasks.push(tokio::spawn(async move {
                let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (mut tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
                    .await
                    .unwrap();
                tokio::spawn(conn);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total {
                        break;
                    }
                    let body = pool[(i % pool.len() as u64) as usize].clone();
                    loop {
                        let req = hyper::Request::post("/v1/logs")
                            .header("host", "127.0.0.1")
                            .header("content-type", "application/x-protobuf")
                            .body(Full::new(body.clone()))
                            .unwrap();
                        tx.ready().await.unwrap();
                        let resp = tx.send_request(req).await.unwrap();
                        let ok = resp.status() == 200;
                        let _ = resp.into_body().collect().await;
                        if ok {
                            break;
                        }
                        // Full log or overload: the agent asks us to back off.
                        refused.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    ClientTotals {
        requests: total,
        refused: refused.load(Ordering::Relaxed),
        cpu_s: thread_cpu_s() - cpu0,
    }
}
