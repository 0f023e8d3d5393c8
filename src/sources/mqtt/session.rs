//! The session loop: what the connection's task hands over, gathered into
//! groups, one append in flight at a time, and each group acknowledged in
//! the order its messages arrived once its append returned.
//!
//! Group commit without a timer: while one append waits on the disk, what
//! arrives gathers; when it returns, its messages are acknowledged and
//! everything gathered since (up to the window, and half an append's
//! bytes) goes in the next. An idle source appends a lone message at once.
//!
//! Acknowledgements belong to the connection the message came on: a
//! message appended after its connection dropped is not acknowledged on
//! the next one (the broker sends it again, marked DUP, and it is stored
//! again: the duplicates the docs bound), since a late PUBACK could
//! otherwise match a packet id the broker has since given another message.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::append::{Appender, Entry, Outcome};
use super::client::{self, Client, Granted, Polled};
use super::metrics::MqttSourceMetrics;
use super::MqttSourceSettings;
use crate::component::ComponentContext;
use crate::metrics::{SourceLabels, SourceReasonLabels};
use crate::mqtt::Protocol;
use crate::seglog::LogError;

/// How often the session looks whether queued acknowledgements were
/// written, while it waits for them.
const ACK_POLL: Duration = Duration::from_millis(2);

/// Whether a window of acknowledgements is queued and not yet written.
fn behind(queued: u64, written: &AtomicU64, window: usize) -> bool {
    queued.saturating_sub(written.load(Ordering::Relaxed)) >= window as u64
}

/// How long a stopping source waits for its last acknowledgements and its
/// DISCONNECT to go out.
const GOODBYE: Duration = Duration::from_secs(2);

/// An append in flight: the task, and the connection its messages came on.
struct InFlight {
    task: JoinHandle<(Appender, Vec<Entry>, Outcome)>,
    connection: u64,
}

struct Counters {
    connected: Gauge,
    messages: Counter,
    acknowledged: Counter,
    redelivered: Counter,
    retained_skipped: Counter,
    own: Arc<MqttSourceMetrics>,
}

pub async fn run(ctx: ComponentContext, opts: MqttSourceSettings) -> anyhow::Result<()> {
    let name = ctx.name.clone();
    let end = CancellationToken::new();
    // Ends the connection's task on every way out of this function.
    let _end_guard = end.clone().drop_guard();
    // Acknowledgements the event loop has written to the socket: rumqttc
    // writes one queued request per poll, behind up to ten incoming
    // packets, so under a steady stream they fall behind what the session
    // queued. Appends wait while more than a window is queued unwritten:
    // what a crash loses of them is sent again and stored twice, and this
    // keeps that to the window even with a broker that sends past its
    // Receive Maximum (mosquitto 2.0.11 was seen doing so).
    let written = Arc::new(AtomicU64::new(0));
    let mut queued = 0u64;
    let (client, mut rx, poller) =
        client::start(&opts, end.clone(), written.clone()).map_err(|e| {
            anyhow::anyhow!(
                "source {name} cannot connect to the MQTT broker {}: {e}; check sources.{name}'s \
             password_file and tls.* files",
                opts.connection.url
            )
        })?;
    let labels = SourceLabels {
        source: name.clone(),
    };
    let own = ctx.metrics.group::<MqttSourceMetrics>();
    let c = Counters {
        connected: own.connected.get_or_create(&labels).clone(),
        messages: own.messages.get_or_create(&labels).clone(),
        acknowledged: own.acknowledged.get_or_create(&labels).clone(),
        redelivered: own.redelivered.get_or_create(&labels).clone(),
        retained_skipped: own.retained_skipped.get_or_create(&labels).clone(),
        own: own.clone(),
    };
    let component = format!("source:{name}");
    let mut appender = Some(Appender::new(&name, &opts, &ctx.log, &ctx.metrics));
    let group_bytes = appender.as_ref().map_or(1 << 20, Appender::group_bytes);
    let window = match opts.connection.protocol {
        Protocol::V5 => opts.receive_maximum as usize,
        // 3.1.1 tells the broker no window: this one bounds groups and
        // unwritten acknowledgements.
        Protocol::V311 => 1024,
    };
    let mut pending: VecDeque<Entry> = VecDeque::new();
    let mut in_flight: Option<InFlight> = None;
    // Which connection is up (0: none); messages are acknowledged only on
    // the connection they came on.
    let mut connection = 0u64;
    let mut up = false;
    let mut result = Ok(());
    loop {
        tokio::select! {
            biased;
            done = async { (&mut in_flight.as_mut().expect("guarded").task).await },
                if in_flight.is_some() =>
            {
                let on = in_flight.take().map_or(0, |f| f.connection);
                let (a, group, outcome) = match done {
                    Ok(d) => d,
                    Err(e) => {
                        result = Err(anyhow::anyhow!("source {name}: the append task failed: {e}"));
                        break;
                    }
                };
                appender = Some(a);
                match outcome {
                    Outcome::Stored if up && on == connection => {
                        queued += ack(&name, &client, &group, &c).await;
                    }
                    Outcome::Stored => {}
                    Outcome::NotStored(LogError::Closed) => break,
                    Outcome::NotStored(e) if !ctx.stop.is_cancelled() => {
                        result = Err(anyhow::anyhow!(
                            "source {name}: the log refused MQTT messages: {e}; they were not \
                             acknowledged and the broker sends them again"
                        ));
                        break;
                    }
                    Outcome::NotStored(_) => {}
                }
                if ctx.stop.is_cancelled() {
                    break;
                }
            }
            _ = ctx.stop.cancelled(), if in_flight.is_none() => break,
            // Acknowledgements being written: look again.
            _ = tokio::time::sleep(ACK_POLL), if behind(queued, &written, window) => {}
            polled = rx.recv() => {
                let Some(polled) = polled else {
                    result = Err(anyhow::anyhow!("source {name}: the MQTT connection's task ended"));
                    break;
                };
                match polled {
                    Polled::Connected { session_present } => {
                        connection += 1;
                        up = true;
                        info!(source = %name, broker = %opts.connection.url, session_present,
                            "connected to the MQTT broker{}",
                            if session_present { ", the session kept" } else {
                                ": a new session (what was queued for an expired one is gone)"
                            });
                        ctx.health.clear_stuck(&name);
                        if let Err(e) = client.subscribe(&opts.topics, opts.qos, opts.retained) {
                            error!(source = %name, error = %e, "cannot send the MQTT SUBSCRIBE");
                        }
                    }
                    Polled::Subscribed(granted) => {
                        let ok = subscribed(&name, &opts, &granted, &c);
                        c.connected.set(i64::from(ok));
                    }
                    Polled::Publish(p) => {
                        c.messages.inc();
                        let m = p.message();
                        if m.dup {
                            c.redelivered.inc();
                        }
                        let store = if p.retain() && !opts.retained {
                            c.retained_skipped.inc();
                            false
                        } else if p.payload_len() > opts.max_payload_size {
                            warn!(source = %name, topic = %p.topic_lossy(), bytes = p.payload_len(),
                                max_payload_size = opts.max_payload_size,
                                "an MQTT payload is larger than max_payload_size: dropped, counted \
                                 and acknowledged (it could never be stored); raise \
                                 max_payload_size to keep such messages");
                            ctx.metrics.drop_events(&component, "too_large", 1);
                            false
                        } else {
                            true
                        };
                        pending.push_back(Entry { publish: p, store });
                    }
                    Polled::Down { reason, error, wait } => {
                        up = false;
                        // rumqttc drops the PUBACKs it had not written.
                        queued = written.load(Ordering::Relaxed);
                        c.connected.set(0);
                        // Not acknowledged: the broker sends them again.
                        pending.clear();
                        c.own
                            .connection_errors
                            .get_or_create(&SourceReasonLabels {
                                source: name.clone(),
                                reason: reason.to_string(),
                            })
                            .inc();
                        let what = match reason {
                            "refused" => "the MQTT broker refused the connection (check username, \
                                          password_file, client_id and the broker's ACL)",
                            "files" => "cannot read the MQTT password or TLS files",
                            "lost" => "the MQTT connection was lost",
                            _ => "cannot connect to the MQTT broker",
                        };
                        let why = format!("{what}: {error}");
                        if reason == "lost" {
                            warn!(source = %name, broker = %opts.connection.url, error = %error,
                                retry_in_ms = wait.as_millis() as u64,
                                "{what}; reconnecting, the broker keeps the session");
                        } else {
                            error!(source = %name, broker = %opts.connection.url, error = %error,
                                retry_in_ms = wait.as_millis() as u64, "{what}; retrying");
                        }
                        ctx.health.set_stuck(&name, why);
                    }
                }
            }
        }
        if in_flight.is_none()
            && up
            && !pending.is_empty()
            && !ctx.stop.is_cancelled()
            && !behind(queued, &written, window)
        {
            let group = take_group(&mut pending, window, group_bytes);
            if group.iter().all(|e| !e.store) {
                queued += ack(&name, &client, &group, &c).await;
                continue;
            }
            let mut a = appender.take().expect("no append is in flight");
            let stop = ctx.stop.clone();
            in_flight = Some(InFlight {
                task: tokio::spawn(async move {
                    let outcome = a.append(&group, &stop).await;
                    (a, group, outcome)
                }),
                connection,
            });
        }
    }
    // The last acknowledgements are queued; a DISCONNECT after them keeps
    // the session without waiting out the keep-alive.
    if up {
        client.disconnect();
        let _ = tokio::time::timeout(GOODBYE, poller).await;
    }
    c.connected.set(0);
    ctx.health.clear_stuck(&name);
    result
}

/// The next group: up to `window` messages and about `bytes` of payload
/// (at least one message).
fn take_group(pending: &mut VecDeque<Entry>, window: usize, bytes: usize) -> Vec<Entry> {
    let mut group = Vec::new();
    let mut size = 0;
    while let Some(e) = pending.front() {
        let len = e.publish.payload_len();
        if !group.is_empty() && (group.len() >= window || size + len > bytes) {
            break;
        }
        size += len;
        group.extend(pending.pop_front());
    }
    group
}

/// Acknowledges the group, in the order its messages came.
/// Returns how many acknowledgements it queued.
async fn ack(name: &str, client: &Client, group: &[Entry], c: &Counters) -> u64 {
    let mut n = 0;
    for e in group {
        if !e.publish.needs_ack() {
            continue;
        }
        match client.ack(&e.publish).await {
            Ok(()) => {
                c.acknowledged.inc();
                n += 1;
            }
            Err(err) => {
                // The event loop is gone (the source is ending): the
                // message is durable; the broker sends it again and it is
                // stored again, marked mqtt.dup.
                warn!(source = %name, error = %err,
                    "cannot queue an MQTT acknowledgement; the broker will send the message again");
                return n;
            }
        }
    }
    n
}

/// Logs what the SUBACK granted; true when every filter has QoS 1 or more.
fn subscribed(name: &str, opts: &MqttSourceSettings, granted: &[Granted], c: &Counters) -> bool {
    let mut ok = granted.len() == opts.topics.len();
    for (topic, g) in opts.topics.iter().zip(granted) {
        match g {
            Granted::Qos(q) if *q >= 1 => {
                info!(source = %name, topic = %topic, granted_qos = q, asked_qos = opts.qos,
                    "subscribed");
            }
            Granted::Qos(q) => {
                ok = false;
                error!(source = %name, topic = %topic, granted_qos = q,
                    "the broker granted QoS 0 for this topic filter: its messages are not \
                     acknowledged, and one lost between the broker and holdfast is lost for good; \
                     allow QoS 1 for holdfast's client on the broker (mosquitto: max_qos)");
            }
            Granted::Refused(why) => {
                ok = false;
                error!(source = %name, topic = %topic, reason = %why,
                    "the broker refused the subscription (check the broker's ACL for this client \
                     and user); no messages arrive for this topic filter");
            }
        }
        if !matches!(g, Granted::Qos(q) if *q >= 1) {
            c.own
                .connection_errors
                .get_or_create(&SourceReasonLabels {
                    source: name.to_string(),
                    reason: "subscribe".to_string(),
                })
                .inc();
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::mqtt::client::Publish;

    fn entry(bytes: usize) -> Entry {
        Entry {
            publish: Publish::V311(rumqttc::Publish::new(
                "t",
                rumqttc::QoS::AtLeastOnce,
                vec![b'x'; bytes],
            )),
            store: true,
        }
    }

    #[test]
    fn a_group_stops_at_the_window_or_the_bytes_but_takes_at_least_one() {
        let mut pending: VecDeque<Entry> = (0..10).map(|_| entry(100)).collect();
        assert_eq!(take_group(&mut pending, 4, 1 << 20).len(), 4);
        assert_eq!(take_group(&mut pending, 100, 250).len(), 2);
        let mut big: VecDeque<Entry> = [entry(5000), entry(1)].into();
        assert_eq!(
            take_group(&mut big, 100, 100).len(),
            1,
            "one too large alone"
        );
        assert_eq!(take_group(&mut pending, 100, 1 << 20).len(), 4);
        assert!(pending.is_empty());
    }

    #[test]
    fn appends_wait_while_a_window_of_acknowledgements_is_unwritten() {
        let written = AtomicU64::new(10);
        assert!(!behind(10 + 3, &written, 4));
        assert!(behind(10 + 4, &written, 4));
        // PUBRECs rumqttc kept across a reconnect may be written after the
        // count was set back: never negative.
        assert!(!behind(5, &written, 4));
    }
}
