//! Positions in the config text: byte offsets to lines and columns, the
//! table a place is in, and the dotted key path of a place in toml's spanned
//! tree (for messages that name the exact key).

use std::ops::Range;
use std::path::Path;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::error::{Diagnostic, Position, Severity};
use super::interpolate::{original_offset, Piece};

/// The config text with a line index, for turning byte offsets into lines and
/// columns. `text` is what is parsed (after environment interpolation);
/// positions are in the file as written.
pub(crate) struct SourceText<'a> {
    pub text: &'a str,
    pub file: &'a Path,
    written: &'a str,
    pieces: &'a [Piece],
    line_starts: Vec<usize>,
}

impl<'a> SourceText<'a> {
    pub fn new(text: &'a str, file: &'a Path) -> Self {
        Self::interpolated(text, text, &[], file)
    }

    /// `text` is `written` after the replacements `pieces`.
    pub fn interpolated(
        written: &'a str,
        text: &'a str,
        pieces: &'a [Piece],
        file: &'a Path,
    ) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(written.match_indices('\n').map(|(i, _)| i + 1));
        SourceText {
            text,
            file,
            written,
            pieces,
            line_starts,
        }
    }

    /// The 1-based line and column in the file as written of a byte offset
    /// in the parsed text.
    pub fn position(&self, offset: usize) -> Position {
        let offset = original_offset(self.pieces, offset).min(self.written.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let column = match self.written.get(start..offset) {
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
}
