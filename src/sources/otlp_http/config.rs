//! `[sources.<name>]` with `type = "otlp_http"`: the settings the receiver
//! runs with, the table as written, its check and its lines in
//! `holdfast check`.

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::IgnoredAny;
use toml::Spanned;

use super::metrics::OtlpSourceMetrics;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Processing, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::listen::{Listener, OtherAuth, RawListener, RawTls};
use crate::sources::raw::raw_source;

/// `type = "otlp_http"`: an OTLP/HTTP (protobuf or JSON) receiver.
#[derive(Debug, Clone)]
pub struct OtlpHttpSourceSettings {
    /// Where, how many connections at once, and HTTPS or HTTP.
    pub listener: Listener,
    /// Largest request body, before and after decompression; never zero.
    pub max_body_bytes: u64,
    /// Time allowed to receive a request's headers; never zero.
    pub header_timeout: Duration,
    /// Time allowed for a whole request, body included; never zero.
    pub request_timeout: Duration,
    /// A file holding the bearer token clients must send; `None` means no
    /// authentication.
    pub bearer_token_file: Option<PathBuf>,
    /// `process`: what is done to each log record before its append
    /// (issue 17, `src/process/`); `None`: records as received.
    pub process: Option<std::sync::Arc<crate::process::Chain>>,
}

/// Defaults of an OTLP/HTTP source.
mod otlp_defaults {
    use super::*;
    pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4318));
    pub const MAX_BODY_BYTES: u64 = 8 << 20;
    /// The range `max_body_bytes` may be set in: 1 KiB to 1 GiB.
    pub const BODY_BYTES_RANGE: (u64, u64) = (1 << 10, 1 << 30);
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
}

raw_source! {
    /// `[sources.<name>]` with `type = "otlp_http"`, as written.
    struct RawOtlpHttpSource {
        /// Default `"127.0.0.1:4318"`.
        listen: String,
        /// Default `"8MiB"`; 1 KiB to 1 GiB.
        max_body_bytes: Size,
        /// Default 256; 1 to 65536.
        max_connections: Count,
        /// Default 32; 1 to 65536.
        max_connections_per_peer: Count,
        /// Default `"10s"`.
        header_timeout: Dur,
        /// Default `"30s"`.
        request_timeout: Dur,
        /// Default: absent, no authentication.
        bearer_token_file: String,
        /// Never allowed: accepted here only to refuse it with the reason.
        bearer_token: IgnoredAny,
        /// Default `"10s"`.
        tls_handshake_timeout: Dur,
        /// Default: absent, plain HTTP.
        tls: RawTls,
        /// Default: absent, records as received (checked by `src/process/config.rs`).
        #[serde(rename = "process")]
        _process: IgnoredAny,
    }
}

impl RawOtlpHttpSource {
    fn check<'a>(self, cx: &mut Checker<'a>, t: &NamedTable<'a>) -> OtlpHttpSourceSettings {
        use otlp_defaults as d;
        let shared = check_shared(
            cx,
            &t.key,
            RawShared {
                max_body_bytes: self.max_body_bytes.as_ref(),
                request_timeout: self.request_timeout.as_ref(),
                bearer_token_file: self.bearer_token_file.as_ref(),
                bearer_token: self.bearer_token.as_ref(),
            },
        );
        let header_timeout = check_header_timeout(
            cx,
            &format!("{}.header_timeout", t.key),
            self.header_timeout.as_ref(),
            self.request_timeout.as_ref(),
            shared.request_timeout,
        );
        let Shared {
            max_body_bytes,
            request_timeout,
            bearer_token_file,
        } = shared;
        let raw_listener = RawListener {
            listen: self.listen.as_ref(),
            max_connections: self.max_connections.as_ref(),
            max_connections_per_peer: self.max_connections_per_peer.as_ref(),
            tls_handshake_timeout: self.tls_handshake_timeout.as_ref(),
            tls: self.tls.as_ref(),
        };
        let auth = OtherAuth::Token {
            set: bearer_token_file.is_some(),
        };
        let listener = Listener::check(cx, &t.key, d::LISTEN, raw_listener, auth);
        OtlpHttpSourceSettings {
            listener,
            max_body_bytes,
            header_timeout,
            request_timeout,
            bearer_token_file,
            process: crate::process::config::check(cx, t),
        }
    }
}

/// The keys every OTLP receiver has at its top, as written (`otlp_http`,
/// and `otlp` for both its listeners).
pub(crate) struct RawShared<'r> {
    pub max_body_bytes: Option<&'r Spanned<Size>>,
    pub request_timeout: Option<&'r Spanned<Dur>>,
    pub bearer_token_file: Option<&'r Spanned<String>>,
    pub bearer_token: Option<&'r Spanned<IgnoredAny>>,
}

/// [`RawShared`], checked.
pub(crate) struct Shared {
    pub max_body_bytes: u64,
    pub request_timeout: Duration,
    pub bearer_token_file: Option<PathBuf>,
}

/// Checks the shared keys of the table `table` (its full key).
pub(crate) fn check_shared(cx: &mut Checker<'_>, table: &str, raw: RawShared<'_>) -> Shared {
    use otlp_defaults as d;
    let key = |k: &str| format!("{table}.{k}");
    let (min, max) = d::BODY_BYTES_RANGE;
    let max_body_bytes = cx.size(
        &key("max_body_bytes"),
        raw.max_body_bytes,
        d::MAX_BODY_BYTES,
        min,
        max,
    );
    let request_timeout = cx.duration(
        &key("request_timeout"),
        raw.request_timeout,
        d::REQUEST_TIMEOUT,
        Some("every request would time out at once"),
    );
    if let Some(v) = raw.bearer_token {
        cx.error(
            Some(v.span()),
            &key("bearer_token"),
            "a token must not be written in the config: config files are often \
             world-readable and end up in backups, bug reports and `holdfast check` output. \
             Put the token alone in a file readable only by holdfast (chmod 600) and set \
             bearer_token_file = \"/etc/holdfast/otlp.token\" instead",
        );
    }
    let bearer_token_file = cx.path(&key("bearer_token_file"), raw.bearer_token_file);
    Shared {
        max_body_bytes,
        request_timeout,
        bearer_token_file,
    }
}

/// Checks `header_timeout` (its full key `key`), warning when it cannot
/// fire because `request_timeout` (as written: `request_raw`) covers it.
pub(crate) fn check_header_timeout(
    cx: &mut Checker<'_>,
    key: &str,
    raw: Option<&Spanned<Dur>>,
    request_raw: Option<&Spanned<Dur>>,
    request_timeout: Duration,
) -> Duration {
    let header_timeout = cx.duration(
        key,
        raw,
        HEADER_TIMEOUT,
        Some("every request would time out at once"),
    );
    if header_timeout > request_timeout {
        cx.warn(
            raw.or(request_raw).map(|v| v.span()),
            key,
            "is longer than request_timeout, which covers the whole request: it can never \
             fire; make it shorter than request_timeout",
        );
    }
    header_timeout
}

/// The default `header_timeout`.
pub(crate) const HEADER_TIMEOUT: Duration = otlp_defaults::HEADER_TIMEOUT;

impl Source for OtlpHttpSourceSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawOtlpHttpSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let o = self;
        let l = &o.listener;
        let scheme = if l.tls.is_some() { "https" } else { "http" };
        writeln!(out, "    receives OTLP/HTTP on {scheme}://{}", l.listen)?;
        writeln!(
            out,
            "    bodies up to {} (compressed and decompressed); headers within {}, whole \
             requests within {}",
            format_size(o.max_body_bytes),
            format_duration(o.header_timeout),
            format_duration(o.request_timeout)
        )?;
        match &o.bearer_token_file {
            Some(p) => writeln!(
                out,
                "    clients must send the bearer token in {}",
                p.display()
            )?,
            None => writeln!(out, "    no authentication")?,
        }
        l.describe(out)?;
        if let Some(chain) = &o.process {
            crate::process::config::describe(chain, out)?;
        }
        Ok(())
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<OtlpSourceMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_listener(name);
        metrics.group::<OtlpSourceMetrics>().declare(name);
    }

    fn processing(&self) -> Option<Processing<'_>> {
        Some(Processing {
            chain: self.process.as_ref(),
            unit: "log record bodies",
        })
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run_with(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let prefix = format!("sources.{name}");
        let key = |k: &str| format!("{prefix}.{k}");
        env.bindable(&key("listen"), self.listener.listen);
        if let Some(p) = &self.bearer_token_file {
            env.secret_file(&key("bearer_token_file"), p, "token");
        }
        if let Some(tls) = &self.listener.tls {
            tls.check_environment(env, &prefix);
        }
    }

    fn listens(&self) -> Vec<(&'static str, SocketAddr)> {
        vec![("listen", self.listener.listen)]
    }
}
