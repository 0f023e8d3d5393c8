//! Handing out one frame's events to a reader: format 1 straight out of
//! the map, format 2 from its blocks, each decompressed once per reader and
//! dropped when its last event is handed out.

use std::ops::Range;

use bytes::Bytes;

use super::block;
use super::format::{self, EventIter, FrameHeader};

/// One event as stored in the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub seq: u64,
    /// When its frame was appended, in unix milliseconds.
    pub append_ms: u64,
    /// The bytes given to [`Batch::push`](super::Batch::push).
    pub data: Bytes,
    /// The context of the batch it was appended with
    /// ([`Batch::set_context`](super::Batch::set_context)), shared by every
    /// event of that batch and stored once; empty if the batch had none and
    /// for events of a format-1 segment.
    pub context: Bytes,
    /// The sequence number of the first event of that batch (of its frame,
    /// in a format-1 segment): `seq - batch_start` is the event's index in
    /// the batch, which an embedder may use to derive per-event values from
    /// the context.
    pub batch_start: u64,
    /// The format version of the segment it was read from (1 or 2).
    pub format: u16,
}

/// The rest of a frame that has been decoded but not fully handed out.
pub(super) struct FrameCursor {
    /// The segment's map, and the frame's payload in it.
    map: Bytes,
    payload: Range<usize>,
    header: FrameHeader,
    format: u16,
    /// Format 1: where the next event's length is in `map`; format 2: where
    /// the next unopened block starts in `map`.
    at: usize,
    /// The next sequence number this cursor hands out.
    seq: u64,
    /// The sequence numbers this cursor may hand out: those below are
    /// passed over (a reader that starts inside a frame); the end is the
    /// first sequence number of the next segment (or the log's end), past
    /// which events are not this segment's to hand out.
    hand_out: Range<u64>,
    /// Format 2: the block being handed out, decompressed once.
    block: Option<OpenBlock>,
}

struct OpenBlock {
    body: block::Body,
    /// Where the next event's length is in `body.bytes`.
    at: usize,
    first_seq: u64,
    end_seq: u64,
}

/// What a frame cursor has next.
pub(super) enum Peek {
    /// An event's bytes: in the map (format 1) or the open block's body.
    Event(Range<usize>),
    /// A block whose body is damaged: its events, up to `to`, cannot be read.
    Damaged {
        to: u64,
        offset: usize,
        bytes: usize,
        reason: String,
    },
    End,
}

/// What [`next_event`] found.
enum Next {
    /// The event to hand out, as a range of the bytes.
    Event(Range<usize>),
    /// An event below `skip_to`, passed over.
    Passed,
    /// No whole event left.
    End,
}

/// The event whose length is at `*at` of `events` (format 1's payload or a
/// block's body): handed out, or passed over while `*seq` is below
/// `skip_to` (moving `*at` and `*seq` past it).
#[inline]
fn next_event(events: &[u8], at: &mut usize, seq: &mut u64, skip_to: u64) -> Next {
    let Some(r) = EventIter::new(&events[*at..]).next() else {
        return Next::End;
    };
    let r = r.start + *at..r.end + *at;
    if *seq < skip_to {
        *at = r.end;
        *seq += 1;
        return Next::Passed;
    }
    Next::Event(r)
}

impl FrameCursor {
    /// A cursor at the first event of the frame with `header`, whose
    /// payload is `payload` of `map`.
    pub(super) fn new(
        map: Bytes,
        payload: Range<usize>,
        header: FrameHeader,
        format: u16,
        hand_out: Range<u64>,
    ) -> FrameCursor {
        FrameCursor {
            at: payload.start,
            seq: header.first_seq,
            map,
            payload,
            header,
            format,
            hand_out,
            block: None,
        }
    }

    pub(super) fn peek(&mut self) -> Peek {
        loop {
            if self.seq >= self.hand_out.end {
                return Peek::End;
            }
            if self.format == format::FORMAT_V1 {
                let events = &self.map[..self.payload.end];
                match next_event(events, &mut self.at, &mut self.seq, self.hand_out.start) {
                    Next::Event(r) => return Peek::Event(r),
                    Next::Passed => continue,
                    Next::End => return Peek::End,
                }
            }
            if let Some(b) = &mut self.block {
                if self.seq < b.end_seq {
                    match next_event(&b.body.bytes, &mut b.at, &mut self.seq, self.hand_out.start) {
                        Next::Event(r) => return Peek::Event(r),
                        Next::Passed => continue,
                        // `block::open` checked the count; cannot happen.
                        Next::End => {
                            self.seq = b.end_seq;
                            continue;
                        }
                    }
                }
                self.block = None;
            }
            let offset = self.at;
            let Some((h, stored)) = block::Blocks::new(&self.map[offset..self.payload.end]).next()
            else {
                return Peek::End;
            };
            let stored = stored.start + offset..stored.end + offset;
            self.at = stored.end;
            let first_seq = self.seq;
            let end_seq = first_seq + h.count as u64;
            if end_seq <= self.hand_out.start {
                // Passed over without decompressing it.
                self.seq = end_seq;
                continue;
            }
            match block::open(&h, self.map.slice(stored)) {
                Ok(body) => {
                    self.block = Some(OpenBlock {
                        at: body.events_at,
                        body,
                        first_seq,
                        end_seq,
                    })
                }
                Err(e) => {
                    self.seq = end_seq;
                    return Peek::Damaged {
                        to: end_seq,
                        offset,
                        bytes: self.at - offset,
                        reason: e.to_string(),
                    };
                }
            }
        }
    }

    pub(super) fn take(&mut self, r: Range<usize>) -> Event {
        let e = match &mut self.block {
            Some(b) if self.format != format::FORMAT_V1 => {
                b.at = r.end;
                Event {
                    seq: self.seq,
                    append_ms: self.header.append_ms,
                    data: b.body.bytes.slice(r),
                    context: b.body.context.clone(),
                    batch_start: b.first_seq,
                    format: self.format,
                }
            }
            _ => {
                self.at = r.end;
                Event {
                    seq: self.seq,
                    append_ms: self.header.append_ms,
                    data: self.map.slice(r),
                    context: Bytes::new(),
                    batch_start: self.header.first_seq,
                    format: format::FORMAT_V1,
                }
            }
        };
        self.seq += 1;
        e
    }
}
