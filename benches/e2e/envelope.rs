//! What an event in the log spends its bytes on, read from a stopped
//! agent's log, in either event format (before block compression).

use std::collections::HashMap;
use std::path::Path;

use prost::Message;

use crate::table::Table;

/// A length-delimited field: key, length, payload (nothing when empty).
fn ld(tag: u32, len: usize) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    if len == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(len as u64) + len
    }
}

fn varint_field(tag: u32, v: u64) -> usize {
    use prost::encoding::{encoded_len_varint, key_len};
    if v == 0 {
        0
    } else {
        key_len(tag) + encoded_len_varint(v)
    }
}

/// Sums over the sampled events, in bytes.
#[derive(Default)]
struct Sums {
    n: usize,
    /// Events sampled that were format 2.
    v2: usize,
    /// The events' own bytes (framing not included).
    total: usize,
    /// Their batch context's bytes, each context spread over the sampled
    /// events of its batch (an upper bound where a batch was sampled only
    /// in part).
    context: f64,
    text: usize,
    body_framing: usize,
    attrs: usize,
    record_other: usize,
    origin: usize,
    resource: usize,
    scope: usize,
    /// Format 1: id + source + time; format 2: group + observed delta.
    rest: usize,
    /// What format-1 events would take as format 2 (own bytes), for a log
    /// written while sources still wrote format 1.
    projected_own: usize,
}

/// What the bytes of an event are spent on, averaged over events sampled
/// across the (stopped) agent's log, read with the library's read-only
/// reader: the text of the line or record body against
/// the cost around it. `input`: the file source's directory (file lines),
/// or None (OTLP).
pub(crate) fn envelope_breakdown(table: &mut Table, log_dir: &Path, input: Option<&Path>) {
    use holdfast::event::{Envelope, Record};
    use opentelemetry_proto::tonic::common::v1::any_value;
    let Ok(log) = holdfast::seglog::Log::open_read_only(log_dir) else {
        return;
    };
    let st = log.stats();
    let mut s = Sums::default();
    let spots = 20u64;
    for k in 0..spots {
        let at = st.first_seq + (st.next_seq - st.first_seq) * k / spots;
        let Ok(events) = log.reader(at).read(200, 1 << 20) else {
            continue;
        };
        // Sampled events per batch context (by where its bytes are).
        let mut per_ctx: HashMap<(usize, usize), usize> = HashMap::new();
        for e in &events {
            if !e.context.is_empty() {
                *per_ctx
                    .entry((e.context.as_ptr() as usize, e.context.len()))
                    .or_default() += 1;
            }
        }
        for e in &events {
            // Format 1: the whole envelope; format 2: the event's own
            // fields (its record without what its group holds).
            let Ok(env) = Envelope::decode(&e.data[..]) else {
                continue;
            };
            let Some(Record::Log(r)) = &env.record else {
                continue;
            };
            s.n += 1;
            s.total += e.data.len();
            let text = match r.body.as_ref().and_then(|b| b.value.as_ref()) {
                Some(any_value::Value::StringValue(t)) => t.len(),
                _ => 0,
            };
            let body = r.body.as_ref().map_or(0, |b| ld(5, b.encoded_len()));
            let attrs: usize = r.attributes.iter().map(|a| ld(6, a.encoded_len())).sum();
            let rec = ld(8, r.encoded_len());
            s.text += text;
            s.body_framing += body - text;
            s.attrs += attrs;
            s.record_other += rec - body - attrs;
            let origin = env.origin.as_ref().map_or(0, |o| ld(11, o.encoded_len()));
            s.origin += origin;
            if e.context.is_empty() {
                s.resource += env.resource.as_ref().map_or(0, |r| ld(4, r.encoded_len()));
                s.scope += env.scope.as_ref().map_or(0, |r| ld(6, r.encoded_len()));
                s.rest += ld(1, env.id.len()) + ld(2, env.source.len()) + 9;
                // As format 2: the record without what the group holds
                // (a file line's path and name attributes, its observed
                // time), the origin's offsets, no id, source, resource or
                // scope; one group per file or per resource and scope.
                let own_rec = match &env.origin {
                    Some(_) => {
                        let shared: usize = r
                            .attributes
                            .iter()
                            .filter(|a| a.key == "log.file.path" || a.key == "log.file.name")
                            .map(|a| ld(6, a.encoded_len()))
                            .sum();
                        let observed = if r.observed_time_unix_nano != 0 { 9 } else { 0 };
                        r.encoded_len() - shared - observed
                    }
                    None => r.encoded_len(),
                };
                let own_origin = env.origin.as_ref().map_or(0, |o| {
                    let n = varint_field(4, o.offset) + varint_field(5, o.end_offset);
                    1 + prost::encoding::encoded_len_varint(n as u64) + n
                });
                s.projected_own += ld(8, own_rec) + own_origin;
            } else {
                s.v2 += 1;
                s.rest += e.data.len() - rec - origin;
                let seen = per_ctx
                    .get(&(e.context.as_ptr() as usize, e.context.len()))
                    .copied()
                    .unwrap_or(1);
                s.context += e.context.len() as f64 / seen as f64;
            }
        }
    }
    if s.n == 0 {
        return;
    }
    let avg = |x: usize| x as f64 / s.n as f64;
    let what = if input.is_some() {
        "a file line's"
    } else {
        "an OTLP record's"
    };
    if s.v2 == s.n {
        table.detail(format!(
            "  {what} event in format 2 ({} sampled across the log; before block compression): {:.0} bytes own + 4 framing \
             + {:.1} of its batch's context = body text {:.0} + {:.0} around it: own record attributes {:.0}, \
             record's other fields {:.0}, origin offsets {:.0}, group + observed delta {:.0}, body framing {:.0}",
            s.n,
            avg(s.total),
            s.context / s.n as f64,
            avg(s.text),
            avg(s.total) - avg(s.text),
            avg(s.attrs),
            avg(s.record_other),
            avg(s.origin),
            avg(s.rest),
            avg(s.body_framing),
        ));
        return;
    }
    if s.v2 > 0 {
        table.detail(format!(
            "  {what} events: {} of {} sampled are format 2 (a log of both formats): {:.0} bytes own on average",
            s.v2,
            s.n,
            avg(s.total)
        ));
        return;
    }
    let projected = format!(
        "; as format 2 the same events would take {:.0} bytes own + 4 framing + their share of a batch context",
        avg(s.projected_own)
    );
    let Some(input) = input else {
        table.detail(format!(
            "  an OTLP record's envelope ({} sampled across what is left of the log): {:.0} bytes = body text {:.0} + {:.0} around it: \
             resource (repeated in every record) {:.0}, scope {:.0}, record attributes {:.0}, \
             record's other fields (times, severity, trace and span ids, flags) {:.0}, id + source + time {:.0}, body framing {:.0}{projected}",
            s.n,
            avg(s.total),
            avg(s.text),
            avg(s.total) - avg(s.text),
            avg(s.resource),
            avg(s.scope),
            avg(s.attrs),
            avg(s.record_other),
            avg(s.rest),
            avg(s.body_framing),
        ));
        return;
    };
    table.detail(format!(
        "  a file line's envelope ({} sampled across the log): {:.0} bytes = line text {:.0} + {:.0} around it: \
         record attributes log.file.path + log.file.name {:.0}, origin (path again, fingerprint, offsets) {:.0}, \
         scope {:.0}, resource {:.0}, id + source + time {:.0}, record's other fields {:.0}, body framing {:.0} \
         (the input path, {} bytes, is carried twice){projected}",
        s.n,
        avg(s.total),
        avg(s.text),
        avg(s.total) - avg(s.text),
        avg(s.attrs),
        avg(s.origin),
        avg(s.scope),
        avg(s.resource),
        avg(s.rest),
        avg(s.record_other),
        avg(s.body_framing),
        input.join("app-00.log").to_string_lossy().len()
    ));
}
