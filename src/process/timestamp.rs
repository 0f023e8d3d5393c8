//! `timestamp`: a field read as the record's time (`time_unix_nano`), with
//! RFC 3339, Unix seconds or milliseconds, or a strptime-style pattern, in
//! a time zone (UTC, the machine's local zone, or a fixed offset) unless
//! the text carries its own offset.
//!
//! The pattern language is the usual strptime subset, compiled once at
//! check time so a bad directive is a config error with its position:
//! `%Y %y %m %d %e %H %I %p %M %S %f %z %Z %b %h %B %a %A %j %s %T %F %%`;
//! a space matches any run of blanks. Without `%Y`/`%y` (syslog's `Jun 14
//! 15:16:01`) the year is the current one.

use std::time::{SystemTime, UNIX_EPOCH};

use super::{Event, Flow, Value};
use crate::calendar::days_from_civil;
use crate::calendar::TimeZone;

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Item {
    Lit(u8),
    Space,
    Year,
    Year2,
    Month,
    MonthName,
    Day,
    Hour,
    Hour12,
    AmPm,
    Minute,
    Second,
    Fraction,
    /// `.123` or `,123`, or nothing (RFC 3339).
    OptFraction,
    Offset,
    /// An offset or nothing (RFC 3339 written without one).
    OptOffset,
    ZoneName,
    Skip,
    DayOfYear,
    Epoch,
    /// `T`, `t` or a space (RFC 3339).
    DateTimeSep,
}

/// How the field's text is read.
#[derive(Debug, Clone, PartialEq)]
pub enum TimeFormat {
    Rfc3339,
    UnixSeconds,
    UnixMillis,
    Pattern(String, Vec<Item>),
}

impl TimeFormat {
    /// `"rfc3339"`, `"unix"`, `"unix_ms"` or a strptime pattern; an error
    /// gives the byte position in the pattern and what is wrong there.
    pub fn parse(s: &str) -> Result<TimeFormat, (usize, String)> {
        match s {
            "rfc3339" | "RFC3339" | "iso8601" => return Ok(TimeFormat::Rfc3339),
            "unix" => return Ok(TimeFormat::UnixSeconds),
            "unix_ms" => return Ok(TimeFormat::UnixMillis),
            _ => {}
        }
        let mut items = Vec::new();
        if read_pattern(s, &mut items)? == 0 {
            return Err((
                0,
                "the pattern has no % directive: it would read no time".into(),
            ));
        }
        Ok(TimeFormat::Pattern(s.to_string(), items))
    }

    pub fn describe(&self) -> &str {
        match self {
            TimeFormat::Rfc3339 => "RFC 3339",
            TimeFormat::UnixSeconds => "Unix seconds",
            TimeFormat::UnixMillis => "Unix milliseconds",
            TimeFormat::Pattern(p, _) => p,
        }
    }
}

/// Appends the items of strptime pattern `s` to `items`; returns how many
/// directives it holds, or the byte position in `s` and what is wrong there.
fn read_pattern(s: &str, items: &mut Vec<Item>) -> Result<usize, (usize, String)> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut fields = 0;
    while i < b.len() {
        if b[i] != b'%' {
            items.push(if b[i] == b' ' {
                Item::Space
            } else {
                Item::Lit(b[i])
            });
            i += 1;
            continue;
        }
        let Some(&d) = b.get(i + 1) else {
            return Err((
                i,
                "a pattern cannot end with a lone %; write %% for a literal %".into(),
            ));
        };
        match d {
            // Shorthands, read as the patterns they stand for (as strftime
            // defines them).
            b'T' => {
                read_pattern("%H:%M:%S", items)?;
            }
            b'F' => {
                read_pattern("%Y-%m-%d", items)?;
            }
            _ => {
                let Some(expand) = directive(d) else {
                    let shown = s[i..].chars().take(2).collect::<String>();
                    return Err((
                        i,
                        format!(
                            "unknown directive {shown}: use %Y %y %m %d %e %H %I %p %M %S %f %z %Z \
                             %b %B %a %j %s %T %F or %%"
                        ),
                    ));
                };
                items.extend_from_slice(expand);
            }
        }
        fields += 1;
        i += 2;
    }
    Ok(fields)
}

/// The items of one directive (the letter after `%`), `%T` and `%F` aside.
fn directive(d: u8) -> Option<&'static [Item]> {
    let items: &'static [Item] = match d {
        b'Y' => &[Item::Year],
        b'y' => &[Item::Year2],
        b'm' => &[Item::Month],
        b'd' | b'e' => &[Item::Day],
        b'H' | b'k' => &[Item::Hour],
        b'I' | b'l' => &[Item::Hour12],
        b'p' => &[Item::AmPm],
        b'M' => &[Item::Minute],
        b'S' => &[Item::Second],
        b'f' => &[Item::Fraction],
        b'z' => &[Item::Offset],
        b'Z' => &[Item::ZoneName],
        b'b' | b'h' | b'B' => &[Item::MonthName],
        b'a' | b'A' => &[Item::Skip],
        b'j' => &[Item::DayOfYear],
        b's' => &[Item::Epoch],
        b'%' => &[Item::Lit(b'%')],
        _ => return None,
    };
    Some(items)
}

// `%Y-%m-%d`, `T`, `%H:%M:%S`, an optional fraction and offset.
#[rustfmt::skip]
const RFC3339: &[Item] = &[
    Item::Year, Item::Lit(b'-'), Item::Month, Item::Lit(b'-'), Item::Day, Item::DateTimeSep,
    Item::Hour, Item::Lit(b':'), Item::Minute, Item::Lit(b':'), Item::Second,
    Item::OptFraction, Item::OptOffset,
];

/// A timestamp step.
#[derive(Debug, Clone)]
pub struct Timestamp {
    pub field: String,
    pub format: TimeFormat,
    pub zone: TimeZone,
}

impl Timestamp {
    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        let ns = match ev.attr(&self.field) {
            Some(Value::Int(i)) if self.format == TimeFormat::UnixSeconds => i
                .checked_mul(1_000_000_000)
                .and_then(|n| u64::try_from(n).ok()),
            Some(Value::Int(i)) if self.format == TimeFormat::UnixMillis => {
                i.checked_mul(1_000_000).and_then(|n| u64::try_from(n).ok())
            }
            Some(Value::Double(d)) if self.format == TimeFormat::UnixSeconds => {
                (*d >= 0.0 && *d < 1e10).then_some((*d * 1e9) as u64)
            }
            Some(v) => v.as_text().and_then(|t| self.parse(&t)),
            None => None,
        };
        match ns {
            Some(ns) => {
                ev.time_unix_nano = ns;
                Flow::Next
            }
            None => Flow::Unparsed,
        }
    }

    /// Unix nanoseconds of `text`, or `None` if it does not match.
    pub fn parse(&self, text: &str) -> Option<u64> {
        let text = text.trim();
        match &self.format {
            TimeFormat::Rfc3339 => read(RFC3339, text, self.zone),
            TimeFormat::Pattern(_, items) => read(items, text, self.zone),
            TimeFormat::UnixSeconds => {
                let f: f64 = text.parse().ok()?;
                (0.0..1e10).contains(&f).then_some((f * 1e9) as u64)
            }
            TimeFormat::UnixMillis => {
                let n: u64 = text.parse().ok()?;
                n.checked_mul(1_000_000)
            }
        }
    }
}

struct Cursor<'a> {
    s: &'a [u8],
    i: usize,
}

impl Cursor<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// 1 to `max` digits.
    fn num(&mut self, max: usize) -> Option<i64> {
        let start = self.i;
        let mut n: i64 = 0;
        while self.i < self.s.len() && self.i - start < max && self.s[self.i].is_ascii_digit() {
            n = n * 10 + (self.s[self.i] - b'0') as i64;
            self.i += 1;
        }
        (self.i > start).then_some(n)
    }

    /// `Z`, or `+HH:MM`, `+HHMM`, `+HH`: seconds east of UTC.
    fn offset(&mut self) -> Option<i32> {
        match self.peek()? {
            b'Z' | b'z' => {
                self.i += 1;
                Some(0)
            }
            c @ (b'+' | b'-') => {
                self.i += 1;
                let h = self.num(2)?;
                if self.peek() == Some(b':') {
                    self.i += 1;
                }
                let m = self.num(2).unwrap_or(0);
                if h > 23 || m > 59 {
                    return None;
                }
                let off = (h * 3600 + m * 60) as i32;
                Some(if c == b'-' { -off } else { off })
            }
            _ => None,
        }
    }

    fn word(&mut self) -> &str {
        let start = self.i;
        while self.i < self.s.len() && self.s[self.i].is_ascii_alphabetic() {
            self.i += 1;
        }
        std::str::from_utf8(&self.s[start..self.i]).unwrap_or("")
    }
}

const MONTHS: [&str; 12] = [
    "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
];

fn read(items: &[Item], text: &str, zone: TimeZone) -> Option<u64> {
    let mut c = Cursor {
        s: text.as_bytes(),
        i: 0,
    };
    let (mut year, mut month, mut day) = (None, 1, 1);
    let (mut hour, mut minute, mut second, mut nanos) = (0, 0, 0, 0u64);
    let mut pm = None;
    let mut yday = None;
    let mut offset = None;
    for item in items {
        match *item {
            Item::Lit(l) => {
                if c.peek()? != l {
                    return None;
                }
                c.i += 1;
            }
            Item::Space => {
                let start = c.i;
                while matches!(c.peek(), Some(b' ' | b'\t')) {
                    c.i += 1;
                }
                if c.i == start {
                    return None;
                }
            }
            Item::DateTimeSep => match c.peek()? {
                b'T' | b't' | b' ' => c.i += 1,
                _ => return None,
            },
            Item::Year => year = Some(c.num(4)?),
            Item::Year2 => {
                let y = c.num(2)?;
                year = Some(if y < 69 { 2000 + y } else { 1900 + y });
            }
            Item::Month => month = c.num(2)?,
            Item::MonthName => {
                let w = c.word().to_ascii_lowercase();
                month = MONTHS.iter().position(|m| w.len() >= 3 && m == &&w[..3])? as i64 + 1;
            }
            Item::Day => {
                if c.peek() == Some(b' ') {
                    c.i += 1;
                }
                day = c.num(2)?
            }
            Item::Hour | Item::Hour12 => hour = c.num(2)?,
            Item::AmPm => {
                pm = Some(match c.word().to_ascii_lowercase().as_str() {
                    "am" => false,
                    "pm" => true,
                    _ => return None,
                })
            }
            Item::Minute => minute = c.num(2)?,
            Item::Second => second = c.num(2)?,
            Item::Fraction | Item::OptFraction => {
                if *item == Item::OptFraction {
                    if !matches!(c.peek(), Some(b'.' | b',')) {
                        continue;
                    }
                    c.i += 1;
                }
                let start = c.i;
                let n = c.num(9)?;
                let digits = (c.i - start) as u32;
                while matches!(c.peek(), Some(b'0'..=b'9')) {
                    c.i += 1;
                }
                nanos = n as u64 * 10u64.pow(9 - digits);
            }
            Item::Offset => offset = Some(c.offset()?),
            Item::OptOffset => offset = c.offset().or(offset),
            Item::ZoneName => match c.word() {
                "UTC" | "GMT" | "Z" => offset = Some(0),
                _ => return None,
            },
            Item::Skip => {
                c.word();
            }
            Item::DayOfYear => yday = Some(c.num(3)?),
            Item::Epoch => {
                let s = c.num(12)?;
                return (c.i == c.s.len()).then(|| s as u64 * 1_000_000_000 + nanos);
            }
        }
    }
    if c.i != c.s.len() {
        return None;
    }
    if let Some(pm) = pm {
        if !(1..=12).contains(&hour) {
            return None;
        }
        hour = hour % 12 + if pm { 12 } else { 0 };
    }
    let year = match year {
        Some(y) => y,
        None => current_year(),
    };
    if !(1..=12).contains(&month)
        || !(1..=31).contains(&day)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return None;
    }
    let days = match yday {
        Some(n) if (1..=366).contains(&n) => days_from_civil(year, 1, 1) + n - 1,
        Some(_) => return None,
        None => days_from_civil(year, month as u32, day as u32),
    };
    let local = days * 86_400 + hour * 3600 + minute * 60 + second;
    let secs = match (offset, zone) {
        (Some(off), _) => local - off as i64,
        (None, zone) => local - zone.offset_at(local),
    };
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(nanos)
}

fn current_year() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    // The year whose 1 January is the last one at or before now.
    let mut y = 1970 + secs / 31_556_952;
    while days_from_civil(y, 1, 1) * 86_400 > secs {
        y -= 1;
    }
    while days_from_civil(y + 1, 1, 1) * 86_400 <= secs {
        y += 1;
    }
    y
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(format: &str, zone: &str) -> Timestamp {
        Timestamp {
            field: "t".into(),
            format: TimeFormat::parse(format).expect("a format"),
            zone: TimeZone::parse(zone).expect("a zone"),
        }
    }

    const S: u64 = 1_000_000_000;

    #[test]
    fn rfc3339_with_and_without_offset() {
        let t = ts("rfc3339", "UTC");
        assert_eq!(t.parse("1970-01-01T00:00:01Z"), Some(S));
        assert_eq!(
            t.parse("2024-02-29T12:00:00.5+01:00"),
            Some(1_709_204_400 * S + S / 2)
        );
        assert_eq!(
            t.parse("2024-02-29 11:00:00.123456789"),
            Some(1_709_204_400 * S + 123_456_789)
        );
        assert_eq!(t.parse("2024-13-01T00:00:00Z"), None);
        assert_eq!(t.parse("yesterday"), None);
        assert_eq!(
            ts("rfc3339", "+02:00").parse("1970-01-01T02:00:00"),
            Some(0)
        );
    }

    #[test]
    fn strptime_patterns_of_loghub_files() {
        // Apache: [Sun Dec 04 04:47:44 2005]
        let t = ts("[%a %b %d %H:%M:%S %Y]", "UTC");
        assert_eq!(
            t.parse("[Sun Dec 04 04:47:44 2005]"),
            Some(1_133_671_664 * S)
        );
        // nginx: 10/Oct/2000:13:55:36 -0700
        let t = ts("%d/%b/%Y:%H:%M:%S %z", "UTC");
        assert_eq!(t.parse("10/Oct/2000:13:55:36 -0700"), Some(971_211_336 * S));
        // HDFS: 081109 203615
        let t = ts("%y%m%d %H%M%S", "UTC");
        assert_eq!(t.parse("081109 203615"), Some(1_226_262_975 * S));
        // Android: 03-17 16:13:38.811 (no year: this year's)
        let t = ts("%m-%d %H:%M:%S.%f", "UTC");
        let got = t.parse("03-17 16:13:38.811").expect("parses");
        assert_eq!(got % S, 811_000_000);
        assert_eq!(ts("%s", "UTC").parse("1700000000"), Some(1_700_000_000 * S));
        assert_eq!(
            ts("%I:%M %p %F", "UTC").parse("12:30 am 1970-01-02"),
            Some(86_400 * S + 1800 * S)
        );
    }

    #[test]
    fn bad_patterns_name_the_position() {
        assert_eq!(TimeFormat::parse("%Y-%Q").unwrap_err().0, 3);
        assert_eq!(TimeFormat::parse("%H %").unwrap_err().0, 3);
        assert!(TimeFormat::parse("plain").is_err());
        assert!(TimeZone::parse("Mars/Olympus").is_none());
        assert_eq!(TimeZone::parse("-0130"), Some(TimeZone::Fixed(-5400)));
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
        assert!(current_year() >= 2024);
    }
}
