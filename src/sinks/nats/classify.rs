//! What a JetStream publish came back with, in the shared retry policy's
//! terms (`delivery/retry/`): each event's ack or error becomes a [`Class`], and a
//! batch's classes become one [`Answer`].
//!
//! | what came back | becomes |
//! |----------------|---------|
//! | PubAck | delivered (per-item 201) |
//! | PubAck with `duplicate: true` | duplicate (per-item 409): delivered earlier, counted as a duplicate |
//! | no responders, and the stream exists and captures the subject (an election, a restart) | retry with backoff (a whole batch: 503; else per-item pushback) |
//! | no ack within `request_timeout`, a lost connection, a JetStream 5xx, a full stream under `discard: new` | retry with backoff (a whole batch: timeout / 503; else per-item pushback, never counted toward `max_attempts`) |
//! | stream not found, subject not bound to the stream, or bound to another stream | hold: keep the data, retry slowly, log loudly (404, like a wrong endpoint) |
//! | credentials refused by the servers | hold (401) |
//! | over the servers' `max_payload` or the stream's `max_msg_size` | quarantine that event with the server's answer (per-item 413) |
//! | any other JetStream 4xx | quarantine that event (per-item, its code) |
//!
//! Per-item retries are answered as 429s on purpose: the runtime then resends
//! the events soon without counting them toward `max_attempts`, since a
//! broker that lost a leader for a moment is no reason to quarantine data.

use async_nats::jetstream::context::{PublishError, PublishErrorKind};
use async_nats::jetstream::publish::PublishAck;
use async_nats::jetstream::ErrorCode;

use super::connect::StreamState;
use crate::sinks::delivery::transport::{
    short_text, Answer, BodyVerdict, ItemAnswer, TransportKind,
};

/// One event's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Class {
    Stored {
        duplicate: bool,
    },
    /// Nothing answered for the subject: no stream captures it, or its
    /// stream has no leader right now. [`StreamState`] tells which.
    NoStream,
    /// No ack in time: the server may have stored it (a resend with the
    /// same `Nats-Msg-Id` is then dropped as a duplicate).
    TimedOut,
    /// Worth sending again soon.
    Transient(String),
    /// The stream setup is wrong for this sink.
    Config(String),
    TooLarge(String),
    Rejected {
        status: u16,
        error: String,
    },
}

/// The class of an ack; `stream` is the stream the sink publishes to.
pub(super) fn ack(r: Result<PublishAck, PublishError>, stream: &str) -> Class {
    match r {
        // The subject is captured by another stream: stored there, not
        // where the operator looks for it.
        Ok(a) if a.stream != stream => Class::Config(format!(
            "the subject is captured by the stream {}, not {stream}: remove it from that \
             stream's subjects, or change the sink's subject or stream",
            a.stream
        )),
        Ok(a) => Class::Stored {
            duplicate: a.duplicate,
        },
        Err(e) => error(&e),
    }
}

/// The class of a publish or ack error.
pub(super) fn error(e: &PublishError) -> Class {
    let text = chain(e);
    match e.kind() {
        PublishErrorKind::StreamNotFound => Class::NoStream,
        PublishErrorKind::TimedOut => Class::TimedOut,
        PublishErrorKind::MaxPayloadExceeded => Class::TooLarge(text),
        PublishErrorKind::BrokenPipe | PublishErrorKind::MaxAckPending => Class::Transient(text),
        _ => match std::error::Error::source(e)
            .and_then(|s| s.downcast_ref::<async_nats::jetstream::Error>())
        {
            Some(j) => jetstream_error(j.code(), j.error_code(), text),
            None => Class::Transient(text),
        },
    }
}

/// A JetStream API error: `code` is its HTTP-like status.
fn jetstream_error(code: usize, err: ErrorCode, text: String) -> Class {
    match err {
        ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM => Class::TooLarge(text),
        ErrorCode::STREAM_NOT_FOUND => Class::NoStream,
        ErrorCode::STREAM_NOT_MATCH | ErrorCode::STREAM_MISMATCH => Class::Config(text),
        // A stream full under `discard: new` ("maximum messages/bytes
        // exceeded"), no room on the server, no quorum: it passes.
        ErrorCode::STREAM_STORE_FAILED
        | ErrorCode::INSUFFICIENT_RESOURCES
        | ErrorCode::CLUSTER_NOT_AVAILABLE => Class::Transient(text),
        _ if code >= 500 || code == 408 || code == 429 || text.contains("maximum") => {
            Class::Transient(text)
        }
        _ => Class::Rejected {
            status: u16::try_from(code).unwrap_or(400),
            error: text,
        },
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

/// The answer for credentials the servers refuse.
pub(super) fn refused(why: &str) -> Answer {
    response(
        401,
        format!("the NATS servers refused the credentials: {why}"),
    )
}

/// A batch's answer. `stream` is where the stream stands, asked only when
/// some event found no stream.
pub(super) fn judge(classes: &[Class], stream: Option<&StreamState>) -> Answer {
    let stored = classes
        .iter()
        .filter(|c| matches!(c, Class::Stored { .. }))
        .count();
    if stored == classes.len() {
        if classes
            .iter()
            .all(|c| *c == Class::Stored { duplicate: false })
        {
            return read(BodyVerdict::Accepted);
        }
        return per_item(classes, stream);
    }
    let judged = classes
        .iter()
        .any(|c| matches!(c, Class::TooLarge(_) | Class::Rejected { .. }));
    if stored > 0 || judged {
        return per_item(classes, stream);
    }
    // Nothing went through: one answer for the batch, so that the runtime
    // backs off as a whole (or holds it, for configuration).
    if let Some(text) = classes.iter().find_map(|c| match c {
        Class::Config(t) => Some(t.clone()),
        Class::NoStream => match stream {
            Some(StreamState::Missing(t) | StreamState::Unbound(t)) => Some(t.clone()),
            _ => None,
        },
        _ => None,
    }) {
        return response(404, text);
    }
    if classes.contains(&Class::TimedOut) {
        return Answer::Transport {
            kind: TransportKind::Timeout,
            message: "no JetStream ack within request_timeout".into(),
        };
    }
    let text = classes
        .iter()
        .find_map(|c| match c {
            Class::Transient(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap_or_else(|| match stream {
            Some(StreamState::Unknown(t)) => format!("no stream answered; looking it up: {t}"),
            _ => "no stream answered for the subject (a leader election or a restart)".into(),
        });
    response(503, text)
}

fn per_item(classes: &[Class], stream: Option<&StreamState>) -> Answer {
    let answers = classes
        .iter()
        .map(|c| match c {
            Class::Stored { duplicate: false } => ItemAnswer {
                status: 201,
                error: None,
            },
            Class::Stored { duplicate: true } => ItemAnswer {
                status: 409,
                error: None,
            },
            Class::TooLarge(t) => ItemAnswer {
                status: 413,
                error: Some(t.clone()),
            },
            Class::Rejected { status, error } => ItemAnswer {
                status: *status,
                error: Some(error.clone()),
            },
            Class::NoStream => ItemAnswer {
                status: 429,
                error: Some(format!("no stream answered ({stream:?})")),
            },
            Class::TimedOut => ItemAnswer {
                status: 429,
                error: Some("no ack in time".into()),
            },
            Class::Transient(t) | Class::Config(t) => ItemAnswer {
                status: 429,
                error: Some(t.clone()),
            },
        })
        .collect();
    read(BodyVerdict::PerItem(answers))
}

/// The acks of every event, as the answer for each of them (a 200 with a
/// body, in HTTP's terms).
fn read(verdict: BodyVerdict) -> Answer {
    Answer::Read {
        status: 200,
        verdict,
    }
}

/// One answer for the whole batch (a status outside 2xx, in HTTP's terms).
fn response(status: u16, text: String) -> Answer {
    Answer::Refused {
        status,
        retry_after: None,
        error: short_text(text.as_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(a: &Answer) -> Vec<u16> {
        match a {
            Answer::Read {
                verdict: BodyVerdict::PerItem(v),
                ..
            } => v.iter().map(|i| i.status).collect(),
            Answer::Read {
                verdict: BodyVerdict::Accepted,
                ..
            } => vec![200],
            Answer::Refused { status, .. } => vec![*status],
            Answer::Transport { .. } => vec![0],
            other => panic!("{other:?}"),
        }
    }

    const OK: Class = Class::Stored { duplicate: false };
    const DUP: Class = Class::Stored { duplicate: true };

    #[test]
    fn acks_decide_per_event() {
        assert_eq!(status(&judge(&[OK, OK], None)), [200]);
        assert_eq!(status(&judge(&[OK, DUP], None)), [201, 409]);
        let big = Class::TooLarge("max payload size exceeded".into());
        assert_eq!(
            status(&judge(&[OK, big.clone(), OK], None)),
            [201, 413, 201]
        );
        // A lone event too large is quarantined, not held.
        assert_eq!(status(&judge(&[big], None)), [413]);
        // Some stored, some not: the rest is pushback, never counted.
        assert_eq!(status(&judge(&[OK, Class::TimedOut], None)), [201, 429]);
    }

    #[test]
    fn a_batch_that_went_nowhere_is_one_answer() {
        let missing = StreamState::Missing("the stream T does not exist".into());
        assert_eq!(
            status(&judge(&[Class::NoStream, Class::NoStream], Some(&missing))),
            [404]
        );
        assert_eq!(
            status(&judge(&[Class::NoStream], Some(&StreamState::Bound))),
            [503]
        );
        assert_eq!(
            status(&judge(&[Class::TimedOut, Class::NoStream], None)),
            [0]
        );
        assert_eq!(
            status(&judge(&[Class::Transient("stream full".into())], None)),
            [503]
        );
        assert_eq!(status(&refused("authorization violation")), [401]);
    }

    #[test]
    fn an_ack_from_another_stream_is_a_configuration_error() {
        let ack = |json: &str| serde_json::from_str::<PublishAck>(json).unwrap();
        assert_eq!(
            self::ack(Ok(ack(r#"{"stream":"T","seq":7,"duplicate":true}"#)), "T"),
            DUP
        );
        let other = self::ack(Ok(ack(r#"{"stream":"OTHER","seq":7}"#)), "T");
        assert!(
            matches!(&other, Class::Config(t) if t.contains("captured by the stream OTHER")),
            "{other:?}"
        );
        assert_eq!(status(&judge(&[other], None)), [404]);
    }

    #[test]
    fn jetstream_errors_by_code() {
        let c = |code, err| jetstream_error(code, ErrorCode(err), "x".into());
        assert!(matches!(c(400, 10054), Class::TooLarge(_)));
        assert!(matches!(c(503, 10077), Class::Transient(_)));
        assert!(matches!(c(400, 10060), Class::Config(_)));
        assert!(matches!(c(404, 10059), Class::NoStream));
        assert!(matches!(c(503, 1), Class::Transient(_)));
        assert!(matches!(c(400, 1), Class::Rejected { status: 400, .. }));
    }
}
