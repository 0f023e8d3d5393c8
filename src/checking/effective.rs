//! The config as holdfast reads it, for `holdfast check --print-config`: the
//! file after environment interpolation, comments and layout kept, with
//! every secret replaced by `"********"` so the output can be pasted into a
//! ticket. Secret are the values of keys named like one (`password`,
//! `token`, `api_key`, `secret`, `key`, a header like `X-Api-Key`; not the
//! `*_file` keys, whose value is a path) and every value that holds an
//! environment variable whose name looks secret.

use std::ops::Range;

use toml::de::{DeTable, DeValue};
use toml::Spanned;

use super::interpolate::Piece;

/// What a masked value is shown as.
pub const MASK: &str = "\"********\"";

/// The spellings of each secret value that a message could quote (as
/// given, as escaped in TOML, as Rust's `{:?}` writes it), longest first.
/// Values shorter than 4 characters are left: replacing them would mangle
/// messages and hide nothing worth hiding.
pub(crate) fn secret_spellings(pieces: &[Piece]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for v in pieces.iter().filter_map(|p| p.secret_value.as_deref()) {
        let debug = format!("{v:?}");
        let forms = [
            v.to_string(),
            super::interpolate::escape_basic(v),
            debug[1..debug.len() - 1].to_string(),
        ];
        out.extend(forms.into_iter().filter(|f| f.chars().count() >= 4));
    }
    out.sort_by_key(|f| std::cmp::Reverse(f.len()));
    out.dedup();
    out
}

/// `text` with every occurrence of a secret spelling replaced by the mask.
pub(crate) fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_string();
    for s in secrets {
        if out.contains(s.as_str()) {
            out = out.replace(s.as_str(), "********");
        }
    }
    out
}

/// `text` (the substituted config) with each secret value masked.
pub(crate) fn masked(text: &str, root: &DeTable<'_>, pieces: &[Piece]) -> String {
    let secret_pieces: Vec<Range<usize>> = pieces
        .iter()
        .filter(|p| p.secret)
        .map(|p| p.to.clone())
        .collect();
    let mut spans = Vec::new();
    collect_table(root, false, &secret_pieces, &mut spans);
    spans.sort_by_key(|s| s.start);
    let mut out = String::with_capacity(text.len());
    let mut copied = 0;
    for s in spans {
        // Nested spans: the outer one is already masked.
        if s.start < copied {
            continue;
        }
        out.push_str(&text[copied..s.start]);
        out.push_str(MASK);
        copied = s.end;
    }
    out.push_str(&text[copied..]);
    out
}

fn collect_table(
    t: &DeTable<'_>,
    secret: bool,
    pieces: &[Range<usize>],
    out: &mut Vec<Range<usize>>,
) {
    for (k, v) in t.iter() {
        collect_value(v, secret || key_is_secret(k.get_ref()), pieces, out);
    }
}

fn collect_value(
    v: &Spanned<DeValue<'_>>,
    secret: bool,
    pieces: &[Range<usize>],
    out: &mut Vec<Range<usize>>,
) {
    match v.get_ref() {
        // A table's span is only its header: mask its leaves instead.
        DeValue::Table(t) => collect_table(t, secret, pieces, out),
        DeValue::Array(a) if !secret => {
            for e in a.iter() {
                collect_value(e, false, pieces, out);
            }
        }
        _ => {
            let span = v.span();
            let from_secret_env = pieces
                .iter()
                .any(|p| span.start <= p.start && p.end <= span.end);
            if secret || from_secret_env {
                out.push(span);
            }
        }
    }
}

/// Whether a key's name says its value is a secret; `*_file`, `*_path` and
/// `*_dir` keys hold where a secret is, which is shown.
pub(crate) fn key_is_secret(key: &str) -> bool {
    let lower = key.to_ascii_lowercase();
    let words: Vec<&str> = lower.split(['_', '-', '.']).collect();
    if words
        .last()
        .is_some_and(|w| ["file", "path", "dir"].contains(w))
    {
        return false;
    }
    const SECRET: &[&str] = &[
        "password",
        "passwd",
        "token",
        "secret",
        "key",
        "apikey",
        "authorization",
        "credentials",
    ];
    words.iter().any(|w| SECRET.contains(w))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checking::interpolate::interpolate;

    fn mask(text: &str, env: &[(&str, &str)]) -> String {
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        };
        let i = interpolate(text, &lookup);
        let root = DeTable::parse(&i.text).unwrap();
        masked(&i.text, root.get_ref(), &i.pieces)
    }

    #[test]
    fn secret_keys_and_secret_variables_are_masked_paths_are_not() {
        let text = "# token = comment stays\n\
                    [sinks.es.auth]\nusername = \"u\"\npassword = \"hunter2\"\n\
                    password_file = \"/run/credentials/holdfast/pw\"\n\
                    [sinks.o]\nbearer_token = \"t\"\napi_key = 'k'\n\
                    endpoint = \"https://${HOST}/v1?sig=${SIG_SECRET}\"\n\
                    headers = { X-Api-Key = \"abc\", X-Site = \"${SITE}\" }\n";
        let out = mask(
            text,
            &[("HOST", "h"), ("SIG_SECRET", "zzz"), ("SITE", "berlin")],
        );
        assert!(out.starts_with("# token = comment stays\n"), "{out}");
        assert!(out.contains("username = \"u\""), "{out}");
        assert!(out.contains("password = \"********\""), "{out}");
        assert!(
            out.contains("password_file = \"/run/credentials/holdfast/pw\""),
            "{out}"
        );
        assert!(out.contains("bearer_token = \"********\""), "{out}");
        assert!(out.contains("api_key = \"********\""), "{out}");
        assert!(out.contains("endpoint = \"********\""), "{out}");
        assert!(out.contains("X-Api-Key = \"********\""), "{out}");
        assert!(out.contains("X-Site = \"berlin\""), "{out}");
        for secret in ["hunter2", "zzz", "abc"] {
            assert!(!out.contains(secret), "{secret} in {out}");
        }
        // Still TOML.
        DeTable::parse(&out).unwrap();
    }

    #[test]
    fn key_names() {
        for secret in [
            "password",
            "bearer_token",
            "api_key",
            "secret",
            "key",
            "X-Api-Key",
        ] {
            assert!(key_is_secret(secret), "{secret}");
        }
        for shown in [
            "password_file",
            "key_file",
            "bearer_token_file",
            "keep",
            "monkey",
        ] {
            assert!(!key_is_secret(shown), "{shown}");
        }
    }
}
