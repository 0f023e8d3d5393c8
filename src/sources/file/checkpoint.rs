//! Checkpoints: what a `file` source knows about its files, on disk.
//!
//! One file, `<checkpoint_dir>/checkpoint.json`:
//!
//! ```text
//! holdfast-file-checkpoint v1 crc32=1c291ca3 len=1234
//! {"source":"app","log_seq":4711,"written_unix_ms":...,"records":[{...}, ...]}
//! ```
//!
//! The header line carries the format version, the CRC-32 and the length of
//! the JSON body that follows, so a damaged or cut file is recognised and
//! never trusted. The body is JSON so an operator can read it.
//!
//! A record holds a stream's key and generation, where it lives (device,
//! inode, birth time, last path), its prefix, and `offset`: every line before
//! it was appended to the log and acknowledged *before this checkpoint was
//! written* — the checkpoint is written only after the appends it describes,
//! never ahead of them. `log_seq` is a sequence number such that every line
//! of this source appended after the checkpoint's positions has a sequence
//! number at or above it: on startup the source reads the log from there and
//! moves each stream past the lines it finds, so a crash between an append
//! and the next checkpoint repeats nothing.
//!
//! Writing is crash-safe: the new contents go to `checkpoint.json.tmp`,
//! which is fsynced and renamed over the old file; then the directory is
//! fsynced. A damaged file is renamed to `checkpoint.json.damaged` for the
//! operator, reported, and the source rebuilds what it can from the log.
//!
//! The framing, the crash-safe store, the load and the setting aside of a
//! damaged file are the state-file kit's ([`StateFile`], `src/state_file.rs`),
//! which the `journald` source's checkpoint uses too (with its own magic
//! word and file name).

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

pub use crate::state_file::Loaded;
use crate::state_file::{SourceState, StateFile};

pub const FILE: &str = "checkpoint.json";
const TMP: &str = "checkpoint.json.tmp";
pub const DAMAGED: &str = "checkpoint.json.damaged";
const MAGIC: &str = "holdfast-file-checkpoint";
pub const VERSION: u32 = 1;

/// The last bytes read before a stream's position, kept for streams that no
/// longer have a file, so a copy of their file can be recognised.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tail {
    /// Offset just after the bytes.
    pub end: u64,
    /// The bytes, in hex.
    pub hex: String,
}

/// One stream (one generation of one file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(with = "hex64")]
    pub key: u64,
    pub generation: u32,
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    pub btime: Option<i64>,
    pub prefix_len: u32,
    #[serde(with = "hex64")]
    pub prefix_hash: u64,
    /// Lines before this offset are in the log.
    pub offset: u64,
    /// Set when the file is no longer found (deleted, rotated out of the
    /// globs, or truncated away): unix milliseconds since when.
    pub detached_unix_ms: Option<u64>,
    /// Set while the file is drained after it left the globs (renamed out
    /// of them or deleted) and is not finished yet: unix milliseconds since
    /// when. A record without `detached_unix_ms` is a file not finished;
    /// after a restart it is looked for by device and inode in the
    /// directory of `path` if the globs no longer find it, and read to its
    /// end. Absent in checkpoints written before it existed (read as not
    /// rotated: the first scan finds out).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_unix_ms: Option<u64>,
    pub tail: Option<Tail>,
    /// Spans (`offset..end`, sorted, past `offset`) of lines that are in
    /// the log although lines before them are not: an append refused
    /// because the log was full was overtaken by a later one, and the
    /// source stopped before the refused one landed. The lines between are
    /// read again; these are skipped. Kept until `offset` passes them, as
    /// later checkpoints' `log_seq` no longer reaches back to them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ahead: Vec<(u64, u64)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub source: String,
    pub log_seq: u64,
    pub written_unix_ms: u64,
    pub records: Vec<Record>,
}

mod hex64 {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format!("{v:016x}"))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        let s = String::deserialize(d)?;
        u64::from_str_radix(&s, 16).map_err(serde::de::Error::custom)
    }
}

pub fn to_hex(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push_str(&format!("{b:02x}"));
    }
    s
}

pub fn from_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl SourceState for Checkpoint {
    fn source(&self) -> &str {
        &self.source
    }
}

/// The `file` source's checkpoint.
pub const STATE: StateFile = StateFile {
    file: FILE,
    tmp: TMP,
    damaged: DAMAGED,
    magic: MAGIC,
    version: VERSION,
};

/// The bytes of a checkpoint file.
pub fn encode(ck: &Checkpoint) -> Vec<u8> {
    STATE.encode(ck)
}

/// Parses and checks a checkpoint file's bytes.
pub fn decode(bytes: &[u8], source: &str) -> Result<Checkpoint, String> {
    STATE.decode(bytes, source)
}

/// Reads the checkpoint in `dir` (see [`StateFile::load`]).
pub fn load(dir: &Path, source: &str) -> io::Result<Loaded<Checkpoint>> {
    STATE.load(dir, source)
}

/// Writes the checkpoint crash-safely (see the module doc).
pub fn save(dir: &Path, ck: &Checkpoint) -> io::Result<()> {
    STATE.save(dir, ck)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    fn sample() -> Checkpoint {
        Checkpoint {
            source: "app".into(),
            log_seq: 42,
            written_unix_ms: 1,
            records: vec![Record {
                key: 0xdead_beef_0000_0001,
                generation: 2,
                path: "/var/log/app.log".into(),
                dev: 1,
                ino: 2,
                btime: Some(3),
                prefix_len: 1024,
                prefix_hash: 7,
                offset: 99,
                detached_unix_ms: None,
                rotated_unix_ms: Some(5),
                tail: Some(Tail {
                    end: 99,
                    hex: to_hex(b"ab\n"),
                }),
                ahead: vec![(120, 180), (200, 210)],
            }],
        }
    }

    #[test]
    fn round_trip_and_hex() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("checkpoints").join("app");
        assert!(matches!(load(&d, "app").unwrap(), Loaded::Missing));
        save(&d, &sample()).unwrap();
        save(&d, &sample()).unwrap();
        match load(&d, "app").unwrap() {
            Loaded::Found(ck) => assert_eq!(ck, sample()),
            other => panic!("{other:?}"),
        }
        assert!(!d.join(TMP).exists());
        assert_eq!(
            from_hex(&to_hex(&[0, 1, 254, 255])).unwrap(),
            vec![0, 1, 254, 255]
        );
        assert_eq!(from_hex("abc"), None);
        assert_eq!(from_hex("zz"), None);
    }

    /// A checkpoint written before records knew whether their file was
    /// being drained loads, as not rotated; one written now keeps the field.
    #[test]
    fn checkpoints_without_rotated_unix_ms_load() {
        let mut ck = sample();
        ck.records[0].rotated_unix_ms = None;
        let body = serde_json::to_string(&ck).unwrap();
        assert!(!body.contains("rotated_unix_ms"), "{body}");
        let old = format!(
            "{MAGIC} v1 crc32={:08x} len={}\n{body}",
            crc32fast::hash(body.as_bytes()),
            body.len()
        );
        assert_eq!(decode(old.as_bytes(), "app").unwrap(), ck);
        let now = encode(&sample());
        assert!(String::from_utf8_lossy(&now).contains("\"rotated_unix_ms\":5"));
        assert_eq!(decode(&now, "app").unwrap(), sample());
    }

    /// Every kind of damage is reported with its reason, and the file is
    /// moved aside rather than trusted.
    #[test]
    fn damage_is_detected_and_named() {
        let good = encode(&sample());
        let nl = good.iter().position(|&b| b == b'\n').unwrap();
        let mut flipped = good.clone();
        flipped[nl + 10] ^= 0x01;
        let cut = good[..good.len() - 5].to_vec();
        let mut v2 = good.clone();
        v2[MAGIC.len() + 2] = b'2';
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (flipped, "checksum mismatch"),
            (cut, "header says"),
            (v2, "version 2 is not supported"),
            (b"garbage".to_vec(), "no header line"),
            (Vec::new(), "no header line"),
            (b"something else v1\n{}".to_vec(), "does not start with"),
        ];
        for (bytes, want) in cases {
            let err = decode(&bytes, "app").unwrap_err();
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
        assert!(decode(&good, "other")
            .unwrap_err()
            .contains("belongs to source"));

        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let mut bytes = good.clone();
        bytes[nl + 3] ^= 0x20;
        fs::write(d.join(FILE), &bytes).unwrap();
        match load(d, "app").unwrap() {
            Loaded::Damaged { reason, moved_to } => {
                assert!(reason.contains("checksum"), "{reason}");
                assert_eq!(fs::read(moved_to).unwrap(), bytes);
            }
            other => panic!("{other:?}"),
        }
        assert!(!d.join(FILE).exists());
    }
}
