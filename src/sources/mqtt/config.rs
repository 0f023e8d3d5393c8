//! `[sources.<name>]` with `type = "mqtt"`: the table as written (the
//! connection keys of `src/mqtt/` and the source's own), its check and its
//! lines in `holdfast check`.

use std::fmt::{self, Write};
use std::sync::Arc;

use serde::de::IgnoredAny;
use toml::Spanned;

use super::metrics::{MqttSourceMetrics, MQTT_DROP_REASONS};
use super::payload::Format;
use crate::checking::units::{format_size, Count, Size};
use crate::checking::{Checker, Env, NamedTable};
use crate::component::{ComponentContext, Processing, Run, Source, SourceEnv};
use crate::metrics::Metrics;
use crate::mqtt::{mqtt_table, Connection, Protocol};
use crate::process::Chain;

/// `type = "mqtt"`: subscribe to topic filters on a broker; a message is
/// acknowledged only once it is durable in the log.
#[derive(Debug, Clone)]
pub struct MqttSourceSettings {
    pub connection: Connection,
    /// Topic filters, each subscribed at `qos`.
    pub topics: Vec<String>,
    /// 1 or 2: the QoS asked for (the broker may grant less).
    pub qos: u8,
    pub format: Format,
    /// A larger payload is dropped (counted, logged, acknowledged).
    pub max_payload_size: usize,
    /// Whether retained messages are taken (`false`: skipped).
    pub retained: bool,
    /// MQTT 5: the most unacknowledged messages the broker may send at
    /// once (the CONNECT's Receive Maximum), which is also the most one
    /// append gathers.
    pub receive_maximum: u16,
    /// `[sources.<name>.process]`; `None`: records as decoded.
    pub process: Option<Arc<Chain>>,
}

pub(super) mod defaults {
    pub const QOS: u8 = 1;
    pub const MAX_PAYLOAD_SIZE: u64 = 1 << 20;
    /// Enough for one fsync round to carry a few hundred messages (see
    /// `docs/sources-mqtt.md`, "Throughput and memory").
    pub const RECEIVE_MAXIMUM: u16 = 256;
    /// Above this much (`receive_maximum × max_payload_size`) the check
    /// warns: it is what a broker sending only the largest payloads makes
    /// the source hold.
    pub const WARN_WINDOW_BYTES: u64 = 1 << 30;
}

/// The most an MQTT packet can carry (the protocol's Remaining Length).
pub const MQTT_MAX_PAYLOAD: u64 = 268_435_455;

mqtt_table! {
    /// `[sources.<name>]` with `type = "mqtt"`, as written.
    struct RawMqttSource {
        #[serde(rename = "type")]
        _type: IgnoredAny,
        /// Topic filters (`+` and `#` wildcards). Required, at least one.
        topics: Option<Spanned<Vec<Spanned<String>>>>,
        /// Default 1; 1 or 2.
        qos: Option<Spanned<Count>>,
        /// Default `"json"`; `"text"`, `"otlp_proto"`, `"otlp_json"`.
        format: Option<Spanned<String>>,
        /// Default `"1MiB"`; 1 byte to 256 MiB.
        max_payload_size: Option<Spanned<Size>>,
        /// Default false: retained messages are skipped.
        retained: Option<Spanned<bool>>,
        /// Default 256; 1 to 65535. MQTT 5 only.
        receive_maximum: Option<Spanned<Count>>,
        /// Default: absent, records as decoded (checked by `src/process/config.rs`).
        #[serde(rename = "process")]
        _process: Option<IgnoredAny>,
    }
}

/// Whether `filter` is a topic filter a broker accepts: not empty, no NUL,
/// `+` alone in its level, `#` alone in the last level.
pub(super) fn valid_filter(filter: &str) -> Result<(), &'static str> {
    if filter.is_empty() {
        return Err("a topic filter cannot be empty");
    }
    if filter.len() > 65_535 {
        return Err("a topic filter is at most 65535 bytes");
    }
    if filter.contains('\0') {
        return Err("a topic filter cannot hold NUL");
    }
    let levels: Vec<&str> = filter.split('/').collect();
    for (i, level) in levels.iter().enumerate() {
        if level.contains('#') && (*level != "#" || i + 1 != levels.len()) {
            return Err("'#' must be a whole level and the last one, as in \"devices/#\"");
        }
        if level.contains('+') && *level != "+" {
            return Err("'+' must be a whole level, as in \"devices/+/telemetry\"");
        }
    }
    Ok(())
}

impl RawMqttSource {
    fn check<'a>(
        self,
        cx: &mut Checker<'a>,
        t: &NamedTable<'a>,
        env: &SourceEnv<'_>,
    ) -> Option<MqttSourceSettings> {
        let key = |k: &str| format!("{}.{k}", t.key);
        let connection = self.connection().check(cx, &key, t.span(), &t.name);
        let mut topics = Vec::new();
        match &self.topics {
            None => cx.error(
                Some(t.span()),
                &key("topics"),
                "an mqtt source needs the topics it subscribes to: set topics = \
                 [\"devices/+/telemetry\"]",
            ),
            Some(list) if list.get_ref().is_empty() => cx.error(
                Some(list.span()),
                &key("topics"),
                "an empty list subscribes to nothing: name at least one topic filter, like \
                 \"devices/+/telemetry\"",
            ),
            Some(list) => {
                for (i, f) in list.get_ref().iter().enumerate() {
                    let text = f.get_ref();
                    if let Err(why) = valid_filter(text) {
                        cx.error(
                            Some(f.span()),
                            &format!("{}[{i}]", key("topics")),
                            format!("{text:?} is not a topic filter: {why}"),
                        );
                    } else if topics.contains(text) {
                        cx.error(
                            Some(f.span()),
                            &format!("{}[{i}]", key("topics")),
                            format!("{text:?} is listed twice: remove one"),
                        );
                    } else {
                        topics.push(text.clone());
                    }
                }
            }
        }
        let qos = cx.count(&key("qos"), self.qos.as_ref(), defaults::QOS as u64, 0..=2) as u8;
        if qos == 0 {
            cx.error(
                self.qos.as_ref().map(|v| v.span()),
                &key("qos"),
                "QoS 0 has no acknowledgement, so a message could be lost between the broker \
                 and the log: set qos = 1 (or 2)",
            );
        }
        let format = match &self.format {
            None => Format::Json,
            Some(f) => Format::parse(f.get_ref()).unwrap_or_else(|| {
                cx.error(
                    Some(f.span()),
                    &key("format"),
                    format!(
                        "unknown format {:?}: write \"json\", \"text\", \"otlp_proto\" or \
                         \"otlp_json\"",
                        f.get_ref()
                    ),
                );
                Format::Json
            }),
        };
        let max_payload_size = cx.size(
            &key("max_payload_size"),
            self.max_payload_size.as_ref(),
            defaults::MAX_PAYLOAD_SIZE,
            1,
            MQTT_MAX_PAYLOAD,
        );
        // A payload and what decoding adds must fit one append, which is
        // at most a segment: a quarter leaves room for both.
        let most = env.log.segment_bytes / 4;
        if max_payload_size > most {
            cx.error(
                self.max_payload_size.as_ref().map(|v| v.span()),
                &key("max_payload_size"),
                format!(
                    "{}{} does not fit one log append: at most a quarter of log.segment_size \
                     ({}); set max_payload_size lower or raise log.segment_size",
                    if self.max_payload_size.is_none() {
                        "the default "
                    } else {
                        ""
                    },
                    format_size(max_payload_size),
                    format_size(most)
                ),
            );
        }
        let retained = self.retained.as_ref().is_some_and(|r| *r.get_ref());
        let receive_maximum = cx.count(
            &key("receive_maximum"),
            self.receive_maximum.as_ref(),
            defaults::RECEIVE_MAXIMUM as u64,
            1..=65_535,
        ) as u16;
        let protocol = connection.as_ref().map(|c| c.protocol);
        if let (Some(v), Some(Protocol::V311)) = (&self.receive_maximum, protocol) {
            cx.warn(
                Some(v.span()),
                &key("receive_maximum"),
                "MQTT 3.1.1 has no Receive Maximum: the broker's own limit sets the window \
                 (mosquitto: max_inflight_messages, default 20); remove the key or use \
                 protocol = \"5\"",
            );
        }
        let window = receive_maximum as u64 * max_payload_size;
        if protocol == Some(Protocol::V5) && window > defaults::WARN_WINDOW_BYTES {
            cx.warn(
                self.receive_maximum
                    .as_ref()
                    .map(|v| v.span())
                    .or(self.max_payload_size.as_ref().map(|v| v.span())),
                &key("receive_maximum"),
                format!(
                    "receive_maximum × max_payload_size is {}: a broker sending only the largest \
                     payloads makes the source hold that much; lower one of them",
                    format_size(window)
                ),
            );
        }
        let process = crate::process::config::check(cx, t);
        Some(MqttSourceSettings {
            connection: connection?,
            topics,
            qos,
            format,
            max_payload_size: max_payload_size as usize,
            retained,
            receive_maximum,
            process,
        })
    }
}

impl Source for MqttSourceSettings {
    fn check<'a>(cx: &mut Checker<'a>, t: &NamedTable<'a>, env: &SourceEnv<'_>) -> Option<Self> {
        cx.deserialize::<RawMqttSource>(&t.key, t.value)
            .and_then(|raw| raw.check(cx, t, env))
    }

    fn describe(&self, out: &mut String) -> fmt::Result {
        writeln!(out, "    {}", self.connection.describe())?;
        writeln!(
            out,
            "    subscribes to {} at QoS {}; each message acknowledged once durable in the log",
            self.topics
                .iter()
                .map(|t| format!("{t:?}"))
                .collect::<Vec<_>>()
                .join(", "),
            self.qos
        )?;
        let window = match self.connection.protocol {
            Protocol::V5 => format!(
                "at most {} unacknowledged messages at once (receive_maximum)",
                self.receive_maximum
            ),
            Protocol::V311 => {
                "as many unacknowledged messages at once as the broker sends (3.1.1)".into()
            }
        };
        writeln!(
            out,
            "    payloads as {}, up to {} (larger ones dropped and counted); retained messages {}; {window}",
            self.format.as_str(),
            format_size(self.max_payload_size as u64),
            if self.retained { "taken" } else { "skipped" },
        )?;
        if let Some(chain) = &self.process {
            crate::process::config::describe(chain, out)?;
        }
        Ok(())
    }

    fn register_families(metrics: &Metrics) {
        metrics.group::<MqttSourceMetrics>();
    }

    fn declare_metrics(&self, name: &str, metrics: &Metrics) {
        metrics.group::<MqttSourceMetrics>().declare(name);
        metrics.declare_source_drops(name, MQTT_DROP_REASONS);
    }

    fn processing(&self) -> Option<Processing<'_>> {
        Some(Processing {
            chain: self.process.as_ref(),
            unit: "message bodies",
        })
    }

    fn run(&self, ctx: &ComponentContext) -> Run {
        Box::pin(super::run(ctx.clone(), self.clone()))
    }

    fn check_environment(&self, name: &str, env: &mut Env<'_>) {
        let key = |k: &str| format!("sources.{name}.{k}");
        for (k, path) in self.connection.files() {
            match k {
                "password_file" => env.secret_file(&key(k), path, "password"),
                "tls.client_key_file" => env.secret_file(&key(k), path, "private key"),
                "tls.client_cert_file" => {
                    env.pem_file(&key(k), path, "CERTIFICATE");
                }
                _ => {
                    env.pem_file(&key(k), path, "CERTIFICATE");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
