//! Real Prometheus processes for the metric tests (Debian's `prometheus`
//! 2.42 and `prometheus-node-exporter`, installed by `.ci/run`), on loopback
//! ports the tests pick, each with its own temporary storage directory:
//!
//! * [`Prometheus`] — a remote-write receiver
//!   (`--web.enable-remote-write-receiver`) with an out-of-order window in
//!   its config, so samples held through an outage are accepted when they
//!   arrive late; queried through its HTTP API. It can be stopped (kill -9)
//!   and started again on the same storage and port.
//! * [`NodeExporter`] — a scrape target serving the device's own metrics.
//!
//! Start-up is waited for as a condition with a deadline (`/-/ready`, or
//! the exporter's `/metrics`), never with sleeps.
//!
//! Included with `#[path = "common/prometheus.rs"] mod prometheus;` after
//! `#[path = "common/daemon.rs"] mod daemon;` and
//! `#[path = "common/require.rs"] mod require;`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use std::io::{Read, Write};
use std::net::TcpStream;

use crate::daemon::{free_port, wait_for};

/// The out-of-order window the test receiver accepts late samples within:
/// longer than any outage a test makes.
pub const OUT_OF_ORDER_WINDOW: &str = "1h";

/// Whether Prometheus and the node exporter are here; under CI a missing
/// one fails the test (it never passes by skipping).
pub fn available(test: &str) -> bool {
    crate::require::tool(
        test,
        "prometheus",
        &["--version"],
        "the Debian package prometheus",
    ) && crate::require::tool(
        test,
        "prometheus-node-exporter",
        &["--version"],
        "the Debian package prometheus-node-exporter",
    )
}

/// One `prometheus` server receiving remote writes.
pub struct Prometheus {
    pub port: u16,
    dir: tempfile::TempDir,
    /// Extra lines of `prometheus.yml` (scrape configs for agent-mode peers).
    extra: String,
    /// Extra command-line flags.
    flags: Vec<String>,
    /// `storage.tsdb.out_of_order_time_window`, if any.
    window: Option<&'static str>,
    child: Option<Child>,
}

impl Prometheus {
    /// A receiver with the out-of-order window; not started.
    pub fn new() -> Prometheus {
        Prometheus {
            port: free_port(),
            dir: tempfile::tempdir().expect("tempdir"),
            extra: String::new(),
            flags: Vec::new(),
            window: Some(OUT_OF_ORDER_WINDOW),
            child: None,
        }
    }

    /// A receiver without an out-of-order window, as Prometheus is by
    /// default: a sample older than its head block's window (about an
    /// hour behind its newest) is refused; not started.
    pub fn without_out_of_order_window() -> Prometheus {
        let mut p = Prometheus::new();
        p.window = None;
        p
    }

    /// Started, ready to receive remote writes.
    pub fn started() -> Prometheus {
        let mut p = Prometheus::new();
        p.start();
        p
    }

    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// The remote-write endpoint, for a `prometheus_remote_write` sink.
    pub fn write_url(&self) -> String {
        format!("http://127.0.0.1:{}/api/v1/write", self.port)
    }

    pub fn set_extra_config(&mut self, yaml: &str) {
        self.extra = yaml.into();
    }

    pub fn add_flag(&mut self, flag: &str) {
        self.flags.push(flag.into());
    }

    /// Starts the process (on its storage of before, if any) and waits
    /// until `/-/ready` answers 200.
    pub fn start(&mut self) {
        assert!(self.child.is_none(), "prometheus is already running");
        let conf = self.dir.path().join("prometheus.yml");
        std::fs::write(
            &conf,
            format!(
                "global:\n  scrape_interval: 15s\n{}{}",
                self.window
                    .map(|w| format!("storage:\n  tsdb:\n    out_of_order_time_window: {w}\n"))
                    .unwrap_or_default(),
                self.extra
            ),
        )
        .expect("writing prometheus.yml");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("prometheus.log"))
            .expect("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", conf.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                self.dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{}", self.port))
            .arg("--web.enable-remote-write-receiver")
            .args(&self.flags)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("starting prometheus (Debian package prometheus)");
        self.child = Some(child);
        let addr = self.addr();
        wait_for("prometheus to be ready", Duration::from_secs(60), || {
            matches!(http_get(addr, "/-/ready"), Some((200, _))).then_some(())
        });
    }

    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's own log, for failure messages.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET /api/v1/<path>?<query>` (the query's values URL-encoded here),
    /// as JSON; panics on an answer that is not `"status": "success"`.
    pub fn api(&self, path: &str, params: &[(&str, &str)]) -> serde_json::Value {
        let query: Vec<String> = params
            .iter()
            .map(|(k, v)| format!("{k}={}", url_encode(v)))
            .collect();
        let target = format!("/api/v1/{path}?{}", query.join("&"));
        let (status, body) = http_get(self.addr(), &target)
            .unwrap_or_else(|| panic!("prometheus did not answer {target}\n{}", self.log()));
        let v: serde_json::Value = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("{target}: {status} {e}: {body}"));
        assert_eq!(v["status"], "success", "{target}: {status} {body}");
        v["data"].clone()
    }

    /// An instant query's result vector (`data.result`).
    pub fn query(&self, promql: &str) -> Vec<serde_json::Value> {
        self.api("query", &[("query", promql)])["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Every sample of the series `selector` between two Unix times (in
    /// seconds), as (timestamp in ms, value), through a range-vector
    /// selector so no step or lookback interpolates: one entry per sample
    /// stored, per series.
    pub fn samples(&self, selector: &str, from_s: f64, to_s: f64) -> Vec<Vec<(i64, f64)>> {
        let window = ((to_s - from_s).ceil() as i64).max(1);
        let data = self.api(
            "query",
            &[
                ("query", &format!("{selector}[{window}s]")),
                ("time", &format!("{to_s:.3}")),
            ],
        );
        data["result"]
            .as_array()
            .map(|series| {
                series
                    .iter()
                    .map(|s| {
                        s["values"]
                            .as_array()
                            .map(|vs| {
                                vs.iter()
                                    .map(|p| {
                                        let t = (p[0].as_f64().unwrap_or(0.0) * 1000.0).round();
                                        let v = p[1].as_str().and_then(|v| v.parse().ok());
                                        (t as i64, v.unwrap_or(f64::NAN))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Series names matching a selector (`/api/v1/series`).
    pub fn series(&self, selector: &str) -> Vec<serde_json::Value> {
        self.api("series", &[("match[]", selector)])
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// One `prometheus-node-exporter` on a loopback port.
pub struct NodeExporter {
    pub port: u16,
    child: Child,
}

impl NodeExporter {
    pub fn started() -> NodeExporter {
        let port = free_port();
        let child = Command::new("prometheus-node-exporter")
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus-node-exporter (Debian package prometheus-node-exporter)");
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        wait_for(
            "the node exporter to serve /metrics",
            Duration::from_secs(30),
            || matches!(http_get(addr, "/metrics"), Some((200, _))).then_some(()),
        );
        NodeExporter { port, child }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/metrics", self.port)
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP/1.0 GET on loopback: (status, body), or None if nothing
/// answers. HTTP/1.0 so that Go's server sends the body whole, never
/// chunked (its API answers are often larger than its buffer).
pub fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).ok()?;
    let buf = String::from_utf8_lossy(&buf);
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((status, body))
}

/// Percent-encodes a query value (RFC 3986 unreserved characters kept).
pub fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}
