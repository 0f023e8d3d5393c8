//! The seam between the shared delivery runtime and one sink's way of
//! reaching its receiver. A sink brings a [`Transport`]: it builds a
//! request from events, sends it, and says what came back as an
//! [`Answer`] in the runtime's terms. Everything else (batching, retries,
//! backoff, the adaptive limit, quarantine, commits) is the runtime's and
//! the same for every sink.
//!
//! A request is three steps so that the runtime's clock (the latency the
//! adaptive limit follows) times only the exchange with the receiver:
//! [`Transport::prepare`] before it (an HTTP body is encoded there),
//! [`Transport::send`] under it, [`Transport::judge`] after it (an HTTP
//! answer's body is read there). What a request is, what comes back, and
//! how they are sent belong to the transport: one HTTP transport serves
//! every HTTP receiver API (`sinks/http/`); NATS publishes a message per
//! event and awaits each ack itself.

use std::future::Future;
use std::time::Duration;

use super::item::Item;
use crate::event::Stored;

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

/// How a request failed without a response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TransportKind {
    /// Could not connect (refused, unreachable, DNS, TLS handshake).
    Connect,
    /// No complete answer within `request_timeout`.
    Timeout,
    /// The connection broke while sending or before the answer (reset):
    /// the receiver may have accepted the events.
    Connection,
}

impl TransportKind {
    pub fn reason(self) -> &'static str {
        match self {
            TransportKind::Connect => "connect",
            TransportKind::Timeout => "timeout",
            TransportKind::Connection => "connection",
        }
    }
}

/// What came back for one request, in the runtime's terms: the retry
/// policy ([`super::retry`]) decides from it what becomes of each event.
#[derive(Debug)]
pub(crate) enum Answer {
    /// No answer: could not connect, timed out, or the connection broke.
    Transport {
        kind: TransportKind,
        message: String,
    },
    /// The receiver refused the request as a whole, with a status outside
    /// 2xx (HTTP's numbers; other transports map their refusals onto them,
    /// e.g. refused credentials as 401) and its explanation, shortened
    /// ([`short_text`]).
    Refused {
        status: u16,
        retry_after: Option<Duration>,
        error: String,
    },
    /// The receiver answered for the events of the request (a 2xx status).
    Read { status: u16, verdict: BodyVerdict },
    /// A 2xx whose answer was longer than `limit` bytes: not read, so not
    /// known to say the events were stored.
    TooLarge { status: u16, limit: usize },
    /// The receiver refused the request because some of its events can
    /// never be stored (`reason`: remote write's samples too old), without
    /// saying which: the request is halved until each is alone.
    SomeRefused {
        status: u16,
        reason: &'static str,
        error: String,
        /// Send the newer half first: the receiver refuses by a time
        /// cutoff and accepts late samples, so what the newer half teaches
        /// ([`Transport::learn_refusal`]) settles the older half unsent.
        newer_first: bool,
    },
}

/// A refusal for good, as a transport knows it: the rejection's kind
/// (`too_old`), the receiver's status and words.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Refusal {
    pub kind: &'static str,
    pub status: u16,
    pub error: String,
}

/// A request that went out: where to (for logs), the bytes put on the
/// wire, and what came back, not yet judged.
pub(crate) struct Sent<R> {
    pub target: reqwest::Url,
    pub reply: R,
    pub wire: usize,
}

/// How one sink reaches its receiver. `prepare` and `judge` are pure (no
/// I/O, no clock); `send` is the exchange.
pub(crate) trait Transport: Send + Sync + 'static {
    /// A request ready to go; it may borrow the events (a transport that
    /// encodes each event as it sends it).
    type Request<'a>: Send
    where
        Self: 'a;
    /// What came back, before it is judged.
    type Reply: Send;

    /// Events with different routes never share a request (OTLP: one
    /// endpoint per signal; OpenObserve: one stream per request).
    fn route(&self, _ev: &Stored) -> u64 {
        0
    }

    /// Why `ev` can never be sent this way (a log record to a
    /// metrics-only receiver), or `None`: such an event is finished
    /// unsent and counted dropped under this reason.
    fn unsendable(&self, _ev: &Stored) -> Option<&'static str> {
        None
    }

    /// A refusal the receiver is known to give `ev` (a remote write sample
    /// no newer than one it refused as too old), or `None`: such an event
    /// is quarantined without being sent.
    fn foreknown(&self, _ev: &Stored) -> Option<Refusal> {
        None
    }

    /// Whether the transport reads gauge and sum points in place
    /// ([`Stored::metric_points`]) rather than from a decoded record: the
    /// delivery task then leaves such records undecoded
    /// ([`crate::event::Decoder::decode_lean`]; `Stored::record` is `None`
    /// for them), sparing what decoding them allocates.
    fn reads_points_in_place(&self) -> bool {
        false
    }

    /// Whether the receiver needs each series' events in time order
    /// (remote write without an out-of-order window): pushback (429) then
    /// holds every batch like an outage, so that no newer event overtakes
    /// those waiting for the receiver's `Retry-After`.
    fn in_order(&self) -> bool {
        false
    }

    /// Whether batches must reach [`Transport::prepare`] in the order the
    /// runtime formed them, although several are in flight (MQTT: each
    /// topic's messages are published in log order); the transport keeps
    /// that order from `prepare` to the wire.
    fn starts_in_order(&self) -> bool {
        false
    }

    /// The receiver refused `items` with [`Answer::SomeRefused`]: what the
    /// transport may learn from it for [`Transport::foreknown`].
    fn learn_refusal(&self, _items: &[Item], _refusal: &Refusal) {}

    /// The request for `items` (never empty, all of one route). `request`
    /// counts requests, for transports that spread them over endpoints.
    fn prepare<'a>(&'a self, items: &'a [Item], request: usize) -> Self::Request<'a>;

    /// Sends the request and waits for what comes back, bounded by the
    /// sink's `request_timeout`.
    fn send<'a>(
        &'a self,
        request: Self::Request<'a>,
    ) -> impl Future<Output = Sent<Self::Reply>> + Send + 'a;

    /// What the reply says about the `events` events of its request.
    fn judge(&self, reply: Self::Reply, events: usize) -> Answer;
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
