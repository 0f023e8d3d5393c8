//! A stream: one generation of one followed file, its positions, what it
//! holds in memory (an unfinished line, a multiline event), and the last
//! bytes read (to recognise a copy of its file).

use std::fs::File;
use std::path::PathBuf;
use std::time::Instant;

use super::super::checkpoint::{self, Record};
use super::super::encode::Template;
use super::super::identity::{FileMeta, Prefix};
use super::super::lines::Splitter;
use super::super::multiline::Group;
use super::chunk::Ids;
use super::out::{Lines, Out};
use super::protocol::StreamId;

/// Bytes of the last data read kept per stream to recognise copies.
pub(super) const TAIL_BYTES: usize = 64;

/// The last bytes read of a stream (at most [`TAIL_BYTES`]) and the offset
/// just after them: a copy of its file holds the same bytes there.
#[derive(Debug, Default)]
pub(super) struct LastBytes {
    bytes: Vec<u8>,
    end: u64,
}

impl LastBytes {
    /// As a checkpoint stores them (nothing while none were read).
    pub(super) fn from_record(t: Option<&checkpoint::Tail>) -> LastBytes {
        t.and_then(|t| {
            Some(LastBytes {
                bytes: checkpoint::from_hex(&t.hex)?,
                end: t.end,
            })
        })
        .unwrap_or_default()
    }

    fn to_record(&self) -> Option<checkpoint::Tail> {
        (!self.bytes.is_empty()).then(|| checkpoint::Tail {
            end: self.end,
            hex: checkpoint::to_hex(&self.bytes),
        })
    }

    /// Adds `data`, read at `at`: after the bytes held if it continues
    /// them, in their place if not.
    fn remember(&mut self, at: u64, data: &[u8]) {
        if data.len() >= TAIL_BYTES {
            self.bytes.clear();
            self.bytes
                .extend_from_slice(&data[data.len() - TAIL_BYTES..]);
        } else {
            if self.end != at {
                self.bytes.clear();
            }
            self.bytes.extend_from_slice(data);
            let over = self.bytes.len().saturating_sub(TAIL_BYTES);
            self.bytes.drain(..over);
        }
        self.end = at + data.len() as u64;
    }

    /// Where the bytes start and the bytes, if there are some and a file
    /// of `len` bytes can hold them where they were.
    pub(super) fn within(&self, len: u64) -> Option<(u64, &[u8])> {
        let start = self.end.checked_sub(self.bytes.len() as u64)?;
        (!self.bytes.is_empty() && len >= self.end).then_some((start, &self.bytes[..]))
    }
}

pub(super) struct Stream {
    pub(super) key: u64,
    pub(super) generation: u32,
    pub(super) path: PathBuf,
    pub(super) template: Template,
    pub(super) meta: FileMeta,
    pub(super) prefix: Prefix,
    pub(super) read_pos: u64,
    pub(super) emitted: u64,
    pub(super) file: Option<File>,
    pub(super) split: Splitter,
    pub(super) group: Option<Group>,
    /// When bytes last arrived (or the stream was opened).
    pub(super) last_data: Instant,
    /// The last read found nothing new.
    pub(super) at_eof: bool,
    pub(super) attached: bool,
    /// Since when the file is not found at any matching path (it is being
    /// drained, see [`drained`](super::timers::drained)); the same moment in unix
    /// milliseconds, for the checkpoint.
    pub(super) unseen_since: Option<Instant>,
    pub(super) unseen_unix_ms: Option<u64>,
    pub(super) detached_at: Option<(Instant, u64)>,
    pub(super) tail: LastBytes,
    /// Queued in `wanted`.
    pub(super) wanted: bool,
    /// Open and read to its end, but inotify or a scan says it changed.
    pub(super) dirty: bool,
    /// Detached because its file was truncated in place (copytruncate).
    pub(super) truncated_away: bool,
    /// Spans past `emitted` whose lines are in the log already (recovered
    /// after an append refused as full was overtaken by a later one): read,
    /// not appended again.
    pub(super) ahead: Vec<(u64, u64)>,
}

impl Stream {
    pub(super) fn record(&self) -> Record {
        Record {
            key: self.key,
            generation: self.generation,
            path: self.path.to_string_lossy().into_owned(),
            dev: self.meta.dev,
            ino: self.meta.ino,
            btime: self.meta.btime,
            prefix_len: self.prefix.len,
            prefix_hash: self.prefix.hash,
            offset: self.emitted,
            detached_unix_ms: self.detached_at.map(|d| d.1),
            rotated_unix_ms: self.unseen_unix_ms,
            tail: self.tail.to_record(),
            ahead: self.ahead.clone(),
        }
    }

    pub(super) fn remember_tail(&mut self, data: &[u8]) {
        self.tail.remember(self.read_pos, data);
    }

    /// A stream of `path`, first seen as `meta` with first bytes `prefix`,
    /// to be read from `start`: nothing held, no file open, not attached.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        key: u64,
        generation: u32,
        path: PathBuf,
        template: Template,
        meta: FileMeta,
        prefix: Prefix,
        start: u64,
        now: Instant,
    ) -> Stream {
        Stream {
            key,
            generation,
            path,
            template,
            meta,
            prefix,
            read_pos: start,
            emitted: start,
            file: None,
            split: Splitter::default(),
            group: None,
            last_data: now,
            at_eof: false,
            attached: false,
            unseen_since: None,
            unseen_unix_ms: None,
            detached_at: None,
            tail: LastBytes::default(),
            wanted: false,
            dirty: false,
            truncated_away: false,
            ahead: Vec::new(),
        }
    }

    /// Splits the stream into what labels its lines and the state lines
    /// are completed in, so that lines can be fed while both are borrowed.
    fn parts(&mut self, id: StreamId) -> (Ids<'_>, &mut Splitter, &mut Option<Group>, &mut u64) {
        let Stream {
            split,
            group,
            key,
            generation,
            template,
            emitted,
            ahead,
            ..
        } = self;
        let ids = Ids {
            id,
            key: *key,
            generation: *generation,
            template,
            ahead,
        };
        (ids, split, group, emitted)
    }

    /// Splits `data`, read at offset `base`, into lines for `to`.
    pub(super) fn feed(&mut self, id: StreamId, data: &[u8], base: u64, to: &mut Lines<'_>) {
        let (ids, split, group, emitted) = self.parts(id);
        split.feed(data, base, to.keep, |line| {
            to.complete(group, &ids, line, emitted)
        });
    }

    /// Ends the unfinished line: it is emitted as it is.
    pub(super) fn flush_line(&mut self, id: StreamId, to: &mut Lines<'_>) {
        let (ids, split, group, emitted) = self.parts(id);
        split.flush(|line| to.complete(group, &ids, line, emitted));
    }

    /// Ends the multiline event being gathered: it is emitted as it is.
    pub(super) fn flush_group(&mut self, id: StreamId, out: &mut Out) {
        let (ids, _, group, emitted) = self.parts(id);
        if let Some(g) = group.take() {
            out.emit(&ids, g.as_line(), emitted);
        }
    }
}

#[cfg(test)]
impl Stream {
    /// A stream for tests: key `ino`, the file at `path` on inode (1, `ino`)
    /// born at 7, first bytes `first`, read and emitted up to `pos`,
    /// attached.
    pub(super) fn sample(path: &str, ino: u64, first: &[u8], pos: u64) -> Stream {
        let path = PathBuf::from(path);
        let template = super::super::encode::Encoder::new("app", "box").template(&path);
        let meta = FileMeta {
            dev: 1,
            ino,
            btime: Some(7),
            len: pos,
        };
        let now = Instant::now();
        let mut s = Stream::new(ino, 0, path, template, meta, Prefix::of(first), pos, now);
        s.attached = true;
        s
    }
}
