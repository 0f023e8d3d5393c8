//! The chain over the log records of an OTLP/HTTP request, before they are
//! split into events: labels on every resource and record, steps on each
//! record (a string body is the body; attributes, time and severity are the
//! record's own), dropped records removed from the request.
//!
//! A record's id is only derived when the request is split, so `sample`
//! decides by a hash of the record as received: a client's retry of the
//! same request gets the same decisions.

use std::borrow::Cow;

use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::{record, Event, EventId, Runner, Value};

fn value_of(v: Option<AnyValue>) -> Value {
    match v.and_then(|a| a.value) {
        Some(any_value::Value::StringValue(s)) => Value::Str(s),
        Some(any_value::Value::IntValue(i)) => Value::Int(i),
        Some(any_value::Value::DoubleValue(d)) => Value::Double(d),
        Some(any_value::Value::BoolValue(b)) => Value::Bool(b),
        other => Value::Any(AnyValue { value: other }),
    }
}

impl Runner {
    /// Runs the chain over every log record of `req`, removing those it
    /// drops, and adds the tallies to the metrics.
    pub fn logs(&mut self, req: &mut ExportLogsServiceRequest) {
        let labels = &self.chain.labels;
        for rl in &mut req.resource_logs {
            if !labels.resource.is_empty() {
                labels.apply_resource(
                    &mut rl.resource.get_or_insert_with(Resource::default).attributes,
                );
            }
            for sl in &mut rl.scope_logs {
                let chain = &self.chain;
                let counts = &mut self.counts;
                sl.log_records.retain_mut(|rec| {
                    let keep = !chain.has_steps() || run(chain, rec, counts);
                    if keep {
                        chain.labels.apply_attributes(&mut rec.attributes);
                    }
                    keep
                });
            }
        }
        self.flush();
    }
}

/// One record through the steps, written back in place; false if dropped.
fn run(chain: &super::Chain, rec: &mut LogRecord, counts: &mut [u64]) -> bool {
    let id = EventId(xxhash_rust::xxh3::xxh3_128(&rec.encode_to_vec()).to_le_bytes());
    let (body, string_body) = match rec.body.as_mut().and_then(|b| b.value.as_mut()) {
        Some(any_value::Value::StringValue(s)) => (std::mem::take(s), true),
        _ => (String::new(), false),
    };
    let mut ev = Event::new(Cow::Owned(body), id);
    ev.attrs = std::mem::take(&mut rec.attributes)
        .into_iter()
        .map(|kv| (kv.key, value_of(kv.value)))
        .collect();
    ev.time_unix_nano = rec.time_unix_nano;
    ev.severity_number = rec.severity_number;
    ev.severity_text = std::mem::take(&mut rec.severity_text);
    let keep = chain.run(&mut ev, counts);
    if string_body || !ev.body.is_empty() {
        rec.body = Some(AnyValue {
            value: Some(any_value::Value::StringValue(ev.body.into_owned())),
        });
    }
    rec.attributes = ev
        .attrs
        .iter()
        .map(|(k, v)| KeyValue {
            key: k.clone(),
            value: Some(record::to_any(v)),
            ..Default::default()
        })
        .collect();
    rec.time_unix_nano = ev.time_unix_nano;
    rec.severity_number = ev.severity_number;
    rec.severity_text = ev.severity_text;
    keep
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use opentelemetry_proto::tonic::logs::v1::{ResourceLogs, ScopeLogs};

    use super::*;
    use crate::metrics::Metrics;
    use crate::process::filter::{Condition, FieldTest};
    use crate::process::parse::Format;
    use crate::process::testing::{drop_when, parse, step};
    use crate::process::{Chain, Labels};

    fn rec(body: &str) -> LogRecord {
        LogRecord {
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(body.into())),
            }),
            attributes: vec![KeyValue {
                key: "k".into(),
                value: Some(AnyValue {
                    value: Some(any_value::Value::IntValue(1)),
                }),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn records_are_parsed_labelled_and_dropped_in_place() {
        let chain = Chain {
            labels: Labels {
                resource: vec![("site".into(), "s".into())],
                attributes: vec![("team".into(), "t".into())],
            },
            steps: vec![
                step("lf", parse(Format::Logfmt, Some("msg"))),
                step(
                    "no_debug",
                    drop_when(Condition {
                        field: Some(("level".into(), FieldTest::Equals("debug".into()))),
                        ..Default::default()
                    }),
                ),
            ],
        };
        let metrics = Metrics::new(None);
        let mut r = Runner::new(Arc::new(chain), &metrics, "otlp");
        let mut req = ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                scope_logs: vec![ScopeLogs {
                    log_records: vec![rec("level=info msg=up"), rec("level=debug msg=x")],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        r.logs(&mut req);
        let rl = &req.resource_logs[0];
        assert_eq!(
            rl.resource.as_ref().map(|r| r.attributes[0].key.as_str()),
            Some("site")
        );
        let recs = &rl.scope_logs[0].log_records;
        assert_eq!(recs.len(), 1);
        assert_eq!(
            recs[0].body.as_ref().and_then(|b| b.value.clone()),
            Some(any_value::Value::StringValue("up".into()))
        );
        let keys: Vec<&str> = recs[0].attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["k", "level", "team"]);
    }
}
