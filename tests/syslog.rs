//! The `syslog` source through the real binary, with real clients:
//! util-linux `logger` over TCP and UDP in both formats, rsyslog forwarding
//! with octet counting, a sweep of bad input over raw sockets, and TCP
//! back-pressure under `when_full = "block"`.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/receivers.rs"]
mod receivers;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use daemon::{free_port, holdfast, wait_for, Agent};
use receivers::{Api, Receiver};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// A free UDP port on loopback.
fn free_udp_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Every event in the agent's log (`holdfast dump`).
fn dump(a: &Agent) -> Vec<Value> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Waits until the log holds at least `n` events of `source`.
fn wait_events(a: &Agent, source: &str, n: usize) -> Vec<Value> {
    wait_for(&format!("{n} events from {source}"), DEADLINE, || {
        let evs: Vec<Value> = dump(a)
            .into_iter()
            .filter(|e| e["source"] == source)
            .collect();
        (evs.len() >= n).then_some(evs)
    })
}

fn body(e: &Value) -> String {
    let b = &e["record"]["body"];
    b["stringValue"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| format!("bytes:{}", b["bytesValue"].as_str().unwrap_or("?")))
}

/// A record attribute as text (strings, ints and bools).
fn attr(e: &Value, key: &str) -> Option<String> {
    let v = e["record"]["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)?["value"]
        .clone();
    for k in ["stringValue", "intValue", "boolValue"] {
        if !v[k].is_null() {
            return Some(v[k].to_string().trim_matches('"').to_string());
        }
    }
    Some(v.to_string())
}

fn host(e: &Value) -> Option<String> {
    e["resource"]["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == "host.name")
        .map(|kv| kv["value"]["stringValue"].as_str().unwrap().to_string())
}

fn find<'a>(evs: &'a [Value], text: &str) -> &'a Value {
    evs.iter()
        .find(|e| body(e).contains(text))
        .unwrap_or_else(|| panic!("no event with {text:?} in {evs:#?}"))
}

fn logger(args: &[&str]) {
    let out = Command::new("logger")
        .args(args)
        .output()
        .expect("running logger (Debian package bsdutils; .ci/run installs it)");
    assert!(
        out.status.success(),
        "logger {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The most severe priorities get the OpenTelemetry log data model's
/// numbers (appendix B), the same the journald source and the `syslog`
/// parse step give: emerg 21, alert 19, crit 18 (this source once gave
/// 24/23/22, so one message had two severities depending on how it came).
#[test]
fn the_most_severe_priorities_follow_the_data_model() {
    let tcp = free_port();
    let mut a = Agent::new(&format!(
        "[sources.tcp]\ntype = \"syslog\"\nlisten = \"127.0.0.1:{tcp}\"\n"
    ));
    a.start();
    a.wait_ready();
    let port = tcp.to_string();
    for level in ["emerg", "alert", "crit"] {
        let text = format!("a {level} message");
        logger(&[
            "-n",
            "127.0.0.1",
            "-P",
            &port,
            "-T",
            "--rfc5424",
            "-p",
            &format!("user.{level}"),
            &text,
        ]);
    }
    let evs = wait_events(&a, "tcp", 3);
    for (level, number) in [("emerg", 21), ("alert", 19), ("crit", 18)] {
        let e = find(&evs, &format!("a {level} message"));
        assert_eq!(e["record"]["severityNumber"], number, "{level}: {e:#}");
    }
    assert!(a.stop().success());
}

#[test]
fn logger_over_tcp_and_udp_in_both_formats() {
    let (tcp, udp) = (free_port(), free_udp_port());
    let mut a = Agent::new(&format!(
        r#"
[sources.tcp]
type = "syslog"
listen = "127.0.0.1:{tcp}"
time_zone = "UTC"

[sources.udp]
type = "syslog"
mode = "udp"
listen = "127.0.0.1:{udp}"
"#
    ));
    a.start();
    a.wait_ready();
    let (tcp, udp) = (tcp.to_string(), udp.to_string());
    let base = ["-n", "127.0.0.1", "--id=4242"];
    let run = |port: &str, transport: &str, extra: &[&str]| {
        let mut args: Vec<&str> = base.to_vec();
        args.extend(["-P", port, transport]);
        args.extend(extra);
        logger(&args);
    };
    run(
        &tcp,
        "-T",
        &[
            "--rfc5424",
            "--octet-count",
            "-t",
            "app5424",
            "--msgid",
            "M1",
            "--sd-id",
            "zoo@32473",
            "--sd-param",
            "tiger=\"hungry\"",
            "-p",
            "local3.err",
            "hello 5424 over tcp",
        ],
    );
    run(
        &tcp,
        "-T",
        &[
            "--rfc3164",
            "-t",
            "app3164",
            "-p",
            "user.warning",
            "hello 3164 over tcp",
        ],
    );
    run(
        &udp,
        "-d",
        &["--rfc5424", "-t", "app5424u", "hello 5424 over udp"],
    );
    run(
        &udp,
        "-d",
        &[
            "--rfc3164",
            "-t",
            "app3164u",
            "-p",
            "daemon.debug",
            "hello 3164 over udp",
        ],
    );

    let evs = wait_events(&a, "tcp", 2);
    let e = find(&evs, "hello 5424 over tcp");
    assert_eq!(body(e), "hello 5424 over tcp");
    assert_eq!(attr(e, "syslog.app_name").as_deref(), Some("app5424"));
    assert_eq!(attr(e, "syslog.proc_id").as_deref(), Some("4242"));
    assert_eq!(attr(e, "syslog.msg_id").as_deref(), Some("M1"));
    assert_eq!(attr(e, "syslog.facility").as_deref(), Some("19"));
    assert_eq!(attr(e, "syslog.severity").as_deref(), Some("3"));
    assert_eq!(
        attr(e, "syslog.sd.zoo@32473.tiger").as_deref(),
        Some("hungry")
    );
    assert_eq!(e["record"]["severityNumber"], 17);
    assert_eq!(e["record"]["severityText"], "err");
    assert!(host(e).is_some(), "logger sends the hostname");
    assert!(e["record"]["timeUnixNano"].as_str().unwrap().len() > 15);
    assert_eq!(attr(e, "syslog.parse_error"), None);

    let e = find(&evs, "hello 3164 over tcp");
    assert_eq!(body(e), "hello 3164 over tcp");
    assert_eq!(attr(e, "syslog.app_name").as_deref(), Some("app3164"));
    assert_eq!(attr(e, "syslog.proc_id").as_deref(), Some("4242"));
    assert_eq!(e["record"]["severityText"], "warning");
    assert!(host(e).is_some());
    let client = e["record"]["attributes"]
        .as_array()
        .unwrap()
        .iter()
        .any(|kv| kv["key"] == "client.address" && kv["value"]["stringValue"] == "127.0.0.1");
    assert!(client, "{e:#}");

    let evs = wait_events(&a, "udp", 2);
    let e = find(&evs, "hello 5424 over udp");
    assert_eq!(attr(e, "syslog.app_name").as_deref(), Some("app5424u"));
    let e = find(&evs, "hello 3164 over udp");
    assert_eq!(attr(e, "syslog.app_name").as_deref(), Some("app3164u"));
    assert_eq!(e["record"]["severityNumber"], 5);
    assert_eq!(e["scope"]["name"], "holdfast.sources.syslog");

    // Every event has its own id.
    let mut ids: Vec<String> = dump(&a).iter().map(|e| e["id"].to_string()).collect();
    let n = ids.len();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), n);
    assert_eq!(
        a.metric("holdfast_source_events_total{source=\"tcp\"}"),
        Some(2.0)
    );
    assert_eq!(
        a.metric("holdfast_source_events_total{source=\"udp\"}"),
        Some(2.0)
    );
    assert!(a.stop().success());
}

/// rsyslogd as a child with its own work directory; killed when dropped.
struct Rsyslog(Child);

impl Drop for Rsyslog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn rsyslog_forwards_with_octet_counting() {
    let tcp = free_port();
    let mut a = Agent::new(&format!(
        "[sources.relay]\ntype = \"syslog\"\nlisten = \"127.0.0.1:{tcp}\"\n"
    ));
    a.start();
    a.wait_ready();
    let work = a.path("rsyslog");
    std::fs::create_dir_all(&work).unwrap();
    let input = free_udp_port();
    let conf = a.path("rsyslog.conf");
    std::fs::write(
        &conf,
        format!(
            r#"global(workDirectory="{work}")
module(load="imudp")
input(type="imudp" address="127.0.0.1" port="{input}")
*.* action(type="omfwd" target="127.0.0.1" port="{tcp}" protocol="tcp"
           TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format")
"#,
            work = work.display()
        ),
    )
    .unwrap();
    let pid = a.path("rsyslog.pid");
    let child = Command::new("rsyslogd")
        .args([
            "-n",
            "-f",
            conf.to_str().unwrap(),
            "-i",
            pid.to_str().unwrap(),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("starting rsyslogd (Debian package rsyslog; .ci/run installs it)");
    let _rsyslog = Rsyslog(child);
    let port = input.to_string();
    let send = |text: &str| {
        logger(&[
            "-n",
            "127.0.0.1",
            "-P",
            &port,
            "-d",
            "--rfc3164",
            "-t",
            "dev",
            text,
        ])
    };
    // rsyslog's UDP input opens a moment after start: probe until one
    // message made it through.
    let mut probe = 0;
    wait_for("a probe through rsyslog", DEADLINE, || {
        probe += 1;
        send(&format!("probe {probe}"));
        dump(&a)
            .iter()
            .any(|e| body(e).contains("probe"))
            .then_some(())
    });
    const N: usize = 200;
    for i in 0..N {
        send(&format!("relayed message {i:04}"));
    }
    let evs = wait_for("every relayed message", DEADLINE, || {
        let evs: Vec<Value> = dump(&a)
            .into_iter()
            // rsyslog's msg property of a 3164 message keeps the space
            // after the tag.
            .filter(|e| body(e).contains("relayed message"))
            .collect();
        (evs.len() >= N).then_some(evs)
    });
    let mut seen: Vec<String> = evs.iter().map(|e| body(e).trim().to_string()).collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), N, "each message once");
    for e in &evs {
        assert_eq!(attr(e, "syslog.parse_error"), None, "{e:#}");
        assert_eq!(attr(e, "syslog.app_name").as_deref(), Some("dev"));
        assert!(host(e).is_some());
    }
    assert!(a.stop().success());
}

/// Reads until the server closes the connection (or 10 s pass).
fn closed_by_server(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut buf = [0u8; 64];
    matches!(s.read(&mut buf), Ok(0) | Err(_))
}

#[test]
fn bad_input_is_kept_counted_and_never_crashes() {
    let port = free_port();
    let mut a = Agent::new(&format!(
        r#"
[sources.net]
type = "syslog"
listen = "127.0.0.1:{port}"
max_message_size = "1KiB"
idle_timeout = "1s"
max_connections = 4
"#
    ));
    a.start();
    a.wait_ready();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let connect = || TcpStream::connect(addr).unwrap();

    // Overlong lines, newline framing: the start kept, the next line whole.
    let mut s = connect();
    let long = format!("<13>long-line {}", "x".repeat(5000));
    write!(s, "{long}\n<13>after-long-line\n").unwrap();
    drop(s);
    // Overlong octet-counted frame.
    let mut s = connect();
    let long2 = format!("<13>long-frame {}", "y".repeat(3000));
    write!(s, "{} {long2}17 <13>after-frame-x", long2.len()).unwrap();
    drop(s);
    // A wrong octet count: the first frame kept, the rest kept whole, and
    // the connection closed.
    let mut s = connect();
    s.write_all(b"14 <13>good-frame12x <13>bad-count").unwrap();
    assert!(closed_by_server(&mut s));
    // Binary: kept as bytes.
    let mut s = connect();
    s.write_all(b"\xff\xfe\x00\x01binary\x80\n").unwrap();
    drop(s);
    // Half-open: a partial message, then silence until idle_timeout.
    let mut s = connect();
    s.write_all(b"<13>partial-message").unwrap();
    assert!(closed_by_server(&mut s), "closed after idle_timeout");

    let evs = wait_events(&a, "net", 8);
    let e = find(&evs, "long-line");
    assert_eq!(body(e).len(), 1024 - "<13>".len());
    assert_eq!(attr(e, "log.record.truncated").as_deref(), Some("true"));
    assert_eq!(
        attr(e, "log.record.original_bytes"),
        Some(long.len().to_string())
    );
    assert_eq!(body(find(&evs, "after-long-line")), "after-long-line");
    let e = find(&evs, "long-frame");
    assert_eq!(
        attr(e, "log.record.original_bytes"),
        Some(long2.len().to_string())
    );
    assert_eq!(body(find(&evs, "after-frame-x")), "after-frame-x");
    assert_eq!(body(find(&evs, "good-frame")), "good-frame");
    let e = find(&evs, "bad-count");
    assert_eq!(body(e), "12x <13>bad-count");
    assert!(attr(e, "syslog.parse_error").is_some());
    let e = evs
        .iter()
        .find(|e| body(e).starts_with("bytes:"))
        .expect("the binary message, as bytes");
    assert!(attr(e, "syslog.parse_error").is_some());
    assert_eq!(body(find(&evs, "partial-message")), "partial-message");

    let m = |s: &str| a.metric(s);
    let errors = "holdfast_syslog_connection_errors_total{source=\"net\",reason=";
    assert_eq!(m(&format!("{errors}\"bad_frame\"}}")), Some(1.0));
    assert_eq!(m(&format!("{errors}\"idle_timeout\"}}")), Some(1.0));
    assert_eq!(
        m("holdfast_syslog_truncated_messages_total{source=\"net\"}"),
        Some(2.0)
    );
    assert_eq!(
        m("holdfast_syslog_parse_errors_total{source=\"net\"}"),
        Some(2.0)
    );

    // More connections than max_connections wait, and are served.
    let held: Vec<TcpStream> = (0..4).map(|_| connect()).collect();
    let mut fifth = connect();
    fifth.write_all(b"<13>fifth connection\n").unwrap();
    drop(held);
    drop(fifth);
    wait_events(&a, "net", 9);
    assert_eq!(
        daemon::http_get(a.api, "/readyz").map(|(s, _)| s),
        Some(200)
    );
    assert!(a.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_stops_tcp_reads_and_drops_nothing() {
    let receiver = Receiver::start(Api::Otlp).await;
    receiver.refuse();
    let (port, udp) = (free_port(), free_udp_port());
    let mut a = Agent::new(&format!(
        r#"
[log]
segment_size = "64KiB"
max_bytes = "256KiB"
when_full = "block"
compression = "none"

[sources.net]
type = "syslog"
listen = "127.0.0.1:{port}"

[sources.dgram]
type = "syslog"
mode = "udp"
listen = "127.0.0.1:{udp}"

[sinks.out]
type = "otlp_http"
inputs = ["net"]
endpoint = "http://{}"
batch_max_events = 500
request_timeout = "2s"
backoff_initial = "20ms"
backoff_max = "200ms"
"#,
        receiver.addr
    ));
    a.start();
    a.wait_ready();
    // Far more than the log and the kernel's socket buffers hold together.
    const N: u64 = 60_000;
    let written = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (written, done) = (written.clone(), done.clone());
        std::thread::spawn(move || {
            let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
            let pad = "p".repeat(150);
            for i in 0..N {
                let line = format!("<14>Dec  2 05:00:00 dev app: message {i:06} {pad}\n");
                s.write_all(line.as_bytes()).unwrap();
                written.store(i + 1, Ordering::Relaxed);
            }
            done.store(true, Ordering::Relaxed);
        })
    };
    let stderr = a.path("stderr.log");
    wait_for("the log to be full", DEADLINE, || {
        daemon::read_to_string(&stderr)
            .contains("the log is full")
            .then_some(())
    });
    // The source stopped reading: the sender is stuck in its writes.
    let appended = a
        .metric("holdfast_source_events_total{source=\"net\"}")
        .unwrap();
    assert!(
        !done.load(Ordering::Relaxed),
        "the sender was not held back"
    );
    assert!((appended as u64) < N);

    receiver.accept().await;
    wait_for("the sender to finish", Duration::from_secs(60), || {
        done.load(Ordering::Relaxed).then_some(())
    });
    writer.join().unwrap();
    assert_eq!(written.load(Ordering::Relaxed), N);
    wait_for("every message delivered", Duration::from_secs(60), || {
        (receiver.state().stored.len() as u64 >= N).then_some(())
    });
    assert_eq!(
        a.metric("holdfast_source_events_total{source=\"net\"}"),
        Some(N as f64)
    );
    assert_eq!(
        a.metric("holdfast_dropped_events_total{source=\"net\",reason=\"log_full\"}"),
        Some(0.0)
    );
    assert_eq!(receiver.state().stored.len() as u64, N, "each message once");
    assert!(a.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_carries_octet_counted_messages() {
    use tokio::io::AsyncWriteExt;
    use tokio_rustls::rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};
    use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};

    let tls = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/otlp/tls");
    let port = free_port();
    let mut a = Agent::new(&format!(
        r#"
[sources.secure]
type = "syslog"
listen = "127.0.0.1:{port}"
idle_timeout = "2s"
tls = {{ cert_file = "{cert}", key_file = "{key}" }}
"#,
        cert = tls.join("cert.pem").display(),
        key = tls.join("key.pem").display(),
    ));
    a.start();
    a.wait_ready();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(tls.join("ca.pem")).unwrap())
        .unwrap();
    let config = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let mut s = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .unwrap();
    let mut stream = Vec::new();
    for m in [
        "<165>1 2026-12-02T05:30:00Z gw01 app 1 - - over tls\nwith a newline",
        "<14>Dec  2 05:30:00 gw01 app: second",
    ] {
        stream.extend(format!("{} {m}", m.len()).into_bytes());
    }
    s.write_all(&stream).await.unwrap();
    s.shutdown().await.unwrap();
    // Plain text on the TLS port is a failed handshake, counted.
    let mut plain = TcpStream::connect(("127.0.0.1", port)).unwrap();
    plain.write_all(b"<13>not tls\n").unwrap();
    let a = tokio::task::spawn_blocking(move || {
        let evs = wait_events(&a, "secure", 2);
        assert_eq!(body(find(&evs, "over tls")), "over tls\nwith a newline");
        assert_eq!(body(find(&evs, "second")), "second");
        wait_for("the failed handshake counted", DEADLINE, || {
            a.metric("holdfast_syslog_connection_errors_total{source=\"secure\",reason=\"tls\"}")
                .filter(|&n| n == 1.0)
        });
        a
    })
    .await
    .unwrap();
    drop(plain);
    let mut a = a;
    assert!(a.stop().success());
}

#[test]
fn check_describes_the_source_and_names_bad_keys() {
    let a = Agent::new(
        r#"
[sources.devices]
type = "syslog"
mode = "udp"
listen = "127.0.0.1:5514"
time_zone = "+02:00"
"#,
    );
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("receives syslog (RFC 5424 and RFC 3164) over UDP on 127.0.0.1:5514"),
        "{text}"
    );
    assert!(text.contains("zone +02:00"), "{text}");

    let a = Agent::new(
        r#"
[sources.devices]
type = "syslog"
mode = "sctp"
time_zone = "Europe/Paris"
"#,
    );
    let out = holdfast(&["check", "--config", a.config_arg()]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("sources.devices.mode") && text.contains("\"tcp\" or \"udp\""),
        "{text}"
    );
    assert!(
        text.contains("sources.devices.time_zone") && text.contains("+02:00"),
        "{text}"
    );

    let a =
        Agent::new("[sources.devices]\ntype = \"syslog\"\nmode = \"udp\"\nidle_timeout = \"5s\"\n");
    let out = holdfast(&["check", "--config", a.config_arg()]);
    assert!(!out.status.success());
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(
        text.contains("sources.devices.idle_timeout") && text.contains("mode = \"tcp\" only"),
        "{text}"
    );
}
