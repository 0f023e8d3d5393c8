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
//!   nothing new was read for `rotate_wait` ([`drained`](timers::drained))
//!   and it is read to its end. A stream without a handle (closed as idle
//!   or for the descriptor cap, or restored from the checkpoint) first looks
//!   for its inode in the directory it was last seen in
//!   (`identity::open_moved`).
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
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::checkpoint::{self, Record};
use super::discovery::{Patterns, Wake, Watch, Woken};
use super::encode::{Encoder, LineMeta, Template};
use super::identity::{FileMeta, Prefix};
use super::lines::{Line, Splitter};
use super::multiline::{self, Group};
use super::recovery::Found;
use super::FileSourceOptions;
use crate::metrics::Metrics;

mod chunk;
mod read;
mod scan;
mod timers;

pub use chunk::Chunk;

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
    /// drained, see [`drained`](timers::drained)); the same moment in unix
    /// milliseconds, for the checkpoint.
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
    /// Events are format 2 (see `encode.rs`).
    format2: bool,
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
            // The next chunk fills a buffer the log is done with: room for a
            // full chunk and the line that passes its size.
            self.chunk.data = crate::pool::CHUNKS.take_with(self.chunk_bytes + (64 << 10));
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
                .reserve(self.chunk_bytes + CHUNK_SLACK.min(self.chunk_bytes));
        }
        if self.format2 {
            let g = c.group_of(&self.enc, ids, meta.offset, meta.observed_ns);
            self.enc.encode_own(body, meta, g, &mut c.data);
        } else {
            self.enc.encode(ids.template, body, meta, &mut c.data);
        }
        if c.data.len() + c.context_len <= self.max_frame {
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
            format2: crate::sources::WRITE_FORMAT_2,
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
}

#[cfg(test)]
mod tests;
