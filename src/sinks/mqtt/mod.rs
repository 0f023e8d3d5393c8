//! The `mqtt` sink: every event published at QoS 1 to an MQTT broker
//! (MQTT 5 or 3.1.1), on a topic rendered from the event, and committed
//! only on its PUBACK.
//!
//! The shared sink runtime reads the log, batches, retries, quarantines and
//! commits (`delivery/`); this sink is its own `Transport`. A batch (up to
//! a third of `max_in_flight` events) is handed to rumqttc's event loop as
//! publishes, and each PUBACK answers its event ([`reason`]: MQTT 5 reason
//! codes below 0x80 deliver, the others retry or quarantine by a table).
//! Three batches are on their way at a time, all within the window: while
//! the last PUBACKs of one come back, the next two are on the wire, so the
//! connection does not drain between batches (a drained connection waits
//! out the broker's Nagle and this side's delayed ACK, up to 40 ms a batch
//! on Linux), and publishes still leave in bursts rather than one per
//! PUBACK, which is what a full window with more queued behind it turns
//! into (measured: a fifth fewer events/s through mosquitto with a
//! subscriber). It drains only when the broker answers two batches faster
//! than one is rendered (mosquitto with no subscriber). Batches start in
//! log order (the runtime's turns up to `prepare`, then a chain here up to
//! the client's channel), so a topic's new events go out in log order; only
//! an event retried after a refusal may follow newer ones. The runtime's
//! watermark moves the cursor over the events acknowledged in order, up to
//! the first one still in flight.
//!
//! The connection ([`link`]) is one task polling the event loop for the
//! whole run, with a persistent session (MQTT 5 `clean_start = false` and a
//! Session Expiry Interval; 3.1.1 `clean_session = false`): after a
//! reconnect, the publishes not acknowledged are sent again, marked DUP and
//! in their first order, before anything new; a broker that lost the
//! session makes them new publishes again ([`window`]). A kill -9 of
//! holdfast loses the client's state: after the restart, everything after
//! the cursor is published again, at most the window (`max_in_flight`)
//! that was sent, plus the commits the log had not yet written.
//!
//! | file | concept |
//! |------|---------|
//! | `config.rs` | the table as written, its check, its lines in `holdfast check`, the component |
//! | `link.rs` | the connection: the event loop's task, reconnects, DUP and order of resends, what a CONNACK says |
//! | `window.rs` | the publishes in flight: packet identifiers to events, acks, a lost session |
//! | `publish.rs` | one event as a publish: topic checked, payload, packet size |
//! | `reason.rs` | what each PUBACK reason code does to its event |
//! | `metrics.rs` | the sink's own families: the connection, the publishes in flight |

mod config;
mod link;
pub(crate) mod metrics;
mod publish;
mod reason;
mod window;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;

use self::link::Link;
use self::window::Ack;
use super::delivery::item::Item;
use super::delivery::options::DeliveryOptions;
use super::delivery::transport::{
    short_text, Answer, BodyVerdict, ItemAnswer, Sent, Transport, TransportKind,
};
use super::document::{self, Layout};
use super::template::{Rendered, Template};
use crate::mqtt::Connection;

/// What an `mqtt` sink runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct MqttSinkOptions {
    /// The delivery options: batches of `max_in_flight` events, one in
    /// flight at a time, retries and the quarantine.
    pub common: DeliveryOptions,
    /// The broker, the identity and the session.
    pub connection: Connection,
    /// The topic of each event.
    pub topic: Template,
    pub payload: Payload,
    /// What each JSON document repeats (`payload = "json"`).
    pub document: Layout,
    /// Publish with the RETAIN flag.
    pub retain: bool,
    /// The most publishes awaiting their PUBACK (lowered by the broker's
    /// Receive Maximum under MQTT 5).
    pub max_in_flight: u16,
    /// The largest payload published; a larger event is quarantined.
    pub max_payload_size: usize,
}

/// What each publish carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload {
    /// The JSON document the `nats` and `elasticsearch` sinks write, the
    /// event id included.
    Json,
    /// One OTLP `Export*ServiceRequest` per event, protobuf.
    OtlpProto,
    /// The same request in the OTLP/JSON mapping.
    OtlpJson,
}

impl Payload {
    pub fn as_str(self) -> &'static str {
        match self {
            Payload::Json => "json",
            Payload::OtlpProto => "otlp_proto",
            Payload::OtlpJson => "otlp_json",
        }
    }
}

/// The protocol object of one run: the settings and the link to the
/// broker's event loop.
pub(crate) struct Mqtt {
    link: Arc<Link>,
    topic: Template,
    payload: Payload,
    layout: Layout,
    retain: bool,
    max_payload_size: usize,
    /// How long a batch waits for a connection before the runtime is told
    /// the broker is down (and backs off).
    connect_wait: std::time::Duration,
    target: reqwest::Url,
    stop: CancellationToken,
    /// Fires when the batch prepared last has handed its publishes to the
    /// client (or gave up): the next batch hands its own after it.
    pub(super) last_start: std::sync::Mutex<Option<oneshot::Receiver<()>>>,
}

/// A batch on its way to the client: its events, and its place in the
/// order batches are handed over.
pub(crate) struct Publishing<'a> {
    items: &'a [Item],
    after: Option<oneshot::Receiver<()>>,
    /// Fired (or dropped) once this batch's publishes are in the channel.
    handed: oneshot::Sender<()>,
}

/// One event of a batch on its way: answered before it was sent, or
/// waiting for its PUBACK.
enum Pending {
    Answered(ItemAnswer),
    Waiting(oneshot::Receiver<Ack>),
}

impl Mqtt {
    /// Publishes `items` once the batch before has handed its own to the
    /// client, and waits for every PUBACK (or the stop); the answer and the
    /// payload bytes handed to the client.
    async fn publish(&self, p: Publishing<'_>) -> (Answer, usize) {
        let Publishing {
            items,
            after,
            handed,
        } = p;
        if let Some(before) = after {
            // An error is the batch before giving up: its turn is over.
            let _ = before.await;
        }
        if let Err((refused, message)) = self.link.ready(self.connect_wait).await {
            let answer = if refused {
                // Held like an HTTP 401: kept, retried slowly, loudly.
                Answer::Refused {
                    status: 401,
                    retry_after: None,
                    error: short_text(message.as_bytes()),
                }
            } else {
                Answer::Transport {
                    kind: TransportKind::Connect,
                    message,
                }
            };
            return (answer, 0);
        }
        let protocol = self.link.protocol;
        let broker_max = self.link.broker_max_packet.load(Ordering::Relaxed) as usize;
        let mut cache = Rendered::default();
        let mut shared = document::Shared::new(self.layout);
        let mut wire = 0;
        // Encoded first, handed over under one lock: the event loop's task
        // takes the same lock for each event it reports.
        let mut ready: Vec<Result<(String, Bytes), ItemAnswer>> = Vec::with_capacity(items.len());
        for it in items {
            let topic = self.topic.render_cached(&it.ev, &mut cache);
            if let Some(problem) = publish::topic_problem(topic) {
                ready.push(Err(ItemAnswer {
                    status: 400,
                    error: Some(problem),
                }));
                continue;
            }
            let body = publish::payload(self.payload, it, &mut shared);
            let size = publish::packet_size(protocol, topic.len(), body.len());
            let too_large = if body.len() > self.max_payload_size {
                Some(format!(
                    "the payload is {} bytes, over max_payload_size ({} bytes)",
                    body.len(),
                    self.max_payload_size
                ))
            } else if broker_max > 0 && size > broker_max {
                Some(format!(
                    "the publish is {size} bytes, over the broker's Maximum Packet Size \
                     ({broker_max} bytes)"
                ))
            } else {
                None
            };
            match too_large {
                Some(error) => ready.push(Err(ItemAnswer {
                    status: 413,
                    error: Some(error),
                })),
                None => {
                    wire += body.len();
                    ready.push(Ok((topic.to_string(), body)));
                }
            }
        }
        let mut pending = Vec::with_capacity(items.len());
        {
            let mut w = self.link.window();
            for r in ready {
                pending.push(match r {
                    Err(answer) => Pending::Answered(answer),
                    Ok((topic, body)) => {
                        let (tx, rx) = oneshot::channel();
                        w.submit(tx);
                        if self.link.try_publish(topic, self.retain, body) {
                            Pending::Waiting(rx)
                        } else {
                            w.unsubmit();
                            Pending::Answered(ItemAnswer {
                                status: 429,
                                error: Some("the MQTT client's queue is full".into()),
                            })
                        }
                    }
                });
            }
        }
        let _ = handed.send(());
        // No deadline while connected or reconnecting: rumqttc keeps every
        // publish until its PUBACK and sends it again after a reconnect, so
        // a timeout here would only publish the events a second time.
        let mut answers = Vec::with_capacity(pending.len());
        let mut all_delivered = true;
        // One registration for the batch, not one per event.
        let stopping = self.stop.cancelled();
        tokio::pin!(stopping);
        for p in pending {
            let answer = match p {
                Pending::Answered(a) => a,
                Pending::Waiting(rx) => {
                    let got = tokio::select! {
                        biased;
                        r = rx => r,
                        _ = &mut stopping => {
                            let message = "the sink is stopping: publishes not yet acknowledged \
                                are sent again after the restart".to_string();
                            return (Answer::Transport { kind: TransportKind::Connection, message }, wire);
                        }
                    };
                    match got {
                        Ok(Ack::Puback { code, reason }) => reason::answer(code, reason.as_deref()),
                        Ok(Ack::SessionLost) => ItemAnswer {
                            status: 429,
                            error: Some(
                                "the broker lost the session before acknowledging it".into(),
                            ),
                        },
                        Err(_) => ItemAnswer {
                            status: 429,
                            error: Some("the connection to the broker ended".into()),
                        },
                    }
                }
            };
            all_delivered &= answer.status == 201;
            answers.push(answer);
        }
        let verdict = if all_delivered {
            BodyVerdict::Accepted
        } else {
            BodyVerdict::PerItem(answers)
        };
        let answer = Answer::Read {
            status: 200,
            verdict,
        };
        (answer, wire)
    }
}

impl Transport for Mqtt {
    /// The events themselves: each is encoded as it is published.
    type Request<'a> = Publishing<'a>;
    /// The PUBACKs, already judged.
    type Reply = Answer;

    fn starts_in_order(&self) -> bool {
        true
    }

    /// Takes the batch's place after the one prepared before it.
    fn prepare<'a>(&'a self, items: &'a [Item], _request: usize) -> Publishing<'a> {
        let (handed, next) = oneshot::channel();
        let after = self
            .last_start
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .replace(next);
        Publishing {
            items,
            after,
            handed,
        }
    }

    async fn send<'a>(&'a self, request: Publishing<'a>) -> Sent<Answer> {
        let (reply, wire) = self.publish(request).await;
        Sent {
            target: self.target.clone(),
            reply,
            wire,
        }
    }

    fn judge(&self, reply: Answer, _events: usize) -> Answer {
        reply
    }
}
