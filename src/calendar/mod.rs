//! Calendar and time zones, shared by every reader and writer of wall-clock
//! times: the syslog parser (RFC 5424's RFC 3339 TIMESTAMP, the zoneless
//! RFC 3164 time), the `timestamp` processing step (`strptime`-like
//! patterns in a configured zone) and the sinks' templates (`{date}`,
//! `{year}` … in UTC). Proleptic Gregorian, no leap seconds (a `:60` is
//! read as the next second's start). Imports nothing of holdfast's.
//!
//! * this file — [`Civil`] (a date and time of day) both ways, days since
//!   the epoch, RFC 3339 and `hh:mm:ss[.frac]` readings;
//! * `zone.rs` — [`TimeZone`]: UTC, the machine's local zone, or a fixed
//!   offset, and how far east of UTC it is at a given time.

mod zone;

pub use zone::TimeZone;

/// A date and time of day (UTC unless a [`TimeZone`] says otherwise).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Civil {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
    pub second: u32,
    pub nanos: u32,
}

impl Civil {
    /// Howard Hinnant's `civil_from_days`, valid for every u64 nanosecond
    /// count.
    pub fn from_unix_nanos(nanos: u64) -> Civil {
        let secs = nanos / 1_000_000_000;
        let days = (secs / 86_400) as i64;
        let rem = secs % 86_400;
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
        let y = yoe + era * 400;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        Civil {
            year: if m <= 2 { y + 1 } else { y },
            month: m,
            day: d,
            hour: (rem / 3600) as u32,
            minute: (rem % 3600 / 60) as u32,
            second: (rem % 60) as u32,
            nanos: (nanos % 1_000_000_000) as u32,
        }
    }
}

/// Days since 1970-01-01 of a civil date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

/// The civil year of a unix time in `tz`.
pub fn year_of(unix: i64, tz: TimeZone) -> i64 {
    let local = (unix + tz.offset_at(unix)).max(0) as u64;
    Civil::from_unix_nanos(local.saturating_mul(1_000_000_000)).year
}

/// A wall-clock reading: `None` unless it is a real date and time.
pub fn reading(
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
pub fn with_offset(c: &Civil, offset: i64) -> Option<i64> {
    let secs = local_secs(c) - offset;
    secs.checked_mul(1_000_000_000)?
        .checked_add(i64::from(c.nanos))
}

/// Unix nanoseconds of `c` read in `tz`.
pub fn in_zone(c: &Civil, tz: TimeZone) -> Option<i64> {
    with_offset(c, tz.offset_at(local_secs(c)))
}

/// Two ASCII digits.
pub fn two(b: &[u8]) -> Option<u32> {
    match b {
        [a @ b'0'..=b'9', c @ b'0'..=b'9'] => Some(u32::from(a - b'0') * 10 + u32::from(c - b'0')),
        _ => None,
    }
}

/// `.fraction` (1 to 9 digits) as nanoseconds; returns what follows it.
pub fn fraction(b: &[u8]) -> (u32, &[u8]) {
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
pub type Clock = (u32, u32, u32, u32);

/// `hh:mm:ss` and an optional fraction, and what follows.
pub fn clock(b: &[u8]) -> Option<(Clock, &[u8])> {
    if b.len() < 8 || b[2] != b':' || b[5] != b':' {
        return None;
    }
    let (h, m, s) = (two(&b[0..2])?, two(&b[3..5])?, two(&b[6..8])?);
    let (nanos, rest) = fraction(&b[8..]);
    Some(((h, m, s, nanos), rest))
}

/// An RFC 3339 timestamp (`2003-10-11T22:14:15.003Z`, `…+02:00`); the whole
/// of `b` must be it. Lower-case `t` and `z` are accepted.
pub fn rfc3339(b: &[u8]) -> Option<i64> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_utc_civil_dates() {
        let c = Civil::from_unix_nanos(0);
        assert_eq!((c.year, c.month, c.day, c.hour), (1970, 1, 1, 0));
        // 2024-02-29T23:59:59.5Z, a leap day.
        let c = Civil::from_unix_nanos(1_709_251_199_500_000_000);
        assert_eq!(
            (c.year, c.month, c.day, c.hour, c.minute, c.second, c.nanos),
            (2024, 2, 29, 23, 59, 59, 500_000_000)
        );
        let c = Civil::from_unix_nanos(1_735_689_600_000_000_000);
        assert_eq!((c.year, c.month, c.day), (2025, 1, 1));
    }
}
