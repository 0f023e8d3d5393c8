/*!
The `journald` source: reads the systemd journal with libsystemd's own
reader (sd-journal, in-process) and appends every entry to the log once,
acknowledging its journal position (the cursor) only after the append is
durable.

```text
 sd-journal (open, filters, seek, next, wait) ── reader thread (reader.rs):
                                                  copy the fields read, encode
                                                  (mapping.rs), skip what is
                                                  already in the log
                                                   │ bounded channel (a batch per message)
                                                   ▼
                                         appender (this file): one append in flight,
                                         then the checkpoint (checkpoint.rs)
 startup: checkpoint ─▶ read the log from its log_seq ─▶ ids to skip
```

# Why sd-journal in-process

`journalctl --output=export` as a child process was the first reader: no
C library linked in, but journalctl alone costs about 5.8 µs of CPU per
entry on the reference machine, over the budget of the 200,000 entries/s
target before holdfast parses anything (`benches/journald.rs` keeps it as
the reference row). sd-journal read in-process, through the `systemd`
crate (which holds the FFI: this module has no `unsafe`), costs about
2 µs per entry with the cursor, and handles every file format and
compression systemd ships, rotation, vacuuming and files being written.

# The guarantee

As for the `file` source (`sources/file/mod.rs`): the checkpoint is written
only from appends that were acknowledged, never ahead of them, and records
`log_seq`, the end of the append of its entry. On start the source reads the
log from `log_seq` and collects the ids of its events there; the reader
seeks to the checkpointed cursor and skips that entry, the entries before
it and every entry whose id it collected. A crash between an append and the
checkpoint therefore appends nothing twice. The source's retention hold
(`seglog/hold.rs`) keeps the segments that scan needs until a durable
checkpoint has passed them.

An entry's id derives from its place in the journal (`mapping.rs`), so the
same entry read again has the same id.

If the checkpointed entry no longer exists (vacuumed while holdfast was
stopped), reading resumes at the oldest entry after where it was; the gap
is logged and counted in `holdfast_dropped_events_total{reason="journal_vacuumed"}`.

Known limits (`docs/sources-journald.md`): the gap count is the number of
journal entries between the two seqnums (other units' included) and unknown
when the journal that held the checkpoint is gone entirely; entries
appended after the last durable checkpoint and evicted from the log before a
crash are appended again (as for files).
*/
// Without the `journald` feature only the sd-journal reader is left out
// (`reader.rs`); what it alone used stays compiled and unit-tested, unused.
#![cfg_attr(not(feature = "journald"), allow(dead_code))]

mod checkpoint;
mod config;
pub(crate) mod mapping;
mod reader;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context};
use tracing::{error, info, warn};

use crate::append_retry::{self, Appended, Retry};
use crate::backoff::Backoff;
use crate::component::ComponentContext;
use crate::event::{Decoder, EventId};
use crate::seglog::{Batch, Hold, Log, LogError};

pub use mapping::{ATTR_TRUNCATED, SCOPE_NAME};

/// Default `max_entry_bytes`.
pub const DEFAULT_MAX_ENTRY_BYTES: usize = 2 << 20;
/// How often acknowledged progress is checkpointed durably (and when the
/// source stops). Between two, the log holds the progress.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(1);
/// Batches waiting between the reader thread and the appender: one, while
/// the one before it is appended.
const CHANNEL_DEPTH: usize = 1;
/// A refused append is tried again after 50 ms, doubling up to 2 s.
const RETRY_BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_secs(2));
/// Full log or failing disk: retried until the source stops.
const RETRY: Retry = Retry {
    wait_for_room: None,
    retry: true,
    back_off_when_full: true,
};

/// Where to start on the very first start (no checkpoint).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAt {
    Beginning,
    End,
}

/// Which journal files a source reads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Journals {
    /// The system journal and this user's, of this machine.
    #[default]
    Local,
    /// The journal files in this directory.
    Directory(PathBuf),
    /// These journal files.
    Files(Vec<PathBuf>),
}

/// Which entries a source reads (the filters). Empty or `None`: all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selection {
    /// `_SYSTEMD_UNIT=u`, and `UNIT=u` from PID 1 (what systemd says about
    /// the unit), for any of these units.
    pub units: Vec<String>,
    /// Entries of these units are read and skipped.
    pub exclude_units: Vec<String>,
    /// This priority or more severe (0 emerg … 7 debug).
    pub min_priority: Option<u8>,
    /// Journal matches, `FIELD=value`, or `+` between alternatives.
    pub matches: Vec<String>,
    pub current_boot_only: bool,
}

/// What a `journald` source needs to run (validated settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournaldOptions {
    pub journals: Journals,
    pub select: Selection,
    pub start_at: StartAt,
    /// Extra journal fields kept as attributes.
    pub fields: Vec<String>,
    /// Larger entries are cut and marked.
    pub max_entry_bytes: usize,
    /// `<data_dir>/checkpoints/<source name>`.
    pub checkpoint_dir: PathBuf,
}

/// The name of the retention hold a `journald` source keeps on the log.
pub fn hold_name(source: &str) -> String {
    format!("journald:{source}")
}

/// Why the journal cannot be read, in words an operator can act on.
fn unreadable(opts: &JournaldOptions, name: &str) -> Option<String> {
    let (dirs, hint) = match &opts.journals {
        Journals::Files(files) => {
            let (f, e) = files
                .iter()
                .find_map(|f| std::fs::File::open(f).err().map(|e| (f, e)))?;
            return Some(format!(
                "journal file {} cannot be read: {e} (sources.{name}.files)",
                f.display()
            ));
        }
        Journals::Directory(d) if !d.is_dir() => {
            return Some(format!(
                "the journal is not readable: the directory {} does not exist (or is not a \
                 directory); set \
                 sources.{name}.directory to where journald writes (/var/log/journal, or \
                 /run/log/journal without persistent storage)",
                d.display()
            ));
        }
        Journals::Directory(d) => (vec![d.clone()], format!("sources.{name}.directory")),
        Journals::Local => (
            vec![
                PathBuf::from("/var/log/journal"),
                PathBuf::from("/run/log/journal"),
            ],
            format!(
                "run holdfast in the group systemd-journal (the packaged unit does), or set \
                 sources.{name}.directory to a journal directory it can read"
            ),
        ),
    };
    if dirs.iter().any(|d| has_readable_journal(d, 2)) {
        return None;
    }
    let list: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    // /proc/self belongs to the process's user: its uid without `unsafe`.
    let uid = std::fs::metadata("/proc/self").map_or_else(
        |_| "?".to_string(),
        |m| std::os::unix::fs::MetadataExt::uid(&m).to_string(),
    );
    if !dirs.iter().any(|d| has_journal(d, 2)) {
        return Some(format!(
            "the journal is not readable: there is no journal file (*.journal) under {}; journald keeps \
             none there (Storage=none, or volatile storage not yet written), or {hint}",
            list.join(" or ")
        ));
    }
    Some(format!(
        "the journal is not readable: no journal file (*.journal) under {} can be opened by \
         this user (uid {uid}); {hint}",
        list.join(" or ")
    ))
}

/// A `*.journal` file in `dir` or its subdirectories, readable or not.
fn has_journal(dir: &Path, depth: u32) -> bool {
    any_journal(dir, depth, &|_, _| true)
}

/// A `*.journal` file we can open in `dir` or its subdirectories (journald
/// keeps them in `<dir>/<machine id>/`).
fn has_readable_journal(dir: &Path, depth: u32) -> bool {
    any_journal(dir, depth, &|p, t| {
        t.is_file() && std::fs::File::open(p).is_ok()
    })
}

/// Whether a `*.journal` (or `*.journal~`) entry under `dir`, at most
/// `depth` directories down, is one `accept` takes.
fn any_journal(dir: &Path, depth: u32, accept: &dyn Fn(&Path, std::fs::FileType) -> bool) -> bool {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return false;
    };
    rd.flatten().any(|e| {
        let p = e.path();
        let is_journal = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".journal") || n.ends_with(".journal~"));
        match e.file_type() {
            Ok(t) if t.is_dir() && depth > 0 => any_journal(&p, depth - 1, accept),
            Ok(t) => is_journal && accept(&p, t),
            _ => false,
        }
    })
}

/// The ids of `source`'s events from `from` to the end of the log.
fn scan(log: &Log, source: &str, from: u64) -> Result<HashSet<EventId>, LogError> {
    let (mut ids, mut decoder, mut reader) = (HashSet::new(), Decoder::new(), log.reader(from));
    while let Some(events) = Some(reader.read(16_384, 16 << 20)?).filter(|e| !e.is_empty()) {
        ids.extend(events.iter().filter_map(|e| {
            let s = decoder
                .decode(&e.data, &e.context, e.seq - e.batch_start)
                .ok()?;
            (s.source() == source).then_some(s.id)
        }));
    }
    Ok(ids)
}

/// Runs the source until `stop` is cancelled, then writes its checkpoint and
/// returns. An unreadable journal or a failed read is an error naming the
/// cause: the supervisor starts the source again (from its checkpoint) and
/// `/readyz` names it meanwhile.
pub async fn run(ctx: ComponentContext, opts: JournaldOptions) -> anyhow::Result<()> {
    let name = ctx.name.clone();
    let o = opts.clone();
    let n = name.clone();
    if let Some(why) = tokio::task::spawn_blocking(move || unreadable(&o, &n)).await? {
        bail!("source {name}: {why}");
    }
    let hold = ctx
        .log
        .hold(&hold_name(&name))
        .with_context(|| format!("source {name}: taking its hold on the log"))?;

    // 1. The checkpoint, and what reached the log after it.
    let loaded = checkpoint::STATE
        .load_at_start::<checkpoint::Checkpoint>(&opts.checkpoint_dir, &name)
        .await?;
    let ck = match loaded {
        checkpoint::Loaded::Missing => None,
        checkpoint::Loaded::Found(ck) => {
            hold.release_below(ck.log_seq);
            Some(ck)
        }
        checkpoint::Loaded::Damaged { reason, moved_to } => {
            error!(source = %name, reason = %reason, moved_to = %moved_to.display(),
                "the checkpoint is damaged and was set aside; starting as configured by start_at, skipping the entries found in the log");
            None
        }
    };
    let from = ck.as_ref().map_or(hold.position(), |c| c.log_seq);
    let (l, n) = (ctx.log.clone(), name.clone());
    let ids = tokio::task::spawn_blocking(move || scan(&l, &n, from))
        .await?
        .with_context(|| format!("source {name}: reading the log from sequence {from}"))?;
    info!(source = %name, from_seq = from, found = ids.len(), cursor = ck.as_ref().map(|c| c.cursor.as_str()),
        "journald source recovered its position");

    // 2. Where reading starts.
    let mut progress = Progress::new(&name, &opts.checkpoint_dir, hold, from);
    let (start, through) = match &ck {
        Some(ck) => (
            reader::Start::Cursor(ck.cursor.clone()),
            Some(mapping::Position::of_cursor(&ck.cursor)),
        ),
        None if opts.start_at == StartAt::Beginning => (reader::Start::Beginning, None),
        None => (reader::Start::End, None),
    };

    // 3. The reader thread, the appender.
    info!(source = %name, start = ?start, "journald source reading the journal");
    let (tx, rx) = tokio::sync::mpsc::channel(CHANNEL_DEPTH);
    let busy = Arc::new(AtomicBool::new(false));
    let lo = ctx.log.options();
    let max_frame = (lo.segment_bytes as usize)
        .min(64 << 20)
        .saturating_sub(8 << 10);
    let settings = reader::Settings {
        name: name.clone(),
        opts,
        max_frame,
        metrics: ctx.metrics.clone(),
        busy: busy.clone(),
    };
    let skip = reader::Skip { through, ids };
    let thread = std::thread::Builder::new()
        .name(format!("journald:{name}"))
        .spawn(move || reader::run(settings, start, skip, tx))
        .with_context(|| format!("source {name}: starting the reader thread"))?;

    let ended = append_loop(&ctx, &mut progress, rx, &busy).await;
    // The loop has dropped its end of the channel: the thread sees it
    // within `reader::WAIT` and ends.
    tokio::task::spawn_blocking(move || thread.join())
        .await?
        .map_err(|_| anyhow!("source {name}: the journal reader thread panicked"))?;
    progress.save().await?;
    match ended {
        Ended::Stopped => Ok(()),
        Ended::Failed(e) => Err(e),
        Ended::Read(why) => Err(anyhow!("source {name}: {why}")),
    }
}

/// Why the append loop ended.
enum Ended {
    Stopped,
    /// The reader failed (why).
    Read(String),
    Failed(anyhow::Error),
}

async fn append_loop(
    ctx: &ComponentContext,
    progress: &mut Progress,
    mut rx: tokio::sync::mpsc::Receiver<reader::Msg>,
    busy: &AtomicBool,
) -> Ended {
    let name = &ctx.name;
    let labels = crate::metrics::SourceLabels {
        source: name.clone(),
    };
    let mut tick = tokio::time::interval(CHECKPOINT_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let msg = tokio::select! {
            biased;
            _ = ctx.stop.cancelled() => return Ended::Stopped,
            _ = tick.tick() => {
                if let Err(e) = progress.save_if_due().await {
                    return Ended::Failed(e);
                }
                continue;
            }
            m = rx.recv() => m,
        };
        let chunk = match msg {
            Some(reader::Msg::Chunk(c)) => c,
            Some(reader::Msg::Ended(why)) => return Ended::Read(why),
            None => return Ended::Read("the journal reader thread ended".to_string()),
        };
        if chunk.events == 0 {
            let seq = ctx.log.next_seq();
            progress.acked(chunk.last, seq, chunk.recovering);
            busy.store(false, Ordering::Release);
            if chunk.save_now {
                if let Err(e) = progress.save().await {
                    return Ended::Failed(e);
                }
            }
            continue;
        }
        if Batch::from_framed(chunk.framed.clone(), chunk.events).is_none() {
            return Ended::Failed(anyhow!("source {name}: a batch was framed wrongly"));
        }
        // Checked above: the same bytes need no walk for each try.
        let batch = || {
            Batch::from_framed_trusted(chunk.framed.clone(), chunk.events)
                .with_context(chunk.context.clone())
        };
        // Keep the batch and stop reading while the log refuses it: the
        // channel fills and the reader thread blocks on it (when_full =
        // "block").
        let mut backoff = RETRY_BACKOFF;
        let appended =
            append_retry::append(&ctx.log, batch, RETRY, &mut backoff, &ctx.stop, |e, wait| {
                warn!(source = %name, error = %e, "the log refused an append; journal reading paused, retrying in {wait:?}");
            })
            .await;
        let range = match appended {
            Appended::Done(r) => Some(r),
            Appended::TooLarge(e) => {
                ctx.metrics.drop_events(
                    &format!("source:{name}"),
                    "too_large",
                    chunk.events as u64,
                );
                let (bytes, max) = match e {
                    LogError::TooLarge { bytes, max } => (bytes, max),
                    _ => (0, 0),
                };
                error!(source = %name, bytes, max, events = chunk.events,
                    "journal entries too large for one log append were dropped; lower max_entry_bytes or raise log.segment_size");
                None
            }
            Appended::GaveUp(..) => return Ended::Stopped,
            Appended::Failed(e) => {
                return Ended::Failed(anyhow!(e).context(format!("source {name}: appending")))
            }
        };
        let seq = match range {
            Some(r) => {
                ctx.metrics
                    .sources
                    .events
                    .get_or_create(&labels)
                    .inc_by(r.len());
                ctx.metrics
                    .sources
                    .bytes
                    .get_or_create(&labels)
                    .inc_by(chunk.bytes);
                r.end
            }
            None => ctx.log.next_seq(),
        };
        progress.acked(chunk.last, seq, chunk.recovering);
        busy.store(false, Ordering::Release);
    }
}

/// The acknowledged position and its checkpoint.
struct Progress {
    name: String,
    dir: PathBuf,
    hold: Hold,
    /// Last entry acknowledged (appended or skipped) and its `log_seq`.
    cursor: Option<String>,
    log_seq: u64,
    saved: Option<(String, u64)>,
    last_save: Instant,
}

impl Progress {
    fn new(name: &str, dir: &Path, hold: Hold, log_seq: u64) -> Progress {
        Progress {
            name: name.to_string(),
            dir: dir.to_path_buf(),
            hold,
            cursor: None,
            log_seq,
            saved: None,
            last_save: Instant::now(),
        }
    }

    /// `cursor` is durable (or skipped) and every later entry of this
    /// source will be at or past `seq`; while `recovering`, entries found
    /// in the log at start are still ahead, so the log position recovery
    /// reads from stays.
    fn acked(&mut self, cursor: String, seq: u64, recovering: bool) {
        self.cursor = Some(cursor);
        if !recovering {
            self.log_seq = self.log_seq.max(seq);
        }
    }

    async fn save_if_due(&mut self) -> anyhow::Result<()> {
        if self.last_save.elapsed() >= CHECKPOINT_INTERVAL {
            self.save().await?;
        }
        Ok(())
    }

    /// Writes the checkpoint durably if it moved, then moves the hold.
    async fn save(&mut self) -> anyhow::Result<()> {
        self.last_save = Instant::now();
        let Some(cursor) = self.cursor.clone() else {
            return Ok(());
        };
        let now = (cursor, self.log_seq);
        if self.saved.as_ref() == Some(&now) {
            return Ok(());
        }
        let ck = checkpoint::Checkpoint::new(&self.name, now.0.clone(), now.1);
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || checkpoint::STATE.save(&dir, &ck))
            .await?
            .with_context(|| {
                format!(
                    "source {}: writing its checkpoint in {}",
                    self.name,
                    self.dir.display()
                )
            })?;
        self.hold.release_below(now.1);
        self.saved = Some(now);
        Ok(())
    }
}
