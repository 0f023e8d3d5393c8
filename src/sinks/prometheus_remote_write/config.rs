//! `[sinks.<name>]` with `type = "prometheus_remote_write"`: the table as
//! written (the shared network keys written in by [`network_sink!`]), its
//! check and its lines in `holdfast check`.

use std::fmt::{self, Write};

use toml::Spanned;

use super::{RemoteWrite, RemoteWriteOptions};
use crate::checking::Checker;
use crate::metrics::Metrics;
use crate::sinks::http::Compression;
use crate::sinks::network_config::{
    http_sink_types, network_sink, required_endpoint, NetworkSink, Place, RawNetworkSink,
};

/// Every `reason` of `holdfast_dropped_events_total` this sink adds: what
/// has no remote write 1.0 form.
pub(crate) const DROP_REASONS: &[&str] = &[
    "not_a_metric",
    "exponential_histogram",
    "delta_temporality",
    "no_data_point",
];
/// Every `reason` of `holdfast_sink_rejected_events_total` (and
/// `…_quarantined_…`) this sink adds: samples the receiver will never store.
pub(crate) const REJECT_REASONS: &[&str] = &["too_old", "out_of_order"];
/// The `reason` of `holdfast_sink_retries_total` this sink adds: requests
/// halved to find the samples a receiver refused without saying which.
pub(crate) const RETRY_REASONS: &[&str] = &["refused_split"];

network_sink! {
    /// `[sinks.<name>]` with `type = "prometheus_remote_write"`, as written.
    RawRemoteWriteSink {
        /// The receiver's write URL, like
        /// `http://prometheus:9090/api/v1/write`. Required.
        endpoint: Option<Spanned<String>>,
        /// Default `false`: only `job` and `instance` come from the
        /// resource; `true` makes every resource attribute a label.
        resource_to_labels: Option<Spanned<bool>>,
    }
}

impl RawRemoteWriteSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> RemoteWriteOptions {
        let endpoint = required_endpoint(
            cx,
            p,
            self.endpoint.as_ref(),
            "http://127.0.0.1:9090/api/v1/write",
        );
        let present: Vec<reqwest::Url> = endpoint.iter().cloned().collect();
        let common = self.common();
        if let Some(c) = common.compression {
            cx.error(
                Some(c.span()),
                &p.key("compression"),
                "remote write bodies are always compressed with snappy, as the protocol \
                 requires: remove `compression`",
            );
        }
        let concurrency_written = common.concurrency.is_some();
        let (mut delivery, mut http) = common.check(cx, p, false, &present);
        // The API compresses each body itself (`mod.rs`).
        http.compression = Compression::Snappy;
        if !concurrency_written {
            // A receiver refuses a series' sample older than one it has
            // (without an out-of-order window): requests in flight at
            // once could land out of order.
            delivery.concurrency = 1;
        }
        let resource_to_labels = match &self.resource_to_labels {
            Some(v) => {
                cx.note(&p.key("resource_to_labels"), v);
                *v.get_ref()
            }
            None => false,
        };
        RemoteWriteOptions {
            common: delivery,
            http,
            endpoint: endpoint.unwrap_or_else(|| {
                reqwest::Url::parse("http://127.0.0.1:9090/api/v1/write")
                    .unwrap_or_else(|_| unreachable!())
            }),
            resource_to_labels,
        }
    }
}

impl NetworkSink for RemoteWriteOptions {
    http_sink_types!(RawRemoteWriteSink, RemoteWrite);

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        let labels = if self.resource_to_labels {
            "every resource attribute as a label"
        } else {
            "job and instance from service.name and service.instance.id"
        };
        writeln!(
            out,
            "    remote-writes metric points (protobuf, snappy) to {}; {labels}",
            self.endpoint
        )?;
        writeln!(
            out,
            "    log records, spans, exponential histograms and delta counters are not sent \
             (counted in holdfast_dropped_events_total); samples the receiver refuses as too \
             old or out of order are quarantined"
        )
    }

    fn declare_own_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_sink_drops(name, DROP_REASONS);
        metrics
            .sinks
            .declare_own_reasons(name, RETRY_REASONS, REJECT_REASONS);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::parse;
    use crate::sinks::SinkKind;

    fn sink_config(extra: &str) -> String {
        format!(
            "data_dir = \"/d\"\nsources.app = {{ type = \"otlp_http\" }}\n\n\
             [sinks.prom]\ntype = \"prometheus_remote_write\"\ninputs = [\"app\"]\n{extra}"
        )
    }

    #[test]
    fn config_defaults_to_one_request_in_flight_and_snappy() {
        let s = parse(
            &sink_config("endpoint = \"http://127.0.0.1:9090/api/v1/write\"\n"),
            "/etc/holdfast/holdfast.toml",
        )
        .unwrap();
        let SinkKind::PrometheusRemoteWrite(o) = &s.sinks["prom"].kind else {
            panic!()
        };
        assert_eq!(o.common.concurrency, 1);
        assert!(!o.resource_to_labels);
        assert_eq!(o.endpoint.as_str(), "http://127.0.0.1:9090/api/v1/write");
        assert_eq!(o.http.compression, crate::sinks::Compression::Snappy);
        let text = s.describe();
        assert!(text.contains("remote-writes metric points"), "{text}");
        assert!(
            text.contains("; snappy (as the protocol requires);"),
            "{text}"
        );

        let s = parse(
            &sink_config(
                "endpoint = \"https://mimir:8080/api/v1/push\"\nconcurrency = 4\n\
                 resource_to_labels = true\nauth.user = \"edge\"\nauth.password_file = \"/p\"\n\
                 headers = { \"X-Scope-OrgID\" = \"plant-3\" }\n",
            ),
            "/etc/holdfast/holdfast.toml",
        )
        .unwrap();
        let SinkKind::PrometheusRemoteWrite(o) = &s.sinks["prom"].kind else {
            panic!()
        };
        assert_eq!(o.common.concurrency, 4);
        assert!(o.resource_to_labels);
        assert_eq!(o.http.headers.len(), 1);
    }

    #[test]
    fn config_errors_name_the_key() {
        for (extra, key, fragment) in [
            ("", "sinks.prom", "missing `endpoint`"),
            (
                "endpoint = \"http://p:9090/api/v1/write\"\ncompression = \"gzip\"\n",
                "sinks.prom.compression",
                "snappy",
            ),
            (
                "endpoint = \"ftp://p/api/v1/write\"\n",
                "sinks.prom.endpoint",
                "ftp URL",
            ),
            (
                "endpoint = \"http://p:9090/api/v1/write\"\nresource_to_labels = \"yes\"\n",
                "sinks.prom.resource_to_labels",
                "",
            ),
        ] {
            let err = match parse(&sink_config(extra), "/etc/holdfast/holdfast.toml") {
                Ok(_) => panic!("{extra}: accepted"),
                Err(e) => e,
            };
            let p = err.problems();
            assert!(
                p.iter()
                    .any(|d| d.key == key && d.message.contains(fragment)),
                "{extra}: {p:?}"
            );
        }
    }
}
