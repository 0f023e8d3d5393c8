//! Test events in both log formats: the same envelopes as format 1 (whole)
//! and as format 2 (one batch context plus each event's own fields, laid
//! out as `event/stored.rs` describes), so that tests can check that a sink
//! builds the same request from either. Also the small builders (`kv`,
//! `text_log`) other modules' tests share to write envelopes by hand.

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::metrics::v1::{
    metric, number_data_point, Gauge, Metric, NumberDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::delivery::item::{Item, Pos};
use crate::event::{
    Context, Decoder, Envelope, EventId, FileOrigin, Group, Record, Signal, Stored,
};

/// The id seed of every group [`compact`] makes: ids equal to
/// `EventId::derived(&SEED, index)` are left out of the events.
pub const SEED: [u8; 16] = [7; 16];

/// `env` decoded as the log hands out a format-1 event.
pub fn stored(env: &Envelope) -> Stored {
    Decoder::new()
        .decode(&env.encode_to_vec(), &Bytes::new(), 0)
        .expect("a valid envelope")
}

/// `env` as the log hands out a format-1 event, at `seq`.
pub fn item(env: &Envelope, seq: u64) -> Item {
    let data = Bytes::from(env.encode_to_vec());
    let ev = stored(env);
    Item {
        pos: Pos::Log(seq),
        data,
        context: Bytes::new(),
        index: 0,
        ev,
        attempts: 0,
        retries: 0,
        failures: 0,
    }
}

/// `envs` as one format-2 batch: its context and each event's own bytes.
/// Events share a group when they share source, resource, scope, schema
/// URLs, file (path, fingerprint, generation) and their log record's first
/// `shared` attributes, which move into the group.
pub fn compact(envs: &[Envelope], shared: usize) -> (Bytes, Vec<Bytes>) {
    let mut groups: Vec<Group> = Vec::new();
    let mut own = Vec::new();
    let mut members: Vec<Vec<usize>> = Vec::new();
    let mut envs: Vec<Envelope> = envs.to_vec();
    for (index, env) in envs.iter_mut().enumerate() {
        let attributes: Vec<KeyValue> = match &mut env.record {
            Some(Record::Log(l)) if l.attributes.len() >= shared => {
                l.attributes.drain(..shared).collect()
            }
            _ => Vec::new(),
        };
        let origin = env.origin.as_ref().map(|o| FileOrigin {
            path: o.path.clone(),
            fingerprint: o.fingerprint,
            generation: o.generation,
            ..Default::default()
        });
        let g = Group {
            source: std::mem::take(&mut env.source),
            resource: env.resource.take(),
            resource_schema_url: std::mem::take(&mut env.resource_schema_url),
            scope: env.scope.take(),
            scope_schema_url: std::mem::take(&mut env.scope_schema_url),
            attributes,
            origin,
            id_seed: SEED.to_vec(),
            observed_time_unix_nano: 0,
            record_observed: false,
        };
        let gi = match groups.iter().position(|x| *x == g) {
            Some(i) => i,
            None => {
                groups.push(g);
                members.push(Vec::new());
                groups.len() - 1
            }
        };
        members[gi].push(index);
        env.group = gi as u32;
        if let Some(o) = &mut env.origin {
            let id = EventId::for_file_line(o.fingerprint, o.generation, o.offset);
            if env.id == id.0 {
                env.id.clear();
            }
            o.path.clear();
            o.fingerprint = 0;
            o.generation = 0;
            // Format 2 stores the offset from the group's (0 here) and
            // the line's length.
            o.end_offset -= o.offset;
        } else if env.id == EventId::derived(&SEED, index as u64).0 {
            env.id.clear();
        }
        own.push(index);
    }
    for (g, idx) in groups.iter_mut().zip(&members) {
        let base = idx
            .iter()
            .map(|&i| envs[i].observed_time_unix_nano)
            .min()
            .unwrap_or(0);
        g.observed_time_unix_nano = base;
        g.record_observed = idx.iter().all(|&i| match &envs[i].record {
            Some(Record::Log(l)) => l.observed_time_unix_nano == envs[i].observed_time_unix_nano,
            _ => false,
        });
        for &i in idx {
            let e = &mut envs[i];
            if g.record_observed {
                if let Some(Record::Log(l)) = &mut e.record {
                    l.observed_time_unix_nano = 0;
                }
            }
            e.observed_delta = e.observed_time_unix_nano - base;
            e.observed_time_unix_nano = 0;
        }
    }
    let context = Bytes::from(Context { groups }.encode_to_vec());
    let own = own
        .into_iter()
        .map(|i| Bytes::from(envs[i].encode_to_vec()))
        .collect();
    (context, own)
}

/// `envs` as items read from one format-2 batch starting at `seq`,
/// decoded as a delivery task decodes them.
pub fn items_v2(envs: &[Envelope], shared: usize, seq: u64) -> Vec<Item> {
    let (context, own) = compact(envs, shared);
    let mut decoder = Decoder::new();
    own.into_iter()
        .enumerate()
        .map(|(i, data)| {
            let ev = decoder
                .decode(&data, &context, i as u64)
                .expect("a valid format-2 event");
            Item {
                pos: Pos::Log(seq + i as u64),
                data,
                context: context.clone(),
                index: i as u64,
                ev,
                attempts: 0,
                retries: 0,
                failures: 0,
            }
        })
        .collect()
}

/// Each of `envs` as a format-1 item and as a format-2 one (two shared
/// groups), both numbered from `seq`: what a sink must treat alike.
pub fn both_formats(envs: &[Envelope], seq: u64) -> Vec<(Item, Item)> {
    items_v1(envs, seq)
        .into_iter()
        .zip(items_v2(envs, 2, seq))
        .collect()
}

/// `envs` as format-1 items starting at `seq`.
pub fn items_v1(envs: &[Envelope], seq: u64) -> Vec<Item> {
    envs.iter()
        .enumerate()
        .map(|(i, e)| item(e, seq + i as u64))
        .collect()
}

/// A string attribute.
pub fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(v.into())),
        }),
        ..Default::default()
    }
}

fn resource(host: &str) -> Resource {
    Resource {
        attributes: vec![kv("host.name", host), kv("service.name", "edge-app")],
        ..Default::default()
    }
}

const T0: u64 = 1_714_564_800_000_000_000;

/// A log record of a text line, as the `file` source writes one.
pub fn text_log(observed_ns: u64, body: &str, attributes: Vec<KeyValue>) -> Record {
    Record::Log(LogRecord {
        observed_time_unix_nano: observed_ns,
        body: Some(AnyValue {
            value: Some(any_value::Value::StringValue(body.into())),
        }),
        attributes,
        ..Default::default()
    })
}

/// A file line as the `file` source appends it.
fn file_line(path: &str, fingerprint: u64, offset: u64, body: &str, own: bool) -> Envelope {
    let mut attributes = vec![
        kv("log.file.path", path),
        kv("log.file.name", path.rsplit('/').next().unwrap_or(path)),
    ];
    if own {
        attributes.push(kv("log.iostream", "stdout"));
    }
    Envelope {
        id: EventId::for_file_line(fingerprint, 0, offset).0.to_vec(),
        source: "app".into(),
        observed_time_unix_nano: T0 + offset * 1000,
        resource: Some(resource("gateway-0042")),
        scope: Some(InstrumentationScope {
            name: "holdfast.file".into(),
            ..Default::default()
        }),
        record: Some(text_log(T0 + offset * 1000, body, attributes)),
        origin: Some(FileOrigin {
            path: path.into(),
            fingerprint,
            generation: 0,
            offset,
            end_offset: offset + body.len() as u64 + 1,
        }),
        ..Default::default()
    }
}

/// A mix of what a batch can hold: file lines of two files (their path
/// and name shared), OTLP log records of two resources and two scopes,
/// a span and metric points, with stored, file-derived and seed-derived
/// ids. Meant for [`compact`] with `shared` = 2.
pub fn mixed() -> Vec<Envelope> {
    let scope = |name: &str| InstrumentationScope {
        name: name.into(),
        version: "1.2".into(),
        attributes: vec![kv("lib.kind", "sdk")],
        ..Default::default()
    };
    let otlp_log = |host: &str, sc: &str, body: &str, t: u64| Envelope {
        source: "otlp".into(),
        observed_time_unix_nano: T0 + 5_000 + t,
        resource: Some(resource(host)),
        resource_schema_url: "https://opentelemetry.io/schemas/1.21.0".into(),
        scope: Some(scope(sc)),
        scope_schema_url: "https://opentelemetry.io/schemas/1.20.0".into(),
        record: Some(Record::Log(LogRecord {
            time_unix_nano: T0 - 3_600_000_000_000 + t,
            severity_number: 13,
            severity_text: "WARN".into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(body.into())),
            }),
            attributes: vec![kv("user.id", "42")],
            flags: 1,
            trace_id: vec![0xab; 16],
            span_id: vec![0xcd; 8],
            event_name: "login".into(),
            dropped_attributes_count: 2,
            observed_time_unix_nano: T0 + t,
        })),
        ..Default::default()
    };
    let mut envs = vec![
        file_line("/var/log/app/app.log", 0x5eed, 0, "first line", false),
        file_line(
            "/var/log/app/app.log",
            0x5eed,
            11,
            "second \"quoted\" line",
            true,
        ),
        file_line("/var/log/syslog", 0xfeed, 700, "kernel: eth0 up", false),
        otlp_log("a", "s1", "one", 1),
        otlp_log("b", "s1", "two", 2),
        otlp_log("a", "s1", "three", 3),
        otlp_log("a", "s2", "four", 4),
        file_line("/var/log/app/app.log", 0x5eed, 33, "third line", false),
        Envelope {
            source: "otlp".into(),
            observed_time_unix_nano: T0 + 9_000,
            resource: Some(resource("a")),
            scope: Some(scope("tracer")),
            record: Some(Record::Span(Span {
                trace_id: vec![1; 16],
                span_id: vec![2; 8],
                name: "GET /items".into(),
                kind: 2,
                start_time_unix_nano: T0,
                end_time_unix_nano: T0 + 1_500_000,
                attributes: vec![kv("http.method", "GET")],
                ..Default::default()
            })),
            ..Default::default()
        },
    ];
    for (i, v) in [1.5, 2.0].into_iter().enumerate() {
        envs.push(Envelope {
            source: "otlp".into(),
            observed_time_unix_nano: T0 + 10_000,
            resource: Some(resource("a")),
            scope: Some(scope("meter")),
            record: Some(Record::Metric(Metric {
                name: "cpu.load".into(),
                unit: "1".into(),
                data: Some(metric::Data::Gauge(Gauge {
                    data_points: vec![NumberDataPoint {
                        attributes: vec![kv("cpu", &i.to_string())],
                        time_unix_nano: T0 + 7,
                        value: Some(number_data_point::Value::AsDouble(v)),
                        ..Default::default()
                    }],
                })),
                ..Default::default()
            })),
            ..Default::default()
        });
    }
    // Ids: derived from the seed and the index for most non-file events,
    // stored (random) for one.
    for (i, e) in envs.iter_mut().enumerate() {
        if e.origin.is_none() {
            e.id = if i == 4 {
                EventId::random().0.to_vec()
            } else {
                EventId::derived(&SEED, i as u64).0.to_vec()
            };
        }
    }
    envs
}

/// The events of `items` whose signal is `signal`, in order: one OTLP
/// request's worth.
pub fn of_signal(items: &[Item], signal: Signal) -> Vec<Item> {
    items
        .iter()
        .filter(|i| i.ev.signal() == Some(signal))
        .cloned()
        .collect()
}

#[test]
fn compact_events_hold_only_their_own_fields() {
    let envs = mixed();
    let (context, own) = compact(&envs, 2);
    let ctx = Context::decode(context.as_ref()).unwrap();
    // Two files, two resources × scopes of OTLP logs, the span's, the
    // metrics'.
    assert_eq!(ctx.groups.len(), 7);
    for (i, data) in own.iter().enumerate() {
        let e = Envelope::decode(data.as_ref()).unwrap();
        assert!(e.source.is_empty() && e.resource.is_none() && e.scope.is_none());
        // Every id but the random one is derived.
        assert_eq!(e.id.is_empty(), i != 4, "event {i}");
    }
    // And decoded, every field is back.
    for (a, b) in both_formats(&envs, 0) {
        assert_eq!(a.ev.to_envelope(), b.ev.to_envelope());
        assert_eq!(a.ev.id, b.ev.id);
    }
}
