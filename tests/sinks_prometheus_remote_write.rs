//! The `prometheus_remote_write` sink through the real binary: metric
//! points pushed to an `otlp_http` source arrive in a real Prometheus
//! (2.42, `tests/common/prometheus.rs`) with the names, labels, values and
//! times the OpenTelemetry mapping gives; an outage delays them without
//! losing or doubling any; samples older than the receiver's window are
//! quarantined and counted while the rest of their request is stored. A
//! small receiver in the test answers what Prometheus cannot be made to
//! (429 with `Retry-After`, 500, 400, 401) and shows what arrives on the
//! wire (snappy protobuf, headers, credentials).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/prometheus.rs"]
mod prometheus;
#[path = "common/remote_write.rs"]
mod remote_write;
#[path = "common/require.rs"]
mod require;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point::Buckets, metric, number_data_point,
    summary_data_point::ValueAtQuantile, AggregationTemporality, ExponentialHistogram,
    ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use daemon::{free_port, wait_for, Agent};
use prometheus::Prometheus;
use remote_write::{decode, Sample, Scripted};

// ------------------------------------------------------------ the agent

/// An agent with an `otlp_http` source on a port of its own and a
/// `prometheus_remote_write` sink at `endpoint` with `extra` keys.
fn agent(endpoint: &str, extra: &str) -> (Agent, SocketAddr) {
    let otlp: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let a = Agent::new(&format!(
        "[sources.app]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.prom]\ntype = \"prometheus_remote_write\"\ninputs = [\"app\"]\n\
         endpoint = \"{endpoint}\"\nbatch_timeout = \"50ms\"\nbackoff_initial = \"100ms\"\n\
         backoff_max = \"1s\"\n{extra}"
    ));
    (a, otlp)
}

/// POSTs an OTLP protobuf body to the agent's source; returns the status.
fn post(addr: SocketAddr, path: &str, body: &[u8]) -> u16 {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).unwrap().parse().unwrap()
}

fn post_metrics(addr: SocketAddr, metrics: Vec<Metric>) {
    let req = ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(resource()),
            scope_metrics: vec![ScopeMetrics {
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    assert_eq!(post(addr, "/v1/metrics", &req.encode_to_vec()), 200);
}

fn post_log(addr: SocketAddr) {
    let req = ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(resource()),
            scope_logs: vec![ScopeLogs {
                log_records: vec![LogRecord {
                    body: Some(AnyValue {
                        value: Some(any_value::Value::StringValue("not a metric".into())),
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    assert_eq!(post(addr, "/v1/logs", &req.encode_to_vec()), 200);
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn resource() -> Resource {
    Resource {
        attributes: vec![
            kv("service.name", "edge-app"),
            kv("service.instance.id", "dev-7"),
            kv("host.name", "dev-7"),
        ],
        ..Default::default()
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn number(t_ms: u64, v: f64, attrs: &[(&str, &str)]) -> NumberDataPoint {
    NumberDataPoint {
        time_unix_nano: t_ms * 1_000_000,
        value: Some(number_data_point::Value::AsDouble(v)),
        attributes: attrs.iter().map(|(k, v)| kv(k, v)).collect(),
        ..Default::default()
    }
}

fn gauge(name: &str, unit: &str, p: NumberDataPoint) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: vec![p],
        })),
        ..Default::default()
    }
}

fn sum(name: &str, unit: &str, monotonic: bool, p: NumberDataPoint) -> Metric {
    Metric {
        name: name.into(),
        unit: unit.into(),
        data: Some(metric::Data::Sum(Sum {
            data_points: vec![p],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
            is_monotonic: monotonic,
        })),
        ..Default::default()
    }
}

/// A counter of `sink` in the agent's /metrics (0 when absent).
fn counter(a: &Agent, family: &str, labels: &str) -> f64 {
    a.metric(&format!("{family}{{{labels}}}")).unwrap_or(0.0)
}

/// The one series `selector` as (ms, value) samples between `from_ms` and
/// now.
fn samples(p: &Prometheus, selector: &str, from_ms: u64) -> Vec<(i64, f64)> {
    let to = now_ms() as f64 / 1000.0 + 1.0;
    let mut s = p.samples(selector, from_ms as f64 / 1000.0 - 1.0, to);
    assert!(s.len() <= 1, "{selector}: several series {s:?}");
    s.pop().unwrap_or_default()
}

fn wait_samples(
    p: &Prometheus,
    a: &Agent,
    selector: &str,
    from_ms: u64,
    n: usize,
) -> Vec<(i64, f64)> {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let s = samples(p, selector, from_ms);
        if s.len() >= n {
            return s;
        }
        assert!(
            Instant::now() < end,
            "{selector}: {} of {n} samples within 30s: {s:?}\nagent:\n{}\nprometheus:\n{}",
            s.len(),
            a.stderr(),
            p.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ------------------------------------------------------------ against Prometheus

#[test]
fn every_kind_of_point_arrives_with_its_name_labels_value_and_time() {
    if !prometheus::available("every_kind_of_point_arrives") {
        return;
    }
    let p = Prometheus::started();
    let (mut a, otlp) = agent(&p.write_url(), "");
    a.start();
    a.wait_ready();
    let t = now_ms() - 30_000;
    let histogram = Metric {
        name: "http.server.duration".into(),
        unit: "ms".into(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: vec![HistogramDataPoint {
                time_unix_nano: t * 1_000_000,
                count: 6,
                sum: Some(71.5),
                bucket_counts: vec![1, 2, 3],
                explicit_bounds: vec![5.0, 25.0],
                attributes: vec![kv("http.route", "/api")],
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    };
    let summary = Metric {
        name: "rpc_latency_seconds".into(),
        data: Some(metric::Data::Summary(Summary {
            data_points: vec![SummaryDataPoint {
                time_unix_nano: t * 1_000_000,
                count: 4,
                sum: 2.0,
                quantile_values: vec![
                    ValueAtQuantile {
                        quantile: 0.5,
                        value: 0.25,
                    },
                    ValueAtQuantile {
                        quantile: 0.99,
                        value: 1.5,
                    },
                ],
                ..Default::default()
            }],
        })),
        ..Default::default()
    };
    let expo = Metric {
        name: "expo".into(),
        data: Some(metric::Data::ExponentialHistogram(ExponentialHistogram {
            data_points: vec![ExponentialHistogramDataPoint {
                time_unix_nano: t * 1_000_000,
                count: 1,
                positive: Some(Buckets {
                    offset: 0,
                    bucket_counts: vec![1],
                }),
                ..Default::default()
            }],
            aggregation_temporality: AggregationTemporality::Cumulative as i32,
        })),
        ..Default::default()
    };
    post_metrics(
        otlp,
        vec![
            gauge(
                "system.memory.usage",
                "By",
                number(t, 1024.0, &[("state", "used")]),
            ),
            sum(
                "system.cpu.time",
                "s",
                true,
                number(t, 12.5, &[("cpu.mode", "idle")]),
            ),
            sum("queue.depth", "{items}", false, number(t, -3.0, &[])),
            histogram,
            summary,
            expo,
        ],
    );
    post_log(otlp);

    let id = "instance=\"dev-7\",job=\"edge-app\"";
    let want: &[(String, f64)] = &[
        (
            format!("system_memory_usage_bytes{{{id},state=\"used\"}}"),
            1024.0,
        ),
        (
            format!("system_cpu_time_seconds_total{{{id},cpu_mode=\"idle\"}}"),
            12.5,
        ),
        (format!("queue_depth{{{id}}}"), -3.0),
        (
            format!(
                "http_server_duration_milliseconds_bucket{{{id},http_route=\"/api\",le=\"5\"}}"
            ),
            1.0,
        ),
        (
            format!(
                "http_server_duration_milliseconds_bucket{{{id},http_route=\"/api\",le=\"25\"}}"
            ),
            3.0,
        ),
        (
            format!(
                "http_server_duration_milliseconds_bucket{{{id},http_route=\"/api\",le=\"+Inf\"}}"
            ),
            6.0,
        ),
        (
            format!("http_server_duration_milliseconds_sum{{{id},http_route=\"/api\"}}"),
            71.5,
        ),
        (
            format!("http_server_duration_milliseconds_count{{{id},http_route=\"/api\"}}"),
            6.0,
        ),
        (
            format!("rpc_latency_seconds{{{id},quantile=\"0.5\"}}"),
            0.25,
        ),
        (
            format!("rpc_latency_seconds{{{id},quantile=\"0.99\"}}"),
            1.5,
        ),
        (format!("rpc_latency_seconds_sum{{{id}}}"), 2.0),
        (format!("rpc_latency_seconds_count{{{id}}}"), 4.0),
    ];
    for (selector, value) in want {
        let s = wait_samples(&p, &a, selector, t, 1);
        assert_eq!(s, [(t as i64, *value)], "{selector}");
    }
    // Exactly these labels: nothing from the resource but job and instance.
    let series = p.series("{__name__=\"system_memory_usage_bytes\"}");
    assert_eq!(
        series,
        [
            serde_json::json!({"__name__": "system_memory_usage_bytes", "instance": "dev-7",
            "job": "edge-app", "state": "used"})
        ]
    );
    assert!(p.series("{__name__=~\"expo.*\"}").is_empty());
    let sink = "sink=\"prom\"";
    let dropped = |reason: &str| {
        counter(
            &a,
            "holdfast_dropped_events_total",
            &format!("{sink},reason=\"{reason}\""),
        )
    };
    wait_for(
        "the dropped points counted",
        Duration::from_secs(10),
        || {
            (dropped("exponential_histogram") == 1.0 && dropped("not_a_metric") == 1.0)
                .then_some(())
        },
    );
    assert_eq!(
        counter(&a, "holdfast_sink_sent_events_total", "sink=\"prom\""),
        5.0,
        "five points delivered (the exponential histogram and the log record are not)"
    );
    assert!(a.stop().success());
}

#[test]
fn an_outage_delays_every_sample_and_doubles_none() {
    if !prometheus::available("an_outage_delays_every_sample") {
        return;
    }
    let mut p = Prometheus::started();
    let (mut a, otlp) = agent(&p.write_url(), "");
    a.start();
    a.wait_ready();
    let t0 = now_ms() - 60_000;
    let send = |from: u64, to: u64| {
        for i in from..to {
            post_metrics(
                otlp,
                vec![
                    sum("requests", "", true, number(t0 + i * 1000, i as f64, &[])),
                    gauge(
                        "temperature",
                        "Cel",
                        number(t0 + i * 1000, 20.0 + i as f64, &[]),
                    ),
                ],
            );
        }
    };
    send(0, 10);
    wait_samples(&p, &a, "requests_total", t0, 10);
    p.kill9();
    send(10, 30);
    wait_for(
        "the sink to find Prometheus gone",
        Duration::from_secs(20),
        || {
            (counter(
                &a,
                "holdfast_sink_retries_total",
                "sink=\"prom\",reason=\"connect\"",
            ) > 0.0)
                .then_some(())
        },
    );
    p.start();
    let requests = wait_samples(&p, &a, "requests_total", t0, 30);
    let temperature = wait_samples(&p, &a, "temperature_celsius", t0, 30);
    let want: Vec<(i64, f64)> = (0..30)
        .map(|i| ((t0 + i * 1000) as i64, i as f64))
        .collect();
    assert_eq!(requests, want);
    assert_eq!(temperature.len(), 30, "{temperature:?}");
    // Nothing quarantined: no sample came twice or out of order.
    assert_eq!(
        counter(
            &a,
            "holdfast_sink_quarantined_events_total",
            "sink=\"prom\",reason=\"out_of_order\""
        ),
        0.0
    );
    assert!(a.stop().success());
}

/// What a sample three hours old does to a request against a Prometheus
/// whose head holds the present: Prometheus answers `status` with `error`
/// for the whole request; the sample is found and quarantined under
/// `too_old` with those words, and the request's other samples are stored.
fn an_old_sample(mut p: Prometheus, status: u16, error: &str) {
    let reason = "too_old";
    p.start();
    let (mut a, otlp) = agent(&p.write_url(), "");
    a.start();
    a.wait_ready();
    let now = now_ms();
    // The head's newest sample is the present: the window is behind it.
    post_metrics(
        otlp,
        vec![gauge("fresh", "", number(now - 10_000, 1.0, &[]))],
    );
    wait_samples(&p, &a, "fresh", now - 20_000, 1);
    let old = now - 3 * 3600 * 1000;
    let mut points = vec![gauge("late", "", number(old, 7.0, &[]))];
    for i in 0..7 {
        let value = i as f64;
        points.push(gauge(
            "ontime",
            "",
            number(now - 5000 + i, value, &[("i", &i.to_string())]),
        ));
    }
    post_metrics(otlp, points);
    for i in 0..7 {
        wait_samples(&p, &a, &format!("ontime{{i=\"{i}\"}}"), now - 10_000, 1);
    }
    let labels = format!("sink=\"prom\",reason=\"{reason}\"");
    wait_for(
        "the old sample quarantined",
        Duration::from_secs(20),
        || (counter(&a, "holdfast_sink_quarantined_events_total", &labels) == 1.0).then_some(()),
    );
    assert_eq!(
        counter(&a, "holdfast_sink_rejected_events_total", &labels),
        1.0
    );
    assert!(samples(&p, "late", old).is_empty());
    // The quarantine holds it with the receiver's words.
    let out = daemon::holdfast(&["quarantine", "list", "--config", a.config_arg(), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let q: serde_json::Value = serde_json::from_str(text.trim())
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        (
            q["kind"].as_str(),
            q["status"].as_u64(),
            q["error"].as_str()
        ),
        (Some(reason), Some(status as u64), Some(error)),
        "{text}"
    );
    eprintln!(
        "{reason}: {} events sent again in halves to find 1 old sample among 8; quarantined: {text}",
        counter(&a, "holdfast_sink_retries_total", "sink=\"prom\",reason=\"refused_split\"")
    );
    assert!(a.stop().success());
}

#[test]
fn a_sample_older_than_the_head_block_is_quarantined_as_too_old() {
    if !prometheus::available("a_sample_older_than_the_head_block") {
        return;
    }
    // Prometheus 2.42's answer without an out-of-order window.
    an_old_sample(
        Prometheus::without_out_of_order_window(),
        400,
        "out of bounds",
    );
}

#[test]
fn a_sample_older_than_the_out_of_order_window_is_quarantined_as_too_old() {
    if !prometheus::available("a_sample_older_than_the_out_of_order_window") {
        return;
    }
    // Prometheus 2.39-2.48 answer 500 for a sample older than the window
    // (fixed in 2.49 to 400): retried, it would never end.
    an_old_sample(Prometheus::new(), 500, "too old sample");
}

#[test]
fn a_backlog_older_than_the_out_of_order_window_is_settled_in_few_requests() {
    if !prometheus::available("a_backlog_older_than_the_out_of_order_window") {
        return;
    }
    let p = Prometheus::started();
    let (mut a, otlp) = agent(&p.write_url(), "");
    a.start();
    a.wait_ready();
    let now = now_ms();
    post_metrics(
        otlp,
        vec![gauge("fresh", "", number(now - 10_000, 1.0, &[]))],
    );
    wait_samples(&p, &a, "fresh", now - 20_000, 1);
    // An outage's worth of samples, all three hours old, in time order.
    let old = now - 3 * 3600 * 1000;
    let n = 1000u64;
    let points = (0..n)
        .map(|i| {
            gauge(
                "late",
                "",
                number(old + i * 10, 1.0, &[("i", &i.to_string())]),
            )
        })
        .collect();
    post_metrics(otlp, points);
    let labels = "sink=\"prom\",reason=\"too_old\"";
    wait_for("the backlog quarantined", Duration::from_secs(60), || {
        (counter(&a, "holdfast_sink_quarantined_events_total", labels) == n as f64).then_some(())
    });
    // Each refusal settles every sample no newer than its oldest, and the
    // newer half goes first: a few requests per batch of 500, not two per
    // sample.
    let refused = counter(
        &a,
        "holdfast_sink_requests_total",
        "sink=\"prom\",status=\"5xx\"",
    );
    assert!(
        refused <= 40.0,
        "{refused} refused requests for {n} old samples"
    );
    assert!(a.stop().success());
}

// ------------------------------------------------------------ a scripted receiver

#[test]
fn pushback_and_failures_are_retried_with_the_receivers_wait_and_the_wire_is_remote_write() {
    let r = Scripted::start(vec![
        (429, "Retry-After: 2\r\n", "slow down"),
        (500, "", "internal error"),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "s3cret\n").unwrap();
    let (mut a, otlp) = agent(
        &r.url(),
        &format!(
            "auth.user = \"edge\"\nauth.password_file = \"{}\"\n\
             headers = {{ \"X-Scope-OrgID\" = \"plant-3\" }}\n",
            password.display()
        ),
    );
    a.start();
    a.wait_ready();
    let t = now_ms();
    post_metrics(otlp, vec![gauge("g", "", number(t, 2.5, &[("k", "v")]))]);
    wait_for("the first request", Duration::from_secs(30), || {
        (!r.seen().is_empty()).then_some(())
    });
    // A newer sample of the same series while the first waits out the 429:
    // it must not overtake it (a receiver without an out-of-order window
    // would then refuse the first as out of order).
    post_metrics(
        otlp,
        vec![gauge("g", "", number(t + 1000, 3.5, &[("k", "v")]))],
    );
    let seen = wait_for("three requests", Duration::from_secs(30), || {
        let s = r.seen();
        (s.len() >= 3).then_some(s)
    });
    // The 429's Retry-After: 2 s, whatever the 100 ms backoff.
    let waited = seen[1].at - seen[0].at;
    assert!(waited >= Duration::from_millis(1900), "{waited:?}");
    let first = Sample {
        value: 2.5,
        timestamp: t as i64,
    };
    for (i, s) in seen.iter().enumerate() {
        assert_eq!(s.header("Content-Encoding"), Some("snappy"));
        assert_eq!(s.header("Content-Type"), Some("application/x-protobuf"));
        assert_eq!(s.header("X-Prometheus-Remote-Write-Version"), Some("0.1.0"));
        assert!(s.header("User-Agent").unwrap().starts_with("holdfast/"));
        // base64("edge:s3cret")
        assert_eq!(s.header("Authorization"), Some("Basic ZWRnZTpzM2NyZXQ="));
        assert_eq!(s.header("X-Scope-OrgID"), Some("plant-3"));
        let req = decode(&s.body);
        assert_eq!(req.timeseries.len(), 1);
        let names: Vec<(&str, &str)> = req.timeseries[0]
            .labels
            .iter()
            .map(|l| (l.name.as_str(), l.value.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("__name__", "g"),
                ("instance", "dev-7"),
                ("job", "edge-app"),
                ("k", "v")
            ]
        );
        // The first sample leads every request until it is accepted.
        if i < 3 {
            assert_eq!(req.timeseries[0].samples[0], first, "request {i}");
        }
    }
    let sink = "sink=\"prom\"";
    wait_for(
        "delivered after the retries",
        Duration::from_secs(10),
        || (counter(&a, "holdfast_sink_sent_events_total", sink) == 2.0).then_some(()),
    );
    assert_eq!(
        counter(
            &a,
            "holdfast_sink_retries_total",
            &format!("{sink},reason=\"http_429\"")
        ),
        1.0
    );
    assert_eq!(
        counter(
            &a,
            "holdfast_sink_retries_total",
            &format!("{sink},reason=\"http_5xx\"")
        ),
        // Every event of the request the 500 answered.
        decode(&seen[1].body).timeseries[0].samples.len() as f64
    );
    assert!(a.stop().success());
}

#[test]
fn a_refused_request_is_quarantined_with_the_receivers_words_and_refused_credentials_keep_it() {
    let r = Scripted::start(vec![
        (401, "", "bad credentials"),
        (
            400,
            "",
            "invalid metric name: label set has duplicate names",
        ),
    ]);
    // A bearer token and a tenant header from files, as Mimir wants them.
    let dir = tempfile::tempdir().unwrap();
    let (token, tenant) = (dir.path().join("token"), dir.path().join("tenant"));
    std::fs::write(&token, "t0ken\n").unwrap();
    std::fs::write(&tenant, "plant-9\n").unwrap();
    let (mut a, otlp) = agent(
        &r.url(),
        &format!(
            "auth.bearer_token_file = \"{}\"\nheaders_file = {{ \"X-Scope-OrgID\" = \"{}\" }}\n",
            token.display(),
            tenant.display()
        ),
    );
    a.start();
    a.wait_ready();
    post_metrics(otlp, vec![gauge("g", "", number(now_ms(), 1.0, &[]))]);
    let sink = "sink=\"prom\"";
    wait_for("the 400 quarantined", Duration::from_secs(60), || {
        (counter(
            &a,
            "holdfast_sink_quarantined_events_total",
            &format!("{sink},reason=\"rejected\""),
        ) == 1.0)
            .then_some(())
    });
    // 401 held the event (sent again), 400 quarantined it.
    let seen = r.seen();
    assert_eq!(seen.len(), 2);
    for s in &seen {
        assert_eq!(s.header("Authorization"), Some("Bearer t0ken"));
        assert_eq!(s.header("X-Scope-OrgID"), Some("plant-9"));
    }
    assert_eq!(counter(&a, "holdfast_sink_auth_failures_total", sink), 1.0);
    let out = daemon::holdfast(&["quarantine", "list", "--config", a.config_arg(), "--json"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("duplicate names"), "{text}");
    assert!(a.stop().success());
}
