//! The tailer: one blocking thread per source that finds files, follows
//! them through rotation, reads and splits their lines and encodes them into
//! chunks for the appender.
//!
//! | file | holds |
//! |------|-------|
//! | `mod.rs` | the settings, the run loop (scan, read, timers, flush) and detaching |
//! | `protocol.rs` | what the appender is sent (`Update`, `Chunk`) and the shared counters |
//! | `chunk.rs` | a chunk being filled: its events and format-2 groups |
//! | `out.rs` | the output side: lines encoded into the chunk, record updates, sending |
//! | `stream.rs` | one stream: positions, held line and event, last bytes read |
//! | `table.rs` | the stream table and its indexes (inode, path, prefixes, keys, detached) |
//! | `rotation.rs` | rotation identity: what a file seen on disk means, as decision values |
//! | `scan.rs` | acting on scans: new files, copies, renames, rotated-away files, reopening, generations |
//! | `read.rs` | reading open files and checking their first bytes after each read |
//! | `timers.rs` | quiet lines and events, the end of a drain, idle files, forgetting |
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

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use super::beat::Step;
use super::checkpoint::Record;
use super::discovery::{Patterns, Wake, Watch, Woken};
use super::encode::Encoder;
use super::identity::{FileMeta, Prefix};
use super::open::{Opener, Skip, SkipLog};
use super::recovery::Found;
use super::FileSourceOptions;

mod chunk;
mod out;
pub mod protocol;
mod read;
mod rotation;
mod scan;
mod stream;
mod table;
mod timers;

use out::{Limits, Lines, Out};
pub use protocol::Counters;
use protocol::{StreamId, Update};
use stream::{LastBytes, Stream};
use table::Streams;

/// Detached streams are kept this long for a copy of their file to appear.
pub const FORGET_AFTER: Duration = Duration::from_secs(3600);
/// Bytes read from one file before the others get a turn.
const READ_BUDGET: usize = 4 << 20;
/// The shared read buffer.
const READ_BUF: usize = 256 << 10;
/// The fewest milliseconds between two scans that inotify asked for.
const MIN_RESCAN: Duration = Duration::from_millis(100);

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

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

pub struct Tailer {
    s: Settings,
    /// Bytes of an unfinished line kept in memory.
    keep: usize,
    wake: Arc<Wake>,
    watch: Watch,
    patterns: Patterns,
    /// Every open of a matched file goes through it (`open.rs`).
    opener: Opener,
    /// What was skipped lately, logged and counted once per path.
    skips: SkipLog,
    streams: Streams,
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
        let mut enc = Encoder::new(&s.name, host);
        // Labels go into the encoder (once per chunk); a chain of labels
        // only has no per-line part at all.
        let process = s.opts.process.as_ref().and_then(|chain| {
            enc = enc.clone().with_labels(&chain.labels);
            chain
                .has_steps()
                .then(|| crate::process::Runner::new(chain.clone(), &c.metrics, &s.name))
        });
        let limits = Limits {
            max_frame: s.max_frame,
            chunk_bytes: s.chunk_bytes,
            max_line: s.opts.max_line_bytes,
        };
        let multiline = s.opts.multiline.is_some();
        let format2 = crate::sources::WRITE_FORMAT_2;
        let out = Out::new(enc, process, tx, c.clone(), limits, multiline, format2);
        let streams = Streams::new(s.opts.fingerprint_bytes);
        let mut t = Tailer {
            keep: s.opts.max_line_bytes + 1,
            opener: Opener::new(s.opts.follow_symlinks, c.beat.clone()),
            skips: SkipLog::default(),
            s,
            wake,
            watch,
            patterns,
            streams,
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
            let mut st = Stream::new(
                r.key,
                r.generation,
                path.clone(),
                t.out.enc.template(&path),
                FileMeta {
                    dev: r.dev,
                    ino: r.ino,
                    btime: r.btime,
                    len: r.offset,
                },
                Prefix {
                    len: r.prefix_len,
                    hash: r.prefix_hash,
                },
                r.offset,
                now,
            );
            // The first scan finds it missing again and restarts the
            // drain's clock (its writer may still be writing).
            st.unseen_unix_ms = r.rotated_unix_ms;
            st.detached_at = r.detached_unix_ms.map(|ms| (now, ms));
            st.tail = LastBytes::from_record(r.tail.as_ref());
            st.ahead = r.ahead.clone();
            t.streams.insert(id, st);
        }
        Ok(t)
    }

    fn fp(&self) -> usize {
        self.s.opts.fingerprint_bytes
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
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        // Nothing more to read from it: the timers may end what it holds.
        s.at_eof = true;
        let at = (now, unix_ms(SystemTime::now()));
        let Some(gone) = self.streams.detach(id, at) else {
            return;
        };
        if gone.had_file {
            self.open -= 1;
        }
        self.out.upserts.push((id, gone.record));
        debug!(source = %self.s.name, path = %gone.path.display(), "stopped following a file");
    }

    /// Emits a stream's unfinished line and multiline event.
    fn flush_pending(&mut self, id: StreamId, now: Instant) {
        let Some(s) = self.streams.get_mut(id) else {
            return;
        };
        let mut to = Lines::new(&mut self.out, &self.s.opts, self.keep, now);
        s.flush_line(id, &mut to);
        s.flush_group(id, &mut self.out);
    }

    fn want(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(id) {
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

    /// A matched path is not read: said and counted once while it stays so.
    fn skipped(&mut self, path: &std::path::Path, why: Skip) {
        if self.skips.note(path, why) {
            self.out.c.skipped[why as usize].inc();
            warn!(source = %self.s.name, path = %path.display(), reason = why.as_str(), "{}", why.explain());
        }
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
            self.out.c.beat.step(Step::Timers);
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
                self.out.c.beat.step(Step::Waiting);
                self.wake.wait(wait)
            };
        }
        self.out.flush();
        self.out.c.beat.step(Step::Waiting);
        info!(source = %self.s.name, files = self.streams.attached_files(), "file source tailer stopped");
    }

    /// Takes in what inotify reported, scanning first if a scan is due.
    fn absorb(&mut self, woken: Woken, now: Instant) {
        self.rescan |= woken.rescan;
        if self.scan_due(now, self.rescan) {
            self.scan(now);
        }
        for p in woken.dirty {
            match self.streams.at_path(&p) {
                Some(id) => match self.streams.get_mut(id) {
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
