//! The `otlp_grpc` sink: OTLP over gRPC to a collector or backend, one
//! unary `Export` call per request on the service of its signal
//! (`/opentelemetry.proto.collector.{logs,trace,metrics}.v1.{Logs,Trace,Metrics}Service/Export`).
//!
//! The request is the protobuf the `otlp_http` sink writes (its encoder,
//! `otlp_request::export_requests`: events grouped by resource and scope,
//! written from the events' own records without request structs), sent as
//! it is through a bytes codec (`codec.rs`), gzip-compressed by tonic when
//! `compression = "gzip"`. `headers`, `headers_file` and `auth` travel as
//! metadata (`authorization: Bearer …`); `request_timeout` is the call's
//! deadline, sent as `grpc-timeout` and enforced here.
//!
//! The answer: `OK` is judged by its `partial_success` exactly as the
//! `otlp_http` sink judges its 2xx body; a status becomes the number the
//! shared retry policy applies, following the OTLP specification's
//! retryable codes (`classify.rs` has the table).
//!
//! | file | concept |
//! |------|---------|
//! | `config.rs` | the table as written, its check and its lines in `holdfast check` |
//! | `connect.rs` | the channel: one HTTP/2 connection, TLS through the sinks' rustls setup, rebuilt when the client certificate changes |
//! | `codec.rs` | the bytes out, the export response in |
//! | `classify.rs` | what each status and answer means for the events |

mod classify;
mod codec;
mod config;
mod connect;

use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use tonic::codec::CompressionEncoding;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::metadata::{AsciiMetadataKey, AsciiMetadataValue, MetadataMap};

use super::credentials::read_secret;
use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{Answer, Sent, Transport, TransportKind};
use super::http::{Auth, Compression, HeaderValueFrom, HttpOptions};
use crate::event::{Signal, Stored};

/// What an `otlp_grpc` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpGrpcSinkOptions {
    pub common: DeliveryOptions,
    /// `compression`, `auth`, `tls`, `headers`: as the HTTP sinks take
    /// them; headers and credentials go out as metadata.
    pub http: HttpOptions,
    /// `http://host:port` or `https://host:port` (TLS).
    pub endpoint: reqwest::Url,
}

/// The service paths, by signal (logs, traces, metrics).
const PATHS: [&str; 3] = [
    "/opentelemetry.proto.collector.logs.v1.LogsService/Export",
    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
];

fn signal_index(ev: &Stored) -> usize {
    match ev.signal() {
        Some(Signal::Traces) => 1,
        Some(Signal::Metrics) => 2,
        _ => 0,
    }
}

/// The protocol object of one run.
pub(crate) struct OtlpGrpc {
    link: connect::Link,
    /// Headers and credentials, read from their files at start.
    metadata: MetadataMap,
    gzip: bool,
    timeout: Duration,
    /// Where each signal's calls go, for logs.
    targets: [reqwest::Url; 3],
}

impl OtlpGrpc {
    /// Fails (naming the file) when a credential, header, CA or client
    /// certificate file cannot be read.
    pub fn new(opts: &OtlpGrpcSinkOptions) -> anyhow::Result<OtlpGrpc> {
        let timeout = opts.common.request_timeout;
        let link = connect::Link::new(&opts.endpoint, &opts.http.tls, timeout)?;
        let targets = PATHS.map(|p| {
            let mut u = opts.endpoint.clone();
            u.set_path(p);
            u
        });
        Ok(OtlpGrpc {
            link,
            metadata: metadata(&opts.http)?,
            gzip: opts.http.compression == Compression::Gzip,
            timeout,
            targets,
        })
    }
}

/// The metadata sent with every call: `headers`, `headers_file`, `auth`.
fn metadata(opts: &HttpOptions) -> anyhow::Result<MetadataMap> {
    let mut map = MetadataMap::new();
    for h in &opts.headers {
        let key = AsciiMetadataKey::from_bytes(h.name.as_bytes())
            .with_context(|| format!("{} is not a valid gRPC metadata name", h.name))?;
        let (value, secret) = match &h.value {
            HeaderValueFrom::Inline(v) => (v.clone(), false),
            HeaderValueFrom::File(path) => {
                (read_secret(path, &format!("{} header", h.name))?, true)
            }
        };
        let mut value = AsciiMetadataValue::try_from(value.as_str()).with_context(|| {
            format!(
                "the {} header value holds characters gRPC metadata cannot carry",
                h.name
            )
        })?;
        value.set_sensitive(secret);
        map.insert(key, value);
    }
    if let Some(a) = &opts.auth {
        let text = match a {
            Auth::Basic {
                user,
                password_file,
            } => {
                let password = read_secret(password_file, "password")?;
                let raw = format!("{user}:{password}");
                format!(
                    "Basic {}",
                    base64::engine::general_purpose::STANDARD.encode(raw)
                )
            }
            Auth::Bearer { token_file } => format!("Bearer {}", read_secret(token_file, "token")?),
            Auth::ApiKey { key_file } => format!("ApiKey {}", read_secret(key_file, "API key")?),
        };
        let mut value = AsciiMetadataValue::try_from(text.as_str())
            .context("the credential holds characters gRPC metadata cannot carry")?;
        value.set_sensitive(true);
        map.insert("authorization", value);
    }
    Ok(map)
}

/// One call ready to go.
pub(crate) struct Call {
    signal: usize,
    request: tonic::Request<Vec<u8>>,
    /// The body's bytes as they leave (the channel counts them).
    wire: connect::WireBytes,
}

/// What came back, not yet judged.
pub(crate) enum Reply {
    Answered(Result<tonic::Response<Result<classify::ExportResponse, String>>, tonic::Status>),
    /// No answer within `request_timeout`.
    TimedOut,
}

impl Transport for OtlpGrpc {
    type Request<'a> = Call;
    type Reply = Reply;

    fn route(&self, ev: &Stored) -> u64 {
        signal_index(ev) as u64
    }

    fn prepare<'a>(&'a self, items: &'a [Item], _request: usize) -> Call {
        let body = super::otlp_request::export_requests(items);
        let mut request = tonic::Request::new(body);
        *request.metadata_mut() = self.metadata.clone();
        request.set_timeout(self.timeout);
        let wire = connect::WireBytes::default();
        request.extensions_mut().insert(wire.clone());
        Call {
            signal: signal_index(&items[0].ev),
            request,
            wire,
        }
    }

    async fn send(&self, call: Call) -> Sent<Reply> {
        let Call {
            signal,
            request,
            wire,
        } = call;
        let mut grpc = tonic::client::Grpc::new(self.link.channel())
            .max_decoding_message_size(classify::MAX_ANSWER_BYTES);
        if self.gzip {
            grpc = grpc.send_compressed(CompressionEncoding::Gzip);
        }
        let exchange = async {
            if let Err(e) = grpc.ready().await {
                return Err(tonic::Status::from_error(Box::new(e)));
            }
            grpc.unary(
                request,
                PathAndQuery::from_static(PATHS[signal]),
                codec::ExportCodec,
            )
            .await
        };
        let reply = match tokio::time::timeout(self.timeout, exchange).await {
            Ok(r) => Reply::Answered(r),
            Err(_) => Reply::TimedOut,
        };
        Sent {
            target: self.targets[signal].clone(),
            reply,
            // The gRPC frame as sent: a flag byte and a length, then the
            // message, compressed when it is.
            wire: wire.0.load(std::sync::atomic::Ordering::Relaxed),
        }
    }

    fn judge(&self, reply: Reply, _events: usize) -> Answer {
        match reply {
            Reply::TimedOut => Answer::Transport {
                kind: TransportKind::Timeout,
                message: format!("no answer within request_timeout ({:?})", self.timeout),
            },
            Reply::Answered(Ok(response)) => classify::accepted(response.into_inner()),
            Reply::Answered(Err(status)) => {
                classify::failed(&status, || connect::no_answer(&status))
            }
        }
    }
}
