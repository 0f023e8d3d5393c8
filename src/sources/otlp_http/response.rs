/*!
What a request is answered: the status code, the `Retry-After` header for
conditions a client should retry, and the body in the request's encoding.

Per the OTLP/HTTP spec, success is an empty `Export*ServiceResponse` (zero
bytes in protobuf, `{}` in JSON; `partial_success` is never set since a
request is all or nothing), and every 4xx/5xx carries a `google.rpc.Status`
whose `message` says what went wrong and what to change. When the request's
encoding is unknown (a 415 for its content type, say) the message is sent as
plain text, which is what a person with curl can read.
*/

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CONNECTION, CONTENT_TYPE, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Response, StatusCode};
use prost::Message;

/// How a request body is encoded, and therefore how it is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Encoding {
    Protobuf,
    Json,
}

impl Encoding {
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Encoding::Protobuf => "application/x-protobuf",
            Encoding::Json => "application/json",
        }
    }
}

/// Seconds a client should wait before retrying, by cause.
const RETRY_DRAINING: u32 = 5;
const RETRY_LOG_FULL: u32 = 2;
const RETRY_LOG_ERROR: u32 = 5;
const RETRY_BUSY: u32 = 1;
const RETRY_TIMEOUT: u32 = 1;

/// Why a request was not accepted. Each variant has one status code, one
/// metrics reason and a message for the client.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RequestError {
    #[error("no OTLP endpoint at {path}: POST to /v1/logs, /v1/traces or /v1/metrics")]
    NotFound { path: String },

    #[error("method {method} is not allowed: send OTLP data with POST")]
    Method { method: String },

    #[error(
        "missing or wrong bearer token: send the header `Authorization: Bearer <token>` with the \
         token holdfast reads from sources.<name>.bearer_token_file"
    )]
    Unauthorized,

    #[error("holdfast is shutting down and takes no new data; retry in {RETRY_DRAINING} s")]
    Draining,

    #[error(
        "unsupported Content-Type {0:?}: send application/x-protobuf (binary protobuf) or \
         application/json (OTLP/JSON)"
    )]
    ContentType(String),

    #[error("unsupported Content-Encoding {0:?}: send gzip, deflate or identity")]
    ContentEncoding(String),

    #[error(
        "the request body of {declared} bytes (Content-Length) is larger than this source's \
         max_body_bytes ({limit} bytes): send smaller batches"
    )]
    DeclaredTooLarge { declared: u64, limit: u64 },

    #[error(
        "the request body is larger than this source's max_body_bytes ({limit} bytes): send \
         smaller batches"
    )]
    BodyTooLarge { limit: u64 },

    #[error(
        "the {coding} body decompresses to more than this source's max_body_bytes ({limit} \
         bytes): send smaller batches"
    )]
    DecompressedTooLarge { coding: &'static str, limit: u64 },

    #[error(
        "the request holds {bytes}+ bytes of events, more than one log append can take ({limit} \
         bytes): send smaller batches"
    )]
    EventsTooLarge { bytes: u64, limit: u64 },

    #[error(
        "decoding this request would take more than {bytes} bytes of memory ({records}+ \
         records, counted before decoding), more than the {room} bytes this source's memory \
         budget can give one request: send fewer records per request (a smaller batch size in \
         the exporter)"
    )]
    DecodedTooLarge { bytes: u64, records: u64, room: u64 },

    /// Answered 503, not 408: OTLP clients must not retry a 408, and a body
    /// that did not arrive in time is worth sending again.
    #[error(
        "the request body did not arrive within request_timeout ({} s); retry in {RETRY_TIMEOUT} s",
        .0.as_secs_f64()
    )]
    Timeout(Duration),

    #[error(
        "holdfast is shutting down and the request body did not arrive in time; retry in \
         {RETRY_DRAINING} s"
    )]
    DrainingBody,

    #[error("reading the request body failed: {0}")]
    BodyRead(String),

    #[error("the body is not valid {coding} data: {detail}")]
    Decompress {
        coding: &'static str,
        detail: String,
    },

    #[error("{0}")]
    Decode(String),

    #[error("too many request bodies are in memory at once; retry in {RETRY_BUSY} s")]
    Busy,

    #[error(
        "the log is full (when_full = \"block\") and no space was freed within {} ms; retry in \
         {RETRY_LOG_FULL} s",
        .waited.as_millis()
    )]
    LogFull { waited: Duration },

    #[error("the log cannot take data right now; retry in {RETRY_LOG_ERROR} s")]
    LogUnavailable,

    #[error("internal error in holdfast: {0}")]
    Internal(String),
}

impl RequestError {
    pub(crate) fn status(&self) -> StatusCode {
        use RequestError::*;
        match self {
            NotFound { .. } => StatusCode::NOT_FOUND,
            Method { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Unauthorized => StatusCode::UNAUTHORIZED,
            Draining | DrainingBody | LogFull { .. } | LogUnavailable | Timeout(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            ContentType(_) | ContentEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            DeclaredTooLarge { .. }
            | BodyTooLarge { .. }
            | DecompressedTooLarge { .. }
            | EventsTooLarge { .. }
            | DecodedTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            BodyRead(_) | Decompress { .. } | Decode(_) => StatusCode::BAD_REQUEST,
            Busy => StatusCode::TOO_MANY_REQUESTS,
            Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The `reason` label of `holdfast_otlp_rejected_requests_total`.
    pub(crate) fn reason(&self) -> &'static str {
        use RequestError::*;
        match self {
            NotFound { .. } => "not_found",
            Method { .. } => "method",
            Unauthorized => "unauthorized",
            Draining | DrainingBody => "draining",
            ContentType(_) => "content_type",
            ContentEncoding(_) => "content_encoding",
            DeclaredTooLarge { .. } | BodyTooLarge { .. } | DecompressedTooLarge { .. } => {
                "too_large"
            }
            EventsTooLarge { .. } => "events_too_large",
            DecodedTooLarge { .. } => "decoded_too_large",
            Timeout(_) => "timeout",
            BodyRead(_) => "body_read",
            Decompress { .. } => "decompress",
            Decode(_) => "decode",
            Busy => "busy",
            LogFull { .. } => "log_full",
            LogUnavailable => "log_error",
            Internal(_) => "internal",
        }
    }

    pub(crate) fn retry_after(&self) -> Option<u32> {
        use RequestError::*;
        match self {
            Draining | DrainingBody => Some(RETRY_DRAINING),
            Timeout(_) => Some(RETRY_TIMEOUT),
            LogFull { .. } => Some(RETRY_LOG_FULL),
            LogUnavailable => Some(RETRY_LOG_ERROR),
            Busy => Some(RETRY_BUSY),
            _ => None,
        }
    }

    /// The `google.rpc.Code` that matches the status; the spec lets servers
    /// omit it and clients ignore it, but it helps in their debug logs.
    fn rpc_code(&self) -> i32 {
        match self.status() {
            StatusCode::BAD_REQUEST
            | StatusCode::UNSUPPORTED_MEDIA_TYPE
            | StatusCode::PAYLOAD_TOO_LARGE => 3, // INVALID_ARGUMENT
            StatusCode::REQUEST_TIMEOUT => 4,   // DEADLINE_EXCEEDED
            StatusCode::NOT_FOUND => 5,         // NOT_FOUND
            StatusCode::TOO_MANY_REQUESTS => 8, // RESOURCE_EXHAUSTED
            StatusCode::METHOD_NOT_ALLOWED => 12, // UNIMPLEMENTED
            StatusCode::SERVICE_UNAVAILABLE => 14, // UNAVAILABLE
            StatusCode::UNAUTHORIZED => 16,     // UNAUTHENTICATED
            _ => 13,                            // INTERNAL
        }
    }
}

/// `google.rpc.Status`; `details` (field 3) is never sent.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
}

pub(crate) type Body = Full<Bytes>;

fn with_type(status: StatusCode, content_type: &'static str, body: Bytes) -> Response<Body> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

/// 200 with an empty `Export*ServiceResponse`.
pub(crate) fn success(encoding: Encoding) -> Response<Body> {
    let body = match encoding {
        // Every field unset: the protobuf encoding is empty.
        Encoding::Protobuf => Bytes::new(),
        Encoding::Json => Bytes::from_static(b"{}"),
    };
    with_type(StatusCode::OK, encoding.content_type(), body)
}

/// The answer to a request that was not accepted. `close` asks the client
/// to open a new connection (the request body was not read to its end).
pub(crate) fn error(err: &RequestError, encoding: Option<Encoding>, close: bool) -> Response<Body> {
    let message = err.to_string();
    let status = err.status();
    let mut r = match encoding {
        Some(Encoding::Protobuf) => {
            let st = RpcStatus {
                code: err.rpc_code(),
                message,
            };
            with_type(status, "application/x-protobuf", st.encode_to_vec().into())
        }
        Some(Encoding::Json) => {
            let st = serde_json::json!({ "code": err.rpc_code(), "message": message });
            with_type(status, "application/json", st.to_string().into())
        }
        None => with_type(
            status,
            "text/plain; charset=utf-8",
            format!("{message}\n").into(),
        ),
    };
    let h = r.headers_mut();
    if let Some(s) = err.retry_after() {
        h.insert(RETRY_AFTER, HeaderValue::from(s));
    }
    match err {
        RequestError::Method { .. } => {
            h.insert(ALLOW, HeaderValue::from_static("POST"));
        }
        RequestError::Unauthorized => {
            h.insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        _ => {}
    }
    if close {
        h.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

/// No room in the source's memory budget: the client retries later.
impl From<crate::sources::budget::NoRoom> for RequestError {
    fn from(_: crate::sources::budget::NoRoom) -> RequestError {
        RequestError::Busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(r: Response<Body>) -> Bytes {
        r.into_body().collect().await.unwrap().to_bytes()
    }

    #[tokio::test]
    async fn success_is_an_empty_response_in_the_request_encoding() {
        let r = success(Encoding::Protobuf);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/x-protobuf");
        assert!(body(r).await.is_empty());
        let r = success(Encoding::Json);
        assert_eq!(r.headers()[CONTENT_TYPE], "application/json");
        assert_eq!(body(r).await, "{}");
    }

    #[tokio::test]
    async fn errors_carry_a_status_message_and_retry_after_when_retryable() {
        let e = RequestError::LogFull {
            waited: Duration::from_secs(1),
        };
        let r = error(&e, Some(Encoding::Protobuf), false);
        assert_eq!(r.status(), 503);
        assert_eq!(r.headers()[RETRY_AFTER], "2");
        let st = RpcStatus::decode(body(r).await).unwrap();
        assert_eq!(st.code, 14);
        assert!(st.message.contains("log is full"), "{}", st.message);

        let e = RequestError::Decode("bad".into());
        let r = error(&e, Some(Encoding::Json), true);
        assert_eq!(r.status(), 400);
        assert!(r.headers().get(RETRY_AFTER).is_none());
        assert_eq!(r.headers()[CONNECTION], "close");
        let v: serde_json::Value = serde_json::from_slice(&body(r).await).unwrap();
        assert_eq!(v["message"], "bad");
        assert_eq!(v["code"], 3);
    }
}
