use opentelemetry_proto::tonic::logs::v1::LogRecord;

use super::*;
use crate::event::{Decoder, Envelope, Record};

const CURSOR: &str = "s=483a5a22b1704c33a6a5eb33a8e77067;i=1f;b=0123;m=3e8;t=60a;x=ff";

fn fields(extra: &[&str], set: &[(&str, &[u8])]) -> Fields {
    let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
    let mut f = Fields::new(&extra);
    for (n, v) in set {
        let slot = f.slot(n.as_bytes()).unwrap();
        f.set(slot, v);
    }
    f
}

/// The hand-written bytes are those prost writes for the same envelope.
#[test]
fn events_are_the_envelopes_prost_would_write() {
    let mut f = fields(
        &["CUSTOM"],
        &[
            ("MESSAGE", b"hello"),
            ("PRIORITY", b"3"),
            ("_HOSTNAME", b"box"),
            ("_PID", b"42"),
            ("_SYSTEMD_UNIT", b"ssh.service"),
            ("CUSTOM", b"\xff"),
        ],
    );
    f.realtime_us = 1_700_000_000_000_001;
    let id = entry_id(CURSOR, || None);
    let mut enc = BatchEncoder::new("journal", 5);
    let mut out = Vec::new();
    enc.encode(&f, &id, &mut out);
    let want = Envelope {
        id: id.0.to_vec(),
        record: Some(Record::Log(LogRecord {
            time_unix_nano: 1_700_000_000_000_001_000,
            severity_number: 17,
            severity_text: "err".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue("hello".into())),
            }),
            attributes: [
                (
                    "_SYSTEMD_UNIT",
                    any_value::Value::StringValue("ssh.service".into()),
                ),
                ("_PID", any_value::Value::IntValue(42)),
                ("CUSTOM", any_value::Value::BytesValue(vec![0xff])),
            ]
            .map(|(key, v)| KeyValue {
                key: key.into(),
                value: Some(AnyValue { value: Some(v) }),
                ..Default::default()
            })
            .to_vec(),
            ..Default::default()
        })),
        ..Default::default()
    }
    .encode_to_vec();
    assert_eq!(out[4..], want[..]);
    assert_eq!(
        u32::from_le_bytes(out[..4].try_into().unwrap()) as usize,
        want.len()
    );

    // A second host is a second group; a binary, cut message is bytes and
    // marked.
    let mut g = fields(&[], &[("MESSAGE", b"a\x00\xfe"), ("_HOSTNAME", b"other")]);
    g.truncated = true;
    let start = out.len();
    enc.encode(&g, &id, &mut out);
    let ctx = bytes::Bytes::from(enc.context());
    let mut d = Decoder::new();
    let first = d.decode(&out[4..start], &ctx, 0).unwrap();
    assert_eq!(first.id, id);
    assert_eq!(first.source(), "journal");
    assert_eq!(first.observed_time_unix_nano(), 5);
    let j = first.to_json(0);
    assert_eq!(j["record"]["body"]["stringValue"], "hello");
    assert_eq!(
        j["resource"]["attributes"][0]["value"]["stringValue"],
        "box"
    );
    let second = d.decode(&out[start + 4..], &ctx, 1).unwrap().to_json(0);
    assert_eq!(
        second["resource"]["attributes"][0]["value"]["stringValue"],
        "other"
    );
    assert!(
        second["record"]["body"]["bytesValue"].is_string(),
        "{second}"
    );
    assert_eq!(second["record"]["attributes"][0]["key"], ATTR_TRUNCATED);
}

#[test]
fn ids_and_positions() {
    // Stable ids: those the journalctl-based reader gave (its inputs were
    // the same bytes), one per seqnum.
    let id = entry_id(CURSOR, || None);
    let mut input = b"hf-jseq1".to_vec();
    input.extend_from_slice(b"483a5a22b1704c33a6a5eb33a8e77067");
    input.extend_from_slice(&0x1fu64.to_le_bytes());
    assert_eq!(id.0, xxhash_rust::xxh3::xxh3_128(&input).to_le_bytes());
    assert_ne!(
        entry_id("s=483a5a22b1704c33a6a5eb33a8e77067;i=20", || None),
        id
    );
    // Without a seqnum, boot id and monotonic time identify it.
    let by_boot = entry_id("opaque", || Some((b"b1".to_vec(), 77)));
    let by_cursor = entry_id("opaque", || None);
    assert_ne!(by_boot, by_cursor);

    let p = Position::of_cursor;
    assert!(p("s=a;i=2").holds("s=a;i=1"));
    assert!(!p("s=a;i=2").holds("s=a;i=3"));
    assert!(!p("s=a;i=2").holds("s=b;i=1"));
    assert!(p("x").holds("x"));
    assert_eq!(severity::otel(8), None);
    let f = fields(&["_PID", "MESSAGE", "X"], &[]);
    assert_eq!(f.attrs.len(), DEFAULT_FIELDS.len() + 1);
    assert_eq!(f.slot(b"X"), Some(FIRST_ATTR + DEFAULT_FIELDS.len()));
    assert_eq!(f.slot(b"Y"), None);
}
