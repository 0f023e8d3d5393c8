/*!
The `mqtt` source: subscribes to topic filters on an MQTT broker (5 or
3.1.1, through the connection kit `src/mqtt/`) and acknowledges each
message (PUBACK for QoS 1, PUBREC for QoS 2) only once the append holding
it returned, durable under the log's fsync policy.

```text
 broker ── client.rs   one rumqttc event loop, polled by its own task; reconnects
                       with the kit's backoff, files read again at each connect
           session.rs  gathers messages, one append in flight, acknowledges each
                       group in arrival order on the connection it came on
           append.rs   payloads decoded, the processing chain, the split, the append
           payload.rs  json | text | otlp_proto | otlp_json → log records, mqtt.* attributes
```

# Durability and duplicates

A message is acknowledged after its append returned, never before, on a
persistent session (3.1.1 `clean_session = false`, MQTT 5 `clean_start =
false` with the kit's session expiry): what is published while holdfast is
down waits in the broker's queue. A message appended but not yet
acknowledged when holdfast dies (or its connection drops) is sent again by
the broker with DUP set; it is stored again as a new event with a new id,
marked `mqtt.dup`. So duplicates per crash or disconnect are at most twice
the window: acknowledgements queued and not yet written (appends wait
beyond a window of them) and the append in flight (`docs/sources-mqtt.md`).

# Back-pressure

While the log refuses appends (`when_full = "block"`), nothing is
acknowledged: the broker stops at the window and queues the rest (within
its own limits, mosquitto's `max_queued_messages`). Nothing is dropped by
holdfast but payloads over `max_payload_size`, which could never be stored
(dropped, counted, logged with the topic, acknowledged).
*/

mod append;
mod client;
mod config;
pub mod metrics;
mod payload;
mod session;

pub use config::MqttSourceSettings;
pub use payload::{
    Format, ATTR_CONTENT_TYPE, ATTR_DUP, ATTR_PAYLOAD_ERROR, ATTR_TOPIC, ATTR_USER_PROPERTY,
    SCOPE_NAME,
};
pub use session::run;
