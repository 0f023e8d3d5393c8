use super::*;
use crate::sinks::test_events::text_log;

/// The envelope built the ordinary way, to compare with.
fn expected(body: &str, m: &LineMeta, path: &str) -> Envelope {
    let mut attributes = vec![
        kv(ATTR_PATH, any_value::Value::StringValue(path.into())),
        kv(
            ATTR_NAME,
            any_value::Value::StringValue(
                Path::new(path)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into(),
            ),
        ),
    ];
    if let Some(n) = m.truncated_from {
        attributes.push(kv(ATTR_TRUNCATED, any_value::Value::BoolValue(true)));
        attributes.push(kv(
            ATTR_ORIGINAL_BYTES,
            any_value::Value::IntValue(n as i64),
        ));
    }
    if m.invalid_utf8 {
        attributes.push(kv(ATTR_INVALID_UTF8, any_value::Value::BoolValue(true)));
    }
    Envelope {
        id: EventId::for_file_line(m.key, m.generation, m.offset)
            .0
            .to_vec(),
        source: "app".into(),
        observed_time_unix_nano: m.observed_ns,
        resource: Some(Resource {
            attributes: vec![kv(
                "host.name",
                any_value::Value::StringValue("box1".into()),
            )],
            ..Default::default()
        }),
        scope: Some(InstrumentationScope {
            name: SCOPE_NAME.into(),
            version: env!("CARGO_PKG_VERSION").into(),
            ..Default::default()
        }),
        record: Some(text_log(m.observed_ns, body, attributes)),
        origin: Some(FileOrigin {
            path: path.into(),
            fingerprint: m.key,
            generation: m.generation,
            offset: m.offset,
            end_offset: m.end,
        }),
        ..Default::default()
    }
}

#[test]
fn hand_encoding_decodes_to_the_same_envelope() {
    let enc = Encoder::new("app", "box1");
    let t = enc.template(Path::new("/var/log/app/current.log"));
    let cases = [
        (
            "hello",
            LineMeta {
                key: 7,
                generation: 0,
                offset: 0,
                end: 6,
                observed_ns: 1,
                truncated_from: None,
                invalid_utf8: false,
            },
        ),
        (
            "",
            LineMeta {
                key: 0,
                generation: 3,
                offset: 1 << 40,
                end: (1 << 40) + 1,
                observed_ns: u64::MAX,
                truncated_from: None,
                invalid_utf8: false,
            },
        ),
        (
            &"x".repeat(300),
            LineMeta {
                key: u64::MAX,
                generation: 1,
                offset: 5,
                end: 9999,
                observed_ns: 42,
                truncated_from: Some(9000),
                invalid_utf8: true,
            },
        ),
    ];
    let mut buf = Vec::new();
    for (body, m) in &cases {
        buf.clear();
        let n = enc.encode(&t, body, m, &mut buf);
        assert_eq!(u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize, n);
        assert_eq!(buf.len(), 4 + n);
        let got = Envelope::decode_event(&buf[4..]).unwrap();
        assert_eq!(got, expected(body, m, "/var/log/app/current.log"));
        let back = super::super::recovery::decode_origin(&buf[4..]).unwrap();
        assert_eq!(back.source, "app");
        let o = back.origin.unwrap();
        assert_eq!(
            (o.fingerprint, o.generation, o.offset, o.end_offset),
            (m.key, m.generation, m.offset, m.end)
        );
    }
}

/// Format 2 (a context of groups, each line only its own fields) reads
/// back through the `Decoder` as exactly the envelope format 1 stores,
/// id included, for lines of several files in one chunk.
#[test]
fn format_2_decodes_to_the_format_1_envelope() {
    use crate::event::{Context, Decoder};
    let enc = Encoder::new("app", "box1");
    let a = enc.template(Path::new("/var/log/app/current.log"));
    let b = enc.template(Path::new("/srv/other.log"));
    let meta = |key, generation, offset, end, observed_ns| LineMeta {
        key,
        generation,
        offset,
        end,
        observed_ns,
        truncated_from: None,
        invalid_utf8: false,
    };
    let long = "x".repeat(300);
    // (file, body, meta); each (file, key, generation) is a group whose
    // base is its first line's observed time.
    let lines: Vec<(&Template, &str, LineMeta)> = vec![
        (&a, "hello", meta(7, 0, 0, 6, 1_000)),
        (&a, "", meta(7, 0, 6, 7, 1_000)),
        (
            &b,
            "first line\n  continued\n  and more",
            meta(u64::MAX, 2, 1 << 40, (1 << 40) + 33, 5_000),
        ),
        (
            &a,
            &long,
            LineMeta {
                truncated_from: Some(9000),
                invalid_utf8: true,
                ..meta(7, 0, 7, 9008, 2_500)
            },
        ),
        (
            &a,
            "\u{fffd}bad",
            LineMeta {
                invalid_utf8: true,
                ..meta(7, 0, 9008, 9012, 900)
            },
        ),
        (
            &a,
            "cut",
            LineMeta {
                truncated_from: Some(1 << 33),
                ..meta(0, 1, 0, (1 << 33) + 1, u64::MAX)
            },
        ),
    ];
    let mut groups: Vec<(u64, u32, *const Template, Group)> = Vec::new();
    let mut own = Vec::new();
    let mut whole = Vec::new();
    for (t, body, m) in &lines {
        let gi = match groups
            .iter()
            .position(|g| (g.0, g.1, g.2) == (m.key, m.generation, *t as *const _))
        {
            Some(i) => i,
            None => {
                groups.push((
                    m.key,
                    m.generation,
                    *t as *const _,
                    enc.group(t, m.key, m.generation, m.offset, m.observed_ns),
                ));
                groups.len() - 1
            }
        };
        let base = groups[gi].3.observed_time_unix_nano;
        let offset_base = groups[gi].3.origin.as_ref().unwrap().offset;
        enc.encode_own(
            body,
            m,
            InGroup {
                group: gi as u32,
                offset_base,
                observed_delta: m.observed_ns.wrapping_sub(base),
            },
            &mut own,
        );
        enc.encode(t, body, m, &mut whole);
    }
    assert_eq!(groups.len(), 3);
    let ctx = bytes::Bytes::from(
        Context {
            groups: groups.into_iter().map(|g| g.3).collect(),
        }
        .encode_to_vec(),
    );
    let mut dec = Decoder::new();
    let (mut at_own, mut at_whole) = (0, 0);
    for (i, (_, body, m)) in lines.iter().enumerate() {
        let next = |buf: &[u8], at: &mut usize| {
            let n = u32::from_le_bytes(buf[*at..*at + 4].try_into().unwrap()) as usize;
            let e = buf[*at + 4..*at + 4 + n].to_vec();
            *at += 4 + n;
            e
        };
        let o = next(&own, &mut at_own);
        let w = next(&whole, &mut at_whole);
        let want = Envelope::decode_event(&w).unwrap();
        let got = dec.decode(&o, &ctx, i as u64).unwrap();
        assert_eq!(got.to_envelope(), want, "line {i}: {body:?}");
        assert_eq!(
            got.id,
            EventId::for_file_line(m.key, m.generation, m.offset)
        );
        // Format 1 read the same way.
        let one = dec.decode(&w, &bytes::Bytes::new(), 0).unwrap();
        assert_eq!(one.to_envelope(), want);
        // Nothing shared is stored per line.
        if body.is_empty() {
            assert!(o.len() <= 12, "{} bytes for an empty line", o.len());
        }
    }
    assert_eq!((at_own, at_whole), (own.len(), whole.len()));
}

/// What a 150-byte line at a realistic offset costs, before
/// compression: the bytes beyond the line's text, framing included.
#[test]
fn a_line_costs_few_bytes_beyond_its_text() {
    let enc = Encoder::new("app", "box1");
    let t = enc.template(Path::new("/tmp/holdfast-e2e.Xq3b9Z/input/app-00.log"));
    let body = "y".repeat(150);
    let m = LineMeta {
        key: 0x1234_5678_9abc_def0,
        generation: 0,
        offset: 100 << 20,
        end: (100 << 20) + 151,
        observed_ns: 1_700_000_000_000_000_000,
        truncated_from: None,
        invalid_utf8: false,
    };
    let mut own = Vec::new();
    enc.encode_own(
        &body,
        &m,
        InGroup {
            group: 0,
            // In the middle of a read of 256 KiB.
            offset_base: (100 << 20) - (128 << 10),
            observed_delta: 0,
        },
        &mut own,
    );
    let mut whole = Vec::new();
    enc.encode(&t, &body, &m, &mut whole);
    eprintln!(
        "a 150-byte line, framing included: format 1 {} bytes, format 2 {} bytes (and its share of the chunk's context, {} bytes per file)",
        whole.len(),
        own.len(),
        prost::Message::encoded_len(&crate::event::Context {
            groups: vec![enc.group(&t, m.key, m.generation, m.offset, m.observed_ns)]
        })
    );
    assert_eq!(own.len() - body.len(), 4 + 18);
    assert!(whole.len() - body.len() > 200, "{}", whole.len());
}
