/*!
Who the client is: the subject of its verified TLS client certificate
([`ClientSubject`]), and bearer-token authentication.

The token is checked from the request's head, before any of its body is
read or any memory budget taken; a request without it is answered 401 and
its connection closed, so a flood of them holds no slot for long and
cannot keep authenticated clients out.

Bearer tokens: The token is read once at start from
`bearer_token_file` (surrounding whitespace trimmed), never logged, and
compared in constant time: how long a comparison takes depends only on the
lengths, never on how many leading bytes matched.
*/

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context};
use hyper::header::HeaderValue;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};

/// The subject (RFC 4514) of the client certificate the connection's TLS
/// handshake verified, in each of its requests' extensions; stored on each
/// log record as `tls.client.subject`.
#[derive(Debug, Clone)]
pub(crate) struct ClientSubject(pub Arc<str>);

/// The record attribute of [`ClientSubject`] (the OpenTelemetry
/// semantic-convention name).
pub(crate) const ATTR_CLIENT_SUBJECT: &str = "tls.client.subject";

/// Sets `tls.client.subject` on every log record of `req` to the verified
/// `subject`. Where the listener asks for client certificates (`asks`), a
/// value the client wrote itself is removed, verified subject or not: the
/// attribute must only ever say what TLS verified.
pub(crate) fn stamp_subject(
    req: &mut ExportLogsServiceRequest,
    asks: bool,
    subject: Option<&ClientSubject>,
) {
    if !asks {
        return;
    }
    for r in req
        .resource_logs
        .iter_mut()
        .flat_map(|r| &mut r.scope_logs)
        .flat_map(|s| &mut s.log_records)
    {
        r.attributes.retain(|kv| kv.key != ATTR_CLIENT_SUBJECT);
        if let Some(subject) = subject {
            r.attributes.push(KeyValue {
                key: ATTR_CLIENT_SUBJECT.to_string(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::StringValue(subject.0.to_string())),
                }),
                ..Default::default()
            });
        }
    }
}

/// The token clients must send as `Authorization: Bearer <token>`.
pub(crate) struct Token(Vec<u8>);

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

impl Token {
    pub(crate) fn load(path: &Path) -> anyhow::Result<Token> {
        let raw = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let Ok(text) = std::str::from_utf8(&raw) else {
            bail!("{} is not UTF-8 text", path.display());
        };
        Token::new(text).with_context(|| format!("in {}", path.display()))
    }

    pub(crate) fn new(text: &str) -> anyhow::Result<Token> {
        let t = text.trim();
        if t.is_empty() {
            bail!("the token file is empty: write the token in it (one line)");
        }
        // RFC 6750 token68 characters are all visible ASCII; anything else
        // (a space, a second line) could not be sent in a header.
        if !t.bytes().all(|b| b.is_ascii_graphic()) {
            bail!(
                "the token holds spaces, line breaks or non-ASCII characters, which cannot be \
                 sent in an Authorization header: use one line of visible ASCII"
            );
        }
        Ok(Token(t.as_bytes().to_vec()))
    }

    /// Whether an `Authorization` header carries this token.
    pub(crate) fn accepts(&self, header: Option<&HeaderValue>) -> bool {
        let Some(h) = header else { return false };
        let h = h.as_bytes();
        // "Bearer" is case-insensitive (RFC 7235); one or more spaces follow.
        if h.len() < 7 || !h[..6].eq_ignore_ascii_case(b"bearer") || h[6] != b' ' {
            return false;
        }
        let offered = h[6..].trim_ascii();
        constant_time_eq(offered, &self.0)
    }
}

/// Compares every byte position up to the longer length, whatever the
/// contents, folding differences (and a length mismatch) into one flag.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= std::hint::black_box(x ^ y);
    }
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> HeaderValue {
        HeaderValue::from_str(s).unwrap()
    }

    #[test]
    fn accepts_only_the_exact_token() {
        let t = Token::new("  s3cret-token\n").unwrap();
        assert!(t.accepts(Some(&h("Bearer s3cret-token"))));
        assert!(t.accepts(Some(&h("bearer   s3cret-token"))));
        assert!(!t.accepts(None));
        assert!(!t.accepts(Some(&h("Bearer s3cret-toke"))));
        assert!(!t.accepts(Some(&h("Bearer s3cret-token2"))));
        assert!(!t.accepts(Some(&h("Basic s3cret-token"))));
        assert!(!t.accepts(Some(&h("Bearers3cret-token"))));
        assert!(!t.accepts(Some(&h("Bearer "))));
        assert!(!t.accepts(Some(&h("s3cret-token"))));
    }

    #[test]
    fn rejects_unusable_token_files() {
        assert!(Token::new(" \n").is_err());
        assert!(Token::new("two words").is_err());
        assert!(Token::new("line1\nline2").is_err());
        let e = format!("{:?}", Token::new("abc").unwrap());
        assert!(!e.contains("abc"));
    }

    #[test]
    fn constant_time_eq_is_plain_equality() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
        assert!(!constant_time_eq(b"ab\0", b"ab"));
    }
}
