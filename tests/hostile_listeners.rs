//! Listening sources against clients on the LAN that do not play fair
//! (issue 26): idle connections and unfinished TLS handshakes that would
//! hold every slot, one address opening too many connections, a flood of
//! unauthenticated requests, and senders with and without a client
//! certificate. Distinct loopback addresses (127.0.0.2, 127.0.0.3) stand for
//! distinct machines: each client socket is bound before it connects.

#[path = "common/daemon.rs"]
mod daemon;
#[path = "common/identity.rs"]
mod identity;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use daemon::{free_port, free_ports, holdfast, wait_for, Agent};
use identity::Pki;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio_rustls::rustls::{crypto, ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

/// Long enough for a busy CI machine; far shorter than the 600 s an idle
/// connection could hold a slot before.
const DEADLINE: Duration = Duration::from_secs(15);

/// A TCP connection to 127.0.0.1:`port` from the address `from`.
async fn connect_from(from: &str, port: u16) -> TcpStream {
    let s = TcpSocket::new_v4().unwrap();
    s.bind(format!("{from}:0").parse().unwrap()).unwrap();
    s.connect(format!("127.0.0.1:{port}").parse().unwrap())
        .await
        .unwrap()
}

/// Every event of `source` in the agent's log (`holdfast dump`).
fn events(a: &Agent, source: &str) -> Vec<Value> {
    let out = holdfast(&["dump", "--config", a.config_arg()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::str::from_utf8(&out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["source"] == source)
        .collect()
}

fn body(e: &Value) -> String {
    e["record"]["body"]["stringValue"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn attr(e: &Value, key: &str) -> Option<String> {
    e["record"]["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .map(|kv| kv["value"]["stringValue"].as_str().unwrap().to_string())
}

/// The event of `source` whose body contains `text`, once stored; `None`
/// if it was not stored within `deadline`.
async fn stored_within(a: &Agent, source: &str, text: &str, deadline: Duration) -> Option<Value> {
    let end = Instant::now() + deadline;
    loop {
        let found = tokio::task::block_in_place(|| {
            events(a, source)
                .into_iter()
                .find(|e| body(e).contains(text))
        });
        if found.is_some() || Instant::now() > end {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn stored(a: &Agent, source: &str, text: &str) -> Value {
    stored_within(a, source, text, DEADLINE)
        .await
        .unwrap_or_else(|| panic!("{text:?} not stored by {source} within {DEADLINE:?}"))
}

fn closed_metric(a: &Agent, source: &str, reason: &str) -> f64 {
    let sample = format!(
        "holdfast_listener_closed_connections_total{{source=\"{source}\",reason=\"{reason}\"}}"
    );
    tokio::task::block_in_place(|| a.metric(&sample)).unwrap_or(-1.0)
}

fn start(config: &str) -> Agent {
    let mut a = Agent::new(config);
    a.start();
    a.wait_ready();
    a
}

fn syslog_line(text: &str) -> String {
    format!("<13>1 2026-12-03T10:00:00Z gw01 app - - - {text}\n")
}

/// A client config trusting the test CA, with `identity` (certificate and
/// key files) or without a client certificate.
fn client_tls(pki: &Pki, identity: Option<(&Path, &Path)>) -> TlsConnector {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_file(pki.path("ca.pem")).unwrap())
        .unwrap();
    let builder = ClientConfig::builder_with_provider(Arc::new(crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = CertificateDer::pem_file_iter(cert)
                .unwrap()
                .collect::<Result<Vec<_>, _>>()
                .unwrap();
            let key = PrivateKeyDer::from_pem_file(key).unwrap();
            builder.with_client_auth_cert(chain, key).unwrap()
        }
    };
    TlsConnector::from(Arc::new(config))
}

async fn tls_connect(
    from: &str,
    port: u16,
    connector: &TlsConnector,
) -> std::io::Result<TlsStream<TcpStream>> {
    let tcp = connect_from(from, port).await;
    let name = ServerName::try_from("127.0.0.1").unwrap();
    connector.connect(name, tcp).await
}

/// Sends one syslog message over TLS and closes; whether the server took
/// it (with TLS 1.3 a refused client certificate shows only after the
/// client's side of the handshake, on the next read or write).
async fn send_tls(from: &str, port: u16, connector: &TlsConnector, text: &str) -> bool {
    let Ok(mut s) = tls_connect(from, port, connector).await else {
        return false;
    };
    if s.write_all(syslog_line(text).as_bytes()).await.is_err() || s.shutdown().await.is_err() {
        return false;
    }
    // The source closes once it has the message, without a TLS
    // close_notify (syslog has no goodbye): an early end is success, an
    // alert is a refusal.
    let mut rest = Vec::new();
    match tokio::time::timeout(DEADLINE, s.read_to_end(&mut rest)).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) => e.kind() == std::io::ErrorKind::UnexpectedEof,
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_do_not_keep_a_fifth_sender_out() {
    let port = free_port();
    let a = start(&format!(
        r#"
[sources.lan]
type = "syslog"
listen = "127.0.0.1:{port}"
max_connections = 4
"#
    ));
    // Four connections that fall silent halfway through a message that
    // never ends (a read that never completes).
    let mut idle = Vec::new();
    for i in 0..4 {
        let mut s = connect_from("127.0.0.2", port).await;
        s.write_all(format!("<13>1 2026-12-03T10:00:00Z gw01 app - - - never fin {i}").as_bytes())
            .await
            .unwrap();
        idle.push(s);
    }
    let sent = Instant::now();
    let mut fifth = connect_from("127.0.0.3", port).await;
    fifth
        .write_all(syslog_line("the fifth sender").as_bytes())
        .await
        .unwrap();
    fifth.shutdown().await.unwrap();
    stored(&a, "lan", "the fifth sender").await;
    eprintln!(
        "the fifth sender's message was stored {:?} after it was sent",
        sent.elapsed()
    );
    assert!(closed_metric(&a, "lan", "idle_evicted") >= 1.0);
    // The evicted connection's partial message was kept.
    stored(&a, "lan", "never fin").await;
    drop(idle);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unfinished_tls_handshakes_do_not_keep_a_fifth_sender_out() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let port = free_port();
    let a = start(&format!(
        r#"
[sources.secure]
type = "syslog"
listen = "127.0.0.1:{port}"
max_connections = 4
tls = {{ cert_file = "{cert}", key_file = "{key}" }}
"#,
        cert = pki.path("server.pem").display(),
        key = pki.path("server.key").display(),
    ));
    // Four handshakes that start (a TLS record header) and never finish.
    let mut hogs = Vec::new();
    for _ in 0..4 {
        let mut s = connect_from("127.0.0.2", port).await;
        s.write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8]).await.unwrap();
        hogs.push(s);
    }
    let connector = client_tls(&pki, None);
    let sent = tokio::time::timeout(
        DEADLINE,
        send_tls("127.0.0.3", port, &connector, "after the stuck handshakes"),
    )
    .await;
    assert_eq!(sent.ok(), Some(true), "the fifth sender was served");
    stored(&a, "secure", "after the stuck handshakes").await;
    drop(hogs);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_address_cannot_open_more_than_its_share() {
    let [syslog_port, otlp_port] = free_ports();
    let a = start(&format!(
        r#"
[sources.lan]
type = "syslog"
listen = "127.0.0.1:{syslog_port}"
max_connections_per_peer = 2

[sources.otlp]
type = "otlp_http"
listen = "127.0.0.1:{otlp_port}"
max_connections_per_peer = 2
"#
    ));
    for (source, port) in [("lan", syslog_port), ("otlp", otlp_port)] {
        assert_eq!(
            closed_metric(&a, source, "per_peer_limit"),
            0.0,
            "at 0 from the start"
        );
        let held = [
            connect_from("127.0.0.2", port).await,
            connect_from("127.0.0.2", port).await,
        ];
        // The third from the same address is closed at once, unserved.
        let mut third = connect_from("127.0.0.2", port).await;
        let mut buf = [0; 16];
        let r = tokio::time::timeout(DEADLINE, third.read(&mut buf)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "{source}: the third connection was left open: {r:?}"
        );
        wait_for("the refusal counted", DEADLINE, || {
            (closed_metric(&a, source, "per_peer_limit") == 1.0).then_some(())
        });
        drop(held);
    }
    // Another address is served meanwhile.
    let mut other = connect_from("127.0.0.3", syslog_port).await;
    other
        .write_all(syslog_line("from another address").as_bytes())
        .await
        .unwrap();
    other.shutdown().await.unwrap();
    stored(&a, "lan", "from another address").await;
}

const OTLP_LOGS: &str =
    r#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"BODY"}}]}]}]}"#;

fn otlp_request(token: Option<&str>, text: &str, close: bool) -> Vec<u8> {
    let body = OTLP_LOGS.replace("BODY", text);
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let conn = if close { "Connection: close\r\n" } else { "" };
    format!(
        "POST /v1/logs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n{auth}{conn}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The status code of the next response on `s`, its body read (so that
/// the connection can carry the next request); `None` once it is closed.
async fn status<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Option<u16> {
    let mut head = Vec::new();
    let mut byte = [0; 1];
    while !head.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte).await {
            Ok(1) => head.push(byte[0]),
            _ => return None,
        }
    }
    let head = String::from_utf8(head).ok()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; length];
    s.read_exact(&mut body).await.ok()?;
    head.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unauthenticated_flood_does_not_keep_an_authenticated_client_out() {
    let port = free_port();
    let mut a = Agent::new("");
    let token_file = a.path("otlp.token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    std::fs::set_permissions(
        &token_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    let config = std::fs::read_to_string(&a.config).unwrap()
        + &format!(
            r#"
[sources.otlp]
type = "otlp_http"
listen = "127.0.0.1:{port}"
max_connections = 4
bearer_token_file = "{}"
"#,
            token_file.display()
        );
    std::fs::write(&a.config, config).unwrap();
    a.start();
    a.wait_ready();
    // Eight clients without the token, each sending a request every 200 ms
    // on a kept-alive connection, reconnecting when closed.
    let stop = Arc::new(AtomicBool::new(false));
    let mut flood = Vec::new();
    for _ in 0..8 {
        let stop = stop.clone();
        flood.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut s = connect_from("127.0.0.2", port).await;
                while !stop.load(Ordering::Relaxed) {
                    if s.write_all(&otlp_request(None, "flood", false))
                        .await
                        .is_err()
                    {
                        break;
                    }
                    if status(&mut s).await.is_none() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let served = tokio::time::timeout(DEADLINE, async {
        let mut s = connect_from("127.0.0.3", port).await;
        s.write_all(&otlp_request(Some("s3cret-token"), "authenticated", true))
            .await
            .unwrap();
        status(&mut s).await
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    assert_eq!(
        served.ok().flatten(),
        Some(200),
        "the authenticated client was served"
    );
    stored(&a, "otlp", "authenticated").await;
    for f in flood {
        let _ = f.await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn client_certificates_required_and_optional() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let (cert, key) = pki.client("client", 2);
    let [syslog_port, optional_port, otlp_port] = free_ports();
    let tls = |extra: &str| {
        format!(
            r#"tls = {{ cert_file = "{}", key_file = "{}", client_ca_file = "{}"{extra} }}"#,
            pki.path("server.pem").display(),
            pki.path("server.key").display(),
            pki.path("ca.pem").display(),
        )
    };
    let a = start(&format!(
        r#"
[sources.required]
type = "syslog"
listen = "127.0.0.1:{syslog_port}"
{}

[sources.optional]
type = "syslog"
listen = "127.0.0.1:{optional_port}"
{}

[sources.otlp]
type = "otlp_http"
listen = "127.0.0.1:{otlp_port}"
{}
"#,
        tls(""),
        tls(r#", client_auth = "optional""#),
        tls(""),
    ));
    let anonymous = client_tls(&pki, None);
    let identified = client_tls(&pki, Some((&cert, &key)));
    let subject = "CN=holdfast test client";

    assert!(
        !send_tls(
            "127.0.0.2",
            syslog_port,
            &anonymous,
            "without a certificate"
        )
        .await
    );
    assert!(send_tls("127.0.0.2", syslog_port, &identified, "with a certificate").await);
    let e = stored(&a, "required", "with a certificate").await;
    assert_eq!(attr(&e, "tls.client.subject").as_deref(), Some(subject));
    assert!(closed_metric(&a, "required", "tls_handshake_failed") >= 1.0);

    assert!(send_tls("127.0.0.2", optional_port, &anonymous, "optional anonymous").await);
    assert!(
        send_tls(
            "127.0.0.2",
            optional_port,
            &identified,
            "optional identified"
        )
        .await
    );
    let e = stored(&a, "optional", "optional anonymous").await;
    assert_eq!(attr(&e, "tls.client.subject"), None);
    let e = stored(&a, "optional", "optional identified").await;
    assert_eq!(attr(&e, "tls.client.subject").as_deref(), Some(subject));

    // OTLP: the subject on each record; one the client wrote is replaced.
    let mut s = tls_connect("127.0.0.2", otlp_port, &identified)
        .await
        .unwrap();
    let forged = OTLP_LOGS.replace(
        r#""body":{"stringValue":"BODY"}"#,
        r#""body":{"stringValue":"over otlp"},"attributes":[{"key":"tls.client.subject","value":{"stringValue":"CN=forged"}}]"#,
    );
    let req = format!(
        "POST /v1/logs HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\n\
         Connection: close\r\nContent-Length: {}\r\n\r\n{forged}",
        forged.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    assert_eq!(status(&mut s).await, Some(200));
    let e = stored(&a, "otlp", "over otlp").await;
    assert_eq!(attr(&e, "tls.client.subject").as_deref(), Some(subject));
    let mut s = tls_connect("127.0.0.2", otlp_port, &anonymous).await;
    let refused = match &mut s {
        Err(_) => true,
        Ok(s) => {
            let _ = s
                .write_all(&otlp_request(None, "anonymous otlp", true))
                .await;
            status(s).await.is_none()
        }
    };
    assert!(refused, "an OTLP client without a certificate was served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replaced_client_ca_is_used_without_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(&dir.path().join("first"));
    let other = Pki::new(&dir.path().join("second"));
    let (cert, key) = other.client("newcomer", 7);
    let ca = dir.path().join("client-ca.pem");
    std::fs::copy(pki.path("ca.pem"), &ca).unwrap();
    let port = free_port();
    let a = start(&format!(
        r#"
[sources.secure]
type = "syslog"
listen = "127.0.0.1:{port}"
tls = {{ cert_file = "{}", key_file = "{}", client_ca_file = "{}" }}
"#,
        pki.path("server.pem").display(),
        pki.path("server.key").display(),
        ca.display(),
    ));
    let newcomer = client_tls(&pki, Some((&cert, &key)));
    assert!(!send_tls("127.0.0.2", port, &newcomer, "before the rotation").await);
    // The CA file is replaced as a rotation does: a new file renamed over.
    let next = dir.path().join("client-ca.pem.new");
    std::fs::copy(other.path("ca.pem"), &next).unwrap();
    std::fs::rename(&next, &ca).unwrap();
    let end = Instant::now() + DEADLINE;
    while !send_tls("127.0.0.2", port, &newcomer, "after the rotation").await {
        assert!(Instant::now() < end, "the new client CA was not taken up");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let e = stored(&a, "secure", "after the rotation").await;
    assert_eq!(
        attr(&e, "tls.client.subject").as_deref(),
        Some("CN=holdfast test newcomer")
    );
    assert!(
        stored_within(&a, "secure", "before the rotation", Duration::ZERO)
            .await
            .is_none()
    );
    // A CA file caught halfway through a rotation keeps the CA in use.
    std::fs::write(&next, "-----BEGIN CERTIFICATE-----\nnot yet\n").unwrap();
    std::fs::rename(&next, &ca).unwrap();
    // Files are looked at before a handshake: each one must succeed, until
    // one has seen the bad file.
    let end = Instant::now() + DEADLINE;
    loop {
        assert!(send_tls("127.0.0.2", port, &newcomer, "with the CA kept").await);
        if a.stderr().contains("TLS files changed but cannot be used") {
            break;
        }
        assert!(
            Instant::now() < end,
            "the unusable CA file was not reported"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stored(&a, "secure", "with the CA kept").await;
}

#[test]
fn check_names_the_listener_keys_and_warns_about_open_listeners() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let a = Agent::new(&format!(
        r#"
[sources.lan]
type = "syslog"
listen = "0.0.0.0:{}"
max_connections_per_peer = 4
tls_handshake_timeout = "3s"
tls = {{ cert_file = "{}", key_file = "{}", client_ca_file = "{}", client_auth = "optional" }}
"#,
        free_port(),
        pki.path("server.pem").display(),
        pki.path("server.key").display(),
        pki.path("server.pem.missing").display(),
    ));
    let out = holdfast(&["check", "--config", a.config_arg()]);
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("sources.lan.tls.client_ca_file"), "{text}");
    assert!(
        text.contains("without required client certificates"),
        "{text}"
    );
}

#[test]
fn check_refuses_listener_keys_that_cannot_work() {
    for (what, table, key, fragment) in [
        (
            "client_auth without a CA",
            r#"tls = { cert_file = "c.pem", key_file = "k.pem", client_auth = "required" }"#,
            "sources.lan.tls.client_auth",
            "tls.client_ca_file is not",
        ),
        (
            "an unknown client_auth",
            r#"tls = { cert_file = "c.pem", key_file = "k.pem", client_ca_file = "ca.pem", client_auth = "sometimes" }"#,
            "sources.lan.tls.client_auth",
            "unknown client_auth \"sometimes\"",
        ),
        (
            "a zero handshake timeout",
            r#"tls_handshake_timeout = "0s"
tls = { cert_file = "c.pem", key_file = "k.pem" }"#,
            "sources.lan.tls_handshake_timeout",
            "must be greater than zero",
        ),
        (
            "no connections per peer",
            "max_connections_per_peer = 0",
            "sources.lan.max_connections_per_peer",
            "out of range",
        ),
        (
            "a connection key over UDP",
            "mode = \"udp\"\nmax_connections_per_peer = 4",
            "sources.lan.max_connections_per_peer",
            "applies to mode = \"tcp\" only",
        ),
    ] {
        let a = Agent::new(&format!("[sources.lan]\ntype = \"syslog\"\n{table}\n"));
        let out = holdfast(&["check", "--config", a.config_arg()]);
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what}: {text}");
        assert!(
            text.lines()
                .any(|l| l.contains(key) && l.contains(fragment)),
            "{what}: no {key} with {fragment:?} in {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handshake_that_never_finishes_does_not_hold_up_the_stop() {
    let dir = tempfile::tempdir().unwrap();
    let pki = Pki::new(dir.path());
    let port = free_port();
    let mut a = start(&format!(
        r#"
[sources.secure]
type = "syslog"
listen = "127.0.0.1:{port}"
tls = {{ cert_file = "{}", key_file = "{}" }}
"#,
        pki.path("server.pem").display(),
        pki.path("server.key").display(),
    ));
    let mut hog = connect_from("127.0.0.2", port).await;
    hog.write_all(&[0x16, 0x03, 0x01, 0x00, 0xc8])
        .await
        .unwrap();
    // Connections are accepted in order: once a later one is served, the
    // hog's handshake is under way.
    let connector = client_tls(&pki, None);
    assert!(send_tls("127.0.0.3", port, &connector, "after the hog").await);
    stored(&a, "secure", "after the hog").await;
    let connected = Instant::now();
    let stopped = tokio::task::spawn_blocking(move || {
        let status = a.stop();
        (status, connected.elapsed())
    })
    .await
    .unwrap();
    assert!(stopped.0.success(), "{:?}", stopped.0);
    assert!(
        stopped.1 < Duration::from_secs(5),
        "the stop waited {:?} for the handshake",
        stopped.1
    );
    drop(hog);
}
