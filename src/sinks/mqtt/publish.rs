//! One event as an MQTT publish: its topic (the template rendered, and
//! checked as MQTT wants a topic name), its payload, and the size of the
//! packet it makes, judged against `max_payload_size` and the broker's
//! Maximum Packet Size before it is handed to the client.

use bytes::Bytes;

use super::Payload;
use crate::mqtt::Protocol;
use crate::sinks::delivery::item::Item;
use crate::sinks::document;
use crate::sinks::otlp_request::{export_request, export_requests_json};

/// The longest topic name MQTT can carry (a two-byte length).
pub(super) const TOPIC_MAX: usize = 65_535;

/// Why `topic` cannot be published to, or `None`.
pub(super) fn topic_problem(topic: &str) -> Option<String> {
    if topic.is_empty() {
        return Some("the topic renders empty".into());
    }
    if topic.len() > TOPIC_MAX {
        return Some(format!(
            "the topic renders {} bytes, over MQTT's {TOPIC_MAX}",
            topic.len()
        ));
    }
    if let Some(c) = topic.chars().find(|c| matches!(c, '+' | '#' | '\0')) {
        return Some(format!(
            "the topic {topic:?} holds {c:?}: a topic to publish to has no wildcards (+ #) and no NUL"
        ));
    }
    None
}

/// The payload of `it`; `shared` is what the JSON documents of one batch
/// share, rendered once.
pub(super) fn payload(payload: Payload, it: &Item, shared: &mut document::Shared) -> Bytes {
    match payload {
        Payload::Json => {
            let mut out = Vec::with_capacity(it.data.len() * 3 + 256);
            // The event id goes in the document: a publish has nowhere
            // else for it (no headers under MQTT 3.1.1).
            document::write_with(&mut out, &it.ev, None, false, shared);
            Bytes::from(out)
        }
        Payload::OtlpProto => Bytes::from(export_request(it)),
        Payload::OtlpJson => Bytes::from(export_requests_json(std::slice::from_ref(it))),
    }
}

/// The size of the PUBLISH packet (QoS 1, no properties) for a topic and
/// payload of these lengths, fixed header included.
pub(super) fn packet_size(protocol: Protocol, topic: usize, payload: usize) -> usize {
    // Topic length, topic, packet identifier, (MQTT 5) an empty property
    // length, payload.
    let properties = match protocol {
        Protocol::V5 => 1,
        Protocol::V311 => 0,
    };
    let remaining = 2 + topic + 2 + properties + payload;
    let length_bytes = match remaining {
        0..=127 => 1,
        128..=16_383 => 2,
        16_384..=2_097_151 => 3,
        _ => 4,
    };
    1 + length_bytes + remaining
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_with_wildcards_nul_or_nothing_are_refused() {
        assert_eq!(topic_problem("telemetry/gw-1/logs"), None);
        assert!(topic_problem("").unwrap().contains("empty"));
        assert!(topic_problem("a/+/b").unwrap().contains("wildcards"));
        assert!(topic_problem("a/#").unwrap().contains("wildcards"));
        assert!(topic_problem("a\0b").unwrap().contains("NUL"));
        assert!(topic_problem(&"t".repeat(TOPIC_MAX)).is_none());
        assert!(topic_problem(&"t".repeat(TOPIC_MAX + 1))
            .unwrap()
            .contains("65535"));
    }

    #[test]
    fn packet_sizes_match_the_client_encoder() {
        for (topic, payload) in [(1, 0), (10, 100), (20, 200), (300, 16_000), (5, 3_000_000)] {
            let t = "t".repeat(topic);
            let body = vec![b'x'; payload];
            let mut v5 = rumqttc::v5::mqttbytes::v5::Publish::new(
                &t,
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                body.clone(),
                None,
            );
            v5.pkid = 1;
            assert_eq!(packet_size(Protocol::V5, topic, payload), v5.size());
            let mut v4 = rumqttc::Publish::new(&t, rumqttc::QoS::AtLeastOnce, body);
            v4.pkid = 1;
            assert_eq!(packet_size(Protocol::V311, topic, payload), v4.size());
        }
    }
}
