//! Where a wall-clock time was written: UTC, the machine's local zone
//! (`TZ`, `/etc/localtime`, through libc) or a fixed offset.

use std::fmt;

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
    pub fn offset_at(self, local_secs: i64) -> i64 {
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
