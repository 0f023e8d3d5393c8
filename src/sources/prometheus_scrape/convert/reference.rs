//! The conversion's output as an OTLP request (test only): what the
//! source appended before it wrote each point's bytes itself, split by
//! `metric_points::collect` as an OTLP client's request is. The tests of
//! the mapping read it, and `encode/tests.rs` holds the encoder's bytes
//! to this request's split, byte for byte.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Histogram, HistogramDataPoint,
    Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::{key_values, resource_attributes, Kind, Number, Output};

/// The request being built.
pub(crate) struct Request {
    scope: &'static str,
    resources: Vec<(
        Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
        Vec<Metric>,
    )>,
}

impl Request {
    pub fn new(scope: &'static str) -> Request {
        Request {
            scope,
            resources: Vec::new(),
        }
    }

    /// The request: one ResourceMetrics per (job, instance).
    pub fn finish(self) -> ExportMetricsServiceRequest {
        let scope = self.scope;
        let resource_metrics = self
            .resources
            .into_iter()
            .map(|(attributes, metrics)| ResourceMetrics {
                resource: Some(Resource {
                    attributes,
                    ..Default::default()
                }),
                scope_metrics: vec![ScopeMetrics {
                    scope: Some(InstrumentationScope {
                        name: scope.to_string(),
                        version: env!("CARGO_PKG_VERSION").to_string(),
                        ..Default::default()
                    }),
                    metrics,
                    ..Default::default()
                }],
                ..Default::default()
            })
            .collect();
        ExportMetricsServiceRequest { resource_metrics }
    }

    fn data(&mut self, r: usize, m: usize) -> &mut Data {
        self.resources[r].1[m]
            .data
            .as_mut()
            .expect("declared with its data")
    }
}

impl Output for Request {
    fn resource(&mut self, job: &str, instance: &str, more: &[(String, String)]) {
        let attributes = resource_attributes(job, instance, more);
        self.resources.push((attributes, Vec::new()));
    }

    fn metric(&mut self, r: usize, name: &str, help: &str, unit: &str, kind: Kind) {
        let cumulative = AggregationTemporality::Cumulative as i32;
        let data = match kind {
            Kind::Counter => Data::Sum(Sum {
                data_points: Vec::new(),
                aggregation_temporality: cumulative,
                is_monotonic: true,
            }),
            Kind::Histogram => Data::Histogram(Histogram {
                data_points: Vec::new(),
                aggregation_temporality: cumulative,
            }),
            Kind::Summary => Data::Summary(Summary {
                data_points: Vec::new(),
            }),
            _ => Data::Gauge(Gauge {
                data_points: Vec::new(),
            }),
        };
        self.resources[r].1.push(Metric {
            name: name.to_string(),
            description: help.to_string(),
            unit: unit.to_string(),
            data: Some(data),
            ..Default::default()
        });
    }

    fn number(&mut self, r: usize, m: usize, p: &Number<'_>) {
        let point = NumberDataPoint {
            attributes: key_values(p.attributes),
            start_time_unix_nano: p.start,
            time_unix_nano: p.time,
            value: Some(number_data_point::Value::AsDouble(p.value)),
            ..Default::default()
        };
        match self.data(r, m) {
            Data::Gauge(g) => g.data_points.push(point),
            Data::Sum(s) => s.data_points.push(point),
            other => panic!("a number point for {other:?}"),
        }
    }

    fn histogram(&mut self, r: usize, m: usize, p: HistogramDataPoint) {
        match self.data(r, m) {
            Data::Histogram(h) => h.data_points.push(p),
            other => panic!("a histogram point for {other:?}"),
        }
    }

    fn summary(&mut self, r: usize, m: usize, p: SummaryDataPoint) {
        match self.data(r, m) {
            Data::Summary(s) => s.data_points.push(p),
            other => panic!("a summary point for {other:?}"),
        }
    }
}
