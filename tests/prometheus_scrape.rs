//! The `prometheus_scrape` source against real targets: the node exporter
//! (Debian's `prometheus-node-exporter`), and a small HTTP target in the
//! test serving each metric type in both formats, bad expositions, an
//! oversize body, and never answering; its points read back from a `file`
//! sink. A failed scrape appends `up` = 0 (and the two `scrape_*`
//! series), nothing of the target's, and counts why.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/file_sink_out.rs"]
mod file_sink_out;
#[path = "common/prometheus.rs"]
mod prometheus;
#[path = "common/require.rs"]
mod require;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use daemon::{free_port, wait_for, Agent};
use serde_json::Value;

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
const TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Each path's answer: (content type and any more header lines, body),
/// or `None`: never answer.
type Routes = Arc<Mutex<RouteTable>>;
type RouteTable = HashMap<String, Option<(String, Vec<u8>)>>;

/// A scrape target: each path answers with (content type, body); a path
/// of `None` accepts and never answers.
struct Target {
    addr: SocketAddr,
    routes: Routes,
    /// Connections of the never-answering path, held open.
    _held: Arc<Mutex<Vec<TcpStream>>>,
}

impl Target {
    fn start() -> Target {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let routes: Routes = Arc::default();
        let held: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (r, h) = (routes.clone(), held.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (r, h) = (r.clone(), h.clone());
                std::thread::spawn(move || serve(&mut conn, &r, &h));
            }
        });
        Target {
            addr,
            routes,
            _held: held,
        }
    }

    fn set(&self, path: &str, answer: Option<(&str, String)>) {
        self.set_bytes(path, answer.map(|(t, b)| (t.to_string(), b.into_bytes())));
    }

    fn set_bytes(&self, path: &str, answer: Option<(String, Vec<u8>)>) {
        self.routes.lock().unwrap().insert(path.to_string(), answer);
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// One request per connection (the source's client may keep it open; it
/// opens another then).
fn serve(conn: &mut TcpStream, routes: &Mutex<RouteTable>, held: &Mutex<Vec<TcpStream>>) {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match conn.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&buf);
    let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
    let answer = routes.lock().unwrap().get(&path).cloned();
    match answer {
        Some(Some((ctype, body))) => {
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(&body);
        }
        Some(None) => {
            if let Ok(c) = conn.try_clone() {
                held.lock().unwrap().push(c);
            }
        }
        None => {
            let _ = write!(
                conn,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
        }
    }
}

fn agent(sources: &str) -> Agent {
    agent_of(sources, "\"scrape\"")
}

/// An agent running `sources`, `inputs` of its file sink.
fn agent_of(sources: &str, inputs: &str) -> Agent {
    let mut a = Agent::new(&format!(
        "{sources}\n[sinks.out]\ntype = \"file\"\ninputs = [{inputs}]\npath = \"out\"\nbatch_timeout = \"50ms\"\n"
    ));
    let out = a.path("out");
    let text = std::fs::read_to_string(&a.config)
        .unwrap()
        .replace("path = \"out\"", &format!("path = \"{}\"", out.display()));
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();
    a
}

fn name(v: &Value) -> &str {
    v["record"]["name"].as_str().unwrap_or_default()
}

fn instance(v: &Value) -> Option<String> {
    file_sink_out::string_attr(&v["resource"], "service.instance.id")
}

/// The record's data points, whatever its kind, and the kind.
fn points(v: &Value) -> (&str, &Vec<Value>) {
    for kind in ["gauge", "sum", "histogram", "summary"] {
        if let Some(p) = v["record"][kind]["dataPoints"].as_array() {
            return (kind, p);
        }
    }
    panic!("no data points: {v}")
}

fn number(v: &Value) -> f64 {
    match &v["asDouble"] {
        Value::Number(n) => n.as_f64().unwrap(),
        Value::String(s) => s.parse().unwrap_or(f64::NAN),
        other => panic!("not a double: {other}"),
    }
}

fn u(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap(),
        Value::Number(n) => n.as_u64().unwrap(),
        other => panic!("not a count: {other}"),
    }
}

/// The lines of one target (by instance), once `up` appeared for it `n`
/// times.
fn scrapes_of(out: &std::path::Path, inst: &str, n: usize) -> Vec<Value> {
    wait_for(
        &format!("{n} scrapes of {inst}"),
        Duration::from_secs(30),
        || {
            let lines: Vec<Value> = file_sink_out::lines(out)
                .into_iter()
                .filter(|l| instance(l).as_deref() == Some(inst))
                .collect();
            (lines.iter().filter(|l| name(l) == "up").count() >= n).then_some(lines)
        },
    )
}

const OM_BODY: &str = "# TYPE http_requests counter\n\
# HELP http_requests Requests served.\n\
http_requests_total{code=\"200\"} 1027 # {trace_id=\"KOO5S4vxi0o\"} 1 1700000000.5\n\
http_requests_created{code=\"200\"} 1600000000.25\n\
# TYPE latency_seconds histogram\n\
# UNIT latency_seconds seconds\n\
latency_seconds_bucket{le=\"0.1\"} 3 # {trace_id=\"a\"} 0.05\n\
latency_seconds_bucket{le=\"1.0\"} 7\n\
latency_seconds_bucket{le=\"+Inf\"} 9\n\
latency_seconds_sum 4.5\n\
latency_seconds_count 9\n\
latency_seconds_created 1600000000.0\n\
# TYPE rpc summary\n\
rpc{quantile=\"0.5\"} 0.2\n\
rpc{quantile=\"0.9\"} 0.7\n\
rpc_sum 12.0\n\
rpc_count 40\n\
# TYPE temperature gauge\n\
temperature{zone=\"cpu\"} 41.5\n\
# TYPE build info\n\
build_info{version=\"1.2.3\"} 1\n\
# TYPE mode stateset\n\
mode{mode=\"on\"} 1\n\
mode{mode=\"off\"} 0\n\
# TYPE mystery unknown\n\
mystery -Inf\n\
# EOF\n";

const TEXT_BODY: &str = "# HELP jobs_done_total Jobs.\n\
# TYPE jobs_done_total counter\n\
jobs_done_total{queue=\"a \\\"quoted\\\" one\"} 5 1700000000123\n\
# TYPE queue_depth gauge\n\
queue_depth 3\n\
untyped_thing 8\n";

#[test]
fn each_metric_type_in_both_formats_becomes_the_right_points() {
    let t = Target::start();
    t.set("/om", Some((OPENMETRICS, OM_BODY.to_string())));
    t.set("/text", Some((TEXT, TEXT_BODY.to_string())));
    let mut a = agent_of(&format!(
        "[sources.scrape]\ntype = \"prometheus_scrape\"\ntargets = [\"{}\"]\ninterval = \"1s\"\ntimeout = \"900ms\"\n\
         labels = {{ site = \"plant-3\", job = \"edge\" }}\n\n\
         [sources.scrape2]\ntype = \"prometheus_scrape\"\ntargets = [\"{}\"]\ninterval = \"1s\"\ntimeout = \"900ms\"\n",
        t.url("/om"),
        t.url("/text"),
    ), "\"scrape\", \"scrape2\"");
    let inst = t.addr.to_string();
    // Both sources scrape the same host:port; tell them apart by source.
    let lines = wait_for("both targets scraped", Duration::from_secs(30), || {
        let lines = file_sink_out::lines(&a.path("out"));
        let ups = |s: &str| {
            lines
                .iter()
                .filter(|l| name(l) == "up" && l["source"] == s)
                .count()
        };
        (ups("scrape") >= 1 && ups("scrape2") >= 1).then_some(lines)
    });
    let of = |source: &str, n: &str| -> Value {
        lines
            .iter()
            .find(|l| l["source"] == source && name(l) == n)
            .unwrap_or_else(|| panic!("no {n} from {source}"))
            .clone()
    };

    // OpenMetrics: the counter, its _created as start time, no exemplar.
    let c = of("scrape", "http_requests");
    assert_eq!(c["record"]["sum"]["isMonotonic"], true, "{c}");
    assert_eq!(c["record"]["sum"]["aggregationTemporality"], 2);
    assert_eq!(c["record"]["description"], "Requests served.");
    let p = &points(&c).1[0];
    assert_eq!(number(p), 1027.0);
    assert_eq!(u(&p["startTimeUnixNano"]), 1_600_000_000_250_000_000);
    assert_eq!(p["exemplars"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        file_sink_out::string_attr(p, "code").as_deref(),
        Some("200")
    );
    assert_eq!(
        file_sink_out::string_attr(p, "site").as_deref(),
        Some("plant-3")
    );
    // job and instance are the resource.
    assert_eq!(
        file_sink_out::string_attr(&c["resource"], "service.name").as_deref(),
        Some("edge")
    );
    assert_eq!(instance(&c).as_deref(), Some(inst.as_str()));
    assert!(!lines.iter().any(|l| name(l).ends_with("_created")));

    let h = of("scrape", "latency_seconds");
    assert_eq!(h["record"]["unit"], "seconds");
    let p = &points(&h).1[0];
    assert_eq!(points(&h).0, "histogram");
    let bounds: Vec<f64> = p["explicitBounds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_f64().unwrap())
        .collect();
    assert_eq!(bounds, [0.1, 1.0]);
    let counts: Vec<u64> = p["bucketCounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(u)
        .collect();
    assert_eq!(counts, [3, 4, 2]);
    assert_eq!((u(&p["count"]), p["sum"].as_f64()), (9, Some(4.5)));
    assert_eq!(u(&p["startTimeUnixNano"]), 1_600_000_000_000_000_000);

    let s = of("scrape", "rpc");
    let p = &points(&s).1[0];
    assert_eq!(points(&s).0, "summary");
    assert_eq!((u(&p["count"]), p["sum"].as_f64()), (40, Some(12.0)));
    let q: Vec<(f64, f64)> = p["quantileValues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["quantile"].as_f64().unwrap(),
                q["value"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(q, [(0.5, 0.2), (0.9, 0.7)]);

    for (n, v) in [("temperature", 41.5), ("build_info", 1.0)] {
        let g = of("scrape", n);
        assert_eq!(points(&g).0, "gauge", "{g}");
        assert_eq!(number(&points(&g).1[0]), v);
    }
    assert_eq!(
        file_sink_out::string_attr(&points(&of("scrape", "build_info")).1[0], "version").as_deref(),
        Some("1.2.3")
    );
    let modes: Vec<Value> = lines
        .iter()
        .filter(|l| l["source"] == "scrape" && name(l) == "mode")
        .cloned()
        .collect();
    assert!(modes.len() >= 2 && modes.iter().all(|m| points(m).0 == "gauge"));
    assert_eq!(points(&of("scrape", "mystery")).0, "gauge");
    assert_eq!(
        number(&of("scrape", "up")["record"]["gauge"]["dataPoints"][0]),
        1.0
    );
    let scraped = of("scrape", "scrape_samples_scraped");
    assert_eq!(number(&points(&scraped).1[0]), 17.0);
    assert_eq!(points(&of("scrape", "scrape_duration_seconds")).0, "gauge");

    // The text format: _total trimmed, escapes, a millisecond timestamp,
    // untyped as a gauge; job defaults to the source's name.
    let j = of("scrape2", "jobs_done");
    let p = &points(&j).1[0];
    assert_eq!(points(&j).0, "sum");
    assert_eq!(
        file_sink_out::string_attr(p, "queue").as_deref(),
        Some("a \"quoted\" one")
    );
    assert_eq!(u(&p["timeUnixNano"]), 1_700_000_000_123_000_000);
    assert_eq!(
        file_sink_out::string_attr(&j["resource"], "service.name").as_deref(),
        Some("scrape2")
    );
    assert_eq!(points(&of("scrape2", "queue_depth")).0, "gauge");
    assert_eq!(points(&of("scrape2", "untyped_thing")).0, "gauge");
    assert_eq!(
        a.metric("holdfast_scrape_scrapes_total{source=\"scrape\",result=\"malformed\"}"),
        Some(0.0)
    );
    a.stop();
}

#[test]
fn failed_scrapes_append_up_0_and_nothing_else() {
    let t = Target::start();
    let bad = Target::start();
    let big = Target::start();
    let silent = Target::start();
    t.set("/ok", Some((TEXT, "fine 1\n".to_string())));
    bad.set(
        "/metrics",
        Some((OPENMETRICS, "fine 1\nbroken{x=\"1\" 2\n# EOF\n".to_string())),
    );
    big.set(
        "/metrics",
        Some((TEXT, format!("big{{x=\"{}\"}} 1\n", "y".repeat(8000)))),
    );
    silent.set("/metrics", None);
    // About 1 KiB of gzip, under max_body_size, that decodes to 1 MiB:
    // refused at max_body_size while decoding.
    let bomb = Target::start();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    for _ in 0..1024 {
        gz.write_all(&[b'a'; 1024]).unwrap();
    }
    let gz = gz.finish().unwrap();
    assert!(gz.len() < 4096, "{}", gz.len());
    bomb.set_bytes(
        "/metrics",
        Some((format!("{TEXT}\r\nContent-Encoding: gzip"), gz)),
    );
    let refused = free_port();
    let mut a = agent(&format!(
        "[sources.scrape]\ntype = \"prometheus_scrape\"\ntargets = [\"{}\", \"{}\", \"{}\", \"{}\", \"{}\", \"http://127.0.0.1:{refused}/metrics\"]\n\
         interval = \"1s\"\ntimeout = \"500ms\"\nmax_body_size = \"4KiB\"\n",
        t.url("/ok"),
        bad.url("/metrics"),
        big.url("/metrics"),
        silent.url("/metrics"),
        bomb.url("/metrics"),
    ));
    let out = a.path("out");
    for (target, reason) in [
        (bad.addr.to_string(), "malformed"),
        (big.addr.to_string(), "body_too_large"),
        (bomb.addr.to_string(), "body_too_large"),
        (silent.addr.to_string(), "timeout"),
        (format!("127.0.0.1:{refused}"), "connect"),
    ] {
        let lines = scrapes_of(&out, &target, 2);
        let names: std::collections::BTreeSet<&str> = lines.iter().map(name).collect();
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["scrape_duration_seconds", "scrape_samples_scraped", "up"],
            "{target}"
        );
        for l in lines
            .iter()
            .filter(|l| name(l) != "scrape_duration_seconds")
        {
            assert_eq!(number(&points(l).1[0]), 0.0, "{target}: {l}");
        }
        let counted = a
            .metric(&format!(
                "holdfast_scrape_scrapes_total{{source=\"scrape\",result=\"{reason}\"}}"
            ))
            .unwrap_or(0.0);
        assert!(counted >= 2.0, "{reason}: {counted}");
    }
    // The good target beside them is scraped all the while.
    let ok = scrapes_of(&out, &t.addr.to_string(), 2);
    assert!(ok.iter().any(|l| name(l) == "fine"));
    assert!(
        a.metric("holdfast_scrape_scrapes_total{source=\"scrape\",result=\"ok\"}")
            .unwrap()
            >= 2.0
    );
    let log = a.stderr();
    assert!(log.contains("line 2: labels must be separated"), "{log}");
    assert!(log.contains("max_body_size"), "{log}");
    // Said once per target while its reason stays the same, however many
    // scrapes fail.
    let warned = log
        .lines()
        .filter(|l| l.contains("scrape failed") && l.contains(&silent.addr.to_string()))
        .count();
    assert_eq!(warned, 1, "{log}");
    a.stop();
}

#[test]
fn the_node_exporter_is_scraped() {
    if !prometheus::available("the_node_exporter_is_scraped") {
        return;
    }
    let ne = prometheus::NodeExporter::started();
    let mut a = agent(&format!(
        "[sources.scrape]\ntype = \"prometheus_scrape\"\ntargets = [\"{}\"]\ninterval = \"1s\"\ntimeout = \"900ms\"\n",
        ne.url()
    ));
    let lines = scrapes_of(&a.path("out"), &format!("127.0.0.1:{}", ne.port), 1);
    let up = lines.iter().find(|l| name(l) == "up").unwrap();
    assert_eq!(number(&points(up).1[0]), 1.0, "{}", a.stderr());
    let cpu: Vec<&Value> = lines
        .iter()
        .filter(|l| name(l) == "node_cpu_seconds")
        .collect();
    assert!(!cpu.is_empty());
    for c in &cpu {
        assert_eq!(c["record"]["sum"]["isMonotonic"], true);
        let p = &points(c).1[0];
        assert!(
            file_sink_out::string_attr(p, "mode").is_some()
                && file_sink_out::string_attr(p, "cpu").is_some()
        );
    }
    let load = lines
        .iter()
        .find(|l| name(l) == "node_load1")
        .expect("node_load1");
    assert_eq!(points(load).0, "gauge");
    let samples = lines
        .iter()
        .find(|l| name(l) == "scrape_samples_scraped")
        .unwrap();
    assert!(number(&points(samples).1[0]) > 100.0);
    assert_eq!(
        a.metric("holdfast_scrape_scrapes_total{source=\"scrape\",result=\"ok\"}")
            .map(|v| v >= 1.0),
        Some(true)
    );
    a.stop();
}

#[test]
fn the_targets_file_is_read_again_when_it_changes_and_a_bad_one_keeps_the_targets() {
    let t = Target::start();
    t.set("/a", Some((TEXT, "from_a 1\n".to_string())));
    t.set("/b", Some((TEXT, "from_b 2\n".to_string())));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("targets.json");
    let group = |path: &str, site: &str| {
        format!(
            "[{{\"targets\": [\"{}\"], \"labels\": {{\"__metrics_path__\": \"{path}\", \"site\": \"{site}\"}}}}]",
            t.addr
        )
    };
    std::fs::write(&file, group("/a", "one")).unwrap();
    let mut a = agent(&format!(
        "[sources.scrape]\ntype = \"prometheus_scrape\"\ntargets_file = \"{}\"\ninterval = \"1s\"\ntimeout = \"900ms\"\n",
        file.display()
    ));
    let out = a.path("out");
    let count = |n: &str| {
        file_sink_out::lines(&out)
            .iter()
            .filter(|l| name(l) == n)
            .count()
    };
    wait_for("from_a", Duration::from_secs(30), || {
        (count("from_a") > 0).then_some(())
    });

    std::fs::write(&file, group("/b", "two")).unwrap();
    let b = wait_for("from_b", Duration::from_secs(30), || {
        file_sink_out::lines(&out)
            .into_iter()
            .find(|l| name(l) == "from_b")
    });
    assert_eq!(
        file_sink_out::string_attr(&points(&b).1[0], "site").as_deref(),
        Some("two")
    );
    // A scrape of /a may have been under way at the change; none after.
    let seen_b = count("from_b");
    wait_for("two more scrapes of /b", Duration::from_secs(30), || {
        (count("from_b") >= seen_b + 2).then_some(())
    });
    let a_then = count("from_a");
    wait_for("two more scrapes of /b", Duration::from_secs(30), || {
        (count("from_b") >= seen_b + 4).then_some(())
    });
    assert_eq!(
        count("from_a"),
        a_then,
        "the target removed from the file is still scraped"
    );

    // A broken file keeps /b, and says why.
    std::fs::write(&file, "[{\"targets\": ").unwrap();
    wait_for("the broken file reported", Duration::from_secs(30), || {
        a.stderr()
            .contains("the targets file is not usable")
            .then_some(())
    });
    let now = count("from_b");
    wait_for("/b still scraped", Duration::from_secs(30), || {
        (count("from_b") >= now + 2).then_some(())
    });
    a.stop();
}

/// An HTTPS target (the test CA's certificate for 127.0.0.1) that answers
/// only the bearer token `s3cret`, with a gzip body.
fn https_target() -> SocketAddr {
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::{ServerConfig, ServerConnection, StreamOwned};
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/tls");
    let certs = CertificateDer::pem_file_iter(dir.join("cert.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("key.pem")).unwrap();
    let config = Arc::new(
        ServerConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap(),
    );
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(b"# TYPE secret_gauge gauge\nsecret_gauge 42\n")
        .unwrap();
    let body = gz.finish().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for tcp in listener.incoming() {
            let Ok(tcp) = tcp else { continue };
            let (config, body) = (config.clone(), body.clone());
            std::thread::spawn(move || {
                let mut s = StreamOwned::new(ServerConnection::new(config).unwrap(), tcp);
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match s.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
                if head.contains("authorization: bearer s3cret\r\n") {
                    let _ = write!(
                        s,
                        "HTTP/1.1 200 OK\r\nContent-Type: {TEXT}\r\nContent-Encoding: gzip\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = s.write_all(&body);
                } else {
                    let _ = write!(s, "HTTP/1.1 401 Unauthorized\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                }
                let _ = s.flush();
                s.conn.send_close_notify();
                let _ = s.flush();
            });
        }
    });
    addr
}

#[test]
fn an_https_target_with_a_bearer_token_from_a_file_and_a_gzip_body() {
    let addr = https_target();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "wrong\n").unwrap();
    let ca =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/tls/ca.pem");
    let mut a = agent(&format!(
        "[sources.scrape]\ntype = \"prometheus_scrape\"\ntargets = [\"https://{addr}/metrics\"]\ninterval = \"1s\"\ntimeout = \"900ms\"\n\
         bearer_token_file = \"{}\"\ntls.ca_file = \"{}\"\n",
        token.display(),
        ca.display()
    ));
    // The wrong token: the target answers 401, up = 0.
    let denied = "holdfast_scrape_scrapes_total{source=\"scrape\",result=\"http_status\"}";
    wait_for("a 401 counted", Duration::from_secs(30), || {
        (a.metric(denied).unwrap_or(0.0) >= 1.0).then_some(())
    });
    // The file rotated: the next scrape sends the new token.
    std::fs::write(&token, "s3cret\n").unwrap();
    let g = wait_for("secret_gauge", Duration::from_secs(30), || {
        file_sink_out::lines(&a.path("out"))
            .into_iter()
            .find(|l| name(l) == "secret_gauge")
    });
    assert_eq!(number(&points(&g).1[0]), 42.0);
    assert!(
        a.metric("holdfast_scrape_scrapes_total{source=\"scrape\",result=\"ok\"}")
            .unwrap()
            >= 1.0
    );
    a.stop();
}
