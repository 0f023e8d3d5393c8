//! `[sinks.<name>]` with `type = "file"`: the table as written, its check
//! (producing the [`FileSinkOptions`] the sink runs with) and its lines in
//! `holdfast check`.

use std::fmt::{self, Write};
use std::path::Path;

use serde::de::IgnoredAny;
use toml::Spanned;

use super::FileSinkOptions;
use crate::checking::raw::raw_table;
use crate::checking::units::{format_duration, format_size, room_for_two, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Run, Sink, SinkEnv};
use crate::metrics::Metrics;

/// Defaults of a file sink.
mod file_defaults {
    use std::time::Duration;
    pub const MAX_FILE_BYTES: u64 = 64 << 20;
    pub const MAX_BYTES: u64 = 1 << 30;
    pub const BATCH_MAX_EVENTS: u64 = 1000;
    pub const BATCH_TIMEOUT: Duration = Duration::from_secs(1);
}

raw_table! {
    /// `[sinks.<name>]` with `type = "file"`, as written.
    RawFileSink, "a table like [sinks.<name>]" {
        /// `"file"` (already read to choose this struct).
        #[serde(rename = "type")]
        _type: IgnoredAny,
        /// Source names. Required, non-empty.
        inputs: Vec<Spanned<String>>,
        /// Output directory. Default `<data_dir>/out/<name>`.
        path: String,
        /// Default `"64MiB"`; 1 KiB to 4 GiB.
        max_file_bytes: Size,
        /// Default `"1GiB"`; at least twice `max_file_bytes`.
        max_bytes: Size,
        /// Default 1000; 1 to 1 000 000.
        batch_max_events: Count,
        /// Default `"1s"`.
        batch_timeout: Dur,
    }
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
                room_for_two(
                    ("max_bytes", max_bytes),
                    ("max_file_bytes", max_file_bytes),
                    "the file being written is never removed, so the sink needs room for at \
                     least one more",
                    "max_file_bytes",
                ),
            );
        }
        max_bytes = max_bytes.max(2 * max_file_bytes);
        let batch_max_events = cx.count(
            &key("batch_max_events"),
            self.batch_max_events.as_ref(),
            d::BATCH_MAX_EVENTS,
            1..=1_000_000,
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

impl Sink for FileSinkOptions {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SinkEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawFileSink>(&t.key, t.value).map(|raw| {
            let inputs = env.check_inputs(cx, t, raw.inputs.as_ref());
            raw.check(cx, t, env.data_dir, inputs)
        })
    }

    fn inputs(&self) -> &[String] {
        &self.inputs
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let f = self;
        writeln!(out, "    writes NDJSON files to {}", f.dir.display())?;
        writeln!(
            out,
            "    files up to {}; the oldest files are removed beyond {} in total (their events \
                 counted as dropped)",
            format_size(f.max_file_bytes),
            format_size(f.max_bytes)
        )?;
        writeln!(
            out,
            "    writes batches of up to {} events, at least every {}",
            f.batch_max_events,
            format_duration(f.batch_timeout)
        )?;
        Ok(())
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.sinks.declare_local(name);
        metrics.declare_sink_drops(name, DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        ctx.start(self.clone(), super::run)
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        env.writable_dir(&format!("sinks.{name}.path"), &self.dir);
    }

    fn output_dir(&self) -> Option<&Path> {
        Some(&self.dir)
    }
}

/// Every `reason` of `holdfast_dropped_events_total` for a `file` sink (its
/// oldest output files removed at `max_bytes`).
pub const DROP_REASONS: &[&str] = &["output_retention"];
