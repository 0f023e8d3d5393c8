//! The contract of a sink type.

use std::fmt;
use std::path::Path;

use toml::Spanned;

use super::{ComponentContext, Run};
use crate::checking::error::suggestion_suffix;
use crate::checking::{Checker, Env, NamedTable};
use crate::metrics::Metrics;

/// A sink type: implemented by the options its check produces.
pub(crate) trait Sink: fmt::Debug + Send + Sync {
    /// Checks the `[sinks.<name>]` table `t` (its `type` already read),
    /// `inputs` included.
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SinkEnv<'_>) -> Option<Self>
    where
        Self: Sized;
    /// The source names it sends.
    fn inputs(&self) -> &[String];
    /// The lines under the sink's name in `holdfast check`.
    fn describe(&self, out: &mut String) -> fmt::Result;
    /// Creates at 0 the series of its type's own families for the sink
    /// `name` (every sink's are created before: `Metrics::declare_sink`).
    fn declare_metrics(&self, name: &str, metrics: &Metrics);
    /// Registers its type's own group of metric families (declared in its
    /// folder with `families!`, reached with `Metrics::group`), once for
    /// the type, configured or not: the daemon calls it for every kind in
    /// list order, so `/metrics` lists the families in the same order on
    /// every start. A type with none keeps this default.
    fn register_families(_metrics: &Metrics)
    where
        Self: Sized,
    {
    }
    /// Starts the sink.
    fn run(&self, ctx: &ComponentContext) -> Run;
    /// The checks that need the machine (`Settings::check_environment`).
    fn check_environment(&self, name: &str, env: &mut Env<'_>);
    /// The local directory it writes and prunes, if it has one.
    fn output_dir(&self) -> Option<&Path> {
        None
    }
}

/// What a sink's check may need besides its own table.
pub(crate) struct SinkEnv<'a> {
    /// The checked `data_dir` (default output and quarantine directories).
    pub data_dir: &'a Path,
    /// Every source name in the file (so a broken source does not also
    /// break its sinks' inputs).
    pub declared_sources: &'a [String],
    /// A short hash of the config text, stored with quarantined events.
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
