//! A small gRPC client for the `otlp` source's tests: hyper's HTTP/2 client
//! with the length-prefixed framing written by hand, so a test can send
//! what a well-behaved client sends and what a hostile one does, and read
//! the status with tonic's own parser.

#![allow(dead_code)]

#[path = "../common/daemon.rs"]
pub mod daemon;

use std::io::Write;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use prost::Message;

pub const LOGS: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
pub const TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
pub const METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// One HTTP/2 connection.
pub struct Client {
    addr: SocketAddr,
    send: SendRequest<Full<Bytes>>,
}

/// What a call was answered: the HTTP status, and the gRPC status from the
/// trailers (or the headers of a trailers-only answer).
pub struct Answer {
    pub http: u16,
    pub status: tonic::Status,
    pub body: Bytes,
}

impl Answer {
    pub fn code(&self) -> tonic::Code {
        self.status.code()
    }
}

pub async fn connect(addr: SocketAddr) -> Client {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    connect_over(addr, tcp).await
}

/// A client over a stream already open to `addr` (a TLS one, say).
pub async fn connect_over<IO>(addr: SocketAddr, io: IO) -> Client
where
    IO: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (send, conn) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(conn);
    Client { addr, send }
}

/// `message` with its 5-byte prefix, gzip-compressed (flag 1) when asked.
pub fn frame(message: &[u8], gzip: bool) -> Bytes {
    let (flag, data) = if gzip {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(message).unwrap();
        (1u8, e.finish().unwrap())
    } else {
        (0u8, message.to_vec())
    };
    let mut v = vec![flag];
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(&data);
    v.into()
}

impl Client {
    /// Sends one call; `headers` replace the defaults (`content-type:
    /// application/grpc`) where they name the same header.
    pub async fn call(&mut self, path: &str, headers: &[(&str, &str)], body: Bytes) -> Answer {
        self.try_call(path, headers, body)
            .await
            .expect("the call is answered")
    }

    pub async fn try_call(
        &mut self,
        path: &str,
        headers: &[(&str, &str)],
        body: Bytes,
    ) -> Result<Answer, hyper::Error> {
        let mut req = hyper::Request::post(format!("http://{}{path}", self.addr))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in headers {
            req.headers_mut().unwrap().insert(
                hyper::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                v.parse().unwrap(),
            );
        }
        let req = req.body(Full::new(body)).unwrap();
        self.send.ready().await?;
        let resp = self.send.send_request(req).await?;
        let http = resp.status().as_u16();
        let head = resp.headers().clone();
        let collected = resp.into_body().collect().await?;
        let trailers = collected.trailers().cloned();
        let body = collected.to_bytes();
        let status = trailers
            .as_ref()
            .and_then(tonic::Status::from_header_map)
            .or_else(|| tonic::Status::from_header_map(&head))
            .unwrap_or_else(|| tonic::Status::unknown("no grpc-status"));
        Ok(Answer { http, status, body })
    }

    /// Whether the server closes the connection within `within`.
    pub async fn closes_within(&self, within: std::time::Duration) -> bool {
        let closed = async {
            while !self.send.is_closed() {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        };
        tokio::time::timeout(within, closed).await.is_ok()
    }

    /// An export of `logs` as one protobuf message.
    pub async fn export_logs(&mut self, logs: &ExportLogsServiceRequest, gzip: bool) -> Answer {
        let enc: &[(&str, &str)] = if gzip {
            &[("grpc-encoding", "gzip")]
        } else {
            &[]
        };
        self.call(LOGS, enc, frame(&logs.encode_to_vec(), gzip))
            .await
    }
}

/// A logs export of `n` records with bodies `"{tag} {i}"`.
pub fn logs(tag: &str, n: usize) -> ExportLogsServiceRequest {
    let records = (0..n)
        .map(|i| LogRecord {
            body: Some(AnyValue {
                value: Some(Value::StringValue(format!("{tag} {i}"))),
            }),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: records,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
