//! The sd-journal half of the reader (only with the `journald` feature):
//! opens the journal with its filters, seeks to where reading starts, copies
//! each entry's fields, encodes them and sends the batches (`reader.rs`
//! holds the channel's contract and the batching limits).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use systemd::journal::{Journal, OpenDirectoryOptions, OpenFilesOptions, OpenOptions};
use tokio::sync::mpsc;
use tracing::warn;

use super::{
    Chunk, Msg, Settings, Skip, Start, BATCH_BYTES, MAX_EVENTS, MIN_EVENTS, WAIT, WAIT_BUSY,
};
use crate::sources::journald::mapping::{self, BatchEncoder, Fields, Position};
use crate::sources::journald::{JournaldOptions, Journals, Selection};

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{} holds a NUL byte", p.display()))
}

/// Opens the journal `opts` names, with its filters.
pub fn open(opts: &JournaldOptions) -> Result<Journal, String> {
    let mut j = match &opts.journals {
        Journals::Files(files) => {
            let files = files
                .iter()
                .map(|f| c_path(f))
                .collect::<Result<Vec<_>, _>>()?;
            OpenFilesOptions::default()
                .open_files(files)
                .map_err(|e| format!("opening the journal files: {e}"))?
        }
        Journals::Directory(d) => OpenDirectoryOptions::default()
            .open_directory(c_path(d)?)
            .map_err(|e| format!("opening the journal directory {}: {e}", d.display()))?,
        // The system journal and this user's, of this machine only.
        Journals::Local => OpenOptions::default()
            .local_only(true)
            .open()
            .map_err(|e| format!("opening the system journal: {e}"))?,
    };
    filter(&mut j, &opts.select).map_err(|e| format!("adding the journal filters: {e}"))?;
    // Watch the files from now on (sd-journal sets its inotify watches up on
    // the first call): what is written before the first wait is seen too.
    // Without a watch (it failed), waits end at their timeout instead.
    let _ = j.fd();
    Ok(j)
}

/// Adds `opts`' filters as journalctl does: each option is one term, the
/// terms are AND'ed (`sd_journal_add_conjunction`).
fn filter(j: &mut Journal, opts: &Selection) -> systemd::Result<()> {
    // A unit's own entries, and systemd's about it (`UNIT=` from PID 1:
    // started, stopped, failed), as `journalctl --unit` shows them.
    for (i, u) in opts.units.iter().enumerate() {
        if i > 0 {
            j.match_or()?;
        }
        j.match_add("_SYSTEMD_UNIT", u.as_str())?;
        j.match_or()?;
        j.match_add("UNIT", u.as_str())?;
        j.match_add("_PID", "1")?;
    }
    j.match_and()?;
    if let Some(p) = opts.min_priority {
        // Values of one field are OR'ed.
        for v in 0..=p {
            j.match_add("PRIORITY", v.to_string())?;
        }
        j.match_and()?;
    }
    if opts.current_boot_only {
        let boot = systemd::id128::Id128::from_boot()?;
        j.match_add("_BOOT_ID", boot.to_string())?;
        j.match_and()?;
    }
    for m in &opts.matches {
        match m.split_once('=') {
            Some((field, value)) => {
                j.match_add(field, value)?;
            }
            // `+`: what follows is an alternative (config.rs allows
            // nothing else without `=`).
            None => {
                j.match_or()?;
            }
        }
    }
    j.match_and()?;
    Ok(())
}

struct Pending {
    framed: Vec<u8>,
    enc: BatchEncoder,
    events: u32,
    bytes: u64,
    last: Option<String>,
    save_now: bool,
}

impl Pending {
    fn new(name: &str) -> Pending {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Pending {
            framed: Vec::new(),
            enc: BatchEncoder::new(name, now),
            events: 0,
            bytes: 0,
            last: None,
            save_now: false,
        }
    }
}

/// Copies the current entry's fields into `f`, within `max_entry` bytes
/// of names and values (in the entry's order; what does not fit is cut or
/// left out, and the entry marked). Returns the bytes of its values.
fn read_entry(j: &mut Journal, f: &mut Fields, max_entry: usize) -> systemd::Result<u64> {
    f.clear();
    f.realtime_us = j.timestamp_usec()?;
    j.restart_data();
    let (mut stored, mut wire) = (0usize, 0u64);
    while let Some(d) = j.enumerate_data()? {
        let (name, value) = (d.name(), d.value().unwrap_or_default());
        wire += value.len() as u64;
        if stored + name.len() > max_entry {
            f.truncated = true;
            continue;
        }
        let room = max_entry - stored - name.len();
        let v = &value[..value.len().min(room)];
        f.truncated |= v.len() < value.len();
        stored += name.len() + v.len();
        if let Some(slot) = f.slot(name) {
            f.set(slot, v);
        }
    }
    Ok(wire)
}

/// Places `j` where reading starts; returns whether it is already on the
/// first entry to read (else the next `next()` moves onto it) and, for a
/// checkpoint, whether its entry is gone.
fn seek(
    j: &mut Journal,
    start: &Start,
    p: &mut Pending,
    skip: &mut Skip,
) -> systemd::Result<(bool, bool)> {
    match start {
        Start::Beginning => j.seek_head().map(|()| (false, false)),
        Start::End => {
            j.seek_tail()?;
            if j.previous()? == 0 {
                // An empty journal: its first entry is new.
                j.seek_head()?;
                return Ok((false, false));
            }
            let c = j.cursor()?;
            skip.through = Some(Position::of_cursor(&c));
            p.last = Some(c);
            p.save_now = true;
            Ok((false, false))
        }
        Start::Cursor(c) => {
            j.seek_cursor(c.as_str())?;
            if j.next()? == 0 {
                return Ok((false, false));
            }
            // On the checkpointed entry, or (vacuumed) the oldest one after
            // where it was, which is read.
            let gone = !j.test_cursor(c.as_str())?;
            Ok((gone, gone))
        }
    }
}

/// Reads until the appender is gone (the source stopped) or reading fails.
pub fn run(s: Settings, start: Start, mut skip: Skip, tx: mpsc::Sender<Msg>) {
    let mut j = match open(&s.opts) {
        Ok(j) => j,
        Err(e) => {
            let _ = tx.blocking_send(Msg::Ended(e));
            return;
        }
    };
    if let Err(e) = read(&mut j, &s, &start, &mut skip, &tx) {
        let _ = tx.blocking_send(Msg::Ended(format!("reading the journal: {e}")));
    }
}

fn read(
    j: &mut Journal,
    s: &Settings,
    start: &Start,
    skip: &mut Skip,
    tx: &mpsc::Sender<Msg>,
) -> systemd::Result<()> {
    // Compressed values past the threshold are returned cut to it: no
    // need to decompress more than an entry may keep. The margin (more
    // than a field name) makes a value cut there longer than the room
    // `read_entry` leaves it, so the entry is marked.
    let max_entry = s.opts.max_entry_bytes.min(s.max_frame);
    let batch_bytes = BATCH_BYTES.min(s.max_frame / 2);
    j.set_data_threshold(max_entry.saturating_add(128))?;
    let mut p = Pending::new(&s.name);
    let (mut on_entry, mut check_gap) = seek(j, start, &mut p, skip)?;
    let mut f = Fields::new(&s.opts.fields);
    let component = format!("source:{}", s.name);
    let exclude: Vec<&[u8]> = s
        .opts
        .select
        .exclude_units
        .iter()
        .map(|u| u.as_bytes())
        .collect();
    loop {
        if !std::mem::take(&mut on_entry) && j.next()? == 0 {
            // Caught up with the journal: found ids not met again are gone
            // (vacuumed, or filtered out by a changed config) and must not
            // hold the log position back.
            skip.ids.clear();
            let free = !s.busy.load(Ordering::Acquire) && tx.capacity() > 0;
            if p.last.is_some() && free && !send(tx, &mut p, s, skip) {
                return Ok(());
            }
            if tx.is_closed() {
                return Ok(());
            }
            // Returns early when entries are written or files come and go;
            // `next` is asked again whatever it says (it costs little at the
            // end), so no change can be missed between two waits.
            j.wait(Some(if p.last.is_some() { WAIT_BUSY } else { WAIT }))?;
            continue;
        }
        let cursor = match j.cursor() {
            Ok(c) => c,
            Err(_) => {
                s.metrics.drop_events(&component, "no_cursor", 1);
                continue;
            }
        };
        if std::mem::take(&mut check_gap) {
            if let Some(ck) = &skip.through {
                if !ck.holds(&cursor) {
                    gap(s, ck, &cursor);
                }
            }
        }
        let bytes = match read_entry(j, &mut f, max_entry) {
            Ok(b) => b,
            Err(e) => {
                // A damaged entry fails the same way on every read: failing
                // the source would stop it there for good.
                s.metrics.drop_events(&component, "journal_unreadable", 1);
                warn!(source = %s.name, cursor = %cursor, error = %e,
                    "a journal entry cannot be read (a damaged journal file?); skipped");
                p.last = Some(cursor);
                continue;
            }
        };
        let id = mapping::entry_id(&cursor, || {
            let (mono, _) = j.monotonic_timestamp().ok()?;
            Some((f.boot_id()?.to_vec(), mono))
        });
        let skipped = skip.through.as_ref().is_some_and(|ck| ck.holds(&cursor))
            || (!skip.ids.is_empty() && skip.ids.remove(&id))
            || (!exclude.is_empty() && f.unit().is_some_and(|u| exclude.contains(&u)));
        if !skipped {
            if f.truncated {
                warn!(source = %s.name, cursor = %cursor, bytes,
                    "a journal entry is larger than max_entry_bytes; its values were cut and it is marked log.record.truncated");
            }
            p.enc.encode(&f, &id, &mut p.framed);
            p.events += 1;
            p.bytes += bytes;
        }
        p.last = Some(cursor);
        // A batch goes when it is full (waiting for the appender if need
        // be: the back-pressure) or, once it holds `MIN_EVENTS`, as soon as
        // the appender is free and the channel empty: the batches then grow
        // with the time an append takes (group commit), and a journal read
        // far behind its end is not appended a few entries at a time (at
        // its end, whatever is read goes at once, above).
        let full = p.framed.len() >= batch_bytes || p.events >= MAX_EVENTS;
        let free = p.events >= MIN_EVENTS && !s.busy.load(Ordering::Acquire) && tx.capacity() > 0;
        if (full || free) && !send(tx, &mut p, s, skip) {
            return Ok(());
        }
    }
}

/// Hands the batch to the appender (waiting while one is queued), and marks
/// the appender busy until it has appended it.
fn send(tx: &mpsc::Sender<Msg>, p: &mut Pending, s: &Settings, skip: &Skip) -> bool {
    let Some(last) = p.last.take() else {
        return true;
    };
    let done = std::mem::replace(p, Pending::new(&s.name));
    let chunk = Chunk {
        framed: Bytes::from(done.framed),
        context: if done.events > 0 {
            Bytes::from(done.enc.context())
        } else {
            Bytes::new()
        },
        events: done.events,
        bytes: done.bytes,
        last,
        recovering: !skip.ids.is_empty(),
        save_now: done.save_now,
    };
    s.busy.store(true, Ordering::Release);
    tx.blocking_send(Msg::Chunk(chunk)).is_ok()
}

/// The checkpointed entry is gone: count what is known to be missing.
fn gap(s: &Settings, ck: &Position, first: &str) {
    let missing = match (&ck.seqnum, mapping::seqnum_of(first)) {
        (Some((a, i)), Some((b, j))) if a == b && j > *i => Some(j - i - 1),
        _ => None,
    };
    s.metrics.drop_events(
        &format!("source:{}", s.name),
        "journal_vacuumed",
        missing.unwrap_or(0),
    );
    match missing {
        Some(n) => {
            warn!(source = %s.name, checkpoint = %ck.cursor, resumed_at = %first, missing = n,
            "the checkpointed journal entry is gone (vacuumed or rotated away while holdfast was stopped); \
             resuming at the oldest entry after it; entries in between were never read")
        }
        None => warn!(source = %s.name, checkpoint = %ck.cursor, resumed_at = %first,
            "the checkpointed journal entry is gone and the journal it was in no longer exists \
             (vacuumed, or another machine's journal); resuming at the oldest entry after it; how \
             many entries were never read is not known"),
    }
}
