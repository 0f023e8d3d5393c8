//! `[sinks.<name>]` with `type = "otlp_grpc"`: the table as written (the
//! shared network keys written in by [`network_sink!`]), its check and
//! its lines in `holdfast check`.

use std::fmt::{self, Write};

use toml::Spanned;

use super::{OtlpGrpc, OtlpGrpcSinkOptions};
use crate::checking::Checker;
use crate::sinks::network_config::{
    check_url_with, network_sink, network_sink_types, NetworkSink, Place, RawNetworkSink,
    TransportKeys, UrlRule,
};

network_sink! {
    /// `[sinks.<name>]` with `type = "otlp_grpc"`, as written.
    RawOtlpGrpcSink {
        /// `http://host:port` or `https://host:port` (TLS). Required.
        endpoint: Option<Spanned<String>>,
    }
}

/// A gRPC endpoint: scheme, host and port; the service paths are OTLP's.
const GRPC_ENDPOINT: UrlRule = UrlRule {
    schemes: &["http", "https"],
    write: "http://host:4317, or https://host:4317 for TLS",
    credentials: "remove them from the URL and use auth.bearer_token_file",
    example: "\"https://collector.example.com:4317\"",
    base_only: true,
};

impl RawOtlpGrpcSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> OtlpGrpcSinkOptions {
        let key = |k: &str| p.key(k);
        let endpoint = match &self.endpoint {
            Some(v) => {
                let url = check_url_with(cx, &key("endpoint"), v, &GRPC_ENDPOINT);
                match url {
                    Some(u) if !matches!(u.path(), "" | "/") => {
                        cx.error(
                            Some(v.span()),
                            &key("endpoint"),
                            format!(
                                "\"{}\" has a path: a gRPC endpoint is a scheme, host and port \
                                 only (the OTLP service paths are fixed), like \"{}://{}\"",
                                v.get_ref().trim(),
                                u.scheme(),
                                authority(&u)
                            ),
                        );
                        None
                    }
                    u => u,
                }
            }
            None => {
                cx.error(
                    Some(p.t.span()),
                    &p.t.key,
                    "missing `endpoint`: the collector's gRPC address, like endpoint = \
                     \"http://127.0.0.1:4317\" (https:// for TLS)",
                );
                None
            }
        };
        let present: Vec<reqwest::Url> = endpoint.iter().cloned().collect();
        let (common, http) = self.common().check(cx, p, false, &present);
        for table in ["headers", "headers_file"] {
            let raw = if table == "headers" {
                self.headers.as_ref()
            } else {
                self.headers_file.as_ref()
            };
            for name in raw
                .map(Spanned::get_ref)
                .into_iter()
                .flatten()
                .map(|(n, _)| n)
            {
                if let Some(why) = metadata_problem(name.get_ref()) {
                    cx.error(
                        Some(name.span()),
                        &key(&format!("{table}.{}", name.get_ref())),
                        format!("{} cannot be sent as gRPC metadata: {why}", name.get_ref()),
                    );
                }
            }
        }
        let placeholder =
            || reqwest::Url::parse("http://127.0.0.1:4317/").unwrap_or_else(|_| unreachable!());
        OtlpGrpcSinkOptions {
            common,
            http,
            endpoint: endpoint.unwrap_or_else(placeholder),
        }
    }
}

fn authority(u: &reqwest::Url) -> String {
    match u.port() {
        Some(p) => format!("{}:{p}", u.host_str().unwrap_or_default()),
        None => u.host_str().unwrap_or_default().to_string(),
    }
}

/// Why a header name cannot be gRPC metadata, beyond what every network
/// sink refuses (`network_config/headers.rs`).
fn metadata_problem(name: &str) -> Option<&'static str> {
    let lower = name.to_ascii_lowercase();
    if lower.starts_with("grpc-") {
        Some("names starting with grpc- are the protocol's own; remove it")
    } else if lower.ends_with("-bin") {
        Some("names ending in -bin carry binary values, and holdfast sends text; rename it")
    } else if matches!(lower.as_str(), "te" | "user-agent") {
        Some("the gRPC client sets it itself; remove it")
    } else {
        None
    }
}

impl NetworkSink for OtlpGrpcSinkOptions {
    network_sink_types!(RawOtlpGrpcSink, OtlpGrpc);

    fn transport_keys(&self) -> TransportKeys<'_> {
        TransportKeys::of(&self.http)
    }

    fn transport(&self) -> anyhow::Result<OtlpGrpc> {
        OtlpGrpc::new(self)
    }

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        let tls = if self.endpoint.scheme() == "https" {
            "TLS"
        } else {
            "plain text"
        };
        writeln!(
            out,
            "    exports OTLP/gRPC to {}://{} ({tls}), one Export call per request on the \
             service of its signal; headers and credentials as metadata",
            self.endpoint.scheme(),
            authority(&self.endpoint)
        )?;
        writeln!(
            out,
            "    gRPC statuses: UNAVAILABLE, CANCELLED, DEADLINE_EXCEEDED, ABORTED, OUT_OF_RANGE and \
             DATA_LOSS are retried as 5xx below; RESOURCE_EXHAUSTED only with a RetryInfo (its \
             delay as Retry-After); UNAUTHENTICATED and PERMISSION_DENIED are held as 401/403; \
             every other code quarantines the request's events"
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::config::{parse, Diagnostic, Severity};

    fn config(sink: &str) -> String {
        format!(
            "data_dir = \"/d\"\nsources.app = {{ type = \"file\", include = [\"/var/log/a.log\"] }}\n\
             [sinks.gw]\ntype = \"otlp_grpc\"\ninputs = [\"app\"]\n{sink}"
        )
    }

    fn first_error(sink: &str) -> Diagnostic {
        match parse(&config(sink), "/etc/holdfast/holdfast.toml") {
            Ok(_) => panic!("accepted: {sink}"),
            Err(e) => e.problems()[0].clone(),
        }
    }

    #[test]
    fn a_grpc_sink_takes_an_endpoint_and_the_network_keys() {
        let s = parse(
            &config(
                "endpoint = \"https://collector:4317\"\ncompression = \"none\"\n\
                 auth.bearer_token_file = \"/etc/holdfast/token\"\n\
                 headers = { \"X-Scope-OrgID\" = \"edge\" }\ntls.ca_file = \"/etc/holdfast/ca.pem\"\n",
            ),
            "/etc/holdfast/holdfast.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let text = s.describe();
        assert!(
            text.contains("exports OTLP/gRPC to https://collector:4317 (TLS)"),
            "{text}"
        );
        assert!(
            text.contains("a bearer token from /etc/holdfast/token"),
            "{text}"
        );
        assert!(
            text.contains("sends the headers X-Scope-OrgID: edge"),
            "{text}"
        );
    }

    #[test]
    fn broken_grpc_sinks_name_the_key() {
        let cases = [
            ("", "sinks.gw", "missing `endpoint`"),
            (
                "endpoint = \"grpc://c:4317\"",
                "sinks.gw.endpoint",
                "http://host:4317",
            ),
            (
                "endpoint = \"http://c:4317/v1/logs\"",
                "sinks.gw.endpoint",
                "has a path",
            ),
            (
                "endpoint = \"http://c:4317\"\nheaders = { \"grpc-timeout\" = \"1S\" }",
                "sinks.gw.headers.grpc-timeout",
                "the protocol's own",
            ),
            (
                "endpoint = \"http://c:4317\"\nheaders = { \"x-trace-bin\" = \"AAAA\" }",
                "sinks.gw.headers.x-trace-bin",
                "binary values",
            ),
            (
                "endpoint = \"http://c:4317\"\nauth.api_key_file = \"/k\"",
                "sinks.gw.auth.api_key_file",
                "Elasticsearch",
            ),
            (
                "endpoint = \"http://c:4317\"\ncompression = \"zstd\"",
                "sinks.gw.compression",
                "gzip",
            ),
        ];
        for (sink, key, fragment) in cases {
            let e = first_error(sink);
            assert_eq!(e.severity, Severity::Error, "{sink}: {e}");
            assert_eq!(e.key, key, "{sink}: {e}");
            assert!(e.message.contains(fragment), "{sink}: {e}");
        }
    }

    #[test]
    fn credentials_in_clear_text_to_another_machine_are_a_warning() {
        let s = parse(
            &config("endpoint = \"http://collector:4317\"\nauth.bearer_token_file = \"/t\"\n"),
            "/etc/holdfast/holdfast.toml",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            s.warnings()
                .iter()
                .any(|w| w.key == "sinks.gw.auth" && w.message.contains("clear text")),
            "{:?}",
            s.warnings()
        );
    }
}
