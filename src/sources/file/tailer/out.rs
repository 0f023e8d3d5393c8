//! The output side of the tailer: lines encoded into the chunk being
//! filled, record updates gathered, and both sent to the appender in order
//! (records first: a stream's key is durable before its first line).

use std::time::Instant;

use tokio::sync::mpsc;
use tracing::warn;

use super::super::beat::Step;
use super::super::checkpoint::Record;
use super::super::encode::{Encoder, LineMeta};
use super::super::lines::Line;
use super::super::multiline::{self, Group};
use super::super::{FileSourceOptions, Multiline};
use super::chunk::Ids;
use super::protocol::{Chunk, Counters, StreamId, Update};

/// Room reserved in a new chunk beyond `chunk_bytes`, for the event that
/// crosses it (longer events make the chunk grow).
const CHUNK_SLACK: usize = 16 << 10;

/// The output side: the chunk being filled, pending record updates, and the
/// channel to the appender.
pub(super) struct Out {
    pub(super) enc: Encoder,
    pub(super) upserts: Vec<(StreamId, Record)>,
    pub(super) forget: Vec<StreamId>,
    pub(super) barrier: bool,
    pub(super) observed_ns: u64,
    /// Lines read since the counter was last updated (one atomic add per
    /// read, not per line).
    pub(super) lines: u64,
    pub(super) c: Counters,
    /// The appender is gone: stop.
    pub(super) closed: bool,
    chunk: Chunk,
    tx: mpsc::Sender<Update>,
    limits: Limits,
    multiline: bool,
    /// Events are format 2 (see `encode.rs`).
    format2: bool,
    /// The source's processing chain (issue 17), run on each line before
    /// it is encoded.
    process: Option<crate::process::Runner>,
}

/// How big what the tailer hands the appender may get.
pub(super) struct Limits {
    /// Bytes of one frame (events and context): what one append takes.
    pub(super) max_frame: usize,
    /// A chunk is sent once it holds this many bytes.
    pub(super) chunk_bytes: usize,
    /// Lines (and multiline events) are cut at this many bytes.
    pub(super) max_line: usize,
}

/// Cuts `b` to at most `max` bytes, at a character boundary if the bytes
/// are valid UTF-8 up to the cut.
pub(super) fn cut(b: &[u8], max: usize) -> &[u8] {
    if b.len() <= max {
        return b;
    }
    let c = &b[..max];
    match std::str::from_utf8(c) {
        Err(e) if e.error_len().is_none() => &c[..e.valid_up_to()],
        _ => c,
    }
}

impl Out {
    pub(super) fn new(
        enc: Encoder,
        process: Option<crate::process::Runner>,
        tx: mpsc::Sender<Update>,
        c: Counters,
        limits: Limits,
        multiline: bool,
        format2: bool,
    ) -> Out {
        Out {
            enc,
            upserts: Vec::new(),
            forget: Vec::new(),
            barrier: false,
            observed_ns: 0,
            lines: 0,
            c,
            closed: false,
            chunk: Chunk::default(),
            tx,
            limits,
            multiline,
            format2,
            process,
        }
    }

    fn send(&mut self, u: Update) {
        if self.closed {
            return;
        }
        // Waiting for the log to take a chunk is not a stall.
        self.c.beat.step(Step::Waiting);
        if self.tx.blocking_send(u).is_err() {
            self.closed = true;
        }
        self.c.beat.step(Step::Reading);
    }

    fn flush_records(&mut self) {
        if self.upserts.is_empty() && self.forget.is_empty() {
            return;
        }
        let u = Update::Records {
            upserts: std::mem::take(&mut self.upserts),
            forget: std::mem::take(&mut self.forget),
            barrier: std::mem::take(&mut self.barrier),
        };
        self.send(u);
    }

    /// Sends the record updates, then the chunk.
    pub(super) fn flush(&mut self) {
        self.c.lines.inc_by(std::mem::take(&mut self.lines));
        if let Some(p) = self.process.as_mut() {
            p.flush();
        }
        self.flush_records();
        if !self.chunk.is_empty() {
            let mut c = std::mem::take(&mut self.chunk);
            // The next chunk fills a buffer the log is done with (src/pool.rs).
            self.chunk.data = crate::pool::CHUNKS.take();
            c.seal();
            self.send(Update::Chunk(c));
        }
    }

    /// Encodes one line into the chunk, unless the chunk would then be more
    /// than one append can take (events and context): then the chunk is
    /// left as it was and the answer is false.
    fn push(&mut self, ids: &Ids<'_>, body: &str, meta: &LineMeta) -> bool {
        let c = &mut self.chunk;
        let before = (c.data.len(), c.groups.len(), c.context_len);
        if before.0 == 0 {
            // Room for a whole chunk at once: grown by doubling instead, a
            // chunk would be copied on every growth and end up holding up to
            // twice its size, while several wait in the channel and in flight.
            c.data
                .reserve(self.limits.chunk_bytes + CHUNK_SLACK.min(self.limits.chunk_bytes));
        }
        let record = self.process.as_ref().map_or(&[][..], |p| &p.record[..]);
        if self.format2 {
            let g = c.group_of(&self.enc, ids, meta.offset, meta.observed_ns);
            self.enc.encode_own_with(body, record, meta, g, &mut c.data);
        } else {
            self.enc
                .encode_with(ids.template, body, record, meta, &mut c.data);
        }
        if c.data.len() + c.context_len <= self.limits.max_frame {
            return true;
        }
        c.data.truncate(before.0);
        c.groups.truncate(before.1);
        c.context_len = before.2;
        false
    }

    /// Encodes one line (or multiline event) and records the stream's new
    /// position. Lines with nothing in them make no event but move the
    /// position.
    pub(super) fn emit(&mut self, ids: &Ids<'_>, line: Line<'_>, emitted: &mut u64) {
        *emitted = line.end;
        if ids
            .ahead
            .iter()
            .any(|&(start, end)| start <= line.start && line.end <= end)
        {
            // Appended before a restart, past lines that were not: only
            // the position moves.
            self.chunk.set_pos(ids.id, line.end);
            return;
        }
        if line.len == 0 && !self.multiline {
            self.chunk.set_pos(ids.id, line.end);
            return;
        }
        let truncated = line.len > self.limits.max_line as u64;
        let bytes = cut(line.bytes, self.limits.max_line);
        let (body, invalid) = match std::str::from_utf8(bytes) {
            Ok(s) => (std::borrow::Cow::Borrowed(s), false),
            Err(_) => (String::from_utf8_lossy(bytes), true),
        };
        // Processing (issue 17) happens here, before the encode: the log
        // stores what will be sent, and a line read again after a crash
        // comes out as the same event with the same id (and the same
        // sampling decision). A dropped line only moves the position.
        let body = match self.process.as_mut() {
            None => body,
            Some(p) => {
                let id = crate::event::EventId::for_file_line(ids.key, ids.generation, line.start);
                match p.process(body, id) {
                    Some(b) => b,
                    None => {
                        self.chunk.set_pos(ids.id, line.end);
                        return;
                    }
                }
            }
        };
        let meta = LineMeta {
            key: ids.key,
            generation: ids.generation,
            offset: line.start,
            end: line.end,
            observed_ns: self.observed_ns,
            truncated_from: truncated.then_some(line.len),
            invalid_utf8: invalid,
        };
        if !self.push(ids, &body, &meta) {
            // Not in this chunk: in the next one, or, if even an empty
            // chunk cannot take it, in none.
            let fits = self.chunk.events > 0 && {
                self.flush();
                self.push(ids, &body, &meta)
            };
            if !fits {
                warn!(source = %self.c.component, offset = line.start, bytes = line.len,
                    "a line is too large for one log segment even after truncation; dropped (lower max_line_bytes or raise the segment size)");
                self.c
                    .metrics
                    .drop_events(&self.c.component, "too_large", 1);
                self.chunk.set_pos(ids.id, line.end);
                return;
            }
        }
        self.chunk.events += 1;
        self.chunk.set_pos(ids.id, line.end);
        if truncated {
            self.c.truncated.inc();
        }
        if invalid {
            self.c.invalid_utf8.inc();
        }
        if self.chunk.data.len() >= self.limits.chunk_bytes {
            self.flush();
        }
    }
}

/// Where a stream's completed lines go: through multiline joining (if
/// configured) into the chunk.
pub(super) struct Lines<'a> {
    pub(super) out: &'a mut Out,
    pub(super) ml: Option<&'a Multiline>,
    /// Bytes of an unfinished line kept in memory.
    pub(super) keep: usize,
    /// When the lines were read.
    pub(super) now: Instant,
}

impl<'a> Lines<'a> {
    pub(super) fn new(
        out: &'a mut Out,
        opts: &'a FileSourceOptions,
        keep: usize,
        now: Instant,
    ) -> Lines<'a> {
        let ml = opts.multiline.as_ref();
        Lines { out, ml, keep, now }
    }

    /// Takes one completed line of the stream `ids` names.
    pub(super) fn complete(
        &mut self,
        group: &mut Option<Group>,
        ids: &Ids<'_>,
        line: Line<'_>,
        emitted: &mut u64,
    ) {
        let out = &mut *self.out;
        out.lines += 1;
        match self.ml {
            None => out.emit(ids, line, emitted),
            Some(ml) => multiline::push(ml, group, line, self.keep, self.now, |ev| {
                out.emit(ids, ev, emitted)
            }),
        }
    }
}
