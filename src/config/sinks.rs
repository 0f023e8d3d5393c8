//! `[sinks.<name>]`: where events go.
//!
//! Every sink has `inputs` (source names); the rest depends on `type`.
//! Adding a sink type takes a raw struct (with its own `inputs` field, since
//! `deny_unknown_fields` and `flatten` do not mix), the validated options
//! struct the sink runs with (the sink module's own, like
//! [`FileSinkOptions`]), a [`SinkKind`] variant and one arm in
//! [`check_sinks`] (plus its lines in `describe.rs`); the name is listed in
//! [`SINK_TYPES`].

use std::path::Path;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::check::{Checker, NamedTable};
use super::error::suggestion_suffix;
use super::network_sinks::{
    self, Place, RawElasticsearchSink, RawOpenObserveSink, RawOtlpHttpSink,
};
use super::units::{format_size, Count, Dur, Size};
use crate::sinks::file::FileSinkOptions;
use crate::sinks::{
    ElasticsearchOptions, HttpSinkOptions, OpenObserveOptions, OtlpHttpSinkOptions,
};

/// The `type` values a sink may have.
pub const SINK_TYPES: &[&str] = &["file", "otlp_http", "elasticsearch", "openobserve"];

/// One configured sink: a consumer of the log with its own cursor.
#[derive(Debug, Clone)]
pub struct SinkSettings {
    /// The table's name: 1-64 characters of `[A-Za-z0-9_-]`; also the name
    /// of its cursor in the log.
    pub name: String,
    /// Names of the sources whose events this sink sends; never empty, no
    /// repeats, each one a configured source.
    pub inputs: Vec<String>,
    /// What the sink is.
    pub kind: SinkKind,
}

/// The kinds of sink, by `type`.
#[derive(Debug, Clone)]
pub enum SinkKind {
    /// `type = "file"`: NDJSON files on local disk (the sink's own options,
    /// ready for [`sinks::file::run`](crate::sinks::file::run)).
    File(FileSinkOptions),
    /// `type = "otlp_http"`: OTLP/HTTP export
    /// ([`sinks::run_network`](crate::sinks::run_network)).
    OtlpHttp(OtlpHttpSinkOptions),
    /// `type = "elasticsearch"`: the `_bulk` API.
    Elasticsearch(ElasticsearchOptions),
    /// `type = "openobserve"`: OpenObserve's `_json` ingestion.
    OpenObserve(OpenObserveOptions),
}

impl SinkKind {
    /// The `type` value.
    pub fn type_name(&self) -> &'static str {
        match self {
            SinkKind::File(_) => "file",
            SinkKind::OtlpHttp(_) => "otlp_http",
            SinkKind::Elasticsearch(_) => "elasticsearch",
            SinkKind::OpenObserve(_) => "openobserve",
        }
    }

    /// The local directory this sink writes and prunes, if it has one.
    pub fn output_dir(&self) -> Option<&Path> {
        match self {
            SinkKind::File(f) => Some(&f.dir),
            _ => None,
        }
    }

    /// The options a network sink shares with the others; `None` for `file`.
    pub fn network(&self) -> Option<&HttpSinkOptions> {
        match self {
            SinkKind::File(_) => None,
            SinkKind::OtlpHttp(o) => Some(&o.common),
            SinkKind::Elasticsearch(o) => Some(&o.common),
            SinkKind::OpenObserve(o) => Some(&o.common),
        }
    }
}

/// Defaults of a file sink.
pub(crate) mod file_defaults {
    use std::time::Duration;
    pub const MAX_FILE_BYTES: u64 = 64 << 20;
    pub const MAX_BYTES: u64 = 1 << 30;
    pub const BATCH_MAX_EVENTS: u64 = 1000;
    pub const BATCH_TIMEOUT: Duration = Duration::from_secs(1);
}

/// `[sinks.<name>]` with `type = "file"`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFileSink {
    /// `"file"` (already read to choose this struct).
    #[serde(rename = "type")]
    _type: IgnoredAny,
    /// Source names. Required, non-empty.
    inputs: Option<Spanned<Vec<Spanned<String>>>>,
    /// Output directory. Default `<data_dir>/out/<name>`.
    path: Option<Spanned<String>>,
    /// Default `"64MiB"`; 1 KiB to 4 GiB.
    max_file_bytes: Option<Spanned<Size>>,
    /// Default `"1GiB"`; at least twice `max_file_bytes`.
    max_bytes: Option<Spanned<Size>>,
    /// Default 1000; 1 to 1 000 000.
    batch_max_events: Option<Spanned<Count>>,
    /// Default `"1s"`.
    batch_timeout: Option<Spanned<Dur>>,
}

/// Checks every `[sinks.<name>]` table. `declared_sources` holds every
/// source name in the file (so a broken source does not also break its
/// sinks' inputs).
pub(crate) fn check_sinks(
    cx: &mut Checker<'_>,
    data_dir: &Path,
    declared_sources: &[String],
) -> Vec<SinkSettings> {
    let (tables, _declared) = cx.named_tables("sinks", "sink", SINK_TYPES);
    let hash = network_sinks::config_hash(cx.src.text);
    let mut sinks = Vec::new();
    for t in &tables {
        macro_rules! network {
            ($raw:ty, $variant:ident) => {
                cx.deserialize::<$raw>(&t.key, t.value).map(|raw| {
                    let inputs = check_inputs(cx, t, raw.inputs.as_ref(), declared_sources);
                    let place = Place {
                        t,
                        data_dir,
                        inputs: inputs.clone(),
                        config_hash: &hash,
                    };
                    (inputs, SinkKind::$variant(raw.check(cx, &place)))
                })
            };
        }
        let parsed = match t.kind.as_str() {
            "file" => cx.deserialize::<RawFileSink>(&t.key, t.value).map(|raw| {
                let inputs = check_inputs(cx, t, raw.inputs.as_ref(), declared_sources);
                (
                    inputs.clone(),
                    SinkKind::File(raw.check(cx, t, data_dir, inputs)),
                )
            }),
            "otlp_http" => network!(RawOtlpHttpSink, OtlpHttp),
            "elasticsearch" => network!(RawElasticsearchSink, Elasticsearch),
            "openobserve" => network!(RawOpenObserveSink, OpenObserve),
            // `named_tables` let through only SINK_TYPES.
            _ => None,
        };
        if let Some((inputs, kind)) = parsed {
            sinks.push(SinkSettings {
                name: t.name.clone(),
                inputs,
                kind,
            });
        }
    }
    sinks
}

/// `inputs`: present, non-empty, no repeats, each naming a source.
fn check_inputs(
    cx: &mut Checker<'_>,
    t: &NamedTable<'_>,
    inputs: Option<&Spanned<Vec<Spanned<String>>>>,
    declared: &[String],
) -> Vec<String> {
    let key = format!("{}.inputs", t.key);
    let defined = if declared.is_empty() {
        "no sources are defined yet: add a [sources.<name>] table".to_string()
    } else {
        format!("sources defined: {}", declared.join(", "))
    };
    let Some(list) = inputs else {
        cx.error(
            Some(t.span()),
            &t.key,
            format!("missing `inputs`: list the sources this sink sends, like inputs = [\"syslog\"]; {defined}"),
        );
        return Vec::new();
    };
    cx.note(&key, list);
    if list.get_ref().is_empty() {
        cx.error(
            Some(list.span()),
            &key,
            format!("the inputs list is empty, so this sink would send nothing: name at least one source; {defined}"),
        );
        return Vec::new();
    }
    let mut out: Vec<String> = Vec::new();
    for (i, input) in list.get_ref().iter().enumerate() {
        let name = input.get_ref();
        let ikey = format!("{key}[{i}]");
        if !declared.contains(name) {
            let suggestion = suggestion_suffix(name, declared.iter().map(String::as_str), '"');
            cx.error(
                Some(input.span()),
                &ikey,
                format!("no source named \"{name}\"{suggestion}; {defined}"),
            );
        } else if out.contains(name) {
            cx.error(
                Some(input.span()),
                &ikey,
                format!("\"{name}\" is listed twice: each source is sent once; remove the repeat"),
            );
        } else {
            out.push(name.clone());
        }
    }
    out
}

impl RawFileSink {
    fn check(
        self,
        cx: &mut Checker<'_>,
        t: &NamedTable<'_>,
        data_dir: &Path,
        inputs: Vec<String>,
    ) -> FileSinkOptions {
        use file_defaults as d;
        let key = |k: &str| format!("{}.{k}", t.key);
        let dir = cx
            .path(&key("path"), self.path.as_ref())
            .unwrap_or_else(|| data_dir.join("out").join(&t.name));
        let errors_before = cx.error_count();
        let max_file_bytes = cx.size(
            &key("max_file_bytes"),
            self.max_file_bytes.as_ref(),
            d::MAX_FILE_BYTES,
            1 << 10,
            4 << 30,
        );
        let mut max_bytes = cx.size(
            &key("max_bytes"),
            self.max_bytes.as_ref(),
            d::MAX_BYTES,
            1,
            u64::MAX,
        );
        if max_bytes < 2 * max_file_bytes && cx.error_count() == errors_before {
            let (span, at) = match (&self.max_bytes, &self.max_file_bytes) {
                (Some(v), _) => (Some(v.span()), key("max_bytes")),
                (None, Some(v)) => (Some(v.span()), key("max_file_bytes")),
                (None, None) => (Some(t.span()), t.key.clone()),
            };
            cx.error(
                span,
                &at,
                format!(
                    "max_bytes ({}) must be at least twice max_file_bytes ({}): the file being \
                     written is never removed, so the sink needs room for at least one more; raise \
                     max_bytes to {} or more, or lower max_file_bytes",
                    format_size(max_bytes),
                    format_size(max_file_bytes),
                    format_size(2 * max_file_bytes)
                ),
            );
        }
        max_bytes = max_bytes.max(2 * max_file_bytes);
        let batch_max_events = cx.count(
            &key("batch_max_events"),
            self.batch_max_events.as_ref(),
            d::BATCH_MAX_EVENTS,
            1,
            1_000_000,
        );
        let batch_timeout = cx.duration(
            &key("batch_timeout"),
            self.batch_timeout.as_ref(),
            d::BATCH_TIMEOUT,
            Some("use a small value like \"100ms\" to write sooner"),
        );
        FileSinkOptions {
            dir,
            inputs,
            max_file_bytes,
            max_bytes,
            batch_max_events: batch_max_events as usize,
            batch_timeout,
        }
    }
}
