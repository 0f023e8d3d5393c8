/*!
What a request costs in memory once decoded, known before it is decoded.

A body's bytes are not its cost: 8 MB of protobuf can name four million
empty log records, which prost turns into some 800 MB of structs. So before
decoding, one pass over the (decompressed) body bounds what decoding and
splitting it will allocate (`protobuf.rs` over the wire format, `json.rs`
over the JSON text), and the handler reserves that much from the source's
memory budget, beside the body, until the request is answered. A request
whose bound cannot fit the budget even alone is refused with 413; one that
could fit but finds the budget busy waits, then gets 429.
*/

mod json;
mod protobuf;
mod schema;

use super::response::{Encoding, RequestError};
use crate::event::Signal;

/// A bound that passed the room a request may have: how far it got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Over {
    pub bytes: u64,
    pub records: u64,
}

/// What a body costs to decode, as far as the walk went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bound {
    /// Bytes prost allocates at most.
    pub bytes: u64,
    /// Records (log records, spans, data points) the body holds at most.
    pub records: u64,
}

/// Why the walk stopped early.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum WalkError {
    /// The bound passed the limit; what it had reached.
    Over(Over),
    /// Not protobuf prost would decode: a truncated field, a bad varint.
    Malformed(&'static str),
}

/// Bytes of batch per record on top of the body's bytes: a record's
/// framing and ids, or (format 1) its copy of the resource and scope.
const BATCH_PER_RECORD: u64 = 64;

/// The bytes to reserve before decoding `body` (decompressed) and building
/// its batch: the decoded request, and the batch it becomes (the body's
/// bytes again and a little per record). At most `room` is ever granted; a
/// request over it is refused as too large.
pub(crate) fn decoding_cost(
    signal: Signal,
    encoding: Encoding,
    body: &[u8],
    room: u64,
) -> Result<u64, RequestError> {
    let batch = body.len() as u64;
    let limit = room.saturating_sub(batch);
    let walked = match encoding {
        Encoding::Protobuf => protobuf::bound(signal, body, limit),
        Encoding::Json => json::bound(body, limit),
    };
    let too_large = |o: Over| RequestError::DecodedTooLarge {
        bytes: o.bytes.saturating_add(batch),
        records: o.records,
        room,
    };
    let b = match walked {
        Ok(b) => b,
        Err(WalkError::Over(o)) => return Err(too_large(o)),
        Err(WalkError::Malformed(why)) => {
            return Err(RequestError::Decode(format!(
                "the body is not a valid protobuf {}: {why}",
                super::decode::request_name(signal)
            )))
        }
    };
    let total = b
        .bytes
        .saturating_add(batch)
        .saturating_add(b.records.saturating_mul(BATCH_PER_RECORD));
    if total > room {
        return Err(too_large(Over {
            bytes: total - batch,
            records: b.records,
        }));
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;

    fn attr(key: &str, v: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    /// An SDK's batch: 100 records of a 90-byte body, 5 attributes and
    /// trace context.
    fn sdk_batch() -> ExportLogsServiceRequest {
        let record = LogRecord {
            time_unix_nano: 1,
            severity_number: 9,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue("x".repeat(90))),
            }),
            attributes: (0..5)
                .map(|i| attr(&format!("attr.{i}"), "value"))
                .collect(),
            trace_id: vec![7; 16],
            span_id: vec![8; 8],
            ..Default::default()
        };
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![record; 100],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    const JSON_RECORD: &str = r#"{"timeUnixNano":"1","severityNumber":9,"severityText":"INFO","body":{"stringValue":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"},"attributes":[{"key":"attr.0","value":{"stringValue":"value"}},{"key":"attr.1","value":{"stringValue":"value"}},{"key":"attr.2","value":{"stringValue":"value"}},{"key":"attr.3","value":{"stringValue":"value"}},{"key":"attr.4","value":{"stringValue":"value"}}],"traceId":"07070707070707070707070707070707","spanId":"0808080808080808"}"#;

    /// What an ordinary request is charged, as a multiple of its body: the
    /// figures docs/sources-otlp-http.md quotes ("Bounds").
    #[test]
    fn ordinary_requests_cost_a_few_times_their_body() {
        let body = sdk_batch().encode_to_vec();
        let cost = decoding_cost(Signal::Logs, Encoding::Protobuf, &body, u64::MAX).unwrap();
        let ratio = cost as f64 / body.len() as f64;
        assert!((1.0..12.0).contains(&ratio), "protobuf: {ratio:.1}x");

        let records = vec![JSON_RECORD; 100].join(",");
        let json =
            format!(r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{records}]}}]}}]}}"#);
        let unknown = Default::default();
        crate::sources::otlp_http::decode::decode(
            Signal::Logs,
            Encoding::Json,
            json.as_bytes(),
            &unknown,
        )
        .unwrap();
        let cost = decoding_cost(Signal::Logs, Encoding::Json, json.as_bytes(), u64::MAX).unwrap();
        let ratio = cost as f64 / json.len() as f64;
        assert!((1.0..16.0).contains(&ratio), "JSON: {ratio:.1}x");
    }

    #[test]
    fn a_request_that_cannot_fit_is_too_large_and_says_what_to_do() {
        let body = sdk_batch().encode_to_vec();
        let e = decoding_cost(Signal::Logs, Encoding::Protobuf, &body, 100_000).unwrap_err();
        assert!(matches!(e, RequestError::DecodedTooLarge { .. }), "{e:?}");
        assert_eq!(e.status(), hyper::StatusCode::PAYLOAD_TOO_LARGE);
        assert!(
            e.to_string().contains("send fewer records per request"),
            "{e}"
        );
    }
}
