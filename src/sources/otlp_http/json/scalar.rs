/*!
The scalars of the proto3 JSON mapping: strings, booleans, integers (exact,
range-checked, as numbers or decimal strings), doubles, enums by number or
name, hex ids and base64 bytes. `null` reads as the field's default.
*/

use base64::alphabet;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig};
use base64::engine::DecodePaddingMode;
use base64::Engine;

use super::table::{err, Path};
use super::tree::J;
use super::Result;

pub(super) fn string(v: &J, p: &Path<'_>) -> Result<String> {
    match v {
        J::Str(s) => Ok(s.clone()),
        J::Null => Ok(String::new()),
        other => Err(err(p, format!("expected a string, found {}", other.kind()))),
    }
}

pub(super) fn boolean(v: &J, p: &Path<'_>) -> Result<bool> {
    match v {
        J::Bool(b) => Ok(*b),
        J::Null => Ok(false),
        other => Err(err(
            p,
            format!("expected true or false, found {}", other.kind()),
        )),
    }
}

/// Largest integer every f64 at or below it represents exactly.
const EXACT_F64: f64 = 9_007_199_254_740_992.0; // 2^53

fn int_from_float(x: f64, p: &Path<'_>) -> Result<i128> {
    if x.fract() != 0.0 || !x.is_finite() {
        return Err(err(p, format!("expected an integer, found {x}")));
    }
    if x.abs() > EXACT_F64 {
        return Err(err(
            p,
            format!(
                "the number {x} is too large to be read exactly from a JSON number: write \
                 64-bit integers as decimal strings, like \"1700000000000000000\""
            ),
        ));
    }
    Ok(x as i128)
}

fn integer(v: &J, p: &Path<'_>, min: i128, max: i128, what: &str) -> Result<i128> {
    let n: i128 = match v {
        J::Null => 0,
        J::U(n) => *n as i128,
        J::I(n) => *n as i128,
        J::F(x) => int_from_float(*x, p)?,
        J::Str(s) => s.trim().parse::<i128>().map_err(|_| {
            err(
                p,
                format!("expected {what} as a decimal string or number, found the string {s:?}"),
            )
        })?,
        other => {
            return Err(err(
                p,
                format!(
                    "expected {what} (a decimal string or number), found {}",
                    other.kind()
                ),
            ))
        }
    };
    if n < min || n > max {
        return Err(err(p, format!("{n} is out of range for {what}")));
    }
    Ok(n)
}

pub(super) fn uint64(v: &J, p: &Path<'_>) -> Result<u64> {
    integer(v, p, 0, u64::MAX as i128, "an unsigned 64-bit integer").map(|n| n as u64)
}

pub(super) fn int64(v: &J, p: &Path<'_>) -> Result<i64> {
    integer(v, p, i64::MIN as i128, i64::MAX as i128, "a 64-bit integer").map(|n| n as i64)
}

pub(super) fn uint32(v: &J, p: &Path<'_>) -> Result<u32> {
    integer(v, p, 0, u32::MAX as i128, "an unsigned 32-bit integer").map(|n| n as u32)
}

pub(super) fn int32(v: &J, p: &Path<'_>) -> Result<i32> {
    integer(v, p, i32::MIN as i128, i32::MAX as i128, "a 32-bit integer").map(|n| n as i32)
}

pub(super) fn double(v: &J, p: &Path<'_>) -> Result<f64> {
    match v {
        J::Null => Ok(0.0),
        J::U(n) => Ok(*n as f64),
        J::I(n) => Ok(*n as f64),
        J::F(x) => Ok(*x),
        J::Str(s) => match s.as_str() {
            "NaN" => Ok(f64::NAN),
            "Infinity" => Ok(f64::INFINITY),
            "-Infinity" => Ok(f64::NEG_INFINITY),
            _ => s
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .ok_or_else(|| {
                    err(
                        p,
                        format!(
                            "expected a number (or \"NaN\", \"Infinity\", \"-Infinity\"), found \
                             the string {s:?}"
                        ),
                    )
                }),
        },
        other => Err(err(p, format!("expected a number, found {}", other.kind()))),
    }
}

/// An enum by number, or by its proto name (`by_name` is the prost enum's
/// `from_str_name`).
pub(super) fn enumeration<E: Into<i32>>(
    v: &J,
    p: &Path<'_>,
    by_name: fn(&str) -> Option<E>,
) -> Result<i32> {
    match v {
        J::Str(s) if s.parse::<i64>().is_err() => by_name(s).map(Into::into).ok_or_else(|| {
            err(
                p,
                format!("unknown enum value {s:?}: OTLP/JSON writes enums as integers"),
            )
        }),
        v => int32(v, p),
    }
}

fn hex_digit(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// A trace id (16 bytes) or span id (8 bytes) as hex; empty means unset.
pub(super) fn id(v: &J, p: &Path<'_>, len: usize) -> Result<Vec<u8>> {
    let s = match v {
        J::Null => return Ok(Vec::new()),
        J::Str(s) => s.as_bytes(),
        other => {
            return Err(err(
                p,
                format!("expected a hex string, found {}", other.kind()),
            ))
        }
    };
    if s.is_empty() {
        return Ok(Vec::new());
    }
    if s.len() != 2 * len {
        return Err(err(
            p,
            format!(
                "expected {} hex digits ({len} bytes), found {} characters (OTLP/JSON ids are \
                 hex, not base64)",
                2 * len,
                s.len()
            ),
        ));
    }
    s.chunks(2)
        .map(|pair| Some(hex_digit(pair[0])? << 4 | hex_digit(pair[1])?))
        .collect::<Option<Vec<u8>>>()
        .ok_or_else(|| err(p, "expected hex digits (0-9, a-f)"))
}

const B64_CONFIG: GeneralPurposeConfig =
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
const B64_STANDARD: GeneralPurpose = GeneralPurpose::new(&alphabet::STANDARD, B64_CONFIG);
const B64_URL_SAFE: GeneralPurpose = GeneralPurpose::new(&alphabet::URL_SAFE, B64_CONFIG);

/// Bytes as base64 (proto3 JSON accepts both alphabets, padded or not).
pub(super) fn base64_bytes(v: &J, p: &Path<'_>) -> Result<Vec<u8>> {
    let s = match v {
        J::Null => return Ok(Vec::new()),
        J::Str(s) => s,
        other => {
            return Err(err(
                p,
                format!("expected a base64 string, found {}", other.kind()),
            ))
        }
    };
    let engine = if s.contains(['-', '_']) {
        &B64_URL_SAFE
    } else {
        &B64_STANDARD
    };
    engine
        .decode(s)
        .map_err(|e| err(p, format!("not valid base64: {e}")))
}
