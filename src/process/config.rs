//! `[sources.<name>.process]`: a source's processing chain as written, its
//! check (into a [`Chain`]) and its lines in `holdfast check`.
//!
//! ```toml
//! [sources.app.process]
//! resource = { site = "berlin-3", "device.id" = "${DEVICE_ID}" }
//! attributes = { team = "payments" }
//!
//! [[sources.app.process.steps]]
//! type = "json"
//! body_key = "msg"
//! ```
//!
//! Every step is one table with a `type` and that type's keys. All steps
//! share one raw struct (so serde keeps every span and refuses unknown
//! keys); a key that exists but does not apply to the step's type is
//! refused here, by name. A regex that does not compile is reported at its
//! value with the regex crate's message, which points at the position in
//! the pattern; a bad timestamp pattern names the byte position of the
//! directive at fault.

use std::collections::{BTreeMap, HashSet};
use std::fmt::{self, Write};
use std::sync::Arc;

use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::de::DeValue;
use toml::Spanned;

use super::filter::{Action, Condition, FieldTest, Filter};
use super::parse::{json, regex::RegexParser, Format, Parser};
use super::redact::Redact;
use super::sample::Sample;
use super::severity::{self, Severity};
use super::timestamp::{TimeFormat, Timestamp};
use super::{Chain, Kind, Labels, Step};
use crate::calendar::TimeZone;
use crate::checking::error::suggestion_suffix;
use crate::checking::raw::raw_table;
use crate::checking::{Checker, NamedTable};

/// `[sources.<name>.process]`, as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProcess {
    /// Resource attributes added to (or overriding, like `host.name`)
    /// every event's. Default: none.
    resource: Option<BTreeMap<String, Spanned<String>>>,
    /// Record attributes every event gets. Default: none.
    attributes: Option<BTreeMap<String, Spanned<String>>>,
    /// The steps, in order (each checked on its own). Default: none.
    #[serde(rename = "steps")]
    _steps: Option<Vec<IgnoredAny>>,
}

raw_table! {
    /// One step, as written: every key any type takes.
    struct RawStep {
        /// The kind of step. Required.
        #[serde(rename = "type")]
        kind: String,
        /// The `rule` label of its counts. Default `<type>_<index>`.
        name: String,
        /// Parse: the attribute to parse instead of the body; timestamp and
        /// severity: the attribute to read; filter and sample: the attribute
        /// to test.
        field: String,
        /// Parse: the key whose value becomes the body. Default: none.
        body_key: String,
        /// JSON parse: how deep objects and arrays may nest (the line's
        /// object is 1), at most and by default 32; a deeper line is unparsed.
        max_depth: i64,
        /// Regex parse and redact: the regex.
        pattern: String,
        /// Timestamp: `"rfc3339"`, `"unix"`, `"unix_ms"` or a strptime pattern.
        format: String,
        /// Timestamp: `"UTC"` (default), `"local"` or `"+HH:MM"`.
        timezone: String,
        /// Severity: extra names and their numbers (1-24).
        map: BTreeMap<String, Spanned<i64>>,
        /// Filter: `"drop"` (default) the selected events, or `"keep"` only them.
        action: String,
        severity_below: String,
        severity_at_least: String,
        body_matches: String,
        equals: String,
        matches: String,
        /// Sample: the fraction kept, in (0, 1].
        rate: f64,
        /// Redact: what a match becomes. Default `"[REDACTED]"`.
        replacement: String,
        /// Redact: where (`"body"` and attribute names). Default: everywhere.
        fields: Vec<Spanned<String>>,
    }
}

const CONDITION: &[&str] = &[
    "severity_below",
    "severity_at_least",
    "body_matches",
    "field",
    "equals",
    "matches",
];

/// Every step type and the keys it takes besides `type` and `name`.
const TYPES: &[(&str, &[&str])] = &[
    ("json", &["field", "body_key", "max_depth"]),
    ("regex", &["field", "body_key", "pattern"]),
    ("logfmt", &["field", "body_key"]),
    ("syslog", &["field", "timezone"]),
    ("timestamp", &["field", "format", "timezone"]),
    ("severity", &["field", "map"]),
    ("filter", &["action"]),
    ("sample", &["rate"]),
    ("redact", &["pattern", "replacement", "fields"]),
];

/// Whether some step type takes `key`.
fn is_step_key(key: &str) -> bool {
    key == "type"
        || key == "name"
        || CONDITION.contains(&key)
        || TYPES.iter().any(|(_, keys)| keys.contains(&key))
}

/// The step types, quoted, for messages.
fn type_names() -> String {
    TYPES
        .iter()
        .map(|(t, _)| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether the source's table has a `process` table: the check is then
/// run and its result kept in the source's options.
pub(crate) fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>) -> Option<Arc<Chain>> {
    let DeValue::Table(table) = t.value.get_ref() else {
        return None;
    };
    let value = table.get("process")?;
    let key = format!("{}.process", t.key);
    let raw: RawProcess = cx.deserialize(&key, value)?;
    let mut chain = Chain {
        labels: Labels {
            resource: labels(cx, &format!("{key}.resource"), raw.resource),
            attributes: labels(cx, &format!("{key}.attributes"), raw.attributes),
        },
        steps: Vec::new(),
    };
    let elements = match value.get_ref() {
        DeValue::Table(p) => match p.get("steps").map(|s| s.get_ref()) {
            Some(DeValue::Array(a)) => a.iter().cloned().collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    };
    let mut names = HashSet::new();
    for (i, el) in elements.iter().enumerate() {
        let skey = format!("{key}.steps[{i}]");
        let Some(raw) = cx.deserialize::<RawStep>(&skey, el) else {
            continue;
        };
        // Checked whatever else is wrong with the step, so one run shows it.
        let name = match (&raw.name, &raw.kind) {
            (Some(n), _) => Some(n.get_ref().clone()),
            (None, Some(kind)) => Some(format!("{}_{i}", kind.get_ref())),
            (None, None) => None,
        };
        if let Some(name) = name {
            if !names.insert(name.clone()) {
                cx.error(
                    Some(el.span()),
                    &format!("{skey}.name"),
                    format!(
                        "rule name \"{name}\" is used twice in this source: its counts would be \
                         mixed; give each step its own name"
                    ),
                );
            }
        }
        if let Some(step) = raw.check(cx, &skey, el, i) {
            chain.steps.push(step);
        }
    }
    Some(Arc::new(chain))
}

fn labels(
    cx: &mut Checker<'_>,
    key: &str,
    raw: Option<BTreeMap<String, Spanned<String>>>,
) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (k, v) in raw.unwrap_or_default() {
        if k.is_empty() {
            cx.error(Some(v.span()), key, "an attribute needs a non-empty name");
            continue;
        }
        cx.note(&format!("{key}.{k}"), &v);
        out.push((k, v.into_inner()));
    }
    out
}

fn regex(cx: &mut Checker<'_>, key: &str, v: &Spanned<String>) -> Option<regex::Regex> {
    match regex::Regex::new(v.get_ref()) {
        Ok(r) => Some(r),
        Err(e) => {
            cx.error(
                Some(v.span()),
                key,
                format!(
                    "not a valid regular expression (Rust regex syntax; in TOML, write it in \
                     'single quotes' so backslashes stay as they are):\n{e}"
                ),
            );
            None
        }
    }
}

impl RawStep {
    fn check<'a>(
        self,
        cx: &mut Checker<'a>,
        skey: &str,
        el: &Spanned<DeValue<'a>>,
        index: usize,
    ) -> Option<Step> {
        let k = |s: &str| format!("{skey}.{s}");
        let Some(kind) = &self.kind else {
            cx.error(
                Some(el.span()),
                skey,
                format!("a step needs a type: one of {}", type_names()),
            );
            return None;
        };
        let Some((ty, allowed)) = TYPES.iter().find(|(t, _)| t == kind.get_ref()) else {
            cx.error(
                Some(kind.span()),
                &k("type"),
                format!(
                    "unknown step type \"{}\": use one of {}",
                    kind.get_ref(),
                    type_names()
                ),
            );
            return None;
        };
        let before = cx.error_count();
        if let DeValue::Table(t) = el.get_ref() {
            for (spanned, _) in t.iter() {
                let key: &str = spanned.get_ref().as_ref();
                if !is_step_key(key) {
                    // Unknown to every step: already reported as an unknown key.
                    continue;
                }
                let fits = key == "type"
                    || key == "name"
                    || allowed.contains(&key)
                    || (matches!(*ty, "filter" | "sample") && CONDITION.contains(&key));
                if !fits {
                    cx.error(
                        Some(spanned.span()),
                        &k(key),
                        format!(
                            "`{key}` does not apply to a \"{ty}\" step, which takes {}",
                            std::iter::once("name")
                                .chain(allowed.iter().copied())
                                .chain(
                                    matches!(*ty, "filter" | "sample")
                                        .then_some(CONDITION.iter().copied())
                                        .into_iter()
                                        .flatten()
                                )
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    );
                }
            }
        }
        let name = match &self.name {
            Some(n) => {
                let ok = !n.get_ref().is_empty()
                    && n.get_ref().len() <= 64
                    && n.get_ref()
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
                if !ok {
                    cx.error(
                        Some(n.span()),
                        &k("name"),
                        "a rule name is a metrics label value: 1 to 64 characters of A-Z, a-z, 0-9, _, - and .",
                    );
                }
                n.get_ref().clone()
            }
            None => format!("{ty}_{index}"),
        };
        let need =
            |cx: &mut Checker<'_>, v: &Option<Spanned<String>>, what: &str, example: &str| {
                if v.is_none() {
                    cx.error(
                        Some(el.span()),
                        skey,
                        format!("a \"{ty}\" step needs `{what}`, like {what} = {example}"),
                    );
                }
            };
        let kind = match *ty {
            "json" | "regex" | "logfmt" | "syslog" => {
                let format = match *ty {
                    "json" => Format::Json {
                        max_depth: json_depth(cx, &self.max_depth, &k("max_depth")),
                    },
                    "syslog" => Format::Syslog(zone(cx, &self.timezone, &k("timezone"))),
                    "logfmt" => Format::Logfmt,
                    _ => {
                        need(
                            cx,
                            &self.pattern,
                            "pattern",
                            "'^(?P<client>\\S+) (?P<rest>.*)$'",
                        );
                        let p = self.pattern.as_ref()?;
                        let r = regex(cx, &k("pattern"), p)?;
                        if r.capture_names().flatten().next().is_none() {
                            cx.error(
                                Some(p.span()),
                                &k("pattern"),
                                "the pattern has no named group (?P<name>...): it would add no attribute",
                            );
                        }
                        Format::Regex(RegexParser::new(r))
                    }
                };
                Kind::Parse(Parser {
                    format,
                    field: self.field.map(Spanned::into_inner),
                    body_key: self.body_key.map(Spanned::into_inner),
                })
            }
            "timestamp" => {
                need(cx, &self.field, "field", "\"time\"");
                let format = match &self.format {
                    None => TimeFormat::Rfc3339,
                    Some(f) => match TimeFormat::parse(f.get_ref()) {
                        Ok(tf) => tf,
                        Err((at, why)) => {
                            let span = f.span();
                            // Inside the quotes: the value's first byte is
                            // the opening quote (plain strings only).
                            let inner = span.start + 1 + at;
                            let s = (inner < span.end).then(|| inner..(inner + 1).min(span.end));
                            cx.error(
                                s.or(Some(span)),
                                &k("format"),
                                format!(
                                    "bad timestamp pattern at position {at} of '{}': {why}",
                                    f.get_ref()
                                ),
                            );
                            TimeFormat::Rfc3339
                        }
                    },
                };
                let zone = zone(cx, &self.timezone, &k("timezone"));
                Kind::Timestamp(Timestamp {
                    field: self.field.clone()?.into_inner(),
                    format,
                    zone,
                })
            }
            "severity" => {
                need(cx, &self.field, "field", "\"level\"");
                let mut map = Vec::new();
                for (name, n) in self.map.map(Spanned::into_inner).unwrap_or_default() {
                    match i32::try_from(*n.get_ref()) {
                        Ok(v) if (1..=24).contains(&v) => map.push((name.to_ascii_lowercase(), v)),
                        _ => cx.error(
                            Some(n.span()),
                            &k(&format!("map.{name}")),
                            "an OpenTelemetry severity number is 1 to 24 (TRACE 1, DEBUG 5, INFO 9, WARN 13, ERROR 17, FATAL 21)",
                        ),
                    }
                }
                Kind::Severity(Severity {
                    field: self.field.clone()?.into_inner(),
                    map,
                })
            }
            "filter" | "sample" => {
                let when = self.condition(cx, skey);
                if *ty == "filter" {
                    // A condition written but refused is reported at its value.
                    if when.is_empty() && !self.has_condition() {
                        cx.error(
                            Some(el.span()),
                            skey,
                            "a filter needs a condition (severity_below, severity_at_least, body_matches, or field with equals or matches)",
                        );
                    }
                    let action = match self.action.as_ref().map(|a| (a.get_ref().as_str(), a)) {
                        None | Some(("drop", _)) => Action::Drop,
                        Some(("keep", _)) => Action::Keep,
                        Some((_, a)) => {
                            cx.error(Some(a.span()), &k("action"), "action is \"drop\" (the events the condition selects) or \"keep\" (only them)");
                            Action::Drop
                        }
                    };
                    Kind::Filter(Filter { action, when })
                } else {
                    let rate = match &self.rate {
                        Some(r) if *r.get_ref() > 0.0 && *r.get_ref() <= 1.0 => *r.get_ref(),
                        Some(r) => {
                            cx.error(Some(r.span()), &k("rate"), "rate is the fraction kept: more than 0 and at most 1, like 0.1 for one in ten");
                            1.0
                        }
                        None => {
                            cx.error(Some(el.span()), skey, "a \"sample\" step needs `rate`, the fraction kept, like rate = 0.1");
                            1.0
                        }
                    };
                    Kind::Sample(Sample::new(rate, when, &name))
                }
            }
            _ => {
                need(cx, &self.pattern, "pattern", "'(?i)password=\\S+'");
                let pattern = regex(cx, &k("pattern"), self.pattern.as_ref()?)?;
                Kind::Redact(Redact {
                    pattern,
                    replacement: self
                        .replacement
                        .map_or_else(|| "[REDACTED]".to_string(), Spanned::into_inner),
                    fields: self
                        .fields
                        .map(Spanned::into_inner)
                        .unwrap_or_default()
                        .into_iter()
                        .map(Spanned::into_inner)
                        .collect(),
                })
            }
        };
        (cx.error_count() == before).then_some(Step { name, kind })
    }

    /// Whether any condition key is written (valid or not).
    fn has_condition(&self) -> bool {
        self.severity_below.is_some()
            || self.severity_at_least.is_some()
            || self.body_matches.is_some()
            || self.field.is_some()
            || self.equals.is_some()
            || self.matches.is_some()
    }

    fn condition(&self, cx: &mut Checker<'_>, skey: &str) -> Condition {
        let k = |s: &str| format!("{skey}.{s}");
        let level = |cx: &mut Checker<'_>, key: &str, v: &Option<Spanned<String>>| {
            let v = v.as_ref()?;
            let n = severity::number_of(v.get_ref());
            if n.is_none() {
                let names = severity::DEFAULT_NAMES.iter().map(|(n, _)| *n);
                let suggestion = suggestion_suffix(&v.get_ref().to_ascii_lowercase(), names, '"');
                cx.error(
                    Some(v.span()),
                    key,
                    format!(
                        "\"{}\" is not a level{suggestion}: a level is trace, debug, info, \
                         notice, warn, error, fatal (or a number 1-24)",
                        v.get_ref()
                    ),
                );
            }
            n
        };
        let field = match (&self.field, &self.equals, &self.matches) {
            (Some(f), Some(_), Some(m)) => {
                cx.error(
                    Some(m.span()),
                    &k("matches"),
                    "give equals or matches, not both",
                );
                Some((f.get_ref().clone(), FieldTest::Exists))
            }
            (Some(f), Some(e), None) => {
                Some((f.get_ref().clone(), FieldTest::Equals(e.get_ref().clone())))
            }
            (Some(f), None, Some(m)) => {
                regex(cx, &k("matches"), m).map(|r| (f.get_ref().clone(), FieldTest::Matches(r)))
            }
            (Some(f), None, None) => Some((f.get_ref().clone(), FieldTest::Exists)),
            (None, Some(v), _) | (None, None, Some(v)) => {
                cx.error(
                    Some(v.span()),
                    skey,
                    "equals and matches test a field: add field = \"<attribute>\"",
                );
                None
            }
            (None, None, None) => None,
        };
        Condition {
            severity_below: level(cx, &k("severity_below"), &self.severity_below),
            severity_at_least: level(cx, &k("severity_at_least"), &self.severity_at_least),
            body: self
                .body_matches
                .as_ref()
                .and_then(|b| regex(cx, &k("body_matches"), b)),
            field,
        }
    }
}

/// A rate as a percentage without binary noise (0.1 is "10", not
/// "10.000000000000002").
fn percent(rate: f64) -> String {
    let p = format!("{:.4}", rate * 100.0);
    p.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// The chain's lines in `holdfast check`, under its source.
pub fn describe(chain: &Chain, out: &mut String) -> fmt::Result {
    let list = |l: &[(String, String)]| {
        l.iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let labels = [
        ("the resource", &chain.labels.resource),
        ("every record", &chain.labels.attributes),
    ];
    for (what, l) in labels.into_iter().filter(|(_, l)| !l.is_empty()) {
        writeln!(out, "    labels {what}: {}", list(l))?;
    }
    if chain.steps.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "    processing, in order (counted as holdfast_processed_events_total{{rule}}):"
    )?;
    for (i, s) in chain.steps.iter().enumerate() {
        let what = match &s.kind {
            Kind::Parse(p) => {
                let format = match &p.format {
                    Format::Json { max_depth } => {
                        format!("JSON (objects and arrays at most {max_depth} deep)")
                    }
                    Format::Logfmt => "logfmt".to_string(),
                    Format::Regex(r) => format!("regex '{}'", r.regex.as_str()),
                    Format::Syslog(zone) => {
                        format!("syslog (RFC 5424 or 3164; zoneless times in {zone}; MSG becomes the body)")
                    }
                };
                let input = p
                    .field
                    .as_deref()
                    .map_or("the body".to_string(), |f| format!("field {f}"));
                let body = p
                    .body_key
                    .as_deref()
                    .map_or(String::new(), |b| format!("; {b} becomes the body"));
                format!("parse {input} as {format} into attributes{body}; a line that does not parse is kept whole, marked holdfast.unparsed")
            }
            Kind::Timestamp(t) => format!(
                "time from field {} ({}, zone {} unless the text has an offset)",
                t.field,
                t.format.describe(),
                t.zone
            ),
            Kind::Severity(sv) => format!(
                "severity from field {} (OpenTelemetry numbers{})",
                sv.field,
                if sv.map.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; also {}",
                        sv.map
                            .iter()
                            .map(|(n, v)| format!("{n}={v}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            ),
            Kind::Filter(f) => match f.action {
                Action::Drop => format!("drop events where {}", f.when.describe()),
                Action::Keep => format!("keep only events where {}", f.when.describe()),
            },
            Kind::Sample(sm) if sm.when.is_empty() => {
                format!("keep {}% of all events (decided by id)", percent(sm.rate))
            }
            Kind::Sample(sm) => format!(
                "keep {}% of events where {}, and every other event (decided by id)",
                percent(sm.rate),
                sm.when.describe()
            ),
            Kind::Redact(r) => format!(
                "replace '{}' with \"{}\" in {}",
                r.pattern.as_str(),
                r.replacement,
                if r.fields.is_empty() {
                    "the body and every attribute".to_string()
                } else {
                    r.fields.join(", ")
                }
            ),
        };
        writeln!(out, "      {}. {}: {what}", i + 1, s.name)?;
    }
    Ok(())
}

/// `timezone` of a timestamp or syslog step: UTC unless set.
/// A `json` step's `max_depth`: 1 to [`json::MAX_DEPTH`], its default.
fn json_depth(cx: &mut Checker<'_>, v: &Option<Spanned<i64>>, key: &str) -> usize {
    let Some(d) = v else {
        return json::MAX_DEPTH;
    };
    match usize::try_from(*d.get_ref()) {
        Ok(n) if (1..=json::MAX_DEPTH).contains(&n) => n,
        _ => {
            cx.error(
                Some(d.span()),
                key,
                format!(
                    "max_depth is how deep objects and arrays may nest (the line's object is 1), from 1 to {max}, default {max}: a deeper value could not be read back from the log nor decoded by a backend (protobuf's limit of 100 nested messages)",
                    max = json::MAX_DEPTH
                ),
            );
            json::MAX_DEPTH
        }
    }
}

fn zone(cx: &mut Checker<'_>, v: &Option<Spanned<String>>, key: &str) -> TimeZone {
    match v {
        None => TimeZone::Utc,
        Some(z) => TimeZone::parse(z.get_ref()).unwrap_or_else(|| {
            cx.error(
                Some(z.span()),
                key,
                "a time zone is \"UTC\", \"local\" (the machine's) or a fixed offset like \"+02:00\"",
            );
            TimeZone::Utc
        }),
    }
}
