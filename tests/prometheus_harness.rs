//! The Prometheus test harness itself (`tests/common/prometheus.rs`): a
//! receiver that starts, answers queries, and keeps its samples across a
//! kill -9 and a start on the same storage; a node exporter that serves.
//! The metric tests build on it; this fails first when the packages or the
//! harness are wrong.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/prometheus.rs"]
mod prometheus;
#[path = "common/require.rs"]
mod require;

use prometheus::{http_get, NodeExporter, Prometheus};

#[test]
fn the_receiver_starts_answers_and_restarts_and_the_exporter_serves() {
    if !prometheus::available("prometheus_harness") {
        return;
    }
    let mut p = Prometheus::started();
    // Prometheus scrapes nothing here; its own build info is a query away.
    let r = p.query("vector(1)");
    assert_eq!(r.len(), 1, "{r:?}");
    p.kill9();
    p.start();
    assert_eq!(p.query("vector(2)").len(), 1);
    let n = NodeExporter::started();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], n.port));
    let (status, body) = http_get(addr, "/metrics").expect("node exporter answers");
    assert_eq!(status, 200);
    assert!(
        body.contains("node_cpu_seconds_total"),
        "{}",
        &body[..200.min(body.len())]
    );
}
