//! The checksummed state file: how a component keeps a small piece of state
//! (a `file` source's checkpoint, a `journald` source's cursor) so that a
//! crash or a power cut leaves the old version or the new one, and damage
//! is recognised, never trusted.
//!
//! ```text
//! <magic> v<version> crc32=<8 hex digits> len=<body bytes>
//! {"source":"app", ...the state as JSON...}
//! ```
//!
//! The header line carries the format version, the CRC-32 and the length of
//! the JSON body that follows; the body is JSON so an operator can read it,
//! and it names its source, so a file copied from another source's
//! directory is refused. Writing goes to a temporary file, which is
//! `fdatasync`ed and renamed over the old one; then the directory is
//! synced ([`replace`]). A damaged file is renamed to its `damaged` name
//! for the operator and reported ([`Loaded::Damaged`]).
//!
//! Every write, sync and rename goes through the log's file-system seam
//! ([`Fs`], `seglog/io.rs`), as does [`create_whole`], the crash-safe
//! writer of the quarantine's files. Imports only `seglog`.

use std::fs::OpenOptions;
use std::io::{self, IoSlice};
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::seglog::{create_private_dir_all, Fs};

/// Far above any real state file (a `file` source's checkpoint of 10,000
/// files makes about 3 MiB); a header claiming more is damage, not a reason
/// to allocate.
const MAX_BODY: usize = 256 << 20;

/// What was found on disk.
#[derive(Debug)]
pub enum Loaded<T> {
    /// No checkpoint: a first start (or one deleted by hand).
    Missing,
    Found(T),
    /// A checkpoint that cannot be trusted; why, and where it was moved.
    Damaged {
        reason: String,
        moved_to: PathBuf,
    },
}

/// A checksummed state file of one source: a header line (`magic`, format
/// version, CRC-32 and length of the body), then the state as JSON, so a
/// damaged or cut file is recognised and never trusted, and an operator can
/// read it.
#[derive(Debug, Clone, Copy)]
pub struct StateFile {
    /// The file's name in the source's checkpoint directory.
    pub file: &'static str,
    /// Where the next version is written before it is renamed over `file`.
    pub tmp: &'static str,
    /// Where a damaged file is moved for the operator.
    pub damaged: &'static str,
    pub magic: &'static str,
    pub version: u32,
}

/// A source's state: it names its source, so that a file copied from
/// another source's directory is not trusted.
pub trait SourceState: Serialize + DeserializeOwned {
    fn source(&self) -> &str;
}

impl StateFile {
    /// The bytes of the file holding `state`.
    pub fn encode<T: SourceState>(&self, state: &T) -> Vec<u8> {
        let body = serde_json::to_vec(state).expect("a checkpoint always serializes");
        let mut out = format!(
            "{} v{} crc32={:08x} len={}\n",
            self.magic,
            self.version,
            crc32fast::hash(&body),
            body.len()
        )
        .into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// Parses and checks a file's bytes.
    pub fn decode<T: SourceState>(&self, bytes: &[u8], source: &str) -> Result<T, String> {
        let magic = self.magic;
        let nl = bytes
            .iter()
            .position(|&b| b == b'\n')
            .filter(|&n| n < 200)
            .ok_or("no header line")?;
        let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| "header is not text")?;
        let mut words = header.split(' ');
        if words.next() != Some(magic) {
            return Err(format!("header {header:?} does not start with {magic}"));
        }
        let version = words
            .next()
            .and_then(|v| v.strip_prefix('v'))
            .and_then(|v| v.parse::<u32>().ok())
            .ok_or_else(|| format!("header {header:?} has no version"))?;
        if version != self.version {
            return Err(format!(
                "format version {version} is not supported (this holdfast reads version {})",
                self.version
            ));
        }
        let crc = words
            .next()
            .and_then(|w| w.strip_prefix("crc32="))
            .and_then(|w| u32::from_str_radix(w, 16).ok())
            .ok_or_else(|| format!("header {header:?} has no crc32"))?;
        let len = words
            .next()
            .and_then(|w| w.strip_prefix("len="))
            .and_then(|w| w.parse::<usize>().ok())
            .filter(|&l| l <= MAX_BODY)
            .ok_or_else(|| format!("header {header:?} has no valid len"))?;
        let body = &bytes[nl + 1..];
        if body.len() != len {
            return Err(format!("body is {} bytes, header says {len}", body.len()));
        }
        let actual = crc32fast::hash(body);
        if actual != crc {
            return Err(format!(
                "checksum mismatch: header says {crc:08x}, body has {actual:08x}"
            ));
        }
        let state: T = serde_json::from_slice(body).map_err(|e| format!("body: {e}"))?;
        if state.source() != source {
            return Err(format!(
                "it belongs to source {:?}, not {source:?}",
                state.source()
            ));
        }
        Ok(state)
    }

    /// Reads the file in `dir`. A damaged one is moved aside and reported
    /// in the result; only I/O errors (other than its absence) are errors.
    pub fn load<T: SourceState>(&self, dir: &Path, source: &str) -> io::Result<Loaded<T>> {
        let path = dir.join(self.file);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
            Err(e) => return Err(e),
        };
        match self.decode(&bytes, source) {
            Ok(state) => Ok(Loaded::Found(state)),
            Err(reason) => {
                let moved_to = dir.join(self.damaged);
                let fs = Fs::default();
                fs.rename(&path, &moved_to)?;
                fs.sync_dir(dir)?;
                Ok(Loaded::Damaged { reason, moved_to })
            }
        }
    }

    /// [`StateFile::load`] on a blocking thread, for a source starting: the
    /// error names the source and the directory.
    pub async fn load_at_start<T: SourceState + Send + 'static>(
        &'static self,
        dir: &Path,
        source: &str,
    ) -> anyhow::Result<Loaded<T>> {
        let (d, s) = (dir.to_path_buf(), source.to_string());
        let loaded = tokio::task::spawn_blocking(move || self.load(&d, &s)).await?;
        anyhow::Context::with_context(loaded, || {
            format!(
                "source {source}: reading the checkpoint in {}",
                dir.display()
            )
        })
    }

    /// Writes the file crash-safely (see the module doc).
    pub fn save<T: SourceState>(&self, dir: &Path, state: &T) -> io::Result<()> {
        self.save_through(&Fs::default(), dir, state)
    }

    /// [`StateFile::save`] through `fs` (a test's hook sees each step).
    pub fn save_through<T: SourceState>(&self, fs: &Fs, dir: &Path, state: &T) -> io::Result<()> {
        if !dir.exists() {
            create_private_dir_all(dir)?;
            if let Some(parent) = dir.parent() {
                fs.sync_dir(parent)?;
            }
        }
        replace(
            fs,
            dir,
            self.tmp,
            self.file,
            &self.encode(state),
            Sync::Durable,
        )
    }
}

/// Whether a [`replace`] must survive a power cut, or only a crash of the
/// process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// The file's data synced before the rename, the directory after it.
    Durable,
    /// Nothing synced: the old file or the new after a crash of the
    /// process; after a power cut, possibly neither.
    ProcessCrash,
}

/// Writes `bytes` to `dir/tmp` (private; a leftover from an earlier try
/// is overwritten), then renames it over `dir/file`, so a reader finds the
/// old contents or the new, never a mix.
pub fn replace(
    fs: &Fs,
    dir: &Path,
    tmp: &str,
    file: &str,
    bytes: &[u8],
    sync: Sync,
) -> io::Result<()> {
    let (tmp, path) = (dir.join(tmp), dir.join(file));
    let tmp = tmp.as_path();
    let mut f = fs.create(
        OpenOptions::new().write(true).create(true).truncate(true),
        tmp,
    )?;
    fs.write_all(&mut f, tmp, 0, &mut [IoSlice::new(bytes)])?;
    if sync == Sync::Durable {
        fs.sync_data(&f, tmp)?;
    }
    drop(f);
    fs.rename(tmp, &path)?;
    match sync {
        Sync::Durable => fs.sync_dir(dir),
        Sync::ProcessCrash => Ok(()),
    }
}

/// Writes `bytes` as the new file `dir/file`, durably: through `dir/tmp`,
/// which must not exist and is removed again if the write or its sync
/// fails, so a failure leaves nothing behind; then renamed and the
/// directory synced. Returns the new file's path.
pub fn create_whole(
    fs: &Fs,
    dir: &Path,
    tmp: &str,
    file: &str,
    bytes: &[u8],
) -> io::Result<PathBuf> {
    let (tmp, path) = (dir.join(tmp), dir.join(file));
    let tmp = tmp.as_path();
    let mut f = fs.create(OpenOptions::new().write(true).create_new(true), tmp)?;
    let r = fs
        .write_all(&mut f, tmp, 0, &mut [IoSlice::new(bytes)])
        .and_then(|()| fs.sync_data(&f, tmp));
    if let Err(e) = r {
        let _ = std::fs::remove_file(tmp);
        return Err(e);
    }
    drop(f);
    fs.rename(tmp, &path)?;
    fs.sync_dir(dir)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seglog::{IoHook, IoOp};
    use serde::Deserialize;
    use std::sync::{Arc, Mutex};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Note {
        source: String,
        n: u32,
    }

    impl SourceState for Note {
        fn source(&self) -> &str {
            &self.source
        }
    }

    const NOTE: StateFile = StateFile {
        file: "note.json",
        tmp: "note.json.tmp",
        damaged: "note.json.damaged",
        magic: "holdfast-test-note",
        version: 1,
    };

    /// Records each operation's kind and file name; fails data syncs
    /// while `fail_sync` is set.
    #[derive(Debug, Default)]
    struct Steps {
        seen: Mutex<Vec<String>>,
        fail_sync: Mutex<bool>,
    }

    impl IoHook for Steps {
        fn before(&self, op: &IoOp<'_>) -> io::Result<()> {
            let name = |p: &Path| p.file_name().unwrap().to_string_lossy().into_owned();
            let step = match *op {
                IoOp::Create { path } => format!("create {}", name(path)),
                IoOp::Write { path, .. } => format!("write {}", name(path)),
                IoOp::SyncData { path } => {
                    if *self.fail_sync.lock().unwrap() {
                        return Err(io::Error::from_raw_os_error(5)); // EIO
                    }
                    format!("sync {}", name(path))
                }
                IoOp::Rename { from, to } => format!("rename {} {}", name(from), name(to)),
                IoOp::SyncDir { .. } => "sync dir".to_string(),
                IoOp::Remove { path } => format!("remove {}", name(path)),
                IoOp::SetLen { path, .. } => format!("set_len {}", name(path)),
            };
            self.seen.lock().unwrap().push(step);
            Ok(())
        }
    }

    /// The save's steps, in the order that makes it crash-safe, all
    /// through the seam; a failed sync leaves the previous version whole.
    #[test]
    fn a_save_goes_through_the_seam_and_a_failed_sync_keeps_the_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let steps = Arc::new(Steps::default());
        let fs = Fs::new(Some(steps.clone()));
        let old = Note {
            source: "a".into(),
            n: 1,
        };
        NOTE.save_through(&fs, d, &old).unwrap();
        assert_eq!(
            *steps.seen.lock().unwrap(),
            [
                "create note.json.tmp",
                "write note.json.tmp",
                "sync note.json.tmp",
                "rename note.json.tmp note.json",
                "sync dir",
            ]
        );
        *steps.fail_sync.lock().unwrap() = true;
        let new = Note {
            source: "a".into(),
            n: 2,
        };
        assert!(NOTE.save_through(&fs, d, &new).is_err());
        match NOTE.load::<Note>(d, "a").unwrap() {
            Loaded::Found(n) => assert_eq!(n, old),
            other => panic!("{other:?}"),
        }
    }

    /// A new file that cannot be synced leaves nothing behind, not even
    /// its temporary file.
    #[test]
    fn create_whole_leaves_nothing_when_it_fails() {
        let dir = tempfile::tempdir().unwrap();
        let steps = Arc::new(Steps::default());
        *steps.fail_sync.lock().unwrap() = true;
        let fs = Fs::new(Some(steps));
        assert!(create_whole(&fs, dir.path(), ".tmp-x", "x", b"lines\n").is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let path = create_whole(&Fs::default(), dir.path(), ".tmp-x", "x", b"lines\n").unwrap();
        assert_eq!(std::fs::read(path).unwrap(), b"lines\n");
    }
}
