//! The `journald` source's checkpoint: the journal cursor of the last entry
//! whose append is durable, and where in the log the entries after it can
//! start.
//!
//! One file, `<data_dir>/checkpoints/<source>/journald.json`, two lines:
//!
//! ```text
//! {"v":1,"source":"journal","cursor":"s=…;i=…","log_seq":4711,"written_unix_ms":…}
//! crc32=1c291ca3
//! ```
//!
//! The second line is the CRC-32 of the first (without its newline), so a
//! cut or damaged file is recognised, moved to `journald.json.damaged` and
//! reported, never trusted. Written crash-safely: a temporary file,
//! `fdatasync`, rename, directory sync.
//!
//! `log_seq` is the end of the append that held the entry at `cursor`:
//! every entry after it that reached the log has a sequence number at or
//! above it (the source has one append in flight at a time), so on start
//! the source reads the log from there and skips the entries it finds (by
//! id) instead of appending them again.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub const FILE: &str = "journald.json";
const TMP: &str = "journald.json.tmp";
pub const DAMAGED: &str = "journald.json.damaged";
const VERSION: u32 = 1;
/// A checkpoint is a few hundred bytes; more is not one.
const MAX_LEN: u64 = 64 << 10;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub v: u32,
    pub source: String,
    /// `__CURSOR` of the last entry in the log.
    pub cursor: String,
    pub log_seq: u64,
    pub written_unix_ms: u64,
}

impl Checkpoint {
    pub fn new(source: &str, cursor: String, log_seq: u64) -> Checkpoint {
        Checkpoint {
            v: VERSION,
            source: source.to_string(),
            cursor,
            log_seq,
            written_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }
}

#[derive(Debug)]
pub enum Loaded {
    Missing,
    Found(Checkpoint),
    Damaged { reason: String, moved_to: PathBuf },
}

pub fn encode(ck: &Checkpoint) -> Vec<u8> {
    let mut out = serde_json::to_vec(ck).expect("a checkpoint always serializes");
    let crc = crc32fast::hash(&out);
    out.extend_from_slice(format!("\ncrc32={crc:08x}\n").as_bytes());
    out
}

pub fn decode(bytes: &[u8], source: &str) -> Result<Checkpoint, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not text".to_string())?;
    let (body, rest) = text.split_once('\n').ok_or("no checksum line")?;
    let want = rest
        .trim_end_matches('\n')
        .strip_prefix("crc32=")
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or("no valid checksum line")?;
    let have = crc32fast::hash(body.as_bytes());
    if have != want {
        return Err(format!(
            "checksum mismatch: the file says {want:08x}, its body has {have:08x}"
        ));
    }
    let ck: Checkpoint = serde_json::from_str(body).map_err(|e| format!("body: {e}"))?;
    if ck.v != VERSION {
        return Err(format!(
            "format version {} is not supported (this holdfast reads {VERSION})",
            ck.v
        ));
    }
    if ck.source != source {
        return Err(format!(
            "it belongs to source {:?}, not {source:?}",
            ck.source
        ));
    }
    Ok(ck)
}

/// Reads the checkpoint in `dir`; a damaged one is moved aside.
pub fn load(dir: &Path, source: &str) -> io::Result<Loaded> {
    let path = dir.join(FILE);
    let bytes = match File::open(&path) {
        Ok(f) => {
            let mut b = Vec::new();
            io::Read::read_to_end(&mut io::Read::take(f, MAX_LEN), &mut b)?;
            b
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(e) => return Err(e),
    };
    match decode(&bytes, source) {
        Ok(ck) => Ok(Loaded::Found(ck)),
        Err(reason) => {
            let moved_to = dir.join(DAMAGED);
            fs::rename(&path, &moved_to)?;
            File::open(dir)?.sync_all()?;
            Ok(Loaded::Damaged { reason, moved_to })
        }
    }
}

/// Writes the checkpoint durably (see the module doc).
pub fn save(dir: &Path, ck: &Checkpoint) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(TMP);
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(&tmp)?;
    f.write_all(&encode(ck))?;
    f.sync_data()?;
    drop(f);
    fs::rename(&tmp, dir.join(FILE))?;
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("journal");
        assert!(matches!(load(&d, "journal").unwrap(), Loaded::Missing));
        let ck = Checkpoint::new("journal", "s=ab;i=1f".into(), 42);
        save(&d, &ck).unwrap();
        match load(&d, "journal").unwrap() {
            Loaded::Found(got) => assert_eq!(got, ck),
            other => panic!("{other:?}"),
        }
        let good = encode(&ck);
        let mut flipped = good.clone();
        flipped[10] ^= 1;
        for (bytes, want) in [
            (flipped, "checksum mismatch"),
            (good[..good.len() - 4].to_vec(), "checksum"),
            (b"".to_vec(), "no checksum line"),
            (vec![0xff, b'\n'], "not text"),
        ] {
            let err = decode(&bytes, "journal").unwrap_err();
            assert!(err.contains(want), "{err} should contain {want}");
        }
        assert!(decode(&good, "other").unwrap_err().contains("belongs to"));
        fs::write(d.join(FILE), &good[..20]).unwrap();
        match load(&d, "journal").unwrap() {
            Loaded::Damaged { moved_to, .. } => assert!(moved_to.ends_with(DAMAGED)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(load(&d, "journal").unwrap(), Loaded::Missing));
    }
}
