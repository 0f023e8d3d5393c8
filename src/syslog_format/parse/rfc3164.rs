//! RFC 3164, the BSD format, as devices really send it:
//!
//! ```text
//! <PRI>[SEQ: ][*|.]TIMESTAMP[:] [HOSTNAME ][TAG[[PID]]: ]MSG
//! ```
//!
//! Every part after `<PRI>` may be missing. TIMESTAMP is `Mmm dd
//! hh:mm:ss` (day space-padded or not), with an optional year before the
//! clock, fraction and zone name after it (Cisco's `Mar  1 2024
//! 00:00:45.123 UTC:`), or an RFC 3339 time (rsyslog's high-precision
//! form). Cisco's sequence number (`123: `) and its unsynchronised-clock
//! marks (`*`, `.`) are skipped. A token after the timestamp is a hostname
//! unless it looks like a tag (ends in `:` or holds `[`); without a
//! timestamp no hostname is guessed. This format cannot fail: what fits
//! none of the parts is the message.

use super::{strip_bom, Format, ParseOptions, Parsed};
use crate::calendar::{self as time, TimeZone};

const MONTHS: [&[u8; 3]; 12] = [
    b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov", b"Dec",
];

/// `rest` is what follows `<PRI>` (the whole line when there is none).
pub(super) fn parse<'a>(pri: Option<u8>, rest: &'a [u8], opts: &ParseOptions) -> Parsed<'a> {
    // Cisco's sequence number and clock marks only count before a
    // timestamp; otherwise they are part of the message.
    let marked = match skip_sequence(rest) {
        [b'*' | b'.', r @ ..] => r,
        r => r,
    };
    let (timestamp_ns, rest) = match timestamp(marked, opts) {
        Some((ts, r)) => (Some(ts), r),
        None => (None, rest),
    };
    let (hostname, rest) = match timestamp_ns {
        Some(_) => hostname(rest),
        None => (None, rest),
    };
    let (app_name, proc_id, rest) = tag(rest);
    Parsed {
        timestamp_ns,
        hostname,
        app_name,
        proc_id,
        ..Parsed::base(Format::Rfc3164, pri, strip_bom(rest))
    }
}

/// Cisco's `123: ` before the timestamp.
fn skip_sequence(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
    match &s[n..] {
        [b':', b' ', rest @ ..] if n > 0 => rest,
        _ => s,
    }
}

/// The timestamp and what follows it (its separating space consumed).
fn timestamp<'a>(s: &'a [u8], opts: &ParseOptions) -> Option<(i64, &'a [u8])> {
    if s.first().is_some_and(u8::is_ascii_digit) {
        let end = memchr::memchr(b' ', s).unwrap_or(s.len());
        let tok = &s[..end];
        let tok = tok.strip_suffix(b":").unwrap_or(tok);
        let ts = time::rfc3339(tok)?;
        return Some((ts, s.get(end + 1..).unwrap_or_default()));
    }
    let month = MONTHS
        .iter()
        .position(|m| s.len() >= 4 && s[..3].eq_ignore_ascii_case(&m[..]) && s[3] == b' ')?
        as u32
        + 1;
    let s = &s[4..];
    let (day, s) = match s {
        [b' ', d @ b'1'..=b'9', b' ', r @ ..] => (u32::from(d - b'0'), r),
        [d @ b'1'..=b'9', b' ', r @ ..] => (u32::from(d - b'0'), r),
        [a, b, b' ', r @ ..] => (time::two(&[*a, *b])?, r),
        _ => return None,
    };
    let (year, s) = if s.len() >= 5 && s[4] == b' ' && s[..4].iter().all(u8::is_ascii_digit) {
        let y = s[..4]
            .iter()
            .fold(0i64, |a, &d| a * 10 + i64::from(d - b'0'));
        (Some(y), &s[5..])
    } else {
        (None, s)
    };
    let (clock, mut s) = time::clock(s)?;
    let mut zone = opts.time_zone;
    // A zone name (Cisco's `UTC`): only UTC and GMT are known for sure;
    // any other name keeps the configured zone.
    if let [b' ', r @ ..] = s {
        let n = r.iter().take_while(|b| b.is_ascii_uppercase()).count();
        if (3..=5).contains(&n) && r.get(n) == Some(&b':') {
            if matches!(&r[..n], b"UTC" | b"GMT") {
                zone = TimeZone::Utc;
            }
            s = &r[n..];
        }
    }
    let s = s.strip_prefix(b":").unwrap_or(s);
    let s = match s {
        [b' ', r @ ..] => r,
        [] => s,
        _ => return None,
    };
    let at = |year| time::in_zone(&time::reading(year, month, day, clock)?, zone);
    let ts = match year {
        Some(y) => at(y)?,
        None => {
            // The latest of next year, this year and last year that is not
            // more than a week ahead of the receive time: messages come
            // from the past, give or take a clock that runs a little fast.
            let limit = (opts.now_unix + 7 * 86400).saturating_mul(1_000_000_000);
            let this = time::year_of(opts.now_unix, zone);
            [this + 1, this, this - 1]
                .into_iter()
                .filter_map(at)
                .find(|&t| t <= limit)?
        }
    };
    Some((ts, s))
}

/// A hostname token, unless the token is a tag (`name:`, `name[pid]:`) or
/// a Cisco mnemonic (`%FACILITY-…`).
fn hostname(s: &[u8]) -> (Option<&[u8]>, &[u8]) {
    let Some(end) = memchr::memchr(b' ', s) else {
        return (None, s);
    };
    let tok = &s[..end];
    let looks_like_host = !tok.is_empty()
        && !tok.ends_with(b":")
        && !tok.contains(&b'[')
        && tok[0] != b'%'
        && tok.iter().all(|&b| (33..=126).contains(&b));
    if looks_like_host {
        (Some(tok), &s[end + 1..])
    } else {
        (None, s)
    }
}

/// `TAG:` or `TAG[PID]:` (then an optional space), where TAG is up to 48
/// letters, digits and `-_./`, at least one a letter.
fn tag(s: &[u8]) -> (Option<&[u8]>, Option<&[u8]>, &[u8]) {
    let n = s
        .iter()
        .take(49)
        // `(`, `)`: old PAM tags, `sshd(pam_unix)[19939]:`.
        .take_while(|&&b| {
            b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'/' | b'(' | b')')
        })
        .count();
    // A tag names a program: at least one letter (Cisco's `123:` is a
    // sequence number).
    if n == 0 || n > 48 || !s[..n].iter().any(u8::is_ascii_alphabetic) {
        return (None, None, s);
    }
    let (name, after) = s.split_at(n);
    let (pid, after) = match after {
        [b'[', r @ ..] => {
            let Some(close) = memchr::memchr(b']', r).filter(|&c| c > 0 && c <= 128) else {
                return (None, None, s);
            };
            (Some(&r[..close]), &r[close + 1..])
        }
        _ => (None, after),
    };
    match after {
        [b':', b' ', r @ ..] => (Some(name), pid, r),
        [b':'] => (Some(name), pid, &[]),
        [b':', r @ ..] if pid.is_some() => (Some(name), pid, r),
        _ => (None, None, s),
    }
}
