/*!
A strict OTLP/JSON decoder: the JSON mapping of the OTLP protobuf messages
(lowerCamelCase keys, hex trace and span ids, 64-bit integers as decimal
strings or numbers, enums as integers) into the prost types, accepting only
what it can represent exactly.

Why not the serde derive that `opentelemetry-proto` ships: it skips the
snake_case spelling of a known key like any unknown key (so `"log_records"`
silently yields a scope with no records; OTLP/JSON keys are lowerCamelCase
only), and keeps only the last of duplicate keys. Each of those would let holdfast answer 200 for
records it never stored. Here, every one of these is a 400 naming the JSON
path:

* the snake_case spelling of a known key (with the lowerCamelCase one as a
  hint), another signal's request key at the top (a body sent to the wrong
  path), and duplicate keys in one object;
* two members of one oneof (`stringValue` and `intValue`, `asDouble` and
  `asInt`, `gauge` and `sum`);
* a value of the wrong JSON type, `null` inside an array, an integer out of
  range or not exactly representable (write 64-bit integers as strings),
  trace ids that are not 32 hex digits and span ids that are not 16.

Any other key is ignored, as the OTLP spec requires of receivers: a field
added by a newer OTLP release must not cost a newer client its batch (OTLP
clients drop a batch answered 400), and protobuf requests with unknown
fields are accepted too. Ignored keys are counted in an [`UnknownKeys`]
tally the caller passes in, with the path of the first few, so that a
misspelt key shows in the metrics and the debug log.

`null` stands for an absent field (proto3 JSON). Enum values may be integers
or their proto names (`"SPAN_KIND_SERVER"`). The input is first parsed into
a small tree ([`J`]) that keeps every key in order, so duplicates are seen;
serde_json bounds its nesting depth (128), so the recursive walk is bounded
too.

Each message is a table of its keys (`table.rs` turns a table into the
decoder: the match and the allowed-key list come from the same rows), in
one module per signal (`logs.rs`, `traces.rs`, `metrics.rs`) over the
messages they share (`common.rs`: values, attributes, resource, scope) and
the scalars of the JSON mapping (`scalar.rs`).
*/

use std::fmt;

// First, and apart from the other modules (which rustfmt would sort ahead
// of it): its `messages!` and `signal!` macros are written for them.
#[macro_use]
mod table;

mod common;
mod logs;
mod metrics;
mod scalar;
#[cfg(test)]
mod tests;
mod traces;
mod tree;

pub(crate) use logs::logs;
pub(crate) use metrics::{metrics, METRIC_KINDS};
pub(crate) use table::UnknownKeys;
pub(crate) use traces::traces;
pub(crate) use tree::J;

/// Why a body is not OTLP/JSON holdfast can store faithfully.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonError {
    /// Where, like `resourceLogs[0].scopeLogs[1].logRecords[2].body`; empty
    /// for the document as a whole.
    pub path: String,
    pub problem: String,
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "invalid OTLP/JSON: {}", self.problem)
        } else {
            write!(f, "invalid OTLP/JSON at {}: {}", self.path, self.problem)
        }
    }
}

type Result<T, E = JsonError> = std::result::Result<T, E>;

/// Records in the tree, counted by its shape alone (not by the message
/// tables): the elements of `resource.scope.records` arrays for logs and
/// traces, of every metric kind's `dataPoints` for metrics. Decoding must
/// arrive at the same number, or the request is refused.
pub(crate) fn count_records(tree: &J, signal: crate::event::Signal) -> u64 {
    use crate::event::Signal;
    let (resources, scopes, records) = match signal {
        Signal::Logs => ("resourceLogs", "scopeLogs", "logRecords"),
        Signal::Traces => ("resourceSpans", "scopeSpans", "spans"),
        Signal::Metrics => ("resourceMetrics", "scopeMetrics", "metrics"),
    };
    let mut n = 0u64;
    for r in tree.items(resources) {
        for s in r.items(scopes) {
            for rec in s.items(records) {
                n += match signal {
                    Signal::Metrics => METRIC_KINDS
                        .iter()
                        .filter_map(|k| rec.get(k))
                        .map(|data| data.items("dataPoints").len() as u64)
                        .sum(),
                    _ => 1,
                };
            }
        }
    }
    n
}
