//! MQTT messages → OTLP log records, many messages into one request (one
//! append): the payload read as the source's `format`, and what the
//! message says about itself as `mqtt.*` attributes.
//!
//! | message | record |
//! |---|---|
//! | `json` payload, an object | its members as attributes (nested objects and arrays as `kvlist` / `array` values, as the `json` parse step reads them); no body |
//! | `json` payload, anything else | the payload as body (a string, or bytes when not UTF-8), `mqtt.payload_error` says why; counted |
//! | `text` payload | the body (bytes when not UTF-8, counted) |
//! | `otlp_proto`, `otlp_json` payload | its log records with their resources and scopes; one that does not decode: kept as bytes body with `mqtt.payload_error`, counted |
//! | topic | `mqtt.topic` |
//! | DUP flag set by the broker (a redelivery) | `mqtt.dup = true` |
//! | MQTT 5 user property `name` | `mqtt.user_property.<name>` (a string; an array of strings when the name repeats) |
//! | MQTT 5 content type | `mqtt.content_type` |
//!
//! Nothing a device sends is dropped for its content: a payload that does
//! not read as its format is kept whole and marked. Only payloads over
//! `max_payload_size` are dropped (`session.rs`), since they can never be
//! stored.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};

use crate::event::{EventId, Signal};
use crate::process::parse::{json::MAX_DEPTH, Format as ParseFormat, Parser};
use crate::process::{record, Event, Flow};
use crate::sources::otlp_http::cost::decoding_cost;
use crate::sources::otlp_http::decode::{decode, Decoded};
use crate::sources::otlp_http::response::Encoding;

/// The instrumentation scope of records made from `json` and `text`
/// payloads.
pub const SCOPE_NAME: &str = "holdfast.sources.mqtt";
pub const ATTR_TOPIC: &str = "mqtt.topic";
pub const ATTR_DUP: &str = "mqtt.dup";
pub const ATTR_CONTENT_TYPE: &str = "mqtt.content_type";
pub const ATTR_USER_PROPERTY: &str = "mqtt.user_property.";
/// Why a payload was kept whole instead of read as its format.
pub const ATTR_PAYLOAD_ERROR: &str = "mqtt.payload_error";

/// How payloads are read (`format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Json,
    Text,
    OtlpProto,
    OtlpJson,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        Some(match s {
            "json" => Format::Json,
            "text" => Format::Text,
            "otlp_proto" => Format::OtlpProto,
            "otlp_json" => Format::OtlpJson,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Format::Json => "json",
            Format::Text => "text",
            Format::OtlpProto => "otlp_proto",
            Format::OtlpJson => "otlp_json",
        }
    }
}

/// Why a payload was kept whole (the `reason` of
/// `holdfast_mqtt_source_invalid_payloads_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Invalid {
    /// `json`: not one JSON object.
    Json,
    /// `text` or `json`: not UTF-8 (kept as bytes).
    Utf8,
    /// `otlp_*`: not an OTLP logs request, or one whose decoding would
    /// take more memory than the payload's budget.
    Otlp,
}

impl Invalid {
    pub const ALL: [Invalid; 3] = [Invalid::Json, Invalid::Utf8, Invalid::Otlp];

    pub fn reason(self) -> &'static str {
        match self {
            Invalid::Json => "invalid_json",
            Invalid::Utf8 => "invalid_utf8",
            Invalid::Otlp => "invalid_otlp",
        }
    }
}

/// One message as the source takes it from the client.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    /// The topic's bytes as received (a broker checks they are UTF-8;
    /// anything else is read lossily).
    pub topic: &'a [u8],
    pub payload: &'a [u8],
    pub dup: bool,
    pub user_properties: &'a [(String, String)],
    pub content_type: Option<&'a str>,
}

/// What one message became.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Added {
    /// Log records added (an OTLP payload may hold none, or many).
    pub records: usize,
    /// Kept whole: why, and a line for the log.
    pub invalid: Option<(Invalid, String)>,
}

/// A request being gathered from messages: records of `json` and `text`
/// payloads in the first resource's one scope; an OTLP payload's
/// resources appended as they come.
pub struct Gathered {
    format: Format,
    /// What an OTLP payload's decoding may allocate (bytes).
    decode_room: u64,
    req: ExportLogsServiceRequest,
    parser: Parser,
    /// Whether `req`'s first resource is the source's own (records of
    /// `json` and `text` payloads).
    own_scope: bool,
}

impl Gathered {
    pub fn new(format: Format, max_payload_size: usize) -> Gathered {
        Gathered {
            format,
            // Decoding a protobuf request can allocate far more than its
            // bytes (a 2-byte record is a ~200-byte struct): bounded as the
            // OTLP receivers bound a body, at a multiple of the largest
            // payload.
            decode_room: (max_payload_size as u64).saturating_mul(16).max(1 << 20),
            req: ExportLogsServiceRequest::default(),
            parser: Parser {
                format: ParseFormat::Json {
                    max_depth: MAX_DEPTH,
                },
                field: None,
                body_key: None,
            },
            own_scope: false,
        }
    }

    /// The request so far; this one starts over empty.
    pub fn take(&mut self) -> ExportLogsServiceRequest {
        self.own_scope = false;
        std::mem::take(&mut self.req)
    }

    /// Adds the records of `m`, observed at `observed_ns`.
    pub fn push(&mut self, m: &Message<'_>, observed_ns: u64) -> Added {
        let mut attrs = message_attributes(m);
        let (records, invalid) = match self.format {
            Format::Text => {
                let (body, invalid) = match std::str::from_utf8(m.payload) {
                    Ok(s) => (string(s.to_string()), None),
                    Err(_) => (
                        bytes(m.payload),
                        Some((
                            Invalid::Utf8,
                            "the payload is not UTF-8: kept as bytes".into(),
                        )),
                    ),
                };
                self.plain(record(Some(body), attrs, observed_ns));
                (1, invalid)
            }
            Format::Json => {
                let (body, invalid) = self.json(m.payload, &mut attrs);
                self.plain(record(body, attrs, observed_ns));
                (1, invalid)
            }
            Format::OtlpProto | Format::OtlpJson => self.otlp(m.payload, attrs, observed_ns),
        };
        Added { records, invalid }
    }

    /// A JSON object's members into `attrs`; the body only when it is not
    /// one.
    fn json(
        &self,
        payload: &[u8],
        attrs: &mut Vec<KeyValue>,
    ) -> (Option<AnyValue>, Option<(Invalid, String)>) {
        let Ok(text) = std::str::from_utf8(payload) else {
            attrs.push(kv(
                ATTR_PAYLOAD_ERROR,
                string("not UTF-8, so not JSON".into()),
            ));
            return (
                Some(bytes(payload)),
                Some((
                    Invalid::Utf8,
                    "the payload is not UTF-8, so not JSON".into(),
                )),
            );
        };
        // The `json` parse step's reader, so a payload becomes the same
        // attributes a JSON line of the `file` source does.
        let mut ev = Event::new(text, EventId([0; 16]));
        match self.parser.apply(&mut ev) {
            Flow::Next => {
                attrs.extend(ev.attrs.iter().map(|(k, v)| kv(k, record::to_any(v))));
                (None, None)
            }
            _ => {
                let why = json_error(text);
                attrs.push(kv(ATTR_PAYLOAD_ERROR, string(why.clone())));
                (Some(string(text.to_string())), Some((Invalid::Json, why)))
            }
        }
    }

    /// An OTLP logs request's records, each with the message's attributes.
    fn otlp(
        &mut self,
        payload: &[u8],
        attrs: Vec<KeyValue>,
        observed_ns: u64,
    ) -> (usize, Option<(Invalid, String)>) {
        let encoding = match self.format {
            Format::OtlpJson => Encoding::Json,
            _ => Encoding::Protobuf,
        };
        let decoded = decoding_cost(Signal::Logs, encoding, payload, self.decode_room)
            .and_then(|_| decode(Signal::Logs, encoding, payload, &Default::default()));
        let mut req = match decoded {
            Ok(Decoded::Logs(req)) => req,
            Ok(_) => unreachable!("decode returns the signal asked for"),
            Err(e) => {
                let why = format!("not an OTLP logs request: {e}");
                let mut attrs = attrs;
                attrs.push(kv(ATTR_PAYLOAD_ERROR, string(why.clone())));
                self.plain(record(Some(bytes(payload)), attrs, observed_ns));
                return (1, Some((Invalid::Otlp, why)));
            }
        };
        let mut n = 0;
        for rl in &mut req.resource_logs {
            for sl in &mut rl.scope_logs {
                for r in &mut sl.log_records {
                    r.attributes.extend(attrs.iter().cloned());
                    if r.observed_time_unix_nano == 0 {
                        r.observed_time_unix_nano = observed_ns;
                    }
                    n += 1;
                }
            }
        }
        self.req.resource_logs.append(&mut req.resource_logs);
        (n, None)
    }

    /// Adds a record of a `json` or `text` payload to the source's own
    /// scope, the request's first resource.
    fn plain(&mut self, r: LogRecord) {
        if !self.own_scope {
            self.own_scope = true;
            self.req.resource_logs.insert(
                0,
                ResourceLogs {
                    scope_logs: vec![ScopeLogs {
                        scope: Some(InstrumentationScope {
                            name: SCOPE_NAME.to_string(),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            );
        }
        self.req.resource_logs[0].scope_logs[0].log_records.push(r);
    }
}

/// What the message says about itself.
fn message_attributes(m: &Message<'_>) -> Vec<KeyValue> {
    let mut attrs = Vec::with_capacity(2 + m.user_properties.len());
    attrs.push(kv(
        ATTR_TOPIC,
        string(String::from_utf8_lossy(m.topic).into_owned()),
    ));
    if m.dup {
        attrs.push(kv(
            ATTR_DUP,
            AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            },
        ));
    }
    if let Some(ct) = m.content_type {
        attrs.push(kv(ATTR_CONTENT_TYPE, string(ct.to_string())));
    }
    let first = attrs.len();
    for (name, value) in m.user_properties {
        let key = format!("{ATTR_USER_PROPERTY}{name}");
        // MQTT allows a name more than once, in order: an array keeps them all.
        match attrs[first..].iter_mut().find(|a| a.key == key) {
            None => attrs.push(kv(&key, string(value.clone()))),
            Some(a) => {
                let v = a.value.get_or_insert_with(AnyValue::default);
                match &mut v.value {
                    Some(any_value::Value::ArrayValue(arr)) => {
                        arr.values.push(string(value.clone()))
                    }
                    other => {
                        let before = other.take().map(|x| AnyValue { value: Some(x) });
                        *other = Some(any_value::Value::ArrayValue(ArrayValue {
                            values: before.into_iter().chain([string(value.clone())]).collect(),
                        }));
                    }
                }
            }
        }
    }
    attrs
}

/// Why `text` is not one JSON object, in a few words.
fn json_error(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Err(e) => format!("not JSON: {e}"),
        Ok(serde_json::Value::Object(_)) => {
            format!("a JSON object nested deeper than {MAX_DEPTH} levels")
        }
        Ok(_) => "JSON, but not an object".into(),
    }
}

fn record(body: Option<AnyValue>, attributes: Vec<KeyValue>, observed_ns: u64) -> LogRecord {
    LogRecord {
        observed_time_unix_nano: observed_ns,
        body,
        attributes,
        ..Default::default()
    }
}

fn kv(key: &str, value: AnyValue) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(value),
        ..Default::default()
    }
}

fn string(s: String) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(s)),
    }
}

fn bytes(b: &[u8]) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::BytesValue(b.to_vec())),
    }
}

#[cfg(test)]
mod tests;
