//! Human units in the config: sizes like `"64MiB"`, durations like `"30s"`,
//! and whole numbers, each as a serde type whose errors say what was
//! expected and what was found.
//!
//! Sizes are parsed by the `bytesize` crate and durations by `humantime`; we
//! only add the checks those crates leave out (negative values, overflow,
//! surrounding blanks) and messages that show an example to copy.
//!
//! Sizes: `B`, `KiB`, `MiB`, `GiB`, `TiB` are powers of 1024; `KB`/`K`,
//! `MB`/`M`, `GB`/`G` are powers of 1000. Units are case-insensitive and a `b`
//! always means bytes (never bits), so `"64mb"` is 64 000 000 bytes. A space
//! between number and unit is allowed, and so is a fraction (`"1.5GiB"`,
//! rounded down to a whole byte). A bare number is a count of bytes.
//!
//! Durations: `ns`, `us`, `ms`, `s`, `m`/`min`, `h`, `d`, `w`, and sums like
//! `"1h 30m"`. Beware that `M` (capital) is a month in humantime; `m` is a
//! minute.

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserialize, Deserializer, Visitor};

/// A byte count written as a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Size(pub u64);

/// A duration written as a string with a unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Dur(pub Duration);

/// A whole number written as a TOML integer (no quotes, no unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Count(pub i64);

const SIZE_EXAMPLE: &str = "a size like \"64MiB\"";
const DURATION_EXAMPLE: &str = "a duration like \"30s\"";

/// Parses a size such as `"64MiB"`, `"64 MiB"`, `"1.5GiB"` or `"0"`.
pub(crate) fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!("expected {SIZE_EXAMPLE}, found an empty string"));
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "a size cannot be negative (found \"{text}\"); write {SIZE_EXAMPLE}"
        ));
    }
    match trimmed.parse::<bytesize::ByteSize>() {
        // bytesize saturates instead of failing on overflow.
        Ok(size) if size.0 == u64::MAX => Err(format!(
            "\"{text}\" is too large: sizes must be below 16 EiB"
        )),
        Ok(size) => Ok(size.0),
        Err(_) => Err(format!(
            "\"{text}\" is not a size: write a number and a unit like \"64MiB\", \"512KiB\" or \
             \"1.5GiB\" (KiB, MiB, GiB, TiB are powers of 1024; KB, MB, GB powers of 1000)"
        )),
    }
}

/// Parses a duration such as `"30s"`, `"500ms"`, `"7d"` or `"1h 30m"`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err(format!(
            "expected {DURATION_EXAMPLE}, found an empty string"
        ));
    }
    if trimmed.starts_with('-') {
        return Err(format!(
            "a duration cannot be negative (found \"{text}\"); write {DURATION_EXAMPLE}"
        ));
    }
    humantime::parse_duration(trimmed).map_err(|e| {
        format!(
            "\"{text}\" is not a duration ({e}): write a number and a unit like \"500ms\", \
             \"30s\", \"5m\", \"2h\" or \"7d\""
        )
    })
}

/// Formats a byte count for people: exact in the largest binary unit that
/// divides it (`64 MiB`), otherwise approximate with the exact count.
pub(crate) fn format_size(bytes: u64) -> String {
    const UNITS: [(&str, u32); 6] = [
        ("EiB", 60),
        ("PiB", 50),
        ("TiB", 40),
        ("GiB", 30),
        ("MiB", 20),
        ("KiB", 10),
    ];
    if bytes == 0 {
        return "0 B".to_string();
    }
    for (unit, shift) in UNITS {
        let scale = 1u64 << shift;
        if bytes >= scale && bytes.is_multiple_of(scale) {
            return format!("{} {unit}", bytes >> shift);
        }
    }
    for (unit, shift) in UNITS {
        let scale = 1u64 << shift;
        if bytes >= scale {
            return format!("{:.2} {unit} ({bytes} bytes)", bytes as f64 / scale as f64);
        }
    }
    format!("{bytes} B")
}

/// Why a byte bound (`bound`, its key and value) is refused when it holds
/// fewer than two of the unit it is spent in (`unit`): the unit being
/// written is never removed (`why`), so the bound needs room for one more.
/// `lower` is the unit's key as the operator writes it in the table.
pub(crate) fn room_for_two(
    bound: (&str, u64),
    unit: (&str, u64),
    why: &str,
    lower: &str,
) -> String {
    format!(
        "{} ({}) must be at least twice {} ({}): {why}; raise max_bytes to {} or more, or lower \
         {lower}",
        bound.0,
        format_size(bound.1),
        unit.0,
        format_size(unit.1),
        format_size(2 * unit.1)
    )
}

/// Formats a duration the way it would be written in the config (`"7d"`,
/// `"1h 30m"`, `"500ms"`), so it can be pasted back.
pub(crate) fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".to_string();
    }
    let secs = d.as_secs();
    let nanos = u64::from(d.subsec_nanos());
    let parts = [
        (secs / 86_400, "d"),
        (secs % 86_400 / 3_600, "h"),
        (secs % 3_600 / 60, "m"),
        (secs % 60, "s"),
        (nanos / 1_000_000, "ms"),
        (nanos / 1_000 % 1_000, "us"),
        (nanos % 1_000, "ns"),
    ];
    parts
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, unit)| format!("{n}{unit}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Reads a quoted value with a unit (a size or a duration): a bare number
/// is refused with the example, since its unit would be a guess.
struct UnitVisitor<T> {
    example: &'static str,
    parse: fn(&str) -> Result<T, String>,
}

impl<T> Visitor<'_> for UnitVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(self.example)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        (self.parse)(v).map_err(E::custom)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Err(self.unquoted(format_args!("integer {v}")))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        Err(self.unquoted(format_args!("integer {v}")))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Err(self.unquoted(format_args!("number {v}")))
    }
}

impl<T> UnitVisitor<T> {
    fn unquoted<E: de::Error>(&self, found: fmt::Arguments<'_>) -> E {
        E::custom(format!(
            "expected {} (a quoted string with a unit), found {found}",
            self.example
        ))
    }
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnitVisitor {
            example: SIZE_EXAMPLE,
            parse: |v| parse_size(v).map(Size),
        })
    }
}

impl<'de> Deserialize<'de> for Dur {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UnitVisitor {
            example: DURATION_EXAMPLE,
            parse: |v| parse_duration(v).map(Dur),
        })
    }
}

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CountVisitor;
        impl Visitor<'_> for CountVisitor {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a whole number like 256 (without quotes)")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Count, E> {
                Ok(Count(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Count, E> {
                i64::try_from(v)
                    .map(Count)
                    .map_err(|_| E::custom(format!("{v} is too large")))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Count, E> {
                if v == "adaptive" {
                    // Vector's spelling; here adaptation is a key of its own.
                    return Err(E::custom(
                        "expected a whole number, found \"adaptive\": concurrency is the most \
                         requests in flight, and a network sink adapts between 1 and it by \
                         default (adaptive_concurrency = true); write a number like 8",
                    ));
                }
                Err(E::custom(format!(
                    "expected a whole number like 256 (without quotes), found string \"{v}\""
                )))
            }
        }
        deserializer.deserialize_any(CountVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The choice of `bytesize` rests on these: both spellings of a binary
    /// unit, fractions, zero, and `b` meaning bytes whatever its case.
    #[test]
    fn sizes_parse_like_the_docs_say() {
        assert_eq!(parse_size("64MiB"), Ok(64 << 20));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size(" 64MiB "), Ok(64 << 20));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1KiB"), Ok(1024));
        assert_eq!(parse_size("64MB"), Ok(64_000_000));
        assert_eq!(parse_size("64mb"), Ok(64_000_000));
        assert_eq!(parse_size("64kib"), Ok(64 << 10));
        assert_eq!(parse_size("4096"), Ok(4096));
    }

    #[test]
    fn bad_sizes_say_what_to_write() {
        assert!(parse_size("-5MiB")
            .unwrap_err()
            .contains("cannot be negative"));
        assert!(parse_size("").unwrap_err().contains("empty"));
        assert!(parse_size("64 MiBs").unwrap_err().contains("\"64MiB\""));
        assert!(parse_size("1,5GiB").unwrap_err().contains("is not a size"));
        assert!(parse_size("99999999EiB").unwrap_err().contains("too large"));
    }

    #[test]
    fn durations_parse_like_the_docs_say() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("5min"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert!(parse_duration("-1s").unwrap_err().contains("negative"));
        assert!(parse_duration("10").unwrap_err().contains("unit"));
    }

    #[test]
    fn sizes_and_durations_format_for_people() {
        assert_eq!(format_size(64 << 20), "64 MiB");
        assert_eq!(format_size(1 << 30), "1 GiB");
        assert_eq!(format_size(1536), "1.50 KiB (1536 bytes)");
        assert_eq!(format_size(64_000_000), "62500 KiB");
        assert_eq!(format_size(1_000_000_001), "953.67 MiB (1000000001 bytes)");
        assert_eq!(format_size(100), "100 B");
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_duration(Duration::from_secs(30)), "30s");
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::ZERO), "0s");
        assert_eq!(format_duration(Duration::from_secs(3 * 86_400)), "3d");
        assert_eq!(
            format_duration(Duration::from_millis(5_400_500)),
            "1h 30m 500ms"
        );
        for text in ["7d", "1h 30m", "500ms", "2d 3h 4m 5s"] {
            let d = parse_duration(text).unwrap();
            assert_eq!(parse_duration(&format_duration(d)), Ok(d), "{text}");
        }
    }

    /// The two messages `room_for_two` writes, word for word as they were
    /// written out by hand before it.
    #[test]
    fn room_for_two_keeps_the_messages() {
        assert_eq!(
            room_for_two(
                ("log.max_bytes", 1000 << 20),
                ("log.segment_size", 512 << 20),
                "the active segment is never evicted, so the log needs room for at least one more",
                "segment_size",
            ),
            "log.max_bytes (1000 MiB) must be at least twice log.segment_size (512 MiB): the \
             active segment is never evicted, so the log needs room for at least one more; raise \
             max_bytes to 1 GiB or more, or lower segment_size"
        );
        assert_eq!(
            room_for_two(
                ("max_bytes", 100 << 20),
                ("max_file_bytes", 64 << 20),
                "the file being written is never removed, so the sink needs room for at least one \
                 more",
                "max_file_bytes",
            ),
            "max_bytes (100 MiB) must be at least twice max_file_bytes (64 MiB): the file being \
             written is never removed, so the sink needs room for at least one more; raise \
             max_bytes to 128 MiB or more, or lower max_file_bytes"
        );
    }
}
