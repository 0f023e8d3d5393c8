use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, number_data_point, AggregationTemporality, Gauge, Metric, NumberDataPoint, Sum,
};

use super::reference::Request;
use super::*;
use crate::sources::prometheus_scrape::parse::{parse, Format, Limits};

const T: u64 = 1_700_000_000_000_000_000;

/// The node exporter's target with `labels`, for the encoder's tests too.
pub(crate) fn target(labels: &[(&str, &str)], honor: bool) -> TargetLabels {
    TargetLabels {
        job: "node".into(),
        instance: "127.0.0.1:9100".into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        honor_labels: honor,
        resource: Vec::new(),
    }
}

fn convert(
    body: &str,
    format: Format,
    t: &TargetLabels,
    time: u64,
    starts: &mut StartTimes,
) -> ExportMetricsServiceRequest {
    let e = parse(body, format, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
    let mut b = Builder::new(t, Request::new("test"));
    b.exposition(e, time, starts);
    b.finish().finish()
}

fn metrics(r: &ExportMetricsServiceRequest) -> Vec<&Metric> {
    r.resource_metrics
        .iter()
        .flat_map(|rm| rm.scope_metrics.iter().flat_map(|s| s.metrics.iter()))
        .collect()
}

fn metric<'a>(r: &'a ExportMetricsServiceRequest, name: &str) -> &'a Metric {
    metrics(r)
        .into_iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("no metric {name}: {r:?}"))
}

fn attrs(a: &[KeyValue]) -> Vec<(String, String)> {
    a.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("{other:?}"),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn sum(m: &Metric) -> &Sum {
    match &m.data {
        Some(Data::Sum(s)) => s,
        other => panic!("{} is not a Sum: {other:?}", m.name),
    }
}

fn gauge(m: &Metric) -> &Gauge {
    match &m.data {
        Some(Data::Gauge(g)) => g,
        other => panic!("{} is not a Gauge: {other:?}", m.name),
    }
}

fn value(p: &NumberDataPoint) -> f64 {
    match p.value {
        Some(number_data_point::Value::AsDouble(v)) => v,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_counter_is_a_monotonic_cumulative_sum_whose_start_is_first_seen_until_it_resets() {
    let t = target(&[], false);
    let mut starts = StartTimes::default();
    let body = |v: u32| {
        format!("# TYPE node_cpu_seconds_total counter\nnode_cpu_seconds_total{{cpu=\"0\"}} {v}\n")
    };
    let r = convert(&body(10), Format::Text, &t, T, &mut starts);
    let m = metric(&r, "node_cpu_seconds");
    let s = sum(m);
    assert!(s.is_monotonic);
    assert_eq!(
        s.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    assert_eq!(value(&s.data_points[0]), 10.0);
    assert_eq!(s.data_points[0].start_time_unix_nano, T);
    assert_eq!(s.data_points[0].time_unix_nano, T);

    let r = convert(&body(15), Format::Text, &t, T + 15, &mut starts);
    let p = &sum(metric(&r, "node_cpu_seconds")).data_points[0];
    assert_eq!((p.start_time_unix_nano, p.time_unix_nano), (T, T + 15));

    // Went down: the target restarted, a new start just before the point.
    let later = T + 30_000_000_000;
    let r = convert(&body(2), Format::Text, &t, later, &mut starts);
    let p = &sum(metric(&r, "node_cpu_seconds")).data_points[0];
    assert_eq!(p.start_time_unix_nano, later - 1_000_000);
}

#[test]
fn created_series_become_start_times_never_series() {
    let t = target(&[], false);
    let r = convert(
        "# TYPE foo counter\nfoo_total 17.0 1520879607.789\nfoo_created 1520872607.123\n# EOF\n",
        Format::OpenMetrics,
        &t,
        T,
        &mut StartTimes::default(),
    );
    assert_eq!(metrics(&r).len(), 1, "{r:?}");
    let p = &sum(metric(&r, "foo")).data_points[0];
    assert_eq!(p.start_time_unix_nano, 1_520_872_607_123_000_000);
    assert_eq!(p.time_unix_nano, 1_520_879_607_789_000_000);
}

#[test]
fn histograms_and_summaries_are_assembled_from_their_series() {
    let t = target(&[], false);
    let r = convert(
        "# TYPE lat histogram\n\
         lat_bucket{path=\"/\",le=\"0.1\"} 2\n\
         lat_bucket{path=\"/\",le=\"1\"} 5\n\
         lat_bucket{path=\"/\",le=\"+Inf\"} 6\n\
         lat_sum{path=\"/\"} 3.5\n\
         lat_count{path=\"/\"} 6\n\
         lat_created{path=\"/\"} 1700000000.5\n\
         # TYPE rpc summary\n\
         rpc{quantile=\"0.5\"} 4\n\
         rpc{quantile=\"0.99\"} 9\n\
         rpc_sum 100\n\
         rpc_count 20\n\
         # EOF\n",
        Format::OpenMetrics,
        &t,
        T,
        &mut StartTimes::default(),
    );
    let h = match &metric(&r, "lat").data {
        Some(Data::Histogram(h)) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        h.aggregation_temporality,
        AggregationTemporality::Cumulative as i32
    );
    let p = &h.data_points[0];
    assert_eq!(p.explicit_bounds, [0.1, 1.0]);
    assert_eq!(p.bucket_counts, [2, 3, 1]);
    assert_eq!((p.count, p.sum), (6, Some(3.5)));
    assert_eq!(p.start_time_unix_nano, 1_700_000_000_500_000_000);
    assert_eq!(attrs(&p.attributes), pairs(&[("path", "/")]));
    let s = match &metric(&r, "rpc").data {
        Some(Data::Summary(s)) => s,
        other => panic!("{other:?}"),
    };
    let p = &s.data_points[0];
    assert_eq!((p.count, p.sum), (20, 100.0));
    let q: Vec<(f64, f64)> = p
        .quantile_values
        .iter()
        .map(|q| (q.quantile, q.value))
        .collect();
    assert_eq!(q, [(0.5, 4.0), (0.99, 9.0)]);
    assert_eq!(p.start_time_unix_nano, T);
}

/// A histogram without `_count` takes its count from the `+Inf` bucket.
#[test]
fn the_inf_bucket_is_the_count() {
    let t = target(&[], false);
    let r = convert(
        "# TYPE h histogram\nh_bucket{le=\"1\"} 1\nh_bucket{le=\"+Inf\"} 4\n",
        Format::Text,
        &t,
        T,
        &mut StartTimes::default(),
    );
    let Some(Data::Histogram(h)) = &metric(&r, "h").data else {
        panic!()
    };
    assert_eq!((h.data_points[0].count, h.data_points[0].sum), (4, None));
    assert_eq!(h.data_points[0].bucket_counts, [1, 3]);
}

#[test]
fn other_types_are_gauges_keeping_their_series_names() {
    let t = target(&[], false);
    let r = convert(
        "# TYPE gh gaugehistogram\ngh_bucket{le=\"+Inf\"} 3\ngh_gcount 3\ngh_gsum 2\n\
         # TYPE build info\nbuild_info{version=\"1\"} 1\n\
         # TYPE st stateset\nst{st=\"a\"} 1\n\
         # TYPE u unknown\nu 5\n\
         # TYPE g gauge\ng 1.5 1700000001.0\n# EOF\n",
        Format::OpenMetrics,
        &t,
        T,
        &mut StartTimes::default(),
    );
    for name in [
        "gh_bucket",
        "gh_gcount",
        "gh_gsum",
        "build_info",
        "st",
        "u",
        "g",
    ] {
        gauge(metric(&r, name));
    }
    let g = &gauge(metric(&r, "g")).data_points[0];
    assert_eq!(
        (value(g), g.time_unix_nano),
        (1.5, 1_700_000_001_000_000_000)
    );
    assert_eq!(gauge(metric(&r, "u")).data_points[0].time_unix_nano, T);
}

/// The node exporter's gauge `x` and counter `x_total` are two metrics of
/// the name `x`, one a Gauge and one a Sum.
#[test]
fn a_gauge_and_a_counter_of_one_stem_stay_apart() {
    let r = convert(
        "# TYPE a_bytes gauge\na_bytes 3\n# TYPE a_bytes_total counter\na_bytes_total 5\n",
        Format::Text,
        &target(&[], false),
        T,
        &mut StartTimes::default(),
    );
    let found: Vec<_> = metrics(&r).iter().map(|m| m.name.as_str()).collect();
    assert_eq!(found, ["a_bytes", "a_bytes"]);
    assert!(matches!(metrics(&r)[0].data, Some(Data::Gauge(_))));
    assert!(matches!(metrics(&r)[1].data, Some(Data::Sum(_))));
}

#[test]
fn job_and_instance_are_the_resource_and_clashes_follow_honor_labels() {
    let body = "x{site=\"scraped\",job=\"other\",a=\"1\"} 1\n";
    let resource = |r: &ExportMetricsServiceRequest| {
        attrs(&r.resource_metrics[0].resource.as_ref().unwrap().attributes)
    };
    let point =
        |r: &ExportMetricsServiceRequest| attrs(&gauge(metric(r, "x")).data_points[0].attributes);

    let r = convert(
        body,
        Format::Text,
        &target(&[("site", "p3")], false),
        T,
        &mut StartTimes::default(),
    );
    assert_eq!(
        resource(&r),
        pairs(&[
            ("service.name", "node"),
            ("service.instance.id", "127.0.0.1:9100")
        ])
    );
    assert_eq!(
        point(&r),
        pairs(&[
            ("a", "1"),
            ("exported_job", "other"),
            ("exported_site", "scraped"),
            ("site", "p3")
        ])
    );

    let r = convert(
        body,
        Format::Text,
        &target(&[("site", "p3")], true),
        T,
        &mut StartTimes::default(),
    );
    assert_eq!(
        resource(&r),
        pairs(&[
            ("service.name", "other"),
            ("service.instance.id", "127.0.0.1:9100")
        ])
    );
    assert_eq!(point(&r), pairs(&[("a", "1"), ("site", "scraped")]));

    // A renamed label never takes the name of a target label added before
    // it: no attribute is given twice.
    let r = convert(
        "x{site=\"scraped\"} 1\n",
        Format::Text,
        &target(&[("exported_site", "t"), ("site", "p3")], false),
        T,
        &mut StartTimes::default(),
    );
    assert_eq!(
        point(&r),
        pairs(&[
            ("exported_exported_site", "scraped"),
            ("exported_site", "t"),
            ("site", "p3")
        ])
    );
}

#[test]
fn synthetic_series_carry_the_target_s_labels() {
    let t = target(&[("site", "p3")], false);
    let mut b = Builder::new(&t, Request::new("test"));
    b.synthetic("up", "", 0.0, T);
    b.synthetic("scrape_duration_seconds", "s", 0.25, T);
    let r = b.finish().finish();
    let up = &gauge(metric(&r, "up")).data_points[0];
    assert_eq!((value(up), up.time_unix_nano), (0.0, T));
    assert_eq!(attrs(&up.attributes), pairs(&[("site", "p3")]));
    assert_eq!(metric(&r, "scrape_duration_seconds").unit, "s");
    assert_eq!(r.resource_metrics.len(), 1);
}

/// Series that leave the exposition are forgotten: the memory holds what
/// one scrape holds.
#[test]
fn start_times_forget_series_no_longer_served() {
    let t = target(&[], false);
    let mut starts = StartTimes::default();
    convert(
        "# TYPE c counter\nc{a=\"1\"} 1\nc{a=\"2\"} 1\n",
        Format::Text,
        &t,
        T,
        &mut starts,
    );
    assert_eq!(starts.seen.len(), 2);
    convert(
        "# TYPE c counter\nc{a=\"1\"} 2\n",
        Format::Text,
        &t,
        T + 1,
        &mut starts,
    );
    assert_eq!(starts.seen.len(), 1);
}
