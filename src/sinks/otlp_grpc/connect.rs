//! The sink's HTTP/2 connection: a tonic [`Channel`] (one connection,
//! every request in flight a stream on it, reconnected when it breaks)
//! over a connector of our own, so that TLS is the sinks' rustls setup
//! (`client_tls.rs`: the system's CA certificates plus `tls.ca_file`, and
//! a client certificate that follows its files) rather than a second one
//! in tonic.
//!
//! tonic is given the endpoint as `http://host:port` with the origin
//! `https://host:port`: the requests say `https`, and the connector, not
//! tonic, makes the TLS connection. A new client certificate makes a new
//! channel: TLS authenticates a client once per connection, so the old
//! connection would go on speaking for the old certificate.
//!
//! [`Checked`] also counts the bytes of each request's body as they leave
//! ([`WireBytes`]: the message as sent, compressed when it is), and the
//! answers pass through it before tonic reads them: tonic
//! panics on a `grpc-status-details-bin` that is not base64
//! (`Status::from_header_map`), and a broken or hostile receiver must not
//! crash the sink with one header. Such details are dropped; the status
//! and its message stay.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::Context as _;
use bytes::Bytes;
use http_body_util::combinators::MapFrame;
use http_body_util::BodyExt;
use hyper::body::Frame;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls::pki_types::ServerName;
use tokio_rustls::TlsConnector;
use tonic::codegen::http::Uri;
use tonic::codegen::http::{HeaderMap, Request, Response};
use tonic::codegen::Service;
use tonic::transport::{Channel, Endpoint};

use crate::sinks::client_tls::ClientTls;
use crate::sinks::credentials::TlsFiles;
use crate::sinks::delivery::transport::TransportKind;

/// What the connector failed at: found in a failed call's chain of causes,
/// it tells "could not connect" from "the connection broke".
#[derive(Debug)]
pub(super) struct ConnectFailed(String);

impl fmt::Display for ConnectFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConnectFailed {}

/// What kind of "no answer" a failed call's chain of causes tells: our
/// connector's [`ConnectFailed`] (could not connect), tonic's
/// `TimeoutExpired` (the `grpc-timeout` deadline passed, which tonic's
/// channel enforces too), or else a broken connection.
pub(super) fn no_answer(e: &(dyn std::error::Error + 'static)) -> TransportKind {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.is::<ConnectFailed>() {
            return TransportKind::Connect;
        }
        if c.is::<tonic::TimeoutExpired>() {
            return TransportKind::Timeout;
        }
        cause = c.source();
    }
    TransportKind::Connection
}

/// The connection's settings and the channel of the current client
/// certificate.
pub(super) struct Link {
    endpoint: Endpoint,
    connector: Connector,
    /// The channel and the client certificate generation it was made for.
    channel: Mutex<(u64, Channel)>,
}

impl Link {
    /// Fails (naming the file) when the CA file or the client certificate
    /// cannot be read. No connection is made before the first request.
    pub fn new(
        url: &reqwest::Url,
        tls: &TlsFiles,
        request_timeout: Duration,
    ) -> anyhow::Result<Link> {
        let host = url
            .host_str()
            .context("the endpoint has no host")?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = url
            .port_or_known_default()
            .context("the endpoint has no port")?;
        let authority = match url.port() {
            Some(p) => format!("{}:{p}", url.host_str().unwrap_or_default()),
            None => url.host_str().unwrap_or_default().to_string(),
        };
        let secure = url.scheme() == "https";
        let tls = if secure {
            let client_cert = tls
                .client_cert
                .as_ref()
                .map(|c| (c.cert_file.as_path(), c.key_file.as_path()));
            Some(ClientTls::new(tls.ca_file.as_deref(), client_cert)?)
        } else {
            None
        };
        let server_name = ServerName::try_from(host.clone())
            .with_context(|| format!("{host} is not a host name TLS can verify"))?;
        let mut endpoint = Endpoint::from_shared(format!("http://{authority}"))
            .context("the endpoint is not a URI")?
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .context("the user agent")?
            // A connection that died without a word (a NAT that forgot it)
            // is found within a minute rather than at the next timeout.
            .http2_keep_alive_interval(Duration::from_secs(30))
            .keep_alive_timeout(Duration::from_secs(20));
        if secure {
            let origin = format!("https://{authority}")
                .parse::<Uri>()
                .context("the endpoint is not a URI")?;
            endpoint = endpoint.origin(origin);
        }
        let connector = Connector {
            host,
            port,
            server_name,
            tls,
            timeout: request_timeout.min(Duration::from_secs(10)),
        };
        let generation = connector.generation();
        let channel = endpoint.connect_with_connector_lazy(connector.clone());
        Ok(Link {
            endpoint,
            connector,
            channel: Mutex::new((generation, channel)),
        })
    }

    /// The channel to send on, new when the client certificate changed.
    pub fn channel(&self) -> Checked {
        let generation = self
            .connector
            .tls
            .as_ref()
            .and_then(|t| t.identity())
            .map(|i| i.refresh());
        let mut current = self.channel.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(g) = generation.filter(|g| *g != current.0) {
            *current = (
                g,
                self.endpoint
                    .connect_with_connector_lazy(self.connector.clone()),
            );
        }
        Checked(current.1.clone())
    }
}

/// Where [`Checked`] counts the body bytes of the request it travels with
/// (in the request's extensions).
#[derive(Clone, Default)]
pub(super) struct WireBytes(pub Arc<AtomicUsize>);

/// A channel whose requests' bytes are counted and whose answers' status
/// details are checked (module docs).
#[derive(Clone)]
pub(super) struct Checked(Channel);

type CheckedBody = MapFrame<tonic::body::Body, fn(Frame<Bytes>) -> Frame<Bytes>>;

impl Service<Request<tonic::body::Body>> for Checked {
    type Response = Response<CheckedBody>;
    type Error = tonic::transport::Error;
    type Future = Pin<
        Box<dyn Future<Output = Result<Response<CheckedBody>, tonic::transport::Error>> + Send>,
    >;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Request<tonic::body::Body>) -> Self::Future {
        let request = match request.extensions().get::<WireBytes>().cloned() {
            Some(WireBytes(sent)) => request.map(|body| {
                tonic::body::Body::new(body.map_frame(move |frame| {
                    if let Some(data) = frame.data_ref() {
                        sent.fetch_add(data.len(), Ordering::Relaxed);
                    }
                    frame
                }))
            }),
            None => request,
        };
        let answer = self.0.call(request);
        Box::pin(async move {
            let (mut parts, body) = answer.await?.into_parts();
            // A status with no body comes in the headers ("Trailers-Only").
            drop_broken_details(&mut parts.headers);
            let check: fn(Frame<Bytes>) -> Frame<Bytes> = check_trailers;
            Ok(Response::from_parts(parts, body.map_frame(check)))
        })
    }
}

fn check_trailers(frame: Frame<Bytes>) -> Frame<Bytes> {
    match frame.into_trailers() {
        Ok(mut trailers) => {
            drop_broken_details(&mut trailers);
            Frame::trailers(trailers)
        }
        Err(frame) => frame,
    }
}

/// Removes a `grpc-status-details-bin` that tonic could not decode (its
/// base64: the standard alphabet, padding optional).
pub(super) fn drop_broken_details(headers: &mut HeaderMap) {
    use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
    use base64::Engine;
    const LENIENT: GeneralPurpose = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    const DETAILS: &str = "grpc-status-details-bin";
    if let Some(v) = headers.get(DETAILS) {
        if LENIENT.decode(v.as_bytes()).is_err() {
            tracing::debug!("the receiver's status details are not base64; ignoring them");
            headers.remove(DETAILS);
        }
    }
}

/// TCP, then TLS when the endpoint is `https://`.
#[derive(Clone)]
struct Connector {
    host: String,
    port: u16,
    server_name: ServerName<'static>,
    tls: Option<ClientTls>,
    /// For TCP and the TLS handshake together.
    timeout: Duration,
}

impl Connector {
    fn generation(&self) -> u64 {
        self.tls
            .as_ref()
            .and_then(|t| t.identity())
            .map_or(0, |i| i.generation())
    }
}

/// What a connection is, plain or TLS.
trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

type Connecting = Pin<Box<dyn Future<Output = Result<TokioIo<Box<dyn Io>>, ConnectFailed>> + Send>>;

impl Service<Uri> for Connector {
    type Response = TokioIo<Box<dyn Io>>;
    type Error = ConnectFailed;
    type Future = Connecting;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectFailed>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: Uri) -> Connecting {
        let this = self.clone();
        Box::pin(async move {
            let at = format!("{}:{}", this.host, this.port);
            let work = async {
                let tcp = tokio::net::TcpStream::connect((this.host.as_str(), this.port))
                    .await
                    .map_err(|e| ConnectFailed(format!("connecting to {at}: {e}")))?;
                let _ = tcp.set_nodelay(true);
                let Some(tls) = &this.tls else {
                    return Ok(TokioIo::new(Box::new(tcp) as Box<dyn Io>));
                };
                let mut config = tls.config();
                config.alpn_protocols = vec![b"h2".to_vec()];
                let stream = TlsConnector::from(Arc::new(config))
                    .connect(this.server_name.clone(), tcp)
                    .await
                    .map_err(|e| ConnectFailed(format!("TLS handshake with {at}: {e}")))?;
                Ok(TokioIo::new(Box::new(stream) as Box<dyn Io>))
            };
            match tokio::time::timeout(this.timeout, work).await {
                Ok(r) => r,
                Err(_) => Err(ConnectFailed(format!(
                    "connecting to {at}: no connection within {:?}",
                    this.timeout
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_details_tonic_cannot_decode_are_dropped() {
        let details = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert("grpc-status-details-bin", v.parse().unwrap());
            drop_broken_details(&mut h);
            h.get("grpc-status-details-bin").is_some()
        };
        assert!(details("CAgSBHNsb3c"));
        assert!(details("CAgSBHNsb3c="));
        assert!(!details("!!not base64!!"));
    }

    #[test]
    fn a_local_failure_says_what_kind_of_no_answer_it_is() {
        let local =
            |e: Box<dyn std::error::Error + Send + Sync>| no_answer(&tonic::Status::from_error(e));
        assert_eq!(
            local(Box::new(ConnectFailed("refused".into()))),
            TransportKind::Connect
        );
        assert_eq!(
            local(Box::new(tonic::TimeoutExpired(()))),
            TransportKind::Timeout
        );
        assert_eq!(
            local(Box::new(std::io::Error::from(
                std::io::ErrorKind::ConnectionReset
            ))),
            TransportKind::Connection
        );
    }
}
