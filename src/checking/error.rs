//! What a config problem looks like: a [`Diagnostic`] names the file, the
//! line and column, the key path and what to do; a [`ConfigError`] carries
//! one or more of them.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Whether a diagnostic stops holdfast from running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The config is refused (or, from
    /// [`Settings::check_environment`](crate::config::Settings::check_environment),
    /// holdfast would fail to start on this machine).
    Error,
    /// Allowed, but probably not what the operator wants (for example a
    /// listener on a public address without authentication).
    Warning,
    /// For information only, from
    /// [`Settings::check_environment`](crate::config::Settings::check_environment):
    /// for example a port held by the holdfast already running with this
    /// config.
    Note,
}

/// A place in the config file: 1-based line and column (the column counts
/// characters, not bytes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// 1-based line number.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

/// One problem in a config, or with the machine it is meant to run on.
///
/// Displayed as `FILE:LINE:COL: KEY: MESSAGE`, with `warning: ` before the
/// key for warnings, for example:
///
/// ```text
/// /etc/holdfast/holdfast.toml:12:11: sinks.archive.inputs[0]: no source named "syslg" (did you mean "syslog"?); sources defined: otlp, syslog
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The config file (as given to [`load`](crate::config::load) or
    /// [`parse`](crate::config::parse)).
    pub file: PathBuf,
    /// Where in the file; `None` for a key left at its default (there is no
    /// line to point at) or a problem with the file as a whole.
    pub position: Option<Position>,
    /// The key path, like `sinks.archive.inputs[1]`; empty for the file as a
    /// whole.
    pub key: String,
    /// What is wrong and what to change. May span several lines.
    pub message: String,
}

impl Diagnostic {
    /// Whether this diagnostic is an error.
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if let Some(p) = self.position {
            write!(f, ":{}:{}", p.line, p.column)?;
        }
        f.write_str(": ")?;
        match self.severity {
            Severity::Error => {}
            Severity::Warning => f.write_str("warning: ")?,
            Severity::Note => f.write_str("note: ")?,
        }
        if !self.key.is_empty() {
            write!(f, "{}: ", self.key)?;
        }
        // Continuation lines are indented so each diagnostic stays one block.
        for (i, line) in self.message.lines().enumerate() {
            if i > 0 {
                f.write_str("\n    ")?;
            }
            f.write_str(line)?;
        }
        Ok(())
    }
}

impl Diagnostic {
    /// The diagnostic as one JSON object, for `holdfast check --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "severity": match self.severity {
                Severity::Error => "error",
                Severity::Warning => "warning",
                Severity::Note => "note",
            },
            "file": self.file.display().to_string(),
            "line": self.position.map(|p| p.line),
            "column": self.position.map(|p| p.column),
            "key": self.key,
            "message": self.message,
        })
    }
}

/// Why a config could not be turned into [`Settings`](crate::config::Settings).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read at all.
    #[error("{}: cannot read the config file: {error}{}", path.display(), read_hint(error))]
    Read {
        /// The path that was tried.
        path: PathBuf,
        /// What the operating system said.
        error: io::Error,
    },
    /// The file was read but is not a valid config: every problem found,
    /// in file order, one per line.
    #[error("{}", DisplayAll(problems))]
    Invalid {
        /// Each problem (all with [`Severity::Error`]).
        problems: Vec<Diagnostic>,
    },
}

impl ConfigError {
    /// The problems found, if the file could be read.
    pub fn problems(&self) -> &[Diagnostic] {
        match self {
            ConfigError::Read { .. } => &[],
            ConfigError::Invalid { problems } => problems,
        }
    }
}

fn read_hint(error: &io::Error) -> &'static str {
    match error.kind() {
        io::ErrorKind::NotFound => {
            " (pass another file with --config, or install the default config at \
             /etc/holdfast/holdfast.toml)"
        }
        io::ErrorKind::PermissionDenied => {
            " (run as a user that can read it, or make it readable by the holdfast user)"
        }
        _ => "",
    }
}

struct DisplayAll<'a>(&'a [Diagnostic]);

impl fmt::Display for DisplayAll<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// Suggests the candidate closest to `wrong`, if one is close enough to be a
/// likely typo.
pub(crate) fn did_you_mean<'a>(
    wrong: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let wrong_lower = wrong.to_ascii_lowercase();
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates {
        let lower = candidate.to_ascii_lowercase();
        let distance = strsim::damerau_levenshtein(&wrong_lower, &lower);
        let limit = (wrong.chars().count().max(candidate.chars().count()) / 3).clamp(1, 3);
        let prefix = wrong_lower.len().min(lower.len()) >= 4
            && (lower.starts_with(&wrong_lower) || wrong_lower.starts_with(&lower));
        // A distance as long as the word itself means nothing in common.
        let near = distance <= limit && distance < wrong.chars().count();
        if near || prefix {
            // Prefix matches count as "far" so a real near-miss wins.
            let score = if near { distance } else { limit + 1 };
            if best.is_none_or(|(d, _)| score < d) {
                best = Some((score, candidate));
            }
        }
    }
    best.map(|(_, c)| c)
}

/// ` (did you mean "x"?)`, or nothing.
pub(crate) fn suggestion_suffix<'a>(
    wrong: &str,
    candidates: impl IntoIterator<Item = &'a str>,
    quote: char,
) -> String {
    match did_you_mean(wrong, candidates) {
        Some(s) => format!(" (did you mean {quote}{s}{quote}?)"),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggestions_catch_typos_and_not_strangers() {
        let keys = [
            "segment_size",
            "max_bytes",
            "max_age",
            "fsync",
            "fsync_interval",
        ];
        assert_eq!(did_you_mean("segmnt_size", keys), Some("segment_size"));
        assert_eq!(did_you_mean("max_byte", keys), Some("max_bytes"));
        assert_eq!(
            did_you_mean("fsync_intervall", keys),
            Some("fsync_interval")
        );
        assert_eq!(did_you_mean("fsnyc", keys), Some("fsync"));
        assert_eq!(did_you_mean("compression", keys), None);
        assert_eq!(did_you_mean("syslg", ["syslog", "otlp"]), Some("syslog"));
        assert_eq!(
            did_you_mean("source", ["sources", "sinks"]),
            Some("sources")
        );
    }

    #[test]
    fn a_diagnostic_reads_file_line_column_key_message() {
        let d = Diagnostic {
            severity: Severity::Error,
            file: "/etc/holdfast/holdfast.toml".into(),
            position: Some(Position {
                line: 12,
                column: 10,
            }),
            key: "sinks.archive.inputs[0]".into(),
            message: "no source named \"syslg\"\nsecond line".into(),
        };
        assert_eq!(
            d.to_string(),
            "/etc/holdfast/holdfast.toml:12:10: sinks.archive.inputs[0]: no source named \"syslg\"\n    second line"
        );
        let w = Diagnostic {
            severity: Severity::Warning,
            position: None,
            ..d
        };
        assert!(w
            .to_string()
            .starts_with("/etc/holdfast/holdfast.toml: warning: sinks."));
    }
}
