//! The `otlp_http` sink: OTLP/HTTP export to a collector or backend,
//! protobuf (default) or JSON, one endpoint per signal (`/v1/logs`,
//! `/v1/traces`, `/v1/metrics` under `endpoint`, unless set one by one).
//!
//! Requests are rebuilt with the grouping OTLP expects by the OTLP request
//! kit (`src/sinks/otlp_request/`), which the `otlp_grpc` and `nats` sinks
//! share.
//!
//! The answer: a 2xx with no `partial_success` (or `rejected_* = 0`) means
//! every record was accepted; `rejected_* = 0` with an `error_message` is a
//! warning, logged and counted. `rejected_* = N > 0` may not be retried
//! (the OTLP specification says so) and does not say *which* records were
//! rejected, so the whole request is quarantined with the reason "partially
//! rejected: N of M; receiver did not say which" and the receiver's
//! `error_message`. Failure statuses follow the shared policy (`delivery/retry/`);
//! their body, a `google.rpc.Status`, gives the error text.

mod config;

use prost::Message;

use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{short_text, truncate, BodyVerdict, MAX_ERROR_TEXT};
use super::http::{HttpApi, HttpOptions, Request};
use super::otlp_request::{export_requests, export_requests_json, signal_index};
use crate::event::Stored;

/// What an `otlp_http` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpHttpSinkOptions {
    pub common: DeliveryOptions,
    pub http: HttpOptions,
    /// Where each signal goes: `<endpoint>/v1/logs` unless set on its own.
    pub logs_url: reqwest::Url,
    pub traces_url: reqwest::Url,
    pub metrics_url: reqwest::Url,
    pub encoding: OtlpEncoding,
}

/// The OTLP/HTTP body encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpEncoding {
    Protobuf,
    Json,
}

pub(crate) struct OtlpHttp {
    urls: [reqwest::Url; 3],
    encoding: OtlpEncoding,
}

impl OtlpHttp {
    pub fn new(opts: &OtlpHttpSinkOptions) -> OtlpHttp {
        OtlpHttp {
            urls: [
                opts.logs_url.clone(),
                opts.traces_url.clone(),
                opts.metrics_url.clone(),
            ],
            encoding: opts.encoding,
        }
    }
}

impl HttpApi for OtlpHttp {
    fn route(&self, ev: &Stored) -> u64 {
        signal_index(ev) as u64
    }

    fn encode(&self, items: &[Item], _request: usize) -> Request {
        let signal = signal_index(&items[0].ev);
        let (content_type, body) = match self.encoding {
            OtlpEncoding::Protobuf => ("application/x-protobuf", export_requests(items)),
            OtlpEncoding::Json => ("application/json", export_requests_json(items)),
        };
        Request {
            url: self.urls[signal].clone(),
            content_type,
            headers: &[],
            body,
        }
    }

    fn parse(&self, content_type: Option<&str>, body: &[u8], _events: usize) -> BodyVerdict {
        if body.is_empty() {
            return BodyVerdict::Accepted;
        }
        let partial = if is_json(content_type) {
            match json_partial_success(body) {
                Ok(p) => p,
                Err(e) => return BodyVerdict::Unreadable(e),
            }
        } else {
            match ExportResponse::decode(body) {
                Ok(r) => r
                    .partial_success
                    .map(|p| (p.rejected.max(0) as u64, p.error_message)),
                Err(e) => {
                    return BodyVerdict::Unreadable(format!(
                        "the answer is not an OTLP export response ({e})"
                    ))
                }
            }
        };
        match partial {
            Some((rejected, message)) if rejected > 0 => BodyVerdict::PartiallyRejected {
                rejected,
                message: truncate(&message, MAX_ERROR_TEXT),
            },
            Some((_, message)) if !message.is_empty() => {
                BodyVerdict::AcceptedWithWarning(truncate(&message, MAX_ERROR_TEXT))
            }
            _ => BodyVerdict::Accepted,
        }
    }

    fn error_text(&self, content_type: Option<&str>, body: &[u8]) -> String {
        if is_json(content_type) {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
                if let Some(m) = v.get("message").and_then(|m| m.as_str()) {
                    return truncate(m, MAX_ERROR_TEXT);
                }
            }
        } else if content_type.is_some_and(|c| c.contains("protobuf")) {
            if let Ok(s) = RpcStatus::decode(body) {
                if !s.message.is_empty() {
                    return truncate(&s.message, MAX_ERROR_TEXT);
                }
            }
        }
        short_text(body)
    }
}

fn is_json(content_type: Option<&str>) -> bool {
    content_type.is_some_and(|c| c.contains("json"))
}

/// `Export*ServiceResponse`: the same shape for every signal.
#[derive(Clone, PartialEq, Message)]
struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    partial_success: Option<PartialSuccess>,
}

/// `Export*PartialSuccess`: `rejected_log_records`, `rejected_spans` or
/// `rejected_data_points` is field 1, `error_message` field 2.
#[derive(Clone, PartialEq, Message)]
struct PartialSuccess {
    #[prost(int64, tag = "1")]
    rejected: i64,
    #[prost(string, tag = "2")]
    error_message: String,
}

/// `google.rpc.Status`, the body of an OTLP failure.
#[derive(Clone, PartialEq, Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// `partialSuccess` of a JSON answer: the rejected count (a number or, as
/// the OTLP/JSON mapping writes int64s, a string) and the message.
fn json_partial_success(body: &[u8]) -> Result<Option<(u64, String)>, String> {
    let v: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| format!("the answer is not an OTLP/JSON export response ({e})"))?;
    let Some(p) = v.get("partialSuccess").or_else(|| v.get("partial_success")) else {
        return Ok(None);
    };
    let mut rejected = 0u64;
    let mut message = String::new();
    if let Some(o) = p.as_object() {
        for (k, v) in o {
            if k.starts_with("rejected") {
                rejected = match v {
                    serde_json::Value::Number(n) => n.as_u64().unwrap_or(0),
                    serde_json::Value::String(s) => s.parse().unwrap_or(0),
                    _ => 0,
                };
            } else if k == "errorMessage" || k == "error_message" {
                message = v.as_str().unwrap_or("").to_string();
            }
        }
    }
    Ok(Some((rejected, message)))
}

#[cfg(test)]
mod tests;
