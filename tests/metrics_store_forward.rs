//! Issue 30, end to end with real servers: the device's metrics, a local
//! Prometheus target and holdfast's own counts go through the log to a real
//! Prometheus by remote write, and the log carries them through the outages
//! a pull-only or agent-mode setup loses:
//!
//! * store and forward: Prometheus down for 60 s (holdfast killed -9 once
//!   in the middle) while `host_metrics` and `prometheus_scrape` run; after
//!   its return every sample of the gap is queryable, none twice, none
//!   that was not collected;
//! * `host_metrics` through remote write agrees with `/proc`;
//! * `internal_metrics`: `holdfast_log_evicted_events_total` is queryable in
//!   Prometheus after an eviction, from a device nobody scrapes.
//!
//! Ground truth is a `file` sink beside the remote-write sink on the same
//! inputs: what the log holds, point by point.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;
#[path = "common/prometheus.rs"]
mod prometheus;
#[path = "common/require.rs"]
mod require;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use daemon::{wait_for, Agent};
use file_sink_out::Tail;
use prometheus::{NodeExporter, Prometheus};
use serde_json::Value;

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn now_ms() -> i64 {
    (now_s() * 1000.0) as i64
}

/// A file-sink line's metric name and its one data point, if it is a
/// metric point.
fn point(line: &Value) -> Option<(&str, &Value)> {
    let record = &line["record"];
    let name = record["name"].as_str()?;
    for kind in ["gauge", "sum", "histogram", "summary"] {
        if let Some(p) = record[kind]["dataPoints"].get(0) {
            return Some((name, p));
        }
    }
    None
}

/// A point's time in milliseconds (Prometheus' resolution).
fn point_ms(p: &Value) -> i64 {
    let ns: u64 = p["timeUnixNano"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a point's timeUnixNano");
    (ns / 1_000_000) as i64
}

/// What the log handed the file sink: per metric name, the distinct
/// timestamps (ms) of its points whose attributes satisfy `keep`.
struct Truth {
    tail: Tail,
    lines: Vec<Value>,
}

impl Truth {
    fn new(agent: &Agent) -> Truth {
        Truth {
            tail: Tail::new(&agent.path("out")),
            lines: Vec::new(),
        }
    }

    fn refresh(&mut self) {
        self.lines.extend(self.tail.new_lines());
    }

    fn times(&mut self, name: &str) -> BTreeSet<i64> {
        self.refresh();
        self.lines
            .iter()
            .filter_map(point)
            .filter(|(n, _)| *n == name)
            .map(|(_, p)| point_ms(p))
            .collect()
    }
}

/// Every sample Prometheus holds of one series between two times (ms),
/// as timestamps; panics if the selector finds more than one series.
fn stored_times(p: &Prometheus, selector: &str, from_ms: i64, to_ms: i64) -> Vec<i64> {
    let series = p.samples(
        selector,
        from_ms as f64 / 1000.0 - 1.0,
        to_ms as f64 / 1000.0 + 1.0,
    );
    assert!(series.len() <= 1, "{selector}: {} series", series.len());
    series
        .into_iter()
        .flatten()
        .map(|(t, _)| t)
        .filter(|t| (from_ms..=to_ms).contains(t))
        .collect()
}

fn config(p: &Prometheus, exporter: &NodeExporter, agent_out: &str) -> String {
    format!(
        r#"
[sources.host]
type = "host_metrics"
interval = "1s"

[sources.scrape]
type = "prometheus_scrape"
targets = ["{target}"]
interval = "1s"
timeout = "900ms"

[sinks.prom]
type = "prometheus_remote_write"
inputs = ["host", "scrape"]
endpoint = "{write}"
request_timeout = "2s"
backoff_initial = "50ms"
backoff_max = "1s"

[sinks.truth]
type = "file"
inputs = ["host", "scrape"]
path = "{agent_out}"
"#,
        target = exporter.url(),
        write = p.write_url(),
    )
}

#[test]
fn every_sample_of_a_60_s_outage_is_delivered_once_across_a_kill_9() {
    if !prometheus::available("metrics_store_forward") {
        return;
    }
    let mut prom = Prometheus::started();
    let exporter = NodeExporter::started();
    let mut agent = Agent::new("");
    let out = agent.path("out");
    std::fs::write(
        &agent.config,
        std::fs::read_to_string(&agent.config).unwrap()
            + &config(&prom, &exporter, &out.display().to_string()),
    )
    .unwrap();
    agent.start();
    agent.wait_ready();
    let mut truth = Truth::new(&agent);
    let up = format!(
        "up{{instance=\"127.0.0.1:{}\",job=\"scrape\"}}",
        exporter.port
    );
    let uptime = "system_uptime_seconds{job=\"holdfast\"}";

    // Flowing before the outage.
    let start_ms = (now_s() * 1000.0) as i64;
    wait_for(
        "the first samples in Prometheus",
        Duration::from_secs(60),
        || {
            (stored_times(&prom, uptime, start_ms - 60_000, now_ms() + 1000).len() >= 3
                && stored_times(&prom, &up, start_ms - 60_000, now_ms() + 1000).len() >= 3)
                .then_some(())
        },
    );

    // The outage: 30 collections, kill -9, 30 more.
    prom.kill9();
    let down_ms = (now_s() * 1000.0) as i64;
    let collected_since =
        |truth: &mut Truth, from: i64| truth.times("system.uptime").range(from..).count();
    wait_for(
        "30 collections during the outage",
        Duration::from_secs(90),
        || (collected_since(&mut truth, down_ms) >= 30).then_some(()),
    );
    agent.kill9();
    agent.start();
    agent.wait_ready();
    wait_for(
        "60 collections during the outage",
        Duration::from_secs(90),
        || (collected_since(&mut truth, down_ms) >= 60).then_some(()),
    );
    prom.start();
    let back_ms = (now_s() * 1000.0) as i64;

    // Delivered: Prometheus holds the last point the log had at its return.
    let last_up = *truth.times("up").range(..back_ms).next_back().unwrap();
    let last_uptime = *truth
        .times("system.uptime")
        .range(..back_ms)
        .next_back()
        .unwrap();
    wait_for(
        "the backlog of the outage in Prometheus",
        Duration::from_secs(120),
        || {
            (stored_times(&prom, &up, last_up, last_up).len() == 1
                && stored_times(&prom, uptime, last_uptime, last_uptime).len() == 1)
                .then_some(())
        },
    );

    for (name, selector, last) in [
        ("up", up.as_str(), last_up),
        ("system.uptime", uptime, last_uptime),
    ] {
        let collected: Vec<i64> = truth.times(name).range(start_ms..=last).copied().collect();
        let stored = stored_times(&prom, selector, start_ms, last);
        let gap = collected
            .iter()
            .filter(|t| (down_ms..back_ms).contains(t))
            .count();
        assert!(
            gap >= 55,
            "{name}: only {gap} points collected in the outage"
        );
        let distinct: BTreeSet<i64> = stored.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            stored.len(),
            "{name}: a sample stored twice"
        );
        let missing: Vec<_> = collected.iter().filter(|t| !distinct.contains(t)).collect();
        let extra: Vec<_> = distinct.iter().filter(|t| !collected.contains(t)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{name}: {} collected, {} stored; missing {:?}; not collected {:?}\n{}",
            collected.len(),
            stored.len(),
            &missing[..missing.len().min(10)],
            &extra[..extra.len().min(10)],
            agent.stderr()
        );
    }
    agent.stop();
}

/// `/proc/meminfo`'s `MemTotal` in bytes.
fn mem_total_bytes() -> f64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib: f64 = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("MemTotal in /proc/meminfo");
    kib * 1024.0
}

#[test]
fn host_metrics_through_remote_write_agree_with_proc() {
    if !prometheus::available("metrics_store_forward") {
        return;
    }
    let prom = Prometheus::started();
    let mut agent = Agent::new(&format!(
        r#"
[sources.host]
type = "host_metrics"
interval = "1s"

[sinks.prom]
type = "prometheus_remote_write"
inputs = ["host"]
endpoint = "{}"
"#,
        prom.write_url()
    ));
    agent.start();
    agent.wait_ready();
    // Memory: the states of system.memory.usage add up to MemTotal.
    let total = mem_total_bytes();
    let sum = wait_for(
        "memory usage in Prometheus",
        Duration::from_secs(60),
        || {
            let r = prom.query("sum by (instance) (system_memory_usage_bytes{job=\"holdfast\"})");
            r.first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok())
        },
    );
    assert!(
        (sum - total).abs() / total < 0.01,
        "system_memory_usage_bytes sums to {sum}, MemTotal is {total}"
    );
    // CPU: a monotonic counter per logical CPU and mode, with the units of
    // the name.
    let cpus = std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
        .count();
    let series = wait_for("CPU time in Prometheus", Duration::from_secs(60), || {
        let s = prom.series("system_cpu_time_seconds_total{job=\"holdfast\"}");
        (!s.is_empty()).then_some(s)
    });
    let logical: BTreeSet<String> = series
        .iter()
        .filter_map(|s| s["cpu_logical_number"].as_str().map(String::from))
        .collect();
    assert_eq!(logical.len(), cpus, "{series:?}");
    // Uptime: within a few seconds of /proc/uptime.
    let proc_uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let r = prom.query("system_uptime_seconds{job=\"holdfast\"}");
    let v: f64 = r[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        (v - proc_uptime).abs() < 10.0,
        "uptime {v} vs /proc/uptime {proc_uptime}"
    );
    agent.stop();
}

#[test]
fn internal_metrics_deliver_evictions_from_a_device_nobody_scrapes() {
    if !prometheus::available("metrics_store_forward") {
        return;
    }
    let prom = Prometheus::started();
    let mut agent = Agent::new("");
    let logs = agent.path("app.log");
    std::fs::write(&logs, "").unwrap();
    // A sink whose receiver never answers holds the log back; at a 1 MiB
    // budget under drop_oldest, lines written past it are evicted for it.
    let dead = daemon::free_port();
    std::fs::write(
        &agent.config,
        std::fs::read_to_string(&agent.config).unwrap()
            + &format!(
                r#"
[log]
segment_size = "256KiB"
max_bytes = "1MiB"
when_full = "drop_oldest"

[sources.app]
type = "file"
include = ["{logs}"]
start_at = "beginning"
max_line_bytes = "16KiB"

[sources.self]
type = "internal_metrics"
interval = "1s"

[sinks.stuck]
type = "otlp_http"
inputs = ["app"]
endpoint = "http://127.0.0.1:{dead}"
backoff_initial = "50ms"
backoff_max = "200ms"

[sinks.prom]
type = "prometheus_remote_write"
inputs = ["self"]
endpoint = "{write}"
"#,
                logs = logs.display(),
                write = prom.write_url()
            ),
    )
    .unwrap();
    agent.start();
    agent.wait_ready();
    // Lines that do not compress (the log's blocks are zstd), 8 MB in all.
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut text = String::new();
    for i in 0..40_000 {
        text += &format!("{i:06} ");
        for _ in 0..12 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text += &format!("{x:016x}");
        }
        text.push('\n');
    }
    std::fs::write(&logs, text).unwrap();
    let evicted = wait_for(
        "an eviction counted in /metrics",
        Duration::from_secs(60),
        || {
            agent
                .metric("holdfast_log_evicted_events_total{sink=\"stuck\",reason=\"size\"}")
                .filter(|v| *v > 0.0)
        },
    );
    let stored = wait_for(
        "holdfast_log_evicted_events_total in Prometheus",
        Duration::from_secs(60),
        || {
            let r = prom.query(
                "holdfast_log_evicted_events_total{job=\"holdfast\",sink=\"stuck\",reason=\"size\"} > 0",
            );
            r.first()
                .and_then(|s| s["value"][1].as_str())
                .and_then(|v| v.parse::<f64>().ok())
        },
    );
    assert!(
        stored > 0.0 && stored <= 40_000.0,
        "{stored} evicted in Prometheus, more than the 40,000 lines written (in /metrics {evicted} when first seen)"
    );
    agent.stop();
}
