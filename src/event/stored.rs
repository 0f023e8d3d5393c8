//! Events as the log stores them in format 2: what a batch's events share
//! once in its [`Context`], each event only what is its own.
//!
//! A format-2 event is an [`Envelope`] holding only the event's own fields,
//! plus `group` (which [`Group`] of the batch's context it belongs to) and
//! `observed_delta`; the batch's context (the log's
//! [`Event::context`](crate::seglog::Event::context)) is a [`Context`]: one
//! [`Group`] per source, resource and scope (and per file) the batch holds.
//! The reader rebuilds every field exactly:
//!
//! | field | format 2 |
//! |---|---|
//! | source, resource, scope, schema URLs | the group's |
//! | record attributes | the group's `attributes`, then the event's own |
//! | `observed_time_unix_nano` | the event's own if not 0, else the group's plus `observed_delta` |
//! | the log record's `observed_time_unix_nano` | with `record_observed`, the envelope's when the record's is 0 |
//! | origin | path, fingerprint and generation from the group; `offset` the group's `origin.offset` plus the event's, `end_offset` that plus the event's (its length) |
//! | id | the event's own if stored; else for a file line, [`EventId::for_file_line`] of the group's file and the event's offset; else [`EventId::derived`] from the group's `id_seed` and the event's index in its batch |
//!
//! A format-1 event (an older log, or a quarantine file) is a whole
//! envelope with an empty context; [`Decoder`] reads both.
//!
//! [`Decoder::decode_lean`] leaves a gauge or sum record in its stored
//! bytes, for a sink that reads its points in place
//! ([`Stored::metric_points`]): the envelope's other fields are decoded as
//! always.

use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::{InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::Metric;
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

use super::envelope_fields::{LOG_RECORD, METRIC, SPAN};
use super::metric_point::{fields, MetricPoints, Wire};
use super::{shared_fields_message, Envelope, EnvelopeError, EventId, FileOrigin, Record, Signal};

/// What the events of one batch share, stored once per batch.
#[derive(Clone, PartialEq, Message)]
pub struct Context {
    #[prost(message, repeated, tag = "1")]
    pub groups: Vec<Group>,
}

shared_fields_message! {
    /// Fields shared by some events of a batch; an event names its group by
    /// index (`Envelope::group`).
    pub struct Group ["1", "2", "3", "4", "5"] {
        /// Log record attributes every event of the group has, placed before
        /// its own (a file's `log.file.path` and `log.file.name`).
        #[prost(message, repeated, tag = "6")]
        pub attributes: Vec<KeyValue>,
        /// The file the group's events were read from: path, fingerprint and
        /// generation, and the offset the events' offsets count from (each
        /// event stores its offset minus this, and its end minus its offset:
        /// small numbers).
        #[prost(message, optional, tag = "7")]
        pub origin: Option<FileOrigin>,
        /// 16 random bytes from which the ids of events without a stored id
        /// and without a file origin are derived.
        #[prost(bytes = "vec", tag = "8")]
        pub id_seed: Vec<u8>,
        /// Base of the events' observed times (see `observed_delta`).
        #[prost(fixed64, tag = "9")]
        pub observed_time_unix_nano: u64,
        /// The log records' own observed time is the envelope's (file lines):
        /// not stored per event.
        #[prost(bool, tag = "10")]
        pub record_observed: bool,
    }
}

impl EventId {
    /// The id of the event at `index` in a batch whose group has `seed`:
    /// unique per seed and index, fixed once stored.
    pub fn derived(seed: &[u8], index: u64) -> EventId {
        let mut input = [0u8; 8 + 16 + 8];
        input[0..8].copy_from_slice(b"hf-seed1");
        let n = seed.len().min(16);
        input[8..8 + n].copy_from_slice(&seed[..n]);
        input[24..32].copy_from_slice(&index.to_le_bytes());
        EventId(xxhash_rust::xxh3::xxh3_128(&input).to_le_bytes())
    }
}

/// An event read from the log: its own fields decoded, the shared ones
/// borrowed from its batch's context (decoded once per batch).
#[derive(Debug, Clone)]
pub struct Stored {
    /// The event's own fields with its observed times and origin numbers
    /// filled in; the shared ones are in the group. A derived id is only
    /// in `id`.
    pub env: Envelope,
    /// The id (also in `env.id` when it was stored).
    pub id: EventId,
    ctx: Arc<Context>,
    /// Index of the event's group in `ctx`, or `None` for a format-1 event
    /// (whose `env` is whole).
    group: Option<usize>,
    /// The metric record's stored bytes when [`Decoder::decode_lean`] left
    /// it undecoded (`env.record` is then `None`): a gauge or sum that
    /// [`MetricPoints`] reads, checked when decoded.
    points: Option<Bytes>,
}

/// A file record's position, shared parts and own parts together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin<'a> {
    pub path: &'a str,
    pub fingerprint: u64,
    pub generation: u32,
    pub offset: u64,
    pub end_offset: u64,
}

impl Stored {
    /// The group whose fields this event shares (`None` for a format-1
    /// event, which holds them all itself).
    pub fn group(&self) -> Option<&Group> {
        self.group.map(|g| &self.ctx.groups[g])
    }

    /// The batch context and the index of the group this event shares its
    /// fields with: an identity under which what is derived from the
    /// group once (a sink's rendered fragments) can be kept for the
    /// group's other events. `None` for a format-1 event.
    pub fn shared_with(&self) -> Option<(&Arc<Context>, usize)> {
        self.group.map(|g| (&self.ctx, g))
    }

    pub fn source(&self) -> &str {
        self.group().map_or(&self.env.source, |g| &g.source)
    }

    pub fn resource(&self) -> Option<&Resource> {
        match self.group() {
            Some(g) => g.resource.as_ref(),
            None => self.env.resource.as_ref(),
        }
    }

    pub fn resource_schema_url(&self) -> &str {
        self.group()
            .map_or(&self.env.resource_schema_url, |g| &g.resource_schema_url)
    }

    pub fn scope(&self) -> Option<&InstrumentationScope> {
        match self.group() {
            Some(g) => g.scope.as_ref(),
            None => self.env.scope.as_ref(),
        }
    }

    pub fn scope_schema_url(&self) -> &str {
        self.group()
            .map_or(&self.env.scope_schema_url, |g| &g.scope_schema_url)
    }

    /// Log record attributes the event shares with its group; they come
    /// before the record's own (`record()`'s `attributes`).
    pub fn shared_attributes(&self) -> &[KeyValue] {
        self.group().map_or(&[], |g| &g.attributes)
    }

    /// The record, without the shared attributes; `None` for a metric left
    /// in its stored bytes ([`Stored::metric_points`]).
    pub fn record(&self) -> Option<&Record> {
        self.env.record.as_ref()
    }

    /// The gauge or sum [`Decoder::decode_lean`] left undecoded, read in
    /// place.
    pub fn metric_points(&self) -> Option<MetricPoints<'_>> {
        MetricPoints::head(self.points.as_deref()?)
    }

    pub fn signal(&self) -> Option<Signal> {
        match &self.points {
            Some(_) => Some(Signal::Metrics),
            None => self.env.signal(),
        }
    }

    pub fn observed_time_unix_nano(&self) -> u64 {
        self.env.observed_time_unix_nano
    }

    pub fn origin(&self) -> Option<Origin<'_>> {
        let own = self.env.origin.as_ref()?;
        let path = match self.group().and_then(|g| g.origin.as_ref()) {
            Some(g) => g.path.as_str(),
            None => own.path.as_str(),
        };
        Some(Origin {
            path,
            fingerprint: own.fingerprint,
            generation: own.generation,
            offset: own.offset,
            end_offset: own.end_offset,
        })
    }

    /// The whole envelope, as format 1 stores it: for the quarantine, the
    /// `file` sink and `dump`, which show or keep every event self-contained.
    pub fn to_envelope(&self) -> Envelope {
        let mut env = self.env.clone();
        if let Some(b) = &self.points {
            // Checked in place when decoded: prost reads it too.
            env.record = Metric::decode(b.as_ref()).ok().map(Record::Metric);
        }
        env.id = self.id.0.to_vec();
        env.group = 0;
        env.observed_delta = 0;
        let Some(g) = self.group() else { return env };
        env.source = g.source.clone();
        env.resource = g.resource.clone();
        env.resource_schema_url = g.resource_schema_url.clone();
        env.scope = g.scope.clone();
        env.scope_schema_url = g.scope_schema_url.clone();
        if !g.attributes.is_empty() {
            if let Some(Record::Log(r)) = &mut env.record {
                let own = std::mem::take(&mut r.attributes);
                r.attributes = g.attributes.iter().cloned().chain(own).collect();
            }
        }
        if let (Some(o), Some(go)) = (&mut env.origin, &g.origin) {
            o.path = go.path.clone();
        }
        env
    }

    /// The event as one JSON object (see [`Envelope::to_json`]).
    pub fn to_json(&self, seq: u64) -> serde_json::Value {
        self.to_envelope().to_json(seq)
    }
}

/// Reads events of either format, decoding each batch's context once.
#[derive(Default)]
pub struct Decoder {
    /// The last context decoded, by its bytes.
    last: Option<(Bytes, Arc<Context>)>,
}

impl Decoder {
    pub fn new() -> Decoder {
        Decoder::default()
    }

    /// Decodes one event: `data` its own bytes, `context` its batch's
    /// (empty for format 1), `index` its position in the batch.
    pub fn decode(
        &mut self,
        data: &[u8],
        context: &Bytes,
        index: u64,
    ) -> Result<Stored, EnvelopeError> {
        if context.is_empty() {
            let env = Envelope::decode_event(data)?;
            return self.complete(env, None, context, index);
        }
        let env = Envelope::decode(data)?;
        if env.record.is_none() {
            return Err(EnvelopeError::NoRecord);
        }
        self.complete(env, None, context, index)
    }

    /// Decodes one event as [`Decoder::decode`] does, but leaves a gauge
    /// or sum record undecoded, for [`Stored::metric_points`] to read in
    /// place; any other record is decoded.
    pub fn decode_lean(
        &mut self,
        data: &Bytes,
        context: &Bytes,
        index: u64,
    ) -> Result<Stored, EnvelopeError> {
        let lean = without_metric(data).filter(|(_, r)| MetricPoints::read(r).is_some());
        let Some((env, record)) = lean else {
            return self.decode(data, context, index);
        };
        if context.is_empty() && env.id.len() != 16 {
            return Err(EnvelopeError::BadId(env.id.len()));
        }
        let points = data.slice_ref(record);
        self.complete(env, Some(points), context, index)
    }

    /// The event from its decoded envelope: the shared fields' group, the
    /// observed times, the origin and the id filled in.
    fn complete(
        &mut self,
        mut env: Envelope,
        points: Option<Bytes>,
        context: &Bytes,
        index: u64,
    ) -> Result<Stored, EnvelopeError> {
        if context.is_empty() {
            let id = env.event_id().ok_or(EnvelopeError::BadId(env.id.len()))?;
            return Ok(Stored {
                env,
                id,
                ctx: empty(),
                group: None,
                points,
            });
        }
        let ctx = self.context(context)?;
        let gi = env.group as usize;
        let Some(g) = ctx.groups.get(gi) else {
            return Err(EnvelopeError::NoGroup(env.group, ctx.groups.len()));
        };
        if env.observed_time_unix_nano == 0 {
            env.observed_time_unix_nano =
                g.observed_time_unix_nano.wrapping_add(env.observed_delta);
        }
        env.observed_delta = 0;
        if g.record_observed {
            if let Some(Record::Log(r)) = &mut env.record {
                if r.observed_time_unix_nano == 0 {
                    r.observed_time_unix_nano = env.observed_time_unix_nano;
                }
            }
        }
        if let Some(go) = &g.origin {
            let o = env.origin.get_or_insert_with(FileOrigin::default);
            o.fingerprint = go.fingerprint;
            o.generation = go.generation;
            o.offset = go.offset.wrapping_add(o.offset);
            o.end_offset = o.offset.wrapping_add(o.end_offset);
        }
        let id = if !env.id.is_empty() {
            env.event_id().ok_or(EnvelopeError::BadId(env.id.len()))?
        } else if let (Some(o), Some(_)) = (&env.origin, &g.origin) {
            EventId::for_file_line(o.fingerprint, o.generation, o.offset)
        } else if g.id_seed.len() == 16 {
            EventId::derived(&g.id_seed, index)
        } else {
            return Err(EnvelopeError::BadId(0));
        };
        Ok(Stored {
            env,
            id,
            ctx,
            group: Some(gi),
            points,
        })
    }

    fn context(&mut self, bytes: &Bytes) -> Result<Arc<Context>, EnvelopeError> {
        if let Some((b, c)) = &self.last {
            if b.as_ptr() == bytes.as_ptr() && b.len() == bytes.len() || b == bytes {
                return Ok(c.clone());
            }
        }
        let c = Context::decode(bytes.as_ref())?;
        if c.groups.is_empty() {
            return Err(EnvelopeError::NoGroup(0, 0));
        }
        let c = Arc::new(c);
        self.last = Some((bytes.clone(), c.clone()));
        Ok(c)
    }
}

/// An event's envelope decoded but for its metric record, and the
/// record's bytes; `None` when it holds another record, the record twice
/// (protobuf merges them), or is not well formed: prost decodes it then.
fn without_metric(data: &[u8]) -> Option<(Envelope, &[u8])> {
    let mut env = Envelope::default();
    let mut record = None;
    let mut it = fields(data);
    let mut at = 0;
    while let Some((field, v)) = it.next() {
        let end = data.len() - it.remaining();
        match (field, v) {
            (METRIC, Wire::Bytes(b)) if record.is_none() => record = Some(b),
            (METRIC | LOG_RECORD | SPAN, _) => return None,
            // Each other field as prost decodes it, in place.
            _ => env.merge(&data[at..end]).ok()?,
        }
        at = end;
    }
    if it.bad {
        return None;
    }
    Some((env, record?))
}

fn empty() -> Arc<Context> {
    static EMPTY: std::sync::OnceLock<Arc<Context>> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| Arc::new(Context::default())).clone()
}
