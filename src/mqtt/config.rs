//! The MQTT connection keys: the one list ([`connection_keys!`]) written
//! into each `mqtt` component's raw table (serde's `flatten` and
//! `deny_unknown_fields` do not mix), and their check.

use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::{Connection, Protocol, TlsFiles};
use crate::checking::raw::{one_of_newtype, raw_table};
use crate::checking::units::format_duration;
use crate::checking::Checker;

/// The port of `mqtt://` when the URL names none.
pub const PORT: u16 = 1883;
/// The port of `mqtts://` when the URL names none.
pub const TLS_PORT: u16 = 8883;

pub(super) mod defaults {
    use std::time::Duration;
    pub const KEEP_ALIVE: Duration = Duration::from_secs(30);
    pub const SESSION_EXPIRY: Duration = Duration::from_secs(24 * 3600);
    pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    pub const RECONNECT_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
    pub const RECONNECT_BACKOFF_MAX: Duration = Duration::from_secs(30);
}

one_of_newtype! {
    /// `protocol`.
    RawProtocol(Protocol) {
        "5" => Protocol::V5,
        "3.1.1" => Protocol::V311,
    }
}

raw_table! {
    /// `tls.*`, as written.
    RawMqttTls, "a table with ca_file, client_cert_file and client_key_file" {
        /// PEM CA certificates to trust besides the system's.
        ca_file: String,
        /// PEM certificate chain, leaf first, presented to the broker;
        /// needs `client_key_file`.
        client_cert_file: String,
        /// The PEM private key of `client_cert_file`.
        client_key_file: String,
    }
}

/// Calls `$cb! { { args } keys }` with the connection keys, each as
/// `name: Type,` with its doc (written as `Option<Spanned<Type>>`): the one
/// list the raw tables ([`mqtt_table!`]) and [`ConnectionKeys`] are written
/// from.
macro_rules! connection_keys {
    ($($cb:ident)::+ { $($args:tt)* }) => {
        $($cb)::+! {
            { $($args)* }
            /// `mqtt://host:port` or `mqtts://host:port` (TLS). Required.
            url: String,
            /// `"5"` or `"3.1.1"`. Default `"5"`.
            protocol: $crate::mqtt::RawProtocol,
            /// Default `"holdfast-<host name>-<component name>"`.
            client_id: String,
            /// Default `"30s"`; 1 s to 65535 s.
            keep_alive: $crate::checking::units::Dur,
            /// MQTT 5's Session Expiry Interval. Default `"1d"`; at least 1 s.
            session_expiry: $crate::checking::units::Dur,
            /// Default: absent, no user name.
            username: String,
            /// A file holding the password. Default: absent.
            password_file: String,
            /// Default: absent; with `mqtts://`, the system's CA certificates
            /// and no client certificate.
            tls: $crate::mqtt::RawMqttTls,
            /// Default `"10s"`.
            connect_timeout: $crate::checking::units::Dur,
            /// Default `"500ms"`.
            reconnect_backoff_initial: $crate::checking::units::Dur,
            /// Default `"30s"`; at least `reconnect_backoff_initial`.
            reconnect_backoff_max: $crate::checking::units::Dur,
        }
    };
}

pub(crate) use connection_keys;

/// Declares a component's raw table: its own fields as written (with their
/// `Option<Spanned<…>>` types, `_type` and `inputs` included), then the
/// connection keys; `connection()` borrows the latter for their check.
#[macro_export]
#[doc(hidden)]
macro_rules! mqtt_table {
    ($(#[$meta:meta])* $vis:vis struct $name:ident { $($own:tt)* }) => {
        $crate::mqtt::connection_keys!(
            $crate::mqtt::raw_mqtt_table { $(#[$meta])* $vis $name { $($own)* } }
        );
    };
}

/// [`mqtt_table!`] with the connection keys written out.
#[macro_export]
#[doc(hidden)]
macro_rules! raw_mqtt_table {
    (
        { $(#[$meta:meta])* $vis:vis $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* } }
        $($(#[$kmeta:meta])* $key:ident: $kty:ty,)*
    ) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        $vis struct $name {
            $($(#[$fmeta])* $field: $ty,)*
            $($(#[$kmeta])* $key: Option<toml::Spanned<$kty>>,)*
        }

        impl $name {
            /// The connection keys, borrowed for their check.
            fn connection(&self) -> $crate::mqtt::ConnectionKeys<'_> {
                $crate::mqtt::ConnectionKeys {
                    $($key: self.$key.as_ref(),)*
                }
            }
        }
    };
}

pub(crate) use {mqtt_table, raw_mqtt_table};

/// Writes [`ConnectionKeys`] from [`connection_keys!`].
macro_rules! keys_struct {
    ({} $($(#[$kmeta:meta])* $key:ident: $kty:ty,)*) => {
        /// The connection keys of a raw `mqtt` table, borrowed from it.
        pub(crate) struct ConnectionKeys<'a> {
            $($(#[$kmeta])* pub(crate) $key: Option<&'a Spanned<$kty>>,)*
        }
    };
}

connection_keys!(keys_struct {});

/// A broker URL: host and port, and whether it is TLS; or why it is not one.
pub(super) fn broker_url(s: &str) -> Result<(String, u16, bool), String> {
    let example = "write a URL like \"mqtt://127.0.0.1:1883\" or \"mqtts://broker.example:8883\"";
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL ({e}): {example}"))?;
    let tls = match url.scheme() {
        "mqtt" | "tcp" => false,
        "mqtts" | "ssl" => true,
        other => {
            return Err(format!(
                "{s:?}: the scheme {other:?} is not MQTT: {example} (WebSockets are not supported)"
            ))
        }
    };
    // An IPv6 address comes bracketed, as in the URL; the socket wants it bare.
    let host = url
        .host_str()
        .unwrap_or_default()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    if host.is_empty() {
        return Err(format!("{s:?} names no host: {example}"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{s:?} holds credentials: remove them from the URL and use username and password_file"
        ));
    }
    if !matches!(url.path(), "" | "/") || url.query().is_some() {
        return Err(format!(
            "{s:?}: an MQTT broker URL has no path or query; the topics are set apart"
        ));
    }
    let port = url.port().unwrap_or(if tls { TLS_PORT } else { PORT });
    Ok((host, port, tls))
}

impl ConnectionKeys<'_> {
    /// The keys checked, each problem an error naming its key (`key("url")`
    /// gives `sources.<name>.url`); `component` is the component's name, for
    /// the default client id. `None` when `url` is missing or wrong (the
    /// other keys are still checked).
    pub(crate) fn check(
        &self,
        cx: &mut Checker<'_>,
        key: &dyn Fn(&str) -> String,
        table_span: std::ops::Range<usize>,
        component: &str,
    ) -> Option<Connection> {
        let mut target = None;
        match self.url {
            None => cx.error(
                Some(table_span.clone()),
                &key("url"),
                "an mqtt component needs the broker: set url = \"mqtt://127.0.0.1:1883\"",
            ),
            Some(u) => {
                cx.note(&key("url"), u);
                match broker_url(u.get_ref()) {
                    Ok(t) => target = Some(t),
                    Err(why) => cx.error(Some(u.span()), &key("url"), why),
                }
            }
        }
        let protocol = self.protocol.map(|p| p.get_ref().0).unwrap_or(Protocol::V5);
        let client_id = match self.client_id {
            Some(id) => {
                cx.note(&key("client_id"), id);
                let text = id.get_ref();
                if text.is_empty() || text.len() > 65_535 || text.contains(['+', '#', '\0']) {
                    cx.error(
                        Some(id.span()),
                        &key("client_id"),
                        "a client id is 1 to 65535 bytes without '+', '#' or NUL; remove the key \
                         for the default holdfast-<host name>-<component name>",
                    );
                }
                text.clone()
            }
            None => format!("holdfast-{}-{component}", crate::host::host_name()),
        };
        let keep_alive = cx.duration(
            &key("keep_alive"),
            self.keep_alive,
            defaults::KEEP_ALIVE,
            Some("a dead connection would never be noticed"),
        );
        if keep_alive.as_secs() > u16::MAX as u64 || keep_alive < Duration::from_secs(1) {
            cx.error(
                self.keep_alive.map(|v| v.span()),
                &key("keep_alive"),
                format!(
                    "{} is out of range: MQTT counts keep-alive in whole seconds, 1 s to 65535 s \
                     (default {})",
                    format_duration(keep_alive),
                    format_duration(defaults::KEEP_ALIVE)
                ),
            );
        }
        let session_expiry = cx.duration(
            &key("session_expiry"),
            self.session_expiry,
            defaults::SESSION_EXPIRY,
            Some("the broker would forget the session, and what it queued, at each disconnect"),
        );
        if session_expiry.as_secs() >= u32::MAX as u64 || session_expiry < Duration::from_secs(1) {
            cx.error(
                self.session_expiry.map(|v| v.span()),
                &key("session_expiry"),
                format!(
                    "{} is out of range: 1 s up to about 136 years (default {})",
                    format_duration(session_expiry),
                    format_duration(defaults::SESSION_EXPIRY)
                ),
            );
        }
        if let (Some(v), Protocol::V311) = (self.session_expiry, protocol) {
            cx.warn(
                Some(v.span()),
                &key("session_expiry"),
                "MQTT 3.1.1 has no session expiry: the broker keeps the session until its own \
                 limit (mosquitto: persistent_client_expiration); remove the key or use protocol = \"5\"",
            );
        }
        let username = self.username.map(|u| {
            cx.note(&key("username"), u);
            u.get_ref().clone()
        });
        let password_file = cx.path(&key("password_file"), self.password_file);
        if let (Some(_), None) = (&password_file, &username) {
            cx.error(
                self.password_file.map(|v| v.span()),
                &key("password_file"),
                "a password needs a user name: set username too",
            );
        }
        let mut tls = None;
        if let Some(raw) = self.tls {
            let tkey = |k: &str| key(&format!("tls.{k}"));
            let raw_ref = raw.get_ref();
            let files = TlsFiles {
                ca_file: cx.path(&tkey("ca_file"), raw_ref.ca_file.as_ref()),
                client_cert_file: cx
                    .path(&tkey("client_cert_file"), raw_ref.client_cert_file.as_ref()),
                client_key_file: cx
                    .path(&tkey("client_key_file"), raw_ref.client_key_file.as_ref()),
            };
            for (set, name, other) in [
                (
                    &raw_ref.client_cert_file,
                    "client_cert_file",
                    "client_key_file",
                ),
                (
                    &raw_ref.client_key_file,
                    "client_key_file",
                    "client_cert_file",
                ),
            ] {
                if let (Some(v), true) = (
                    set,
                    files.client_cert_file.is_some() != files.client_key_file.is_some(),
                ) {
                    cx.error(
                        Some(v.span()),
                        &tkey(name),
                        format!("{name} needs {other}: set both, or neither"),
                    );
                }
            }
            if let Some((_, _, false)) = target {
                cx.error(
                    Some(raw.span()),
                    &key("tls"),
                    "tls.* is set but the url is mqtt://: use mqtts:// to connect with TLS",
                );
            }
            tls = Some(files);
        }
        let connect_timeout = cx.duration(
            &key("connect_timeout"),
            self.connect_timeout,
            defaults::CONNECT_TIMEOUT,
            Some("every connect would time out"),
        );
        let reconnect_backoff_initial = cx.duration(
            &key("reconnect_backoff_initial"),
            self.reconnect_backoff_initial,
            defaults::RECONNECT_BACKOFF_INITIAL,
            Some("a broker that refuses would be hammered without pause"),
        );
        let mut reconnect_backoff_max = cx.duration(
            &key("reconnect_backoff_max"),
            self.reconnect_backoff_max,
            defaults::RECONNECT_BACKOFF_MAX.max(reconnect_backoff_initial),
            Some("a broker that refuses would be hammered without pause"),
        );
        if reconnect_backoff_max < reconnect_backoff_initial {
            cx.error(
                self.reconnect_backoff_max.map(|v| v.span()),
                &key("reconnect_backoff_max"),
                format!(
                    "{} is below reconnect_backoff_initial ({}): set it at least as long",
                    format_duration(reconnect_backoff_max),
                    format_duration(reconnect_backoff_initial)
                ),
            );
            reconnect_backoff_max = reconnect_backoff_initial;
        }
        let (host, port, is_tls) = target?;
        Some(Connection {
            url: self.url.map(|u| u.get_ref().clone()).unwrap_or_default(),
            host,
            port,
            tls: if is_tls {
                Some(tls.unwrap_or_default())
            } else {
                None
            },
            protocol,
            client_id,
            keep_alive,
            session_expiry,
            username,
            password_file,
            connect_timeout,
            reconnect_backoff_initial,
            reconnect_backoff_max,
        })
    }
}

/// For [`Connection::describe`]: the password file's path, never its text.
pub(super) fn describe_auth(username: &Option<String>, password_file: &Option<PathBuf>) -> String {
    match (username, password_file) {
        (None, _) => "without a user name".into(),
        (Some(u), None) => format!("as {u:?} without a password"),
        (Some(u), Some(f)) => format!("as {u:?} with the password in {}", f.display()),
    }
}

#[cfg(test)]
mod tests;
