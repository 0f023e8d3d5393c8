//! A test OTLP/gRPC receiver on 127.0.0.1, written on hyper's HTTP/2
//! server (not tonic's), so that it sees the calls as they are on the wire
//! (path, metadata, `grpc-encoding`, the compressed flag) and can answer
//! anything: `OK` with or without `partial_success`, or any status code
//! with a message and a `google.rpc.RetryInfo`. Each call's message is
//! kept (decompressed), with what was answered and when.
//!
//! Included with `#[path = "common/grpc_receiver.rs"] mod grpc_receiver;`.
#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::io::Read;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use base64::Engine;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::HeaderMap;
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use prost::Message;
use tokio_rustls::TlsAcceptor;

pub const LOGS: &str = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
pub const TRACES: &str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
pub const METRICS: &str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";

/// What the receiver answers to one call.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Ok,
    /// `OK` with `partial_success { rejected, error_message }`.
    Partial(i64, String),
    /// A status code other than `OK`, its message, and a RetryInfo delay.
    Status(i32, String, Option<Duration>),
    /// A status code whose `grpc-status-details-bin` is not base64.
    BrokenDetails(i32),
    /// No answer for this long, then `OK`.
    Stall(Duration),
}

/// One call as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Call {
    pub path: String,
    /// Header names in lower case.
    pub metadata: HashMap<String, String>,
    /// The message's compressed flag.
    pub compressed: bool,
    /// The message, decompressed.
    pub message: Vec<u8>,
    /// The body's length on the wire: the 5-byte prefix and the message
    /// as sent.
    pub wire: usize,
    pub answer: Answer,
    pub at: Instant,
    /// The DER of the client certificate of its connection.
    pub client_cert: Option<Vec<u8>>,
}

impl Call {
    /// The log bodies of a logs call.
    pub fn lines(&self) -> Vec<String> {
        if self.path != LOGS {
            return Vec::new();
        }
        let req = ExportLogsServiceRequest::decode(self.message.as_slice()).unwrap();
        let mut out = Vec::new();
        for rl in &req.resource_logs {
            for sl in &rl.scope_logs {
                for r in &sl.log_records {
                    use opentelemetry_proto::tonic::common::v1::any_value::Value;
                    if let Some(Value::StringValue(s)) =
                        r.body.as_ref().and_then(|b| b.value.as_ref())
                    {
                        out.push(s.clone());
                    }
                }
            }
        }
        out
    }
}

#[derive(Debug, Default)]
pub struct State {
    pub calls: Vec<Call>,
    /// The answers to the next calls, in order; `OK` once empty.
    pub script: VecDeque<Answer>,
    /// TLS handshakes that failed.
    pub refused: u64,
}

impl State {
    /// Lines that arrived in calls answered `OK`.
    pub fn delivered(&self) -> Vec<String> {
        self.calls
            .iter()
            .filter(|c| c.answer == Answer::Ok)
            .flat_map(|c| c.lines())
            .collect()
    }
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Receiver {
    /// Listens on `addr` (port 0: any), plain HTTP/2 without `tls`.
    pub async fn start_on(addr: &str, tls: Option<TlsAcceptor>) -> Receiver {
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (s, tls) = (s.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        None => serve(tcp, None, s).await,
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(stream) => {
                                let cert = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|c| c.first())
                                    .map(|c| c.as_ref().to_vec());
                                serve(stream, cert, s).await
                            }
                            Err(_) => s.lock().unwrap().refused += 1,
                        },
                    }
                });
            }
        });
        Receiver { addr, state, task }
    }

    pub async fn start() -> Receiver {
        Receiver::start_on("127.0.0.1:0", None).await
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// The answers to give to the next calls.
    pub fn answer_next(&self, answers: impl IntoIterator<Item = Answer>) {
        self.state().script.extend(answers);
    }
}

async fn serve<S>(io: S, cert: Option<Vec<u8>>, state: Arc<Mutex<State>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |req| {
        let (state, cert) = (state.clone(), cert.clone());
        async move { Ok::<_, Infallible>(handle(req, cert, state).await) }
    });
    let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .serve_connection(TokioIo::new(io), service)
        .await;
}

type Trailers = std::future::Ready<Option<Result<HeaderMap, Infallible>>>;
type Body = http_body_util::combinators::WithTrailers<Full<Bytes>, Trailers>;

async fn handle(
    req: Request<hyper::body::Incoming>,
    cert: Option<Vec<u8>>,
    state: Arc<Mutex<State>>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let metadata: HashMap<String, String> = req
        .headers()
        .iter()
        .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let body = req.into_body().collect().await.unwrap().to_bytes();
    assert!(body.len() >= 5, "a gRPC message has a 5-byte prefix");
    let wire = body.len();
    let compressed = body[0] == 1;
    let len = u32::from_be_bytes(body[1..5].try_into().unwrap()) as usize;
    assert_eq!(body.len(), 5 + len, "one message per call");
    let mut message = body[5..].to_vec();
    if compressed {
        assert_eq!(
            metadata.get("grpc-encoding").map(String::as_str),
            Some("gzip")
        );
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(message.as_slice())
            .read_to_end(&mut out)
            .unwrap();
        message = out;
    }
    let answer = {
        let mut st = state.lock().unwrap();
        let answer = st.script.pop_front().unwrap_or(Answer::Ok);
        st.calls.push(Call {
            path,
            metadata,
            compressed,
            message,
            wire,
            answer: answer.clone(),
            at: Instant::now(),
            client_cert: cert,
        });
        answer
    };
    if let Answer::Stall(d) = answer {
        tokio::time::sleep(d).await;
    }
    reply(&answer)
}

fn reply(answer: &Answer) -> Response<Body> {
    let b = Response::builder().header("content-type", "application/grpc");
    match answer {
        Answer::Ok | Answer::Partial(..) | Answer::Stall(_) => {
            let response = match answer {
                Answer::Partial(rejected, message) => ExportResponse {
                    partial_success: Some(PartialSuccess {
                        rejected: *rejected,
                        error_message: message.clone(),
                    }),
                },
                _ => ExportResponse::default(),
            }
            .encode_to_vec();
            let mut frame = vec![0u8];
            frame.extend((response.len() as u32).to_be_bytes());
            frame.extend(response);
            let mut trailers = HeaderMap::new();
            trailers.insert("grpc-status", "0".parse().unwrap());
            b.body(
                Full::new(Bytes::from(frame)).with_trailers(std::future::ready(Some(Ok(trailers)))),
            )
            .unwrap()
        }
        // Trailers-only: the status in the headers, no body.
        Answer::Status(code, message, delay) => {
            let mut b = b
                .header("grpc-status", code.to_string())
                .header("grpc-message", message.as_str());
            if let Some(d) = delay {
                let details = RpcStatus {
                    code: *code,
                    message: message.clone(),
                    details: vec![Any {
                        type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                        value: RetryInfo {
                            retry_delay: Some(ProtoDuration {
                                seconds: d.as_secs() as i64,
                                nanos: d.subsec_nanos() as i32,
                            }),
                        }
                        .encode_to_vec(),
                    }],
                }
                .encode_to_vec();
                b = b.header(
                    "grpc-status-details-bin",
                    base64::engine::general_purpose::STANDARD_NO_PAD.encode(details),
                );
            }
            b.body(Full::new(Bytes::new()).with_trailers(std::future::ready(None)))
                .unwrap()
        }
        Answer::BrokenDetails(code) => b
            .header("grpc-status", code.to_string())
            .header("grpc-message", "details follow")
            .header("grpc-status-details-bin", "!!not base64!!")
            .body(Full::new(Bytes::new()).with_trailers(std::future::ready(None)))
            .unwrap(),
    }
}

#[derive(Clone, PartialEq, Message)]
struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

#[derive(Clone, PartialEq, Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

#[derive(Clone, PartialEq, Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

#[derive(Clone, PartialEq, Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}
