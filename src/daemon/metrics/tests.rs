//! The exposition is part of the product (dashboards and alerts read it), so
//! it is pinned byte for byte, and `docs/metrics.md` is checked against what
//! is actually registered.

use std::collections::BTreeSet;
use std::path::Path;

use super::assemble;
use crate::metrics::{
    BuildLabels, ComponentLabels, Metrics, ReloadLabels, SinkLabels, SinkReasonLabels,
    SinkStatusLabels, SourceLabels,
};
use crate::seglog::{Log, LogOptions, StartAt};
use crate::sinks::file::DROP_REASONS as FILE_SINK_DROP_REASONS;
use crate::sinks::network_config::DROP_REASONS as SINK_DROP_REASONS;
use crate::sources::file::metrics::{FileSourceMetrics, FILE_SOURCE_DROP_REASONS};
use crate::sources::otlp_http::metrics::{
    OtlpPathLabels, OtlpReasonLabels, OtlpRequestLabels, OtlpSignalLabels, OtlpSourceMetrics,
};

/// A registry with a log, a `file` source, an `otlp_http` source and a
/// sink declared (every series they can move, at 0, as their
/// `declare_metrics` create them), then a sample moved in each family,
/// encoded.
fn exposition() -> String {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open log");
    log.consumer("es", StartAt::Oldest).expect("consumer");
    let m = assemble(Some(log));
    let f = m.group::<FileSourceMetrics>();
    m.declare_source("app");
    f.declare("app");
    m.declare_source_drops("app", FILE_SOURCE_DROP_REASONS);
    m.declare_source("otlp");
    m.declare_listener("otlp");
    m.group::<OtlpSourceMetrics>().declare("otlp");
    m.declare_sink("es");
    m.sinks.declare("es");
    m.declare_sink_drops("es", SINK_DROP_REASONS);
    m.declare_sink("archive");
    m.sinks.declare_local("archive");
    m.declare_sink_drops("archive", FILE_SINK_DROP_REASONS);
    let source = SourceLabels {
        source: "app".to_string(),
    };
    let sink = SinkLabels {
        sink: "es".to_string(),
    };
    // Counters: each family of a group by the same amount, the gauges and
    // histograms one by one.
    let source_counters = [&m.sources.events, &m.sources.bytes];
    for family in source_counters.into_iter().chain(f.counters()) {
        family.get_or_create(&source).inc_by(3);
    }
    f.files_watched.get_or_create(&source).set(2);
    f.files_open.get_or_create(&source).set(1);
    let s = &m.sinks;
    for family in s.counters() {
        family.get_or_create(&sink).inc_by(7);
    }
    s.in_flight.get_or_create(&sink).set(2);
    s.concurrency_limit.get_or_create(&sink).set(3);
    s.quarantine_bytes.get_or_create(&sink).set(4096);
    s.quarantine_full.get_or_create(&sink).set(1);
    s.latency.get_or_create(&sink).observe(0.2);
    let status = SinkStatusLabels {
        sink: "es".to_string(),
        status: "2xx".to_string(),
    };
    s.requests.get_or_create(&status).inc();
    for (family, reason) in [(&s.retries, "http_429"), (&s.rejected, "rejected")] {
        let labels = SinkReasonLabels {
            sink: "es".to_string(),
            reason: reason.to_string(),
        };
        family.get_or_create(&labels).inc_by(4);
        s.quarantined.get_or_create(&labels).inc();
    }
    let otlp = m.group::<OtlpSourceMetrics>();
    let (source, path) = ("otlp".to_string(), "/v1/logs".to_string());
    let status = "200".to_string();
    let request = OtlpRequestLabels {
        source: source.clone(),
        path: path.clone(),
        status,
    };
    otlp.requests.get_or_create(&request).inc();
    let head_to_answer = OtlpPathLabels {
        source: source.clone(),
        path,
    };
    otlp.duration.get_or_create(&head_to_answer).observe(0.003);
    let signal = OtlpSignalLabels {
        source: source.clone(),
        signal: "logs".into(),
    };
    otlp.events.get_or_create(&signal).inc_by(4);
    otlp.bytes.get_or_create(&signal).inc_by(400);
    let reason = "decode".to_string();
    otlp.rejected
        .get_or_create(&OtlpReasonLabels { source, reason })
        .inc();
    m.drop_events("sink:archive", "output_retention", 5);
    m.drop_events("source:app", "too_large", 1);
    m.task_restarts
        .get_or_create(&ComponentLabels::of("sink:es"))
        .inc();
    m.config_reloads
        .get_or_create(&ReloadLabels {
            result: "ok".to_string(),
        })
        .inc();
    stable(&m.encode().expect("encode"))
}

/// The exposition without what changes from build to build or scrape to
/// scrape: the commit and version (as placeholders) and the process's
/// figures.
fn stable(text: &str) -> String {
    let build = BuildLabels::current();
    let mut lines: Vec<&str> = text.lines().collect();
    // A family's series come in hash order: sorted by label set (a
    // histogram's buckets, which share one, keep their order).
    for family in lines.split_mut(|l| l.starts_with('#')) {
        family.sort_by_key(|l| {
            let labels = l.split_once('{').map_or("", |(_, rest)| rest);
            labels
                .split_once("\",")
                .filter(|_| labels.starts_with("le="))
                .map_or(labels, |(_, rest)| rest)
        });
    }
    lines
        .into_iter()
        .filter(|l| !l.starts_with("process_") && !l.contains(" process_"))
        .map(|l| {
            let l = l.replace(
                &format!("version=\"{}\"", build.version),
                "version=\"VERSION\"",
            );
            l.replace(&format!("commit=\"{}\"", build.commit), "commit=\"COMMIT\"") + "\n"
        })
        .collect()
}

const GOLDEN: &str = "src/daemon/metrics/exposition.golden.txt";

fn repo_file(rel: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// The text served, pinned: declaring the families differently must not
/// change a byte of it, and a change of names, labels or the series present
/// from start shows here first (bless with `HOLDFAST_BLESS=1`).
#[test]
fn exposition_is_unchanged() {
    let text = exposition();
    if std::env::var_os("HOLDFAST_BLESS").is_some() {
        std::fs::write(repo_file(GOLDEN), &text).expect("write golden");
    }
    let golden = std::fs::read_to_string(repo_file(GOLDEN)).expect("read golden");
    // Line by line first, so a failure names the family that changed.
    for (n, (got, want)) in text.lines().zip(golden.lines()).enumerate() {
        assert_eq!(got, want, "line {} of {GOLDEN}", n + 1);
    }
    assert_eq!(text, golden);
}

/// The exposition names of every family served: `# TYPE` gives the family
/// name, to which a counter's samples add `_total`, the name the docs use.
fn served_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| match l.split_once(' ') {
            Some((name, "counter")) => format!("{name}_total"),
            Some((name, _)) => name.to_string(),
            None => panic!("odd TYPE line: {l}"),
        })
        .collect()
}

/// The metric names docs/metrics.md documents: the first cell of its tables.
fn documented_names(docs: &str) -> BTreeSet<String> {
    docs.lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split_once('`'))
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("holdfast_") || name.starts_with("process_"))
        .collect()
}

/// Every family served is documented, and every metric documented is
/// served, so the reference cannot drift from the registry either way.
#[test]
fn every_metric_is_documented() {
    let docs = std::fs::read_to_string(repo_file("docs/metrics.md")).expect("read docs");
    // Every family gets a sample (families without one are not encoded), so
    // a family added later is checked without touching this test.
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), LogOptions::default()).expect("open log");
    let m: Metrics = assemble(Some(log));
    m.touch_every_family_and_group();
    let served = served_names(&m.encode().expect("encode"));
    let documented = documented_names(&docs);
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let unserved: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && unserved.is_empty(),
        "served but not in docs/metrics.md: {undocumented:?}; \
         in docs/metrics.md but not served: {unserved:?}"
    );
    assert!(served.len() > 50, "{served:?}");
}
