//! For tests of a sink's identity on the wire: a test CA with server and
//! client certificates made by the `openssl` CLI, and an OTLP/HTTP (JSON)
//! receiver on 127.0.0.1 that can require a client certificate signed by
//! that CA and records, per request, the client certificate and the headers
//! it saw and the log lines it was sent.
//!
//! Included with `#[path = "common/identity.rs"] mod identity;`.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use serde_json::Value;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::TlsAcceptor;

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl (Debian package openssl; .ci/run installs it)");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A test CA in a directory, which signs certificates on demand.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    /// A new CA (`ca.pem`, `ca.key`) in `dir`, and the receiver's
    /// certificate for 127.0.0.1 (`server.pem`, `server.key`).
    pub fn new(dir: &Path) -> Pki {
        std::fs::create_dir_all(dir).unwrap();
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                "ca.key",
                "-out",
                "ca.pem",
                "-days",
                "2",
                "-subj",
                "/CN=holdfast test CA",
            ],
        );
        let pki = Pki {
            dir: dir.to_path_buf(),
        };
        pki.sign(
            "server",
            1,
            "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n",
        );
        pki
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// `NAME.pem` and `NAME.key`: a client certificate with this serial.
    pub fn client(&self, name: &str, serial: u32) -> (PathBuf, PathBuf) {
        self.sign(name, serial, "extendedKeyUsage=clientAuth\n");
        (
            self.path(&format!("{name}.pem")),
            self.path(&format!("{name}.key")),
        )
    }

    fn sign(&self, name: &str, serial: u32, extensions: &str) {
        let ext = format!("{name}.ext");
        std::fs::write(
            self.path(&ext),
            format!("basicConstraints=CA:FALSE\n{extensions}"),
        )
        .unwrap();
        let (key, csr, pem) = (
            format!("{name}.key"),
            format!("{name}.csr"),
            format!("{name}.pem"),
        );
        let subject = format!("/CN=holdfast test {name}");
        openssl(
            &self.dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-keyout",
                &key,
                "-out",
                &csr,
                "-subj",
                &subject,
            ],
        );
        let serial = serial.to_string();
        openssl(
            &self.dir,
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-set_serial",
                &serial,
                "-days",
                "2",
                "-extfile",
                &ext,
                "-out",
                &pem,
            ],
        );
    }
}

/// The DER of the (first) certificate in a PEM file.
pub fn cert_der(pem: &Path) -> Vec<u8> {
    CertificateDer::from_pem_file(pem)
        .unwrap()
        .as_ref()
        .to_vec()
}

/// One request as the receiver saw it.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The DER of the client certificate of its connection.
    pub client_cert: Option<Vec<u8>>,
    /// Header names in lower case.
    pub headers: HashMap<String, String>,
    /// The log lines (record bodies) it carried.
    pub lines: Vec<String>,
}

#[derive(Debug, Default)]
pub struct State {
    pub requests: Vec<Seen>,
    /// TLS handshakes that failed (no or a wrong client certificate).
    pub refused: u64,
    /// How many times each line arrived.
    pub arrivals: HashMap<String, u32>,
}

/// A running receiver; stops when dropped.
pub struct Receiver {
    pub addr: SocketAddr,
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A TLS acceptor that requires a client certificate signed by the CA.
pub fn mtls_acceptor(pki: &Pki) -> TlsAcceptor {
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
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    TlsAcceptor::from(Arc::new(config))
}

impl Receiver {
    /// Plain HTTP without `tls`; with it, TLS as the acceptor demands.
    pub async fn start(tls: Option<TlsAcceptor>) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (s, tls) = (s.clone(), tls.clone());
                tokio::spawn(async move {
                    match tls {
                        None => serve(tcp, None, s).await,
                        Some(acceptor) => match acceptor.accept(tcp).await {
                            Ok(stream) => {
                                let cert = stream
                                    .get_ref()
                                    .1
                                    .peer_certificates()
                                    .and_then(|c| c.first())
                                    .map(|c| c.as_ref().to_vec());
                                serve(stream, cert, s).await
                            }
                            Err(_) => s.lock().unwrap().refused += 1,
                        },
                    }
                });
            }
        });
        Receiver { addr, state, task }
    }

    pub fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Requests that carried lines, with the certificate each came with.
    pub fn certs_of_lines(&self) -> HashMap<String, Vec<Option<Vec<u8>>>> {
        let mut out: HashMap<String, Vec<Option<Vec<u8>>>> = HashMap::new();
        for r in &self.state().requests {
            for l in &r.lines {
                out.entry(l.clone())
                    .or_default()
                    .push(r.client_cert.clone());
            }
        }
        out
    }
}

async fn serve<S>(stream: S, cert: Option<Vec<u8>>, state: Arc<Mutex<State>>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let (state, cert) = (state.clone(), cert.clone());
        async move {
            let headers = req
                .headers()
                .iter()
                .map(|(k, v)| (k.as_str().to_string(), v.to_str().unwrap_or("").to_string()))
                .collect();
            let body = req.into_body().collect().await?.to_bytes();
            let mut lines = Vec::new();
            if let Ok(v) = serde_json::from_slice::<Value>(&body) {
                bodies(&v, &mut lines);
            }
            let mut st = state.lock().unwrap();
            for l in &lines {
                *st.arrivals.entry(l.clone()).or_default() += 1;
            }
            st.requests.push(Seen {
                client_cert: cert,
                headers,
                lines,
            });
            let resp = Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Full::new(Bytes::from_static(b"{}")))
                .unwrap();
            Ok::<_, hyper::Error>(resp)
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
        .await;
}

/// The string bodies of the log records in an OTLP/JSON document.
fn bodies(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(s)) = m.get("body").and_then(|b| b.get("stringValue")) {
                out.push(s.clone());
            }
            m.values().for_each(|v| bodies(v, out));
        }
        Value::Array(a) => a.iter().for_each(|v| bodies(v, out)),
        _ => {}
    }
}
