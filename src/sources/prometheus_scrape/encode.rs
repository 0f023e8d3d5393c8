/*!
The conversion's points written straight into one batch: each point's
event encoded by hand from the series' borrowed labels, with no OTLP
object per point (no `KeyValue`, no one-point `Gauge` encoded by prost and
dropped).

The bytes are exactly those `metric_points::collect` writes for the same
points as an OTLP request (`otlp_http/split.rs`, format 2), so readers,
sinks and idempotency keys cannot tell the two apart; `encode/tests.rs`
compares them byte for byte with the request the conversion used to build
(`convert/reference.rs`). One event per point:

```text
 10 metric { 1 name  2 description  3 unit            — encoded once per metric
             5 gauge | 7 sum { 1 point  2 temporality  3 monotonic }
             9 histogram | 11 summary (prost-encoded, as before) }
 12 group (the resource's index, 0 omitted)
 point: 2 start (if not 0)  3 time (if not 0)  4 value  7 attribute…
 attribute: 1 key  2 { 1 string }
```

The batch's context holds one group per resource (source, resource,
scope, the collection's id seed and observed time), in the order the
resources were declared. Events are ordered by resource, then metric
(declaration order), then point; a point that arrives for an earlier
metric (a synthetic `up` whose name the target also serves) is moved into
place when the batch is finished, which is a copy only then.
*/

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    AggregationTemporality, Histogram, HistogramDataPoint, Metric, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::encoding::{encode_varint, encoded_len_varint};
use prost::Message;

use super::convert::{resource_attributes, Number, Output};
use super::parse::Kind;
use crate::event::envelope_fields::{put_context_group_head, put_group, METRIC_KEY};
use crate::event::{EventId, Group};
use crate::sources::otlp_http::split::SplitError;

/// `Metric` data members, `Gauge`/`Sum` and `NumberDataPoint` fields, as
/// protobuf keys (field number << 3 | wire type).
const KEY_GAUGE: u8 = 5 << 3 | 2;
const KEY_SUM: u8 = 7 << 3 | 2;
const KEY_HISTOGRAM: u8 = 9 << 3 | 2;
const KEY_SUMMARY: u8 = 11 << 3 | 2;
const KEY_DATA_POINT: u8 = 1 << 3 | 2;
const KEY_START: u8 = 2 << 3 | 1;
const KEY_TIME: u8 = 3 << 3 | 1;
const KEY_AS_DOUBLE: u8 = 4 << 3 | 1;
const KEY_ATTRIBUTE: u8 = 7 << 3 | 2;
/// `KeyValue` key and value, `AnyValue` string value.
const KEY_KEY: u8 = 1 << 3 | 2;
const KEY_VALUE: u8 = 2 << 3 | 2;
const KEY_STRING: u8 = 1 << 3 | 2;
/// A Sum's fields after its point: cumulative (2), monotonic.
const SUM_TAIL: [u8; 4] = [2 << 3, 2, 3 << 3, 1];

/// One metric's fields around its point.
struct Shell {
    /// Name, description and unit, encoded.
    before: Vec<u8>,
    kind: Kind,
}

/// A run of consecutive events of one metric in `framed`.
struct Run {
    resource: usize,
    metric: usize,
    end: usize,
}

/// One collection's events, encoded as they come.
pub struct Encoder {
    scope: &'static str,
    /// Per resource: its group's fields 2-5 (resource and scope), encoded.
    resources: Vec<Vec<u8>>,
    /// Per resource, its metrics.
    metrics: Vec<Vec<Shell>>,
    /// The events, each framed as the log frames them (u32 LE length).
    framed: Vec<u8>,
    runs: Vec<Run>,
    events: u64,
    /// The most framed bytes (with the context) one append takes.
    limit: usize,
    /// Past `limit`: points are counted, no longer written.
    over: bool,
    /// One point's attributes, encoded.
    attributes: Vec<u8>,
    /// A histogram's or summary's event.
    scratch: Vec<u8>,
}

/// A finished collection: its framed events and their context.
pub(crate) struct Encoded {
    pub framed: Bytes,
    pub context: Bytes,
    pub events: u64,
    /// Bytes of the events (without their framing) and the context.
    pub bytes: u64,
}

fn varint_len(v: usize) -> usize {
    encoded_len_varint(v as u64)
}

/// A length as a varint: most of a point's fit one byte, written here
/// without a call.
#[inline]
fn put_len(v: usize, out: &mut Vec<u8>) {
    if v < 0x80 {
        out.push(v as u8);
    } else {
        encode_varint(v as u64, out);
    }
}

impl Encoder {
    /// An encoder of points of scope `scope`, for one append of at most
    /// `limit` framed bytes (`metric_points::max_append_bytes`).
    pub fn new(scope: &'static str, limit: usize) -> Encoder {
        Encoder {
            scope,
            resources: Vec::new(),
            metrics: Vec::new(),
            framed: Vec::with_capacity(4096),
            runs: Vec::new(),
            events: 0,
            limit,
            over: false,
            attributes: Vec::new(),
            scratch: Vec::new(),
        }
    }

    /// Points written (or counted past the limit).
    pub fn points(&self) -> u64 {
        self.events
    }

    /// The batch's events and context: `source`'s, observed at
    /// `observed_unix_nano`, with a new random id seed. Refused when the
    /// collection outgrows one append.
    pub(crate) fn finish(
        self,
        source: &str,
        observed_unix_nano: u64,
    ) -> Result<Encoded, SplitError> {
        self.finish_with_seed(source, observed_unix_nano, EventId::random().0)
    }

    pub(crate) fn finish_with_seed(
        self,
        source: &str,
        observed_unix_nano: u64,
        seed: [u8; 16],
    ) -> Result<Encoded, SplitError> {
        let head = Group {
            source: source.to_string(),
            ..Default::default()
        }
        .encode_to_vec();
        let tail = Group {
            id_seed: seed.to_vec(),
            observed_time_unix_nano: observed_unix_nano,
            ..Default::default()
        }
        .encode_to_vec();
        let mut context = Vec::new();
        for prefix in &self.resources {
            put_context_group_head(head.len() + prefix.len() + tail.len(), &mut context);
            context.extend_from_slice(&head);
            context.extend_from_slice(prefix);
            context.extend_from_slice(&tail);
        }
        let framed = self.framed.len() as u64 + context.len() as u64;
        if self.over || framed > self.limit as u64 {
            return Err(SplitError::TooLarge {
                bytes: framed,
                limit: self.limit as u64,
            });
        }
        let bytes = framed - 4 * self.events;
        Ok(Encoded {
            framed: in_order(self.framed, self.runs),
            context: context.into(),
            events: self.events,
            bytes,
        })
    }

    /// Counts a point of (`resource`, `metric`), and whether to write it.
    fn count(&mut self, resource: usize, metric: usize) -> bool {
        self.events += 1;
        if self.over {
            return false;
        }
        match self.runs.last_mut() {
            Some(r) if r.resource == resource && r.metric == metric => {}
            _ => self.runs.push(Run {
                resource,
                metric,
                end: 0,
            }),
        }
        true
    }

    /// Ends an event written into `framed`; past the limit, frees what
    /// was written (nothing of it will be appended).
    fn written(&mut self) {
        if self.framed.len() > self.limit {
            self.over = true;
            self.framed = Vec::new();
            self.runs = Vec::new();
        } else if let Some(r) = self.runs.last_mut() {
            r.end = self.framed.len();
        }
    }

    /// A histogram's or summary's event, its data member encoded by prost.
    fn message(&mut self, r: usize, m: usize, key: u8, data: &impl Message) {
        if !self.count(r, m) {
            return;
        }
        let before = &self.metrics[r][m].before;
        let data_len = data.encoded_len();
        let metric_len = before.len() + 1 + varint_len(data_len) + data_len;
        let s = &mut self.scratch;
        s.clear();
        s.push(METRIC_KEY);
        encode_varint(metric_len as u64, s);
        s.extend_from_slice(before);
        s.push(key);
        data.encode_length_delimited(s)
            .expect("a Vec grows as needed");
        put_group(r as u64, s);
        self.framed
            .extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.framed.extend_from_slice(s);
        self.written();
    }
}

impl Output for Encoder {
    fn resource(&mut self, job: &str, instance: &str, more: &[(String, String)]) {
        let attributes = resource_attributes(job, instance, more);
        let group = Group {
            resource: Some(Resource {
                attributes,
                ..Default::default()
            }),
            scope: Some(InstrumentationScope {
                name: self.scope.to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                ..Default::default()
            }),
            ..Default::default()
        };
        self.resources.push(group.encode_to_vec());
        self.metrics.push(Vec::new());
    }

    fn metric(&mut self, r: usize, name: &str, help: &str, unit: &str, kind: Kind) {
        let before = Metric {
            name: name.to_string(),
            description: help.to_string(),
            unit: unit.to_string(),
            ..Default::default()
        }
        .encode_to_vec();
        self.metrics[r].push(Shell { before, kind });
    }

    fn number(&mut self, r: usize, m: usize, p: &Number<'_>) {
        if !self.count(r, m) {
            return;
        }
        let a = &mut self.attributes;
        a.clear();
        for (k, v) in p.attributes {
            let any_len = 1 + varint_len(v.len()) + v.len();
            let kv_len = 1 + varint_len(k.len()) + k.len() + 1 + varint_len(any_len) + any_len;
            a.push(KEY_ATTRIBUTE);
            put_len(kv_len, a);
            a.push(KEY_KEY);
            put_len(k.len(), a);
            a.extend_from_slice(k.as_bytes());
            a.push(KEY_VALUE);
            put_len(any_len, a);
            a.push(KEY_STRING);
            put_len(v.len(), a);
            a.extend_from_slice(v.as_bytes());
        }
        let shell = &self.metrics[r][m];
        let (data_key, tail): (u8, &[u8]) = match shell.kind {
            Kind::Counter => (KEY_SUM, &SUM_TAIL),
            _ => (KEY_GAUGE, &[]),
        };
        let point_len =
            if p.start != 0 { 9 } else { 0 } + if p.time != 0 { 9 } else { 0 } + 9 + a.len();
        let data_len = 1 + varint_len(point_len) + point_len + tail.len();
        let metric_len = shell.before.len() + 1 + varint_len(data_len) + data_len;
        let group_len = if r == 0 { 0 } else { 1 + varint_len(r) };
        let event_len = 1 + varint_len(metric_len) + metric_len + group_len;
        let f = &mut self.framed;
        f.reserve(4 + event_len);
        f.extend_from_slice(&(event_len as u32).to_le_bytes());
        f.push(METRIC_KEY);
        put_len(metric_len, f);
        f.extend_from_slice(&shell.before);
        f.push(data_key);
        put_len(data_len, f);
        f.push(KEY_DATA_POINT);
        put_len(point_len, f);
        if p.start != 0 {
            f.push(KEY_START);
            f.extend_from_slice(&p.start.to_le_bytes());
        }
        if p.time != 0 {
            f.push(KEY_TIME);
            f.extend_from_slice(&p.time.to_le_bytes());
        }
        f.push(KEY_AS_DOUBLE);
        f.extend_from_slice(&p.value.to_le_bytes());
        f.extend_from_slice(a);
        f.extend_from_slice(tail);
        put_group(r as u64, f);
        self.written();
    }

    fn histogram(&mut self, r: usize, m: usize, p: HistogramDataPoint) {
        let data = Histogram {
            data_points: vec![p],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        };
        self.message(r, m, KEY_HISTOGRAM, &data);
    }

    fn summary(&mut self, r: usize, m: usize, p: SummaryDataPoint) {
        let data = Summary {
            data_points: vec![p],
        };
        self.message(r, m, KEY_SUMMARY, &data);
    }
}

/// `framed` with its runs ordered by (resource, metric), as a request's
/// split orders them; moved only if a run came out of order.
fn in_order(framed: Vec<u8>, runs: Vec<Run>) -> Bytes {
    let key = |r: &Run| (r.resource, r.metric);
    if runs.windows(2).all(|w| key(&w[0]) <= key(&w[1])) {
        return framed.into();
    }
    let mut spans: Vec<(usize, usize, usize, usize)> = Vec::with_capacity(runs.len());
    let mut start = 0;
    for r in &runs {
        spans.push((r.resource, r.metric, start, r.end));
        start = r.end;
    }
    // Stable: a metric's runs keep their order.
    spans.sort_by_key(|s| (s.0, s.1));
    let mut out = Vec::with_capacity(framed.len());
    for (_, _, a, b) in spans {
        out.extend_from_slice(&framed[a..b]);
    }
    out.into()
}

#[cfg(test)]
mod tests;
