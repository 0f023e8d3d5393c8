//! The `syslog` parse step: a line read by the `syslog` source's own parser
//! and mapped as that source maps a message (`syslog_format::record`), so
//! a syslog file relayed to disk and a message received over the network
//! become the same record: `syslog.*` attributes, structured data as
//! `syslog.sd.<id>.<param>`, the time, the severity, and the MSG part as
//! the body. The sender's HOSTNAME, which the source puts in the resource,
//! is the record attribute `syslog.hostname` here: one file may hold many
//! hosts' lines.

use std::time::{SystemTime, UNIX_EPOCH};

use super::Sink;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue};

use crate::calendar::TimeZone;
use crate::process::Value;
use crate::syslog_format::parse::{parse_logged, Format, ParseOptions};
use crate::syslog_format::record::record;

/// Reads `input` as a syslog line (with `<PRI>`, or as syslog daemons
/// write files: from the timestamp on); `false` (the line kept whole) when
/// it is neither.
pub fn parse(input: &str, time_zone: TimeZone, sink: &mut Sink<'_, '_>) -> bool {
    // The year of a 3164 timestamp is chosen around now; a line re-read
    // after a crash gets the same one unless it is re-read across the
    // turn of a year.
    let now_unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let opts = ParseOptions {
        time_zone,
        now_unix,
    };
    let p = parse_logged(input.as_bytes(), &opts);
    if p.format == Format::Unparsed {
        return false;
    }
    let r = record(&p);
    for kv in r.attributes {
        if let Some(v) = kv.value {
            sink.put(&kv.key, value(v));
        }
    }
    if let Some(host) = p.hostname {
        sink.put(
            "syslog.hostname",
            Value::Str(String::from_utf8_lossy(host).into_owned()),
        );
    }
    if r.time_unix_nano != 0 {
        sink.ev.time_unix_nano = r.time_unix_nano;
    }
    if r.severity_number != 0 {
        sink.ev.severity_number = r.severity_number;
        sink.ev.severity_text = r.severity_text;
    }
    // The input is a `str`, so the message (a part of it) is UTF-8.
    sink.body = Some(String::from_utf8_lossy(p.message).into_owned());
    true
}

/// The record's attribute values as the chain's: text and numbers plain
/// (so later steps can match them), arrays (a repeated SD-PARAM) nested.
fn value(v: AnyValue) -> Value {
    match v.value {
        Some(any_value::Value::StringValue(s)) => Value::Str(s),
        Some(any_value::Value::IntValue(i)) => Value::Int(i),
        other => Value::Any(AnyValue { value: other }),
    }
}

#[cfg(test)]
mod tests {
    use crate::calendar::TimeZone;
    use crate::event::EventId;
    use crate::process::parse::{Format, Parser};
    use crate::process::{Event, Flow, Value};

    fn run(line: &str) -> (Flow, Event<'_>) {
        let parser = Parser {
            format: Format::Syslog(TimeZone::Utc),
            field: None,
            body_key: None,
        };
        let mut ev = Event::new(line, EventId([0; 16]));
        let flow = parser.apply(&mut ev);
        (flow, ev)
    }

    fn attr<'e>(ev: &'e Event<'_>, key: &str) -> Option<&'e Value> {
        ev.attrs.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// Attribute `key` as text (`None` if absent or not text).
    fn text<'e>(ev: &'e Event<'_>, key: &str) -> Option<&'e str> {
        match attr(ev, key)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// `line` through the parser, which must take it as syslog.
    fn parsed(line: &str) -> Event<'_> {
        let (flow, ev) = run(line);
        assert_eq!(flow, Flow::Next, "{line}");
        ev
    }

    #[test]
    fn a_file_line_without_pri_is_read_from_its_timestamp() {
        // Loghub's Linux sample, as syslogd wrote it.
        let ev = parsed("Jun 14 15:16:01 combo sshd(pam_unix)[19939]: check pass; user unknown");
        assert_eq!(ev.body, "check pass; user unknown");
        assert_eq!(text(&ev, "syslog.hostname"), Some("combo"));
        assert_eq!(text(&ev, "syslog.proc_id"), Some("19939"));
        assert_ne!(ev.time_unix_nano, 0);
        assert_eq!(ev.severity_number, 0, "no PRI, no severity");
    }

    #[test]
    fn a_received_message_keeps_its_severity_and_structured_data() {
        let ev =
            parsed("<165>1 2026-12-02T05:17:20.5Z gw app 42 ID7 [ex@32473 k=\"v\"] disk 91% full");
        assert_eq!(ev.body, "disk 91% full");
        assert_eq!(ev.severity_number, 10, "notice is INFO2");
        assert_eq!(ev.time_unix_nano, 1_796_188_640_500_000_000);
        assert_eq!(attr(&ev, "syslog.facility"), Some(&Value::Int(20)));
        assert_eq!(text(&ev, "syslog.sd.ex@32473.k"), Some("v"));
        assert_eq!(text(&ev, "syslog.msg_id"), Some("ID7"));
    }

    /// The step, the `syslog` source and the `journald` source share one
    /// table (the sources once said 24/23/22 and 21/19/18 for the same
    /// emerg/alert/crit).
    #[test]
    fn severities_are_the_data_model_appendix_ones() {
        for (pri, want) in [(8, 21), (9, 19), (10, 18), (11, 17), (15, 5)] {
            let line = format!("<{pri}>1 2026-12-02T05:17:20Z gw app - - - m");
            let ev = parsed(&line);
            assert_eq!(ev.severity_number, want, "<{pri}>");
            assert_eq!(
                Some((ev.severity_number, ev.severity_text.as_ref())),
                crate::syslog_format::severity::otel(pri & 7),
                "<{pri}>"
            );
        }
    }

    #[test]
    fn a_line_that_is_not_syslog_is_kept_whole() {
        let line = "127.0.0.1 - - [02/Dec/2026:05:17:20 +0000] \"GET / HTTP/1.1\" 200";
        let (flow, ev) = run(line);
        assert_eq!(flow, Flow::Unparsed);
        assert_eq!(ev.body, line);
        assert!(ev.attrs.is_empty());
    }
}
