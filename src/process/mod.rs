//! Event shaping before the append (issue 17): a source's *processing
//! chain* parses, timestamps, grades, redacts, filters and samples each
//! event, and labels them all, before the event is encoded into the log.
//!
//! Why before the append: the log stores what will be sent, and promise 4
//! holds: a line read again after a crash goes through the same chain and
//! comes out as the same event with the same id. Every decision is a pure
//! function of the line and its id (sampling hashes the id), never of time
//! or chance.
//!
//! * `config.rs` — `[sources.<name>.process]`: its raw TOML, its check and
//!   its lines in `holdfast check`.
//! * `parse/` — `json`, `regex`, `logfmt` (and the dispatcher a `syslog`
//!   arm joins); `timestamp.rs`, `severity.rs` — fields into the record's
//!   time and severity; `filter.rs`, `sample.rs` — what is dropped;
//!   `redact.rs` — masking; `label.rs` — constants for the resource and
//!   the record, stored once per batch (format 2's context), never per
//!   event; `record.rs` — an event's parsed fields as `LogRecord` bytes;
//!   `otlp.rs` — the chain over an OTLP/HTTP request's log records.
//!
//! Nothing is lost silently: a step that cannot read an event keeps it
//! whole, marks it with [`ATTR_UNPARSED`] and counts it; a drop is counted
//! per source and rule in `holdfast_processed_events_total`.

pub mod config;
pub mod filter;
pub mod label;
pub mod otlp;
pub mod parse;
pub mod record;
pub mod redact;
pub mod sample;
pub mod severity;
pub mod timestamp;

use std::borrow::Cow;
use std::sync::Arc;

use opentelemetry_proto::tonic::common::v1::AnyValue;
use prometheus_client::metrics::counter::Counter;

use crate::event::EventId;
use crate::metrics::{Metrics, ProcessedLabels};

pub use label::Labels;

/// The attribute that marks an event a step could not read; its value is
/// the step's rule name.
pub const ATTR_UNPARSED: &str = "holdfast.unparsed";

/// An attribute value a step produced.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Str(String),
    Int(i64),
    Double(f64),
    Bool(bool),
    /// A nested object or array (JSON), as OTLP's `AnyValue`.
    Any(AnyValue),
}

impl Value {
    /// The value as text, for matching and parsing (`None` for nested).
    pub fn as_text(&self) -> Option<Cow<'_, str>> {
        Some(match self {
            Value::Str(s) => Cow::Borrowed(s.as_str()),
            Value::Int(i) => Cow::Owned(i.to_string()),
            Value::Double(d) => Cow::Owned(d.to_string()),
            Value::Bool(b) => Cow::Borrowed(if *b { "true" } else { "false" }),
            Value::Any(_) => return None,
        })
    }

    /// The value as OTLP's `AnyValue`, built straight from its parts: a
    /// nested value is moved, never encoded and decoded again.
    pub fn into_any(self) -> AnyValue {
        use opentelemetry_proto::tonic::common::v1::any_value::Value as V;
        let v = match self {
            Value::Str(s) => V::StringValue(s),
            Value::Int(i) => V::IntValue(i),
            Value::Double(d) => V::DoubleValue(d),
            Value::Bool(b) => V::BoolValue(b),
            Value::Any(a) => return a,
        };
        AnyValue { value: Some(v) }
    }
}

/// One event going through the chain: the parts a step may change.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    pub body: Cow<'a, str>,
    /// The record's own attributes, in the order steps added them; a key
    /// set again replaces its value.
    pub attrs: Vec<(String, Value)>,
    /// `LogRecord.time_unix_nano`; 0 when unknown.
    pub time_unix_nano: u64,
    /// OpenTelemetry severity number, 0 when unknown.
    pub severity_number: i32,
    pub severity_text: String,
    /// The event's stable id (what sampling decides by).
    pub id: EventId,
}

impl<'a> Event<'a> {
    pub fn new(body: impl Into<Cow<'a, str>>, id: EventId) -> Event<'a> {
        Event {
            body: body.into(),
            attrs: Vec::new(),
            time_unix_nano: 0,
            severity_number: 0,
            severity_text: String::new(),
            id,
        }
    }

    pub fn attr(&self, key: &str) -> Option<&Value> {
        self.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Sets `key`, replacing an earlier value.
    pub fn set(&mut self, key: &str, value: Value) {
        match self.attrs.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => self.attrs.push((key.to_string(), value)),
        }
    }
}

/// What a step did with an event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    /// On to the next step.
    Next,
    /// Kept, but the step could not read it: marked and counted, the chain
    /// goes on (later steps may still apply).
    Unparsed,
    /// Counted with this step's outcome, and not appended.
    Drop,
    /// Kept, and changed by a masking step (counted).
    Redacted,
}

/// The outcomes counted in `holdfast_processed_events_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Unparsed,
    Dropped,
    SampledOut,
    Redacted,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Unparsed => "unparsed",
            Outcome::Dropped => "dropped",
            Outcome::SampledOut => "sampled_out",
            Outcome::Redacted => "redacted",
        }
    }
}

/// One step of a chain.
#[derive(Debug, Clone)]
pub enum Kind {
    Parse(parse::Parser),
    Timestamp(timestamp::Timestamp),
    Severity(severity::Severity),
    Filter(filter::Filter),
    Sample(sample::Sample),
    Redact(redact::Redact),
}

impl Kind {
    /// The only outcome this kind of step counts.
    pub fn outcome(&self) -> Outcome {
        match self {
            Kind::Parse(_) | Kind::Timestamp(_) | Kind::Severity(_) => Outcome::Unparsed,
            Kind::Filter(_) => Outcome::Dropped,
            Kind::Sample(_) => Outcome::SampledOut,
            Kind::Redact(_) => Outcome::Redacted,
        }
    }

    fn apply(&self, ev: &mut Event<'_>) -> Flow {
        match self {
            Kind::Parse(p) => p.apply(ev),
            Kind::Timestamp(t) => t.apply(ev),
            Kind::Severity(s) => s.apply(ev),
            Kind::Filter(f) => f.apply(ev),
            Kind::Sample(s) => s.apply(ev),
            Kind::Redact(r) => r.apply(ev),
        }
    }
}

/// A named step: the name is the `rule` label of its counts.
#[derive(Debug, Clone)]
pub struct Step {
    pub name: String,
    pub kind: Kind,
}

/// A source's processing: labels (once per batch) and steps (per event).
#[derive(Debug, Clone, Default)]
pub struct Chain {
    pub labels: Labels,
    pub steps: Vec<Step>,
}

impl Chain {
    /// Whether events go through steps at all (a chain of labels only
    /// costs nothing per event).
    pub fn has_steps(&self) -> bool {
        !self.steps.is_empty()
    }

    /// Runs the steps over `ev`; `counts[i]` is step `i`'s tally. Returns
    /// false if a step dropped the event.
    pub fn run(&self, ev: &mut Event<'_>, counts: &mut [u64]) -> bool {
        for (i, step) in self.steps.iter().enumerate() {
            match step.kind.apply(ev) {
                Flow::Next => {}
                // Counted once, by the rule that marks it: a later step
                // that cannot read an already unparsed line (a `severity`
                // after a failed `json`) follows from the first failure,
                // and the counts must add up to the events marked.
                Flow::Unparsed => {
                    if ev.attr(ATTR_UNPARSED).is_none() {
                        counts[i] += 1;
                        ev.set(ATTR_UNPARSED, Value::Str(step.name.clone()));
                    }
                }
                Flow::Redacted => counts[i] += 1,
                Flow::Drop => {
                    counts[i] += 1;
                    return false;
                }
            }
        }
        // A label is the source's fact: a parsed field of the same name
        // gives way (docs/processing.md, "Labels").
        if !self.labels.attributes.is_empty() {
            ev.attrs.retain(|(k, _)| !self.labels.has_attribute(k));
        }
        true
    }
}

/// A running chain with its counters: what a source holds per thread or
/// task. Counts are tallied locally and added to the metrics in
/// [`Runner::flush`], once per batch, not per event.
pub struct Runner {
    pub chain: Arc<Chain>,
    counts: Vec<u64>,
    counters: Vec<Counter>,
    /// The record fields of the event being encoded, reused.
    pub record: Vec<u8>,
}

impl Runner {
    /// The runner of `source`'s chain; its series start at 0.
    pub fn new(chain: Arc<Chain>, metrics: &Metrics, source: &str) -> Runner {
        let counters = chain
            .steps
            .iter()
            .map(|s| {
                metrics
                    .sources
                    .processed
                    .get_or_create(&ProcessedLabels {
                        source: source.to_string(),
                        rule: s.name.clone(),
                        outcome: s.kind.outcome().as_str().to_string(),
                    })
                    .clone()
            })
            .collect();
        Runner {
            counts: vec![0; chain.steps.len()],
            chain,
            counters,
            record: Vec::new(),
        }
    }

    /// Runs the chain over one event; on keep, `self.record` holds the
    /// event's `LogRecord` fields besides its body (see `record.rs`), and
    /// the body is returned.
    pub fn process<'a>(&mut self, body: Cow<'a, str>, id: EventId) -> Option<Cow<'a, str>> {
        self.record.clear();
        if !self.chain.has_steps() {
            return Some(body);
        }
        let mut ev = Event::new(body, id);
        if !self.chain.run(&mut ev, &mut self.counts) {
            return None;
        }
        record::encode(&ev, &mut self.record);
        Some(ev.body)
    }

    /// Adds the tallies to the metrics.
    pub fn flush(&mut self) {
        for (n, c) in self.counts.iter_mut().zip(&self.counters) {
            if *n > 0 {
                c.inc_by(std::mem::take(n));
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod testing;
#[cfg(test)]
mod tests;
