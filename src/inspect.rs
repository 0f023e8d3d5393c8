/*!
Operator tools over the log directory: `holdfast inspect` and `holdfast dump`
(with `--follow`, a live tap of new events).

Both open the log read-only ([`Log::open_read_only`]): no lock, nothing
changed, so they work whether the daemon is running or not, and they read
the same structures the daemon does through the same code.
*/

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Context;
use serde_json::json;

use crate::daemon::human_bytes;
use crate::event::{self, Decoder};
use crate::seglog::{Log, LogStats};
use crate::sources::file::{self, checkpoint};

fn age_secs(ms: Option<u64>) -> Option<f64> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    ms.map(|t| now.saturating_sub(t) as f64 / 1000.0)
}

/// The stats as JSON, for scripts (`inspect --json`).
pub fn stats_json(dir: &Path, s: &LogStats) -> serde_json::Value {
    let c = &s.counters;
    json!({
        "log_dir": dir.display().to_string(),
        "segments": s.segments,
        "bytes": s.bytes,
        "first_seq": s.first_seq,
        "next_seq": s.next_seq,
        "events": s.next_seq - s.first_seq,
        "oldest_event_age_seconds": age_secs(s.oldest_append_ms),
        "consumers": s.consumers.iter().map(|cs| json!({
            "name": cs.name,
            "committed": cs.committed,
            "lag_events": cs.lag_events,
            "lag_bytes": cs.lag_bytes,
            "oldest_unread_age_seconds": age_secs(cs.oldest_unread_ms),
            "lost": cs.lost.iter().map(|(r, n)| (r.as_str().to_string(), json!(n))).collect::<serde_json::Map<_, _>>(),
            "in_doubt": cs.in_doubt,
        })).collect::<Vec<_>>(),
        "holds": s.holds.iter().map(|(n, seq)| json!({ "name": n, "seq": seq })).collect::<Vec<_>>(),
        "segment_list": s.segment_list.iter().map(|g| json!({
            "base_seq": g.base_seq,
            "bytes": g.bytes,
            "format": g.format,
            "sealed": g.sealed,
        })).collect::<Vec<_>>(),
        "corruption": {
            "corrupt_frames": c.corrupt_frames,
            "corrupt_bytes": c.corrupt_bytes,
            "corrupt_headers": c.corrupt_headers,
            "incomplete_tail_bytes": c.torn_bytes,
            "damaged_cursor_files": c.damaged_cursor_files,
        },
    })
}

/// The stats for a person.
pub fn stats_text(dir: &Path, s: &LogStats) -> String {
    let mut out = String::new();
    let c = &s.counters;
    out += &format!("log            {}\n", dir.display());
    out += &format!("segments       {} ({})\n", s.segments, human_bytes(s.bytes));
    out += &format!(
        "events         {} (sequence {}..{})\n",
        s.next_seq - s.first_seq,
        s.first_seq,
        s.next_seq
    );
    if let Some(a) = age_secs(s.oldest_append_ms) {
        out += &format!("oldest event   {}\n", human_age(a));
    }
    out += &format!(
        "damage         {} corrupt frame(s), {} bytes skipped, {} bad segment header(s), {} damaged cursor file(s)\n",
        c.corrupt_frames, c.corrupt_bytes, c.corrupt_headers, c.damaged_cursor_files
    );
    if c.torn_bytes > 0 {
        out += &format!(
            "tail           {} bytes after the last complete frame (an append in progress, or a torn tail the daemon truncates at start)\n",
            c.torn_bytes
        );
    }
    for (name, seq) in &s.holds {
        out += &format!(
            "hold           {name} at {seq}: consumed segments from there on are kept for its crash recovery\n"
        );
    }
    out += "\nsegment (first seq)      bytes   format   state\n";
    for g in &s.segment_list {
        out += &format!(
            "{:>19} {:>10}   {:>6}   {}\n",
            g.base_seq,
            human_bytes(g.bytes),
            match g.format {
                0 => "?".to_string(),
                v => format!("v{v}"),
            },
            if g.sealed { "sealed" } else { "active" }
        );
    }
    if s.consumers.is_empty() {
        out += "\nconsumers      none\n";
    } else {
        out += "\nconsumer             committed    lag events    lag bytes   oldest unread   lost size/age/corrupt   in doubt\n";
        for cs in &s.consumers {
            let lost: Vec<String> = cs.lost.iter().map(|(_, n)| n.to_string()).collect();
            out += &format!(
                "{:<20} {:>9} {:>13} {:>12}   {:>13}   {:<21}   {}\n",
                cs.name,
                cs.committed,
                cs.lag_events,
                human_bytes(cs.lag_bytes),
                age_secs(cs.oldest_unread_ms).map_or("-".into(), human_age),
                lost.join("/"),
                cs.in_doubt
            );
        }
    }
    out
}

fn human_age(secs: f64) -> String {
    if secs < 120.0 {
        format!("{secs:.0}s ago")
    } else if secs < 7200.0 {
        format!("{:.0}m ago", secs / 60.0)
    } else if secs < 172_800.0 {
        format!("{:.1}h ago", secs / 3600.0)
    } else {
        format!("{:.1}d ago", secs / 86400.0)
    }
}

/// Files and bytes under `dir` (0, 0 if it does not exist).
fn dir_usage(dir: &Path) -> (u64, u64) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0);
    };
    entries
        .flatten()
        .fold((0, 0), |(files, bytes), e| match e.metadata() {
            Ok(m) if m.is_dir() => {
                let (f, b) = dir_usage(&e.path());
                (files + f, bytes + b)
            }
            Ok(m) => (files + 1, bytes + m.len()),
            Err(_) => (files, bytes),
        })
}

/// The retention holds of the `file` sources beside the log
/// (`<data_dir>/checkpoints/<source>/checkpoint.json`): a running daemon
/// keeps each at its source's durable checkpoint's `log_seq`, and the next
/// start puts it there, so the checkpoint files show them while the daemon
/// runs or not. Read only: a damaged file is skipped, not moved aside.
fn file_source_holds(log_dir: &Path) -> Vec<(String, u64)> {
    let Some(dir) = log_dir.parent().map(|d| d.join("checkpoints")) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut holds: Vec<(String, u64)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let bytes = std::fs::read(e.path().join(checkpoint::FILE)).ok()?;
            let ck = checkpoint::decode(&bytes, &name).ok()?;
            Some((file::hold_name(&name), ck.log_seq))
        })
        .collect();
    holds.sort();
    holds
}

/// `holdfast inspect`: the log, and the quarantine beside it
/// (`<data_dir>/quarantine`; `holdfast quarantine list` shows its records).
pub fn inspect(log_dir: &Path, as_json: bool) -> anyhow::Result<String> {
    let log = Log::open_read_only(log_dir)
        .with_context(|| format!("reading the log in {}", log_dir.display()))?;
    let mut s = log.stats();
    for (name, seq) in file_source_holds(log_dir) {
        if !s.holds.iter().any(|(n, _)| *n == name) {
            s.holds.push((name, seq.max(s.first_seq)));
        }
    }
    let quarantine = log_dir.parent().map(|d| d.join("quarantine"));
    let (q_files, q_bytes) = quarantine.as_deref().map_or((0, 0), dir_usage);
    Ok(if as_json {
        let mut v = stats_json(log_dir, &s);
        v["quarantine"] = json!({ "files": q_files, "bytes": q_bytes });
        let mut t = serde_json::to_string_pretty(&v)?;
        t.push('\n');
        t
    } else {
        let mut t = stats_text(log_dir, &s);
        t += &format!(
            "\nquarantine     {} file(s), {} (holdfast quarantine list)\n",
            q_files,
            human_bytes(q_bytes)
        );
        t
    })
}

/// Where `holdfast dump` starts.
#[derive(Debug, Clone)]
pub enum DumpFrom {
    Seq(u64),
    /// The named consumer's committed position: what it has not finished.
    Consumer(String),
    /// The end of the log when it is opened: only events appended later
    /// (`--follow` without a start).
    End,
}

/// What `holdfast dump` prints beyond where it starts.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Stop before this sequence number.
    pub to: Option<u64>,
    /// Print at most this many events.
    pub limit: Option<u64>,
    /// Only events of this source.
    pub source: Option<String>,
    /// Keep printing events as they are appended (`--follow`).
    pub follow: Option<Follow>,
}

/// How `dump --follow` waits for new events.
#[derive(Debug, Clone)]
pub struct Follow {
    /// How often the segment files are looked at for growth or a roll.
    pub poll: std::time::Duration,
    /// Set (by a SIGINT or SIGTERM handler) to end the dump.
    pub stop: &'static AtomicBool,
}

/// `holdfast dump`: events as NDJSON, from a sequence number or a consumer's
/// cursor, up to `to` (exclusive) or `limit` events; with `follow`, then
/// every event appended later, until `stop` is set.
///
/// Following stays read-only: the log is opened without its lock as a
/// snapshot ([`Log::open_read_only`]), and opened again whenever a segment
/// file grew or appeared (a write or a roll; segments only grow by appends),
/// which a poll of their names and lengths sees. An evicted start is read
/// from the oldest event left, as without `follow`. A closed stdout (`| head`)
/// ends it quietly.
pub fn dump(
    log_dir: &Path,
    from: DumpFrom,
    opts: &DumpOptions,
    out: &mut dyn Write,
) -> anyhow::Result<u64> {
    let open = || {
        Log::open_read_only(log_dir)
            .with_context(|| format!("reading the log in {}", log_dir.display()))
    };
    let mut seen = segment_sizes(log_dir);
    let t = std::time::Instant::now();
    let mut log = open()?;
    let mut opened = t.elapsed();
    let mut next = match from {
        DumpFrom::Seq(s) => s,
        DumpFrom::End => log.next_seq(),
        DumpFrom::Consumer(name) => {
            let s = log.stats();
            let c = s
                .consumers
                .iter()
                .find(|c| c.name == name)
                .with_context(|| {
                    let known: Vec<&str> = s.consumers.iter().map(|c| c.name.as_str()).collect();
                    format!(
                        "no consumer named {name:?}; consumers: {}",
                        known.join(", ")
                    )
                })?;
            c.committed
        }
    };
    let mut printer = Printer {
        opts,
        decoder: Decoder::new(),
        printed: 0,
    };
    loop {
        let done = match printer.print(&log, &mut next, out) {
            Err(e) if is_broken_pipe(&e) => return Ok(printer.printed),
            r => r?,
        };
        let Some(follow) = &opts.follow else {
            break;
        };
        if done {
            break;
        }
        // Wait for a segment to grow or appear, then look again; each look
        // reads the active segment, so a slow one (a large segment) spaces
        // the next out rather than keep a core busy beside the daemon.
        let pause = follow.poll.max(opened * 4);
        loop {
            if follow.stop.load(Ordering::Relaxed) {
                return Ok(printer.printed);
            }
            std::thread::sleep(pause);
            let now = segment_sizes(log_dir);
            if now != seen {
                seen = now;
                break;
            }
        }
        // A snapshot taken while the daemon rolls or evicts may fail; the
        // next change is waited for and the log opened again.
        let t = std::time::Instant::now();
        match open() {
            Ok(l) => log = l,
            Err(_) => seen.clear(),
        }
        opened = t.elapsed();
    }
    Ok(printer.printed)
}

/// The names and lengths of the segment files: what changes when the
/// daemon appends (segments only grow, by appends) or rolls.
fn segment_sizes(log_dir: &Path) -> Vec<(std::ffi::OsString, u64)> {
    let Ok(entries) = std::fs::read_dir(log_dir) else {
        return Vec::new();
    };
    let mut v: Vec<_> = entries
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "seg"))
        .filter_map(|e| Some((e.file_name(), e.metadata().ok()?.len())))
        .collect();
    v.sort();
    v
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind())
                .is_some_and(|k| k == std::io::ErrorKind::BrokenPipe)
    })
}

/// Prints the events of one snapshot of the log.
struct Printer<'o> {
    opts: &'o DumpOptions,
    decoder: Decoder,
    printed: u64,
}

impl Printer<'_> {
    /// Prints from `next` to the snapshot's end and moves `next` past what
    /// it read; true once `to` or `limit` is reached.
    fn print(&mut self, log: &Log, next: &mut u64, out: &mut dyn Write) -> anyhow::Result<bool> {
        let mut reader = log.reader(*next);
        let done = loop {
            let batch = reader.read(1024, 4 << 20)?;
            if batch.is_empty() {
                break false;
            }
            for e in batch {
                if self.opts.to.is_some_and(|t| e.seq >= t)
                    || self.opts.limit.is_some_and(|l| self.printed >= l)
                {
                    out.flush()?;
                    return Ok(true);
                }
                *next = e.seq + 1;
                // Either format, the same line (the `file` sink's).
                let index = e.seq.saturating_sub(e.batch_start);
                let v = match self.decoder.decode(&e.data, &e.context, index) {
                    Ok(ev) => {
                        if self.opts.source.as_ref().is_some_and(|s| *s != ev.source()) {
                            continue;
                        }
                        crate::sinks::file::event_json(&ev, &e.context, e.seq)
                    }
                    Err(err) => event::raw_json(e.seq, &e.data, &err),
                };
                serde_json::to_writer(&mut *out, &v)?;
                out.write_all(b"\n")?;
                self.printed += 1;
                // Ends a follow at once, not at the next event.
                if self.opts.limit.is_some_and(|l| self.printed >= l) {
                    out.flush()?;
                    return Ok(true);
                }
            }
        };
        out.flush()?;
        Ok(done)
    }
}
