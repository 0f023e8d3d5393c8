//! The broker connection, the same for MQTT 5 and 3.1.1: one rumqttc event
//! loop for the source's life, polled by its own task, which hands the
//! session loop what arrives ([`Polled`]) and reconnects with the kit's
//! backoff.
//!
//! Why one event loop, with its options replaced before each reconnect
//! (the kit reads the password and TLS files again), rather than a new one:
//! rumqttc keeps the packet ids of QoS 2 messages it answered with PUBREC
//! in the event loop's state, and a fresh state would take the broker's
//! PUBREL of such a message after a reconnect for a protocol error and drop
//! the connection again, for ever.
//!
//! Why a task of its own: the event loop must be polled all the time (it
//! sends PINGREQs and the acknowledgements the session queues) while an
//! append waits on the disk. What it hands over is bounded by the broker's
//! window (Receive Maximum, or its in-flight limit for 3.1.1) and by the
//! channel: when the channel is full the task stops reading the socket.

use std::time::Duration;

use rumqttc::v5::mqttbytes::v5 as p5;
use rumqttc::v5::mqttbytes::QoS as QoS5;
use rumqttc::QoS as QoS4;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::payload::Message;
use super::MqttSourceSettings;
use crate::mqtt::{ConnectError, Protocol};

/// A message as received: kept whole until it is acknowledged.
#[derive(Debug, Clone)]
pub enum Publish {
    V5(p5::Publish),
    V311(rumqttc::Publish),
}

impl Publish {
    pub fn message(&self) -> Message<'_> {
        match self {
            Publish::V5(p) => {
                let props = p.properties.as_ref();
                Message {
                    topic: &p.topic,
                    payload: &p.payload,
                    dup: p.dup,
                    user_properties: props.map_or(&[][..], |p| &p.user_properties),
                    content_type: props.and_then(|p| p.content_type.as_deref()),
                }
            }
            Publish::V311(p) => Message {
                topic: p.topic.as_bytes(),
                payload: &p.payload,
                dup: p.dup,
                user_properties: &[],
                content_type: None,
            },
        }
    }

    pub fn retain(&self) -> bool {
        match self {
            Publish::V5(p) => p.retain,
            Publish::V311(p) => p.retain,
        }
    }

    /// QoS 0 needs no acknowledgement.
    pub fn needs_ack(&self) -> bool {
        match self {
            Publish::V5(p) => p.qos != QoS5::AtMostOnce,
            Publish::V311(p) => p.qos != QoS4::AtMostOnce,
        }
    }

    pub fn payload_len(&self) -> usize {
        match self {
            Publish::V5(p) => p.payload.len(),
            Publish::V311(p) => p.payload.len(),
        }
    }

    pub fn topic_lossy(&self) -> String {
        String::from_utf8_lossy(self.message().topic).into_owned()
    }
}

/// One subscription's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Granted {
    Qos(u8),
    Refused(String),
}

/// What the event loop's task hands the session loop, in order.
#[derive(Debug)]
pub enum Polled {
    /// A connection is up (CONNACK accepted).
    Connected {
        session_present: bool,
    },
    /// The SUBACK: one answer per filter, in order.
    Subscribed(Vec<Granted>),
    Publish(Publish),
    /// The connection failed or ended; the task reconnects after `wait`.
    Down {
        reason: &'static str,
        error: String,
        wait: Duration,
    },
}

/// The handle the session loop acknowledges and subscribes through.
#[derive(Clone)]
pub enum Client {
    V5(rumqttc::v5::AsyncClient),
    V311(rumqttc::AsyncClient),
}

impl Client {
    /// Queues the PUBACK (QoS 1) or PUBREC (QoS 2) of `p`. Waits only while
    /// the request channel is full: the event loop's task takes one
    /// request per poll, after the incoming packets it read in a bunch, so
    /// acknowledgements can queue up behind a burst of messages.
    pub async fn ack(&self, p: &Publish) -> Result<(), String> {
        match (self, p) {
            (Client::V5(c), Publish::V5(p)) => c.ack(p).await.map_err(|e| e.to_string()),
            (Client::V311(c), Publish::V311(p)) => c.ack(p).await.map_err(|e| e.to_string()),
            _ => Err("a message of the other protocol version".into()),
        }
    }

    /// Subscribes to every filter at `qos`; retained messages only for a
    /// new subscription when `retained` (MQTT 5's Retain Handling 1),
    /// never otherwise (2). 3.1.1 has no such option: the session drops
    /// messages with the retain flag instead.
    pub fn subscribe(&self, topics: &[String], qos: u8, retained: bool) -> Result<(), String> {
        match self {
            Client::V5(c) => {
                let filters = topics.iter().map(|t| {
                    let mut f = p5::Filter::new(t.clone(), qos5(qos));
                    f.retain_forward_rule = if retained {
                        p5::RetainForwardRule::OnNewSubscribe
                    } else {
                        p5::RetainForwardRule::Never
                    };
                    f
                });
                c.try_subscribe_many(filters).map_err(|e| e.to_string())
            }
            Client::V311(c) => {
                let filters = topics
                    .iter()
                    .map(|t| rumqttc::SubscribeFilter::new(t.clone(), qos4(qos)));
                c.try_subscribe_many(filters).map_err(|e| e.to_string())
            }
        }
    }

    /// A DISCONNECT, so the broker keeps the session without waiting for
    /// the keep-alive to run out.
    pub fn disconnect(&self) {
        let _ = match self {
            Client::V5(c) => c.try_disconnect().map_err(|e| e.to_string()),
            Client::V311(c) => c.try_disconnect().map_err(|e| e.to_string()),
        };
    }
}

fn qos5(q: u8) -> QoS5 {
    if q >= 2 {
        QoS5::ExactlyOnce
    } else {
        QoS5::AtLeastOnce
    }
}

fn qos4(q: u8) -> QoS4 {
    if q >= 2 {
        QoS4::ExactlyOnce
    } else {
        QoS4::AtLeastOnce
    }
}

/// The largest packet the source takes: `max_payload_size` with room for
/// the topic and properties, so that a payload a little over the limit is
/// still read, counted and acknowledged. MQTT 5 tells the broker, which
/// then never sends a larger one (mosquitto drops it and logs it); 3.1.1
/// cannot, and such a packet ends the connection (see the docs).
pub fn max_packet_size(max_payload_size: usize) -> usize {
    max_payload_size
        .saturating_mul(2)
        .saturating_add(64 << 10)
        .min(super::config::MQTT_MAX_PAYLOAD as usize + 5)
}

/// The options of the next connect: the kit's (files read now), with what
/// the source chooses: manual acknowledgements, the window, the packet
/// bound.
// Made once per connect and moved at once into the event loop: boxing
// would save nothing.
#[allow(clippy::large_enum_variant)]
enum Options {
    V5(rumqttc::v5::MqttOptions),
    V311(rumqttc::MqttOptions, rumqttc::NetworkOptions),
}

fn options(s: &MqttSourceSettings) -> Result<Options, ConnectError> {
    let c = &s.connection;
    let packet = max_packet_size(s.max_payload_size);
    Ok(match c.protocol {
        Protocol::V5 => {
            let mut o = c.options_v5(false)?;
            o.set_manual_acks(true)
                .set_receive_maximum(Some(s.receive_maximum))
                .set_max_packet_size(Some(packet.min(u32::MAX as usize) as u32))
                .set_request_channel_capacity(REQUESTS);
            Options::V5(o)
        }
        Protocol::V311 => {
            let mut o = c.options_v311(false)?;
            o.set_manual_acks(true)
                .set_max_packet_size(packet, 64 << 10)
                .set_request_channel_capacity(REQUESTS);
            Options::V311(o, c.network_options())
        }
    })
}

/// How many acknowledgements the event loop's request channel holds: more
/// than can ever be waiting (the messages in the session's channel and in
/// its groups), so the session never waits on it for long and never while
/// the event loop's task waits on the session. It grows as it fills; the
/// capacity costs nothing.
const REQUESTS: usize = 1 << 17;

/// How many messages the channel to the session holds: more than any
/// window, so the event loop's task never waits on the session (while it
/// waits, it writes no acknowledgement). What it holds is bounded by the
/// broker's window, not by this capacity (the channel grows as it fills).
pub fn channel_capacity(_s: &MqttSourceSettings) -> usize {
    1 << 17
}

/// The event loop's task: connects (the options read now), hands over
/// what arrives, and after a failure waits the backoff and reconnects with
/// fresh options, until `end` (which the session cancels after its last
/// acknowledgements and DISCONNECT are out, or at once) or its DISCONNECT
/// went out. Returns the client, the receiver and the task.
pub fn start(
    s: &MqttSourceSettings,
    end: CancellationToken,
    written: Arc<AtomicU64>,
) -> Result<(Client, mpsc::Receiver<Polled>, tokio::task::JoinHandle<()>), ConnectError> {
    let cap = channel_capacity(s);
    let (tx, rx) = mpsc::channel(cap);
    let settings = s.clone();
    // The first options are made here so that a client exists to
    // subscribe and acknowledge through; a file that cannot be read now
    // fails the start (the supervisor retries it with its backoff).
    let first = options(s)?;
    let (client, task) = match first {
        Options::V5(o) => {
            let (client, el) = rumqttc::v5::AsyncClient::new(o, REQUESTS);
            let task = tokio::spawn(poll_v5(el, settings, tx, end, written));
            (Client::V5(client), task)
        }
        Options::V311(o, net) => {
            let (client, mut el) = rumqttc::AsyncClient::new(o, REQUESTS);
            el.set_network_options(net);
            let task = tokio::spawn(poll_v311(el, settings, tx, end, written));
            (Client::V311(client), task)
        }
    };
    Ok((client, rx, task))
}

/// Why a connection ended, as the metric's `reason`.
fn reason_v5(e: &rumqttc::v5::ConnectionError, was_up: bool) -> &'static str {
    use rumqttc::v5::ConnectionError as E;
    match e {
        E::ConnectionRefused(_) => "refused",
        _ if was_up => "lost",
        _ => "connect",
    }
}

fn reason_v311(e: &rumqttc::ConnectionError, was_up: bool) -> &'static str {
    use rumqttc::ConnectionError as E;
    match e {
        E::ConnectionRefused(_) => "refused",
        _ if was_up => "lost",
        _ => "connect",
    }
}

/// After a failure: the backoff's wait, then fresh options (`refresh`
/// reads the files) until they load. False when the source is ending.
async fn wait_and_refresh(
    mut refresh: impl FnMut() -> Result<(), ConnectError>,
    mut wait: Duration,
    backoff: &mut crate::backoff::Backoff,
    tx: &mpsc::Sender<Polled>,
    end: &CancellationToken,
) -> bool {
    loop {
        tokio::select! {
            _ = end.cancelled() => return false,
            _ = tokio::time::sleep(wait) => {}
        }
        match refresh() {
            Ok(()) => return true,
            Err(e) => {
                wait = next_wait(backoff);
                let down = Polled::Down {
                    reason: "files",
                    error: e.to_string(),
                    wait,
                };
                if tx.send(down).await.is_err() {
                    return false;
                }
            }
        }
    }
}

async fn poll_v5(
    mut el: rumqttc::v5::EventLoop,
    settings: MqttSourceSettings,
    tx: mpsc::Sender<Polled>,
    end: CancellationToken,
    written: Arc<AtomicU64>,
) {
    use rumqttc::v5::{Event, Incoming};
    let mut backoff = settings.connection.backoff();
    let mut up = false;
    loop {
        let polled = tokio::select! {
            _ = end.cancelled() => return,
            e = el.poll() => e,
        };
        let out = match polled {
            Ok(Event::Incoming(Incoming::ConnAck(ack))) => {
                up = true;
                backoff.reset();
                Polled::Connected {
                    session_present: ack.session_present,
                }
            }
            Ok(Event::Incoming(Incoming::SubAck(ack))) => Polled::Subscribed(
                ack.return_codes
                    .iter()
                    .map(|c| match c {
                        p5::SubscribeReasonCode::Success(q) => Granted::Qos(*q as u8),
                        other => Granted::Refused(format!("{other:?}")),
                    })
                    .collect(),
            ),
            Ok(Event::Incoming(Incoming::Publish(p))) => Polled::Publish(Publish::V5(p)),
            // The session's DISCONNECT is out: the broker keeps the session.
            Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) => return,
            Ok(Event::Outgoing(rumqttc::Outgoing::PubAck(_) | rumqttc::Outgoing::PubRec(_))) => {
                written.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                let reason = reason_v5(&e, up);
                up = false;
                let wait = next_wait(&mut backoff);
                let down = Polled::Down {
                    reason,
                    error: e.to_string(),
                    wait,
                };
                if tx.send(down).await.is_err() {
                    return;
                }
                let refresh = || match options(&settings)? {
                    Options::V5(o) => {
                        el.options = o;
                        Ok(())
                    }
                    _ => unreachable!("the protocol does not change"),
                };
                if !wait_and_refresh(refresh, wait, &mut backoff, &tx, &end).await {
                    return;
                }
                continue;
            }
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

async fn poll_v311(
    mut el: rumqttc::EventLoop,
    settings: MqttSourceSettings,
    tx: mpsc::Sender<Polled>,
    end: CancellationToken,
    written: Arc<AtomicU64>,
) {
    use rumqttc::{Event, Incoming};
    let mut backoff = settings.connection.backoff();
    let mut up = false;
    loop {
        let polled = tokio::select! {
            _ = end.cancelled() => return,
            e = el.poll() => e,
        };
        let out = match polled {
            Ok(Event::Incoming(Incoming::ConnAck(ack))) => {
                up = true;
                backoff.reset();
                Polled::Connected {
                    session_present: ack.session_present,
                }
            }
            Ok(Event::Incoming(Incoming::SubAck(ack))) => Polled::Subscribed(
                ack.return_codes
                    .iter()
                    .map(|c| match c {
                        rumqttc::SubscribeReasonCode::Success(q) => Granted::Qos(*q as u8),
                        rumqttc::SubscribeReasonCode::Failure => {
                            Granted::Refused("Failure (0x80)".into())
                        }
                    })
                    .collect(),
            ),
            Ok(Event::Incoming(Incoming::Publish(p))) => Polled::Publish(Publish::V311(p)),
            // The session's DISCONNECT is out: the broker keeps the session.
            Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect)) => return,
            Ok(Event::Outgoing(rumqttc::Outgoing::PubAck(_) | rumqttc::Outgoing::PubRec(_))) => {
                written.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            Ok(_) => continue,
            Err(e) => {
                let reason = reason_v311(&e, up);
                up = false;
                let wait = next_wait(&mut backoff);
                let down = Polled::Down {
                    reason,
                    error: e.to_string(),
                    wait,
                };
                if tx.send(down).await.is_err() {
                    return;
                }
                let refresh = || match options(&settings)? {
                    Options::V311(o, ..) => {
                        el.mqtt_options = o;
                        Ok(())
                    }
                    _ => unreachable!("the protocol does not change"),
                };
                if !wait_and_refresh(refresh, wait, &mut backoff, &tx, &end).await {
                    return;
                }
                continue;
            }
        };
        if tx.send(out).await.is_err() {
            return;
        }
    }
}

/// The backoff's wait, doubled for the next failure.
fn next_wait(backoff: &mut crate::backoff::Backoff) -> Duration {
    let wait = backoff.current();
    backoff.grow();
    wait
}
