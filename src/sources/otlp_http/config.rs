//! `[sources.<name>]` with `type = "otlp_http"`: the settings the receiver
//! runs with, the table as written, its check and its lines in
//! `holdfast check`.

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::num::NonZeroUsize;
use std::path::PathBuf;
use std::time::Duration;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use crate::config::check::{Checker, NamedTable};
use crate::config::environment::Env;
use crate::config::units::{format_duration, format_size, Count, Dur, Size};
use crate::config::{Severity, SourceEnv};
use crate::registry::{ComponentContext, Run, Source};

/// `type = "otlp_http"`: an OTLP/HTTP (protobuf or JSON) receiver.
#[derive(Debug, Clone)]
pub struct OtlpHttpSourceSettings {
    /// Address to listen on; port 0 picks a free port (for tests).
    pub listen: SocketAddr,
    /// Largest request body, before and after decompression; never zero.
    pub max_body_bytes: u64,
    /// Connections served at once; more wait in the kernel's backlog.
    pub max_connections: NonZeroUsize,
    /// Time allowed to receive a request's headers; never zero.
    pub header_timeout: Duration,
    /// Time allowed for a whole request, body included; never zero.
    pub request_timeout: Duration,
    /// A file holding the bearer token clients must send; `None` means no
    /// authentication.
    pub bearer_token_file: Option<PathBuf>,
    /// Serve HTTPS with this certificate and key.
    pub tls: Option<TlsSettings>,
}

/// A certificate chain and its private key, both PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// PEM private key of the leaf certificate.
    pub key_file: PathBuf,
}

impl TlsSettings {
    /// Its line in `holdfast check` (every source that serves TLS).
    pub(crate) fn describe(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "    TLS with certificate {} and key {}",
            self.cert_file.display(),
            self.key_file.display()
        )
    }
}

/// Defaults of an OTLP/HTTP source.
mod otlp_defaults {
    use super::*;
    pub const LISTEN: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4318));
    pub const MAX_BODY_BYTES: u64 = 8 << 20;
    pub const MAX_CONNECTIONS: u64 = 256;
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
    pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
}

/// `[sources.<name>]` with `type = "otlp_http"`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOtlpHttpSource {
    /// `"otlp_http"` (already read to choose this struct).
    #[serde(rename = "type")]
    _type: IgnoredAny,
    /// Default `"127.0.0.1:4318"`.
    listen: Option<Spanned<String>>,
    /// Default `"8MiB"`; 1 KiB to 1 GiB.
    max_body_bytes: Option<Spanned<Size>>,
    /// Default 256; 1 to 65536.
    max_connections: Option<Spanned<Count>>,
    /// Default `"10s"`.
    header_timeout: Option<Spanned<Dur>>,
    /// Default `"30s"`.
    request_timeout: Option<Spanned<Dur>>,
    /// Default: absent, no authentication.
    bearer_token_file: Option<Spanned<String>>,
    /// Never allowed: accepted here only to refuse it with the reason.
    bearer_token: Option<Spanned<IgnoredAny>>,
    /// Default: absent, plain HTTP.
    tls: Option<Spanned<RawTls>>,
}

/// `tls.*`, as written: both or neither.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table with cert_file and key_file")]
pub(crate) struct RawTls {
    cert_file: Option<Spanned<String>>,
    key_file: Option<Spanned<String>>,
}

impl RawOtlpHttpSource {
    fn check(self, cx: &mut Checker<'_>, t: &NamedTable<'_>) -> OtlpHttpSourceSettings {
        use otlp_defaults as d;
        let key = |k: &str| format!("{}.{k}", t.key);

        let listen = cx.listen(&key("listen"), self.listen.as_ref(), d::LISTEN);
        let max_body_bytes = cx.size(
            &key("max_body_bytes"),
            self.max_body_bytes.as_ref(),
            d::MAX_BODY_BYTES,
            1 << 10,
            1 << 30,
        );
        let max_connections = cx.count(
            &key("max_connections"),
            self.max_connections.as_ref(),
            d::MAX_CONNECTIONS,
            1..=65536,
        );
        let max_connections =
            NonZeroUsize::new(max_connections as usize).unwrap_or(NonZeroUsize::MIN);
        let header_timeout = cx.duration(
            &key("header_timeout"),
            self.header_timeout.as_ref(),
            d::HEADER_TIMEOUT,
            Some("every request would time out at once"),
        );
        let request_timeout = cx.duration(
            &key("request_timeout"),
            self.request_timeout.as_ref(),
            d::REQUEST_TIMEOUT,
            Some("every request would time out at once"),
        );
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
        let tls = check_tls(cx, &key("tls"), self.tls.as_ref());
        if !listen.ip().is_loopback() {
            let problem = match (bearer_token_file.is_some(), tls.is_some()) {
                (false, false) => Some(
                    "without TLS or a bearer token: anyone who can reach this port can write \
                     telemetry, and it travels in clear text; set bearer_token_file and \
                     tls.cert_file/tls.key_file, or listen on 127.0.0.1",
                ),
                (true, false) => Some(
                    "without TLS: the bearer token and the telemetry travel in clear text; set \
                     tls.cert_file and tls.key_file",
                ),
                (false, true) => Some(
                    "without a bearer token: anyone who can reach this port can write telemetry; \
                     set bearer_token_file, or make sure a firewall limits who can connect",
                ),
                (true, true) => None,
            };
            if let Some(problem) = problem {
                let span = self.listen.as_ref().map(|v| v.span());
                cx.warn(
                    span,
                    &key("listen"),
                    format!("listens on {listen} {problem}"),
                );
            }
        }
        OtlpHttpSourceSettings {
            listen,
            max_body_bytes,
            max_connections,
            header_timeout,
            request_timeout,
            bearer_token_file,
            tls,
        }
    }
}

/// Checks a `tls` table (`tkey` is its full key): both files or an error.
/// Shared by the sources that serve TLS.
pub(crate) fn check_tls(
    cx: &mut Checker<'_>,
    tkey: &str,
    tls: Option<&Spanned<RawTls>>,
) -> Option<TlsSettings> {
    tls.and_then(|tls| {
        let raw = tls.get_ref();
        let cert = cx.path(&format!("{tkey}.cert_file"), raw.cert_file.as_ref());
        let keyf = cx.path(&format!("{tkey}.key_file"), raw.key_file.as_ref());
        match (&raw.cert_file, &raw.key_file) {
            (Some(_), Some(_)) => Some(TlsSettings {
                cert_file: cert?,
                key_file: keyf?,
            }),
            (Some(present), None) | (None, Some(present)) => {
                let (set, missing) = if raw.cert_file.is_some() { ("cert_file", "key_file") } else { ("key_file", "cert_file") };
                cx.error(
                    Some(present.span()),
                    &format!("{tkey}.{set}"),
                    format!(
                        "tls.{set} is set but tls.{missing} is not: TLS needs both the \
                         certificate chain and its private key (PEM files); set \
                         tls.{missing}, or remove tls to serve without TLS"
                    ),
                );
                None
            }
            (None, None) => {
                cx.error(
                    Some(tls.span()),
                    tkey,
                    "tls is empty: set tls.cert_file and tls.key_file, or remove tls to serve without TLS",
                );
                None
            }
        }
    })
}

/// The checks of TLS files that need the machine, `prefix` being the
/// source's key (`sources.<name>`). Shared by the sources that serve TLS.
pub(crate) fn check_tls_environment(env: &mut Env<'_>, prefix: &str, tls: &TlsSettings) {
    let key = |k: &str| format!("{prefix}.{k}");
    let cert = env.pem_file(&key("tls.cert_file"), &tls.cert_file, "CERTIFICATE");
    let private = env.pem_file(&key("tls.key_file"), &tls.key_file, "PRIVATE KEY");
    if private {
        env.secret_file(&key("tls.key_file"), &tls.key_file, "private key");
    }
    // What `run` does with them, so that a file that only looks like PEM,
    // or a key that does not fit the certificate, is found before start.
    if cert && private {
        if let Err(e) = super::tls::acceptor(tls) {
            env.push(Severity::Error, &key("tls.cert_file"), format!("{e:#}"));
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
        let scheme = if o.tls.is_some() { "https" } else { "http" };
        writeln!(out, "    receives OTLP/HTTP on {scheme}://{}", o.listen)?;
        writeln!(
            out,
            "    bodies up to {} (compressed and decompressed); at most {} connections; \
             headers within {}, whole requests within {}",
            format_size(o.max_body_bytes),
            o.max_connections,
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
        if let Some(tls) = &o.tls {
            tls.describe(out)?;
        }
        Ok(())
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run_with(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let o = self;
        let key = |k: &str| format!("sources.{name}.{k}");
        env.bindable(&key("listen"), o.listen);
        if let Some(p) = &o.bearer_token_file {
            env.secret_file(&key("bearer_token_file"), p, "token");
        }
        if let Some(tls) = &o.tls {
            check_tls_environment(env, &format!("sources.{name}"), tls);
        }
    }

    fn listen(&self) -> Option<SocketAddr> {
        Some(self.listen)
    }
}
