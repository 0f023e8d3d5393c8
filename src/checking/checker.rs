//! The machinery between the raw and the validated stage: a [`Checker`]
//! that collects every problem (not just the first) with its place
//! (positions and key paths in `text.rs`, serde's messages rephrased in
//! `serde_messages.rs`).
//!
//! Why not `toml::from_str` straight into one big struct? Two reasons. Serde
//! stops at the first error, and we want to report a broken source and a
//! broken sink in one run. And sources and sinks are chosen by their `type`
//! key: serde's internally tagged enums buffer the table, which loses spans
//! and `deny_unknown_fields`. So the document is first parsed into toml's
//! spanned tree ([`DeTable`]); each `[sources.<name>]` and `[sinks.<name>]`
//! table is then deserialized on its own into the struct its `type` selects,
//! and every serde error keeps the span of the exact key or value.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::ops::{Range, RangeInclusive};
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::error::{suggestion_suffix, Diagnostic, Position, Severity};
use super::serde_messages::rewrite_serde_message;
use super::text::{join_key, key_path_at, SourceText};
use super::units::{format_duration, format_size, Count, Dur, Size};

/// Removes `.` and resolves `..` without touching the file system, so that
/// paths can be compared (a sink must not write into the log directory).
pub(crate) fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Collects problems while the validated settings are built. Every check
/// records its problem and carries on with the default, so one run reports
/// everything.
pub(crate) struct Checker<'a> {
    pub src: &'a SourceText<'a>,
    root: &'a DeTable<'a>,
    /// Directory that relative paths are resolved against: the config
    /// file's.
    pub base_dir: PathBuf,
    found: Vec<(usize, Diagnostic)>,
    /// Placeholders of environment references that failed (already
    /// reported): problems about the values there would be about the
    /// placeholder, not the file, so they are not reported.
    placeholders: Vec<Range<usize>>,
    /// Where each key set in the file is, for messages that come later
    /// (`check_environment`, the daemon).
    pub origins: BTreeMap<String, Position>,
    /// Keys [`Checker::deserialize`] reported and took out of their table:
    /// the table's later checks see them as absent, and a problem that
    /// absence causes ("missing `include`") is not the operator's.
    refused: Vec<(String, String)>,
}

impl<'a> Checker<'a> {
    pub fn new(src: &'a SourceText<'a>, root: &'a DeTable<'a>, base_dir: PathBuf) -> Self {
        Checker {
            src,
            root,
            base_dir,
            found: Vec::new(),
            placeholders: Vec::new(),
            origins: BTreeMap::new(),
            refused: Vec::new(),
        }
    }

    /// From now on, drops problems whose span touches one of `ranges`.
    pub fn ignore_problems_at(&mut self, ranges: Vec<Range<usize>>) {
        self.placeholders = ranges;
    }

    pub fn error(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        self.push(Severity::Error, span, key, message.into());
    }

    pub fn warn(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        self.push(Severity::Warning, span, key, message.into());
    }

    fn push(&mut self, severity: Severity, span: Option<Range<usize>>, key: &str, message: String) {
        if let Some(s) = &span {
            if self
                .placeholders
                .iter()
                .any(|p| s.start <= p.end && p.start <= s.end)
            {
                return;
            }
        }
        if self.about_refused(key, &message) {
            return;
        }
        let order = span.as_ref().map_or(usize::MAX, |s| s.start);
        let d = self.src.diagnostic(severity, span, key, message);
        // A value TOML cannot represent (`1e400`) fails both the whole-file
        // pass and its own table's pass; the operator needs to read it once.
        if !self.found.iter().any(|(o, f)| *o == order && *f == d) {
            self.found.push((order, d));
        }
    }

    /// Whether a problem at `key` follows from a key already refused: it
    /// is that key's (or inside it), or its table's and names it.
    fn about_refused(&self, key: &str, message: &str) -> bool {
        self.refused.iter().any(|(table, entry)| {
            let full = join_key(table, entry);
            key == full
                || key
                    .strip_prefix(full.as_str())
                    .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
                // "missing `include`", "set tls.cert_file and …": about
                // the table, naming the entry taken out.
                || (key == table && message.contains(entry.as_str()))
        })
    }

    /// Marks `key` (already reported) as refused: later checks treat it as
    /// absent and do not report what its absence would cause.
    pub fn refuse(&mut self, key: &str) {
        let (table, entry) = key.rsplit_once('.').unwrap_or(("", key));
        self.refused.push((table.to_string(), entry.to_string()));
    }

    /// Whether `key` was reported and refused (its value is a stand-in).
    pub fn is_refused(&self, key: &str) -> bool {
        self.refused
            .iter()
            .any(|(table, entry)| join_key(table, entry) == key)
    }

    pub fn has_errors(&self) -> bool {
        self.error_count() > 0
    }

    /// Errors so far; compare before and after a group of checks to skip
    /// cross-checks whose inputs were already reported.
    pub fn error_count(&self) -> usize {
        self.found.iter().filter(|(_, d)| d.is_error()).count()
    }

    /// Errors and warnings, each in file order.
    pub fn finish(mut self) -> (Vec<Diagnostic>, Vec<Diagnostic>, BTreeMap<String, Position>) {
        self.found.sort_by_key(|(order, _)| *order);
        let (errors, warnings) = self
            .found
            .into_iter()
            .map(|(_, d)| d)
            .partition(|d| d.is_error());
        (errors, warnings, self.origins)
    }

    /// Remembers where `key` was set.
    pub fn note<T>(&mut self, key: &str, value: &Spanned<T>) {
        let position = self.src.position(value.span().start);
        self.origins.insert(key.to_string(), position);
    }

    /// The span of the value at `path` (like `["log", "max_bytes"]`), if the
    /// file sets it.
    pub fn span_of(&self, path: &[&str]) -> Option<Range<usize>> {
        self.value_at(path).map(|v| v.span())
    }

    /// The span of element `index` of the array at `path`.
    pub fn span_of_element(&self, path: &[&str], index: usize) -> Option<Range<usize>> {
        match self.value_at(path)?.get_ref() {
            DeValue::Array(a) => a.get(index).map(|v| v.span()),
            _ => None,
        }
    }

    /// The value at `path`, if the file sets it (through tables only).
    fn value_at(&self, path: &[&str]) -> Option<&'a Spanned<DeValue<'a>>> {
        let (last, parents) = path.split_last()?;
        let mut table = self.root;
        for p in parents {
            match table.get(*p)?.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return None,
            }
        }
        table.get(*last)
    }

    /// Deserializes one table of the tree into its raw struct; each serde
    /// error becomes a diagnostic at its key (under `prefix`).
    ///
    /// Serde stops at the first error of a table, so the entry at fault is
    /// taken out and the rest read again: three unknown keys in one table
    /// are three diagnostics from one run. What is left is returned (the
    /// entries at fault as if absent), so the table's own checks still run:
    /// a value of the wrong type must not hide a bound or a reference
    /// broken elsewhere in the table. `None` only when the table cannot be
    /// read at all (not a table, or a required key missing).
    pub fn deserialize<T: DeserializeOwned>(
        &mut self,
        prefix: &str,
        value: &Spanned<DeValue<'a>>,
    ) -> Option<T> {
        let mut value = value.clone();
        let mut failed = false;
        loop {
            let e = match T::deserialize(ValueDeserializer::from(value.clone())) {
                Ok(t) => return Some(t),
                Err(e) => e,
            };
            // Without a span of its own (a missing key), a later error may
            // come from an entry taken out: only the first is certain.
            if failed && e.span().is_none() {
                return None;
            }
            failed = true;
            let span = e.span().or_else(|| Some(value.span()));
            let key = match (&span, value.get_ref()) {
                (Some(s), DeValue::Table(t)) => key_path_at(t, prefix, s),
                _ => None,
            }
            .unwrap_or_else(|| prefix.to_string());
            self.error(span, &key, rewrite_serde_message(e.message()));
            let (Some(at), DeValue::Table(t)) = (e.span(), value.get_mut()) else {
                return None;
            };
            let mut removed = Vec::new();
            remove_at_fault(t, prefix, &at, &mut removed);
            if removed.is_empty() {
                return None;
            }
            self.refused.extend(removed);
        }
    }

    /// A size from the file, or `default`; outside `min..=max` it is an error
    /// (and the default is used so checking can go on).
    pub fn size(
        &mut self,
        key: &str,
        value: Option<&Spanned<Size>>,
        default: u64,
        min: u64,
        max: u64,
    ) -> u64 {
        let Some(v) = value else { return default };
        self.note(key, v);
        let bytes = v.get_ref().0;
        let range = if max == u64::MAX {
            format!("set it to at least {}", format_size(min))
        } else {
            format!(
                "set it between {} and {}",
                format_size(min),
                format_size(max)
            )
        };
        let problem = if bytes == 0 && min > 0 {
            Some("a size of zero makes no sense here".to_string())
        } else if bytes < min {
            Some(format!("{} is too small", format_size(bytes)))
        } else if bytes > max {
            Some(format!("{} is too large", format_size(bytes)))
        } else {
            None
        };
        match problem {
            Some(p) => {
                self.error(
                    Some(v.span()),
                    key,
                    format!("{p}: {range} (default {})", format_size(default)),
                );
                default
            }
            None => bytes,
        }
    }

    /// A duration from the file, or `default`. `zero` explains why zero is
    /// refused; `None` allows zero.
    pub fn duration(
        &mut self,
        key: &str,
        value: Option<&Spanned<Dur>>,
        default: Duration,
        zero: Option<&str>,
    ) -> Duration {
        let Some(v) = value else { return default };
        self.note(key, v);
        let d = v.get_ref().0;
        if d.is_zero() {
            if let Some(why) = zero {
                self.error(
                    Some(v.span()),
                    key,
                    format!(
                        "must be greater than zero: {why} (default {})",
                        format_duration(default)
                    ),
                );
                return default;
            }
        }
        d
    }

    /// A whole number from the file within `range`, or `default`.
    pub fn count(
        &mut self,
        key: &str,
        value: Option<&Spanned<Count>>,
        default: u64,
        range: RangeInclusive<u64>,
    ) -> u64 {
        let Some(v) = value else { return default };
        self.note(key, v);
        match u64::try_from(v.get_ref().0) {
            Ok(n) if range.contains(&n) => n,
            _ => {
                let (n, min, max) = (v.get_ref().0, range.start(), range.end());
                self.error(
                    Some(v.span()),
                    key,
                    format!(
                        "{n} is out of range: set it between {min} and {max} (default {default})"
                    ),
                );
                default
            }
        }
    }

    /// A path from the file, resolved against the config file's directory;
    /// `None` when absent (or empty, which is an error).
    pub fn path(&mut self, key: &str, value: Option<&Spanned<String>>) -> Option<PathBuf> {
        let v = value?;
        self.note(key, v);
        if v.get_ref().trim().is_empty() {
            self.error(
                Some(v.span()),
                key,
                "must not be empty: write a path, or remove the key for the default",
            );
            return None;
        }
        Some(self.resolve(v.get_ref()))
    }

    /// A path relative to the config file's directory (absolute ones stay).
    pub fn resolve(&self, path: &str) -> PathBuf {
        normalize(&self.base_dir.join(path))
    }

    /// A listen address like `127.0.0.1:9467`, or `default`.
    pub fn listen(
        &mut self,
        key: &str,
        value: Option<&Spanned<String>>,
        default: SocketAddr,
    ) -> SocketAddr {
        let Some(v) = value else { return default };
        self.note(key, v);
        let text = v.get_ref().trim();
        match text.parse::<SocketAddr>() {
            Ok(addr) => addr,
            Err(_) => {
                let hint = if text.parse::<std::net::Ipv4Addr>().is_ok() {
                    format!(
                        "the port is missing: write it like \"{text}:{}\"",
                        default.port()
                    )
                } else if text.matches(':').count() > 1 && !text.starts_with('[') {
                    format!(
                        "an IPv6 address goes in brackets, followed by the port, like \"[::1]:{}\"",
                        default.port()
                    )
                } else if text.chars().any(|c| c.is_ascii_alphabetic()) && !text.contains("::") {
                    "host names are not resolved: write an IP address, like \"127.0.0.1\" (this \
                     machine only) or \"0.0.0.0\" (every interface), and a port"
                        .to_string()
                } else {
                    "write an IP address and a port".to_string()
                };
                self.error(
                    Some(v.span()),
                    key,
                    format!(
                        "\"{}\" is not an address and port: {hint} (default \"{default}\")",
                        v.get_ref()
                    ),
                );
                // The default stands in so checking goes on; it must not
                // collide with another listener in the operator's eyes.
                self.refuse(key);
                default
            }
        }
    }

    /// The known types of a `[sources.x]`/`[sinks.x]` table, checked: name,
    /// table shape and `type`. Returns the tables whose type is known, and
    /// every declared name (valid or not, so later references to a broken
    /// source don't pile up more errors).
    pub fn named_tables(
        &mut self,
        section: &str,
        singular: &str,
        known_types: &[&str],
    ) -> (Vec<NamedTable<'a>>, Vec<String>) {
        let mut tables = Vec::new();
        let mut declared = Vec::new();
        let Some(value) = self.root.get(section) else {
            return (tables, declared);
        };
        let DeValue::Table(entries) = value.get_ref() else {
            self.error(
                Some(value.span()),
                section,
                format!(
                    "`{section}` must be a table of named {section}, one per [{section}.<name>] \
                     table, like [{section}.{}]",
                    if section == "sources" {
                        "syslog"
                    } else {
                        "archive"
                    }
                ),
            );
            return (tables, declared);
        };
        let types_list = known_types
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(", ");
        for (name, table) in entries.iter() {
            let name_str = name.get_ref().to_string();
            let key = join_key(section, &name_str);
            declared.push(name_str.clone());
            if let Err(why) = check_name(&name_str) {
                self.error(
                    Some(name.span()),
                    &key,
                    format!("invalid {singular} name {name_str:?}: {why}"),
                );
                continue;
            }
            let DeValue::Table(fields) = table.get_ref() else {
                self.error(
                    Some(table.span()),
                    &key,
                    format!(
                        "expected a table with a `type` key, like [{key}] followed by type = \"{}\", found {}",
                        known_types[0],
                        table.get_ref().type_str()
                    ),
                );
                continue;
            };
            let Some(type_value) = fields.get("type") else {
                self.error(
                    Some(table.span()),
                    &key,
                    format!(
                        "missing `type`: say which kind of {singular} this is, one of {types_list}"
                    ),
                );
                continue;
            };
            let type_key = format!("{key}.type");
            let Some(kind) = type_value.get_ref().as_str() else {
                self.error(
                    Some(type_value.span()),
                    &type_key,
                    format!(
                        "expected a string, one of {types_list}, found {}",
                        type_value.get_ref().type_str()
                    ),
                );
                continue;
            };
            if !known_types.contains(&kind) {
                let suggestion = suggestion_suffix(kind, known_types.iter().copied(), '"');
                self.error(
                    Some(type_value.span()),
                    &type_key,
                    format!(
                        "unknown {singular} type \"{kind}\"{suggestion}; known types: {types_list}"
                    ),
                );
                continue;
            }
            self.note(&type_key, type_value);
            tables.push(NamedTable {
                name: name_str,
                key,
                kind: kind.to_string(),
                value: table,
            });
        }
        (tables, declared)
    }
}

/// Takes the entry at fault for the error at `at` out of `table` (under
/// the key path `prefix`), as deep as it can: in a nested table (`tls`,
/// `quarantine`) only the bad key goes, so the next pass reports that
/// table's other problems too. What was taken out goes to `removed` as
/// (table's key path, entry).
fn remove_at_fault(
    table: &mut DeTable<'_>,
    prefix: &str,
    at: &Range<usize>,
    removed: &mut Vec<(String, String)>,
) {
    let at_fault: Vec<_> = table
        .iter()
        .filter(|(k, v)| within(&k.span(), at) || holds(v, at))
        .map(|(k, _)| k.clone())
        .collect();
    for k in at_fault {
        let name = k.get_ref().to_string();
        let inner = join_key(prefix, &name);
        let before = removed.len();
        if let Some(v) = table.get_mut(&k) {
            // The key's own span (an unknown key) is this entry's fault; a
            // span inside a nested table is one of its entries'.
            if !within(&k.span(), at) {
                if let DeValue::Table(nested) = v.get_mut() {
                    remove_at_fault(nested, &inner, at, removed);
                }
            }
        }
        if removed.len() == before {
            removed.push((prefix.to_string(), name));
            table.remove(&k);
        }
    }
}

fn within(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end
}

/// Whether `at` is inside `v`, looking into tables (whose span is only their
/// header) and arrays.
fn holds(v: &Spanned<DeValue<'_>>, at: &Range<usize>) -> bool {
    within(&v.span(), at)
        || match v.get_ref() {
            DeValue::Table(t) => t.iter().any(|(k, v)| within(&k.span(), at) || holds(v, at)),
            DeValue::Array(a) => a.iter().any(|e| holds(e, at)),
            _ => false,
        }
}

/// A `[sources.<name>]` or `[sinks.<name>]` table whose name and type passed.
pub(crate) struct NamedTable<'a> {
    pub name: String,
    /// Its key path, `sources.<name>`.
    pub key: String,
    /// The `type` value, one of the known types.
    pub kind: String,
    pub value: &'a Spanned<DeValue<'a>>,
}

impl NamedTable<'_> {
    /// The table's span (its header, or the inline table).
    pub fn span(&self) -> Range<usize> {
        self.value.span()
    }
}

/// Source and sink names appear in metrics labels, cursor names and paths:
/// keep them short and plain.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.chars().count() > 64 {
        return Err("a name must be 1 to 64 characters long".to_string());
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '_' || *c == '-'))
    {
        return Err(format!(
            "the character {c:?} is not allowed: use only letters A-Z a-z, digits, '_' and '-'"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        for good in ["syslog", "a-b_C9", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in ["", &"x".repeat(65), "a.b"] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
        assert!(check_name("my source").unwrap_err().contains("' '"));
    }

    #[test]
    fn paths_normalize_lexically() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(
            normalize(Path::new("/etc/holdfast/../../var")),
            PathBuf::from("/var")
        );
    }
}
