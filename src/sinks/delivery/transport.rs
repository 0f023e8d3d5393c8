//! The seam between the shared sink runtime and one receiver's API: how a
//! request is built from events, and what a 2xx response body says about
//! each of them. Everything else (batching, retries, backoff, quarantine,
//! commits, compression, authentication) is the runtime's and the same for
//! every protocol.

use std::future::Future;
use std::pin::Pin;

use super::item::Item;
use crate::event::Stored;
use crate::sinks::http::Answer;

/// An HTTP request body ready to send (before compression).
#[derive(Debug)]
pub(crate) struct Request {
    pub url: reqwest::Url,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// One event's answer in a per-item response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ItemAnswer {
    pub status: u16,
    pub error: Option<String>,
}

impl ItemAnswer {
    #[cfg(test)]
    pub fn new(status: u16, error: Option<&str>) -> ItemAnswer {
        ItemAnswer {
            status,
            error: error.map(str::to_string),
        }
    }
}

/// What a 2xx response body says about the events of its request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum BodyVerdict {
    /// Every event accepted.
    Accepted,
    /// Every event accepted, with a message worth a warning (OTLP
    /// `partial_success` with nothing rejected).
    AcceptedWithWarning(String),
    /// One answer per event, in request order.
    PerItem(Vec<ItemAnswer>),
    /// `rejected` events were refused, without saying which.
    PartiallyRejected { rejected: u64, message: String },
    /// The body could not be understood: nothing is known to be delivered.
    Unreadable(String),
}

/// A receiver's API. Implementations are pure: no I/O, no clock.
pub(crate) trait Protocol: Send + Sync + 'static {
    /// Events with different routes never share a request (OTLP: one
    /// endpoint per signal; OpenObserve: one stream per request).
    fn route(&self, _ev: &Stored) -> u64 {
        0
    }

    /// The request for these events (never empty, all of one route).
    /// `request` counts requests, for protocols that spread them over
    /// several endpoints.
    fn encode(&self, items: &[Item], request: usize) -> Request;

    /// What a 2xx body says about the `events` events of its request.
    fn parse(&self, content_type: Option<&str>, body: &[u8], events: usize) -> BodyVerdict;

    /// Sends the request for `items` itself and reads its answer, for a
    /// receiver not reached over HTTP (NATS: one publish and one ack per
    /// event). `None`, the default: the runtime's HTTP client sends what
    /// [`Protocol::encode`] builds and [`Protocol::parse`] reads the answer.
    fn exchange<'a>(&'a self, _items: &'a [Item]) -> Option<Exchange<'a>> {
        None
    }

    /// The receiver's explanation in a non-2xx body, shortened for logs and
    /// the quarantine.
    fn error_text(&self, _content_type: Option<&str>, body: &[u8]) -> String {
        short_text(body)
    }
}

/// A request a protocol sends itself ([`Protocol::exchange`]): where it went
/// (for logs), the answer, and the bytes put on the wire.
pub(crate) type Exchange<'a> =
    Pin<Box<dyn Future<Output = (reqwest::Url, Answer, usize)> + Send + 'a>>;

/// A 2xx body read as the JSON answer `T`; `what` names the answer in the
/// verdict when it is not that JSON.
pub(crate) fn json_answer<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, BodyVerdict> {
    serde_json::from_slice(body).map_err(|e| {
        BodyVerdict::Unreadable(format!(
            "{what} is not the JSON expected ({e}): {}",
            short_text(body)
        ))
    })
}

/// At most this much of a receiver's error text is kept.
pub(crate) const MAX_ERROR_TEXT: usize = 2048;

/// A body as text, cut to [`MAX_ERROR_TEXT`] bytes at a character boundary.
pub(crate) fn short_text(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(&body[..body.len().min(MAX_ERROR_TEXT + 4)]);
    truncate(s.trim(), MAX_ERROR_TEXT)
}

pub(crate) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}
