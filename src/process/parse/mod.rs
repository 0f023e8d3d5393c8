//! Parse steps: the body (or a field) read as JSON, by a regex with named
//! captures, as logfmt, or as syslog (the `syslog` source's own parser),
//! into record attributes; a configured key may become the body. A line
//! that does not parse is kept whole and reported as [`Flow::Unparsed`].
//!
//! Adding a format is one variant of [`Format`] and one arm in
//! [`Parser::apply`].

pub mod json;
pub mod logfmt;
pub mod regex;
pub mod syslog;

use std::borrow::Cow;
use std::collections::HashMap;

use super::{Event, Flow, Value};

/// What a parse step reads its input as.
#[derive(Debug, Clone)]
pub enum Format {
    /// Lines nested deeper than `max_depth` are unparsed (`json.rs`).
    Json {
        max_depth: usize,
    },
    Regex(regex::RegexParser),
    Logfmt,
    /// RFC 5424 / RFC 3164; zoneless 3164 times read in this zone.
    Syslog(crate::calendar::TimeZone),
}

/// A parse step.
#[derive(Debug, Clone)]
pub struct Parser {
    pub format: Format,
    /// The attribute to read instead of the body (`None`: the body).
    pub field: Option<String>,
    /// The parsed key whose value becomes the body (and is not kept as an
    /// attribute); `None`: the body stays as it was.
    pub body_key: Option<String>,
}

/// Where a parser puts what it found: attributes, except `body_key`.
pub struct Sink<'e, 'a> {
    ev: &'e mut Event<'a>,
    body_key: Option<&'e str>,
    body: Option<String>,
    /// Where each attribute is, once the event has more than [`LINEAR`]:
    /// a JSON line with 20,000 members would otherwise cost 20,000 scans
    /// of the attributes so far (half a second for 800 KB).
    index: Option<HashMap<String, usize>>,
}

/// Up to this many attributes, a key is looked up by a scan (no map to
/// build for the usual short line).
const LINEAR: usize = 16;

impl Sink<'_, '_> {
    fn new<'e, 'a>(ev: &'e mut Event<'a>, body_key: Option<&'e str>) -> Sink<'e, 'a> {
        Sink {
            ev,
            body_key,
            body: None,
            index: None,
        }
    }

    /// Sets `key`, replacing an earlier value, as [`Event::set`] does.
    fn set(&mut self, key: &str, value: Value) {
        let attrs = &mut self.ev.attrs;
        if self.index.is_none() && attrs.len() < LINEAR {
            self.ev.set(key, value);
            return;
        }
        let index = self.index.get_or_insert_with(|| {
            let mut m = HashMap::with_capacity(attrs.len() * 2);
            for (i, (k, _)) in attrs.iter().enumerate() {
                m.entry(k.clone()).or_insert(i);
            }
            m
        });
        match index.get(key) {
            Some(&i) => attrs[i].1 = value,
            None => {
                index.insert(key.to_string(), attrs.len());
                attrs.push((key.to_string(), value));
            }
        }
    }

    pub fn put(&mut self, key: &str, value: Value) {
        if self.body_key == Some(key) {
            self.body = Some(match value {
                Value::Str(s) => s,
                other => other
                    .as_text()
                    .map(Cow::into_owned)
                    .unwrap_or_else(|| format!("{:?}", super::record::to_any(&other))),
            });
        } else {
            self.set(key, value);
        }
    }
}

impl Parser {
    pub fn apply(&self, ev: &mut Event<'_>) -> Flow {
        // The input is copied out only when it is a field: parsers borrow
        // it while they write into the event.
        let input: Cow<'_, str> = match &self.field {
            None => Cow::Owned(std::mem::take(&mut ev.body).into_owned()),
            Some(f) => match ev.attr(f).and_then(Value::as_text) {
                Some(t) => Cow::Owned(t.into_owned()),
                None => return Flow::Unparsed,
            },
        };
        let before = ev.attrs.len();
        let mut sink = Sink::new(ev, self.body_key.as_deref());
        let ok = match &self.format {
            Format::Json { max_depth } => json::parse(&input, *max_depth, &mut sink),
            Format::Regex(r) => r.parse(&input, &mut sink),
            Format::Logfmt => logfmt::parse(&input, &mut sink),
            Format::Syslog(zone) => syslog::parse(&input, *zone, &mut sink),
        };
        let body = sink.body.take();
        if !ok {
            // Kept whole: nothing of a half-read line stays behind.
            ev.attrs.truncate(before);
            if self.field.is_none() {
                ev.body = input;
            }
            return Flow::Unparsed;
        }
        match (body, self.field.is_none()) {
            (Some(b), _) => ev.body = Cow::Owned(b),
            (None, true) => ev.body = input,
            (None, false) => {}
        }
        Flow::Next
    }
}
