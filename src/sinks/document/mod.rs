//! One event as a flat JSON document, for document stores
//! (Elasticsearch/OpenSearch `_bulk`, OpenObserve `_json`).
//!
//! The layout (documented for operators in `docs/sinks.md`):
//!
//! * always: `@timestamp` (the event's own time, RFC 3339 UTC with
//!   milliseconds), `observed_timestamp`, `event_id`, `source`, `signal`;
//!   `resource` (attributes as an object), `scope` (`name`, `version`,
//!   `attributes`) when present; `log.file.path`/`log.file.offset` for file
//!   events (a lean document, the default, leaves out what it would repeat:
//!   `layout.rs`);
//! * logs: `message` for a string body, `body` for any other, `severity_text`,
//!   `severity_number`, `attributes`, `trace_id`, `span_id`, `event_name`;
//! * spans: `trace_id`, `span_id`, `parent_span_id`, `name`, `kind`,
//!   `start_timestamp`, `end_timestamp`, `duration_ms`, `status`,
//!   `attributes`, `events`, `links`;
//! * metrics: `metric` (`name`, `unit`, `description`, `type`),
//!   `attributes` (the point's), `start_timestamp`, and the point's values
//!   (`value`; or `count`, `sum`, `min`, `max`, `bucket_counts`,
//!   `explicit_bounds`; or `quantiles`).
//!
//! Attribute values become plain JSON: strings, numbers, booleans, arrays,
//! objects for key-value lists, base64 for bytes. Written by hand straight
//! into the request body: this is the hot path of the document sinks.

use std::io::Write;

use base64::Engine;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, metric, number_data_point, Metric,
};
use opentelemetry_proto::tonic::trace::v1::{span, status, Span};

use super::delivery::keys::push_hex_bytes;
use super::template::event_time;
use crate::event::{Record, Stored};

mod json_string;
mod layout;
mod shared;

pub(crate) use json_string::string;

pub use layout::Layout;
pub(crate) use layout::{check as check_layout, RawLayout};
pub(crate) use shared::Shared;

/// Appends the document of `ev` (one JSON object, no newline) to `out`.
#[cfg(test)]
pub(crate) fn write(out: &mut Vec<u8>, ev: &Stored) {
    write_with(out, ev, None, false, &mut Shared::default());
}

/// Appends the document of `ev` to `out`, the parts it shares with its
/// group copied from `shared` (rendered there for the group's first
/// event), its own fields read from the event. `id_hex`: the event id in
/// hex when the caller has it already; `id_beside`: the caller sends the
/// event id beside the document (so a lean one leaves it out).
pub(crate) fn write_with(
    out: &mut Vec<u8>,
    ev: &Stored,
    id_hex: Option<&[u8]>,
    id_beside: bool,
    shared: &mut Shared,
) {
    let shape = shared.layout;
    let mut w = Obj::open(out);
    w.key("@timestamp");
    let time = event_time(ev);
    shared.clock.write(w.out, time);
    let observed = ev.observed_time_unix_nano();
    if !shape.lean() || observed != time {
        w.key("observed_timestamp");
        shared.clock.write(w.out, observed);
    }
    if !(shape.lean() && id_beside) {
        match id_hex {
            Some(hex) => {
                w.key("event_id");
                w.out.push(b'"');
                w.out.extend_from_slice(hex);
                w.out.push(b'"');
            }
            None => w.hex("event_id", &ev.id.0),
        }
    }
    let grouped = shared.refresh(ev);
    if grouped {
        w.out.extend_from_slice(&shared.head);
    } else {
        head(&mut w, ev, shape);
    }
    // The top-level path says it; a lean document does not repeat it
    // among the attributes.
    let skip = shape.skipped_attributes(ev);
    if let Some(o) = ev.origin() {
        if grouped && !shared.path.is_empty() {
            w.out.extend_from_slice(&shared.path);
        } else {
            w.str("log.file.path", o.path);
        }
        w.num("log.file.offset", o.offset as i64);
    }
    match ev.record() {
        Some(Record::Log(l)) => {
            let attrs = if grouped {
                SharedAttributes::Rendered(&shared.attributes, shared.attributes_empty)
            } else {
                SharedAttributes::List(ev.shared_attributes())
            };
            log(&mut w, attrs, l, skip)
        }
        Some(Record::Span(s)) => span_fields(&mut w, s),
        Some(Record::Metric(m)) => metric_fields(&mut w, m),
        None => {}
    }
    w.close();
}

/// The fields an event shares with its group: source, signal, resource,
/// scope (not holdfast's own in a lean document).
fn head(w: &mut Obj<'_>, ev: &Stored, shape: Layout) {
    w.str("source", ev.source());
    w.str("signal", ev.signal().map_or("unknown", |s| s.as_str()));
    if let Some(r) = ev.resource() {
        if !r.attributes.is_empty() {
            w.key("resource");
            attributes(w.out, &r.attributes);
        }
    }
    if let Some(s) = ev.scope() {
        if !(shape.lean() && s.name.starts_with(layout::OWN_SCOPE_PREFIX)) {
            scope(w, s);
        }
    }
}

/// A log record's attributes that come from its group.
enum SharedAttributes<'a> {
    /// To be written.
    List(&'a [KeyValue]),
    /// Already written (see [`Shared`]): the bytes, and whether they hold
    /// no attribute.
    Rendered(&'a [u8], bool),
}

fn scope(w: &mut Obj<'_>, s: &InstrumentationScope) {
    if s.name.is_empty() && s.version.is_empty() && s.attributes.is_empty() {
        return;
    }
    w.key("scope");
    let mut o = Obj::open(w.out);
    if !s.name.is_empty() {
        o.str("name", &s.name);
    }
    if !s.version.is_empty() {
        o.str("version", &s.version);
    }
    o.attributes_of(&s.attributes);
    o.close();
}

/// `shared`: the attributes the record shares with its batch's group,
/// which come before its own; `skip`: attributes left out.
fn log(w: &mut Obj<'_>, shared: SharedAttributes<'_>, l: &LogRecord, skip: &[&str]) {
    if !l.severity_text.is_empty() {
        w.str("severity_text", &l.severity_text);
    }
    if l.severity_number != 0 {
        w.num("severity_number", l.severity_number as i64);
    }
    if let Some(body) = &l.body {
        match &body.value {
            Some(any_value::Value::StringValue(s)) => w.str("message", s),
            Some(_) => {
                w.key("body");
                any(w.out, body);
            }
            None => {}
        }
    }
    let kept = |list: &[KeyValue]| list.iter().any(|kv| !skip.contains(&kv.key.as_str()));
    let shared_empty = match shared {
        SharedAttributes::List(a) => !kept(a),
        SharedAttributes::Rendered(_, empty) => empty,
    };
    if !shared_empty || kept(&l.attributes) {
        w.key("attributes");
        let mut o = match shared {
            SharedAttributes::List(a) => {
                let mut o = Obj::open(w.out);
                kvs(&mut o, a, skip);
                o
            }
            SharedAttributes::Rendered(open, empty) => {
                w.out.extend_from_slice(open);
                Obj {
                    out: w.out,
                    first: empty,
                }
            }
        };
        kvs(&mut o, &l.attributes, skip);
        o.close();
    }
    if !l.trace_id.is_empty() {
        w.hex("trace_id", &l.trace_id);
    }
    if !l.span_id.is_empty() {
        w.hex("span_id", &l.span_id);
    }
    if !l.event_name.is_empty() {
        w.str("event_name", &l.event_name);
    }
}

fn span_fields(w: &mut Obj<'_>, s: &Span) {
    w.hex("trace_id", &s.trace_id);
    w.hex("span_id", &s.span_id);
    if !s.parent_span_id.is_empty() {
        w.hex("parent_span_id", &s.parent_span_id);
    }
    w.str("name", &s.name);
    let kind = span::SpanKind::try_from(s.kind)
        .map(|k| k.as_str_name().trim_start_matches("SPAN_KIND_"))
        .unwrap_or("UNSPECIFIED");
    w.str("kind", kind);
    w.key("start_timestamp");
    timestamp(w.out, s.start_time_unix_nano);
    w.key("end_timestamp");
    timestamp(w.out, s.end_time_unix_nano);
    w.key("duration_ms");
    let ms = s.end_time_unix_nano.saturating_sub(s.start_time_unix_nano) as f64 / 1e6;
    float(w.out, ms);
    if !s.trace_state.is_empty() {
        w.str("trace_state", &s.trace_state);
    }
    if let Some(st) = &s.status {
        w.key("status");
        let mut o = Obj::open(w.out);
        let code = status::StatusCode::try_from(st.code)
            .map(|c| c.as_str_name().trim_start_matches("STATUS_CODE_"))
            .unwrap_or("UNSET");
        o.str("code", code);
        if !st.message.is_empty() {
            o.str("message", &st.message);
        }
        o.close();
    }
    w.attributes_of(&s.attributes);
    if !s.events.is_empty() {
        w.key("events");
        array(w.out, &s.events, |out, e| {
            let mut o = Obj::open(out);
            o.key("timestamp");
            timestamp(o.out, e.time_unix_nano);
            o.str("name", &e.name);
            o.attributes_of(&e.attributes);
            o.close();
        });
    }
    if !s.links.is_empty() {
        w.key("links");
        array(w.out, &s.links, |out, l| {
            let mut o = Obj::open(out);
            o.hex("trace_id", &l.trace_id);
            o.hex("span_id", &l.span_id);
            o.attributes_of(&l.attributes);
            o.close();
        });
    }
}

fn metric_fields(w: &mut Obj<'_>, m: &Metric) {
    let kind = match &m.data {
        Some(metric::Data::Gauge(_)) => "gauge",
        Some(metric::Data::Sum(_)) => "sum",
        Some(metric::Data::Histogram(_)) => "histogram",
        Some(metric::Data::ExponentialHistogram(_)) => "exponential_histogram",
        Some(metric::Data::Summary(_)) => "summary",
        None => "unknown",
    };
    w.key("metric");
    let mut o = Obj::open(w.out);
    o.str("name", &m.name);
    if !m.unit.is_empty() {
        o.str("unit", &m.unit);
    }
    if !m.description.is_empty() {
        o.str("description", &m.description);
    }
    o.str("type", kind);
    o.close();
    if let Some(p) = super::delivery::keys::point(m) {
        w.attributes_of(p.attributes);
        if p.start_time_unix_nano != 0 {
            w.key("start_timestamp");
            timestamp(w.out, p.start_time_unix_nano);
        }
    }
    let number = |w: &mut Obj<'_>, v: &Option<number_data_point::Value>| match v {
        Some(number_data_point::Value::AsDouble(d)) => {
            w.key("value");
            float(w.out, *d);
        }
        Some(number_data_point::Value::AsInt(i)) => w.num("value", *i),
        None => {}
    };
    match &m.data {
        Some(metric::Data::Gauge(g)) => {
            if let Some(p) = g.data_points.first() {
                number(w, &p.value);
            }
        }
        Some(metric::Data::Sum(s)) => {
            if let Some(p) = s.data_points.first() {
                number(w, &p.value);
            }
            w.key("monotonic");
            w.out
                .extend_from_slice(if s.is_monotonic { b"true" } else { b"false" });
            w.str("temporality", temporality(s.aggregation_temporality));
        }
        Some(metric::Data::Histogram(h)) => {
            if let Some(p) = h.data_points.first() {
                count_sum_min_max(w, p.count, p.sum, p.min, p.max);
                w.key("bucket_counts");
                list(w.out, p.bucket_counts.iter().map(|c| *c as f64));
                w.key("explicit_bounds");
                list(w.out, p.explicit_bounds.iter().copied());
            }
            w.str("temporality", temporality(h.aggregation_temporality));
        }
        Some(metric::Data::ExponentialHistogram(h)) => {
            if let Some(p) = h.data_points.first() {
                count_sum_min_max(w, p.count, p.sum, p.min, p.max);
                w.num("scale", p.scale as i64);
                w.num("zero_count", p.zero_count as i64);
                let buckets =
                    |w: &mut Obj<'_>,
                     k: &'static str,
                     b: &Option<exponential_histogram_data_point::Buckets>| {
                        if let Some(b) = b {
                            w.key(k);
                            let mut o = Obj::open(w.out);
                            o.num("offset", b.offset as i64);
                            o.key("bucket_counts");
                            list(o.out, b.bucket_counts.iter().map(|c| *c as f64));
                            o.close();
                        }
                    };
                buckets(w, "positive", &p.positive);
                buckets(w, "negative", &p.negative);
            }
            w.str("temporality", temporality(h.aggregation_temporality));
        }
        Some(metric::Data::Summary(s)) => {
            if let Some(p) = s.data_points.first() {
                w.num("count", p.count as i64);
                w.key("sum");
                float(w.out, p.sum);
                w.key("quantiles");
                array(w.out, &p.quantile_values, |out, q| {
                    let mut o = Obj::open(out);
                    o.key("quantile");
                    float(o.out, q.quantile);
                    o.key("value");
                    float(o.out, q.value);
                    o.close();
                });
            }
        }
        None => {}
    }
}

/// The summary fields both histogram kinds have.
fn count_sum_min_max(
    w: &mut Obj<'_>,
    count: u64,
    sum: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
) {
    w.num("count", count as i64);
    opt_float(w, "sum", sum);
    opt_float(w, "min", min);
    opt_float(w, "max", max);
}

fn temporality(t: i32) -> &'static str {
    match t {
        1 => "delta",
        2 => "cumulative",
        _ => "unspecified",
    }
}

fn opt_float(w: &mut Obj<'_>, k: &'static str, v: Option<f64>) {
    if let Some(v) = v {
        w.key(k);
        float(w.out, v);
    }
}

/// A JSON object being written: tracks whether a comma is due.
struct Obj<'a> {
    out: &'a mut Vec<u8>,
    first: bool,
}

impl<'a> Obj<'a> {
    fn open(out: &'a mut Vec<u8>) -> Obj<'a> {
        out.push(b'{');
        Obj { out, first: true }
    }

    /// An object already open in `out`, with fields written: what follows
    /// starts with a comma.
    fn resume(out: &'a mut Vec<u8>) -> Obj<'a> {
        Obj { out, first: false }
    }

    /// A key of ours, which needs no escape (every name in this file): no
    /// scan, one copy.
    fn key(&mut self, k: &'static str) {
        debug_assert!(!k.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\'));
        self.out.reserve(k.len() + 4);
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        self.out.push(b'"');
        self.out.extend_from_slice(k.as_bytes());
        self.out.extend_from_slice(b"\":");
    }

    /// A key from the data (an attribute's), escaped.
    fn any_key(&mut self, k: &str) {
        if !self.first {
            self.out.push(b',');
        }
        self.first = false;
        string(self.out, k);
        self.out.push(b':');
    }

    fn str(&mut self, k: &'static str, v: &str) {
        self.key(k);
        string(self.out, v);
    }

    fn num(&mut self, k: &'static str, v: i64) {
        self.key(k);
        integer(self.out, v);
    }

    fn hex(&mut self, k: &'static str, v: &[u8]) {
        self.key(k);
        self.out.push(b'"');
        push_hex_bytes(self.out, v);
        self.out.push(b'"');
    }

    /// `attributes`, left out when there are none.
    fn attributes_of(&mut self, list: &[KeyValue]) {
        if !list.is_empty() {
            self.key("attributes");
            attributes(self.out, list);
        }
    }

    fn close(self) {
        self.out.push(b'}');
    }
}

/// A JSON array of `items`, each written by `each`.
fn array<T>(
    out: &mut Vec<u8>,
    items: impl IntoIterator<Item = T>,
    mut each: impl FnMut(&mut Vec<u8>, T),
) {
    out.push(b'[');
    for (i, v) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        each(out, v);
    }
    out.push(b']');
}

/// Attributes as one object: `first`, then `then` (one list split in two,
/// a record's shared and own attributes). A repeated key keeps its last
/// value.
fn attributes(out: &mut Vec<u8>, list: &[KeyValue]) {
    let mut o = Obj::open(out);
    kvs(&mut o, list, &[]);
    o.close();
}

/// Attributes as fields of the object `o`.
fn kvs(o: &mut Obj<'_>, list: &[KeyValue], skip: &[&str]) {
    for kv in list.iter().filter(|kv| !skip.contains(&kv.key.as_str())) {
        o.any_key(&kv.key);
        match &kv.value {
            Some(v) => any(o.out, v),
            None => o.out.extend_from_slice(b"null"),
        }
    }
}

fn integer(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
}

fn any(out: &mut Vec<u8>, v: &AnyValue) {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => string(out, s),
        Some(any_value::Value::BoolValue(b)) => {
            out.extend_from_slice(if *b { b"true" } else { b"false" })
        }
        Some(any_value::Value::IntValue(i)) => integer(out, *i),
        Some(any_value::Value::DoubleValue(d)) => float(out, *d),
        Some(any_value::Value::ArrayValue(a)) => array(out, &a.values, any),
        Some(any_value::Value::KvlistValue(kv)) => attributes(out, &kv.values),
        Some(any_value::Value::BytesValue(b)) => {
            string(out, &base64::engine::general_purpose::STANDARD.encode(b))
        }
        Some(any_value::Value::StringValueStrindex(i)) => {
            let _ = write!(out, "{i}");
        }
        None => out.extend_from_slice(b"null"),
    }
}

fn list(out: &mut Vec<u8>, values: impl Iterator<Item = f64>) {
    array(out, values, float);
}

/// A number; JSON has no NaN or infinities, so those become strings.
fn float(out: &mut Vec<u8>, v: f64) {
    if v.is_finite() {
        if v.fract() == 0.0 && v.abs() < 1e15 {
            integer(out, v as i64);
        } else {
            let _ = write!(out, "{v}");
        }
    } else {
        string(out, &v.to_string());
    }
}

/// RFC 3339 UTC with milliseconds, as a JSON string (see [`shared::Clock`]).
pub(crate) fn timestamp(out: &mut Vec<u8>, unix_nanos: u64) {
    shared::Clock::default().write(out, unix_nanos);
}

#[cfg(test)]
mod tests;
