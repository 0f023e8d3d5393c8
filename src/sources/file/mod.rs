/*!
The `file` source: tails files through rotation, truncation, crashes and bad
lines, and appends every line to the log once.

```text
              tailer thread (blocking)                     appender task (async)
 globs ─ scan ─┐                                    ┌─ append, ≤ 4 in flight ──▶ log
 inotify ──────┼─ identify ─ read ─ split ─ encode ─┤   (acknowledged in order)
               │   (identity.rs) (lines.rs,         └─ checkpoint: acknowledged positions
               │                  multiline.rs,         + log_seq (checkpoint.rs)
               │                  encode.rs)
 startup: checkpoint ─▶ read the log from its log_seq ─▶ positions (recovery.rs)
```

* `discovery.rs` — globs (globset), scans on `scan_interval`, inotify
  wake-ups (notify); polling alone also works.
* `open.rs` — the one way a matched file is opened: regular files only,
  non-blocking, symlinks judged by `follow_symlinks`; what it refuses is
  skipped, logged once and counted.
* `beat.rs` — the tailer thread's heartbeat; a watchdog in [`run`] turns a
  thread that stopped cycling into `/readyz` and a gauge.
* `identity.rs` — which file is which: device + inode + birth time + a hash
  of the first `fingerprint_bytes`; the key each line's id derives from.
* `tailer/` — the thread that follows files through rename, copytruncate,
  deletion and restarts, and keeps descriptors and memory bounded: `mod.rs`
  (streams, the loop), `scan.rs` (finding and identifying files, rotation,
  copies), `read.rs` (reading), `timers.rs` (timeouts, idle files).
* `lines.rs`, `multiline.rs` — `\n` / `\r\n` lines, `max_line_bytes`,
  unfinished last lines, multiline events.
* `encode.rs` — a line as an [`Envelope`](crate::event::Envelope) holding an
  OTLP `LogRecord`, written without per-line allocation; in format 2 only
  the line's own fields, what a file's lines share once per chunk in its
  [`Context`](crate::event::Context) (a group per file and generation).
* `appender.rs` — appends in order with several in flight, pauses when the
  log is full, checkpoints what is acknowledged.
* `checkpoint.rs`, `recovery.rs` — crash-safe checkpoints, and the log scan
  that makes a crash between an append and its checkpoint harmless. The
  source's retention hold on the log (`seglog/hold.rs`) keeps the segments
  that scan reads until a durable checkpoint has passed them.

# The guarantee

A line appended durably is not appended again after a restart, and no line
is lost, because of two rules:

1. The checkpoint is written only from positions whose appends were
   acknowledged, in order. It never runs ahead of the log.
2. It records `log_seq`, a sequence number below which every line it does
   not cover cannot lie. On startup the source reads the log from `log_seq`
   to its end and moves each file past the lines it finds there, so a crash
   after an append and before the next checkpoint repeats nothing.

A new file's identity (its key) is checkpointed before any of its lines is
appended, so recovery can always tell whose lines it finds.

Known limits (see `docs/sources-file.md`): lines written between
copytruncate's copy and its truncation are lost if the copy does not match
the globs (and in any case those written between the copy and the
truncation); a file rotated out of the globs before holdfast ever found
it, or moved out of its directory, or idle for `rotate_wait` after it left
the globs, is not read further (one that left the globs but stayed in its
directory is found again by inode, also after a restart); a line appended
after the last durable checkpoint and evicted (`drop_oldest`, `max_age`)
before a crash is read and appended again after it (a hold keeps segments
from deletion as consumed, not from eviction).
A chunk refused by a full log and overtaken by a later one leaves a gap in
the log: see `recovery.rs` for how the lines past it are not repeated.
*/

mod appender;
mod beat;
pub mod checkpoint;
mod config;
mod discovery;
mod encode;
mod identity;
pub(crate) mod lines;
pub mod metrics;
pub(crate) mod multiline;
mod open;
mod recovery;
mod tailer;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use crate::api::Health;
use crate::component::ComponentContext;
use crate::metrics::Metrics;
use crate::seglog::format::{FRAME_HEADER_LEN, MAX_FRAME_PAYLOAD, SEGMENT_HEADER_LEN};
use crate::seglog::Log;

pub use encode::{
    ATTR_INVALID_UTF8, ATTR_NAME, ATTR_ORIGINAL_BYTES, ATTR_PATH, ATTR_TRUNCATED, SCOPE_NAME,
};
pub use open::{FollowSymlinks, Skip};

/// Defaults, for `config.rs` and for tests.
pub const DEFAULT_FINGERPRINT_BYTES: usize = 1024;
/// The range `fingerprint_bytes` may be set in: 16 B to 1 MiB. Fewer
/// than 16 bytes tell too few files apart (two logs that start with the
/// same timestamp would be one file); checked by the config and again,
/// with the same bounds, by [`run`] for options built in code.
pub const FINGERPRINT_BYTES_RANGE: std::ops::RangeInclusive<usize> = 16..=(1 << 20);
pub const DEFAULT_MAX_LINE_BYTES: usize = 256 << 10;
pub const DEFAULT_SCAN_INTERVAL: Duration = Duration::from_secs(10);
pub const DEFAULT_ROTATE_WAIT: Duration = Duration::from_secs(5);
pub const DEFAULT_IDLE_CLOSE: Duration = Duration::from_secs(300);
pub const DEFAULT_LINE_IDLE_TIMEOUT: Duration = Duration::from_secs(5);
pub const DEFAULT_MULTILINE_TIMEOUT: Duration = Duration::from_secs(1);

/// Set to `1` to switch inotify off (polling only), e.g. to check what a
/// network file system will see.
pub const POLL_ONLY_ENV: &str = "HOLDFAST_FILE_SOURCE_POLL_ONLY";

/// Where to start in files found on the very first start (no checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Beginning,
    End,
}

/// Multiline events: a line matching `start_pattern` starts an event, other
/// lines join the event before them; an event is complete at the next start
/// line or after `timeout` without a new line.
#[derive(Debug, Clone)]
pub struct Multiline {
    pub start_pattern: regex::Regex,
    pub timeout: Duration,
}

/// What a `file` source needs to run (validated settings).
#[derive(Debug, Clone)]
pub struct FileSourceOptions {
    /// Globs of files to follow (`*` does not cross `/`; `**` does).
    pub include: Vec<String>,
    /// Globs of files to leave alone: with a `/`, matched against the full
    /// path; without, against the file name.
    pub exclude: Vec<String>,
    pub start_at: StartAt,
    /// How often the globs are scanned (inotify wakes the scan earlier).
    pub scan_interval: Duration,
    /// Bytes at the start of a file that identify it.
    pub fingerprint_bytes: usize,
    /// A file rotated or deleted away is still read until nothing was added
    /// to it for this long.
    pub rotate_wait: Duration,
    /// A file with nothing new for this long is closed (reopened on change).
    pub idle_close: Duration,
    /// Which symlinks among the matched files are read (`open.rs`).
    pub follow_symlinks: FollowSymlinks,
    /// Longer lines are truncated, marked and counted.
    pub max_line_bytes: usize,
    /// A last line without newline is emitted after the file was idle this long.
    pub line_idle_timeout: Duration,
    pub multiline: Option<Multiline>,
    /// `<data_dir>/checkpoints/<source name>`.
    pub checkpoint_dir: PathBuf,
    /// `process`: what is done to each line before its append (issue 17,
    /// `src/process/`); `None`: lines as read.
    pub process: Option<Arc<crate::process::Chain>>,
}

impl FileSourceOptions {
    /// Options with every default (the config's), following `include`.
    pub fn new(include: Vec<String>, checkpoint_dir: PathBuf) -> FileSourceOptions {
        FileSourceOptions {
            include,
            exclude: Vec::new(),
            start_at: StartAt::End,
            scan_interval: DEFAULT_SCAN_INTERVAL,
            fingerprint_bytes: DEFAULT_FINGERPRINT_BYTES,
            rotate_wait: DEFAULT_ROTATE_WAIT,
            idle_close: DEFAULT_IDLE_CLOSE,
            follow_symlinks: FollowSymlinks::Inside,
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
            line_idle_timeout: DEFAULT_LINE_IDLE_TIMEOUT,
            multiline: None,
            checkpoint_dir,
            process: None,
        }
    }

    fn check(&self) -> anyhow::Result<()> {
        if self.include.is_empty() {
            bail!("include lists no pattern");
        }
        if !FINGERPRINT_BYTES_RANGE.contains(&self.fingerprint_bytes) {
            bail!(
                "fingerprint_bytes is {}: it must be between {} B and {} B",
                self.fingerprint_bytes,
                FINGERPRINT_BYTES_RANGE.start(),
                FINGERPRINT_BYTES_RANGE.end()
            );
        }
        if self.max_line_bytes == 0 {
            bail!("max_line_bytes must be greater than zero");
        }
        if self.scan_interval.is_zero() {
            bail!("scan_interval must be greater than zero");
        }
        Ok(())
    }
}

/// Bytes per chunk (one append) at most; smaller if segments are small.
/// With the chunks queued and in flight this is most of a source's memory
/// (docs/configuration.md, "Memory"): 512 KiB measured 8.5 MiB less peak
/// RSS than 1 MiB at full speed for about 5% more CPU per line, and 256 KiB
/// another 3-6 MiB less (e2e file phase: 25.6-29.2 MiB instead of 32.0)
/// at 700k-890k lines/s.
const CHUNK_BYTES: usize = 256 << 10;
/// How long a stopping source waits for its tailer thread once the
/// appender is done.
const TAILER_STOP_WAIT: Duration = Duration::from_secs(1);
/// Chunks waiting between the tailer and the appender.
const CHANNEL_DEPTH: usize = 2;

/// Open descriptors a source may hold: a quarter of the soft limit.
fn max_open_files() -> usize {
    let soft = std::fs::read_to_string("/proc/self/limits")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Max open files"))
                .and_then(|l| {
                    l.split_whitespace()
                        .nth(3)
                        .and_then(|v| v.parse::<usize>().ok())
                })
        })
        .unwrap_or(1024);
    (soft / 4).clamp(16, 4096)
}

/// The name of the retention hold a `file` source keeps on the log (see
/// `seglog/hold.rs`); the daemon opens the log with it in place.
pub fn hold_name(source: &str) -> String {
    format!("file:{source}")
}

/// Runs the source until `stop` is cancelled, then appends what it holds,
/// writes its checkpoint and returns. Safe to call again after an error (a
/// supervisor restart): it resumes from the checkpoint and the log.
pub async fn run(
    name: String,
    opts: FileSourceOptions,
    log: Log,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    run_with(name, opts, log, metrics, stop, None).await
}

/// [`run`] in the daemon: a tailer thread that stops making progress is
/// listed in `/readyz` (see `beat.rs`).
pub async fn run_in(ctx: ComponentContext, opts: FileSourceOptions) -> anyhow::Result<()> {
    let ComponentContext {
        name,
        log,
        metrics,
        health,
        stop,
    } = ctx;
    run_with(name, opts, log, metrics, stop, Some(health)).await
}

async fn run_with(
    name: String,
    opts: FileSourceOptions,
    log: Log,
    metrics: Arc<Metrics>,
    stop: CancellationToken,
    health: Option<Arc<Health>>,
) -> anyhow::Result<()> {
    opts.check().with_context(|| format!("source {name}"))?;
    // Until the checkpoint is read, the hold keeps everything (or, after a
    // supervisor restart, where the last durable checkpoint put it).
    let hold = log
        .hold(&hold_name(&name))
        .with_context(|| format!("source {name}: taking its hold on the log"))?;
    let counters = tailer::Counters::new(&metrics, &name);
    let lo = log.options();
    // What one append may hold, events and context: a block stored plain
    // (compression that does not pay) has a header and the context's length.
    let max_frame = (lo.segment_bytes as usize)
        .saturating_sub(SEGMENT_HEADER_LEN + FRAME_HEADER_LEN)
        .min(MAX_FRAME_PAYLOAD)
        .saturating_sub(crate::seglog::block::BLOCK_HEADER_LEN + 4);
    let settings = tailer::Settings {
        name: name.clone(),
        opts: opts.clone(),
        max_frame,
        chunk_bytes: CHUNK_BYTES.min(max_frame / 2).max(1),
        max_open: max_open_files(),
        inotify: std::env::var(POLL_ONLY_ENV).map_or(true, |v| v.is_empty() || v == "0"),
    };

    // 1. The checkpoint.
    let loaded = checkpoint::STATE
        .load_at_start::<checkpoint::Checkpoint>(&opts.checkpoint_dir, &name)
        .await?;
    let (ck, first_start) = match loaded {
        checkpoint::Loaded::Missing => (None, true),
        checkpoint::Loaded::Found(ck) => {
            // The log keeps what recovery from the durable checkpoint
            // needs; the unsynced recent one, if newer, only starts the
            // scan later.
            hold.release_below(ck.log_seq);
            let (dir, n) = (opts.checkpoint_dir.clone(), name.clone());
            let ck =
                tokio::task::spawn_blocking(move || appender::load_recent(&dir, &n, ck)).await?;
            (Some(ck), false)
        }
        checkpoint::Loaded::Damaged { reason, moved_to } => {
            counters.checkpoint_errors.inc();
            error!(source = %name, reason = %reason, moved_to = %moved_to.display(),
                "the checkpoint is damaged and was set aside; rebuilding positions from the log (files not found there are read from the start)");
            (None, false)
        }
    };

    // 2. What reached the log after it.
    let from = ck.as_ref().map_or(0, |c| c.log_seq);
    let (l, n) = (log.clone(), name.clone());
    let started = std::time::Instant::now();
    let mut found = tokio::task::spawn_blocking(move || recovery::scan(&l, &n, from))
        .await?
        .with_context(|| {
            format!("source {name}: reading the log from sequence {from} to recover positions")
        })?;
    let mut records = BTreeMap::new();
    let mut advanced = 0;
    let mut ahead = 0;
    if let Some(ck) = &ck {
        for (i, r) in ck.records.iter().enumerate() {
            let mut r = r.clone();
            let (to, rest) = found.resume(r.key, r.generation, r.offset, &r.ahead);
            if to != r.offset {
                advanced += 1;
                r.offset = to;
            }
            ahead += rest.len();
            r.ahead = rest;
            records.insert(i as u64 + 1, r);
        }
    }
    info!(source = %name, files = records.len(), from_seq = from, scanned = found.scanned, lines_found = found.events,
        positions_advanced = advanced, spans_ahead = ahead, ms = started.elapsed().as_millis() as u64,
        "file source recovered its positions");
    let init = tailer::Initial {
        records: records.iter().map(|(id, r)| (*id, r.clone())).collect(),
        first_start,
        found: ck.is_none().then_some(found),
        next_id: records.len() as u64 + 1,
    };

    // 3. The tailer thread and the appender.
    let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_DEPTH);
    let wake = Arc::new(discovery::Wake::default());
    let host = crate::host::host_name();
    let t = tailer::Tailer::new(settings, init, tx, wake.clone(), counters.clone(), &host)
        .map_err(|e| anyhow!("source {name}: {e}"))?;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let watch = tokio::spawn(beat::watchdog(
        name.clone(),
        counters.beat.clone(),
        counters.stalled.clone(),
        health.clone(),
        beat::STALLED_AFTER,
    ));
    std::thread::Builder::new()
        .name(format!("file:{name}"))
        .spawn(move || {
            t.run();
            let _ = done_tx.send(());
        })
        .with_context(|| format!("source {name}: starting the tailer thread"))?;
    let app = appender::Appender::new(
        name.clone(),
        log,
        opts.checkpoint_dir.clone(),
        records,
        counters,
        hold,
    );
    let r = app.run(rx, stop, wake.clone()).await;
    wake.stop();
    // A thread stuck in a system call cannot be ended: it is left behind
    // (it has nothing of the log's) rather than holding up the stop.
    let tailer = tokio::time::timeout(TAILER_STOP_WAIT, done_rx).await;
    beat::end_watch(&name, watch, health.as_deref());
    r?;
    match tailer {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => bail!("source {name}: the tailer thread panicked"),
        Err(_) => {
            error!(source = %name, "the tailer thread did not stop (stuck in a system call); leaving it behind");
            Ok(())
        }
    }
}
