//! The decoder's unit tests.

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;

use super::*;

fn logs_of(s: &str) -> Result<ExportLogsServiceRequest> {
    logs(&J::parse(s.as_bytes())?, &UnknownKeys::default())
}

/// Decodes a log request, with the unknown keys it ignored.
fn logs_counting(s: &str) -> (ExportLogsServiceRequest, UnknownKeys) {
    let tally = UnknownKeys::default();
    let r = logs(&J::parse(s.as_bytes()).unwrap(), &tally).expect(s);
    (r, tally)
}

fn record(fields: &str) -> String {
    format!(r#"{{"resourceLogs":[{{"scopeLogs":[{{"logRecords":[{{{fields}}}]}}]}}]}}"#)
}

#[test]
fn decodes_every_scalar_form() {
    let r = logs_of(&record(
        r#""timeUnixNano":"1700000000000000001","observedTimeUnixNano":1700000000,
           "severityNumber":"SEVERITY_NUMBER_WARN","flags":1,"traceId":"5B8EFFF798038103D269B633813FC60C",
           "spanId":"eee19b7ec3c1b174","eventName":"e",
           "body":{"kvlistValue":{"values":[
               {"key":"s","value":{"stringValue":"x"}},
               {"key":"b","value":{"boolValue":true}},
               {"key":"i","value":{"intValue":"-9223372036854775808"}},
               {"key":"d","value":{"doubleValue":"NaN"}},
               {"key":"y","value":{"bytesValue":"aGk="}},
               {"key":"a","value":{"arrayValue":{"values":[{"intValue":3},{}]}}},
               {"key":"n","value":null}]}}"#,
    ))
    .unwrap();
    let rec = &r.resource_logs[0].scope_logs[0].log_records[0];
    assert_eq!(rec.time_unix_nano, 1_700_000_000_000_000_001);
    assert_eq!(rec.observed_time_unix_nano, 1_700_000_000);
    assert_eq!(rec.severity_number, 13);
    assert_eq!(rec.trace_id[0], 0x5b);
    assert_eq!(rec.span_id.len(), 8);
    let Some(any_value::Value::KvlistValue(kv)) = &rec.body.as_ref().unwrap().value else {
        panic!("body is not a kvlist")
    };
    assert_eq!(kv.values.len(), 7);
    assert_eq!(
        kv.values[2].value.as_ref().unwrap().value,
        Some(any_value::Value::IntValue(i64::MIN))
    );
    assert_eq!(
        kv.values[4].value.as_ref().unwrap().value,
        Some(any_value::Value::BytesValue(b"hi".to_vec()))
    );
    assert!(kv.values[6].value.is_none());
}

fn problem(s: &str) -> JsonError {
    logs_of(s).expect_err(s)
}

#[test]
fn refuses_what_it_cannot_store() {
    let e = problem(r#"{"resourceLogs":[{"scopeLogs":[{"log_records":[{}]}]}]}"#);
    assert_eq!(e.path, "resourceLogs[0].scopeLogs[0]");
    assert!(e.problem.contains("write \"logRecords\""), "{e}");

    let e = problem(r#"{"resource_logs":[]}"#);
    assert!(e.problem.contains("write \"resourceLogs\""), "{e}");

    let e = problem(r#"{"resourceSpans":[]}"#);
    assert!(e.problem.contains("another signal"), "{e}");

    let e = problem(&record(r#""body":{"stringValue":"x","intValue":"1"}"#));
    assert!(e.problem.contains("alternatives"), "{e}");

    let e = problem(&record(r#""timeUnixNano":"1","timeUnixNano":"2""#));
    assert!(e.problem.contains("appears twice"), "{e}");

    // An integer literal is read exactly; a float beyond 2^53 may have
    // been rounded on the way.
    assert!(logs_of(&record(r#""timeUnixNano":1700000000000000001"#)).is_ok());
    let e = problem(&record(r#""timeUnixNano":1.7e18"#));
    assert!(e.problem.contains("decimal strings"), "{e}");
    let e = problem(&record(r#""timeUnixNano":18446744073709551616"#));
    assert!(e.problem.contains("decimal strings"), "{e}");

    let e = problem(&record(r#""timeUnixNano":-1"#));
    assert!(e.problem.contains("out of range"), "{e}");

    let e = problem(&record(r#""traceId":"W47/95gDgQPSabYzgT/GDA==""#));
    assert!(e.problem.contains("not base64"), "{e}");

    let e = problem(&record(r#""spanId":"zzzzzzzzzzzzzzzz""#));
    assert!(e.problem.contains("hex digits"), "{e}");

    let e = problem(&record(r#""severityText":5"#));
    assert_eq!(
        e.path,
        "resourceLogs[0].scopeLogs[0].logRecords[0].severityText"
    );

    let e = problem(r#"{"resourceLogs":[null]}"#);
    assert!(e.problem.contains("null"), "{e}");

    let e = problem(r#"{"resourceLogs":[{}]} x"#);
    assert!(e.problem.contains("not valid JSON"), "{e}");
}

#[test]
fn unknown_keys_are_skipped_and_counted() {
    let plain = r#"{"resourceLogs":[{"resource":{},"scopeLogs":[{"scope":{},"logRecords":[{
        "body":{"stringValue":"x"},"severityText":"w"}]}]}]}"#;
    let (want, none) = logs_counting(plain);
    assert_eq!(none.count(), 0);

    // Every JSON type, nested, at every level; a typo of a known key too.
    let extra =
        r#"{"n":null,"b":true,"i":-1,"f":1.5,"s":"x","a":[[{"k":{}}]],"o":{"p":{"q":[1]}}}"#;
    let doc = format!(
        r#"{{"newTop":{extra},"resourceLogs":[{{"newResource":1,"resource":{{"newField":{extra}}},
           "scopeLogs":[{{"scope":{{"x":[]}},"logRecord":[{{}}],"logRecords":[{{
           "body":{{"stringValue":"x","newValueField":{extra}}},"severityText":"w",
           "futureField":{extra}}}]}}]}}]}}"#
    );
    let (got, tally) = logs_counting(&doc);
    assert_eq!(got, want);
    assert_eq!(tally.count(), 7);
    let first = tally.first();
    assert_eq!(first.len(), table::UNKNOWN_KEYS_NAMED);
    assert!(first[0].starts_with("newTop ("), "{first:?}");
    assert!(
        first[1].starts_with("resourceLogs[0].newResource ("),
        "{first:?}"
    );
    assert!(
        first[2].starts_with("resourceLogs[0].resource.newField ("),
        "{first:?}"
    );

    let (_, tally) = logs_counting(r#"{"resourceLogs":[{"scopeLogs":[{"logRecord":[{}]}]}]}"#);
    assert!(
        tally.first()[0].contains("did you mean \"logRecords\""),
        "{:?}",
        tally.first()
    );
}

#[test]
fn counts_on_the_tree_independently() {
    let t = J::parse(
        br#"{"resourceMetrics":[{"scopeMetrics":[{"metrics":[
            {"gauge":{"dataPoints":[{},{}]}},{"sum":{"dataPoints":[{}]}},
            {"summary":{}}]}]}]}"#,
    )
    .unwrap();
    assert_eq!(count_records(&t, crate::event::Signal::Metrics), 3);
}

#[test]
fn many_keys_are_checked_for_duplicates_too() {
    let keys: Vec<String> = (0..20).map(|i| format!("\"k{i}\":1")).collect();
    let doc = format!("{{{},\"k7\":2}}", keys.join(","));
    assert!(J::parse(doc.as_bytes()).is_err());
    let doc = format!("{{{}}}", keys.join(","));
    assert!(J::parse(doc.as_bytes()).is_ok());
}

/// `count_records` counts metric data points by `METRIC_KINDS`; they must be
/// exactly the keys of the `metric` table that fill `Metric.data`, which the
/// table itself lists in its unknown-key hint.
#[test]
fn metric_kinds_are_the_members_of_metric_data() {
    let doc = |metric: &str| {
        format!(r#"{{"resourceMetrics":[{{"scopeMetrics":[{{"metrics":[{metric}]}}]}}]}}"#)
    };
    let decode =
        |metric: &str| metrics(&J::parse(doc(metric).as_bytes())?, &UnknownKeys::default());
    let tally = UnknownKeys::default();
    metrics(
        &J::parse(doc(r#"{"zzzzzzzz":1}"#).as_bytes()).unwrap(),
        &tally,
    )
    .unwrap();
    let first = tally.first();
    let (_, keys) = first[0]
        .split_once("the keys of this object are ")
        .expect("the hint lists the keys");
    let keys = keys.strip_suffix(')').unwrap_or(keys);
    let data_keys: Vec<&str> = keys
        .split(", ")
        .filter(|k| {
            // The other keys refuse an object, or leave the data unset.
            decode(&format!(r#"{{"{k}":{{}}}}"#)).is_ok_and(|r| {
                r.resource_metrics[0].scope_metrics[0].metrics[0]
                    .data
                    .is_some()
            })
        })
        .collect();
    assert_eq!(data_keys, METRIC_KINDS);
    let e = decode(r#"{"gauge":{},"summary":{}}"#).expect_err("two kinds");
    assert!(e.problem.contains("alternatives"), "{e}");
}
