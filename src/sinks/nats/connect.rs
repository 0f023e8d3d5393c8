//! The connection of a `nats` sink: made at the first batch and kept for
//! the run, with the client's own reconnects (forever, waiting by the
//! sink's backoff with full jitter) to any of the servers, and the servers
//! a cluster announces.
//!
//! Secrets come from files. A token or a password is read again at every
//! connection attempt, so an operator who fixes the file needs no restart;
//! an NKey seed or a `.creds` file is read when the connection is made.
//! What the servers last refused (an authorization violation) is kept, so
//! that a batch that cannot go says why: refused credentials hold the data
//! and retry slowly, loudly, like a 401.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::Context as _;
use async_nats::jetstream::{self, stream};
use async_nats::{Auth, AuthError, ClientError, ConnectOptions, Event, ServerError};
use tokio::sync::OnceCell;
use tracing::{info, warn};

use super::{NatsCredentials, NatsOptions, StreamSpec};
use crate::sinks::credentials::read_secret;
use crate::sinks::credentials::ClientCert;

/// A live connection and its JetStream context.
pub(super) struct Conn {
    pub client: async_nats::Client,
    pub js: jetstream::Context,
}

/// What the sink knows about its servers: settings, the connection once
/// made, and the last refusal.
pub(super) struct Link {
    servers: Vec<String>,
    pub stream: String,
    credentials: Option<NatsCredentials>,
    ca_file: Option<std::path::PathBuf>,
    client_cert: Option<ClientCert>,
    /// The wait for an ack, and for JetStream API answers.
    pub ack_timeout: Duration,
    /// The most publishes awaiting their ack: every batch in flight (and
    /// the runtime's probe) whole.
    max_in_flight: usize,
    backoff: (Duration, Duration),
    create: Option<StreamSpec>,
    conn: OnceCell<Conn>,
    /// The servers' last refusal of the credentials; cleared on connect.
    refused: Arc<Mutex<Option<String>>>,
    url: reqwest::Url,
}

/// Where the stream stands, as far as a batch that found no stream can
/// tell.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum StreamState {
    /// The stream exists and captures the subject: the missing answer was
    /// an election or a restart, worth a plain retry.
    Bound,
    /// Configuration: no such stream (and `create_stream` is off, or could
    /// not make it).
    Missing(String),
    /// Configuration: the stream exists but does not capture the subject.
    Unbound(String),
    /// The question itself went unanswered: treat as transient.
    Unknown(String),
}

impl Link {
    pub fn new(o: &NatsOptions) -> Link {
        let url = o
            .servers
            .first()
            .and_then(|s| reqwest::Url::parse(s).ok())
            .or_else(|| reqwest::Url::parse("nats://127.0.0.1:4222").ok())
            .unwrap_or_else(|| unreachable!("a literal URL parses"));
        Link {
            servers: o.servers.clone(),
            stream: o.stream.clone(),
            credentials: o.credentials.clone(),
            ca_file: o.tls.ca_file.clone(),
            client_cert: o.tls.client_cert.clone(),
            ack_timeout: o.common.request_timeout,
            max_in_flight: (o.common.concurrency + 1) * o.common.batch_max_events,
            backoff: (o.common.backoff_initial, o.common.backoff_max),
            create: o.create_stream.clone(),
            conn: OnceCell::new(),
            refused: Arc::default(),
            url,
        }
    }

    /// The first server, for logs.
    pub fn url(&self) -> reqwest::Url {
        self.url.clone()
    }

    /// The connection, made on first use. Its client reconnects by itself;
    /// an error here (an unreadable `.creds` file, a bad URL) is retried
    /// with the next batch.
    pub async fn conn(&self) -> Result<&Conn, String> {
        self.conn
            .get_or_try_init(|| async {
                let client = self
                    .options(true)
                    .await
                    .map_err(|e| format!("{e:#}"))?
                    .connect(self.servers.clone())
                    .await
                    .map_err(|e| format!("connecting to {}: {e}", self.servers.join(", ")))?;
                // Every event of every batch in flight may wait for its ack
                // at once: a batch takes its permits one publish at a time
                // and gives them back only when its acks come, so fewer
                // permits than that could leave every batch waiting for
                // the others' (the client's default is 5,000).
                let js = jetstream::ContextBuilder::new()
                    .timeout(self.ack_timeout)
                    .max_ack_inflight(self.max_in_flight)
                    .build(client.clone());
                Ok(Conn { client, js })
            })
            .await
    }

    /// Why the servers refused the sink, if they did since the last
    /// connection.
    pub fn refused(&self) -> Option<String> {
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// The client options: credentials, TLS, reconnects, events. `keep`
    /// makes the first connection wait in the background (the daemon);
    /// without it a failure is returned at once (`check`).
    async fn options(&self, keep: bool) -> anyhow::Result<ConnectOptions> {
        let mut o = match &self.credentials {
            Some(NatsCredentials::Token { token_file }) => {
                let file = token_file.clone();
                ConnectOptions::with_auth_callback(move |_nonce| {
                    let file = file.clone();
                    async move {
                        let token = read_secret(&file, "token")
                            .map_err(|e| AuthError::new(format!("{e:#}")))?;
                        let mut a = Auth::new();
                        a.token = Some(token);
                        Ok(a)
                    }
                })
            }
            Some(NatsCredentials::UserPassword {
                user,
                password_file,
            }) => {
                let (user, file) = (user.clone(), password_file.clone());
                ConnectOptions::with_auth_callback(move |_nonce| {
                    let (user, file) = (user.clone(), file.clone());
                    async move {
                        let password = read_secret(&file, "password")
                            .map_err(|e| AuthError::new(format!("{e:#}")))?;
                        let mut a = Auth::new();
                        a.username = Some(user);
                        a.password = Some(password);
                        Ok(a)
                    }
                })
            }
            Some(NatsCredentials::NKey { seed_file }) => {
                ConnectOptions::new().nkey(read_secret(seed_file, "NKey seed")?)
            }
            Some(NatsCredentials::Creds { file }) => ConnectOptions::new()
                .credentials_file(file)
                .await
                .with_context(|| format!("reading the credentials file {}", file.display()))?,
            None => ConnectOptions::new(),
        };
        if let Some(ca) = &self.ca_file {
            o = o.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some(c) = &self.client_cert {
            o = o
                .add_client_certificate(c.cert_file.clone(), c.key_file.clone())
                .require_tls(true);
        }
        let (initial, max) = self.backoff;
        o = o
            .name(concat!("holdfast/", env!("CARGO_PKG_VERSION")))
            .connection_timeout(self.ack_timeout.min(Duration::from_secs(10)))
            .request_timeout(Some(self.ack_timeout))
            .reconnect_delay_callback(move |attempts| {
                // Full jitter under the sink's exponential ceiling; the
                // first attempt after a drop goes at once.
                if attempts <= 1 {
                    return Duration::ZERO;
                }
                let shift = (attempts - 1).min(30) as u32;
                let ceiling = initial.saturating_mul(1u32 << shift).min(max);
                ceiling.mul_f64(rand::random::<f64>())
            });
        if keep {
            let refused = self.refused.clone();
            let servers = self.servers.join(", ");
            o = o
                .retry_on_initial_connect()
                .max_reconnects(None)
                .event_callback(move |ev| {
                    let refused = refused.clone();
                    let servers = servers.clone();
                    async move { on_event(ev, &refused, &servers) }
                });
        }
        Ok(o)
    }

    /// Where the stream stands, after a publish found no stream for its
    /// subject. Creates it when `create_stream` is set.
    pub async fn stream_state(&self, conn: &Conn, subject: &str) -> StreamState {
        match conn.js.get_stream(&self.stream).await {
            Ok(mut s) => match s.info().await {
                Ok(info) => {
                    if info
                        .config
                        .subjects
                        .iter()
                        .any(|p| subject_matches(p, subject))
                    {
                        StreamState::Bound
                    } else {
                        StreamState::Unbound(format!(
                            "the stream {} does not capture the subject {subject} (its subjects: \
                             {}): add it to the stream's subjects, or change the sink's subject",
                            self.stream,
                            info.config.subjects.join(", ")
                        ))
                    }
                }
                Err(e) => StreamState::Unknown(e.to_string()),
            },
            Err(e) if is_not_found(&e) => match &self.create {
                Some(spec) => match self.create_stream(conn, spec).await {
                    Ok(()) => StreamState::Bound,
                    Err(e) => StreamState::Missing(format!(
                        "the stream {} is missing and could not be created: {e}",
                        self.stream
                    )),
                },
                None => StreamState::Missing(format!(
                    "the stream {} does not exist: create it (nats stream add) or set \
                     create_stream",
                    self.stream
                )),
            },
            Err(e) => StreamState::Unknown(e.to_string()),
        }
    }

    async fn create_stream(&self, conn: &Conn, spec: &StreamSpec) -> anyhow::Result<()> {
        conn.js
            .get_or_create_stream(stream_config(&self.stream, spec))
            .await
            .with_context(|| format!("creating the stream {}", self.stream))?;
        info!(stream = %self.stream, replicas = spec.replicas, subjects = ?spec.subjects,
            "created the JetStream stream (create_stream)");
        Ok(())
    }
}

/// The stream `create_stream` asks for.
pub(super) fn stream_config(name: &str, spec: &StreamSpec) -> stream::Config {
    stream::Config {
        name: name.to_string(),
        subjects: spec.subjects.clone(),
        num_replicas: spec.replicas,
        duplicate_window: spec.duplicate_window,
        max_bytes: spec
            .max_bytes
            .and_then(|b| i64::try_from(b).ok())
            .unwrap_or(-1),
        storage: stream::StorageType::File,
        ..Default::default()
    }
}

fn is_not_found(e: &jetstream::context::GetStreamError) -> bool {
    match e.kind() {
        jetstream::context::GetStreamErrorKind::JetStream(j) => {
            j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND
        }
        _ => false,
    }
}

fn on_event(ev: Event, refused: &Mutex<Option<String>>, servers: &str) {
    let set = |v: Option<String>| *refused.lock().unwrap_or_else(PoisonError::into_inner) = v;
    match ev {
        Event::Connected => {
            set(None);
            info!(servers, "connected to NATS");
        }
        Event::Disconnected => warn!(servers, "disconnected from NATS; reconnecting"),
        Event::ServerError(ServerError::AuthorizationViolation) => {
            set(Some("authorization violation".into()))
        }
        Event::ClientError(ClientError::Other(e))
            if e.contains("authorization") || e.contains("signing nonce") =>
        {
            set(Some(e))
        }
        Event::ClientError(e) => warn!(servers, error = %e, "NATS connection"),
        other => info!(servers, event = %other, "NATS connection"),
    }
}

/// Whether the subject filter `pattern` (`*` one token, `>` the rest)
/// matches `subject`.
pub(super) fn subject_matches(pattern: &str, subject: &str) -> bool {
    let mut s = subject.split('.');
    for p in pattern.split('.') {
        match (p, s.next()) {
            (">", Some(_)) => return true,
            ("*", Some(_)) => {}
            (p, Some(t)) if p == t => {}
            _ => return false,
        }
    }
    s.next().is_none()
}

/// `holdfast check`'s probe: the servers answer, accept the credentials,
/// and hold the stream. Runs on its own thread and runtime; `None` when
/// everything is in place, else (is it an error, message).
pub(super) fn probe(o: &NatsOptions) -> Option<(bool, String)> {
    let link = Link::new(o);
    let run = move || -> Option<(bool, String)> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        rt.block_on(async {
            let opts = match link.options(false).await {
                Ok(o) => o,
                Err(e) => return Some((true, format!("{e:#}"))),
            };
            let connect = opts.connect(link.servers.clone());
            let client = match tokio::time::timeout(Duration::from_secs(5), connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    let refused = matches!(
                        e.kind(),
                        async_nats::ConnectErrorKind::AuthorizationViolation
                            | async_nats::ConnectErrorKind::Authentication
                    );
                    return Some((
                        refused,
                        format!("cannot connect to {}: {e}", link.servers.join(", ")),
                    ));
                }
                Err(_) => {
                    return Some((
                        false,
                        format!("no answer from {} within 5s", link.servers.join(", ")),
                    ))
                }
            };
            let mut js = jetstream::new(client);
            js.set_timeout(Duration::from_secs(5));
            match js.get_stream(&link.stream).await {
                Ok(_) => None,
                Err(e) if is_not_found(&e) && link.create.is_some() => Some((
                    false,
                    format!(
                        "the stream {} does not exist yet; create_stream will create it",
                        link.stream
                    ),
                )),
                Err(e) if is_not_found(&e) => Some((
                    true,
                    format!(
                        "the stream {} does not exist: create it (nats stream add) or set \
                         create_stream",
                        link.stream
                    ),
                )),
                Err(e) => Some((
                    false,
                    format!("cannot look up the stream {}: {e}", link.stream),
                )),
            }
        })
    };
    std::thread::spawn(run).join().ok().flatten()
}

#[cfg(test)]
mod tests {
    use super::subject_matches;

    #[test]
    fn subject_filters_match_like_the_server() {
        assert!(subject_matches("telemetry.>", "telemetry.logs.app"));
        assert!(subject_matches("telemetry.*.app", "telemetry.logs.app"));
        assert!(!subject_matches("telemetry.*", "telemetry.logs.app"));
        assert!(!subject_matches("telemetry.>", "telemetry"));
        assert!(subject_matches("a.b", "a.b"));
        assert!(!subject_matches("a.b", "a.b.c"));
    }
}
