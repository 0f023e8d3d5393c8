//! One collection as the collector thread takes it: a failing collector is
//! counted and the others' points still go out; an absent one is neither.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::collect::fixture::Fixture;
use super::collect::{Collector, Filters};
use super::metrics::HostMetricsSourceMetrics;
use super::{Collecting, HostMetricsSettings};
use crate::component::ComponentContext;
use crate::event::Decoder;
use crate::metrics::Metrics;
use crate::seglog::{Log, LogOptions};

fn errors(m: &Metrics, c: Collector) -> u64 {
    let g = m.group::<HostMetricsSourceMetrics>();
    let n = g.errors.get_or_create(&g.labels("host", c)).get();
    n
}

#[tokio::test]
async fn a_failing_collector_is_counted_and_the_others_go_on() {
    let f = Fixture::new()
        .file(
            "proc/stat",
            "cpu  2 0 2 8 0 0 0 0 0 0\ncpu0 2 0 2 8 0 0 0 0 0 0\nbtime 1700000000\nprocesses 9\n",
        )
        .file("proc/loadavg", "not a load average\n")
        .file("proc/sys/kernel/hostname", "edge-7\n");
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let metrics = Arc::new(Metrics::new(Some(log.clone())));
    let ctx = ComponentContext::new(
        "host".into(),
        log,
        metrics.clone(),
        CancellationToken::new(),
    );
    let opts = HostMetricsSettings {
        interval: std::time::Duration::from_secs(30),
        collectors: vec![Collector::Cpu, Collector::Load, Collector::Pressure],
        chosen: true,
        root: f.root().to_path_buf(),
        filters: Filters::default(),
    };
    metrics
        .group::<HostMetricsSourceMetrics>()
        .declare("host", &opts.collectors);
    let mut c = Collecting::new(&ctx, &opts);

    for round in 1..=2 {
        let got = c.collect_once().expect("the cpu collector's points");
        // 8 modes of cpu0 and the logical count; nothing of load or PSI.
        assert_eq!(got.collected.events, 9);
        assert_eq!(errors(&metrics, Collector::Load), round);
        assert_eq!(errors(&metrics, Collector::Cpu), 0);
        assert_eq!(
            errors(&metrics, Collector::Pressure),
            0,
            "absent is not an error"
        );
        // The batch as the log stores it: resource and scope in its context.
        let range = ctx.log.append(got.collected.batch).await.unwrap();
        let events = ctx.log.reader(range.start).read(100, 1 << 20).unwrap();
        let e = &events[0];
        let stored = Decoder::new()
            .decode(&e.data, &e.context, e.seq - e.batch_start)
            .unwrap();
        let resource: Vec<(String, String)> = stored
            .resource()
            .iter()
            .flat_map(|r| &r.attributes)
            .map(|kv| (kv.key.clone(), format!("{:?}", kv.value)))
            .collect();
        assert_eq!(resource.len(), 3);
        assert!(resource.iter().all(|(k, v)| match k.as_str() {
            "service.name" => v.contains("\"holdfast\""),
            "service.instance.id" | "host.name" => v.contains("\"edge-7\""),
            _ => false,
        }));
        assert_eq!(
            stored.scope().map(|s| s.name.as_str()),
            Some(super::SCOPE_NAME)
        );
    }

    // What would be appended decodes as metric events of this source.
    let got = c.collect_once().unwrap();
    let range = ctx.log.append(got.collected.batch).await.unwrap();
    let events = ctx.log.reader(range.start).read(100, 1 << 20).unwrap();
    assert_eq!(events.len(), 9);
    let mut decoder = Decoder::new();
    let e = &events[0];
    let s = decoder
        .decode(&e.data, &e.context, e.seq - e.batch_start)
        .unwrap();
    assert_eq!(s.source(), "host");
}

#[test]
fn nothing_to_say_is_no_collection() {
    let f = Fixture::new();
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path().join("log"), LogOptions::default()).unwrap();
    let metrics = Arc::new(Metrics::new(Some(log.clone())));
    let ctx = ComponentContext::new(
        "host".into(),
        log,
        metrics.clone(),
        CancellationToken::new(),
    );
    let opts = HostMetricsSettings {
        interval: std::time::Duration::from_secs(30),
        collectors: vec![Collector::Thermal, Collector::Pressure],
        chosen: false,
        root: f.root().to_path_buf(),
        filters: Filters::default(),
    };
    assert!(Collecting::new(&ctx, &opts).collect_once().is_none());
    assert_eq!(errors(&metrics, Collector::Thermal), 0);
}
