/*!
Syslog messages → their parts: a pure function over one message's bytes
([`parse`]), with no I/O, so that the network source and anything reading
syslog lines from files share it.

Which format a message is in is read from its start: `<PRI>` then a version
digit and a space is RFC 5424 (`rfc5424.rs`); `<PRI>` followed by anything
else is RFC 3164, the BSD format, in the shapes real devices send
(`rfc3164.rs`). A message that does not fit is never lost: [`Parsed::error`]
says why, and the whole message is the body.

The 3164 timestamp has neither year nor zone. The zone is the configured
[`TimeZone`]. The year is the latest of next year, this year and last year
(around the receive time, [`ParseOptions::now_unix`]) that puts the
timestamp no more than seven days after the receive time: messages are
about the past, so a `Dec 31 23:59:59` received on 1 January is last
year's, while a `Jan  1 00:00:30` received a minute before midnight on
31 December (a device clock running fast) is next year's.
*/

mod rfc3164;
mod rfc5424;

use std::borrow::Cow;

use crate::calendar::TimeZone;

/// What parsing needs besides the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParseOptions {
    /// The zone of RFC 3164 timestamps (which carry none).
    pub time_zone: TimeZone,
    /// When the message was received, unix seconds: chooses the year of
    /// RFC 3164 timestamps.
    pub now_unix: i64,
}

/// The format a message was read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Rfc5424,
    Rfc3164,
    /// Not syslog as far as the parser can tell: see [`Parsed::error`].
    Unparsed,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::Rfc5424 => "rfc5424",
            Format::Rfc3164 => "rfc3164",
            Format::Unparsed => "unparsed",
        }
    }
}

/// One structured-data element of an RFC 5424 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SdElement<'a> {
    pub id: &'a str,
    /// Parameters in the order sent, values unescaped (`\"`, `\\`, `\]`).
    pub params: Vec<(&'a str, Cow<'a, str>)>,
}

/// A message's parts, borrowing from its bytes. Absent and nil (`-`)
/// fields are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Parsed<'a> {
    pub format: Format,
    /// 0..=23, from `<PRI>`.
    pub facility: Option<u8>,
    /// 0 (emergency) ..= 7 (debug), from `<PRI>`.
    pub severity: Option<u8>,
    /// The message's own time, unix nanoseconds.
    pub timestamp_ns: Option<i64>,
    pub hostname: Option<&'a [u8]>,
    /// RFC 5424 APP-NAME, or the RFC 3164 TAG.
    pub app_name: Option<&'a [u8]>,
    /// RFC 5424 PROCID, or the pid in an RFC 3164 `tag[pid]:`.
    pub proc_id: Option<&'a [u8]>,
    pub msg_id: Option<&'a [u8]>,
    pub structured_data: Vec<SdElement<'a>>,
    /// The free-form message (after a UTF-8 BOM); the whole message when
    /// it could not be parsed.
    pub message: &'a [u8],
    /// Why the message could not be parsed (`format` is then `Unparsed`).
    pub error: Option<&'static str>,
}

impl<'a> Parsed<'a> {
    /// `message` with what `<PRI>` says, and nothing else yet.
    fn base(format: Format, pri: Option<u8>, message: &'a [u8]) -> Parsed<'a> {
        Parsed {
            format,
            facility: pri.map(|p| p >> 3),
            severity: pri.map(|p| p & 7),
            timestamp_ns: None,
            hostname: None,
            app_name: None,
            proc_id: None,
            msg_id: None,
            structured_data: Vec::new(),
            message,
            error: None,
        }
    }

    fn unparsed(line: &'a [u8], pri: Option<u8>, error: &'static str) -> Parsed<'a> {
        Parsed {
            error: Some(error),
            ..Parsed::base(Format::Unparsed, pri, line)
        }
    }
}

/// Parses one syslog message (its framing already removed). Never fails:
/// what does not parse comes back whole, with [`Parsed::error`] set.
pub fn parse<'a>(line: &'a [u8], opts: &ParseOptions) -> Parsed<'a> {
    let line = trim_end(line);
    let Some((pri, rest)) = pri(line) else {
        return Parsed::unparsed(line, None, "no <PRI> at the start of the message");
    };
    match rest {
        [b'1'..=b'9', b' ', ..] | [b'1'..=b'9', b'0'..=b'9', b' ', ..] => {
            match rfc5424::parse(pri, rest) {
                Ok(p) => p,
                Err(e) => Parsed::unparsed(line, Some(pri), e),
            }
        }
        _ => rfc3164::parse(Some(pri), rest, opts),
    }
}

/// Parses a line as syslog daemons write them to files: a message with its
/// `<PRI>`, or RFC 3164 without one (`Jun 14 15:16:01 host tag[pid]: msg`,
/// the traditional `/var/log/syslog` line, or rsyslog's RFC 3339 form),
/// which must then start with a timestamp. Facility and severity are then
/// unknown.
pub fn parse_logged<'a>(line: &'a [u8], opts: &ParseOptions) -> Parsed<'a> {
    let line = trim_end(line);
    if line.starts_with(b"<") {
        return parse(line, opts);
    }
    let p = rfc3164::parse(None, line, opts);
    if p.timestamp_ns.is_none() {
        return Parsed::unparsed(line, None, "neither <PRI> nor a timestamp at the start");
    }
    p
}

/// Trailing newline, carriage return and NUL: terminators devices add
/// beyond the framing.
fn trim_end(mut line: &[u8]) -> &[u8] {
    while let [rest @ .., b'\n' | b'\r' | 0] = line {
        line = rest;
    }
    line
}

/// `<PRI>`: 1 to 3 digits, at most 191, no leading zero (but `<0>`).
fn pri(line: &[u8]) -> Option<(u8, &[u8])> {
    let rest = line.strip_prefix(b"<")?;
    let end = rest.iter().take(4).position(|&b| b == b'>')?;
    let digits = &rest[..end];
    if digits.is_empty() || (digits.len() > 1 && digits[0] == b'0') {
        return None;
    }
    let mut v: u16 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + u16::from(d - b'0');
    }
    (v <= 191).then_some((v as u8, &rest[end + 1..]))
}

/// The message after an optional UTF-8 BOM.
fn strip_bom(msg: &[u8]) -> &[u8] {
    msg.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(msg)
}

/// Splits at the first space: (token, rest after the space).
fn token(s: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = memchr::memchr(b' ', s)?;
    Some((&s[..at], &s[at + 1..]))
}

#[cfg(test)]
mod tests;
