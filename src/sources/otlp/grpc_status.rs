/*!
What a gRPC call is answered: the one table from the OTLP receiver's
refusals ([`RequestError`], shared with OTLP/HTTP) to gRPC status codes,
`google.rpc.RetryInfo` for the refusals a client should retry after a
pause, and the response itself (a message and `grpc-status` trailers, or a
trailers-only answer).

The codes follow the OTLP/gRPC spec: clients retry `UNAVAILABLE`,
`DEADLINE_EXCEEDED` and `CANCELLED`, and `RESOURCE_EXHAUSTED` only when it
carries `RetryInfo` (so an oversize message, which will never fit, carries
none); everything else is final.
*/

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::Frame;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use tonic::Code;

use crate::rpc_status::with_retry_delay;
use crate::sources::otlp_http::response::RequestError;

/// The gRPC code a refusal is answered with ([`status_of`] adds
/// `RetryInfo` where the refusal has a retry delay, the one OTLP/HTTP sends
/// as `Retry-After`).
pub(crate) fn code_of(e: &RequestError) -> Code {
    use RequestError::*;
    match e {
        NotFound { .. } | Method { .. } | ContentEncoding(_) => Code::Unimplemented,
        Unauthorized => Code::Unauthenticated,
        Draining | DrainingBody | LogUnavailable => Code::Unavailable,
        ContentType(_) | BodyRead(_) | Decompress { .. } | Decode(_) => Code::InvalidArgument,
        // Never acceptable: no RetryInfo, so clients drop rather than retry.
        DeclaredTooLarge { .. }
        | BodyTooLarge { .. }
        | DecompressedTooLarge { .. }
        | EventsTooLarge { .. }
        | DecodedTooLarge { .. } => Code::ResourceExhausted,
        // Worth retrying after the delay in RetryInfo.
        Busy | LogFull { .. } => Code::ResourceExhausted,
        Timeout(_) => Code::DeadlineExceeded,
        Internal(_) => Code::Internal,
    }
}

/// The `tonic::Status` of a refusal: its code, its message, and RetryInfo
/// where a retry after a pause is the answer.
pub(crate) fn status_of(e: &RequestError) -> tonic::Status {
    let code = code_of(e);
    let message = message_of(e);
    let Some(secs) = e.retry_after().filter(|_| retry_info_fits(code)) else {
        return tonic::Status::new(code, message);
    };
    let details = with_retry_delay(code, &message, secs);
    tonic::Status::with_details(code, message, details.into())
}

/// The message a gRPC client reads: the shared one, except where it names
/// HTTP's paths and headers.
fn message_of(e: &RequestError) -> String {
    use RequestError::*;
    match e {
        NotFound { path } => format!(
            "no OTLP service method at {path}: call \
             opentelemetry.proto.collector.{{logs,trace,metrics}}.v1.{{Logs,Trace,Metrics}}Service/Export"
        ),
        Method { method } => format!("method {method} is not allowed: gRPC calls are POST"),
        ContentType(t) => format!(
            "unsupported content-type {t:?}: this is a gRPC listener; send application/grpc \
             (OTLP/HTTP has its own listener)"
        ),
        ContentEncoding(c) => {
            format!("unsupported grpc-encoding {c:?}: send gzip or identity")
        }
        _ => e.to_string(),
    }
}

/// RetryInfo is what makes `RESOURCE_EXHAUSTED` retryable; on
/// `UNAVAILABLE` it tells the client how long to wait. A deadline
/// refusal is retried at once.
fn retry_info_fits(c: Code) -> bool {
    matches!(c, Code::ResourceExhausted | Code::Unavailable)
}

/// A unary gRPC response body: at most one message, then trailers.
pub(crate) struct GrpcBody {
    data: Option<Bytes>,
    trailers: Option<HeaderMap>,
}

impl hyper::body::Body for GrpcBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Some(d) = self.data.take() {
            return Poll::Ready(Some(Ok(Frame::data(d))));
        }
        Poll::Ready(self.trailers.take().map(|t| Ok(Frame::trailers(t))))
    }

    fn is_end_stream(&self) -> bool {
        self.data.is_none() && self.trailers.is_none()
    }
}

fn grpc_response(status: StatusCode, body: GrpcBody) -> Response<GrpcBody> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    r
}

/// `OK` with an empty `Export*ServiceResponse` (every field unset: zero
/// bytes; `partial_success` is never set since a call is all or nothing).
pub(crate) fn ok() -> Response<GrpcBody> {
    let mut trailers = HeaderMap::new();
    trailers.insert("grpc-status", HeaderValue::from_static("0"));
    grpc_response(
        StatusCode::OK,
        GrpcBody {
            data: Some(Bytes::from_static(EMPTY_MESSAGE)),
            trailers: Some(trailers),
        },
    )
}

/// A refusal as a trailers-only answer: the status in the headers, no
/// message. A request that was not gRPC at all (its content type) is
/// answered HTTP 415, as the gRPC spec asks, with the status beside it
/// for clients that read it.
pub(crate) fn refusal(e: &RequestError) -> Response<GrpcBody> {
    let http = match e {
        RequestError::ContentType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
        _ => StatusCode::OK,
    };
    let mut r = grpc_response(
        http,
        GrpcBody {
            data: None,
            trailers: None,
        },
    );
    let h = r.headers_mut();
    if status_of(e).add_header(h).is_err() {
        // The message cannot be a header value: send the code alone.
        let _ = tonic::Status::new(code_of(e), "").add_header(h);
    }
    if matches!(e, RequestError::ContentEncoding(_)) {
        h.insert(
            "grpc-accept-encoding",
            HeaderValue::from_static("gzip,identity"),
        );
    }
    r
}

/// An empty message, length-prefixed (uncompressed, 0 bytes): every
/// `Export*ServiceResponse` this receiver sends.
const EMPTY_MESSAGE: &[u8] = &[0, 0, 0, 0, 0];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc_status::{RetryInfo, RpcStatus, RETRY_INFO_TYPE};
    use prost::Message;
    use std::time::Duration;

    fn details(s: &tonic::Status) -> Option<RetryInfo> {
        if s.details().is_empty() {
            return None;
        }
        let st = RpcStatus::decode(s.details()).unwrap();
        assert_eq!(st.code, s.code() as i32);
        let any = st.details.first()?;
        assert_eq!(any.type_url, RETRY_INFO_TYPE);
        Some(RetryInfo::decode(&any.value[..]).unwrap())
    }

    #[test]
    fn retryable_refusals_carry_retry_info_and_final_ones_do_not() {
        let full = status_of(&RequestError::LogFull {
            waited: Duration::from_secs(1),
        });
        assert_eq!(full.code(), Code::ResourceExhausted);
        let delay = details(&full).unwrap().retry_delay.unwrap();
        assert_eq!(delay.seconds, 2);
        let busy = status_of(&RequestError::Busy);
        assert_eq!(busy.code(), Code::ResourceExhausted);
        assert!(details(&busy).is_some());
        let draining = status_of(&RequestError::Draining);
        assert_eq!(draining.code(), Code::Unavailable);
        assert!(details(&draining).is_some());
        let big = status_of(&RequestError::BodyTooLarge { limit: 10 });
        assert_eq!(big.code(), Code::ResourceExhausted);
        assert!(
            details(&big).is_none(),
            "an oversize message is never retried"
        );
        let bad = status_of(&RequestError::Decode("bad".into()));
        assert_eq!(bad.code(), Code::InvalidArgument);
        assert!(details(&bad).is_none());
        assert_eq!(code_of(&RequestError::Unauthorized), Code::Unauthenticated);
        assert_eq!(
            code_of(&RequestError::Timeout(Duration::from_secs(1))),
            Code::DeadlineExceeded
        );
    }

    #[test]
    fn a_refusal_is_trailers_only_and_ok_is_a_message_then_trailers() {
        let r = refusal(&RequestError::Unauthorized);
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["grpc-status"], "16");
        assert!(r.headers()["grpc-message"]
            .to_str()
            .unwrap()
            .contains("bearer%20token"));
        assert!(hyper::body::Body::is_end_stream(r.body()));
        let r = refusal(&RequestError::ContentType("text/plain".into()));
        assert_eq!(r.status(), 415);
        let r = ok();
        assert_eq!(r.headers()[CONTENT_TYPE], "application/grpc");
        assert_eq!(r.body().data.as_deref(), Some(&[0u8, 0, 0, 0, 0][..]));
        assert_eq!(r.body().trailers.as_ref().unwrap()["grpc-status"], "0");
    }
}
