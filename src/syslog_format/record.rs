//! A parsed syslog message as log record fields: the one mapping that the
//! `syslog` source (writing straight into a batch through
//! [`LogRecordWriter`](crate::event::LogRecordWriter)) and the `syslog`
//! parse step (building a [`LogRecord`] value) both go through, so the two
//! cannot differ. What a record gets from the message is the table in
//! `sources/syslog/mapping.rs`; the group fields (hostname as resource,
//! sender) are the source's.

use opentelemetry_proto::tonic::logs::v1::LogRecord;

use super::parse::Parsed;
use super::severity;
use crate::event::{AttrValue, LogFields};

/// Why a message was kept whole ([`Parsed::error`]).
pub const ATTR_PARSE_ERROR: &str = "syslog.parse_error";

/// The log record of a parsed message (group fields aside).
pub fn record(p: &Parsed<'_>) -> LogRecord {
    let mut r = LogRecord::default();
    write(p, &mut r, &mut String::new());
    r
}

/// Writes the record of a parsed message (group fields aside) to `out`;
/// `key` is a buffer for structured-data attribute names.
pub fn write(p: &Parsed<'_>, out: &mut impl LogFields, key: &mut String) {
    out.time(p.timestamp_ns.map_or(0, |t| t.max(0) as u64));
    if let Some((n, t)) = p.severity.and_then(severity::otel) {
        out.severity(n, t);
    }
    out.body(AttrValue::Text(p.message));
    if let (Some(f), Some(s)) = (p.facility, p.severity) {
        out.attr("syslog.facility", AttrValue::Int(f.into()));
        out.attr("syslog.severity", AttrValue::Int(s.into()));
    }
    for (name, v) in [
        ("syslog.app_name", p.app_name),
        ("syslog.proc_id", p.proc_id),
        ("syslog.msg_id", p.msg_id),
    ] {
        if let Some(v) = v {
            out.attr(name, AttrValue::Str(&String::from_utf8_lossy(v)));
        }
    }
    for sd in &p.structured_data {
        for (i, (name, value)) in sd.params.iter().enumerate() {
            // A repeated SD-PARAM is one attribute, an array of its values
            // in the order sent, written where the name first appears.
            if sd.params[..i].iter().any(|(n, _)| n == name) {
                continue;
            }
            key.clear();
            key.push_str("syslog.sd.");
            key.push_str(sd.id);
            key.push('.');
            key.push_str(name);
            let repeats = sd.params[i + 1..].iter().any(|(n, _)| n == name);
            if repeats {
                let values: Vec<&str> = sd.params[i..]
                    .iter()
                    .filter(|(n, _)| n == name)
                    .map(|(_, v)| v.as_ref())
                    .collect();
                out.attr_strs(key, &values);
            } else {
                out.attr(key, AttrValue::Str(value));
            }
        }
    }
    if let Some(e) = p.error {
        out.attr(ATTR_PARSE_ERROR, AttrValue::Str(e));
    }
}
