//! Calendar arithmetic for syslog timestamps: RFC 3339 (RFC 5424's
//! TIMESTAMP) and the zone of zoneless RFC 3164 times. Proleptic Gregorian,
//! no leap seconds (a `:60` is read as the next second's start).

use std::fmt;

use crate::sinks::template::Civil;

/// Where a timestamp without a zone was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeZone {
    Utc,
    /// The zone of the machine holdfast runs on (`TZ`, `/etc/localtime`),
    /// with its daylight saving time at the message's date.
    Local,
    /// A fixed offset east of UTC, in seconds.
    Fixed(i32),
}

impl TimeZone {
    /// `"UTC"`, `"local"` or an offset like `"+02:00"` / `"-0530"`.
    pub fn parse(s: &str) -> Option<TimeZone> {
        match s {
            "UTC" | "utc" | "Z" => return Some(TimeZone::Utc),
            "local" => return Some(TimeZone::Local),
            _ => {}
        }
        let b = s.as_bytes();
        let sign = match b.first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let digits: Vec<u8> = b[1..].iter().copied().filter(|&c| c != b':').collect();
        if digits.len() != 4 || !digits.iter().all(u8::is_ascii_digit) || b.len() > 6 {
            return None;
        }
        let h = i32::from(digits[0] - b'0') * 10 + i32::from(digits[1] - b'0');
        let m = i32::from(digits[2] - b'0') * 10 + i32::from(digits[3] - b'0');
        (h <= 14 && m < 60).then_some(TimeZone::Fixed(sign * (h * 3600 + m * 60)))
    }

    /// Seconds east of UTC for a local time that reads as `local_secs`
    /// (seconds since the epoch as if it were UTC).
    pub(crate) fn offset_at(self, local_secs: i64) -> i64 {
        match self {
            TimeZone::Utc => 0,
            TimeZone::Fixed(o) => i64::from(o),
            // Asking at the local reading itself is off by the offset
            // near a DST switch only; best effort, as the format allows.
            TimeZone::Local => local_offset(local_secs),
        }
    }
}

impl fmt::Display for TimeZone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            TimeZone::Utc => f.write_str("UTC"),
            TimeZone::Local => f.write_str("local"),
            TimeZone::Fixed(o) => {
                let sign = if o < 0 { '-' } else { '+' };
                let o = o.unsigned_abs();
                write!(f, "{sign}{:02}:{:02}", o / 3600, o % 3600 / 60)
            }
        }
    }
}

fn local_offset(at: i64) -> i64 {
    let t = at as libc::time_t;
    // SAFETY: `tm` is plain data that localtime_r fills; both pointers are
    // valid for the call.
    unsafe {
        let mut tm: libc::tm = std::mem::zeroed();
        if libc::localtime_r(&t, &mut tm).is_null() {
            return 0;
        }
        tm.tm_gmtoff
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The civil year of a unix time in `tz`.
pub(super) fn year_of(unix: i64, tz: TimeZone) -> i64 {
    let local = (unix + tz.offset_at(unix)).max(0) as u64;
    Civil::from_unix_nanos(local.saturating_mul(1_000_000_000)).year
}

/// A wall-clock reading (the sinks' own calendar type, read the other way
/// here): `None` unless it is a real date and time.
pub(super) fn reading(
    year: i64,
    month: u32,
    day: u32,
    (hour, minute, second, nanos): Clock,
) -> Option<Civil> {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    ((1..=days).contains(&day) && hour < 24 && minute < 60 && second <= 60).then_some(Civil {
        year,
        month,
        day,
        hour,
        minute,
        second,
        nanos,
    })
}

/// As if it were UTC: seconds since the epoch.
fn local_secs(c: &Civil) -> i64 {
    days_from_civil(c.year, c.month, c.day) * 86400
        + i64::from(c.hour) * 3600
        + i64::from(c.minute) * 60
        + i64::from(c.second)
}

/// Unix nanoseconds of `c` read `offset` seconds east of UTC.
pub(super) fn with_offset(c: &Civil, offset: i64) -> Option<i64> {
    let secs = local_secs(c) - offset;
    secs.checked_mul(1_000_000_000)?
        .checked_add(i64::from(c.nanos))
}

/// Unix nanoseconds of `c` read in `tz`.
pub(super) fn in_zone(c: &Civil, tz: TimeZone) -> Option<i64> {
    with_offset(c, tz.offset_at(local_secs(c)))
}

/// Two ASCII digits.
pub(super) fn two(b: &[u8]) -> Option<u32> {
    match b {
        [a @ b'0'..=b'9', c @ b'0'..=b'9'] => Some(u32::from(a - b'0') * 10 + u32::from(c - b'0')),
        _ => None,
    }
}

/// `.fraction` (1 to 9 digits) as nanoseconds; returns what follows it.
pub(super) fn fraction(b: &[u8]) -> (u32, &[u8]) {
    let Some(rest) = b.strip_prefix(b".") else {
        return (0, b);
    };
    let n = rest.iter().take_while(|c| c.is_ascii_digit()).count();
    if n == 0 {
        return (0, b);
    }
    let mut nanos = 0u32;
    for (i, &d) in rest[..n.min(9)].iter().enumerate() {
        nanos += u32::from(d - b'0') * 10u32.pow(8 - i as u32);
    }
    (nanos, &rest[n..])
}

/// Hour, minute, second and nanoseconds.
pub(super) type Clock = (u32, u32, u32, u32);

/// `hh:mm:ss` and an optional fraction, and what follows.
pub(super) fn clock(b: &[u8]) -> Option<(Clock, &[u8])> {
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (two(&b[0..2])?, two(&b[3..5])?, two(&b[6..8])?);
    let (nanos, rest) = fraction(&b[8..]);
    Some(((h, m, s, nanos), rest))
}

/// An RFC 3339 timestamp (`2003-10-11T22:14:15.003Z`, `…+02:00`); the whole
/// of `b` must be it. Lower-case `t` and `z` are accepted.
pub(super) fn rfc3339(b: &[u8]) -> Option<i64> {
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    let year = b[..4].iter().try_fold(0i64, |acc, &d| {
        d.is_ascii_digit().then(|| acc * 10 + i64::from(d - b'0'))
    })?;
    let (month, day) = (two(&b[5..7])?, two(&b[8..10])?);
    let (clock, zone) = clock(&b[11..])?;
    let offset = match zone {
        [b'Z' | b'z'] => 0,
        [s @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let o = i64::from(two(&[*h1, *h2])?) * 3600 + i64::from(two(&[*m1, *m2])?) * 60;
            if *s == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    with_offset(&reading(year, month, day, clock)?, offset)
}
