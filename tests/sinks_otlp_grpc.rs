//! The `otlp_grpc` sink, through the real binary, against a test gRPC
//! receiver on hyper's HTTP/2 server (`common/grpc_receiver.rs`) that
//! records every call and answers what the test asks: the three signals
//! arrive intact, gzip or not; headers and the bearer token arrive as
//! metadata; every status code is retried or quarantined as the OTLP
//! specification says (RetryInfo's delay honoured, credentials held);
//! `partial_success` quarantines its request; a receiver that is down
//! keeps the cursor until it is up; TLS with a CA and a client certificate.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/grpc_receiver.rs"]
mod grpc_receiver;
#[path = "common/identity.rs"]
mod identity;

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use daemon::{free_port, holdfast, wait_for, Agent};
use grpc_receiver::{Answer, Receiver, LOGS, METRICS, TRACES};
use identity::{cert_der, Pki};
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

const DEADLINE: Duration = Duration::from_secs(30);
const SINK: &str = "gw";

/// The sink's table: quick batches and retries, one request in flight so
/// that the receiver's scripted answers meet the calls in order.
fn sink_table(name: &str, input: &str, endpoint: &str, extra: &str) -> String {
    format!(
        "[sinks.{name}]\ntype = \"otlp_grpc\"\ninputs = [\"{input}\"]\nendpoint = \"{endpoint}\"\n\
         batch_timeout = \"20ms\"\nbackoff_initial = \"50ms\"\nbackoff_max = \"300ms\"\n\
         concurrency = 1\nadaptive_concurrency = false\n{extra}\n"
    )
}

/// An agent tailing `app.log` into one `otlp_grpc` sink.
fn file_agent(endpoint: &str, extra: &str) -> Agent {
    let a = Agent::new("");
    let body = format!(
        "[sources.app]\ntype = \"file\"\ninclude = [\"{}\"]\nstart_at = \"beginning\"\n\
         scan_interval = \"50ms\"\n\n{}",
        a.path("app.log").display(),
        sink_table(SINK, "app", endpoint, extra)
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    std::fs::write(a.path("app.log"), b"").unwrap();
    a
}

fn append(a: &Agent, lines: &[String]) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(a.path("app.log"))
        .unwrap();
    for l in lines {
        writeln!(f, "{l}").unwrap();
    }
}

fn lines(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

fn delivered(r: &Receiver, lines: &[String]) -> Option<()> {
    let got = r.state().delivered();
    lines.iter().all(|l| got.contains(l)).then_some(())
}

fn metric(a: &Agent, family: &str, labels: &str) -> f64 {
    a.metric(&format!("{family}{{sink=\"{SINK}\"{labels}}}"))
        .unwrap_or(0.0)
}

fn quarantined(a: &Agent, reason: &str) -> f64 {
    metric(
        a,
        "holdfast_sink_quarantined_events_total",
        &format!(",reason=\"{reason}\""),
    )
}

fn committed(a: &Agent) -> u64 {
    let v = a.inspect_json();
    v["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == SINK)
        .map_or(0, |c| c["committed"].as_u64().unwrap())
}

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/otlp")
            .join(name),
    )
    .unwrap()
}

/// What identifies each record of an export request, as a multiset.
fn records(path: &str, message: &[u8]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let mut add = |k: String| *out.entry(k).or_insert(0) += 1;
    match path {
        LOGS => {
            for rl in ExportLogsServiceRequest::decode(message)
                .unwrap()
                .resource_logs
            {
                for sl in rl.scope_logs {
                    for r in sl.log_records {
                        add(format!(
                            "{:?}|{:?}|{}",
                            r.body, r.attributes, r.time_unix_nano
                        ));
                    }
                }
            }
        }
        TRACES => {
            for rs in ExportTraceServiceRequest::decode(message)
                .unwrap()
                .resource_spans
            {
                for ss in rs.scope_spans {
                    for s in ss.spans {
                        add(format!("{:?}|{:?}|{}", s.trace_id, s.span_id, s.name));
                    }
                }
            }
        }
        _ => {
            for rm in ExportMetricsServiceRequest::decode(message)
                .unwrap()
                .resource_metrics
            {
                for sm in rm.scope_metrics {
                    for m in sm.metrics {
                        add(format!("{}|{:?}", m.name, m.data));
                    }
                }
            }
        }
    }
    out
}

/// Every record a receiver was sent on `path`, as a multiset.
fn received(r: &Receiver, path: &str) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for c in r.state().calls.iter().filter(|c| c.path == path) {
        for (k, n) in records(path, &c.message) {
            *out.entry(k).or_insert(0) += n;
        }
    }
    out
}

async fn post(addr: SocketAddr, path: &str, body: Vec<u8>) {
    let r = reqwest::Client::new()
        .post(format!("http://{addr}{path}"))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{path}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_three_signals_arrive_intact_with_and_without_gzip() {
    let (plain, zipped) = (Receiver::start().await, Receiver::start().await);
    let source: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut a = Agent::new(&format!(
        "[sources.otlp]\ntype = \"otlp_http\"\nlisten = \"{source}\"\n\n{}{}",
        sink_table(
            "plain",
            "otlp",
            &format!("http://{}", plain.addr),
            "compression = \"none\""
        ),
        sink_table(
            "zipped",
            "otlp",
            &format!("http://{}", zipped.addr),
            "compression = \"gzip\""
        ),
    ));
    a.start();
    a.wait_ready();
    let sent = [
        (LOGS, "logs.pb", "/v1/logs"),
        (TRACES, "traces.pb", "/v1/traces"),
        (METRICS, "metrics.pb", "/v1/metrics"),
    ];
    for (_, file, path) in sent {
        post(source, path, fixture(file)).await;
    }
    for (grpc, file, _) in sent {
        let want = records(grpc, &fixture(file));
        assert!(!want.is_empty(), "{file}");
        for r in [&plain, &zipped] {
            wait_for(&format!("every record of {file}"), DEADLINE, || {
                (received(r, grpc) == want).then_some(())
            });
        }
    }
    for (r, gzip, sink) in [(&plain, false, "plain"), (&zipped, true, "zipped")] {
        // Bytes as they went on the wire, compressed when they were.
        // (Counted once the answer is read: waited for.)
        let wire: usize = r.state().calls.iter().map(|c| c.wire).sum();
        let family = format!("holdfast_sink_sent_bytes_total{{sink=\"{sink}\"}}");
        wait_for(&format!("{sink}'s sent bytes"), DEADLINE, || {
            (a.metric(&family) == Some(wire as f64)).then_some(())
        });
        for c in &r.state().calls {
            assert_eq!(c.compressed, gzip, "{}", c.path);
            assert_eq!(c.metadata["content-type"], "application/grpc");
            assert_eq!(c.metadata.contains_key("grpc-encoding"), gzip);
            assert!(c.metadata.contains_key("grpc-timeout"), "{:?}", c.metadata);
        }
    }
    assert!(a.stop().success(), "{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_and_the_bearer_token_arrive_as_metadata() {
    let r = Receiver::start().await;
    let dir = tempfile::tempdir().unwrap();
    let (token, tenant) = (dir.path().join("token"), dir.path().join("tenant"));
    std::fs::write(&token, "s3cr3t\n").unwrap();
    std::fs::write(&tenant, "acme").unwrap();
    for f in [&token, &tenant] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let extra = format!(
        "auth.bearer_token_file = \"{}\"\nheaders = {{ \"X-Scope-OrgID\" = \"edge-7\" }}\n\
         headers_file = {{ \"X-Tenant-Key\" = \"{}\" }}",
        token.display(),
        tenant.display()
    );
    let mut a = file_agent(&format!("http://{}", r.addr), &extra);
    let out = holdfast(&["check", "--config", a.config_arg()]);
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("exports OTLP/gRPC to http://"), "{text}");
    assert!(!text.contains("s3cr3t"), "{text}");
    let l = lines("meta", 5);
    append(&a, &l);
    a.start();
    a.wait_ready();
    wait_for("the lines", DEADLINE, || delivered(&r, &l));
    for c in &r.state().calls {
        assert_eq!(c.metadata["authorization"], "Bearer s3cr3t");
        assert_eq!(c.metadata["x-scope-orgid"], "edge-7");
        assert_eq!(c.metadata["x-tenant-key"], "acme");
        assert!(
            c.metadata["user-agent"].contains("holdfast/"),
            "{:?}",
            c.metadata
        );
    }
    assert!(!a.stderr().contains("s3cr3t"));
    assert!(a.stop().success(), "{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_status_is_retried_held_or_quarantined_as_the_specification_says() {
    let r = Receiver::start().await;
    let mut a = file_agent(&format!("http://{}", r.addr), "compression = \"none\"");
    a.start();
    a.wait_ready();

    // Retryable: the same events come again and are delivered.
    for code in [1, 4, 10, 11, 14, 15] {
        r.answer_next([Answer::Status(code, format!("transient {code}"), None)]);
        let l = lines(&format!("retry{code}"), 3);
        append(&a, &l);
        wait_for(&format!("the events after code {code}"), DEADLINE, || {
            delivered(&r, &l)
        });
    }
    assert!(metric(&a, "holdfast_sink_retries_total", ",reason=\"http_5xx\"") >= 6.0);

    // Not retryable: quarantined with the status, never sent again.
    let refusals = [
        (3, "INVALID_ARGUMENT"),
        (12, "UNIMPLEMENTED"),
        (13, "INTERNAL"),
        (8, "RESOURCE_EXHAUSTED"),
        (5, "NOT_FOUND"),
        (6, "ALREADY_EXISTS"),
    ];
    let mut rejected = 0.0;
    for (code, _) in refusals {
        r.answer_next([Answer::Status(code, format!("refused with {code}"), None)]);
        let l = lines(&format!("reject{code}"), 2);
        append(&a, &l);
        wait_for(
            &format!("the events refused with {code} in quarantine"),
            DEADLINE,
            || (quarantined(&a, "rejected") > rejected).then_some(()),
        );
        rejected = quarantined(&a, "rejected");
        let st = r.state();
        let sent = st
            .calls
            .iter()
            .filter(|c| c.lines().contains(&l[0]))
            .count();
        assert_eq!(sent, 1, "code {code} was sent again");
    }
    let list = holdfast(&[
        "quarantine",
        "list",
        "--data-dir",
        a.data_dir().to_str().unwrap(),
        "--sink",
        SINK,
        "--json",
    ]);
    let listed = String::from_utf8_lossy(&list.stdout);
    for (code, name) in refusals {
        assert!(
            listed.contains(&format!("gRPC status {name}: refused with {code}")),
            "{listed}"
        );
    }

    // RESOURCE_EXHAUSTED with RetryInfo: retried, not before its delay
    // (the sink's own backoff is at most 300 ms).
    r.answer_next([Answer::Status(
        8,
        "slow down".into(),
        Some(Duration::from_millis(1500)),
    )]);
    let l = lines("pushed", 2);
    append(&a, &l);
    wait_for("the events after RetryInfo", DEADLINE, || delivered(&r, &l));
    {
        let st = r.state();
        let tries: Vec<_> = st
            .calls
            .iter()
            .filter(|c| c.lines().contains(&l[0]))
            .collect();
        assert_eq!(tries.len(), 2);
        let waited = tries[1].at - tries[0].at;
        assert!(
            waited >= Duration::from_millis(1400),
            "retried after {waited:?}"
        );
    }

    // UNAUTHENTICATED and PERMISSION_DENIED: kept, retried, counted.
    r.answer_next([
        Answer::Status(16, "who are you".into(), None),
        Answer::Status(7, "not you".into(), None),
    ]);
    let l = lines("held", 2);
    append(&a, &l);
    wait_for("the held events", DEADLINE, || delivered(&r, &l));
    assert_eq!(metric(&a, "holdfast_sink_auth_failures_total", ""), 2.0);
    assert_eq!(quarantined(&a, "rejected"), rejected);
    assert!(a.stderr().contains("who are you"), "{}", a.stderr());
    assert!(metric(&a, "holdfast_sink_requests_total", ",status=\"4xx\"") >= 9.0);
    assert!(a.stop().success(), "{}", a.stderr());
}

/// `request_timeout` is the call's deadline: sent as `grpc-timeout`, and a
/// call past it is given up and sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_request_timeout_is_sent_again() {
    let r = Receiver::start().await;
    let mut a = file_agent(&format!("http://{}", r.addr), "request_timeout = \"700ms\"");
    r.answer_next([Answer::Stall(Duration::from_secs(5))]);
    let l = lines("slow", 3);
    append(&a, &l);
    a.start();
    a.wait_ready();
    wait_for("the events sent again", DEADLINE, || {
        let st = r.state();
        (st.calls.len() >= 2 && st.calls[1].answer == Answer::Ok).then_some(())
    });
    {
        let st = r.state();
        assert_eq!(st.calls[0].metadata["grpc-timeout"], "700000u");
        let waited = st.calls[1].at - st.calls[0].at;
        assert!(
            waited >= Duration::from_millis(700),
            "sent again after {waited:?}"
        );
        assert_eq!(st.calls[0].lines(), st.calls[1].lines());
    }
    assert!(metric(&a, "holdfast_sink_retries_total", ",reason=\"timeout\"") >= 1.0);
    assert!(a.stop().success(), "{}", a.stderr());
}

/// tonic panics on a `grpc-status-details-bin` that is not base64; a
/// broken or hostile receiver must not crash the sink with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_details_that_are_not_base64_do_not_crash_the_sink() {
    let r = Receiver::start().await;
    let mut a = file_agent(&format!("http://{}", r.addr), "");
    r.answer_next([Answer::BrokenDetails(14), Answer::BrokenDetails(8)]);
    let l = lines("broken", 3);
    append(&a, &l);
    a.start();
    a.wait_ready();
    // UNAVAILABLE is retried; RESOURCE_EXHAUSTED without readable details
    // has no RetryInfo, so it is quarantined.
    wait_for("the events quarantined", DEADLINE, || {
        (quarantined(&a, "rejected") == 3.0).then_some(())
    });
    let restarts: f64 = a
        .metrics()
        .lines()
        .filter(|l| l.starts_with("holdfast_task_restarts_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(restarts, 0.0, "{}", a.stderr());
    assert!(!a.stderr().contains("panicked"), "{}", a.stderr());
    assert_eq!(r.state().calls.len(), 2);
    assert!(a.stop().success(), "{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_success_quarantines_its_request() {
    let r = Receiver::start().await;
    let mut a = file_agent(&format!("http://{}", r.addr), "");
    r.answer_next([Answer::Partial(1, "one was too old".into())]);
    let l = lines("partial", 10);
    append(&a, &l);
    a.start();
    a.wait_ready();
    wait_for("every event finished", DEADLINE, || {
        let st = r.state();
        let first = st.calls.first()?.lines().len() as f64;
        (quarantined(&a, "partially_rejected") == first
            && st.delivered().len() + first as usize == l.len())
        .then_some(())
    });
    assert_eq!(
        metric(&a, "holdfast_sink_partially_rejected_records_total", ""),
        1.0
    );
    assert!(a.stderr().contains("one was too old"), "{}", a.stderr());
    assert!(a.stop().success(), "{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_then_up_gets_everything_and_the_cursor_waits_for_it() {
    let port = free_port();
    let mut a = file_agent(&format!("http://127.0.0.1:{port}"), "");
    let l = lines("late", 20);
    append(&a, &l);
    a.start();
    a.wait_ready();
    wait_for("three refused connections", DEADLINE, || {
        (metric(&a, "holdfast_sink_requests_total", ",status=\"error\"") >= 3.0).then_some(())
    });
    assert!(metric(&a, "holdfast_sink_retries_total", ",reason=\"connect\"") >= 3.0);
    assert_eq!(committed(&a), 0);
    let r = Receiver::start_on(&format!("127.0.0.1:{port}"), None).await;
    wait_for("the events once the receiver is up", DEADLINE, || {
        delivered(&r, &l)
    });
    wait_for("the cursor past them", DEADLINE, || {
        (committed(&a) == 20).then_some(())
    });
    assert!(a.stop().success(), "{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_a_ca_and_a_client_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (cert, key) = pki.client("device", 3001);
    let r = Receiver::start_on("127.0.0.1:0", Some(h2_mtls_acceptor(&pki))).await;
    let extra = format!(
        "tls.ca_file = \"{}\"\ntls.client_cert_file = \"{}\"\ntls.client_key_file = \"{}\"",
        pki.path("ca.pem").display(),
        cert.display(),
        key.display()
    );
    let mut a = file_agent(&format!("https://127.0.0.1:{}", r.addr.port()), &extra);
    let l = lines("secure", 10);
    append(&a, &l);
    a.start();
    a.wait_ready();
    wait_for("the lines over TLS", DEADLINE, || delivered(&r, &l));
    let device = cert_der(&cert);
    for c in &r.state().calls {
        assert_eq!(c.client_cert.as_ref(), Some(&device));
    }
    assert!(a.stop().success(), "{}", a.stderr());
}

/// The identity receiver's mTLS acceptor, speaking HTTP/2.
fn h2_mtls_acceptor(pki: &Pki) -> tokio_rustls::TlsAcceptor {
    use tokio_rustls::rustls::crypto::ring;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio_rustls::rustls::server::WebPkiClientVerifier;
    use tokio_rustls::rustls::{RootCertStore, ServerConfig};
    let provider = Arc::new(ring::default_provider());
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.path("ca.pem")).unwrap())
        .unwrap();
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap();
    let certs = CertificateDer::pem_file_iter(pki.path("server.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).unwrap();
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}
