//! Opening a log directory: lock it, find the segments, check the sealed
//! ones' headers, scan the active one frame by frame (truncating a torn
//! tail), and load the cursors. Only the active segment is read in full, so
//! opening time depends on its size, not on the size of the log.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Read};
use std::path::Path;
use std::sync::Arc;

use tracing::{error, info, warn};

use super::cursor;
use super::error::{LogError, Result};
use super::format::{self, SegmentHeader, FORMAT_VERSION, SEGMENT_HEADER_LEN};
use super::io::{self, Fs};
use super::segment::{self, Segment};
use super::state::{now_ms, ConsumerState, Counters, State};

const LOCK_FILE: &str = "LOCK";

/// The highest next sequence number a log may be opened for writing at.
const MAX_NEXT_SEQ: u64 = 1 << 63;
/// The recovery scan of the active segment gives back the mapped pages it
/// has passed every this many bytes.
const RECOVERY_RELEASE_STEP: usize = 1 << 20;

/// Everything the writer needs to carry on where the last process stopped.
pub struct Recovered {
    pub state: State,
    /// The directory lock; `None` when opened read-only.
    pub lock: Option<File>,
    /// The active segment, open for appending; `None` when opened read-only.
    pub active: Option<File>,
    pub cursor_generation: u64,
}

/// How a directory is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Lock, repair (truncate torn tails, rewrite torn headers) and append.
    ReadWrite { sync: bool },
    /// Change nothing and take no lock, so `holdfast inspect` and `dump` work
    /// beside a running daemon. The active segment is read into memory (it
    /// may be cut back by the daemon, which a map would not survive) and a
    /// torn tail is only reported: it may be an append in progress.
    ReadOnly,
}

pub fn lock_dir(dir: &Path) -> Result<File> {
    io::create_private_dir_all(dir).map_err(|e| LogError::io("creating log directory", dir, e))?;
    let path = dir.join(LOCK_FILE);
    let lock = io::private_file(&mut OpenOptions::new())
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LogError::io("opening lock file", &path, e))?;
    match lock.try_lock() {
        Ok(()) => Ok(lock),
        Err(std::fs::TryLockError::WouldBlock) => Err(LogError::Locked { dir: dir.into() }),
        Err(std::fs::TryLockError::Error(e)) => Err(LogError::io("locking", &path, e)),
    }
}

/// Lists segment base sequences in order, reporting files that do not belong.
pub fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut bases = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| LogError::io("listing", dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| LogError::io("listing", dir, e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(base) = segment::parse_name(&name) {
            bases.push(base);
        } else if name != LOCK_FILE && !cursor::is_slot_file(&name) {
            warn!(file = %entry.path().display(), "unexpected file in the log directory; ignoring it");
        }
    }
    bases.sort_unstable();
    Ok(bases)
}

pub fn recover(dir: &Path, mode: Mode, fs: &Fs) -> Result<Recovered> {
    let (lock, sync) = match mode {
        Mode::ReadWrite { sync } => (Some(lock_dir(dir)?), sync),
        Mode::ReadOnly => {
            if !dir.is_dir() {
                return Err(LogError::io(
                    "opening log directory",
                    dir,
                    std::io::Error::from(std::io::ErrorKind::NotFound),
                ));
            }
            (None, false)
        }
    };
    let read_only = mode == Mode::ReadOnly;
    let mut counters = Counters::default();
    let mut damage_seen = HashSet::new();
    let loaded = cursor::load(dir)?;
    for msg in &loaded.damaged {
        warn!("{msg}");
    }
    counters.damaged_cursor_files = loaded.damaged.len() as u64;
    if loaded.all_lost {
        error!(
            dir = %dir.display(),
            "no readable cursor file: every consumer starts again from the oldest event (expect redelivery)"
        );
    }

    let mut bases = list_segments(dir)?;
    if bases.is_empty() && read_only {
        return Err(LogError::Corrupt {
            path: dir.into(),
            offset: 0,
            reason: "no segment files: not a holdfast log directory, or never opened".into(),
        });
    }
    if bases.is_empty() {
        // A log whose segments were all removed by hand still never reuses a
        // sequence number a consumer has already seen.
        let start = loaded.cursors.values().map(|e| e.next).max().unwrap_or(0);
        segment::create(fs, dir, start, now_ms(), sync)?;
        if sync {
            segment::sync_dir(fs, dir)?;
        }
        bases.push(start);
    }

    let mut segments = VecDeque::with_capacity(bases.len());
    let mut total_bytes = 0;
    let last = bases.len() - 1;
    for &base in &bases[..last] {
        let path = dir.join(segment::file_name(base));
        let mut file = File::open(&path).map_err(|e| LogError::io("opening segment", &path, e))?;
        let len = file
            .metadata()
            .map_err(|e| LogError::io("reading metadata of", &path, e))?
            .len();
        let mut head = [0u8; SEGMENT_HEADER_LEN];
        let head_len =
            read_up_to(&mut file, &mut head).map_err(|e| LogError::io("reading", &path, e))?;
        let (created_ms, format) = match SegmentHeader::decode(&head[..head_len]) {
            Ok(h) => {
                if h.base_seq != base {
                    warn!(segment = %path.display(), header_base = h.base_seq,
                        "segment header names another base sequence than its file name; trusting the file name");
                }
                (h.created_ms, h.version)
            }
            Err(reason) => {
                counters.corrupt_headers += 1;
                warn!(segment = %path.display(), %reason,
                    "damaged segment header; its frames are still checked one by one as they are read");
                (modified_ms(&file), 0)
            }
        };
        total_bytes += len;
        let header = SegmentHeader {
            base_seq: base,
            created_ms,
            version: format,
        };
        segments.push_back(Segment::new(header, path, len, true, Arc::new(file)));
    }

    // The active segment: scan it whole.
    let base = bases[last];
    let path = dir.join(segment::file_name(base));
    let mut active = OpenOptions::new()
        .read(true)
        .append(!read_only)
        .open(&path)
        .map_err(|e| LogError::io("opening segment", &path, e))?;
    let mut len = active
        .metadata()
        .map_err(|e| LogError::io("reading metadata of", &path, e))?
        .len();
    let mut created_ms = now_ms();
    if len < SEGMENT_HEADER_LEN as u64 && !read_only {
        // Torn while being created: nothing was ever acknowledged in it.
        warn!(segment = %path.display(), len, "segment header incomplete (torn while being created); rewriting it");
        write_fresh_header(fs, &mut active, &path, base, created_ms, sync)?;
        len = SEGMENT_HEADER_LEN as u64;
    }
    let map = if read_only {
        let mut buf = Vec::with_capacity(len as usize);
        active
            .read_to_end(&mut buf)
            .map_err(|e| LogError::io("reading", &path, e))?;
        bytes::Bytes::from(buf)
    } else {
        segment::map_file(&active, len as usize, &path)?
    };
    let format = match SegmentHeader::decode(&map) {
        Ok(h) => {
            created_ms = h.created_ms;
            h.version
        }
        Err(reason) => {
            counters.corrupt_headers += 1;
            warn!(segment = %path.display(), %reason, "damaged header on the active segment; scanning its frames anyway");
            format::detect_version(&map)
        }
    };
    // The scan reads (and checksums) the whole active segment: without
    // giving back the pages it passed, a full one would add a segment's
    // size to RSS at start-up, before anything else runs. The image kept
    // for a read-only open is on the heap, not a map: nothing to give back.
    let mut released = 0;
    let scan = segment::scan_with(&map, base, format, |at| {
        if !read_only && at >= released + RECOVERY_RELEASE_STEP {
            segment::release_pages(&map, at);
            released = at;
        }
    });
    let kept_image = read_only.then(|| map.slice(..scan.valid_end as usize));
    drop(map);
    for (offset, damage, skipped) in &scan.damaged {
        warn!(segment = %path.display(), offset, %damage, skipped_bytes = skipped,
            "skipping a damaged frame; later frames are intact");
        counters.corrupt_frames += 1;
        counters.corrupt_bytes += skipped;
        damage_seen.insert((base, *offset));
    }
    if let (Some((offset, bytes)), true) = (scan.torn, read_only) {
        info!(segment = %path.display(), offset, bytes,
            "the active segment ends in an incomplete frame (an append in progress, or a torn tail the daemon will truncate)");
        counters.torn_bytes += bytes;
        len = offset;
    } else if let Some((offset, bytes)) = scan.torn {
        warn!(segment = %path.display(), offset, bytes,
            "truncating torn tail of segment (an append that was never acknowledged)");
        fs.set_len(&active, &path, offset)
            .and_then(|_| {
                if sync {
                    fs.sync_data(&active, &path)
                } else {
                    Ok(())
                }
            })
            .map_err(|e| LogError::io("truncating torn tail of", &path, e))?;
        counters.torn_tails += 1;
        counters.torn_bytes += bytes;
        len = offset;
    }
    total_bytes += len;
    let next_seq = scan.next_seq;
    if next_seq > MAX_NEXT_SEQ && !read_only {
        // Appending would overflow the sequence numbers. A real log takes
        // centuries to get here; hand-made or foreign files get here at once.
        return Err(LogError::Corrupt {
            path,
            offset: 0,
            reason: format!(
                "the log's sequence numbers reach {next_seq}, past 2^63, so nothing more can be \
                 appended: these files were not written by holdfast; move the directory away to \
                 start a new log"
            ),
        });
    }
    let mut format = format;
    if format != FORMAT_VERSION && len == SEGMENT_HEADER_LEN as u64 && !read_only {
        // An older version's segment with nothing in it yet: it becomes a
        // current one (with frames it is sealed before the first append,
        // see `Writer::must_roll`; a segment never mixes formats).
        write_fresh_header(fs, &mut active, &path, base, created_ms, sync)?;
        format = FORMAT_VERSION;
    }
    let read_handle = File::open(&path).map_err(|e| LogError::io("opening segment", &path, e))?;
    let header = SegmentHeader {
        base_seq: base,
        created_ms,
        version: format,
    };
    let mut seg = Segment::new(header, path, len, false, Arc::new(read_handle));
    seg.map = kept_image;
    segments.push_back(seg);

    let floor = segments.front().map_or(next_seq, |s| s.header.base_seq);
    let mut consumers = BTreeMap::new();
    for (name, entry) in loaded.cursors {
        let seq = entry.next;
        let seq = if seq > next_seq {
            warn!(consumer = %name, cursor = seq, end = next_seq,
                "cursor points past the end of the log (data lost in a power cut under a weak fsync policy?); moving it to the end");
            next_seq
        } else if seq < floor {
            info!(consumer = %name, cursor = seq, oldest = floor,
                "the oldest event on disk is past this consumer's stored cursor (deleted after it finished them, or evicted and counted); it continues from the oldest event");
            floor
        } else {
            seq
        };
        consumers.insert(
            name,
            ConsumerState::restored(
                seq,
                entry.lost,
                entry.lost_through,
                entry.in_doubt + entry.pending_in_doubt,
            ),
        );
    }

    info!(dir = %dir.display(), segments = segments.len(), bytes = total_bytes, first_seq = floor, next_seq,
        consumers = consumers.len(), "log recovered");

    Ok(Recovered {
        state: State {
            segments,
            next_seq,
            consumers,
            total_bytes,
            counters,
            damage_seen,
            holds: Default::default(),
            closed: false,
        },
        lock,
        active: (!read_only).then_some(active),
        cursor_generation: loaded.generation,
    })
}

fn read_up_to(f: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

fn modified_ms(f: &File) -> u64 {
    f.metadata()
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or_else(now_ms, |d| d.as_millis() as u64)
}

/// Empties the active segment and writes a current header: for a segment
/// holding no frame (torn while being created, or an older version's with
/// nothing in it yet).
fn write_fresh_header(
    fs: &Fs,
    active: &mut File,
    path: &Path,
    base_seq: u64,
    created_ms: u64,
    sync: bool,
) -> Result<()> {
    let header = SegmentHeader {
        base_seq,
        created_ms,
        version: FORMAT_VERSION,
    }
    .encode();
    fs.set_len(active, path, 0)
        .and_then(|_| fs.write_all(active, path, 0, &mut [IoSlice::new(&header)]))
        .and_then(|_| {
            if sync {
                fs.sync_data(active, path)
            } else {
                Ok(())
            }
        })
        .map_err(|e| LogError::io("rewriting segment header", path, e))
}
