/*!
One decoded request → one event per log record, span and metric data
point, each encoded once, straight into the caller's batch.

# Format 2

What the records of a request share is stored once, in the batch's
[`Context`](crate::event::Context): one [`Group`](crate::event::Group) per
distinct (resource, resource schema URL, scope, scope schema URL) of the
request, each with the source's name, the request's observed time and the
request's one random 16-byte `id_seed`. Each record's event is an
[`Envelope`] holding only the record and its group's index (0 omitted):

```text
 8|9|10 record   12 group
```

No id is stored: the reader derives it from the seed and the event's index
in its batch ([`EventId::derived`]), the same for every reader and every
replay, so it is as stable as the random id format 1 stores. Through
`event::Decoder`, `Stored::to_envelope` gives the format-1 envelope of the
same record, id aside (random in both).

# Format 1

Written while the log does not store batch contexts
([`WRITE_FORMAT_2`](crate::sources::WRITE_FORMAT_2) off, as earlier
versions did; also what `fuzzing::otlp_prepare` checks). An [`Envelope`]'s fields are written in tag order, so its encoding is the
concatenation of independent pieces:

```text
 1 id  2 source  3 observed      — per event / the same for the whole request
 4 resource  5 resource_schema_url — the same for every record of a ResourceX
 6 scope  7 scope_schema_url       — the same for every record of a ScopeX
 8|9|10 record                     — the record, encoded once
```

The resource and scope parts are encoded once per group and copied for each
record, rather than cloned into every envelope and encoded again. The bytes
are exactly what `Envelope::encode_to_vec` gives (a test checks it), so
readers need not know about this.

In both formats a metric becomes one event per data point: a `Metric` with the same name,
description, unit and metadata, and a data member of the same kind (with its
temporality and monotonicity) holding that single point. The fields around
the data member (name, description and unit before it, metadata after it,
in tag order) are encoded once per metric.
*/

use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, ExponentialHistogram, Gauge, Histogram, Metric, Sum, Summary,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use std::collections::HashMap;

use bytes::Bytes;

use super::decode::Decoded;
use crate::event::envelope_fields::{self, LOG_RECORD_KEY, METRIC_KEY, SPAN_KEY};
use crate::event::{Envelope, EventId, Group};

/// Protobuf keys (field number << 3 | wire type 2) of the record fields of
/// [`Envelope`] and the data members of `Metric`.
const KEY_GAUGE: u8 = 5 << 3 | 2;
const KEY_SUM: u8 = 7 << 3 | 2;
const KEY_HISTOGRAM: u8 = 9 << 3 | 2;
const KEY_EXP_HISTOGRAM: u8 = 10 << 3 | 2;
const KEY_SUMMARY: u8 = 11 << 3 | 2;

/// What splitting produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Split {
    pub events: u64,
    /// Bytes of the encoded events (the context not included).
    pub bytes: u64,
    /// Format 2: the encoded [`Context`](crate::event::Context) the events
    /// need, to store with them as the batch's context. Empty in format 1.
    pub context: Bytes,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum SplitError {
    /// The events (with the log's 4-byte framing each) outgrow one append.
    #[error("the events take more than {limit} bytes")]
    TooLarge { bytes: u64, limit: u64 },
    /// A metric with no data member: a kind holdfast does not know (its
    /// protobuf field was skipped) or a mistake; either way there is no
    /// point to store, and accepting it would lose what it held.
    #[error(
        "invalid OTLP at {path}: metric {name:?} has no data (gauge, sum, histogram, \
         exponentialHistogram or summary); holdfast refuses metrics of a kind it cannot store"
    )]
    NoData { path: String, name: String },
}

struct Writer<F: FnMut(&[u8])> {
    /// Format 1: envelope fields 2 and 3, the same for every event of the
    /// request. Format 2: group field 1 (source).
    head: Vec<u8>,
    /// Format 1: envelope fields 4-7 of the current resource and scope.
    /// Format 2: group fields 2-5.
    prefix: Vec<u8>,
    /// Where the scope part starts in `prefix`.
    resource_len: usize,
    /// Format 2 only: the context being built, its groups by their fields
    /// 2-5, the current group's index (`None` until a record of the current
    /// scope needs it), and group fields 8 and 9 (id seed, observed time).
    v2: Option<Contexts>,
    scratch: Vec<u8>,
    emit: F,
    split: Split,
    /// Framed bytes allowed (what one append takes).
    limit: u64,
}

impl<F: FnMut(&[u8])> Writer<F> {
    fn new(source: &str, observed_unix_nano: u64, limit: usize, format2: bool, emit: F) -> Self {
        let (head, v2) = if format2 {
            let head = Group {
                source: source.to_string(),
                ..Default::default()
            }
            .encode_to_vec();
            let tail = Group {
                id_seed: EventId::random().0.to_vec(),
                observed_time_unix_nano: observed_unix_nano,
                ..Default::default()
            }
            .encode_to_vec();
            let v2 = Contexts {
                buf: Vec::new(),
                groups: HashMap::new(),
                current: None,
                tail,
            };
            (head, Some(v2))
        } else {
            let head = Envelope {
                source: source.to_string(),
                observed_time_unix_nano: observed_unix_nano,
                ..Default::default()
            }
            .encode_to_vec();
            (head, None)
        };
        Writer {
            head,
            prefix: Vec::new(),
            resource_len: 0,
            v2,
            scratch: Vec::with_capacity(4096),
            emit,
            split: Split {
                events: 0,
                bytes: 0,
                context: Bytes::new(),
            },
            limit: limit as u64,
        }
    }

    fn resource(&mut self, resource: Option<Resource>, schema_url: String) {
        self.prefix = if self.v2.is_some() {
            Group {
                resource,
                resource_schema_url: schema_url,
                ..Default::default()
            }
            .encode_to_vec()
        } else {
            Envelope {
                resource,
                resource_schema_url: schema_url,
                ..Default::default()
            }
            .encode_to_vec()
        };
        self.resource_len = self.prefix.len();
    }

    fn scope(&mut self, scope: Option<InstrumentationScope>, schema_url: String) {
        self.prefix.truncate(self.resource_len);
        match &mut self.v2 {
            Some(v2) => {
                v2.current = None;
                let part = Group {
                    scope,
                    scope_schema_url: schema_url,
                    ..Default::default()
                };
                encode(&part, &mut self.prefix);
            }
            None => {
                let part = Envelope {
                    scope,
                    scope_schema_url: schema_url,
                    ..Default::default()
                };
                encode(&part, &mut self.prefix);
            }
        }
    }

    /// Starts an event in `scratch`, up to the record's key.
    fn start(&mut self, key: u8) {
        let s = &mut self.scratch;
        s.clear();
        if let Some(v2) = &mut self.v2 {
            v2.intern(&self.head, &self.prefix);
            s.push(key);
            return;
        }
        envelope_fields::put_id(&EventId::random().0, s);
        s.extend_from_slice(&self.head);
        s.extend_from_slice(&self.prefix);
        s.push(key);
    }

    fn finish(&mut self) -> Result<(), SplitError> {
        let mut context = 0;
        if let Some(v2) = &self.v2 {
            envelope_fields::put_group(v2.current.unwrap_or(0) as u64, &mut self.scratch);
            context = v2.buf.len() as u64;
        }
        (self.emit)(&self.scratch);
        self.split.events += 1;
        self.split.bytes += self.scratch.len() as u64;
        let framed = self.split.bytes + 4 * self.split.events + context;
        if framed > self.limit {
            return Err(SplitError::TooLarge {
                bytes: framed,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Every record of a logs or traces request, in order: `resource` and
    /// `scope` take a level apart into its context and what it holds
    /// ([`records!`] writes both from the levels' field names).
    fn records<R, S, T: Message>(
        &mut self,
        key: u8,
        resources: Vec<R>,
        resource: impl Fn(R) -> (Option<Resource>, String, Vec<S>),
        scope: impl Fn(S) -> (Option<InstrumentationScope>, String, Vec<T>),
    ) -> Result<(), SplitError> {
        for r in resources {
            let (context, schema_url, scopes) = resource(r);
            self.resource(context, schema_url);
            for s in scopes {
                let (context, schema_url, records) = scope(s);
                self.scope(context, schema_url);
                for rec in &records {
                    self.record(key, rec)?;
                }
            }
        }
        Ok(())
    }

    fn record(&mut self, key: u8, record: &impl Message) -> Result<(), SplitError> {
        self.start(key);
        record
            .encode_length_delimited(&mut self.scratch)
            .expect("a Vec grows as needed");
        self.finish()
    }

    /// One metric envelope: the metric's fields before the data member
    /// (tags 1-3), one data member, and those after it (tag 12).
    /// One metric per data point: `one` wraps a point in its data message
    /// (keeping the message's own settings, like the temporality).
    fn metric_per_point<P, M: Message>(
        &mut self,
        shell: &Shell,
        data_key: u8,
        points: Vec<P>,
        one: impl Fn(P) -> M,
    ) -> Result<(), SplitError> {
        for p in points {
            self.metric(shell, data_key, &one(p))?;
        }
        Ok(())
    }

    fn metric(
        &mut self,
        shell: &Shell,
        data_key: u8,
        data: &impl Message,
    ) -> Result<(), SplitError> {
        let data_len = data.encoded_len();
        let metric_len = shell.before.len()
            + 1
            + prost::length_delimiter_len(data_len)
            + data_len
            + shell.after.len();
        self.start(METRIC_KEY);
        let s = &mut self.scratch;
        prost::encode_length_delimiter(metric_len, s).expect("a Vec grows as needed");
        s.extend_from_slice(&shell.before);
        s.push(data_key);
        data.encode_length_delimited(s)
            .expect("a Vec grows as needed");
        s.extend_from_slice(&shell.after);
        self.finish()
    }
}

/// The context of a format-2 request, built as its records are split.
struct Contexts {
    /// The encoded `Context`: each group as its field 1.
    buf: Vec<u8>,
    /// Group indexes by the groups' fields 2-5 (resource, scope, their
    /// schema URLs): records of equal resources and scopes share a group
    /// even when the request repeats them (one `ResourceLogs` per record).
    groups: HashMap<Vec<u8>, u32>,
    /// The current scope's group, once one of its records was written.
    current: Option<u32>,
    /// Group fields 8 and 9, the same for every group of the request.
    tail: Vec<u8>,
}

impl Contexts {
    /// Makes `prefix` (group fields 2-5) the current group, adding it to
    /// the context if new.
    fn intern(&mut self, head: &[u8], prefix: &[u8]) {
        if self.current.is_some() {
            return;
        }
        let next = self.groups.len() as u32;
        let i = *self.groups.entry(prefix.to_vec()).or_insert(next);
        if i == next {
            let len = head.len() + prefix.len() + self.tail.len();
            envelope_fields::put_context_group_head(len, &mut self.buf);
            self.buf.extend_from_slice(head);
            self.buf.extend_from_slice(prefix);
            self.buf.extend_from_slice(&self.tail);
        }
        self.current = Some(i);
    }
}

/// A metric's encoded fields around its data member.
struct Shell {
    before: Vec<u8>,
    after: Vec<u8>,
}

fn encode(msg: &impl Message, buf: &mut Vec<u8>) {
    msg.encode(buf).expect("a Vec grows as needed");
}

/// Splits `decoded` into whole format-1 envelopes, handing each encoded
/// envelope to `emit`. Fails, after emitting some, if the events outgrow
/// `limit` framed bytes or a metric has no data: the caller then discards
/// what it got.
pub(crate) fn split(
    decoded: Decoded,
    source: &str,
    observed_unix_nano: u64,
    limit: usize,
    emit: impl FnMut(&[u8]),
) -> Result<Split, SplitError> {
    split_as(decoded, source, observed_unix_nano, limit, false, emit)
}

/// [`Writer::records`] for a request whose levels are named
/// `req.<resources>.<scopes>.<records>` (logs and traces share the shape).
macro_rules! records {
    ($w:ident, $key:expr, $req:ident.$resources:ident.$scopes:ident.$records:ident) => {
        $w.records(
            $key,
            $req.$resources,
            |r| (r.resource, r.schema_url, r.$scopes),
            |s| (s.scope, s.schema_url, s.$records),
        )
    };
}

/// [`split`] into format-2 events (see the module doc) if `format2`: the
/// returned [`Split::context`] is then the batch's context, and `limit`
/// counts it too.
pub(crate) fn split_as(
    decoded: Decoded,
    source: &str,
    observed_unix_nano: u64,
    limit: usize,
    format2: bool,
    emit: impl FnMut(&[u8]),
) -> Result<Split, SplitError> {
    let mut w = Writer::new(source, observed_unix_nano, limit, format2, emit);
    match decoded {
        Decoded::Logs(req) => {
            records!(w, LOG_RECORD_KEY, req.resource_logs.scope_logs.log_records)?
        }
        Decoded::Traces(req) => records!(w, SPAN_KEY, req.resource_spans.scope_spans.spans)?,
        Decoded::Metrics(req) => {
            for (i, rm) in req.resource_metrics.into_iter().enumerate() {
                w.resource(rm.resource, rm.schema_url);
                for (j, sm) in rm.scope_metrics.into_iter().enumerate() {
                    w.scope(sm.scope, sm.schema_url);
                    for (k, m) in sm.metrics.into_iter().enumerate() {
                        split_metric(&mut w, m, || {
                            format!("resourceMetrics[{i}].scopeMetrics[{j}].metrics[{k}]")
                        })?;
                    }
                }
            }
        }
    }
    let mut split = w.split;
    if let Some(v2) = w.v2 {
        split.context = v2.buf.into();
    }
    Ok(split)
}

fn split_metric<F: FnMut(&[u8])>(
    w: &mut Writer<F>,
    mut m: Metric,
    path: impl FnOnce() -> String,
) -> Result<(), SplitError> {
    let Some(data) = m.data.take() else {
        return Err(SplitError::NoData {
            path: path(),
            name: m.name,
        });
    };
    let after = Metric {
        metadata: std::mem::take(&mut m.metadata),
        ..Default::default()
    }
    .encode_to_vec();
    let shell = Shell {
        before: m.encode_to_vec(),
        after,
    };
    match data {
        Data::Gauge(g) => w.metric_per_point(&shell, KEY_GAUGE, g.data_points, |p| Gauge {
            data_points: vec![p],
        }),
        Data::Sum(s) => w.metric_per_point(&shell, KEY_SUM, s.data_points, |p| Sum {
            data_points: vec![p],
            aggregation_temporality: s.aggregation_temporality,
            is_monotonic: s.is_monotonic,
        }),
        Data::Histogram(h) => {
            w.metric_per_point(&shell, KEY_HISTOGRAM, h.data_points, |p| Histogram {
                data_points: vec![p],
                aggregation_temporality: h.aggregation_temporality,
            })
        }
        Data::ExponentialHistogram(h) => {
            w.metric_per_point(&shell, KEY_EXP_HISTOGRAM, h.data_points, |p| {
                ExponentialHistogram {
                    data_points: vec![p],
                    aggregation_temporality: h.aggregation_temporality,
                }
            })
        }
        Data::Summary(s) => w.metric_per_point(&shell, KEY_SUMMARY, s.data_points, |p| Summary {
            data_points: vec![p],
        }),
    }
}

#[cfg(test)]
mod tests;
