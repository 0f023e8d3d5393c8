//! What one receiver API gives the shared HTTP transport: how a request
//! is built from events, and what a 2xx body says about each of them.
//! Compression, credentials, headers, timeouts and the bound on answers
//! are the transport's (`client.rs`) and the same for every API.

use crate::event::Stored;
use crate::sinks::delivery::item::Item;
use crate::sinks::delivery::transport::{short_text, BodyVerdict, Refusal};

/// An HTTP request body ready to send (before compression).
#[derive(Debug)]
pub(crate) struct Request {
    pub url: reqwest::Url,
    pub content_type: &'static str,
    /// Headers the API sends with every request besides the content type
    /// (remote write: its `Content-Encoding` and protocol version).
    pub headers: &'static [(&'static str, &'static str)],
    pub body: Vec<u8>,
}

/// A receiver's HTTP API (`otlp_http`, `elasticsearch`, `openobserve`).
/// Implementations are pure: no I/O, no clock.
pub(crate) trait HttpApi: Send + Sync + 'static {
    /// Events with different routes never share a request (OTLP: one
    /// endpoint per signal; OpenObserve: one stream per request).
    fn route(&self, _ev: &Stored) -> u64 {
        0
    }

    /// Why this API can never send `ev` (a log record to a metrics-only
    /// receiver), or `None`. Such an event is finished unsent and counted
    /// in `holdfast_dropped_events_total` under this reason.
    fn unsendable(&self, _ev: &Stored) -> Option<&'static str> {
        None
    }

    /// A refusal (status and error text) saying that some events of the
    /// request can never be stored, without saying which (remote write's
    /// "out of bounds"): the reason they are rejected under, and whether
    /// the newer half goes first. The request is then halved until each
    /// such event is alone.
    fn refused_events(&self, _status: u16, _error: &str) -> Option<(&'static str, bool)> {
        None
    }

    /// See [`Transport::foreknown`].
    fn foreknown(&self, _ev: &Stored) -> Option<Refusal> {
        None
    }

    /// See [`Transport::reads_points_in_place`].
    fn reads_points_in_place(&self) -> bool {
        false
    }

    /// See [`Transport::in_order`].
    fn in_order(&self) -> bool {
        false
    }

    /// See [`Transport::learn_refusal`].
    fn learn_refusal(&self, _items: &[Item], _refusal: &Refusal) {}

    /// The request for these events (never empty, all of one route).
    /// `request` counts requests, for APIs that spread them over several
    /// endpoints.
    fn encode(&self, items: &[Item], request: usize) -> Request;

    /// What a 2xx body says about the `events` events of its request.
    fn parse(&self, content_type: Option<&str>, body: &[u8], events: usize) -> BodyVerdict;

    /// The receiver's explanation in a non-2xx body, shortened for logs and
    /// the quarantine.
    fn error_text(&self, _content_type: Option<&str>, body: &[u8]) -> String {
        short_text(body)
    }
}

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
