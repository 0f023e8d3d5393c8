//! The `internal_metrics` source: holdfast's own registry appended as OTLP
//! metric points, read back from a `file` sink and compared with what
//! `/metrics` serves.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;

use std::time::Duration;

use daemon::{wait_for, Agent};
use serde_json::Value;

fn name(v: &Value) -> &str {
    v["record"]["name"].as_str().unwrap_or_default()
}

fn point(v: &Value) -> &Value {
    &v["record"]["sum"]["dataPoints"][0]
}

fn value(p: &Value) -> f64 {
    p["asDouble"].as_f64().unwrap_or(f64::NAN)
}

#[test]
fn holdfast_s_own_counters_arrive_as_monotonic_sums_with_the_served_values() {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    std::fs::write(&app, "one\ntwo\nthree\nfour\nfive\n").unwrap();
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"100ms\"\n\n\
         [sources.self]\ntype = \"internal_metrics\"\ninterval = \"1s\"\n\n\
         [sinks.out]\ntype = \"file\"\ninputs = [\"self\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        app.display(),
        a.path("out").display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap();
    std::fs::write(&a.config, format!("{text}\n{body}")).unwrap();
    a.start();
    a.wait_ready();
    wait_for(
        "the file source's five lines counted",
        Duration::from_secs(30),
        || (a.metric("holdfast_source_events_total{source=\"app\"}") == Some(5.0)).then_some(()),
    );
    // The counter as appended: a monotonic cumulative Sum named without
    // `_total`, the source as an attribute, holdfast and this host as the
    // resource.
    let line = wait_for(
        "holdfast_source_events{source=app} = 5 appended",
        Duration::from_secs(30),
        || {
            file_sink_out::lines(&a.path("out")).into_iter().find(|l| {
                name(l) == "holdfast_source_events"
                    && file_sink_out::string_attr(point(l), "source").as_deref() == Some("app")
                    && value(point(l)) == 5.0
            })
        },
    );
    assert_eq!(line["record"]["sum"]["isMonotonic"], true, "{line}");
    assert_eq!(line["record"]["sum"]["aggregationTemporality"], 2);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let resource = &line["resource"];
    assert_eq!(
        file_sink_out::string_attr(resource, "service.name").as_deref(),
        Some("holdfast")
    );
    assert_eq!(
        file_sink_out::string_attr(resource, "service.instance.id").as_deref(),
        Some(host.trim())
    );
    assert_eq!(
        file_sink_out::string_attr(resource, "host.name").as_deref(),
        Some(host.trim())
    );
    assert_eq!(line["source"], "self");

    // The log's own counter, and its appended count as /metrics serves it
    // at some interval.
    let lines = file_sink_out::lines(&a.path("out"));
    let appended: Vec<f64> = lines
        .iter()
        .filter(|l| name(l) == "holdfast_log_appended_events")
        .map(|l| value(point(l)))
        .collect();
    assert!(!appended.is_empty(), "no holdfast_log_appended_events");
    assert!(appended.windows(2).all(|w| w[0] <= w[1]), "{appended:?}");
    let served = a.metric("holdfast_log_appended_events_total").unwrap();
    assert!(
        appended.iter().all(|v| *v <= served),
        "{appended:?} > {served}"
    );
    // A gauge stays a gauge.
    assert!(lines
        .iter()
        .any(|l| name(l) == "holdfast_build_info" && l["record"]["gauge"].is_object()));
    a.stop();
}
