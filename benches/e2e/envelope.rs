//! What an event's envelope in the log spends its bytes on, read from a
//! stopped agent's log.

use std::path::Path;

use prost::Message;

use crate::table::Table;

/// What the bytes of an envelope are spent on, averaged over events sampled
/// across the (stopped) agent's log, read with the library's read-only
/// reader: the text of the line or record body against the cost around it.
/// `input`: the file source's directory (file lines), or None (OTLP).
pub(crate) fn envelope_breakdown(table: &mut Table, log_dir: &Path, input: Option<&Path>) {
    use holdfast::event::{Envelope, Record};
    use opentelemetry_proto::tonic::common::v1::any_value;
    use prost::encoding::{encoded_len_varint, key_len};
    let Ok(log) = holdfast::seglog::Log::open_read_only(log_dir) else {
        return;
    };
    let st = log.stats();
    // A length-delimited field: key, length, payload.
    let ld = |tag: u32, len: usize| {
        if len == 0 {
            0
        } else {
            key_len(tag) + encoded_len_varint(len as u64) + len
        }
    };
    // text, body field beyond the text, attributes, other record fields,
    // origin, resource, scope, id + source + time
    let mut parts = [0usize; 8];
    let (mut n, mut total) = (0usize, 0usize);
    let spots = 20u64;
    for k in 0..spots {
        let at = st.first_seq + (st.next_seq - st.first_seq) * k / spots;
        let Ok(events) = log.reader(at).read(200, 1 << 20) else {
            continue;
        };
        for e in &events {
            let Ok(env) = Envelope::decode(&e.data[..]) else {
                continue;
            };
            let Some(Record::Log(r)) = &env.record else {
                continue;
            };
            n += 1;
            total += e.data.len();
            let text = match r.body.as_ref().and_then(|b| b.value.as_ref()) {
                Some(any_value::Value::StringValue(t)) => t.len(),
                _ => 0,
            };
            let body = r.body.as_ref().map_or(0, |b| ld(5, b.encoded_len()));
            let attrs: usize = r.attributes.iter().map(|a| ld(6, a.encoded_len())).sum();
            parts[0] += text;
            parts[1] += body - text;
            parts[2] += attrs;
            parts[3] += ld(8, r.encoded_len()) - body - attrs;
            parts[4] += env.origin.as_ref().map_or(0, |o| ld(11, o.encoded_len()));
            parts[5] += env.resource.as_ref().map_or(0, |r| ld(4, r.encoded_len()));
            parts[6] += env.scope.as_ref().map_or(0, |r| ld(6, r.encoded_len()));
            parts[7] += ld(1, env.id.len()) + ld(2, env.source.len()) + 9;
        }
    }
    if n == 0 {
        return;
    }
    let avg = |x: usize| x as f64 / n as f64;
    let Some(input) = input else {
        table.detail(format!(
            "  an OTLP record's envelope ({n} sampled across what is left of the log): {:.0} bytes = body text {:.0} + {:.0} around it: \
             resource (repeated in every record) {:.0}, scope {:.0}, record attributes {:.0}, \
             record's other fields (times, severity, trace and span ids, flags) {:.0}, id + source + time {:.0}, body framing {:.0}",
            avg(total),
            avg(parts[0]),
            avg(total) - avg(parts[0]),
            avg(parts[5]),
            avg(parts[6]),
            avg(parts[2]),
            avg(parts[3]),
            avg(parts[7]),
            avg(parts[1]),
        ));
        return;
    };
    table.detail(format!(
        "  a file line's envelope ({n} sampled across the log): {:.0} bytes = line text {:.0} + {:.0} around it: \
         record attributes log.file.path + log.file.name {:.0}, origin (path again, fingerprint, offsets) {:.0}, \
         scope {:.0}, resource {:.0}, id + source + time {:.0}, record's other fields {:.0}, body framing {:.0} \
         (the input path, {} bytes, is carried twice)",
        avg(total),
        avg(parts[0]),
        avg(total) - avg(parts[0]),
        avg(parts[2]),
        avg(parts[4]),
        avg(parts[6]),
        avg(parts[5]),
        avg(parts[7]),
        avg(parts[3]),
        avg(parts[1]),
        input.join("app-00.log").to_string_lossy().len()
    ));
}
