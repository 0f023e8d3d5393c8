//! The whole pipeline through the real binary: a `file` source tails a log
//! file, the segment log keeps it, the `file` sink writes NDJSON. Every line
//! must come out exactly once across a SIGTERM restart, and at least once
//! (in fact once: the sink skips what its newest file already holds) across
//! kill -9.

#[path = "common/daemon.rs"]
mod daemon;

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::time::Duration;

use daemon::{holdfast, wait_for, Agent};

fn pipeline() -> Agent {
    let mut a = Agent::new("");
    let app = a.path("app.log");
    let out = a.path("out");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"200ms\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"app\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        app.display(),
        out.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(&app, b"").unwrap();
    a.notifications.clear();
    a
}

fn append_lines(path: &Path, from: usize, to: usize) {
    let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    for i in from..to {
        writeln!(
            f,
            "line {i:06} sshd[2451]: pam_unix(sshd:auth): authentication failure; rhost=10.0.0.{}",
            i % 250
        )
        .unwrap();
    }
    f.sync_all().unwrap();
}

/// Line number → how many times it is in the sink's output.
fn delivered(out: &Path) -> BTreeMap<usize, usize> {
    let mut seen = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir(out) else {
        return seen;
    };
    for e in entries {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        // The sink may be writing while this reads: a last line without its
        // newline is not written yet (the sink cuts a torn one off on restart).
        let complete = text.rfind('\n').map_or("", |i| &text[..i]);
        for l in complete.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            let body = v["record"]["body"]["stringValue"]
                .as_str()
                .unwrap()
                .to_string();
            let n: usize = body[5..11].parse().unwrap();
            *seen.entry(n).or_insert(0) += 1;
        }
    }
    seen
}

fn wait_delivered(a: &Agent, n: usize) -> BTreeMap<usize, usize> {
    let out = a.path("out");
    wait_for(
        &format!("{n} lines in the sink's output"),
        Duration::from_secs(60),
        || {
            let d = delivered(&out);
            (d.len() >= n).then_some(d)
        },
    )
}

#[test]
fn every_line_once_across_a_sigterm_restart() {
    let mut a = pipeline();
    let app = a.path("app.log");
    append_lines(&app, 0, 500);
    a.start();
    a.wait_ready();
    wait_delivered(&a, 500);
    assert!(a.stop().success(), "{}", a.stderr());

    // The drain persisted the sink's cursor: nothing left to deliver.
    let out = holdfast(&["inspect", "--config", a.config_arg(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let archive = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "archive")
        .unwrap()
        .clone();
    assert_eq!(archive["lag_events"], 0, "{v}");
    assert_eq!(v["next_seq"], 500, "{v}");

    append_lines(&app, 500, 800);
    a.start();
    a.wait_ready();
    let d = wait_delivered(&a, 800);
    assert!(a.stop().success());
    let d2 = delivered(&a.path("out"));
    assert_eq!(d2, d);
    assert!(
        d.values().all(|&n| n == 1),
        "duplicates: {:?}",
        d.iter().filter(|(_, &n)| n > 1).collect::<Vec<_>>()
    );
    assert_eq!(
        d.keys().copied().collect::<Vec<_>>(),
        (0..800).collect::<Vec<_>>()
    );

    // Metrics told the story while it ran; dump reads the log afterwards.
    let out = holdfast(&["dump", "--config", a.config_arg(), "--from", "798"]);
    let lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    assert_eq!(lines.len(), 2);
    assert!(lines[1].contains("line 000799"), "{}", lines[1]);
}

#[test]
fn every_line_at_least_once_across_kill_9() {
    let mut a = pipeline();
    let app = a.path("app.log");
    let mut written = 0;
    for round in 0..5 {
        append_lines(&app, written, written + 400);
        written += 400;
        a.start();
        a.wait_ready();
        // Kill at a different point each round: some delivered, some not.
        wait_delivered(&a, written - 400 + 100 * (round % 4));
        a.kill9();
    }
    // New lines for the last run: the cursor is written after every
    // commit, so a run after a kill may have nothing left to resend, and
    // the sink's counters appear only once it sends.
    append_lines(&app, written, written + 100);
    written += 100;
    a.start();
    a.wait_ready();
    let d = wait_delivered(&a, written);
    let m = a.metrics();
    assert!(
        m.contains("holdfast_sink_sent_events_total{sink=\"archive\"}"),
        "{m}"
    );
    assert!(a.stop().success());
    assert_eq!(
        d.keys().copied().collect::<Vec<_>>(),
        (0..written).collect::<Vec<_>>()
    );
    let dups = d.values().filter(|&&n| n > 1).count();
    // At-least-once is the promise; the sink's own dedupe makes it once.
    assert_eq!(dups, 0, "duplicated lines after kill -9");
}

/// POSTs `body` to the agent's OTLP listener; returns the status code.
fn post(addr: std::net::SocketAddr, path: &str, content_type: &str, body: &[u8]) -> u16 {
    use std::io::Read;
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.1\r\nHost: test\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(body).unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    resp.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn otlp_records_reach_the_file_sink_through_the_daemon() {
    let mut a = Agent::new("");
    let otlp: std::net::SocketAddr = format!("127.0.0.1:{}", daemon::free_port())
        .parse()
        .unwrap();
    let body = format!(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{otlp}\"\n\n\
         [sinks.archive]\ntype = \"file\"\ninputs = [\"otlp\"]\npath = \"{}\"\nbatch_timeout = \"50ms\"\n",
        a.path("out").display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp");
    for (path, file) in [
        ("/v1/logs", "logs.pb"),
        ("/v1/traces", "traces.pb"),
        ("/v1/metrics", "metrics.pb"),
    ] {
        let body = std::fs::read(fixtures.join(file)).unwrap();
        assert_eq!(
            post(otlp, path, "application/x-protobuf", &body),
            200,
            "{file}"
        );
    }
    assert_eq!(post(otlp, "/v1/logs", "text/plain", b"hi"), 415);
    // One log record, two spans, two metric points.
    let out = a.path("out");
    let lines = wait_for(
        "5 events in the sink's output",
        Duration::from_secs(30),
        || {
            let text: String = std::fs::read_dir(&out)
                .ok()?
                .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
                .collect();
            let lines: Vec<serde_json::Value> = text
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect();
            (lines.len() >= 5).then_some(lines)
        },
    );
    assert!(a.stop().success());
    let signals: Vec<&str> = lines
        .iter()
        .map(|l| l["signal"].as_str().unwrap())
        .collect();
    assert_eq!(signals, ["logs", "traces", "traces", "metrics", "metrics"]);
    assert_eq!(
        lines[0]["record"]["body"]["stringValue"],
        "disk /dev/sda1 almost full"
    );
    assert!(lines
        .iter()
        .all(|l| l["source"] == "otlp" && l["id"].as_str().unwrap().len() == 32));
}

#[path = "common/receivers.rs"]
mod receivers;

/// The real binary with a network sink: lines tailed from a file reach an
/// Elasticsearch-style `_bulk` receiver, each once, keyed by its event id,
/// and the sink's cursor reaches the end of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_lines_reach_an_elasticsearch_receiver_through_the_daemon() {
    let es = receivers::Receiver::start(receivers::Api::Elasticsearch).await;
    let mut a = Agent::new("");
    let app = a.path("app.log");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\nscan_interval = \"200ms\"\n\n\
         [sinks.search]\ntype = \"elasticsearch\"\ninputs = [\"app\"]\nendpoints = [\"http://{}\"]\nbatch_timeout = \"50ms\"\n",
        app.display(),
        es.addr
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(&app, b"").unwrap();
    append_lines(&app, 0, 300);
    a.start();
    a.wait_ready();
    wait_for(
        "300 documents at the receiver",
        Duration::from_secs(60),
        || (es.state().stored.len() >= 300).then_some(()),
    );
    assert!(a.stop().success(), "{}", a.stderr());
    let st = es.state();
    assert_eq!(st.stored.len(), 300);
    assert!(
        st.stored.values().all(|&n| n == 1),
        "a document stored twice"
    );
    drop(st);
    let out = holdfast(&["inspect", "--config", a.config_arg(), "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let search = v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "search")
        .unwrap()
        .clone();
    assert_eq!(search["lag_events"], 0, "{v}");
}
