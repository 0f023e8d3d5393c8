//! The real OpenTelemetry Python SDK as the client: `tests/python/otlp_send.py`
//! sends logs, spans and metrics with the protobuf exporter and with the JSON
//! exporter, uncompressed and gzipped, and prints what it sent; the test
//! checks what landed in the log field by field. A last test fills the log
//! first, so the SDK's first attempts get 503 + Retry-After, and checks that
//! the SDK retried until its data was stored.
//!
//! The SDKs live in two venvs made by `tests/python/setup-venvs.sh`
//! (`target/venv-otlp-proto`, `target/venv-otlp-json`), or wherever
//! `HOLDFAST_PYTHON_PROTO` / `HOLDFAST_PYTHON_JSON` point. Without them the
//! tests are skipped with a note, except under CI (`CI` set), where a missing
//! venv is a failure (`tests/common/require.rs`).

mod otlp_http_common;
#[path = "common/require.rs"]
mod require;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use holdfast::event::{Envelope, Record, Signal};
use holdfast::seglog::{StartAt, WhenFull};
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point, Metric};
use otlp_http_common::*;
use serde_json::{json, Value as Json};

fn python(encoding: &str) -> Option<PathBuf> {
    let var = format!("HOLDFAST_PYTHON_{}", encoding.to_uppercase());
    let path = match std::env::var_os(&var) {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join(format!("target/venv-otlp-{encoding}/bin/python")),
    };
    if path.exists() {
        return Some(path);
    }
    require::missing(
        &format!("the OpenTelemetry SDK tests ({encoding} exporter)"),
        &format!(
            "no Python with the OpenTelemetry SDK at {} (or set {var} to a venv's python)",
            path.display()
        ),
        "run tests/python/setup-venvs.sh (.ci/run does, after installing python3 and python3-venv)",
    );
    None
}

/// Runs the sender script; returns what it says it sent.
async fn send(
    python: PathBuf,
    encoding: &str,
    addr: SocketAddr,
    gzip: bool,
    headers: Option<&str>,
) -> Json {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/otlp_send.py");
    let tag = format!("{encoding}-{}", if gzip { "gzip" } else { "none" });
    let mut cmd = Command::new(python);
    cmd.arg(script).arg(encoding).arg(&tag);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("OTEL_") {
            cmd.env_remove(k);
        }
    }
    cmd.env("OTEL_EXPORTER_OTLP_ENDPOINT", format!("http://{addr}"))
        .env(
            "OTEL_EXPORTER_OTLP_COMPRESSION",
            if gzip { "gzip" } else { "none" },
        )
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "15");
    if let Some(h) = headers {
        cmd.env("OTEL_EXPORTER_OTLP_HEADERS", h);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().expect("running python"))
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{tag}: the SDK failed:\n{stderr}");
    let sent: Json = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{tag}: bad output ({e}): {stderr}"));
    assert_eq!(
        sent["compression"],
        if gzip { "gzip" } else { "none" },
        "{tag}"
    );
    sent
}

/// An AnyValue as the JSON the sender printed (bytes as hex).
fn to_json(v: &AnyValue) -> Json {
    match &v.value {
        None => Json::Null,
        Some(Value::StringValue(s)) => json!(s),
        Some(Value::BoolValue(b)) => json!(b),
        Some(Value::IntValue(i)) => json!(i),
        Some(Value::DoubleValue(d)) => json!(d),
        Some(Value::BytesValue(b)) => json!(hex(b)),
        Some(Value::ArrayValue(a)) => Json::Array(a.values.iter().map(to_json).collect()),
        Some(Value::KvlistValue(kv)) => attrs(&kv.values),
        Some(Value::StringValueStrindex(i)) => json!(i),
    }
}

fn attrs(kvs: &[KeyValue]) -> Json {
    Json::Object(
        kvs.iter()
            .map(|kv| {
                (
                    kv.key.clone(),
                    kv.value.as_ref().map_or(Json::Null, to_json),
                )
            })
            .collect(),
    )
}

fn u(v: &Json) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a u64: {v}"))
}

/// The envelopes of one run, by signal, checked for the run's resource.
fn run_envelopes(all: &[Envelope], tag: &str) -> HashMap<Signal, Vec<Envelope>> {
    let mut by = HashMap::<Signal, Vec<Envelope>>::new();
    for e in all {
        let res = e.resource.as_ref().expect("a resource");
        if string_attr(&res.attributes, "run.tag").as_deref() != Some(tag) {
            continue;
        }
        assert_eq!(
            string_attr(&res.attributes, "service.name").unwrap(),
            "holdfast-test"
        );
        assert_eq!(string_attr(&res.attributes, "host.name").unwrap(), "dev1");
        assert_eq!(
            string_attr(&res.attributes, "telemetry.sdk.language").unwrap(),
            "python"
        );
        assert_eq!(e.source, SOURCE);
        assert_eq!(e.id.len(), 16);
        by.entry(e.signal().unwrap()).or_default().push(e.clone());
    }
    by
}

fn check_logs(envs: &[Envelope], sent: &Json, tag: &str) {
    let want = sent["logs"].as_array().unwrap();
    assert_eq!(envs.len(), want.len(), "{tag}: log records");
    for w in want {
        let e = envs
            .iter()
            .find(
                |e| matches!(&e.record, Some(Record::Log(r)) if r.time_unix_nano == u(&w["time"])),
            )
            .unwrap_or_else(|| panic!("{tag}: no record at {}", w["time"]));
        let scope = e.scope.as_ref().unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("holdfast.test.logger", "0.1")
        );
        let Some(Record::Log(r)) = &e.record else {
            unreachable!()
        };
        assert_eq!(r.observed_time_unix_nano, u(&w["observed"]), "{tag}");
        assert_eq!(r.severity_number as u64, u(&w["severity_number"]), "{tag}");
        assert_eq!(
            r.severity_text,
            w["severity_text"].as_str().unwrap(),
            "{tag}"
        );
        assert_eq!(to_json(r.body.as_ref().unwrap()), w["body"], "{tag}: body");
        assert_eq!(attrs(&r.attributes), w["attributes"], "{tag}: attributes");
        assert_eq!(r.event_name, w["event_name"].as_str().unwrap(), "{tag}");
        assert_eq!(hex(&r.trace_id), w["trace_id"].as_str().unwrap(), "{tag}");
        assert_eq!(hex(&r.span_id), w["span_id"].as_str().unwrap(), "{tag}");
        if !r.span_id.is_empty() {
            assert_eq!(r.flags & 1, 1, "{tag}: sampled");
        }
    }
}

fn check_spans(envs: &[Envelope], sent: &Json, tag: &str) {
    let want = sent["spans"].as_array().unwrap();
    assert_eq!(envs.len(), want.len(), "{tag}: spans");
    for w in want {
        let e = envs
            .iter()
            .find(|e| matches!(&e.record, Some(Record::Span(s)) if hex(&s.span_id) == w["span_id"]))
            .unwrap_or_else(|| panic!("{tag}: no span {}", w["span_id"]));
        let scope = e.scope.as_ref().unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("holdfast.test.tracer", "1.2.3")
        );
        let Some(Record::Span(s)) = &e.record else {
            unreachable!()
        };
        assert_eq!(s.name, w["name"].as_str().unwrap(), "{tag}");
        assert_eq!(hex(&s.trace_id), w["trace_id"].as_str().unwrap(), "{tag}");
        assert_eq!(
            hex(&s.parent_span_id),
            w["parent_span_id"].as_str().unwrap(),
            "{tag}"
        );
        assert_eq!(s.kind as u64, u(&w["kind"]), "{tag}");
        assert_eq!(s.start_time_unix_nano, u(&w["start"]), "{tag}");
        assert_eq!(s.end_time_unix_nano, u(&w["end"]), "{tag}");
        assert_eq!(
            s.flags, 0x100,
            "{tag}: the SDK sets only HAS_IS_REMOTE (a local parent)"
        );
        let status = s.status.clone().unwrap_or_default();
        assert_eq!(status.code as u64, u(&w["status_code"]), "{tag}");
        if let Some(m) = w.get("status_message") {
            assert_eq!(status.message, m.as_str().unwrap(), "{tag}");
        }
        if let Some(a) = w.get("attributes") {
            assert_eq!(
                attrs(&s.attributes),
                *a,
                "{tag}: span attributes of every type"
            );
        }
        if let Some(ev) = w.get("event") {
            assert_eq!(s.events.len(), 1, "{tag}");
            assert_eq!(s.events[0].name, ev["name"].as_str().unwrap());
            assert_eq!(s.events[0].time_unix_nano, u(&ev["time"]));
            assert_eq!(attrs(&s.events[0].attributes), json!({"key": ev["key"]}));
        }
        if let Some(l) = w.get("link") {
            assert_eq!(s.links.len(), 1, "{tag}");
            assert_eq!(hex(&s.links[0].trace_id), l["trace_id"].as_str().unwrap());
            assert_eq!(hex(&s.links[0].span_id), l["span_id"].as_str().unwrap());
            assert_eq!(
                attrs(&s.links[0].attributes),
                json!({"link.kind": "follows"})
            );
        }
    }
}

fn number(m: &Metric) -> (f64, Json) {
    let p = match m.data.as_ref().unwrap() {
        Data::Sum(s) => &s.data_points[0],
        Data::Gauge(g) => &g.data_points[0],
        other => panic!("{} is not a number: {other:?}", m.name),
    };
    let v = match p.value.unwrap() {
        number_data_point::Value::AsInt(i) => i as f64,
        number_data_point::Value::AsDouble(d) => d,
    };
    (v, attrs(&p.attributes))
}

fn check_metrics(envs: &[Envelope], sent: &Json, tag: &str) {
    let want = &sent["metrics"];
    let mut by_name = HashMap::<String, Vec<Metric>>::new();
    for e in envs {
        let scope = e.scope.as_ref().unwrap();
        assert_eq!(
            (scope.name.as_str(), scope.version.as_str()),
            ("holdfast.test.meter", "2.0")
        );
        let Some(Record::Metric(m)) = &e.record else {
            unreachable!()
        };
        assert_eq!(points(m), 1, "{tag}: one point per event");
        by_name.entry(m.name.clone()).or_default().push(m.clone());
    }
    let mut names: Vec<_> = by_name.keys().cloned().collect();
    names.sort();
    assert_eq!(
        names,
        [
            "latency",
            "payload.size",
            "queue.depth",
            "requests",
            "temperature"
        ],
        "{tag}"
    );

    let requests = &by_name["requests"];
    assert_eq!(requests.len(), 2, "{tag}: one event per point");
    for m in requests {
        assert_eq!(
            (m.unit.as_str(), m.description.as_str()),
            ("1", "requests served")
        );
        let Some(Data::Sum(s)) = &m.data else {
            panic!("{tag}: requests is a sum")
        };
        assert!(s.is_monotonic, "{tag}");
        assert_eq!(s.aggregation_temporality, 2, "{tag}: cumulative");
        let (v, a) = number(m);
        let route = a["route"].as_str().unwrap();
        assert_eq!(
            v,
            want["requests"][route].as_f64().unwrap(),
            "{tag}: {route}"
        );
    }
    let depth = &by_name["queue.depth"][0];
    let Some(Data::Sum(s)) = &depth.data else {
        panic!()
    };
    assert!(!s.is_monotonic, "{tag}: an up-down counter");
    assert_eq!(number(depth).0, want["queue.depth"].as_f64().unwrap());

    let Some(Data::Histogram(h)) = &by_name["latency"][0].data else {
        panic!("{tag}: latency is a histogram")
    };
    assert_eq!(by_name["latency"][0].unit, "ms");
    let p = &h.data_points[0];
    let w = &want["latency"];
    assert_eq!(p.count, u(&w["count"]));
    assert_eq!(p.sum, w["sum"].as_f64());
    assert_eq!(p.min, w["min"].as_f64());
    assert_eq!(p.max, w["max"].as_f64());
    assert_eq!(p.bucket_counts.iter().sum::<u64>(), p.count);
    assert_eq!(p.bucket_counts.len(), p.explicit_bounds.len() + 1);

    let Some(Data::ExponentialHistogram(h)) = &by_name["payload.size"][0].data else {
        panic!("{tag}: payload.size is an exponential histogram")
    };
    let p = &h.data_points[0];
    let w = &want["payload.size"];
    assert_eq!(p.count, u(&w["count"]));
    assert_eq!(p.sum, w["sum"].as_f64());
    let buckets: u64 = p.positive.as_ref().unwrap().bucket_counts.iter().sum();
    assert_eq!(buckets + p.zero_count, p.count, "{tag}: buckets");

    let t = &by_name["temperature"][0];
    assert!(matches!(t.data, Some(Data::Gauge(_))), "{tag}: a gauge");
    assert_eq!(
        number(t),
        (
            want["temperature"].as_f64().unwrap(),
            json!({"room": "lab"})
        )
    );
}

async fn sdk_round_trip(encoding: &str) {
    let Some(py) = python(encoding) else { return };
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "sdk-token\n").unwrap();
    let a = start_with(|o, _| o.bearer_token_file = Some(token)).await;
    // The SDK sends the token from OTEL_EXPORTER_OTLP_HEADERS (URL-encoded).
    let auth = Some("Authorization=Bearer%20sdk-token");
    for gzip in [false, true] {
        let sent = send(py.clone(), encoding, a.addr, gzip, auth).await;
        let tag = format!("{encoding}-{}", if gzip { "gzip" } else { "none" });
        let all: Vec<Envelope> = a.events().into_iter().map(|(_, e)| e).collect();
        let by = run_envelopes(&all, &tag);
        check_logs(&by[&Signal::Logs], &sent, &tag);
        check_spans(&by[&Signal::Traces], &sent, &tag);
        check_metrics(&by[&Signal::Metrics], &sent, &tag);
    }
    let text = a.metrics.encode().unwrap();
    assert_eq!(
        metric_value(
            &text,
            "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"unauthorized\"}"
        ),
        None,
        "the SDK sent the token"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_with_the_protobuf_exporter() {
    sdk_round_trip("proto").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_with_the_json_exporter() {
    sdk_round_trip("json").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_retries_after_503_until_the_log_has_room() {
    let Some(py) = python("proto") else { return };
    let a = start_with(|_, l| {
        l.segment_bytes = 64 << 10;
        l.max_bytes = 128 << 10;
        l.when_full = WhenFull::Block;
    })
    .await;
    // Fill the log; the harness's consumer holds every segment.
    let mut c = a.client().await;
    let body = fixture("logs.pb");
    loop {
        let r = c
            .post("/v1/logs", &[("content-type", PROTOBUF)], body.clone())
            .await;
        if r.status == 503 {
            break;
        }
        assert_eq!(r.status, 200);
    }
    let before = a.next_seq();
    let addr = a.addr;
    let sender = tokio::spawn(send(py, "proto", addr, true, None));
    // Let the SDK meet the full log, then free it.
    let metrics = a.metrics.clone();
    for _ in 0..100 {
        let text = metrics.encode().unwrap();
        let full = metric_value(
            &text,
            "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"log_full\"}",
        );
        if full.unwrap_or(0.0) >= 2.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = metrics.encode().unwrap();
    let full = metric_value(
        &text,
        "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"log_full\"}",
    );
    assert!(
        full.unwrap_or(0.0) >= 2.0,
        "the SDK met the full log: {full:?}"
    );
    let audit = a.log.consumer(AUDIT, StartAt::Oldest).unwrap();
    audit.commit(before).unwrap();
    let sent = tokio::time::timeout(Duration::from_secs(30), sender)
        .await
        .expect("the SDK finished")
        .unwrap();
    let all: Vec<Envelope> = a.events_since(before);
    let by = run_envelopes(&all, "proto-gzip");
    check_logs(&by[&Signal::Logs], &sent, "retried");
    check_spans(&by[&Signal::Traces], &sent, "retried");
    check_metrics(&by[&Signal::Metrics], &sent, "retried");
}
