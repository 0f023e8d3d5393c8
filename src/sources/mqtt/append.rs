//! One group of messages to one durable append (more only when the group's
//! events outgrow one append): decode the payloads, run the processing
//! chain, split into format-2 events, append with the retries every source
//! makes. The session acknowledges the group only when this says
//! [`Outcome::Stored`].

use std::ops::Range;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{BufMut, Bytes, BytesMut};
use prometheus_client::metrics::counter::Counter;
use tokio_util::sync::CancellationToken;
use tracing::{error, warn};

use super::client::Publish;
use super::metrics::MqttSourceMetrics;
use super::payload::{Gathered, Invalid};
use super::MqttSourceSettings;
use crate::append_retry::{self, Appended, Refusal, Retry};
use crate::backoff::Backoff;
use crate::metrics::{Metrics, SourceLabels, SourceReasonLabels};
use crate::process::Runner;
use crate::seglog::{Batch, Log, LogError};
use crate::sources::otlp_http::decode::Decoded;
use crate::sources::otlp_http::split::{split_as, SplitError};

/// How long one try waits for room in a full log before it tries again
/// (and looks at `stop`).
const APPEND_WAIT: Duration = Duration::from_secs(1);
/// The wait after a failed write (disk full, failing): one second.
const ERROR_BACKOFF: Backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(1));

/// A message and what becomes of it.
#[derive(Debug)]
pub struct Entry {
    pub publish: Publish,
    /// Appended; `false`: only acknowledged (a retained message skipped,
    /// or a payload too large to ever store).
    pub store: bool,
}

/// How an append of a group ended.
#[derive(Debug)]
pub enum Outcome {
    /// Every message to store is durable (or was dropped and counted as
    /// too large): acknowledge the whole group.
    Stored,
    /// Not stored (stopping while the log is full, or the log closed):
    /// acknowledge nothing; the broker sends the messages again.
    NotStored(LogError),
}

/// What an append needs, moved into the task that runs it and handed
/// back with the outcome (one append is in flight at a time).
pub struct Appender {
    name: String,
    component: String,
    log: Log,
    metrics: Arc<Metrics>,
    gathered: Gathered,
    runner: Option<Runner>,
    /// The most bytes of events (framing and context included) one append
    /// takes.
    max_append: usize,
    events: Counter,
    bytes: Counter,
    own: Arc<MqttSourceMetrics>,
}

impl Appender {
    pub fn new(name: &str, opts: &MqttSourceSettings, log: &Log, metrics: &Arc<Metrics>) -> Self {
        let labels = SourceLabels {
            source: name.to_string(),
        };
        Appender {
            name: name.to_string(),
            component: format!("source:{name}"),
            log: log.clone(),
            metrics: metrics.clone(),
            gathered: Gathered::new(opts.format, opts.max_payload_size),
            runner: opts
                .process
                .as_ref()
                .map(|chain| Runner::new(chain.clone(), metrics, name)),
            max_append: crate::sources::metric_points::max_append_bytes(log),
            events: metrics.sources.events.get_or_create(&labels).clone(),
            bytes: metrics.sources.bytes.get_or_create(&labels).clone(),
            own: metrics.group::<MqttSourceMetrics>(),
        }
    }

    /// The most payload bytes one group should carry: half an append, so
    /// that what decoding adds (attributes, framing) still fits.
    pub fn group_bytes(&self) -> usize {
        self.max_append / 2
    }

    /// Stores the messages of `group` to store, durably; returns when they
    /// are (or cannot be: see [`Outcome`]).
    pub async fn append(&mut self, group: &[Entry], stop: &CancellationToken) -> Outcome {
        let stored: Vec<&Publish> = group
            .iter()
            .filter(|e| e.store)
            .map(|e| &e.publish)
            .collect();
        // Ranges of `stored` still to append, in order: a range whose
        // events outgrow one append is halved.
        let mut todo = Vec::with_capacity(8);
        todo.push(0..stored.len());
        while let Some(range) = todo.pop() {
            if range.is_empty() {
                continue;
            }
            match self.build(&stored[range.clone()]) {
                Ok(None) => {}
                Ok(Some(ready)) => {
                    if let Err(e) = self.store(ready, stop).await {
                        match e {
                            Stop::Again => self.halve(&stored, range, &mut todo),
                            Stop::Not(e) => return Outcome::NotStored(e),
                        }
                    }
                }
                Err(TooLarge) => self.halve(&stored, range, &mut todo),
            }
        }
        Outcome::Stored
    }

    /// Splits `range` in two (the first half on top), or drops its one
    /// message, which no append can hold.
    fn halve(&self, stored: &[&Publish], range: Range<usize>, todo: &mut Vec<Range<usize>>) {
        if range.len() == 1 {
            let p = stored[range.start];
            error!(source = %self.name, topic = %p.topic_lossy(), bytes = p.payload_len(),
                max_bytes = self.max_append,
                "an MQTT message is too large for one log append once decoded; it is dropped \
                 and acknowledged (it could never be stored): lower max_payload_size or raise \
                 log.segment_size");
            self.metrics.drop_events(&self.component, "too_large", 1);
            return;
        }
        let mid = range.start + range.len() / 2;
        todo.push(mid..range.end);
        todo.push(range.start..mid);
    }

    /// The events of `messages` framed, with their context; `None` when
    /// they make none (OTLP payloads without records, all dropped by the
    /// chain).
    fn build(&mut self, messages: &[&Publish]) -> Result<Option<Ready>, TooLarge> {
        let now = now_ns();
        for p in messages {
            let m = p.message();
            let added = self.gathered.push(&m, now);
            if let Some((kind, why)) = added.invalid {
                self.invalid(kind, p, &why);
            }
        }
        let mut req = self.gathered.take();
        if let Some(r) = &mut self.runner {
            r.logs(&mut req);
        }
        let mut framed = BytesMut::new();
        let mut count = 0u32;
        let split = split_as(
            Decoded::Logs(req),
            &self.name,
            now,
            self.max_append,
            crate::sources::WRITE_FORMAT_2,
            |e| {
                framed.put_u32_le(e.len() as u32);
                framed.put_slice(e);
                count += 1;
            },
        );
        match split {
            Ok(s) if count == 0 => {
                let _ = s;
                Ok(None)
            }
            Ok(s) => Ok(Some(Ready {
                framed: framed.freeze(),
                count,
                event_bytes: s.bytes + s.context.len() as u64,
                context: s.context,
            })),
            Err(SplitError::TooLarge { .. }) => Err(TooLarge),
            // Logs have no metric data to miss; should a newer split find
            // something else wrong, the group is halved down to the
            // message at fault, which is then dropped with its topic.
            Err(_) => Err(TooLarge),
        }
    }

    async fn store(&self, ready: Ready, stop: &CancellationToken) -> Result<(), Stop> {
        let how = Retry {
            wait_for_room: Some(APPEND_WAIT),
            retry: true,
            back_off_when_full: false,
        };
        let mut backoff = ERROR_BACKOFF;
        let mut warned = false;
        let refused = |e: &LogError, _wait| {
            if warned {
                return;
            }
            warned = true;
            match e {
                LogError::Full { .. } => warn!(source = %self.name,
                    "the log is full (when_full = \"block\"): MQTT messages are not acknowledged \
                     until sinks free space; the broker holds the rest"),
                e => error!(source = %self.name, error = %e,
                    "cannot append MQTT messages to the log; they are not acknowledged and are \
                     tried again"),
            }
        };
        let make = || {
            Batch::from_framed_trusted(ready.framed.clone(), ready.count)
                .with_context(ready.context.clone())
        };
        match append_retry::append(&self.log, make, how, &mut backoff, stop, refused).await {
            Appended::Done(_) => {
                self.events.inc_by(u64::from(ready.count));
                self.bytes.inc_by(ready.event_bytes);
                Ok(())
            }
            Appended::TooLarge(_) => Err(Stop::Again),
            Appended::GaveUp(_, e) | Appended::Failed(e) => {
                if Refusal::of(&e) == Refusal::Fatal && !matches!(e, LogError::Closed) {
                    error!(source = %self.name, error = %e,
                        "the log refused MQTT messages; they are not acknowledged");
                }
                Err(Stop::Not(e))
            }
        }
    }

    fn invalid(&self, kind: Invalid, p: &Publish, why: &str) {
        self.own
            .invalid
            .get_or_create(&SourceReasonLabels {
                source: self.name.clone(),
                reason: kind.reason().to_string(),
            })
            .inc();
        warn!(source = %self.name, topic = %p.topic_lossy(), reason = kind.reason(),
            "an MQTT payload is not what format says ({why}); it is stored whole, marked \
             mqtt.payload_error");
    }
}

/// Events framed as [`Batch::push`] frames them, kept to append again.
struct Ready {
    framed: Bytes,
    count: u32,
    context: Bytes,
    event_bytes: u64,
}

/// The events outgrow one append.
struct TooLarge;

enum Stop {
    /// Too large for the log: halve and try again.
    Again,
    Not(LogError),
}

/// Now, unix nanoseconds.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
