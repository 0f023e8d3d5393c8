//! The OTLP message schema as the decoded-size walk (`protobuf.rs`) reads
//! it: for each message type, the size of its struct and the fields that
//! allocate when prost decodes them, found by number.

use std::mem::size_of;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1 as common;
use opentelemetry_proto::tonic::logs::v1 as logs;
use opentelemetry_proto::tonic::metrics::v1 as metrics;
use opentelemetry_proto::tonic::resource::v1 as resource;
use opentelemetry_proto::tonic::trace::v1 as trace;

/// What a field of a message is, as far as allocation goes.
#[derive(Clone, Copy)]
pub(super) enum Field {
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
pub(super) enum Repeated {
    Yes,
    No,
}

pub(super) use Repeated::{No, Yes};

/// One message type: the size of its struct and its fields that allocate.
/// Fields are listed by number; a message has at most 32 of them.
pub(super) struct Desc {
    pub(super) size: u64,
    pub(super) fields: &'static [(u32, Field)],
    /// Whether each element is one record of the request (a log record, a
    /// span, a data point).
    pub(super) record: bool,
    /// For each field number below `INDEXED`, its place in `fields` plus
    /// one (0: a field that allocates nothing), so the walk finds a field
    /// without searching.
    index: [u8; INDEXED],
}

/// Every field that allocates has a number below this (checked by a test).
pub(super) const INDEXED: usize = 16;

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
    pub(super) fn field(&self, number: u32) -> Option<(usize, Field)> {
        let k = *self.index.get(number as usize)? as usize;
        let i = k.checked_sub(1)?;
        self.fields.get(i).map(|&(_, f)| (i, f))
    }
}

pub(super) const fn sz<T>() -> u64 {
    size_of::<T>() as u64
}

pub(super) const STRING: u64 = sz::<String>();
pub(super) const SCALAR: u64 = 8;

pub(super) static ANY_VALUE: Desc = Desc::new(
    sz::<common::AnyValue>(),
    &[
        (1, Field::Bytes(No)),
        (5, Field::Message(&ARRAY_VALUE, No)),
        (6, Field::Message(&KEY_VALUE_LIST, No)),
        (7, Field::Bytes(No)),
    ],
    false,
);
pub(super) static ARRAY_VALUE: Desc = Desc::new(
    sz::<common::ArrayValue>(),
    &[(1, Field::Message(&ANY_VALUE, Yes))],
    false,
);
pub(super) static KEY_VALUE_LIST: Desc = Desc::new(
    sz::<common::KeyValueList>(),
    &[(1, Field::Message(&KEY_VALUE, Yes))],
    false,
);
pub(super) static KEY_VALUE: Desc = Desc::new(
    sz::<common::KeyValue>(),
    &[(1, Field::Bytes(No)), (2, Field::Message(&ANY_VALUE, No))],
    false,
);
pub(super) static SCOPE: Desc = Desc::new(
    sz::<common::InstrumentationScope>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
pub(super) static ENTITY_REF: Desc = Desc::new(
    sz::<common::EntityRef>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(Yes)),
        (4, Field::Bytes(Yes)),
    ],
    false,
);
pub(super) static RESOURCE: Desc = Desc::new(
    sz::<resource::Resource>(),
    &[
        (1, Field::Message(&KEY_VALUE, Yes)),
        (3, Field::Message(&ENTITY_REF, Yes)),
    ],
    false,
);

pub(super) static LOGS_REQUEST: Desc = Desc::new(
    sz::<ExportLogsServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_LOGS, Yes))],
    false,
);
pub(super) static RESOURCE_LOGS: Desc = Desc::new(
    sz::<logs::ResourceLogs>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_LOGS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static SCOPE_LOGS: Desc = Desc::new(
    sz::<logs::ScopeLogs>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&LOG_RECORD, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static LOG_RECORD: Desc = Desc::new(
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

pub(super) static TRACE_REQUEST: Desc = Desc::new(
    sz::<ExportTraceServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_SPANS, Yes))],
    false,
);
pub(super) static RESOURCE_SPANS: Desc = Desc::new(
    sz::<trace::ResourceSpans>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_SPANS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static SCOPE_SPANS: Desc = Desc::new(
    sz::<trace::ScopeSpans>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&SPAN, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static SPAN: Desc = Desc::new(
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
pub(super) static SPAN_EVENT: Desc = Desc::new(
    sz::<trace::span::Event>(),
    &[(2, Field::Bytes(No)), (3, Field::Message(&KEY_VALUE, Yes))],
    false,
);
pub(super) static SPAN_LINK: Desc = Desc::new(
    sz::<trace::span::Link>(),
    &[
        (1, Field::Bytes(No)),
        (2, Field::Bytes(No)),
        (3, Field::Bytes(No)),
        (4, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
pub(super) static SPAN_STATUS: Desc =
    Desc::new(sz::<trace::Status>(), &[(2, Field::Bytes(No))], false);

pub(super) static METRICS_REQUEST: Desc = Desc::new(
    sz::<ExportMetricsServiceRequest>(),
    &[(1, Field::Message(&RESOURCE_METRICS, Yes))],
    false,
);
pub(super) static RESOURCE_METRICS: Desc = Desc::new(
    sz::<metrics::ResourceMetrics>(),
    &[
        (1, Field::Message(&RESOURCE, No)),
        (2, Field::Message(&SCOPE_METRICS, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static SCOPE_METRICS: Desc = Desc::new(
    sz::<metrics::ScopeMetrics>(),
    &[
        (1, Field::Message(&SCOPE, No)),
        (2, Field::Message(&METRIC, Yes)),
        (3, Field::Bytes(No)),
    ],
    false,
);
pub(super) static METRIC: Desc = Desc::new(
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
pub(super) static GAUGE: Desc = Desc::new(0, &[(1, Field::Message(&NUMBER_POINT, Yes))], false);
pub(super) static HISTOGRAM: Desc =
    Desc::new(0, &[(1, Field::Message(&HISTOGRAM_POINT, Yes))], false);
pub(super) static EXPONENTIAL_HISTOGRAM: Desc =
    Desc::new(0, &[(1, Field::Message(&EXPONENTIAL_POINT, Yes))], false);
pub(super) static SUMMARY: Desc = Desc::new(0, &[(1, Field::Message(&SUMMARY_POINT, Yes))], false);
pub(super) static NUMBER_POINT: Desc = Desc::new(
    sz::<metrics::NumberDataPoint>(),
    &[
        (5, Field::Message(&EXEMPLAR, Yes)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
pub(super) static HISTOGRAM_POINT: Desc = Desc::new(
    sz::<metrics::HistogramDataPoint>(),
    &[
        (6, Field::Scalars { min_wire: 8 }),
        (7, Field::Scalars { min_wire: 8 }),
        (8, Field::Message(&EXEMPLAR, Yes)),
        (9, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
pub(super) static EXPONENTIAL_POINT: Desc = Desc::new(
    sz::<metrics::ExponentialHistogramDataPoint>(),
    &[
        (1, Field::Message(&KEY_VALUE, Yes)),
        (8, Field::Message(&BUCKETS, No)),
        (9, Field::Message(&BUCKETS, No)),
        (11, Field::Message(&EXEMPLAR, Yes)),
    ],
    true,
);
pub(super) static BUCKETS: Desc = Desc::new(
    sz::<metrics::exponential_histogram_data_point::Buckets>(),
    &[(2, Field::Scalars { min_wire: 1 })],
    false,
);
pub(super) static SUMMARY_POINT: Desc = Desc::new(
    sz::<metrics::SummaryDataPoint>(),
    &[
        (6, Field::Message(&VALUE_AT_QUANTILE, Yes)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    true,
);
pub(super) static VALUE_AT_QUANTILE: Desc = Desc::new(
    sz::<metrics::summary_data_point::ValueAtQuantile>(),
    &[],
    false,
);
pub(super) static EXEMPLAR: Desc = Desc::new(
    sz::<metrics::Exemplar>(),
    &[
        (4, Field::Bytes(No)),
        (5, Field::Bytes(No)),
        (7, Field::Message(&KEY_VALUE, Yes)),
    ],
    false,
);
