/*!
Parsed syslog messages → the log's format-2 events, many per append.

| syslog | event |
|---|---|
| HOSTNAME | resource `host.name` (one context group per sender address and hostname) |
| sender's IP address | group attribute `client.address` |
| TIMESTAMP | `time_unix_nano` (absent when the message has none) |
| PRI | `syslog.facility`, `syslog.severity` (numbers); OpenTelemetry `severity_number` and `severity_text` (`err`, `warning`, …) |
| APP-NAME / TAG, PROCID / pid, MSGID | `syslog.app_name`, `syslog.proc_id`, `syslog.msg_id` |
| STRUCTURED-DATA | `syslog.sd.<SD-ID>.<PARAM-NAME>` (a string; an array when a name repeats) |
| MSG | body: a string, or bytes when it is not UTF-8 |
| not parseable | the whole message as body, `syslog.parse_error` says why |
| cut at `max_message_size` | `log.record.truncated`, `log.record.original_bytes` |
| TLS client certificate (verified) | `tls.client.subject` (its subject, RFC 4514) |

Ids follow the `otlp_http` source: the network gives nothing to re-read,
so each batch has one random seed in its context and an event's id is
derived from the seed and its index ([`EventId::derived`]). A batch
appended again after a refusal is the same bytes, so its ids do not change.
*/

use std::net::IpAddr;

use bytes::{Bytes, BytesMut};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message as _;

use crate::event::{AttrValue, Context, EventFields, EventId, Group, LogFields, LogRecordWriter};
use crate::seglog::Batch;
use crate::syslog_format::parse::{self, Format, ParseOptions};
use crate::syslog_format::record::write;

/// The instrumentation scope name of syslog records.
pub const SCOPE_NAME: &str = "holdfast.sources.syslog";
/// The marks of a cut message, named as the `file` source names them.
pub const ATTR_TRUNCATED: &str = "log.record.truncated";
pub const ATTR_ORIGINAL_BYTES: &str = "log.record.original_bytes";
/// The subject of the client certificate the sender presented (the
/// OpenTelemetry semantic-convention name).
pub const ATTR_CLIENT_SUBJECT: &str = "tls.client.subject";

/// One message as received.
#[derive(Debug, Clone, Copy)]
pub struct Message<'a> {
    pub bytes: &'a [u8],
    pub peer: IpAddr,
    /// The subject of the sender's verified TLS client certificate.
    pub client_subject: Option<&'a str>,
    /// The length the sender gave or sent, when `bytes` was cut short.
    pub original_len: Option<usize>,
    pub observed_ns: u64,
}

/// What one group of a batch holds besides its hostname (twice: the search
/// key and the resource): the `Group` and its strings and vectors, the
/// slot in `groups`, and the slack of both vectors: some 600 bytes by the
/// sizes of the structs and a dozen small allocations; rounded up.
pub(super) const GROUP_BYTES: usize = 1 << 10;

/// The events of one append being built.
pub struct Pending {
    source: String,
    parse: ParseOptions,
    /// `u32` length + event, as [`Batch::push`] frames them.
    framed: BytesMut,
    count: u32,
    /// Sender and hostname of each group of `context`, by index: few per
    /// batch, so a search beats hashing (which would copy the hostname).
    groups: Vec<(IpAddr, Vec<u8>)>,
    context: Context,
    /// What the groups hold in memory, counted in [`Pending::bytes`] so
    /// that the batch size bounds them too: a sender that gives every
    /// message its own hostname fills a batch with groups, not events.
    group_bytes: usize,
    seed: [u8; 16],
    observed_base: u64,
    writer: LogRecordWriter,
    /// Structured-data attribute names are built here.
    key: String,
    /// Messages kept whole because they did not parse.
    pub parse_errors: u64,
    pub truncated: u64,
}

/// A finished batch, kept as bytes so it can be appended again.
#[derive(Debug, Clone)]
pub struct Ready {
    framed: Bytes,
    context: Bytes,
    pub count: u32,
}

impl Ready {
    pub fn batch(&self) -> Batch {
        Batch::from_framed_trusted(self.framed.clone(), self.count)
            .with_context(self.context.clone())
    }

    /// Event bytes without framing (what `holdfast_source_bytes` counts).
    pub fn event_bytes(&self) -> u64 {
        (self.framed.len() - 4 * self.count as usize) as u64
    }
}

impl Pending {
    pub fn new(source: &str, parse: ParseOptions) -> Pending {
        Pending {
            source: source.to_string(),
            parse,
            framed: BytesMut::new(),
            count: 0,
            groups: Vec::new(),
            context: Context::default(),
            group_bytes: 0,
            seed: EventId::random().0,
            observed_base: 0,
            writer: LogRecordWriter::default(),
            key: String::new(),
            parse_errors: 0,
            truncated: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes the events take so far, framing included, and the groups
    /// they share.
    pub fn bytes(&self) -> usize {
        self.framed.len() + self.group_bytes
    }

    /// Parses `m` and adds it as one event.
    pub fn push(&mut self, m: Message<'_>) {
        if self.count == 0 {
            self.observed_base = m.observed_ns;
        }
        let opts = ParseOptions {
            now_unix: (m.observed_ns / 1_000_000_000) as i64,
            ..self.parse
        };
        let p = parse::parse(m.bytes, &opts);
        if p.format == Format::Unparsed {
            self.parse_errors += 1;
        }
        let group = self.group(canonical(m.peer), p.hostname.unwrap_or_default());
        self.writer.start();
        write(&p, &mut self.writer, &mut self.key);
        if let Some(len) = m.original_len {
            self.truncated += 1;
            self.writer.attr(ATTR_TRUNCATED, AttrValue::Bool(true));
            self.writer
                .attr(ATTR_ORIGINAL_BYTES, AttrValue::Int(len as i64));
        }
        if let Some(subject) = m.client_subject {
            self.writer
                .attr(ATTR_CLIENT_SUBJECT, AttrValue::Str(subject));
        }
        let delta = m.observed_ns.saturating_sub(self.observed_base);
        let own = EventFields {
            group,
            observed_delta: delta,
            ..Default::default()
        };
        self.writer.finish(&own, &mut self.framed);
        self.count += 1;
    }

    fn group(&mut self, peer: IpAddr, hostname: &[u8]) -> u32 {
        if let Some(g) = self
            .groups
            .iter()
            .rposition(|(p, h)| *p == peer && h == hostname)
        {
            return g as u32;
        }
        let g = self.context.groups.len() as u32;
        let resource = (!hostname.is_empty()).then(|| Resource {
            attributes: vec![kv(
                "host.name",
                any_value::Value::StringValue(String::from_utf8_lossy(hostname).into_owned()),
            )],
            ..Default::default()
        });
        self.context.groups.push(Group {
            source: self.source.clone(),
            resource,
            scope: Some(InstrumentationScope {
                name: SCOPE_NAME.to_string(),
                ..Default::default()
            }),
            attributes: vec![kv(
                "client.address",
                any_value::Value::StringValue(peer.to_string()),
            )],
            id_seed: self.seed.to_vec(),
            observed_time_unix_nano: self.observed_base,
            record_observed: true,
            ..Default::default()
        });
        self.groups.push((peer, hostname.to_vec()));
        self.group_bytes += GROUP_BYTES + 2 * hostname.len();
        g
    }

    /// The batch so far, ready to append; this one starts over empty with
    /// a new seed.
    pub fn take(&mut self) -> Ready {
        let ready = Ready {
            framed: self.framed.split().freeze(),
            context: Bytes::from(self.context.encode_to_vec()),
            count: self.count,
        };
        self.count = 0;
        self.groups.clear();
        self.context.groups.clear();
        self.group_bytes = 0;
        self.seed = EventId::random().0;
        ready
    }
}

/// An IPv4 sender on a dual-stack socket as plain IPv4.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calendar::TimeZone;
    use crate::event::{Decoder, Record};
    use crate::syslog_format::record::ATTR_PARSE_ERROR;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;

    fn pending() -> Pending {
        Pending::new(
            "gw",
            ParseOptions {
                time_zone: TimeZone::Utc,
                now_unix: 0,
            },
        )
    }

    fn text(b: &[u8]) -> any_value::Value {
        any_value::Value::StringValue(String::from_utf8_lossy(b).into_owned())
    }

    fn attr<'a>(r: &'a LogRecord, key: &str) -> Option<&'a any_value::Value> {
        r.attributes
            .iter()
            .find(|a| a.key == key)
            .and_then(|a| a.value.as_ref()?.value.as_ref())
    }

    /// A sender that names a new host in every message fills the batch
    /// with groups: their memory counts toward the batch size, so it is
    /// bounded with the events.
    #[test]
    fn groups_count_toward_the_batch_size() {
        let mut p = pending();
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        for i in 0..100 {
            let line = format!("<13>Feb  5 17:32:18 host{i} app: x");
            p.push(Message {
                bytes: line.as_bytes(),
                peer,
                original_len: None,
                observed_ns: 1,
                client_subject: None,
            });
        }
        assert!(p.bytes() >= 100 * GROUP_BYTES, "{}", p.bytes());
        let same = p.bytes();
        p.push(Message {
            bytes: b"<13>Feb  5 17:32:18 host7 app: again",
            peer,
            original_len: None,
            observed_ns: 2,
            client_subject: None,
        });
        assert!(
            p.bytes() - same < GROUP_BYTES,
            "a known group costs no more"
        );
        p.take();
        assert_eq!(p.bytes(), 0);
    }

    #[test]
    fn events_decode_with_their_group_and_stable_ids() {
        let mut p = pending();
        let peer: IpAddr = "192.0.2.7".parse().unwrap();
        let t0 = 1_796_191_200_000_000_000;
        for (i, line) in [
            &br#"<165>1 2003-10-11T22:14:15.003Z sw1 evntslog - ID47 [x@1 a="1" a="2"] hi"#[..],
            b"<13>Feb  5 17:32:18 sw2 app: x",
            b"\xff\xfe binary",
        ]
        .into_iter()
        .enumerate()
        {
            p.push(Message {
                bytes: line,
                peer,
                client_subject: None,
                original_len: (i == 1).then_some(9000),
                observed_ns: t0 + i as u64,
            });
        }
        assert_eq!(p.parse_errors, 1);
        let ready = p.take();
        assert!(p.is_empty());
        let batch = ready.batch();
        assert_eq!(batch.len(), 3);
        let framed = ready.framed.clone();
        let mut dec = Decoder::new();
        let mut at = 0;
        let mut ids = Vec::new();
        for i in 0..3u64 {
            let len = u32::from_le_bytes(framed[at..at + 4].try_into().unwrap()) as usize;
            let ev = dec
                .decode(&framed[at + 4..at + 4 + len], &ready.context, i)
                .unwrap();
            at += 4 + len;
            ids.push(ev.id);
            assert_eq!(ev.source(), "gw");
            assert_eq!(ev.env.observed_time_unix_nano, t0 + i);
            let Some(Record::Log(r)) = &ev.env.record else {
                panic!("a log record")
            };
            assert_eq!(r.observed_time_unix_nano, t0 + i);
            let host = ev
                .resource()
                .and_then(|r| r.attributes.first())
                .and_then(|a| a.value.as_ref()?.value.clone());
            match i {
                0 => {
                    assert_eq!(host, Some(any_value::Value::StringValue("sw1".into())));
                    assert_eq!(
                        (r.severity_number, r.severity_text.as_str()),
                        (10, "notice")
                    );
                    assert!(matches!(
                        attr(r, "syslog.sd.x@1.a"),
                        Some(any_value::Value::ArrayValue(a)) if a.values.len() == 2
                    ));
                }
                1 => {
                    assert_eq!(host, Some(any_value::Value::StringValue("sw2".into())));
                    assert_eq!(
                        attr(r, ATTR_TRUNCATED),
                        Some(&any_value::Value::BoolValue(true))
                    );
                    assert_eq!(attr(r, "syslog.app_name"), Some(&text(b"app")));
                }
                _ => {
                    assert_eq!(host, None);
                    assert!(attr(r, ATTR_PARSE_ERROR).is_some());
                    assert_eq!(
                        r.body.as_ref().unwrap().value,
                        Some(any_value::Value::BytesValue(b"\xff\xfe binary".to_vec()))
                    );
                    assert_eq!(
                        ev.shared_attributes()[0].value.as_ref().unwrap().value,
                        Some(text(b"192.0.2.7"))
                    );
                }
            }
        }
        ids.dedup();
        assert_eq!(ids.len(), 3);
    }
}
