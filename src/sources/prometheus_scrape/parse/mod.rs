/*!
The Prometheus text format (0.0.4) and OpenMetrics (1.0) text, read into
metric families: what the conversion to OTLP (`convert.rs`) needs and no
more.

Both formats are read by one line reader: `# HELP`, `# TYPE`, `# UNIT`
(OpenMetrics; accepted in the text format too), `# EOF` (required last in
OpenMetrics, nothing may follow it), other `#` lines are comments in the
text format. A sample belongs to the family its name names, with the
suffixes its type allows (`_total`, `_created`, `_bucket`, `_count`,
`_sum`, `_gcount`, `_gsum`, `_info`); a name no `# TYPE` declared is a
family of its own, `unknown`. Exemplars (` # {…} v [t]` after an
OpenMetrics sample) are checked and dropped.

Bounded: at most [`Limits::max_samples`] sample lines (and as many
families, which `# HELP` lines alone make), each with at most
[`Limits::max_labels`] labels of at most [`Limits::max_label_bytes`] bytes
(name or value); past a bound the whole exposition is refused, so a scrape
appends all of a target's samples or none. The body's size is bounded
before it gets here (`scrape.rs`).

Every error names the line (counted from 1) and what was wrong with it.
*/

mod line;

use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;

pub use line::number;
use line::{clip, is_metric_name};

/// Which text format a body is in (from its `Content-Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// The Prometheus text format 0.0.4: timestamps in milliseconds.
    Text,
    /// OpenMetrics 1.0: timestamps in seconds, `# EOF` last, exemplars.
    OpenMetrics,
}

/// What one exposition may hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_samples: usize,
    pub max_labels: usize,
    pub max_label_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_samples: DEFAULT_MAX_SAMPLES,
            max_labels: DEFAULT_MAX_LABELS,
            max_label_bytes: DEFAULT_MAX_LABEL_BYTES,
        }
    }
}

/// Samples per scrape: a node exporter serves a few thousand.
pub const DEFAULT_MAX_SAMPLES: usize = 100_000;
/// Labels per sample (Prometheus sets none by default; 64 is generous).
pub const DEFAULT_MAX_LABELS: usize = 64;
/// Bytes of one label name or value.
pub const DEFAULT_MAX_LABEL_BYTES: usize = 4096;

/// A family's type, as `# TYPE` declares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
    GaugeHistogram,
    Summary,
    Info,
    StateSet,
    Unknown,
}

impl Kind {
    fn of(s: &str) -> Option<Kind> {
        Some(match s {
            "counter" => Kind::Counter,
            "gauge" => Kind::Gauge,
            "histogram" => Kind::Histogram,
            "gaugehistogram" => Kind::GaugeHistogram,
            "summary" => Kind::Summary,
            "info" => Kind::Info,
            "stateset" => Kind::StateSet,
            "unknown" | "untyped" => Kind::Unknown,
            _ => return None,
        })
    }

    /// The suffixes a sample of this type may add to the family's name.
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            Kind::Counter => &["_total", "_created"],
            Kind::Histogram => &["_bucket", "_count", "_sum", "_created"],
            Kind::GaugeHistogram => &["_bucket", "_gcount", "_gsum"],
            Kind::Summary => &["_count", "_sum", "_created"],
            Kind::Info => &["_info"],
            Kind::Gauge | Kind::StateSet | Kind::Unknown => &[],
        }
    }
}

/// A sample's labels (name, value), in the order written, borrowed from
/// the body: a scrape of 100,000 series allocates no string per label
/// (only a value with an escape is unescaped into its own).
pub type Labels<'a> = Vec<(&'a str, Cow<'a, str>)>;

/// One sample of a family.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// What the sample's name adds to its family's (`""`, `"_bucket"`, …).
    pub suffix: &'static str,
    pub labels: Labels<'a>,
    pub value: f64,
    /// Unix nanoseconds, when the line gives a time.
    pub timestamp_ns: Option<i64>,
}

/// One metric family.
#[derive(Debug, Clone, PartialEq)]
pub struct Family<'a> {
    /// The name `# TYPE` gives (a text-format counter's with its `_total`,
    /// an OpenMetrics one's without).
    pub name: String,
    pub kind: Kind,
    pub help: String,
    pub unit: String,
    pub samples: Vec<Sample<'a>>,
}

/// A parsed exposition, borrowing from the body it was read from.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition<'a> {
    pub families: Vec<Family<'a>>,
    /// Sample lines read (`_created` ones included).
    pub samples: usize,
}

/// Why an exposition was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum What {
    Malformed(String),
    TooManySamples(usize),
    TooManyLabels(usize),
    LabelTooLong(usize),
}

/// An exposition refused, at `line` (from 1; 0: the body as a whole).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ParseError {
    pub line: usize,
    pub what: What,
}

impl ParseError {
    /// The `result` label of the scrape counter this refusal counts under.
    pub fn reason(&self) -> &'static str {
        match self.what {
            What::Malformed(_) => "malformed",
            What::TooManySamples(_) => "too_many_samples",
            What::TooManyLabels(_) => "too_many_labels",
            What::LabelTooLong(_) => "label_too_long",
        }
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "line {}: ", self.line)?;
        }
        match &self.what {
            What::Malformed(m) => f.write_str(m),
            What::TooManySamples(n) => write!(
                f,
                "more than {n} samples (max_samples): raise max_samples or serve fewer series"
            ),
            What::TooManyLabels(n) => write!(
                f,
                "a sample with more than {n} labels (max_labels): raise max_labels or serve \
                 fewer labels"
            ),
            What::LabelTooLong(n) => write!(
                f,
                "a label name or value of {n} bytes or more, over max_label_bytes: raise \
                 max_label_bytes or serve shorter labels"
            ),
        }
    }
}

/// Reads `body` as `format` within `limits`.
pub fn parse<'a>(
    body: &'a str,
    format: Format,
    limits: &Limits,
) -> Result<Exposition<'a>, ParseError> {
    Parser {
        format,
        limits,
        out: Exposition::default(),
        by_name: HashMap::new(),
        current: None,
    }
    .run(body)
}

struct Parser<'l, 'a> {
    format: Format,
    limits: &'l Limits,
    out: Exposition<'a>,
    /// Family index by family name.
    by_name: HashMap<String, usize>,
    /// The family the last `#` line or sample was about.
    current: Option<usize>,
}

impl<'a> Parser<'_, 'a> {
    fn run(mut self, body: &'a str) -> Result<Exposition<'a>, ParseError> {
        let mut eof = false;
        let mut n = 0;
        // The last line's newline ends it; it does not begin another.
        let body = body.strip_suffix('\n').unwrap_or(body);
        let lines = body
            .split('\n')
            .take(if body.is_empty() { 0 } else { usize::MAX });
        for line in lines {
            n += 1;
            let at = |what| ParseError { line: n, what };
            if eof {
                return Err(at(What::Malformed("text after \"# EOF\"".into())));
            }
            let line = line.strip_suffix('\r').unwrap_or(line);
            if let Some(comment) = line.strip_prefix('#') {
                eof = self.comment(comment).map_err(at)?;
            } else if line.trim().is_empty() {
                if self.format == Format::OpenMetrics {
                    return Err(at(What::Malformed(
                        "an empty line, which OpenMetrics does not allow".into(),
                    )));
                }
            } else {
                let line = match self.format {
                    Format::Text => line.trim_start(),
                    Format::OpenMetrics => line,
                };
                self.sample(line).map_err(at)?;
            }
        }
        if self.format == Format::OpenMetrics && !eof {
            return Err(ParseError {
                line: n,
                what: What::Malformed(
                    "no \"# EOF\" at the end: the OpenMetrics body was cut short".into(),
                ),
            });
        }
        Ok(self.out)
    }

    /// A `#` line; true for `# EOF`.
    fn comment(&mut self, rest: &str) -> Result<bool, What> {
        if rest == " EOF" && self.format == Format::OpenMetrics {
            return Ok(true);
        }
        let mut parts = rest.trim_start_matches([' ', '\t']).splitn(3, [' ', '\t']);
        let keyword = parts.next().unwrap_or("");
        if !matches!(keyword, "HELP" | "TYPE" | "UNIT") || !rest.starts_with([' ', '\t']) {
            return match self.format {
                Format::Text => Ok(false),
                Format::OpenMetrics => Err(What::Malformed(format!(
                    "{:?} is no OpenMetrics line (# HELP, # TYPE, # UNIT or # EOF)",
                    clip(&format!("#{rest}"))
                ))),
            };
        }
        let name = parts.next().unwrap_or("");
        if !is_metric_name(name) {
            return Err(What::Malformed(format!(
                "# {keyword} names {:?}, which is not a metric name",
                clip(name)
            )));
        }
        let text = parts.next().unwrap_or("").trim();
        match keyword {
            "TYPE" => {
                let kind = Kind::of(text).ok_or_else(|| {
                    What::Malformed(format!(
                        "# TYPE {name} {:?}: not a type (counter, gauge, histogram, \
                         gaugehistogram, summary, info, stateset, unknown, untyped)",
                        clip(text)
                    ))
                })?;
                let i = self.family(name, Some(kind))?;
                self.current = Some(i);
            }
            "HELP" => {
                let i = self.family_for_comment(name)?;
                self.out.families[i].help = unescape_help(text);
                self.current = Some(i);
            }
            _ => {
                let i = self.family_for_comment(name)?;
                self.out.families[i].unit = text.to_string();
                self.current = Some(i);
            }
        }
        Ok(false)
    }

    /// The family a `# HELP` or `# UNIT` is about (it may come before the
    /// `# TYPE`).
    fn family_for_comment(&mut self, name: &str) -> Result<usize, What> {
        match self.by_name.get(name) {
            Some(&i) => Ok(i),
            None => self.family(name, None),
        }
    }

    /// The family `name`, created if new; `kind` sets its type (once).
    fn family(&mut self, name: &str, kind: Option<Kind>) -> Result<usize, What> {
        if let Some(&i) = self.by_name.get(name) {
            let f = &mut self.out.families[i];
            if let Some(kind) = kind {
                if f.kind != Kind::Unknown || !f.samples.is_empty() {
                    return Err(What::Malformed(format!(
                        "a second # TYPE for {name}, or one after its samples"
                    )));
                }
                f.kind = kind;
            }
            return Ok(i);
        }
        let i = self.out.families.len();
        // `# HELP` lines alone make families: bounded like samples.
        if i >= self.limits.max_samples {
            return Err(What::TooManySamples(self.limits.max_samples));
        }
        self.out.families.push(Family {
            name: name.to_string(),
            kind: kind.unwrap_or(Kind::Unknown),
            help: String::new(),
            unit: String::new(),
            samples: Vec::new(),
        });
        self.by_name.insert(name.to_string(), i);
        Ok(i)
    }

    fn sample(&mut self, text: &'a str) -> Result<(), What> {
        if self.out.samples >= self.limits.max_samples {
            return Err(What::TooManySamples(self.limits.max_samples));
        }
        self.out.samples += 1;
        let l = line::sample(text, self.format, self.limits)?;
        let (i, suffix) = self.owner(l.name)?;
        self.out.families[i].samples.push(Sample {
            suffix,
            labels: l.labels,
            value: l.value,
            timestamp_ns: l.timestamp_ns,
        });
        self.current = Some(i);
        Ok(())
    }

    /// The family a sample named `name` belongs to, and its suffix: the
    /// current family first (where its samples are), then any declared
    /// one, else a new `unknown` family of that name.
    fn owner(&mut self, name: &str) -> Result<(usize, &'static str), What> {
        let fits = |f: &Family| -> Option<&'static str> {
            if f.kind == Kind::Counter {
                // The text format names a counter family with its `_total`
                // (then its `_created` lacks it); OpenMetrics without.
                let base = f.name.strip_suffix("_total").unwrap_or(&f.name);
                let rest = name.strip_prefix(base)?;
                return match rest {
                    _ if name == f.name && self.format == Format::Text => Some(""),
                    "_total" => Some("_total"),
                    "_created" => Some("_created"),
                    _ => None,
                };
            }
            let rest = name.strip_prefix(f.name.as_str())?;
            if rest.is_empty() {
                // A counter's sample carries `_total` in OpenMetrics; the
                // text format's counters often lack it.
                return (f.kind != Kind::Info).then_some("");
            }
            f.kind.suffixes().iter().copied().find(|s| *s == rest)
        };
        if let Some(i) = self.current {
            if let Some(s) = fits(&self.out.families[i]) {
                return Ok((i, s));
            }
        }
        if let Some(&i) = self.by_name.get(name) {
            if let Some(s) = fits(&self.out.families[i]) {
                return Ok((i, s));
            }
        }
        // The family named by the name less a suffix any type allows (a
        // text-format counter's `x_created` is the family `x_total`'s).
        for suffix in [
            "_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info",
        ] {
            let Some(base) = name.strip_suffix(suffix) else {
                continue;
            };
            let with_total = (suffix == "_created").then(|| format!("{base}_total"));
            for family in [Some(base), with_total.as_deref()].into_iter().flatten() {
                if let Some(&i) = self.by_name.get(family) {
                    if let Some(s) = fits(&self.out.families[i]) {
                        return Ok((i, s));
                    }
                }
            }
        }
        if self.format == Format::OpenMetrics && self.by_name.contains_key(name) {
            return Err(What::Malformed(format!(
                "the sample {name} does not fit its family's type"
            )));
        }
        Ok((self.family(name, None)?, ""))
    }
}

/// `# HELP` text with `\\` and `\n` unescaped.
fn unescape_help(s: &str) -> String {
    if !s.contains('\\') {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

#[cfg(test)]
mod tests;
