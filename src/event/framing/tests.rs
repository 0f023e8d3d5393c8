use bytes::BytesMut;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;

use super::*;
use crate::event::{AttrValue, Envelope, FileOrigin, LogFields, Record};

/// A record as a file line writes it: a body, spliced attributes, and
/// (format 1) the observed time.
struct Line<'a> {
    body: &'a str,
    spliced: &'a [u8],
    observed: Option<u64>,
}

impl WriteRecord for Line<'_> {
    fn write_record(&self, out: &mut impl RawLogFields) {
        out.body(AttrValue::Str(self.body));
        out.attr("log.record.original_bytes", AttrValue::Int(9000));
        out.raw(self.spliced);
        if let Some(t) = self.observed {
            out.observed_time(t);
        }
    }
}

fn record(line: &Line<'_>) -> LogRecord {
    let mut r = LogRecord::default();
    r.body(AttrValue::Str(line.body));
    r.attr("log.record.original_bytes", AttrValue::Int(9000));
    r.merge(line.spliced).unwrap();
    r.observed_time_unix_nano = line.observed.unwrap_or(0);
    r
}

fn framed(line: &Line<'_>, own: &EventFields<'_>) -> Vec<u8> {
    let mut out = b"before".to_vec();
    let len = write_event(line, own, &mut out);
    assert_eq!(out.len(), 6 + 4 + len);
    assert_eq!(
        u32::from_le_bytes(out[6..10].try_into().unwrap()) as usize,
        len
    );
    // A `BytesMut` batch gets the same bytes.
    let mut b = BytesMut::from(&b"before"[..]);
    write_event(line, own, &mut b);
    assert_eq!(b[..], out[..]);
    out.split_off(10)
}

/// Each writer's shape of event (see the module doc) is what prost writes
/// for the same envelope.
#[test]
fn every_shape_of_event_is_what_prost_writes() {
    let mut spliced = Vec::new();
    let mut m = LogRecord::default();
    m.attr("log.file.path", AttrValue::Str("/var/log/x.log"));
    m.encode(&mut spliced).unwrap();
    let line = Line {
        body: "hello",
        spliced: &spliced,
        observed: None,
    };
    let id = EventId::for_file_line(7, 1, 100);

    // A journal entry: its id and its group.
    for group in [0, 1, 300] {
        let got = framed(
            &line,
            &EventFields {
                id: Some(id),
                group,
                ..Default::default()
            },
        );
        let want = Envelope {
            id: id.0.to_vec(),
            record: Some(Record::Log(record(&line))),
            group,
            ..Default::default()
        };
        assert_eq!(got, want.encode_to_vec(), "group {group}");
    }

    // A file line in format 2: offsets from its group's, group, delta.
    for (offset, end_offset, group, delta) in [(0, 0, 0, 0), (5, 151, 2, 1 << 40)] {
        let got = framed(
            &line,
            &EventFields {
                origin: Some(OriginFields {
                    offset,
                    end_offset,
                    ..Default::default()
                }),
                group,
                observed_delta: delta,
                ..Default::default()
            },
        );
        let want = Envelope {
            record: Some(Record::Log(record(&line))),
            origin: Some(FileOrigin {
                offset,
                end_offset,
                ..Default::default()
            }),
            group,
            observed_delta: delta,
            ..Default::default()
        };
        assert_eq!(got, want.encode_to_vec());
    }

    // A file line in format 1: everything stored, the source encoded once.
    let line = Line {
        observed: Some(1_700_000_000_000_000_000),
        ..line
    };
    let shared = Envelope {
        source: "app".into(),
        ..Default::default()
    }
    .encode_to_vec();
    let path = FileOrigin {
        path: "/var/log/x.log".into(),
        ..Default::default()
    }
    .encode_to_vec();
    for (fingerprint, generation) in [(0, 0), (u64::MAX, 3)] {
        let got = framed(
            &line,
            &EventFields {
                id: Some(id),
                shared: &shared,
                observed: line.observed,
                origin: Some(OriginFields {
                    path: &path,
                    fingerprint,
                    generation,
                    offset: 1 << 33,
                    end_offset: (1 << 33) + 6,
                }),
                ..Default::default()
            },
        );
        let want = Envelope {
            id: id.0.to_vec(),
            source: "app".into(),
            observed_time_unix_nano: 1_700_000_000_000_000_000,
            record: Some(Record::Log(record(&line))),
            origin: Some(FileOrigin {
                path: "/var/log/x.log".into(),
                fingerprint,
                generation,
                offset: 1 << 33,
                end_offset: (1 << 33) + 6,
            }),
            ..Default::default()
        };
        assert_eq!(got, want.encode_to_vec());
    }
}

/// Format 1 stores the observed time even when it is 0 (prost leaves a 0
/// out); a decoder reads the same envelope either way.
#[test]
fn format_1_stores_an_observed_time_of_0() {
    let line = Line {
        body: "",
        spliced: &[],
        observed: Some(0),
    };
    let got = framed(
        &line,
        &EventFields {
            observed: Some(0),
            ..Default::default()
        },
    );
    let want = Envelope {
        record: Some(Record::Log(record(&line))),
        ..Default::default()
    };
    assert_eq!(got.len(), want.encoded_len() + 2 * 9);
    assert_eq!(Envelope::decode(got.as_slice()).unwrap(), want);
}

/// Events encoded elsewhere are framed as the log's batches take them.
#[test]
fn encoded_events_are_framed_behind_their_length() {
    let mut out = Vec::new();
    put_encoded_event(b"abc", &mut out);
    put_encoded_event(b"", &mut out);
    assert_eq!(out, [3, 0, 0, 0, b'a', b'b', b'c', 0, 0, 0, 0]);
    let framed = bytes::Bytes::from(out);
    assert!(crate::seglog::Batch::from_framed(framed.clone(), 2).is_some());
    assert!(crate::seglog::Batch::from_framed(framed, 3).is_none());
}
