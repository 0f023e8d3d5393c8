//! The reading half of a `journald` source: `journalctl --output=export
//! --follow` as a child process, and a thread that parses its output,
//! maps the entries and hands them, a batch at a time, to the appender over
//! a bounded channel.
//!
//! Back-pressure is the pipe's: while the appender waits for room in the
//! log, the channel stays full, the thread stops reading, journalctl's
//! writes block, and nothing is read that could be lost. The child dies
//! with holdfast, even on kill -9 (`PR_SET_PDEATHSIG`), so it never keeps
//! a journal file open behind a dead agent.
//!
//! A batch is sent when it is full or as soon as the appender has finished
//! the previous one (or journalctl is quiet and the appender free), so a
//! quiet journal's entries reach the log at once and a busy one's in
//! appends that grow with the time an append takes (one sync per batch).

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStderr, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::{Bytes, BytesMut};
use tokio::sync::mpsc;
use tracing::warn;

use super::export::{ExportError, ExportReader};
use super::mapping::{self, BatchEncoder, Position};
use super::JournaldOptions;
use crate::event::EventId;
use crate::metrics::Metrics;

/// Where journalctl starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// The oldest entry.
    Beginning,
    /// At this cursor (inclusive: the reader skips the entry itself).
    Cursor(String),
}

/// journalctl's arguments for `opts`, starting at `start`.
pub fn args(opts: &JournaldOptions, start: &Start) -> Vec<String> {
    // Not `--output-fields=` (only the fields the mapping reads): it halves
    // what crosses the pipe but costs journalctl (systemd 252) about 45 %
    // more CPU per entry, and journalctl is what bounds the rate
    // (`benches/journald.rs`).
    let mut a = vec!["--output=export".to_string(), "--no-pager".to_string()];
    if let Some(d) = &opts.directory {
        a.push(format!("--directory={}", d.display()));
    }
    for f in &opts.files {
        a.push(format!("--file={}", f.display()));
    }
    for u in &opts.units {
        a.push(format!("--unit={u}"));
    }
    if let Some(p) = opts.min_priority {
        a.push(format!("--priority={p}"));
    }
    if opts.current_boot_only {
        a.push("--boot".to_string());
    }
    match start {
        Start::Beginning => a.push("--no-tail".to_string()),
        // `--cursor`, not `--after-cursor`: if the entry was vacuumed,
        // `--after-cursor` skips the first entry after the gap too.
        Start::Cursor(c) => {
            a.push("--no-tail".to_string());
            a.push(format!("--cursor={c}"));
        }
    }
    a.extend(opts.matches.iter().cloned());
    a
}

/// Starts journalctl: stdout piped to us, stderr kept for error messages.
pub fn spawn(program: &str, args: &[String], follow: bool) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.args(args);
    if follow {
        cmd.arg("--follow");
    }
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // The signal follows the death of the spawning *thread*: this is called
    // from the async task (a runtime worker, alive as long as the daemon),
    // never from a blocking-pool thread that may exit when idle.
    // SAFETY: prctl is async-signal-safe and touches no memory of ours.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// One append's worth of entries, in journal order.
#[derive(Debug)]
pub struct Chunk {
    /// Events framed for [`Batch::from_framed`](crate::seglog::Batch::from_framed)
    /// (empty when every entry read was skipped).
    pub framed: Bytes,
    pub context: Bytes,
    pub events: u32,
    /// Bytes of the entries' values as journalctl sent them.
    pub bytes: u64,
    /// The last entry read (appended or skipped).
    pub last: String,
    /// Entries found in the log at start are still expected: the log
    /// position recovery reads from must not move yet.
    pub recovering: bool,
}

/// What the thread tells the appender.
#[derive(Debug)]
pub enum Msg {
    Chunk(Chunk),
    /// The stream ended: journalctl exited, or its output was not export
    /// format (the error).
    Ended(Option<String>),
}

/// How the thread skips what is already in the log.
#[derive(Debug, Default)]
pub struct Skip {
    /// The checkpointed entry: it and entries before it in its sequence.
    pub through: Option<Position>,
    /// Ids of entries found in the log after the checkpoint.
    pub ids: HashSet<EventId>,
}

/// The last lines journalctl wrote on stderr (for the error when it exits).
pub type StderrTail = Arc<Mutex<VecDeque<String>>>;

/// Logs journalctl's stderr lines and keeps the last few.
pub fn watch_stderr(name: &str, err: ChildStderr) -> StderrTail {
    let tail: StderrTail = Arc::default();
    let (t, n) = (tail.clone(), name.to_string());
    let spawned = std::thread::Builder::new()
        .name(format!("journalctl-stderr:{name}"))
        .spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                warn!(source = %n, "journalctl: {line}");
                let mut t = t.lock().unwrap_or_else(|p| p.into_inner());
                if t.len() == 4 {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    if let Err(e) = spawned {
        warn!(source = %name, error = %e, "cannot start the thread that reads journalctl's errors");
    }
    tail
}

/// The reading thread's settings.
pub struct Settings {
    pub name: String,
    pub fields: Vec<String>,
    pub exclude_units: Vec<String>,
    pub max_entry: usize,
    /// A batch is sent at this many bytes of events.
    pub batch_bytes: usize,
    pub metrics: Arc<Metrics>,
    /// Set when a batch is sent, cleared by the appender once it is
    /// appended: while set, the reader keeps filling the next batch.
    pub busy: Arc<AtomicBool>,
}

/// Whether bytes are waiting in the pipe (or it was closed) within
/// `timeout_ms` (-1: as long as it takes).
fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, timeout_ms) != 0 }
}

/// How long the reader waits for journalctl before it hands over a batch
/// that is not full, and how many such quiet waits in a row mean that it
/// has caught up with the journal.
const QUIET_MS: i32 = 20;
/// Large reads from the pipe: fewer system calls and wake-ups per entry
/// when journalctl is far ahead (reading a journal from the beginning).
const READ_BUFFER: usize = 256 << 10;
const CAUGHT_UP_WAITS: u32 = 25;

struct Pending {
    framed: BytesMut,
    enc: BatchEncoder,
    events: u32,
    bytes: u64,
    last: Option<String>,
}

impl Pending {
    fn new(name: &str) -> Pending {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Pending {
            framed: BytesMut::new(),
            enc: BatchEncoder::new(name, now),
            events: 0,
            bytes: 0,
            last: None,
        }
    }
}

/// Reads `out` until it ends or the appender is gone.
pub fn run(s: Settings, out: ChildStdout, mut skip: Skip, tx: mpsc::Sender<Msg>) {
    let fd = out.as_raw_fd();
    let mut r = ExportReader::new(BufReader::with_capacity(READ_BUFFER, out), s.max_entry);
    let mut p = Pending::new(&s.name);
    let mut first = true;
    let component = format!("source:{}", s.name);
    let ended = loop {
        if r.get_ref().buffer().is_empty() {
            // Nothing parsed is waiting: see whether journalctl is quiet.
            let mut quiet = 0;
            let waiting = p.last.is_some() || !skip.ids.is_empty();
            while !readable(fd, if waiting { QUIET_MS } else { -1 }) {
                quiet += 1;
                if quiet == CAUGHT_UP_WAITS {
                    // Caught up with the journal: found ids not met again
                    // are gone (vacuumed, or filtered out by a changed
                    // config) and must not hold the log position back.
                    skip.ids.clear();
                }
                if !s.busy.load(Ordering::Acquire) && !send(&tx, &mut p, &s, &skip) {
                    return;
                }
            }
        }
        let entry = match r.next_entry() {
            Ok(Some(e)) => e,
            Ok(None) => break None,
            Err(ExportError::Cut { .. }) => break None,
            Err(e) => break Some(e.to_string()),
        };
        let Some(mut m) = mapping::map(&entry, &s.fields) else {
            s.metrics.drop_events(&component, "no_cursor", 1);
            r.recycle(entry);
            continue;
        };
        if first {
            first = false;
            if let Some(ck) = &skip.through {
                if !m.pos.at_or_before(ck) {
                    gap(&s, ck, &m.pos);
                }
            }
        }
        let skipped = skip
            .through
            .as_ref()
            .is_some_and(|ck| m.pos.at_or_before(ck))
            || (!skip.ids.is_empty() && skip.ids.remove(&m.id))
            || (!s.exclude_units.is_empty()
                && entry
                    .text("_SYSTEMD_UNIT")
                    .is_some_and(|u| s.exclude_units.iter().any(|x| x == u)));
        let cursor = std::mem::take(&mut m.pos.cursor);
        if !skipped {
            if entry.truncated {
                warn!(source = %s.name, cursor = %cursor, bytes = entry.wire_bytes,
                    "a journal entry is larger than max_entry_bytes; its values were cut and it is marked log.record.truncated");
            }
            p.enc.encode_into(m, &mut p.framed);
            p.events += 1;
            p.bytes += entry.wire_bytes;
        }
        p.last = Some(cursor);
        r.recycle(entry);
        // A batch goes when it is full (waiting for the appender if need
        // be: the back-pressure) or as soon as the appender is free: the
        // batches then grow with the time an append takes (group commit).
        let full = p.framed.len() >= s.batch_bytes || p.events >= 8192;
        if (full || !s.busy.load(Ordering::Acquire)) && !send(&tx, &mut p, &s, &skip) {
            return;
        }
    };
    if !send(&tx, &mut p, &s, &skip) {
        return;
    }
    let _ = tx.blocking_send(Msg::Ended(ended));
}

/// Hands the batch to the appender (waiting while one is queued), and marks
/// the appender busy until it has appended it.
fn send(tx: &mpsc::Sender<Msg>, p: &mut Pending, s: &Settings, skip: &Skip) -> bool {
    let Some(last) = p.last.take() else {
        return true;
    };
    let done = std::mem::replace(p, Pending::new(&s.name));
    let chunk = Chunk {
        framed: done.framed.freeze(),
        context: if done.events > 0 {
            Bytes::from(done.enc.context())
        } else {
            Bytes::new()
        },
        events: done.events,
        bytes: done.bytes,
        last,
        recovering: !skip.ids.is_empty(),
    };
    s.busy.store(true, Ordering::Release);
    tx.blocking_send(Msg::Chunk(chunk)).is_ok()
}

/// The checkpointed entry is gone: count what is known to be missing.
fn gap(s: &Settings, ck: &Position, first: &Position) {
    let missing = match (&ck.seqnum, &first.seqnum) {
        (Some((a, i)), Some((b, j))) if a == b && j > i => Some(j - i - 1),
        _ => None,
    };
    s.metrics.drop_events(
        &format!("source:{}", s.name),
        "journal_vacuumed",
        missing.unwrap_or(0),
    );
    match missing {
        Some(n) => {
            warn!(source = %s.name, checkpoint = %ck.cursor, resumed_at = %first.cursor, missing = n,
            "the checkpointed journal entry is gone (vacuumed or rotated away while holdfast was stopped); \
             resuming at the oldest entry after it; entries in between were never read")
        }
        None => warn!(source = %s.name, checkpoint = %ck.cursor, resumed_at = %first.cursor,
            "the checkpointed journal entry is gone and the journal it was in no longer exists \
             (vacuumed, or another machine's journal); resuming at the oldest entry; how many \
             entries were never read is not known"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sources::journald::StartAt;

    #[test]
    fn options_become_journalctl_arguments() {
        let opts = JournaldOptions {
            directory: Some("/j".into()),
            files: Vec::new(),
            units: vec!["ssh.service".into()],
            exclude_units: vec!["cron.service".into()],
            min_priority: Some(4),
            matches: vec!["_TRANSPORT=kernel".into()],
            current_boot_only: true,
            start_at: StartAt::End,
            fields: Vec::new(),
            max_entry_bytes: 1 << 20,
            checkpoint_dir: "/c".into(),
        };
        assert_eq!(
            args(&opts, &Start::Cursor("s=a;i=1".into())),
            [
                "--output=export",
                "--no-pager",
                "--directory=/j",
                "--unit=ssh.service",
                "--priority=4",
                "--boot",
                "--no-tail",
                "--cursor=s=a;i=1",
                "_TRANSPORT=kernel",
            ]
        );
        // Excluded units are skipped by the reader, not by journalctl.
        assert!(!args(&opts, &Start::Beginning)
            .iter()
            .any(|a| a.contains("cron")));
    }
}
