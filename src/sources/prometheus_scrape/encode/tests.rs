//! The encoder's batch is byte for byte what the OTLP request the
//! conversion used to build gives through `metric_points::collect`'s
//! split: the same events, the same context, so the same ids.

use bytes::BytesMut;
use prost::Message;

use super::*;
use crate::event::{put_encoded_event, Context};
use crate::sources::otlp_http::decode::Decoded;
use crate::sources::otlp_http::split::split_as;
use crate::sources::prometheus_scrape::convert::reference::Request;
use crate::sources::prometheus_scrape::convert::tests::target;
use crate::sources::prometheus_scrape::convert::{Builder, StartTimes, TargetLabels};
use crate::sources::prometheus_scrape::parse::{parse, Exposition, Format, Limits};

const T: u64 = 1_700_000_000_000_000_000;
const SCOPE: &str = "holdfast.sources.prometheus_scrape";

/// One scrape as `target.rs` makes it: the exposition, then the
/// synthetic series.
fn scrape<O: Output>(b: &mut Builder<'_, O>, e: Exposition, time: u64, starts: &mut StartTimes) {
    let n = e.samples;
    b.exposition(e, time, starts);
    b.synthetic("up", "", 1.0, time);
    b.synthetic("scrape_duration_seconds", "s", 0.125, time);
    b.synthetic("scrape_samples_scraped", "", n as f64, time);
}

/// The reference: the request, split as `metric_points::collect` splits
/// it (framed events, context).
fn old(
    e: Exposition,
    t: &TargetLabels,
    time: u64,
    starts: &mut StartTimes,
    limit: usize,
) -> Result<(Vec<u8>, Vec<u8>, u64, u64), SplitError> {
    let mut b = Builder::new(t, Request::new(SCOPE));
    scrape(&mut b, e, time, starts);
    let mut framed = BytesMut::new();
    let split = split_as(
        Decoded::Metrics(b.finish().finish()),
        "scrape",
        time + 7,
        limit,
        true,
        |e| put_encoded_event(e, &mut framed),
    )?;
    let bytes = split.bytes + split.context.len() as u64;
    Ok((framed.to_vec(), split.context.to_vec(), split.events, bytes))
}

fn new(
    e: Exposition,
    t: &TargetLabels,
    time: u64,
    starts: &mut StartTimes,
    limit: usize,
    seed: [u8; 16],
) -> Result<(Vec<u8>, Vec<u8>, u64, u64), SplitError> {
    let mut b = Builder::new(t, Encoder::new(SCOPE, limit));
    scrape(&mut b, e, time, starts);
    let out = b.finish();
    let points = out.points();
    let e = out.finish_with_seed("scrape", time + 7, seed)?;
    assert_eq!(points, e.events);
    Ok((e.framed.to_vec(), e.context.to_vec(), e.events, e.bytes))
}

/// Scrapes `bodies` in turn through both paths (each with its own start
/// times) and compares every batch.
fn same(bodies: &[&str], format: Format, t: &TargetLabels) {
    let (mut s_old, mut s_new) = (StartTimes::default(), StartTimes::default());
    for (i, body) in bodies.iter().enumerate() {
        let e = parse(body, format, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
        let time = T + i as u64 * 15_000_000_000;
        let want = old(e.clone(), t, time, &mut s_old, 64 << 20).expect("old");
        let seed: [u8; 16] = Context::decode(&want.1[..]).expect("context").groups[0]
            .id_seed
            .clone()
            .try_into()
            .expect("16 bytes");
        let got = new(e, t, time, &mut s_new, 64 << 20, seed).expect("new");
        assert_eq!(got.2, want.2, "events of scrape {i}");
        assert_eq!(got.1, want.1, "context of scrape {i}");
        // Compared event by event first, for a readable difference.
        let events = |b: &[u8]| -> Vec<Vec<u8>> {
            let mut out = Vec::new();
            let mut rest = b;
            while rest.len() >= 4 {
                let n = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
                out.push(rest[4..4 + n].to_vec());
                rest = &rest[4 + n..];
            }
            out
        };
        let (g, w) = (events(&got.0), events(&want.0));
        for (k, (g, w)) in g.iter().zip(&w).enumerate() {
            assert_eq!(g, w, "event {k} of scrape {i}");
        }
        assert_eq!(got.0, want.0, "framed events of scrape {i}");
        assert_eq!(got.3, want.3, "bytes of scrape {i}");
    }
}

#[test]
fn gauges_and_counters_as_the_request_s_split() {
    let text = |v: u32| {
        format!(
            "# HELP node_load1 1m load average.\n# TYPE node_load1 gauge\nnode_load1 0.{v}\n\
             # HELP node_cpu_seconds_total Seconds the CPUs spent in each mode.\n\
             # TYPE node_cpu_seconds_total counter\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"idle\"}} {}\n\
             node_cpu_seconds_total{{cpu=\"0\",mode=\"user\"}} 12.5\n\
             # TYPE esc gauge\n\
             esc{{path=\"C:\\\\dir\",quote=\"say \\\"hi\\\"\",nl=\"a\\nb\",empty=\"\",utf=\"größe ✓\"}} -1e-3\n\
             esc{{path=\"/\"}} NaN\nesc{{path=\"+\"}} +Inf\nesc{{path=\"-\"}} -Inf\nesc{{path=\"0\"}} 0\n\
             timed 3 1700000001234\ntimed_zero 4 0\ntimed_negative 5 -5\n\
             untyped_thing{{a=\"b\"}} 17\n",
            // Down on the third scrape: a restart moves the start.
            if v == 3 { 1 } else { 100 + v }
        )
    };
    let bodies: Vec<String> = (1..=3).map(text).collect();
    let bodies: Vec<&str> = bodies.iter().map(String::as_str).collect();
    same(&bodies, Format::Text, &target(&[], false));
    same(
        &bodies,
        Format::Text,
        &target(&[("site", "p3"), ("zone", "")], false),
    );
}

#[test]
fn openmetrics_counters_with_and_without_created_and_other_types() {
    let body = "# TYPE foo counter\n# HELP foo Foos.\n# UNIT foo seconds\n\
                foo_total{a=\"1\"} 17.0 1520879607.789\nfoo_created{a=\"1\"} 1520872607.123\n\
                foo_total{a=\"2\"} 3\nfoo_created{a=\"2\"} 0\n\
                foo_total{a=\"3\"} 4\n\
                # TYPE lat histogram\n\
                lat_bucket{path=\"/\",le=\"0.1\"} 2\nlat_bucket{path=\"/\",le=\"+Inf\"} 6\n\
                lat_sum{path=\"/\"} 3.5\nlat_count{path=\"/\"} 6\nlat_created{path=\"/\"} 1700000000.5\n\
                # TYPE rpc summary\nrpc{quantile=\"0.5\"} 4\nrpc_sum 100\nrpc_count 20\n\
                # TYPE gh gaugehistogram\ngh_bucket{le=\"+Inf\"} 3\ngh_gcount 3\ngh_gsum 2\n\
                # TYPE build info\nbuild_info{version=\"1\"} 1\n\
                # TYPE st stateset\nst{st=\"a\"} 1\n\
                # TYPE a_bytes gauge\na_bytes 3\n# TYPE a_bytes_total counter\na_bytes_total 5\n\
                # EOF\n";
    same(&[body, body], Format::OpenMetrics, &target(&[], false));
}

/// Label clashes either way, a target serving its own `up` (the
/// synthetic point joins that metric, out of order), several resources
/// whose series interleave (`honor_labels`), more resource attributes.
#[test]
fn clashes_resources_and_out_of_order_metrics() {
    let body = "x{site=\"scraped\",job=\"other\",a=\"1\"} 1\n\
                x{site=\"s2\",instance=\"i:1\"} 2\n\
                # TYPE up gauge\nup{job=\"other\"} 1\nup 0\n\
                y{exported_site=\"e\",site=\"s\"} 3\n\
                x{job=\"third\"} 4\n\
                # TYPE c_total counter\nc_total{job=\"other\"} 5\nc_total 6\n";
    let mut t = target(&[("site", "p3"), ("exported_site", "t")], false);
    same(&[body], Format::Text, &t);
    t.honor_labels = true;
    same(&[body], Format::Text, &t);
    t.resource = vec![("host.name".into(), "gw-1".into())];
    t.job = String::new();
    same(&[body], Format::Text, &t);
}

/// Lengths and indexes past one varint byte: long labels, many labels,
/// more than 127 resources.
#[test]
fn long_labels_and_many_resources() {
    let long = "v".repeat(300);
    let mut body = String::from("# TYPE g gauge\n");
    for i in 0..200 {
        body +=
            &format!("g{{job=\"j{i}\",long=\"{long}\",l1=\"1\",l2=\"2\",l3=\"3\",l4=\"4\"}} {i}\n");
    }
    body += "# TYPE c counter\n";
    for i in (0..200).rev() {
        body += &format!("c{{job=\"j{i}\",k=\"{i}\"}} {i}\n");
    }
    same(&[&body, &body], Format::Text, &target(&[], true));
}

/// A collection over the limit is refused by both, and the encoder still
/// counts every point (the drop counter's figure).
#[test]
fn too_large_for_one_append_is_refused_alike() {
    let mut body = String::from("# TYPE g gauge\n");
    for i in 0..1000 {
        body += &format!("g{{i=\"{i}\"}} 1\n");
    }
    let e = parse(&body, Format::Text, &Limits::default()).unwrap();
    let t = target(&[], false);
    let r = old(e.clone(), &t, T, &mut StartTimes::default(), 4096);
    assert!(matches!(r, Err(SplitError::TooLarge { .. })));
    let mut b = Builder::new(&t, Encoder::new(SCOPE, 4096));
    scrape(&mut b, e, T, &mut StartTimes::default());
    let out = b.finish();
    assert_eq!(out.points(), 1003);
    assert!(matches!(
        out.finish("scrape", T),
        Err(SplitError::TooLarge { .. })
    ));
}
