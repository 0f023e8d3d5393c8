//! The tailer: one blocking thread per source that finds files, follows
//! them through rotation, reads and splits their lines and encodes them into
//! chunks for the appender.
//!
//! # Streams
//!
//! A *stream* is one generation of one file: a key (see `identity.rs`), a
//! generation, and where it lives now. A stream is *attached* while its file
//! is found at a path the globs match (or it is still being drained after a
//! rotation), and *detached* once its file is gone, rotated out of the globs,
//! or truncated away; a detached stream remembers its prefix and the last
//! bytes read, so a copy of its file (copytruncate's `app.log.1`) that shows
//! up later is recognised and continued from where the original stopped.
//! Detached streams are forgotten after [`FORGET_AFTER`].
//!
//! Positions per stream:
//!
//! ```text
//!   0 ......... emitted ......... read_pos ......... file length
//!   in the log  | held in memory: an unfinished line, a multiline event
//! ```
//!
//! Only `emitted` is reported to the appender, and the appender checkpoints
//! it only once the chunk holding those lines is acknowledged. Whatever lies
//! between `emitted` and `read_pos` is read again after a restart.
//!
//! # Rotation
//!
//! * rename and create: the old inode is found at its new name (if the globs
//!   match it) and continues there; if not, it is *drained*: its open handle
//!   is read on every pass (no inotify event names it any more) until
//!   nothing new was read for `rotate_wait` ([`drained`]) and it is read to
//!   its end. A stream without a handle (closed as idle or for the
//!   descriptor cap, or restored from the checkpoint) first looks for its
//!   inode in the directory it was last seen in (`identity::open_moved`).
//!   The new file is a new stream, read from its start.
//! * copytruncate: the file is shorter than what was read, or its first
//!   bytes changed: the stream is detached and the file continues as a new
//!   generation from offset 0. The copy, if the globs match it, is adopted
//!   by the detached stream and read from `emitted`; the detached stream
//!   keeps its unfinished line (emitted only if it stays quiet for
//!   `line_idle_timeout`), as the copy holds it whole. A file that starts
//!   like a followed one is judged only after that one was checked for a
//!   truncation not read yet (logrotate may copy, truncate and the
//!   application write on, all before the source looks), and a file found
//!   empty is identified again when its first bytes arrive (logrotate
//!   creates the copy, then writes it).
//! * delete while open: like a rename out of the globs.
//! * rotated while holdfast was down (or killed while draining it): the
//!   stream is found again by inode at its new name if the globs match it
//!   (`app.log.1`), and read to its end; if not, the first scan finds it
//!   missing and it is looked for in its directory and drained, keeping its
//!   key and generation, so its lines keep their ids.
//!
//! A file rotated out of the globs before it was ever found is not read, so
//! scans also run between the reads of a long pass: a backlog (and a log
//! slow to take it) does not keep new files from being found and opened.
//! Timeouts that end something for a file (an unfinished line, a multiline
//! event, following a rotated file) first check the file for bytes not read
//! yet, and count from when bytes were really read, not from the start of a
//! pass that may have taken long.
//!
//! # Bounds
//!
//! One read buffer for all files; per file, only an unfinished line (at most
//! `max_line_bytes + 1` bytes) and a multiline event. Open descriptors are
//! capped (`max_open`, a quarter of `RLIMIT_NOFILE`): beyond that the idlest
//! files are closed, and reopened (and re-identified) when they change.
//! Chunks are bounded in bytes and the channel to the appender in chunks, so
//! when the log pushes back the tailer blocks and reading pauses.

use std::collections::{HashMap, HashSet, VecDeque};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::checkpoint::{self, Record};
use super::discovery::{FoundFile, Patterns, Wake, Watch, Woken};
use super::encode::{Encoder, LineMeta, Template};
use super::identity::{self, judge, FileMeta, Prefix, Verdict};
use super::lines::{Line, Splitter};
use super::multiline::{self, Group};
use super::recovery::Found;
use super::{FileSourceOptions, StartAt};
use crate::metrics::Metrics;

pub type StreamId = u64;

/// Detached streams are kept this long for a copy of their file to appear.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Bytes read from one file before the others get a turn.
const READ_BUDGET: usize = 4 << 20;
/// Room reserved in a new chunk beyond `chunk_bytes`, for the event that
/// crosses it (longer events make the chunk grow).
const CHUNK_SLACK: usize = 16 << 10;
/// The shared read buffer.
const READ_BUF: usize = 256 << 10;
/// Bytes of the last data read kept per stream to recognise copies.
const TAIL_BYTES: usize = 64;
/// The fewest milliseconds between two scans that inotify asked for.
const MIN_RESCAN: Duration = Duration::from_millis(100);

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

/// Lines ready to append: events framed as the log frames them, and each
/// stream's `emitted` position once they are in the log.
#[derive(Debug, Default)]
pub struct Chunk {
    pub data: Vec<u8>,
    pub events: u32,
    pub positions: Vec<(StreamId, u64)>,
}

impl Chunk {
    /// Event bytes, without framing.
    pub fn payload_bytes(&self) -> u64 {
        (self.data.len() - 4 * self.events as usize) as u64
    }

    fn set_pos(&mut self, id: StreamId, pos: u64) {
        match self.positions.last_mut() {
            Some(last) if last.0 == id => last.1 = pos,
            _ => self.positions.push((id, pos)),
        }
    }

    fn is_empty(&self) -> bool {
        self.events == 0 && self.positions.is_empty()
    }
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
    pub checkpoint_errors: Counter,
    pub events: Counter,
    pub event_bytes: Counter,
}

impl Counters {
    pub fn new(metrics: &Arc<Metrics>, name: &str) -> Counters {
        let l = crate::metrics::SourceLabels {
            source: name.to_string(),
        };
        let f = &metrics.file_sources;
        Counters {
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
            checkpoint_errors: f.checkpoint_errors.get_or_create(&l).clone(),
            events: metrics.sources.events.get_or_create(&l).clone(),
            event_bytes: metrics.sources.bytes.get_or_create(&l).clone(),
        }
    }
}

/// Fixed settings of a tailer.
pub struct Settings {
    pub name: String,
    pub opts: FileSourceOptions,
    /// Largest chunk the log takes in one append (event framing included).
    pub max_frame: usize,
    /// A chunk is sent once it holds this many bytes.
    pub chunk_bytes: usize,
    pub max_open: usize,
    pub inotify: bool,
}

/// Where the tailer starts.
pub struct Initial {
    /// Streams from the checkpoint, positions already advanced past the
    /// lines found in the log.
    pub records: Vec<(StreamId, Record)>,
    /// No checkpoint existed: `start_at` applies to the files of the first scan.
    pub first_start: bool,
    /// Without a (trustworthy) checkpoint: the lines found in the whole log,
    /// to resume files whose key can be derived again.
    pub found: Option<Found>,
    pub next_id: StreamId,
}

struct Stream {
    key: u64,
    generation: u32,
    path: PathBuf,
    template: Template,
    meta: FileMeta,
    prefix: Prefix,
    read_pos: u64,
    emitted: u64,
    file: Option<File>,
    split: Splitter,
    group: Option<Group>,
    /// When bytes last arrived (or the stream was opened).
    last_data: Instant,
    /// The last read found nothing new.
    at_eof: bool,
    attached: bool,
    /// Since when the file is not found at any matching path (it is being
    /// drained, see [`drained`]); the same moment in unix milliseconds, for
    /// the checkpoint.
    unseen_since: Option<Instant>,
    unseen_unix_ms: Option<u64>,
    detached_at: Option<(Instant, u64)>,
    /// The last bytes read, ending at `tail_end`.
    tail: Vec<u8>,
    tail_end: u64,
    /// Queued in `wanted`.
    wanted: bool,
    /// Open and read to its end, but inotify or a scan says it changed.
    dirty: bool,
    /// Detached because its file was truncated in place (copytruncate).
    truncated_away: bool,
    /// Spans past `emitted` whose lines are in the log already (recovered
    /// after an append refused as full was overtaken by a later one): read,
    /// not appended again.
    ahead: Vec<(u64, u64)>,
}

impl Stream {
    fn record(&self) -> Record {
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
            tail: (!self.tail.is_empty()).then(|| checkpoint::Tail {
                end: self.tail_end,
                hex: checkpoint::to_hex(&self.tail),
            }),
            ahead: self.ahead.clone(),
        }
    }

    fn remember_tail(&mut self, data: &[u8]) {
        if data.len() >= TAIL_BYTES {
            self.tail.clear();
            self.tail
                .extend_from_slice(&data[data.len() - TAIL_BYTES..]);
        } else {
            if self.tail_end != self.read_pos {
                self.tail.clear();
            }
            self.tail.extend_from_slice(data);
            let over = self.tail.len().saturating_sub(TAIL_BYTES);
            self.tail.drain(..over);
        }
        self.tail_end = self.read_pos + data.len() as u64;
    }
}

/// The output side: the chunk being filled, pending record updates, and the
/// channel to the appender.
struct Out {
    enc: Encoder,
    chunk: Chunk,
    upserts: Vec<(StreamId, Record)>,
    forget: Vec<StreamId>,
    barrier: bool,
    tx: mpsc::Sender<Update>,
    max_frame: usize,
    chunk_bytes: usize,
    max_line: usize,
    multiline: bool,
    observed_ns: u64,
    /// Lines read since the counter was last updated (one atomic add per
    /// read, not per line).
    lines: u64,
    c: Counters,
    /// The appender is gone: stop.
    closed: bool,
}

/// What a new file is a copy of.
enum Copy {
    /// Continue the detached stream from its position in this file.
    Continues(StreamId),
    /// Everything in this file was read from the original already.
    AlreadyRead(StreamId),
}

/// What an emitted line belongs to.
struct Ids<'a> {
    id: StreamId,
    key: u64,
    generation: u32,
    template: &'a Template,
    /// Spans whose lines are in the log already (see `Stream::ahead`).
    ahead: &'a [(u64, u64)],
}

/// Cuts `b` to at most `max` bytes, at a character boundary if the bytes
/// are valid UTF-8 up to the cut.
fn cut(b: &[u8], max: usize) -> &[u8] {
    if b.len() <= max {
        return b;
    }
    let c = &b[..max];
    match std::str::from_utf8(c) {
        Err(e) if e.error_len().is_none() => &c[..e.valid_up_to()],
        _ => c,
    }
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Out {
    fn send(&mut self, u: Update) {
        if self.closed {
            return;
        }
        if self.tx.blocking_send(u).is_err() {
            self.closed = true;
        }
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
    fn flush(&mut self) {
        self.c.lines.inc_by(std::mem::take(&mut self.lines));
        self.flush_records();
        if !self.chunk.is_empty() {
            let mut c = std::mem::take(&mut self.chunk);
            // A chunk cut short (a quiet file, a stop) gives back the room it
            // did not use; the allocator shrinks it in place.
            c.data.shrink_to_fit();
            self.send(Update::Chunk(c));
        }
    }

    /// Encodes one line (or multiline event) and records the stream's new
    /// position. Lines with nothing in them make no event but move the
    /// position.
    fn emit(&mut self, ids: &Ids<'_>, line: Line<'_>, emitted: &mut u64) {
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
        let truncated = line.len > self.max_line as u64;
        let bytes = cut(line.bytes, self.max_line);
        let (body, invalid) = match std::str::from_utf8(bytes) {
            Ok(s) => (std::borrow::Cow::Borrowed(s), false),
            Err(_) => (String::from_utf8_lossy(bytes), true),
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
        let before = self.chunk.data.len();
        if before == 0 {
            // Room for a whole chunk at once: grown by doubling instead, a
            // chunk would be copied on every growth and end up holding up to
            // twice its size, while several wait in the channel and in flight.
            self.chunk
                .data
                .reserve(self.chunk_bytes + CHUNK_SLACK.min(self.chunk_bytes));
        }
        self.enc
            .encode(ids.template, &body, &meta, &mut self.chunk.data);
        if self.chunk.data.len() > self.max_frame {
            if before == 0 {
                // One event larger than the log can hold in one append.
                self.chunk.data.clear();
                warn!(source = %self.c.component, offset = line.start, bytes = line.len,
                    "a line is too large for one log segment even after truncation; dropped (lower max_line_bytes or raise the segment size)");
                self.c
                    .metrics
                    .drop_events(&self.c.component, "too_large", 1);
                self.chunk.set_pos(ids.id, line.end);
                return;
            }
            let event = self.chunk.data.split_off(before);
            self.flush();
            self.chunk.data = event;
        }
        self.chunk.events += 1;
        self.chunk.set_pos(ids.id, line.end);
        if truncated {
            self.c.truncated.inc();
        }
        if invalid {
            self.c.invalid_utf8.inc();
        }
        if self.chunk.data.len() >= self.chunk_bytes {
            self.flush();
        }
    }
}

/// Feeds a completed line through multiline joining (if configured) to `out`.
#[allow(clippy::too_many_arguments)]
fn complete_line(
    out: &mut Out,
    ml: Option<&super::Multiline>,
    group: &mut Option<Group>,
    ids: &Ids<'_>,
    line: Line<'_>,
    emitted: &mut u64,
    keep: usize,
    now: Instant,
) {
    out.lines += 1;
    match ml {
        None => out.emit(ids, line, emitted),
        Some(ml) => multiline::push(ml, group, line, keep, now, |ev| out.emit(ids, ev, emitted)),
    }
}

pub struct Tailer {
    s: Settings,
    /// Bytes of an unfinished line kept in memory.
    keep: usize,
    wake: Arc<Wake>,
    watch: Watch,
    patterns: Patterns,
    streams: HashMap<StreamId, Stream>,
    by_inode: HashMap<(u64, u64), StreamId>,
    by_path: HashMap<PathBuf, StreamId>,
    /// Full prefixes of attached streams (hash → count): a new file with one
    /// of them may be a copy whose original is about to be truncated.
    full_prefixes: HashMap<u64, u32>,
    /// Keys in use: streams per key and the highest generation.
    keys: HashMap<u64, (u32, u32)>,
    detached: HashSet<StreamId>,
    /// Files set aside as possible copies of a live stream, since when.
    deferred: HashMap<(u64, u64), Instant>,
    /// Directories listed by inode during this scan, for streams looking
    /// for their file after it left the globs (one listing per directory,
    /// however many streams look in it).
    listings: HashMap<PathBuf, HashMap<u64, Vec<PathBuf>>>,
    wanted: VecDeque<StreamId>,
    next_id: StreamId,
    open: usize,
    buf: Vec<u8>,
    pbuf: Vec<u8>,
    out: Out,
    first_start: bool,
    found: Option<Found>,
    last_scan: Option<Instant>,
    rescan: bool,
    /// When open files read to their end were last checked for new data.
    /// With inotify they are checked when it reports a change, and on every
    /// scan; without, on every tick.
    last_poll: Instant,
}

impl Tailer {
    pub fn new(
        s: Settings,
        init: Initial,
        tx: mpsc::Sender<Update>,
        wake: Arc<Wake>,
        c: Counters,
        host: &str,
    ) -> Result<Tailer, String> {
        let patterns = Patterns::compile(&s.opts.include, &s.opts.exclude)?;
        let watch = Watch::new(wake.clone(), s.inotify);
        info!(source = %s.name, include = ?s.opts.include, inotify = watch.active(), max_open = s.max_open,
            "file source following its globs");
        let enc = Encoder::new(&s.name, host);
        let out = Out {
            chunk: Chunk::default(),
            upserts: Vec::new(),
            forget: Vec::new(),
            barrier: false,
            tx,
            max_frame: s.max_frame,
            chunk_bytes: s.chunk_bytes,
            max_line: s.opts.max_line_bytes,
            multiline: s.opts.multiline.is_some(),
            observed_ns: 0,
            lines: 0,
            c,
            closed: false,
            enc,
        };
        let mut t = Tailer {
            keep: s.opts.max_line_bytes + 1,
            s,
            wake,
            watch,
            patterns,
            streams: HashMap::new(),
            by_inode: HashMap::new(),
            by_path: HashMap::new(),
            full_prefixes: HashMap::new(),
            keys: HashMap::new(),
            detached: HashSet::new(),
            deferred: HashMap::new(),
            listings: HashMap::new(),
            wanted: VecDeque::new(),
            next_id: init.next_id,
            open: 0,
            buf: vec![0; READ_BUF],
            pbuf: Vec::new(),
            out,
            first_start: init.first_start,
            found: init.found,
            last_scan: None,
            rescan: true,
            last_poll: Instant::now(),
        };
        let now = Instant::now();
        for (id, r) in init.records {
            let path = PathBuf::from(&r.path);
            let tail = r
                .tail
                .as_ref()
                .and_then(|t| checkpoint::from_hex(&t.hex).map(|b| (b, t.end)));
            let st = Stream {
                key: r.key,
                generation: r.generation,
                template: t.out.enc.template(&path),
                path,
                meta: FileMeta {
                    dev: r.dev,
                    ino: r.ino,
                    btime: r.btime,
                    len: r.offset,
                },
                prefix: Prefix {
                    len: r.prefix_len,
                    hash: r.prefix_hash,
                },
                read_pos: r.offset,
                emitted: r.offset,
                file: None,
                split: Splitter::default(),
                group: None,
                last_data: now,
                at_eof: false,
                attached: false,
                unseen_since: None,
                // The first scan finds it missing again and restarts the
                // drain's clock (its writer may still be writing).
                unseen_unix_ms: r.rotated_unix_ms,
                detached_at: r.detached_unix_ms.map(|ms| (now, ms)),
                tail: tail.as_ref().map(|t| t.0.clone()).unwrap_or_default(),
                tail_end: tail.map_or(0, |t| t.1),
                wanted: false,
                dirty: false,
                truncated_away: false,
                ahead: r.ahead.clone(),
            };
            t.insert(id, st);
        }
        Ok(t)
    }

    fn fp(&self) -> usize {
        self.s.opts.fingerprint_bytes
    }

    /// Adds a stream to the maps; attached ones by inode and path.
    fn insert(&mut self, id: StreamId, st: Stream) {
        let k = self.keys.entry(st.key).or_insert((0, 0));
        k.0 += 1;
        k.1 = k.1.max(st.generation);
        let detached = st.detached_at.is_some();
        self.streams.insert(id, st);
        if detached {
            self.detached.insert(id);
        } else {
            self.attach(id);
        }
    }

    fn attach(&mut self, id: StreamId) {
        let fp = self.fp();
        let s = self.streams.get_mut(&id).unwrap();
        s.attached = true;
        s.detached_at = None;
        s.unseen_since = None;
        s.unseen_unix_ms = None;
        s.truncated_away = false;
        self.detached.remove(&id);
        self.by_inode.insert(s.meta.inode(), id);
        self.by_path.insert(s.path.clone(), id);
        if s.prefix.is_full(fp) {
            *self.full_prefixes.entry(s.prefix.hash).or_default() += 1;
        }
    }

    fn unindex_prefix(&mut self, hash: u64) {
        if let Some(n) = self.full_prefixes.get_mut(&hash) {
            *n -= 1;
            if *n == 0 {
                self.full_prefixes.remove(&hash);
            }
        }
    }

    /// The file is gone for this stream: emit what it holds, close it, and
    /// keep it only to recognise a copy.
    fn detach(&mut self, id: StreamId, now: Instant) {
        self.flush_pending(id, now);
        self.detach_keeping(id, now);
    }

    /// Detaches a stream whose file was truncated, keeping its unfinished
    /// line and multiline event unemitted: a copy of the file (found
    /// soon, or already) holds them whole, and is continued from `emitted`,
    /// where they start. Emitted at once, an unfinished line (the writer's
    /// write was only partly visible when it was read) would reach the log
    /// in two pieces. If no copy shows up, they are emitted once quiet for
    /// `line_idle_timeout` (and the multiline timeout), as for any file.
    fn detach_keeping(&mut self, id: StreamId, now: Instant) {
        let fp = self.fp();
        let s = self.streams.get_mut(&id).unwrap();
        // Nothing more to read from it: the timers may end what it holds.
        s.at_eof = true;
        if !s.attached {
            return;
        }
        s.attached = false;
        s.detached_at = Some((now, unix_ms(SystemTime::now())));
        let had_file = s.file.take().is_some();
        let (inode, path, full, hash) = (
            s.meta.inode(),
            s.path.clone(),
            s.prefix.is_full(fp),
            s.prefix.hash,
        );
        let rec = s.record();
        if had_file {
            self.open -= 1;
        }
        if self.by_inode.get(&inode) == Some(&id) {
            self.by_inode.remove(&inode);
        }
        if self.by_path.get(&path) == Some(&id) {
            self.by_path.remove(&path);
        }
        if full {
            self.unindex_prefix(hash);
        }
        self.detached.insert(id);
        self.out.upserts.push((id, rec));
        debug!(source = %self.s.name, path = %path.display(), "stopped following a file");
    }

    /// Emits a stream's unfinished line and multiline event.
    fn flush_pending(&mut self, id: StreamId, now: Instant) {
        let keep = self.keep;
        let ml = self.s.opts.multiline.as_ref();
        let Some(s) = self.streams.get_mut(&id) else {
            return;
        };
        let Stream {
            split,
            group,
            key,
            generation,
            template,
            emitted,
            ahead,
            ..
        } = s;
        let ids = Ids {
            id,
            key: *key,
            generation: *generation,
            template,
            ahead,
        };
        let out = &mut self.out;
        split.flush(|line| complete_line(out, ml, group, &ids, line, emitted, keep, now));
        if let Some(g) = group.take() {
            out.emit(&ids, g.as_line(), emitted);
        }
    }

    fn want(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.wanted {
                s.wanted = true;
                self.wanted.push_back(id);
            }
        }
    }

    fn new_id(&mut self) -> StreamId {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    fn read_error(&self, what: &str, path: &std::path::Path, e: &io::Error) {
        self.out.c.read_errors.inc();
        warn!(source = %self.s.name, path = %path.display(), error = %e, "{what}");
    }

    /// Runs until stopped; sends what it has read before returning.
    pub fn run(mut self) {
        let tick = [
            Some(Duration::from_millis(250)),
            Some(self.s.opts.line_idle_timeout / 2),
            Some(self.s.opts.rotate_wait / 2),
            self.s.opts.multiline.as_ref().map(|m| m.timeout / 2),
        ]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or_default()
        .max(Duration::from_millis(5));
        let mut woken = self.wake.poll();
        loop {
            if woken.stop || self.out.closed {
                break;
            }
            let now = Instant::now();
            self.absorb(woken, now);
            let poll_every = if self.watch.active() {
                self.s.opts.scan_interval
            } else {
                tick
            };
            let poll = now.duration_since(self.last_poll) >= poll_every;
            if poll {
                self.last_poll = now;
            }
            let mut more = self.read_pass(poll);
            more |= self.timers(Instant::now());
            self.out.flush();
            self.out.c.files_open.set(self.open as i64);
            woken = if more {
                self.wake.poll()
            } else {
                let mut wait = tick;
                if let Some(t) = self.last_scan {
                    let next = t + if self.rescan {
                        MIN_RESCAN
                    } else {
                        self.s.opts.scan_interval
                    };
                    wait = wait.min(next.saturating_duration_since(Instant::now()));
                }
                self.wake.wait(wait)
            };
        }
        self.out.flush();
        info!(source = %self.s.name, files = self.by_inode.len(), "file source tailer stopped");
    }

    /// Takes in what inotify reported, scanning first if a scan is due.
    fn absorb(&mut self, woken: Woken, now: Instant) {
        self.rescan |= woken.rescan;
        if self.scan_due(now, self.rescan) {
            self.scan(now);
        }
        for p in woken.dirty {
            match self.by_path.get(&p).copied() {
                Some(id) => match self.streams.get_mut(&id) {
                    Some(s) if s.file.is_some() => s.dirty = true,
                    Some(_) => self.want(id),
                    None => {}
                },
                None if self.patterns.matches(&p) => self.rescan = true,
                None => {}
            }
        }
    }

    /// Whether a scan is due: `scan_interval` has passed, or a scan was
    /// asked for (`requested`) and [`MIN_RESCAN`] has passed.
    fn scan_due(&self, now: Instant, requested: bool) -> bool {
        self.last_scan.is_none_or(|t| {
            let since = now.duration_since(t);
            since >= self.s.opts.scan_interval || (requested && since >= MIN_RESCAN)
        })
    }

    /// Whether a scan is due, counting scans inotify asked for that the
    /// loop has not taken in yet.
    fn scan_wanted(&self) -> bool {
        let requested = self.rescan || self.wake.rescan_requested();
        self.scan_due(Instant::now(), requested)
    }

    /// Called between the reads of a pass: if a scan is due, takes in what
    /// inotify reported and scans. Reading a backlog can take long (the log
    /// takes chunks only as fast as it makes them durable), and a file
    /// created and rotated out of the globs meanwhile would never be seen:
    /// new files are found, and opened, while a backlog is being read. True
    /// if it scanned.
    fn keep_looking(&mut self) -> bool {
        if !self.scan_wanted() {
            return false;
        }
        let woken = self.wake.poll();
        self.absorb(woken, Instant::now());
        true
    }

    // ------------------------------------------------------------------
    // Discovery

    fn scan(&mut self, now: Instant) {
        self.last_scan = Some(now);
        self.rescan = false;
        let found = self.patterns.scan();
        self.watch.ensure(&self.patterns.watch_dirs());
        let mut seen: HashSet<StreamId> = HashSet::with_capacity(found.len());
        let mut unknown = Vec::new();
        for f in found {
            match self.by_inode.get(&f.meta.inode()).copied() {
                Some(id) => {
                    if seen.insert(id) {
                        self.seen_known(id, f);
                    }
                }
                None => unknown.push(f),
            }
        }
        let missing: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(id, s)| s.attached && !seen.contains(id))
            .map(|(id, _)| *id)
            .collect();
        for id in missing {
            self.unseen(id, now);
        }
        let unknown_inodes: HashSet<(u64, u64)> = unknown.iter().map(|f| f.meta.inode()).collect();
        for f in unknown {
            self.discover(f, now);
        }
        self.deferred.retain(|k, _| unknown_inodes.contains(k));
        // Listings serve this scan only: none is held between scans, and a
        // file renamed after this one is looked for again at the next.
        self.listings.clear();
        self.first_start = false;
        // Never needed again once every file has been seen once.
        self.found = None;
        self.out.c.files_watched.set(self.by_inode.len() as i64);
    }

    fn seen_known(&mut self, id: StreamId, f: FoundFile) {
        let s = self.streams.get_mut(&id).unwrap();
        s.unseen_since = None;
        if s.unseen_unix_ms.take().is_some() {
            // Back in the globs: the checkpoint no longer says it left them.
            self.out.upserts.push((id, s.record()));
        }
        let mut want = false;
        if s.path != f.path {
            // Renamed to another matching name (app.log → app.log.1), or
            // found again after a restart under its rotated name.
            info!(source = %self.s.name, from = %s.path.display(), to = %f.path.display(), "followed file renamed");
            if self.by_path.get(&s.path) == Some(&id) {
                self.by_path.remove(&s.path);
            }
            s.path = f.path.clone();
            s.template = self.out.enc.template(&s.path);
            self.by_path.insert(f.path, id);
            self.out.upserts.push((id, s.record()));
            self.out.c.rotations.inc();
            want = s.file.is_none();
        }
        if s.file.is_none()
            && (f.meta.len != s.read_pos
                || f.meta.btime != s.meta.btime
                || (s.prefix.len as u64) < f.meta.len.min(self.s.opts.fingerprint_bytes as u64))
        {
            want = true;
        }
        if s.file.is_some() && f.meta.len != s.read_pos {
            s.dirty = true;
        }
        s.meta.len = f.meta.len;
        if want {
            self.want(id);
        }
    }

    /// A followed file is no longer found at any path the globs match: it is
    /// drained (read on every pass, through its descriptor) until it has been
    /// idle for `rotate_wait`. A stream without an open descriptor (closed as
    /// idle or for the descriptor cap, or restored from the checkpoint after
    /// a restart) first looks for its file in the directory it was last seen
    /// in (`app.log.1` when only `app.log` is included); only if it is not
    /// there is the stream detached, its tail unread.
    fn unseen(&mut self, id: StreamId, now: Instant) {
        let s = self.streams.get_mut(&id).unwrap();
        if s.unseen_since.is_none() {
            s.unseen_since = Some(now);
            s.unseen_unix_ms = s.unseen_unix_ms.or(Some(unix_ms(SystemTime::now())));
            self.out.c.rotations.inc();
            info!(source = %self.s.name, path = %s.path.display(),
                "followed file was deleted or rotated out of the include patterns; reading what is left of it");
            let rec = s.record();
            self.out.upserts.push((id, rec));
        }
        if self.streams[&id].file.is_none() && !self.find_moved(id, now) {
            // Nothing left to read it by.
            self.detach(id, now);
        }
    }

    /// Opens the file of a stream that left the globs and has no descriptor,
    /// found again by identity in its last directory, and positions it where
    /// reading stopped. True if found.
    fn find_moved(&mut self, id: StreamId, now: Instant) -> bool {
        let s = &self.streams[&id];
        let Some(dir) = s.path.parent().map(|d| d.to_path_buf()) else {
            return false;
        };
        let known = identity::Known {
            dev: s.meta.dev,
            ino: s.meta.ino,
            btime: s.meta.btime,
            prefix: s.prefix,
            read_pos: s.read_pos,
        };
        if !self.listings.contains_key(&dir) {
            match identity::list_inodes(&dir) {
                Ok(l) => self.listings.insert(dir.clone(), l),
                Err(e) => {
                    self.read_error("cannot look for a rotated file in its directory", &dir, &e);
                    return false;
                }
            };
        }
        let found = match identity::open_moved(&self.listings[&dir], &known, &mut self.pbuf) {
            Ok(Some(m)) => m,
            Ok(None) => return false,
            Err(e) => {
                self.read_error("cannot look for a rotated file in its directory", &dir, &e);
                return false;
            }
        };
        let mut file = found.file;
        let s = self.streams.get_mut(&id).unwrap();
        if let Err(e) = file.seek(SeekFrom::Start(s.read_pos)) {
            self.read_error("cannot seek in a rotated file", &found.path, &e);
            return false;
        }
        info!(source = %self.s.name, path = %s.path.display(), now_at = %found.path.display(),
            offset = s.read_pos, len = found.meta.len,
            "found a followed file, not read to its end, under a name outside the include patterns; reading it until it is idle for rotate_wait");
        s.meta.len = found.meta.len;
        s.file = Some(file);
        s.at_eof = false;
        s.last_data = now;
        self.open += 1;
        self.make_room(id);
        true
    }

    /// Identifies a file no stream is attached to: the copy of a detached
    /// stream, a possible copy of a live one (set aside for a while), or a
    /// new stream.
    fn discover(&mut self, f: FoundFile, now: Instant) {
        let file = match File::open(&f.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return,
            Err(e) => return self.read_error("cannot open a matched file", &f.path, &e),
        };
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => return self.read_error("cannot stat a matched file", &f.path, &e),
        };
        if meta.inode() != f.meta.inode() || self.by_inode.contains_key(&meta.inode()) {
            self.rescan = true;
            return;
        }
        self.identify(f.path, file, meta, now);
    }

    /// Decides what an open file no stream is attached to is (see
    /// [`Tailer::discover`]) and follows it accordingly.
    fn identify(&mut self, path: PathBuf, file: File, meta: FileMeta, now: Instant) {
        let fp = self.fp();
        if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
            return self.read_error("cannot read a matched file", &path, &e);
        }
        let prefix = Prefix::of(&self.pbuf);
        let mut already_read = false;
        if prefix.is_full(fp) {
            if self.full_prefixes.contains_key(&prefix.hash) && self.settle_truncations(prefix, now)
            {
                // Settling read other first bytes into the buffer.
                if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
                    return self.read_error("cannot read a matched file", &path, &e);
                }
            }
            match self.find_copy_of(prefix, &file, meta.len) {
                Some(Copy::Continues(oid)) => return self.adopt(oid, path, meta, file, now),
                Some(Copy::AlreadyRead(oid)) => {
                    info!(source = %self.s.name, path = %path.display(), was = %self.streams[&oid].path.display(),
                        len = meta.len, emitted = self.streams[&oid].emitted, read_pos = self.streams[&oid].read_pos,
                        "a copy of lines already read; following it from its end");
                    already_read = true;
                }
                None => {}
            }
            if !already_read
                && self.full_prefixes.contains_key(&prefix.hash)
                && self.may_be_copy_of_live(prefix, &file, meta.len)
            {
                let since = *self.deferred.entry(meta.inode()).or_insert(now);
                if now.duration_since(since) < self.s.opts.rotate_wait {
                    debug!(source = %self.s.name, path = %path.display(),
                        "new file starts like a followed one: waiting to see whether it is a copy");
                    return;
                }
            }
        }
        let mut key = identity::derive_key(&meta, &self.pbuf);
        while key == 0 || self.keys.contains_key(&key) {
            key = xxhash_rust::xxh3::xxh3_64(&key.to_le_bytes());
        }
        let mut start = 0;
        let mut ahead = Vec::new();
        if already_read || (self.first_start && self.s.opts.start_at == StartAt::End) {
            start = meta.len;
        } else if let Some(found) = &mut self.found {
            if let Some((p, rest)) = found.resume_unknown(key, 0).filter(|r| r.0 <= meta.len) {
                info!(source = %self.s.name, path = %path.display(), offset = p,
                    "resuming a file after the lines of it found in the log");
                start = p;
                ahead = rest;
            }
        }
        let id = self.new_id();
        let mut file = file;
        if start > 0 {
            if let Err(e) = file.seek(SeekFrom::Start(start)) {
                return self.read_error("cannot seek in a matched file", &path, &e);
            }
        }
        let st = Stream {
            key,
            generation: 0,
            template: self.out.enc.template(&path),
            path: path.clone(),
            meta,
            prefix,
            read_pos: start,
            emitted: start,
            file: Some(file),
            split: Splitter::default(),
            group: None,
            last_data: now,
            at_eof: false,
            attached: false,
            unseen_since: None,
            unseen_unix_ms: None,
            detached_at: None,
            tail: Vec::new(),
            tail_end: 0,
            wanted: false,
            dirty: false,
            truncated_away: false,
            ahead,
        };
        self.out.upserts.push((id, st.record()));
        self.out.barrier = true;
        self.insert(id, st);
        self.open += 1;
        debug!(source = %self.s.name, path = %path.display(), ino = meta.ino, len = meta.len, prefix_len = prefix.len, offset = start, "following a new file");
        self.make_room(id);
    }

    /// Checks the followed files whose first bytes are `prefix` for a
    /// truncation not yet seen, and starts their next generation if so.
    /// A file that may be a copy is judged against these streams:
    /// copytruncate copies, truncates, and the application writes on, all
    /// perhaps before the truncated file is read again; judged against what
    /// was read before the truncation, the copy would look like a new file
    /// and be read again from its start. True if a stream was truncated.
    fn settle_truncations(&mut self, prefix: Prefix, now: Instant) -> bool {
        let ids: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| s.attached && s.file.is_some() && s.prefix == prefix)
            .map(|(id, _)| *id)
            .collect();
        let mut any = false;
        for id in ids {
            let s = &self.streams[&id];
            let Some(file) = s.file.as_ref() else {
                continue;
            };
            let (Ok(m), Ok(same)) = (
                file.metadata(),
                identity::prefix_matches(file, s.prefix, &mut self.pbuf),
            ) else {
                // Reading it says what is wrong.
                continue;
            };
            if !same || m.len() < s.read_pos {
                self.truncated(id, now);
                any = true;
            }
        }
        any
    }

    /// A file found empty has its first bytes, and nothing of it was
    /// emitted yet: it is identified again, as if found only now. It may be
    /// copytruncate's copy, found between its creation and the first write
    /// of its contents; followed as the new file it seemed to be, every line
    /// of it would be read a second time.
    fn reidentify(&mut self, id: StreamId, now: Instant) {
        let Some(mut s) = self.remove(id) else {
            return;
        };
        let Some(mut file) = s.file.take() else {
            return;
        };
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => return self.read_error("cannot stat a matched file", &s.path, &e),
        };
        if let Err(e) = file.seek(SeekFrom::Start(0)) {
            return self.read_error("cannot seek in a matched file", &s.path, &e);
        }
        debug!(source = %self.s.name, path = %s.path.display(), ino = meta.ino,
            "a file found empty starts like a followed one: identifying it again");
        self.identify(s.path, file, meta, now);
    }

    /// Forgets a stream at once (its record goes from the checkpoint too).
    fn remove(&mut self, id: StreamId) -> Option<Stream> {
        let s = self.streams.remove(&id)?;
        self.detached.remove(&id);
        if self.by_inode.get(&s.meta.inode()) == Some(&id) {
            self.by_inode.remove(&s.meta.inode());
        }
        if self.by_path.get(&s.path) == Some(&id) {
            self.by_path.remove(&s.path);
        }
        if s.attached && s.prefix.is_full(self.fp()) {
            self.unindex_prefix(s.prefix.hash);
        }
        if let Some(k) = self.keys.get_mut(&s.key) {
            k.0 -= 1;
            if k.0 == 0 {
                self.keys.remove(&s.key);
            }
        }
        if s.file.is_some() {
            self.open -= 1;
        }
        self.out.forget.push(id);
        Some(s)
    }

    /// Whether `file` (first bytes `prefix`, `len` long) is a copy of a
    /// detached stream's file: copytruncate's `app.log.1`, or a file moved
    /// across file systems. It must start with the stream's full prefix.
    /// If it is longer than what was read of the stream, the bytes just
    /// before the stream's position must match the last bytes read (or, for
    /// a stream restored from a checkpoint without them, be a line end); if
    /// it is shorter, the copy was taken before the stream was read to its
    /// end (the lines of copytruncate's window were read from the original)
    /// and holds nothing new.
    fn find_copy_of(&mut self, prefix: Prefix, file: &File, len: u64) -> Option<Copy> {
        let fp = self.fp();
        let mut buf = [0u8; TAIL_BYTES];
        for &id in &self.detached {
            let s = &self.streams[&id];
            if s.prefix != prefix || !s.prefix.is_full(fp) {
                continue;
            }
            if len < s.emitted {
                return Some(Copy::AlreadyRead(id));
            }
            let ok = if s.tail.is_empty() || len < s.tail_end || s.tail_end < s.tail.len() as u64 {
                let b = &mut buf[..1];
                s.emitted == 0 || (file.read_exact_at(b, s.emitted - 1).is_ok() && b[0] == b'\n')
            } else {
                let b = &mut buf[..s.tail.len()];
                file.read_exact_at(b, s.tail_end - s.tail.len() as u64)
                    .is_ok()
                    && *b == s.tail[..]
            };
            if ok {
                return Some(Copy::Continues(id));
            }
        }
        None
    }

    /// Whether `file` could be a copy, still being made or not yet followed
    /// by the truncation, of a followed file with the same first bytes:
    /// its last bytes equal that file's bytes at the same offset. A file
    /// that merely starts the same (a common header) is not held back.
    fn may_be_copy_of_live(&self, prefix: Prefix, file: &File, len: u64) -> bool {
        let n = (TAIL_BYTES as u64).min(len) as usize;
        let mut ours = [0u8; TAIL_BYTES];
        if file.read_exact_at(&mut ours[..n], len - n as u64).is_err() {
            return true;
        }
        let mut theirs = [0u8; TAIL_BYTES];
        self.streams.values().any(|s| {
            s.attached
                && s.prefix == prefix
                && match &s.file {
                    Some(f) => {
                        f.read_exact_at(&mut theirs[..n], len - n as u64).is_ok()
                            && ours[..n] == theirs[..n]
                    }
                    None => true,
                }
        })
    }

    fn adopt(&mut self, id: StreamId, path: PathBuf, meta: FileMeta, mut file: File, now: Instant) {
        let s = self.streams.get_mut(&id).unwrap();
        if let Err(e) = file.seek(SeekFrom::Start(s.emitted)) {
            let p = s.path.clone();
            return self.read_error("cannot seek in a matched file", &p, &e);
        }
        info!(source = %self.s.name, path = %path.display(), was = %s.path.display(), offset = s.emitted,
            "continuing a rotated-away file from its copy");
        s.path = path;
        s.template = self.out.enc.template(&s.path);
        s.meta = meta;
        s.read_pos = s.emitted;
        s.file = Some(file);
        s.split.reset();
        s.group = None;
        s.at_eof = false;
        s.last_data = now;
        self.open += 1;
        self.attach(id);
        let rec = self.streams[&id].record();
        self.out.upserts.push((id, rec));
        self.out.barrier = true;
        self.make_room(id);
    }

    /// Closes the idlest open files while more than `max_open` are open
    /// (down to three quarters, so this runs once per many opens). Files
    /// read to their end go first; a file closed with data left is queued to
    /// be opened again. Rotated files being drained are never closed.
    fn make_room(&mut self, keep: StreamId) {
        if self.open <= self.s.max_open {
            return;
        }
        let target = self.s.max_open * 3 / 4;
        let mut idle: Vec<(bool, Instant, StreamId)> = self
            .streams
            .iter()
            .filter(|(id, s)| **id != keep && s.file.is_some() && s.unseen_since.is_none())
            .map(|(id, s)| (!s.at_eof, s.last_data, *id))
            .collect();
        idle.sort_unstable();
        for (_, _, id) in idle {
            if self.open <= target {
                break;
            }
            let s = self.streams.get_mut(&id).unwrap();
            let pending = !s.at_eof;
            s.file = None;
            self.open -= 1;
            if pending {
                self.want(id);
            }
        }
    }

    /// Opens a closed, attached stream again, checking that its path still
    /// leads to its file and that the file is still what was read.
    fn reopen(&mut self, id: StreamId, now: Instant) {
        let Some(s) = self.streams.get(&id) else {
            return;
        };
        if s.file.is_some() || !s.attached {
            return;
        }
        let path = s.path.clone();
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                self.rescan = true;
                return;
            }
            Err(e) => return self.read_error("cannot open a followed file", &path, &e),
        };
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => return self.read_error("cannot stat a followed file", &path, &e),
        };
        let s = &self.streams[&id];
        if meta.inode() != s.meta.inode() {
            // The path leads to another file now: a scan sorts it out.
            self.rescan = true;
            return;
        }
        let ok = match identity::prefix_matches(&file, s.prefix, &mut self.pbuf) {
            Ok(ok) => ok,
            Err(e) => return self.read_error("cannot read a followed file", &path, &e),
        };
        match judge(s.meta.btime, s.read_pos, &meta, ok) {
            Verdict::Same => {
                let pos = s.read_pos;
                if let Err(e) = file.seek(SeekFrom::Start(pos)) {
                    return self.read_error("cannot seek in a followed file", &path, &e);
                }
                let s = self.streams.get_mut(&id).unwrap();
                s.file = Some(file);
                s.at_eof = false;
                self.open += 1;
                self.make_room(id);
            }
            Verdict::Truncated => self.new_generation(id, file, meta, now),
            Verdict::Replaced => {
                info!(source = %self.s.name, path = %path.display(), "inode reused by a new file");
                self.detach(id, now);
                self.discover(FoundFile { path, meta }, now);
            }
        }
    }

    /// The stream's file was truncated in place: what was read stays with
    /// the old generation (detached, so a copy of it can continue it), and
    /// the file is read from its start as the next generation.
    fn new_generation(&mut self, id: StreamId, mut file: File, meta: FileMeta, now: Instant) {
        self.out.c.truncations.inc();
        let had_file = self.streams[&id].file.is_some();
        self.detach_keeping(id, now);
        self.streams.get_mut(&id).unwrap().truncated_away = true;
        let s = &self.streams[&id];
        let (key, path) = (s.key, s.path.clone());
        let generation = self.keys.get(&key).map_or(0, |k| k.1) + 1;
        info!(source = %self.s.name, path = %path.display(), read = s.read_pos, now = meta.len, generation,
            "file truncated in place; reading it from the start as a new generation");
        let fp = self.fp();
        if let Err(e) = identity::read_prefix(&file, fp, &mut self.pbuf) {
            return self.read_error("cannot read a followed file", &path, &e);
        }
        if let Err(e) = file.seek(SeekFrom::Start(0)) {
            return self.read_error("cannot seek in a followed file", &path, &e);
        }
        let nid = self.new_id();
        let st = Stream {
            key,
            generation,
            template: self.out.enc.template(&path),
            path,
            meta,
            prefix: Prefix::of(&self.pbuf),
            read_pos: 0,
            emitted: 0,
            file: Some(file),
            split: Splitter::default(),
            group: None,
            last_data: now,
            at_eof: false,
            attached: false,
            unseen_since: None,
            unseen_unix_ms: None,
            detached_at: None,
            tail: Vec::new(),
            tail_end: 0,
            wanted: false,
            dirty: false,
            truncated_away: false,
            ahead: Vec::new(),
        };
        self.out.upserts.push((nid, st.record()));
        self.out.barrier = true;
        self.insert(nid, st);
        self.open += 1;
        if !had_file {
            self.make_room(nid);
        }
        if !self.deferred.is_empty() {
            // A file set aside as a possible copy of this one is one now.
            self.rescan = true;
        }
    }

    // ------------------------------------------------------------------
    // Reading

    /// Opens what is wanted and reads every open file. True if some file has
    /// more to read right away.
    fn read_pass(&mut self, poll: bool) -> bool {
        let n = self.wanted.len();
        for _ in 0..n {
            if self.open >= self.s.max_open {
                // Read what is open first, so that closing files to make
                // room closes files read to their end.
                for id in self.open_ids() {
                    self.read_stream(id);
                }
            }
            let Some(id) = self.wanted.pop_front() else {
                break;
            };
            if let Some(s) = self.streams.get_mut(&id) {
                s.wanted = false;
            }
            self.reopen(id, Instant::now());
            if self.wake.is_stopped() || self.out.closed {
                return false;
            }
        }
        let mut more = !self.wanted.is_empty();
        for id in self.open_ids() {
            // A scan between two reads may have closed or removed it.
            let Some(s) = self.streams.get_mut(&id) else {
                continue;
            };
            // A file rotated out of the globs gets no inotify event under a
            // path we know: it is polled on every pass while it is drained,
            // so lines its writer adds late arrive within a tick, not at the
            // next scan.
            let polled = poll || s.unseen_since.is_some();
            if s.file.is_none() || (s.at_eof && !s.dirty && !polled) {
                continue;
            }
            s.dirty = false;
            more |= self.read_stream(id);
            if self.wake.is_stopped() || self.out.closed {
                return false;
            }
            // Files found by this scan are read in the next pass.
            more |= self.keep_looking();
        }
        more
    }

    fn open_ids(&self) -> Vec<StreamId> {
        let mut v: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| s.file.is_some())
            .map(|(id, _)| *id)
            .collect();
        v.sort_unstable();
        v
    }

    /// Reads one open file up to [`READ_BUDGET`]; true if it has more.
    ///
    /// After every read the file's first bytes are checked again: if they
    /// changed, the file was truncated (and rewritten, perhaps past our
    /// offset) since the last check, the bytes just read may belong to the
    /// new contents, and they are dropped; the stream ends there and the
    /// file is read again from 0 as the next generation.
    fn read_stream(&mut self, id: StreamId) -> bool {
        let fp = self.fp();
        let keep = self.keep;
        let mut budget = READ_BUDGET;
        loop {
            // The time of this read: a pass may take long (sending blocks
            // while the log is busy), and a line's quiet time counts from
            // when its bytes were really read.
            let now = Instant::now();
            let Some(s) = self.streams.get_mut(&id) else {
                return false;
            };
            let Some(file) = s.file.as_mut() else {
                return false;
            };
            if s.at_eof {
                let len = match file.metadata() {
                    Ok(m) => m.len(),
                    Err(e) => {
                        let p = s.path.clone();
                        self.read_error("cannot stat a followed file", &p, &e);
                        return false;
                    }
                };
                if len == s.read_pos {
                    return false;
                }
                if len < s.read_pos {
                    self.truncated(id, now);
                    return true;
                }
                s.at_eof = false;
            }
            let n = match file.read(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let p = s.path.clone();
                    s.file = None;
                    self.open -= 1;
                    self.read_error("cannot read a followed file", &p, &e);
                    self.want(id);
                    return false;
                }
            };
            if n == 0 {
                s.at_eof = true;
                // A truncation below what was read shows at once.
                if file.metadata().is_ok_and(|m| m.len() < s.read_pos) {
                    continue;
                }
                return false;
            }
            // Do the file's first bytes still match (and can the prefix
            // grow towards the full fingerprint)?
            let want = fp.min((s.read_pos + n as u64).max(s.prefix.len as u64) as usize);
            if s.prefix.len > 0 || want > 0 {
                if let Err(e) = identity::read_prefix(file, want, &mut self.pbuf) {
                    let p = s.path.clone();
                    self.read_error("cannot read a followed file", &p, &e);
                    return false;
                }
                let plen = s.prefix.len as usize;
                if self.pbuf.len() < plen
                    || xxhash_rust::xxh3::xxh3_64(&self.pbuf[..plen]) != s.prefix.hash
                {
                    self.truncated(id, now);
                    return true;
                }
                if plen == 0
                    && s.read_pos == 0
                    && s.generation == 0
                    && s.attached
                    && s.unseen_since.is_none()
                    && self.pbuf.len() >= fp
                {
                    // Only as a copy of a followed file, or of one just
                    // truncated: a new file that merely starts like a file
                    // rotated away long ago is not held against it.
                    let first = Prefix::of(&self.pbuf);
                    if self.full_prefixes.contains_key(&first.hash)
                        || self.detached.iter().any(|d| {
                            let d = &self.streams[d];
                            d.truncated_away && d.prefix == first
                        })
                    {
                        self.reidentify(id, now);
                        return true;
                    }
                }
                let s = self.streams.get_mut(&id).unwrap();
                if self.pbuf.len() > plen {
                    // Identity settles as the file grows.
                    let was_full = s.prefix.is_full(fp);
                    s.prefix = Prefix::of(&self.pbuf);
                    let (rec, full, hash, attached) =
                        (s.record(), s.prefix.is_full(fp), s.prefix.hash, s.attached);
                    if !was_full && full && attached {
                        *self.full_prefixes.entry(hash).or_default() += 1;
                    }
                    self.out.upserts.push((id, rec));
                }
            }
            let s = self.streams.get_mut(&id).unwrap();
            self.out.observed_ns = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let data = &self.buf[..n];
            s.last_data = now;
            let base = s.read_pos;
            s.remember_tail(data);
            s.read_pos += n as u64;
            self.out.c.bytes.inc_by(n as u64);
            let ml = self.s.opts.multiline.as_ref();
            let Stream {
                split,
                group,
                key,
                generation,
                template,
                emitted,
                ahead,
                ..
            } = s;
            let ids = Ids {
                id,
                key: *key,
                generation: *generation,
                template,
                ahead,
            };
            let out = &mut self.out;
            split.feed(data, base, keep, |line| {
                complete_line(out, ml, group, &ids, line, emitted, keep, now)
            });
            self.out.c.lines.inc_by(std::mem::take(&mut self.out.lines));
            if self.out.closed {
                return false;
            }
            budget = budget.saturating_sub(n);
            if budget == 0 || self.scan_wanted() {
                return true;
            }
        }
    }

    /// An open stream's file was truncated in place.
    fn truncated(&mut self, id: StreamId, now: Instant) {
        let s = self.streams.get_mut(&id).unwrap();
        let Some(file) = s.file.take() else { return };
        self.open -= 1;
        let meta = match file.metadata() {
            Ok(m) => FileMeta::of(&m),
            Err(e) => {
                let p = s.path.clone();
                return self.read_error("cannot stat a followed file", &p, &e);
            }
        };
        self.new_generation(id, file, meta, now);
    }

    // ------------------------------------------------------------------
    // Timers

    /// Emits unfinished lines and multiline events of quiet files, stops
    /// following rotated files after `rotate_wait`, closes idle files and
    /// forgets old detached streams. Before a timeout ends something for a
    /// file, the file is checked for bytes not read yet (the last read may
    /// be a while ago): those are read first, and the timeout looked at
    /// again after. True if some file is to be read again at once.
    fn timers(&mut self, now: Instant) -> bool {
        let o = &self.s.opts;
        let (idle_line, idle_close, rotate_wait) =
            (o.line_idle_timeout, o.idle_close, o.rotate_wait);
        let ml_timeout = o.multiline.as_ref().map(|m| m.timeout);
        let mut flush = Vec::new();
        let mut flush_group = Vec::new();
        let mut finish = Vec::new();
        let mut close = Vec::new();
        let mut forget = Vec::new();
        let mut unread = Vec::new();
        // Whether the open file holds bytes past what was read.
        let behind = |s: &Stream| {
            s.file
                .as_ref()
                .is_some_and(|f| f.metadata().is_ok_and(|m| m.len() != s.read_pos))
        };
        for (id, s) in &self.streams {
            let quiet = now.duration_since(s.last_data);
            let line_due = s.split.has_partial() && quiet >= idle_line && s.at_eof && !s.wanted;
            let group_due = match (&s.group, ml_timeout) {
                (Some(g), Some(t)) => now.duration_since(g.last) >= t,
                _ => false,
            };
            let finish_due = s.attached
                && s.unseen_since
                    .is_some_and(|since| drained(since, s.last_data, now, rotate_wait))
                && (s.at_eof || s.file.is_none());
            if (line_due || group_due || finish_due) && behind(s) {
                unread.push(*id);
                continue;
            }
            if line_due {
                flush.push(*id);
            }
            if group_due {
                flush_group.push(*id);
            }
            if s.attached {
                if s.unseen_since.is_some() {
                    if finish_due {
                        finish.push(*id);
                        continue;
                    }
                } else if s.file.is_some() && s.at_eof && quiet >= idle_close {
                    close.push(*id);
                }
            } else if let Some((at, _)) = s.detached_at {
                if now.duration_since(at) >= FORGET_AFTER {
                    forget.push(*id);
                }
            }
        }
        let keep = self.keep;
        let ml = self.s.opts.multiline.as_ref();
        for id in flush {
            let s = self.streams.get_mut(&id).unwrap();
            debug!(source = %self.s.name, path = %s.path.display(), read_pos = s.read_pos,
                quiet_ms = now.duration_since(s.last_data).as_millis() as u64,
                "the file ends in an unfinished line and was quiet for line_idle_timeout: emitting it");
            let Stream {
                split,
                group,
                key,
                generation,
                template,
                emitted,
                ahead,
                ..
            } = s;
            let ids = Ids {
                id,
                key: *key,
                generation: *generation,
                template,
                ahead,
            };
            let out = &mut self.out;
            split.flush(|line| complete_line(out, ml, group, &ids, line, emitted, keep, now));
        }
        for id in flush_group {
            let s = self.streams.get_mut(&id).unwrap();
            if let Some(g) = s.group.take() {
                let ids = Ids {
                    id,
                    key: s.key,
                    generation: s.generation,
                    template: &s.template,
                    ahead: &s.ahead,
                };
                self.out.emit(&ids, g.as_line(), &mut s.emitted);
            }
        }
        for id in finish {
            self.detach(id, now);
        }
        for id in close {
            let s = self.streams.get_mut(&id).unwrap();
            s.file = None;
            self.open -= 1;
        }
        for id in forget {
            self.remove(id);
        }
        for id in &unread {
            if let Some(s) = self.streams.get_mut(id) {
                s.dirty = true;
            }
        }
        !unread.is_empty()
    }
}

/// Whether a file that left the globs at `left` (or was found again after
/// a restart then) is finished: nothing new was read from it for
/// `rotate_wait`, counted from its last data or from when it left,
/// whichever is later. A writer that keeps writing keeps it followed.
fn drained(left: Instant, last_data: Instant, now: Instant, rotate_wait: Duration) -> bool {
    now.saturating_duration_since(left.max(last_data)) >= rotate_wait
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotated_file_is_followed_until_idle_for_rotate_wait() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let wait = s(5);
        // Left the globs, nothing read since: finished rotate_wait later.
        assert!(!drained(t0, t0, t0 + s(4), wait));
        assert!(drained(t0, t0, t0 + s(5), wait));
        // Data read after it left pushes the end back, however long ago it left.
        assert!(!drained(t0, t0 + s(30), t0 + s(34), wait));
        assert!(drained(t0, t0 + s(30), t0 + s(35), wait));
        // Data read long before it left does not end it early.
        assert!(!drained(t0 + s(60), t0, t0 + s(61), wait));
        // A clock read before the stamps (a pass that began earlier) is not idle.
        assert!(!drained(t0 + s(1), t0 + s(2), t0, wait));
    }

    #[test]
    fn cut_respects_characters() {
        assert_eq!(cut(b"abc", 5), b"abc");
        assert_eq!(cut("aé".as_bytes(), 2), b"a");
        assert_eq!(cut("aé".as_bytes(), 3), "aé".as_bytes());
        assert_eq!(cut(b"\xffabc", 2), b"\xffa");
    }

    #[test]
    fn chunks_are_batches_as_they_are() {
        use crate::seglog::Batch;
        let mut c = Chunk::default();
        for e in [&b"one"[..], b"", b"three"] {
            c.data.extend_from_slice(&(e.len() as u32).to_le_bytes());
            c.data.extend_from_slice(e);
            c.events += 1;
        }
        let b = Batch::from_framed(c.data.clone().into(), c.events).unwrap();
        assert_eq!(b.len(), 3);
        // Framing that does not hold exactly the events counted is refused.
        assert!(Batch::from_framed(c.data.clone().into(), 2).is_none());
        assert!(Batch::from_framed(c.data[..c.data.len() - 1].to_vec().into(), 3).is_none());
        assert_eq!(b.encoded_len(), c.data.len());
        assert_eq!(c.payload_bytes(), 8);
        c.set_pos(1, 5);
        c.set_pos(1, 9);
        c.set_pos(2, 3);
        assert_eq!(c.positions, vec![(1, 9), (2, 3)]);
    }
}
