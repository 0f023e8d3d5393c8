//! The `mqtt` sources' own metric families (registered through the
//! component contract, see `src/metrics/groups.rs`), the reasons they count
//! by, and the series each `mqtt` source creates at 0.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::payload::Invalid;
use crate::metrics::{families, zero, SourceLabels, SourceReasonLabels};

/// Every `reason` of `holdfast_mqtt_source_connection_errors_total`.
pub const MQTT_CONNECTION_ERRORS: [&str; 5] = ["files", "connect", "refused", "lost", "subscribe"];
/// Every `reason` a `mqtt` source drops messages for: a payload over
/// `max_payload_size`, which can never be stored (acknowledged all the
/// same, or the broker would send it for ever).
pub const MQTT_DROP_REASONS: &[&str] = &["too_large"];

families! {
    /// Per-source figures of `mqtt` sources (`src/sources/mqtt/`).
    pub struct MqttSourceMetrics {
        /// 1 while an mqtt source is connected and its subscriptions granted at QoS 1 or more, else 0
        pub connected: Family<SourceLabels, Gauge> = "holdfast_mqtt_source_connected";
        /// MQTT messages an mqtt source received (each acknowledged once its events were durable, or dropped)
        pub messages: Family<SourceLabels, Counter> = "holdfast_mqtt_source_messages";
        /// MQTT messages acknowledged to the broker (PUBACK or PUBREC) after their append
        pub acknowledged: Family<SourceLabels, Counter> = "holdfast_mqtt_source_acknowledged_messages";
        /// MQTT messages the broker sent again (DUP set), stored again and marked mqtt.dup
        pub redelivered: Family<SourceLabels, Counter> = "holdfast_mqtt_source_redelivered_messages";
        /// Retained MQTT messages skipped (retained = false)
        pub retained_skipped: Family<SourceLabels, Counter> = "holdfast_mqtt_source_retained_skipped_messages";
        /// MQTT payloads that did not read as the source's format, kept whole and marked mqtt.payload_error, by reason (invalid_json, invalid_utf8, invalid_otlp)
        pub invalid: Family<SourceReasonLabels, Counter> = "holdfast_mqtt_source_invalid_payloads";
        /// Failed or lost MQTT connections and refused subscriptions, by reason (files, connect, refused, lost, subscribe)
        pub connection_errors: Family<SourceReasonLabels, Counter> = "holdfast_mqtt_source_connection_errors";
    }
}

impl MqttSourceMetrics {
    /// The series of the `mqtt` source `name`, at 0.
    pub fn declare(&self, name: &str) {
        let labels = SourceLabels {
            source: name.to_string(),
        };
        zero(
            &[
                &self.messages,
                &self.acknowledged,
                &self.redelivered,
                &self.retained_skipped,
            ],
            &labels,
        );
        drop(self.connected.get_or_create(&labels));
        let reasons = Invalid::ALL.map(Invalid::reason);
        for (family, reasons) in [
            (&self.invalid, &reasons[..]),
            (&self.connection_errors, &MQTT_CONNECTION_ERRORS[..]),
        ] {
            for reason in reasons {
                let labels = SourceReasonLabels {
                    source: name.to_string(),
                    reason: reason.to_string(),
                };
                zero(&[family], &labels);
            }
        }
    }
}
