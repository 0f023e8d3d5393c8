/*!
The quarantine: where a sink puts events a receiver rejected for good, so
that they stop blocking the queue without being lost (`DESIGN.md` promise 7).

# On disk

```text
<data_dir>/quarantine/                 0700
  <sink>/                              0700, one directory per sink
    q-<unix ms>-<pid>-<n>.ndjson       0600, one file per write
    replay/                            0700, the replay inbox (see below)
      r-<unix ms>-<pid>-<n>.ndjson     0600
```

Each file holds one JSON object per line, a [`Record`]: the original event
bytes (base64, exactly as they were in the log), its id, source, position
(sequence number; file path and offset for file events), the sink, the
reason, the receiver's status and error text, the attempts, the holdfast
version, a hash of the config, and the time. Records are not sanitized, so
the directories are 0700 and the files 0600.

A file is written whole, crash-safely: a temporary `.tmp-*` file, `fsync`,
rename, `fsync` of the directory. Only then does the sink count the events
as finished and let its cursor pass them: an event is always in the log, in
the quarantine, or delivered. The daemon only ever creates files here;
`holdfast quarantine replay | purge` rewrite or remove them, so the two
never write the same file.

# Bounds

Each sink's quarantine holds at most its `quarantine.max_bytes` (the inbox
not counted). When a write would pass it, the sink re-measures the
directory (an operator may have purged) and then, under `when_full =
"block"`, keeps the rejected events unfinished: its cursor stops there and
`holdfast_sink_quarantine_full` is 1 until there is room; under `"drop"`,
they are dropped and counted in `holdfast_dropped_events_total{reason=
"quarantine_full"}`.

# Replay

The daemon holds the log's lock, so a tool cannot append to the log while
it runs, and appending would send the events to every sink anyway. Replay
therefore goes through the sink's own inbox: `holdfast quarantine replay`
moves the chosen records into `replay/` (writing the inbox file first, then
removing them from the quarantine files, so a crash in between leaves a
record in both places: sent twice, with the same id, never lost). The sink
reads the inbox when it starts and every `replay_scan_interval` while it
runs, sends those events ahead of the log's, with their original ids, and
deletes an inbox file once every event in it is finished (delivered, or
quarantined again). With the daemon stopped, the files simply wait for the
next start.
*/

use std::fs::{self, DirBuilder, File};
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::quarantine_options::{QuarantineFull, QuarantineOptions};
use crate::event::Stored;
use crate::seglog::{sync_dir, Fs};
use crate::state_file;

/// The version of the record layout.
pub const FORMAT_VERSION: u32 = 1;
pub(crate) const QUARANTINE_PREFIX: &str = "q-";
pub(crate) const INBOX_PREFIX: &str = "r-";
const SUFFIX: &str = ".ndjson";
pub(crate) const INBOX: &str = "replay";

/// How long a sink waits before trying a full quarantine again (or its
/// `backoff_max`, if shorter).
pub(crate) const FULL_RETRY: Duration = Duration::from_secs(5);

/// One quarantined event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// [`FORMAT_VERSION`].
    pub v: u32,
    pub sink: String,
    /// The event id, 32 hex digits.
    pub id: String,
    /// Where the event was in the log.
    pub seq: Option<u64>,
    /// Its source, signal and file position (stored as fields of the
    /// record itself).
    #[serde(flatten)]
    pub about: EventInfo,
    /// A short label (`rejected`, `partially_rejected`, `retries_exhausted`,
    /// `too_large`, `invalid_event`), the `reason` label of the metrics.
    pub kind: String,
    /// The reason in words.
    pub reason: String,
    /// The receiver's status for this event, if it gave one.
    pub status: Option<u16>,
    /// The receiver's error text.
    pub error: String,
    /// Times the event was sent.
    pub attempts: u32,
    pub holdfast_version: String,
    pub config_hash: String,
    /// When it was quarantined, RFC 3339.
    pub time: String,
    /// The same, unix milliseconds (for filters).
    pub time_ms: u64,
    /// The event as a whole (format-1) envelope, base64: its bytes as
    /// stored in a format-1 log; a format-2 event is stored rebuilt whole,
    /// so that the record needs no batch context; an event that could not
    /// be decoded keeps its own bytes as read.
    #[serde(with = "b64")]
    pub event: Vec<u8>,
}

/// What a record says of its event besides the event's bytes, taken from
/// the event itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventInfo {
    pub source: String,
    pub signal: String,
    /// For file events: the file and the byte offset of the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FilePosition>,
}

/// A file event's place in its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilePosition {
    pub path: String,
    pub offset: u64,
}

mod b64 {
    use base64::Engine;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(v))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let s = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(s)
            .map_err(serde::de::Error::custom)
    }
}

impl EventInfo {
    pub fn of(ev: &Stored) -> EventInfo {
        EventInfo {
            source: ev.source().to_string(),
            signal: ev.signal().map_or("unknown", |s| s.as_str()).to_string(),
            file: ev.origin().map(|o| FilePosition {
                path: o.path.to_string(),
                offset: o.offset,
            }),
        }
    }

    /// An event that could not be decoded.
    pub fn unknown() -> EventInfo {
        EventInfo {
            source: String::new(),
            signal: "unknown".into(),
            file: None,
        }
    }
}

/// The time now in unix milliseconds and as RFC 3339.
pub(crate) fn now() -> (u64, String) {
    let t = SystemTime::now();
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    (ms, humantime::format_rfc3339_millis(t).to_string())
}

/// Creates `dir` (and missing parents) private to this user, and makes an
/// existing one private too.
pub(crate) fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new file name: time, process and a counter, so names never repeat.
fn new_name(prefix: &str) -> String {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    format!(
        "{prefix}{ms:013}-{}-{}{SUFFIX}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Writes `lines` as a new file in `dir`, crash-safely, mode 0600.
pub(crate) fn write_file(dir: &Path, prefix: &str, lines: &[u8]) -> io::Result<PathBuf> {
    let name = new_name(prefix);
    state_file::create_whole(&Fs::default(), dir, &format!(".tmp-{name}"), &name, lines)
}

pub(crate) fn encode_lines(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        // A record of strings, numbers and bytes always serializes.
        if serde_json::to_writer(&mut out, r).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

/// The entries of `dir`; none when it does not exist (nothing was
/// quarantined there yet).
pub(crate) fn dir_entries(dir: &Path) -> io::Result<Vec<fs::DirEntry>> {
    match fs::read_dir(dir) {
        Ok(entries) => entries.collect(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Files in `dir` whose names start with `prefix`, oldest first.
pub(crate) fn files(dir: &Path, prefix: &str) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in dir_entries(dir)? {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(prefix) && name.ends_with(SUFFIX) {
            out.push(entry.path());
        }
    }
    out.sort();
    Ok(out)
}

fn dir_bytes(dir: &Path) -> io::Result<u64> {
    let mut total = 0;
    for f in files(dir, QUARANTINE_PREFIX)? {
        total += fs::metadata(&f).map_or(0, |m| m.len());
    }
    Ok(total)
}

/// Why a write did not happen.
#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("the quarantine {dir} is full ({used} of {max} bytes used, {needed} more needed)")]
    Full {
        dir: PathBuf,
        used: u64,
        max: u64,
        needed: u64,
    },
    #[error("writing to the quarantine {dir}: {source}")]
    Io { dir: PathBuf, source: io::Error },
}

/// One sink's quarantine, as the running sink uses it.
#[derive(Debug)]
pub(crate) struct Quarantine {
    dir: PathBuf,
    inbox: PathBuf,
    max_bytes: u64,
    pub when_full: QuarantineFull,
    /// Bytes of quarantine files, as last measured plus what this process
    /// wrote since. Held while writing, so writes are one at a time.
    used: Mutex<u64>,
}

impl Quarantine {
    /// Opens (creating, private) the sink's quarantine directory and inbox.
    pub fn open(opts: &QuarantineOptions) -> anyhow::Result<Quarantine> {
        let dir = opts.dir.clone();
        let inbox = dir.join(INBOX);
        private_dir(&inbox)
            .with_context(|| format!("creating the quarantine directory {}", inbox.display()))?;
        private_dir(&dir)
            .with_context(|| format!("creating the quarantine directory {}", dir.display()))?;
        if let Some(root) = dir.parent() {
            private_dir(root)
                .with_context(|| format!("creating the quarantine directory {}", root.display()))?;
        }
        let used = dir_bytes(&dir)
            .with_context(|| format!("measuring the quarantine {}", dir.display()))?;
        Ok(Quarantine {
            dir,
            inbox,
            max_bytes: opts.max_bytes,
            when_full: opts.when_full,
            used: Mutex::new(used),
        })
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn used_bytes(&self) -> u64 {
        *self.used.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes `records` durably as one file, or fails with
    /// [`WriteError::Full`] without writing anything. Blocking.
    pub fn write(&self, records: &[Record]) -> Result<PathBuf, WriteError> {
        let lines = encode_lines(records);
        let mut used = self.used.lock().unwrap_or_else(|p| p.into_inner());
        let needed = lines.len() as u64;
        if *used + needed > self.max_bytes {
            // An operator may have purged since we last looked.
            *used = dir_bytes(&self.dir).map_err(|source| WriteError::Io {
                dir: self.dir.clone(),
                source,
            })?;
            if *used + needed > self.max_bytes {
                return Err(WriteError::Full {
                    dir: self.dir.clone(),
                    used: *used,
                    max: self.max_bytes,
                    needed,
                });
            }
        }
        let path =
            write_file(&self.dir, QUARANTINE_PREFIX, &lines).map_err(|source| WriteError::Io {
                dir: self.dir.clone(),
                source,
            })?;
        *used += needed;
        Ok(path)
    }

    /// Inbox files waiting to be replayed, oldest first.
    pub fn inbox_files(&self) -> io::Result<Vec<PathBuf>> {
        files(&self.inbox, INBOX_PREFIX)
    }

    /// Removes a replayed inbox file once all its events are finished.
    pub fn finish_inbox_file(&self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)?;
        sync_dir(&self.inbox)
    }
}

/// Reads the records of one file; lines that are not records (not JSON,
/// not a record, not even UTF-8) are returned as errors with their line
/// number, never trusted, and never hide the records around them.
pub fn read_records(path: &Path) -> io::Result<Vec<Result<Record, String>>> {
    let f = File::open(path)?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).split(b'\n').enumerate() {
        let line = line?;
        let line = line.strip_suffix(b"\r").unwrap_or(&line);
        let not_a_record = |e: &dyn std::fmt::Display| {
            format!("{}:{}: not a quarantine record: {e}", path.display(), i + 1)
        };
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                out.push(Err(not_a_record(&e)));
                continue;
            }
        };
        if text.trim().is_empty() {
            continue;
        }
        out.push(serde_json::from_str::<Record>(text).map_err(|e| not_a_record(&e)));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod testing {
    //! Records and quarantines for the tests here and in `crate::cli`.
    use super::*;

    pub(crate) fn record(sink: &str, id: &str, kind: &str, ms: u64) -> Record {
        Record {
            v: FORMAT_VERSION,
            sink: sink.into(),
            id: id.into(),
            seq: Some(7),
            about: EventInfo {
                source: "syslog".into(),
                signal: "logs".into(),
                file: None,
            },
            kind: kind.into(),
            reason: format!("because {kind}"),
            status: Some(400),
            error: "mapper_parsing_exception".into(),
            attempts: 1,
            holdfast_version: "0.1.0".into(),
            config_hash: "abc".into(),
            time: "2024-05-01T00:00:00.000Z".into(),
            time_ms: ms,
            event: vec![1, 2, 3],
        }
    }

    /// A fresh quarantine root in a temporary directory (removed when the
    /// returned guard drops).
    pub(crate) fn temp_root() -> (tempfile::TempDir, std::path::PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("quarantine");
        (tmp, root)
    }

    pub(crate) fn open(root: &Path, sink: &str, max: u64) -> Quarantine {
        Quarantine::open(&QuarantineOptions {
            dir: root.join(sink),
            max_bytes: max,
            when_full: QuarantineFull::Block,
        })
        .unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{open, record, temp_root};
    use super::*;

    /// One line that is not UTF-8 once made the whole file unreadable
    /// (`lines()` fails on it), hiding the records around it.
    #[test]
    fn a_line_that_is_not_utf8_hides_no_record() {
        let tmp = tempfile::tempdir().unwrap();
        let r = record("es", "aa", "rejected", 1);
        let line = serde_json::to_string(&r).unwrap();
        let path = tmp.path().join("mixed.ndjson");
        let mut body = format!("{line}\r\n\n").into_bytes();
        body.extend_from_slice(b"\xff\xfe\n");
        body.extend_from_slice(line.as_bytes());
        fs::write(&path, body).unwrap();
        let got = read_records(&path).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().unwrap(), &r);
        assert!(got[1]
            .as_ref()
            .unwrap_err()
            .contains(":3: not a quarantine record"));
        assert_eq!(got[2].as_ref().unwrap(), &r);
    }

    #[test]
    fn records_are_private_durable_files_that_round_trip() {
        let (_tmp, root) = temp_root();
        let q = open(&root, "es", 1 << 20);
        let path = q.write(&[record("es", "aa", "rejected", 1)]).unwrap();
        let mode = |p: &Path| fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&root), 0o700);
        assert_eq!(mode(&root.join("es")), 0o700);
        assert_eq!(mode(&root.join("es/replay")), 0o700);
        assert_eq!(mode(&path), 0o600);
        let back = read_records(&path).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!(
            back[0].as_ref().unwrap(),
            &record("es", "aa", "rejected", 1)
        );
        assert_eq!(q.used_bytes(), fs::metadata(&path).unwrap().len());
    }
}
