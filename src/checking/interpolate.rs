//! Environment interpolation in the config text, before TOML parsing: one
//! file for a whole fleet, with per-device values and secrets from the
//! environment.
//!
//! * `${VAR}` is VAR's value; `${VAR:-default}` falls back to `default`
//!   when VAR is unset or empty (as in the shell); `$$` is a literal `$`; a
//!   `$` followed by anything else stays as it is.
//! * Comments are copied as they are.
//! * A value can never change the document's structure: inside a basic
//!   string (`"..."`, `"""..."""`) it is escaped; inside a literal string
//!   (`'...'`) a `'` (or, in a one-line one, a line break) is refused;
//!   outside strings only a number, `true`/`false` or a date-time is taken.
//!
//! Every replacement is recorded ([`Piece`]) so that positions in the
//! substituted text map back to the file as written, and so that `check` can
//! mask values that came from secret-looking variables.

use std::ops::Range;

use toml::de::DeValue;

/// One replacement: where it was in the file and where its result is in
/// the substituted text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// In the file as written (`${VAR}`, `$$`).
    pub from: Range<usize>,
    /// In the substituted text.
    pub to: Range<usize>,
    /// The variable, or `None` for `$$`.
    pub var: Option<String>,
    /// The value is not to be shown (`check` masks it).
    pub secret: bool,
    /// A secret value as the environment gave it, so that messages which
    /// quote it can be redacted.
    pub secret_value: Option<String>,
    /// The replacement could not be made; `to` holds a placeholder, and
    /// other problems about the value there are not reported (they would
    /// be about the placeholder).
    pub failed: bool,
}

/// A reference that cannot be substituted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Problem {
    /// Where the placeholder is in the substituted text (for the key path).
    pub to: Range<usize>,
    pub message: String,
}

/// The config text after substitution.
#[derive(Debug, Default)]
pub(crate) struct Interpolated {
    pub text: String,
    pub pieces: Vec<Piece>,
    pub problems: Vec<Problem>,
}

/// The offset in the file as written of `offset` in the substituted text:
/// inside a replacement, the start of what it replaced.
pub(crate) fn original_offset(pieces: &[Piece], offset: usize) -> usize {
    let i = pieces.partition_point(|p| p.to.start <= offset);
    if i == 0 {
        return offset;
    }
    let p = &pieces[i - 1];
    // An empty replacement (a failed reference's placeholder in a string)
    // is still the reference at its start.
    if offset < p.to.end || offset == p.to.start {
        p.from.start
    } else {
        p.from.end + (offset - p.to.end)
    }
}

/// Where a `$` stands, which decides how a value is written there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    /// Outside strings: a value, a key or a table header.
    Bare,
    Basic {
        multi: bool,
    },
    Literal {
        multi: bool,
    },
}

#[derive(Clone, Copy)]
enum State {
    Normal,
    Comment,
    In(Place),
}

/// Substitutes every reference in `text`, looking variables up with `env`
/// (`std::env::var` in production, a closure in tests).
pub(crate) fn interpolate(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Interpolated {
    let bytes = text.as_bytes();
    let mut out = Interpolated {
        text: String::with_capacity(text.len()),
        ..Interpolated::default()
    };
    let mut copied = 0;
    let mut state = State::Normal;
    let mut i = 0;
    // Structural characters are ASCII, so byte steps never split a
    // character that matters; copies are whole slices.
    while i < bytes.len() {
        let rest = &bytes[i..];
        match state {
            State::Comment => {
                if rest[0] == b'\n' {
                    state = State::Normal;
                }
                i += 1;
            }
            State::Normal | State::In(_) if rest[0] == b'$' => {
                let place = match state {
                    State::In(p) => p,
                    _ => Place::Bare,
                };
                let Some((len, replacement)) = reference(&text[i..], place, env) else {
                    i += 1;
                    continue;
                };
                out.text.push_str(&text[copied..i]);
                let start = out.text.len();
                let (value, var, secret, problem) = match replacement {
                    Replacement::Dollar => ("$".to_string(), None, None, None),
                    Replacement::Var {
                        name,
                        raw,
                        value,
                        secret,
                    } => {
                        let secret = secret.then_some(raw.unwrap_or_default());
                        match value {
                            Ok(v) => (v, Some(name), secret, None),
                            Err(why) => (placeholder(place), Some(name), secret, Some(why)),
                        }
                    }
                    Replacement::Malformed(why) => (placeholder(place), None, None, Some(why)),
                };
                out.text.push_str(&value);
                let to = start..out.text.len();
                if let Some(message) = &problem {
                    out.problems.push(Problem {
                        to: to.clone(),
                        message: message.clone(),
                    });
                }
                out.pieces.push(Piece {
                    from: i..i + len,
                    to,
                    var,
                    secret: secret.is_some(),
                    secret_value: secret,
                    failed: problem.is_some(),
                });
                i += len;
                copied = i;
            }
            State::Normal => {
                (state, i) = match rest {
                    [b'#', ..] => (State::Comment, i + 1),
                    [b'"', b'"', b'"', ..] => (State::In(Place::Basic { multi: true }), i + 3),
                    [b'"', ..] => (State::In(Place::Basic { multi: false }), i + 1),
                    [b'\'', b'\'', b'\'', ..] => (State::In(Place::Literal { multi: true }), i + 3),
                    [b'\'', ..] => (State::In(Place::Literal { multi: false }), i + 1),
                    _ => (State::Normal, i + 1),
                };
            }
            State::In(place) => {
                let (quote, multi) = match place {
                    Place::Basic { multi } => (b'"', multi),
                    Place::Literal { multi } => (b'\'', multi),
                    Place::Bare => unreachable!("Bare is never a string state"),
                };
                if matches!(place, Place::Basic { .. }) && rest[0] == b'\\' {
                    i += 2;
                } else if !multi && (rest[0] == quote || rest[0] == b'\n') {
                    state = State::Normal;
                    i += 1;
                } else if multi && rest.starts_with(&[quote; 3]) {
                    // Up to two more quotes belong to the content: `""""`.
                    let extra = rest[3..].iter().take(2).take_while(|&&b| b == quote);
                    i += 3 + extra.count();
                    state = State::Normal;
                } else {
                    i += 1;
                }
            }
        }
    }
    out.text.push_str(&text[copied..]);
    out
}

enum Replacement {
    Dollar,
    Var {
        name: String,
        /// The value before it is written into its place.
        raw: Option<String>,
        value: Result<String, String>,
        secret: bool,
    },
    Malformed(String),
}

/// The reference starting at `s` (which begins with `$`): its length and
/// what replaces it, or `None` for a lone `$`.
fn reference(
    s: &str,
    place: Place,
    env: &dyn Fn(&str) -> Option<String>,
) -> Option<(usize, Replacement)> {
    if s.starts_with("$$") {
        return Some((2, Replacement::Dollar));
    }
    if !s.starts_with("${") {
        return None;
    }
    let line = s.split('\n').next().unwrap_or(s);
    let Some(close) = line.find('}') else {
        return Some((
            2,
            Replacement::Malformed(
                "`${` without a closing `}` on the same line: write ${NAME} or \
                 ${NAME:-default}, or $$ for a literal $"
                    .to_string(),
            ),
        ));
    };
    let inner = &s[2..close];
    let (name, default) = match inner.split_once(":-") {
        Some((n, d)) => (n, Some(d)),
        None => (inner, None),
    };
    if !is_name(name) {
        return Some((
            close + 1,
            Replacement::Malformed(format!(
                "`${{{inner}}}`: {name:?} is not a variable name (letters, digits and _, not \
                 starting with a digit): write ${{NAME}} or ${{NAME:-default}}, or $$ for a \
                 literal $"
            )),
        ));
    }
    let secret = looks_secret(name);
    let raw = env(name)
        .filter(|v| !v.is_empty())
        .or_else(|| default.map(str::to_string));
    let value = match &raw {
        Some(v) => render(v, place, name, secret),
        None => Err(format!(
            "the environment variable {name} is not set (or is empty): set it in the \
             environment holdfast runs in (for the service, Environment= or EnvironmentFile= \
             in a drop-in: systemctl edit holdfast), or give a default: ${{{name}:-value}}"
        )),
    };
    Some((
        close + 1,
        Replacement::Var {
            name: name.to_string(),
            raw,
            value,
            secret,
        },
    ))
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether a variable's name says it holds a secret (its value is then
/// masked by `check` and never quoted in messages). Names of places
/// (`CREDENTIALS_DIRECTORY`, `TOKEN_FILE`) are not secrets.
pub(crate) fn looks_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    let words: Vec<&str> = upper.split(['_', '-']).filter(|w| !w.is_empty()).collect();
    let place = ["FILE", "DIR", "DIRECTORY", "PATH"];
    if words.last().is_some_and(|w| place.contains(w)) {
        return false;
    }
    const SECRET: &[&str] = &[
        "PASSWORD",
        "PASSWD",
        "PASS",
        "SECRET",
        "TOKEN",
        "KEY",
        "APIKEY",
        "CREDENTIAL",
        "CREDENTIALS",
        "AUTH",
        "AUTHORIZATION",
        "PRIVATE",
    ];
    words.iter().any(|w| SECRET.contains(w))
}

/// What is written in place of a reference that failed, so the rest of the
/// file can still be parsed and checked.
fn placeholder(place: Place) -> String {
    match place {
        Place::Bare => "0".to_string(),
        Place::Basic { .. } | Place::Literal { .. } => String::new(),
    }
}

/// `value` written so that it is exactly one value where it stands.
fn render(value: &str, place: Place, name: &str, secret: bool) -> Result<String, String> {
    let shown = if secret {
        String::new()
    } else {
        format!(" ({value:?})")
    };
    match place {
        Place::Basic { .. } => Ok(escape_basic(value)),
        Place::Literal { multi } => {
            let bad = value.chars().find(|&c| {
                c == '\''
                    || (c == '\n' && !multi)
                    || (c.is_control() && c != '\t' && !(multi && matches!(c, '\n' | '\r')))
            });
            match bad {
                None => Ok(value.to_string()),
                Some(c) => Err(format!(
                    "the value of {name}{shown} holds {c:?}, which a literal string ('...') \
                     cannot hold: use a basic string (\"${{{name}}}\"), where it is escaped"
                )),
            }
        }
        Place::Bare => bare_scalar(value).map(str::to_string).ok_or_else(|| {
            format!(
                "the value of {name}{shown} is not a number, true/false or a date-time, which is \
                 all a value outside quotes may be: quote it, like key = \"${{{name}}}\""
            )
        }),
    }
}

/// `value` if it is one TOML number, boolean or date-time and nothing else.
fn bare_scalar(value: &str) -> Option<&str> {
    let t = value.trim();
    // Anything that could end the value early or open a structure is out,
    // whatever the parser would make of it.
    if t.is_empty() || t.contains(['#', '\n', '\r', '"', '\'', '[', ']', '{', '}', ',', '=']) {
        return None;
    }
    let parsed = DeValue::parse(t).ok()?;
    match parsed.get_ref() {
        DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) | DeValue::Datetime(_) => {
            Some(t)
        }
        _ => None,
    }
}

/// The inside of a TOML basic string holding exactly `value`.
pub(crate) fn escape_basic(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out
}
