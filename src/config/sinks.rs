//! `[sinks.<name>]`: where events go. The tables are read here by name
//! and type, and every sink's `inputs` is checked here; each type's own
//! keys, check and description live with the sink (its `config.rs`), found
//! through [`crate::registry`].

use std::path::Path;

use toml::Spanned;

use super::check::{Checker, NamedTable};
use super::error::suggestion_suffix;
use crate::registry::{SinkKind, SINK_TYPES};

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

/// What a sink's check may need besides its own table.
pub(crate) struct SinkEnv<'a> {
    /// The checked `data_dir` (default output and quarantine directories).
    pub data_dir: &'a Path,
    /// Every source name in the file (so a broken source does not also
    /// break its sinks' inputs).
    pub declared_sources: &'a [String],
    /// [`config_hash`] of the file, stored with quarantined events.
    pub config_hash: &'a str,
}

impl SinkEnv<'_> {
    /// Checks a sink's `inputs` against the declared sources.
    pub(crate) fn check_inputs(
        &self,
        cx: &mut Checker<'_>,
        t: &NamedTable<'_>,
        inputs: Option<&Spanned<Vec<Spanned<String>>>>,
    ) -> Vec<String> {
        check_inputs(cx, t, inputs, self.declared_sources)
    }
}

/// Checks every `[sinks.<name>]` table. `declared_sources` holds every
/// source name in the file.
pub(crate) fn check_sinks(
    cx: &mut Checker<'_>,
    data_dir: &Path,
    declared_sources: &[String],
) -> Vec<SinkSettings> {
    let (tables, _declared) = cx.named_tables("sinks", "sink", SINK_TYPES);
    let hash = config_hash(cx.src.text);
    let env = SinkEnv {
        data_dir,
        declared_sources,
        config_hash: &hash,
    };
    let mut sinks = Vec::new();
    for t in &tables {
        if let Some(kind) = SinkKind::check(cx, t, &env) {
            sinks.push(SinkSettings {
                name: t.name.clone(),
                inputs: kind.component().inputs().to_vec(),
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

/// A short hash of the config text, stored with quarantined events so an
/// operator can tell which config rejected them.
pub(crate) fn config_hash(text: &str) -> String {
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}
