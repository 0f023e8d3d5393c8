use super::*;
use crate::event::{Envelope, EventId, Record, Signal};
use crate::sinks::test_events;
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsPartialSuccess, ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;

fn item(host: &str, scope: &str, body: &str) -> Item {
    let env = Envelope {
        id: EventId::random().0.to_vec(),
        resource: Some(Resource {
            attributes: vec![KeyValue {
                key: "host.name".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(host.into())),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }),
        resource_schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
        scope: Some(InstrumentationScope {
            name: scope.into(),
            ..Default::default()
        }),
        record: Some(Record::Log(LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(body.into())),
            }),
            ..Default::default()
        })),
        ..Default::default()
    };
    test_events::item(&env, 0)
}

fn sink(encoding: OtlpEncoding) -> OtlpHttp {
    let u = |p: &str| reqwest::Url::parse(&format!("http://c:4318/v1/{p}")).unwrap();
    OtlpHttp {
        urls: [u("logs"), u("traces"), u("metrics")],
        encoding,
    }
}

#[test]
fn requests_regroup_by_resource_and_scope() {
    let items = vec![
        item("a", "s1", "1"),
        item("b", "s1", "2"),
        item("a", "s1", "3"),
        item("a", "s2", "4"),
    ];
    let req = sink(OtlpEncoding::Protobuf).encode(&items, 0);
    assert_eq!(req.url.path(), "/v1/logs");
    let back = ExportLogsServiceRequest::decode(req.body.as_slice()).unwrap();
    assert_eq!(back.resource_logs.len(), 2);
    let a = &back.resource_logs[0];
    assert_eq!(a.schema_url, "https://opentelemetry.io/schemas/1.21.0");
    assert_eq!(a.scope_logs.len(), 2);
    assert_eq!(a.scope_logs[0].log_records.len(), 2);
    assert_eq!(a.scope_logs[1].scope.as_ref().unwrap().name, "s2");
    assert_eq!(back.resource_logs[1].scope_logs[0].log_records.len(), 1);

    let req = sink(OtlpEncoding::Json).encode(&items, 0);
    let json: ExportLogsServiceRequest = serde_json::from_slice(&req.body).unwrap();
    assert_eq!(json, back);
}

#[test]
fn both_log_formats_give_the_same_request() {
    let envs = test_events::mixed();
    let (v1, v2) = (
        test_events::items_v1(&envs, 0),
        test_events::items_v2(&envs, 2, 0),
    );
    for encoding in [OtlpEncoding::Protobuf, OtlpEncoding::Json] {
        let s = sink(encoding);
        for signal in [Signal::Logs, Signal::Traces, Signal::Metrics] {
            let a = s.encode(&test_events::of_signal(&v1, signal), 0);
            let b = s.encode(&test_events::of_signal(&v2, signal), 0);
            assert_eq!(a.url, b.url);
            assert_eq!(a.body, b.body, "{encoding:?} {signal:?}");
        }
    }
    // Regrouped as before: the file lines' resource, then "a" (two
    // scopes), then "b"; the shared attributes lead each record's.
    let logs = s_logs(&test_events::of_signal(&v2, Signal::Logs));
    assert_eq!(logs.resource_logs.len(), 3);
    assert_eq!(logs.resource_logs[1].scope_logs.len(), 2);
    let line = &logs.resource_logs[0].scope_logs[0].log_records[1];
    let keys: Vec<&str> = line.attributes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(keys, ["log.file.path", "log.file.name", "log.iostream"]);
}

fn s_logs(items: &[Item]) -> ExportLogsServiceRequest {
    let req = sink(OtlpEncoding::Protobuf).encode(items, 0);
    ExportLogsServiceRequest::decode(req.body.as_slice()).unwrap()
}

#[test]
fn partial_success_is_read_in_both_encodings() {
    let s = sink(OtlpEncoding::Protobuf);
    let pb = ExportLogsServiceResponse {
        partial_success: Some(ExportLogsPartialSuccess {
            rejected_log_records: 2,
            error_message: "too old".into(),
        }),
    }
    .encode_to_vec();
    assert_eq!(
        s.parse(Some("application/x-protobuf"), &pb, 5),
        BodyVerdict::PartiallyRejected {
            rejected: 2,
            message: "too old".into()
        }
    );
    assert_eq!(
        s.parse(
            Some("application/json"),
            br#"{"partialSuccess":{"rejectedLogRecords":"0","errorMessage":"deprecated field"}}"#,
            5
        ),
        BodyVerdict::AcceptedWithWarning("deprecated field".into())
    );
    assert_eq!(
        s.parse(
            Some("application/json"),
            br#"{"partialSuccess":{"rejectedSpans":3}}"#,
            5
        ),
        BodyVerdict::PartiallyRejected {
            rejected: 3,
            message: String::new()
        }
    );
    assert_eq!(
        s.parse(Some("application/x-protobuf"), b"", 5),
        BodyVerdict::Accepted
    );
    assert_eq!(
        s.parse(Some("application/json"), b"{}", 5),
        BodyVerdict::Accepted
    );
    assert!(matches!(
        s.parse(Some("application/json"), b"<html>", 5),
        BodyVerdict::Unreadable(_)
    ));
}
