//! A network sink's `auth` table (basic, bearer, API key; secrets from
//! files or the environment), checked.

use serde::de::IgnoredAny;
use toml::Spanned;

use super::Place;
use crate::checking::raw::raw_table;
use crate::checking::Checker;
use crate::sinks::http::Auth;

raw_table! {
    /// `auth.*`, as written. At most one scheme.
    RawAuth, "a table with user and password_file, bearer_token_file, or api_key_file" {
        /// HTTP basic auth user; needs `password_file`.
        user: String,
        /// A file holding the basic auth password.
        password_file: String,
        /// A file holding a bearer token.
        bearer_token_file: String,
        /// A file holding an Elasticsearch API key (`elasticsearch` only).
        api_key_file: String,
        /// Never allowed: refused with the reason.
        password: IgnoredAny,
        /// Never allowed: refused with the reason.
        bearer_token: IgnoredAny,
        /// Never allowed: refused with the reason.
        api_key: IgnoredAny,
    }
}

pub(super) fn check_auth(
    cx: &mut Checker<'_>,
    p: &Place<'_, '_>,
    a: &Spanned<RawAuth>,
    api_keys: bool,
) -> Option<Auth> {
    let raw = a.get_ref();
    let akey = |k: &str| p.key(&format!("auth.{k}"));
    for (inline, file, what) in [
        (&raw.password, "password_file", "password"),
        (&raw.bearer_token, "bearer_token_file", "token"),
        (&raw.api_key, "api_key_file", "API key"),
    ] {
        if let Some(v) = inline {
            let name = file.trim_end_matches("_file");
            cx.error(
                Some(v.span()),
                &akey(name),
                format!(
                    "a {what} must not be written in the config: config files are often \
                     world-readable and end up in backups, bug reports and `holdfast check` \
                     output. Put it alone in a file readable only by holdfast (chmod 600) and \
                     set auth.{file} instead"
                ),
            );
        }
    }
    let user = raw.user.as_ref().map(|u| {
        cx.note(&akey("user"), u);
        u.get_ref().clone()
    });
    let password_file = cx.path(&akey("password_file"), raw.password_file.as_ref());
    let token_file = cx.path(&akey("bearer_token_file"), raw.bearer_token_file.as_ref());
    let key_file = cx.path(&akey("api_key_file"), raw.api_key_file.as_ref());
    if let (Some(v), false) = (&raw.api_key_file, api_keys) {
        cx.error(
            Some(v.span()),
            &akey("api_key_file"),
            "API keys are an Elasticsearch scheme; this sink type takes user and password_file \
             (basic auth) or bearer_token_file",
        );
        return None;
    }
    let schemes = [
        raw.user.is_some() || raw.password_file.is_some(),
        raw.bearer_token_file.is_some(),
        raw.api_key_file.is_some(),
    ]
    .iter()
    .filter(|&&b| b)
    .count();
    if schemes > 1 {
        cx.error(
            Some(a.span()),
            &p.key("auth"),
            "more than one kind of credentials is set: choose one of user + password_file \
             (basic), bearer_token_file, or api_key_file",
        );
        return None;
    }
    match (user, password_file, token_file, key_file) {
        (Some(user), Some(password_file), _, _) => Some(Auth::Basic {
            user,
            password_file,
        }),
        (Some(_), None, _, _) => {
            let span = raw.user.as_ref().map(|u| u.span());
            cx.error(
                span,
                &akey("user"),
                "basic auth needs auth.password_file too (a file holding the password)",
            );
            None
        }
        (None, Some(_), _, _) => {
            let span = raw.password_file.as_ref().map(|u| u.span());
            cx.error(
                span,
                &akey("password_file"),
                "basic auth needs auth.user too",
            );
            None
        }
        (None, None, Some(token_file), _) => Some(Auth::Bearer { token_file }),
        (None, None, None, Some(key_file)) => Some(Auth::ApiKey { key_file }),
        (None, None, None, None) => {
            if raw.password.is_none() && raw.bearer_token.is_none() && raw.api_key.is_none() {
                cx.error(
                    Some(a.span()),
                    &p.key("auth"),
                    "auth is empty: set user and password_file, bearer_token_file, or \
                     api_key_file, or remove auth",
                );
            }
            None
        }
    }
}
