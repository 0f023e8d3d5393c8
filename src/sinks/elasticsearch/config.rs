//! `[sinks.<name>]` with `type = "elasticsearch"`: the table as written (the
//! shared network keys written in by [`network_sink!`]), its check and
//! its lines in `holdfast check`.

use std::fmt::{self, Write};

use toml::Spanned;

use super::{Elasticsearch, ElasticsearchOptions, DEFAULT_INDEX};
use crate::checking::Checker;
use crate::sinks::document::{check_layout, RawLayout};
use crate::sinks::network_config::{
    check_template, check_url, http_sink_types, network_sink, required_endpoint, NameRule,
    NetworkSink, Place, RawNetworkSink,
};

network_sink! {
    /// `[sinks.<name>]` with `type = "elasticsearch"`, as written.
    RawElasticsearchSink {
        /// Base URL; `/_bulk` is appended. This or `endpoints` is required.
        endpoint: Option<Spanned<String>>,
        /// Several base URLs, used in turn.
        endpoints: Option<Spanned<Vec<Spanned<String>>>>,
        /// Index name template. Default `"holdfast-{signal}-{date}"`.
        index: Option<Spanned<String>>,
        /// `"lean"` (default) or `"full"`: what each document repeats.
        document: Option<Spanned<RawLayout>>,
    }
}

/// Elasticsearch's index names.
const INDEX: NameRule = NameRule {
    what: "index name",
    default: DEFAULT_INDEX,
    allowed: |c| !(c.is_ascii_uppercase() || "\\/*?\"<>| ,#:".contains(c)),
    rule: "Elasticsearch index names are lower case, without \\ / * ? \" < > | , # : or spaces",
};

impl RawElasticsearchSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> ElasticsearchOptions {
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
        let (common, http) = self.common().check(cx, p, true, &endpoints);
        let index = check_template(cx, &p.key("index"), self.index.as_ref(), &INDEX);
        let document = check_layout(cx, &p.key("document"), self.document.as_ref());
        if endpoints.is_empty() {
            endpoints.push(
                reqwest::Url::parse("http://127.0.0.1:9200/").unwrap_or_else(|_| unreachable!()),
            );
        }
        ElasticsearchOptions {
            common,
            http,
            endpoints,
            index,
            document,
        }
    }
}

impl NetworkSink for ElasticsearchOptions {
    http_sink_types!(RawElasticsearchSink, Elasticsearch);

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        let urls: Vec<String> = self.endpoints.iter().map(|u| u.to_string()).collect();
        writeln!(
            out,
            "    sends _bulk create requests to {} into index \"{}\" (_id = the event's \
                 idempotency key, so a resend is refused as a duplicate, not stored twice), \
                 {} documents",
            urls.join(", "),
            self.index.as_str(),
            self.document.as_str()
        )?;
        Ok(())
    }
}
