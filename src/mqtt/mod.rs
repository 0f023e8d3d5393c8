//! The MQTT connection the `mqtt` source and the `mqtt` sink share: the
//! keys that say which broker, how to authenticate and how long a session
//! lives (written into each component's table by [`connection_keys!`],
//! checked once by [`ConnectionKeys::check`]), and the client options a new
//! rumqttc event loop starts from ([`Connection::options_v5`],
//! [`Connection::options_v311`]).
//!
//! Files are read at each connect, not at start: a rotated client
//! certificate or a changed password file takes effect at the next
//! reconnect, and a file that cannot be read fails that connect (the
//! component logs it and tries again with its backoff) instead of the
//! agent's start.
//!
//! Sessions are persistent on both protocols: MQTT 3.1.1 connects with
//! `clean_session = false`, MQTT 5 with `clean_start = false` and a Session
//! Expiry Interval, so that the broker keeps a subscriber's queue (and a
//! publisher's unacknowledged packets) while holdfast restarts. What the
//! session carries is each component's business: the source acknowledges
//! what is durable, the sink resends what was not acknowledged.

mod config;
mod session;

pub(crate) use config::{
    connection_keys, mqtt_table, raw_mqtt_table, ConnectionKeys, RawMqttTls, RawProtocol,
};
pub use session::ConnectError;

use std::path::PathBuf;
use std::time::Duration;

/// The MQTT protocol version spoken to the broker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    V311,
    V5,
}

impl Protocol {
    /// As written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V311 => "3.1.1",
            Protocol::V5 => "5",
        }
    }
}

/// TLS to the broker: CA certificates besides the system's, and a client
/// certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    pub ca_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
}

/// A checked MQTT connection: which broker, as whom, for how long a
/// session lives, and how reconnects back off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    /// The `url` as written (for messages).
    pub url: String,
    pub host: String,
    pub port: u16,
    /// `Some` for `mqtts://`.
    pub tls: Option<TlsFiles>,
    pub protocol: Protocol,
    pub client_id: String,
    pub keep_alive: Duration,
    /// MQTT 5's Session Expiry Interval (3.1.1 sessions do not expire).
    pub session_expiry: Duration,
    pub username: Option<String>,
    /// Read at each connect; one trailing newline is not part of it.
    pub password_file: Option<PathBuf>,
    pub connect_timeout: Duration,
    /// The first wait before a reconnect, doubled per failure up to
    /// `reconnect_backoff_max` (full jitter is the component's choice).
    pub reconnect_backoff_initial: Duration,
    pub reconnect_backoff_max: Duration,
}

impl Connection {
    /// The reconnect backoff, at its first wait.
    pub fn backoff(&self) -> crate::backoff::Backoff {
        crate::backoff::Backoff::new(self.reconnect_backoff_initial, self.reconnect_backoff_max)
    }

    /// The files this connection reads at each connect, with their keys,
    /// for the machine checks (`holdfast check --machine`).
    pub fn files(&self) -> Vec<(&'static str, &PathBuf)> {
        let mut files = Vec::new();
        if let Some(p) = &self.password_file {
            files.push(("password_file", p));
        }
        if let Some(tls) = &self.tls {
            for (key, p) in [
                ("tls.ca_file", &tls.ca_file),
                ("tls.client_cert_file", &tls.client_cert_file),
                ("tls.client_key_file", &tls.client_key_file),
            ] {
                if let Some(p) = p {
                    files.push((key, p));
                }
            }
        }
        files
    }
}
