//! One sample line, `name{label="value",…} value [timestamp] [# exemplar]`,
//! read left to right without backtracking: every byte is looked at once,
//! and what a line may hold (labels, their length) is checked as it is
//! read, so a hostile line costs no more than its bounds.

use std::borrow::Cow;

use super::{Format, Labels, Limits, What};

/// A sample line, its name and labels borrowed from the body (a label
/// value with escapes is unescaped into its own string).
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Line<'a> {
    pub name: &'a str,
    pub labels: Labels<'a>,
    pub value: f64,
    /// Unix nanoseconds, when the line gives a time.
    pub timestamp_ns: Option<i64>,
}

/// A cursor over one line.
struct Cursor<'a> {
    s: &'a str,
    at: usize,
}

impl<'a> Cursor<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn skip_spaces(&mut self) -> usize {
        let start = self.at;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.at += 1;
        }
        self.at - start
    }

    fn rest(&self) -> &'a str {
        &self.s[self.at..]
    }

    /// A metric or label name: `[a-zA-Z_:][a-zA-Z0-9_:]*` (no `:` in a
    /// label name, which the caller checks).
    fn name(&mut self) -> Option<&'a str> {
        let start = self.at;
        while let Some(b) = self.peek() {
            let ok = b.is_ascii_alphabetic()
                || b == b'_'
                || b == b':'
                || (self.at > start && b.is_ascii_digit());
            if !ok {
                break;
            }
            self.at += 1;
        }
        (self.at > start).then(|| &self.s[start..self.at])
    }

    /// A token up to the next space or tab.
    fn token(&mut self) -> &'a str {
        let start = self.at;
        while !matches!(self.peek(), None | Some(b' ' | b'\t')) {
            self.at += 1;
        }
        &self.s[start..self.at]
    }
}

/// Whether `s` is a metric name.
pub(super) fn is_metric_name(s: &str) -> bool {
    let mut c = Cursor { s, at: 0 };
    c.name().is_some() && c.at == s.len()
}

/// Reads a sample line.
pub(super) fn sample<'a>(s: &'a str, format: Format, limits: &Limits) -> Result<Line<'a>, What> {
    let mut c = Cursor { s, at: 0 };
    let name = c.name().ok_or_else(|| {
        What::Malformed(format!("{:?} does not start with a metric name", clip(s)))
    })?;
    let labels = if c.eat(b'{') {
        label_set(&mut c, limits)?
    } else {
        Vec::new()
    };
    if c.skip_spaces() == 0 {
        return Err(What::Malformed(format!(
            "no space between the series {:?} and its value",
            clip(&s[..c.at])
        )));
    }
    let value = number(c.token())?;
    c.skip_spaces();
    let mut timestamp_ns = None;
    if c.peek().is_some() && c.peek() != Some(b'#') {
        timestamp_ns = Some(timestamp(c.token(), format)?);
        c.skip_spaces();
    }
    if c.peek() == Some(b'#') {
        if format == Format::Text {
            return Err(What::Malformed(
                "an exemplar (\" # {…}\") in the Prometheus text format, which has none".into(),
            ));
        }
        exemplar(&mut c, limits)?;
    }
    if c.peek().is_some() {
        return Err(What::Malformed(format!(
            "unexpected {:?} after the value",
            clip(c.rest())
        )));
    }
    Ok(Line {
        name,
        labels,
        value,
        timestamp_ns,
    })
}

/// ` # {labels} value [timestamp]` after a sample: read to check it, then
/// dropped (holdfast keeps no exemplars).
fn exemplar(c: &mut Cursor<'_>, limits: &Limits) -> Result<(), What> {
    c.at += 1;
    if c.skip_spaces() == 0 || !c.eat(b'{') {
        return Err(What::Malformed(
            "an exemplar must be \" # {labels} value [timestamp]\"".into(),
        ));
    }
    label_set(c, limits)?;
    if c.skip_spaces() == 0 {
        return Err(What::Malformed("an exemplar without a value".into()));
    }
    number(c.token())?;
    c.skip_spaces();
    if c.peek().is_some() {
        timestamp(c.token(), Format::OpenMetrics)?;
        c.skip_spaces();
    }
    Ok(())
}

/// The labels after `{`, through `}`.
fn label_set<'a>(c: &mut Cursor<'a>, limits: &Limits) -> Result<Labels<'a>, What> {
    let mut labels: Labels<'a> = Vec::new();
    loop {
        c.skip_spaces();
        if c.eat(b'}') {
            return Ok(labels);
        }
        let at = c.at;
        let name = c.name().filter(|n| !n.contains(':')).ok_or_else(|| {
            What::Malformed(format!("a label name expected at {:?}", clip(&c.s[at..])))
        })?;
        if name.len() > limits.max_label_bytes {
            return Err(What::LabelTooLong(name.len()));
        }
        c.skip_spaces();
        if !c.eat(b'=') {
            return Err(What::Malformed(format!(
                "no '=' after the label name {name:?}"
            )));
        }
        c.skip_spaces();
        if !c.eat(b'"') {
            return Err(What::Malformed(format!(
                "the value of label {name:?} must be in double quotes"
            )));
        }
        let value = label_value(c, limits)?;
        if labels.len() >= limits.max_labels {
            return Err(What::TooManyLabels(limits.max_labels));
        }
        if labels.iter().any(|(n, _)| *n == name) {
            return Err(What::Malformed(format!("label {name:?} given twice")));
        }
        labels.push((name, value));
        c.skip_spaces();
        if !c.eat(b',') {
            c.skip_spaces();
            if !c.eat(b'}') {
                return Err(What::Malformed(
                    "labels must be separated by ',' and closed by '}'".into(),
                ));
            }
            return Ok(labels);
        }
    }
}

/// A quoted label value after its `"`, unescaping `\\`, `\"` and `\n`:
/// borrowed from the line unless it holds an escape.
fn label_value<'a>(c: &mut Cursor<'a>, limits: &Limits) -> Result<Cow<'a, str>, What> {
    let bytes = c.s.as_bytes();
    let start = c.at;
    // Most values have no escape: the line's bytes up to the quote.
    while let Some(&b) = bytes.get(c.at) {
        match b {
            b'"' => {
                if c.at - start > limits.max_label_bytes {
                    return Err(What::LabelTooLong(c.at - start));
                }
                c.at += 1;
                return Ok(Cow::Borrowed(&c.s[start..c.at - 1]));
            }
            b'\\' => break,
            _ => c.at += 1,
        }
        if c.at - start > limits.max_label_bytes {
            return Err(What::LabelTooLong(c.at - start));
        }
    }
    let mut out = String::new();
    let mut run = start;
    loop {
        let Some(&b) = bytes.get(c.at) else {
            return Err(What::Malformed(
                "a label value without its closing '\"'".into(),
            ));
        };
        match b {
            b'"' => {
                out.push_str(&c.s[run..c.at]);
                c.at += 1;
                break;
            }
            b'\\' => {
                out.push_str(&c.s[run..c.at]);
                let unescaped = match bytes.get(c.at + 1) {
                    Some(b'\\') => '\\',
                    Some(b'"') => '"',
                    Some(b'n') => '\n',
                    _ => {
                        return Err(What::Malformed(
                            "a label value holds a '\\' that is not \\\\, \\\" or \\n".into(),
                        ))
                    }
                };
                out.push(unescaped);
                c.at += 2;
                run = c.at;
            }
            _ => c.at += 1,
        }
        if c.at - run + out.len() > limits.max_label_bytes {
            return Err(What::LabelTooLong(c.at - run + out.len()));
        }
    }
    if out.len() > limits.max_label_bytes {
        return Err(What::LabelTooLong(out.len()));
    }
    Ok(Cow::Owned(out))
}

/// A sample value: a float, `NaN`, `+Inf`, `-Inf` (`Inf` too).
pub fn number(s: &str) -> Result<f64, What> {
    let v = match s {
        "NaN" => f64::NAN,
        "+Inf" | "Inf" | "+inf" | "inf" => f64::INFINITY,
        "-Inf" | "-inf" => f64::NEG_INFINITY,
        // Rust's parser also takes "infinity" and "nan" spellings the
        // formats do not; only digits, signs, '.', 'e' reach it.
        _ if !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || matches!(b, b'+' | b'-' | b'.' | b'e' | b'E')) =>
        {
            s.parse::<f64>()
                .map_err(|_| What::Malformed(format!("{:?} is not a number", clip(s))))?
        }
        _ => return Err(What::Malformed(format!("{:?} is not a number", clip(s)))),
    };
    Ok(v)
}

/// A sample's time: integer milliseconds in the text format, seconds (a
/// float) in OpenMetrics; as Unix nanoseconds.
fn timestamp(s: &str, format: Format) -> Result<i64, What> {
    let bad = || {
        What::Malformed(format!(
            "{:?} is not a timestamp ({})",
            clip(s),
            match format {
                Format::Text => "integer milliseconds in the text format",
                Format::OpenMetrics => "seconds in OpenMetrics",
            }
        ))
    };
    match format {
        Format::Text => s
            .parse::<i64>()
            .ok()
            .and_then(|ms| ms.checked_mul(1_000_000))
            .ok_or_else(bad),
        Format::OpenMetrics => {
            if let Some(ns) = decimal_seconds(s) {
                return Ok(ns);
            }
            let secs = number(s).map_err(|_| bad())?;
            // Within what i64 nanoseconds hold (years 1678 to 2262).
            if !secs.is_finite() || secs.abs() > 9.2e9 {
                return Err(bad());
            }
            Ok((secs * 1e9).round() as i64)
        }
    }
}

/// `seconds[.fraction]` as nanoseconds, exactly (a float would turn
/// `.789` into `.788999936`); `None` for any other spelling.
fn decimal_seconds(s: &str) -> Option<i64> {
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() || !all_digits(whole) || !all_digits(fraction) || fraction.len() > 9 {
        return None;
    }
    let mut ns = whole.parse::<i64>().ok()?.checked_mul(1_000_000_000)?;
    if !fraction.is_empty() {
        let scale = 10i64.pow(9 - fraction.len() as u32);
        ns = ns.checked_add(fraction.parse::<i64>().ok()? * scale)?;
    }
    Some(if negative { -ns } else { ns })
}

/// At most 64 characters of `s`, for a message.
pub(super) fn clip(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
