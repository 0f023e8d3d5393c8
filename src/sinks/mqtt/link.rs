//! The connection to the broker: one task owns rumqttc's event loop and
//! polls it for the whole run (never cancelled mid-poll, which could lose
//! a packet half-written), reconnecting with the connection's backoff
//! (full jitter), the password and TLS files read again at each attempt.
//!
//! The task keeps the [`Window`] true: which event each packet identifier
//! stands for, what each PUBACK says. After a disconnect it fixes what
//! rumqttc 0.25 leaves to its user in the pending list it resends first:
//! it marks those publishes DUP (rumqttc sends them again as they were),
//! and puts them back in the order they were first sent (rumqttc lists
//! them by packet identifier, which wraps). A reconnect the broker answers
//! without the session answers every publish it held as lost
//! ([`Window::session_lost`]), and clears rumqttc's collision, which would
//! otherwise wait for an identifier that never comes back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use rand::SeedableRng;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, info, warn};

use super::metrics::MqttSinkMetrics;
use super::reason::Code;
use super::window::{Sent, Window};
use crate::backoff::full_jitter;
use crate::metrics::SinkLabels;
use crate::mqtt::{ConnectError, Connection, Protocol};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

/// What the publishing side and the event loop's task share.
pub(super) struct Link {
    pub window: Mutex<Window>,
    /// The client, once the first event loop is made (its files read).
    client: OnceLock<Client>,
    /// Whether the event loop is connected; `send` waits on it.
    connected: watch::Sender<bool>,
    /// Why the last connect failed, and whether the broker refused the
    /// credentials (held like an HTTP 401).
    last_error: Mutex<Option<(bool, String)>>,
    /// The broker's Maximum Packet Size from the last CONNACK (MQTT 5), 0
    /// when it set none.
    pub broker_max_packet: AtomicU32,
    /// Whether the broker said it keeps no retained messages.
    pub retain_unavailable: AtomicBool,
    pub protocol: Protocol,
    /// The sink's series, looked up once: the in-flight gauge moves with
    /// every publish and every PUBACK.
    m: Series,
}

/// The sink's series of [`MqttSinkMetrics`].
struct Series {
    connected: Gauge,
    connection_errors: Counter,
    sessions_lost: Counter,
    in_flight: Gauge,
    window: Gauge,
}

/// The client of either protocol: how a publish enters the event loop's
/// channel.
enum Client {
    V311(rumqttc::AsyncClient),
    V5(rumqttc::v5::AsyncClient),
}

/// What one poll of the event loop came back with, whatever the protocol.
#[derive(Debug)]
enum Happened {
    ConnAck {
        session_present: bool,
        receive_max: Option<u16>,
        max_packet: Option<u32>,
        retain_available: Option<u8>,
    },
    Sent(u16),
    Collided(u16),
    Acked {
        pkid: u16,
        code: Code,
        reason: Option<String>,
    },
    Other,
}

/// A failed poll: the error's text, and whether the broker refused the
/// credentials.
struct Failure {
    refused: bool,
    message: String,
}

impl Link {
    pub fn new(protocol: Protocol, metrics: Arc<MqttSinkMetrics>, sink: &str) -> Link {
        Link {
            window: Mutex::new(Window::default()),
            client: OnceLock::new(),
            connected: watch::Sender::new(false),
            last_error: Mutex::new(None),
            broker_max_packet: AtomicU32::new(0),
            retain_unavailable: AtomicBool::new(false),
            protocol,
            m: {
                let labels = SinkLabels {
                    sink: sink.to_string(),
                };
                Series {
                    connected: metrics.connected.get_or_create(&labels).clone(),
                    connection_errors: metrics.connection_errors.get_or_create(&labels).clone(),
                    sessions_lost: metrics.sessions_lost.get_or_create(&labels).clone(),
                    in_flight: metrics.in_flight.get_or_create(&labels).clone(),
                    window: metrics.window.get_or_create(&labels).clone(),
                }
            },
        }
    }

    pub fn window(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits up to `wait` for a connection; `Err` with why there is none
    /// (and whether the broker refused the credentials).
    pub async fn ready(&self, wait: Duration) -> Result<(), (bool, String)> {
        let mut rx = self.connected.subscribe();
        if tokio::time::timeout(wait, rx.wait_for(|c| *c))
            .await
            .is_ok()
        {
            return Ok(());
        }
        let last = self
            .last_error
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        Err(last.unwrap_or((false, "not connected to the broker yet".into())))
    }

    /// Hands a publish to the event loop's channel; false if the channel
    /// is full or closed (the caller answers it as pushback). Call with
    /// the window locked, after [`Window::submit`].
    pub fn try_publish(&self, topic: String, retain: bool, payload: Bytes) -> bool {
        match self.client.get() {
            Some(Client::V311(c)) => c
                .try_publish(topic, rumqttc::QoS::AtLeastOnce, retain, payload)
                .is_ok(),
            Some(Client::V5(c)) => c
                .try_publish(
                    topic,
                    rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                    retain,
                    payload,
                )
                .is_ok(),
            None => false,
        }
    }

    fn set_in_flight(&self, n: usize) {
        self.m.in_flight.set(n as i64);
    }
}

/// An event loop of either protocol, as the task drives it.
trait Driver: Send + 'static {
    fn poll(&mut self) -> impl Future<Output = Result<Happened, Failure>> + Send;
    /// After a failed poll: marks the publishes rumqttc will send again
    /// DUP and orders them as first sent; returns how many new publishes
    /// it took out of its channel into the same list.
    fn after_error(&mut self, window: &Window) -> usize;
    /// Forgets the publish rumqttc holds back for a collision.
    fn clear_collision(&mut self);
    /// Reads the connection's files again into the options of the next
    /// connect.
    fn refresh(&mut self, conn: &Connection) -> Result<(), ConnectError>;
}

/// Sorts a pending list's publishes that have a packet identifier (sent
/// before) by their first send, ahead of the rest, and marks them DUP; the
/// count of publishes without one (taken from the channel, never sent).
macro_rules! fix_pending {
    ($pending:expr, $window:expr, $Request:path) => {{
        use $Request as R;
        let mut again = Vec::new();
        let mut rest = Vec::new();
        let mut fresh = 0;
        for r in $pending.drain(..) {
            match r {
                R::Publish(mut p) if p.pkid != 0 => {
                    p.dup = true;
                    let order = $window.order_of(p.pkid).unwrap_or(u64::MAX);
                    again.push((order, R::Publish(p)));
                }
                other => {
                    if matches!(other, R::Publish(_)) {
                        fresh += 1;
                    }
                    rest.push(other);
                }
            }
        }
        again.sort_by_key(|(order, _)| *order);
        $pending.extend(again.into_iter().map(|(_, r)| r));
        $pending.extend(rest);
        fresh
    }};
}

struct V5(rumqttc::v5::EventLoop);
struct V311(rumqttc::EventLoop);

impl Driver for V5 {
    async fn poll(&mut self) -> Result<Happened, Failure> {
        use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode as C, Packet, PubAckReason as R};
        use rumqttc::v5::{ConnectionError as E, Event, StateError};
        use rumqttc::Outgoing;
        match self.0.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(c))) => {
                let p = c.properties.as_ref();
                Ok(Happened::ConnAck {
                    session_present: c.session_present,
                    receive_max: p.and_then(|p| p.receive_max),
                    max_packet: p.and_then(|p| p.max_packet_size),
                    retain_available: p.and_then(|p| p.retain_available),
                })
            }
            Ok(Event::Incoming(Packet::PubAck(a))) => Ok(Happened::Acked {
                pkid: a.pkid,
                code: match a.reason {
                    R::Success => 0x00,
                    R::NoMatchingSubscribers => 0x10,
                    R::UnspecifiedError => 0x80,
                    R::ImplementationSpecificError => 0x83,
                    R::NotAuthorized => 0x87,
                    R::TopicNameInvalid => 0x90,
                    R::PacketIdentifierInUse => 0x91,
                    R::QuotaExceeded => 0x97,
                    R::PayloadFormatInvalid => 0x99,
                },
                reason: a.properties.and_then(|p| p.reason_string),
            }),
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => Ok(Happened::Sent(pkid)),
            Ok(Event::Outgoing(Outgoing::AwaitAck(pkid))) => Ok(Happened::Collided(pkid)),
            Ok(_) => Ok(Happened::Other),
            Err(e) => {
                let refused = matches!(
                    &e,
                    E::ConnectionRefused(C::BadUserNamePassword | C::NotAuthorized)
                        | E::MqttState(StateError::ConnFail {
                            reason: C::BadUserNamePassword | C::NotAuthorized
                        })
                );
                Err(Failure {
                    refused,
                    message: chain(&e),
                })
            }
        }
    }

    fn after_error(&mut self, window: &Window) -> usize {
        fix_pending!(self.0.pending, window, rumqttc::v5::Request)
    }

    fn clear_collision(&mut self) {
        self.0.state.collision = None;
    }

    fn refresh(&mut self, conn: &Connection) -> Result<(), ConnectError> {
        let fresh = conn.options_v5(false)?;
        let o = &mut self.0.options;
        // Only what the files give: everything else stays as first set.
        if let Some(login) = fresh.credentials() {
            o.set_credentials(login.username, login.password);
        }
        o.set_transport(fresh.transport());
        Ok(())
    }
}

impl Driver for V311 {
    async fn poll(&mut self) -> Result<Happened, Failure> {
        use rumqttc::{ConnectReturnCode as C, ConnectionError as E, Event, Outgoing, Packet};
        match self.0.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(c))) => Ok(Happened::ConnAck {
                session_present: c.session_present,
                receive_max: None,
                max_packet: None,
                retain_available: None,
            }),
            // 3.1.1 has no reason codes: a PUBACK is a delivery.
            Ok(Event::Incoming(Packet::PubAck(a))) => Ok(Happened::Acked {
                pkid: a.pkid,
                code: 0,
                reason: None,
            }),
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => Ok(Happened::Sent(pkid)),
            Ok(Event::Outgoing(Outgoing::AwaitAck(pkid))) => Ok(Happened::Collided(pkid)),
            Ok(_) => Ok(Happened::Other),
            Err(e) => Err(Failure {
                refused: matches!(
                    e,
                    E::ConnectionRefused(C::BadUserNamePassword | C::NotAuthorized)
                ),
                message: chain(&e),
            }),
        }
    }

    fn after_error(&mut self, window: &Window) -> usize {
        fix_pending!(self.0.pending, window, rumqttc::Request)
    }

    fn clear_collision(&mut self) {
        self.0.state.collision = None;
    }

    fn refresh(&mut self, conn: &Connection) -> Result<(), ConnectError> {
        let fresh = conn.options_v311(false)?;
        let o = &mut self.0.mqtt_options;
        if let Some(login) = fresh.credentials() {
            o.set_credentials(login.username, login.password);
        }
        o.set_transport(fresh.transport());
        Ok(())
    }
}

/// An error and its causes on one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cause = c.source();
    }
    s
}

/// What the event loop is made with besides the connection.
pub(super) struct Tuning {
    /// The most publishes in flight (`max_in_flight`).
    pub max_in_flight: u16,
    /// The largest packet the sink sends, for MQTT 3.1.1's client limit.
    pub max_packet: usize,
}

/// Runs the connection until `stop`: makes the event loop (waiting out
/// files that cannot be read), then polls it.
pub(super) async fn run(
    link: Arc<Link>,
    conn: Connection,
    tuning: Tuning,
    name: String,
    stop: CancellationToken,
) {
    let mut backoff = conn.backoff();
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    // The channel holds what the batches submitted and the event loop has
    // not taken yet: at most three batches of a third of the window, so it
    // never refuses a publish in practice.
    let cap = 2 * usize::from(tuning.max_in_flight) + 16;
    loop {
        let made = match conn.protocol {
            Protocol::V5 => conn.options_v5(false).map(|mut o| {
                // No Nagle: a batch's last publishes would otherwise wait
                // for the broker's delayed ACK (40 ms on Linux) before
                // they leave, once per batch.
                let mut net = o.network_options();
                net.set_tcp_nodelay(true);
                o.set_manual_acks(true)
                    .set_outgoing_inflight_upper_limit(tuning.max_in_flight)
                    .set_network_options(net);
                let (client, el) = rumqttc::v5::AsyncClient::new(o, cap);
                (Client::V5(client), None, Some(V5(el)))
            }),
            Protocol::V311 => conn.options_v311(false).map(|mut o| {
                o.set_manual_acks(true)
                    .set_inflight(tuning.max_in_flight)
                    // Incoming: acks only; outgoing: above anything the
                    // sink sends (it refuses larger events itself), so the
                    // client never fails a write for size and loops on it.
                    .set_max_packet_size(64 << 10, tuning.max_packet + 64);
                let (client, mut el) = rumqttc::AsyncClient::new(o, cap);
                let mut net = conn.network_options();
                net.set_tcp_nodelay(true);
                el.set_network_options(net);
                (Client::V311(client), Some(V311(el)), None)
            }),
        };
        match made {
            Ok((client, v311, v5)) => {
                let _ = link.client.set(client);
                match (v311, v5) {
                    (Some(d), _) => {
                        drive(d, &link, &conn, tuning.max_in_flight, &name, &stop).await
                    }
                    (_, Some(d)) => {
                        drive(d, &link, &conn, tuning.max_in_flight, &name, &stop).await
                    }
                    _ => {}
                }
                return;
            }
            Err(e) => {
                let message = e.to_string();
                error!(sink = %name, broker = %conn.url, error = %message,
                    "cannot connect to the MQTT broker: fix the file named here (the sink tries again \
                     with backoff; events wait in the log)");
                *link
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((false, message));
                let wait = full_jitter(backoff.current(), &mut rng);
                backoff.grow();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

/// Polls the event loop until `stop`.
async fn drive<D: Driver>(
    mut d: D,
    link: &Link,
    conn: &Connection,
    max_in_flight: u16,
    name: &str,
    stop: &CancellationToken,
) {
    let mut backoff = conn.backoff();
    let mut rng = rand::rngs::SmallRng::from_os_rng();
    let m = &link.m;
    let mut refresh = false;
    let mut failures = 0u32;
    // Registered once: polled for every packet, a fresh one each time
    // would join and leave the token's waiter list per packet.
    let stopping = stop.cancelled();
    tokio::pin!(stopping);
    loop {
        if refresh {
            if let Err(e) = d.refresh(conn) {
                error!(sink = %name, broker = %conn.url, error = %e,
                    "cannot reconnect to the MQTT broker: fix the file named here (the sink tries \
                     again with backoff; unacknowledged publishes are kept and sent again)");
                *link
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((false, e.to_string()));
                let wait = full_jitter(backoff.current(), &mut rng);
                backoff.grow();
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
            refresh = false;
        }
        // Cancelled only when the sink stops, with the event loop dropped.
        let polled = tokio::select! {
            _ = &mut stopping => return,
            p = d.poll() => p,
        };
        match polled {
            Ok(Happened::ConnAck {
                session_present,
                receive_max,
                max_packet,
                retain_available,
            }) => {
                backoff.reset();
                failures = 0;
                link.broker_max_packet
                    .store(max_packet.unwrap_or(0), Ordering::Relaxed);
                link.retain_unavailable
                    .store(retain_available == Some(0), Ordering::Relaxed);
                let limit = receive_max.map_or(max_in_flight, |r| r.min(max_in_flight));
                m.window.set(i64::from(limit));
                let (lost, in_flight) = {
                    let mut w = link.window();
                    let lost = if session_present { 0 } else { w.session_lost() };
                    (lost, w.len())
                };
                if lost > 0 {
                    d.clear_collision();
                    m.sessions_lost.inc();
                    warn!(sink = %name, broker = %conn.url, publishes = lost,
                        "the broker answered the reconnect without the session (it expired or the \
                         broker lost it): the publishes it had not acknowledged are sent again as \
                         new ones; raise session_expiry, or make the broker persist sessions");
                }
                link.set_in_flight(in_flight);
                *link
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
                info!(sink = %name, broker = %conn.url, session_present,
                    receive_maximum = ?receive_max, maximum_packet_size = ?max_packet,
                    in_flight_limit = limit,
                    resending = if session_present { in_flight } else { 0 },
                    "connected to the MQTT broker");
                if retain_available == Some(0) {
                    warn!(sink = %name, broker = %conn.url,
                        "the broker keeps no retained messages (Retain Available = 0): with \
                         retain = true it closes the connection at the first publish; set retain = false");
                }
                m.connected.set(1);
                link.connected.send_replace(true);
            }
            Ok(Happened::Sent(pkid)) => {
                let (sent, n) = {
                    let mut w = link.window();
                    (w.sent(pkid), w.len())
                };
                if sent == Sent::Unknown {
                    warn!(sink = %name, pkid,
                        "a publish went out that the sink did not submit (a bug): its PUBACK will \
                         finish nothing");
                }
                link.set_in_flight(n);
            }
            Ok(Happened::Collided(pkid)) => {
                debug!(sink = %name, pkid,
                    "the broker acknowledged out of order: the next publish waits for this identifier");
                link.window().collided(pkid);
            }
            Ok(Happened::Acked { pkid, code, reason }) => {
                let (known, n) = {
                    let mut w = link.window();
                    (w.acked(pkid, code, reason), w.len())
                };
                if !known {
                    debug!(sink = %name, pkid, "a PUBACK for no publish in flight (already answered)");
                }
                link.set_in_flight(n);
            }
            Ok(Happened::Other) => {}
            Err(f) => {
                let was = link.connected.send_replace(false);
                m.connected.set(0);
                m.connection_errors.inc();
                let unacked = {
                    let mut w = link.window();
                    let fresh = d.after_error(&w);
                    w.disconnected(fresh);
                    w.len()
                };
                let wait = full_jitter(backoff.current(), &mut rng);
                backoff.grow();
                failures = failures.saturating_add(1);
                if f.refused {
                    error!(sink = %name, broker = %conn.url, error = %f.message, retry_in = ?wait,
                        "the MQTT broker refused the credentials: fix username and password_file \
                         (or the client certificate); events wait in the log and nothing is \
                         committed until it accepts them");
                } else if was {
                    warn!(sink = %name, broker = %conn.url, error = %f.message, unacknowledged = unacked,
                        retry_in = ?wait,
                        "lost the connection to the MQTT broker: reconnecting with the session kept; \
                         unacknowledged publishes are sent again (DUP) before new ones");
                } else if failures <= 3 || failures.is_multiple_of(20) {
                    warn!(sink = %name, broker = %conn.url, error = %f.message, attempts = failures,
                        retry_in = ?wait, "cannot connect to the MQTT broker: retrying with backoff");
                } else {
                    debug!(sink = %name, broker = %conn.url, error = %f.message, attempts = failures,
                        "cannot connect to the MQTT broker");
                }
                *link
                    .last_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Some((f.refused, f.message));
                refresh = true;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::v5::mqttbytes::v5::Publish;
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::Request;
    use tokio::sync::oneshot;

    fn publish(pkid: u16) -> Request {
        let mut p = Publish::new("t", QoS::AtLeastOnce, vec![b'x'], None);
        p.pkid = pkid;
        Request::Publish(p)
    }

    /// What rumqttc 0.25 leaves after a disconnect, as `EventLoop::clean`
    /// builds it: the unacknowledged publishes by packet identifier (which
    /// wrapped: 1 and 2 were sent after 9 and 10), not marked DUP, then
    /// what it took from its channel (no identifier yet).
    #[test]
    fn resends_go_first_marked_dup_in_the_order_first_sent() {
        let mut window = Window::default();
        let mut keep = Vec::new();
        for _ in 0..5 {
            let (tx, rx) = oneshot::channel();
            window.submit(tx);
            keep.push(rx);
        }
        for pkid in [9, 10, 1, 2] {
            window.sent(pkid);
        }
        let o = rumqttc::v5::MqttOptions::new("t", "127.0.0.1", 1);
        let mut el = V5(rumqttc::v5::EventLoop::new(o, 10));
        el.0.pending
            .extend([publish(1), publish(2), publish(9), publish(10), publish(0)]);
        assert_eq!(el.after_error(&window), 1, "one new publish was drained");
        let order: Vec<(u16, bool)> =
            el.0.pending
                .iter()
                .map(|r| match r {
                    Request::Publish(p) => (p.pkid, p.dup),
                    other => panic!("{other:?}"),
                })
                .collect();
        assert_eq!(
            order,
            [(9, true), (10, true), (1, true), (2, true), (0, false)]
        );
    }
}
