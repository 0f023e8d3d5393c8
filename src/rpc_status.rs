//! gRPC status details both sides of OTLP/gRPC read or write: the
//! `google.rpc.Status` carried in `grpc-status-details-bin`, the
//! `google.rpc.RetryInfo` in it that makes a refusal retryable after a
//! pause, and the canonical names of the codes. The receiver
//! (`src/sources/otlp/`) writes RetryInfo; the sink (`src/sinks/otlp_grpc/`)
//! reads it.

use std::time::Duration;

use prost::Message;
use tonic::Code;

/// `google.rpc.Status`, with its details.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, Message)]
pub struct Any {
    #[prost(string, tag = "1")]
    pub type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    pub value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, Message)]
pub struct ProtoDuration {
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// The `type_url` of a packed `RetryInfo`.
pub const RETRY_INFO_TYPE: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// `grpc-status-details-bin` for `code` and `message` asking the client to
/// wait `secs` seconds before it retries.
pub fn with_retry_delay(code: Code, message: &str, secs: u32) -> Vec<u8> {
    let info = RetryInfo {
        retry_delay: Some(ProtoDuration {
            seconds: i64::from(secs),
            nanos: 0,
        }),
    };
    RpcStatus {
        code: code as i32,
        message: message.to_string(),
        details: vec![Any {
            type_url: RETRY_INFO_TYPE.to_string(),
            value: info.encode_to_vec(),
        }],
    }
    .encode_to_vec()
}

/// The `retry_delay` of a `RetryInfo` among a status's details (the bytes
/// of `grpc-status-details-bin`). `None` when there is none or it cannot be
/// read; a negative delay is zero.
pub fn retry_delay(details: &[u8]) -> Option<Duration> {
    if details.is_empty() {
        return None;
    }
    let status = RpcStatus::decode(details).ok()?;
    let info = status
        .details
        .iter()
        .find(|a| a.type_url.ends_with("/google.rpc.RetryInfo") || a.type_url == RETRY_INFO_TYPE)?;
    let d = RetryInfo::decode(info.value.as_slice())
        .ok()?
        .retry_delay
        .unwrap_or_default();
    let secs = u64::try_from(d.seconds).unwrap_or(0);
    let nanos = u32::try_from(d.nanos).unwrap_or(0).min(999_999_999);
    Some(Duration::new(secs, nanos))
}

/// A code's canonical name, as the specification writes it (and metrics
/// and messages show it).
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::Cancelled => "CANCELLED",
        Code::Unknown => "UNKNOWN",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        Code::NotFound => "NOT_FOUND",
        Code::AlreadyExists => "ALREADY_EXISTS",
        Code::PermissionDenied => "PERMISSION_DENIED",
        Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        Code::FailedPrecondition => "FAILED_PRECONDITION",
        Code::Aborted => "ABORTED",
        Code::OutOfRange => "OUT_OF_RANGE",
        Code::Unimplemented => "UNIMPLEMENTED",
        Code::Internal => "INTERNAL",
        Code::Unavailable => "UNAVAILABLE",
        Code::DataLoss => "DATA_LOSS",
        Code::Unauthenticated => "UNAUTHENTICATED",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_written_retry_delay_reads_back() {
        let details = with_retry_delay(Code::ResourceExhausted, "log full", 2);
        assert_eq!(retry_delay(&details), Some(Duration::from_secs(2)));
        let status = RpcStatus::decode(details.as_slice()).unwrap();
        assert_eq!(status.code, Code::ResourceExhausted as i32);
        assert_eq!(status.message, "log full");
        assert_eq!(retry_delay(b""), None);
        assert_eq!(retry_delay(b"\xff\xff"), None);
    }
}
