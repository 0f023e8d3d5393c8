use super::*;

fn text(body: &str) -> Exposition<'_> {
    parse(body, Format::Text, &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn om(body: &str) -> Exposition<'_> {
    parse(body, Format::OpenMetrics, &Limits::default()).unwrap_or_else(|e| panic!("{e}"))
}

fn err(body: &str, format: Format, limits: &Limits) -> ParseError {
    match parse(body, format, limits) {
        Ok(e) => panic!("parsed: {e:?}"),
        Err(e) => e,
    }
}

fn family<'a>(e: &'a Exposition<'a>, name: &str) -> &'a Family<'a> {
    e.families
        .iter()
        .find(|f| f.name == name)
        .unwrap_or_else(|| panic!("no family {name} in {e:?}"))
}

fn labels<'a>(pairs: &[(&'a str, &'a str)]) -> Labels<'a> {
    pairs
        .iter()
        .map(|(k, v)| (*k, std::borrow::Cow::Borrowed(*v)))
        .collect()
}

#[test]
fn the_text_format_s_types() {
    let e = text(
        "# HELP http_requests_total Requests.\n\
         # TYPE http_requests_total counter\n\
         http_requests_total{method=\"get\",code=\"200\"} 1027 1395066363000\n\
         http_requests_total{method=\"post\",code=\"400\"}    3 1395066363000\n\
         # TYPE temp gauge\n\
         temp -3.5\n\
         # TYPE rpc_duration_seconds summary\n\
         rpc_duration_seconds{quantile=\"0.5\"} 4773\n\
         rpc_duration_seconds{quantile=\"0.99\"} 76656\n\
         rpc_duration_seconds_sum 1.7560473e+07\n\
         rpc_duration_seconds_count 2693\n\
         # TYPE latency histogram\n\
         latency_bucket{le=\"0.05\"} 24054\n\
         latency_bucket{le=\"+Inf\"} 144320\n\
         latency_sum 53423\n\
         latency_count 144320\n\
         # a comment\n\
         \n\
         no_type_here 7\n",
    );
    let c = family(&e, "http_requests_total");
    assert_eq!((c.kind, c.help.as_str()), (Kind::Counter, "Requests."));
    assert_eq!(c.samples.len(), 2);
    assert_eq!(c.samples[0].suffix, "");
    assert_eq!(
        c.samples[0].labels,
        labels(&[("method", "get"), ("code", "200")])
    );
    assert_eq!(c.samples[0].value, 1027.0);
    assert_eq!(c.samples[0].timestamp_ns, Some(1_395_066_363_000_000_000));
    assert_eq!(family(&e, "temp").samples[0].value, -3.5);
    let s = family(&e, "rpc_duration_seconds");
    assert_eq!(s.kind, Kind::Summary);
    let suffixes: Vec<_> = s.samples.iter().map(|s| s.suffix).collect();
    assert_eq!(suffixes, ["", "", "_sum", "_count"]);
    let h = family(&e, "latency");
    let suffixes: Vec<_> = h.samples.iter().map(|s| s.suffix).collect();
    assert_eq!(suffixes, ["_bucket", "_bucket", "_sum", "_count"]);
    assert_eq!(family(&e, "no_type_here").kind, Kind::Unknown);
    assert_eq!(e.samples, 12);
}

/// The node exporter's gauge `x` beside its counter `x_total` are two
/// families, in the text format as node exporter writes them.
#[test]
fn a_gauge_and_a_counter_of_the_same_stem_are_two_families() {
    let e = text(
        "# TYPE go_memstats_alloc_bytes gauge\ngo_memstats_alloc_bytes 3\n\
         # HELP go_memstats_alloc_bytes_total Total.\n\
         # TYPE go_memstats_alloc_bytes_total counter\ngo_memstats_alloc_bytes_total 5\n",
    );
    assert_eq!(family(&e, "go_memstats_alloc_bytes").kind, Kind::Gauge);
    let c = family(&e, "go_memstats_alloc_bytes_total");
    assert_eq!((c.kind, c.help.as_str()), (Kind::Counter, "Total."));
    assert_eq!(c.samples[0].value, 5.0);
}

#[test]
fn openmetrics_types_units_created_and_exemplars() {
    let e = om("# TYPE acme_http_router_request_seconds summary\n\
         # UNIT acme_http_router_request_seconds seconds\n\
         # HELP acme_http_router_request_seconds Latency though all of ACME's HTTP request router.\n\
         acme_http_router_request_seconds_sum{path=\"/api/v1\",method=\"GET\"} 9036.32\n\
         acme_http_router_request_seconds_count{path=\"/api/v1\",method=\"GET\"} 807283.0\n\
         acme_http_router_request_seconds_created{path=\"/api/v1\",method=\"GET\"} 1605281325.0\n\
         # TYPE foo counter\n\
         foo_total 17.0 1520879607.789 # {trace_id=\"KOO5S4vxi0o\"} 0.67\n\
         foo_created 1520872607.123\n\
         # TYPE hist histogram\n\
         hist_bucket{le=\"0.01\"} 0\n\
         hist_bucket{le=\"0.1\"} 8 # {} 0.054\n\
         hist_bucket{le=\"+Inf\"} 17\n\
         hist_count 17\n\
         hist_sum 324789.3\n\
         hist_created 1520430000.123\n\
         # TYPE gh gaugehistogram\n\
         gh_bucket{le=\"1\"} 2\n\
         gh_bucket{le=\"+Inf\"} 3\n\
         gh_gcount 3\n\
         gh_gsum 2.5\n\
         # TYPE build info\n\
         build_info{version=\"1.2\"} 1\n\
         # TYPE state stateset\n\
         state{state=\"a\"} 1\n\
         state{state=\"b\"} 0\n\
         # TYPE u unknown\n\
         u NaN\n\
         # EOF\n");
    let s = family(&e, "acme_http_router_request_seconds");
    assert_eq!((s.kind, s.unit.as_str()), (Kind::Summary, "seconds"));
    assert!(s.help.starts_with("Latency though"));
    assert_eq!(s.samples[2].suffix, "_created");
    let c = family(&e, "foo");
    assert_eq!(c.kind, Kind::Counter);
    assert_eq!(c.samples[0].suffix, "_total");
    assert_eq!(c.samples[0].value, 17.0);
    assert_eq!(c.samples[0].timestamp_ns, Some(1_520_879_607_789_000_000));
    assert_eq!(c.samples[1].suffix, "_created");
    assert_eq!(c.samples[1].value, 1520872607.123);
    let h = family(&e, "hist");
    let suffixes: Vec<_> = h.samples.iter().map(|s| s.suffix).collect();
    assert_eq!(
        suffixes,
        ["_bucket", "_bucket", "_bucket", "_count", "_sum", "_created"]
    );
    let gh = family(&e, "gh");
    let suffixes: Vec<_> = gh.samples.iter().map(|s| s.suffix).collect();
    assert_eq!(suffixes, ["_bucket", "_bucket", "_gcount", "_gsum"]);
    let i = family(&e, "build");
    assert_eq!((i.kind, i.samples[0].suffix), (Kind::Info, "_info"));
    assert_eq!(family(&e, "state").kind, Kind::StateSet);
    assert!(family(&e, "u").samples[0].value.is_nan());
}

#[test]
fn label_escapes_and_special_values() {
    let e = text(
        "msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} 1.458255915e9\n\
         a{x=\"\"} +Inf\nb -Inf\nc NaN\nd{x=\"1\",} 1e-3\n",
    );
    let s = &family(&e, "msdos_file_access_time_seconds").samples[0];
    assert_eq!(
        s.labels,
        labels(&[
            ("path", "C:\\DIR\\FILE.TXT"),
            ("error", "Cannot find file:\n\"FILE.TXT\"")
        ])
    );
    // Only a value with an escape is a string of its own.
    assert!(matches!(s.labels[0].1, std::borrow::Cow::Owned(_)));
    assert!(matches!(
        family(&e, "d").samples[0].labels[0].1,
        std::borrow::Cow::Borrowed("1")
    ));
    assert_eq!(family(&e, "a").samples[0].value, f64::INFINITY);
    assert_eq!(family(&e, "b").samples[0].value, f64::NEG_INFINITY);
    assert!(family(&e, "c").samples[0].value.is_nan());
    assert_eq!(family(&e, "d").samples[0].value, 0.001);
}

#[test]
fn malformed_lines_are_named_with_their_number() {
    let cases: &[(&str, Format, usize, &str)] = &[
        ("a 1\nb{x=\"1\" 2\n", Format::Text, 2, "closed by '}'"),
        ("a 1\n\nb{x=1} 2\n", Format::Text, 3, "double quotes"),
        ("a one\n", Format::Text, 1, "\"one\" is not a number"),
        ("a 1 12.5\n", Format::Text, 1, "integer milliseconds"),
        ("a{x=\"\\q\"} 1\n", Format::Text, 1, "not \\\\"),
        ("a{x=\"1\",x=\"2\"} 1\n", Format::Text, 1, "given twice"),
        ("a{x=\"1\"}1\n", Format::Text, 1, "no space"),
        ("1a 1\n", Format::Text, 1, "metric name"),
        ("a 1 # {x=\"1\"} 1\n", Format::Text, 1, "exemplar"),
        ("# TYPE a nonsense\n", Format::Text, 1, "not a type"),
        (
            "# TYPE a gauge\na 1\n# TYPE a gauge\n",
            Format::Text,
            3,
            "second # TYPE",
        ),
        ("a 1\n", Format::OpenMetrics, 1, "no \"# EOF\""),
        (
            "a 1\n# EOF\nb 2\n",
            Format::OpenMetrics,
            3,
            "after \"# EOF\"",
        ),
        ("a 1\n\n# EOF\n", Format::OpenMetrics, 2, "empty line"),
        (
            "# random\n# EOF\n",
            Format::OpenMetrics,
            1,
            "no OpenMetrics line",
        ),
        (
            "# TYPE foo counter\nfoo 1\n# EOF\n",
            Format::OpenMetrics,
            2,
            "does not fit",
        ),
        (
            "a 1 # x\n# EOF\n",
            Format::OpenMetrics,
            1,
            "exemplar must be",
        ),
        (
            "a 1 # {x=\"1\"}\n# EOF\n",
            Format::OpenMetrics,
            1,
            "without a value",
        ),
    ];
    for (body, format, line, fragment) in cases {
        let e = err(body, *format, &Limits::default());
        assert_eq!(e.line, *line, "{body:?}: {e}");
        assert_eq!(e.reason(), "malformed", "{body:?}: {e}");
        let message = e.to_string();
        assert!(message.starts_with(&format!("line {line}: ")), "{message}");
        assert!(message.contains(fragment), "{body:?}: {message}");
    }
}

#[test]
fn every_bound_refuses_the_whole_exposition() {
    let small = Limits {
        max_samples: 2,
        max_labels: 2,
        max_label_bytes: 8,
    };
    let e = err("a 1\nb 2\nc 3\n", Format::Text, &small);
    assert_eq!((e.line, e.reason()), (3, "too_many_samples"));
    assert!(e.to_string().contains("max_samples"), "{e}");
    let e = err("a{x=\"1\",y=\"2\",z=\"3\"} 1\n", Format::Text, &small);
    assert_eq!((e.line, e.reason()), (1, "too_many_labels"));
    let e = err("a{x=\"123456789\"} 1\n", Format::Text, &small);
    assert_eq!((e.line, e.reason()), (1, "label_too_long"));
    let e = err("a{abcdefghi=\"1\"} 1\n", Format::Text, &small);
    assert_eq!((e.line, e.reason()), (1, "label_too_long"));
    // Families without samples count too.
    let e = err("# HELP a x\n# HELP b x\n# HELP c x\n", Format::Text, &small);
    assert_eq!((e.line, e.reason()), (3, "too_many_samples"));
    // Escapes count as what they stand for; a value of exactly the bound
    // is taken.
    assert!(parse("a{x=\"1234567\\n\"} 1\n", Format::Text, &small).is_ok());
    // Exemplar labels are bounded too.
    let e = err(
        "a 1 # {x=\"123456789\"} 1\n# EOF\n",
        Format::OpenMetrics,
        &small,
    );
    assert_eq!(e.reason(), "label_too_long");
}

/// The node exporter's own answer, as Debian's package serves it.
#[test]
fn the_node_exporter_s_output_parses() {
    let body = include_str!("../../../../tests/fixtures/prometheus/node_exporter.txt");
    let e = text(body);
    let lines = body
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count();
    assert_eq!(e.samples, lines);
    assert!(
        e.families.iter().all(|f| !f.samples.is_empty()),
        "a family without samples"
    );
    let cpu = family(&e, "node_cpu_seconds_total");
    assert_eq!(cpu.kind, Kind::Counter);
    assert!(cpu
        .samples
        .iter()
        .all(|s| s.labels.iter().any(|(n, _)| *n == "mode")));
    assert_eq!(family(&e, "go_gc_duration_seconds").kind, Kind::Summary);
    assert_eq!(family(&e, "node_load1").kind, Kind::Gauge);
}

mod proptest_round_trip {
    use super::*;
    use proptest::prelude::*;

    fn escape(v: &str) -> String {
        v.replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('\n', "\\n")
    }

    proptest! {
        /// Any gauge written with escaped labels and a value reads back as
        /// written, in both formats.
        #[test]
        fn written_samples_read_back(
            name in "[a-zA-Z_:][a-zA-Z0-9_:]{0,20}",
            pairs in proptest::collection::btree_map("[a-zA-Z_][a-zA-Z0-9_]{0,10}", "\\PC{0,20}", 0..5),
            value in proptest::num::f64::NORMAL | proptest::num::f64::ZERO,
            ts in proptest::option::of(0i64..4_000_000_000_000),
            openmetrics in any::<bool>(),
        ) {
            let set: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}=\"{}\"", escape(v))).collect();
            let (format, stamp, eof) = match (openmetrics, ts) {
                (false, Some(ms)) => (Format::Text, format!(" {ms}"), ""),
                (false, None) => (Format::Text, String::new(), ""),
                (true, Some(ms)) => (Format::OpenMetrics, format!(" {}.{:03}", ms / 1000, ms % 1000), "# EOF\n"),
                (true, None) => (Format::OpenMetrics, String::new(), "# EOF\n"),
            };
            let body = format!("# TYPE {name} gauge\n{name}{{{}}} {value:?}{stamp}\n{eof}", set.join(","));
            let e = parse(&body, format, &Limits::default()).map_err(|e| TestCaseError::fail(format!("{e}\n{body}")))?;
            let s = &e.families[0].samples[0];
            prop_assert_eq!(&e.families[0].name, &name);
            let got: Vec<(String, String)> =
                s.labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
            let want: Vec<(String, String)> = pairs.into_iter().collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(s.value, value);
            prop_assert_eq!(s.timestamp_ns, ts.map(|ms| ms * 1_000_000));
        }
    }
}
