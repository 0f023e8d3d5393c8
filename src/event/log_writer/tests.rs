use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;

use super::*;
use crate::event::fields::tests::{bodies, fill, nested};
use crate::event::{Envelope, Record};

/// The writer's bytes are prost's for the same envelope, for every body
/// and value kind, and group/delta zero or not.
#[test]
fn writes_what_prost_writes() {
    let any = nested();
    let long = [b'x'; 300];
    let mut cases: Vec<(AttrValue<'_>, u32, u64)> =
        bodies().into_iter().map(|(b, _)| (b, 0, 0)).collect();
    cases.push((AttrValue::Text(b"\xff"), 3, 1_000_000));
    cases.push((AttrValue::Text(&long), 200, u64::MAX));
    cases.push((AttrValue::Any(&any), 1, 1));
    for (body, group, delta) in cases {
        let mut w = LogRecordWriter::default();
        w.start();
        fill(body, &any, &mut w);
        let mut mark = Vec::new();
        let mut m = LogRecord::default();
        m.attr("r", AttrValue::Int(7));
        m.encode(&mut mark).unwrap();
        w.raw(&mark);
        let mut framed = Vec::new();
        let own = EventFields {
            group,
            observed_delta: delta,
            ..Default::default()
        };
        let len = w.finish(&own, &mut framed);
        assert_eq!(framed.len(), 4 + len);
        assert_eq!(
            u32::from_le_bytes(framed[..4].try_into().unwrap()) as usize,
            len
        );

        let mut r = LogRecord::default();
        fill(body, &any, &mut r);
        r.attr("r", AttrValue::Int(7));
        let want = Envelope {
            record: Some(Record::Log(r)),
            group,
            observed_delta: delta,
            ..Default::default()
        };
        assert_eq!(framed[4..], want.encode_to_vec()[..], "body {body:?}");
    }
}
