//! What an OTLP/gRPC `Export` call came back with, in the shared retry
//! policy's terms (`delivery/retry/`): the policy speaks HTTP's numbers, so
//! each gRPC status becomes the number whose handling the OTLP
//! specification asks for. That number is also what the `status` label of
//! `holdfast_sink_requests_total` shows (its class).
//!
//! | what came back | becomes | the policy then | `status` label |
//! |----------------|---------|-----------------|----------------|
//! | `OK`, no `partial_success` (or nothing rejected) | read: accepted | delivered | `2xx` |
//! | `OK`, `rejected_* = N > 0` | read: partially rejected | the request quarantined, as `otlp_http` does | `2xx` |
//! | `OK`, an answer that is not an export response | read: unreadable | retried, counted toward `max_attempts` | `2xx` |
//! | `OK`, an answer past its bound (1 MiB) | too large | retried, not counted | `2xx` |
//! | `UNAVAILABLE`, `CANCELLED`, `ABORTED`, `OUT_OF_RANGE` | 503 | retried with backoff, without limit | `5xx` |
//! | `DEADLINE_EXCEEDED` sent by the receiver | 504 | retried with backoff, without limit | `5xx` |
//! | `DATA_LOSS` | 500 | retried with backoff, without limit | `5xx` |
//! | `RESOURCE_EXHAUSTED` with `google.rpc.RetryInfo` | 429, its `retry_delay` as `Retry-After` | retried, waiting at least the delay | `4xx` |
//! | `RESOURCE_EXHAUSTED` saying the message is too large | 413 | split in halves; one event alone too large is quarantined | `4xx` |
//! | `RESOURCE_EXHAUSTED` otherwise | 400 | quarantined (the specification: not retryable without `RetryInfo`) | `4xx` |
//! | `UNAUTHENTICATED` | 401 | held: kept, retried slowly, loud | `4xx` |
//! | `PERMISSION_DENIED` | 403 | held: kept, retried slowly, loud | `4xx` |
//! | every other code (`INVALID_ARGUMENT`, `UNIMPLEMENTED`, `NOT_FOUND`, `ALREADY_EXISTS`, `FAILED_PRECONDITION`, `INTERNAL`, `UNKNOWN`) | 400 | quarantined with the status | `4xx` |
//! | no answer: cannot connect (refused, TLS) | transport `connect` | retried, without limit | `error` |
//! | no answer within `request_timeout` | transport `timeout` | retried, without limit | `error` |
//! | the connection broke (reset, GOAWAY, a protocol error) | transport `connection` | retried, without limit | `error` |
//!
//! No gRPC code becomes 409 (the policy's "already delivered") or 404 (its
//! "wrong endpoint"): `ALREADY_EXISTS` and `UNIMPLEMENTED` say nothing of
//! the kind in OTLP, and the specification calls them not retryable.
//! The quarantined events carry the code's name and the receiver's message.

use std::time::Duration;

use prost::Message;
use tonic::{Code, Status};

use crate::rpc_status::{code_name, retry_delay};

use crate::sinks::delivery::transport::{
    truncate, Answer, BodyVerdict, TransportKind, MAX_ERROR_TEXT,
};

/// The most an `Export*ServiceResponse` may take: it holds a count and a
/// message, so anything near this is a broken or hostile receiver.
pub(super) const MAX_ANSWER_BYTES: usize = 1 << 20;

/// The start of the error tonic makes when an answer is longer than the
/// client's decoding limit (`tonic/src/codec/decode.rs`), which is a local
/// refusal to read, not the receiver's `OUT_OF_RANGE`.
const ANSWER_TOO_LARGE: &str = "Error, decoded message length too large";

/// `Export{Logs,Trace,Metrics}ServiceResponse`: the same shape for every
/// signal.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct ExportResponse {
    #[prost(message, optional, tag = "1")]
    pub partial_success: Option<PartialSuccess>,
}

/// `Export*PartialSuccess`: `rejected_log_records`, `rejected_spans` or
/// `rejected_data_points` is field 1, `error_message` field 2.
#[derive(Clone, PartialEq, Message)]
pub(crate) struct PartialSuccess {
    #[prost(int64, tag = "1")]
    pub rejected: i64,
    #[prost(string, tag = "2")]
    pub error_message: String,
}

/// The HTTP-style status the policy applies to a receiver's gRPC status,
/// and the wait it asked for (see the table in the module docs).
pub(super) fn status_number(code: Code, message: &str, details: &[u8]) -> (u16, Option<Duration>) {
    match code {
        Code::Ok => (200, None),
        Code::Unavailable | Code::Cancelled | Code::Aborted | Code::OutOfRange => (503, None),
        Code::DeadlineExceeded => (504, None),
        Code::DataLoss => (500, None),
        Code::ResourceExhausted => match retry_delay(details) {
            Some(wait) => (429, Some(wait)),
            None if says_too_large(message) => (413, None),
            None => (400, None),
        },
        Code::Unauthenticated => (401, None),
        Code::PermissionDenied => (403, None),
        _ => (400, None),
    }
}

/// Whether a `RESOURCE_EXHAUSTED` message is a receiver's limit on the
/// message size (grpc-go: "received message larger than max", tonic:
/// "message length too large", grpc-java: "exceeds maximum size"): smaller
/// requests then go through, where a quota would refuse them too.
fn says_too_large(message: &str) -> bool {
    let m = message.to_ascii_lowercase();
    ["larger than max", "too large", "exceeds maximum"]
        .iter()
        .any(|s| m.contains(s))
}

/// A failed call. A status tonic made from an error of its own (it keeps
/// the error as its source: connect, deadline, reset, GOAWAY) is no answer
/// from the receiver, of the `kind` its causes tell; a status the receiver
/// sent has no source.
pub(super) fn failed(status: &Status, kind: impl FnOnce() -> TransportKind) -> Answer {
    if std::error::Error::source(status).is_some() {
        let kind = kind();
        return Answer::Transport {
            kind,
            message: chain(status),
        };
    }
    if status.code() == Code::OutOfRange && status.message().starts_with(ANSWER_TOO_LARGE) {
        return Answer::TooLarge {
            status: 200,
            limit: MAX_ANSWER_BYTES,
        };
    }
    let (number, retry_after) = status_number(status.code(), status.message(), status.details());
    let name = code_name(status.code());
    let error = if status.message().is_empty() {
        format!("gRPC status {name}")
    } else {
        format!("gRPC status {name}: {}", status.message())
    };
    Answer::Refused {
        status: number,
        retry_after,
        error: truncate(&error, MAX_ERROR_TEXT),
    }
}

/// An `OK` answer: what its `partial_success` says, as the `otlp_http`
/// sink reads it.
pub(super) fn accepted(answer: Result<ExportResponse, String>) -> Answer {
    let verdict = match answer {
        Err(why) => BodyVerdict::Unreadable(why),
        Ok(r) => match r.partial_success {
            Some(p) if p.rejected > 0 => BodyVerdict::PartiallyRejected {
                rejected: p.rejected as u64,
                message: truncate(&p.error_message, MAX_ERROR_TEXT),
            },
            Some(p) if !p.error_message.is_empty() => {
                BodyVerdict::AcceptedWithWarning(truncate(&p.error_message, MAX_ERROR_TEXT))
            }
            _ => BodyVerdict::Accepted,
        },
    };
    Answer::Read {
        status: 200,
        verdict,
    }
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        let text = c.to_string();
        // tonic repeats its source's text in its own.
        if !s.contains(&text) {
            s.push_str(": ");
            s.push_str(&text);
        }
        cause = c.source();
    }
    truncate(&s, MAX_ERROR_TEXT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc_status::{Any, ProtoDuration, RetryInfo, RpcStatus, RETRY_INFO_TYPE};

    /// `grpc-status-details-bin` with a RetryInfo of `secs` seconds.
    pub(crate) fn details_with_retry(secs: i64, nanos: i32) -> Vec<u8> {
        let info = RetryInfo {
            retry_delay: Some(ProtoDuration {
                seconds: secs,
                nanos,
            }),
        };
        RpcStatus {
            code: Code::ResourceExhausted as i32,
            message: "slow down".into(),
            details: vec![
                Any {
                    type_url: "type.googleapis.com/google.rpc.DebugInfo".into(),
                    value: vec![1, 2, 3],
                },
                Any {
                    type_url: RETRY_INFO_TYPE.into(),
                    value: info.encode_to_vec(),
                },
            ],
        }
        .encode_to_vec()
    }

    #[test]
    fn retry_info_gives_the_delay() {
        assert_eq!(
            retry_delay(&details_with_retry(3, 500_000_000)),
            Some(Duration::from_millis(3500))
        );
        assert_eq!(
            retry_delay(&details_with_retry(-5, -1)),
            Some(Duration::ZERO)
        );
        // No details, details without RetryInfo, bytes that are not a status.
        assert_eq!(retry_delay(&[]), None);
        let other = RpcStatus {
            code: 8,
            message: String::new(),
            details: vec![],
        };
        assert_eq!(retry_delay(&other.encode_to_vec()), None);
        assert_eq!(retry_delay(&[0xff, 0xff, 0xff]), None);
    }

    fn number(code: Code) -> u16 {
        status_number(code, "", &[]).0
    }

    /// The OTLP specification's table: retryable codes reach the policy as
    /// statuses it retries, the others as statuses it rejects or holds.
    #[test]
    fn codes_map_onto_the_policy_as_the_specification_says() {
        use crate::sinks::delivery::retry::{Decision, Outcome, Policy, Verdict};
        let policy = Policy {
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(10),
            max_attempts: 3,
        };
        let classify = |status: u16, retry_after| {
            policy.classify(
                &Outcome::Status {
                    status,
                    retry_after,
                    error: "",
                },
                &[0, 0],
            )
        };
        let retried = |d: &Decision| {
            matches!(d, Decision::PerEvent { verdicts, .. }
                if verdicts.iter().all(|v| matches!(v, Verdict::Retry { counted: false, .. })))
        };
        let rejected = |d: &Decision| {
            matches!(d, Decision::PerEvent { verdicts, .. }
                if verdicts.iter().all(|v| matches!(v, Verdict::Reject(_))))
        };
        for code in [
            Code::Cancelled,
            Code::DeadlineExceeded,
            Code::Aborted,
            Code::OutOfRange,
            Code::Unavailable,
            Code::DataLoss,
        ] {
            assert!(retried(&classify(number(code), None)), "{code:?}");
        }
        let (n, wait) = status_number(Code::ResourceExhausted, "", &details_with_retry(2, 0));
        assert_eq!((n, wait), (429, Some(Duration::from_secs(2))));
        match classify(n, wait) {
            Decision::PerEvent { retry_after, .. } => {
                assert_eq!(retry_after, Some(Duration::from_secs(2)))
            }
            d => panic!("{d:?}"),
        }
        for code in [
            Code::ResourceExhausted,
            Code::InvalidArgument,
            Code::Unimplemented,
            Code::NotFound,
            Code::AlreadyExists,
            Code::FailedPrecondition,
            Code::Internal,
            Code::Unknown,
        ] {
            assert!(rejected(&classify(number(code), None)), "{code:?}");
        }
        for code in [Code::Unauthenticated, Code::PermissionDenied] {
            assert!(
                matches!(
                    classify(number(code), None),
                    Decision::Hold { reason: "auth", .. }
                ),
                "{code:?}"
            );
        }
        let too_large = status_number(
            Code::ResourceExhausted,
            "grpc: received message larger than max (5242880 vs. 4194304)",
            &[],
        );
        assert_eq!(too_large, (413, None));
        assert!(matches!(classify(413, None), Decision::Split { .. }));
    }

    #[test]
    fn a_receivers_status_is_refused_with_its_name_and_message() {
        let a = failed(&Status::invalid_argument("bad record"), || {
            TransportKind::Connection
        });
        match a {
            Answer::Refused { status, error, .. } => {
                assert_eq!(status, 400);
                assert_eq!(error, "gRPC status INVALID_ARGUMENT: bad record");
            }
            a => panic!("{a:?}"),
        }
        let local = Status::out_of_range(format!(
            "{ANSWER_TOO_LARGE}: found 9999999 bytes, the limit is: 1048576 bytes"
        ));
        assert!(matches!(
            failed(&local, || TransportKind::Connection),
            Answer::TooLarge { .. }
        ));
    }

    #[test]
    fn partial_success_reads_as_the_http_sink_reads_it() {
        let read = |p: Option<(i64, &str)>| match accepted(Ok(ExportResponse {
            partial_success: p.map(|(rejected, m)| PartialSuccess {
                rejected,
                error_message: m.into(),
            }),
        })) {
            Answer::Read { verdict, .. } => verdict,
            a => panic!("{a:?}"),
        };
        assert_eq!(read(None), BodyVerdict::Accepted);
        assert_eq!(read(Some((0, ""))), BodyVerdict::Accepted);
        assert_eq!(
            read(Some((0, "dropped an attribute"))),
            BodyVerdict::AcceptedWithWarning("dropped an attribute".into())
        );
        assert_eq!(
            read(Some((2, "two too old"))),
            BodyVerdict::PartiallyRejected {
                rejected: 2,
                message: "two too old".into()
            }
        );
        assert!(matches!(
            accepted(Err("not protobuf".into())),
            Answer::Read {
                verdict: BodyVerdict::Unreadable(_),
                ..
            }
        ));
    }
}
