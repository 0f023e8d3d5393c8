//! A chunk: the lines the tailer hands the appender in one append, with
//! the format-2 context they share (one group per file read).

use std::sync::Arc;

use prost::Message;

use crate::event::Context;
use crate::sources::file::encode::{Encoder, InGroup, Template};

/// A stream's number, unique within a source (see the tailer's `Streams`);
/// records and chunk positions name streams by it.
pub type StreamId = u64;

/// What an emitted line belongs to.
pub(super) struct Ids<'a> {
    pub(super) id: StreamId,
    pub(super) key: u64,
    pub(super) generation: u32,
    pub(super) template: &'a Template,
    /// Spans whose lines are in the log already (see `Stream::ahead`).
    pub(super) ahead: &'a [(u64, u64)],
}

/// Groups a file may have in one chunk's context (format 2). Each read
/// takes the time it was read as its lines' observed time; a group per
/// read stores it once, where a line of a later read in the file's one
/// group would store its distance from the group's, 4 bytes or so. A group
/// costs about 220 bytes, a read of a busy file (up to [`READ_BUF`]) holds
/// hundreds of lines; the cap keeps a chunk of many small reads from
/// spending more on groups than the deltas would.
const GROUPS_PER_FILE: usize = 4;
/// Lines ready to append: events framed as the log frames them, the
/// context they share (format 2), and each stream's `emitted` position
/// once they are in the log.
#[derive(Debug, Default)]
pub struct Chunk {
    pub data: Vec<u8>,
    pub events: u32,
    pub positions: Vec<(StreamId, u64)>,
    /// The encoded [`Context`] of the events (empty in format 1), set when
    /// the chunk is sent: one group per file and generation in the chunk.
    pub context: bytes::Bytes,
    /// The groups while the chunk fills.
    pub(in crate::sources::file) groups: Vec<ChunkGroup>,
    /// Bytes `groups` take encoded as a [`Context`].
    pub(in crate::sources::file) context_len: usize,
    /// The group of the last line, looked at first.
    pub(in crate::sources::file) last_group: usize,
}

/// A group of a chunk being filled: what identifies it, and the group.
#[derive(Debug)]
pub(in crate::sources::file) struct ChunkGroup {
    key: u64,
    generation: u32,
    path: Arc<str>,
    group: crate::event::Group,
}

impl Chunk {
    /// Event and context bytes, without framing.
    pub fn payload_bytes(&self) -> u64 {
        (self.data.len() - 4 * self.events as usize + self.context.len()) as u64
    }

    /// The group of a line of `ids` observed at `observed_ns`: the
    /// chunk's group of its file and read (same observed time), or a new
    /// one, or past [`GROUPS_PER_FILE`] the file's first with a delta.
    pub(super) fn group_of(
        &mut self,
        enc: &Encoder,
        ids: &Ids<'_>,
        offset: u64,
        observed_ns: u64,
    ) -> InGroup {
        let path = ids.template.path();
        let same_file = |g: &ChunkGroup| {
            g.key == ids.key
                && g.generation == ids.generation
                && (Arc::ptr_eq(&g.path, path) || g.path == *path)
        };
        let exact = |g: &ChunkGroup| g.group.observed_time_unix_nano == observed_ns && same_file(g);
        let found = match self.groups.get(self.last_group) {
            Some(g) if exact(g) => Some(self.last_group),
            _ => self.groups.iter().position(exact).or_else(|| {
                let mut of_file = self.groups.iter().enumerate().filter(|(_, g)| same_file(g));
                let first = of_file.next().map(|(i, _)| i);
                (of_file.count() + 1 >= GROUPS_PER_FILE)
                    .then_some(first)
                    .flatten()
            }),
        };
        let i = found.unwrap_or_else(|| {
            let group = enc.group(ids.template, ids.key, ids.generation, offset, observed_ns);
            let len = group.encoded_len();
            self.context_len +=
                prost::encoding::key_len(1) + prost::encoding::encoded_len_varint(len as u64) + len;
            self.groups.push(ChunkGroup {
                key: ids.key,
                generation: ids.generation,
                path: path.clone(),
                group,
            });
            self.groups.len() - 1
        });
        self.last_group = i;
        let g = &self.groups[i].group;
        InGroup {
            group: i as u32,
            offset_base: g.origin.as_ref().map_or(0, |o| o.offset),
            observed_delta: observed_ns.wrapping_sub(g.observed_time_unix_nano),
        }
    }

    /// Encodes the groups into `context`, ready to append.
    pub(super) fn seal(&mut self) {
        if self.groups.is_empty() {
            return;
        }
        let ctx = Context {
            groups: std::mem::take(&mut self.groups)
                .into_iter()
                .map(|g| g.group)
                .collect(),
        };
        debug_assert_eq!(ctx.encoded_len(), self.context_len);
        self.context = ctx.encode_to_vec().into();
    }

    pub(super) fn set_pos(&mut self, id: StreamId, pos: u64) {
        match self.positions.last_mut() {
            Some(last) if last.0 == id => last.1 = pos,
            _ => self.positions.push((id, pos)),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.events == 0 && self.positions.is_empty()
    }
}
