//! The config keys every network sink shares (`otlp_http`, `elasticsearch`,
//! `openobserve`, each with its own `config.rs`): they share most keys (batching, concurrency, timeouts,
//! retries, compression, `auth.*`, `tls.*`, `headers`, `quarantine.*`); since serde's
//! `flatten` and `deny_unknown_fields` do not mix, a macro writes the shared
//! fields into each raw struct, and [`Common`] checks them once;
//! [`NetworkSink`] (`component.rs`) makes each network sink a component
//! `Sink` from what is its own, and says and probes the shared keys once.
//!
//! Credentials are never written in the config: `auth.password`,
//! `auth.bearer_token` and `auth.api_key` exist only to be refused with the
//! reason and the key to use instead.

use std::path::Path;

use serde::de::DeserializeOwned;
use toml::Spanned;

use super::delivery::options::defaults as d;
use super::delivery::options::DeliveryOptions;
use super::http::{Compression, HttpOptions};
use super::quarantine_options::QuarantineFull;
use super::template::Template;
use crate::checking::raw::{one_of_newtype, raw_table};
use crate::checking::units::{format_duration, Size};
use crate::checking::{Checker, NamedTable};
use crate::component::SinkEnv;

pub(crate) mod auth;
mod component;
pub(crate) mod headers;
pub(crate) mod tls;

pub(crate) use component::DROP_REASONS;
pub(crate) use component::{http_sink_types, network_sink_types, NetworkSink, TransportKeys};

one_of_newtype! {
    /// `compression`.
    RawCompression(Compression) {
        "gzip" => Compression::Gzip,
        "none" => Compression::None,
    }
}

one_of_newtype! {
    /// `quarantine.when_full`.
    RawWhenQuarantineFull(QuarantineFull) {
        "block" => QuarantineFull::Block,
        "drop" => QuarantineFull::Drop,
    }
}

raw_table! {
    /// `quarantine.*`.
    RawQuarantine, "a table with max_bytes and when_full" {
        /// Default `"256MiB"`; at least 64 KiB.
        max_bytes: Size,
        /// `"block"` or `"drop"`. Default `"block"`.
        when_full: RawWhenQuarantineFull,
    }
}

/// Calls `$cb! { { args } keys }` with the keys every network sink shares,
/// each as `name: Type,` with its doc (written as `Option<Spanned<Type>>`):
/// the one list the raw structs ([`network_sink!`]) and [`Common`] are
/// written from.
macro_rules! shared_keys {
    ($($cb:ident)::+ { $($args:tt)* }) => {
        $($cb)::+! {
            { $($args)* }
            /// Default 500; 1 to 100 000.
            batch_max_events: $crate::checking::units::Count,
            /// Default `"5MiB"`; 1 KiB to 256 MiB.
            batch_max_bytes: $crate::checking::units::Size,
            /// Default `"1s"`.
            batch_timeout: $crate::checking::units::Dur,
            /// Default 2; 1 to 64. The most requests in flight.
            concurrency: $crate::checking::units::Count,
            /// Default `true`: the requests in flight follow the receiver,
            /// between 1 and `concurrency`.
            adaptive_concurrency: bool,
            /// Default `"30s"`.
            request_timeout: $crate::checking::units::Dur,
            /// Default 5; 1 to 1000.
            max_attempts: $crate::checking::units::Count,
            /// Default `"500ms"`.
            backoff_initial: $crate::checking::units::Dur,
            /// Default `"60s"`; at least `backoff_initial`.
            backoff_max: $crate::checking::units::Dur,
            /// `"gzip"` or `"none"`. Default `"gzip"`.
            compression: $crate::sinks::network_config::RawCompression,
            /// Default: absent, no credentials.
            auth: $crate::sinks::network_config::auth::RawAuth,
            /// Default: absent, the system's CA certificates only and no
            /// client certificate.
            tls: $crate::sinks::network_config::tls::RawSinkTls,
            /// Default: none. Header names to values, sent with every request.
            headers: $crate::sinks::network_config::headers::RawHeaders,
            /// Default: none. Header names to files holding their values.
            headers_file: $crate::sinks::network_config::headers::RawHeaders,
            /// Default: every key at its default.
            quarantine: $crate::sinks::network_config::RawQuarantine,
        }
    };
}

pub(crate) use shared_keys;

/// Declares a raw network sink struct: the shared keys, then its own.
macro_rules! network_sink {
    ($(#[$meta:meta])* $name:ident { $($own:tt)* }) => {
        $crate::sinks::network_config::shared_keys!(
            $crate::sinks::network_config::raw_network_sink { $(#[$meta])* $name { $($own)* } }
        );
    };
}

pub(crate) use network_sink;

/// [`network_sink!`] with the shared keys written out by [`shared_keys!`].
macro_rules! raw_network_sink {
    (
        { $(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident: $ty:ty,)* } }
        $($(#[$kmeta:meta])* $key:ident: $kty:ty,)*
    ) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        pub(crate) struct $name {
            /// The type (already read to choose this struct).
            #[serde(rename = "type")]
            _type: serde::de::IgnoredAny,
            /// Source names. Required, non-empty.
            inputs: Option<toml::Spanned<Vec<toml::Spanned<String>>>>,
            $($(#[$kmeta])* $key: Option<toml::Spanned<$kty>>,)*
            $($(#[$fmeta])* $field: $ty,)*
        }

        impl $crate::sinks::network_config::RawNetworkSink for $name {
            fn inputs(&self) -> Option<&toml::Spanned<Vec<toml::Spanned<String>>>> {
                self.inputs.as_ref()
            }

            fn common(&self) -> $crate::sinks::network_config::Common<'_> {
                $crate::sinks::network_config::Common {
                    $($key: self.$key.as_ref(),)*
                }
            }
        }
    };
}

pub(crate) use raw_network_sink;

/// Writes [`Common`] from [`shared_keys!`].
macro_rules! common_struct {
    ({} $($(#[$kmeta:meta])* $key:ident: $kty:ty,)*) => {
        /// The shared keys of a raw network sink, borrowed from it.
        pub(crate) struct Common<'a> {
            $($(#[$kmeta])* pub(crate) $key: Option<&'a Spanned<$kty>>,)*
        }
    };
}

shared_keys!(common_struct {});

/// What [`check_network`] needs of a raw network sink struct (written by
/// [`network_sink!`]).
pub(crate) trait RawNetworkSink {
    fn inputs(&self) -> Option<&Spanned<Vec<Spanned<String>>>>;
    fn common(&self) -> Common<'_>;
}

/// A network sink's table: deserialized, its `inputs` checked, then its
/// own keys by `check` (which checks the shared ones with [`Common`]).
pub(crate) fn check_network<'a, R: DeserializeOwned + RawNetworkSink, O>(
    cx: &mut Checker<'a>,
    t: &NamedTable<'a>,
    env: &SinkEnv<'_>,
    check: impl FnOnce(R, &mut Checker<'_>, &Place<'_, '_>) -> O,
) -> Option<O> {
    cx.deserialize::<R>(&t.key, t.value).map(|raw| {
        let inputs = env.check_inputs(cx, t, raw.inputs());
        let place = Place {
            t,
            data_dir: env.data_dir,
            inputs,
            config_hash: env.config_hash,
        };
        check(raw, cx, &place)
    })
}

/// What the checks of one table need besides the raw struct.
pub(crate) struct Place<'a, 'b> {
    pub t: &'a NamedTable<'b>,
    pub data_dir: &'a Path,
    pub inputs: Vec<String>,
    pub config_hash: &'a str,
}

impl Place<'_, '_> {
    pub(crate) fn key(&self, k: &str) -> String {
        format!("{}.{k}", self.t.key)
    }
}

impl Common<'_> {
    /// The shared keys checked: the delivery options, and the transport
    /// keys as the HTTP transport takes them (a sink with another
    /// transport takes what it uses: NATS its TLS files and credentials,
    /// and refuses the rest in its own check).
    pub(crate) fn check(
        &self,
        cx: &mut Checker<'_>,
        p: &Place<'_, '_>,
        api_keys: bool,
        endpoints: &[reqwest::Url],
    ) -> (DeliveryOptions, HttpOptions) {
        let key = |k: &str| p.key(k);
        let mut t = HttpOptions::default();
        let mut o = DeliveryOptions::new(
            p.inputs.clone(),
            p.data_dir.join("quarantine").join(&p.t.name),
        );
        o.config_hash = p.config_hash.to_string();
        let counts = [
            (
                "batch_max_events",
                self.batch_max_events,
                d::BATCH_MAX_EVENTS,
                1..=100_000,
            ),
            ("concurrency", self.concurrency, d::CONCURRENCY, 1..=64),
            ("max_attempts", self.max_attempts, d::MAX_ATTEMPTS, 1..=1000),
        ];
        let [batch_max_events, concurrency, max_attempts] =
            counts.map(|(k, v, default, range)| cx.count(&key(k), v, default, range));
        o.batch_max_events = batch_max_events as usize;
        o.concurrency = concurrency as usize;
        o.max_attempts = max_attempts as u32;
        o.batch_max_bytes = cx.size(
            &key("batch_max_bytes"),
            self.batch_max_bytes,
            d::BATCH_MAX_BYTES,
            1 << 10,
            256 << 20,
        ) as usize;
        let hammer = "retries would hammer a receiver that is already failing";
        let durations = [
            (
                "batch_timeout",
                self.batch_timeout,
                d::BATCH_TIMEOUT,
                "use a small value like \"100ms\" to send sooner",
            ),
            (
                "request_timeout",
                self.request_timeout,
                d::REQUEST_TIMEOUT,
                "every request would time out at once",
            ),
            (
                "backoff_initial",
                self.backoff_initial,
                d::BACKOFF_INITIAL,
                hammer,
            ),
            ("backoff_max", self.backoff_max, d::BACKOFF_MAX, hammer),
        ];
        [
            o.batch_timeout,
            o.request_timeout,
            o.backoff_initial,
            o.backoff_max,
        ] = durations.map(|(k, v, default, zero)| cx.duration(&key(k), v, default, Some(zero)));
        if let Some(a) = self.adaptive_concurrency {
            cx.note(&key("adaptive_concurrency"), a);
            o.adaptive_concurrency = *a.get_ref();
        }
        // Adaptive is the default, so `concurrency = 1` alone asks for it
        // too: say so wherever the operator wrote the pair's half.
        let written = self
            .adaptive_concurrency
            .map(|a| (a.span(), "adaptive_concurrency"))
            .or_else(|| self.concurrency.as_ref().map(|c| (c.span(), "concurrency")));
        if let (true, 1, Some((span, at))) = (o.adaptive_concurrency, o.concurrency, written) {
            cx.warn(
                Some(span),
                &key(at),
                "adaptive_concurrency (on by default) has nothing to adapt with concurrency = 1: \
                 concurrency is the most requests in flight, and the limit moves between 1 and \
                 it; raise concurrency (for example to 8) to let it follow the receiver, or set \
                 adaptive_concurrency = false to keep exactly one request in flight",
            );
        }
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
            t.compression = c.get_ref().0;
        }
        t.auth = self.auth.and_then(|a| auth::check_auth(cx, p, a, api_keys));
        if let Some(tls) = self.tls {
            tls.get_ref().check(cx, p, &mut t.tls);
        }
        t.headers =
            headers::check_headers(cx, p, self.headers, self.headers_file, t.auth.is_some());
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
        if t.auth.is_some() {
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
        (o, t)
    }
}

pub(crate) fn is_loopback(u: &reqwest::Url) -> bool {
    let host = u.host_str().unwrap_or("");
    host == "localhost"
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// `base` with `path` appended as its last segment(s).
pub(crate) fn join(base: &reqwest::Url, path: &str) -> reqwest::Url {
    let mut u = base.clone();
    let p = format!("{}/{}", u.path().trim_end_matches('/'), path);
    u.set_path(&p);
    u
}

/// What a sink accepts as a server URL, and what its messages suggest
/// instead: one of `schemes`, a host, and no credentials (they would be
/// shown in logs and `holdfast check`).
pub(crate) struct UrlRule {
    pub schemes: &'static [&'static str],
    /// What to write instead of another scheme.
    pub write: &'static str,
    /// Where credentials go instead of the URL.
    pub credentials: &'static str,
    /// A URL to write it like.
    pub example: &'static str,
    /// Refuse a query or fragment: paths are appended to the URL.
    pub base_only: bool,
}

/// An HTTP sink's endpoint.
pub(crate) const HTTP_ENDPOINT: UrlRule = UrlRule {
    schemes: &["http", "https"],
    write: "an http:// or https:// URL",
    credentials: "remove them from the URL and use auth.user and auth.password_file",
    example: "\"https://logs.example.com:9200\"",
    base_only: true,
};

/// An endpoint URL: http or https, with a host, without credentials.
pub(crate) fn check_url(
    cx: &mut Checker<'_>,
    key: &str,
    v: &Spanned<String>,
) -> Option<reqwest::Url> {
    check_url_with(cx, key, v, &HTTP_ENDPOINT)
}

/// A URL that follows `rule`; otherwise the problem is recorded at `key`.
pub(crate) fn check_url_with(
    cx: &mut Checker<'_>,
    key: &str,
    v: &Spanned<String>,
    rule: &UrlRule,
) -> Option<reqwest::Url> {
    cx.note(key, v);
    let text = v.get_ref().trim();
    let problem = match reqwest::Url::parse(text) {
        Ok(u) if !rule.schemes.contains(&u.scheme()) => {
            format!("\"{text}\" is a {} URL: write {}", u.scheme(), rule.write)
        }
        Ok(u) if u.host().is_none() => format!("\"{text}\" has no host"),
        Ok(u) if !u.username().is_empty() || u.password().is_some() => format!(
            "\"{text}\" holds credentials: they would be shown in logs and `holdfast check`; {}",
            rule.credentials
        ),
        Ok(u) if rule.base_only && (u.query().is_some() || u.fragment().is_some()) => {
            format!("\"{text}\" has a query or fragment: write the base URL only")
        }
        Ok(u) => return Some(u),
        Err(e) => format!(
            "\"{text}\" is not a URL ({e}): write it like {}",
            rule.example
        ),
    };
    cx.error(Some(v.span()), key, problem);
    None
}

pub(crate) fn required_endpoint(
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

/// What a receiver allows in the names a template makes (an index, a
/// stream), and the default template.
pub(crate) struct NameRule {
    /// The name's kind, for messages ("index name").
    pub what: &'static str,
    pub default: &'static str,
    pub allowed: fn(char) -> bool,
    /// The receiver's rule in words, for messages.
    pub rule: &'static str,
}

/// A name template whose literal parts follow `name`'s rule.
pub(crate) fn check_template(
    cx: &mut Checker<'_>,
    key: &str,
    v: Option<&Spanned<String>>,
    name: &NameRule,
) -> Template {
    let NameRule {
        what,
        default,
        allowed,
        rule,
    } = *name;
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
