//! `/metrics` as Prometheus and promtool meet it, through the real binary:
//! both text formats pass Prometheus' own parsers, every counter of every
//! configured source and sink is there at 0 before anything happens, one
//! label name per component kind, and every metric the packaged Grafana
//! dashboard and alert rules read is served. The rules themselves are
//! checked and unit-tested with promtool.
//!
//! promtool comes with Debian's `prometheus` package (`.ci/run` installs
//! it); without it a test that needs it says SKIPPED, and fails under CI
//! (`tests/common/require.rs`).

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/require.rs"]
mod require;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use daemon::{free_port, Agent};

/// Prometheus' own Accept header (2.x).
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

fn repo(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// promtool, or None after saying why the test is skipped (a failure
/// under CI).
fn promtool(test: &str) -> Option<&'static str> {
    require::tool(
        test,
        "promtool",
        &["--version"],
        "install Debian's `prometheus` package (apt-get install -y prometheus; .ci/run does)",
    )
    .then_some("promtool")
}

/// Runs promtool with `args`, `stdin` piped in.
fn run_promtool(args: &[&str], dir: &Path, stdin: &str) -> Output {
    let mut child = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("writing to promtool");
    child.wait_with_output().expect("promtool's output")
}

fn said(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// GET /metrics with `accept`: (Content-Type, body).
fn scrape(api: SocketAddr, accept: Option<&str>) -> (String, String) {
    let mut s = TcpStream::connect_timeout(&api, Duration::from_secs(2)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let accept = accept.map_or(String::new(), |a| format!("Accept: {a}\r\n"));
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: test\r\n{accept}Connection: close\r\n\r\n"
    )
    .expect("request");
    let mut buf = String::new();
    s.read_to_string(&mut buf).expect("response");
    let (head, body) = buf.split_once("\r\n\r\n").expect("a head and a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let content_type = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .expect("a Content-Type");
    (content_type, body.to_string())
}

/// An agent with a source and a sink of each common kind, nothing sent yet.
/// The network sink points at a port nobody listens on: it has nothing to
/// send, so it makes no request.
fn agent() -> Agent {
    let mut a = Agent::new("");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{logs}/*.log\"]\n\n\
         [sources.otlp]\ntype = \"otlp_http\"\nlisten = \"127.0.0.1:{otlp}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\npath = \"{out}\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\", \"otlp\"]\n\
         endpoints = [\"http://127.0.0.1:{dead}\"]\n",
        logs = a.path("logs").display(),
        out = a.path("out").display(),
        otlp = free_port(),
        dead = free_port(),
    );
    std::fs::create_dir_all(a.path("logs")).expect("logs dir");
    let config = std::fs::read_to_string(&a.config).expect("config") + &body;
    std::fs::write(&a.config, config).expect("config");
    a.start();
    a.wait_ready();
    // The log's per-sink families appear once both sinks hold a cursor, and
    // a network sink's gauges once its request pipeline is built.
    daemon::wait_for("both sinks started", Duration::from_secs(10), || {
        let m = a.metrics();
        (m.contains("holdfast_consumer_lag_events{sink=\"archive\"}")
            && m.contains("holdfast_consumer_lag_events{sink=\"search\"}")
            && m.contains("holdfast_sink_concurrency_limit{sink=\"search\"}"))
        .then_some(())
    });
    a
}

/// The sample names of an exposition (`name` of `name{...} value`).
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l[..l.find(['{', ' ']).unwrap_or(l.len())].to_string())
        .collect()
}

#[test]
fn both_formats_pass_prometheus_parsers() {
    let mut a = agent();
    let (classic_type, classic) = scrape(a.api, None);
    let (om_type, openmetrics) = scrape(a.api, Some(PROMETHEUS_ACCEPT));
    let (_, explicit_text) = scrape(a.api, Some("text/plain;version=0.0.4"));
    a.stop();
    assert_eq!(classic_type, "text/plain; version=0.0.4; charset=utf-8");
    assert_eq!(
        om_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(openmetrics.ends_with("# EOF\n"), "{openmetrics}");
    assert!(!classic.contains("# EOF") && !classic.contains("# UNIT"));
    assert_eq!(sample_names(&classic), sample_names(&openmetrics));
    assert_eq!(sample_names(&classic), sample_names(&explicit_text));

    let Some(_) = promtool("both_formats_pass_prometheus_parsers") else {
        return;
    };
    let check = run_promtool(&["check", "metrics"], a.dir.path(), &classic);
    println!("promtool check metrics (classic):\n{}", said(&check));
    assert!(check.status.success(), "{}\n{classic}", said(&check));
    assert_eq!(said(&check), "", "promtool's lint found problems");

    // `promtool check metrics` reads only the classic format; Prometheus'
    // OpenMetrics parser is reached through the block importer, which
    // wants a timestamp on every sample.
    let stamped: String = openmetrics
        .lines()
        .map(|l| match l.starts_with('#') {
            true => format!("{l}\n"),
            false => format!("{l} 1700000000\n"),
        })
        .collect();
    let om_file = a.path("metrics.om");
    std::fs::write(&om_file, stamped).expect("write");
    let import = Command::new("promtool")
        .args(["tsdb", "create-blocks-from", "openmetrics"])
        .arg(&om_file)
        .arg(a.path("blocks"))
        .output()
        .expect("running promtool");
    println!(
        "promtool tsdb create-blocks-from openmetrics:\n{}",
        said(&import)
    );
    assert!(import.status.success(), "{}\n{openmetrics}", said(&import));
}

#[test]
fn every_counter_is_there_at_zero_before_the_first_event() {
    let mut a = agent();
    let m = a.metrics();
    a.stop();
    for series in [
        "holdfast_source_events_total{source=\"app\"} 0",
        "holdfast_source_events_total{source=\"otlp\"} 0",
        "holdfast_file_source_read_errors_total{source=\"app\"} 0",
        "holdfast_otlp_accepted_events_total{source=\"otlp\",signal=\"traces\"} 0",
        "holdfast_otlp_rejected_requests_total{source=\"otlp\",reason=\"decode\"} 0",
        "holdfast_sink_sent_events_total{sink=\"search\"} 0",
        "holdfast_sink_requests_total{sink=\"search\",status=\"5xx\"} 0",
        "holdfast_sink_retries_total{sink=\"search\",reason=\"http_429\"} 0",
        "holdfast_sink_rejected_events_total{sink=\"search\",reason=\"retries_exhausted\"} 0",
        "holdfast_sink_quarantined_events_total{sink=\"search\",reason=\"rejected\"} 0",
        "holdfast_sink_auth_failures_total{sink=\"search\"} 0",
        "holdfast_dropped_events_total{source=\"app\",reason=\"too_large\"} 0",
        "holdfast_dropped_events_total{sink=\"archive\",reason=\"output_retention\"} 0",
        "holdfast_dropped_events_total{sink=\"search\",reason=\"quarantine_full\"} 0",
        "holdfast_task_restarts_total{source=\"app\"} 0",
        "holdfast_task_restarts_total{sink=\"search\"} 0",
        "holdfast_log_evicted_events_total{sink=\"search\",reason=\"size\"} 0",
        "holdfast_config_reloads_total{result=\"ok\"} 0",
        "holdfast_config_reloads_total{result=\"failed\"} 0",
    ] {
        assert!(m.lines().any(|l| l == series), "no `{series}` in:\n{m}");
    }
    // One label name per kind of component.
    for old in ["consumer=", "component=", "task="] {
        assert!(!m.contains(old), "{old} still labels a series:\n{m}");
    }
    let build = m
        .lines()
        .find(|l| l.starts_with("holdfast_build_info{"))
        .expect("holdfast_build_info");
    let version = format!("version=\"{}\"", env!("CARGO_PKG_VERSION"));
    assert!(
        build.contains(&version) && build.contains("commit=\"") && build.ends_with("} 1"),
        "{build}"
    );
    for process in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_virtual_memory_bytes",
        "process_open_fds",
        "process_max_fds",
        "process_start_time_seconds",
    ] {
        let value = m
            .lines()
            .find_map(|l| l.strip_prefix(process)?.strip_prefix(' '))
            .and_then(|v| v.parse::<f64>().ok());
        assert!(value.is_some_and(|v| v >= 0.0), "{process}: {value:?}");
    }
}

/// The metric names a dashboard or rules file reads: the `holdfast_*` and
/// `process_*` words of its query lines (`"expr": ...` or `expr: ...`).
fn names_used(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| l.trim_start().trim_start_matches('"').starts_with("expr"))
        .flat_map(|l| l.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')))
        .filter(|w| w.starts_with("holdfast_") || w.starts_with("process_"))
        .map(str::to_string)
        .collect()
}

#[test]
fn dashboard_and_rules_read_only_metrics_holdfast_serves() {
    let mut a = agent();
    let served = sample_names(&a.metrics());
    a.stop();
    for file in [
        "packaging/grafana/holdfast-dashboard.json",
        "packaging/prometheus/holdfast-alerts.yml",
    ] {
        let text = std::fs::read_to_string(repo(file)).expect("read");
        let used = names_used(&text);
        assert!(used.len() >= 10, "{file}: {used:?}");
        let missing: Vec<_> = used.difference(&served).collect();
        assert!(
            missing.is_empty(),
            "{file} reads what /metrics does not serve: {missing:?}"
        );
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("packaging/grafana/holdfast-dashboard.json")).expect("read"),
    )
    .expect("the dashboard is JSON");
    assert!(dashboard["panels"].as_array().is_some_and(|p| p.len() > 10));
}

#[test]
fn alert_rules_pass_promtool_check_and_their_unit_tests() {
    let Some(_) = promtool("alert_rules_pass_promtool_check_and_their_unit_tests") else {
        return;
    };
    let dir = repo("packaging/prometheus");
    let check = run_promtool(&["check", "rules", "holdfast-alerts.yml"], &dir, "");
    println!("promtool check rules:\n{}", said(&check));
    assert!(check.status.success(), "{}", said(&check));
    let test = run_promtool(&["test", "rules", "holdfast-alerts.test.yml"], &dir, "");
    println!("promtool test rules:\n{}", said(&test));
    assert!(test.status.success(), "{}", said(&test));
}

/// docs/dashboards.md is what the lead's closing note and operators read:
/// it must name every panel and carry its exact query.
#[test]
fn the_dashboards_page_lists_every_panel_with_its_query() {
    let docs = std::fs::read_to_string(repo("docs/dashboards.md")).expect("read docs");
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo("packaging/grafana/holdfast-dashboard.json")).expect("read"),
    )
    .expect("the dashboard is JSON");
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("a title");
        assert!(
            docs.contains(title),
            "docs/dashboards.md misses panel {title:?}"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("an expr");
            assert!(
                docs.contains(&format!("`{expr}`")),
                "docs/dashboards.md misses {expr}"
            );
        }
    }
}
