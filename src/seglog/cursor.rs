//! Durable consumer cursors, in two checksummed slots.
//!
//! All cursors are written together into `cursors.0` or `cursors.1`, each
//! write carrying a generation number higher than the last; generation `g`
//! always goes into slot `g % 2`. On open the valid slot with the highest
//! generation wins. The writer writes a slot soon after every commit
//! without syncing it (a kill -9 keeps the page cache, so such a write
//! survives a crash of the process) and syncs on `cursor_sync_interval` and
//! at close, for power cuts. The rule that keeps that safe: unsynced writes
//! go only into the slot that does *not* hold the newest synced generation
//! (skipping a generation number when needed to keep the parity), and the
//! slots trade roles only after a sync. A power cut can then tear only a
//! slot whose loss costs progress since the last sync (redelivered events),
//! never both slots, and never a wrong position. One file for all consumers
//! means one sync per interval however many sinks there are.
//!
//! Each entry also carries the consumer's loss counts, so that the
//! `holdfast_log_evicted_events_total` counters survive restarts and
//! `holdfast inspect` can show them while the daemon is down.
//!
//! ```text
//!   0  4  magic        "HFCU"
//!   4  2  version      2 (1 is still read)
//!   6  2  reserved     0
//!   8  8  generation
//!  16  4  entry count
//!  20  …  entries      u8 name length, name bytes, u64 next sequence to read,
//!                      u64 events lost to size, u64 to age, u64 to corruption,
//!                      u64 sequence up to which corruption losses are counted,
//!                      (version 2 only:) u64 events in doubt,
//!                      u64 evicted events on the wire when this was written
//!   …  4  CRC-32 of every byte before it
//! ```
//!
//! A version 1 file reads as version 2 with both in-doubt counts 0. The
//! evicted events on the wire have an unknown outcome if the process ends
//! before their answers come: the next open adds them to the events in
//! doubt (see `ConsumerState::restored`).

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{IoSlice, Read};
use std::path::{Path, PathBuf};

use super::error::{LogError, Result};
use super::io::Fs;

const MAGIC: [u8; 4] = *b"HFCU";
const VERSION: u16 = 2;
/// The format before the in-doubt counts; still read.
const VERSION_1: u16 = 1;
const SLOT_NAMES: [&str; 2] = ["cursors.0", "cursors.1"];

/// One consumer's durable state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Entry {
    /// The first sequence number it has not finished.
    pub next: u64,
    /// Events lost without being read, indexed like [`LossReason::ALL`](super::LossReason::ALL).
    pub lost: [u64; 3],
    /// Corruption losses below this sequence number are already counted, so
    /// re-reading the same damage after a restart does not count it again.
    pub lost_through: u64,
    /// Evicted events whose delivery a crash made unknown (monotonic).
    pub in_doubt: u64,
    /// Evicted events on the wire when the entry was written: in doubt if
    /// the process ends before their answers.
    pub pending_in_doubt: u64,
}

/// Consumer name → its durable state.
pub type CursorMap = BTreeMap<String, Entry>;

/// What was found on disk.
#[derive(Debug, Default)]
pub struct Loaded {
    pub generation: u64,
    pub cursors: CursorMap,
    /// One message per damaged slot, for the operator.
    pub damaged: Vec<String>,
    /// True when slots existed but none was readable: every consumer starts
    /// again from the oldest event.
    pub all_lost: bool,
}

pub fn slot_paths(dir: &Path) -> [PathBuf; 2] {
    [dir.join(SLOT_NAMES[0]), dir.join(SLOT_NAMES[1])]
}

pub fn is_slot_file(name: &str) -> bool {
    SLOT_NAMES.contains(&name)
}

pub fn encode(generation: u64, cursors: &CursorMap) -> Vec<u8> {
    let mut b = Vec::with_capacity(24 + cursors.len() * 120);
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&VERSION.to_le_bytes());
    b.extend_from_slice(&0u16.to_le_bytes());
    b.extend_from_slice(&generation.to_le_bytes());
    b.extend_from_slice(&(cursors.len() as u32).to_le_bytes());
    for (name, e) in cursors {
        // Names are validated to at most 64 bytes when a consumer is created.
        b.push(name.len() as u8);
        b.extend_from_slice(name.as_bytes());
        b.extend_from_slice(&e.next.to_le_bytes());
        let tail = [&e.lost_through, &e.in_doubt, &e.pending_in_doubt];
        for n in e.lost.iter().chain(tail) {
            b.extend_from_slice(&n.to_le_bytes());
        }
    }
    let crc = crc32fast::hash(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

pub fn decode(b: &[u8]) -> Result<(u64, CursorMap), String> {
    if b.len() < 24 {
        return Err(format!("{} bytes is too short for a cursor file", b.len()));
    }
    let (body, crc) = b.split_at(b.len() - 4);
    if crc32fast::hash(body) != u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]) {
        return Err("checksum mismatch".into());
    }
    if body[0..4] != MAGIC {
        return Err("bad magic".into());
    }
    let version = u16::from_le_bytes([body[4], body[5]]);
    let fields_per_entry = match version {
        VERSION => 7,
        VERSION_1 => 5,
        _ => return Err(format!("unsupported cursor format version {version}")),
    };
    let generation = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let count = u32::from_le_bytes(body[16..20].try_into().expect("4 bytes"));
    let mut at = 20;
    let mut cursors = CursorMap::new();
    for _ in 0..count {
        let n = *body.get(at).ok_or("entry runs past the end")? as usize;
        at += 1;
        let name = body.get(at..at + n).ok_or("entry runs past the end")?;
        let name = std::str::from_utf8(name).map_err(|_| "consumer name is not UTF-8")?;
        at += n;
        let mut fields = [0u64; 7];
        for f in &mut fields[..fields_per_entry] {
            let b = body.get(at..at + 8).ok_or("entry runs past the end")?;
            *f = u64::from_le_bytes(b.try_into().expect("8 bytes"));
            at += 8;
        }
        cursors.insert(
            name.to_string(),
            Entry {
                next: fields[0],
                lost: [fields[1], fields[2], fields[3]],
                lost_through: fields[4],
                in_doubt: fields[5],
                pending_in_doubt: fields[6],
            },
        );
    }
    if at != body.len() {
        return Err("trailing bytes after the last entry".into());
    }
    Ok((generation, cursors))
}

/// Reads both slots and keeps the newest valid one.
pub fn load(dir: &Path) -> Result<Loaded> {
    let mut best: Option<(u64, CursorMap)> = None;
    let mut loaded = Loaded::default();
    let mut present = 0;
    for path in slot_paths(dir) {
        let mut bytes = Vec::new();
        match File::open(&path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes)
                    .map_err(|e| LogError::io("reading cursor file", &path, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LogError::io("opening cursor file", &path, e)),
        }
        present += 1;
        match decode(&bytes) {
            Ok((generation, cursors)) => {
                if best.as_ref().is_none_or(|(g, _)| generation > *g) {
                    best = Some((generation, cursors));
                }
            }
            Err(reason) => loaded.damaged.push(format!(
                "cursor file {} is damaged: {reason}",
                path.display()
            )),
        }
    }
    match best {
        Some((generation, cursors)) => {
            loaded.generation = generation;
            loaded.cursors = cursors;
        }
        None => loaded.all_lost = present > 0,
    }
    Ok(loaded)
}

/// The smallest generation after `last` that [`store`] writes into `slot`.
pub fn next_generation(last: u64, slot: usize) -> u64 {
    let g = last + 1;
    if (g % 2) as usize == slot {
        g
    } else {
        g + 1
    }
}

/// Which cursor slot holds what: the newest generation written, the
/// cursors in it, and which slot is known synced. One per log, in the
/// log's shared state behind its own lock; `cursor_store.rs` writes the
/// slots through it.
#[derive(Debug, Default)]
pub struct CursorSlots {
    /// The generation last written to a slot (synced or not).
    pub(super) generation: u64,
    pub(super) stored: CursorMap,
    /// The slot holding the newest *synced* generation, if known. Unsynced
    /// writes go only into the other slot (`CursorSlots::store`).
    pub(super) durable_slot: Option<usize>,
    /// The newest generation was written but not synced.
    pub(super) unsynced: bool,
    /// A slot file created by an unsynced write: its directory entry is not
    /// durable until the directory is synced.
    pub(super) slot_needs_dir_sync: [bool; 2],
}

/// Writes `cursors` as generation `generation` into its slot, syncing it
/// (and the directory, the first time the slot is created) when `sync`.
pub fn store(fs: &Fs, dir: &Path, generation: u64, cursors: &CursorMap, sync: bool) -> Result<()> {
    let path = &slot_paths(dir)[(generation % 2) as usize];
    let created = !path.exists();
    let bytes = encode(generation, cursors);
    let mut f = fs
        .create(
            OpenOptions::new().write(true).create(true).truncate(false),
            path,
        )
        .map_err(|e| LogError::io("opening cursor file", path, e))?;
    fs.write_all(&mut f, path, 0, &mut [IoSlice::new(&bytes)])
        .map_err(|e| LogError::io("writing cursor file", path, e))?;
    fs.set_len(&f, path, bytes.len() as u64)
        .map_err(|e| LogError::io("truncating cursor file", path, e))?;
    if sync {
        fs.sync_data(&f, path)
            .map_err(|e| LogError::io("syncing cursor file", path, e))?;
        if created {
            super::segment::sync_dir(fs, dir)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_valid_slot_wins_and_damage_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let at = |next| Entry {
            next,
            lost: [1, 2, 3],
            lost_through: 4,
            in_doubt: 5,
            pending_in_doubt: 6,
        };
        let mut c = CursorMap::new();
        c.insert("a".into(), at(5));
        store(&Fs::default(), dir.path(), 1, &c, true).unwrap();
        c.insert("a".into(), at(9));
        store(&Fs::default(), dir.path(), 2, &c, true).unwrap();
        let l = load(dir.path()).unwrap();
        assert_eq!((l.generation, l.cursors["a"]), (2, at(9)));

        // Tear the newest slot: the older one is used and the damage reported.
        let p = &slot_paths(dir.path())[0];
        let len = std::fs::metadata(p).unwrap().len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(len - 3)
            .unwrap();
        let l = load(dir.path()).unwrap();
        assert_eq!((l.generation, l.cursors["a"]), (1, at(5)));
        assert_eq!(l.damaged.len(), 1);
        assert!(!l.all_lost);
    }

    /// A cursor file as version 1 wrote it (before the in-doubt counts),
    /// byte for byte: it still loads, with no events in doubt.
    #[test]
    fn a_version_1_file_still_loads() {
        let mut b = Vec::new();
        b.extend_from_slice(b"HFCU");
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&0u16.to_le_bytes());
        b.extend_from_slice(&7u64.to_le_bytes());
        b.extend_from_slice(&1u32.to_le_bytes());
        b.push(4);
        b.extend_from_slice(b"sink");
        for n in [100u64, 10, 20, 30, 90] {
            b.extend_from_slice(&n.to_le_bytes());
        }
        let crc = crc32fast::hash(&b);
        b.extend_from_slice(&crc.to_le_bytes());
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cursors.1"), &b).unwrap();
        let l = load(dir.path()).unwrap();
        assert_eq!(l.generation, 7);
        assert_eq!(
            l.cursors["sink"],
            Entry {
                next: 100,
                lost: [10, 20, 30],
                lost_through: 90,
                in_doubt: 0,
                pending_in_doubt: 0,
            }
        );
        // A version this build does not know is refused, not misread.
        b[4] = 3;
        let n = b.len() - 4;
        let crc = crc32fast::hash(&b[..n]);
        b[n..].copy_from_slice(&crc.to_le_bytes());
        assert!(decode(&b).unwrap_err().contains("version 3"));
    }
}
