/*!
The `file` sink: delivered events as NDJSON in size-rotated files.

Files are named `holdfast-<first sequence, 20 digits>.ndjson` in the sink's
directory, so a listing sorts them in log order. One line per event: the
envelope in the OTLP/JSON mapping plus its `seq` (see
[`Envelope::to_json`](crate::event::Envelope::to_json)), the same line for an
event of either log format.

Durability: each batch is written, `fdatasync`ed, and only then is the
sink's cursor committed. After a crash the sink cuts off a partial last line
and skips every event whose sequence number is already in the newest file,
so a line is written once even across kill -9; the cursor only decides where
reading starts.

Eviction: the events of a batch are claimed from the log before they are
written and released once synced. Events the log evicted before the claim
were counted lost for this sink and are not written; events evicted while
being written are written (from the memory map of the unlinked segment) and
not counted.

Space: when the directory exceeds `max_bytes`, the oldest files are removed
and their lines counted in `holdfast_dropped_events_total{reason="output_retention"}`.
*/

mod config;

pub use config::DROP_REASONS;

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::event::{self, Decoder, Stored};
use crate::metrics::{Metrics, SinkLabels};
use crate::seglog::{Event, Log, Outcome, StartAt};
use crate::sinks::delivery::options::BURST_TAIL_LULL;

/// What a `file` sink needs to run (validated settings).
#[derive(Debug, Clone, PartialEq)]
pub struct FileSinkOptions {
    pub dir: PathBuf,
    /// Source names whose events this sink writes.
    pub inputs: Vec<String>,
    pub max_file_bytes: u64,
    pub max_bytes: u64,
    pub batch_max_events: usize,
    pub batch_timeout: Duration,
}

const PREFIX: &str = "holdfast-";
const SUFFIX: &str = ".ndjson";
/// Bytes of events read from the log per batch, whatever `batch_max_events`.
const BATCH_READ_BYTES: usize = 4 << 20;

fn file_name(first_seq: u64) -> String {
    format!("{PREFIX}{first_seq:020}{SUFFIX}")
}

fn parse_name(name: &str) -> Option<u64> {
    name.strip_prefix(PREFIX)?
        .strip_suffix(SUFFIX)?
        .parse()
        .ok()
}

/// The output directory's files, oldest first, with their sizes.
fn list(dir: &Path) -> anyhow::Result<Vec<(u64, PathBuf, u64)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let entry = entry?;
        if let Some(first) = entry.file_name().to_str().and_then(parse_name) {
            let len = entry.metadata()?.len();
            files.push((first, entry.path(), len));
        }
    }
    files.sort_unstable_by_key(|f| f.0);
    Ok(files)
}

fn sync_dir(dir: &Path) -> anyhow::Result<()> {
    crate::seglog::sync_dir(dir).with_context(|| format!("syncing directory {}", dir.display()))
}

/// Cuts a partial last line off `path` and returns the `seq` of the last
/// complete line, if any. Reads backwards in chunks, never the whole file.
fn recover_tail(path: &Path) -> anyhow::Result<Option<u64>> {
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    let len = f.metadata()?.len();
    let mut end = len;
    let mut newline_positions = Vec::new();
    let mut buf = vec![0u8; 64 << 10];
    // Find the last two newlines: the last complete line lies between them.
    while end > 0 && newline_positions.len() < 2 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        f.seek(SeekFrom::Start(start))?;
        f.read_exact(chunk)?;
        for (i, b) in chunk.iter().enumerate().rev() {
            if *b == b'\n' {
                newline_positions.push(start + i as u64);
                if newline_positions.len() == 2 {
                    break;
                }
            }
        }
        end = start;
    }
    let Some(&last_nl) = newline_positions.first() else {
        if len > 0 {
            warn!(file = %path.display(), bytes = len, "output file holds only a partial line (torn write); truncating it");
            f.set_len(0)?;
            f.sync_data()?;
        }
        return Ok(None);
    };
    if last_nl + 1 < len {
        warn!(file = %path.display(), offset = last_nl + 1, bytes = len - last_nl - 1,
            "cutting a partial last line off the output file (torn write)");
        f.set_len(last_nl + 1)?;
        f.sync_data()?;
    }
    let line_start = newline_positions.get(1).map_or(0, |p| p + 1);
    let mut line = vec![0u8; (last_nl - line_start) as usize];
    f.seek(SeekFrom::Start(line_start))?;
    f.read_exact(&mut line)?;
    let seq = serde_json::from_slice::<serde_json::Value>(&line)
        .ok()
        .and_then(|v| v.get("seq").and_then(|s| s.as_u64()));
    Ok(seq)
}

fn count_lines(path: &Path) -> u64 {
    let Ok(mut f) = File::open(path) else {
        return 0;
    };
    let mut buf = vec![0u8; 64 << 10];
    let mut n = 0;
    while let Ok(k) = f.read(&mut buf) {
        if k == 0 {
            break;
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count() as u64;
    }
    n
}

struct Output {
    dir: PathBuf,
    opts: FileSinkOptions,
    /// Oldest first: (first seq, path, bytes).
    files: Vec<(u64, PathBuf, u64)>,
    current: Option<File>,
}

impl Output {
    fn open(opts: &FileSinkOptions) -> anyhow::Result<(Output, Option<u64>)> {
        let dir = opts.dir.clone();
        fs::create_dir_all(&dir)
            .with_context(|| format!("creating output directory {}", dir.display()))?;
        // Records are not sanitized: keep them from other users.
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o750))
            .with_context(|| format!("setting permissions of {}", dir.display()))?;
        let mut files = list(&dir)?;
        let mut last_written = None;
        if let Some(newest) = files.last_mut() {
            last_written = recover_tail(&newest.1)?;
            newest.2 = fs::metadata(&newest.1)?.len();
        }
        let current = match files.last() {
            Some((_, path, _)) => Some(
                OpenOptions::new()
                    .append(true)
                    .open(path)
                    .with_context(|| format!("opening {}", path.display()))?,
            ),
            None => None,
        };
        Ok((
            Output {
                dir,
                opts: opts.clone(),
                files,
                current,
            },
            last_written,
        ))
    }

    fn total_bytes(&self) -> u64 {
        self.files.iter().map(|f| f.2).sum()
    }

    /// Starts a new file whose first line will be `first_seq`.
    fn rotate(&mut self, first_seq: u64) -> anyhow::Result<()> {
        if let Some(f) = self.current.take() {
            f.sync_data()
                .context("syncing the output file before rotating")?;
        }
        let path = self.dir.join(file_name(first_seq));
        let f = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .open(&path)
            .with_context(|| format!("creating output file {}", path.display()))?;
        sync_dir(&self.dir)?;
        self.files.push((first_seq, path, 0));
        self.current = Some(f);
        Ok(())
    }

    /// Appends the lines, rotating by size, and syncs.
    fn write(&mut self, lines: &[(u64, Vec<u8>)]) -> anyhow::Result<()> {
        let mut pending: Vec<u8> = Vec::new();
        for (seq, line) in lines {
            let cur_len = self.files.last().map_or(0, |f| f.2) + pending.len() as u64;
            if self.current.is_none()
                || (cur_len > 0 && cur_len + line.len() as u64 > self.opts.max_file_bytes)
            {
                self.flush(&mut pending)?;
                self.rotate(*seq)?;
            }
            pending.extend_from_slice(line);
        }
        self.flush(&mut pending)?;
        if let Some(f) = &self.current {
            f.sync_data().context("syncing the output file")?;
        }
        Ok(())
    }

    fn flush(&mut self, pending: &mut Vec<u8>) -> anyhow::Result<()> {
        if pending.is_empty() {
            return Ok(());
        }
        let (Some(f), Some(last)) = (&mut self.current, self.files.last_mut()) else {
            anyhow::bail!("no output file open");
        };
        f.write_all(pending)
            .with_context(|| format!("writing {}", last.1.display()))?;
        last.2 += pending.len() as u64;
        pending.clear();
        Ok(())
    }

    /// Removes the oldest files beyond `max_bytes`; returns the lines removed.
    fn enforce_budget(&mut self) -> anyhow::Result<u64> {
        let mut removed = 0;
        while self.total_bytes() > self.opts.max_bytes && self.files.len() > 1 {
            let (_, path, bytes) = self.files.remove(0);
            let lines = count_lines(&path);
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
            info!(file = %path.display(), bytes, lines, "removed the oldest output file (max_bytes)");
            removed += lines;
        }
        if removed > 0 {
            sync_dir(&self.dir)?;
        }
        Ok(removed)
    }
}

/// Runs the sink until `stop` is cancelled. The caller restarts it on error.
pub async fn run(
    name: String,
    opts: FileSinkOptions,
    log: Log,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let (mut out, last_written) = {
        let opts = opts.clone();
        tokio::task::spawn_blocking(move || Output::open(&opts)).await??
    };
    let mut consumer = log
        .consumer(&name, StartAt::Oldest)
        .with_context(|| format!("opening the log consumer for sink {name}"))?;
    let ledger = consumer.ledger();
    let labels = SinkLabels { sink: name.clone() };
    let component = format!("sink:{name}");
    info!(sink = %name, dir = %opts.dir.display(), from = consumer.position(), "file sink started");
    // Decodes each batch context once, for all the batch's events.
    let mut decoder = Decoder::new();

    // The batch before went because it was full: this one is the next of
    // a burst, and goes once reading finds nothing new for a moment.
    let mut after_full = false;
    loop {
        let mut events: Vec<Event> = tokio::select! {
            _ = stop.cancelled() => break,
            r = consumer.read_wait(opts.batch_max_events, BATCH_READ_BYTES) => r?,
        };
        // Fill the batch for up to `batch_timeout`: fewer, larger syncs.
        let deadline = Instant::now() + opts.batch_timeout;
        while events.len() < opts.batch_max_events {
            let more = consumer.read(opts.batch_max_events - events.len(), BATCH_READ_BYTES)?;
            if !more.is_empty() {
                events.extend(more);
                continue;
            }
            let mut left = deadline.saturating_duration_since(Instant::now());
            if after_full {
                left = left.min(BURST_TAIL_LULL);
            }
            if left.is_zero() || stop.is_cancelled() {
                break;
            }
            tokio::select! {
                _ = consumer.wait() => {}
                _ = tokio::time::sleep(left) => break,
                _ = stop.cancelled() => break,
            }
        }
        after_full = events.len() >= opts.batch_max_events;
        let Some(last) = events.last().map(|e| e.seq) else {
            continue;
        };
        let claimed: Vec<u64> = events.iter().map(|e| e.seq).collect();
        let mut ok = ledger.claim(&claimed).into_iter();
        // Refused: evicted and counted lost meanwhile.
        events.retain(|_| ok.next().unwrap_or(true));
        let lines: Vec<(u64, Vec<u8>)> = events
            .iter()
            .filter(|e| last_written.is_none_or(|w| e.seq > w))
            .filter_map(|e| {
                let value = match decoder.decode(
                    &e.data,
                    &e.context,
                    e.seq.saturating_sub(e.batch_start),
                ) {
                    Ok(ev) if opts.inputs.iter().any(|i| i == ev.source()) => {
                        event_json(&ev, &e.context, e.seq)
                    }
                    Ok(_) => return None,
                    Err(err) => event::raw_json(e.seq, &e.data, &err),
                };
                let mut line = serde_json::to_vec(&value).ok()?;
                line.push(b'\n');
                Some((e.seq, line))
            })
            .collect();
        let bytes: u64 = lines.iter().map(|l| l.1.len() as u64).sum();
        let n = lines.len() as u64;
        let (o, removed) = tokio::task::spawn_blocking(move || {
            let r = out.write(&lines).and_then(|_| out.enforce_budget());
            (out, r)
        })
        .await?;
        out = o;
        let removed = removed?;
        ledger.release(&claimed, Outcome::Finished);
        consumer.commit(last + 1)?;
        metrics.sinks.events_sent.get_or_create(&labels).inc_by(n);
        metrics
            .sinks
            .bytes_sent
            .get_or_create(&labels)
            .inc_by(bytes);
        if removed > 0 {
            metrics.drop_events(&component, "output_retention", removed);
        }
    }
    info!(sink = %name, position = consumer.position(), "file sink stopped");
    Ok(())
}

/// The line of `ev` (see the module doc). A format-1 event (empty
/// `context`) is already whole: written without rebuilding it.
pub(crate) fn event_json(ev: &Stored, context: &[u8], seq: u64) -> serde_json::Value {
    if context.is_empty() {
        ev.env.to_json(seq)
    } else {
        ev.to_json(seq)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sinks::test_events::{both_formats, mixed};

    #[test]
    fn both_log_formats_give_the_same_line() {
        let envs = mixed();
        for (a, b) in both_formats(&envs, 5) {
            let seq = b.pos.seq().unwrap();
            let (ja, jb) = (
                event_json(&a.ev, &a.context, seq),
                event_json(&b.ev, &b.context, seq),
            );
            assert_eq!(ja, envs[(seq - 5) as usize].to_json(seq));
            assert_eq!(
                serde_json::to_string(&ja).unwrap(),
                serde_json::to_string(&jb).unwrap()
            );
        }
    }

    #[test]
    fn a_torn_last_line_is_cut_and_the_last_seq_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(0));
        fs::write(&p, b"{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3,\"par").unwrap();
        assert_eq!(recover_tail(&p).unwrap(), Some(2));
        assert_eq!(fs::read(&p).unwrap(), b"{\"seq\":1}\n{\"seq\":2}\n");
        fs::write(&p, b"{\"seq\":7}\n").unwrap();
        assert_eq!(recover_tail(&p).unwrap(), Some(7));
        fs::write(&p, b"partial").unwrap();
        assert_eq!(recover_tail(&p).unwrap(), None);
        assert_eq!(fs::read(&p).unwrap(), b"");
    }

    #[test]
    fn files_rotate_by_size_and_the_oldest_go_beyond_the_budget() {
        let dir = tempfile::tempdir().unwrap();
        let opts = FileSinkOptions {
            dir: dir.path().join("out"),
            inputs: vec![],
            max_file_bytes: 100,
            max_bytes: 250,
            batch_max_events: 10,
            batch_timeout: Duration::ZERO,
        };
        let (mut out, last) = Output::open(&opts).unwrap();
        assert_eq!(last, None);
        let line = |s: u64| {
            (
                s,
                format!("{{\"seq\":{s},\"pad\":\"{}\"}}\n", "x".repeat(30)).into_bytes(),
            )
        };
        out.write(&(0..10).map(line).collect::<Vec<_>>()).unwrap();
        assert!(out.files.len() >= 4);
        let removed = out.enforce_budget().unwrap();
        assert!(removed > 0);
        assert!(out.total_bytes() <= 250);
        let (_, last) = Output::open(&opts).unwrap();
        assert_eq!(last, Some(9));
    }
}
