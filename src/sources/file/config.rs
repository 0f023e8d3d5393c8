//! `[sources.<name>]` with `type = "file"`: the table as written, its check
//! (producing the [`FileSourceOptions`] the source runs with) and its lines
//! in `holdfast check`.

use std::fmt::{self, Write};

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::metrics::{FileSourceMetrics, FILE_SOURCE_DROP_REASONS};
use super::{FileSourceOptions, FollowSymlinks, Multiline, StartAt};
use crate::checking::raw::one_of_newtype;
use crate::checking::units::{format_duration, format_size, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Processing, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::sources::raw::raw_source;

/// Defaults, in the units the checks use (the source's own constants).
mod d {
    use std::time::Duration;

    use super::super::*;
    pub const SCAN_INTERVAL: Duration = DEFAULT_SCAN_INTERVAL;
    pub const FINGERPRINT_BYTES: u64 = DEFAULT_FINGERPRINT_BYTES as u64;
    pub const FINGERPRINT_BYTES_MIN: u64 = *FINGERPRINT_BYTES_RANGE.start() as u64;
    pub const FINGERPRINT_BYTES_MAX: u64 = *FINGERPRINT_BYTES_RANGE.end() as u64;
    pub const ROTATE_WAIT: Duration = DEFAULT_ROTATE_WAIT;
    pub const IDLE_CLOSE: Duration = DEFAULT_IDLE_CLOSE;
    pub const MAX_LINE_BYTES: u64 = DEFAULT_MAX_LINE_BYTES as u64;
    pub const LINE_IDLE_TIMEOUT: Duration = DEFAULT_LINE_IDLE_TIMEOUT;
    pub const MULTILINE_TIMEOUT: Duration = DEFAULT_MULTILINE_TIMEOUT;
}

/// Room left in a segment beside a line for the event's own fields (id,
/// source, path, timestamps).
const EVENT_OVERHEAD: u64 = 4 << 10;

one_of_newtype! {
    /// `start_at`, as written.
    RawStartAt(StartAt) {
        "beginning" => StartAt::Beginning,
        "end" => StartAt::End,
    }
}

one_of_newtype! {
    /// `follow_symlinks`, as written.
    RawFollowSymlinks(FollowSymlinks) {
        "inside" => FollowSymlinks::Inside,
        "always" => FollowSymlinks::Always,
        "never" => FollowSymlinks::Never,
    }
}

raw_source! {
    /// `[sources.<name>]` with `type = "file"`, as written.
    pub(crate) struct RawFileSource {
        /// Glob patterns of files to tail. Required, non-empty.
        include: Vec<Spanned<String>>,
        /// Glob patterns to skip. Default: none.
        exclude: Vec<Spanned<String>>,
        /// `"beginning"` or `"end"`. Default `"end"`.
        start_at: RawStartAt,
        /// Default `"10s"`.
        scan_interval: Dur,
        /// Default `"1KiB"`; 16 B to 1 MiB.
        fingerprint_bytes: Size,
        /// Default `"5s"`: a rotated file is read until idle this long.
        rotate_wait: Dur,
        /// Default `"5m"`.
        idle_close: Dur,
        /// `"inside"`, `"always"` or `"never"`. Default `"inside"`: a
        /// symlink is read only if its target lies inside a directory the
        /// include globs name.
        follow_symlinks: RawFollowSymlinks,
        /// Default `"256KiB"`; at most `log.segment_size` − 4 KiB.
        max_line_bytes: Size,
        /// Default `"5s"`.
        line_idle_timeout: Dur,
        /// Default: absent, one event per line.
        multiline: RawMultiline,
        /// Default: absent, lines as read (checked by `src/process/config.rs`).
        #[serde(rename = "process")]
        _process: IgnoredAny,
    }
}

/// `multiline.*`, as written.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a table with start_pattern and timeout"
)]
struct RawMultiline {
    /// A regex (Rust `regex` syntax) matching the first line of an event.
    /// Required when `multiline` is present.
    start_pattern: Option<Spanned<String>>,
    /// Default `"1s"`.
    timeout: Option<Spanned<Dur>>,
}

impl RawFileSource {
    fn check<'a>(
        self,
        cx: &mut Checker<'a>,
        t: &NamedTable<'a>,
        env: &SourceEnv<'_>,
    ) -> FileSourceOptions {
        let log = env.log;
        let key = |k: &str| format!("{}.{k}", t.key);

        let mut include = Vec::new();
        match &self.include {
            None => cx.error(
                Some(t.span()),
                &t.key,
                "missing `include`: list the files to tail as globs, like include = [\"/var/log/syslog\", \"/var/log/*.log\"]",
            ),
            Some(list) if list.get_ref().is_empty() => cx.error(
                Some(list.span()),
                &key("include"),
                "the include list is empty, so this source would read nothing: list at least one \
                 file or glob, like [\"/var/log/*.log\"]",
            ),
            Some(list) => {
                cx.note(&key("include"), list);
                include = patterns(cx, &key("include"), list.get_ref());
            }
        }
        let exclude = match &self.exclude {
            Some(list) => patterns(cx, &key("exclude"), list.get_ref()),
            None => Vec::new(),
        };
        let start_at = match &self.start_at {
            Some(v) => {
                cx.note(&key("start_at"), v);
                v.get_ref().0
            }
            None => StartAt::End,
        };
        let scan_interval = cx.duration(
            &key("scan_interval"),
            self.scan_interval.as_ref(),
            d::SCAN_INTERVAL,
            Some("a zero interval would scan the directories in a busy loop"),
        );
        let fingerprint_bytes = cx.size(
            &key("fingerprint_bytes"),
            self.fingerprint_bytes.as_ref(),
            d::FINGERPRINT_BYTES,
            d::FINGERPRINT_BYTES_MIN,
            d::FINGERPRINT_BYTES_MAX,
        );
        let rotate_wait = cx.duration(
            &key("rotate_wait"),
            self.rotate_wait.as_ref(),
            d::ROTATE_WAIT,
            Some(
                "a rotated file would be dropped before its writer finished, losing its last lines",
            ),
        );
        let idle_close = cx.duration(
            &key("idle_close"),
            self.idle_close.as_ref(),
            d::IDLE_CLOSE,
            Some("files would be closed and reopened on every read"),
        );
        let follow_symlinks = match &self.follow_symlinks {
            Some(v) => {
                cx.note(&key("follow_symlinks"), v);
                v.get_ref().0
            }
            None => FollowSymlinks::Inside,
        };
        let segment_room = log
            .segment_bytes
            .min(64 << 20)
            .saturating_sub(EVENT_OVERHEAD);
        let mut max_line_bytes = cx.size(
            &key("max_line_bytes"),
            self.max_line_bytes.as_ref(),
            d::MAX_LINE_BYTES,
            64,
            u64::MAX,
        );
        if max_line_bytes > segment_room {
            let span = self
                .max_line_bytes
                .as_ref()
                .map(|v| v.span())
                .or(Some(t.span()));
            let default = if self.max_line_bytes.is_none() {
                " (the default)"
            } else {
                ""
            };
            cx.error(
                span,
                &key("max_line_bytes"),
                format!(
                    "a line of {}{default} would not fit in one log segment: an event must fit in a segment \
                     (log.segment_size = {}, less {} for the event's own fields); lower \
                     max_line_bytes to {} or less, or raise log.segment_size",
                    format_size(max_line_bytes),
                    format_size(log.segment_bytes),
                    format_size(EVENT_OVERHEAD),
                    format_size(segment_room)
                ),
            );
            max_line_bytes = segment_room;
        }
        let line_idle_timeout = cx.duration(
            &key("line_idle_timeout"),
            self.line_idle_timeout.as_ref(),
            d::LINE_IDLE_TIMEOUT,
            Some("a line still being written would be cut in two"),
        );
        let multiline = self.multiline.as_ref().and_then(|m| {
            let mkey = key("multiline");
            let timeout = cx.duration(
                &format!("{mkey}.timeout"),
                m.get_ref().timeout.as_ref(),
                d::MULTILINE_TIMEOUT,
                Some("every line would be emitted on its own"),
            );
            let Some(pattern) = &m.get_ref().start_pattern else {
                cx.error(
                    Some(m.span()),
                    &mkey,
                    "multiline needs start_pattern: a regex matching the first line of each event, \
                     like multiline.start_pattern = '^\\S' (lines starting with a non-blank); or \
                     remove multiline",
                );
                return None;
            };
            let pkey = format!("{mkey}.start_pattern");
            cx.note(&pkey, pattern);
            match regex::Regex::new(pattern.get_ref()) {
                Ok(start_pattern) => Some(Multiline {
                    start_pattern,
                    timeout,
                }),
                Err(e) => {
                    cx.error(
                        Some(pattern.span()),
                        &pkey,
                        format!(
                            "not a valid regular expression (Rust regex syntax; in TOML, write it \
                             in 'single quotes' so backslashes stay as they are):\n{e}"
                        ),
                    );
                    None
                }
            }
        });
        FileSourceOptions {
            include,
            exclude,
            start_at,
            scan_interval,
            fingerprint_bytes: fingerprint_bytes as usize,
            rotate_wait,
            idle_close,
            follow_symlinks,
            max_line_bytes: max_line_bytes as usize,
            line_idle_timeout,
            multiline,
            checkpoint_dir: env.data_dir.join("checkpoints").join(&t.name),
            process: crate::process::config::check(cx, t),
        }
    }
}

/// Glob patterns, each non-empty and resolved against the config's
/// directory.
fn patterns(cx: &mut Checker<'_>, key: &str, list: &[Spanned<String>]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, p) in list.iter().enumerate() {
        if p.get_ref().trim().is_empty() {
            cx.error(
                Some(p.span()),
                &format!("{key}[{i}]"),
                "an empty pattern matches nothing: remove it or write a path or glob",
            );
            continue;
        }
        cx.note(&format!("{key}[{i}]"), p);
        out.push(cx.resolve(p.get_ref()).to_string_lossy().into_owned());
    }
    out
}

impl Source for FileSourceOptions {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawFileSource>(&t.key, t.value)
            .map(|raw| raw.check(cx, t, env))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let f = self;
        writeln!(out, "    tails {}", f.include.join(", "))?;
        if !f.exclude.is_empty() {
            writeln!(out, "    except {}", f.exclude.join(", "))?;
        }
        let start = match f.start_at {
            StartAt::Beginning => "from their first line (backfill)",
            StartAt::End => "from their end (only lines written from then on)",
        };
        writeln!(out, "    files found on the first start are read {start}")?;
        writeln!(
            out,
            "    looks for new and rotated files every {}; keeps reading a rotated file until idle for {}; \
             closes files idle for {}",
            format_duration(f.scan_interval),
            format_duration(f.rotate_wait),
            format_duration(f.idle_close)
        )?;
        writeln!(
            out,
            "    lines up to {} (longer ones are truncated and marked); a last line without newline is sent \
             after {} idle; files are told apart by their first {}",
            format_size(f.max_line_bytes as u64),
            format_duration(f.line_idle_timeout),
            format_size(f.fingerprint_bytes as u64)
        )?;
        let links = match f.follow_symlinks {
            FollowSymlinks::Inside => {
                "symlinks read only when their target lies inside the globs' directories"
            }
            FollowSymlinks::Always => {
                "symlinks read wherever they lead (follow_symlinks = \"always\")"
            }
            FollowSymlinks::Never => "symlinks never read",
        };
        writeln!(out, "    only regular files are read; {links}")?;
        if let Some(m) = &f.multiline {
            writeln!(
                out,
                "    multiline: a line matching '{}' starts an event, others continue it; \
                 an event is sent {} after its last line",
                m.start_pattern.as_str(),
                format_duration(m.timeout)
            )?;
        }
        if let Some(chain) = &f.process {
            crate::process::config::describe(chain, out)?;
        }
        Ok(())
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<FileSourceMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.group::<FileSourceMetrics>().declare(name);
        metrics.declare_source_drops(name, FILE_SOURCE_DROP_REASONS);
    }

    fn processing(&self) -> Option<Processing<'_>> {
        Some(Processing {
            chain: self.process.as_ref(),
            unit: "lines",
        })
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run_in(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        for (i, pattern) in self.include.iter().enumerate() {
            env.tail_target(&format!("sources.{name}.include[{i}]"), pattern);
        }
    }

    fn tails(&self) -> &[String] {
        &self.include
    }

    fn hold(&self, name: &str) -> Option<String> {
        Some(super::hold_name(name))
    }
}
