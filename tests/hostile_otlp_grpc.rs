//! Hostile gRPC clients against the `otlp` source, on the real binary:
//! each gets its status, nothing of its call reaches the log, and a good
//! client is still served after it.

mod otlp_grpc_common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use otlp_grpc_common::daemon::{free_port, Agent};
use otlp_grpc_common::*;
use prost::Message;
use tonic::Code;

const TOKEN: &str = "s3cret-grpc-token";
const BEARER: (&str, &str) = ("authorization", "Bearer s3cret-grpc-token");

fn agent() -> (Agent, SocketAddr) {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut a = Agent::new("");
    let token = a.path("token");
    std::fs::write(&token, TOKEN).unwrap();
    let body = format!(
        "[sources.otlp]\ntype = \"otlp\"\nmax_body_bytes = \"64KiB\"\nrequest_timeout = \"2s\"\n\
         bearer_token_file = \"{}\"\n[sources.otlp.grpc]\nlisten = \"{addr}\"\n\
         max_concurrent_streams = 2\nmax_header_list_size = \"4KiB\"\n",
        token.display()
    );
    let text = std::fs::read_to_string(&a.config).unwrap() + &body;
    std::fs::write(&a.config, text).unwrap();
    a.start();
    a.wait_ready();
    (a, addr)
}

fn appended(a: &Agent) -> u64 {
    a.inspect_json()["next_seq"].as_u64().unwrap()
}

/// A good call still gets `OK` and its records appended.
async fn good_client_is_served(a: &Agent, addr: SocketAddr) {
    let before = appended(a);
    let mut c = connect(addr).await;
    let r = c
        .call(
            LOGS,
            &[BEARER],
            frame(&logs("good", 2).encode_to_vec(), false),
        )
        .await;
    assert_eq!(r.code(), Code::Ok, "{:?}", r.status);
    assert_eq!(appended(a), before + 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_calls_get_their_status_and_append_nothing() {
    let (a, addr) = agent();
    let mut c = connect(addr).await;

    // Malformed protobuf: a field tag of 0 never decodes.
    let r = c
        .call(LOGS, &[BEARER], frame(&[0x00, 0x01, 0x02], false))
        .await;
    assert_eq!(r.code(), Code::InvalidArgument, "{:?}", r.status);
    // Not a gRPC frame at all.
    let r = c
        .call(
            LOGS,
            &[BEARER],
            Bytes::from_static(b"{\"resourceLogs\":[]}"),
        )
        .await;
    assert_eq!(r.code(), Code::InvalidArgument, "{:?}", r.status);
    // Wrong content type: HTTP 415, the status beside it.
    let r = c
        .call(
            LOGS,
            &[BEARER, ("content-type", "application/x-protobuf")],
            frame(b"", false),
        )
        .await;
    assert_eq!(r.http, 415);
    assert_eq!(r.code(), Code::InvalidArgument, "{:?}", r.status);
    // Another route.
    let r = c
        .call("/grpc.health.v1.Health/Check", &[BEARER], frame(b"", false))
        .await;
    assert_eq!(r.code(), Code::Unimplemented, "{:?}", r.status);
    // No token, a wrong one: each closes its connection, as OTLP/HTTP's
    // 401 does, so a flood of them holds no slot.
    let body = frame(&logs("x", 1).encode_to_vec(), false);
    for auth in [&[][..], &[("authorization", "Bearer nope")][..]] {
        let mut c = connect(addr).await;
        let r = c.call(LOGS, auth, body.clone()).await;
        assert_eq!(r.code(), Code::Unauthenticated, "{:?}", r.status);
        assert!(
            c.closes_within(Duration::from_secs(5)).await,
            "the connection is closed after a refused token"
        );
    }
    // Over max_body_bytes: final, so no RetryInfo.
    let big = logs(&"x".repeat(1000), 100).encode_to_vec();
    assert!(big.len() > 64 << 10);
    let r = c.call(LOGS, &[BEARER], frame(&big, false)).await;
    assert_eq!(r.code(), Code::ResourceExhausted, "{:?}", r.status);
    assert!(
        r.status.details().is_empty(),
        "an oversize message must not be retried"
    );
    // A gzip bomb: small on the wire, over the cap once inflated.
    let bomb = vec![b'a'; 8 << 20];
    let r = c
        .call(
            LOGS,
            &[BEARER, ("grpc-encoding", "gzip")],
            frame(&bomb, true),
        )
        .await;
    assert_eq!(r.code(), Code::ResourceExhausted, "{:?}", r.status);

    // Metadata over max_header_list_size (4 KiB; hyper's default is 16):
    // not served.
    let huge = "h".repeat(8 << 10);
    let mut c = connect(addr).await;
    let r = c
        .try_call(LOGS, &[BEARER, ("x-pad", &huge)], frame(b"", false))
        .await;
    assert!(
        r.as_ref()
            .map_or(true, |r| r.http != 200 || r.code() != Code::Ok),
        "a call with 8 KiB of metadata is refused"
    );

    assert_eq!(appended(&a), 0, "nothing of a refused call is in the log");
    let rejected = |reason: &str| {
        a.metric(&format!(
            "holdfast_otlp_rejected_requests_total{{source=\"otlp\",reason=\"{reason}\"}}"
        ))
    };
    assert_eq!(rejected("decode"), Some(2.0));
    assert_eq!(rejected("unauthorized"), Some(2.0));
    assert_eq!(rejected("too_large"), Some(2.0));
    good_client_is_served(&a, addr).await;
}

/// A request body: `Silent` never sends a byte nor ends; `Once` is one
/// frame and the end; `Endless` announces a 1 GiB message and sends
/// 16 KiB chunks of it forever.
enum Body {
    Silent,
    Once(Option<Bytes>),
    Endless { started: bool },
}

impl hyper::body::Body for Body {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        match &mut *self {
            Body::Silent => Poll::Pending,
            Body::Once(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            Body::Endless { started } => {
                let chunk = if *started {
                    Bytes::from(vec![b'z'; 16 << 10])
                } else {
                    *started = true;
                    Bytes::from(frame_prefix(1 << 30))
                };
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
        }
    }
}

fn frame_prefix(len: u32) -> Vec<u8> {
    let mut v = vec![0u8];
    v.extend_from_slice(&len.to_be_bytes());
    v
}

fn call_request(addr: SocketAddr, body: Body) -> hyper::Request<Body> {
    hyper::Request::post(format!("http://{addr}{LOGS}"))
        .header("content-type", "application/grpc")
        .header("authorization", "Bearer s3cret-grpc-token")
        .body(body)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_that_never_send_their_message_are_cut_at_the_deadline() {
    let (a, addr) = agent();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake::<_, _, Body>(
        TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    // One call first: a round trip, after which both sides have each
    // other's SETTINGS (the server applies its stream limit once acked).
    let first = Body::Once(Some(frame(&logs("first", 1).encode_to_vec(), false)));
    send.ready().await.unwrap();
    let resp = send.send_request(call_request(addr, first)).await.unwrap();
    http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap();
    let started = Instant::now();
    let code = |resp: hyper::Response<hyper::body::Incoming>| {
        tonic::Status::from_header_map(resp.headers()).map(|s| s.code())
    };
    // max_concurrent_streams = 2 of them, open and silent, in this order;
    // then a good call on the same connection, which must wait for a
    // stream to free.
    let mut silent = Vec::new();
    for _ in 0..2 {
        send.ready().await.unwrap();
        silent.push(tokio::spawn(
            send.send_request(call_request(addr, Body::Silent)),
        ));
    }
    let good = Body::Once(Some(frame(&logs("third", 1).encode_to_vec(), false)));
    send.ready().await.unwrap();
    let third = send.send_request(call_request(addr, good));
    // When it was answered, whenever the test looks.
    let third = tokio::spawn(async move { (third.await, started.elapsed()) });
    // Another client is served meanwhile, while both are still open.
    good_client_is_served(&a, addr).await;
    assert!(silent.iter().all(|s| !s.is_finished()));
    for s in silent {
        let resp = tokio::time::timeout(Duration::from_secs(10), s)
            .await
            .expect("answered within the deadline")
            .unwrap()
            .unwrap();
        assert_eq!(code(resp), Some(Code::DeadlineExceeded));
    }
    let waited = started.elapsed();
    assert!(waited >= Duration::from_secs(2), "{waited:?}");
    // The third call ran only once a silent one was cut.
    let (resp, answered_after) = tokio::time::timeout(Duration::from_secs(10), third)
        .await
        .expect("the third call is answered")
        .unwrap();
    assert!(
        answered_after >= Duration::from_secs(2),
        "the third call waited for a stream: {answered_after:?}"
    );
    let resp = resp.unwrap();
    let trailers = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .trailers()
        .cloned()
        .unwrap();
    assert_eq!(
        tonic::Status::from_header_map(&trailers).unwrap().code(),
        Code::Ok
    );
    assert_eq!(appended(&a), 4, "only the good calls' records");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_log_answers_resource_exhausted_with_retry_info() {
    let [port, closed] = otlp_grpc_common::daemon::free_ports();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    // A sink that never takes anything: the log only fills.
    let mut a = Agent::new(&format!(
        "[log]\nsegment_size = \"64KiB\"\nmax_bytes = \"256KiB\"\nwhen_full = \"block\"\n\
         compression = \"none\"\n\n\
         [sources.otlp]\ntype = \"otlp\"\n[sources.otlp.grpc]\nlisten = \"{addr}\"\n\n\
         [sinks.stuck]\ntype = \"otlp_http\"\ninputs = [\"otlp\"]\n\
         endpoint = \"http://127.0.0.1:{closed}\"\n"
    ));
    a.start();
    // Not `wait_ready`: the stuck sink may hold readiness back.
    otlp_grpc_common::daemon::wait_for("the gRPC listener", Duration::from_secs(10), || {
        std::net::TcpStream::connect(addr).ok()
    });
    let mut c = connect(addr).await;
    let mut accepted = 0u64;
    let full = loop {
        let r = c
            .call(
                LOGS,
                &[],
                frame(&logs(&"y".repeat(200), 50).encode_to_vec(), false),
            )
            .await;
        match r.code() {
            Code::Ok => accepted += 50,
            _ => break r,
        }
        assert!(accepted < 100_000, "the log never filled");
    };
    assert_eq!(full.code(), Code::ResourceExhausted, "{:?}", full.status);
    assert!(
        full.status.message().contains("log is full"),
        "{:?}",
        full.status
    );
    assert!(
        !full.status.details().is_empty(),
        "RetryInfo makes it retryable"
    );
    assert!(accepted > 0);
    assert_eq!(appended(&a), accepted, "whole calls only");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_at_shutdown_is_answered_unavailable_with_retry_info() {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut a = Agent::new(&format!(
        "[sources.otlp]\ntype = \"otlp\"\nrequest_timeout = \"60s\"\n\
         [sources.otlp.grpc]\nlisten = \"{addr}\"\n"
    ));
    a.start();
    a.wait_ready();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake::<_, _, Body>(
        TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send.ready().await.unwrap();
    let call = tokio::spawn(send.send_request(call_request(addr, Body::Silent)));
    // A later call on the same connection answered OK: the server has
    // taken the silent call's head, which came first.
    let good = Body::Once(Some(frame(&logs("good", 1).encode_to_vec(), false)));
    send.ready().await.unwrap();
    let resp = send.send_request(call_request(addr, good)).await.unwrap();
    let trailers = http_body_util::BodyExt::collect(resp.into_body())
        .await
        .unwrap()
        .trailers()
        .cloned()
        .unwrap();
    assert_eq!(
        tonic::Status::from_header_map(&trailers).unwrap().code(),
        Code::Ok
    );
    a.signal("TERM");
    let resp = tokio::time::timeout(Duration::from_secs(15), call)
        .await
        .expect("answered within the drain")
        .unwrap()
        .unwrap();
    let status = tonic::Status::from_header_map(resp.headers()).expect("grpc-status");
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert!(!status.details().is_empty(), "RetryInfo: {status:?}");
    let exit = a.wait_exit(Duration::from_secs(15));
    assert!(exit.success(), "{exit:?}\n{}", a.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_grpc_connection_gives_its_slot_to_a_new_client() {
    let port = free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut a = Agent::new(&format!(
        "[sources.otlp]\ntype = \"otlp\"\n[sources.otlp.grpc]\nlisten = \"{addr}\"\n\
         max_connections = 1\n"
    ));
    a.start();
    a.wait_ready();
    let mut idle = connect(addr).await;
    let r = idle.export_logs(&logs("first", 1), false).await;
    assert_eq!(r.code(), Code::Ok, "{:?}", r.status);
    // A second client gets the only slot once the first has been idle
    // past the eviction grace; until then it waits in the backlog.
    let mut next = connect(addr).await;
    let r = tokio::time::timeout(
        Duration::from_secs(10),
        next.export_logs(&logs("next", 1), false),
    )
    .await
    .expect("the new client is served");
    assert_eq!(r.code(), Code::Ok, "{:?}", r.status);
    assert!(
        idle.closes_within(Duration::from_secs(5)).await,
        "the idle one is closed"
    );
    assert_eq!(
        a.metric(
            "holdfast_listener_closed_connections_total{source=\"otlp\",reason=\"idle_evicted\"}"
        ),
        Some(1.0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_message_is_refused_at_the_cap_not_at_its_end() {
    let (a, addr) = agent();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http2::handshake::<_, _, Body>(
        TokioExecutor::new(),
        TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    send.ready().await.unwrap();
    let call = send.send_request(call_request(addr, Body::Endless { started: false }));
    // It never ends: an answer can only come from max_body_bytes (64 KiB).
    let resp = tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .expect("refused while it is still sending")
        .unwrap();
    let status = tonic::Status::from_header_map(resp.headers()).expect("grpc-status");
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.details().is_empty(),
        "never acceptable: no RetryInfo"
    );
    assert_eq!(appended(&a), 0);
    good_client_is_served(&a, addr).await;
}
