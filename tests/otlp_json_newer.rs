//! OTLP/JSON forward compatibility through the real binary: documents whose
//! every object (request, resource, scope, records, every data point kind,
//! exemplars, buckets, quantiles, span events, links, status, every value
//! kind, key-values, entity refs) carries a field of a newer OTLP release
//! are accepted (200), stored exactly as the same documents without those
//! fields, and the ignored keys are counted in
//! `holdfast_otlp_unknown_fields_total`.

#[path = "common/daemon.rs"]
mod daemon;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use daemon::{holdfast, Agent};
use serde_json::{json, Value};

fn any_values() -> Value {
    json!([
        {"key": "s", "value": {"stringValue": "x"}},
        {"key": "b", "value": {"boolValue": true}},
        {"key": "i", "value": {"intValue": "-7"}},
        {"key": "d", "value": {"doubleValue": 1.5}},
        {"key": "y", "value": {"bytesValue": "aGk="}},
        {"key": "a", "value": {"arrayValue": {"values": [{"intValue": 3}, {"stringValue": "z"}]}}},
        {"key": "k", "value": {"kvlistValue": {"values": [{"key": "in", "value": {"boolValue": false}}]}}}
    ])
}

fn resource() -> Value {
    json!({
        "attributes": [{"key": "service.name", "value": {"stringValue": "edge"}}],
        "droppedAttributesCount": 1,
        "entityRefs": [{"type": "host", "idKeys": ["host.name"], "descriptionKeys": []}]
    })
}

fn scope() -> Value {
    json!({"name": "app", "version": "1", "attributes": any_values()})
}

const TRACE: &str = "5b8efff798038103d269b633813fc60c";
const SPAN: &str = "eee19b7ec3c1b174";

fn logs() -> Value {
    json!({"resourceLogs": [{"resource": resource(), "schemaUrl": "https://s/1", "scopeLogs": [{
        "scope": scope(), "schemaUrl": "https://s/2", "logRecords": [{
            "timeUnixNano": "1700000000000000001", "observedTimeUnixNano": "1700000000000000002",
            "severityNumber": 13, "severityText": "WARN",
            "body": {"kvlistValue": {"values": any_values()}},
            "attributes": any_values(), "droppedAttributesCount": 2, "flags": 1,
            "traceId": TRACE, "spanId": SPAN, "eventName": "e"
        }, {"body": {"stringValue": "second"}}]
    }]}]})
}

fn traces() -> Value {
    json!({"resourceSpans": [{"resource": resource(), "scopeSpans": [{
        "scope": scope(), "spans": [{
            "traceId": TRACE, "spanId": SPAN, "traceState": "a=b", "parentSpanId": SPAN,
            "flags": 1, "name": "op", "kind": 2,
            "startTimeUnixNano": "1700000000000000000", "endTimeUnixNano": "1700000000000000100",
            "attributes": any_values(), "droppedAttributesCount": 0,
            "events": [{"timeUnixNano": "1700000000000000050", "name": "ev",
                        "attributes": any_values(), "droppedAttributesCount": 1}],
            "droppedEventsCount": 0,
            "links": [{"traceId": TRACE, "spanId": SPAN, "traceState": "c=d",
                       "attributes": any_values(), "droppedAttributesCount": 0, "flags": 1}],
            "droppedLinksCount": 0,
            "status": {"message": "fine", "code": 1}
        }]
    }]}]})
}

fn metrics() -> Value {
    let exemplar = json!({"filteredAttributes": any_values(), "timeUnixNano": "1700000000000000000",
                          "asDouble": 2.5, "spanId": SPAN, "traceId": TRACE});
    let point = |extra: Value| {
        let mut p = json!({"attributes": any_values(), "startTimeUnixNano": "1700000000000000000",
                           "timeUnixNano": "1700000000000000100"});
        p.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        p
    };
    json!({"resourceMetrics": [{"resource": resource(), "scopeMetrics": [{
        "scope": scope(), "metrics": [
            {"name": "g", "description": "d", "unit": "1", "metadata": any_values(),
             "gauge": {"dataPoints": [point(json!({"asInt": "5", "exemplars": [exemplar], "flags": 0}))]}},
            {"name": "s", "sum": {"dataPoints": [point(json!({"asDouble": 1.5}))],
             "aggregationTemporality": 2, "isMonotonic": true}},
            {"name": "h", "histogram": {"aggregationTemporality": 1, "dataPoints": [point(json!({
                "count": "3", "sum": 4.5, "bucketCounts": ["1", "2"], "explicitBounds": [1.0],
                "exemplars": [exemplar], "min": 0.5, "max": 3.0}))]}},
            {"name": "e", "exponentialHistogram": {"aggregationTemporality": 1, "dataPoints": [point(json!({
                "count": "4", "sum": 8.0, "scale": 2, "zeroCount": "1",
                "positive": {"offset": 1, "bucketCounts": ["1", "2"]},
                "negative": {"offset": -1, "bucketCounts": ["0"]},
                "exemplars": [exemplar], "min": 0.0, "max": 4.0, "zeroThreshold": 0.001}))]}},
            {"name": "q", "summary": {"dataPoints": [point(json!({
                "count": "2", "sum": 3.0,
                "quantileValues": [{"quantile": 0.5, "value": 1.0}, {"quantile": 0.99, "value": 2.0}]}))]}}
        ]
    }]}]})
}

/// Adds a field no OTLP release has to every object in `v`, each holding a
/// different JSON type (nested ones too), and returns how many it added.
fn add_newer_fields(v: &mut Value, n: &mut u64) {
    match v {
        Value::Object(o) => {
            for child in o.values_mut() {
                add_newer_fields(child, n);
            }
            let kinds = [
                json!(null),
                json!(true),
                json!("future"),
                json!(-3),
                json!(2.5),
                json!([1, [2, {"deep": [{}]}]]),
                json!({"nested": {"stringValue": "not a value here", "list": [null, {}]}}),
            ];
            o.insert(
                format!("fieldFromOtlp2030n{n}"),
                kinds[*n as usize % kinds.len()].clone(),
            );
            *n += 1;
        }
        Value::Array(items) => {
            for item in items {
                add_newer_fields(item, n);
            }
        }
        _ => {}
    }
}

/// POSTs a JSON body; the status code and the body.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let status = buf.split_whitespace().nth(1).unwrap().parse().unwrap();
    (status, buf)
}

/// The dump's events from `from` on, without what differs between two
/// requests of the same records (id, sequence number, arrival time).
fn stored(a: &Agent, from: u64, to: u64) -> Vec<Value> {
    let out = holdfast(&[
        "dump",
        "--config",
        a.config_arg(),
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).unwrap();
            let o = v.as_object_mut().unwrap();
            for k in ["id", "seq", "observedTimeUnixNano"] {
                o.remove(k);
            }
            v
        })
        .collect()
}

#[test]
fn fields_of_a_newer_otlp_release_are_ignored_and_counted() {
    let mut a = Agent::new("");
    let otlp: SocketAddr = format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap();
    let text = std::fs::read_to_string(&a.config).unwrap()
        + &format!("[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n");
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();

    for (signal, path, doc, records) in [
        ("logs", "/v1/logs", logs(), 2),
        ("traces", "/v1/traces", traces(), 1),
        ("metrics", "/v1/metrics", metrics(), 5),
    ] {
        let sample =
            format!("holdfast_otlp_unknown_fields_total{{source=\"otlp\",signal=\"{signal}\"}}");
        assert_eq!(
            a.metric(&sample),
            Some(0.0),
            "{sample} exists from the start"
        );
        let seq = || a.metric("holdfast_log_next_sequence").unwrap() as u64;

        let s0 = seq();
        let (status, reply) = post(otlp, path, doc.to_string().as_bytes());
        assert_eq!(status, 200, "{signal} without newer fields: {reply}");
        let s1 = seq();
        assert_eq!(s1 - s0, records);

        let mut newer = doc.clone();
        let mut added = 0;
        add_newer_fields(&mut newer, &mut added);
        let (status, reply) = post(otlp, path, newer.to_string().as_bytes());
        assert_eq!(status, 200, "{signal} with newer fields: {reply}\n{newer}");
        let s2 = seq();
        assert_eq!(s2 - s1, records);

        assert_eq!(
            stored(&a, s1, s2),
            stored(&a, s0, s1),
            "{signal}: stored exactly as without the newer fields"
        );
        assert_eq!(a.metric(&sample), Some(added as f64), "{sample}");
        assert!(added > 20, "{signal}: {added} fields added");
    }

    // The snake_case spelling of a known key is still a mistake.
    let (status, reply) = post(
        otlp,
        "/v1/logs",
        br#"{"resourceLogs":[{"scope_logs":[{"logRecords":[{}]}]}]}"#,
    );
    assert_eq!(status, 400, "{reply}");
    assert!(reply.contains("scopeLogs"), "{reply}");
    assert_eq!(a.stop().code(), Some(0), "{}", a.stderr());
}
