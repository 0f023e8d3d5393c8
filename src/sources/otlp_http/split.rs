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
use prost::encoding::{encode_key, encode_varint, WireType};

use super::decode::Decoded;
use crate::event::{Envelope, EventId, Group};

/// Protobuf keys (field number << 3 | wire type 2) of the record fields of
/// [`Envelope`] and the data members of `Metric`.
const KEY_ID: u8 = 1 << 3 | 2;
const KEY_LOG: u8 = 8 << 3 | 2;
const KEY_SPAN: u8 = 9 << 3 | 2;
const KEY_METRIC: u8 = 10 << 3 | 2;
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
        s.push(KEY_ID);
        s.push(16);
        s.extend_from_slice(&EventId::random().0);
        s.extend_from_slice(&self.head);
        s.extend_from_slice(&self.prefix);
        s.push(key);
    }

    fn finish(&mut self) -> Result<(), SplitError> {
        let mut context = 0;
        if let Some(v2) = &self.v2 {
            let g = v2.current.unwrap_or(0);
            if g != 0 {
                encode_key(12, WireType::Varint, &mut self.scratch);
                encode_varint(g as u64, &mut self.scratch);
            }
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

    fn record(&mut self, key: u8, record: &impl Message) -> Result<(), SplitError> {
        self.start(key);
        record
            .encode_length_delimited(&mut self.scratch)
            .expect("a Vec grows as needed");
        self.finish()
    }

    /// One metric envelope: the metric's fields before the data member
    /// (tags 1-3), one data member, and those after it (tag 12).
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
        self.start(KEY_METRIC);
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
            encode_key(1, WireType::LengthDelimited, &mut self.buf);
            encode_varint(len as u64, &mut self.buf);
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
            for rl in req.resource_logs {
                w.resource(rl.resource, rl.schema_url);
                for sl in rl.scope_logs {
                    w.scope(sl.scope, sl.schema_url);
                    for rec in &sl.log_records {
                        w.record(KEY_LOG, rec)?;
                    }
                }
            }
        }
        Decoded::Traces(req) => {
            for rs in req.resource_spans {
                w.resource(rs.resource, rs.schema_url);
                for ss in rs.scope_spans {
                    w.scope(ss.scope, ss.schema_url);
                    for span in &ss.spans {
                        w.record(KEY_SPAN, span)?;
                    }
                }
            }
        }
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
        Data::Gauge(g) => {
            for p in g.data_points {
                let one = Gauge {
                    data_points: vec![p],
                };
                w.metric(&shell, KEY_GAUGE, &one)?;
            }
        }
        Data::Sum(s) => {
            for p in s.data_points {
                let one = Sum {
                    data_points: vec![p],
                    aggregation_temporality: s.aggregation_temporality,
                    is_monotonic: s.is_monotonic,
                };
                w.metric(&shell, KEY_SUM, &one)?;
            }
        }
        Data::Histogram(h) => {
            for p in h.data_points {
                let one = Histogram {
                    data_points: vec![p],
                    aggregation_temporality: h.aggregation_temporality,
                };
                w.metric(&shell, KEY_HISTOGRAM, &one)?;
            }
        }
        Data::ExponentialHistogram(h) => {
            for p in h.data_points {
                let one = ExponentialHistogram {
                    data_points: vec![p],
                    aggregation_temporality: h.aggregation_temporality,
                };
                w.metric(&shell, KEY_EXP_HISTOGRAM, &one)?;
            }
        }
        Data::Summary(s) => {
            for p in s.data_points {
                let one = Summary {
                    data_points: vec![p],
                };
                w.metric(&shell, KEY_SUMMARY, &one)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::Record;
    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
    use opentelemetry_proto::tonic::metrics::v1::{
        exponential_histogram_data_point, number_data_point, summary_data_point,
        ExponentialHistogramDataPoint, HistogramDataPoint, NumberDataPoint, ResourceMetrics,
        ScopeMetrics, SummaryDataPoint,
    };

    fn kv(k: &str, v: &str) -> KeyValue {
        KeyValue {
            key: k.into(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(v.into())),
            }),
            ..Default::default()
        }
    }

    fn run(d: Decoded) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let s = split(d, "otlp", 42, usize::MAX, |e| out.push(e.to_vec())).unwrap();
        assert_eq!(s.events as usize, out.len());
        assert_eq!(s.bytes as usize, out.iter().map(Vec::len).sum::<usize>());
        out
    }

    /// Splits into format 2 and reads the events back as the log's readers
    /// do (`Decoder`, the batch's context, each event's index), checking the
    /// ids are derived from one seed; returns the whole envelopes without
    /// their ids, and the number of groups.
    fn run2(d: Decoded) -> (Vec<Envelope>, usize) {
        use crate::event::{Context, Decoder};
        let mut out = Vec::new();
        let s = split_as(d, "otlp", 42, usize::MAX, true, |e| out.push(e.to_vec())).unwrap();
        assert_eq!(s.events as usize, out.len());
        assert_eq!(s.bytes as usize, out.iter().map(Vec::len).sum::<usize>());
        let ctx = Context::decode(s.context.as_ref()).unwrap();
        assert!(ctx
            .groups
            .iter()
            .all(|g| g.id_seed == ctx.groups[0].id_seed));
        assert_eq!(ctx.groups[0].id_seed.len(), 16);
        let mut dec = Decoder::new();
        let mut ids = std::collections::HashSet::new();
        let envs = out
            .iter()
            .enumerate()
            .map(|(i, e)| {
                let got = dec.decode(e, &s.context, i as u64).unwrap();
                assert_eq!(got.id, EventId::derived(&ctx.groups[0].id_seed, i as u64));
                assert!(ids.insert(got.id), "ids are distinct");
                let mut env = got.to_envelope();
                assert_eq!(env.id, got.id.0.to_vec());
                env.id.clear();
                env
            })
            .collect();
        (envs, ctx.groups.len())
    }

    /// Decodes, checks the bytes are prost's own encoding, and drops the id.
    fn envelopes(events: &[Vec<u8>]) -> Vec<Envelope> {
        events
            .iter()
            .map(|e| {
                let mut env = Envelope::decode_event(e).unwrap();
                assert_eq!(&env.encode_to_vec(), e, "not the canonical encoding");
                env.id.clear();
                env
            })
            .collect()
    }

    #[test]
    fn logs_keep_resource_scope_and_schema_urls() {
        let res = Resource {
            attributes: vec![kv("service.name", "a")],
            ..Default::default()
        };
        let scope = InstrumentationScope {
            name: "lib".into(),
            version: "1".into(),
            ..Default::default()
        };
        let rec = |b: &str| LogRecord {
            time_unix_nano: 7,
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(b.into())),
            }),
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![
                ResourceLogs {
                    resource: Some(res.clone()),
                    schema_url: "https://r".into(),
                    scope_logs: vec![
                        ScopeLogs {
                            scope: Some(scope.clone()),
                            schema_url: "https://s".into(),
                            log_records: vec![rec("1"), rec("2")],
                        },
                        ScopeLogs {
                            scope: None,
                            schema_url: String::new(),
                            log_records: vec![rec("3")],
                        },
                    ],
                },
                ResourceLogs {
                    resource: None,
                    schema_url: String::new(),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(scope.clone()),
                        schema_url: String::new(),
                        log_records: vec![rec("4")],
                    }],
                },
                // The first resource and scope again (clients that send
                // one ResourceLogs per record): the same group.
                ResourceLogs {
                    resource: Some(res.clone()),
                    schema_url: "https://r".into(),
                    scope_logs: vec![ScopeLogs {
                        scope: Some(scope.clone()),
                        schema_url: "https://s".into(),
                        log_records: vec![rec("5")],
                    }],
                },
            ],
        };
        let (v2, groups) = run2(Decoded::Logs(req.clone()));
        assert_eq!(groups, 3);
        let events = run(Decoded::Logs(req));
        let ids: std::collections::HashSet<_> = events.iter().map(|e| e[2..18].to_vec()).collect();
        assert_eq!(ids.len(), 5, "ids are distinct");
        let envs = envelopes(&events);
        let want = |resource: Option<Resource>,
                    rs: &str,
                    scope: Option<InstrumentationScope>,
                    ss: &str,
                    b: &str| Envelope {
            source: "otlp".into(),
            observed_time_unix_nano: 42,
            resource,
            resource_schema_url: rs.into(),
            scope,
            scope_schema_url: ss.into(),
            record: Some(Record::Log(rec(b))),
            ..Default::default()
        };
        assert_eq!(
            envs,
            vec![
                want(
                    Some(res.clone()),
                    "https://r",
                    Some(scope.clone()),
                    "https://s",
                    "1"
                ),
                want(
                    Some(res.clone()),
                    "https://r",
                    Some(scope.clone()),
                    "https://s",
                    "2"
                ),
                want(Some(res.clone()), "https://r", None, "", "3"),
                want(None, "", Some(scope.clone()), "", "4"),
                want(Some(res), "https://r", Some(scope), "https://s", "5"),
            ]
        );
        assert_eq!(v2, envs, "format 2 reads back as format 1");
    }

    #[test]
    fn every_metric_kind_becomes_one_envelope_per_point() {
        let num = |v: i64| NumberDataPoint {
            time_unix_nano: v as u64,
            value: Some(number_data_point::Value::AsInt(v)),
            ..Default::default()
        };
        let shell = |name: &str| Metric {
            name: name.into(),
            description: "d".into(),
            unit: "ms".into(),
            metadata: vec![kv("m", "x")],
            data: None,
        };
        let with = |name: &str, data: Data| Metric {
            data: Some(data),
            ..shell(name)
        };
        let metrics = vec![
            with(
                "g",
                Data::Gauge(Gauge {
                    data_points: vec![num(1), num(2)],
                }),
            ),
            with(
                "s",
                Data::Sum(Sum {
                    data_points: vec![num(3)],
                    aggregation_temporality: 2,
                    is_monotonic: true,
                }),
            ),
            with(
                "h",
                Data::Histogram(Histogram {
                    data_points: vec![HistogramDataPoint {
                        count: 2,
                        bucket_counts: vec![1, 1],
                        explicit_bounds: vec![5.0],
                        sum: Some(3.0),
                        ..Default::default()
                    }],
                    aggregation_temporality: 1,
                }),
            ),
            with(
                "e",
                Data::ExponentialHistogram(ExponentialHistogram {
                    data_points: vec![ExponentialHistogramDataPoint {
                        scale: -2,
                        positive: Some(exponential_histogram_data_point::Buckets {
                            offset: -1,
                            bucket_counts: vec![0, 4],
                        }),
                        ..Default::default()
                    }],
                    aggregation_temporality: 2,
                }),
            ),
            with(
                "q",
                Data::Summary(Summary {
                    data_points: vec![SummaryDataPoint {
                        quantile_values: vec![summary_data_point::ValueAtQuantile {
                            quantile: 0.5,
                            value: 1.5,
                        }],
                        ..Default::default()
                    }],
                }),
            ),
            with("empty", Data::Gauge(Gauge::default())),
        ];
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: metrics.clone(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let (v2, _) = run2(Decoded::Metrics(req.clone()));
        let envs = envelopes(&run(Decoded::Metrics(req)));
        assert_eq!(v2, envs, "format 2 reads back as format 1");
        let got: Vec<Metric> = envs
            .into_iter()
            .map(|e| match e.record {
                Some(Record::Metric(m)) => m,
                other => panic!("not a metric: {other:?}"),
            })
            .collect();
        let mut want = Vec::new();
        for m in metrics {
            let one = |d| Metric {
                data: Some(d),
                ..shell(&m.name)
            };
            match m.data.unwrap() {
                Data::Gauge(g) => want.extend(g.data_points.into_iter().map(|p| {
                    one(Data::Gauge(Gauge {
                        data_points: vec![p],
                    }))
                })),
                Data::Sum(s) => want.extend(s.data_points.iter().map(|p| {
                    one(Data::Sum(Sum {
                        data_points: vec![p.clone()],
                        ..s.clone()
                    }))
                })),
                d => want.push(one(d)),
            }
        }
        assert_eq!(got, want);
    }

    #[test]
    fn a_metric_without_data_is_refused() {
        let req = ExportMetricsServiceRequest {
            resource_metrics: vec![ResourceMetrics {
                scope_metrics: vec![ScopeMetrics {
                    metrics: vec![Metric {
                        name: "future".into(),
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let e = split(Decoded::Metrics(req), "s", 1, usize::MAX, |_| {}).unwrap_err();
        assert!(
            e.to_string()
                .contains("resourceMetrics[0].scopeMetrics[0].metrics[0]"),
            "{e}"
        );
    }

    #[test]
    fn the_limit_counts_framed_bytes() {
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default(); 10],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let one = run(Decoded::Logs(ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![LogRecord::default()],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        }))[0]
            .len();
        let exact = 10 * (one + 4);
        assert!(split(Decoded::Logs(req.clone()), "otlp", 42, exact, |_| {}).is_ok());
        let e = split(Decoded::Logs(req.clone()), "otlp", 42, exact - 1, |_| {}).unwrap_err();
        assert!(matches!(e, SplitError::TooLarge { .. }));
        // Format 2: the context counts too.
        let s = split_as(
            Decoded::Logs(req.clone()),
            "otlp",
            42,
            usize::MAX,
            true,
            |_| {},
        )
        .unwrap();
        let exact = (s.bytes + 4 * s.events) as usize + s.context.len();
        assert!(split_as(Decoded::Logs(req.clone()), "otlp", 42, exact, true, |_| {}).is_ok());
        let e = split_as(Decoded::Logs(req), "otlp", 42, exact - 1, true, |_| {}).unwrap_err();
        assert!(matches!(e, SplitError::TooLarge { .. }));
    }

    /// A request like the e2e benchmark's (a resource of six attributes, a
    /// scope, 100 records with a 150-byte body, two attributes, times,
    /// severity, trace context): what a record costs in each format.
    #[test]
    fn a_record_costs_its_own_bytes_and_a_share_of_one_context() {
        let rec = |n: usize| LogRecord {
            time_unix_nano: 1_700_000_000_000_000_000 + n as u64,
            observed_time_unix_nano: 1_700_000_000_000_000_007 + n as u64,
            severity_number: 9,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(format!("{n:0150}"))),
            }),
            attributes: vec![kv("log.iostream", "stdout"), kv("thread.id", "7")],
            flags: 1,
            trace_id: vec![n as u8; 16],
            span_id: vec![n as u8; 8],
            ..Default::default()
        };
        let req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(Resource {
                    attributes: [
                        ("service.name", "checkout"),
                        ("service.version", "1.4.2"),
                        (
                            "service.instance.id",
                            "7233be56-33bb-4d09-8d46-649d95da0b2b",
                        ),
                        ("host.name", "gateway-017"),
                        ("telemetry.sdk.name", "opentelemetry"),
                        ("telemetry.sdk.language", "python"),
                    ]
                    .iter()
                    .map(|(k, v)| kv(k, v))
                    .collect(),
                    ..Default::default()
                }),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "checkout.http".into(),
                        version: "1.4.2".into(),
                        ..Default::default()
                    }),
                    log_records: (0..100).map(rec).collect(),
                    schema_url: String::new(),
                }],
                schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
            }],
        };
        let record = rec(0).encoded_len();
        let one = split(Decoded::Logs(req.clone()), "otlp", 42, usize::MAX, |_| {}).unwrap();
        let two = split_as(Decoded::Logs(req), "otlp", 42, usize::MAX, true, |_| {}).unwrap();
        let per = |s: &Split| (s.bytes as f64 + s.context.len() as f64) / s.events as f64;
        eprintln!(
            "record {record} bytes; format 1: {:.1} bytes per record; format 2: {:.1} own + {:.1} of the context ({} bytes)",
            per(&one),
            two.bytes as f64 / 100.0,
            two.context.len() as f64 / 100.0,
            two.context.len()
        );
        // Own: the record's key and length, nothing else.
        assert_eq!(two.bytes as usize, 100 * (record + 3));
        assert!(per(&one) > (record + 250) as f64);
        assert!(per(&two) < (record + 7) as f64);
    }

    /// Spans and their resources, and how few bytes a record's own event
    /// takes beyond the record.
    #[test]
    fn format_2_events_hold_only_the_record_and_its_group() {
        use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
        let span = |n: u8| Span {
            trace_id: vec![n; 16],
            span_id: vec![n; 8],
            name: format!("op{n}"),
            ..Default::default()
        };
        let rs = |svc: &str, spans: Vec<Span>| ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", svc)],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        };
        let req = ExportTraceServiceRequest {
            resource_spans: vec![rs("a", vec![span(1), span(2)]), rs("b", vec![span(3)])],
        };
        let (v2, groups) = run2(Decoded::Traces(req.clone()));
        assert_eq!(groups, 2);
        assert_eq!(v2, envelopes(&run(Decoded::Traces(req.clone()))));
        let mut own = Vec::new();
        split_as(Decoded::Traces(req), "otlp", 42, usize::MAX, true, |e| {
            own.push(e.to_vec())
        })
        .unwrap();
        for (e, (n, group)) in own.iter().zip([(1u8, 0usize), (2, 0), (3, 1)]) {
            let record = span(n).encoded_len();
            let extra = if group == 0 { 0 } else { 2 };
            assert_eq!(e.len(), 2 + record + extra);
        }
    }
}
