//! `holdfast quarantine list | show | replay | purge`: the operator's tools
//! over every sink's quarantine (`<data_dir>/quarantine`), with the daemon
//! running or not. The store they read and rewrite, and why a file is
//! never written by both, is [`crate::sinks::quarantine`].

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use crate::event::Envelope;
use crate::seglog::sync_dir;
use crate::sinks::quarantine::{
    dir_entries, encode_lines, files, private_dir, read_records, write_file, Record, INBOX,
    INBOX_PREFIX, QUARANTINE_PREFIX,
};

/// Which records an operator command applies to. Every field that is set
/// must match.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub sink: Option<String>,
    /// Matches the record's `kind` exactly, or a part of its `reason`.
    pub reason: Option<String>,
    /// When it was quarantined.
    pub window: Window,
    /// The event id (32 hex digits).
    pub id: Option<String>,
}

/// A span of time, unix ms: at or after `since_ms`, before `until_ms`;
/// an unset end is open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Window {
    pub since_ms: Option<u64>,
    pub until_ms: Option<u64>,
}

impl Window {
    pub fn contains(&self, t_ms: u64) -> bool {
        self.since_ms.is_none_or(|t| t_ms >= t) && self.until_ms.is_none_or(|t| t_ms < t)
    }
}

impl Filter {
    pub fn matches(&self, r: &Record) -> bool {
        self.sink.as_ref().is_none_or(|s| &r.sink == s)
            && self.reason.as_ref().is_none_or(|x| {
                &r.kind == x || r.reason.contains(x.as_str()) || r.error.contains(x.as_str())
            })
            && self.window.contains(r.time_ms)
            && self
                .id
                .as_ref()
                .is_none_or(|i| r.id.eq_ignore_ascii_case(i))
    }

    /// Whether no filter is set (every record matches).
    pub fn is_empty(&self) -> bool {
        self.sink.is_none()
            && self.reason.is_none()
            && self.window == Window::default()
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

/// A record found by a scan, and where it is (which only the commands
/// here that rewrite files need).
#[derive(Debug, Clone)]
pub struct Entry {
    file: PathBuf,
    /// Index among the file's lines that hold something.
    index: usize,
    record: Record,
}

impl Entry {
    pub fn record(&self) -> &Record {
        &self.record
    }

    pub fn into_record(self) -> Record {
        self.record
    }

    /// The quarantine file that holds it.
    pub fn file(&self) -> &Path {
        &self.file
    }
}

/// What a scan found.
#[derive(Debug, Default)]
pub struct Scan {
    /// Matching records, oldest file first.
    pub entries: Vec<Entry>,
    /// Lines that are not records (reported, never touched).
    pub damaged: Vec<String>,
    pub totals: Totals,
}

/// What the scanned sinks' quarantines hold, matching or not: the summary
/// line of `quarantine list`.
#[derive(Debug, Default)]
pub struct Totals {
    /// Quarantine files and their bytes.
    pub files: u64,
    pub bytes: u64,
    /// Records in the sinks' replay inboxes, waiting to be sent.
    pub waiting_replay: u64,
}

/// The sink directories under `root` (`<data_dir>/quarantine`).
fn sink_dirs(root: &Path) -> io::Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for e in dir_entries(root)? {
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
            s.totals.waiting_replay += read_records(&inbox)?.len() as u64;
        }
        for path in
            files(&dir, QUARANTINE_PREFIX).with_context(|| format!("listing {}", dir.display()))?
        {
            s.totals.files += 1;
            s.totals.bytes += fs::metadata(&path).map_or(0, |m| m.len());
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
            reason_and_error(r)
        );
    }
    out += &format!(
        "\n{} event(s) shown; {} quarantine file(s), {} byte(s) in all",
        s.entries.len(),
        s.totals.files,
        s.totals.bytes
    );
    if s.totals.waiting_replay > 0 {
        out += &format!(
            "; {} event(s) waiting in replay inboxes",
            s.totals.waiting_replay
        );
    }
    out.push('\n');
    for d in &s.damaged {
        out += &format!("warning: {d}\n");
    }
    out
}

/// The reason, then what the receiver said (`mapper_parsing_exception …`),
/// on one line: the receiver's words are what the operator acts on.
fn reason_and_error(r: &Record) -> String {
    let error: String = r.error.split_whitespace().collect::<Vec<_>>().join(" ");
    if error.is_empty() {
        return r.reason.clone();
    }
    const MAX: usize = 200;
    let cut = match error.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &error[..i]),
        None => error,
    };
    format!("{}: {cut}", r.reason)
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
    use std::time::Duration;

    use super::*;
    use crate::sinks::quarantine::testing::{open, record, temp_root};
    use crate::sinks::quarantine::WriteError;

    #[test]
    fn a_full_quarantine_refuses_until_purged() {
        let (_tmp, root) = temp_root();
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
        let (_tmp, root) = temp_root();
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
        // What the receiver said is searchable too, and shown (issue 27).
        assert_eq!(ids(reason("mapper_parsing")), ["a1", "a2", "b1"]);
        let listed = render_list(&scan(&root, &sink("es")).unwrap());
        assert!(
            listed.contains("because rejected: mapper_parsing_exception"),
            "{listed}"
        );
        let window = Filter {
            window: Window {
                since_ms: Some(2000),
                until_ms: Some(3000),
            },
            ..Default::default()
        };
        assert_eq!(ids(window), ["a2"]);
        assert!(purge(&root, &Filter::default(), false).is_err());
    }

    #[test]
    fn replay_moves_records_into_the_sinks_inbox() {
        let (_tmp, root) = temp_root();
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
        assert_eq!(left.totals.waiting_replay, 1);
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
