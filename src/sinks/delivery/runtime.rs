//! The shared sink runtime: one log consumer, batches, delivery tasks up to
//! the adaptive concurrency limit, the retry queue, the watermark, commits,
//! and the replay inbox.
//!
//! ```text
//!  log ──read──▶ forming batch ──(full | batch_timeout | burst tail)──▶ deliver task ×limit
//!   ▲              ▲      ▲                                               │    │ finished events
//!   │     replay inbox   retry queue ◀──── events to retry ───────────────┘    ▼
//!   └──── commit(watermark) ◀───────────────────────────── Watermark ◀──── done channel
//! ```
//!
//! The loop owns the consumer, the forming batch, the retry queue and the
//! watermark; the delivery tasks own their batches while they are sent and
//! report each event the moment it is finished, or hand it back to be sent
//! again later ([`super::retry_queue`]): the batch former takes due retries
//! ahead of new reads, so a request never sits in its slot through a
//! backoff. The cursor is committed to the watermark, the lowest event not
//! finished, so it never passes an event still in flight, waiting for a
//! retry, or waiting for room in the quarantine (`DESIGN.md` promise 6).
//!
//! Bounds: at most the current limit ([`super::limit`], at most
//! `concurrency`) of batches in flight, plus a probe while everything backs
//! off, plus the one forming; and the *window* — events read but not yet
//! committable, retries waiting included — is at most [`window`] events: when
//! one old event is stuck (retrying, held for credentials, or a full
//! quarantine), later ones are still sent until the window is full, then
//! reading pauses.
//!
//! Crash repeats: the loop commits after every finished batch, and the log
//! writes each commit to its cursor file as soon as its writer is not inside
//! a group's write and fdatasync (synced every `cursor_sync_interval`). After
//! a kill -9 a receiver sees again, with the same ids, the batches in flight
//! (`concurrency` × `batch_max_events`), those finished behind the oldest of
//! them (a request slower than the next one holds the watermark back; while
//! an event is stuck, up to the window) and those committed during the one
//! write and fdatasync the writer was in. After a power cut, the
//! progress since the last cursor sync.
//!
//! Input filtering reads only the envelope's `source` field (a few bytes of
//! protobuf; for a format-2 event its group number, and each group's source
//! once per batch context), so events of other sources are skipped without
//! decoding them; decoding happens in the delivery tasks, on every core.

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use anyhow::Context;
use bytes::Bytes;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::deliver::deliver;
use super::item::{Pos, Raw};
use super::limit::Limit;
use super::options::{DeliveryOptions, BURST_TAIL_LULL};
use super::quarantining::retry_parked;
use super::retry::Policy;
use super::retry_queue::{Probe, RetryQueue};
use super::shared::{Back, Shared, SinkHandles, FULL_RETRY};
use super::transport::Transport;
use super::turn::Turns;
use super::watermark::Watermark;
use crate::event::envelope_fields::{group_of, group_sources, source_of};
use crate::metrics::Metrics;
use crate::seglog::{Log, LogError, StartAt};
use crate::sinks::quarantine::{self, Quarantine};

/// The most events between the committed position and the read position.
pub(crate) fn window(opts: &DeliveryOptions) -> usize {
    (opts.batch_max_events * (opts.concurrency + 1) * 16).max(10_000)
}

/// The batch being filled.
struct Forming {
    events: Vec<Raw>,
    bytes: usize,
    /// When it must go, whatever its size.
    due: Option<Instant>,
    /// The batch before it went because it was full.
    after_full: bool,
    /// When reading last returned events.
    last_read: Instant,
}

impl Forming {
    /// When the batch goes unless it fills first.
    fn send_at(&self) -> Option<Instant> {
        let tail =
            (self.after_full && !self.events.is_empty()).then(|| self.last_read + BURST_TAIL_LULL);
        match (self.due, tail) {
            (Some(d), Some(t)) => Some(d.min(t)),
            (d, t) => d.or(t),
        }
    }
}

/// Replay files being sent: id → (path, events not yet finished).
#[derive(Default)]
struct Replays {
    next_id: u64,
    open: HashMap<u64, (PathBuf, usize)>,
    queue: VecDeque<Raw>,
}

/// Runs a network sink until `stop` is cancelled. The caller (the daemon's
/// supervisor) restarts it on error; it then resumes from its committed
/// position.
pub(crate) async fn run<T: Transport>(
    name: String,
    opts: DeliveryOptions,
    transport: T,
    log: Log,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let quarantine = {
        let q = opts.quarantine.clone();
        tokio::task::spawn_blocking(move || Quarantine::open(&q)).await??
    };
    let mut consumer = log
        .consumer(&name, StartAt::Oldest)
        .with_context(|| format!("opening the log consumer for sink {name}"))?;
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Vec<Pos>>();
    let (back_tx, mut back_rx) = mpsc::unbounded_channel::<Back>();
    let handles = SinkHandles::new(&metrics, &name);
    handles.quarantine_bytes.set(quarantine.used_bytes() as i64);
    let shared = Arc::new(Shared {
        name: name.clone(),
        transport,
        policy: Policy {
            backoff_initial: opts.backoff_initial,
            backoff_max: opts.backoff_max,
            max_attempts: opts.max_attempts.max(1),
        },
        quarantine: Arc::new(quarantine),
        config_hash: opts.config_hash.clone(),
        metrics: metrics.clone(),
        done: done_tx,
        back: back_tx,
        limit: Limit::new(
            opts.concurrency,
            opts.adaptive_concurrency,
            handles.concurrency_limit.clone(),
        ),
        stop: stop.clone(),
        requests: AtomicUsize::new(0),
        parked: Default::default(),
        answers_too_large: AtomicBool::new(false),
        m: handles,
        ledger: consumer.ledger(),
    });
    let window = window(&opts);
    let mut tracker = Watermark::new(consumer.position());
    let mut committed = consumer.position();
    let mut forming = Forming {
        events: Vec::with_capacity(opts.batch_max_events),
        bytes: 0,
        due: None,
        after_full: false,
        last_read: Instant::now(),
    };
    let mut replays = Replays::default();
    let mut filter = SourceFilter::new(&opts.inputs);
    let mut retries = RetryQueue::default();
    let mut probe = Probe::new(Instant::now());
    // Set while the receiver is down (a request failed without an answer,
    // or with 408/5xx, and none has delivered since): no batch goes before
    // this, only a probe a second. It grows with the run of such failures
    // like a backoff (by its ceiling: one wait for the whole sink, not one
    // per batch), and ends at the first delivery. A time, not a state, so
    // that it ends by itself even if no probe can be made.
    let mut held: Option<Instant> = None;
    let mut down_streak = 0u32;
    let mut lanes: JoinSet<()> = JoinSet::new();
    let mut turns = Turns::new(shared.transport.starts_in_order());
    let mut next_scan = Instant::now();
    let mut next_park = Instant::now();
    info!(sink = %name, from = consumer.position(), concurrency = opts.concurrency,
        adaptive = opts.adaptive_concurrency, "sink started");

    let result: anyhow::Result<()> = loop {
        // Replayed events go first: an operator asked for them.
        while forming.events.len() < opts.batch_max_events && forming.bytes < opts.batch_max_bytes {
            let Some(r) = replays.queue.pop_front() else {
                break;
            };
            push(&mut forming, r, &opts);
        }
        // Then events due for another try, ahead of new reads.
        let room = opts.batch_max_events.saturating_sub(forming.events.len());
        if room > 0 && forming.bytes < opts.batch_max_bytes {
            let bytes = opts.batch_max_bytes - forming.bytes;
            for r in retries.take_ready(Instant::now(), room, bytes) {
                push(&mut forming, r, &opts);
            }
        }
        if tracker.position() > committed {
            committed = tracker.position();
            if let Err(e) = consumer.commit(committed) {
                break Err(e.into());
            }
        }
        let full =
            forming.events.len() >= opts.batch_max_events || forming.bytes >= opts.batch_max_bytes;
        let due = forming.send_at().is_some_and(|d| d <= Instant::now());
        let limit = shared.limit.current();
        if held.is_some_and(|h| h <= Instant::now()) {
            held = None;
        }
        if (full || due) && lanes.len() < limit && held.is_none() {
            let batch = std::mem::replace(
                &mut forming.events,
                Vec::with_capacity(opts.batch_max_events),
            );
            forming.bytes = 0;
            forming.due = None;
            forming.after_full = full;
            lanes.spawn(deliver(shared.clone(), batch, turns.next()));
            shared.limit.started(lanes.len());
            probe.sent(Instant::now());
            continue;
        }
        let can_read = !full && tracker.span() < window;
        let room_events = opts
            .batch_max_events
            .saturating_sub(forming.events.len())
            .max(1);
        let room_bytes = opts.batch_max_bytes.saturating_sub(forming.bytes).max(1);
        let timer = forming
            .send_at()
            .filter(|_| lanes.len() < limit)
            .map(|d| held.map_or(d, |h| d.max(h)));
        // A retry coming due is worth waking for only if it fits a batch.
        let retry_at = retries.next_due().filter(|_| !full);
        let probe_at = probe.due(lanes.len(), &retries, held);
        let scan_at = next_scan;
        let parked = shared.has_parked();
        if !parked {
            next_park = Instant::now() + FULL_RETRY.min(opts.backoff_max);
        }
        let park_at = next_park;
        tokio::select! {
            biased;
            _ = stop.cancelled() => break Ok(()),
            Some(done) = done_rx.recv() => finish(&mut tracker, &mut replays, &shared.quarantine, done),
            Some(back) = back_rx.recv() => match back {
                Back::Retry(w) => retries.push(w),
                Back::Down { until } => {
                    down_streak = down_streak.saturating_add(1);
                    let until = until.max(Instant::now() + shared.policy.ceiling(down_streak));
                    held = Some(held.map_or(until, |h| h.max(until)));
                }
                Back::Alive => {
                    held = None;
                    down_streak = 0;
                    let released = retries.reset(Instant::now());
                    if released > 0 {
                        info!(sink = %name, events = released,
                            "the receiver answers again: sending the events that waited for it now");
                    }
                }
            },
            Some(joined) = lanes.join_next(), if !lanes.is_empty() => {
                if let Err(e) = joined {
                    // A delivery task panicked: its events will never be
                    // reported. Start over from the committed position.
                    break Err(anyhow::anyhow!("a delivery task of sink {name} failed: {e}"));
                }
            }
            read = consumer.read_wait(room_events, room_bytes), if can_read => match read {
                Ok(events) => {
                    forming.last_read = Instant::now();
                    let mut skipped = Vec::new();
                    for e in events {
                        tracker.register(e.seq);
                        if filter.wanted(&e.data, &e.context) {
                            let index = e.seq.saturating_sub(e.batch_start);
                            let raw = Raw::with_context(Pos::Log(e.seq), e.data, e.context, index, 0);
                            push(&mut forming, raw, &opts);
                        } else {
                            tracker.complete(e.seq);
                            skipped.push(e.seq);
                        }
                    }
                    // Finished: eviction must not count them as lost.
                    shared.ledger.finished(&skipped);
                }
                Err(LogError::Closed) => break Ok(()),
                Err(e) => break Err(e.into()),
            },
            _ = tokio::time::sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {}
            _ = tokio::time::sleep_until(retry_at.unwrap_or_else(Instant::now)), if retry_at.is_some() => {}
            _ = tokio::time::sleep_until(probe_at.unwrap_or_else(Instant::now)), if probe_at.is_some() => {
                // Everything backs off and nothing is in flight: one event
                // alone finds out whether the receiver is back.
                let r = retries.take_probe().or_else(|| {
                    // Held batches: the first event of the one forming;
                    // not past older events waiting out the receiver's
                    // wait when it needs events in time order.
                    let overtakes = shared.transport.in_order() && !retries.is_empty();
                    if held.is_none() || forming.events.is_empty() || overtakes {
                        return None;
                    }
                    let r = forming.events.remove(0);
                    forming.bytes -= r.data.len();
                    Some(r)
                });
                if let Some(r) = r {
                    debug!(sink = %name, waiting = retries.len() + forming.events.len(),
                        "probing the receiver with one event");
                    lanes.spawn(deliver(shared.clone(), vec![r], turns.next()));
                }
                // Even when there was nothing to probe with, not before
                // another interval.
                probe.sent(Instant::now());
            }
            _ = tokio::time::sleep_until(park_at), if parked => {
                retry_parked(&shared).await;
                next_park = Instant::now() + FULL_RETRY.min(opts.backoff_max);
            }
            _ = tokio::time::sleep_until(scan_at) => {
                next_scan = Instant::now() + opts.replay_scan_interval;
                if replays.open.is_empty() {
                    load_replay(&shared.quarantine, &mut replays, &metrics, &name).await;
                }
            }
        }
    };

    // Stopping: delivery tasks finish the request they have in flight (no
    // new ones, no backoff), and what they finish is still committed.
    while let Some(joined) = lanes.join_next().await {
        let _ = joined;
        while let Ok(done) = done_rx.try_recv() {
            finish(&mut tracker, &mut replays, &shared.quarantine, done);
        }
    }
    while let Ok(done) = done_rx.try_recv() {
        finish(&mut tracker, &mut replays, &shared.quarantine, done);
    }
    if tracker.position() > committed {
        consumer.commit(tracker.position())?;
    }
    info!(sink = %name, committed = tracker.position(), "sink stopped");
    result
}

fn push(forming: &mut Forming, r: Raw, opts: &DeliveryOptions) {
    if forming.events.is_empty() {
        forming.due = Some(Instant::now() + opts.batch_timeout);
    }
    forming.bytes += r.data.len();
    forming.events.push(r);
}

fn finish(tracker: &mut Watermark, replays: &mut Replays, q: &Quarantine, done: Vec<Pos>) {
    for pos in done {
        match pos {
            Pos::Log(seq) => tracker.complete(seq),
            Pos::Replay { file, .. } => {
                let Some((path, left)) = replays.open.get_mut(&file) else {
                    continue;
                };
                *left -= 1;
                if *left == 0 {
                    let path = path.clone();
                    replays.open.remove(&file);
                    match q.finish_inbox_file(&path) {
                        Ok(()) => info!(file = %path.display(), "replay file finished"),
                        Err(e) => warn!(file = %path.display(), error = %e,
                            "cannot remove a finished replay file; its events will be sent again"),
                    }
                }
            }
        }
    }
}

/// Loads the oldest replay file, if any, into the replay queue.
async fn load_replay(q: &Arc<Quarantine>, replays: &mut Replays, metrics: &Metrics, name: &str) {
    let q2 = q.clone();
    let loaded = tokio::task::spawn_blocking(move || -> std::io::Result<_> {
        let Some(path) = q2.inbox_files()?.into_iter().next() else {
            return Ok(None);
        };
        let records = quarantine::read_records(&path)?;
        Ok(Some((path, records)))
    })
    .await;
    let (path, records) = match loaded {
        Ok(Ok(Some(x))) => x,
        Ok(Ok(None)) => return,
        Ok(Err(e)) => {
            warn!(sink = %name, error = %e, "cannot read the replay inbox");
            return;
        }
        Err(e) => {
            warn!(sink = %name, error = %e, "cannot read the replay inbox");
            return;
        }
    };
    let id = replays.next_id;
    replays.next_id += 1;
    let mut n = 0;
    for r in records {
        match r {
            Ok(rec) => {
                replays.queue.push_back(Raw::new(
                    Pos::Replay {
                        file: id,
                        seq: rec.seq,
                    },
                    Bytes::from(rec.event),
                    rec.attempts,
                ));
                n += 1;
            }
            Err(e) => {
                metrics.drop_events(&format!("sink:{name}"), "replay_damaged", 1);
                warn!(sink = %name, error = %e, "skipping a damaged line of a replay file");
            }
        }
    }
    info!(sink = %name, file = %path.display(), events = n, "replaying quarantined events");
    if n == 0 {
        let _ = q.finish_inbox_file(&path);
    } else {
        replays.open.insert(id, (path, n));
    }
}

/// Which events a sink takes: those of its `inputs` sources. Reads only a
/// few protobuf fields, never a whole envelope: a format-1 event's
/// `source` (field 2); for a format-2 event its `group` (field 12) and,
/// once per batch context, each group's `source`. An event whose bytes
/// cannot be walked is wanted, so that the delivery task quarantines it as
/// invalid rather than skipping it silently.
pub(crate) struct SourceFilter {
    inputs: Vec<String>,
    /// The last context seen (kept, so that its address identifies it)
    /// and whether each of its groups is wanted (`None`: unreadable).
    last: Option<(Bytes, Option<Vec<bool>>)>,
}

impl SourceFilter {
    pub fn new(inputs: &[String]) -> SourceFilter {
        SourceFilter {
            inputs: inputs.to_vec(),
            last: None,
        }
    }

    fn is_input(&self, source: &[u8]) -> bool {
        self.inputs.iter().any(|i| i.as_bytes() == source)
    }

    pub fn wanted(&mut self, data: &[u8], context: &Bytes) -> bool {
        if context.is_empty() {
            return source_of(data).is_none_or(|s| self.is_input(s));
        }
        // The events of one batch hand out the same context bytes: one
        // look at the context per batch.
        let fresh = self
            .last
            .as_ref()
            .is_some_and(|(b, _)| b.as_ptr() == context.as_ptr() && b.len() == context.len());
        if !fresh {
            let groups = group_sources(context)
                .map(|sources| sources.iter().map(|s| self.is_input(s)).collect());
            self.last = Some((context.clone(), groups));
        }
        let Some((_, Some(groups))) = &self.last else {
            return true;
        };
        // The usual case, one source per sink: nothing to read per event.
        if groups.iter().all(|&w| w) {
            return true;
        }
        match group_of(data) {
            Some(g) => usize::try_from(g)
                .ok()
                .and_then(|g| groups.get(g).copied())
                .unwrap_or(true),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Envelope, EventId, Record};
    use crate::sinks::test_events;
    use opentelemetry_proto::tonic::logs::v1::LogRecord;
    use prost::Message;

    #[test]
    fn the_source_is_read_without_decoding() {
        let env = Envelope {
            id: EventId::random().0.to_vec(),
            source: "syslog".into(),
            observed_time_unix_nano: 42,
            record: Some(Record::Log(LogRecord {
                severity_number: 9,
                ..Default::default()
            })),
            ..Default::default()
        };
        let bytes = env.encode_to_vec();
        let none = Bytes::new();
        assert_eq!(source_of(&bytes), Some(&b"syslog"[..]));
        assert!(SourceFilter::new(&["a".into(), "syslog".into()]).wanted(&bytes, &none));
        assert!(!SourceFilter::new(&["a".into()]).wanted(&bytes, &none));
        // Garbage is wanted: the delivery task quarantines it.
        assert!(SourceFilter::new(&["a".into()]).wanted(b"\xff\xff\xff", &none));
    }

    #[test]
    fn format_2_events_are_filtered_by_their_group_source() {
        let env = |source: &str, n: u64| Envelope {
            id: EventId::derived(&test_events::SEED, n).0.to_vec(),
            source: source.into(),
            observed_time_unix_nano: 42,
            record: Some(Record::Log(LogRecord {
                severity_number: 9,
                ..Default::default()
            })),
            ..Default::default()
        };
        let envs = [
            env("syslog", 0),
            env("app", 1),
            env("syslog", 2),
            env("other", 3),
        ];
        let (context, own) = test_events::compact(&envs, 0);
        let mut f = SourceFilter::new(&["syslog".into(), "other".into()]);
        let got: Vec<bool> = own.iter().map(|d| f.wanted(d, &context)).collect();
        assert_eq!(got, [true, false, true, true]);
        // A second batch (another context) is read afresh.
        let (context, own) = test_events::compact(&[env("app", 0)], 0);
        assert!(!f.wanted(&own[0], &context));
        let mut app = SourceFilter::new(&["app".into()]);
        assert!(app.wanted(&own[0], &context));
        // A context that cannot be walked: wanted, and quarantined as
        // invalid by the delivery task.
        assert!(f.wanted(&own[0], &Bytes::from_static(b"\xff\xff\xff")));
        // A group number past the context's groups: wanted, likewise.
        let stray = Envelope {
            group: 9,
            ..Default::default()
        }
        .encode_to_vec();
        assert!(f.wanted(&stray, &context));
    }
}
