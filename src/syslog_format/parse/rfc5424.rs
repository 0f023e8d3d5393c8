//! RFC 5424: `<PRI>VERSION SP TIMESTAMP SP HOSTNAME SP APP-NAME SP PROCID SP
//! MSGID SP STRUCTURED-DATA [SP MSG]`, strictly: a message that breaks the
//! grammar is kept whole by the caller, with the reason.

use std::borrow::Cow;

use super::{strip_bom, token, Format, Parsed, SdElement};
use crate::calendar as time;

type Result<T> = std::result::Result<T, &'static str>;

/// The two errors of header field `$name`: the header ends where it should
/// be, or it is malformed. One wording for every field.
macro_rules! field_errors {
    ($name:literal) => {
        (
            concat!("RFC 5424 header ends in ", $name),
            concat!(
                "RFC 5424 ",
                $name,
                " is empty, too long or not printable ASCII"
            ),
        )
    };
}

/// `rest` is what follows `<PRI>`.
pub(super) fn parse(pri: u8, rest: &[u8]) -> Result<Parsed<'_>> {
    let (version, rest) = token(rest).ok_or("RFC 5424 header ends after the version")?;
    if version != b"1" {
        return Err("RFC 5424 version is not 1");
    }
    let (ts, rest) = token(rest).ok_or("RFC 5424 header ends after the timestamp")?;
    let timestamp_ns = match ts {
        b"-" => None,
        ts => Some(time::rfc3339(ts).ok_or("RFC 5424 timestamp is not RFC 3339")?),
    };
    let (hostname, rest) = field(rest, 255, field_errors!("HOSTNAME"))?;
    let (app_name, rest) = field(rest, 48, field_errors!("APP-NAME"))?;
    let (proc_id, rest) = field(rest, 128, field_errors!("PROCID"))?;
    let (msg_id, rest) = field(rest, 32, field_errors!("MSGID"))?;
    let (structured_data, rest) = structured_data(rest)?;
    let message = match rest {
        [] => rest,
        [b' ', msg @ ..] => strip_bom(msg),
        _ => return Err("RFC 5424 structured data is not followed by a space"),
    };
    Ok(Parsed {
        timestamp_ns,
        hostname,
        app_name,
        proc_id,
        msg_id,
        structured_data,
        ..Parsed::base(Format::Rfc5424, Some(pri), message)
    })
}

/// A header field of printable ASCII up to `max` bytes, `-` for none;
/// `why` is the error for a missing and for a malformed field.
fn field<'a>(
    s: &'a [u8],
    max: usize,
    why: (&'static str, &'static str),
) -> Result<(Option<&'a [u8]>, &'a [u8])> {
    let (v, rest) = token(s).ok_or(why.0)?;
    if v.is_empty() || v.len() > max || !v.iter().all(|&b| (33..=126).contains(&b)) {
        return Err(why.1);
    }
    Ok(((v != b"-").then_some(v), rest))
}

/// `-` or one or more `[SD-ID *(SP NAME="VALUE")]`.
fn structured_data(s: &[u8]) -> Result<(Vec<SdElement<'_>>, &[u8])> {
    if let Some(rest) = s.strip_prefix(b"-") {
        return Ok((Vec::new(), rest));
    }
    let mut out = Vec::new();
    let mut s = s;
    while let Some(rest) = s.strip_prefix(b"[") {
        let (id, mut rest) = sd_name(rest).ok_or("RFC 5424 SD-ID is missing or invalid")?;
        let mut params = Vec::new();
        loop {
            match rest {
                [b']', after @ ..] => {
                    rest = after;
                    break;
                }
                [b' ', after @ ..] => {
                    let (name, after) =
                        sd_name(after).ok_or("RFC 5424 SD-PARAM name is missing or invalid")?;
                    let after = after
                        .strip_prefix(b"=\"")
                        .ok_or("RFC 5424 SD-PARAM has no =\"value\"")?;
                    let (value, after) = sd_value(after)?;
                    params.push((name, value));
                    rest = after;
                }
                _ => return Err("RFC 5424 SD-ELEMENT is not closed with ]"),
            }
        }
        out.push(SdElement { id, params });
        s = rest;
    }
    if out.is_empty() {
        return Err("RFC 5424 structured data is neither - nor [SD-ELEMENT]");
    }
    Ok((out, s))
}

/// SD-NAME: 1 to 32 printable ASCII bytes but `=`, space, `]` and `"`.
fn sd_name(s: &[u8]) -> Option<(&str, &[u8])> {
    let n = s
        .iter()
        .take_while(|&&b| (33..=126).contains(&b) && !matches!(b, b'=' | b']' | b'"'))
        .count();
    if n == 0 || n > 32 {
        return None;
    }
    let name = std::str::from_utf8(&s[..n]).ok()?;
    Some((name, &s[n..]))
}

/// A PARAM-VALUE after its opening quote: UTF-8 up to the closing quote,
/// with `\"`, `\\` and `\]` unescaped (any other backslash is kept, as the
/// RFC says).
fn sd_value(s: &[u8]) -> Result<(Cow<'_, str>, &[u8])> {
    let mut i = 0;
    let mut escaped = false;
    while i < s.len() {
        match s[i] {
            b'\\' if i + 1 < s.len() => {
                escaped |= matches!(s[i + 1], b'"' | b'\\' | b']');
                i += 2;
                continue;
            }
            b'"' => break,
            _ => i += 1,
        }
    }
    if i >= s.len() {
        return Err("RFC 5424 SD-PARAM value has no closing quote");
    }
    let raw = std::str::from_utf8(&s[..i]).map_err(|_| "RFC 5424 SD-PARAM value is not UTF-8")?;
    let value = if escaped {
        let mut v = String::with_capacity(raw.len());
        let mut chars = raw.chars();
        while let Some(c) = chars.next() {
            if c == '\\' {
                match chars.next() {
                    Some(e @ ('"' | '\\' | ']')) => v.push(e),
                    Some(other) => {
                        v.push('\\');
                        v.push(other);
                    }
                    None => v.push('\\'),
                }
            } else {
                v.push(c);
            }
        }
        Cow::Owned(v)
    } else {
        Cow::Borrowed(raw)
    };
    Ok((value, &s[i + 1..]))
}
