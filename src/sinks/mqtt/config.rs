//! `[sinks.<name>]` with `type = "mqtt"`: the table as written (the MQTT
//! connection keys written in by [`mqtt_table!`], the delivery keys that
//! mean something for MQTT written out here), its check, its lines in
//! `holdfast check`, and the component.
//!
//! The delivery keys are checked by the shared network check
//! ([`Common`]) with the keys MQTT has no use for left out: no
//! `batch_max_events` or `concurrency` (a batch is a third of
//! `max_in_flight` events, three batches at a time, started in log order), no
//! `request_timeout` (rumqttc keeps every publish until its PUBACK, across
//! reconnects), no `compression`, `auth`, `headers` (the connection keys
//! say who the sink is).

use std::fmt::{self, Write};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context as _;
use toml::Spanned;

use super::link::{self, Link, Tuning};
use super::metrics::MqttSinkMetrics;
use super::publish::TOPIC_MAX;
use super::{Mqtt, MqttSinkOptions, Payload};
use crate::checking::raw::one_of_newtype;
use crate::checking::units::{format_duration, format_size, Count, Dur, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Run, Sink, SinkEnv};
use crate::metrics::Metrics;
use crate::mqtt::mqtt_table;
use crate::sinks::delivery::runtime;
use crate::sinks::document::{check_layout, RawLayout};
use crate::sinks::network_config::{
    check_network, check_template, Common, NameRule, Place, RawNetworkSink, RawQuarantine,
    DROP_REASONS,
};
use crate::sinks::quarantine_options::QuarantineFull;
use crate::sinks::template::FIELD_MAX;

one_of_newtype! {
    /// `payload` of an `mqtt` sink.
    RawPayload(Payload) {
        "json" => Payload::Json,
        "otlp_proto" => Payload::OtlpProto,
        "otlp_json" => Payload::OtlpJson,
    }
}

/// Defaults of the sink's own keys.
pub(super) mod defaults {
    use std::time::Duration;
    pub const MAX_IN_FLIGHT: u64 = 1000;
    pub const MAX_PAYLOAD_SIZE: u64 = 1 << 20;
    pub const BATCH_TIMEOUT: Duration = Duration::from_millis(100);
}

mqtt_table! {
    /// `[sinks.<name>]` with `type = "mqtt"`, as written.
    pub(crate) struct RawMqttSink {
        /// The type (already read to choose this struct).
        #[serde(rename = "type")]
        _type: serde::de::IgnoredAny,
        /// Source names. Required, non-empty.
        inputs: Option<Spanned<Vec<Spanned<String>>>>,
        /// Topic template, like `"telemetry/{resource.host.name}/{signal}"`. Required.
        topic: Option<Spanned<String>>,
        /// `"json"`, `"otlp_proto"` or `"otlp_json"`. Default `"json"`.
        payload: Option<Spanned<RawPayload>>,
        /// With `payload = "json"`: `"lean"` (default) or `"full"`.
        document: Option<Spanned<RawLayout>>,
        /// 1 (the default, and the only one in this release).
        qos: Option<Spanned<Count>>,
        /// Default `false`.
        retain: Option<Spanned<bool>>,
        /// Default 1000; 1 to 65535. Lowered by the broker's Receive Maximum.
        max_in_flight: Option<Spanned<Count>>,
        /// Default `"1MiB"`; 16 B to 256 MiB.
        max_payload_size: Option<Spanned<Size>>,
        /// Default `"100ms"`.
        batch_timeout: Option<Spanned<Dur>>,
        /// Default 5; 1 to 1000.
        max_attempts: Option<Spanned<Count>>,
        /// Default `"500ms"`.
        backoff_initial: Option<Spanned<Dur>>,
        /// Default `"60s"`; at least `backoff_initial`.
        backoff_max: Option<Spanned<Dur>>,
        /// Default: every key at its default.
        quarantine: Option<Spanned<RawQuarantine>>,
    }
}

impl RawNetworkSink for RawMqttSink {
    fn inputs(&self) -> Option<&Spanned<Vec<Spanned<String>>>> {
        self.inputs.as_ref()
    }

    /// Only the delivery keys the sink has; the others are not keys of an
    /// `mqtt` table at all (serde refuses them, naming the key).
    fn common(&self) -> Common<'_> {
        Common {
            batch_max_events: None,
            batch_max_bytes: None,
            batch_timeout: self.batch_timeout.as_ref(),
            concurrency: None,
            adaptive_concurrency: None,
            request_timeout: None,
            max_attempts: self.max_attempts.as_ref(),
            backoff_initial: self.backoff_initial.as_ref(),
            backoff_max: self.backoff_max.as_ref(),
            compression: None,
            auth: None,
            tls: None,
            headers: None,
            headers_file: None,
            quarantine: self.quarantine.as_ref(),
        }
    }
}

/// What a topic's literal parts may hold (fields render `a-z 0-9 - _`
/// only, so they never hold a wildcard).
const TOPIC: NameRule = NameRule {
    what: "topic",
    default: "holdfast/{signal}",
    allowed: |c| !matches!(c, '+' | '#' | '\0'),
    rule: "an MQTT topic to publish to has no wildcards (+ #) and no NUL",
};

impl RawMqttSink {
    fn check(self, cx: &mut Checker<'_>, p: &Place<'_, '_>) -> Option<MqttSinkOptions> {
        let key = |k: &str| p.key(k);
        let connection = self.connection().check(cx, &key, p.t.span(), &p.t.name);
        let topic = check_template(cx, &key("topic"), self.topic.as_ref(), &TOPIC);
        match &self.topic {
            None => cx.error(
                Some(p.t.span()),
                &p.t.key,
                "missing `topic`: the topic each event is published to, like topic = \
                 \"telemetry/{resource.host.name}/{signal}\"",
            ),
            Some(t) => {
                // The longest a rendering can be: its literal parts, and
                // each placeholder at its widest.
                let literal: usize = topic.literals().map(str::len).sum();
                let fields = t.get_ref().matches('{').count();
                if literal + fields * FIELD_MAX.max(16) > TOPIC_MAX {
                    cx.error(
                        Some(t.span()),
                        &key("topic"),
                        format!(
                            "the topic can render longer than MQTT's {TOPIC_MAX} bytes: shorten it"
                        ),
                    );
                }
            }
        }
        let payload = self.payload.as_ref().map_or(Payload::Json, |v| {
            cx.note(&key("payload"), v);
            v.get_ref().0
        });
        let document = check_layout(cx, &key("document"), self.document.as_ref());
        if let (Some(d), false) = (&self.document, payload == Payload::Json) {
            cx.error(
                Some(d.span()),
                &key("document"),
                format!(
                    "document shapes the JSON documents of payload = \"json\", and payload is \
                     \"{}\": remove document or set payload = \"json\"",
                    payload.as_str()
                ),
            );
        }
        if let Some(q) = &self.qos {
            cx.note(&key("qos"), q);
            if q.get_ref().0 != 1 {
                cx.error(
                    Some(q.span()),
                    &key("qos"),
                    format!(
                        "qos = {} is not supported: the sink publishes at QoS 1, where the \
                         broker's PUBACK is what moves the cursor (QoS 0 has no acknowledgement \
                         to wait for; QoS 2's extra round trip buys nothing, since receivers \
                         drop repeats by the event id); remove qos or set qos = 1",
                        q.get_ref().0
                    ),
                );
            }
        }
        let retain = self.retain.as_ref().is_some_and(|r| {
            cx.note(&key("retain"), r);
            *r.get_ref()
        });
        let max_in_flight = cx.count(
            &key("max_in_flight"),
            self.max_in_flight.as_ref(),
            defaults::MAX_IN_FLIGHT,
            1..=65_535,
        ) as u16;
        let max_payload_size = cx.size(
            &key("max_payload_size"),
            self.max_payload_size.as_ref(),
            defaults::MAX_PAYLOAD_SIZE,
            16,
            256 << 20,
        ) as usize;
        let (mut common, _) = self.common().check(cx, p, false, &[]);
        if self.batch_timeout.is_none() {
            common.batch_timeout = defaults::BATCH_TIMEOUT;
        }
        // Batches of a third of the window, three at a time, started in
        // log order: see the module doc.
        let batch = usize::from(max_in_flight).div_ceil(3);
        common.concurrency = 3;
        common.adaptive_concurrency = false;
        common.batch_max_events = batch;
        common.batch_max_bytes = (batch * 4096).clamp(1 << 20, 64 << 20);
        Some(MqttSinkOptions {
            common,
            connection: connection?,
            topic,
            payload,
            document,
            retain,
            max_in_flight,
            max_payload_size,
        })
    }
}

impl MqttSinkOptions {
    fn describe_lines(&self, out: &mut String) -> fmt::Result {
        let payload = match self.payload {
            Payload::Json => format!("the {} JSON document of each event", self.document.as_str()),
            Payload::OtlpProto => "one OTLP protobuf export request per event".into(),
            Payload::OtlpJson => "one OTLP/JSON export request per event".into(),
        };
        writeln!(out, "    {}", self.connection.describe())?;
        writeln!(
            out,
            "    publishes at QoS 1{} to topic \"{}\", {payload} (at most {})",
            if self.retain { " with RETAIN" } else { "" },
            self.topic.as_str(),
            format_size(self.max_payload_size as u64)
        )?;
        let o = &self.common;
        writeln!(
            out,
            "    up to {} publishes awaiting their PUBACK (fewer if the broker's Receive Maximum is \
             lower), sent at least every {}; the cursor moves over the events acknowledged in \
             order; unacknowledged publishes are sent again (DUP) after a reconnect",
            self.max_in_flight,
            format_duration(o.batch_timeout)
        )?;
        writeln!(
            out,
            "    MQTT 5 PUBACK reason codes: below 0x80 delivered; 0x87 not authorized, 0x90, 0x99 \
             quarantined; 0x97, 0x91 retried; 0x80, 0x83 retried {} time(s), then quarantined{}",
            o.max_attempts,
            if self.connection.protocol == crate::mqtt::Protocol::V311 {
                " (MQTT 3.1.1 has none: a broker that refuses a publish still acknowledges it)"
            } else {
                ""
            }
        )?;
        let full = match o.quarantine.when_full {
            QuarantineFull::Block => {
                "when full, the cursor stops at the next rejected event until there is room"
            }
            QuarantineFull::Drop => "when full, further rejected events are dropped and counted",
        };
        writeln!(
            out,
            "    events rejected for good go to the quarantine {} (at most {}; {full})",
            o.quarantine.dir.display(),
            format_size(o.quarantine.max_bytes)
        )
    }
}

impl Sink for MqttSinkOptions {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SinkEnv<'_>) -> Option<Self> {
        check_network(cx, t, env, RawMqttSink::check).flatten()
    }

    fn inputs(&self) -> &[String] {
        &self.common.inputs
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        self.describe_lines(out)
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<MqttSinkMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.sinks.declare(name);
        metrics.declare_sink_drops(name, DROP_REASONS);
        metrics.group::<MqttSinkMetrics>().declare(name);
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        let ctx = ctx.clone();
        let o = self.clone();
        Box::pin(async move {
            let link = Arc::new(Link::new(
                o.connection.protocol,
                ctx.metrics.group::<MqttSinkMetrics>(),
                &ctx.name,
            ));
            let target = reqwest::Url::parse(&o.connection.url)
                .with_context(|| format!("the url of sink {}", ctx.name))?;
            // The event loop's task stops with the sink (its own token, so
            // that it also stops when the runtime fails and is restarted).
            let link_stop = ctx.stop.child_token();
            let _stop_link = link_stop.clone().drop_guard();
            let task = tokio::spawn(link::run(
                link.clone(),
                o.connection.clone(),
                Tuning {
                    max_in_flight: o.max_in_flight,
                    max_packet: o.max_payload_size + TOPIC_MAX + 16,
                },
                ctx.name.clone(),
                link_stop.clone(),
            ));
            let transport = Mqtt {
                link,
                topic: o.topic.clone(),
                payload: o.payload,
                layout: o.document,
                retain: o.retain,
                max_payload_size: o.max_payload_size,
                connect_wait: o.connection.connect_timeout,
                target,
                stop: link_stop.clone(),
                last_start: std::sync::Mutex::new(None),
            };
            let result = runtime::run(
                ctx.name,
                o.common,
                transport,
                ctx.log,
                ctx.metrics,
                ctx.stop,
            )
            .await;
            link_stop.cancel();
            let _ = task.await;
            result
        })
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let key = |k: &str| format!("sinks.{name}.{k}");
        for (k, path) in self.connection.files() {
            check_file(env, &key(k), k, path);
        }
    }
}

/// One of the connection's files, as the connect will read it.
fn check_file(env: &mut Env<'_>, key: &str, which: &str, path: &Path) {
    match which {
        "password_file" => env.secret_file(key, path, "password"),
        "tls.client_key_file" => {
            if env.pem_file(key, path, "PRIVATE KEY") {
                env.secret_file(key, path, "private key");
            }
        }
        _ => {
            env.pem_file(key, path, "CERTIFICATE");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;
    use crate::sinks::SinkKind;

    fn sink_config(extra: &str) -> String {
        format!(
            "data_dir = \"/d\"\nsources.app = {{ type = \"otlp_http\" }}\n\n\
             [sinks.broker]\ntype = \"mqtt\"\ninputs = [\"app\"]\n{extra}"
        )
    }

    #[test]
    fn defaults_publish_json_at_qos_1_a_thousand_in_flight() {
        let s = parse(
            &sink_config("url = \"mqtt://127.0.0.1\"\ntopic = \"t/{resource.host.name}\"\n"),
            "/etc/holdfast/holdfast.toml",
        )
        .unwrap();
        let SinkKind::Mqtt(o) = &s.sinks["broker"].kind else {
            panic!()
        };
        assert_eq!(o.payload, Payload::Json);
        assert_eq!(o.max_in_flight, 1000);
        assert_eq!(o.common.batch_max_events, 334);
        assert_eq!(
            (o.common.concurrency, o.common.adaptive_concurrency),
            (3, false)
        );
        assert_eq!(o.common.batch_timeout, defaults::BATCH_TIMEOUT);
        assert_eq!(o.max_payload_size, 1 << 20);
        assert!(!o.retain);
        assert_eq!(o.connection.port, 1883);
        let text = s.describe();
        assert!(
            text.contains("publishes at QoS 1 to topic \"t/{resource.host.name}\""),
            "{text}"
        );
        assert!(
            text.contains("up to 1000 publishes awaiting their PUBACK"),
            "{text}"
        );
    }

    #[test]
    fn config_errors_name_the_key() {
        let url = "url = \"mqtt://127.0.0.1\"\n";
        for (extra, key, fragment) in [
            (url.to_string(), "sinks.broker", "missing `topic`"),
            (
                format!("{url}topic = \"a/+/b\"\n"),
                "sinks.broker.topic",
                "wildcards",
            ),
            (
                format!("{url}topic = \"a/#\"\n"),
                "sinks.broker.topic",
                "wildcards",
            ),
            (
                format!("{url}topic = \"t\"\nqos = 2\n"),
                "sinks.broker.qos",
                "qos = 2 is not supported",
            ),
            (
                format!("{url}topic = \"t\"\npayload = \"otlp_proto\"\ndocument = \"full\"\n"),
                "sinks.broker.document",
                "payload = \"json\"",
            ),
            (
                format!("{url}topic = \"t\"\npayload = \"xml\"\n"),
                "sinks.broker.payload",
                "",
            ),
            (
                format!("{url}topic = \"t\"\nmax_in_flight = 70000\n"),
                "sinks.broker.max_in_flight",
                "",
            ),
            (
                format!("{url}topic = \"t\"\nconcurrency = 4\n"),
                "sinks.broker",
                "concurrency",
            ),
            (
                "topic = \"t\"\n".to_string(),
                "sinks.broker.url",
                "needs the broker",
            ),
        ] {
            let err = match parse(&sink_config(&extra), "/etc/holdfast/holdfast.toml") {
                Ok(_) => panic!("{extra}: accepted"),
                Err(e) => e,
            };
            let p = err.problems();
            assert!(
                p.iter()
                    .any(|d| d.key.starts_with(key) && d.message.contains(fragment)),
                "{extra}: {p:?}"
            );
        }
    }
}
