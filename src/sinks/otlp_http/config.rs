//! `[sinks.<name>]` with `type = "otlp_http"`: the table as written (the
//! shared network keys written in by [`network_sink!`]), its check and
//! its lines in `holdfast check`.

use std::fmt::{self, Write};

use toml::Spanned;

use super::{OtlpEncoding, OtlpHttp, OtlpHttpSinkOptions};
use crate::checking::raw::one_of_newtype;
use crate::checking::Checker;
use crate::sinks::network_config::{
    check_url, http_sink_types, join, network_sink, NetworkSink, Place, RawNetworkSink,
};

one_of_newtype! {
    /// `encoding` of an `otlp_http` sink.
    RawOtlpEncoding(OtlpEncoding) {
        "protobuf" => OtlpEncoding::Protobuf,
        "json" => OtlpEncoding::Json,
    }
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

impl RawOtlpHttpSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> OtlpHttpSinkOptions {
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
                None => base.as_ref().map(|b| join(b, &format!("v1/{path}"))),
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
        let (common, http) = self.common().check(cx, p, false, &present);
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
            http,
            logs_url: urls.next().unwrap_or_else(placeholder),
            traces_url: urls.next().unwrap_or_else(placeholder),
            metrics_url: urls.next().unwrap_or_else(placeholder),
            encoding,
        }
    }
}

impl NetworkSink for OtlpHttpSinkOptions {
    http_sink_types!(RawOtlpHttpSink, OtlpHttp);

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        let o = self;
        let enc = match o.encoding {
            OtlpEncoding::Protobuf => "protobuf",
            OtlpEncoding::Json => "JSON",
        };
        writeln!(
            out,
            "    exports OTLP/HTTP ({enc}) to {} (logs), {} (traces), {} (metrics)",
            o.logs_url, o.traces_url, o.metrics_url
        )?;
        Ok(())
    }
}
