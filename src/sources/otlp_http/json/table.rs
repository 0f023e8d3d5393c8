/*!
What every message decoder relies on: JSON paths for errors, the
unknown-key hint, the oneof guard, the object and array shapes.
*/

use std::fmt;

use super::tree::J;
use super::{JsonError, Result};

// ---------------------------------------------------------------------------
// Paths and errors

/// Where in the document a value is; rendered only for errors.
#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    Root,
    Key(&'a Path<'a>, &'a str),
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    pub(super) fn key(&'a self, k: &'a str) -> Path<'a> {
        Path::Key(self, k)
    }
    pub(super) fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root => Ok(()),
            Path::Key(p, k) => {
                if matches!(p, Path::Root) {
                    write!(f, "{k}")
                } else {
                    write!(f, "{p}.{k}")
                }
            }
            Path::Index(p, i) => write!(f, "{p}[{i}]"),
        }
    }
}

pub(super) fn err(p: &Path<'_>, problem: impl Into<String>) -> JsonError {
    JsonError {
        path: p.to_string(),
        problem: problem.into(),
    }
}

pub(super) fn snake_to_camel(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut upper = false;
    for c in s.chars() {
        if c == '_' {
            upper = true;
        } else if upper {
            out.extend(c.to_uppercase());
            upper = false;
        } else {
            out.push(c);
        }
    }
    out
}

pub(super) fn unknown(p: &Path<'_>, key: &str, known: &[&str]) -> JsonError {
    let camel = snake_to_camel(key);
    let hint = if camel != key && known.contains(&camel.as_str()) {
        format!("OTLP/JSON keys are lowerCamelCase: write {camel:?}")
    } else if let Some(best) = known
        .iter()
        .map(|k| {
            (
                k,
                strsim::jaro_winkler(&key.to_ascii_lowercase(), &k.to_ascii_lowercase()),
            )
        })
        .filter(|(_, score)| *score >= 0.85)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(k, _)| k)
    {
        format!("did you mean {best:?}?")
    } else {
        format!("the keys of this object are {}", known.join(", "))
    };
    err(
        p,
        format!(
            "unknown key {key:?} ({hint}); holdfast refuses keys it cannot store rather than \
             drop what they hold"
        ),
    )
}

/// Remembers which member of a oneof was set, to refuse a second one.
pub(super) struct OneOf<'k> {
    set: Option<&'k str>,
}

impl<'k> OneOf<'k> {
    pub(super) fn new() -> Self {
        OneOf { set: None }
    }

    /// Records `key` as the member given; `null` members do not count.
    pub(super) fn take(&mut self, p: &Path<'_>, key: &'k str, v: &J) -> Result<bool> {
        if matches!(v, J::Null) {
            return Ok(false);
        }
        if let Some(first) = self.set {
            return Err(err(
                p,
                format!(
                    "both {first:?} and {key:?} are given, but they are alternatives (a oneof): \
                     give only one"
                ),
            ));
        }
        self.set = Some(key);
        Ok(true)
    }
}

pub(super) fn object<'j>(v: &'j J, p: &Path<'_>, what: &str) -> Result<&'j [(String, J)]> {
    match v {
        J::Obj(fields) => Ok(fields),
        J::Null => Ok(&[]),
        other => Err(err(
            p,
            format!("expected {what} (an object), found {}", other.kind()),
        )),
    }
}

pub(super) fn list<T>(
    v: &J,
    p: &Path<'_>,
    f: impl Fn(&J, &Path<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let items = match v {
        J::Arr(items) => items,
        J::Null => return Ok(Vec::new()),
        other => return Err(err(p, format!("expected an array, found {}", other.kind()))),
    };
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let ip = p.index(i);
        if matches!(item, J::Null) {
            return Err(err(&ip, "null is not allowed inside an array"));
        }
        out.push(f(item, &ip)?);
    }
    Ok(out)
}

pub(super) fn optional<T>(
    v: &J,
    p: &Path<'_>,
    f: impl Fn(&J, &Path<'_>) -> Result<T>,
) -> Result<Option<T>> {
    match v {
        J::Null => Ok(None),
        v => f(v, p).map(Some),
    }
}

/// The top-level object: one key holding the resource list.
pub(super) fn top<'j>(tree: &'j J, key: &str) -> Result<&'j J> {
    let root = Path::Root;
    let mut found = &J::Null;
    for (k, v) in object(tree, &root, "an Export*ServiceRequest")? {
        if k == key {
            found = v;
        } else {
            return Err(unknown(&root, k, &[key]));
        }
    }
    Ok(found)
}
