//! `[sinks.<name>]` with `type = "nats"`: the table as written (the shared
//! network keys written in by [`network_sink!`]), its check, its lines in
//! `holdfast check`, and the machine check that probes the stream.

use std::fmt::{self, Write};
use std::time::Duration;

use toml::Spanned;

use super::DEFAULT_SUBJECT;
use super::{connect, Nats, NatsCredentials, NatsEncoding, NatsOptions, StreamSpec};
use crate::checking::raw::one_of_newtype;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, Severity};
use crate::sinks::document::{check_layout, Layout, RawLayout};
use crate::sinks::http::{Auth, Compression};
use crate::sinks::network_config::{
    check_template, is_loopback, network_sink, network_sink_types, NameRule, NetworkSink, Place,
    RawNetworkSink, TransportKeys,
};

one_of_newtype! {
    /// `encoding` of a `nats` sink.
    RawNatsEncoding(NatsEncoding) {
        "otlp" => NatsEncoding::Otlp,
        "json" => NatsEncoding::Json,
    }
}

/// `create_stream.*`, as written.
#[derive(Debug, serde::Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with subjects, replicas, duplicate_window and max_bytes"
)]
pub(crate) struct RawCreateStream {
    /// Default: the subject template's literal start, then `>`
    /// (`["telemetry.>"]`).
    subjects: Option<Spanned<Vec<Spanned<String>>>>,
    /// Default 1; 1 to 5.
    replicas: Option<Spanned<Count>>,
    /// Default `"2m"`: resends within it are dropped by the server.
    duplicate_window: Option<Spanned<Dur>>,
    /// Default: unlimited.
    max_bytes: Option<Spanned<Size>>,
}

network_sink! {
    /// `[sinks.<name>]` with `type = "nats"`, as written.
    RawNatsSink {
        /// Server URLs (`nats://host:4222`, `tls://host:4222`). Required.
        servers: Option<Spanned<Vec<Spanned<String>>>>,
        /// The JetStream stream that captures the subjects. Required.
        stream: Option<Spanned<String>>,
        /// Subject template. Default `"telemetry.{signal}.{source}"`.
        subject: Option<Spanned<String>>,
        /// `"otlp"` (protobuf) or `"json"`. Default `"otlp"`.
        encoding: Option<Spanned<RawNatsEncoding>>,
        /// With `encoding = "json"`: `"lean"` (default) or `"full"`.
        document: Option<Spanned<RawLayout>>,
        /// A file holding an NKey seed.
        nkey_seed_file: Option<Spanned<String>>,
        /// A `.creds` file (user JWT and NKey seed).
        credentials_file: Option<Spanned<String>>,
        /// Default: absent, the stream must exist.
        create_stream: Option<Spanned<RawCreateStream>>,
    }
}

/// What a subject may hold: no wildcards, no spaces.
const SUBJECT: NameRule = NameRule {
    what: "subject",
    default: DEFAULT_SUBJECT,
    allowed: |c| !(c.is_whitespace() || c == '*' || c == '>'),
    rule: "a NATS subject to publish on has no spaces and no wildcards (* or >)",
};

impl RawNatsSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> NatsOptions {
        let key = |k: &str| p.key(k);
        for (set, k, why) in [
            (
                self.compression.is_some(),
                "compression",
                "messages go uncompressed",
            ),
            (
                self.headers.is_some(),
                "headers",
                "messages carry only holdfast's headers",
            ),
            (
                self.headers_file.is_some(),
                "headers_file",
                "messages carry only holdfast's headers",
            ),
        ] {
            if set {
                let span = cx.span_of(&[&p.t.key, k]);
                cx.error(
                    span,
                    &key(k),
                    format!("not used by a nats sink ({why}): remove it"),
                );
            }
        }
        // Compression and headers were refused above; the rest of the
        // HTTP transport's keys is what a NATS connection uses too.
        let (common, transport) = self.common().check(cx, p, false, &[]);
        let tls = transport.tls;
        let servers = check_servers(cx, p, self.servers.as_ref());
        let stream = match &self.stream {
            Some(s) => {
                cx.note(&key("stream"), s);
                let name = s.get_ref().trim();
                if name.is_empty() || name.contains(['.', '*', '>', ' ', '/', '\\']) {
                    cx.error(
                        Some(s.span()),
                        &key("stream"),
                        format!(
                            "\"{name}\" is not a stream name: JetStream stream names are not \
                             empty and have no . * > / \\ or spaces"
                        ),
                    );
                }
                name.to_string()
            }
            None => {
                cx.error(
                    Some(p.t.span()),
                    &p.t.key,
                    "missing `stream`: the JetStream stream that captures the subjects, like \
                     stream = \"TELEMETRY\"",
                );
                String::new()
            }
        };
        let subject = check_template(cx, &key("subject"), self.subject.as_ref(), &SUBJECT);
        let encoding = self.encoding.as_ref().map_or(NatsEncoding::Otlp, |e| {
            cx.note(&key("encoding"), e);
            e.get_ref().0
        });
        let document = check_layout(cx, &key("document"), self.document.as_ref());
        if let (Some(d), NatsEncoding::Otlp) = (&self.document, encoding) {
            cx.error(
                Some(d.span()),
                &key("document"),
                "document shapes the JSON documents, and with encoding = \"otlp\" (the \
                 default) the sink publishes protobuf: remove document or set encoding = \"json\"",
            );
        }
        let credentials = self.credentials(cx, p, transport.auth);
        if credentials.is_some() && tls.ca_file.is_none() && tls.client_cert.is_none() {
            if let Some(s) = servers
                .iter()
                .find(|s| s.starts_with("nats://") && !loopback(s))
            {
                let span = self.servers.as_ref().map(|v| v.span());
                cx.warn(
                    span,
                    &key("servers"),
                    format!(
                        "credentials may travel to {s} in clear text: use a tls:// URL or set \
                         tls.ca_file"
                    ),
                );
            }
        }
        let create_stream = self
            .create_stream
            .as_ref()
            .map(|c| check_create(cx, p, c, subject.as_str()));
        NatsOptions {
            common,
            tls,
            servers,
            stream,
            subject,
            encoding,
            document,
            credentials,
            create_stream,
        }
    }

    /// One kind of credentials: `auth` (user + password, or a token),
    /// `nkey_seed_file` or `credentials_file`.
    fn credentials(
        &self,
        cx: &mut Checker<'_>,
        p: &Place<'_, '_>,
        auth: Option<Auth>,
    ) -> Option<NatsCredentials> {
        let nkey = cx.path(&p.key("nkey_seed_file"), self.nkey_seed_file.as_ref());
        let creds = cx.path(&p.key("credentials_file"), self.credentials_file.as_ref());
        let kinds = [auth.is_some(), nkey.is_some(), creds.is_some()];
        if kinds.iter().filter(|&&k| k).count() > 1 {
            cx.error(
                Some(p.t.span()),
                &p.t.key,
                "more than one kind of credentials is set: choose one of auth (user + \
                 password_file, or bearer_token_file for a NATS token), nkey_seed_file, or \
                 credentials_file",
            );
        }
        match (auth, nkey, creds) {
            (
                Some(Auth::Basic {
                    user,
                    password_file,
                }),
                ..,
            ) => Some(NatsCredentials::UserPassword {
                user,
                password_file,
            }),
            (Some(Auth::Bearer { token_file }), ..) => Some(NatsCredentials::Token { token_file }),
            (_, Some(seed_file), _) => Some(NatsCredentials::NKey { seed_file }),
            (_, _, Some(file)) => Some(NatsCredentials::Creds { file }),
            _ => None,
        }
    }
}

fn check_servers(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    v: Option<&Spanned<Vec<Spanned<String>>>>,
) -> Vec<String> {
    let Some(list) = v else {
        cx.error(
            Some(p.t.span()),
            &p.t.key,
            "missing `servers`: the NATS servers to connect to, like servers = \
             [\"nats://127.0.0.1:4222\"]",
        );
        return vec!["nats://127.0.0.1:4222".into()];
    };
    if list.get_ref().is_empty() {
        cx.error(
            Some(list.span()),
            &p.key("servers"),
            "the servers list is empty: name at least one URL",
        );
    }
    let mut out = Vec::new();
    for (i, s) in list.get_ref().iter().enumerate() {
        let k = p.key(&format!("servers[{i}]"));
        cx.note(&k, s);
        let text = s.get_ref().trim();
        let problem = match reqwest::Url::parse(text) {
            Ok(u) if !matches!(u.scheme(), "nats" | "tls") => format!(
                "\"{text}\" is a {} URL: write nats://host:4222 or tls://host:4222",
                u.scheme()
            ),
            Ok(u) if u.host().is_none() => format!("\"{text}\" has no host"),
            Ok(u) if !u.username().is_empty() || u.password().is_some() => format!(
                "\"{text}\" holds credentials: they would be shown in logs and `holdfast \
                 check`; remove them and use auth, nkey_seed_file or credentials_file"
            ),
            Ok(_) => {
                out.push(text.to_string());
                continue;
            }
            Err(e) => format!("\"{text}\" is not a URL ({e}): write it like nats://host:4222"),
        };
        cx.error(Some(s.span()), &k, problem);
    }
    out
}

fn loopback(server: &str) -> bool {
    reqwest::Url::parse(server).is_ok_and(|u| is_loopback(&u))
}

fn check_create(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    c: &Spanned<RawCreateStream>,
    subject: &str,
) -> StreamSpec {
    let key = |k: &str| p.key(&format!("create_stream.{k}"));
    let raw = c.get_ref();
    let subjects = match &raw.subjects {
        Some(list) => {
            cx.note(&key("subjects"), list);
            if list.get_ref().is_empty() {
                cx.error(
                    Some(list.span()),
                    &key("subjects"),
                    "the subjects list is empty: name the subjects the stream captures",
                );
            }
            list.get_ref().iter().map(|s| s.get_ref().clone()).collect()
        }
        None => {
            // The template's literal start up to its last dot, then `>`.
            let literal = &subject[..subject.find('{').unwrap_or(subject.len())];
            match literal.rfind('.') {
                Some(dot) if dot > 0 => vec![format!("{}.>", &literal[..dot])],
                _ => {
                    cx.error(
                        Some(c.span()),
                        &key("subjects"),
                        format!(
                            "the subject \"{subject}\" starts with a placeholder: set \
                             create_stream.subjects to the subjects the stream captures"
                        ),
                    );
                    Vec::new()
                }
            }
        }
    };
    StreamSpec {
        subjects,
        replicas: cx.count(&key("replicas"), raw.replicas.as_ref(), 1, 1..=5) as usize,
        duplicate_window: cx.duration(
            &key("duplicate_window"),
            raw.duplicate_window.as_ref(),
            Duration::from_secs(120),
            Some("the server would drop no resend: a kill -9 of holdfast would store repeats"),
        ),
        max_bytes: raw
            .max_bytes
            .as_ref()
            .map(|v| cx.size(&key("max_bytes"), Some(v), 1 << 30, 1 << 20, u64::MAX)),
    }
}

impl NetworkSink for NatsOptions {
    network_sink_types!(RawNatsSink, Nats);

    /// Uncompressed, no headers; the credentials a password or a token
    /// are, said and checked like an HTTP sink's (an NKey seed and a
    /// `.creds` file have their own lines and checks below).
    fn transport_keys(&self) -> TransportKeys<'_> {
        let auth = match &self.credentials {
            Some(NatsCredentials::UserPassword {
                user,
                password_file,
            }) => Some(Auth::Basic {
                user: user.clone(),
                password_file: password_file.clone(),
            }),
            Some(NatsCredentials::Token { token_file }) => Some(Auth::Bearer {
                token_file: token_file.clone(),
            }),
            _ => None,
        };
        TransportKeys {
            compression: Compression::None,
            auth,
            tls: &self.tls,
            headers: &[],
        }
    }

    fn transport(&self) -> anyhow::Result<Nats> {
        Ok(Nats::new(self))
    }

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        let encoding = match self.encoding {
            NatsEncoding::Otlp => "one OTLP protobuf export request per event",
            NatsEncoding::Json => match self.document {
                Layout::Lean => "the elasticsearch sink's lean JSON document per event",
                Layout::Full => "the elasticsearch sink's full JSON document per event",
            },
        };
        writeln!(
            out,
            "    publishes to JetStream stream \"{}\" at {} on subject \"{}\", {encoding}; \
             Nats-Msg-Id = the event id, so the server drops a resend within the stream's \
             duplicate window; each event's ack moves the cursor",
            self.stream,
            self.servers.join(", "),
            self.subject.as_str()
        )?;
        match &self.credentials {
            Some(NatsCredentials::NKey { seed_file }) => {
                writeln!(out, "    an NKey seed from {}", seed_file.display())?
            }
            Some(NatsCredentials::Creds { file }) => {
                writeln!(out, "    credentials from {}", file.display())?
            }
            _ => {}
        }
        if let Some(c) = &self.create_stream {
            writeln!(
                out,
                "    creates the stream when missing: subjects {}, {} replica(s), duplicate \
                 window {}, {}",
                c.subjects.join(", "),
                c.replicas,
                format_duration(c.duplicate_window),
                c.max_bytes.map_or("no byte limit".to_string(), |b| format!(
                    "at most {}",
                    format_size(b)
                ))
            )?;
        }
        Ok(())
    }

    fn check_own_environment(&self, name: &str, env: &mut Env<'_>) {
        let key = |k: &str| format!("sinks.{name}.{k}");
        match &self.credentials {
            Some(NatsCredentials::NKey { seed_file }) => {
                env.secret_file(&key("nkey_seed_file"), seed_file, "NKey seed")
            }
            Some(NatsCredentials::Creds { file }) => {
                env.secret_file(&key("credentials_file"), file, "credentials")
            }
            _ => {}
        }
        if let Some((error, message)) = connect::probe(self) {
            let severity = if error {
                Severity::Error
            } else {
                Severity::Warning
            };
            env.push(severity, &key("stream"), message);
        }
    }
}
