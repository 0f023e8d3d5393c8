/*!
What prost will allocate to decode a protobuf OTLP request, bounded from
above by one pass over the wire format, before anything is decoded.

The pass follows the OTLP message schema (a table per message below: which
field numbers are sub-messages, strings or bytes, repeated scalars) and adds:

* for each element of a repeated message field, twice the size of its
  struct (a `Vec` grown by pushing holds at most twice its length), plus
  four elements per repeated field of each message (the first push
  allocates room for four);
* for each string or bytes field, its length and 8 (the smallest buffer);
* for repeated scalars (histogram buckets and bounds, all 8-byte
  elements), sixteen bytes per element, counted from the fewest wire bytes
  an element takes, plus four elements per field.

Sub-messages that are not repeated live inside their parent's struct and
cost nothing more. Unknown fields are skipped by prost without allocating,
and are skipped here. So the bound holds for any input prost accepts, and
for the part of any input prost reads before it refuses the rest.

The pass stops as soon as the bound passes the caller's limit, so a body
naming millions of records costs a walk over its first part, no more.
*/

use std::mem::size_of;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1 as common;
use opentelemetry_proto::tonic::logs::v1 as logs;
use opentelemetry_proto::tonic::metrics::v1 as metrics;
use opentelemetry_proto::tonic::resource::v1 as resource;
use opentelemetry_proto::tonic::trace::v1 as trace;

use super::{Bound, Over, WalkError};
use crate::event::Signal;

/// What a field of a message is, as far as allocation goes.
#[derive(Clone, Copy)]
enum Field {
    /// A sub-message: repeated (each one a `Vec` element), or inline in its
    /// parent (an optional field or a oneof member).
    Message(&'static Desc, Repeated),
    /// `string` or `bytes`, repeated or not.
    Bytes(Repeated),
    /// Repeated 8-byte scalars; packed, an element takes at least this many
    /// bytes on the wire.
    Scalars { min_wire: u64 },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Repeated {
    Yes,
    No,
}

use Repeated::{No, Yes};

/// One message type: the size of its struct and its fields that allocate.
/// Fields are listed by number; a message has at most 32 of them.
struct Desc {
    size: u64,
    fields: &'static [(u32, Field)],
    /// Whether each element is one record of the request (a log record, a
    /// span, a data point).
    record: bool,
    /// For each field number below `INDEXED`, its place in `fields` plus
    /// one (0: a field that allocates nothing), so the walk finds a field
    /// without searching.
    index: [u8; INDEXED],
}

/// Every field that allocates has a number below this (checked by a test).
const INDEXED: usize = 16;

impl Desc {
    const fn new(size: u64, fields: &'static [(u32, Field)], record: bool) -> Desc {
        let mut index = [0u8; INDEXED];
        let mut i = 0;
        while i < fields.len() {
            let n = fields[i].0 as usize;
            assert!(n < INDEXED && fields.len() < 32);
            index[n] = i as u8 + 1;
            i += 1;
        }
        Desc {
            size,
            fields,
            record,
            index,
        }
    }

    #[inline(always)]
    fn field(&self, number: u32) -> Option<(usize, Field)> {
        let k = *self.index.get(number as usize)? as usize;
        let i = k.checked_sub(1)?;
        self.fields.get(i).map(|&(_, f)| (i, f))
    }
}

const fn sz<T>() -> u64 {
    size_of::<T>() as u64
}

const STRING: u64 = sz::<String>();
const SCALAR: u64 = 8;

static ANY_VALUE: Desc = Desc::new(
    sz::<common::AnyValue>(),
    &[
        (1, Field::Bytes(No)),
        (5, Field::Message(&ARRAY_VALUE, No)),
        (6, Field::Message(&KEY_VALUE_LIST, No)),
        (7, Field::Bytes(No)),
    ],
    false,
);
static ARRAY_VALUE: Desc = Desc::new(
    sz::<common::ArrayValue>(),
    &[(1, Field::Message(&ANY_VALUE, Yes))],
    false,
);
static KEY_VALUE_LIST: Desc = Desc::new(
    sz::<common::KeyValueList>(),
    &[(1, Field::Message(&KEY_VALUE, Yes))],
    false,
);
static KEY_VALUE: Desc = Desc::new(
    sz::<common::KeyValue>(),
    &[(1, Field::Bytes(No)), (2, Field::Message(&ANY_VALUE, No))],
    false,
);
static SCOPE: Desc = Desc::new(
    sz::<common::InstrumentationScope>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
static ENTITY_REF: Desc = Desc::new(
    sz::<common::EntityRef>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(Yes)),
        (4, Field::Bytes(Yes)),
    ],
    false,
);
static RESOURCE: Desc = Desc::new(
    sz::<resource::Resource>(),
    &[
        (1, Field::Message(&KEY_VALUE, Yes)),
        (3, Field::Message(&ENTITY_REF, Yes)),
    ],
    false,
);

static LOGS_REQUEST: Desc = Desc::new(
    sz::<ExportLogsServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_LOGS, Yes))],
    false,
);
static RESOURCE_LOGS: Desc = Desc::new(
    sz::<logs::ResourceLogs>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_LOGS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static SCOPE_LOGS: Desc = Desc::new(
    sz::<logs::ScopeLogs>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&LOG_RECORD, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static LOG_RECORD: Desc = Desc::new(
    sz::<logs::LogRecord>(),
    &[
        (3, Field::Bytes(No)),
        (5, Field::Message(&ANY_VALUE, No)),
        (6, Field::Message(&KEY_VALUE, Yes)),
        (9, Field::Bytes(No)),
        (10, Field::Bytes(No)),
        (12, Field::Bytes(No)),
    ],
    true,
);

static TRACE_REQUEST: Desc = Desc::new(
    sz::<ExportTraceServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_SPANS, Yes))],
    false,
);
static RESOURCE_SPANS: Desc = Desc::new(
    sz::<trace::ResourceSpans>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_SPANS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static SCOPE_SPANS: Desc = Desc::new(
    sz::<trace::ScopeSpans>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&SPAN, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static SPAN: Desc = Desc::new(
    sz::<trace::Span>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(No)),
        (4, Field::Bytes(No)),
        (5, Field::Bytes(No)),
        (9, Field::Message(&KEY_VALUE, Yes)),
        (11, Field::Message(&SPAN_EVENT, Yes)),
        (13, Field::Message(&SPAN_LINK, Yes)),
        (15, Field::Message(&SPAN_STATUS, No)),
    ],
    true,
);
static SPAN_EVENT: Desc = Desc::new(
    sz::<trace::span::Event>(),
    &[(2, Field::Bytes(No)), (3, Field::Message(&KEY_VALUE, Yes))],
    false,
);
static SPAN_LINK: Desc = Desc::new(
    sz::<trace::span::Link>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(No)),
        (4, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
static SPAN_STATUS: Desc = Desc::new(sz::<trace::Status>(), &[(2, Field::Bytes(No))], false);

static METRICS_REQUEST: Desc = Desc::new(
    sz::<ExportMetricsServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_METRICS, Yes))],
    false,
);
static RESOURCE_METRICS: Desc = Desc::new(
    sz::<metrics::ResourceMetrics>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_METRICS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static SCOPE_METRICS: Desc = Desc::new(
    sz::<metrics::ScopeMetrics>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&METRIC, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
static METRIC: Desc = Desc::new(
    sz::<metrics::Metric>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(No)),
        (5, Field::Message(&GAUGE, No)),
        (7, Field::Message(&GAUGE, No)),
        (9, Field::Message(&HISTOGRAM, No)),
        (10, Field::Message(&EXPONENTIAL_HISTOGRAM, No)),
        (11, Field::Message(&SUMMARY, No)),
        (12, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
/// A gauge or a sum: their data points are the same message.
static GAUGE: Desc = Desc::new(0, &[(1, Field::Message(&NUMBER_POINT, Yes))], false);
static HISTOGRAM: Desc = Desc::new(0, &[(1, Field::Message(&HISTOGRAM_POINT, Yes))], false);
static EXPONENTIAL_HISTOGRAM: Desc =
    Desc::new(0, &[(1, Field::Message(&EXPONENTIAL_POINT, Yes))], false);
static SUMMARY: Desc = Desc::new(0, &[(1, Field::Message(&SUMMARY_POINT, Yes))], false);
static NUMBER_POINT: Desc = Desc::new(
    sz::<metrics::NumberDataPoint>(),
    &[
        (5, Field::Message(&EXEMPLAR, Yes)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
static HISTOGRAM_POINT: Desc = Desc::new(
    sz::<metrics::HistogramDataPoint>(),
    &[
        (6, Field::Scalars { min_wire: 8 }),
        (7, Field::Scalars { min_wire: 8 }),
        (8, Field::Message(&EXEMPLAR, Yes)),
        (9, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
static EXPONENTIAL_POINT: Desc = Desc::new(
    sz::<metrics::ExponentialHistogramDataPoint>(),
    &[
        (1, Field::Message(&KEY_VALUE, Yes)),
        (8, Field::Message(&BUCKETS, No)),
        (9, Field::Message(&BUCKETS, No)),
        (11, Field::Message(&EXEMPLAR, Yes)),
    ],
    true,
);
static BUCKETS: Desc = Desc::new(
    sz::<metrics::exponential_histogram_data_point::Buckets>(),
    &[(2, Field::Scalars { min_wire: 1 })],
    false,
);
static SUMMARY_POINT: Desc = Desc::new(
    sz::<metrics::SummaryDataPoint>(),
    &[
        (6, Field::Message(&VALUE_AT_QUANTILE, Yes)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
static VALUE_AT_QUANTILE: Desc = Desc::new(
    sz::<metrics::summary_data_point::ValueAtQuantile>(),
    &[],
    false,
);
static EXEMPLAR: Desc = Desc::new(
    sz::<metrics::Exemplar>(),
    &[
        (4, Field::Bytes(No)),
        (5, Field::Bytes(No)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);

/// prost refuses messages nested deeper than this (its recursion limit).
const MAX_DEPTH: u32 = 100;

/// The bound on what decoding `body` as the request of `signal` allocates;
/// stops once it passes `limit`.
pub(crate) fn bound(signal: Signal, body: &[u8], limit: u64) -> Result<Bound, WalkError> {
    let desc = match signal {
        Signal::Logs => &LOGS_REQUEST,
        Signal::Traces => &TRACE_REQUEST,
        Signal::Metrics => &METRICS_REQUEST,
    };
    let mut w = Walk {
        bound: Bound::default(),
        limit,
    };
    w.add(desc.size)?;
    w.message(body, desc, 0)?;
    Ok(w.bound)
}

struct Walk {
    bound: Bound,
    limit: u64,
}

impl Walk {
    #[inline(always)]
    fn add(&mut self, n: u64) -> Result<(), WalkError> {
        self.bound.bytes = self.bound.bytes.saturating_add(n);
        if self.bound.bytes > self.limit {
            return Err(WalkError::Over(Over {
                bytes: self.bound.bytes,
                records: self.bound.records,
            }));
        }
        Ok(())
    }

    fn message(&mut self, mut buf: &[u8], desc: &Desc, depth: u32) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::Malformed(
                "recursion limit reached: messages nested too deeply",
            ));
        }
        // The repeated fields (by their index in `desc.fields`) that already
        // had an element in this message.
        let mut started = 0u32;
        while !buf.is_empty() {
            let key = varint(&mut buf)?;
            let number = u32::try_from(key >> 3).map_err(|_| WalkError::Malformed("bad tag"))?;
            let wire = (key & 7) as u8;
            if number == 0 {
                return Err(WalkError::Malformed("field number 0"));
            }
            let known = desc.field(number);
            let mut first = |i: usize| {
                let bit = 1u32 << (i % 32);
                let was = started & bit == 0;
                started |= bit;
                was
            };
            match (wire, known) {
                (2, Some((i, f))) => {
                    let inner = length_delimited(&mut buf)?;
                    match f {
                        Field::Message(d, rep) => {
                            if rep == Yes {
                                let elems = if first(i) { 6 } else { 2 };
                                self.add(elems * d.size)?;
                                if d.record {
                                    self.bound.records += 1;
                                }
                            }
                            match shortcut(inner, d) {
                                Some(cost) => self.add(cost)?,
                                None if std::ptr::eq(d, &LOG_RECORD) => {
                                    self.log_record(inner, depth + 1)?
                                }
                                None => self.message(inner, d, depth + 1)?,
                            }
                        }
                        Field::Bytes(rep) => {
                            if rep == Yes {
                                let elems = if first(i) { 6 } else { 2 };
                                self.add(elems * STRING)?;
                            }
                            self.add(inner.len() as u64 + 8)?;
                        }
                        Field::Scalars { min_wire } => {
                            let extra = if first(i) { 4 } else { 0 };
                            let n = inner.len() as u64 / min_wire;
                            self.add((2 * n + extra) * SCALAR)?;
                        }
                    }
                }
                (0 | 1 | 5, Some((i, Field::Scalars { .. }))) => {
                    let extra = if first(i) { 4 } else { 0 };
                    self.add((2 + extra) * SCALAR)?;
                    skip(&mut buf, wire, number, depth)?;
                }
                // Unknown fields, scalars, and known fields of an unexpected
                // wire type (prost refuses those; nothing to count).
                _ => skip(&mut buf, wire, number, depth)?,
            }
        }
        Ok(())
    }
}

impl Walk {
    /// `message` over a `LogRecord`, the message a logs request is mostly
    /// made of, with its fields known when compiled (a jump on the field
    /// number instead of a table lookup) and its sums added once per record
    /// and before each descent. The same sums as `message` with
    /// `LOG_RECORD` (a test compares them).
    fn log_record(&mut self, mut buf: &[u8], depth: u32) -> Result<(), WalkError> {
        if depth > MAX_DEPTH {
            return Err(WalkError::Malformed(
                "recursion limit reached: messages nested too deeply",
            ));
        }
        let mut cost = 0u64;
        let mut attributes = false;
        while !buf.is_empty() {
            let key = varint(&mut buf)?;
            let number = u32::try_from(key >> 3).map_err(|_| WalkError::Malformed("bad tag"))?;
            let wire = (key & 7) as u8;
            if number == 0 {
                return Err(WalkError::Malformed("field number 0"));
            }
            if wire != 2 || !matches!(number, 3 | 5 | 6 | 9 | 10 | 12) {
                skip(&mut buf, wire, number, depth)?;
                continue;
            }
            let inner = length_delimited(&mut buf)?;
            match number {
                5 => match lone_string(inner) {
                    Some(c) => cost += c,
                    None => {
                        self.add(std::mem::take(&mut cost))?;
                        self.message(inner, &ANY_VALUE, depth + 1)?;
                    }
                },
                6 => {
                    let elems = if attributes { 2 } else { 6 };
                    attributes = true;
                    cost += elems * KEY_VALUE.size;
                    match shortcut(inner, &KEY_VALUE) {
                        Some(c) => cost += c,
                        None => {
                            self.add(std::mem::take(&mut cost))?;
                            self.message(inner, &KEY_VALUE, depth + 1)?;
                        }
                    }
                }
                _ => cost += inner.len() as u64 + 8,
            }
        }
        self.add(cost)
    }
}

/// The cost of the two messages most of a request is made of, read
/// without a call when they take their common shape: an `AnyValue` holding
/// one string, and a `KeyValue` whose value is one (every attribute with a
/// string value). The same sums as `Walk::message`; `None` for any other
/// shape, which the general walk takes.
#[inline(always)]
fn shortcut(inner: &[u8], d: &'static Desc) -> Option<u64> {
    if std::ptr::eq(d, &ANY_VALUE) {
        lone_string(inner)
    } else if std::ptr::eq(d, &KEY_VALUE) {
        // Key (field 1), then value (field 2), each with a one-byte length.
        match inner {
            [0x0a, k, rest @ ..] if *k < 0x80 && rest.len() > usize::from(*k) => {
                match &rest[usize::from(*k)..] {
                    [0x12, v, value @ ..] if *v < 0x80 && value.len() == usize::from(*v) => {
                        Some(u64::from(*k) + 8 + lone_string(value)?)
                    }
                    _ => None,
                }
            }
            _ => None,
        }
    } else {
        None
    }
}

/// An `AnyValue` that is one `string_value` (field 1) with a one-byte
/// length and nothing else: the string's bytes and the smallest buffer.
#[inline(always)]
fn lone_string(any: &[u8]) -> Option<u64> {
    match any {
        [0x0a, len, s @ ..] if *len < 0x80 && s.len() == usize::from(*len) => {
            Some(s.len() as u64 + 8)
        }
        _ => None,
    }
}

/// Tags, lengths and most scalars of a request fit in one byte: that case
/// is the walk's hot path, kept inline and branch-light.
#[inline(always)]
fn varint(buf: &mut &[u8]) -> Result<u64, WalkError> {
    if let Some((&b, rest)) = buf.split_first() {
        if b < 0x80 {
            *buf = rest;
            return Ok(u64::from(b));
        }
    }
    varint_long(buf)
}

#[inline(never)]
fn varint_long(buf: &mut &[u8]) -> Result<u64, WalkError> {
    let mut v = 0u64;
    for i in 0..10 {
        let Some((&b, rest)) = buf.split_first() else {
            return Err(WalkError::Malformed("buffer underflow"));
        };
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Ok(v);
        }
    }
    Err(WalkError::Malformed("invalid varint"))
}

#[inline(always)]
fn length_delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], WalkError> {
    let len = varint(buf)?;
    let len = usize::try_from(len).map_err(|_| WalkError::Malformed("buffer underflow"))?;
    if len > buf.len() {
        return Err(WalkError::Malformed("buffer underflow"));
    }
    let (inner, rest) = buf.split_at(len);
    *buf = rest;
    Ok(inner)
}

#[inline(always)]
fn take(buf: &mut &[u8], n: usize) -> Result<(), WalkError> {
    if n > buf.len() {
        return Err(WalkError::Malformed("buffer underflow"));
    }
    *buf = &buf[n..];
    Ok(())
}

/// Skips one field's value as prost does, groups included.
#[inline]
fn skip(buf: &mut &[u8], wire: u8, number: u32, depth: u32) -> Result<(), WalkError> {
    match wire {
        0 => varint(buf).map(drop),
        1 => take(buf, 8),
        2 => length_delimited(buf).map(drop),
        5 => take(buf, 4),
        3 => {
            if depth >= MAX_DEPTH {
                return Err(WalkError::Malformed(
                    "recursion limit reached: groups nested too deeply",
                ));
            }
            loop {
                let key = varint(buf)?;
                let (n, w) = ((key >> 3) as u32, (key & 7) as u8);
                if w == 4 {
                    if n != number {
                        return Err(WalkError::Malformed("unexpected end group tag"));
                    }
                    return Ok(());
                }
                skip(buf, w, n, depth + 1)?;
            }
        }
        _ => Err(WalkError::Malformed("invalid wire type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use prost::Message;

    fn logs(records: Vec<LogRecord>) -> ExportLogsServiceRequest {
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: records,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }
    }

    fn record(attrs: usize) -> LogRecord {
        LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue("a line of text".repeat(4))),
            }),
            attributes: (0..attrs)
                .map(|i| KeyValue {
                    key: format!("key{i}"),
                    value: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("value".into())),
                    }),
                    ..Default::default()
                })
                .collect(),
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            ..Default::default()
        }
    }

    #[test]
    fn counts_records_and_bounds_what_prost_holds() {
        let req = logs((0..1000).map(|i| record(i % 7)).collect());
        let body = req.encode_to_vec();
        let b = bound(Signal::Logs, &body, u64::MAX).unwrap();
        assert_eq!(b.records, 1000);
        // At least the structs themselves, and not wildly more than the
        // body times the record's size over its encoding.
        let structs = 1000 * sz::<LogRecord>();
        assert!(b.bytes > structs, "{} <= {structs}", b.bytes);
        assert!(
            b.bytes < 4 * structs + 16 * body.len() as u64,
            "{}",
            b.bytes
        );
        assert_eq!(ExportLogsServiceRequest::decode(&body[..]).unwrap(), req);
    }

    /// The general walk alone over one message.
    fn walked(inner: &[u8], d: &Desc) -> Result<u64, WalkError> {
        let mut w = Walk {
            bound: Bound::default(),
            limit: u64::MAX,
        };
        w.message(inner, d, 1)?;
        Ok(w.bound.bytes)
    }

    #[test]
    fn the_shortcuts_sum_what_the_general_walk_sums() {
        let s = |v: &str| AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        };
        let kv = |k: &str, v: Option<AnyValue>| KeyValue {
            key: k.into(),
            value: v,
            ..Default::default()
        };
        let anys = [
            s(""),
            s("x"),
            s(&"y".repeat(127)),
            s(&"z".repeat(128)),
            AnyValue {
                value: Some(any_value::Value::IntValue(7)),
            },
            AnyValue::default(),
        ];
        let mut taken = 0;
        for a in &anys {
            let body = a.encode_to_vec();
            if let Some(c) = shortcut(&body, &ANY_VALUE) {
                taken += 1;
                assert_eq!(Ok(c), walked(&body, &ANY_VALUE), "{a:?}");
            }
            for key in ["", "k", &"k".repeat(127), &"k".repeat(128)] {
                for v in [Some(a.clone()), None] {
                    let kv = kv(key, v);
                    let body = kv.encode_to_vec();
                    if let Some(c) = shortcut(&body, &KEY_VALUE) {
                        taken += 1;
                        assert_eq!(Ok(c), walked(&body, &KEY_VALUE), "{kv:?}");
                    }
                }
            }
        }
        assert_eq!(taken, 7, "the short forms were not all taken");
        // A string with a field after it, or cut short, is the general
        // walk's to judge.
        assert_eq!(shortcut(&[0x0a, 1, b'a', 0x18, 1], &ANY_VALUE), None);
        assert_eq!(shortcut(&[0x0a, 2, b'a'], &ANY_VALUE), None);
        assert_eq!(
            shortcut(&[0x0a, 1, b'k', 0x12, 3, 0x0a, 1], &KEY_VALUE),
            None
        );
    }

    #[test]
    fn the_log_record_walk_sums_what_the_general_walk_sums() {
        let kvlist = AnyValue {
            value: Some(any_value::Value::KvlistValue(
                opentelemetry_proto::tonic::common::v1::KeyValueList {
                    values: record(4).attributes,
                },
            )),
        };
        let mut odd = record(2);
        odd.body = Some(kvlist.clone());
        odd.attributes.push(KeyValue {
            key: "nested".into(),
            value: Some(kvlist),
            ..Default::default()
        });
        odd.attributes.push(KeyValue::default());
        odd.severity_text = "WARN".into();
        odd.event_name = "x".repeat(300);
        let mut with_unknown = record(1).encode_to_vec();
        // Unknown varint, fixed64 and length-delimited fields, and field 5
        // as a varint (a wire type prost refuses for it: nothing counted).
        with_unknown.extend_from_slice(&[0x98, 0x06, 0x01, 0x21, 0, 0, 0, 0, 0, 0, 0, 0]);
        with_unknown.extend_from_slice(&[0xa2, 0x06, 0x02, b'h', b'i', 0x28, 0x05]);
        let bodies = [
            record(0).encode_to_vec(),
            record(5).encode_to_vec(),
            record(40).encode_to_vec(),
            LogRecord::default().encode_to_vec(),
            odd.encode_to_vec(),
            with_unknown,
        ];
        for body in &bodies {
            let mut w = Walk {
                bound: Bound::default(),
                limit: u64::MAX,
            };
            w.log_record(body, 3).unwrap();
            assert_eq!(Ok(w.bound.bytes), walked(body, &LOG_RECORD));
        }
        // Cut short: both refuse it alike.
        let cut = &bodies[1][..bodies[1].len() - 3];
        let mut w = Walk {
            bound: Bound::default(),
            limit: u64::MAX,
        };
        assert_eq!(w.log_record(cut, 3), walked(cut, &LOG_RECORD).map(drop));
    }

    #[test]
    fn every_field_that_allocates_is_found_by_its_number() {
        for d in [&LOG_RECORD, &SPAN, &METRIC, &EXPONENTIAL_POINT, &ANY_VALUE] {
            for (i, &(n, _)) in d.fields.iter().enumerate() {
                assert_eq!(d.field(n).map(|(j, _)| j), Some(i));
            }
            assert!(d.field(0).is_none() && d.field(99).is_none());
        }
    }

    #[test]
    fn stops_at_the_limit() {
        let body = logs(vec![LogRecord::default(); 100_000]).encode_to_vec();
        match bound(Signal::Logs, &body, 1 << 20) {
            Err(WalkError::Over(o)) => {
                assert!(o.bytes > 1 << 20);
                assert!(o.records < 100_000);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn malformed_input_is_refused_where_prost_refuses_it() {
        let mut body = logs(vec![record(2)]).encode_to_vec();
        body.extend_from_slice(&[0x0a, 0x05]);
        assert!(ExportLogsServiceRequest::decode(&body[..]).is_err());
        assert_eq!(
            bound(Signal::Logs, &body, u64::MAX),
            Err(WalkError::Malformed("buffer underflow"))
        );
    }

    #[test]
    fn unknown_fields_and_groups_are_skipped_like_prost_does() {
        let mut body = logs(vec![record(1)]).encode_to_vec();
        // Field 99 as a varint, field 98 as a group holding a fixed64.
        body.extend_from_slice(&[0x98, 0x06, 0x01]);
        body.extend_from_slice(&[0x93, 0x06, 0x09, 1, 2, 3, 4, 5, 6, 7, 8, 0x94, 0x06]);
        ExportLogsServiceRequest::decode(&body[..]).unwrap();
        let b = bound(Signal::Logs, &body, u64::MAX).unwrap();
        assert_eq!(b.records, 1);
    }
}
