//! `[sinks.<name>]` of the network types: `otlp_http`, `elasticsearch`,
//! `openobserve`. They share most keys (batching, concurrency, timeouts,
//! retries, compression, `auth.*`, `tls.*`, `quarantine.*`); since serde's
//! `flatten` and `deny_unknown_fields` do not mix, a macro writes the shared
//! fields into each raw struct, and [`Common`] checks them once.
//!
//! Credentials are never written in the config: `auth.password`,
//! `auth.bearer_token` and `auth.api_key` exist only to be refused with the
//! reason and the key to use instead.

use std::path::{Path, PathBuf};

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::check::{Checker, NamedTable};
use super::raw::one_of;
use super::sink_auth::{self, RawAuth};
use super::units::{format_duration, Count, Dur, Size};
use crate::sinks::elasticsearch::{ElasticsearchOptions, DEFAULT_INDEX};
use crate::sinks::openobserve::{OpenObserveOptions, DEFAULT_ORG, DEFAULT_STREAM};
use crate::sinks::options::defaults as d;
use crate::sinks::otlp_http::{OtlpEncoding, OtlpHttpSinkOptions};
use crate::sinks::{Auth, Compression, HttpSinkOptions, QuarantineFull, Template};

/// `compression`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawCompression(Compression);

impl<'de> Deserialize<'de> for RawCompression {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("gzip", RawCompression(Compression::Gzip)),
                ("none", RawCompression(Compression::None)),
            ],
        )
    }
}

/// `quarantine.when_full`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawWhenQuarantineFull(QuarantineFull);

impl<'de> Deserialize<'de> for RawWhenQuarantineFull {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("block", RawWhenQuarantineFull(QuarantineFull::Block)),
                ("drop", RawWhenQuarantineFull(QuarantineFull::Drop)),
            ],
        )
    }
}

/// `encoding` of an `otlp_http` sink.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RawOtlpEncoding(OtlpEncoding);

impl<'de> Deserialize<'de> for RawOtlpEncoding {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        one_of(
            d,
            &[
                ("protobuf", RawOtlpEncoding(OtlpEncoding::Protobuf)),
                ("json", RawOtlpEncoding(OtlpEncoding::Json)),
            ],
        )
    }
}

/// `tls.*` of a network sink.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with ca_file")]
pub(crate) struct RawSinkTls {
    /// PEM CA certificates to trust besides the system's.
    ca_file: Option<Spanned<String>>,
}

/// `quarantine.*`.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with max_bytes and when_full"
)]
pub(crate) struct RawQuarantine {
    /// Default `"256MiB"`; at least 64 KiB.
    max_bytes: Option<Spanned<Size>>,
    /// `"block"` or `"drop"`. Default `"block"`.
    when_full: Option<Spanned<RawWhenQuarantineFull>>,
}

/// Declares a raw network sink struct: the shared keys, then its own.
macro_rules! network_sink {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            /// The type (already read to choose this struct).
            #[serde(rename = "type")]
            _type: IgnoredAny,
            /// Source names. Required, non-empty.
            pub inputs: Option<Spanned<Vec<Spanned<String>>>>,
            /// Default 1000; 1 to 100 000.
            batch_max_events: Option<Spanned<Count>>,
            /// Default `"5MiB"`; 1 KiB to 256 MiB.
            batch_max_bytes: Option<Spanned<Size>>,
            /// Default `"1s"`.
            batch_timeout: Option<Spanned<Dur>>,
            /// Default 2; 1 to 64. The most requests in flight.
            concurrency: Option<Spanned<Count>>,
            /// Default `true`: the requests in flight follow the receiver,
            /// between 1 and `concurrency`.
            adaptive_concurrency: Option<Spanned<bool>>,
            /// Default `"30s"`.
            request_timeout: Option<Spanned<Dur>>,
            /// Default 5; 1 to 1000.
            max_attempts: Option<Spanned<Count>>,
            /// Default `"500ms"`.
            backoff_initial: Option<Spanned<Dur>>,
            /// Default `"60s"`; at least `backoff_initial`.
            backoff_max: Option<Spanned<Dur>>,
            /// `"gzip"` or `"none"`. Default `"gzip"`.
            compression: Option<Spanned<RawCompression>>,
            /// Default: absent, no credentials.
            auth: Option<Spanned<RawAuth>>,
            /// Default: absent, the system's CA certificates only.
            tls: Option<Spanned<RawSinkTls>>,
            /// Default: every key at its default.
            quarantine: Option<Spanned<RawQuarantine>>,
            $($(#[$fmeta])* $field: $ty,)*
        }

        impl $name {
            fn common(&self) -> Common<'_> {
                Common {
                    batch_max_events: self.batch_max_events.as_ref(),
                    batch_max_bytes: self.batch_max_bytes.as_ref(),
                    batch_timeout: self.batch_timeout.as_ref(),
                    concurrency: self.concurrency.as_ref(),
                    adaptive_concurrency: self.adaptive_concurrency.as_ref(),
                    request_timeout: self.request_timeout.as_ref(),
                    max_attempts: self.max_attempts.as_ref(),
                    backoff_initial: self.backoff_initial.as_ref(),
                    backoff_max: self.backoff_max.as_ref(),
                    compression: self.compression.as_ref(),
                    auth: self.auth.as_ref(),
                    tls: self.tls.as_ref(),
                    quarantine: self.quarantine.as_ref(),
                }
            }
        }
    };
}

network_sink! {
    /// `[sinks.<name>]` with `type = "otlp_http"`, as written.
    RawOtlpHttpSink {
        /// Base URL; `/v1/logs`, `/v1/traces`, `/v1/metrics` are appended.
        /// Required unless all three signal endpoints are set.
        endpoint: Option<Spanned<String>>,
        /// Full URL for logs. Default `<endpoint>/v1/logs`.
        logs_endpoint: Option<Spanned<String>>,
        /// Full URL for traces. Default `<endpoint>/v1/traces`.
        traces_endpoint: Option<Spanned<String>>,
        /// Full URL for metrics. Default `<endpoint>/v1/metrics`.
        metrics_endpoint: Option<Spanned<String>>,
        /// `"protobuf"` or `"json"`. Default `"protobuf"`.
        encoding: Option<Spanned<RawOtlpEncoding>>,
    }
}

network_sink! {
    /// `[sinks.<name>]` with `type = "elasticsearch"`, as written.
    RawElasticsearchSink {
        /// Base URL; `/_bulk` is appended. This or `endpoints` is required.
        endpoint: Option<Spanned<String>>,
        /// Several base URLs, used in turn.
        endpoints: Option<Spanned<Vec<Spanned<String>>>>,
        /// Index name template. Default `"holdfast-{signal}-{date}"`.
        index: Option<Spanned<String>>,
    }
}

network_sink! {
    /// `[sinks.<name>]` with `type = "openobserve"`, as written.
    RawOpenObserveSink {
        /// The server's base URL. Required.
        endpoint: Option<Spanned<String>>,
        /// The organization. Default `"default"`.
        org: Option<Spanned<String>>,
        /// Stream name template. Default `"{signal}"`.
        stream: Option<Spanned<String>>,
    }
}

/// The shared keys of a raw network sink.
pub(crate) struct Common<'a> {
    batch_max_events: Option<&'a Spanned<Count>>,
    batch_max_bytes: Option<&'a Spanned<Size>>,
    batch_timeout: Option<&'a Spanned<Dur>>,
    concurrency: Option<&'a Spanned<Count>>,
    adaptive_concurrency: Option<&'a Spanned<bool>>,
    request_timeout: Option<&'a Spanned<Dur>>,
    max_attempts: Option<&'a Spanned<Count>>,
    backoff_initial: Option<&'a Spanned<Dur>>,
    backoff_max: Option<&'a Spanned<Dur>>,
    compression: Option<&'a Spanned<RawCompression>>,
    auth: Option<&'a Spanned<RawAuth>>,
    tls: Option<&'a Spanned<RawSinkTls>>,
    quarantine: Option<&'a Spanned<RawQuarantine>>,
}

/// What the checks of one table need besides the raw struct.
pub(crate) struct Place<'a, 'b> {
    pub t: &'a NamedTable<'b>,
    pub data_dir: &'a Path,
    pub inputs: Vec<String>,
    pub config_hash: &'a str,
}

impl Place<'_, '_> {
    pub(super) fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.t.key)
    }
}

impl Common<'_> {
    fn check(
        &self,
        cx: &mut Checker<'_>,
        p: &Place<'_, '_>,
        api_keys: bool,
        endpoints: &[reqwest::Url],
    ) -> HttpSinkOptions {
        let key = |k: &str| p.key(k);
        let mut o = HttpSinkOptions::new(
            p.inputs.clone(),
            p.data_dir.join("quarantine").join(&p.t.name),
        );
        o.config_hash = p.config_hash.to_string();
        o.batch_max_events = cx.count(
            &key("batch_max_events"),
            self.batch_max_events,
            d::BATCH_MAX_EVENTS,
            1,
            100_000,
        ) as usize;
        o.batch_max_bytes = cx.size(
            &key("batch_max_bytes"),
            self.batch_max_bytes,
            d::BATCH_MAX_BYTES,
            1 << 10,
            256 << 20,
        ) as usize;
        o.batch_timeout = cx.duration(
            &key("batch_timeout"),
            self.batch_timeout,
            d::BATCH_TIMEOUT,
            Some("use a small value like \"100ms\" to send sooner"),
        );
        o.concurrency =
            cx.count(&key("concurrency"), self.concurrency, d::CONCURRENCY, 1, 64) as usize;
        if let Some(a) = self.adaptive_concurrency {
            cx.note(&key("adaptive_concurrency"), a);
            o.adaptive_concurrency = *a.get_ref();
            if o.adaptive_concurrency && o.concurrency == 1 && self.concurrency.is_some() {
                cx.warn(
                    Some(a.span()),
                    &key("adaptive_concurrency"),
                    "has nothing to adapt with concurrency = 1: concurrency is the most \
                     requests in flight, and the limit moves between 1 and it; raise concurrency \
                     (for example to 8) to let it follow the receiver, or set \
                     adaptive_concurrency = false",
                );
            }
        }
        o.request_timeout = cx.duration(
            &key("request_timeout"),
            self.request_timeout,
            d::REQUEST_TIMEOUT,
            Some("every request would time out at once"),
        );
        o.max_attempts = cx.count(
            &key("max_attempts"),
            self.max_attempts,
            d::MAX_ATTEMPTS,
            1,
            1000,
        ) as u32;
        o.backoff_initial = cx.duration(
            &key("backoff_initial"),
            self.backoff_initial,
            d::BACKOFF_INITIAL,
            Some("retries would hammer a receiver that is already failing"),
        );
        o.backoff_max = cx.duration(
            &key("backoff_max"),
            self.backoff_max,
            d::BACKOFF_MAX,
            Some("retries would hammer a receiver that is already failing"),
        );
        if o.backoff_max < o.backoff_initial {
            let span = self.backoff_max.or(self.backoff_initial).map(|v| v.span());
            cx.error(
                span,
                &key("backoff_max"),
                format!(
                    "backoff_max ({}) is shorter than backoff_initial ({}): the wait between \
                     retries grows from backoff_initial up to backoff_max; raise backoff_max or \
                     lower backoff_initial",
                    format_duration(o.backoff_max),
                    format_duration(o.backoff_initial)
                ),
            );
            o.backoff_max = o.backoff_initial;
        }
        if let Some(c) = self.compression {
            cx.note(&key("compression"), c);
            o.compression = c.get_ref().0;
        }
        o.auth = self
            .auth
            .and_then(|a| sink_auth::check_auth(cx, p, a, api_keys));
        if let Some(tls) = self.tls {
            o.ca_file = cx.path(&key("tls.ca_file"), tls.get_ref().ca_file.as_ref());
        }
        if let Some(q) = self.quarantine {
            let q = q.get_ref();
            o.quarantine.max_bytes = cx.size(
                &key("quarantine.max_bytes"),
                q.max_bytes.as_ref(),
                d::QUARANTINE_MAX_BYTES,
                64 << 10,
                u64::MAX,
            );
            if let Some(w) = &q.when_full {
                cx.note(&key("quarantine.when_full"), w);
                o.quarantine.when_full = w.get_ref().0;
            }
        }
        // Credentials over plain HTTP to another machine travel in clear.
        if o.auth.is_some() {
            if let Some(u) = endpoints
                .iter()
                .find(|u| u.scheme() == "http" && !is_loopback(u))
            {
                let span = self.auth.map(|a| a.span());
                cx.warn(
                    span,
                    &key("auth"),
                    format!(
                        "credentials are sent to {u} over plain HTTP, in clear text: use an \
                         https:// endpoint"
                    ),
                );
            }
        }
        o
    }
}

fn is_loopback(u: &reqwest::Url) -> bool {
    let host = u.host_str().unwrap_or("");
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// An endpoint URL: http or https, with a host, without credentials.
fn check_url(cx: &mut Checker<'_>, key: &str, v: &Spanned<String>) -> Option<reqwest::Url> {
    cx.note(key, v);
    let text = v.get_ref().trim();
    let problem = match reqwest::Url::parse(text) {
        Ok(u) if !matches!(u.scheme(), "http" | "https") => format!(
            "\"{text}\" is a {} URL: write an http:// or https:// URL",
            u.scheme()
        ),
        Ok(u) if u.host().is_none() => format!("\"{text}\" has no host"),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => format!(
            "\"{text}\" holds credentials: they would be shown in logs and `holdfast check`; \
             remove them from the URL and use auth.user and auth.password_file"
        ),
        Ok(u) if u.query().is_some() || u.fragment().is_some() => {
            format!("\"{text}\" has a query or fragment: write the base URL only")
        }
        Ok(u) => return Some(u),
        Err(e) => format!(
            "\"{text}\" is not a URL ({e}): write it like \"https://logs.example.com:9200\""
        ),
    };
    cx.error(Some(v.span()), key, problem);
    None
}

fn required_endpoint(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    v: Option<&Spanned<String>>,
    example: &str,
) -> Option<reqwest::Url> {
    match v {
        Some(v) => check_url(cx, &p.key("endpoint"), v),
        None => {
            cx.error(
                Some(p.t.span()),
                &p.t.key,
                format!("missing `endpoint`: where to send, like endpoint = \"{example}\""),
            );
            None
        }
    }
}

/// A name template whose literal parts use only `allowed` characters.
fn check_template(
    cx: &mut Checker<'_>,
    key: &str,
    v: Option<&Spanned<String>>,
    default: &str,
    what: &str,
    allowed: fn(char) -> bool,
    rule: &str,
) -> Template {
    let Some(v) = v else {
        return Template::parse(default).unwrap_or_else(|_| unreachable!());
    };
    cx.note(key, v);
    let fallback = || Template::parse(default).unwrap_or_else(|_| unreachable!());
    match Template::parse(v.get_ref()) {
        Ok(t) => {
            if v.get_ref().is_empty() {
                cx.error(Some(v.span()), key, format!("the {what} must not be empty"));
                return fallback();
            }
            if let Some(c) = t.literals().flat_map(str::chars).find(|&c| !allowed(c)) {
                cx.error(
                    Some(v.span()),
                    key,
                    format!(
                        "the {what} \"{}\" has the character {c:?}: {rule}",
                        v.get_ref()
                    ),
                );
                return fallback();
            }
            t
        }
        Err(e) => {
            cx.error(Some(v.span()), key, e);
            fallback()
        }
    }
}

impl RawOtlpHttpSink {
    pub(crate) fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> OtlpHttpSinkOptions {
        let base = self
            .endpoint
            .as_ref()
            .and_then(|v| check_url(cx, &p.key("endpoint"), v));
        let mut urls = Vec::new();
        for (field, path) in [
            (&self.logs_endpoint, "logs"),
            (&self.traces_endpoint, "traces"),
            (&self.metrics_endpoint, "metrics"),
        ] {
            let url = match field {
                Some(v) => check_url(cx, &p.key(&format!("{path}_endpoint")), v),
                None => base
                    .as_ref()
                    .map(|b| crate::sinks::elasticsearch::join(b, &format!("v1/{path}"))),
            };
            urls.push(url);
        }
        if self.endpoint.is_none() && urls.iter().any(Option::is_none) {
            cx.error(
                Some(p.t.span()),
                &p.t.key,
                "missing `endpoint`: the collector's base URL, like endpoint = \
                 \"http://collector:4318\" (/v1/logs, /v1/traces and /v1/metrics are appended)",
            );
        }
        let placeholder =
            || reqwest::Url::parse("http://127.0.0.1:4318/").unwrap_or_else(|_| unreachable!());
        let present: Vec<reqwest::Url> = urls.iter().flatten().cloned().collect();
        let common = self.common().check(cx, p, false, &present);
        let mut urls = urls.into_iter().map(|u| u.unwrap_or_else(placeholder));
        let encoding = match &self.encoding {
            Some(e) => {
                cx.note(&p.key("encoding"), e);
                e.get_ref().0
            }
            None => OtlpEncoding::Protobuf,
        };
        OtlpHttpSinkOptions {
            common,
            logs_url: urls.next().unwrap_or_else(placeholder),
            traces_url: urls.next().unwrap_or_else(placeholder),
            metrics_url: urls.next().unwrap_or_else(placeholder),
            encoding,
        }
    }
}

fn es_index_char(c: char) -> bool {
    !(c.is_ascii_uppercase() || "\\/*?\"<>| ,#:".contains(c))
}

fn oo_stream_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

impl RawElasticsearchSink {
    pub(crate) fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> ElasticsearchOptions {
        let mut endpoints = Vec::new();
        match (&self.endpoint, &self.endpoints) {
            (Some(_), Some(list)) => cx.error(
                Some(list.span()),
                &p.key("endpoints"),
                "set endpoint or endpoints, not both",
            ),
            (Some(v), None) => endpoints.extend(check_url(cx, &p.key("endpoint"), v)),
            (None, Some(list)) => {
                if list.get_ref().is_empty() {
                    cx.error(
                        Some(list.span()),
                        &p.key("endpoints"),
                        "the endpoints list is empty: name at least one URL",
                    );
                }
                for (i, v) in list.get_ref().iter().enumerate() {
                    endpoints.extend(check_url(cx, &p.key(&format!("endpoints[{i}]")), v));
                }
            }
            (None, None) => {
                required_endpoint(cx, p, None, "https://elasticsearch:9200");
            }
        }
        let common = self.common().check(cx, p, true, &endpoints);
        let index = check_template(
            cx,
            &p.key("index"),
            self.index.as_ref(),
            DEFAULT_INDEX,
            "index name",
            es_index_char,
            "Elasticsearch index names are lower case, without \\ / * ? \" < > | , # : or spaces",
        );
        if endpoints.is_empty() {
            endpoints.push(
                reqwest::Url::parse("http://127.0.0.1:9200/").unwrap_or_else(|_| unreachable!()),
            );
        }
        ElasticsearchOptions {
            common,
            endpoints,
            index,
        }
    }
}

impl RawOpenObserveSink {
    pub(crate) fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> OpenObserveOptions {
        let endpoint = required_endpoint(cx, p, self.endpoint.as_ref(), "http://openobserve:5080");
        let present: Vec<reqwest::Url> = endpoint.iter().cloned().collect();
        let common = self.common().check(cx, p, false, &present);
        let org = match &self.org {
            Some(v) => {
                cx.note(&p.key("org"), v);
                let o = v.get_ref();
                if o.is_empty() || !o.chars().all(oo_stream_char) {
                    cx.error(
                        Some(v.span()),
                        &p.key("org"),
                        format!(
                            "\"{o}\" is not an organization name: use letters, digits, '_' and '-'"
                        ),
                    );
                }
                o.clone()
            }
            None => DEFAULT_ORG.to_string(),
        };
        let stream = check_template(
            cx,
            &p.key("stream"),
            self.stream.as_ref(),
            DEFAULT_STREAM,
            "stream name",
            oo_stream_char,
            "stream names use letters, digits, '_' and '-'",
        );
        OpenObserveOptions {
            common,
            endpoint: endpoint.unwrap_or_else(|| {
                reqwest::Url::parse("http://127.0.0.1:5080/").unwrap_or_else(|_| unreachable!())
            }),
            org,
            stream,
        }
    }
}

/// A short hash of the config text, stored with quarantined events so an
/// operator can tell which config rejected them.
pub(crate) fn config_hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

/// Paths of the secret and CA files of a network sink, for the machine
/// checks: (key, path, what).
pub(crate) fn files_to_check(
    name: &str,
    o: &HttpSinkOptions,
) -> Vec<(String, PathBuf, &'static str)> {
    let key = |k: &str| format!("sinks.{name}.{k}");
    let mut out = Vec::new();
    match &o.auth {
        Some(Auth::Basic { password_file, .. }) => {
            out.push((key("auth.password_file"), password_file.clone(), "password"))
        }
        Some(Auth::Bearer { token_file }) => {
            out.push((key("auth.bearer_token_file"), token_file.clone(), "token"))
        }
        Some(Auth::ApiKey { key_file }) => {
            out.push((key("auth.api_key_file"), key_file.clone(), "API key"))
        }
        None => {}
    }
    if let Some(ca) = &o.ca_file {
        out.push((key("tls.ca_file"), ca.clone(), "CA"));
    }
    out
}
