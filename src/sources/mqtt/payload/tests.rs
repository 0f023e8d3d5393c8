use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message as _;

use super::*;

fn msg<'a>(payload: &'a [u8], props: &'a [(String, String)]) -> Message<'a> {
    Message {
        topic: b"devices/d1/telemetry",
        payload,
        dup: false,
        user_properties: props,
        content_type: None,
    }
}

/// Every record of `req`, in order.
fn records(req: &ExportLogsServiceRequest) -> Vec<&LogRecord> {
    req.resource_logs
        .iter()
        .flat_map(|r| &r.scope_logs)
        .flat_map(|s| &s.log_records)
        .collect()
}

fn attr<'a>(r: &'a LogRecord, key: &str) -> Option<&'a any_value::Value> {
    r.attributes
        .iter()
        .find(|a| a.key == key)
        .and_then(|a| a.value.as_ref()?.value.as_ref())
}

fn text(s: &str) -> any_value::Value {
    any_value::Value::StringValue(s.into())
}

#[test]
fn a_json_object_becomes_attributes_beside_the_topic() {
    let mut g = Gathered::new(Format::Json, 1 << 20);
    let added = g.push(
        &msg(
            br#"{"t": 21.5, "unit": "C", "ok": true, "tags": {"a": 1}, "n": null}"#,
            &[],
        ),
        7,
    );
    assert_eq!(
        added,
        Added {
            records: 1,
            invalid: None
        }
    );
    let req = g.take();
    let r = records(&req);
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].body, None, "the object is the attributes");
    assert_eq!(r[0].observed_time_unix_nano, 7);
    assert_eq!(attr(r[0], ATTR_TOPIC), Some(&text("devices/d1/telemetry")));
    assert_eq!(attr(r[0], "t"), Some(&any_value::Value::DoubleValue(21.5)));
    assert_eq!(attr(r[0], "unit"), Some(&text("C")));
    assert_eq!(attr(r[0], "ok"), Some(&any_value::Value::BoolValue(true)));
    assert!(matches!(
        attr(r[0], "tags"),
        Some(any_value::Value::KvlistValue(_))
    ));
    assert_eq!(
        attr(r[0], "n"),
        None,
        "null is skipped, as the json step does"
    );
    assert_eq!(attr(r[0], ATTR_DUP), None);
    assert_eq!(
        req.resource_logs[0].scope_logs[0]
            .scope
            .as_ref()
            .map(|s| s.name.as_str()),
        Some(SCOPE_NAME)
    );
}

#[test]
fn what_is_not_a_json_object_is_kept_whole_and_marked() {
    let mut g = Gathered::new(Format::Json, 1 << 20);
    for (payload, kind, says) in [
        (&b"{\"t\": 21"[..], Invalid::Json, "not JSON"),
        (b"[1, 2]", Invalid::Json, "not an object"),
        (b"\xff{}", Invalid::Utf8, "not UTF-8"),
    ] {
        let added = g.push(&msg(payload, &[]), 1);
        let (k, why) = added.invalid.expect("invalid");
        assert_eq!(k, kind);
        assert!(why.contains(says), "{why}");
    }
    let req = g.take();
    let r = records(&req);
    assert_eq!(r.len(), 3);
    assert_eq!(
        r[0].body.as_ref().and_then(|b| b.value.clone()),
        Some(text("{\"t\": 21"))
    );
    assert!(
        matches!(attr(r[0], ATTR_PAYLOAD_ERROR), Some(any_value::Value::StringValue(s)) if s.contains("not JSON"))
    );
    assert_eq!(
        r[2].body.as_ref().and_then(|b| b.value.clone()),
        Some(any_value::Value::BytesValue(b"\xff{}".to_vec()))
    );
}

#[test]
fn text_is_the_body_and_non_utf8_stays_bytes() {
    let mut g = Gathered::new(Format::Text, 1 << 20);
    assert_eq!(g.push(&msg(b"hello", &[]), 1).invalid, None);
    assert_eq!(
        g.push(&msg(b"\xfe\xff", &[]), 1).invalid.map(|i| i.0),
        Some(Invalid::Utf8)
    );
    let req = g.take();
    let r = records(&req);
    assert_eq!(
        r[0].body.as_ref().and_then(|b| b.value.clone()),
        Some(text("hello"))
    );
    assert_eq!(
        r[1].body.as_ref().and_then(|b| b.value.clone()),
        Some(any_value::Value::BytesValue(vec![0xfe, 0xff]))
    );
}

#[test]
fn properties_dup_and_content_type_are_attributes() {
    let props = vec![
        ("site".to_string(), "p3".to_string()),
        ("tag".to_string(), "a".to_string()),
        ("tag".to_string(), "b".to_string()),
        ("tag".to_string(), "c".to_string()),
    ];
    let mut g = Gathered::new(Format::Text, 1 << 20);
    let m = Message {
        dup: true,
        content_type: Some("text/plain"),
        ..msg(b"x", &props)
    };
    g.push(&m, 1);
    let req = g.take();
    let r = records(&req)[0];
    assert_eq!(attr(r, ATTR_DUP), Some(&any_value::Value::BoolValue(true)));
    assert_eq!(attr(r, ATTR_CONTENT_TYPE), Some(&text("text/plain")));
    assert_eq!(attr(r, "mqtt.user_property.site"), Some(&text("p3")));
    let Some(any_value::Value::ArrayValue(tags)) = attr(r, "mqtt.user_property.tag") else {
        panic!("a repeated name is an array: {r:?}")
    };
    let tags: Vec<_> = tags.values.iter().map(|v| v.value.clone()).collect();
    assert_eq!(tags, [Some(text("a")), Some(text("b")), Some(text("c"))]);
}

fn otlp_request(bodies: &[&str]) -> ExportLogsServiceRequest {
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            scope_logs: vec![ScopeLogs {
                log_records: bodies
                    .iter()
                    .map(|b| LogRecord {
                        body: Some(string(b.to_string())),
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

#[test]
fn an_otlp_payload_gives_its_records_each_with_the_topic() {
    let mut g = Gathered::new(Format::OtlpProto, 1 << 20);
    let payload = otlp_request(&["a", "b"]).encode_to_vec();
    assert_eq!(
        g.push(&msg(&payload, &[]), 5),
        Added {
            records: 2,
            invalid: None
        }
    );
    // A text record of an invalid payload goes beside them.
    let added = g.push(&msg(b"\x0a\xff\xff", &[]), 5);
    assert_eq!(added.records, 1);
    assert_eq!(added.invalid.map(|i| i.0), Some(Invalid::Otlp));
    let req = g.take();
    let r = records(&req);
    assert_eq!(r.len(), 3);
    for rec in &r {
        assert_eq!(attr(rec, ATTR_TOPIC), Some(&text("devices/d1/telemetry")));
        assert_eq!(rec.observed_time_unix_nano, 5);
    }
    assert!(
        attr(r[0], ATTR_PAYLOAD_ERROR).is_some(),
        "the invalid one, in the own scope"
    );
    assert_eq!(
        r[1].body.as_ref().and_then(|b| b.value.clone()),
        Some(text("a"))
    );

    let mut g = Gathered::new(Format::OtlpJson, 1 << 20);
    let json =
        br#"{"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"j"}}]}]}]}"#;
    assert_eq!(
        g.push(&msg(json, &[]), 1),
        Added {
            records: 1,
            invalid: None
        }
    );
    assert_eq!(
        g.push(&msg(b"{\"resourceLogs\": 3}", &[]), 1)
            .invalid
            .map(|i| i.0),
        Some(Invalid::Otlp)
    );
}

#[test]
fn an_otlp_payload_that_would_decode_too_large_is_refused_unread() {
    // Many empty records: 2 bytes each on the wire, a struct each decoded.
    let mut g = Gathered::new(Format::OtlpProto, 1);
    let payload = otlp_request(&vec![""; 200_000]).encode_to_vec();
    let added = g.push(&msg(&payload, &[]), 1);
    assert_eq!(added.invalid.map(|i| i.0), Some(Invalid::Otlp));
}
