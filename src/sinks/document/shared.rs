//! What the documents of one request have in common, rendered once.
//!
//! A format-2 event shares its source, resource, scope, file path and the
//! log attributes of its read with the other events of its group: those
//! parts of its document are the same bytes for every event of the group.
//! A request of 1,000 lines from one file would escape and copy the same
//! resource, scope and path 1,000 times; [`Shared`] renders them for the
//! first event of a group and copies the bytes for the others. Timestamps
//! are similar: the events of a request mostly fall in the same second, so
//! its date and time of day are formatted once a second.
//!
//! The fragments are exactly what the per-event path ([`super::head`] and
//! friends) writes: the test `cached_documents_are_the_uncached_bytes`
//! compares them, and the sinks' tests compare format-2 requests with the
//! same events whole (format 1, never cached).

use std::sync::Arc;

use crate::calendar::Civil;
use crate::event::{Context, Signal, Stored};

use super::{head, kvs, Layout, Obj};

/// Rendered fragments of the last group seen, and the clock; one per
/// request being encoded.
pub(crate) struct Shared {
    /// The group the fragments were rendered for; the context is held so
    /// that its address cannot be reused by another batch meanwhile.
    group: Option<(Arc<Context>, usize, Option<Signal>)>,
    /// `,"source":…,"signal":…` with `resource` and `scope` when present.
    pub(super) head: Vec<u8>,
    /// `,"log.file.path":"…"` when the group holds the file's path, else
    /// empty (the event's own origin has it).
    pub(super) path: Vec<u8>,
    /// `{` and the group's log attributes, the object left open for the
    /// record's own.
    pub(super) attributes: Vec<u8>,
    /// Whether `attributes` holds no attribute yet.
    pub(super) attributes_empty: bool,
    pub(super) clock: Clock,
    /// What the sink's documents hold.
    pub(super) layout: Layout,
}

impl Default for Shared {
    /// For full documents, every field: what the tests compare whole.
    fn default() -> Shared {
        Shared::new(Layout::Full)
    }
}

impl Shared {
    /// Fragments for documents of `layout`.
    pub(crate) fn new(layout: Layout) -> Shared {
        Shared {
            group: None,
            head: Vec::new(),
            path: Vec::new(),
            attributes: Vec::new(),
            attributes_empty: true,
            clock: Clock::default(),
            layout,
        }
    }

    /// Makes the fragments those of `ev`'s group; false for an event that
    /// shares nothing (format 1), whose document is written whole.
    pub(super) fn refresh(&mut self, ev: &Stored) -> bool {
        let Some((ctx, gi)) = ev.shared_with() else {
            return false;
        };
        let signal = ev.signal();
        if let Some((c, g, s)) = &self.group {
            if Arc::ptr_eq(c, ctx) && *g == gi && *s == signal {
                return true;
            }
        }
        let Some(group) = ev.group() else {
            return false;
        };
        self.head.clear();
        head(&mut Obj::resume(&mut self.head), ev, self.layout);
        self.path.clear();
        if let Some(o) = &group.origin {
            Obj::resume(&mut self.path).str("log.file.path", &o.path);
        }
        self.attributes.clear();
        let mut o = Obj::open(&mut self.attributes);
        let skip = self.layout.skipped_attributes(ev);
        kvs(&mut o, &group.attributes, skip);
        self.attributes_empty = !group
            .attributes
            .iter()
            .any(|kv| !skip.contains(&kv.key.as_str()));
        self.group = Some((ctx.clone(), gi, signal));
        true
    }
}

/// RFC 3339 timestamps, the date and time of day formatted once a second.
#[derive(Default)]
pub(crate) struct Clock {
    /// The second `prefix` shows.
    second: Option<u64>,
    /// `"YYYY-MM-DDTHH:MM:SS.`
    prefix: [u8; 21],
}

impl Clock {
    /// `unix_nanos` as a JSON string, UTC with milliseconds: what a `date`
    /// field of any document store accepts.
    pub(crate) fn write(&mut self, out: &mut Vec<u8>, unix_nanos: u64) {
        let second = unix_nanos / 1_000_000_000;
        if self.second != Some(second) {
            let c = Civil::from_unix_nanos(unix_nanos);
            let b = &mut self.prefix;
            *b = *b"\"0000-00-00T00:00:00.";
            digits(&mut b[1..5], c.year.clamp(0, 9999) as u64);
            digits(&mut b[6..8], c.month as u64);
            digits(&mut b[9..11], c.day as u64);
            digits(&mut b[12..14], c.hour as u64);
            digits(&mut b[15..17], c.minute as u64);
            digits(&mut b[18..20], c.second as u64);
            self.second = Some(second);
        }
        let mut ms = *b"000Z\"";
        digits(&mut ms[..3], unix_nanos % 1_000_000_000 / 1_000_000);
        out.extend_from_slice(&self.prefix);
        out.extend_from_slice(&ms);
    }
}

/// `v` in decimal, zero-padded to fill `to`.
fn digits(to: &mut [u8], mut v: u64) {
    for d in to.iter_mut().rev() {
        *d = b'0' + (v % 10) as u8;
        v /= 10;
    }
}
