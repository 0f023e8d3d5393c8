//! `[sources.<name>]` with `type = "prometheus_scrape"`: the settings the
//! scraper runs with, the table as written, its check and its lines in
//! `holdfast check`.

use std::collections::BTreeMap;
use std::fmt::{self, Write};
use std::path::PathBuf;
use std::time::Duration;

use toml::Spanned;

use super::metrics::{ScrapeMetrics, SCRAPE_DROP_REASONS};
use super::parse::{Limits, DEFAULT_MAX_LABELS, DEFAULT_MAX_LABEL_BYTES, DEFAULT_MAX_SAMPLES};
use crate::checking::raw::raw_table;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable, Severity};
use crate::component::{ComponentContext, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::raw::raw_source;

/// `type = "prometheus_scrape"`: scrape Prometheus targets.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// Static targets, each a whole URL (`scheme://host:port/path`).
    pub targets: Vec<reqwest::Url>,
    /// A Prometheus file_sd JSON file of more targets, read again when its
    /// modification time changes.
    pub targets_file: Option<PathBuf>,
    pub interval: Duration,
    pub timeout: Duration,
    pub honor_labels: bool,
    /// Target labels added to every series (before a targets file's own).
    pub labels: Vec<(String, String)>,
    /// The largest body read (after gzip decoding too).
    pub max_body_bytes: usize,
    pub limits: Limits,
    pub tls: ScrapeTls,
    /// A file holding the bearer token sent to every target.
    pub bearer_token_file: Option<PathBuf>,
}

/// TLS to the targets: CA certificates besides the system's, and a client
/// certificate.
#[derive(Debug, Clone, Default)]
pub struct ScrapeTls {
    pub ca_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
}

pub(super) mod defaults {
    use std::time::Duration;
    pub const INTERVAL: Duration = Duration::from_secs(15);
    pub const TIMEOUT: Duration = Duration::from_secs(10);
    pub const MAX_BODY_BYTES: u64 = 16 << 20;
}

raw_table! {
    /// `tls.*`, as written.
    RawScrapeTls, "a table with ca_file, client_cert_file and client_key_file" {
        /// PEM CA certificates to trust besides the system's.
        ca_file: String,
        /// PEM certificate chain, leaf first, presented to the targets;
        /// needs `client_key_file`.
        client_cert_file: String,
        /// The PEM private key of `client_cert_file`.
        client_key_file: String,
    }
}

raw_source! {
    /// `[sources.<name>]` with `type = "prometheus_scrape"`, as written.
    struct RawScrapeSource {
        /// URLs to scrape, like `"http://127.0.0.1:9100/metrics"`. Default: none.
        targets: Vec<Spanned<String>>,
        /// A Prometheus file_sd JSON file of targets. Default: none.
        targets_file: String,
        /// Default `"15s"`.
        interval: Dur,
        /// Default `"10s"`, and less than `interval`.
        timeout: Dur,
        /// Default `false`.
        honor_labels: bool,
        /// Target labels. Default: none.
        labels: BTreeMap<String, String>,
        /// Default `"16MiB"`; 1 KiB to 1 GiB.
        max_body_size: Size,
        /// Default 100000; 1 to 10000000.
        max_samples: Count,
        /// Default 64; 1 to 1024.
        max_labels: Count,
        /// Default `"4KiB"`; 16 bytes to 1 MiB.
        max_label_size: Size,
        /// Default: absent (the system's CA certificates, no client certificate).
        tls: RawScrapeTls,
        /// Default: absent, no `Authorization` header.
        bearer_token_file: String,
    }
}

/// A label name as Prometheus allows it.
pub(super) fn is_label_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// A target's whole URL, or why it is not one.
pub(super) fn target_url(s: &str) -> Result<reqwest::Url, String> {
    if !s.contains("://") {
        return Err(format!("{s:?} is not a URL (no scheme)"));
    }
    let url = reqwest::Url::parse(s).map_err(|e| format!("{s:?} is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{s:?}: only http:// and https:// targets can be scraped"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("{s:?} names no host"));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(format!(
            "{s:?} holds credentials: remove them from the URL and use bearer_token_file"
        ));
    }
    Ok(url)
}

impl RawScrapeSource {
    fn check(self, cx: &mut Checker<'_>, t: &NamedTable<'_>) -> ScrapeSettings {
        let key = |k: &str| format!("{}.{k}", t.key);
        let mut targets = Vec::new();
        if let Some(list) = &self.targets {
            cx.note(&key("targets"), list);
            for target in list.get_ref() {
                match target_url(target.get_ref()) {
                    Ok(url) => targets.push(url),
                    Err(why) => cx.error(
                        Some(target.span()),
                        &key("targets"),
                        format!("{why}; write a URL like \"http://127.0.0.1:9100/metrics\""),
                    ),
                }
            }
        }
        let targets_file = cx.path(&key("targets_file"), self.targets_file.as_ref());
        if targets.is_empty() && targets_file.is_none() {
            cx.error(
                Some(t.span()),
                &key("targets"),
                "a prometheus_scrape source needs targets: set targets = \
                 [\"http://127.0.0.1:9100/metrics\"] or targets_file",
            );
        }
        let interval = cx.duration(
            &key("interval"),
            self.interval.as_ref(),
            defaults::INTERVAL,
            Some("targets would be scraped without pause"),
        );
        let mut timeout = cx.duration(
            &key("timeout"),
            self.timeout.as_ref(),
            defaults::TIMEOUT.min(interval),
            Some("every scrape would time out"),
        );
        if timeout > interval {
            cx.error(
                self.timeout.as_ref().map(|v| v.span()).or(Some(t.span())),
                &key("timeout"),
                format!(
                    "a timeout of {} is longer than the interval of {}: a scrape must end \
                     before the next begins; lower timeout or raise interval",
                    format_duration(timeout),
                    format_duration(interval)
                ),
            );
            timeout = interval;
        }
        let mut labels = Vec::new();
        if let Some(l) = &self.labels {
            cx.note(&key("labels"), l);
            for (name, value) in l.get_ref() {
                if !is_label_name(name) || name.starts_with("__") {
                    cx.error(
                        Some(l.span()),
                        &key("labels"),
                        format!(
                            "{name:?} is not a label name: letters, digits and _, not starting \
                             with a digit nor with __"
                        ),
                    );
                } else {
                    labels.push((name.clone(), value.clone()));
                }
            }
        }
        let max_body_bytes = cx.size(
            &key("max_body_size"),
            self.max_body_size.as_ref(),
            defaults::MAX_BODY_BYTES,
            1 << 10,
            1 << 30,
        ) as usize;
        let limits = Limits {
            max_samples: cx.count(
                &key("max_samples"),
                self.max_samples.as_ref(),
                DEFAULT_MAX_SAMPLES as u64,
                1..=10_000_000,
            ) as usize,
            max_labels: cx.count(
                &key("max_labels"),
                self.max_labels.as_ref(),
                DEFAULT_MAX_LABELS as u64,
                1..=1024,
            ) as usize,
            max_label_bytes: cx.size(
                &key("max_label_size"),
                self.max_label_size.as_ref(),
                DEFAULT_MAX_LABEL_BYTES as u64,
                16,
                1 << 20,
            ) as usize,
        };
        let mut tls = ScrapeTls::default();
        if let Some(raw) = &self.tls {
            let raw = raw.get_ref();
            let tkey = |k: &str| key(&format!("tls.{k}"));
            tls.ca_file = cx.path(&tkey("ca_file"), raw.ca_file.as_ref());
            tls.client_cert_file =
                cx.path(&tkey("client_cert_file"), raw.client_cert_file.as_ref());
            tls.client_key_file = cx.path(&tkey("client_key_file"), raw.client_key_file.as_ref());
            for (set, name, other) in [
                (&raw.client_cert_file, "client_cert_file", "client_key_file"),
                (&raw.client_key_file, "client_key_file", "client_cert_file"),
            ] {
                if let (Some(v), true) = (
                    set,
                    tls.client_cert_file.is_some() != tls.client_key_file.is_some(),
                ) {
                    cx.error(
                        Some(v.span()),
                        &tkey(name),
                        format!("{name} needs {other}: set both, or neither"),
                    );
                }
            }
        }
        let bearer_token_file = cx.path(&key("bearer_token_file"), self.bearer_token_file.as_ref());
        ScrapeSettings {
            targets,
            targets_file,
            interval,
            timeout,
            honor_labels: self.honor_labels.map(|v| *v.get_ref()).unwrap_or(false),
            labels,
            max_body_bytes,
            limits,
            tls,
            bearer_token_file,
        }
    }
}

impl Source for ScrapeSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, _env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawScrapeSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let mut what: Vec<String> = self.targets.iter().map(|u| u.to_string()).collect();
        if let Some(f) = &self.targets_file {
            what.push(format!(
                "the targets in {} (read again when it changes)",
                f.display()
            ));
        }
        writeln!(
            out,
            "    scrapes {} every {} (timeout {})",
            what.join(", "),
            format_duration(self.interval),
            format_duration(self.timeout)
        )?;
        if !self.labels.is_empty() {
            let l: Vec<String> = self
                .labels
                .iter()
                .map(|(k, v)| format!("{k}={v:?}"))
                .collect();
            writeln!(out, "    adds labels {}", l.join(", "))?;
        }
        writeln!(
            out,
            "    on a clash keeps {} labels; bodies up to {}, {} samples of up to {} labels",
            if self.honor_labels {
                "the scraped"
            } else {
                "the target's"
            },
            format_size(self.max_body_bytes as u64),
            self.limits.max_samples,
            self.limits.max_labels
        )
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<ScrapeMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.group::<ScrapeMetrics>().declare(name);
        metrics.declare_source_drops(name, SCRAPE_DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let files = [
            ("tls.ca_file", &self.tls.ca_file),
            ("tls.client_cert_file", &self.tls.client_cert_file),
            ("tls.client_key_file", &self.tls.client_key_file),
            ("bearer_token_file", &self.bearer_token_file),
            ("targets_file", &self.targets_file),
        ];
        for (key, path) in files {
            if let Some(p) = path {
                if let Err(e) = std::fs::metadata(p) {
                    env.push(
                        Severity::Warning,
                        &format!("sources.{name}.{key}"),
                        format!("cannot read {}: {e}", p.display()),
                    );
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {

    /// The errors `check` gives for `source` (after `[sources.s]`), by key.
    fn errors(source: &str) -> Vec<(String, String)> {
        let text = format!(
            "[sources.s]\ntype = \"prometheus_scrape\"\n{source}\n\n[sinks.out]\ntype = \"file\"\ninputs = [\"s\"]\npath = \"/tmp/x\"\n"
        );
        crate::config::error_messages(&text)
    }

    #[test]
    fn a_good_table_passes_with_its_defaults() {
        assert_eq!(errors("targets = [\"http://127.0.0.1:9100/metrics\"]"), []);
        assert_eq!(
            errors("targets_file = \"targets.json\"\nlabels = { site = \"p3\", job = \"edge\" }\nhonor_labels = true\ntls.ca_file = \"/ca.pem\""),
            []
        );
    }

    #[test]
    fn mistakes_are_named_at_their_key() {
        let cases = [
            ("", "sources.s.targets", "needs targets"),
            (
                "targets = [\"127.0.0.1:9100\"]",
                "sources.s.targets",
                "not a URL",
            ),
            (
                "targets = [\"ftp://h:1/m\"]",
                "sources.s.targets",
                "only http://",
            ),
            (
                "targets = [\"http://u:p@h:1/m\"]",
                "sources.s.targets",
                "bearer_token_file",
            ),
            (
                "targets = [\"http://h:1/m\"]\ninterval = \"5s\"\ntimeout = \"10s\"",
                "sources.s.timeout",
                "longer than the interval",
            ),
            (
                "targets = [\"http://h:1/m\"]\ninterval = \"0s\"",
                "sources.s.interval",
                "greater than zero",
            ),
            (
                "targets = [\"http://h:1/m\"]\nlabels = { \"a-b\" = \"1\" }",
                "sources.s.labels",
                "not a label name",
            ),
            (
                "targets = [\"http://h:1/m\"]\nlabels = { __x = \"1\" }",
                "sources.s.labels",
                "not a label name",
            ),
            (
                "targets = [\"http://h:1/m\"]\nmax_samples = 0",
                "sources.s.max_samples",
                "out of range",
            ),
            (
                "targets = [\"http://h:1/m\"]\nmax_body_size = \"10B\"",
                "sources.s.max_body_size",
                "too small",
            ),
            (
                "targets = [\"http://h:1/m\"]\ntls.client_cert_file = \"/c.pem\"",
                "sources.s.tls.client_cert_file",
                "needs client_key_file",
            ),
            (
                "targets = [\"http://h:1/m\"]\nscrape_interval = \"1s\"",
                "sources.s.scrape_interval",
                "unknown key",
            ),
        ];
        for (table, key, fragment) in cases {
            let found = errors(table);
            assert!(
                found.iter().any(|(k, m)| k == key && m.contains(fragment)),
                "{table:?}: wanted {key}: …{fragment}…, got {found:?}"
            );
        }
    }
}
