//! `[sources.<name>]` with `type = "journald"`: the table as written, its
//! check (producing the [`JournaldOptions`] the source runs with) and its
//! lines in `holdfast check`.

use std::fmt::{self, Write};

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

use super::{JournaldOptions, Journals, Selection, StartAt, DEFAULT_MAX_ENTRY_BYTES};
use crate::checking::raw::one_of_newtype;
use crate::checking::units::{format_size, Size};
use crate::checking::{Checker, Env, NamedTable, Severity};
use crate::component::{ComponentContext, Run, Source, SourceEnv};
use crate::metrics::Metrics;

one_of_newtype! {
    /// `start_at`, as written.
    RawStartAt(StartAt) {
        "beginning" => StartAt::Beginning,
        "end" => StartAt::End,
    }
}

one_of_newtype! {
    /// `min_priority`, as written: a syslog severity name.
    RawPriority(u8) {
        "emerg" => 0,
        "alert" => 1,
        "crit" => 2,
        "err" => 3,
        "warning" => 4,
        "notice" => 5,
        "info" => 6,
        "debug" => 7,
    }
}

/// Why a build without the `journald` feature (no libsystemd) refuses a
/// `journald` source.
pub(super) const NOT_BUILT: &str = "this holdfast was built without the `journald` feature \
    (no libsystemd), so it cannot read the systemd journal: use a holdfast built with default \
    features (the .deb is), or remove this source; on a machine without systemd, read its log \
    files with a `file` source or receive its syslog with a `syslog` source";

/// Room in a segment beside an entry for its event's own fields.
const EVENT_OVERHEAD: u64 = 8 << 10;

/// `[sources.<name>]` with `type = "journald"`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawJournaldSource {
    /// `"journald"` (already read to choose this struct); where it is
    /// written is where a build without the feature says so.
    #[serde(rename = "type")]
    type_: Spanned<IgnoredAny>,
    /// A journal directory to read instead of the system's. Default: the
    /// system and user journals this user may read.
    directory: Option<Spanned<String>>,
    /// Journal files to read instead of the system's. Default: none.
    files: Option<Vec<Spanned<String>>>,
    /// Only these systemd units. Default: all.
    units: Option<Vec<Spanned<String>>>,
    /// Skip these systemd units. Default: none.
    exclude_units: Option<Vec<Spanned<String>>>,
    /// `"emerg"` … `"debug"`: only entries this severe or more. Default: all.
    min_priority: Option<Spanned<RawPriority>>,
    /// Journal matches, `"FIELD=value"`, `"+"` between alternatives (as
    /// journalctl takes them). Default: none.
    matches: Option<Vec<Spanned<String>>>,
    /// Only this boot's entries. Default `false`.
    current_boot_only: Option<bool>,
    /// `"beginning"` or `"end"` (first start only). Default `"end"`.
    start_at: Option<Spanned<RawStartAt>>,
    /// More journal fields to keep as attributes. Default: none.
    fields: Option<Vec<Spanned<String>>>,
    /// Default `"2MiB"`; larger entries are cut and marked.
    max_entry_bytes: Option<Spanned<Size>>,
}

/// A journal field name as journald allows it: upper-case letters, digits
/// and `_`, not starting with a digit.
fn is_field_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
}

impl RawJournaldSource {
    fn check(
        self,
        cx: &mut Checker<'_>,
        t: &NamedTable<'_>,
        env: &SourceEnv<'_>,
    ) -> JournaldOptions {
        let key = |k: &str| format!("{}.{k}", t.key);
        let strings = |cx: &mut Checker<'_>, k: &str, v: &Option<Vec<Spanned<String>>>| {
            let mut out = Vec::new();
            for s in v.iter().flatten() {
                cx.note(&key(k), s);
                if s.get_ref().trim().is_empty() {
                    cx.error(Some(s.span()), &key(k), "must not hold an empty string");
                } else {
                    out.push(s.get_ref().clone());
                }
            }
            out
        };
        let directory = cx.path(&key("directory"), self.directory.as_ref());
        let files: Vec<_> = self
            .files
            .iter()
            .flatten()
            .filter_map(|f| cx.path(&key("files"), Some(f)))
            .collect();
        if directory.is_some() && !files.is_empty() {
            cx.error(
                self.directory.as_ref().map(|d| d.span()),
                &key("directory"),
                "directory and files cannot both be set: the journal is read from one or the \
                 other; keep one",
            );
        }
        let units = strings(cx, "units", &self.units);
        let exclude_units = strings(cx, "exclude_units", &self.exclude_units);
        let matches = strings(cx, "matches", &self.matches);
        for m in self.matches.iter().flatten() {
            let field = m.get_ref().split_once('=').map(|(f, _)| f);
            // `+` between matches: either side (as journalctl takes it).
            if m.get_ref() != "+" && !field.is_some_and(is_field_name) {
                cx.error(
                    Some(m.span()),
                    &key("matches"),
                    format!(
                        "{:?} is not a journal match: write FIELD=value with an upper-case \
                         field name, like \"_TRANSPORT=kernel\", or \"+\" between two \
                         alternatives",
                        m.get_ref()
                    ),
                );
            }
        }
        let fields = strings(cx, "fields", &self.fields);
        for f in self.fields.iter().flatten() {
            if !is_field_name(f.get_ref()) {
                cx.error(
                    Some(f.span()),
                    &key("fields"),
                    format!(
                        "{:?} is not a journal field name: upper-case letters, digits and _, \
                         like \"_TRANSPORT\"",
                        f.get_ref()
                    ),
                );
            }
        }
        let room = std::cmp::min(env.log.segment_bytes, 64 << 20).saturating_sub(EVENT_OVERHEAD);
        let mut max_entry_bytes = cx.size(
            &key("max_entry_bytes"),
            self.max_entry_bytes.as_ref(),
            DEFAULT_MAX_ENTRY_BYTES as u64,
            1 << 10,
            u64::MAX,
        );
        if max_entry_bytes > room {
            cx.error(
                self.max_entry_bytes
                    .as_ref()
                    .map(|v| v.span())
                    .or(Some(t.span())),
                &key("max_entry_bytes"),
                format!(
                    "an entry of {} would not fit in one log segment (log.segment_size = {}, \
                     less {} for the event's own fields): lower max_entry_bytes to {} or less, \
                     or raise log.segment_size",
                    format_size(max_entry_bytes),
                    format_size(env.log.segment_bytes),
                    format_size(EVENT_OVERHEAD),
                    format_size(room)
                ),
            );
            max_entry_bytes = room;
        }
        let journals = match directory {
            Some(d) => Journals::Directory(d),
            None if !files.is_empty() => Journals::Files(files),
            None => Journals::Local,
        };
        JournaldOptions {
            journals,
            select: Selection {
                units,
                exclude_units,
                min_priority: self.min_priority.map(|p| p.get_ref().0),
                matches,
                current_boot_only: self.current_boot_only.unwrap_or(false),
            },
            start_at: self.start_at.map_or(StartAt::End, |s| s.get_ref().0),
            fields,
            max_entry_bytes: max_entry_bytes as usize,
            checkpoint_dir: env.data_dir.join("checkpoints").join(&t.name),
        }
    }
}

impl Source for JournaldOptions {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SourceEnv<'_>) -> Option<Self> {
        let raw: RawJournaldSource = cx.deserialize(&t.key, t.value)?;
        let at = raw.type_.span();
        let options = raw.check(cx, t, env);
        // The rest of the table is checked all the same: one pass shows
        // every mistake, whichever build reads the file.
        if !cfg!(feature = "journald") {
            cx.error(Some(at), &format!("{}.type", t.key), NOT_BUILT);
            return None;
        }
        Some(options)
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        let what = match &self.journals {
            Journals::Directory(d) => format!("the journal files in {}", d.display()),
            Journals::Files(files) => {
                let f: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
                format!("the journal files {}", f.join(", "))
            }
            Journals::Local => "the system and user journals".to_string(),
        };
        let (o, s) = (self, &self.select);
        writeln!(out, "    reads {what} through sd-journal")?;
        let mut only = Vec::new();
        if !s.units.is_empty() {
            only.push(format!("units {}", s.units.join(", ")));
        }
        if let Some(p) = s.min_priority {
            let (_, name) = crate::syslog_format::severity::otel(p).unwrap_or((0, "?"));
            only.push(format!("priority {name} or more severe"));
        }
        if !s.matches.is_empty() {
            only.push(format!("matching {}", s.matches.join(" ")));
        }
        if s.current_boot_only {
            only.push("this boot".to_string());
        }
        if !only.is_empty() {
            writeln!(out, "    only {}", only.join("; "))?;
        }
        if !s.exclude_units.is_empty() {
            writeln!(out, "    skips units {}", s.exclude_units.join(", "))?;
        }
        let start = match o.start_at {
            StartAt::Beginning => "the oldest entry",
            StartAt::End => "new entries",
        };
        writeln!(
            out,
            "    first start at {start}, then from the checkpoint in {}; entries over {} are cut",
            o.checkpoint_dir.display(),
            format_size(o.max_entry_bytes as u64)
        )?;
        if !o.fields.is_empty() {
            writeln!(out, "    also keeps fields {}", o.fields.join(", "))?;
        }
        Ok(())
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.declare_source_drops(name, DROP_REASONS);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        if let Some(why) = super::unreadable(self, name) {
            // At the key that chose the journal, when the file sets one.
            let key = match &self.journals {
                super::Journals::Files(_) => format!("sources.{name}.files"),
                super::Journals::Directory(_) => format!("sources.{name}.directory"),
                super::Journals::Local => format!("sources.{name}"),
            };
            env.push(Severity::Warning, &key, why);
        }
    }

    fn hold(&self, name: &str) -> Option<String> {
        Some(super::hold_name(name))
    }
}

/// Every `reason` of `holdfast_dropped_events_total` for a `journald` source
/// (entries vacuumed past its checkpoint while stopped, entries too large
/// for one append, entries without a cursor).
pub const DROP_REASONS: &[&str] = &["journal_vacuumed", "too_large", "no_cursor"];

#[cfg(all(test, not(feature = "journald")))]
mod tests {
    use crate::config::{parse, Position, Severity};

    /// A build without libsystemd says so at the source's `type`, and still
    /// reports the table's other mistakes in the same pass.
    #[test]
    fn a_build_without_the_feature_refuses_a_journald_source_at_its_type() {
        let text = "[sources.journal]\ntype = \"journald\"\nmin_priority = \"warn\"\n\n\
                    [sinks.archive]\ntype = \"file\"\ninputs = [\"journal\"]\n";
        let e = match parse(text, "/etc/holdfast/holdfast.toml") {
            Ok(_) => panic!("a journald source passed check in a build without the feature"),
            Err(e) => e,
        };
        let found: Vec<_> = e
            .problems()
            .iter()
            .filter(|d| d.severity == Severity::Error)
            .map(|d| (d.key.as_str(), d.position, d.message.as_str()))
            .collect();
        assert_eq!(found.len(), 2, "{e}");
        assert_eq!(found[0].0, "sources.journal.type");
        assert_eq!(found[0].1, Some(Position { line: 2, column: 8 }));
        assert_eq!(found[0].2, super::NOT_BUILT);
        assert!(found[0].2.contains("without the `journald` feature"));
        // The sink naming it is not blamed; the typo is still found.
        assert_eq!(found[1].0, "sources.journal.min_priority", "{e}");
    }
}
