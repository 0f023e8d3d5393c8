//! The tailer→appender protocol: what the tailer thread sends the appender
//! task over their channel, in order, and the metric handles both halves
//! count into. The appender needs nothing else of the tailer.

use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;

use super::super::beat::Beat;
use super::super::checkpoint::Record;
use super::super::metrics::FileSourceMetrics;
use super::super::open::Skip;
use crate::metrics::Metrics;

pub use super::chunk::{Chunk, StreamId};

/// What the tailer tells the appender, in order.
#[derive(Debug)]
pub enum Update {
    /// Streams created or changed (`upserts`) and forgotten. With `barrier`,
    /// the appender writes a checkpoint holding them before it appends any
    /// later chunk: a stream's key must be durable before its first line is,
    /// or recovery could not tell whose lines those are.
    Records {
        upserts: Vec<(StreamId, Record)>,
        forget: Vec<StreamId>,
        barrier: bool,
    },
    Chunk(Chunk),
}

/// The source's metric handles, resolved once.
#[derive(Clone)]
pub struct Counters {
    pub metrics: Arc<Metrics>,
    pub component: String,
    pub files_watched: Gauge,
    pub files_open: Gauge,
    pub lines: Counter,
    pub bytes: Counter,
    pub truncated: Counter,
    pub invalid_utf8: Counter,
    pub rotations: Counter,
    pub truncations: Counter,
    pub read_errors: Counter,
    /// By [`Skip`](super::super::open::Skip), in the order of `Skip::ALL`.
    pub skipped: [Counter; 3],
    pub checkpoint_errors: Counter,
    /// Seconds the tailer thread has been in one step (`beat.rs`), set by
    /// the source's watchdog.
    pub stalled: Gauge,
    /// What step the tailer thread is in, since when.
    pub beat: Arc<Beat>,
    pub events: Counter,
    pub event_bytes: Counter,
}

impl Counters {
    pub fn new(metrics: &Arc<Metrics>, name: &str) -> Counters {
        let l = crate::metrics::SourceLabels {
            source: name.to_string(),
        };
        let f = metrics.group::<FileSourceMetrics>();
        let counters = Counters {
            metrics: metrics.clone(),
            component: format!("source:{name}"),
            files_watched: f.files_watched.get_or_create(&l).clone(),
            files_open: f.files_open.get_or_create(&l).clone(),
            lines: f.lines.get_or_create(&l).clone(),
            bytes: f.bytes.get_or_create(&l).clone(),
            truncated: f.lines_truncated.get_or_create(&l).clone(),
            invalid_utf8: f.lines_invalid_utf8.get_or_create(&l).clone(),
            rotations: f.rotations.get_or_create(&l).clone(),
            truncations: f.truncations.get_or_create(&l).clone(),
            read_errors: f.read_errors.get_or_create(&l).clone(),
            skipped: Skip::ALL.map(|why| {
                let l = crate::metrics::SourceReasonLabels {
                    source: name.to_string(),
                    reason: why.as_str().to_string(),
                };
                f.skipped.get_or_create(&l).clone()
            }),
            checkpoint_errors: f.checkpoint_errors.get_or_create(&l).clone(),
            stalled: f.tailer_stalled.get_or_create(&l).clone(),
            beat: Arc::new(Beat::default()),
            events: metrics.sources.events.get_or_create(&l).clone(),
            event_bytes: metrics.sources.bytes.get_or_create(&l).clone(),
        };
        counters
    }
}
