//! OTLP export requests rebuilt from stored events: what the `otlp_http`,
//! `otlp_grpc` and `nats` sinks send.
//!
//! Requests are rebuilt with the grouping OTLP expects: events sharing a
//! resource (and its schema URL) go under one `Resource*`, and within it
//! events sharing a scope under one `Scope*`. The protobuf body is written
//! field by field from the events' own records and their batch's shared
//! resource, scope and record attributes, without copying them into request
//! structs. Events of one batch context share their resource and scope by
//! reference, so grouping compares addresses before values.

use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::{encode_key, encode_varint, encoded_len_varint, key_len, WireType};
use prost::Message;

use super::delivery::item::Item;
use crate::event::{Record, Signal, Stored};

/// 0, 1, 2 for logs, traces, metrics: which `Export*ServiceRequest`.
pub(crate) fn signal_index(ev: &Stored) -> usize {
    match ev.signal() {
        Some(Signal::Traces) => 1,
        Some(Signal::Metrics) => 2,
        _ => 0,
    }
}

/// Events grouped by resource, then scope, in order of first appearance.
struct Group<'a> {
    resource: Option<&'a Resource>,
    schema: &'a str,
    scopes: Vec<ScopeGroup<'a>>,
}

struct ScopeGroup<'a> {
    scope: Option<&'a InstrumentationScope>,
    schema: &'a str,
    records: Vec<Rec<'a>>,
}

/// A record and the attributes it shares with its batch's group (placed
/// before its own; empty for format-1 events).
#[derive(Clone, Copy)]
struct Rec<'a> {
    record: &'a Record,
    shared: &'a [KeyValue],
}

/// The same resource or scope: the same address (events of one batch
/// context), else equal values.
fn same<T: PartialEq>(a: Option<&T>, b: Option<&T>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => std::ptr::eq(a, b) || a == b,
        (None, None) => true,
        _ => false,
    }
}

fn group(items: &[Item]) -> Vec<Group<'_>> {
    let mut groups: Vec<Group<'_>> = Vec::new();
    for it in items {
        let ev = &it.ev;
        let Some(record) = ev.record() else { continue };
        let (resource, schema) = (ev.resource(), ev.resource_schema_url());
        let same_resource = |g: &Group<'_>| same(g.resource, resource) && g.schema == schema;
        let gi = find_or_push(&mut groups, same_resource, || Group {
            resource,
            schema,
            scopes: Vec::new(),
        });
        let scopes = &mut groups[gi].scopes;
        let (scope, schema) = (ev.scope(), ev.scope_schema_url());
        let same_scope = |s: &ScopeGroup<'_>| same(s.scope, scope) && s.schema == schema;
        let si = find_or_push(scopes, same_scope, || ScopeGroup {
            scope,
            schema,
            records: Vec::new(),
        });
        scopes[si].records.push(Rec {
            record,
            shared: ev.shared_attributes(),
        });
    }
    groups
}

/// The index of the first of `v` that is `same`, pushing `new()` when none
/// is. The last is tried first: consecutive events nearly always share
/// their resource and scope.
fn find_or_push<T>(v: &mut Vec<T>, same: impl Fn(&T) -> bool, new: impl FnOnce() -> T) -> usize {
    match v.last().filter(|x| same(x)) {
        Some(_) => v.len() - 1,
        None => match v.iter().position(same) {
            Some(i) => i,
            None => {
                v.push(new());
                v.len() - 1
            }
        },
    }
}

fn record_len(r: Rec<'_>) -> usize {
    match r.record {
        Record::Log(l) if !r.shared.is_empty() => log_len(l, r.shared),
        Record::Log(l) => l.encoded_len(),
        Record::Span(s) => s.encoded_len(),
        Record::Metric(m) => m.encoded_len(),
    }
}

fn encode_record(r: Rec<'_>, buf: &mut Vec<u8>) {
    // Encoding into a Vec cannot run out of room.
    let _ = match r.record {
        Record::Log(l) if !r.shared.is_empty() => {
            encode_log(l, r.shared, buf);
            Ok(())
        }
        Record::Log(l) => l.encode(buf),
        Record::Span(s) => s.encode(buf),
        Record::Metric(m) => m.encode(buf),
    };
}

/// Walks a log record's fields in tag order, leaving defaults out as prost
/// does, with `shared` placed before the record's own attributes: `$one!`
/// gets each present scalar or message field (`encoding module, tag, value`),
/// `$many!` each run of attributes (`tag, slice`). [`log_len`] and
/// [`encode_log`] are both this walk, so the size and the bytes cannot
/// disagree.
macro_rules! each_log_field {
    ($l:expr, $shared:expr, $one:ident, $many:ident) => {{
        let l = $l;
        unless_default!($one, fixed64, 1, &l.time_unix_nano);
        unless_default!($one, int32, 2, &l.severity_number);
        unless_default!($one, string, 3, &l.severity_text);
        if let Some(b) = &l.body {
            $one!(message, 5, b);
        }
        $many!(6, $shared);
        $many!(6, &l.attributes);
        unless_default!($one, uint32, 7, &l.dropped_attributes_count);
        unless_default!($one, fixed32, 8, &l.flags);
        unless_default!($one, bytes, 9, &l.trace_id);
        unless_default!($one, bytes, 10, &l.span_id);
        unless_default!($one, fixed64, 11, &l.observed_time_unix_nano);
        unless_default!($one, string, 12, &l.event_name);
    }};
}

/// `$one!` of a scalar field of [`each_log_field!`], unless it holds its
/// default (zero, empty), which prost leaves out.
macro_rules! unless_default {
    ($one:ident, $enc:ident, $tag:expr, $v:expr) => {
        if !is_default($v) {
            $one!($enc, $tag, $v);
        }
    };
}

fn is_default<T: Default + PartialEq>(v: &T) -> bool {
    *v == T::default()
}

/// The size of `l` encoded with `shared` before its own attributes: what
/// [`encode_log`] writes.
fn log_len(l: &LogRecord, shared: &[KeyValue]) -> usize {
    use prost::encoding::{bytes, fixed32, fixed64, int32, message, string, uint32};
    let mut n = 0;
    macro_rules! one {
        ($enc:ident, $tag:expr, $v:expr) => {
            n += $enc::encoded_len($tag, $v)
        };
    }
    macro_rules! many {
        ($tag:expr, $kvs:expr) => {
            n += message::encoded_len_repeated($tag, $kvs)
        };
    }
    each_log_field!(l, shared, one, many);
    n
}

/// `l` as protobuf with `shared` placed before its own attributes: the
/// bytes prost writes for the record with the attributes joined (fields in
/// tag order, defaults left out), without building that record.
fn encode_log(l: &LogRecord, shared: &[KeyValue], buf: &mut Vec<u8>) {
    use prost::encoding::{bytes, fixed32, fixed64, int32, message, string, uint32};
    macro_rules! one {
        ($enc:ident, $tag:expr, $v:expr) => {
            $enc::encode($tag, $v, buf)
        };
    }
    macro_rules! many {
        ($tag:expr, $kvs:expr) => {
            for kv in $kvs {
                message::encode($tag, kv, buf);
            }
        };
    }
    each_log_field!(l, shared, one, many);
}

/// A length-delimited field's full size, given its content's.
fn field_len(tag: u32, len: usize) -> usize {
    key_len(tag) + encoded_len_varint(len as u64) + len
}

fn string_field_len(tag: u32, s: &str) -> usize {
    if s.is_empty() {
        0
    } else {
        field_len(tag, s.len())
    }
}

fn put_header(tag: u32, len: usize, buf: &mut Vec<u8>) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

fn put_string(tag: u32, s: &str, buf: &mut Vec<u8>) {
    if !s.is_empty() {
        put_header(tag, s.len(), buf);
        buf.extend_from_slice(s.as_bytes());
    }
}

fn put_message<M: Message>(tag: u32, m: &M, buf: &mut Vec<u8>) {
    put_header(tag, m.encoded_len(), buf);
    let _ = m.encode(buf);
}

/// `Export{Logs,Trace,Metrics}ServiceRequest` as protobuf. The three share
/// their shape: request.1 = Resource*; Resource*.1 = resource, .2 = Scope*,
/// .3 = schema_url; Scope*.1 = scope, .2 = records, .3 = schema_url.
fn encode_protobuf(groups: &[Group<'_>]) -> Vec<u8> {
    // Sizes first (each nested message is prefixed by its length), kept so
    // that records are measured once.
    let mut record_lens: Vec<usize> = Vec::new();
    let mut scope_lens: Vec<usize> = Vec::new();
    let mut group_lens: Vec<usize> = Vec::new();
    for g in groups {
        let mut glen = g.resource.map_or(0, |r| field_len(1, r.encoded_len()));
        glen += string_field_len(3, g.schema);
        for s in &g.scopes {
            let mut slen = s.scope.map_or(0, |sc| field_len(1, sc.encoded_len()));
            slen += string_field_len(3, s.schema);
            for &r in &s.records {
                let rl = record_len(r);
                record_lens.push(rl);
                slen += field_len(2, rl);
            }
            scope_lens.push(slen);
            glen += field_len(2, slen);
        }
        group_lens.push(glen);
    }
    let total: usize = group_lens.iter().map(|&l| field_len(1, l)).sum();
    let mut buf = crate::pool::BODIES.take_with(total);
    let (mut ri, mut si) = (0, 0);
    for (g, &glen) in groups.iter().zip(&group_lens) {
        put_header(1, glen, &mut buf);
        if let Some(r) = g.resource {
            put_message(1, r, &mut buf);
        }
        for s in &g.scopes {
            put_header(2, scope_lens[si], &mut buf);
            si += 1;
            if let Some(sc) = s.scope {
                put_message(1, sc, &mut buf);
            }
            for &r in &s.records {
                put_header(2, record_lens[ri], &mut buf);
                ri += 1;
                encode_record(r, &mut buf);
            }
            put_string(3, s.schema, &mut buf);
        }
        put_string(3, g.schema, &mut buf);
    }
    debug_assert_eq!(buf.len(), total);
    buf
}

/// Events of one signal as one OTLP `Export*ServiceRequest`, protobuf
/// (an `otlp_http` request body, an `otlp_grpc` message).
pub(crate) fn export_requests(items: &[Item]) -> Vec<u8> {
    encode_protobuf(&group(items))
}

/// The same request in the OTLP/JSON mapping.
pub(crate) fn export_requests_json(items: &[Item]) -> Vec<u8> {
    encode_json(&group(items), signal_index(&items[0].ev))
}

/// One event as its own OTLP `Export*ServiceRequest`, protobuf (the `nats`
/// sink's messages).
pub(crate) fn export_request(item: &Item) -> Vec<u8> {
    encode_protobuf(&group(std::slice::from_ref(item)))
}

/// The same request in the OTLP/JSON mapping.
fn encode_json(groups: &[Group<'_>], signal: usize) -> Vec<u8> {
    let (resources, scopes, records) = match signal {
        1 => ("resourceSpans", "scopeSpans", "spans"),
        2 => ("resourceMetrics", "scopeMetrics", "metrics"),
        _ => ("resourceLogs", "scopeLogs", "logRecords"),
    };
    let mut out = Vec::new();
    let w = |out: &mut Vec<u8>, s: &str| out.extend_from_slice(s.as_bytes());
    w(&mut out, &format!("{{\"{resources}\":["));
    for (gi, g) in groups.iter().enumerate() {
        open_json_group(&mut out, gi, "resource", g.resource, g.schema);
        w(&mut out, &format!("\"{scopes}\":["));
        for (si, s) in g.scopes.iter().enumerate() {
            open_json_group(&mut out, si, "scope", s.scope, s.schema);
            w(&mut out, &format!("\"{records}\":["));
            for (ri, r) in s.records.iter().enumerate() {
                if ri > 0 {
                    out.push(b',');
                }
                let _ = match r.record {
                    // The JSON mapping is serde's: the shared attributes are
                    // joined into a copy of the record (protobuf, the
                    // default encoding, writes them without one).
                    Record::Log(l) if !r.shared.is_empty() => {
                        let mut joined = l.clone();
                        joined.attributes = r.shared.iter().chain(&l.attributes).cloned().collect();
                        serde_json::to_writer(&mut out, &joined)
                    }
                    Record::Log(l) => serde_json::to_writer(&mut out, l),
                    Record::Span(sp) => serde_json::to_writer(&mut out, sp),
                    Record::Metric(m) => serde_json::to_writer(&mut out, m),
                };
            }
            w(&mut out, "]}");
        }
        w(&mut out, "]}");
    }
    w(&mut out, "]}");
    out
}

/// Opens the `i`th object of a resource or scope array and writes the
/// fields it has besides its children: `what` (the resource or scope) and
/// `schemaUrl`, each left out when absent, as the JSON mapping does.
fn open_json_group<T: serde::Serialize>(
    out: &mut Vec<u8>,
    i: usize,
    what: &str,
    value: Option<&T>,
    schema: &str,
) {
    if i > 0 {
        out.push(b',');
    }
    out.push(b'{');
    if let Some(v) = value {
        out.extend_from_slice(format!("\"{what}\":").as_bytes());
        let _ = serde_json::to_writer(&mut *out, v);
        out.push(b',');
    }
    if !schema.is_empty() {
        out.extend_from_slice(b"\"schemaUrl\":");
        let _ = serde_json::to_writer(&mut *out, schema);
        out.push(b',');
    }
}

#[cfg(test)]
mod tests;
