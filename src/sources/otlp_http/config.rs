//! `[sources.<name>]` with `type = "otlp_http"`: the settings the receiver
//! runs with, the table as written, its check and its lines in
//! `holdfast check`.

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::time::Duration;

use serde::de::IgnoredAny;

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
        let key = |k: &str| format!("{}.{k}", t.key);

        let (min, max) = d::BODY_BYTES_RANGE;
        let max_body_bytes = cx.size(
            &key("max_body_bytes"),
            self.max_body_bytes.as_ref(),
            d::MAX_BODY_BYTES,
            min,
            max,
        );
        let [header_timeout, request_timeout] = [
            ("header_timeout", &self.header_timeout, d::HEADER_TIMEOUT),
            ("request_timeout", &self.request_timeout, d::REQUEST_TIMEOUT),
        ]
        .map(|(k, v, default)| {
            let zero = "every request would time out at once";
            cx.duration(&key(k), v.as_ref(), default, Some(zero))
        });
        if header_timeout > request_timeout {
            let span = self
                .header_timeout
                .as_ref()
                .or(self.request_timeout.as_ref())
                .map(|v| v.span());
            cx.warn(
                span,
                &key("header_timeout"),
                "is longer than request_timeout, which covers the whole request: it can never \
                 fire; make it shorter than request_timeout",
            );
        }
        if let Some(v) = &self.bearer_token {
            cx.error(
                Some(v.span()),
                &key("bearer_token"),
                "a token must not be written in the config: config files are often \
                 world-readable and end up in backups, bug reports and `holdfast check` output. \
                 Put the token alone in a file readable only by holdfast (chmod 600) and set \
                 bearer_token_file = \"/etc/holdfast/otlp.token\" instead",
            );
        }
        let bearer_token_file = cx.path(&key("bearer_token_file"), self.bearer_token_file.as_ref());
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

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_listener(name);
        metrics.otlp.declare(name);
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

    fn listen(&self) -> Option<SocketAddr> {
        Some(self.listener.listen)
    }
}
