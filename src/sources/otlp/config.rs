//! `[sources.<name>]` with `type = "otlp"`: the settings shared by both
//! listeners at the top, each listener in its own table (`grpc`, `http`),
//! their check and their lines in `holdfast check`.

use std::fmt::{self, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::de::IgnoredAny;
use toml::Spanned;

use crate::checking::raw::raw_table;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Processing, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::listen::{Listener, OtherAuth, RawListener, RawTls};
use crate::sources::otlp_http::metrics::OtlpSourceMetrics;
use crate::sources::otlp_http::OtlpHttpSourceSettings;
use crate::sources::raw::raw_source;

/// `type = "otlp"`: OTLP over gRPC and over HTTP, the Collector's `otlp`
/// receiver.
#[derive(Debug, Clone)]
pub struct OtlpSourceSettings {
    /// Largest message (gRPC) or body (HTTP), before and after
    /// decompression; never zero.
    pub max_body_bytes: u64,
    /// Time allowed for a whole request, message or body included.
    pub request_timeout: Duration,
    /// A file holding the bearer token clients must send; `None` means no
    /// authentication.
    pub bearer_token_file: Option<PathBuf>,
    /// What is done to each log record before its append.
    pub process: Option<Arc<crate::process::Chain>>,
    /// The gRPC listener, if it runs.
    pub grpc: Option<GrpcListener>,
    /// The HTTP listener, if it runs.
    pub http: Option<HttpListener>,
}

/// `[sources.<name>.grpc]`: where gRPC is served and the HTTP/2 bounds.
#[derive(Debug, Clone)]
pub struct GrpcListener {
    pub listener: Listener,
    /// Streams (calls) one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// How often an idle connection is pinged.
    pub keepalive_interval: Duration,
    /// How long a ping may go unanswered before the connection is closed.
    pub keepalive_timeout: Duration,
    /// Largest header list (metadata) of one call.
    pub max_header_list_size: u32,
}

/// `[sources.<name>.http]`: where OTLP/HTTP is served.
#[derive(Debug, Clone)]
pub struct HttpListener {
    pub listener: Listener,
    /// Time allowed to receive a request's headers; also closes idle
    /// keep-alive connections.
    pub header_timeout: Duration,
}

mod defaults {
    use super::*;
    pub const GRPC_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4317));
    pub const HTTP_LISTEN: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 4318));
    /// As the Collector: gRPC clients stream many calls over few
    /// connections, 16 at once each is room for a busy exporter.
    pub const MAX_CONCURRENT_STREAMS: u64 = 16;
    pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
    pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
    pub const MAX_HEADER_LIST_SIZE: u64 = 16 << 10;
}

raw_source! {
    /// `[sources.<name>]` with `type = "otlp"`, as written.
    struct RawOtlpSource {
        /// Default `"8MiB"`; 1 KiB to 1 GiB.
        max_body_bytes: Size,
        /// Default `"30s"`.
        request_timeout: Dur,
        /// Default: absent, no authentication.
        bearer_token_file: String,
        /// Never allowed: accepted here only to refuse it with the reason.
        bearer_token: IgnoredAny,
        /// Default: absent, records as received (checked by `src/process/config.rs`).
        #[serde(rename = "process")]
        _process: IgnoredAny,
        /// Default: both listeners on their defaults when neither table is written.
        grpc: RawGrpc,
        /// Default: both listeners on their defaults when neither table is written.
        http: RawHttp,
    }
}

raw_table! {
    /// `[sources.<name>.grpc]`, as written.
    RawGrpc, "a table with listen, max_connections, max_connections_per_peer, \
        tls_handshake_timeout, tls, max_concurrent_streams, keepalive_interval, \
        keepalive_timeout, max_header_list_size" {
        listen: String,
        max_connections: Count,
        max_connections_per_peer: Count,
        tls_handshake_timeout: Dur,
        tls: RawTls,
        max_concurrent_streams: Count,
        keepalive_interval: Dur,
        keepalive_timeout: Dur,
        max_header_list_size: Size,
    }
}

raw_table! {
    /// `[sources.<name>.http]`, as written.
    RawHttp, "a table with listen, max_connections, max_connections_per_peer, header_timeout, \
        tls_handshake_timeout, tls" {
        listen: String,
        max_connections: Count,
        max_connections_per_peer: Count,
        header_timeout: Dur,
        tls_handshake_timeout: Dur,
        tls: RawTls,
    }
}

impl RawOtlpSource {
    fn check<'a>(self, cx: &mut Checker<'a>, t: &NamedTable<'a>) -> OtlpSourceSettings {
        let key = |k: &str| format!("{}.{k}", t.key);
        let shared = crate::sources::otlp_http::config::check_shared(
            cx,
            &t.key,
            crate::sources::otlp_http::config::RawShared {
                max_body_bytes: self.max_body_bytes.as_ref(),
                request_timeout: self.request_timeout.as_ref(),
                bearer_token_file: self.bearer_token_file.as_ref(),
                bearer_token: self.bearer_token.as_ref(),
            },
        );
        let auth = OtherAuth::Token {
            set: shared.bearer_token_file.is_some(),
        };
        // No table: both listeners; a table: only those written.
        let both = self.grpc.is_none() && self.http.is_none();
        let grpc = (both || self.grpc.is_some()).then(|| {
            let empty = RawGrpc::default();
            let raw = self.grpc.as_ref().map_or(&empty, Spanned::get_ref);
            check_grpc(cx, &key("grpc"), raw, auth)
        });
        let http = (both || self.http.is_some()).then(|| {
            let empty = RawHttp::default();
            let raw = self.http.as_ref().map_or(&empty, Spanned::get_ref);
            let header_timeout = crate::sources::otlp_http::config::check_header_timeout(
                cx,
                &key("http.header_timeout"),
                raw.header_timeout.as_ref(),
                self.request_timeout.as_ref(),
                shared.request_timeout,
            );
            let raw_listener = RawListener {
                listen: raw.listen.as_ref(),
                max_connections: raw.max_connections.as_ref(),
                max_connections_per_peer: raw.max_connections_per_peer.as_ref(),
                tls_handshake_timeout: raw.tls_handshake_timeout.as_ref(),
                tls: raw.tls.as_ref(),
            };
            let listener =
                Listener::check(cx, &key("http"), defaults::HTTP_LISTEN, raw_listener, auth);
            HttpListener {
                listener,
                header_timeout,
            }
        });
        OtlpSourceSettings {
            max_body_bytes: shared.max_body_bytes,
            request_timeout: shared.request_timeout,
            bearer_token_file: shared.bearer_token_file,
            process: crate::process::config::check(cx, t),
            grpc,
            http,
        }
    }
}

fn check_grpc(cx: &mut Checker<'_>, table: &str, raw: &RawGrpc, auth: OtherAuth) -> GrpcListener {
    use defaults as d;
    let key = |k: &str| format!("{table}.{k}");
    let raw_listener = RawListener {
        listen: raw.listen.as_ref(),
        max_connections: raw.max_connections.as_ref(),
        max_connections_per_peer: raw.max_connections_per_peer.as_ref(),
        tls_handshake_timeout: raw.tls_handshake_timeout.as_ref(),
        tls: raw.tls.as_ref(),
    };
    let listener = Listener::check(cx, table, d::GRPC_LISTEN, raw_listener, auth);
    let max_concurrent_streams = cx.count(
        &key("max_concurrent_streams"),
        raw.max_concurrent_streams.as_ref(),
        d::MAX_CONCURRENT_STREAMS,
        1..=1024,
    ) as u32;
    let keepalive_interval = cx.duration(
        &key("keepalive_interval"),
        raw.keepalive_interval.as_ref(),
        d::KEEPALIVE_INTERVAL,
        Some("connections would be pinged without pause"),
    );
    let keepalive_timeout = cx.duration(
        &key("keepalive_timeout"),
        raw.keepalive_timeout.as_ref(),
        d::KEEPALIVE_TIMEOUT,
        Some("every connection would be closed at its first ping"),
    );
    let max_header_list_size = cx.size(
        &key("max_header_list_size"),
        raw.max_header_list_size.as_ref(),
        d::MAX_HEADER_LIST_SIZE,
        1 << 10,
        1 << 20,
    ) as u32;
    GrpcListener {
        listener,
        max_concurrent_streams,
        keepalive_interval,
        keepalive_timeout,
        max_header_list_size,
    }
}

impl OtlpSourceSettings {
    /// The settings the shared pipeline (`otlp_http::source::Source`) and
    /// the HTTP listener run with: the HTTP listener's, or the gRPC one's
    /// when only gRPC runs (its `header_timeout` then unused); `None`
    /// without a listener, which the check never lets through.
    pub(crate) fn pipeline(&self) -> Option<OtlpHttpSourceSettings> {
        let (listener, header_timeout) = match (&self.http, &self.grpc) {
            (Some(h), _) => (h.listener.clone(), h.header_timeout),
            (None, Some(g)) => (
                g.listener.clone(),
                crate::sources::otlp_http::config::HEADER_TIMEOUT,
            ),
            (None, None) => return None,
        };
        Some(OtlpHttpSourceSettings {
            listener,
            max_body_bytes: self.max_body_bytes,
            header_timeout,
            request_timeout: self.request_timeout,
            bearer_token_file: self.bearer_token_file.clone(),
            process: self.process.clone(),
        })
    }

    fn listeners(&self) -> Vec<(&'static str, &Listener)> {
        let mut v = Vec::new();
        if let Some(g) = &self.grpc {
            v.push(("grpc", &g.listener));
        }
        if let Some(h) = &self.http {
            v.push(("http", &h.listener));
        }
        v
    }
}

impl Source for OtlpSourceSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawOtlpSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        if let Some(g) = &self.grpc {
            let scheme = if g.listener.tls.is_some() {
                "https"
            } else {
                "http"
            };
            writeln!(
                out,
                "    receives OTLP/gRPC on {scheme}://{}",
                g.listener.listen
            )?;
            writeln!(
                out,
                "    gRPC: at most {} calls at once per connection, headers up to {}, pings \
                 every {} (answer within {})",
                g.max_concurrent_streams,
                format_size(g.max_header_list_size as u64),
                format_duration(g.keepalive_interval),
                format_duration(g.keepalive_timeout)
            )?;
            g.listener.describe(out)?;
        }
        if let Some(h) = &self.http {
            let scheme = if h.listener.tls.is_some() {
                "https"
            } else {
                "http"
            };
            writeln!(
                out,
                "    receives OTLP/HTTP on {scheme}://{}",
                h.listener.listen
            )?;
            writeln!(
                out,
                "    HTTP: headers within {}",
                format_duration(h.header_timeout)
            )?;
            h.listener.describe(out)?;
        }
        writeln!(
            out,
            "    messages and bodies up to {} (compressed and decompressed); whole requests \
             within {}",
            format_size(self.max_body_bytes),
            format_duration(self.request_timeout)
        )?;
        match &self.bearer_token_file {
            Some(p) => writeln!(
                out,
                "    clients must send the bearer token in {}",
                p.display()
            )?,
            None => writeln!(out, "    no authentication")?,
        }
        if let Some(chain) = &self.process {
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
        if self.grpc.is_some() {
            metrics.group::<OtlpSourceMetrics>().declare_grpc(name);
        }
    }

    fn processing(&self) -> Option<Processing<'_>> {
        Some(Processing {
            chain: self.process.as_ref(),
            unit: "log record bodies",
        })
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        if let Some(p) = &self.bearer_token_file {
            env.secret_file(&format!("sources.{name}.bearer_token_file"), p, "token");
        }
        for (table, l) in self.listeners() {
            l.check_environment(env, &format!("sources.{name}.{table}"));
        }
    }

    fn listens(&self) -> Vec<(&'static str, SocketAddr)> {
        self.listeners()
            .into_iter()
            .map(|(table, l)| match table {
                "grpc" => ("grpc.listen", l.listen),
                _ => ("http.listen", l.listen),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::SourceKind;

    /// The `otlp` source of a config whose only source is `[sources.otlp]`
    /// with `table` in it, or every problem as text.
    fn check(table: &str) -> Result<OtlpSourceSettings, String> {
        let text = format!("[sources.otlp]\ntype = \"otlp\"\n{table}");
        match crate::config::parse(&text, "/etc/holdfast/holdfast.toml") {
            Ok(s) => match &s.sources["otlp"].kind {
                SourceKind::Otlp(o) => Ok(o.clone()),
                _ => unreachable!(),
            },
            Err(e) => Err(e.to_string()),
        }
    }

    #[test]
    fn no_table_runs_both_listeners_on_their_defaults() {
        let s = check("").unwrap();
        let g = s.grpc.unwrap();
        assert_eq!(g.listener.listen, defaults::GRPC_LISTEN);
        assert_eq!(g.max_concurrent_streams, 16);
        assert_eq!(s.http.unwrap().listener.listen, defaults::HTTP_LISTEN);
    }

    #[test]
    fn a_table_runs_only_the_listeners_named() {
        let s = check("[sources.otlp.grpc]\nmax_concurrent_streams = 4\n").unwrap();
        assert!(s.http.is_none());
        assert_eq!(s.grpc.unwrap().max_concurrent_streams, 4);
    }

    #[test]
    fn bad_grpc_keys_are_named() {
        let e = check("[sources.otlp.grpc]\nmax_concurrent_streams = 0\n").unwrap_err();
        assert!(
            e.contains("sources.otlp.grpc.max_concurrent_streams"),
            "{e}"
        );
        let e = check("[sources.otlp.grpc]\nkeepalive_timeout = \"0s\"\n").unwrap_err();
        assert!(e.contains("sources.otlp.grpc.keepalive_timeout"), "{e}");
        let e = check("[sources.otlp.grpc]\nlisten_on = \"127.0.0.1:1\"\n").unwrap_err();
        assert!(e.contains("listen_on"), "{e}");
        let e = check("bearer_token = \"x\"\n").unwrap_err();
        assert!(e.contains("sources.otlp.bearer_token"), "{e}");
    }

    #[test]
    fn both_listeners_on_one_port_is_an_error_naming_both() {
        let e = check(
            "[sources.otlp.grpc]\nlisten = \"127.0.0.1:4400\"\n\
             [sources.otlp.http]\nlisten = \"127.0.0.1:4400\"\n",
        )
        .unwrap_err();
        assert!(e.contains("sources.otlp.grpc.listen"), "{e}");
        assert!(e.contains("sources.otlp.http.listen"), "{e}");
    }
}
