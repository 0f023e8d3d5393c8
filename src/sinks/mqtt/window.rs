//! The publishes on their way: which event each packet identifier stands
//! for, so that a PUBACK finishes the right event.
//!
//! rumqttc picks packet identifiers itself, in its event loop, and tells
//! them only as events: `Outgoing::Publish(pkid)` when a publish goes on
//! the wire (a new one, or one of the session's sent again after a
//! reconnect), `Outgoing::AwaitAck(pkid)` when a new publish must wait for
//! `pkid` to be acknowledged first (a "collision": the broker acked out of
//! order and the identifiers wrapped), and `Incoming::PubAck`. The
//! publishes reach the event loop through one channel, in the order the
//! sink submits them; so a new publish is the oldest one submitted and not
//! yet on the wire, and the window matches them up in that order.
//!
//! A disconnect: rumqttc moves the unacknowledged publishes, and what was
//! still in its channel, into its `pending` list and sends them first after
//! the reconnect ([`Window::order_of`] lets the link put them back in the
//! order they were first sent, and mark them DUP). If the broker answers
//! the reconnect without the session (it expired, or the broker lost it),
//! rumqttc drops that list: [`Window::session_lost`] then answers every
//! event that was in it, so that the runtime sends them again.
//!
//! Pure bookkeeping, no I/O: the link calls it under a mutex.

use std::collections::{HashMap, VecDeque};

use tokio::sync::oneshot;

use super::reason::Code;

/// What became of one publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ack {
    /// The broker's PUBACK: its reason code (0 under MQTT 3.1.1) and
    /// reason string.
    Puback { code: Code, reason: Option<String> },
    /// The broker came back without the session: the publish is gone
    /// unacknowledged and must be sent again.
    SessionLost,
}

/// One submitted publish: its place in the submission order, and who waits
/// for its ack.
#[derive(Debug)]
struct Slot {
    order: u64,
    reply: oneshot::Sender<Ack>,
}

/// What [`Window::sent`] found a publish on the wire to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Sent {
    /// A new publish, now waiting for its ack under this identifier.
    New,
    /// One of the session's publishes, sent again.
    Again,
    /// Nothing submitted matches (a bug, logged by the link).
    Unknown,
}

/// The publishes submitted and not yet acknowledged.
#[derive(Debug, Default)]
pub(super) struct Window {
    next_order: u64,
    /// Submitted, not yet on the wire, in submission order.
    waiting: VecDeque<Slot>,
    /// On the wire (or in rumqttc's pending list), by packet identifier.
    in_flight: HashMap<u16, Slot>,
    /// A new publish rumqttc holds until `pkid` is acknowledged.
    collided: Option<(u16, Slot)>,
    /// How many of `waiting` rumqttc took out of its channel into its
    /// pending list at the last disconnect (they are lost with the session).
    drained: usize,
}

impl Window {
    /// A publish about to be handed to rumqttc's channel (under the same
    /// lock, so that the order here is the channel's); `reply` gets its
    /// ack.
    pub fn submit(&mut self, reply: oneshot::Sender<Ack>) {
        let order = self.next_order;
        self.next_order += 1;
        self.waiting.push_back(Slot { order, reply });
    }

    /// Takes back the publish just submitted, which the channel refused.
    pub fn unsubmit(&mut self) {
        self.waiting.pop_back();
    }

    /// rumqttc put a publish with `pkid` on the wire.
    pub fn sent(&mut self, pkid: u16) -> Sent {
        if self.in_flight.contains_key(&pkid) {
            return Sent::Again;
        }
        let slot = match self.collided.take() {
            Some((p, slot)) if p == pkid => slot,
            other => {
                self.collided = other;
                match self.waiting.pop_front() {
                    Some(slot) => {
                        self.drained = self.drained.saturating_sub(1);
                        slot
                    }
                    None => return Sent::Unknown,
                }
            }
        };
        self.in_flight.insert(pkid, slot);
        Sent::New
    }

    /// rumqttc holds the next new publish until `pkid` is acknowledged.
    pub fn collided(&mut self, pkid: u16) {
        if let Some(slot) = self.waiting.pop_front() {
            self.drained = self.drained.saturating_sub(1);
            self.collided = Some((pkid, slot));
        }
    }

    /// The broker acknowledged `pkid`; false if no publish waited for it.
    pub fn acked(&mut self, pkid: u16, code: Code, reason: Option<String>) -> bool {
        match self.in_flight.remove(&pkid) {
            Some(slot) => {
                // The sender may have stopped waiting (the sink stops).
                let _ = slot.reply.send(Ack::Puback { code, reason });
                true
            }
            None => false,
        }
    }

    /// The connection broke; rumqttc's pending list now holds the
    /// publishes in flight and `drained` new ones taken from its channel.
    pub fn disconnected(&mut self, drained: usize) {
        self.drained = drained.min(self.waiting.len());
    }

    /// The broker answered the reconnect without the session: every
    /// publish in flight, the collided one and those drained at the
    /// disconnect are gone. Returns how many were answered; the link must
    /// clear rumqttc's collision too.
    pub fn session_lost(&mut self) -> usize {
        let mut lost: Vec<Slot> = self.in_flight.drain().map(|(_, s)| s).collect();
        lost.extend(self.collided.take().map(|(_, s)| s));
        let drained = self.drained.min(self.waiting.len());
        lost.extend(self.waiting.drain(..drained));
        self.drained = 0;
        let n = lost.len();
        for slot in lost {
            let _ = slot.reply.send(Ack::SessionLost);
        }
        n
    }

    /// The submission order of the publish in flight under `pkid`: the
    /// link sorts rumqttc's pending list by it after a disconnect.
    pub fn order_of(&self, pkid: u16) -> Option<u64> {
        self.in_flight.get(&pkid).map(|s| s.order)
    }

    /// Publishes submitted and not yet acknowledged.
    pub fn len(&self) -> usize {
        self.waiting.len() + self.in_flight.len() + usize::from(self.collided.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submit(w: &mut Window, n: usize) -> Vec<oneshot::Receiver<Ack>> {
        (0..n)
            .map(|_| {
                let (tx, rx) = oneshot::channel();
                w.submit(tx);
                rx
            })
            .collect()
    }

    fn got(rx: &mut oneshot::Receiver<Ack>) -> Option<Ack> {
        rx.try_recv().ok()
    }

    fn ok() -> Option<Ack> {
        Some(Ack::Puback {
            code: 0,
            reason: None,
        })
    }

    #[test]
    fn acks_out_of_order_finish_the_right_events() {
        let mut w = Window::default();
        let mut rx = submit(&mut w, 3);
        for pkid in [7, 8, 9] {
            assert_eq!(w.sent(pkid), Sent::New);
        }
        assert!(w.acked(9, 0x87, Some("acl".into())));
        assert!(w.acked(7, 0, None));
        assert_eq!(got(&mut rx[0]), ok());
        assert_eq!(got(&mut rx[1]), None);
        assert_eq!(
            got(&mut rx[2]),
            Some(Ack::Puback {
                code: 0x87,
                reason: Some("acl".into())
            })
        );
        assert!(!w.acked(9, 0, None), "an ack twice finishes nothing");
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn a_resend_after_a_reconnect_keeps_its_event() {
        let mut w = Window::default();
        let mut rx = submit(&mut w, 2);
        assert_eq!(w.sent(1), Sent::New);
        assert_eq!(w.sent(2), Sent::New);
        w.disconnected(0);
        // The session was kept: both go again under their identifiers.
        assert_eq!(w.sent(2), Sent::Again);
        assert_eq!(w.sent(1), Sent::Again);
        assert_eq!((w.order_of(1), w.order_of(2)), (Some(0), Some(1)));
        assert!(w.acked(1, 0, None) && w.acked(2, 0, None));
        assert_eq!((got(&mut rx[0]), got(&mut rx[1])), (ok(), ok()));
    }

    #[test]
    fn a_collided_publish_goes_out_under_the_identifier_it_waited_for() {
        let mut w = Window::default();
        let mut rx = submit(&mut w, 3);
        assert_eq!(w.sent(1), Sent::New);
        assert_eq!(w.sent(2), Sent::New);
        // The third wraps onto 1, still in flight.
        w.collided(1);
        assert!(w.acked(1, 0, None));
        assert_eq!(w.sent(1), Sent::New);
        assert!(w.acked(1, 0, None));
        assert_eq!(got(&mut rx[0]), ok());
        assert_eq!(got(&mut rx[2]), ok());
        assert_eq!(got(&mut rx[1]), None);
    }

    #[test]
    fn a_lost_session_answers_what_it_held_and_nothing_submitted_since() {
        let mut w = Window::default();
        let mut rx = submit(&mut w, 4);
        assert_eq!(w.sent(1), Sent::New);
        // 1 on the wire, 2 and 3 drained from the channel into rumqttc's
        // pending list; 4 submitted while reconnecting (still in the
        // channel, so rumqttc sends it after the reconnect).
        w.disconnected(2);
        assert_eq!(w.session_lost(), 3);
        for r in &mut rx[..3] {
            assert_eq!(got(r), Some(Ack::SessionLost));
        }
        assert_eq!(got(&mut rx[3]), None);
        assert_eq!(w.sent(1), Sent::New, "the fourth takes the next identifier");
        assert!(w.acked(1, 0, None));
        assert_eq!(got(&mut rx[3]), ok());
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn drained_publishes_that_went_out_are_not_lost_twice() {
        let mut w = Window::default();
        let _rx = submit(&mut w, 2);
        w.disconnected(2);
        // The session was kept: rumqttc sends both, then loses it on a
        // second reconnect with both in flight.
        assert_eq!(w.sent(1), Sent::New);
        assert_eq!(w.sent(2), Sent::New);
        w.disconnected(0);
        assert_eq!(w.session_lost(), 2);
        assert_eq!(w.len(), 0);
    }
}
