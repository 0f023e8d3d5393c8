//! The `nats` sink: every event published to a NATS JetStream stream, each
//! with its own publish acknowledgement.
//!
//! One message per event, on a subject rendered from the event by a name
//! template (`template.rs`; default `"telemetry.{signal}.{source}"`), with
//! the header `Nats-Msg-Id` = the event id, so that the server drops a resend
//! within the stream's duplicate window. Each ack names the stream that
//! stored the message; one that is not the configured stream is an error
//! (held, loud) rather than a silent delivery elsewhere — checked here, not
//! by a `Nats-Expected-Stream` header the server would look for in every
//! message. The payload is either one
//! OTLP `Export*ServiceRequest` per event (protobuf, what OpenTelemetry's own
//! decoders read) or the JSON document the `elasticsearch` sink writes.
//!
//! The shared sink runtime batches, retries, quarantines and commits; this
//! sink is its own `Transport` (`delivery/transport.rs`), with no HTTP
//! client: a batch is published as many messages in flight at once, then
//! each PubAck is awaited and judged on its own (`classify.rs`). The
//! cursor moves only past events whose ack arrived (`duplicate: true`
//! counts as delivered, and as a duplicate in the metrics) or that are
//! quarantined.
//!
//! | file | concept |
//! |------|---------|
//! | `config.rs` | the table as written, its check and its lines in `holdfast check` |
//! | `connect.rs` | the connection: servers, credentials from files, TLS, reconnects with backoff, what the server last refused; creating the stream; the probe of `check` |
//! | `publish.rs` | one batch published: payloads, headers, the acks |
//! | `classify.rs` | what each ack or error means: delivered, duplicate, retry, hold (slow, loud), quarantine |

mod classify;
mod config;
mod connect;
mod publish;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::credentials::TlsFiles;
use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{Answer, Sent, Transport};
use super::document::Layout;
use super::template::Template;

/// What a `nats` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct NatsOptions {
    /// The delivery options (batching, retries, quarantine);
    /// `request_timeout` bounds the wait for each ack.
    pub common: DeliveryOptions,
    /// `tls.*`: the CA certificates to trust and the client certificate.
    pub tls: TlsFiles,
    /// Server URLs (`nats://host:4222`, `tls://host:4222`), tried in turn
    /// and on every reconnect.
    pub servers: Vec<String>,
    /// The JetStream stream the subjects must be bound to.
    pub stream: String,
    /// The subject of each event.
    pub subject: Template,
    pub encoding: NatsEncoding,
    /// What each JSON document repeats (`encoding = "json"`).
    pub document: Layout,
    pub credentials: Option<NatsCredentials>,
    /// Create the stream when it is missing (off by default).
    pub create_stream: Option<StreamSpec>,
}

/// The default subject template.
pub const DEFAULT_SUBJECT: &str = "telemetry.{signal}.{source}";

/// What each message carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatsEncoding {
    /// One OTLP `Export{Logs,Trace,Metrics}ServiceRequest` per event,
    /// protobuf.
    Otlp,
    /// The `elasticsearch` sink's JSON document.
    Json,
}

/// How the sink proves who it is; every secret is read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NatsCredentials {
    /// `auth.user` + `auth.password_file`.
    UserPassword {
        user: String,
        password_file: PathBuf,
    },
    /// `auth.bearer_token_file`: a NATS token.
    Token { token_file: PathBuf },
    /// `nkey_seed_file`: an NKey seed (`SU…`).
    NKey { seed_file: PathBuf },
    /// `credentials_file`: a `.creds` file (user JWT and NKey seed).
    Creds { file: PathBuf },
}

/// The stream `create_stream` makes when it is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamSpec {
    pub subjects: Vec<String>,
    pub replicas: usize,
    pub duplicate_window: Duration,
    /// `None`: unlimited.
    pub max_bytes: Option<u64>,
}

/// The protocol object of one run: the settings and the connection, made
/// at the first batch.
pub(crate) struct Nats {
    link: Arc<connect::Link>,
    publisher: publish::Publisher,
}

impl Nats {
    pub fn new(opts: &NatsOptions) -> Nats {
        let link = Arc::new(connect::Link::new(opts));
        Nats {
            publisher: publish::Publisher::new(opts, link.clone()),
            link,
        }
    }
}

impl Transport for Nats {
    /// The events themselves: each is encoded as it is published.
    type Request<'a> = &'a [Item];
    /// The acks, already judged: nothing is left to read after the clock.
    type Reply = Answer;

    fn prepare<'a>(&'a self, items: &'a [Item], _request: usize) -> &'a [Item] {
        items
    }

    async fn send<'a>(&'a self, items: &'a [Item]) -> Sent<Answer> {
        let (reply, wire) = self.publisher.publish(items).await;
        Sent {
            target: self.link.url(),
            reply,
            wire,
        }
    }

    fn judge(&self, reply: Answer, _events: usize) -> Answer {
        reply
    }
}
