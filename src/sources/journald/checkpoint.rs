//! The `journald` source's checkpoint: the journal cursor of the last entry
//! whose append is durable, and where in the log the entries after it can
//! start.
//!
//! One file, `<data_dir>/checkpoints/<source>/journald.json`, framed, stored
//! and checked as the `file` source's checkpoint is
//! ([`StateFile`](crate::state_file::StateFile): a header
//! line with a CRC-32 and the length of the JSON body, a damaged file moved
//! to `journald.json.damaged` and reported, never trusted; written through a
//! temporary file, `fdatasync`, rename, directory sync):
//!
//! ```text
//! holdfast-journald-checkpoint v1 crc32=1c291ca3 len=112
//! {"source":"journal","cursor":"s=…;i=…","log_seq":4711,"written_unix_ms":…}
//! ```
//!
//! `log_seq` is the end of the append that held the entry at `cursor`:
//! every entry after it that reached the log has a sequence number at or
//! above it (the source has one append in flight at a time), so on start
//! the source reads the log from there and skips the entries it finds (by
//! id) instead of appending them again.

use serde::{Deserialize, Serialize};

pub use crate::state_file::Loaded;
use crate::state_file::{SourceState, StateFile};

pub const STATE: StateFile = StateFile {
    file: "journald.json",
    tmp: "journald.json.tmp",
    damaged: "journald.json.damaged",
    magic: "holdfast-journald-checkpoint",
    version: 1,
};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub source: String,
    /// The cursor of the last entry in the log (or skipped).
    pub cursor: String,
    pub log_seq: u64,
    pub written_unix_ms: u64,
}

impl SourceState for Checkpoint {
    fn source(&self) -> &str {
        &self.source
    }
}

impl Checkpoint {
    pub fn new(source: &str, cursor: String, log_seq: u64) -> Checkpoint {
        Checkpoint {
            source: source.to_string(),
            cursor,
            log_seq,
            written_unix_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shared framing with this source's magic word and file names
    /// (the framing's own cases are tested with the file source's).
    #[test]
    fn round_trip_and_damage() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("journal");
        let load = |d: &std::path::Path| STATE.load::<Checkpoint>(d, "journal").unwrap();
        assert!(matches!(load(&d), Loaded::Missing));
        let ck = Checkpoint::new("journal", "s=ab;i=1f".into(), 42);
        STATE.save(&d, &ck).unwrap();
        let good = std::fs::read(d.join("journald.json")).unwrap();
        assert!(good.starts_with(b"holdfast-journald-checkpoint v1 crc32="));
        match load(&d) {
            Loaded::Found(got) => assert_eq!(got, ck),
            other => panic!("{other:?}"),
        }
        let other = STATE.decode::<Checkpoint>(&good, "other").unwrap_err();
        assert!(other.contains("belongs to"), "{other}");
        // The file source's checkpoint is not this source's.
        let file_source = StateFile {
            magic: "holdfast-file-checkpoint",
            ..STATE
        };
        let file = file_source.encode(&ck);
        let err = STATE.decode::<Checkpoint>(&file, "journal").unwrap_err();
        assert!(err.contains("does not start with"), "{err}");
        std::fs::write(d.join(STATE.file), &good[..20]).unwrap();
        match load(&d) {
            Loaded::Damaged { moved_to, .. } => assert!(moved_to.ends_with(STATE.damaged)),
            other => panic!("{other:?}"),
        }
        assert!(matches!(load(&d), Loaded::Missing));
    }
}
