//! The HTTP client of a network sink: TLS with rustls (`client_tls.rs`: the
//! system's CA certificates plus an optional `ca_file`, and a client
//! certificate that follows its files), one `request_timeout` per request,
//! no redirects (a redirect is reported as a wrong endpoint, not followed
//! with the data), gzip done here, credentials and secret header values
//! read from their files once at start, and answers read up to a bound.

use std::io::Write;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use bytes::Bytes;
use reqwest::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER,
};

use super::api::Request;
use super::options::{Auth, Compression, Header, HeaderValueFrom, HttpOptions};
use crate::pool;
use crate::sinks::client_tls::ClientTls;
use crate::sinks::credentials::read_secret;
use crate::sinks::delivery::retry::parse_retry_after;
use crate::sinks::delivery::transport::TransportKind;

/// The least a request's answer may take: room for any whole-request
/// answer (an OTLP partial success, an error page) whatever the batch.
pub const MIN_RESPONSE_BYTES: usize = 1 << 20;
/// What one event of a request may take in the answer: an Elasticsearch
/// `_bulk` item with a long mapping error and its `caused_by` chain is
/// about 1 KiB; four times that leaves room for verbose receivers.
pub const RESPONSE_BYTES_PER_EVENT: usize = 4 << 10;
/// The most any answer may take, however large the batch: what a sink
/// may hold per request in flight.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// How much of an answer to a request of `events` events is read: a
/// receiver (hostile or broken) that answers with more, or announces more,
/// makes the request fail with `response_too_large` and be sent again,
/// without the sink ever holding more than this per request.
pub fn response_limit(events: usize) -> usize {
    events
        .saturating_mul(RESPONSE_BYTES_PER_EVENT)
        .clamp(MIN_RESPONSE_BYTES, MAX_RESPONSE_BYTES)
}

pub(crate) struct Client {
    /// The client of the current client certificate's generation: a new
    /// certificate gets a new client, so that no pooled connection or
    /// session ticket goes on speaking for the old one.
    http: Mutex<(u64, reqwest::Client)>,
    settings: Settings,
    auth: Option<HeaderValue>,
    compression: Compression,
}

/// What every `reqwest::Client` of a sink is built from.
struct Settings {
    tls: ClientTls,
    headers: HeaderMap,
    request_timeout: Duration,
    concurrency: usize,
}

impl Settings {
    fn build(&self) -> anyhow::Result<reqwest::Client> {
        reqwest::Client::builder()
            .timeout(self.request_timeout)
            .connect_timeout(self.request_timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(self.concurrency)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .default_headers(self.headers.clone())
            .tcp_nodelay(true)
            .use_preconfigured_tls(self.tls.config())
            .build()
            .context("building the HTTP client")
    }
}

/// What came back for one request, before the API reads it.
#[derive(Debug)]
pub(crate) enum Reply {
    Transport {
        kind: TransportKind,
        message: String,
    },
    Response {
        status: u16,
        retry_after: Option<Duration>,
        content_type: Option<String>,
        body: Bytes,
        /// The body was longer than the request's limit
        /// ([`response_limit`]): `body` holds its start only.
        truncated: bool,
    },
}

impl Client {
    /// Builds the client; fails (naming the file) when a credential, header,
    /// CA or client certificate file cannot be read. `request_timeout`
    /// bounds each request; `concurrency` connections are kept idle.
    pub fn new(
        opts: &HttpOptions,
        request_timeout: Duration,
        concurrency: usize,
    ) -> anyhow::Result<Client> {
        let client_cert = opts
            .tls
            .client_cert
            .as_ref()
            .map(|c| (c.cert_file.as_path(), c.key_file.as_path()));
        let settings = Settings {
            tls: ClientTls::new(opts.tls.ca_file.as_deref(), client_cert)?,
            headers: header_map(&opts.headers)?,
            request_timeout,
            concurrency,
        };
        let http = settings.build()?;
        let generation = settings.tls.identity().map_or(0, |i| i.generation());
        let auth = match &opts.auth {
            None => None,
            Some(a) => Some(auth_header(a)?),
        };
        Ok(Client {
            http: Mutex::new((generation, http)),
            settings,
            auth,
            compression: opts.compression,
        })
    }

    /// The client to send with, new when the client certificate changed.
    fn http(&self) -> reqwest::Client {
        let generation = self.settings.tls.identity().map(|i| i.refresh());
        let mut current = self.http.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(g) = generation.filter(|g| *g != current.0) {
            match self.settings.build() {
                Ok(c) => *current = (g, c),
                // Cannot happen with settings that built once; the old
                // client still works.
                Err(e) => tracing::warn!("keeping the HTTP client of the old certificate: {e:#}"),
            }
        }
        current.1.clone()
    }

    /// Sends one request; returns the answer and the bytes put on the wire.
    /// At most `limit` bytes of the answer's body are read (and held).
    pub async fn send(&self, req: Request, limit: usize) -> (Reply, usize) {
        let (body, encoding) = match self.compression {
            Compression::None | Compression::Snappy => (pool::BODIES.freeze(req.body), None),
            Compression::Gzip => {
                let zipped = gzip(&req.body);
                pool::BODIES.give(req.body);
                (pool::BODIES.freeze(zipped), Some("gzip"))
            }
        };
        let wire = body.len();
        let mut r = self
            .http()
            .post(req.url)
            .header(CONTENT_TYPE, req.content_type)
            .body(body);
        if let Some(e) = encoding {
            r = r.header(CONTENT_ENCODING, e);
        }
        for (name, value) in req.headers {
            r = r.header(*name, *value);
        }
        if let Some(a) = &self.auth {
            r = r.header(AUTHORIZATION, a.clone());
        }
        let mut resp = match r.send().await {
            Ok(resp) => resp,
            Err(e) => return (transport(&e), wire),
        };
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, SystemTime::now()));
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        // A 2xx announcing a length past the limit is dropped unread: it
        // could not be trusted anyway. Other statuses keep the start of
        // their body as the error text.
        let mut truncated =
            (200..300).contains(&status) && resp.content_length().is_some_and(|n| n > limit as u64);
        let mut buf = pool::BODIES.take();
        while !truncated {
            match resp.chunk().await {
                Ok(Some(chunk)) => {
                    if buf.len() + chunk.len() > limit {
                        truncated = true;
                        break;
                    }
                    // Grown within the limit, not by doubling past it.
                    let want = buf.len() + chunk.len();
                    if want > buf.capacity() {
                        let to = want.max(buf.capacity() * 2).min(limit);
                        buf.reserve_exact(to - buf.len());
                    }
                    buf.extend_from_slice(&chunk);
                }
                Ok(None) => break,
                Err(e) => return (transport(&e), wire),
            }
        }
        (
            Reply::Response {
                status,
                retry_after,
                content_type,
                body: pool::BODIES.freeze(buf),
                truncated,
            },
            wire,
        )
    }
}

fn transport(e: &reqwest::Error) -> Reply {
    let kind = if e.is_timeout() {
        TransportKind::Timeout
    } else if e.is_connect() {
        TransportKind::Connect
    } else {
        TransportKind::Connection
    };
    // reqwest's own message is terse; the causes say what happened.
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    Reply::Transport { kind, message }
}

/// Level 1: most of gzip's gain on telemetry for a fraction of its cost.
pub(crate) fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(
        pool::BODIES.take_with(data.len() / 4 + 64),
        flate2::Compression::fast(),
    );
    // Writing to a Vec cannot fail.
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

/// The `headers`/`headers_file` of a sink, values read from their files.
fn header_map(headers: &[Header]) -> anyhow::Result<HeaderMap> {
    let mut map = HeaderMap::new();
    for h in headers {
        let name = HeaderName::from_bytes(h.name.as_bytes())
            .with_context(|| format!("{} is not a valid header name", h.name))?;
        let value = match &h.value {
            HeaderValueFrom::Inline(v) => HeaderValue::from_str(v),
            HeaderValueFrom::File(path) => {
                let secret = read_secret(path, &format!("{} header", h.name))?;
                HeaderValue::from_str(&secret).map(|mut v| {
                    // Keeps the value out of debug output.
                    v.set_sensitive(true);
                    v
                })
            }
        }
        .with_context(|| {
            format!(
                "the {} header value holds characters not allowed in an HTTP header",
                h.name
            )
        })?;
        map.insert(name, value);
    }
    Ok(map)
}

fn auth_header(a: &Auth) -> anyhow::Result<HeaderValue> {
    use base64::Engine;
    let value = match a {
        Auth::Basic {
            user,
            password_file,
        } => {
            let password = read_secret(password_file, "password")?;
            let raw = format!("{user}:{password}");
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(raw)
            )
        }
        Auth::Bearer { token_file } => format!("Bearer {}", read_secret(token_file, "token")?),
        Auth::ApiKey { key_file } => format!("ApiKey {}", read_secret(key_file, "API key")?),
    };
    let mut v = HeaderValue::from_str(&value)
        .context("the credential holds characters not allowed in an HTTP header")?;
    // Keeps the value out of debug output.
    v.set_sensitive(true);
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_limit_follows_the_batch_between_a_floor_and_a_cap() {
        assert_eq!(response_limit(0), MIN_RESPONSE_BYTES);
        assert_eq!(response_limit(1), MIN_RESPONSE_BYTES);
        assert_eq!(response_limit(500), 500 * 4096);
        assert_eq!(response_limit(1 << 20), MAX_RESPONSE_BYTES);
        assert_eq!(response_limit(usize::MAX), MAX_RESPONSE_BYTES);
    }
}
