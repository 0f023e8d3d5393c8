/*!
The event envelope: what one record in the log is.

Every log record, span and metric data point that enters holdfast becomes
one [`Envelope`], encoded with protobuf and appended to the log as one event.
The envelope carries the record itself (the OpenTelemetry protobuf message),
its resource and instrumentation scope (so a sink can rebuild OTLP requests
grouped as they came in), when holdfast observed it, which source produced
it, where in a file it came from, and its stable [`EventId`].

# Ids versus sequence numbers

The log gives every appended event a sequence number: a position, which
changes if the same input is appended again (after a crash before a file
checkpoint, say). The id identifies the *record*: it is fixed before the
append, travels inside the envelope through every retry, replay and restart,
and is what receivers use to drop duplicates (the `_id` of an Elasticsearch
`create`). File records take their id from the file's identity, its rotation
generation and the byte offset of the line, so a line read twice gets the
same id; records received over the network get a random id on arrival.

# One writer and reader of the format

No other module writes a field of a log record or of the envelope around
it: sources and the processing chain write a record through
[`LogFields`] (`fields.rs`; buffered by [`LogRecordWriter`],
`log_writer.rs`) and frame it as an event through [`EventFields`] and
[`write_event`] (`framing.rs`); sinks read single
envelope fields without decoding through [`envelope_fields`], whole
events through [`Decoder`] (`stored.rs`), and gauge and sum points in
place through [`MetricPoints`] (`metric_point.rs`). Their unit tests compare the
bytes with prost's.
*/

use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

pub mod envelope_fields;
mod fields;
mod framing;
mod log_writer;
mod metric_point;
mod stored;
mod wire;

pub use fields::{AttrValue, FieldWriter, LogFields, RawLogFields};
pub use framing::{
    put_encoded_event, write_event, EventBuf, EventFields, OriginFields, WriteRecord,
};
pub use log_writer::LogRecordWriter;
pub use metric_point::{Attribute, MetricPoints, Number, NumberKind, NumberPoint, ValueRef};
pub use stored::{Context, Decoder, Group, Origin, Stored};

/// A record's stable identity: 16 bytes, shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EventId(pub [u8; 16]);

impl EventId {
    /// The id of the line at `offset` in the file identified by
    /// `fingerprint`, in rotation generation `generation`. Deterministic
    /// across versions: the inputs are hashed with XXH3-128 in a fixed
    /// little-endian layout, never with a hasher whose output may change.
    pub fn for_file_line(fingerprint: u64, generation: u32, offset: u64) -> EventId {
        let mut input = [0u8; 8 + 8 + 4 + 8];
        input[0..8].copy_from_slice(b"hf-file1");
        input[8..16].copy_from_slice(&fingerprint.to_le_bytes());
        input[16..20].copy_from_slice(&generation.to_le_bytes());
        input[20..28].copy_from_slice(&offset.to_le_bytes());
        EventId(xxhash_rust::xxh3::xxh3_128(&input).to_le_bytes())
    }

    /// A fresh random id, for records that arrive over the network.
    pub fn random() -> EventId {
        EventId(rand::random::<u128>().to_le_bytes())
    }

    pub fn to_hex(&self) -> String {
        let mut s = String::with_capacity(32);
        for b in self.0 {
            s.push_str(&format!("{b:02x}"));
        }
        s
    }
}

impl std::fmt::Debug for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl std::fmt::Display for EventId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Declares a message with the fields an event shares with the others of
/// its group (source, resource, scope and their schema URLs) under the tags
/// given in that order, then the fields given: an [`Envelope`] holds them
/// itself (format 1), a [`Group`] once for its events (format 2).
macro_rules! shared_fields_message {
    (
        $(#[$attr:meta])*
        pub struct $name:ident [$source:tt, $resource:tt, $resource_url:tt, $scope:tt, $scope_url:tt]
        { $($fields:tt)* }
    ) => {
        $(#[$attr])*
        #[derive(Clone, PartialEq, ::prost::Message)]
        pub struct $name {
            /// Name of the source that produced it (the `[sources.<name>]` key).
            #[prost(string, tag = $source)]
            pub source: String,
            #[prost(message, optional, tag = $resource)]
            pub resource: Option<opentelemetry_proto::tonic::resource::v1::Resource>,
            #[prost(string, tag = $resource_url)]
            pub resource_schema_url: String,
            #[prost(message, optional, tag = $scope)]
            pub scope: Option<opentelemetry_proto::tonic::common::v1::InstrumentationScope>,
            #[prost(string, tag = $scope_url)]
            pub scope_schema_url: String,
            $($fields)*
        }
    };
}
use shared_fields_message;

shared_fields_message! {
    /// One event as stored in the log.
    pub struct Envelope ["2", "4", "5", "6", "7"] {
        /// The [`EventId`], 16 bytes.
        #[prost(bytes = "vec", tag = "1")]
        pub id: Vec<u8>,
        /// When holdfast received or read it, unix nanoseconds.
        #[prost(fixed64, tag = "3")]
        pub observed_time_unix_nano: u64,
        #[prost(oneof = "Record", tags = "8, 9, 10")]
        pub record: Option<Record>,
        /// Where in a file the record came from (file sources only).
        #[prost(message, optional, tag = "11")]
        pub origin: Option<FileOrigin>,
        /// Format 2 only: the event's group in its batch's [`Context`].
        #[prost(uint32, tag = "12")]
        pub group: u32,
        /// Format 2 only: observed time minus its group's, when not stored
        /// whole in field 3.
        #[prost(uint64, tag = "13")]
        pub observed_delta: u64,
    }
}

/// The record itself, one of the three OpenTelemetry signals.
#[derive(Clone, PartialEq, prost::Oneof)]
pub enum Record {
    #[prost(message, tag = "8")]
    Log(LogRecord),
    #[prost(message, tag = "9")]
    Span(Span),
    /// A metric carrying exactly one data point.
    #[prost(message, tag = "10")]
    Metric(Metric),
}

/// Declares a message with a file origin's numbers (fingerprint,
/// generation, offsets) after the fields given, so that every message that
/// decodes them (the full [`FileOrigin`]; the file source's recovery, which
/// skips the path) has them under the same tags.
macro_rules! file_origin_message {
    ($(#[$attr:meta])* pub struct $name:ident { $($fields:tt)* }) => {
        $(#[$attr])*
        #[derive(Clone, PartialEq, ::prost::Message)]
        pub struct $name {
            $($fields)*
            #[prost(fixed64, tag = "2")]
            pub fingerprint: u64,
            #[prost(uint32, tag = "3")]
            pub generation: u32,
            /// Byte offset of the record's first byte.
            #[prost(uint64, tag = "4")]
            pub offset: u64,
            /// Byte offset just past the record (where the next one
            /// starts): a line's end cannot be derived from its body
            /// (truncation, CRLF, lossy UTF-8, multiline), and the file
            /// source needs it to resume exactly.
            #[prost(uint64, tag = "5")]
            pub end_offset: u64,
        }
    };
}
pub(crate) use file_origin_message;

file_origin_message! {
    /// The position of a file record, kept for quarantine reports and debugging.
    pub struct FileOrigin {
        #[prost(string, tag = "1")]
        pub path: String,
    }
}

/// The signal an envelope carries, for metrics labels and routing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Signal {
    Logs,
    Traces,
    Metrics,
}

impl Signal {
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::Logs => "logs",
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }
}

/// Why bytes from the log are not an envelope.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    #[error("event is not a valid envelope: {0}")]
    Decode(#[from] prost::DecodeError),
    #[error("envelope has no record")]
    NoRecord,
    #[error("envelope id is {0} bytes, expected 16")]
    BadId(usize),
    #[error("event names group {0} but its batch's context has {1}")]
    NoGroup(u32, usize),
}

impl Envelope {
    /// Decodes and checks an event read from the log.
    pub fn decode_event(bytes: &[u8]) -> Result<Envelope, EnvelopeError> {
        let env = Envelope::decode(bytes)?;
        if env.id.len() != 16 {
            return Err(EnvelopeError::BadId(env.id.len()));
        }
        if env.record.is_none() {
            return Err(EnvelopeError::NoRecord);
        }
        Ok(env)
    }

    pub fn event_id(&self) -> Option<EventId> {
        <[u8; 16]>::try_from(self.id.as_slice()).ok().map(EventId)
    }

    pub fn signal(&self) -> Option<Signal> {
        Some(match self.record.as_ref()? {
            Record::Log(_) => Signal::Logs,
            Record::Span(_) => Signal::Traces,
            Record::Metric(_) => Signal::Metrics,
        })
    }

    /// The envelope as one JSON object, with the record, resource and scope
    /// in the OTLP/JSON mapping (hex trace and span ids, camelCase names):
    /// the line the `file` sink writes and `holdfast dump` prints.
    pub fn to_json(&self, seq: u64) -> serde_json::Value {
        let record = match &self.record {
            Some(Record::Log(r)) => serde_json::to_value(r),
            Some(Record::Span(r)) => serde_json::to_value(r),
            Some(Record::Metric(r)) => serde_json::to_value(r),
            None => Ok(serde_json::Value::Null),
        }
        .unwrap_or(serde_json::Value::Null);
        let mut o = serde_json::Map::new();
        o.insert(
            "id".into(),
            self.event_id()
                .map(|i| i.to_hex())
                .unwrap_or_default()
                .into(),
        );
        o.insert("seq".into(), seq.into());
        o.insert("source".into(), self.source.clone().into());
        o.insert(
            "signal".into(),
            self.signal()
                .map(Signal::as_str)
                .unwrap_or("unknown")
                .into(),
        );
        o.insert(
            "observedTimeUnixNano".into(),
            self.observed_time_unix_nano.to_string().into(),
        );
        if let Some(r) = &self.resource {
            o.insert(
                "resource".into(),
                serde_json::to_value(r).unwrap_or_default(),
            );
        }
        if let Some(s) = &self.scope {
            o.insert("scope".into(), serde_json::to_value(s).unwrap_or_default());
        }
        o.insert("record".into(), record);
        if let Some(f) = &self.origin {
            o.insert(
                "origin".into(),
                serde_json::json!({
                    "path": f.path,
                    "fingerprint": format!("{:016x}", f.fingerprint),
                    "generation": f.generation,
                    "offset": f.offset,
                    "endOffset": f.end_offset,
                }),
            );
        }
        serde_json::Value::Object(o)
    }
}

/// An event from the log that is not a valid envelope, as a JSON line, so
/// that `dump` and the `file` sink still show it rather than drop it silently.
pub fn raw_json(seq: u64, bytes: &[u8], error: &EnvelopeError) -> serde_json::Value {
    serde_json::json!({
        "seq": seq,
        "error": error.to_string(),
        "raw": String::from_utf8_lossy(bytes),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;

    #[test]
    fn file_ids_are_stable_and_distinct() {
        let a = EventId::for_file_line(7, 0, 100);
        assert_eq!(a, EventId::for_file_line(7, 0, 100));
        assert_ne!(a, EventId::for_file_line(7, 1, 100));
        assert_ne!(a, EventId::for_file_line(7, 0, 101));
        assert_ne!(a, EventId::for_file_line(8, 0, 100));
        // Pinned: a change here would give every replayed line a new id.
        assert_eq!(a.to_hex(), "08405447346d5c45ce20dbd4e151c2ae");
        assert_eq!(a.to_hex(), EventId::for_file_line(7, 0, 100).to_string());
    }

    #[test]
    fn envelope_round_trips_and_renders_json() {
        let env = Envelope {
            id: EventId::for_file_line(1, 0, 0).0.to_vec(),
            source: "syslog".into(),
            observed_time_unix_nano: 5,
            resource: Some(Resource {
                attributes: vec![KeyValue {
                    key: "host.name".into(),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("dev1".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            record: Some(Record::Log(LogRecord {
                body: Some(AnyValue {
                    value: Some(any_value::Value::StringValue("hello".into())),
                }),
                ..Default::default()
            })),
            ..Default::default()
        };
        let bytes = env.encode_to_vec();
        let back = Envelope::decode_event(&bytes).unwrap();
        assert_eq!(back, env);
        let j = back.to_json(9);
        assert_eq!(j["seq"], 9);
        assert_eq!(j["signal"], "logs");
        assert_eq!(j["record"]["body"]["stringValue"], "hello");
        assert!(Envelope::decode_event(b"\xff\xff").is_err());
    }
}
