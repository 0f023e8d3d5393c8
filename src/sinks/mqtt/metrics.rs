//! The `mqtt` sink's own metric families (registered through the component
//! contract, `src/metrics/groups.rs`): the connection to the broker, and
//! the publishes awaiting their PUBACK. What every sink counts (events
//! sent, committed, quarantined, retried) is in `src/metrics/sinks.rs`.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::metrics::{families, zero, SinkLabels};

families! {
    /// What the `mqtt` sinks count, per sink.
    pub struct MqttSinkMetrics {
        /// 1 while the sink is connected to its broker, else 0
        pub connected: Family<SinkLabels, Gauge> = "holdfast_mqtt_sink_connected";
        /// Connections to the broker lost or refused (each failed attempt counts)
        pub connection_errors: Family<SinkLabels, Counter> = "holdfast_mqtt_sink_connection_errors";
        /// Reconnects the broker answered without the session: the publishes it held were sent
        /// again as new ones
        pub sessions_lost: Family<SinkLabels, Counter> = "holdfast_mqtt_sink_sessions_lost";
        /// Publishes handed to the client and not yet acknowledged by a PUBACK
        pub in_flight: Family<SinkLabels, Gauge> = "holdfast_mqtt_sink_in_flight_publishes";
        /// The most publishes in flight: max_in_flight, or the broker's Receive Maximum when lower
        pub window: Family<SinkLabels, Gauge> = "holdfast_mqtt_sink_in_flight_limit";
    }
}

impl MqttSinkMetrics {
    /// The series of the sink `name`, at 0.
    pub fn declare(&self, name: &str) {
        let labels = SinkLabels {
            sink: name.to_string(),
        };
        zero(&[&self.connection_errors, &self.sessions_lost], &labels);
        for g in [&self.connected, &self.in_flight, &self.window] {
            drop(g.get_or_create(&labels));
        }
    }
}
