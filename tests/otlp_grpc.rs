//! The `otlp` source over real gRPC, on the real binary: logs, traces and
//! metrics (plain and gzip) are answered `OK` only once their records are in
//! the log (fsync always), and the source's HTTP listener serves beside it.

mod otlp_grpc_common;

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::{
    metric::Data, Gauge, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use otlp_grpc_common::daemon::{free_ports, wait_for, Agent};
use otlp_grpc_common::*;
use prost::Message;

fn agent() -> (Agent, SocketAddr, SocketAddr) {
    let [g, h] = free_ports();
    let grpc: SocketAddr = format!("127.0.0.1:{g}").parse().unwrap();
    let http: SocketAddr = format!("127.0.0.1:{h}").parse().unwrap();
    let mut a = Agent::new(&format!(
        "[log]\nfsync = \"always\"\n\n[sources.otlp]\ntype = \"otlp\"\n\
         [sources.otlp.grpc]\nlisten = \"{grpc}\"\n[sources.otlp.http]\nlisten = \"{http}\"\n"
    ));
    a.start();
    a.wait_ready();
    (a, grpc, http)
}

fn appended(a: &Agent) -> u64 {
    a.inspect_json()["next_seq"].as_u64().unwrap()
}

fn traces() -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 8],
                    name: "op".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn metrics() -> ExportMetricsServiceRequest {
    let point = NumberDataPoint::default();
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![Metric {
                    name: "temp".into(),
                    data: Some(Data::Gauge(Gauge {
                        data_points: vec![point.clone(), point],
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_signal_is_in_the_log_when_ok_returns() {
    let (a, grpc, _) = agent();
    let mut c = connect(grpc).await;
    let r = c.export_logs(&logs("plain", 3), false).await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    assert_eq!(
        &r.body[..],
        &[0, 0, 0, 0, 0],
        "one empty ExportLogsServiceResponse"
    );
    assert_eq!(appended(&a), 3);
    let r = c.export_logs(&logs("gzip", 2), true).await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    assert_eq!(appended(&a), 5);
    let r = c
        .call(TRACES, &[], frame(&traces().encode_to_vec(), false))
        .await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    assert_eq!(appended(&a), 6);
    let r = c
        .call(
            METRICS,
            &[("grpc-encoding", "gzip")],
            frame(&metrics().encode_to_vec(), true),
        )
        .await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    assert_eq!(appended(&a), 8);
    let ok = format!(
        "holdfast_otlp_grpc_requests_total{{source=\"otlp\",method=\"{LOGS}\",code=\"OK\"}}"
    );
    assert_eq!(a.metric(&ok), Some(2.0));
    assert_eq!(
        a.metric("holdfast_otlp_accepted_events_total{source=\"otlp\",signal=\"logs\"}"),
        Some(5.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_listener_of_the_same_source_serves_too() {
    let (a, grpc, http) = agent();
    let body = logs("http", 4).encode_to_vec();
    let mut s = std::net::TcpStream::connect(http).unwrap();
    write!(
        s,
        "POST /v1/logs HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    s.write_all(&body).unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert_eq!(appended(&a), 4);
    // And gRPC beside it, into the same log.
    let mut c = connect(grpc).await;
    let r = c.export_logs(&logs("grpc", 1), false).await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    wait_for("5 events", Duration::from_secs(5), || {
        (appended(&a) == 5).then_some(())
    });
}

#[path = "common/identity.rs"]
mod identity;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_over_tls_with_a_client_certificate() {
    use std::sync::Arc;
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};

    let dir = tempfile::tempdir().unwrap();
    let pki = identity::Pki::new(dir.path());
    let (cert, key) = pki.client("device-7", 2);
    let [port] = free_ports();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut a = Agent::new(&format!(
        "[sources.otlp]\ntype = \"otlp\"\n[sources.otlp.grpc]\nlisten = \"{addr}\"\n\
         tls.cert_file = \"{}\"\ntls.key_file = \"{}\"\ntls.client_ca_file = \"{}\"\n",
        pki.path("server.pem").display(),
        pki.path("server.key").display(),
        pki.path("ca.pem").display(),
    ));
    a.start();
    a.wait_ready();
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.path("ca.pem")).unwrap())
        .unwrap();
    let chain = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let mut config =
        ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(&key).unwrap())
            .unwrap();
    // gRPC clients offer only h2: the listener must pick it.
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut c = connect_over(addr, tls).await;
    let r = c.export_logs(&logs("tls", 2), false).await;
    assert_eq!(r.code(), tonic::Code::Ok, "{:?}", r.status);
    assert_eq!(appended(&a), 2);
}
