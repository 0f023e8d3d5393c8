//! A network sink's `headers` and `headers_file` tables, checked: extra
//! request headers such as a tenant (`X-Scope-OrgID`) or a routing key,
//! with secret values read from files like the `auth.*_file` keys.
//!
//! A header the sink sets itself (the body's type and encoding, the
//! credentials of `auth`, what HTTP/1.1 framing decides) cannot be
//! overridden: a second value would be sent beside ours, or replace what
//! makes the request readable. A header named like a credential must come
//! from a file, for the same reason as `auth.password`.

use std::collections::BTreeMap;

use reqwest::header::{HeaderName, HeaderValue};
use toml::Spanned;

use super::Place;
use crate::checking::Checker;
use crate::sinks::http::{Header, HeaderValueFrom};

/// Header names to values (`headers`) or to files (`headers_file`).
pub(crate) type RawHeaders = BTreeMap<Spanned<String>, Spanned<String>>;

/// Headers set by the sink itself, and why.
const OWN: [(&str, &str); 6] = [
    ("content-type", "the encoding of the body decides it"),
    ("content-encoding", "the `compression` key decides it"),
    ("content-length", "HTTP/1.1 framing decides it"),
    ("transfer-encoding", "HTTP/1.1 framing decides it"),
    ("host", "the endpoint URL decides it"),
    ("connection", "the HTTP client decides it"),
];

/// Parts of a header name that say its value is a credential.
const SECRET_HINTS: [&str; 8] = [
    "authorization",
    "token",
    "secret",
    "password",
    "api-key",
    "apikey",
    "api_key",
    "cookie",
];

/// `headers.X-Name` when the name is a bare TOML key, else quoted.
fn header_key(p: &Place<'_, '_>, table: &str, name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if bare {
        p.key(&format!("{table}.{name}"))
    } else {
        p.key(&format!("{table}.{name:?}"))
    }
}

/// Checks both tables; `auth` says whether `auth.*` sets Authorization.
pub(super) fn check_headers(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    inline: Option<&Spanned<RawHeaders>>,
    files: Option<&Spanned<RawHeaders>>,
    auth: bool,
) -> Vec<Header> {
    let mut out: Vec<Header> = Vec::new();
    let tables = [("headers", inline), ("headers_file", files)];
    for (table, raw) in tables {
        for (name, value) in raw.map(Spanned::get_ref).into_iter().flatten() {
            let key = header_key(p, table, name.get_ref());
            cx.note(&key, value);
            let Some(problem) = name_problem(name.get_ref(), table, auth, &out) else {
                let value = if table == "headers" {
                    inline_value(cx, &key, value)
                } else {
                    cx.path(&key, Some(value)).map(HeaderValueFrom::File)
                };
                if let Some(value) = value {
                    out.push(Header {
                        name: name.get_ref().clone(),
                        value,
                    });
                }
                continue;
            };
            cx.error(Some(name.span()), &key, problem);
        }
    }
    out
}

/// Why `name` cannot be sent from `table`, if it cannot.
fn name_problem(name: &str, table: &str, auth: bool, earlier: &[Header]) -> Option<String> {
    if HeaderName::from_bytes(name.as_bytes()).is_err() {
        return Some(format!(
            "\"{name}\" is not a valid header name: write letters, digits and - (also \
             !#$%&'*+.^_`|~), without spaces or colons, like \"X-Scope-OrgID\""
        ));
    }
    let lower = name.to_ascii_lowercase();
    if let Some((_, why)) = OWN.iter().find(|(own, _)| *own == lower) {
        return Some(format!(
            "holdfast sets {name} itself ({why}); remove it from {table}"
        ));
    }
    if lower == "authorization" && auth {
        return Some(format!(
            "auth sets the Authorization header; remove it from {table}, or remove auth"
        ));
    }
    if earlier.iter().any(|h| h.name.eq_ignore_ascii_case(name)) {
        return Some(format!(
            "{name} is set twice (header names ignore case, and headers and headers_file \
             share them); keep one"
        ));
    }
    if table == "headers" && SECRET_HINTS.iter().any(|s| lower.contains(s)) {
        return Some(format!(
            "{name} looks like a credential, and a credential must not be written in the \
             config: config files are often world-readable and end up in backups, bug reports \
             and `holdfast check` output. Put the value alone in a file readable only by \
             holdfast (chmod 600) and set headers_file = {{ \"{name}\" = \"/path/to/file\" }} \
             instead"
        ));
    }
    None
}

fn inline_value(
    cx: &mut Checker<'_>,
    key: &str,
    value: &Spanned<String>,
) -> Option<HeaderValueFrom> {
    if HeaderValue::from_str(value.get_ref()).is_err() {
        cx.error(
            Some(value.span()),
            key,
            "the value holds characters a header cannot carry (control characters or a line \
             break); write it on one line in visible ASCII",
        );
        return None;
    }
    Some(HeaderValueFrom::Inline(value.get_ref().clone()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(name: &str, table: &str, auth: bool) -> Option<String> {
        let earlier = [Header {
            name: "X-Tenant".into(),
            value: HeaderValueFrom::Inline("a".into()),
        }];
        name_problem(name, table, auth, &earlier)
    }

    #[test]
    fn names_are_checked_for_what_the_sink_owns_and_for_secrets() {
        assert_eq!(problem("X-Scope-OrgID", "headers", true), None);
        assert_eq!(problem("X-Api-Key", "headers_file", false), None);
        assert_eq!(problem("Authorization", "headers_file", false), None);
        let cases = [
            ("X Bad", "headers", false, "not a valid header name"),
            ("Bad:", "headers", false, "not a valid header name"),
            (
                "content-type",
                "headers",
                false,
                "holdfast sets content-type itself",
            ),
            ("Host", "headers_file", false, "the endpoint URL decides it"),
            (
                "Authorization",
                "headers_file",
                true,
                "auth sets the Authorization",
            ),
            ("x-tenant", "headers_file", false, "set twice"),
            ("X-Auth-Token", "headers", false, "set headers_file"),
            ("Cookie", "headers", false, "set headers_file"),
        ];
        for (name, table, auth, fragment) in cases {
            let p = problem(name, table, auth).unwrap_or_else(|| panic!("{name} accepted"));
            assert!(p.contains(fragment), "{name}: {p}");
        }
    }
}
