//! The OTLP request both OTLP ingest benches send (benches/otlp_http.rs,
//! benches/otlp_grpc/): one SDK-sized batch of log records, so that the
//! figures of HTTP and gRPC are for the same bytes.
#![allow(dead_code)]

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::resource::v1::Resource;

/// Log records per request.
pub const RECORDS: usize = 100;

pub fn kv(k: &str, v: Value) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue { value: Some(v) }),
        ..Default::default()
    }
}

pub fn s(v: &str) -> Value {
    Value::StringValue(v.into())
}

/// One SDK-sized batch of log records.
pub fn batch_request() -> ExportLogsServiceRequest {
    let records = (0..RECORDS)
        .map(|i| LogRecord {
            time_unix_nano: 1_700_000_000_000_000_000 + i as u64 * 1_000,
            observed_time_unix_nano: 1_700_000_000_000_000_000 + i as u64 * 1_000 + 7,
            severity_number: 9,
            severity_text: "INFO".into(),
            body: Some(AnyValue {
                value: Some(s(&format!(
                    "GET /api/v1/items/{i} completed with status 200 in {} ms for user u{}",
                    i % 97,
                    i * 7
                ))),
            }),
            attributes: vec![
                kv("http.method", s("GET")),
                kv("http.status_code", Value::IntValue(200)),
                kv("http.route", s("/api/v1/items/{id}")),
                kv("duration_ms", Value::DoubleValue(i as f64 * 0.37)),
                kv("retry", Value::BoolValue(i % 10 == 0)),
            ],
            flags: 1,
            trace_id: (0..16).map(|b| (b * 7 + i) as u8).collect(),
            span_id: (0..8).map(|b| (b * 3 + i) as u8).collect(),
            ..Default::default()
        })
        .collect();
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("checkout")),
                    kv("service.version", s("1.4.2")),
                    kv(
                        "service.instance.id",
                        s("7233be56-33bb-4d09-8d46-649d95da0b2b"),
                    ),
                    kv("host.name", s("gateway-017")),
                    kv("telemetry.sdk.name", s("opentelemetry")),
                    kv("telemetry.sdk.language", s("python")),
                ],
                ..Default::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "checkout.http".into(),
                    version: "1.4.2".into(),
                    ..Default::default()
                }),
                log_records: records,
                schema_url: String::new(),
            }],
            schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
        }],
    }
}
