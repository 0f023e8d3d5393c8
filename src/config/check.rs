//! The machinery between the raw and the validated stage: positions in the
//! text, key paths, turning serde's messages into ours, and a [`Checker`]
//! that collects every problem (not just the first) with its place.
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
use std::ops::Range;
use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::de::{DeTable, DeValue, ValueDeserializer};
use toml::Spanned;

use super::error::{suggestion_suffix, Diagnostic, Position, Severity};
use super::units::{format_duration, format_size, Count, Dur, Size};

/// The config text with a line index, for turning byte offsets into lines and
/// columns.
pub(crate) struct SourceText<'a> {
    pub text: &'a str,
    pub file: &'a Path,
    line_starts: Vec<usize>,
}

impl<'a> SourceText<'a> {
    pub fn new(text: &'a str, file: &'a Path) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        SourceText {
            text,
            file,
            line_starts,
        }
    }

    /// The 1-based line and column of a byte offset.
    pub fn position(&self, offset: usize) -> Position {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let column = match self.text.get(start..offset) {
            Some(s) => s.chars().count(),
            None => offset - start,
        };
        Position {
            line: line + 1,
            column: column + 1,
        }
    }

    pub fn diagnostic(
        &self,
        severity: Severity,
        span: Option<Range<usize>>,
        key: impl Into<String>,
        message: impl Into<String>,
    ) -> Diagnostic {
        Diagnostic {
            severity,
            file: self.file.to_path_buf(),
            position: span.map(|s| self.position(s.start)),
            key: key.into(),
            message: message.into(),
        }
    }

    /// A TOML syntax error (including duplicate keys, which the parser
    /// rejects). There is no tree yet, so the key is found from the text.
    pub fn syntax_error(&self, error: &toml::de::Error) -> Diagnostic {
        let span = error.span();
        let at = span.clone().unwrap_or(0..0);
        let word = self.text.get(at.clone()).unwrap_or("");
        let line_start = self.text[..at.start.min(self.text.len())]
            .rfind('\n')
            .map_or(0, |i| i + 1);
        let line = self.text[line_start..].lines().next().unwrap_or("");
        let header = header_name(line);
        let duplicate = error.message().starts_with("duplicate key");
        let (key, message) = match (&header, duplicate) {
            // `[log]` twice: the span is the name inside the second header.
            (Some(h), true) => (
                h.clone(),
                format!(
                    "the table [{h}] is defined twice: each [table] header may appear only once; \
                     merge the two tables"
                ),
            ),
            (_, true) => (
                self.key_near(at.start, word, true),
                format!(
                    "`{word}` is set twice: a key may be set only once in a table; remove one of \
                     the two"
                ),
            ),
            (_, false) => {
                // Only a word followed by `=` or `.` is a key; anything else
                // (a bad value) belongs to the table.
                let after = self
                    .text
                    .get(at.end..)
                    .unwrap_or("")
                    .trim_start_matches([' ', '\t']);
                let is_key = after.starts_with('=') || after.starts_with('.');
                (
                    self.key_near(at.start, word, is_key),
                    format!("invalid TOML: {}", error.message()),
                )
            }
        };
        self.diagnostic(Severity::Error, span, key, message)
    }

    /// `table.word` from the header in force at `offset`, when `word` looks
    /// like a key. Best effort: there is no tree after a syntax error.
    fn key_near(&self, offset: usize, word: &str, is_key: bool) -> String {
        let table = enclosing_table_header(self.text, offset);
        match (table, is_key && is_bare_key(word)) {
            (Some(t), true) => format!("{t}.{word}"),
            (None, true) => word.to_string(),
            (Some(t), false) => t,
            (None, false) => String::new(),
        }
    }
}

/// The name in a `[header]` or `[[header]]` line.
fn header_name(line: &str) -> Option<String> {
    let inner = line.trim().strip_prefix('[')?;
    let end = inner.find(']')?;
    Some(
        inner[..end]
            .trim_matches(|c| c == '[' || c == ' ')
            .to_string(),
    )
}

/// The `[header]` (or `[[header]]`) in force at `offset`, found by scanning
/// back through the text. Best effort: used only for syntax errors, where no
/// tree exists.
fn enclosing_table_header(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?;
    // The error's own line is not a header (headers are handled by the
    // caller), so start from the line before it.
    let mut lines = before.lines().rev();
    if !before.ends_with('\n') {
        lines.next();
    }
    lines.find_map(header_name)
}

fn is_bare_key(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// One segment of a key path: bare when TOML allows it, quoted otherwise.
pub(crate) fn key_segment(name: &str) -> String {
    if is_bare_key(name) {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

/// `prefix.name`, or `name` at the top level.
pub(crate) fn join_key(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        key_segment(name)
    } else {
        format!("{prefix}.{}", key_segment(name))
    }
}

/// The key path of the narrowest key or value in `table` whose span holds
/// `target`, like `sources.syslog.multiline.timeout` or `sinks.a.inputs[1]`.
pub(crate) fn key_path_at(
    table: &DeTable<'_>,
    prefix: &str,
    target: &Range<usize>,
) -> Option<String> {
    fn consider(
        span: Range<usize>,
        path: &str,
        target: &Range<usize>,
        best: &mut Option<(usize, String)>,
    ) {
        if span.start <= target.start && target.end <= span.end {
            let len = span.len();
            if best.as_ref().is_none_or(|(l, _)| len < *l) {
                *best = Some((len, path.to_string()));
            }
        }
    }
    fn visit_table(
        t: &DeTable<'_>,
        prefix: &str,
        target: &Range<usize>,
        best: &mut Option<(usize, String)>,
    ) {
        for (k, v) in t.iter() {
            let path = join_key(prefix, k.get_ref());
            consider(k.span(), &path, target, best);
            visit_value(v, &path, target, best);
        }
    }
    fn visit_value(
        v: &Spanned<DeValue<'_>>,
        path: &str,
        target: &Range<usize>,
        best: &mut Option<(usize, String)>,
    ) {
        consider(v.span(), path, target, best);
        match v.get_ref() {
            // Header tables' spans cover only the header, so always descend.
            DeValue::Table(t) => visit_table(t, path, target, best),
            DeValue::Array(a) => {
                for (i, e) in a.iter().enumerate() {
                    visit_value(e, &format!("{path}[{i}]"), target, best);
                }
            }
            _ => {}
        }
    }
    let mut best = None;
    visit_table(table, prefix, target, &mut best);
    best.map(|(_, p)| p)
}

/// Keys that exist in a raw struct only to be refused with a better message;
/// never suggested, never listed as allowed.
const NEVER_SUGGESTED: &[&str] = &["bearer_token", "password", "api_key"];

/// Rephrases serde's messages in the config's terms: "key" rather than
/// "field", a did-you-mean for unknown keys and values, and "expected X,
/// found Y" for type errors.
pub(crate) fn rewrite_serde_message(message: &str) -> String {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (wrong, allowed) = split_unknown(rest);
        let allowed: Vec<&str> = allowed
            .into_iter()
            .filter(|k| !NEVER_SUGGESTED.contains(k))
            .collect();
        let suggestion = suggestion_suffix(wrong, allowed.iter().copied(), '`');
        if allowed.is_empty() {
            return format!("unknown key `{wrong}`: this table takes no keys");
        }
        return format!(
            "unknown key `{wrong}`{suggestion}; the keys allowed here are: {}",
            allowed.join(", ")
        );
    }
    if let Some(rest) = message.strip_prefix("unknown variant `") {
        let (wrong, allowed) = split_unknown(rest);
        let suggestion = suggestion_suffix(wrong, allowed.iter().copied(), '"');
        let list: Vec<String> = allowed.iter().map(|a| format!("\"{a}\"")).collect();
        return format!(
            "unknown value \"{wrong}\"{suggestion}; expected one of: {}",
            list.join(", ")
        );
    }
    if let Some(rest) = message.strip_prefix("invalid type: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            let expected = match expected {
                "a sequence" => "a list like [\"a\", \"b\"]",
                "a boolean" => "true or false",
                other => other,
            };
            return format!("expected {expected}, found {found}");
        }
    }
    if let Some(rest) = message.strip_prefix("invalid value: ") {
        if let Some((found, expected)) = rest.split_once(", expected ") {
            return format!("expected {expected}, found {found}");
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        let name = rest.trim_end_matches('`');
        return format!("missing required key `{name}`");
    }
    message.to_string()
}

/// Splits "`x`, expected one of `a`, `b`" (after the opening backtick) into
/// the unknown word and the allowed words.
fn split_unknown(rest: &str) -> (&str, Vec<&str>) {
    let (wrong, tail) = rest.split_once('`').unwrap_or((rest, ""));
    let allowed = tail
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty())
        .collect();
    (wrong, allowed)
}

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
    /// Where each key set in the file is, for messages that come later
    /// (`check_environment`, the daemon).
    pub origins: BTreeMap<String, Position>,
}

impl<'a> Checker<'a> {
    pub fn new(src: &'a SourceText<'a>, root: &'a DeTable<'a>, base_dir: PathBuf) -> Self {
        Checker {
            src,
            root,
            base_dir,
            found: Vec::new(),
            origins: BTreeMap::new(),
        }
    }

    pub fn error(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        self.push(Severity::Error, span, key, message.into());
    }

    pub fn warn(&mut self, span: Option<Range<usize>>, key: &str, message: impl Into<String>) {
        self.push(Severity::Warning, span, key, message.into());
    }

    fn push(&mut self, severity: Severity, span: Option<Range<usize>>, key: &str, message: String) {
        let order = span.as_ref().map_or(usize::MAX, |s| s.start);
        let d = self.src.diagnostic(severity, span, key, message);
        // A value TOML cannot represent (`1e400`) fails both the whole-file
        // pass and its own table's pass; the operator needs to read it once.
        if !self.found.iter().any(|(o, f)| *o == order && *f == d) {
            self.found.push((order, d));
        }
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
        let (last, parents) = path.split_last()?;
        let mut table = self.root;
        for p in parents {
            match table.get(*p)?.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return None,
            }
        }
        table.get(*last).map(|v| v.span())
    }

    /// The span of element `index` of the array at `path`.
    pub fn span_of_element(&self, path: &[&str], index: usize) -> Option<Range<usize>> {
        let (last, parents) = path.split_last()?;
        let mut table = self.root;
        for p in parents {
            match table.get(*p)?.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return None,
            }
        }
        match table.get(*last)?.get_ref() {
            DeValue::Array(a) => a.get(index).map(|v| v.span()),
            _ => None,
        }
    }

    /// Deserializes one table of the tree into its raw struct; a serde error
    /// becomes a diagnostic at its key (under `prefix`) and `None`.
    pub fn deserialize<T: DeserializeOwned>(
        &mut self,
        prefix: &str,
        value: &Spanned<DeValue<'a>>,
    ) -> Option<T> {
        match T::deserialize(ValueDeserializer::from(value.clone())) {
            Ok(t) => Some(t),
            Err(e) => {
                let span = e.span().or_else(|| Some(value.span()));
                let key = match (&span, value.get_ref()) {
                    (Some(s), DeValue::Table(t)) => key_path_at(t, prefix, s),
                    _ => None,
                }
                .unwrap_or_else(|| prefix.to_string());
                self.error(span, &key, rewrite_serde_message(e.message()));
                None
            }
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

    /// A whole number from the file within `min..=max`, or `default`.
    pub fn count(
        &mut self,
        key: &str,
        value: Option<&Spanned<Count>>,
        default: u64,
        min: u64,
        max: u64,
    ) -> u64 {
        let Some(v) = value else { return default };
        self.note(key, v);
        let n = v.get_ref().0;
        if n < min as i64 || n as u64 > max {
            self.error(
                Some(v.span()),
                key,
                format!("{n} is out of range: set it between {min} and {max} (default {default})"),
            );
            return default;
        }
        n as u64
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
    fn positions_count_lines_and_characters() {
        let text = "a = 1\nb = \"é\" # x\n";
        let src = SourceText::new(text, Path::new("t.toml"));
        assert_eq!(src.position(0), Position { line: 1, column: 1 });
        assert_eq!(src.position(6), Position { line: 2, column: 1 });
        // After the two-byte 'é' the column counts one character.
        let hash = text.find('#').unwrap();
        assert_eq!(src.position(hash), Position { line: 2, column: 9 });
    }

    #[test]
    fn serde_messages_become_config_messages() {
        assert_eq!(
            rewrite_serde_message("unknown field `segmnt_size`, expected one of `segment_size`, `max_bytes`"),
            "unknown key `segmnt_size` (did you mean `segment_size`?); the keys allowed here are: segment_size, max_bytes"
        );
        assert_eq!(
            rewrite_serde_message("unknown field `x`, expected `a` or `b`"),
            "unknown key `x`; the keys allowed here are: a, b"
        );
        assert_eq!(
            rewrite_serde_message("unknown variant `alway`, expected one of `always`, `interval`, `never`"),
            "unknown value \"alway\" (did you mean \"always\"?); expected one of: \"always\", \"interval\", \"never\""
        );
        assert_eq!(
            rewrite_serde_message("invalid type: integer `5`, expected a string"),
            "expected a string, found integer `5`"
        );
    }

    #[test]
    fn names_are_plain() {
        assert!(check_name("syslog").is_ok());
        assert!(check_name("a-b_C9").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(65)).is_err());
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
