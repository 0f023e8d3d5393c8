//! `[sinks.<name>]` with `type = "openobserve"`: the table as written (the
//! shared network keys written in by [`network_sink!`]), its check and
//! its lines in `holdfast check`.

use std::fmt::{self, Write};

use toml::Spanned;

use super::{OpenObserve, OpenObserveOptions, DEFAULT_ORG, DEFAULT_STREAM};
use crate::checking::Checker;
use crate::sinks::document::{check_layout, RawLayout};
use crate::sinks::network_config::{
    check_template, http_sink_types, network_sink, required_endpoint, NameRule, NetworkSink, Place,
    RawNetworkSink,
};

network_sink! {
    /// `[sinks.<name>]` with `type = "openobserve"`, as written.
    RawOpenObserveSink {
        /// The server's base URL. Required.
        endpoint: Option<Spanned<String>>,
        /// The organization. Default `"default"`.
        org: Option<Spanned<String>>,
        /// Stream name template. Default `"{signal}"`.
        stream: Option<Spanned<String>>,
        /// `"lean"` (default) or `"full"`: what each document repeats.
        document: Option<Spanned<RawLayout>>,
    }
}

fn oo_stream_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// OpenObserve's stream names.
const STREAM: NameRule = NameRule {
    what: "stream name",
    default: DEFAULT_STREAM,
    allowed: oo_stream_char,
    rule: "stream names use letters, digits, '_' and '-'",
};

impl RawOpenObserveSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> OpenObserveOptions {
        let endpoint = required_endpoint(cx, p, self.endpoint.as_ref(), "http://openobserve:5080");
        let present: Vec<reqwest::Url> = endpoint.iter().cloned().collect();
        let (common, http) = self.common().check(cx, p, false, &present);
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
        let stream = check_template(cx, &p.key("stream"), self.stream.as_ref(), &STREAM);
        OpenObserveOptions {
            common,
            http,
            endpoint: endpoint.unwrap_or_else(|| {
                reqwest::Url::parse("http://127.0.0.1:5080/").unwrap_or_else(|_| unreachable!())
            }),
            org,
            stream,
            document: check_layout(cx, &p.key("document"), self.document.as_ref()),
        }
    }
}

impl NetworkSink for OpenObserveOptions {
    http_sink_types!(RawOpenObserveSink, OpenObserve);

    fn describe_target(&self, out: &mut String) -> fmt::Result {
        writeln!(
            out,
            "    sends JSON to {} (organization \"{}\", stream \"{}\"), {} documents",
            self.endpoint,
            self.org,
            self.stream.as_str(),
            self.document.as_str()
        )?;
        Ok(())
    }
}
