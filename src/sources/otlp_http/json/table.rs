/*!
How a message table becomes a decoder: the `messages!` macro (and
`signal!`, the envelopes every signal shares, written with it) and what the
code they write relies on (JSON paths for errors, the unknown-key rule and
its tally, the oneof guard, the object and array shapes).
*/

use std::cell::{Cell, RefCell};
use std::fmt;

use super::tree::J;
use super::{JsonError, Result};

/// Writes the decoder of each OTLP message from its table of keys.
///
/// Each row names the JSON key, the prost field it fills and how its value
/// is read: `"jsonKey" => field = reader` calls `reader(value, path)`, and
/// `reader(args)` calls `reader(value, path, args)`. A row
/// `oneof(Variant, reader)` makes the key a member of the oneof `field`: a
/// second non-null member is refused, `null` leaves the field unset.
///
/// The rows are the only place a key is written: they become both the match
/// that fills the fields and the list of allowed keys (in row order, which is
/// the order the unknown-key hint lists them in), so the strictness the
/// decoder exists for cannot drift from what it decodes. The generated code
/// is the loop a hand-written decoder would have: one pass over the
/// object's keys, no allocation per key.
macro_rules! messages {
    // One row: a member of a oneof, or a plain field.
    (@set $out:ident.$field:ident, $one:ident, $p:ident, $k:ident, $v:ident, $kp:ident,
        oneof($variant:expr, $read:expr)) => {
        if $one.take($p, $k, $v)? {
            $out.$field = Some($variant($read($v, &$kp)?));
        }
    };
    (@set $out:ident.$field:ident, $one:ident, $p:ident, $k:ident, $v:ident, $kp:ident,
        $read:ident $(($($arg:expr),*))?) => {
        $out.$field = $read($v, &$kp $($(, $arg)*)?)?
    };
    ($(
        $(#[$attr:meta])*
        $vis:vis fn $name:ident($what:expr) -> $ty:ty {
            $($key:literal => $field:ident = $read:ident $(($($arg:expr),*))?),+ $(,)?
        }
    )+) => {$(
        $(#[$attr])*
        $vis fn $name(v: &J, p: &Path<'_>) -> Result<$ty> {
            const KEYS: &[&str] = &[$($key),+];
            let mut out = <$ty>::default();
            // Only messages with a oneof use it; it is one word on the stack.
            #[allow(unused_mut, unused_variables)]
            let mut one = OneOf::new();
            for (k, v) in object(v, p, $what)? {
                let kp = p.key(k);
                match k.as_str() {
                    $($key => messages!(@set out.$field, one, p, k, v, kp, $read $(($($arg),*))?),)+
                    _ => unknown(p, k, KEYS)?,
                }
            }
            Ok(out)
        }
    )+};
}

/// Writes what every signal wraps its records in: the request (one key, the
/// list of resources), the per-resource message and the per-scope message,
/// which differ between signals only in their names.
macro_rules! signal {
    (
        $(#[$attr:meta])*
        pub(crate) fn $name:ident -> $request:ident {
            $resources_key:literal => $resources:ident: $resource_ty:ident,
            $scopes_key:literal => $scopes:ident: $scope_ty:ident,
            $records_key:literal => $records:ident: $record:ident $(,)?
        }
    ) => {
        $(#[$attr])*
        pub(crate) fn $name(tree: &J, tally: &UnknownKeys) -> Result<$request> {
            Ok($request {
                $resources: top_list(tree, tally, $resources_key, $resources)?,
            })
        }

        messages! {
            fn $resources(concat!("a ", stringify!($resource_ty))) -> $resource_ty {
                "resource" => resource = optional(resource),
                $scopes_key => $scopes = list($scopes),
                "schemaUrl" => schema_url = string,
            }

            fn $scopes(concat!("a ", stringify!($scope_ty))) -> $scope_ty {
                "scope" => scope = optional(scope),
                $records_key => $records = list($record),
                "schemaUrl" => schema_url = string,
            }
        }
    };
}

// ---------------------------------------------------------------------------
// Paths and errors

/// Where in the document a value is; rendered only for errors and for the
/// first unknown keys. The root holds the request's tally of unknown keys,
/// so that every reader can reach it through the path it already has.
#[derive(Clone, Copy)]
pub(super) enum Path<'a> {
    Root(&'a UnknownKeys),
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
    fn tally(&self) -> &'a UnknownKeys {
        match self {
            Path::Root(t) => t,
            Path::Key(p, _) | Path::Index(p, _) => p.tally(),
        }
    }
}

impl fmt::Display for Path<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Path::Root(_) => Ok(()),
            Path::Key(p, k) => {
                if matches!(p, Path::Root(_)) {
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

/// How many unknown keys of one request are named in the debug log.
pub(super) const UNKNOWN_KEYS_NAMED: usize = 3;

/// The keys a request held that no table knows, ignored as the OTLP spec
/// requires ("receivers MUST ignore unknown fields": a newer client's field
/// must not cost the batch) but counted, with where the first few were.
#[derive(Debug, Default)]
pub(crate) struct UnknownKeys {
    count: Cell<u64>,
    first: RefCell<Vec<String>>,
}

impl UnknownKeys {
    pub(crate) fn count(&self) -> u64 {
        self.count.get()
    }

    /// The first [`UNKNOWN_KEYS_NAMED`] of them, each as its JSON path and a
    /// hint.
    pub(crate) fn first(&self) -> Vec<String> {
        self.first.borrow().clone()
    }

    fn add(&self, p: &Path<'_>, key: &str, known: &[&str]) {
        self.count.set(self.count.get() + 1);
        let mut first = self.first.borrow_mut();
        if first.len() < UNKNOWN_KEYS_NAMED {
            let at = p.key(key);
            first.push(format!("{at} ({})", near_miss(key, known)));
        }
    }
}

/// What a key may have meant, for a message.
fn near_miss(key: &str, known: &[&str]) -> String {
    let lower = key.to_ascii_lowercase();
    known
        .iter()
        .map(|k| (k, strsim::jaro_winkler(&lower, &k.to_ascii_lowercase())))
        .filter(|(_, score)| *score >= 0.85)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map_or_else(
            || format!("the keys of this object are {}", known.join(", ")),
            |(k, _)| format!("did you mean {k:?}?"),
        )
}

/// A key no row of the table holds: the snake_case spelling of a known key
/// is a mistake (OTLP/JSON keys are lowerCamelCase only, and the records it
/// holds would be lost), refused; any other key is taken as a field of a
/// newer OTLP release, counted in the request's tally and skipped (its
/// value, whatever it is, was parsed into the tree and is dropped with it).
pub(super) fn unknown(p: &Path<'_>, key: &str, known: &[&str]) -> Result<()> {
    let camel = snake_to_camel(key);
    if camel != key && known.contains(&camel.as_str()) {
        return Err(err(
            p,
            format!(
                "unknown key {key:?} (OTLP/JSON keys are lowerCamelCase: write {camel:?}); \
                 holdfast refuses a misspelt key rather than drop what it holds"
            ),
        ));
    }
    p.tally().add(p, key, known);
    Ok(())
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

/// The key of each signal's request that holds its resources.
const REQUEST_KEYS: [&str; 3] = ["resourceLogs", "resourceSpans", "resourceMetrics"];

/// The top-level object: one key holding the resource list. Another
/// signal's key there is a request sent to the wrong path, refused.
fn top<'j>(tree: &'j J, root: &Path<'_>, key: &str) -> Result<&'j J> {
    let mut found = &J::Null;
    for (k, v) in object(tree, root, "an Export*ServiceRequest")? {
        if k == key {
            found = v;
        } else if REQUEST_KEYS.contains(&k.as_str()) {
            return Err(err(
                root,
                format!(
                    "unknown key {k:?} (did you mean {key:?}?): this is the request of another \
                     signal; send it to that signal's path"
                ),
            ));
        } else {
            unknown(root, k, &[key])?;
        }
    }
    Ok(found)
}

/// The request's list of resources, read only once the top-level object is
/// known to hold no other signal's key.
pub(super) fn top_list<T>(
    tree: &J,
    unknown: &UnknownKeys,
    key: &str,
    f: impl Fn(&J, &Path<'_>) -> Result<T>,
) -> Result<Vec<T>> {
    let root = Path::Root(unknown);
    list(top(tree, &root, key)?, &root.key(key), f)
}
