//! One target's exposition over HTTP: the request (asking for OpenMetrics,
//! then the text format; gzip; a bearer token read from its file at each
//! scrape so a rotated token is used at once), and the body read within
//! `max_body_size` before and after gzip decoding, all within the timeout.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use flate2::read::MultiGzDecoder;
use reqwest::header::{
    HeaderValue, ACCEPT, ACCEPT_ENCODING, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE,
};

use super::config::ScrapeSettings;
use super::parse::Format;

/// What Prometheus asks for: OpenMetrics first, then the text format.
const ACCEPT_FORMATS: &str = "application/openmetrics-text;version=1.0.0;q=0.75,\
    text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// Why a scrape got no exposition.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("no answer within the timeout of {0:?}: raise timeout (below interval) or look at why the target is slow")]
    Timeout(Duration),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("the target answered HTTP {0}")]
    Status(u16),
    #[error("reading the answer failed: {0}")]
    Read(String),
    #[error("the body is larger than max_body_size ({0} bytes, after gzip decoding too): raise max_body_size or serve fewer series")]
    TooLarge(usize),
    #[error("the body is not UTF-8 text (at byte {0})")]
    NotUtf8(usize),
}

impl FetchError {
    /// The `result` label of `holdfast_scrape_scrapes_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            FetchError::Timeout(_) => "timeout",
            FetchError::Connect(_) => "connect",
            FetchError::Status(_) => "http_status",
            FetchError::Read(_) => "read",
            FetchError::TooLarge(_) => "body_too_large",
            FetchError::NotUtf8(_) => "malformed",
        }
    }
}

/// The HTTP client every target of a source shares.
pub struct Fetcher {
    client: reqwest::Client,
    timeout: Duration,
    max_body_bytes: usize,
    bearer_token_file: Option<PathBuf>,
}

impl Fetcher {
    pub fn new(s: &ScrapeSettings, name: &str) -> anyhow::Result<Fetcher> {
        let mut b = reqwest::Client::builder()
            .use_rustls_tls()
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .connect_timeout(s.timeout)
            .timeout(s.timeout)
            .pool_max_idle_per_host(1)
            // Targets are on the device or its LAN: an HTTP_PROXY set for
            // the uplink must not carry scrapes (Prometheus ignores it too
            // unless told otherwise).
            .no_proxy();
        if let Some(ca) = &s.tls.ca_file {
            let pem = std::fs::read(ca)
                .with_context(|| format!("source {name}: reading tls.ca_file {}", ca.display()))?;
            for cert in reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                format!(
                    "source {name}: tls.ca_file {} holds no PEM certificate",
                    ca.display()
                )
            })? {
                b = b.add_root_certificate(cert);
            }
        }
        if let (Some(cert), Some(key)) = (&s.tls.client_cert_file, &s.tls.client_key_file) {
            let mut pem = read(cert, name, "tls.client_cert_file")?;
            pem.extend(read(key, name, "tls.client_key_file")?);
            let identity = reqwest::Identity::from_pem(&pem).with_context(|| {
                format!(
                    "source {name}: tls.client_cert_file {} and tls.client_key_file {} are \
                     not a PEM certificate and its key",
                    cert.display(),
                    key.display()
                )
            })?;
            b = b.identity(identity);
        }
        let client = b
            .build()
            .with_context(|| format!("source {name}: setting up the HTTP client"))?;
        Ok(Fetcher {
            client,
            timeout: s.timeout,
            max_body_bytes: s.max_body_bytes,
            bearer_token_file: s.bearer_token_file.clone(),
        })
    }

    /// The body of `url` and its format.
    pub async fn fetch(&self, url: &reqwest::Url) -> Result<(String, Format), FetchError> {
        match tokio::time::timeout(self.timeout, self.fetch_within(url)).await {
            Ok(r) => r,
            Err(_) => Err(FetchError::Timeout(self.timeout)),
        }
    }

    async fn fetch_within(&self, url: &reqwest::Url) -> Result<(String, Format), FetchError> {
        let mut req = self
            .client
            .get(url.clone())
            .header(ACCEPT, ACCEPT_FORMATS)
            .header(ACCEPT_ENCODING, "gzip")
            .header(
                "X-Prometheus-Scrape-Timeout-Seconds",
                format!("{}", self.timeout.as_secs_f64()),
            );
        if let Some(path) = &self.bearer_token_file {
            let token = std::fs::read_to_string(path).map_err(|e| {
                FetchError::Connect(format!(
                    "cannot read bearer_token_file {}: {e}",
                    path.display()
                ))
            })?;
            let value =
                HeaderValue::from_str(&format!("Bearer {}", token.trim())).map_err(|_| {
                    FetchError::Connect(format!(
                        "bearer_token_file {} holds characters a header cannot carry",
                        path.display()
                    ))
                })?;
            req = req.header(AUTHORIZATION, value);
        }
        let mut resp = req.send().await.map_err(|e| self.request_error(e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(FetchError::Status(status.as_u16()));
        }
        let max = self.max_body_bytes;
        if resp.content_length().is_some_and(|n| n > max as u64) {
            return Err(FetchError::TooLarge(max));
        }
        let format = match resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
        {
            Some(t) if t.starts_with("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Text,
        };
        let gzip = resp
            .headers()
            .get(CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| self.request_error(e))? {
            if body.len() + chunk.len() > max {
                return Err(FetchError::TooLarge(max));
            }
            body.extend_from_slice(&chunk);
        }
        if gzip {
            let mut plain = Vec::new();
            MultiGzDecoder::new(&body[..])
                .take(max as u64 + 1)
                .read_to_end(&mut plain)
                .map_err(|e| FetchError::Read(format!("the gzip body does not decode: {e}")))?;
            if plain.len() > max {
                return Err(FetchError::TooLarge(max));
            }
            body = plain;
        }
        let text = String::from_utf8(body)
            .map_err(|e| FetchError::NotUtf8(e.utf8_error().valid_up_to()))?;
        Ok((text, format))
    }

    fn request_error(&self, e: reqwest::Error) -> FetchError {
        if e.is_timeout() {
            FetchError::Timeout(self.timeout)
        } else if e.is_connect() {
            FetchError::Connect(chain(&e))
        } else {
            FetchError::Read(chain(&e))
        }
    }
}

fn read(path: &Path, name: &str, key: &str) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("source {name}: reading {key} {}", path.display()))
}

/// An error and its causes on one line (reqwest's own message is only
/// "error sending request").
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}
