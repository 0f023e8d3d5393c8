//! Name templates: an Elasticsearch index or an OpenObserve stream chosen
//! per event, like `"holdfast-{signal}-{date}"`.
//!
//! Placeholders: `{signal}` (`logs`, `traces`, `metrics`), `{source}` (the
//! source's name, lower-cased), and the event's own time in UTC: `{date}`
//! (`2024.05.01`), `{year}`, `{month}`, `{day}`, `{hour}` (zero-padded). The
//! time is the record's (log time, span start, metric point time), or when
//! holdfast observed it if the record has none, so a late event lands in
//! the index of its own day.
//!
//! Fields of the event: `{resource.<key>}` (a resource attribute, like
//! `{resource.service.name}`) and `{attributes.<key>}` (an attribute of the
//! log record or span). A field's value is lower-cased, every character
//! other than `a-z`, `0-9`, `-` and `_` becomes `_`, and it is cut at
//! [`FIELD_MAX`] characters, so that it is one valid token in every target
//! (an index name, a stream name, one token of a NATS subject: no `.`, `*`,
//! `>` or spaces); a missing or empty field renders [`MISSING`].

use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};

use crate::calendar::Civil;
use crate::event::{Context, Record, Stored};

/// What a missing or empty field renders.
pub const MISSING: &str = "unknown";

/// The most characters a field renders: a NATS control line (subject
/// included) is limited to 4 KiB, an index name to 255 bytes.
pub const FIELD_MAX: usize = 64;

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
    uses_time: bool,
    uses_source: bool,
    uses_resource: bool,
    uses_attributes: bool,
}

/// The last name a template rendered, and what it depended on: consecutive
/// events nearly always render the same name, so a request renders it once.
#[derive(Debug, Default)]
pub(crate) struct Rendered {
    key: Option<(Option<crate::event::Signal>, u64, String)>,
    /// The batch group whose resource the name was rendered from; held so
    /// that its address cannot be reused by another context meanwhile.
    group: Option<(Arc<Context>, usize)>,
    name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Signal,
    Source,
    Date,
    Year,
    Month,
    Day,
    Hour,
    Resource(String),
    Attribute(String),
}

/// The placeholders a template may use.
pub const PLACEHOLDERS: &[&str] = &[
    "signal",
    "source",
    "date",
    "year",
    "month",
    "day",
    "hour",
    "resource.<key>",
    "attributes.<key>",
];

impl Template {
    /// Parses `text`; the error says which placeholder or brace is wrong.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(open) = rest.find(['{', '}']) {
            lit.push_str(&rest[..open]);
            if rest.as_bytes()[open] == b'}' {
                return Err(format!(
                    "a '}}' without its '{{' in \"{text}\": placeholders look like {{signal}}"
                ));
            }
            let after = &rest[open + 1..];
            let Some(close) = after.find('}') else {
                return Err(format!("an unclosed '{{' in \"{text}\""));
            };
            let name = &after[..close];
            let part = match name {
                "signal" => Part::Signal,
                "source" => Part::Source,
                "date" => Part::Date,
                "year" => Part::Year,
                "month" => Part::Month,
                "day" => Part::Day,
                "hour" => Part::Hour,
                _ if name.len() > 9 && name.starts_with("resource.") => {
                    Part::Resource(name["resource.".len()..].to_string())
                }
                _ if name.len() > 11 && name.starts_with("attributes.") => {
                    Part::Attribute(name["attributes.".len()..].to_string())
                }
                other => {
                    let list: Vec<String> =
                        PLACEHOLDERS.iter().map(|p| format!("{{{p}}}")).collect();
                    return Err(format!(
                        "unknown placeholder {{{other}}} in \"{text}\"; known: {}",
                        list.join(", ")
                    ));
                }
            };
            if !lit.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut lit)));
            }
            parts.push(part);
            rest = &after[close + 1..];
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Literal(lit));
        }
        let uses_time = parts.iter().any(|p| {
            matches!(
                p,
                Part::Date | Part::Year | Part::Month | Part::Day | Part::Hour
            )
        });
        let uses_source = parts.contains(&Part::Source);
        let uses_resource = parts.iter().any(|p| matches!(p, Part::Resource(_)));
        let uses_attributes = parts.iter().any(|p| matches!(p, Part::Attribute(_)));
        Ok(Template {
            text: text.to_string(),
            parts,
            uses_time,
            uses_source,
            uses_resource,
            uses_attributes,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The literal text of the template, for checks on allowed characters.
    pub fn literals(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|p| match p {
            Part::Literal(s) => Some(s.as_str()),
            _ => None,
        })
    }

    /// Whether the rendered name depends on the event's time.
    pub fn uses_time(&self) -> bool {
        self.uses_time
    }

    /// Whether the rendered name depends only on the event's signal.
    pub fn by_signal_only(&self) -> bool {
        !self.uses_time && !self.uses_source && !self.uses_resource && !self.uses_attributes
    }

    /// The name for `env`, rendered only when it can differ from the last
    /// one (another signal, source, hour or batch group; every event when
    /// the template reads record attributes, or a resource not shared
    /// through a batch context).
    pub(crate) fn render_cached<'a>(&self, ev: &Stored, cache: &'a mut Rendered) -> &'a str {
        let hour = if self.uses_time {
            event_time(ev) / 3_600_000_000_000
        } else {
            0
        };
        let source = if self.uses_source { ev.source() } else { "" };
        let signal = ev.signal();
        let group = if self.uses_resource {
            ev.shared_with()
        } else {
            None
        };
        let same_group = !self.uses_resource
            || matches!((&cache.group, group), (Some((c, g)), Some((c2, g2)))
                if Arc::ptr_eq(c, c2) && *g == g2);
        let fresh = !self.uses_attributes
            && same_group
            && match &cache.key {
                Some((s, h, src)) => {
                    *s == signal && *h == hour && (!self.uses_source || src.as_str() == source)
                }
                None => false,
            };
        if !fresh {
            cache.name.clear();
            self.render(ev, &mut cache.name);
            cache.key = Some((signal, hour, source.to_string()));
            cache.group = group.map(|(c, g)| (c.clone(), g));
        }
        &cache.name
    }

    /// Renders the name for `ev` into `out`.
    pub fn render(&self, ev: &Stored, out: &mut String) {
        use std::fmt::Write;
        let c = if self.uses_time() {
            Civil::from_unix_nanos(event_time(ev))
        } else {
            Civil::default()
        };
        for p in &self.parts {
            // Writing to a String cannot fail.
            let _ = match p {
                Part::Literal(s) => out.write_str(s),
                Part::Signal => out.write_str(ev.signal().map_or("unknown", |s| s.as_str())),
                Part::Source => {
                    out.extend(ev.source().chars().map(|c| c.to_ascii_lowercase()));
                    Ok(())
                }
                Part::Date => write!(out, "{:04}.{:02}.{:02}", c.year, c.month, c.day),
                Part::Year => write!(out, "{:04}", c.year),
                Part::Month => write!(out, "{:02}", c.month),
                Part::Day => write!(out, "{:02}", c.day),
                Part::Hour => write!(out, "{:02}", c.hour),
                Part::Resource(key) => {
                    let attrs = ev.resource().map_or(&[][..], |r| &r.attributes);
                    push_field(out, find(attrs, key));
                    Ok(())
                }
                Part::Attribute(key) => {
                    let own = match ev.record() {
                        Some(Record::Log(l)) => &l.attributes[..],
                        Some(Record::Span(s)) => &s.attributes[..],
                        _ => &[],
                    };
                    let v = find(own, key).or_else(|| find(ev.shared_attributes(), key));
                    push_field(out, v);
                    Ok(())
                }
            };
        }
    }
}

fn find<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// A field's value as one token (see the module documentation).
fn push_field(out: &mut String, v: Option<&any_value::Value>) {
    use any_value::Value;
    let start = out.len();
    let mut push = |text: &str| {
        for c in text.chars().take(FIELD_MAX) {
            out.push(match c {
                'a'..='z' | '0'..='9' | '-' | '_' => c,
                'A'..='Z' => c.to_ascii_lowercase(),
                _ => '_',
            });
        }
    };
    match v {
        Some(Value::StringValue(s)) => push(s),
        Some(Value::IntValue(i)) => push(&i.to_string()),
        Some(Value::BoolValue(b)) => push(if *b { "true" } else { "false" }),
        Some(Value::DoubleValue(d)) => push(&d.to_string()),
        _ => {}
    }
    if out.len() == start {
        out.push_str(MISSING);
    }
}

/// The event's own time in unix nanoseconds: the record's, else when
/// holdfast observed it.
pub(crate) fn event_time(ev: &Stored) -> u64 {
    let t = match ev.record() {
        Some(Record::Log(l)) => {
            if l.time_unix_nano != 0 {
                l.time_unix_nano
            } else {
                l.observed_time_unix_nano
            }
        }
        Some(Record::Span(s)) => s.start_time_unix_nano,
        Some(Record::Metric(m)) => super::delivery::keys::point(m).map_or(0, |p| p.time_unix_nano),
        None => 0,
    };
    if t != 0 {
        t
    } else {
        ev.observed_time_unix_nano()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Envelope, EventId};
    use crate::sinks::test_events::{both_formats, items_v1, items_v2, kv, stored, text_log};
    use opentelemetry_proto::tonic::common::v1::AnyValue;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use opentelemetry_proto::tonic::resource::v1::Resource;

    fn env(source: &str, t: u64) -> Stored {
        stored(&Envelope {
            id: EventId::random().0.to_vec(),
            source: source.into(),
            observed_time_unix_nano: 5,
            record: Some(Record::Log(LogRecord {
                time_unix_nano: t,
                ..Default::default()
            })),
            ..Default::default()
        })
    }

    #[test]
    fn templates_render_per_event() {
        let t = Template::parse("hf-{signal}-{source}-{date}").unwrap();
        let mut s = String::new();
        t.render(&env("SysLog", 1_709_251_199_500_000_000), &mut s);
        assert_eq!(s, "hf-logs-syslog-2024.02.29");
        let t = Template::parse("{year}/{month}/{day}/{hour}").unwrap();
        let mut s = String::new();
        // No record time: the observed time (5 ns after the epoch).
        t.render(&env("a", 0), &mut s);
        assert_eq!(s, "1970/01/01/00");
        assert!(!Template::parse("logs").unwrap().uses_time());
    }

    fn with_fields(service: Option<&str>, attrs: Vec<KeyValue>) -> Envelope {
        Envelope {
            id: EventId::random().0.to_vec(),
            source: "app".into(),
            resource: service.map(|s| Resource {
                attributes: vec![kv("service.name", s), kv("host.name", "gw-1")],
                ..Default::default()
            }),
            record: Some(text_log(5, "line", attrs)),
            ..Default::default()
        }
    }

    fn rendered(t: &str, env: &Envelope) -> String {
        let mut s = String::new();
        Template::parse(t).unwrap().render(&stored(env), &mut s);
        s
    }

    #[test]
    fn fields_render_as_one_clean_token() {
        let t = "t.{signal}.{resource.service.name}.{attributes.level}";
        let env = with_fields(Some("Checkout API.v2*>"), vec![kv("level", "WARN")]);
        assert_eq!(rendered(t, &env), "t.logs.checkout_api_v2__.warn");
        // Missing, empty, or not a scalar: the fallback.
        let env = with_fields(None, vec![kv("level", "")]);
        assert_eq!(rendered(t, &env), "t.logs.unknown.unknown");
        let long = "x".repeat(500);
        let env = with_fields(Some(&long), vec![]);
        assert_eq!(
            rendered("{resource.service.name}", &env).len(),
            FIELD_MAX,
            "cut to FIELD_MAX"
        );
        let mut env = with_fields(Some("a"), vec![]);
        if let Some(Record::Log(l)) = &mut env.record {
            l.attributes.push(KeyValue {
                key: "n".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(-42)),
                }),
                ..Default::default()
            });
        }
        assert_eq!(rendered("{attributes.n}", &env), "-42");
        assert!(!Template::parse("{resource.service.name}")
            .unwrap()
            .by_signal_only());
        assert!(Template::parse("{resource.}").is_err());
    }

    #[test]
    fn fields_render_alike_from_both_formats_and_the_cache_follows_groups() {
        // Two services, each in its own batch group (format 2), the level
        // shared by the group or the record's own.
        let envs: Vec<Envelope> = ["a", "a", "b", "b", "a"]
            .iter()
            .enumerate()
            .map(|(i, s)| with_fields(Some(s), vec![kv("level", &format!("l{}", i % 2))]))
            .collect();
        let want = ["a.l0", "a.l1", "b.l0", "b.l1", "a.l0"];
        let t = Template::parse("{resource.service.name}.{attributes.level}").unwrap();
        for (v1, v2) in both_formats(&envs, 0) {
            let (mut a, mut b) = (String::new(), String::new());
            t.render(&v1.ev, &mut a);
            t.render(&v2.ev, &mut b);
            assert_eq!(a, b);
        }
        for items in [
            items_v1(&envs, 0),
            items_v2(&envs, 0, 0),
            items_v2(&envs, 1, 0),
        ] {
            let mut cache = Rendered::default();
            let got: Vec<String> = items
                .iter()
                .map(|i| t.render_cached(&i.ev, &mut cache).to_string())
                .collect();
            assert_eq!(got, want);
            // Resource only: rendered once per group, and right.
            let t = Template::parse("x.{resource.service.name}").unwrap();
            let mut cache = Rendered::default();
            let got: Vec<String> = items
                .iter()
                .map(|i| t.render_cached(&i.ev, &mut cache).to_string())
                .collect();
            assert_eq!(got, ["x.a", "x.a", "x.b", "x.b", "x.a"]);
        }
    }

    #[test]
    fn bad_templates_say_what_is_wrong() {
        assert!(Template::parse("x-{sginal}")
            .unwrap_err()
            .contains("unknown placeholder {sginal}"));
        assert!(Template::parse("x-{date").unwrap_err().contains("unclosed"));
        assert!(Template::parse("x-}").unwrap_err().contains("without its"));
    }
}
