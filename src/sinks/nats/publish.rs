//! One batch published: a message per event, all in flight at once (the
//! JetStream context bounds the acks outstanding), then each ack awaited
//! and classified. Nothing is retried here: the shared runtime resends
//! what the answer asks for, with the same `Nats-Msg-Id`.

use std::future::IntoFuture;
use std::sync::Arc;

use async_nats::connection::State;
use async_nats::jetstream::message::PublishMessage;
use async_nats::Subject;
use bytes::Bytes;

use super::classify::{self, Class};
use super::connect::Link;
use super::{NatsEncoding, NatsOptions};
use crate::sinks::delivery::item::Item;
use crate::sinks::delivery::keys::push_hex;
use crate::sinks::delivery::transport::{Answer, TransportKind};
use crate::sinks::document::{self, Layout};
use crate::sinks::otlp_request::export_request;
use crate::sinks::template::{Rendered, Template};

pub(super) struct Publisher {
    link: Arc<Link>,
    subject: Template,
    encoding: NatsEncoding,
    layout: Layout,
}

impl Publisher {
    pub fn new(o: &NatsOptions, link: Arc<Link>) -> Publisher {
        Publisher {
            link,
            subject: o.subject.clone(),
            encoding: o.encoding,
            layout: o.document,
        }
    }

    /// Publishes `items`; the answer for the runtime and the payload bytes
    /// sent.
    pub async fn publish(&self, items: &[Item]) -> (Answer, usize) {
        let conn = match self.link.conn().await {
            Ok(c) => c,
            Err(message) => {
                let kind = TransportKind::Connect;
                return (Answer::Transport { kind, message }, 0);
            }
        };
        if conn.client.connection_state() != State::Connected {
            // Publishing now would only fill the client's buffer and wait
            // out every ack's timeout.
            if let Some(why) = self.link.refused() {
                return (classify::refused(&why), 0);
            }
            let message = "not connected to any NATS server (reconnecting)".to_string();
            let kind = TransportKind::Connect;
            return (Answer::Transport { kind, message }, 0);
        }
        let mut cache = Rendered::default();
        let mut shared = document::Shared::new(self.layout);
        let mut id = String::with_capacity(32);
        let mut wire = 0;
        let mut pending = Vec::with_capacity(items.len());
        // Each subject of the batch once, in order: consecutive events
        // share the last one (a reference count, not a copy per message),
        // and an event that found no stream names the one to ask about.
        let mut subjects: Vec<Subject> = Vec::new();
        for it in items {
            let rendered = self.subject.render_cached(&it.ev, &mut cache);
            if subjects.last().is_none_or(|s| s.as_str() != rendered) {
                subjects.push(Subject::from(rendered));
            }
            let payload = self.payload(it, &mut shared);
            wire += payload.len();
            id.clear();
            push_hex(&mut id, &it.ev.id.0);
            // No `Nats-Expected-Stream`: the server would scan every
            // message's headers for it; the stream named in each ack is
            // checked here instead (`classify::ack`).
            let msg = PublishMessage::build().payload(payload).message_id(&id);
            let subject = subjects[subjects.len() - 1].clone();
            let sent = conn.js.send_publish(subject, msg).await;
            pending.push((subjects.len() - 1, sent));
        }
        // One deadline for the batch's acks, not one per ack: the client
        // starts an ack's own timeout only when it is awaited, so after a
        // server's kill -9 (publishes lost on the dead connection or route)
        // awaiting them in turn took `request_timeout` once per lost
        // publish: minutes for a batch, and delivery looked stuck.
        let deadline = tokio::time::Instant::now() + self.link.ack_timeout;
        let mut classes = Vec::with_capacity(items.len());
        let mut no_stream = None;
        for (subject, sent) in pending {
            let class = match sent {
                Ok(ack) => match tokio::time::timeout_at(deadline, ack.into_future()).await {
                    Ok(r) => classify::ack(r, &self.link.stream),
                    Err(_) => Class::TimedOut,
                },
                Err(e) => classify::error(&e),
            };
            if class == Class::NoStream && no_stream.is_none() {
                no_stream = Some(subject);
            }
            classes.push(class);
        }
        let state = match no_stream {
            Some(s) => Some(self.link.stream_state(conn, &subjects[s]).await),
            None => None,
        };
        (classify::judge(&classes, state.as_ref()), wire)
    }

    /// `shared`: what the JSON documents of one log batch share, rendered
    /// once.
    fn payload(&self, it: &Item, shared: &mut document::Shared) -> Bytes {
        match self.encoding {
            NatsEncoding::Otlp => Bytes::from(export_request(it)),
            NatsEncoding::Json => {
                let mut out = Vec::with_capacity(it.data.len() * 3 + 256);
                // `Nats-Msg-Id` is the event id.
                document::write_with(&mut out, &it.ev, None, true, shared);
                Bytes::from(out)
            }
        }
    }
}
