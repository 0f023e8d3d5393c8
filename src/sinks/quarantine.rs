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

use std::fs::{self, DirBuilder, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::options::{QuarantineFull, QuarantineOptions};
use crate::event::{Envelope, Stored};

/// The version of the record layout.
pub const FORMAT_VERSION: u32 = 1;
const QUARANTINE_PREFIX: &str = "q-";
const INBOX_PREFIX: &str = "r-";
const SUFFIX: &str = ".ndjson";
const INBOX: &str = "replay";

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
    pub source: String,
    pub signal: String,
    /// For file events: the file and the byte offset of the line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FilePosition>,
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

impl Record {
    /// Fills the fields that describe the event from the event itself.
    pub fn describe_event(&mut self, ev: &Stored) {
        self.source = ev.source().to_string();
        self.signal = ev.signal().map_or("unknown", |s| s.as_str()).to_string();
        self.file = ev.origin().map(|o| FilePosition {
            path: o.path.to_string(),
            offset: o.offset,
        });
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
fn private_dir(dir: &Path) -> io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
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
fn write_file(dir: &Path, prefix: &str, lines: &[u8]) -> io::Result<PathBuf> {
    let name = new_name(prefix);
    let tmp = dir.join(format!(".tmp-{name}"));
    let path = dir.join(&name);
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let r = f.write_all(lines).and_then(|_| f.sync_data());
    if let Err(e) = r {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    fs::rename(&tmp, &path)?;
    sync_dir(dir)?;
    Ok(path)
}

fn encode_lines(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        // A record of strings, numbers and bytes always serializes.
        if serde_json::to_writer(&mut out, r).is_ok() {
            out.push(b'\n');
        }
    }
    out
}

/// Files in `dir` whose names start with `prefix`, oldest first.
fn files(dir: &Path, prefix: &str) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
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

/// Reads the records of one file; lines that are not records are returned
/// as errors with their line number, never trusted.
pub fn read_records(path: &Path) -> io::Result<Vec<Result<Record, String>>> {
    let f = File::open(path)?;
    let mut out = Vec::new();
    for (i, line) in BufReader::new(f).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        out.push(
            serde_json::from_str::<Record>(&line)
                .map_err(|e| format!("{}:{}: not a quarantine record: {e}", path.display(), i + 1)),
        );
    }
    Ok(out)
}

// ---------------------------------------------------------------- operator tools

/// Which records an operator command applies to. Every field that is set
/// must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub sink: Option<String>,
    /// Matches the record's `kind` exactly, or a part of its `reason`.
    pub reason: Option<String>,
    /// Quarantined at or after this time (unix ms).
    pub since_ms: Option<u64>,
    /// Quarantined before this time (unix ms).
    pub until_ms: Option<u64>,
    /// The event id (32 hex digits).
    pub id: Option<String>,
}

impl Filter {
    pub fn matches(&self, r: &Record) -> bool {
        self.sink.as_ref().is_none_or(|s| &r.sink == s)
            && self
                .reason
                .as_ref()
                .is_none_or(|x| &r.kind == x || r.reason.contains(x.as_str()))
            && self.since_ms.is_none_or(|t| r.time_ms >= t)
            && self.until_ms.is_none_or(|t| r.time_ms < t)
            && self
                .id
                .as_ref()
                .is_none_or(|i| r.id.eq_ignore_ascii_case(i))
    }

    /// Whether no filter is set (every record matches).
    pub fn is_empty(&self) -> bool {
        self.sink.is_none()
            && self.reason.is_none()
            && self.since_ms.is_none()
            && self.until_ms.is_none()
            && self.id.is_none()
    }
}

/// Parses a time for `--since`/`--until`: an RFC 3339 time
/// (`2024-05-01T12:00:00Z`) or a duration ago (`2h`, `7d`).
pub fn parse_time(text: &str, now: SystemTime) -> Result<u64, String> {
    let t = text.trim();
    if let Ok(at) = humantime::parse_rfc3339_weak(t) {
        return Ok(at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64));
    }
    match humantime::parse_duration(t) {
        Ok(ago) => Ok(now
            .checked_sub(ago)
            .unwrap_or(UNIX_EPOCH)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)),
        Err(_) => Err(format!(
            "\"{text}\" is neither a time like 2024-05-01T12:00:00Z nor a duration like \"2h\""
        )),
    }
}

/// A record found by a scan, and where it is.
#[derive(Debug, Clone)]
pub struct Entry {
    pub file: PathBuf,
    /// Index among the file's lines that hold something.
    pub index: usize,
    pub record: Record,
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Matching records, oldest file first.
    pub entries: Vec<Entry>,
    /// Lines that are not records (reported, never touched).
    pub damaged: Vec<String>,
    /// Every quarantine file of the scanned sinks and their bytes, matching
    /// or not.
    pub files: u64,
    pub bytes: u64,
    /// Records in the sinks' replay inboxes, waiting to be sent.
    pub waiting_replay: u64,
}

/// The sink directories under `root` (`<data_dir>/quarantine`).
fn sink_dirs(root: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    let entries = match fs::read_dir(root) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for e in entries {
        let e = e?;
        if e.file_type()?.is_dir() {
            if let Some(name) = e.file_name().to_str() {
                out.push((name.to_string(), e.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// Finds the records matching `filter` in every sink's quarantine under
/// `root`.
pub fn scan(root: &Path, filter: &Filter) -> anyhow::Result<Scan> {
    let mut s = Scan::default();
    for (sink, dir) in sink_dirs(root).with_context(|| format!("listing {}", root.display()))? {
        if filter.sink.as_ref().is_some_and(|f| f != &sink) {
            continue;
        }
        for inbox in files(&dir.join(INBOX), INBOX_PREFIX)? {
            s.waiting_replay += read_records(&inbox)?.len() as u64;
        }
        for path in
            files(&dir, QUARANTINE_PREFIX).with_context(|| format!("listing {}", dir.display()))?
        {
            s.files += 1;
            s.bytes += fs::metadata(&path).map_or(0, |m| m.len());
            let records =
                read_records(&path).with_context(|| format!("reading {}", path.display()))?;
            for (index, r) in records.into_iter().enumerate() {
                match r {
                    Ok(record) if filter.matches(&record) => s.entries.push(Entry {
                        file: path.clone(),
                        index,
                        record,
                    }),
                    Ok(_) => {}
                    Err(e) => s.damaged.push(e),
                }
            }
        }
    }
    Ok(s)
}

/// Removes the given entries from their files: a file left with no record
/// is deleted, others are rewritten crash-safely without them (damaged
/// lines are kept as they were).
fn remove_entries(entries: &[Entry]) -> anyhow::Result<()> {
    let mut by_file: std::collections::BTreeMap<&Path, Vec<usize>> = Default::default();
    for e in entries {
        by_file.entry(&e.file).or_default().push(e.index);
    }
    for (path, indexes) in by_file {
        let dir = path.parent().unwrap_or(Path::new("."));
        let text =
            fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let keep: Vec<&str> = text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .filter(|(i, _)| !indexes.contains(i))
            .map(|(_, l)| l)
            .collect();
        if !keep.is_empty() {
            // The rewritten file takes a new name; the old one goes after,
            // so a crash leaves both (records twice), never neither.
            let mut lines = keep.join("\n").into_bytes();
            lines.push(b'\n');
            write_file(dir, QUARANTINE_PREFIX, &lines)
                .with_context(|| format!("rewriting {}", path.display()))?;
        }
        fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
        sync_dir(dir).with_context(|| format!("syncing {}", dir.display()))?;
    }
    Ok(())
}

/// Moves the records matching `filter` (which must name the sink) into that
/// sink's replay inbox, for the sink to send again with their original ids.
/// Returns how many were moved.
pub fn replay(root: &Path, filter: &Filter) -> anyhow::Result<u64> {
    let Some(sink) = &filter.sink else {
        anyhow::bail!("choose the sink to replay for with --sink");
    };
    let found = scan(root, filter)?;
    if found.entries.is_empty() {
        return Ok(0);
    }
    let inbox = root.join(sink).join(INBOX);
    private_dir(&inbox).with_context(|| format!("creating {}", inbox.display()))?;
    let records: Vec<Record> = found.entries.iter().map(|e| e.record.clone()).collect();
    // The inbox file first: a crash before the removal below leaves the
    // records in both places (sent twice, same ids), never in neither.
    write_file(&inbox, INBOX_PREFIX, &encode_lines(&records))
        .with_context(|| format!("writing to {}", inbox.display()))?;
    remove_entries(&found.entries)?;
    Ok(records.len() as u64)
}

/// Deletes the records matching `filter`; refuses an empty filter unless
/// `all` is set. Returns how many were deleted.
pub fn purge(root: &Path, filter: &Filter, all: bool) -> anyhow::Result<u64> {
    if filter.is_empty() && !all {
        anyhow::bail!(
            "purge needs a filter (--sink, --reason, --since, --until, --id), or --all to delete every quarantined event"
        );
    }
    let found = scan(root, filter)?;
    remove_entries(&found.entries)?;
    Ok(found.entries.len() as u64)
}

/// `holdfast quarantine list`: one line per record, then totals.
pub fn render_list(s: &Scan) -> String {
    let mut out = format!(
        "{:<24} {:<16} {:<32} {:>10}  {:<18} {:<6} REASON\n",
        "TIME", "SINK", "ID", "SEQ", "KIND", "STATUS"
    );
    for e in &s.entries {
        let r = &e.record;
        out += &format!(
            "{:<24} {:<16} {:<32} {:>10}  {:<18} {:<6} {}\n",
            r.time,
            r.sink,
            r.id,
            r.seq.map_or("-".to_string(), |s| s.to_string()),
            r.kind,
            r.status.map_or("-".to_string(), |s| s.to_string()),
            r.reason
        );
    }
    out += &format!(
        "\n{} event(s) shown; {} quarantine file(s), {} byte(s) in all",
        s.entries.len(),
        s.files,
        s.bytes
    );
    if s.waiting_replay > 0 {
        out += &format!("; {} event(s) waiting in replay inboxes", s.waiting_replay);
    }
    out.push('\n');
    for d in &s.damaged {
        out += &format!("warning: {d}\n");
    }
    out
}

/// One record as JSON, with the event decoded (`show`, `list --json`).
pub fn record_json(e: &Entry, decode: bool) -> serde_json::Value {
    let r = &e.record;
    let mut v = serde_json::to_value(r).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        if decode {
            let event = match Envelope::decode_event(&r.event) {
                Ok(env) => env.to_json(r.seq.unwrap_or(0)),
                Err(err) => crate::event::raw_json(r.seq.unwrap_or(0), &r.event, &err),
            };
            o.insert("event".into(), event);
        }
        o.insert(
            "quarantine_file".into(),
            e.file.display().to_string().into(),
        );
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(sink: &str, id: &str, kind: &str, ms: u64) -> Record {
        Record {
            v: FORMAT_VERSION,
            sink: sink.into(),
            id: id.into(),
            seq: Some(7),
            source: "syslog".into(),
            signal: "logs".into(),
            file: None,
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

    fn open(root: &Path, sink: &str, max: u64) -> Quarantine {
        Quarantine::open(&QuarantineOptions {
            dir: root.join(sink),
            max_bytes: max,
            when_full: QuarantineFull::Block,
        })
        .unwrap()
    }

    #[test]
    fn records_are_private_durable_files_that_round_trip() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("quarantine");
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

    #[test]
    fn a_full_quarantine_refuses_until_purged() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("quarantine");
        let one = encode_lines(&[record("es", "aa", "rejected", 1)]).len() as u64;
        let q = open(&root, "es", one * 2);
        q.write(&[record("es", "aa", "rejected", 1)]).unwrap();
        q.write(&[record("es", "bb", "rejected", 2)]).unwrap();
        assert!(matches!(
            q.write(&[record("es", "cc", "rejected", 3)]),
            Err(WriteError::Full { .. })
        ));
        // An operator purges one: the next write re-measures and fits.
        let f = Filter {
            id: Some("aa".into()),
            ..Default::default()
        };
        assert_eq!(purge(&root, &f, false).unwrap(), 1);
        q.write(&[record("es", "cc", "rejected", 3)]).unwrap();
    }

    #[test]
    fn filters_select_by_sink_reason_time_and_id() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("quarantine");
        let es = open(&root, "es", 1 << 20);
        let otlp = open(&root, "otlp", 1 << 20);
        es.write(&[
            record("es", "a1", "rejected", 1000),
            record("es", "a2", "retries_exhausted", 2000),
        ])
        .unwrap();
        otlp.write(&[record("otlp", "b1", "partially_rejected", 3000)])
            .unwrap();
        let ids = |f: Filter| -> Vec<String> {
            scan(&root, &f)
                .unwrap()
                .entries
                .into_iter()
                .map(|e| e.record.id)
                .collect()
        };
        assert_eq!(ids(Filter::default()), ["a1", "a2", "b1"]);
        let sink = |s: &str| Filter {
            sink: Some(s.into()),
            ..Default::default()
        };
        assert_eq!(ids(sink("es")), ["a1", "a2"]);
        let reason = |r: &str| Filter {
            reason: Some(r.into()),
            ..Default::default()
        };
        assert_eq!(ids(reason("retries_exhausted")), ["a2"]);
        assert_eq!(ids(reason("because partially")), ["b1"]);
        let window = Filter {
            since_ms: Some(2000),
            until_ms: Some(3000),
            ..Default::default()
        };
        assert_eq!(ids(window), ["a2"]);
        assert!(purge(&root, &Filter::default(), false).is_err());
    }

    #[test]
    fn replay_moves_records_into_the_sinks_inbox() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("quarantine");
        let es = open(&root, "es", 1 << 20);
        es.write(&[
            record("es", "a1", "rejected", 1000),
            record("es", "a2", "retries_exhausted", 2000),
        ])
        .unwrap();
        assert!(replay(&root, &Filter::default()).is_err());
        let f = Filter {
            sink: Some("es".into()),
            reason: Some("rejected".into()),
            ..Default::default()
        };
        assert_eq!(replay(&root, &f).unwrap(), 1);
        let inbox = es.inbox_files().unwrap();
        assert_eq!(inbox.len(), 1);
        let moved = read_records(&inbox[0]).unwrap();
        assert_eq!(moved[0].as_ref().unwrap().id, "a1");
        let left = scan(&root, &Filter::default()).unwrap();
        assert_eq!(left.entries.len(), 1);
        assert_eq!(left.entries[0].record.id, "a2");
        assert_eq!(left.waiting_replay, 1);
        es.finish_inbox_file(&inbox[0]).unwrap();
        assert!(es.inbox_files().unwrap().is_empty());
    }

    #[test]
    fn times_are_dates_or_durations_ago() {
        let now = UNIX_EPOCH + Duration::from_secs(10_000);
        assert_eq!(parse_time("1970-01-01T00:00:05Z", now), Ok(5000));
        assert_eq!(parse_time("1h", now), Ok(6_400_000));
        assert!(parse_time("yesterday", now).is_err());
    }
}
